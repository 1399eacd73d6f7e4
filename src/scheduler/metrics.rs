//! Prometheus metrics of the scheduler, named after kube-scheduler's where one exists; the
//! process's own (`process.rs`) and the API client's (`k8s::client_metrics`) beside them.

pub mod cycle;
pub mod groups;
mod labels;
mod process;
mod profiles;

use std::collections::HashSet;
use std::sync::Mutex;
use std::time::Duration;

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

use crate::k8s::client_metrics::RequestMetrics;
use crate::locks;

pub use self::labels::*;
pub use self::process::ProcessCollector;

/// An integer gauge.
type IntGauge = Gauge<i64, std::sync::atomic::AtomicI64>;
/// A gauge of seconds.
type SecondsGauge = Gauge<f64, std::sync::atomic::AtomicU64>;

/// The scheduler's metrics; cheap to update from any thread.
pub struct Metrics {
    pub registry: Registry,
    attempts: Family<AttemptLabels, Counter>,
    attempt_duration: Family<AttemptLabels, Histogram>,
    binds: Family<ProfileLabels, Counter>,
    bind_failures: Family<ProfileLabels, Counter>,
    bind_duration: Family<ProfileLabels, Histogram>,
    history_writes: Family<HistoryLabels, Counter>,
    events_dropped: Counter,
    profiles_serving: Family<ProfileLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    /// `tether_schedulingprofile_ready{schedulingprofile,profile}`, and the label sets it
    /// holds now (a deleted profile's leaves).
    profiles_ready: Family<SchedulingProfileLabels, IntGauge>,
    profiles_ready_now: Mutex<HashSet<SchedulingProfileLabels>>,
    /// `tether_schedulingprofile_condition{schedulingprofile,type,status}`, and the label sets
    /// it holds now.
    profile_conditions: Family<SchedulingProfileConditionLabels, IntGauge>,
    profile_conditions_now: Mutex<HashSet<SchedulingProfileConditionLabels>>,
    pending_pods: Family<QueueLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    /// `tether_oldest_pending_pod_seconds{queue}`.
    oldest_pending: Family<QueueLabels, SecondsGauge>,
    pub cache_nodes: Gauge<i64, std::sync::atomic::AtomicI64>,
    pub cache_pods: Gauge<i64, std::sync::atomic::AtomicI64>,
    lease_unreachable: Gauge<i64, std::sync::atomic::AtomicI64>,
    watch_current: Family<WatchLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    history_denied: Gauge<i64, std::sync::atomic::AtomicI64>,
    sessions_held: Gauge<i64, std::sync::atomic::AtomicI64>,
    release_info: Family<ReleaseLabels, IntGauge>,
    room_holds: Gauge<i64, std::sync::atomic::AtomicI64>,
    room_holds_ended: Family<HoldEndLabels, Counter>,
    leading: Family<LeaderLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    upstream: Upstream,
    /// kube-scheduler's families of attempts, Permit waits, plugin runs, the cache and claims.
    cycle: cycle::CycleFamilies,
    /// client-go's request metrics of tether's API client.
    api_requests: RequestMetrics,
}

/// kube-scheduler's own metrics, with its names, labels and bucket boundaries, so that the
/// dashboards and alerts written for it work on tether.
struct Upstream {
    /// `scheduler_schedule_attempts_total{result,profile}`: scheduled (once bound),
    /// unschedulable, error.
    attempts: Family<AttemptLabels, Counter>,
    /// `scheduler_scheduling_attempt_duration_seconds{result,profile}`: from the start of the
    /// scheduling cycle to its end, or to the end of the bind for a scheduled pod.
    attempt_duration: Family<AttemptLabels, Histogram>,
    /// `scheduler_pod_scheduling_sli_duration_seconds{attempts}`: from the pod's first entry in
    /// the queue to its bind.
    sli: Family<SliLabels, Histogram>,
    /// `scheduler_pending_pods{queue}`.
    pending_pods: Family<QueueLabels, Gauge<i64, std::sync::atomic::AtomicI64>>,
    /// `scheduler_framework_extension_point_duration_seconds{extension_point,status,profile}`.
    extension_points: Family<ExtensionPointLabels, Histogram>,
    /// `scheduler_queue_incoming_pods_total{queue,event}`.
    queue_incoming: Family<IncomingLabels, Counter>,
    /// `scheduler_plugin_execution_duration_seconds{plugin,extension_point,status}`, for a
    /// sample of the scheduling cycles.
    plugin_execution: Family<PluginLabels, Histogram>,
    /// `scheduler_unschedulable_pods{plugin,profile}`: pods waiting in the queue after a
    /// rejection, counted under every plugin that rejected them; a label set once seen stays,
    /// at 0 when no pod waits for it, as upstream's gauge.
    unschedulable_pods: Family<UnschedulableLabels, IntGauge>,
    unschedulable_seen: Mutex<HashSet<UnschedulableLabels>>,
    /// `scheduler_preemption_attempts_total`: every run of DefaultPreemption's PostFilter.
    preemption_attempts: Counter,
    /// `scheduler_preemption_victims`: the victims of each preemption decided.
    preemption_victims: Histogram,
    /// `scheduler_workload_preemption_attempts_total{preemptor,result}`: every run of a pod
    /// group's preemption.
    workload_preemption_attempts: Family<WorkloadPreemptionLabels, Counter>,
    /// `scheduler_workload_preemption_victims{preemptor}`: the pods each group preemption
    /// decided evicts.
    workload_preemption_victims: Family<PreemptorLabels, Histogram>,
    /// `scheduler_preemption_workload_disruptions{preemptor,victim}`: the units it evicts, by
    /// kind.
    workload_disruptions: Family<DisruptionLabels, Histogram>,
    /// `scheduler_preemption_pdb_violations_total{preemptor}`: victims a budget did not let go.
    pdb_violations: Family<PreemptorLabels, Counter>,
    /// `scheduler_generated_placements_total{profile,entity}`: the placements (topology
    /// domains) generated for groups.
    generated_placements: Family<GroupSearchLabels, Counter>,
    /// `scheduler_placement_evaluations_total{result,profile,entity}`: placements tried, by
    /// `feasible` or `infeasible`.
    placement_evaluations: Family<GroupAttemptLabels, Counter>,
    /// `scheduler_placement_evaluation_duration_seconds{result,profile,entity}`.
    placement_evaluation_duration: Family<GroupAttemptLabels, Histogram>,
    /// `scheduler_scheduling_algorithm_duration_seconds`: from the start of the cycle to the
    /// end of the search for a node (PostFilter included).
    algorithm_duration: Histogram,
    /// `scheduler_podgroup_schedule_attempts_total{result,profile,entity}`: each group cycle,
    /// by its result (scheduled, unschedulable, error).
    podgroup_attempts: Family<GroupAttemptLabels, Counter>,
    /// `scheduler_podgroup_scheduling_attempt_duration_seconds{result,profile,entity}`.
    podgroup_attempt_duration: Family<GroupAttemptLabels, Histogram>,
    /// `scheduler_podgroup_scheduling_algorithm_duration_seconds{profile,entity}`: the search
    /// for the members' nodes.
    podgroup_algorithm_duration: Family<GroupSearchLabels, Histogram>,
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
        let upstream = Upstream {
            attempts: Family::default(),
            attempt_duration: Family::new_with_constructor(attempt_buckets as fn() -> Histogram),
            sli: Family::new_with_constructor(sli_buckets as fn() -> Histogram),
            pending_pods: Family::default(),
            extension_points: Family::new_with_constructor(
                extension_point_buckets as fn() -> Histogram,
            ),
            queue_incoming: Family::default(),
            plugin_execution: Family::new_with_constructor(plugin_buckets as fn() -> Histogram),
            unschedulable_pods: Family::default(),
            unschedulable_seen: Mutex::default(),
            preemption_attempts: Counter::default(),
            preemption_victims: victim_buckets(),
            workload_preemption_attempts: Family::default(),
            workload_preemption_victims: Family::new_with_constructor(
                workload_victim_buckets as fn() -> Histogram,
            ),
            workload_disruptions: Family::new_with_constructor(
                workload_victim_buckets as fn() -> Histogram,
            ),
            pdb_violations: Family::default(),
            generated_placements: Family::default(),
            placement_evaluations: Family::default(),
            placement_evaluation_duration: Family::new_with_constructor(
                attempt_buckets as fn() -> Histogram,
            ),
            algorithm_duration: attempt_buckets(),
            podgroup_attempts: Family::default(),
            podgroup_attempt_duration: Family::new_with_constructor(
                attempt_buckets as fn() -> Histogram,
            ),
            podgroup_algorithm_duration: Family::new_with_constructor(
                attempt_buckets as fn() -> Histogram,
            ),
        };
        root.register(
            "scheduler_unschedulable_pods",
            "The number of unschedulable pods broken down by plugin name. A pod will increment the gauge for all plugins that caused it to not schedule and so this metric have meaning only when broken down by plugin.",
            upstream.unschedulable_pods.clone(),
        );
        root.register(
            "scheduler_preemption_attempts",
            "Total preemption attempts in the cluster till now",
            upstream.preemption_attempts.clone(),
        );
        root.register(
            "scheduler_preemption_victims",
            "Number of selected preemption victims",
            upstream.preemption_victims.clone(),
        );
        root.register(
            "scheduler_workload_preemption_attempts",
            "Total preemption attempts initiated by workload (either pod groups or composite pod groups) in the cluster till now.",
            upstream.workload_preemption_attempts.clone(),
        );
        root.register(
            "scheduler_workload_preemption_victims",
            "Number of pod preemption victims caused by workload preemption (either pod groups or composite pod groups).",
            upstream.workload_preemption_victims.clone(),
        );
        root.register(
            "scheduler_preemption_workload_disruptions",
            "Number of preemption units evicted by a single workload preemption (either pod groups or composite pod groups), by victim type.",
            upstream.workload_disruptions.clone(),
        );
        root.register(
            "scheduler_preemption_pdb_violations",
            "Total number of pod disruption budget violations caused by preemption.",
            upstream.pdb_violations.clone(),
        );
        root.register(
            "scheduler_generated_placements",
            "Number of placements generated by the scheduler for pod groups.",
            upstream.generated_placements.clone(),
        );
        root.register(
            "scheduler_placement_evaluations",
            "Number of placement evaluations, by result ('feasible' or 'infeasible').",
            upstream.placement_evaluations.clone(),
        );
        root.register(
            "scheduler_placement_evaluation_duration_seconds",
            "Duration of a single placement evaluation, by result ('feasible' or 'infeasible').",
            upstream.placement_evaluation_duration.clone(),
        );
        root.register(
            "scheduler_scheduling_algorithm_duration_seconds",
            "Scheduling algorithm latency in seconds",
            upstream.algorithm_duration.clone(),
        );
        root.register(
            "scheduler_podgroup_schedule_attempts",
            "Number of attempts to schedule pod groups, by the result. 'unschedulable' means a pod group could not be scheduled, while 'error' means an internal scheduler problem.",
            upstream.podgroup_attempts.clone(),
        );
        root.register(
            "scheduler_podgroup_scheduling_attempt_duration_seconds",
            "Pod group scheduling attempt latency in seconds (scheduling algorithm + binding)",
            upstream.podgroup_attempt_duration.clone(),
        );
        root.register(
            "scheduler_podgroup_scheduling_algorithm_duration_seconds",
            "Pod group scheduling algorithm latency in seconds",
            upstream.podgroup_algorithm_duration.clone(),
        );
        let cycle = cycle::CycleFamilies::register(&mut root);
        root.register_collector(Box::new(ProcessCollector));
        let api_requests = RequestMetrics::default();
        root.register(
            "rest_client_requests",
            "Number of HTTP requests, partitioned by status code, method, and host.",
            api_requests.requests.clone(),
        );
        root.register(
            "rest_client_request_duration_seconds",
            "Request latency in seconds. Broken down by verb, and host.",
            api_requests.latency.clone(),
        );
        root.register(
            "scheduler_queue_incoming_pods",
            "Number of pods added to scheduling queues by event and queue type.",
            upstream.queue_incoming.clone(),
        );
        root.register(
            "scheduler_plugin_execution_duration_seconds",
            "Duration for running a plugin at a specific extension point.",
            upstream.plugin_execution.clone(),
        );
        root.register(
            "scheduler_framework_extension_point_duration_seconds",
            "Latency for running all plugins of a specific extension point.",
            upstream.extension_points.clone(),
        );
        root.register(
            "scheduler_schedule_attempts",
            "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod could not be scheduled, while 'error' means an internal scheduler problem.",
            upstream.attempts.clone(),
        );
        root.register(
            "scheduler_scheduling_attempt_duration_seconds",
            "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
            upstream.attempt_duration.clone(),
        );
        root.register(
            "scheduler_pod_scheduling_sli_duration_seconds",
            "E2e latency for a pod being scheduled, from the time the pod enters the scheduling queue and might involve multiple scheduling attempts.",
            upstream.sli.clone(),
        );
        root.register(
            "scheduler_pending_pods",
            "Number of pending pods, by the queue type. 'active' means number of pods in activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means number of pods in unschedulablePods; 'gated' is the number of unschedulable pods that are gated.",
            upstream.pending_pods.clone(),
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
        // At 0 from the start: a rate or an alert sees the first failure.
        for result in ["recorded", "duplicate", "failed"] {
            history_writes
                .get_or_create(&HistoryLabels {
                    result: result.into(),
                })
                .inc_by(0);
        }
        let events_dropped = Counter::default();
        let profiles_serving = Family::default();
        let profiles_ready = Family::default();
        let profile_conditions = Family::default();
        let pending_pods = Family::default();
        let oldest_pending = Family::default();
        let cache_nodes = Gauge::default();
        let cache_pods = Gauge::default();
        let lease_unreachable = Gauge::default();
        let watch_current = Family::default();
        let history_denied = Gauge::default();
        let sessions_held = Gauge::default();
        registry.register(
            "sessions_held",
            "Scheduler sessions whose caches are still in memory: 1 for the current one; more means a session whose term is over was not freed",
            sessions_held.clone(),
        );
        let room_holds = Gauge::default();
        let release_info = Family::<ReleaseLabels, IntGauge>::default();
        registry.register(
            "kubernetes_release_info",
            "1, labelled with the Kubernetes minor tether schedules as and the API server's version",
            release_info.clone(),
        );
        let build_info = Family::<BuildLabels, IntGauge>::default();
        build_info
            .get_or_create(&BuildLabels {
                version: env!("CARGO_PKG_VERSION"),
                commit: env!("TETHER_COMMIT"),
            })
            .set(1);
        registry.register(
            "build_info",
            "1, labelled with the version and commit tether was built from",
            build_info,
        );
        registry.register(
            "schedulingprofile_ready",
            "1 while a SchedulingProfile's Ready condition is True (its generation serves), 0 while it is False",
            profiles_ready.clone(),
        );
        registry.register(
            "schedulingprofile_condition",
            "1 for each condition a SchedulingProfile's status holds, labelled with its type and status (Ready, NamespaceDefaulting, HistoryWritable, ...), as the leader last wrote it",
            profile_conditions.clone(),
        );
        registry.register(
            "oldest_pending_pod_seconds",
            "How long the longest-waiting pod of each sub-queue has waited since it entered the queue (on the replica that leads; 0 on a standby)",
            oldest_pending.clone(),
        );
        registry.register(
            "room_holds",
            "Rooms held now for pinned workloads whose pod left their pin (StickyNode holdRoomSeconds)",
            room_holds.clone(),
        );
        let room_holds_ended = Family::<HoldEndLabels, Counter>::default();
        for how in ["claimed", "expired"] {
            room_holds_ended
                .get_or_create(&HoldEndLabels { how })
                .inc_by(0);
        }
        registry.register(
            "room_holds_ended",
            "Room holds ended, by how: claimed (the workload's pod was bound again) or expired; refused: a hold not taken, past maxHeldRoomsPerNamespace or maxHeldRooms",
            room_holds_ended.clone(),
        );
        registry.register(
            "history_denied",
            "1 while StickyBinding history writes have been denied (401/403) for 30 s or more; the binds wait",
            history_denied.clone(),
        );
        registry.register(
            "watch_current",
            "1 while a watch is current, 0 while it fails or re-lists (what needs it waits)",
            watch_current.clone(),
        );
        registry.register(
            "watch_objects_skipped",
            "Objects a watch could not read (nested past the decoder's limit, a number or time out of range) and skipped, treated as absent, by watch",
            crate::k8s::client_metrics::skipped_objects(),
        );
        registry.register(
            "lease_unreachable",
            "1 while this replica, a candidate for leadership, cannot read or take its Lease (the reason is in /readyz and the log)",
            lease_unreachable.clone(),
        );
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
            "events_dropped",
            "Scheduled events dropped because their queue was full (binds outpaced the events budget)",
            events_dropped.clone(),
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
        let metrics = Metrics {
            registry: root,
            attempts,
            attempt_duration,
            binds,
            bind_failures,
            bind_duration,
            history_writes,
            events_dropped,
            profiles_serving,
            profiles_ready,
            profiles_ready_now: Mutex::default(),
            profile_conditions,
            profile_conditions_now: Mutex::default(),
            pending_pods,
            oldest_pending,
            cache_nodes,
            cache_pods,
            lease_unreachable,
            watch_current,
            history_denied,
            sessions_held,
            release_info,
            room_holds,
            room_holds_ended,
            leading,
            upstream,
            cycle,
            api_requests,
        };
        metrics.process_families_from_zero();
        metrics
    }
}

impl Metrics {
    /// The Kubernetes minor tether schedules as, and the version the API server said.
    pub fn set_release(&self, release: crate::k8s::release::Release, apiserver: &str) {
        self.release_info.clear();
        self.release_info
            .get_or_create(&ReleaseLabels {
                release: release.to_string(),
                apiserver: apiserver.to_string(),
            })
            .set(1);
    }

    /// Whether this replica leads now.
    pub fn set_leading(&self, leading: bool) {
        self.leading
            .get_or_create(&LeaderLabels {
                name: "tether".into(),
            })
            .set(i64::from(leading));
    }

    /// Whether this replica, a candidate, cannot read or take its Lease now.
    pub fn set_lease_unreachable(&self, unreachable: bool) {
        self.lease_unreachable.set(i64::from(unreachable));
    }

    /// How many rooms are held now.
    pub fn set_room_holds(&self, holds: usize) {
        self.room_holds
            .set(i64::try_from(holds).unwrap_or(i64::MAX));
    }

    /// A room hold ended: `how` is `claimed` or `expired`.
    pub fn room_hold_ended(&self, how: &'static str) {
        self.room_holds_ended
            .get_or_create(&HoldEndLabels { how })
            .inc();
    }

    /// Whether history writes are denied for long now.
    pub fn set_history_denied(&self, denied: bool) {
        self.history_denied.set(i64::from(denied));
    }

    /// How many scheduler sessions are still in memory (the current one included).
    pub fn set_sessions_held(&self, held: usize) {
        self.sessions_held
            .set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    /// Whether each watch is current now (set when the metrics are read).
    pub fn set_watches_current(&self, watches: &[(String, bool)]) {
        for (watch, current) in watches {
            self.watch_current
                .get_or_create(&WatchLabels {
                    watch: watch.clone(),
                })
                .set(i64::from(*current));
        }
    }

    /// Whether a profile serves `scheduler` now; a name no longer served leaves the metric. A
    /// name served starts its bind counters at 0, so that a rate or an alert sees its first
    /// bind and its first failure.
    pub fn profile_serving(&self, scheduler: &str, serving: bool) {
        let labels = ProfileLabels {
            profile: scheduler.into(),
        };
        if serving {
            self.profiles_serving.get_or_create(&labels).set(1);
            self.binds.get_or_create(&labels).inc_by(0);
            self.bind_failures.get_or_create(&labels).inc_by(0);
            self.group_families_from_zero(scheduler);
        } else {
            self.profiles_serving.remove(&labels);
        }
    }

    /// What the queue holds now, read when `/metrics` is scraped: each sub-queue's pods and
    /// its oldest pod's wait (tether's `pending_pods` and `oldest_pending_pod_seconds`,
    /// kube-scheduler's `scheduler_pending_pods`), and the pods waiting after a rejection by
    /// (plugin, schedulerName) (`scheduler_unschedulable_pods`; pairs not named are 0).
    pub fn set_queue<'a>(
        &self,
        queues: &[PendingQueue<'_>],
        rejected: impl IntoIterator<Item = (&'a str, &'a str, usize)>,
    ) {
        for pending in queues {
            self.set_pending(pending.queue, pending.pods);
            self.oldest_pending
                .get_or_create(&QueueLabels {
                    queue: pending.queue.into(),
                })
                .set(pending.oldest.map_or(0.0, |d| d.as_secs_f64()));
        }
        let mut seen = locks::lock(&self.upstream.unschedulable_seen);
        let mut now = HashSet::new();
        for (plugin, profile, pods) in rejected {
            let labels = UnschedulableLabels {
                plugin: plugin.into(),
                profile: profile.into(),
            };
            self.upstream
                .unschedulable_pods
                .get_or_create(&labels)
                .set(i64::try_from(pods).unwrap_or(i64::MAX));
            now.insert(labels);
        }
        for gone in seen.difference(&now) {
            self.upstream.unschedulable_pods.get_or_create(gone).set(0);
        }
        seen.extend(now);
    }

    /// DefaultPreemption's PostFilter ran (kube-scheduler counts every run); `victims`: how
    /// many pods the preemption it decided evicts, when it decided one.
    pub fn preemption_attempt(&self, victims: Option<usize>) {
        self.upstream.preemption_attempts.inc();
        if let Some(victims) = victims {
            self.upstream.preemption_victims.observe(victims as f64);
        }
    }

    /// The search for a node (Filter, Score, PostFilter) ended `took` after the cycle began.
    pub fn scheduling_algorithm(&self, took: Duration) {
        self.upstream.algorithm_duration.observe(took.as_secs_f64());
    }

    /// The API client's request metrics (client-go's `rest_client_*`), registered here: a
    /// client built with [`crate::k8s::client::build_counted`] counts into them.
    pub fn api_requests(&self) -> RequestMetrics {
        self.api_requests.clone()
    }

    /// One bind reported to a StickyBinding: `recorded`, `duplicate` or `failed`.
    pub fn history_write(&self, result: &str) {
        self.history_writes
            .get_or_create(&HistoryLabels {
                result: result.into(),
            })
            .inc();
    }

    /// A scheduling cycle ended: `scheduled` (the pod was assumed), `unschedulable` or `error`.
    /// kube-scheduler's attempt metrics count a failed cycle now and a scheduled pod once bound
    /// ([`Metrics::pod_scheduled`]).
    pub fn attempt(&self, result: &str, profile: &str, took: Duration) {
        let labels = AttemptLabels {
            result: result.into(),
            profile: profile.into(),
        };
        self.attempts.get_or_create(&labels).inc();
        self.attempt_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        if result != "scheduled" {
            self.upstream_attempt(labels, took);
        }
    }

    fn upstream_attempt(&self, labels: AttemptLabels, took: Duration) {
        self.upstream.attempts.get_or_create(&labels).inc();
        self.upstream
            .attempt_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// A pod was bound: `since_cycle` since its scheduling cycle began, `since_queued` since it
    /// first entered the queue, after `attempts` attempts.
    pub fn pod_scheduled(
        &self,
        profile: &str,
        since_cycle: Duration,
        since_queued: Duration,
        attempts: u32,
    ) {
        let labels = AttemptLabels {
            result: "scheduled".into(),
            profile: profile.into(),
        };
        self.upstream_attempt(labels, since_cycle);
        self.upstream
            .sli
            .get_or_create(&SliLabels {
                attempts: attempts_label(attempts),
            })
            .observe(since_queued.as_secs_f64());
        self.observe_pod_attempts(attempts);
    }

    /// Extension point `point` (kube-scheduler's name: PreFilter, Score, Bind…) of `profile` ran
    /// for `took` and ended with `code`.
    pub fn extension_point(
        &self,
        point: &str,
        code: crate::scheduler::framework::Code,
        profile: &str,
        took: Duration,
    ) {
        self.upstream
            .extension_points
            .get_or_create(&ExtensionPointLabels {
                extension_point: point.into(),
                status: format!("{code:?}"),
                profile: profile.into(),
            })
            .observe(took.as_secs_f64());
    }

    /// The counter of `Scheduled` events dropped, for the reports.
    pub fn events_dropped(&self) -> Counter {
        self.events_dropped.clone()
    }

    /// A counter of the pods entering each sub-queue, for the scheduling queue.
    pub fn queue_incoming(&self) -> impl Fn(&'static str, &str) + Send + Sync + 'static {
        let family = self.upstream.queue_incoming.clone();
        move |queue: &'static str, event: &str| {
            family
                .get_or_create(&IncomingLabels {
                    queue: queue.into(),
                    event: event.into(),
                })
                .inc();
        }
    }

    /// Plugin runs timed in a sampled cycle: each is observed in kube-scheduler's plugin
    /// histogram.
    pub fn plugin_runs(&self, runs: &[crate::scheduler::framework::PluginRun]) {
        for run in runs {
            self.upstream
                .plugin_execution
                .get_or_create(&PluginLabels {
                    plugin: run.plugin.into(),
                    extension_point: run.point.into(),
                    status: format!("{:?}", run.code),
                })
                .observe(run.took.as_secs_f64());
        }
    }

    /// How many pods wait in each sub-queue: active, backoff, unschedulable, gated.
    pub fn set_pending(&self, queue: &str, pods: usize) {
        let labels = QueueLabels {
            queue: queue.into(),
        };
        let pods = i64::try_from(pods).unwrap_or(i64::MAX);
        self.pending_pods.get_or_create(&labels).set(pods);
        self.upstream.pending_pods.get_or_create(&labels).set(pods);
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

    /// A binding cycle failed `since_cycle` after its scheduling cycle began: an `unschedulable`
    /// attempt for kube-scheduler's metrics when a plugin rejected the pod (Permit), else an
    /// `error`.
    pub fn bind_failed(&self, profile: &str, since_cycle: Duration, rejected: bool) {
        self.bind_failures
            .get_or_create(&ProfileLabels {
                profile: profile.into(),
            })
            .inc();
        let labels = AttemptLabels {
            result: if rejected { "unschedulable" } else { "error" }.into(),
            profile: profile.into(),
        };
        self.upstream_attempt(labels, since_cycle);
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

#[cfg(test)]
mod tests {
    use super::*;

    /// kube-scheduler's names, labels and bucket boundaries, next to tether's own: a scheduled
    /// pod counts once bound, a failed cycle at once.
    #[test]
    fn kube_scheduler_metrics_keep_its_names_labels_and_buckets() {
        let m = Metrics::default();
        m.attempt("scheduled", "p", Duration::from_millis(2));
        m.attempt("unschedulable", "p", Duration::from_millis(3));
        m.pod_scheduled("p", Duration::from_millis(5), Duration::from_secs(1), 2);
        m.bind_failed("p", Duration::from_millis(4), false);
        m.set_pending("active", 7);
        m.set_leading(true);
        m.extension_point(
            "Bind",
            crate::scheduler::framework::Code::Success,
            "p",
            Duration::from_millis(1),
        );
        let incoming = m.queue_incoming();
        incoming("active", "UnschedulablePodAdd");
        incoming("active", "UnschedulablePodAdd");
        m.plugin_runs(&[crate::scheduler::framework::PluginRun {
            plugin: "NodeResourcesFit",
            point: "Filter",
            code: crate::scheduler::framework::Code::Unschedulable,
            took: Duration::from_micros(30),
        }]);
        let text = m.encode();
        for line in [
            r#"scheduler_queue_incoming_pods_total{queue="active",event="UnschedulablePodAdd"} 2"#,
            r#"scheduler_plugin_execution_duration_seconds_count{plugin="NodeResourcesFit",extension_point="Filter",status="Unschedulable"} 1"#,
            r#"scheduler_schedule_attempts_total{result="scheduled",profile="p"} 1"#,
            r#"scheduler_schedule_attempts_total{result="unschedulable",profile="p"} 1"#,
            r#"scheduler_schedule_attempts_total{result="error",profile="p"} 1"#,
            r#"scheduler_pod_scheduling_sli_duration_seconds_count{attempts="2"} 1"#,
            r#"scheduler_pending_pods{queue="active"} 7"#,
            r#"tether_pending_pods{queue="active"} 7"#,
            r#"tether_schedule_attempts_total{result="scheduled",profile="p"} 1"#,
            r#"leader_election_master_status{name="tether"} 1"#,
            r#"scheduler_framework_extension_point_duration_seconds_count{extension_point="Bind",status="Success",profile="p"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        let bounds = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
                .filter(|l| l.contains(r#"result="scheduled""#) || l.contains(r#"attempts="2""#))
                .count()
        };
        // 15 and 20 bounds, as upstream's ExponentialBuckets, plus +Inf.
        assert_eq!(bounds("scheduler_scheduling_attempt_duration_seconds"), 16);
        assert_eq!(bounds("scheduler_pod_scheduling_sli_duration_seconds"), 21);
        let extension_bounds = text
            .lines()
            .filter(|l| {
                l.starts_with("scheduler_framework_extension_point_duration_seconds_bucket{")
            })
            .count();
        assert_eq!(extension_bounds, 13, "12 bounds from 0.1 ms, and +Inf");
        assert!(text.contains(r#"le="0.001""#) && text.contains(r#"le="16.384""#));
        let plugin_bounds = text
            .lines()
            .filter(|l| l.starts_with("scheduler_plugin_execution_duration_seconds_bucket{"))
            .count();
        assert_eq!(plugin_bounds, 21, "20 bounds from 0.01 ms by 1.5, and +Inf");
    }

    /// The metrics kube-scheduler's and client-go's dashboards read beside those above, with
    /// their names, labels and buckets; the build, and counters that start at 0.
    #[test]
    fn the_added_upstream_metrics_keep_their_names_labels_and_buckets() {
        let m = Metrics::default();
        m.scheduling_algorithm(Duration::from_millis(3));
        m.preemption_attempt(None);
        m.preemption_attempt(Some(3));
        m.workload_preemption_attempt("podgroup", "Success");
        m.workload_preemption("podgroup", 3, &[("pod", 1), ("podgroup", 1)], 2);
        m.pdb_violations("pod", 0);
        m.api_requests()
            .requests
            .get_or_create(&crate::k8s::client_metrics::RequestLabels {
                code: "201".into(),
                method: "POST".into(),
                host: "10.0.0.1:443".into(),
            })
            .inc();
        m.profile_serving("p", true);
        let text = m.encode();
        let version = env!("CARGO_PKG_VERSION");
        let commit = env!("TETHER_COMMIT");
        for line in [
            "scheduler_scheduling_algorithm_duration_seconds_count 1".to_string(),
            "scheduler_preemption_attempts_total 2".into(),
            "scheduler_preemption_victims_count 1".into(),
            "scheduler_preemption_victims_sum 3.0".into(),
            r#"scheduler_workload_preemption_attempts_total{preemptor="podgroup",result="Success"} 1"#.into(),
            r#"scheduler_workload_preemption_victims_sum{preemptor="podgroup"} 3.0"#.into(),
            r#"scheduler_preemption_workload_disruptions_count{preemptor="podgroup",victim="pod"} 1"#.into(),
            r#"scheduler_preemption_workload_disruptions_count{preemptor="podgroup",victim="podgroup"} 1"#.into(),
            r#"scheduler_preemption_pdb_violations_total{preemptor="podgroup"} 2"#.into(),
            r#"rest_client_requests_total{code="201",method="POST",host="10.0.0.1:443"} 1"#.into(),
            format!(r#"tether_build_info{{version="{version}",commit="{commit}"}} 1"#),
            r#"tether_history_writes_total{result="failed"} 0"#.into(),
            r#"tether_binds_total{profile="p"} 0"#.into(),
            r#"tether_bind_failures_total{profile="p"} 0"#.into(),
            "# TYPE process_cpu_seconds counter".into(),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        let buckets = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
                .count()
        };
        // ExponentialBuckets(0.001, 2, 15) and (1, 2, 7), plus +Inf.
        assert_eq!(
            buckets("scheduler_scheduling_algorithm_duration_seconds"),
            16
        );
        assert_eq!(buckets("scheduler_preemption_victims"), 8);
        assert!(text.contains(r#"scheduler_preemption_victims_bucket{le="64.0"} 1"#));
        // ExponentialBuckets(1, 2, 11), plus +Inf.
        assert_eq!(buckets("scheduler_workload_preemption_victims"), 12);
        assert!(
            !text.contains(r#"scheduler_preemption_pdb_violations_total{preemptor="pod"}"#),
            "none counted for a preemption without violations"
        );
    }

    /// A profile's conditions follow what the leader decided; one no longer held leaves.
    #[test]
    fn schedulingprofile_conditions_follow_the_statuses() {
        let m = Metrics::default();
        m.set_schedulingprofile_conditions([
            ("a", "Ready", "True"),
            ("a", "NamespaceDefaulting", "False"),
        ]);
        let text = m.encode();
        assert!(
            text.contains(
                r#"tether_schedulingprofile_condition{schedulingprofile="a",type="NamespaceDefaulting",status="False"} 1"#
            ),
            "{text}"
        );
        // Defaulting in force again: the False series goes, the True one comes.
        m.set_schedulingprofile_conditions([
            ("a", "Ready", "True"),
            ("a", "NamespaceDefaulting", "True"),
        ]);
        let text = m.encode();
        assert!(!text.contains(r#"status="False""#), "{text}");
        assert!(
            text.contains(
                r#"tether_schedulingprofile_condition{schedulingprofile="a",type="NamespaceDefaulting",status="True"} 1"#
            ),
            "{text}"
        );
    }

    /// A profile's readiness follows the controller's verdicts; a deleted profile leaves.
    #[test]
    fn schedulingprofile_readiness_follows_the_set() {
        let m = Metrics::default();
        m.set_schedulingprofiles_ready([("a", "sched-a", true), ("b", "sched-b", false)]);
        let text = m.encode();
        assert!(text.contains(
            r#"tether_schedulingprofile_ready{schedulingprofile="a",profile="sched-a"} 1"#
        ));
        assert!(text.contains(
            r#"tether_schedulingprofile_ready{schedulingprofile="b",profile="sched-b"} 0"#
        ));
        m.set_schedulingprofiles_ready([("b", "sched-b", true)]);
        let text = m.encode();
        assert!(!text.contains(r#"schedulingprofile="a""#), "{text}");
        assert!(text.contains(
            r#"tether_schedulingprofile_ready{schedulingprofile="b",profile="sched-b"} 1"#
        ));
    }

    /// The queue's figures at scrape time: each sub-queue's pods and oldest wait, and the
    /// rejections by plugin; a (plugin, profile) no pod waits for any more reads 0, as
    /// kube-scheduler's gauge, and is not dropped.
    #[test]
    fn the_queue_figures_are_set_and_a_rejection_gone_reads_zero() {
        let m = Metrics::default();
        let queues = |unschedulable: usize, oldest: Option<Duration>| {
            vec![
                PendingQueue {
                    queue: "active",
                    pods: 0,
                    oldest: None,
                },
                PendingQueue {
                    queue: "unschedulable",
                    pods: unschedulable,
                    oldest,
                },
            ]
        };
        m.set_queue(
            &queues(3, Some(Duration::from_millis(1500))),
            [("NodeResourcesFit", "p", 3), ("TaintToleration", "p", 1)],
        );
        let text = m.encode();
        for line in [
            r#"scheduler_pending_pods{queue="unschedulable"} 3"#,
            r#"tether_pending_pods{queue="unschedulable"} 3"#,
            r#"tether_oldest_pending_pod_seconds{queue="unschedulable"} 1.5"#,
            r#"tether_oldest_pending_pod_seconds{queue="active"} 0.0"#,
            r#"scheduler_unschedulable_pods{plugin="NodeResourcesFit",profile="p"} 3"#,
            r#"scheduler_unschedulable_pods{plugin="TaintToleration",profile="p"} 1"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        m.set_queue(&queues(1, None), [("NodeResourcesFit", "p", 1)]);
        let text = m.encode();
        for line in [
            r#"scheduler_unschedulable_pods{plugin="NodeResourcesFit",profile="p"} 1"#,
            r#"scheduler_unschedulable_pods{plugin="TaintToleration",profile="p"} 0"#,
            r#"tether_oldest_pending_pod_seconds{queue="unschedulable"} 0.0"#,
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }

    /// kube-scheduler's cap: no series per attempt count beyond 15.
    #[test]
    fn the_sli_attempts_label_is_capped() {
        let m = Metrics::default();
        for attempts in [1, 14, 15, 400] {
            m.pod_scheduled("p", Duration::ZERO, Duration::ZERO, attempts);
        }
        let text = m.encode();
        for line in [
            r#"scheduler_pod_scheduling_sli_duration_seconds_count{attempts="1"} 1"#,
            r#"scheduler_pod_scheduling_sli_duration_seconds_count{attempts="14"} 1"#,
            r#"scheduler_pod_scheduling_sli_duration_seconds_count{attempts="15+"} 2"#,
        ] {
            assert!(text.contains(line), "{line} in:\n{text}");
        }
        assert!(!text.contains(r#"attempts="400""#));
    }
}
