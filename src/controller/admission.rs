//! A profile's `namespaceSelector`, in force through the API server's own admission: for each
//! Ready profile that sets it, a MutatingAdmissionPolicy (CEL, no webhook server to keep up)
//! and its binding, both named `tether-profile-<profile>`, that give pods created in the
//! selected namespaces without a scheduler of their own the profile's schedulerName. Kept in
//! step by the SchedulingProfile reconciler: [`desired`] says what should exist (pure),
//! [`sync`] makes the cluster hold that and returns what each profile's `NamespaceDefaulting`
//! condition says.

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::admissionregistration::v1::{
    ApplyConfiguration, MatchCondition, MatchResources, MutatingAdmissionPolicy,
    MutatingAdmissionPolicyBinding, MutatingAdmissionPolicyBindingSpec,
    MutatingAdmissionPolicySpec, Mutation, NamedRuleWithOperations,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, LabelSelectorRequirement, ObjectMeta, OwnerReference,
};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use crate::api::SchedulingProfile;

/// The label naming the profile an admission object belongs to.
pub const PROFILE_LABEL: &str = "tether.dev/profile";
/// The label by which a namespace opts in to a profile's defaulting: its value names the
/// profile. Only who may label the namespace (its owners: namespace labels are a cluster-scoped
/// write) can set it, so a profile's author alone reaches no namespace.
pub const OPT_IN_LABEL: &str = "tether.dev/scheduling-profile";
/// The label the API server puts on every namespace, its name as value.
const NAMESPACE_NAME: &str = "kubernetes.io/metadata.name";
/// The annotation holding what the object was written from, to tell a change without
/// comparing objects the API server has defaulted.
const APPLIED: &str = "tether.dev/applied";
/// The field manager of the admission objects.
const MANAGER: &str = "tether";

/// The name of the policy and the binding of `profile`.
pub fn object_name(profile: &str) -> String {
    format!("tether-profile-{profile}")
}

/// What a profile's `NamespaceDefaulting` condition says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Defaulting {
    /// The profile sets no namespaceSelector: no condition.
    Off,
    /// The policy and binding hold the current spec: their name, and the namespaces the
    /// selector matches that have not opted in (left alone).
    InForce(String, Vec<String>),
    /// Writing them failed (the API server's answer).
    Failed(String),
    /// The profile is not Ready: its objects are left as they were, and so is its condition.
    Unchanged,
}

/// The policy and binding `profile` should have, or `None` when it sets no namespaceSelector.
/// The binding matches a namespace only when the profile's selector matches it **and** the
/// namespace opted in ([`OPT_IN_LABEL`] naming the profile): whoever may write profiles cannot
/// move pods of a namespace that did not ask. Pods in `own_namespace` (tether's) and in any
/// `kube-*` namespace are never changed, opted in or not: tether's own pods must not wait for
/// tether, and the system's must not wait for a tenant's profile. Pure.
pub fn desired(
    profile: &SchedulingProfile,
    own_namespace: &str,
) -> Option<(MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding)> {
    let selector = opted_in(
        profile.spec.namespace_selector.clone()?,
        &profile.name_any(),
        own_namespace,
    );
    let name = object_name(&profile.name_any());
    let scheduler = &profile.spec.scheduler_name;
    let applied = serde_json::json!({
        "schedulerName": scheduler,
        "namespaceSelector": selector,
        "ownNamespace": own_namespace,
    })
    .to_string();
    let meta = ObjectMeta {
        name: Some(name.clone()),
        labels: Some(BTreeMap::from([
            (PROFILE_LABEL.to_string(), profile.name_any()),
            (
                "app.kubernetes.io/managed-by".to_string(),
                "tether".to_string(),
            ),
        ])),
        annotations: Some(BTreeMap::from([(APPLIED.to_string(), applied)])),
        // Deleted with the profile, even while tether is not running.
        owner_references: profile.meta().uid.clone().map(|uid| {
            vec![OwnerReference {
                api_version: SchedulingProfile::api_version(&()).into_owned(),
                kind: SchedulingProfile::kind(&()).into_owned(),
                name: profile.name_any(),
                uid,
                controller: Some(true),
                block_owner_deletion: None,
            }]
        }),
        ..ObjectMeta::default()
    };
    // CEL string literals: a schedulerName and a namespace are DNS names (no quotes or
    // backslashes), but they are escaped as JSON strings anyway, which CEL reads alike.
    let quoted = |s: &str| serde_json::Value::String(s.to_string()).to_string();
    let policy = MutatingAdmissionPolicy {
        metadata: meta.clone(),
        spec: Some(MutatingAdmissionPolicySpec {
            // A policy the API server cannot evaluate leaves the pod as written (it goes to
            // the default scheduler) rather than refusing it: workloads are never blocked by
            // tether's policy.
            failure_policy: Some("Ignore".into()),
            reinvocation_policy: Some("Never".into()),
            match_constraints: Some(MatchResources {
                resource_rules: Some(vec![NamedRuleWithOperations {
                    api_groups: Some(vec![String::new()]),
                    api_versions: Some(vec!["v1".into()]),
                    operations: Some(vec!["CREATE".into()]),
                    resources: Some(vec!["pods".into()]),
                    ..NamedRuleWithOperations::default()
                }]),
                ..MatchResources::default()
            }),
            match_conditions: Some(vec![
                MatchCondition {
                    name: "no-scheduler-of-its-own".into(),
                    expression: "!has(object.spec.schedulerName) || object.spec.schedulerName == \"default-scheduler\"".into(),
                },
                MatchCondition {
                    name: "not-bound-at-creation".into(),
                    expression: "!has(object.spec.nodeName) || object.spec.nodeName == \"\"".into(),
                },
                MatchCondition {
                    name: "not-tethers-own-namespace".into(),
                    expression: format!("request.namespace != {}", quoted(own_namespace)),
                },
                MatchCondition {
                    name: "not-a-system-namespace".into(),
                    expression: "!request.namespace.startsWith(\"kube-\")".into(),
                },
            ]),
            mutations: Some(vec![Mutation {
                patch_type: "ApplyConfiguration".into(),
                apply_configuration: Some(ApplyConfiguration {
                    expression: Some(format!(
                        "Object{{spec: Object.spec{{schedulerName: {}}}}}",
                        quoted(scheduler)
                    )),
                }),
                ..Mutation::default()
            }]),
            ..MutatingAdmissionPolicySpec::default()
        }),
    };
    let binding = MutatingAdmissionPolicyBinding {
        metadata: meta,
        spec: Some(MutatingAdmissionPolicyBindingSpec {
            policy_name: Some(name),
            match_resources: Some(MatchResources {
                namespace_selector: Some(selector),
                ..MatchResources::default()
            }),
            ..MutatingAdmissionPolicyBindingSpec::default()
        }),
    };
    Some((policy, binding))
}

/// `selector` narrowed to the namespaces that opted in to `profile` and are neither tether's
/// own nor the system's (`kube-system`, `kube-public`, `kube-node-lease`).
fn opted_in(mut selector: LabelSelector, profile: &str, own_namespace: &str) -> LabelSelector {
    let labels = selector.match_labels.get_or_insert_default();
    // A selector that asks for another value of the opt-in label matches nothing, as it says.
    if let Some(asked) = labels.get(OPT_IN_LABEL)
        && asked != profile
    {
        selector
            .match_expressions
            .get_or_insert_default()
            .push(LabelSelectorRequirement {
                key: OPT_IN_LABEL.into(),
                operator: "In".into(),
                values: Some(vec![profile.to_string()]),
            });
    } else {
        labels.insert(OPT_IN_LABEL.into(), profile.to_string());
    }
    selector
        .match_expressions
        .get_or_insert_default()
        .push(LabelSelectorRequirement {
            key: NAMESPACE_NAME.into(),
            operator: "NotIn".into(),
            values: Some(vec![
                own_namespace.to_string(),
                "kube-system".into(),
                "kube-public".into(),
                "kube-node-lease".into(),
            ]),
        });
    selector
}

/// The namespaces `profile`'s selector matches that have not opted in to it (at most a few
/// named, then a count), for its `NamespaceDefaulting` condition. Empty when it sets no
/// selector, or when the namespaces cannot be listed (the condition then says nothing of them).
pub async fn not_opted_in(client: &kube::Client, profile: &SchedulingProfile) -> Vec<String> {
    let Some(selector) = profile.spec.namespace_selector.clone() else {
        return Vec::new();
    };
    let Ok(selector) = kube::core::Selector::try_from(selector) else {
        return Vec::new();
    };
    let namespaces: Api<k8s_openapi::api::core::v1::Namespace> = Api::all(client.clone());
    let params = ListParams::default().labels_from(&selector);
    let Ok(list) = namespaces.list_metadata(&params).await else {
        return Vec::new();
    };
    let name = profile.name_any();
    list.items
        .iter()
        .filter(|ns| {
            ns.metadata
                .labels
                .as_ref()
                .and_then(|l| l.get(OPT_IN_LABEL))
                .is_none_or(|asked| *asked != name)
        })
        .filter_map(|ns| ns.metadata.name.clone())
        .collect()
}

/// Why the admission objects could not be brought in step.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("listing the MutatingAdmissionPolicies tether keeps: {0}")]
    List(#[source] kube::Error),
}

fn applied(meta: &ObjectMeta) -> Option<&str> {
    meta.annotations.as_ref()?.get(APPLIED).map(String::as_str)
}

/// The objects by name, with what each was written from.
fn current<'a>(metas: impl Iterator<Item = &'a ObjectMeta>) -> BTreeMap<String, Option<String>> {
    metas
        .filter_map(|m| Some((m.name.clone()?, applied(m).map(String::from))))
        .collect()
}

/// Makes the cluster hold the objects of the Ready profiles in `ready` (each with what
/// [`desired`] gave) and none of the profiles in neither `ready` nor `kept` (the profiles not
/// Ready keep theirs). Returns each Ready profile's condition. One failed write fails only its
/// profile's condition; a failed list fails the whole sync (nothing is known).
pub async fn sync(
    client: &kube::Client,
    ready: &BTreeMap<String, Option<(MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding)>>,
    kept: &BTreeSet<String>,
) -> Result<BTreeMap<String, Defaulting>, Error> {
    let policies: Api<MutatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<MutatingAdmissionPolicyBinding> = Api::all(client.clone());
    let ours = ListParams::default().labels(PROFILE_LABEL);
    let existing_policies = policies.list_metadata(&ours).await.map_err(Error::List)?;
    let existing_bindings = bindings.list_metadata(&ours).await.map_err(Error::List)?;
    let have_policies = current(existing_policies.items.iter().map(|o| &o.metadata));
    let have_bindings = current(existing_bindings.items.iter().map(|o| &o.metadata));

    let mut outcome = BTreeMap::new();
    let apply = PatchParams::apply(MANAGER).force();
    for (profile, objects) in ready {
        let Some((policy, binding)) = objects else {
            outcome.insert(profile.clone(), Defaulting::Off);
            continue;
        };
        let name = object_name(profile);
        let want = applied(&policy.metadata).map(String::from);
        let mut failure = None;
        if have_policies.get(&name) != Some(&want)
            && let Err(e) = policies.patch(&name, &apply, &Patch::Apply(policy)).await
        {
            failure = Some(format!("writing MutatingAdmissionPolicy {name}: {e}"));
        }
        if failure.is_none()
            && have_bindings.get(&name) != Some(&want)
            && let Err(e) = bindings.patch(&name, &apply, &Patch::Apply(binding)).await
        {
            failure = Some(format!(
                "writing MutatingAdmissionPolicyBinding {name}: {e}"
            ));
        }
        outcome.insert(
            profile.clone(),
            match failure {
                Some(why) => Defaulting::Failed(why),
                None => Defaulting::InForce(name, Vec::new()),
            },
        );
    }

    // What no Ready profile wants and no other profile keeps goes (a profile deleted while
    // tether was down is also collected by its owner reference).
    let wanted: BTreeSet<String> = ready
        .iter()
        .filter(|(_, o)| o.is_some())
        .map(|(p, _)| object_name(p))
        .chain(kept.iter().map(|p| object_name(p)))
        .collect();
    for name in have_bindings.keys().filter(|n| !wanted.contains(*n)) {
        if let Err(e) = bindings.delete(name, &DeleteParams::default()).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
        {
            tracing::warn!(binding = %name, error = %e, "could not delete a MutatingAdmissionPolicyBinding no profile wants");
        }
    }
    for name in have_policies.keys().filter(|n| !wanted.contains(*n)) {
        if let Err(e) = policies.delete(name, &DeleteParams::default()).await
            && !matches!(&e, kube::Error::Api(s) if s.code == 404)
        {
            tracing::warn!(policy = %name, error = %e, "could not delete a MutatingAdmissionPolicy no profile wants");
        }
    }
    Ok(outcome)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SchedulingProfileSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

    fn profile(selector: Option<LabelSelector>) -> SchedulingProfile {
        let mut p = SchedulingProfile::new(
            "batch",
            SchedulingProfileSpec {
                scheduler_name: "tether-batch".into(),
                percentage_of_nodes_to_score: 0,
                pod_initial_backoff_seconds: 1,
                pod_max_backoff_seconds: 10,
                plugins: None,
                plugin_config: Vec::new(),
                namespace_selector: selector,
            },
        );
        p.metadata.uid = Some("uid-batch".into());
        p
    }

    /// The policy mutates only pod creations without a scheduler or a node of their own,
    /// outside tether's namespace, to the profile's schedulerName; the binding carries the
    /// selector; both belong to the profile.
    #[test]
    fn a_selector_becomes_a_policy_and_a_binding_owned_by_the_profile() {
        assert!(desired(&profile(None), "tether-system").is_none());
        let selector = LabelSelector {
            match_labels: Some(BTreeMap::from([("team".into(), "batch".into())])),
            ..LabelSelector::default()
        };
        let (policy, binding) =
            desired(&profile(Some(selector.clone())), "tether-system").expect("objects");
        assert_eq!(
            policy.metadata.name.as_deref(),
            Some("tether-profile-batch")
        );
        let spec = policy.spec.expect("spec");
        let rules = spec
            .match_constraints
            .and_then(|m| m.resource_rules)
            .expect("rules");
        assert_eq!(
            rules[0].resources.as_deref(),
            Some(&["pods".to_string()][..])
        );
        assert_eq!(
            rules[0].operations.as_deref(),
            Some(&["CREATE".to_string()][..])
        );
        let conditions: Vec<String> = spec
            .match_conditions
            .expect("conditions")
            .into_iter()
            .map(|c| c.expression)
            .collect();
        assert!(conditions.iter().any(|c| c.contains("default-scheduler")));
        assert!(conditions.iter().any(|c| c.contains("nodeName")));
        assert!(conditions.iter().any(|c| c.contains("\"tether-system\"")));
        let mutation = spec.mutations.expect("mutations");
        assert_eq!(
            mutation[0]
                .apply_configuration
                .as_ref()
                .and_then(|a| a.expression.as_deref()),
            Some("Object{spec: Object.spec{schedulerName: \"tether-batch\"}}")
        );
        let binding_spec = binding.spec.expect("binding spec");
        assert_eq!(
            binding_spec.policy_name.as_deref(),
            Some("tether-profile-batch")
        );
        let narrowed = binding_spec
            .match_resources
            .and_then(|m| m.namespace_selector)
            .expect("a namespace selector");
        let labels = narrowed.match_labels.clone().expect("labels");
        assert_eq!(labels.get("team").map(String::as_str), Some("batch"));
        assert_eq!(
            labels.get(OPT_IN_LABEL).map(String::as_str),
            Some("batch"),
            "only namespaces that opted in to this profile"
        );
        let excluded = narrowed.match_expressions.expect("expressions");
        assert_eq!(excluded.len(), 1);
        assert_eq!(
            (excluded[0].key.as_str(), excluded[0].operator.as_str()),
            (NAMESPACE_NAME, "NotIn")
        );
        let values = excluded[0].values.clone().unwrap_or_default();
        for ns in [
            "tether-system",
            "kube-system",
            "kube-public",
            "kube-node-lease",
        ] {
            assert!(values.iter().any(|v| v == ns), "{ns} is never selected");
        }
        assert!(
            conditions
                .iter()
                .any(|c| c.contains("startsWith(\"kube-\")"))
        );
        let _ = selector;
        let owner = &binding.metadata.owner_references.expect("owner")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("SchedulingProfile", "uid-batch")
        );
        assert_eq!(
            policy
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(APPLIED)),
            binding
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(APPLIED)),
            "both are written from the same spec"
        );
    }
}
