//! The Workload API on the local control plane: kube-apiserver serves
//! `scheduling.k8s.io/v1beta1` PodGroups and pods' `spec.schedulingGroup` (GenericWorkload,
//! beta and off by default in 1.37), and kube-scheduler v1.37.2 run with the gate places a
//! gang whole or not at all. This is the reference gang scheduling in tether is to be compared
//! with, side by side.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::{Value, json};
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{TestNamespace, TestNodes, apply, client, unique_suffix, wait_for};

/// A PodGroup `name` of the gang policy with `min_count`, and `members` pods of 1 CPU naming it.
fn gang(
    ns: &str,
    nodes: &TestNodes,
    scheduler: &str,
    name: &str,
    min_count: i32,
    members: usize,
) -> anyhow::Result<()> {
    apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }))?;
    for i in 0..members {
        let mut spec = json!({
            "schedulerName": scheduler,
            "schedulingGroup": {"podGroupName": name},
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
        });
        nodes.isolate(&mut spec);
        apply(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{name}-{i}"), "namespace": ns}, "spec": spec,
        }))?;
    }
    Ok(())
}

/// The PodGroup's `PodGroupInitiallyScheduled` condition: (status, reason, message).
async fn initially_scheduled(
    client: &kube::Client,
    ns: &str,
    name: &str,
) -> anyhow::Result<Option<(String, String, String)>> {
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
        client.clone(),
        ns,
        &kube::api::ApiResource {
            group: "scheduling.k8s.io".into(),
            version: "v1beta1".into(),
            api_version: "scheduling.k8s.io/v1beta1".into(),
            kind: "PodGroup".into(),
            plural: "podgroups".into(),
        },
    );
    let group = api.get(name).await?;
    let conditions = group.data["status"]["conditions"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    Ok(conditions
        .iter()
        .find(|c| c["type"] == "PodGroupInitiallyScheduled")
        .map(|c| {
            let text = |k: &str| c[k].as_str().unwrap_or_default().to_string();
            (text("status"), text("reason"), text("message"))
        }))
}

/// Two nodes of 2 CPUs: a gang of 3 (minCount 3) is bound whole and its PodGroup says so; then
/// a gang of 4 (minCount 4), with room for one more pod only, binds none, holds no room (a
/// plain pod takes that room), and its PodGroup and pods say why.
#[tokio::test]
async fn kube_scheduler_places_a_gang_whole_or_not_at_all() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "gang-ref").await?;
    let nodes = TestNodes::create(&client, "gang-ref", 2, "2", |_, _| {}).await?;
    let scheduler = format!("gang-reference-{}", unique_suffix());
    let _kube = ReferenceScheduler::start_gated(
        "kube-scheduler-gang",
        json!({"profiles": [{"schedulerName": scheduler,
                             "plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}]}),
        &["GenericWorkload=true"],
    )?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let node_of = |name: String| {
        let pods = pods.clone();
        async move { Ok::<_, anyhow::Error>(pods.get(&name).await?.spec.and_then(|s| s.node_name)) }
    };

    gang(&ns.name, &nodes, &scheduler, "fits", 3, 3)?;
    wait_for(
        "the gang of 3 bound whole",
        Duration::from_secs(60),
        || async {
            let mut bound = 0;
            for i in 0..3 {
                if node_of(format!("fits-{i}")).await?.is_some() {
                    bound += 1;
                }
            }
            Ok((bound == 3).then_some(()))
        },
    )
    .await?;
    let scheduled = wait_for("the PodGroup's condition", Duration::from_secs(30), || {
        let client = client.clone();
        let ns = ns.name.clone();
        async move { initially_scheduled(&client, &ns, "fits").await }
    })
    .await?;
    assert_eq!(
        (scheduled.0.as_str(), scheduled.1.as_str()),
        ("True", "Scheduled")
    );

    gang(&ns.name, &nodes, &scheduler, "too-big", 4, 4)?;
    let refused = wait_for("the gang of 4 refused", Duration::from_secs(60), || {
        let client = client.clone();
        let ns = ns.name.clone();
        async move {
            Ok(initially_scheduled(&client, &ns, "too-big")
                .await?
                .filter(|c| c.0 == "False"))
        }
    })
    .await?;
    println!("the refused gang's condition: {refused:?}");
    assert_eq!(refused.1, "Unschedulable");
    for i in 0..4 {
        assert_eq!(
            node_of(format!("too-big-{i}")).await?,
            None,
            "a member of a gang that does not fit was bound"
        );
    }
    let message = wait_for(
        "a member's PodScheduled condition",
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            async move {
                let pod = pods.get("too-big-0").await?;
                Ok(pod
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                    .and_then(|c| c.message))
            }
        },
    )
    .await?;
    println!("a member's message: {message}");
    assert!(
        message.starts_with("pod group is unschedulable"),
        "{message}"
    );

    // The room the refused gang did not take is free: a plain pod takes it.
    let mut spec: Value = json!({
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
    });
    nodes.isolate(&mut spec);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "plain", "namespace": ns.name}, "spec": spec}))?;
    tether_e2e::wait_bound(&client, &ns.name, "plain", Duration::from_secs(60)).await?;

    ns.delete().await?;
    nodes.delete().await
}
