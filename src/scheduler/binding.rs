//! The binding cycle (kube-scheduler's bindingCycle): runs concurrently with the next
//! scheduling cycle. Waits for Permit, runs PreBind, Bind and PostBind (the runners are the
//! compiled profile's). On failure the pod is unreserved and forgotten by the cache, and the
//! one failure handler (`failure.rs`) reports and requeues it.

use std::sync::Arc;
use std::time::Instant;

use crate::gate::Write;
use crate::k8s::pod::Pod;
use crate::scheduler::Scheduler;
use crate::scheduler::algorithm::Choice;
use crate::scheduler::binder::BindSlot;
use crate::scheduler::failure::{FailedAttempt, Failure, NominationOutcome, one_node_fit_error};
use crate::scheduler::framework::events::{ASSIGNED_POD_DELETE, EventObject};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::PermitWait;
use crate::scheduler::framework::{Code, Status};
use crate::scheduler::framework::{CycleState, QueuedPodInfo};

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
    let mut stage = Stage::PreFlight;
    // Whether this cycle wrote the node as the pod's nomination (cleared again if it fails).
    let mut nominated = false;
    let status = async {
        // kube-scheduler's NominatedNodeNameForExpectation (beta, on): when PreBind has work to
        // do (claims to bind or provision) or Permit holds the pod, the node is written as the
        // pod's `status.nominatedNodeName` first, so that cluster-autoscaler, Karpenter and
        // Kueue see where it goes meanwhile. Otherwise the bind follows at once.
        let pre_flight = profile.run_pre_bind_pre_flights(&state, &pod, &node);
        if pre_flight.code == Code::Error {
            if permit.is_some() {
                // Its wait is never taken: the pod leaves the waiting pods here.
                sched.binder.waiting.forget(pod_info.uid());
            }
            return pre_flight;
        }
        if pre_flight.is_success() || permit.is_some() {
            nominated = sched.reports.nominate_binding_node(&pod, &node).await;
        }
        stage = Stage::Permit;
        if let Some(PermitWait { verdict, timeout }) = permit {
            let began = Instant::now();
            let verdict = sched
                .binder
                .waiting
                .wait(pod_info.uid(), verdict, timeout)
                .await;
            sched.metrics.permit_waited(verdict.code, began.elapsed());
            if !verdict.is_success() {
                permit_rejected = verdict.is_rejected();
                return verdict;
            }
        }
        stage = Stage::PreBind;
        sched.state.queue.permitted(pod_info.uid());
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
        // Not leading (past the renew deadline, or stopping): the pod is left to the next
        // leader. A bind not answered when the term ends is abandoned, never sent late.
        stage = Stage::Gate;
        let permit = match sched.binder.gate.admit(Write::Bind) {
            Ok(permit) => permit,
            Err(refused) => return Status::error(refused.to_string()),
        };
        stage = Stage::Bind;
        slot = Some(sched.binder.cycles.take_slot());
        let began = Instant::now();
        let status = match permit.fence(profile.run_bind(&state, &pod, &node)).await {
            Ok(status) => status,
            Err(abandoned) => Status::error(abandoned.to_string()),
        };
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
        let observer = {
            let mut cache = sched.lock_cache();
            if cache.is_assumed(pod_info.uid()) || cache.pod(pod_info.uid()).is_none() {
                cache.upsert_pod(bound.clone());
            }
            sched.state.queue.forget(pod_info.uid());
            cache.bind_observer()
        };
        if let Some(observer) = observer {
            observer(bound);
        }
        return;
    }
    sched.lock_cache().forget_pod(pod_info.uid());
    let message = failure_message(stage, &status);
    // Only a Permit plugin's rejection names its plugin for the queue: PreBind and Bind
    // register no events.
    let mut failure = Failure::after_status(&status, permit_rejected, message);
    if nominated {
        failure.nomination = NominationOutcome::EndedAfterBindingNode;
    }
    FailedAttempt {
        queued: &queued,
        profile: &profile,
        failure,
        counted: None,
        group_size: None,
    }
    .handle(&sched);
    // The pod held resources in the cache: pods waiting for them may fit now.
    sched.state.queue.on_event(
        ASSIGNED_POD_DELETE,
        Some(EventObject::Pod(assumed_pod(&pod, &node))),
        None,
    );
}

/// Where a binding cycle stopped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Stage {
    /// Asking the PreBind plugins whether they have work (an error is reported as it is).
    PreFlight,
    Permit,
    PreBind,
    /// This replica may not bind (it no longer leads, or it stops).
    Gate,
    Bind,
}

/// What a failed binding cycle reports, in kube-scheduler's words: a Permit or PreBind
/// rejection as a FitError over the one node (`0/1 nodes are available: 1 <reason>.`); an
/// error wrapped as its framework wraps it (`running PreBind plugin "VolumeBinding": …`,
/// `running Bind plugin "DefaultBinder": …`, `waiting on permit for pod: …`); a Bind rejection
/// as it is.
fn failure_message(stage: Stage, status: &Status) -> String {
    let message = status.message();
    let plugin = status.plugin.unwrap_or_default();
    match (stage, status.is_rejected()) {
        (Stage::Permit | Stage::PreBind, true) => one_node_fit_error(status),
        (Stage::Bind, true) | (Stage::PreFlight, _) => message,
        (Stage::Permit, false) => format!("waiting on permit for pod: {message}"),
        (Stage::PreBind, false) => format!("running PreBind plugin {plugin:?}: {message}"),
        (Stage::Bind, false) => format!("running Bind plugin {plugin:?}: {message}"),
        (Stage::Gate, _) => format!("Binding rejected: {message}"),
    }
}

/// The pod as it was assumed: on `node`.
fn assumed_pod(pod: &Pod, node: &str) -> Arc<Pod> {
    let mut assumed = pod.clone();
    assumed.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
    Arc::new(assumed)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::Code;

    /// A failed binding cycle is reported in kube-scheduler's words for each stage.
    #[test]
    fn a_failed_binding_cycle_says_where_as_kube_scheduler() {
        let rejected = Status::new(
            Code::Unschedulable,
            "node(s) had volume node affinity conflict",
        )
        .with_plugin("VolumeBinding");
        assert_eq!(
            failure_message(Stage::PreBind, &rejected),
            "0/1 nodes are available: 1 node(s) had volume node affinity conflict."
        );
        let failed = Status::error("binding volumes: timed out waiting for the condition")
            .with_plugin("VolumeBinding");
        assert_eq!(
            failure_message(Stage::PreBind, &failed),
            "running PreBind plugin \"VolumeBinding\": binding volumes: timed out waiting for the condition"
        );
        let bind = Status::error("pods \"web\" not found").with_plugin("DefaultBinder");
        assert_eq!(
            failure_message(Stage::Bind, &bind),
            "running Bind plugin \"DefaultBinder\": pods \"web\" not found"
        );
        let permit = Status::new(Code::Unschedulable, "rejected by the gang").with_plugin("Gang");
        assert_eq!(
            failure_message(Stage::Permit, &permit),
            "0/1 nodes are available: 1 rejected by the gang."
        );
    }
}
