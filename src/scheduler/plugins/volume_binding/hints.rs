//! The events that can make a pod VolumeBinding rejected schedulable, as upstream registers
//! them, each with its hint.

use std::sync::Arc;

use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, CSIStorageCapacity, StorageClass};

use crate::k8s::volumes;
use crate::scheduler::framework::events::{
    ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration, objects, queue_if,
};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::plugins::helper::after_claim_of_pod;

const MIGRATED_PLUGINS: &str = "storage.alpha.kubernetes.io/migrated-plugins";

pub fn registrations(exact_sizes: bool) -> Vec<Registration> {
    let add_update = ActionType::ADD | ActionType::UPDATE;
    vec![
        Registration::new(
            ClusterEvent::new(EventResource::StorageClass, add_update),
            Arc::new(after_class_change),
        ),
        Registration::new(
            ClusterEvent::new(EventResource::PersistentVolumeClaim, add_update),
            Arc::new(after_claim_change),
        ),
        Registration::always(ClusterEvent::new(
            EventResource::PersistentVolume,
            add_update,
        )),
        Registration::always(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
        )),
        Registration::new(
            ClusterEvent::new(EventResource::CSINode, add_update),
            Arc::new(after_csi_node_change),
        ),
        Registration::new(
            ClusterEvent::new(EventResource::CSIDriver, ActionType::UPDATE),
            Arc::new(after_csi_driver_change),
        ),
        Registration::new(
            ClusterEvent::new(EventResource::CSIStorageCapacity, add_update),
            if exact_sizes {
                Arc::new(after_capacity_grew_as_written)
            } else {
                Arc::new(after_capacity_change)
            },
        ),
    ]
}

/// A class added, or one whose allowed topologies changed.
fn after_class_change(_: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    match objects::<StorageClass>(old, new) {
        (Some(old), Some(new)) => queue_if(old.allowed_topologies != new.allowed_topologies),
        _ => Hint::Queue,
    }
}

/// A claim of this pod (an ephemeral volume's too) added or changed.
fn after_claim_change(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    after_claim_of_pod(pod, old, new, true)
}

fn migrated(node: &CSINode) -> Option<&String> {
    node.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(MIGRATED_PLUGINS))
}

/// A CSINode added, or one whose migrated plugins changed.
fn after_csi_node_change(
    _: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    match objects::<CSINode>(old, new) {
        (Some(old), Some(new)) => queue_if(migrated(old) != migrated(new)),
        _ => Hint::Queue,
    }
}

/// A driver of one of the pod's inline CSI volumes that stopped reporting capacity.
fn after_csi_driver_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (Some(old), Some(new)) = objects::<CSIDriver>(old, new) else {
        return Hint::Queue;
    };
    let name = new.metadata.name.as_deref().unwrap_or_default();
    let uses = pod
        .pod
        .spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| v.csi.as_ref().is_some_and(|c| c.driver == name));
    queue_if(
        uses && old.spec.storage_capacity == Some(true) && new.spec.storage_capacity != Some(true),
    )
}

/// A capacity added, or one whose limit went up by a whole byte at least (1.36, 1.37 compare
/// the limits rounded up to whole bytes).
fn after_capacity_change(
    _: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    match objects::<CSIStorageCapacity>(old, new) {
        (Some(old), Some(new)) => {
            match (volumes::capacity_limit(old), volumes::capacity_limit(new)) {
                (_, None) => Hint::Skip,
                (None, Some(_)) => Hint::Queue,
                (Some(o), Some(n)) => queue_if(n > o),
            }
        }
        _ => Hint::Queue,
    }
}

/// A capacity added, or one whose limit went up at all, compared as written (1.38).
fn after_capacity_grew_as_written(
    _: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let limit = volumes::capacity_limit_as_written;
    match objects::<CSIStorageCapacity>(old, new) {
        (Some(old), Some(new)) => match (limit(old), limit(new)) {
            (_, None) => Hint::Skip,
            (None, Some(_)) => Hint::Queue,
            (Some(o), Some(n)) => {
                queue_if(crate::k8s::quantity::compare(&n.0, &o.0).is_ok_and(|c| c.is_gt()))
            }
        },
        _ => Hint::Queue,
    }
}
