//! The embedded scheduler: queue, cache, the framework of extension points, plugins, binder.
//!
//! ```text
//! watches ──► cache (nodes, pods, assumed) ──snapshot──┐
//!        └──► queue (activeQ, backoffQ, unschedulable)─┴─► scheduling cycle (serial, one thread)
//!                                                              └─► binding cycle (tokio task per pod)
//! ```

pub mod binder;
pub mod cache;
pub mod compile;
pub mod cycle;
pub mod default_selectors;
pub mod framework;
pub mod labels;
pub mod metrics;
pub mod node_info;
pub mod node_selector;
pub mod plugins;
pub mod pod_info;
pub mod profile;
pub mod quantity;
pub mod queue;
pub mod report;
pub mod resource;
pub mod snapshot;
pub mod taints;
pub mod watch;

#[cfg(test)]
pub mod testing;

use std::collections::HashMap;
use std::sync::atomic::AtomicUsize;

use k8s_openapi::api::core::v1::Pod;
use std::sync::{Arc, Mutex, MutexGuard};

use self::cache::Cache;
use self::cycle::Assumed;
use self::framework::QueuedPodInfo;
use self::framework::waiting_pods::WaitingPods;
use self::metrics::Metrics;
use self::profile::ProfileRegistry;
use self::queue::SchedulingQueue;
use self::report::Reports;

/// Everything the scheduling loop, the binding cycles and the watches share.
pub struct Scheduler {
    pub cache: Mutex<Cache>,
    pub queue: SchedulingQueue,
    pub profiles: Arc<ProfileRegistry>,
    pub waiting_pods: WaitingPods,
    pub metrics: Arc<Metrics>,
    pub reports: Reports,
    /// Where the next Filter search starts, rotating over the nodes.
    pub start_index: AtomicUsize,
    /// Pending pods whose schedulerName no profile serves, by schedulerName then key: left
    /// alone, and queued as soon as a profile for them appears.
    unserved: Mutex<HashMap<String, HashMap<String, Arc<Pod>>>>,
    /// StickyBinding history writes, for profiles that run StickyNode or PlacementHistory.
    pub history: Option<Arc<crate::history::HistoryWriter>>,
    /// Owner metadata for workload resolution.
    pub owners: Arc<dyn crate::workload::OwnerLookup>,
    runtime: tokio::runtime::Handle,
    this: std::sync::Weak<Scheduler>,
}

/// What the scheduler needs besides its queue and profiles.
pub struct Services {
    pub metrics: Arc<Metrics>,
    pub reports: Reports,
    pub history: Option<Arc<crate::history::HistoryWriter>>,
    pub owners: Arc<dyn crate::workload::OwnerLookup>,
    pub runtime: tokio::runtime::Handle,
}

/// Whether `profile` runs a plugin that reads StickyBinding history: only then are the binds
/// of its pods recorded.
fn reads_history(profile: &profile::CompiledProfile) -> bool {
    [plugins::sticky_node::NAME, plugins::placement_history::NAME]
        .iter()
        .any(|n| profile.uses(n))
}

impl Scheduler {
    pub fn new(
        queue: SchedulingQueue,
        profiles: Arc<ProfileRegistry>,
        services: Services,
    ) -> Arc<Self> {
        let Services {
            metrics,
            reports,
            history,
            owners,
            runtime,
        } = services;
        Arc::new_cyclic(|this| Scheduler {
            cache: Mutex::new(Cache::new()),
            queue,
            profiles,
            waiting_pods: WaitingPods::default(),
            metrics,
            reports,
            start_index: AtomicUsize::new(0),
            unserved: Mutex::new(HashMap::new()),
            history,
            owners,
            runtime,
            this: this.clone(),
        })
    }

    /// The cache, locked. Held only for short sections, never across an `.await`.
    pub fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn lock_unserved(&self) -> MutexGuard<'_, HashMap<String, HashMap<String, Arc<Pod>>>> {
        self.unserved.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Records a pending pod no profile serves, or forgets it (`pod` None) once it is served,
    /// bound or deleted.
    pub fn set_unserved(&self, scheduler_name: &str, key: &str, pod: Option<Arc<Pod>>) {
        let mut unserved = self.lock_unserved();
        match pod {
            Some(pod) => {
                unserved
                    .entry(scheduler_name.to_string())
                    .or_default()
                    .insert(key.to_string(), pod);
            }
            None => {
                if let Some(pods) = unserved.get_mut(scheduler_name) {
                    pods.remove(key);
                }
            }
        }
    }

    /// Serves exactly `profiles` from now on (the profile controller's decision). Pods of a
    /// schedulerName no longer served leave the queue untouched; pods of a newly served one
    /// are queued; any change gives unschedulable pods another try.
    pub fn apply_profiles(&self, profiles: HashMap<String, Arc<profile::CompiledProfile>>) {
        let (added, removed, changed) = self.profiles.replace_all(profiles);
        for name in &removed {
            self.metrics.profile_serving(name, false);
            tracing::info!(scheduler = %name, "no profile serves this schedulerName any more; its pods are left alone");
            for info in self.queue.drain_scheduler(name) {
                self.set_unserved(name, &info.key(), Some(info.pod.clone()));
            }
        }
        for name in &added {
            self.metrics.profile_serving(name, true);
            let pods: Vec<Arc<Pod>> = self
                .lock_unserved()
                .remove(name)
                .map(|m| m.into_values().collect())
                .unwrap_or_default();
            for pod in pods {
                self.on_pod((*pod).clone());
            }
        }
        if changed {
            self.queue
                .move_all_to_active_or_backoff(queue::ClusterEvent::ProfileChanged);
        }
    }

    /// Starts the binding cycle of an assumed pod on the tokio runtime.
    pub fn spawn_binding(&self, assumed: Assumed) {
        if let Some(sched) = self.this.upgrade() {
            self.runtime.spawn(binder::binding_cycle(sched, assumed));
        }
    }

    /// Counts a bind in the workload's StickyBinding, off the binding cycle, when the profile
    /// runs a plugin that reads the history. Idempotent per pod UID.
    pub fn record_history(&self, profile: &profile::CompiledProfile, pod: &Arc<Pod>, node: &str) {
        let Some(history) = self.history.clone() else {
            return;
        };
        if !reads_history(profile) {
            return;
        }
        let workload = crate::workload::resolve(pod, self.owners.as_ref());
        if let Some(owner) = &workload.pending_owner {
            // Not this pod's binding to guess at; a restart's reconcile counts it later.
            tracing::warn!(pod = %format!("{}/{}", workload.namespace, pod.metadata.name.as_deref().unwrap_or_default()), owner = %owner, "the pod's owner is not known yet; its bind is not recorded now");
            self.metrics.history_write("failed");
            return;
        }
        let (pod, node, metrics) = (pod.clone(), node.to_string(), self.metrics.clone());
        self.runtime.spawn(async move {
            let result = match history.record(&workload, &pod, &node).await {
                Ok(crate::history::Recorded::Counted) => "recorded",
                Ok(crate::history::Recorded::AlreadyCounted) => "duplicate",
                Err(e) => {
                    tracing::warn!(error = %e, "could not record the bind in the StickyBinding");
                    "failed"
                }
            };
            metrics.history_write(result);
        });
    }

    /// After a (re)start: counts binds that were made but never recorded, as after a crash
    /// between a bind and its status write. A pod already in `recentBinds` is never counted
    /// twice. A pod is counted when its binding has recorded nothing since the pod was bound;
    /// without a binding, only when it was bound in the last ten minutes (an older one may have
    /// had its binding deleted by a person, to free the workload).
    pub fn reconcile_history(&self, bindings: &dyn crate::history::BindingLookup) {
        let pods = self.lock_cache().bound_pods();
        let now = jiff::Timestamp::now();
        for pod in pods {
            let scheduler_name = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_default();
            let Some(profile) = self.profiles.get(&scheduler_name) else {
                continue;
            };
            if !reads_history(&profile) {
                continue;
            }
            let bound_at = pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| {
                    cs.iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "True")
                })
                .and_then(|c| c.last_transition_time.as_ref().map(|t| t.0));
            let Some(bound_at) = bound_at else { continue };
            let workload = crate::workload::resolve(&pod, self.owners.as_ref());
            let missed = match bindings.get(&workload.namespace, &workload.binding_name()) {
                Some(b) => {
                    let status = b.status.clone().unwrap_or_default();
                    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
                    !status.recent_binds.iter().any(|r| r.pod_uid == uid)
                        && status
                            .last_schedule_time
                            .as_ref()
                            .is_none_or(|t| t.0 < bound_at)
                }
                None => now.duration_since(bound_at) < jiff::SignedDuration::from_mins(10),
            };
            if missed {
                let node = pod
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default();
                tracing::info!(pod = %format!("{}/{}", workload.namespace, pod.metadata.name.as_deref().unwrap_or_default()), node = %node, "recording a bind made before the restart");
                self.record_history(&profile, &pod, &node);
            }
        }
    }

    /// Reports a failed attempt (event and condition) off the scheduling thread.
    pub fn report_failure(&self, queued: &QueuedPodInfo, reason: &'static str, message: String) {
        let reports = self.reports.clone();
        let pod = queued.pod.pod.clone();
        self.runtime
            .spawn(async move { reports.failed(&pod, reason, &message).await });
    }

    /// The scheduling loop: pops pods and schedules them one at a time until the queue closes.
    /// Runs on its own thread: the cycle is CPU work and must not block the tokio workers.
    pub fn run_loop(self: &Arc<Self>) {
        while let Some(queued) = self.queue.pop() {
            cycle::schedule_one(self, queued);
            self.update_gauges();
        }
    }

    fn update_gauges(&self) {
        let (active, backoff, unschedulable, gated) = self.queue.lengths();
        for (name, n) in [
            ("active", active),
            ("backoff", backoff),
            ("unschedulable", unschedulable),
            ("gated", gated),
        ] {
            self.metrics
                .pending_pods
                .get_or_create(&metrics::QueueLabels { queue: name.into() })
                .set(n as i64);
        }
        let cache = self.lock_cache();
        self.metrics.cache_nodes.set(cache.node_count() as i64);
        self.metrics.cache_pods.set(cache.pod_count() as i64);
    }
}
