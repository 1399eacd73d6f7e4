use k8s_openapi::api::core::v1::{
    Affinity, NodeSelector, NodeSelectorRequirement, PreferredSchedulingTerm,
};
use serde_json::{Value, json};

use super::*;
use crate::scheduler::framework::Code;
use crate::scheduler::testing::{NodeBuilder, PodBuilder};

fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
    NodeSelectorRequirement {
        key: key.into(),
        operator: op.into(),
        values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
    }
}

fn exprs(reqs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: Some(reqs),
        match_fields: None,
    }
}

fn name_in(names: &[&str]) -> NodeSelectorTerm {
    NodeSelectorTerm {
        match_expressions: None,
        match_fields: Some(vec![req("metadata.name", "In", names)]),
    }
}

fn node_affinity(na: k8s_openapi::api::core::v1::NodeAffinity) -> Affinity {
    Affinity {
        node_affinity: Some(na),
        ..Default::default()
    }
}

/// A pod requiring these node selector terms (ORed).
fn requiring(terms: Vec<NodeSelectorTerm>) -> PodBuilder {
    PodBuilder::new("p").affinity(node_affinity(k8s_openapi::api::core::v1::NodeAffinity {
        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
            node_selector_terms: terms,
        }),
        ..Default::default()
    }))
}

/// A pod preferring these weighted terms.
fn preferring(terms: Vec<(i32, NodeSelectorTerm)>) -> PodBuilder {
    PodBuilder::new("p").affinity(node_affinity(k8s_openapi::api::core::v1::NodeAffinity {
        preferred_during_scheduling_ignored_during_execution: Some(
            terms
                .into_iter()
                .map(|(weight, preference)| PreferredSchedulingTerm { weight, preference })
                .collect(),
        ),
        ..Default::default()
    }))
}

fn added_required(key: &str, value: &str) -> Value {
    json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [
            {"key": key, "operator": "In", "values": [value]}
        ]}]
    }}})
}

fn plugin(args: Option<&Value>) -> NodeAffinity {
    let args: NodeAffinityArgs = decode_args(args, &"args".into()).expect("args decode");
    args.validate(&"args".into()).expect("args are valid");
    NodeAffinity::new(&args).expect("plugin builds")
}

/// What PreFilter should say.
#[derive(Debug)]
enum Pre {
    Skip,
    All,
    Nodes(&'static [&'static str]),
    /// Unresolvable: the terms' node names conflict.
    Conflict,
}

/// (name, args, pod, node, PreFilter, Filter: `None` = success, `Some(reason)`).
type FilterCase = (
    &'static str,
    Option<Value>,
    PodBuilder,
    NodeBuilder,
    Pre,
    Option<&'static str>,
);

#[test]
fn pre_filter_and_filter_as_kube_scheduler() {
    let cases: Vec<FilterCase> = vec![
        (
            "no selector",
            None,
            PodBuilder::new("p"),
            NodeBuilder::new("node1"),
            Pre::Skip,
            None,
        ),
        (
            "missing labels",
            None,
            PodBuilder::new("p").node_selector("foo", "bar"),
            NodeBuilder::new("node1"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "same labels",
            None,
            PodBuilder::new("p").node_selector("foo", "bar"),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            None,
        ),
        (
            "node labels are a superset",
            None,
            PodBuilder::new("p").node_selector("foo", "bar"),
            NodeBuilder::new("node1")
                .label("foo", "bar")
                .label("baz", "blah"),
            Pre::All,
            None,
        ),
        (
            "node labels are a subset",
            None,
            PodBuilder::new("p")
                .node_selector("foo", "bar")
                .node_selector("baz", "blah"),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "matchExpressions In matches the node",
            None,
            requiring(vec![exprs(vec![req("foo", "In", &["bar", "value2"])])]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            None,
        ),
        (
            "matchExpressions Gt matches the node",
            None,
            requiring(vec![exprs(vec![req("kernel-version", "Gt", &["0204"])])]),
            NodeBuilder::new("node1").label("kernel-version", "0206"),
            Pre::All,
            None,
        ),
        (
            "matchExpressions NotIn matches the node",
            None,
            requiring(vec![exprs(vec![req(
                "mem-type",
                "NotIn",
                &["DDR", "DDR2"],
            )])]),
            NodeBuilder::new("node1").label("mem-type", "DDR3"),
            Pre::All,
            None,
        ),
        (
            "matchExpressions Exists matches the node",
            None,
            requiring(vec![exprs(vec![req("GPU", "Exists", &[])])]),
            NodeBuilder::new("node1").label("GPU", "NVIDIA-GRID-K1"),
            Pre::All,
            None,
        ),
        (
            "affinity that doesn't match the node's labels",
            None,
            requiring(vec![exprs(vec![req("foo", "In", &["value1", "value2"])])]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "an empty matchExpressions term matches no node",
            None,
            requiring(vec![exprs(vec![])]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "no nodeSelectorTerms matches no node",
            None,
            requiring(vec![]),
            NodeBuilder::new("node1"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "affinity without a required selector is skipped",
            None,
            preferring(vec![(1, exprs(vec![req("foo", "In", &["bar"])]))]),
            NodeBuilder::new("node1"),
            Pre::Skip,
            None,
        ),
        (
            "multiple matchExpressions are ANDed",
            None,
            requiring(vec![exprs(vec![
                req("GPU", "Exists", &[]),
                req("GPU", "NotIn", &["AMD", "INTER"]),
            ])]),
            NodeBuilder::new("node1").label("GPU", "NVIDIA-GRID-K1"),
            Pre::All,
            None,
        ),
        (
            "multiple matchExpressions ANDed, one fails",
            None,
            requiring(vec![exprs(vec![
                req("GPU", "Exists", &[]),
                req("GPU", "In", &["AMD", "INTER"]),
            ])]),
            NodeBuilder::new("node1").label("GPU", "NVIDIA-GRID-K1"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "multiple nodeSelectorTerms are ORed",
            None,
            requiring(vec![
                exprs(vec![req("foo", "In", &["bar", "value2"])]),
                exprs(vec![req("diffkey", "In", &["wrong", "value2"])]),
            ]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            None,
        ),
        (
            "affinity and nodeSelector both satisfied",
            None,
            requiring(vec![exprs(vec![req("foo", "Exists", &[])])]).node_selector("foo", "bar"),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            None,
        ),
        (
            "affinity satisfied but nodeSelector not",
            None,
            requiring(vec![exprs(vec![req("foo", "Exists", &[])])]).node_selector("foo", "bar"),
            NodeBuilder::new("node1").label("foo", "barrrrrr"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "matchFields In matches the node",
            None,
            requiring(vec![name_in(&["node1"])]),
            NodeBuilder::new("node1"),
            Pre::Nodes(&["node1"]),
            None,
        ),
        (
            "matchFields In does not match the node",
            None,
            requiring(vec![name_in(&["node2"])]),
            NodeBuilder::new("node1"),
            Pre::Nodes(&["node2"]),
            Some(ERR_REASON_POD),
        ),
        (
            "two terms: matchFields does not match, matchExpressions does",
            None,
            requiring(vec![
                name_in(&["node2"]),
                exprs(vec![req("foo", "In", &["bar"])]),
            ]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            None,
        ),
        (
            "one term: matchFields does not match, matchExpressions does",
            None,
            requiring(vec![NodeSelectorTerm {
                match_expressions: Some(vec![req("foo", "In", &["bar"])]),
                match_fields: Some(vec![req("metadata.name", "In", &["node2"])]),
            }]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::Nodes(&["node2"]),
            Some(ERR_REASON_POD),
        ),
        (
            "one term: both matchFields and matchExpressions match",
            None,
            requiring(vec![NodeSelectorTerm {
                match_expressions: Some(vec![req("foo", "In", &["bar"])]),
                match_fields: Some(vec![req("metadata.name", "In", &["node1"])]),
            }]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::Nodes(&["node1"]),
            None,
        ),
        (
            "two terms: neither matchFields nor matchExpressions match",
            None,
            requiring(vec![
                name_in(&["node2"]),
                exprs(vec![req("foo", "In", &["not-match"])]),
            ]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "two terms of node name affinity narrow to their union",
            None,
            requiring(vec![name_in(&["node1"]), name_in(&["node2"])]),
            NodeBuilder::new("node1"),
            Pre::Nodes(&["node1", "node2"]),
            None,
        ),
        (
            // upstream's "Pod with an invalid value in Affinity term won't be scheduled onto
            // the node": the term does not parse, so it matches no node; not an error.
            "an invalid label value matches no node",
            None,
            requiring(vec![exprs(vec![req(
                "foo",
                "NotIn",
                &["invalid value: ___@#$%^"],
            )])]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "a term that does not parse leaves the others to match",
            None,
            requiring(vec![
                exprs(vec![req("foo", "Near", &["bar"])]),
                exprs(vec![req("foo", "In", &["bar"])]),
            ]),
            NodeBuilder::new("node1").label("foo", "bar"),
            Pre::All,
            None,
        ),
        (
            // upstream's "Pod with two conflicting mach field requirements"
            "node names that conflict within a term reject the pod at PreFilter",
            None,
            requiring(vec![NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![
                    req("metadata.name", "In", &["node1"]),
                    req("metadata.name", "In", &["node2"]),
                ]),
            }]),
            NodeBuilder::new("node1"),
            Pre::Conflict,
            None,
        ),
        (
            "pod matches but addedAffinity does not",
            Some(added_required("zone", "foo")),
            requiring(vec![exprs(vec![req("foo", "In", &["bar"])])]),
            NodeBuilder::new("node1")
                .label("foo", "bar")
                .label("zone", "bar"),
            Pre::All,
            Some(ERR_REASON_ENFORCED),
        ),
        (
            "pod and addedAffinity both match",
            Some(added_required("zone", "foo")),
            requiring(vec![exprs(vec![req("foo", "In", &["bar"])])]),
            NodeBuilder::new("node1")
                .label("foo", "bar")
                .label("zone", "foo"),
            Pre::All,
            None,
        ),
        (
            "addedAffinity matches but the pod does not",
            Some(added_required("zone", "foo")),
            requiring(vec![exprs(vec![req("foo", "In", &["bar"])])]),
            NodeBuilder::new("node1").label("zone", "foo"),
            Pre::All,
            Some(ERR_REASON_POD),
        ),
        (
            "a pod without affinity is not skipped under addedAffinity",
            Some(added_required("zone", "foo")),
            PodBuilder::new("p"),
            NodeBuilder::new("node1").label("zone", "bar"),
            Pre::All,
            Some(ERR_REASON_ENFORCED),
        ),
    ];
    for (name, args, pod, node, want_pre, want_filter) in cases {
        let pl = plugin(args.as_ref());
        let pod = pod.info();
        let node = node.info(vec![]);
        let mut state = CycleState::new();
        let (result, status) =
            PreFilterPlugin::pre_filter(&pl, &mut state, &pod, &Snapshot::default());
        match want_pre {
            Pre::Skip => {
                assert!(status.is_skip(), "{name}: {status}");
                continue;
            }
            Pre::Conflict => {
                assert_eq!(status.code, Code::UnschedulableAndUnresolvable, "{name}");
                assert_eq!(status.message(), ERR_REASON_CONFLICT, "{name}");
                continue;
            }
            Pre::All => {
                assert!(status.is_success(), "{name}: {status}");
                assert_eq!(result, PreFilterResult::all_nodes(), "{name}");
            }
            Pre::Nodes(names) => {
                assert!(status.is_success(), "{name}: {status}");
                let want = PreFilterResult::nodes(names.iter().map(|n| n.to_string()));
                assert_eq!(result, want, "{name}");
            }
        }
        let want = match want_filter {
            None => Status::success(),
            Some(reason) => Status::new(Code::UnschedulableAndUnresolvable, reason),
        };
        assert_eq!(
            FilterPlugin::filter(&pl, &state, &pod, &node),
            want,
            "{name}"
        );
        // Without PreFilter's state, Filter falls back to parsing the pod.
        assert_eq!(
            FilterPlugin::filter(&pl, &CycleState::new(), &pod, &node),
            want,
            "{name} (no state)"
        );
    }
}

/// Runs PreScore, Score on every node and NormalizeScore; `None` when PreScore skips.
fn run_score(args: Option<&Value>, pod: PodBuilder, nodes: &[NodeBuilder]) -> Option<Vec<i64>> {
    let pl = plugin(args);
    let pod = pod.info();
    let infos: Vec<Arc<NodeInfo>> = nodes
        .iter()
        .map(|n| Arc::new(n.clone().info(vec![])))
        .collect();
    let mut state = CycleState::new();
    let status = PreScorePlugin::pre_score(&pl, &mut state, &pod, &infos, &Snapshot::default());
    if status.is_skip() {
        return None;
    }
    assert!(status.is_success(), "{status}");
    let mut scores: Vec<NodeScore> = infos
        .iter()
        .map(|n| NodeScore {
            name: n.name.clone(),
            score: ScorePlugin::score(&pl, &state, &pod, n).expect("score"),
        })
        .collect();
    assert!(pl.normalize_scores(&state, &pod, &mut scores).is_success());
    Some(scores.into_iter().map(|s| s.score).collect())
}

type ScoreCase = (&'static str, Option<Value>, PodBuilder, Option<Vec<i64>>);

#[test]
fn score_sums_matching_preferred_weights() {
    let nodes = [
        NodeBuilder::new("node1").label("foo", "bar"),
        NodeBuilder::new("node2").label("key", "value"),
        NodeBuilder::new("node3")
            .label("foo", "bar")
            .label("key", "value")
            .label("az", "az1"),
    ];
    let foo_bar = || exprs(vec![req("foo", "In", &["bar"])]);
    let key_value = || exprs(vec![req("key", "In", &["value"])]);
    let all_three = || {
        exprs(vec![
            req("foo", "In", &["bar"]),
            req("key", "In", &["value"]),
            req("az", "In", &["az1"]),
        ])
    };
    let added_key_value = json!({"addedAffinity": {
        "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 3, "preference": {
            "matchExpressions": [{"key": "key", "operator": "In", "values": ["value"]}]
        }}]
    }});
    // (name, args, pod, final scores of node1..node3; `None` when PreScore skips)
    let cases: Vec<ScoreCase> = vec![
        (
            "no preferred terms: PreScore skips",
            None,
            PodBuilder::new("p"),
            None,
        ),
        (
            "no node matches",
            None,
            preferring(vec![(2, exprs(vec![req("foo", "In", &["nope"])]))]),
            Some(vec![0, 0, 0]),
        ),
        (
            "only nodes with foo=bar match",
            None,
            preferring(vec![(2, foo_bar())]),
            // raw 2, 0, 2 → 100, 0, 100
            Some(vec![100, 0, 100]),
        ),
        (
            "weights add up per matching term",
            None,
            preferring(vec![(2, foo_bar()), (4, key_value()), (5, all_three())]),
            // raw 2, 4, 11 → 100*2/11 = 18, 100*4/11 = 36, 100
            Some(vec![18, 36, 100]),
        ),
        (
            "a term of weight 0 counts for nothing",
            None,
            preferring(vec![(0, foo_bar()), (4, key_value())]),
            // raw 0, 4, 4
            Some(vec![0, 100, 100]),
        ),
        (
            "addedAffinity's preferred terms add to the pod's",
            Some(added_key_value.clone()),
            preferring(vec![(2, foo_bar())]),
            // raw 2, 3, 5 → 40, 60, 100
            Some(vec![40, 60, 100]),
        ),
        (
            "addedAffinity's preferred terms score a pod without its own",
            Some(added_key_value),
            PodBuilder::new("p"),
            // raw 0, 3, 3
            Some(vec![0, 100, 100]),
        ),
    ];
    for (name, args, pod, want) in cases {
        assert_eq!(run_score(args.as_ref(), pod, &nodes), want, "{name}");
    }
}

#[test]
fn invalid_preferred_term_is_a_pre_score_error() {
    let pl = plugin(None);
    let pod = preferring(vec![(1, exprs(vec![req("foo", "Gt", &["x"])]))]).info();
    let status =
        PreScorePlugin::pre_score(&pl, &mut CycleState::new(), &pod, &[], &Snapshot::default());
    assert_eq!(status.code, Code::Error);
}

#[test]
fn args_validation_names_the_field() {
    let path = "pluginConfig[0].args";
    let cases: Vec<(&str, Value, Vec<&str>)> = vec![
        ("empty args", json!({}), vec![]),
        ("valid addedAffinity", added_required("zone", "a"), vec![]),
        (
            "required term with a bad operator",
            json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a"]}]},
                    {"matchExpressions": [
                        {"key": "zone", "operator": "In", "values": ["a"]},
                        {"key": "zone", "operator": "Near", "values": ["a"]}
                    ]}
                ]
            }}}),
            vec![
                "pluginConfig[0].args.addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[1].matchExpressions[1]",
            ],
        ),
        (
            "In without values",
            json!({"addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "zone", "operator": "In"}]}]
            }}}),
            vec![
                "pluginConfig[0].args.addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
            ],
        ),
        (
            // A field requirement takes one value; its key may be any (only metadata.name
            // has a value on a node), as upstream's field selector parses it.
            "preferred field requirement of two values",
            json!({"addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchFields": [
                    {"key": "metadata.uid", "operator": "In", "values": ["x"]}
                ]}},
                {"weight": 1, "preference": {"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": ["x", "y"]}
                ]}}
            ]}}),
            vec![
                "pluginConfig[0].args.addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[1].preference.matchFields[0]",
            ],
        ),
        (
            "every error is reported",
            json!({"addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "n", "operator": "Gt", "values": ["x"]}]}
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "preference": {"matchExpressions": [
                        {"key": "n", "operator": "Lt", "values": ["1", "2"]}
                    ]}}
                ]
            }}),
            vec![
                "pluginConfig[0].args.addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0]",
                "pluginConfig[0].args.addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0]",
            ],
        ),
        ("unknown field", json!({"addedAffinty": {}}), vec![path]),
    ];
    for (name, args, want) in cases {
        let got: Vec<String> = match build(Some(&args), &path.into(), &Handle::default()) {
            Ok(_) => vec![],
            Err(errs) => errs.0.into_iter().map(|e| e.path).collect(),
        };
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn args_default_to_no_added_affinity() {
    let args: NodeAffinityArgs = decode_args(None, &"p".into()).expect("defaults");
    assert_eq!(args, NodeAffinityArgs::default());
    assert!(build(Some(&json!(null)), &"p".into(), &Handle::default()).is_ok());
}
