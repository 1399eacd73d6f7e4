//! CompositePodGroups (Kubernetes 1.38, the CompositePodGroup gate, beta and off by default;
//! the local control plane turns it on from 1.38): a JobSet-shaped hierarchy (a root
//! CompositePodGroup bound to one rack, a leader PodGroup and a workers PodGroup under it) is
//! placed by its rules, side by side with kube-scheduler run with the gates; and waits, each
//! group saying why, when no rack holds it. Before 1.38 there is nothing to compare: the tests
//! pass at once.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::Api;
use serde_json::json;
use tether_e2e::groups::{delete_priority_classes, let_go, pinned, priority_classes};
use tether_e2e::{TestNamespace, TestNodes, apply, client, unique_suffix, wait_bound, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);
/// The rack label's key: made unique to each scenario (`<RACK>-<run>`), so that no other
/// test's nodes make placements of it.
const RACK: &str = "e2e.tether.dev/rack";
const GATES: &[&str] = &[
    "GenericWorkload=true",
    "TopologyAwareWorkloadScheduling=true",
    "CompositePodGroup=true",
];

/// Nodes with their rack, CPUs and memory, and the rack label's key (unique to the run).
async fn racks(
    client: &kube::Client,
    test: &str,
    layout: &[(&str, &str, &str)],
) -> anyhow::Result<(TestNodes, String)> {
    let key = format!("{RACK}-{}", unique_suffix());
    let nodes = TestNodes::create(client, test, layout.len(), "1", |i, node| {
        let (rack, cpu, memory) = layout[i];
        node["metadata"]["labels"][key.as_str()] = json!(rack);
        for field in ["allocatable", "capacity"] {
            node["status"][field]["cpu"] = json!(cpu);
            node["status"][field]["memory"] = json!(memory);
        }
    })
    .await?;
    Ok((nodes, key))
}

/// A JobSet's shape: CompositePodGroup `job` (a gang of both children, within one rack), with
/// PodGroup `{job}-leader` (one pod of `leader` CPUs) and `{job}-workers` (`workers` pods of
/// `worker` CPUs, all needed), every pod asking for 1Gi.
fn job_set(
    ns: &str,
    (nodes, key): (&TestNodes, &str),
    (scheduler, class): (&str, Option<&str>),
    job: &str,
    leader: &str,
    (workers, worker): (usize, &str),
) -> anyhow::Result<()> {
    let workload = json!({"workloadName": job, "templateName": "replica"});
    let mut root = json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup",
        "metadata": {"name": job, "namespace": ns},
        "spec": {"workloadRef": workload,
                 "schedulingPolicy": {"gang": {"minGroupCount": 2}},
                 "schedulingConstraints": {"topology": [{"key": key}]}},
    });
    if let Some(class) = class {
        root["spec"]["priorityClassName"] = json!(class);
    }
    apply(root)?;
    for (group, count, cpu) in [("leader", 1, leader), ("workers", workers, worker)] {
        let name = format!("{job}-{group}");
        let mut pod_group = json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": ns},
            "spec": {"parentCompositePodGroupName": job, "workloadRef": workload,
                     "schedulingPolicy": {"gang": {"minCount": count}}},
        });
        if let Some(class) = class {
            pod_group["spec"]["priorityClassName"] = json!(class);
        }
        apply(pod_group)?;
        for i in 0..count {
            let mut spec = json!({
                "schedulerName": scheduler,
                "terminationGracePeriodSeconds": 0,
                "schedulingGroup": {"podGroupName": name},
                "containers": [{"name": "c", "image": "pause",
                                "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}],
            });
            if let Some(class) = class {
                spec["priorityClassName"] = json!(class);
            }
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
    let (nodes, key) = racks(
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
    job_set(
        &ns.name,
        (&nodes, &key),
        (scheduler, None),
        "job",
        "2",
        (3, "1"),
    )?;
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
        placed_racks.insert(pod.clone(), labels.get(&key).cloned().unwrap_or_default());
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

    let (nodes, key) = racks(
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
    job_set(
        &ns.name,
        (&nodes, &key),
        (scheduler, None),
        "wide",
        "1",
        (3, "2"),
    )?;
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
    let (upstream, tether) =
        tether_e2e::reference::side_by_side("composite", GATES, |scheduler, test| async move {
            placed_by_its_rules(&scheduler, &test).await
        })
        .await?;
    println!("kube-scheduler: {upstream:?}\ntether: {tether:?}");
    assert!(
        upstream.racks.values().all(|r| r == "b"),
        "the reference itself packs rack B: {:?}",
        upstream.racks
    );
    assert_eq!(tether, upstream);
    Ok(())
}

/// What a hierarchy's preemption did, as the user sees it.
#[derive(Debug, PartialEq)]
struct Preempted {
    /// How many lower pods were evicted, and whether all in one rack.
    victims: usize,
    in_one_rack: bool,
    /// Their `DisruptionTarget` condition: (reason, message with the scheduler's name as
    /// `<scheduler>`).
    disruption: BTreeSet<(String, String)>,
    /// The CompositePodGroup's condition while they terminate.
    waiting: (String, String),
    /// Whether every pod of the hierarchy was bound in the rack the victims left.
    landed_there: bool,
    /// The CompositePodGroup's condition then.
    placed: (String, String),
}

/// Racks A and B of two nodes of 2 CPUs; a lower pod of 1 CPU pinned to each node (held by a
/// finalizer once evicted). A higher JobSet-shaped hierarchy (a leader and three workers of 1
/// CPU, within one rack) fits in no rack as it is: it preempts as one unit, the two lower pods
/// of one rack and no more, and lands in that rack once they are gone.
async fn hierarchy_preempts(scheduler: &str, test: &str) -> anyhow::Result<Preempted> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, test).await?;
    let (nodes, key) = racks(
        &client,
        test,
        &[
            ("a", "2", "4Gi"),
            ("a", "2", "4Gi"),
            ("b", "2", "4Gi"),
            ("b", "2", "4Gi"),
        ],
    )
    .await?;
    let classes = [("low", 100), ("high", 1000)];
    priority_classes(test, &classes)?;
    let low = format!("{test}-low");
    let lows: Vec<String> = (0..4).map(|i| format!("low-{i}")).collect();
    for (i, name) in lows.iter().enumerate() {
        pinned(&ns.name, &nodes, name, (None, &low, "1"), i)?;
    }
    for name in &lows {
        wait_bound(&client, &ns.name, name, TIMEOUT).await?;
    }
    let high = format!("{test}-high");
    job_set(
        &ns.name,
        (&nodes, &key),
        (scheduler, Some(&high)),
        "job",
        "1",
        (3, "1"),
    )?;

    // The attempt that preempts says so first: read its words before a later attempt (the
    // victims' updates requeue the hierarchy while they terminate) says `ongoing preemption`.
    let waiting = condition(
        &ns.name,
        ("CompositePodGroup", "job"),
        ("CompositePodGroupInitiallyScheduled", "False"),
    )
    .await?;
    // The victims terminate (held by the finalizer).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let victims: Vec<(String, usize, (String, String))> =
        wait_for("the victims terminating", TIMEOUT, || async {
            let mut found = Vec::new();
            for (i, name) in lows.iter().enumerate() {
                let pod = pods.get(name).await?;
                if pod.metadata.deletion_timestamp.is_none() {
                    continue;
                }
                let Some(c) = pod
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "DisruptionTarget")
                else {
                    return Ok(None);
                };
                let message = c
                    .message
                    .unwrap_or_default()
                    .replace(scheduler, "<scheduler>");
                found.push((name.clone(), i, (c.reason.unwrap_or_default(), message)));
            }
            Ok((found.len() >= 2).then_some(found))
        })
        .await?;
    let victim_nodes: BTreeSet<usize> = victims.iter().map(|(_, i, _)| *i).collect();
    // Nodes 0 and 1 are rack A, 2 and 3 rack B.
    let in_one_rack = victim_nodes.iter().all(|i| *i < 2) || victim_nodes.iter().all(|i| *i >= 2);
    let_go(&ns.name, lows.iter().map(String::as_str));
    let mut landed_there = true;
    for pod in [
        "job-leader-0",
        "job-workers-0",
        "job-workers-1",
        "job-workers-2",
    ] {
        let node = wait_bound(&client, &ns.name, pod, TIMEOUT).await?;
        let index = nodes.names.iter().position(|n| *n == node);
        landed_there &= index.is_some_and(|i| victim_nodes.iter().any(|v| v / 2 == i / 2));
    }
    let placed = condition(
        &ns.name,
        ("CompositePodGroup", "job"),
        ("CompositePodGroupInitiallyScheduled", "True"),
    )
    .await?;
    ns.delete().await?;
    nodes.delete().await?;
    delete_priority_classes(test, &classes)?;
    Ok(Preempted {
        victims: victims.len(),
        in_one_rack,
        disruption: victims.into_iter().map(|(_, _, d)| d).collect(),
        waiting,
        landed_there,
        placed,
    })
}

/// Side by side with kube-scheduler 1.38 (the gates on): a hierarchy that fits nowhere evicts
/// the fewest lower pods, all within the one rack it then lands in, with the same words.
#[tokio::test]
async fn a_hierarchy_preempts_as_one_unit_as_kube_scheduler_does() -> anyhow::Result<()> {
    let client = client().await?;
    if tether_e2e::compared_minor(&client).await? < 38 {
        return Ok(());
    }
    let (upstream, tether) =
        tether_e2e::reference::side_by_side("composite-pre", GATES, |scheduler, test| async move {
            hierarchy_preempts(&scheduler, &test).await
        })
        .await?;
    println!("kube-scheduler: {upstream:?}\ntether: {tether:?}");
    assert_eq!(
        (
            upstream.victims,
            upstream.in_one_rack,
            upstream.landed_there
        ),
        (2, true, true),
        "the reference itself"
    );
    assert_eq!(tether, upstream);
    Ok(())
}
