//! Placing a gang's members on a snapshot, as the group cycle does but holding nothing once
//! done (each member reserved while the next is placed, then given back; nothing assumed in
//! the cache): what group preemption asks of the group cycle on a cluster without its
//! potential victims (upstream's PodGroupSchedulingFunc, [`crate::scheduler::group_preemption`]),
//! and what topology-aware placement runs in each domain
//! ([`crate::scheduler::group_topology`]). And the rule both follow: a group whose `minCount`
//! is out of reach stops.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Duration;

use crate::scheduler::Scheduler;
use crate::scheduler::algorithm::{self, Choice, ScheduleResult};
use crate::scheduler::failure::Failure;
use crate::scheduler::framework::group_post_filter::{
    IN_PLACEMENT, InPlacement, NODE_RANKS, NodeRanks, RankedBy,
};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    CycleState, GROUP_CLAIMS_KEY, GroupClaims, QueuedPodInfo, REMOVED_PODS_KEY, RemovedPods, Status,
};
use crate::scheduler::handoff::search_over_message;

/// The prefix of a placed member's message when its group was not placed (upstream's
/// errPodGroupUnschedulable).
pub const GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// Upstream's PlacementFeasible: the message when `min_count` can no longer be reached with
/// `scheduled` members placed (before or in this cycle), `unschedulable` rejected and
/// `remaining` still to try, in `release`'s words.
pub fn infeasible(
    release: crate::k8s::release::Release,
    min_count: usize,
    scheduled: usize,
    unschedulable: usize,
    remaining: usize,
) -> Option<String> {
    (scheduled.saturating_add(remaining) < min_count).then(|| {
        if release.at_least(38) {
            format!(
                "scheduling policy's minimum threshold ({min_count}) cannot be satisfied: {scheduled} scheduled, {unschedulable} unschedulable, {remaining} not-evaluated"
            )
        } else {
            format!(
                "minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining"
            )
        }
    })
}

/// A member placed in a trial: its node, its cycle state (PreFilter and Filter ran, its
/// reservation given back) and how it won.
pub struct Assigned {
    pub index: usize,
    pub node: String,
    pub state: CycleState,
    pub choice: Choice,
}

/// What a trial of the group on one cluster (or one placement of it) found.
#[derive(Default)]
pub struct Evaluation {
    pub placed: Vec<Assigned>,
    /// The members that failed on their own, with why.
    pub own_failures: Vec<(usize, Failure)>,
    /// Why the group cannot be placed there, once `minCount` is out of reach.
    pub group_failure: Option<String>,
    /// Every plugin that rejected a member.
    pub rejected_by: BTreeSet<&'static str>,
    pub retry_after: Option<Duration>,
    /// An error, and the member it came from.
    pub error: Option<(usize, Status)>,
    /// How many members were tried.
    pub evaluated: usize,
}

impl Evaluation {
    /// The group fits: no error, `minCount` reached, at least one member placed.
    pub fn feasible(&self) -> bool {
        self.error.is_none() && self.group_failure.is_none() && !self.placed.is_empty()
    }
}

/// The cluster of one trial: a snapshot with pods taken off it, the ranks nodes are weighed
/// by, and the nodes the members may take (all when `None`).
pub struct Trial<'a> {
    pub snapshot: &'a Snapshot,
    pub removed: &'a HashSet<String>,
    pub ranks: Option<Arc<dyn NodeRanks>>,
    pub placement: Option<Arc<HashSet<String>>>,
}

/// The members (in the cycle's order) tried on `trial` one after another, each seeing those
/// before it (added to its node and reserved), with `already` members scheduled before and
/// `min_count` to reach; stops once `minCount` is out of reach. Every reservation is given back
/// before it returns.
pub fn evaluate(
    sched: &Scheduler,
    profile: &CompiledProfile,
    members: &[QueuedPodInfo],
    (already, min_count): (usize, usize),
    trial: &Trial<'_>,
) -> Evaluation {
    let nominated = sched.state.room.for_group();
    let release = profile.release;
    if let Some(ranks) = &trial.ranks {
        // Each trial (each placement) condemns afresh.
        ranks.forget_condemned();
    }
    let mut snapshot = trial.snapshot.clone();
    let nodes = trial.placement.as_ref().map_or(snapshot.len(), |p| p.len());
    let mut out = Evaluation::default();
    let (mut scheduled, mut unschedulable, mut remaining) = (already, 0, members.len());
    out.group_failure = infeasible(release, min_count, scheduled, 0, remaining);
    if out.group_failure.is_some() {
        return out;
    }
    // The pods taken off, and the claims the members' allocations made pending, shared by
    // every member's cycle state.
    let removed = Arc::new(trial.removed.clone());
    let group_claims = GroupClaims::default();
    for (index, member) in members.iter().enumerate() {
        out.evaluated = index + 1;
        remaining -= 1;
        let pod = &member.pod;
        if let Some(err) = &pod.parse_error {
            unschedulable += 1;
            out.own_failures
                .push((index, Failure::invalid_affinity(err, nodes)));
        } else {
            let mut state = CycleState::new();
            state.write(GROUP_CLAIMS_KEY, group_claims.clone());
            if let Some(ranks) = &trial.ranks {
                state.write(NODE_RANKS, RankedBy(ranks.clone()));
            }
            if let Some(placement) = &trial.placement {
                state.write(IN_PLACEMENT, InPlacement(placement.clone()));
            }
            if !trial.removed.is_empty() {
                state.write(REMOVED_PODS_KEY, RemovedPods(removed.clone()));
            }
            match algorithm::schedule_pod_with(
                profile,
                &mut state,
                pod,
                &snapshot,
                &sched.start_index,
                &nominated,
                false,
            ) {
                ScheduleResult::Scheduled { node, choice, .. } => {
                    let status = profile.run_reserve(&mut state, pod, &node);
                    if status.is_success() {
                        if let Some(info) = snapshot.get(&node) {
                            let mut info = (**info).clone();
                            info.add_pod(Arc::new(pod.on_node(&node)));
                            snapshot = snapshot.with_node(info);
                        }
                        if let Some(ranks) = &trial.ranks {
                            ranks.condemn(&node);
                        }
                        scheduled += 1;
                        out.placed.push(Assigned {
                            index,
                            node,
                            state,
                            choice,
                        });
                    } else {
                        unschedulable += 1;
                        out.rejected_by.extend(status.plugin);
                        out.own_failures.push((
                            index,
                            Failure::after_status(&status, true, search_over_message(&status)),
                        ));
                    }
                }
                ScheduleResult::Unschedulable(diagnosis) => {
                    unschedulable += 1;
                    out.rejected_by
                        .extend(diagnosis.unschedulable_plugins.iter().copied());
                    let failure = Failure::unschedulable(diagnosis);
                    out.retry_after = match (out.retry_after, failure.retry_after) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    out.own_failures.push((index, failure));
                }
                ScheduleResult::Error(status) => {
                    out.error = Some((index, status));
                    break;
                }
            }
        }
        out.group_failure = infeasible(release, min_count, scheduled, unschedulable, remaining);
        if out.group_failure.is_some() {
            break;
        }
    }
    for a in out.placed.iter().rev() {
        profile.run_unreserve(&a.state, &members[a.index].pod, &a.node);
    }
    out
}
