//! DefaultPreemption's args, as kube-scheduler's DefaultPreemptionArgs.

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::validation::{FieldErrors, FieldPath};

/// The plugin's args.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct DefaultPreemptionArgs {
    /// The share of the nodes (in percent) to dry-run preemption on at least; with
    /// `minCandidateNodesAbsolute`, how many candidate nodes are compared.
    pub min_candidate_nodes_percentage: i32,
    /// The least number of nodes to dry-run preemption on.
    pub min_candidate_nodes_absolute: i32,
}

impl Default for DefaultPreemptionArgs {
    fn default() -> Self {
        DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

impl DefaultPreemptionArgs {
    /// Checks the args as kube-scheduler's ValidateDefaultPreemptionArgs, naming fields under
    /// `path`.
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        let (pct, abs) = (
            self.min_candidate_nodes_percentage,
            self.min_candidate_nodes_absolute,
        );
        let pct_path = path.child("minCandidateNodesPercentage");
        let abs_path = path.child("minCandidateNodesAbsolute");
        if !(0..=100).contains(&pct) {
            errs.push(
                &pct_path,
                format!("Invalid value: {pct}: not in valid range [0, 100]"),
            );
        }
        if abs < 0 {
            errs.push(
                &abs_path,
                format!("Invalid value: {abs}: not in valid range [0, inf)"),
            );
        }
        if pct == 0 && abs == 0 {
            errs.push(
                &pct_path,
                "Invalid value: 0: cannot be zero at the same time as minCandidateNodesAbsolute",
            );
            errs.push(
                &abs_path,
                "Invalid value: 0: cannot be zero at the same time as minCandidateNodesPercentage",
            );
        }
        if errs.is_empty() { Ok(()) } else { Err(errs) }
    }

    /// How many candidate nodes to find among `potential` nodes (upstream's
    /// calculateNumCandidates).
    pub fn num_candidates(&self, potential: usize) -> usize {
        let by_share = potential * self.min_candidate_nodes_percentage.max(0) as usize / 100;
        by_share
            .max(self.min_candidate_nodes_absolute.max(0) as usize)
            .min(potential)
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scheduler::framework::validation::decode_args;

    fn errors(args: serde_json::Value) -> Vec<(String, String)> {
        let path: FieldPath = "pluginConfig[0].args".into();
        let args: DefaultPreemptionArgs = decode_args(Some(&args), &path).expect("decodes");
        args.validate(&path)
            .err()
            .map(|e| e.0.into_iter().map(|f| (f.path, f.message)).collect())
            .unwrap_or_default()
    }

    #[test]
    fn args_validate_as_upstream() {
        assert!(errors(json!({})).is_empty());
        assert_eq!(
            errors(json!({"minCandidateNodesPercentage": 101})),
            [(
                "pluginConfig[0].args.minCandidateNodesPercentage".to_string(),
                "Invalid value: 101: not in valid range [0, 100]".to_string()
            )]
        );
        assert_eq!(
            errors(json!({"minCandidateNodesAbsolute": -1}))[0].1,
            "Invalid value: -1: not in valid range [0, inf)"
        );
        assert_eq!(
            errors(json!({"minCandidateNodesPercentage": 0, "minCandidateNodesAbsolute": 0})).len(),
            2
        );
    }

    #[test]
    fn candidates_are_a_share_of_the_nodes_with_a_floor() {
        let args = DefaultPreemptionArgs::default();
        assert_eq!(args.num_candidates(50), 50);
        assert_eq!(args.num_candidates(5000), 500);
        let small = DefaultPreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 1,
        };
        assert_eq!(small.num_candidates(20), 2);
    }
}
