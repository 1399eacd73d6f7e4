//! The order snapshots list nodes in, as kube-scheduler's nodeTree: nodes grouped by zone
//! (region and zone labels), zones in the order they first appeared, and the list taking one
//! node of each zone in turn. A scheduling cycle that filters only a share of a large cluster
//! thus samples every zone, not the zone whose nodes registered first.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Node;

/// Node names by zone.
#[derive(Clone, Debug, Default)]
pub struct NodeTree {
    zones: Vec<String>,
    tree: HashMap<String, Vec<String>>,
    /// The zone each node was filed under.
    zone_of: HashMap<String, String>,
}

/// A node's zone key, as upstream's GetZoneKey: `region:\0:zone` from the deprecated
/// failure-domain labels where a node has them, else from the topology ones (upstream reads the
/// beta label first); empty when neither is set.
pub fn zone_key(node: &Node) -> String {
    let labels = node.metadata.labels.as_ref();
    let label = |ga: &str, beta: &str| {
        labels
            .and_then(|l| l.get(beta).or_else(|| l.get(ga)))
            .cloned()
            .unwrap_or_default()
    };
    let zone = label(
        "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/zone",
    );
    let region = label(
        "topology.kubernetes.io/region",
        "failure-domain.beta.kubernetes.io/region",
    );
    if region.is_empty() && zone.is_empty() {
        return String::new();
    }
    format!("{region}:\0:{zone}")
}

impl NodeTree {
    /// Files `name` under `zone`, moving it when its zone changed; whether the list changed.
    pub fn upsert(&mut self, name: &str, zone: String) -> bool {
        match self.zone_of.get(name) {
            Some(current) if *current == zone => return false,
            Some(_) => {
                self.remove(name);
            }
            None => {}
        }
        let nodes = self.tree.entry(zone.clone()).or_insert_with(|| {
            self.zones.push(zone.clone());
            Vec::new()
        });
        nodes.push(name.to_string());
        self.zone_of.insert(name.to_string(), zone);
        true
    }

    /// Forgets `name`; a zone left empty is forgotten too. Whether the list changed.
    pub fn remove(&mut self, name: &str) -> bool {
        let Some(zone) = self.zone_of.remove(name) else {
            return false;
        };
        if let Some(nodes) = self.tree.get_mut(&zone) {
            nodes.retain(|n| n != name);
            if nodes.is_empty() {
                self.tree.remove(&zone);
                self.zones.retain(|z| *z != zone);
            }
        }
        true
    }

    /// Every node, one of each zone in turn: the first node of every zone, then the second…
    pub fn list(&self) -> Vec<&str> {
        let mut list = Vec::with_capacity(self.zone_of.len());
        let longest = self.tree.values().map(Vec::len).max().unwrap_or(0);
        for i in 0..longest {
            for zone in &self.zones {
                if let Some(name) = self.tree.get(zone).and_then(|nodes| nodes.get(i)) {
                    list.push(name.as_str());
                }
            }
        }
        list
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(labels: &[(&str, &str)]) -> Node {
        let mut n = Node::default();
        n.metadata.labels = Some(
            labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        );
        n
    }

    #[test]
    fn zone_keys_as_kube_scheduler() {
        assert_eq!(zone_key(&node(&[])), "");
        assert_eq!(
            zone_key(&node(&[
                ("topology.kubernetes.io/region", "r"),
                ("topology.kubernetes.io/zone", "z")
            ])),
            "r:\0:z"
        );
        assert_eq!(
            zone_key(&node(&[("failure-domain.beta.kubernetes.io/zone", "old")])),
            ":\0:old",
            "the deprecated label when the GA one is absent"
        );
        assert_eq!(
            zone_key(&node(&[
                ("topology.kubernetes.io/zone", "new"),
                ("failure-domain.beta.kubernetes.io/zone", "old")
            ])),
            ":\0:old",
            "the deprecated label first, as upstream's GetZoneKey"
        );
    }

    #[test]
    fn lists_one_node_of_each_zone_in_turn() {
        let mut t = NodeTree::default();
        for (name, zone) in [
            ("a1", "a"),
            ("a2", "a"),
            ("a3", "a"),
            ("b1", "b"),
            ("c1", "c"),
            ("c2", "c"),
        ] {
            t.upsert(name, zone.into());
        }
        assert_eq!(t.list(), ["a1", "b1", "c1", "a2", "c2", "a3"]);
        t.remove("b1");
        assert_eq!(
            t.list(),
            ["a1", "c1", "a2", "c2", "a3"],
            "an empty zone goes"
        );
        t.upsert("a1", "c".into());
        assert_eq!(
            t.list(),
            ["a2", "c1", "a3", "c2", "a1"],
            "a node whose zone changed moves to the end of its new zone"
        );
        t.upsert("a2", "a".into());
        assert_eq!(
            t.list(),
            ["a2", "c1", "a3", "c2", "a1"],
            "same zone: no move"
        );
    }
}
