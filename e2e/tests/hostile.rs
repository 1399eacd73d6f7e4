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
    TestNamespace, TestNodes, client, kubectl_ok, tether_metric, wait_bound, wait_event, wait_for,
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
    let mut spec = json!({"schedulerName": "tether-scheduler",
        "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "plain", "namespace": other.name}, "spec": spec,
    }))?;
    Api::<Pod>::namespaced(client.clone(), &other.name)
        .create(&PostParams::default(), &pod)
        .await?;
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
