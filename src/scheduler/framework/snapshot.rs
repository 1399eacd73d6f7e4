//! The view of the cluster one scheduling cycle works on. Taken from the cache at the start of
//! the cycle; cheap to take (it shares the node infos that did not change) and never changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::scheduler::framework::node_info::NodeInfo;

/// Node infos of every node the cache knows an object for, plus cluster-wide indexes.
#[derive(Clone, Debug, Default)]
pub struct Snapshot {
    nodes: Vec<Arc<NodeInfo>>,
    /// Node name → place in `nodes`; shared by the copies a preemption dry run makes.
    index: Arc<HashMap<String, usize>>,
    /// Indexes into `nodes` of the nodes with pods that have inter-pod affinity terms.
    have_pods_with_affinity: Vec<usize>,
    have_pods_with_required_anti_affinity: Vec<usize>,
    /// Namespace name → labels, for affinity terms with a namespaceSelector.
    pub namespace_labels: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// Image name → how many nodes have it, for ImageLocality's spread factor.
    pub image_node_counts: Arc<HashMap<String, usize>>,
}

impl Snapshot {
    /// Builds a snapshot from node infos; those without a node object are left out.
    pub fn new(
        nodes: Vec<Arc<NodeInfo>>,
        namespace_labels: Arc<HashMap<String, BTreeMap<String, String>>>,
        image_node_counts: Arc<HashMap<String, usize>>,
    ) -> Self {
        let nodes: Vec<_> = nodes.into_iter().filter(|n| n.node.is_some()).collect();
        let index = Arc::new(
            nodes
                .iter()
                .enumerate()
                .map(|(i, n)| (n.name.clone(), i))
                .collect(),
        );
        let have_pods_with_affinity = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.pods_with_affinity > 0)
            .map(|(i, _)| i)
            .collect();
        let have_pods_with_required_anti_affinity = nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.pods_with_required_anti_affinity > 0)
            .map(|(i, _)| i)
            .collect();
        Snapshot {
            nodes,
            index,
            have_pods_with_affinity,
            have_pods_with_required_anti_affinity,
            namespace_labels,
            image_node_counts,
        }
    }

    /// This snapshot with `changed` node infos in place of those of the same name (the list
    /// of nodes is the same: only what is on them changed), sharing the index and every other
    /// node. A node info not in the snapshot is ignored.
    pub fn with_changed(
        &self,
        changed: impl Iterator<Item = Arc<NodeInfo>>,
        namespace_labels: Arc<HashMap<String, BTreeMap<String, String>>>,
        image_node_counts: Arc<HashMap<String, usize>>,
    ) -> Snapshot {
        let mut copy = Snapshot {
            namespace_labels,
            image_node_counts,
            ..self.clone()
        };
        let mut affinity_changed = false;
        for info in changed {
            let Some(&i) = self.index.get(&info.name) else {
                continue;
            };
            if let Some(old) = copy.nodes.get(i) {
                affinity_changed |= (old.pods_with_affinity > 0) != (info.pods_with_affinity > 0)
                    || (old.pods_with_required_anti_affinity > 0)
                        != (info.pods_with_required_anti_affinity > 0);
            }
            if let Some(slot) = copy.nodes.get_mut(i) {
                *slot = info;
            }
        }
        if affinity_changed {
            let with = |f: fn(&NodeInfo) -> bool| -> Vec<usize> {
                copy.nodes
                    .iter()
                    .enumerate()
                    .filter(|(_, n)| f(n))
                    .map(|(i, _)| i)
                    .collect()
            };
            copy.have_pods_with_affinity = with(|n| n.pods_with_affinity > 0);
            copy.have_pods_with_required_anti_affinity =
                with(|n| n.pods_with_required_anti_affinity > 0);
        }
        copy
    }

    /// A snapshot of plain node infos, computing the image counts; for tests and benchmarks.
    pub fn from_node_infos(nodes: Vec<NodeInfo>) -> Self {
        let mut counts: HashMap<String, usize> = HashMap::new();
        for n in &nodes {
            for image in n.images.keys() {
                *counts.entry(image.clone()).or_default() += 1;
            }
        }
        Snapshot::new(
            nodes.into_iter().map(Arc::new).collect(),
            Arc::default(),
            Arc::new(counts),
        )
    }

    pub fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    pub fn len(&self) -> usize {
        self.nodes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.nodes.is_empty()
    }

    pub fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    pub fn have_pods_with_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_affinity.iter().map(|&i| &self.nodes[i])
    }

    pub fn have_pods_with_required_anti_affinity(&self) -> impl Iterator<Item = &Arc<NodeInfo>> {
        self.have_pods_with_required_anti_affinity
            .iter()
            .map(|&i| &self.nodes[i])
    }

    pub fn namespace_labels(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.namespace_labels.get(namespace)
    }

    /// This snapshot with `node` in place of the node of its name (a preemption dry run's
    /// view: the node without its victims). Unchanged when no such node is in it.
    pub fn with_node(&self, node: NodeInfo) -> Snapshot {
        let Some(&i) = self.index.get(&node.name) else {
            return self.clone();
        };
        let mark = |list: &[usize], has: bool| -> Vec<usize> {
            let mut list: Vec<usize> = list.iter().copied().filter(|&j| j != i).collect();
            if has {
                list.push(i);
                list.sort_unstable();
            }
            list
        };
        let mut copy = self.clone();
        copy.have_pods_with_affinity =
            mark(&self.have_pods_with_affinity, node.pods_with_affinity > 0);
        copy.have_pods_with_required_anti_affinity = mark(
            &self.have_pods_with_required_anti_affinity,
            node.pods_with_required_anti_affinity > 0,
        );
        copy.nodes[i] = Arc::new(node);
        copy
    }
}
