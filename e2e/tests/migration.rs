//! Sticky VMs in a KubeVirt cluster's routine operations, this test playing virt-controller
//! (and the eviction path KubeVirt takes over) as KubeVirt does it: a live migration's target
//! pod is a second virt-launcher pod of the VMI, labelled `kubevirt.io/migrationJobUID`, with
//! the annotation `kubevirt.io/migrationJobName`, a required anti-affinity per hostname to the
//! pods `kubevirt.io/created-by` its VMI (its source) and the migration's `addedNodeSelector`
//! merged into its nodeSelector; the VMI reports the migration in `status.migrationState` and
//! `status.nodeName`. The pin follows a completed migration and only a completed one; a drain
//! of a node with LiveMigrate VMs empties it; a VM stopped by a drain and started again while
//! its node is cordoned waits with a message that says what to do.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams, PostParams};
use serde_json::{Value, json};
use tether::api::StickyBinding;
use tether_e2e::kubevirt;
use tether_e2e::{
    TestNamespace, TestNodes, apply_profile, client, kubectl, kubectl_ok, unique_suffix,
    wait_bound, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(30);

/// A migration a target pod is made for: its UID and name, and the nodeSelector it adds.
struct Migration<'a> {
    uid: &'a str,
    name: &'a str,
    selector: Option<&'a BTreeMap<String, String>>,
}

/// A VM and its VMI as virt-controller makes them, and the pods this test makes for them.
struct Vm<'a> {
    client: &'a Client,
    ns: &'a str,
    name: String,
    uid: String,
    scheduler: &'a str,
    nodes: &'a TestNodes,
    /// The running VMI's UID (its pods are `kubevirt.io/created-by` it).
    vmi_uid: String,
    /// The pod the VM runs in now.
    pod: String,
}

impl<'a> Vm<'a> {
    async fn create(
        client: &'a Client,
        ns: &'a str,
        name: &str,
        scheduler: &'a str,
        nodes: &'a TestNodes,
    ) -> anyhow::Result<Vm<'a>> {
        let vms: Api<DynamicObject> =
            Api::namespaced_with(client.clone(), ns, &kubevirt("VirtualMachine"));
        let mut vm = DynamicObject::new(name, &kubevirt("VirtualMachine"));
        vm.data = json!({"spec": {"runStrategy": "Always", "template": {"spec": {
            "evictionStrategy": "LiveMigrate", "domain": {"devices": {}}}}}});
        let vm = vms.create(&PostParams::default(), &vm).await?;
        Ok(Vm {
            client,
            ns,
            name: name.into(),
            uid: vm.metadata.uid.unwrap_or_default(),
            scheduler,
            nodes,
            vmi_uid: String::new(),
            pod: String::new(),
        })
    }

    fn vmis(&self) -> Api<DynamicObject> {
        Api::namespaced_with(
            self.client.clone(),
            self.ns,
            &kubevirt("VirtualMachineInstance"),
        )
    }

    fn pods(&self) -> Api<Pod> {
        Api::namespaced(self.client.clone(), self.ns)
    }

    /// A virt-launcher pod of the running VMI; `migration` makes it a migration's target
    /// (its UID and name, and the nodeSelector the migration adds).
    async fn launcher(&self, migration: Option<Migration<'_>>) -> anyhow::Result<String> {
        let mut labels = json!({"kubevirt.io": "virt-launcher", "kubevirt.io/created-by": self.vmi_uid,
            "vm.kubevirt.io/name": self.name});
        let mut annotations = json!({"kubevirt.io/domain": self.name,
            "kubectl.kubernetes.io/default-container": "compute",
            "kubevirt.io/migrationTransportUnix": "true",
            "descheduler.alpha.kubernetes.io/request-evict-only": ""});
        let mut spec = json!({"schedulerName": self.scheduler,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "compute", "image": "virt-launcher",
                "resources": {"requests": {"cpu": "1", "memory": "1Gi"}}}]});
        self.nodes.isolate(&mut spec);
        if let Some(Migration {
            uid,
            name,
            selector,
        }) = migration
        {
            labels["kubevirt.io/migrationJobUID"] = json!(uid);
            annotations["kubevirt.io/migrationJobName"] = json!(name);
            spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
                "labelSelector": {"matchLabels": {"kubevirt.io/created-by": self.vmi_uid}},
                "topologyKey": "kubernetes.io/hostname"}]}});
            // The migration's addedNodeSelector first, the VMI's own selector winning a clash.
            let own = spec["nodeSelector"].clone();
            for (key, value) in selector.into_iter().flatten() {
                spec["nodeSelector"][key] = json!(value);
            }
            if let Some(own) = own.as_object() {
                for (key, value) in own {
                    spec["nodeSelector"][key] = value.clone();
                }
            }
        }
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"generateName": format!("virt-launcher-{}-", self.name),
                "labels": labels, "annotations": annotations,
                "ownerReferences": [{"apiVersion": "kubevirt.io/v1", "kind": "VirtualMachineInstance",
                    "name": self.name, "uid": self.vmi_uid, "controller": true, "blockOwnerDeletion": true}]},
            "spec": spec,
        }))?;
        let pod = self.pods().create(&PostParams::default(), &pod).await?;
        Ok(pod.metadata.name.unwrap_or_default())
    }

    /// Starts the VM: a VMI owned by it and its launcher pod; returns the node it is bound to
    /// (and reports it in the VMI's status, as virt-handler does once the domain runs).
    async fn start(&mut self) -> anyhow::Result<String> {
        self.start_pending().await?;
        let node = wait_bound(self.client, self.ns, &self.pod, TIMEOUT).await?;
        self.report(
            json!({"phase": "Running", "nodeName": node, "migrationMethod": "LiveMigration",
            "activePods": {pod_uid(self.client, self.ns, &self.pod).await?: node}}),
        )
        .await?;
        self.label_node(&node).await?;
        Ok(node)
    }

    /// Starts the VM without waiting for its pod to be bound: a VMI owned by it and its
    /// launcher pod (`self.pod`).
    async fn start_pending(&mut self) -> anyhow::Result<()> {
        let mut vmi = DynamicObject::new(&self.name, &kubevirt("VirtualMachineInstance"));
        vmi.metadata.owner_references = Some(vec![serde_json::from_value(json!({
            "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": self.name,
            "uid": self.uid, "controller": true, "blockOwnerDeletion": true}))?]);
        vmi.data = json!({"spec": {"evictionStrategy": "LiveMigrate", "domain": {"devices": {}}}});
        let vmi = self.vmis().create(&PostParams::default(), &vmi).await?;
        self.vmi_uid = vmi.metadata.uid.unwrap_or_default();
        self.pod = self.launcher(None).await?;
        Ok(())
    }

    /// The VMI's `kubevirt.io/nodeName` label, which virt-handler moves with `status.nodeName`.
    async fn label_node(&self, node: &str) -> anyhow::Result<()> {
        self.vmis()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"metadata": {"labels": {"kubevirt.io/nodeName": node}}})),
            )
            .await?;
        Ok(())
    }

    /// Merges `status` into the VMI's status, as virt-controller and virt-handler write it.
    async fn report(&self, status: Value) -> anyhow::Result<()> {
        self.vmis()
            .patch(
                &self.name,
                &PatchParams::default(),
                &Patch::Merge(json!({"status": status})),
            )
            .await?;
        Ok(())
    }

    /// Stops the VM: its pod and VMI go.
    async fn stop(&self) -> anyhow::Result<()> {
        let at_once = DeleteParams::default().grace_period(0);
        for pod in self.pods().list(&Default::default()).await?.items {
            let created_by = pod
                .metadata
                .labels
                .as_ref()
                .and_then(|l| l.get("kubevirt.io/created-by"));
            if created_by == Some(&self.vmi_uid) {
                let _ = self
                    .pods()
                    .delete(&pod.metadata.name.unwrap_or_default(), &at_once)
                    .await;
            }
        }
        self.vmis()
            .delete(&self.name, &DeleteParams::default())
            .await?;
        let (vmis, name) = (self.vmis(), self.name.clone());
        wait_for(&format!("VMI {name} gone"), TIMEOUT, || {
            let (vmis, name) = (vmis.clone(), name.clone());
            async move { Ok(vmis.get_opt(&name).await?.is_none().then_some(())) }
        })
        .await
    }

    /// Plays a live migration (virt-controller's part): a target pod, bound by the scheduler;
    /// then the VMI reports the outcome. On success the VMI runs on the target and the source
    /// pod ends; on failure the target pod ends and the VMI stays. Returns the target's node.
    async fn migrate(
        &mut self,
        selector: Option<&BTreeMap<String, String>>,
        succeed: bool,
    ) -> anyhow::Result<String> {
        let migration_uid = uuid();
        let migration_name = format!("{}-migration-{}", self.name, unique_suffix());
        let source = self.pod.clone();
        let source_node = pod_node(self.client, self.ns, &source).await?;
        let target = self
            .launcher(Some(Migration {
                uid: &migration_uid,
                name: &migration_name,
                selector,
            }))
            .await?;
        let target_node = wait_bound(self.client, self.ns, &target, TIMEOUT).await?;
        let started = k8s_openapi::jiff::Timestamp::now().to_string();
        // virt-controller, once the target pod is scheduled.
        self.report(json!({"migrationState": {
            "startTimestamp": started, "sourceNode": source_node, "sourcePod": source,
            "targetNode": target_node, "targetPod": target, "migrationUid": migration_uid,
            "mode": "PreCopy"}}))
            .await?;
        let at_once = DeleteParams::default().grace_period(0);
        let ended = k8s_openapi::jiff::Timestamp::now().to_string();
        if succeed {
            // virt-handler on the target (1.6): the VMI runs there (nodeName and its label
            // move, the evacuation is over) before the migration is marked completed.
            self.report(json!({"nodeName": target_node, "evacuationNodeName": null,
                "migrationTransport": "Unix",
                "migrationState": {"endTimestamp": ended, "targetNodeDomainDetected": true,
                    "targetNodeAddress": "10.0.0.2"}}))
                .await?;
            self.label_node(&target_node).await?;
            self.report(json!({"migrationState": {"completed": true}}))
                .await?;
            self.pods().delete(&source, &at_once).await?;
            self.pod = target;
        } else {
            self.report(
                json!({"migrationState": {"endTimestamp": ended, "completed": true,
                "failed": true, "failureReason": "the target's domain never started"}}),
            )
            .await?;
            self.pods().delete(&target, &at_once).await?;
        }
        Ok(target_node)
    }
}

/// A random UID in Kubernetes' form.
fn uuid() -> String {
    let hex = format!("{:032x}", rand::random::<u128>());
    format!(
        "{}-{}-{}-{}-{}",
        &hex[..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..]
    )
}

async fn pod_uid(client: &Client, ns: &str, pod: &str) -> anyhow::Result<String> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get(pod).await?;
    Ok(pod.metadata.uid.unwrap_or_default())
}

async fn pod_node(client: &Client, ns: &str, pod: &str) -> anyhow::Result<String> {
    let pod = Api::<Pod>::namespaced(client.clone(), ns).get(pod).await?;
    Ok(pod.spec.and_then(|s| s.node_name).unwrap_or_default())
}

/// Waits until the VM's binding says `latest` is `node` with `count` binds; returns its
/// node counts.
async fn history(
    client: &Client,
    ns: &str,
    vm: &str,
    count: i64,
    node: &str,
) -> anyhow::Result<BTreeMap<String, i64>> {
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), ns);
    let name = format!("virtualmachine-{vm}");
    wait_for(
        &format!("{name} at {count} binds, latest {node}"),
        TIMEOUT,
        || {
            let bindings = bindings.clone();
            let name = name.clone();
            async move {
                let status = bindings.get_opt(&name).await?.and_then(|b| b.status);
                Ok(status
                    .filter(|s| s.schedule_count == count && s.latest.as_deref() == Some(node))
                    .map(|s| s.node_count))
            }
        },
    )
    .await
}

/// A profile with StickyNode and PlacementHistory; returns its name and schedulerName.
async fn sticky_profile(client: &Client) -> anyhow::Result<(String, String)> {
    let name = format!("migrate-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(
        client,
        &name,
        json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [
            {"name": "StickyNode"}, {"name": "PlacementHistory", "weight": 5}]}}}),
    )
    .await?;
    Ok((name, scheduler))
}

/// A pinned VM live-migrates; a failed migration leaves the pin on the source; a migration
/// with an added node selector lands where it says; after a completed migration the VM,
/// stopped and started, returns to the target.
#[tokio::test]
async fn a_pinned_vm_live_migrates_and_the_pin_follows_only_a_completed_migration()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "migrate").await?;
    let nodes = TestNodes::create(&client, "migrate", 3, "8", |_, _| {}).await?;
    let (profile, scheduler) = sticky_profile(&client).await?;
    let mut vm = Vm::create(&client, &ns.name, "fedora", &scheduler, &nodes).await?;
    let source = vm.start().await?;
    history(&client, &ns.name, "fedora", 1, &source).await?;
    let others: Vec<&String> = nodes.names.iter().filter(|n| **n != source).collect();
    let selector = |node: &str| BTreeMap::from([("kubernetes.io/hostname".into(), node.into())]);

    // Fails: the target ran on the first other node, and the VM stays on the source.
    let failed_on = vm.migrate(Some(&selector(others[0])), false).await?;
    assert_eq!(
        &failed_on, others[0],
        "the added node selector chose the target"
    );
    vm.stop().await?;
    let back = vm.start().await?;
    assert_eq!(
        back, source,
        "a failed migration leaves the pin on the source"
    );
    history(&client, &ns.name, "fedora", 2, &source).await?;

    // Completes, to the second other node: the pin follows it.
    let target = vm.migrate(Some(&selector(others[1])), true).await?;
    assert_eq!(
        &target, others[1],
        "the added node selector chose the target"
    );
    let counts = history(&client, &ns.name, "fedora", 3, &target).await?;
    assert_eq!(
        counts,
        BTreeMap::from([(source.clone(), 2), (target.clone(), 1)]),
        "the failed migration's target node was never counted"
    );
    vm.stop().await?;
    let restarted = vm.start().await?;
    assert_eq!(
        restarted, target,
        "after the migration the VM returns to its new node"
    );
    history(&client, &ns.name, "fedora", 4, &target).await?;

    // Without a selector the target goes where its anti-affinity allows: not the source.
    let free = vm.migrate(None, true).await?;
    assert_ne!(free, target, "the target pod never lands beside its source");
    history(&client, &ns.name, "fedora", 5, &free).await?;

    vm.stop().await?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// A VM whose evictionStrategy is None is stopped by a drain; started again while its node is
/// cordoned, it waits, its condition saying why and what a person can do; uncordoned, it
/// returns.
#[tokio::test]
async fn a_vm_stopped_by_a_drain_waits_for_its_cordoned_node_and_says_why() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "drain-none").await?;
    let nodes = TestNodes::create(&client, "drain-none", 2, "8", |_, _| {}).await?;
    let (profile, scheduler) = sticky_profile(&client).await?;
    let mut vm = Vm::create(&client, &ns.name, "rhel", &scheduler, &nodes).await?;
    let node = vm.start().await?;
    history(&client, &ns.name, "rhel", 1, &node).await?;

    // The drain: no PodDisruptionBudget guards a VM that does not migrate, so the eviction
    // goes through; virt-controller then stops the VM (its VMI is done).
    let drain = kubectl(
        &[
            "drain",
            &node,
            "--pod-selector",
            &format!("vm.kubevirt.io/name={}", vm.name),
            "--timeout=60s",
        ],
        None,
    )?;
    anyhow::ensure!(drain.success, "kubectl drain failed: {}", drain.stderr);
    vm.stop().await?;

    // Started again while the node is cordoned.
    vm.start_pending().await?;
    let pod = vm.pod.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // The first attempt may come before the restarted VM's VirtualMachineInstance reaches
    // tether's watch ("waiting for the pod's owner … to be known"); the message to read is the
    // one about the cordoned node that follows it.
    let message = wait_for(
        "the restarted VM's pod to say why it waits",
        TIMEOUT,
        || {
            let (pods, pod) = (pods.clone(), pod.clone());
            async move {
                let p = pods.get(&pod).await?;
                Ok(p.status
                    .and_then(|s| s.conditions)
                    .into_iter()
                    .flatten()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                    .and_then(|c| c.message)
                    .filter(|m| !m.contains("to be known")))
            }
        },
    )
    .await?;
    for words in [
        "cordoned",
        &format!("kubectl uncordon {node}"),
        &format!(
            "spec.nodeName of StickyBinding {}/virtualmachine-rhel",
            ns.name
        ),
    ] {
        assert!(message.contains(words), "{words:?} in {message:?}");
    }
    kubectl_ok(&["uncordon", &node], None)?;
    let back = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
    assert_eq!(back, node, "uncordoned, the VM returns to its node");

    kubectl_ok(&["delete", "sp", &profile], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// Plays virt-controller's disruption budget of a LiveMigrate VMI: one pod of the VMI must
/// stay, so the eviction API refuses to evict it (429), as KubeVirt's eviction webhook
/// refuses too, having marked the VMI for evacuation.
async fn guard(vm: &Vm<'_>) -> anyhow::Result<String> {
    let name = format!("kubevirt-disruption-budget-{}", unique_suffix());
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(vm.client.clone(), vm.ns);
    let budget = serde_json::from_value(json!({
        "metadata": {"name": name, "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
            "kind": "VirtualMachineInstance", "name": vm.name, "uid": vm.vmi_uid,
            "controller": true, "blockOwnerDeletion": true}]},
        "spec": {"minAvailable": 1,
            "selector": {"matchLabels": {"kubevirt.io/created-by": vm.vmi_uid}}},
    }))?;
    budgets.create(&PostParams::default(), &budget).await?;
    wait_for(
        &format!("budget {name} to allow no disruption"),
        TIMEOUT,
        || {
            let (budgets, name) = (budgets.clone(), name.clone());
            async move {
                let status = budgets.get(&name).await?.status;
                Ok(status
                    .filter(|s| s.current_healthy == Some(1) && s.disruptions_allowed == Some(0))
                    .map(|_| ()))
            }
        },
    )
    .await?;
    Ok(name)
}

/// `kubectl drain` of a node with two LiveMigrate VMs: the drain cordons the node and its
/// evictions are refused while the VMs migrate (this test playing the eviction webhook's mark
/// and virt-controller's evacuation migrations); it ends with the node empty and both VMs, and
/// their pins, on other nodes.
#[tokio::test]
async fn a_drain_live_migrates_sticky_vms_off_the_node() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "drain-migrate").await?;
    let nodes = TestNodes::create(&client, "drain-migrate", 3, "8", |_, _| {}).await?;
    let (profile, scheduler) = sticky_profile(&client).await?;
    // Both VMs start on the first node: the others are cordoned meanwhile.
    let drained = nodes.names[0].clone();
    for other in &nodes.names[1..] {
        kubectl_ok(&["cordon", other], None)?;
    }
    let mut vms = Vec::new();
    for name in ["web-vm", "db-vm"] {
        let mut vm = Vm::create(&client, &ns.name, name, &scheduler, &nodes).await?;
        assert_eq!(vm.start().await?, drained);
        history(&client, &ns.name, name, 1, &drained).await?;
        vms.push(vm);
    }
    for other in &nodes.names[1..] {
        kubectl_ok(&["uncordon", other], None)?;
    }
    let mut budgets = Vec::new();
    for vm in &vms {
        budgets.push(guard(vm).await?);
    }

    let drain = {
        let node = drained.clone();
        tokio::task::spawn_blocking(move || {
            kubectl(
                &[
                    "drain",
                    &node,
                    "--pod-selector",
                    "kubevirt.io=virt-launcher",
                    "--timeout=120s",
                ],
                None,
            )
        })
    };
    let node_api: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    wait_for(&format!("the drain to cordon {drained}"), TIMEOUT, || {
        let (node_api, drained) = (node_api.clone(), drained.clone());
        async move {
            let node = node_api.get(&drained).await?;
            Ok((node.spec.and_then(|s| s.unschedulable) == Some(true)).then_some(()))
        }
    })
    .await?;
    let budget_api: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), &ns.name);
    for (vm, budget) in vms.iter_mut().zip(&budgets) {
        // The eviction webhook's mark, then virt-controller's evacuation migration, with the
        // budget raised to keep source and target both while it runs.
        vm.report(json!({"evacuationNodeName": drained})).await?;
        let raise = |n: i32| Patch::Merge(json!({"spec": {"minAvailable": n}}));
        budget_api
            .patch(budget, &PatchParams::default(), &raise(2))
            .await?;
        let target = vm.migrate(None, true).await?;
        assert_ne!(
            target, drained,
            "the target never lands on the cordoned node"
        );
        budget_api
            .patch(budget, &PatchParams::default(), &raise(1))
            .await?;
        history(&client, &ns.name, &vm.name, 2, &target).await?;
    }
    let drain = drain.await??;
    assert!(drain.success, "kubectl drain failed: {}", drain.stderr);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let left: Vec<String> = pods
        .list(&Default::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(&drained))
        .filter_map(|p| p.metadata.name)
        .collect();
    assert!(left.is_empty(), "{drained} is empty: {left:?}");

    for vm in &vms {
        vm.stop().await?;
    }
    kubectl_ok(&["delete", "sp", &profile], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// A bare pod of one CPU bound to `node` by the test, or left to `scheduler` there.
async fn filler(
    client: &Client,
    ns: &str,
    nodes: &TestNodes,
    name: &str,
    node: &str,
    scheduler: Option<&str>,
) -> anyhow::Result<()> {
    let mut spec = json!({"terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]});
    nodes.isolate(&mut spec);
    match scheduler {
        None => spec["nodeName"] = json!(node),
        Some(scheduler) => {
            spec["schedulerName"] = json!(scheduler);
            spec["nodeSelector"]["kubernetes.io/hostname"] = json!(node);
        }
    }
    let pod: Pod = serde_json::from_value(json!({"metadata": {"name": name}, "spec": spec}))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

/// Fills `node` with `count` pods of one CPU, bound by the test.
async fn fill(
    client: &Client,
    ns: &str,
    nodes: &TestNodes,
    node: &str,
    count: usize,
) -> anyhow::Result<()> {
    for i in 0..count {
        let name = format!("full-{i}");
        filler(client, ns, nodes, &name, node, None).await?;
        wait_bound(client, ns, &name, TIMEOUT).await?;
    }
    Ok(())
}

/// A stopped VM's node fills up; started again, it waits for room on its pin and is nominated
/// to it (`status.nominatedNodeName`); the room that frees there goes to it, not to a pod of
/// the same priority that arrived meanwhile and wants the same node.
#[tokio::test]
async fn a_vm_waiting_for_room_on_its_pin_is_nominated_and_gets_the_room() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "room").await?;
    let nodes = TestNodes::create(&client, "room", 2, "4", |_, _| {}).await?;
    let (profile, scheduler) = sticky_profile(&client).await?;
    let mut vm = Vm::create(&client, &ns.name, "centos", &scheduler, &nodes).await?;
    let pin = vm.start().await?;
    history(&client, &ns.name, "centos", 1, &pin).await?;
    vm.stop().await?;
    fill(&client, &ns.name, &nodes, &pin, 4).await?;

    vm.start_pending().await?;
    let pod = vm.pod.clone();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let nominated = wait_for("the waiting VM's pod to be nominated", TIMEOUT, || {
        let (pods, pod) = (pods.clone(), pod.clone());
        async move {
            Ok(pods
                .get(&pod)
                .await?
                .status
                .and_then(|s| s.nominated_node_name))
        }
    })
    .await?;
    assert_eq!(nominated, pin, "nominated to its pin");

    // A pod of the same priority that wants the same node arrives first, then room frees.
    filler(
        &client,
        &ns.name,
        &nodes,
        "late",
        &pin,
        Some("tether-scheduler"),
    )
    .await?;
    pods.delete("full-0", &DeleteParams::default().grace_period(0))
        .await?;
    let node = wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
    assert_eq!(node, pin, "the VM got the room on its pin");
    let late = pods.get("late").await?;
    assert_eq!(
        late.spec.and_then(|s| s.node_name),
        None,
        "the pod that came meanwhile did not take the VM's room"
    );

    vm.stop().await?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// A stopped VM's room on its pin is held (`holdRoomSeconds`): a pod of lower priority created
/// meanwhile, which wants that node, waits; the VM started again within the time gets its
/// room back.
#[tokio::test]
async fn a_stopped_vms_room_is_held_until_it_starts_again() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "vm-hold").await?;
    let nodes = TestNodes::create(&client, "vm-hold", 2, "4", |_, _| {}).await?;
    let name = format!("vm-hold-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}},
            "pluginConfig": [{"name": "StickyNode", "args": {"holdRoomSeconds": 300}}]}),
    )
    .await?;
    let mut vm = Vm::create(&client, &ns.name, "alma", &scheduler, &nodes).await?;
    let pin = vm.start().await?;
    history(&client, &ns.name, "alma", 1, &pin).await?;
    fill(&client, &ns.name, &nodes, &pin, 3).await?;
    vm.stop().await?;

    filler(
        &client,
        &ns.name,
        &nodes,
        "late",
        &pin,
        Some("tether-scheduler"),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let why = wait_for("late to be refused", TIMEOUT, || {
        let pods = pods.clone();
        async move {
            Ok(pods
                .get("late")
                .await?
                .status
                .and_then(|s| s.conditions)
                .into_iter()
                .flatten()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                .and_then(|c| c.message))
        }
    })
    .await?;
    assert!(why.contains("Insufficient cpu"), "{why}");

    let node = vm.start().await?;
    assert_eq!(node, pin, "the VM's room was kept for it");
    assert_eq!(
        pods.get("late").await?.spec.and_then(|s| s.node_name),
        None,
        "late did not take it"
    );

    vm.stop().await?;
    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}
