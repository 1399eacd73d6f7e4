//! The plugin sets of KubeSchedulerConfiguration v1. The defaults are kube-scheduler's
//! `multiPoint` defaults; the spec's `multiPoint.disabled` removes defaults (`*` all of them),
//! `multiPoint.enabled` adds plugins (or re-weights a default in place). For each extension
//! point, plugins named in its `enabled` list that are also multi-point come first, then the
//! multi-point plugins that implement the point and are not disabled there, then the rest of
//! its `enabled` list. A weight at a specific point beats the multi-point weight, which beats
//! the plugin's default weight.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::api::{PluginSet, SchedulingProfileSpec};
use crate::k8s::release::Release;
use crate::scheduler::framework::{ExtensionPoint, Plugin};
use crate::scheduler::plugins::registry::{Registration, default_multi_point};

use crate::scheduler::framework::validation::FieldErrors;

/// The plugins of one extension point with their score weights.
pub(super) type WeightedPlugins = Vec<(Arc<dyn Plugin>, i32)>;
/// Every extension point's plugins.
pub(super) type PerPoint = BTreeMap<ExtensionPoint, WeightedPlugins>;
/// The multi-point plugins with the weight the spec gave them, if any.
pub(super) type MultiPoint = Vec<(String, Option<i32>)>;

/// The defaults less `multiPoint.disabled`, plus `multiPoint.enabled`.
pub(super) fn multi_point_list(
    spec: &SchedulingProfileSpec,
    known: &HashMap<&str, Registration>,
    release: Release,
    errs: &mut FieldErrors,
) -> MultiPoint {
    let set = spec.plugins.as_ref().and_then(|p| p.multi_point.as_ref());
    let disabled: Vec<&str> = set
        .map(|s| s.disabled.iter().map(|p| p.name.as_str()).collect())
        .unwrap_or_default();
    let mut list: MultiPoint = default_multi_point(release)
        .into_iter()
        .filter(|(n, _)| !disabled.contains(&"*") && !disabled.contains(n))
        .map(|(n, w)| (n.to_string(), w))
        .collect();
    for (j, p) in set
        .map(|s| s.enabled.as_slice())
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        if !known.contains_key(p.name.as_str()) {
            errs.push(
                format!("plugins.multiPoint.enabled[{j}].name"),
                format!("unknown plugin {:?}", p.name),
            );
            continue;
        }
        match list.iter_mut().find(|(n, _)| *n == p.name) {
            Some(existing) => existing.1 = p.weight.or(existing.1),
            None => list.push((p.name.clone(), p.weight)),
        }
    }
    list
}

/// The plugins of `point`, in order, with their weights; `set` is what the spec says of it.
pub(super) fn expand_point(
    set: Option<&PluginSet>,
    point: ExtensionPoint,
    multi_point: &MultiPoint,
    built: &HashMap<&'static str, Arc<dyn Plugin>>,
    known: &HashMap<&str, Registration>,
    errs: &mut FieldErrors,
) -> WeightedPlugins {
    let enabled = set.map(|s| s.enabled.as_slice()).unwrap_or_default();
    let disabled: Vec<&str> = set
        .map(|s| s.disabled.iter().map(|p| p.name.as_str()).collect())
        .unwrap_or_default();
    let in_mp = |n: &str| multi_point.iter().any(|(m, _)| m == n);
    let weight_of = |name: &str, explicit: Option<i32>| -> i32 {
        explicit
            .or_else(|| {
                multi_point
                    .iter()
                    .find(|(m, _)| m == name)
                    .and_then(|(_, w)| *w)
            })
            .unwrap_or_else(|| known.get(name).map_or(1, |r| r.default_weight.max(1)))
    };
    let mut list: WeightedPlugins = Vec::new();
    let mut push_enabled = |only_mp: bool, list: &mut WeightedPlugins| {
        for (j, p) in enabled.iter().enumerate() {
            if in_mp(&p.name) != only_mp {
                continue;
            }
            let Some(plugin) = built.get(p.name.as_str()) else {
                continue;
            };
            if !plugin.implements(point) {
                errs.push(
                    format!("plugins.{point}.enabled[{j}].name"),
                    format!("plugin {} does not implement {point}", p.name),
                );
                continue;
            }
            list.push((plugin.clone(), weight_of(&p.name, p.weight)));
        }
    };
    push_enabled(true, &mut list);
    for (name, _) in multi_point {
        if disabled.contains(&"*")
            || disabled.contains(&name.as_str())
            || enabled.iter().any(|p| &p.name == name)
        {
            continue;
        }
        let Some(plugin) = built.get(name.as_str()) else {
            continue;
        };
        if plugin.implements(point) {
            list.push((plugin.clone(), weight_of(name, None)));
        }
    }
    push_enabled(false, &mut list);
    list
}
