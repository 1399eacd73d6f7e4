//! What a namespace user can write that no client reads, on the API server: it stops nobody
//! else's scheduling. The API server accepts JSON nested 10,000 levels deep where a kind holds
//! free-form values (a ResourceClaim's opaque parameters); the decoder tether uses stops at 128.
//! tether skips that one object, counts it, reports it on the object, and schedules every other
//! pod as before.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::json;
use tether_e2e::{
    TestNamespace, TestNodes, apply_profile, client, kubectl, kubectl_ok, tether_metric,
    unique_suffix, wait_bound, wait_event, wait_for,
};

/// A pod of the default profile binds this soon beside the bad object (the issue's bound).
const BIND: Duration = Duration::from_secs(10);

/// `depth` objects, one inside the other, around a number: `{"a":{"a":…1…}}`.
fn nested(depth: usize) -> String {
    format!("{}1{}", "{\"a\":".repeat(depth), "}".repeat(depth))
}

/// The skip counter of one watch, 0 while it has none.
fn skipped(watch: &str) -> anyhow::Result<f64> {
    let sample = format!("tether_watch_objects_skipped_total{{resource=\"{watch}\"}}");
    Ok(tether_metric(&sample)?.unwrap_or(0.0))
}

#[tokio::test]
async fn a_claim_nested_past_the_decoders_limit_stops_nobody_and_is_reported_on_itself()
-> anyhow::Result<()> {
    let client = client().await?;
    let tenant = TestNamespace::create(&client, "hostile-claim").await?;
    let other = TestNamespace::create(&client, "hostile-other").await?;
    let nodes = TestNodes::create(&client, "hostile", 1, "4", |_, _| {}).await?;
    let before = skipped("resourceclaims")?;

    // Written as text: no JSON value of the test's own could hold it either.
    let claim = format!(
        r#"{{"apiVersion":"resource.k8s.io/v1","kind":"ResourceClaim",
            "metadata":{{"name":"deep","namespace":"{ns}"}},
            "spec":{{"devices":{{"config":[{{"opaque":{{"driver":"x.example.com","parameters":{params}}}}}]}}}}}}"#,
        ns = tenant.name,
        params = nested(200),
    );
    kubectl_ok(&["create", "-f", "-"], Some(&claim))?;

    // A plain pod of the default profile in another namespace binds as if nothing happened.
    plain_pod(&client, &other.name, "plain", "tether-scheduler", &nodes).await?;
    let node = wait_bound(&client, &other.name, "plain", BIND).await?;
    assert_eq!(node, nodes.names[0]);

    // Skipped, counted, and reported on the claim (its owner learns why from kubectl).
    wait_for(
        "the claim counted as skipped",
        Duration::from_secs(30),
        || async { Ok((skipped("resourceclaims")? > before).then_some(())) },
    )
    .await?;
    let events = wait_event(
        &client,
        &tenant.name,
        "deep",
        "Unreadable",
        Duration::from_secs(30),
        |note| note.contains("treats it as absent"),
    )
    .await?;
    assert!(
        events.iter().all(|e| !e.contains("\"a\"")),
        "the report repeats none of the object's values: {events:?}"
    );
    // The claim goes with its namespace (kube-controller-manager reads it; kube's client, as
    // the other tests use it, could not list claims while it exists).
    kubectl_ok(
        &[
            "delete",
            "resourceclaim",
            "deep",
            "-n",
            &tenant.name,
            "--wait=false",
        ],
        None,
    )?;
    Ok(())
}

/// A plain pod of `scheduler` in `ns` on `nodes`, created now.
async fn plain_pod(
    client: &kube::Client,
    ns: &str,
    name: &str,
    scheduler: &str,
    nodes: &TestNodes,
) -> anyhow::Result<()> {
    let mut spec = json!({"schedulerName": scheduler,
        "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns}, "spec": spec,
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

/// The owner watches a sticky profile needs (KubeVirt's VirtualMachines and their instances,
/// free-form custom resources) read past one nested 200 deep: a pod of a StickyNode profile in
/// another namespace binds beside it.
#[tokio::test]
async fn a_virtual_machine_nested_past_the_decoders_limit_stops_no_sticky_profile()
-> anyhow::Result<()> {
    let client = client().await?;
    let tenant = TestNamespace::create(&client, "hostile-vm").await?;
    let other = TestNamespace::create(&client, "hostile-vm-other").await?;
    let nodes = TestNodes::create(&client, "hostile-vm", 1, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    // The profile and its schedulerName share one name.
    let name = format!("hostile-{suffix}");
    let scheduler = &name;
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}}),
    )
    .await?;
    for kind in ["VirtualMachine", "VirtualMachineInstance"] {
        let object = format!(
            r#"{{"apiVersion":"kubevirt.io/v1","kind":"{kind}",
                "metadata":{{"name":"deep","namespace":"{ns}"}},
                "spec":{{"deep":{nested}}}}}"#,
            ns = tenant.name,
            nested = nested(200),
        );
        kubectl_ok(&["create", "-f", "-"], Some(&object))?;
    }
    plain_pod(&client, &other.name, "sticky", scheduler, &nodes).await?;
    let node = wait_bound(&client, &other.name, "sticky", BIND).await?;
    assert_eq!(node, nodes.names[0]);
    for kind in ["virtualmachine", "virtualmachineinstance"] {
        kubectl_ok(
            &["delete", kind, "deep", "-n", &tenant.name, "--wait=false"],
            None,
        )?;
    }
    kubectl_ok(&["delete", "sp", &name], None)?;
    Ok(())
}

/// The Ready condition of profile `name`: (status, reason), read by kubectl (Go's decoder reads
/// what tether's cannot).
fn ready_of(name: &str) -> anyhow::Result<(String, String)> {
    let out = kubectl_ok(
        &[
            "get",
            "sp",
            name,
            "-o",
            r#"jsonpath={.status.conditions[?(@.type=="Ready")].status} {.status.conditions[?(@.type=="Ready")].reason}"#,
        ],
        None,
    )?;
    let (status, reason) = out.trim().split_once(' ').unwrap_or((out.trim(), ""));
    Ok((status.to_string(), reason.to_string()))
}

/// A SchedulingProfile edited to hold plugin args nested 200 deep (the API server takes them
/// in a free-form field; tether's decoder stops at 128) says so on itself, where GitOps tools
/// and `kubectl wait` look: Ready=False, reason Unreadable. The version read before still
/// serves its pods, the default profile serves on, and the profile fixed is Ready again.
#[tokio::test]
async fn a_profile_nested_past_the_decoders_limit_says_so_and_its_last_version_serves()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "hostile-sp").await?;
    let nodes = TestNodes::create(&client, "hostile-sp", 1, "4", |_, _| {}).await?;
    let name = format!("hostile-sp-{}", unique_suffix());
    apply_profile(&client, &name, json!({"schedulerName": name})).await?;

    let deep = format!(
        r#"{{"apiVersion":"tether.dev/v1alpha1","kind":"SchedulingProfile",
            "metadata":{{"name":"{name}"}},
            "spec":{{"schedulerName":"{name}","pluginConfig":[
                {{"name":"NodeResourcesFit","args":{{"deep":{nested}}}}}]}}}}"#,
        nested = nested(200),
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&deep))?;
    wait_for(
        "the profile said Unreadable",
        Duration::from_secs(30),
        || async {
            let (status, reason) = ready_of(&name)?;
            Ok((status == "False" && reason == "Unreadable").then_some(()))
        },
    )
    .await?;

    plain_pod(&client, &ns.name, "served", &name, &nodes).await?;
    plain_pod(&client, &ns.name, "plain", "tether-scheduler", &nodes).await?;
    for pod in ["served", "plain"] {
        assert_eq!(
            wait_bound(&client, &ns.name, pod, BIND).await?,
            nodes.names[0]
        );
    }

    apply_profile(&client, &name, json!({"schedulerName": name})).await?;
    assert_eq!(
        ready_of(&name)?,
        ("True".to_string(), "Serving".to_string())
    );
    kubectl_ok(&["delete", "sp", &name], None)?;
    ns.delete().await?;
    nodes.delete().await
}

/// What the types cannot hold is refused at the door, as before (keep it so): a StickyBinding
/// ordinal past int32.
#[tokio::test]
async fn a_sticky_binding_ordinal_past_int32_is_refused_by_the_api_server() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "hostile-sb").await?;
    let binding = json!({"apiVersion": "tether.dev/v1alpha1", "kind": "StickyBinding",
        "metadata": {"name": "statefulset-db-0", "namespace": ns.name},
        "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db",
            "ordinal": 2_147_483_648_i64}}});
    let refused = kubectl(&["create", "-f", "-"], Some(&binding.to_string()))?;
    assert!(!refused.success, "an ordinal past int32 was accepted");
    assert!(
        refused.stderr.contains("ordinal"),
        "the refusal names the field: {}",
        refused.stderr
    );
    Ok(())
}
