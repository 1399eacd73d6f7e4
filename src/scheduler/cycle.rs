//! One scheduling cycle (kube-scheduler's scheduleOne): take a pod from the queue, find its node
//! with its profile, assume it there, run Reserve and Permit, and hand it to the binding cycle
//! (`binding.rs`). Serial; the only parallel work is Filter and Score over the nodes.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;

use crate::k8s::pods;
use crate::scheduler::Scheduler;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::{self, Choice, ScheduleResult};
use crate::scheduler::framework::{
    Code, CycleState, NominatedPods, Nomination, QueuedPodInfo, Status,
};

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
    pub permit: Option<runtime::PermitWait>,
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
        // The profile went away while the pod waited: leave the pod alone.
        tracing::debug!(pod = %key, scheduler = %scheduler_name, "no profile serves this pod any more; leaving it");
        sched.queue.forget(pod.uid());
        return;
    };
    let start = Instant::now();
    let snapshot = sched.lock_cache().snapshot();
    let mut state = CycleState::new();
    if rand::rng().random_range(0..100) < PLUGIN_METRICS_SAMPLE_PERCENT {
        state.time_plugins();
    }
    if let Some(err) = &pod.parse_error {
        let status = Status::unresolvable(format!("invalid pod affinity: {err}"));
        let message = format!(
            "0/{} nodes are available: {}.",
            snapshot.len(),
            status.message()
        );
        sched
            .metrics
            .attempt("unschedulable", &profile.scheduler_name, start.elapsed());
        sched.report_failure(&queued, "Unschedulable", message);
        sched.queue.add_unschedulable(
            &[],
            pod.uid(),
            (profile.pod_initial_backoff, profile.pod_max_backoff),
            status.retry_after,
        );
        return;
    }
    let result = runtime::schedule_pod(
        &profile,
        &mut state,
        &pod,
        &snapshot,
        &sched.start_index,
        &sched.nominator,
    );
    for (point, code, took) in state.take_timings() {
        sched
            .metrics
            .extension_point(point, code, &profile.scheduler_name, took);
    }
    sched.metrics.plugin_runs(&state.take_plugin_runs());
    let backoff = (profile.pod_initial_backoff, profile.pod_max_backoff);
    match result {
        ScheduleResult::Scheduled {
            node,
            evaluated,
            feasible,
            choice,
        } => {
            tracing::debug!(pod = %key, profile = %profile.source, node = %node, evaluated, feasible, "picked a node");
            sched.lock_cache().assume_pod(&pod, &node);
            sched.nominator.forget(pod.uid());
            let began = Instant::now();
            let status = runtime::run_reserve(&profile, &mut state, &pod, &node);
            sched.metrics.extension_point(
                "Reserve",
                status.code,
                &profile.scheduler_name,
                began.elapsed(),
            );
            if !status.is_success() {
                sched.metrics.plugin_runs(&state.take_plugin_runs());
                sched.lock_cache().forget_pod(pod.uid());
                sched
                    .metrics
                    .attempt("error", &profile.scheduler_name, start.elapsed());
                fail(sched, queued, &profile, status);
                return;
            }
            let began = Instant::now();
            let permitted = runtime::run_permit(&profile, &state, &pod, &node, &sched.waiting_pods);
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
                    runtime::run_unreserve(&profile, &state, &pod, &node);
                    sched.metrics.plugin_runs(&state.take_plugin_runs());
                    sched.lock_cache().forget_pod(pod.uid());
                    sched.metrics.attempt(
                        "unschedulable",
                        &profile.scheduler_name,
                        start.elapsed(),
                    );
                    fail(sched, queued, &profile, status);
                    return;
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
        ScheduleResult::Unschedulable(diagnosis) => {
            let message = diagnosis.message();
            tracing::info!(pod = %key, profile = %profile.source, reason = %message, "pod is unschedulable");
            sched
                .metrics
                .attempt("unschedulable", &profile.scheduler_name, start.elapsed());
            let nominated = match diagnosis.nomination.clone() {
                // Written again with each failure, so a nomination whose first write was
                // dropped for a newer failure of the pod still reaches the API.
                None | Some(Nomination::Keep) => sched.nominator.node_of(pod.uid()).map(Some),
                Some(Nomination::Clear) => {
                    sched.nominator.forget(pod.uid());
                    Some(None)
                }
                Some(Nomination::Node(node)) => {
                    tracing::info!(pod = %key, node = %node, "nominated after preemption");
                    sched.nominator.nominate(pod.clone(), &node);
                    Some(Some(node))
                }
            };
            sched.report_failure_nominating(&queued, "Unschedulable", message, nominated);
            sched.queue.add_unschedulable(
                &diagnosis.unschedulable_plugins,
                pod.uid(),
                backoff,
                diagnosis.retry_after(),
            );
        }
        ScheduleResult::Error(status) => {
            tracing::warn!(pod = %key, profile = %profile.source, error = %status, "scheduling error");
            sched
                .metrics
                .attempt("error", &profile.scheduler_name, start.elapsed());
            let cleared = clear_nomination(sched, &pod);
            sched.report_failure_nominating(&queued, "SchedulerError", status.message(), cleared);
            sched.queue.requeue_with_backoff(pod.uid(), backoff);
        }
    }
}

/// Ends the pod's nomination, if it had one (here or in the API), as upstream does when an
/// attempt fails other than by PostFilter's say: what to write of it.
pub fn clear_nomination(
    sched: &Scheduler,
    pod: &crate::scheduler::framework::pod_info::PodInfo,
) -> Option<Option<String>> {
    let had = sched.nominator.forget(pod.uid());
    if let Some(gone) = &had {
        sched.room_given_up(gone);
    }
    (had.is_some() || runtime::nominated_node(&pod.pod).is_some()).then_some(None)
}

/// The pod could not be placed after all (Reserve or Permit): report and requeue it.
fn fail(sched: &Scheduler, queued: QueuedPodInfo, profile: &CompiledProfile, status: Status) {
    let backoff = (profile.pod_initial_backoff, profile.pod_max_backoff);
    let cleared = clear_nomination(sched, &queued.pod);
    if status.is_rejected() {
        sched.report_failure_nominating(&queued, "Unschedulable", status.message(), cleared);
        let plugins: Vec<&'static str> = status.plugin.into_iter().collect();
        sched
            .queue
            .add_unschedulable(&plugins, queued.pod.uid(), backoff, status.retry_after);
    } else {
        sched.report_failure_nominating(&queued, "SchedulerError", status.message(), cleared);
        sched.queue.requeue_with_backoff(queued.pod.uid(), backoff);
    }
}
