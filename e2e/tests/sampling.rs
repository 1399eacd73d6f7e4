//! Node sampling above 100 nodes, side by side with kube-scheduler v1.37.2: on 150 nodes of the
//! test's own (and the cluster's others), each scheduler checks only a window of the nodes for
//! each pod (its adaptive `percentageOfNodesToScore` finds 100 feasible ones) and starts the
//! next pod's window where the last stopped. Which nodes are scored decides where pods land, so
//! the same pods must land on the same nodes, pod after pod.
//!
//! Both run with parallelism 1 (with more workers the window kube-scheduler checks depends on
//! which worker finishes first), from a fresh start (the window begins at the first node), and
//! meet the test's nodes as they are added (see below). The test runs a tether of its own, so
//! `make e2e` runs it after the shared tether has stopped.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::json;
use tether_e2e::faults::{OwnTether, Proxy};
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{
    TestNamespace, TestNodes, apply_profile, client, kubectl_ok, unique_suffix, wait_bound,
    wait_for,
};

/// Test nodes: with the cluster's own, more than 100, so that only a share is checked.
const NODES: usize = 150;
/// Pods placed one after another by each scheduler.
const PODS: usize = 12;
const TIMEOUT: Duration = Duration::from_secs(60);

#[tokio::test]
async fn above_100_nodes_the_same_pods_land_on_the_same_nodes_as_with_kube_scheduler()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "sampling").await?;
    let suffix = unique_suffix();
    let (reference, tether) = (
        format!("sampling-reference-{suffix}"),
        format!("sampling-tether-{suffix}"),
    );
    let kube = ReferenceScheduler::start_config(
        "kube-scheduler-sampling",
        json!({"parallelism": 1, "profiles": [{"schedulerName": reference,
            "plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}]}),
    )?;
    let proxy = Proxy::start().await?;
    let own = OwnTether::start_with("sampling", &proxy, &["--parallelism", "1"]).await?;
    apply_profile(
        &client,
        &tether,
        json!({"schedulerName": tether, "plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}),
    )
    .await?;
    // Both list the nodes only once they are up: the order of a first list differs from one
    // kube-scheduler start to the next (its informer hands them over in no set order), while
    // nodes added later come in the order of the API's events, the same for both. kube-scheduler
    // is up once it has told a probe pod that fits nowhere so.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let probe: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe"},
        "spec": {"schedulerName": reference, "nodeSelector": {"no-such": "node"},
                 "containers": [{"name": "c", "image": "pause"}]},
    }))?;
    pods.create(&PostParams::default(), &probe).await?;
    wait_for("kube-scheduler to be up", TIMEOUT, || async {
        let pod = pods.get("probe").await?;
        let told = pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .any(|c| c.type_ == "PodScheduled" && c.status == "False");
        Ok(told.then_some(()))
    })
    .await?;
    pods.delete("probe", &DeleteParams::default().grace_period(0))
        .await?;
    // Every node different (CPUs 8 to 15.45), so that scores never tie; a region of their own,
    // so that their zones are theirs alone.
    let nodes = TestNodes::create(&client, "sampling", NODES, "8", |i, node| {
        let cpu = format!("{}m", 8000 + 50 * i);
        for field in ["allocatable", "capacity"] {
            node["status"][field]["cpu"] = json!(cpu);
        }
        node["metadata"]["labels"]["topology.kubernetes.io/region"] = json!("sampling");
    })
    .await?;

    // One pod at a time, each deleted before the next, so that every pod meets the same nodes
    // and only the window differs from pod to pod; each scheduler's window moves with its own
    // pods alone.
    let once = |name: String, scheduler: String| {
        let (client, pods, nodes, ns) = (client.clone(), pods.clone(), &nodes, ns.name.clone());
        async move {
            let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c",
                "image": "pause", "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
            nodes.isolate(&mut spec);
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            let node = wait_bound(&client, &ns, &name, TIMEOUT).await?;
            pods.delete(&name, &DeleteParams::default().grace_period(0))
                .await?;
            wait_for(&format!("{name} gone"), TIMEOUT, || async {
                Ok(pods.get_opt(&name).await?.is_none().then_some(()))
            })
            .await?;
            anyhow::Ok(node)
        }
    };
    let mut disagreements = Vec::new();
    let mut placed = Vec::new();
    for i in 0..PODS {
        let theirs = once(format!("reference-{i}"), reference.clone()).await?;
        let ours = once(format!("tether-{i}"), tether.clone()).await?;
        // Ties are broken at random by both: tether's node must be one kube-scheduler scored
        // highest in its window for the same pod.
        let scores = kube.scores(&format!("{}/reference-{i}", ns.name))?;
        let top = scores.values().copied().max().unwrap_or(i64::MIN);
        let best: Vec<&String> = scores
            .iter()
            .filter(|(_, s)| **s == top)
            .map(|(n, _)| n)
            .collect();
        println!(
            "pod {i}: kube-scheduler {theirs}, tether {ours} (best in kube-scheduler's window: {best:?})"
        );
        assert!(
            scores.len() < NODES,
            "kube-scheduler scored {} nodes: only a share is checked above 100",
            scores.len()
        );
        placed.push(ours.clone());
        if !best.contains(&&ours) {
            disagreements.push(format!(
                "pod {i}: tether chose {ours}, kube-scheduler's window's best were {best:?} (it scored {} nodes)",
                scores.len()
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));
    placed.sort();
    placed.dedup();
    assert!(
        placed.len() > 1,
        "the windows moved: tether placed the pods on more than one node"
    );

    drop(own);
    drop(kube);
    kubectl_ok(&["delete", "sp", &tether], None)?;
    ns.delete().await?;
    nodes.delete().await
}
