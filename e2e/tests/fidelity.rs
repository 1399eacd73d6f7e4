//! Fidelity with kube-scheduler, proven side by side: the same random pods go one at a time
//! through kube-scheduler (the reference, its node scores logged) and through tether on the
//! same cluster, and tether must choose a node kube-scheduler scored highest; pods that fit
//! nowhere must get the same message, byte for byte. A second kube-scheduler profile in
//! tether's place checks the method itself: it must agree every time too.
//!
//! Runs alone (`make e2e` runs it after the shared tests): the failure message counts every
//! node of the cluster, so no other test may add or remove nodes meanwhile.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{
    TEST_KEY, TestNamespace, TestNodes, apply_profile, client, kubectl_ok, unique_suffix, wait_for,
};

/// Random pods that fit somewhere, and pods that fit nowhere.
const PLACED: usize = 40;
const UNPLACEABLE: usize = 12;

/// A small deterministic generator (the seed is printed), so a failure can be replayed.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }
    fn chance(&mut self, percent: u64) -> bool {
        self.next() % 100 < percent
    }
    fn pick<'a, T>(&mut self, items: &'a [T]) -> &'a T {
        &items[self.below(items.len())]
    }
}

const APPS: [&str; 3] = ["web", "db", "cache"];
const IMAGES: [&str; 3] = ["nginx:1.27", "registry.k8s.io/etcd:3.6.8", "redis"];

/// Shapes the test's nodes: CPUs, memory, `disk` and `tier` labels, a PreferNoSchedule taint on
/// some, images on some.
fn shape_node(i: usize, node: &mut Value) {
    let cpu = ["4", "8", "16", "32"][i % 4];
    let memory = ["16Gi", "32Gi", "64Gi"][i % 3];
    for field in ["allocatable", "capacity"] {
        node["status"][field]["cpu"] = json!(cpu);
        node["status"][field]["memory"] = json!(memory);
    }
    node["metadata"]["labels"]["disk"] = json!(["ssd", "hdd"][i % 2]);
    node["metadata"]["labels"]["tier"] = json!(["1", "2", "3"][i % 3]);
    if let Some(taints) = node["spec"]["taints"].as_array_mut().filter(|_| i % 3 == 1) {
        taints.push(json!({"key": "dedicated", "value": "batch", "effect": "PreferNoSchedule"}));
    }
    let images: Vec<Value> = [
        (0, "docker.io/library/nginx:1.27", 300_000_000),
        (1, "registry.k8s.io/etcd:3.6.8", 900_000_000),
        (2, "docker.io/library/redis:latest", 150_000_000),
    ]
    .into_iter()
    .filter(|(k, _, _)| !(i + k).is_multiple_of(3))
    .map(|(_, name, size)| json!({"names": [name], "sizeBytes": size}))
    .collect();
    node["status"]["images"] = json!(images);
}

/// A random pod spec with soft preferences only (it fits on several nodes).
fn placeable(rng: &mut Rng) -> (Value, Value) {
    let app = *rng.pick(&APPS);
    let mut container = json!({"name": "c", "image": rng.pick(&IMAGES)});
    if rng.chance(80) {
        let mut requests = json!({});
        if rng.chance(80) {
            requests["cpu"] = json!(rng.pick(&["100m", "500m", "1", "2", "3"]));
        }
        if rng.chance(70) {
            requests["memory"] = json!(rng.pick(&["128Mi", "1Gi", "4Gi", "8Gi"]));
        }
        container["resources"] = json!({"requests": requests});
    }
    let mut spec = json!({"containers": [container]});
    let mut affinity = json!({});
    if rng.chance(50) {
        let key = *rng.pick(&["disk", "tier"]);
        let value = if key == "disk" {
            *rng.pick(&["ssd", "hdd"])
        } else {
            *rng.pick(&["1", "2", "3"])
        };
        affinity["nodeAffinity"] = json!({"preferredDuringSchedulingIgnoredDuringExecution": [
            {"weight": 1 + rng.below(100), "preference": {"matchExpressions": [
                {"key": key, "operator": "In", "values": [value]}]}}]});
    }
    for kind in ["podAffinity", "podAntiAffinity"] {
        if rng.chance(35) {
            let target = *rng.pick(&APPS);
            let topology = *rng.pick(&["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
            affinity[kind] = json!({"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1 + rng.below(100), "podAffinityTerm": {
                    "labelSelector": {"matchLabels": {"app": target}}, "topologyKey": topology}}]});
        }
    }
    if affinity.as_object().is_some_and(|a| !a.is_empty()) {
        spec["affinity"] = affinity;
    }
    if rng.chance(40) {
        let topology = *rng.pick(&["kubernetes.io/hostname", "topology.kubernetes.io/zone"]);
        spec["topologySpreadConstraints"] = json!([{
            "maxSkew": 1 + rng.below(2), "topologyKey": topology, "whenUnsatisfiable": "ScheduleAnyway",
            "labelSelector": {"matchLabels": {"app": app}}}]);
    }
    if rng.chance(30) {
        spec["tolerations"] =
            json!([{"key": "dedicated", "operator": "Exists", "effect": "PreferNoSchedule"}]);
    }
    (json!({"app": app}), spec)
}

/// A random pod spec that fits on no node.
fn unplaceable(rng: &mut Rng) -> (Value, Value) {
    let (labels, mut spec) = placeable(rng);
    match rng.below(5) {
        0 => spec["containers"][0]["resources"] = json!({"requests": {"cpu": "64"}}),
        1 => spec["nodeSelector"] = json!({"disk": "nvme"}),
        2 => {
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "web"}}, "topologyKey": TEST_KEY}]}});
        }
        3 => {
            spec["affinity"] = json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "tier", "operator": "In", "values": ["3"]}]}]}}});
            spec["containers"][0]["resources"] =
                json!({"requests": {"cpu": "20", "memory": "60Gi"}});
        }
        _ => spec["containers"][0]["resources"] = json!({"requests": {"memory": "100Gi"}}),
    }
    (labels, spec)
}

/// One pod through one scheduler on the test's nodes.
struct Run<'a> {
    pods: &'a Api<Pod>,
    nodes: &'a TestNodes,
}

enum Outcome {
    Bound(String),
    Unschedulable(String),
}

impl Run<'_> {
    async fn once(
        &self,
        name: &str,
        scheduler: &str,
        labels: &Value,
        spec: &Value,
    ) -> anyhow::Result<Outcome> {
        let mut spec = spec.clone();
        spec["schedulerName"] = json!(scheduler);
        self.nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": labels}, "spec": spec,
        }))?;
        self.pods.create(&PostParams::default(), &pod).await?;
        let outcome = wait_for(
            &format!("{scheduler} to place or reject {name}"),
            Duration::from_secs(30),
            || async move {
                let pod = self.pods.get(name).await?;
                if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    return Ok(Some(Outcome::Bound(node)));
                }
                let rejected = pod
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                    .and_then(|c| c.message);
                Ok(rejected.map(Outcome::Unschedulable))
            },
        )
        .await?;
        self.pods
            .delete(name, &DeleteParams::default().grace_period(0))
            .await?;
        wait_for(
            &format!("{name} gone"),
            Duration::from_secs(30),
            || async move { Ok(self.pods.get_opt(name).await?.is_none().then_some(())) },
        )
        .await?;
        Ok(outcome)
    }
}

/// The nodes with the highest score.
fn best(scores: &BTreeMap<String, i64>) -> Vec<String> {
    let top = scores.values().copied().max().unwrap_or(i64::MIN);
    scores
        .iter()
        .filter(|(_, s)| **s == top)
        .map(|(n, _)| n.clone())
        .collect()
}

#[tokio::test]
async fn tether_places_and_rejects_pods_as_kube_scheduler_does() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "fidelity").await?;
    let nodes = TestNodes::create(&client, "fidelity", 9, "8", shape_node).await?;
    let suffix = unique_suffix();
    let (reference, check, tether) = (
        format!("fidelity-reference-{suffix}"),
        format!("fidelity-check-{suffix}"),
        format!("fidelity-tether-{suffix}"),
    );
    let kube = ReferenceScheduler::start("kube-scheduler-fidelity", &[&reference, &check])?;
    // tether's default plugins, as the spec left empty compiles.
    apply_profile(&client, &tether, json!({"schedulerName": tether})).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);

    let seed = std::env::var("FIDELITY_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| u64::from(std::process::id()) * 2_654_435_761 + 1);
    println!("FIDELITY_SEED={seed}");
    let mut rng = Rng(seed.max(1));

    // Pods already running: what affinity, anti-affinity and spreading count.
    for i in 0..12 {
        let node = &nodes.names[rng.below(nodes.names.len())];
        let cpu = rng.pick(&["250m", "500m", "1"]);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("running-{i}"), "labels": {"app": APPS[i % 3]}},
            "spec": {"nodeName": node, "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": cpu, "memory": "512Mi"}}}]},
        }))?;
        pods.create(&PostParams::default(), &pod).await?;
    }

    let run = Run {
        pods: &pods,
        nodes: &nodes,
    };
    let mut disagreements = Vec::new();
    // Pods whose best nodes were a strict subset of the scored ones: where a wrong score shows.
    let mut decisive = 0;
    for i in 0..PLACED {
        let (labels, spec) = placeable(&mut rng);
        let ref_name = format!("p{i}-reference");
        let Outcome::Bound(ref_node) = run.once(&ref_name, &reference, &labels, &spec).await?
        else {
            anyhow::bail!("kube-scheduler did not place {ref_name}: {spec}");
        };
        let scores = kube.scores(&format!("{}/{ref_name}", ns.name))?;
        let top = if scores.is_empty() {
            vec![ref_node]
        } else {
            best(&scores)
        };
        if top.len() < scores.len() {
            decisive += 1;
        }
        for (who, scheduler) in [("tether", &tether), ("check", &check)] {
            let name = format!("p{i}-{who}");
            match run.once(&name, scheduler, &labels, &spec).await? {
                Outcome::Bound(node) if top.contains(&node) => {}
                Outcome::Bound(node) => disagreements.push(format!(
                    "{who} put pod {i} on {node}; kube-scheduler's best: {top:?}, scores {scores:?}, spec {spec}"
                )),
                Outcome::Unschedulable(m) => {
                    disagreements.push(format!("{who} rejected pod {i} ({m}); spec {spec}"))
                }
            }
        }
    }
    for i in 0..UNPLACEABLE {
        let (labels, spec) = unplaceable(&mut rng);
        let ref_name = format!("u{i}-reference");
        let Outcome::Unschedulable(want) = run.once(&ref_name, &reference, &labels, &spec).await?
        else {
            anyhow::bail!("kube-scheduler placed {ref_name}: {spec}");
        };
        for (who, scheduler) in [("tether", &tether), ("check", &check)] {
            match run
                .once(&format!("u{i}-{who}"), scheduler, &labels, &spec)
                .await?
            {
                Outcome::Unschedulable(got) if got == want => {}
                Outcome::Unschedulable(got) => disagreements.push(format!(
                    "{who} said {got:?} where kube-scheduler said {want:?}; spec {spec}"
                )),
                Outcome::Bound(node) => {
                    disagreements.push(format!("{who} placed unplaceable pod {i} on {node}"))
                }
            }
        }
    }
    println!(
        "{} pods placed ({decisive} where kube-scheduler's best nodes were fewer than the scored ones) and {} rejected by kube-scheduler, tether and the check; {} disagreements (kube-scheduler's log: {})",
        PLACED,
        UNPLACEABLE,
        disagreements.len(),
        kube.log().display()
    );
    assert!(
        disagreements.is_empty(),
        "FIDELITY_SEED={seed}:\n{}",
        disagreements.join("\n")
    );

    drop(kube);
    kubectl_ok(&["delete", "sp", &tether], None)?;
    nodes.delete().await?;
    ns.delete().await
}
