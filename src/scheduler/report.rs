//! What users see of a scheduling decision: the Events `Scheduled` and `FailedScheduling`, and
//! the pod condition `PodScheduled=False`, written as kube-scheduler writes them. These calls run
//! on the tokio runtime, off the scheduling cycle; a failure to report is logged, never fatal.

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::events::{Event, EventType, Recorder, Reporter};

/// Publishes scheduling events and conditions.
#[derive(Clone)]
pub struct Reports {
    client: kube::Client,
    recorder: Recorder,
}

impl Reports {
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        let reporter = Reporter {
            controller: "tether".into(),
            instance,
        };
        Reports {
            recorder: Recorder::new(client.clone(), reporter),
            client,
        }
    }

    /// Event `Scheduled`: "Successfully assigned ns/pod to node".
    pub async fn scheduled(&self, pod: &Pod, node: &str) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let event = Event {
            type_: EventType::Normal,
            reason: "Scheduled".into(),
            note: Some(format!("Successfully assigned {ns}/{name} to {node}")),
            action: "Binding".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &pod.object_ref(&())).await {
            tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "could not publish the Scheduled event");
        }
    }

    /// Event `FailedScheduling` and the condition PodScheduled=False with `reason`
    /// (Unschedulable, or SchedulerError for errors) and `message`.
    pub async fn failed(&self, pod: &Pod, reason: &str, message: &str) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let event = Event {
            type_: EventType::Warning,
            reason: "FailedScheduling".into(),
            note: Some(truncate(message, 1000)),
            action: "Scheduling".into(),
            secondary: None,
        };
        if let Err(e) = self.recorder.publish(&event, &pod.object_ref(&())).await {
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
