//! Rows of upstream's allocator test table (k8s.io/dynamic-resource-allocation's
//! allocatortesting), by their names there: node `node-1` with labels `region=region-1` and
//! `planet=earth`, classes selecting their driver by CEL, slices of generation 1 and one slice
//! a pool unless a row says otherwise.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};
use k8s_openapi::api::resource::v1::{
    AllocationResult, CELDeviceSelector, Counter, CounterSet, Device, DeviceAttribute,
    DeviceCapacity, DeviceClaim, DeviceClass, DeviceClassSpec, DeviceConstraint,
    DeviceCounterConsumption, DeviceRequest, DeviceSelector, DeviceSubRequest, DeviceTaint,
    DeviceToleration, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec, ResourcePool,
    ResourceSlice, ResourceSliceSpec,
};
use k8s_openapi::api::resource::v1::{DeviceTaintRule, DeviceTaintRuleSpec, DeviceTaintSelector};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;

use super::result::local;
use super::*;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        namespace: None,
        ..Default::default()
    }
}

fn cel(expr: &str) -> DeviceSelector {
    DeviceSelector {
        cel: Some(CELDeviceSelector {
            expression: expr.into(),
        }),
    }
}

fn class(name: &str, driver: &str) -> (String, Arc<DeviceClass>) {
    (
        name.into(),
        Arc::new(DeviceClass {
            metadata: meta(name),
            spec: Some(DeviceClassSpec {
                selectors: Some(vec![cel(&format!("device.driver == \"{driver}\""))]),
                ..Default::default()
            }),
        }),
    )
}

fn classes() -> HashMap<String, Arc<DeviceClass>> {
    [class("class-a", "driver-a"), class("class-b", "driver-b")]
        .into_iter()
        .collect()
}

fn device(name: &str) -> Device {
    Device {
        name: name.into(),
        ..Default::default()
    }
}

fn with_attr(mut d: Device, key: &str, attr: DeviceAttribute) -> Device {
    d.attributes
        .get_or_insert_default()
        .insert(key.into(), attr);
    d
}

fn with_memory(mut d: Device, q: &str) -> Device {
    d.capacity.get_or_insert_default().insert(
        "memory".into(),
        DeviceCapacity {
            value: Quantity(q.into()),
            request_policy: None,
        },
    );
    d
}

fn string_attr(v: &str) -> DeviceAttribute {
    DeviceAttribute {
        string: Some(v.into()),
        ..Default::default()
    }
}

fn version_attr(v: &str) -> DeviceAttribute {
    DeviceAttribute {
        version: Some(v.into()),
        ..Default::default()
    }
}

fn int_attr(v: i64) -> DeviceAttribute {
    DeviceAttribute {
        int: Some(v),
        ..Default::default()
    }
}

struct SliceSpec {
    name: String,
    driver: String,
    pool: String,
    generation: i64,
    count: i64,
    node: Option<String>,
    all_nodes: bool,
    selector: Option<NodeSelector>,
    devices: Vec<Device>,
    counters: Option<Vec<CounterSet>>,
}

fn slice(name: &str, node: &str, pool: &str, driver: &str, devices: Vec<Device>) -> SliceSpec {
    SliceSpec {
        name: name.into(),
        driver: driver.into(),
        pool: pool.into(),
        generation: 1,
        count: 1,
        node: (!node.is_empty()).then(|| node.into()),
        all_nodes: false,
        selector: None,
        devices,
        counters: None,
    }
}

impl SliceSpec {
    fn build(self) -> Arc<ResourceSlice> {
        Arc::new(ResourceSlice {
            metadata: meta(&self.name),
            spec: ResourceSliceSpec {
                driver: self.driver,
                pool: ResourcePool {
                    name: self.pool,
                    generation: self.generation,
                    resource_slice_count: self.count,
                },
                node_name: self.node,
                all_nodes: self.all_nodes.then_some(true),
                node_selector: self.selector,
                devices: Some(self.devices),
                shared_counters: self.counters,
                ..Default::default()
            },
        })
    }
}

fn exact(name: &str, class: &str, count: i64) -> DeviceRequest {
    DeviceRequest {
        name: name.into(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.into(),
            count: Some(count),
            allocation_mode: Some("ExactCount".into()),
            ..Default::default()
        }),
        first_available: None,
    }
}

fn all_of(name: &str, class: &str) -> DeviceRequest {
    DeviceRequest {
        name: name.into(),
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.into(),
            allocation_mode: Some("All".into()),
            ..Default::default()
        }),
        first_available: None,
    }
}

fn selecting(mut r: DeviceRequest, expr: &str) -> DeviceRequest {
    if let Some(e) = r.exactly.as_mut() {
        e.selectors.get_or_insert_default().push(cel(expr));
    }
    r
}

fn sub(name: &str, class: &str, count: i64, expr: Option<&str>) -> DeviceSubRequest {
    DeviceSubRequest {
        name: name.into(),
        device_class_name: class.into(),
        count: Some(count),
        allocation_mode: Some("ExactCount".into()),
        selectors: expr.map(|e| vec![cel(e)]),
        ..Default::default()
    }
}

fn first_available(name: &str, subs: Vec<DeviceSubRequest>) -> DeviceRequest {
    DeviceRequest {
        name: name.into(),
        exactly: None,
        first_available: Some(subs),
    }
}

fn claim(
    name: &str,
    requests: Vec<DeviceRequest>,
    constraints: Vec<DeviceConstraint>,
) -> Arc<ResourceClaim> {
    Arc::new(ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        },
        spec: Some(ResourceClaimSpec {
            devices: Some(DeviceClaim {
                requests: Some(requests),
                constraints: (!constraints.is_empty()).then_some(constraints),
                config: None,
            }),
        }),
        status: None,
    })
}

fn match_attribute(attr: &str, requests: &[&str]) -> DeviceConstraint {
    DeviceConstraint {
        match_attribute: Some(attr.into()),
        requests: (!requests.is_empty()).then(|| requests.iter().map(|r| r.to_string()).collect()),
        ..Default::default()
    }
}

fn node_1_labels() -> BTreeMap<String, String> {
    [("region", "region-1"), ("planet", "earth")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

fn run(
    claims: Vec<Arc<ResourceClaim>>,
    slices: Vec<SliceSpec>,
    allocated: &[(&str, &str, &str)],
    node: &str,
) -> Result<Option<Vec<AllocationResult>>, String> {
    run_as(37, claims, slices, allocated, &[], node)
}

/// [`run`] as kube-scheduler 1.`minor`'s allocator, with `shared` devices holding shares.
fn run_as(
    minor: u32,
    claims: Vec<Arc<ResourceClaim>>,
    slices: Vec<SliceSpec>,
    allocated: &[(&str, &str, &str)],
    shared: &[(&str, &str, &str)],
    node: &str,
) -> Result<Option<Vec<AllocationResult>>, String> {
    let id = |(d, p, n): &(&str, &str, &str)| DeviceId {
        driver: d.to_string(),
        pool: p.to_string(),
        device: n.to_string(),
    };
    let allocated = Allocated::from_parts(allocated.iter().map(id), shared.iter().map(id));
    let allocator = Allocator::new(
        claims,
        &classes(),
        std::sync::Arc::new(crate::scheduler::informers::devices::SliceIndex::new(
            slices.into_iter().map(SliceSpec::build),
        )),
        Vec::new(),
        allocated,
    )?
    .following(crate::k8s::release::Release::of_minor(minor));
    let labels = node_1_labels();
    allocator
        .allocate(
            &NodeView {
                name: node,
                labels: &labels,
            },
            None,
        )
        .map_err(|e| match e {
            AllocateError::OnNode(m) => format!("on node: {m}"),
            AllocateError::Fatal(m) => m,
            AllocateError::TimedOut => "timed out".into(),
        })
}

/// (request, driver/pool/device) of each claim's results.
fn picked(found: &[AllocationResult]) -> Vec<Vec<(String, String)>> {
    found
        .iter()
        .map(|a| {
            a.devices
                .iter()
                .flat_map(|d| d.results.iter().flatten())
                .map(|r| {
                    (
                        r.request.clone(),
                        format!("{}/{}/{}", r.driver, r.pool, r.device),
                    )
                })
                .collect()
        })
        .collect()
}

fn picks(rows: &[&[(&str, &str)]]) -> Vec<Vec<(String, String)>> {
    rows.iter()
        .map(|c| {
            c.iter()
                .map(|(r, d)| (r.to_string(), d.to_string()))
                .collect()
        })
        .collect()
}

#[test]
fn simple() {
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        )],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[("req-0", "driver-a/pool-1/device-1")]])
    );
    assert_eq!(
        found[0].node_selector,
        Some(local("node-1")),
        "a node-local device"
    );
}

#[test]
fn other_node() {
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])],
        vec![
            slice(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-b",
                vec![device("device-1")],
            ),
            slice(
                "slice-2",
                "node-2",
                "pool-2",
                "driver-a",
                vec![device("device-1")],
            ),
        ],
        &[],
        "node-2",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[("req-0", "driver-a/pool-2/device-1")]])
    );
    assert_eq!(found[0].node_selector, Some(local("node-2")));
}

#[test]
fn small_and_large_backtrack_claims() {
    let at_least =
        |q: &str| format!("device.capacity[\"driver-a\"].memory.compareTo(quantity(\"{q}\")) >= 0");
    let found = run(
        vec![
            claim(
                "claim-0",
                vec![selecting(exact("req-0", "class-a", 1), &at_least("1Gi"))],
                vec![],
            ),
            claim(
                "claim-1",
                vec![selecting(exact("req-0", "class-a", 1), &at_least("2Gi"))],
                vec![],
            ),
        ],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![
                with_memory(device("device-2"), "2Gi"),
                with_memory(device("device-1"), "1Gi"),
            ],
        )],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[
            &[("req-0", "driver-a/pool-1/device-1")],
            &[("req-0", "driver-a/pool-1/device-2")],
        ]),
        "the first claim gives up the large device when the second needs it"
    );
}

#[test]
fn obsolete_slice() {
    let mut old = slice(
        "slice-1",
        "node-1",
        "pool-1",
        "driver-a",
        vec![device("device-1")],
    );
    old.count = 2;
    let mut new = slice(
        "slice-2",
        "node-1",
        "pool-1",
        "driver-a",
        vec![device("device-1")],
    );
    new.count = 2;
    new.generation = 2;
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])],
        vec![old, new],
        &[],
        "node-1",
    );
    assert_eq!(
        found,
        Ok(None),
        "the new generation is incomplete, the old one obsolete"
    );
}

#[test]
fn duplicate_slice() {
    let mut a = slice(
        "slice-1",
        "node-1",
        "pool-1",
        "driver-a",
        vec![device("device-1")],
    );
    a.count = 2;
    let mut b = slice(
        "slice-2",
        "node-1",
        "pool-1",
        "driver-a",
        vec![device("device-1")],
    );
    b.count = 2;
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])],
        vec![a, b],
        &[],
        "node-1",
    );
    assert_eq!(
        found,
        Err("on node: invalid resource pools were encountered".into())
    );
}

#[test]
fn no_classes() {
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-c", 1)], vec![])],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        )],
        &[],
        "node-1",
    );
    let err = found.expect_err("a missing class is an error");
    assert!(
        err.contains("could not retrieve device class class-c"),
        "{err}"
    );
}

#[test]
fn all_devices_many() {
    let found = run(
        vec![claim("claim-0", vec![all_of("req-0", "class-a")], vec![])],
        vec![
            slice(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                vec![device("device-1")],
            ),
            slice(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                vec![device("device-1")],
            ),
        ],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[
            ("req-0", "driver-a/pool-1/device-1"),
            ("req-0", "driver-a/pool-2/device-1"),
        ]])
    );
}

/// An `All` request meeting a pool being updated fails the attempt up to 1.37; from 1.38 it
/// rejects this node only.
#[test]
fn all_devices_of_the_incomplete_pool() {
    for (minor, node_only) in [(37, ""), (38, "on node: ")] {
        let mut s = slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        );
        s.count = 2;
        let found = run_as(
            minor,
            vec![claim("claim-0", vec![all_of("req-0", "class-a")], vec![])],
            vec![s],
            &[],
            &[],
            "node-1",
        );
        assert_eq!(
            found,
            Err(format!(
                "{node_only}claim default/claim-0, request req-0: asks for all devices, but resource pool driver-a/pool-1 is currently being updated"
            )),
            "1.{minor}"
        );
    }
}

#[test]
fn all_devices_no_solution_and_some_allocated() {
    let one = || {
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        )]
    };
    let found = run(
        vec![
            claim("claim-1", vec![exact("req-0", "class-a", 1)], vec![]),
            claim("claim-0", vec![all_of("req-0", "class-a")], vec![]),
        ],
        one(),
        &[],
        "node-1",
    );
    assert_eq!(
        found,
        Ok(None),
        "All needs every device, and one is taken by the first claim"
    );
    let found = run(
        vec![claim("claim-0", vec![all_of("req-0", "class-a")], vec![])],
        one(),
        &[("driver-a", "pool-1", "device-1")],
        "node-1",
    );
    assert_eq!(found, Ok(None), "All cannot take an allocated device");
    let found = run(
        vec![claim("claim-0", vec![all_of("req-0", "class-a")], vec![])],
        vec![slice("slice-1", "node-1", "pool-1", "driver-a", vec![])],
        &[],
        "node-1",
    );
    assert_eq!(found, Ok(None), "All with no device never succeeds");
}

#[test]
fn many_network_attached_devices() {
    let term = |exprs: Vec<(&str, &str)>, fields: Vec<(&str, &str)>| NodeSelector {
        node_selector_terms: vec![NodeSelectorTerm {
            match_expressions: (!exprs.is_empty()).then(|| {
                exprs
                    .iter()
                    .map(|(k, v)| NodeSelectorRequirement {
                        key: k.to_string(),
                        operator: "In".into(),
                        values: Some(vec![v.to_string()]),
                    })
                    .collect()
            }),
            match_fields: (!fields.is_empty()).then(|| {
                fields
                    .iter()
                    .map(|(k, v)| NodeSelectorRequirement {
                        key: k.to_string(),
                        operator: "In".into(),
                        values: Some(vec![v.to_string()]),
                    })
                    .collect()
            }),
        }],
    };
    let mut a = slice(
        "slice-1",
        "",
        "pool-1",
        "driver-a",
        vec![device("device-1")],
    );
    a.selector = Some(term(vec![("region", "region-1")], vec![]));
    let mut b = slice(
        "slice-2",
        "",
        "pool-2",
        "driver-a",
        vec![device("device-1")],
    );
    b.all_nodes = true;
    let mut c = slice(
        "slice-3",
        "",
        "pool-3",
        "driver-a",
        vec![device("device-1")],
    );
    c.selector = Some(term(vec![("planet", "earth")], vec![]));
    let mut d = slice(
        "slice-4",
        "",
        "pool-4",
        "driver-a",
        vec![device("device-1")],
    );
    d.selector = Some(term(vec![], vec![("metadata.name", "node-1")]));
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 4)], vec![])],
        vec![a, b, c, d],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(picked(&found)[0].len(), 4);
    assert_eq!(
        found[0].node_selector,
        Some(term(
            vec![("region", "region-1"), ("planet", "earth")],
            vec![("metadata.name", "node-1")]
        )),
        "the slices' terms merged into one"
    );
}

#[test]
fn separate_claims_share_device_admin_access() {
    let admin = || {
        let mut r = exact("req-0", "class-a", 1);
        if let Some(e) = r.exactly.as_mut() {
            e.admin_access = Some(true);
        }
        r
    };
    let found = run(
        vec![
            claim("claim-0", vec![admin()], vec![]),
            claim("claim-1", vec![admin()], vec![]),
        ],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        )],
        &[("driver-a", "pool-1", "device-1")],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[
            &[("req-0", "driver-a/pool-1/device-1")],
            &[("req-0", "driver-a/pool-1/device-1")],
        ]),
        "admin access reaches a device others hold"
    );
    assert!(found.iter().all(|a| {
        a.devices
            .iter()
            .flat_map(|d| d.results.iter().flatten())
            .all(|r| r.admin_access == Some(true))
    }));
}

#[test]
fn with_constraint_for_request_retry() {
    let d = |n: &str, version: &str, s: &str| {
        with_attr(
            with_attr(device(n), "driverVersion", version_attr(version)),
            "stringAttribute",
            string_attr(s),
        )
    };
    let found = run(
        vec![claim(
            "claim-0",
            vec![exact("req-0", "class-a", 1), exact("req-1", "class-a", 1)],
            vec![
                match_attribute("driver-a/driverVersion", &["req-0"]),
                match_attribute("driver-a/stringAttribute", &[]),
            ],
        )],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![
                d("device-1", "1.0.0", "a"),
                d("device-2", "2.0.0", "b"),
                d("device-3", "3.0.0", "b"),
            ],
        )],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[
            ("req-0", "driver-a/pool-1/device-2"),
            ("req-1", "driver-a/pool-1/device-3"),
        ]])
    );
}

#[test]
fn with_constraint_not_matching_int_attribute_all_devices() {
    let found = run(
        vec![claim(
            "claim-0",
            vec![all_of("req-0", "class-a")],
            vec![match_attribute("driver-a/numa", &[])],
        )],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![
                with_attr(device("device-1"), "numa", int_attr(1)),
                with_attr(device("device-2"), "numa", int_attr(2)),
            ],
        )],
        &[],
        "node-1",
    );
    assert_eq!(
        found,
        Err("claim default/claim-0, request req-0: cannot add device driver-a/pool-1/device-2 because a claim constraint would not be satisfied".into())
    );
}

#[test]
fn prioritized_list_with_backtracking() {
    let at_least =
        |q: &str| format!("device.capacity[\"driver-a\"].memory.compareTo(quantity(\"{q}\")) >= 0");
    let found = run(
        vec![claim(
            "claim-0",
            vec![
                first_available(
                    "req-0",
                    vec![
                        sub("subReq-0", "class-a", 1, Some(&at_least("8Gi"))),
                        sub("subReq-1", "class-a", 1, Some(&at_least("4Gi"))),
                    ],
                ),
                selecting(exact("req-1", "class-a", 1), &at_least("8Gi")),
            ],
            vec![],
        )],
        vec![
            slice(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                vec![with_memory(device("device-1"), "8Gi")],
            ),
            slice(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-a",
                vec![with_memory(device("device-2"), "4Gi")],
            ),
        ],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[
            ("req-0/subReq-1", "driver-a/pool-2/device-2"),
            ("req-1", "driver-a/pool-1/device-1"),
        ]])
    );
}

#[test]
fn exact_count_sum_exceeds_claim_limit() {
    let found = run(
        vec![claim(
            "claim-0",
            vec![exact("req-0", "class-a", 20), exact("req-1", "class-a", 20)],
            vec![],
        )],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        )],
        &[],
        "node-1",
    );
    assert_eq!(
        found,
        Err("claim default/claim-0, request req-1: adding 20 devices exceeds the claim limit of 32, with 20 already accounted for".into())
    );
}

/// A GPU of 8Gi published whole and as two halves, all three drawing on one counter set.
fn partitioned_gpu() -> Vec<SliceSpec> {
    let consuming = |n: &str, q: &str| Device {
        consumes_counters: Some(vec![DeviceCounterConsumption {
            counter_set: "gpu-0".into(),
            counters: [(
                "memory".to_string(),
                Counter {
                    value: Quantity(q.into()),
                },
            )]
            .into(),
            compatibility_groups: None,
        }]),
        ..with_memory(device(n), q)
    };
    let mut counters = slice("slice-0", "node-1", "pool-1", "driver-a", vec![]);
    counters.counters = Some(vec![CounterSet {
        name: "gpu-0".into(),
        counters: [(
            "memory".to_string(),
            Counter {
                value: Quantity("8Gi".into()),
            },
        )]
        .into(),
    }]);
    counters.count = 2;
    let mut devices = slice(
        "slice-1",
        "node-1",
        "pool-1",
        "driver-a",
        vec![
            consuming("whole", "8Gi"),
            consuming("half-0", "4Gi"),
            consuming("half-1", "4Gi"),
        ],
    );
    devices.count = 2;
    vec![counters, devices]
}

#[test]
fn partitionable_devices_consume_a_shared_counter_set() {
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 2)], vec![])],
        partitioned_gpu(),
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[
            ("req-0", "driver-a/pool-1/half-0"),
            ("req-0", "driver-a/pool-1/half-1"),
        ]]),
        "the whole GPU and a half together would pass the counter"
    );
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])],
        partitioned_gpu(),
        &[("driver-a", "pool-1", "half-0")],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[("req-0", "driver-a/pool-1/half-1")]]),
        "an allocated half leaves too little for the whole GPU"
    );
}

#[test]
fn tainted_two_devices_tolerated() {
    let tainted = |n: &str, effect: &str, value: &str| Device {
        taints: Some(vec![DeviceTaint {
            key: "example.com/taint".into(),
            value: Some(value.into()),
            effect: effect.into(),
            time_added: None,
        }]),
        ..device(n)
    };
    let toleration = DeviceToleration {
        key: Some("example.com/taint".into()),
        operator: Some("Equal".into()),
        value: Some("value-2".into()),
        effect: Some("NoExecute".into()),
        toleration_seconds: None,
    };
    let mut r = exact("req-0", "class-a", 1);
    if let Some(e) = r.exactly.as_mut() {
        e.tolerations = Some(vec![toleration.clone()]);
    }
    let found = run(
        vec![claim("claim-0", vec![r], vec![])],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![
                tainted("device-1", "NoSchedule", "value-1"),
                tainted("device-2", "NoExecute", "value-2"),
            ],
        )],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[("req-0", "driver-a/pool-1/device-2")]])
    );
    let tolerations = found[0]
        .devices
        .as_ref()
        .and_then(|d| d.results.as_ref())
        .and_then(|r| r[0].tolerations.clone());
    assert_eq!(
        tolerations,
        Some(vec![toleration]),
        "the request's tolerations go with the result"
    );
}

#[test]
fn check_combinations_with_backtracking() {
    let typed = |n: &str, t: &str| with_attr(device(n), "type", string_attr(t));
    let found = run(
        vec![claim(
            "claim-0",
            vec![
                exact("req-1", "class-a", 2),
                selecting(
                    exact("req-2", "class-a", 1),
                    "device.attributes[\"driver-a\"].type == \"X\"",
                ),
            ],
            vec![],
        )],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![
                typed("device-1", "X"),
                typed("device-2", "Y"),
                typed("device-3", "Y"),
            ],
        )],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[
            ("req-1", "driver-a/pool-1/device-2"),
            ("req-1", "driver-a/pool-1/device-3"),
            ("req-2", "driver-a/pool-1/device-1"),
        ]])
    );
}

#[test]
fn a_cel_runtime_error_fails_the_attempt() {
    let found = run(
        vec![claim(
            "claim-0",
            vec![selecting(
                exact("req-0", "class-a", 1),
                "device.attributes[\"driver-a\"].missing == 1",
            )],
            vec![],
        )],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        )],
        &[],
        "node-1",
    );
    let err = found.expect_err("a missing attribute is a runtime error, not false");
    assert!(
        err.starts_with("claim default/claim-0: selector #0 on device driver-a/pool-1/device-1: CEL runtime error:"),
        "{err}"
    );
}

/// `tether explain`'s words for a node: device by device, why each does not serve the request.
#[test]
fn a_node_is_explained_device_by_device() {
    let tainted = Device {
        taints: Some(vec![DeviceTaint {
            key: "example.com/broken".into(),
            value: Some("fan".into()),
            effect: "NoSchedule".into(),
            time_added: None,
        }]),
        ..with_attr(device("gpu-3"), "model", string_attr("h100"))
    };
    let allocator = Allocator::new(
        vec![claim(
            "claim-0",
            vec![selecting(
                exact("gpu", "class-a", 2),
                "device.attributes[\"driver-a\"].model == \"h100\"",
            )],
            vec![],
        )],
        &classes(),
        std::sync::Arc::new(crate::scheduler::informers::devices::SliceIndex::new(vec![
            slice(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                vec![
                    with_attr(device("gpu-0"), "model", string_attr("a100")),
                    with_attr(device("gpu-1"), "model", string_attr("h100")),
                    with_attr(device("gpu-2"), "model", string_attr("h100")),
                    tainted,
                ],
            )
            .build(),
            slice(
                "slice-2",
                "node-1",
                "pool-2",
                "driver-b",
                vec![device("other")],
            )
            .build(),
        ])),
        Vec::new(),
        Allocated::from_parts(
            [DeviceId {
                driver: "driver-a".into(),
                pool: "pool-1".into(),
                device: "gpu-2".into(),
            }],
            [],
        ),
    )
    .expect("planned");
    let labels = node_1_labels();
    let node = NodeView {
        name: "node-1",
        labels: &labels,
    };
    assert_eq!(allocator.allocate(&node, None), Ok(None));
    assert_eq!(
        allocator.explain(&node),
        "claim default/claim-0, request gpu wants 2 device(s) of class class-a: 1 fit (gpu-1), 1 short; \
         gpu-0 does not match the request's selector #0 (device.attributes[\"driver-a\"].model == \"h100\"); \
         gpu-2 is allocated to another claim; \
         gpu-3 has the taint example.com/broken=fan:NoSchedule the request does not tolerate; \
         other does not match the class's selector #0 (device.driver == \"driver-a\")"
    );
}

/// The search gives up past its deadline (the plugin's filterTimeout), as upstream's Filter.
#[test]
fn a_search_past_its_deadline_gives_up() {
    let allocator = Allocator::new(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])],
        &classes(),
        std::sync::Arc::new(crate::scheduler::informers::devices::SliceIndex::new(vec![
            slice(
                "slice-1",
                "node-1",
                "pool-1",
                "driver-a",
                vec![device("device-1")],
            )
            .build(),
        ])),
        Vec::new(),
        Allocated::default(),
    )
    .expect("planned");
    let labels = node_1_labels();
    let node = NodeView {
        name: "node-1",
        labels: &labels,
    };
    assert_eq!(
        allocator.allocate(&node, Some(std::time::Instant::now())),
        Err(AllocateError::TimedOut)
    );
    assert!(matches!(allocator.allocate(&node, None), Ok(Some(_))));
}

/// Counters are compared exactly (to the nano, as resource.Quantity), not rounded to a milli:
/// 1001µ holds one device of 1000µ, not two.
#[test]
fn counters_are_exact_below_a_milli() {
    let consuming = |n: &str| Device {
        consumes_counters: Some(vec![DeviceCounterConsumption {
            counter_set: "set".into(),
            counters: [(
                "memory".to_string(),
                Counter {
                    value: Quantity("1000u".into()),
                },
            )]
            .into(),
            compatibility_groups: None,
        }]),
        ..device(n)
    };
    let mut counters = slice("slice-0", "node-1", "pool-1", "driver-a", vec![]);
    counters.counters = Some(vec![CounterSet {
        name: "set".into(),
        counters: [(
            "memory".to_string(),
            Counter {
                value: Quantity("1001u".into()),
            },
        )]
        .into(),
    }]);
    counters.count = 2;
    let mut devices = slice(
        "slice-1",
        "node-1",
        "pool-1",
        "driver-a",
        vec![consuming("a"), consuming("b")],
    );
    devices.count = 2;
    let found = run(
        vec![claim("claim-0", vec![exact("req-0", "class-a", 2)], vec![])],
        vec![counters, devices],
        &[],
        "node-1",
    );
    assert_eq!(found, Ok(None), "two devices of 1000µ overcommit 1001µ");
}

/// `All` over more devices than a claim may hold fails the attempt, as upstream's limit on
/// every request.
#[test]
fn all_devices_beyond_the_claim_limit() {
    let many: Vec<Device> = (0..33).map(|i| device(&format!("device-{i}"))).collect();
    let found = run(
        vec![claim("claim-0", vec![all_of("req-0", "class-a")], vec![])],
        vec![slice("slice-1", "node-1", "pool-1", "driver-a", many)],
        &[],
        "node-1",
    );
    assert_eq!(
        found,
        Err("claim default/claim-0, request req-0: adding 33 devices exceeds the claim limit of 32, with 0 already accounted for".into())
    );
}

/// A NIC of 100Gi bandwidth that allows multiple allocations, shares rounded up to 10Gi steps.
fn shared_nic() -> Vec<SliceSpec> {
    use k8s_openapi::api::resource::v1::{CapacityRequestPolicy, CapacityRequestPolicyRange};
    let nic = Device {
        allow_multiple_allocations: Some(true),
        capacity: Some(
            [(
                "bandwidth".to_string(),
                DeviceCapacity {
                    value: Quantity("100Gi".into()),
                    request_policy: Some(CapacityRequestPolicy {
                        default: None,
                        valid_range: Some(CapacityRequestPolicyRange {
                            min: Quantity("10Gi".into()),
                            step: Some(Quantity("10Gi".into())),
                            max: None,
                        }),
                        valid_values: None,
                    }),
                },
            )]
            .into(),
        ),
        ..device("nic-0")
    };
    vec![slice("slice-1", "node-1", "pool-1", "driver-a", vec![nic])]
}

fn bandwidth(name: &str, q: &str) -> Arc<ResourceClaim> {
    let mut r = exact("net", "class-a", 1);
    if let Some(e) = r.exactly.as_mut() {
        e.capacity = Some(k8s_openapi::api::resource::v1::CapacityRequirements {
            requests: Some([("bandwidth".to_string(), Quantity(q.into()))].into()),
        });
    }
    claim(name, vec![r], vec![])
}

/// Consumable capacity: claims share a device that allows multiple allocations, each
/// consuming its request rounded up to the policy's step, with a share ID of its own, while
/// the shares fit in the capacity.
#[test]
fn claims_share_a_device_while_its_capacity_holds() {
    let found = run(
        vec![bandwidth("claim-0", "25Gi"), bandwidth("claim-1", "25Gi")],
        shared_nic(),
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[
            &[("net", "driver-a/pool-1/nic-0")],
            &[("net", "driver-a/pool-1/nic-0")]
        ])
    );
    let results: Vec<_> = found
        .iter()
        .flat_map(|a| a.devices.iter().flat_map(|d| d.results.iter().flatten()))
        .collect();
    for r in &results {
        assert_eq!(
            r.consumed_capacity,
            Some([("bandwidth".to_string(), Quantity("30Gi".into()))].into()),
            "25Gi rounded up to the next 10Gi step"
        );
    }
    assert!(
        results[0].share_id.is_some() && results[0].share_id != results[1].share_id,
        "each share has its own ID"
    );
    let found = run(
        vec![
            bandwidth("claim-0", "30Gi"),
            bandwidth("claim-1", "30Gi"),
            bandwidth("claim-2", "50Gi"),
        ],
        shared_nic(),
        &[],
        "node-1",
    );
    assert_eq!(found, Ok(None), "30 + 30 + 50 is more than 100");
}

/// 1.38's allocator: a device that lost `allowMultipleAllocations` while a share of it lives
/// is not given whole to another claim; 1.37's gives it.
#[test]
fn a_device_with_a_live_share_is_not_taken_whole_from_1_38() {
    let slices = || {
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![device("device-1")],
        )]
    };
    let want = || vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])];
    let shared = [("driver-a", "pool-1", "device-1")];
    assert_eq!(
        run_as(38, want(), slices(), &[], &shared, "node-1"),
        Ok(None)
    );
    let found = run_as(37, want(), slices(), &[], &shared, "node-1")
        .expect("no error")
        .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[("req-0", "driver-a/pool-1/device-1")]])
    );
}

/// 1.38's allocator compares versions as semantic versions: build metadata does not count,
/// so `1.2.3+a` and `1.2.3+b` match (and are not distinct); 1.37's compares the strings.
#[test]
fn versions_match_without_their_build_metadata_from_1_38() {
    let slices = || {
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![
                with_attr(
                    device("device-1"),
                    "driver-a/driver",
                    version_attr("1.2.3+a"),
                ),
                with_attr(
                    device("device-2"),
                    "driver-a/driver",
                    version_attr("1.2.3+b"),
                ),
            ],
        )]
    };
    let matching = || {
        vec![claim(
            "claim-0",
            vec![exact("req-0", "class-a", 2)],
            vec![match_attribute("driver-a/driver", &[])],
        )]
    };
    assert!(matches!(
        run_as(38, matching(), slices(), &[], &[], "node-1"),
        Ok(Some(_))
    ));
    assert_eq!(
        run_as(37, matching(), slices(), &[], &[], "node-1"),
        Ok(None)
    );
    let distinct = || {
        vec![claim(
            "claim-0",
            vec![exact("req-0", "class-a", 2)],
            vec![DeviceConstraint {
                distinct_attribute: Some("driver-a/driver".into()),
                ..Default::default()
            }],
        )]
    };
    assert_eq!(
        run_as(38, distinct(), slices(), &[], &[], "node-1"),
        Ok(None)
    );
    assert!(matches!(
        run_as(37, distinct(), slices(), &[], &[], "node-1"),
        Ok(Some(_))
    ));
}

/// A DeviceTaintRule taints the devices its selector names; one without a selector taints no
/// device (upstream's ResourceSlice tracker), not every device.
#[test]
fn a_taint_rule_without_a_selector_taints_no_device() {
    let rule = |selector: Option<DeviceTaintSelector>| {
        Arc::new(DeviceTaintRule {
            metadata: meta("rule"),
            spec: DeviceTaintRuleSpec {
                device_selector: selector,
                taint: DeviceTaint {
                    key: "example.com/broken".into(),
                    effect: "NoSchedule".into(),
                    ..Default::default()
                },
            },
            status: None,
        })
    };
    let allocate = |rules: Vec<Arc<DeviceTaintRule>>| {
        let allocator = Allocator::new(
            vec![claim("claim-0", vec![exact("req-0", "class-a", 1)], vec![])],
            &classes(),
            std::sync::Arc::new(crate::scheduler::informers::devices::SliceIndex::new(vec![
                slice(
                    "slice-1",
                    "node-1",
                    "pool-1",
                    "driver-a",
                    vec![device("device-1")],
                )
                .build(),
            ])),
            rules,
            Allocated::default(),
        )
        .expect("planned");
        let labels = node_1_labels();
        allocator
            .allocate(
                &NodeView {
                    name: "node-1",
                    labels: &labels,
                },
                None,
            )
            .map(|found| found.is_some())
            .map_err(|e| e.to_string())
    };
    assert_eq!(
        allocate(vec![rule(None)]),
        Ok(true),
        "no selector, no taint"
    );
    let named = DeviceTaintSelector {
        driver: Some("driver-a".into()),
        device: Some("device-1".into()),
        ..Default::default()
    };
    assert_eq!(
        allocate(vec![rule(Some(named))]),
        Ok(false),
        "the device it names is tainted"
    );
}

/// `allocationMode: All` with capacity requests takes every selectable device that could hold
/// them and leaves out the ones too small, as upstream; it does not fail the request.
#[test]
fn all_devices_leave_out_those_too_small_for_the_capacity_asked() {
    let mut all = all_of("req-0", "class-a");
    if let Some(e) = all.exactly.as_mut() {
        e.capacity = Some(k8s_openapi::api::resource::v1::CapacityRequirements {
            requests: Some([("memory".to_string(), Quantity("60Gi".into()))].into()),
        });
    }
    let found = run(
        vec![claim("claim-0", vec![all], vec![])],
        vec![slice(
            "slice-1",
            "node-1",
            "pool-1",
            "driver-a",
            vec![
                with_memory(device("small"), "40Gi"),
                with_memory(device("large"), "80Gi"),
                device("none"),
            ],
        )],
        &[],
        "node-1",
    )
    .expect("no error")
    .expect("allocated");
    assert_eq!(
        picked(&found),
        picks(&[&[("req-0", "driver-a/pool-1/large")]])
    );
}
