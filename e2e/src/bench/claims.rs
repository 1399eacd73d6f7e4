//! The claim-heavy workload (upstream scheduler_perf's SchedulingWithResourceClaimTemplate):
//! every pod asks for one GPU through a ResourceClaimTemplate, kube-controller-manager makes
//! each pod's claim, and the scheduler must allocate a device to the claim before it binds the
//! pod. kwok nodes run no DRA driver, so the bench publishes what one would: a ResourceSlice
//! per node with its GPUs, and a DeviceClass that selects the driver by CEL.
//!
//! Each run gets a driver, a class and devices of its own, so that the claims a run leaves
//! behind while its namespace goes away never take the next run's devices.

use std::collections::HashMap;
use std::time::Duration;

use anyhow::Context;
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use k8s_openapi::api::resource::v1::{DeviceClass, ResourceClaim, ResourceSlice};
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use crate::{TestNodes, create_retried, wait_for};

/// The claim template every pod of the workload names, in the run's namespace.
const TEMPLATE: &str = "gpu";

/// The label the run's slices carry (its value is the run's scheduler name), for their removal.
const RUN_LABEL: &str = "bench.tether.dev/run";

/// GPUs a node offers for `pods` pods on `nodes` nodes: 8, or twice the pods per node when that
/// is more, so that the cluster is at most half taken and every pod finds a device.
pub fn devices_per_node(pods: usize, nodes: usize) -> usize {
    let per_node = pods.div_ceil(nodes.max(1));
    per_node.saturating_mul(2).max(8)
}

/// The run's driver: its class and its slices, removed by [`Devices::delete`].
pub struct Devices {
    client: Client,
    class: String,
    run: String,
}

impl Devices {
    /// Publishes, for the run `run` (its scheduler's name), a DeviceClass, one ResourceSlice
    /// per bench node with `per_node` GPUs (each slice owned by its node, so that the nodes'
    /// removal takes it along), and the namespace's ResourceClaimTemplate asking for one GPU.
    pub async fn publish(
        client: &Client,
        nodes: &TestNodes,
        ns: &str,
        run: &str,
        per_node: usize,
    ) -> anyhow::Result<Self> {
        let driver = format!("{run}.gpu.bench.tether.dev");
        let class = format!("{run}-gpu");
        let classes: Api<DeviceClass> = Api::all(client.clone());
        let device_class: DeviceClass = serde_json::from_value(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
            "metadata": {"name": class},
            "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]},
        }))?;
        let params = PostParams::default();
        create_retried(&format!("creating DeviceClass {class}"), || {
            classes.create(&params, &device_class)
        })
        .await?;
        let devices = Devices {
            client: client.clone(),
            class: class.clone(),
            run: run.to_string(),
        };
        let uids = node_uids(client, nodes).await?;
        let slices: Api<ResourceSlice> = Api::all(client.clone());
        let gpus: Vec<Value> = (0..per_node)
            .map(|i| {
                json!({"name": format!("gpu-{i}"),
                       "attributes": {"model": {"string": "bench"}, "index": {"int": i}},
                       "capacity": {"memory": {"value": "40Gi"}}})
            })
            .collect();
        futures::stream::iter(nodes.names.iter())
            .map(|node| {
                let (slices, driver, gpus) = (slices.clone(), driver.clone(), gpus.clone());
                let uid = uids.get(node).cloned();
                async move {
                    let uid = uid.with_context(|| format!("bench node {node} not listed"))?;
                    let slice: ResourceSlice = serde_json::from_value(json!({
                        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                        "metadata": {"name": format!("{node}-{run}"), "labels": {RUN_LABEL: run},
                            "ownerReferences": [{"apiVersion": "v1", "kind": "Node",
                                                 "name": node, "uid": uid}]},
                        "spec": {"driver": driver, "nodeName": node,
                                 "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                                 "devices": gpus},
                    }))?;
                    let params = PostParams::default();
                    create_retried(&format!("publishing the GPUs of {node}"), || {
                        slices.create(&params, &slice)
                    })
                    .await
                }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
        crate::apply(json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
            "metadata": {"name": TEMPLATE, "namespace": ns},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": class}}]}}},
        }))?;
        Ok(devices)
    }

    /// Removes the run's slices and class (the claims go with the run's namespace).
    pub async fn delete(self) -> anyhow::Result<()> {
        let slices: Api<ResourceSlice> = Api::all(self.client.clone());
        slices
            .delete_collection(
                &DeleteParams::default(),
                &ListParams::default().labels(&format!("{RUN_LABEL}={}", self.run)),
            )
            .await
            .with_context(|| format!("deleting the slices of run {}", self.run))?;
        let classes: Api<DeviceClass> = Api::all(self.client.clone());
        classes
            .delete(&self.class, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting DeviceClass {}", self.class))?;
        Ok(())
    }
}

/// The bench nodes' uids (a slice's owner reference names its node's).
async fn node_uids(client: &Client, nodes: &TestNodes) -> anyhow::Result<HashMap<String, String>> {
    let listed = Api::<Node>::all(client.clone())
        .list(&ListParams::default().labels(&format!("{}={}", crate::TEST_KEY, nodes.test)))
        .await
        .context("listing the bench nodes")?;
    Ok(listed
        .items
        .into_iter()
        .filter_map(|n| Some((n.name_any(), n.uid()?)))
        .collect())
}

/// Makes a pod spec ask for one GPU through the namespace's claim template.
pub fn ask_for_a_gpu(spec: &mut Value) {
    spec["resourceClaims"] = json!([{"name": "gpu", "resourceClaimTemplateName": TEMPLATE}]);
    spec["containers"][0]["resources"]["claims"] = json!([{"name": "gpu"}]);
}

/// Waits until kube-controller-manager has made a claim for each of the `pods` pods of `ns`,
/// so that a batch run measures the scheduler alone.
pub async fn wait_for_claims(
    client: &Client,
    ns: &str,
    pods: usize,
    deadline: Duration,
) -> anyhow::Result<()> {
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), ns);
    wait_for("a claim made for every bench pod", deadline, || async {
        let made = claims
            .list_metadata(&ListParams::default())
            .await?
            .items
            .len();
        Ok((made >= pods).then_some(()))
    })
    .await
}
