//! What users see of a scheduling decision: the Events `Scheduled` and `FailedScheduling`, and
//! the pod condition `PodScheduled=False`, written as kube-scheduler writes them. These calls run
//! on the tokio runtime, off the scheduling cycle; a failure to report is logged, never fatal.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::events::v1::{Event as K8sEvent, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Resource;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

use crate::locks;

/// How long a repeated event is counted in the series of the first: past that, it starts a new
/// event (the API server keeps events for an hour).
const SERIES_WINDOW: SignedDuration = SignedDuration::from_mins(10);

/// One event this process wrote: its name, how often it was seen, and when last.
struct Written {
    name: String,
    count: i32,
    last: Timestamp,
}

/// Which event a report repeats: the pod (by UID), the reason and the message.
type SeriesKey = (String, &'static str, String);

/// Publishes scheduling events and conditions.
#[derive(Clone)]
pub struct Reports {
    client: kube::Client,
    instance: String,
    /// Events written lately, so that a repeat of the same message for the same pod updates
    /// the event's series, as client-go's event correlator does, and a new message is a new
    /// event (kube-runtime's Recorder would keep the first message under a new count).
    written: Arc<Mutex<HashMap<SeriesKey, Written>>>,
}

impl Reports {
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Reports {
            client,
            instance: instance.unwrap_or_else(|| "tether".into()),
            written: Arc::default(),
        }
    }

    /// Writes an events.k8s.io Event about `pod`, or counts a repeat of one in its series.
    async fn publish(
        &self,
        pod: &Pod,
        type_: &str,
        reason: &'static str,
        action: &str,
        note: String,
    ) -> Result<(), kube::Error> {
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let api: Api<K8sEvent> = Api::namespaced(self.client.clone(), &ns);
        let now = Timestamp::now();
        let key = (
            pod.metadata.uid.clone().unwrap_or_default(),
            reason,
            note.clone(),
        );
        let repeat = {
            let mut written = locks::lock(&self.written);
            written.retain(|_, w| now.duration_since(w.last) < SERIES_WINDOW);
            written.get_mut(&key).map(|w| {
                w.count += 1;
                w.last = now;
                (w.name.clone(), w.count)
            })
        };
        if let Some((name, count)) = repeat {
            let series = serde_json::json!({"series": EventSeries {
                count,
                last_observed_time: MicroTime(now),
            }});
            match api
                .patch(&name, &PatchParams::default(), &Patch::Merge(&series))
                .await
            {
                Err(kube::Error::Api(e)) if e.code == 404 => {}
                other => return other.map(|_| ()),
            }
        }
        let name = format!(
            "{}.{:x}",
            pod.metadata.name.as_deref().unwrap_or_default(),
            now.as_nanosecond()
        );
        let event = K8sEvent {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(ns),
                ..Default::default()
            },
            event_time: Some(MicroTime(now)),
            type_: Some(type_.into()),
            reason: Some(reason.into()),
            action: Some(action.into()),
            note: Some(note),
            regarding: Some(pod.object_ref(&())),
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
                last: now,
            },
        );
        Ok(())
    }

    /// Event `Scheduled`: "Successfully assigned ns/pod to node".
    pub async fn scheduled(&self, pod: &Pod, node: &str) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let note = format!("Successfully assigned {ns}/{name} to {node}");
        if let Err(e) = self
            .publish(pod, "Normal", "Scheduled", "Binding", note)
            .await
        {
            tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "could not publish the Scheduled event");
        }
    }

    /// Event `FailedScheduling` and the condition PodScheduled=False with `reason`
    /// (Unschedulable, or SchedulerError for errors) and `message`.
    pub async fn failed(&self, pod: &Pod, reason: &str, message: &str) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let note = truncate(message, 1000);
        if let Err(e) = self
            .publish(pod, "Warning", "FailedScheduling", "Scheduling", note)
            .await
        {
            tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "could not publish the FailedScheduling event");
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
        if already {
            return;
        }
        let patch = serde_json::json!({
            "status": {"conditions": [{
                "type": "PodScheduled",
                "status": "False",
                "reason": reason,
                "message": message,
                "lastTransitionTime": jiff::Timestamp::now().to_string(),
            }]}
        });
        let api: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
        {
            tracing::debug!(pod = %format!("{ns}/{name}"), error = %e, "could not set the PodScheduled condition");
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
    use std::sync::Mutex;

    use super::*;
    use crate::scheduler::testing::{PodBuilder, stand_in_client};

    #[tokio::test]
    async fn a_repeated_message_counts_in_its_series_and_a_new_message_is_a_new_event() {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let seen = calls.clone();
        let client = stand_in_client(move |method, _path, sent| {
            seen.lock().expect("calls").push(method.to_string());
            (if method == "POST" { 201 } else { 200 }, sent)
        });
        let reports = Reports::new(client, None);
        let pod = PodBuilder::new("p").build();
        for message in [
            "0/3 nodes are available.",
            "0/3 nodes are available.",
            "0/2 nodes are available.",
        ] {
            reports
                .publish(
                    &pod,
                    "Warning",
                    "FailedScheduling",
                    "Scheduling",
                    message.into(),
                )
                .await
                .expect("published");
        }
        assert_eq!(*calls.lock().expect("calls"), ["POST", "PATCH", "POST"]);
    }
}
