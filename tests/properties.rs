//! Hostile input, generated: the parsers and matchers that read what the API server hands tether
//! (quantities, label selectors, node affinity, taints and tolerations, StickyBinding status)
//! never panic on anything, and keep their invariants. `make unit` runs each with proptest's
//! default number of cases; `make fuzz` runs them for much longer. A failure proptest finds is
//! kept in `tests/properties.proptest-regressions` and replayed first from then on.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Taint, Toleration,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, Time,
};
use proptest::prelude::*;
use tether::api::StickyBindingStatus;
use tether::k8s::labels::Selector;
use tether::k8s::node_selector::{RequiredNodeAffinity, Terms};
use tether::k8s::pod::{Pod, PodSpec};
use tether::k8s::quantity::{parse_milli, parse_value};
use tether::k8s::taints::tolerates;
use tether::sticky::history::{RECENT_BINDS, count_bind};

/// Strings that look like what the API carries, and some that do not.
fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-z0-9]([-a-z0-9.]{0,20}[a-z0-9])?",
        "[a-z.]{1,10}/[a-z0-9-]{1,10}",
        ".{0,30}",
        Just(String::new()),
    ]
}

fn labels() -> impl Strategy<Value = BTreeMap<String, String>> {
    prop::collection::btree_map(word(), word(), 0..6)
}

fn operator() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("In".to_string()),
        Just("NotIn".to_string()),
        Just("Exists".to_string()),
        Just("DoesNotExist".to_string()),
        Just("Gt".to_string()),
        Just("Lt".to_string()),
        word(),
    ]
}

fn label_selector() -> impl Strategy<Value = LabelSelector> {
    let requirement = (
        word(),
        operator(),
        prop::option::of(prop::collection::vec(word(), 0..4)),
    )
        .prop_map(|(key, operator, values)| LabelSelectorRequirement {
            key,
            operator,
            values,
        });
    (
        prop::option::of(labels()),
        prop::option::of(prop::collection::vec(requirement, 0..4)),
    )
        .prop_map(|(match_labels, match_expressions)| LabelSelector {
            match_labels,
            match_expressions,
        })
}

fn node_requirement() -> impl Strategy<Value = NodeSelectorRequirement> {
    (
        word(),
        operator(),
        prop::option::of(prop::collection::vec(word(), 0..4)),
    )
        .prop_map(|(key, operator, values)| NodeSelectorRequirement {
            key,
            operator,
            values,
        })
}

fn node_selector() -> impl Strategy<Value = NodeSelector> {
    let term = (
        prop::option::of(prop::collection::vec(node_requirement(), 0..3)),
        prop::option::of(prop::collection::vec(node_requirement(), 0..2)),
    )
        .prop_map(|(match_expressions, match_fields)| NodeSelectorTerm {
            match_expressions,
            match_fields,
        });
    prop::collection::vec(term, 0..3).prop_map(|node_selector_terms| NodeSelector {
        node_selector_terms,
    })
}

fn effect() -> impl Strategy<Value = String> {
    prop_oneof![
        Just("NoSchedule".to_string()),
        Just("PreferNoSchedule".to_string()),
        Just("NoExecute".to_string()),
        word(),
    ]
}

/// A pod asking for `cpu` and `memory` (any quantity a pod may carry, up to the largest).
fn pod_asking(name: &str, cpu: &str, memory: &str) -> Pod {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "ns", "uid": name},
        "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": memory}}}]},
    }))
    .expect("a pod")
}

fn quantity() -> impl Strategy<Value = String> {
    prop_oneof![
        (0u64..100_000).prop_map(|n| format!("{n}m")),
        (0u64..1_000).prop_map(|n| format!("{n}Gi")),
        Just("8Ei".to_string()),
        Just("9223372036854775807".to_string()),
        (0u64..16).prop_map(|n| format!("{n}E")),
    ]
}

proptest! {
    /// A node's usage is never forgotten: adding then removing any pod, in any order, gives the
    /// node back exactly what it had (a pod of `8Ei` included, which saturating sums lost).
    #[test]
    fn adding_then_removing_any_pod_restores_the_node_exactly(
        kept in prop::collection::vec((quantity(), quantity()), 0..6),
        passing in prop::collection::vec((quantity(), quantity()), 1..6),
    ) {
        use std::sync::Arc;
        use tether::scheduler::framework::node_info::NodeInfo;
        use tether::scheduler::framework::pod_info::PodInfo;
        let info = |name: String, (cpu, mem): &(String, String)| {
            Arc::new(PodInfo::new(Arc::new(pod_asking(&name, cpu, mem))))
        };
        let mut node = NodeInfo::new("n1");
        for (i, q) in kept.iter().enumerate() {
            node.add_pod(info(format!("kept-{i}"), q));
        }
        let before = (node.requested.clone(), node.non_zero_requested.clone());
        for (i, q) in passing.iter().enumerate() {
            node.add_pod(info(format!("passing-{i}"), q));
        }
        for i in (0..passing.len()).rev() {
            let name = format!("passing-{i}");
            prop_assert!(node.remove_pod(&name), "{} was on the node", name);
        }
        prop_assert_eq!((node.requested.clone(), node.non_zero_requested.clone()), before);
    }

    /// A node's score stays within 0..=100 whatever its sums say: a score outside it fails every
    /// cycle that node is feasible in.
    #[test]
    fn resource_scores_stay_within_the_range(requested in any::<i64>(), capacity in any::<i64>()) {
        use tether::scheduler::plugins::noderesources::scoring::{least_requested_score, most_requested_score, utilization};
        for score in [
            least_requested_score(requested, capacity),
            most_requested_score(requested, capacity),
            utilization(requested, capacity),
        ] {
            prop_assert!((0..=100).contains(&score), "{score}");
        }
    }

    #[test]
    fn quantities_parse_or_fail_never_panic(s in ".{0,40}") {
        let _ = parse_milli(&s);
        let _ = parse_value(&s);
    }

    #[test]
    fn whole_quantities_read_back(n in 0i64..1_000_000_000, suffix in prop_oneof![Just(""), Just("k"), Just("Ki"), Just("M"), Just("Mi")]) {
        let scale: i64 = match suffix { "k" => 1000, "Ki" => 1024, "M" => 1_000_000, "Mi" => 1 << 20, _ => 1 };
        let text = format!("{n}{suffix}");
        prop_assert_eq!(parse_value(&text).ok(), n.checked_mul(scale));
        prop_assert_eq!(parse_milli(&format!("{n}m")).ok(), Some(n));
    }

    #[test]
    fn label_selectors_parse_or_fail_and_match_without_panicking(sel in label_selector(), l in labels()) {
        if let Ok(selector) = Selector::from_label_selector(Some(&sel)) {
            let _ = selector.matches(&l);
        }
    }

    #[test]
    fn match_labels_select_what_they_name(l in labels()) {
        let sel = LabelSelector { match_labels: Some(l.clone()), match_expressions: None };
        let selector = Selector::from_label_selector(Some(&sel));
        // Keys the API would refuse may be refused; anything accepted selects its own labels.
        if let Ok(selector) = selector {
            prop_assert!(selector.matches(&l));
        }
    }

    #[test]
    fn node_affinity_parses_or_fails_and_matches_without_panicking(
        ns in node_selector(), name in word(), l in labels(), node_selector in labels(),
    ) {
        if let Ok(terms) = Terms::parse(&ns) {
            let _ = terms.matches(&name, &l);
        }
        let lenient = Terms::lenient(&ns);
        // A term that parses alone matches alike among terms that do not.
        if Terms::parse(&ns).is_ok_and(|t| t.matches(&name, &l)) {
            prop_assert!(lenient.matches(&name, &l));
        }
        let _ = tether::k8s::node_selector::pinned_names(&ns);
        let pod = Pod {
            spec: Some(PodSpec {
                node_selector: Some(node_selector),
                affinity: Some(k8s_openapi::api::core::v1::Affinity {
                    node_affinity: Some(k8s_openapi::api::core::v1::NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(ns),
                        ..Default::default()
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        let required = RequiredNodeAffinity::from_pod(&pod);
        let _ = required.matches_labels(&name, &l);
        let _ = required.try_matches(&name, &l);
    }

    #[test]
    fn tolerations_match_taints_without_panicking(
        key in prop::option::of(word()), op in prop::option::of(operator()), value in prop::option::of(word()),
        tol_effect in prop::option::of(effect()), taint_key in word(), taint_value in prop::option::of(word()), taint_effect in effect(),
    ) {
        let toleration = Toleration { key, operator: op, value, effect: tol_effect, toleration_seconds: None };
        let taint = Taint { key: taint_key, value: taint_value, effect: taint_effect, time_added: None };
        let _ = tolerates(&toleration, &taint);
        let everything = Toleration { operator: Some("Exists".into()), ..Default::default() };
        prop_assert!(tolerates(&everything, &taint), "an empty Exists toleration tolerates every taint");
    }

    #[test]
    fn any_binding_status_is_read_and_counted_without_panicking(
        node_counts in prop::collection::btree_map(word(), any::<i64>(), 0..5),
        schedule_count in any::<i64>(),
        recent in prop::collection::vec(word(), 0..40),
        uid in word(), node in word(),
    ) {
        let raw = serde_json::json!({
            "nodeCount": node_counts,
            "scheduleCount": schedule_count,
            "recentBinds": recent.iter().map(|u| serde_json::json!({"podUID": u, "podName": "p", "node": "n", "time": "2026-01-01T00:00:00Z"})).collect::<Vec<_>>(),
        });
        let status: StickyBindingStatus = serde_json::from_value(raw).expect("any counts deserialize");
        let now = Time(jiff::Timestamp::UNIX_EPOCH);
        match count_bind(&status, &uid, "p", &node, now) {
            None => prop_assert!(status.recent_binds.iter().any(|b| b.pod_uid == uid)),
            Some(next) => {
                prop_assert!(next.schedule_count >= 1);
                prop_assert!(next.node_count[&node] >= 1);
                prop_assert!(next.recent_binds.len() <= RECENT_BINDS);
                prop_assert_eq!(next.latest.as_deref(), Some(node.as_str()));
            }
        }
    }
}
