//! The scheduler cache: node infos built from watches, and pods assumed on a node between
//! Reserve and the watch confirming their bind, as kube-scheduler's cache keeps them.
//!
//! One writer (the watch task and the scheduling loop, through a mutex held only for short,
//! non-async sections); readers take a [`Snapshot`], which shares every node info that did not
//! change since the last snapshot (copy-on-write through `Arc::make_mut`).

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::scheduler::backend::node_tree::{NodeTree, zone_key};
use crate::scheduler::framework::node_info::{
    ImageCounts, NodeImages, NodeInfo, NodeTaints, TaintLists,
};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;

#[derive(Clone, Debug)]
struct PodState {
    node: String,
    /// Placed by this scheduler and not yet confirmed by the watch.
    assumed: bool,
}

/// Nodes, the pods on them, and namespace labels.
#[derive(Default)]
pub struct Cache {
    nodes: HashMap<String, Arc<NodeInfo>>,
    /// The nodes with a Node object, by zone: the order snapshots list nodes in.
    tree: NodeTree,
    pods: HashMap<String, PodState>,
    /// How many of `pods` are assumed (kept as pods come and go, for the metrics).
    assumed: usize,
    namespaces: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// On how many nodes (with a Node object) each image is: kept as nodes come, change and
    /// go, never recounted over every node.
    image_counts: Arc<ImageCounts>,
    /// Every node's taints, each list kept once for the nodes that share it.
    taint_lists: TaintLists,
    generation: u64,
    snapshot: Option<(u64, Arc<Snapshot>)>,
    /// The nodes whose info changed since the last snapshot, while the list of nodes did not:
    /// the next snapshot replaces only those in the last one (a bind changes one node; a
    /// snapshot of 5,000 rebuilt each cycle was most of a cycle's work).
    dirty: HashSet<String>,
    /// The list of nodes (which nodes, in which order) changed since the last snapshot: the
    /// next one is built afresh.
    relisted: bool,
    /// Told of each pod found bound that this scheduler did not bind, once set.
    bind_observer: Option<BindObserver>,
}

/// Told of a pod found bound that this scheduler did not bind: a bind an earlier tether made
/// just before a restart or a handover (its answer, or its watch event, came too late for that
/// tether to count it), or one made by anyone else.
pub type BindObserver = Arc<dyn Fn(Arc<Pod>) + Send + Sync>;

/// Whether a pod holds resources on its node: bound and not finished.
pub fn occupies_node(pod: &Pod) -> bool {
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    pods::node_name(pod).is_some() && !matches!(phase, Some("Succeeded" | "Failed"))
}

impl Cache {
    pub fn new() -> Self {
        Self::default()
    }

    /// The pods bound now (the watch confirmed them); from this moment on, each pod found bound
    /// that this scheduler did not bind goes to `observer` (see [`Cache::bind_observer`]). One
    /// step under the cache's lock, so that every such bind is either in the list or told to
    /// `observer` (some may be both).
    pub fn bound_pods_then_observe(&mut self, observer: BindObserver) -> Vec<Arc<Pod>> {
        self.bind_observer = Some(observer);
        self.bound_pods()
    }

    /// Whom to tell of a pod found bound that this scheduler did not bind, once set. Asked under
    /// the lock the pod was found bound under, told after it is released.
    pub fn bind_observer(&self) -> Option<BindObserver> {
        self.bind_observer.clone()
    }

    fn touch(&mut self) {
        self.generation += 1;
    }

    fn node_mut(&mut self, name: &str) -> &mut NodeInfo {
        if !self.nodes.contains_key(name) {
            self.nodes
                .insert(name.to_string(), Arc::new(NodeInfo::new(name)));
        }
        self.dirty.insert(name.to_string());
        let entry = self.nodes.get_mut(name).expect("inserted above");
        let info = Arc::make_mut(entry);
        info.generation += 1;
        info
    }

    /// Adds or updates a node from the watch; returns the node as kept: without its
    /// `status.images`, which its info holds with each name shared between the nodes listing it
    /// (about half a node object's size on a kubelet reporting 50 images).
    pub fn upsert_node(&mut self, node: Arc<Node>) -> Arc<Node> {
        let name = node.metadata.name.clone().unwrap_or_default();
        let counts = &self.image_counts;
        let images = NodeImages::read(&node, |image| {
            counts
                .get_key_value(image)
                .map_or_else(|| Arc::from(image), |(shared, _)| shared.clone())
        });
        let taints = self.taint_lists.intern(&node);
        let node = without_images(node);
        let images_changed = self
            .nodes
            .get(&name)
            .is_none_or(|old| old.node.is_none() || old.images != images);
        self.relisted |= self.tree.upsert(&name, zone_key(&node));
        if images_changed {
            self.count_images(&name, false);
        }
        self.node_mut(&name)
            .set_node_with(node.clone(), images, taints);
        if images_changed {
            self.count_images(&name, true);
        }
        self.touch();
        node
    }

    /// Counts the images of node `name` (while it has a Node object) in, or out of, the
    /// image counts.
    fn count_images(&mut self, name: &str, add: bool) {
        let Some(info) = self.nodes.get(name).filter(|n| n.node.is_some()) else {
            return;
        };
        let counts = Arc::make_mut(&mut self.image_counts);
        for image in info.images.names() {
            if add {
                *counts.entry(image.clone()).or_default() += 1;
            } else if let Some(n) = counts.get_mut(image) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    counts.remove(image);
                }
            }
        }
    }

    /// Removes a node. Its node info stays while pods are still recorded on it (without the
    /// node object it is left out of snapshots), as kube-scheduler keeps it.
    pub fn remove_node(&mut self, name: &str) {
        self.relisted |= self.tree.remove(name);
        self.count_images(name, false);
        let Some(entry) = self.nodes.get_mut(name) else {
            return;
        };
        if entry.pods.is_empty() {
            self.nodes.remove(name);
        } else {
            let info = Arc::make_mut(entry);
            info.node = None;
            info.unschedulable = false;
            info.taints = NodeTaints::default();
            info.generation += 1;
        }
        self.dirty.insert(name.to_string());
        self.touch();
    }

    /// Records a pod the watch reports as bound (or updated). Confirms it when it was assumed
    /// on the same node; moves it when it is bound elsewhere; removes it once it finished.
    pub fn upsert_pod(&mut self, pod: Arc<Pod>) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if !occupies_node(&pod) {
            self.remove_pod(&uid);
            return;
        }
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        self.remove_pod(&uid);
        let info = Arc::new(PodInfo::new(pod));
        self.node_mut(&node).add_pod(info);
        self.pods.insert(
            uid,
            PodState {
                node,
                assumed: false,
            },
        );
        self.touch();
    }

    /// Removes a pod (deleted, finished, or forgotten).
    pub fn remove_pod(&mut self, uid: &str) {
        let Some(state) = self.pods.remove(uid) else {
            return;
        };
        if state.assumed {
            self.assumed = self.assumed.saturating_sub(1);
        }
        if let Some(entry) = self.nodes.get_mut(&state.node) {
            let info = Arc::make_mut(entry);
            info.remove_pod(uid);
            info.generation += 1;
            if info.node.is_none() && info.pods.is_empty() {
                self.nodes.remove(&state.node);
            }
            self.dirty.insert(state.node.clone());
        }
        self.touch();
    }

    /// Assumes `pod` runs on `node` from now on, before the bind is confirmed.
    pub fn assume_pod(&mut self, pod: &PodInfo, node: &str) {
        let info = Arc::new(pod.on_node(node));
        let uid = pod.uid().to_string();
        self.remove_pod(&uid);
        self.node_mut(node).add_pod(info);
        self.pods.insert(
            uid,
            PodState {
                node: node.to_string(),
                assumed: true,
            },
        );
        self.assumed += 1;
        self.touch();
    }

    /// Undoes [`Cache::assume_pod`] after a failed bind. A pod the watch already confirmed stays.
    pub fn forget_pod(&mut self, uid: &str) {
        if self.pods.get(uid).is_some_and(|s| s.assumed) {
            self.remove_pod(uid);
        }
    }

    /// The pods the watch confirmed bound (not the assumed ones).
    pub fn bound_pods(&self) -> Vec<Arc<Pod>> {
        self.nodes
            .values()
            .flat_map(|n| n.pods.iter())
            .filter(|p| !self.is_assumed(p.uid()))
            .map(|p| p.pod.clone())
            .collect()
    }

    pub fn is_assumed(&self, uid: &str) -> bool {
        self.pods.get(uid).is_some_and(|s| s.assumed)
    }

    /// The node a pod is recorded on (bound or assumed).
    pub fn pod_node(&self, uid: &str) -> Option<&str> {
        self.pods.get(uid).map(|s| s.node.as_str())
    }

    /// The Node object of `name`, while the node exists.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.nodes.get(name)?.node.clone()
    }

    /// The pod object the cache holds (bound or assumed).
    pub fn pod(&self, uid: &str) -> Option<Arc<Pod>> {
        let state = self.pods.get(uid)?;
        self.nodes
            .get(&state.node)?
            .pods
            .iter()
            .find(|p| p.uid() == uid)
            .map(|p| p.pod.clone())
    }

    /// Keeps only the pods whose UID is in `uids` (after a relist), assumed ones included;
    /// returns those that went.
    pub fn retain_pods_by_uid(
        &mut self,
        uids: &std::collections::HashSet<String>,
    ) -> Vec<Arc<Pod>> {
        // Assumed pods too: a pod is listed from the moment it exists, so one missing from the
        // list was deleted while the watch was down, whatever tether assumed of it.
        let gone: Vec<String> = self
            .pods
            .keys()
            .filter(|u| !uids.contains(*u))
            .cloned()
            .collect();
        let mut removed = Vec::with_capacity(gone.len());
        for uid in &gone {
            removed.extend(self.pod(uid));
            self.remove_pod(uid);
        }
        removed
    }

    /// Keeps only the nodes whose object UID is in `uids` (after a relist); returns those that
    /// went.
    pub fn retain_nodes_by_uid(
        &mut self,
        uids: &std::collections::HashSet<String>,
    ) -> Vec<Arc<Node>> {
        let gone: Vec<(String, Arc<Node>)> = self
            .nodes
            .values()
            .filter_map(|n| {
                n.node
                    .as_ref()
                    .filter(|node| !node.metadata.uid.as_ref().is_some_and(|u| uids.contains(u)))
                    .map(|node| (n.name.clone(), node.clone()))
            })
            .collect();
        gone.into_iter()
            .map(|(name, node)| {
                self.remove_node(&name);
                node
            })
            .collect()
    }

    pub fn set_namespace(&mut self, name: &str, labels: BTreeMap<String, String>) {
        if self.namespaces.get(name) != Some(&labels) {
            Arc::make_mut(&mut self.namespaces).insert(name.to_string(), labels);
            self.touch();
        }
    }

    /// Replaces every namespace's labels (after a relist).
    pub fn reset_namespaces(&mut self, labels: BTreeMap<String, BTreeMap<String, String>>) {
        if labels.len() != self.namespaces.len()
            || labels
                .iter()
                .any(|(k, v)| self.namespaces.get(k) != Some(v))
        {
            self.namespaces = Arc::new(labels.into_iter().collect());
            self.touch();
        }
    }

    pub fn remove_namespace(&mut self, name: &str) {
        if self.namespaces.contains_key(name) {
            Arc::make_mut(&mut self.namespaces).remove(name);
            self.touch();
        }
    }

    pub fn node_count(&self) -> usize {
        self.nodes.values().filter(|n| n.node.is_some()).count()
    }

    pub fn pod_count(&self) -> usize {
        self.pods.len()
    }

    /// The pods assumed and not yet confirmed by the watch.
    pub fn assumed_count(&self) -> usize {
        self.assumed
    }

    /// The current snapshot: the last one when nothing changed since; the last one with the
    /// changed nodes replaced when the list of nodes stayed; else built afresh.
    pub fn snapshot(&mut self) -> Arc<Snapshot> {
        if let Some((generation, snapshot)) = &self.snapshot
            && *generation == self.generation
        {
            return snapshot.clone();
        }
        let dirty = std::mem::take(&mut self.dirty);
        let snapshot = match &self.snapshot {
            Some((_, last)) if !std::mem::take(&mut self.relisted) => {
                let changed = dirty
                    .iter()
                    .filter_map(|name| self.nodes.get(name).filter(|n| n.node.is_some()));
                Arc::new(last.with_changed(
                    changed.cloned(),
                    self.namespaces.clone(),
                    self.image_counts.clone(),
                ))
            }
            _ => {
                self.relisted = false;
                Arc::new(self.fresh_snapshot())
            }
        };
        self.snapshot = Some((self.generation, snapshot.clone()));
        snapshot
    }

    /// A snapshot built from every node, in the tree's order.
    fn fresh_snapshot(&self) -> Snapshot {
        let nodes = self
            .tree
            .list()
            .into_iter()
            .filter_map(|n| self.nodes.get(n).cloned())
            .collect();
        Snapshot::new(nodes, self.namespaces.clone(), self.image_counts.clone())
    }
}

/// `node` without its `status.images` (copied only when another holder shares it).
fn without_images(node: Arc<Node>) -> Arc<Node> {
    if node.status.as_ref().is_none_or(|s| s.images.is_none()) {
        return node;
    }
    let mut node = Arc::unwrap_or_clone(node);
    if let Some(status) = node.status.as_mut() {
        status.images = None;
    }
    Arc::new(node)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn bound(name: &str, node: &str, cpu: &str) -> Arc<Pod> {
        Arc::new(PodBuilder::new(name).req_cpu(cpu).node_name(node).build())
    }

    /// A snapshot patched with the nodes that changed equals one built afresh from the cache
    /// (the same nodes, in the same order, the same node infos, the same affinity lists), after
    /// every step of a long, mixed sequence of node, pod, assume and namespace changes.
    #[test]
    fn patched_snapshots_equal_fresh_ones() {
        use k8s_openapi::api::core::v1::{Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity};
        let mut cache = Cache::new();
        let mut rng = 11u64;
        let mut next = || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) as usize
        };
        let term = || PodAffinityTerm {
            topology_key: "kubernetes.io/hostname".into(),
            ..Default::default()
        };
        for step in 0..3000 {
            let name = format!("n{}", next() % 15);
            let uid = format!("p{}", next() % 60);
            match next() % 9 {
                0 => cache.remove_node(&name),
                1 | 2 => {
                    let zone = format!("z{}", next() % 3);
                    let node = NodeBuilder::new(&name)
                        .label("topology.kubernetes.io/zone", &zone)
                        .label("step", &step.to_string())
                        .build();
                    cache.upsert_node(Arc::new(node));
                }
                3 | 4 => {
                    let mut pod = PodBuilder::new(&uid)
                        .uid(&uid)
                        .req_cpu("1m")
                        .node_name(&name);
                    match next() % 3 {
                        0 => {
                            pod = pod.affinity(Affinity {
                                pod_affinity: Some(PodAffinity {
                                    required_during_scheduling_ignored_during_execution: Some(
                                        vec![term()],
                                    ),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            })
                        }
                        1 => {
                            pod = pod.affinity(Affinity {
                                pod_anti_affinity: Some(PodAntiAffinity {
                                    required_during_scheduling_ignored_during_execution: Some(
                                        vec![term()],
                                    ),
                                    ..Default::default()
                                }),
                                ..Default::default()
                            })
                        }
                        _ => {}
                    }
                    cache.upsert_pod(Arc::new(pod.build()));
                }
                5 => cache.remove_pod(&uid),
                6 => {
                    let pod = PodBuilder::new(&uid).uid(&uid).req_cpu("1m").info();
                    cache.assume_pod(&pod, &name);
                }
                7 => cache.forget_pod(&uid),
                _ => cache.set_namespace(
                    &format!("ns{}", next() % 3),
                    BTreeMap::from([("k".to_string(), step.to_string())]),
                ),
            }
            // Not every step is followed by a snapshot: changes pile up between cycles.
            if next() % 3 == 0 {
                continue;
            }
            let patched = cache.snapshot();
            let fresh = cache.fresh_snapshot();
            let names = |s: &Snapshot| s.nodes().iter().map(|n| n.name.clone()).collect::<Vec<_>>();
            assert_eq!(
                names(&patched),
                names(&fresh),
                "step {step}: the nodes and their order"
            );
            for (a, b) in patched.nodes().iter().zip(fresh.nodes()) {
                assert!(Arc::ptr_eq(a, b), "step {step}: node {} is stale", a.name);
            }
            let listed = |it: &mut dyn Iterator<Item = &Arc<NodeInfo>>| {
                it.map(|n| n.name.clone()).collect::<Vec<_>>()
            };
            assert_eq!(
                listed(&mut patched.have_pods_with_affinity()),
                listed(&mut fresh.have_pods_with_affinity()),
                "step {step}: nodes with affinity"
            );
            assert_eq!(
                listed(&mut patched.have_pods_with_required_anti_affinity()),
                listed(&mut fresh.have_pods_with_required_anti_affinity()),
                "step {step}: nodes with anti-affinity"
            );
            assert_eq!(patched.namespace_labels, fresh.namespace_labels);
            assert_eq!(patched.image_node_counts, fresh.image_node_counts);
        }
    }

    /// A node is kept without its `status.images`; its info holds them, each name shared with
    /// the other nodes listing it, and they still count.
    #[test]
    fn nodes_share_image_names_and_are_kept_without_their_images() {
        let mut cache = Cache::new();
        for name in ["n1", "n2"] {
            let node = NodeBuilder::new(name)
                .image("registry.example/app:v1", 5 << 20)
                .build();
            let kept = cache.upsert_node(Arc::new(node));
            assert!(kept.status.as_ref().is_some_and(|s| s.images.is_none()));
        }
        let name_in = |node: &str| {
            let info = cache.nodes.get(node).expect("a node info");
            assert!(
                info.node
                    .as_ref()
                    .is_some_and(|n| n.status.as_ref().is_some_and(|s| s.images.is_none()))
            );
            info.images.names().next().cloned().expect("an image")
        };
        assert!(Arc::ptr_eq(&name_in("n1"), &name_in("n2")));
        let snapshot = cache.snapshot();
        let info = snapshot.get("n2").expect("n2 in the snapshot");
        assert_eq!(info.images.get("registry.example/app:v1"), Some(5 << 20));
        assert_eq!(
            snapshot.image_node_counts.get("registry.example/app:v1"),
            Some(&2)
        );
    }

    /// Nodes with the same taints share one list; a node's info follows its taints and its
    /// cordon as they change; the lists no node holds any more are dropped as nodes come and go.
    #[test]
    fn nodes_share_their_taint_lists_and_follow_their_changes() {
        let mut cache = Cache::new();
        let tainted = |name: &str, pool: &str| {
            Arc::new(
                NodeBuilder::new(name)
                    .taint("pool", pool, "NoSchedule")
                    .build(),
            )
        };
        for name in ["n1", "n2"] {
            cache.upsert_node(tainted(name, "gpu"));
        }
        cache.upsert_node(tainted("n3", "cpu"));
        let list = |cache: &Cache, node: &str| cache.nodes[node].taints.as_ptr();
        assert_eq!(list(&cache, "n1"), list(&cache, "n2"));
        assert_ne!(list(&cache, "n1"), list(&cache, "n3"));
        assert_eq!(cache.nodes["n3"].taints[0].value.as_deref(), Some("cpu"));

        cache.upsert_node(Arc::new(NodeBuilder::new("n1").unschedulable().build()));
        assert!(cache.nodes["n1"].unschedulable && cache.nodes["n1"].taints.is_empty());
        assert!(!cache.nodes["n2"].unschedulable);
        assert_eq!(cache.nodes["n2"].taints.len(), 1);
        cache.upsert_node(tainted("n1", "gpu"));
        assert!(!cache.nodes["n1"].unschedulable);
        assert_eq!(list(&cache, "n1"), list(&cache, "n2"));

        for i in 0..1000 {
            let name = format!("m{i}");
            cache.upsert_node(tainted(&name, &i.to_string()));
            cache.remove_node(&name);
        }
        assert!(
            cache.taint_lists.kept() < 100,
            "{} lists kept for 3 nodes",
            cache.taint_lists.kept()
        );
        assert_eq!(list(&cache, "n1"), list(&cache, "n2"));
    }

    /// The counts kept as nodes come, change and go equal a recount over every node, in
    /// every snapshot of a long, mixed sequence.
    #[test]
    fn image_counts_kept_incrementally_match_a_recount() {
        let mut cache = Cache::new();
        let mut rng = 7u64;
        let mut next = || {
            rng = rng
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (rng >> 33) as usize
        };
        for step in 0..2000 {
            let name = format!("n{}", next() % 12);
            match next() % 5 {
                0 => cache.remove_node(&name),
                1 => cache.upsert_pod(bound(&format!("p{step}"), &name, "1m")),
                _ => {
                    let mut node = NodeBuilder::new(&name);
                    for i in 0..next() % 6 {
                        node = node.image(&format!("img{}", (i + next()) % 9), 1 << 20);
                    }
                    cache.upsert_node(Arc::new(node.build()));
                }
            }
            let snapshot = cache.snapshot();
            let mut recount = ImageCounts::new();
            for info in cache.nodes.values().filter(|n| n.node.is_some()) {
                for image in info.images.names() {
                    *recount.entry(image.clone()).or_default() += 1;
                }
            }
            assert_eq!(*cache.image_counts, recount, "step {step}");
            assert!(Arc::ptr_eq(&snapshot, &cache.snapshot()));
        }
    }

    #[test]
    fn snapshots_list_one_node_of_each_zone_in_turn() {
        let mut cache = Cache::new();
        for (name, zone) in [("a1", "a"), ("a2", "a"), ("b1", "b")] {
            let node = NodeBuilder::new(name)
                .label("topology.kubernetes.io/zone", zone)
                .build();
            cache.upsert_node(Arc::new(node));
        }
        let names: Vec<String> = cache
            .snapshot()
            .nodes()
            .iter()
            .map(|n| n.name.clone())
            .collect();
        assert_eq!(names, ["a1", "b1", "a2"]);
    }

    #[test]
    fn pods_of_every_scheduler_count_toward_their_node() {
        let mut cache = Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").build()));
        cache.upsert_pod(bound("a", "n1", "1"));
        cache.upsert_pod(Arc::new(
            PodBuilder::new("b")
                .req_cpu("500m")
                .node_name("n1")
                .scheduler_name("other")
                .build(),
        ));
        let snap = cache.snapshot();
        let n1 = snap.get("n1").expect("n1");
        assert_eq!(n1.requested.milli_cpu, 1500);
        assert_eq!(n1.pods.len(), 2);
    }

    #[test]
    fn the_assumed_pods_are_counted_as_they_come_and_go() {
        let mut cache = Cache::default();
        let a = PodBuilder::new("a").req_cpu("1").info();
        let b = PodBuilder::new("b").req_cpu("1").info();
        cache.assume_pod(&a, "n1");
        cache.assume_pod(&b, "n1");
        cache.assume_pod(&b, "n2");
        assert_eq!(
            cache.assumed_count(),
            2,
            "assumed again elsewhere, counted once"
        );
        cache.upsert_pod(a.on_node("n1").pod);
        assert_eq!(cache.assumed_count(), 1, "confirmed by the watch");
        cache.forget_pod(b.uid());
        assert_eq!((cache.assumed_count(), cache.pod_count()), (0, 1));
    }

    #[test]
    fn a_relist_drops_every_pod_it_does_not_list_assumed_ones_too() {
        let mut cache = Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").build()));
        cache.upsert_pod(bound("kept", "n1", "1"));
        cache.upsert_pod(bound("gone", "n1", "1"));
        cache.assume_pod(&PodBuilder::new("assumed-kept").req_cpu("1").info(), "n1");
        cache.assume_pod(&PodBuilder::new("assumed-gone").req_cpu("1").info(), "n1");
        let listed: std::collections::HashSet<String> =
            ["uid-kept", "uid-assumed-kept"].map(String::from).into();
        let removed: Vec<String> = cache
            .retain_pods_by_uid(&listed)
            .iter()
            .filter_map(|p| p.metadata.name.clone())
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        assert_eq!(removed, ["assumed-gone", "gone"]);
        assert_eq!(cache.pod_count(), 2);
        assert!(cache.is_assumed("uid-assumed-kept"));
    }

    #[test]
    fn assume_confirm_and_forget() {
        let mut cache = Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").build()));
        let pod = PodBuilder::new("p").req_cpu("1").info();
        cache.assume_pod(&pod, "n1");
        assert!(cache.is_assumed("uid-p"));
        assert_eq!(
            cache.snapshot().get("n1").map(|n| n.requested.milli_cpu),
            Some(1000)
        );

        // The watch confirms the bind: counted once, no longer assumed.
        cache.upsert_pod(bound("p", "n1", "1"));
        assert!(!cache.is_assumed("uid-p"));
        assert_eq!(
            cache.snapshot().get("n1").map(|n| n.requested.milli_cpu),
            Some(1000)
        );
        // Forgetting a confirmed pod does nothing.
        cache.forget_pod("uid-p");
        assert_eq!(cache.snapshot().get("n1").map(|n| n.pods.len()), Some(1));

        // A failed bind: the assumed pod is forgotten and its resources freed.
        let q = PodBuilder::new("q").req_cpu("2").info();
        cache.assume_pod(&q, "n1");
        cache.forget_pod("uid-q");
        assert_eq!(
            cache.snapshot().get("n1").map(|n| n.requested.milli_cpu),
            Some(1000)
        );
    }

    #[test]
    fn finished_and_deleted_pods_free_their_node() {
        let mut cache = Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").build()));
        cache.upsert_pod(bound("a", "n1", "1"));
        let done = PodBuilder::new("a")
            .req_cpu("1")
            .node_name("n1")
            .with(|p| {
                p.status = Some(crate::k8s::pod::PodStatus {
                    phase: Some("Succeeded".into()),
                    ..Default::default()
                })
            })
            .build();
        cache.upsert_pod(Arc::new(done));
        assert_eq!(
            cache.snapshot().get("n1").map(|n| n.requested.milli_cpu),
            Some(0)
        );
        cache.upsert_pod(bound("b", "n1", "1"));
        cache.remove_pod("uid-b");
        assert_eq!(cache.snapshot().get("n1").map(|n| n.pods.len()), Some(0));
    }

    #[test]
    fn snapshots_share_unchanged_nodes_and_skip_removed_ones() {
        let mut cache = Cache::new();
        cache.upsert_node(Arc::new(NodeBuilder::new("n1").build()));
        cache.upsert_node(Arc::new(NodeBuilder::new("n2").build()));
        let first = cache.snapshot();
        assert!(
            Arc::ptr_eq(&first, &cache.snapshot()),
            "no change, same snapshot"
        );
        cache.upsert_pod(bound("a", "n2", "1"));
        let second = cache.snapshot();
        assert!(
            Arc::ptr_eq(first.get("n1").expect("n1"), second.get("n1").expect("n1")),
            "n1 is shared"
        );
        assert_eq!(
            first.get("n2").map(|n| n.pods.len()),
            Some(0),
            "an old snapshot never changes"
        );
        cache.remove_node("n2");
        let third = cache.snapshot();
        assert_eq!(third.len(), 1);
        assert!(
            third.get("n2").is_none(),
            "a node whose object is gone is not schedulable"
        );
        cache.remove_pod("uid-a");
        assert_eq!(cache.node_count(), 1);
    }
}
