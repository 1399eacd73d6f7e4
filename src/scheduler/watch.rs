//! The watches that feed the scheduler: pods (into the cache when bound, into the queue when
//! pending for a profile tether serves), nodes and namespaces (into the cache). One task per
//! resource; each is the only writer of what it feeds.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::api::Api;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use super::Scheduler;
use super::cache::occupies_node;
use super::pod_info::PodInfo;
use super::queue::ClusterEvent;

fn pod_key(pod: &Pod) -> String {
    format!(
        "{}/{}",
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default()
    )
}

fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

impl Scheduler {
    /// A pod added or changed.
    pub fn on_pod(&self, pod: Pod) {
        let key = pod_key(&pod);
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        if is_bound(&pod) {
            self.queue.delete(&key);
            let scheduler_name = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_default();
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
        let scheduler_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_default();
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
        let gate = profile.pre_enqueue.iter().find_map(|p| {
            let status = p.pre_enqueue()?.pre_enqueue(&info);
            (!status.is_success()).then(|| p.name())
        });
        self.queue.add(info, gate);
    }

    /// A pod deleted.
    pub fn on_pod_deleted(&self, pod: &Pod) {
        self.queue.delete(&pod_key(pod));
        let scheduler_name = pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduler_name.clone())
            .unwrap_or_default();
        self.set_unserved(&scheduler_name, &pod_key(pod), None);
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

/// Runs `handle` on every event of a watch of `api`, forever; a relist removes what is gone.
async fn watch_all<K, A, D, G>(
    api: Api<K>,
    what: &'static str,
    mut apply: A,
    mut delete: D,
    mut gone: G,
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    A: FnMut(K),
    D: FnMut(&K),
    G: FnMut(&HashSet<String>),
{
    let mut relist: Option<HashSet<String>> = None;
    let mut stream = watcher::watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .boxed();
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Init)) => relist = Some(HashSet::new()),
            Ok(Some(Event::InitApply(obj))) => {
                if let Some(seen) = relist.as_mut() {
                    seen.insert(obj.meta().uid.clone().unwrap_or_default());
                }
                apply(obj);
            }
            Ok(Some(Event::InitDone)) => {
                if let Some(seen) = relist.take() {
                    gone(&seen);
                }
                tracing::debug!(resource = what, "watch (re)listed");
            }
            Ok(Some(Event::Apply(obj))) => apply(obj),
            Ok(Some(Event::Delete(obj))) => delete(&obj),
            Ok(None) => return,
            Err(e) => tracing::warn!(resource = what, error = %e, "watch error; retrying"),
        }
    }
}

/// Starts the pod, node and namespace watches; each adds one to `synced` after its first list.
/// Returns when all of them stop.
pub async fn run_watches(sched: Arc<Scheduler>, client: kube::Client, synced: Arc<AtomicUsize>) {
    let first_list = |synced: Arc<AtomicUsize>| {
        let mut done = false;
        move || {
            if !done {
                done = true;
                synced.fetch_add(1, Ordering::AcqRel);
            }
        }
    };
    let (mut pods_synced, mut nodes_synced, mut ns_synced) = (
        first_list(synced.clone()),
        first_list(synced.clone()),
        first_list(synced),
    );
    let (s1, s2, s3) = (sched.clone(), sched.clone(), sched.clone());
    let (d1, d2) = (sched.clone(), sched.clone());
    let pods = watch_all(
        Api::<Pod>::all(client.clone()),
        "pods",
        move |p| s1.on_pod(p),
        move |p| d1.on_pod_deleted(p),
        move |seen| {
            pods_gone(&d2, seen);
            pods_synced();
        },
    );
    let (n1, n2, n3) = (sched.clone(), sched.clone(), sched.clone());
    let nodes = watch_all(
        Api::<Node>::all(client.clone()),
        "nodes",
        move |n| n1.on_node(n),
        move |n| n2.on_node_deleted(n),
        move |seen| {
            n3.lock_cache().retain_nodes_by_uid(seen);
            nodes_synced();
        },
    );
    let (c1, c2) = (s2, s3);
    let namespaces = watch_all(
        Api::<Namespace>::all(client),
        "namespaces",
        move |ns| {
            let labels: BTreeMap<String, String> = ns.metadata.labels.clone().unwrap_or_default();
            c1.lock_cache()
                .set_namespace(ns.metadata.name.as_deref().unwrap_or_default(), labels);
        },
        move |ns| {
            c2.lock_cache()
                .remove_namespace(ns.metadata.name.as_deref().unwrap_or_default())
        },
        move |_| ns_synced(),
    );
    tokio::join!(pods, nodes, namespaces);
}

/// After a relist of pods: pods that disappeared while the watch was down are removed.
fn pods_gone(sched: &Scheduler, seen: &HashSet<String>) {
    let removed = sched.lock_cache().retain_pods_by_uid(seen);
    sched.queue.retain_uids(seen);
    if removed > 0 {
        sched
            .queue
            .move_all_to_active_or_backoff(ClusterEvent::PodDeleted);
    }
}

/// Watches Services, ReplicationControllers, ReplicaSets and StatefulSets into `selectors`,
/// for PodTopologySpread's default constraints.
pub async fn run_selector_watches(
    selectors: Arc<super::default_selectors::WorkloadSelectors>,
    client: kube::Client,
) {
    use super::labels::Selector;
    use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
    use k8s_openapi::api::core::v1::{ReplicationController, Service};

    fn key<K: kube::Resource>(o: &K) -> (String, String) {
        (
            o.meta().namespace.clone().unwrap_or_default(),
            o.meta().name.clone().unwrap_or_default(),
        )
    }
    let map_selector =
        |m: Option<&BTreeMap<String, String>>| m.filter(|m| !m.is_empty()).map(Selector::from_map);
    let label_selector =
        |s: Option<&k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector>| {
            Selector::from_label_selector(s)
                .ok()
                .filter(|s| !s.is_empty())
        };
    macro_rules! watch_kind {
        ($ty:ty, $kind:literal, $sel:expr) => {{
            let (a, d) = (selectors.clone(), selectors.clone());
            watch_all(
                Api::<$ty>::all(client.clone()),
                $kind,
                move |o: $ty| {
                    let (ns, name) = key(&o);
                    match $sel(&o) {
                        Some(s) => a.set(&ns, $kind, &name, s),
                        None => a.remove(&ns, $kind, &name),
                    }
                },
                move |o: &$ty| {
                    let (ns, name) = key(o);
                    d.remove(&ns, $kind, &name);
                },
                |_| {},
            )
        }};
    }
    tokio::join!(
        watch_kind!(Service, "Service", |o: &Service| map_selector(
            o.spec.as_ref().and_then(|s| s.selector.as_ref())
        )),
        watch_kind!(
            ReplicationController,
            "ReplicationController",
            |o: &ReplicationController| map_selector(
                o.spec.as_ref().and_then(|s| s.selector.as_ref())
            )
        ),
        watch_kind!(ReplicaSet, "ReplicaSet", |o: &ReplicaSet| label_selector(
            o.spec.as_ref().map(|s| &s.selector)
        )),
        watch_kind!(
            StatefulSet,
            "StatefulSet",
            |o: &StatefulSet| label_selector(o.spec.as_ref().map(|s| &s.selector))
        ),
    );
}
