//! What users see of a scheduling decision: the Events `Scheduled` and `FailedScheduling`, and
//! the pod condition `PodScheduled=False`, written as kube-scheduler writes them. These calls run
//! on the tokio runtime, off the scheduling cycle; a failure to report is logged, never fatal.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{ObjectReference, Pod};
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};

use prometheus_client::metrics::counter::Counter;

use crate::gate::{Write, WriteGate};
use crate::locks;
use crate::recorder::{EventType, EventWriter};
use crate::scheduler::schedule_one::Choice;

/// How many `Scheduled` events may wait to be written; past that, new ones are dropped.
pub const QUEUED_EVENTS: usize = 1000;

/// How many `Scheduled` events are written at once.
const EVENTS_IN_FLIGHT: usize = 32;

/// The longest note an events.k8s.io Event may carry.
pub const MAX_NOTE_BYTES: usize = 1024;

/// The `Scheduled` event's note: kube-scheduler's "Successfully assigned ns/pod to node", then
/// how the node won, so that every bind leaves a compact trace without writing to the pod:
/// "(score 187; runner-up n2 scored 170, margin 17; 3 feasible nodes)". kube-scheduler's words
/// alone if the trace would take the note past [`MAX_NOTE_BYTES`].
pub fn scheduled_note(pod: &str, node: &str, choice: &Choice) -> String {
    let assigned = format!("Successfully assigned {pod} to {node}");
    let trace = match choice {
        Choice::Scored {
            score,
            runner_up: Some(second),
            feasible,
        } => format!(
            "score {score}; runner-up {} scored {}, margin {}; {feasible} feasible nodes",
            second.name,
            second.score,
            score - second.score
        ),
        Choice::Scored {
            score,
            runner_up: None,
            feasible,
        } => format!("score {score}; {feasible} feasible nodes"),
        Choice::OnlyFeasible => "the only feasible node".to_string(),
        Choice::Nominated => "its nominated node".to_string(),
    };
    let note = format!("{assigned} ({trace})");
    if note.len() > MAX_NOTE_BYTES {
        assigned
    } else {
        note
    }
}

/// The reason a failed attempt is reported with, in the `FailedScheduling` event's and the
/// `PodScheduled=False` condition's words, as kube-scheduler's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailureReason {
    /// Plugins rejected the pod.
    Unschedulable,
    /// Something failed while scheduling or binding the pod.
    SchedulerError,
}

impl FailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            FailureReason::Unschedulable => "Unschedulable",
            FailureReason::SchedulerError => "SchedulerError",
        }
    }
}

/// What a failure report writes of the pod's `status.nominatedNodeName` (only a change is
/// written).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NominatedNode {
    /// Left as it is.
    Unchanged,
    /// Set to this node (preemption nominated the pod, or keeps its nomination).
    Set(String),
    /// Cleared: the nomination ended.
    Clear,
}

/// Publishes scheduling events and conditions.
#[derive(Clone)]
pub struct Reports {
    client: kube::Client,
    events: EventWriter,
    /// The `Scheduled` events waiting to be written.
    scheduled: tokio::sync::mpsc::Sender<(ObjectReference, String)>,
    /// How many were dropped since the queue last had room.
    dropped: Arc<AtomicU64>,
    /// How many were dropped in all (`tether_events_dropped_total` once counted in metrics).
    dropped_total: Counter,
    /// Per pod UID: the newest failure reported, and a lock that makes one failure's event and
    /// condition writes happen together. Two attempts of a pod failing in quick succession are
    /// reported in order, and an older one that has not started yet is dropped, so the condition
    /// and the latest event always tell the same failure.
    order: Arc<Mutex<HashMap<String, Turn>>>,
    /// Asked before a failure's condition is written.
    gate: WriteGate,
}

/// A pod's newest failure number and the lock its reports are written under.
type Turn = (u64, Arc<tokio::sync::Mutex<()>>);

impl Reports {
    /// Reports written with `client`, each admitted by `gate`; the `Scheduled` events are
    /// written by a task spawned here, on the current tokio runtime.
    pub fn new(client: kube::Client, instance: Option<String>, gate: WriteGate) -> Self {
        let events = EventWriter::new(client.clone(), instance).gated_by(gate.clone());
        let (scheduled, queued) = tokio::sync::mpsc::channel(QUEUED_EVENTS);
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(Self::write_scheduled(
            events.clone(),
            queued,
            dropped.clone(),
        ));
        Reports {
            events,
            client,
            scheduled,
            dropped,
            dropped_total: Counter::default(),
            order: Arc::default(),
            gate,
        }
    }

    /// Counts the dropped `Scheduled` events in `counter` (the metrics' `events_dropped`).
    pub fn counting_drops_in(mut self, counter: Counter) -> Self {
        self.dropped_total = counter;
        self
    }

    /// Reports a failed attempt of `pod` (the event `FailedScheduling` and the condition
    /// `PodScheduled=False`, and what becomes of its `status.nominatedNodeName` in the same
    /// write): its place in the order is taken now (call this in the order of the attempts);
    /// the writes happen when the returned future runs.
    pub fn failed(
        &self,
        pod: &Pod,
        reason: FailureReason,
        message: &str,
        nominated: NominatedNode,
    ) -> impl Future<Output = ()> + Send + 'static + use<> {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let (seq, lock) = {
            let mut order = locks::lock(&self.order);
            let entry = order.entry(uid.clone()).or_default();
            entry.0 += 1;
            (entry.0, entry.1.clone())
        };
        let (this, pod, message) = (self.clone(), pod.clone(), message.to_string());
        async move {
            let _writing = lock.lock().await;
            let newest =
                |order: &HashMap<String, (u64, _)>| order.get(&uid).map(|e| e.0) == Some(seq);
            if !newest(&locks::lock(&this.order)) {
                return;
            }
            this.write_failure(&pod, reason, &message, nominated).await;
            let mut order = locks::lock(&this.order);
            if newest(&order) {
                order.remove(&uid);
            }
        }
    }

    /// Event `Scheduled`: "Successfully assigned ns/pod to node", then how the node won (see
    /// [`scheduled_note`]). Queued, not written here:
    /// a binding cycle never waits for the events budget (50 a second by default would hold
    /// every bind to that pace). While [`QUEUED_EVENTS`] wait, further ones are dropped, as
    /// client-go's event broadcaster drops events when its queue is full.
    pub fn scheduled(&self, pod: &Pod, node: &str, choice: &Choice) {
        let note = scheduled_note(&crate::k8s::pods::key(pod), node, choice);
        match self.scheduled.try_send((pod.object_ref(&()), note)) {
            Ok(()) => {}
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                self.dropped_total.inc();
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        queued = QUEUED_EVENTS,
                        "the Scheduled events queue is full (the events budget, --events-qps, is slower than the binds); events are dropped until it drains"
                    );
                }
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!(pod = %crate::k8s::pods::key(pod), "no events are written any more; the Scheduled event is dropped");
            }
        }
    }

    /// Writes the queued `Scheduled` events, [`EVENTS_IN_FLIGHT`] at a time, each after its
    /// token from the events budget.
    async fn write_scheduled(
        events: EventWriter,
        mut queued: tokio::sync::mpsc::Receiver<(ObjectReference, String)>,
        dropped: Arc<AtomicU64>,
    ) {
        let in_flight = Arc::new(tokio::sync::Semaphore::new(EVENTS_IN_FLIGHT));
        while let Some((regarding, note)) = queued.recv().await {
            let Ok(permit) = in_flight.clone().acquire_owned().await else {
                return;
            };
            let events = events.clone();
            tokio::spawn(async move {
                if let Err(e) = events
                    .publish(&regarding, EventType::Normal, "Scheduled", "Binding", note)
                    .await
                {
                    tracing::debug!(pod = %format!("{}/{}", regarding.namespace.as_deref().unwrap_or_default(), regarding.name.as_deref().unwrap_or_default()), error = %e, "could not publish the Scheduled event");
                }
                drop(permit);
            });
            let lost = dropped.swap(0, Ordering::Relaxed);
            if lost > 0 {
                tracing::warn!(
                    dropped = lost,
                    "Scheduled events were dropped while their queue was full"
                );
            }
        }
    }

    /// Event `FailedScheduling` and the condition PodScheduled=False with `reason`
    /// (Unschedulable, or SchedulerError for errors) and `message`.
    async fn write_failure(
        &self,
        pod: &Pod,
        reason: FailureReason,
        message: &str,
        nominated: NominatedNode,
    ) {
        let reason = reason.as_str();
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let note = truncate(message, 1000);
        if let Err(e) = self
            .events
            .publish(
                &pod.object_ref(&()),
                EventType::Warning,
                "FailedScheduling",
                "Scheduling",
                note,
            )
            .await
        {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not publish the FailedScheduling event");
        }
        let already = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.reason.as_deref() == Some(reason)
                        && c.message.as_deref() == Some(message)
                })
            });
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref());
        // What to write of the nominated node: only a change (`null` clears it).
        let nominated = match nominated {
            NominatedNode::Unchanged => None,
            NominatedNode::Set(node) => {
                (current != Some(node.as_str())).then(|| serde_json::json!(node))
            }
            NominatedNode::Clear => current.is_some().then_some(serde_json::Value::Null),
        };
        if already && nominated.is_none() {
            return;
        }
        // The UID makes the write a precondition: it never lands on a pod recreated under the
        // same name.
        let mut patch = serde_json::json!({
            "metadata": {"uid": pod.metadata.uid},
            "status": {"conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": jiff::Timestamp::now().to_string(),
            }]}
        });
        if let Some(node) = nominated {
            patch["status"]["nominatedNodeName"] = node;
        }
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let written = self
            .gate
            .write(
                Write::FailureReport,
                api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)),
            )
            .await;
        match written {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not set the PodScheduled condition")
            }
            Err(refused) => {
                tracing::debug!(pod = %format!("{ns}/{name}"), error = %refused, "the failure's condition is not written")
            }
        }
    }
}

fn truncate(s: &str, max: usize) -> String {
    if s.len() <= max {
        return s.to_string();
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &s[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{PodBuilder, stand_in_client};

    #[tokio::test]
    async fn an_older_failure_that_runs_late_is_not_written_over_a_newer_one() {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let client = stand_in_client(move |method, path, body| {
            let message = body["status"]["conditions"][0]["message"]
                .as_str()
                .or(body["note"].as_str())
                .unwrap_or_default()
                .to_string();
            log.lock()
                .expect("log")
                .push(format!("{method} {path} {message}"));
            (201, body)
        });
        let reports = Reports::new(client, None, WriteGate::alone());
        let pod = PodBuilder::new("p").build();
        let first = reports.failed(
            &pod,
            FailureReason::Unschedulable,
            "0/30 nodes are available",
            NominatedNode::Unchanged,
        );
        let second = reports.failed(
            &pod,
            FailureReason::Unschedulable,
            "0/29 nodes are available",
            NominatedNode::Unchanged,
        );
        second.await;
        first.await;
        let sent = sent.lock().expect("log").clone();
        assert_eq!(sent.len(), 2, "one event and one condition: {sent:?}");
        assert!(
            sent.iter().all(|s| s.ends_with("0/29 nodes are available")),
            "{sent:?}"
        );
    }

    /// `Scheduled` is queued, not awaited by the binding cycle, and written soon after.
    #[tokio::test]
    async fn a_scheduled_event_is_queued_then_written() {
        let sent = Arc::new(Mutex::new(Vec::<String>::new()));
        let log = sent.clone();
        let client = stand_in_client(move |method, path, body| {
            let note = body["note"].as_str().unwrap_or_default().to_string();
            log.lock()
                .expect("log")
                .push(format!("{method} {path} {note}"));
            (201, body)
        });
        let reports = Reports::new(client, None, WriteGate::alone());
        reports.scheduled(&PodBuilder::new("p").build(), "n1", &Choice::OnlyFeasible);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while sent.lock().expect("log").is_empty() && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        let sent = sent.lock().expect("log").clone();
        assert_eq!(sent.len(), 1, "{sent:?}");
        assert!(
            sent[0].starts_with("POST ")
                && sent[0]
                    .ends_with("Successfully assigned default/p to n1 (the only feasible node)"),
            "{sent:?}"
        );
    }

    #[test]
    fn the_scheduled_note_tells_how_the_node_won_within_the_event_limit() {
        let second = crate::scheduler::framework::NodeScore {
            name: "n2".into(),
            score: 170,
        };
        let scored = Choice::Scored {
            score: 187,
            runner_up: Some(second),
            feasible: 3,
        };
        assert_eq!(
            scheduled_note("default/p", "n1", &scored),
            "Successfully assigned default/p to n1 (score 187; runner-up n2 scored 170, margin 17; 3 feasible nodes)"
        );
        assert_eq!(
            scheduled_note("default/p", "n1", &Choice::Nominated),
            "Successfully assigned default/p to n1 (its nominated node)"
        );
        let long = "n".repeat(600);
        let far = Choice::Scored {
            score: 5,
            runner_up: Some(crate::scheduler::framework::NodeScore {
                name: long.clone(),
                score: 4,
            }),
            feasible: 2,
        };
        assert_eq!(
            scheduled_note("default/p", &long, &far),
            format!("Successfully assigned default/p to {long}"),
            "past 1024 bytes the trace is left out, never the assignment"
        );
    }

    /// Past QUEUED_EVENTS waiting, a `Scheduled` event is dropped and counted, never waited
    /// for. (On this single-threaded runtime the writer task runs only once the test yields.)
    #[tokio::test]
    async fn scheduled_events_past_the_queue_are_dropped_and_counted() {
        let client = stand_in_client(|_, _, body| (201, body));
        let dropped = Counter::default();
        let reports =
            Reports::new(client, None, WriteGate::alone()).counting_drops_in(dropped.clone());
        let pod = PodBuilder::new("p").build();
        for _ in 0..QUEUED_EVENTS + 5 {
            reports.scheduled(&pod, "n1", &Choice::Nominated);
        }
        assert_eq!(dropped.get(), 5);
    }
}
