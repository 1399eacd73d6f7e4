//! DynamicResources: a pod's ResourceClaims decide where it can run, and where it runs decides
//! which devices its unallocated claims get, as kube-scheduler v1.37.2's DynamicResources
//! plugin with its default feature gates.
//!
//! - PreEnqueue keeps a pod out of the active queue until every claim it names exists (a
//!   template's claim is named in its status by kube-controller-manager) ([`claims`]).
//! - PreFilter reads the claims: allocated ones limit the nodes to their allocation's node
//!   selector; unallocated ones get an [`allocator::Allocator`] over every ResourceSlice, with
//!   the devices other claims hold (in the API or in flight) counted as taken.
//! - Filter allocates on each node and keeps the result; Score prefers nodes where
//!   `firstAvailable` got an earlier choice.
//! - Reserve puts the node's allocation in flight, so the next pod does not take the same
//!   devices before the API has it; Unreserve takes it back (and the pod's reservation, if
//!   PreBind wrote it).
//! - PreBind writes each claim's finalizer, `status.allocation` and the pod in
//!   `status.reservedFor`, then waits for the devices' binding conditions, if any
//!   ([`binding`]).
//! - PostFilter, when no node fits, deallocates one claim that was allocated for nobody else
//!   and was not available on some node, so that the next attempt may allocate it elsewhere.
//! - Extended resources a DeviceClass serves get a claim of their own, made by the scheduler
//!   on the node chosen ([`extended`]).

pub mod allocator;
pub mod args;
pub mod binding;
pub mod cel;
pub mod claims;
pub mod extended;
mod group_release;
pub mod hints;
mod post_filter;
mod pre_bind;
mod preemption;
mod reserve;
mod writes;

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ContainerExtendedResourceRequest;
use k8s_openapi::api::resource::v1::{
    AllocationResult, ResourceClaim, ResourceClaimConsumerReference,
};
use kube::api::Api;

use self::allocator::{AllocateError, Allocated, Allocator, KeptAllocated, NodeView};
use self::claims::holds_claims;
use self::extended::Extended;
use self::writes::{
    bind_claim, create_claim, delete_claim, patch_extended_status, unreserve_claim,
};
use crate::gate::{Write, WriteGate};
use crate::k8s::api_errors;
use crate::k8s::node_selector::Terms;
use crate::k8s::pod::Pod;
use crate::locks;
use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath, decode_args};
use crate::scheduler::framework::{
    Code, CycleState, FilterPlugin, GROUP_CLAIMS_KEY, GroupClaims, Nomination, Plugin,
    PostFilterContext, PostFilterPlugin, PreBindPlugin, PreEnqueuePlugin, PreFilterPlugin,
    PreFilterResult, REMOVED_PODS_KEY, RemovedPods, ReservePlugin, ScorePlugin, SharedState,
    Status,
};
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::informers::pod_groups::{Group, GroupApi, GroupKey, PodGroupIndex};
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::helper::default_normalize_score;

pub const NAME: &str = "DynamicResources";
/// kube-scheduler's weight for DynamicResources' score.
pub const DEFAULT_WEIGHT: i32 = 2;

const STATE_KEY: &str = "DynamicResources";
/// How long PostFilter waits for a deallocation's write.
const DEALLOCATION_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(10);
/// The most choices a `firstAvailable` request has (upstream's FirstAvailableDeviceRequestMaxSize).
const FIRST_AVAILABLE_MAX: i64 = 8;

/// The plugin: the DRA objects it reads, and the client PreBind and PostFilter write with.
pub struct DynamicResources {
    timeouts: args::Timeouts,
    devices: Arc<DeviceIndex>,
    client: Option<kube::Client>,
    gate: WriteGate,
    /// Writes `BindingConditionsPending`. `None` in unit tests.
    events: Option<crate::recorder::EventWriter>,
    /// Where PostFilter's deallocation runs; `None` outside a tokio runtime (unit tests).
    runtime: Option<tokio::runtime::Handle>,
    /// The release whose rules apply where releases differ (DeviceTaintRules from 1.37,
    /// PostFilter's words).
    release: crate::k8s::release::Release,
    /// DRAWorkloadResourceClaims: a PodGroup's claims are its pods' and reserved for it.
    group_claims: bool,
    /// The PodGroups a pod's claims may be reserved for (with `group_claims`).
    pod_groups: Arc<PodGroupIndex>,
    /// The devices every claim holds, kept from cycle to cycle (PreFilter counts only the
    /// claims that changed since the last cycle, not every claim of the cluster).
    kept: std::sync::Mutex<KeptAllocated>,
}

/// The claim of a pod's extended resources as a set of nodes needs it (those whose
/// allocatable lacks the same resources), with the allocator for it and the pod's other claims.
struct Variant {
    allocator: Allocator,
    claim: Arc<ResourceClaim>,
    mappings: Vec<ContainerExtendedResourceRequest>,
}

/// What an allocator other than PreFilter's is built from (a variant's, or one with the
/// devices of the pods a preemption dry run took off a node freed): the pod's claims to
/// allocate and the cluster's devices and claims as PreFilter read them.
struct Inputs {
    to_allocate: Vec<Arc<ResourceClaim>>,
    /// Every claim (in-flight allocations included), by UID.
    everyone: crate::scheduler::informers::claim_view::ClaimMap,
    classes: HashMap<String, Arc<k8s_openapi::api::resource::v1::DeviceClass>>,
    slices: Arc<crate::scheduler::informers::devices::SliceIndex>,
    rules: Vec<Arc<k8s_openapi::api::resource::v1::DeviceTaintRule>>,
    allocated: Allocated,
    /// The release whose allocator rules apply ([`Allocator::following`]).
    release: crate::k8s::release::Release,
}

/// An allocator with claims' devices freed: its variant (by address) and the freed claims.
type FreedKey = (Option<usize>, Vec<String>);

/// What the cycle learnt of the pod's claims, and what each node and the reservation chose.
#[derive(Default)]
struct State {
    /// The claims the pod names (the extended resources' claim is in `extended`).
    claims: Vec<Arc<ResourceClaim>>,
    /// Per claim, with DRAWorkloadResourceClaims: what PreBind reserves it for (the pod, or
    /// its PodGroup); empty without (the pod).
    bind_to: Vec<ResourceClaimConsumerReference>,
    /// Per claim: the nodes an allocated claim is available on (`None`: any).
    available_on: Vec<Option<Terms>>,
    allocator: Option<Allocator>,
    /// Per node: the allocation of each unallocated claim, in the claims' order, then that of
    /// the extended resources' claim where the node needs one.
    by_node: Mutex<HashMap<String, Vec<AllocationResult>>>,
    /// The pod's extended resources a class serves.
    extended: Option<Extended>,
    /// Set when there is anything to allocate: what other allocators are built from.
    inputs: Option<Inputs>,
    /// The extended resources' claim and its allocator, by the resources a node leaves to DRA.
    variants: Mutex<HashMap<BTreeSet<String>, Arc<Variant>>>,
    /// In a preemption dry run: the allocators with some claims' devices freed, by variant
    /// (its address) and the freed claims' UIDs.
    freed: Mutex<HashMap<FreedKey, Arc<Allocator>>>,
    /// Per node that needs it: the variant of the extended resources' claim.
    extended_by_node: Mutex<HashMap<String, Arc<Variant>>>,
    /// The extended resources' claim with the allocation Reserve chose, and its mappings.
    reserved_extended: Mutex<Option<(Arc<ResourceClaim>, Vec<ContainerExtendedResourceRequest>)>>,
    /// The extended resources' claim as PreBind created it, and whether its allocation was
    /// written (then it stays in flight until the watch brings it or its deletion).
    created_extended: Mutex<Option<(Arc<ResourceClaim>, bool)>>,
    /// Claims found not available on some node (PostFilter may deallocate one).
    unavailable: Mutex<BTreeSet<usize>>,
    /// The claims with the allocation Reserve chose, as PreBind writes them.
    reserved: Mutex<Vec<Arc<ResourceClaim>>>,
    /// The claims PreBind wrote, as the API server returned them: their allocation stays in
    /// flight until the watch brings it (an Unreserve after the write does not free the
    /// devices, which stay allocated), and Unreserve takes the pod's reservation back from them.
    written: Mutex<Vec<Arc<ResourceClaim>>>,
    /// Unallocated claims whose allocation another member of this group cycle made pending:
    /// reused (with that allocation), not allocated again.
    shared: Vec<Arc<ResourceClaim>>,
}

impl State {
    fn to_allocate(&self) -> impl Iterator<Item = (usize, &Arc<ResourceClaim>)> {
        self.claims
            .iter()
            .enumerate()
            .filter(|(_, c)| !claims::allocated(c) && !self.is_shared(c))
    }

    fn is_shared(&self, claim: &ResourceClaim) -> bool {
        self.shared
            .iter()
            .any(|s| s.metadata.uid == claim.metadata.uid)
    }
}

impl Plugin for DynamicResources {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        _signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        pod.pod
            .spec
            .as_ref()
            .and_then(|s| s.resource_claims.as_ref())
            .is_none_or(|c| c.is_empty())
    }
    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(hints::registrations(&self.devices, self.group_claims))
    }
    fn pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    /// A preemption dry run frees the devices of the claims only its removed pods use.
    fn filter_reads_removed_pods(&self) -> bool {
        true
    }
    fn post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn group_release(
        &self,
    ) -> Option<&dyn crate::scheduler::framework::group_post_filter::GroupReleasePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for DynamicResources {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if !claims::has_claims(&pod.pod) {
            return Status::success();
        }
        let devices = self.devices.read();
        if let Some(why) = claims::not_served(&devices, &pod.pod) {
            return Status::unresolvable(why);
        }
        match claims::pod_claims(&devices, &pod.pod, self.group_claims) {
            Ok(_) => Status::success(),
            Err(why) => Status::unresolvable(why.to_string()),
        }
    }
}

impl PreFilterPlugin for DynamicResources {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let out = self.read_claims(state, pod);
        // In a group cycle the member's state is kept for the group's PostFilter.
        if let (Some(group), Some(shared)) = (
            state.read::<GroupClaims>(GROUP_CLAIMS_KEY),
            state.shared(STATE_KEY),
        ) {
            let uid = pod.uid().to_string();
            let mut members = locks::lock(&group.members);
            members.retain(|(u, _)| *u != uid);
            members.push((uid, shared));
        }
        out
    }
}

impl DynamicResources {
    /// PreFilter's work: the pod's claims read, what to allocate and where allocated ones are
    /// available, kept in the cycle state.
    fn read_claims(&self, state: &mut CycleState, pod: &PodInfo) -> (PreFilterResult, Status) {
        let all = PreFilterResult::all_nodes();
        let mut s = State::default();
        let has_extended = !pod.requests.scalar.is_empty();
        if !claims::has_claims(&pod.pod) && !has_extended {
            state.write(STATE_KEY, s);
            return (all, Status::skip());
        }
        let devices = self.devices.read();
        let entries = match claims::pod_claim_entries(&devices, &pod.pod, self.group_claims) {
            Ok(found) => found,
            Err(why) => {
                let why = why.to_string();
                drop(devices);
                state.write(STATE_KEY, s);
                return (all, Status::unresolvable(why));
            }
        };
        s.extended = has_extended
            .then(|| extended::pre_filter(&devices, pod))
            .flatten();
        if self.group_claims {
            // Each binding computed beside its claim; upstream computes them over every entry
            // of the pod while its claims skip a template the controller chose not to create,
            // which could shift them against each other there (never here).
            match self.bindings(&pod.pod, &entries) {
                Ok(bindings) => s.bind_to = bindings,
                Err(why) => {
                    drop(devices);
                    state.write(STATE_KEY, s);
                    return (all, Status::unresolvable(why));
                }
            }
        }
        let found: Vec<Arc<ResourceClaim>> = entries.into_iter().map(|(c, _)| c).collect();
        if found.is_empty() && s.extended.is_none() {
            drop(devices);
            state.write(STATE_KEY, s);
            return (all, Status::skip());
        }
        let mut to_allocate = Vec::new();
        let mut verdict = Status::success();
        let group = state
            .read::<GroupClaims>(GROUP_CLAIMS_KEY)
            .map(|g| locks::lock(&g.pending).clone())
            .unwrap_or_default();
        for claim in &found {
            let uid = claim.metadata.uid.as_deref().unwrap_or_default();
            // An allocation another member of this group cycle made pending: reused.
            let pending = (!claims::allocated(claim) && group.contains(uid))
                .then(|| devices.in_flight_claim(uid).cloned())
                .flatten();
            let on = pending
                .as_deref()
                .unwrap_or(claim)
                .status
                .as_ref()
                .and_then(|st| st.allocation.as_ref())
                .and_then(|a| a.node_selector.as_ref())
                .map(Terms::lenient);
            s.available_on.push(on);
            if let Some(pending) = pending {
                s.shared.push(pending);
                continue;
            }
            if claims::allocated(claim) {
                continue;
            }
            if devices.in_flight(uid) {
                verdict = Status::unresolvable(format!(
                    "resource claim {} is in the process of being allocated",
                    claims::key(claim)
                ));
                break;
            }
            if let Some(problem) = class_problem(&devices, claim) {
                verdict = problem;
                break;
            }
            to_allocate.push(claim.clone());
        }
        if verdict.is_success() && (!to_allocate.is_empty() || s.extended.is_some()) {
            let everyone = devices.claim_view().claims().clone();
            let allocated = locks::lock(&self.kept).update(devices.claim_view());
            let slices = devices.slice_index();
            // DeviceTaintRules apply from 1.37 (DRADeviceTaintRules, off by default in 1.36).
            let rules: Vec<_> = if self.release.at_least(37) {
                devices.taint_rules.values().cloned().collect()
            } else {
                Vec::new()
            };
            s.inputs = Some(Inputs {
                to_allocate: to_allocate.clone(),
                everyone,
                classes: devices.classes.clone(),
                slices: slices.clone(),
                rules: rules.clone(),
                allocated: allocated.clone(),
                release: self.release,
            });
            if !to_allocate.is_empty() {
                match Allocator::new(to_allocate, &devices.classes, slices, rules, allocated) {
                    Ok(a) => s.allocator = Some(a.following(self.release)),
                    Err(e) => verdict = Status::error(e),
                }
            }
        }
        drop(devices);
        s.claims = found;
        state.write(STATE_KEY, s);
        (all, verdict)
    }
}

/// Whether an allocated claim's devices failed their binding conditions, or did not meet them
/// in time: the claim is not available anywhere until PostFilter deallocates it.
fn binding_failed(claim: &ResourceClaim, timeout: std::time::Duration) -> bool {
    claims::allocated(claim)
        && match binding::ready_for_binding(claim) {
            Err(_) => true,
            Ok(ready) => !ready && binding::timed_out(claim, timeout),
        }
}

/// A request whose class is missing or unnamed (upstream's validateDeviceClass).
fn class_problem(
    devices: &crate::scheduler::informers::devices::Devices,
    claim: &ResourceClaim,
) -> Option<Status> {
    let check = |name: &str, class: &str| -> Option<Status> {
        if class.is_empty() {
            return Some(Status::error(format!(
                "request {name}: unsupported request type"
            )));
        }
        (!devices.classes.contains_key(class)).then(|| {
            Status::unresolvable(format!(
                "request {name}: device class {class} does not exist"
            ))
        })
    };
    for r in claim
        .spec
        .iter()
        .flat_map(|s| s.devices.iter())
        .flat_map(|d| d.requests.iter().flatten())
    {
        if let Some(e) = &r.exactly {
            if let Some(p) = check(&r.name, &e.device_class_name) {
                return Some(p);
            }
        } else if let Some(subs) = r.first_available.as_ref().filter(|f| !f.is_empty()) {
            for sub in subs {
                if let Some(p) = check(&format!("{}/{}", r.name, sub.name), &sub.device_class_name)
                {
                    return Some(p);
                }
            }
        } else {
            return Some(Status::unresolvable(format!(
                "resource claim {}, request {}: unknown request type",
                claims::key(claim),
                r.name
            )));
        }
    }
    None
}

impl DynamicResources {
    /// The Workload API PodGroup the pod names, as watched (upstream's getPodGroupSnapshot):
    /// None when it names none, upstream's words when the group is not known.
    fn pod_group(
        &self,
        pod: &Pod,
    ) -> Result<Option<Arc<k8s_openapi::api::scheduling::v1beta1::PodGroup>>, String> {
        let Some(name) = crate::scheduler::informers::pod_groups::group_name(pod) else {
            return Ok(None);
        };
        let key = GroupKey {
            api: GroupApi::Workload,
            namespace: pod.metadata.namespace.clone().unwrap_or_default(),
            name: name.to_string(),
        };
        match self.pod_groups.get(&key) {
            Some(Group::Workload(group)) => Ok(Some(group)),
            _ => Err(format!("pod group state not found for pod group {key}")),
        }
    }

    /// What PreBind reserves each of the pod's claims for (upstream's podResourceClaimBindings):
    /// its PodGroup where the group declares the same claim, else the pod.
    fn bindings(
        &self,
        pod: &Pod,
        entries: &[(
            Arc<ResourceClaim>,
            &k8s_openapi::api::core::v1::PodResourceClaim,
        )],
    ) -> Result<Vec<ResourceClaimConsumerReference>, String> {
        let group = self.pod_group(pod)?;
        entries
            .iter()
            .map(|(_, entry)| claims::bind_to(pod, group.as_deref(), entry))
            .collect()
    }

    /// The extended resources' claim for nodes that leave `to_dra` to DRA, with its
    /// allocator: built once per cycle for each such set (nodes mostly agree, so once).
    fn variant(
        &self,
        s: &State,
        ext: &Extended,
        pod: &PodInfo,
        to_dra: BTreeSet<String>,
    ) -> Result<Arc<Variant>, String> {
        if let Some(v) = locks::lock(&s.variants).get(&to_dra) {
            return Ok(v.clone());
        }
        let Some(inputs) = &s.inputs else {
            return Err("DynamicResources: no allocator inputs for extended resources".into());
        };
        let (claim, mappings) = extended::node_claim(ext, &pod.pod, &to_dra);
        let claim = Arc::new(claim);
        let mut to_allocate = inputs.to_allocate.clone();
        to_allocate.push(claim.clone());
        let allocator = Allocator::new(
            to_allocate,
            &inputs.classes,
            inputs.slices.clone(),
            inputs.rules.clone(),
            inputs.allocated.clone(),
        )?
        .following(inputs.release);
        let v = Arc::new(Variant {
            allocator,
            claim,
            mappings,
        });
        // Two Filters may build the same variant at once: the first one kept wins.
        Ok(locks::lock(&s.variants).entry(to_dra).or_insert(v).clone())
    }
}

impl FilterPlugin for DynamicResources {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
        };
        let mut variant = None;
        if let Some(ext) = &s.extended {
            if ext.stale() {
                return Status::unresolvable("cannot schedule extended resource claim");
            }
            let to_dra = match extended::on_node(ext, node) {
                Ok(to_dra) => to_dra,
                Err(why) => return Status::unresolvable(why),
            };
            if !to_dra.is_empty() {
                match self.variant(s, ext, pod, to_dra) {
                    Ok(v) => variant = Some(v),
                    Err(e) => return Status::error(e),
                }
            }
        }
        if s.claims.is_empty() && variant.is_none() {
            return Status::success();
        }
        let labels = node.labels();
        let unavailable: Vec<usize> = s
            .available_on
            .iter()
            .enumerate()
            .filter(|&(i, on)| {
                on.as_ref().is_some_and(|t| !t.matches(&node.name, labels))
                    || s.claims
                        .get(i)
                        .is_some_and(|c| binding_failed(c, self.timeouts.binding))
            })
            .map(|(i, _)| i)
            .collect();
        let mut allocations = None;
        let removed_pods = state.read::<RemovedPods>(REMOVED_PODS_KEY);
        let freed = match removed_pods {
            Some(removed) => match s.freed_allocator(&removed.0, variant.as_ref()) {
                Ok(a) => a,
                Err(e) => return Status::error(e),
            },
            None => None,
        };
        let allocator = match (&freed, &variant) {
            (Some(a), _) => Some(&**a),
            (None, Some(v)) => Some(&v.allocator),
            (None, None) => s.allocator.as_ref(),
        };
        if let Some(allocator) = allocator {
            let view = NodeView {
                name: &node.name,
                labels,
            };
            let deadline = self
                .timeouts
                .filter
                .and_then(|t| std::time::Instant::now().checked_add(t));
            match allocator.allocate(&view, deadline) {
                Ok(Some(found)) => allocations = Some(found),
                // Evicting the node's pods that hold claims may free devices (preemption
                // counts them); without such pods nothing on the node can help, nor while
                // devices of pods already gone wait to be deallocated (evicting more would be
                // for nothing: their deallocation requeues the pod).
                Ok(None)
                    if node.pods.iter().any(|p| holds_claims(&p.pod))
                        && !s.awaits_deallocation(node, removed_pods.map(|r| &*r.0)) =>
                {
                    return Status::unschedulable("cannot allocate all claims");
                }
                Ok(None) => return Status::unresolvable("cannot allocate all claims"),
                Err(AllocateError::OnNode(why)) => return Status::unresolvable(why),
                Err(AllocateError::Fatal(why)) => return Status::error(why),
                Err(AllocateError::TimedOut) => {
                    return Status::error(format!(
                        "node {}: timed out trying to allocate devices",
                        node.name
                    ));
                }
            }
        }
        if !unavailable.is_empty() {
            locks::lock(&s.unavailable).extend(unavailable);
            return Status::unresolvable("resourceclaim not available on the node");
        }
        if let Some(found) = allocations {
            locks::lock(&s.by_node).insert(node.name.clone(), found);
        }
        if let Some(v) = variant {
            locks::lock(&s.extended_by_node).insert(node.name.clone(), v);
        }
        Status::success()
    }

    /// For `tether explain`: which allocated claims the node cannot reach or whose devices
    /// failed their binding conditions, and, device by device, why the node's devices do not
    /// satisfy the claims to allocate.
    fn remedy(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let s = state.read::<State>(STATE_KEY)?;
        let labels = node.labels();
        let mut why = Vec::new();
        for (claim, on) in s.claims.iter().zip(&s.available_on) {
            if on.as_ref().is_some_and(|t| !t.matches(&node.name, labels)) {
                let group = claim
                    .status
                    .iter()
                    .flat_map(|st| st.reserved_for.iter().flatten())
                    .find(|c| claims::is_group_consumer(c));
                let until = match group {
                    Some(g) => format!(
                        "it is deallocated once its PodGroup {} is deleted, or when the group is placed nowhere with none of its pods scheduled",
                        g.name
                    ),
                    None => "it is deallocated once no pod uses it".to_string(),
                };
                why.push(format!(
                    "claim {} is allocated to devices {} cannot reach (its allocation's node selector); {until}",
                    claims::key(claim),
                    node.name
                ));
            } else if binding_failed(claim, self.timeouts.binding) {
                why.push(format!(
                    "claim {}: its devices failed their binding conditions or did not meet them in time; it is deallocated to be allocated again",
                    claims::key(claim)
                ));
            }
        }
        let variant = s.extended.as_ref().and_then(|ext| {
            if ext.stale() {
                why.push(format!(
                    "the claim {} made for the pod's extended resources in an earlier attempt is deleted first, then the pod tried again",
                    claims::key(&ext.claim)
                ));
            }
            match extended::on_node(ext, node) {
                Err(_) => why.push(format!(
                    "{} has none of {} in its allocatable, and no DeviceClass serves it",
                    node.name,
                    ext.requested
                        .keys()
                        .filter(|r| !ext.resources.contains_key(*r))
                        .cloned()
                        .collect::<Vec<_>>()
                        .join(", ")
                )),
                Ok(to_dra) if !to_dra.is_empty() => return self.variant(s, ext, pod, to_dra).ok(),
                Ok(_) => {}
            }
            None
        });
        let allocator = match &variant {
            Some(v) => Some(&v.allocator),
            None => s.allocator.as_ref(),
        };
        if let Some(allocator) = allocator {
            why.push(allocator.explain(&NodeView {
                name: &node.name,
                labels,
            }));
        }
        (!why.is_empty()).then(|| why.join("; "))
    }
}

impl ScorePlugin for DynamicResources {
    /// 8 less the index of the subrequest `firstAvailable` took, summed over the requests.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Err(Status::error(format!(
                "cannot read {STATE_KEY:?} from cycleState"
            )));
        };
        let by_node = locks::lock(&s.by_node);
        let Some(found) = by_node.get(&node.name) else {
            return Ok(0);
        };
        let mut fresh = found.iter();
        let mut score = 0i64;
        for claim in &s.claims {
            let allocation = match claim.status.as_ref().and_then(|st| st.allocation.as_ref()) {
                Some(a) => a,
                None => match fresh.next() {
                    Some(a) => a,
                    None => {
                        return Err(Status::error(format!(
                            "number of allocations {} is smaller than number of claims needing allocation",
                            found.len()
                        )));
                    }
                },
            };
            let chosen: BTreeSet<&str> = allocation
                .devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
                .map(|r| r.request.as_str())
                .filter(|r| r.contains('/'))
                .collect();
            for r in claim
                .spec
                .iter()
                .flat_map(|s| s.devices.iter())
                .flat_map(|d| d.requests.iter().flatten())
            {
                for (j, sub) in r.first_available.iter().flatten().enumerate() {
                    if chosen.contains(format!("{}/{}", r.name, sub.name).as_str()) {
                        score +=
                            FIRST_AVAILABLE_MAX - i64::try_from(j).unwrap_or(FIRST_AVAILABLE_MAX);
                    }
                }
            }
        }
        Ok(score)
    }

    fn normalize_scores(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [crate::scheduler::framework::NodeScore],
    ) -> Status {
        default_normalize_score(crate::scheduler::framework::MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

/// Builds the plugin from its args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let timeouts = decode_args::<args::DynamicResourcesArgs>(args, path)?.validate(path)?;
    Ok(Arc::new(DynamicResources {
        timeouts,
        devices: handle.devices.clone(),
        client: handle.client.clone(),
        gate: handle.gate.clone(),
        events: handle.events.clone(),
        runtime: tokio::runtime::Handle::try_current().ok(),
        release: handle.release,
        group_claims: handle.features.dra_workload_resource_claims,
        pod_groups: handle.pod_groups.clone(),
        kept: Default::default(),
    }))
}

#[cfg(test)]
mod tests {
    /// PostFilter runs on the scheduling thread, outside the runtime: its bounded write must
    /// not need the runtime's context to be made (it once panicked the scheduling loop).
    #[test]
    fn a_post_filter_write_is_bounded_from_outside_the_runtime() {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .expect("a runtime");
        let handle = rt.handle().clone();
        let done = std::thread::spawn(move || super::post_filter::bounded(&handle, async { 7 }))
            .join()
            .expect("no panic on the scheduling thread");
        assert_eq!(done.ok(), Some(7));
    }
}
