//! The node-resources plugins, as kube-scheduler's `noderesources` package: NodeResourcesFit
//! ([`fit`]) with its scoring strategies ([`scoring`]), NodeResourcesBalancedAllocation
//! ([`balanced_allocation`]), and the per-resource accounting both score with
//! ([`resource_allocation`], kube-scheduler's `resourceAllocationScorer`).

pub mod balanced_allocation;
pub mod dra_scoring;
pub mod fit;
mod fit_hints;
pub mod resource_allocation;
pub mod scoring;

#[cfg(test)]
mod tests;

use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::signature::{self, Signature};
use crate::scheduler::informers::devices::{DeviceIndex, is_dra_extended_resource_name};

/// The signature part of NodeResourcesFit and NodeResourcesBalancedAllocation: the pod's
/// requests, as Filter and the scorers count them (containers, init containers, overhead and
/// pod-level resources: the spec's resources are signed whole). None when the pod asks for an
/// extended resource a DeviceClass serves: DRA allocates it per node, as upstream's signers
/// refuse it.
pub(crate) fn sign_requests(
    devices: Option<&DeviceIndex>,
    pod: &PodInfo,
    signature: &mut Signature,
) -> bool {
    if let Some(devices) = devices {
        let mut dra = pod
            .requests
            .scalar
            .iter()
            .filter(|(name, v)| **v != 0 && is_dra_extended_resource_name(name))
            .peekable();
        if dra.peek().is_some() {
            let devices = devices.read();
            if dra.any(|(name, _)| devices.class_for_resource(name).is_some()) {
                return false;
            }
        }
    }
    let spec = pod.pod.spec.as_ref();
    let containers = spec.map(|s| {
        (
            s.init_containers
                .iter()
                .flatten()
                .chain(&s.containers)
                .map(|c| (&c.resources, &c.restart_policy))
                .collect::<Vec<_>>(),
            &s.overhead,
            &s.resources,
        )
    });
    signature.part(signature::RESOURCES, &containers);
    true
}
