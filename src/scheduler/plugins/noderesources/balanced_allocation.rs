//! NodeResourcesBalancedAllocation: favours nodes whose resources the pod would leave more
//! evenly used, as kube-scheduler v1.36's plugin of that name: the balance of a node is
//! (1 - standard deviation of the requested / allocatable fractions) * MAX_NODE_SCORE, and the
//! score is the change in balance the pod brings, `50 + (50 + with - without) / 2`.

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath, decode_args};
use crate::scheduler::framework::{
    CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::noderesources::dra_scoring::DraScoring;
use crate::scheduler::plugins::noderesources::resource_allocation::{
    ResourceSpec, allocatable_and_requested, default_resource_specs, default_resources, pod_request,
};

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
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let mut args: NodeResourcesBalancedAllocationArgs = decode_args(args, path)?;
    default_resource_specs(&mut args.resources);
    args.validate(path)?;
    Ok(Arc::new(NodeResourcesBalancedAllocation {
        resources: args.resources,
        devices: Some(handle.devices.clone()),
    }))
}

/// The plugin: the resources it balances.
pub struct NodeResourcesBalancedAllocation {
    resources: Vec<ResourceSpec>,
    /// The DeviceClasses and devices, for the extended resources classes serve.
    devices: Option<Arc<DeviceIndex>>,
}

/// What PreScore computes for Score: the pod's request of each balanced resource, in order,
/// and what DRA counts when a balanced resource is one a DeviceClass serves.
struct PreScoreState {
    pod_requests: Vec<i64>,
    dra: Option<DraScoring>,
}

impl NodeResourcesBalancedAllocation {
    /// What scoring reads of DRA, when a balanced resource is one a DeviceClass serves.
    fn dra_scoring(&self) -> Option<DraScoring> {
        let devices = self.devices.as_ref()?;
        DraScoring::for_resources(devices, self.resources.iter().map(|r| r.name.as_str()))
    }

    /// The pod's actual requests (not the non-zero defaults), as upstream's BalancedAllocation.
    fn pod_requests(&self, pod: &PodInfo) -> Vec<i64> {
        self.resources
            .iter()
            .map(|r| pod_request(pod, &r.name))
            .collect()
    }

    /// The fraction of each resource requested on the node, with the pod placed there
    /// (`with_pod`) or before, capped at 1. Resources the node has none of, and extended ones
    /// the pod does not ask for, are left out of both, as upstream's
    /// calculateNodeAllocatableRequest leaves them out.
    fn fractions<'a>(
        &'a self,
        node: &'a NodeInfo,
        pod_request_of: impl Fn(usize) -> i64 + 'a,
        with_pod: bool,
        dra: Option<&'a DraScoring>,
    ) -> impl Iterator<Item = f64> + 'a {
        self.resources.iter().enumerate().filter_map(move |(i, r)| {
            let pod_request = pod_request_of(i);
            let (allocatable, requested) =
                allocatable_and_requested(node, &r.name, pod_request, true, dra);
            let used = if with_pod {
                requested
            } else {
                requested - pod_request
            };
            (allocatable != 0).then(|| (used as f64 / allocatable as f64).min(1.0))
        })
    }

    /// As upstream's balancedResourceScorer (1.34 on): the change in balance the pod brings,
    /// `MaxNodeScore/2 + (MaxNodeScore/2 + with − without)/2`, where each balance is
    /// `(1 − standard deviation of the fractions) × MaxNodeScore`. Near 75 when the pod
    /// changes little, towards 100 when it evens the node out, towards 50 when it skews it.
    fn score_node(
        &self,
        node: &NodeInfo,
        pod_request_of: impl Fn(usize) -> i64 + Copy,
        dra: Option<&DraScoring>,
    ) -> i64 {
        let with = balance(|| self.fractions(node, pod_request_of, true, dra));
        let without = balance(|| self.fractions(node, pod_request_of, false, dra));
        MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with - without) / 2
    }
}

/// `(1 − standard deviation of the fractions) × MaxNodeScore`, as upstream's
/// balancedResourceScore: two fractions deviate by half their difference, one or none not at
/// all. Takes the fractions as a function so that they are iterated, never collected: scoring
/// a node does not allocate.
fn balance<I: Iterator<Item = f64>>(fractions: impl Fn() -> I) -> i64 {
    let (count, total) = fractions().fold((0usize, 0.0), |(n, sum), f| (n + 1, sum + f));
    let std = match count {
        0 | 1 => 0.0,
        2 => {
            let mut it = fractions();
            let (a, b) = (it.next().unwrap_or(0.0), it.next().unwrap_or(0.0));
            ((a - b) / 2.0).abs()
        }
        _ => {
            let mean = total / count as f64;
            let sum: f64 = fractions().map(|f| (f - mean) * (f - mean)).sum();
            (sum / count as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        super::sign_requests(self.devices.as_deref(), pod, signature)
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
        let dra = self.dra_scoring();
        state.write(PRE_SCORE_KEY, PreScoreState { pod_requests, dra });
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        if let Some(s) = state.read::<PreScoreState>(PRE_SCORE_KEY) {
            return Ok(self.score_node(node, |i| s.pod_requests[i], s.dra.as_ref()));
        }
        // PreScore did not run: a best-effort pod scores 0 everywhere, as upstream.
        let pod_request_of = |i: usize| pod_request(pod, &self.resources[i].name);
        if (0..self.resources.len()).all(|i| pod_request_of(i) == 0) {
            return Ok(0);
        }
        let dra = self.dra_scoring();
        Ok(self.score_node(node, pod_request_of, dra.as_ref()))
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
            devices: None,
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

    /// Containers, each requesting cpu and memory ("" requests nothing), as upstream's
    /// `st.MakePod().Req(..).Req(..)`.
    fn containers(name: &str, node: Option<&str>, reqs: &[(&str, &str)]) -> PodBuilder {
        let mut b = PodBuilder::new(name);
        if let Some(node) = node {
            b = b.with(|p| {
                p.spec.get_or_insert_with(Default::default).node_name = Some(node.into())
            });
        }
        for (cpu, memory) in reqs {
            b = b.container();
            for (resource, quantity) in [("cpu", *cpu), ("memory", *memory)] {
                if !quantity.is_empty() {
                    b = b.req(resource, quantity);
                }
            }
        }
        b
    }

    /// Upstream's makeNode: `milli_cpu` and `memory` (bytes) allocatable, plus `extra`.
    fn make_node(
        milli_cpu: i64,
        memory: i64,
        extra: &[(&str, &str)],
        pods: Vec<PodBuilder>,
    ) -> NodeInfo {
        let b = NodeBuilder::new("n")
            .allocatable("cpu", &format!("{milli_cpu}m"))
            .allocatable("memory", &memory.to_string());
        let b = extra.iter().fold(b, |b, (r, q)| b.allocatable(r, q));
        b.info(pods.into_iter().map(PodBuilder::build).collect())
    }

    const GPU: &str = "nvidia.com/gpu";

    /// kube-scheduler v1.36's TestNodeResourcesBalancedAllocation, row by row (its DRA rows
    /// aside: they count extended resources backed by DRA, which tether does not serve yet),
    /// each node as (allocatable cpu, memory, extra, pods on it).
    #[test]
    fn scores_the_change_in_balance_as_kube_scheduler_1_36() {
        let cpu_mem = || plugin(&["cpu", "memory"]);
        let with_gpu = || plugin(&["cpu", "memory", GPU]);
        let both = [("1000m", "2000"), ("2000m", "3000")];
        let cpu_only = [("1000m", ""), ("2000m", "")];
        let on = |node: &str, reqs: &[(&str, &str)]| containers("e", Some(node), reqs);
        type Node = (i64, i64, Vec<(&'static str, &'static str)>, Vec<PodBuilder>);
        type Case = (
            &'static str,
            NodeResourcesBalancedAllocation,
            PodBuilder,
            [Node; 2],
            [i64; 2],
        );
        let cases: Vec<Case> = vec![
            (
                "nothing scheduled, resources requested, differently sized nodes",
                cpu_mem(),
                containers("p", None, &both),
                [(4000, 10000, vec![], vec![]), (6000, 10000, vec![], vec![])],
                [68, 75],
            ),
            (
                "resources requested, pods scheduled with resources",
                cpu_mem(),
                containers("p", None, &both),
                [
                    (10000, 20000, vec![], vec![on("node1", &cpu_only)]),
                    (10000, 20000, vec![], vec![on("node2", &both)]),
                ],
                [73, 74],
            ),
            (
                "resources requested, pods scheduled with resources, differently sized nodes",
                cpu_mem(),
                containers("p", None, &both),
                [
                    (10000, 20000, vec![], vec![on("node1", &cpu_only)]),
                    (10000, 50000, vec![], vec![on("node2", &both)]),
                ],
                [73, 70],
            ),
            (
                "resources requested, pods scheduled with resources, nodes to reach min/max score",
                cpu_mem(),
                containers("p", None, &[("", "2000"), ("", "3000")]),
                [
                    (3000, 5000, vec![], vec![on("node1", &cpu_only)]),
                    (3000, 5000, vec![], vec![]),
                ],
                [100, 50],
            ),
            (
                "requested resources at node capacity",
                cpu_mem(),
                containers("p", None, &cpu_only),
                [
                    (6000, 10000, vec![], vec![on("node1", &cpu_only)]),
                    (6000, 10000, vec![], vec![on("node2", &both)]),
                ],
                [62, 62],
            ),
            (
                "scalar resource is included in the score computation if pod requests the scalar resource",
                with_gpu(),
                containers("p", None, &[("0", "0")]).req(GPU, "1"),
                [
                    (
                        3500,
                        40000,
                        vec![(GPU, "8")],
                        vec![on("node1", &both).req(GPU, "3")],
                    ),
                    (3500, 40000, vec![(GPU, "8")], vec![on("node2", &both)]),
                ],
                [75, 76],
            ),
            (
                "scalar resource is not included in the score computation if pod doesn't request the scalar resource",
                with_gpu(),
                containers("p", None, &both),
                [
                    (3500, 40000, vec![(GPU, "8")], vec![]),
                    (3500, 40000, vec![], vec![]),
                ],
                [56, 56],
            ),
        ];
        for (name, plugin, pod, nodes, want) in cases {
            let got = nodes.map(|(cpu, memory, extra, pods)| {
                let node = make_node(cpu, memory, &extra, pods);
                score(&plugin, pod.clone(), &node)
            });
            assert_eq!(got, want, "{name}");
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
            let got: Vec<String> = match build(Some(&args), &"args".into(), &Handle::default()) {
                Ok(_) => vec![],
                Err(errs) => errs.0.into_iter().map(|e| e.path).collect(),
            };
            assert_eq!(got, want, "{name}");
        }
        let built = build(None, &"args".into(), &Handle::default()).expect("defaults are valid");
        assert_eq!(built.name(), NAME);
        assert!(built.pre_score().is_some() && built.score().is_some());
        assert!(built.filter().is_none());
    }
}
