//! DefaultPreemption on a real cluster: a high-priority pod evicts the fewest lower-priority
//! pods and lands where it made room; a burst of them evicts no more than it needs, side by
//! side with kube-scheduler; a PodDisruptionBudget steers which pods go;
//! `preemptionPolicy: Never` waits; a pinned VM preempts only on its pinned node.

use std::collections::BTreeSet;
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};
use serde_json::json;
use tether_e2e::kubevirt;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, kubectl_ok, unique_suffix, wait_bound,
    wait_event, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(30);

/// PriorityClasses `<prefix>-low` (0), `<prefix>-high` (1000) and `<prefix>-polite` (1000,
/// never preempting), removed on drop.
struct Priorities(String);

impl Priorities {
    fn create() -> anyhow::Result<Self> {
        let prefix = format!("e2e-{}", unique_suffix());
        for (name, value, policy) in [
            ("low", 0, "PreemptLowerPriority"),
            ("high", 1000, "PreemptLowerPriority"),
            ("polite", 1000, "Never"),
        ] {
            apply(json!({
                "apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": format!("{prefix}-{name}")},
                "value": value, "preemptionPolicy": policy,
            }))?;
        }
        Ok(Priorities(prefix))
    }

    fn class(&self, name: &str) -> String {
        format!("{}-{name}", self.0)
    }
}

impl Drop for Priorities {
    fn drop(&mut self) {
        for name in ["low", "high", "polite"] {
            let _ = kubectl_ok(
                &[
                    "delete",
                    "priorityclass",
                    &self.class(name),
                    "--ignore-not-found",
                ],
                None,
            );
        }
    }
}

fn owner(kind: &str, uid: &str) -> serde_json::Value {
    json!([{"apiVersion": "kubevirt.io/v1", "kind": kind, "name": "vm", "uid": uid, "controller": true, "blockOwnerDeletion": true}])
}

/// Makes pods in a namespace, on the test's nodes.
struct Pods<'a> {
    ns: &'a str,
    nodes: &'a TestNodes,
}

impl Pods<'_> {
    /// A pod asking for `cpu`, of `class`, labelled `role=<role>`: bound to `node` when given
    /// (no scheduler), else scheduled by `scheduler`.
    fn make(
        &self,
        name: &str,
        class: &str,
        cpu: &str,
        node: Option<&str>,
        scheduler: &str,
        role: &str,
    ) -> anyhow::Result<()> {
        let mut spec = json!({"schedulerName": scheduler, "priorityClassName": class,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]});
        self.nodes.isolate(&mut spec);
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": self.ns, "labels": {"role": role}}, "spec": spec}))
    }
}

/// The names of the pods in `ns` with `label`, that exist and are not terminating.
async fn alive(client: &Client, ns: &str, label: &str) -> anyhow::Result<BTreeSet<String>> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let list = pods.list(&ListParams::default().labels(label)).await?;
    Ok(list
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Four low-priority pods of one CPU on each of the two 4-CPU test nodes; a pod of high
/// priority asking for two CPUs evicts two of them, on one node, and is bound there. Each
/// victim carries upstream's DisruptionTarget condition and a Preempted event.
#[tokio::test]
async fn a_high_priority_pod_evicts_the_fewest_pods_and_lands_where_it_made_room()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "preempt").await?;
    let nodes = TestNodes::create(&client, "preempt", 2, "4", |_, _| {}).await?;
    let classes = Priorities::create()?;
    let maker = Pods {
        ns: &ns.name,
        nodes: &nodes,
    };
    for (i, node) in nodes.names.iter().enumerate() {
        for j in 0..4 {
            let name = format!("low-{i}-{j}");
            maker.make(
                &name,
                &classes.class("low"),
                "1",
                Some(node),
                "tether-scheduler",
                "low",
            )?;
        }
    }
    for i in 0..2 {
        for j in 0..4 {
            wait_bound(&client, &ns.name, &format!("low-{i}-{j}"), TIMEOUT).await?;
        }
    }
    maker.make(
        "vip",
        &classes.class("high"),
        "2",
        None,
        "tether-scheduler",
        "vip",
    )?;
    let node = wait_bound(&client, &ns.name, "vip", TIMEOUT).await?;
    let index = nodes
        .names
        .iter()
        .position(|n| *n == node)
        .expect("a test node");
    let survivors = alive(&client, &ns.name, "role=low").await?;
    let gone: Vec<String> = (0..2)
        .flat_map(|i| (0..4).map(move |j| format!("low-{i}-{j}")))
        .filter(|n| !survivors.contains(n))
        .collect();
    assert_eq!(gone.len(), 2, "exactly two victims: {gone:?}");
    assert!(
        gone.iter().all(|n| n.starts_with(&format!("low-{index}-"))),
        "the victims were on {node}: {gone:?}"
    );
    for victim in &gone {
        wait_event(&client, &ns.name, victim, "Preempted", TIMEOUT, |m| {
            m.starts_with("Preempted by pod ") && m.ends_with(&format!(" on node {node}"))
        })
        .await?;
    }
    nodes.delete().await?;
    ns.delete().await
}

/// Both nodes full: the pods of one are protected by a PodDisruptionBudget that allows no
/// disruption, so the pod of high priority evicts on the other.
#[tokio::test]
async fn a_disruption_budget_steers_the_victims() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "preempt-pdb").await?;
    let nodes = TestNodes::create(&client, "preempt-pdb", 2, "4", |_, _| {}).await?;
    let classes = Priorities::create()?;
    let maker = Pods {
        ns: &ns.name,
        nodes: &nodes,
    };
    for (i, role) in ["protected", "free"].iter().enumerate() {
        for j in 0..4 {
            maker.make(
                &format!("{role}-{j}"),
                &classes.class("low"),
                "1",
                Some(&nodes.names[i]),
                "tether-scheduler",
                role,
            )?;
        }
    }
    apply(
        json!({"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "protected", "namespace": ns.name},
        "spec": {"minAvailable": 4, "selector": {"matchLabels": {"role": "protected"}}}}),
    )?;
    let budgets: Api<k8s_openapi::api::policy::v1::PodDisruptionBudget> =
        Api::namespaced(client.clone(), &ns.name);
    wait_for("the budget to count four healthy pods", TIMEOUT, || {
        let budgets = budgets.clone();
        async move {
            let status = budgets.get("protected").await?.status;
            Ok(status
                .filter(|s| s.current_healthy == Some(4) && s.disruptions_allowed == Some(0))
                .map(|_| ()))
        }
    })
    .await?;
    maker.make(
        "vip",
        &classes.class("high"),
        "2",
        None,
        "tether-scheduler",
        "vip",
    )?;
    let node = wait_bound(&client, &ns.name, "vip", TIMEOUT).await?;
    assert_eq!(node, nodes.names[1], "the unprotected node");
    assert_eq!(alive(&client, &ns.name, "role=protected").await?.len(), 4);
    assert_eq!(alive(&client, &ns.name, "role=free").await?.len(), 2);
    nodes.delete().await?;
    ns.delete().await
}

/// A pod whose class says `preemptionPolicy: Never` waits, with upstream's message, and
/// evicts nobody.
#[tokio::test]
async fn a_pod_that_never_preempts_waits() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "preempt-never").await?;
    let nodes = TestNodes::create(&client, "preempt-never", 1, "4", |_, _| {}).await?;
    let classes = Priorities::create()?;
    let maker = Pods {
        ns: &ns.name,
        nodes: &nodes,
    };
    for j in 0..4 {
        maker.make(
            &format!("low-{j}"),
            &classes.class("low"),
            "1",
            Some(&nodes.names[0]),
            "tether-scheduler",
            "low",
        )?;
    }
    maker.make(
        "polite",
        &classes.class("polite"),
        "2",
        None,
        "tether-scheduler",
        "polite",
    )?;
    wait_event(
        &client,
        &ns.name,
        "polite",
        "FailedScheduling",
        TIMEOUT,
        |m| m.ends_with("preemption: not eligible due to preemptionPolicy=Never."),
    )
    .await?;
    assert_eq!(alive(&client, &ns.name, "role=low").await?.len(), 4);
    let polite = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .get("polite")
        .await?;
    assert_eq!(polite.spec.and_then(|s| s.node_name), None);
    nodes.delete().await?;
    ns.delete().await
}

/// A KubeVirt-style VM pinned by StickyNode to a node that lower-priority pods filled while it
/// was stopped evicts them there and comes back to its node, though another node has room:
/// it is never moved.
#[tokio::test]
async fn a_pinned_vm_preempts_only_on_its_pin() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "preempt-pin").await?;
    let nodes = TestNodes::create(&client, "preempt-pin", 2, "4", |_, _| {}).await?;
    let classes = Priorities::create()?;
    let maker = Pods {
        ns: &ns.name,
        nodes: &nodes,
    };
    let name = format!("preempt-pin-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler,
        "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let vm = Api::<DynamicObject>::namespaced_with(
        client.clone(),
        &ns.name,
        &kubevirt("VirtualMachine"),
    )
    .create(
        &PostParams::default(),
        &DynamicObject::new("vm", &kubevirt("VirtualMachine")),
    )
    .await?;
    let vm_uid = vm.metadata.uid.unwrap_or_default();
    // Plays virt-controller: a VMI owned by the VM, a launcher pod owned by the VMI.
    let start = |launcher: &'static str| {
        let (client, ns, scheduler, class, vm_uid) = (
            client.clone(),
            ns.name.clone(),
            scheduler.clone(),
            classes.class("high"),
            vm_uid.clone(),
        );
        let mut spec = json!({"schedulerName": scheduler, "priorityClassName": class,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "compute", "image": "virt-launcher", "resources": {"requests": {"cpu": "2"}}}]});
        nodes.isolate(&mut spec);
        async move {
            let vmis: Api<DynamicObject> =
                Api::namespaced_with(client.clone(), &ns, &kubevirt("VirtualMachineInstance"));
            let mut vmi = DynamicObject::new("vm", &kubevirt("VirtualMachineInstance"));
            vmi.metadata.owner_references =
                serde_json::from_value(owner("VirtualMachine", &vm_uid))?;
            let vmi = vmis.create(&PostParams::default(), &vmi).await?;
            apply(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": launcher, "namespace": ns,
                    "ownerReferences": owner("VirtualMachineInstance", vmi.metadata.uid.as_deref().unwrap_or_default())},
                "spec": spec}))?;
            wait_bound(&client, &ns, launcher, TIMEOUT).await
        }
    };
    let pin = start("virt-launcher-vm-a").await?;
    let other = nodes
        .names
        .iter()
        .find(|n| **n != pin)
        .expect("two nodes")
        .clone();
    let bindings: Api<tether::api::StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the VM's bind recorded", TIMEOUT, || {
        let (bindings, pin) = (bindings.clone(), pin.clone());
        async move {
            Ok(bindings
                .get_opt("virtualmachine-vm")
                .await?
                .and_then(|b| b.status)
                .filter(|s| s.latest.as_deref() == Some(pin.as_str()))
                .map(|_| ()))
        }
    })
    .await?;
    let vmis: Api<DynamicObject> = Api::namespaced_with(
        client.clone(),
        &ns.name,
        &kubevirt("VirtualMachineInstance"),
    );
    pods.delete(
        "virt-launcher-vm-a",
        &DeleteParams::default().grace_period(0),
    )
    .await?;
    vmis.delete("vm", &DeleteParams::default()).await?;
    wait_for("the VM stopped", TIMEOUT, || {
        let (pods, vmis) = (pods.clone(), vmis.clone());
        async move {
            Ok((pods.get_opt("virt-launcher-vm-a").await?.is_none()
                && vmis.get_opt("vm").await?.is_none())
            .then_some(()))
        }
    })
    .await?;
    for j in 0..4 {
        maker.make(
            &format!("filler-{j}"),
            &classes.class("low"),
            "1",
            Some(&pin),
            "tether-scheduler",
            "filler",
        )?;
    }
    for j in 0..4 {
        wait_bound(&client, &ns.name, &format!("filler-{j}"), TIMEOUT).await?;
    }
    let node = start("virt-launcher-vm-b").await?;
    assert_eq!(
        node, pin,
        "back on its pin, not on {other} where there was room"
    );
    assert_eq!(
        alive(&client, &ns.name, "role=filler").await?.len(),
        2,
        "two fillers evicted"
    );
    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// Nodes and pods of a burst: four 8-CPU nodes full of 1-CPU pods of low priority, and twenty
/// 1-CPU pods of high priority.
const BURST_NODES: usize = 4;
const BURST_CPUS: usize = 8;
const BURST_PREEMPTORS: usize = 20;

/// [`BURST_NODES`] nodes full of 1-CPU pods of low priority (bare pods: nothing replaces a
/// victim); [`BURST_PREEMPTORS`] 1-CPU pods of high priority arrive at once, each preempting
/// before the API has shown the victims of the ones before it. `scheduler` schedules them;
/// returns how many pods of low priority were evicted.
async fn burst(
    client: &Client,
    ns: &str,
    name: &str,
    classes: &Priorities,
    scheduler: &str,
) -> anyhow::Result<usize> {
    let nodes = TestNodes::create(
        client,
        name,
        BURST_NODES,
        &BURST_CPUS.to_string(),
        |_, _| {},
    )
    .await?;
    let maker = Pods { ns, nodes: &nodes };
    let low = format!("{name}-low");
    for (i, node) in nodes.names.iter().enumerate() {
        for j in 0..BURST_CPUS {
            maker.make(
                &format!("{name}-low-{i}-{j}"),
                &classes.class("low"),
                "1",
                Some(node),
                scheduler,
                &low,
            )?;
        }
    }
    for i in 0..BURST_NODES {
        for j in 0..BURST_CPUS {
            wait_bound(client, ns, &format!("{name}-low-{i}-{j}"), TIMEOUT).await?;
        }
    }
    // A busy cluster: pods elsewhere come and go all through the burst, and each that goes is
    // an event that sends the pods waiting on room back to be tried.
    let elsewhere = TestNodes::create(client, &format!("{name}-busy"), 1, "64", |_, _| {}).await?;
    let churn = {
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let (node, name) = (elsewhere.names[0].clone(), name.to_string());
        let mut spec = json!({"nodeName": node, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]});
        elsewhere.isolate(&mut spec);
        tokio::spawn(async move {
            for i in 0usize.. {
                let pod: Pod = serde_json::from_value(
                    json!({"metadata": {"name": format!("{name}-busy-{i}")}, "spec": spec}),
                )
                .expect("a pod");
                let _ = pods.create(&PostParams::default(), &pod).await;
                if let Some(before) = i.checked_sub(2) {
                    let _ = pods
                        .delete(&format!("{name}-busy-{before}"), &DeleteParams::default())
                        .await;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
    };
    // All at once (kubectl would space them a tenth of a second apart).
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let creations = (0..BURST_PREEMPTORS).map(|k| {
        let mut spec = json!({"schedulerName": scheduler, "priorityClassName": classes.class("high"),
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]});
        nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "metadata": {"name": format!("{name}-vip-{k}"), "labels": {"role": format!("{name}-vip")}},
            "spec": spec}))
        .expect("a pod");
        let pods = pods.clone();
        async move { pods.create(&PostParams::default(), &pod).await }
    });
    for created in futures::future::join_all(creations).await {
        created?;
    }
    for k in 0..BURST_PREEMPTORS {
        wait_bound(client, ns, &format!("{name}-vip-{k}"), TIMEOUT).await?;
    }
    churn.abort();
    let left = alive(client, ns, &format!("role={low}")).await?.len();
    nodes.delete().await?;
    elsewhere.delete().await?;
    Ok(BURST_NODES * BURST_CPUS - left)
}

/// A burst of pods that must preempt, all at once, side by side with kube-scheduler (its own
/// DefaultPreemption, asynchronous as in 1.36): tether evicts exactly as many pods as they
/// need, and no more than kube-scheduler does.
#[tokio::test]
async fn a_burst_of_preemptors_evicts_no_more_than_it_needs() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "preempt-burst").await?;
    let classes = Priorities::create()?;
    let reference = format!("burst-ref-{}", unique_suffix());
    let _kube_scheduler =
        tether_e2e::reference::ReferenceScheduler::start_preempting(&reference, &[&reference])?;
    let by_tether = burst(&client, &ns.name, "burst-t", &classes, "tether-scheduler").await?;
    let by_kube = burst(&client, &ns.name, "burst-k", &classes, &reference).await?;
    println!(
        "pods evicted for {BURST_PREEMPTORS} preemptors: tether {by_tether}, kube-scheduler {by_kube}"
    );
    assert_eq!(
        by_tether, BURST_PREEMPTORS,
        "one CPU asked for by each on full nodes: one victim each"
    );
    assert!(
        by_tether <= by_kube,
        "tether {by_tether}, kube-scheduler {by_kube}"
    );
    ns.delete().await
}
