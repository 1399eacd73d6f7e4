//! A claim's AllocationResult from the devices the search chose: the devices by request,
//! the configuration that applies, and where the claim is available.

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::search::Pick;
use super::*;

impl Allocator {
    /// The claim's AllocationResult from the devices chosen for it.
    pub(super) fn result(
        &self,
        plan: &ClaimPlan,
        picks: &[Pick],
        chosen: &[(usize, usize)],
        candidates: &[Candidate<'_>],
        node: &NodeView<'_>,
    ) -> Result<AllocationResult, AllocateError> {
        let mut results = Vec::new();
        for p in picks {
            let c = &candidates[p.candidate];
            let w = &plan.requests[p.request].wants[p.want];
            results.push(DeviceRequestAllocationResult {
                request: w.name.clone(),
                driver: c.id.driver.clone(),
                pool: c.id.pool.clone(),
                device: c.id.device.clone(),
                admin_access: w.admin.then_some(true),
                tolerations: w.tolerations.clone(),
                binding_conditions: c.device.binding_conditions.clone(),
                binding_failure_conditions: c.device.binding_failure_conditions.clone(),
                share_id: p.share.as_ref().map(|s| s.id.clone()),
                consumed_capacity: p
                    .share
                    .as_ref()
                    .filter(|s| !s.consumed.is_empty())
                    .map(|s| {
                        s.consumed
                            .iter()
                            .map(|(k, a)| (k.clone(), Quantity(a.text.clone())))
                            .collect()
                    }),
                ..Default::default()
            });
        }
        // Configuration: the classes' (once a class, naming the requests that use it), then
        // the claim's that apply to a chosen request.
        let mut config: Vec<DeviceAllocationConfiguration> = Vec::new();
        let mut class_entries: BTreeMap<String, Vec<usize>> = BTreeMap::new();
        let selected: Vec<String> = chosen
            .iter()
            .map(|&(ri, wi)| plan.requests[ri].wants[wi].name.clone())
            .collect();
        for &(ri, wi) in chosen {
            let w = &plan.requests[ri].wants[wi];
            let class_name = w.class.metadata.name.clone().unwrap_or_default();
            if let Some(idx) = class_entries.get(&class_name) {
                for &i in idx {
                    if let Some(reqs) = config[i].requests.as_mut() {
                        reqs.push(w.name.clone());
                    }
                }
                continue;
            }
            let mut idx = Vec::new();
            for c in w.class.spec.iter().flat_map(|s| s.config.iter().flatten()) {
                idx.push(config.len());
                config.push(DeviceAllocationConfiguration {
                    source: "FromClass".into(),
                    requests: Some(vec![w.name.clone()]),
                    opaque: c.opaque.clone(),
                });
            }
            class_entries.insert(class_name, idx);
        }
        let top: Vec<&str> = plan
            .requests
            .iter()
            .map(|r| {
                r.wants
                    .first()
                    .map(|w| w.parent.as_str())
                    .unwrap_or_default()
            })
            .collect();
        for c in plan
            .claim
            .spec
            .iter()
            .flat_map(|s| s.devices.iter())
            .flat_map(|d| d.config.iter().flatten())
        {
            let reqs = c.requests.clone().unwrap_or_default();
            if reqs.is_empty() {
                config.push(DeviceAllocationConfiguration {
                    source: "FromClaim".into(),
                    requests: None,
                    opaque: c.opaque.clone(),
                });
                continue;
            }
            let applies = reqs
                .iter()
                .any(|r| top.contains(&r.as_str()) && !r.contains('/') || selected.contains(r));
            if applies {
                config.push(DeviceAllocationConfiguration {
                    source: "FromClaim".into(),
                    requests: Some(reqs),
                    opaque: c.opaque.clone(),
                });
            }
        }
        for entry in &mut config {
            if let Some(reqs) = &entry.requests {
                let covers = plan.requests.iter().zip(&top).all(|(_, t)| {
                    reqs.iter().any(|r| r == t)
                        || chosen.iter().any(|&(ri, wi)| {
                            plan.requests[ri].wants[wi].parent == *t
                                && reqs.contains(&plan.requests[ri].wants[wi].name)
                        })
                });
                if covers {
                    entry.requests = None;
                }
            }
        }
        let node_selector = self.node_selector(plan, picks, candidates, node)?;
        Ok(AllocationResult {
            allocation_timestamp: None,
            devices: Some(DeviceAllocationResult {
                config: (!config.is_empty()).then_some(config),
                results: Some(results),
            }),
            node_selector,
        })
    }

    /// Where the claim's devices are available: the node alone when one is local to it,
    /// else the one term its slices' selectors make together, else everywhere.
    fn node_selector(
        &self,
        plan: &ClaimPlan,
        picks: &[Pick],
        candidates: &[Candidate<'_>],
        node: &NodeView<'_>,
    ) -> Result<Option<NodeSelector>, AllocateError> {
        let mut expressions: Vec<NodeSelectorRequirement> = Vec::new();
        let mut fields: Vec<NodeSelectorRequirement> = Vec::new();
        for p in picks {
            let c = &candidates[p.candidate];
            let (name, selector) = if c.slice.spec.per_device_node_selection == Some(true) {
                (
                    c.device.node_name.as_deref(),
                    c.device.node_selector.as_ref(),
                )
            } else {
                (
                    c.slice.spec.node_name.as_deref(),
                    c.slice.spec.node_selector.as_ref(),
                )
            };
            if name.is_some_and(|n| !n.is_empty()) || c.device.binds_to_node == Some(true) {
                return Ok(Some(local(node.name)));
            }
            let Some(selector) = selector else { continue };
            match selector.node_selector_terms.len() {
                0 => {}
                1 => {
                    let t = &selector.node_selector_terms[0];
                    for r in t.match_expressions.iter().flatten() {
                        if !expressions.iter().any(|e| same_requirement(e, r)) {
                            expressions.push(r.clone());
                        }
                    }
                    for r in t.match_fields.iter().flatten() {
                        if !fields.iter().any(|e| same_requirement(e, r)) {
                            fields.push(r.clone());
                        }
                    }
                }
                n => {
                    return Err(AllocateError::Fatal(format!(
                        "create NodeSelector for claim {}: unsupported ResourceSlice.NodeSelector with {n} terms",
                        plan.claim.metadata.name.as_deref().unwrap_or_default()
                    )));
                }
            }
        }
        if expressions.is_empty() && fields.is_empty() {
            return Ok(None);
        }
        Ok(Some(NodeSelector {
            node_selector_terms: vec![NodeSelectorTerm {
                match_expressions: (!expressions.is_empty()).then_some(expressions),
                match_fields: (!fields.is_empty()).then_some(fields),
            }],
        }))
    }
}

fn same_requirement(a: &NodeSelectorRequirement, b: &NodeSelectorRequirement) -> bool {
    let set = |r: &NodeSelectorRequirement| -> BTreeSet<String> {
        r.values.iter().flatten().cloned().collect()
    };
    a.key == b.key && a.operator == b.operator && set(a) == set(b)
}

/// A selector of exactly one node, by name.
pub fn local(node: &str) -> NodeSelector {
    NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec![node.to_string()]),
            }]),
        }],
    }
}
