//! What the scheduler knows of one node: the node object and the pods on it, with their sums.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::k8s::resource::Resource;
use crate::scheduler::framework::pod_info::{HostPort, PodInfo};

/// One node and the pods on it (bound or assumed). The sums are kept up to date incrementally
/// as pods are added and removed.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    /// `None` while the cache holds pods for a node whose object it has not seen (yet or any more).
    pub node: Option<Arc<Node>>,
    pub pods: Vec<Arc<PodInfo>>,
    /// The pods on this node with any inter-pod affinity or anti-affinity term.
    pub pods_with_affinity: Vec<Arc<PodInfo>>,
    /// The pods on this node with a required anti-affinity term.
    pub pods_with_required_anti_affinity: Vec<Arc<PodInfo>>,
    pub used_ports: Vec<HostPort>,
    pub requested: Resource,
    pub non_zero_requested: Resource,
    pub allocatable: Resource,
    /// Image name → size in bytes, from `status.images`, every name of an image listed.
    pub images: BTreeMap<String, i64>,
    /// Bumped on every change; the cache uses it to refresh snapshots incrementally.
    pub generation: u64,
}

impl NodeInfo {
    pub fn new(name: impl Into<String>) -> Self {
        NodeInfo {
            name: name.into(),
            ..Default::default()
        }
    }

    pub fn set_node(&mut self, node: Arc<Node>) {
        let status = node.status.as_ref();
        self.allocatable = Resource::from_list(status.and_then(|s| s.allocatable.as_ref()));
        self.images = status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|img| {
                let size = img.size_bytes.unwrap_or(0);
                img.names.iter().flatten().map(move |n| (n.clone(), size))
            })
            .collect();
        self.node = Some(node);
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .unwrap_or(&EMPTY)
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested.add(&pod.requests);
        self.non_zero_requested.add(&pod.non_zero_requests);
        self.used_ports.extend(pod.host_ports.iter().cloned());
        if pod.has_affinity() {
            self.pods_with_affinity.push(pod.clone());
        }
        if !pod.required_anti_affinity_terms.is_empty() {
            self.pods_with_required_anti_affinity.push(pod.clone());
        }
        self.pods.push(pod);
    }

    /// Removes the pod with this UID; returns whether it was there.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.uid() == uid) else {
            return false;
        };
        let pod = self.pods.swap_remove(i);
        self.requested.sub(&pod.requests);
        self.non_zero_requested.sub(&pod.non_zero_requests);
        for port in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(j);
            }
        }
        self.pods_with_affinity.retain(|p| p.uid() != uid);
        self.pods_with_required_anti_affinity
            .retain(|p| p.uid() != uid);
        true
    }
}
