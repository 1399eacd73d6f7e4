//! The pod as tether keeps it: what scheduling, the queue and the history read of a pod, and
//! nothing else.
//!
//! k8s-openapi's `Pod` holds every optional field of the API inline whether it is set or not (a
//! `Pod` is 2.4 KB and a `Container` 2.1 KB before any string), and the cache and the queue hold
//! a pod for every pod of the cluster. These types have the same field names, types and JSON
//! as the API's for the fields they keep, so a plugin reads `pod.spec.containers` as it would
//! the API type, and a watch decodes straight into them: the fields left out are skipped while
//! decoding, never built.
//!
//! Kept: metadata, and of the spec and status what a plugin, the queue, preemption, the
//! history or `explain` reads. Left out: what only the kubelet reads (environment, commands,
//! probes, lifecycle hooks, security contexts, mounts, container states, DNS, host aliases).
//! tether never writes a pod back whole (binds, status patches and evictions name the pod), so
//! nothing left out can be lost on the server. The sub-types a plugin parses (affinity,
//! tolerations, spread constraints, volumes, claims) are the API's own.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// A pod: its metadata, and the parts of its spec and status scheduling reads.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct Pod {
    #[serde(default)]
    pub metadata: ObjectMeta,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub spec: Option<PodSpec>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<PodStatus>,
}

/// What a pod asks of its node, as scheduling reads it (the API's `PodSpec`, in part).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub affinity: Option<api::Affinity>,
    #[serde(default)]
    pub containers: Vec<Container>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_users: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Vec<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node_selector: Option<BTreeMap<String, String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub os: Option<api::PodOS>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub overhead: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub preemption_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority: Option<i32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub priority_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claims: Option<Vec<api::PodResourceClaim>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<api::ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime_class_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduler_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Vec<api::PodSchedulingGate>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_group: Option<api::PodSchedulingGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Vec<api::Toleration>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<api::TopologySpreadConstraint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<api::Volume>>,
}

/// A container, as scheduling reads it: its name, image, ports and resources.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Container {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ports: Option<Vec<api::ContainerPort>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<api::ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_policy_rules: Option<Vec<api::ContainerRestartRule>>,
}

/// What the API server and the kubelet report of a pod, as scheduling reads it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodStatus {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub conditions: Option<Vec<api::PodCondition>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub extended_resource_claim_status: Option<api::PodExtendedResourceClaimStatus>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_container_statuses: Option<Vec<ContainerStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub nominated_node_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resize: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resource_claim_statuses: Option<Vec<api::PodResourceClaimStatus>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<api::ResourceRequirements>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub start_time: Option<Time>,
}

/// A container's status, as scheduling reads it: the resources a resize gave it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ContainerStatus {
    #[serde(default)]
    pub name: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allocated_resources: Option<BTreeMap<String, Quantity>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<api::ResourceRequirements>,
}

impl k8s_openapi::Resource for Pod {
    const API_VERSION: &'static str = <api::Pod as k8s_openapi::Resource>::API_VERSION;
    const GROUP: &'static str = <api::Pod as k8s_openapi::Resource>::GROUP;
    const KIND: &'static str = <api::Pod as k8s_openapi::Resource>::KIND;
    const VERSION: &'static str = <api::Pod as k8s_openapi::Resource>::VERSION;
    const URL_PATH_SEGMENT: &'static str = <api::Pod as k8s_openapi::Resource>::URL_PATH_SEGMENT;
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for Pod {
    const LIST_KIND: &'static str = <api::Pod as k8s_openapi::ListableResource>::LIST_KIND;
}

impl k8s_openapi::Metadata for Pod {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}

impl From<api::Container> for Container {
    fn from(c: api::Container) -> Self {
        Container {
            name: c.name,
            image: c.image,
            ports: c.ports,
            resources: c.resources,
            restart_policy: c.restart_policy,
            restart_policy_rules: c.restart_policy_rules,
        }
    }
}

impl From<api::ContainerStatus> for ContainerStatus {
    fn from(s: api::ContainerStatus) -> Self {
        ContainerStatus {
            name: s.name,
            allocated_resources: s.allocated_resources,
            resources: s.resources,
        }
    }
}

fn each<T, U: From<T>>(list: Option<Vec<T>>) -> Option<Vec<U>> {
    list.map(|items| items.into_iter().map(U::from).collect())
}

impl From<api::PodSpec> for PodSpec {
    fn from(s: api::PodSpec) -> Self {
        PodSpec {
            affinity: s.affinity,
            containers: s.containers.into_iter().map(Container::from).collect(),
            host_network: s.host_network,
            host_users: s.host_users,
            init_containers: each(s.init_containers),
            node_name: s.node_name,
            node_selector: s.node_selector,
            os: s.os,
            overhead: s.overhead,
            preemption_policy: s.preemption_policy,
            priority: s.priority,
            priority_class_name: s.priority_class_name,
            resource_claims: s.resource_claims,
            resources: s.resources,
            restart_policy: s.restart_policy,
            runtime_class_name: s.runtime_class_name,
            scheduler_name: s.scheduler_name,
            scheduling_gates: s.scheduling_gates,
            scheduling_group: s.scheduling_group,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations,
            topology_spread_constraints: s.topology_spread_constraints,
            volumes: s.volumes,
        }
    }
}

impl From<api::PodStatus> for PodStatus {
    fn from(s: api::PodStatus) -> Self {
        PodStatus {
            allocated_resources: s.allocated_resources,
            conditions: s.conditions,
            container_statuses: each(s.container_statuses),
            extended_resource_claim_status: s.extended_resource_claim_status,
            init_container_statuses: each(s.init_container_statuses),
            nominated_node_name: s.nominated_node_name,
            phase: s.phase,
            resize: s.resize,
            resource_claim_statuses: s.resource_claim_statuses,
            resources: s.resources,
            start_time: s.start_time,
        }
    }
}

/// The parts of an API pod that scheduling reads (the rest is dropped).
impl From<api::Pod> for Pod {
    fn from(p: api::Pod) -> Self {
        Pod {
            metadata: p.metadata,
            spec: p.spec.map(PodSpec::from),
            status: p.status.map(PodStatus::from),
        }
    }
}

/// A container as the API writes it (a workload's pod template), from what tether kept of it.
impl From<Container> for api::Container {
    fn from(c: Container) -> Self {
        api::Container {
            name: c.name,
            image: c.image,
            ports: c.ports,
            resources: c.resources,
            restart_policy: c.restart_policy,
            restart_policy_rules: c.restart_policy_rules,
            ..Default::default()
        }
    }
}

/// A pod spec as the API writes it (a workload's pod template), from what tether kept of it.
impl From<PodSpec> for api::PodSpec {
    fn from(s: PodSpec) -> Self {
        api::PodSpec {
            affinity: s.affinity,
            containers: s.containers.into_iter().map(api::Container::from).collect(),
            host_network: s.host_network,
            host_users: s.host_users,
            init_containers: each(s.init_containers),
            node_name: s.node_name,
            node_selector: s.node_selector,
            os: s.os,
            overhead: s.overhead,
            preemption_policy: s.preemption_policy,
            priority: s.priority,
            priority_class_name: s.priority_class_name,
            resource_claims: s.resource_claims,
            resources: s.resources,
            restart_policy: s.restart_policy,
            runtime_class_name: s.runtime_class_name,
            scheduler_name: s.scheduler_name,
            scheduling_gates: s.scheduling_gates,
            scheduling_group: s.scheduling_group,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations,
            topology_spread_constraints: s.topology_spread_constraints,
            volumes: s.volumes,
            ..Default::default()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A pod that sets every field [`Pod`] keeps, in the API's own JSON, beside fields it does
    /// not keep.
    fn every_kept_field() -> serde_json::Value {
        let requests = serde_json::json!({"requests": {"cpu": "1"}, "limits": {"cpu": "2"}});
        let container = serde_json::json!({"name": "app", "image": "registry.local/app:1",
            "ports": [{"containerPort": 80, "hostPort": 8080}], "resources": requests,
            "restartPolicy": "Always",
            "restartPolicyRules": [{"action": "Restart", "exitCodes": {"operator": "In", "values": [42]}}],
            "env": [{"name": "TOKEN", "value": "secret"}], "command": ["serve"],
            "livenessProbe": {"exec": {"command": ["true"]}}});
        let status = serde_json::json!({"name": "app", "allocatedResources": {"cpu": "1"},
            "resources": requests, "image": "registry.local/app:1", "imageID": "sha256:1",
            "ready": true, "restartCount": 3});
        serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "p", "namespace": "ns", "uid": "u", "labels": {"a": "b"}},
            "spec": {
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                    {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]}}},
                "containers": [container],
                "hostNetwork": true,
                "hostUsers": false,
                "initContainers": [container],
                "nodeName": "n1",
                "nodeSelector": {"disk": "ssd"},
                "os": {"name": "linux"},
                "overhead": {"cpu": "10m"},
                "preemptionPolicy": "Never",
                "priority": 7,
                "priorityClassName": "high",
                "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
                "resources": requests,
                "restartPolicy": "Always",
                "runtimeClassName": "kata",
                "schedulerName": "tether-scheduler",
                "schedulingGates": [{"name": "wait"}],
                "schedulingGroup": {"podGroupName": "g"},
                "terminationGracePeriodSeconds": 30,
                "tolerations": [{"key": "k", "operator": "Exists"}],
                "topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "zone",
                    "whenUnsatisfiable": "DoNotSchedule"}],
                "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "d"}}],
                "dnsPolicy": "ClusterFirst", "serviceAccountName": "sa"
            },
            "status": {
                "allocatedResources": {"cpu": "1"},
                "conditions": [{"type": "PodScheduled", "status": "True"}],
                "containerStatuses": [status],
                "extendedResourceClaimStatus": {"resourceClaimName": "x",
                    "requestMappings": [{"containerName": "app", "resourceName": "r", "requestName": "q"}]},
                "initContainerStatuses": [status],
                "nominatedNodeName": "n2",
                "phase": "Running",
                "resize": "InProgress",
                "resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": "gpu-claim"}],
                "resources": requests,
                "startTime": "2026-01-01T00:00:00Z",
                "hostIP": "10.0.0.1", "podIP": "10.1.0.1", "qosClass": "Burstable"
            }
        })
    }

    #[test]
    fn decoding_keeps_what_the_api_type_holds_for_every_kept_field() {
        let api: api::Pod = serde_json::from_value(every_kept_field()).expect("an API pod");
        let kept: Pod = serde_json::from_value(every_kept_field()).expect("a pod");
        assert_eq!(kept, Pod::from(api));

        // Every field the types declare is set by the fixture, so a JSON name that does not
        // match the API's leaves one unset and fails the comparison above.
        let written = serde_json::to_value(&kept).expect("written");
        let keys = |v: &serde_json::Value| -> Vec<String> {
            let mut keys: Vec<String> = v.as_object().expect("an object").keys().cloned().collect();
            keys.sort();
            keys
        };
        assert_eq!(keys(&written["spec"]).len(), 23, "{:?}", keys(&written["spec"]));
        assert_eq!(keys(&written["spec"]["containers"][0]).len(), 6);
        assert_eq!(keys(&written["status"]).len(), 11, "{:?}", keys(&written["status"]));
        assert_eq!(keys(&written["status"]["containerStatuses"][0]).len(), 3);
        assert!(written["spec"]["containers"][0].get("env").is_none(), "not kept");
    }

    #[test]
    fn a_kept_pod_written_out_reads_back_as_the_api_type_unchanged() {
        let kept: Pod = serde_json::from_value(every_kept_field()).expect("a pod");
        let written = serde_json::to_value(&kept).expect("written");
        let api: api::Pod = serde_json::from_value(written).expect("an API pod");
        assert_eq!(Pod::from(api.clone()), kept);
        let spec = api.spec.expect("spec");
        assert_eq!(api::PodSpec::from(kept.spec.expect("spec")), spec);
    }
}
