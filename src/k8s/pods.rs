//! What the scheduler reads of a pod, written once.

use crate::k8s::pod::Pod;

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

/// The PodGroup (Workload API) the pod belongs to: `spec.schedulingGroup.podGroupName`, when
/// set and not empty.
pub fn pod_group_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// `spec.nodeName` when the pod is bound (or names its node itself).
pub fn node_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// The annotation domain of tether's own per-pod switches (`tether.dev/sticky-node-disabled`,
/// `tether.dev/placement-history-disabled`).
const OWN_DOMAIN: &str = "tether.dev/";

/// Drops the annotations of a pod no profile of tether serves (bound by another scheduler, or
/// waiting for one or for a profile not applied yet), but for tether's own switches
/// (`tether.dev/...` set to `"true"`, the one value tether reads). Nothing reads the rest of
/// such a pod's annotations, and up to 256 KiB per pod that any namespace user may write would
/// otherwise be held for as long as the pod lives. A pod whose profile appears later keeps the
/// ones left here until its next change (a custom `disableAnnotation` outside `tether.dev/`
/// is read from then on).
pub fn keep_only_own_switches(pod: &mut Pod) {
    let meta = &mut pod.metadata;
    if let Some(annotations) = meta.annotations.as_mut() {
        annotations.retain(|key, value| key.starts_with(OWN_DOMAIN) && value == "true");
        if annotations.is_empty() {
            meta.annotations = None;
        }
    }
}

/// When the API server recorded the pod's bind: its `PodScheduled=True` condition's time (the
/// API server's clock; the kubelet's for a pod created with `spec.nodeName` set).
pub fn bound_at(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")?
        .last_transition_time
        .as_ref()
        .map(|t| t.0)
}

/// The pod conditions tether reads: when the pod was bound or why it was not
/// (`PodScheduled`), a resize found infeasible (`PodResizePending`), a pod being preempted
/// (`DisruptionTarget`). The kubelet's (`Ready`, `Initialized`, `ContainersReady`, ...) are
/// not kept.
const CONDITIONS_READ: [&str; 3] = ["PodScheduled", "PodResizePending", "DisruptionTarget"];

/// Drops from a pod kept in memory the conditions no part of tether reads, the volumes that
/// never bear on placement (projected, ConfigMap, Secret, downward API, emptyDir) and the spare
/// capacity JSON decoding leaves in its lists (they grow four elements at a time). What only
/// the kubelet reads is not decoded at all ([`Pod`] has no field for it). tether never writes a
/// pod back whole, so nothing dropped here can be lost on the server.
pub fn compact(pod: &mut Pod) {
    use k8s_openapi::api::core::v1::Volume;
    fn bears_on_placement(v: &Volume) -> bool {
        v.projected.is_none()
            && v.config_map.is_none()
            && v.secret.is_none()
            && v.downward_api.is_none()
            && v.empty_dir.is_none()
    }
    fn shrink<T>(list: &mut Option<Vec<T>>) {
        if let Some(items) = list {
            if items.is_empty() {
                *list = None;
            } else {
                items.shrink_to_fit();
            }
        }
    }
    if let Some(spec) = pod.spec.as_mut() {
        if let Some(volumes) = spec.volumes.as_mut() {
            volumes.retain(bears_on_placement);
        }
        shrink(&mut spec.volumes);
        shrink(&mut spec.topology_spread_constraints);
        shrink(&mut spec.scheduling_gates);
        shrink(&mut spec.resource_claims);
    }
    if let Some(status) = pod.status.as_mut() {
        if let Some(conditions) = status.conditions.as_mut() {
            conditions.retain(|c| CONDITIONS_READ.contains(&c.type_.as_str()));
        }
        shrink(&mut status.container_statuses);
        shrink(&mut status.init_container_statuses);
        shrink(&mut status.conditions);
        shrink(&mut status.resource_claim_statuses);
    }
    shrink(&mut pod.metadata.owner_references);
    shrink(&mut pod.metadata.finalizers);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod as the API server serves it: a container with everything the kubelet reads, the
    /// service account's projected volume, a claim, an image volume, and a running status.
    fn served_json() -> serde_json::Value {
        serde_json::json!({
            "metadata": {"name": "web-0", "namespace": "shop", "uid": "u1",
                "labels": {"app": "web"}, "annotations": {"note": "kept"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "StatefulSet",
                    "name": "web", "uid": "s1", "controller": true}]},
            "spec": {
                "schedulerName": "tether-scheduler",
                "containers": [{"name": "app", "image": "registry.local/web:1",
                    "command": ["serve"], "env": [{"name": "A", "value": "1"}],
                    "ports": [{"containerPort": 80, "hostPort": 8080}],
                    "livenessProbe": {"httpGet": {"path": "/", "port": 80}},
                    "volumeMounts": [{"name": "data", "mountPath": "/data"}],
                    "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}}],
                "initContainers": [{"name": "log", "image": "registry.local/log:1",
                    "restartPolicy": "Always",
                    "resources": {"requests": {"cpu": "100m"}}}],
                "tolerations": [{"key": "node.kubernetes.io/not-ready", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 300}],
                "volumes": [
                    {"name": "kube-api-access", "projected": {"sources": [
                        {"serviceAccountToken": {"path": "token"}},
                        {"configMap": {"name": "kube-root-ca.crt"}},
                        {"downwardAPI": {"items": [{"path": "namespace",
                            "fieldRef": {"fieldPath": "metadata.namespace"}}]}}]}},
                    {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
                    {"name": "model", "image": {"reference": "registry.local/model:1"}},
                    {"name": "scratch", "emptyDir": {}}]
            },
            "status": {"phase": "Running", "conditions": [
                    {"type": "PodScheduled", "status": "True"},
                    {"type": "Ready", "status": "True"}],
                "containerStatuses": [{"name": "app", "image": "registry.local/web:1",
                    "imageID": "sha256:abc", "ready": true, "restartCount": 0,
                    "state": {"running": {"startedAt": "2026-01-01T00:00:00Z"}},
                    "resources": {"requests": {"cpu": "750m", "memory": "1Gi"}},
                    "allocatedResources": {"cpu": "750m", "memory": "1Gi"}}]}
        })
    }

    /// The pod as k8s-openapi decodes it, every field the API has.
    fn served_pod() -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(served_json()).expect("an API pod")
    }

    #[test]
    fn a_compacted_pod_keeps_what_scheduling_reads_and_no_spare_room() {
        let served = served_pod();
        let mut pod: Pod = serde_json::from_value(served_json()).expect("a pod");
        compact(&mut pod);

        assert_eq!(
            crate::k8s::resource::pod_requests(&pod, true),
            crate::k8s::resource::pod_requests(&Pod::from(served.clone()), true),
            "the requests, the running resize included"
        );
        assert_eq!(pod.metadata, served.metadata);
        let spec = pod.spec.as_ref().expect("spec");
        let served_spec = served.spec.as_ref().expect("spec");
        assert_eq!(
            (&spec.tolerations, &spec.scheduler_name),
            (
                &served_spec.tolerations.clone().map(Into::into),
                &served_spec.scheduler_name
            )
        );
        let app = &spec.containers[0];
        assert_eq!(
            (&app.name, &app.image, &app.ports, &app.resources),
            (
                &served_spec.containers[0].name,
                &served_spec.containers[0].image,
                &served_spec.containers[0].ports,
                &served_spec.containers[0].resources
            )
        );
        let kept = serde_json::to_value(app).expect("a container");
        for dropped in ["env", "command", "livenessProbe", "volumeMounts"] {
            assert!(kept.get(dropped).is_none(), "{dropped} is not kept");
        }
        let volumes: Vec<&str> = spec
            .volumes
            .iter()
            .flatten()
            .map(|v| v.name.as_str())
            .collect();
        assert_eq!(volumes, ["data", "model"], "volumes that bear on placement");
        let conditions: Vec<&str> = pod
            .status
            .iter()
            .flat_map(|s| s.conditions.iter().flatten())
            .map(|c| c.type_.as_str())
            .collect();
        assert_eq!(conditions, ["PodScheduled"], "the conditions tether reads");
        assert_eq!(bound_at(&pod), bound_at(&Pod::from(served.clone())));
        assert_eq!(
            (
                spec.containers.capacity(),
                spec.volumes.as_ref().map(Vec::capacity)
            ),
            (1, Some(2)),
            "no spare room"
        );
    }

    /// A pod of another scheduler keeps only tether's own switches, and only when on.
    #[test]
    fn a_pod_of_another_scheduler_keeps_only_tethers_switches_that_are_on() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p", "annotations": {
                "note": "x".repeat(4096),
                "tether.dev/sticky-node-disabled": "true",
                "tether.dev/placement-history-disabled": "false",
                "kubectl.kubernetes.io/restartedAt": "now"}}}))
        .expect("pod");
        keep_only_own_switches(&mut pod);
        let kept = pod.metadata.annotations.expect("one kept");
        assert_eq!(
            kept.into_iter().collect::<Vec<_>>(),
            [(
                "tether.dev/sticky-node-disabled".to_string(),
                "true".to_string()
            )]
        );
        let mut plain: Pod = serde_json::from_value(
            serde_json::json!({"metadata": {"name": "q", "annotations": {"a": "b"}}}),
        )
        .expect("pod");
        keep_only_own_switches(&mut plain);
        assert_eq!(plain.metadata.annotations, None);
    }
}
