//! NodeResourcesFit's queueing hints: a pod deleted or scaled down (it freed resources), a
//! node added that has room for the pod, or a node whose allocatable grew in a resource the pod
//! requests (from 1.38 also its nominated node shrinking below it); a DeviceClass added or
//! changed that serves an extended resource the pod requests.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::DeviceClass;

use crate::k8s::release::Release;
use crate::k8s::resource::{self, Resource};
use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::informers::devices::{
    DeviceIndex, IMPLICIT_CLASS_PREFIX, is_dra_extended_resource_name,
};

/// The events that can make a pod NodeResourcesFit rejected schedulable.
pub fn registrations(devices: Option<Arc<DeviceIndex>>, release: Release) -> Vec<Registration> {
    vec![
        Registration::new(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::DELETE | ActionType::UPDATE_POD_SCALE_DOWN,
            ),
            Arc::new(after_pod_event),
        ),
        Registration::new(
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_ALLOCATABLE,
            ),
            Arc::new(move |pod, old, new| {
                after_node_change(devices.as_deref(), release, pod, old, new)
            }),
        ),
        Registration::new(
            ClusterEvent::new(
                EventResource::DeviceClass,
                ActionType::ADD | ActionType::UPDATE,
            ),
            Arc::new(after_device_class_change),
        ),
    ]
}

/// upstream's isSchedulableAfterDeviceClassEvent: a class added whose implicit name the pod
/// requests, or a class whose `extendedResourceName` changed to one the pod requests.
fn after_device_class_change(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (old, new) = events::objects::<DeviceClass>(old, new);
    let Some(new) = new else { return Hint::Queue };
    let named = |c: &DeviceClass| {
        c.spec
            .as_ref()
            .and_then(|s| s.extended_resource_name.clone())
    };
    let requests = resource::pod_requests(&pod.pod, false);
    match old {
        Some(old) if named(old) == named(new) => return Hint::Skip,
        Some(_) => {}
        None => {
            let implicit = format!(
                "{IMPLICIT_CLASS_PREFIX}{}",
                new.metadata.name.as_deref().unwrap_or_default()
            );
            if requests.scalar.contains_key(&implicit) {
                return Hint::Queue;
            }
        }
    }
    events::queue_if(named(new).is_some_and(|n| requests.scalar.contains_key(&n)))
}

/// A bound (or nominated) pod deleted; the pod itself, or a bound pod, requesting less of a
/// resource this pod requests.
fn after_pod_event(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    match events::pods(old, new) {
        (Some(deleted), None) => events::queue_if(events::assigned_or_nominated(deleted)),
        (Some(old), Some(new)) => {
            if events::is_same_pod(pod, new) {
                return Hint::Queue;
            }
            if new
                .spec
                .as_ref()
                .and_then(|s| s.node_name.as_deref())
                .is_none_or(str::is_empty)
            {
                return Hint::Skip;
            }
            let (before, after) = (
                resource::pod_requests(old, false),
                resource::pod_requests(new, false),
            );
            let wanted = resource::pod_requests(&pod.pod, false);
            events::queue_if(
                wanted
                    .names()
                    .any(|name| before.get(name) > after.get(name)),
            )
        }
        _ => Hint::Queue,
    }
}

fn allocatable(node: &Node) -> Resource {
    Resource::from_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()))
}

/// A node added with room for the pod on an empty node; a node whose allocatable grew in a
/// resource the pod requests (or in pods), where the pod would fit when empty. An extended
/// resource a DeviceClass serves (`devices`) that the node's allocatable lacks is left out, as
/// Filter leaves it to DynamicResources. From 1.38 also the pod's nominated node shrinking
/// below its CPU, memory or ephemeral storage (a pod of no group, which fitted there before):
/// it is tried again at once, to preempt elsewhere.
fn after_node_change(
    devices: Option<&DeviceIndex>,
    release: Release,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (old, new) = events::nodes(old, new);
    let Some(new) = new else { return Hint::Queue };
    let pod_requests = resource::pod_requests(&pod.pod, false);
    // What Filter weighs on a node with this allocatable.
    let weighed = |room: &Resource| {
        let mut requests = pod_requests.clone();
        if let Some(devices) = devices
            && requests
                .scalar
                .keys()
                .any(|n| is_dra_extended_resource_name(n))
        {
            let d = devices.read();
            requests.scalar.retain(|name, _| {
                room.scalar.get(name).is_some_and(|a| *a > 0)
                    || d.class_for_resource(name).is_none()
            });
        }
        requests
    };
    let room = allocatable(new);
    let requests = weighed(&room);
    if !fits_empty(&requests, &room) {
        let nominated = pod
            .pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref());
        let nominated_here = nominated.is_some() && nominated == new.metadata.name.as_deref();
        let lost_native = requests.milli_cpu > room.milli_cpu
            || requests.memory > room.memory
            || requests.ephemeral_storage > room.ephemeral_storage;
        let fitted_before = old.is_some_and(|old| {
            let before = allocatable(old);
            fits_empty(&weighed(&before), &before)
        });
        return events::queue_if(
            release.at_least(38)
                && pod
                    .pod
                    .spec
                    .as_ref()
                    .is_none_or(|s| s.scheduling_group.is_none())
                && nominated_here
                && lost_native
                && fitted_before,
        );
    }
    let Some(old) = old else { return Hint::Queue };
    let before = allocatable(old);
    if room.allowed_pod_number > before.allowed_pod_number {
        return Hint::Queue;
    }
    events::queue_if(
        requests
            .names()
            .any(|name| room.get(name) > before.get(name)),
    )
}

/// Whether the requests fit a node with this allocatable and no pods.
fn fits_empty(requests: &Resource, allocatable: &Resource) -> bool {
    allocatable.allowed_pod_number >= 1
        && requests
            .names()
            .all(|name| requests.get(name) <= allocatable.get(name))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn node(cpu: &str, pods: &str) -> Option<EventObject> {
        NodeBuilder::new("n1")
            .allocatable("cpu", cpu)
            .allocatable("memory", "4Gi")
            .allocatable("pods", pods)
            .info(vec![])
            .node
            .map(EventObject::Node)
    }

    /// A node added without the extended resource a DeviceClass serves may still take the pod
    /// (DynamicResources serves the resource there); without the class it cannot.
    #[test]
    fn a_node_without_a_dra_served_resource_may_help() {
        use crate::scheduler::informers::Keeps;
        use k8s_openapi::api::resource::v1::DeviceClass;
        let pod = PodBuilder::new("p")
            .req_cpu("2")
            .req("example.com/gpu", "1")
            .info();
        let devices = DeviceIndex::default();
        assert_eq!(
            after_node_change(
                Some(&devices),
                Release::default(),
                &pod,
                None,
                node("4", "110").as_ref()
            ),
            Hint::Skip,
            "no class serves the GPU: the node lacks it"
        );
        let class: DeviceClass = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "gpus"}, "spec": {"extendedResourceName": "example.com/gpu"}}))
        .expect("a class");
        Keeps::apply(&devices, Arc::new(class));
        assert_eq!(
            after_node_change(
                Some(&devices),
                Release::default(),
                &pod,
                None,
                node("4", "110").as_ref()
            ),
            Hint::Queue,
            "a class serves the GPU through DRA"
        );
    }

    /// 1.38: the pod's nominated node shrinking below its CPU sends it back at once (to preempt
    /// elsewhere); 1.37 waits for a node with room.
    #[test]
    fn a_nominated_node_that_shrank_below_the_pod_retries_it_from_1_38() {
        let mut pod = PodBuilder::new("p").req_cpu("3").info();
        let hint =
            |pod: &PodInfo, release: u32, old: &Option<EventObject>, new: &Option<EventObject>| {
                after_node_change(
                    None,
                    Release::of_minor(release),
                    pod,
                    old.as_ref(),
                    new.as_ref(),
                )
            };
        let (big, small) = (node("4", "110"), node("2", "110"));
        assert_eq!(
            hint(&pod, 38, &big, &small),
            Hint::Skip,
            "not its nominated node"
        );
        let mut nominated = (*pod.pod).clone();
        nominated.status.get_or_insert_default().nominated_node_name = Some("n1".into());
        pod = PodInfo::new(Arc::new(nominated));
        assert_eq!(hint(&pod, 38, &big, &small), Hint::Queue);
        assert_eq!(hint(&pod, 37, &big, &small), Hint::Skip, "1.37 skips");
        assert_eq!(
            hint(&pod, 38, &small, &small),
            Hint::Skip,
            "it did not fit before either"
        );
        assert_eq!(
            hint(&pod, 38, &None, &small),
            Hint::Skip,
            "added, not shrunk"
        );
    }

    #[test]
    fn nodes_help_when_they_have_room_or_grew_in_what_the_pod_requests() {
        let pod = PodBuilder::new("p").req_cpu("2").info();
        let hint = |old: &Option<EventObject>, new: &Option<EventObject>| {
            after_node_change(None, Release::default(), &pod, old.as_ref(), new.as_ref())
        };
        assert_eq!(
            hint(&None, &node("4", "110")),
            Hint::Queue,
            "added with room"
        );
        assert_eq!(
            hint(&None, &node("1", "110")),
            Hint::Skip,
            "too small even when empty"
        );
        assert_eq!(hint(&None, &node("4", "0")), Hint::Skip, "takes no pods");
        assert_eq!(
            hint(&node("3", "110"), &node("4", "110")),
            Hint::Queue,
            "more cpu"
        );
        assert_eq!(hint(&node("4", "110"), &node("4", "110")), Hint::Skip);
        assert_eq!(
            hint(&node("4", "10"), &node("4", "20")),
            Hint::Queue,
            "more pods"
        );
    }

    #[test]
    fn pods_help_when_deleted_from_a_node_or_scaled_down_in_what_the_pod_requests() {
        let pod = PodBuilder::new("p").req_cpu("2").info();
        let pending = EventObject::Pod(Arc::new(PodBuilder::new("q").build()));
        let bound = |cpu: &str| {
            EventObject::Pod(Arc::new(
                PodBuilder::new("q").node_name("n1").req_cpu(cpu).build(),
            ))
        };
        assert_eq!(after_pod_event(&pod, Some(&bound("1")), None), Hint::Queue);
        assert_eq!(
            after_pod_event(&pod, Some(&pending), None),
            Hint::Skip,
            "held nothing"
        );
        assert_eq!(
            after_pod_event(&pod, Some(&bound("2")), Some(&bound("1"))),
            Hint::Queue
        );
        assert_eq!(
            after_pod_event(&pod, Some(&bound("1")), Some(&bound("1"))),
            Hint::Skip
        );
    }
}
