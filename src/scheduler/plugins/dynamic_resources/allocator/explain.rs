//! Why a node's devices do not satisfy a claim, device by device, for `tether explain`: the
//! allocator's failure message says only `cannot allocate all claims`, which answers nobody's
//! "why is my GPU pod pending".

use super::search::tolerates_all;
use super::*;

impl Allocator {
    /// For each request of each claim, what the node offers: the devices that would do, and
    /// for each other device of the node why not (taken by another claim, a class or request
    /// selector false, a taint not tolerated, its pool's shared counters spent, its pool
    /// incomplete or invalid). Read-only: the search is not run again.
    pub fn explain(&self, node: &NodeView<'_>) -> String {
        let pools = match self.pools(node) {
            Ok(p) => p,
            Err(e) => return e.to_string(),
        };
        let candidates = match self.candidates(&pools, node) {
            Ok(c) => c,
            Err(e) => return e.to_string(),
        };
        let mut lines = Vec::new();
        for p in pools.iter().filter(|p| p.incomplete || p.invalid) {
            let what = if p.incomplete {
                "is being updated (not all its slices are published)"
            } else {
                "is invalid (a device or counter set named twice, or a counter missing)"
            };
            lines.push(format!("resource pool {}/{} {what}", p.driver, p.name));
        }
        for (ci, plan) in self.plans.iter().enumerate() {
            for (ri, request) in plan.requests.iter().enumerate() {
                for (wi, w) in request.wants.iter().enumerate() {
                    let wants = if w.all {
                        "all devices".to_string()
                    } else {
                        format!("{} device(s)", w.count)
                    };
                    let class = w.class.metadata.name.as_deref().unwrap_or_default();
                    let mut fit = Vec::new();
                    let mut not = Vec::new();
                    for c in &candidates {
                        match self.why_not(c, &pools, ci, ri, wi) {
                            None => fit.push(c.id.device.clone()),
                            Some(why) => not.push(format!("{} {why}", c.id.device)),
                        }
                    }
                    let mut line = format!(
                        "claim {}, request {} wants {wants} of class {class}: ",
                        plan.key, w.name
                    );
                    if candidates.is_empty() {
                        line.push_str("no ResourceSlice on this node offers a device");
                    } else if fit.is_empty() {
                        line.push_str("no device fits");
                    } else {
                        line.push_str(&format!("{} fit ({})", fit.len(), fit.join(", ")));
                        if !w.all && fit.len() < w.count {
                            line.push_str(&format!(", {} short", w.count - fit.len()));
                        }
                    }
                    if !not.is_empty() {
                        line.push_str("; ");
                        line.push_str(&not.join("; "));
                    }
                    lines.push(line);
                }
            }
            if !plan.constraints.is_empty() {
                lines.push(format!(
                    "claim {}: its constraints (matchAttribute, distinctAttribute) must hold among the devices chosen together",
                    plan.key
                ));
            }
        }
        lines.join("\n")
    }

    /// Why the candidate does not serve want `wi` of request `ri` of claim `ci` on its own,
    /// or `None` when it does.
    fn why_not(
        &self,
        c: &Candidate<'_>,
        pools: &[Pool<'_>],
        ci: usize,
        ri: usize,
        wi: usize,
    ) -> Option<String> {
        let w = &self.plans[ci].requests[ri].wants[wi];
        if !w.admin && self.allocated.holds(&c.id) {
            return Some("is allocated to another claim".into());
        }
        match self.is_selectable(c, ci, ri, wi) {
            Err(e) => return Some(format!("cannot be evaluated: {e}")),
            Ok(false) => {
                return Some(match self.failing_selector(c, ci, ri, wi) {
                    Some(which) => format!("does not match {which}"),
                    None => "is not selectable on this node".into(),
                });
            }
            Ok(true) => {}
        }
        if let Some(t) = c
            .taints
            .iter()
            .find(|t| !tolerates_all(w.tolerations.as_deref(), t))
        {
            return Some(format!(
                "has the taint {}={}:{} the request does not tolerate",
                t.key,
                t.value.as_deref().unwrap_or_default(),
                t.effect
            ));
        }
        let pool = &pools[c.pool];
        for consumption in c.device.consumes_counters.iter().flatten() {
            for (name, q) in &consumption.counters {
                let left = pool
                    .counters
                    .get(&consumption.counter_set)
                    .and_then(|s| s.get(name))
                    .copied()
                    .unwrap_or(0);
                if left < super::model::consumed(&q.value.0) {
                    return Some(format!(
                        "needs {} of counter {}/{name}, which allocated devices have spent",
                        q.value.0, consumption.counter_set
                    ));
                }
            }
        }
        None
    }

    /// The first selector (class's, then request's) the device does not match, as `the
    /// class's selector #i (expr)` or `the request's selector #i (expr)`.
    fn failing_selector(
        &self,
        c: &Candidate<'_>,
        ci: usize,
        ri: usize,
        wi: usize,
    ) -> Option<String> {
        let w = &self.plans[ci].requests[ri].wants[wi];
        let view = device_view(c);
        for (kind, selectors) in [("class's", &w.class_selectors), ("request's", &w.selectors)] {
            for (i, s) in selectors.iter().enumerate() {
                let Ok(s) = s else { continue };
                if s.matches(&view) == Ok(false) {
                    return Some(format!("the {kind} selector #{i} ({})", s.expression()));
                }
            }
        }
        None
    }
}
