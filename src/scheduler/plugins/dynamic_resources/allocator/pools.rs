//! The pools a node sees and their devices in search order, with what their shared counters
//! leave.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceSlice;

use super::model::{
    AllocateError, Allocated, Allocator, Candidate, DeviceId, NodeView, Pool, consumed,
    counter_amount, node_matches,
};

impl Allocator {
    /// The pools the node sees, in search order.
    pub(super) fn pools<'a>(&'a self, node: &NodeView<'_>) -> Result<Vec<Pool<'a>>, AllocateError> {
        let mut by_pool: BTreeMap<(String, String), (i64, Vec<&'a ResourceSlice>)> =
            BTreeMap::new();
        let on_node = self.slices.on_node.get(node.name).into_iter().flatten();
        for s in on_node.chain(&self.slices.shared) {
            let spec = &s.spec;
            let relevant = if spec.node_name.as_deref().is_some_and(|n| !n.is_empty())
                || spec.all_nodes == Some(true)
                || spec.node_selector.is_some()
            {
                node_matches(spec.node_name.as_deref(), spec.all_nodes, spec.node_selector.as_ref(), node)
                    .map_err(|e| AllocateError::Fatal(format!(
                        "gather pool information: failed to perform node selection for slice {}: {e}",
                        s.metadata.name.as_deref().unwrap_or_default()
                    )))?
            } else if spec.per_device_node_selection == Some(true) {
                let mut any = false;
                for d in spec.devices.iter().flatten() {
                    if node_matches(d.node_name.as_deref(), d.all_nodes, d.node_selector.as_ref(), node)
                        .map_err(|e| AllocateError::Fatal(format!(
                            "gather pool information: failed to perform node selection for device {} in slice {}: {e}",
                            d.name,
                            s.metadata.name.as_deref().unwrap_or_default()
                        )))?
                    {
                        any = true;
                        break;
                    }
                }
                any
            } else {
                false
            };
            if !relevant {
                continue;
            }
            let key = (spec.driver.clone(), spec.pool.name.clone());
            let entry = by_pool
                .entry(key)
                .or_insert((spec.pool.generation, Vec::new()));
            if spec.pool.generation < entry.0 {
                continue;
            }
            if spec.pool.generation > entry.0 {
                *entry = (spec.pool.generation, Vec::new());
            }
            entry.1.push(s);
        }
        let mut pools = Vec::new();
        for ((driver, name), (generation, mut slices)) in by_pool {
            let want = slices
                .first()
                .map(|s| s.spec.pool.resource_slice_count)
                .unwrap_or(0);
            let count = |n: usize| i64::try_from(n).unwrap_or(i64::MAX);
            // The node's own slices make the whole pool: used as they are, whatever else is
            // being published. Otherwise the cluster's slices of the pool decide: a newer
            // generation makes this one obsolete (dropped), too few slices incomplete.
            let (incomplete, counted): (bool, Vec<&ResourceSlice>) = if count(slices.len()) == want
            {
                (false, slices.clone())
            } else {
                let all_of_pool: Vec<&ResourceSlice> = self
                    .slices
                    .of_pool
                    .get(&(driver.clone(), name.clone()))
                    .into_iter()
                    .flatten()
                    .map(Arc::as_ref)
                    .collect();
                if all_of_pool
                    .iter()
                    .any(|s| s.spec.pool.generation > generation)
                {
                    continue;
                }
                let of_generation: Vec<&ResourceSlice> = all_of_pool
                    .into_iter()
                    .filter(|s| s.spec.pool.generation == generation)
                    .collect();
                (count(of_generation.len()) != want, of_generation)
            };
            slices.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
            let mut names = foldhash::HashSet::default();
            let mut invalid = false;
            for s in slices.iter().filter(|s| s.spec.shared_counters.is_none()) {
                for d in s.spec.devices.iter().flatten() {
                    if !names.insert(d.name.as_str()) {
                        invalid = true;
                    }
                }
            }
            let counters = pool_counters(&driver, &name, &counted, &self.allocated, &mut invalid);
            let binding = slices
                .iter()
                .flat_map(|s| s.spec.devices.iter().flatten())
                .any(|d| d.binding_conditions.as_ref().is_some_and(|b| !b.is_empty()));
            pools.push(Pool {
                driver,
                name,
                slices: if incomplete { Vec::new() } else { slices },
                incomplete,
                invalid,
                binding,
                counters,
            });
        }
        // Pools without binding conditions first, each group by driver and name (stable).
        pools.sort_by_key(|p| p.binding);
        Ok(pools)
    }

    /// Every device of usable pools that the node sees, in search order.
    pub(super) fn candidates<'a>(
        &'a self,
        pools: &[Pool<'a>],
        node: &NodeView<'_>,
    ) -> Result<Vec<Candidate<'a>>, AllocateError> {
        let mut out = Vec::new();
        for (pi, p) in pools.iter().enumerate() {
            if p.incomplete || p.invalid {
                continue;
            }
            for s in &p.slices {
                if s.spec.shared_counters.is_some() {
                    continue;
                }
                for d in s.spec.devices.iter().flatten() {
                    if s.spec.per_device_node_selection == Some(true)
                        && !node_matches(
                            d.node_name.as_deref(),
                            d.all_nodes,
                            d.node_selector.as_ref(),
                            node,
                        )
                        .map_err(AllocateError::Fatal)?
                    {
                        continue;
                    }
                    let id = DeviceId {
                        driver: p.driver.clone(),
                        pool: p.name.clone(),
                        device: d.name.clone(),
                    };
                    let mut taints = d.taints.clone().unwrap_or_default();
                    for rule in &self.taint_rules {
                        // A rule without a selector taints no device (upstream's tracker).
                        let sel = rule.spec.device_selector.as_ref();
                        let hit = sel.is_some_and(|sel| {
                            sel.driver.as_ref().is_none_or(|v| *v == id.driver)
                                && sel.pool.as_ref().is_none_or(|v| *v == id.pool)
                                && sel.device.as_ref().is_none_or(|v| *v == id.device)
                        });
                        if hit {
                            taints.push(rule.spec.taint.clone());
                        }
                    }
                    out.push(Candidate {
                        id,
                        pool: pi,
                        slice: s,
                        device: d,
                        taints,
                    });
                }
            }
        }
        Ok(out)
    }
}

/// What a pool's counter sets leave (nano-units) once its allocated devices took theirs.
fn pool_counters(
    driver: &str,
    pool: &str,
    slices: &[&ResourceSlice],
    allocated: &Allocated,
    invalid: &mut bool,
) -> BTreeMap<String, BTreeMap<String, i128>> {
    let mut sets: BTreeMap<String, BTreeMap<String, i128>> = BTreeMap::new();
    for s in slices {
        for set in s.spec.shared_counters.iter().flatten() {
            if sets.contains_key(&set.name) {
                *invalid = true;
            }
            let counters = set
                .counters
                .iter()
                .map(|(k, c)| (k.clone(), counter_amount(&c.value.0)))
                .collect();
            sets.insert(set.name.clone(), counters);
        }
    }
    for s in slices {
        for d in s.spec.devices.iter().flatten() {
            let id = DeviceId {
                driver: driver.to_string(),
                pool: pool.to_string(),
                device: d.name.clone(),
            };
            for consumption in d.consumes_counters.iter().flatten() {
                let Some(set) = sets.get_mut(&consumption.counter_set) else {
                    *invalid = true;
                    continue;
                };
                for (name, c) in &consumption.counters {
                    match set.get_mut(name) {
                        None => *invalid = true,
                        Some(left) if allocated.in_use(&id) => {
                            *left = left.saturating_sub(consumed(&c.value.0));
                        }
                        Some(_) => {}
                    }
                }
            }
        }
    }
    sets
}
