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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};

use crate::api::SchedulingProfile;

/// The label naming the profile an admission object belongs to.
pub const PROFILE_LABEL: &str = "tether.dev/profile";
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
    /// The policy and binding hold the current spec.
    InForce(String),
    /// Writing them failed (the API server's answer).
    Failed(String),
    /// The profile is not Ready: its objects are left as they were, and so is its condition.
    Unchanged,
}

/// The policy and binding `profile` should have, or `None` when it sets no namespaceSelector.
/// Pods in `own_namespace` (tether's) are never changed: tether's own pods must not wait for
/// tether. Pure.
pub fn desired(
    profile: &SchedulingProfile,
    own_namespace: &str,
) -> Option<(MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding)> {
    let selector = profile.spec.namespace_selector.clone()?;
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
                None => Defaulting::InForce(name),
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
        assert_eq!(
            binding_spec
                .match_resources
                .and_then(|m| m.namespace_selector),
            Some(selector)
        );
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
