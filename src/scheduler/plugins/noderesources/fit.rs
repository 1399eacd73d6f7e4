//! NodeResourcesFit: keeps a pod off nodes without room for its requests, and ranks the nodes
//! that have room by how much of them would be allocated (LeastAllocated, MostAllocated or
//! RequestedToCapacityRatio, see [`super::scoring`]), as kube-scheduler's plugin of that name.
//!
//! An extended resource a DeviceClass serves (DRA's extended resources) is not checked on a
//! node whose allocatable lacks it: DynamicResources allocates devices for it there.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use super::dra_scoring::DraScoring;
use super::resource_allocation::{
    ResourceSpec, allocatable_and_requested, default_resource_specs, request_of,
};
use super::scoring::{
    MAX_CUSTOM_PRIORITY_SCORE, ScoringStrategy, ScoringStrategyType, Strategy, broken_linear,
    least_requested_score, most_requested_score, utilization, validate_shape,
};
use crate::k8s::names::is_extended_resource_name;
use crate::k8s::release::Release;
use crate::k8s::resource::Resource;
use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath, decode_args};
use crate::scheduler::framework::{
    Code, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::informers::devices::{DeviceIndex, is_dra_extended_resource_name};
use crate::scheduler::plugins::handle::Handle;

pub const NAME: &str = "NodeResourcesFit";
pub const DEFAULT_WEIGHT: i32 = 1;

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

impl NodeResourcesFitArgs {
    /// Checks the args as kube-scheduler's ValidateNodeResourcesFitArgs does, naming each
    /// invalid field under `path` (for example `pluginConfig[0].args`).
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        for (i, name) in self.ignored_resources.iter().enumerate() {
            errs.check_qualified_name(&path.child("ignoredResources").index(i), name);
        }
        for (i, group) in self.ignored_resource_groups.iter().enumerate() {
            let field = path.child("ignoredResourceGroups").index(i);
            if group.contains('/') {
                errs.push(field.clone(), "resource group name can't contain '/'");
            }
            errs.check_qualified_name(&field, group);
        }
        let strategy = &self.scoring_strategy;
        let sp = path.child("scoringStrategy");
        if let ScoringStrategyType::Unsupported(t) = &strategy.type_ {
            errs.push(
                sp.child("type"),
                format!(
                    "unsupported value {t:?}: supported values: \"LeastAllocated\", \
                     \"MostAllocated\", \"RequestedToCapacityRatio\""
                ),
            );
        }
        for (i, r) in strategy.resources.iter().enumerate() {
            if !(1..=100).contains(&r.weight) {
                errs.push(
                    sp.child("resources").index(i).child("weight"),
                    format!("resource weight of {} not in valid range (0, 100]", r.name),
                );
            }
        }
        let shape = strategy.requested_to_capacity_ratio.as_ref();
        if shape.is_some() || strategy.type_ == ScoringStrategyType::RequestedToCapacityRatio {
            let shape = shape.map_or(&[][..], |s| &s.shape[..]);
            validate_shape(
                shape,
                &sp.child("requestedToCapacityRatio").child("shape"),
                &mut errs,
            );
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
    let mut args: NodeResourcesFitArgs = decode_args(args, path)?;
    default_resource_specs(&mut args.scoring_strategy.resources);
    args.validate(path)?;
    Ok(Arc::new(
        NodeResourcesFit::from_validated(args)
            .with_devices(handle.devices.clone())
            .scoring_as(handle.release),
    ))
}

/// The plugin: its ignored resources and its scoring strategy.
pub struct NodeResourcesFit {
    ignored_resources: HashSet<String>,
    ignored_resource_groups: HashSet<String>,
    resources: Vec<ResourceSpec>,
    strategy: Strategy,
    /// The DeviceClasses, for the extended resources they serve.
    devices: Option<Arc<DeviceIndex>>,
    /// The release whose scorer this one is (which reads pod-level requests from 1.38).
    release: Release,
}

/// What PreFilter computes for Filter: the requests to check, ignored resources left out, and
/// the requested extended resources a DeviceClass serves.
struct PreFilterState {
    requests: Resource,
    by_dra: Vec<String>,
}

/// What PreScore computes for Score: the pod's request of each scored resource, in order.
struct PreScoreState {
    pod_requests: Vec<i64>,
    /// Set when a scored resource is an extended resource a DeviceClass serves.
    dra: Option<DraScoring>,
}

impl NodeResourcesFit {
    pub(super) fn from_validated(args: NodeResourcesFitArgs) -> Self {
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
            devices: None,
            release: Release::default(),
        }
    }

    /// Scores as kube-scheduler of `release` does.
    pub(super) fn scoring_as(mut self, release: Release) -> Self {
        self.release = release;
        self
    }

    /// The plugin reading DeviceClasses from `devices` (for the extended resources they serve).
    pub(super) fn with_devices(mut self, devices: Arc<DeviceIndex>) -> Self {
        self.devices = Some(devices);
        self
    }

    /// What scoring reads of DRA, when a scored resource is one a DeviceClass serves.
    fn dra_scoring(&self) -> Option<DraScoring> {
        let devices = self.devices.as_ref()?;
        DraScoring::for_resources(devices, self.resources.iter().map(|r| r.name.as_str()))
    }

    /// The requested extended resources a DeviceClass serves (upstream's
    /// shouldDelegateResourceToDRA, the class half of it).
    fn served_by_dra(&self, requests: &Resource) -> Vec<String> {
        let Some(devices) = &self.devices else {
            return Vec::new();
        };
        let mut names = requests
            .scalar
            .iter()
            .filter(|(name, v)| **v != 0 && is_dra_extended_resource_name(name))
            .peekable();
        if names.peek().is_none() {
            return Vec::new();
        }
        let devices = devices.read();
        names
            .filter(|(name, _)| devices.class_for_resource(name).is_some())
            .map(|(name, _)| name.clone())
            .collect()
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

    /// The requests Filter checks and those a DeviceClass serves: PreFilter's, or computed
    /// here when PreFilter did not run (as upstream falls back to).
    fn requests<'a>(
        &self,
        state: &'a CycleState,
        pod: &PodInfo,
    ) -> (Cow<'a, Resource>, Cow<'a, [String]>) {
        match state.read::<PreFilterState>(PRE_FILTER_KEY) {
            Some(s) => (Cow::Borrowed(&s.requests), Cow::Borrowed(&s.by_dra[..])),
            None => {
                let requests = self.filter_requests(pod);
                let by_dra = self.served_by_dra(&requests);
                (Cow::Owned(requests), Cow::Owned(by_dra))
            }
        }
    }

    /// The node's score given the pod's request of each scored resource, as kube-scheduler's
    /// resourceAllocationScorer with the configured strategy.
    fn score_node(
        &self,
        node: &NodeInfo,
        pod_request_of: impl Fn(usize) -> i64,
        dra: Option<&DraScoring>,
    ) -> i64 {
        let mut node_score: i64 = 0;
        let mut weight_sum: i64 = 0;
        for (i, spec) in self.resources.iter().enumerate() {
            let (allocatable, requested) =
                allocatable_and_requested(node, &spec.name, pod_request_of(i), false, dra);
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
    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(super::fit_hints::registrations(
            self.devices.clone(),
            self.release,
        ))
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
        let by_dra = self.served_by_dra(&requests);
        state.write(PRE_FILTER_KEY, PreFilterState { requests, by_dra });
        (PreFilterResult::all_nodes(), Status::success())
    }
}

impl FilterPlugin for NodeResourcesFit {
    /// Rejects the node when the pod would exceed its pod count or any requested resource, with
    /// every reason ("Too many pods", "Insufficient cpu", ...). The code is
    /// UnschedulableAndUnresolvable when a request exceeds what the node has in all, since no
    /// preemption could make room.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let (requests, by_dra) = self.requests(state, pod);
        fits_request(&requests, &by_dra, node)
    }

    /// How much of each short resource would have to be freed on the node, or that no
    /// eviction makes room when the request exceeds the node's whole allocatable amount.
    fn remedy(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let (requests, by_dra) = self.requests(state, pod);
        let mut needs: Vec<String> = Vec::new();
        if too_many_pods(node) {
            needs.push(format!(
                "{} runs its maximum of {} pods: one would have to go",
                node.name, node.allocatable.allowed_pod_number
            ));
        }
        for s in shortages(&requests, &by_dra, node) {
            let show = |v: i64| amount(s.resource, v);
            needs.push(if s.beyond_node {
                format!(
                    "{}: the pod requests {} {}, more than its {} allocatable: no eviction makes room",
                    node.name,
                    show(s.want),
                    s.resource,
                    show(s.allocatable)
                )
            } else {
                format!(
                    "free {} {} on {} (it has {} of {} allocatable requested; the pod requests {})",
                    show(s.want.saturating_sub(s.allocatable.saturating_sub(s.in_use))),
                    s.resource,
                    node.name,
                    show(s.in_use),
                    show(s.allocatable),
                    show(s.want)
                )
            });
        }
        (!needs.is_empty()).then(|| needs.join("; "))
    }
}

/// An amount of a resource as a person writes it: CPU in cores or millicores, memory and
/// storage in the largest binary unit that divides it, anything else as a count.
fn amount(resource: &str, value: i64) -> String {
    if resource == "cpu" {
        return if value % 1000 == 0 {
            (value / 1000).to_string()
        } else {
            format!("{value}m")
        };
    }
    if resource == "memory" || resource == "ephemeral-storage" || resource.starts_with("hugepages-")
    {
        for (unit, size) in [
            ("Ti", 1i64 << 40),
            ("Gi", 1 << 30),
            ("Mi", 1 << 20),
            ("Ki", 1 << 10),
        ] {
            if value != 0 && value % size == 0 {
                return format!("{}{unit}", value / size);
            }
        }
    }
    value.to_string()
}

/// Whether `requests` fit on the node, as kube-scheduler's fitsRequest; `by_dra` are the
/// extended resources DRA serves where the node's allocatable lacks them.
fn fits_request(requests: &Resource, by_dra: &[String], node: &NodeInfo) -> Status {
    let mut reasons: Vec<String> = Vec::new();
    if too_many_pods(node) {
        reasons.push("Too many pods".into());
    }
    let short = shortages(requests, by_dra, node);
    let unresolvable = short.iter().any(|s| s.beyond_node);
    reasons.extend(short.iter().map(|s| format!("Insufficient {}", s.resource)));
    match (reasons.is_empty(), unresolvable) {
        (true, _) => Status::success(),
        (false, true) => Status::with_reasons(Code::UnschedulableAndUnresolvable, reasons),
        (false, false) => Status::with_reasons(Code::Unschedulable, reasons),
    }
}

/// Whether one more pod would exceed the node's pod count.
fn too_many_pods(node: &NodeInfo) -> bool {
    node.pods.len() as i64 + 1 > node.allocatable.allowed_pod_number
}

/// A resource the pod requests more of than the node has left.
struct Shortage<'a> {
    resource: &'a str,
    want: i64,
    allocatable: i64,
    in_use: i64,
    /// More than the node's whole allocatable amount: no eviction makes room.
    beyond_node: bool,
}

/// Every requested resource the node has too little of: cpu, memory and ephemeral-storage
/// first, then the scalar resources in name order (the order of fitsRequest's reasons). An
/// extended resource in `by_dra` that the node's allocatable lacks is DynamicResources' to
/// check, not this plugin's.
fn shortages<'a>(requests: &'a Resource, by_dra: &[String], node: &NodeInfo) -> Vec<Shortage<'a>> {
    let (allocatable, used) = (&node.allocatable, &node.requested);
    let native = [
        (
            "cpu",
            requests.milli_cpu,
            allocatable.milli_cpu,
            used.milli_cpu,
        ),
        ("memory", requests.memory, allocatable.memory, used.memory),
        (
            "ephemeral-storage",
            requests.ephemeral_storage,
            allocatable.ephemeral_storage,
            used.ephemeral_storage,
        ),
    ];
    let scalar = requests.scalar.iter().filter_map(|(name, &want)| {
        let alloc = allocatable.scalar.get(name).copied().unwrap_or(0);
        if alloc <= 0 && by_dra.contains(name) {
            return None;
        }
        let in_use = used.scalar.get(name).copied().unwrap_or(0);
        Some((name.as_str(), want, alloc, in_use))
    });
    native
        .into_iter()
        .chain(scalar)
        .filter_map(|(resource, want, alloc, in_use)| {
            shortfall(want, alloc, in_use).map(|beyond_node| Shortage {
                resource,
                want,
                allocatable: alloc,
                in_use,
                beyond_node,
            })
        })
        .collect()
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
        let scored = crate::k8s::resource::pod_requests_scored(&pod.pod, self.release);
        let pod_requests = self
            .resources
            .iter()
            .map(|r| request_of(&scored, &r.name))
            .collect();
        let dra = self.dra_scoring();
        state.write(PRE_SCORE_KEY, PreScoreState { pod_requests, dra });
        Status::success()
    }
}

impl ScorePlugin for NodeResourcesFit {
    /// 0..=MAX_NODE_SCORE by the configured strategy; cpu and memory count the non-zero
    /// requests (a container without a request counts as 100m / 200Mi), as upstream.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(match state.read::<PreScoreState>(PRE_SCORE_KEY) {
            Some(s) => self.score_node(node, |i| s.pod_requests[i], s.dra.as_ref()),
            None => {
                let scored = crate::k8s::resource::pod_requests_scored(&pod.pod, self.release);
                let dra = self.dra_scoring();
                self.score_node(
                    node,
                    |i| request_of(&scored, &self.resources[i].name),
                    dra.as_ref(),
                )
            }
        })
    }
}
