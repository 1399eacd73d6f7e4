//! What users see of a scheduling decision: the Events `Scheduled` and `FailedScheduling`, and
//! the pod condition `PodScheduled=False`, written as kube-scheduler writes them. These calls run
//! on the tokio runtime, off the scheduling cycle; a failure to report is logged, never fatal.
//!
//! The condition comes first: cluster-autoscaler and Karpenter read it to add nodes. It has a
//! budget of its own, a pod's failures waiting for it are coalesced (the newest is written),
//! and a fixed number of writers write them, so thousands of pending pods cost one entry each,
//! not a task each. Events follow, best effort: dropped when their queue is full.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};

use prometheus_client::metrics::counter::Counter;

use crate::gate::{Write, WriteGate};
use crate::k8s::pod::Pod;
use crate::locks;
use crate::recorder::{EventType, EventWriter};
use crate::scheduler::algorithm::Choice;
use crate::scheduler::group_status::ConditionWrite;

/// How many events may wait to be written; past that, new ones are dropped. (client-go's
/// broadcaster keeps 1,000; tether keeps more because its events give way to binds during a
/// burst, and a burst of 20,000 pods on 5,000 nodes outran 10,000: a queued `Scheduled` event
/// is the pod's reference and its note, about half a KiB, 25 MiB when full.)
pub const QUEUED_EVENTS: usize = 50_000;

/// How many events are written at once.
const EVENTS_IN_FLIGHT: usize = 32;

/// How many events are written at once while a bind is in flight, until half of
/// [`QUEUED_EVENTS`] wait (see [`crate::k8s::budget::GiveWay`]): during a burst the binds,
/// which the pods wait for, go first, and the events follow.
const EVENTS_WHILE_BINDING: usize = 2;

/// How many failure conditions are written at once.
const FAILURES_IN_FLIGHT: usize = 16;

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
        Choice::Batched { score } => {
            format!("score {score}, the best left of the previous identical pod's ranking")
        }
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
    /// Cleared: the binding cycle had written the node it bound to, which the pod's copy in
    /// the report may not show yet, so the clear is written whatever the copy says.
    ClearBindingNode,
}

/// Publishes scheduling events and conditions.
#[derive(Clone)]
pub struct Reports {
    client: kube::Client,
    /// The events waiting to be written (`Scheduled`, `FailedScheduling`): best effort.
    events: tokio::sync::mpsc::Sender<QueuedEvent>,
    /// How many were dropped since the queue last had room.
    dropped: Arc<AtomicU64>,
    /// How many were dropped in all (`tether_events_dropped_total` once counted in metrics).
    dropped_total: Arc<std::sync::OnceLock<Counter>>,
    /// The failure reports not written yet: the newest per pod.
    failures: Arc<Mutex<Failures>>,
    /// Wakes the failure writers.
    failure_written: Arc<tokio::sync::Notify>,
    /// Admits the condition writes.
    gate: WriteGate,
    /// The PodGroup condition writes the group cycles ask for, written in order by one task.
    group_conditions: tokio::sync::mpsc::Sender<ConditionWrite>,
    /// Held by every copy but the writers' own: once the last is dropped (the scheduler of a
    /// term that ended), the writers stop.
    alive: Arc<Alive>,
}

/// Wakes the failure writers when dropped, so they see that nobody reports any more.
struct Alive(Arc<tokio::sync::Notify>);

impl Drop for Alive {
    fn drop(&mut self) {
        self.0.notify_waiters();
    }
}

/// An event waiting for its token.
struct QueuedEvent {
    regarding: ObjectReference,
    type_: EventType,
    reason: &'static str,
    action: &'static str,
    note: String,
    /// When the scheduler decided it (the event's time, whenever it is written).
    observed: jiff::Timestamp,
}

/// A failed attempt to report.
struct FailureReport {
    pod: Pod,
    reason: FailureReason,
    message: String,
    nominated: NominatedNode,
}

/// The failure reports waiting, one per pod (a newer failure replaces an older one not
/// written yet), in the order the pods first failed; and the pods whose report is being
/// written (a pod's reports are written one at a time).
#[derive(Default)]
struct Failures {
    order: VecDeque<String>,
    waiting: HashMap<String, FailureReport>,
    writing: HashSet<String>,
    /// The message of the last condition written to each pod: a pod's copy from an attempt
    /// made before that write landed says an older one, and is not to be trusted to say the
    /// report is written already.
    written: HashMap<String, String>,
}

/// How many pods [`Failures::written`] remembers before it starts afresh (forgetting only
/// makes a report trust its pod's copy again).
const WRITTEN_REMEMBERED: usize = 50_000;

impl Failures {
    /// The oldest report of a pod not being written now.
    fn take_next(&mut self) -> Option<(String, FailureReport)> {
        let at = self
            .order
            .iter()
            .position(|uid| !self.writing.contains(uid))?;
        let uid = self.order.remove(at)?;
        let report = self.waiting.remove(&uid)?;
        self.writing.insert(uid.clone());
        Some((uid, report))
    }
}

impl Reports {
    /// The API client the reports are written with.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// Reports written with `client`, each admitted by `gate`; the events and the failure
    /// conditions are written by tasks spawned here, on the current tokio runtime.
    pub fn new(client: kube::Client, instance: Option<String>, gate: WriteGate) -> Self {
        let writer = EventWriter::new(client.clone(), instance, gate.clone());
        let (events, queued) = tokio::sync::mpsc::channel(QUEUED_EVENTS);
        let dropped = Arc::new(AtomicU64::new(0));
        tokio::spawn(Self::write_events(writer, queued, dropped.clone()));
        let failure_written = Arc::new(tokio::sync::Notify::new());
        let group_conditions = crate::scheduler::group_status::start(client.clone(), gate.clone());
        let reports = Reports {
            client,
            events,
            dropped,
            dropped_total: Arc::default(),
            failures: Arc::default(),
            alive: Arc::new(Alive(failure_written.clone())),
            failure_written,
            group_conditions,
            gate,
        };
        for _ in 0..FAILURES_IN_FLIGHT {
            let alive = Arc::downgrade(&reports.alive);
            let mut own = reports.clone();
            own.alive = Arc::new(Alive(reports.failure_written.clone()));
            tokio::spawn(own.write_failures(alive));
        }
        reports
    }

    /// Asks for a PodGroup condition write; when too many wait already it is dropped (the
    /// group's next attempt asks again), so memory stays bounded whatever the API server's
    /// pace and however many groups fail.
    pub fn group_condition(&self, write: ConditionWrite) {
        let asked = self.group_conditions.try_send(write);
        if let Err(tokio::sync::mpsc::error::TrySendError::Full(write)) = asked {
            tracing::debug!(group = %format!("{}/{}", write.namespace, write.name), "PodGroup condition writes are behind; this one is dropped");
        }
    }

    /// Counts the dropped events in `counter` (the metrics' `events_dropped`).
    pub fn counting_drops_in(self, counter: Counter) -> Self {
        let _ = self.dropped_total.set(counter);
        self
    }

    /// Reports a failed attempt of `pod`: the condition `PodScheduled=False` (and what becomes
    /// of its `status.nominatedNodeName`, in the same write), then the event
    /// `FailedScheduling`. Returns at once; the report waits for its turn among the failures
    /// (their own budget, never the events'). A newer failure of the same pod replaces one
    /// not written yet (its nomination change kept when the newer has none). The write carries
    /// the pod's resourceVersion as a precondition: a report never lands on a pod that changed
    /// since (bound by a later attempt, or updated), where it would be stale.
    pub fn failed(
        &self,
        pod: &Pod,
        reason: FailureReason,
        message: &str,
        nominated: NominatedNode,
    ) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut report = FailureReport {
            pod: pod.clone(),
            reason,
            message: message.to_string(),
            nominated,
        };
        {
            let mut failures = locks::lock(&self.failures);
            match failures.waiting.remove(&uid) {
                Some(older) => {
                    if report.nominated == NominatedNode::Unchanged {
                        report.nominated = older.nominated;
                    }
                }
                None => failures.order.push_back(uid.clone()),
            }
            failures.waiting.insert(uid, report);
        }
        self.failure_written.notify_one();
    }

    /// How many failure reports wait to be written.
    pub fn failures_waiting(&self) -> usize {
        locks::lock(&self.failures).waiting.len()
    }

    /// One of the [`FAILURES_IN_FLIGHT`] writers: takes the oldest report waiting, waits for
    /// its token, writes the condition, then queues the event; stops once `alive` is gone.
    async fn write_failures(self, alive: std::sync::Weak<Alive>) {
        loop {
            let woken = self.failure_written.notified();
            if alive.strong_count() == 0 {
                return;
            }
            let next = locks::lock(&self.failures).take_next();
            let Some((uid, report)) = next else {
                woken.await;
                continue;
            };
            crate::k8s::budget::get().failures.take().await;
            let last = locks::lock(&self.failures).written.get(&uid).cloned();
            if self.write_condition(&report, last.as_deref()).await {
                let mut failures = locks::lock(&self.failures);
                if failures.written.len() >= WRITTEN_REMEMBERED {
                    failures.written.clear();
                }
                failures.written.insert(uid.clone(), report.message.clone());
            }
            self.queue_event(
                report.pod.object_ref(&()),
                EventType::Warning,
                "FailedScheduling",
                "Scheduling",
                truncate_note(&report.message),
            );
            locks::lock(&self.failures).writing.remove(&uid);
            // A newer report of this pod may wait behind this one.
            self.failure_written.notify_one();
        }
    }

    /// Event `Scheduled`: "Successfully assigned ns/pod to node", then how the node won (see
    /// [`scheduled_note`]). Queued, not written here: a binding cycle never waits for the
    /// events budget (50 a second by default would hold every bind to that pace).
    /// (The event holds the pod's reference, not the pod: the cache replaces the pod when the
    /// watch shows it bound, and a queued copy of the old one would keep it alive, 100 MiB for
    /// 20,000 queued events at 5,000 nodes.)
    pub fn scheduled(&self, pod: &Pod, node: &str, choice: &Choice) {
        let note = scheduled_note(&crate::k8s::pods::key(pod), node, choice);
        self.queue_event(
            pod.object_ref(&()),
            EventType::Normal,
            "Scheduled",
            "Binding",
            note,
        );
    }

    /// Event `FailedScheduling` (Warning) "skip schedule deleting pod: ns/name", as
    /// kube-scheduler writes when it pops a pod that is being deleted; nothing else is written.
    pub fn skipped_deleting(&self, pod: &Pod) {
        let note = format!("skip schedule deleting pod: {}", crate::k8s::pods::key(pod));
        self.queue_event(
            pod.object_ref(&()),
            EventType::Warning,
            "FailedScheduling",
            "Scheduling",
            note,
        );
    }

    /// Queues an event. While [`QUEUED_EVENTS`] wait, further ones are dropped, as client-go's
    /// event broadcaster drops events when its queue is full.
    fn queue_event(
        &self,
        regarding: ObjectReference,
        type_: EventType,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        let event = QueuedEvent {
            regarding,
            type_,
            reason,
            action,
            note,
            observed: jiff::Timestamp::now(),
        };
        match self.events.try_send(event) {
            Ok(()) => {}
            Err(tokio::sync::mpsc::error::TrySendError::Full(_)) => {
                if let Some(total) = self.dropped_total.get() {
                    total.inc();
                }
                if self.dropped.fetch_add(1, Ordering::Relaxed) == 0 {
                    tracing::warn!(
                        queued = QUEUED_EVENTS,
                        "the events queue is full (the events budget, --events-qps, is slower than the scheduler); events are dropped until it drains"
                    );
                }
            }
            Err(tokio::sync::mpsc::error::TrySendError::Closed(_)) => {
                tracing::debug!(
                    reason,
                    "no events are written any more; the event is dropped"
                );
            }
        }
    }

    /// Writes the queued events, [`EVENTS_IN_FLIGHT`] at a time ([`EVENTS_WHILE_BINDING`] while
    /// binds are in flight), each after its token from the events budget.
    async fn write_events(
        writer: EventWriter,
        mut queued: tokio::sync::mpsc::Receiver<QueuedEvent>,
        dropped: Arc<AtomicU64>,
    ) {
        let in_flight = Arc::new(tokio::sync::Semaphore::new(EVENTS_IN_FLIGHT));
        let give_way = crate::k8s::budget::GiveWay::new(EVENTS_WHILE_BINDING);
        while let Some(event) = queued.recv().await {
            let Ok(permit) = in_flight.clone().acquire_owned().await else {
                return;
            };
            let turn = give_way.turn(queued.len() >= QUEUED_EVENTS / 2).await;
            let writer = writer.clone();
            tokio::spawn(async move {
                let QueuedEvent {
                    regarding,
                    type_,
                    reason,
                    action,
                    note,
                    observed,
                } = event;
                if let Err(e) = writer
                    .publish_observed(&regarding, type_, reason, action, note, observed)
                    .await
                {
                    tracing::debug!(pod = %format!("{}/{}", regarding.namespace.as_deref().unwrap_or_default(), regarding.name.as_deref().unwrap_or_default()), error = %e, reason, "could not publish an event");
                }
                drop((permit, turn));
            });
            let lost = dropped.swap(0, Ordering::Relaxed);
            if lost > 0 {
                tracing::warn!(
                    dropped = lost,
                    "events were dropped while their queue was full"
                );
            }
        }
    }

    /// The condition PodScheduled=False with the report's reason (Unschedulable, or
    /// SchedulerError for errors) and message, and its nomination change, in one write. The
    /// write carries the pod's UID and resourceVersion as preconditions; when the pod changed
    /// since the attempt (tether's own earlier report, a label), it is read again and, still
    /// unbound and the same pod, written with its new version: the newest attempt's report is
    /// never lost to an older one's write. `last` is the message this writer last wrote to
    /// the pod: a copy saying another was taken before that write landed, so it cannot tell
    /// that the report is there already. Returns whether the condition was written.
    async fn write_condition(&self, report: &FailureReport, last: Option<&str>) -> bool {
        let FailureReport {
            pod,
            reason,
            message,
            nominated,
        } = report;
        let reason = reason.as_str();
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let mut seen = pod.clone();
        let mut current = last.is_none_or(|last| scheduled_message(pod) == Some(last));
        for _ in 0..CONDITION_WRITE_TRIES {
            let Some(patch) = condition_patch(&seen, reason, message, nominated, current) else {
                return false;
            };
            let written = self
                .gate
                .write(
                    Write::FailureReport,
                    api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)),
                )
                .await;
            match written {
                Ok(Ok(_)) => return true,
                Ok(Err(kube::Error::Api(e))) if e.code == 409 => {
                    let fresh = match api.get_opt(name).await {
                        Ok(Some(fresh)) => fresh,
                        Ok(None) => return false,
                        Err(e) => {
                            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not read the pod again; its report is not written");
                            return false;
                        }
                    };
                    let same_pod = fresh.metadata.uid == pod.metadata.uid;
                    let still_pending = crate::k8s::pods::node_name(&fresh).is_none()
                        && fresh.metadata.deletion_timestamp.is_none();
                    if !(same_pod && still_pending) {
                        tracing::debug!(pod = %format!("{ns}/{name}"), "the pod was bound, deleted or replaced since it failed; its report is not written");
                        return false;
                    }
                    seen = fresh;
                    current = true;
                }
                Ok(Err(e)) => {
                    tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not set the PodScheduled condition");
                    return false;
                }
                Err(refused) => {
                    tracing::debug!(pod = %format!("{ns}/{name}"), error = %refused, "the failure's condition is not written");
                    return false;
                }
            }
        }
        tracing::debug!(pod = %format!("{ns}/{name}"), "the pod kept changing; its report is not written");
        false
    }
}

impl Reports {
    /// Writes `node` as the pod's `status.nominatedNodeName` (kube-scheduler's
    /// NominatedNodeNameForExpectation): the binding cycle does before PreBind works for it or
    /// Permit holds it, so that others see where it goes meanwhile. Nothing is written when
    /// the pod's copy says so already. The write carries the pod's UID as a precondition; it
    /// is awaited (a bind never overtakes it) and its failure only logged, as upstream: the
    /// binding goes on. Returns whether it was written.
    pub async fn nominate_binding_node(&self, pod: &Pod, node: &str) -> bool {
        let current = pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref());
        if current == Some(node) {
            return false;
        }
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let patch = serde_json::json!({
            "metadata": {"uid": pod.metadata.uid},
            "status": {"nominatedNodeName": node},
        });
        let written = self
            .gate
            .write(
                Write::Nomination,
                api.patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch)),
            )
            .await;
        match written {
            Ok(Ok(_)) => true,
            Ok(Err(e)) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), node, error = %e, "could not write the nominated node in the binding cycle; binding goes on");
                false
            }
            Err(refused) => {
                tracing::debug!(pod = %format!("{ns}/{name}"), error = %refused, "the binding cycle's nominated node is not written");
                false
            }
        }
    }
}

/// How often a failure report is tried against a pod that keeps changing under it.
const CONDITION_WRITE_TRIES: usize = 3;

/// The pod's `PodScheduled=False` condition, if it has one.
fn not_scheduled(pod: &Pod) -> Option<&k8s_openapi::api::core::v1::PodCondition> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
}

/// The message of the pod's `PodScheduled=False` condition, if it has one.
fn scheduled_message(pod: &Pod) -> Option<&str> {
    not_scheduled(pod)?.message.as_deref()
}

/// The status patch that reports the failure on `pod` as it is now, with its UID and
/// resourceVersion as preconditions; `None` when the pod says so already (`current`: the copy
/// can tell, being no older than the last report written to it).
fn condition_patch(
    pod: &Pod,
    reason: &str,
    message: &str,
    nominated: &NominatedNode,
    current: bool,
) -> Option<serde_json::Value> {
    let already = current
        && not_scheduled(pod).is_some_and(|c| {
            c.reason.as_deref() == Some(reason) && c.message.as_deref() == Some(message)
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
        NominatedNode::ClearBindingNode => Some(serde_json::Value::Null),
    };
    if already && nominated.is_none() {
        return None;
    }
    // The UID and the resourceVersion make the write a precondition: it never lands on a pod
    // recreated under the same name, nor on one that changed since it was read.
    let mut patch = serde_json::json!({
        "metadata": {
            "uid": pod.metadata.uid,
            "resourceVersion": pod.metadata.resource_version,
        },
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
    Some(patch)
}

/// `note` as kube-scheduler writes it into an event: whole up to [`MAX_NOTE_BYTES`] (the API
/// server's `NoteLengthLimit`), else its first `MAX_NOTE_BYTES - 4` bytes and ` ...` (fewer when a character would be cut: Go cuts
/// the bytes, which Rust's strings cannot; every message tether writes is ASCII).
pub fn truncate_note(note: &str) -> String {
    const SUFFIX: &str = " ...";
    if note.len() <= MAX_NOTE_BYTES {
        return note.to_string();
    }
    let mut end = MAX_NOTE_BYTES - SUFFIX.len();
    while !note.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{SUFFIX}", &note[..end])
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{PodBuilder, stand_in_client};

    /// The binding cycle writes the node as the pod's nomination (with the pod's UID as a
    /// precondition) unless the pod says so already; a failure after it writes the clear even
    /// where the pod's copy does not show the node, while an ordinary clear writes only a change.
    #[tokio::test]
    async fn the_binding_node_is_written_as_the_nomination_and_cleared_after_a_failure() {
        let sent = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
        let log = sent.clone();
        let client = stand_in_client(move |method, path, body| {
            log.lock().expect("log").push(serde_json::json!({
                "method": method, "path": path, "body": body.clone()}));
            (200, body)
        });
        let reports = Reports::new(client, None, WriteGate::alone());
        let pod = PodBuilder::new("p").uid("u1").build();
        assert!(reports.nominate_binding_node(&pod, "n1").await);
        let mut nominated = pod.clone();
        nominated
            .status
            .get_or_insert_with(Default::default)
            .nominated_node_name = Some("n1".into());
        assert!(!reports.nominate_binding_node(&nominated, "n1").await);
        let sent = sent.lock().expect("log").clone();
        assert_eq!(sent.len(), 1, "{sent:#?}");
        assert_eq!(sent[0]["method"], "PATCH");
        assert!(
            sent[0]["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/pods/p/status"))
        );
        assert_eq!(sent[0]["body"]["status"]["nominatedNodeName"], "n1");
        assert_eq!(sent[0]["body"]["metadata"]["uid"], "u1");

        let after_binding = condition_patch(
            &pod,
            "SchedulerError",
            "running PreBind plugin \"VolumeBinding\": binding volumes: timed out",
            &NominatedNode::ClearBindingNode,
            true,
        )
        .expect("a patch");
        assert_eq!(
            after_binding["status"]["nominatedNodeName"],
            serde_json::Value::Null
        );
        assert!(
            after_binding["status"]
                .as_object()
                .is_some_and(|s| s.contains_key("nominatedNodeName"))
        );
        let ordinary = condition_patch(&pod, "SchedulerError", "m", &NominatedNode::Clear, true)
            .expect("a patch");
        assert!(
            ordinary["status"]
                .as_object()
                .is_some_and(|s| !s.contains_key("nominatedNodeName")),
            "the copy shows no nomination: nothing to clear"
        );
    }

    /// Two failures of a pod reported before the first is written: one condition write, with
    /// the newer message, the older one's nomination and the pod's resourceVersion as a
    /// precondition; then one event, with the same message.
    #[tokio::test]
    async fn a_pods_failures_waiting_are_coalesced_and_the_condition_goes_first() {
        let sent = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
        let log = sent.clone();
        let client = stand_in_client(move |method, path, body| {
            log.lock().expect("log").push(serde_json::json!({
                "method": method, "path": path, "body": body.clone()}));
            (201, body)
        });
        let reports = Reports::new(client, None, WriteGate::alone());
        let mut pod = PodBuilder::new("p").build();
        pod.metadata.resource_version = Some("41".into());
        reports.failed(
            &pod,
            FailureReason::Unschedulable,
            "0/30 nodes are available",
            NominatedNode::Set("n1".into()),
        );
        reports.failed(
            &pod,
            FailureReason::Unschedulable,
            "0/29 nodes are available",
            NominatedNode::Unchanged,
        );
        assert_eq!(reports.failures_waiting(), 1, "one report per pod waits");
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while sent.lock().expect("log").len() < 2 {
            assert!(tokio::time::Instant::now() < deadline, "not written");
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        // Nothing more comes: the older failure was never written.
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
        let sent = sent.lock().expect("log").clone();
        assert_eq!(sent.len(), 2, "{sent:#?}");
        let (condition, event) = (&sent[0], &sent[1]);
        assert_eq!(condition["method"], "PATCH");
        assert!(
            condition["path"]
                .as_str()
                .is_some_and(|p| p.ends_with("/pods/p/status")),
            "{condition}"
        );
        let status = &condition["body"]["status"];
        assert_eq!(
            status["conditions"][0]["message"],
            "0/29 nodes are available"
        );
        assert_eq!(status["nominatedNodeName"], "n1", "the older's nomination");
        assert_eq!(condition["body"]["metadata"]["resourceVersion"], "41");
        assert_eq!(event["method"], "POST");
        assert_eq!(event["body"]["reason"], "FailedScheduling");
        assert_eq!(event["body"]["note"], "0/29 nodes are available");
    }

    /// The newest failure's report is not lost when the pod changed since its attempt (an
    /// older report of tether's own landed meanwhile): the pod is read again and, still
    /// unbound, written with its new resourceVersion. A pod bound since is left alone.
    #[tokio::test]
    async fn a_report_refused_for_a_changed_pod_is_written_again_unless_the_pod_was_bound() {
        for bound_since in [false, true] {
            let sent = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
            let log = sent.clone();
            let client = stand_in_client(move |method, path, body| {
                let mut log = log.lock().expect("log");
                log.push(serde_json::json!({"method": method, "path": path, "body": body.clone()}));
                let patches = log.iter().filter(|c| c["method"] == "PATCH").count();
                match method {
                    // The first write meets a newer version of the pod.
                    "PATCH" if patches == 1 => (
                        409,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                            "reason": "Conflict", "code": 409, "message": "the object has been modified"}),
                    ),
                    "GET" => {
                        let mut fresh = PodBuilder::new("p").build();
                        fresh.metadata.resource_version = Some("42".into());
                        if bound_since {
                            fresh.spec.get_or_insert_default().node_name = Some("n1".into());
                        }
                        (200, serde_json::to_value(fresh).expect("json"))
                    }
                    _ => (200, body),
                }
            });
            let reports = Reports::new(client, None, WriteGate::alone());
            let mut pod = PodBuilder::new("p").build();
            pod.metadata.resource_version = Some("41".into());
            reports.failed(
                &pod,
                FailureReason::Unschedulable,
                "0/22 nodes are available",
                NominatedNode::Unchanged,
            );
            let done = |sent: &[serde_json::Value]| sent.iter().any(|c| c["method"] == "POST");
            let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
            while !done(&sent.lock().expect("log")) {
                assert!(tokio::time::Instant::now() < deadline, "nothing written");
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            let versions: Vec<serde_json::Value> = sent
                .lock()
                .expect("log")
                .iter()
                .filter(|c| c["method"] == "PATCH")
                .map(|c| c["body"]["metadata"]["resourceVersion"].clone())
                .collect();
            if bound_since {
                assert_eq!(versions, ["41"], "a pod bound since gets no report");
            } else {
                assert_eq!(versions, ["41", "42"], "written again on the new version");
            }
        }
    }

    /// An attempt's copy of the pod, taken before the previous report landed, says the pod
    /// already carries this attempt's message: it is older than that report, which wrote
    /// another, so the report is written all the same (on the pod as the API server has it).
    /// Trusting the copy left the condition an attempt behind its event (CI: 26 nodes in the
    /// condition, 25 in the newest event).
    #[tokio::test]
    async fn a_copy_older_than_the_last_report_cannot_say_the_report_is_written() {
        let server = Arc::new(Mutex::new((42u64, String::new())));
        let patched = Arc::new(Mutex::new(Vec::<String>::new()));
        let (held, log) = (server.clone(), patched.clone());
        let client = stand_in_client(move |method, _path, body| {
            let mut held = held.lock().expect("pod");
            let pod_now = |held: &(u64, String)| {
                let mut pod = PodBuilder::new("p").build();
                pod.metadata.resource_version = Some(held.0.to_string());
                pod.status = Some(
                    serde_json::from_value(serde_json::json!({"conditions": [{
                        "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                        "message": held.1}]}))
                    .expect("status"),
                );
                serde_json::to_value(pod).expect("json")
            };
            match method {
                "PATCH"
                    if body["metadata"]["resourceVersion"].as_str()
                        != Some(held.0.to_string().as_str()) =>
                {
                    (
                        409,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "reason": "Conflict", "code": 409, "message": "the object has been modified"}),
                    )
                }
                "PATCH" => {
                    let message = body["status"]["conditions"][0]["message"]
                        .as_str()
                        .unwrap_or_default()
                        .to_string();
                    log.lock().expect("log").push(message.clone());
                    *held = (held.0 + 1, message);
                    (200, pod_now(&held))
                }
                "GET" => (200, pod_now(&held)),
                _ => (201, body),
            }
        });
        let reports = Reports::new(client, None, WriteGate::alone());
        let copy = |version: &str, message: &str| {
            let mut pod = PodBuilder::new("p").build();
            pod.metadata.resource_version = Some(version.into());
            pod.status = Some(
                serde_json::from_value(serde_json::json!({"conditions": [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": message}]}))
                .expect("status"),
            );
            pod
        };
        let wait_for = |count: usize| {
            let patched = patched.clone();
            async move {
                let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
                while patched.lock().expect("log").len() < count {
                    assert!(tokio::time::Instant::now() < deadline, "not written");
                    tokio::time::sleep(std::time::Duration::from_millis(10)).await;
                }
            }
        };
        reports.failed(
            &copy("42", "0/25 nodes are available"),
            FailureReason::Unschedulable,
            "0/26 nodes are available",
            NominatedNode::Unchanged,
        );
        wait_for(1).await;
        // The next attempt read the pod before that write landed: its copy says 25.
        reports.failed(
            &copy("41", "0/25 nodes are available"),
            FailureReason::Unschedulable,
            "0/25 nodes are available",
            NominatedNode::Unchanged,
        );
        wait_for(2).await;
        assert_eq!(server.lock().expect("pod").1, "0/25 nodes are available");
    }

    /// kube-scheduler's `truncateMessage`: a note of up to 1024 bytes is kept whole; a longer
    /// one keeps its first 1020 bytes and ends in ` ...`.
    #[test]
    fn a_failure_note_is_cut_as_kube_scheduler_cuts_it() {
        for (len, want) in [(1023, 1023), (1024, 1024), (1025, 1024), (5000, 1024)] {
            let note = "x".repeat(len);
            let cut = truncate_note(&note);
            assert_eq!(cut.len(), want, "{len}");
            if len > 1024 {
                assert!(cut.ends_with("x ..."), "{len}");
                assert_eq!(&cut[..1020], &note[..1020]);
            } else {
                assert_eq!(cut, note);
            }
        }
        let wide = format!("{}é{}", "x".repeat(1019), "y".repeat(10));
        let cut = truncate_note(&wide);
        assert!(cut.len() <= 1024 && cut.ends_with("x ..."), "{cut}");
    }

    /// The writers stop once the last copy of the reports is gone (the scheduler of a term
    /// that ended): a replica that stands down and up again leaves no tasks behind.
    #[tokio::test]
    async fn the_failure_writers_stop_with_the_reports() {
        let client = stand_in_client(|_, _, body| (201, body));
        let reports = Reports::new(client, None, WriteGate::alone());
        let writers = Arc::downgrade(&reports.failures);
        tokio::task::yield_now().await;
        assert!(writers.strong_count() > FAILURES_IN_FLIGHT, "writers run");
        drop(reports);
        let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
        while writers.strong_count() > 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "writers left behind"
            );
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
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
        reports.scheduled(
            &Arc::new(PodBuilder::new("p").build()),
            "n1",
            &Choice::OnlyFeasible,
        );
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
        let pod = Arc::new(PodBuilder::new("p").build());
        for _ in 0..QUEUED_EVENTS + 5 {
            reports.scheduled(&pod, "n1", &Choice::Nominated);
        }
        assert_eq!(dropped.get(), 5);
    }
}
