//! What the scheduler knows of one node: the node object and the pods on it, with their sums.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Taint};

use crate::k8s::resource::{Resource, ResourceSum};
use crate::k8s::taints;
use crate::scheduler::framework::pod_group::PodGroup;
use crate::scheduler::framework::pod_info::{HostPort, PodInfo};
use crate::scheduler::framework::topology::{NodeLabels, NodeMatcher};

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();

/// On how many nodes (with a Node object) each image name is.
pub type ImageCounts = std::collections::HashMap<Arc<str>, usize>;

/// A node's images: every name of each image its `status.images` lists, with the image's size
/// in bytes, sorted by name (when a name is listed twice, the last one's size, as upstream's
/// map). Shared between the node infos and snapshots made from one version of the node, so a
/// pod added to a node does not copy them; the cache shares each name between the nodes that
/// list it (a kubelet reports up to 50 images, two names each, mostly the same across a pool).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NodeImages(Arc<[(Arc<str>, i64)]>);

impl NodeImages {
    /// The images of `node`, each name made by `intern`.
    pub fn read(node: &Node, mut intern: impl FnMut(&str) -> Arc<str>) -> Self {
        let listed = node.status.as_ref().and_then(|s| s.images.as_ref());
        let mut named: Vec<(Arc<str>, i64)> = listed
            .into_iter()
            .flatten()
            .flat_map(|image| {
                let size = image.size_bytes.unwrap_or(0);
                image.names.iter().flatten().map(move |name| (name, size))
            })
            .map(|(name, size)| (intern(name), size))
            .collect();
        // Stable sort of the list reversed: the first of equal names is the last listed.
        named.reverse();
        named.sort_by(|a, b| a.0.cmp(&b.0));
        named.dedup_by(|later, first| later.0 == first.0);
        NodeImages(named.into())
    }

    /// The size of the image listed under `name`, if the node has it.
    pub fn get(&self, name: &str) -> Option<i64> {
        self.0
            .binary_search_by(|(n, _)| (**n).cmp(name))
            .ok()
            .map(|i| self.0[i].1)
    }

    /// Every name, each once, in order.
    pub fn names(&self) -> impl Iterator<Item = &Arc<str>> {
        self.0.iter().map(|(name, _)| name)
    }
}

/// A node's `spec.taints`, held by its info so that Filter reads them without first reaching
/// the node's API object; one list shared by every node whose taints are the same (the cache
/// interns them through [`TaintLists`]: a pool's nodes carry the same few taints).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NodeTaints(Arc<[Taint]>);

impl NodeTaints {
    /// The taints of `node`, in a list of their own.
    pub fn read(node: &Node) -> Self {
        NodeTaints(Arc::from(taints::of_node(node)))
    }
}

impl std::ops::Deref for NodeTaints {
    type Target = [Taint];
    fn deref(&self) -> &[Taint] {
        &self.0
    }
}

/// The taint lists of the cache's nodes, each kept once. A list no node holds any more is
/// dropped at the next sweep, made when the lists kept have doubled since the last one (so a
/// sweep costs a constant share of the interning).
#[derive(Debug, Default)]
pub struct TaintLists {
    by_hash: HashMap<u64, Vec<NodeTaints>>,
    kept: usize,
    kept_after_sweep: usize,
}

impl TaintLists {
    /// The taints of `node`, shared with every node interned with the same ones.
    pub fn intern(&mut self, node: &Node) -> NodeTaints {
        let taints = taints::of_node(node);
        if taints.is_empty() {
            return NodeTaints::default();
        }
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        // Every field, the time too: nodes a controller tainted one by one (NoExecute
        // `unreachable` after an outage) hold lists that differ only in it, and a bucket of
        // thousands of them would be searched on every update of each of those nodes.
        for t in taints {
            let added = t.time_added.as_ref().map(|at| at.0);
            (&t.key, &t.value, &t.effect, added).hash(&mut hasher);
        }
        let bucket = self.by_hash.entry(hasher.finish()).or_default();
        if let Some(kept) = bucket.iter().find(|kept| *kept.0 == *taints) {
            return kept.clone();
        }
        let list = NodeTaints(Arc::from(taints));
        bucket.push(list.clone());
        self.kept += 1;
        if self.kept > 2 * self.kept_after_sweep + 64 {
            self.sweep();
        }
        list
    }

    /// Drops the lists only this holds.
    fn sweep(&mut self) {
        self.by_hash.retain(|_, bucket| {
            bucket.retain(|list| Arc::strong_count(&list.0) > 1);
            !bucket.is_empty()
        });
        self.kept = self.by_hash.values().map(Vec::len).sum();
        self.kept_after_sweep = self.kept;
    }

    /// How many lists are kept (swept or not).
    #[cfg(test)]
    pub fn kept(&self) -> usize {
        self.kept
    }
}

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
    pub images: NodeImages,
    /// `spec.unschedulable`: the node is cordoned.
    pub unschedulable: bool,
    /// `spec.taints`.
    pub taints: NodeTaints,
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

    /// Sets the node object, the images read from its `status.images` and its taints.
    pub fn set_node(&mut self, node: Arc<Node>) {
        let images = NodeImages::read(&node, |name| Arc::from(name));
        let taints = NodeTaints::read(&node);
        self.set_node_with(node, images, taints);
    }

    /// Sets the node object with its images and taints, read from it before (the cache reads
    /// them shared between nodes and keeps the object without its images).
    pub fn set_node_with(&mut self, node: Arc<Node>, images: NodeImages, taints: NodeTaints) {
        let status = node.status.as_ref();
        self.allocatable = Resource::from_list(status.and_then(|s| s.allocatable.as_ref()));
        self.images = images;
        self.taints = taints;
        self.unschedulable = taints::cordoned(&node);
        self.topology = NodeLabels::new(node.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS));
        self.node = Some(node);
    }

    /// Whether the node meets a pod's required node affinity and nodeSelector, by label id.
    pub fn meets(&self, required: &NodeMatcher) -> bool {
        required.matches(&self.name, |key| self.topology.value_of(key), self.labels())
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

    /// Lists equal in every field are one; lists that differ only in when a taint was added
    /// are two, each in a bucket of its own (not thousands searched in one).
    #[test]
    fn taint_lists_are_shared_when_equal_in_every_field() {
        let unreachable_at = |second: i64| {
            let mut node = NodeBuilder::new("n").build();
            node.spec.get_or_insert_with(Default::default).taints = Some(vec![Taint {
                key: "node.kubernetes.io/unreachable".into(),
                value: None,
                effect: "NoExecute".into(),
                time_added: Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                    jiff::Timestamp::from_second(second).expect("a time"),
                )),
            }]);
            node
        };
        let mut lists = TaintLists::default();
        let first = lists.intern(&unreachable_at(100));
        assert_eq!(lists.intern(&unreachable_at(100)).as_ptr(), first.as_ptr());
        let later = lists.intern(&unreachable_at(200));
        assert_ne!(later.as_ptr(), first.as_ptr());
        assert_eq!(lists.kept(), 2);
        assert!(lists.by_hash.values().all(|bucket| bucket.len() == 1));
    }

    /// As upstream's map of image states: every name of every image, a name listed twice
    /// with the size of its last listing.
    #[test]
    fn a_node_lists_each_image_name_once_with_its_last_size() {
        let node = NodeBuilder::new("n1")
            .image("b:v1", 10)
            .image("a:v1", 20)
            .image("b:v1", 30)
            .build();
        let images = NodeImages::read(&node, |name| Arc::from(name));
        assert_eq!(images.get("b:v1"), Some(30));
        assert_eq!(images.get("a:v1"), Some(20));
        assert_eq!(images.get("c:v1"), None);
        let names: Vec<&str> = images.names().map(|n| &**n).collect();
        assert_eq!(names, ["a:v1", "b:v1"]);
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
