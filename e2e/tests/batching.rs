//! Opportunistic batching, side by side: kube-scheduler (1.35 and later, the
//! OpportunisticBatching gate on by default) and tether hand a pod that signs like the pod
//! before it the next node of that pod's ranking, instead of filtering and scoring the nodes
//! again. On the same nodes, the same burst of identical pods lands on the same nodes under
//! kube-scheduler with batching on, under kube-scheduler with batching off, and under tether;
//! the metrics of both (`scheduler_batch_attempts_total{result="hint_used"}`) prove they
//! batched.
//!
//! The burst packs (NodeResourcesFit's MostAllocated on CPU alone, the only score) nodes whose
//! loads differ, so the best node is never a tie: which node each pod gets is decided by the
//! scores alone, and the count each node ends with is the placement to compare. The profile
//! has no default spread constraints (kube-scheduler signs no pod under them, so it would not
//! batch) and scores every node (`percentageOfNodesToScore: 100`).
//!
//! Runs alone (`make e2e` runs it after the shared tests): kube-scheduler's batches last while
//! its cycles follow one another, and another test's pods would end them.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use serde_json::{Value, json};
use tether_e2e::faults::curl_self_signed;
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{
    TestNamespace, TestNodes, apply_profile, client, free_local_addr, kubectl_ok, sample_value,
    tether_metric, unique_suffix, wait_for,
};

/// Nodes of 16 CPUs; node `i` already runs `i` CPUs, so their MostAllocated scores differ.
const NODES: usize = 8;
const NODE_CPUS: usize = 16;
/// 1-CPU pods in the burst: they fill nodes 7, 6 and 5 (9 + 10 + 11 CPUs free) and 5 CPUs of node 4.
const BURST: usize = 35;

/// The profile both schedulers run (kube-scheduler's KubeSchedulerProfile fields, which a
/// SchedulingProfile's spec shares).
fn profile(scheduler: &str) -> Value {
    json!({
        "schedulerName": scheduler,
        "percentageOfNodesToScore": 100,
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit", "weight": 1}]}},
        "pluginConfig": [
            {"name": "PodTopologySpread", "args": {"defaultingType": "List"}},
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {
                "type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}]}}},
        ],
    })
}

/// The burst of `scheduler`'s pods, made before it starts (or while its profile does not exist)
/// so that its cycles follow one another; returns how many pods each node ended with.
async fn burst(
    client: &kube::Client,
    nodes: &TestNodes,
    ns: &str,
    scheduler: &str,
    start: impl AsyncFnOnce() -> anyhow::Result<()>,
) -> anyhow::Result<BTreeMap<String, usize>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    for i in 0..BURST {
        let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": "1", "memory": "100Mi"}}}]});
        nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{scheduler}-{i:03}"), "labels": {"burst": scheduler}},
            "spec": spec,
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    start().await?;
    let selector = ListParams::default().labels(&format!("burst={scheduler}"));
    let placed = wait_for(
        &format!("{scheduler} to bind its burst"),
        Duration::from_secs(90),
        || {
            let (pods, selector) = (pods.clone(), selector.clone());
            async move {
                let listed = pods.list(&selector).await?.items;
                let placed: Vec<String> = listed
                    .iter()
                    .filter_map(|p| p.spec.as_ref()?.node_name.clone())
                    .collect();
                if placed.len() < BURST {
                    return Ok(None);
                }
                let mut counts = BTreeMap::new();
                for node in placed {
                    *counts.entry(node).or_insert(0) += 1;
                }
                Ok(Some(counts))
            }
        },
    )
    .await?;
    // Gone before the next scheduler's burst: the nodes hold their loads alone again.
    pods.delete_collection(&DeleteParams::default().grace_period(0), &selector)
        .await?;
    wait_for(
        &format!("{scheduler}'s burst gone"),
        Duration::from_secs(60),
        || {
            let (pods, selector) = (pods.clone(), selector.clone());
            async move {
                Ok(pods
                    .list_metadata(&selector)
                    .await?
                    .items
                    .is_empty()
                    .then_some(()))
            }
        },
    )
    .await?;
    Ok(placed)
}

#[tokio::test]
async fn a_burst_lands_where_kube_scheduler_batching_puts_it() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "batching").await?;
    let nodes = TestNodes::create(
        &client,
        "batching",
        NODES,
        &NODE_CPUS.to_string(),
        |_, _| {},
    )
    .await?;
    // The loads: node i runs i CPUs (bound by the test itself).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for (i, node) in nodes.names.iter().enumerate().skip(1) {
        let mut spec = json!({"nodeName": node, "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": i.to_string()}}}]});
        nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": format!("load-{i}")}, "spec": spec,
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }
    // What packing by score gives: the fullest node first, each filled before the next.
    let mut expected = BTreeMap::new();
    let mut left = BURST;
    for (i, node) in nodes.names.iter().enumerate().rev() {
        let take = left.min(NODE_CPUS - i);
        if take > 0 {
            expected.insert(node.clone(), take);
        }
        left -= take;
    }

    let mut placements = Vec::new();
    for (label, gates) in [
        ("kube-scheduler, batching on", &[][..]),
        (
            "kube-scheduler, batching off",
            &["OpportunisticBatching=false"][..],
        ),
    ] {
        let scheduler = format!("batching-ref-{}", unique_suffix());
        let addr = free_local_addr()?;
        let mut kube = None;
        let placed = burst(&client, &nodes, &ns.name, &scheduler, async || {
            kube = Some(ReferenceScheduler::start_serving(
                &format!("kube-scheduler-{scheduler}"),
                json!({"profiles": [profile(&scheduler)]}),
                gates,
                addr,
            )?);
            Ok(())
        })
        .await?;
        // How many pods took the node their predecessor's ranking offered.
        let url = format!("https://{addr}/metrics");
        let text = curl_self_signed(&url)?.unwrap_or_default();
        let hinted = sample_value(
            &text,
            &format!(
                r#"scheduler_batch_attempts_total{{profile="{scheduler}",result="hint_used"}}"#
            ),
        )
        .unwrap_or(0.0);
        drop(kube);
        if gates.is_empty() {
            assert!(
                hinted >= (BURST / 2) as f64,
                "kube-scheduler batched most of the burst (hints used: {hinted}); its metrics:\n{}",
                text.lines()
                    .filter(|l| l.starts_with("scheduler_batch"))
                    .collect::<Vec<_>>()
                    .join("\n")
            );
        } else {
            assert_eq!(
                hinted, 0.0,
                "kube-scheduler with batching off gave no hints"
            );
        }
        println!("{label}: {placed:?} ({hinted} pods placed by a hint)");
        placements.push((label, placed));
    }

    let ours = format!("batching-tether-{}", unique_suffix());
    let placed = burst(&client, &nodes, &ns.name, &ours, async || {
        apply_profile(&client, &ours, profile(&ours)).await
    })
    .await?;
    kubectl_ok(&["delete", "sp", &ours], None)?;
    let hinted = tether_metric(&format!(
        r#"scheduler_batch_attempts_total{{profile="{ours}",result="hint_used"}}"#
    ))?
    .unwrap_or(0.0);
    assert!(
        hinted >= (BURST / 2) as f64,
        "tether batched most of the burst (hints used: {hinted})"
    );
    println!("tether: {placed:?} ({hinted} pods placed by a hint)");
    placements.push(("tether", placed));

    for (label, placed) in &placements {
        assert_eq!(
            placed, &expected,
            "{label} packs the burst by score, the fullest node first"
        );
    }
    nodes.delete().await?;
    ns.delete().await
}
