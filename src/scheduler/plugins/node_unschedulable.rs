//! NodeUnschedulable: keeps pods off cordoned nodes (`spec.unschedulable`) unless they tolerate
//! the `node.kubernetes.io/unschedulable:NoSchedule` taint, as kube-scheduler's
//! NodeUnschedulable Filter plugin.

use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::plugins::handle::Handle;
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::Taint;

use crate::k8s::pod::{Pod, PodSpec};
use crate::k8s::taints::{self, tolerates};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};

use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "NodeUnschedulable";

/// The reason a cordoned node is rejected, as upstream words it.
pub const ERR_REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// The reason when the node object is missing, as upstream words it.
pub const ERR_REASON_UNKNOWN_CONDITION: &str = "node(s) had unknown conditions";

/// The taint a pod must tolerate to be placed on a cordoned node.
static UNSCHEDULABLE_TAINT: LazyLock<Taint> = LazyLock::new(|| Taint {
    key: "node.kubernetes.io/unschedulable".into(),
    value: None,
    effect: "NoSchedule".into(),
    time_added: None,
});

/// Rejects nodes marked unschedulable for pods that do not tolerate it.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeUnschedulable;

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        signature.part(
            crate::scheduler::framework::signature::TOLERATIONS,
            &crate::scheduler::framework::signature::tolerations(pod),
        );
        true
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(vec![
            Registration::new(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                ),
                Arc::new(after_node_change),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_TOLERATION),
                Arc::new(after_toleration_added),
            ),
        ])
    }

    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // Read from the node's info, not its object: the first read of each node's object in
        // a cycle was a cache miss per node (7 % of the CPU at 5,000 nodes, BENCHMARKS.md).
        if node.node.is_none() {
            return Status::unresolvable(ERR_REASON_UNKNOWN_CONDITION);
        }
        if !node.unschedulable {
            return Status::success();
        }
        if tolerates_cordon(&pod.pod) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_UNSCHEDULABLE)
        }
    }

    fn remedy(&self, _state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        Some(format!(
            "uncordon {0} (kubectl uncordon {0}), or tolerate node.kubernetes.io/unschedulable:NoSchedule",
            node.name
        ))
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    _handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(NodeUnschedulable))
}

/// A schedulable node was added, or a node was uncordoned.
fn after_node_change(_pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let Some((old, new)) = events::node_change(old, new) else {
        return Hint::Queue;
    };
    events::queue_if(!taints::cordoned(new) && old.is_none_or(taints::cordoned))
}

/// The pod itself now tolerates cordoned nodes.
fn after_toleration_added(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let Some(new) = events::pod_update(old, new) else {
        return Hint::Queue;
    };
    events::queue_if(events::is_same_pod(pod, new) && tolerates_cordon(new))
}

/// Whether `pod` tolerates the taint a cordoned node is treated as carrying.
pub(crate) fn tolerates_cordon(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .map_or(&[][..], PodSpec::tolerations)
        .iter()
        .any(|t| tolerates(t, &UNSCHEDULABLE_TAINT))
}

/// As kube-scheduler 1.37's: nothing to do here (it matters only to resizes deferred for
/// preemption, an alpha feature), so Filter runs as before; listed at PreFilter as upstream lists
/// it.
impl PreFilterPlugin for NodeUnschedulable {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        (PreFilterResult::all_nodes(), Status::success())
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::Node;

    #[test]
    fn filter_honours_cordon_and_its_toleration() {
        let rejected = || Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_UNSCHEDULABLE);
        let cases = [
            (
                "does not schedule pod to unschedulable node",
                PodBuilder::new("p"),
                NodeBuilder::new("n").unschedulable(),
                rejected(),
            ),
            (
                "schedules pod to normal node",
                PodBuilder::new("p"),
                NodeBuilder::new("n"),
                Status::success(),
            ),
            (
                "schedules pod to node with unschedulable explicitly false",
                PodBuilder::new("p"),
                NodeBuilder::new("n").with(|n| {
                    if let Some(s) = n.spec.as_mut() {
                        s.unschedulable = Some(false);
                    }
                }),
                Status::success(),
            ),
            (
                "schedules pod with toleration to unschedulable node",
                PodBuilder::new("p").toleration(
                    "node.kubernetes.io/unschedulable",
                    "Exists",
                    "",
                    "NoSchedule",
                ),
                NodeBuilder::new("n").unschedulable(),
                Status::success(),
            ),
            (
                "a toleration of every taint also tolerates the cordon",
                PodBuilder::new("p").toleration("", "Exists", "", ""),
                NodeBuilder::new("n").unschedulable(),
                Status::success(),
            ),
            (
                "a NoExecute toleration of the key does not tolerate the cordon",
                PodBuilder::new("p").toleration(
                    "node.kubernetes.io/unschedulable",
                    "Exists",
                    "",
                    "NoExecute",
                ),
                NodeBuilder::new("n").unschedulable(),
                rejected(),
            ),
        ];
        for (name, pod, node, want) in cases {
            let got = FilterPlugin::filter(
                &NodeUnschedulable,
                &CycleState::new(),
                &pod.info(),
                &node.info(vec![]),
            );
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn filter_without_node_object_is_unresolvable() {
        let got = FilterPlugin::filter(
            &NodeUnschedulable,
            &CycleState::new(),
            &PodBuilder::new("p").info(),
            &NodeInfo::new("ghost"),
        );
        assert_eq!(
            got,
            Status::new(
                Code::UnschedulableAndUnresolvable,
                ERR_REASON_UNKNOWN_CONDITION
            )
        );
    }

    /// A node with `spec.unschedulable` set to `unschedulable`, as upstream's `&v1.Node{..}`.
    fn node(unschedulable: bool) -> NodeBuilder {
        NodeBuilder::new("n").with(|n| {
            n.spec.get_or_insert_with(Default::default).unschedulable = Some(unschedulable);
        })
    }

    fn node_event(node: NodeBuilder) -> Option<EventObject> {
        Some(EventObject::Node(Arc::new(node.build())))
    }

    /// An event object of the wrong kind for a node hint (upstream's `"not-a-node"`).
    fn not_a_node() -> Option<EventObject> {
        Some(EventObject::Pod(Arc::new(
            PodBuilder::new("not-a-node").build(),
        )))
    }

    /// Upstream `TestIsSchedulableAfterNodeChange` (nodeunschedulable), every row but
    /// "error-wrong-old-object" (its own test below): (name, old node, new node, hint). The
    /// pending pod is upstream's empty `&v1.Pod{}`.
    #[test]
    fn upstream_is_schedulable_after_node_change() {
        let not_ready = |n: NodeBuilder| n.taint("node.kubernetes.io/not-ready", "", "NoExecute");
        let rows = [
            ("error-wrong-new-object", None, not_a_node(), Hint::Queue),
            (
                "skip-queue-on-unschedulable-node-added",
                None,
                node_event(node(true)),
                Hint::Skip,
            ),
            (
                "queue-on-schedulable-node-added",
                None,
                node_event(node(false)),
                Hint::Queue,
            ),
            (
                "skip-unrelated-change-unschedulable-true",
                node_event(node(true)),
                node_event(not_ready(node(true))),
                Hint::Skip,
            ),
            (
                "skip-unrelated-change-unschedulable-false",
                node_event(node(false)),
                node_event(not_ready(node(false))),
                Hint::Skip,
            ),
            (
                "queue-on-unschedulable-field-change",
                node_event(node(true)),
                node_event(node(false)),
                Hint::Queue,
            ),
        ];
        let pod = PodBuilder::new("p").info();
        for (name, old, new, want) in rows {
            assert_eq!(
                after_node_change(&pod, old.as_ref(), new.as_ref()),
                want,
                "{name}"
            );
        }
    }

    /// Upstream `TestIsSchedulableAfterNodeChange` (nodeunschedulable) "error-wrong-old-object":
    /// an old object that is not a node is an error upstream, so the pod is queued (tether's
    /// `HintFn` documents the same rule), even though the new node is unschedulable.
    #[test]
    fn upstream_is_schedulable_after_node_change_wrong_old_object() {
        assert_eq!(
            after_node_change(
                &PodBuilder::new("p").info(),
                not_a_node().as_ref(),
                node_event(node(true)).as_ref()
            ),
            Hint::Queue,
            "error-wrong-old-object"
        );
    }

    /// Upstream `TestIsSchedulableAfterPodTolerationChange`, every row but
    /// "error-wrong-old-object" (its own test below): (name, pending pod, old pod, new pod,
    /// hint). Upstream's `Toleration(key)` is the key with operator Exists and no effect.
    #[test]
    fn upstream_is_schedulable_after_pod_toleration_change() {
        let pod = || PodBuilder::new("p").uid("uid");
        let event = |p: PodBuilder| Some(EventObject::Pod(Arc::new(p.build())));
        let not_a_pod = Some(EventObject::Node(Arc::new(Node::default())));
        let rows = [
            (
                "error-wrong-new-object",
                PodBuilder::new("p"),
                None,
                not_a_pod,
                Hint::Queue,
            ),
            (
                "queue-when-the-unsched-pod-gets-toleration",
                pod(),
                event(pod()),
                event(pod().toleration("node.kubernetes.io/unschedulable", "Exists", "", "")),
                Hint::Queue,
            ),
            (
                "skip-when-the-unsched-pod-gets-unrelated-toleration",
                pod(),
                event(pod()),
                event(pod().toleration("unrelated-key", "Exists", "", "")),
                Hint::Skip,
            ),
        ];
        for (name, pending, old, new, want) in rows {
            assert_eq!(
                after_toleration_added(&pending.info(), old.as_ref(), new.as_ref()),
                want,
                "{name}"
            );
        }
    }

    /// Upstream `TestIsSchedulableAfterPodTolerationChange` "error-wrong-old-object": the pod
    /// (`&v1.Pod{}`) is queued because the old object is not a pod, which upstream treats as an
    /// error (tether's `HintFn` documents the same rule).
    #[test]
    fn upstream_is_schedulable_after_pod_toleration_change_wrong_old_object() {
        let empty = || Arc::new(crate::k8s::pod::Pod::default());
        let not_a_pod = EventObject::Node(Arc::new(Node::default()));
        let new = EventObject::Pod(empty());
        assert_eq!(
            after_toleration_added(&PodInfo::new(empty()), Some(&not_a_pod), Some(&new)),
            Hint::Queue,
            "error-wrong-old-object"
        );
    }
}
