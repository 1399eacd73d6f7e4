//! NodeAffinity's queueing hints: a node added, or whose labels changed, that the pod's
//! required node affinity (and the profile's addedAffinity) now matches.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use crate::k8s::node_selector::{RequiredNodeAffinity, Terms};
use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::framework::pod_info::PodInfo;

/// The events that can make a pod NodeAffinity rejected schedulable.
pub fn registrations(added_required: Option<Terms>) -> Vec<Registration> {
    vec![Registration::new(
        ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
        ),
        Arc::new(move |pod, old, new| after_node_change(added_required.as_ref(), pod, old, new)),
    )]
}

fn node_name(node: &Node) -> &str {
    node.metadata.name.as_deref().unwrap_or_default()
}

fn labels(node: &Node) -> std::collections::BTreeMap<String, String> {
    node.metadata.labels.clone().unwrap_or_default()
}

/// Queue when the node now matches and (for an update) did not before.
fn after_node_change(
    added_required: Option<&Terms>,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (old, new) = events::nodes(old, new);
    let Some(new) = new else { return Hint::Queue };
    if added_required.is_some_and(|t| !t.matches(node_name(new), &labels(new))) {
        return Hint::Skip;
    }
    let required = RequiredNodeAffinity::from_pod(&pod.pod);
    match required.try_matches(node_name(new), &labels(new)) {
        Ok(true) => {}
        Ok(false) => return Hint::Skip,
        // As upstream: a term that did not parse makes the match an error, which queues.
        Err(_) => return Hint::Queue,
    }
    match old {
        None => Hint::Queue,
        Some(old) => events::queue_if(!required.matches_labels(node_name(old), &labels(old))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn node(zone: &str) -> Option<EventObject> {
        NodeBuilder::new("n1")
            .label("zone", zone)
            .info(vec![])
            .node
            .map(EventObject::Node)
    }

    #[test]
    fn queues_only_when_the_node_starts_to_match() {
        let pod = PodBuilder::new("p").node_selector("zone", "a").info();
        let (a, b) = (node("a"), node("b"));
        let hint = |old: &Option<EventObject>, new: &Option<EventObject>| {
            after_node_change(None, &pod, old.as_ref(), new.as_ref())
        };
        assert_eq!(hint(&None, &a), Hint::Queue, "a matching node added");
        assert_eq!(hint(&None, &b), Hint::Skip, "a node that does not match");
        assert_eq!(hint(&b, &a), Hint::Queue, "relabelled to match");
        assert_eq!(hint(&a, &a), Hint::Skip, "matched before: nothing new");
        assert_eq!(hint(&a, &b), Hint::Skip);
    }

    /// upstream's isSchedulableAfterNodeChange: when no required term matches the node and one
    /// did not parse, the match is an error, and an error queues the pod; a node the
    /// nodeSelector already rules out is skipped.
    #[test]
    fn a_term_that_does_not_parse_queues_the_pod_for_a_node_no_other_term_matches() {
        use k8s_openapi::api::core::v1::{
            Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
        };
        let term = |key: &str, op: &str, value: &str| NodeSelectorTerm {
            match_expressions: Some(vec![NodeSelectorRequirement {
                key: key.into(),
                operator: op.into(),
                values: Some(vec![value.into()]),
            }]),
            match_fields: None,
        };
        let pod = PodBuilder::new("p")
            .node_selector("zone", "b")
            .affinity(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: vec![
                            term("zone", "In", "not a value!"),
                            term("zone", "In", "c"),
                        ],
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .info();
        let hint = |new: &Option<EventObject>| after_node_change(None, &pod, None, new.as_ref());
        assert_eq!(
            hint(&node("b")),
            Hint::Queue,
            "no term matches, one is broken"
        );
        assert_eq!(
            hint(&node("a")),
            Hint::Skip,
            "the nodeSelector rules it out"
        );
    }
}
