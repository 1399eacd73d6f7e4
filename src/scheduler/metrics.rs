//! Prometheus metrics of the scheduler, named after kube-scheduler's where one exists.

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// scheduled, unschedulable or error.
    pub result: String,
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HistoryLabels {
    /// recorded (the bind was counted), duplicate (it already was) or failed.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// active, backoff, unschedulable or gated.
    pub queue: String,
}

/// The scheduler's metrics; cheap to update from any thread.
pub struct Metrics {
    pub registry: Registry,
    attempts: Family<AttemptLabels, Counter>,
    attempt_duration: Family<AttemptLabels, Histogram>,
    binds: Family<ProfileLabels, Counter>,
    bind_failures: Family<ProfileLabels, Counter>,
    bind_duration: Family<ProfileLabels, Histogram>,
    history_writes: Family<HistoryLabels, Counter>,
    profiles_serving: Family<ProfileLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    pub pending_pods: Family<QueueLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    pub cache_nodes: Gauge<i64, std::sync::atomic::AtomicI64>,
    pub cache_pods: Gauge<i64, std::sync::atomic::AtomicI64>,
    leading: Family<LeaderLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
}

/// The label kube-scheduler's `leader_election_master_status` carries: the Lease's user.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub name: String,
}

fn buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}

impl Default for Metrics {
    fn default() -> Self {
        // tether's own metrics under `tether_`; kube-scheduler's names at the root.
        let mut root = Registry::default();
        let leading = Family::<LeaderLabels, Gauge<i64, std::sync::atomic::AtomicI64>>::default();
        root.register(
            "leader_election_master_status",
            "1 while this replica leads (holds the Lease, or runs without leader election), else 0",
            leading.clone(),
        );
        let registry = root.sub_registry_with_prefix("tether");
        let attempts = Family::<AttemptLabels, Counter>::default();
        let attempt_duration =
            Family::<AttemptLabels, Histogram>::new_with_constructor(buckets as fn() -> Histogram);
        let binds = Family::<ProfileLabels, Counter>::default();
        let bind_failures = Family::<ProfileLabels, Counter>::default();
        let bind_duration =
            Family::<ProfileLabels, Histogram>::new_with_constructor(buckets as fn() -> Histogram);
        let history_writes = Family::<HistoryLabels, Counter>::default();
        let profiles_serving = Family::default();
        let pending_pods = Family::default();
        let cache_nodes = Gauge::default();
        let cache_pods = Gauge::default();
        registry.register(
            "schedule_attempts",
            "Scheduling attempts by result and profile",
            attempts.clone(),
        );
        registry.register(
            "scheduling_attempt_duration_seconds",
            "Duration of a scheduling cycle, from pop to assumed (or failed)",
            attempt_duration.clone(),
        );
        registry.register("binds", "Pods bound", binds.clone());
        registry.register(
            "bind_failures",
            "Binds that failed and were retried",
            bind_failures.clone(),
        );
        registry.register(
            "binding_duration_seconds",
            "Duration of the binding cycle",
            bind_duration.clone(),
        );
        registry.register(
            "history_writes",
            "Binds reported to StickyBinding history, by result",
            history_writes.clone(),
        );
        registry.register(
            "profiles_serving",
            "1 for each schedulerName a SchedulingProfile serves in this process",
            profiles_serving.clone(),
        );
        registry.register(
            "pending_pods",
            "Pods in the scheduling queue by sub-queue",
            pending_pods.clone(),
        );
        registry.register(
            "cache_nodes",
            "Nodes in the scheduler cache",
            cache_nodes.clone(),
        );
        registry.register(
            "cache_pods",
            "Pods (bound and assumed) in the scheduler cache",
            cache_pods.clone(),
        );
        Metrics {
            registry: root,
            attempts,
            attempt_duration,
            binds,
            bind_failures,
            bind_duration,
            history_writes,
            profiles_serving,
            pending_pods,
            cache_nodes,
            cache_pods,
            leading,
        }
    }
}

impl Metrics {
    /// Whether this replica leads now.
    pub fn set_leading(&self, leading: bool) {
        self.leading
            .get_or_create(&LeaderLabels {
                name: "tether".into(),
            })
            .set(i64::from(leading));
    }

    /// Whether a profile serves `scheduler` now; a name no longer served leaves the metric.
    pub fn profile_serving(&self, scheduler: &str, serving: bool) {
        let labels = ProfileLabels {
            profile: scheduler.into(),
        };
        if serving {
            self.profiles_serving.get_or_create(&labels).set(1);
        } else {
            self.profiles_serving.remove(&labels);
        }
    }

    /// One bind reported to a StickyBinding: `recorded`, `duplicate` or `failed`.
    pub fn history_write(&self, result: &str) {
        self.history_writes
            .get_or_create(&HistoryLabels {
                result: result.into(),
            })
            .inc();
    }

    pub fn attempt(&self, result: &str, profile: &str, took: Duration) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn bound(&self, profile: &str, took: Duration) {
        let labels = ProfileLabels {
            profile: profile.into(),
        };
        self.binds.get_or_create(&labels).inc();
        self.bind_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    pub fn bind_failed(&self, profile: &str) {
        self.bind_failures
            .get_or_create(&ProfileLabels {
                profile: profile.into(),
            })
            .inc();
    }

    /// The text exposition of every metric.
    pub fn encode(&self) -> String {
        let mut out = String::new();
        if prometheus_client::encoding::text::encode(&mut out, &self.registry).is_err() {
            out.clear();
        }
        out
    }
}
