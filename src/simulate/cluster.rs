//! What `tether simulate` replays against: the objects tether's watches would hold, read once
//! from the API server or from a file `tether snapshot` wrote. One type for both, so an offline
//! run answers as an online run of the same moment does.

use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, Pod, Service,
};
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use kube::api::{Api, ListParams};
use serde::{Deserialize, Serialize};

use crate::api::{SchedulingProfile, StickyBinding};
use crate::scheduler::backend::cache::{Cache, occupies_node};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::informers::disruption_budgets::DisruptionBudgets;
use crate::scheduler::informers::selectors::{self, WorkloadSelectors};
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::plugins::registry::Handle;
use crate::sticky::bindings::BindingIndex;
use crate::sticky::owners::{self, OwnerCache};

/// The `kind` a snapshot file carries.
pub const KIND: &str = "TetherClusterSnapshot";

/// The cluster as tether's scheduler sees it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    pub kind: String,
    pub nodes: Vec<Node>,
    pub pods: Vec<Pod>,
    #[serde(default)]
    pub namespaces: Vec<Namespace>,
    #[serde(default)]
    pub scheduling_profiles: Vec<SchedulingProfile>,
    #[serde(default)]
    pub sticky_bindings: Vec<StickyBinding>,
    #[serde(default)]
    pub services: Vec<Service>,
    #[serde(default)]
    pub replica_sets: Vec<ReplicaSet>,
    #[serde(default)]
    pub deployments: Vec<Deployment>,
    #[serde(default)]
    pub stateful_sets: Vec<StatefulSet>,
    #[serde(default)]
    pub persistent_volumes: Vec<PersistentVolume>,
    #[serde(default)]
    pub persistent_volume_claims: Vec<PersistentVolumeClaim>,
    #[serde(default)]
    pub storage_classes: Vec<StorageClass>,
    #[serde(default)]
    pub csi_nodes: Vec<CSINode>,
    #[serde(default)]
    pub csi_drivers: Vec<CSIDriver>,
}

/// The objects, each in an `Arc`.
fn arcs<K: Clone>(objects: &[K]) -> Vec<Arc<K>> {
    objects.iter().cloned().map(Arc::new).collect()
}

/// Every object of a kind, without managedFields (they are most of an object's bytes).
async fn list<K>(client: &kube::Client, what: &str) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    let mut items = Api::<K>::all(client.clone())
        .list(&ListParams::default())
        .await
        .with_context(|| format!("listing {what}"))?
        .items;
    for item in &mut items {
        item.meta_mut().managed_fields = None;
    }
    Ok(items)
}

/// The annotation kubectl keeps a whole copy of an applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A pod without what no plugin reads and a snapshot file should not carry: its containers'
/// environment (values may be secrets) and kubectl's copy of the applied object.
fn without_secrets(mut pod: Pod) -> Pod {
    if let Some(annotations) = pod.metadata.annotations.as_mut() {
        annotations.remove(LAST_APPLIED);
    }
    if let Some(spec) = pod.spec.as_mut() {
        let containers = spec
            .containers
            .iter_mut()
            .chain(spec.init_containers.iter_mut().flatten());
        for c in containers {
            c.env = None;
            c.env_from = None;
        }
        for c in spec.ephemeral_containers.iter_mut().flatten() {
            c.env = None;
            c.env_from = None;
        }
    }
    pod
}

impl ClusterState {
    /// Lists what the scheduler watches (pods without their containers' environment).
    pub async fn read(client: &kube::Client) -> anyhow::Result<Self> {
        let pods: Vec<Pod> = list(client, "pods").await?;
        Ok(ClusterState {
            kind: KIND.into(),
            nodes: list(client, "nodes").await?,
            pods: pods.into_iter().map(without_secrets).collect(),
            namespaces: list(client, "namespaces").await?,
            scheduling_profiles: list(client, "schedulingprofiles.tether.dev").await?,
            sticky_bindings: list(client, "stickybindings.tether.dev").await?,
            services: list(client, "services").await?,
            replica_sets: list(client, "replicasets").await?,
            deployments: list(client, "deployments").await?,
            stateful_sets: list(client, "statefulsets").await?,
            persistent_volumes: list(client, "persistentvolumes").await?,
            persistent_volume_claims: list(client, "persistentvolumeclaims").await?,
            storage_classes: list(client, "storageclasses").await?,
            csi_nodes: list(client, "csinodes").await?,
            csi_drivers: list(client, "csidrivers").await?,
        })
    }

    /// Reads a file `tether snapshot` wrote.
    pub fn load(path: &std::path::Path) -> anyhow::Result<Self> {
        let text =
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
        let state: ClusterState = serde_json::from_str(&text)
            .with_context(|| format!("{} is not a tether snapshot", path.display()))?;
        anyhow::ensure!(
            state.kind == KIND,
            "{} is not a tether snapshot (kind {:?}, want {KIND})",
            path.display(),
            state.kind
        );
        Ok(state)
    }

    /// What the plugins read besides the snapshot, filled from these lists.
    pub fn handle(&self) -> Handle {
        let storage = Arc::new(StorageIndex::default());
        storage.reset::<PersistentVolume>(arcs(&self.persistent_volumes));
        storage.reset::<PersistentVolumeClaim>(arcs(&self.persistent_volume_claims));
        storage.reset::<StorageClass>(arcs(&self.storage_classes));
        storage.reset::<CSINode>(arcs(&self.csi_nodes));
        storage.reset::<CSIDriver>(arcs(&self.csi_drivers));
        let bindings = Arc::new(BindingIndex::default());
        bindings.reset(self.sticky_bindings.clone());
        let owners = Arc::new(OwnerCache::with_kinds(Vec::new()));
        owners::fill(
            &owners,
            &self.replica_sets,
            &self.deployments,
            &self.stateful_sets,
        );
        let workload_selectors = Arc::new(WorkloadSelectors::default());
        selectors::fill(
            &workload_selectors,
            self.services.clone(),
            self.replica_sets.clone(),
            self.stateful_sets.clone(),
        );
        Handle {
            client: None,
            default_selectors: workload_selectors,
            owners,
            bindings,
            history: None,
            storage,
            budgets: Arc::new(DisruptionBudgets::default()),
            events: None,
            // No client: nothing is written.
            gate: crate::gate::WriteGate::alone(),
            evictions: Arc::default(),
        }
    }

    /// The scheduler's snapshot: every node with the pods bound to it.
    pub fn snapshot(&self) -> Arc<Snapshot> {
        let mut cache = Cache::new();
        for node in &self.nodes {
            cache.upsert_node(Arc::new(node.clone()));
        }
        for pod in self.pods.iter().filter(|p| occupies_node(p)) {
            cache.upsert_pod(Arc::new(pod.clone()));
        }
        for ns in &self.namespaces {
            cache.set_namespace(
                ns.metadata.name.as_deref().unwrap_or_default(),
                ns.metadata.labels.clone().unwrap_or_default(),
            );
        }
        cache.snapshot()
    }
}
