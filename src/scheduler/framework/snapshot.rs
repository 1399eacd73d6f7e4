//! The view of the cluster one scheduling cycle works on. Taken from the cache at the start of
//! the cycle; cheap to take (it shares the node infos that did not change) and never changes.
//!
//! A snapshot made from another by replacing nodes remembers which (the node infos it
//! replaced, for the last few snapshots of its line), so that a sum over every node kept from an
//! earlier cycle ([`super::node_sums::NodeSums`]) is brought up to date from the nodes that
//! changed instead of walking the cluster again.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use crate::scheduler::framework::node_info::{ImageCounts, NodeInfo};

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
    pub image_node_counts: Arc<ImageCounts>,
    /// Unique among this process's snapshots (0 for an empty default one): what [`History`]
    /// and kept sums name a snapshot by.
    id: u64,
    /// The nodes replaced on the way from earlier snapshots of this line to this one.
    history: Arc<History>,
    /// A what-if view (a node with its pods taken off or laid over): sums are brought up to
    /// date for it but not kept, so that the line's next snapshot finds them where they were.
    scratch: bool,
}

/// Ids of snapshots; 0 is never handed out.
static SNAPSHOT_IDS: AtomicU64 = AtomicU64::new(1);

fn next_id() -> u64 {
    SNAPSHOT_IDS.fetch_add(1, Ordering::Relaxed)
}

/// One snapshot made from another: the other's id and the infos (then) of the nodes replaced,
/// by their place in the list of nodes.
#[derive(Debug)]
struct Step {
    from: u64,
    replaced: Vec<(usize, Arc<NodeInfo>)>,
}

/// The last steps of a snapshot's line, oldest first; the last step made this snapshot.
/// Bounded, so that a line holds few node infos nobody else does.
#[derive(Debug, Default)]
struct History {
    steps: VecDeque<Arc<Step>>,
    /// Node infos held over every step.
    held: usize,
}

/// At most this many steps are remembered.
const HISTORY_STEPS: usize = 64;
/// At most this many replaced node infos are held; a step replacing more clears the history
/// (a sum walks every node again, cheaper then than taking off and adding so many).
const HISTORY_NODES: usize = 512;

impl History {
    /// This history with `step` after it, the oldest steps dropped past the bounds.
    fn then(&self, step: Step) -> History {
        if step.replaced.len() > HISTORY_NODES {
            return History::default();
        }
        let mut steps = self.steps.clone();
        let mut held = self.held + step.replaced.len();
        steps.push_back(Arc::new(step));
        while steps.len() > HISTORY_STEPS || held > HISTORY_NODES {
            match steps.pop_front() {
                Some(dropped) => held -= dropped.replaced.len(),
                None => break,
            }
        }
        History { steps, held }
    }
}

impl Snapshot {
    /// Builds a snapshot from node infos; those without a node object are left out.
    pub fn new(
        nodes: Vec<Arc<NodeInfo>>,
        namespace_labels: Arc<HashMap<String, BTreeMap<String, String>>>,
        image_node_counts: Arc<ImageCounts>,
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
            id: next_id(),
            history: Arc::default(),
            scratch: false,
        }
    }

    /// This snapshot with `changed` node infos in place of those of the same name (the list
    /// of nodes is the same: only what is on them changed), sharing the index and every other
    /// node. A node info not in the snapshot is ignored.
    pub fn with_changed(
        &self,
        changed: impl Iterator<Item = Arc<NodeInfo>>,
        namespace_labels: Arc<HashMap<String, BTreeMap<String, String>>>,
        image_node_counts: Arc<ImageCounts>,
    ) -> Snapshot {
        let mut copy = Snapshot {
            namespace_labels,
            image_node_counts,
            ..self.clone()
        };
        let mut affinity_changed = false;
        let mut replaced = Vec::new();
        for info in changed {
            let Some(&i) = self.index.get(&info.name) else {
                continue;
            };
            let Some(slot) = copy.nodes.get_mut(i) else {
                continue;
            };
            if Arc::ptr_eq(slot, &info) {
                continue;
            }
            affinity_changed |= (slot.pods_with_affinity > 0) != (info.pods_with_affinity > 0)
                || (slot.pods_with_required_anti_affinity > 0)
                    != (info.pods_with_required_anti_affinity > 0);
            replaced.push((i, std::mem::replace(slot, info)));
        }
        copy.id = next_id();
        copy.scratch = self.scratch;
        copy.history = Arc::new(self.history.then(Step {
            from: self.id,
            replaced,
        }));
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
        let mut counts = ImageCounts::new();
        for n in &nodes {
            for image in n.images.names() {
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
        let then = std::mem::replace(&mut copy.nodes[i], Arc::new(node));
        copy.id = next_id();
        copy.scratch = true;
        copy.history = Arc::new(self.history.then(Step {
            from: self.id,
            replaced: vec![(i, then)],
        }));
        copy
    }

    /// Unique among this process's snapshots; 0 for an empty default one.
    pub fn id(&self) -> u64 {
        self.id
    }

    /// This snapshot as a what-if view: sums are answered for it but not kept.
    pub fn into_view(mut self) -> Snapshot {
        self.scratch = true;
        self
    }

    /// Whether this is a what-if view ([`Snapshot::with_node`], [`Snapshot::into_view`], or
    /// made from one).
    pub fn is_scratch(&self) -> bool {
        self.scratch
    }

    /// The nodes replaced since the snapshot `id` of this one's line, each as its info then and
    /// now (a node replaced twice once, with its first info); empty for this snapshot itself.
    /// `None` when `id` is not among the last snapshots of this line.
    pub fn changes_since(&self, id: u64) -> Option<Vec<(Arc<NodeInfo>, Arc<NodeInfo>)>> {
        if id == self.id {
            return Some(Vec::new());
        }
        let start = self.history.steps.iter().position(|s| s.from == id)?;
        let mut seen = foldhash::HashSet::default();
        let mut then: Vec<(usize, Arc<NodeInfo>)> = Vec::new();
        for step in self.history.steps.iter().skip(start) {
            for (i, info) in &step.replaced {
                if seen.insert(*i) {
                    then.push((*i, info.clone()));
                }
            }
        }
        Some(
            then.into_iter()
                .filter_map(|(i, info)| Some((info, self.nodes.get(i)?.clone())))
                .collect(),
        )
    }
}
