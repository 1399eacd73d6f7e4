//! The scheduling queue on a real cluster: what happens to pods while they wait.

use std::time::{Duration, Instant};

use futures::future::try_join_all;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams};
use serde_json::json;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, kubectl_ok, unique_suffix, wait_bound,
    wait_for,
};

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

/// Waits until tether reported `pod` unschedulable (`PodScheduled=False`): it is parked.
async fn wait_unschedulable(pods: &Api<Pod>, pod: &str) -> anyhow::Result<()> {
    wait_for(
        &format!("pod {pod} reported unschedulable"),
        Duration::from_secs(30),
        || {
            let pods = pods.clone();
            async move {
                let p = pods.get(pod).await?;
                let parked = p
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "PodScheduled" && c.status == "False");
                Ok(parked.then_some(()))
            }
        },
    )
    .await
}

fn pod_json(name: &str, labels: serde_json::Value, spec: serde_json::Value) -> anyhow::Result<Pod> {
    Ok(serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": spec,
    }))?)
}

/// A pod that needs another pod next to it (required podAffinity) is rejected while there is
/// none; when tether binds that pod, the waiting one is scheduled at once (the bound pod's
/// event is one InterPodAffinity registered), not after the 5-minute flush.
#[tokio::test]
async fn a_pod_waiting_for_its_affinity_target_is_scheduled_as_soon_as_tether_binds_it()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "affinity-wait").await?;
    let nodes = TestNodes::create(&client, "affinity-wait", 3, "8", |_, _| {}).await?;
    let name = format!("affinity-wait-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler})).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut spec =
        json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);

    let mut follower = spec.clone();
    follower["affinity"] = json!({"podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
        {"labelSelector": {"matchLabels": {"app": "leader"}}, "topologyKey": "kubernetes.io/hostname"}
    ]}});
    pods.create(
        &PostParams::default(),
        &pod_json("follower", json!({"app": "follower"}), follower)?,
    )
    .await?;
    wait_unschedulable(&pods, "follower").await?;

    pods.create(
        &PostParams::default(),
        &pod_json("leader", json!({"app": "leader"}), spec)?,
    )
    .await?;
    let leader_node = wait_bound(&client, &ns.name, "leader", Duration::from_secs(30)).await?;
    let bound_at = Instant::now();
    // Far below the 5-minute flush that would otherwise retry it; the latency is printed.
    let follower_node = wait_bound(&client, &ns.name, "follower", Duration::from_secs(10)).await?;
    println!(
        "follower bound {:?} after its target was seen bound",
        bound_at.elapsed()
    );
    assert_eq!(follower_node, leader_node, "next to its target");

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// A pod that does not fit (the node's CPU is taken) waits; when the pod holding the CPU is
/// deleted it is scheduled at once, although its profile backs pods off for 30 s: the deletion
/// moves it to backoffQ, and with activeQ empty tether takes it from there
/// (SchedulerPopFromBackoffQ).
#[tokio::test]
async fn a_pod_freed_by_a_deletion_is_scheduled_without_waiting_out_its_backoff()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "freed").await?;
    let nodes = TestNodes::create(&client, "freed", 1, "1", |_, _| {}).await?;
    let name = format!("freed-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "podInitialBackoffSeconds": 30, "podMaxBackoffSeconds": 30}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut spec = json!({"schedulerName": scheduler, "containers": [
        {"name": "c", "image": "pause", "resources": {"requests": {"cpu": "800m"}}}
    ]});
    nodes.isolate(&mut spec);
    pods.create(
        &PostParams::default(),
        &pod_json("holder", json!({"app": "holder"}), spec.clone())?,
    )
    .await?;
    wait_bound(&client, &ns.name, "holder", Duration::from_secs(30)).await?;
    pods.create(
        &PostParams::default(),
        &pod_json("waiter", json!({"app": "waiter"}), spec)?,
    )
    .await?;
    wait_unschedulable(&pods, "waiter").await?;

    pods.delete("holder", &DeleteParams::default().grace_period(0))
        .await?;
    wait_for("holder gone", Duration::from_secs(30), || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt("holder").await?.is_none().then_some(())) }
    })
    .await?;
    let freed_at = Instant::now();
    // Well inside the 30 s backoff the waiter earned by its failure.
    wait_bound(&client, &ns.name, "waiter", Duration::from_secs(15)).await?;
    println!(
        "waiter bound {:?} after the holder was gone",
        freed_at.elapsed()
    );

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}
