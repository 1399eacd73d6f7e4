//! What `tether explain` answers, as JSON (`-o json`, and the wire format between the CLI and
//! the scheduler's endpoint). Field names are camelCase, as Kubernetes objects spell them.

use serde::{Deserialize, Serialize};

/// One pod's scheduling decision, written down.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Explanation {
    /// namespace/name.
    pub pod: String,
    pub scheduler_name: String,
    /// The SchedulingProfile version that decided (`SchedulingProfile/name@generation`).
    pub profile: String,
    /// The node the pod is bound to, for a bound pod (explained as it was before its bind).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_to: Option<String>,
    /// How many nodes the snapshot holds.
    pub nodes: usize,
    /// The PreFilter verdict that rejected the pod on every node, if one did.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_filter: Option<FilterVerdict>,
    /// The nodes PreFilter narrowed the search to, if a plugin narrowed it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub narrowed_to: Option<Vec<String>>,
    /// Every node's Filter verdicts, by node name.
    #[serde(default)]
    pub filters: Vec<NodeFilters>,
    /// The feasible nodes' scores, best first.
    #[serde(default)]
    pub scores: Vec<NodeScores>,
    /// The passing nodes whose Filter verdicts (every one a success; `scores` lists the nodes)
    /// were left out of `filters` to keep the answer small (an ExplainRequest's status).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub passing_omitted: usize,
    /// The last rejected nodes left out of `filters` past that.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub rejected_omitted: usize,
    /// The lowest scores left out of `scores` past that.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub scores_omitted: usize,
    /// The node with the best total (for a bound pod: the node it is bound to, if that is
    /// among the best).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub winner: Option<String>,
    /// The winner is the node the pod is nominated to (by preemption): the scheduler tries it
    /// first, alone, and takes it when it fits, whatever the scores.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub nominated: bool,
    /// Every node with the best total; the scheduler picks one of them at random.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tied: Vec<String>,
    /// The best of the other feasible nodes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runner_up: Option<String>,
    /// The winner's total minus the runner-up's.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub margin: Option<i64>,
    /// When no node fits: the FailedScheduling message, as the scheduler words it (without
    /// preemption's part, which explain does not run).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
    /// When no node fits: each reason the message counts, with its nodes and what would have
    /// to change, in the message's order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub blocked: Vec<Blocker>,
    /// A plugin's error, if one stopped the cycle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Room held for pinned workloads whose pod left their node (StickyNode's
    /// `holdRoomSeconds`): pods of lower or equal priority count it as taken until then.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub held: Vec<HeldRoom>,
    /// For a pending member of a gang: the group cycle, run dry over its pending members.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group: Option<GroupExplanation>,
    /// For a pending pod of a hierarchy (1.38's CompositePodGroups): its groups, what each
    /// needs and has, and what the last cycle said of each.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub hierarchy: Option<HierarchyExplanation>,
    /// For a pending member of a group (or hierarchy) whose last cycle preempted: the victims
    /// it chose, each unit and why.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption: Option<PreemptionExplanation>,
    /// For a pod held by scheduling gates: which, and, for Kueue's, what Kueue says of its
    /// workload (the scheduler does not try a gated pod; the cycle above is what it would do).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub admission: Option<Admission>,
}

/// Why a gated pod is not tried, and, where Kueue holds it, what Kueue says.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Admission {
    /// The pod's scheduling gates.
    pub gates: Vec<String>,
    /// Kueue's LocalQueue (`namespace/name`), from the pod's `kueue.x-k8s.io/queue-name`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub local_queue: Option<String>,
    /// The ClusterQueue the LocalQueue sends to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cluster_queue: Option<String>,
    /// Kueue's Workload for the pod (`namespace/name`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workload: Option<String>,
    /// The Workload's conditions that decide admission (`QuotaReserved`, `Admitted`,
    /// `Evicted`), each `Type=Status (Reason): message`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<String>,
    /// The quota in the way, resource by resource: `cpu: 800m reserved of nominal 1 (flavor f)`
    /// in the ClusterQueue (or the LocalQueue's own usage, where the caller may not read the
    /// ClusterQueue).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub quota: Vec<String>,
    /// How many workloads wait in the ClusterQueue (or the LocalQueue).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending_workloads: Option<i64>,
    /// The Workload's place among those pending, from Kueue's visibility API: in its
    /// ClusterQueue and in its LocalQueue, counted from 0 (0 is admitted next).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_in_cluster_queue: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub position_in_local_queue: Option<i64>,
    /// What could not be read, and why.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub unread: Vec<String>,
}

/// The last preemption a group decided.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PreemptionExplanation {
    /// The preemptor (`podgroup namespace/name`, `compositepodgroup namespace/name`).
    pub preemptor: String,
    /// When (RFC 3339).
    pub at: String,
    /// Each victim unit, as it goes (a group with `disruptionMode: all` whole).
    pub victims: Vec<crate::scheduler::framework::group_post_filter::ChosenVictim>,
}

/// A hierarchy of groups under its root CompositePodGroup.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HierarchyExplanation {
    /// The root (`compositepodgroup/namespace/name`).
    pub root: String,
    /// Whether the root is ready: its pods pass PreEnqueue and the hierarchy is tried whole.
    pub ready: bool,
    /// Every group, parents before their children.
    pub groups: Vec<HierarchyGroup>,
}

/// One group of a hierarchy.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HierarchyGroup {
    /// `podgroup/namespace/name` or `compositepodgroup/namespace/name`.
    pub group: String,
    /// How deep it is (the root is 1).
    pub depth: usize,
    /// What it needs: a PodGroup's `minCount` live pods, a CompositePodGroup's `minGroupCount`
    /// ready children (1 for the basic policy).
    pub needs: usize,
    /// What it has of them.
    pub has: usize,
    /// The node label key it is placed within one domain of, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_key: Option<String>,
    /// Its `*InitiallyScheduled` condition: `True`, or `False <reason>: <message>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last: Option<String>,
}

/// A gang tried whole, as the group cycle tries it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupExplanation {
    /// namespace/name of the PodGroup.
    pub pod_group: String,
    pub min_count: usize,
    /// Members assumed or bound already.
    pub scheduled_before: usize,
    /// Whether the group would be placed now (at least `minCount` scheduled).
    pub placed: bool,
    /// Each pending member in the cycle's order: its node, or why it fits nowhere once the
    /// members before it are placed.
    pub members: Vec<GroupMember>,
    /// In a line: how many fit and what blocks the rest.
    pub verdict: String,
    /// Pending members not dry-run: past the explanation's cap of members, or its deadline.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub not_tried: usize,
    /// For a group placed within one domain of a topology key (1.38): each domain, how the
    /// group fares there and how it scored; `members` are then those of the chosen domain (or
    /// of the first tried when none holds the group).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub domains: Vec<DomainExplanation>,
}

/// One domain of a gang's topology key, the gang tried in it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct DomainExplanation {
    /// The key's value.
    pub domain: String,
    pub nodes: usize,
    /// Whether the group fits there (`minCount` reached).
    pub placed: bool,
    /// Its score among the domains that fit (PodGroupPodsCount plus NodeResourcesFit's
    /// MostAllocated over the domain); the highest is chosen.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub score: Option<i64>,
    /// Whether it is the domain chosen.
    pub chosen: bool,
    /// How many fit, and what keeps the rest out.
    pub verdict: String,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// One pending member of a gang.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GroupMember {
    /// namespace/name.
    pub pod: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// Room held on a node for a workload that has no pod for a while.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct HeldRoom {
    /// `<Kind>/<namespace>/<name>`.
    pub workload: String,
    pub node: String,
    /// When the hold ends unless the workload comes back first (RFC 3339).
    pub until: String,
    /// What is held, as `cpu=2, memory=4Gi`.
    pub requests: String,
}

/// What a hold's stand-in asks for, for people: each container's requests summed per resource.
pub fn held_requests(pod: &crate::scheduler::framework::pod_info::PodInfo) -> String {
    let mut sums: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    for c in pod.pod.spec.iter().flat_map(|s| s.containers.iter()) {
        for (name, q) in c.resources.iter().flat_map(|r| r.requests.iter().flatten()) {
            sums.entry(name.clone()).or_default().push(q.0.clone());
        }
    }
    sums.into_iter()
        .map(|(name, qs)| format!("{name}={}", qs.join("+")))
        .collect::<Vec<_>>()
        .join(", ")
}

/// One plugin's answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FilterVerdict {
    pub plugin: String,
    /// Success, Unschedulable, UnschedulableAndUnresolvable, Error or Skip.
    pub code: String,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
    /// What would have to change for the plugin to pass, when it can say.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remedy: Option<String>,
    /// Whether this is the rejection the failure message counts for the node (the first, in
    /// the profile's order).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub counted: bool,
}

/// Every Filter plugin's verdict on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeFilters {
    pub node: String,
    pub feasible: bool,
    /// PreFilter narrowed the search to other nodes: no Filter ran here.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub left_out_by_pre_filter: bool,
    #[serde(default)]
    pub verdicts: Vec<FilterVerdict>,
}

/// A feasible node's scores.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NodeScores {
    pub node: String,
    /// The sum of the weighted scores.
    pub total: i64,
    pub plugins: Vec<PluginScore>,
}

/// One Score plugin on one node.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PluginScore {
    pub plugin: String,
    /// What Score returned.
    pub raw: i64,
    /// After NormalizeScore (0–100).
    pub normalized: i64,
    pub weight: i64,
    /// normalized × weight: what the node's total counts.
    pub weighted: i64,
}

/// One reason no node fits, as the failure message counts it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Blocker {
    pub reason: String,
    /// The plugin that gave it.
    pub plugin: String,
    pub count: usize,
    pub nodes: Vec<String>,
    /// What would have to change, as the plugin words it, once per distinct remedy.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub remedies: Vec<String>,
}
