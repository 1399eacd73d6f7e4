//! InterPodAffinity's queueing hints: a pod appeared or was relabelled that the pod's required
//! affinity selects; a pod went that its required anti-affinity selected, or whose own
//! anti-affinity kept this pod away; a node got (or changed) a topology key its terms need.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;

use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::framework::pod_info::{AffinityTerm, PodInfo};

/// The events that can make a pod InterPodAffinity rejected schedulable.
pub fn registrations() -> Vec<Registration> {
    vec![
        Registration::new(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::ADD | ActionType::UPDATE_POD_LABEL | ActionType::DELETE,
            ),
            Arc::new(after_pod_change),
        ),
        Registration::new(
            ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            ),
            Arc::new(after_node_change),
        ),
    ]
}

/// Whether every term (there is at least one) selects `pod`. Namespace selectors are
/// evaluated against no labels, as upstream's hint does.
fn selected_by_all(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    let no_labels = BTreeMap::new();
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, Some(&no_labels)))
}

/// Whether any term selects `pod` (1.37's hint for anti-affinity: one matching term is enough
/// to keep the pod out, so one that stops matching may let it in).
fn selected_by_any(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    let no_labels = BTreeMap::new();
    terms.iter().any(|t| t.matches(pod, Some(&no_labels)))
}

fn info(pod: &EventObject) -> PodInfo {
    match pod.shared_pod() {
        Some(p) => PodInfo::new(p.clone()),
        None => PodInfo::new(Arc::new(Pod::default())),
    }
}

fn after_pod_change(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let (old_obj, new_obj) = (old, new);
    let (old, new) = events::pods(old, new);
    if let (Some(_), Some(new)) = (old, new)
        && events::is_same_pod(pod, new)
    {
        return Hint::Queue;
    }
    if new.is_some_and(|p| !events::assigned_or_nominated(p))
        || old.is_some_and(|p| !events::assigned_or_nominated(p))
    {
        return Hint::Skip;
    }
    let (affinity, anti) = (
        &pod.terms().required_affinity,
        &pod.terms().required_anti_affinity,
    );
    match (old_obj, new_obj) {
        (Some(old), Some(new)) => {
            let (old, new) = (info(old), info(new));
            events::queue_if(
                (!selected_by_all(affinity, &old) && selected_by_all(affinity, &new))
                    || (selected_by_any(anti, &old) && !selected_by_any(anti, &new)),
            )
        }
        (None, Some(added)) => events::queue_if(selected_by_all(affinity, &info(added))),
        (Some(deleted), None) => {
            let deleted = info(deleted);
            events::queue_if(
                selected_by_any(anti, &deleted)
                    || selected_by_any(&deleted.terms().required_anti_affinity, pod),
            )
        }
        (None, None) => Hint::Queue,
    }
}

fn after_node_change(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let (old, new) = events::nodes(old, new);
    let Some(new) = new else { return Hint::Queue };
    let labels =
        |n: &k8s_openapi::api::core::v1::Node| n.metadata.labels.clone().unwrap_or_default();
    let after = labels(new);
    let before = old.map(labels);
    let changed = |key: &str| {
        before.as_ref().is_some_and(|b| {
            b.contains_key(key) && after.contains_key(key) && b.get(key) != after.get(key)
        })
    };
    for term in &pod.terms().required_affinity {
        let key = term.topology_key.as_str();
        let gained = match &before {
            None => after.contains_key(key),
            Some(b) => !b.contains_key(key) && after.contains_key(key),
        };
        if gained || changed(key) {
            return Hint::Queue;
        }
    }
    for term in &pod.terms().required_anti_affinity {
        let key = term.topology_key.as_str();
        let lost = match &before {
            None => true,
            Some(b) => b.contains_key(key) && !after.contains_key(key),
        };
        if lost || changed(key) {
            return Hint::Queue;
        }
    }
    Hint::Skip
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::PodBuilder;
    use k8s_openapi::api::core::v1::{Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn term(app: &str) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), app.to_string())].into()),
                ..Default::default()
            }),
            topology_key: "zone".into(),
            ..Default::default()
        }
    }

    fn bound(app: &str) -> EventObject {
        EventObject::Pod(Arc::new(
            PodBuilder::new("q")
                .label("app", app)
                .node_name("n1")
                .build(),
        ))
    }

    #[test]
    fn a_bound_pod_its_affinity_selects_helps_and_others_do_not() {
        let pod = PodBuilder::new("p")
            .affinity(Affinity {
                pod_affinity: Some(PodAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term("db")]),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .info();
        assert_eq!(
            after_pod_change(&pod, None, Some(&bound("db"))),
            Hint::Queue
        );
        assert_eq!(
            after_pod_change(&pod, None, Some(&bound("web"))),
            Hint::Skip
        );
        assert_eq!(
            after_pod_change(&pod, Some(&bound("web")), Some(&bound("db"))),
            Hint::Queue
        );
        let pending = EventObject::Pod(Arc::new(PodBuilder::new("q").label("app", "db").build()));
        assert_eq!(
            after_pod_change(&pod, None, Some(&pending)),
            Hint::Skip,
            "not placed yet"
        );
    }

    #[test]
    fn a_pod_its_anti_affinity_selected_helps_when_it_goes() {
        let pod = PodBuilder::new("p")
            .affinity(Affinity {
                pod_anti_affinity: Some(PodAntiAffinity {
                    required_during_scheduling_ignored_during_execution: Some(vec![term("db")]),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .info();
        assert_eq!(
            after_pod_change(&pod, Some(&bound("db")), None),
            Hint::Queue
        );
        assert_eq!(
            after_pod_change(&pod, Some(&bound("web")), None),
            Hint::Skip
        );
        assert_eq!(after_pod_change(&pod, None, Some(&bound("db"))), Hint::Skip);
    }
}

#[cfg(test)]
mod any_term {
    use super::*;
    use crate::scheduler::testing::PodBuilder;

    /// A pod kept out by two anti-affinity terms is retried when a pod matching only one of
    /// them leaves, as kube-scheduler 1.37 (1.36 wanted every term to match).
    #[test]
    fn a_pod_matching_one_anti_affinity_term_leaving_requeues() {
        let pending = PodBuilder::new("p")
            .with(|p| {
                p.spec.get_or_insert_with(Default::default).affinity =
                    serde_json::from_value(serde_json::json!({"podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [
                            {"labelSelector": {"matchLabels": {"app": "a"}},
                             "topologyKey": "kubernetes.io/hostname"},
                            {"labelSelector": {"matchLabels": {"app": "b"}},
                             "topologyKey": "kubernetes.io/hostname"}]}}))
                    .ok();
            })
            .info();
        let running = |labels: &str| {
            let mut pod = PodBuilder::new("other").label("app", labels).build();
            pod.spec.get_or_insert_with(Default::default).node_name = Some("n1".into());
            EventObject::Pod(Arc::new(pod))
        };
        assert_eq!(
            after_pod_change(&pending, Some(&running("a")), None),
            Hint::Queue
        );
        assert_eq!(
            after_pod_change(&pending, Some(&running("c")), None),
            Hint::Skip
        );
    }
}
