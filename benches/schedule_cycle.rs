//! One scheduling cycle (Filter and Score over every node, default profile) of a pod over
//! 5,000 nodes with 10 pods each: plain, with topology spread and inter-pod affinity in play,
//! and a pod of high priority that fits nowhere until preemption makes room (without and with
//! constraints of its own on other pods).
//!
//! The plain and spread+affinity cycles each take a snapshot in which one node changed (a pod
//! bound to it or gone again), as the scheduler's next cycle after a bind does: sums kept from
//! the last cycle are brought up to date, not read unchanged. The bound pods are of an app no
//! term selects, and, in a third case, of the incoming pod's own app.
//!
//! `cargo bench --bench schedule_cycle`

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Node;
use tether::k8s::pod::Pod;
use tether::scheduler::algorithm::{ScheduleResult, schedule_pod};
use tether::scheduler::framework::node_info::NodeInfo;
use tether::scheduler::framework::pod_info::PodInfo;
use tether::scheduler::framework::snapshot::Snapshot;
use tether::scheduler::framework::{CycleState, NoNominations, Nomination};
use tether::scheduler::plugins::handle::Handle;
use tether::scheduler::profile::default_profile;

const NODES: usize = 5000;
const PODS_PER_NODE: usize = 10;

fn node(i: usize) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("node-{i}"), "labels": {
            "kubernetes.io/hostname": format!("node-{i}"),
            "topology.kubernetes.io/zone": format!("zone-{}", i % 10),
        }},
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }))
    .expect("valid node")
}

fn pod(name: &str, app: &str, extra: serde_json::Value) -> Pod {
    let mut spec = serde_json::json!({
        "schedulerName": "tether-scheduler",
        "containers": [{"name": "c", "image": "registry.local/app:1", "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}],
    });
    if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
        s.extend(e.clone());
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "bench", "uid": name, "labels": {"app": app}},
        "spec": spec,
    }))
    .expect("valid pod")
}

fn snapshot(existing_extra: &serde_json::Value) -> Snapshot {
    let infos = (0..NODES)
        .map(|i| {
            let mut info = NodeInfo::new(format!("node-{i}"));
            info.set_node(Arc::new(node(i)));
            for j in 0..PODS_PER_NODE {
                let mut p = pod(
                    &format!("p-{i}-{j}"),
                    &format!("app-{}", j % 5),
                    existing_extra.clone(),
                );
                p.spec.get_or_insert_with(Default::default).node_name = Some(format!("node-{i}"));
                info.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
            }
            info
        })
        .collect();
    Snapshot::from_node_infos(infos)
}

fn bench(c: &mut Criterion) {
    let profile = default_profile("tether-scheduler", &Handle::default())
        .expect("default profile")
        .profile;
    let start = AtomicUsize::new(0);
    let spread_and_affinity = serde_json::json!({
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "app-0"}}},
                    {"maxSkew": 2, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway", "labelSelector": {"matchLabels": {"app": "app-0"}}}
                ],
                "affinity": {
                    "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 50, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "app-0"}}, "topologyKey": "kubernetes.io/hostname"}}
                    ]},
                    "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                        {"weight": 10, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "app-1"}}, "topologyKey": "topology.kubernetes.io/zone"}}
                    ]}
                }
    });
    let existing_terms = serde_json::json!({"affinity": {"podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 1, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "app-4"}}, "topologyKey": "kubernetes.io/hostname"}}
    ]}}});
    // (name, the incoming pod's spec, the existing pods' spec, the app of the pod bound
    // between two cycles). A pod of app-3 is selected by no term: every node stays feasible,
    // as in a snapshot that never changes. Pods of app-0 (the incoming pod's own workload),
    // bound one by one to the first 100 nodes, put the zones they reach one pod ahead of the
    // rest, so that the hard zone spread rejects those zones' nodes (about half of them while
    // the pods are added): the search looks at more nodes and says why for each.
    let cases: [(&str, serde_json::Value, serde_json::Value, &str); 3] = [
        (
            "plain",
            serde_json::json!({}),
            serde_json::json!({}),
            "app-3",
        ),
        (
            "spread+affinity",
            spread_and_affinity.clone(),
            existing_terms.clone(),
            "app-3",
        ),
        (
            "spread+affinity, binds of its own app",
            spread_and_affinity,
            existing_terms,
            "app-0",
        ),
    ];
    let mut group = c.benchmark_group("schedule_cycle_5000_nodes");
    group.sample_size(20);
    for (name, incoming, existing, bound_app) in cases {
        let snap = snapshot(&existing);
        let incoming = PodInfo::new(Arc::new(pod("incoming", "app-0", incoming)));
        // Each of the first 100 nodes as it is and with one more pod of `bound_app`; the cycles
        // go through them one at a time, adding the pod and taking it off again.
        let as_is: Vec<Arc<NodeInfo>> = snap.nodes()[..100].to_vec();
        let with_one: Vec<Arc<NodeInfo>> = as_is
            .iter()
            .enumerate()
            .map(|(i, info)| {
                let mut info = NodeInfo::clone(info);
                let mut p = pod(&format!("bound-{i}"), bound_app, existing.clone());
                p.spec.get_or_insert_with(Default::default).node_name = Some(info.name.clone());
                info.add_pod(Arc::new(PodInfo::new(Arc::new(p))));
                Arc::new(info)
            })
            .collect();
        let mut line = snap.clone();
        let mut turn = 0usize;
        group.bench_function(name, |b| {
            b.iter(|| {
                let i = turn % as_is.len();
                let next = if (turn / as_is.len()).is_multiple_of(2) {
                    &with_one[i]
                } else {
                    &as_is[i]
                };
                turn += 1;
                line = line.with_changed(
                    std::iter::once(next.clone()),
                    line.namespace_labels.clone(),
                    line.image_node_counts.clone(),
                );
                let mut state = CycleState::new();
                let result = schedule_pod(
                    &profile,
                    &mut state,
                    &incoming,
                    &line,
                    &start,
                    &NoNominations,
                );
                assert!(
                    matches!(result, ScheduleResult::Scheduled { .. }),
                    "{result:?}"
                );
            })
        });
    }
    // Preemption: every node is full for a pod of priority 1000 asking for 62 of its 64 CPUs,
    // until two of its ten pods of priority 0 go. DefaultPreemption dry-runs 500 nodes (its
    // 10 %) and picks one; the evictions are not carried out here.
    // The same preemptor with its own hard zone spread and required anti-affinity: each
    // dry run also runs PodTopologySpread's and InterPodAffinity's PreFilters again.
    let snap = snapshot(&serde_json::json!({}));
    let vip_spec = |extra: serde_json::Value| {
        let mut spec = serde_json::json!({"priority": 1000, "containers": [{"name": "c", "image": "registry.local/app:1",
            "resources": {"requests": {"cpu": "62", "memory": "512Mi"}}}]});
        if let (Some(s), Some(e)) = (spec.as_object_mut(), extra.as_object()) {
            s.extend(e.clone());
        }
        spec
    };
    let preemptors = [
        ("preemption", serde_json::json!({})),
        (
            "preemption (spread + affinity)",
            serde_json::json!({
                "topologySpreadConstraints": [
                    {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule", "labelSelector": {"matchLabels": {"app": "app-0"}}}
                ],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "vip"}}, "topologyKey": "kubernetes.io/hostname"}
                ]}}
            }),
        ),
    ];
    for (name, extra) in preemptors {
        let vip = PodInfo::new(Arc::new(pod("vip", "app-0", vip_spec(extra))));
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut state = CycleState::new();
                let result =
                    schedule_pod(&profile, &mut state, &vip, &snap, &start, &NoNominations);
                assert!(
                    matches!(&result, ScheduleResult::Unschedulable(d) if matches!(d.nomination, Some(Nomination::Node(_)))),
                    "{result:?}"
                );
            })
        });
    }
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
