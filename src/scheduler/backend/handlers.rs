//! The event handlers that feed the cache and the queue (kube-scheduler's eventhandlers.go):
//! pods (into the cache when bound, into the queue when pending for a profile tether serves),
//! nodes and namespaces (into the cache). The scheduler is the [`Index`] of these three watches;
//! each watch is one task and the only writer of what it feeds.

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::Api;

use crate::k8s::pods;
use crate::scheduler::framework::runtime;
use crate::watch::{self, Index, Readiness};

use crate::scheduler::Scheduler;
use crate::scheduler::backend::cache::occupies_node;
use crate::scheduler::backend::queue::ClusterEvent;
use crate::scheduler::framework::pod_info::PodInfo;

impl Scheduler {
    /// A pod added or changed.
    pub fn on_pod(&self, pod: Pod) {
        let key = pods::key(&pod);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let scheduler_name = pods::scheduler_name(&pod).to_string();
        if pods::node_name(&pod).is_some() {
            self.queue.delete(&key);
            self.set_unserved(&scheduler_name, &key, None);
            let mut cache = self.lock_cache();
            let was_ours = cache.is_assumed(&uid);
            let known = cache.pod_node(&uid).is_some();
            let finished = !occupies_node(&pod);
            cache.upsert_pod(Arc::new(pod));
            drop(cache);
            if finished && known {
                self.queue
                    .move_all_to_active_or_backoff(ClusterEvent::PodDeleted);
            } else if !known && !was_ours && !finished {
                // Bound by someone else: pods with affinity to it may fit now.
                self.queue
                    .move_all_to_active_or_backoff(ClusterEvent::PodMoved);
            }
            return;
        }
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if terminating || finished {
            self.queue.delete(&key);
            self.set_unserved(&scheduler_name, &key, None);
            return;
        }
        let Some(profile) = self.profiles.get(&scheduler_name) else {
            // Not ours (yet): left alone, remembered in case a profile for it appears.
            self.queue.delete(&key);
            self.set_unserved(&scheduler_name, &key, Some(Arc::new(pod)));
            return;
        };
        self.set_unserved(&scheduler_name, &key, None);
        if self.lock_cache().is_assumed(&uid) {
            return;
        }
        let info = Arc::new(PodInfo::new(Arc::new(pod)));
        let gate = runtime::run_pre_enqueue(&profile, &info);
        self.queue.add(info, gate);
    }

    /// A pod deleted.
    pub fn on_pod_deleted(&self, pod: &Pod) {
        let key = pods::key(pod);
        self.queue.delete(&key);
        self.set_unserved(pods::scheduler_name(pod), &key, None);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let mut cache = self.lock_cache();
        let held_resources = cache.pod_node(&uid).is_some();
        cache.remove_pod(&uid);
        drop(cache);
        if held_resources {
            self.queue
                .move_all_to_active_or_backoff(ClusterEvent::PodDeleted);
        }
    }

    /// A node added or changed. Only changes that can make pods fit requeue them; status
    /// heartbeats do not.
    pub fn on_node(&self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let mut cache = self.lock_cache();
        let before = cache.snapshot().get(&name).and_then(|n| n.node.clone());
        cache.upsert_node(Arc::new(node.clone()));
        drop(cache);
        let event = match before {
            None => Some(ClusterEvent::NodeAdded),
            Some(old) => {
                let relevant = |n: &Node| {
                    (
                        n.metadata.labels.clone(),
                        n.spec.as_ref().map(|s| (s.taints.clone(), s.unschedulable)),
                        n.status
                            .as_ref()
                            .map(|s| (s.allocatable.clone(), s.images.clone())),
                    )
                };
                (relevant(&old) != relevant(&node)).then_some(ClusterEvent::NodeChanged)
            }
        };
        if let Some(event) = event {
            self.queue.move_all_to_active_or_backoff(event);
        }
    }

    pub fn on_node_deleted(&self, node: &Node) {
        self.lock_cache()
            .remove_node(node.metadata.name.as_deref().unwrap_or_default());
    }
}

impl Index<Pod> for Scheduler {
    fn apply(&self, pod: Pod) {
        self.on_pod(pod);
    }

    fn delete(&self, pod: Pod) {
        self.on_pod_deleted(&pod);
    }

    /// Pods that disappeared while the watch was down leave the cache and the queue.
    fn reset(&self, pods: Vec<Pod>) {
        let seen: HashSet<String> = pods
            .iter()
            .map(|p| p.metadata.uid.clone().unwrap_or_default())
            .collect();
        for pod in pods {
            self.on_pod(pod);
        }
        let removed = self.lock_cache().retain_pods_by_uid(&seen);
        self.queue.retain_uids(&seen);
        if removed > 0 {
            self.queue
                .move_all_to_active_or_backoff(ClusterEvent::PodDeleted);
        }
    }
}

impl Index<Node> for Scheduler {
    fn apply(&self, node: Node) {
        self.on_node(node);
    }

    fn delete(&self, node: Node) {
        self.on_node_deleted(&node);
    }

    /// Nodes deleted while the watch was down leave the cache.
    fn reset(&self, nodes: Vec<Node>) {
        let seen: HashSet<String> = nodes
            .iter()
            .map(|n| n.metadata.uid.clone().unwrap_or_default())
            .collect();
        for node in nodes {
            self.on_node(node);
        }
        self.lock_cache().retain_nodes_by_uid(&seen);
    }
}

impl Index<Namespace> for Scheduler {
    fn apply(&self, ns: Namespace) {
        self.lock_cache().set_namespace(
            ns.metadata.name.as_deref().unwrap_or_default(),
            ns.metadata.labels.unwrap_or_default(),
        );
    }

    fn delete(&self, ns: Namespace) {
        self.lock_cache()
            .remove_namespace(ns.metadata.name.as_deref().unwrap_or_default());
    }

    fn reset(&self, namespaces: Vec<Namespace>) {
        let labels: BTreeMap<String, BTreeMap<String, String>> = namespaces
            .into_iter()
            .map(|ns| {
                (
                    ns.metadata.name.unwrap_or_default(),
                    ns.metadata.labels.unwrap_or_default(),
                )
            })
            .collect();
        self.lock_cache().reset_namespaces(labels);
    }
}

/// The pod, node and namespace watches that feed the cache and the queue, registered in
/// `readiness` now; the returned future runs them until the process stops.
pub fn run_watches(
    sched: Arc<Scheduler>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let feeds = (
        readiness.register("pods"),
        readiness.register("nodes"),
        readiness.register("namespaces"),
    );
    async move {
        let (pods, nodes, namespaces) = feeds;
        tokio::join!(
            watch::run(
                Api::<Pod>::all(client.clone()),
                "pods",
                Some(pods),
                sched.as_ref()
            ),
            watch::run(
                Api::<Node>::all(client.clone()),
                "nodes",
                Some(nodes),
                sched.as_ref()
            ),
            watch::run(
                Api::<Namespace>::all(client),
                "namespaces",
                Some(namespaces),
                sched.as_ref()
            ),
        );
    }
}
