//! The one failure path (kube-scheduler's handleSchedulingFailure): every attempt that ends
//! without a bind (the pod fits nowhere, a plugin errs, Reserve or Permit rejects it, PreBind or
//! Bind fails) ends here. The attempt says what failed as a [`Failure`]; the handler decides the
//! pod's nomination, reports the failure (event `FailedScheduling`, condition
//! `PodScheduled=False`, the nominated node) and sends the pod back to the queue: at once from
//! the scheduling cycle (the report is spawned), after the report is written from a binding
//! cycle (a stale report never lands on the pod a later attempt bound). What the attempt holds
//! (the assumed pod in the cache, Reserve's claims) is released by the cycle that took it,
//! before it calls the handler.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::scheduler::Scheduler;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::{Backoff, CompiledProfile};
use crate::scheduler::framework::runtime::{Diagnosis, nominated_node};
use crate::scheduler::framework::{NominatedPods, Nomination, QueuedPodInfo, Status};
use crate::scheduler::outcome::{FailureReason, NominatedNode};

/// How an attempt failed.
#[derive(Debug)]
pub struct Failure {
    pub reason: FailureReason,
    pub message: String,
    /// The plugins that rejected the pod: an event one of them registered may requeue it. None
    /// for an error: the pod waits out its backoff.
    pub rejected_by: Vec<&'static str>,
    /// The earliest a rejecting plugin asked to be asked again.
    pub retry_after: Option<Duration>,
    pub nomination: NominationOutcome,
}

/// What a failed attempt does to the pod's nomination.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NominationOutcome {
    /// Nothing: the attempt never reached the search (a pod whose spec cannot be read).
    Untouched,
    /// What PostFilter decided; `None` (it did not run) or `Keep` keep a nomination, written
    /// again with each failure, so one whose first write was dropped for a newer failure of the
    /// pod still reaches the API.
    PostFilter(Option<Nomination>),
    /// The attempt failed other than by PostFilter's say: the nomination ends, here and in the
    /// API, as upstream clears it.
    Ended,
    /// As `Ended`, after the binding cycle wrote the node it was binding to as the pod's
    /// nomination: the clear is written even where the pod's copy does not show that node.
    EndedAfterBindingNode,
}

impl Failure {
    /// The pod fits on no node: the diagnosis counts why, PostFilter decided its nomination.
    pub fn unschedulable(diagnosis: Diagnosis) -> Self {
        Failure {
            reason: FailureReason::Unschedulable,
            message: diagnosis.message(),
            retry_after: diagnosis.retry_after(),
            rejected_by: diagnosis.unschedulable_plugins,
            nomination: NominationOutcome::PostFilter(diagnosis.nomination),
        }
    }

    /// The pod's affinity could not be read (`err`): it fits none of the `nodes` nodes until
    /// its spec changes.
    pub fn invalid_affinity(err: &impl std::fmt::Display, nodes: usize) -> Self {
        let status = Status::unresolvable(format!("invalid pod affinity: {err}"));
        Failure {
            reason: FailureReason::Unschedulable,
            message: format!("0/{nodes} nodes are available: {}.", status.message()),
            rejected_by: Vec::new(),
            retry_after: status.retry_after,
            nomination: NominationOutcome::Untouched,
        }
    }

    /// The search itself failed (a plugin's error): `SchedulerError`, the pod waits out its
    /// backoff, the nomination ends.
    pub fn error(status: &Status) -> Self {
        Failure {
            reason: FailureReason::SchedulerError,
            message: status.message(),
            rejected_by: Vec::new(),
            retry_after: None,
            nomination: NominationOutcome::Ended,
        }
    }

    /// A plugin's status ended the attempt after the search (Reserve, Permit, PreBind, Bind)
    /// or during it (an error): a rejection is `Unschedulable` and names its plugin when
    /// `plugin_requeues` (the plugin registered the events that can help), anything else is a
    /// `SchedulerError` with `message`. The nomination ends.
    pub fn after_status(status: &Status, plugin_requeues: bool, message: String) -> Self {
        let rejected = status.is_rejected();
        Failure {
            reason: if rejected {
                FailureReason::Unschedulable
            } else {
                FailureReason::SchedulerError
            },
            message,
            rejected_by: status
                .plugin
                .filter(|_| rejected && plugin_requeues)
                .into_iter()
                .collect(),
            retry_after: status.retry_after,
            nomination: NominationOutcome::Ended,
        }
    }
}

/// A rejection after the search (Reserve, Permit, PreBind), as kube-scheduler reports it: a
/// FitError over the one node chosen, `0/1 nodes are available: 1 <reason>.` (each reason
/// counted once, in order).
pub fn one_node_fit_error(status: &Status) -> String {
    let mut reasons: Vec<String> = status.reasons.iter().map(|r| format!("1 {r}")).collect();
    reasons.sort();
    format!("0/1 nodes are available: {}.", reasons.join(", "))
}

/// A failed attempt, handed to the one door for failures, [`FailedAttempt::handle`].
pub struct FailedAttempt<'a> {
    pub queued: &'a QueuedPodInfo,
    pub profile: &'a CompiledProfile,
    pub failure: Failure,
    /// The attempt's result label and start, for `scheduler_schedule_attempts_total` and its
    /// duration; `None` for a failed binding cycle, whose attempt was counted as scheduled when
    /// its scheduling cycle ended (as upstream's).
    pub counted: Option<(&'static str, Instant)>,
    /// A gang member tried in a group cycle of this many pods: the group backs off as one, its
    /// longest backoff the profile's scaled by the square root of its size (upstream's backoff
    /// of a pod group entity).
    pub group_size: Option<usize>,
}

impl<'a> FailedAttempt<'a> {
    /// A pod's own cycle that failed with `failure`, counted as an attempt ending in `result`
    /// that began at `start`.
    pub fn of_cycle(
        queued: &'a QueuedPodInfo,
        profile: &'a CompiledProfile,
        failure: Failure,
        result: &'static str,
        start: Instant,
    ) -> Self {
        FailedAttempt {
            queued,
            profile,
            failure,
            counted: Some((result, start)),
            group_size: None,
        }
    }

    /// The one door of every failed attempt (a pod's cycle, a gang member's, a binding cycle):
    /// the attempt counted, the nomination as its failure says, the report handed to the
    /// failure writers (see [`crate::scheduler::outcome::Reports::failed`]; a binding
    /// cycle's carries the pod's resourceVersion as a precondition, so it never lands on the
    /// pod bound by a later attempt), the pod back in the queue (its plugins' events requeue
    /// it, or its backoff).
    pub(crate) fn handle(self, sched: &Scheduler) {
        let FailedAttempt {
            queued,
            profile,
            failure,
            counted,
            group_size,
        } = self;
        if let Some((result, start)) = counted {
            sched
                .metrics
                .attempt(result, &profile.scheduler_name, start.elapsed());
        }
        let mut requeue = report_failure(sched, queued, profile, failure);
        if let Some(size) = group_size {
            requeue.backoff.max = group_backoff_cap(requeue.backoff.max, size);
        }
        requeue.into_queue(sched);
    }
}

/// The nomination decided and the report handed over; what goes back to the queue.
fn report_failure(
    sched: &Scheduler,
    queued: &QueuedPodInfo,
    profile: &CompiledProfile,
    failure: Failure,
) -> Requeue {
    let pod = &queued.pod;
    let nominated = match failure.nomination {
        NominationOutcome::Untouched => NominatedNode::Unchanged,
        NominationOutcome::PostFilter(None | Some(Nomination::Keep)) => sched
            .state
            .room
            .nominator
            .node_of(pod.uid())
            .map_or(NominatedNode::Unchanged, NominatedNode::Set),
        NominationOutcome::PostFilter(Some(Nomination::Clear)) => {
            let had = sched.state.room.nominator.forget(pod.uid());
            if let Some(gone) = &had {
                sched.state.room.given_up(gone);
            }
            if had.is_some() || nominated_node(&pod.pod).is_some() {
                NominatedNode::Clear
            } else {
                NominatedNode::Unchanged
            }
        }
        NominationOutcome::PostFilter(Some(Nomination::Node(node))) => {
            tracing::info!(pod = %pod.key(), node = %node, "nominated after preemption");
            nominate_if_pending(sched, pod, &node);
            NominatedNode::Set(node)
        }
        NominationOutcome::Ended | NominationOutcome::EndedAfterBindingNode => {
            let had = sched.state.room.nominator.forget(pod.uid());
            if let Some(gone) = &had {
                sched.state.room.given_up(gone);
            }
            if failure.nomination == NominationOutcome::EndedAfterBindingNode {
                NominatedNode::ClearBindingNode
            } else if had.is_some() || nominated_node(&pod.pod).is_some() {
                NominatedNode::Clear
            } else {
                NominatedNode::Unchanged
            }
        }
    };
    sched
        .reports
        .failed(&pod.pod, failure.reason, &failure.message, nominated);
    Requeue {
        uid: pod.uid().to_string(),
        rejected_by: failure.rejected_by,
        backoff: profile.backoff(),
        retry_after: failure.retry_after,
    }
}

/// Nominates `pod` to `node` unless, since its cycle began, it was deleted or bound (by
/// another scheduler, or a bind of ours that landed late): a nomination of a pod that is gone
/// or placed would hold room on `node` for nobody until the next re-list (upstream asks its
/// informer the same before it nominates). Asked and done under the cache's lock, under which
/// the pod watch ends a pod's queue entry and nomination when it is bound or deleted: the
/// watch's ending comes either before the question or after the nomination.
fn nominate_if_pending(sched: &Scheduler, pod: &Arc<PodInfo>, node: &str) {
    let cache = sched.lock_cache();
    // A pod bound or deleted meanwhile left the queue (its flight marked deleted).
    if sched.state.queue.holds_pending(pod.uid()) {
        sched.state.room.nominator.nominate(pod.clone(), node);
    } else {
        tracing::debug!(pod = %pod.key(), node = %node, "not nominated: the pod was bound or deleted during its cycle");
    }
    drop(cache);
}

/// The longest backoff of a group of `size` pods: `max` times the square root of its size (at
/// least `max`).
pub fn group_backoff_cap(max: Duration, size: usize) -> Duration {
    // A group's size is far below 2^52: the conversion is exact.
    max.mul_f64((size.max(1) as f64).sqrt())
}

/// A failed pod on its way back to the queue.
struct Requeue {
    uid: String,
    rejected_by: Vec<&'static str>,
    backoff: Backoff,
    retry_after: Option<Duration>,
}

impl Requeue {
    fn into_queue(self, sched: &Scheduler) {
        sched.state.queue.add_unschedulable(
            &self.rejected_by,
            &self.uid,
            self.backoff,
            self.retry_after,
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_groups_longest_backoff_grows_with_the_root_of_its_size() {
        let max = Duration::from_secs(10);
        assert_eq!(group_backoff_cap(max, 1), max);
        assert_eq!(group_backoff_cap(max, 0), max);
        assert_eq!(group_backoff_cap(max, 4), Duration::from_secs(20));
        assert_eq!(group_backoff_cap(max, 16), Duration::from_secs(40));
    }
}
