//! One scheduling cycle (kube-scheduler's schedulingCycle): take a pod from the queue, find its
//! node with its profile (`schedule_one.rs`), assume it there, run Reserve and Permit, and hand
//! it to the binding cycle (`binding.rs`). Every way it fails goes through one handler
//! (`failure.rs`). Serial; the only parallel work is Filter and Score over the nodes.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;

use crate::k8s::pods;
use crate::scheduler::Scheduler;
use crate::scheduler::failure::{Failure, one_node_fit_error};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::PermitWait;
use crate::scheduler::framework::{Code, CycleState, QueuedPodInfo, Status};
use crate::scheduler::schedule_one::{self, Choice, ScheduleResult};

/// The share of cycles, in percent, whose plugin runs are timed for kube-scheduler's
/// `scheduler_plugin_execution_duration_seconds` (its pluginMetricsSamplePercent).
const PLUGIN_METRICS_SAMPLE_PERCENT: u32 = 10;

/// What the binding cycle needs from the scheduling cycle.
pub struct Assumed {
    pub queued: QueuedPodInfo,
    pub profile: Arc<CompiledProfile>,
    pub state: CycleState,
    pub node: String,
    /// Set when a Permit plugin answered Wait: the verdict and how long to wait for it.
    pub permit: Option<PermitWait>,
    /// When the scheduling cycle began (kube-scheduler's attempt duration counts from it).
    pub started: Instant,
    /// How the node won, for the `Scheduled` event.
    pub choice: Choice,
}

/// Runs one scheduling cycle for `queued`.
pub fn schedule_one(sched: &Arc<Scheduler>, queued: QueuedPodInfo) {
    let pod = queued.pod.clone();
    let key = pod.key();
    let scheduler_name = pods::scheduler_name(&pod.pod);
    let Some(profile) = sched.profiles.get(scheduler_name) else {
        // The profile went away while the pod waited: it waits for one, unserved.
        tracing::debug!(pod = %key, scheduler = %scheduler_name, "no profile serves this pod any more; leaving it");
        sched.queue.unserve_popped(pod.uid());
        return;
    };
    if let Some(gang) = crate::scheduler::group_cycle::gang_of(sched, &profile, &queued) {
        crate::scheduler::group_cycle::schedule_group(sched, queued, profile, gang);
        return;
    }
    let start = Instant::now();
    let fail = |result: &'static str, failure: Failure| {
        sched
            .metrics
            .attempt(result, &profile.scheduler_name, start.elapsed());
        sched.handle_failure(&queued, &profile, failure);
    };
    if let Some(failure) = crate::scheduler::group_cycle::missing_group(sched, &profile, &queued) {
        return fail("unschedulable", failure);
    }
    let snapshot = sched.lock_cache().snapshot();
    let mut state = CycleState::new();
    if rand::rng().random_range(0..100) < PLUGIN_METRICS_SAMPLE_PERCENT {
        state.time_plugins();
    }
    if let Some(err) = &pod.parse_error {
        return fail(
            "unschedulable",
            Failure::invalid_affinity(err, snapshot.len()),
        );
    }
    // A watch this profile's plugins need fails or re-lists: its pods wait for it (with their
    // backoff; the condition says which), every other profile's go on.
    if let Some(watch) = sched.readiness.stale_for(|plugin| profile.uses(plugin)) {
        let status = Status::error(format!(
            "the {watch} watch, which this profile's plugins need, is not current (failing or re-listing); retrying"
        ));
        return fail("error", Failure::error(&status));
    }
    // Room held for pinned workloads counts as nominated pods do (its own workload's aside).
    let nominated = crate::scheduler::backend::holds::WithHolds {
        nominated: &sched.nominator,
        holds: &sched.holds,
        own: if sched.holds.is_empty() {
            None
        } else {
            profile.holds_key(&pod.pod)
        },
    };
    let result = schedule_one::schedule_pod(
        &profile,
        &mut state,
        &pod,
        &snapshot,
        &sched.start_index,
        &nominated,
    );
    sched.metrics.scheduling_algorithm(start.elapsed());
    for (point, code, took) in state.take_timings() {
        sched
            .metrics
            .extension_point(point, code, &profile.scheduler_name, took);
    }
    sched.metrics.plugin_runs(&state.take_plugin_runs());
    let (node, choice) = match result {
        ScheduleResult::Scheduled {
            node,
            evaluated,
            feasible,
            choice,
        } => {
            tracing::debug!(pod = %key, profile = %profile.source, node = %node, evaluated, feasible, "picked a node");
            (node, choice)
        }
        ScheduleResult::Unschedulable(diagnosis) => {
            let failure = Failure::unschedulable(diagnosis);
            tracing::info!(pod = %key, profile = %profile.source, reason = %failure.message, "pod is unschedulable");
            return fail("unschedulable", failure);
        }
        ScheduleResult::Error(status) => {
            tracing::warn!(pod = %key, profile = %profile.source, error = %status, "scheduling error");
            return fail("error", Failure::error(&status));
        }
    };

    sched.lock_cache().assume_pod(&pod, &node);
    sched.nominator.forget(pod.uid());
    let began = Instant::now();
    let status = profile.run_reserve(&mut state, &pod, &node);
    sched.metrics.extension_point(
        "Reserve",
        status.code,
        &profile.scheduler_name,
        began.elapsed(),
    );
    if !status.is_success() {
        sched.metrics.plugin_runs(&state.take_plugin_runs());
        sched.lock_cache().forget_pod(pod.uid());
        return fail(
            result_label(&status),
            Failure::after_status(&status, true, search_over_message(&status)),
        );
    }
    to_binding(sched, queued, profile, state, node, choice, start);
}

/// Permit, then the binding cycle, for a pod assumed on `node` whose Reserve passed (a pod of
/// its own cycle, or a member of a gang's group cycle). A Permit rejection gives back what the
/// pod holds and fails it.
pub(crate) fn to_binding(
    sched: &Arc<Scheduler>,
    queued: QueuedPodInfo,
    profile: Arc<CompiledProfile>,
    state: CycleState,
    node: String,
    choice: Choice,
    start: Instant,
) {
    let pod = queued.pod.clone();
    let fail = |result: &'static str, failure: Failure| {
        sched
            .metrics
            .attempt(result, &profile.scheduler_name, start.elapsed());
        sched.handle_failure(&queued, &profile, failure);
    };
    let began = Instant::now();
    let permitted = profile.run_permit(&state, &pod, &node, &sched.waiting_pods);
    let code = match &permitted {
        Ok(Some(_)) => Code::Wait,
        Ok(None) => Code::Success,
        Err(status) => status.code,
    };
    sched
        .metrics
        .extension_point("Permit", code, &profile.scheduler_name, began.elapsed());
    let permit = match permitted {
        Ok(permit) => permit,
        Err(status) => {
            profile.run_unreserve(&state, &pod, &node);
            sched.metrics.plugin_runs(&state.take_plugin_runs());
            sched.lock_cache().forget_pod(pod.uid());
            return fail(
                result_label(&status),
                Failure::after_status(&status, true, search_over_message(&status)),
            );
        }
    };
    sched.metrics.plugin_runs(&state.take_plugin_runs());
    sched
        .metrics
        .attempt("scheduled", &profile.scheduler_name, start.elapsed());
    sched.queue.done(pod.uid());
    sched.spawn_binding(Assumed {
        queued,
        profile,
        state,
        node,
        permit,
        started: start,
        choice,
    });
}

/// The attempt's result label (`scheduler_schedule_attempts_total`) for a status that ended it
/// after the search: `unschedulable` for a rejection, `error` otherwise, as upstream.
fn result_label(status: &Status) -> &'static str {
    if status.is_rejected() {
        "unschedulable"
    } else {
        "error"
    }
}

/// What a Reserve or Permit failure reports: a rejection as a FitError over the one node
/// (`0/1 nodes are available: 1 <reason>.`), an error as its runner wrapped it (`running
/// Reserve plugin "X": …`).
pub(crate) fn search_over_message(status: &Status) -> String {
    if status.is_rejected() {
        one_node_fit_error(status)
    } else {
        status.message()
    }
}
