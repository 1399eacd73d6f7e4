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
use crate::scheduler::algorithm::{self, ScheduleResult};
use crate::scheduler::failure::{FailedAttempt, Failure, NominationOutcome};
use crate::scheduler::framework::group_post_filter::GroupReleaseContext;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::priority;
use crate::scheduler::framework::{Code, CycleState, Nomination, QueuedPodInfo, Status};
use crate::scheduler::group_placement::{Assigned, GROUP_UNSCHEDULABLE, infeasible};
use crate::scheduler::group_preemption::{self, policy};
use crate::scheduler::group_status::{ConditionWrite, with_condition};
use crate::scheduler::group_topology;
use crate::scheduler::handoff::{search_over_message, to_binding};
use crate::scheduler::informers::pod_groups::{self, Group, GroupApi};
use crate::scheduler::outcome::FailureReason;
use crate::scheduler::plugins::gangs::{Gang, plugin_for};

/// The PodGroup condition the group cycle writes (upstream's
/// `PodGroupInitiallyScheduled`): True once the group was placed, never False again after.
pub use crate::scheduler::group_status::INITIALLY_SCHEDULED;

/// How a popped pod is scheduled, decided once at the top of its cycle (as upstream's
/// ScheduleOne dispatches a pod or its group): alone, with its gang in a group cycle, or not at
/// all while the group it names is not known.
pub enum Dispatch {
    /// Alone: it names no group its profile serves.
    Pod,
    /// With its group in a group cycle: one of the gang policy (`minCount` of it placed or
    /// none), or of the basic policy (a gang of `minCount` 1, as upstream's getMinCount: the
    /// members that fit are placed, each other fails alone, and the group's condition is
    /// written).
    Group(Gang),
    /// With every pod of its hierarchy (1.38's CompositePodGroups) in one cycle: the root
    /// CompositePodGroup and the tree under it.
    Composite(
        crate::scheduler::informers::pod_groups::composite::CompositeKey,
        crate::scheduler::informers::pod_groups::composite::Tree,
    ),
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
            GroupApi::Workload if profile.release.at_least(38) => format!(
                "pod group {:?} or one of its composite pod group ancestors has not been created yet",
                key.name
            ),
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
    if profile.release.at_least(38) && sched.pod_groups.has_parent(&key) {
        use crate::scheduler::informers::pod_groups::composite::Root;
        let missing = || {
            Dispatch::MissingGroup(Failure {
                reason: FailureReason::Unschedulable,
                message: format!(
                    "pod group {:?} or one of its composite pod group ancestors has not been created yet",
                    key.name
                ),
                rejected_by: vec![plugin],
                retry_after: None,
                nomination: NominationOutcome::Untouched,
            })
        };
        match sched.pod_groups.root_of(&key) {
            Ok(Some(Root::Composite(root))) => {
                return match sched.pod_groups.tree(&root) {
                    Some(tree) => Dispatch::Composite(root, tree),
                    None => missing(),
                };
            }
            Ok(Some(Root::Alone)) => {}
            Ok(None) => return missing(),
            Err(cycle) => return Dispatch::MissingGroup(Failure::error(&Status::error(cycle))),
        }
    }
    let min_count = group.policy().min_count();
    Dispatch::Group(Gang {
        key,
        group,
        min_count,
    })
}

/// Upstream's validatePodGroup (with PodGroupPreemptionPolicy off, its 1.37 default), for a
/// Workload API group: its pods (those to place, then those scheduled before) share the first
/// one's schedulerName and preemption policy, and each has the group's priority
/// (`spec.priority`, 0 when unset). The first broken rule, in upstream's words: from 1.38
/// (validatePodGroupHierarchy) worded for a hierarchy, naming the pods and the group, and the
/// preemption policy the group's own when it sets one.
fn validate<'a>(
    group: &Group,
    pods: impl IntoIterator<Item = &'a crate::k8s::pod::Pod>,
    release: crate::k8s::release::Release,
) -> Result<(), String> {
    let Group::Workload(group) = group else {
        return Ok(());
    };
    if release.at_least(38) {
        return validate_hierarchy(group, pods);
    }
    let group_priority = group.spec.priority.unwrap_or(0);
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

/// 1.38's validatePodGroupHierarchy for a lone PodGroup: the first queued pod is the
/// reference for the schedulerName, the group's priority for every pod's, the group's
/// `preemptionPolicy` (else the first pod's) for every pod's.
fn validate_hierarchy<'a>(
    group: &k8s_openapi::api::scheduling::v1beta1::PodGroup,
    pods: impl IntoIterator<Item = &'a crate::k8s::pod::Pod>,
) -> Result<(), String> {
    let group_priority = group.spec.priority.unwrap_or(0);
    let group_key = format!(
        "podgroup/{}/{}",
        group.metadata.namespace.as_deref().unwrap_or_default(),
        group.metadata.name.as_deref().unwrap_or_default()
    );
    // Upstream names the pods by name alone (the group by its key).
    let key = |pod: &crate::k8s::pod::Pod| pod.metadata.name.clone().unwrap_or_default();
    let mut first: Option<(String, String, String)> = None;
    for pod in pods {
        let name = pods::scheduler_name(pod).to_string();
        let (scheduler, first_key, expected_policy) = first
            .get_or_insert_with(|| {
                let expected = group
                    .spec
                    .preemption_policy
                    .clone()
                    .unwrap_or_else(|| policy(pod));
                (name.clone(), key(pod), expected)
            })
            .clone();
        if name != scheduler {
            return Err(format!(
                "all pods in a pod group hierarchy should have the same .spec.schedulerName set, got: {name:?} ({:?}) and {scheduler:?} ({first_key:?})",
                key(pod)
            ));
        }
        let own = priority(pod);
        if own != group_priority {
            return Err(format!(
                "all pods in a pod group hierarchy should have the same priority as the root pod group's priority, got {own} ({:?}) and {group_priority} ({group_key:?})",
                key(pod)
            ));
        }
        let own = policy(pod);
        if own != expected_policy {
            return Err(format!(
                "all pods in a pod group hierarchy should have the same preemption policy, got {own} ({:?}) and {expected_policy}",
                key(pod)
            ));
        }
    }
    Ok(())
}

/// Members in upstream's order (PodGroupMemberPodsOrderingFunc): priority (highest first),
/// attempts (most first: a pod's timestamp is renewed with each attempt, so the one tried most
/// is the oldest), when they were queued, name.
fn order(a: &QueuedPodInfo, b: &QueuedPodInfo) -> std::cmp::Ordering {
    priority(&b.pod.pod)
        .cmp(&priority(&a.pod.pod))
        .then(b.attempts.cmp(&a.attempts))
        .then(a.timestamp.cmp(&b.timestamp))
        .then_with(|| a.pod.key().cmp(&b.pod.key()))
}

/// The members of a group cycle: `first` (just popped) and every waiting pod `in_group` says
/// is a member, taken from the queue and put in the cycle's order; None (nothing taken) while a
/// member is held by a scheduling gate, when `plugin` holds them all instead.
pub(crate) fn take_members(
    sched: &Scheduler,
    in_group: impl Fn(&crate::k8s::pod::Pod) -> bool + Copy,
    first: QueuedPodInfo,
    (plugin, group): (&'static str, &dyn std::fmt::Display),
) -> Option<Vec<QueuedPodInfo>> {
    let queue = &sched.state.queue;
    if queue.hold_group_while_gated(in_group, first.pod.uid(), plugin) {
        tracing::debug!(group = %group, "a member is held by a scheduling gate; the group waits for it");
        return None;
    }
    let mut members = queue.take_group(in_group, first.pod.uid(), plugin);
    members.push(first);
    members.sort_by(order);
    Some(members)
}

/// Why a group cycle of `profile` cannot run now: a watch its plugins need is not current.
pub(crate) fn stale_watch(sched: &Scheduler, profile: &CompiledProfile) -> Option<String> {
    let watch = sched.readiness.stale_for(|plugin| profile.uses(plugin))?;
    Some(format!(
        "the {watch} watch, which this profile's plugins need, is not current (failing or re-listing); retrying"
    ))
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
    let Some(members) = take_members(sched, in_group, first, (group_plugin, &gang.key)) else {
        return;
    };
    let group_name = gang.key.to_string();

    if let Some(stale) = stale_watch(sched, &profile) {
        let status = Status::error(stale);
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
    if let Err(refused) = validate(&gang.group, pods, profile.release) {
        let status = Status::error(refused);
        tracing::warn!(group = %group_name, error = %status, "pod group refused");
        // 1.38 says so on the PodGroup as a PodGroupError.
        let reason = if profile.release.at_least(38) {
            "PodGroupError"
        } else {
            "SchedulerError"
        };
        let failed = GroupError {
            status: &status,
            member: None,
            reason,
        };
        return fail_group(
            sched,
            &profile,
            &gang,
            &members,
            failed,
            start,
            start.elapsed(),
        );
    }
    let release = profile.release;
    let mut scheduled = already;
    let mut remaining = members.len();
    let mut placed: Vec<Assigned> = Vec::new();
    let mut own_failures: Vec<(usize, Failure)> = Vec::new();
    let mut rejected_by: BTreeSet<&'static str> = BTreeSet::from([group_plugin]);
    let mut retry_after: Option<Duration> = None;
    let mut unschedulable = 0;
    let mut group_failure = infeasible(release, gang.min_count, scheduled, 0, remaining);
    let mut error = None;
    let mut evaluated = 0;
    let nominated = sched.state.room.for_group();
    let topology = group_topology::key_of(&gang, release).filter(|_| group_failure.is_none());
    let group_claims = crate::scheduler::framework::GroupClaims::default();
    if let Some(key) = &topology {
        // Placed inside one domain of its topology constraint (1.38).
        let cycle = group_topology::cycle(sched, &profile, &members, (&gang, already), key);
        if let Some((member, status)) = cycle.error {
            tracing::warn!(group = %group_name, profile = %profile.source, error = %status, "pod group scheduling error");
            let failed = GroupError {
                status: &status,
                member,
                reason: "SchedulerError",
            };
            return fail_group(
                sched,
                &profile,
                &gang,
                &members,
                failed,
                start,
                start.elapsed(),
            );
        }
        placed = cycle.placed;
        own_failures = cycle.own_failures;
        rejected_by.extend(cycle.rejected_by);
        retry_after = cycle.retry_after;
        group_failure = cycle.group_failure;
        evaluated = cycle.evaluated;
    } else if group_failure.is_none() {
        for (index, member) in members.iter().enumerate() {
            evaluated = index + 1;
            let pod = &member.pod;
            let snapshot = sched.lock_cache().snapshot();
            let mut state = CycleState::new();
            state.write(
                crate::scheduler::framework::GROUP_CLAIMS_KEY,
                group_claims.clone(),
            );
            if let Some(err) = &pod.parse_error {
                remaining -= 1;
                unschedulable += 1;
                own_failures.push((index, Failure::invalid_affinity(err, snapshot.len())));
                group_failure =
                    infeasible(release, gang.min_count, scheduled, unschedulable, remaining);
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
                        placed.push(Assigned {
                            index,
                            state,
                            node,
                            choice,
                        });
                    } else {
                        sched.lock_cache().forget_pod(pod.uid());
                        unschedulable += 1;
                        rejected_by.extend(status.plugin);
                        own_failures.push((
                            index,
                            Failure::after_status(&status, true, search_over_message(&status)),
                        ));
                    }
                }
                ScheduleResult::Unschedulable(diagnosis) => {
                    unschedulable += 1;
                    rejected_by.extend(diagnosis.unschedulable_plugins.iter().copied());
                    let failure = Failure::unschedulable(diagnosis);
                    retry_after = match (retry_after, failure.retry_after) {
                        (Some(a), Some(b)) => Some(a.min(b)),
                        (a, b) => a.or(b),
                    };
                    own_failures.push((index, failure));
                }
                ScheduleResult::Error(status) => {
                    error = Some((index, status));
                    break;
                }
            }
            group_failure =
                infeasible(release, gang.min_count, scheduled, unschedulable, remaining);
            if group_failure.is_some() {
                break;
            }
        }
    }
    let search = start.elapsed();
    sched.metrics.scheduling_algorithm(search);

    let give_back = |placed: &[Assigned]| {
        for p in placed.iter().rev() {
            let pod = &members[p.index].pod;
            profile.run_unreserve(&p.state, pod, &p.node);
            sched.lock_cache().forget_pod(pod.uid());
        }
    };

    if let Some((index, status)) = error {
        give_back(&placed);
        tracing::warn!(group = %group_name, profile = %profile.source, error = %status, "pod group scheduling error");
        let failed = GroupError {
            status: &status,
            member: Some(index),
            reason: "SchedulerError",
        };
        return fail_group(sched, &profile, &gang, &members, failed, start, search);
    }

    if let Some(message) = group_failure {
        give_back(&placed);
        // What the group's PostFilter plugins say, in their order: DynamicResources' says it
        // freed what it could (upstream says so whether or not the group holds claims), then
        // DefaultPreemption's. A success (a preemption decided) is said alone, and so, until
        // 1.38, is a verdict no preemption can resolve (no victims), as upstream's framework
        // returns either alone.
        let mut full = message.clone();
        // DynamicResources frees what kept the members off nodes first (nothing for a group
        // with scheduling constraints, 1.38's topology-aware groups): an error fails the
        // cycle, an unresolvable verdict ends the group's PostFilter before preemption.
        let constrained = matches!(&gang.group, Group::Workload(g)
            if release.at_least(38) && g.spec.scheduling_constraints.is_some());
        let released = match &gang.group {
            Group::Workload(_) if !constrained => {
                let pods: Vec<&crate::k8s::pod::Pod> =
                    members.iter().map(|m| m.pod.pod.as_ref()).collect();
                let ctx = GroupReleaseContext {
                    cycle: &group_claims,
                    unscheduled: &pods,
                    scheduled: already,
                };
                profile
                    .post_filter
                    .iter()
                    .find_map(|p| Some((p.name(), p.group_release()?.release(&ctx))))
            }
            _ => None,
        };
        if let Some((plugin, status)) = &released
            && status.code == Code::Error
        {
            let status = Status::error(format!(
                "error in {plugin:?} PodGroupPostFilter plugins: {}",
                status.message()
            ));
            tracing::warn!(group = %group_name, profile = %profile.source, error = %status, "pod group post-filter error");
            let failed = GroupError {
                status: &status,
                member: None,
                reason: "SchedulerError",
            };
            return fail_group(sched, &profile, &gang, &members, failed, start, search);
        }
        let ends = released
            .as_ref()
            .is_some_and(|(_, s)| s.code == Code::UnschedulableAndUnresolvable);
        let preemption = if ends {
            None
        } else {
            group_preemption::run(sched, &profile, &gang, &members, already)
        };
        let alone = preemption
            .as_ref()
            .is_some_and(|p| p.succeeded || (!release.at_least(38) && p.unresolvable));
        if let Some((_, said)) = released.filter(|_| !alone) {
            let words = said.message();
            if !words.is_empty() {
                full.push_str(", ");
                full.push_str(&words);
            }
        }
        let mut nominations: std::collections::HashMap<usize, String> = Default::default();
        let waiting_on_preemption = preemption.as_ref().is_some_and(|p| p.succeeded);
        if let Some(said) = preemption {
            full.push_str(", ");
            full.push_str(&said.words);
            nominations.extend(said.nominations);
        }
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
        // From 1.38 a member that did not fail on its own says its parent group is
        // unschedulable, retried by what helps the group; one that did keeps its own reason and
        // plugins.
        let parent = |member: &QueuedPodInfo| Failure {
            reason: FailureReason::Unschedulable,
            message: format!(
                "parent pod group {:?} is unschedulable",
                pod_group_name(member)
            ),
            rejected_by: vec![group_plugin],
            retry_after,
            nomination: NominationOutcome::PostFilter(None),
        };
        for (index, member) in members.iter().enumerate() {
            let own_failure = own.remove(&index);
            let failure = if release.at_least(38) {
                own_failure.unwrap_or_else(|| parent(member))
            } else if placed.iter().any(|p| p.index == index) {
                group_failure(format!("{GROUP_UNSCHEDULABLE}, {full}"))
            } else if let Some(mut failure) = own_failure {
                // Its own reason, requeued by what may help any member of the group.
                failure.rejected_by = rejected_by.clone();
                failure
            } else {
                debug_assert!(index >= evaluated);
                group_failure(message.clone())
            };
            let mut failure = failure;
            if let Some(node) = nominations.remove(&index) {
                // Nominated where the preemption makes room for it.
                failure.nomination = NominationOutcome::PostFilter(Some(Nomination::Node(node)));
            }
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
        write_condition(sched, &gang.group, release, "False", "Unschedulable", full);
        let result = if waiting_on_preemption {
            "waiting_on_preemption"
        } else {
            "unschedulable"
        };
        sched
            .metrics
            .podgroup_attempt(result, &profile.scheduler_name, search, start.elapsed());
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
        write_condition(
            sched,
            &gang.group,
            profile.release,
            "True",
            "Scheduled",
            String::new(),
        );
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

/// Why a group cycle ended in an error: the status, the member it came from (none for a group
/// refused as a whole), and the reason the PodGroup's condition gives.
struct GroupError<'a> {
    status: &'a Status,
    member: Option<usize>,
    reason: &'static str,
}

/// The name of the PodGroup `member` names (its `spec.schedulingGroup.podGroupName`).
fn pod_group_name(member: &QueuedPodInfo) -> String {
    pod_groups::group_of(&member.pod.pod)
        .map(|key| key.name)
        .unwrap_or_default()
}

/// A group cycle that ended in an error before any member was placed for good: each member
/// fails with it (from 1.38, those it did not come from say their parent group erred), the
/// PodGroup says so with the error's reason, the cycle counts as `error`.
fn fail_group(
    sched: &Arc<Scheduler>,
    profile: &CompiledProfile,
    gang: &Gang,
    members: &[QueuedPodInfo],
    failed: GroupError<'_>,
    start: Instant,
    search: Duration,
) {
    let GroupError {
        status,
        member: erring,
        reason,
    } = failed;
    for (index, member) in members.iter().enumerate() {
        let failure = if profile.release.at_least(38) && erring.is_some_and(|i| i != index) {
            Failure::error(&Status::error(format!(
                "parent pod group {:?} encountered an error",
                pod_group_name(member)
            )))
        } else {
            Failure::error(status)
        };
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
        profile.release,
        "False",
        reason,
        status.message(),
    );
    sched
        .metrics
        .podgroup_attempt("error", &profile.scheduler_name, search, start.elapsed());
}

/// One member's failed attempt: counted, reported and sent back to the queue, backing off as
/// its group of `group_size` does.
pub(crate) fn fail(
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

/// Asks for the group's `PodGroupInitiallyScheduled` condition, as upstream writes it: never
/// from True back to anything else, and not at all when the group already says the same. The
/// watched copy answers the common case (the same again) without a request; the writes
/// themselves go through one task, in the order the cycles asked for them, each on the group
/// as read just before it (a write must never land after a newer one, nor put back a False
/// over a True the watch has not shown yet).
fn write_condition(
    sched: &Scheduler,
    group: &Group,
    release: crate::k8s::release::Release,
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
    let keep_true = release.at_least(38);
    if with_condition(
        watched,
        group.metadata.generation,
        status,
        reason,
        &message,
        keep_true,
    )
    .is_none()
    {
        return;
    }
    sched.reports.group_condition(ConditionWrite {
        namespace: group.metadata.namespace.clone().unwrap_or_default(),
        name: group.metadata.name.clone().unwrap_or_default(),
        status,
        reason,
        message,
        uid: group.metadata.uid.clone(),
        keep_true,
        composite: false,
    });
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;

    use crate::k8s::release::Release;

    #[test]
    fn placement_is_infeasible_once_min_count_is_out_of_reach() {
        let r37 = Release::of_minor(37);
        assert_eq!(infeasible(r37, 4, 0, 0, 4), None);
        assert_eq!(
            infeasible(r37, 4, 1, 1, 2).as_deref(),
            Some("minCount (4) cannot be satisfied: 1 scheduled, 2 remaining")
        );
        assert_eq!(infeasible(r37, 3, 2, 0, 1), None);
        assert_eq!(infeasible(r37, 0, 0, 0, 0), None);
        assert_eq!(
            infeasible(Release::of_minor(38), 4, 1, 2, 0).as_deref(),
            Some(
                "scheduling policy's minimum threshold (4) cannot be satisfied: 1 scheduled, 2 unschedulable, 0 not-evaluated"
            )
        );
    }

    /// Members go in upstream's order: the one tried most first among pods of one priority.
    #[test]
    fn members_tried_more_often_go_first() {
        use crate::scheduler::testing::PodBuilder;
        let now = Instant::now();
        let queued = |name: &str, attempts: u32| QueuedPodInfo {
            pod: Arc::new(PodBuilder::new(name).info()),
            initial_attempt_timestamp: now,
            timestamp: now,
            attempts,
            unschedulable_plugins: BTreeSet::new(),
            unschedulable_count: 0,
            consecutive_errors_count: 0,
            gated_by: None,
        };
        let mut members = [queued("a", 1), queued("b", 3), queued("c", 2)];
        members.sort_by(order);
        let names: Vec<&str> = members.iter().map(|m| m.pod.name()).collect();
        assert_eq!(names, ["b", "c", "a"]);
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
        let r37 = Release::of_minor(37);
        let a = PodBuilder::new("a").scheduler_name("s").build();
        let b = PodBuilder::new("b").scheduler_name("s").build();
        assert_eq!(validate(&group(None), [&a, &b], r37), Ok(()));
        let other = PodBuilder::new("c").scheduler_name("t").build();
        assert_eq!(
            validate(&group(None), [&a, &other], r37),
            Err("all pods in a single pod group should have the same .spec.schedulerName set, got: \"t\" and \"s\"".into())
        );
        assert_eq!(
            validate(&group(Some(5)), [&a], r37),
            Err("all pods in a single pod group should have the same priority as the pod group's priority, got 0 and 5".into())
        );
        let mut never = PodBuilder::new("d").scheduler_name("s").build();
        if let Some(spec) = never.spec.as_mut() {
            spec.preemption_policy = Some("Never".into());
        }
        assert_eq!(
            validate(&group(None), [&a, &never], r37),
            Err("all pods in a single pod group should have the same preemption policy, got Never and PreemptLowerPriority".into())
        );
        let cosched = Group::Coscheduling(Arc::new(pod_groups::CoschedulingGroup {
            namespace: "default".into(),
            name: "g".into(),
            resource_version: None,
            min_member: 2,
        }));
        assert_eq!(
            validate(&cosched, [&a, &other], r37),
            Ok(()),
            "not a rule of Coscheduling"
        );
        // 1.38's words, naming the pods and the group; the group's own preemption policy wins.
        let r38 = Release::of_minor(38);
        assert_eq!(
            validate(&group(None), [&a, &other], r38),
            Err("all pods in a pod group hierarchy should have the same .spec.schedulerName set, got: \"t\" (\"c\") and \"s\" (\"a\")".into())
        );
        assert_eq!(
            validate(&group(Some(5)), [&a], r38),
            Err("all pods in a pod group hierarchy should have the same priority as the root pod group's priority, got 0 (\"a\") and 5 (\"podgroup/default/g\")".into())
        );
        let Group::Workload(g) = group(None) else {
            unreachable!("a Workload group")
        };
        let mut never_group = (*g).clone();
        never_group.spec.preemption_policy = Some("Never".into());
        assert_eq!(
            validate(&Group::Workload(Arc::new(never_group)), [&never, &a], r38),
            Err("all pods in a pod group hierarchy should have the same preemption policy, got PreemptLowerPriority (\"a\") and Never".into())
        );
    }

    #[test]
    fn the_condition_is_written_once_and_never_regresses_from_true() {
        let first = with_condition(Vec::new(), Some(1), "False", "Unschedulable", "m", false)
            .expect("a new condition");
        assert_eq!(first.len(), 1);
        assert_eq!(
            with_condition(first.clone(), Some(1), "False", "Unschedulable", "m", false),
            None,
            "the same again is not written"
        );
        let scheduled = with_condition(first, Some(1), "True", "Scheduled", "", false)
            .expect("False to True is written");
        assert_eq!(scheduled[0].status, "True");
        assert_eq!(
            with_condition(
                scheduled.clone(),
                Some(2),
                "False",
                "Unschedulable",
                "m",
                false
            ),
            None,
            "True never goes back"
        );
        assert!(
            with_condition(scheduled.clone(), Some(2), "True", "Scheduled", "", false).is_some(),
            "1.37 writes True again for a new generation"
        );
        assert_eq!(
            with_condition(scheduled, Some(2), "True", "Scheduled", "", true),
            None,
            "1.38 never writes a True condition again"
        );
    }
}
