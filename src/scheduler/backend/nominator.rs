//! The pods nominated to nodes (kube-scheduler's nominator): pods that preemption made room
//! for and that wait for the victims to go. Filtering counts them on their node for pods of
//! lower or equal priority, so the room is not taken by someone else meanwhile.
//!
//! A nomination comes from this scheduler's PostFilter at once (before the API has the pod's
//! `status.nominatedNodeName`), or from the pod watch (another scheduler's, or this one's
//! before a restart). It ends when the pod is bound, assumed, deleted, nominated elsewhere, or
//! its `nominatedNodeName` is cleared.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::scheduler::framework::NominatedPods;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::runtime::nominated_node;

#[derive(Default)]
struct Nominations {
    by_node: HashMap<String, Vec<Arc<PodInfo>>>,
    /// Per pod UID: its node, and whether the API has said so yet (a nomination made here
    /// survives a watch event from before its status write).
    node_of: HashMap<String, (String, bool)>,
}

impl Nominations {
    fn remove(&mut self, uid: &str) {
        if let Some((node, _)) = self.node_of.remove(uid)
            && let Some(pods) = self.by_node.get_mut(&node)
        {
            pods.retain(|p| p.uid() != uid);
            if pods.is_empty() {
                self.by_node.remove(&node);
            }
        }
    }

    fn insert(&mut self, pod: Arc<PodInfo>, node: &str, seen: bool) {
        self.remove(pod.uid());
        self.node_of
            .insert(pod.uid().to_string(), (node.to_string(), seen));
        self.by_node.entry(node.to_string()).or_default().push(pod);
    }
}

/// The nominations, shared by the scheduling loop and the pod watch.
#[derive(Default)]
pub struct Nominator {
    inner: RwLock<Nominations>,
}

impl Nominator {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Nominations> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    fn read(&self) -> std::sync::RwLockReadGuard<'_, Nominations> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    /// Nominates `pod` to `node` (PostFilter's answer), replacing any nomination it had.
    pub fn nominate(&self, pod: Arc<PodInfo>, node: &str) {
        self.write().insert(pod, node, false);
    }

    /// Ends the pod's nomination, if it has one: the pod it held room for.
    pub fn forget(&self, uid: &str) -> Option<Arc<PodInfo>> {
        if !self.read().node_of.contains_key(uid) {
            return None;
        }
        let mut n = self.write();
        let (node, _) = n.node_of.get(uid)?.clone();
        let pod = n
            .by_node
            .get(&node)
            .and_then(|pods| pods.iter().find(|p| p.uid() == uid).cloned());
        n.remove(uid);
        pod
    }

    /// A pending pod from the watch: its `nominatedNodeName` is its nomination. An empty one
    /// ends a nomination the API had, not one made here that the API has not seen yet.
    /// Returns the pod whose room was given up, when a nomination ended or moved.
    pub fn observe(&self, pod: &Arc<PodInfo>) -> Option<Arc<PodInfo>> {
        let before = self.read().node_of.get(pod.uid()).cloned();
        match nominated_node(&pod.pod) {
            Some(node) => {
                self.write().insert(pod.clone(), node, true);
                before.filter(|(n, _)| n != node).map(|_| pod.clone())
            }
            None if before.as_ref().is_some_and(|(_, seen)| *seen) => self.forget(pod.uid()),
            None => None,
        }
    }

    /// Keeps only the nominations of pods in `uids` (after a re-list).
    pub fn retain(&self, uids: &std::collections::HashSet<String>) {
        let gone: Vec<String> = self
            .read()
            .node_of
            .keys()
            .filter(|u| !uids.contains(*u))
            .cloned()
            .collect();
        let mut n = self.write();
        for uid in gone {
            n.remove(&uid);
        }
    }
}

impl NominatedPods for Nominator {
    fn any(&self) -> bool {
        !self.read().node_of.is_empty()
    }

    fn for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.read().by_node.get(node).cloned().unwrap_or_default()
    }

    fn node_of(&self, uid: &str) -> Option<String> {
        self.read().node_of.get(uid).map(|(n, _)| n.clone())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::PodBuilder;

    fn nominated(name: &str, node: Option<&str>) -> Arc<PodInfo> {
        let b = PodBuilder::new(name);
        let b = match node {
            Some(n) => b.with(|p| {
                p.status.get_or_insert_default().nominated_node_name = Some(n.into());
            }),
            None => b,
        };
        Arc::new(b.info())
    }

    #[test]
    fn a_nomination_made_here_outlives_a_watch_event_from_before_it() {
        let n = Nominator::default();
        n.nominate(nominated("p", None), "n1");
        n.observe(&nominated("p", None));
        assert_eq!(n.node_of("uid-p").as_deref(), Some("n1"));
        n.observe(&nominated("p", Some("n1")));
        // Seen by the API: clearing it there ends it.
        n.observe(&nominated("p", None));
        assert_eq!(n.node_of("uid-p"), None);
        assert!(!n.any());
    }

    #[test]
    fn a_pod_is_nominated_to_one_node_at_a_time() {
        let n = Nominator::default();
        n.observe(&nominated("p", Some("n1")));
        n.nominate(nominated("p", None), "n2");
        assert!(n.for_node("n1").is_empty());
        assert_eq!(n.for_node("n2").len(), 1);
        n.forget("uid-p");
        assert!(n.for_node("n2").is_empty() && !n.any());
    }
}
