//! The events that can make a pod DynamicResources rejected schedulable, as upstream registers
//! them, each with its hint: a node added or relabelled, a claim of the pod created, allocated
//! or deallocated (any claim deallocated frees devices), the pod's generated claims named in
//! its status, a DeviceClass or ResourceSlice added or changed.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;

use super::claims;
use crate::scheduler::framework::events::{
    ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration, objects,
};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::informers::devices::DeviceIndex;

/// `accept_group`: DRAWorkloadResourceClaims (a claim the pod's PodGroup controls is the pod's).
pub fn registrations(devices: &Arc<DeviceIndex>, accept_group: bool) -> Vec<Registration> {
    let add_update = ActionType::ADD | ActionType::UPDATE;
    let claim_index = devices.clone();
    let pod_index = devices.clone();
    vec![
        Registration::always(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL | ActionType::UPDATE_NODE_ALLOCATABLE,
        )),
        Registration::new(
            ClusterEvent::new(
                EventResource::ResourceClaim,
                add_update | ActionType::DELETE,
            ),
            Arc::new(move |pod, old, new| {
                after_claim_change(&claim_index, accept_group, pod, old, new)
            }),
        ),
        Registration::new(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
            ),
            Arc::new(move |pod, _old, new| {
                after_target_pod_update(&pod_index, accept_group, pod, new)
            }),
        ),
        Registration::always(ClusterEvent::new(EventResource::DeviceClass, add_update)),
        Registration::always(ClusterEvent::new(EventResource::ResourceSlice, add_update)),
    ]
}

/// upstream's isSchedulableAfterClaimChange: a deleted claim that was allocated frees devices;
/// nothing helps while another of the pod's claims is missing; a deallocation helps anyone; a
/// claim of the pod added, or whose status changed, may help it.
fn after_claim_change(
    devices: &DeviceIndex,
    accept_group: bool,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (old, new) = objects::<ResourceClaim>(old, new);
    let Some(new) = new else {
        return match old {
            Some(old) if !claims::allocated(old) => Hint::Skip,
            _ => Hint::Queue,
        };
    };
    let uses = match claims::pod_claims(&devices.read(), &pod.pod, accept_group) {
        Err(_) => return Hint::Skip,
        Ok(found) => found
            .iter()
            .any(|c| c.metadata.uid.is_some() && c.metadata.uid == new.metadata.uid),
    };
    if old.is_some_and(|o| claims::allocated(o) && !claims::allocated(new)) {
        return Hint::Queue;
    }
    if !uses {
        return Hint::Skip;
    }
    match old {
        None => Hint::Queue,
        Some(old) if old.status == new.status => Hint::Skip,
        Some(_) => Hint::Queue,
    }
}

/// The pod's status now names its generated claims: queue once every claim it needs is found.
fn after_target_pod_update(
    devices: &DeviceIndex,
    accept_group: bool,
    pod: &PodInfo,
    new: Option<&EventObject>,
) -> Hint {
    let Some(new) = new.and_then(EventObject::pod) else {
        return Hint::Queue;
    };
    if new.metadata.uid != pod.pod.metadata.uid {
        return Hint::Skip;
    }
    match claims::pod_claims(&devices.read(), new, accept_group) {
        Ok(_) => Hint::Queue,
        Err(_) => Hint::Skip,
    }
}
