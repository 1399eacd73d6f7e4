//! A profile's `namespaceSelector` on the API server: pods created without a scheduler of their
//! own in the namespaces it selects **and that opted in** (label `tether.dev/scheduling-profile`
//! naming the profile) are tether's, through the MutatingAdmissionPolicy tether keeps; every
//! other pod is left as written, and no profile reaches kube-system, whatever it selects.

use std::time::Duration;

use k8s_openapi::api::admissionregistration::v1::{
    MutatingAdmissionPolicy, MutatingAdmissionPolicyBinding,
};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use tether::api::SchedulingProfile;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, kubectl, kubectl_ok, unique_suffix,
    wait_bound, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The profile's condition of `type_`: (status, reason, message), for its current generation.
async fn condition(
    profiles: &Api<SchedulingProfile>,
    name: &str,
    type_: &str,
) -> anyhow::Result<Option<(String, String, String)>> {
    let p = profiles.get(name).await?;
    Ok(p.status
        .unwrap_or_default()
        .conditions
        .into_iter()
        .find(|c| c.type_ == type_ && c.observed_generation == p.metadata.generation)
        .map(|c| (c.status, c.reason, c.message)))
}

/// The schedulerName the API server would give a pod created now in `ns` (a server-side dry
/// run: admission runs, nothing is stored).
fn admitted_scheduler(ns: &str, scheduler: Option<&str>) -> anyhow::Result<String> {
    let mut spec = json!({"containers": [{"name": "c", "image": "pause"}]});
    if let Some(s) = scheduler {
        spec["schedulerName"] = json!(s);
    }
    let pod = json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "dry-run", "namespace": ns}, "spec": spec});
    kubectl_ok(
        &[
            "create",
            "--dry-run=server",
            "-o",
            "jsonpath={.spec.schedulerName}",
            "-f",
            "-",
        ],
        Some(&pod.to_string()),
    )
}

#[tokio::test]
async fn pods_in_the_namespaces_a_profile_selects_are_scheduled_by_it_without_naming_it()
-> anyhow::Result<()> {
    let client = client().await?;
    let suffix = unique_suffix();
    let selected = TestNamespace::create(&client, "ns-selected").await?;
    let not_opted = TestNamespace::create(&client, "ns-not-opted").await?;
    let other = TestNamespace::create(&client, "ns-other").await?;
    let name = format!("ns-select-{suffix}");
    for ns in [&selected.name, &not_opted.name] {
        kubectl_ok(
            &[
                "label",
                "namespace",
                ns,
                &format!("tether.dev/e2e-team={suffix}"),
            ],
            None,
        )?;
    }
    // Only the namespace's owners (who may label it) opt it in.
    kubectl_ok(
        &[
            "label",
            "namespace",
            &selected.name,
            &format!("tether.dev/scheduling-profile={name}"),
        ],
        None,
    )?;
    let nodes = TestNodes::create(&client, "ns-select", 1, "8", |_, _| {}).await?;
    let scheduler = format!("ns-select-{suffix}");
    let selector = json!({"matchLabels": {"tether.dev/e2e-team": suffix}});
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "namespaceSelector": selector}),
    )
    .await?;
    let profiles: Api<SchedulingProfile> = Api::all(client.clone());
    let said = wait_for("NamespaceDefaulting=True", TIMEOUT, || async {
        Ok(condition(&profiles, &name, "NamespaceDefaulting")
            .await?
            .filter(|(s, _, _)| s == "True"))
    })
    .await?;
    assert_eq!(said.1, "InForce", "{said:?}");
    assert!(
        said.2.contains(&format!("tether-profile-{name}")),
        "{said:?}"
    );
    assert!(
        said.2.contains("not opted in") && said.2.contains(&not_opted.name),
        "the condition names the namespace it selects that did not opt in: {said:?}"
    );
    let policies: Api<MutatingAdmissionPolicy> = Api::all(client.clone());
    let bindings: Api<MutatingAdmissionPolicyBinding> = Api::all(client.clone());
    let object = format!("tether-profile-{name}");
    assert!(policies.get_opt(&object).await?.is_some());
    assert!(bindings.get_opt(&object).await?.is_some());

    // The API server loads a new policy within moments: wait until a dry run shows it.
    wait_for(
        "the policy to be applied by the API server",
        TIMEOUT,
        || async { Ok((admitted_scheduler(&selected.name, None)? == scheduler).then_some(())) },
    )
    .await?;
    assert_eq!(
        admitted_scheduler(&other.name, None)?,
        "default-scheduler",
        "a namespace the selector does not select is left alone"
    );
    assert_eq!(
        admitted_scheduler(&not_opted.name, None)?,
        "default-scheduler",
        "a namespace the selector selects that did not opt in is left alone"
    );
    assert_eq!(
        admitted_scheduler(&selected.name, Some("someone-else"))?,
        "someone-else",
        "a pod that names its scheduler keeps it"
    );

    // A real pod, naming no scheduler, is scheduled by tether (no other scheduler runs here).
    let mut spec = json!({"containers": [{"name": "c", "image": "pause",
        "resources": {"requests": {"cpu": "100m"}}}]});
    nodes.isolate(&mut spec);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "unnamed", "namespace": selected.name}, "spec": spec.clone()}))?;
    let node = wait_bound(&client, &selected.name, "unnamed", TIMEOUT).await?;
    assert_eq!(node, nodes.names[0]);
    let pod = Api::<Pod>::namespaced(client.clone(), &selected.name)
        .get("unnamed")
        .await?;
    assert_eq!(
        pod.spec.and_then(|s| s.scheduler_name).as_deref(),
        Some(scheduler.as_str())
    );

    // An invalid change is refused, naming the field, and the last good selector stays in force.
    apply(
        json!({"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
        "metadata": {"name": name}, "spec": {"schedulerName": scheduler,
        "namespaceSelector": {"matchExpressions": [{"key": "tether.dev/e2e-team", "operator": "Near"}]}}}),
    )?;
    let refused = wait_for("Ready=False", TIMEOUT, || async {
        Ok(condition(&profiles, &name, "Ready")
            .await?
            .filter(|(s, _, _)| s == "False"))
    })
    .await?;
    assert!(refused.2.contains("namespaceSelector"), "{refused:?}");
    assert_eq!(admitted_scheduler(&selected.name, None)?, scheduler);

    // Unset: the policy and its binding go, and so does the condition.
    apply_profile(&client, &name, json!({"schedulerName": scheduler})).await?;
    wait_for("the policy and binding to be removed", TIMEOUT, || async {
        let gone = policies.get_opt(&object).await?.is_none()
            && bindings.get_opt(&object).await?.is_none();
        Ok(gone.then_some(()))
    })
    .await?;
    let p = profiles.get(&name).await?;
    assert!(
        !p.status
            .unwrap_or_default()
            .conditions
            .iter()
            .any(|c| c.type_ == "NamespaceDefaulting"),
        "no selector, no condition"
    );
    wait_for("the API server to stop applying it", TIMEOUT, || async {
        Ok((admitted_scheduler(&selected.name, None)? == "default-scheduler").then_some(()))
    })
    .await?;

    // A selector of every namespace (`{}`), as a profile author with no other right could
    // write: the opted-in namespace is served, and kube-system and the namespaces that did not
    // opt in are not.
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "namespaceSelector": {}}),
    )
    .await?;
    wait_for("the policy again", TIMEOUT, || async {
        Ok(policies.get_opt(&object).await?.map(|_| ()))
    })
    .await?;
    wait_for("the opted-in namespace served again", TIMEOUT, || async {
        Ok((admitted_scheduler(&selected.name, None)? == scheduler).then_some(()))
    })
    .await?;
    for ns in ["kube-system", "default", &not_opted.name, &other.name] {
        assert_eq!(
            admitted_scheduler(ns, None)?,
            "default-scheduler",
            "{ns} did not opt in: its pods are left as written"
        );
    }
    // Opted in or not, kube-system is never reached.
    kubectl_ok(
        &[
            "label",
            "namespace",
            "kube-system",
            &format!("tether.dev/scheduling-profile={name}"),
        ],
        None,
    )?;
    let kube_system = admitted_scheduler("kube-system", None);
    kubectl_ok(
        &[
            "label",
            "namespace",
            "kube-system",
            "tether.dev/scheduling-profile-",
        ],
        None,
    )?;
    assert_eq!(
        kube_system?, "default-scheduler",
        "kube-system is never reached"
    );

    // Then the profile deleted: its objects go with it.
    let deleted = kubectl(&["delete", "sp", &name, "--wait=true"], None)?;
    anyhow::ensure!(deleted.success, "{}", deleted.stderr);
    wait_for("the policy to go with its profile", TIMEOUT, || async {
        let gone = policies.get_opt(&object).await?.is_none()
            && bindings.get_opt(&object).await?.is_none();
        Ok(gone.then_some(()))
    })
    .await?;

    nodes.delete().await?;
    other.delete().await?;
    not_opted.delete().await?;
    selected.delete().await
}
