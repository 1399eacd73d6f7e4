//! Sums over every node of the cluster kept from one cycle to the next.
//!
//! PodTopologySpread counts a pod's matching pods per zone, InterPodAffinity sums its terms'
//! weights per topology pair: each walks every node of the snapshot, though between two cycles
//! usually one node changed (the last pod bound). A [`NodeSums`] keeps the sums a question (the
//! pod's constraints, as the plugin states them) got on an earlier snapshot and brings them up
//! to date from the nodes replaced since ([`Snapshot::changes_since`]): each such node's share
//! taken off as it was and added as it is. Asked on a snapshot not of the kept one's line (a
//! relist, too many changes) or with a new question, the sums are made afresh by walking.
//!
//! A sum kept this way equals the sum made afresh only if a node's share depends on nothing
//! but the node and the question; the property tests of each plugin hold it to that.

use std::sync::{Mutex, PoisonError};

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::snapshot::Snapshot;

/// How many questions are kept; the least recently asked goes first.
const KEPT: usize = 4;

/// Sums of type `S` kept per question `Q`.
pub struct NodeSums<Q, S> {
    kept: Mutex<Vec<Kept<Q, S>>>,
}

struct Kept<Q, S> {
    question: Q,
    /// The snapshot the sums are for.
    at: u64,
    sums: S,
}

impl<Q: PartialEq, S: Clone> NodeSums<Q, S> {
    pub fn new() -> Self {
        NodeSums {
            kept: Mutex::new(Vec::new()),
        }
    }

    /// The sums for `question` on `snapshot`: kept ones brought up to date with `share` (which
    /// adds a node's share `sign` times: 1 or -1), else `whole()`. Kept for the next ask unless
    /// the snapshot is a what-if view.
    pub fn sums(
        &self,
        snapshot: &Snapshot,
        question: Q,
        whole: impl FnOnce() -> S,
        share: impl Fn(&mut S, &NodeInfo, i64),
    ) -> S {
        let kept = {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.iter()
                .position(|k| k.question == question)
                .map(|i| kept.remove(i))
        };
        // A what-if view brings a copy up to date and puts the kept sums back as they were;
        // any other snapshot takes them over (no copy: the sums are shared only with the cycle
        // states still reading them).
        let view = snapshot.is_scratch() || snapshot.id() == 0;
        let (brought, put_back) = match kept {
            Some(k) => match snapshot.changes_since(k.at) {
                Some(changes) => {
                    let (mut sums, put_back) = if view {
                        (k.sums.clone(), Some(k))
                    } else {
                        (k.sums, None)
                    };
                    for (then, now) in &changes {
                        share(&mut sums, then, -1);
                        share(&mut sums, now, 1);
                    }
                    (Some(sums), put_back)
                }
                None => (None, view.then_some(k)),
            },
            None => (None, None),
        };
        let sums = brought.unwrap_or_else(whole);
        let keep = if view {
            put_back
        } else {
            Some(Kept {
                question,
                at: snapshot.id(),
                sums: sums.clone(),
            })
        };
        if let Some(k) = keep {
            let mut kept = self.kept.lock().unwrap_or_else(PoisonError::into_inner);
            kept.insert(0, k);
            kept.truncate(KEPT);
        }
        sums
    }
}

impl<Q: PartialEq, S: Clone> Default for NodeSums<Q, S> {
    fn default() -> Self {
        NodeSums::new()
    }
}

impl<Q, S> std::fmt::Debug for NodeSums<Q, S> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let kept = self.kept.lock().map_or(0, |k| k.len());
        write!(f, "NodeSums({kept} kept)")
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use crate::scheduler::framework::pod_info::PodInfo;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn info(name: &str, pods: usize) -> NodeInfo {
        let mut info = NodeInfo::new(name);
        info.set_node(Arc::new(NodeBuilder::new(name).build()));
        for i in 0..pods {
            let pod = PodBuilder::new(&format!("{name}-{i}"))
                .node_name(name)
                .build();
            info.add_pod(Arc::new(PodInfo::new(Arc::new(pod))));
        }
        info
    }

    fn count(snapshot: &Snapshot) -> i64 {
        snapshot.nodes().iter().map(|n| n.pods.len() as i64).sum()
    }

    /// Counts pods; `walks` counts the walks made afresh.
    fn ask(sums: &NodeSums<&str, i64>, snapshot: &Snapshot, walks: &mut usize) -> i64 {
        sums.sums(
            snapshot,
            "pods",
            || {
                *walks += 1;
                count(snapshot)
            },
            |n, node, sign| *n += sign * node.pods.len() as i64,
        )
    }

    #[test]
    fn kept_sums_follow_the_nodes_replaced_and_stay_off_what_if_views() {
        let base = Snapshot::from_node_infos((0..4).map(|i| info(&format!("n{i}"), i)).collect());
        let sums = NodeSums::new();
        let mut walks = 0;
        assert_eq!(ask(&sums, &base, &mut walks), 6);
        // Two steps, one node twice: taken off as it first was, added as it is.
        let one = base.with_changed(
            [Arc::new(info("n1", 5))].into_iter(),
            Arc::default(),
            Arc::default(),
        );
        let two = one.with_changed(
            [Arc::new(info("n1", 2)), Arc::new(info("n3", 0))].into_iter(),
            Arc::default(),
            Arc::default(),
        );
        assert_eq!(ask(&sums, &two, &mut walks), count(&two));
        assert_eq!((count(&two), walks), (4, 1));
        // A what-if view is answered from the kept sums, which stay where they were.
        let view = two.with_node(info("n0", 3));
        assert_eq!(ask(&sums, &view, &mut walks), 7);
        let three = two.with_changed(
            [Arc::new(info("n2", 1))].into_iter(),
            Arc::default(),
            Arc::default(),
        );
        assert_eq!((ask(&sums, &three, &mut walks), walks), (3, 1));
        // Another line (a snapshot built afresh) walks again.
        let fresh = Snapshot::from_node_infos(vec![info("n0", 1)]);
        assert_eq!((ask(&sums, &fresh, &mut walks), walks), (1, 2));
    }

    #[test]
    fn a_long_line_forgets_its_oldest_steps() {
        let mut snapshot = Snapshot::from_node_infos(vec![info("n0", 0), info("n1", 0)]);
        let first = snapshot.id();
        for i in 0..70 {
            snapshot = snapshot.with_changed(
                [Arc::new(info("n0", i % 3))].into_iter(),
                Arc::default(),
                Arc::default(),
            );
        }
        assert!(snapshot.changes_since(first).is_none());
        assert_eq!(
            snapshot.changes_since(snapshot.id()).map(|c| c.len()),
            Some(0)
        );
    }
}
