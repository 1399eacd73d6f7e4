use super::*;
use crate::api::SchedulingProfileSpec;
use crate::scheduler::testing::{NodeBuilder, PodBuilder};

fn profile(name: &str, strategy: &str) -> SchedulingProfile {
    let spec: SchedulingProfileSpec = serde_json::from_value(serde_json::json!({
        "schedulerName": "tether-scheduler",
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}],
    }))
    .expect("a spec");
    let mut p = SchedulingProfile::new(name, spec);
    p.metadata.uid = Some(format!("uid-{name}"));
    p.metadata.generation = Some(1);
    p
}

/// Two nodes, one half full; three pending pods of one CPU each.
fn cluster() -> ClusterState {
    let nodes = vec![
        NodeBuilder::new("full").allocatable("cpu", "4").build(),
        NodeBuilder::new("empty").allocatable("cpu", "4").build(),
    ];
    let mut pods = vec![
        PodBuilder::new("load")
            .uid("load")
            .req_cpu("2")
            .node_name("full")
            .build(),
    ];
    for i in 0..3 {
        pods.push(
            PodBuilder::new(&format!("p{i}"))
                .uid(&format!("p{i}"))
                .req_cpu("1")
                .scheduler_name("tether-scheduler")
                .build(),
        );
    }
    ClusterState {
        kind: cluster::KIND.into(),
        nodes,
        pods,
        scheduling_profiles: vec![profile("default", "LeastAllocated")],
        ..Default::default()
    }
}

/// LeastAllocated spreads onto the empty node; MostAllocated packs the half-full one: the
/// simulation says which pods move, and that NodeResourcesFit moves them.
#[test]
fn a_scoring_strategy_change_moves_the_pods_it_would_move() {
    let sim = simulate(&cluster(), &[profile("default", "MostAllocated")], 0)
        .expect("serves")
        .remove(0);
    let live: Vec<_> = sim
        .pending
        .iter()
        .map(|p| p.live.node.clone().unwrap_or_default())
        .collect();
    let cand: Vec<_> = sim
        .pending
        .iter()
        .map(|p| p.candidate.node.clone().unwrap_or_default())
        .collect();
    assert_eq!(live, ["empty", "empty", "full"], "{sim:#?}");
    assert_eq!(cand, ["full", "full", "empty"], "{sim:#?}");
    assert_eq!(sim.changes(), 3);
    assert!(
        sim.pending[0]
            .why
            .iter()
            .any(|w| w.starts_with("NodeResourcesFit: ")),
        "{:?}",
        sim.pending[0].why
    );
    assert_eq!(
        sim.live_profile.as_deref(),
        Some("SchedulingProfile/default@1")
    );
    let text = render::text(&sim);
    assert!(text.contains("3 would land differently"), "{text}");
}

/// The same profile changes nothing.
#[test]
fn an_unchanged_profile_moves_nothing() {
    let sim = simulate(&cluster(), &[profile("default", "LeastAllocated")], 5)
        .expect("serves")
        .remove(0);
    assert_eq!(sim.changes(), 0, "{sim:#?}");
    assert_eq!(
        sim.bound.len(),
        0,
        "the only bound pod is not the scheduler's"
    );
}

/// A profile that does not compile is refused with the controller's words, naming the field.
#[test]
fn an_invalid_candidate_is_refused_as_the_controller_refuses_it() {
    let mut bad = profile("default", "LeastAllocated");
    bad.spec.percentage_of_nodes_to_score = 140;
    let err = simulate(&cluster(), &[bad], 0).expect_err("invalid");
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].reason, "InvalidSpec");
    assert!(
        err[0].message.contains("spec.percentageOfNodesToScore")
            && err[0]
                .message
                .ends_with("; the last good version (generation 1) keeps serving"),
        "the controller's words, which keep the live version serving: {}",
        err[0]
    );
    let mut other = profile("other", "LeastAllocated");
    other.metadata.uid = None;
    let err = simulate(&cluster(), &[other], 0).expect_err("conflict");
    assert_eq!(err[0].reason, "SchedulerNameConflict", "{}", err[0]);
}

/// Several candidates are judged together, as one apply of them all would be: a new profile
/// for another schedulerName is simulated beside the change to the live one, and a name
/// given twice is refused.
#[test]
fn several_candidates_are_judged_together() {
    let mut gpu = profile("gpu", "MostAllocated");
    gpu.spec.scheduler_name = "tether-gpu".into();
    let sims = simulate(
        &cluster(),
        &[profile("default", "MostAllocated"), gpu.clone()],
        0,
    )
    .expect("both serve");
    let names: Vec<_> = sims.iter().map(|s| s.scheduler_name.as_str()).collect();
    assert_eq!(names, ["tether-scheduler", "tether-gpu"]);
    assert_eq!(
        sims[0].changes(),
        3,
        "the change to the live profile moves pods"
    );
    assert!(
        sims[1].live_profile.is_none() && sims[1].pending.is_empty(),
        "no pod waits for tether-gpu: {:?}",
        sims[1]
    );
    let err = simulate(&cluster(), &[gpu.clone(), gpu], 0).expect_err("twice");
    assert_eq!(err[0].message, "metadata.name: given twice");
}

/// Offline, the StickyBindings and owners in the lists pin as they do live: a StatefulSet's
/// pod pinned to the fuller node goes there under the sticky profile, and the candidate
/// without StickyNode sends it to the emptier node, saying which plugin decides.
#[test]
fn a_pin_read_from_the_lists_holds_until_the_candidate_drops_stickynode() {
    let mut state = cluster();
    state
        .pods
        .retain(|p| p.metadata.name.as_deref() == Some("load"));
    let sticky = |name: &str, plugins: serde_json::Value| {
        let spec: SchedulingProfileSpec = serde_json::from_value(serde_json::json!({
            "schedulerName": "tether-sticky",
            "plugins": plugins,
        }))
        .expect("a spec");
        let mut p = SchedulingProfile::new(name, spec);
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.generation = Some(1);
        p
    };
    state.scheduling_profiles = vec![sticky(
        "vms",
        serde_json::json!({"multiPoint": {"enabled": [{"name": "StickyNode"}]}}),
    )];
    let set: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db", "namespace": "default", "uid": "sts-db"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                 "template": {"metadata": {"labels": {"app": "db"}}}},
    }))
    .expect("a StatefulSet");
    state.stateful_sets = vec![set];
    let pod = PodBuilder::new("db-0")
        .uid("db-0")
        .label("app", "db")
        .req_cpu("1")
        .scheduler_name("tether-sticky")
        .with(|p| {
            p.metadata.owner_references =
                Some(vec![serde_json::from_value(serde_json::json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-db",
                "controller": true,
            }))
            .expect("an owner reference")]);
        })
        .build();
    state.pods.push(pod);
    let binding: crate::api::StickyBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "StickyBinding",
        "metadata": {"name": "statefulset-db-0", "namespace": "default"},
        "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "ordinal": 0},
                 "nodeName": "full"},
    }))
    .expect("a StickyBinding");
    state.sticky_bindings = vec![binding];

    let unchanged = simulate(&state, &state.scheduling_profiles.clone(), 0)
        .expect("serves")
        .remove(0);
    assert_eq!(
        unchanged.pending[0].live.node.as_deref(),
        Some("full"),
        "{unchanged:#?}"
    );
    assert_eq!(unchanged.changes(), 0);

    let plain = sticky("vms", serde_json::json!({}));
    let sim = simulate(&state, &[plain], 0).expect("serves").remove(0);
    let p = &sim.pending[0];
    assert_eq!(
        (p.live.node.as_deref(), p.candidate.node.as_deref()),
        (Some("full"), Some("empty")),
        "{sim:#?}"
    );
    assert!(
        p.why.iter().any(|w| w.starts_with("NodeResourcesFit: ")),
        "{:?}",
        p.why
    );
}
