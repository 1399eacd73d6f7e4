//! The event handlers that feed the cache and the queue (kube-scheduler's eventhandlers.go):
//! pods (into the cache when bound, into the queue when pending), nodes and namespaces (into
//! the cache), each change a cluster event for the queue. [`EventHandlers`] is the [`Index`] of
//! these three watches; each watch is one task and the only writer of what it feeds.
//! `storage.rs`: the storage kinds, into the storage index and the queue as cluster events.

pub mod storage;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Namespace, Node};
use kube::api::Api;

use crate::k8s::pod::Pod;
use crate::k8s::pods;

use crate::watch::{self, Index, Readiness};

use crate::scheduler::Scheduler;
use crate::scheduler::backend::cache::occupies_node;
use crate::scheduler::framework::events::{
    self, ASSIGNED_POD_ADD, ASSIGNED_POD_DELETE, EventObject, NODE_ADD, NODE_DELETE,
    UNSCHEDULED_POD_ADD,
};
use crate::scheduler::framework::pod_info::PodInfo;

/// What each pod, node and namespace event does to the scheduler's cache and queue.
pub struct EventHandlers {
    sched: Arc<Scheduler>,
}

impl EventHandlers {
    pub fn new(sched: Arc<Scheduler>) -> Arc<Self> {
        Arc::new(EventHandlers { sched })
    }

    /// A pod added or changed. A bound pod goes into the cache, as an added pod when the
    /// cache did not hold it bound yet (tether's own binds too: pods waiting for it may fit
    /// now), else as an update; a pod that finished counts as deleted. A pending pod goes into
    /// the queue.
    pub fn on_pod(&self, mut pod: Pod) {
        let sched = &self.sched;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        // A gang's members are counted before the pod is queued: its own PreEnqueue counts it.
        let joined_group = sched.pod_groups.observe_pod(&pod);
        let scheduler_name = pods::scheduler_name(&pod).to_string();
        let served_by = sched.profiles.get(&scheduler_name);
        if served_by.is_none() {
            pods::keep_only_own_switches(&mut pod);
        }
        if pods::node_name(&pod).is_some() {
            let pod = Arc::new(pod);
            let mut cache = sched.lock_cache();
            // Out of the queue and into the cache under the cache's lock: a pod is never
            // unknown to the scheduler in between (see `knows_pod`).
            sched.state.queue.delete(&uid);
            sched.state.room.nominator.forget(&uid);
            let was_assumed = cache.is_assumed(&uid);
            let before = cache.pod(&uid);
            cache.upsert_pod(pod.clone());
            // Bound, and not by this scheduler: its bind is counted like any other.
            let by_another = before.is_none() && occupies_node(&pod);
            let observer = by_another.then(|| cache.bind_observer()).flatten();
            drop(cache);
            if let Some(observer) = observer {
                observer(pod.clone());
            }
            if let Some(profile) = &served_by
                && occupies_node(&pod)
            {
                if before.as_ref().is_none_or(|_| was_assumed) {
                    sched.state.room.claim_hold_of(&pod, profile);
                }
                sched.state.room.remember_hold_identity(&pod, profile);
            }
            let new = Some(EventObject::Pod(pod.clone()));
            match before {
                Some(old) if !occupies_node(&pod) => {
                    if let Some(profile) = &served_by
                        && occupies_node(&old)
                    {
                        sched.state.room.hold_room_of(&old, profile);
                    }
                    sched.state.queue.on_event(
                        ASSIGNED_POD_DELETE,
                        Some(EventObject::Pod(old)),
                        None,
                    );
                }
                _ if !occupies_node(&pod) => {}
                Some(old) if !was_assumed => {
                    for event in events::pod_changes(&pod, &old) {
                        sched.state.queue.on_event(
                            event,
                            Some(EventObject::Pod(old.clone())),
                            new.clone(),
                        );
                    }
                }
                _ => sched.state.queue.on_event(ASSIGNED_POD_ADD, None, new),
            }
            return;
        }
        let terminating = pod.metadata.deletion_timestamp.is_some();
        let finished = matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        );
        if terminating || finished {
            // A pod being deleted is not tried; one that waited to be tried is told so, as
            // kube-scheduler tells a pod it pops while it is being deleted.
            let (waiting, nominated) = {
                let _cache = sched.lock_cache();
                let waiting = sched.state.queue.delete(&uid);
                (waiting, sched.state.room.nominator.forget(&uid))
            };
            if waiting && terminating {
                sched.reports.skipped_deleting(&pod);
            }
            if let Some(gone) = nominated {
                sched.state.room.given_up(&gone);
            }
            return;
        }
        let Some(profile) = served_by else {
            Self::wait_for_profile(sched, pod, &scheduler_name);
            return;
        };
        let pod = Arc::new(pod);
        let queued = sched
            .state
            .enqueue(Arc::new(PodInfo::new(pod.clone())), &profile);
        if queued && joined_group {
            // The gang's other pods, held at PreEnqueue until minCount exist, may go now.
            sched
                .state
                .queue
                .on_event(UNSCHEDULED_POD_ADD, None, Some(EventObject::Pod(pod)));
        }
    }

    /// A pending pod no profile serves (yet): kept in the queue's unserved pool, queued as soon
    /// as a profile for it appears. A profile that appeared since the caller looked may have
    /// taken the unserved pods before this one joined them: then the pod is served here (the
    /// profile is published before its unserved pods are taken, so one of the two sees the
    /// other and the pod is never left behind).
    fn wait_for_profile(sched: &Scheduler, pod: Pod, scheduler_name: &str) {
        sched
            .state
            .queue
            .add_unserved(Arc::new(PodInfo::new(Arc::new(pod))));
        if let Some(profile) = sched.profiles.get(scheduler_name) {
            sched.serve_unserved(scheduler_name, &profile);
        }
    }

    /// A pod deleted. A pod that held resources (bound, or assumed by us) frees them.
    pub fn on_pod_deleted(&self, pod: &Pod) {
        let sched = &self.sched;
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        sched.pod_groups.forget_pod(&uid);
        let mut cache = sched.lock_cache();
        // Out of the queue and its nomination ended under the cache's lock, as a cycle that
        // failed asks before it nominates (`failure::nominate_if_pending`).
        sched.state.queue.delete(&uid);
        let nominated = sched.state.room.nominator.forget(&uid);
        let held = cache.pod(&uid);
        cache.remove_pod(&uid);
        drop(cache);
        if let Some(old) = held {
            if occupies_node(&old)
                && let Some(profile) = sched.profiles.get(pods::scheduler_name(&old))
            {
                sched.state.room.hold_room_of(&old, &profile);
            }
            sched.state.room.holds.forget(&uid);
            sched
                .state
                .queue
                .on_event(ASSIGNED_POD_DELETE, Some(EventObject::Pod(old)), None);
        } else if let Some(gone) = nominated {
            sched.state.room.given_up(&gone);
        }
    }

    /// A node added or changed. Each kind of change that scheduling reads is an event; status
    /// heartbeats are none.
    pub fn on_node(&self, node: Node) {
        let name = node.metadata.name.clone().unwrap_or_default();
        let sched = &self.sched;
        let mut cache = sched.lock_cache();
        let before = cache.node(&name);
        // The node as the cache keeps it, its images read out: not copied while shared here.
        let node = cache.upsert_node(Arc::new(node));
        drop(cache);
        let new = Some(EventObject::Node(node.clone()));
        match before {
            None => sched.state.queue.on_event(NODE_ADD, None, new),
            Some(old) => {
                for event in events::node_changes(&node, &old) {
                    sched.state.queue.on_event(
                        event,
                        Some(EventObject::Node(old.clone())),
                        new.clone(),
                    );
                }
            }
        }
    }

    pub fn on_node_deleted(&self, node: &Node) {
        let sched = &self.sched;
        let name = node.metadata.name.as_deref().unwrap_or_default();
        let old = sched
            .lock_cache()
            .node(name)
            .unwrap_or_else(|| Arc::new(node.clone()));
        sched
            .state
            .queue
            .on_event(NODE_DELETE, Some(EventObject::Node(old)), None);
        sched.lock_cache().remove_node(name);
    }
}

impl Index<Pod> for EventHandlers {
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
            .filter_map(|p| <Self as Index<Pod>>::list_key(self, p))
            .collect();
        for pod in pods {
            self.on_pod(pod);
        }
        <Self as Index<Pod>>::listed(self, seen);
    }

    /// A list's pods are applied as they arrive (the scheduling loop waits for the list to
    /// end all the same: it pops only while every watch is current).
    fn list_key(&self, pod: &Pod) -> Option<String> {
        Some(pod.metadata.uid.clone().unwrap_or_default())
    }

    /// Pods that disappeared while the watch was down leave the cache and the queue.
    fn listed(&self, seen: HashSet<String>) {
        let sched = &self.sched;
        let removed = sched.lock_cache().retain_pods_by_uid(&seen);
        sched.state.queue.retain_uids(&seen);
        sched.pod_groups.retain_pods(&seen);
        sched.state.room.nominator.retain(&seen);
        for old in removed {
            sched
                .state
                .queue
                .on_event(ASSIGNED_POD_DELETE, Some(EventObject::Pod(old)), None);
        }
    }
}

impl Index<Node> for EventHandlers {
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
            .filter_map(|n| <Self as Index<Node>>::list_key(self, n))
            .collect();
        for node in nodes {
            self.on_node(node);
        }
        <Self as Index<Node>>::listed(self, seen);
    }

    /// A list's nodes are applied as they arrive, as pods are.
    fn list_key(&self, node: &Node) -> Option<String> {
        Some(node.metadata.uid.clone().unwrap_or_default())
    }

    /// Nodes that disappeared while the watch was down leave the cache.
    fn listed(&self, seen: HashSet<String>) {
        let removed = self.sched.lock_cache().retain_nodes_by_uid(&seen);
        for old in removed {
            self.sched
                .state
                .queue
                .on_event(NODE_DELETE, Some(EventObject::Node(old)), None);
        }
    }
}

impl Index<Namespace> for EventHandlers {
    fn apply(&self, ns: Namespace) {
        self.sched.lock_cache().set_namespace(
            ns.metadata.name.as_deref().unwrap_or_default(),
            ns.metadata.labels.unwrap_or_default(),
        );
    }

    fn delete(&self, ns: Namespace) {
        self.sched
            .lock_cache()
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
        self.sched.lock_cache().reset_namespaces(labels);
    }
}

/// The pod, node and namespace watches that feed the cache and the queue, registered in
/// `readiness` now; the returned future runs them until the process stops.
pub fn run_watches(
    handlers: Arc<EventHandlers>,
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
                handlers.as_ref()
            ),
            watch::run(
                Api::<Node>::all(client.clone()),
                "nodes",
                Some(nodes),
                handlers.as_ref()
            ),
            watch::run(
                Api::<Namespace>::all(client),
                "namespaces",
                Some(namespaces),
                handlers.as_ref()
            ),
        );
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::scheduler::backend::queue::SchedulingQueue;
    use crate::scheduler::framework::NominatedPods;
    use crate::scheduler::framework::profile::ProfileRegistry;
    use crate::scheduler::metrics::Metrics;
    use crate::scheduler::outcome::Reports;
    use crate::scheduler::plugins::priority_sort;
    use crate::scheduler::testing::{PodBuilder, stand_in_client};
    use crate::scheduler::{BindObserver, Services};
    use crate::supervise::Fatal;

    fn scheduler() -> Arc<Scheduler> {
        let profiles = Arc::new(ProfileRegistry::new());
        let sort = priority_sort::build(
            None,
            &"plugins.queueSort".into(),
            &crate::scheduler::plugins::handle::Handle::default(),
        )
        .expect("sort");
        let client = stand_in_client(|_, _, sent| (201, sent));
        let metrics = Arc::new(Metrics::default());
        Scheduler::new(
            crate::scheduler::SchedulerState::new(
                SchedulingQueue::new(sort, profiles.clone()),
                metrics.clone(),
            ),
            profiles,
            Services {
                metrics,
                reports: Reports::new(client, None, crate::gate::WriteGate::alone()),
                readiness: crate::watch::Readiness::new(),
                runtime: tokio::runtime::Handle::current(),
                fatal: Fatal::new().0,
                gate: crate::gate::WriteGate::alone(),
                pod_groups: Arc::default(),
            },
        )
    }

    /// The race a pod of a profile being published meets: its handler found no profile, then
    /// the profile was published and its unserved pods taken, then the pod joined the unserved
    /// pool. It is queued all the same, not left in the unserved pool for good.
    #[tokio::test]
    async fn a_pod_that_missed_its_profile_by_a_moment_is_queued() {
        let sched = serving_the_default_profile();
        let pod = PodBuilder::new("late")
            .uid("late")
            .scheduler_name("tether-scheduler")
            .build();
        EventHandlers::wait_for_profile(&sched, pod, "tether-scheduler");
        assert_eq!(
            sched.state.queue.lengths(),
            (1, 0, 0, 0),
            "queued, not left unserved"
        );
    }

    /// A scheduler whose one profile is the default, serving `tether-scheduler`.
    fn serving_the_default_profile() -> Arc<Scheduler> {
        use crate::scheduler::plugins::handle::Handle;
        use crate::scheduler::profile::default_profile;
        let sched = scheduler();
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("profile")
            .profile;
        sched.apply_profiles(std::collections::HashMap::from([(
            "tether-scheduler".to_string(),
            Arc::new(profile),
        )]));
        sched
    }

    /// A watch event of a pending pod (its status names its nominated node) that races the
    /// cycle assuming it: whichever comes first, the pod is not left nominated once it is
    /// assumed (counted twice on its node, it would make a preemptor whose room there was
    /// freed evict again). Each round starts both at once; the rounds make the interleavings.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_stale_event_never_leaves_an_assumed_pod_nominated() {
        let sched = serving_the_default_profile();
        let handlers = EventHandlers::new(sched.clone());
        for round in 0..3000 {
            let name = format!("vip-{round}");
            let mut pod = PodBuilder::new(&name)
                .uid(&name)
                .priority(100)
                .scheduler_name("tether-scheduler")
                .build();
            pod.status
                .get_or_insert_with(Default::default)
                .nominated_node_name = Some("n1".into());
            let info = Arc::new(PodInfo::new(Arc::new(pod.clone())));
            sched.state.room.nominator.nominate(info.clone(), "n1");
            let start = std::sync::Barrier::new(2);
            std::thread::scope(|s| {
                s.spawn(|| {
                    start.wait();
                    handlers.on_pod(pod.clone());
                });
                start.wait();
                // A cycle's order: assume, then end the nomination.
                sched.lock_cache().assume_pod(&info, "n1");
                sched.state.room.nominator.forget(&name);
            });
            assert_eq!(
                sched.state.room.nominator.node_of(&name),
                None,
                "round {round}: assumed and still nominated"
            );
            sched.lock_cache().forget_pod(&name);
            sched.state.queue.forget(&name);
        }
    }

    /// A pod deleted, or bound by another, while its cycle ran is not nominated when the cycle
    /// ends in a preemption (its nomination would hold the room for nobody until a re-list);
    /// one still pending is.
    #[tokio::test]
    async fn a_pod_gone_or_bound_during_its_cycle_is_not_nominated() {
        use crate::scheduler::failure::{FailedAttempt, Failure};
        use crate::scheduler::framework::Nomination;
        use crate::scheduler::framework::runtime::Diagnosis;
        let sched = serving_the_default_profile();
        let handlers = EventHandlers::new(sched.clone());
        let profile = sched.profiles.get("tether-scheduler").expect("profile");
        for (name, nominated) in [("deleted", false), ("bound", false), ("pending", true)] {
            let pod = PodBuilder::new(name)
                .uid(name)
                .priority(100)
                .scheduler_name("tether-scheduler")
                .build();
            handlers.on_pod(pod.clone());
            let queued = sched.state.queue.pop().expect("the pod");
            match name {
                "deleted" => handlers.on_pod_deleted(&pod),
                "bound" => handlers.on_pod(bound(name, "n2")),
                _ => {}
            }
            let failure = Failure::unschedulable(Diagnosis {
                num_all_nodes: 1,
                nomination: Some(Nomination::Node("n1".into())),
                ..Default::default()
            });
            FailedAttempt::of_cycle(
                &queued,
                &profile,
                failure,
                "unschedulable",
                std::time::Instant::now(),
            )
            .handle(&sched);
            assert_eq!(
                sched.state.room.nominator.node_of(name).is_some(),
                nominated,
                "{name}"
            );
        }
    }

    fn bound(name: &str, node: &str) -> Pod {
        PodBuilder::new(name).uid(name).node_name(node).build()
    }

    /// Binds this scheduler did not make reach the observer once each, from the moment it is
    /// set (those before are in the list it returns); binds it made never do.
    #[tokio::test]
    async fn binds_made_by_others_are_told_once_and_own_binds_never() {
        let sched = scheduler();
        let handlers = EventHandlers::new(sched.clone());
        handlers.on_pod(bound("before", "n1"));
        let told = Arc::new(Mutex::new(Vec::new()));
        let sink = told.clone();
        let observer: BindObserver = Arc::new(move |pod: Arc<Pod>| {
            sink.lock()
                .expect("told")
                .push(pod.metadata.uid.clone().unwrap_or_default());
        });
        let listed = sched.bound_pods_then_observe(observer);
        assert_eq!(listed.len(), 1, "the bind made before is listed");

        handlers.on_pod(bound("other", "n2"));
        handlers.on_pod(bound("other", "n2"));
        let own = PodBuilder::new("own").uid("own").info();
        sched.lock_cache().assume_pod(&own, "n1");
        handlers.on_pod(bound("own", "n1"));
        handlers.on_pod(bound("before", "n1"));

        assert_eq!(*told.lock().expect("told"), ["other"]);
        assert!(sched.knows_pod("own") && sched.knows_pod("other"));
        assert!(!sched.knows_pod("never-seen"));
    }

    /// A pod no profile serves is held without the annotations nobody reads: a namespace user
    /// cannot make tether hold 256 KiB per pod of another scheduler. A pod of a profile keeps
    /// them (its history plugins read their switch from it).
    #[tokio::test]
    async fn pods_of_other_schedulers_are_held_without_their_annotations() {
        let sched = serving_the_default_profile();
        let handlers = EventHandlers::new(sched.clone());
        let big = "x".repeat(64 * 1024);
        for (name, scheduler) in [
            ("theirs", "default-scheduler"),
            ("ours", "tether-scheduler"),
        ] {
            handlers.on_pod(
                PodBuilder::new(name)
                    .uid(name)
                    .node_name("n1")
                    .scheduler_name(scheduler)
                    .annotation("note", &big)
                    .build(),
            );
        }
        let cache = sched.lock_cache();
        let annotations = |uid: &str| {
            cache
                .pod(uid)
                .expect("cached")
                .metadata
                .annotations
                .clone()
                .map(|a| a.len())
        };
        assert_eq!(annotations("theirs"), None);
        assert_eq!(annotations("ours"), Some(1));
    }
}
