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
    let sim = simulate(&cluster(), &profile("default", "MostAllocated"), 0).expect("serves");
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
    let sim = simulate(&cluster(), &profile("default", "LeastAllocated"), 5).expect("serves");
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
    let err = simulate(&cluster(), &bad, 0).expect_err("invalid");
    assert_eq!(err.reason, "InvalidSpec");
    assert!(
        err.message.contains("spec.percentageOfNodesToScore"),
        "{err}"
    );
    let mut other = profile("other", "LeastAllocated");
    other.metadata.uid = None;
    let err = simulate(&cluster(), &other, 0).expect_err("conflict");
    assert_eq!(err.reason, "SchedulerNameConflict", "{err}");
}
