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
    TEST_KEY, TestNamespace, TestNodes, VOLUME_OF, apply, apply_profile, client, delete_labelled,
    kubectl_ok, unique_suffix, wait_bound, wait_event, wait_for,
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

/// kube-scheduler and tether side by side for one test: a kube-scheduler process serving
/// `<test>-reference-<suffix>` (its log `.cluster/logs/kube-scheduler-<test>.log`) and the
/// SchedulingProfile `<test>-tether-<suffix>`, both with the default plugins and no PostFilter,
/// whose words would follow a failure message.
struct SideBySide {
    reference: String,
    tether: String,
    kube: ReferenceScheduler,
}

impl SideBySide {
    async fn start(client: &kube::Client, test: &str) -> anyhow::Result<Self> {
        let suffix = unique_suffix();
        let (reference, tether) = (
            format!("{test}-reference-{suffix}"),
            format!("{test}-tether-{suffix}"),
        );
        let kube = ReferenceScheduler::start(&format!("kube-scheduler-{test}"), &[&reference])?;
        apply_profile(
            client,
            &tether,
            json!({"schedulerName": tether, "plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}),
        )
        .await?;
        Ok(SideBySide {
            reference,
            tether,
            kube,
        })
    }

    /// Stops kube-scheduler and deletes tether's profile.
    fn stop(self) -> anyhow::Result<()> {
        drop(self.kube);
        kubectl_ok(&["delete", "sp", &self.tether], None)?;
        Ok(())
    }
}

/// The tests here count every node of the cluster in their messages: one at a time.
static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test]
async fn tether_places_and_rejects_pods_as_kube_scheduler_does() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
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
    // tether's default plugins, as kube-scheduler's reference runs them (PostFilter off).
    apply_profile(
        &client,
        &tether,
        // As the reference: without PostFilter, whose words would follow the message.
        json!({"schedulerName": tether, "plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}),
    )
    .await?;
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

/// A volume of 1Gi for `claim` in `ns`: `extra` adds node affinity, labels, a class.
fn volume_for(name: &str, ns: &str, claim: Option<&str>, modes: &[&str], extra: Value) -> Value {
    let mut pv = json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {VOLUME_OF: ns}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": modes, "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": format!("/mnt/{name}")}},
    });
    if let Some(claim) = claim {
        pv["spec"]["claimRef"] = json!({"name": claim, "namespace": ns});
    }
    merge(&mut pv, extra);
    pv
}

fn merge(into: &mut Value, from: Value) {
    match (into, from) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in b {
                merge(a.entry(k).or_insert(Value::Null), v);
            }
        }
        (a, b) => *a = b,
    }
}

fn claim_doc(name: &str, ns: &str, class: &str, modes: &[&str], volume: Option<&str>) -> Value {
    let mut c = json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {"accessModes": modes, "storageClassName": class,
                 "resources": {"requests": {"storage": "1Gi"}}},
    });
    if let Some(v) = volume {
        c["spec"]["volumeName"] = json!(v);
    }
    c
}

/// A `WaitForFirstConsumer` class of local volumes for one case and one scheduler alone, so
/// that no case sees volumes another left: returns its name.
fn wait_class(ns: &str, case: &str) -> anyhow::Result<String> {
    let name = format!("{ns}-{case}");
    apply(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name, "labels": {VOLUME_OF: ns}},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "WaitForFirstConsumer"}),
    )?;
    Ok(name)
}

fn on_node(node: &str) -> Value {
    json!({"spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}}}})
}

/// Pods with claims of each kind go through kube-scheduler and through tether's default
/// profile, each with claims and volumes of its own made alike: both place the same pods
/// (on the node, or in the zone, their volumes decide) and reject the others with the same
/// message.
#[tokio::test]
async fn tether_and_kube_scheduler_agree_on_pods_with_volumes() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "fidelity-vol").await?;
    let n = ns.name.clone();
    let nodes = TestNodes::create(&client, "fidelity-vol", 6, "8", |_, _| {}).await?;
    let both = SideBySide::start(&client, "fidelity-vol").await?;
    let (reference, tether) = (&both.reference, &both.tether);
    let now = format!("{n}-now");
    apply(
        json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": now, "labels": {VOLUME_OF: n}},
        "provisioner": "kubernetes.io/no-provisioner", "volumeBindingMode": "Immediate"}),
    )?;
    // A ReadWriteOncePod claim a running pod holds.
    apply(volume_for(
        &format!("{n}-solo"),
        &n,
        Some("solo"),
        &["ReadWriteOncePod"],
        json!({}),
    ))?;
    apply(claim_doc(
        "solo",
        &n,
        "",
        &["ReadWriteOncePod"],
        Some(&format!("{n}-solo")),
    ))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &n);
    let holder: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "solo-holder"},
        "spec": {"nodeName": nodes.names[0], "containers": [{"name": "c", "image": "pause"}],
                 "volumes": [{"name": "v", "persistentVolumeClaim": {"claimName": "solo"}}]},
    }))?;
    pods.create(&PostParams::default(), &holder).await?;

    // Each case: the claims the pod uses (named for the scheduler it goes to) and the objects
    // made for them.
    let (local_node, other_node) = (nodes.names[4].clone(), nodes.names[2].clone());
    type Setup<'a> = Box<dyn Fn(&str) -> anyhow::Result<Vec<String>> + 'a>;
    let cases: Vec<(&str, Setup)> = vec![
        (
            "zoned",
            Box::new(|who: &str| {
                let (pv, c) = (format!("{n}-zoned-{who}"), format!("zoned-{who}"));
                apply(volume_for(
                    &pv,
                    &n,
                    Some(&c),
                    &["ReadWriteOnce"],
                    json!({
                "metadata": {"labels": {"topology.kubernetes.io/zone": "zone-b"}},
                "spec": {"nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}]}}}}),
                ))?;
                apply(claim_doc(&c, &n, "", &["ReadWriteOnce"], Some(&pv)))?;
                Ok(vec![c])
            }),
        ),
        (
            "local",
            Box::new(|who: &str| {
                let c = format!("local-{who}");
                let wait = wait_class(&n, &c)?;
                for (i, node) in [&local_node, &local_node].iter().enumerate() {
                    let mut extra = on_node(node);
                    extra["spec"]["storageClassName"] = json!(wait);
                    apply(volume_for(
                        &format!("{n}-local-{who}-{i}"),
                        &n,
                        None,
                        &["ReadWriteOnce"],
                        extra,
                    ))?;
                }
                apply(claim_doc(&c, &n, &wait, &["ReadWriteOnce"], None))?;
                Ok(vec![c])
            }),
        ),
        (
            "two-nodes",
            Box::new(|who: &str| {
                let mut claims = Vec::new();
                let wait = wait_class(&n, &format!("split-{who}"))?;
                for (i, node) in [&local_node, &other_node].iter().enumerate() {
                    let mut extra = on_node(node);
                    extra["spec"]["storageClassName"] = json!(wait);
                    apply(volume_for(
                        &format!("{n}-split-{who}-{i}"),
                        &n,
                        None,
                        &["ReadWriteOnce"],
                        extra,
                    ))?;
                    let c = format!("split-{who}-{i}");
                    apply(claim_doc(&c, &n, &wait, &["ReadWriteOnce"], None))?;
                    claims.push(c);
                }
                Ok(claims)
            }),
        ),
        (
            "no-volume",
            Box::new(|who: &str| {
                let c = format!("none-{who}");
                let wait = wait_class(&n, &c)?;
                apply(claim_doc(&c, &n, &wait, &["ReadWriteOnce"], None))?;
                Ok(vec![c])
            }),
        ),
        (
            "immediate",
            Box::new(|who: &str| {
                let c = format!("now-{who}");
                apply(claim_doc(&c, &n, &now, &["ReadWriteOnce"], None))?;
                Ok(vec![c])
            }),
        ),
        (
            "far",
            Box::new(|who: &str| {
                let (pv, c) = (format!("{n}-far-{who}"), format!("far-{who}"));
                apply(volume_for(
                    &pv,
                    &n,
                    Some(&c),
                    &["ReadWriteOnce"],
                    on_node("elsewhere"),
                ))?;
                apply(claim_doc(&c, &n, "", &["ReadWriteOnce"], Some(&pv)))?;
                Ok(vec![c])
            }),
        ),
        (
            "missing",
            Box::new(|_: &str| Ok(vec!["missing".to_string()])),
        ),
        (
            "read-write-once-pod",
            Box::new(|_: &str| Ok(vec!["solo".to_string()])),
        ),
    ];
    let claims_api: Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        Api::namespaced(client.clone(), &n);
    let run = Run {
        pods: &pods,
        nodes: &nodes,
    };
    let mut disagreements = Vec::new();
    for (case, setup) in &cases {
        let mut outcomes = Vec::new();
        for (who, scheduler) in [("reference", &reference), ("tether", &tether)] {
            let claims = setup(who)?;
            // Claims bound by a volume's claimRef must be bound before the pod comes.
            for c in &claims {
                let pre_bound = matches!(*case, "zoned" | "far");
                if pre_bound {
                    wait_for(&format!("{c} bound"), Duration::from_secs(30), || {
                        let claims_api = claims_api.clone();
                        async move {
                            let phase = claims_api.get(c).await?.status.and_then(|s| s.phase);
                            Ok((phase.as_deref() == Some("Bound")).then_some(()))
                        }
                    })
                    .await?;
                }
            }
            let volumes: Vec<Value> = claims
                .iter()
                .enumerate()
                .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
                .collect();
            let spec = json!({"containers": [{"name": "c", "image": "pause"}], "volumes": volumes});
            let outcome = run
                .once(
                    &format!("{case}-{who}"),
                    scheduler,
                    &json!({"app": case}),
                    &spec,
                )
                .await?;
            outcomes.push(match outcome {
                Outcome::Bound(node) => {
                    let zone = nodes.names.iter().position(|x| *x == node).map(|i| i % 3);
                    match *case {
                        "zoned" => format!("bound in zone {zone:?}"),
                        _ => format!("bound to {node}"),
                    }
                }
                Outcome::Unschedulable(m) => format!("rejected: {}", m.replace(who, "WHO")),
            });
        }
        println!(
            "{case}: kube-scheduler {}; tether {}",
            outcomes[0], outcomes[1]
        );
        if outcomes[0] != outcomes[1] {
            disagreements.push(format!(
                "{case}: kube-scheduler {} but tether {}",
                outcomes[0], outcomes[1]
            ));
        }
    }
    drop(cases);
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));

    both.stop()?;
    ns.delete().await?;
    nodes.delete().await?;
    delete_labelled("pv", &n)?;
    delete_labelled("storageclass", &n)?;
    Ok(())
}

/// Pod-level requests with mixed container requests, side by side with kube-scheduler: a pod
/// asks for 1 CPU at the pod level; one container asks for 1Gi of memory and ten ask for
/// nothing (the API server sets the pod level's memory to 1Gi). NodeResourcesFit's score in
/// kube-scheduler v1.37.2 reads the containers alone, with 100m / 200Mi for each request they
/// leave out: about 3Gi, which fills the small node's 4Gi, so it prefers the node with 64Gi
/// (and little CPU); BalancedAllocation reads the pod level. Counting the pod level's 1Gi in
/// Fit's score, as kube-scheduler does from 1.38, the small node wins. Both must put the pod on
/// the same node.
#[tokio::test]
async fn a_pod_with_pod_level_requests_lands_where_kube_scheduler_puts_it() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "fidelity-podlevel").await?;
    let nodes = TestNodes::create(&client, "fidelity-podlevel", 2, "16", |i, node| {
        let (cpu, memory) = [("16", "4Gi"), ("2600m", "64Gi")][i % 2];
        for field in ["allocatable", "capacity"] {
            node["status"][field]["cpu"] = json!(cpu);
            node["status"][field]["memory"] = json!(memory);
        }
    })
    .await?;
    let both = SideBySide::start(&client, "fidelity-podlevel").await?;
    let (reference, tether) = (&both.reference, &both.tether);
    let mut containers =
        vec![json!({"name": "a", "image": "pause", "resources": {"requests": {"memory": "1Gi"}}})];
    containers.extend((0..10).map(|i| json!({"name": format!("c{i}"), "image": "pause"})));
    let spec = json!({"resources": {"requests": {"cpu": "1"}}, "containers": containers});
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let run = Run {
        pods: &pods,
        nodes: &nodes,
    };
    let mut placed = Vec::new();
    for (name, scheduler) in [("by-reference", &reference), ("by-tether", &tether)] {
        match run.once(name, scheduler, &json!({}), &spec).await? {
            Outcome::Bound(node) => placed.push(node),
            Outcome::Unschedulable(m) => anyhow::bail!("{scheduler} rejected the pod: {m}"),
        }
    }
    println!("kube-scheduler: {}; tether: {}", placed[0], placed[1]);
    if tether_e2e::compared_minor(&client).await? < 38 {
        assert_eq!(
            placed[0], nodes.names[1],
            "the reference itself prefers the node with room for the defaults"
        );
    } else {
        assert_eq!(
            placed[0], nodes.names[0],
            "1.38's reference reads the pod level and prefers the small node"
        );
    }
    assert_eq!(
        placed[1], placed[0],
        "tether places the pod as kube-scheduler"
    );

    both.stop()?;
    ns.delete().await?;
    nodes.delete().await
}

/// A valid extended resource name of exactly `len` bytes (at least 5): a DNS subdomain of
/// labels up to 62 letters, then `/` and `name`.
fn resource_of_length(name: char, len: usize) -> String {
    let prefix_len = len - 2;
    let mut prefix = String::new();
    while prefix.len() < prefix_len {
        if !prefix.is_empty() {
            prefix.push('.');
        }
        let room = (prefix_len - prefix.len()).min(62);
        // A label never ends the prefix with a dot: keep at least two bytes for the last one.
        let take = if prefix_len - prefix.len() - room == 1 {
            room - 1
        } else {
            room
        };
        prefix.extend(std::iter::repeat_n('x', take));
    }
    format!("{prefix}/{name}")
}

/// FailedScheduling notes around the API server's 1,024-byte limit, side by side with
/// kube-scheduler: a pod asks for four extended resources no node has, with names long enough
/// that its message is 1,020 to 1,100 bytes. The condition keeps the whole message; the
/// event's note is the message up to 1,024 bytes, else its first 1,020 and ` ...`. Both
/// schedulers must write the same condition and the same note at every length.
#[tokio::test]
async fn failure_notes_around_the_length_limit_read_as_kube_schedulers() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "fidelity-notes").await?;
    let nodes = TestNodes::create(&client, "fidelity-notes", 1, "8", |_, _| {}).await?;
    let both = SideBySide::start(&client, "fidelity-notes").await?;
    let (reference, tether) = (&both.reference, &both.tether);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let run = Run {
        pods: &pods,
        nodes: &nodes,
    };
    // Three names of 240 bytes and one of `last` (a name's domain may have 244 bytes at most).
    let spec_with = |last: usize| {
        let mut requests = serde_json::Map::new();
        for (name, len) in [('a', 240), ('b', 240), ('c', 240), ('d', last)] {
            requests.insert(resource_of_length(name, len), json!("1"));
        }
        json!({"containers": [{"name": "c", "image": "pause",
            "resources": {"requests": requests.clone(), "limits": requests}}]})
    };
    let rejected = |outcome: Outcome, who: &str| match outcome {
        Outcome::Unschedulable(message) => Ok(message),
        Outcome::Bound(node) => Err(anyhow::anyhow!("{who} bound the pod to {node}")),
    };
    // The message grows byte for byte with the last name: measure it once.
    let probe = rejected(
        run.once("probe", reference, &json!({}), &spec_with(100))
            .await?,
        "kube-scheduler",
    )?;
    let mut disagreements = Vec::new();
    for target in [1020usize, 1023, 1024, 1025, 1026, 1100] {
        let last = 100 + target - probe.len();
        let spec = spec_with(last);
        let mut seen = Vec::new();
        for (who, scheduler) in [("kube-scheduler", &reference), ("tether", &tether)] {
            let name = format!(
                "{}-{target}",
                if who == "tether" { "ours" } else { "theirs" }
            );
            let message = rejected(run.once(&name, scheduler, &json!({}), &spec).await?, who)?;
            let notes = wait_event(
                &client,
                &ns.name,
                &name,
                "FailedScheduling",
                Duration::from_secs(30),
                |n| !n.starts_with("skip schedule deleting pod"),
            )
            .await?;
            // The pod is deleted once rejected: a scheduler that pops it while it is being
            // deleted says so in an event of its own, which is not the note compared here.
            let note = notes
                .iter()
                .rev()
                .find(|n| !n.starts_with("skip schedule deleting pod"))
                .cloned()
                .unwrap_or_default();
            seen.push((message, note));
        }
        let (theirs, ours) = (&seen[0], &seen[1]);
        assert_eq!(theirs.0.len(), target, "the message hits its length");
        println!(
            "{target} bytes: kube-scheduler's note {} bytes, tether's {} bytes",
            theirs.1.len(),
            ours.1.len()
        );
        if ours != theirs {
            disagreements.push(format!(
                "at {target} bytes: kube-scheduler wrote {theirs:?}, tether {ours:?}"
            ));
        }
    }
    assert!(disagreements.is_empty(), "{}", disagreements.join("\n"));

    both.stop()?;
    ns.delete().await?;
    nodes.delete().await
}

/// What a pod showed of a preemption, in the order the API's watch saw it: its nominated node,
/// its `PodScheduled=False` message, its `DisruptionTarget` condition's reason and message, and
/// whether it was bound.
#[derive(Clone, Debug, PartialEq, Eq)]
struct PreemptionView {
    nominated: Option<String>,
    failed: Option<String>,
    disruption: Option<(String, String)>,
    bound: Option<String>,
}

/// Preemption side by side with kube-scheduler (its DefaultPreemption on, as tether's): two
/// nodes of 4 CPUs each, full of pods of lower priority (one with pods of 2 CPUs at priorities 0
/// and 10, the other with four of 1 CPU); a pod of priority 1000 asking for 2 CPUs. Each
/// scheduler on a copy of its own must choose the same node and the same victim, and write the
/// same things on the way: the preemptor's nominated node and failure message, the victim's
/// `DisruptionTarget` condition, its `Preempted` event (related to the preemptor), and the bind.
#[tokio::test]
async fn preemption_reads_as_kube_schedulers() -> anyhow::Result<()> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    use std::sync::{Arc, Mutex};

    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "fidelity-preempt").await?;
    let suffix = unique_suffix();
    let prefix = format!("fidelity-preempt-{suffix}");
    for (name, value) in [("low", 0), ("mid", 10), ("high", 1000)] {
        apply(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": format!("{prefix}-{name}")}, "value": value}),
        )?;
    }
    let (reference, tether) = (format!("{prefix}-reference"), format!("{prefix}-tether"));
    let kube =
        ReferenceScheduler::start_preempting("kube-scheduler-fidelity-preempt", &[&reference])?;
    apply_profile(&client, &tether, json!({"schedulerName": tether})).await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let seen: Arc<Mutex<BTreeMap<String, Vec<PreemptionView>>>> = Arc::default();
    let record = seen.clone();
    let watch = tokio::spawn(
        watcher::watcher(pods.clone(), watcher::Config::default()).for_each(move |event| {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                let status = pod.status.clone().unwrap_or_default();
                let conditions = status.conditions.unwrap_or_default();
                let now = PreemptionView {
                    nominated: status.nominated_node_name,
                    failed: conditions
                        .iter()
                        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                        .and_then(|c| c.message.clone()),
                    disruption: conditions
                        .iter()
                        .find(|c| c.type_ == "DisruptionTarget")
                        .map(|c| {
                            (
                                c.reason.clone().unwrap_or_default(),
                                c.message.clone().unwrap_or_default(),
                            )
                        }),
                    bound: pod.spec.as_ref().and_then(|s| s.node_name.clone()),
                };
                let mut seen = record.lock().unwrap_or_else(|p| p.into_inner());
                let views = seen
                    .entry(pod.metadata.name.clone().unwrap_or_default())
                    .or_default();
                if views.last() != Some(&now) {
                    views.push(now);
                }
            }
            futures::future::ready(())
        }),
    );

    // Per scheduler: what its preemptor and its victim showed, with its own names replaced.
    let mut outcomes = Vec::new();
    for (who, scheduler) in [("theirs", &reference), ("ours", &tether)] {
        let nodes =
            TestNodes::create(&client, &format!("preempt-{who}"), 2, "4", |_, _| {}).await?;
        let normal = |text: &str| {
            let mut text = text.replace(scheduler.as_str(), "SCHEDULER");
            for (i, n) in nodes.names.iter().enumerate() {
                text = text.replace(n.as_str(), &format!("NODE{i}"));
            }
            text.replace(&format!("{who}-"), "")
        };
        let running = |name: String, class: &str, cpu: &str, node: &str| {
            let mut spec = json!({"nodeName": node, "priorityClassName": format!("{prefix}-{class}"),
                "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]});
            nodes.isolate(&mut spec);
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns.name}, "spec": spec})
        };
        apply(running(format!("{who}-a"), "low", "2", &nodes.names[0]))?;
        apply(running(format!("{who}-b"), "mid", "2", &nodes.names[0]))?;
        for i in 0..4 {
            apply(running(format!("{who}-c{i}"), "low", "1", &nodes.names[1]))?;
        }
        let mut spec = json!({"schedulerName": scheduler, "priorityClassName": format!("{prefix}-high"),
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "2"}}}]});
        nodes.isolate(&mut spec);
        let vip = format!("{who}-vip");
        apply(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": vip, "namespace": ns.name}, "spec": spec}),
        )?;
        let node = wait_bound(&client, &ns.name, &vip, Duration::from_secs(60)).await?;
        let alive: Vec<String> = pods
            .list(&Default::default())
            .await?
            .items
            .into_iter()
            .filter_map(|p| p.metadata.name)
            .filter(|n| n.starts_with(&format!("{who}-")))
            .collect();
        let victims: Vec<String> = ["a", "b", "c0", "c1", "c2", "c3"]
            .iter()
            .map(|v| format!("{who}-{v}"))
            .filter(|v| !alive.contains(v))
            .collect();
        let mut events = Vec::new();
        for victim in &victims {
            let notes = wait_event(
                &client,
                &ns.name,
                victim,
                "Preempted",
                Duration::from_secs(30),
                |_| true,
            )
            .await?;
            let uid = pods.get(&vip).await?.metadata.uid.unwrap_or_default();
            events.extend(notes.iter().map(|n| normal(&n.replace(&uid, "UID"))));
        }
        let views = |name: &str| -> Vec<String> {
            seen.lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(name)
                .cloned()
                .unwrap_or_default()
                .iter()
                .filter(|v| {
                    v.nominated.is_some()
                        || v.failed.is_some()
                        || v.disruption.is_some()
                        || v.bound.is_some()
                })
                // Once the evictions are written and before the victim is gone, any pod deleted
                // elsewhere (an earlier test's pods being cleaned up, say) sends the
                // preemptor back, and both schedulers then say "not eligible due to a
                // terminating pod". Whether such an event falls in that window is the cluster's
                // doing, so that attempt is not compared; the hold before it, while the
                // evictions are written, is proven in faults.rs
                // (a_preemptor_is_not_tried_again_while_its_evictions_are_carried_out).
                .filter(|v| {
                    !v.failed.as_deref().is_some_and(|m| {
                        m.ends_with("preemption: not eligible due to a terminating pod on the nominated node.")
                    })
                })
                .map(|v| normal(&format!("{v:?}")))
                .collect()
        };
        let outcome = (
            normal(&node),
            victims.iter().map(|v| normal(v)).collect::<Vec<_>>(),
            views(&vip),
            victims.iter().flat_map(|v| views(v)).collect::<Vec<_>>(),
            events,
        );
        println!("{who}: {outcome:#?}");
        outcomes.push(outcome);
        pods.delete_collection(
            &DeleteParams::default().grace_period(0),
            &Default::default(),
        )
        .await?;
        nodes.delete().await?;
    }
    watch.abort();
    assert_eq!(
        outcomes[1], outcomes[0],
        "tether's preemption as kube-scheduler's (node, victims, preemptor, victim, events)"
    );

    drop(kube);
    kubectl_ok(&["delete", "sp", &tether], None)?;
    for name in ["low", "mid", "high"] {
        kubectl_ok(
            &[
                "delete",
                "priorityclass",
                &format!("{prefix}-{name}"),
                "--ignore-not-found",
            ],
            None,
        )?;
    }
    ns.delete().await
}

/// A running pod counted as kube-scheduler v1.37.2 counts it, side by side: on a node of 4
/// CPUs runs a pod asking for 1.5 CPUs in a RuntimeClass with 0.5 CPU of overhead, whose
/// kubelet-kept pod-level status says 2 CPUs allocated and running (the overhead included).
/// kube-scheduler counts the larger of spec and status, then the overhead again (2.5 CPUs), so
/// a pod asking for 1.8 CPUs does not fit; counting the spec (2 CPUs) it would. Both must say
/// the same.
#[tokio::test]
async fn a_running_pods_pod_level_status_counts_as_with_kube_scheduler() -> anyhow::Result<()> {
    use kube::api::{Patch, PatchParams};
    let _alone = ALONE.lock().await;
    let client = client().await?;
    if tether_e2e::cluster_minor(&client).await? < 37 {
        // 1.36 sums each container's larger of spec and status and reads no pod-level status:
        // a difference tether keeps (docs/install.md, "Compatibility", not followed yet).
        eprintln!("not compared on 1.36: tether counts running pods as 1.37 does");
        return Ok(());
    }
    let ns = TestNamespace::create(&client, "fidelity-resize").await?;
    let nodes = TestNodes::create(&client, "fidelity-resize", 1, "4", |_, _| {}).await?;
    let class = format!("fidelity-resize-{}", unique_suffix());
    apply(
        json!({"apiVersion": "node.k8s.io/v1", "kind": "RuntimeClass",
        "metadata": {"name": class}, "handler": "e2e", "overhead": {"podFixed": {"cpu": "500m"}}}),
    )?;
    let both = SideBySide::start(&client, "fidelity-resize").await?;
    let (reference, tether) = (&both.reference, &both.tether);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut spec = json!({"nodeName": nodes.names[0], "runtimeClassName": class,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1500m"}}}]});
    nodes.isolate(&mut spec);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "running", "namespace": ns.name}, "spec": spec}))?;
    wait_for(
        "the running pod to run",
        Duration::from_secs(30),
        || async {
            let p = pods.get("running").await?;
            Ok((p.status.and_then(|s| s.phase).as_deref() == Some("Running")).then_some(()))
        },
    )
    .await?;
    // What a 1.37 kubelet keeps in the pod-level status: the pod's requests with its overhead.
    pods.patch_status(
        "running",
        &PatchParams::default(),
        &Patch::Merge(json!({"status": {"allocatedResources": {"cpu": "2"},
            "resources": {"requests": {"cpu": "2"}}}})),
    )
    .await?;
    wait_for(
        "the pod-level status to stay",
        Duration::from_secs(30),
        || async {
            let p = pods.get("running").await?;
            Ok(p.status
                .and_then(|s| s.allocated_resources)
                .is_some_and(|a| a.contains_key("cpu"))
                .then_some(()))
        },
    )
    .await?;
    let run = Run {
        pods: &pods,
        nodes: &nodes,
    };
    let spec = json!({"containers": [{"name": "c", "image": "pause",
        "resources": {"requests": {"cpu": "1800m"}}}]});
    let mut said = Vec::new();
    for (name, scheduler) in [("theirs", &reference), ("ours", &tether)] {
        said.push(match run.once(name, scheduler, &json!({}), &spec).await? {
            Outcome::Bound(node) => format!("bound to {node}"),
            Outcome::Unschedulable(m) => format!("rejected: {m}"),
        });
    }
    println!("kube-scheduler {}; tether {}", said[0], said[1]);
    assert!(
        said[0].starts_with("rejected: ") && said[0].contains("Insufficient cpu"),
        "the reference counts the overhead on top of the status: {}",
        said[0]
    );
    assert_eq!(
        said[1], said[0],
        "tether counts the running pod as kube-scheduler"
    );

    both.stop()?;
    ns.delete().await?;
    nodes.delete().await?;
    kubectl_ok(
        &["delete", "runtimeclass", &class, "--ignore-not-found"],
        None,
    )?;
    Ok(())
}
