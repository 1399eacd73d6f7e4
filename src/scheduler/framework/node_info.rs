//! What the scheduler knows of one node: the node object and the pods on it, with their sums.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::k8s::resource::{Resource, ResourceSum};
use crate::scheduler::framework::pod_group::PodGroup;
use crate::scheduler::framework::pod_info::{HostPort, PodInfo};
use crate::scheduler::framework::topology::NodeLabels;

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// How many of a node's pods belong to one group.
#[derive(Clone, Debug)]
pub struct GroupCount {
    pub group: Arc<PodGroup>,
    pub pods: u32,
}

/// One node and the pods on it (bound or assumed). The sums are kept up to date incrementally
/// as pods are added and removed.
#[derive(Clone, Debug, Default)]
pub struct NodeInfo {
    pub name: String,
    /// `None` while the cache holds pods for a node whose object it has not seen (yet or any more).
    pub node: Option<Arc<Node>>,
    /// The node's labels, interned: what topology domains are looked up by.
    pub topology: NodeLabels,
    pub pods: Vec<Arc<PodInfo>>,
    /// How many pods on this node have any inter-pod affinity or anti-affinity term.
    pub pods_with_affinity: usize,
    /// How many pods on this node have a required anti-affinity term.
    pub pods_with_required_anti_affinity: usize,
    /// The pods on this node counted per [`PodGroup`], so that inter-pod plugins match a
    /// selector or a term once per group instead of once per pod.
    pub groups: Vec<GroupCount>,
    pub used_ports: Vec<HostPort>,
    /// What the pods request, read from `requested_sum` (exact) and saturated.
    pub requested: Resource,
    pub non_zero_requested: Resource,
    /// The exact sums behind `requested` and `non_zero_requested`: adding then removing any pod
    /// gives back exactly what was there.
    pub requested_sum: ResourceSum,
    pub non_zero_requested_sum: ResourceSum,
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
        self.topology = NodeLabels::new(node.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS));
        self.node = Some(node);
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.node
            .as_ref()
            .and_then(|n| n.metadata.labels.as_ref())
            .unwrap_or(&EMPTY_LABELS)
    }

    pub fn add_pod(&mut self, pod: Arc<PodInfo>) {
        self.requested_sum.add(&pod.requests);
        self.non_zero_requested_sum.add(&pod.non_zero_requests);
        self.requested = self.requested_sum.saturated();
        self.non_zero_requested = self.non_zero_requested_sum.saturated();
        self.used_ports.extend(pod.host_ports.iter().cloned());
        self.pods_with_affinity += usize::from(pod.has_affinity());
        self.pods_with_required_anti_affinity +=
            usize::from(!pod.terms().required_anti_affinity.is_empty());
        match self
            .groups
            .iter_mut()
            .find(|g| Arc::ptr_eq(&g.group, &pod.group))
        {
            Some(g) => g.pods += 1,
            None => self.groups.push(GroupCount {
                group: pod.group.clone(),
                pods: 1,
            }),
        }
        self.pods.push(pod);
    }

    /// Removes the pod with this UID; returns whether it was there.
    pub fn remove_pod(&mut self, uid: &str) -> bool {
        let Some(i) = self.pods.iter().position(|p| p.uid() == uid) else {
            return false;
        };
        let pod = self.pods.swap_remove(i);
        self.requested_sum.sub(&pod.requests);
        self.non_zero_requested_sum.sub(&pod.non_zero_requests);
        self.requested = self.requested_sum.saturated();
        self.non_zero_requested = self.non_zero_requested_sum.saturated();
        for port in &pod.host_ports {
            if let Some(j) = self.used_ports.iter().position(|p| p == port) {
                self.used_ports.swap_remove(j);
            }
        }
        if let Some(i) = self
            .groups
            .iter()
            .position(|g| Arc::ptr_eq(&g.group, &pod.group))
        {
            self.groups[i].pods -= 1;
            if self.groups[i].pods == 0 {
                self.groups.swap_remove(i);
            }
        }
        self.pods_with_affinity -= usize::from(pod.has_affinity());
        self.pods_with_required_anti_affinity -=
            usize::from(!pod.terms().required_anti_affinity.is_empty());
        true
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::topology::label;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn pod(uid: &str, app: &str) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(uid).uid(uid).label("app", app).info())
    }

    #[test]
    fn pods_are_counted_per_group_as_they_come_and_go() {
        let mut node = NodeInfo::new("n1");
        node.add_pod(pod("a1", "a"));
        node.add_pod(pod("a2", "a"));
        node.add_pod(pod("b1", "b"));
        let count = |node: &NodeInfo, app: &str| {
            node.groups
                .iter()
                .find(|g| g.group.labels().get("app").map(String::as_str) == Some(app))
                .map_or(0, |g| g.pods)
        };
        assert_eq!(
            (node.groups.len(), count(&node, "a"), count(&node, "b")),
            (2, 2, 1)
        );

        assert!(node.remove_pod("a1"));
        assert!(node.remove_pod("b1"));
        assert_eq!((node.groups.len(), count(&node, "a")), (1, 1));
        assert!(!node.remove_pod("b1"), "already gone");
    }

    #[test]
    fn a_relabelled_node_answers_its_new_domain() {
        let zone = label("topology.kubernetes.io/zone");
        let mut node = NodeBuilder::new("n1").label(&zone, "z1").info(vec![]);
        assert_eq!(node.topology.value(&zone), Some(label("z1").id()));
        node.set_node(Arc::new(NodeBuilder::new("n1").label(&zone, "z2").build()));
        assert_eq!(node.topology.value(&zone), Some(label("z2").id()));
        node.set_node(Arc::new(NodeBuilder::new("n1").build()));
        assert!(!node.topology.has(&zone));
    }
}
