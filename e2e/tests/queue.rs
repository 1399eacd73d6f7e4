//! The scheduling queue on a real cluster: what happens to pods while they wait.

use std::time::Duration;

use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tether_e2e::{TestNamespace, TestNodes, apply, client, kubectl_ok, unique_suffix, wait_for};

/// Hundreds of pods enter the active queue at once (their profile appears after they were
/// created), higher-priority ones ahead; meanwhile a person or controller relabels the others.
/// Every pod is bound: an update never loses a pod that waits in the active queue.
#[tokio::test]
async fn a_burst_of_pods_relabelled_while_they_queue_is_all_bound() -> anyhow::Result<()> {
    const PODS: usize = 150;
    const AHEAD: usize = 300;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "relabel").await?;
    let nodes = TestNodes::create(&client, "relabel", 10, "64", |_, _| {}).await?;
    let name = format!("relabel-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply(
        json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
        "metadata": {"name": name}, "value": 1000}),
    )?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut spec =
        json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    let mut ahead = spec.clone();
    ahead["priorityClassName"] = json!(name);
    let create = |pod_name: String, app: &'static str, spec: serde_json::Value| {
        let pods = pods.clone();
        async move {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": pod_name, "labels": {"app": app}},
                "spec": spec,
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            anyhow::Ok(())
        }
    };
    // No profile serves the pods yet: tether leaves them alone until one does.
    try_join_all((0..AHEAD).map(|i| create(format!("ahead-{i}"), "ahead", ahead.clone()))).await?;
    try_join_all((0..PODS).map(|i| create(format!("burst-{i}"), "burst", spec.clone()))).await?;

    apply(
        json!({"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
        "metadata": {"name": name}, "spec": {"schedulerName": scheduler}}),
    )?;
    let relabel = |i: usize| {
        let pods = pods.clone();
        async move {
            for round in 0..3 {
                pods.patch(
                    &format!("burst-{i}"),
                    &PatchParams::default(),
                    &Patch::Merge(
                        json!({"metadata": {"labels": {"relabelled": round.to_string()}}}),
                    ),
                )
                .await?;
            }
            anyhow::Ok(())
        }
    };
    try_join_all((0..PODS).map(relabel)).await?;

    wait_for(
        &format!("all {} pods bound", AHEAD + PODS),
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default()).await?;
                let unbound: Vec<String> = list
                    .items
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
                    .filter_map(|p| p.metadata.name.clone())
                    .collect();
                if unbound.is_empty() && list.items.len() == AHEAD + PODS {
                    Ok(Some(()))
                } else {
                    anyhow::bail!("{} pods still unbound: {unbound:?}", unbound.len())
                }
            }
        },
    )
    .await?;
    kubectl_ok(&["delete", "sp", &name], None)?;
    kubectl_ok(&["delete", "priorityclass", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}
