//! CompositePodGroups (Kubernetes 1.38, the CompositePodGroup gate, beta and off by default;
//! the local control plane turns it on from 1.38): a JobSet-shaped hierarchy (a root
//! CompositePodGroup bound to one rack, a leader PodGroup and a workers PodGroup under it) is
//! placed by its rules, side by side with kube-scheduler run with the gates; and waits, each
//! group saying why, when no rack holds it. Before 1.38 there is nothing to compare: the tests
//! pass at once.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
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
    "CompositePodGroup=true",
];

/// Nodes with their rack (made unique to the run), CPUs and memory.
async fn racks(
    client: &kube::Client,
    test: &str,
    layout: &[(&str, &str, &str)],
) -> anyhow::Result<(TestNodes, String)> {
    let run = unique_suffix();
    let layout: Vec<(String, String, String)> = layout
        .iter()
        .map(|(rack, cpu, memory)| (format!("{rack}-{run}"), cpu.to_string(), memory.to_string()))
        .collect();
    let nodes = TestNodes::create(client, test, layout.len(), "1", |i, node| {
        let (rack, cpu, memory) = &layout[i];
        node["metadata"]["labels"][RACK] = json!(rack);
        for field in ["allocatable", "capacity"] {
            node["status"][field]["cpu"] = json!(cpu);
            node["status"][field]["memory"] = json!(memory);
        }
    })
    .await?;
    Ok((nodes, run))
}

/// A JobSet's shape: CompositePodGroup `job` (a gang of both children, within one rack), with
/// PodGroup `{job}-leader` (one pod of `leader` CPUs) and `{job}-workers` (`workers` pods of
/// `worker` CPUs, all needed), every pod asking for 1Gi.
fn job_set(
    ns: &str,
    nodes: &TestNodes,
    scheduler: &str,
    job: &str,
    leader: &str,
    (workers, worker): (usize, &str),
) -> anyhow::Result<()> {
    let workload = json!({"workloadName": job, "templateName": "replica"});
    apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup",
        "metadata": {"name": job, "namespace": ns},
        "spec": {"workloadRef": workload,
                 "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                 "schedulingConstraints": {"topology": [{"key": RACK}]}},
    }))?;
    for (group, count, cpu) in [("leader", 1, leader), ("workers", workers, worker)] {
        let name = format!("{job}-{group}");
        apply(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parentCompositePodGroupName": job, "workloadRef": workload,
                     "schedulingPolicy": {"gang": {"minCount": count}}},
        }))?;
        for i in 0..count {
            let mut spec = json!({
                "schedulerName": scheduler,
                "terminationGracePeriodSeconds": 0,
                "schedulingGroup": {"podGroupName": name},
                "containers": [{"name": "c", "image": "pause",
                                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            });
            nodes.isolate(&mut spec);
            apply(json!({"apiVersion": "v1", "kind": "Pod",
                         "metadata": {"name": format!("{name}-{i}"), "namespace": ns},
                         "spec": spec}))?;
        }
    }
    Ok(())
}

/// The `type` condition with `status` on `kind` `name`: (reason, message).
async fn condition(
    ns: &str,
    (kind, name): (&str, &str),
    (type_, status): (&str, &str),
) -> anyhow::Result<(String, String)> {
    let client = client().await?;
    let resource = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "scheduling.k8s.io",
        "v1beta1",
        kind,
    ));
    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(client, ns, &resource);
    wait_for(
        &format!("{kind} {name} {type_}={status}"),
        TIMEOUT,
        || async {
            let object = api.get(name).await?;
            let found = object.data["status"]["conditions"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|c| c["type"] == type_ && c["status"] == status)
                .map(|c| {
                    (
                        c["reason"].as_str().unwrap_or_default().to_string(),
                        c["message"].as_str().unwrap_or_default().to_string(),
                    )
                });
            Ok(found)
        },
    )
    .await
}

/// What a scheduler did with the two scenarios below.
#[derive(Debug, PartialEq)]
struct Placed {
    /// Scenario 1: the rack (by name, the run's suffix cut) of each pod.
    racks: BTreeMap<String, String>,
    /// Scenario 1: the CompositePodGroup's and each PodGroup's condition.
    placed: Vec<(String, String)>,
    /// Scenario 2: the same, False.
    refused: Vec<(String, String)>,
    /// Scenario 2: how many pods of each PodGroup say their parent group is unschedulable.
    parent_said: BTreeMap<String, usize>,
}

/// Scenario 1: rack A (two nodes of 2 CPUs, 2Gi), rack B (two of 3 CPUs, 3Gi) and rack C (one
/// of 8 CPUs, 8Gi); a leader of 2 CPUs and three workers of 1 CPU (5 CPUs, 4Gi) fit in B and
/// C, not in A; B is the fuller rack, so all four land in B. Scenario 2: racks A and B of two
/// nodes of 2 CPUs each; a leader of 1 CPU and three workers of 2 CPUs fit in no rack: nothing
/// is bound, and each group says why.
async fn placed_by_its_rules(scheduler: &str, test: &str) -> anyhow::Result<Placed> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, test).await?;
    let (nodes, run) = racks(
        &client,
        test,
        &[
            ("a", "2", "2Gi"),
            ("a", "2", "2Gi"),
            ("b", "3", "3Gi"),
            ("b", "3", "3Gi"),
            ("c", "8", "8Gi"),
        ],
    )
    .await?;
    job_set(&ns.name, &nodes, scheduler, "job", "2", (3, "1"))?;
    let node_api: Api<Node> = Api::all(client.clone());
    let mut placed_racks = BTreeMap::new();
    let mut pods_names = vec!["job-leader-0".to_string()];
    pods_names.extend((0..3).map(|i| format!("job-workers-{i}")));
    for pod in &pods_names {
        let node = wait_bound(&client, &ns.name, pod, TIMEOUT).await?;
        let labels = node_api
            .get(&node)
            .await?
            .metadata
            .labels
            .unwrap_or_default();
        let rack = labels.get(RACK).cloned().unwrap_or_default();
        placed_racks.insert(pod.clone(), rack.replace(&format!("-{run}"), ""));
    }
    let mut placed = vec![
        condition(
            &ns.name,
            ("CompositePodGroup", "job"),
            ("CompositePodGroupInitiallyScheduled", "True"),
        )
        .await?,
    ];
    for group in ["job-leader", "job-workers"] {
        placed.push(
            condition(
                &ns.name,
                ("PodGroup", group),
                ("PodGroupInitiallyScheduled", "True"),
            )
            .await?,
        );
    }
    nodes.delete().await?;

    let (nodes, _) = racks(
        &client,
        &format!("{test}-2"),
        &[
            ("a", "2", "4Gi"),
            ("a", "2", "4Gi"),
            ("b", "2", "4Gi"),
            ("b", "2", "4Gi"),
        ],
    )
    .await?;
    job_set(&ns.name, &nodes, scheduler, "wide", "1", (3, "2"))?;
    let mut refused = vec![
        condition(
            &ns.name,
            ("CompositePodGroup", "wide"),
            ("CompositePodGroupInitiallyScheduled", "False"),
        )
        .await?,
    ];
    for group in ["wide-leader", "wide-workers"] {
        refused.push(
            condition(
                &ns.name,
                ("PodGroup", group),
                ("PodGroupInitiallyScheduled", "False"),
            )
            .await?,
        );
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut parent_said = BTreeMap::new();
    let mut names = vec![("wide-leader", "wide-leader-0".to_string())];
    names.extend((0..3).map(|i| ("wide-workers", format!("wide-workers-{i}"))));
    for (group, name) in names {
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
        if message == format!("parent pod group {group:?} is unschedulable") {
            *parent_said.entry(group.to_string()).or_insert(0) += 1;
        }
        let bound = pods.get(&name).await?.spec.and_then(|s| s.node_name);
        anyhow::ensure!(bound.is_none(), "{name} was bound to {bound:?}");
    }
    ns.delete().await?;
    nodes.delete().await?;
    Ok(Placed {
        racks: placed_racks,
        placed,
        refused,
        parent_said,
    })
}

/// Side by side with kube-scheduler 1.38 (GenericWorkload, TopologyAwareWorkloadScheduling and
/// CompositePodGroup on): the same rack for every pod, the same conditions on the three groups,
/// the same members saying their group is unschedulable.
#[tokio::test]
async fn a_job_set_shaped_hierarchy_lands_as_kube_scheduler_places_it() -> anyhow::Result<()> {
    let client = client().await?;
    if tether_e2e::compared_minor(&client).await? < 38 {
        return Ok(());
    }
    let reference = format!("composite-ref-{}", unique_suffix());
    let kube = ReferenceScheduler::start_gated(
        "kube-scheduler-composite",
        json!({"profiles": [{"schedulerName": reference}]}),
        GATES,
    )?;
    let upstream = placed_by_its_rules(&reference, "composite-ref").await?;
    drop(kube);
    println!("kube-scheduler: {upstream:?}");
    assert!(
        upstream.racks.values().all(|r| r == "b"),
        "the reference itself packs rack B: {:?}",
        upstream.racks
    );

    let ours = format!("composite-tether-{}", unique_suffix());
    apply_profile(&client, &ours, json!({"schedulerName": ours})).await?;
    let tether = placed_by_its_rules(&ours, "composite-tether").await?;
    println!("tether: {tether:?}");
    tether_e2e::kubectl_ok(&["delete", "sp", &ours], None)?;
    assert_eq!(tether, upstream);
    Ok(())
}
