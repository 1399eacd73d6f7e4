//! The hand-off from a scheduling cycle to its binding cycle, shared by the pod's own cycle
//! and a gang's group cycle: Permit, then the binding cycle spawned (or the failure reported).

use std::sync::Arc;
use std::time::Instant;

use crate::scheduler::Scheduler;
use crate::scheduler::algorithm::Choice;
use crate::scheduler::binding::{self, Assumed};
use crate::scheduler::failure::{FailedAttempt, Failure, one_node_fit_error};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::{Code, CycleState, QueuedPodInfo, Status};

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
        FailedAttempt::of_cycle(&queued, &profile, failure, result, start).handle(sched);
    };
    let began = Instant::now();
    let permitted = profile.run_permit(&state, &pod, &node, &sched.binder.waiting);
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
    sched.state.queue.done(pod.uid());
    spawn_binding(
        sched,
        Assumed {
            queued,
            profile,
            state,
            node,
            permit,
            started: start,
            choice,
        },
    );
}

/// Starts the binding cycle of an assumed pod on the tokio runtime.
pub fn spawn_binding(sched: &Arc<Scheduler>, assumed: Assumed) {
    // A pod that waits at Permit takes its place among the binding cycles when it binds; one
    // that binds now takes it here, before the loop schedules the next pod.
    let binds_now = assumed.permit.is_none();
    let cycle_of = sched.clone();
    sched.binder.spawn(binds_now, move |slot| {
        binding::binding_cycle(cycle_of, assumed, slot)
    });
}

/// The attempt's result label (`scheduler_schedule_attempts_total`) for a status that ended it
/// after the search: `unschedulable` for a rejection, `error` otherwise, as upstream.
pub(crate) fn result_label(status: &Status) -> &'static str {
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
