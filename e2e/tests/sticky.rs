//! StickyNode and PlacementHistory on a real cluster: a VM (KubeVirt stand-in CRDs, this test
//! playing virt-controller) always returns to its node; a Deployment's pod is rescheduled to the
//! least-used node; StatefulSet ordinals stick each to their own node; a lost node keeps its
//! workload Pending (Wait) and a person's pin moves it.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, ListParams, Patch,
    PatchParams, PostParams,
};
use serde_json::{Value, json};
use tether::api::{StickyBinding, StickyBindingStatus};
use tether_e2e::controller_ref;
use tether_e2e::kubevirt;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, argocd_health, client,
    delete_and_wait_replaced, kstatus, kubectl_ok, tether_metric, unique_suffix, wait_bound,
    wait_event, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(30);

/// Waits until the binding has counted `count` binds; returns it.
async fn wait_count(
    client: &Client,
    ns: &str,
    name: &str,
    count: i64,
) -> anyhow::Result<StickyBinding> {
    let api: Api<StickyBinding> = Api::namespaced(client.clone(), ns);
    wait_for(
        &format!("StickyBinding {ns}/{name} at scheduleCount {count}"),
        TIMEOUT,
        || {
            let api = api.clone();
            async move {
                let b = api.get_opt(name).await?;
                Ok(b.filter(|b| b.status.as_ref().map(|s| s.schedule_count) == Some(count)))
            }
        },
    )
    .await
}

/// Waits until the binding has recorded the bind of the pod `uid`, then checks that every bind
/// was counted exactly once: distinct pods in `recentBinds`, as many as `scheduleCount`, and
/// `nodeCount` adding up to it. For workloads whose pods the control plane may replace on its
/// own (a StatefulSet's), where the number of binds is not the test's to decide.
async fn wait_recorded(
    client: &Client,
    ns: &str,
    name: &str,
    uid: &str,
) -> anyhow::Result<StickyBindingStatus> {
    let api: Api<StickyBinding> = Api::namespaced(client.clone(), ns);
    let status = wait_for(
        &format!("StickyBinding {ns}/{name} to record pod {uid}"),
        TIMEOUT,
        || {
            let api = api.clone();
            async move {
                let status = api.get_opt(name).await?.and_then(|b| b.status);
                Ok(status.filter(|s| s.recent_binds.iter().any(|b| b.pod_uid == uid)))
            }
        },
    )
    .await?;
    let uids: BTreeSet<&str> = status
        .recent_binds
        .iter()
        .map(|b| b.pod_uid.as_str())
        .collect();
    assert_eq!(uids.len(), status.recent_binds.len(), "{status:?}");
    assert_eq!(
        status.schedule_count,
        status.recent_binds.len() as i64,
        "{status:?}"
    );
    assert_eq!(
        status.node_count.values().sum::<i64>(),
        status.schedule_count,
        "{status:?}"
    );
    Ok(status)
}

/// Creates the VirtualMachine `name`; returns its UID.
async fn create_vm(client: &Client, ns: &str, name: &str) -> anyhow::Result<String> {
    let vm = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &kubevirt("VirtualMachine"))
        .create(
            &PostParams::default(),
            &DynamicObject::new(name, &kubevirt("VirtualMachine")),
        )
        .await?;
    Ok(vm.metadata.uid.unwrap_or_default())
}

/// Deletes `node` while the VM `vm` (whose pod is `pod`) is stopped, and waits until the VM's
/// binding says NodeAvailable=False, NodeNotFound; returns when that condition began.
async fn lose_node_of_stopped_vm(
    client: &Client,
    ns: &str,
    vm: &str,
    pod: &str,
    node: &str,
) -> anyhow::Result<k8s_openapi::jiff::Timestamp> {
    stop_vm(client, ns, vm, pod).await?;
    Api::<k8s_openapi::api::core::v1::Node>::all(client.clone())
        .delete(node, &DeleteParams::default())
        .await?;
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), ns);
    let binding = format!("virtualmachine-{vm}");
    wait_for("NodeAvailable=False", TIMEOUT, || {
        let (bindings, binding) = (bindings.clone(), binding.clone());
        async move {
            let b = bindings.get(&binding).await?;
            Ok(b.status
                .unwrap_or_default()
                .conditions
                .into_iter()
                .find(|c| {
                    c.type_ == "NodeAvailable" && c.status == "False" && c.reason == "NodeNotFound"
                })
                .map(|c| c.last_transition_time.0))
        }
    })
    .await
}

/// Plays virt-controller: a VMI owned by the VM and a pod owned by the VMI, named
/// `virt-launcher-<vm>-<random>` as KubeVirt names it. Returns the pod's name.
async fn start_vm(
    client: &Client,
    ns: &str,
    vm: &str,
    vm_uid: &str,
    scheduler: &str,
    nodes: &TestNodes,
) -> anyhow::Result<String> {
    let vmis: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kubevirt("VirtualMachineInstance"));
    let mut vmi = DynamicObject::new(vm, &kubevirt("VirtualMachineInstance"));
    vmi.metadata.owner_references = serde_json::from_value(controller_ref(
        "kubevirt.io/v1",
        "VirtualMachine",
        vm,
        vm_uid,
    ))?;
    let vmi = vmis.create(&PostParams::default(), &vmi).await?;
    let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "compute", "image": "virt-launcher"}]});
    nodes.isolate(&mut spec);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("virt-launcher-{vm}-"), "namespace": ns,
                     "ownerReferences": controller_ref("kubevirt.io/v1", "VirtualMachineInstance", vm, vmi.metadata.uid.as_deref().unwrap_or_default())},
        "spec": spec,
    }))?;
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(pod.metadata.name.unwrap_or_default())
}

/// Deletes a pod at once (grace 0), as a node that is gone would. With a grace period kwok
/// finishes the deletion itself, by name, and a late retry of it can delete the pod that
/// replaced the old one under the same name (a StatefulSet's or a VM's), adding binds the test
/// did not make.
fn at_once() -> DeleteParams {
    DeleteParams::default().grace_period(0)
}

async fn stop_vm(client: &Client, ns: &str, vm: &str, pod: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let vmis: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kubevirt("VirtualMachineInstance"));
    let pod = pod.to_string();
    pods.delete(&pod, &at_once()).await?;
    vmis.delete(vm, &DeleteParams::default()).await?;
    wait_for(&format!("pod {pod} and its VMI gone"), TIMEOUT, || {
        let (pods, vmis, pod) = (pods.clone(), vmis.clone(), pod.clone());
        async move {
            Ok(
                (pods.get_opt(&pod).await?.is_none() && vmis.get_opt(vm).await?.is_none())
                    .then_some(()),
            )
        }
    })
    .await
}

#[tokio::test]
async fn a_vm_always_returns_to_its_node() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "vm").await?;
    let nodes = TestNodes::create(&client, "vm", 3, "16", |_, _| {}).await?;
    let name = format!("sticky-vm-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;

    let vm_uid = create_vm(&client, &ns.name, "fedora").await?;

    let mut pod = start_vm(&client, &ns.name, "fedora", &vm_uid, &scheduler, &nodes).await?;
    let first = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
    let binding = wait_count(&client, &ns.name, "virtualmachine-fedora", 1).await?;
    assert_eq!(binding.spec.workload_ref.kind, "VirtualMachine");
    let owners = binding.metadata.owner_references.unwrap_or_default();
    assert!(
        owners.iter().any(|o| o.uid == vm_uid),
        "the binding is owned by the VM: {owners:?}"
    );

    for round in 0..5 {
        stop_vm(&client, &ns.name, "fedora", &pod).await?;
        pod = start_vm(&client, &ns.name, "fedora", &vm_uid, &scheduler, &nodes).await?;
        let node = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
        assert_eq!(node, first, "round {round}: the VM moved");
        wait_count(
            &client,
            &ns.name,
            "virtualmachine-fedora",
            i64::from(round) + 2,
        )
        .await?;
    }
    let binding = wait_count(&client, &ns.name, "virtualmachine-fedora", 6).await?;
    let status = binding.status.unwrap_or_default();
    assert_eq!(status.node_count, BTreeMap::from([(first.clone(), 6)]));
    assert_eq!(status.latest.as_deref(), Some(first.as_str()));
    let table = kubectl_ok(&["get", "sb", "-n", &ns.name], None)?;
    assert!(
        table.contains("virtualmachine-fedora") && table.contains(" 6 "),
        "got:\n{table}"
    );
    // The writes are observable, and none failed (every test's binds included).
    let recorded = tether_metric(r#"tether_history_writes_total{result="recorded"}"#)?;
    assert!(recorded.unwrap_or(0.0) >= 6.0, "recorded: {recorded:?}");
    let failed = tether_metric(r#"tether_history_writes_total{result="failed"}"#)?;
    assert_eq!(
        failed,
        Some(0.0),
        "no history write failed (the counter starts at 0)"
    );

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn a_rescheduled_deployment_pod_goes_to_the_least_used_node() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "history").await?;
    let nodes = TestNodes::create(&client, "history", 3, "16", |_, _| {}).await?;
    let name = format!("spread-history-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "PlacementHistory", "weight": 5}]}}})).await?;
    let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]});
    nodes.isolate(&mut spec);
    apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns.name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let current = || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels("app=web")).await?;
            Ok(list.items.into_iter().find(|p| {
                p.metadata.deletion_timestamp.is_none()
                    && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
            }))
        }
    };
    let reschedules = 6;
    let mut pod = wait_for("the first pod bound", TIMEOUT, current).await?;
    for i in 0..reschedules {
        let before = wait_count(&client, &ns.name, "deployment-web", i + 1)
            .await?
            .status
            .unwrap_or_default();
        let latest = before.latest.clone().unwrap_or_default();
        let count = |n: &str| before.node_count.get(n).copied().unwrap_or(0);
        let least = nodes
            .names
            .iter()
            .filter(|n| **n != latest)
            .map(|n| count(n))
            .min()
            .unwrap_or(0);
        let old_uid = pod.metadata.uid.clone();
        pods.delete(pod.metadata.name.as_deref().unwrap_or_default(), &at_once())
            .await?;
        pod = wait_for("the replacement pod bound", TIMEOUT, || {
            let pods = pods.clone();
            let old_uid = old_uid.clone();
            async move {
                let list = pods.list(&ListParams::default().labels("app=web")).await?;
                Ok(list.items.into_iter().find(|p| {
                    p.metadata.uid != old_uid
                        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
                }))
            }
        })
        .await?;
        let node = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        assert_ne!(
            node, latest,
            "reschedule {i}: back on the latest node while others fit"
        );
        assert_eq!(
            count(&node),
            least,
            "reschedule {i}: {node} is not among the least used ({:?})",
            before.node_count
        );
    }
    let status = wait_count(&client, &ns.name, "deployment-web", reschedules + 1)
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(
        status.node_count.values().sum::<i64>(),
        reschedules + 1,
        "{:?}",
        status.node_count
    );

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn statefulset_ordinals_stick_each_to_their_own_node() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "sts").await?;
    let nodes = TestNodes::create(&client, "sts", 3, "16", |_, _| {}).await?;
    let name = format!("sticky-sts-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;
    let mut spec =
        json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    apply(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": ns.name},
        "spec": {"replicas": 3, "podManagementPolicy": "Parallel", "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
                 "template": {"metadata": {"labels": {"app": "db"}}, "spec": spec}},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // The node and UID of the pod bound under `pod`'s name now. The StatefulSet controller may
    // replace a pod at any moment (it is the cluster's to decide), so this waits for one.
    let bound = |pod: &str| {
        let (pods, pod) = (pods.clone(), pod.to_string());
        async move {
            wait_for(&format!("{pod} bound"), TIMEOUT, || {
                let (pods, pod) = (pods.clone(), pod.clone());
                async move {
                    Ok(pods.get_opt(&pod).await?.and_then(|p| {
                        let node = p.spec.and_then(|s| s.node_name)?;
                        Some((node, p.metadata.uid.unwrap_or_default()))
                    }))
                }
            })
            .await
        }
    };
    let mut placed = BTreeMap::new();
    for i in 0..3 {
        let pod = format!("db-{i}");
        let (node, uid) = bound(&pod).await?;
        wait_recorded(&client, &ns.name, &format!("statefulset-{pod}"), &uid).await?;
        placed.insert(pod, node);
    }
    for round in 0..2 {
        for pod in placed.keys() {
            let (_, uid) = bound(pod).await?;
            // Replaced by the StatefulSet controller meanwhile: gone all the same.
            delete_and_wait_replaced(&pods, pod, &uid, TIMEOUT).await?;
        }
        for (pod, node) in &placed {
            let (now_on, uid) = bound(pod).await?;
            assert_eq!(&now_on, node, "round {round}: {pod} moved");
            let status =
                wait_recorded(&client, &ns.name, &format!("statefulset-{pod}"), &uid).await?;
            // Only its own node, ever; at least the binds this test caused.
            assert_eq!(
                status.node_count.keys().collect::<Vec<_>>(),
                [node],
                "round {round}: {pod}: {status:?}"
            );
            assert!(status.schedule_count >= round + 2, "{status:?}");
        }
    }
    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn a_lost_node_keeps_the_workload_pending_until_a_person_moves_it() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "lost").await?;
    let nodes = TestNodes::create(&client, "lost", 2, "16", |_, _| {}).await?;
    let name = format!("sticky-lost-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;
    let vm_uid = create_vm(&client, &ns.name, "vm").await?;
    let pod = start_vm(&client, &ns.name, "vm", &vm_uid, &scheduler, &nodes).await?;
    let first = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
    wait_count(&client, &ns.name, "virtualmachine-vm", 1).await?;
    let other = nodes
        .names
        .iter()
        .find(|n| **n != first)
        .cloned()
        .unwrap_or_default();

    // The pinned node is lost while the VM is down: the VM waits for it (onNodeLoss: Wait).
    lose_node_of_stopped_vm(&client, &ns.name, "vm", &pod, &first).await?;
    let pod = start_vm(&client, &ns.name, "vm", &vm_uid, &scheduler, &nodes).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // The first attempt may come before the new VirtualMachineInstance reaches tether's watch
    // ("waiting for the pod's owner … to be known"); the message to read is the one after it.
    let message = wait_for("FailedScheduling naming the sticky node", TIMEOUT, || {
        let (pods, pod) = (pods.clone(), pod.clone());
        async move {
            let p = pods.get(&pod).await?;
            Ok(p.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message)
                .filter(|m| !m.contains("to be known")))
        }
    })
    .await?;
    assert!(
        message.contains(&first),
        "the message names the sticky node {first}: {message}"
    );
    assert_eq!(pods.get(&pod).await?.spec.and_then(|s| s.node_name), None);
    // GitOps tools (kstatus) read the stuck binding as Failed, naming the field that pins it.
    let binding_json = || {
        kubectl_ok(
            &[
                "get",
                "sb",
                "virtualmachine-vm",
                "-n",
                &ns.name,
                "-o",
                "json",
            ],
            None,
        )
    };
    let of_binding = || kstatus(&binding_json()?);
    let verdict = wait_for("the binding Failed", TIMEOUT, || async {
        Ok(Some(of_binding()?).filter(|v| v.starts_with("Failed")))
    })
    .await?;
    assert!(
        verdict.contains("status.latest") && verdict.contains(&first),
        "{verdict}"
    );
    let health = argocd_health("StickyBinding", &binding_json()?)?;
    assert!(
        health.starts_with("Degraded") && health.contains("status.latest"),
        "Argo CD, with deploy/argocd's health check, shows it Degraded: {health}"
    );

    // A person moves the VM: the waiting pod goes to the new pin. Until tether has checked the
    // new pin the binding is in progress, then Current.
    let moved = kubectl_ok(
        &[
            "patch",
            "sb",
            "virtualmachine-vm",
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            &json!({"spec": {"nodeName": other}}).to_string(),
            "-o",
            "json",
        ],
        None,
    )?;
    assert!(
        kstatus(&moved)?.starts_with("InProgress"),
        "{}",
        kstatus(&moved)?
    );
    let health = argocd_health("StickyBinding", &moved)?;
    assert!(health.starts_with("Progressing"), "{health}");
    assert_eq!(wait_bound(&client, &ns.name, &pod, TIMEOUT).await?, other);
    let status = wait_count(&client, &ns.name, "virtualmachine-vm", 2)
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(status.latest.as_deref(), Some(other.as_str()));
    wait_for("the binding Current", TIMEOUT, || async {
        Ok(Some(of_binding()?).filter(|v| v.starts_with("Current")))
    })
    .await?;
    let health = argocd_health("StickyBinding", &binding_json()?)?;
    assert!(health.starts_with("Healthy"), "{health}");

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn under_release_a_lost_node_frees_the_workload_after_the_delay() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "release").await?;
    let nodes = TestNodes::create(&client, "release", 2, "16", |_, _| {}).await?;
    let name = format!("sticky-release-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    let delay = 3;
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler,
               "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}},
               "pluginConfig": [{"name": "StickyNode", "args": {"onNodeLoss": "Release", "releaseAfterSeconds": delay}}]}),
    )
    .await?;
    let vm_uid = create_vm(&client, &ns.name, "vm").await?;
    let pod = start_vm(&client, &ns.name, "vm", &vm_uid, &scheduler, &nodes).await?;
    let first = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
    wait_count(&client, &ns.name, "virtualmachine-vm", 1).await?;

    // The node is lost while the VM is down; the VM starts again before the delay is over.
    let lost_at = lose_node_of_stopped_vm(&client, &ns.name, "vm", &pod, &first).await?;
    let pod = start_vm(&client, &ns.name, "vm", &vm_uid, &scheduler, &nodes).await?;

    // Released: bound elsewhere, not before the delay, with the release in status and an Event.
    let other = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
    assert_ne!(other, first);
    let status = wait_count(&client, &ns.name, "virtualmachine-vm", 2)
        .await?
        .status
        .unwrap_or_default();
    assert_eq!(status.latest.as_deref(), Some(other.as_str()));
    let released = status.released_from.expect("status.releasedFrom is set");
    assert_eq!(released.node, first);
    let bound_at = status.recent_binds.last().map(|b| b.time.0);
    assert!(
        bound_at.is_some_and(|t| t.duration_since(lost_at).as_secs() >= delay),
        "bound at {bound_at:?}, lost at {lost_at}: not before releaseAfterSeconds"
    );
    wait_event(
        &client,
        &ns.name,
        "virtualmachine-vm",
        "Released",
        TIMEOUT,
        |e| e.contains(first.as_str()),
    )
    .await?;

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn fifty_workloads_churned_while_a_person_edits_their_bindings_count_every_bind_once()
-> anyhow::Result<()> {
    const WORKLOADS: usize = 50;
    const STARTS: i64 = 4;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "churn").await?;
    let nodes = TestNodes::create(&client, "churn", 5, "64", |_, _| {}).await?;
    let name = format!("sticky-churn-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;
    let mut vm_uids = Vec::new();
    for i in 0..WORKLOADS {
        vm_uids.push(create_vm(&client, &ns.name, &format!("vm-{i}")).await?);
    }

    // A person (another client) keeps editing the bindings' specs: pins each to the node it is
    // on, then unpins it, without resourceVersions, as `kubectl patch` does.
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let editor = {
        let (bindings, stop) = (bindings.clone(), stop.clone());
        tokio::spawn(async move {
            let mut edits = 0usize;
            let mut pin = true;
            while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                for b in bindings.list(&ListParams::default()).await?.items {
                    let latest = b.status.as_ref().and_then(|s| s.latest.clone());
                    let node = if pin { latest } else { None };
                    let patch = json!({"spec": {"nodeName": node}});
                    bindings
                        .patch(
                            &b.metadata.name.unwrap_or_default(),
                            &PatchParams::default(),
                            &Patch::Merge(patch),
                        )
                        .await?;
                    edits += 1;
                }
                pin = !pin;
            }
            anyhow::Ok(edits)
        })
    };

    // Every workload started, stopped and started again, all at once.
    let churn = (0..WORKLOADS).map(|i| {
        let (client, ns, scheduler, nodes, uid) = (
            client.clone(),
            ns.name.clone(),
            scheduler.clone(),
            &nodes,
            vm_uids[i].clone(),
        );
        async move {
            let vm = format!("vm-{i}");
            let mut pod = String::new();
            let mut first = None;
            for start in 0..STARTS {
                if start > 0 {
                    stop_vm(&client, &ns, &vm, &pod).await?;
                }
                pod = start_vm(&client, &ns, &vm, &uid, &scheduler, nodes).await?;
                let node = wait_bound(&client, &ns, &pod, TIMEOUT).await?;
                let first = first.get_or_insert(node.clone());
                anyhow::ensure!(*first == node, "{vm} moved from {first} to {node}");
                let uid = Api::<Pod>::namespaced(client.clone(), &ns)
                    .get(&pod)
                    .await?
                    .metadata
                    .uid
                    .unwrap_or_default();
                wait_recorded(&client, &ns, &format!("virtualmachine-{vm}"), &uid).await?;
            }
            anyhow::Ok(())
        }
    });
    let results = futures::future::join_all(churn).await;
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let edits = editor.await??;
    for result in results {
        result?;
    }
    assert!(edits > 0, "the editor edited nothing");

    // Exactly STARTS binds each: none lost, none doubled.
    for i in 0..WORKLOADS {
        let status = bindings
            .get(&format!("virtualmachine-vm-{i}"))
            .await?
            .status
            .unwrap_or_default();
        assert_eq!(status.schedule_count, STARTS, "vm-{i}: {status:?}");
        assert_eq!(
            status.node_count.values().sum::<i64>(),
            STARTS,
            "vm-{i}: {status:?}"
        );
    }

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn an_owner_kind_tether_does_not_know_is_resolved_through_the_metadata_api()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "widget").await?;
    let nodes = TestNodes::create(&client, "widget", 3, "16", |_, _| {}).await?;
    let name = format!("sticky-widget-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;
    // WidgetSet → Widget → pod (e2e/fixtures/widgets.yaml; tether may read both kinds).
    let kind =
        |k: &str| ApiResource::from_gvk(&GroupVersionKind::gvk("example.tether.dev", "v1", k));
    let sets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &kind("WidgetSet"));
    let set = sets
        .create(
            &PostParams::default(),
            &DynamicObject::new("shelf", &kind("WidgetSet")),
        )
        .await?;
    let widgets: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), &ns.name, &kind("Widget"));
    let mut widget = DynamicObject::new("gear", &kind("Widget"));
    widget.metadata.owner_references = serde_json::from_value(controller_ref(
        "example.tether.dev/v1",
        "WidgetSet",
        "shelf",
        set.metadata.uid.as_deref().unwrap_or_default(),
    ))?;
    let widget = widgets.create(&PostParams::default(), &widget).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let start = || {
        let mut spec =
            json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause"}]});
        nodes.isolate(&mut spec);
        serde_json::from_value::<Pod>(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"generateName": "gear-", "namespace": ns.name,
                         "ownerReferences": controller_ref("example.tether.dev/v1", "Widget", "gear", widget.metadata.uid.as_deref().unwrap_or_default())},
            "spec": spec,
        }))
    };

    let first_pod = pods.create(&PostParams::default(), &start()?).await?;
    let first_name = first_pod.metadata.name.unwrap_or_default();
    let first = wait_bound(&client, &ns.name, &first_name, TIMEOUT).await?;
    // The workload is the WidgetSet, one level above the pod's own controller: tether found
    // the Widget's controller through a watch it started when it first saw the kind.
    let binding = wait_count(&client, &ns.name, "widgetset.example.tether.dev-shelf", 1).await?;
    assert_eq!(binding.spec.workload_ref.kind, "WidgetSet");
    pods.delete(&first_name, &at_once()).await?;
    let second_pod = pods.create(&PostParams::default(), &start()?).await?;
    let second = wait_bound(
        &client,
        &ns.name,
        second_pod.metadata.name.as_deref().unwrap_or_default(),
        TIMEOUT,
    )
    .await?;
    assert_eq!(second, first, "the WidgetSet's pod went back to its node");
    wait_count(&client, &ns.name, "widgetset.example.tether.dev-shelf", 2).await?;

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// 150 pods of one Deployment are created and bound at once: every bind lands in the one
/// StickyBinding exactly once (`scheduleCount` 150, `nodeCount` adding up to it), although
/// they race for the same object. The ground truth is the test's own list of bound pods.
#[tokio::test]
async fn a_burst_of_binds_to_one_workload_is_counted_exactly_once() -> anyhow::Result<()> {
    const REPLICAS: i64 = 150;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "burst").await?;
    let nodes = TestNodes::create(&client, "burst", 5, "64", |_, _| {}).await?;
    let name = format!("history-burst-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "PlacementHistory", "weight": 5}]}}, "pluginConfig": [{"name": "PlacementHistory", "args": {"skipMultiReplica": false}}]})).await?;
    let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "10m"}}}]});
    nodes.isolate(&mut spec);
    apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns.name},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let bound = wait_for(
        &format!("{REPLICAS} pods bound"),
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            async move {
                let list = pods.list(&ListParams::default().labels("app=web")).await?;
                let bound: BTreeSet<String> = list
                    .items
                    .iter()
                    .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                    .filter_map(|p| p.metadata.uid.clone())
                    .collect();
                Ok(
                    (bound.len() as i64 == REPLICAS && list.items.len() as i64 == REPLICAS)
                        .then_some(bound),
                )
            }
        },
    )
    .await?;
    assert_eq!(bound.len() as i64, REPLICAS, "no pod was replaced");
    let binding = wait_count(&client, &ns.name, "deployment-web", REPLICAS).await?;
    let status = binding.status.unwrap_or_default();
    assert_eq!(
        status.node_count.values().sum::<i64>(),
        REPLICAS,
        "{status:?}"
    );
    let recent: BTreeSet<&str> = status
        .recent_binds
        .iter()
        .map(|b| b.pod_uid.as_str())
        .collect();
    assert!(
        recent.iter().all(|uid| bound.contains(*uid)),
        "recentBinds names only pods the test saw bound"
    );
    let counted: BTreeSet<String> = status.counted_pods.iter().cloned().collect();
    assert_eq!(
        counted, bound,
        "countedPods names exactly the bound pods, for a restart to read"
    );
    assert!(
        status.counted_before.is_some(),
        "countedBefore vouches for binds older than the newest less two minutes"
    );

    // The lists are owned whole: the API server's managedFields name the field, not each of
    // the 150 pods (which would double what every write sends and etcd keeps).
    let fields = serde_json::to_string(&binding.metadata.managed_fields)?;
    assert!(
        bound.iter().all(|uid| !fields.contains(uid.as_str())),
        "managedFields list no pod: {fields}"
    );
    assert!(fields.contains("f:countedPods"), "{fields}");

    // A hand edit past the bounds is refused by the API server, naming the field.
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let too_many: Vec<String> = (0..8193).map(|i| format!("{i:036}")).collect();
    let refused = bindings
        .patch_status(
            "deployment-web",
            &PatchParams::default(),
            &Patch::Merge(json!({"status": {"countedPods": too_many}})),
        )
        .await;
    let message = match refused {
        Err(kube::Error::Api(e)) if e.code == 422 => e.message,
        other => anyhow::bail!("a list past 8192 was not refused: {other:?}"),
    };
    assert!(message.contains("status.countedPods"), "{message}");

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// A pod owned by OpenKruise's StatefulSet (`apps.kruise.io`, e2e/fixtures/kruise.yaml) is not
/// taken for an `apps/v1` StatefulSet pod: tether finds its owner by group and kind, schedules
/// it, and records its ordinal's binding with the owner's API version.
#[tokio::test]
async fn a_statefulset_of_another_api_group_is_its_own_owner_kind() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kruise").await?;
    let nodes = TestNodes::create(&client, "kruise", 2, "16", |_, _| {}).await?;
    let name = format!("sticky-kruise-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}})).await?;
    let kind = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "apps.kruise.io",
        "v1beta1",
        "StatefulSet",
    ));
    let sets: Api<DynamicObject> = Api::namespaced_with(client.clone(), &ns.name, &kind);
    let set = sets
        .create(&PostParams::default(), &DynamicObject::new("db", &kind))
        .await?;
    let mut spec =
        json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "db-0", "namespace": ns.name,
            "ownerReferences": controller_ref("apps.kruise.io/v1beta1", "StatefulSet", "db", set.metadata.uid.as_deref().unwrap_or_default())},
        "spec": spec,
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods.create(&PostParams::default(), &pod).await?;
    wait_bound(&client, &ns.name, "db-0", TIMEOUT).await?;
    // Its group is in the binding's name: an apps/v1 StatefulSet `db` in this namespace has
    // `statefulset-db-0`, and the two never share a pin or a history.
    let binding = wait_count(&client, &ns.name, "statefulset.apps.kruise.io-db-0", 1).await?;
    let workload = binding.spec.workload_ref.clone();
    assert_eq!(
        (
            workload.api_version.as_str(),
            workload.name.as_str(),
            workload.ordinal
        ),
        ("apps.kruise.io/v1beta1", "db", Some(0))
    );

    // A binding under the apps/v1 set's name that names the kruise set (as a tether before
    // group-qualified names made them, or a person) is neither read nor written: it reports
    // Stalled, naming the name it should have.
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let old_name = StickyBinding::new("statefulset-db-0", binding.spec.clone());
    bindings.create(&PostParams::default(), &old_name).await?;
    let stalled = wait_for("the misnamed binding Stalled", TIMEOUT, || async {
        let b = bindings.get("statefulset-db-0").await?;
        let conditions = b.status.map(|s| s.conditions).unwrap_or_default();
        Ok(conditions
            .into_iter()
            .find(|c| c.type_ == "Stalled" && c.status == "True"))
    })
    .await?;
    assert_eq!(stalled.reason, "WorkloadMismatch");
    assert!(
        stalled.message.contains("statefulset.apps.kruise.io-db-0"),
        "{}",
        stalled.message
    );
    pods.delete("db-0", &at_once()).await?;
    wait_for("db-0 gone", TIMEOUT, || async {
        Ok(pods.get_opt("db-0").await?.is_none().then_some(()))
    })
    .await?;
    // kwok deletes a terminating pod by name, and its delete of the first db-0 can land on
    // the replacement: one that vanished so is made again (three times at most).
    // A vanished one may have been bound first: the binding is checked to have counted the
    // last one's bind, every bind once.
    let mut made = 0;
    let uid = loop {
        let created = pods.create(&PostParams::default(), &pod).await?;
        made += 1;
        match wait_bound(&client, &ns.name, "db-0", TIMEOUT).await {
            Ok(_) => break created.metadata.uid.unwrap_or_default(),
            Err(_) if made < 3 && pods.get_opt("db-0").await?.is_none() => continue,
            Err(e) => return Err(e),
        }
    };
    let counted = wait_recorded(&client, &ns.name, "statefulset.apps.kruise.io-db-0", &uid).await?;
    assert!(counted.schedule_count >= 2, "{counted:?}");
    let untouched = bindings.get("statefulset-db-0").await?;
    assert_eq!(
        untouched
            .status
            .map(|s| s.schedule_count)
            .unwrap_or_default(),
        0,
        "the misnamed binding counted nothing"
    );

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// A history edited by hand so that it does not add up (a total that is not the sum of the
/// per-node counts, a latest node with no count) is reported in the binding's
/// `HistoryConsistent` condition, naming the values, once; put right, the condition turns True.
/// Scheduling goes on meanwhile.
#[tokio::test]
async fn a_history_that_does_not_add_up_is_reported_in_a_condition() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "odd-sum").await?;
    let nodes = TestNodes::create(&client, "odd-sum", 1, "4", |_, _| {}).await?;
    let binding = format!(
        "apiVersion: tether.dev/v1alpha1\nkind: StickyBinding\nmetadata:\n  name: deployment-web\n  namespace: {ns}\nspec:\n  workloadRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n",
        ns = ns.name
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&binding))?;
    let patch_status = |status: Value| {
        kubectl_ok(
            &[
                "patch",
                "sb",
                "deployment-web",
                "-n",
                &ns.name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &json!({"status": status}).to_string(),
            ],
            None,
        )
    };
    patch_status(json!({"scheduleCount": 7, "nodeCount": {"n0": 2}, "latest": "n1"}))?;
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let condition = |want: &'static str| {
        let bindings = bindings.clone();
        move || {
            let bindings = bindings.clone();
            async move {
                let b = bindings.get("deployment-web").await?;
                Ok(b.status
                    .unwrap_or_default()
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "HistoryConsistent" && c.status == want))
            }
        }
    };
    let odd = wait_for("HistoryConsistent=False", TIMEOUT, condition("False")).await?;
    assert_eq!(odd.reason, "OddValues");
    assert!(
        odd.message
            .contains("scheduleCount 7 is not the sum of nodeCount (2)")
            && odd.message.contains("latest node n1 has no nodeCount"),
        "{}",
        odd.message
    );

    // Scheduling goes on for everything else.
    let mut spec = json!({"schedulerName": "tether-scheduler", "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    apply(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "other", "namespace": ns.name}, "spec": spec}),
    )?;
    wait_bound(&client, &ns.name, "other", TIMEOUT).await?;

    patch_status(json!({"scheduleCount": 2, "latest": "n0"}))?;
    let fixed = wait_for("HistoryConsistent=True", TIMEOUT, condition("True")).await?;
    assert_eq!(fixed.reason, "Consistent");

    nodes.delete().await?;
    ns.delete().await
}
