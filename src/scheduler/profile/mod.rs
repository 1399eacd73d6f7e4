//! The profile compiler: a SchedulingProfile spec becomes a [`CompiledProfile`], or the list of
//! fields that are wrong. Pure: it builds plugins but talks to nothing.
//!
//! The plugin sets follow KubeSchedulerConfiguration v1 (see [`expand`]). Compiling runs in
//! steps: the numbers, the multi-point list, the args by plugin, building each plugin once,
//! expanding each extension point, the checks across points, then PlacementRecorder where a
//! plugin reads StickyBinding history.

mod expand;
pub mod set;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::api::scheduling_profile::MAX_BACKOFF_SECONDS;
use crate::api::{EffectivePlugins, PluginSet, SchedulingProfileSpec, WeightedPlugin};
use crate::scheduler::framework::events::QueueingHints;
use crate::scheduler::framework::profile::{CompiledProfile, WeightedScore};
use crate::scheduler::framework::{ExtensionPoint, HistoryReadership, Plugin};
use crate::scheduler::plugins::registry::{Handle, Registration, registry};
use crate::scheduler::plugins::sticky::placement_recorder;

use self::expand::{PerPoint, expand_point, multi_point_list};
use crate::scheduler::framework::validation::{self, FieldErrors, FieldPath};

/// A compiled profile and the effective plugin lists reported in its status.
pub struct Compiled {
    pub profile: CompiledProfile,
    pub effective: EffectivePlugins,
}

/// The plugins named in one extension point of `spec`.
fn point_set(spec: &SchedulingProfileSpec, point: ExtensionPoint) -> Option<&PluginSet> {
    let p = spec.plugins.as_ref()?;
    match point {
        ExtensionPoint::PreEnqueue => p.pre_enqueue.as_ref(),
        ExtensionPoint::QueueSort => p.queue_sort.as_ref(),
        ExtensionPoint::PreFilter => p.pre_filter.as_ref(),
        ExtensionPoint::Filter => p.filter.as_ref(),
        ExtensionPoint::PostFilter => p.post_filter.as_ref(),
        ExtensionPoint::PreScore => p.pre_score.as_ref(),
        ExtensionPoint::Score => p.score.as_ref(),
        ExtensionPoint::Reserve => p.reserve.as_ref(),
        ExtensionPoint::Permit => p.permit.as_ref(),
        ExtensionPoint::PreBind => p.pre_bind.as_ref(),
        ExtensionPoint::Bind => p.bind.as_ref(),
        ExtensionPoint::PostBind => p.post_bind.as_ref(),
    }
}

/// The numbers the schema also checks; checked again so that a spec from anywhere is safe.
fn check_numbers(spec: &SchedulingProfileSpec, errs: &mut FieldErrors) {
    if !(0..=100).contains(&spec.percentage_of_nodes_to_score) {
        errs.push("percentageOfNodesToScore", "must be between 0 and 100");
    }
    for (field, value) in [
        ("podInitialBackoffSeconds", spec.pod_initial_backoff_seconds),
        ("podMaxBackoffSeconds", spec.pod_max_backoff_seconds),
    ] {
        if !(1..=MAX_BACKOFF_SECONDS).contains(&value) {
            errs.push(
                field,
                format!("{value} must be between 1 and {MAX_BACKOFF_SECONDS}"),
            );
        }
    }
    if spec.pod_max_backoff_seconds < spec.pod_initial_backoff_seconds {
        errs.push(
            "podMaxBackoffSeconds",
            "must not be less than podInitialBackoffSeconds",
        );
    }
    // The schema says 1-100; a profile from a file or `tether simulate` is held to it too.
    let multi_point = spec.plugins.as_ref().and_then(|p| p.multi_point.as_ref());
    let sets = ExtensionPoint::ALL
        .into_iter()
        .filter_map(|point| point_set(spec, point).map(|set| (point.to_string(), set)))
        .chain(multi_point.map(|set| ("multiPoint".to_string(), set)));
    for (point, set) in sets {
        for (j, p) in set.enabled.iter().enumerate() {
            if let Some(w) = p.weight
                && !(1..=100).contains(&w)
            {
                errs.push(
                    format!("plugins.{point}.enabled[{j}].weight"),
                    format!("{w} must be between 1 and 100"),
                );
            }
        }
    }
    if let Err(e) =
        crate::k8s::labels::Selector::from_label_selector(spec.namespace_selector.as_ref())
    {
        errs.push("namespaceSelector", e.to_string());
    }
    if spec.scheduler_name == "default-scheduler" {
        errs.push(
            "schedulerName",
            "default-scheduler belongs to kube-scheduler",
        );
    }
}

/// Args by plugin name, with the index of their `pluginConfig` entry.
type ArgsByPlugin<'a> = BTreeMap<&'a str, (usize, Option<&'a serde_json::Value>)>;

fn plugin_args<'a>(
    spec: &'a SchedulingProfileSpec,
    known: &HashMap<&str, Registration>,
    errs: &mut FieldErrors,
) -> ArgsByPlugin<'a> {
    let mut args = BTreeMap::new();
    for (i, pc) in spec.plugin_config.iter().enumerate() {
        if !known.contains_key(pc.name.as_str()) {
            errs.push(
                format!("pluginConfig[{i}].name"),
                format!("unknown plugin {:?}", pc.name),
            );
        }
        let nested = pc
            .args
            .as_ref()
            .map_or(0, |a| validation::depth(a, validation::MAX_ARGS_DEPTH));
        if nested > validation::MAX_ARGS_DEPTH {
            errs.push(
                format!("pluginConfig[{i}].args"),
                format!(
                    "nests deeper than {} levels; no plugin's args do",
                    validation::MAX_ARGS_DEPTH
                ),
            );
            continue;
        }
        args.insert(pc.name.as_str(), (i, pc.args.as_ref()));
    }
    args
}

/// Builds every plugin in `names` once, with its args; unknown names were reported already.
fn build_plugins<'a>(
    names: impl IntoIterator<Item = &'a str>,
    known: &HashMap<&str, Registration>,
    args: &ArgsByPlugin<'_>,
    handle: &Handle,
    errs: &mut FieldErrors,
) -> HashMap<&'static str, Arc<dyn Plugin>> {
    let mut built: HashMap<&'static str, Arc<dyn Plugin>> = HashMap::new();
    // A plugin whose args are wrong is tried once: its errors are reported once.
    let mut tried: std::collections::HashSet<&'static str> = std::collections::HashSet::new();
    for name in names {
        let Some(reg) = known.get(name) else { continue };
        if !tried.insert(reg.name) {
            continue;
        }
        let (path, a) = match args.get(name) {
            Some((i, a)) => (FieldPath::new("pluginConfig").index(*i).child("args"), *a),
            None => (FieldPath::new("pluginConfig"), None),
        };
        match (reg.factory)(a, &path, handle) {
            Ok(p) => {
                built.insert(reg.name, p);
            }
            Err(e) => errs.0.extend(e.0),
        }
    }
    built
}

/// A plugin's Filter reads what its PreFilter computed, its Score what its PreScore computed:
/// running one without the other would silently do nothing or fail every pod.
fn check_prerequisites(spec: &SchedulingProfileSpec, per_point: &PerPoint, errs: &mut FieldErrors) {
    let runs_at = |point: ExtensionPoint, name: &str| {
        per_point
            .get(&point)
            .is_some_and(|l| l.iter().any(|(p, _)| p.name() == name))
    };
    for point in ExtensionPoint::ALL {
        let Some(prep) = point.prerequisite() else {
            continue;
        };
        for (plugin, _) in per_point.get(&point).into_iter().flatten() {
            let name = plugin.name();
            if !plugin.implements(prep) || runs_at(prep, name) {
                continue;
            }
            let field = point_set(spec, point)
                .and_then(|s| s.enabled.iter().position(|p| p.name == name))
                .map_or(format!("plugins.{prep}.disabled"), |j| {
                    format!("plugins.{point}.enabled[{j}].name")
                });
            errs.push(
                field,
                format!(
                    "plugin {name} runs at {point} but not at {prep}, which {point} needs; \
                     enable it under multiPoint (or under {prep} too)"
                ),
            );
        }
    }
}

/// Where a plugin reads workload history (it declares whose:
/// [`Plugin::history_readership`]), PlacementRecorder records every bind it reads at postBind
/// so that it has a history to read; disabling it by name there is an error.
fn enable_placement_recorder(
    spec: &SchedulingProfileSpec,
    per_point: &mut PerPoint,
    handle: &Handle,
    errs: &mut FieldErrors,
) {
    let mut readers: Vec<&'static str> = Vec::new();
    let mut readership: Vec<HistoryReadership> = Vec::new();
    for (plugin, _) in per_point.values().flatten() {
        if readers.contains(&plugin.name()) {
            continue;
        }
        if let Some(reads) = plugin.history_readership() {
            readers.push(plugin.name());
            readership.push(reads);
        }
    }
    if readers.is_empty() {
        return;
    }
    let point = ExtensionPoint::PostBind;
    let disabled = point_set(spec, point).and_then(|s| {
        s.disabled
            .iter()
            .position(|p| p.name == placement_recorder::NAME)
    });
    if let Some(j) = disabled {
        errs.push(
            format!("plugins.{point}.disabled[{j}].name"),
            format!(
                "{} records the binds that {} read; it cannot be disabled while they run",
                placement_recorder::NAME,
                readers.join(" and ")
            ),
        );
        return;
    }
    let recorder: Arc<dyn Plugin> = Arc::new(placement_recorder::PlacementRecorder::for_readers(
        handle.history.clone(),
        readership,
    ));
    let list = per_point.entry(point).or_default();
    list.retain(|(p, _)| p.name() != placement_recorder::NAME);
    list.push((recorder, 1));
}

/// Compiles `spec`. `source` names where it came from, for logs.
pub fn compile(
    spec: &SchedulingProfileSpec,
    source: &str,
    handle: &Handle,
) -> Result<Compiled, FieldErrors> {
    let mut errs = FieldErrors::new();
    let known: HashMap<&str, Registration> = registry().into_iter().map(|r| (r.name, r)).collect();

    check_numbers(spec, &mut errs);
    let multi_point = multi_point_list(spec, &known, handle.release, &mut errs);
    let args = plugin_args(spec, &known, &mut errs);

    let mut names: Vec<&str> = multi_point.iter().map(|(n, _)| n.as_str()).collect();
    for point in ExtensionPoint::ALL {
        for (j, p) in point_set(spec, point)
            .map(|s| s.enabled.as_slice())
            .unwrap_or_default()
            .iter()
            .enumerate()
        {
            if known.contains_key(p.name.as_str()) {
                names.push(p.name.as_str());
            } else {
                errs.push(
                    format!("plugins.{point}.enabled[{j}].name"),
                    format!("unknown plugin {:?}", p.name),
                );
            }
        }
    }
    names.extend(args.keys().copied());
    let built = build_plugins(names, &known, &args, handle, &mut errs);

    let mut per_point: PerPoint = ExtensionPoint::ALL
        .into_iter()
        .map(|point| {
            let list = expand_point(
                point_set(spec, point),
                point,
                &multi_point,
                &built,
                &known,
                &mut errs,
            );
            (point, list)
        })
        .collect();
    check_prerequisites(spec, &per_point, &mut errs);
    enable_placement_recorder(spec, &mut per_point, handle, &mut errs);

    let take = |point: ExtensionPoint| -> Vec<Arc<dyn Plugin>> {
        per_point
            .get(&point)
            .into_iter()
            .flatten()
            .map(|(p, _)| p.clone())
            .collect()
    };
    let queue_sort = take(ExtensionPoint::QueueSort);
    if queue_sort.len() != 1 {
        errs.push(
            "plugins.queueSort",
            format!(
                "exactly one queueSort plugin must be enabled, found {}",
                queue_sort.len()
            ),
        );
    }
    if take(ExtensionPoint::Bind).is_empty() {
        errs.push("plugins.bind", "at least one bind plugin must be enabled");
    }
    let Some(queue_sort) = queue_sort.into_iter().next().filter(|_| errs.is_empty()) else {
        return Err(errs);
    };
    let names =
        |point| -> Vec<String> { take(point).iter().map(|p| p.name().to_string()).collect() };
    let score: Vec<WeightedScore> = per_point
        .get(&ExtensionPoint::Score)
        .into_iter()
        .flatten()
        .map(|(p, w)| WeightedScore {
            plugin: p.clone(),
            weight: i64::from(*w),
        })
        .collect();
    let effective = EffectivePlugins {
        pre_enqueue: names(ExtensionPoint::PreEnqueue),
        queue_sort: names(ExtensionPoint::QueueSort),
        pre_filter: names(ExtensionPoint::PreFilter),
        filter: names(ExtensionPoint::Filter),
        post_filter: names(ExtensionPoint::PostFilter),
        pre_score: names(ExtensionPoint::PreScore),
        score: score
            .iter()
            .map(|s| WeightedPlugin {
                name: s.plugin.name().to_string(),
                weight: s.weight as i32,
            })
            .collect(),
        reserve: names(ExtensionPoint::Reserve),
        permit: names(ExtensionPoint::Permit),
        pre_bind: names(ExtensionPoint::PreBind),
        bind: names(ExtensionPoint::Bind),
        post_bind: names(ExtensionPoint::PostBind),
    };
    let profile = CompiledProfile {
        scheduler_name: spec.scheduler_name.clone(),
        source: source.to_string(),
        percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
        pod_initial_backoff: backoff_seconds(spec.pod_initial_backoff_seconds),
        pod_max_backoff: backoff_seconds(spec.pod_max_backoff_seconds),
        queue_sort,
        pre_enqueue: take(ExtensionPoint::PreEnqueue),
        pre_filter: take(ExtensionPoint::PreFilter),
        filter: take(ExtensionPoint::Filter),
        post_filter: take(ExtensionPoint::PostFilter),
        pre_score: take(ExtensionPoint::PreScore),
        score,
        reserve: take(ExtensionPoint::Reserve),
        permit: take(ExtensionPoint::Permit),
        pre_bind: take(ExtensionPoint::PreBind),
        bind: take(ExtensionPoint::Bind),
        post_bind: take(ExtensionPoint::PostBind),
        hints: Arc::default(),
        release: handle.release,
    };
    // The plugins that can reject a pod say which events may help it.
    let rejecting = [
        &profile.pre_enqueue,
        &profile.pre_filter,
        &profile.filter,
        &profile.reserve,
        &profile.permit,
    ];
    let profile = CompiledProfile {
        hints: Arc::new(QueueingHints::build(rejecting.into_iter().flatten())),
        ..profile
    };
    Ok(Compiled { profile, effective })
}

/// A backoff field as a duration, within the bounds validation enforces.
fn backoff_seconds(value: i64) -> Duration {
    Duration::from_secs(value.clamp(1, MAX_BACKOFF_SECONDS).unsigned_abs())
}

/// kube-scheduler's defaults for `scheduler_name`: the profile an empty spec compiles to.
pub fn default_profile(scheduler_name: &str, handle: &Handle) -> Result<Compiled, FieldErrors> {
    let spec = SchedulingProfileSpec {
        scheduler_name: scheduler_name.to_string(),
        percentage_of_nodes_to_score: 0,
        pod_initial_backoff_seconds: 1,
        pod_max_backoff_seconds: 10,
        plugins: None,
        plugin_config: Vec::new(),
        namespace_selector: None,
    };
    compile(&spec, "built-in default", handle)
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod arbitrary;
