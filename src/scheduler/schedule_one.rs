//! One scheduling cycle (kube-scheduler's schedulingCycle): take a pod from the queue, find its
//! node with its profile (`schedule_one.rs`), assume it there, run Reserve and Permit, and hand
//! it to the binding cycle (`binding.rs`). Every way it fails goes through one handler
//! (`failure.rs`). Serial; the only parallel work is Filter and Score over the nodes.

use std::sync::Arc;
use std::time::Instant;

use rand::Rng;

use crate::gate::Write;
use crate::k8s::pods;
use crate::scheduler::Scheduler;
use crate::scheduler::algorithm::{self, ScheduleResult};
use crate::scheduler::batch::BatchCycle;
use crate::scheduler::failure::{FailedAttempt, Failure};
use crate::scheduler::framework::{CycleState, QueuedPodInfo, Status};
use crate::scheduler::handoff::{result_label, search_over_message, to_binding};
use crate::scheduler::schedule_one_group::{self, Dispatch};

/// The share of cycles, in percent, whose plugin runs are timed for kube-scheduler's
/// `scheduler_plugin_execution_duration_seconds` (its pluginMetricsSamplePercent).
const PLUGIN_METRICS_SAMPLE_PERCENT: u32 = 10;

/// Runs one scheduling cycle for `queued`.
pub fn schedule_one(sched: &Arc<Scheduler>, queued: QueuedPodInfo) {
    // Every pod or group taken from the queue is a cycle (a ranking kept serves only the next).
    let cycle = sched.batch.next_cycle();
    let pod = queued.pod.clone();
    let key = pod.key();
    let scheduler_name = pods::scheduler_name(&pod.pod);
    let Some(profile) = sched.profiles.get(scheduler_name) else {
        // The profile went away while the pod waited: it waits for one, unserved.
        tracing::debug!(pod = %key, scheduler = %scheduler_name, "no profile serves this pod any more; leaving it");
        sched.state.queue.unserve_popped(pod.uid());
        return;
    };
    let start = Instant::now();
    let alone_or_missing = match schedule_one_group::dispatch(sched, &profile, &queued) {
        Dispatch::Group(gang) => {
            schedule_one_group::schedule_group(sched, queued, profile, gang);
            return;
        }
        Dispatch::Composite(root, tree) => {
            crate::scheduler::composite_cycle::schedule_composite(
                sched,
                queued,
                profile,
                (root, tree),
            );
            return;
        }
        Dispatch::MissingGroup(failure) => Some(failure),
        Dispatch::Pod => None,
    };
    let fail = |result: &'static str, failure: Failure| {
        FailedAttempt::of_cycle(&queued, &profile, failure, result, start).handle(sched);
    };
    if let Some(failure) = alone_or_missing {
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
    let nominated = sched.state.room.for_pod(&profile, &pod.pod);
    let kept = sched.batch.take(&profile.scheduler_name);
    let mut batch = BatchCycle::new(kept, cycle, &profile, &pod);
    let result = algorithm::schedule_pod_batched(
        &profile,
        &mut state,
        &pod,
        &snapshot,
        &sched.start_index,
        &nominated,
        &mut batch,
    );
    sched.metrics.scheduling_algorithm(start.elapsed());
    sched.metrics.batch(&profile.scheduler_name, batch.outcome);
    sched.batch.put(&profile.scheduler_name, batch.into_kept());
    for (point, code, took) in state.take_timings() {
        sched
            .metrics
            .extension_point(point, code, &profile.scheduler_name, took);
    }
    sched
        .metrics
        .plugin_evaluations(&profile.scheduler_name, &state.take_evaluations());
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
    sched.state.room.nominator.forget(pod.uid());
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

/// The scheduling loop: pops pods and schedules them one at a time until the queue closes
/// or the gate admits no bind any more (the term this scheduler led is over).
/// Runs on its own thread: the cycle is CPU work and must not block the tokio workers.
/// No cycle runs while a watch fails or re-lists: a pod is never placed against a view of
/// the nodes or pods from before an outage.
pub fn run_loop(sched: &Arc<Scheduler>) {
    let over = || sched.state.queue.is_closed() || !sched.binder.gate.admits(Write::Bind);
    loop {
        if !sched.readiness.wait_current(over) || over() {
            return;
        }
        let Some(queued) = sched.state.queue.pop() else {
            return;
        };
        if !sched.readiness.wait_current(over) || over() {
            return;
        }
        schedule_one(sched, queued);
        sched
            .binder
            .cycles
            .wait_for_room(|| sched.state.queue.is_closed());
    }
}
