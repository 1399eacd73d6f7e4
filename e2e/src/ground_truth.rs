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
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;
use tether::api::{StickyBinding, StickyBindingStatus};
use tether::k8s::resource::{Resource, pod_requests};

use crate::{TestNodes, apply, apply_profile, kubectl_ok, unique_suffix, wait_for};

/// Every pod UID the test has seen bound, with its node, from a watch of its own on one
/// namespace. A pod deleted since stays in the ledger: its bind happened.
pub struct BindLedger {
    seen: Arc<Mutex<BTreeMap<String, Seen>>>,
    task: tokio::task::JoinHandle<()>,
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
            let mut events = watcher(pods, config).boxed();
            while let Some(event) = events.next().await {
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

    /// Waits until its binding has counted `count` binds, then checks the history against the
    /// binds `ledger` saw.
    pub async fn assert_history_matches(
        &self,
        ledger: &BindLedger,
        timeout: Duration,
    ) -> anyhow::Result<StickyBindingStatus> {
        let count = ledger.len() as i64;
        let reached = wait_for(
            &format!("the history of {} to reach {count} binds", self.app),
            timeout,
            || async move {
                let status = self.history().await?;
                Ok((status.schedule_count >= count).then_some(status))
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
    let node_api: Api<Node> = Api::all(client.clone());
    let pods: Api<Pod> = Api::all(client.clone());
    for name in &nodes.names {
        let Some(node) = node_api.get_opt(name).await? else {
            continue;
        };
        let allocatable =
            Resource::from_list(node.status.as_ref().and_then(|s| s.allocatable.as_ref()));
        let on_node = pods
            .list(&ListParams::default().fields(&format!("spec.nodeName={name}")))
            .await?;
        let mut used = Resource::default();
        let mut count = 0;
        for pod in &on_node.items {
            let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
            if matches!(phase, Some("Succeeded" | "Failed")) {
                continue;
            }
            used.add(&pod_requests(pod, false));
            count += 1;
        }
        for resource in ["cpu", "memory"] {
            assert!(
                used.get(resource) <= allocatable.get(resource),
                "node {name} over-committed in {resource}: {} requested of {}",
                used.get(resource),
                allocatable.get(resource)
            );
        }
        assert!(
            count <= allocatable.get("pods"),
            "node {name} holds {count} pods, more than it allows"
        );
    }
    Ok(())
}
