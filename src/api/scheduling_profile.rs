//! SchedulingProfile: one kube-scheduler profile, kept in the cluster instead of a config file.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, LabelSelector};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// A scheduling profile: which plugins run at which extension point, with which weights and
/// arguments, for the pods whose `spec.schedulerName` equals this profile's `schedulerName`.
///
/// It has the shape and the meaning of a profile in kube-scheduler's KubeSchedulerConfiguration
/// (v1), but it is read live: a change takes effect from the next scheduling cycle, with no
/// restart. The status tells whether the profile is serving and which plugins run where.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tether.dev",
    version = "v1alpha1",
    kind = "SchedulingProfile",
    doc = "A scheduling profile of tether: the plugins, weights and plugin arguments used for the pods whose spec.schedulerName equals spec.schedulerName. Changes take effect live; status.conditions tells whether the profile serves.",
    shortname = "sp",
    category = "tether",
    status = "SchedulingProfileStatus",
    printcolumn = r#"{"name":"Scheduler","type":"string","jsonPath":".spec.schedulerName","description":"The spec.schedulerName of the pods this profile schedules"}"#,
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status","description":"Whether this profile is serving"}"#,
    printcolumn = r#"{"name":"Reason","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].reason","description":"Why the profile is or is not serving"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[x_kube(validation = Rule::new("self.podInitialBackoffSeconds <= self.podMaxBackoffSeconds")
    .message("podInitialBackoffSeconds must not exceed podMaxBackoffSeconds")
    .field_path(".podInitialBackoffSeconds"))]
#[serde(rename_all = "camelCase")]
pub struct SchedulingProfileSpec {
    /// The scheduler name this profile serves: pods whose `spec.schedulerName` equals it are
    /// scheduled with this profile. A DNS-1123 subdomain; `default-scheduler` belongs to
    /// kube-scheduler and is refused. Two profiles may not claim the same name: the older one
    /// serves and the newer one reports Ready=False.
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    #[x_kube(validation = Rule::new("self != 'default-scheduler'")
        .message("must not be default-scheduler: that name belongs to kube-scheduler"))]
    pub scheduler_name: String,

    /// The share of feasible nodes, in percent, after which the scheduler stops looking for more
    /// and scores what it found. 0 (the default) lets tether choose adaptively from the cluster
    /// size, as kube-scheduler does; 100 always considers every node.
    #[serde(default)]
    #[schemars(range(min = 0, max = 100))]
    pub percentage_of_nodes_to_score: i32,

    /// The backoff, in seconds, after a pod's first failed attempt. It doubles with every further
    /// failure up to podMaxBackoffSeconds. Default 1, at most 86400 (a day).
    #[serde(default = "default_initial_backoff")]
    #[schemars(range(min = 1, max = 86400))]
    pub pod_initial_backoff_seconds: i64,

    /// The longest backoff, in seconds, between two attempts to schedule a pod. Default 10, at
    /// most 86400 (a day).
    #[serde(default = "default_max_backoff")]
    #[schemars(range(min = 1, max = 86400))]
    pub pod_max_backoff_seconds: i64,

    /// The plugins to enable and disable at each extension point, on top of the default set.
    /// Same shape and semantics as KubeSchedulerConfiguration v1 `plugins`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<Plugins>,

    /// Arguments for individual plugins, one entry per plugin name. A plugin without an entry
    /// runs with its default arguments. Unknown fields in `args` make the profile invalid.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(length(max = 64))]
    pub plugin_config: Vec<PluginConfig>,

    /// The namespaces whose pods this profile schedules without their naming it: a pod created
    /// in a namespace whose labels match **and that opted in to this profile** (the namespace's
    /// label `tether.dev/scheduling-profile` names it, which only who may label the namespace
    /// can set), with no scheduler of its own (`spec.schedulerName` unset, hence
    /// `default-scheduler`) and no `spec.nodeName`, gets this profile's schedulerName when the
    /// API server admits it. tether keeps a MutatingAdmissionPolicy and its binding, both named
    /// `tether-profile-<profile name>`, in step with this field while the profile is Ready (an
    /// invalid change leaves them as they were), and removes them when the field is unset or
    /// the profile deleted; the `NamespaceDefaulting` condition says whether they are in force
    /// and names the selected namespaces that did not opt in (left alone). tether's own
    /// namespace and every `kube-*` namespace are never selected, opted in or not. An empty
    /// selector (`{}`) matches every namespace that opted in. Pods that exist already are not
    /// changed. Unset (the default): pods reach the profile only by naming its schedulerName.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace_selector: Option<LabelSelector>,
}

fn default_initial_backoff() -> i64 {
    1
}

/// The longest backoff a profile may set, in seconds (a day).
pub const MAX_BACKOFF_SECONDS: i64 = 86_400;

fn default_max_backoff() -> i64 {
    10
}

/// The plugin sets of every extension point. `multiPoint` enables a plugin at every extension
/// point it implements; a setting at a specific extension point wins over `multiPoint`, which
/// wins over the defaults.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plugins {
    /// Plugins that decide whether a pod may enter the active queue at all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_enqueue: Option<PluginSet>,
    /// The plugin that orders the scheduling queue. There is one queue, so every profile must
    /// use the same one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub queue_sort: Option<PluginSet>,
    /// Plugins that check or precompute pod information before filtering.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_filter: Option<PluginSet>,
    /// Plugins that rule out nodes that cannot run the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<PluginSet>,
    /// Plugins that run when no node passed the filters, such as preemption.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_filter: Option<PluginSet>,
    /// Plugins that precompute information for scoring.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_score: Option<PluginSet>,
    /// Plugins that rank the nodes that passed the filters. Each has a weight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<PluginSet>,
    /// Plugins told when resources are set aside for a pod on its chosen node, and when they
    /// are released again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reserve: Option<PluginSet>,
    /// Plugins that allow, deny or hold a pod before it is bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permit: Option<PluginSet>,
    /// Plugins that run before the bind, such as volume provisioning.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_bind: Option<PluginSet>,
    /// Plugins that bind a pod to its node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind: Option<PluginSet>,
    /// Plugins told after a pod was bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub post_bind: Option<PluginSet>,
    /// Plugins enabled at every extension point they implement.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub multi_point: Option<PluginSet>,
}

/// The plugins enabled and disabled at one extension point.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginSet {
    /// Plugins to run in addition to the defaults, in this order, after the default plugins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(length(max = 64))]
    pub enabled: Vec<Plugin>,
    /// Default plugins to turn off. The name `*` turns off every default plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(extend("x-kubernetes-list-type" = "map", "x-kubernetes-list-map-keys" = ["name"]))]
    #[schemars(length(max = 64))]
    pub disabled: Vec<Plugin>,
}

/// A plugin by name, with its score weight.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Plugin {
    /// The plugin's name, as kube-scheduler spells it (for example `NodeResourcesFit`), or `*`
    /// in a disabled list.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// The weight of this plugin's score, 1 to 100. Unset means the plugin's default weight.
    /// Only meaningful for score plugins.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 100))]
    pub weight: Option<i32>,
}

/// Arguments for one plugin.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct PluginConfig {
    /// The name of the plugin these arguments are for.
    #[schemars(length(min = 1, max = 128))]
    pub name: String,
    /// The plugin's arguments, with the same fields as the plugin's args in kube-scheduler
    /// (for example NodeResourcesFitArgs). Checked when the profile is compiled.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::preserve_unknown_object")]
    pub args: Option<serde_json::Value>,
}

/// What tether made of a SchedulingProfile.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingProfileStatus {
    /// The generation of the spec that this status describes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready` is True while the profile serves its schedulerName with the current spec. When the
    /// current spec is invalid it is False, its message names the field, and the last good
    /// version of the profile keeps serving. Following kstatus (read by Flux and kpt; Argo CD with
    /// tether's health check), `Stalled` is True with the same reason and message while the
    /// current spec cannot be served (InvalidSpec, QueueSortMismatch, SchedulerNameConflict),
    /// and `Reconciling` is False once tether has judged the current generation. With
    /// `spec.namespaceSelector`, `NamespaceDefaulting` says whether its MutatingAdmissionPolicy
    /// is in force (InForce, naming the selected namespaces that did not opt in) or why not
    /// (WriteFailed). `WatchesCurrent` is False (WatchStale) while a watch this profile's pods
    /// need has not been current for 2 minutes, naming it and its last error; absent otherwise.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
    /// The plugins that run at each extension point, after defaults, `multiPoint` and weights.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub plugins: Option<EffectivePlugins>,
}

/// The effective plugin list of each extension point, in the order they run.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct EffectivePlugins {
    /// Plugins that gate a pod before it enters the active queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_enqueue: Vec<String>,
    /// The plugin that orders the scheduling queue.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub queue_sort: Vec<String>,
    /// Plugins run once per pod before filtering.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_filter: Vec<String>,
    /// Plugins that rule nodes out, in order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub filter: Vec<String>,
    /// Plugins run when no node fits.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_filter: Vec<String>,
    /// Plugins run once per pod before scoring.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_score: Vec<String>,
    /// Score plugins with the weight each one runs with.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub score: Vec<WeightedPlugin>,
    /// Plugins told when a node is reserved for a pod.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reserve: Vec<String>,
    /// Plugins that allow, deny or hold a pod before binding.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub permit: Vec<String>,
    /// Plugins run before the bind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub pre_bind: Vec<String>,
    /// Plugins that bind, the first that accepts the pod wins.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub bind: Vec<String>,
    /// Plugins told after a successful bind.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub post_bind: Vec<String>,
}

/// A score plugin and the weight it runs with.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WeightedPlugin {
    /// The plugin's name.
    pub name: String,
    /// The weight its normalized score is multiplied by.
    pub weight: i32,
}
