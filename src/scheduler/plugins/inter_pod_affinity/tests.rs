use super::*;
use crate::scheduler::framework::Code;
use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
use k8s_openapi::api::core::v1::{
    Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

const ZONE: &str = "topology.kubernetes.io/zone";
const HOST: &str = "kubernetes.io/hostname";

fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
    LabelSelector {
        match_labels: Some(
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        ),
        match_expressions: None,
    }
}

/// A term selecting pods labelled with all `pairs`, over `topology_key`.
fn term(topology_key: &str, pairs: &[(&str, &str)]) -> PodAffinityTerm {
    PodAffinityTerm {
        label_selector: Some(selector(pairs)),
        topology_key: topology_key.into(),
        ..Default::default()
    }
}

fn in_namespaces(mut t: PodAffinityTerm, namespaces: &[&str]) -> PodAffinityTerm {
    t.namespaces = Some(namespaces.iter().map(|n| n.to_string()).collect());
    t
}

fn ns_selector(mut t: PodAffinityTerm, pairs: &[(&str, &str)]) -> PodAffinityTerm {
    t.namespace_selector = Some(if pairs.is_empty() {
        LabelSelector::default()
    } else {
        selector(pairs)
    });
    t
}

/// Builds a pod's inter-pod affinity section term by term.
#[derive(Default)]
struct Terms(Affinity);

impl Terms {
    fn pa(&mut self) -> &mut PodAffinity {
        self.0.pod_affinity.get_or_insert_with(Default::default)
    }
    fn paa(&mut self) -> &mut PodAntiAffinity {
        self.0
            .pod_anti_affinity
            .get_or_insert_with(Default::default)
    }
    fn required(mut self, t: PodAffinityTerm) -> Self {
        self.pa()
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(t);
        self
    }
    fn required_anti(mut self, t: PodAffinityTerm) -> Self {
        self.paa()
            .required_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(t);
        self
    }
    fn preferred(mut self, weight: i32, t: PodAffinityTerm) -> Self {
        self.pa()
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                pod_affinity_term: t,
                weight,
            });
        self
    }
    fn preferred_anti(mut self, weight: i32, t: PodAffinityTerm) -> Self {
        self.paa()
            .preferred_during_scheduling_ignored_during_execution
            .get_or_insert_with(Vec::new)
            .push(WeightedPodAffinityTerm {
                pod_affinity_term: t,
                weight,
            });
        self
    }
    fn build(self) -> Affinity {
        self.0
    }
}

fn terms() -> Terms {
    Terms::default()
}

/// An existing pod on `node`.
fn on(node: &str, name: &str) -> PodBuilder {
    PodBuilder::new(name).node_name(node)
}

/// n1 and n2 in zone z1, n3 in z2, n4 without a zone label.
fn zones() -> Vec<NodeBuilder> {
    vec![
        NodeBuilder::new("n1").label(ZONE, "z1"),
        NodeBuilder::new("n2").label(ZONE, "z1"),
        NodeBuilder::new("n3").label(ZONE, "z2"),
        NodeBuilder::new("n4"),
    ]
}

/// The snapshot every row runs against: `default` is labelled team=a, `other` team=b.
fn cluster(nodes: Vec<NodeBuilder>, existing: Vec<PodBuilder>) -> Snapshot {
    let mut snap = snapshot(nodes, existing.into_iter().map(PodBuilder::build).collect());
    let ns = |team: &str| [("team".to_string(), team.to_string())].into();
    snap.namespace_labels = Arc::new(
        [
            ("default".to_string(), ns("a")),
            ("other".to_string(), ns("b")),
        ]
        .into(),
    );
    snap
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Want {
    Pass,
    Affinity,
    AntiAffinity,
    Existing,
    ParseError,
}
use Want::*;

fn classify(s: &Status) -> Want {
    match (s.code, s.message().as_str()) {
        (Code::Success, _) => Pass,
        (Code::UnschedulableAndUnresolvable, ERR_REASON_AFFINITY_RULES_NOT_MATCH) => Affinity,
        (Code::Unschedulable, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH) => AntiAffinity,
        (Code::Unschedulable, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH) => Existing,
        (Code::UnschedulableAndUnresolvable, m) if m.starts_with("parsing pod: ") => ParseError,
        _ => panic!("unexpected status {s}"),
    }
}

/// PreFilter then Filter on every node, as the runtime does (a Skip skips Filter, a
/// rejection in PreFilter rejects every node).
fn run_filter(plugin: &dyn Plugin, pod: &PodInfo, snap: &Snapshot) -> Vec<Want> {
    let mut state = CycleState::new();
    let pre_filter = plugin.pre_filter().expect("a PreFilter plugin");
    let filter = plugin.filter().expect("a Filter plugin");
    let (result, status) = pre_filter.pre_filter(&mut state, pod, snap);
    assert_eq!(result, PreFilterResult::all_nodes());
    snap.nodes()
        .iter()
        .map(|node| match status.code {
            Code::Skip => Pass,
            Code::Success => classify(&filter.filter(&state, pod, node)),
            _ => classify(&status),
        })
        .collect()
}

#[test]
fn filter() {
    let db = |node: &str, name: &str| on(node, name).label("app", "db");
    let web = PodBuilder::new("p").label("app", "web");
    // (name, pod, existing pods, nodes, want per node)
    type Row = (
        &'static str,
        PodBuilder,
        Vec<PodBuilder>,
        Vec<NodeBuilder>,
        Vec<Want>,
    );
    let cases: Vec<Row> = vec![
        (
            "no terms anywhere: every node passes",
            PodBuilder::new("p"),
            vec![db("n1", "d1")],
            zones(),
            vec![Pass, Pass, Pass, Pass],
        ),
        (
            "required affinity: nodes in the zone of a matching pod pass",
            PodBuilder::new("p").affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
            vec![db("n1", "d1")],
            zones(),
            vec![Pass, Pass, Affinity, Affinity],
        ),
        (
            "required affinity per hostname: only the matching pod's node passes",
            PodBuilder::new("p").affinity(terms().required(term(HOST, &[("app", "db")])).build()),
            vec![db("n1", "d1")],
            zones(),
            vec![Pass, Affinity, Affinity, Affinity],
        ),
        (
            "required affinity: a node without the topology key fails, its own pods regardless",
            PodBuilder::new("p").affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
            vec![db("n4", "d4"), db("n3", "d3")],
            zones(),
            vec![Affinity, Affinity, Pass, Affinity],
        ),
        (
            "required affinity: no pod matches and the pod does not match itself",
            PodBuilder::new("p").affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
            vec![on("n1", "w1").label("app", "web")],
            zones(),
            vec![Affinity, Affinity, Affinity, Affinity],
        ),
        (
            "first pod of a group: nothing matches but the pod matches its own terms",
            web.clone()
                .affinity(terms().required(term(ZONE, &[("app", "web")])).build()),
            vec![db("n1", "d1")],
            zones(),
            vec![Pass, Pass, Pass, Affinity],
        ),
        (
            "first-pod rule holds only while no pod matches anywhere",
            web.clone()
                .affinity(terms().required(term(ZONE, &[("app", "web")])).build()),
            vec![on("n3", "w3").label("app", "web")],
            zones(),
            vec![Affinity, Affinity, Pass, Affinity],
        ),
        (
            "several affinity terms must all match one and the same pod",
            PodBuilder::new("p").affinity(
                terms()
                    .required(term(ZONE, &[("app", "db")]))
                    .required(term(HOST, &[("tier", "cache")]))
                    .build(),
            ),
            vec![
                db("n1", "both").label("tier", "cache"),
                db("n2", "db-only"),
                on("n3", "cache-only").label("tier", "cache"),
            ],
            zones(),
            vec![Pass, Affinity, Affinity, Affinity],
        ),
        (
            "affinity looks only in the pod's own namespace by default",
            PodBuilder::new("p").affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
            vec![db("n1", "d1").namespace("other")],
            zones(),
            vec![Affinity, Affinity, Affinity, Affinity],
        ),
        (
            "affinity with namespaces looks in those namespaces",
            PodBuilder::new("p").affinity(
                terms()
                    .required(in_namespaces(term(ZONE, &[("app", "db")]), &["other"]))
                    .build(),
            ),
            vec![db("n1", "d1").namespace("other")],
            zones(),
            vec![Pass, Pass, Affinity, Affinity],
        ),
        (
            "affinity with a namespaceSelector looks in the namespaces it selects",
            PodBuilder::new("p").affinity(
                terms()
                    .required(ns_selector(term(ZONE, &[("app", "db")]), &[("team", "b")]))
                    .build(),
            ),
            vec![db("n1", "d1").namespace("other"), db("n3", "d3")],
            zones(),
            vec![Pass, Pass, Affinity, Affinity],
        ),
        (
            "an empty namespaceSelector selects every namespace",
            PodBuilder::new("p").affinity(
                terms()
                    .required(ns_selector(term(ZONE, &[("app", "db")]), &[]))
                    .build(),
            ),
            vec![db("n3", "d3").namespace("other")],
            zones(),
            vec![Affinity, Affinity, Pass, Affinity],
        ),
        (
            "required anti-affinity: the zone of a matching pod is out, a node without the key is not",
            PodBuilder::new("p")
                .affinity(terms().required_anti(term(ZONE, &[("app", "db")])).build()),
            vec![db("n1", "d1")],
            zones(),
            vec![AntiAffinity, AntiAffinity, Pass, Pass],
        ),
        (
            "required anti-affinity with a namespaceSelector",
            PodBuilder::new("p").affinity(
                terms()
                    .required_anti(ns_selector(term(ZONE, &[("app", "db")]), &[("team", "b")]))
                    .build(),
            ),
            vec![db("n1", "d1"), db("n3", "d3").namespace("other")],
            zones(),
            vec![Pass, Pass, AntiAffinity, Pass],
        ),
        (
            "existing pod's anti-affinity keeps a matching pod out of its zone",
            web.clone(),
            vec![
                on("n1", "e1")
                    .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
            ],
            zones(),
            vec![Existing, Existing, Pass, Pass],
        ),
        (
            "existing pod's anti-affinity that does not select the pod",
            PodBuilder::new("p").label("app", "api"),
            vec![
                on("n1", "e1")
                    .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
            ],
            zones(),
            vec![Pass, Pass, Pass, Pass],
        ),
        (
            "existing pod's anti-affinity looks only in its own namespace by default",
            web.clone(),
            vec![
                on("n1", "e1")
                    .namespace("other")
                    .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
            ],
            zones(),
            vec![Pass, Pass, Pass, Pass],
        ),
        (
            "existing pod's namespaceSelector is matched against the pod's namespace labels",
            web.clone(),
            vec![
                on("n1", "e1").namespace("other").affinity(
                    terms()
                        .required_anti(ns_selector(term(ZONE, &[("app", "web")]), &[("team", "a")]))
                        .build(),
                ),
            ],
            zones(),
            vec![Existing, Existing, Pass, Pass],
        ),
        (
            "affinity and anti-affinity together",
            PodBuilder::new("p").affinity(
                terms()
                    .required(term(ZONE, &[("app", "db")]))
                    .required_anti(term(HOST, &[("app", "db")]))
                    .build(),
            ),
            vec![db("n1", "d1")],
            zones(),
            vec![AntiAffinity, Pass, Affinity, Affinity],
        ),
        (
            "affinity is checked first: a node failing several rules reports affinity",
            web.clone().affinity(
                terms()
                    .required(term(ZONE, &[("app", "db")]))
                    .required_anti(term(ZONE, &[("app", "cache")]))
                    .build(),
            ),
            vec![
                db("n1", "d1"),
                on("n3", "c3")
                    .label("app", "cache")
                    .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
            ],
            zones(),
            vec![Pass, Pass, Affinity, Affinity],
        ),
        (
            "a term that cannot be parsed makes the pod unschedulable everywhere",
            PodBuilder::new("p").affinity(
                terms()
                    .required(PodAffinityTerm {
                        label_selector: Some(LabelSelector {
                            match_expressions: Some(vec![LabelSelectorRequirement {
                                key: "app".into(),
                                operator: "In".into(),
                                values: None,
                            }]),
                            match_labels: None,
                        }),
                        topology_key: ZONE.into(),
                        ..Default::default()
                    })
                    .build(),
            ),
            vec![],
            zones(),
            vec![ParseError, ParseError, ParseError, ParseError],
        ),
    ];
    let plugin = InterPodAffinity::default();
    for (name, pod, existing, nodes, want) in cases {
        let snap = cluster(nodes, existing);
        assert_eq!(run_filter(&plugin, &pod.info(), &snap), want, "{name}");
    }
}

#[test]
fn pre_filter_skips_when_no_required_term_applies() {
    let anti_web =
        || on("n1", "e1").affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build());
    let cases: Vec<(&str, PodBuilder, Vec<PodBuilder>, Code)> = vec![
        (
            "no terms, no pods with anti-affinity",
            PodBuilder::new("p"),
            vec![],
            Code::Skip,
        ),
        (
            "preferred terms only",
            PodBuilder::new("p")
                .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
            vec![],
            Code::Skip,
        ),
        (
            "existing anti-affinity that does not select the pod",
            PodBuilder::new("p").label("app", "api"),
            vec![anti_web()],
            Code::Skip,
        ),
        (
            "existing anti-affinity that selects the pod",
            PodBuilder::new("p").label("app", "web"),
            vec![anti_web()],
            Code::Success,
        ),
        (
            "a required anti-affinity term of the pod",
            PodBuilder::new("p")
                .affinity(terms().required_anti(term(ZONE, &[("app", "db")])).build()),
            vec![],
            Code::Success,
        ),
    ];
    for (name, pod, existing, want) in cases {
        let snap = cluster(zones(), existing);
        let mut state = CycleState::new();
        let (_, status) = PreFilterPlugin::pre_filter(
            &InterPodAffinity::default(),
            &mut state,
            &pod.info(),
            &snap,
        );
        assert_eq!(status.code, want, "{name}");
    }
}

/// PreScore, Score on every node, NormalizeScore: `None` when PreScore skips, else the raw
/// and the normalized scores in node order.
fn run_score(plugin: &dyn Plugin, pod: &PodInfo, snap: &Snapshot) -> Option<(Vec<i64>, Vec<i64>)> {
    let mut state = CycleState::new();
    let pre_score = plugin.pre_score().expect("a PreScore plugin");
    let scorer = plugin.score().expect("a Score plugin");
    let status = pre_score.pre_score(&mut state, pod, snap.nodes(), snap);
    if status.is_skip() {
        return None;
    }
    assert!(status.is_success(), "{status}");
    let mut scores: Vec<NodeScore> = snap
        .nodes()
        .iter()
        .map(|n| NodeScore {
            name: n.name.clone(),
            score: scorer.score(&state, pod, n).expect("score"),
        })
        .collect();
    let raw = scores.iter().map(|s| s.score).collect();
    assert!(
        scorer
            .normalize_scores(&state, pod, &mut scores)
            .is_success()
    );
    Some((raw, scores.iter().map(|s| s.score).collect()))
}

#[test]
fn score() {
    let args = |hard: i32, ignore: bool| InterPodAffinityArgs {
        hard_pod_affinity_weight: hard,
        ignore_preferred_terms_of_existing_pods: ignore,
    };
    let db = |node: &str, name: &str| on(node, name).label("app", "db");
    let web = PodBuilder::new("p").label("app", "web");
    // An existing pod requiring (hard) affinity to web pods in its zone, on n3.
    let requires_web =
        || on("n3", "r3").affinity(terms().required(term(ZONE, &[("app", "web")])).build());
    // An existing pod preferring (weight 5) web pods in its zone, on n1.
    let prefers_web =
        || on("n1", "p1").affinity(terms().preferred(5, term(ZONE, &[("app", "web")])).build());
    type Row = (
        &'static str,
        InterPodAffinityArgs,
        PodBuilder,
        Vec<PodBuilder>,
        Vec<NodeBuilder>,
        Option<(Vec<i64>, Vec<i64>)>,
    );
    let cases: Vec<Row> = vec![
        (
            // z1 += 5; min 0, max 5.
            "preferred affinity adds its weight to the matching pod's zone",
            args(1, false),
            PodBuilder::new("p")
                .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
            vec![db("n1", "d1")],
            zones(),
            Some((vec![5, 5, 0, 0], vec![100, 100, 0, 0])),
        ),
        (
            // z1 -= 4; min -4, max 0.
            "preferred anti-affinity subtracts its weight",
            args(1, false),
            PodBuilder::new("p").affinity(
                terms()
                    .preferred_anti(4, term(ZONE, &[("app", "db")]))
                    .build(),
            ),
            vec![db("n1", "d1")],
            zones(),
            Some((vec![-4, -4, 0, 0], vec![0, 0, 100, 100])),
        ),
        (
            // host n1 += 8, host n3 += 8, z1 -= 3; min -3, max 8, diff 11:
            // n1 100*8/11 = 72.7, n4 100*3/11 = 27.3, rounded down.
            "affinity and anti-affinity over different topology keys add up per node",
            args(1, false),
            PodBuilder::new("p").affinity(
                terms()
                    .preferred(8, term(HOST, &[("app", "db")]))
                    .preferred_anti(3, term(ZONE, &[("app", "web")]))
                    .build(),
            ),
            vec![
                db("n1", "d1"),
                db("n3", "d3"),
                on("n2", "w2").label("app", "web"),
            ],
            zones(),
            Some((vec![5, -3, 8, 0], vec![72, 0, 100, 27])),
        ),
        (
            // z2 += 5 from d3; d4's node has no zone so it counts nowhere.
            "a pod on a node without the topology key counts for no domain",
            args(1, false),
            PodBuilder::new("p")
                .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
            vec![db("n4", "d4"), db("n3", "d3")],
            zones(),
            Some((vec![0, 0, 5, 0], vec![0, 0, 100, 0])),
        ),
        (
            // z2 += 7, z1 -= 2; min -2, max 7, diff 9: n4 100*2/9 = 22.2.
            "existing pods' preferred terms toward the incoming pod",
            args(1, false),
            web.clone(),
            vec![
                on("n3", "e3")
                    .affinity(terms().preferred(7, term(ZONE, &[("app", "web")])).build()),
                on("n1", "e1").affinity(
                    terms()
                        .preferred_anti(2, term(ZONE, &[("app", "web")]))
                        .build(),
                ),
            ],
            zones(),
            Some((vec![-2, -2, 7, 0], vec![0, 0, 100, 22])),
        ),
        (
            // z1 += 5 (preferred), z2 += 1 (required, hardPodAffinityWeight 1).
            "existing pods' required affinity counts hardPodAffinityWeight",
            args(1, false),
            web.clone(),
            vec![requires_web(), prefers_web()],
            zones(),
            Some((vec![5, 5, 1, 0], vec![100, 100, 20, 0])),
        ),
        (
            // z1 += 5, z2 += 10.
            "a higher hardPodAffinityWeight",
            args(10, false),
            web.clone(),
            vec![requires_web(), prefers_web()],
            zones(),
            Some((vec![5, 5, 10, 0], vec![50, 50, 100, 0])),
        ),
        (
            "hardPodAffinityWeight 0 ignores existing pods' required affinity",
            args(0, false),
            web.clone(),
            vec![requires_web()],
            zones(),
            None,
        ),
        (
            "ignorePreferredTermsOfExistingPods skips a pod without preferred terms",
            args(1, true),
            web.clone(),
            vec![requires_web(), prefers_web()],
            zones(),
            None,
        ),
        (
            // As kube-scheduler: the option only skips pods without preferred terms.
            // z1 += 5 (p1's preference), z2 += 1 (the pod's preference for d3).
            "ignorePreferredTermsOfExistingPods with a pod that has preferred terms",
            args(1, true),
            web.clone()
                .affinity(terms().preferred(1, term(ZONE, &[("app", "db")])).build()),
            vec![prefers_web(), db("n3", "d3")],
            zones(),
            Some((vec![5, 5, 1, 0], vec![100, 100, 20, 0])),
        ),
        (
            "nothing matches: PreScore skips",
            args(1, false),
            PodBuilder::new("p")
                .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
            vec![on("n1", "w1").label("app", "web")],
            zones(),
            None,
        ),
        (
            // Only d3 in `other` (team=b) is selected.
            "preferred term with a namespaceSelector",
            args(1, false),
            PodBuilder::new("p").affinity(
                terms()
                    .preferred(
                        5,
                        ns_selector(term(ZONE, &[("app", "db")]), &[("team", "b")]),
                    )
                    .build(),
            ),
            vec![db("n1", "d1"), db("n3", "d3").namespace("other")],
            zones(),
            Some((vec![0, 0, 5, 0], vec![0, 0, 100, 0])),
        ),
        (
            // e3's term selects `default` (team=a) by label; e1's term, without namespaces,
            // looks only in its own namespace `other`.
            "existing pods' terms match the incoming pod through its namespace",
            args(1, false),
            web.clone(),
            vec![
                on("n3", "e3").namespace("other").affinity(
                    terms()
                        .preferred(
                            3,
                            ns_selector(term(ZONE, &[("app", "web")]), &[("team", "a")]),
                        )
                        .build(),
                ),
                on("n1", "e1")
                    .namespace("other")
                    .affinity(terms().preferred(9, term(ZONE, &[("app", "web")])).build()),
            ],
            zones(),
            Some((vec![0, 0, 3, 0], vec![0, 0, 100, 0])),
        ),
        (
            "equal scores normalize to 0",
            args(1, false),
            PodBuilder::new("p")
                .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
            vec![db("n1", "d1")],
            vec![
                NodeBuilder::new("n1").label(ZONE, "z1"),
                NodeBuilder::new("n2").label(ZONE, "z1"),
            ],
            Some((vec![5, 5], vec![0, 0])),
        ),
    ];
    for (name, args, pod, existing, nodes, want) in cases {
        let snap = cluster(nodes, existing);
        let plugin = InterPodAffinity::new(args);
        assert_eq!(run_score(&plugin, &pod.info(), &snap), want, "{name}");
    }
}

#[test]
fn args_default_as_kube_scheduler() {
    let args: InterPodAffinityArgs =
        decode_args(None, &"pluginConfig[0].args".into()).expect("defaults");
    assert_eq!(args, InterPodAffinityArgs::default());
    assert_eq!(args.hard_pod_affinity_weight, 1);
    assert!(!args.ignore_preferred_terms_of_existing_pods);
    let partial: InterPodAffinityArgs = decode_args(
        Some(&serde_json::json!({"ignorePreferredTermsOfExistingPods": true})),
        &"a".into(),
    )
    .expect("valid");
    assert_eq!(partial.hard_pod_affinity_weight, 1);
    assert!(partial.ignore_preferred_terms_of_existing_pods);
}

#[test]
fn build_validates_args() {
    let path = "pluginConfig[1].args";
    let cases: Vec<(&str, serde_json::Value, Option<&str>)> = vec![
        ("empty args", serde_json::json!({}), None),
        (
            "lowest weight",
            serde_json::json!({"hardPodAffinityWeight": 0}),
            None,
        ),
        (
            "highest weight and ignore",
            serde_json::json!({"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": true}),
            None,
        ),
        (
            "weight above 100",
            serde_json::json!({"hardPodAffinityWeight": 101}),
            Some("pluginConfig[1].args.hardPodAffinityWeight"),
        ),
        (
            "negative weight",
            serde_json::json!({"hardPodAffinityWeight": -1}),
            Some("pluginConfig[1].args.hardPodAffinityWeight"),
        ),
        (
            "unknown field",
            serde_json::json!({"hardPodAffinityWeights": 1}),
            Some("pluginConfig[1].args"),
        ),
        (
            "wrong type",
            serde_json::json!({"hardPodAffinityWeight": "1"}),
            Some("pluginConfig[1].args"),
        ),
    ];
    for (name, json, want) in cases {
        match (build(Some(&json), &path.into(), &Handle::default()), want) {
            (Ok(plugin), None) => assert_eq!(plugin.name(), NAME, "{name}"),
            (Err(errs), Some(want)) => {
                let paths: Vec<&str> = errs.0.iter().map(|e| e.path.as_str()).collect();
                assert_eq!(paths, vec![want], "{name}: {errs}");
            }
            (Ok(_), Some(want)) => panic!("{name}: want an error at {want}"),
            (Err(errs), None) => panic!("{name}: unexpected error {errs}"),
        }
    }
}
