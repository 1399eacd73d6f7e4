//! What plugin factories may need besides their args: the process's clients, watch-fed
//! indexes, writers and gate, named directly from where they live.

use std::sync::Arc;

use crate::gate::WriteGate;
use crate::recorder::EventWriter;
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::informers::disruption_budgets::DisruptionBudgets;
use crate::scheduler::informers::pod_groups::PodGroupIndex;
use crate::scheduler::informers::selectors::{DefaultSelectorSource, NoDefaultSelectors};
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::plugins::default_preemption::evictions::Evictions;
use crate::sticky::bindings::{BindingIndex, BindingLookup};
use crate::sticky::history::HistoryWriter;
use crate::sticky::workload::{NoOwners, OwnerLookup};

/// What plugin factories may need besides their args.
#[derive(Clone)]
pub struct Handle {
    /// The API client, for plugins that write (DefaultBinder). `None` in unit tests.
    pub client: Option<kube::Client>,
    /// Selectors of the Services and controllers that select a pod, for PodTopologySpread's
    /// default constraints.
    pub default_selectors: Arc<dyn DefaultSelectorSource>,
    /// Owner metadata from watch caches, for resolving a pod's workload (StickyNode,
    /// PlacementHistory).
    pub owners: Arc<dyn OwnerLookup>,
    /// StickyBindings from a watch, for the pin and placement history of a workload.
    pub bindings: Arc<dyn BindingLookup>,
    /// The StickyBinding history writer, for PlacementRecorder. `None` in unit tests.
    pub history: Option<Arc<HistoryWriter>>,
    /// Volumes, claims, classes and CSI objects from watches, for the volume plugins.
    pub storage: Arc<StorageIndex>,
    /// ResourceSlices, DeviceClasses, ResourceClaims and DeviceTaintRules from watches, for
    /// DynamicResources.
    pub devices: Arc<DeviceIndex>,
    /// PodDisruptionBudgets from a watch, for DefaultPreemption.
    pub budgets: Arc<DisruptionBudgets>,
    /// PodGroups from a watch and the pods naming each, for GangScheduling.
    pub pod_groups: Arc<PodGroupIndex>,
    /// Writes events (DefaultPreemption's `Preempted`). `None` in unit tests.
    pub events: Option<EventWriter>,
    /// Asked before a plugin writes to the cluster (preemption's evictions, VolumeBinding's
    /// PreBind writes).
    pub gate: WriteGate,
    /// The evictions DefaultPreemption has decided and the cache does not show yet, shared by
    /// every profile of one scheduler.
    pub evictions: Arc<Evictions>,
    /// Tries a pod again at once (DefaultPreemption's preemptor, when its evictions failed).
    /// `None` in unit tests.
    pub activator: Option<Arc<dyn crate::scheduler::framework::PodActivator>>,
    /// Where plugins count kube-scheduler's metrics of their own (DefaultPreemption's attempts
    /// and victims). `None` in unit tests and simulations.
    pub metrics: Option<Arc<crate::scheduler::metrics::Metrics>>,
    /// The Kubernetes minor whose kube-scheduler the plugins behave as, where minors differ.
    pub release: crate::k8s::release::Release,
    /// The feature gates `--feature-gates` set, as they apply to `release`.
    pub features: crate::k8s::features::FeatureGates,
}

/// A handle without an API client: its plugins write nothing (tests, `tether simulate`), so its
/// always-leading gate admits nothing that could reach a cluster. A handle that writes is built
/// whole, with the session's gate.
impl Default for Handle {
    fn default() -> Self {
        Handle {
            client: None,
            default_selectors: Arc::new(NoDefaultSelectors),
            owners: Arc::new(NoOwners),
            bindings: Arc::new(BindingIndex::default()),
            history: None,
            storage: Arc::new(StorageIndex::default()),
            devices: Arc::new(DeviceIndex::default()),
            budgets: Arc::new(DisruptionBudgets::default()),
            pod_groups: Arc::default(),
            events: None,
            gate: WriteGate::alone(),
            evictions: Arc::default(),
            activator: None,
            metrics: None,
            release: crate::k8s::release::Release::default(),
            features: Default::default(),
        }
    }
}
