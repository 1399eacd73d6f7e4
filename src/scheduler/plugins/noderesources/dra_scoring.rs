//! Scoring an extended resource a DeviceClass serves (DRA's extended resources), as upstream's
//! resourceAllocationScorer does when the scoring strategy lists such a resource: on a node
//! whose allocatable lacks it, the node's allocatable is the number of devices of the class
//! the node sees, and what is requested the number of those already allocated (to any claim,
//! in flight included), plus the pod's request.

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{Device, ResourceSlice};

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::informers::devices::{DeviceIndex, is_dra_extended_resource_name};
use crate::scheduler::plugins::dynamic_resources::allocator::{
    Allocated, DeviceId, NO_ATTRIBUTES, NO_CAPACITY, NodeView, node_matches,
};
use crate::scheduler::plugins::dynamic_resources::cel::{DeviceView, Selector};

/// What PreScore reads once for the scored resources classes serve: the slices, the devices
/// held, and each such resource's class selectors.
pub struct DraScoring {
    slices: Vec<Arc<ResourceSlice>>,
    allocated: Allocated,
    /// Scored resource → its class's selectors (compiled; one that does not compile makes the
    /// resource score as absent, as upstream's error does).
    classes: HashMap<String, Result<Vec<Selector>, String>>,
}

impl DraScoring {
    /// `None` when no scored resource is an extended resource a class serves (the common
    /// case: the default strategy scores cpu and memory).
    pub fn for_resources<'a>(
        devices: &DeviceIndex,
        scored: impl Iterator<Item = &'a str>,
    ) -> Option<Self> {
        let mut names = scored
            .filter(|n| is_dra_extended_resource_name(n))
            .peekable();
        names.peek()?;
        let d = devices.read();
        let classes: HashMap<String, Result<Vec<Selector>, String>> = names
            .filter_map(|name| {
                let class = d.class_for_resource(name)?;
                let selectors = class
                    .spec
                    .iter()
                    .flat_map(|s| s.selectors.iter().flatten())
                    .map(|s| match &s.cel {
                        Some(c) => Selector::compile(&c.expression).map_err(|e| e.to_string()),
                        None => Err("a selector without CEL".to_string()),
                    })
                    .collect();
                Some((name.to_string(), selectors))
            })
            .collect();
        if classes.is_empty() {
            return None;
        }
        Some(DraScoring {
            slices: d.slices.values().cloned().collect(),
            allocated: Allocated::of(d.all_claims()),
            classes,
        })
    }

    /// The node's devices of the class serving `resource`, and how many of them are
    /// allocated; `None` when no class serves it, or a selector or node selector fails.
    pub fn totals(&self, resource: &str, node: &NodeInfo) -> Option<(i64, i64)> {
        let selectors = self.classes.get(resource)?.as_ref().ok()?;
        let view = NodeView {
            name: &node.name,
            labels: node.labels(),
        };
        let (mut capacity, mut allocated) = (0i64, 0i64);
        for slice in &self.slices {
            let spec = &slice.spec;
            let devices: Vec<&Device> = if spec.per_device_node_selection == Some(true) {
                let mut on = Vec::new();
                for d in spec.devices.iter().flatten() {
                    if node_matches(
                        d.node_name.as_deref(),
                        d.all_nodes,
                        d.node_selector.as_ref(),
                        &view,
                    )
                    .ok()?
                    {
                        on.push(d);
                    }
                }
                on
            } else if node_matches(
                spec.node_name.as_deref(),
                spec.all_nodes,
                spec.node_selector.as_ref(),
                &view,
            )
            .ok()?
            {
                spec.devices.iter().flatten().collect()
            } else {
                continue;
            };
            for device in devices {
                let d = DeviceView {
                    driver: &spec.driver,
                    attributes: device.attributes.as_ref().unwrap_or(&NO_ATTRIBUTES),
                    capacity: device.capacity.as_ref().unwrap_or(&NO_CAPACITY),
                    allow_multiple_allocations: device.allow_multiple_allocations,
                };
                let mut matches = true;
                for s in selectors {
                    if !s.matches(&d).ok()? {
                        matches = false;
                        break;
                    }
                }
                if !matches {
                    continue;
                }
                capacity = capacity.saturating_add(1);
                let id = DeviceId {
                    driver: spec.driver.clone(),
                    pool: spec.pool.name.clone(),
                    device: device.name.clone(),
                };
                if self.allocated.in_use(&id) {
                    allocated = allocated.saturating_add(1);
                }
            }
        }
        Some((capacity, allocated))
    }
}
