//! Sums kept from cycle to cycle (PodTopologySpread's counts, InterPodAffinity's scores) answer
//! as a walk made afresh does, along any line of snapshots: nodes gaining and losing pods,
//! changing labels and taints, what-if views in between, pods asking in turns.

use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use proptest::prelude::*;
use serde_json::json;

use crate::k8s::labels::Selector;
use crate::k8s::pod::Pod;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{CycleState, Plugin};
use crate::scheduler::plugins::inter_pod_affinity::{InterPodAffinity, InterPodAffinityArgs};
use crate::scheduler::plugins::pod_topology_spread::{
    DefaultSelectorSource, PodTopologySpread, PodTopologySpreadArgs,
};
use crate::scheduler::testing::{NodeBuilder, PodBuilder};

const NODES: usize = 6;

/// One change to the cluster.
#[derive(Clone, Debug)]
enum Change {
    /// A pod of app `app` (0..3) in namespace `ns` (0..2), with a preferred anti-affinity term
    /// toward app 1 when `terms`, comes to node `node`.
    Bind {
        node: usize,
        app: u8,
        ns: u8,
        terms: bool,
    },
    /// The oldest pod of the node leaves.
    Leave { node: usize },
    /// The node moves to zone `zone` (3: no zone label).
    Relabel { node: usize, zone: u8 },
    /// The node gains or loses a NoSchedule taint.
    Taint { node: usize },
    /// A what-if view of the node without its pods is asked, then the line goes on.
    View { node: usize },
}

fn change() -> impl Strategy<Value = Change> {
    let node = 0..NODES;
    prop_oneof![
        4 => (node.clone(), 0u8..3, 0u8..2, any::<bool>())
            .prop_map(|(node, app, ns, terms)| Change::Bind { node, app, ns, terms }),
        2 => node.clone().prop_map(|node| Change::Leave { node }),
        1 => (node.clone(), 0u8..4).prop_map(|(node, zone)| Change::Relabel { node, zone }),
        1 => node.clone().prop_map(|node| Change::Taint { node }),
        1 => node.prop_map(|node| Change::View { node }),
    ]
}

/// A node as the test holds it.
#[derive(Clone)]
struct Model {
    zone: u8,
    tainted: bool,
    pods: Vec<Pod>,
}

fn info(i: usize, m: &Model) -> NodeInfo {
    let name = format!("n{i}");
    let mut node = NodeBuilder::new(&name).label("kubernetes.io/hostname", &name);
    if m.zone < 3 {
        node = node.label("topology.kubernetes.io/zone", &format!("z{}", m.zone));
    }
    if m.tainted {
        node = node.taint("dedicated", "x", "NoSchedule");
    }
    node.info(m.pods.clone())
}

fn existing(name: &str, app: u8, ns: u8, terms: bool) -> Pod {
    let mut pod = PodBuilder::new(name)
        .namespace(&format!("ns{ns}"))
        .label("app", &format!("app{app}"));
    if terms {
        pod = pod.affinity(
            serde_json::from_value(json!({
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "app1"}}, "topologyKey": "topology.kubernetes.io/zone"}}
                ]},
                "podAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"labelSelector": {"matchLabels": {"app": "app2"}}, "topologyKey": "kubernetes.io/hostname",
                     "namespaceSelector": {"matchLabels": {"team": "t0"}}}
                ]}
            }))
            .expect("affinity"),
        );
    }
    pod.build()
}

fn spread(key: &str, when: &str, extra: serde_json::Value) -> TopologySpreadConstraint {
    let mut c = json!({"maxSkew": 1, "topologyKey": key, "whenUnsatisfiable": when,
        "labelSelector": {"matchLabels": {"app": "app0"}}});
    if let (Some(c), Some(e)) = (c.as_object_mut(), extra.as_object()) {
        c.extend(e.clone());
    }
    serde_json::from_value(c).expect("constraint")
}

/// The pods that take turns asking: spread by zone (hard and soft, one honoring taints, one
/// with a node selector), and preferred affinity both ways.
fn askers() -> Vec<PodInfo> {
    let zone = "topology.kubernetes.io/zone";
    let a = PodBuilder::new("a")
        .namespace("ns0")
        .label("app", "app0")
        .spread(spread(zone, "DoNotSchedule", json!({})))
        .spread(spread(zone, "ScheduleAnyway", json!({})))
        .build();
    let b = PodBuilder::new("b")
        .namespace("ns0")
        .label("app", "app1")
        .node_selector("topology.kubernetes.io/zone", "z1")
        .spread(spread(zone, "DoNotSchedule", json!({"nodeTaintsPolicy": "Honor"})))
        .spread(spread("kubernetes.io/hostname", "ScheduleAnyway", json!({})))
        .affinity(
            serde_json::from_value(json!({
                "podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "app2"}}, "topologyKey": zone}}
                ]},
                "podAntiAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 7, "podAffinityTerm": {"labelSelector": {"matchLabels": {"app": "app0"}}, "topologyKey": "kubernetes.io/hostname"}}
                ]}
            }))
            .expect("affinity"),
        )
        .build();
    let c = PodBuilder::new("c")
        .namespace("ns1")
        .label("app", "app1")
        .build();
    [a, b, c]
        .into_iter()
        .map(|p| PodInfo::new(Arc::new(p)))
        .collect()
}

/// What the plugins answer for `pod` on `snapshot`: each node's Filter code and reasons, each
/// feasible node's raw and normalized scores.
fn answers(plugins: &[Arc<dyn Plugin>], pod: &PodInfo, snapshot: &Snapshot) -> Vec<String> {
    let mut out = Vec::new();
    for plugin in plugins {
        let mut state = CycleState::new();
        let mut feasible = Vec::new();
        if let Some(pf) = plugin.pre_filter() {
            let (_, status) = pf.pre_filter(&mut state, pod, snapshot);
            out.push(format!("{} prefilter {:?}", plugin.name(), status.code));
            for node in snapshot.nodes() {
                let status = plugin.filter().map(|f| f.filter(&state, pod, node));
                let ok = status.as_ref().is_none_or(|s| s.is_success());
                out.push(format!(
                    "{} filter {} {:?}",
                    plugin.name(),
                    node.name,
                    status
                ));
                if ok {
                    feasible.push(node.clone());
                }
            }
        }
        let Some(ps) = plugin.pre_score() else {
            continue;
        };
        let status = ps.pre_score(&mut state, pod, &feasible, snapshot);
        out.push(format!("{} prescore {:?}", plugin.name(), status.code));
        if !status.is_success() {
            continue;
        }
        let Some(score) = plugin.score() else {
            continue;
        };
        let mut scores: Vec<_> = feasible
            .iter()
            .map(|n| crate::scheduler::framework::NodeScore {
                name: n.name.clone(),
                score: score.score(&state, pod, n).unwrap_or(i64::MIN),
            })
            .collect();
        out.push(format!("{} scores {:?}", plugin.name(), scores));
        let _ = score.normalize_scores(&state, pod, &mut scores);
        out.push(format!("{} normalized {:?}", plugin.name(), scores));
    }
    out
}

/// Selects pods of app0 as their workload's selector: what the default constraints count.
struct App0;

impl DefaultSelectorSource for App0 {
    fn default_selector(&self, _pod: &PodInfo) -> Option<Selector> {
        Some(Selector::from_map(
            &[("app".to_string(), "app0".to_string())].into(),
        ))
    }
}

fn plugins() -> Vec<Arc<dyn Plugin>> {
    vec![
        Arc::new(PodTopologySpread::new(
            PodTopologySpreadArgs::default(),
            Arc::new(App0),
        )),
        Arc::new(InterPodAffinity::new(InterPodAffinityArgs::default())),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(200))]

    #[test]
    fn kept_sums_answer_as_a_fresh_walk(
        zones in prop::collection::vec(0u8..4, NODES),
        changes in prop::collection::vec(change(), 1..40),
    ) {
        let mut models: Vec<Model> = zones
            .into_iter()
            .map(|zone| Model { zone, tainted: false, pods: Vec::new() })
            .collect();
        let askers = askers();
        let kept = plugins();
        // One map of namespaces for the whole line (InterPodAffinity keeps its sums per map:
        // a new one is a new question), read by the existing pods' namespaceSelector.
        let namespaces = Arc::new(std::collections::HashMap::from([
            ("ns0".to_string(), [("team".to_string(), "t0".to_string())].into()),
            ("ns1".to_string(), [("team".to_string(), "t1".to_string())].into()),
        ]));
        let mut snapshot = Snapshot::from_node_infos(
            models.iter().enumerate().map(|(i, m)| info(i, m)).collect(),
        );
        for (step, change) in changes.into_iter().enumerate() {
            let node = match &change {
                Change::Bind { node, app, ns, terms } => {
                    let name = format!("p{step}");
                    models[*node].pods.push(existing(&name, *app, *ns, *terms));
                    *node
                }
                Change::Leave { node } => {
                    if !models[*node].pods.is_empty() {
                        models[*node].pods.remove(0);
                    }
                    *node
                }
                Change::Relabel { node, zone } => {
                    models[*node].zone = *zone;
                    *node
                }
                Change::Taint { node } => {
                    models[*node].tainted = !models[*node].tainted;
                    *node
                }
                Change::View { node } => {
                    let view = snapshot.with_node(info(*node, &Model { pods: Vec::new(), ..models[*node].clone() }));
                    let pod = &askers[step % askers.len()];
                    prop_assert_eq!(answers(&kept, pod, &view), answers(&plugins(), pod, &view));
                    continue;
                }
            };
            snapshot = snapshot.with_changed(
                [Arc::new(info(node, &models[node]))].into_iter(),
                namespaces.clone(),
                Arc::default(),
            );
            // Not every pod asks after every change: kept sums skip snapshots too.
            for pod in askers.iter().filter(|_| step % 3 != 1) {
                prop_assert_eq!(answers(&kept, pod, &snapshot), answers(&plugins(), pod, &snapshot));
            }
        }
    }
}
