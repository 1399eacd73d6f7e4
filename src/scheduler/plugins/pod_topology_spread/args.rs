//! PodTopologySpread's args: the default constraints and how they are chosen, validated.

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use serde::{Deserialize, Serialize};

use crate::scheduler::framework::validation::{FieldErrors, FieldPath};

pub(super) const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
pub(super) const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
pub(super) const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
pub(super) const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";

/// Where the default constraints come from, as kube-scheduler's `defaultingType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DefaultingType {
    /// kube-scheduler's built-in defaults: hostname maxSkew 3 and zone maxSkew 5, both
    /// ScheduleAnyway. `defaultConstraints` must then be empty.
    #[default]
    System,
    /// The `defaultConstraints` listed in the args (possibly none).
    List,
}

/// The plugin's args, as kube-scheduler's PodTopologySpreadArgs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTopologySpreadArgs {
    /// Constraints for pods that state none of their own; they must not have a labelSelector,
    /// which is derived for each pod from the workloads selecting it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default)]
    pub defaulting_type: DefaultingType,
}

impl PodTopologySpreadArgs {
    /// Checks the args as kube-scheduler's ValidatePodTopologySpreadArgs, naming fields under
    /// `path` (for example `pluginConfig[1].args.defaultConstraints[0].maxSkew`).
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        if self.defaulting_type == DefaultingType::System && !self.default_constraints.is_empty() {
            errs.push(
                path.child("defaultingType"),
                "must be List when defaultConstraints are set",
            );
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let at = path.child("defaultConstraints").index(i);
            if c.max_skew <= 0 {
                errs.push(
                    at.child("maxSkew"),
                    format!("{} is not in the valid range (0, inf)", c.max_skew),
                );
            }
            if c.topology_key.is_empty() {
                errs.push(at.child("topologyKey"), "must not be empty");
            } else {
                errs.check_qualified_name(&at.child("topologyKey"), &c.topology_key);
            }
            match c.when_unsatisfiable.as_str() {
                DO_NOT_SCHEDULE | SCHEDULE_ANYWAY => {}
                "" => errs.push(at.child("whenUnsatisfiable"), "must not be empty"),
                other => errs.push(
                    at.child("whenUnsatisfiable"),
                    format!("{other:?} is not supported: must be DoNotSchedule or ScheduleAnyway"),
                ),
            }
            if c.label_selector.is_some() {
                errs.push(
                    at.child("labelSelector"),
                    "must not be set: default constraints take their selector from the pod's workloads",
                );
            }
            let repeated = self.default_constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            });
            if repeated {
                errs.push(
                    at,
                    format!(
                        "duplicate constraint {{{}, {}}}",
                        c.topology_key, c.when_unsatisfiable
                    ),
                );
            }
        }
        errs.into_result()
    }
}

/// kube-scheduler's system default constraints, used when `defaultingType` is System.
pub(super) fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(LABEL_HOSTNAME, 3), (LABEL_TOPOLOGY_ZONE, 5)]
        .into_iter()
        .map(|(key, max_skew)| TopologySpreadConstraint {
            topology_key: key.into(),
            max_skew,
            when_unsatisfiable: SCHEDULE_ANYWAY.into(),
            ..Default::default()
        })
        .collect()
}
