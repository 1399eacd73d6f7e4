//! Kubernetes Events (events.k8s.io/v1) as tether writes them: a repeat of the same message
//! about the same object counts in that event's `series`, and a new message is a new event, as
//! client-go's event correlator does. (kube-runtime's `Recorder` keys events without their
//! message, so a later message would be lost under the first one's count.)

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::gate::{Write, WriteGate};
use crate::locks;

/// How long a repeated event is counted in the series of the first: past that, it starts a new
/// event (the API server keeps events for an hour).
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(10);

/// Whether an event is routine or a warning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventType {
    Normal,
    Warning,
}

/// An event to write: about `regarding` (and `related`), observed at `observed`.
struct Draft<'a> {
    regarding: &'a ObjectReference,
    related: Option<&'a ObjectReference>,
    type_: EventType,
    reason: &'a str,
    action: &'a str,
    note: String,
    observed: Timestamp,
}

/// One event this process wrote: its name, how often it was seen, and when last.
struct Written {
    name: String,
    count: i32,
    last: Timestamp,
}

/// Which event a new one repeats: the object (by UID, else namespace/name), the reason and
/// the message.
type SeriesKey = (String, String, String);

/// Whether the last event this process tried to publish failed.
static PUBLISHING_FAILS: AtomicBool = AtomicBool::new(false);

/// Writes events about any object, as controller `tether` and this replica's instance name.
#[derive(Clone)]
pub struct EventWriter {
    client: kube::Client,
    instance: String,
    written: Arc<Mutex<HashMap<SeriesKey, Written>>>,
    /// Asked before each event is written.
    gate: WriteGate,
}

impl EventWriter {
    pub fn new(client: kube::Client, instance: Option<String>, gate: WriteGate) -> Self {
        EventWriter {
            client,
            instance: instance.unwrap_or_else(|| "tether".into()),
            written: Arc::default(),
            gate,
        }
    }

    /// Writes an event about `regarding`, observed now, or counts a repeat of one in its
    /// series. Events are best effort: while the API server refuses them (an outage), the
    /// first failure is logged at WARN and the rest at DEBUG until one lands again, so an
    /// outage costs two lines, not one per pod.
    pub async fn publish(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        self.publish_observed(regarding, type_, reason, action, note, Timestamp::now())
            .await
    }

    /// As [`EventWriter::publish`], for an event observed at `observed`: its time is when it
    /// happened, not when its turn to be written came, so events written concurrently still
    /// order as their causes did (the latest FailedScheduling is the latest attempt's).
    pub async fn publish_observed(
        &self,
        regarding: &ObjectReference,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
        observed: Timestamp,
    ) -> Result<(), kube::Error> {
        self.publish_draft(Draft {
            regarding,
            related: None,
            type_,
            reason,
            action,
            note,
            observed,
        })
        .await
    }

    /// As [`EventWriter::publish`], with `related` as the event's related object (the
    /// preemptor of a `Preempted` event, as upstream's).
    pub async fn publish_related(
        &self,
        regarding: &ObjectReference,
        related: Option<&ObjectReference>,
        type_: EventType,
        reason: &str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        self.publish_draft(Draft {
            regarding,
            related,
            type_,
            reason,
            action,
            note,
            observed: Timestamp::now(),
        })
        .await
    }

    async fn publish_draft(&self, draft: Draft<'_>) -> Result<(), kube::Error> {
        let reason = draft.reason;
        let written = self
            .gate
            .write(Write::Event, async {
                crate::k8s::budget::get().events.take().await;
                self.publish_once(draft).await
            })
            .await;
        let result = match written {
            Ok(result) => result,
            Err(refused) => {
                tracing::debug!(reason, error = %refused, "event not written");
                return Ok(());
            }
        };
        match &result {
            Ok(()) => {
                if PUBLISHING_FAILS.swap(false, Ordering::SeqCst) {
                    tracing::info!("events are published again");
                }
            }
            Err(e) => {
                if !PUBLISHING_FAILS.swap(true, Ordering::SeqCst) {
                    tracing::warn!(error = %e, "could not publish an event; further failures are logged at debug level until one is published");
                } else {
                    tracing::debug!(error = %e, reason, "could not publish an event");
                }
            }
        }
        result
    }

    /// Writes an event about `regarding`, or counts a repeat of one in its series.
    async fn publish_once(&self, draft: Draft<'_>) -> Result<(), kube::Error> {
        let Draft {
            regarding,
            related,
            type_,
            reason,
            action,
            note,
            observed,
        } = draft;
        // An event about a cluster-scoped object (a SchedulingProfile) lives in `default`.
        let ns = regarding
            .namespace
            .clone()
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "default".into());
        let name_of = regarding.name.as_deref().unwrap_or_default();
        let api: Api<Event> = Api::namespaced(self.client.clone(), &ns);
        let now = Timestamp::now();
        let object = regarding
            .uid
            .clone()
            .unwrap_or_else(|| format!("{ns}/{name_of}"));
        let key = (object, reason.to_string(), note.clone());
        let repeat = {
            let mut written = locks::lock(&self.written);
            written.retain(|_, w| now.duration_since(w.last) < SERIES_WINDOW);
            written.get_mut(&key).map(|w| {
                w.count = w.count.saturating_add(1);
                w.last = w.last.max(observed);
                (w.name.clone(), w.count, w.last)
            })
        };
        if let Some((name, count, last)) = repeat {
            let series = serde_json::json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(last),
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                // Gone (expired or deleted): write it anew.
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                other => return other.map(|_| ()),
            }
        }
        let name = format!("{name_of}.{:x}", observed.as_nanosecond());
        let event = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns),
                ..Default::default()
            },
            event_time: Some(MicroTime(observed)),
            type_: Some(
                match type_ {
                    EventType::Normal => "Normal",
                    EventType::Warning => "Warning",
                }
                .into(),
            ),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(note),
            regarding: Some(regarding.clone()),
            related: related.cloned(),
            reporting_controller: Some("tether".into()),
            reporting_instance: Some(self.instance.clone()),
            ..Default::default()
        };
        api.create(&PostParams::default(), &event).await?;
        locks::lock(&self.written).insert(
            key,
            Written {
                name,
                count: 1,
                last: observed,
            },
        );
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::scheduler::testing::stand_in_client;

    #[tokio::test]
    async fn a_repeated_message_counts_in_its_series_and_a_new_message_is_a_new_event() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        let client = stand_in_client(move |method, _path, sent| {
            seen.lock().expect("calls").push(method.to_string());
            (if method == "POST" { 201 } else { 200 }, sent)
        });
        let events = EventWriter::new(client, None, WriteGate::alone());
        let pod = ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some("p".into()),
            uid: Some("u".into()),
            ..Default::default()
        };
        for message in [
            "0/3 nodes are available.",
            "0/3 nodes are available.",
            "0/2 nodes are available.",
        ] {
            events
                .publish(
                    &pod,
                    EventType::Warning,
                    "FailedScheduling",
                    "Scheduling",
                    message.into(),
                )
                .await
                .expect("published");
        }
        assert_eq!(*calls.lock().expect("calls"), ["POST", "PATCH", "POST"]);
    }

    #[tokio::test]
    async fn an_event_written_late_keeps_the_time_it_was_observed() {
        let sent_times = Arc::new(Mutex::new(Vec::new()));
        let seen = sent_times.clone();
        let client = stand_in_client(move |_method, _path, sent| {
            let time = sent
                .get("eventTime")
                .or_else(|| sent.pointer("/series/lastObservedTime"))
                .and_then(|t| t.as_str())
                .unwrap_or_default()
                .to_string();
            seen.lock().expect("times").push(time);
            (201, sent)
        });
        let events = EventWriter::new(client, None, WriteGate::alone());
        let pod = ObjectReference {
            kind: Some("Pod".into()),
            namespace: Some("ns".into()),
            name: Some("p".into()),
            uid: Some("u".into()),
            ..Default::default()
        };
        let first: Timestamp = "2026-01-01T00:00:01Z".parse().expect("time");
        let second: Timestamp = "2026-01-01T00:00:02Z".parse().expect("time");
        // The later attempt's event is written first, and a repeat observed earlier after it.
        for (message, observed) in [("b", second), ("a", first), ("a", first)] {
            events
                .publish_observed(
                    &pod,
                    EventType::Warning,
                    "FailedScheduling",
                    "Scheduling",
                    message.into(),
                    observed,
                )
                .await
                .expect("published");
        }
        assert_eq!(
            *sent_times.lock().expect("times"),
            [
                "2026-01-01T00:00:02.000000Z",
                "2026-01-01T00:00:01.000000Z",
                "2026-01-01T00:00:01.000000Z"
            ]
        );
    }

    #[tokio::test]
    async fn an_event_about_a_cluster_scoped_object_lives_in_default() {
        let paths = Arc::new(Mutex::new(Vec::new()));
        let seen = paths.clone();
        let client = stand_in_client(move |_method, path, sent| {
            seen.lock().expect("paths").push(path.to_string());
            (201, sent)
        });
        let profile = ObjectReference {
            kind: Some("SchedulingProfile".into()),
            name: Some("p".into()),
            ..Default::default()
        };
        EventWriter::new(client, None, WriteGate::alone())
            .publish(
                &profile,
                EventType::Normal,
                "Accepted",
                "Compile",
                "ok".into(),
            )
            .await
            .expect("published");
        assert_eq!(
            *paths.lock().expect("paths"),
            ["/apis/events.k8s.io/v1/namespaces/default/events"]
        );
    }
}
