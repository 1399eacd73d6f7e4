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
//!
//! What the pods of one workload have alike (their containers, their tolerations) is kept once
//! for all of them ([`Shared`]): 20,000 pods of one template hold one list of containers.

use std::collections::{BTreeMap, HashMap};
use std::hash::Hasher;
use std::ops::{Deref, DerefMut};
use std::sync::{Arc, LazyLock, Mutex, Weak};

use k8s_openapi::api::core::v1 as api;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

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
    pub containers: Shared<Vec<Container>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_network: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub host_users: Option<bool>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub init_containers: Option<Shared<Vec<Container>>>,
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
    pub security_context: Option<SecurityContext>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_gates: Option<Vec<api::PodSchedulingGate>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scheduling_group: Option<api::PodSchedulingGroup>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub termination_grace_period_seconds: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tolerations: Option<Shared<Vec<api::Toleration>>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub topology_spread_constraints: Option<Vec<api::TopologySpreadConstraint>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub volumes: Option<Vec<api::Volume>>,
}

impl PodSpec {
    /// The pod's tolerations, none when unset.
    pub fn tolerations(&self) -> &[api::Toleration] {
        self.tolerations.as_deref().map_or(&[], Vec::as_slice)
    }

    /// The pod's init containers, none when unset.
    pub fn init_containers(&self) -> &[Container] {
        self.init_containers.as_deref().map_or(&[], Vec::as_slice)
    }
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
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub security_context: Option<SecurityContext>,
    /// Only the mounts with bind mount options (what scheduling reads of them), none when no
    /// mount has any.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "mounts_with_options"
    )]
    pub volume_mounts: Option<Vec<VolumeMount>>,
}

/// A container's volume mounts as the pod keeps them: those with bind mount options.
fn mounts_with_options<'de, D>(deserializer: D) -> Result<Option<Vec<VolumeMount>>, D::Error>
where
    D: serde::Deserializer<'de>,
{
    let mounts: Option<Vec<VolumeMount>> = Deserialize::deserialize(deserializer)?;
    Ok(with_options(mounts.into_iter().flatten()))
}

/// The mounts with bind mount options, none when no mount has any.
fn with_options(mounts: impl Iterator<Item = VolumeMount>) -> Option<Vec<VolumeMount>> {
    let kept: Vec<VolumeMount> = mounts
        .filter(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()))
        .collect();
    (!kept.is_empty()).then_some(kept)
}

/// A pod's or a container's security context, as scheduling reads it: the seccomp profile
/// (NodeDeclaredFeatures' SecurityProfileOCI, from 1.38).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SecurityContext {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seccomp_profile: Option<SeccompProfile>,
}

impl SecurityContext {
    fn of_profile(profile: api::SeccompProfile) -> Self {
        SecurityContext {
            seccomp_profile: Some(SeccompProfile {
                type_: profile.type_,
            }),
        }
    }
}

/// A seccomp profile's type (`RuntimeDefault`, `Unconfined`, `Localhost`, `OCI`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SeccompProfile {
    #[serde(rename = "type", default)]
    pub type_: String,
}

/// A container's volume mount, as scheduling reads it: its bind mount options
/// (NodeDeclaredFeatures' VolumeBindMountOptions, from 1.37).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct VolumeMount {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bind_mount_options: Option<Vec<String>>,
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
            security_context: c
                .security_context
                .and_then(|sc| sc.seccomp_profile)
                .map(SecurityContext::of_profile),
            volume_mounts: with_options(c.volume_mounts.into_iter().flatten().map(|m| {
                VolumeMount {
                    bind_mount_options: m.bind_mount_options,
                }
            })),
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
            containers: Shared::new(s.containers.into_iter().map(Container::from).collect()),
            host_network: s.host_network,
            host_users: s.host_users,
            init_containers: each(s.init_containers).map(Shared::new),
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
            security_context: s
                .security_context
                .and_then(|sc| sc.seccomp_profile)
                .map(SecurityContext::of_profile),
            scheduling_gates: s.scheduling_gates,
            scheduling_group: s.scheduling_group,
            termination_grace_period_seconds: s.termination_grace_period_seconds,
            tolerations: s.tolerations.map(Shared::new),
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
            containers: s
                .containers
                .unshared()
                .into_iter()
                .map(api::Container::from)
                .collect(),
            host_network: s.host_network,
            host_users: s.host_users,
            init_containers: each(s.init_containers.map(Shared::unshared)),
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
            tolerations: s.tolerations.map(Shared::unshared),
            topology_spread_constraints: s.topology_spread_constraints,
            volumes: s.volumes,
            ..Default::default()
        }
    }
}

/// A part of a pod that the pods of one workload have alike, kept once for all of them: a pod
/// decoded with the same containers (or tolerations) as a pod already held shares that pod's
/// copy. It reads as the value itself; changing it (tests and builders do) copies it first, so a
/// change never reaches another pod.
pub struct Shared<T>(Arc<T>);

impl<T: Alike> Shared<T> {
    /// The value, shared with the pods that hold an equal one.
    pub fn new(mut value: T) -> Self {
        value.tidy();
        Shared(T::held().share(value))
    }
}

impl<T: Clone> Shared<T> {
    /// The value itself (copied when other pods share it).
    pub fn unshared(self) -> T {
        Arc::unwrap_or_clone(self.0)
    }
}

impl<T> Shared<T> {
    /// Whether two pods hold the very same copy.
    pub fn same(a: &Self, b: &Self) -> bool {
        Arc::ptr_eq(&a.0, &b.0)
    }
}

impl<T> Deref for Shared<T> {
    type Target = T;

    fn deref(&self) -> &T {
        &self.0
    }
}

impl<T: Clone> DerefMut for Shared<T> {
    fn deref_mut(&mut self) -> &mut T {
        Arc::make_mut(&mut self.0)
    }
}

impl<T> Clone for Shared<T> {
    fn clone(&self) -> Self {
        Shared(self.0.clone())
    }
}

impl<T: Alike + Default> Default for Shared<T> {
    fn default() -> Self {
        Shared::new(T::default())
    }
}

impl<T: PartialEq> PartialEq for Shared<T> {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0) || *self.0 == *other.0
    }
}

impl<T: std::fmt::Debug> std::fmt::Debug for Shared<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        self.0.fmt(f)
    }
}

impl<T: Alike> From<T> for Shared<T> {
    fn from(value: T) -> Self {
        Shared::new(value)
    }
}

impl<'a, T> IntoIterator for &'a Shared<Vec<T>> {
    type Item = &'a T;
    type IntoIter = std::slice::Iter<'a, T>;

    fn into_iter(self) -> Self::IntoIter {
        self.0.iter()
    }
}

impl<T: Serialize> Serialize for Shared<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl<'de, T: Alike + Deserialize<'de>> Deserialize<'de> for Shared<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        T::deserialize(deserializer).map(Shared::new)
    }
}

/// A type whose values pods share ([`Shared`]): the table of the values held, and how a value
/// is tidied before it is shared.
pub trait Alike: Serialize + PartialEq + Sized + Send + Sync + 'static {
    fn held() -> &'static Held<Self>;

    /// Gives back what decoding left over (a list's spare room), before the value is shared.
    fn tidy(&mut self) {}
}

impl Alike for Vec<Container> {
    fn held() -> &'static Held<Self> {
        static HELD: LazyLock<Held<Vec<Container>>> = LazyLock::new(Held::default);
        &HELD
    }

    fn tidy(&mut self) {
        self.shrink_to_fit();
    }
}

impl Alike for Vec<api::Toleration> {
    fn held() -> &'static Held<Self> {
        static HELD: LazyLock<Held<Vec<api::Toleration>>> = LazyLock::new(Held::default);
        &HELD
    }

    fn tidy(&mut self) {
        self.shrink_to_fit();
    }
}

/// The values of one type that pods hold, by a hash of their JSON. Entries are weak: a value no
/// pod holds any more is freed with its last pod, and its entry is swept once the table has
/// doubled since the last sweep, so the table stays within twice the values alive.
pub struct Held<T> {
    table: Mutex<HeldTable<T>>,
}

struct HeldTable<T> {
    by_hash: HashMap<u64, Vec<Weak<T>>>,
    entries: usize,
    sweep_at: usize,
}

impl<T> Default for Held<T> {
    fn default() -> Self {
        Held {
            table: Mutex::new(HeldTable {
                by_hash: HashMap::new(),
                entries: 0,
                sweep_at: 1024,
            }),
        }
    }
}

impl<T: Alike> Held<T> {
    /// The copy held of a value equal to `value`, or `value` itself, now held.
    fn share(&self, value: T) -> Arc<T> {
        let hash = json_hash(&value);
        // A poisoned table (a panic while it was held) is still a table of weak references.
        let mut table = self.table.lock().unwrap_or_else(|e| e.into_inner());
        let alike = table
            .by_hash
            .get(&hash)
            .into_iter()
            .flatten()
            .filter_map(Weak::upgrade)
            .find(|held| **held == value);
        if let Some(held) = alike {
            return held;
        }
        let shared = Arc::new(value);
        table
            .by_hash
            .entry(hash)
            .or_default()
            .push(Arc::downgrade(&shared));
        table.entries += 1;
        if table.entries >= table.sweep_at {
            table.by_hash.retain(|_, held| {
                held.retain(|w| w.strong_count() > 0);
                !held.is_empty()
            });
            table.entries = table.by_hash.values().map(Vec::len).sum();
            table.sweep_at = table.entries.saturating_mul(2).max(1024);
        }
        shared
    }

    /// How many values the table holds entries for (alive or not swept yet).
    pub fn entries(&self) -> usize {
        self.table.lock().unwrap_or_else(|e| e.into_inner()).entries
    }
}

/// A hash of a value's JSON (equal values have equal JSON).
fn json_hash<T: Serialize>(value: &T) -> u64 {
    struct HashWriter(foldhash::quality::FoldHasher<'static>);
    impl std::io::Write for HashWriter {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0.write(buf);
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut writer = HashWriter(std::hash::BuildHasher::build_hasher(
        &foldhash::quality::FixedState::default(),
    ));
    // Writing to a hasher cannot fail; a value that cannot be written hashes as what was written.
    let _ = serde_json::to_writer(&mut writer, value);
    writer.0.finish()
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
        assert_eq!(
            keys(&written["spec"]).len(),
            23,
            "{:?}",
            keys(&written["spec"])
        );
        assert_eq!(keys(&written["spec"]["containers"][0]).len(), 6);
        assert_eq!(
            keys(&written["status"]).len(),
            11,
            "{:?}",
            keys(&written["status"])
        );
        assert_eq!(keys(&written["status"]["containerStatuses"][0]).len(), 3);
        assert!(
            written["spec"]["containers"][0].get("env").is_none(),
            "not kept"
        );
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

    #[test]
    fn pods_of_one_template_share_their_containers_and_a_change_to_one_stays_its_own() {
        let pod = |name: &str, cpu: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": name},
                "spec": {"containers": [{"name": "c", "image": "app:1",
                        "resources": {"requests": {"cpu": cpu}}}],
                    "tolerations": [{"key": "node.kubernetes.io/not-ready",
                        "operator": "Exists", "effect": "NoExecute", "tolerationSeconds": 300}]}
            }))
            .expect("a pod")
        };
        let spec = |p: &Pod| p.spec.clone().expect("spec");
        let (a, b, other) = (
            spec(&pod("a", "1")),
            spec(&pod("b", "1")),
            spec(&pod("c", "2")),
        );
        assert!(
            Shared::same(&a.containers, &b.containers),
            "one copy for alike pods"
        );
        assert!(Shared::same(
            a.tolerations.as_ref().expect("tolerations"),
            b.tolerations.as_ref().expect("tolerations")
        ));
        assert!(
            !Shared::same(&a.containers, &other.containers),
            "not for another"
        );
        assert_eq!(a.containers.capacity(), 1, "no spare room kept");

        let mut changed = a.clone();
        changed.containers[0].image = Some("app:2".into());
        assert_eq!(
            a.containers[0].image.as_deref(),
            Some("app:1"),
            "a's own copy unchanged"
        );
        assert_eq!(b.containers[0].image.as_deref(), Some("app:1"));
        assert!(!Shared::same(&changed.containers, &a.containers));
    }

    #[test]
    fn the_table_of_shared_values_keeps_within_twice_the_values_alive() {
        let alive: Vec<Shared<Vec<api::Toleration>>> = (0..100)
            .map(|i| {
                Shared::new(vec![api::Toleration {
                    key: Some(format!("alive-{i}")),
                    ..Default::default()
                }])
            })
            .collect();
        for i in 0..20_000 {
            drop(Shared::new(vec![api::Toleration {
                key: Some(format!("gone-{i}")),
                ..Default::default()
            }]));
        }
        // Other tests share the table; none holds more than a few hundred values.
        let entries = <Vec<api::Toleration> as Alike>::held().entries();
        assert!(
            entries < 4_096,
            "{entries} entries for about 100 values alive"
        );
        let again = Shared::new(vec![api::Toleration {
            key: Some("alive-7".into()),
            ..Default::default()
        }]);
        assert!(
            Shared::same(&again, &alive[7]),
            "a value alive is still found"
        );
    }
}
