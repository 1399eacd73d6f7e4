//! Pod → workload identity, following controller ownerReferences over cached metadata:
//! Pod → ReplicaSet → Deployment, Pod → VirtualMachineInstance → VirtualMachine (KubeVirt),
//! Pod → Job, Pod → StatefulSet (each ordinal its own identity), a pod without a controller is
//! its own workload. Pure: the owners come from an [`OwnerLookup`] fed by watches.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::WorkloadRef;

/// What the resolver needs to know of an owner object.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnerMeta {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// The owner's own controller ownerReference, if it has one.
    pub controller: Option<OwnerReference>,
    /// `spec.replicas` of a ReplicaSet, Deployment or StatefulSet.
    pub replicas: Option<i32>,
}

/// Owner metadata by namespace, kind and name, from watch caches. No API call.
pub trait OwnerLookup: Send + Sync {
    fn get(&self, namespace: &str, kind: &str, name: &str) -> Option<OwnerMeta>;
}

/// The workload a pod belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub namespace: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// The workload object's UID, for the StickyBinding's ownerReference.
    pub uid: String,
    /// For a StatefulSet: the pod's ordinal.
    pub ordinal: Option<i32>,
    /// The pod's name, for a StatefulSet (whose binding is named after the pod).
    pub pod_name: Option<String>,
    /// `spec.replicas` of the workload, where it has one.
    pub replicas: Option<i32>,
}

impl Workload {
    /// The StickyBinding's name: `<kind>-<name>` in lower case; `statefulset-<pod name>` for a
    /// StatefulSet, whose ordinals each stick on their own.
    pub fn binding_name(&self) -> String {
        match (&self.kind[..], &self.pod_name) {
            ("StatefulSet", Some(pod)) => format!("statefulset-{pod}").to_lowercase(),
            _ => format!("{}-{}", self.kind, self.name).to_lowercase(),
        }
    }

    pub fn workload_ref(&self) -> WorkloadRef {
        WorkloadRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            ordinal: self.ordinal,
        }
    }
}
