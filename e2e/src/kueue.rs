//! A real Kueue beside the local control plane (`e2e/scripts/kueue-up.sh`: built from the Go
//! module proxy, its webhooks on 127.0.0.1) and the queues a batch platform gives it. Kueue
//! manages only namespaces labelled `e2e.tether.dev/kueue=true` ([`KUEUE_LABEL`]).

use std::process::Command;
use std::sync::Mutex;

use anyhow::{Context, bail};
use serde_json::json;

use crate::{apply, kubectl_ok, repo_dir};

/// The label that puts a namespace under Kueue's webhooks and management here.
pub const KUEUE_LABEL: &str = "e2e.tether.dev/kueue";

/// Kueue's label naming a workload's LocalQueue.
pub const QUEUE_NAME: &str = "kueue.x-k8s.io/queue-name";

static STARTED: Mutex<bool> = Mutex::new(false);

/// Starts Kueue unless it runs (once per test binary; the script itself does nothing when it
/// runs already).
pub fn ensure() -> anyhow::Result<()> {
    let mut started = STARTED.lock().unwrap_or_else(|e| e.into_inner());
    if *started {
        return Ok(());
    }
    let script = repo_dir().join("e2e/scripts/kueue-up.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "starting Kueue failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    *started = true;
    Ok(())
}

/// A ResourceFlavor, a ClusterQueue for one namespace with `cpu` of nominal quota (and memory
/// enough), and its LocalQueue `lq` in that namespace.
pub struct Queues {
    pub flavor: String,
    pub cluster_queue: String,
    pub local_queue: String,
}

impl Queues {
    pub fn create(namespace: &str, cpu: &str) -> anyhow::Result<Self> {
        Self::create_with(namespace, cpu, json!({}))
    }

    /// [`Queues::create`] with the flavor's `spec` (node labels, a topology, tolerations).
    pub fn create_with(
        namespace: &str,
        cpu: &str,
        flavor_spec: serde_json::Value,
    ) -> anyhow::Result<Self> {
        let suffix = crate::unique_suffix();
        let flavor = format!("flavor-{suffix}");
        let cluster_queue = format!("cq-{suffix}");
        apply(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ResourceFlavor",
            "metadata": {"name": flavor}, "spec": flavor_spec,
        }))?;
        apply(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "ClusterQueue",
            "metadata": {"name": cluster_queue},
            "spec": {
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                "resourceGroups": [{
                    "coveredResources": ["cpu", "memory"],
                    "flavors": [{"name": flavor, "resources": [
                        {"name": "cpu", "nominalQuota": cpu},
                        {"name": "memory", "nominalQuota": "100Gi"},
                    ]}],
                }],
            },
        }))?;
        apply(json!({
            "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "LocalQueue",
            "metadata": {"name": "lq", "namespace": namespace},
            "spec": {"clusterQueue": cluster_queue},
        }))?;
        Ok(Queues {
            flavor,
            cluster_queue,
            local_queue: "lq".into(),
        })
    }

    /// Deletes the cluster-scoped queues (the LocalQueue goes with its namespace).
    pub fn delete(&self) -> anyhow::Result<()> {
        kubectl_ok(
            &[
                "delete",
                "clusterqueue",
                &self.cluster_queue,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        )?;
        kubectl_ok(
            &[
                "delete",
                "resourceflavor",
                &self.flavor,
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        )?;
        Ok(())
    }
}
