//! A compiled profile: the plugins of one schedulerName, ordered per extension point, ready to
//! run. Profiles are immutable; a change builds a new one and swaps it in the registry.

use std::sync::Arc;
use std::time::Duration;

use crate::locks;
use crate::scheduler::framework::Plugin;
use crate::scheduler::framework::events::{ClusterEvent, HintSource, QueueingHints};

/// A plugin at the Score extension point with the weight its normalized score is multiplied by.
#[derive(Clone)]
pub struct WeightedScore {
    pub plugin: Arc<dyn Plugin>,
    pub weight: i64,
}

/// Everything one scheduling profile runs, in order, per extension point.
#[derive(Clone)]
pub struct CompiledProfile {
    pub scheduler_name: String,
    /// Where this profile came from, for logs (e.g. `SchedulingProfile/sticky-vms@3`).
    pub source: String,
    pub percentage_of_nodes_to_score: i32,
    pub pod_initial_backoff: Duration,
    pub pod_max_backoff: Duration,
    pub queue_sort: Arc<dyn Plugin>,
    pub pre_enqueue: Vec<Arc<dyn Plugin>>,
    pub pre_filter: Vec<Arc<dyn Plugin>>,
    pub filter: Vec<Arc<dyn Plugin>>,
    pub post_filter: Vec<Arc<dyn Plugin>>,
    pub pre_score: Vec<Arc<dyn Plugin>>,
    pub score: Vec<WeightedScore>,
    pub reserve: Vec<Arc<dyn Plugin>>,
    pub permit: Vec<Arc<dyn Plugin>>,
    pub pre_bind: Vec<Arc<dyn Plugin>>,
    pub bind: Vec<Arc<dyn Plugin>>,
    pub post_bind: Vec<Arc<dyn Plugin>>,
    /// The events that may make a pod this profile rejected schedulable, by plugin.
    pub hints: Arc<QueueingHints>,
    /// The Kubernetes release whose kube-scheduler the profile schedules as (its plugins were
    /// built for it; the group cycle words its outcomes by it).
    pub release: crate::k8s::release::Release,
}

/// How long a pod that failed waits before it is tried again: from `initial`, doubling with each
/// failure, up to `max` (a profile's podInitialBackoffSeconds and podMaxBackoffSeconds).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backoff {
    pub initial: Duration,
    pub max: Duration,
}

impl CompiledProfile {
    /// The profile's pod backoff.
    pub fn backoff(&self) -> Backoff {
        Backoff {
            initial: self.pod_initial_backoff,
            max: self.pod_max_backoff,
        }
    }

    /// Who `pod` holds room for, if a PreFilter plugin of this profile holds room.
    pub fn hold_identity(&self, pod: &crate::k8s::pod::Pod) -> Option<super::HoldIdentity> {
        self.pre_filter.iter().find_map(|p| p.hold_identity(pod))
    }

    /// The room a PreFilter plugin of this profile holds for `who`, whose pod `pod` just left
    /// `node`, if one does.
    pub fn room_to_hold(
        &self,
        pod: &crate::k8s::pod::Pod,
        node: &str,
        who: &super::HoldIdentity,
    ) -> Option<super::RoomHold> {
        self.pre_filter
            .iter()
            .find_map(|p| p.room_to_hold(pod, node, who))
    }

    /// The key of the room held for `pod`'s workload by a plugin of this profile, if one holds.
    pub fn holds_key(&self, pod: &crate::k8s::pod::Pod) -> Option<String> {
        self.hold_identity(pod).map(|who| who.key)
    }

    /// Whether a plugin of this name runs at any extension point.
    pub fn uses(&self, name: &str) -> bool {
        [
            &self.pre_enqueue,
            &self.pre_filter,
            &self.filter,
            &self.post_filter,
            &self.pre_score,
            &self.reserve,
            &self.permit,
            &self.pre_bind,
            &self.bind,
            &self.post_bind,
        ]
        .iter()
        .any(|list| list.iter().any(|p| p.name() == name))
            || self.score.iter().any(|s| s.plugin.name() == name)
    }
}

impl std::fmt::Debug for CompiledProfile {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names = |v: &[Arc<dyn Plugin>]| v.iter().map(|p| p.name()).collect::<Vec<_>>();
        f.debug_struct("CompiledProfile")
            .field("scheduler_name", &self.scheduler_name)
            .field("source", &self.source)
            .field("queue_sort", &self.queue_sort.name())
            .field("filter", &names(&self.filter))
            .field(
                "score",
                &self
                    .score
                    .iter()
                    .map(|s| (s.plugin.name(), s.weight))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// schedulerName → the profile serving it. Swapped atomically: a cycle takes one profile and
/// keeps it for the whole cycle, so it never sees half a change.
#[derive(Default)]
pub struct ProfileRegistry {
    inner: std::sync::RwLock<Arc<std::collections::HashMap<String, Arc<CompiledProfile>>>>,
}

impl ProfileRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Drops every profile, and with them their plugins: for a session whose term is over. The
    /// plugins hold the session's history writer, which reads the queue that holds this
    /// registry: a circle that keeps the whole session in memory until it is cut here.
    pub fn clear(&self) {
        *locks::write(&self.inner) = Arc::default();
    }

    fn read(&self) -> Arc<std::collections::HashMap<String, Arc<CompiledProfile>>> {
        locks::read(&self.inner).clone()
    }

    /// The profile serving `scheduler_name`, if any.
    pub fn get(&self, scheduler_name: &str) -> Option<Arc<CompiledProfile>> {
        self.read().get(scheduler_name).cloned()
    }

    pub fn contains(&self, scheduler_name: &str) -> bool {
        self.read().contains_key(scheduler_name)
    }

    /// Serves `profile` for its schedulerName, replacing the previous version.
    pub fn insert(&self, profile: CompiledProfile) {
        let mut guard = locks::write(&self.inner);
        let mut map = (**guard).clone();
        map.insert(profile.scheduler_name.clone(), Arc::new(profile));
        *guard = Arc::new(map);
    }

    /// Stops serving `scheduler_name`; its pods are left alone from now on.
    pub fn remove(&self, scheduler_name: &str) {
        let mut guard = locks::write(&self.inner);
        let mut map = (**guard).clone();
        map.remove(scheduler_name);
        *guard = Arc::new(map);
    }

    /// Replaces every profile at once. Returns the schedulerNames that were added, those that
    /// were removed, and whether any profile changed at all.
    pub fn replace_all(
        &self,
        profiles: std::collections::HashMap<String, Arc<CompiledProfile>>,
    ) -> (Vec<String>, Vec<String>, bool) {
        let mut guard = locks::write(&self.inner);
        let old = guard.clone();
        let added: Vec<String> = profiles
            .keys()
            .filter(|k| !old.contains_key(*k))
            .cloned()
            .collect();
        let removed: Vec<String> = old
            .keys()
            .filter(|k| !profiles.contains_key(*k))
            .cloned()
            .collect();
        let changed = !added.is_empty()
            || !removed.is_empty()
            || profiles
                .iter()
                .any(|(k, p)| old.get(k).is_none_or(|o| !Arc::ptr_eq(o, p)));
        *guard = Arc::new(profiles);
        (added, removed, changed)
    }

    pub fn scheduler_names(&self) -> Vec<String> {
        self.read().keys().cloned().collect()
    }
}

impl HintSource for ProfileRegistry {
    fn hints(&self, scheduler_name: &str) -> Option<Arc<QueueingHints>> {
        self.get(scheduler_name).map(|p| p.hints.clone())
    }

    fn interested_in(&self, event: &ClusterEvent) -> bool {
        self.read().values().any(|p| p.hints.interested_in(event))
    }

    fn pre_enqueue(
        &self,
        scheduler_name: &str,
        pod: &crate::scheduler::framework::pod_info::PodInfo,
    ) -> Option<&'static str> {
        self.get(scheduler_name)
            .and_then(|p| p.run_pre_enqueue(pod))
    }
}
