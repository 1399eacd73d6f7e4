//! DefaultPreemption's cases, after upstream's default_preemption_test.go: who preempts, on
//! which node, which pods go, and what a pod that cannot preempt is told.

use std::sync::atomic::AtomicUsize;

use k8s_openapi::api::policy::v1::{
    PodDisruptionBudget, PodDisruptionBudgetSpec, PodDisruptionBudgetStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};

use super::*;
use crate::k8s::pod::PodStatus;
use crate::scheduler::algorithm::{ScheduleResult, schedule_pod};
use crate::scheduler::framework::CycleState;
use crate::scheduler::framework::NoNominations;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::profile::default_profile;
use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
use crate::watch::Index;

/// A pod of `priority` asking for `cpu`, bound to `node`.
fn running(name: &str, node: &str, priority: i32, cpu: &str) -> crate::k8s::pod::Pod {
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
        removed_pods_matter: true,
        now: Timestamp::now(),
        release: crate::k8s::release::Release::default(),
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

/// A budget in `default` over pods whose `app` is one of `apps` (comma-separated), allowing
/// `allowed` disruptions.
fn budget(name: &str, apps: &str, allowed: i32) -> Arc<PodDisruptionBudget> {
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
                        values: Some(apps.split(',').map(String::from).collect()),
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
}

/// The victims DefaultPreemption's dry run picks on `node` for `pod` (none: not a candidate).
fn victims_on(snap: &Snapshot, pod: &PodInfo, node: &str) -> Vec<String> {
    candidate_on(snap, pod, node, &[])
        .map(|c| c.victims.iter().map(|v| v.name().to_string()).collect())
        .unwrap_or_default()
}

/// The candidate DefaultPreemption's dry run makes of `node` for `pod` under `budgets`.
fn candidate_on(
    snap: &Snapshot,
    pod: &PodInfo,
    node: &str,
    budgets: &[Arc<PodDisruptionBudget>],
) -> Option<Candidate> {
    let profile = default_profile("tether-scheduler", &Handle::default())
        .expect("compiles")
        .profile;
    let mut state = CycleState::new();
    // A PreFilter that rejects the pod outright leaves nothing to preempt for; the dry run
    // re-runs the PreFilters on each trial snapshot.
    let _ = profile.run_pre_filter_alone(&mut state, pod, snap);
    let diagnosis = Diagnosis::default();
    let ctx = PostFilterContext {
        profile: &profile,
        state: &state,
        pod,
        snapshot: snap,
        diagnosis: &diagnosis,
        nominated: &NoNominations,
    };
    let dry = DryRun {
        ctx: &ctx,
        budgets,
        fresh_pre_filter: super::fresh_pre_filter(&profile, &state),
        removed_pods_matter: true,
        now: Timestamp::now(),
        release: crate::k8s::release::Release::default(),
        evictions: &Evictions::default(),
    };
    dry.select_victims(snap.get(node).expect("the node")).ok()
}

/// A dry run that does not run again the PreFilters that skipped the pod picks, node by node,
/// the same victims as one that runs every pod-reading PreFilter again: for a plain pod (all
/// of them skip, so none runs), for one that spreads and for one whose anti-affinity matters.
#[test]
fn skipped_pre_filters_are_not_run_again_and_change_no_victim() {
    let profile = default_profile("tether-scheduler", &Handle::default())
        .expect("compiles")
        .profile;
    let spread: k8s_openapi::api::core::v1::TopologySpreadConstraint =
        serde_json::from_value(serde_json::json!({
            "maxSkew": 1, "topologyKey": "kubernetes.io/hostname",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "low"}}}))
        .expect("a constraint");
    let pods = [
        (
            PodBuilder::new("plain").priority(1000).req_cpu("2").info(),
            false,
        ),
        (
            PodBuilder::new("spreads")
                .label("app", "low")
                .priority(1000)
                .req_cpu("2")
                .spread(spread)
                .info(),
            true,
        ),
    ];
    let snap = full();
    for (pod, reads) in &pods {
        let mut state = CycleState::new();
        let _ = profile.run_pre_filter_alone(&mut state, pod, &snap);
        assert_eq!(
            super::fresh_pre_filter(&profile, &state),
            *reads,
            "{}",
            pod.name()
        );
        let diagnosis = Diagnosis::default();
        let ctx = PostFilterContext {
            profile: &profile,
            state: &state,
            pod,
            snapshot: &snap,
            diagnosis: &diagnosis,
            nominated: &NoNominations,
        };
        let evictions = Evictions::default();
        let victims = |fresh: bool| {
            let dry = DryRun {
                ctx: &ctx,
                budgets: &[],
                fresh_pre_filter: fresh,
                removed_pods_matter: true,
                now: Timestamp::now(),
                release: crate::k8s::release::Release::default(),
                evictions: &evictions,
            };
            ["n1", "n2"].map(|n| {
                dry.select_victims(snap.get(n).expect("a node"))
                    .map(|c| {
                        c.victims
                            .iter()
                            .map(|v| v.name().to_string())
                            .collect::<Vec<_>>()
                    })
                    .map_err(|s| s.message())
            })
        };
        assert_eq!(
            victims(super::fresh_pre_filter(&profile, &state)),
            victims(true),
            "{}",
            pod.name()
        );
    }
}

/// upstream's TestSelectVictimsOnNode, the PDB rows: a victim that breaks no budget is taken
/// before a less important one that would, and when every way breaks one, the least important.
#[test]
fn victims_on_a_node_spare_budgets_as_upstream() {
    let budgets = [budget("foo", "foo", 0)];
    let on_node = |pods: Vec<crate::k8s::pod::Pod>| {
        snapshot(
            vec![NodeBuilder::new("n1").allocatable("cpu", "500m")],
            pods,
        )
    };
    let victim = |name: &str, priority: i32, app: Option<&str>| {
        let pod = PodBuilder::new(name)
            .node_name("n1")
            .priority(priority)
            .req_cpu("200m");
        match app {
            Some(app) => pod.label("app", app),
            None => pod,
        }
        .build()
    };
    let p = PodBuilder::new("p").priority(1000).req_cpu("300m").info();
    let names = |c: &Candidate| {
        c.victims
            .iter()
            .map(|v| v.name().to_string())
            .collect::<Vec<_>>()
    };

    let snap = on_node(vec![
        victim("victim-pdb", 0, Some("foo")),
        victim("victim-no-pdb", 100, None),
    ]);
    let c = candidate_on(&snap, &p, "n1", &budgets).expect("a candidate");
    assert_eq!(
        (names(&c), c.pdb_violations),
        (vec!["victim-no-pdb".to_string()], 0)
    );

    let snap = on_node(vec![
        victim("v1", 0, Some("foo")),
        victim("v2", 100, Some("foo")),
    ]);
    let c = candidate_on(&snap, &p, "n1", &budgets).expect("a candidate");
    assert_eq!((names(&c), c.pdb_violations), (vec!["v1".to_string()], 1));
}

/// A pod labelled `foo` of `priority` on `node`.
fn foo_pod(name: &str, node: &str, priority: i32) -> PodBuilder {
    PodBuilder::new(name)
        .label("foo", "")
        .node_name(node)
        .priority(priority)
}

/// upstream's TestDryRunPreemption "preemption to resolve pod topology spread filter
/// failure": removing a pod must lower the skew it counts in, which the dry run sees by
/// running PodTopologySpread's PreFilter again on the node without it.
#[test]
fn preemption_resolves_a_topology_spread_failure_as_upstream() {
    let spread = |key: &str| -> k8s_openapi::api::core::v1::TopologySpreadConstraint {
        serde_json::from_value(serde_json::json!({
            "maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": "DoNotSchedule",
            "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]}
        }))
        .expect("a constraint")
    };
    let node = |name: &str, zone: &str| {
        NodeBuilder::new(name)
            .label("hostname", name)
            .label("zone", zone)
    };
    let snap = snapshot(
        vec![
            node("node-a", "zone1"),
            node("node-b", "zone1"),
            node("node-x", "zone2"),
        ],
        vec![
            foo_pod("pod-a1", "node-a", 100).build(),
            foo_pod("pod-a2", "node-a", 0).build(),
            foo_pod("pod-b1", "node-b", 0).build(),
            foo_pod("pod-x1", "node-x", 1000).build(),
            foo_pod("pod-x2", "node-x", 1000).build(),
        ],
    );
    let p = PodBuilder::new("p")
        .label("foo", "")
        .priority(1000)
        .spread(spread("zone"))
        .spread(spread("hostname"))
        .info();
    assert_eq!(
        victims_on(&snap, &p, "node-a"),
        ["pod-a2"],
        "pod-a1 is reprieved"
    );
    assert_eq!(victims_on(&snap, &p, "node-b"), ["pod-b1"]);
    assert!(
        victims_on(&snap, &p, "node-x").is_empty(),
        "no victim on node-x"
    );
}

/// upstream's TestDryRunPreemption "pod with anti-affinity is preempted": the pod whose own
/// anti-affinity keeps the preemptor off its node goes; the others stay.
#[test]
fn preemption_removes_the_pod_whose_anti_affinity_blocks_as_upstream() {
    let anti: k8s_openapi::api::core::v1::Affinity = serde_json::from_value(serde_json::json!({
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchExpressions": [{"key": "foo", "operator": "Exists"}]},
            "topologyKey": "hostname"
        }]}
    }))
    .expect("an affinity");
    let node = |name: &str| NodeBuilder::new(name).label("hostname", name);
    let snap = snapshot(
        vec![node("node1"), node("node2")],
        vec![
            foo_pod("p1.1", "node1", 0)
                .req_cpu("100m")
                .affinity(anti)
                .build(),
            PodBuilder::new("p1.2")
                .node_name("node1")
                .priority(100)
                .req_cpu("100m")
                .build(),
            PodBuilder::new("p1.3")
                .node_name("node1")
                .priority(1000)
                .req_cpu("100m")
                .build(),
            PodBuilder::new("p2")
                .node_name("node2")
                .priority(1000)
                .req_cpu("100m")
                .build(),
        ],
    );
    let p = PodBuilder::new("p")
        .label("foo", "")
        .priority(1000)
        .req_cpu("100m")
        .info();
    assert_eq!(
        victims_on(&snap, &p, "node1"),
        ["p1.1"],
        "p1.2 is reprieved"
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

/// upstream's TestSelectBestCandidate, criteria three to five: the preemptor asks for the
/// whole node, so every pod on a node is a victim; each row names the node upstream picks.
/// Start times are nanoseconds since the epoch (upstream's epochTimeN).
#[test]
fn candidates_are_picked_as_upstreams_select_best_candidate_table() {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
    const NEG: i32 = -100;
    const LOW: i32 = 0;
    const MID: i32 = 100;
    const HIGH: i32 = 1000;
    let now = Timestamp::now();
    let victim = |name: String, priority: i32, start: i64| {
        let at = Timestamp::from_nanosecond(i128::from(start)).expect("a time");
        Arc::new(
            PodBuilder::new(&name)
                .priority(priority)
                .with(|p| {
                    p.status = Some(PodStatus {
                        start_time: Some(Time(at)),
                        ..Default::default()
                    })
                })
                .info(),
        )
    };
    // (node, [(priority, start)]) for each node; victims most important first, as found.
    let candidates = |nodes: &[(&str, &[(i32, i64)])]| -> Vec<Candidate> {
        nodes
            .iter()
            .map(|(node, pods)| {
                let mut victims: Vec<_> = pods
                    .iter()
                    .enumerate()
                    .map(|(i, (p, t))| victim(format!("{node}-{i}"), *p, *t))
                    .collect();
                victims.sort_by(|a, b| {
                    dry_run::more_important_first(
                        a,
                        b,
                        now,
                        crate::k8s::release::Release::default(),
                    )
                });
                Candidate {
                    node: (*node).into(),
                    victims,
                    pdb_violations: 0,
                }
            })
            .collect()
    };
    let rows: [(&str, Vec<Candidate>, &str); 7] = [
        (
            "when highest priorities are the same, minimum sum of priorities is picked",
            candidates(&[
                ("node1", &[(MID, 0), (MID, 0)]),
                ("node2", &[(MID, 0), (LOW, 0)]),
                ("node3", &[(MID, 0), (MID, 0)]),
            ]),
            "node2",
        ),
        (
            "sum of adjusted priorities is considered",
            candidates(&[
                ("node1", &[(MID, 0), (NEG, 0), (NEG, 0)]),
                ("node2", &[(MID, 0), (NEG, 0)]),
                ("node3", &[(MID, 0), (NEG, 0), (LOW, 0)]),
            ]),
            "node2",
        ),
        (
            "when highest priority and sum are the same, minimum number of pods is picked",
            candidates(&[
                ("node1", &[(MID, 0), (NEG, 0), (MID, 0), (NEG, 0)]),
                ("node2", &[(MID, 0), (NEG, 0)]),
                ("node3", &[(MID, 0), (NEG, 0), (LOW, 0)]),
            ]),
            "node2",
        ),
        (
            "non-overlapping lowest high priority, sum priorities, and number of pods",
            candidates(&[
                ("node1", &[(MID, 0), (LOW, 0), (LOW, 0)]),
                ("node2", &[(HIGH, 0)]),
                ("node3", &[(MID, 0), (LOW, 0), (LOW, 0), (LOW, 0)]),
                ("node4", &[(MID, 0), (MID, 0), (MID, 0), (NEG, 0)]),
            ]),
            "node1",
        ),
        (
            "same priority, same number of victims, different start time for each node's pod",
            candidates(&[
                ("node1", &[(MID, 2), (MID, 2)]),
                ("node2", &[(MID, 3), (MID, 3)]),
                ("node3", &[(MID, 1), (MID, 1)]),
            ]),
            "node2",
        ),
        (
            "same priority, same number of victims, different start time for all pods",
            candidates(&[
                ("node1", &[(MID, 4), (MID, 2)]),
                ("node2", &[(MID, 5), (MID, 1)]),
                ("node3", &[(MID, 3), (MID, 6)]),
            ]),
            "node3",
        ),
        (
            "different priority, same number of victims, different start time for all pods",
            candidates(&[
                ("node1", &[(LOW, 4), (MID, 2)]),
                ("node2", &[(MID, 6), (LOW, 1)]),
                ("node3", &[(LOW, 3), (MID, 5)]),
            ]),
            "node2",
        ),
    ];
    for (name, cands, want) in rows {
        assert_eq!(
            dry_run::pick(&cands, now).map(|c| c.node.as_str()),
            Some(want),
            "{name}"
        );
    }
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
    // b is selected by both; c by the second only.
    let budgets = [budget("first", "b", 0), budget("second", "b,c", 1)];
    let pod = |name: &str| Arc::new(PodBuilder::new(name).label("app", name).info());
    let (violating, fine) = super::dry_run::split_by_budgets(
        &[pod("b"), pod("c")],
        &budgets,
        crate::k8s::release::Release::default(),
    );
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

/// The pod-counting plugins' state laid over pods taken off or added to a node (see the two
/// tests below): six nodes in three zones with pods of apps `a` (counted by the incoming pod's
/// hard zone spread), `b` (its required zone affinity), `c` (its required hostname
/// anti-affinity), some of them shunning `a` (required hostname anti-affinity), and the
/// incoming pod, `app=a`, of priority 1000.
fn constrained_cluster() -> (Snapshot, PodInfo) {
    let nodes: Vec<NodeBuilder> = (0..6)
        .map(|i| {
            NodeBuilder::new(&format!("n{i}"))
                .label("topology.kubernetes.io/zone", &format!("z{}", i % 3))
                .allocatable("cpu", "64")
        })
        .collect();
    // (node, app, shuns app=a)
    let layout = [
        (0, "a", false),
        (0, "b", false),
        (0, "c", true),
        (1, "a", false),
        (1, "a", true),
        (2, "b", false),
        (3, "c", false),
        (3, "a", false),
        (4, "b", true),
        (4, "b", false),
        (5, "a", false),
        (5, "c", false),
    ];
    let pods = layout
        .iter()
        .enumerate()
        .map(|(i, &(node, app, shuns))| {
            constrained_pod(&format!("{app}{i}"), app, shuns)
                .node_name(&format!("n{node}"))
                .build()
        })
        .collect();
    let incoming: k8s_openapi::api::core::v1::Affinity = serde_json::from_value(serde_json::json!({
        "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "b"}}, "topologyKey": "topology.kubernetes.io/zone"}
        ]},
        "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
            {"labelSelector": {"matchLabels": {"app": "c"}}, "topologyKey": "kubernetes.io/hostname"}
        ]}
    }))
    .expect("affinity");
    let spread: k8s_openapi::api::core::v1::TopologySpreadConstraint =
        serde_json::from_value(serde_json::json!({
            "maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
            "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "a"}}
        }))
        .expect("constraint");
    let pod = PodBuilder::new("vip")
        .label("app", "a")
        .req_cpu("1")
        .priority(1000)
        .affinity(incoming)
        .spread(spread)
        .info();
    (snapshot(nodes, pods), pod)
}

/// A pod of `app` asking for a CPU, with a required hostname anti-affinity to `app=a` if it
/// `shuns` them.
fn constrained_pod(name: &str, app: &str, shuns: bool) -> PodBuilder {
    let pod = PodBuilder::new(name)
        .label("app", app)
        .req_cpu("1")
        .priority(1000);
    if !shuns {
        return pod;
    }
    pod.affinity(
        serde_json::from_value(serde_json::json!({
            "podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                {"labelSelector": {"matchLabels": {"app": "a"}}, "topologyKey": "kubernetes.io/hostname"}
            ]}
        }))
        .expect("affinity"),
    )
}

/// The default profile, [`constrained_cluster`] and the incoming pod's cycle state after
/// PreFilter on it.
fn prefiltered_constrained() -> (
    crate::scheduler::framework::profile::CompiledProfile,
    Snapshot,
    PodInfo,
    CycleState,
) {
    let profile = default_profile("tether-scheduler", &Handle::default())
        .expect("compiles")
        .profile;
    let (snap, pod) = constrained_cluster();
    let mut cycle = CycleState::new();
    profile
        .run_pre_filter_alone(&mut cycle, &pod, &snap)
        .expect("prefilter");
    (profile, snap, pod, cycle)
}

/// Asserts that every node of `view` answers `pod`'s Filter with `laid_over` as after a
/// PreFilter run afresh on `view`; `case` names the case.
fn assert_as_afresh(
    profile: &crate::scheduler::framework::profile::CompiledProfile,
    pod: &PodInfo,
    laid_over: &CycleState,
    view: &Snapshot,
    case: impl FnOnce() -> String,
) {
    let verdicts = |state: &CycleState| -> Vec<String> {
        view.nodes()
            .iter()
            .map(|n| {
                let s = profile.run_filter(state, pod, n);
                format!("{}: {:?} {}", n.name, s.code, s.message())
            })
            .collect()
    };
    let mut afresh = CycleState::new();
    profile
        .run_pre_filter_alone(&mut afresh, pod, view)
        .expect("prefilter");
    assert_eq!(verdicts(laid_over), verdicts(&afresh), "{}", case());
}

/// A dry run lays the pods it takes off a node over the cycle's counts (upstream's RemovePod)
/// instead of running PodTopologySpread's and InterPodAffinity's PreFilter again: every node's
/// Filter answers as after a PreFilter run on the snapshot without those pods, for every set
/// of pods taken off every node.
#[test]
fn pods_taken_off_in_a_dry_run_count_as_if_prefilter_ran_without_them() {
    let (profile, snap, pod, cycle) = prefiltered_constrained();
    let mut compared = 0;
    for node in snap.nodes() {
        for mask in 1u32..(1 << node.pods.len()) {
            let mut trial = NodeInfo::clone(node);
            let mut removed: Vec<&PodInfo> = Vec::new();
            for (i, p) in node.pods.iter().enumerate() {
                if mask & (1 << i) != 0 {
                    trial.remove_pod(p.uid());
                    removed.push(p.as_ref());
                }
            }
            let without = snap.with_node(trial.clone());

            let mut laid_over = cycle.clone();
            let never = || -> Snapshot { panic!("both plugins rewrite their own state") };
            profile
                .pre_filters_without(&mut laid_over, &pod, node, &removed, &snap, &never)
                .expect("no rejection");
            assert_as_afresh(&profile, &pod, &laid_over, &without, || {
                let names: Vec<&str> = removed.iter().map(|p| p.name()).collect();
                format!("{} without {names:?}", node.name)
            });
            compared += 1;
        }
    }
    assert_eq!(compared, 20, "every set of pods of every node");
}

/// Pods nominated to a node ahead of the pod count in the spread and affinity counts too
/// (upstream's AddPod, in RunFilterPluginsWithNominatedPods): with every set of four pods
/// (of apps a, b, c, and one shunning a) nominated to every node, every node's Filter answers
/// as after a PreFilter run on a snapshot with them placed there.
#[test]
fn pods_nominated_to_a_node_count_as_if_placed_there() {
    let (profile, snap, pod, cycle) = prefiltered_constrained();
    let candidates: Vec<Arc<PodInfo>> = [
        ("na", "a", false),
        ("nb", "b", false),
        ("nc", "c", false),
        ("nx", "x", true),
    ]
    .into_iter()
    .map(|(name, app, shuns)| Arc::new(constrained_pod(name, app, shuns).info()))
    .collect();
    let mut compared = 0;
    for node in snap.nodes() {
        for mask in 1u32..(1 << candidates.len()) {
            let ahead: Vec<Arc<PodInfo>> = (candidates.iter().enumerate())
                .filter(|(i, _)| mask & (1 << i) != 0)
                .map(|(_, p)| p.clone())
                .collect();
            let mut with = NodeInfo::clone(node);
            for p in &ahead {
                with.add_pod(p.clone());
            }
            let placed = snap.with_node(with);

            let laid_over = profile
                .state_with_pods(&cycle, &pod, node, &ahead, &snap)
                .expect("both plugins count pods");
            assert_as_afresh(&profile, &pod, &laid_over, &placed, || {
                let names: Vec<&str> = ahead.iter().map(|p| p.name()).collect();
                format!("{} with {names:?} nominated", node.name)
            });
            compared += 1;
        }
    }
    assert_eq!(compared, 90, "every set of pods on every node");
}
