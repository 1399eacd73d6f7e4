//! The plugin registry (kube-scheduler's in-tree registry): every plugin tether knows, by name,
//! with the function that builds it from its (validated) args and what it needs of the process
//! ([`Handle`], in `handle.rs`: the plugins name it there, not here), and kube-scheduler's
//! default plugin set.

use std::sync::Arc;

use crate::k8s::release::Release;
use crate::scheduler::framework::Plugin;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::plugins;
pub use crate::scheduler::plugins::handle::Handle;

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
pub fn default_multi_point(release: Release) -> Vec<(&'static str, Option<i32>)> {
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
    // From 1.37 NodeName comes before NodeUnschedulable.
    let (first, second) = if release.at_least(37) {
        (node_name::NAME, node_unschedulable::NAME)
    } else {
        (node_unschedulable::NAME, node_name::NAME)
    };
    [
        scheduling_gates::NAME,
        priority_sort::NAME,
        first,
        second,
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
        // From 1.37 upstream's default with GenericWorkload on; inert where no pod names a
        // PodGroup. 1.36 serves its Workload API at v1alpha2 only, behind gates off by default,
        // and its kube-scheduler schedules such pods one by one, as tether does without it.
        gang_scheduling::NAME,
    ]
    .into_iter()
    .filter(|name| *name != gang_scheduling::NAME || release.at_least(37))
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
