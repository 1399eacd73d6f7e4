//! Node label keys and values interned to small numbers, so that the plugins summing pods per
//! topology domain (PodTopologySpread, InterPodAffinity) key their per-cycle maps by number:
//! no string is compared, hashed or copied per node in a cycle.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock};

use crate::scheduler::framework::interner::{Interned, Interner};

/// A label key or value, interned.
pub type Label = Interned<String>;

static LABELS: LazyLock<Interner<String>> = LazyLock::new(Interner::new);

/// The interned label for `s`.
pub fn label(s: &str) -> Arc<Label> {
    LABELS
        .find(s)
        .unwrap_or_else(|| LABELS.intern(s.to_string()))
}

/// The node labels' interner, for matching a pod's node requirements by id
/// ([`crate::k8s::node_selector::IdMatcher`]).
pub struct NodeLabelIds;

impl crate::k8s::node_selector::LabelIds for NodeLabelIds {
    type Held = Arc<Label>;

    /// Interns `s` when nothing holds it yet: the matcher's ids then stay right for a node
    /// whose labels are interned after it was built.
    fn find(&self, s: &str) -> Option<(u32, Arc<Label>)> {
        let l = label(s);
        Some((l.id(), l))
    }
}

/// A node's requirements matcher by label id (see [`NodeLabelIds`]).
pub type NodeMatcher = crate::k8s::node_selector::IdMatcher<Arc<Label>>;

/// A node's labels, interned: (key id, value id) pairs sorted by key id, kept apart from the
/// labels themselves so that a lookup reads one small array and follows no pointer.
#[derive(Clone, Debug, Default)]
pub struct NodeLabels {
    ids: Vec<(u32, u32)>,
    /// Holds the labels, so that their ids stay theirs; never read.
    #[expect(dead_code, reason = "held only to keep the ids in `ids` alive")]
    held: Vec<Arc<Label>>,
}

impl NodeLabels {
    pub fn new(labels: &BTreeMap<String, String>) -> Self {
        let mut held = Vec::with_capacity(labels.len() * 2);
        let mut ids = Vec::with_capacity(labels.len());
        for (k, v) in labels {
            let (k, v) = (label(k), label(v));
            ids.push((k.id(), v.id()));
            held.extend([k, v]);
        }
        ids.sort_unstable();
        NodeLabels { ids, held }
    }

    /// The id of the node's value for `key`; `None` when the node lacks the key.
    pub fn value(&self, key: &Label) -> Option<u32> {
        self.value_of(key.id())
    }

    /// The id of the node's value for the key with id `key`.
    pub fn value_of(&self, key: u32) -> Option<u32> {
        self.ids
            .binary_search_by_key(&key, |(k, _)| *k)
            .ok()
            .map(|i| self.ids[i].1)
    }

    pub fn has(&self, key: &Label) -> bool {
        self.value(key).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_node_answers_its_values_by_key() {
        let labels = BTreeMap::from([
            ("topology.kubernetes.io/zone".to_string(), "z1".to_string()),
            ("kubernetes.io/hostname".to_string(), "n1".to_string()),
        ]);
        let node = NodeLabels::new(&labels);
        let zone = label("topology.kubernetes.io/zone");
        assert_eq!(node.value(&zone), Some(label("z1").id()));
        assert_eq!(
            node.value(&label("kubernetes.io/hostname")),
            Some(label("n1").id())
        );
        assert!(!node.has(&label("topology.kubernetes.io/region")));
    }
}
