//! GangScheduling: the pods of a PodGroup with the gang policy (the Workload API,
//! `scheduling.k8s.io/v1beta1`) wait at PreEnqueue until their PodGroup exists and at least
//! `minCount` of its pods do, as kube-scheduler v1.37's plugin of that name. Whether a gang
//! fits is decided by the group scheduling cycle (`scheduler/schedule_one_group.rs`), which places the
//! members together or holds nothing; this plugin marks the profiles that run it.

use std::sync::Arc;

use crate::scheduler::framework::events::{
    ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{Plugin, PreEnqueuePlugin, Status};
use crate::scheduler::informers::pod_groups::composite::{COMPOSITE_EVENT, CompositeGroup, Root};
use crate::scheduler::informers::pod_groups::{
    self, GroupApi, GroupKey, GroupRef, PodGroupIndex, Policy,
};
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "GangScheduling";

/// Holds a gang's pods back until the gang can be tried whole.
pub struct GangScheduling {
    groups: Arc<PodGroupIndex>,
    /// Whose words PreEnqueue says why a pod waits in (they changed in 1.38).
    release: crate::k8s::release::Release,
}

impl Plugin for GangScheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }

    /// A pod of the same group added (pending or bound), the group added or its `minCount`
    /// lowered.
    fn events_to_register(&self) -> Option<Vec<Registration>> {
        let mut events = member_events(ClusterEvent::new(
            EventResource::PodGroup,
            ActionType::ADD | ActionType::UPDATE,
        ));
        if self.release.at_least(38) {
            // The pods of a hierarchy (1.38's CompositePodGroups): any pod, PodGroup or
            // CompositePodGroup of their namespace added, or a CompositePodGroup's
            // `minGroupCount` lowered, may complete it. Coarser than upstream's same-hierarchy
            // check: PreEnqueue decides again.
            let groups = self.groups.clone();
            let in_hierarchy =
                move |pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>| {
                    hierarchy_hint(&groups, pod, old, new)
                };
            let hint: crate::scheduler::framework::events::HintFn = Arc::new(in_hierarchy);
            for event in [
                ClusterEvent::new(EventResource::UnschedulablePod, ActionType::ADD),
                ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD),
                ClusterEvent::new(EventResource::PodGroup, ActionType::ADD),
                ClusterEvent::new(COMPOSITE_EVENT, ActionType::ADD | ActionType::UPDATE),
            ] {
                events.push(Registration::new(event, hint.clone()));
            }
        }
        Some(events)
    }
}

/// Whether an event may let a held pod of a hierarchy go (see `events_to_register`).
fn hierarchy_hint(
    groups: &PodGroupIndex,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    // Asked of every held pod at every event: nothing allocated while no CompositePodGroup
    // exists (a pod held for a missing ancestor is told by the ancestor's arrival, when one
    // does).
    if !groups.has_composites() || pod_groups::group_ref(&pod.pod).is_none() {
        return Hint::Skip;
    }
    let Some(mine) = pod_groups::group_of(&pod.pod).filter(|k| groups.has_parent(k)) else {
        return Hint::Skip;
    };
    let namespace = match new {
        Some(EventObject::Pod(other)) => other.metadata.namespace.as_deref(),
        Some(EventObject::PodGroup(group)) => group.metadata.namespace.as_deref(),
        Some(other) => match other.custom::<CompositeGroup>() {
            Some(after) => {
                let lowered = match old.and_then(|o| o.custom::<CompositeGroup>()) {
                    Some(before) => match (before.policy, after.policy) {
                        (Policy::Gang { min_count: was }, Policy::Gang { min_count: now }) => {
                            now < was
                        }
                        _ => false,
                    },
                    None => true,
                };
                if !lowered {
                    return Hint::Skip;
                }
                Some(after.namespace.as_str())
            }
            None => return Hint::Skip,
        },
        None => return Hint::Skip,
    };
    if namespace == Some(mine.namespace.as_str()) {
        Hint::Queue
    } else {
        Hint::Skip
    }
}

/// The events that may let a gang's held pod go: a pod of its group added (pending or bound),
/// or `group_event` (its group added or changed), each only for the pod's own group.
pub fn member_events(group_event: ClusterEvent) -> Vec<Registration> {
    let same_group: fn(&PodInfo, Option<&EventObject>, Option<&EventObject>) -> Hint =
        |pod, old, new| {
            // Asked of every held member of every gang at each pod added: nothing allocated.
            let mine = pod_groups::group_ref(&pod.pod);
            // A Workload PodGroup changed: only a gang's lowered `minCount` may help (its
            // status, such as the condition the group cycle writes, never does), as upstream's
            // isSchedulableAfterPodGroupUpdated.
            if let (Some(EventObject::PodGroup(before)), Some(EventObject::PodGroup(after))) =
                (old, new)
            {
                let lowered = match (pod_groups::policy(before), pod_groups::policy(after)) {
                    (Policy::Gang { min_count: was }, Policy::Gang { min_count: now }) => now < was,
                    _ => false,
                };
                if !lowered {
                    return Hint::Skip;
                }
            }
            let theirs = match new {
                Some(EventObject::Pod(other)) => pod_groups::group_ref(other),
                Some(EventObject::PodGroup(group)) => Some(GroupRef {
                    api: GroupApi::Workload,
                    namespace: group.metadata.namespace.as_deref().unwrap_or_default(),
                    name: group.metadata.name.as_deref().unwrap_or_default(),
                }),
                Some(other) => match other.custom::<pod_groups::CoschedulingGroup>() {
                    Some(group) => Some(GroupRef {
                        api: GroupApi::Coscheduling,
                        namespace: &group.namespace,
                        name: &group.name,
                    }),
                    None => return Hint::Queue,
                },
                None => return Hint::Queue,
            };
            if mine.is_some() && mine == theirs {
                Hint::Queue
            } else {
                Hint::Skip
            }
        };
    vec![
        Registration::new(
            ClusterEvent::new(EventResource::UnschedulablePod, ActionType::ADD),
            Arc::new(same_group),
        ),
        Registration::new(
            ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD),
            Arc::new(same_group),
        ),
        Registration::new(group_event, Arc::new(same_group)),
    ]
}

impl PreEnqueuePlugin for GangScheduling {
    /// UnschedulableAndUnresolvable, in upstream's words, while the pod's group is not known,
    /// or is a gang with fewer live pods than its `minCount`.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        if self.release.at_least(38) {
            if let Some(held) = hold_hierarchy(&self.groups, pod) {
                return held;
            }
            return hold_until_complete(
                &self.groups,
                pod,
                GroupApi::Workload,
                |key| {
                    format!(
                        "pod group {:?} or one of its composite pod group ancestors has not been created yet",
                        key.name
                    )
                },
                |key| format!("waiting for podgroup/{key} to meet its quorum"),
            );
        }
        hold_until_complete(
            &self.groups,
            pod,
            GroupApi::Workload,
            // Upstream's wording, "pods's" included.
            |key| {
                format!(
                    "waiting for pods's pod group {:?} to appear in scheduling queue",
                    key.name
                )
            },
            |_| MIN_COUNT_WAIT.to_string(),
        )
    }
}

/// PreEnqueue of a pod whose PodGroup has a parent (1.38): held, in upstream's words, while
/// an ancestor is not known or the root's hierarchy is not ready (see [`PodGroupIndex::ready`]);
/// an error when the parents loop. None for a pod of no hierarchy.
fn hold_hierarchy(groups: &PodGroupIndex, pod: &PodInfo) -> Option<Status> {
    let key = pod_groups::group_of(&pod.pod).filter(|k| groups.has_parent(k))?;
    let missing = || {
        Status::unresolvable(format!(
            "pod group {:?} or one of its composite pod group ancestors has not been created yet",
            key.name
        ))
    };
    let root = match groups.root_of(&key) {
        Err(cycle) => return Some(Status::error(cycle)),
        Ok(Some(Root::Composite(root))) => root,
        Ok(Some(Root::Alone)) => return None,
        Ok(None) => return Some(missing()),
    };
    let Some(tree) = groups.tree(&root) else {
        return Some(missing());
    };
    if groups.ready(&tree) {
        return Some(Status::success());
    }
    Some(Status::unresolvable(if tree.group.is_basic() {
        format!("waiting for {root} tree to have at least one ready child group")
    } else {
        format!("waiting for {root} to meet its quorum")
    }))
}

/// Why a gang's pod waits while its group has fewer pods than `minCount`, until 1.38 (and in
/// Coscheduling).
pub const MIN_COUNT_WAIT: &str =
    "waiting for minCount pods from a gang to appear in scheduling queue";

/// PreEnqueue of a gang's pod (of `api`'s groups): held while its group is not known
/// (`missing` says so) or has fewer live pods than its `minCount` (`short` says so).
pub fn hold_until_complete(
    groups: &PodGroupIndex,
    pod: &PodInfo,
    api: GroupApi,
    missing: impl Fn(&GroupKey) -> String,
    short: impl Fn(&GroupKey) -> String,
) -> Status {
    let Some(key) = pod_groups::group_of(&pod.pod).filter(|k| k.api == api) else {
        return Status::success();
    };
    let Some(group) = groups.get(&key) else {
        return Status::unresolvable(missing(&key));
    };
    match group.policy() {
        Policy::Gang { min_count } if groups.member_count(&key) < min_count => {
            Status::unresolvable(short(&key))
        }
        _ => Status::success(),
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(GangScheduling {
        groups: handle.pod_groups.clone(),
        release: handle.release,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::pod::Pod;
    use crate::k8s::release::Release;
    use crate::scheduler::informers::Keeps;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;
    use serde_json::json;

    fn pod(uid: &str, group: &str) -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [], "schedulingGroup": {"podGroupName": group}},
        }))
        .expect("a pod");
        PodInfo::new(Arc::new(pod))
    }

    fn group(name: &str, min_count: i32) -> Arc<PodGroup> {
        Arc::new(
            serde_json::from_value(json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
            }))
            .expect("a PodGroup"),
        )
    }

    #[test]
    fn a_gang_member_waits_for_its_group_and_then_for_min_count_pods() {
        let groups = Arc::new(PodGroupIndex::default());
        let plugin = GangScheduling {
            release: Release::default(),
            groups: groups.clone(),
        };
        let first = pod("a", "train");
        groups.observe_pod(&first.pod);
        let status = PreEnqueuePlugin::pre_enqueue(&plugin, &first);
        assert_eq!(
            status.message(),
            "waiting for pods's pod group \"train\" to appear in scheduling queue"
        );
        assert!(status.is_rejected());

        groups.apply(group("train", 2));
        assert_eq!(
            PreEnqueuePlugin::pre_enqueue(&plugin, &first).message(),
            "waiting for minCount pods from a gang to appear in scheduling queue"
        );
        let second = pod("b", "train");
        groups.observe_pod(&second.pod);
        assert!(PreEnqueuePlugin::pre_enqueue(&plugin, &first).is_success());
        assert!(PreEnqueuePlugin::pre_enqueue(&plugin, &second).is_success());

        let loner = PodInfo::new(Arc::new(Pod::default()));
        assert!(
            PreEnqueuePlugin::pre_enqueue(&plugin, &loner).is_success(),
            "no group, no wait"
        );
    }

    #[test]
    fn only_events_of_the_pods_own_group_requeue_it() {
        let plugin = GangScheduling {
            release: Release::default(),
            groups: Arc::default(),
        };
        let registrations = plugin.events_to_register().expect("registers");
        let hint = registrations[0].hint.clone().expect("a hint");
        let me = pod("a", "train");
        let sibling = EventObject::Pod(pod("b", "train").pod.clone());
        let stranger = EventObject::Pod(pod("c", "other").pod.clone());
        assert_eq!(hint(&me, None, Some(&sibling)), Hint::Queue);
        assert_eq!(hint(&me, None, Some(&stranger)), Hint::Skip);
        let own = EventObject::PodGroup(group("train", 2));
        assert_eq!(hint(&me, None, Some(&own)), Hint::Queue, "its group added");
        // Changed: only a lowered minCount helps; a status write (the same spec) does not.
        let mut written = (*group("train", 2)).clone();
        written.status = Some(Default::default());
        let written = EventObject::PodGroup(Arc::new(written));
        assert_eq!(hint(&me, Some(&own), Some(&written)), Hint::Skip);
        let lowered = EventObject::PodGroup(group("train", 1));
        assert_eq!(hint(&me, Some(&own), Some(&lowered)), Hint::Queue);
        assert_eq!(hint(&me, Some(&lowered), Some(&own)), Hint::Skip);
    }
}
