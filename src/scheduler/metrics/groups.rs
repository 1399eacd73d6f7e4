//! The metrics of gangs: their group cycles (kube-scheduler's `scheduler_podgroup_*`), their
//! preemptions (`scheduler_workload_preemption_*`, `scheduler_preemption_workload_disruptions`,
//! `scheduler_preemption_pdb_violations_total`) and their placements by topology
//! (`scheduler_generated_placements_total`, `scheduler_placement_evaluation*`).

use std::time::Duration;

use super::Metrics;
use super::labels::{
    DisruptionLabels, GroupAttemptLabels, GroupSearchLabels, PreemptorLabels,
    WorkloadPreemptionLabels,
};

/// The entity label of a PodGroup.
pub const PODGROUP: &str = "podgroup";
/// The entity label of a CompositePodGroup (1.38).
pub const COMPOSITE: &str = "compositepodgroup";

impl Metrics {
    /// A pod's preemption decided evicts `violations` pods a budget did not let go.
    pub fn pdb_violations(&self, preemptor: &'static str, violations: usize) {
        if violations > 0 {
            self.upstream
                .pdb_violations
                .get_or_create(&PreemptorLabels { preemptor })
                .inc_by(violations as u64);
        }
    }

    /// The topology constraint of a group (an `entity`) gave `count` placements.
    pub fn generated_placements(&self, profile: &str, entity: &'static str, count: usize) {
        self.upstream
            .generated_placements
            .get_or_create(&GroupSearchLabels {
                profile: profile.into(),
                entity,
            })
            .inc_by(count as u64);
    }

    /// One placement was tried for a group (an `entity`): `feasible` or not, in `took`.
    pub fn placement_evaluation(
        &self,
        (profile, entity): (&str, &'static str),
        feasible: bool,
        took: Duration,
    ) {
        let labels = GroupAttemptLabels {
            result: if feasible { "feasible" } else { "infeasible" }.into(),
            profile: profile.into(),
            entity,
        };
        self.upstream
            .placement_evaluations
            .get_or_create(&labels)
            .inc();
        self.upstream
            .placement_evaluation_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
    }

    /// A group's preemption (a `preemptor` entity) ran, with `result` (its code, in upstream's
    /// words).
    pub fn workload_preemption_attempt(&self, preemptor: &'static str, result: &'static str) {
        self.upstream
            .workload_preemption_attempts
            .get_or_create(&WorkloadPreemptionLabels { preemptor, result })
            .inc();
    }

    /// A pod group's preemption decided to evict `pods` pods, as `units` (by kind: `pod`,
    /// `podgroup`; kinds with none left out), `violations` of them against a budget.
    pub fn workload_preemption(
        &self,
        preemptor: &'static str,
        pods: usize,
        units: &[(&'static str, usize)],
        violations: usize,
    ) {
        self.upstream
            .workload_preemption_victims
            .get_or_create(&PreemptorLabels { preemptor })
            .observe(pods as f64);
        for &(victim, n) in units.iter().filter(|(_, n)| *n > 0) {
            self.upstream
                .workload_disruptions
                .get_or_create(&DisruptionLabels { preemptor, victim })
                .observe(n as f64);
        }
        self.pdb_violations(preemptor, violations);
    }

    /// A group cycle of a PodGroup ended: `result` is scheduled, unschedulable or error;
    /// `search` is how long the search for the members' nodes took, `took` the whole cycle.
    pub fn podgroup_attempt(&self, result: &str, profile: &str, search: Duration, took: Duration) {
        self.group_attempt(PODGROUP, result, profile, (search, took));
    }

    /// A group cycle of a root `entity` ended (see [`Self::podgroup_attempt`]).
    pub fn group_attempt(
        &self,
        entity: &'static str,
        result: &str,
        profile: &str,
        (search, took): (Duration, Duration),
    ) {
        let labels = GroupAttemptLabels {
            result: result.into(),
            profile: profile.into(),
            entity,
        };
        self.upstream.podgroup_attempts.get_or_create(&labels).inc();
        self.upstream
            .podgroup_attempt_duration
            .get_or_create(&labels)
            .observe(took.as_secs_f64());
        self.upstream
            .podgroup_algorithm_duration
            .get_or_create(&GroupSearchLabels {
                profile: labels.profile,
                entity: labels.entity,
            })
            .observe(search.as_secs_f64());
    }
}
