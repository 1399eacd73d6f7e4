//! The plugin registry (kube-scheduler's in-tree registry): every plugin tether knows, by name,
//! with the function that builds it from its (validated) args and what it needs of the process
//! ([`Handle`]), and kube-scheduler's default plugin set.

use std::sync::Arc;

use crate::gate::WriteGate;
use crate::recorder::EventWriter;
use crate::scheduler::framework::Plugin;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::informers::disruption_budgets::DisruptionBudgets;
use crate::scheduler::informers::pod_groups::PodGroupIndex;
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
    pub evictions: Arc<plugins::default_preemption::evictions::Evictions>,
    /// Tries a pod again at once (DefaultPreemption's preemptor, when its evictions failed).
    /// `None` in unit tests.
    pub activator: Option<Arc<dyn crate::scheduler::framework::PodActivator>>,
    /// Where plugins count kube-scheduler's metrics of their own (DefaultPreemption's attempts
    /// and victims). `None` in unit tests and simulations.
    pub metrics: Option<Arc<crate::scheduler::metrics::Metrics>>,
}

/// A handle without an API client: its plugins write nothing (tests, `tether simulate`), so its
/// always-leading gate admits nothing that could reach a cluster. A handle that writes is built
/// whole, with the session's gate.
impl Default for Handle {
    fn default() -> Self {
        Handle {
            client: None,
            default_selectors: Arc::new(plugins::pod_topology_spread::NoDefaultSelectors),
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

/// Every plugin tether can run: its name, its factory and its default score weight (each
/// plugin's own `DEFAULT_WEIGHT`, written once, beside its Score).
pub fn registry() -> Vec<Registration> {
    use plugins::sticky::{placement_history, placement_recorder, sticky_node};
    use plugins::*;
    let rows: [(&'static str, Factory, i32); 25] = [
        (priority_sort::NAME, priority_sort::build, 0),
        (scheduling_gates::NAME, scheduling_gates::build, 0),
        (node_unschedulable::NAME, node_unschedulable::build, 0),
        (node_name::NAME, node_name::build, 0),
        (
            taint_toleration::NAME,
            taint_toleration::build,
            taint_toleration::DEFAULT_WEIGHT,
        ),
        (
            node_affinity::NAME,
            node_affinity::build,
            node_affinity::DEFAULT_WEIGHT,
        ),
        (node_ports::NAME, node_ports::build, 0),
        (
            noderesources::fit::NAME,
            noderesources::fit::build,
            noderesources::fit::DEFAULT_WEIGHT,
        ),
        (volume_restrictions::NAME, volume_restrictions::build, 0),
        (node_volume_limits::NAME, node_volume_limits::build, 0),
        (
            volume_binding::NAME,
            volume_binding::build,
            volume_binding::DEFAULT_WEIGHT,
        ),
        (volume_zone::NAME, volume_zone::build, 0),
        (
            pod_topology_spread::NAME,
            pod_topology_spread::build,
            pod_topology_spread::DEFAULT_WEIGHT,
        ),
        (
            inter_pod_affinity::NAME,
            inter_pod_affinity::build,
            inter_pod_affinity::DEFAULT_WEIGHT,
        ),
        (
            dynamic_resources::NAME,
            dynamic_resources::build,
            dynamic_resources::DEFAULT_WEIGHT,
        ),
        (default_preemption::NAME, default_preemption::build, 0),
        (
            noderesources::balanced_allocation::NAME,
            noderesources::balanced_allocation::build,
            noderesources::balanced_allocation::DEFAULT_WEIGHT,
        ),
        (
            image_locality::NAME,
            image_locality::build,
            image_locality::DEFAULT_WEIGHT,
        ),
        (default_binder::NAME, default_binder::build, 0),
        (
            node_declared_features::NAME,
            node_declared_features::build,
            0,
        ),
        (sticky_node::NAME, sticky_node::build, 0),
        (
            placement_history::NAME,
            placement_history::build,
            placement_history::DEFAULT_WEIGHT,
        ),
        (placement_recorder::NAME, placement_recorder::build, 0),
        (gang_scheduling::NAME, gang_scheduling::build, 0),
        (coscheduling::NAME, coscheduling::build, 0),
    ];
    rows.into_iter()
        .map(|(name, factory, default_weight)| Registration {
            name,
            factory,
            default_weight,
        })
        .collect()
}

/// kube-scheduler's default plugins (its v1 `multiPoint` defaults that tether implements), in
/// their order, with their default score weights (those of [`registry`]) where they score.
pub fn default_multi_point() -> Vec<(&'static str, Option<i32>)> {
    use plugins::*;
    let known = registry();
    let scoring = [
        taint_toleration::NAME,
        node_affinity::NAME,
        noderesources::fit::NAME,
        pod_topology_spread::NAME,
        inter_pod_affinity::NAME,
        dynamic_resources::NAME,
        noderesources::balanced_allocation::NAME,
        image_locality::NAME,
    ];
    [
        scheduling_gates::NAME,
        priority_sort::NAME,
        // 1.37: NodeName before NodeUnschedulable.
        node_name::NAME,
        node_unschedulable::NAME,
        taint_toleration::NAME,
        node_affinity::NAME,
        node_ports::NAME,
        noderesources::fit::NAME,
        volume_restrictions::NAME,
        node_volume_limits::NAME,
        volume_binding::NAME,
        volume_zone::NAME,
        pod_topology_spread::NAME,
        inter_pod_affinity::NAME,
        dynamic_resources::NAME,
        default_preemption::NAME,
        noderesources::balanced_allocation::NAME,
        image_locality::NAME,
        default_binder::NAME,
        node_declared_features::NAME,
        // Upstream's default with GenericWorkload on; inert where no pod names a PodGroup.
        gang_scheduling::NAME,
    ]
    .into_iter()
    .map(|name| {
        let weight = known
            .iter()
            .find(|r| r.name == name)
            .map(|r| r.default_weight);
        (name, weight.filter(|_| scoring.contains(&name)))
    })
    .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    /// Every plugin a watch is registered for is one tether runs: a typo there would let
    /// that plugin's profiles schedule against a watch that is not current.
    #[test]
    fn the_plugins_named_as_needing_watches_are_registered() {
        use crate::scheduler::framework::needs::*;
        let names: Vec<&str> = registry().iter().map(|r| r.name).collect();
        for plugin in [
            VOLUME_PLUGINS,
            PREEMPTION_PLUGINS,
            SPREAD_PLUGINS,
            STICKY_PLUGINS,
            GANG_PLUGINS,
            COSCHEDULING_PLUGINS,
        ]
        .concat()
        {
            assert!(
                names.contains(&plugin),
                "{plugin} is not a registered plugin"
            );
        }
    }

    /// The plugins that take no args accept none (absent, `null`, `{}`) and refuse anything
    /// else at the args' path, so a typo in a profile is not silently ignored.
    #[test]
    fn plugins_without_args_refuse_any() {
        use plugins::sticky::placement_recorder;
        use plugins::*;
        let handle = Handle::default();
        for name in [
            priority_sort::NAME,
            scheduling_gates::NAME,
            node_unschedulable::NAME,
            node_name::NAME,
            node_ports::NAME,
            taint_toleration::NAME,
            image_locality::NAME,
            default_binder::NAME,
            placement_recorder::NAME,
            gang_scheduling::NAME,
            coscheduling::NAME,
        ] {
            let factory = registry()
                .into_iter()
                .find(|r| r.name == name)
                .expect("registered")
                .factory;
            for none in [None, Some(json!(null)), Some(json!({}))] {
                let built = factory(none.as_ref(), &"p".into(), &handle);
                assert!(built.is_ok(), "{name} with {none:?}");
            }
            for args in [json!({"x": 1}), json!("x")] {
                let path = "pluginConfig[3].args";
                let Err(err) = factory(Some(&args), &path.into(), &handle) else {
                    panic!("{name} accepted {args}");
                };
                assert_eq!(err.0[0].path, path, "{name}");
                assert!(
                    err.0[0].message.contains("takes no args"),
                    "{name}: {err:?}"
                );
            }
        }
    }
}
