//! An ExplainRequest's answer: whether the admission policy behind it is in force, the
//! explanation or pending summary for its requester, cut to fit a status.

use std::sync::Arc;

use axum::http::StatusCode;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    MatchResources, ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
    ValidatingAdmissionPolicySpec,
};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use kube::api::Api;

use super::book::Question;
use crate::api::{ExplainRequestStatus, Refusal};
use crate::endpoints::auth::AuthCache;
use crate::scheduler::Scheduler;
use crate::scheduler::explain::Explanation;
use crate::scheduler::explain::pending::PendingSummary;

/// The largest answer written into a status: past it, node entries (or groups) are left out.
pub const MAX_ANSWER_BYTES: usize = 256 * 1024;

/// The policy and its binding as deploy/ ships them (the chart renders the same, named after
/// the release).
const SHIPPED: &str = include_str!("../../../deploy/explainrequests.yaml");

/// The shipped policy's spec.
fn shipped_policy() -> Result<ValidatingAdmissionPolicySpec, String> {
    let docs: Vec<serde_json::Value> =
        serde_saphyr::from_str_multiple(SHIPPED).map_err(|e| format!("the shipped policy: {e}"))?;
    let policy = docs
        .into_iter()
        .find(|d| d["kind"] == "ValidatingAdmissionPolicy")
        .ok_or("the shipped policy holds no ValidatingAdmissionPolicy")?;
    let policy: ValidatingAdmissionPolicy =
        serde_json::from_value(policy).map_err(|e| format!("the shipped policy: {e}"))?;
    policy
        .spec
        .ok_or_else(|| "the shipped policy has no spec".to_string())
}

/// What of a policy's or a binding's match decides what it matches: its rules, whether it
/// excludes any, whether a selector narrows it (the API server's defaults, such as empty
/// selectors, left out).
fn match_shape(m: &MatchResources) -> serde_json::Value {
    let rules: Vec<_> = m
        .resource_rules
        .iter()
        .flatten()
        .map(|r| {
            (
                &r.api_groups,
                &r.api_versions,
                &r.operations,
                &r.resources,
                &r.resource_names,
            )
        })
        .collect();
    let selects = |s: &Option<LabelSelector>| {
        s.as_ref().is_some_and(|s| {
            s.match_labels.as_ref().is_some_and(|l| !l.is_empty())
                || s.match_expressions.as_ref().is_some_and(|e| !e.is_empty())
        })
    };
    serde_json::json!({
        "rules": rules,
        "excluded": m.exclude_resource_rules.as_ref().is_some_and(|e| !e.is_empty()),
        "selected": selects(&m.namespace_selector) || selects(&m.object_selector),
    })
}

/// What of a policy decides what it admits: its match, its validations, its conditions and
/// how it fails.
fn decisive(spec: &ValidatingAdmissionPolicySpec) -> serde_json::Value {
    let validations: Vec<_> = spec
        .validations
        .iter()
        .flatten()
        .map(|v| (&v.expression, &v.message, &v.message_expression, &v.reason))
        .collect();
    serde_json::json!({
        "rules": spec.match_constraints.as_ref().map(match_shape),
        "validations": validations,
        "conditions": spec.match_conditions.as_ref().is_some_and(|c| !c.is_empty()),
        "variables": spec.variables.as_ref().is_some_and(|v| !v.is_empty()),
        "params": spec.param_kind.is_some(),
        "failClosed": spec.failure_policy.as_deref().is_none_or(|p| p == "Fail"),
    })
}

/// Whether the policy `name` that makes `spec.requester` the request's creator, and lets only
/// a user who may `answer` ExplainRequests write answers, is in force as shipped: the same
/// rules and validations, failing closed, bound with `Deny` to every request. Without it
/// anybody could ask as anybody, or plant an answer, so tether answers nothing.
pub async fn policy_in_force(client: &kube::Client, name: &str) -> Result<(), String> {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let missing = |what: &str| {
        format!(
            "the ValidatingAdmissionPolicy{what} {name} is not installed (deploy/explainrequests.yaml, or the chart): without it a request could name anybody as its requester, so tether answers none"
        )
    };
    let binding = bindings
        .get_opt(name)
        .await
        .map_err(|e| format!("reading ValidatingAdmissionPolicyBinding {name}: {e}"))?
        .ok_or_else(|| missing("Binding"))?;
    let policy = policies
        .get_opt(name)
        .await
        .map_err(|e| format!("reading ValidatingAdmissionPolicy {name}: {e}"))?
        .ok_or_else(|| missing(""))?;
    let spec = binding.spec;
    // A binding without a match of its own, or one that matches as much as none.
    let binds_all = spec
        .match_resources
        .as_ref()
        .is_none_or(|m| match_shape(m) == match_shape(&MatchResources::default()));
    let as_shipped = policy
        .spec
        .as_ref()
        .is_some_and(|live| Ok(decisive(live)) == shipped_policy().map(|s| decisive(&s)));
    if spec.policy_name != name
        || spec.validation_actions != ["Deny"]
        || spec.param_ref.is_some()
        || !binds_all
        || !as_shipped
    {
        return Err(format!(
            "the ValidatingAdmissionPolicy {name} or its binding is not as shipped (it must check the requester and who answers, deny, bind every request and fail closed): tether answers no request until it is"
        ));
    }
    Ok(())
}

/// The status answering `question` for its requester.
pub async fn answer(
    client: &kube::Client,
    cache: &AuthCache,
    sched: &Arc<Scheduler>,
    policy: Result<(), String>,
    question: &Question,
) -> ExplainRequestStatus {
    if let Err(message) = policy {
        return refused(StatusCode::FORBIDDEN, message);
    }
    let requester = &question.spec.requester;
    let caller = UserInfo {
        username: Some(requester.username.clone()),
        groups: (!requester.groups.is_empty()).then(|| requester.groups.clone()),
        uid: requester.uid.clone(),
        extra: (!requester.extra.is_empty()).then(|| requester.extra.clone()),
    };
    let namespace = question.namespace.as_str();
    let sched = Some(sched.clone());
    match &question.spec.pod {
        Some(pod) => {
            match crate::endpoints::explain::explain_for(
                client, cache, sched, &caller, namespace, pod,
            )
            .await
            {
                Ok(mut explanation) => {
                    let summary = explanation_summary(&explanation);
                    match fit_explanation(&mut explanation) {
                        Some(value) => answered(summary, Some(value), None),
                        None => too_large("explanation"),
                    }
                }
                Err((code, message)) => refused(code, message),
            }
        }
        None => match crate::endpoints::pending::pending_for(
            client,
            cache,
            sched,
            &caller,
            Some(namespace.to_string()),
        )
        .await
        {
            Ok(mut summary) => {
                let line = format!(
                    "{} pods pending, {} blockers",
                    summary.pods,
                    summary.groups.len()
                );
                match fit_pending(&mut summary) {
                    Some(value) => answered(line, None, Some(value)),
                    None => too_large("pending summary"),
                }
            }
            Err((code, message)) => refused(code, message),
        },
    }
}

fn answered(
    summary: String,
    explanation: Option<serde_json::Value>,
    pending: Option<serde_json::Value>,
) -> ExplainRequestStatus {
    ExplainRequestStatus {
        answered_at: Some(Time(Timestamp::now())),
        summary: Some(summary),
        explanation,
        pending,
        ..Default::default()
    }
}

/// A refusal with its HTTP status.
pub fn refused(code: StatusCode, message: String) -> ExplainRequestStatus {
    ExplainRequestStatus {
        answered_at: Some(Time(Timestamp::now())),
        summary: Some(format!("refused ({}): {message}", code.as_u16())),
        refused: Some(Refusal {
            code: i32::from(code.as_u16()),
            message,
        }),
        ..Default::default()
    }
}

fn too_large(what: &str) -> ExplainRequestStatus {
    refused(
        StatusCode::PAYLOAD_TOO_LARGE,
        format!(
            "the {what} does not fit in {} KiB even cut short: ask with --token-file",
            MAX_ANSWER_BYTES / 1024
        ),
    )
}

/// The explanation in one line.
fn explanation_summary(e: &Explanation) -> String {
    if let Some(node) = &e.bound_to {
        return format!("bound to {node}");
    }
    if let Some(error) = &e.error {
        return format!("error: {error}");
    }
    if let Some(message) = &e.message {
        return format!("pending: {message}");
    }
    match &e.winner {
        Some(node) => format!("fits: the best node now is {node}"),
        None => "no verdict".to_string(),
    }
}

fn size(value: &impl serde::Serialize) -> usize {
    serde_json::to_vec(value).map_or(usize::MAX, |v| v.len())
}

/// `e` as JSON within [`MAX_ANSWER_BYTES`], leaving node entries out as needed (the passing
/// nodes' Filter verdicts, which the scores repeat, first, counted in `passingOmitted`; then
/// halving the scores and the rejected nodes, keeping the best and the first, counted in
/// `scoresOmitted` and `rejectedOmitted`); `None` when even the least does not fit.
pub fn fit_explanation(e: &mut Explanation) -> Option<serde_json::Value> {
    if size(e) > MAX_ANSWER_BYTES {
        let before = e.filters.len();
        e.filters.retain(|n| !n.feasible);
        e.passing_omitted = e.passing_omitted.saturating_add(before - e.filters.len());
    }
    while size(e) > MAX_ANSWER_BYTES {
        if e.scores.len() <= 10 && e.filters.len() <= 20 {
            return None;
        }
        let keep_scores = (e.scores.len() / 2).max(10).min(e.scores.len());
        let keep_filters = (e.filters.len() / 2).max(20).min(e.filters.len());
        e.scores_omitted = e
            .scores_omitted
            .saturating_add(e.scores.len() - keep_scores);
        e.rejected_omitted = e
            .rejected_omitted
            .saturating_add(e.filters.len() - keep_filters);
        e.scores.truncate(keep_scores);
        e.filters.truncate(keep_filters);
    }
    serde_json::to_value(&*e).ok()
}

/// `summary` as JSON within [`MAX_ANSWER_BYTES`], its smallest groups left out as needed
/// (counted in `groupsOmitted`); `None` when even one group does not fit.
pub fn fit_pending(summary: &mut PendingSummary) -> Option<serde_json::Value> {
    while size(summary) > MAX_ANSWER_BYTES {
        if summary.groups.len() <= 1 {
            return None;
        }
        let keep = summary.groups.len() / 2;
        summary.groups_omitted = summary
            .groups_omitted
            .saturating_add(summary.groups.len() - keep);
        summary.groups.truncate(keep);
    }
    serde_json::to_value(&*summary).ok()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::explain::{NodeFilters, NodeScores};

    /// An explanation over many nodes is cut to the budget, counting what it left out.
    #[test]
    fn a_large_explanation_is_cut_to_fit() {
        let mut e = Explanation {
            nodes: 20_000,
            ..Default::default()
        };
        for i in 0..20_000 {
            let node = format!("node-{i:05}-{}", "x".repeat(40));
            e.filters.push(NodeFilters {
                node: node.clone(),
                feasible: i % 2 == 0,
                ..Default::default()
            });
            if i % 2 == 0 {
                e.scores.push(NodeScores {
                    node,
                    ..Default::default()
                });
            }
        }
        let value = fit_explanation(&mut e).expect("fits");
        let len = serde_json::to_vec(&value).expect("json").len();
        assert!(len <= MAX_ANSWER_BYTES, "{len} bytes");
        assert_eq!(e.passing_omitted, 10_000);
        assert!(e.filters.iter().all(|n| !n.feasible));
        assert_eq!(
            e.filters.len() + e.rejected_omitted,
            10_000,
            "rejected: kept or counted"
        );
        assert_eq!(
            e.scores.len() + e.scores_omitted,
            10_000,
            "scores: kept or counted"
        );
        // The text says what was left out, and counts the nodes as they were.
        let text = crate::scheduler::explain::render::text_with(&e, &Default::default());
        assert!(
            text.contains(&format!("{} rejected nodes and", e.rejected_omitted)),
            "{text}"
        );
        assert!(text.contains("(10000 of 20000 nodes rejected"), "{text}");
    }

    #[test]
    fn a_large_pending_summary_keeps_its_largest_groups() {
        use crate::scheduler::explain::pending::PendingGroup;
        let mut summary = PendingSummary {
            namespace: Some("ns".into()),
            pods: 50_000,
            groups: (0..5_000)
                .map(|i| PendingGroup {
                    reason: format!("reason {i} {}", "y".repeat(100)),
                    pods: 10,
                    ..Default::default()
                })
                .collect(),
            groups_omitted: 0,
        };
        let first = summary.groups[0].reason.clone();
        let value = fit_pending(&mut summary).expect("fits");
        assert!(serde_json::to_vec(&value).expect("json").len() <= MAX_ANSWER_BYTES);
        assert_eq!(summary.groups.len() + summary.groups_omitted, 5_000);
        assert_eq!(summary.groups[0].reason, first, "the largest group first");
    }

    /// The policy as shipped is what tether checks for: deploy/'s file parses, and a policy
    /// with another expression, or narrowed, is not it.
    #[test]
    fn the_shipped_policy_is_recognized_and_a_changed_one_is_not() {
        let shipped = shipped_policy().expect("parses");
        assert_eq!(shipped.validations.as_ref().map(Vec::len), Some(2));
        let mut changed = shipped.clone();
        if let Some(v) = changed.validations.as_mut().and_then(|v| v.first_mut()) {
            v.expression = "true".into();
        }
        assert_ne!(decisive(&shipped), decisive(&changed));
        let mut narrowed = shipped.clone();
        if let Some(r) = narrowed
            .match_constraints
            .as_mut()
            .and_then(|m| m.resource_rules.as_mut())
            .and_then(|r| r.first_mut())
        {
            r.operations = Some(vec!["DELETE".into()]);
        }
        assert_ne!(decisive(&shipped), decisive(&narrowed));
    }
}
