//! One scheduling cycle (default profile) over 1,000 nodes with 8 GPUs each, published as one
//! ResourceSlice a node: a pod whose claim asks for two devices of a class with a CEL selector
//! and a request selector of its own, next to the same pod without the claim. Half the nodes'
//! GPUs are of another model, so the selectors decide.
//!
//! `cargo bench --bench dra_cycle`

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use criterion::{Criterion, criterion_group, criterion_main};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use tether::k8s::pod::Pod;
use tether::scheduler::algorithm::{ScheduleResult, schedule_pod};
use tether::scheduler::framework::node_info::NodeInfo;
use tether::scheduler::framework::pod_info::PodInfo;
use tether::scheduler::framework::snapshot::Snapshot;
use tether::scheduler::framework::{CycleState, NoNominations};
use tether::scheduler::informers::Keeps;
use tether::scheduler::informers::devices::DeviceIndex;
use tether::scheduler::plugins::handle::Handle;
use tether::scheduler::profile::default_profile;

const NODES: usize = 1000;
const DEVICES_PER_NODE: usize = 8;
const DRIVER: &str = "gpu.example.com";

fn node(i: usize) -> Node {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("node-{i}"), "labels": {"kubernetes.io/hostname": format!("node-{i}")}},
        "spec": {},
        "status": {"allocatable": {"cpu": "64", "memory": "256Gi", "pods": "110"}},
    }))
    .expect("valid node")
}

fn slice(i: usize) -> ResourceSlice {
    let model = if i.is_multiple_of(2) { "h100" } else { "a100" };
    let devices: Vec<serde_json::Value> = (0..DEVICES_PER_NODE)
        .map(|d| {
            serde_json::json!({
                "name": format!("gpu-{d}"),
                "attributes": {"model": {"string": model}, "numa": {"int": d / 4}},
                "capacity": {"memory": {"value": "80Gi"}},
            })
        })
        .collect();
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": format!("node-{i}-gpus"), "resourceVersion": "1"},
        "spec": {"driver": DRIVER, "nodeName": format!("node-{i}"),
                 "pool": {"name": format!("node-{i}"), "generation": 1, "resourceSliceCount": 1},
                 "devices": devices},
    }))
    .expect("valid slice")
}

fn pod(with_claim: bool) -> Pod {
    let mut spec = serde_json::json!({
        "schedulerName": "tether-scheduler",
        "containers": [{"name": "c", "image": "registry.local/app:1",
                        "resources": {"requests": {"cpu": "250m", "memory": "512Mi"}}}],
    });
    if with_claim {
        spec["resourceClaims"] = serde_json::json!([{"name": "gpus", "resourceClaimName": "gpus"}]);
    }
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": "incoming", "namespace": "bench", "uid": "incoming"},
        "spec": spec,
    }))
    .expect("valid pod")
}

fn devices() -> Arc<DeviceIndex> {
    let index = Arc::new(DeviceIndex::default());
    let class: DeviceClass = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpu", "resourceVersion": "1"},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{DRIVER}\"")}}]},
    }))
    .expect("valid class");
    let claim: ResourceClaim = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "gpus", "namespace": "bench", "uid": "claim", "resourceVersion": "1"},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "gpu", "count": 2,
            "selectors": [{"cel": {"expression": format!(
                "device.attributes[\"{DRIVER}\"].model == \"h100\" && device.capacity[\"{DRIVER}\"].memory.compareTo(quantity(\"40Gi\")) >= 0")}}]}}]}},
    }))
    .expect("valid claim");
    Keeps::apply(index.as_ref(), Arc::new(class));
    Keeps::apply(index.as_ref(), Arc::new(claim));
    for i in 0..NODES {
        Keeps::apply(index.as_ref(), Arc::new(slice(i)));
    }
    index
}

fn bench(c: &mut Criterion) {
    let handle = Handle {
        devices: devices(),
        ..Handle::default()
    };
    let profile = default_profile("tether-scheduler", &handle)
        .expect("default profile")
        .profile;
    let snap = Snapshot::from_node_infos(
        (0..NODES)
            .map(|i| {
                let mut info = NodeInfo::new(format!("node-{i}"));
                info.set_node(Arc::new(node(i)));
                info
            })
            .collect(),
    );
    let start = AtomicUsize::new(0);
    let mut group = c.benchmark_group("dra_cycle_1000_nodes_8_devices");
    group.sample_size(20);
    for (name, with_claim) in [("plain", false), ("two_devices_cel", true)] {
        let incoming = PodInfo::new(Arc::new(pod(with_claim)));
        group.bench_function(name, |b| {
            b.iter(|| {
                let mut state = CycleState::new();
                let result = schedule_pod(
                    &profile,
                    &mut state,
                    &incoming,
                    &snap,
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
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
