//! PodGroupPostFilter: what runs when a pod group's cycle could not place it (upstream's
//! PodGroupPostFilterPlugin, through which DefaultPreemption preempts for a whole group).
//!
//! The plugin sees the group as one preemptor and is handed the group cycle's own placement as
//! a function of a snapshot (upstream's PodGroupSchedulingFunc): it changes the cluster in a
//! copy (victims taken off) and asks where the members would then go, without knowing how the
//! group cycle places them.

use std::collections::HashSet;
use std::sync::Arc;

use super::node_info::NodeInfo;
use super::pod_info::PodInfo;
use super::profile::CompiledProfile;
use super::snapshot::Snapshot;
use super::{NominatedPods, Status};
use crate::k8s::pod::Pod;

/// The group that did not fit, as a preemptor.
#[derive(Clone, Debug)]
pub struct GroupPreemptor {
    pub namespace: String,
    pub name: String,
    pub uid: String,
    /// `apiVersion` and `kind` of the group's object (events name it as their related object).
    pub api_version: String,
    pub kind: String,
    /// The schedulerName its members ask for (the victims' DisruptionTarget names it).
    pub scheduler_name: String,
    pub priority: i32,
    /// Its preemption policy is Never (the group's own from 1.38, else any member's).
    pub never: bool,
}

impl GroupPreemptor {
    /// Its metrics' entity label: `compositepodgroup` for a CompositePodGroup, else
    /// `podgroup`.
    pub fn entity(&self) -> &'static str {
        if self.kind == "CompositePodGroup" {
            "compositepodgroup"
        } else {
            "podgroup"
        }
    }
}

/// What preemption needs to know of the group a pod on a node belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct VictimGroup {
    /// The group's key (`namespace/name`): the pods of one group with `disruptionMode: All`
    /// go as one unit.
    pub key: String,
    /// Its `disruptionMode` is All: its scheduled pods are evicted together or not at all.
    pub disrupt_all: bool,
    /// The group's own priority (`spec.priority`), when it sets one.
    pub priority: Option<i32>,
}

/// Where the group cycle placed the members it placed on a snapshot: (index into the
/// members, node), in the order it placed them; or why it could not place the group.
pub type Placement = Result<Vec<(usize, String)>, String>;

/// How a preemption's trial placement weighs nodes by the victims a member would cost there
/// (1.38's RankNodes and DefaultPreemption's Reserve): a member is scored among the feasible
/// nodes of the lowest cost only, and its placement condemns the victims on its node, which
/// then cost the next members nothing.
pub trait NodeRanks: Send + Sync {
    /// Of `feasible` (two or more), those of the lowest cost, in their order.
    fn cheapest(&self, feasible: Vec<Arc<NodeInfo>>) -> Vec<Arc<NodeInfo>>;
    /// A member was placed on `node`: the victims still there are condemned.
    fn condemn(&self, node: &str);
    /// A trial of another placement begins: nothing is condemned (upstream's Unreserve gives
    /// back what a placement's members condemned when its evaluation is reverted).
    fn forget_condemned(&self);
}

/// The [`CycleState`](super::CycleState) key a member's [`NodeRanks`] is carried under.
pub const NODE_RANKS: &str = "PodGroupPreemptionState";

/// The [`CycleState`](super::CycleState) key of the nodes a member being placed in one
/// placement (a topology domain) may take.
pub const IN_PLACEMENT: &str = "Placement";

/// The nodes of the placement a member is placed in (by name); the search counts only them
/// (`0/N nodes are available` counts them), while the plugins still see the whole cluster.
#[derive(Clone)]
pub struct InPlacement(pub Arc<HashSet<String>>);

/// A member's [`NodeRanks`], as its cycle state holds it.
#[derive(Clone)]
pub struct RankedBy(pub Arc<dyn NodeRanks>);

/// The cluster a trial placement runs on: a snapshot with pods taken off it (`removed`, by UID:
/// the plugins that free what such pods held beyond their node, DynamicResources' devices, are
/// told), and the ranks nodes are weighed by where there are any.
pub struct TrialCluster<'a> {
    pub snapshot: &'a Snapshot,
    pub removed: &'a HashSet<String>,
    pub ranks: Option<Arc<dyn NodeRanks>>,
}

/// The group cycle's placement on a trial cluster: each member reserved as it is placed (so the
/// next sees what it took) and every reservation given back before it returns.
pub type PlaceFn<'a> = dyn Fn(TrialCluster<'_>) -> Placement + 'a;

/// What a PodGroupPostFilter plugin is given.
pub struct GroupPostFilterContext<'a> {
    pub profile: &'a CompiledProfile,
    pub preemptor: &'a GroupPreemptor,
    /// The members the cycle tried, in its order.
    pub members: &'a [Arc<PodInfo>],
    /// The cycle's view of the cluster.
    pub snapshot: &'a Snapshot,
    pub nominated: &'a dyn NominatedPods,
    /// The group of a pod on a node, when it names one this scheduler knows.
    pub group_of: &'a (dyn Fn(&Pod) -> Option<VictimGroup> + Sync),
    /// Runs the group cycle's placement on a trial cluster (nothing held, nothing written).
    pub place: &'a PlaceFn<'a>,
}

/// What the plugin decided: on Success, the node each member (by index) is nominated to.
pub struct GroupPostFilterResult {
    pub status: Status,
    pub nominations: Vec<(usize, String)>,
    /// On Success, each victim unit chosen and why (for `tether explain`).
    pub victims: Vec<ChosenVictim>,
}

/// A victim unit a group's preemption chose, as `tether explain` names it.
#[derive(Clone, Debug, Default, PartialEq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ChosenVictim {
    /// `podgroup <namespace>/<name>` (a group evicted whole), `compositepodgroup …`, or
    /// `pod <namespace>/<name>`.
    pub unit: String,
    /// Its pods (`namespace/name`).
    pub pods: Vec<String>,
    pub priority: i32,
    /// Why it was chosen.
    pub why: String,
}

/// What a plugin freeing a group's resources is given.
pub struct GroupReleaseContext<'a> {
    /// What the failed cycle kept of its members (each member's state, by pod UID).
    pub cycle: &'a super::GroupClaims,
    /// The members the cycle tried, none scheduled, in its order.
    pub unscheduled: &'a [&'a Pod],
    /// The group's pods scheduled before the cycle (assumed or bound).
    pub scheduled: usize,
}

/// Runs when a group cycle could not place its group, before [`GroupPostFilterPlugin`]s:
/// Unschedulable with its words lets preemption run after it; UnschedulableAndUnresolvable
/// ends the group's PostFilter; Error fails the cycle.
pub trait GroupReleasePlugin: Send + Sync {
    fn release(&self, ctx: &GroupReleaseContext<'_>) -> Status;
}

/// Runs when a group cycle could not place its group.
pub trait GroupPostFilterPlugin: Send + Sync {
    fn group_post_filter(&self, ctx: &GroupPostFilterContext<'_>) -> GroupPostFilterResult;
}
