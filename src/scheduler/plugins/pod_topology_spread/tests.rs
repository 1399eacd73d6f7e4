use super::args::{LABEL_HOSTNAME, LABEL_TOPOLOGY_ZONE};
use super::*;
use crate::k8s::labels::Selector;
use crate::k8s::pod::Pod;
use crate::scheduler::framework::Code;
use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
use serde_json::json;
use std::collections::BTreeMap;

const OK: Code = Code::Success;
const UNSCHED: Code = Code::Unschedulable;
const UNRESOLVABLE: Code = Code::UnschedulableAndUnresolvable;

fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
    pairs
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// A constraint selecting pods labelled `selector` (matchLabels).
fn spread(
    max_skew: i32,
    key: &str,
    when: &str,
    selector: &[(&str, &str)],
) -> TopologySpreadConstraint {
    TopologySpreadConstraint {
        max_skew,
        topology_key: key.into(),
        when_unsatisfiable: when.into(),
        label_selector: Some(LabelSelector {
            match_labels: Some(labels(selector)),
            match_expressions: None,
        }),
        ..Default::default()
    }
}

fn hard(key: &str) -> TopologySpreadConstraint {
    spread(1, key, DO_NOT_SCHEDULE, &[("foo", "bar")])
}

fn soft(max_skew: i32, key: &str) -> TopologySpreadConstraint {
    spread(max_skew, key, SCHEDULE_ANYWAY, &[("foo", "bar")])
}

/// The pod being scheduled, labelled foo=bar, with these constraints.
fn incoming(constraints: Vec<TopologySpreadConstraint>) -> PodBuilder {
    constraints
        .into_iter()
        .fold(PodBuilder::new("p").label("foo", "bar"), PodBuilder::spread)
}

/// `n` pods labelled foo=bar on `node`.
fn matching(node: &str, n: usize) -> Vec<Pod> {
    (0..n)
        .map(|i| {
            PodBuilder::new(&format!("{node}-{i}"))
                .label("foo", "bar")
                .node_name(node)
                .build()
        })
        .collect()
}

fn node(name: &str, zone: &str) -> NodeBuilder {
    NodeBuilder::new(name).label("zone", zone)
}

/// node-a, node-b in zone1; node-x, node-y in zone2.
fn four_nodes() -> Vec<NodeBuilder> {
    vec![
        node("node-a", "zone1"),
        node("node-b", "zone1"),
        node("node-x", "zone2"),
        node("node-y", "zone2"),
    ]
}

fn pods(groups: Vec<Vec<Pod>>) -> Vec<Pod> {
    groups.into_iter().flatten().collect()
}

fn plugin_with(args: PodTopologySpreadArgs, selector: Option<Selector>) -> PodTopologySpread {
    struct Fixed(Option<Selector>);
    impl DefaultSelectorSource for Fixed {
        fn default_selector(&self, _pod: &PodInfo) -> Option<Selector> {
            self.0.clone()
        }
    }
    PodTopologySpread::new(args, Arc::new(Fixed(selector)))
}

fn plugin() -> PodTopologySpread {
    PodTopologySpread::new(
        PodTopologySpreadArgs::default(),
        Arc::new(NoDefaultSelectors),
    )
}

fn foo_bar() -> Selector {
    Selector::from_map(&labels(&[("foo", "bar")]))
}

// The extension points, reached through the Plugin accessors as the runtime reaches them.
fn pre_filter(
    pl: &PodTopologySpread,
    state: &mut CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
) -> (PreFilterResult, Status) {
    let pl: &dyn Plugin = pl;
    pl.pre_filter()
        .expect("PreFilter")
        .pre_filter(state, pod, snap)
}

fn filter(pl: &PodTopologySpread, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
    let pl: &dyn Plugin = pl;
    pl.filter().expect("Filter").filter(state, pod, node)
}

fn pre_score(
    pl: &PodTopologySpread,
    state: &mut CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    snap: &Snapshot,
) -> Status {
    let pl: &dyn Plugin = pl;
    pl.pre_score()
        .expect("PreScore")
        .pre_score(state, pod, nodes, snap)
}

fn score(
    pl: &PodTopologySpread,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Result<i64, Status> {
    let pl: &dyn Plugin = pl;
    pl.score().expect("Score").score(state, pod, node)
}

fn normalize_scores(
    pl: &PodTopologySpread,
    state: &CycleState,
    pod: &PodInfo,
    scores: &mut [NodeScore],
) -> Status {
    let pl: &dyn Plugin = pl;
    pl.score()
        .expect("Score")
        .normalize_scores(state, pod, scores)
}

fn run_filter(pl: &PodTopologySpread, pod: &PodInfo, snap: &Snapshot) -> Vec<(String, Code)> {
    let mut state = CycleState::new();
    let (result, status) = pre_filter(pl, &mut state, pod, snap);
    assert_eq!(result, PreFilterResult::all_nodes());
    assert!(status.is_success(), "pre_filter: {status}");
    snap.nodes()
        .iter()
        .map(|n| (n.name.clone(), filter(pl, &state, pod, n).code))
        .collect()
}

fn want_codes(want: &[(&str, Code)]) -> Vec<(String, Code)> {
    want.iter().map(|(n, c)| (n.to_string(), *c)).collect()
}

/// Required node affinity of two terms: one that does not parse (an invalid label value), and
/// `env In (prod)`.
fn broken_and_prod() -> k8s_openapi::api::core::v1::Affinity {
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };
    let term = |value: &str| NodeSelectorTerm {
        match_expressions: Some(vec![NodeSelectorRequirement {
            key: "env".into(),
            operator: "In".into(),
            values: Some(vec![value.into()]),
        }]),
        match_fields: None,
    };
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![term("prod?"), term("prod")],
            }),
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[test]
fn filter_enforces_hard_constraints() {
    let honor = |mut c: TopologySpreadConstraint, affinity: &str, taints: &str| {
        c.node_affinity_policy = Some(affinity.into());
        c.node_taints_policy = Some(taints.into());
        c
    };
    let min_domains = |n: i32| TopologySpreadConstraint {
        min_domains: Some(n),
        ..hard("zone")
    };
    let envs = || {
        vec![
            node("node-a", "zone1").label("env", "prod"),
            node("node-x", "zone2").label("env", "prod"),
            node("node-z", "zone3").label("env", "dev"),
        ]
    };
    let tainted = || {
        vec![
            node("node-a", "zone1"),
            node("node-x", "zone2"),
            node("node-z", "zone3").taint("dedicated", "gpu", "NoSchedule"),
        ]
    };
    let in_other_ns = PodBuilder::new("other")
        .namespace("other")
        .label("foo", "bar")
        .node_name("node-a")
        .build();
    let terminating = PodBuilder::new("gone")
        .label("foo", "bar")
        .node_name("node-b")
        .with(|p| p.metadata.deletion_timestamp = Some(Time(Default::default())))
        .build();
    let rev = |name: &str, node: &str| {
        PodBuilder::new(name)
            .label("foo", "bar")
            .label("rev", "1")
            .node_name(node)
            .build()
    };
    let with_keys = TopologySpreadConstraint {
        match_label_keys: Some(vec!["rev".into()]),
        ..hard("zone")
    };
    let app_web = PodBuilder::new("web")
        .label("app", "web")
        .node_name("node-x")
        .build();

    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        PodBuilder,
        Vec<NodeBuilder>,
        Vec<Pod>,
        &[(&str, Code)],
    )> = vec![
        (
            "no existing pods: every node fits",
            incoming(vec![hard("zone")]),
            four_nodes(),
            vec![],
            &[
                ("node-a", OK),
                ("node-b", OK),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "balanced zones: skew 1 everywhere",
            incoming(vec![hard("zone")]),
            four_nodes(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[
                ("node-a", OK),
                ("node-b", OK),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "the crowded zone would exceed maxSkew",
            incoming(vec![hard("zone")]),
            four_nodes(),
            pods(vec![matching("node-a", 1), matching("node-b", 1)]),
            &[
                ("node-a", UNSCHED),
                ("node-b", UNSCHED),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "the pod matching its own selector adds one",
            incoming(vec![hard("zone")]),
            four_nodes(),
            matching("node-a", 1),
            &[
                ("node-a", UNSCHED),
                ("node-b", UNSCHED),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "a pod not matching its own selector adds nothing",
            PodBuilder::new("p").spread(spread(1, "zone", DO_NOT_SCHEDULE, &[("foo", "bar")])),
            four_nodes(),
            matching("node-a", 1),
            &[
                ("node-a", OK),
                ("node-b", OK),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "pods of other namespaces and terminating pods do not count",
            incoming(vec![hard("zone")]),
            four_nodes(),
            vec![in_other_ns, terminating],
            &[
                ("node-a", OK),
                ("node-b", OK),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "a node without the topology key is unresolvable",
            incoming(vec![hard("zone")]),
            vec![node("node-a", "zone1"), NodeBuilder::new("node-z")],
            vec![],
            &[("node-a", OK), ("node-z", UNRESOLVABLE)],
        ),
        (
            "fewer domains than minDomains: the global minimum is 0",
            incoming(vec![min_domains(3)]),
            four_nodes(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[
                ("node-a", UNSCHED),
                ("node-b", UNSCHED),
                ("node-x", UNSCHED),
                ("node-y", UNSCHED),
            ],
        ),
        (
            "minDomains met: the real minimum",
            incoming(vec![min_domains(2)]),
            four_nodes(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[
                ("node-a", OK),
                ("node-b", OK),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "nodeAffinityPolicy Honor: nodes the pod cannot use are no domain",
            incoming(vec![hard("zone")]).node_selector("env", "prod"),
            envs(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[("node-a", OK), ("node-x", OK), ("node-z", OK)],
        ),
        (
            // upstream ignores a term's parse error: the term counts no node, the others do.
            "nodeAffinityPolicy Honor: a required term that does not parse counts no node",
            incoming(vec![hard("zone")]).affinity(broken_and_prod()),
            envs(),
            pods(vec![matching("node-a", 2), matching("node-x", 1)]),
            &[("node-a", UNSCHED), ("node-x", OK), ("node-z", OK)],
        ),
        (
            "nodeAffinityPolicy Ignore: every node is a domain",
            incoming(vec![honor(hard("zone"), "Ignore", "Ignore")]).node_selector("env", "prod"),
            envs(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[("node-a", UNSCHED), ("node-x", UNSCHED), ("node-z", OK)],
        ),
        (
            "nodeTaintsPolicy Ignore (default): tainted nodes are domains",
            incoming(vec![hard("zone")]),
            tainted(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[("node-a", UNSCHED), ("node-x", UNSCHED), ("node-z", OK)],
        ),
        (
            "nodeTaintsPolicy Honor: untolerated taints exclude the node",
            incoming(vec![honor(hard("zone"), "Honor", "Honor")]),
            tainted(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[("node-a", OK), ("node-x", OK), ("node-z", OK)],
        ),
        (
            "nodeTaintsPolicy Honor: tolerated taints keep the node",
            incoming(vec![honor(hard("zone"), "Honor", "Honor")]).toleration(
                "dedicated",
                "Equal",
                "gpu",
                "NoSchedule",
            ),
            tainted(),
            pods(vec![matching("node-a", 1), matching("node-x", 1)]),
            &[("node-a", UNSCHED), ("node-x", UNSCHED), ("node-z", OK)],
        ),
        (
            "without matchLabelKeys every revision counts",
            incoming(vec![hard("zone")]).label("rev", "2"),
            four_nodes(),
            vec![rev("r1", "node-a"), rev("r2", "node-b")],
            &[
                ("node-a", UNSCHED),
                ("node-b", UNSCHED),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "matchLabelKeys: only pods of the pod's own revision count",
            incoming(vec![with_keys]).label("rev", "2"),
            four_nodes(),
            vec![rev("r1", "node-a"), rev("r2", "node-b")],
            &[
                ("node-a", OK),
                ("node-b", OK),
                ("node-x", OK),
                ("node-y", OK),
            ],
        ),
        (
            "zone and hostname constraints must both hold",
            incoming(vec![hard("zone"), hard(LABEL_HOSTNAME)]),
            four_nodes(),
            pods(vec![
                matching("node-a", 1),
                matching("node-x", 1),
                matching("node-y", 1),
            ]),
            &[
                ("node-a", UNSCHED),
                ("node-b", OK),
                ("node-x", UNSCHED),
                ("node-y", UNSCHED),
            ],
        ),
        (
            "two constraints on one key count their own selectors",
            incoming(vec![
                hard("zone"),
                spread(1, "zone", DO_NOT_SCHEDULE, &[("app", "web")]),
            ])
            .label("app", "web"),
            four_nodes(),
            pods(vec![matching("node-a", 1), vec![app_web]]),
            &[
                ("node-a", UNSCHED),
                ("node-b", UNSCHED),
                ("node-x", UNSCHED),
                ("node-y", UNSCHED),
            ],
        ),
    ];
    for (name, pod, nodes, existing, want) in cases {
        let snap = snapshot(nodes, existing);
        let got = run_filter(&plugin(), &pod.info(), &snap);
        assert_eq!(got, want_codes(want), "{name}");
    }
}

#[test]
fn filter_reasons_name_the_failure() {
    let snap = snapshot(
        vec![
            node("node-a", "zone1"),
            node("node-x", "zone2"),
            NodeBuilder::new("node-z"),
        ],
        matching("node-a", 1),
    );
    let pod = incoming(vec![hard("zone")]).info();
    let pl = plugin();
    let mut state = CycleState::new();
    assert!(pre_filter(&pl, &mut state, &pod, &snap).1.is_success());
    let node = |name: &str| snap.get(name).expect("node in snapshot");
    let (a, z) = (node("node-a"), node("node-z"));
    assert_eq!(
        filter(&pl, &state, &pod, a),
        Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
    );
    assert_eq!(
        filter(&pl, &state, &pod, z),
        Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
    );
    let empty = CycleState::new();
    assert_eq!(filter(&pl, &empty, &pod, a).code, Code::Error);
}

#[test]
fn pre_filter_skips_without_hard_constraints() {
    let list = PodTopologySpreadArgs {
        defaulting_type: DefaultingType::List,
        default_constraints: vec![TopologySpreadConstraint {
            label_selector: None,
            ..hard("zone")
        }],
    };
    let cases: Vec<(&str, PodTopologySpread, PodBuilder)> = vec![
        ("no constraints", plugin(), PodBuilder::new("p")),
        (
            "only soft constraints",
            plugin(),
            incoming(vec![soft(1, "zone")]),
        ),
        (
            "hard defaults but nothing selects the pod",
            plugin_with(list.clone(), None),
            incoming(vec![]),
        ),
        (
            "hard defaults with an empty default selector",
            plugin_with(list.clone(), Some(Selector::everything())),
            incoming(vec![]),
        ),
        (
            "the pod's own constraints replace the defaults",
            plugin_with(list, Some(foo_bar())),
            incoming(vec![soft(1, "zone")]),
        ),
    ];
    let snap = snapshot(four_nodes(), vec![]);
    for (name, pl, pod) in cases {
        let mut state = CycleState::new();
        let (_, status) = pre_filter(&pl, &mut state, &pod.info(), &snap);
        assert!(status.is_skip(), "{name}: {status}");
    }
}

#[test]
fn hard_default_constraints_use_the_default_selector() {
    let list = PodTopologySpreadArgs {
        defaulting_type: DefaultingType::List,
        default_constraints: vec![TopologySpreadConstraint {
            label_selector: None,
            ..hard("zone")
        }],
    };
    let snap = snapshot(
        four_nodes(),
        pods(vec![matching("node-a", 1), matching("node-b", 1)]),
    );
    let got = run_filter(
        &plugin_with(list, Some(foo_bar())),
        &incoming(vec![]).info(),
        &snap,
    );
    assert_eq!(
        got,
        want_codes(&[
            ("node-a", UNSCHED),
            ("node-b", UNSCHED),
            ("node-x", OK),
            ("node-y", OK),
        ])
    );
}

/// Runs PreScore over the `feasible` nodes, Score on each, then NormalizeScore.
fn run_score(
    pl: &PodTopologySpread,
    pod: &PodInfo,
    snap: &Snapshot,
    feasible: &[&str],
) -> Vec<(String, i64)> {
    let nodes: Vec<_> = snap
        .nodes()
        .iter()
        .filter(|n| feasible.contains(&n.name.as_str()))
        .cloned()
        .collect();
    let mut state = CycleState::new();
    let status = pre_score(pl, &mut state, pod, &nodes, snap);
    assert!(status.is_success(), "pre_score: {status}");
    let mut scores: Vec<_> = nodes
        .iter()
        .map(|n| NodeScore {
            name: n.name.clone(),
            score: score(pl, &state, pod, n).expect("score"),
        })
        .collect();
    assert!(normalize_scores(pl, &state, pod, &mut scores).is_success());
    scores.into_iter().map(|s| (s.name, s.score)).collect()
}

fn want_scores(want: &[(&str, i64)]) -> Vec<(String, i64)> {
    want.iter().map(|(n, s)| (n.to_string(), *s)).collect()
}

#[test]
fn score_prefers_the_least_crowded_domains() {
    const ALL: &[&str] = &["node-a", "node-b", "node-c", "node-x", "node-y", "node-z"];
    // zone1 = 3 matching pods, zone2 = 1 (node-a: 2, node-b: 1, node-x: 1).
    let s1 = || {
        pods(vec![
            matching("node-a", 2),
            matching("node-b", 1),
            matching("node-x", 1),
        ])
    };
    let ignore_affinity = TopologySpreadConstraint {
        node_affinity_policy: Some("Ignore".into()),
        ..soft(1, "zone")
    };
    let with_dev_node = || {
        let mut nodes: Vec<_> = four_nodes()
            .into_iter()
            .map(|n| n.label("env", "prod"))
            .collect();
        nodes.push(node("node-c", "zone2").label("env", "dev"));
        nodes
    };
    let with_zone3 = || {
        let mut nodes = four_nodes();
        nodes.push(node("node-c", "zone3"));
        nodes
    };

    #[allow(clippy::type_complexity)]
    let cases: Vec<(
        &str,
        PodBuilder,
        Vec<NodeBuilder>,
        Vec<Pod>,
        &[&str],
        &[(&str, i64)],
    )> = vec![
        (
            // weight ln(2+2) = 1.386: zone1 3*1.386 = 4.16 -> 4, zone2 1.39 -> 1;
            // normalized 100*(4+1-s)/4.
            "zone: 3 vs 1 matching pods",
            incoming(vec![soft(1, "zone")]),
            four_nodes(),
            s1(),
            ALL,
            &[
                ("node-a", 25),
                ("node-b", 25),
                ("node-x", 100),
                ("node-y", 100),
            ],
        ),
        (
            // weight ln(4+2) = 1.792: a 3.58 -> 4, b 1.79 -> 2, x/y 0; 100*(4+0-s)/4.
            "hostname: only the node's own pods count",
            incoming(vec![soft(1, LABEL_HOSTNAME)]),
            four_nodes(),
            pods(vec![matching("node-a", 2), matching("node-b", 1)]),
            ALL,
            &[
                ("node-a", 0),
                ("node-b", 50),
                ("node-x", 100),
                ("node-y", 100),
            ],
        ),
        (
            // as the first row; node-z lacks the key, is ignored and scores 0.
            "a feasible node without the topology key scores 0",
            incoming(vec![soft(1, "zone")]),
            {
                let mut nodes = four_nodes();
                nodes.push(NodeBuilder::new("node-z"));
                nodes
            },
            pods(vec![s1(), matching("node-z", 3)]),
            ALL,
            &[
                ("node-a", 25),
                ("node-b", 25),
                ("node-x", 100),
                ("node-y", 100),
                ("node-z", 0),
            ],
        ),
        (
            // zone3 has no feasible node: weight stays ln(4), its pods never count.
            "domains come from feasible nodes, counts from all",
            incoming(vec![soft(1, "zone")]),
            with_zone3(),
            pods(vec![s1(), matching("node-c", 5)]),
            &["node-a", "node-x"],
            &[("node-a", 25), ("node-x", 100)],
        ),
        (
            // zone1 4.16 + 2 = 6.16 -> 6, zone2 1.39 + 2 = 3.39 -> 3; 100*(6+3-s)/6.
            "maxSkew waters differences down",
            incoming(vec![soft(3, "zone")]),
            four_nodes(),
            s1(),
            ALL,
            &[
                ("node-a", 50),
                ("node-b", 50),
                ("node-x", 100),
                ("node-y", 100),
            ],
        ),
        (
            // zone ln4 = 1.386, hostname ln6 = 1.792:
            // a 3*1.386 + 2*1.792 = 7.74 -> 8, b 4.16 + 1.79 = 5.95 -> 6,
            // x 1.39 + 1.79 = 3.18 -> 3, y 1.39 -> 1; 100*(8+1-s)/8.
            "zone and hostname add up",
            incoming(vec![soft(1, "zone"), soft(1, LABEL_HOSTNAME)]),
            four_nodes(),
            s1(),
            ALL,
            &[
                ("node-a", 12),
                ("node-b", 37),
                ("node-x", 75),
                ("node-y", 100),
            ],
        ),
        (
            // node-c (env=dev) holds 3 pods the pod's nodeSelector excludes.
            "nodeAffinityPolicy Honor: excluded nodes' pods do not count",
            incoming(vec![soft(1, "zone")]).node_selector("env", "prod"),
            with_dev_node(),
            pods(vec![s1(), matching("node-c", 3)]),
            &["node-a", "node-b", "node-x", "node-y"],
            &[
                ("node-a", 25),
                ("node-b", 25),
                ("node-x", 100),
                ("node-y", 100),
            ],
        ),
        (
            // zone2 = 4: a 4.16 -> 4, x 5.55 -> 6; 100*(6+4-s)/6.
            "nodeAffinityPolicy Ignore: every node's pods count",
            incoming(vec![ignore_affinity]).node_selector("env", "prod"),
            with_dev_node(),
            pods(vec![s1(), matching("node-c", 3)]),
            &["node-a", "node-b", "node-x", "node-y"],
            &[
                ("node-a", 100),
                ("node-b", 100),
                ("node-x", 66),
                ("node-y", 66),
            ],
        ),
        (
            "no matching pods anywhere: every node scores 100",
            incoming(vec![soft(1, "zone")]),
            four_nodes(),
            vec![],
            ALL,
            &[
                ("node-a", 100),
                ("node-b", 100),
                ("node-x", 100),
                ("node-y", 100),
            ],
        ),
    ];
    for (name, pod, nodes, existing, feasible, want) in cases {
        let snap = snapshot(nodes, existing);
        let got = run_score(&plugin(), &pod.info(), &snap, feasible);
        assert_eq!(got, want_scores(want), "{name}");
    }
}

#[test]
fn system_defaults_spread_by_hostname_and_zone() {
    let zone = |name: &str, z: &str| NodeBuilder::new(name).label(LABEL_TOPOLOGY_ZONE, z);
    let snap = snapshot(
        vec![
            zone("node-a", "zone1"),
            zone("node-b", "zone1"),
            zone("node-x", "zone2"),
            NodeBuilder::new("node-z"),
        ],
        pods(vec![
            matching("node-a", 2),
            matching("node-x", 1),
            matching("node-z", 1),
        ]),
    );
    let all = ["node-a", "node-b", "node-x", "node-z"];
    // hostname maxSkew 3, weight ln(4+2) = 1.792; zone maxSkew 5 over the domains zone1,
    // zone2 and node-z's "" (as upstream), weight ln(3+2) = 1.609:
    // a (2*1.792 + 2) + (2*1.609 + 4) = 12.80 -> 13; b 2 + 7.22 = 9.22 -> 9;
    // x 3.79 + 5.61 = 9.40 -> 9; z has no zone: 3.79 -> 4. Normalized 100*(13+4-s)/13.
    let got = run_score(
        &plugin_with(PodTopologySpreadArgs::default(), Some(foo_bar())),
        &incoming(vec![]).info(),
        &snap,
        &all,
    );
    assert_eq!(
        got,
        want_scores(&[
            ("node-a", 30),
            ("node-b", 61),
            ("node-x", 61),
            ("node-z", 100)
        ])
    );

    // The defaults are soft: Filter has nothing to do.
    let pl = plugin_with(PodTopologySpreadArgs::default(), Some(foo_bar()));
    let mut state = CycleState::new();
    let (_, status) = pre_filter(&pl, &mut state, &incoming(vec![]).info(), &snap);
    assert!(status.is_skip());
}

#[test]
fn pre_score_skips_without_soft_constraints() {
    let snap = snapshot(four_nodes(), vec![]);
    let cases: Vec<(&str, PodTopologySpread, PodBuilder)> = vec![
        (
            "no constraints, no default selector",
            plugin(),
            incoming(vec![]),
        ),
        (
            "only hard constraints",
            plugin_with(PodTopologySpreadArgs::default(), Some(foo_bar())),
            incoming(vec![hard("zone")]),
        ),
        (
            "system defaults but nothing selects the pod",
            plugin_with(PodTopologySpreadArgs::default(), None),
            incoming(vec![]),
        ),
    ];
    for (name, pl, pod) in cases {
        let mut state = CycleState::new();
        let status = pre_score(&pl, &mut state, &pod.info(), snap.nodes(), &snap);
        assert!(status.is_skip(), "{name}: {status}");
    }
    let empty = Snapshot::default();
    let mut state = CycleState::new();
    let pod = incoming(vec![soft(1, "zone")]).info();
    assert!(pre_score(&plugin(), &mut state, &pod, &[], &empty).is_skip());
}

#[test]
fn args_are_validated_naming_the_field() {
    let c = |key: &str, skew: i32, when: &str| json!({"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when});
    let list =
        |cs: Vec<serde_json::Value>| json!({"defaultingType": "List", "defaultConstraints": cs});
    let p = "pluginConfig[3].args";
    let cases: Vec<(&str, Option<serde_json::Value>, &[&str])> = vec![
        ("absent args are the defaults", None, &[]),
        ("List with no constraints", Some(list(vec![])), &[]),
        (
            "valid List",
            Some(list(vec![
                c("zone", 1, DO_NOT_SCHEDULE),
                c("zone", 2, SCHEDULE_ANYWAY),
                c("example.com/rack", 1, DO_NOT_SCHEDULE),
            ])),
            &[],
        ),
        (
            "maxSkew must be positive",
            Some(list(vec![c("zone", 0, DO_NOT_SCHEDULE)])),
            &["pluginConfig[3].args.defaultConstraints[0].maxSkew"],
        ),
        (
            "topologyKey must not be empty",
            Some(list(vec![c("", 1, DO_NOT_SCHEDULE)])),
            &["pluginConfig[3].args.defaultConstraints[0].topologyKey"],
        ),
        (
            "topologyKey must be a label key",
            Some(list(vec![c("not a key", 1, DO_NOT_SCHEDULE)])),
            &["pluginConfig[3].args.defaultConstraints[0].topologyKey"],
        ),
        (
            "whenUnsatisfiable must be supported",
            Some(list(vec![c("zone", 1, "Sometimes")])),
            &["pluginConfig[3].args.defaultConstraints[0].whenUnsatisfiable"],
        ),
        (
            "whenUnsatisfiable must not be empty",
            Some(list(vec![c("zone", 1, "")])),
            &["pluginConfig[3].args.defaultConstraints[0].whenUnsatisfiable"],
        ),
        (
            "defaults must not have a selector",
            Some(list(vec![json!({
                "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                "labelSelector": {"matchLabels": {"a": "b"}}
            })])),
            &["pluginConfig[3].args.defaultConstraints[0].labelSelector"],
        ),
        (
            "no two constraints on one key and action",
            Some(list(vec![
                c("zone", 1, DO_NOT_SCHEDULE),
                c("zone", 2, DO_NOT_SCHEDULE),
            ])),
            &["pluginConfig[3].args.defaultConstraints[1]"],
        ),
        (
            "System takes no constraints",
            Some(json!({"defaultConstraints": [c("zone", 1, DO_NOT_SCHEDULE)]})),
            &["pluginConfig[3].args.defaultingType"],
        ),
        (
            "unknown defaultingType",
            Some(json!({"defaultingType": "Cluster"})),
            &["pluginConfig[3].args"],
        ),
        (
            "unknown field",
            Some(json!({"defaultConstraint": []})),
            &["pluginConfig[3].args"],
        ),
    ];
    for (name, args, want) in cases {
        let got = match build(args.as_ref(), &p.into(), &Handle::default()) {
            Ok(plugin) => {
                assert_eq!(plugin.name(), NAME);
                Vec::new()
            }
            Err(errs) => errs.0.into_iter().map(|e| e.path).collect(),
        };
        assert_eq!(got, want, "{name}");
    }
}

/// What `tether explain` tells of a node the spread turns down: the domain, the skew the pod
/// would make there, and the label a node without the topology key lacks.
#[test]
fn the_remedy_names_the_skew_the_pod_would_make() {
    let pl = plugin();
    let mut nodes = four_nodes();
    nodes.push(NodeBuilder::new("no-zone"));
    let snap = snapshot(
        nodes,
        pods(vec![matching("node-a", 2), matching("node-x", 0)]),
    );
    let pod = incoming(vec![hard("zone")]).info();
    let mut state = CycleState::new();
    let (_, status) = pre_filter(&pl, &mut state, &pod, &snap);
    assert!(status.is_success(), "{status}");
    let remedy = |name: &str| {
        let node = snap.get(name).expect("a node");
        FilterPlugin::remedy(&pl, &state, &pod, node)
    };
    assert_eq!(
        remedy("node-a").as_deref(),
        Some(
            "zone=zone1 would hold 3 matching pods against 0 in the emptiest domain, a skew of 3 over maxSkew 1: \
             schedule the pod once its workload has fewer pods there, or raise maxSkew, or spread with whenUnsatisfiable: ScheduleAnyway"
        )
    );
    assert_eq!(remedy("node-x"), None, "zone2 keeps the skew at 1");
    assert_eq!(
        remedy("no-zone").as_deref(),
        Some(
            "label no-zone with zone: the pod spreads over zone, and only nodes that have it count"
        )
    );
}

/// A constraint with an empty `labelSelector: {}`: until 1.38 kube-scheduler counts no existing
/// pod for it (countPodsMatchSelector's early return), so every node is as good as any; from
/// 1.38 it counts every pod of the namespace, so the pod spreads away from the full zone. The
/// incoming pod's own match counts in both.
#[test]
fn an_empty_selector_counts_every_pod_of_the_namespace_from_1_38() {
    let mut everything = spread(1, "zone", DO_NOT_SCHEDULE, &[]);
    everything.label_selector = Some(LabelSelector::default());
    let pod = PodInfo::new(Arc::new(incoming(vec![everything]).build()));
    let others = (0..2)
        .map(|i| {
            PodBuilder::new(&format!("other-{i}"))
                .label("app", "other")
                .node_name("node-a")
                .build()
        })
        .collect();
    let snap = snapshot(four_nodes(), others);
    let as_release = |minor| {
        let mut pl = plugin();
        pl.release = crate::k8s::release::Release::of_minor(minor);
        run_filter(&pl, &pod, &snap)
    };
    let everywhere = [
        ("node-a", OK),
        ("node-b", OK),
        ("node-x", OK),
        ("node-y", OK),
    ];
    assert_eq!(as_release(37), want_codes(&everywhere));
    assert_eq!(as_release(36), want_codes(&everywhere));
    assert_eq!(
        as_release(38),
        want_codes(&[
            ("node-a", UNSCHED),
            ("node-b", UNSCHED),
            ("node-x", OK),
            ("node-y", OK),
        ])
    );
}
