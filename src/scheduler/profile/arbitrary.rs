//! Any profile, any pod: a profile built with arbitrary values in every plugin's args (and the
//! profile's own numbers and weights) either is refused by the compiler, naming a field, or
//! runs whole cycles (PreFilter to PostFilter, Reserve, Permit, PreBind, Bind, PostBind)
//! against arbitrary nodes and pods without a panic and without a framework error. Whatever a
//! person can put in a SchedulingProfile or a pod must not stop the scheduler.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use k8s_openapi::api::core::v1::PersistentVolume;
use proptest::prelude::*;
use serde_json::{Value, json};

use super::compile;
use crate::api::SchedulingProfileSpec;
use crate::gate::WriteGate;
use crate::scheduler::algorithm::{ScheduleResult, schedule_pod};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::waiting_pods::WaitingPods;
use crate::scheduler::framework::{CycleState, NoNominations};
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::testing::volumes::{claim, class, volume};
use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot, stand_in_client};

/// A number as a person might write one: mostly small, sometimes at the ends of every range a
/// field could be decoded into, sometimes not a whole number.
fn number() -> impl Strategy<Value = Value> {
    prop_oneof![
        6 => (-3i64..150).prop_map(|n| json!(n)),
        2 => (0i64..200_000).prop_map(|n| json!(n)),
        2 => any::<i64>().prop_map(|n| json!(n)),
        1 => (i64::MAX - 100_000..=i64::MAX).prop_map(|n| json!(n)),
        2 => prop_oneof![
            Just(json!(i64::MAX)),
            Just(json!(i64::MIN)),
            Just(json!(i32::MAX)),
            Just(json!(i32::MIN)),
            Just(json!(u64::MAX)),
            Just(json!(1e300)),
            Just(json!(0.5)),
        ],
    ]
}

/// A profile that enables every plugin that takes args, with valid args for each: the base
/// the tests change numbers of.
fn base_profile() -> Value {
    let shape = json!([{"utilization": 0, "score": 0}, {"utilization": 100, "score": 10}]);
    json!({
        "schedulerName": "tether-scheduler",
        "percentageOfNodesToScore": 0,
        "podInitialBackoffSeconds": 1,
        "podMaxBackoffSeconds": 10,
        "plugins": {"multiPoint": {"enabled": [
            {"name": "StickyNode"}, {"name": "PlacementHistory", "weight": 5}]}},
        "pluginConfig": [
            {"name": "NodeResourcesFit", "args": {"scoringStrategy": {
                "type": "RequestedToCapacityRatio",
                "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1}],
                "requestedToCapacityRatio": {"shape": shape}}}},
            {"name": "NodeResourcesBalancedAllocation", "args": {
                "resources": [{"name": "cpu", "weight": 1}]}},
            {"name": "InterPodAffinity", "args": {"hardPodAffinityWeight": 1}},
            {"name": "NodeAffinity", "args": {"addedAffinity": {
                "preferredDuringSchedulingIgnoredDuringExecution": [{"weight": 1, "preference": {
                    "matchExpressions": [
                        {"key": "topology.kubernetes.io/zone", "operator": "Exists"}]}}]}}},
            {"name": "PodTopologySpread", "args": {"defaultingType": "List", "defaultConstraints": [
                {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone",
                 "whenUnsatisfiable": "ScheduleAnyway"}]}},
            {"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 600, "shape": shape}},
            {"name": "DefaultPreemption", "args": {
                "minCandidateNodesPercentage": 10, "minCandidateNodesAbsolute": 100}},
            {"name": "StickyNode", "args": {
                "onNodeLoss": "Release", "releaseAfterSeconds": 300, "holdRoomSeconds": 60}},
        ],
    })
}

/// Every number of [`base_profile`]: the profile's own, a plugin's weight, every duration,
/// count and weight of every plugin's args.
const NUMBERS: &[&str] = &[
    "/percentageOfNodesToScore",
    "/podInitialBackoffSeconds",
    "/podMaxBackoffSeconds",
    "/plugins/multiPoint/enabled/1/weight",
    "/pluginConfig/0/args/scoringStrategy/resources/0/weight",
    "/pluginConfig/0/args/scoringStrategy/requestedToCapacityRatio/shape/0/utilization",
    "/pluginConfig/0/args/scoringStrategy/requestedToCapacityRatio/shape/1/score",
    "/pluginConfig/1/args/resources/0/weight",
    "/pluginConfig/2/args/hardPodAffinityWeight",
    "/pluginConfig/3/args/addedAffinity/preferredDuringSchedulingIgnoredDuringExecution/0/weight",
    "/pluginConfig/4/args/defaultConstraints/0/maxSkew",
    "/pluginConfig/5/args/bindTimeoutSeconds",
    "/pluginConfig/5/args/shape/0/utilization",
    "/pluginConfig/5/args/shape/1/score",
    "/pluginConfig/6/args/minCandidateNodesPercentage",
    "/pluginConfig/6/args/minCandidateNodesAbsolute",
    "/pluginConfig/7/args/releaseAfterSeconds",
    "/pluginConfig/7/args/holdRoomSeconds",
];

/// The values at the ends of every range a number could be decoded into, and beside them.
fn extremes() -> Vec<Value> {
    vec![
        json!(i64::MAX),
        json!(i64::MAX - 1),
        json!(i64::MIN),
        json!(i32::MAX),
        json!(i32::MIN),
        json!(u64::MAX),
        json!(u32::MAX),
        json!(-1),
        json!(0),
        json!(1e300),
        json!(0.5),
    ]
}

/// [`base_profile`] with `changes` made (a number's pointer and its new value).
fn changed(changes: &[(&str, Value)]) -> Value {
    let mut profile = base_profile();
    for (pointer, value) in changes {
        if let Some(slot) = profile.pointer_mut(pointer) {
            *slot = value.clone();
        }
    }
    profile
}

/// A profile: [`base_profile`] with one to three of its numbers changed to anything.
fn profile() -> impl Strategy<Value = Value> {
    prop::collection::vec((prop::sample::select(NUMBERS), number()), 1..4)
        .prop_map(|changes| changed(&changes))
}

/// A quantity as anyone may write it in a pod or a node: mostly `usual`, sometimes huge,
/// sometimes nothing.
fn quantity(usual: impl Strategy<Value = String> + 'static) -> impl Strategy<Value = String> {
    prop_oneof![
        8 => usual,
        1 => Just("8Ei".to_string()),
        1 => Just("9223372036854775807".to_string()),
        1 => Just("0".to_string()),
    ]
}

/// A node's allocatable CPU and memory.
fn node_size() -> impl Strategy<Value = (String, String)> {
    (
        quantity((1u32..64).prop_map(|n| n.to_string())),
        quantity((1u32..256).prop_map(|n| format!("{n}Gi"))),
    )
}

/// What a generated pod asks for.
#[derive(Clone, Debug)]
struct PodShape {
    cpu: String,
    memory: String,
    priority: i32,
    claim: bool,
    spread_skew: Option<i32>,
}

fn pod_shape() -> impl Strategy<Value = PodShape> {
    (
        quantity((0u32..4000).prop_map(|n| format!("{n}m"))),
        quantity((0u32..8192).prop_map(|n| format!("{n}Mi"))),
        any::<i32>(),
        any::<bool>(),
        prop::option::of(any::<i32>()),
    )
        .prop_map(|(cpu, memory, priority, claim, spread_skew)| PodShape {
            cpu,
            memory,
            priority,
            claim,
            spread_skew,
        })
}

/// A client that accepts every write, as an API server that admits them; the volumes it is
/// sent reach `storage` as a watch would bring them, so PreBind waits for the PV controller
/// (which never comes) until its timeout.
fn accepting_client(storage: Arc<StorageIndex>) -> kube::Client {
    stand_in_client(move |method, path, sent| {
        if method == "PUT"
            && path.starts_with("/api/v1/persistentvolumes/")
            && let Ok(pv) = serde_json::from_value::<PersistentVolume>(sent.clone())
        {
            storage.apply(Arc::new(pv));
        }
        (if method == "POST" { 201 } else { 200 }, sent)
    })
}

/// Runs every pod through a whole cycle of `spec`'s profile, if the compiler accepts it. A
/// pod placed stays placed for the next ones.
/// Whether the profile was accepted.
fn run_cycles(spec: &SchedulingProfileSpec, nodes: &[(String, String)], pods: &[PodShape]) -> bool {
    let storage = Arc::new(StorageIndex::default());
    storage.apply(Arc::new(class("local", "WaitForFirstConsumer")));
    for (i, _) in nodes.iter().enumerate() {
        storage.apply(Arc::new(
            volume(&format!("pv{i}"), "10Gi")
                .class("local")
                .on_node(&format!("n{i}"))
                .build(),
        ));
    }
    for i in 0..pods.len() {
        storage.apply(Arc::new(claim(&format!("data{i}"), "local").build()));
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .start_paused(true)
        .build()
        .expect("a runtime");
    runtime.block_on(async {
        let handle = Handle {
            client: Some(accepting_client(storage.clone())),
            storage,
            gate: WriteGate::alone(),
            ..Handle::default()
        };
        let Ok(compiled) = compile(spec, "arbitrary", &handle) else {
            return false;
        };
        let profile = compiled.profile;
        let node_builders = || -> Vec<NodeBuilder> {
            nodes
                .iter()
                .enumerate()
                .map(|(i, (cpu, memory))| {
                    NodeBuilder::new(&format!("n{i}"))
                        .allocatable("cpu", cpu)
                        .allocatable("memory", memory)
                        .label("topology.kubernetes.io/zone", &format!("z{}", i % 2))
                })
                .collect()
        };
        let mut placed = Vec::new();
        let waiting = WaitingPods::default();
        for (i, shape) in pods.iter().enumerate() {
            let mut builder = PodBuilder::new(&format!("p{i}"))
                .label("app", "a")
                .req_cpu(&shape.cpu)
                .req_mem(&shape.memory)
                .priority(shape.priority)
                .scheduler_name("tether-scheduler");
            if shape.claim {
                builder = builder.claim(&format!("data{i}"));
            }
            if let Some(skew) = shape.spread_skew {
                builder = builder.spread(
                    serde_json::from_value(json!({"maxSkew": skew,
                        "topologyKey": "topology.kubernetes.io/zone",
                        "whenUnsatisfiable": "DoNotSchedule",
                        "labelSelector": {"matchLabels": {"app": "a"}}}))
                    .expect("a constraint"),
                );
            }
            let pod = builder.build();
            let info = PodInfo::new(Arc::new(pod.clone()));
            let snap = snapshot(node_builders(), placed.clone());
            let mut state = CycleState::new();
            let node = match schedule_pod(
                &profile,
                &mut state,
                &info,
                &snap,
                &AtomicUsize::new(0),
                &NoNominations,
            ) {
                ScheduleResult::Scheduled { node, .. } => node,
                ScheduleResult::Unschedulable(_) => continue,
                ScheduleResult::Error(status) => {
                    panic!("a cycle of an accepted profile failed: {status:?}")
                }
            };
            if !profile.run_reserve(&mut state, &info, &node).is_success() {
                continue;
            }
            if profile.run_permit(&state, &info, &node, &waiting).is_err() {
                profile.run_unreserve(&state, &info, &node);
                continue;
            }
            if !profile.run_pre_bind(&state, &pod, &node).await.is_success() {
                profile.run_unreserve(&state, &info, &node);
                continue;
            }
            if profile.run_bind(&state, &pod, &node).await.is_success() {
                profile.run_post_bind(&state, &pod, &node).await;
                let mut bound = pod;
                if let Some(spec) = bound.spec.as_mut() {
                    spec.node_name = Some(node);
                }
                placed.push(bound);
            }
        }
        true
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn any_profile_is_refused_or_runs_whole_cycles_without_a_panic(
        spec in profile(),
        nodes in prop::collection::vec(node_size(), 1..4),
        pods in prop::collection::vec(pod_shape(), 1..7),
    ) {
        // What the API server's schema would refuse (a weight past i32) never reaches us.
        let Ok(spec) = serde_json::from_value::<SchedulingProfileSpec>(spec) else {
            return Ok(());
        };
        run_cycles(&spec, &nodes, &pods);
    }
}

/// Pods as anyone may write them: huge requests, the extreme priorities, spread constraints
/// with extreme skews, claims to bind.
fn hostile_pods() -> Vec<PodShape> {
    let shape = |cpu: &str, memory: &str, priority, claim, spread_skew| PodShape {
        cpu: cpu.into(),
        memory: memory.into(),
        priority,
        claim,
        spread_skew,
    };
    vec![
        shape("100m", "100Mi", 0, true, None),
        shape("8Ei", "8Ei", i32::MAX, false, Some(i32::MAX)),
        shape("9223372036854775807", "0", i32::MIN, true, Some(1)),
        shape("1", "1Gi", 1000, true, Some(i32::MIN)),
        shape("200m", "200Mi", -1, true, None),
    ]
}

#[test]
fn every_number_of_every_plugin_at_its_extremes_is_refused_or_runs_whole_cycles() {
    let nodes = [
        ("4".to_string(), "16Gi".to_string()),
        ("8Ei".to_string(), "9223372036854775807".to_string()),
        ("2".to_string(), "8Gi".to_string()),
    ];
    let mut accepted = 0;
    for pointer in NUMBERS {
        for value in extremes() {
            let profile = changed(&[(pointer, value)]);
            let Ok(spec) = serde_json::from_value::<SchedulingProfileSpec>(profile) else {
                continue;
            };
            if run_cycles(&spec, &nodes, &hostile_pods()) {
                accepted += 1;
            }
        }
    }
    // A test that refused everything would prove nothing: the base profile compiles, and so
    // do some extremes (0 is a valid hold, for instance).
    let base: SchedulingProfileSpec = serde_json::from_value(base_profile()).expect("a spec");
    assert!(
        run_cycles(&base, &nodes, &hostile_pods()),
        "the base profile compiles"
    );
    assert!(accepted > 0, "no extreme was accepted");
}
