//! What `tether simulate` replays against: the objects tether's watches would hold, read once
//! from the API server or from a file `tether snapshot` wrote. One type for both, so an offline
//! run answers as an online run of the same moment does.

use std::collections::BTreeSet;
use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{
    Namespace, Node, PersistentVolume, PersistentVolumeClaim, PodTemplateSpec, Service,
};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, ListParams};
use serde::{Deserialize, Serialize};

use crate::api::{SchedulingProfile, StickyBinding};
use crate::k8s::features::FeatureGates;
use crate::k8s::pod::Pod;
use crate::k8s::release::Release;
use crate::k8s::{pods, volumes};
use crate::scheduler::backend::cache::{Cache, occupies_node};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::informers::Keeps;
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::informers::disruption_budgets::DisruptionBudgets;
use crate::scheduler::informers::pod_groups::composite::CompositeGroup;
use crate::scheduler::informers::pod_groups::{CoschedulingGroup, PodGroupIndex};
use crate::scheduler::informers::selectors::{self, WorkloadSelectors};
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::sticky::{placement_history, sticky_node};
use crate::sticky::bindings::BindingIndex;
use crate::sticky::owners::{self, OwnerCache};

/// The `kind` a snapshot file carries.
pub const KIND: &str = "TetherClusterSnapshot";

/// The cluster as tether's scheduler sees it.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ClusterState {
    pub kind: String,
    /// The API server's version (`v1.37.2`): the release whose kube-scheduler the simulation
    /// schedules as (a snapshot without it, or of a release tether does not schedule as, is
    /// simulated as the reference release).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kubernetes_version: Option<String>,
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
    #[serde(default)]
    pub resource_slices: Vec<ResourceSlice>,
    #[serde(default)]
    pub device_classes: Vec<DeviceClass>,
    #[serde(default)]
    pub resource_claims: Vec<ResourceClaim>,
    #[serde(default)]
    pub device_taint_rules: Vec<DeviceTaintRule>,
    /// The Workload API's PodGroups (`scheduling.k8s.io/v1beta1`), where it is served.
    #[serde(default)]
    pub pod_groups: Vec<PodGroup>,
    /// scheduler-plugins' PodGroups (`scheduling.x-k8s.io/v1alpha1`), where the kind is served.
    #[serde(default)]
    pub coscheduling_pod_groups: Vec<kube::api::DynamicObject>,
    /// CompositePodGroups (`scheduling.k8s.io/v1beta1`, 1.38), where the kind is served.
    #[serde(default)]
    pub composite_pod_groups: Vec<kube::api::DynamicObject>,
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
    // Object by object, as tether's watches read them: one a client cannot read is left out,
    // named, and the rest are listed.
    let (mut items, skipped) = crate::watch::list_each(Api::<K>::all(client.clone()))
        .await
        .with_context(|| format!("listing {what}"))?;
    for unreadable in &skipped {
        eprintln!(
            "warning: left out {what} {} (cannot be read: {})",
            unreadable.key(),
            unreadable.reason
        );
    }
    for item in &mut items {
        item.meta_mut().managed_fields = None;
    }
    Ok(items)
}

/// As [`list`], for a kind an API server may not serve (`resource.k8s.io/v1` before Kubernetes
/// 1.34, or turned off): none when the API server does not know it, or (with a warning) when
/// the user may not list it.
async fn list_if_served<K>(client: &kube::Client, what: &str) -> anyhow::Result<Vec<K>>
where
    K: kube::Resource<DynamicType = ()> + Clone + std::fmt::Debug + serde::de::DeserializeOwned,
{
    match Api::<K>::all(client.clone())
        .list(&ListParams::default().limit(1))
        .await
    {
        Err(e) if crate::k8s::api_errors::not_found(&e) => Ok(Vec::new()),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            eprintln!(
                "warning: not allowed to list {what} ({}): simulating without them",
                e.message
            );
            Ok(Vec::new())
        }
        _ => list(client, what).await,
    }
}

/// The objects of a kind tether reads dynamically (scheduler-plugins' PodGroups,
/// CompositePodGroups): none when the kind is not served, or (with a warning) when the user may
/// not list them.
async fn list_dynamic(
    client: &kube::Client,
    resource: &kube::api::ApiResource,
    what: &str,
) -> anyhow::Result<Vec<kube::api::DynamicObject>> {
    let api = Api::<kube::api::DynamicObject>::all_with(client.clone(), resource);
    match crate::watch::list_each(api).await {
        Ok((items, _)) => Ok(items
            .into_iter()
            .map(|mut o| {
                o.metadata.managed_fields = None;
                o
            })
            .collect()),
        Err(e) if crate::k8s::api_errors::not_found(&e) => Ok(Vec::new()),
        Err(kube::Error::Api(e)) if e.code == 403 => {
            eprintln!(
                "warning: not allowed to list {what} ({}): simulating without them",
                e.message
            );
            Ok(Vec::new())
        }
        Err(e) => Err(e).with_context(|| format!("listing {what}")),
    }
}

/// The annotations some part of scheduling reads: the volume plugins' (on claims, volumes and
/// CSINodes), and DynamicResources' mark on the claim it made for a pod's extended resources. The opt-out annotations of StickyNode and PlacementHistory are added from the
/// profiles (they are args); anything under `tether.dev/` is tether's own.
const READ_ANNOTATIONS: &[&str] = &[
    crate::scheduler::informers::devices::EXTENDED_CLAIM_ANNOTATION,
    volumes::ANN_BIND_COMPLETED,
    volumes::ANN_BOUND_BY_CONTROLLER,
    volumes::ANN_SELECTED_NODE,
    volumes::ANN_BETA_CLASS,
    "storage.alpha.kubernetes.io/migrated-plugins",
];

/// Which annotations a snapshot keeps: those scheduling reads, nothing else (kubectl's copy of
/// the applied object, a tool's notes and whatever a person wrote are dropped).
struct KeptAnnotations(BTreeSet<String>);

impl KeptAnnotations {
    /// The fixed list, and the opt-out annotations the profiles name.
    fn for_profiles(profiles: &[SchedulingProfile]) -> Self {
        let mut keys: BTreeSet<String> = READ_ANNOTATIONS.iter().map(|k| k.to_string()).collect();
        keys.insert(sticky_node::DEFAULT_DISABLE_ANNOTATION.into());
        keys.insert(placement_history::DEFAULT_DISABLE_ANNOTATION.into());
        for config in profiles.iter().flat_map(|p| &p.spec.plugin_config) {
            if let Some(key) = config
                .args
                .as_ref()
                .and_then(|a| a.get("disableAnnotation"))
                .and_then(|k| k.as_str())
            {
                keys.insert(key.to_string());
            }
        }
        KeptAnnotations(keys)
    }

    fn apply(&self, meta: &mut ObjectMeta) {
        meta.managed_fields = None;
        if let Some(annotations) = meta.annotations.as_mut() {
            annotations.retain(|k, _| self.0.contains(k) || k.starts_with("tether.dev/"));
            if annotations.is_empty() {
                meta.annotations = None;
            }
        }
    }
}

/// A pod as a snapshot holds it: the scheduler's own compaction (no environment, command,
/// arguments, probes, lifecycle hooks or security contexts; only volumes that bear on
/// placement), and of those volumes no free-form attributes (a FlexVolume's options, an inline
/// CSI volume's attributes), which no plugin reads and a driver may take credentials in.
fn compact_for_snapshot(pod: &mut Pod) {
    pods::compact(pod);
    for v in pod
        .spec
        .iter_mut()
        .flat_map(|s| s.volumes.iter_mut().flatten())
    {
        if let Some(flex) = v.flex_volume.as_mut() {
            flex.options = None;
        }
        if let Some(csi) = v.csi.as_mut() {
            csi.volume_attributes = None;
        }
    }
}

/// A workload's pod template, compacted as its pods are.
fn compact_template(template: &mut PodTemplateSpec, kept: &KeptAnnotations) {
    let mut pod = Pod {
        metadata: template.metadata.take().unwrap_or_default(),
        spec: template.spec.take().map(Into::into),
        status: None,
    };
    compact_for_snapshot(&mut pod);
    kept.apply(&mut pod.metadata);
    template.metadata = Some(pod.metadata);
    template.spec = pod.spec.map(Into::into);
}

impl ClusterState {
    /// Lists what the scheduler watches (pods without their containers' environment).
    pub async fn read(client: &kube::Client) -> anyhow::Result<Self> {
        let pods: Vec<Pod> = list(client, "pods").await?;
        let version = client
            .apiserver_version()
            .await
            .context("asking the API server for its version (/version)")?;
        let mut state = ClusterState {
            kind: KIND.into(),
            kubernetes_version: Some(version.git_version),
            nodes: list(client, "nodes").await?,
            pods,
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
            resource_slices: list_if_served(client, "resourceslices").await?,
            device_classes: list_if_served(client, "deviceclasses").await?,
            resource_claims: list_if_served(client, "resourceclaims").await?,
            device_taint_rules: list_if_served(client, "devicetaintrules").await?,
            pod_groups: list_if_served(client, "podgroups").await?,
            coscheduling_pod_groups: list_dynamic(
                client,
                &crate::scheduler::informers::pod_groups::coscheduling_resource(),
                "podgroups.scheduling.x-k8s.io",
            )
            .await?,
            composite_pod_groups: list_dynamic(
                client,
                &crate::scheduler::informers::pod_groups::composite::composite_resource(),
                "compositepodgroups",
            )
            .await?,
        };
        state.keep_only_what_scheduling_reads();
        Ok(state)
    }

    /// Drops what no part of scheduling reads, so that a snapshot holds no secret a workload
    /// carries: pods and the workloads' pod templates are compacted as the scheduler's caches
    /// compact pods (no environment, commands, arguments, probes, hooks), annotations are kept
    /// only where scheduling reads them, storage classes lose their parameters, and no object
    /// keeps its managedFields. Labels, specs the plugins read and status stay.
    pub fn keep_only_what_scheduling_reads(&mut self) {
        let kept = KeptAnnotations::for_profiles(&self.scheduling_profiles);
        for pod in &mut self.pods {
            compact_for_snapshot(pod);
            kept.apply(&mut pod.metadata);
        }
        for rs in &mut self.replica_sets {
            kept.apply(&mut rs.metadata);
            if let Some(template) = rs.spec.template.as_mut() {
                compact_template(template, &kept);
            }
        }
        for d in &mut self.deployments {
            kept.apply(&mut d.metadata);
            compact_template(&mut d.spec.template, &kept);
        }
        for ss in &mut self.stateful_sets {
            kept.apply(&mut ss.metadata);
            compact_template(&mut ss.spec.template, &kept);
            for claim in ss.spec.volume_claim_templates.iter_mut().flatten() {
                kept.apply(&mut claim.metadata);
            }
        }
        for class in &mut self.storage_classes {
            kept.apply(&mut class.metadata);
            class.parameters = None;
        }
        // A driver's opaque configuration (in classes, claims and allocations) decides no
        // placement, and may carry what a secret would.
        for class in &mut self.device_classes {
            kept.apply(&mut class.metadata);
            if let Some(spec) = class.spec.as_mut() {
                spec.config = None;
            }
        }
        for claim in &mut self.resource_claims {
            kept.apply(&mut claim.metadata);
            if let Some(devices) = claim.spec.as_mut().and_then(|s| s.devices.as_mut()) {
                devices.config = None;
            }
            if let Some(devices) = claim
                .status
                .as_mut()
                .and_then(|s| s.allocation.as_mut())
                .and_then(|a| a.devices.as_mut())
            {
                devices.config = None;
            }
            if let Some(status) = claim.status.as_mut() {
                for d in status.devices.iter_mut().flatten() {
                    d.data = None;
                }
            }
        }
        let metas = self
            .nodes
            .iter_mut()
            .map(|o| &mut o.metadata)
            .chain(self.namespaces.iter_mut().map(|o| &mut o.metadata))
            .chain(self.scheduling_profiles.iter_mut().map(|o| &mut o.metadata))
            .chain(self.sticky_bindings.iter_mut().map(|o| &mut o.metadata))
            .chain(self.services.iter_mut().map(|o| &mut o.metadata))
            .chain(self.persistent_volumes.iter_mut().map(|o| &mut o.metadata))
            .chain(
                self.persistent_volume_claims
                    .iter_mut()
                    .map(|o| &mut o.metadata),
            )
            .chain(self.csi_nodes.iter_mut().map(|o| &mut o.metadata))
            .chain(self.csi_drivers.iter_mut().map(|o| &mut o.metadata))
            .chain(self.resource_slices.iter_mut().map(|o| &mut o.metadata))
            .chain(self.device_taint_rules.iter_mut().map(|o| &mut o.metadata))
            .chain(self.pod_groups.iter_mut().map(|o| &mut o.metadata))
            .chain(
                self.coscheduling_pod_groups
                    .iter_mut()
                    .chain(self.composite_pod_groups.iter_mut())
                    .map(|o| &mut o.metadata),
            );
        for meta in metas {
            kept.apply(meta);
        }
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

    /// The release the cluster ran (see [`ClusterState::kubernetes_version`]).
    pub fn release(&self) -> Release {
        self.kubernetes_version
            .as_deref()
            .and_then(|v| Release::parse(v).and_then(Release::supported).ok())
            .unwrap_or_default()
    }

    /// What the plugins read besides the snapshot, filled from these lists.
    pub fn handle(&self) -> Handle {
        let storage = Arc::new(StorageIndex::default());
        storage.reset::<PersistentVolume>(arcs(&self.persistent_volumes));
        storage.reset::<PersistentVolumeClaim>(arcs(&self.persistent_volume_claims));
        storage.reset::<StorageClass>(arcs(&self.storage_classes));
        storage.reset::<CSINode>(arcs(&self.csi_nodes));
        storage.reset::<CSIDriver>(arcs(&self.csi_drivers));
        let devices = Arc::new(DeviceIndex::default());
        Keeps::<ResourceSlice>::reset(&*devices, arcs(&self.resource_slices));
        Keeps::<DeviceClass>::reset(&*devices, arcs(&self.device_classes));
        Keeps::<ResourceClaim>::reset(&*devices, arcs(&self.resource_claims));
        Keeps::<DeviceTaintRule>::reset(&*devices, arcs(&self.device_taint_rules));
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
            release: self.release(),
            // The API server keeps a PodGroup's claims only with DRAWorkloadResourceClaims on,
            // which the scheduler then has on too: a snapshot holding one simulates it so.
            features: FeatureGates {
                dra_workload_resource_claims: self.release().at_least(37)
                    && self.pod_groups.iter().any(|g| {
                        g.spec
                            .resource_claims
                            .as_ref()
                            .is_some_and(|c| !c.is_empty())
                    }),
            },
            client: None,
            default_selectors: workload_selectors,
            owners,
            bindings,
            history: None,
            storage,
            devices,
            budgets: Arc::new(DisruptionBudgets::default()),
            pod_groups: {
                let groups = Arc::new(PodGroupIndex::default());
                Keeps::<PodGroup>::reset(&*groups, arcs(&self.pod_groups));
                groups.reset_coscheduling(
                    self.coscheduling_pod_groups
                        .iter()
                        .map(|o| Arc::new(CoschedulingGroup::from_object(o)))
                        .collect(),
                );
                groups.reset_composites(
                    self.composite_pod_groups
                        .iter()
                        .map(|o| Arc::new(CompositeGroup::from_object(o)))
                        .collect(),
                );
                for pod in &self.pods {
                    groups.observe_pod(pod);
                }
                groups
            },
            events: None,
            // No client: nothing is written.
            gate: crate::gate::WriteGate::alone(),
            evictions: Arc::default(),
            activator: None,
            metrics: None,
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
