//! What the scheduler reads of a pod, written once.

use k8s_openapi::api::core::v1::Pod;

/// `namespace/name`, the key the queue and the logs use.
pub fn key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

/// `spec.schedulerName` (empty when unset; the API server defaults it to `default-scheduler`).
pub fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .unwrap_or_default()
}

/// `spec.nodeName` when the pod is bound (or names its node itself).
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}
