//! Ground truth for the fault tests: the binds the test itself sees through its own watch of the
//! API (never tether's log), a history workload to compare them with, and the check that no
//! node holds more than it can.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::Context;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams, Patch, PatchParams};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tether::api::{StickyBinding, StickyBindingStatus};

use crate::{TestNodes, apply, apply_profile, kubectl_ok, unique_suffix, wait_for};

/// Every pod UID the test has seen bound, with its node, from a watch of its own on one
/// namespace. A pod deleted since stays in the ledger: its bind happened.
pub struct BindLedger {
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
}

/// How long a ledger's watch may stay silent while it recovers (after a failure, or while
/// it lists) before it starts over.
const RECOVER: Duration = Duration::from_secs(20);

/// The wait between a failed request of the test's own watches and the next: steady, so that
/// a watch asks again within half a second of an API server's return. kube's default backoff
/// doubles up to 30 s: after an outage of a few seconds the ledger slept through the binds
/// tether made in the meantime while the test already compared.
struct Steady;

impl Iterator for Steady {
    type Item = Duration;

    fn next(&mut self) -> Option<Duration> {
        Some(Duration::from_millis(500))
    }
}

impl kube::runtime::utils::Backoff for Steady {
    fn reset(&mut self) {}
}

/// One bind the ledger saw: the pod's name, its node, and when the watch first showed it.
struct Seen {
    name: String,
    node: String,
    at: Instant,
}

impl BindLedger {
    /// Starts watching the pods in `namespace` that `selector` selects.
    pub fn start(client: &Client, namespace: &str, selector: &str) -> Self {
        let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let ledger = seen.clone();
        let config = watcher::Config::default().labels(selector);
        let task = tokio::spawn(async move {
            // Backed off after an error, so that a busy API server is not asked again at once.
            let start = || {
                watcher(pods.clone(), config.clone())
                    .backoff(Steady)
                    .boxed()
            };
            let mut events = start();
            // Between a failure (or the start of a list) and the watch running again, a request
            // to an API server coming back can go unanswered for minutes: past RECOVER of
            // silence then, the watch starts over with a new list.
            let mut recovering = true;
            loop {
                let event = if recovering {
                    match tokio::time::timeout(RECOVER, events.next()).await {
                        Ok(event) => event,
                        Err(_) => {
                            events = start();
                            continue;
                        }
                    }
                } else {
                    events.next().await
                };
                let Some(event) = event else { break };
                recovering = match &event {
                    Err(_) | Ok(watcher::Event::Init) => true,
                    Ok(watcher::Event::InitApply(_)) => recovering,
                    Ok(_) => false,
                };
                let pod = match event {
                    Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) => pod,
                    _ => continue,
                };
                let node = pod.spec.as_ref().and_then(|s| s.node_name.clone());
                if let (Some(node), Some(uid)) = (node, pod.uid()) {
                    ledger
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(uid)
                        .or_insert_with(|| Seen {
                            name: pod.name_any(),
                            node,
                            at: Instant::now(),
                        });
                }
            }
        });
        BindLedger { seen, task }
    }

    /// The binds seen so far: pod UID → node.
    pub fn binds(&self) -> BTreeMap<String, String> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(uid, seen)| (uid.clone(), seen.node.clone()))
            .collect()
    }

    /// When each bind was first seen: pod name → instant.
    pub fn seen_at(&self) -> std::collections::HashMap<String, Instant> {
        self.seen
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .values()
            .map(|seen| (seen.name.clone(), seen.at))
            .collect()
    }

    /// How many binds were seen so far.
    pub fn len(&self) -> usize {
        self.seen.lock().unwrap_or_else(|p| p.into_inner()).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Waits until at least `count` binds were seen.
    pub async fn wait_at_least(&self, count: usize, timeout: Duration) -> anyhow::Result<()> {
        wait_for(&format!("{count} pods seen bound"), timeout, || async {
            Ok((self.len() >= count).then_some(()))
        })
        .await
    }

    /// Checks a workload's history against the binds seen: `scheduleCount` equals them,
    /// `nodeCount` equals them node by node, and `countedPods` and `recentBinds` name only pods
    /// seen bound, each once.
    pub fn assert_matches(&self, status: &StickyBindingStatus) {
        let binds = self.binds();
        let summary = format!(
            "scheduleCount {}, nodeCount {:?}, {} countedPods, {} recentBinds",
            status.schedule_count,
            status.node_count,
            status.counted_pods.len(),
            status.recent_binds.len()
        );
        let mut per_node: BTreeMap<String, i64> = BTreeMap::new();
        for node in binds.values() {
            *per_node.entry(node.clone()).or_default() += 1;
        }
        if status.schedule_count != binds.len() as i64 || status.node_count != per_node {
            // What a reader needs to find the miscounted binds in tether's log: each seen bind.
            println!("binds the test saw (pod UID -> node): {binds:?}");
        }
        assert_eq!(
            status.schedule_count,
            binds.len() as i64,
            "scheduleCount against the {} binds the test saw: {summary}",
            binds.len()
        );
        assert_eq!(
            status.node_count, per_node,
            "nodeCount against the binds the test saw, node by node"
        );
        let counted: BTreeSet<&String> = status.counted_pods.iter().collect();
        assert_eq!(
            counted.len(),
            status.counted_pods.len(),
            "countedPods repeats a pod"
        );
        assert!(
            counted.iter().all(|uid| binds.contains_key(*uid)),
            "countedPods names a pod never seen bound: {summary}"
        );
        let recent: BTreeSet<&String> = status.recent_binds.iter().map(|r| &r.pod_uid).collect();
        assert_eq!(
            recent.len(),
            status.recent_binds.len(),
            "recentBinds repeats a pod"
        );
        for record in &status.recent_binds {
            assert_eq!(
                binds.get(&record.pod_uid),
                Some(&record.node),
                "recentBinds names a bind the test did not see: {record:?}"
            );
        }
    }
}

impl Drop for BindLedger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The `Scheduled` events of one namespace, from a watch of its own: the pods they are about,
/// each once, and when the watch first showed each.
pub struct EventLedger {
    seen: Arc<Mutex<BTreeMap<String, Instant>>>,
    task: tokio::task::JoinHandle<()>,
}

impl EventLedger {
    /// Starts watching the events of `namespace` with reason `Scheduled` (core/v1: the same
    /// objects as events.k8s.io/v1, which schedulers write) about pods named `prefix`….
    pub fn start(client: &Client, namespace: &str, prefix: &str) -> Self {
        let prefix = prefix.to_string();
        let events: Api<k8s_openapi::api::core::v1::Event> =
            Api::namespaced(client.clone(), namespace);
        let seen = Arc::new(Mutex::new(BTreeMap::new()));
        let ledger = seen.clone();
        let config = watcher::Config::default().fields("reason=Scheduled");
        let task = tokio::spawn(async move {
            let mut stream = watcher(events, config).backoff(Steady).boxed();
            while let Some(event) = stream.next().await {
                let event = match event {
                    Ok(watcher::Event::Apply(e) | watcher::Event::InitApply(e)) => e,
                    _ => continue,
                };
                if let Some(pod) = event
                    .involved_object
                    .name
                    .filter(|n| n.starts_with(&prefix))
                {
                    ledger
                        .lock()
                        .unwrap_or_else(|p| p.into_inner())
                        .entry(pod)
                        .or_insert_with(Instant::now);
                }
            }
        });
        EventLedger { seen, task }
    }

    /// How many pods have a `Scheduled` event so far, and when the last of them was first seen.
    pub fn seen(&self) -> (usize, Option<Instant>) {
        let seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        (seen.len(), seen.values().max().copied())
    }
}

impl Drop for EventLedger {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// A Deployment `app` scheduled by a profile of its own that keeps its history
/// (PlacementHistory with `skipMultiReplica: false`), on a test's nodes; each pod asks for
/// `cpu`. Its StickyBinding is `deployment-<app>`.
pub struct HistoryWorkload {
    pub app: String,
    pub namespace: String,
    pub profile: String,
    client: Client,
}

impl HistoryWorkload {
    pub async fn create(
        client: &Client,
        namespace: &str,
        nodes: &TestNodes,
        app: &str,
        replicas: usize,
        cpu: &str,
    ) -> anyhow::Result<Self> {
        let profile = format!("{app}-{}", unique_suffix());
        let scheduler = format!("{profile}-sched");
        apply_profile(
            client,
            &profile,
            json!({"schedulerName": scheduler,
                "plugins": {"multiPoint": {"enabled": [{"name": "PlacementHistory", "weight": 5}]}},
                "pluginConfig": [{"name": "PlacementHistory", "args": {"skipMultiReplica": false}}]}),
        )
        .await?;
        let mut spec = json!({"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]});
        nodes.isolate(&mut spec);
        apply(json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": app, "namespace": namespace},
            "spec": {"replicas": replicas, "selector": {"matchLabels": {"app": app}},
                "template": {"metadata": {"labels": {"app": app}}, "spec": spec}},
        }))?;
        Ok(HistoryWorkload {
            app: app.into(),
            namespace: namespace.into(),
            profile,
            client: client.clone(),
        })
    }

    /// The label selector of its pods.
    pub fn selector(&self) -> String {
        format!("app={}", self.app)
    }

    /// Sets its replicas.
    pub async fn scale(&self, replicas: usize) -> anyhow::Result<()> {
        let deployments: Api<Deployment> = Api::namespaced(self.client.clone(), &self.namespace);
        deployments
            .patch(
                &self.app,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"replicas": replicas}})),
            )
            .await
            .with_context(|| format!("scaling {} to {replicas}", self.app))?;
        Ok(())
    }

    /// Its pods that are bound and not being deleted.
    pub async fn bound_pods(&self) -> anyhow::Result<Vec<Pod>> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        let list = pods
            .list(&ListParams::default().labels(&self.selector()))
            .await?;
        Ok(list
            .items
            .into_iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
            .collect())
    }

    /// Waits until exactly `replicas` of its pods are bound (and none other is left).
    pub async fn wait_all_bound(&self, replicas: usize, timeout: Duration) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &self.namespace);
        wait_for(
            &format!("{replicas} pods of {} bound", self.app),
            timeout,
            || {
                let pods = pods.clone();
                let selector = self.selector();
                async move {
                    let list = pods.list(&ListParams::default().labels(&selector)).await?;
                    let live: Vec<&Pod> = list
                        .items
                        .iter()
                        .filter(|p| p.metadata.deletion_timestamp.is_none())
                        .collect();
                    let bound = live
                        .iter()
                        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                        .count();
                    Ok((live.len() == replicas && bound == replicas).then_some(()))
                }
            },
        )
        .await
    }

    /// Its binding's status now (empty when it has none yet).
    pub async fn history(&self) -> anyhow::Result<StickyBindingStatus> {
        let bindings: Api<StickyBinding> = Api::namespaced(self.client.clone(), &self.namespace);
        Ok(bindings
            .get_opt(&format!("deployment-{}", self.app))
            .await?
            .and_then(|b| b.status)
            .unwrap_or_default())
    }

    /// Waits until its binding has counted as many binds as `ledger` saw, then checks the
    /// history against them.
    pub async fn assert_history_matches(
        &self,
        ledger: &BindLedger,
        timeout: Duration,
    ) -> anyhow::Result<StickyBindingStatus> {
        // Equal, then unchanged (the history and the ledger) for STABLE: a bind counted twice
        // late still shows. A ledger behind the history (its watch still recovering from an
        // outage) is waited for; a history that never comes to equal it is compared at the
        // deadline, and the comparison says how they differ.
        const STABLE: Duration = Duration::from_secs(3);
        let last = std::cell::RefCell::new(None::<(StickyBindingStatus, usize, Instant)>);
        let reached =
            wait_for(
                &format!("the history of {} to reach the ledger and hold", self.app),
                timeout,
                || {
                    let last = &last;
                    async move {
                        let status = self.history().await?;
                        let seen = ledger.len();
                        let mut last = last.borrow_mut();
                        let steady = match last.as_ref() {
                            Some((s, n, since)) if *s == status && *n == seen => since.elapsed(),
                            _ => {
                                *last = Some((status.clone(), seen, Instant::now()));
                                Duration::ZERO
                            }
                        };
                        Ok((status.schedule_count == seen as i64 && steady >= STABLE)
                            .then_some(status))
                    }
                },
            )
            .await;
        // Past the count (a bind counted twice) or short of it: the comparison says which.
        let status = match reached {
            Ok(status) => status,
            Err(_) => self.history().await?,
        };
        ledger.assert_matches(&status);
        Ok(status)
    }

    /// Deletes its profile (the namespace takes the rest).
    pub fn delete_profile(&self) -> anyhow::Result<()> {
        kubectl_ok(&["delete", "sp", &self.profile], None).map(|_| ())
    }
}

/// Checks that no node of `nodes` holds pods (of any namespace) whose CPU and memory requests
/// exceed what it can allocate, nor more pods than it allows.
pub async fn assert_within_allocatable(client: &Client, nodes: &TestNodes) -> anyhow::Result<()> {
    within_allocatable(client, &nodes.names).await
}

/// [`assert_within_allocatable`] for the nodes named.
pub async fn within_allocatable(client: &Client, names: &[String]) -> anyhow::Result<()> {
    let node_api: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    for name in names {
        let Some(node) = node_api.get_opt(name).await? else {
            continue;
        };
        let allocatable = node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.clone())
            .unwrap_or_default();
        let amount = |key: &str, parse: fn(&str) -> anyhow::Result<u128>| {
            allocatable
                .get(key)
                .map_or(Ok(0), |q| parse(&q.0))
                .with_context(|| format!("node {name}'s allocatable {key}"))
        };
        let (cpu, memory, max_pods) = (
            amount("cpu", millicpu)?,
            amount("memory", bytes)?,
            amount("pods", bytes)?,
        );
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?;
        let (mut used_cpu, mut used_memory, mut count) = (0u128, 0u128, 0u128);
        for pod in &on_node.items {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            let (c, m) = requests(pod)?;
            used_cpu += c;
            used_memory += m;
            count += 1;
        }
        anyhow::ensure!(
            used_cpu <= cpu,
            "node {name} over-committed in cpu: {used_cpu}m requested of {cpu}m"
        );
        anyhow::ensure!(
            used_memory <= memory,
            "node {name} over-committed in memory: {used_memory} bytes requested of {memory}"
        );
        anyhow::ensure!(
            count <= max_pods,
            "node {name} holds {count} pods, more than it allows ({max_pods})"
        );
    }
    Ok(())
}

/// A pod's CPU (millicores) and memory (bytes) requests, as the API defines them, in the
/// test's own arithmetic (never tether's): the sum of its containers', or its largest init
/// container's if larger (a sidecar, `restartPolicy: Always`, adds to the sum), plus overhead.
pub fn requests(pod: &Pod) -> anyhow::Result<(u128, u128)> {
    let Some(spec) = &pod.spec else {
        return Ok((0, 0));
    };
    let of = |r: Option<&k8s_openapi::api::core::v1::ResourceRequirements>| {
        let requests = r.and_then(|r| r.requests.clone()).unwrap_or_default();
        let cpu = requests.get("cpu").map_or(Ok(0), |q| millicpu(&q.0))?;
        let memory = requests.get("memory").map_or(Ok(0), |q| bytes(&q.0))?;
        anyhow::Ok((cpu, memory))
    };
    let (mut cpu, mut memory) = (0, 0);
    for c in &spec.containers {
        let (c, m) = of(c.resources.as_ref())?;
        cpu += c;
        memory += m;
    }
    let (mut init_cpu, mut init_memory) = (0, 0);
    for c in spec.init_containers.iter().flatten() {
        let (c_cpu, c_memory) = of(c.resources.as_ref())?;
        if c.restart_policy.as_deref() == Some("Always") {
            cpu += c_cpu;
            memory += c_memory;
        } else {
            init_cpu = init_cpu.max(c_cpu);
            init_memory = init_memory.max(c_memory);
        }
    }
    let overhead = spec.overhead.clone().unwrap_or_default();
    let over_cpu = overhead.get("cpu").map_or(Ok(0), |q| millicpu(&q.0))?;
    let over_memory = overhead.get("memory").map_or(Ok(0), |q| bytes(&q.0))?;
    Ok((
        cpu.max(init_cpu) + over_cpu,
        memory.max(init_memory) + over_memory,
    ))
}

/// A CPU quantity in millicores, rounded up: `2`, `0.5`, `250m`.
pub fn millicpu(q: &str) -> anyhow::Result<u128> {
    if let Some(m) = q.strip_suffix('m') {
        return m.parse().with_context(|| format!("cpu {q:?}"));
    }
    let (whole, fraction) = q.split_once('.').unwrap_or((q, ""));
    let whole: u128 = whole.parse().with_context(|| format!("cpu {q:?}"))?;
    let mut digits: String = fraction.chars().take(3).collect();
    let rest_nonzero = fraction.chars().skip(3).any(|c| c != '0');
    while digits.len() < 3 {
        digits.push('0');
    }
    let milli: u128 = digits.parse().with_context(|| format!("cpu {q:?}"))?;
    Ok(whole * 1000 + milli + u128::from(rest_nonzero))
}

/// A quantity of bytes (or a plain count): `512Mi`, `1G`, `100`.
pub fn bytes(q: &str) -> anyhow::Result<u128> {
    const UNITS: [(&str, u128); 12] = [
        ("Ki", 1 << 10),
        ("Mi", 1 << 20),
        ("Gi", 1 << 30),
        ("Ti", 1 << 40),
        ("Pi", 1 << 50),
        ("Ei", 1 << 60),
        ("k", 1_000),
        ("M", 1_000_000),
        ("G", 1_000_000_000),
        ("T", 1_000_000_000_000),
        ("P", 1_000_000_000_000_000),
        ("E", 1_000_000_000_000_000_000),
    ];
    for (suffix, factor) in UNITS {
        if let Some(n) = q.strip_suffix(suffix) {
            let n: u128 = n.parse().with_context(|| format!("quantity {q:?}"))?;
            return Ok(n * factor);
        }
    }
    q.parse().with_context(|| format!("quantity {q:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_read_as_the_api_defines_them() -> anyhow::Result<()> {
        assert_eq!(millicpu("2")?, 2000);
        assert_eq!(millicpu("0.5")?, 500);
        assert_eq!(millicpu("250m")?, 250);
        assert_eq!(millicpu("0.0001")?, 1, "rounded up, as the API server does");
        assert_eq!(bytes("512Mi")?, 512 << 20);
        assert_eq!(bytes("1G")?, 1_000_000_000);
        assert_eq!(bytes("110")?, 110);
        assert!(bytes("1x").is_err());
        Ok(())
    }
}
