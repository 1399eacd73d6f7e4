//! Placing a gang's members on a snapshot, as the group cycle does but holding nothing once
//! done (each member reserved while the next is placed, then given back; nothing assumed in
//! the cache): what group preemption asks of the group cycle on a cluster without its
//! potential victims (upstream's PodGroupSchedulingFunc). And the rule both follow: a group
//! whose `minCount` is out of reach stops.

use std::sync::Arc;

use crate::scheduler::Scheduler;
use crate::scheduler::algorithm::{self, ScheduleResult};
use crate::scheduler::framework::CycleState;
use crate::scheduler::framework::QueuedPodInfo;
use crate::scheduler::framework::group_post_filter::{
    NODE_RANKS, Placement, RankedBy, TrialCluster,
};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::{REMOVED_PODS_KEY, RemovedPods};

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

/// The members (in the cycle's order) placed on `trial` one after another, each seeing those
/// before it (added to its node and reserved), with `already` members scheduled before and
/// `min_count` to reach: where each placed member went, or why the group does not fit. With
/// ranks, each member is scored among the cheapest feasible nodes only and condemns what its
/// node costs. Every reservation is given back before it returns.
pub fn place_on(
    sched: &Scheduler,
    profile: &CompiledProfile,
    members: &[QueuedPodInfo],
    (already, min_count): (usize, usize),
    trial: TrialCluster<'_>,
) -> Placement {
    let mut reserved: Vec<(CycleState, usize, String)> = Vec::new();
    let placement = place_reserving(
        sched,
        profile,
        members,
        (already, min_count),
        trial,
        &mut reserved,
    );
    for (state, index, node) in reserved.iter().rev() {
        profile.run_unreserve(state, &members[*index].pod, node);
    }
    placement
}

/// [`place_on`]'s loop; what it reserved is left in `reserved` for the caller to give back.
fn place_reserving(
    sched: &Scheduler,
    profile: &CompiledProfile,
    members: &[QueuedPodInfo],
    (already, min_count): (usize, usize),
    trial: TrialCluster<'_>,
    reserved: &mut Vec<(CycleState, usize, String)>,
) -> Placement {
    let nominated = sched.state.room.for_group();
    let mut snapshot = trial.snapshot.clone();
    let ranks = trial.ranks;
    let (mut scheduled, mut unschedulable, mut remaining) = (already, 0, members.len());
    let mut placed = Vec::new();
    for (index, member) in members.iter().enumerate() {
        remaining -= 1;
        if member.pod.parse_error.is_some() {
            unschedulable += 1;
        } else {
            let mut state = CycleState::new();
            if let Some(ranks) = &ranks {
                state.write(NODE_RANKS, RankedBy(ranks.clone()));
            }
            if !trial.removed.is_empty() {
                state.write(REMOVED_PODS_KEY, RemovedPods(trial.removed.clone()));
            }
            match algorithm::schedule_pod_with(
                profile,
                &mut state,
                &member.pod,
                &snapshot,
                &sched.start_index,
                &nominated,
                false,
            ) {
                ScheduleResult::Scheduled { node, .. } => {
                    let status = profile.run_reserve(&mut state, &member.pod, &node);
                    if status.is_success() {
                        if let Some(info) = snapshot.get(&node) {
                            let mut info = (**info).clone();
                            info.add_pod(Arc::new(member.pod.on_node(&node)));
                            snapshot = snapshot.with_node(info);
                        }
                        if let Some(ranks) = &ranks {
                            ranks.condemn(&node);
                        }
                        scheduled += 1;
                        placed.push((index, node.clone()));
                        reserved.push((state, index, node));
                    } else {
                        unschedulable += 1;
                    }
                }
                ScheduleResult::Unschedulable(_) => unschedulable += 1,
                ScheduleResult::Error(status) => return Err(status.message()),
            }
        }
        if let Some(message) = infeasible(
            profile.release,
            min_count,
            scheduled,
            unschedulable,
            remaining,
        ) {
            return Err(message);
        }
    }
    if placed.is_empty() {
        return Err(GROUP_UNSCHEDULABLE.into());
    }
    Ok(placed)
}
