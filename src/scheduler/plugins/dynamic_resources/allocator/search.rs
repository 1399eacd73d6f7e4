//! The depth-first search over the devices a node sees, as upstream's allocateOne and
//! allocateDevice.

use std::collections::BTreeMap;

use k8s_openapi::api::resource::v1::{
    Device, DeviceAttribute, DeviceConstraint, DeviceTaint, DeviceToleration,
};

use super::capacity;
use super::model::{
    AllocateError, Allocator, Candidate, ClaimPlan, DeviceId, MAX_DEVICES_PER_CLAIM, Pool, Want,
    consumed,
};

/// The device a want took, by candidate index.
#[derive(Clone, Debug)]
pub(super) struct Pick {
    pub(super) request: usize,
    pub(super) want: usize,
    pub(super) candidate: usize,
    /// What the pick took of its pool's shared counters, to give back when undone.
    pub(super) counters: Vec<(String, String, i128)>,
    /// A share of a device that allows multiple allocations: its ID and what it consumes.
    pub(super) share: Option<Share>,
}

/// One claim's share of a device that allows multiple allocations.
#[derive(Clone, Debug)]
pub(super) struct Share {
    pub(super) id: String,
    pub(super) consumed: BTreeMap<String, capacity::Amount>,
    /// Whether this share made the device's entry among those being allocated.
    created: bool,
}

/// A random version-4 UUID, as upstream names a share.
fn share_id() -> String {
    let mut b: [u8; 16] = rand::random();
    b[6] = (b[6] & 0x0f) | 0x40;
    b[8] = (b[8] & 0x3f) | 0x80;
    let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}

#[derive(Clone, Debug, Default)]
pub(super) struct ConstraintState {
    /// matchAttribute: how many devices hold the reference value, and the value.
    count: usize,
    value: Option<AttrValue>,
    /// distinctAttribute: the values taken.
    distinct: Vec<AttrValue>,
}

#[derive(Clone, Debug, PartialEq)]
enum AttrValue {
    Int(i64),
    Bool(bool),
    Str(String),
    Version(String),
}

impl AttrValue {
    /// The value as a constraint compares it: from 1.38 (`stable`) a version without its build
    /// metadata, as semantic versions compare (`1.2.3+a` equals `1.2.3+b`); before, as written.
    fn compared(self, stable: bool) -> AttrValue {
        match self {
            AttrValue::Version(v) if stable => match v.split_once('+') {
                Some((version, _build)) => AttrValue::Version(version.to_string()),
                None => AttrValue::Version(v),
            },
            other => other,
        }
    }
}

fn attr_value(a: &DeviceAttribute) -> Option<AttrValue> {
    if let Some(v) = a.int {
        Some(AttrValue::Int(v))
    } else if let Some(v) = a.bool {
        Some(AttrValue::Bool(v))
    } else if let Some(v) = &a.string {
        Some(AttrValue::Str(v.clone()))
    } else {
        a.version.as_ref().map(|v| AttrValue::Version(v.clone()))
    }
}

/// The attribute `fqn` (`domain/id`) of a device: the exact key, or the bare id when the
/// domain is the device's driver.
fn lookup_attribute(device: &Device, driver: &str, fqn: &str) -> Option<AttrValue> {
    let attrs = device.attributes.as_ref()?;
    if let Some(a) = attrs.get(fqn) {
        return attr_value(a);
    }
    let (domain, id) = fqn.split_once('/')?;
    if domain == driver {
        return attrs.get(id).and_then(attr_value);
    }
    None
}

impl Allocator {
    /// What want `w` of `plan`'s claim consumes of each of `device`'s capacities, or None when
    /// it asks for a capacity the device lacks (another device may serve it). A request the
    /// range arithmetic cannot represent fails the attempt, the device `named` in the error.
    pub(super) fn consumption(
        &self,
        device: &Device,
        plan: &ClaimPlan,
        w: &Want,
        named: &dyn std::fmt::Display,
    ) -> Result<Option<BTreeMap<String, capacity::Amount>>, AllocateError> {
        capacity::consumed(&w.capacity, capacity::of(device), self.stable).map_err(|e| {
            AllocateError::Fatal(format!(
                "claim {}, request {}: checking capacity for device {named}: {e}",
                plan.key, w.own_name
            ))
        })
    }
}

pub(super) struct Search<'s, 'a> {
    pub(super) alloc: &'a Allocator,
    pub(super) pools: Vec<Pool<'a>>,
    pub(super) candidates: &'s [Candidate<'a>],
    /// Devices taken in this search (not by admin access... as upstream, those too), by the
    /// claims that took them.
    pub(super) picked: foldhash::HashMap<DeviceId, Vec<usize>>,
    pub(super) results: Vec<Vec<Pick>>,
    pub(super) constraint_state: Vec<Vec<ConstraintState>>,
    /// Per claim, the (request, want) chosen for each request so far.
    pub(super) chosen: Vec<Vec<(usize, usize)>>,
    pub(super) all_devices: foldhash::HashMap<(usize, usize, usize), Vec<usize>>,
    /// When the search gives up (the plugin's filterTimeout), checked before each device.
    pub(super) deadline: Option<std::time::Instant>,
    /// What the shares chosen in this search consume of each device's capacities.
    pub(super) allocating: foldhash::HashMap<DeviceId, BTreeMap<String, i128>>,
}

impl<'s, 'a> Search<'s, 'a> {
    pub(super) fn claim_step(&mut self, ci: usize, ri: usize) -> Result<bool, AllocateError> {
        if ci == self.alloc.plans.len() {
            return Ok(true);
        }
        if ri == self.alloc.plans[ci].requests.len() {
            return self.claim_step(ci + 1, 0);
        }
        let n = self.alloc.plans[ci].requests[ri].wants.len();
        let first_available = self.alloc.plans[ci].requests[ri].first_available;
        for wi in 0..n {
            self.chosen[ci].push((ri, wi));
            let ok = self.want_step(ci, ri, wi, 0, 0)?;
            if ok {
                return Ok(true);
            }
            self.chosen[ci].pop();
            if !first_available {
                break;
            }
        }
        Ok(false)
    }

    /// Takes device `done` (0-based) of want `wi`, from candidate `start` on.
    fn want_step(
        &mut self,
        ci: usize,
        ri: usize,
        wi: usize,
        done: usize,
        start: usize,
    ) -> Result<bool, AllocateError> {
        let alloc = self.alloc;
        let w = &alloc.plans[ci].requests[ri].wants[wi];
        if w.all {
            let devices = self
                .all_devices
                .get(&(ci, ri, wi))
                .cloned()
                .unwrap_or_default();
            if devices.is_empty() {
                return Ok(false);
            }
            if done == devices.len() {
                return self.claim_step(ci, ri + 1);
            }
            if devices.len() - done > MAX_DEVICES_PER_CLAIM.saturating_sub(self.results[ci].len()) {
                return Ok(false);
            }
            let c = devices[done];
            if !self.add(ci, ri, wi, c, true)? {
                return Ok(false);
            }
            if self.want_step(ci, ri, wi, done + 1, 0)? {
                return Ok(true);
            }
            self.remove(ci, c);
            return Ok(false);
        }
        if done == w.count {
            return self.claim_step(ci, ri + 1);
        }
        if w.count - done > MAX_DEVICES_PER_CLAIM.saturating_sub(self.results[ci].len()) {
            return Ok(false);
        }
        for c in start..self.candidates.len() {
            if self
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
            {
                return Err(AllocateError::TimedOut);
            }
            let cand = &self.candidates[c];
            if self.in_use(cand, ci, w) || !alloc.is_selectable(cand, ci, ri, wi)? {
                continue;
            }
            if !self.add(ci, ri, wi, c, false)? {
                continue;
            }
            if self.want_step(ci, ri, wi, done + 1, c + 1)? {
                return Ok(true);
            }
            self.remove(ci, c);
        }
        Ok(false)
    }

    /// Whether `cand` is not free for want `w` of claim `ci`: with admin access, only when the
    /// same claim took it already and it is not shared; else when another claim holds it whole
    /// (allocated, or picked in this search), or (1.38) it no longer allows multiple
    /// allocations while shares of it live.
    fn in_use(&self, cand: &Candidate<'_>, ci: usize, w: &Want) -> bool {
        let multi = cand.device.allow_multiple_allocations == Some(true);
        if w.admin {
            return !multi && self.picked.get(&cand.id).is_some_and(|by| by.contains(&ci));
        }
        self.alloc.allocated.holds(&cand.id)
            || self.picked.contains_key(&cand.id)
            || (self.alloc.stable && !multi && self.has_shares(&cand.id))
    }

    /// Whether shares of the device live: in claims allocated already or chosen in this search.
    fn has_shares(&self, id: &DeviceId) -> bool {
        self.alloc.allocated.has_shares(id) || self.allocating.contains_key(id)
    }

    /// Checks and records candidate `c` for want `wi`: taints, counters, constraints.
    fn add(
        &mut self,
        ci: usize,
        ri: usize,
        wi: usize,
        c: usize,
        must: bool,
    ) -> Result<bool, AllocateError> {
        let alloc = self.alloc;
        let plan = &alloc.plans[ci];
        let w = &plan.requests[ri].wants[wi];
        let cand = &self.candidates[c];
        if self.in_use(cand, ci, w) {
            return Ok(false);
        }
        // Taints: NoSchedule and NoExecute must be tolerated.
        if !cand
            .taints
            .iter()
            .all(|t| tolerates_all(w.tolerations.as_deref(), t))
        {
            return Ok(false);
        }
        // Capacity: what the request consumes must fit beside the device's shares.
        let Some(share_consumed) = alloc.consumption(cand.device, plan, w, &cand.id)? else {
            return Ok(false);
        };
        if !capacity::fits(
            &share_consumed,
            capacity::of(cand.device),
            alloc.allocated.shares(&cand.id),
            self.allocating.get(&cand.id),
            alloc.stable,
        ) {
            return Ok(false);
        }
        // Counters, unless a share of the device already took them.
        let multi = cand.device.allow_multiple_allocations == Some(true);
        let already_shared = multi && self.has_shares(&cand.id);
        let consumptions = if already_shared {
            Vec::new()
        } else {
            cand.device.consumes_counters.clone().unwrap_or_default()
        };
        let pool = &mut self.pools[cand.pool];
        let mut taken: Vec<(String, String, i128)> = Vec::new();
        let mut over = false;
        for consumption in &consumptions {
            for (name, q) in &consumption.counters {
                let need = consumed(&q.value.0);
                if let Some(left) = pool
                    .counters
                    .get_mut(&consumption.counter_set)
                    .and_then(|s| s.get_mut(name))
                {
                    *left = left.saturating_sub(need);
                    taken.push((consumption.counter_set.clone(), name.clone(), need));
                    if *left < 0 {
                        over = true;
                    }
                }
            }
        }
        if over {
            give_back(pool, &taken);
            return Ok(false);
        }
        // Constraints.
        let mut applied = Vec::new();
        let mut ok = true;
        for (k, constraint) in plan.constraints.iter().enumerate() {
            let applies = constraint
                .requests
                .as_ref()
                .is_none_or(|r| r.is_empty() || r.iter().any(|n| *n == w.parent || *n == w.name));
            if !applies {
                continue;
            }
            let state = &mut self.constraint_state[ci][k];
            if let Some(fqn) = &constraint.match_attribute {
                let Some(v) = lookup_attribute(cand.device, &cand.id.driver, fqn)
                    .map(|v| v.compared(alloc.stable))
                else {
                    ok = false;
                    break;
                };
                if state.count == 0 {
                    state.value = Some(v);
                } else if state.value.as_ref() != Some(&v) {
                    ok = false;
                    break;
                }
                state.count += 1;
                applied.push(k);
            } else if let Some(fqn) = &constraint.distinct_attribute {
                let Some(v) = lookup_attribute(cand.device, &cand.id.driver, fqn)
                    .map(|v| v.compared(alloc.stable))
                else {
                    ok = false;
                    break;
                };
                if state.distinct.contains(&v) {
                    ok = false;
                    break;
                }
                state.distinct.push(v);
                applied.push(k);
            }
        }
        if !ok {
            for k in applied.into_iter().rev() {
                undo_constraint(&mut self.constraint_state[ci][k], &plan.constraints[k]);
            }
            give_back(&mut self.pools[cand.pool], &taken);
            if must {
                return Err(AllocateError::Fatal(format!(
                    "claim {}, request {}: cannot add device {} because a claim constraint would not be satisfied",
                    plan.key, w.own_name, cand.id
                )));
            }
            return Ok(false);
        }
        let share = if multi {
            let created = !self.allocating.contains_key(&cand.id);
            let held = self.allocating.entry(cand.id.clone()).or_default();
            for (name, amount) in &share_consumed {
                let e = held.entry(name.clone()).or_default();
                *e = e.saturating_add(amount.nanos);
            }
            Some(Share {
                id: share_id(),
                consumed: share_consumed,
                created,
            })
        } else {
            self.picked.entry(cand.id.clone()).or_default().push(ci);
            None
        };
        self.results[ci].push(Pick {
            request: ri,
            want: wi,
            candidate: c,
            counters: taken,
            share,
        });
        Ok(true)
    }

    /// Undoes the last [`Search::add`] of claim `ci` (candidate `c`).
    fn remove(&mut self, ci: usize, c: usize) {
        let Some(pick) = self.results[ci].pop() else {
            return;
        };
        let plan = &self.alloc.plans[ci];
        let w = &plan.requests[pick.request].wants[pick.want];
        let cand = &self.candidates[c];
        match &pick.share {
            None => {
                if let Some(by) = self.picked.get_mut(&cand.id) {
                    by.pop();
                    if by.is_empty() {
                        self.picked.remove(&cand.id);
                    }
                }
            }
            Some(share) if share.created => {
                self.allocating.remove(&cand.id);
            }
            Some(share) => {
                if let Some(held) = self.allocating.get_mut(&cand.id) {
                    for (name, amount) in &share.consumed {
                        if let Some(e) = held.get_mut(name) {
                            *e = e.saturating_sub(amount.nanos);
                        }
                    }
                }
            }
        }
        for (k, constraint) in plan.constraints.iter().enumerate().rev() {
            let applies = constraint
                .requests
                .as_ref()
                .is_none_or(|r| r.is_empty() || r.iter().any(|n| *n == w.parent || *n == w.name));
            if applies {
                undo_constraint(&mut self.constraint_state[ci][k], constraint);
            }
        }
        give_back(&mut self.pools[cand.pool], &pick.counters);
    }
}

fn undo_constraint(state: &mut ConstraintState, constraint: &DeviceConstraint) {
    if constraint.match_attribute.is_some() {
        state.count = state.count.saturating_sub(1);
    } else if constraint.distinct_attribute.is_some() {
        state.distinct.pop();
    }
}

fn give_back(pool: &mut Pool<'_>, taken: &[(String, String, i128)]) {
    for (set, name, n) in taken {
        if let Some(left) = pool.counters.get_mut(set).and_then(|s| s.get_mut(name)) {
            *left = left.saturating_add(*n);
        }
    }
}

/// Whether a device toleration tolerates a taint (upstream's ToleratesTaint for devices).
pub fn tolerates(tol: &DeviceToleration, taint: &DeviceTaint) -> bool {
    if tol
        .effect
        .as_deref()
        .is_some_and(|e| !e.is_empty() && e != taint.effect)
    {
        return false;
    }
    if tol
        .key
        .as_deref()
        .is_some_and(|k| !k.is_empty() && k != taint.key)
    {
        return false;
    }
    match tol.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "" | "Equal" => {
            tol.value.as_deref().unwrap_or_default() == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// Whether a taint leaves the device usable by a request with `tolerations`: only
/// `NoSchedule` and `NoExecute` taints must be tolerated.
pub(super) fn tolerates_all(tolerations: Option<&[DeviceToleration]>, taint: &DeviceTaint) -> bool {
    (taint.effect != "NoSchedule" && taint.effect != "NoExecute")
        || tolerations
            .into_iter()
            .flatten()
            .any(|tol| tolerates(tol, taint))
}
