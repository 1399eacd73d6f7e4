//! The allocator of structured parameters: which devices of the ResourceSlices a node sees
//! satisfy a pod's claims, as kube-scheduler v1.37.2's allocator with its default features
//! (the "incubating" one of k8s.io/dynamic-resource-allocation), and, [`Allocator::following`]
//! 1.38, as v1.38's (the "stable" one, which its default features pick: the differences are
//! named on [`Allocator::stable`] and in `capacity`).
//!
//! - Pools: the slices of the node (`nodeName`), those whose `nodeSelector` matches it, those
//!   for `allNodes`, and those that choose per device (`perDeviceNodeSelection`); of each pool
//!   only the newest generation counts, a pool missing slices of it is *incomplete*, one with a
//!   device named twice is *invalid*. Pools are tried by driver and name, pools with binding
//!   conditions last; devices in the order of their slices (by name) and of the slice.
//! - Search: requests claim after claim, depth first; within a request the devices are
//!   chosen as combinations (each next device after the last one chosen); `firstAvailable`
//!   tries its subrequests in order; `allocationMode: All` takes every selectable device (and
//!   fails on none); at most 32 devices a claim.
//! - A device must be free (not allocated to another claim, nor chosen in this search, unless
//!   the request has `adminAccess`), match its class's and the request's CEL selectors, have its
//!   `NoSchedule`/`NoExecute` taints tolerated, leave its pool's shared counters
//!   non-negative, and keep the claim's `matchAttribute` / `distinctAttribute` constraints.
//! - The result per claim: the devices by request (`req` or `req/sub`), the class and claim
//!   configuration that applies, and the node selector the claim is available on.
//!
//! - Consumable capacity: a device that allows multiple allocations is shared, each claim
//!   consuming part of its capacities ([`capacity`]), its result carrying a share ID and what it
//!   consumed.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use crate::scheduler::informers::devices::SliceIndex;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationConfiguration, DeviceAllocationResult, DeviceClass,
    DeviceRequestAllocationResult, DeviceTaintRule, DeviceToleration, ResourceClaim,
};

mod capacity;
pub(crate) use self::capacity::NO_CAPACITY;
mod explain;
#[cfg(test)]
mod kept_tests;
mod model;
mod pools;
mod result;
mod search;
#[cfg(test)]
mod tests;

pub(crate) use self::model::node_matches;
pub use self::model::{
    AllocateError, Allocated, Allocator, DeviceId, KeptAllocated, MAX_DEVICES_PER_CLAIM, NodeView,
};
use self::model::{Candidate, ClaimPlan, Pool, Request, Want};
use self::search::{ConstraintState, Search};
use super::cel::{DeviceView, Prepared, Selector};
use super::claims;
use crate::locks;

fn compile_all(
    selectors: Option<&Vec<k8s_openapi::api::resource::v1::DeviceSelector>>,
) -> Vec<Result<Selector, String>> {
    selectors
        .into_iter()
        .flatten()
        .map(|s| match &s.cel {
            Some(c) => Selector::compile(&c.expression).map_err(|e| e.to_string()),
            None => Err("CEL expression empty (unsupported selector type?)".to_string()),
        })
        .collect()
}

impl Allocator {
    /// The allocator as kube-scheduler of `release` runs it (see [`Allocator::stable`]).
    pub fn following(mut self, release: crate::k8s::release::Release) -> Self {
        self.stable = release.at_least(38);
        self
    }

    /// Whether an empty device could serve the want's capacity requests: an `All` request
    /// leaves out a device too small for it (upstream checks the device's static capacity
    /// there, and what its shares hold only when it takes the device).
    fn could_hold(
        &self,
        c: &Candidate<'_>,
        plan: &ClaimPlan,
        w: &Want,
    ) -> Result<bool, AllocateError> {
        Ok(self
            .consumption(c.device, plan, w, &c.id.device)?
            .is_some_and(|consumed| {
                capacity::fits(&consumed, capacity::of(c.device), None, None, self.stable)
            }))
    }

    /// Plans the claims to allocate against the classes; `Err` is what upstream reports as the
    /// attempt's error (a missing class, a request tether cannot serve).
    pub fn new(
        claims_to_allocate: Vec<Arc<ResourceClaim>>,
        classes: &HashMap<String, Arc<DeviceClass>>,
        slices: Arc<SliceIndex>,
        taint_rules: Vec<Arc<DeviceTaintRule>>,
        allocated: Allocated,
    ) -> Result<Self, String> {
        let mut plans = Vec::new();
        for claim in claims_to_allocate {
            let key = claims::key(&claim);
            let devices = claim
                .spec
                .as_ref()
                .and_then(|s| s.devices.clone())
                .unwrap_or_default();
            let mut requests = Vec::new();
            let mut min_total = 0usize;
            for r in devices.requests.iter().flatten() {
                let mut wants = Vec::new();
                let first_available = r.first_available.as_ref().is_some_and(|f| !f.is_empty());
                if let Some(e) = &r.exactly {
                    wants.push(want(
                        &key,
                        &r.name,
                        None,
                        &e.device_class_name,
                        e.selectors.as_ref(),
                        e.allocation_mode.as_deref(),
                        e.count,
                        e.admin_access == Some(true),
                        e.tolerations.clone(),
                        capacity_requests(e.capacity.as_ref()),
                        classes,
                    )?);
                } else if first_available {
                    for s in r.first_available.iter().flatten() {
                        wants.push(want(
                            &key,
                            &r.name,
                            Some(&s.name),
                            &s.device_class_name,
                            s.selectors.as_ref(),
                            s.allocation_mode.as_deref(),
                            s.count,
                            false,
                            s.tolerations.clone(),
                            capacity_requests(s.capacity.as_ref()),
                            classes,
                        )?);
                    }
                } else {
                    return Err(format!(
                        "claim {key}, request {}: unknown request type",
                        r.name
                    ));
                }
                let min = wants
                    .iter()
                    .filter(|w| !w.all)
                    .map(|w| w.count)
                    .min()
                    .unwrap_or(0);
                if min > MAX_DEVICES_PER_CLAIM.saturating_sub(min_total) {
                    return Err(format!(
                        "claim {key}, request {}: adding {min} devices exceeds the claim limit of {MAX_DEVICES_PER_CLAIM}, with {min_total} already accounted for",
                        r.name
                    ));
                }
                min_total = min_total.saturating_add(min);
                requests.push(Request {
                    wants,
                    first_available,
                });
            }
            let constraints = devices.constraints.unwrap_or_default();
            for (i, c) in constraints.iter().enumerate() {
                if c.match_attribute.is_none() && c.distinct_attribute.is_none() {
                    return Err(format!(
                        "claim {key}, constraint #{i}: empty constraint (unsupported constraint type?)"
                    ));
                }
            }
            plans.push(ClaimPlan {
                claim,
                key,
                requests,
                constraints,
            });
        }
        Ok(Allocator {
            plans,
            slices,
            taint_rules,
            stable: false,
            allocated,
            selectable: Mutex::default(),
        })
    }

    /// The allocation of every claim on `node`, in the claims' order, or `None` when the
    /// devices the node sees cannot satisfy them.
    pub fn allocate(
        &self,
        node: &NodeView<'_>,
        deadline: Option<std::time::Instant>,
    ) -> Result<Option<Vec<AllocationResult>>, AllocateError> {
        let pools = self.pools(node)?;
        let candidates = self.candidates(&pools, node)?;
        let mut search = Search {
            alloc: self,
            pools,
            candidates: &candidates,
            picked: Default::default(),
            results: vec![Vec::new(); self.plans.len()],
            constraint_state: self
                .plans
                .iter()
                .map(|p| {
                    p.constraints
                        .iter()
                        .map(|_| ConstraintState::default())
                        .collect()
                })
                .collect(),
            chosen: vec![Vec::new(); self.plans.len()],
            all_devices: Default::default(),
            deadline,
            allocating: Default::default(),
        };
        // The devices of `All` wants, per (claim, request, want).
        let mut all_devices: foldhash::HashMap<(usize, usize, usize), Vec<usize>> =
            Default::default();
        for (ci, plan) in self.plans.iter().enumerate() {
            for (ri, req) in plan.requests.iter().enumerate() {
                for (wi, w) in req.wants.iter().enumerate() {
                    if !w.all {
                        continue;
                    }
                    for p in &search.pools {
                        let pool_id = format!("{}/{}", p.driver, p.name);
                        let state = if p.incomplete {
                            "being updated"
                        } else if p.invalid {
                            "invalid"
                        } else {
                            continue;
                        };
                        let why = format!(
                            "claim {}, request {}: asks for all devices, but resource pool {pool_id} is currently {state}",
                            plan.key, w.own_name
                        );
                        // 1.38: this node cannot be used now; before: the attempt fails.
                        return Err(if self.stable {
                            AllocateError::OnNode(why)
                        } else {
                            AllocateError::Fatal(why)
                        });
                    }
                    let mut found = Vec::new();
                    for (i, c) in candidates.iter().enumerate() {
                        if self.is_selectable(c, ci, ri, wi)? && self.could_hold(c, plan, w)? {
                            found.push(i);
                        }
                    }
                    all_devices.insert((ci, ri, wi), found);
                }
            }
        }
        // The claim limit, now that `All` requests count the devices the node has for them.
        for (ci, plan) in self.plans.iter().enumerate() {
            let mut total = 0usize;
            for (ri, req) in plan.requests.iter().enumerate() {
                let min = req
                    .wants
                    .iter()
                    .enumerate()
                    .map(|(wi, w)| {
                        if w.all {
                            all_devices.get(&(ci, ri, wi)).map_or(0, Vec::len)
                        } else {
                            w.count
                        }
                    })
                    .min()
                    .unwrap_or(0);
                if min > MAX_DEVICES_PER_CLAIM.saturating_sub(total) {
                    let name = req
                        .wants
                        .first()
                        .map(|w| w.parent.as_str())
                        .unwrap_or_default();
                    return Err(AllocateError::Fatal(format!(
                        "claim {}, request {name}: adding {min} devices exceeds the claim limit of {MAX_DEVICES_PER_CLAIM}, with {total} already accounted for",
                        plan.key
                    )));
                }
                total = total.saturating_add(min);
            }
        }
        search.all_devices = all_devices;
        let ok = search.claim_step(0, 0)?;
        if !ok {
            if search.pools.iter().any(|p| p.invalid) {
                return Err(AllocateError::OnNode(
                    "invalid resource pools were encountered".into(),
                ));
            }
            return Ok(None);
        }
        let mut out = Vec::new();
        for (ci, plan) in self.plans.iter().enumerate() {
            out.push(self.result(
                plan,
                &search.results[ci],
                &search.chosen[ci],
                &candidates,
                node,
            )?);
        }
        Ok(Some(out))
    }

    /// Whether the candidate matches want `wi` of request `ri` of claim `ci`: the class's
    /// selectors, then the request's. A device selected per node is a candidate only on the
    /// nodes it names ([`Allocator::candidates`]), so the verdict holds on every node.
    fn is_selectable(
        &self,
        c: &Candidate<'_>,
        ci: usize,
        ri: usize,
        wi: usize,
    ) -> Result<bool, AllocateError> {
        let memo_key = (std::ptr::from_ref(c.device) as usize, ci, ri, wi);
        if let Some(&v) = locks::lock(&self.selectable).get(&memo_key) {
            return Ok(v);
        }
        let plan = &self.plans[ci];
        let w = &plan.requests[ri].wants[wi];
        let view = device_view(c);
        // The device's CEL variable, built for the first selector and kept for the others.
        let mut prepared: Option<Prepared<'_>> = None;
        let mut matches = |s: &Selector| -> Result<bool, super::cel::CelError> {
            if prepared.is_none() {
                prepared = Some(Prepared::new(&view)?);
            }
            match &prepared {
                Some(p) => s.matches_prepared(p),
                None => Ok(false),
            }
        };
        let class_name = w.class.metadata.name.as_deref().unwrap_or_default();
        let mut ok = true;
        for (i, s) in w.class_selectors.iter().enumerate() {
            let s = s.as_ref().map_err(|e| {
                AllocateError::Fatal(format!(
                    "class {class_name}: selector #{i}: CEL compile error: {e}"
                ))
            })?;
            if !matches(s).map_err(|e| {
                AllocateError::Fatal(format!(
                    "class {class_name}: selector #{i} on device {}: CEL runtime error: {e}",
                    c.id
                ))
            })? {
                ok = false;
                break;
            }
        }
        if ok {
            for (i, s) in w.selectors.iter().enumerate() {
                let s = s.as_ref().map_err(|e| {
                    AllocateError::Fatal(format!(
                        "claim {}: selector #{i}: CEL compile error: {e}",
                        plan.key
                    ))
                })?;
                if !matches(s).map_err(|e| {
                    AllocateError::Fatal(format!(
                        "claim {}: selector #{i} on device {}: CEL runtime error: {e}",
                        plan.key, c.id
                    ))
                })? {
                    ok = false;
                    break;
                }
            }
        }
        locks::lock(&self.selectable).insert(memo_key, ok);
        Ok(ok)
    }
}

#[allow(clippy::too_many_arguments)]
fn want(
    claim: &str,
    parent: &str,
    sub: Option<&str>,
    class_name: &str,
    selectors: Option<&Vec<k8s_openapi::api::resource::v1::DeviceSelector>>,
    mode: Option<&str>,
    count: Option<i64>,
    admin: bool,
    tolerations: Option<Vec<DeviceToleration>>,
    capacity: BTreeMap<String, String>,
    classes: &HashMap<String, Arc<DeviceClass>>,
) -> Result<Want, String> {
    let own_name = sub.unwrap_or(parent).to_string();
    if class_name.is_empty() {
        return Err(format!(
            "claim {claim}, request {own_name}: missing device class name (unsupported request type?)"
        ));
    }
    let Some(class) = classes.get(class_name) else {
        return Err(format!(
            "claim {claim}, request {own_name}: could not retrieve device class {class_name}: deviceclass.resource.k8s.io \"{class_name}\" not found"
        ));
    };
    let (all, count) = match mode.unwrap_or("ExactCount") {
        "ExactCount" => {
            let n = count.unwrap_or(1);
            let n = usize::try_from(n).map_err(|_| {
                format!("claim {claim}, request {own_name}: exact count {n} is too large")
            })?;
            (false, n)
        }
        "All" => (true, 0),
        other => {
            return Err(format!(
                "claim {claim}, request {own_name}: unsupported count mode {other}"
            ));
        }
    };
    Ok(Want {
        name: match sub {
            Some(s) => format!("{parent}/{s}"),
            None => parent.to_string(),
        },
        own_name,
        parent: parent.to_string(),
        class_selectors: compile_all(class.spec.as_ref().and_then(|s| s.selectors.as_ref())),
        selectors: compile_all(selectors),
        class: class.clone(),
        all,
        count,
        admin,
        tolerations,
        capacity,
    })
}

/// A request's `capacity.requests`, as quantity strings by capacity name.
fn capacity_requests(
    c: Option<&k8s_openapi::api::resource::v1::CapacityRequirements>,
) -> BTreeMap<String, String> {
    c.and_then(|c| c.requests.as_ref())
        .map(|r| r.iter().map(|(k, q)| (k.clone(), q.0.clone())).collect())
        .unwrap_or_default()
}

pub(crate) static NO_ATTRIBUTES: BTreeMap<String, k8s_openapi::api::resource::v1::DeviceAttribute> =
    BTreeMap::new();

/// The device as its CEL selectors see it.
fn device_view<'a>(c: &'a Candidate<'_>) -> DeviceView<'a> {
    DeviceView {
        driver: &c.slice.spec.driver,
        attributes: c.device.attributes.as_ref().unwrap_or(&NO_ATTRIBUTES),
        capacity: capacity::of(c.device),
        allow_multiple_allocations: c.device.allow_multiple_allocations,
    }
}
