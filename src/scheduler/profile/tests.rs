//! The compiler's rules, each from kube-scheduler's own behaviour, and arbitrary input.

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
        namespace_selector: None,
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

/// kube-scheduler 1.36's default profile: NodeUnschedulable before NodeName, no GangScheduling
/// (its Workload API gates are off), and VolumeBinding scores nothing (no shape defaulted; one
/// given is refused, naming the gate).
#[test]
fn the_default_profile_of_1_36_is_its_kube_schedulers() {
    let handle = Handle {
        release: crate::k8s::release::Release::of_minor(36),
        ..Handle::default()
    };
    let c = default_profile("tether-scheduler", &handle).expect("compiles");
    let e = c.effective;
    assert_eq!(e.pre_enqueue, ["SchedulingGates", "DynamicResources"]);
    assert_eq!(e.filter[..2], ["NodeUnschedulable", "NodeName"]);
    let spec: SchedulingProfileSpec = serde_json::from_value(serde_json::json!({
        "schedulerName": "s",
        "pluginConfig": [{"name": "VolumeBinding", "args": {"shape": []}}],
    }))
    .expect("a spec");
    let Err(refused) = compile(&spec, "v1", &handle) else {
        panic!("a shape is refused in 1.36");
    };
    assert!(
        refused.to_string().contains(
            "pluginConfig[0].args.shape: Invalid value: []: unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring"
        ),
        "{refused}"
    );
    assert!(
        compile(&spec, "v1", &Handle::default()).is_ok(),
        "1.37 defaults it"
    );
}

#[test]
fn the_default_profile_is_kube_schedulers() {
    let c = default_profile("tether-scheduler", &Handle::default()).expect("compiles");
    let e = c.effective;
    assert_eq!(e.queue_sort, ["PrioritySort"]);
    // GangScheduling: upstream's default with GenericWorkload on.
    assert_eq!(
        e.pre_enqueue,
        ["SchedulingGates", "DynamicResources", "GangScheduling"]
    );
    assert_eq!(
        e.filter,
        [
            "NodeName",
            "NodeUnschedulable",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures"
        ]
    );
    assert_eq!(e.reserve, ["VolumeBinding", "DynamicResources"]);
    assert_eq!(e.post_filter, ["DynamicResources", "DefaultPreemption"]);
    assert_eq!(e.pre_bind, ["VolumeBinding", "DynamicResources"]);
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
            ("VolumeBinding", 1),
            ("PodTopologySpread", 2),
            ("InterPodAffinity", 2),
            ("DynamicResources", 2),
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
            "args nested 100 levels deep",
            spec(
                None,
                vec![PluginConfig {
                    name: "NodeResourcesFit".into(),
                    args: Some(
                        serde_json::from_str(&format!(
                            "{}1{}",
                            "{\"a\":".repeat(100),
                            "}".repeat(100)
                        ))
                        .expect("nested json"),
                    ),
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
            "a backoff near the largest integer",
            SchedulingProfileSpec {
                pod_initial_backoff_seconds: i64::MAX - 1,
                pod_max_backoff_seconds: i64::MAX,
                ..spec(None, vec![])
            },
            "podInitialBackoffSeconds",
        ),
        (
            "a max backoff over a day",
            SchedulingProfileSpec {
                pod_max_backoff_seconds: 86_401,
                ..spec(None, vec![])
            },
            "podMaxBackoffSeconds",
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

/// Hundreds of wrong entries: every one is found, and the message names the first ten and how
/// many more, so the condition stays readable.
#[test]
fn a_profile_with_hundreds_of_wrong_plugins_gets_a_bounded_message() {
    let wrong: Vec<PluginConfig> = (0..500)
        .map(|i| PluginConfig {
            name: format!("Nope{i}"),
            args: None,
        })
        .collect();
    let errs = compile(&spec(None, wrong), "test", &Handle::default())
        .err()
        .unwrap_or_default();
    assert_eq!(errs.0.len(), 500);
    let message = errs.to_string();
    assert!(
        message.starts_with("pluginConfig[0].name: unknown plugin \"Nope0\""),
        "{message}"
    );
    assert!(message.ends_with("; and 490 more"), "{message}");
}

#[test]
fn depth_counts_nesting_without_recursion() {
    use crate::scheduler::framework::validation::depth;
    assert_eq!(depth(&serde_json::json!(1), 16), 0);
    assert_eq!(depth(&serde_json::json!({"a": [1, {"b": {}}]}), 16), 4);
    let deep: serde_json::Value =
        serde_json::from_str(&format!("{}1{}", "[".repeat(120), "]".repeat(120)))
            .expect("nested json");
    assert_eq!(depth(&deep, 16), 17, "stops past the limit");
}

#[test]
fn placement_recorder_runs_wherever_a_plugin_reads_the_history() {
    let with = |plugins: Plugins| compile(&spec(Some(plugins), vec![]), "test", &Handle::default());
    let defaults = default_profile("d", &Handle::default()).expect("compiles");
    assert!(
        defaults.effective.post_bind.is_empty(),
        "no history reader, no recorder"
    );
    for reader in ["StickyNode", "PlacementHistory"] {
        let c = with(Plugins {
            multi_point: set(vec![plugin(reader, None)], vec![]),
            ..Default::default()
        })
        .expect("compiles");
        assert_eq!(c.effective.post_bind, ["PlacementRecorder"], "{reader}");
        assert!(c.profile.uses("PlacementRecorder"), "{reader}");
    }
    let named_too = with(Plugins {
        multi_point: set(
            vec![
                plugin("StickyNode", None),
                plugin("PlacementRecorder", None),
            ],
            vec![],
        ),
        ..Default::default()
    })
    .expect("compiles");
    assert_eq!(named_too.effective.post_bind, ["PlacementRecorder"], "once");
    let errs = with(Plugins {
        multi_point: set(vec![plugin("StickyNode", None)], vec![]),
        post_bind: set(vec![], vec![plugin("PlacementRecorder", None)]),
        ..Default::default()
    })
    .err()
    .unwrap_or_default();
    assert!(
        errs.0
            .iter()
            .any(|e| e.path == "plugins.postBind.disabled[0].name"),
        "disabling it while StickyNode runs names the field: {errs}"
    );
}

mod multi_point {
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
            namespace_selector: None,
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
            let name = crate::scheduler::plugins::registry::registry()[plugin].name;
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

#[test]
fn a_score_weight_outside_one_to_a_hundred_is_refused_naming_it() {
    for weight in [0, -1, 101, i32::MAX, i32::MIN] {
        let s = spec(
            Some(Plugins {
                multi_point: set(vec![plugin("PlacementHistory", Some(weight))], vec![]),
                score: set(vec![plugin("ImageLocality", Some(weight))], vec![]),
                ..Default::default()
            }),
            vec![],
        );
        let errs = compile(&s, "test", &Handle::default())
            .err()
            .expect("refused")
            .to_string();
        assert!(
            errs.contains("plugins.multiPoint.enabled[0].weight")
                && errs.contains("plugins.score.enabled[0].weight"),
            "{weight}: {errs}"
        );
    }
}

/// The default profile's PreFilter plugins, in order, as kube-scheduler v1.37.2 expands its
/// multiPoint set (every default plugin that has a PreFilter): 1.37 gave NodeName,
/// NodeUnschedulable and TaintToleration one.
#[test]
fn the_default_profile_runs_upstreams_pre_filter_plugins_in_order() {
    let c = default_profile("d", &Handle::default()).expect("compiles");
    assert_eq!(
        c.effective.pre_filter,
        [
            "NodeName",
            "NodeUnschedulable",
            "TaintToleration",
            "NodeAffinity",
            "NodePorts",
            "NodeResourcesFit",
            "VolumeRestrictions",
            "NodeVolumeLimits",
            "VolumeBinding",
            "VolumeZone",
            "PodTopologySpread",
            "InterPodAffinity",
            "DynamicResources",
            "NodeDeclaredFeatures",
        ]
    );
}
