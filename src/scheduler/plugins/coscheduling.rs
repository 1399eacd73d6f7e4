//! Coscheduling: the pods of a scheduler-plugins PodGroup (`scheduling.x-k8s.io/v1alpha1`,
//! named by the pod's label `scheduling.x-k8s.io/pod-group`, `minMember` pods at once) are
//! placed by the same group cycle as the Workload API's gangs, so that jobs written for
//! scheduler-plugins' Coscheduling (Kubeflow's training operator, Volcano-free MPI setups) move
//! to tether unchanged. A profile runs it by enabling `Coscheduling`; without it, the label
//! means nothing and each pod is scheduled alone.
//!
//! Unlike scheduler-plugins' plugin of that name, there is no Permit barrier: the group cycle
//! places `minMember` pods at once or holds nothing, so `scheduleTimeoutSeconds` (how long
//! Permit waits there) has nothing to bound, and two groups never deadlock on room each holds
//! half of. The PodGroup's status is its own controller's; tether writes none.

use std::sync::Arc;

use crate::scheduler::framework::events::{ActionType, ClusterEvent, Registration};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{Plugin, PreEnqueuePlugin, Status};
use crate::scheduler::informers::pod_groups::{COSCHEDULING_EVENT, GroupApi, PodGroupIndex};
use crate::scheduler::plugins::gang_scheduling::{
    MIN_COUNT_WAIT, hold_until_complete, member_events,
};
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "Coscheduling";

/// Holds a Coscheduling group's pods back until `minMember` of them exist.
pub struct Coscheduling {
    groups: Arc<PodGroupIndex>,
}

impl Plugin for Coscheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(member_events(ClusterEvent::new(
            COSCHEDULING_EVENT,
            ActionType::ADD | ActionType::UPDATE,
        )))
    }
}

impl PreEnqueuePlugin for Coscheduling {
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        hold_until_complete(
            &self.groups,
            pod,
            GroupApi::Coscheduling,
            |key| {
                format!(
                    "waiting for PodGroup {:?} (scheduling.x-k8s.io) to appear",
                    key.name
                )
            },
            |_| MIN_COUNT_WAIT.to_string(),
        )
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(Coscheduling {
        groups: handle.pod_groups.clone(),
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    use crate::k8s::pod::Pod;

    fn member(uid: &str) -> PodInfo {
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid,
                         "labels": {"scheduling.x-k8s.io/pod-group": "mpi"}},
            "spec": {"containers": []},
        }))
        .expect("a pod");
        PodInfo::new(Arc::new(pod))
    }

    #[test]
    fn a_labelled_pod_waits_for_its_group_and_min_member_pods() {
        let groups = Arc::new(PodGroupIndex::default());
        let plugin = Coscheduling {
            groups: groups.clone(),
        };
        let a = member("a");
        groups.observe_pod(&a.pod);
        assert_eq!(
            PreEnqueuePlugin::pre_enqueue(&plugin, &a).message(),
            "waiting for PodGroup \"mpi\" (scheduling.x-k8s.io) to appear"
        );
        let object: kube::api::DynamicObject = serde_json::from_value(json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "mpi", "namespace": "ns", "resourceVersion": "1"},
            "spec": {"minMember": 2},
        }))
        .expect("an object");
        groups.apply_coscheduling(Arc::new(
            crate::scheduler::informers::pod_groups::CoschedulingGroup::from_object(&object),
        ));
        assert_eq!(
            PreEnqueuePlugin::pre_enqueue(&plugin, &a).message(),
            "waiting for minCount pods from a gang to appear in scheduling queue"
        );
        let b = member("b");
        groups.observe_pod(&b.pod);
        assert!(PreEnqueuePlugin::pre_enqueue(&plugin, &a).is_success());
    }
}
