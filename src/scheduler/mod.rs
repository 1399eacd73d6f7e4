//! The embedded scheduler: the backend (queue, cache and the handlers that feed them), the
//! framework of extension points, the plugins, profiles, and one scheduling cycle at a time
//! with a binding cycle per pod. `docs/ARCHITECTURE.md` draws the data path.
//!
//! ```text
//! watches ──► cache (nodes, pods, assumed) ──snapshot──┐
//!        └──► queue (activeQ, backoffQ, unschedulable)─┴─► scheduling cycle (serial, one thread)
//!                                                              └─► binding cycle (tokio task per pod)
//! ```

pub mod algorithm;
pub mod backend;
pub mod batch;
pub mod binder;
pub mod binding;
pub mod composite_cycle;
pub mod composite_placement;
pub mod eventhandlers;
pub mod explain;
pub mod failure;
pub mod framework;
pub mod group_placement;
pub mod group_preemption;
pub mod group_status;
pub mod group_topology;
pub mod handoff;
pub mod informers;
pub mod metrics;
pub mod outcome;
pub mod plugins;
pub mod profile;
pub mod schedule_one;
pub mod schedule_one_group;

#[cfg(test)]
pub mod testing;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicUsize;

use k8s_openapi::api::core::v1::Node;
use std::sync::{Arc, Mutex, MutexGuard};

use self::backend::cache::Cache;
use self::backend::queue::SchedulingQueue;
use self::backend::room::NominatedRoom;
use self::binder::Binder;

use self::framework::events::PROFILE_CHANGE;
use self::framework::pod_info::PodInfo;
use self::framework::profile::{CompiledProfile, ProfileRegistry};
use self::informers::pod_groups::{GroupKey, PodGroupIndex};

use self::metrics::Metrics;
use self::outcome::Reports;
use crate::gate::WriteGate;
use crate::k8s::pod::Pod;
use crate::locks;
use crate::sticky::history::SchedulerView;
use crate::supervise::Fatal;
use crate::watch::Readiness;

/// The cache, the queue and the room kept in them: what the scheduler knows of pods and
/// nodes. Built first and shared: the history writer reads it (which pods the scheduler knows,
/// the nodes) before the scheduler that owns it exists.
#[derive(Clone)]
pub struct SchedulerState {
    pub cache: Arc<Mutex<Cache>>,
    pub queue: Arc<SchedulingQueue>,
    /// Pods nominated to nodes by preemption, waiting for the room made for them, and room
    /// held for pinned workloads whose pod left their pin (StickyNode's holdRoomSeconds).
    pub room: Arc<NominatedRoom>,
}

impl SchedulerState {
    /// An empty cache beside `queue`; the room holds counted in `metrics`.
    pub fn new(queue: SchedulingQueue, metrics: Arc<Metrics>) -> Self {
        let cache = Arc::new(Mutex::new(Cache::new()));
        let queue = Arc::new(queue);
        let room = Arc::new(NominatedRoom::new(queue.clone(), cache.clone(), metrics));
        SchedulerState { cache, queue, room }
    }

    /// Queues a pending pod `profile` serves, unless the cache holds it assumed (a watch event
    /// from before its cycle placed it): PreEnqueue decides whether it is gated; a nomination
    /// it carries in its status is noted. Returns whether it was queued.
    ///
    /// The nomination is noted under the cache's lock: a cycle assumes its pod under that lock
    /// and only then ends the pod's nomination, so an event that finds the pod not assumed
    /// notes it before the cycle ends it, never after. Noted after, it would outlive the
    /// assume: the pod counted twice on its node (assumed, and nominated for pods of its
    /// priority) until its bind's event, and a preemptor whose room there was freed finding
    /// none and evicting again.
    pub fn enqueue(&self, info: Arc<PodInfo>, profile: &CompiledProfile) -> bool {
        let given_up = {
            let cache = locks::lock(&self.cache);
            if cache.is_assumed(info.uid()) {
                return false;
            }
            self.room.nominator.observe(&info)
        };
        if let Some(gone) = given_up {
            self.room.given_up(&gone);
        }
        let gate = profile.run_pre_enqueue(&info);
        self.queue.add(info, gate);
        true
    }
}

impl SchedulerState {
    /// Bound or assumed in the cache, or pending in the queue. A pod that exists is known from
    /// the first watch event that shows it on.
    pub fn knows_pod(&self, uid: &str) -> bool {
        !matches!(self.pod_seen(uid), Seen::Gone)
    }
}

use crate::sticky::history::bounds::Seen;

impl SchedulerView for SchedulerState {
    /// Bound or assumed in the cache (with its bind time once its watch event brought its
    /// `PodScheduled` condition), or pending in the queue. A pod that exists is known from the
    /// first watch event that shows it on.
    fn pod_seen(&self, uid: &str) -> Seen {
        // The cache's lock is held while the queue is asked: a pod moves from the queue to the
        // cache under it, so it is never found in neither.
        let cache = locks::lock(&self.cache);
        if let Some(pod) = cache.pod(uid) {
            return crate::k8s::pods::bound_at(&pod).map_or(Seen::Unbound, Seen::BoundAt);
        }
        if cache.pod_node(uid).is_some() || self.queue.contains(uid) {
            Seen::Unbound
        } else {
            Seen::Gone
        }
    }

    fn node(&self, name: &str) -> Option<Arc<Node>> {
        locks::lock(&self.cache).node(name)
    }
}

/// Everything the scheduling loop, the binding cycles and the watches share.
pub struct Scheduler {
    /// What the scheduler knows: the cache, the queue and the room kept for pods (the history
    /// writer reads them too).
    pub state: SchedulerState,
    pub profiles: Arc<ProfileRegistry>,
    pub metrics: Arc<Metrics>,
    /// The failure reports, events and PodGroup conditions written for the cycles.
    pub reports: Reports,
    /// Where the next Filter search starts, rotating over the nodes.
    pub start_index: AtomicUsize,
    /// Whether every watch is current: scheduling waits while one fails or re-lists.
    pub readiness: Arc<Readiness>,
    /// PodGroups and their members, for the group scheduling cycle.
    pub pod_groups: Arc<PodGroupIndex>,
    /// The binding cycles: the pods waiting at Permit, the cycles spawned on the runtime under
    /// the fatal guard, and the write gate every bind asks.
    pub binder: Binder,
    /// Each group's last preemption, for `tether explain`.
    pub preemptions: group_preemption::Preemptions,
    /// The ranking kept for the next pod of the same signature (opportunistic batching).
    pub batch: batch::BatchSlot,
}

/// The queue's activator, with the cache to tell whether a preemption's victims are gone.
struct Activator {
    queue: Arc<SchedulingQueue>,
    cache: Arc<Mutex<Cache>>,
}

impl framework::PodActivator for Activator {
    fn activate(&self, pod: &Arc<Pod>) {
        self.queue.activate(pod);
    }
    fn preempting(&self, uid: &str) {
        self.queue.preempting(uid);
    }
    /// Whether the victims are gone is read from the cache once the hold has ended: the event
    /// handlers take a deletion out of the cache before they tell the queue, so a deletion
    /// either moved the pod after the hold or shows as gone here.
    fn preempted(&self, uid: &str, victims: &[Arc<Pod>]) {
        self.queue.preempted(uid, || {
            let cache = locks::lock(&self.cache);
            victims.iter().all(|v| {
                cache
                    .pod(v.metadata.uid.as_deref().unwrap_or_default())
                    .is_none()
            })
        });
    }
}

pub use self::backend::cache::BindObserver;

/// What the scheduler needs besides its queue and profiles.
pub struct Services {
    pub metrics: Arc<Metrics>,
    pub reports: Reports,
    pub readiness: Arc<Readiness>,
    pub runtime: tokio::runtime::Handle,
    pub fatal: Fatal,
    /// The write gate (only a leader binds).
    pub gate: WriteGate,
    /// PodGroups from their watch, and the pods naming each (kept by the pod watch).
    pub pod_groups: Arc<PodGroupIndex>,
}

impl Scheduler {
    /// A scheduler over `view`'s cache and queue.
    pub fn new(
        view: SchedulerState,
        profiles: Arc<ProfileRegistry>,
        services: Services,
    ) -> Arc<Self> {
        let Services {
            metrics,
            reports,
            readiness,
            runtime,
            fatal,
            gate,
            pod_groups,
        } = services;
        Arc::new(Scheduler {
            state: view,
            profiles,
            metrics,
            reports,
            start_index: AtomicUsize::new(0),
            readiness,
            pod_groups,
            binder: Binder::new(runtime, fatal, gate),
            preemptions: group_preemption::Preemptions::default(),
            batch: batch::BatchSlot::default(),
        })
    }

    /// The cache, locked. Held only for short sections, never across an `.await`.
    pub fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        locks::lock(&self.state.cache)
    }

    /// What plugins try pods again through (their handle's activator): the queue, told by the
    /// cache whether a preemption's victims are gone.
    pub fn activator(&self) -> Arc<dyn framework::PodActivator> {
        Arc::new(Activator {
            queue: self.state.queue.clone(),
            cache: self.state.cache.clone(),
        })
    }

    /// The pods bound now (the watch confirmed them); from this moment on, each pod found bound
    /// that this scheduler did not bind goes to `observer`. One step under the cache's lock, so
    /// that every such bind is either in the list or told to `observer` (some may be both).
    pub fn bound_pods_then_observe(&self, observer: BindObserver) -> Vec<Arc<Pod>> {
        self.lock_cache().bound_pods_then_observe(observer)
    }

    /// Whether the scheduler knows the pod of `uid`: bound or assumed in the cache, or pending
    /// in the queue (see [`SchedulerState`]).
    pub fn knows_pod(&self, uid: &str) -> bool {
        self.state.knows_pod(uid)
    }

    /// The Node object of `name` the cache holds, while the node exists.
    pub fn node(&self, name: &str) -> Option<Arc<Node>> {
        self.state.node(name)
    }

    /// Serves exactly `profiles` from now on (the profile controller's decision). Pods of a
    /// schedulerName no longer served move to the queue's unserved pool; pods of a newly served
    /// one are queued from it; any change gives unschedulable pods another try.
    pub fn apply_profiles(&self, profiles: HashMap<String, Arc<CompiledProfile>>) {
        for (name, profile) in &profiles {
            self.metrics.evaluations_from_zero(name, profile);
        }
        let (added, removed, changed) = self.profiles.replace_all(profiles);
        for name in &removed {
            self.metrics.profile_serving(name, false);
            tracing::info!(scheduler = %name, "no profile serves this schedulerName any more; its pods are left alone");
            self.state.queue.unserve(name);
        }
        for name in &added {
            self.metrics.profile_serving(name, true);
            let Some(profile) = self.profiles.get(name) else {
                continue;
            };
            self.serve_unserved(name, &profile);
        }
        if changed {
            self.state.queue.on_event(PROFILE_CHANGE, None, None);
        }
    }

    /// Queues the pods of `scheduler_name` that waited in the unserved pool, now that `profile`
    /// serves them. Whoever calls it first takes them; a pod is never queued twice.
    pub fn serve_unserved(&self, scheduler_name: &str, profile: &Arc<CompiledProfile>) {
        for info in self.state.queue.take_unserved(scheduler_name) {
            self.state.enqueue(info, profile);
        }
    }

    /// The explanation of `pod` on the scheduler's snapshot now, with the profile that serves
    /// it: a cycle run dry and written down, a pending gang member's group dry-run within
    /// `limits`, and the room held in the pod's own namespace (another namespace's holds name its
    /// workloads, which the caller may not read).
    pub fn explain(
        &self,
        mut pod: Pod,
        limits: explain::GroupLimits,
    ) -> Result<explain::Explanation, String> {
        let scheduler_name = crate::k8s::pods::scheduler_name(&pod).to_string();
        let Some(profile) = self.profiles.get(&scheduler_name) else {
            return Err(format!(
                "no SchedulingProfile of this tether serves schedulerName {scheduler_name:?}"
            ));
        };
        let snapshot = {
            let mut cache = self.lock_cache();
            // Assumed but not bound yet: explained as bound to the node it is assumed on.
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let unbound = pod.spec.as_ref().is_none_or(|s| s.node_name.is_none());
            if unbound && let Some(node) = cache.pod_node(&uid).map(str::to_string) {
                pod.spec.get_or_insert_default().node_name = Some(node);
            }
            cache.snapshot()
        };
        let nominated = self.state.room.for_pod(&profile, &pod);
        let mut explanation = explain::explain_pod(&profile, &pod, &snapshot, &nominated);
        let pending = pod.spec.as_ref().is_none_or(|s| s.node_name.is_none());
        let hierarchy = pending
            .then(|| self::plugins::gangs::hierarchy_of_pod(&self.pod_groups, &profile, &pod))
            .flatten();
        if pending {
            // The group's (or its hierarchy's) last preemption, by its entity key.
            let entity = match &hierarchy {
                Some((root, _)) => Some(root.to_string()),
                None => informers::pod_groups::group_of(&pod)
                    .filter(|k| k.api == informers::pod_groups::GroupApi::Workload)
                    .map(|k| format!("podgroup/{k}")),
            };
            explanation.preemption = entity.and_then(|e| self.preemptions.last(&e));
        }
        if let Some((root, tree)) = &hierarchy {
            explanation.hierarchy = Some(explain::explain_hierarchy(&self.pod_groups, root, tree));
        } else if pending
            && let Some(gang) = self::plugins::gangs::gang_of_pod(&self.pod_groups, &profile, &pod)
        {
            let members = self
                .state
                .queue
                .pending_of_group(|p| gang.key.has_member(p));
            let uids: std::collections::HashSet<&str> = members.iter().map(|m| m.uid()).collect();
            let scheduled = self.scheduled_before(&gang.key, &uids);
            let explained = explain::Gang {
                pod_group: gang.key.to_string(),
                min_count: gang.min_count,
                scheduled_before: scheduled.len(),
            };
            // A group placed within one domain of its topology key: domain by domain.
            let domains = group_topology::key_of(&gang, profile.release)
                .map(|key| group_topology::domains(&snapshot, &key, &scheduled));
            explanation.group = Some(match domains {
                Some(Ok(domains)) => explain::explain_domains(
                    &profile, &explained, members, &snapshot, &nominated, limits, &domains,
                ),
                Some(Err(why)) => explain::GroupExplanation {
                    pod_group: explained.pod_group,
                    min_count: explained.min_count,
                    scheduled_before: explained.scheduled_before,
                    verdict: format!("cannot determine domain for already scheduled pods: {why}"),
                    ..Default::default()
                },
                None => explain::explain_group(
                    &profile,
                    explained.pod_group,
                    explained.min_count,
                    explained.scheduled_before,
                    members,
                    &snapshot,
                    &nominated,
                    limits,
                ),
            });
        }
        let own = profile.holds_key(&pod);
        // Only the holds of the pod's own namespace (the caller may get pods there): another
        // namespace's holds name its workloads, which the caller may not read.
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        explanation.held = self
            .state
            .room
            .holds
            .active()
            .into_iter()
            .filter(|(key, _)| Some(key) != own.as_ref())
            .filter(|(_, hold)| {
                hold.pod.pod.metadata.namespace.as_deref() == Some(namespace.as_str())
            })
            .map(|(_, hold)| explain::HeldRoom {
                workload: hold.workload,
                node: hold.node,
                until: hold.until_wall.to_string(),
                requests: explain::held_requests(&hold.pod),
            })
            .collect();
        Ok(explanation)
    }

    /// The pods of the group `key` assumed or bound already (in the cache), but those in
    /// `pending`: what upstream counts as the group's scheduled pods.
    pub fn scheduled_before(
        &self,
        key: &GroupKey,
        pending: &HashSet<&str>,
    ) -> Vec<Arc<crate::k8s::pod::Pod>> {
        let members = self.pod_groups.members(key);
        let cache = self.lock_cache();
        members
            .iter()
            .filter(|uid| !pending.contains(uid.as_str()))
            .filter_map(|uid| cache.pod(uid))
            .collect()
    }

    /// Waits until no binding cycle runs (their binds and history writes are done), at most
    /// `grace`; returns how many still run.
    pub async fn wait_binding_cycles(&self, grace: std::time::Duration) -> usize {
        self.binder.cycles.wait(grace).await
    }
}
