use std::sync::atomic::AtomicUsize;

use super::*;
use crate::scheduler::algorithm::{Choice, ScheduleResult, schedule_pod};
use crate::scheduler::framework::NoNominations;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::profile::default_profile;
use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

fn profile() -> CompiledProfile {
    default_profile("tether-scheduler", &Handle::default())
        .expect("compiles")
        .profile
}

/// What the scheduling cycle decides for `pod` on `snap`.
fn cycle(profile: &CompiledProfile, pod: &Pod, snap: &Snapshot) -> ScheduleResult {
    let info = PodInfo::new(Arc::new(pod.clone()));
    schedule_pod(
        profile,
        &mut CycleState::new(),
        &info,
        snap,
        &AtomicUsize::new(0),
        &NoNominations,
    )
}

fn nodes() -> Vec<NodeBuilder> {
    vec![
        NodeBuilder::new("busy").allocatable("cpu", "4"),
        NodeBuilder::new("idle").allocatable("cpu", "4"),
        NodeBuilder::new("half").allocatable("cpu", "4"),
        NodeBuilder::new("gpu").taint("dedicated", "gpu", "NoSchedule"),
        NodeBuilder::new("small").allocatable("cpu", "1"),
    ]
}

fn load() -> Vec<Pod> {
    vec![
        PodBuilder::new("b1")
            .uid("b1")
            .req_cpu("3")
            .node_name("busy")
            .build(),
        PodBuilder::new("h1")
            .uid("h1")
            .req_cpu("2")
            .node_name("half")
            .build(),
    ]
}

/// Explaining a pod after its bind gives the decision the cycle made: the same winner, total,
/// runner-up and margin as the cycle's `Scheduled` trace.
#[test]
fn a_bound_pod_is_explained_with_the_scores_that_placed_it() {
    let profile = profile();
    let pod = PodBuilder::new("web").uid("web").req_cpu("1").build();
    let before = snapshot(nodes(), load());
    let ScheduleResult::Scheduled { node, choice, .. } = cycle(&profile, &pod, &before) else {
        panic!("the pod fits");
    };
    let Choice::Scored {
        score,
        runner_up: Some(second),
        ..
    } = choice
    else {
        panic!("several nodes fit, so they were scored: {choice:?}");
    };
    assert_eq!(node, "idle", "the least allocated node wins");

    let mut bound = pod.clone();
    bound.spec.get_or_insert_default().node_name = Some(node.clone());
    let mut pods = load();
    pods.push(bound.clone());
    let after = snapshot(nodes(), pods);
    let e = explain_pod(&profile, &bound, &after, &NoNominations);
    assert_eq!(e.bound_to.as_deref(), Some("idle"));
    assert_eq!(e.winner.as_deref(), Some("idle"));
    assert_eq!(e.scores[0].total, score, "{e:#?}");
    assert_eq!(e.runner_up.as_deref(), Some(second.name.as_str()));
    assert_eq!(e.margin, Some(score - second.score));
    assert_eq!(
        e.scores[0].plugins.iter().map(|p| p.weighted).sum::<i64>(),
        e.scores[0].total
    );
    let gpu = e.filters.iter().find(|n| n.node == "gpu").expect("gpu");
    assert!(!gpu.feasible);
    assert!(
        gpu.verdicts
            .iter()
            .any(|v| v.plugin == "TaintToleration" && v.counted),
        "{gpu:?}"
    );
}

/// A pod no node fits: the message the FailedScheduling event carries (before preemption's
/// part), each reason with its nodes, and what would have to change.
#[test]
fn a_pending_pod_is_explained_with_its_failure_message_and_what_would_change() {
    let profile = profile();
    let pod = PodBuilder::new("big").uid("big").req_cpu("3").build();
    let mut pods = load();
    pods.push(
        PodBuilder::new("i1")
            .uid("i1")
            .req_cpu("2")
            .node_name("idle")
            .build(),
    );
    let snap = snapshot(nodes(), pods);
    let ScheduleResult::Unschedulable(diagnosis) = cycle(&profile, &pod, &snap) else {
        panic!("3 CPU fit nowhere");
    };
    let event = diagnosis.message();
    let e = explain_pod(&profile, &pod, &snap, &NoNominations);
    let message = e.message.clone().expect("a message");
    assert_eq!(
        message,
        "0/5 nodes are available: 1 node(s) had untolerated taint(s), 4 Insufficient cpu."
    );
    assert!(
        event.starts_with(&format!("{message} preemption:")),
        "explain counts what the event counts: {event}"
    );
    assert_eq!(e.winner, None);
    let cpu = e
        .blocked
        .iter()
        .find(|b| b.reason == "Insufficient cpu")
        .expect("cpu");
    assert_eq!(cpu.count, 4);
    assert_eq!(cpu.nodes, ["busy", "half", "idle", "small"]);
    assert!(
        cpu.remedies
            .iter()
            .any(|r| r
                == "free 1 cpu on half (it has 2 of 4 allocatable requested; the pod requests 3)"),
        "{:?}",
        cpu.remedies
    );
    assert!(
        cpu.remedies
            .iter()
            .any(|r| r.starts_with("small: the pod requests 3 cpu, more than its 1 allocatable")),
        "{:?}",
        cpu.remedies
    );
    let taint = e
        .blocked
        .iter()
        .find(|b| b.plugin == "TaintToleration")
        .expect("taint");
    assert_eq!(
        taint.remedies,
        ["tolerate the taint dedicated=gpu:NoSchedule of gpu, or remove it"]
    );
    let text = render::text(&e);
    assert!(
        text.contains("No node fits: 0/5 nodes are available"),
        "{text}"
    );
    assert!(
        text.contains("to change: tolerate the taint dedicated=gpu:NoSchedule"),
        "{text}"
    );
}

#[test]
fn the_json_form_reads_back_as_it_was_written() {
    let profile = profile();
    let pod = PodBuilder::new("web").uid("web").req_cpu("1").build();
    let e = explain_pod(&profile, &pod, &snapshot(nodes(), load()), &NoNominations);
    let json = serde_json::to_string(&e).expect("serializes");
    let back: Explanation = serde_json::from_str(&json).expect("reads back");
    assert_eq!(back, e);
    let text = render::text(&e);
    assert!(text.contains("Winner: idle"), "{text}");
    assert!(text.contains("NodeResourcesFit"), "{text}");
}

/// A pod nominated to a node (by preemption) goes there when it fits, whatever the scores:
/// explain names that node, as the cycle tries it first.
#[test]
fn a_nominated_pod_is_explained_on_its_nominated_node() {
    let profile = profile();
    let pod = PodBuilder::new("vip")
        .uid("vip")
        .req_cpu("1")
        .with(|p| p.status.get_or_insert_default().nominated_node_name = Some("busy".into()))
        .build();
    let snap = snapshot(nodes(), load());
    let ScheduleResult::Scheduled { node, choice, .. } = cycle(&profile, &pod, &snap) else {
        panic!("the pod fits");
    };
    assert_eq!((node.as_str(), choice), ("busy", Choice::Nominated));
    let e = explain_pod(&profile, &pod, &snap, &NoNominations);
    assert_eq!(e.winner.as_deref(), Some("busy"), "{e:#?}");
    assert!(e.nominated);
    assert_ne!(
        e.scores[0].node, "busy",
        "though another node scores better"
    );
    assert!(e.margin.is_some_and(|m| m < 0), "{e:#?}");
}

/// A gang of 5 pods of 1 CPU on two nodes of 2 CPUs: four members fit, each on the room the
/// ones before it left (two per node), and the fifth says why it does not; minCount 5 is not
/// reached. With minCount 4 the same members place the group.
#[test]
fn a_gang_member_is_explained_with_where_each_member_fits() {
    let profile = profile();
    let snap = snapshot(
        vec![
            NodeBuilder::new("n1").allocatable("cpu", "2"),
            NodeBuilder::new("n2").allocatable("cpu", "2"),
        ],
        vec![],
    );
    let members: Vec<Arc<PodInfo>> = (0..5)
        .map(|i| {
            let pod = PodBuilder::new(&format!("m{i}"))
                .uid(&format!("m{i}"))
                .req_cpu("1")
                .build();
            Arc::new(PodInfo::new(Arc::new(pod)))
        })
        .collect();
    let g = explain_group(
        &profile,
        "default/train".into(),
        5,
        0,
        members.clone(),
        &snap,
        &NoNominations,
        GroupLimits::NONE,
    );
    let nodes: Vec<Option<&str>> = g.members.iter().map(|m| m.node.as_deref()).collect();
    assert_eq!(
        nodes.iter().filter(|n| **n == Some("n1")).count(),
        2,
        "{nodes:?}"
    );
    assert_eq!(nodes.iter().filter(|n| **n == Some("n2")).count(), 2);
    assert_eq!(nodes[4], None);
    assert_eq!(
        g.members[4].reason.as_deref(),
        Some("0/2 nodes are available: 2 Insufficient cpu.")
    );
    assert!(!g.placed);
    assert_eq!(
        g.verdict,
        "minCount 5, 0 scheduled before, 4 of 5 pending fit: the group is not placed; default/m4 does not: 0/2 nodes are available: 2 Insufficient cpu."
    );
    let text = render::text(&Explanation {
        group: Some(g),
        ..Default::default()
    });
    assert!(text.contains("GANG default/train"), "{text}");

    let g = explain_group(
        &profile,
        "default/train".into(),
        4,
        0,
        members.clone(),
        &snap,
        &NoNominations,
        GroupLimits::NONE,
    );
    assert!(g.placed, "{}", g.verdict);

    // A caller asks for members × nodes: the work stops at the cap of members, and at the
    // deadline, and the answer says how many were not dry-run.
    let capped = explain_group(
        &profile,
        "default/train".into(),
        5,
        0,
        members.clone(),
        &snap,
        &NoNominations,
        GroupLimits {
            max_members: 2,
            deadline: None,
        },
    );
    assert_eq!((capped.members.len(), capped.not_tried), (2, 3));
    assert!(!capped.placed);
    assert!(
        capped.verdict.contains("not known; 3 more members"),
        "{}",
        capped.verdict
    );
    let late = explain_group(
        &profile,
        "default/train".into(),
        5,
        0,
        members,
        &snap,
        &NoNominations,
        GroupLimits {
            max_members: usize::MAX,
            deadline: Some(std::time::Instant::now()),
        },
    );
    assert_eq!((late.members.len(), late.not_tried), (0, 5));
}

/// A gang bound to a topology key is explained domain by domain: the ones that hold it with
/// their scores, the chosen one (the fullest), and why another does not; its members are those
/// of the chosen domain, each searching that domain's nodes alone.
#[test]
fn a_rack_bound_gang_is_explained_domain_by_domain() {
    use crate::scheduler::group_topology::domains;
    let profile = default_profile("tether-scheduler", &Handle::default())
        .expect("compiles")
        .profile;
    let rack = |name: &str, rack: &str, cpu: &str, memory: &str| {
        NodeBuilder::new(name)
            .label("example.com/rack", rack)
            .allocatable("cpu", cpu)
            .allocatable("memory", memory)
    };
    let snap = snapshot(
        vec![
            rack("a1", "a", "2", "4Gi"),
            rack("a2", "a", "2", "4Gi"),
            rack("b1", "b", "4", "8Gi"),
            rack("b2", "b", "4", "8Gi"),
            rack("c1", "c", "1", "2Gi"),
            rack("c2", "c", "1", "2Gi"),
            NodeBuilder::new("big").allocatable("cpu", "16"),
        ],
        vec![],
    );
    let members: Vec<Arc<PodInfo>> = (0..4)
        .map(|i| {
            let pod = PodBuilder::new(&format!("m{i}"))
                .uid(&format!("m{i}"))
                .req_cpu("1")
                .req("memory", "1Gi")
                .build();
            Arc::new(PodInfo::new(Arc::new(pod)))
        })
        .collect();
    let gang = Gang {
        pod_group: "default/train".into(),
        min_count: 4,
        scheduled_before: 0,
    };
    let racks = domains(&snap, "example.com/rack", &[]).expect("domains");
    let g = explain_domains(
        &profile,
        &gang,
        members,
        &snap,
        &NoNominations,
        GroupLimits::NONE,
        &racks,
    );
    let rows: Vec<(&str, bool, Option<i64>, bool)> = g
        .domains
        .iter()
        .map(|d| (d.domain.as_str(), d.placed, d.score, d.chosen))
        .collect();
    assert_eq!(
        rows,
        [
            ("a", true, Some(175), true),
            ("b", true, Some(137), false),
            ("c", false, None, false)
        ]
    );
    assert!(
        g.domains[2]
            .verdict
            .contains("0/2 nodes are available: 2 Insufficient cpu."),
        "{}",
        g.domains[2].verdict
    );
    assert_eq!(g.verdict, "placed within \"a\", the best of 2 that fit");
    assert!(
        g.members
            .iter()
            .all(|m| matches!(m.node.as_deref(), Some("a1" | "a2"))),
        "{:?}",
        g.members
    );
    let text = render::text(&Explanation {
        group: Some(g),
        ..Default::default()
    });
    assert!(text.contains("a (chosen)"), "{text}");
}

/// At thousands of nodes the text stays readable: the FILTER table names the first 20 rejected
/// nodes and says how many more (BLOCKED BY counts them all); `-o wide` lists every one;
/// `--node` shows one node's verdicts, or a feasible node's scores and rank.
#[test]
fn the_text_names_a_few_rejected_nodes_and_one_on_request() {
    let profile = profile();
    let many: Vec<NodeBuilder> = (0..30)
        .map(|i| NodeBuilder::new(&format!("n{i:02}")).allocatable("cpu", "1"))
        .chain([NodeBuilder::new("roomy")])
        .collect();
    let pod = PodBuilder::new("big").uid("big").req_cpu("2").build();
    let e = explain_pod(&profile, &pod, &snapshot(many, vec![]), &NoNominations);
    let short = render::text(&e);
    assert!(short.contains("FILTER (30 of 31 nodes rejected"), "{short}");
    assert!(
        short.contains("and 10 more rejected nodes (-o wide lists them"),
        "{short}"
    );
    assert_eq!(short.matches("Insufficient cpu").count(), 20, "{short}");
    let wide = render::text_with(
        &e,
        &render::View {
            wide: true,
            node: None,
        },
    );
    assert!(!wide.contains("more rejected nodes"), "{wide}");
    assert!(
        (0..30).all(|i| wide.contains(&format!("\n  n{i:02} "))),
        "{wide}"
    );
    let one = |node: &str| {
        render::text_with(
            &e,
            &render::View {
                wide: false,
                node: Some(node.into()),
            },
        )
    };
    let rejected = one("n07");
    assert!(rejected.contains("NODE n07: rejected"), "{rejected}");
    assert!(
        rejected
            .lines()
            .any(|l| l.contains("NodeResourcesFit*") && l.contains("Insufficient cpu")),
        "{rejected}"
    );
    assert!(
        !rejected.contains("FILTER ("),
        "the tables are left out: {rejected}"
    );
    let roomy = one("roomy");
    assert!(
        roomy.contains("NODE roomy: feasible") && roomy.contains("SCORE roomy: total"),
        "{roomy}"
    );
    assert!(roomy.contains("1st of 1 feasible"), "{roomy}");
    assert!(one("elsewhere").contains("NODE elsewhere: not among the 31 nodes"));
}
