//! The plugin registry (kube-scheduler's in-tree registry): every plugin tether knows, by name,
//! with the function that builds it from its (validated) args and what it needs of the process
//! ([`Handle`]), and kube-scheduler's default plugin set.

use std::sync::Arc;

use crate::k8s::recorder::EventWriter;
use crate::scheduler::framework::Plugin;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::informers::disruption_budgets::DisruptionBudgets;
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::plugins;
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
    pub default_selectors: Arc<dyn plugins::pod_topology_spread::DefaultSelectorSource>,
    /// Owner metadata from watch caches, for resolving a pod's workload (StickyNode,
    /// PlacementHistory).
    pub owners: Arc<dyn OwnerLookup>,
    /// StickyBindings from a watch, for the pin and placement history of a workload.
    pub bindings: Arc<dyn BindingLookup>,
    /// The StickyBinding history writer, for PlacementRecorder. `None` in unit tests.
    pub history: Option<Arc<HistoryWriter>>,
    /// Volumes, claims, classes and CSI objects from watches, for the volume plugins.
    pub storage: Arc<StorageIndex>,
    /// PodDisruptionBudgets from a watch, for DefaultPreemption.
    pub budgets: Arc<DisruptionBudgets>,
    /// Writes events (DefaultPreemption's `Preempted`). `None` in unit tests.
    pub events: Option<EventWriter>,
}

impl Default for Handle {
    fn default() -> Self {
        Handle {
            client: None,
            default_selectors: Arc::new(plugins::pod_topology_spread::NoDefaultSelectors),
            owners: Arc::new(NoOwners),
            bindings: Arc::new(BindingIndex::default()),
            history: None,
            storage: Arc::new(StorageIndex::default()),
            budgets: Arc::new(DisruptionBudgets::default()),
            events: None,
        }
    }
}

/// Builds a plugin from its args; errors name fields under `path` (e.g. `pluginConfig[0].args`).
pub type Factory =
    fn(Option<&serde_json::Value>, &FieldPath, &Handle) -> Result<Arc<dyn Plugin>, FieldErrors>;

/// A registered plugin: its name, factory, and the weight it scores with unless told otherwise.
pub struct Registration {
    pub name: &'static str,
    pub factory: Factory,
    pub default_weight: i32,
}

/// Every plugin tether can run.
pub fn registry() -> Vec<Registration> {
    use plugins::sticky::{placement_history, placement_recorder, sticky_node};
    use plugins::*;
    let reg = |name, factory, default_weight| Registration {
        name,
        factory,
        default_weight,
    };
    vec![
        reg(priority_sort::NAME, |a, p, _| priority_sort::build(a, p), 0),
        reg(
            scheduling_gates::NAME,
            |a, p, _| scheduling_gates::build(a, p),
            0,
        ),
        reg(
            node_unschedulable::NAME,
            |a, p, _| node_unschedulable::build(a, p),
            0,
        ),
        reg(node_name::NAME, |a, p, _| node_name::build(a, p), 0),
        reg(
            taint_toleration::NAME,
            |a, p, _| taint_toleration::build(a, p),
            taint_toleration::DEFAULT_WEIGHT,
        ),
        reg(
            node_affinity::NAME,
            |a, p, _| node_affinity::build(a, p),
            node_affinity::DEFAULT_WEIGHT,
        ),
        reg(node_ports::NAME, |a, p, _| node_ports::build(a, p), 0),
        reg(
            noderesources::fit::NAME,
            |a, p, _| noderesources::fit::build(a, p),
            noderesources::fit::DEFAULT_WEIGHT,
        ),
        reg(
            volume_restrictions::NAME,
            |a, p, h| volume_restrictions::build(a, p, h.storage.clone()),
            0,
        ),
        reg(
            node_volume_limits::NAME,
            |a, p, h| node_volume_limits::build(a, p, h.storage.clone()),
            0,
        ),
        reg(
            volume_binding::NAME,
            |a, p, h| volume_binding::build(a, p, h.storage.clone(), h.client.clone()),
            volume_binding::DEFAULT_WEIGHT,
        ),
        reg(
            volume_zone::NAME,
            |a, p, h| volume_zone::build(a, p, h.storage.clone()),
            0,
        ),
        reg(
            pod_topology_spread::NAME,
            |a, p, h| pod_topology_spread::build(a, p, h.default_selectors.clone()),
            pod_topology_spread::DEFAULT_WEIGHT,
        ),
        reg(
            inter_pod_affinity::NAME,
            |a, p, _| inter_pod_affinity::build(a, p),
            inter_pod_affinity::DEFAULT_WEIGHT,
        ),
        reg(
            default_preemption::NAME,
            |a, p, h| {
                default_preemption::build(
                    a,
                    p,
                    h.budgets.clone(),
                    h.client.clone(),
                    h.events.clone(),
                )
            },
            0,
        ),
        reg(
            noderesources::balanced_allocation::NAME,
            |a, p, _| noderesources::balanced_allocation::build(a, p),
            noderesources::balanced_allocation::DEFAULT_WEIGHT,
        ),
        reg(
            image_locality::NAME,
            |a, p, _| image_locality::build(a, p),
            image_locality::DEFAULT_WEIGHT,
        ),
        reg(
            default_binder::NAME,
            |a, p, h| default_binder::build(a, p, h.client.clone()),
            0,
        ),
        reg(
            node_declared_features::NAME,
            |a, p, _| node_declared_features::build(a, p),
            0,
        ),
        reg(
            sticky_node::NAME,
            |a, p, h| {
                sticky_node::build(
                    a,
                    p,
                    h.owners.clone(),
                    h.bindings.clone(),
                    h.storage.clone(),
                )
            },
            0,
        ),
        reg(
            placement_history::NAME,
            |a, p, h| placement_history::build(a, p, h.owners.clone(), h.bindings.clone()),
            placement_history::DEFAULT_WEIGHT,
        ),
        reg(
            placement_recorder::NAME,
            |a, p, h| placement_recorder::build(a, p, h.history.clone()),
            0,
        ),
    ]
}

/// The plugins that read StickyBinding history: where one runs, PlacementRecorder records
/// every bind (the profile compiler enables it at postBind).
pub const HISTORY_READERS: [&str; 2] = [
    plugins::sticky::sticky_node::NAME,
    plugins::sticky::placement_history::NAME,
];

/// kube-scheduler's default plugins (its v1 `multiPoint` defaults that tether implements), in
/// their order, with their default score weights.
pub fn default_multi_point() -> Vec<(&'static str, Option<i32>)> {
    use plugins::*;
    vec![
        (scheduling_gates::NAME, None),
        (priority_sort::NAME, None),
        (node_unschedulable::NAME, None),
        (node_name::NAME, None),
        (
            taint_toleration::NAME,
            Some(taint_toleration::DEFAULT_WEIGHT),
        ),
        (node_affinity::NAME, Some(node_affinity::DEFAULT_WEIGHT)),
        (node_ports::NAME, None),
        (
            noderesources::fit::NAME,
            Some(noderesources::fit::DEFAULT_WEIGHT),
        ),
        (volume_restrictions::NAME, None),
        (node_volume_limits::NAME, None),
        (volume_binding::NAME, None),
        (volume_zone::NAME, None),
        (
            pod_topology_spread::NAME,
            Some(pod_topology_spread::DEFAULT_WEIGHT),
        ),
        (
            inter_pod_affinity::NAME,
            Some(inter_pod_affinity::DEFAULT_WEIGHT),
        ),
        (default_preemption::NAME, None),
        (
            noderesources::balanced_allocation::NAME,
            Some(noderesources::balanced_allocation::DEFAULT_WEIGHT),
        ),
        (image_locality::NAME, Some(image_locality::DEFAULT_WEIGHT)),
        (default_binder::NAME, None),
        (node_declared_features::NAME, None),
    ]
}
