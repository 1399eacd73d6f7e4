//! The feature gates tether takes as kube-scheduler's `--feature-gates` does: only those whose
//! default a cluster may change and that change what the scheduler does. Every other gate of
//! the release tether schedules as keeps its default.

use std::fmt;

/// A gate tether knows, by kube-scheduler's name for it.
const DRA_WORKLOAD_RESOURCE_CLAIMS: &str = "DRAWorkloadResourceClaims";

/// The gates set with `--feature-gates`, each at kube-scheduler's default until set.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FeatureGates {
    /// `DRAWorkloadResourceClaims` (beta, off by default in 1.37 and 1.38): a PodGroup's
    /// `spec.resourceClaims` are shared by its pods and reserved for the PodGroup. Turn it on
    /// with the same gate of kube-apiserver and kube-controller-manager.
    pub dra_workload_resource_claims: bool,
}

/// Why `--feature-gates` was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FeatureGateError {
    #[error("feature gate {entry:?}: expected <name>=<true|false>")]
    Malformed { entry: String },
    #[error(
        "unrecognized feature gate {name:?}: tether takes {DRA_WORKLOAD_RESOURCE_CLAIMS} (every other gate keeps the default of the release it schedules as)"
    )]
    Unknown { name: String },
}

impl FeatureGates {
    /// Parses `Name=bool,Name=bool` as kube-scheduler's flag does (spaces around entries
    /// allowed, a later entry for a gate wins).
    pub fn parse(text: &str) -> Result<Self, FeatureGateError> {
        let mut gates = FeatureGates::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let malformed = || FeatureGateError::Malformed {
                entry: entry.to_string(),
            };
            let (name, value) = entry.split_once('=').ok_or_else(malformed)?;
            let value = match value.trim().to_ascii_lowercase().as_str() {
                "true" => true,
                "false" => false,
                _ => return Err(malformed()),
            };
            match name.trim() {
                DRA_WORKLOAD_RESOURCE_CLAIMS => gates.dra_workload_resource_claims = value,
                other => {
                    return Err(FeatureGateError::Unknown {
                        name: other.to_string(),
                    });
                }
            }
        }
        Ok(gates)
    }

    /// The gates as they apply when scheduling as `release`: PodGroup claims need the Workload
    /// API tether reads (`scheduling.k8s.io/v1beta1`, from 1.37). The gate turned off, and
    /// why, when it does not apply.
    pub fn for_release(self, release: crate::k8s::release::Release) -> (Self, Option<String>) {
        if self.dra_workload_resource_claims && !release.at_least(37) {
            return (
                FeatureGates::default(),
                Some(format!(
                    "{DRA_WORKLOAD_RESOURCE_CLAIMS} is ignored when scheduling as {release}: PodGroup claims need the scheduling.k8s.io/v1beta1 PodGroup of 1.37 and later"
                )),
            );
        }
        (self, None)
    }
}

impl fmt::Display for FeatureGates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{DRA_WORKLOAD_RESOURCE_CLAIMS}={}",
            self.dra_workload_resource_claims
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::release::Release;

    #[test]
    fn gates_parse_as_kube_scheduler_s_flag() {
        assert_eq!(FeatureGates::parse(""), Ok(FeatureGates::default()));
        let on = FeatureGates::parse(" DRAWorkloadResourceClaims=True ").expect("parses");
        assert!(on.dra_workload_resource_claims);
        let off =
            FeatureGates::parse("DRAWorkloadResourceClaims=true,DRAWorkloadResourceClaims=false")
                .expect("parses");
        assert!(!off.dra_workload_resource_claims);
        assert!(matches!(
            FeatureGates::parse("GenericWorkload=true"),
            Err(FeatureGateError::Unknown { name }) if name == "GenericWorkload"
        ));
        assert!(matches!(
            FeatureGates::parse("DRAWorkloadResourceClaims"),
            Err(FeatureGateError::Malformed { .. })
        ));
        assert!(matches!(
            FeatureGates::parse("DRAWorkloadResourceClaims=yes"),
            Err(FeatureGateError::Malformed { .. })
        ));
    }

    #[test]
    fn pod_group_claims_need_the_v1beta1_workload_api() {
        let on = FeatureGates {
            dra_workload_resource_claims: true,
        };
        assert_eq!(on.for_release(Release::of_minor(37)), (on, None));
        let (gates, why) = on.for_release(Release::of_minor(36));
        assert!(!gates.dra_workload_resource_claims);
        assert!(why.is_some_and(|w| w.contains("1.36")));
    }
}
