//! NodeResourcesFit, row by row from kube-scheduler's own tests.

use serde_json::json;

use super::fit::*;
use super::resource_allocation::*;
use super::scoring::*;
use crate::k8s::names::is_extended_resource_name;
use crate::k8s::pod::Container;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::*;
use crate::scheduler::framework::*;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::testing::{NodeBuilder, PodBuilder};

/// A pod with one container requesting `cpu` and `memory` ("" requests nothing).
fn pod(name: &str, cpu: &str, memory: &str) -> PodBuilder {
    let mut b = PodBuilder::new(name).container();
    for (resource, quantity) in [("cpu", cpu), ("memory", memory)] {
        if !quantity.is_empty() {
            b = b.req(resource, quantity);
        }
    }
    b
}

/// A node (4 CPUs, 16Gi, 110 pods, plus `extra` allocatable) running `pods`.
fn node(extra: &[(&str, &str)], pods: Vec<PodBuilder>) -> NodeInfo {
    let b = extra
        .iter()
        .fold(NodeBuilder::new("n"), |b, (r, q)| b.allocatable(r, q));
    b.info(pods.into_iter().map(PodBuilder::build).collect())
}

fn rejected(code: Code, reasons: &[&str]) -> Status {
    Status::with_reasons(code, reasons.iter().map(|r| r.to_string()).collect())
}

fn plugin(args: NodeResourcesFitArgs) -> NodeResourcesFit {
    NodeResourcesFit::from_validated(args)
}

/// Runs Filter with PreFilter's state and without it; both must agree.
fn filter(plugin: &NodeResourcesFit, pod: PodBuilder, node: &NodeInfo) -> Status {
    let pod = pod.info();
    let mut state = CycleState::new();
    let (result, status) =
        PreFilterPlugin::pre_filter(plugin, &mut state, &pod, &Snapshot::default());
    assert_eq!(
        (result, status),
        (PreFilterResult::all_nodes(), Status::success())
    );
    let with_state = FilterPlugin::filter(plugin, &state, &pod, node);
    let without = FilterPlugin::filter(plugin, &CycleState::new(), &pod, node);
    assert_eq!(
        with_state, without,
        "Filter differs without PreFilter state"
    );
    with_state
}

/// Runs Score after PreScore and without it; both must agree.
fn score(plugin: &NodeResourcesFit, pod: PodBuilder, node: &NodeInfo) -> i64 {
    let pod = pod.info();
    let mut state = CycleState::new();
    let status = PreScorePlugin::pre_score(plugin, &mut state, &pod, &[], &Snapshot::default());
    assert!(status.is_success());
    let with_state = ScorePlugin::score(plugin, &state, &pod, node);
    let without = ScorePlugin::score(plugin, &CycleState::new(), &pod, node);
    assert_eq!(with_state, without, "Score differs without PreScore state");
    with_state.expect("score")
}

const GPU: &str = "example.com/gpu";

#[test]
fn filter_checks_every_requested_resource_as_kube_scheduler() {
    use Code::{Unschedulable, UnschedulableAndUnresolvable as Unresolvable};
    let cases = [
        (
            "a pod requesting nothing fits",
            pod("p", "", ""),
            node(&[], vec![]),
            Status::success(),
        ),
        (
            "fits beside the pods already there",
            pod("p", "1", "8Gi"),
            node(&[], vec![pod("e", "3", "8Gi")]),
            Status::success(),
        ),
        (
            "too many pods",
            pod("p", "", ""),
            node(&[("pods", "1")], vec![pod("e", "", "")]),
            rejected(Unschedulable, &["Too many pods"]),
        ),
        (
            "insufficient cpu",
            pod("p", "1", ""),
            node(&[], vec![pod("e", "3500m", "")]),
            rejected(Unschedulable, &["Insufficient cpu"]),
        ),
        (
            "insufficient memory",
            pod("p", "", "2Gi"),
            node(&[], vec![pod("e", "", "15Gi")]),
            rejected(Unschedulable, &["Insufficient memory"]),
        ),
        (
            "every reason is kept, pods first",
            pod("p", "1", "2Gi"),
            node(&[("pods", "1")], vec![pod("e", "3500m", "15Gi")]),
            rejected(
                Unschedulable,
                &["Too many pods", "Insufficient cpu", "Insufficient memory"],
            ),
        ),
        (
            "a request beyond the whole node is unresolvable",
            pod("p", "5", ""),
            node(&[], vec![]),
            rejected(Unresolvable, &["Insufficient cpu"]),
        ),
        (
            "an init container larger than the containers counts",
            pod("p", "100m", "").init_cpu("4", false),
            node(&[], vec![pod("e", "1", "")]),
            rejected(Unschedulable, &["Insufficient cpu"]),
        ),
        (
            "an init container smaller than the containers does not count",
            pod("p", "1", "").init_cpu("500m", false),
            node(&[], vec![pod("e", "3", "")]),
            Status::success(),
        ),
        (
            "a sidecar adds to the containers",
            pod("p", "1", "").init_cpu("500m", true),
            node(&[], vec![pod("e", "3", "")]),
            rejected(Unschedulable, &["Insufficient cpu"]),
        ),
        (
            "pod overhead counts",
            pod("p", "1", "").overhead_cpu("100m"),
            node(&[], vec![pod("e", "3", "")]),
            rejected(Unschedulable, &["Insufficient cpu"]),
        ),
        (
            "insufficient ephemeral-storage",
            pod("p", "", "").req("ephemeral-storage", "5Gi"),
            node(
                &[("ephemeral-storage", "10Gi")],
                vec![pod("e", "", "").req("ephemeral-storage", "8Gi")],
            ),
            rejected(Unschedulable, &["Insufficient ephemeral-storage"]),
        ),
        (
            "an extended resource that fits",
            pod("p", "", "").req(GPU, "2"),
            node(&[(GPU, "4")], vec![pod("e", "", "").req(GPU, "2")]),
            Status::success(),
        ),
        (
            "insufficient extended resource",
            pod("p", "", "").req(GPU, "3"),
            node(&[(GPU, "4")], vec![pod("e", "", "").req(GPU, "2")]),
            rejected(Unschedulable, &["Insufficient example.com/gpu"]),
        ),
        (
            "an extended resource the node does not have",
            pod("p", "", "").req(GPU, "1"),
            node(&[], vec![]),
            rejected(Unresolvable, &["Insufficient example.com/gpu"]),
        ),
        (
            "insufficient hugepages",
            pod("p", "", "").req("hugepages-2Mi", "4Mi"),
            node(&[("hugepages-2Mi", "2Mi")], vec![]),
            rejected(Unresolvable, &["Insufficient hugepages-2Mi"]),
        ),
    ];
    let fit = plugin(NodeResourcesFitArgs::default());
    for (name, pod, node, want) in cases {
        assert_eq!(filter(&fit, pod, &node), want, "{name}");
    }
}

/// upstream's TestEnoughRequests with pod-level resources (PodLevelResources, beta and on): the
/// pod-level requests stand for the containers' sum where they are given. The node is
/// upstream's: 10m CPU, 20 bytes, 32 pods, 5 example.com/aaa, 20 bytes of ephemeral storage
/// and 5 bytes of hugepages-2Mi.
#[test]
fn pod_level_requests_are_filtered_as_kube_scheduler() {
    use Code::{Unschedulable, UnschedulableAndUnresolvable as Unresolvable};
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    let requests = |r: &[(&str, &str)]| ResourceRequirements {
        requests: Some(
            r.iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                .collect(),
        ),
        ..Default::default()
    };
    let pod_level = |b: PodBuilder, r: &[(&str, &str)]| {
        let r = requests(r);
        b.with(move |p| p.spec.get_or_insert_with(Default::default).resources = Some(r.clone()))
    };
    let upstream_node = |pods: Vec<PodBuilder>| {
        [
            ("cpu", "10m"),
            ("memory", "20"),
            ("pods", "32"),
            ("example.com/aaa", "5"),
            ("ephemeral-storage", "20"),
            ("hugepages-2Mi", "5"),
        ]
        .iter()
        .fold(NodeBuilder::new("n"), |b, (r, q)| b.allocatable(r, q))
        .info(pods.into_iter().map(PodBuilder::build).collect())
    };
    let cases = [
        (
            "both pod-level and container-level resources fit",
            pod_level(pod("p", "1m", "1"), &[("cpu", "1m"), ("memory", "2")]),
            upstream_node(vec![pod("e", "5m", "5")]),
            Status::success(),
        ),
        (
            "pod-level cpu resource not fit",
            pod_level(pod("p", "1m", "1"), &[("cpu", "7m"), ("memory", "2")]),
            upstream_node(vec![pod("e", "5m", "5")]),
            rejected(Unschedulable, &["Insufficient cpu"]),
        ),
        (
            "pod-level memory resource not fit",
            pod_level(pod("p", "1m", "1"), &[("cpu", "3m"), ("memory", "2")]),
            upstream_node(vec![pod("e", "5m", "19")]),
            rejected(Unschedulable, &["Insufficient memory"]),
        ),
        (
            "pod-level hugepages resource fit",
            pod_level(
                PodBuilder::new("p"),
                &[("cpu", "3m"), ("memory", "2"), ("hugepages-2Mi", "5")],
            ),
            upstream_node(vec![]),
            Status::success(),
        ),
        (
            "both pod-level and container-level hugepages resource fit",
            pod_level(
                pod("p", "1m", "1").req("hugepages-2Mi", "3"),
                &[("cpu", "3m"), ("memory", "2"), ("hugepages-2Mi", "5")],
            ),
            upstream_node(vec![]),
            Status::success(),
        ),
        (
            "pod-level hugepages resource not fit",
            pod_level(PodBuilder::new("p"), &[("hugepages-2Mi", "10")]),
            upstream_node(vec![]),
            rejected(Unresolvable, &["Insufficient hugepages-2Mi"]),
        ),
        (
            "one pod-level cpu resource fits and all init and non-init containers resources fit",
            pod_level(pod("p", "1m", "1"), &[("cpu", "3m"), ("memory", "2")]).with(|p| {
                p.spec.get_or_insert_with(Default::default).init_containers = Some(
                    vec![Container {
                        name: "init".into(),
                        resources: Some(requests(&[("cpu", "1m"), ("memory", "1")])),
                        ..Default::default()
                    }]
                    .into(),
                )
            }),
            upstream_node(vec![pod("e", "5m", "19")]),
            rejected(Unschedulable, &["Insufficient memory"]),
        ),
    ];
    let fit = plugin(NodeResourcesFitArgs::default());
    for (name, pod, node, want) in cases {
        assert_eq!(filter(&fit, pod, &node), want, "{name}");
    }
}

/// An extended resource a DeviceClass serves is left to DynamicResources on a node whose
/// allocatable lacks it, and checked as before on a node that has it (a device plugin's).
#[test]
fn filter_leaves_extended_resources_a_device_class_serves_to_dra() {
    use crate::scheduler::informers::Keeps;
    use crate::scheduler::informers::devices::DeviceIndex;
    use k8s_openapi::api::resource::v1::{DeviceClass, DeviceClassSpec};
    let devices = std::sync::Arc::new(DeviceIndex::default());
    let class = |name: &str, serves: Option<&str>| {
        std::sync::Arc::new(DeviceClass {
            metadata: kube::api::ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: Some(DeviceClassSpec {
                extended_resource_name: serves.map(str::to_string),
                ..Default::default()
            }),
        })
    };
    Keeps::apply(&*devices, class("gpus", Some(GPU)));
    Keeps::apply(&*devices, class("fpgas", None));
    let fit = plugin(NodeResourcesFitArgs::default()).with_devices(devices);
    let unresolvable = |r: &str| rejected(Code::UnschedulableAndUnresolvable, &[r]);
    let cases = [
        (
            "served by a class, none allocatable: DRA's",
            pod("p", "", "").req(GPU, "2"),
            node(&[], vec![]),
            Status::success(),
        ),
        (
            "the implicit name of a class: DRA's",
            pod("p", "", "").req("deviceclass.resource.kubernetes.io/fpgas", "1"),
            node(&[], vec![]),
            Status::success(),
        ),
        (
            "a device plugin's node: checked",
            pod("p", "", "").req(GPU, "2"),
            node(&[(GPU, "1")], vec![]),
            unresolvable("Insufficient example.com/gpu"),
        ),
        (
            "no class serves it: checked",
            pod("p", "", "").req("example.com/fpga", "1"),
            node(&[], vec![]),
            unresolvable("Insufficient example.com/fpga"),
        ),
    ];
    for (name, pod, node, want) in cases {
        assert_eq!(filter(&fit, pod, &node), want, "{name}");
    }
}

#[test]
fn filter_skips_ignored_extended_resources_only() {
    let args = |resources: &[&str], groups: &[&str]| NodeResourcesFitArgs {
        ignored_resources: resources.iter().map(|s| s.to_string()).collect(),
        ignored_resource_groups: groups.iter().map(|s| s.to_string()).collect(),
        ..Default::default()
    };
    let cases = [
        (
            "an ignored resource is not checked",
            args(&[GPU], &[]),
            pod("p", "", "").req(GPU, "10"),
            Status::success(),
        ),
        (
            "a resource of an ignored group is not checked",
            args(&[], &["example.com"]),
            pod("p", "", "").req(GPU, "10"),
            Status::success(),
        ),
        (
            "other extended resources are still checked",
            args(&[GPU], &[]),
            pod("p", "", "").req("example.com/fpga", "1"),
            rejected(
                Code::UnschedulableAndUnresolvable,
                &["Insufficient example.com/fpga"],
            ),
        ),
        (
            "a native resource cannot be ignored",
            args(&["hugepages-2Mi"], &[]),
            pod("p", "", "").req("hugepages-2Mi", "2Mi"),
            rejected(
                Code::UnschedulableAndUnresolvable,
                &["Insufficient hugepages-2Mi"],
            ),
        ),
        (
            "the kubernetes.io namespace is not extended, so not ignored",
            args(&[], &["kubernetes.io"]),
            pod("p", "", "").req("kubernetes.io/foo", "1"),
            rejected(
                Code::UnschedulableAndUnresolvable,
                &["Insufficient kubernetes.io/foo"],
            ),
        ),
    ];
    for (name, args, pod, want) in cases {
        assert_eq!(
            filter(&plugin(args), pod, &node(&[], vec![])),
            want,
            "{name}"
        );
    }
}

fn strategy(type_: ScoringStrategyType, resources: &[(&str, i64)]) -> NodeResourcesFitArgs {
    NodeResourcesFitArgs {
        scoring_strategy: ScoringStrategy {
            type_,
            resources: resources
                .iter()
                .map(|&(name, weight)| ResourceSpec {
                    name: name.to_string(),
                    weight,
                })
                .collect(),
            requested_to_capacity_ratio: None,
        },
        ..Default::default()
    }
}

/// An extended resource a DeviceClass serves, listed in the scoring strategy: on a node whose
/// allocatable lacks it, the node's devices of the class are its allocatable and those
/// allocated its requested (upstream's calculateDRAResourceTotals); elsewhere as before.
#[test]
fn a_scored_extended_resource_a_class_serves_counts_the_nodes_devices() {
    use crate::scheduler::informers::Keeps;
    use crate::scheduler::informers::devices::DeviceIndex;
    use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
    use std::sync::Arc;
    let devices = Arc::new(DeviceIndex::default());
    let class: DeviceClass = serde_json::from_value(json!({
        "metadata": {"name": "gpus"},
        "spec": {"extendedResourceName": GPU,
                 "selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}]},
    }))
    .expect("a class");
    Keeps::apply(&*devices, Arc::new(class));
    // Node n: four GPUs of the driver, and one of another driver the class does not select.
    let slice: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": "n-gpus"},
        "spec": {"driver": "gpu.example.com", "nodeName": "n",
                 "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "g0"}, {"name": "g1"}, {"name": "g2"}, {"name": "g3"}]},
    }))
    .expect("a slice");
    let other: ResourceSlice = serde_json::from_value(json!({
        "metadata": {"name": "n-other"},
        "spec": {"driver": "fpga.example.com", "nodeName": "n",
                 "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
                 "devices": [{"name": "f0"}]},
    }))
    .expect("a slice");
    Keeps::apply(&*devices, Arc::new(slice));
    Keeps::apply(&*devices, Arc::new(other));
    let claim: ResourceClaim = serde_json::from_value(json!({
        "metadata": {"name": "c", "namespace": "ns", "uid": "c1"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpus"}}]}},
        "status": {"allocation": {"devices": {"results": [
            {"request": "r", "driver": "gpu.example.com", "pool": "n", "device": "g1"}]}}},
    }))
    .expect("a claim");
    Keeps::apply(&*devices, Arc::new(claim));
    let fit = |kind| plugin(strategy(kind, &[(GPU, 1)])).with_devices(devices.clone());
    let wants_one = || pod("p", "", "").req(GPU, "1");
    // 4 devices, 1 allocated: with the pod's 1, least (4-2)*100/4 = 50; with its 2, least
    // (4-3)*100/4 = 25 and most 3*100/4 = 75.
    let wants_two = || pod("p", "", "").req(GPU, "2");
    assert_eq!(
        score(
            &fit(ScoringStrategyType::LeastAllocated),
            wants_one(),
            &node(&[], vec![])
        ),
        50
    );
    assert_eq!(
        score(
            &fit(ScoringStrategyType::LeastAllocated),
            wants_two(),
            &node(&[], vec![])
        ),
        25
    );
    assert_eq!(
        score(
            &fit(ScoringStrategyType::MostAllocated),
            wants_two(),
            &node(&[], vec![])
        ),
        75
    );
    // A device plugin's node: its allocatable counts, as before (8, the pod's 2: 75).
    assert_eq!(
        score(
            &fit(ScoringStrategyType::LeastAllocated),
            wants_two(),
            &node(&[(GPU, "8")], vec![])
        ),
        75
    );
    // Without the DeviceClasses the resource is left out, and nothing else is scored.
    let blind = plugin(strategy(ScoringStrategyType::LeastAllocated, &[(GPU, 1)]));
    assert_eq!(score(&blind, wants_two(), &node(&[], vec![])), 0);
}

// Expected scores worked by hand on a node of 4000m CPU and 16Gi memory.
#[test]
fn least_allocated_scores_free_room_as_kube_scheduler() {
    let default = || NodeResourcesFitArgs::default();
    let with_gpu = || {
        strategy(
            ScoringStrategyType::LeastAllocated,
            &[("cpu", 1), ("memory", 1), (GPU, 2)],
        )
    };
    let cases = [
        // cpu (3000*100)/4000 = 75, memory (14*100)/16 = 87; (75+87)/2 = 81.
        (
            "an empty node",
            default(),
            pod("p", "1", "2Gi"),
            node(&[], vec![]),
            81,
        ),
        // cpu (2000*100)/4000 = 50, memory (10*100)/16 = 62; 112/2 = 56.
        (
            "pods on the node count",
            default(),
            pod("p", "1", "2Gi"),
            node(&[], vec![pod("e", "1", "4Gi")]),
            56,
        ),
        // 100m and 200Mi: cpu 3900*100/4000 = 97, memory 16184*100/16384 = 98; 195/2 = 97.
        (
            "a best-effort pod counts the non-zero defaults",
            default(),
            pod("p", "", ""),
            node(&[], vec![]),
            97,
        ),
        (
            "a full node scores 0",
            default(),
            pod("p", "1", "8Gi"),
            node(&[], vec![pod("e", "3", "8Gi")]),
            0,
        ),
        // cpu over capacity 0; memory 200Mi + 200Mi: 15984*100/16384 = 97; 97/2 = 48.
        (
            "a resource over capacity scores 0",
            default(),
            pod("p", "1", ""),
            node(&[], vec![pod("e", "4", "")]),
            48,
        ),
        // (75*3 + 87*1) / 4 = 78.
        (
            "weights",
            strategy(
                ScoringStrategyType::LeastAllocated,
                &[("cpu", 3), ("memory", 1)],
            ),
            pod("p", "1", "2Gi"),
            node(&[], vec![]),
            78,
        ),
        // gpu (3*100)/4 = 75 at weight 2: (75 + 87 + 150) / 4 = 78.
        (
            "an extended resource the pod requests",
            with_gpu(),
            pod("p", "1", "2Gi").req(GPU, "1"),
            node(&[(GPU, "4")], vec![]),
            78,
        ),
        (
            "an extended resource the pod does not request is left out",
            with_gpu(),
            pod("p", "1", "2Gi"),
            node(&[(GPU, "4")], vec![]),
            81,
        ),
        (
            "an extended resource the node does not have is left out",
            with_gpu(),
            pod("p", "1", "2Gi").req(GPU, "1"),
            node(&[], vec![]),
            81,
        ),
    ];
    for (name, args, pod, node, want) in cases {
        assert_eq!(score(&plugin(args), pod, &node), want, "{name}");
    }
}

#[test]
fn most_allocated_scores_used_room_as_kube_scheduler() {
    let most = || {
        strategy(
            ScoringStrategyType::MostAllocated,
            &[("cpu", 1), ("memory", 1)],
        )
    };
    let cases = [
        // cpu 1000*100/4000 = 25, memory 2*100/16 = 12; 37/2 = 18.
        ("an empty node", pod("p", "1", "2Gi"), node(&[], vec![]), 18),
        // cpu 50, memory 6*100/16 = 37; 87/2 = 43.
        (
            "pods on the node count",
            pod("p", "1", "2Gi"),
            node(&[], vec![pod("e", "1", "4Gi")]),
            43,
        ),
        // cpu 100*100/4000 = 2, memory 200*100/16384 = 1; 3/2 = 1.
        (
            "a best-effort pod counts the non-zero defaults",
            pod("p", "", ""),
            node(&[], vec![]),
            1,
        ),
        // cpu capped at capacity 100, memory 400*100/16384 = 2; 102/2 = 51.
        (
            "a request over capacity is capped",
            pod("p", "1", ""),
            node(&[], vec![pod("e", "4", "")]),
            51,
        ),
    ];
    for (name, pod, node, want) in cases {
        assert_eq!(score(&plugin(most()), pod, &node), want, "{name}");
    }
}

#[test]
fn requested_to_capacity_ratio_follows_the_shape_as_kube_scheduler() {
    let rtcr = |shape: &[(i32, i32)]| {
        let mut args = strategy(
            ScoringStrategyType::RequestedToCapacityRatio,
            &[("cpu", 1), ("memory", 1)],
        );
        args.scoring_strategy.requested_to_capacity_ratio = Some(RequestedToCapacityRatioParam {
            shape: shape
                .iter()
                .map(|&(utilization, score)| UtilizationShapePoint { utilization, score })
                .collect(),
        });
        args
    };
    let cases = [
        // Utilization cpu 25, memory 12 (12.5 truncated); scores 75 and 88; 81.5 rounds to 82.
        (
            "a falling shape favours free nodes",
            rtcr(&[(0, 10), (100, 0)]),
            pod("p", "1", "2Gi"),
            node(&[], vec![]),
            82,
        ),
        // Scores 25 and 12; 18.5 rounds to 19.
        (
            "a rising shape favours full nodes",
            rtcr(&[(0, 0), (100, 10)]),
            pod("p", "1", "2Gi"),
            node(&[], vec![]),
            19,
        ),
        // cpu 25: 0 + 100*(25-20)/80 = 6; memory 12 scores 0 and is not counted: 6/1.
        (
            "a resource scoring 0 does not count towards the weights",
            rtcr(&[(0, 0), (20, 0), (100, 10)]),
            pod("p", "1", "2Gi"),
            node(&[], vec![]),
            6,
        ),
        // cpu over capacity counts as 100% and scores 0; memory 400Mi is 2%: 98.
        (
            "over capacity counts as full",
            rtcr(&[(0, 10), (100, 0)]),
            pod("p", "1", ""),
            node(&[], vec![pod("e", "4", "")]),
            98,
        ),
        (
            "a single point is flat",
            rtcr(&[(50, 5)]),
            pod("p", "1", "2Gi"),
            node(&[], vec![]),
            50,
        ),
    ];
    for (name, args, pod, node, want) in cases {
        assert_eq!(score(&plugin(args), pod, &node), want, "{name}");
    }
}

#[test]
fn args_default_and_decode_as_kube_scheduler() {
    let args = NodeResourcesFitArgs::default();
    assert_eq!(
        args.scoring_strategy.type_,
        ScoringStrategyType::LeastAllocated
    );
    assert_eq!(args.scoring_strategy.resources, default_resources());
    let built = build(None, &"args".into(), &Handle::default()).expect("defaults are valid");
    assert_eq!(built.name(), NAME);
    assert!(built.pre_filter().is_some() && built.filter().is_some());
    assert!(built.pre_score().is_some() && built.score().is_some());

    let decoded: NodeResourcesFitArgs = decode_args(
        Some(&json!({"scoringStrategy": {"type": "MostAllocated",
            "resources": [{"name": "cpu"}, {"name": "memory", "weight": 0}]}})),
        &"args".into(),
    )
    .expect("decodes");
    assert_eq!(
        decoded.scoring_strategy.type_,
        ScoringStrategyType::MostAllocated
    );
    let mut resources = decoded.scoring_strategy.resources;
    default_resource_specs(&mut resources);
    assert_eq!(resources, default_resources(), "weights left at 0 become 1");
}

#[test]
fn validation_names_the_invalid_field() {
    let cases = [
        ("defaults are valid", json!(null), vec![]),
        (
            "a weight above 100",
            json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1},
                {"name": "memory", "weight": 101}]}}),
            vec!["args.scoringStrategy.resources[1].weight"],
        ),
        (
            "a negative weight",
            json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": -1}]}}),
            vec!["args.scoringStrategy.resources[0].weight"],
        ),
        (
            "an unknown strategy type",
            json!({"scoringStrategy": {"type": "Random"}}),
            vec!["args.scoringStrategy.type"],
        ),
        (
            "RequestedToCapacityRatio without a shape",
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
            vec!["args.scoringStrategy.requestedToCapacityRatio.shape"],
        ),
        (
            "a shape that does not increase",
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": [{"utilization": 50, "score": 1},
                    {"utilization": 50, "score": 2}]}}}),
            vec!["args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization"],
        ),
        (
            "a shape point out of range",
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 11},
                    {"utilization": 101, "score": 0}]}}}),
            vec![
                "args.scoringStrategy.requestedToCapacityRatio.shape[0].score",
                "args.scoringStrategy.requestedToCapacityRatio.shape[1].utilization",
            ],
        ),
        (
            "an invalid ignored resource name",
            json!({"ignoredResources": ["example.com/a/b"]}),
            vec!["args.ignoredResources[0]"],
        ),
        (
            "an ignored resource group with a slash",
            json!({"ignoredResourceGroups": ["example.com/gpu"]}),
            vec!["args.ignoredResourceGroups[0]"],
        ),
        (
            "an unknown field",
            json!({"ignoredResource": []}),
            vec!["args"],
        ),
    ];
    for (name, args, want) in cases {
        let got: Vec<String> = match build(Some(&args), &"args".into(), &Handle::default()) {
            Ok(_) => vec![],
            Err(errs) => errs.0.into_iter().map(|e| e.path).collect(),
        };
        assert_eq!(got, want, "{name}");
    }
}

#[test]
fn extended_resource_names_as_kubernetes_defines_them() {
    for (name, want) in [
        ("example.com/gpu", true),
        ("nvidia.com/gpu", true),
        ("cpu", false),
        ("hugepages-2Mi", false),
        ("kubernetes.io/foo", false),
        ("requests.example.com/gpu", false),
        ("Example.com/gpu", false),
    ] {
        assert_eq!(is_extended_resource_name(name), want, "{name}");
    }
}
