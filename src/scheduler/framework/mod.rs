//! The scheduling framework: one trait per extension point, as kube-scheduler's framework
//! defines them. A plugin is one value implementing [`Plugin`]; it answers for each extension
//! point whether it takes part there (`fn filter(&self) -> Option<&dyn FilterPlugin>`), so that
//! one plugin can serve several points, as kube-scheduler plugins do.

pub mod affinity_terms;
pub mod cycle_state;
pub mod events;
pub mod extension_point;
pub mod group_post_filter;
pub mod interner;
pub mod needs;
pub mod node_info;
pub mod node_sums;
pub mod parallel;
pub mod pod_group;
pub mod pod_info;
pub mod profile;
pub mod runtime;
pub mod signature;
pub mod snapshot;
pub mod status;
pub mod topology;
pub mod validation;
pub mod waiting_pods;

use std::collections::BTreeSet;
use std::time::Duration;

use futures::future::BoxFuture;

pub use self::cycle_state::{CycleState, PluginRun, SharedState};
pub use self::extension_point::ExtensionPoint;
pub use self::status::{Code, Status};
use crate::k8s::pod::Pod;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;

/// Whose workload history a plugin reads: every pod's but those in `excluded_namespaces`, those
/// carrying `disable_annotation` set to `"true"`, and (`skip_multi_replica`) those of
/// multi-replica ReplicaSets and Deployments.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HistoryReadership {
    pub skip_multi_replica: bool,
    pub excluded_namespaces: Vec<String>,
    pub disable_annotation: String,
}

/// The highest score a Score plugin gives after normalization.
pub const MAX_NODE_SCORE: i64 = 100;
/// The lowest score.
pub const MIN_NODE_SCORE: i64 = 0;

/// A node and its score, as NormalizeScore sees them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeScore {
    pub name: String,
    pub score: i64,
}

/// What a PreFilter plugin may say about the nodes: `Some(names)` narrows the nodes the Filter
/// phase looks at to those names (kube-scheduler's PreFilterResult.NodeNames).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct PreFilterResult {
    pub node_names: Option<BTreeSet<String>>,
}

impl PreFilterResult {
    pub fn all_nodes() -> Self {
        PreFilterResult { node_names: None }
    }

    pub fn nodes(names: impl IntoIterator<Item = String>) -> Self {
        PreFilterResult {
            node_names: Some(names.into_iter().collect()),
        }
    }

    /// The intersection of two results (several PreFilter plugins may narrow the set).
    pub fn merge(self, other: PreFilterResult) -> Self {
        match (self.node_names, other.node_names) {
            (None, x) | (x, None) => PreFilterResult { node_names: x },
            (Some(a), Some(b)) => PreFilterResult {
                node_names: Some(a.intersection(&b).cloned().collect()),
            },
        }
    }
}

/// A pod in the scheduling queue, with what QueueSort and backoff need.
#[derive(Clone, Debug)]
pub struct QueuedPodInfo {
    pub pod: std::sync::Arc<PodInfo>,
    /// When the pod was first added to the queue.
    pub initial_attempt_timestamp: std::time::Instant,
    /// When the pod was added to the queue, or last came back to it after a failed attempt
    /// (not when an event moved it): QueueSort's order within a priority, and where backoff
    /// counts from.
    pub timestamp: std::time::Instant,
    /// How many times the scheduler tried the pod.
    pub attempts: u32,
    /// Attempts that plugins rejected: the backoff doubles with each (upstream's
    /// UnschedulableCount).
    pub unschedulable_count: u32,
    /// Attempts in a row that ended in an error (no plugin rejected the pod): while non-zero,
    /// the backoff doubles with these instead (upstream's ConsecutiveErrorsCount).
    pub consecutive_errors_count: u32,
    /// Plugins that rejected the pod last time: only events they registered, and hint may
    /// help, move it out of the unschedulable pool. Empty after an error.
    pub unschedulable_plugins: BTreeSet<&'static str>,
    /// The PreEnqueue plugin holding the pod back (a scheduling gate), if any.
    pub gated_by: Option<&'static str>,
}

/// Which extension points a plugin takes part in (kept beside the trait, so that
/// `extension_point.rs` names no plugin).
impl dyn Plugin {
    /// Whether this plugin takes part in `point`.
    pub fn implements(&self, point: ExtensionPoint) -> bool {
        match point {
            ExtensionPoint::PreEnqueue => self.pre_enqueue().is_some(),
            ExtensionPoint::QueueSort => self.queue_sort().is_some(),
            ExtensionPoint::PreFilter => self.pre_filter().is_some(),
            ExtensionPoint::Filter => self.filter().is_some(),
            ExtensionPoint::PostFilter => self.post_filter().is_some(),
            ExtensionPoint::PreScore => self.pre_score().is_some(),
            ExtensionPoint::Score => self.score().is_some(),
            ExtensionPoint::Reserve => self.reserve().is_some(),
            ExtensionPoint::Permit => self.permit().is_some(),
            ExtensionPoint::PreBind => self.pre_bind().is_some(),
            ExtensionPoint::Bind => self.bind().is_some(),
            ExtensionPoint::PostBind => self.post_bind().is_some(),
        }
    }
}

/// Every plugin implements this; each accessor says whether it takes part in that extension point.
pub trait Plugin: Send + Sync + 'static {
    fn name(&self) -> &'static str;

    fn pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        None
    }
    fn queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        None
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        None
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        None
    }
    fn post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        None
    }
    /// Runs when a pod group's cycle could not place it (upstream's PodGroupPostFilter).
    fn group_post_filter(&self) -> Option<&dyn group_post_filter::GroupPostFilterPlugin> {
        None
    }
    /// Runs when a pod group's cycle could not place it, before the group's preemption: frees
    /// what kept its members off nodes (DynamicResources' PodGroupPostFilter).
    fn group_release(&self) -> Option<&dyn group_post_filter::GroupReleasePlugin> {
        None
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        None
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        None
    }
    fn reserve(&self) -> Option<&dyn ReservePlugin> {
        None
    }
    fn permit(&self) -> Option<&dyn PermitPlugin> {
        None
    }
    fn pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        None
    }
    fn bind(&self) -> Option<&dyn BindPlugin> {
        None
    }
    fn post_bind(&self) -> Option<&dyn PostBindPlugin> {
        None
    }

    /// Whose workload history the plugin reads, when it reads any (StickyNode and
    /// PlacementHistory read StickyBinding history): the profile compiler then records every
    /// bind it reads (PlacementRecorder at PostBind), and only those.
    fn history_readership(&self) -> Option<HistoryReadership> {
        None
    }

    /// Who `pod` holds room for, when the plugin holds room (StickyNode with
    /// `holdRoomSeconds`): its workload. Read while the pod runs, since its owners may be gone
    /// by the time it leaves.
    fn hold_identity(&self, _pod: &Pod) -> Option<HoldIdentity> {
        None
    }

    /// Room to hold for `who`, whose pod `pod` just left `node`: for a pinned workload whose
    /// pod left its pin.
    fn room_to_hold(&self, _pod: &Pod, _node: &str, _who: &HoldIdentity) -> Option<RoomHold> {
        None
    }

    /// Whether the plugin's PreFilter reads other pods (what it computes changes when pods
    /// come or go, as for InterPodAffinity): a preemption dry run brings such a plugin's
    /// PreFilter state to the node without its victims, through
    /// [`PreFilterPlugin::lay_over_pods`] or else by running PreFilter again on a changed
    /// snapshot (upstream's PreFilterExtensions).
    fn pre_filter_reads_pods(&self) -> bool {
        false
    }

    /// Whether the plugin's PreScore is tether's own, where kube-scheduler's plugin of that
    /// name has none (ImageLocality reads the pod's images once there): its runs are not
    /// counted in `scheduler_plugin_evaluation_total`, which counts upstream's plugins.
    fn pre_score_is_own(&self) -> bool {
        false
    }

    /// Whether the plugin's Filter frees something of the pods a preemption dry run takes off
    /// a node that the node's pods do not show (DynamicResources: the devices of their
    /// claims): the dry run then tells its Filter which pods it took off ([`RemovedPods`]).
    fn filter_reads_removed_pods(&self) -> bool {
        false
    }

    /// The cluster events that can make a pod this plugin rejected schedulable, each with a
    /// hint that looks at the change (upstream's EnqueueExtensions). `None`: the plugin does
    /// not say, and every change of every kind requeues the pods it rejected.
    fn events_to_register(&self) -> Option<Vec<events::Registration>> {
        None
    }

    /// Whether the plugin signs pods (upstream's SignPlugin): a profile batches
    /// (`scheduler/batch.rs`) only when every plugin it runs at PreFilter, Filter, PreScore or
    /// Score does. tether's own StickyNode and PlacementHistory do not: one narrows a pod to a
    /// single node, the other reads a history that each bind changes.
    fn signs_pods(&self) -> bool {
        false
    }

    /// Adds to `signature` everything of `pod` the plugin's PreFilter, Filter, PreScore and
    /// Score read; false when no signature can say it (the pod's own spread constraints,
    /// inter-pod affinity or claims: what they read changes with every pod placed).
    fn sign_pod(&self, _pod: &PodInfo, _signature: &mut signature::Signature) -> bool {
        false
    }
}

/// The pods (by UID) a preemption dry run has taken off the node its Filters are asked about,
/// in the cycle state under [`REMOVED_PODS_KEY`] for the plugins that
/// [`Plugin::filter_reads_removed_pods`].
#[derive(Clone, Debug, Default)]
pub struct RemovedPods(pub std::sync::Arc<std::collections::HashSet<String>>);

pub const REMOVED_PODS_KEY: &str = "preemption/removed-pods";

/// What DynamicResources keeps of one group cycle (or one trial of it), shared by every
/// member's cycle state (upstream's podGroupStateData).
#[derive(Clone, Debug, Default)]
pub struct GroupClaims {
    /// The claims whose allocation a member made pending (by UID): another member naming the
    /// claim reuses that allocation instead of waiting for it (upstream's pendingAllocations).
    pub pending: std::sync::Arc<std::sync::Mutex<std::collections::HashSet<String>>>,
    /// Each member's DynamicResources state (by pod UID) once its PreFilter ran, for the
    /// group's PostFilter to free what kept the members off nodes (upstream's podsStateData).
    pub members: std::sync::Arc<std::sync::Mutex<Vec<(String, SharedState)>>>,
}

pub const GROUP_CLAIMS_KEY: &str = "group/pending-claims";

/// The workload a pod holds room for.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldIdentity {
    /// The workload's key (`<namespace>/<binding name>`).
    pub key: String,
    /// `<Kind>/<namespace>/<name>`, for people.
    pub workload: String,
    /// Whether it is a workload of many interchangeable replicas (never held for).
    pub many: bool,
    /// The workload as a binding's `spec.workloadRef` names it: the binding under `key` holds
    /// room for it only if it is this workload's.
    pub workload_ref: crate::api::WorkloadRef,
}

/// Room a plugin holds for a workload that has no pod for a while.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoomHold {
    /// The workload's key (`<namespace>/<binding name>`).
    pub key: String,
    /// `<Kind>/<namespace>/<name>`, for people.
    pub workload: String,
    pub span: std::time::Duration,
    /// The rooms held at once for one namespace's workloads, and for the profile's, at most.
    pub per_namespace: usize,
    pub per_profile: usize,
}

/// Decides whether a pod may enter the active queue (scheduling gates). A pod held back waits,
/// without attempts, until an update of it lets it pass.
pub trait PreEnqueuePlugin: Send + Sync {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status;
}

/// Orders the active queue. There is one queue, so every profile shares one QueueSort.
pub trait QueueSortPlugin: Send + Sync {
    /// Whether `a` should be scheduled before `b`.
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool;
}

/// Runs once per pod before filtering; may precompute into the CycleState, narrow the nodes,
/// reject the pod outright, or return Skip to skip its own Filter.
pub trait PreFilterPlugin: Send + Sync {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status);

    /// Upstream's PreFilterExtensions (RemovePod, AddPod): rewrites this plugin's PreFilter
    /// state for `pod` in `state` as if `pods`, of `node`, were taken off it (a preemption
    /// dry run's victims) or added to it (the pods nominated there ahead of `pod`), so that
    /// Filter answers as after a PreFilter run on `snapshot` so changed. `false` when the
    /// plugin has no such rewrite: a dry run then runs its PreFilter again on a copy of the
    /// snapshot, and nominated pods count for it only on the node itself. Only for plugins
    /// whose PreFilter reads other pods ([`Plugin::pre_filter_reads_pods`]) and did not skip.
    fn lay_over_pods(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _node: &NodeInfo,
        _pods: &[&PodInfo],
        _change: PodsChange,
        _snapshot: &Snapshot,
    ) -> bool {
        false
    }
}

/// How the pods handed to [`PreFilterPlugin::lay_over_pods`] change a node.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PodsChange {
    /// Taken off it (a preemption dry run's victims).
    TakenOff,
    /// Added to it (pods nominated there).
    Added,
}

impl PodsChange {
    /// What one such pod takes off a count: 1 when it left, -1 when it came.
    pub fn taken_off(self) -> i64 {
        match self {
            PodsChange::TakenOff => 1,
            PodsChange::Added => -1,
        }
    }
}

/// Says whether the pod can run on one node. Called for many nodes in parallel.
pub trait FilterPlugin: Send + Sync {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// For `tether explain`, when Filter rejected the node: what would have to change for the
    /// pod to pass here (which taint to tolerate, how much to free), where the plugin can say.
    fn remedy(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Option<String> {
        None
    }
}

/// What a PostFilter plugin is given: the profile it runs in (to run its filters again on
/// nodes changed in a dry run), the cycle, and why every node was rejected.
pub struct PostFilterContext<'a> {
    pub profile: &'a profile::CompiledProfile,
    pub state: &'a CycleState,
    pub pod: &'a PodInfo,
    pub snapshot: &'a Snapshot,
    pub diagnosis: &'a runtime::Diagnosis,
    pub nominated: &'a dyn NominatedPods,
}

/// What a PostFilter plugin says of the pod's nominated node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Nomination {
    /// Leave `status.nominatedNodeName` as it is.
    Keep,
    /// Clear it.
    Clear,
    /// Nominate this node: the pod is expected to fit there once what the plugin started
    /// (preemption) is done.
    Node(String),
}

/// Runs when no node passed the filters (preemption): Success with a nomination, or why it
/// could not help.
pub trait PostFilterPlugin: Send + Sync {
    fn post_filter(&self, ctx: &PostFilterContext<'_>) -> (Nomination, Status);
}

/// The pods nominated to nodes (by preemption, here or by another scheduler) that have not
/// been bound yet: a pod of lower or equal priority must leave room for them.
pub trait NominatedPods: Send + Sync {
    /// Whether any pod is nominated anywhere (when none is, filtering need not ask).
    fn any(&self) -> bool;
    /// The pods nominated to `node`.
    fn for_node(&self, node: &str) -> Vec<std::sync::Arc<PodInfo>>;
    /// The node the pod (by UID) is nominated to, as this scheduler knows it (possibly before
    /// the API has its `status.nominatedNodeName`).
    fn node_of(&self, uid: &str) -> Option<String>;
}

/// No nominations (tests, benchmarks).
pub struct NoNominations;

impl NominatedPods for NoNominations {
    fn any(&self) -> bool {
        false
    }
    fn for_node(&self, _node: &str) -> Vec<std::sync::Arc<PodInfo>> {
        Vec::new()
    }
    fn node_of(&self, _uid: &str) -> Option<String> {
        None
    }
}

/// Runs once per pod before scoring the feasible nodes; may return Skip to skip its Score.
pub trait PreScorePlugin: Send + Sync {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[std::sync::Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status;
}

/// Ranks one feasible node, then normalizes the scores of all of them to 0..=MAX_NODE_SCORE.
pub trait ScorePlugin: Send + Sync {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// Scales the raw scores into 0..=MAX_NODE_SCORE. Plugins whose scores already are in
    /// range keep the default, which does nothing.
    fn normalize_scores(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        _scores: &mut [NodeScore],
    ) -> Status {
        Status::success()
    }
}

/// Told when a node is reserved for a pod (before binding) and when the reservation is undone.
pub trait ReservePlugin: Send + Sync {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node_name: &str) -> Status;
    fn unreserve(&self, state: &CycleState, pod: &PodInfo, node_name: &str);
}

/// Allows, denies, or holds (Wait, up to the returned timeout) a pod before its binding cycle.
pub trait PermitPlugin: Send + Sync {
    fn permit(&self, state: &CycleState, pod: &PodInfo, node_name: &str) -> (Status, Duration);
}

/// Tries a pending pod again at once (upstream's framework Handle.Activate): out of the
/// unschedulable pool or backoffQ into activeQ; a pod in flight is requeued when its attempt
/// fails (to backoffQ while its backoff lasts, as upstream) instead of waiting in the
/// unschedulable pool for an event. The scheduling queue implements it; a plugin reaches it
/// through its handle.
pub trait PodActivator: Send + Sync {
    fn activate(&self, pod: &std::sync::Arc<Pod>);
    /// The pod's preemption is being carried out: it is not tried again until
    /// [`PodActivator::preempted`], whatever event comes meanwhile.
    fn preempting(&self, uid: &str);
    /// The pod's preemption's writes, which evicted `victims`, ended (done or failed): it
    /// waits for their deletions, or is moved at once when they are all gone already.
    fn preempted(&self, uid: &str, victims: &[std::sync::Arc<Pod>]);
}

/// Runs in the binding cycle before the bind.
pub trait PreBindPlugin: Send + Sync {
    /// Whether PreBind has work to do for the pod on `node_name` (kube-scheduler's
    /// PreBindPreFlight): Success when it does, Skip when it has none, an error when it cannot
    /// tell. When any plugin has work, the pod's `status.nominatedNodeName` is written with the
    /// node first, so that others (cluster-autoscaler, Karpenter, Kueue) see where it goes
    /// while it waits. Every PreBind plugin answers (no default): a wrong Success costs a
    /// status write before every bind.
    fn pre_bind_pre_flight(&self, state: &CycleState, pod: &Pod, node_name: &str) -> Status;

    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, Status>;
}

/// Binds the pod. Returns Skip to let the next Bind plugin do it.
pub trait BindPlugin: Send + Sync {
    fn bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, Status>;
}

/// Told after a successful bind; cannot fail the pod.
pub trait PostBindPlugin: Send + Sync {
    fn post_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, ()>;
}
