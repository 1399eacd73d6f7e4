//! The group scheduling cycle (kube-scheduler v1.37's scheduleOnePodGroup) for the pods of a
//! PodGroup with the gang policy: all of the group's waiting pods are taken from the queue
//! together and placed one after another, each seeing the ones before it, and the group is
//! placed only if at least `minCount` of its pods are then scheduled (those placed now and
//! those assumed or bound before). Otherwise nothing is held: every reservation is given back
//! before the cycle ends, so two gangs that do not fit together never deadlock on room each
//! holds half of, and a gang that cannot start holds no room another pod could use.
//!
//! Where tether differs from upstream's mechanics (not its outcome): a member is assumed in the
//! cache and reserved for real as it is placed, and released when the group fails, instead of
//! being assumed in a copy of the snapshot and reserved again after the group succeeded; the
//! scheduling thread is serial, so nothing else sees the cache in between.

use std::collections::{BTreeSet, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::k8s::pods;
use crate::scheduler::Scheduler;
use crate::scheduler::algorithm::{self, Choice, ScheduleResult};
use crate::scheduler::failure::{FailedAttempt, Failure, NominationOutcome};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::priority;
use crate::scheduler::framework::{CycleState, QueuedPodInfo, Status};
use crate::scheduler::group_status::{ConditionWrite, with_condition};
use crate::scheduler::handoff::{search_over_message, to_binding};
use crate::scheduler::informers::pod_groups::{self, Group, GroupApi, Policy};
use crate::scheduler::outcome::FailureReason;
use crate::scheduler::plugins::gangs::{Gang, plugin_for};

/// The PodGroup condition the group cycle writes (upstream's
/// `PodGroupInitiallyScheduled`): True once the group was placed, never False again after.
pub use crate::scheduler::group_status::INITIALLY_SCHEDULED;

/// The prefix of a placed member's message when its group was not placed (upstream's
/// errPodGroupUnschedulable).
const GROUP_UNSCHEDULABLE: &str = "pod group is unschedulable";

/// How a popped pod is scheduled, decided once at the top of its cycle (as upstream's
/// ScheduleOne dispatches a pod or its group): alone, with its gang in a group cycle, or not at
/// all while the group it names is not known.
pub enum Dispatch {
    /// Alone: it names no group its profile serves, or a group of the basic policy.
    Pod,
    /// With its gang (a group of the gang policy its profile serves).
    Group(Gang),
    /// Back to wait: it names a group its profile serves (GangScheduling's, or Coscheduling's)
    /// that is not known (any more: deleted after the pod passed PreEnqueue); never placed
    /// alone.
    MissingGroup(Failure),
}

/// How `pod` of `profile` is scheduled (see [`Dispatch`]): its group looked up once.
pub fn dispatch(sched: &Scheduler, profile: &CompiledProfile, pod: &QueuedPodInfo) -> Dispatch {
    let Some(key) = pod_groups::group_of(&pod.pod.pod) else {
        return Dispatch::Pod;
    };
    let plugin = plugin_for(key.api);
    if !profile.uses(plugin) {
        return Dispatch::Pod;
    }
    let Some(group) = sched.pod_groups.get(&key) else {
        let message = match key.api {
            GroupApi::Workload => format!(
                "waiting for pods's pod group {:?} to appear in scheduling queue",
                key.name
            ),
            GroupApi::Coscheduling => format!(
                "waiting for PodGroup {:?} (scheduling.x-k8s.io) to appear",
                key.name
            ),
        };
        return Dispatch::MissingGroup(Failure {
            reason: FailureReason::Unschedulable,
            message,
            rejected_by: vec![plugin],
            retry_after: None,
            nomination: NominationOutcome::Untouched,
        });
    };
    match group.policy() {
        Policy::Gang { min_count } => Dispatch::Group(Gang {
            key,
            group,
            min_count,
        }),
        Policy::Basic => Dispatch::Pod,
    }
}

/// Upstream's validatePodGroup (with PodGroupPreemptionPolicy off, its 1.37 default), for a
/// Workload API group: its pods (those to place, then those scheduled before) share the first
/// one's schedulerName and preemption policy, and each has the group's priority
/// (`spec.priority`, 0 when unset). The first broken rule, in upstream's words.
fn validate<'a>(
    group: &Group,
    pods: impl IntoIterator<Item = &'a crate::k8s::pod::Pod>,
) -> Result<(), String> {
    let Group::Workload(group) = group else {
        return Ok(());
    };
    let group_priority = group.spec.priority.unwrap_or(0);
    let policy = |pod: &crate::k8s::pod::Pod| {
        pod.spec
            .as_ref()
            .and_then(|s| s.preemption_policy.clone())
            .unwrap_or_else(|| "PreemptLowerPriority".to_string())
    };
    let mut first: Option<(String, String)> = None;
    for pod in pods {
        let name = pods::scheduler_name(pod).to_string();
        let (scheduler, preemption) = first
            .get_or_insert_with(|| (name.clone(), policy(pod)))
            .clone();
        if name != scheduler {
            return Err(format!(
                "all pods in a single pod group should have the same .spec.schedulerName set, got: {name:?} and {scheduler:?}"
            ));
        }
        let own = priority(pod);
        if own != group_priority {
            return Err(format!(
                "all pods in a single pod group should have the same priority as the pod group's priority, got {own} and {group_priority}"
            ));
        }
        let own = policy(pod);
        if own != preemption {
            return Err(format!(
                "all pods in a single pod group should have the same preemption policy, got {own} and {preemption}"
            ));
        }
    }
    Ok(())
}

/// Upstream's PlacementFeasible: the message when `min_count` can no longer be reached with
/// `scheduled` members placed (before or in this cycle) and `remaining` still to try.
fn infeasible(min_count: usize, scheduled: usize, remaining: usize) -> Option<String> {
    (scheduled.saturating_add(remaining) < min_count).then(|| {
        format!("minCount ({min_count}) cannot be satisfied: {scheduled} scheduled, {remaining} remaining")
    })
}

/// A member placed in this cycle: assumed on `node`, reserved.
struct Placed {
    index: usize,
    state: CycleState,
    node: String,
    choice: Choice,
}

/// Members in upstream's order: priority (highest first), attempts (fewest first), when they
/// were queued, name.
fn order(a: &QueuedPodInfo, b: &QueuedPodInfo) -> std::cmp::Ordering {
    priority(&b.pod.pod)
        .cmp(&priority(&a.pod.pod))
        .then(a.attempts.cmp(&b.attempts))
        .then(a.timestamp.cmp(&b.timestamp))
        .then_with(|| a.pod.key().cmp(&b.pod.key()))
}

/// Runs one group cycle for the gang of `first` (just popped) and its other waiting members.
pub fn schedule_group(
    sched: &Arc<Scheduler>,
    first: QueuedPodInfo,
    profile: Arc<CompiledProfile>,
    gang: Gang,
) {
    let start = Instant::now();
    let group_plugin = plugin_for(gang.key.api);
    let in_group = |pod: &crate::k8s::pod::Pod| gang.key.has_member(pod);
    let mut members = sched
        .state
        .queue
        .take_group(in_group, first.pod.uid(), group_plugin);
    members.push(first);
    members.sort_by(order);
    let group_name = gang.key.to_string();

    if let Some(watch) = sched.readiness.stale_for(|plugin| profile.uses(plugin)) {
        let status = Status::error(format!(
            "the {watch} watch, which this profile's plugins need, is not current (failing or re-listing); retrying"
        ));
        let size = members.len();
        for member in &members {
            let failure = Failure::error(&status);
            fail(sched, &profile, member, "error", failure, start, size);
        }
        sched.metrics.podgroup_attempt(
            "error",
            &profile.scheduler_name,
            start.elapsed(),
            start.elapsed(),
        );
        return;
    }

    let in_cycle: HashSet<&str> = members.iter().map(|m| m.pod.uid()).collect();
    let scheduled_before = sched.scheduled_before(&gang.key, &in_cycle);
    let already = scheduled_before.len();
    let pods = members
        .iter()
        .map(|m| m.pod.pod.as_ref())
        .chain(scheduled_before.iter().map(Arc::as_ref));
    if let Err(refused) = validate(&gang.group, pods) {
        let status = Status::error(refused);
        tracing::warn!(group = %group_name, error = %status, "pod group refused");
        return fail_group(
            sched,
            &profile,
            &gang,
            &members,
            &status,
            start,
            start.elapsed(),
        );
    }
    let mut scheduled = already;
    let mut remaining = members.len();
    let mut placed: Vec<Placed> = Vec::new();
    let mut own_failures: Vec<(usize, Failure)> = Vec::new();
    let mut rejected_by: BTreeSet<&'static str> = BTreeSet::from([group_plugin]);
    let mut retry_after: Option<Duration> = None;
    let mut group_failure = infeasible(gang.min_count, scheduled, remaining);
    let mut error = None;
    let mut evaluated = 0;
    let nominated = sched.state.room.for_group();
    if group_failure.is_none() {
        for (index, member) in members.iter().enumerate() {
            evaluated = index + 1;
            let pod = &member.pod;
            let snapshot = sched.lock_cache().snapshot();
            let mut state = CycleState::new();
            if let Some(err) = &pod.parse_error {
                remaining -= 1;
                own_failures.push((index, Failure::invalid_affinity(err, snapshot.len())));
                group_failure = infeasible(gang.min_count, scheduled, remaining);
                if group_failure.is_some() {
                    break;
                }
                continue;
            }
            let result = algorithm::schedule_pod_with(
                &profile,
                &mut state,
                pod,
                &snapshot,
                &sched.start_index,
                &nominated,
                false,
            );
            remaining -= 1;
            match result {
                ScheduleResult::Scheduled { node, choice, .. } => {
                    sched.lock_cache().assume_pod(pod, &node);
                    let status = profile.run_reserve(&mut state, pod, &node);
                    if status.is_success() {
                        scheduled += 1;
                        placed.push(Placed {
                            index,
                            state,
                            node,
                            choice,
                        });
                    } else {
                        sched.lock_cache().forget_pod(pod.uid());
                        rejected_by.extend(status.plugin);
                        own_failures.push((
                            index,
                            Failure::after_status(&status, true, search_over_message(&status)),
                        ));
                    }
                }
                ScheduleResult::Unschedulable(diagnosis) => {
                    rejected_by.extend(diagnosis.unschedulable_plugins.iter().copied());
                    let failure = Failure::unschedulable(diagnosis);
                    retry_after = match (retry_after, failure.retry_after) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    own_failures.push((index, failure));
                }
                ScheduleResult::Error(status) => {
                    error = Some(status);
                    break;
                }
            }
            group_failure = infeasible(gang.min_count, scheduled, remaining);
            if group_failure.is_some() {
                break;
            }
        }
    }
    let search = start.elapsed();
    sched.metrics.scheduling_algorithm(search);

    let release = |placed: &[Placed]| {
        for p in placed.iter().rev() {
            let pod = &members[p.index].pod;
            profile.run_unreserve(&p.state, pod, &p.node);
            sched.lock_cache().forget_pod(pod.uid());
        }
    };

    if let Some(status) = error {
        release(&placed);
        tracing::warn!(group = %group_name, profile = %profile.source, error = %status, "pod group scheduling error");
        return fail_group(sched, &profile, &gang, &members, &status, start, search);
    }

    if let Some(message) = group_failure {
        release(&placed);
        let preemption = group_preemption(sched, &profile, &gang, &members);
        let full = match &preemption {
            Some(said) => format!("{message}, {said}"),
            None => message.clone(),
        };
        tracing::info!(group = %group_name, profile = %profile.source, reason = %full, "pod group is unschedulable");
        let rejected_by: Vec<&'static str> = rejected_by.into_iter().collect();
        let group_failure = |message: String| Failure {
            reason: FailureReason::Unschedulable,
            message,
            rejected_by: rejected_by.clone(),
            retry_after,
            nomination: NominationOutcome::PostFilter(None),
        };
        let mut own: std::collections::HashMap<usize, Failure> = own_failures.into_iter().collect();
        let size = members.len();
        for (index, member) in members.iter().enumerate() {
            let failure = if placed.iter().any(|p| p.index == index) {
                group_failure(format!("{GROUP_UNSCHEDULABLE}, {full}"))
            } else if let Some(mut failure) = own.remove(&index) {
                // Its own reason, requeued by what may help any member of the group.
                failure.rejected_by = rejected_by.clone();
                failure
            } else {
                debug_assert!(index >= evaluated);
                group_failure(message.clone())
            };
            fail(
                sched,
                &profile,
                member,
                "unschedulable",
                failure,
                start,
                size,
            );
        }
        write_condition(sched, &gang.group, "False", "Unschedulable", full);
        sched.metrics.podgroup_attempt(
            "unschedulable",
            &profile.scheduler_name,
            search,
            start.elapsed(),
        );
        return;
    }

    // Placed: each placed member goes on to Permit and its binding cycle; a member that did
    // not fit fails on its own (the group is placed without it).
    let result = if placed.is_empty() {
        "unschedulable"
    } else {
        "scheduled"
    };
    tracing::debug!(group = %group_name, placed = placed.len(), already, "pod group placed");
    let placed_any = !placed.is_empty();
    let mut members: Vec<Option<QueuedPodInfo>> = members.into_iter().map(Some).collect();
    for p in placed {
        let Some(queued) = members[p.index].take() else {
            continue;
        };
        sched.state.room.nominator.forget(queued.pod.uid());
        to_binding(
            sched,
            queued,
            profile.clone(),
            p.state,
            p.node,
            p.choice,
            start,
        );
    }
    for (index, failure) in own_failures {
        if let Some(queued) = members[index].take() {
            // Alone: its group is placed without it.
            let result = result_label_of(&failure);
            fail(sched, &profile, &queued, result, failure, start, 1);
        }
    }
    if placed_any {
        write_condition(sched, &gang.group, "True", "Scheduled", String::new());
    }
    sched
        .metrics
        .podgroup_attempt(result, &profile.scheduler_name, search, start.elapsed());
}

fn result_label_of(failure: &Failure) -> &'static str {
    match failure.reason {
        FailureReason::SchedulerError => "error",
        _ => "unschedulable",
    }
}

/// A group cycle that ended in an error (`status`) before any member was placed for good:
/// each member fails with it, the PodGroup says `SchedulerError`, the cycle counts as `error`.
fn fail_group(
    sched: &Arc<Scheduler>,
    profile: &CompiledProfile,
    gang: &Gang,
    members: &[QueuedPodInfo],
    status: &Status,
    start: Instant,
    search: Duration,
) {
    for member in members {
        let failure = Failure::error(status);
        fail(
            sched,
            profile,
            member,
            "error",
            failure,
            start,
            members.len(),
        );
    }
    write_condition(
        sched,
        &gang.group,
        "False",
        "SchedulerError",
        status.message(),
    );
    sched
        .metrics
        .podgroup_attempt("error", &profile.scheduler_name, search, start.elapsed());
}

/// One member's failed attempt: counted, reported and sent back to the queue, backing off as
/// its group of `group_size` does.
fn fail(
    sched: &Arc<Scheduler>,
    profile: &CompiledProfile,
    member: &QueuedPodInfo,
    result: &'static str,
    failure: Failure,
    start: Instant,
    group_size: usize,
) {
    FailedAttempt {
        queued: member,
        profile,
        failure,
        counted: Some((result, start)),
        group_size: Some(group_size),
    }
    .handle(sched);
}

/// What upstream's group preemption (DefaultPreemption at PodGroupPostFilter) says of a group
/// that did not fit, where tether can tell without running it: with no pod of lower priority
/// than the group's on any node, there is nothing to preempt, and upstream says `pod group
/// preemption: No preemption victims found for incoming preemptor`. tether does not preempt
/// for pod groups yet; where such pods exist, the message says so instead. None when the
/// profile does not run DefaultPreemption.
fn group_preemption(
    sched: &Scheduler,
    profile: &CompiledProfile,
    gang: &Gang,
    members: &[QueuedPodInfo],
) -> Option<String> {
    use crate::scheduler::plugins::default_preemption;
    if !profile.uses(default_preemption::NAME) {
        return None;
    }
    let group_priority = gang
        .group
        .priority()
        .or_else(|| members.first().map(|m| priority(&m.pod.pod)))
        .unwrap_or(0);
    let snapshot = sched.lock_cache().snapshot();
    let lower = snapshot
        .nodes()
        .iter()
        .any(|node| node.pods.iter().any(|p| priority(&p.pod) < group_priority));
    Some(if lower {
        "pod group preemption: not attempted (tether does not preempt for pod groups yet)".into()
    } else {
        "pod group preemption: No preemption victims found for incoming preemptor".into()
    })
}

/// Asks for the group's `PodGroupInitiallyScheduled` condition, as upstream writes it: never
/// from True back to anything else, and not at all when the group already says the same. The
/// watched copy answers the common case (the same again) without a request; the writes
/// themselves go through one task, in the order the cycles asked for them, each on the group
/// as read just before it (a write must never land after a newer one, nor put back a False
/// over a True the watch has not shown yet).
fn write_condition(
    sched: &Scheduler,
    group: &Group,
    status: &'static str,
    reason: &'static str,
    message: String,
) {
    // A Coscheduling PodGroup's status is its own controller's.
    let Group::Workload(group) = group else {
        return;
    };
    let watched = group
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    if with_condition(watched, group.metadata.generation, status, reason, &message).is_none() {
        return;
    }
    sched.reports.group_condition(ConditionWrite {
        namespace: group.metadata.namespace.clone().unwrap_or_default(),
        name: group.metadata.name.clone().unwrap_or_default(),
        status,
        reason,
        message,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;

    #[test]
    fn placement_is_infeasible_once_min_count_is_out_of_reach() {
        assert_eq!(infeasible(4, 0, 4), None);
        assert_eq!(
            infeasible(4, 1, 2).as_deref(),
            Some("minCount (4) cannot be satisfied: 1 scheduled, 2 remaining")
        );
        assert_eq!(infeasible(3, 2, 1), None);
        assert_eq!(infeasible(0, 0, 0), None);
    }

    #[test]
    fn a_group_whose_pods_disagree_is_refused_in_upstreams_words() {
        use crate::scheduler::testing::PodBuilder;
        let group = |priority: Option<i32>| {
            let mut g: PodGroup = serde_json::from_value(serde_json::json!({
                "metadata": {"name": "g", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            }))
            .expect("a PodGroup");
            g.spec.priority = priority;
            Group::Workload(Arc::new(g))
        };
        let a = PodBuilder::new("a").scheduler_name("s").build();
        let b = PodBuilder::new("b").scheduler_name("s").build();
        assert_eq!(validate(&group(None), [&a, &b]), Ok(()));
        let other = PodBuilder::new("c").scheduler_name("t").build();
        assert_eq!(
            validate(&group(None), [&a, &other]),
            Err("all pods in a single pod group should have the same .spec.schedulerName set, got: \"t\" and \"s\"".into())
        );
        assert_eq!(
            validate(&group(Some(5)), [&a]),
            Err("all pods in a single pod group should have the same priority as the pod group's priority, got 0 and 5".into())
        );
        let mut never = PodBuilder::new("d").scheduler_name("s").build();
        if let Some(spec) = never.spec.as_mut() {
            spec.preemption_policy = Some("Never".into());
        }
        assert_eq!(
            validate(&group(None), [&a, &never]),
            Err("all pods in a single pod group should have the same preemption policy, got Never and PreemptLowerPriority".into())
        );
        let cosched = Group::Coscheduling(Arc::new(pod_groups::CoschedulingGroup {
            namespace: "default".into(),
            name: "g".into(),
            resource_version: None,
            min_member: 2,
        }));
        assert_eq!(
            validate(&cosched, [&a, &other]),
            Ok(()),
            "not a rule of Coscheduling"
        );
    }

    #[test]
    fn the_condition_is_written_once_and_never_regresses_from_true() {
        let first = with_condition(Vec::new(), Some(1), "False", "Unschedulable", "m")
            .expect("a new condition");
        assert_eq!(first.len(), 1);
        assert_eq!(
            with_condition(first.clone(), Some(1), "False", "Unschedulable", "m"),
            None,
            "the same again is not written"
        );
        let scheduled = with_condition(first, Some(1), "True", "Scheduled", "")
            .expect("False to True is written");
        assert_eq!(scheduled[0].status, "True");
        assert_eq!(
            with_condition(scheduled, Some(2), "False", "Unschedulable", "m"),
            None,
            "True never goes back"
        );
    }
}
