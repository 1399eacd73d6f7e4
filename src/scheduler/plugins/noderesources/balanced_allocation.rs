//! NodeResourcesBalancedAllocation: favours nodes whose resources would be used evenly with the
//! pod placed there, as kube-scheduler's plugin of that name: the score is
//! (1 - standard deviation of the requested / allocatable fractions) * MAX_NODE_SCORE.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::plugins::noderesources::resource_allocation::{
    ResourceSpec, allocatable_and_requested, default_resource_specs, default_resources, pod_request,
};
use crate::scheduler::profile::validation::{FieldErrors, FieldPath, decode_args};

pub const NAME: &str = "NodeResourcesBalancedAllocation";
pub const DEFAULT_WEIGHT: i32 = 1;

const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesBalancedAllocation";

/// The args of NodeResourcesBalancedAllocation: the resources to balance (cpu and memory by
/// default). Weights exist for symmetry with NodeResourcesFit and must be 1, as upstream.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NodeResourcesBalancedAllocationArgs {
    pub resources: Vec<ResourceSpec>,
}

impl Default for NodeResourcesBalancedAllocationArgs {
    fn default() -> Self {
        NodeResourcesBalancedAllocationArgs {
            resources: default_resources(),
        }
    }
}

impl NodeResourcesBalancedAllocationArgs {
    /// Checks the args as kube-scheduler's ValidateNodeResourcesBalancedAllocationArgs does:
    /// no resource twice, every weight 1. Fields are named under `path`.
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        let mut seen = HashSet::new();
        for (i, r) in self.resources.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                errs.push(
                    path.child("resources").index(i).child("name"),
                    format!("duplicate value {:?}", r.name),
                );
            }
            if r.weight != 1 {
                errs.push(
                    path.child("resources").index(i).child("weight"),
                    "must be 1",
                );
            }
        }
        errs.into_result()
    }
}

/// Decodes (absent args mean defaults), defaults and validates the args, then builds the plugin.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let mut args: NodeResourcesBalancedAllocationArgs = decode_args(args, path)?;
    default_resource_specs(&mut args.resources);
    args.validate(path)?;
    Ok(Arc::new(NodeResourcesBalancedAllocation {
        resources: args.resources,
    }))
}

/// The plugin: the resources it balances.
pub struct NodeResourcesBalancedAllocation {
    resources: Vec<ResourceSpec>,
}

/// What PreScore computes for Score: the pod's request of each balanced resource, in order.
struct PreScoreState {
    pod_requests: Vec<i64>,
}

impl NodeResourcesBalancedAllocation {
    /// The pod's actual requests (not the non-zero defaults), as upstream's BalancedAllocation.
    fn pod_requests(&self, pod: &PodInfo) -> Vec<i64> {
        self.resources
            .iter()
            .map(|r| pod_request(pod, &r.name, true))
            .collect()
    }

    /// The fraction of each resource the node would have requested with the pod, capped at 1;
    /// resources the node has none of (or extended ones the pod does not ask for) are left out.
    fn fractions<'a>(
        &'a self,
        node: &'a NodeInfo,
        pod_request_of: impl Fn(usize) -> i64 + 'a,
    ) -> impl Iterator<Item = f64> + 'a {
        self.resources.iter().enumerate().filter_map(move |(i, r)| {
            let (allocatable, requested) =
                allocatable_and_requested(node, &r.name, pod_request_of(i), true);
            (allocatable != 0).then(|| (requested as f64 / allocatable as f64).min(1.0))
        })
    }

    /// As upstream's balancedResourceScorer. Iterates the fractions twice rather than
    /// collecting them, so scoring a node does not allocate.
    fn score_node(&self, node: &NodeInfo, pod_request_of: impl Fn(usize) -> i64 + Copy) -> i64 {
        let (count, total) = self
            .fractions(node, pod_request_of)
            .fold((0usize, 0.0), |(n, sum), f| (n + 1, sum + f));
        let std = match count {
            0 | 1 => 0.0,
            2 => {
                let mut it = self.fractions(node, pod_request_of);
                let (a, b) = (it.next().unwrap_or(0.0), it.next().unwrap_or(0.0));
                ((a - b) / 2.0).abs()
            }
            _ => {
                let mean = total / count as f64;
                let sum: f64 = self
                    .fractions(node, pod_request_of)
                    .map(|f| (f - mean) * (f - mean))
                    .sum();
                (sum / count as f64).sqrt()
            }
        };
        ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
    }
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreScorePlugin for NodeResourcesBalancedAllocation {
    /// Skips scoring for a pod that requests none of the balanced resources (a best-effort pod),
    /// so that such pods do not all pile onto the same node, as upstream does.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let pod_requests = self.pod_requests(pod);
        if pod_requests.iter().all(|&r| r == 0) {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, PreScoreState { pod_requests });
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) {
            return Ok(self.score_node(node, |i| s.pod_requests[i]));
        }
        // PreScore did not run: a best-effort pod scores 0 everywhere, as upstream.
        let pod_request_of = |i: usize| pod_request(pod, &self.resources[i].name, true);
        if (0..self.resources.len()).all(|i| pod_request_of(i) == 0) {
            return Ok(0);
        }
        Ok(self.score_node(node, pod_request_of))
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    /// A pod with one container requesting `cpu` and `memory` ("" requests nothing).
    fn pod(name: &str, cpu: &str, memory: &str) -> PodBuilder {
        let mut b = PodBuilder::new(name).container();
        for (resource, quantity) in [("cpu", cpu), ("memory", memory)] {
            if !quantity.is_empty() {
                b = b.req(resource, quantity);
            }
        }
        b
    }

    /// A node (4 CPUs, 16Gi, 110 pods, plus `extra` allocatable) running `pods`.
    fn node(extra: &[(&str, &str)], pods: Vec<PodBuilder>) -> NodeInfo {
        let b = extra
            .iter()
            .fold(NodeBuilder::new("n"), |b, (r, q)| b.allocatable(r, q));
        b.info(pods.into_iter().map(PodBuilder::build).collect())
    }

    fn plugin(resources: &[&str]) -> NodeResourcesBalancedAllocation {
        NodeResourcesBalancedAllocation {
            resources: resources
                .iter()
                .map(|name| ResourceSpec {
                    name: name.to_string(),
                    weight: 1,
                })
                .collect(),
        }
    }

    /// Runs Score after PreScore and without it; both must agree.
    fn score(plugin: &NodeResourcesBalancedAllocation, pod: PodBuilder, node: &NodeInfo) -> i64 {
        let pod = pod.info();
        let mut state = CycleState::new();
        let status = PreScorePlugin::pre_score(plugin, &mut state, &pod, &[], &Snapshot::default());
        assert!(status.is_success(), "PreScore: {status}");
        let with_state = ScorePlugin::score(plugin, &state, &pod, node);
        let without = ScorePlugin::score(plugin, &CycleState::new(), &pod, node);
        assert_eq!(with_state, without, "Score differs without PreScore state");
        with_state.expect("score")
    }

    const GPU: &str = "example.com/gpu";

    // Expected scores worked by hand on a node of 4000m CPU and 16Gi memory.
    #[test]
    fn scores_one_minus_the_deviation_of_the_fractions_as_kube_scheduler() {
        let cpu_mem = || plugin(&["cpu", "memory"]);
        let with_gpu = || plugin(&["cpu", "memory", GPU]);
        let cases = [
            // Fractions 0.25 and 0.125: std 0.0625, (1 - 0.0625) * 100 = 93.75 -> 93.
            (
                "cpu and memory unevenly used",
                cpu_mem(),
                pod("p", "1", "2Gi"),
                node(&[], vec![]),
                93,
            ),
            (
                "cpu and memory evenly used",
                cpu_mem(),
                pod("p", "1", "4Gi"),
                node(&[], vec![]),
                100,
            ),
            // The other pod requests no memory; its non-zero default does not count:
            // fractions 0.75 and 0.25, std 0.25 -> 75.
            (
                "pods on the node count with their actual requests",
                cpu_mem(),
                pod("p", "1", "4Gi"),
                node(&[], vec![pod("e", "2", "")]),
                75,
            ),
            // cpu 6000/4000 is capped at 1; memory 0.5: std 0.25 -> 75.
            (
                "fractions are capped at 1",
                cpu_mem(),
                pod("p", "2", "8Gi"),
                node(&[], vec![pod("e", "4", "")]),
                75,
            ),
            // Memory is not an extended resource, so its 0 counts: std 0.125 -> 87.
            (
                "a pod requesting only cpu",
                cpu_mem(),
                pod("p", "1", ""),
                node(&[], vec![]),
                87,
            ),
            // Fractions 0.25, 0.25, 1: mean 0.5, variance 0.375/3, std 0.3536 -> 64.
            (
                "three resources",
                with_gpu(),
                pod("p", "1", "4Gi").req(GPU, "4"),
                node(&[(GPU, "4")], vec![]),
                64,
            ),
            (
                "an extended resource the pod does not request is left out",
                with_gpu(),
                pod("p", "1", "2Gi"),
                node(&[(GPU, "4")], vec![]),
                93,
            ),
            (
                "an extended resource the node does not have is left out",
                with_gpu(),
                pod("p", "1", "2Gi").req(GPU, "1"),
                node(&[], vec![]),
                93,
            ),
            (
                "a single resource has no deviation",
                plugin(&["cpu"]),
                pod("p", "1", ""),
                node(&[], vec![]),
                100,
            ),
        ];
        for (name, plugin, pod, node, want) in cases {
            assert_eq!(score(&plugin, pod, &node), want, "{name}");
        }
    }

    #[test]
    fn a_best_effort_pod_is_not_scored() {
        let plugin = plugin(&["cpu", "memory"]);
        let node = node(&[(GPU, "4")], vec![pod("e", "1", "1Gi")]);
        let pod = pod("p", "", "").req(GPU, "1").info();
        let mut state = CycleState::new();
        let status =
            PreScorePlugin::pre_score(&plugin, &mut state, &pod, &[], &Snapshot::default());
        assert_eq!(status.code, Code::Skip);
        assert_eq!(
            ScorePlugin::score(&plugin, &CycleState::new(), &pod, &node),
            Ok(0)
        );
    }

    #[test]
    fn validation_names_the_invalid_field() {
        let cases = [
            ("defaults are valid", json!(null), vec![]),
            (
                "no resources means the defaults",
                json!({"resources": []}),
                vec![],
            ),
            (
                "an absent weight means 1",
                json!({"resources": [{"name": "cpu"}, {"name": GPU}]}),
                vec![],
            ),
            (
                "a weight other than 1",
                json!({"resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 2}]}),
                vec!["args.resources[1].weight"],
            ),
            (
                "a resource twice",
                json!({"resources": [{"name": "cpu"}, {"name": "cpu"}]}),
                vec!["args.resources[1].name"],
            ),
            ("an unknown field", json!({"resource": []}), vec!["args"]),
        ];
        for (name, args, want) in cases {
            let got: Vec<String> = match build(Some(&args), &"args".into()) {
                Ok(_) => vec![],
                Err(errs) => errs.0.into_iter().map(|e| e.path).collect(),
            };
            assert_eq!(got, want, "{name}");
        }
        let built = build(None, &"args".into()).expect("defaults are valid");
        assert_eq!(built.name(), NAME);
        assert!(built.pre_score().is_some() && built.score().is_some());
        assert!(built.filter().is_none());
    }
}
