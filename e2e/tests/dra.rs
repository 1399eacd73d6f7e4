//! DynamicResources on the local control plane, side by side with kube-scheduler v1.37.2: the
//! test publishes the ResourceSlices a DRA driver would (kwok nodes have no driver), a
//! DeviceClass selecting the driver by CEL, and pods whose claims kube-controller-manager
//! makes from ResourceClaimTemplates. Each pod goes first through kube-scheduler, then (its
//! claim deleted, its devices free again) through tether: both must choose the same node and
//! the same devices, device by device, and write the same allocation; a pod no node can serve
//! must get the same message.
//!
//! One test at a time: the failure message counts every node of the cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use kube::api::{Api, DeleteParams, PostParams};
use serde_json::{Value, json};
use tether_e2e::controller_ref;
use tether_e2e::kubevirt;
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, device_class, kubectl_ok,
    resource_slice, unique_suffix, wait_for,
};

static ALONE: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// A driver of the test's own, its class, and slices on its nodes: node 0 has two `a100` and
/// two `h100` GPUs (NUMA 0, 0, 1, 1) and a `t4` tainted `example.com/broken=fan:NoSchedule`,
/// node 1 an `a100` and a `v100`. A second driver (class `part-…`) publishes on node 0 one partitionable
/// GPU of 8Gi: whole, or as two halves, all three drawing on one shared counter.
struct Devices {
    driver: String,
    class: String,
    partitioned_class: String,
    /// A NIC of 100Gi bandwidth on node 0, shared (it allows multiple allocations), shares
    /// rounded up to 10Gi steps.
    nic_class: String,
    slices: Vec<String>,
}

impl Devices {
    fn publish(nodes: &TestNodes) -> anyhow::Result<Self> {
        let suffix = unique_suffix();
        let driver = format!("gpu-{suffix}.example.com");
        let class = format!("gpu-{suffix}");
        device_class(&class, &driver)?;
        let gpu = |name: &str, model: &str, numa: i64, memory: &str| {
            json!({
                "name": name,
                "attributes": {"model": {"string": model}, "numa": {"int": numa},
                               "driverVersion": {"version": "1.2.3"}},
                "capacity": {"memory": {"value": memory}},
            })
        };
        let mut tainted = gpu("gpu-4", "t4", 1, "16Gi");
        tainted["taints"] =
            json!([{"key": "example.com/broken", "value": "fan", "effect": "NoSchedule"}]);
        let layouts = [
            vec![
                gpu("gpu-0", "a100", 0, "40Gi"),
                gpu("gpu-1", "a100", 0, "40Gi"),
                gpu("gpu-2", "h100", 1, "80Gi"),
                gpu("gpu-3", "h100", 1, "80Gi"),
                tainted,
            ],
            vec![
                gpu("gpu-0", "a100", 0, "40Gi"),
                gpu("gpu-1", "v100", 0, "32Gi"),
            ],
        ];
        let mut slices = Vec::new();
        for (node, devices) in nodes.names.iter().zip(layouts) {
            let name = format!("{node}-{suffix}");
            resource_slice(&name, &driver, node, node, json!(devices))?;
            slices.push(name);
        }
        // The partitionable GPU: a pool of two slices, the counter set and the devices.
        let part_driver = format!("part-{suffix}.example.com");
        let partitioned_class = format!("part-{suffix}");
        device_class(&partitioned_class, &part_driver)?;
        let node = &nodes.names[0];
        let consuming = |name: &str, memory: &str| {
            json!({"name": name, "capacity": {"memory": {"value": memory}},
                   "consumesCounters": [{"counterSet": "gpu-0", "counters": {"memory": {"value": memory}}}]})
        };
        for (name, spec) in [
            (
                format!("{node}-{suffix}-counters"),
                json!({"sharedCounters": [{"name": "gpu-0", "counters": {"memory": {"value": "8Gi"}}}]}),
            ),
            (
                format!("{node}-{suffix}-partitions"),
                json!({"devices": [consuming("whole", "8Gi"), consuming("half-0", "4Gi"),
                                   consuming("half-1", "4Gi")]}),
            ),
        ] {
            let mut slice = json!({
                "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                "metadata": {"name": name},
                "spec": {"driver": part_driver, "nodeName": node,
                         "pool": {"name": "partitioned", "generation": 1, "resourceSliceCount": 2}},
            });
            if let (Some(into), Some(from)) = (slice["spec"].as_object_mut(), spec.as_object()) {
                into.extend(from.clone());
            }
            apply(slice)?;
            slices.push(name);
        }
        let nic_driver = format!("nic-{suffix}.example.com");
        let nic_class = format!("nic-{suffix}");
        device_class(&nic_class, &nic_driver)?;
        let nic_slice = format!("{node}-{suffix}-nics");
        resource_slice(
            &nic_slice,
            &nic_driver,
            node,
            "nics",
            json!([{"name": "nic-0", "allowMultipleAllocations": true,
                    "capacity": {"bandwidth": {"value": "100Gi", "requestPolicy": {
                        "default": "10Gi",
                        "validRange": {"min": "10Gi", "step": "10Gi"}}}}}]),
        )?;
        slices.push(nic_slice);
        Ok(Devices {
            driver,
            class,
            partitioned_class,
            nic_class,
            slices,
        })
    }

    fn delete(self) -> anyhow::Result<()> {
        for s in &self.slices {
            kubectl_ok(&["delete", "resourceslice", s, "--ignore-not-found"], None)?;
        }
        for class in [&self.class, &self.partitioned_class, &self.nic_class] {
            kubectl_ok(
                &["delete", "deviceclass", class, "--ignore-not-found"],
                None,
            )?;
        }
        Ok(())
    }
}

/// What a scheduler made of one pod: its node and its claim's allocation (request, device,
/// in order), or its failure message.
#[derive(Debug, PartialEq)]
enum Outcome {
    Bound {
        node: String,
        devices: Vec<(String, String)>,
        node_selector: Option<Value>,
    },
    Unschedulable(String),
}

/// One pod with one claim from a template (`devices` is the template's `spec.devices`).
struct Case {
    name: &'static str,
    devices: Value,
}

/// The pod of case `case` for `scheduler`: `<case>-ref` for kube-scheduler, `<case>-tether`.
fn pod_name(case: &str, scheduler: &str) -> String {
    let by = if scheduler.contains("reference") {
        "ref"
    } else {
        "tether"
    };
    format!("{case}-{by}")
}

/// The message of the pod's `PodScheduled=False` condition with reason `Unschedulable`.
fn unschedulable_message(pod: Pod) -> Option<String> {
    pod.status
        .and_then(|s| s.conditions)
        .unwrap_or_default()
        .into_iter()
        .find(|c| {
            c.type_ == "PodScheduled"
                && c.status == "False"
                && c.reason.as_deref() == Some("Unschedulable")
        })
        .and_then(|c| c.message)
}

/// Deletes the pod at once and waits until it and the claims it owns (kube-controller-manager
/// deallocates and deletes them) are gone: the devices are free for the next scheduler.
async fn delete_with_its_claims(
    pods: &Api<Pod>,
    claims: &Api<ResourceClaim>,
    pod_name: &str,
) -> anyhow::Result<()> {
    pods.delete(pod_name, &DeleteParams::default().grace_period(0))
        .await?;
    wait_for(
        &format!("{pod_name} and its claim gone"),
        Duration::from_secs(60),
        || async move {
            let pod_gone = pods.get_opt(pod_name).await?.is_none();
            let claims_left = claims
                .list(&Default::default())
                .await?
                .items
                .into_iter()
                .filter(|c| {
                    c.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| o.name == pod_name)
                })
                .count();
            Ok((pod_gone && claims_left == 0).then_some(()))
        },
    )
    .await
}

async fn run_once(
    client: &kube::Client,
    ns: &str,
    nodes: &TestNodes,
    scheduler: &str,
    case: &Case,
) -> anyhow::Result<Outcome> {
    let template = format!("{}-{scheduler}", case.name);
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": template, "namespace": ns},
        "spec": {"spec": {"devices": case.devices}},
    }))?;
    let mut spec = json!({
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
    });
    nodes.isolate(&mut spec);
    let pod_name = pod_name(case.name, scheduler);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name}, "spec": spec,
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let outcome = wait_for(
        &format!("{scheduler} to place or reject {pod_name}"),
        Duration::from_secs(60),
        || {
            let (pods, claims, pod_name) = (pods.clone(), claims.clone(), pod_name.clone());
            async move {
                let pod = pods.get(&pod_name).await?;
                if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    let claim_name = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.resource_claim_statuses.as_ref())
                        .and_then(|s| s.first())
                        .and_then(|s| s.resource_claim_name.clone())
                        .ok_or_else(|| anyhow::anyhow!("a bound pod without its claim"))?;
                    let claim = claims.get(&claim_name).await?;
                    let status = claim.status.clone().unwrap_or_default();
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    anyhow::ensure!(
                        status.reserved_for.iter().flatten().any(|r| r.uid == uid),
                        "the bound pod's claim is not reserved for it: {status:?}"
                    );
                    anyhow::ensure!(
                        claim
                            .metadata
                            .finalizers
                            .iter()
                            .flatten()
                            .any(|f| f == "resource.kubernetes.io/delete-protection"),
                        "the allocated claim has no delete-protection finalizer"
                    );
                    let allocation = status
                        .allocation
                        .ok_or_else(|| anyhow::anyhow!("a bound pod's claim is not allocated"))?;
                    let devices = allocation
                        .devices
                        .iter()
                        .flat_map(|d| d.results.iter().flatten())
                        .map(|r| {
                            let admin = if r.admin_access == Some(true) {
                                " (admin)"
                            } else {
                                ""
                            };
                            let consumed: Vec<String> = r
                                .consumed_capacity
                                .iter()
                                .flatten()
                                .map(|(k, q)| format!(" {k}={}", q.0))
                                .collect();
                            let share = if r.share_id.is_some() {
                                " (shared)"
                            } else {
                                ""
                            };
                            (
                                r.request.clone(),
                                format!(
                                    "{}/{}{admin}{share}{}",
                                    r.pool,
                                    r.device,
                                    consumed.concat()
                                ),
                            )
                        })
                        .collect();
                    return Ok(Some(Outcome::Bound {
                        node,
                        devices,
                        node_selector: allocation
                            .node_selector
                            .map(serde_json::to_value)
                            .transpose()?,
                    }));
                }
                let rejected = unschedulable_message(pod);
                Ok(rejected.map(Outcome::Unschedulable))
            }
        },
    )
    .await?;
    // The pod goes, and with it (kube-controller-manager deallocates and deletes it) its
    // claim: the devices are free for the next scheduler.
    delete_with_its_claims(&pods, &claims, &pod_name).await?;
    kubectl_ok(
        &["delete", "resourceclaimtemplate", &template, "-n", ns],
        None,
    )?;
    Ok(outcome)
}

/// Pods with GPU claims land where kube-scheduler puts them and get the devices it gives them,
/// device by device; a claim no node can serve reads the same.
#[tokio::test]
async fn claims_get_the_devices_kube_scheduler_gives_them() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra").await?;
    // Admin access is for namespaces an administrator marked so.
    kubectl_ok(
        &[
            "label",
            "namespace",
            &ns.name,
            "resource.kubernetes.io/admin-access=true",
        ],
        None,
    )?;
    // Node 1 has half the CPUs: where both nodes can serve a claim, both schedulers prefer
    // node 0 (no tie to break at random).
    let nodes = TestNodes::create(&client, "dra", 2, "16", |i, node| {
        if i == 1 {
            for field in ["allocatable", "capacity"] {
                node["status"][field]["cpu"] = json!("8");
            }
        }
    })
    .await?;
    let devices = Devices::publish(&nodes)?;
    let suffix = unique_suffix();
    let (reference, tether) = (
        format!("dra-reference-{suffix}"),
        format!("dra-tether-{suffix}"),
    );
    let kube = ReferenceScheduler::start("kube-scheduler-dra", &[&reference])?;
    apply_profile(
        &client,
        &tether,
        json!({"schedulerName": tether, "plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}),
    )
    .await?;
    // A DeviceTaintRule without a selector taints no device (where the kind is served, 1.37
    // on): every case below allocates as if it were not there.
    let unselective = format!("dra-taints-nothing-{suffix}");
    let rules_served = tether_e2e::cluster_minor(&client).await? >= 37;
    if rules_served {
        apply(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceTaintRule",
            "metadata": {"name": unselective},
            "spec": {"taint": {"key": "example.com/everything", "effect": "NoSchedule"}},
        }))?;
    }
    let class = devices.class.as_str();
    let model = |m: &str| format!("device.attributes[\"{}\"].model == \"{m}\"", devices.driver);
    let cases = [
        Case {
            name: "one",
            devices: json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}),
        },
        Case {
            name: "two-h100",
            devices: json!({"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": class, "count": 2,
                "selectors": [{"cel": {"expression": model("h100")}}]}}]}),
        },
        Case {
            name: "prioritized",
            devices: json!({"requests": [{"name": "gpu", "firstAvailable": [
                {"name": "three-h100", "deviceClassName": class, "count": 3,
                 "selectors": [{"cel": {"expression": model("h100")}}]},
                {"name": "one-a100", "deviceClassName": class,
                 "selectors": [{"cel": {"expression": model("a100")}}]}]}]}),
        },
        Case {
            name: "same-numa",
            devices: json!({
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": class}},
                    {"name": "b", "exactly": {"deviceClassName": class}}],
                "constraints": [{"matchAttribute": format!("{}/numa", devices.driver)}]}),
        },
        Case {
            name: "all",
            devices: json!({"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": class, "allocationMode": "All",
                "selectors": [{"cel": {"expression": model("a100")}}]}}]}),
        },
        Case {
            // Every device big enough: the a100s (40Gi) are left out, not the claim refused.
            name: "all-large",
            devices: json!({"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": class, "allocationMode": "All",
                "selectors": [{"cel": {"expression": format!("{} || {}", model("a100"), model("h100"))}}],
                "capacity": {"requests": {"memory": "64Gi"}}}}]}),
        },
        Case {
            name: "memory",
            devices: json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": class,
                "selectors": [{"cel": {"expression": format!(
                    "device.capacity[\"{}\"].memory.compareTo(quantity(\"64Gi\")) >= 0", devices.driver)}}]}}]}),
        },
        Case {
            name: "t4-untolerated",
            devices: json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": class,
                "selectors": [{"cel": {"expression": model("t4")}}]}}]}),
        },
        Case {
            name: "t4-tolerated",
            devices: json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": class,
                "selectors": [{"cel": {"expression": model("t4")}}],
                "tolerations": [{"key": "example.com/broken", "operator": "Exists", "effect": "NoSchedule"}]}}]}),
        },
        Case {
            name: "two-partitions",
            devices: json!({"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": devices.partitioned_class, "count": 2}}]}),
        },
        Case {
            // Node 1 serves the first choice, node 0 only the second: Score decides.
            name: "first-choice-elsewhere",
            devices: json!({"requests": [{"name": "gpu", "firstAvailable": [
                {"name": "v100", "deviceClassName": class,
                 "selectors": [{"cel": {"expression": model("v100")}}]},
                {"name": "h100", "deviceClassName": class,
                 "selectors": [{"cel": {"expression": model("h100")}}]}]}]}),
        },
        Case {
            name: "distinct-numa",
            devices: json!({
                "requests": [
                    {"name": "a", "exactly": {"deviceClassName": class}},
                    {"name": "b", "exactly": {"deviceClassName": class}}],
                "constraints": [{"distinctAttribute": format!("{}/numa", devices.driver)}]}),
        },
        Case {
            name: "admin",
            devices: json!({"requests": [{"name": "gpu", "exactly": {
                "deviceClassName": class, "adminAccess": true}}]}),
        },
        Case {
            name: "bandwidth-share",
            devices: json!({"requests": [{"name": "net", "exactly": {
                "deviceClassName": devices.nic_class,
                "capacity": {"requests": {"bandwidth": "25Gi"}}}}]}),
        },
        Case {
            name: "too-many",
            devices: json!({"requests": [{"name": "gpu", "exactly": {"deviceClassName": class, "count": 5}}]}),
        },
    ];
    let mut differ = Vec::new();
    for case in &cases {
        let by_reference = run_once(&client, &ns.name, &nodes, &reference, case).await?;
        let by_tether = run_once(&client, &ns.name, &nodes, &tether, case).await?;
        println!(
            "{}: kube-scheduler {by_reference:?}; tether {by_tether:?}",
            case.name
        );
        if by_reference != by_tether {
            differ.push(format!(
                "{}:\n  kube-scheduler: {by_reference:?}\n  tether:         {by_tether:?}",
                case.name
            ));
        }
    }
    drop(kube);
    kubectl_ok(&["delete", "sp", &tether], None)?;
    if rules_served {
        kubectl_ok(&["delete", "devicetaintrule", &unselective], None)?;
    }
    assert!(
        differ.is_empty(),
        "tether allocated otherwise than kube-scheduler:\n{}",
        differ.join("\n")
    );
    devices.delete()?;
    ns.delete().await?;
    nodes.delete().await
}

/// One pod of the extended-resource cases: its containers (init and regular), and the node
/// it must run on, if the case picks one.
struct ExtendedCase {
    name: &'static str,
    init_containers: Value,
    containers: Value,
    on_node: Option<usize>,
}

/// What a scheduler made of a pod asking for an extended resource: its node and, where DRA
/// served it, the claim's devices by request and the pod's mappings (container, resource,
/// request); or its failure message.
#[derive(Debug, PartialEq)]
enum ExtendedOutcome {
    Bound {
        node: String,
        devices: Vec<(String, String)>,
        mappings: Vec<(String, String, String)>,
    },
    Unschedulable(String),
}

async fn run_extended(
    client: &kube::Client,
    ns: &str,
    nodes: &TestNodes,
    scheduler: &str,
    case: &ExtendedCase,
) -> anyhow::Result<ExtendedOutcome> {
    let mut spec = json!({
        "schedulerName": scheduler,
        "initContainers": case.init_containers,
        "containers": case.containers,
    });
    nodes.isolate(&mut spec);
    if let Some(i) = case.on_node {
        spec["nodeSelector"]["kubernetes.io/hostname"] = json!(nodes.names[i]);
    }
    let pod_name = pod_name(case.name, scheduler);
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name}, "spec": spec,
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    let outcome = wait_for(
        &format!("{scheduler} to place or reject {pod_name}"),
        Duration::from_secs(60),
        || {
            let (pods, claims, pod_name) = (pods.clone(), claims.clone(), pod_name.clone());
            async move {
                let pod = pods.get(&pod_name).await?;
                if let Some(node) = pod.spec.as_ref().and_then(|s| s.node_name.clone()) {
                    let uid = pod.metadata.uid.clone().unwrap_or_default();
                    let owned: Vec<ResourceClaim> = claims
                        .list(&Default::default())
                        .await?
                        .items
                        .into_iter()
                        .filter(|c| {
                            c.metadata
                                .owner_references
                                .iter()
                                .flatten()
                                .any(|o| o.uid == uid)
                        })
                        .collect();
                    let status = pod
                        .status
                        .as_ref()
                        .and_then(|s| s.extended_resource_claim_status.clone());
                    let Some(status) = status else {
                        // Served by the node's allocatable (a device plugin): no claim.
                        anyhow::ensure!(
                            owned.is_empty(),
                            "a claim without the pod's status naming it: {owned:?}"
                        );
                        return Ok(Some(ExtendedOutcome::Bound {
                            node,
                            devices: Vec::new(),
                            mappings: Vec::new(),
                        }));
                    };
                    let claim = claims.get(&status.resource_claim_name).await?;
                    anyhow::ensure!(
                        claim
                            .metadata
                            .annotations
                            .as_ref()
                            .and_then(|a| a.get("resource.kubernetes.io/extended-resource-claim"))
                            .map(String::as_str)
                            == Some("true"),
                        "the extended resources' claim is not annotated as such"
                    );
                    anyhow::ensure!(
                        claim
                            .metadata
                            .owner_references
                            .iter()
                            .flatten()
                            .any(|o| o.uid == uid && o.controller == Some(true)),
                        "the extended resources' claim is not controlled by the pod"
                    );
                    let cs = claim.status.clone().unwrap_or_default();
                    anyhow::ensure!(
                        cs.reserved_for.iter().flatten().any(|r| r.uid == uid),
                        "the claim is not reserved for the pod: {cs:?}"
                    );
                    let allocation = cs
                        .allocation
                        .ok_or_else(|| anyhow::anyhow!("the claim is not allocated"))?;
                    let devices = allocation
                        .devices
                        .iter()
                        .flat_map(|d| d.results.iter().flatten())
                        .map(|r| (r.request.clone(), format!("{}/{}", r.pool, r.device)))
                        .collect();
                    let mappings = status
                        .request_mappings
                        .into_iter()
                        .map(|m| (m.container_name, m.resource_name, m.request_name))
                        .collect();
                    return Ok(Some(ExtendedOutcome::Bound {
                        node,
                        devices,
                        mappings,
                    }));
                }
                let rejected = unschedulable_message(pod);
                Ok(rejected.map(ExtendedOutcome::Unschedulable))
            }
        },
    )
    .await?;
    delete_with_its_claims(&pods, &claims, &pod_name).await?;
    Ok(outcome)
}

/// Extended resources a DeviceClass serves (`extendedResourceName`, or the class's implicit
/// name): where the node's allocatable lacks the resource, both schedulers make the pod a
/// claim, allocate it the same devices under the same request names, and record the same
/// mappings in the pod's status; a node whose device plugin has the resource serves it without
/// a claim; a request nobody can serve reads the same.
#[tokio::test]
async fn extended_resources_get_the_devices_kube_scheduler_gives_them() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-ext").await?;
    let suffix = unique_suffix();
    let resource = format!("example.com/gpu-{suffix}");
    // Node 0 has two GPUs through DRA and none in its allocatable; node 1, with half the
    // CPUs (so node 0 scores higher where both serve), one through a device plugin.
    let plugin_resource = resource.clone();
    let nodes = TestNodes::create(&client, "dra-ext", 2, "16", move |i, node| {
        if i == 1 {
            for field in ["allocatable", "capacity"] {
                node["status"][field]["cpu"] = json!("8");
                node["status"][field][plugin_resource.as_str()] = json!("1");
            }
        }
    })
    .await?;
    let driver = format!("ext-{suffix}.example.com");
    let class = format!("ext-{suffix}");
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": class},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}],
                 "extendedResourceName": resource},
    }))?;
    let slice = format!("{}-{suffix}", nodes.names[0]);
    resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        &nodes.names[0],
        json!([{"name": "gpu-0"}, {"name": "gpu-1"}]),
    )?;
    let reference = format!("dra-ext-reference-{suffix}");
    let tether = format!("dra-ext-tether-{suffix}");
    let kube = ReferenceScheduler::start("kube-scheduler-dra-ext", &[&reference])?;
    apply_profile(
        &client,
        &tether,
        json!({"schedulerName": tether, "plugins": {"postFilter": {"disabled": [{"name": "*"}]}}}),
    )
    .await?;
    let asks = |name: &str, what: &str, n: &str| json!({"name": name, "image": "pause", "resources": {"requests": {what: n}, "limits": {what: n}}});
    let implicit = format!("deviceclass.resource.kubernetes.io/{class}");
    let cases = [
        ExtendedCase {
            name: "one",
            init_containers: json!([]),
            containers: json!([asks("c", &resource, "1")]),
            on_node: None,
        },
        ExtendedCase {
            name: "two",
            init_containers: json!([]),
            containers: json!([asks("a", &resource, "1"), asks("b", &resource, "1")]),
            on_node: None,
        },
        ExtendedCase {
            name: "device-plugin",
            init_containers: json!([]),
            containers: json!([asks("c", &resource, "1")]),
            on_node: Some(1),
        },
        ExtendedCase {
            name: "implicit",
            init_containers: json!([]),
            containers: json!([asks("c", &implicit, "1")]),
            on_node: None,
        },
        ExtendedCase {
            name: "init",
            init_containers: json!([asks("setup", &resource, "2")]),
            containers: json!([asks("c", &resource, "1")]),
            on_node: None,
        },
        ExtendedCase {
            name: "too-many",
            init_containers: json!([]),
            containers: json!([asks("c", &resource, "3")]),
            on_node: None,
        },
    ];
    let mut differ = Vec::new();
    for case in &cases {
        let by_reference = run_extended(&client, &ns.name, &nodes, &reference, case).await?;
        let by_tether = run_extended(&client, &ns.name, &nodes, &tether, case).await?;
        println!(
            "{}: kube-scheduler {by_reference:?}; tether {by_tether:?}",
            case.name
        );
        if by_reference != by_tether {
            differ.push(format!(
                "{}:\n  kube-scheduler: {by_reference:?}\n  tether:         {by_tether:?}",
                case.name
            ));
        }
    }
    drop(kube);
    kubectl_ok(&["delete", "sp", &tether], None)?;
    assert!(
        differ.is_empty(),
        "tether served extended resources otherwise than kube-scheduler:\n{}",
        differ.join("\n")
    );
    kubectl_ok(&["delete", "resourceslice", &slice], None)?;
    kubectl_ok(&["delete", "deviceclass", &class], None)?;
    ns.delete().await?;
    nodes.delete().await
}

/// Consumable capacity shared by several claims at once: three pods each take a share of one
/// NIC's 100Gi (30Gi, 30Gi and 40Gi once rounded to the policy's 10Gi steps), each share with an
/// ID of its own; a fourth asking 10Gi more finds no room; once a share's pod goes, its
/// bandwidth serves the fourth. Expectations by hand from the policy (no scheduler's output).
#[tokio::test]
async fn a_device_is_shared_by_several_claims_while_its_capacity_holds() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-shares").await?;
    let nodes = TestNodes::create(&client, "dra-shares", 1, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let driver = format!("nic-{suffix}.example.com");
    let class = format!("nic-{suffix}");
    device_class(&class, &driver)?;
    let slice = format!("nic-{suffix}");
    resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        "nics",
        json!([{"name": "nic-0", "allowMultipleAllocations": true,
                "capacity": {"bandwidth": {"value": "100Gi", "requestPolicy": {
                    "default": "10Gi", "validRange": {"min": "10Gi", "step": "10Gi"}}}}}]),
    )?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let start = |name: String, bandwidth: &str| {
        let claim = json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": ns.name},
            "spec": {"devices": {"requests": [{"name": "net", "exactly": {
                "deviceClassName": class, "capacity": {"requests": {"bandwidth": bandwidth}}}}]}},
        });
        let mut spec = json!({
            "schedulerName": "tether-scheduler",
            "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "net"}]}}],
            "resourceClaims": [{"name": "net", "resourceClaimName": name}],
        });
        nodes.isolate(&mut spec);
        let pods = pods.clone();
        async move {
            apply(claim)?;
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            anyhow::Ok(())
        }
    };
    // Three shares created together: 25Gi → 30Gi, 21Gi → 30Gi, 40Gi → 40Gi.
    for (name, bandwidth) in [("a", "25Gi"), ("b", "21Gi"), ("c", "40Gi")] {
        start(name.to_string(), bandwidth).await?;
    }
    let mut shares = Vec::new();
    for (name, consumed) in [("a", "30Gi"), ("b", "30Gi"), ("c", "40Gi")] {
        tether_e2e::wait_bound(&client, &ns.name, name, Duration::from_secs(60)).await?;
        let result = claims
            .get(name)
            .await?
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .and_then(|r| r.into_iter().next())
            .ok_or_else(|| anyhow::anyhow!("claim {name} is not allocated"))?;
        assert_eq!(result.device, "nic-0");
        let got = result
            .consumed_capacity
            .and_then(|c| c.get("bandwidth").map(|q| q.0.clone()));
        assert_eq!(got.as_deref(), Some(consumed), "claim {name}'s share");
        shares.push(
            result
                .share_id
                .ok_or_else(|| anyhow::anyhow!("claim {name}'s share has no ID"))?,
        );
    }
    shares.sort();
    shares.dedup();
    assert_eq!(shares.len(), 3, "each share has an ID of its own");
    // 100Gi less 100Gi: a fourth share of 10Gi does not fit.
    start("d".to_string(), "10Gi").await?;
    let message = wait_for("the fourth share refused", Duration::from_secs(60), || {
        let pods = pods.clone();
        async move {
            let pod = pods.get("d").await?;
            anyhow::ensure!(
                pod.spec
                    .as_ref()
                    .and_then(|s| s.node_name.as_ref())
                    .is_none(),
                "the fourth share was bound beyond the NIC's capacity"
            );
            Ok(pod
                .status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message))
        }
    })
    .await?;
    assert!(
        message.contains("cannot allocate all claims"),
        "unexpected message: {message}"
    );
    // A share's pod goes (and its claim's reservation with it): its bandwidth serves the fourth.
    pods.delete("b", &DeleteParams::default().grace_period(0))
        .await?;
    kubectl_ok(
        &[
            "delete",
            "resourceclaim",
            "b",
            "-n",
            &ns.name,
            "--wait=false",
        ],
        None,
    )?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "d", Duration::from_secs(90)).await?;
    assert_eq!(node, nodes.names[0]);
    ns.delete().await?;
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// A pod whose claim does not exist yet waits (PreEnqueue, as upstream: it is not tried, and
/// nothing is written on it), and is scheduled once the claim is created; a second pod sharing
/// the claim by name goes to the node its allocation is on, and the claim is reserved for both.
#[tokio::test]
async fn a_pod_waits_for_its_claim_and_a_shared_claim_keeps_its_node() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-wait").await?;
    let nodes = TestNodes::create(&client, "dra-wait", 2, "16", |_, _| {}).await?;
    let devices = Devices::publish(&nodes)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod_with_claim = |name: &str| -> anyhow::Result<Pod> {
        let mut spec = json!({
            "schedulerName": "tether-scheduler",
            "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "shared"}],
        });
        nodes.isolate(&mut spec);
        Ok(serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
        }))?)
    };
    pods.create(&PostParams::default(), &pod_with_claim("first")?)
        .await?;
    // No condition while it waits at PreEnqueue: wait a little for a wrong write to show.
    let waited = wait_for("first to be tried", Duration::from_secs(3), || {
        let pods = pods.clone();
        async move {
            let p = pods.get("first").await?;
            let tried = p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                || p.status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "PodScheduled");
            Ok(tried.then_some(()))
        }
    })
    .await;
    assert!(waited.is_err(), "a pod whose claim is missing is not tried");
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "shared", "namespace": ns.name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": devices.class,
            "selectors": [{"cel": {"expression": format!("device.attributes[\"{}\"].model == \"h100\"", devices.driver)}}]}}]}},
    }))?;
    let first = tether_e2e::wait_bound(&client, &ns.name, "first", Duration::from_secs(60)).await?;
    assert_eq!(first, nodes.names[0], "only node 0 has an h100");
    pods.create(&PostParams::default(), &pod_with_claim("second")?)
        .await?;
    let second =
        tether_e2e::wait_bound(&client, &ns.name, "second", Duration::from_secs(60)).await?;
    assert_eq!(
        second, first,
        "a shared claim's pods go where its devices are"
    );
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let reserved: BTreeMap<String, String> = claims
        .get("shared")
        .await?
        .status
        .and_then(|s| s.reserved_for)
        .unwrap_or_default()
        .into_iter()
        .map(|r| (r.name, r.resource))
        .collect();
    assert_eq!(
        reserved,
        BTreeMap::from([
            ("first".to_string(), "pods".to_string()),
            ("second".to_string(), "pods".to_string())
        ]),
        "the claim is reserved for both pods"
    );
    pods.delete("first", &DeleteParams::default().grace_period(0))
        .await?;
    pods.delete("second", &DeleteParams::default().grace_period(0))
        .await?;
    ns.delete().await?;
    devices.delete()?;
    nodes.delete().await
}

/// A device with binding conditions (a driver attaching it first): tether allocates it, names
/// the node in the pod's `nominatedNodeName` and waits in PreBind, without binding the pod,
/// until the driver reports the condition true in the claim's status; then the pod is bound
/// there. A failure condition instead fails the binding cycle.
#[tokio::test]
async fn a_device_with_binding_conditions_is_waited_for() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-conditions").await?;
    let nodes = TestNodes::create(&client, "dra-conditions", 1, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let driver = format!("fabric-{suffix}.example.com");
    let class = format!("fabric-{suffix}");
    device_class(&class, &driver)?;
    let slice = format!("fabric-{suffix}");
    resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        "fabric",
        json!([{"name": "gpu-0", "bindingConditions": ["Attached"],
                "bindingFailureConditions": ["AttachFailed"]}]),
    )?;
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "attached", "namespace": ns.name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
    }))?;
    let mut spec = json!({
        "schedulerName": "tether-scheduler",
        "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "attached"}],
    });
    nodes.isolate(&mut spec);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "waits"}, "spec": spec,
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    // Allocated and reserved, the node nominated, the pod not bound.
    wait_for(
        "the claim allocated and the node nominated",
        Duration::from_secs(60),
        || {
            let (pods, claims) = (pods.clone(), claims.clone());
            async move {
                let claim = claims.get("attached").await?;
                let allocated = claim
                    .status
                    .as_ref()
                    .is_some_and(|s| s.allocation.is_some());
                let pod = pods.get("waits").await?;
                let nominated = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.nominated_node_name.clone());
                Ok((allocated && nominated.is_some()).then_some(nominated))
            }
        },
    )
    .await?;
    let pod = pods.get("waits").await?;
    assert_eq!(
        pod.status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref()),
        Some(nodes.names[0].as_str()),
        "the node is nominated while the device is prepared"
    );
    // The binding cycle waits: the pod stays unbound while the condition is not reported.
    let early = tether_e2e::wait_bound(&client, &ns.name, "waits", Duration::from_secs(3)).await;
    assert!(early.is_err(), "bound before its device was attached");
    let device_status = |attached: &str| {
        json!({"status": {"devices": [{
            "driver": driver, "pool": "fabric", "device": "gpu-0",
            "conditions": [{"type": "Attached", "status": attached, "reason": "Driver",
                            "message": "attached", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}})
    };
    kubectl_ok(
        &[
            "patch",
            "resourceclaim",
            "attached",
            "-n",
            &ns.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            &device_status("True").to_string(),
        ],
        None,
    )?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "waits", Duration::from_secs(60)).await?;
    assert_eq!(node, nodes.names[0]);
    pods.delete("waits", &DeleteParams::default().grace_period(0))
        .await?;
    ns.delete().await?;
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// A device whose driver reports a binding failure condition: PreBind gives up on it, Filter
/// then finds the claim unavailable everywhere, PostFilter deallocates it, and the next attempt
/// allocates it afresh (a new allocation time, the failure gone with the old status), as
/// upstream recovers; the pod is bound once the new attempt's condition is met.
#[tokio::test]
async fn a_device_that_fails_its_binding_conditions_is_allocated_again() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-failed").await?;
    let nodes = TestNodes::create(&client, "dra-failed", 1, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let driver = format!("fabric-{suffix}.example.com");
    let class = format!("fabric-{suffix}");
    device_class(&class, &driver)?;
    let slice = format!("fabric-{suffix}");
    resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        "fabric",
        json!([{"name": "gpu-0", "bindingConditions": ["Attached"],
                "bindingFailureConditions": ["AttachFailed"]}]),
    )?;
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "flaky", "namespace": ns.name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
    }))?;
    let mut spec = json!({
        "schedulerName": "tether-scheduler",
        "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "flaky"}],
    });
    nodes.isolate(&mut spec);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "retries"}, "spec": spec,
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let allocated_at = |claim: &ResourceClaim| {
        claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.allocation_timestamp.clone())
    };
    let first = wait_for("the claim allocated", Duration::from_secs(60), || {
        let claims = claims.clone();
        async move { Ok(allocated_at(&claims.get("flaky").await?)) }
    })
    .await?;
    let condition = |kind: &str| {
        json!({"status": {"devices": [{
            "driver": driver, "pool": "fabric", "device": "gpu-0",
            "conditions": [{"type": kind, "status": "True", "reason": "Driver",
                            "message": kind, "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}})
    };
    let report = |kind: &str| {
        kubectl_ok(
            &[
                "patch",
                "resourceclaim",
                "flaky",
                "-n",
                &ns.name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &condition(kind).to_string(),
            ],
            None,
        )
    };
    report("AttachFailed")?;
    // Deallocated and allocated again: a later allocation, without the failure.
    wait_for("the claim allocated again", Duration::from_secs(60), || {
        let (claims, first) = (claims.clone(), first.clone());
        async move {
            let claim = claims.get("flaky").await?;
            let failed = claim
                .status
                .as_ref()
                .and_then(|s| s.devices.as_ref())
                .is_some_and(|d| !d.is_empty());
            Ok(allocated_at(&claim)
                .filter(|at| *at != first && !failed)
                .map(|_| ()))
        }
    })
    .await?;
    assert!(
        pods.get("retries")
            .await?
            .spec
            .and_then(|s| s.node_name)
            .is_none(),
        "bound although its device failed"
    );
    report("Attached")?;
    let node =
        tether_e2e::wait_bound(&client, &ns.name, "retries", Duration::from_secs(60)).await?;
    assert_eq!(node, nodes.names[0]);
    pods.delete("retries", &DeleteParams::default().grace_period(0))
        .await?;
    ns.delete().await?;
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// A scoring strategy that lists an extended resource a DeviceClass serves scores it by the
/// node's devices of the class: with GPUs weighted 100 to cpu's 1 under LeastAllocated, both
/// schedulers prefer the node with eight GPUs to the one with two, though the latter has twice
/// the CPUs (scoring cpu alone would pick it).
#[tokio::test]
async fn a_scored_extended_resource_counts_the_nodes_devices_as_kube_scheduler()
-> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-score").await?;
    let nodes = TestNodes::create(&client, "dra-score", 2, "16", |i, node| {
        if i == 1 {
            for field in ["allocatable", "capacity"] {
                node["status"][field]["cpu"] = json!("8");
            }
        }
    })
    .await?;
    let suffix = unique_suffix();
    let resource = format!("example.com/gpu-{suffix}");
    let driver = format!("score-{suffix}.example.com");
    let class = format!("score-{suffix}");
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": class},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}],
                 "extendedResourceName": resource},
    }))?;
    let mut slices = Vec::new();
    for (i, count) in [(0usize, 2usize), (1, 8)] {
        let node = &nodes.names[i];
        let devices: Vec<Value> = (0..count)
            .map(|d| json!({"name": format!("gpu-{d}")}))
            .collect();
        let slice = format!("{node}-{suffix}");
        resource_slice(&slice, &driver, node, node, json!(devices))?;
        slices.push(slice);
    }
    let scoring = json!([{"name": "NodeResourcesFit", "args": {"scoringStrategy": {
        "type": "LeastAllocated",
        "resources": [{"name": "cpu", "weight": 1}, {"name": resource, "weight": 100}]}}}]);
    let reference = format!("dra-score-reference-{suffix}");
    let tether = format!("dra-score-tether-{suffix}");
    let kube = ReferenceScheduler::start_with(
        "kube-scheduler-dra-score",
        vec![json!({"schedulerName": reference,
                    "plugins": {"postFilter": {"disabled": [{"name": "*"}]}},
                    "pluginConfig": scoring})],
    )?;
    apply_profile(
        &client,
        &tether,
        json!({"schedulerName": tether,
               "plugins": {"postFilter": {"disabled": [{"name": "*"}]}},
               "pluginConfig": scoring}),
    )
    .await?;
    let case = ExtendedCase {
        name: "scored",
        init_containers: json!([]),
        containers: json!([{"name": "c", "image": "pause",
            "resources": {"requests": {&resource: "1"}, "limits": {&resource: "1"}}}]),
        on_node: None,
    };
    let by_reference = run_extended(&client, &ns.name, &nodes, &reference, &case).await?;
    let by_tether = run_extended(&client, &ns.name, &nodes, &tether, &case).await?;
    println!("kube-scheduler {by_reference:?}; tether {by_tether:?}");
    drop(kube);
    kubectl_ok(&["delete", "sp", &tether], None)?;
    assert_eq!(by_tether, by_reference);
    assert!(
        matches!(&by_tether, ExtendedOutcome::Bound { node, .. } if *node == nodes.names[1]),
        "the node with more free GPUs: {by_tether:?}"
    );
    for slice in &slices {
        kubectl_ok(&["delete", "resourceslice", slice], None)?;
    }
    kubectl_ok(&["delete", "deviceclass", &class], None)?;
    ns.delete().await?;
    nodes.delete().await
}

/// A device whose binding conditions are not met within the profile's `bindingTimeout` (2s
/// here): PreBind gives up, Filter finds the claim timed out everywhere, PostFilter
/// deallocates it and the next attempt allocates it afresh; the pod is bound once the driver
/// reports the condition in time.
#[tokio::test]
async fn a_device_whose_binding_conditions_time_out_is_allocated_again() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-timeout").await?;
    let nodes = TestNodes::create(&client, "dra-timeout", 1, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let profile = format!("dra-timeout-{suffix}");
    apply_profile(
        &client,
        &profile,
        json!({"schedulerName": profile,
               "pluginConfig": [{"name": "DynamicResources", "args": {"bindingTimeout": "2s"}}]}),
    )
    .await?;
    let driver = format!("slow-{suffix}.example.com");
    let class = format!("slow-{suffix}");
    device_class(&class, &driver)?;
    let slice = format!("slow-{suffix}");
    resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        "slow",
        json!([{"name": "gpu-0", "bindingConditions": ["Attached"],
                "bindingFailureConditions": ["AttachFailed"]}]),
    )?;
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "slow", "namespace": ns.name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
    }))?;
    let mut spec = json!({
        "schedulerName": profile,
        "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "slow"}],
    });
    nodes.isolate(&mut spec);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "patient"}, "spec": spec,
    }))?;
    pods.create(&PostParams::default(), &pod).await?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let allocated_at = |claim: &ResourceClaim| {
        claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.allocation_timestamp.clone())
    };
    let first = wait_for("the claim allocated", Duration::from_secs(60), || {
        let claims = claims.clone();
        async move { Ok(allocated_at(&claims.get("slow").await?)) }
    })
    .await?;
    wait_for(
        "the claim allocated again after the timeout",
        Duration::from_secs(60),
        || {
            let (claims, first) = (claims.clone(), first.clone());
            async move {
                let at = allocated_at(&claims.get("slow").await?);
                Ok(at.filter(|at| *at != first).map(|_| ()))
            }
        },
    )
    .await?;
    assert!(
        pods.get("patient")
            .await?
            .spec
            .and_then(|s| s.node_name)
            .is_none(),
        "bound although its device's conditions were never met"
    );
    // The driver reports the condition; an allocation being replaced may lose the report, so
    // it reports again until the pod is bound.
    let attached = json!({"status": {"devices": [{
        "driver": driver, "pool": "slow", "device": "gpu-0",
        "conditions": [{"type": "Attached", "status": "True", "reason": "Driver",
                        "message": "attached", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]}})
    .to_string();
    let node = wait_for("the pod bound", Duration::from_secs(60), || {
        let (pods, ns, attached) = (pods.clone(), ns.name.clone(), attached.clone());
        async move {
            let _ = kubectl_ok(
                &[
                    "patch",
                    "resourceclaim",
                    "slow",
                    "-n",
                    &ns,
                    "--subresource=status",
                    "--type=merge",
                    "-p",
                    &attached,
                ],
                None,
            );
            Ok(pods.get("patient").await?.spec.and_then(|s| s.node_name))
        }
    })
    .await?;
    assert_eq!(node, nodes.names[0]);
    pods.delete("patient", &DeleteParams::default().grace_period(0))
        .await?;
    ns.delete().await?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// The claim an earlier attempt made for a pod's extended resources (a scheduler stopped
/// between PreBind and the bind) is not trusted: no node passes while it exists, PostFilter
/// deletes it, and the pod is scheduled with a claim made anew, as upstream.
#[tokio::test]
async fn an_extended_resource_claim_left_by_an_earlier_attempt_is_made_anew() -> anyhow::Result<()>
{
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-stale").await?;
    let nodes = TestNodes::create(&client, "dra-stale", 1, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let resource = format!("example.com/gpu-{suffix}");
    let driver = format!("stale-{suffix}.example.com");
    let class = format!("stale-{suffix}");
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": class},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}],
                 "extendedResourceName": resource},
    }))?;
    let slice = format!("stale-{suffix}");
    resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        "gpus",
        json!([{"name": "gpu-0"}]),
    )?;
    // The pod held by a gate while the test plays the earlier attempt.
    let mut spec = json!({
        "schedulerName": "tether-scheduler",
        "schedulingGates": [{"name": "example.com/earlier-attempt"}],
        "containers": [{"name": "c", "image": "pause",
                        "resources": {"requests": {&resource: "1"}, "limits": {&resource: "1"}}}],
    });
    nodes.isolate(&mut spec);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "again"}, "spec": spec,
    }))?;
    let pod = pods.create(&PostParams::default(), &pod).await?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let stale: ResourceClaim = serde_json::from_value(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "again-extended-resources-old", "namespace": ns.name,
                     "annotations": {"resource.kubernetes.io/extended-resource-claim": "true"},
                     "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": "again",
                                          "uid": uid, "controller": true}]},
        "spec": {"devices": {"requests": [{"name": "container-0-request-0",
                 "exactly": {"deviceClassName": class, "count": 1}}]}},
    }))?;
    let mut stale = claims.create(&PostParams::default(), &stale).await?;
    let stale_uid = stale.metadata.uid.clone().unwrap_or_default();
    stale.status = Some(serde_json::from_value(json!({
        "allocation": {"devices": {"results": [{"request": "container-0-request-0",
            "driver": driver, "pool": "gpus", "device": "gpu-0"}]}},
    }))?);
    claims
        .replace_status(
            "again-extended-resources-old",
            &PostParams::default(),
            &stale,
        )
        .await?;
    kubectl_ok(
        &[
            "patch",
            "pod",
            "again",
            "-n",
            &ns.name,
            "--type=json",
            "-p",
            r#"[{"op": "remove", "path": "/spec/schedulingGates"}]"#,
        ],
        None,
    )?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "again", Duration::from_secs(60)).await?;
    assert_eq!(node, nodes.names[0]);
    assert!(
        claims
            .get_opt("again-extended-resources-old")
            .await?
            .is_none_or(|c| c.metadata.uid.as_deref() != Some(stale_uid.as_str())),
        "the earlier attempt's claim is still there"
    );
    let bound = pods.get("again").await?;
    let name = bound
        .status
        .and_then(|s| s.extended_resource_claim_status)
        .map(|s| s.resource_claim_name)
        .ok_or_else(|| anyhow::anyhow!("the bound pod's status names no claim"))?;
    let claim = claims.get(&name).await?;
    assert_ne!(claim.metadata.uid.as_deref(), Some(stale_uid.as_str()));
    assert!(
        claim.status.and_then(|s| s.allocation).is_some(),
        "the new claim is not allocated"
    );
    pods.delete("again", &DeleteParams::default().grace_period(0))
        .await?;
    ns.delete().await?;
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// Preemption counts devices: a pod whose claim needs the node's only GPU, held by a pod of
/// lower priority, evicts that pod, and gets the GPU once the victim's claim is gone. (Here
/// tether goes beyond kube-scheduler v1.37.2, whose DynamicResources makes such a node
/// unresolvable, so that it never preempts for devices.)
#[tokio::test]
async fn a_pod_preempts_a_lower_priority_pod_for_its_device() -> anyhow::Result<()> {
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-preempt").await?;
    let nodes = TestNodes::create(&client, "dra-preempt", 1, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let driver = format!("one-{suffix}.example.com");
    let class = format!("one-{suffix}");
    device_class(&class, &driver)?;
    let slice = format!("one-{suffix}");
    resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        "gpus",
        json!([{"name": "gpu-0"}]),
    )?;
    for (name, value) in [("low", 0), ("high", 1000)] {
        apply(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": format!("dra-{name}-{suffix}")}, "value": value}),
        )?;
    }
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "gpu", "namespace": ns.name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}}},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let create = |name: &'static str| {
        let mut spec = json!({
            "schedulerName": "tether-scheduler",
            "priorityClassName": format!("dra-{name}-{suffix}"),
            "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}],
        });
        nodes.isolate(&mut spec);
        let pods = pods.clone();
        async move {
            let pod: Pod = serde_json::from_value(json!({
                "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
            }))?;
            pods.create(&PostParams::default(), &pod).await?;
            anyhow::Ok(())
        }
    };
    create("low").await?;
    tether_e2e::wait_bound(&client, &ns.name, "low", Duration::from_secs(60)).await?;
    let low_uid = pods.get("low").await?.metadata.uid.unwrap_or_default();
    create("high").await?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "high", Duration::from_secs(90)).await?;
    assert_eq!(node, nodes.names[0]);
    assert!(
        pods.get_opt("low")
            .await?
            .is_none_or(|p| p.metadata.uid.as_deref() != Some(low_uid.as_str())
                || p.metadata.deletion_timestamp.is_some()),
        "the lower-priority pod was not evicted"
    );
    let high = pods.get("high").await?;
    let claim_name = high
        .status
        .and_then(|s| s.resource_claim_statuses)
        .and_then(|s| s.into_iter().next())
        .and_then(|s| s.resource_claim_name)
        .ok_or_else(|| anyhow::anyhow!("the bound pod names no claim"))?;
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let devices: Vec<String> = claims
        .get(&claim_name)
        .await?
        .status
        .and_then(|s| s.allocation)
        .and_then(|a| a.devices)
        .and_then(|d| d.results)
        .unwrap_or_default()
        .into_iter()
        .map(|r| r.device)
        .collect();
    assert_eq!(devices, vec!["gpu-0".to_string()]);
    pods.delete("high", &DeleteParams::default().grace_period(0))
        .await?;
    ns.delete().await?;
    for name in ["low", "high"] {
        kubectl_ok(
            &["delete", "priorityclass", &format!("dra-{name}-{suffix}")],
            None,
        )?;
    }
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// A sticky VM with a GPU: a KubeVirt-style VM (this test playing virt-controller: a VMI owned
/// by the VM, a launcher pod owned by the VMI) whose launcher names a ResourceClaim for one
/// GPU, on a profile with StickyNode. Its first start takes a node and a device there; each of
/// four restarts brings it back to that node (StickyNode's pin) and that device (the allocator
/// takes the node's devices in one order), StickyNode and DynamicResources agreeing.
#[tokio::test]
async fn a_sticky_vm_with_a_gpu_returns_to_its_node_and_its_device() -> anyhow::Result<()> {
    use kube::api::DynamicObject;
    let _alone = ALONE.lock().await;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "dra-vm").await?;
    let nodes = TestNodes::create(&client, "dra-vm", 3, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let driver = format!("vmgpu-{suffix}.example.com");
    let class = format!("vmgpu-{suffix}");
    device_class(&class, &driver)?;
    let mut slices = Vec::new();
    for node in &nodes.names {
        let slice = format!("{node}-{suffix}");
        resource_slice(
            &slice,
            &driver,
            node,
            node,
            json!([{"name": "gpu-0"}, {"name": "gpu-1"}]),
        )?;
        slices.push(slice);
    }
    let name = format!("dra-vm-{suffix}");
    let scheduler = format!("{name}-sched");
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}}),
    )
    .await?;
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "vm-gpu", "namespace": ns.name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}]}},
    }))?;
    let vms: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &kubevirt("VirtualMachine"));
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kubevirt("VirtualMachineInstance"),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let vm = vms
        .create(
            &PostParams::default(),
            &DynamicObject::new("vm", &kubevirt("VirtualMachine")),
        )
        .await?;
    let vm_uid = vm.metadata.uid.unwrap_or_default();
    let mut first: Option<(String, String)> = None;
    for start in 0..5 {
        let mut vmi = DynamicObject::new("vm", &kubevirt("VirtualMachineInstance"));
        vmi.metadata.owner_references = serde_json::from_value(controller_ref(
            "kubevirt.io/v1",
            "VirtualMachine",
            "vm",
            &vm_uid,
        ))?;
        let vmi = vmis.create(&PostParams::default(), &vmi).await?;
        let mut spec = json!({"schedulerName": scheduler,
            "containers": [{"name": "compute", "image": "virt-launcher",
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "vm-gpu"}]});
        nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "virt-launcher-vm-", "namespace": ns.name,
                         "ownerReferences": controller_ref("kubevirt.io/v1", "VirtualMachineInstance", "vm",
                             vmi.metadata.uid.as_deref().unwrap_or_default())},
            "spec": spec,
        }))?;
        let pod = pods.create(&PostParams::default(), &pod).await?;
        let pod_name = pod.metadata.name.unwrap_or_default();
        let node =
            tether_e2e::wait_bound(&client, &ns.name, &pod_name, Duration::from_secs(60)).await?;
        let device = claims
            .get("vm-gpu")
            .await?
            .status
            .and_then(|s| s.allocation)
            .and_then(|a| a.devices)
            .and_then(|d| d.results)
            .and_then(|r| r.first().map(|r| format!("{}/{}", r.pool, r.device)))
            .ok_or_else(|| {
                anyhow::anyhow!("start {start}: the bound VM's claim is not allocated")
            })?;
        assert!(
            device.starts_with(&format!("{node}/")),
            "start {start}: {device} is not on {node}"
        );
        match &first {
            None => first = Some((node, device)),
            Some(f) => assert_eq!(
                f,
                &(node, device),
                "start {start}: the VM moved or lost its GPU"
            ),
        }
        pods.delete(&pod_name, &DeleteParams::default().grace_period(0))
            .await?;
        vmis.delete("vm", &DeleteParams::default()).await?;
        wait_for("the VM stopped", Duration::from_secs(60), || {
            let (pods, vmis, pod_name) = (pods.clone(), vmis.clone(), pod_name.clone());
            async move {
                Ok((pods.get_opt(&pod_name).await?.is_none()
                    && vmis.get_opt("vm").await?.is_none())
                .then_some(()))
            }
        })
        .await?;
    }
    kubectl_ok(&["delete", "sp", &name], None)?;
    ns.delete().await?;
    for s in &slices {
        kubectl_ok(&["delete", "resourceslice", s, "--ignore-not-found"], None)?;
    }
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}
