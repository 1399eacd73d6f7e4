//! Opportunistic batching against the search it saves: a batched pod goes to a node a full
//! search scores best, the ranking ends where upstream's ends, and signatures tell apart what
//! the plugins read.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use super::*;
use crate::api::{PluginConfig, SchedulingProfileSpec};
use crate::k8s::pod::Pod;
use crate::scheduler::algorithm::{Choice, ScheduleResult, prioritize, schedule_pod_batched};
use crate::scheduler::framework::NoNominations;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::profile::{compile, default_profile};
use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

/// A profile upstream batches with: the defaults, PodTopologySpread without default
/// constraints, every node scored.
fn batchable(scheduler: &str) -> Arc<CompiledProfile> {
    let spec = SchedulingProfileSpec {
        scheduler_name: scheduler.into(),
        percentage_of_nodes_to_score: 100,
        pod_initial_backoff_seconds: 1,
        pod_max_backoff_seconds: 10,
        plugins: None,
        plugin_config: vec![PluginConfig {
            name: "PodTopologySpread".into(),
            args: Some(serde_json::json!({"defaultingType": "List"})),
        }],
        namespace_selector: None,
    };
    Arc::new(
        compile(&spec, "test", &Handle::default())
            .expect("compiles")
            .profile,
    )
}

/// Nodes of different sizes, some already loaded, so that scores differ from node to node.
fn nodes() -> Vec<NodeBuilder> {
    (0..12)
        .map(|i| {
            NodeBuilder::new(&format!("n{i:02}"))
                .allocatable("cpu", &format!("{}", 4 + (i * 5) % 13))
                .allocatable("memory", &format!("{}Gi", 8 + (i * 7) % 23))
                .allocatable("pods", "110")
        })
        .collect()
}

fn load() -> Vec<Pod> {
    (0..12)
        .filter(|i| i % 3 == 0)
        .map(|i| {
            PodBuilder::new(&format!("load{i}"))
                .req_cpu(&format!("{}m", 500 + i * 150))
                .req_mem("1Gi")
                .node_name(&format!("n{i:02}"))
                .build()
        })
        .collect()
}

fn web(i: usize) -> Pod {
    PodBuilder::new(&format!("web{i}"))
        .label("app", "web")
        .req_cpu("700m")
        .req_mem("1536Mi")
        .scheduler_name("s")
        .build()
}

fn bound(mut pod: Pod, node: &str) -> Pod {
    pod.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
    pod
}

/// The best total a full search gives on `snap` (every feasible node scored), and the nodes
/// with it.
fn best_of_full_search(
    profile: &CompiledProfile,
    pod: &PodInfo,
    snap: &Snapshot,
) -> (i64, Vec<String>) {
    let mut state = CycleState::new();
    let mut diagnosis = Default::default();
    assert!(
        profile
            .run_pre_filter(&mut state, pod, snap, &mut diagnosis)
            .is_ok()
    );
    let feasible: Vec<Arc<NodeInfo>> = snap
        .nodes()
        .iter()
        .filter(|n| profile.run_filter(&state, pod, n).is_success())
        .cloned()
        .collect();
    let scores = prioritize(profile, &mut state, pod, &feasible, snap, None).expect("scores");
    let best = scores.iter().map(|s| s.score).max().unwrap_or(0);
    let names = scores
        .iter()
        .filter(|s| s.score == best)
        .map(|s| s.name.clone())
        .collect();
    (best, names)
}

/// One batched cycle on `snap` after `kept`: where the pod went, how, and the ranking kept.
fn cycle(
    profile: &Arc<CompiledProfile>,
    kept: Option<Batch>,
    pod: &PodInfo,
    snap: &Snapshot,
) -> (Option<(String, Choice)>, BatchOutcome, Option<Batch>) {
    // The cycle right after the one that kept the ranking.
    let number = kept.as_ref().map_or(1, |k| k.last_cycle + 1);
    let mut batch = BatchCycle::new(kept, number, profile, pod);
    let mut state = CycleState::new();
    let result = schedule_pod_batched(
        profile,
        &mut state,
        pod,
        snap,
        &AtomicUsize::new(0),
        &NoNominations,
        &mut batch,
    );
    let placed = match result {
        ScheduleResult::Scheduled { node, choice, .. } => Some((node, choice)),
        ScheduleResult::Unschedulable(_) => None,
        ScheduleResult::Error(status) => panic!("a batched cycle failed: {status:?}"),
    };
    let outcome = batch.outcome;
    (placed, outcome, batch.into_kept())
}

/// Schedules 60 pods made by `make` one after another with batching, each checked against a
/// full search of the same cluster; how many took a hint.
fn batch_against_full_search(profile: &Arc<CompiledProfile>, make: impl Fn(usize) -> Pod) -> usize {
    let mut placed = load();
    let mut kept = None;
    let mut batched = 0;
    for i in 0..60 {
        let pod = PodInfo::new(Arc::new(make(i)));
        let snap = snapshot(nodes(), placed.clone());
        let (best, best_nodes) = best_of_full_search(profile, &pod, &snap);
        let (result, outcome, next) = cycle(profile, kept, &pod, &snap);
        kept = next;
        let Some((node, choice)) = result else {
            assert!(best_nodes.is_empty(), "pod {i} fits {best_nodes:?}");
            break;
        };
        assert!(
            best_nodes.contains(&node),
            "pod {i} went to {node} ({choice:?}, {outcome:?}); a full search scores {best_nodes:?} best at {best}"
        );
        if let Choice::Batched { score } = choice {
            assert_eq!(
                score, best,
                "pod {i}: the ranking's total is the full search's"
            );
            assert_eq!(outcome.attempt, Some("hint_used"));
            batched += 1;
        }
        placed.push(bound(make(i), &node));
    }
    batched
}

#[test]
fn a_batched_pod_goes_where_a_full_search_scores_best() {
    let profile = batchable("s");
    let batched = batch_against_full_search(&profile, web);
    // Each batch ends only when its node fills up or its ranking runs out.
    assert!(batched >= 40, "only {batched} of 60 pods batched");
}

#[test]
fn normalized_scores_are_normalized_again_with_the_rescored_node() {
    // Preferred node affinity and tolerations: NodeAffinity and TaintToleration normalize
    // over the nodes scored, so the rescored node changes the others' totals.
    let profile = batchable("s");
    let preferring = |i: usize| {
        let mut pod = web(i);
        let affinity = serde_json::from_value(serde_json::json!({"nodeAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 30, "preference": {"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In",
                     "values": ["n01", "n04", "n07", "n10"]}]}},
                {"weight": 5, "preference": {"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In",
                     "values": ["n02", "n04"]}]}}]}}))
        .expect("an affinity");
        pod.spec.get_or_insert_with(Default::default).affinity = Some(affinity);
        pod
    };
    let batched = batch_against_full_search(&profile, preferring);
    assert!(batched >= 30, "only {batched} of 60 pods batched");
}

#[test]
fn a_ranking_serves_only_the_next_pod_of_its_signature_and_profile() {
    let profile = batchable("s");
    let snap = snapshot(nodes(), load());
    let first = PodInfo::new(Arc::new(web(0)));
    let (_, outcome, kept) = cycle(&profile, None, &first, &snap);
    assert_eq!(outcome.attempt, Some("no_hint"), "nothing kept yet");
    assert_eq!(outcome.stored, Some("stored"));
    assert!(
        kept.is_some(),
        "a scored pod with a signature keeps its ranking"
    );

    // Asking for more: another signature.
    let bigger = PodInfo::new(Arc::new(
        PodBuilder::new("big")
            .label("app", "web")
            .req_cpu("900m")
            .req_mem("1536Mi")
            .scheduler_name("s")
            .build(),
    ));
    let (_, outcome, after) = cycle(&profile, kept, &bigger, &snap);
    assert_eq!(outcome.flushed, Some("pod_incompatible"));
    assert!(after.is_some(), "the other pod keeps its own ranking");

    // A profile changed since (compiled again) is another profile.
    let (_, _, kept) = cycle(&profile, None, &first, &snap);
    let (_, outcome, _) = cycle(&batchable("s"), kept, &first, &snap);
    assert_eq!(outcome.attempt, Some("no_hint"));

    // Another pod was tried in between (any profile's, or a group): the cycles do not follow.
    let (_, _, kept) = cycle(&profile, None, &first, &snap);
    let kept = kept.expect("kept");
    let skipped = kept.last_cycle + 2;
    let mut batch = BatchCycle::new(Some(kept), skipped, &profile, &first);
    let result = schedule_pod_batched(
        &profile,
        &mut CycleState::new(),
        &first,
        &snap,
        &AtomicUsize::new(0),
        &NoNominations,
        &mut batch,
    );
    assert!(matches!(
        result,
        ScheduleResult::Scheduled {
            choice: Choice::Scored { .. },
            ..
        }
    ));
    assert_eq!(batch.outcome.flushed, Some("pod_skipped"));

    // A nominated pod goes its own way.
    let (_, _, kept) = cycle(&profile, None, &first, &snap);
    let mut nominated = web(1);
    nominated.status = Some(crate::k8s::pod::PodStatus {
        nominated_node_name: Some("n05".into()),
        ..Default::default()
    });
    let nominated = PodInfo::new(Arc::new(nominated));
    let (result, outcome, kept) = cycle(&profile, kept, &nominated, &snap);
    assert_eq!(outcome.flushed, Some("pod_nominated"));
    assert_eq!(result, Some(("n05".to_string(), Choice::Nominated)));
    assert!(kept.is_none(), "a pod placed without scoring keeps nothing");
    assert_eq!(outcome.stored, Some("empty_list"));

    // A pod no signature can say keeps nothing.
    let (_, _, kept) = cycle(&profile, None, &first, &snap);
    let spread = PodInfo::new(Arc::new(
        PodBuilder::new("spread")
            .req_cpu("700m")
            .scheduler_name("s")
            .spread(
                serde_json::from_value(serde_json::json!({"maxSkew": 1,
                    "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "DoNotSchedule"}))
                .expect("a constraint"),
            )
            .build(),
    ));
    let (result, outcome, kept) = cycle(&profile, kept, &spread, &snap);
    assert!(result.is_some());
    assert_eq!(
        (outcome.flushed, outcome.stored),
        (Some("pod_incompatible"), Some("pod_not_batchable"))
    );
    assert!(kept.is_none());
}

#[test]
fn a_hint_the_pod_no_longer_fits_is_searched_past() {
    let profile = batchable("s");
    let mut placed = load();
    let first = PodInfo::new(Arc::new(web(0)));
    let (result, _, kept) = cycle(&profile, None, &first, &snapshot(nodes(), placed.clone()));
    let (first_node, _) = result.expect("placed");
    placed.push(bound(web(0), &first_node));
    // Whatever node the ranking holds next, another scheduler's pod fills it and the first
    // pod's node before the second pod's cycle.
    let mut kept = kept.expect("kept");
    let next = kept.ranked.last().expect("a node left").name.clone();
    for node in [&next, &first_node] {
        placed.push(bound(
            PodBuilder::new(&format!("filler-{node}"))
                .req_cpu("64")
                .build(),
            node,
        ));
    }
    kept.created = std::time::Instant::now();
    let snap = snapshot(nodes(), placed);
    let second = PodInfo::new(Arc::new(web(1)));
    let (best, best_nodes) = best_of_full_search(&profile, &second, &snap);
    let (result, outcome, kept) = cycle(&profile, Some(kept), &second, &snap);
    let (node, choice) = result.expect("placed");
    assert_eq!(outcome.attempt, Some("hint_not_used"), "{choice:?}");
    assert!(
        best_nodes.contains(&node),
        "{node}: {best_nodes:?} at {best}"
    );
    assert!(matches!(choice, Choice::Scored { .. }));
    assert!(kept.is_some(), "the search's own ranking is kept");
}

#[test]
fn an_old_ranking_is_dropped() {
    let profile = batchable("s");
    let snap = snapshot(nodes(), load());
    let pod = PodInfo::new(Arc::new(web(0)));
    let (_, _, kept) = cycle(&profile, None, &pod, &snap);
    let mut kept = kept.expect("kept");
    kept.created = std::time::Instant::now()
        .checked_sub(MAX_BATCH_AGE + std::time::Duration::from_millis(1))
        .expect("a past instant");
    let (_, outcome, _) = cycle(&profile, Some(kept), &pod, &snap);
    assert_eq!(outcome.flushed, Some("expired"));
}

#[test]
fn signatures_hold_what_the_plugins_read() {
    let profile = batchable("s");
    let sign = |pod: Pod| sign(&profile, &PodInfo::new(Arc::new(pod)));
    let base = || {
        PodBuilder::new("a")
            .label("app", "web")
            .req_cpu("1")
            .scheduler_name("s")
    };
    let a = sign(base().build()).expect("signs");
    assert_eq!(
        Some(&a),
        sign(base().build()).as_ref(),
        "the name is not read"
    );
    let differ = [
        ("requests", base().req_mem("1Gi").build()),
        ("labels", base().label("tier", "front").build()),
        ("namespace", base().namespace("other").build()),
        (
            "tolerations",
            base().toleration("k", "Exists", "", "NoSchedule").build(),
        ),
        ("node selector", base().node_selector("zone", "a").build()),
        ("host ports", base().host_port(80, "TCP", "").build()),
        ("images", base().image("nginx").build()),
        ("volumes", base().claim("data").build()),
        (
            "a claim's namespace",
            base().claim("data").namespace("other").build(),
        ),
    ];
    for (what, pod) in differ {
        assert_ne!(Some(&a), sign(pod).as_ref(), "{what} are read");
    }
    // ImageLocality counts each container's image: [a, a, b] scores apart from [a, b, b].
    let images = |second: &str, third: &str| {
        sign(
            base()
                .image("a")
                .container()
                .image(second)
                .container()
                .image(third)
                .build(),
        )
    };
    assert_eq!(images("a", "b"), images("b", "a"));
    assert_ne!(images("a", "b"), images("b", "b"), "images are counted");
    let unsignable = [
        (
            "spread",
            base()
                .spread(
                    serde_json::from_value(serde_json::json!({"maxSkew": 1,
                        "topologyKey": "zone", "whenUnsatisfiable": "DoNotSchedule"}))
                    .expect("a constraint"),
                )
                .build(),
        ),
        (
            "anti-affinity",
            base()
                .affinity(
                    serde_json::from_value(serde_json::json!({"podAntiAffinity": {
                        "requiredDuringSchedulingIgnoredDuringExecution": [{
                            "topologyKey": "kubernetes.io/hostname",
                            "labelSelector": {"matchLabels": {"app": "web"}}}]}}))
                    .expect("an affinity"),
                )
                .build(),
        ),
        (
            "a claim",
            base()
                .with(|p| {
                    p.spec.get_or_insert_with(Default::default).resource_claims =
                        Some(vec![k8s_openapi::api::core::v1::PodResourceClaim {
                            name: "gpu".into(),
                            resource_claim_template_name: Some("gpu".into()),
                            ..Default::default()
                        }]);
                })
                .build(),
        ),
    ];
    for (what, pod) in unsignable {
        assert_eq!(sign(pod), None, "a pod with {what} is not signed");
    }
    // The default profile spreads every pod by the system's default constraints.
    let default = default_profile("s", &Handle::default())
        .expect("compiles")
        .profile;
    assert_eq!(
        super::sign(&default, &PodInfo::new(Arc::new(base().build()))),
        None
    );
}
