//! DefaultPreemption's cases, after upstream's default_preemption_test.go: who preempts, on
//! which node, which pods go, and what a pod that cannot preempt is told.

use std::sync::atomic::AtomicUsize;

use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::*;
use crate::scheduler::framework::CycleState;
use crate::scheduler::framework::NoNominations;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::plugins::registry::Handle;
use crate::scheduler::profile::default_profile;
use crate::scheduler::schedule_one::{ScheduleResult, schedule_pod};
use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
use crate::watch::Index;

/// A pod of `priority` asking for `cpu`, bound to `node`.
fn running(name: &str, node: &str, priority: i32, cpu: &str) -> k8s_openapi::api::core::v1::Pod {
    PodBuilder::new(name)
        .label("app", name.trim_end_matches(char::is_numeric))
        .req_cpu(cpu)
        .priority(priority)
        .node_name(node)
        .build()
}

/// Schedules `pod` with the default profile (its budgets from `handle`); the diagnosis when
/// it fits nowhere.
fn attempt(handle: &Handle, snap: &Snapshot, pod: PodBuilder) -> Diagnosis {
    attempt_info(handle, snap, &pod.info(), &NoNominations)
}

/// As [`attempt`], for a pod already built, with `nominated`.
fn attempt_info(
    handle: &Handle,
    snap: &Snapshot,
    pod: &crate::scheduler::framework::pod_info::PodInfo,
    nominated: &dyn crate::scheduler::framework::NominatedPods,
) -> Diagnosis {
    let profile = default_profile("tether-scheduler", handle)
        .expect("compiles")
        .profile;
    let mut state = CycleState::new();
    match schedule_pod(
        &profile,
        &mut state,
        pod,
        snap,
        &AtomicUsize::new(0),
        nominated,
    ) {
        ScheduleResult::Unschedulable(d) => d,
        other => panic!("want unschedulable, got {other:?}"),
    }
}

/// Two full nodes of 4 CPUs: n1 holds pods of priority 0 and 100, n2 of priority 100.
fn full() -> Snapshot {
    snapshot(
        vec![NodeBuilder::new("n1"), NodeBuilder::new("n2")],
        vec![
            running("low1", "n1", 0, "2"),
            running("mid1", "n1", 100, "2"),
            running("mid2", "n2", 100, "2"),
            running("mid3", "n2", 100, "2"),
        ],
    )
}

#[test]
fn a_higher_priority_pod_is_nominated_where_the_least_important_victims_are() {
    let d = attempt(
        &Handle::default(),
        &full(),
        PodBuilder::new("vip").req_cpu("2").priority(1000),
    );
    assert_eq!(d.nomination, Some(Nomination::Node("n1".into())));
    assert_eq!(
        d.message(),
        "0/2 nodes are available: 2 Insufficient cpu. preemption: found a potential placement for pod on node n1, preempting 1 victims",
        "1.37 says where the pod is going, and how many pods it evicts for it"
    );
}

#[test]
fn victims_are_the_fewest_and_least_important_that_make_room() {
    let profile = default_profile("tether-scheduler", &Handle::default())
        .expect("compiles")
        .profile;
    let snap = snapshot(
        vec![NodeBuilder::new("n1")],
        vec![
            running("a0", "n1", 0, "1"),
            running("b5", "n1", 5, "1"),
            running("c9", "n1", 9, "1"),
            running("d2000", "n1", 2000, "1"),
        ],
    );
    let pod = PodBuilder::new("vip").req_cpu("2").priority(1000).info();
    let mut state = CycleState::new();
    profile
        .run_pre_filter_alone(&mut state, &pod, &snap)
        .expect("prefilter");
    let diagnosis = Diagnosis::default();
    let ctx = PostFilterContext {
        profile: &profile,
        state: &state,
        pod: &pod,
        snapshot: &snap,
        diagnosis: &diagnosis,
        nominated: &NoNominations,
    };
    let dry = DryRun {
        ctx: &ctx,
        budgets: &[],
        fresh_pre_filter: true,
        now: Timestamp::now(),
        evictions: &Evictions::default(),
    };
    let candidate = dry
        .select_victims(snap.get("n1").expect("n1"))
        .expect("a candidate");
    let victims: Vec<&str> = candidate.victims.iter().map(|v| v.name()).collect();
    assert_eq!(
        victims,
        ["b5", "a0"],
        "two CPUs from the least important; 2000 is never a victim"
    );
}

#[test]
fn a_disruption_budget_steers_preemption_to_the_other_node() {
    let budgets = Arc::new(DisruptionBudgets::default());
    budgets.apply(PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some("low".into()),
            namespace: Some("default".into()),
            ..Default::default()
        },
        spec: Some(PodDisruptionBudgetSpec {
            selector: Some(LabelSelector {
                match_labels: Some([("app".to_string(), "low".to_string())].into()),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PodDisruptionBudgetStatus {
            disruptions_allowed: Some(0),
            ..Default::default()
        }),
    });
    let handle = Handle {
        budgets,
        ..Handle::default()
    };
    let snap = snapshot(
        vec![NodeBuilder::new("n1"), NodeBuilder::new("n2")],
        vec![
            running("low1", "n1", 0, "4"),
            running("other1", "n2", 0, "4"),
        ],
    );
    let d = attempt(
        &handle,
        &snap,
        PodBuilder::new("vip").req_cpu("2").priority(1000),
    );
    assert_eq!(d.nomination, Some(Nomination::Node("n2".into())));
}

#[test]
fn a_pod_that_may_not_or_cannot_preempt_is_told_why() {
    let never = attempt(
        &Handle::default(),
        &full(),
        PodBuilder::new("polite")
            .req_cpu("2")
            .priority(1000)
            .with(|p| {
                p.spec.get_or_insert_default().preemption_policy = Some("Never".into());
            }),
    );
    assert_eq!(never.nomination, None);
    assert_eq!(
        never.message(),
        "0/2 nodes are available: 2 Insufficient cpu. preemption: not eligible due to preemptionPolicy=Never."
    );
    let equal = attempt(
        &Handle::default(),
        &full(),
        PodBuilder::new("peer").req_cpu("2").priority(0),
    );
    assert_eq!(equal.nomination, Some(Nomination::Clear));
    assert_eq!(
        equal.message(),
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 No preemption victims found for incoming pod."
    );
    let huge = attempt(
        &Handle::default(),
        &full(),
        PodBuilder::new("huge").req_cpu("64").priority(1000),
    );
    // More than a node has in all: no eviction can help, so no node is tried.
    assert_eq!(
        huge.message(),
        "0/2 nodes are available: 2 Insufficient cpu. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
    let unresolvable = attempt(
        &Handle::default(),
        &full(),
        PodBuilder::new("picky")
            .req_cpu("2")
            .priority(1000)
            .node_selector("disk", "nvme"),
    );
    assert_eq!(
        unresolvable.message(),
        "0/2 nodes are available: 2 node(s) didn't match Pod's node affinity/selector. preemption: 0/2 nodes are available: 2 Preemption is not helpful for scheduling."
    );
}

#[test]
fn candidates_are_picked_in_upstreams_order() {
    let pod = |name: &str, p: i32| Arc::new(PodBuilder::new(name).priority(p).info());
    let c = |node: &str, victims: Vec<Arc<crate::scheduler::framework::pod_info::PodInfo>>, pdb| {
        Candidate {
            node: node.into(),
            victims,
            pdb_violations: pdb,
        }
    };
    let now = Timestamp::now();
    let by_pdb = [c("a", vec![pod("x", 1)], 1), c("b", vec![pod("y", 9)], 0)];
    assert_eq!(
        dry_run::pick(&by_pdb, now).map(|c| c.node.as_str()),
        Some("b")
    );
    let by_top = [
        c("a", vec![pod("x", 9)], 0),
        c("b", vec![pod("y", 5), pod("z", 5)], 0),
    ];
    assert_eq!(
        dry_run::pick(&by_top, now).map(|c| c.node.as_str()),
        Some("b")
    );
    let by_count = [
        c("a", vec![pod("x", 5), pod("y", 5)], 0),
        c("b", vec![pod("z", 5)], 0),
    ];
    assert_eq!(
        dry_run::pick(&by_count, now).map(|c| c.node.as_str()),
        Some("b")
    );
}

/// One 4-CPU node full of four 1-CPU pods of priority 0.
fn one_full_node() -> Snapshot {
    snapshot(
        vec![NodeBuilder::new("n1")],
        (0..4)
            .map(|i| running(&format!("web{i}"), "n1", 0, "1"))
            .collect(),
    )
}

/// A preemptor retried before the cache shows its victims going (another pod's event, a pop
/// from backoffQ) evicts nobody more: its victim counts as terminating on its nominated node.
#[test]
fn a_retry_before_the_cache_shows_the_victims_evicts_no_more() {
    let handle = Handle::default();
    let snap = one_full_node();
    let vip = Arc::new(PodBuilder::new("vip").req_cpu("1").priority(1000).info());
    let nominator = crate::scheduler::backend::nominator::Nominator::default();
    let first = attempt_info(&handle, &snap, &vip, &nominator);
    assert_eq!(first.nomination, Some(Nomination::Node("n1".into())));
    assert_eq!(handle.evictions.len(), 1, "one victim for one CPU");
    nominator.nominate(vip.clone(), "n1");
    let retry = attempt_info(&handle, &snap, &vip, &nominator);
    assert!(
        retry
            .message()
            .contains("not eligible due to a terminating pod on the nominated node"),
        "{}",
        retry.message()
    );
    assert_eq!(handle.evictions.len(), 1, "no second victim");
}

/// A second preemptor, before the cache shows the first one's victim going, takes that room
/// for the first and asks for one more victim: two evictions for two pods, none twice.
#[test]
fn a_second_preemptor_evicts_only_what_it_needs() {
    let handle = Handle::default();
    let snap = one_full_node();
    let nominator = crate::scheduler::backend::nominator::Nominator::default();
    for name in ["vip1", "vip2"] {
        let vip = Arc::new(PodBuilder::new(name).req_cpu("1").priority(1000).info());
        let d = attempt_info(&handle, &snap, &vip, &nominator);
        assert_eq!(d.nomination, Some(Nomination::Node("n1".into())));
        nominator.nominate(vip, "n1");
    }
    assert_eq!(handle.evictions.len(), 2);
}

/// A pod already terminating leaves whatever happens: its room is taken before any pod is
/// evicted (upstream could reprieve it and evict another in its place).
#[test]
fn a_terminating_pod_is_never_reprieved() {
    let handle = Handle::default();
    let mut leaving = running("leaving", "n1", 500, "1");
    leaving.metadata.deletion_timestamp = Some(
        k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Timestamp::now()),
    );
    let snap = snapshot(
        vec![NodeBuilder::new("n1")],
        vec![
            leaving,
            running("web0", "n1", 0, "1"),
            running("web1", "n1", 0, "1"),
            running("web2", "n1", 0, "1"),
        ],
    );
    let d = attempt(
        &handle,
        &snap,
        PodBuilder::new("vip").req_cpu("1").priority(1000),
    );
    assert_eq!(d.nomination, Some(Nomination::Node("n1".into())));
    assert!(
        handle.evictions.is_empty(),
        "nobody evicted: the room is coming"
    );
}

/// A pod two budgets select is counted against the first it would break and no further, as
/// kube-scheduler 1.37: the second budget keeps its allowance for the next pod it selects.
#[test]
fn a_pod_is_counted_against_budgets_up_to_the_first_it_would_break() {
    let budget = |name: &str, app: &str, allowed: i32| {
        Arc::new(PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector: Some(LabelSelector {
                    match_expressions: Some(vec![
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement {
                            key: "app".into(),
                            operator: "In".into(),
                            values: Some(app.split(',').map(String::from).collect()),
                        },
                    ]),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: Some(allowed),
                ..Default::default()
            }),
        })
    };
    // b is selected by both; c by the second only.
    let budgets = [budget("first", "b", 0), budget("second", "b,c", 1)];
    let pod = |name: &str| Arc::new(PodBuilder::new(name).label("app", name).info());
    let (violating, fine) = super::dry_run::split_by_budgets(&[pod("b"), pod("c")], &budgets);
    let names = |pods: &[Arc<crate::scheduler::framework::pod_info::PodInfo>]| {
        pods.iter()
            .map(|p| p.pod.metadata.name.clone().unwrap_or_default())
            .collect::<Vec<_>>()
    };
    assert_eq!(names(&violating), ["b"]);
    assert_eq!(
        names(&fine),
        ["c"],
        "b broke the first budget; the second still allows c"
    );
}

/// kube-scheduler's preemption metrics: every run of the PostFilter is an attempt (one that
/// may not preempt too), and a preemption decided observes its victims.
#[test]
fn attempts_and_victims_are_counted_as_kube_scheduler_counts_them() {
    let metrics = Arc::new(crate::scheduler::metrics::Metrics::default());
    let handle = Handle {
        metrics: Some(metrics.clone()),
        ..Handle::default()
    };
    let decided = attempt(
        &handle,
        &full(),
        PodBuilder::new("vip").req_cpu("2").priority(1000),
    );
    assert_eq!(decided.nomination, Some(Nomination::Node("n1".into())));
    attempt(
        &handle,
        &full(),
        PodBuilder::new("polite")
            .req_cpu("2")
            .priority(1000)
            .with(|p| {
                p.spec.get_or_insert_default().preemption_policy = Some("Never".into());
            }),
    );
    let text = metrics.encode();
    for line in [
        "scheduler_preemption_attempts_total 2",
        "scheduler_preemption_victims_count 1",
        "scheduler_preemption_victims_sum 1.0",
        r#"scheduler_preemption_victims_bucket{le="1.0"} 1"#,
    ] {
        assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
    }
}
