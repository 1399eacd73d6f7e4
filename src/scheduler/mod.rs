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

use std::sync::atomic::AtomicUsize;
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
    runtime: tokio::runtime::Handle,
    this: std::sync::Weak<Scheduler>,
}

impl Scheduler {
    pub fn new(
        queue: SchedulingQueue,
        profiles: Arc<ProfileRegistry>,
        metrics: Arc<Metrics>,
        reports: Reports,
        runtime: tokio::runtime::Handle,
    ) -> Arc<Self> {
        Arc::new_cyclic(|this| Scheduler {
            cache: Mutex::new(Cache::new()),
            queue,
            profiles,
            waiting_pods: WaitingPods::default(),
            metrics,
            reports,
            start_index: AtomicUsize::new(0),
            runtime,
            this: this.clone(),
        })
    }

    /// The cache, locked. Held only for short sections, never across an `.await`.
    pub fn lock_cache(&self) -> MutexGuard<'_, Cache> {
        self.cache.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Starts the binding cycle of an assumed pod on the tokio runtime.
    pub fn spawn_binding(&self, assumed: Assumed) {
        if let Some(sched) = self.this.upgrade() {
            self.runtime.spawn(binder::binding_cycle(sched, assumed));
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
