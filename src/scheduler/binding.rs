//! The binding cycle (kube-scheduler's bindingCycle): runs concurrently with the next
//! scheduling cycle. Waits for Permit, runs PreBind, Bind and PostBind (the runners are the
//! compiled profile's). On failure the pod is unreserved and forgotten by the cache, and the
//! one failure handler (`failure.rs`) reports and requeues it.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;

use crate::gate::Write;
use crate::scheduler::cycle::Assumed;
use crate::scheduler::failure::Failure;
use crate::scheduler::framework::Status;
use crate::scheduler::framework::events::{ASSIGNED_POD_DELETE, EventObject};
use crate::scheduler::framework::runtime::PermitWait;
use crate::scheduler::{BindSlot, Scheduler};

/// Binds one assumed pod. `slot`, its place among the binding cycles binding now (taken when
/// its scheduling cycle ended), is given back for PreBind and taken again for the bind, until
/// the bind is answered.
pub async fn binding_cycle(sched: Arc<Scheduler>, assumed: Assumed, mut slot: Option<BindSlot>) {
    let Assumed {
        queued,
        profile,
        state,
        node,
        permit,
        started,
        choice,
    } = assumed;
    let pod_info = queued.pod.clone();
    let pod = pod_info.pod.clone();
    let key = pod_info.key();
    let start = Instant::now();

    // A Permit plugin's rejection counts as that plugin rejecting the pod; any later failure
    // is an error.
    let mut permit_rejected = false;
    let status = async {
        if let Some(PermitWait { verdict, timeout }) = permit {
            let verdict = sched
                .waiting_pods
                .wait(pod_info.uid(), verdict, timeout)
                .await;
            if !verdict.is_success() {
                permit_rejected = verdict.is_rejected();
                return verdict;
            }
        }
        sched.queue.permitted(pod_info.uid());
        // PreBind may wait long (VolumeBinding waits for the PV controller, up to its
        // bindTimeoutSeconds): it holds no place among the binding cycles, so pods waiting for
        // volumes never hold up the scheduling of others. The place is taken for the bind.
        drop(slot.take());
        let timed = |point: &'static str, status: &Status, began: Instant| {
            sched.metrics.extension_point(
                point,
                status.code,
                &profile.scheduler_name,
                began.elapsed(),
            );
        };
        let began = Instant::now();
        let status = profile.run_pre_bind(&state, &pod, &node).await;
        timed("PreBind", &status, began);
        if !status.is_success() {
            return status;
        }
        if sched.gate.admit(Write::Bind).is_err() {
            // Past the renew deadline: another replica may lead soon; this one exits.
            return Status::error(
                "this replica no longer leads; the pod is left to the next leader",
            );
        }
        slot = Some(BindSlot::take(&sched));
        let began = Instant::now();
        let status = profile.run_bind(&state, &pod, &node).await;
        timed("Bind", &status, began);
        status
    }
    .await;
    drop(slot);

    if status.is_success() {
        sched
            .metrics
            .bound(&profile.scheduler_name, start.elapsed());
        sched.metrics.pod_scheduled(
            &profile.scheduler_name,
            started.elapsed(),
            queued.initial_attempt_timestamp.elapsed(),
            queued.attempts,
        );
        tracing::info!(pod = %key, profile = %profile.source, node = %node, "bound pod");
        // Queued, as kube-scheduler records it before PostBind; written off this cycle.
        sched.reports.scheduled(&pod, &node, &choice);
        let began = Instant::now();
        profile.run_post_bind(&state, &pod, &node).await;
        sched.metrics.extension_point(
            "PostBind",
            crate::scheduler::framework::Code::Success,
            &profile.scheduler_name,
            began.elapsed(),
        );
        sched.metrics.plugin_runs(&state.take_plugin_runs());
        return;
    }

    tracing::warn!(pod = %key, node = %node, error = %status, "binding failed");
    sched.metrics.bind_failed(
        &profile.scheduler_name,
        started.elapsed(),
        status.is_rejected(),
    );
    profile.run_unreserve(&state, &pod_info, &node);
    sched.metrics.plugin_runs(&state.take_plugin_runs());
    if let Some(other) = &status.bound_elsewhere {
        // Bound, just not by this cycle (an earlier tether's bind that landed late): the cache
        // holds it where it is (the watch confirms it), nothing is reported or requeued, and
        // the bind is counted like any other.
        tracing::warn!(pod = %key, node = %other, "the pod was bound elsewhere meanwhile");
        let bound = assumed_pod(&pod, other);
        {
            let mut cache = sched.lock_cache();
            if cache.is_assumed(pod_info.uid()) || cache.pod(pod_info.uid()).is_none() {
                cache.upsert_pod(bound.clone());
            }
            sched.queue.forget(pod_info.uid());
        }
        sched.bound_by_another(bound);
        return;
    }
    sched.lock_cache().forget_pod(pod_info.uid());
    let message = if status.is_rejected() {
        status.message()
    } else {
        format!("Binding rejected: {}", status.message())
    };
    // Only a Permit plugin's rejection names its plugin for the queue: PreBind and Bind
    // register no events.
    let failure = Failure::after_status(&status, permit_rejected, message);
    sched.handle_failure(&queued, &profile, failure).await;
    // The pod held resources in the cache: pods waiting for them may fit now.
    sched.queue.on_event(
        ASSIGNED_POD_DELETE,
        Some(EventObject::Pod(assumed_pod(&pod, &node))),
        None,
    );
}

/// The pod as it was assumed: on `node`.
fn assumed_pod(pod: &Pod, node: &str) -> Arc<Pod> {
    let mut assumed = pod.clone();
    assumed.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    Arc::new(assumed)
}
