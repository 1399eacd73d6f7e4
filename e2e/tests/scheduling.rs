//! The embedded scheduler on a real cluster: pods land only where kube-scheduler would allow
//! them, failures are reported as kube-scheduler reports them, and pods of other schedulers are
//! left alone. Each test has its own namespace and its own tainted kwok nodes.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use tether_e2e::{TestNamespace, TestNodes, client, events_for, wait_bound, wait_event, wait_for};

const BIND_TIMEOUT: Duration = Duration::from_secs(30);

/// Creates a pod for tether with `spec` (containers default to one `pause` container),
/// isolated onto `nodes`.
async fn create_pod(
    client: &Client,
    ns: &str,
    name: &str,
    nodes: &TestNodes,
    spec: Value,
) -> anyhow::Result<Pod> {
    create_labelled_pod(client, ns, name, &[], nodes, spec).await
}

/// Like [`create_pod`], with extra labels.
async fn create_labelled_pod(
    client: &Client,
    ns: &str,
    name: &str,
    labels: &[(&str, &str)],
    nodes: &TestNodes,
    mut spec: Value,
) -> anyhow::Result<Pod> {
    if spec.get("containers").is_none() {
        spec["containers"] = json!([{"name": "c", "image": "pause"}]);
    }
    if spec.get("schedulerName").is_none() {
        spec["schedulerName"] = json!("tether-scheduler");
    }
    nodes.isolate(&mut spec);
    let mut all_labels = json!({"app": name});
    for (k, v) in labels {
        all_labels[*k] = json!(v);
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": name, "namespace": ns, "labels": all_labels},
        "spec": spec,
    }))?;
    Ok(Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?)
}

fn cpu(req: &str) -> Value {
    json!([{"name": "c", "image": "pause", "resources": {"requests": {"cpu": req}}}])
}

/// Waits for a FailedScheduling event on the pod and the PodScheduled=False condition; returns the message.
async fn wait_unschedulable(client: &Client, ns: &str, pod: &str) -> anyhow::Result<String> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("FailedScheduling on {ns}/{pod}"),
        BIND_TIMEOUT,
        || {
            let pods = pods.clone();
            let client = client.clone();
            async move {
                let p = pods.get(pod).await?;
                let condition = p
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| {
                        c.type_ == "PodScheduled"
                            && c.status == "False"
                            && c.reason.as_deref() == Some("Unschedulable")
                    });
                let events = events_for(&client, ns, pod, "FailedScheduling").await?;
                let (Some(c), Some(e)) = (condition, events.last()) else {
                    return Ok(None);
                };
                // The same message once the latest attempt has written both (another attempt
                // may be between its condition and its event); an Event's note is cut to the
                // API's 1 KiB limit.
                let full = c.message.unwrap_or_default();
                let same = match e.strip_suffix('…') {
                    Some(head) => full.starts_with(head),
                    None => full == *e,
                };
                if !same {
                    anyhow::bail!("condition and latest event differ:\n{full}\n{e}");
                }
                Ok(Some(full))
            }
        },
    )
    .await
}

#[tokio::test]
async fn resources_taints_and_node_affinity_decide_where_pods_land() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "placement").await?;
    // node 0: 1 CPU; node 1: 8 CPUs, tainted dedicated=gpu; node 2: 8 CPUs, labelled disk=ssd.
    let nodes = TestNodes::create(&client, "placement", 3, "8", |i, n| match i {
        0 => n["status"]["allocatable"]["cpu"] = json!("1"),
        1 => n["spec"]["taints"]
            .as_array_mut()
            .expect("taints")
            .push(json!({"key": "dedicated", "value": "gpu", "effect": "NoSchedule"})),
        _ => n["metadata"]["labels"]["disk"] = json!("ssd"),
    })
    .await?;
    let [small, gpu, ssd] = [&nodes.names[0], &nodes.names[1], &nodes.names[2]];

    // 2 CPUs fit only on the untainted big node.
    create_pod(
        &client,
        &ns.name,
        "big",
        &nodes,
        json!({"containers": cpu("2")}),
    )
    .await?;
    assert_eq!(
        &wait_bound(&client, &ns.name, "big", BIND_TIMEOUT).await?,
        ssd
    );

    // A toleration plus a nodeSelector reach the tainted node.
    create_pod(
        &client,
        &ns.name,
        "tolerant",
        &nodes,
        json!({"nodeSelector": {"kubernetes.io/hostname": gpu}, "tolerations": [{"key": "dedicated", "operator": "Equal", "value": "gpu", "effect": "NoSchedule"}]}),
    )
    .await?;
    assert_eq!(
        &wait_bound(&client, &ns.name, "tolerant", BIND_TIMEOUT).await?,
        gpu
    );

    // Required node affinity.
    create_pod(
        &client,
        &ns.name,
        "affine",
        &nodes,
        json!({"affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [{"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]}]}}}}),
    )
    .await?;
    assert_eq!(
        &wait_bound(&client, &ns.name, "affine", BIND_TIMEOUT).await?,
        ssd
    );

    // Without a toleration, the tainted node is never picked; the small node takes 500m.
    for i in 0..4 {
        let name = format!("small-{i}");
        create_pod(
            &client,
            &ns.name,
            &name,
            &nodes,
            json!({"containers": cpu("100m"), "nodeSelector": {"kubernetes.io/hostname": small}}),
        )
        .await?;
        assert_eq!(
            &wait_bound(&client, &ns.name, &name, BIND_TIMEOUT).await?,
            small
        );
    }
    create_pod(
        &client,
        &ns.name,
        "untolerated",
        &nodes,
        json!({"nodeSelector": {"kubernetes.io/hostname": gpu}}),
    )
    .await?;
    let message = wait_unschedulable(&client, &ns.name, "untolerated").await?;
    assert!(message.starts_with("0/"), "got: {message}");
    assert!(
        message.contains("node(s) had untolerated taint(s)"),
        "got: {message}"
    );

    // kube-scheduler's words, then how the node won (the only one that fits here).
    let assigned = format!(
        "Successfully assigned {}/big to {ssd} (the only feasible node)",
        ns.name
    );
    wait_event(&client, &ns.name, "big", "Scheduled", BIND_TIMEOUT, |e| {
        e == assigned
    })
    .await?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn host_ports_and_anti_affinity_keep_pods_apart() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "apart").await?;
    let nodes = TestNodes::create(&client, "apart", 2, "8", |_, _| {}).await?;
    let port = json!([{"name": "c", "image": "pause", "ports": [{"containerPort": 80, "hostPort": 8080}]}]);
    create_pod(
        &client,
        &ns.name,
        "port-a",
        &nodes,
        json!({"containers": port}),
    )
    .await?;
    let a = wait_bound(&client, &ns.name, "port-a", BIND_TIMEOUT).await?;
    create_pod(
        &client,
        &ns.name,
        "port-b",
        &nodes,
        json!({"containers": port}),
    )
    .await?;
    let b = wait_bound(&client, &ns.name, "port-b", BIND_TIMEOUT).await?;
    assert_ne!(a, b, "two pods with host port 8080 share a node");
    create_pod(
        &client,
        &ns.name,
        "port-c",
        &nodes,
        json!({"containers": port}),
    )
    .await?;
    let message = wait_unschedulable(&client, &ns.name, "port-c").await?;
    assert!(
        message.contains("2 node(s) didn't have free ports for the requested pod ports"),
        "got: {message}"
    );

    let anti = |name: &str| {
        json!({"affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"group": "spread"}}, "topologyKey": "kubernetes.io/hostname"}
        ]}}, "containers": [{"name": name, "image": "pause"}]})
    };
    let mut placed = Vec::new();
    for i in 0..2 {
        let name = format!("anti-{i}");
        create_labelled_pod(
            &client,
            &ns.name,
            &name,
            &[("group", "spread")],
            &nodes,
            anti(&name),
        )
        .await?;
        placed.push(wait_bound(&client, &ns.name, &name, BIND_TIMEOUT).await?);
    }
    assert_ne!(placed[0], placed[1]);
    create_labelled_pod(
        &client,
        &ns.name,
        "anti-2",
        &[("group", "spread")],
        &nodes,
        anti("anti-2"),
    )
    .await?;
    let message = wait_unschedulable(&client, &ns.name, "anti-2").await?;
    assert!(
        message.contains("2 node(s) didn't match pod anti-affinity rules")
            || message.contains("2 node(s) didn't satisfy existing pods anti-affinity rules"),
        "got: {message}"
    );
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn topology_spread_balances_zones() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "spread").await?;
    let nodes = TestNodes::create(&client, "spread", 3, "8", |_, _| {}).await?;
    for i in 0..6 {
        let name = format!("s-{i}");
        let spec = json!({"topologySpreadConstraints": [{"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"tier": "web"}}}]});
        create_labelled_pod(&client, &ns.name, &name, &[("tier", "web")], &nodes, spec).await?;
        wait_bound(&client, &ns.name, &name, BIND_TIMEOUT).await?;
    }
    let pods = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .list(&ListParams::default())
        .await?;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in pods.items {
        *per_node
            .entry(p.spec.and_then(|s| s.node_name).unwrap_or_default())
            .or_default() += 1;
    }
    assert_eq!(
        per_node.values().copied().collect::<Vec<_>>(),
        vec![2, 2, 2],
        "per node (one zone each): {per_node:?}"
    );
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn an_unschedulable_pod_is_bound_soon_after_a_fitting_node_appears() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "waits").await?;
    let nodes = TestNodes::create(&client, "waits", 2, "2", |_, _| {}).await?;
    create_pod(
        &client,
        &ns.name,
        "huge",
        &nodes,
        json!({"containers": cpu("6")}),
    )
    .await?;
    let message = wait_unschedulable(&client, &ns.name, "huge").await?;
    assert!(message.starts_with("0/"), "got: {message}");
    assert!(message.contains("2 Insufficient cpu"), "got: {message}");

    // A node that fits joins: the pod is bound within seconds.
    let bigger = TestNodes::create(&client, "waits-big", 1, "8", |_, n| {
        n["metadata"]["labels"][tether_e2e::TEST_KEY] = json!("placeholder");
    })
    .await?;
    // Give the new node this test's isolation label and taint so the pod may use it.
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    node_api
        .patch(
            &bigger.names[0],
            &kube::api::PatchParams::default(),
            &kube::api::Patch::Merge(json!({"metadata": {"labels": {tether_e2e::TEST_KEY: nodes.test}}, "spec": {"taints": [{"key": tether_e2e::TEST_KEY, "value": nodes.test, "effect": "NoSchedule"}]}})),
        )
        .await?;
    let node = wait_bound(&client, &ns.name, "huge", Duration::from_secs(15)).await?;
    assert_eq!(node, bigger.names[0]);
    bigger.delete().await?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn three_hundred_pods_fill_twenty_nodes_without_overcommit() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "fill").await?;
    let nodes = TestNodes::create(&client, "fill", 20, "16", |_, _| {}).await?;
    let mut spec = json!({"schedulerName": "tether-scheduler", "containers": cpu("1")});
    nodes.isolate(&mut spec);
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "fill", "namespace": ns.name},
        "spec": {"replicas": 300, "selector": {"matchLabels": {"app": "fill"}},
                 "template": {"metadata": {"labels": {"app": "fill"}}, "spec": spec}},
    });
    let deployment: k8s_openapi::api::apps::v1::Deployment = serde_json::from_value(deployment)?;
    Api::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &deployment)
        .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let bound = wait_for("300 pods bound", Duration::from_secs(120), || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels("app=fill")).await?;
            let bound: Vec<Pod> = list
                .items
                .into_iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .collect();
            Ok((bound.len() == 300).then_some(bound))
        }
    })
    .await?;
    let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
    for p in &bound {
        *per_node
            .entry(
                p.spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_default(),
            )
            .or_default() += 1;
    }
    assert!(
        per_node.keys().all(|n| nodes.names.contains(n)),
        "pods left their nodes: {per_node:?}"
    );
    assert!(
        per_node.values().all(|&n| n <= 16),
        "a node holds more than 16 one-CPU pods: {per_node:?}"
    );
    assert_eq!(per_node.values().sum::<usize>(), 300);
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn pods_of_other_schedulers_are_left_alone() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "others").await?;
    let nodes = TestNodes::create(&client, "others", 1, "8", |_, _| {}).await?;
    create_pod(
        &client,
        &ns.name,
        "theirs",
        &nodes,
        json!({"schedulerName": "someone-else"}),
    )
    .await?;
    // A pod for tether, created after, is bound: by then tether has seen the other one too.
    create_pod(&client, &ns.name, "ours", &nodes, json!({})).await?;
    wait_bound(&client, &ns.name, "ours", BIND_TIMEOUT).await?;
    let theirs = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .get("theirs")
        .await?;
    assert_eq!(theirs.spec.and_then(|s| s.node_name), None);
    assert!(
        theirs
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .all(|c| c.type_ != "PodScheduled")
    );
    assert!(
        events_for(&client, &ns.name, "theirs", "FailedScheduling")
            .await?
            .is_empty()
    );
    nodes.delete().await?;
    ns.delete().await
}

/// Pods at the API's limits get a clear result in bounded time and never hold up the others:
/// one with 5,000 tolerations, 100 required node-affinity terms of 10 expressions each, 200
/// preferred inter-pod affinity terms and 60 spread constraints, with label keys and values at
/// their maximum length, is bound; one asking for a million CPUs is refused with
/// `Insufficient cpu`; a plain pod created after them is bound meanwhile.
#[tokio::test]
async fn pods_at_the_apis_limits_get_a_clear_result_and_hold_up_no_one() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "limits").await?;
    let nodes = TestNodes::create(&client, "limits", 3, "8", |_, _| {}).await?;
    // A prefix of 253 characters (DNS labels of at most 63) and a name of 63.
    let prefix = format!(
        "{}.{}.{}.{}",
        "a".repeat(63),
        "b".repeat(63),
        "c".repeat(63),
        "d".repeat(61)
    );
    let long_key = format!("{prefix}/{}", "n".repeat(63));
    let long_value = "v".repeat(63);
    let tolerations: Vec<Value> = (0..5000)
        .map(|i| json!({"key": format!("taint-{i}"), "operator": "Exists", "effect": "NoSchedule"}))
        .collect();
    let terms: Vec<Value> = (0..100)
        .map(|t| {
            let mut expressions: Vec<Value> = (0..9)
                .map(|e| json!({"key": format!("absent-{t}-{e}"), "operator": "DoesNotExist"}))
                .collect();
            expressions.push(json!({"key": "type", "operator": "In", "values": ["kwok"]}));
            json!({"matchExpressions": expressions})
        })
        .collect();
    let preferred: Vec<Value> = (0..200)
        .map(|i| {
            json!({"weight": 1 + i % 100, "podAffinityTerm": {
            "labelSelector": {"matchLabels": {long_key.clone(): long_value.clone()}},
            "topologyKey": format!("key-{i}")}})
        })
        .collect();
    let spread: Vec<Value> = (0..60)
        .map(|i| {
            json!({"maxSkew": 1, "topologyKey": format!("spread-{i}"),
            "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": "huge"}}})
        })
        .collect();
    create_labelled_pod(
        &client,
        &ns.name,
        "huge",
        &[(long_key.as_str(), long_value.as_str())],
        &nodes,
        json!({"tolerations": tolerations,
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": terms}},
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": preferred}},
            "topologySpreadConstraints": spread}),
    )
    .await?;
    create_pod(
        &client,
        &ns.name,
        "greedy",
        &nodes,
        json!({"containers": cpu("1000000")}),
    )
    .await?;
    create_pod(&client, &ns.name, "plain", &nodes, json!({})).await?;

    wait_bound(&client, &ns.name, "plain", BIND_TIMEOUT).await?;
    wait_bound(&client, &ns.name, "huge", BIND_TIMEOUT).await?;
    let message = wait_unschedulable(&client, &ns.name, "greedy").await?;
    assert!(message.contains("Insufficient cpu"), "{message}");

    nodes.delete().await?;
    ns.delete().await
}

/// A pod created already bound (`spec.nodeName`, past every scheduler) asking for `8Ei` of
/// memory, then deleted, leaves the node's real usage counted: 40Gi in use on a 64Gi node, a
/// 30Gi pod is refused there, and a pod that fits is still scheduled (the node's scores stay
/// valid). Saturating sums forgot the 40Gi and over-committed the node.
#[tokio::test]
async fn a_huge_pod_that_comes_and_goes_leaves_the_nodes_usage_exact() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "huge").await?;
    let nodes = TestNodes::create(&client, "huge", 1, "8", |_, node| {
        node["status"]["allocatable"]["memory"] = json!("64Gi");
        node["status"]["capacity"]["memory"] = json!("64Gi");
    })
    .await?;
    let node = nodes.names[0].clone();
    let memory = |q: &str| json!([{"name": "c", "image": "pause", "resources": {"requests": {"memory": q}}}]);
    create_pod(
        &client,
        &ns.name,
        "in-use",
        &nodes,
        json!({"nodeName": node, "containers": memory("40Gi")}),
    )
    .await?;
    wait_bound(&client, &ns.name, "in-use", BIND_TIMEOUT).await?;
    create_pod(
        &client,
        &ns.name,
        "huge",
        &nodes,
        json!({"nodeName": node, "containers": memory("8Ei")}),
    )
    .await?;
    wait_bound(&client, &ns.name, "huge", BIND_TIMEOUT).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods.delete("huge", &kube::api::DeleteParams::default().grace_period(0))
        .await?;
    wait_for("huge gone", BIND_TIMEOUT, || {
        let pods = pods.clone();
        async move { Ok(pods.get_opt("huge").await?.is_none().then_some(())) }
    })
    .await?;

    create_pod(
        &client,
        &ns.name,
        "too-big",
        &nodes,
        json!({"containers": memory("30Gi")}),
    )
    .await?;
    let why = wait_unschedulable(&client, &ns.name, "too-big").await?;
    assert!(why.contains("Insufficient memory"), "{why}");
    create_pod(
        &client,
        &ns.name,
        "fits",
        &nodes,
        json!({"containers": memory("20Gi")}),
    )
    .await?;
    assert_eq!(
        wait_bound(&client, &ns.name, "fits", BIND_TIMEOUT).await?,
        node
    );
    nodes.delete().await?;
    ns.delete().await
}
