//! kube-scheduler's families of a pod's way through the cycle that dashboards chart beside the
//! attempts: how many attempts a pod took (`scheduler_pod_scheduling_attempts`), how long
//! Permit held it (`scheduler_permit_wait_duration_seconds`), how often each plugin ran
//! (`scheduler_plugin_evaluation_total`), what the cache holds (`scheduler_cache_size`), the
//! scheduling entities queued (`scheduler_queued_entities`) and the claims created for extended
//! resources (`dynamic_resource_allocation_resourceclaim_creates_total`). Names, labels and
//! buckets are kube-scheduler 1.38's.

use std::sync::OnceLock;
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

use super::{IntGauge, Metrics};

/// A Permit wait's outcome: the code of the verdict (Success, Unschedulable, Error…).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PermitResultLabels {
    pub result: String,
}

/// A plugin's runs at an extension point of a profile.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EvaluationLabels {
    pub plugin: &'static str,
    pub extension_point: &'static str,
    pub profile: String,
}

/// The `type` label of the cache's gauge: `nodes`, `pods` or `assumed_pods`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CacheKind {
    pub r#type: &'static str,
}

/// A claim creation's outcome (`success` or `failure`), whether it asked for admin access, and
/// what owns the claim (`""`/`Pod` for a pod's, `scheduling.k8s.io`/`PodGroup` for a group's).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ClaimCreateLabels {
    pub status: &'static str,
    pub admin_access: &'static str,
    pub owner_api_group: &'static str,
    pub owner_api_kind: &'static str,
}

/// A sub-queue and the kind of entity counted in it (`pod` or `podgroup`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EntityLabels {
    pub queue: &'static str,
    pub entity: &'static str,
}

/// The families of this file, registered at the root beside kube-scheduler's others.
pub(super) struct CycleFamilies {
    /// `scheduler_pod_scheduling_attempts` (STABLE): the attempts a pod took, observed at its
    /// bind; buckets 1 to 16, doubling.
    pod_attempts: Histogram,
    /// `scheduler_permit_wait_duration_seconds{result}`: from the start of the wait of a pod a
    /// Permit plugin held to its verdict.
    permit_wait: Family<PermitResultLabels, Histogram>,
    /// `scheduler_plugin_evaluation_total{plugin,extension_point,profile}`: each run of a
    /// plugin at PreFilter, Filter (per node), PreScore and Score (per node).
    plugin_evaluations: Family<EvaluationLabels, Counter>,
    /// `scheduler_cache_size{type}`.
    cache_size: Family<CacheKind, IntGauge>,
    /// `scheduler_queued_entities{queue,entity}`.
    queued_entities: Family<EntityLabels, IntGauge>,
    /// `scheduler_batch_attempts_total{profile,result}`: each pod that asked opportunistic
    /// batching for a hint (`no_hint`), and, once its node was chosen, whether the hint given
    /// was it (`hint_used`, `hint_not_used`).
    batch_attempts: Family<BatchLabels, Counter>,
    /// `scheduler_batch_cache_flushed_total{profile,reason}`: each kept ranking dropped instead
    /// of giving a hint, by why.
    batch_flushed: Family<FlushLabels, Counter>,
    /// `scheduler_batch_rescore_attempts_total{profile}`: each previous pod's node rescored.
    batch_rescores: Family<super::labels::ProfileLabels, Counter>,
    /// `scheduler_store_schedule_results_total{profile,result}`: what became of each ranking a
    /// cycle that chose a node without a hint made (`stored`, `pod_not_batchable`,
    /// `empty_list`).
    batch_stored: Family<BatchLabels, Counter>,
}

/// Why a kept ranking was dropped instead of giving a hint (kube-scheduler's
/// `scheduler_batch_cache_flushed_total` reasons).
pub type FlushReason = &'static str;

/// How a cycle used batching, for `scheduler_batch_attempts_total`: `no_hint`, `hint_used` or
/// `hint_not_used`, and the reason a ranking was dropped, if one was.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BatchOutcome {
    pub attempt: Option<&'static str>,
    pub flushed: Option<FlushReason>,
    /// Whether the previous pod's node was rescored (`scheduler_batch_rescore_attempts_total`).
    pub rescored: bool,
    /// What became of this cycle's ranking (`scheduler_store_schedule_results_total`):
    /// `stored`, `pod_not_batchable` or `empty_list`; `None` when a hint was taken.
    pub stored: Option<&'static str>,
}

/// A profile and what batching did (the `result` of an attempt or the `reason` of a flush).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BatchLabels {
    pub profile: String,
    pub result: &'static str,
}

/// The `reason` label of a flush.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FlushLabels {
    pub profile: String,
    pub reason: &'static str,
}

fn permit_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

/// `dynamic_resource_allocation_resourceclaim_creates_total{status,admin_access}`: the claims
/// DynamicResources creates for a pod's extended resources. One family for the process (the
/// plugin that creates claims is built without the metrics), registered by every
/// [`Metrics`].
pub fn claim_creates() -> &'static Family<ClaimCreateLabels, Counter> {
    static CREATES: OnceLock<Family<ClaimCreateLabels, Counter>> = OnceLock::new();
    CREATES.get_or_init(Family::default)
}

impl CycleFamilies {
    pub(super) fn register(root: &mut Registry) -> Self {
        let families = CycleFamilies {
            pod_attempts: Histogram::new(exponential_buckets(1.0, 2.0, 5)),
            permit_wait: Family::new_with_constructor(permit_buckets as fn() -> Histogram),
            plugin_evaluations: Family::default(),
            cache_size: Family::default(),
            queued_entities: Family::default(),
            batch_attempts: Family::default(),
            batch_flushed: Family::default(),
            batch_rescores: Family::default(),
            batch_stored: Family::default(),
        };
        root.register(
            "scheduler_pod_scheduling_attempts",
            "Number of attempts to successfully schedule a pod.",
            families.pod_attempts.clone(),
        );
        root.register(
            "scheduler_permit_wait_duration_seconds",
            "Duration of waiting on permit.",
            families.permit_wait.clone(),
        );
        root.register(
            "scheduler_plugin_evaluation",
            "Number of attempts to schedule pods by each plugin and the extension point (available only in PreFilter, Filter, PreScore, and Score).",
            families.plugin_evaluations.clone(),
        );
        root.register(
            "scheduler_cache_size",
            "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
            families.cache_size.clone(),
        );
        root.register(
            "scheduler_queued_entities",
            "Number of queued scheduling entities ('pod', 'podgroup', or 'compositepodgroup'; 'pod' stands for individual pods that are not members of any podgroup) by the queue type. 'active' means number of entities in activeQ; 'backoff' means number of entities in backoffQ; 'unschedulable' means number of entities in unschedulableEntities that the scheduler attempted to schedule and failed; 'gated' is the number of unschedulable entities that the scheduler never attempted to schedule because they are gated.",
            families.queued_entities.clone(),
        );
        root.register(
            "dynamic_resource_allocation_resourceclaim_creates",
            "Number of ResourceClaims creation requests, categorized by creation status, admin access, and owning API group and kind (either Pod or scheduling.k8s.io/PodGroup)",
            claim_creates().clone(),
        );
        root.register(
            "scheduler_batch_attempts",
            "Counts of results when we attempt to use batching, by scheduler profile. 'no_hint' covers every pod that asked for a hint and got none, including pods that later fail to schedule. 'hint_used' and 'hint_not_used' are recorded only when a node is selected, and say whether it was the hinted one.",
            families.batch_attempts.clone(),
        );
        root.register(
            "scheduler_batch_cache_flushed",
            "Counts of batch cache flushes by reason and scheduler profile. A flush is counted when an existing batch state is dropped instead of providing a hint.",
            families.batch_flushed.clone(),
        );
        root.register(
            "scheduler_batch_rescore_attempts",
            "Counts of rescore attempts during opportunistic batching, by scheduler profile.",
            families.batch_rescores.clone(),
        );
        root.register(
            "scheduler_store_schedule_results",
            "Counts of the outcomes of storing scheduling results for batching, by scheduler profile. 'stored' means the pod seeded a batch, 'pod_not_batchable' means the pod has no signature, and 'empty_list' means no other feasible nodes were left to cache. Pods that used the hinted node store nothing.",
            families.batch_stored.clone(),
        );
        families
    }
}

impl Metrics {
    /// How one cycle used opportunistic batching.
    pub fn batch(&self, profile: &str, outcome: BatchOutcome) {
        if let Some(result) = outcome.attempt {
            self.cycle
                .batch_attempts
                .get_or_create(&BatchLabels {
                    profile: profile.into(),
                    result,
                })
                .inc();
        }
        if outcome.rescored {
            self.cycle
                .batch_rescores
                .get_or_create(&super::labels::ProfileLabels {
                    profile: profile.into(),
                })
                .inc();
        }
        if let Some(result) = outcome.stored {
            self.cycle
                .batch_stored
                .get_or_create(&BatchLabels {
                    profile: profile.into(),
                    result,
                })
                .inc();
        }
        if let Some(reason) = outcome.flushed {
            self.cycle
                .batch_flushed
                .get_or_create(&FlushLabels {
                    profile: profile.into(),
                    reason,
                })
                .inc();
        }
    }

    /// A pod a Permit plugin held got its verdict (`code`) after `waited`.
    pub fn permit_waited(&self, code: crate::scheduler::framework::Code, waited: Duration) {
        self.cycle
            .permit_wait
            .get_or_create(&PermitResultLabels {
                result: format!("{code:?}"),
            })
            .observe(waited.as_secs_f64());
    }

    /// The plugin runs of one cycle's search for a node, as (point, plugin, runs).
    pub fn plugin_evaluations(
        &self,
        profile: &str,
        runs: &[crate::scheduler::framework::cycle_state::Evaluations],
    ) {
        for (point, plugin, runs) in runs {
            self.cycle
                .plugin_evaluations
                .get_or_create(&EvaluationLabels {
                    plugin,
                    extension_point: point,
                    profile: profile.into(),
                })
                .inc_by(*runs);
        }
    }

    /// Every plugin `profile` runs at PreFilter, Filter, PreScore and Score, counted from 0
    /// under `scheduler` before its first run, as kube-scheduler creates them with the profile.
    pub fn evaluations_from_zero(
        &self,
        scheduler: &str,
        profile: &crate::scheduler::framework::profile::CompiledProfile,
    ) {
        let at = |point: &'static str, plugins: &mut dyn Iterator<Item = &'static str>| {
            for plugin in plugins {
                self.cycle
                    .plugin_evaluations
                    .get_or_create(&EvaluationLabels {
                        plugin,
                        extension_point: point,
                        profile: scheduler.into(),
                    })
                    .inc_by(0);
            }
        };
        at(
            "PreFilter",
            &mut (profile.pre_filter.iter())
                .filter(|p| p.pre_filter().is_some())
                .map(|p| p.name()),
        );
        at(
            "Filter",
            &mut (profile.filter.iter())
                .filter(|p| p.filter().is_some())
                .map(|p| p.name()),
        );
        at(
            "PreScore",
            &mut (profile.pre_score.iter())
                .filter(|p| p.pre_score().is_some() && !p.pre_score_is_own())
                .map(|p| p.name()),
        );
        at(
            "Score",
            &mut (profile.score.iter())
                .filter(|w| w.plugin.score().is_some())
                .map(|w| w.plugin.name()),
        );
    }

    /// The gang families of `scheduler` at 0 from the moment it serves (kube-scheduler creates
    /// them at a group's first cycle): a rate, an alert or a panel sees the first group cycle,
    /// and a dashboard's panels have series before any gang comes.
    pub(super) fn group_families_from_zero(&self, scheduler: &str) {
        use super::{GroupAttemptLabels, GroupSearchLabels};
        for result in ["scheduled", "unschedulable", "error"] {
            let labels = GroupAttemptLabels {
                result: result.into(),
                profile: scheduler.into(),
                entity: "podgroup",
            };
            self.upstream
                .podgroup_attempts
                .get_or_create(&labels)
                .inc_by(0);
            // A histogram is created empty by its first read.
            drop(
                self.upstream
                    .podgroup_attempt_duration
                    .get_or_create(&labels),
            );
        }
        for result in ["feasible", "infeasible"] {
            let labels = GroupAttemptLabels {
                result: result.into(),
                profile: scheduler.into(),
                entity: "podgroup",
            };
            self.upstream
                .placement_evaluations
                .get_or_create(&labels)
                .inc_by(0);
        }
        let search = GroupSearchLabels {
            profile: scheduler.into(),
            entity: "podgroup",
        };
        self.upstream
            .generated_placements
            .get_or_create(&search)
            .inc_by(0);
    }

    /// The families of no profile at 0 from the start: group preemptions, Permit's verdicts,
    /// the extended resources' claims (a failure rate sees its first failure).
    pub(super) fn process_families_from_zero(&self) {
        use super::{PreemptorLabels, WorkloadPreemptionLabels};
        for result in ["Success", "Unschedulable"] {
            self.upstream
                .workload_preemption_attempts
                .get_or_create(&WorkloadPreemptionLabels {
                    preemptor: "podgroup",
                    result,
                })
                .inc_by(0);
        }
        drop(
            self.upstream
                .workload_preemption_victims
                .get_or_create(&PreemptorLabels {
                    preemptor: "podgroup",
                }),
        );
        drop(self.cycle.permit_wait.get_or_create(&PermitResultLabels {
            result: "Success".into(),
        }));
        for status in ["success", "failure"] {
            claim_creates()
                .get_or_create(&ClaimCreateLabels {
                    status,
                    admin_access: "false",
                    owner_api_group: "",
                    owner_api_kind: "Pod",
                })
                .inc_by(0);
        }
    }

    /// What the cache holds now: nodes, pods (bound and assumed) and the assumed pods alone.
    pub fn set_cache_size(&self, nodes: usize, pods: usize, assumed: usize) {
        let as_gauge = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
        for (kind, n) in [("nodes", nodes), ("pods", pods), ("assumed_pods", assumed)] {
            self.cycle
                .cache_size
                .get_or_create(&CacheKind { r#type: kind })
                .set(as_gauge(n));
        }
        self.cache_nodes.set(as_gauge(nodes));
        self.cache_pods.set(as_gauge(pods));
    }

    /// The entities of each sub-queue: (queue, pods of no PodGroup, PodGroups).
    pub fn set_queued_entities(&self, entities: &[(&'static str, usize, usize)]) {
        for (queue, pods, groups) in entities {
            for (entity, n) in [("pod", pods), ("podgroup", groups)] {
                self.cycle
                    .queued_entities
                    .get_or_create(&EntityLabels { queue, entity })
                    .set(i64::try_from(*n).unwrap_or(i64::MAX));
            }
        }
    }

    /// A pod took `attempts` attempts to be bound.
    pub(super) fn observe_pod_attempts(&self, attempts: u32) {
        self.cycle.pod_attempts.observe(f64::from(attempts));
    }
}

/// A claim for a pod's extended resources was created (`created`) or refused: never with admin
/// access, owned by the pod (as kube-scheduler labels it).
pub fn pod_claim_created(created: bool) {
    claim_creates()
        .get_or_create(&ClaimCreateLabels {
            status: if created { "success" } else { "failure" },
            admin_access: "false",
            owner_api_group: "",
            owner_api_kind: "Pod",
        })
        .inc();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::Code;

    /// Each family under kube-scheduler's name, with its labels and buckets.
    #[test]
    fn the_cycle_families_keep_kube_schedulers_names_labels_and_buckets() {
        let m = Metrics::default();
        m.pod_scheduled("p", Duration::from_millis(5), Duration::from_secs(1), 3);
        m.permit_waited(Code::Success, Duration::from_millis(40));
        m.plugin_evaluations(
            "p",
            &[
                ("Filter", "NodeResourcesFit", 5),
                ("Filter", "NodeResourcesFit", 2),
            ],
        );
        m.set_cache_size(3, 7, 1);
        pod_claim_created(true);
        m.set_queued_entities(&[("gated", 2, 1)]);
        let text = m.encode();
        for line in [
            "scheduler_pod_scheduling_attempts_count 1",
            r#"scheduler_pod_scheduling_attempts_bucket{le="2.0"} 0"#,
            r#"scheduler_pod_scheduling_attempts_bucket{le="4.0"} 1"#,
            r#"scheduler_permit_wait_duration_seconds_count{result="Success"} 1"#,
            r#"scheduler_plugin_evaluation_total{plugin="NodeResourcesFit",extension_point="Filter",profile="p"} 7"#,
            r#"scheduler_cache_size{type="nodes"} 3"#,
            r#"scheduler_cache_size{type="pods"} 7"#,
            r#"scheduler_cache_size{type="assumed_pods"} 1"#,
            r#"scheduler_queued_entities{queue="gated",entity="pod"} 2"#,
            r#"scheduler_queued_entities{queue="gated",entity="podgroup"} 1"#,
            "tether_cache_nodes 3",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
        let buckets = |name: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{name}_bucket{{")))
                .count()
        };
        // ExponentialBuckets(1, 2, 5): 1 to 16, plus +Inf.
        assert_eq!(buckets("scheduler_pod_scheduling_attempts"), 6);
        // ExponentialBuckets(0.001, 2, 15), plus +Inf.
        assert_eq!(buckets("scheduler_permit_wait_duration_seconds"), 16);
        assert!(text.contains(
            r#"dynamic_resource_allocation_resourceclaim_creates_total{status="success",admin_access="false",owner_api_group="",owner_api_kind="Pod"}"#
        ));
    }
}
