//! What users see of a scheduling decision: the Events `Scheduled` and `FailedScheduling`, and
//! the pod condition `PodScheduled=False`, written as kube-scheduler writes them. These calls run
//! on the tokio runtime, off the scheduling cycle; a failure to report is logged, never fatal.

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, Patch, PatchParams};

use crate::events::{EventType, EventWriter};

/// Publishes scheduling events and conditions.
#[derive(Clone)]
pub struct Reports {
    client: kube::Client,
    events: EventWriter,
}

impl Reports {
    pub fn new(client: kube::Client, instance: Option<String>) -> Self {
        Reports {
            events: EventWriter::new(client.clone(), instance),
            client,
        }
    }

    /// Event `Scheduled`: "Successfully assigned ns/pod to node".
    pub async fn scheduled(&self, pod: &Pod, node: &str) {
        let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let note = format!("Successfully assigned {ns}/{name} to {node}");
        if let Err(e) = self
            .events
            .publish(
                &pod.object_ref(&()),
                EventType::Normal,
                "Scheduled",
                "Binding",
                note,
            )
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
        // The UID makes the write a precondition: it never lands on a pod recreated under the
        // same name.
        let patch = serde_json::json!({
            "metadata": {"uid": pod.metadata.uid},
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
