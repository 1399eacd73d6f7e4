//! The depth-first search over the devices a node sees, as upstream's allocateOne and
//! allocateDevice.

use super::pools::consumed;
use super::*;

/// The device a want took, by candidate index.
#[derive(Clone, Debug)]
pub(super) struct Pick {
    pub(super) request: usize,
    pub(super) want: usize,
    pub(super) candidate: usize,
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

pub(super) struct Search<'s, 'a> {
    pub(super) alloc: &'a Allocator,
    pub(super) node: &'s NodeView<'s>,
    pub(super) pools: Vec<Pool<'a>>,
    pub(super) candidates: &'s [Candidate<'a>],
    /// Devices taken in this search (not by admin access... as upstream, those too), by the
    /// claims that took them.
    pub(super) picked: HashMap<DeviceId, Vec<usize>>,
    pub(super) results: Vec<Vec<Pick>>,
    pub(super) constraint_state: Vec<Vec<ConstraintState>>,
    /// Per claim, the (request, want) chosen for each request so far.
    pub(super) chosen: Vec<Vec<(usize, usize)>>,
    pub(super) all_devices: HashMap<(usize, usize, usize), Vec<usize>>,
    /// When the search gives up (the plugin's filterTimeout), checked before each device.
    pub(super) deadline: Option<std::time::Instant>,
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
            let in_use = if w.admin {
                self.picked.get(&cand.id).is_some_and(|by| by.contains(&ci))
            } else {
                alloc.allocated.devices.contains(&cand.id) || self.picked.contains_key(&cand.id)
            };
            if in_use || !alloc.is_selectable(cand, self.node, ci, ri, wi)? {
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
        if w.admin && self.picked.get(&cand.id).is_some_and(|by| by.contains(&ci)) {
            return Ok(false);
        }
        if !w.admin
            && (alloc.allocated.devices.contains(&cand.id) || self.picked.contains_key(&cand.id))
        {
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
        // Counters.
        let consumptions = cand.device.consumes_counters.clone().unwrap_or_default();
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
                let Some(v) = lookup_attribute(cand.device, &cand.id.driver, fqn) else {
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
                let Some(v) = lookup_attribute(cand.device, &cand.id.driver, fqn) else {
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
        self.picked.entry(cand.id.clone()).or_default().push(ci);
        self.results[ci].push(Pick {
            request: ri,
            want: wi,
            candidate: c,
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
        if let Some(by) = self.picked.get_mut(&cand.id) {
            by.pop();
            if by.is_empty() {
                self.picked.remove(&cand.id);
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
        let mut taken = Vec::new();
        for consumption in cand.device.consumes_counters.iter().flatten() {
            for (name, q) in &consumption.counters {
                taken.push((
                    consumption.counter_set.clone(),
                    name.clone(),
                    consumed(&q.value.0),
                ));
            }
        }
        give_back(&mut self.pools[cand.pool], &taken);
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
