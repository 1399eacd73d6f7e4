//! The profile compiler: a SchedulingProfile spec becomes a [`CompiledProfile`], or the list of
//! fields that are wrong. Pure: it builds plugins but talks to nothing.
//!
//! The plugin sets follow KubeSchedulerConfiguration v1: the defaults are kube-scheduler's
//! `multiPoint` defaults; the spec's `multiPoint.disabled` removes defaults (`*` all of them),
//! `multiPoint.enabled` adds plugins (or re-weights a default in place); for each extension
//! point, plugins named in its `enabled` list that are also multi-point come first, then the
//! multi-point plugins that implement the point and are not disabled there, then the rest of
//! its `enabled` list. A weight at a specific point beats the multi-point weight, which beats
//! the plugin's default weight.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use crate::api::{EffectivePlugins, PluginSet, SchedulingProfileSpec, WeightedPlugin};

use super::framework::registry::{Handle, default_multi_point, registry};
use super::framework::{FieldErrors, Plugin};
use super::profile::{CompiledProfile, WeightedScore};

/// The extension points in the order of `plugins` in the spec (multiPoint aside).
const POINTS: [&str; 12] = [
    "preEnqueue",
    "queueSort",
    "preFilter",
    "filter",
    "postFilter",
    "preScore",
    "score",
    "reserve",
    "permit",
    "preBind",
    "bind",
    "postBind",
];

fn implements(plugin: &dyn Plugin, point: &str) -> bool {
    match point {
        "preEnqueue" => plugin.pre_enqueue().is_some(),
        "queueSort" => plugin.queue_sort().is_some(),
        "preFilter" => plugin.pre_filter().is_some(),
        "filter" => plugin.filter().is_some(),
        "postFilter" => plugin.post_filter().is_some(),
        "preScore" => plugin.pre_score().is_some(),
        "score" => plugin.score().is_some(),
        "reserve" => plugin.reserve().is_some(),
        "permit" => plugin.permit().is_some(),
        "preBind" => plugin.pre_bind().is_some(),
        "bind" => plugin.bind().is_some(),
        "postBind" => plugin.post_bind().is_some(),
        _ => false,
    }
}

fn point_set<'a>(spec: &'a SchedulingProfileSpec, point: &str) -> Option<&'a PluginSet> {
    let p = spec.plugins.as_ref()?;
    match point {
        "preEnqueue" => p.pre_enqueue.as_ref(),
        "queueSort" => p.queue_sort.as_ref(),
        "preFilter" => p.pre_filter.as_ref(),
        "filter" => p.filter.as_ref(),
        "postFilter" => p.post_filter.as_ref(),
        "preScore" => p.pre_score.as_ref(),
        "score" => p.score.as_ref(),
        "reserve" => p.reserve.as_ref(),
        "permit" => p.permit.as_ref(),
        "preBind" => p.pre_bind.as_ref(),
        "bind" => p.bind.as_ref(),
        "postBind" => p.post_bind.as_ref(),
        "multiPoint" => p.multi_point.as_ref(),
        _ => None,
    }
}

/// The plugins of one extension point with their score weights.
type WeightedPlugins = Vec<(Arc<dyn Plugin>, i32)>;

/// A compiled profile and the effective plugin lists reported in its status.
pub struct Compiled {
    pub profile: CompiledProfile,
    pub effective: EffectivePlugins,
}

/// Compiles `spec`. `source` names where it came from, for logs.
pub fn compile(
    spec: &SchedulingProfileSpec,
    source: &str,
    handle: &Handle,
) -> Result<Compiled, FieldErrors> {
    let mut errs = FieldErrors::new();
    let known: HashMap<&str, _> = registry().into_iter().map(|r| (r.name, r)).collect();

    // Numbers the schema also checks; checked again so that a spec from anywhere is safe.
    if !(0..=100).contains(&spec.percentage_of_nodes_to_score) {
        errs.push("percentageOfNodesToScore", "must be between 0 and 100");
    }
    if spec.pod_initial_backoff_seconds < 1 {
        errs.push("podInitialBackoffSeconds", "must be at least 1");
    }
    if spec.pod_max_backoff_seconds < spec.pod_initial_backoff_seconds {
        errs.push(
            "podMaxBackoffSeconds",
            "must not be less than podInitialBackoffSeconds",
        );
    }
    if spec.scheduler_name == "default-scheduler" {
        errs.push(
            "schedulerName",
            "default-scheduler belongs to kube-scheduler",
        );
    }

    // The multi-point list: defaults less multiPoint.disabled, plus multiPoint.enabled.
    let mp_set = point_set(spec, "multiPoint");
    let mp_disabled: Vec<&str> = mp_set
        .map(|s| s.disabled.iter().map(|p| p.name.as_str()).collect())
        .unwrap_or_default();
    let mut multi_point: Vec<(String, Option<i32>)> = default_multi_point()
        .into_iter()
        .filter(|(n, _)| !mp_disabled.contains(&"*") && !mp_disabled.contains(n))
        .map(|(n, w)| (n.to_string(), w))
        .collect();
    for (j, p) in mp_set
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
        match multi_point.iter_mut().find(|(n, _)| *n == p.name) {
            Some(existing) => existing.1 = p.weight.or(existing.1),
            None => multi_point.push((p.name.clone(), p.weight)),
        }
    }

    // Args by plugin name.
    let mut args: BTreeMap<&str, (usize, Option<&serde_json::Value>)> = BTreeMap::new();
    for (i, pc) in spec.plugin_config.iter().enumerate() {
        if !known.contains_key(pc.name.as_str()) {
            errs.push(
                format!("pluginConfig[{i}].name"),
                format!("unknown plugin {:?}", pc.name),
            );
        }
        args.insert(pc.name.as_str(), (i, pc.args.as_ref()));
    }

    // Build every plugin named anywhere, once, with its args.
    let mut names: Vec<&str> = multi_point.iter().map(|(n, _)| n.as_str()).collect();
    for point in POINTS {
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
    for (name, (i, _)) in &args {
        if known.contains_key(name) {
            names.push(name);
        }
        let _ = i;
    }
    let mut built: HashMap<&str, Arc<dyn Plugin>> = HashMap::new();
    for name in names {
        if built.contains_key(name) {
            continue;
        }
        let Some(reg) = known.get(name) else { continue };
        let (path, a) = match args.get(name) {
            Some((i, a)) => (format!("pluginConfig[{i}].args"), *a),
            None => ("pluginConfig".to_string(), None),
        };
        match (reg.factory)(a, &path, handle) {
            Ok(p) => {
                built.insert(reg.name, p);
            }
            Err(e) => errs.0.extend(e.0),
        }
    }

    // Expand per extension point.
    let mut per_point: BTreeMap<&str, WeightedPlugins> = BTreeMap::new();
    for point in POINTS {
        let set = point_set(spec, point);
        let enabled = set.map(|s| s.enabled.as_slice()).unwrap_or_default();
        let disabled: Vec<&str> = set
            .map(|s| s.disabled.iter().map(|p| p.name.as_str()).collect())
            .unwrap_or_default();
        let in_mp = |n: &str| multi_point.iter().any(|(m, _)| m == n);
        let mut list: WeightedPlugins = Vec::new();
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
        let push_enabled = |only_mp: bool, list: &mut WeightedPlugins, errs: &mut FieldErrors| {
            for (j, p) in enabled.iter().enumerate() {
                if in_mp(&p.name) != only_mp {
                    continue;
                }
                let Some(plugin) = built.get(p.name.as_str()) else {
                    continue;
                };
                if !implements(plugin.as_ref(), point) {
                    errs.push(
                        format!("plugins.{point}.enabled[{j}].name"),
                        format!("plugin {} does not implement {point}", p.name),
                    );
                    continue;
                }
                list.push((plugin.clone(), weight_of(&p.name, p.weight)));
            }
        };
        push_enabled(true, &mut list, &mut errs);
        for (name, _) in &multi_point {
            if disabled.contains(&"*")
                || disabled.contains(&name.as_str())
                || enabled.iter().any(|p| &p.name == name)
            {
                continue;
            }
            let Some(plugin) = built.get(name.as_str()) else {
                continue;
            };
            if implements(plugin.as_ref(), point) {
                list.push((plugin.clone(), weight_of(name, None)));
            }
        }
        push_enabled(false, &mut list, &mut errs);
        per_point.insert(point, list);
    }

    // A plugin's Filter reads what its PreFilter computed, its Score what its PreScore
    // computed: running one without the other would silently do nothing or fail every pod.
    for (point, prep) in [("filter", "preFilter"), ("score", "preScore")] {
        let runs_at = |pt: &str, name: &str| {
            per_point
                .get(pt)
                .is_some_and(|l| l.iter().any(|(p, _)| p.name() == name))
        };
        for (plugin, _) in per_point.get(point).into_iter().flatten() {
            let name = plugin.name();
            if !implements(plugin.as_ref(), prep) || runs_at(prep, name) {
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

    let take = |point: &str| -> Vec<Arc<dyn Plugin>> {
        per_point
            .get(point)
            .into_iter()
            .flatten()
            .map(|(p, _)| p.clone())
            .collect()
    };
    let queue_sort = take("queueSort");
    if queue_sort.len() != 1 {
        errs.push(
            "plugins.queueSort",
            format!(
                "exactly one queueSort plugin must be enabled, found {}",
                queue_sort.len()
            ),
        );
    }
    if take("bind").is_empty() {
        errs.push("plugins.bind", "at least one bind plugin must be enabled");
    }
    if !errs.is_empty() {
        return Err(errs);
    }
    let names =
        |point: &str| -> Vec<String> { take(point).iter().map(|p| p.name().to_string()).collect() };
    let score: Vec<WeightedScore> = per_point
        .get("score")
        .into_iter()
        .flatten()
        .map(|(p, w)| WeightedScore {
            plugin: p.clone(),
            weight: i64::from(*w),
        })
        .collect();
    let effective = EffectivePlugins {
        pre_enqueue: names("preEnqueue"),
        queue_sort: names("queueSort"),
        pre_filter: names("preFilter"),
        filter: names("filter"),
        post_filter: names("postFilter"),
        pre_score: names("preScore"),
        score: score
            .iter()
            .map(|s| WeightedPlugin {
                name: s.plugin.name().to_string(),
                weight: s.weight as i32,
            })
            .collect(),
        reserve: names("reserve"),
        permit: names("permit"),
        pre_bind: names("preBind"),
        bind: names("bind"),
        post_bind: names("postBind"),
    };
    let profile = CompiledProfile {
        scheduler_name: spec.scheduler_name.clone(),
        source: source.to_string(),
        percentage_of_nodes_to_score: spec.percentage_of_nodes_to_score,
        pod_initial_backoff: Duration::from_secs(spec.pod_initial_backoff_seconds.max(1) as u64),
        pod_max_backoff: Duration::from_secs(spec.pod_max_backoff_seconds.max(1) as u64),
        queue_sort: queue_sort[0].clone(),
        pre_enqueue: take("preEnqueue"),
        pre_filter: take("preFilter"),
        filter: take("filter"),
        post_filter: take("postFilter"),
        pre_score: take("preScore"),
        score,
        reserve: take("reserve"),
        permit: take("permit"),
        pre_bind: take("preBind"),
        bind: take("bind"),
        post_bind: take("postBind"),
    };
    Ok(Compiled { profile, effective })
}

/// The built-in profile for `scheduler_name`: kube-scheduler's defaults.
pub fn default_profile(scheduler_name: &str, handle: &Handle) -> Result<Compiled, FieldErrors> {
    let spec = SchedulingProfileSpec {
        scheduler_name: scheduler_name.to_string(),
        percentage_of_nodes_to_score: 0,
        pod_initial_backoff_seconds: 1,
        pod_max_backoff_seconds: 10,
        plugins: None,
        plugin_config: Vec::new(),
    };
    compile(&spec, "built-in default", handle)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{Plugin as PluginRef, PluginConfig, Plugins};

    fn spec(plugins: Option<Plugins>, plugin_config: Vec<PluginConfig>) -> SchedulingProfileSpec {
        SchedulingProfileSpec {
            scheduler_name: "p".into(),
            percentage_of_nodes_to_score: 0,
            pod_initial_backoff_seconds: 1,
            pod_max_backoff_seconds: 10,
            plugins,
            plugin_config,
        }
    }

    fn plugin(name: &str, weight: Option<i32>) -> PluginRef {
        PluginRef {
            name: name.into(),
            weight,
        }
    }

    fn set(enabled: Vec<PluginRef>, disabled: Vec<PluginRef>) -> Option<PluginSet> {
        Some(PluginSet { enabled, disabled })
    }

    #[test]
    fn the_default_profile_is_kube_schedulers() {
        let c = default_profile("tether-scheduler", &Handle::default()).expect("compiles");
        let e = c.effective;
        assert_eq!(e.queue_sort, ["PrioritySort"]);
        assert_eq!(e.pre_enqueue, ["SchedulingGates"]);
        assert_eq!(
            e.filter,
            [
                "NodeUnschedulable",
                "NodeName",
                "TaintToleration",
                "NodeAffinity",
                "NodePorts",
                "NodeResourcesFit",
                "PodTopologySpread",
                "InterPodAffinity"
            ]
        );
        let score: Vec<(&str, i32)> = e
            .score
            .iter()
            .map(|s| (s.name.as_str(), s.weight))
            .collect();
        assert_eq!(
            score,
            [
                ("TaintToleration", 3),
                ("NodeAffinity", 2),
                ("NodeResourcesFit", 1),
                ("PodTopologySpread", 2),
                ("InterPodAffinity", 2),
                ("NodeResourcesBalancedAllocation", 1),
                ("ImageLocality", 1)
            ]
        );
        assert_eq!(e.bind, ["DefaultBinder"]);
    }

    #[test]
    fn enabled_disabled_weights_and_args_follow_kube_scheduler() {
        let plugins = Plugins {
            score: set(
                vec![plugin("NodeResourcesFit", Some(7))],
                vec![plugin("ImageLocality", None)],
            ),
            filter: set(vec![], vec![plugin("*", None)]),
            ..Default::default()
        };
        let args = vec![PluginConfig {
            name: "NodeResourcesFit".into(),
            args: Some(serde_json::json!({"scoringStrategy": {"type": "MostAllocated"}})),
        }];
        let c = compile(&spec(Some(plugins), args), "test", &Handle::default()).expect("compiles");
        assert!(
            c.effective.filter.is_empty(),
            "* disables every default filter"
        );
        let score: Vec<(&str, i32)> = c
            .effective
            .score
            .iter()
            .map(|s| (s.name.as_str(), s.weight))
            .collect();
        assert_eq!(
            score[0],
            ("NodeResourcesFit", 7),
            "an enabled multi-point plugin comes first with its weight"
        );
        assert!(!score.iter().any(|(n, _)| *n == "ImageLocality"));
    }

    #[test]
    fn invalid_specs_name_the_field() {
        let cases: Vec<(&str, SchedulingProfileSpec, &str)> = vec![
            (
                "unknown plugin",
                spec(
                    Some(Plugins {
                        filter: set(vec![plugin("Nope", None)], vec![]),
                        ..Default::default()
                    }),
                    vec![],
                ),
                "plugins.filter.enabled[0].name",
            ),
            (
                "a plugin at a point it does not implement",
                spec(
                    Some(Plugins {
                        filter: set(vec![plugin("ImageLocality", None)], vec![]),
                        ..Default::default()
                    }),
                    vec![],
                ),
                "plugins.filter.enabled[0].name",
            ),
            (
                "bad args",
                spec(
                    None,
                    vec![PluginConfig {
                        name: "NodeResourcesFit".into(),
                        args: Some(serde_json::json!({"bogus": 1})),
                    }],
                ),
                "pluginConfig[0].args",
            ),
            (
                "args for an unknown plugin",
                spec(
                    None,
                    vec![PluginConfig {
                        name: "Nope".into(),
                        args: None,
                    }],
                ),
                "pluginConfig[0].name",
            ),
            (
                "no queue sort",
                spec(
                    Some(Plugins {
                        multi_point: set(vec![], vec![plugin("PrioritySort", None)]),
                        ..Default::default()
                    }),
                    vec![],
                ),
                "plugins.queueSort",
            ),
            (
                "a Score without the PreScore it reads",
                spec(
                    Some(Plugins {
                        score: set(vec![plugin("PlacementHistory", Some(5))], vec![]),
                        ..Default::default()
                    }),
                    vec![],
                ),
                "plugins.score.enabled[0].name",
            ),
            (
                "a Filter whose PreFilter is disabled",
                spec(
                    Some(Plugins {
                        pre_filter: set(vec![], vec![plugin("NodeResourcesFit", None)]),
                        ..Default::default()
                    }),
                    vec![],
                ),
                "plugins.preFilter.disabled",
            ),
            (
                "no binder",
                spec(
                    Some(Plugins {
                        bind: set(vec![], vec![plugin("*", None)]),
                        ..Default::default()
                    }),
                    vec![],
                ),
                "plugins.bind",
            ),
        ];
        for (name, spec, field) in cases {
            let errs = compile(&spec, "test", &Handle::default())
                .err()
                .unwrap_or_default();
            assert!(
                errs.0.iter().any(|e| e.path == field),
                "{name}: want an error at {field}, got {errs}"
            );
        }
    }
}

#[cfg(test)]
mod more_tests {
    use super::*;
    use crate::api::{Plugin as PluginRef, PluginConfig, Plugins};
    use proptest::prelude::*;

    fn spec(plugins: Plugins) -> SchedulingProfileSpec {
        SchedulingProfileSpec {
            scheduler_name: "p".into(),
            percentage_of_nodes_to_score: 0,
            pod_initial_backoff_seconds: 1,
            pod_max_backoff_seconds: 10,
            plugins: Some(plugins),
            plugin_config: Vec::new(),
        }
    }

    fn p(name: &str, weight: Option<i32>) -> PluginRef {
        PluginRef {
            name: name.into(),
            weight,
        }
    }

    fn set(enabled: Vec<PluginRef>, disabled: Vec<PluginRef>) -> Option<PluginSet> {
        Some(PluginSet { enabled, disabled })
    }

    fn compiled(plugins: Plugins) -> EffectivePlugins {
        compile(&spec(plugins), "test", &Handle::default())
            .expect("compiles")
            .effective
    }

    fn weight(e: &EffectivePlugins, name: &str) -> Option<i32> {
        e.score.iter().find(|s| s.name == name).map(|s| s.weight)
    }

    #[test]
    fn multi_point_rules_follow_kube_scheduler() {
        // (name, plugins, check)
        type Check = fn(&EffectivePlugins) -> bool;
        let cases: Vec<(&str, Plugins, Check)> = vec![
            (
                "multiPoint.enabled re-weights a default in place",
                Plugins {
                    multi_point: set(vec![p("ImageLocality", Some(9))], vec![]),
                    ..Default::default()
                },
                |e| {
                    weight(e, "ImageLocality") == Some(9)
                        && e.score.last().map(|s| s.name.as_str()) == Some("ImageLocality")
                },
            ),
            (
                "a weight at the score point beats multiPoint's",
                Plugins {
                    multi_point: set(vec![p("ImageLocality", Some(9))], vec![]),
                    score: set(vec![p("ImageLocality", Some(4))], vec![]),
                    ..Default::default()
                },
                |e| weight(e, "ImageLocality") == Some(4) && e.score[0].name == "ImageLocality",
            ),
            (
                "multiPoint.disabled removes a default from every point",
                Plugins {
                    multi_point: set(vec![], vec![p("TaintToleration", None)]),
                    ..Default::default()
                },
                |e| {
                    !e.filter.contains(&"TaintToleration".to_string())
                        && weight(e, "TaintToleration").is_none()
                },
            ),
            (
                "disabled at one point keeps the plugin at the others",
                Plugins {
                    score: set(vec![], vec![p("NodeAffinity", None)]),
                    ..Default::default()
                },
                |e| {
                    e.filter.contains(&"NodeAffinity".to_string())
                        && weight(e, "NodeAffinity").is_none()
                },
            ),
            (
                "* at one point disables every default there, and enabled ones come back",
                Plugins {
                    score: set(vec![p("NodeResourcesFit", Some(3))], vec![p("*", None)]),
                    ..Default::default()
                },
                |e| {
                    e.score.len() == 1
                        && weight(e, "NodeResourcesFit") == Some(3)
                        && !e.filter.is_empty()
                },
            ),
            (
                "multiPoint * then enabled plugins only",
                Plugins {
                    multi_point: set(
                        vec![
                            p("PrioritySort", None),
                            p("NodeName", None),
                            p("DefaultBinder", None),
                        ],
                        vec![p("*", None)],
                    ),
                    ..Default::default()
                },
                |e| {
                    e.filter == ["NodeName"]
                        && e.score.is_empty()
                        && e.queue_sort == ["PrioritySort"]
                },
            ),
        ];
        for (name, plugins, check) in cases {
            let e = compiled(plugins);
            assert!(check(&e), "{name}: {e:?}");
        }
    }

    fn json_value() -> impl Strategy<Value = serde_json::Value> {
        let leaf = prop_oneof![
            Just(serde_json::Value::Null),
            any::<bool>().prop_map(serde_json::Value::from),
            any::<i64>().prop_map(serde_json::Value::from),
            any::<f64>()
                .prop_filter("finite", |f| f.is_finite())
                .prop_map(serde_json::Value::from),
            "[a-zA-Z*]{0,12}".prop_map(serde_json::Value::from),
        ];
        leaf.prop_recursive(4, 32, 6, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..6).prop_map(serde_json::Value::from),
                prop::collection::btree_map(
                    prop_oneof![
                        Just("scoringStrategy".to_string()),
                        Just("type".to_string()),
                        Just("resources".to_string()),
                        Just("weight".to_string()),
                        Just("name".to_string()),
                        Just("shape".to_string()),
                        Just("defaultConstraints".to_string()),
                        Just("hardPodAffinityWeight".to_string()),
                        Just("addedAffinity".to_string()),
                        "[a-z]{1,8}",
                    ],
                    inner,
                    0..6
                )
                .prop_map(|m| serde_json::Value::Object(m.into_iter().collect())),
            ]
        })
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(300))]

        /// Arbitrary args for every plugin, and arbitrary plugin lists: an error or a profile,
        /// never a panic.
        #[test]
        fn arbitrary_args_and_lists_never_panic(
            args in json_value(),
            plugin in 0usize..15,
            names in prop::collection::vec(prop_oneof![Just("*".to_string()), Just("NodeResourcesFit".to_string()), Just("ImageLocality".to_string()), "[A-Za-z]{1,10}"], 0..5),
            weights in prop::collection::vec(proptest::option::of(-5i32..200), 5),
        ) {
            let name = crate::scheduler::framework::registry::registry()[plugin].name;
            let list: Vec<PluginRef> = names.iter().zip(weights.iter()).map(|(n, w)| p(n, *w)).collect();
            let mut s = spec(Plugins {
                score: set(list.clone(), list.clone()),
                multi_point: set(list.clone(), vec![]),
                filter: set(vec![], list),
                ..Default::default()
            });
            s.plugin_config = vec![PluginConfig { name: name.to_string(), args: Some(args) }];
            let _ = compile(&s, "fuzz", &Handle::default());
        }
    }
}
