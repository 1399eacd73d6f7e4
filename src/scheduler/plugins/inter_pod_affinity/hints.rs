//! InterPodAffinity's queueing hints: a pod appeared or was relabelled that the pod's required
//! affinity selects; a pod went that its required anti-affinity selected, or whose own
//! anti-affinity kept this pod away; a node got (or changed) a topology key its terms need.

use std::collections::BTreeMap;
use std::sync::Arc;

use crate::k8s::pod::Pod;
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
    use crate::k8s::pod::PodStatus;
    use crate::scheduler::testing::NodeBuilder;
    use crate::scheduler::testing::PodBuilder;
    use k8s_openapi::api::core::v1::{Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

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

    /// The values of upstream's `PodAffinityIn("service", ..)` selectors.
    const SERVICES: &[&str] = &["securityscan", "value2"];

    /// A selector with one expression, as upstream's `MakeLabelSelector().In(..)` / `.Exists(..)`.
    fn selector(key: &str, operator: &str, values: &[&str]) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: operator.into(),
                values: (!values.is_empty())
                    .then(|| values.iter().map(|v| v.to_string()).collect()),
            }]),
            ..Default::default()
        }
    }

    /// Upstream's `st.MakePod()` inter-pod affinity helpers: each call appends one required term
    /// (`PodAffinityWithRequiredReq` / `PodAntiAffinityWithRequiredReq`).
    trait RequiredTerms: Sized {
        fn required_term(self, anti: bool, topology_key: &str, selector: LabelSelector) -> Self;

        fn affinity_in(self, key: &str, topology_key: &str, values: &[&str]) -> Self {
            self.required_term(false, topology_key, selector(key, "In", values))
        }

        fn affinity_exists(self, key: &str, topology_key: &str) -> Self {
            self.required_term(false, topology_key, selector(key, "Exists", &[]))
        }

        fn anti_affinity_in(self, key: &str, topology_key: &str, values: &[&str]) -> Self {
            self.required_term(true, topology_key, selector(key, "In", values))
        }
    }

    impl RequiredTerms for PodBuilder {
        fn required_term(self, anti: bool, topology_key: &str, selector: LabelSelector) -> Self {
            let term = PodAffinityTerm {
                label_selector: Some(selector),
                topology_key: topology_key.into(),
                ..Default::default()
            };
            self.with(|p| {
                let affinity = p
                    .spec
                    .get_or_insert_with(Default::default)
                    .affinity
                    .get_or_insert_with(Default::default);
                let terms = if anti {
                    affinity
                        .pod_anti_affinity
                        .get_or_insert_with(Default::default)
                        .required_during_scheduling_ignored_during_execution
                        .get_or_insert_with(Vec::new)
                } else {
                    affinity
                        .pod_affinity
                        .get_or_insert_with(Default::default)
                        .required_during_scheduling_ignored_during_execution
                        .get_or_insert_with(Vec::new)
                };
                terms.push(term);
            })
        }
    }

    /// Upstream's target pod `st.MakePod().UID("p").Name("p")`.
    fn target() -> PodBuilder {
        PodBuilder::new("p").uid("p")
    }

    /// Upstream's `st.MakePod().UID("other")`: not placed.
    fn other() -> PodBuilder {
        PodBuilder::new("other").uid("other")
    }

    /// Upstream's `st.MakePod().UID("other").Node("fake-node")`.
    fn other_on_fake_node() -> PodBuilder {
        other().node_name("fake-node")
    }

    /// Upstream's `.NominatedNodeName("fake-node")`.
    fn nominated(pod: PodBuilder) -> PodBuilder {
        pod.with(|p| {
            p.status = Some(PodStatus {
                nominated_node_name: Some("fake-node".into()),
                ..Default::default()
            });
        })
    }

    fn pod_event(pod: Option<PodBuilder>) -> Option<EventObject> {
        pod.map(|p| EventObject::Pod(Arc::new(p.build())))
    }

    /// Upstream `Test_isSchedulableAfterAssignedPodChange` (interpodaffinity/plugin_test.go),
    /// every row: (name, target pod, old pod, new pod, hint).
    #[test]
    fn upstream_is_schedulable_after_assigned_pod_change() {
        let affinity = || target().affinity_in("service", "region", SERVICES);
        let anti = || target().anti_affinity_in("service", "region", SERVICES);
        let two_affinity_terms = || {
            target()
                .affinity_exists("aaa", "hostname")
                .affinity_exists("bbb", "hostname")
        };
        let two_anti_terms = || {
            target()
                .anti_affinity_in("service", "region", &["securityscan"])
                .anti_affinity_in("app", "region", &["web"])
        };
        let rows = [
            (
                "add a pod which matches the pod affinity",
                affinity(),
                None,
                Some(other_on_fake_node().label("service", "securityscan")),
                Hint::Queue,
            ),
            (
                "add an un-scheduled pod",
                affinity(),
                None,
                Some(other().label("service", "securityscan")),
                Hint::Skip,
            ),
            (
                "add a pod which doesn't match the pod affinity",
                affinity(),
                None,
                Some(other_on_fake_node().label("aaa", "a")),
                Hint::Skip,
            ),
            (
                "update a pod from non-match to match pod affinity",
                affinity(),
                Some(other_on_fake_node().label("aaa", "a")),
                Some(other_on_fake_node().label("service", "securityscan")),
                Hint::Queue,
            ),
            (
                "the updating pod matches target pod's affinity both before and after label changes",
                affinity(),
                Some(other_on_fake_node().label("service", "value2")),
                Some(other_on_fake_node().label("service", "securityscan")),
                Hint::Skip,
            ),
            (
                "update an un-scheduled pod",
                affinity(),
                Some(other().label("aaa", "a")),
                Some(other().label("service", "securityscan")),
                Hint::Skip,
            ),
            (
                "update a pod from match to non-match the pod affinity",
                affinity(),
                Some(other_on_fake_node().label("service", "securityscan")),
                Some(other_on_fake_node().label("aaa", "a")),
                Hint::Skip,
            ),
            (
                "update a pod from match to non-match pod's affinity - multiple terms case",
                two_affinity_terms(),
                Some(other_on_fake_node().label("aaa", "a")),
                Some(other_on_fake_node().label("service", "securityscan")),
                Hint::Skip,
            ),
            (
                "update a pod from non-match to match pod's affinity - multiple terms case",
                two_affinity_terms(),
                Some(other_on_fake_node().label("aaa", "a")),
                Some(other_on_fake_node().label("aaa", "").label("bbb", "")),
                Hint::Queue,
            ),
            (
                "modify pod label to change it from satisfying pod anti-affinity to not satisfying anti-affinity",
                anti(),
                Some(other_on_fake_node().label("service", "securityscan")),
                Some(other_on_fake_node().label("service", "aaaa")),
                Hint::Queue,
            ),
            (
                "modify pod label to change it from not satisfying pod anti-affinity to satisfying anti-affinity",
                anti(),
                Some(other_on_fake_node().label("service", "bbb")),
                Some(other_on_fake_node().label("service", "securityscan")),
                Hint::Skip,
            ),
            (
                "delete a pod which doesn't match pod's anti-affinity",
                anti(),
                Some(other_on_fake_node().label("aaa", "a")),
                None,
                Hint::Skip,
            ),
            (
                "delete a pod which matches pod's anti-affinity",
                anti(),
                Some(other_on_fake_node().label("service", "securityscan")),
                None,
                Hint::Queue,
            ),
            (
                "delete a pod with anti-affinity that matches pending pod",
                PodBuilder::new("p").label("service", "securityscan"),
                Some(
                    PodBuilder::new("deleted")
                        .node_name("fake-node")
                        .anti_affinity_in("service", "region", SERVICES),
                ),
                None,
                Hint::Queue,
            ),
            (
                "delete a pod with anti-affinity that doesn't match pending pod",
                PodBuilder::new("p").label("service", "foo"),
                Some(
                    PodBuilder::new("deleted")
                        .node_name("fake-node")
                        .anti_affinity_in("service", "region", SERVICES),
                ),
                None,
                Hint::Skip,
            ),
            (
                "delete a pod which doesn't match pending pod's anti-affinity and has anti-affinity that doesn't match pending pod",
                PodBuilder::new("p")
                    .anti_affinity_in("service", "region", SERVICES)
                    .label("service", "foo"),
                Some(
                    PodBuilder::new("deleted")
                        .node_name("fake-node")
                        .anti_affinity_in("service", "region", SERVICES)
                        .label("service", "foo"),
                ),
                None,
                Hint::Skip,
            ),
            (
                "delete a nominated pod which doesn't match pod's anti-affinity",
                PodBuilder::new("p").anti_affinity_in("service", "region", SERVICES),
                Some(nominated(PodBuilder::new("deleted").label("aaa", "a"))),
                None,
                Hint::Skip,
            ),
            (
                "delete a nominated pod which matches pod's anti-affinity",
                PodBuilder::new("p").anti_affinity_in("service", "region", SERVICES),
                Some(nominated(
                    PodBuilder::new("deleted").label("service", "securityscan"),
                )),
                None,
                Hint::Queue,
            ),
            (
                "modify pod label to change it from matching only one of target pod's anti-affinity terms to matching none",
                two_anti_terms(),
                Some(
                    other_on_fake_node()
                        .label("service", "securityscan")
                        .label("app", "bar"),
                ),
                Some(
                    other_on_fake_node()
                        .label("service", "foo")
                        .label("app", "bar"),
                ),
                Hint::Queue,
            ),
            (
                "modify pod label but it still matches one of target pod's anti-affinity terms",
                two_anti_terms(),
                Some(
                    other_on_fake_node()
                        .label("service", "securityscan")
                        .label("app", "bar"),
                ),
                Some(
                    other_on_fake_node()
                        .label("service", "foo")
                        .label("app", "web"),
                ),
                Hint::Skip,
            ),
            (
                "delete a pod which matches only one of target pod's anti-affinity terms",
                two_anti_terms(),
                Some(other_on_fake_node().label("service", "securityscan")),
                None,
                Hint::Queue,
            ),
            (
                "delete a pod with anti-affinity that matches pending pod on only one term",
                PodBuilder::new("p").label("service", "securityscan"),
                Some(
                    other_on_fake_node()
                        .anti_affinity_in("service", "region", &["securityscan"])
                        .anti_affinity_in("app", "region", &["web"]),
                ),
                None,
                Hint::Queue,
            ),
        ];
        assert_eq!(rows.len(), 22, "every upstream row");
        for (name, pod, old, new, want) in rows {
            let (old, new) = (pod_event(old), pod_event(new));
            assert_eq!(
                after_pod_change(&pod.info(), old.as_ref(), new.as_ref()),
                want,
                "{name}"
            );
        }
    }

    /// Upstream `Test_isSchedulableAfterTargetPodUpdateLabel`: the pending pod's own label
    /// update requeues it (tether folds that hint into `after_pod_change`, by uid).
    #[test]
    fn upstream_is_schedulable_after_target_pod_update_label() {
        let pod = target().label("foo", "baz");
        let old = EventObject::Pod(Arc::new(pod.clone().build()));
        let new = EventObject::Pod(Arc::new(pod.clone().build()));
        assert_eq!(
            after_pod_change(&pod.info(), Some(&old), Some(&new)),
            Hint::Queue
        );
    }

    /// Upstream `Test_isSchedulableAfterNodeChange` (interpodaffinity/plugin_test.go), every
    /// row: (name, pending pod, old node, new node, hint). tether's `NodeBuilder` also labels
    /// each node `kubernetes.io/hostname`, which no term here keys on.
    #[test]
    fn upstream_is_schedulable_after_node_change() {
        let affinity = |topology_key: &str| {
            PodBuilder::new("p").affinity_in("service", topology_key, SERVICES)
        };
        let anti = || {
            PodBuilder::new("p").required_term(
                true,
                "zone",
                LabelSelector {
                    match_labels: Some([("another".to_string(), "label".to_string())].into()),
                    ..Default::default()
                },
            )
        };
        let node = || NodeBuilder::new("node-a");
        let rows = [
            // affinity
            (
                "add a new node with matched pod affinity topologyKey",
                affinity("zone"),
                None,
                node().label("zone", "zone1"),
                Hint::Queue,
            ),
            (
                "add a new node without matched topologyKey",
                affinity("region"),
                None,
                node().label("zone", "zone1"),
                Hint::Skip,
            ),
            (
                "update node label but not topologyKey",
                affinity("zone"),
                Some(node().label("aaa", "a")),
                node().label("aaa", "b"),
                Hint::Skip,
            ),
            (
                "update node label that isn't related to the pod affinity",
                affinity("zone"),
                Some(node().label("zone", "zone1")),
                node()
                    .label("zone", "zone1")
                    .label("unrelated-label", "unrelated"),
                Hint::Skip,
            ),
            (
                "update node with different affinity topologyKey value",
                affinity("zone"),
                Some(node().label("zone", "zone1")),
                node().label("zone", "zone2"),
                Hint::Queue,
            ),
            (
                "update node to have the affinity topology label",
                affinity("zone"),
                Some(node().label("aaa", "a")),
                node().label("zone", "zone1"),
                Hint::Queue,
            ),
            // anti-affinity
            (
                "add a new node with matched pod anti-affinity topologyKey",
                anti(),
                None,
                node().label("zone", "zone1"),
                Hint::Queue,
            ),
            (
                "add a new node without matched pod anti-affinity topologyKey",
                anti(),
                None,
                node(),
                Hint::Queue,
            ),
            (
                "update node label that isn't related to the pod anti-affinity",
                anti(),
                Some(node().label("zone", "zone1")),
                node()
                    .label("zone", "zone1")
                    .label("unrelated-label", "unrelated"),
                Hint::Skip,
            ),
            (
                "update node with different anti-affinity topologyKey value",
                anti(),
                Some(node().label("zone", "zone1")),
                node().label("zone", "zone2"),
                Hint::Queue,
            ),
            (
                "update node to have the anti-affinity topology label",
                anti(),
                Some(node().label("aaa", "a")),
                node().label("zone", "zone1"),
                Hint::Skip,
            ),
            (
                "update node label not to have anti-affinity topology label",
                anti(),
                Some(node().label("zone", "zone1")),
                node().label("aaa", "a"),
                Hint::Queue,
            ),
        ];
        assert_eq!(rows.len(), 12, "every upstream row");
        for (name, pod, old, new, want) in rows {
            let old = old.map(|n| EventObject::Node(Arc::new(n.build())));
            let new = EventObject::Node(Arc::new(new.build()));
            assert_eq!(
                after_node_change(&pod.info(), old.as_ref(), Some(&new)),
                want,
                "{name}"
            );
        }
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
