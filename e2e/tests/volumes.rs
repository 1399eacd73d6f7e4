//! The volume plugins on a real cluster, with kube-controller-manager's PV binder doing its part:
//! a StatefulSet on `WaitForFirstConsumer` local volumes gets each claim bound to a volume on its
//! pod's node and keeps them across restarts; a KubeVirt-style VM with a disk restarts on its node
//! with its volume; a zoned volume keeps its pods in its zone; a ReadWriteOncePod claim in use
//! keeps a second pod Pending; a node at its CSI attach limit is skipped; a claim no volume
//! matches is provisioned on the node the scheduler chose (the test playing the provisioner).

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, PostParams};
use serde_json::{Value, json};
use tether_e2e::controller_ref;
use tether_e2e::kubevirt;
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{
    TestNamespace, TestNodes, VOLUME_OF, apply, apply_profile, client, delete_and_wait_replaced,
    delete_labelled, kubectl_ok, unique_suffix, wait_bound, wait_event, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A local volume of `size` on `node`, of `class`.
fn local_volume(name: &str, class: &str, node: &str, size: &str) -> Value {
    json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": name, "labels": {VOLUME_OF: class}},
        "spec": {
            "capacity": {"storage": size}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": class,
            "local": {"path": format!("/mnt/{name}")},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
        },
    })
}

/// A `WaitForFirstConsumer` class of local volumes (made by hand, no provisioner).
fn local_class(name: &str) -> anyhow::Result<()> {
    apply(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": name}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))
}

/// The volume a claim is bound to, once the PV controller has bound it.
async fn bound_volume(client: &Client, ns: &str, claim: &str) -> anyhow::Result<String> {
    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), ns);
    wait_for(&format!("claim {claim} bound"), TIMEOUT, || {
        let claims = claims.clone();
        async move {
            Ok(claims.get_opt(claim).await?.and_then(|c| {
                let bound = c.status.as_ref()?.phase.as_deref() == Some("Bound");
                bound.then(|| c.spec?.volume_name).flatten()
            }))
        }
    })
    .await
}

/// The node a local volume lives on.
async fn node_of_volume(client: &Client, pv: &str) -> anyhow::Result<String> {
    let volume = Api::<PersistentVolume>::all(client.clone()).get(pv).await?;
    let term = volume
        .spec
        .and_then(|s| s.node_affinity)
        .and_then(|a| a.required)
        .and_then(|r| r.node_selector_terms.into_iter().next())
        .and_then(|t| t.match_expressions)
        .and_then(|e| e.into_iter().next())
        .and_then(|r| r.values)
        .and_then(|v| v.into_iter().next());
    term.ok_or_else(|| anyhow::anyhow!("volume {pv:?} has no node"))
}

const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// A volume's labels, annotations and spec without its claimRef (what a bind may change).
fn as_applied(
    pv: &PersistentVolume,
) -> (BTreeMap<String, String>, BTreeMap<String, String>, Value) {
    let mut spec = serde_json::to_value(&pv.spec).unwrap_or_default();
    if let Some(spec) = spec.as_object_mut() {
        spec.remove("claimRef");
    }
    (
        pv.metadata.labels.clone().unwrap_or_default(),
        pv.metadata.annotations.clone().unwrap_or_default(),
        spec,
    )
}

fn delete_volumes_of(class: &str) -> anyhow::Result<()> {
    delete_labelled("pv", class)?;
    kubectl_ok(
        &["delete", "storageclass", class, "--ignore-not-found"],
        None,
    )?;
    Ok(())
}

/// Each StatefulSet claim is bound to a local volume on the node its pod was bound to; deleted
/// pods come back to those nodes (sticky profile) and their claims stay bound to the same
/// volumes.
#[tokio::test]
async fn a_statefulset_on_local_volumes_binds_each_claim_on_its_pods_node() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "vol-sts").await?;
    let nodes = TestNodes::create(&client, "vol-sts", 3, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let class = format!("local-{suffix}");
    local_class(&class)?;
    // Two volumes on each node: a claim has a choice, and only the node decides.
    for (i, node) in nodes.names.iter().enumerate() {
        for j in 0..2 {
            apply(local_volume(
                &format!("{class}-{i}-{j}"),
                &class,
                node,
                "1Gi",
            ))?;
        }
    }
    let name = format!("vol-sts-{suffix}");
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;
    let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause",
        "volumeMounts": [{"name": "data", "mountPath": "/data"}]}]});
    nodes.isolate(&mut spec);
    apply(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": ns.name},
        "spec": {"replicas": 3, "podManagementPolicy": "Parallel", "serviceName": "db",
                 "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": spec},
                 "volumeClaimTemplates": [{"metadata": {"name": "data"}, "spec": {
                     "accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": "1Gi"}}}}]},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let volumes: Api<PersistentVolume> = Api::all(client.clone());
    // What `kubectl apply` wrote on each volume before any bind: its labels, its annotations
    // (the last-applied configuration among them) and its spec.
    let mut applied = BTreeMap::new();
    for pv in volumes.list(&Default::default()).await?.items {
        let name = pv.metadata.name.clone().unwrap_or_default();
        if name.starts_with(&class) {
            applied.insert(name, as_applied(&pv));
        }
    }
    assert_eq!(applied.len(), 6);
    let mut placed = BTreeMap::new();
    for i in 0..3 {
        let pod = format!("db-{i}");
        let node = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
        let pv = bound_volume(&client, &ns.name, &format!("data-db-{i}")).await?;
        assert_eq!(
            node_of_volume(&client, &pv).await?,
            node,
            "{pod}'s claim is bound to a volume on its node"
        );
        // The bind wrote the claimRef and nothing else of the user's: every byte kubectl
        // applied is still there (a write of tether's trimmed copy removed the last-applied
        // annotation, and the next `kubectl apply` lost its three-way diff).
        let bound = volumes.get(&pv).await?;
        let (labels, annotations, spec) = as_applied(&bound);
        let (applied_labels, applied_annotations, applied_spec) = &applied[&pv];
        assert_eq!(&labels, applied_labels, "{pv}'s labels");
        for (key, value) in applied_annotations {
            assert_eq!(annotations.get(key), Some(value), "{pv}'s annotation {key}");
        }
        assert!(applied_annotations.contains_key(LAST_APPLIED));
        assert_eq!(&spec, applied_spec, "{pv}'s spec but its claimRef");
        placed.insert(pod, (node, pv));
    }
    for round in 0..2 {
        for pod in placed.keys() {
            let uid = pods.get(pod).await?.metadata.uid.unwrap_or_default();
            delete_and_wait_replaced(&pods, pod, &uid, TIMEOUT).await?;
        }
        for (i, (pod, (node, pv))) in placed.iter().enumerate() {
            let now_on = wait_bound(&client, &ns.name, pod, TIMEOUT).await?;
            assert_eq!(&now_on, node, "round {round}: {pod} came back to its node");
            let now_pv = bound_volume(&client, &ns.name, &format!("data-db-{i}")).await?;
            assert_eq!(&now_pv, pv, "round {round}: {pod} kept its volume");
        }
    }
    kubectl_ok(&["delete", "sp", &name], None)?;
    ns.delete().await?;
    nodes.delete().await?;
    delete_volumes_of(&class)
}

/// A KubeVirt-style VM whose disk is a claim on a local `WaitForFirstConsumer` class: its
/// first start binds the claim to a volume on the node it lands on, and five restarts (this
/// test playing virt-controller: a VMI owned by the VM, a launcher pod owned by the VMI) each
/// bring it back to that node with that volume.
#[tokio::test]
async fn a_vm_with_a_local_disk_restarts_on_its_node_with_its_volume() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "vol-vm").await?;
    let nodes = TestNodes::create(&client, "vol-vm", 3, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let class = format!("vm-disk-{suffix}");
    local_class(&class)?;
    for (i, node) in nodes.names.iter().enumerate() {
        apply(local_volume(&format!("{class}-{i}"), &class, node, "10Gi"))?;
    }
    let name = format!("vol-vm-{suffix}");
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;
    apply(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "rootdisk", "namespace": ns.name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "10Gi"}}},
    }))?;
    let vms: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &kubevirt("VirtualMachine"));
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kubevirt("VirtualMachineInstance"),
    );
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let vm = vms
        .create(
            &PostParams::default(),
            &DynamicObject::new("vm", &kubevirt("VirtualMachine")),
        )
        .await?;
    let vm_uid = vm.metadata.uid.unwrap_or_default();
    let mut first: Option<(String, String)> = None;
    for start in 0..6 {
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
                            "volumeMounts": [{"name": "rootdisk", "mountPath": "/disk"}]}],
            "volumes": [{"name": "rootdisk", "persistentVolumeClaim": {"claimName": "rootdisk"}}]});
        nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "virt-launcher-vm-", "namespace": ns.name,
                         "ownerReferences": controller_ref("kubevirt.io/v1", "VirtualMachineInstance", "vm", vmi.metadata.uid.as_deref().unwrap_or_default())},
            "spec": spec,
        }))?;
        let pod = pods.create(&PostParams::default(), &pod).await?;
        let pod_name = pod.metadata.name.unwrap_or_default();
        let node = wait_bound(&client, &ns.name, &pod_name, TIMEOUT).await?;
        let pv = bound_volume(&client, &ns.name, "rootdisk").await?;
        assert_eq!(node_of_volume(&client, &pv).await?, node, "start {start}");
        match &first {
            None => first = Some((node, pv)),
            Some(f) => assert_eq!(
                f,
                &(node, pv),
                "start {start}: the VM moved or lost its disk"
            ),
        }
        pods.delete(&pod_name, &DeleteParams::default().grace_period(0))
            .await?;
        vmis.delete("vm", &DeleteParams::default()).await?;
        wait_for("the VM stopped", TIMEOUT, || {
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
    nodes.delete().await?;
    delete_volumes_of(&class)
}

/// A claim in `ns` named `claim` for the volume `pv`.
fn claim_for(ns: &str, claim: &str, pv: &str, modes: &[&str]) -> anyhow::Result<()> {
    apply(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": ns},
        "spec": {"accessModes": modes, "storageClassName": "", "volumeName": pv,
                 "resources": {"requests": {"storage": "1Gi"}}},
    }))
}

/// A pod of the default profile using `claims`, on the test's nodes.
fn pod_with_claims(ns: &str, name: &str, claims: &[&str], nodes: &TestNodes) -> anyhow::Result<()> {
    let mounts: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "mountPath": format!("/{c}")}))
        .collect();
    let volumes: Vec<Value> = claims
        .iter()
        .map(|c| json!({"name": c, "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    let mut spec = json!({"schedulerName": "tether-scheduler",
        "containers": [{"name": "c", "image": "pause", "volumeMounts": mounts}], "volumes": volumes});
    nodes.isolate(&mut spec);
    apply(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}),
    )
}

/// The default profile's volume filters on a real cluster: a zoned volume keeps every pod
/// using it in its zone; a ReadWriteOncePod claim in use keeps a second pod Pending with
/// upstream's message; nodes at their CSI attach limit are skipped, until none is left.
#[tokio::test]
async fn volumes_decide_where_pods_of_the_default_profile_go() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "vol-filters").await?;
    let n = &ns.name.clone();
    // Six nodes, two in each of zone-a, zone-b, zone-c.
    let nodes = TestNodes::create(&client, "vol-filters", 6, "16", |_, _| {}).await?;
    let driver = format!("csi-{}.e2e.tether.dev", unique_suffix());

    // Zone: a ReadWriteMany volume labelled and pinned to zone-b, shared by three pods.
    apply(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("{n}-zoned"), "labels": {VOLUME_OF: n, "topology.kubernetes.io/zone": "zone-b"}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteMany"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/mnt/zoned"},
                 "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                     {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["zone-b"]}]}]}}},
    }))?;
    claim_for(n, "zoned", &format!("{n}-zoned"), &["ReadWriteMany"])?;
    bound_volume(&client, n, "zoned").await?;

    // ReadWriteOncePod: one claim, two pods.
    apply(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": format!("{n}-solo"), "labels": {VOLUME_OF: n}},
        "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOncePod"], "storageClassName": "",
                 "persistentVolumeReclaimPolicy": "Retain", "hostPath": {"path": "/mnt/solo"}},
    }))?;
    claim_for(n, "solo", &format!("{n}-solo"), &["ReadWriteOncePod"])?;
    bound_volume(&client, n, "solo").await?;

    for i in 0..3 {
        pod_with_claims(n, &format!("zoned-{i}"), &["zoned"], &nodes)?;
    }
    let api_nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    for i in 0..3 {
        let node = wait_bound(&client, n, &format!("zoned-{i}"), TIMEOUT).await?;
        let zone = api_nodes
            .get(&node)
            .await?
            .metadata
            .labels
            .and_then(|l| l.get("topology.kubernetes.io/zone").cloned());
        assert_eq!(zone.as_deref(), Some("zone-b"), "zoned-{i} on {node}");
    }

    pod_with_claims(n, "solo-first", &["solo"], &nodes)?;
    wait_bound(&client, n, "solo-first", TIMEOUT).await?;
    pod_with_claims(n, "solo-second", &["solo"], &nodes)?;
    let rwop = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";
    wait_event(
        &client,
        n,
        "solo-second",
        "FailedScheduling",
        TIMEOUT,
        |m| m.contains(rwop),
    )
    .await?;
    let second = Api::<Pod>::namespaced(client.clone(), n)
        .get("solo-second")
        .await?;
    assert_eq!(second.spec.and_then(|s| s.node_name), None);

    // CSI attach limit: the driver may attach one volume per node on two of the nodes, none
    // on the others; three pods with a volume each: two fit, one at a time per node.
    for (i, node) in nodes.names.iter().enumerate() {
        let count = if i < 2 { 1 } else { 0 };
        apply(json!({
            "apiVersion": "storage.k8s.io/v1", "kind": "CSINode",
            "metadata": {"name": node},
            "spec": {"drivers": [{"name": driver, "nodeID": node, "allocatable": {"count": count}}]},
        }))?;
    }
    for i in 0..3 {
        let pv = format!("{n}-csi-{i}");
        apply(json!({
            "apiVersion": "v1", "kind": "PersistentVolume",
            "metadata": {"name": pv, "labels": {VOLUME_OF: n}},
            "spec": {"capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"], "storageClassName": "",
                     "persistentVolumeReclaimPolicy": "Retain",
                     "csi": {"driver": driver, "volumeHandle": format!("handle-{i}")}},
        }))?;
        claim_for(n, &format!("csi-{i}"), &pv, &["ReadWriteOnce"])?;
        bound_volume(&client, n, &format!("csi-{i}")).await?;
    }
    let mut used = Vec::new();
    for i in 0..2 {
        pod_with_claims(n, &format!("attach-{i}"), &[&format!("csi-{i}")], &nodes)?;
        used.push(wait_bound(&client, n, &format!("attach-{i}"), TIMEOUT).await?);
    }
    used.sort();
    assert_eq!(
        used,
        nodes.names[..2].to_vec(),
        "one attachable volume per node"
    );
    pod_with_claims(n, "attach-2", &["csi-2"], &nodes)?;
    wait_event(&client, n, "attach-2", "FailedScheduling", TIMEOUT, |m| {
        m.contains("node(s) exceed max volume count")
    })
    .await?;

    ns.delete().await?;
    for node in &nodes.names {
        kubectl_ok(&["delete", "csinode", node, "--ignore-not-found"], None)?;
    }
    nodes.delete().await?;
    delete_labelled("pv", n)?;
    Ok(())
}

/// A claim no volume matches is provisioned on the node the scheduler chose: tether's PreBind
/// sets `volume.kubernetes.io/selected-node` on a node the class's `allowedTopologies` allow,
/// this test plays the external provisioner (a volume on that node, for that claim), the PV
/// controller binds them, and only then is the pod bound there.
#[tokio::test]
async fn a_claim_is_provisioned_on_the_node_the_scheduler_chose() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "vol-prov").await?;
    let nodes = TestNodes::create(&client, "vol-prov", 3, "16", |_, _| {}).await?;
    let class = format!("provisioned-{}", unique_suffix());
    apply(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": class}, "provisioner": "e2e.tether.dev/provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
        "allowedTopologies": [{"matchLabelExpressions": [
            {"key": "topology.kubernetes.io/zone", "values": ["zone-b"]}]}],
    }))?;
    apply(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": "data", "namespace": ns.name},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": "5Gi"}}},
    }))?;
    let mut spec = json!({"schedulerName": "tether-scheduler",
        "containers": [{"name": "c", "image": "pause"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": "data"}}]});
    nodes.isolate(&mut spec);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "app", "namespace": ns.name}, "spec": spec}))?;

    let claims: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), &ns.name);
    let (selected, uid) = wait_for("the claim's selected node", TIMEOUT, || {
        let claims = claims.clone();
        async move {
            let c = claims.get("data").await?;
            let selected = c
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get("volume.kubernetes.io/selected-node").cloned());
            Ok(selected.map(|s| (s, c.metadata.uid.clone().unwrap_or_default())))
        }
    })
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pending = pods.get("app").await?;
    assert_eq!(
        pending.spec.and_then(|s| s.node_name),
        None,
        "not bound before its volume is"
    );
    // While its volume is provisioned, the pod says where it goes (kube-scheduler's
    // NominatedNodeNameForExpectation), for cluster-autoscaler, Karpenter and Kueue to read.
    assert_eq!(
        pending
            .status
            .and_then(|s| s.nominated_node_name)
            .as_deref(),
        Some(selected.as_str()),
        "nominated to the node its volume is provisioned on while it waits"
    );
    // The provisioner's part: a volume on the selected node, for this claim.
    let pv = format!("{class}-data");
    apply(json!({
        "apiVersion": "v1", "kind": "PersistentVolume",
        "metadata": {"name": pv, "labels": {VOLUME_OF: class},
                     "annotations": {"pv.kubernetes.io/provisioned-by": "e2e.tether.dev/provisioner"}},
        "spec": {
            "capacity": {"storage": "5Gi"}, "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain", "storageClassName": class,
            "claimRef": {"name": "data", "namespace": ns.name, "uid": uid},
            "local": {"path": "/mnt/data"},
            "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                {"key": "kubernetes.io/hostname", "operator": "In", "values": [selected]}]}]}},
        },
    }))?;
    let node = wait_bound(&client, &ns.name, "app", TIMEOUT).await?;
    assert_eq!(node, selected, "bound where its volume was provisioned");
    let zone = Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .get(&node)
        .await?
        .metadata
        .labels
        .and_then(|l| l.get("topology.kubernetes.io/zone").cloned());
    assert_eq!(
        zone.as_deref(),
        Some("zone-b"),
        "the class allows zone-b only"
    );
    assert_eq!(bound_volume(&client, &ns.name, "data").await?, pv);
    ns.delete().await?;
    nodes.delete().await?;
    delete_volumes_of(&class)
}

/// The claim `data-<scheduler>` of `size` in `class` and the pod `app-<scheduler>` that uses it,
/// for `scheduler`, on `nodes` only.
fn claim_and_pod(
    ns: &str,
    nodes: &TestNodes,
    scheduler: &str,
    class: &str,
    size: &str,
) -> anyhow::Result<()> {
    let claim = format!("data-{scheduler}");
    apply(json!({
        "apiVersion": "v1", "kind": "PersistentVolumeClaim",
        "metadata": {"name": claim, "namespace": ns},
        "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                 "resources": {"requests": {"storage": size}}},
    }))?;
    let mut spec = json!({"schedulerName": scheduler,
        "containers": [{"name": "c", "image": "pause"}],
        "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim}}]});
    nodes.isolate(&mut spec);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": format!("app-{scheduler}"), "namespace": ns}, "spec": spec}))
}

/// What a pod shows of its placement: its nominated node, and its `PodScheduled=False`
/// condition's reason and message.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Shown {
    nominated: Option<String>,
    failed: Option<(String, String)>,
}

fn shown(pod: &Pod) -> Shown {
    let status = pod.status.clone().unwrap_or_default();
    let failed = status
        .conditions
        .unwrap_or_default()
        .into_iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")
        .map(|c| (c.reason.unwrap_or_default(), c.message.unwrap_or_default()));
    Shown {
        nominated: status.nominated_node_name,
        failed,
    }
}

/// Side by side with kube-scheduler v1.37.2, both with `bindTimeoutSeconds: 5`: a claim of a
/// class nobody provisions. While VolumeBinding's PreBind waits, each scheduler shows the
/// chosen node as the pod's nominated node; when the wait times out, each clears it and
/// reports the same failure in the same write. Every state each pod passes through is read
/// from a watch of the API, and from the nomination on they must be the same for both.
#[tokio::test]
async fn a_provisioning_that_times_out_shows_as_kube_schedulers() -> anyhow::Result<()> {
    use futures::StreamExt;
    use kube::runtime::watcher;
    use std::sync::{Arc, Mutex};

    let client = client().await?;
    let ns = TestNamespace::create(&client, "vol-timeout").await?;
    let nodes = TestNodes::create(&client, "vol-timeout", 1, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let (reference, tether) = (
        format!("vol-timeout-ref-{suffix}"),
        format!("vol-timeout-tether-{suffix}"),
    );
    let args = json!([{"name": "VolumeBinding", "args": {"bindTimeoutSeconds": 5}}]);
    let _kube = ReferenceScheduler::start_with(
        "kube-scheduler-vol-timeout",
        vec![json!({"schedulerName": reference, "pluginConfig": args})],
    )?;
    apply_profile(
        &client,
        &tether,
        json!({"schedulerName": tether, "pluginConfig": args}),
    )
    .await?;
    let class = format!("never-{suffix}");
    apply(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": class, "labels": {VOLUME_OF: class}},
        "provisioner": "e2e.tether.dev/never", "volumeBindingMode": "WaitForFirstConsumer",
    }))?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let seen: Arc<Mutex<BTreeMap<String, Vec<Shown>>>> = Arc::default();
    let record = seen.clone();
    let watch = tokio::spawn(
        watcher::watcher(pods.clone(), watcher::Config::default()).for_each(move |event| {
            if let Ok(watcher::Event::Apply(pod) | watcher::Event::InitApply(pod)) = event {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let now = shown(&pod);
                let mut seen = record.lock().unwrap_or_else(|p| p.into_inner());
                let states = seen.entry(name).or_default();
                if states.last() != Some(&now) {
                    states.push(now);
                }
            }
            futures::future::ready(())
        }),
    );
    for scheduler in [&reference, &tether] {
        claim_and_pod(&ns.name, &nodes, scheduler, &class, "1Gi")?;
    }

    // Created, nominated while PreBind waits, then failed with the nomination cleared.
    let states_of = |scheduler: &str| -> Vec<Shown> {
        seen.lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(&format!("app-{scheduler}"))
            .cloned()
            .unwrap_or_default()
    };
    let node = nodes.names[0].clone();
    for scheduler in [&reference, &tether] {
        wait_for(
            &format!("{scheduler}'s pod to be nominated, then to fail"),
            Duration::from_secs(60),
            || async {
                let states = states_of(scheduler);
                let nominated = states
                    .iter()
                    .position(|s| s.nominated.as_deref() == Some(node.as_str()));
                Ok(nominated
                    .and_then(|at| states[at..].iter().find(|s| s.failed.is_some()))
                    .map(|_| ()))
            },
        )
        .await?;
    }
    watch.abort();
    let (theirs, ours) = (states_of(&reference), states_of(&tether));
    println!("kube-scheduler's pod: {theirs:#?}\ntether's pod: {ours:#?}");
    // From the nomination on (the pod's creation may come before the watch's list).
    let from_nomination = |states: &[Shown]| -> Vec<Shown> {
        let at = states
            .iter()
            .position(|s| s.nominated.is_some())
            .unwrap_or(states.len());
        states[at..].iter().take(2).cloned().collect()
    };
    let (theirs, ours) = (from_nomination(&theirs), from_nomination(&ours));
    assert_eq!(
        ours, theirs,
        "the same states, in the same order, as kube-scheduler's pod"
    );
    assert_eq!(theirs[0].nominated.as_deref(), Some(node.as_str()));
    assert_eq!(
        theirs[1],
        Shown {
            nominated: None,
            failed: Some((
                "SchedulerError".into(),
                "running PreBind plugin \"VolumeBinding\": binding volumes: context deadline exceeded".into()
            )),
        },
        "the reference itself: the failure clears the nomination in the same write"
    );

    kubectl_ok(
        &["delete", "schedulingprofile", &tether, "--ignore-not-found"],
        None,
    )?;
    ns.delete().await?;
    nodes.delete().await?;
    delete_volumes_of(&class)
}

/// Side by side with kube-scheduler of the cluster's release: a claim of 1.8 bytes against a
/// driver that reports a largest volume of 1.5 bytes on the one node that has capacity. Up to
/// 1.37 both are 2 whole bytes, so VolumeBinding keeps that node (the pod is nominated to it
/// while its volume would be provisioned); from 1.38 they are compared as written, and no node
/// has room. Each scheduler's pod must end as the other's does.
#[tokio::test]
async fn a_claims_size_against_a_drivers_capacity_is_weighed_as_by_kube_scheduler()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "vol-capacity").await?;
    let nodes = TestNodes::create(&client, "vol-capacity", 2, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let (reference, tether) = (
        format!("vol-cap-ref-{suffix}"),
        format!("vol-cap-tether-{suffix}"),
    );
    let _kube = ReferenceScheduler::start_with(
        "kube-scheduler-vol-capacity",
        vec![json!({"schedulerName": reference})],
    )?;
    apply_profile(&client, &tether, json!({"schedulerName": tether})).await?;
    let (driver, class) = (
        format!("capacity-{suffix}.e2e.tether.dev"),
        format!("capacity-{suffix}"),
    );
    apply(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIDriver",
        "metadata": {"name": driver, "labels": {VOLUME_OF: class}},
        "spec": {"storageCapacity": true, "attachRequired": false},
    }))?;
    apply(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": class, "labels": {VOLUME_OF: class}},
        "provisioner": driver, "volumeBindingMode": "WaitForFirstConsumer",
    }))?;
    let roomy = nodes.names[0].clone();
    apply(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "CSIStorageCapacity",
        "metadata": {"name": "on-first-node", "namespace": ns.name},
        "storageClassName": class,
        "nodeTopology": {"matchLabels": {"kubernetes.io/hostname": roomy}},
        "capacity": "1500m", "maximumVolumeSize": "1500m",
    }))?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for scheduler in [&reference, &tether] {
        claim_and_pod(&ns.name, &nodes, scheduler, &class, "1800m")?;
    }
    // Nominated to a node (its volume to be provisioned there), or refused with a message.
    let outcome = |scheduler: String| {
        let pods = pods.clone();
        async move {
            wait_for(
                &format!("{scheduler}'s pod nominated or refused"),
                Duration::from_secs(60),
                || async {
                    let now = shown(&pods.get(&format!("app-{scheduler}")).await?);
                    Ok(match (now.nominated, now.failed) {
                        (Some(node), _) => Some(format!("nominated to {node}")),
                        // Other tests' nodes (tests run side by side) vary the rest.
                        (None, Some((reason, message))) => Some(format!(
                            "{reason}: {}",
                            message
                                .split([':', ',', '.'])
                                .map(str::trim)
                                .filter(|r| r.contains("free storage"))
                                .collect::<Vec<_>>()
                                .join(", ")
                        )),
                        _ => None,
                    })
                },
            )
            .await
        }
    };
    let theirs = outcome(reference.clone()).await?;
    let ours = outcome(tether.clone()).await?;
    println!("kube-scheduler: {theirs}; tether: {ours}");
    assert_eq!(ours, theirs, "tether's pod ends as kube-scheduler's");
    let minor = tether_e2e::compared_minor(&client).await?;
    if minor >= 38 {
        assert_eq!(
            theirs, "Unschedulable: 2 node(s) did not have enough free storage",
            "the reference itself (1.38 compares as written)"
        );
    } else {
        assert_eq!(
            theirs,
            format!("nominated to {roomy}"),
            "the reference itself (1.{minor} rounds both to whole bytes)"
        );
    }

    kubectl_ok(
        &["delete", "schedulingprofile", &tether, "--ignore-not-found"],
        None,
    )?;
    ns.delete().await?;
    nodes.delete().await?;
    kubectl_ok(
        &["delete", "csidriver", &driver, "--ignore-not-found"],
        None,
    )?;
    delete_volumes_of(&class)
}
