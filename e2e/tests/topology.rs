//! Topology-aware workload placement (Kubernetes 1.38, TopologyAwareWorkloadScheduling, beta
//! and off by default; the local control plane turns it on from 1.38): a gang whose PodGroup
//! names a topology key lands inside one domain of it, chosen as kube-scheduler chooses, side
//! by side with kube-scheduler run with the gate; and waits, saying why, when no domain can
//! hold it. Before 1.38 there is nothing to compare: the tests pass at once.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, unique_suffix, wait_bound, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(60);
const RACK: &str = "e2e.tether.dev/rack";
const GATES: &[&str] = &[
    "GenericWorkload=true",
    "TopologyAwareWorkloadScheduling=true",
];

/// Nodes with their rack (None: no label), CPUs and memory; the rack values are made unique to
/// the run (another test's nodes never join a domain).
async fn racks(
    client: &kube::Client,
    test: &str,
    layout: &[(Option<&str>, &str, &str)],
) -> anyhow::Result<TestNodes> {
    let run = unique_suffix();
    let layout: Vec<(Option<String>, String, String)> = layout
        .iter()
        .map(|(rack, cpu, memory)| {
            (
                rack.map(|r| format!("{r}-{run}")),
                cpu.to_string(),
                memory.to_string(),
            )
        })
        .collect();
    TestNodes::create(client, test, layout.len(), "1", |i, node| {
        let (rack, cpu, memory) = &layout[i];
        if let Some(rack) = rack {
            node["metadata"]["labels"][RACK] = json!(rack);
        }
        for field in ["allocatable", "capacity"] {
            node["status"][field]["cpu"] = json!(cpu);
            node["status"][field]["memory"] = json!(memory);
        }
    })
    .await
}

/// A gang `name` of `count` pods asking for `cpu` and `memory` each, minCount `count`, to be
/// placed within one rack.
fn rack_gang(
    ns: &str,
    nodes: &TestNodes,
    scheduler: &str,
    name: &str,
    count: usize,
    (cpu, memory): (&str, &str),
) -> anyhow::Result<()> {
    apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"schedulingPolicy": {"gang": {"minCount": count}},
                 "schedulingConstraints": {"topology": [{"key": RACK}]}},
    }))?;
    for i in 0..count {
        let mut spec = json!({
            "schedulerName": scheduler,
            "terminationGracePeriodSeconds": 0,
            "schedulingGroup": {"podGroupName": name},
            "containers": [{"name": "c", "image": "pause",
                            "resources": {"requests": {"cpu": cpu, "memory": memory}}}],
        });
        nodes.isolate(&mut spec);
        apply(json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": format!("{name}-{i}"), "namespace": ns}, "spec": spec}))?;
    }
    Ok(())
}

/// The PodGroup's `PodGroupInitiallyScheduled` condition with `status`: (reason, message).
async fn condition(
    client: &kube::Client,
    ns: &str,
    name: &str,
    status: &str,
) -> anyhow::Result<(String, String)> {
    let groups: Api<k8s_openapi::api::scheduling::v1beta1::PodGroup> =
        Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("PodGroup {name} PodGroupInitiallyScheduled={status}"),
        TIMEOUT,
        || async {
            Ok(groups
                .get(name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodGroupInitiallyScheduled" && c.status == status)
                .map(|c| (c.reason, c.message)))
        },
    )
    .await
}

/// What a scheduler did with the two scenarios below.
#[derive(Debug, PartialEq)]
struct Placed {
    /// Scenario 1: how many of the gang's pods each node (by index) got.
    per_node: BTreeMap<usize, usize>,
    /// Scenario 1: the condition.
    placed: (String, String),
    /// Scenario 2: the condition.
    refused: (String, String),
    /// Scenario 2: each member's PodScheduled=False message.
    members: BTreeMap<String, String>,
}

/// Scenario 1: racks A (two nodes of 2 CPUs, 4Gi), B (two of 4 CPUs, 8Gi) and C (two of 1 CPU,
/// 2Gi), and a node of no rack (16 CPUs, 64Gi); a gang of four pods of 1 CPU and 1Gi fits in A
/// and in B, not in C: A is the fuller placement (NodeResourcesFit's MostAllocated over the
/// rack), so all four land on A's two nodes (without the constraint they would spread out).
/// Scenario 2: racks A and B of two nodes of 2 CPUs each, and a node of no rack of 16 CPUs; a
/// gang of three pods of 2 CPUs fits in no rack: nothing is bound, and the group and its pods
/// say why.
async fn placed_within_a_rack(scheduler: &str, test: &str) -> anyhow::Result<Placed> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, test).await?;
    let nodes = racks(
        &client,
        test,
        &[
            (Some("a"), "2", "4Gi"),
            (Some("a"), "2", "4Gi"),
            (Some("b"), "4", "8Gi"),
            (Some("b"), "4", "8Gi"),
            (Some("c"), "1", "2Gi"),
            (Some("c"), "1", "2Gi"),
            (None, "16", "64Gi"),
        ],
    )
    .await?;
    rack_gang(&ns.name, &nodes, scheduler, "train", 4, ("1", "1Gi"))?;
    let mut per_node = BTreeMap::new();
    for i in 0..4 {
        let node = wait_bound(&client, &ns.name, &format!("train-{i}"), TIMEOUT).await?;
        if let Some(index) = nodes.names.iter().position(|n| *n == node) {
            *per_node.entry(index).or_insert(0) += 1;
        }
    }
    let placed = condition(&client, &ns.name, "train", "True").await?;
    nodes.delete().await?;

    let nodes = racks(
        &client,
        &format!("{test}-2"),
        &[
            (Some("a"), "2", "4Gi"),
            (Some("a"), "2", "4Gi"),
            (Some("b"), "2", "4Gi"),
            (Some("b"), "2", "4Gi"),
            (None, "16", "64Gi"),
        ],
    )
    .await?;
    rack_gang(&ns.name, &nodes, scheduler, "wide", 3, ("2", "1Gi"))?;
    let refused = condition(&client, &ns.name, "wide", "False").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut members = BTreeMap::new();
    for i in 0..3 {
        let name = format!("wide-{i}");
        let message = wait_for(&format!("{name}'s PodScheduled=False"), TIMEOUT, || async {
            Ok(pods
                .get(&name)
                .await?
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message))
        })
        .await?;
        members.insert(name, message);
    }
    ns.delete().await?;
    nodes.delete().await?;
    Ok(Placed {
        per_node,
        placed,
        refused,
        members,
    })
}

/// Side by side with kube-scheduler 1.38 (GenericWorkload and TopologyAwareWorkloadScheduling
/// on): the same rack chosen, the same nodes, the same conditions and messages.
#[tokio::test]
async fn a_gang_lands_within_one_rack_as_kube_scheduler_places_it() -> anyhow::Result<()> {
    let client = client().await?;
    if tether_e2e::compared_minor(&client).await? < 38 {
        return Ok(());
    }
    let reference = format!("topology-ref-{}", unique_suffix());
    let kube = ReferenceScheduler::start_gated(
        "kube-scheduler-topology",
        json!({"profiles": [{"schedulerName": reference}]}),
        GATES,
    )?;
    let upstream = placed_within_a_rack(&reference, "topology-ref").await?;
    drop(kube);
    println!("kube-scheduler: {upstream:?}");
    assert_eq!(
        upstream.per_node,
        BTreeMap::from([(0, 2), (1, 2)]),
        "the reference itself packs rack A"
    );

    let ours = format!("topology-tether-{}", unique_suffix());
    apply_profile(&client, &ours, json!({"schedulerName": ours})).await?;
    let tether = placed_within_a_rack(&ours, "topology-tether").await?;
    println!("tether: {tether:?}");
    tether_e2e::kubectl_ok(&["delete", "sp", &ours], None)?;
    assert_eq!(tether, upstream);
    Ok(())
}
