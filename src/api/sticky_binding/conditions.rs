//! The rules that judge a StickyBinding's conditions, pure, on the API type: `NodeAvailable`
//! (the pinned node exists and is Ready), `HistoryConsistent` (the counts agree with each other),
//! and kstatus's `Stalled` and `Reconciling`. The StickyBinding controller and the history
//! writer both build a binding's conditions here, so the writer's status writes carry them and
//! the controller has nothing left to write.

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{Resource, ResourceExt};

use super::{
    CONDITION_HISTORY_CONSISTENT, CONDITION_NODE_AVAILABLE, CONDITION_RECONCILING,
    CONDITION_STALLED, REASON_CONSISTENT, REASON_NODE_NOT_FOUND, REASON_NODE_NOT_READY,
    REASON_NODE_READY, REASON_ODD_VALUES, REASON_WORKLOAD_MISMATCH, StickyBinding,
    StickyBindingStatus,
};
use crate::api::conditions::set_condition;

/// (available, reason, message) for the pinned node. Pure.
pub fn node_availability(pin: &str, node: Option<&Node>) -> ConditionValue {
    let Some(node) = node else {
        return (
            false,
            REASON_NODE_NOT_FOUND,
            format!("node {pin} does not exist"),
        );
    };
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    match ready {
        Some("True") => (true, REASON_NODE_READY, String::new()),
        _ => (
            false,
            REASON_NODE_NOT_READY,
            format!("node {pin} is not Ready"),
        ),
    }
}

/// One condition to write: (status, reason, message).
pub type ConditionValue = (bool, &'static str, String);

/// kstatus's `Stalled` and `Reconciling` for a binding whose pin has `availability` (None when
/// nothing pins it). A pin to a node that does not exist stalls the workload until a person
/// moves or frees it: the message names the field that pins it. A node that exists but is not
/// Ready is waited for. Pure.
pub fn kstatus_conditions(
    binding: &StickyBinding,
    availability: Option<&ConditionValue>,
) -> [(&'static str, ConditionValue); 2] {
    let field = if binding
        .spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty())
    {
        "spec.nodeName"
    } else {
        "status.latest"
    };
    // A binding is found by its name, which its workload gives: under another name it is
    // never read or written, and says so.
    let expected = binding.spec.workload_ref.binding_name();
    if binding.metadata.name.as_deref() != Some(expected.as_str()) {
        let r = &binding.spec.workload_ref;
        let ordinal = r
            .ordinal
            .map(|o| format!(" ordinal {o}"))
            .unwrap_or_default();
        return [
            (
                CONDITION_STALLED,
                (
                    true,
                    REASON_WORKLOAD_MISMATCH,
                    format!(
                        "metadata.name: spec.workloadRef names {} {} {}{ordinal}, whose binding is named {expected}; tether neither reads nor writes this one (delete it, or create it as {expected})",
                        r.api_version, r.kind, r.name
                    ),
                ),
            ),
            (CONDITION_RECONCILING, (false, "Stalled", String::new())),
        ];
    }
    let (stalled, reconciling) = match availability {
        Some((false, reason, message)) if *reason == REASON_NODE_NOT_FOUND => (
            (
                true,
                *reason,
                format!(
                    "{field}: {message}; move the workload (set spec.nodeName) or free it (delete this StickyBinding)"
                ),
            ),
            (false, "Stalled", String::new()),
        ),
        Some((false, reason, message)) => (
            (false, "Waiting", String::new()),
            (
                true,
                *reason,
                format!("{field}: {message}; the workload waits for it"),
            ),
        ),
        _ => (
            (false, "Serving", String::new()),
            (false, "Reconciled", String::new()),
        ),
    };
    [
        (CONDITION_STALLED, stalled),
        (CONDITION_RECONCILING, reconciling),
    ]
}

/// The `HistoryConsistent` condition for a status: (consistent, reason, message). Pure.
pub fn history_consistency(status: &StickyBindingStatus) -> (bool, &'static str, String) {
    let odd = status.oddities();
    if odd.is_empty() {
        (true, REASON_CONSISTENT, String::new())
    } else {
        let message = format!(
            "{}; tether keeps counting from the values as written",
            odd.join("; ")
        );
        (false, REASON_ODD_VALUES, message)
    }
}

/// The conditions a binding should carry, computed from the binding as it is and its pinned
/// node's availability.
pub struct Desired {
    pub conditions: Vec<Condition>,
    /// Whether they (or `observedGeneration`) differ from what the binding carries.
    pub changed: bool,
    /// What does not add up in its history, when the binding does not say so yet.
    pub new_oddity: Option<String>,
}

/// The conditions of `binding` given `availability`, its pinned node's (None when nothing
/// pins it): `NodeAvailable` when it is pinned, `HistoryConsistent` once it has a history, and
/// kstatus's `Stalled` and `Reconciling`, each for the binding's generation. Pure: the
/// controller and the history writer both build a binding's conditions with it, so that the
/// writer's status writes carry them and the controller has nothing left to write.
pub fn desired_conditions(
    binding: &StickyBinding,
    availability: Option<&ConditionValue>,
) -> Desired {
    let status = binding.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.clone();
    let generation = binding.meta().generation;
    let mut changed = status.observed_generation != generation;
    if let Some((available, reason, message)) = availability {
        changed |= set_condition(
            &mut conditions,
            CONDITION_NODE_AVAILABLE,
            *available,
            reason,
            message,
            generation,
        );
    }
    for (type_, (status, reason, message)) in kstatus_conditions(binding, availability) {
        changed |= set_condition(&mut conditions, type_, status, reason, &message, generation);
    }
    let mut new_oddity = None;
    if binding.status.is_some() {
        let (consistent, reason, message) = history_consistency(&status);
        if !consistent
            && !conditions
                .iter()
                .any(|c| c.type_ == CONDITION_HISTORY_CONSISTENT && c.message == message)
        {
            new_oddity = Some(message.clone());
        }
        changed |= set_condition(
            &mut conditions,
            CONDITION_HISTORY_CONSISTENT,
            consistent,
            reason,
            &message,
            generation,
        );
    }
    Desired {
        conditions,
        changed,
        new_oddity,
    }
}

/// Logs, once per new finding, that a binding's history does not add up (`odd` says how).
pub fn warn_oddity(binding: &StickyBinding, odd: &str) {
    tracing::warn!(binding = %format!("{}/{}", binding.namespace().unwrap_or_default(), binding.name_any()), odd = %odd, "a StickyBinding's history does not add up");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn availability_follows_the_node() {
        assert_eq!(node_availability("n1", None).1, "NodeNotFound");
        let ready: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})).expect("node");
        assert!(node_availability("n1", Some(&ready)).0);
        let not_ready: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})).expect("node");
        assert_eq!(node_availability("n1", Some(&not_ready)).1, "NodeNotReady");
    }

    fn status(latest: Option<&str>, counts: &[(&str, i64)], total: i64) -> StickyBindingStatus {
        StickyBindingStatus {
            latest: latest.map(Into::into),
            node_count: counts.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            schedule_count: total,
            ..Default::default()
        }
    }

    #[test]
    fn odd_histories_are_named_and_consistent_ones_are_not() {
        let (ok, reason, _) = history_consistency(&status(Some("a"), &[("a", 2), ("b", 1)], 3));
        assert!(ok && reason == "Consistent");
        assert!(
            history_consistency(&StickyBindingStatus::default()).0,
            "empty"
        );
        let cases = [
            (
                status(Some("a"), &[("a", 2)], 5),
                "scheduleCount 5 is not the sum of nodeCount (2)",
            ),
            (status(None, &[("a", 2)], 2), "latest names no node"),
            (
                status(Some("gone"), &[("a", 2)], 2),
                "latest node gone has no nodeCount",
            ),
        ];
        for (odd, says) in cases {
            let (ok, reason, message) = history_consistency(&odd);
            assert!(!ok && reason == "OddValues", "{odd:?}");
            assert!(message.contains(says), "{message}");
            assert!(message.ends_with("tether keeps counting from the values as written"));
        }
        let mut listed = status(Some("a"), &[("a", 1)], 1);
        listed.counted_pods = vec!["u1".into(), "u2".into()];
        assert!(
            history_consistency(&listed)
                .2
                .contains("countedPods lists 2 pods")
        );
        // The largest counts do not overflow the sum: counts saturate, and so does their sum.
        let huge = status(Some("a"), &[("a", i64::MAX), ("b", i64::MAX)], i64::MAX);
        assert!(history_consistency(&huge).0);
    }

    /// A binding under a name its workloadRef does not give (made by hand, or by an older
    /// tether for a workload of another group) is Stalled, naming the name it should have.
    #[test]
    fn a_binding_under_another_workloads_name_is_stalled() {
        use crate::api::sticky_binding::{StickyBindingSpec, WorkloadRef};
        let binding = StickyBinding::new(
            "statefulset-db-0",
            StickyBindingSpec {
                workload_ref: WorkloadRef {
                    api_version: "apps.kruise.io/v1beta1".into(),
                    kind: "StatefulSet".into(),
                    name: "db".into(),
                    ordinal: Some(0),
                },
                node_name: None,
            },
        );
        let [(_, stalled), (_, reconciling)] = kstatus_conditions(&binding, None);
        assert!(
            stalled.0 && stalled.1 == REASON_WORKLOAD_MISMATCH,
            "{stalled:?}"
        );
        assert!(
            stalled.2.starts_with("metadata.name: ")
                && stalled.2.contains("statefulset.apps.kruise.io-db-0"),
            "{}",
            stalled.2
        );
        assert!(!reconciling.0);
    }

    #[test]
    fn gitops_tools_read_a_lost_pin_as_failed_and_a_node_not_ready_as_in_progress() {
        use crate::api::sticky_binding::{StickyBindingSpec, WorkloadRef};
        let binding = |pinned: Option<&str>| {
            let mut b = StickyBinding::new(
                "deployment-web",
                StickyBindingSpec {
                    workload_ref: WorkloadRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        name: "web".into(),
                        ordinal: None,
                    },
                    node_name: pinned.map(Into::into),
                },
            );
            b.status = Some(status(Some("n1"), &[("n1", 1)], 1));
            b
        };
        let by_type = |b: &StickyBinding, availability: Option<ConditionValue>| {
            kstatus_conditions(b, availability.as_ref())
                .map(|(type_, (on, reason, message))| (type_, on, reason, message))
        };

        let [stalled, reconciling] =
            by_type(&binding(Some("n9")), Some(node_availability("n9", None)));
        assert_eq!(
            (stalled.0, stalled.1, stalled.2),
            ("Stalled", true, "NodeNotFound")
        );
        assert!(
            stalled
                .3
                .starts_with("spec.nodeName: node n9 does not exist"),
            "{}",
            stalled.3
        );
        assert!(!reconciling.1);

        let not_ready = (
            false,
            REASON_NODE_NOT_READY,
            "node n1 is not Ready".to_string(),
        );
        let [stalled, reconciling] = by_type(&binding(None), Some(not_ready));
        assert!(!stalled.1);
        assert_eq!(
            (reconciling.0, reconciling.1, reconciling.2),
            ("Reconciling", true, "NodeNotReady")
        );
        assert!(
            reconciling
                .3
                .starts_with("status.latest: node n1 is not Ready"),
            "{}",
            reconciling.3
        );

        for availability in [None, Some((true, REASON_NODE_READY, String::new()))] {
            let [stalled, reconciling] = by_type(&binding(None), availability);
            assert!(!stalled.1 && !reconciling.1, "served: Current");
        }
    }
}
