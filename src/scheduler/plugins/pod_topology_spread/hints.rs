//! PodTopologySpread's queueing hints: a pod its hard constraints count appeared, went or was
//! relabelled in its namespace; a node with every topology key appeared, went, or changed a
//! topology value or its taints.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::{Constraint, PodTopologySpread};
use crate::k8s::pod::Pod;
use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::framework::pod_info::PodInfo;

/// The events that can make a pod PodTopologySpread rejected schedulable.
pub fn registrations(plugin: Arc<PodTopologySpread>) -> Vec<Registration> {
    let for_pods = plugin.clone();
    vec![
        Registration::new(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::ADD
                    | ActionType::UPDATE_POD_LABEL
                    | ActionType::UPDATE_POD_TOLERATION
                    | ActionType::DELETE,
            ),
            Arc::new(move |pod, old, new| after_pod_change(&for_pods, pod, old, new)),
        ),
        Registration::new(
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD
                    | ActionType::DELETE
                    | ActionType::UPDATE_NODE_LABEL
                    | ActionType::UPDATE_NODE_TAINT,
            ),
            Arc::new(move |pod, old, new| after_node_change(&plugin, pod, old, new)),
        ),
    ]
}

fn labels(pod: &Pod) -> BTreeMap<String, String> {
    pod.metadata.labels.clone().unwrap_or_default()
}

/// Whether a change of `other` concerns `pod`'s spreading: it is the pod itself, or a pod
/// holding a place on a node in the same namespace.
fn involved(pod: &PodInfo, other: &Pod) -> bool {
    events::is_same_pod(pod, other)
        || (events::assigned_or_nominated(other)
            && other.metadata.namespace.as_deref().unwrap_or_default() == pod.namespace())
}

fn after_pod_change(
    plugin: &PodTopologySpread,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (old, new) = events::pods(old, new);
    if new.is_some_and(|p| !involved(pod, p)) || old.is_some_and(|p| !involved(pod, p)) {
        return Hint::Skip;
    }
    let Ok(constraints) = plugin.constraints(pod, "DoNotSchedule") else {
        return Hint::Queue;
    };
    let counted = |p: &Pod| constraints.iter().any(|c| c.selector.matches(&labels(p)));
    match (old, new) {
        (Some(old), Some(new)) => {
            let tolerations = |p: &Pod| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.tolerations.clone())
                    .unwrap_or_default()
            };
            if events::is_same_pod(pod, new)
                && tolerations(old) != tolerations(new)
                && constraints.iter().any(|c| c.honor_node_taints)
            {
                return Hint::Queue;
            }
            if labels(old) == labels(new) {
                return Hint::Skip;
            }
            events::queue_if(
                constraints
                    .iter()
                    .any(|c| c.selector.matches(&labels(old)) != c.selector.matches(&labels(new))),
            )
        }
        (None, Some(added)) => events::queue_if(counted(added)),
        (Some(deleted), None) => events::queue_if(counted(deleted)),
        (None, None) => Hint::Queue,
    }
}

fn node_labels(node: &Node) -> BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

fn after_node_change(
    plugin: &PodTopologySpread,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let Ok(constraints) = plugin.constraints(pod, "DoNotSchedule") else {
        return Hint::Queue;
    };
    let has_keys = |n: &Node| has_all_keys(&node_labels(n), &constraints);
    match events::nodes(old, new) {
        (Some(old), Some(new)) => {
            if has_keys(old) != has_keys(new) {
                return Hint::Queue;
            }
            let (before, after) = (node_labels(old), node_labels(new));
            let value =
                |l: &BTreeMap<String, String>, k: &str| l.get(k).cloned().unwrap_or_default();
            let moved = constraints
                .iter()
                .any(|c| value(&before, &c.topology_key) != value(&after, &c.topology_key));
            let taints = crate::k8s::taints::of_node;
            events::queue_if(has_keys(new) && (moved || taints(old) != taints(new)))
        }
        (None, Some(added)) => events::queue_if(has_keys(added)),
        (Some(deleted), None) => events::queue_if(has_keys(deleted)),
        (None, None) => Hint::Queue,
    }
}

fn has_all_keys(labels: &BTreeMap<String, String>, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| labels.contains_key(c.topology_key.as_str()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::plugins::pod_topology_spread::{
        NoDefaultSelectors, PodTopologySpreadArgs,
    };
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::TopologySpreadConstraint;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn spread_pod() -> PodInfo {
        let mut pod = PodBuilder::new("p").label("app", "web").build();
        pod.spec
            .get_or_insert_with(Default::default)
            .topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 1,
            topology_key: "zone".into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), "web".to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        }]);
        PodInfo::new(Arc::new(pod))
    }

    fn plugin() -> PodTopologySpread {
        PodTopologySpread::new(
            PodTopologySpreadArgs::default(),
            Arc::new(NoDefaultSelectors),
        )
    }

    #[test]
    fn pods_help_when_they_count_for_a_constraint_in_the_namespace() {
        let (plugin, pod) = (plugin(), spread_pod());
        let bound = |app: &str, ns: &str| {
            EventObject::Pod(Arc::new(
                PodBuilder::new("q")
                    .namespace(ns)
                    .label("app", app)
                    .node_name("n1")
                    .build(),
            ))
        };
        let hint = |old: Option<&EventObject>, new: Option<&EventObject>| {
            after_pod_change(&plugin, &pod, old, new)
        };
        assert_eq!(hint(None, Some(&bound("web", "default"))), Hint::Queue);
        assert_eq!(hint(Some(&bound("web", "default")), None), Hint::Queue);
        assert_eq!(hint(None, Some(&bound("db", "default"))), Hint::Skip);
        assert_eq!(
            hint(None, Some(&bound("web", "other"))),
            Hint::Skip,
            "another namespace"
        );
        assert_eq!(
            hint(
                Some(&bound("db", "default")),
                Some(&bound("web", "default"))
            ),
            Hint::Queue,
            "relabelled into the selector"
        );
        let pending = EventObject::Pod(Arc::new(PodBuilder::new("q").label("app", "web").build()));
        assert_eq!(hint(None, Some(&pending)), Hint::Skip, "holds no place");
    }

    #[test]
    fn nodes_help_when_they_carry_the_topology_keys() {
        let (plugin, pod) = (plugin(), spread_pod());
        let node = |zone: Option<&str>| {
            let b = NodeBuilder::new("n1");
            let b = match zone {
                Some(z) => b.label("zone", z),
                None => b,
            };
            b.info(vec![]).node.map(EventObject::Node)
        };
        let hint = |old: Option<EventObject>, new: Option<EventObject>| {
            after_node_change(&plugin, &pod, old.as_ref(), new.as_ref())
        };
        assert_eq!(hint(None, node(Some("a"))), Hint::Queue);
        assert_eq!(hint(None, node(None)), Hint::Skip);
        assert_eq!(
            hint(node(None), node(Some("a"))),
            Hint::Queue,
            "got the key"
        );
        assert_eq!(
            hint(node(Some("a")), node(Some("b"))),
            Hint::Queue,
            "moved zone"
        );
        assert_eq!(hint(node(Some("a")), node(Some("a"))), Hint::Skip);
    }
}
