//! NodeResourcesFit: keeps a pod off nodes without room for its requests, and ranks the nodes
//! that have room by how much of them would be allocated (LeastAllocated, MostAllocated or
//! RequestedToCapacityRatio), as kube-scheduler's plugin of that name does.
//!
//! The per-resource accounting shared with NodeResourcesBalancedAllocation (kube-scheduler's
//! `resourceAllocationScorer`) lives here too: [`ResourceSpec`], [`pod_request`] and
//! [`allocatable_and_requested`].

use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::k8s::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, Resource};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    Code, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::profile::validation::{FieldErrors, decode_args};

pub const NAME: &str = "NodeResourcesFit";
pub const DEFAULT_WEIGHT: i32 = 1;

/// The highest score a RequestedToCapacityRatio shape point may give (kube-scheduler's
/// MaxCustomPriorityScore); shape scores are scaled up to MAX_NODE_SCORE.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
const MAX_UTILIZATION: i64 = 100;

const PRE_FILTER_KEY: &str = "PreFilterNodeResourcesFit";
const PRE_SCORE_KEY: &str = "PreScoreNodeResourcesFit";

/// The args of NodeResourcesFit, with kube-scheduler's defaults (LeastAllocated over cpu and
/// memory, each of weight 1).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct NodeResourcesFitArgs {
    /// Extended resources Filter does not check (a device plugin or another component
    /// accounts for them).
    pub ignored_resources: Vec<String>,
    /// Prefixes (`example.com` of `example.com/gpu`) of extended resources Filter does not check.
    pub ignored_resource_groups: Vec<String>,
    pub scoring_strategy: ScoringStrategy,
}

/// How Score ranks the nodes that fit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ScoringStrategy {
    #[serde(rename = "type")]
    pub type_: ScoringStrategyType,
    /// The resources scored and their weights; empty means cpu and memory.
    pub resources: Vec<ResourceSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        ScoringStrategy {
            type_: ScoringStrategyType::LeastAllocated,
            resources: default_resources(),
            requested_to_capacity_ratio: None,
        }
    }
}

/// kube-scheduler's scoring strategy types. An unknown name decodes into `Unsupported`, so that
/// validation can name the field rather than fail the whole decoding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScoringStrategyType {
    /// Favours nodes with the most free room left.
    #[default]
    LeastAllocated,
    /// Favours the fullest nodes (bin packing).
    MostAllocated,
    /// Scores utilization through a piecewise linear shape.
    RequestedToCapacityRatio,
    #[serde(untagged)]
    Unsupported(String),
}

/// A resource taken into account by scoring, and its weight.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ResourceSpec {
    pub name: String,
    /// Absent or 0 means 1, as kube-scheduler defaults it.
    #[serde(default)]
    pub weight: i64,
}

/// cpu and memory, weight 1 each: kube-scheduler's default scored resources.
pub fn default_resources() -> Vec<ResourceSpec> {
    [CPU, MEMORY]
        .into_iter()
        .map(|name| ResourceSpec {
            name: name.to_string(),
            weight: 1,
        })
        .collect()
}

/// Applies kube-scheduler's defaulting of scored resources: none listed means cpu and memory,
/// and a weight left at 0 becomes 1.
pub fn default_resource_specs(resources: &mut Vec<ResourceSpec>) {
    if resources.is_empty() {
        *resources = default_resources();
    }
    for r in resources.iter_mut().filter(|r| r.weight == 0) {
        r.weight = 1;
    }
}

/// The shape of the RequestedToCapacityRatio strategy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RequestedToCapacityRatioParam {
    /// Points of a piecewise linear function from utilization (0..=100) to score (0..=10),
    /// in strictly increasing utilization.
    pub shape: Vec<UtilizationShapePoint>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    pub utilization: i32,
    pub score: i32,
}

impl NodeResourcesFitArgs {
    /// Checks the args as kube-scheduler's ValidateNodeResourcesFitArgs does, naming each
    /// invalid field under `path` (for example `pluginConfig[0].args`).
    pub fn validate(&self, path: &str) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        for (i, name) in self.ignored_resources.iter().enumerate() {
            if !is_qualified_name(name) {
                errs.push(format!("{path}.ignoredResources[{i}]"), QUALIFIED_NAME_MSG);
            }
        }
        for (i, group) in self.ignored_resource_groups.iter().enumerate() {
            let field = format!("{path}.ignoredResourceGroups[{i}]");
            if group.contains('/') {
                errs.push(field.clone(), "resource group name can't contain '/'");
            }
            if !is_qualified_name(group) {
                errs.push(field, QUALIFIED_NAME_MSG);
            }
        }
        let strategy = &self.scoring_strategy;
        let sp = format!("{path}.scoringStrategy");
        if let ScoringStrategyType::Unsupported(t) = &strategy.type_ {
            errs.push(
                format!("{sp}.type"),
                format!(
                    "unsupported value {t:?}: supported values: \"LeastAllocated\", \
                     \"MostAllocated\", \"RequestedToCapacityRatio\""
                ),
            );
        }
        for (i, r) in strategy.resources.iter().enumerate() {
            if !(1..=100).contains(&r.weight) {
                errs.push(
                    format!("{sp}.resources[{i}].weight"),
                    format!("resource weight of {} not in valid range (0, 100]", r.name),
                );
            }
        }
        let shape = strategy.requested_to_capacity_ratio.as_ref();
        if shape.is_some() || strategy.type_ == ScoringStrategyType::RequestedToCapacityRatio {
            let shape = shape.map_or(&[][..], |s| &s.shape[..]);
            validate_shape(
                shape,
                &format!("{sp}.requestedToCapacityRatio.shape"),
                &mut errs,
            );
        }
        errs.into_result()
    }
}

const QUALIFIED_NAME_MSG: &str = "must be a qualified name: an optional DNS subdomain prefix and \
     '/', then at most 63 alphanumerics, '-', '_' or '.', starting and ending alphanumeric";

/// As kube-scheduler's validateFunctionShape.
fn validate_shape(shape: &[UtilizationShapePoint], path: &str, errs: &mut FieldErrors) {
    if shape.is_empty() {
        errs.push(path, "at least one point must be specified");
        return;
    }
    if let Some(i) = (1..shape.len()).find(|&i| shape[i - 1].utilization >= shape[i].utilization) {
        errs.push(
            format!("{path}[{i}].utilization"),
            "values must be sorted in increasing order",
        );
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=MAX_UTILIZATION).contains(&i64::from(p.utilization)) {
            errs.push(
                format!("{path}[{i}].utilization"),
                format!("not in valid range [0, {MAX_UTILIZATION}]"),
            );
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&i64::from(p.score)) {
            errs.push(
                format!("{path}[{i}].score"),
                format!("not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"),
            );
        }
    }
}

/// Decodes (absent args mean defaults), defaults and validates the args, then builds the plugin.
pub fn build(args: Option<&serde_json::Value>, path: &str) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let mut args: NodeResourcesFitArgs = decode_args(args, path)?;
    default_resource_specs(&mut args.scoring_strategy.resources);
    args.validate(path)?;
    Ok(Arc::new(NodeResourcesFit::from_validated(args)))
}

/// The plugin: its ignored resources and its scoring strategy.
pub struct NodeResourcesFit {
    ignored_resources: HashSet<String>,
    ignored_resource_groups: HashSet<String>,
    resources: Vec<ResourceSpec>,
    strategy: Strategy,
}

enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// The shape as (utilization, score scaled to 0..=MAX_NODE_SCORE) points.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

/// What PreFilter computes for Filter: the requests to check, ignored resources left out.
struct PreFilterState {
    requests: Resource,
}

/// What PreScore computes for Score: the pod's request of each scored resource, in order.
struct PreScoreState {
    pod_requests: Vec<i64>,
}

impl NodeResourcesFit {
    fn from_validated(args: NodeResourcesFitArgs) -> Self {
        let strategy = match args.scoring_strategy.type_ {
            ScoringStrategyType::MostAllocated => Strategy::MostAllocated,
            ScoringStrategyType::RequestedToCapacityRatio => {
                let scale = MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE;
                let shape = args.scoring_strategy.requested_to_capacity_ratio;
                Strategy::RequestedToCapacityRatio(
                    shape
                        .into_iter()
                        .flat_map(|s| s.shape)
                        .map(|p| (i64::from(p.utilization), i64::from(p.score) * scale))
                        .collect(),
                )
            }
            // validate() refuses unsupported types before a plugin is built.
            ScoringStrategyType::LeastAllocated | ScoringStrategyType::Unsupported(_) => {
                Strategy::LeastAllocated
            }
        };
        NodeResourcesFit {
            ignored_resources: args.ignored_resources.into_iter().collect(),
            ignored_resource_groups: args.ignored_resource_groups.into_iter().collect(),
            resources: args.scoring_strategy.resources,
            strategy,
        }
    }

    /// Whether Filter leaves this resource unchecked: an extended resource listed in
    /// ignoredResources or whose prefix is in ignoredResourceGroups.
    fn ignores(&self, name: &str) -> bool {
        let group = name.split_once('/').map_or(name, |(g, _)| g);
        (self.ignored_resources.contains(name) || self.ignored_resource_groups.contains(group))
            && is_extended_resource_name(name)
    }

    /// The pod's requests as Filter checks them.
    fn filter_requests(&self, pod: &PodInfo) -> Resource {
        let mut requests = pod.requests.clone();
        if !self.ignored_resources.is_empty() || !self.ignored_resource_groups.is_empty() {
            requests.scalar.retain(|name, _| !self.ignores(name));
        }
        requests
    }

    /// The node's score given the pod's request of each scored resource, as kube-scheduler's
    /// resourceAllocationScorer with the configured strategy.
    fn score_node(&self, node: &NodeInfo, pod_request_of: impl Fn(usize) -> i64) -> i64 {
        let mut node_score: i64 = 0;
        let mut weight_sum: i64 = 0;
        for (i, spec) in self.resources.iter().enumerate() {
            let (allocatable, requested) =
                allocatable_and_requested(node, &spec.name, pod_request_of(i), false);
            if allocatable == 0 {
                continue;
            }
            let score = match &self.strategy {
                Strategy::LeastAllocated => least_requested_score(requested, allocatable),
                Strategy::MostAllocated => most_requested_score(requested, allocatable),
                Strategy::RequestedToCapacityRatio(shape) => {
                    let score = broken_linear(shape, utilization(requested, allocatable));
                    // As upstream, a resource scoring 0 does not count towards the weights.
                    if score <= 0 {
                        continue;
                    }
                    score
                }
            };
            node_score = node_score.saturating_add(score.saturating_mul(spec.weight));
            weight_sum += spec.weight;
        }
        if weight_sum == 0 {
            return 0;
        }
        match self.strategy {
            Strategy::RequestedToCapacityRatio(_) => {
                (node_score as f64 / weight_sum as f64).round() as i64
            }
            _ => node_score / weight_sum,
        }
    }
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodeResourcesFit {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let requests = self.filter_requests(pod);
        state.write(PRE_FILTER_KEY, PreFilterState { requests });
        (PreFilterResult::all_nodes(), Status::success())
    }
}

impl FilterPlugin for NodeResourcesFit {
    /// Rejects the node when the pod would exceed its pod count or any requested resource, with
    /// every reason ("Too many pods", "Insufficient cpu", ...). The code is
    /// UnschedulableAndUnresolvable when a request exceeds what the node has in all, since no
    /// preemption could make room.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let computed;
        let requests = match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Some(s) => &s.requests,
            None => {
                computed = self.filter_requests(pod);
                &computed
            }
        };
        fits_request(requests, node)
    }
}

/// Whether `requests` fit on the node, as kube-scheduler's fitsRequest.
fn fits_request(requests: &Resource, node: &NodeInfo) -> Status {
    let mut reasons: Vec<String> = Vec::new();
    let mut unresolvable = false;
    let (allocatable, used) = (&node.allocatable, &node.requested);

    if node.pods.len() as i64 + 1 > allocatable.allowed_pod_number {
        reasons.push("Too many pods".into());
    }
    let native = [
        (
            "Insufficient cpu",
            requests.milli_cpu,
            allocatable.milli_cpu,
            used.milli_cpu,
        ),
        (
            "Insufficient memory",
            requests.memory,
            allocatable.memory,
            used.memory,
        ),
        (
            "Insufficient ephemeral-storage",
            requests.ephemeral_storage,
            allocatable.ephemeral_storage,
            used.ephemeral_storage,
        ),
    ];
    for (reason, want, alloc, in_use) in native {
        if let Some(beyond_node) = shortfall(want, alloc, in_use) {
            reasons.push(reason.into());
            unresolvable |= beyond_node;
        }
    }
    for (name, &want) in &requests.scalar {
        let alloc = allocatable.scalar.get(name).copied().unwrap_or(0);
        let in_use = used.scalar.get(name).copied().unwrap_or(0);
        if let Some(beyond_node) = shortfall(want, alloc, in_use) {
            reasons.push(format!("Insufficient {name}"));
            unresolvable |= beyond_node;
        }
    }

    match (reasons.is_empty(), unresolvable) {
        (true, _) => Status::success(),
        (false, true) => Status::with_reasons(Code::UnschedulableAndUnresolvable, reasons),
        (false, false) => Status::with_reasons(Code::Unschedulable, reasons),
    }
}

/// `Some(beyond_node)` when a positive request `want` exceeds what is left of the resource;
/// `beyond_node` says it exceeds even the node's whole allocatable amount.
fn shortfall(want: i64, allocatable: i64, in_use: i64) -> Option<bool> {
    (want > 0 && want > allocatable.saturating_sub(in_use)).then_some(want > allocatable)
}

impl PreScorePlugin for NodeResourcesFit {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let pod_requests = self
            .resources
            .iter()
            .map(|r| pod_request(pod, &r.name, false))
            .collect();
        state.write(PRE_SCORE_KEY, PreScoreState { pod_requests });
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesFit {
    /// 0..=MAX_NODE_SCORE by the configured strategy; cpu and memory count the non-zero
    /// requests (a container without a request counts as 100m / 200Mi), as upstream.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(s) => self.score_node(node, |i| s.pod_requests[i]),
            None => self.score_node(node, |i| pod_request(pod, &self.resources[i].name, false)),
        })
    }
}

/// The pod's request of one resource as kube-scheduler's resourceAllocationScorer counts it:
/// with `use_requested` false, cpu and memory are the non-zero requests.
pub fn pod_request(pod: &PodInfo, name: &str, use_requested: bool) -> i64 {
    let r = if use_requested {
        &pod.requests
    } else {
        &pod.non_zero_requests
    };
    match name {
        CPU => r.milli_cpu,
        MEMORY => r.memory,
        EPHEMERAL_STORAGE => r.ephemeral_storage,
        _ => r.scalar.get(name).copied().unwrap_or(0),
    }
}

/// The node's allocatable amount of a resource and what would be requested on it with the pod
/// placed there, as kube-scheduler's calculateResourceAllocatableRequest: cpu and memory count
/// the non-zero requests unless `use_requested`; a resource other than cpu, memory and
/// ephemeral-storage that the pod does not request, or the node does not have, gives (0, 0)
/// so that scoring leaves it out.
pub fn allocatable_and_requested(
    node: &NodeInfo,
    name: &str,
    pod_request: i64,
    use_requested: bool,
) -> (i64, i64) {
    let requested = if use_requested {
        &node.requested
    } else {
        &node.non_zero_requested
    };
    let alloc = &node.allocatable;
    match name {
        CPU => (
            alloc.milli_cpu,
            requested.milli_cpu.saturating_add(pod_request),
        ),
        MEMORY => (alloc.memory, requested.memory.saturating_add(pod_request)),
        EPHEMERAL_STORAGE => (
            alloc.ephemeral_storage,
            node.requested.ephemeral_storage.saturating_add(pod_request),
        ),
        _ if pod_request == 0 => (0, 0),
        _ => match alloc.scalar.get(name) {
            Some(&a) => {
                let used = node.requested.scalar.get(name).copied().unwrap_or(0);
                (a, used.saturating_add(pod_request))
            }
            None => (0, 0),
        },
    }
}

/// As upstream's leastRequestedScore: the free share of the node, 0 when over capacity.
fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return 0;
    }
    ((i128::from(capacity - requested) * i128::from(MAX_NODE_SCORE)) / i128::from(capacity)) as i64
}

/// As upstream's mostRequestedScore: the used share of the node, requests capped at capacity.
fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 {
        return 0;
    }
    let requested = requested.clamp(0, capacity);
    ((i128::from(requested) * i128::from(MAX_NODE_SCORE)) / i128::from(capacity)) as i64
}

/// Utilization in percent (0..=100), truncated; over capacity counts as full.
fn utilization(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return MAX_UTILIZATION;
    }
    ((i128::from(requested) * i128::from(MAX_UTILIZATION)) / i128::from(capacity)) as i64
}

/// The piecewise linear function through `shape` at `p`, flat before the first point and after
/// the last, in integer arithmetic as upstream's BuildBrokenLinearFunction.
fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            return match i.checked_sub(1).map(|j| shape[j]) {
                None => s,
                Some((u0, s0)) => s0 + (s - s0) * (p - u0) / (u - u0),
            };
        }
    }
    shape.last().map_or(0, |&(_, s)| s)
}

/// A qualified name as Kubernetes validates label keys: an optional DNS-1123 subdomain prefix
/// and '/', then a name of at most 63 alphanumerics, '-', '_' or '.', alphanumeric at both ends.
pub fn is_qualified_name(s: &str) -> bool {
    let (prefix, name) = match s.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, s),
    };
    prefix.is_none_or(|p| is_dns1123_subdomain(p, 253)) && is_qualified_name_part(name)
}

fn is_qualified_name_part(name: &str) -> bool {
    let b = name.as_bytes();
    !b.is_empty()
        && b.len() <= 63
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
        && b.iter()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.'))
}

fn is_dns1123_subdomain(s: &str, max_len: usize) -> bool {
    !s.is_empty()
        && s.len() <= max_len
        && s.split('.').all(|label| {
            let b = label.as_bytes();
            !b.is_empty()
                && b[0].is_ascii_alphanumeric()
                && b[b.len() - 1].is_ascii_alphanumeric()
                && b.iter()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || *c == b'-')
        })
}

/// Whether `name` is an extended resource (`example.com/gpu`), as kube-scheduler's
/// IsExtendedResourceName: a prefixed name outside the `kubernetes.io/` namespace that stays a
/// qualified name once quota's `requests.` is put in front of it.
pub fn is_extended_resource_name(name: &str) -> bool {
    let Some((prefix, rest)) = name.split_once('/') else {
        return false;
    };
    !name.contains("kubernetes.io/")
        && !name.starts_with("requests.")
        && is_dns1123_subdomain(prefix, 253 - "requests.".len())
        && is_qualified_name_part(rest)
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
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

    fn rejected(code: Code, reasons: &[&str]) -> Status {
        Status::with_reasons(code, reasons.iter().map(|r| r.to_string()).collect())
    }

    fn plugin(args: NodeResourcesFitArgs) -> NodeResourcesFit {
        NodeResourcesFit::from_validated(args)
    }

    /// Runs Filter with PreFilter's state and without it; both must agree.
    fn filter(plugin: &NodeResourcesFit, pod: PodBuilder, node: &NodeInfo) -> Status {
        let pod = pod.info();
        let mut state = CycleState::new();
        let (result, status) =
            PreFilterPlugin::pre_filter(plugin, &mut state, &pod, &Snapshot::default());
        assert_eq!(
            (result, status),
            (PreFilterResult::all_nodes(), Status::success())
        );
        let with_state = FilterPlugin::filter(plugin, &state, &pod, node);
        let without = FilterPlugin::filter(plugin, &CycleState::new(), &pod, node);
        assert_eq!(
            with_state, without,
            "Filter differs without PreFilter state"
        );
        with_state
    }

    /// Runs Score after PreScore and without it; both must agree.
    fn score(plugin: &NodeResourcesFit, pod: PodBuilder, node: &NodeInfo) -> i64 {
        let pod = pod.info();
        let mut state = CycleState::new();
        let status = PreScorePlugin::pre_score(plugin, &mut state, &pod, &[], &Snapshot::default());
        assert!(status.is_success());
        let with_state = ScorePlugin::score(plugin, &state, &pod, node);
        let without = ScorePlugin::score(plugin, &CycleState::new(), &pod, node);
        assert_eq!(with_state, without, "Score differs without PreScore state");
        with_state.expect("score")
    }

    const GPU: &str = "example.com/gpu";

    #[test]
    fn filter_checks_every_requested_resource_as_kube_scheduler() {
        use Code::{Unschedulable, UnschedulableAndUnresolvable as Unresolvable};
        let cases = [
            (
                "a pod requesting nothing fits",
                pod("p", "", ""),
                node(&[], vec![]),
                Status::success(),
            ),
            (
                "fits beside the pods already there",
                pod("p", "1", "8Gi"),
                node(&[], vec![pod("e", "3", "8Gi")]),
                Status::success(),
            ),
            (
                "too many pods",
                pod("p", "", ""),
                node(&[("pods", "1")], vec![pod("e", "", "")]),
                rejected(Unschedulable, &["Too many pods"]),
            ),
            (
                "insufficient cpu",
                pod("p", "1", ""),
                node(&[], vec![pod("e", "3500m", "")]),
                rejected(Unschedulable, &["Insufficient cpu"]),
            ),
            (
                "insufficient memory",
                pod("p", "", "2Gi"),
                node(&[], vec![pod("e", "", "15Gi")]),
                rejected(Unschedulable, &["Insufficient memory"]),
            ),
            (
                "every reason is kept, pods first",
                pod("p", "1", "2Gi"),
                node(&[("pods", "1")], vec![pod("e", "3500m", "15Gi")]),
                rejected(
                    Unschedulable,
                    &["Too many pods", "Insufficient cpu", "Insufficient memory"],
                ),
            ),
            (
                "a request beyond the whole node is unresolvable",
                pod("p", "5", ""),
                node(&[], vec![]),
                rejected(Unresolvable, &["Insufficient cpu"]),
            ),
            (
                "an init container larger than the containers counts",
                pod("p", "100m", "").init_cpu("4", false),
                node(&[], vec![pod("e", "1", "")]),
                rejected(Unschedulable, &["Insufficient cpu"]),
            ),
            (
                "an init container smaller than the containers does not count",
                pod("p", "1", "").init_cpu("500m", false),
                node(&[], vec![pod("e", "3", "")]),
                Status::success(),
            ),
            (
                "a sidecar adds to the containers",
                pod("p", "1", "").init_cpu("500m", true),
                node(&[], vec![pod("e", "3", "")]),
                rejected(Unschedulable, &["Insufficient cpu"]),
            ),
            (
                "pod overhead counts",
                pod("p", "1", "").overhead_cpu("100m"),
                node(&[], vec![pod("e", "3", "")]),
                rejected(Unschedulable, &["Insufficient cpu"]),
            ),
            (
                "insufficient ephemeral-storage",
                pod("p", "", "").req("ephemeral-storage", "5Gi"),
                node(
                    &[("ephemeral-storage", "10Gi")],
                    vec![pod("e", "", "").req("ephemeral-storage", "8Gi")],
                ),
                rejected(Unschedulable, &["Insufficient ephemeral-storage"]),
            ),
            (
                "an extended resource that fits",
                pod("p", "", "").req(GPU, "2"),
                node(&[(GPU, "4")], vec![pod("e", "", "").req(GPU, "2")]),
                Status::success(),
            ),
            (
                "insufficient extended resource",
                pod("p", "", "").req(GPU, "3"),
                node(&[(GPU, "4")], vec![pod("e", "", "").req(GPU, "2")]),
                rejected(Unschedulable, &["Insufficient example.com/gpu"]),
            ),
            (
                "an extended resource the node does not have",
                pod("p", "", "").req(GPU, "1"),
                node(&[], vec![]),
                rejected(Unresolvable, &["Insufficient example.com/gpu"]),
            ),
            (
                "insufficient hugepages",
                pod("p", "", "").req("hugepages-2Mi", "4Mi"),
                node(&[("hugepages-2Mi", "2Mi")], vec![]),
                rejected(Unresolvable, &["Insufficient hugepages-2Mi"]),
            ),
        ];
        let fit = plugin(NodeResourcesFitArgs::default());
        for (name, pod, node, want) in cases {
            assert_eq!(filter(&fit, pod, &node), want, "{name}");
        }
    }

    #[test]
    fn filter_skips_ignored_extended_resources_only() {
        let args = |resources: &[&str], groups: &[&str]| NodeResourcesFitArgs {
            ignored_resources: resources.iter().map(|s| s.to_string()).collect(),
            ignored_resource_groups: groups.iter().map(|s| s.to_string()).collect(),
            ..Default::default()
        };
        let cases = [
            (
                "an ignored resource is not checked",
                args(&[GPU], &[]),
                pod("p", "", "").req(GPU, "10"),
                Status::success(),
            ),
            (
                "a resource of an ignored group is not checked",
                args(&[], &["example.com"]),
                pod("p", "", "").req(GPU, "10"),
                Status::success(),
            ),
            (
                "other extended resources are still checked",
                args(&[GPU], &[]),
                pod("p", "", "").req("example.com/fpga", "1"),
                rejected(
                    Code::UnschedulableAndUnresolvable,
                    &["Insufficient example.com/fpga"],
                ),
            ),
            (
                "a native resource cannot be ignored",
                args(&["hugepages-2Mi"], &[]),
                pod("p", "", "").req("hugepages-2Mi", "2Mi"),
                rejected(
                    Code::UnschedulableAndUnresolvable,
                    &["Insufficient hugepages-2Mi"],
                ),
            ),
            (
                "the kubernetes.io namespace is not extended, so not ignored",
                args(&[], &["kubernetes.io"]),
                pod("p", "", "").req("kubernetes.io/foo", "1"),
                rejected(
                    Code::UnschedulableAndUnresolvable,
                    &["Insufficient kubernetes.io/foo"],
                ),
            ),
        ];
        for (name, args, pod, want) in cases {
            assert_eq!(
                filter(&plugin(args), pod, &node(&[], vec![])),
                want,
                "{name}"
            );
        }
    }

    fn strategy(type_: ScoringStrategyType, resources: &[(&str, i64)]) -> NodeResourcesFitArgs {
        NodeResourcesFitArgs {
            scoring_strategy: ScoringStrategy {
                type_,
                resources: resources
                    .iter()
                    .map(|&(name, weight)| ResourceSpec {
                        name: name.to_string(),
                        weight,
                    })
                    .collect(),
                requested_to_capacity_ratio: None,
            },
            ..Default::default()
        }
    }

    // Expected scores worked by hand on a node of 4000m CPU and 16Gi memory.
    #[test]
    fn least_allocated_scores_free_room_as_kube_scheduler() {
        let default = || NodeResourcesFitArgs::default();
        let with_gpu = || {
            strategy(
                ScoringStrategyType::LeastAllocated,
                &[("cpu", 1), ("memory", 1), (GPU, 2)],
            )
        };
        let cases = [
            // cpu (3000*100)/4000 = 75, memory (14*100)/16 = 87; (75+87)/2 = 81.
            (
                "an empty node",
                default(),
                pod("p", "1", "2Gi"),
                node(&[], vec![]),
                81,
            ),
            // cpu (2000*100)/4000 = 50, memory (10*100)/16 = 62; 112/2 = 56.
            (
                "pods on the node count",
                default(),
                pod("p", "1", "2Gi"),
                node(&[], vec![pod("e", "1", "4Gi")]),
                56,
            ),
            // 100m and 200Mi: cpu 3900*100/4000 = 97, memory 16184*100/16384 = 98; 195/2 = 97.
            (
                "a best-effort pod counts the non-zero defaults",
                default(),
                pod("p", "", ""),
                node(&[], vec![]),
                97,
            ),
            (
                "a full node scores 0",
                default(),
                pod("p", "1", "8Gi"),
                node(&[], vec![pod("e", "3", "8Gi")]),
                0,
            ),
            // cpu over capacity 0; memory 200Mi + 200Mi: 15984*100/16384 = 97; 97/2 = 48.
            (
                "a resource over capacity scores 0",
                default(),
                pod("p", "1", ""),
                node(&[], vec![pod("e", "4", "")]),
                48,
            ),
            // (75*3 + 87*1) / 4 = 78.
            (
                "weights",
                strategy(
                    ScoringStrategyType::LeastAllocated,
                    &[("cpu", 3), ("memory", 1)],
                ),
                pod("p", "1", "2Gi"),
                node(&[], vec![]),
                78,
            ),
            // gpu (3*100)/4 = 75 at weight 2: (75 + 87 + 150) / 4 = 78.
            (
                "an extended resource the pod requests",
                with_gpu(),
                pod("p", "1", "2Gi").req(GPU, "1"),
                node(&[(GPU, "4")], vec![]),
                78,
            ),
            (
                "an extended resource the pod does not request is left out",
                with_gpu(),
                pod("p", "1", "2Gi"),
                node(&[(GPU, "4")], vec![]),
                81,
            ),
            (
                "an extended resource the node does not have is left out",
                with_gpu(),
                pod("p", "1", "2Gi").req(GPU, "1"),
                node(&[], vec![]),
                81,
            ),
        ];
        for (name, args, pod, node, want) in cases {
            assert_eq!(score(&plugin(args), pod, &node), want, "{name}");
        }
    }

    #[test]
    fn most_allocated_scores_used_room_as_kube_scheduler() {
        let most = || {
            strategy(
                ScoringStrategyType::MostAllocated,
                &[("cpu", 1), ("memory", 1)],
            )
        };
        let cases = [
            // cpu 1000*100/4000 = 25, memory 2*100/16 = 12; 37/2 = 18.
            ("an empty node", pod("p", "1", "2Gi"), node(&[], vec![]), 18),
            // cpu 50, memory 6*100/16 = 37; 87/2 = 43.
            (
                "pods on the node count",
                pod("p", "1", "2Gi"),
                node(&[], vec![pod("e", "1", "4Gi")]),
                43,
            ),
            // cpu 100*100/4000 = 2, memory 200*100/16384 = 1; 3/2 = 1.
            (
                "a best-effort pod counts the non-zero defaults",
                pod("p", "", ""),
                node(&[], vec![]),
                1,
            ),
            // cpu capped at capacity 100, memory 400*100/16384 = 2; 102/2 = 51.
            (
                "a request over capacity is capped",
                pod("p", "1", ""),
                node(&[], vec![pod("e", "4", "")]),
                51,
            ),
        ];
        for (name, pod, node, want) in cases {
            assert_eq!(score(&plugin(most()), pod, &node), want, "{name}");
        }
    }

    #[test]
    fn requested_to_capacity_ratio_follows_the_shape_as_kube_scheduler() {
        let rtcr = |shape: &[(i32, i32)]| {
            let mut args = strategy(
                ScoringStrategyType::RequestedToCapacityRatio,
                &[("cpu", 1), ("memory", 1)],
            );
            args.scoring_strategy.requested_to_capacity_ratio =
                Some(RequestedToCapacityRatioParam {
                    shape: shape
                        .iter()
                        .map(|&(utilization, score)| UtilizationShapePoint { utilization, score })
                        .collect(),
                });
            args
        };
        let cases = [
            // Utilization cpu 25, memory 12 (12.5 truncated); scores 75 and 88; 81.5 rounds to 82.
            (
                "a falling shape favours free nodes",
                rtcr(&[(0, 10), (100, 0)]),
                pod("p", "1", "2Gi"),
                node(&[], vec![]),
                82,
            ),
            // Scores 25 and 12; 18.5 rounds to 19.
            (
                "a rising shape favours full nodes",
                rtcr(&[(0, 0), (100, 10)]),
                pod("p", "1", "2Gi"),
                node(&[], vec![]),
                19,
            ),
            // cpu 25: 0 + 100*(25-20)/80 = 6; memory 12 scores 0 and is not counted: 6/1.
            (
                "a resource scoring 0 does not count towards the weights",
                rtcr(&[(0, 0), (20, 0), (100, 10)]),
                pod("p", "1", "2Gi"),
                node(&[], vec![]),
                6,
            ),
            // cpu over capacity counts as 100% and scores 0; memory 400Mi is 2%: 98.
            (
                "over capacity counts as full",
                rtcr(&[(0, 10), (100, 0)]),
                pod("p", "1", ""),
                node(&[], vec![pod("e", "4", "")]),
                98,
            ),
            (
                "a single point is flat",
                rtcr(&[(50, 5)]),
                pod("p", "1", "2Gi"),
                node(&[], vec![]),
                50,
            ),
        ];
        for (name, args, pod, node, want) in cases {
            assert_eq!(score(&plugin(args), pod, &node), want, "{name}");
        }
    }

    #[test]
    fn args_default_and_decode_as_kube_scheduler() {
        let args = NodeResourcesFitArgs::default();
        assert_eq!(
            args.scoring_strategy.type_,
            ScoringStrategyType::LeastAllocated
        );
        assert_eq!(args.scoring_strategy.resources, default_resources());
        let built = build(None, "args").expect("defaults are valid");
        assert_eq!(built.name(), NAME);
        assert!(built.pre_filter().is_some() && built.filter().is_some());
        assert!(built.pre_score().is_some() && built.score().is_some());

        let decoded: NodeResourcesFitArgs = decode_args(
            Some(&json!({"scoringStrategy": {"type": "MostAllocated",
                "resources": [{"name": "cpu"}, {"name": "memory", "weight": 0}]}})),
            "args",
        )
        .expect("decodes");
        assert_eq!(
            decoded.scoring_strategy.type_,
            ScoringStrategyType::MostAllocated
        );
        let mut resources = decoded.scoring_strategy.resources;
        default_resource_specs(&mut resources);
        assert_eq!(resources, default_resources(), "weights left at 0 become 1");
    }

    #[test]
    fn validation_names_the_invalid_field() {
        let cases = [
            ("defaults are valid", json!(null), vec![]),
            (
                "a weight above 100",
                json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1},
                    {"name": "memory", "weight": 101}]}}),
                vec!["args.scoringStrategy.resources[1].weight"],
            ),
            (
                "a negative weight",
                json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": -1}]}}),
                vec!["args.scoringStrategy.resources[0].weight"],
            ),
            (
                "an unknown strategy type",
                json!({"scoringStrategy": {"type": "Random"}}),
                vec!["args.scoringStrategy.type"],
            ),
            (
                "RequestedToCapacityRatio without a shape",
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
                vec!["args.scoringStrategy.requestedToCapacityRatio.shape"],
            ),
            (
                "a shape that does not increase",
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 1},
                        {"utilization": 50, "score": 2}]}}}),
                vec!["args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization"],
            ),
            (
                "a shape point out of range",
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11},
                        {"utilization": 101, "score": 0}]}}}),
                vec![
                    "args.scoringStrategy.requestedToCapacityRatio.shape[0].score",
                    "args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
                ],
            ),
            (
                "an invalid ignored resource name",
                json!({"ignoredResources": ["example.com/a/b"]}),
                vec!["args.ignoredResources[0]"],
            ),
            (
                "an ignored resource group with a slash",
                json!({"ignoredResourceGroups": ["example.com/gpu"]}),
                vec!["args.ignoredResourceGroups[0]"],
            ),
            (
                "an unknown field",
                json!({"ignoredResource": []}),
                vec!["args"],
            ),
        ];
        for (name, args, want) in cases {
            let got: Vec<String> = match build(Some(&args), "args") {
                Ok(_) => vec![],
                Err(errs) => errs.0.into_iter().map(|e| e.path).collect(),
            };
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn extended_resource_names_as_kubernetes_defines_them() {
        for (name, want) in [
            ("example.com/gpu", true),
            ("nvidia.com/gpu", true),
            ("cpu", false),
            ("hugepages-2Mi", false),
            ("kubernetes.io/foo", false),
            ("requests.example.com/gpu", false),
            ("Example.com/gpu", false),
        ] {
            assert_eq!(is_extended_resource_name(name), want, "{name}");
        }
    }
}
