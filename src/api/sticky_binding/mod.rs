//! StickyBinding: the node a workload is pinned to, and where it has been placed before.

pub mod conditions;

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// The placement of one workload: the node it is pinned to and its placement history.
///
/// tether creates one StickyBinding per workload when the workload's pod is first bound, in the
/// workload's namespace, named `<kind>-<name>` in lower case and owned by the workload, so that
/// deleting the workload deletes its binding. Set `spec.nodeName` to move the workload to another
/// node; delete the StickyBinding to free it.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tether.dev",
    version = "v1alpha1",
    kind = "StickyBinding",
    doc = "The placement of one workload: the node it is pinned to (spec.nodeName, set by a person) and where its pods were bound before (status). Created by tether on the first bind; owned by the workload.",
    namespaced,
    shortname = "sb",
    category = "tether",
    status = "StickyBindingStatus",
    printcolumn = r#"{"name":"Kind","type":"string","jsonPath":".spec.workloadRef.kind","description":"The kind of the workload"}"#,
    printcolumn = r#"{"name":"Workload","type":"string","jsonPath":".spec.workloadRef.name","description":"The name of the workload"}"#,
    printcolumn = r#"{"name":"Pinned","type":"string","jsonPath":".spec.nodeName","description":"The node a person pinned the workload to"}"#,
    printcolumn = r#"{"name":"Latest","type":"string","jsonPath":".status.latest","description":"The node the workload was last bound to"}"#,
    printcolumn = r#"{"name":"Schedules","type":"integer","jsonPath":".status.scheduleCount","description":"How many times the workload's pods were bound"}"#,
    printcolumn = r#"{"name":"Available","type":"string","jsonPath":".status.conditions[?(@.type==\"NodeAvailable\")].status","description":"Whether the pinned node exists and is Ready"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct StickyBindingSpec {
    /// The workload this binding belongs to. It cannot be changed.
    #[x_kube(validation = Rule::new("self == oldSelf").message("workloadRef is immutable"))]
    pub workload_ref: WorkloadRef,

    /// A node a person pins the workload to. When set it wins over the placement history: the
    /// workload's next pod goes to this node and nowhere else. Leave empty to follow the history.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(max = 253),
        regex(pattern = r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*)?$")
    )]
    pub node_name: Option<String>,
}

/// The workload a StickyBinding belongs to, as its controller ownerReference names it.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Hash, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadRef {
    /// The workload's API version, for example `apps/v1` or `kubevirt.io/v1`.
    #[schemars(length(min = 1, max = 253))]
    pub api_version: String,
    /// The workload's kind, for example `Deployment`, `StatefulSet` or `VirtualMachine`.
    #[schemars(length(min = 1, max = 63))]
    pub kind: String,
    /// The workload's name, in the binding's namespace.
    #[schemars(length(min = 1, max = 253))]
    pub name: String,
    /// For a StatefulSet: the ordinal of the pod this binding is for. Each ordinal of a
    /// StatefulSet sticks to its own node.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 2147483647))]
    pub ordinal: Option<i32>,
}

/// The API groups whose workloads' bindings are named without their group, as tether has
/// always named them: the core group, `apps`, `batch` and `kubevirt.io`. A workload of any other
/// group has its group in its binding's name, so that an `apps.kruise.io` StatefulSet `db` and
/// an `apps` one never share a binding.
const UNQUALIFIED_GROUPS: &[&str] = &["", "apps", "batch", "kubevirt.io"];

/// The group of an `apiVersion` (`apps/v1` → `apps`; `v1` → the core group, empty).
pub fn api_group(api_version: &str) -> &str {
    api_version.rsplit_once('/').map_or("", |(group, _)| group)
}

/// The name of the binding of a workload of `api_version` and `kind` named `base` (for a
/// StatefulSet, the pod's name: each ordinal has its own): `<kind>-<base>`, or
/// `<kind>.<group>-<base>` outside the [`UNQUALIFIED_GROUPS`], in lower case, shortened with a
/// hash past Kubernetes' 253 characters.
pub fn binding_name(api_version: &str, kind: &str, base: &str) -> String {
    let group = api_group(api_version);
    let full = if UNQUALIFIED_GROUPS.contains(&group) {
        format!("{kind}-{base}")
    } else {
        format!("{kind}.{group}-{base}")
    };
    within_name_limit(full.to_lowercase())
}

/// The longest object name Kubernetes accepts (a DNS subdomain).
const MAX_NAME: usize = 253;

/// `name` when it fits [`MAX_NAME`]; else its start and a stable hash of the whole, as
/// Kubernetes controllers shorten generated names, so two long names never collide. The
/// binding's spec keeps the full workload reference.
fn within_name_limit(name: String) -> String {
    if name.len() <= MAX_NAME {
        return name;
    }
    // FNV-1a: stable across releases and platforms, unlike std's hasher.
    let hash = name.bytes().fold(0x811c_9dc5_u32, |h, b| {
        (h ^ u32::from(b)).wrapping_mul(0x0100_0193)
    });
    let suffix = format!("-{hash:08x}");
    let mut cut = MAX_NAME - suffix.len();
    while !name.is_char_boundary(cut) {
        cut -= 1;
    }
    let head = name[..cut].trim_end_matches(['-', '.']);
    format!("{head}{suffix}")
}

impl WorkloadRef {
    /// Whether `other` names the same workload: the same group (any version), kind, name and
    /// ordinal.
    pub fn same_workload(&self, other: &WorkloadRef) -> bool {
        api_group(&self.api_version) == api_group(&other.api_version)
            && self.kind == other.kind
            && self.name == other.name
            && self.ordinal == other.ordinal
    }

    /// The name this workload's binding has (see [`binding_name`]); a StatefulSet ordinal's
    /// is its pod's, `<name>-<ordinal>`.
    pub fn binding_name(&self) -> String {
        match (self.kind.as_str(), self.ordinal) {
            ("StatefulSet", Some(ordinal)) => binding_name(
                &self.api_version,
                &self.kind,
                &format!("{}-{ordinal}", self.name),
            ),
            _ => binding_name(&self.api_version, &self.kind, &self.name),
        }
    }
}

/// How many pods `status.countedPods` lists at most: the pods bound in the last minutes of a
/// burst of binds beyond it are vouched for by `status.countedBefore` instead.
pub const MAX_COUNTED_PODS: usize = 8192;

/// How many nodes `status.nodeCount` holds at most (the writer keeps it well below, by size).
pub const MAX_NODE_COUNTS: usize = 10_000;

/// The largest count the API server accepts in a binding's history (2^53 - 1, the largest
/// integer every JSON reader holds exactly): no workload binds that often, and a count past it
/// is refused at the door rather than rounded by a client.
pub const MAX_COUNT: i64 = 9_007_199_254_740_991;

/// Where the workload's pods have been bound.
///
/// Bounded, so that a workload of any size or age stays well within the API server's limit on
/// an object: `nodeCount` drops nodes gone from the cluster for an hour (their binds move to
/// `prunedCount`), and `countedPods` keeps a pod only while `countedBefore` cannot yet vouch for
/// it, at most 8192.
#[derive(Serialize, Deserialize, Clone, Debug, Default, PartialEq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct StickyBindingStatus {
    /// The node the workload's pod was last bound to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 253))]
    pub latest: Option<String>,
    /// How many times the workload's pods were bound to each node (never negative). A node gone
    /// from the cluster for an hour is dropped (its binds stay in `scheduleCount` and move to
    /// `prunedCount`), unless the workload is pinned to it.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    #[schemars(extend(
        "additionalProperties" = {"type": "integer", "format": "int64", "minimum": 0, "maximum": MAX_COUNT},
        "maxProperties" = MAX_NODE_COUNTS,
        "x-kubernetes-map-type" = "atomic"
    ))]
    pub node_count: BTreeMap<String, i64>,
    /// How many times the workload's pods were bound in all: the sum of nodeCount and
    /// prunedCount.
    #[serde(default)]
    #[schemars(range(min = 0, max = MAX_COUNT))]
    pub schedule_count: i64,
    /// How many of the binds in `scheduleCount` were to nodes dropped from `nodeCount` (gone
    /// from the cluster).
    #[serde(default, skip_serializing_if = "is_zero")]
    #[schemars(range(min = 0, max = MAX_COUNT))]
    pub pruned_count: i64,
    /// When the workload's pod was last bound.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_schedule_time: Option<Time>,
    /// The most recent binds, newest last (at most 16): each bound pod is counted once, by UID,
    /// however often its bind is reported.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16))]
    pub recent_binds: Vec<BindRecord>,
    /// The UIDs of the workload's pods whose bind is counted, bound at or after
    /// `countedBefore`, that still ran at the last write (at most 8192): how tether knows, after
    /// a restart, which recent binds it already counted (by UID, never by comparing clocks).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(
        length(max = MAX_COUNTED_PODS),
        extend("x-kubernetes-list-type" = "atomic", "items" = {"type": "string", "maxLength": 64})
    )]
    pub counted_pods: Vec<String>,
    /// Every pod of the workload bound before this time (its `PodScheduled` condition, the API
    /// server's clock) is counted, or was bound before its workload had this history: a pod is
    /// kept in `countedPods` only while it was bound at or after it. tether sets it two minutes
    /// before the newest bind it counted, so that a bind whose count was lost in a restart is
    /// always recent enough to be found again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub counted_before: Option<Time>,
    /// When the workload was released from a lost node (StickyNode `onNodeLoss: Release`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub released_from: Option<Release>,
    /// The generation of the spec tether has checked (its pin against the nodes). While it is
    /// behind `metadata.generation`, GitOps tools read the binding as in progress.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0))]
    pub observed_generation: Option<i64>,
    /// `NodeAvailable` tells whether the pinned node exists and is Ready; `HistoryConsistent`
    /// whether the counts agree with each other (False names what does not, as after a hand
    /// edit; tether keeps counting from the values as written). Following kstatus (read by
    /// Flux, kpt and Argo CD): `Stalled` is True while the workload is pinned to a node that
    /// does not exist (its message names the field, `spec.nodeName` or `status.latest`: a person
    /// must move or free it), and `Reconciling` is True while the pinned node exists but is not
    /// Ready (the workload waits for it). `HistoryRecorded` is False while the API server
    /// refuses the status for its size (its message says how many binds were not recorded),
    /// and True again once a write lands.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "super::schema::conditions")]
    pub conditions: Vec<Condition>,
}

fn is_zero(n: &i64) -> bool {
    *n == 0
}

/// One counted bind.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct BindRecord {
    /// The UID of the bound pod.
    #[serde(rename = "podUID")]
    #[schemars(length(max = 64))]
    pub pod_uid: String,
    /// The name of the bound pod.
    #[schemars(length(max = 253))]
    pub pod_name: String,
    /// The node it was bound to.
    #[schemars(length(max = 253))]
    pub node: String,
    /// When it was bound.
    pub time: Time,
}

/// A release of the workload from a node that was lost.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Release {
    /// The node the workload was pinned to.
    #[schemars(length(max = 253))]
    pub node: String,
    /// When tether released it.
    pub time: Time,
}

/// The condition type telling whether the pinned node exists and is Ready.
pub const CONDITION_NODE_AVAILABLE: &str = "NodeAvailable";
/// `NodeAvailable=True`: the pinned node exists and is Ready.
pub const REASON_NODE_READY: &str = "NodeReady";
/// `NodeAvailable=False`: the pinned node does not exist.
pub const REASON_NODE_NOT_FOUND: &str = "NodeNotFound";
/// `NodeAvailable=False`: the pinned node exists but is not Ready.
pub const REASON_NODE_NOT_READY: &str = "NodeNotReady";

/// kstatus's condition: True while the binding cannot be served without a person's help.
pub const CONDITION_STALLED: &str = "Stalled";
/// kstatus's condition: True while tether waits for the pinned node to become Ready.
pub const CONDITION_RECONCILING: &str = "Reconciling";

/// The condition type telling whether the history's counts agree with each other.
pub const CONDITION_HISTORY_CONSISTENT: &str = "HistoryConsistent";
/// `HistoryConsistent=True`: the counts agree.
pub const REASON_CONSISTENT: &str = "Consistent";
/// `Stalled`: the binding's name is not the one its `spec.workloadRef` gives.
pub const REASON_WORKLOAD_MISMATCH: &str = "WorkloadMismatch";
/// `HistoryConsistent=False`: the message names the values that do not agree.
pub const REASON_ODD_VALUES: &str = "OddValues";

/// The condition type telling whether tether's last history write landed: False while the
/// API server refuses the status for its size (the binds are not recorded), True again once a
/// write lands. Set only once a write was refused.
pub const CONDITION_HISTORY_RECORDED: &str = "HistoryRecorded";
/// `HistoryRecorded=True`: the last history write landed.
pub const REASON_RECORDED: &str = "Recorded";
/// `HistoryRecorded=False`: the API server refused the status as too large.
pub const REASON_TOO_LARGE: &str = "TooLarge";

impl StickyBindingStatus {
    /// What in these counts does not agree, one phrase each (empty when all does). The API
    /// server refuses negative counts; the rest only a hand edit (or a bug) can produce. Pure.
    pub fn oddities(&self) -> Vec<String> {
        let mut odd = Vec::new();
        let sum = self
            .node_count
            .values()
            .fold(0i64, |acc, n| acc.saturating_add(*n));
        let sum = sum.saturating_add(self.pruned_count);
        if sum != self.schedule_count {
            odd.push(if self.pruned_count == 0 {
                format!(
                    "scheduleCount {} is not the sum of nodeCount ({sum})",
                    self.schedule_count
                )
            } else {
                format!(
                    "scheduleCount {} is not the sum of nodeCount and prunedCount ({sum})",
                    self.schedule_count
                )
            });
        }
        match self.latest.as_deref() {
            None if self.schedule_count > 0 => {
                odd.push("binds are counted but latest names no node".into())
            }
            Some(node) if !self.node_count.contains_key(node) => {
                odd.push(format!("latest node {node} has no nodeCount"))
            }
            _ => {}
        }
        let recent = i64::try_from(self.recent_binds.len()).unwrap_or(i64::MAX);
        if recent > self.schedule_count {
            odd.push(format!(
                "recentBinds lists {recent} binds, more than scheduleCount {}",
                self.schedule_count
            ));
        }
        let counted = i64::try_from(self.counted_pods.len()).unwrap_or(i64::MAX);
        if counted > self.schedule_count {
            odd.push(format!(
                "countedPods lists {counted} pods, more than scheduleCount {}",
                self.schedule_count
            ));
        }
        odd
    }
}

impl StickyBinding {
    /// The node the workload is pinned to: `spec.nodeName` when a person set it, else
    /// `status.latest`. An empty name counts as unset; `None` when neither names a node.
    pub fn pin(&self) -> Option<&str> {
        self.spec
            .node_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .or_else(|| self.status.as_ref().and_then(|s| s.latest.as_deref()))
            .filter(|n| !n.is_empty())
    }

    /// Since when the pinned node has been reported lost (`NodeAvailable=False`), if it is. A
    /// condition observed for an older generation of the spec may be about another node and
    /// does not count.
    pub fn node_lost_since(&self) -> Option<jiff::Timestamp> {
        self.status
            .iter()
            .flat_map(|s| &s.conditions)
            .find(|c| c.type_ == CONDITION_NODE_AVAILABLE && c.status == "False")
            .filter(
                |c| match (c.observed_generation, self.metadata.generation) {
                    (Some(observed), Some(current)) => observed >= current,
                    _ => true,
                },
            )
            .map(|c| c.last_transition_time.0)
    }

    /// The node the workload was released from by a bind to `node`: its pin, when that is
    /// another node and was lost.
    pub fn released_by_bind_to(&self, node: &str) -> Option<String> {
        let pin = self.pin()?;
        (pin != node && self.node_lost_since().is_some()).then(|| pin.to_string())
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;

    fn binding(node_name: Option<&str>, latest: Option<&str>, lost: bool) -> StickyBinding {
        let mut b = StickyBinding::new(
            "b",
            StickyBindingSpec {
                workload_ref: WorkloadRef {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: "p".into(),
                    ordinal: None,
                },
                node_name: node_name.map(String::from),
            },
        );
        let conditions = lost
            .then(|| Condition {
                type_: CONDITION_NODE_AVAILABLE.into(),
                status: "False".into(),
                reason: REASON_NODE_NOT_FOUND.into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: Time(jiff::Timestamp::UNIX_EPOCH),
            })
            .into_iter()
            .collect();
        b.status = Some(StickyBindingStatus {
            latest: latest.map(String::from),
            conditions,
            ..Default::default()
        });
        b
    }

    #[test]
    fn a_persons_pin_beats_the_history_and_empty_names_pin_nothing() {
        let cases = [
            ("spec wins", Some("n2"), Some("n1"), Some("n2")),
            ("empty spec falls back", Some(""), Some("n1"), Some("n1")),
            ("history alone", None, Some("n1"), Some("n1")),
            ("empty latest pins nothing", None, Some(""), None),
            ("nothing", None, None, None),
        ];
        for (name, spec, latest, want) in cases {
            assert_eq!(binding(spec, latest, false).pin(), want, "{name}");
        }
    }

    #[test]
    fn a_bind_elsewhere_releases_only_from_a_lost_pin() {
        assert_eq!(
            binding(None, Some("n1"), true).released_by_bind_to("n2"),
            Some("n1".to_string())
        );
        assert_eq!(
            binding(None, Some("n1"), true).released_by_bind_to("n1"),
            None
        );
        assert_eq!(
            binding(None, Some("n1"), false).released_by_bind_to("n2"),
            None
        );
        let mut changed = binding(Some("n3"), Some("n1"), true);
        changed.metadata.generation = Some(2);
        if let Some(c) = changed
            .status
            .as_mut()
            .and_then(|s| s.conditions.first_mut())
        {
            c.observed_generation = Some(1);
        }
        assert_eq!(
            changed.released_by_bind_to("n2"),
            None,
            "a condition about the spec before a person's change says nothing of the new pin"
        );
    }
}
