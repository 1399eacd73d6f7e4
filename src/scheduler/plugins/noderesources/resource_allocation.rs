//! The per-resource accounting NodeResourcesFit and NodeResourcesBalancedAllocation score with
//! (kube-scheduler's `resourceAllocationScorer`): which resources count, the pod's request of
//! each, and the node's allocatable and requested amounts with the pod placed there.

use serde::{Deserialize, Serialize};

use crate::k8s::resource::{CPU, EPHEMERAL_STORAGE, MEMORY, Resource};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;

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

/// The pod's request of one resource as a scorer that uses the requested amounts counts it (for
/// the non-zero requests Fit scores, see [`crate::k8s::resource::pod_requests_scored`]).
pub fn pod_request(pod: &PodInfo, name: &str) -> i64 {
    request_of(&pod.requests, name)
}

/// One resource of `r` by name.
pub fn request_of(r: &Resource, name: &str) -> i64 {
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
/// so that scoring leaves it out. An extended resource a DeviceClass serves (`dra`, when the
/// scored resources have one) counts, on a node whose allocatable lacks it, the node's devices
/// of the class and those allocated.
pub fn allocatable_and_requested(
    node: &NodeInfo,
    name: &str,
    pod_request: i64,
    use_requested: bool,
    dra: Option<&super::dra_scoring::DraScoring>,
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
            None | Some(0)
                if let Some((capacity, allocated)) = dra.and_then(|d| d.totals(name, node))
                    && capacity > 0 =>
            {
                (capacity, allocated.saturating_add(pod_request))
            }
            Some(&a) => {
                let used = node.requested.scalar.get(name).copied().unwrap_or(0);
                (a, used.saturating_add(pod_request))
            }
            None => (0, 0),
        },
    }
}
