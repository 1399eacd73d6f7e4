//! Kueue admits, tether places: a real Kueue (`e2e/scripts/kueue-up.sh`, built from the Go
//! module proxy) on the local control plane, its own controllers suspending, admitting within
//! ClusterQueue quota and unsuspending; the namespace opted in to a tether profile by the
//! namespace mechanism, so no pod template names tether.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PropagationPolicy};
use serde_json::json;
use tether_e2e::kueue::{self, KUEUE_LABEL, QUEUE_NAME, Queues};
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, kubectl_ok, unique_suffix, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(90);

/// A Job of `parallelism` pods of `cpu` each in Kueue's LocalQueue `lq`, on the test's nodes.
fn job(ns: &str, name: &str, parallelism: i32, cpu: &str, nodes: &TestNodes) -> serde_json::Value {
    let mut spec = json!({
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
    });
    nodes.isolate(&mut spec);
    json!({
        "apiVersion": "batch/v1", "kind": "Job",
        "metadata": {"name": name, "namespace": ns, "labels": {QUEUE_NAME: "lq"}},
        "spec": {"parallelism": parallelism, "completions": parallelism,
                 "template": {"spec": spec}},
    })
}

/// Queues whose flavor is the test's nodes under a Topology of `rack` then hostname, so that
/// Kueue's topology-aware admission assigns nodes; the Topology's name beside them.
fn rack_queues(
    ns: &str,
    cpu: &str,
    rack: &str,
    nodes: &TestNodes,
    suffix: &str,
) -> anyhow::Result<(Queues, String)> {
    let topology = format!("topology-{suffix}");
    apply(json!({
        "apiVersion": "kueue.x-k8s.io/v1beta2", "kind": "Topology",
        "metadata": {"name": topology},
        "spec": {"levels": [{"nodeLabel": rack}, {"nodeLabel": "kubernetes.io/hostname"}]},
    }))?;
    let queues = Queues::create_with(
        ns,
        cpu,
        json!({
            "nodeLabels": {tether_e2e::TEST_KEY: nodes.test},
            "topologyName": topology,
            "tolerations": [{"key": tether_e2e::TEST_KEY, "operator": "Equal",
                             "value": nodes.test, "effect": "NoSchedule"}],
        }),
    )?;
    Ok((queues, topology))
}

/// The first pod of Job `job` seen bound (not being deleted): its name and node.
async fn bound_job_pod(pods: &Api<Pod>, job: &str) -> anyhow::Result<(String, String)> {
    let selector = format!("batch.kubernetes.io/job-name={job}");
    wait_for("the Job's pod bound", TIMEOUT, || async {
        let listed = pods.list(&ListParams::default().labels(&selector)).await?;
        Ok(listed.items.into_iter().find_map(|p| {
            let node = p.spec.and_then(|s| s.node_name)?;
            p.metadata.deletion_timestamp.is_none().then_some(())?;
            Some((p.metadata.name.unwrap_or_default(), node))
        }))
    })
    .await
}

/// Waits until a StickyBinding in `ns` pins `node` (its `status.latest`); its name.
async fn binding_pinning(ns: &str, node: &str) -> anyhow::Result<String> {
    wait_for(
        "the Job's StickyBinding to pin its node",
        TIMEOUT,
        || async {
            let listed = kubectl_ok(&["get", "stickybindings", "-n", ns, "-o", "json"], None)?;
            let listed: serde_json::Value = serde_json::from_str(&listed)?;
            Ok(listed["items"]
                .as_array()
                .into_iter()
                .flatten()
                .find(|b| b["status"]["latest"] == node)
                .and_then(|b| b["metadata"]["name"].as_str().map(str::to_string)))
        },
    )
    .await
}

/// The Job's pods that are bound, each with the scheduler it names.
async fn bound_pods(pods: &Api<Pod>, job: &str) -> anyhow::Result<Vec<(String, String)>> {
    let listed = pods
        .list(&ListParams::default().labels(&format!("batch.kubernetes.io/job-name={job}")))
        .await?;
    Ok(listed
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| {
            let spec = p.spec?;
            Some((spec.node_name?, spec.scheduler_name.unwrap_or_default()))
        })
        .collect())
}

/// Kueue's verdict on the Job's Workload: its `QuotaReserved` condition (status, message).
fn quota_reserved(ns: &str, job: &str) -> anyhow::Result<Option<(String, String)>> {
    quota_reserved_of(ns, "Job", job)
}

/// Kueue's verdict on the Workload of the `kind` `name` owns: its `QuotaReserved` condition.
fn quota_reserved_of(ns: &str, kind: &str, name: &str) -> anyhow::Result<Option<(String, String)>> {
    let listed = kubectl_ok(
        &["get", "workloads.kueue.x-k8s.io", "-n", ns, "-o", "json"],
        None,
    )?;
    let listed: serde_json::Value = serde_json::from_str(&listed)?;
    let owned = listed["items"].as_array().into_iter().flatten().find(|w| {
        w["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .any(|o| o["kind"] == kind && o["name"] == name)
    });
    Ok(owned.and_then(|w| {
        w["status"]["conditions"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|c| c["type"] == "QuotaReserved")
            .map(|c| {
                (
                    c["status"].as_str().unwrap_or_default().to_string(),
                    c["message"].as_str().unwrap_or_default().to_string(),
                )
            })
    }))
}

/// A Job within its ClusterQueue's quota is admitted by Kueue and its pods placed by tether; a
/// second Job over the quota waits suspended (Kueue says why) and, once the first is gone, is
/// admitted and placed too. No pod names tether: the namespace opted in to tether's profile.
#[tokio::test]
async fn a_job_is_admitted_within_quota_and_placed_and_the_next_waits_suspended()
-> anyhow::Result<()> {
    kueue::ensure()?;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kueue-job").await?;
    let nodes = TestNodes::create(&client, "kueue-job", 2, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    let profile = format!("kueue-job-{suffix}");
    opt_in(&client, &ns.name, &profile).await?;
    let queues = Queues::create(&ns.name, "1")?;

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    apply(job(&ns.name, "first", 2, "400m", &nodes))?;
    let first = wait_for("the first Job's pods bound", TIMEOUT, || async {
        let bound = bound_pods(&pods, "first").await?;
        Ok((bound.len() == 2).then_some(bound))
    })
    .await?;
    assert!(
        first.iter().all(|(_, scheduler)| *scheduler == profile),
        "placed by tether's profile: {first:?}"
    );

    // 800m more does not fit the 1 CPU left of the quota: Kueue keeps it suspended and says so.
    apply(job(&ns.name, "second", 2, "400m", &nodes))?;
    let (status, message) = wait_for("Kueue's verdict on the second Job", TIMEOUT, || async {
        Ok(quota_reserved(&ns.name, "second")?.filter(|(s, _)| s == "False"))
    })
    .await?;
    assert!(message.contains("insufficient"), "{status}: {message}");
    let second = jobs.get("second").await?;
    assert_eq!(second.spec.and_then(|s| s.suspend), Some(true));
    assert!(bound_pods(&pods, "second").await?.is_empty());

    // The first goes (its quota with it): Kueue admits the second, tether places its pods.
    jobs.delete(
        "first",
        &DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..Default::default()
        },
    )
    .await?;
    let second = wait_for("the second Job's pods bound", TIMEOUT, || async {
        let bound = bound_pods(&pods, "second").await?;
        Ok((bound.len() == 2).then_some(bound))
    })
    .await?;
    assert!(
        second.iter().all(|(_, scheduler)| *scheduler == profile),
        "placed by tether's profile: {second:?}"
    );
    let (status, _) = quota_reserved(&ns.name, "second")?.unwrap_or_default();
    assert_eq!(status, "True");

    ns.delete().await?;
    nodes.delete().await?;
    queues.delete()?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}

/// A plain pod in Kueue's LocalQueue: Kueue gates it (its pod integration), admits it within
/// quota and ungates it, and tether places it; a second pod over the quota stays gated, and
/// `tether explain` on it names its gate, LocalQueue, ClusterQueue, Kueue's verdict and the
/// quota in the way, not only "gated".
#[tokio::test]
async fn a_pod_kueue_holds_is_explained_with_its_queue_and_quota() -> anyhow::Result<()> {
    kueue::ensure()?;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kueue-pod").await?;
    let nodes = TestNodes::create(&client, "kueue-pod", 1, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    let profile = format!("kueue-pod-{suffix}");
    opt_in(&client, &ns.name, &profile).await?;
    let queues = Queues::create(&ns.name, "1")?;
    let pod = |name: &str, cpu: &str| {
        let mut spec = json!({
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
        });
        nodes.isolate(&mut spec);
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns.name, "labels": {QUEUE_NAME: "lq"}},
               "spec": spec})
    };
    apply(pod("first", "800m"))?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "first", TIMEOUT).await?;
    assert_eq!(node, nodes.names[0]);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let first = pods.get("first").await?;
    assert_eq!(
        first.spec.and_then(|s| s.scheduler_name).as_deref(),
        Some(profile.as_str())
    );

    apply(pod("second", "400m"))?;
    let second_uid = pods.get("second").await?.metadata.uid.unwrap_or_default();
    wait_for("Kueue's verdict on the second pod", TIMEOUT, || async {
        Ok(quota_reserved_of(&ns.name, "Pod", "second")?.filter(|(s, _)| s == "False"))
    })
    .await?;
    // A third behind it, so that the second's place in the queue is told apart from "alone".
    apply(pod("third", "400m"))?;
    wait_for("Kueue's verdict on the third pod", TIMEOUT, || async {
        Ok(quota_reserved_of(&ns.name, "Pod", "third")?.filter(|(s, _)| s == "False"))
    })
    .await?;
    let token = reader_token(&ns.name)?;
    // Kueue writes its ClusterQueue's figures a moment after its verdict: explain until they
    // show the first pod's reservation.
    let want = format!("cpu: 800m reserved of nominal 1 (flavor {})", queues.flavor);
    let pod_key = format!("{}/second", ns.name);
    let admission = wait_for("explain to show the quota in the way", TIMEOUT, || async {
        let explained = explain_json(&pod_key, &token)?;
        Ok(explained
            .admission
            .filter(|a| a.quota.contains(&want) && a.pending_workloads == Some(2)))
    })
    .await?;
    assert!(
        admission
            .gates
            .iter()
            .any(|g| g == "kueue.x-k8s.io/admission"),
        "{admission:?}"
    );
    assert_eq!(admission.local_queue, Some(format!("{}/lq", ns.name)));
    assert_eq!(admission.cluster_queue, Some(queues.cluster_queue.clone()));
    assert!(
        admission
            .conditions
            .first()
            .is_some_and(|c| c.starts_with("QuotaReserved=False") && c.contains("insufficient")),
        "{admission:?}"
    );
    assert_eq!(admission.pending_workloads, Some(2), "{admission:?}");
    // Its place among the pending, from Kueue's visibility API: the two pending pods hold
    // places 0 and 1 (which first is Kueue's to decide: it requeues an inadmissible workload
    // behind others), the same in the ClusterQueue and in the LocalQueue (one queue feeds it).
    assert!(admission.unread.is_empty(), "{admission:?}");
    let third = explain_json(&format!("{}/third", ns.name), &token)?
        .admission
        .unwrap_or_default();
    let mut places = [
        admission.position_in_cluster_queue,
        third.position_in_cluster_queue,
    ];
    places.sort();
    assert_eq!(places, [Some(0), Some(1)], "{admission:?} {third:?}");
    assert_eq!(
        admission.position_in_local_queue, admission.position_in_cluster_queue,
        "{admission:?}"
    );
    assert_eq!(
        third.position_in_local_queue, third.position_in_cluster_queue,
        "{third:?}"
    );
    // The pod stays Kueue's until Kueue lets it go: tether never took it.
    let second = pods.get("second").await?;
    assert_eq!(second.metadata.uid.unwrap_or_default(), second_uid);
    assert!(second.spec.and_then(|s| s.node_name).is_none());

    kubectl_ok(
        &[
            "delete",
            "clusterrolebinding",
            &format!("{}-reader", ns.name),
            "--ignore-not-found",
        ],
        None,
    )?;
    ns.delete().await?;
    nodes.delete().await?;
    queues.delete()?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}

/// Opts `ns` in to Kueue here and to a new tether profile `profile` (by the namespace
/// mechanism), and waits until the profile's admission policy is in force.
async fn opt_in(client: &kube::Client, ns: &str, profile: &str) -> anyhow::Result<()> {
    opt_in_with(client, ns, profile, json!({})).await
}

/// [`opt_in`] to a profile with `more` in its spec (plugins, their args).
async fn opt_in_with(
    client: &kube::Client,
    ns: &str,
    profile: &str,
    more: serde_json::Value,
) -> anyhow::Result<()> {
    let selector = json!({"matchLabels": {"kubernetes.io/metadata.name": ns}});
    let mut spec = json!({"schedulerName": profile, "namespaceSelector": selector});
    if let (Some(spec), Some(more)) = (spec.as_object_mut(), more.as_object()) {
        spec.extend(more.clone());
    }
    apply_profile(client, profile, spec).await?;
    kubectl_ok(
        &[
            "label",
            "namespace",
            ns,
            &format!("{KUEUE_LABEL}=true"),
            &format!("tether.dev/scheduling-profile={profile}"),
        ],
        None,
    )?;
    wait_for(
        "the namespace's pods defaulted to the profile",
        TIMEOUT,
        || async {
            let out = kubectl_ok(
                &[
                    "run",
                    "probe",
                    "-n",
                    ns,
                    "--image=pause",
                    "--dry-run=server",
                    "-o",
                    "jsonpath={.spec.schedulerName}",
                ],
                None,
            )?;
            Ok((out.trim() == profile).then_some(()))
        },
    )
    .await?;
    Ok(())
}

/// A token of a ServiceAccount that may explain (deploy/'s `tether-explainer`) and read
/// Kueue's queues and workloads.
fn reader_token(ns: &str) -> anyhow::Result<String> {
    kubectl_ok(&["-n", ns, "create", "serviceaccount", "reader"], None)?;
    let subject = format!("--serviceaccount={ns}:reader");
    kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &format!("{ns}-reader"),
            "--clusterrole=tether-explainer",
            &subject,
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "-n",
            ns,
            "create",
            "role",
            "kueue-reader",
            "--verb=get,list",
            "--resource=workloads.kueue.x-k8s.io,localqueues.kueue.x-k8s.io",
        ],
        None,
    )?;
    // And the positions in its queues (Kueue's visibility API, a subresource of LocalQueues).
    apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "Role",
        "metadata": {"name": "kueue-positions", "namespace": ns},
        "rules": [{"apiGroups": ["visibility.kueue.x-k8s.io"],
                   "resources": ["localqueues/pendingworkloads"], "verbs": ["get"]}]}),
    )?;
    apply(
        json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
        "metadata": {"name": "kueue-positions", "namespace": ns},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "kueue-positions"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]}),
    )?;
    kubectl_ok(
        &[
            "-n",
            ns,
            "create",
            "rolebinding",
            "kueue-reader",
            "--role=kueue-reader",
            &subject,
        ],
        None,
    )?;
    // ClusterQueues are cluster-scoped: a binding of the cluster's built-in `view` does not
    // cover them, so one of Kueue's kinds alone, named for this namespace.
    kubectl_ok(
        &[
            "create",
            "clusterrole",
            &format!("{ns}-cq-reader"),
            "--verb=get",
            "--resource=clusterqueues.kueue.x-k8s.io",
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &format!("{ns}-cq-reader"),
            &format!("--clusterrole={ns}-cq-reader"),
            &subject,
        ],
        None,
    )?;
    Ok(kubectl_ok(
        &[
            "-n",
            ns,
            "create",
            "token",
            "reader",
            "--audience",
            "tether",
        ],
        None,
    )?
    .trim()
    .to_string())
}

/// `tether explain <pod> -o json` with `token`, as a person runs it.
fn explain_json(pod: &str, token: &str) -> anyhow::Result<tether::scheduler::explain::Explanation> {
    let dir = std::env::temp_dir().join(format!("tether-kueue-token-{}", unique_suffix()));
    std::fs::create_dir_all(&dir)?;
    let file = dir.join("token");
    std::fs::write(&file, token)?;
    let out = std::process::Command::new(tether_e2e::tether_bin())
        .args([
            "explain",
            pod,
            "--endpoint",
            &tether_e2e::tether_url(),
            "--token-file",
        ])
        .arg(&file)
        .args(["-o", "json"])
        .env("KUBECONFIG", tether_e2e::kubeconfig_path())
        .output()?;
    std::fs::remove_dir_all(&dir)?;
    anyhow::ensure!(
        out.status.success(),
        "tether explain {pod} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(serde_json::from_slice(&out.stdout)?)
}

/// A pod group Kueue admits as one (its pod-group labels) that is also a Workload API gang:
/// Kueue ungates the three pods together, and tether's group cycle places them whole or not at
/// all. With room for two, none binds (a scheduler without gangs would bind two) and the
/// PodGroup says why; once a node comes back, all three bind.
#[tokio::test]
async fn a_pod_group_kueue_admits_is_placed_whole_by_tether() -> anyhow::Result<()> {
    kueue::ensure()?;
    let client = client().await?;
    if tether_e2e::compared_minor(&client).await? < 37 {
        return Ok(());
    }
    let ns = TestNamespace::create(&client, "kueue-group").await?;
    let nodes = TestNodes::create(&client, "kueue-group", 2, "2", |_, _| {}).await?;
    kubectl_ok(&["cordon", &nodes.names[1]], None)?;
    let suffix = unique_suffix();
    let profile = format!("kueue-group-{suffix}");
    opt_in(&client, &ns.name, &profile).await?;
    let queues = Queues::create(&ns.name, "3")?;
    apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": ns.name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 3}}},
    }))?;
    for i in 0..3 {
        let mut spec = json!({
            "terminationGracePeriodSeconds": 0,
            "schedulingGroup": {"podGroupName": "train"},
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
        });
        nodes.isolate(&mut spec);
        apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("w-{i}"), "namespace": ns.name,
                "labels": {QUEUE_NAME: "lq", "kueue.x-k8s.io/pod-group-name": "train"},
                "annotations": {"kueue.x-k8s.io/pod-group-total-count": "3"}},
            "spec": spec}))?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // Kueue admits the group (three CPUs of quota) and lifts its gates from all three.
    wait_for("Kueue to ungate the group", TIMEOUT, || async {
        let listed = pods.list(&ListParams::default()).await?;
        let ungated = listed
            .items
            .iter()
            .filter(|p| {
                p.spec
                    .as_ref()
                    .and_then(|s| s.scheduling_gates.as_ref())
                    .is_none_or(|g| g.is_empty())
            })
            .count();
        Ok((ungated == 3).then_some(()))
    })
    .await?;
    // Room for two: tether's group cycle places none and says so on the PodGroup.
    let groups: Api<k8s_openapi::api::scheduling::v1beta1::PodGroup> =
        Api::namespaced(client.clone(), &ns.name);
    let said = wait_for("the PodGroup to say it does not fit", TIMEOUT, || async {
        let group = groups.get("train").await?;
        Ok(group
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodGroupInitiallyScheduled" && c.status == "False")
            .map(|c| c.message))
    })
    .await?;
    assert!(
        said.contains("minCount") || said.contains("minimum"),
        "{said}"
    );
    let bound = pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .count();
    assert_eq!(bound, 0, "a gang is placed whole or not at all");

    kubectl_ok(&["uncordon", &nodes.names[1]], None)?;
    for i in 0..3 {
        tether_e2e::wait_bound(&client, &ns.name, &format!("w-{i}"), TIMEOUT).await?;
    }
    for p in pods.list(&ListParams::default()).await?.items {
        assert_eq!(
            p.spec.and_then(|s| s.scheduler_name).as_deref(),
            Some(profile.as_str())
        );
    }

    // The PodGroup keeps its protection finalizer here: take it off so the namespace can go.
    kubectl_ok(
        &[
            "patch",
            "podgroup",
            "train",
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
        None,
    )?;
    ns.delete().await?;
    nodes.delete().await?;
    queues.delete()?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}

/// Kueue's admission and tether's preemption do not fight: a high-priority pod Kueue has not
/// admitted (its ClusterQueue's quota is spent and Kueue preempts nothing there) stays gated,
/// and tether never evicts the admitted low-priority pod for it, while on other nodes the same
/// pair without Kueue is preempted for at once (the control: tether's preemption works and
/// had its chance).
#[tokio::test]
async fn tether_never_preempts_for_a_pod_kueue_has_not_admitted() -> anyhow::Result<()> {
    use tether_e2e::groups::{HOLD, delete_priority_classes, let_go, priority_classes};
    kueue::ensure()?;
    let client = client().await?;
    let queued = TestNamespace::create(&client, "kueue-preempt").await?;
    let plain = TestNamespace::create(&client, "kueue-preempt-plain").await?;
    let kueue_nodes = TestNodes::create(&client, "kueue-preempt", 1, "1", |_, _| {}).await?;
    let plain_nodes = TestNodes::create(&client, "kueue-preempt-plain", 1, "1", |_, _| {}).await?;
    let suffix = unique_suffix();
    let profile = format!("kueue-preempt-{suffix}");
    opt_in(&client, &queued.name, &profile).await?;
    let queues = Queues::create(&queued.name, "1")?;
    let test = format!("kueue-preempt-{suffix}");
    let classes = [("low", 100), ("high", 1000)];
    priority_classes(&test, &classes)?;
    let pod = |ns: &str, name: &str, class: &str, nodes: &TestNodes, queue: bool| {
        let mut spec = json!({
            "priorityClassName": format!("{test}-{class}"),
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
        });
        if !queue {
            spec["schedulerName"] = json!(profile);
        }
        nodes.isolate(&mut spec);
        let labels = if queue {
            json!({QUEUE_NAME: "lq"})
        } else {
            json!({})
        };
        json!({"apiVersion": "v1", "kind": "Pod",
               "metadata": {"name": name, "namespace": ns, "labels": labels, "finalizers": [HOLD]},
               "spec": spec})
    };
    apply(pod(&queued.name, "low", "low", &kueue_nodes, true))?;
    apply(pod(&plain.name, "low", "low", &plain_nodes, false))?;
    tether_e2e::wait_bound(&client, &queued.name, "low", TIMEOUT).await?;
    tether_e2e::wait_bound(&client, &plain.name, "low", TIMEOUT).await?;

    apply(pod(&queued.name, "high", "high", &kueue_nodes, true))?;
    wait_for("Kueue's verdict on the high pod", TIMEOUT, || async {
        Ok(quota_reserved_of(&queued.name, "Pod", "high")?.filter(|(s, _)| s == "False"))
    })
    .await?;
    // The control: the same pair without Kueue; tether preempts the low one for the high one.
    apply(pod(&plain.name, "high", "high", &plain_nodes, false))?;
    let plain_pods: Api<Pod> = Api::namespaced(client.clone(), &plain.name);
    wait_for("tether to preempt the plain low pod", TIMEOUT, || async {
        let low = plain_pods.get("low").await?;
        Ok(low.metadata.deletion_timestamp.map(|_| ()))
    })
    .await?;
    let queued_pods: Api<Pod> = Api::namespaced(client.clone(), &queued.name);
    let low = queued_pods.get("low").await?;
    assert!(
        low.metadata.deletion_timestamp.is_none(),
        "tether evicted an admitted pod for one Kueue had not admitted"
    );
    let high = queued_pods.get("high").await?;
    assert!(high.spec.as_ref().is_some_and(|s| s.node_name.is_none()));
    assert!(
        high.spec
            .and_then(|s| s.scheduling_gates)
            .is_some_and(|g| g.iter().any(|g| g.name == "kueue.x-k8s.io/admission")),
        "the high pod is still Kueue's"
    );

    let_go(&queued.name, ["low", "high"]);
    let_go(&plain.name, ["low", "high"]);
    queued.delete().await?;
    plain.delete().await?;
    kueue_nodes.delete().await?;
    plain_nodes.delete().await?;
    queues.delete()?;
    delete_priority_classes(&test, &classes)?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}

/// A sticky workload admitted through Kueue returns to its pin: a one-pod Job Kueue admitted
/// is placed by a profile with StickyNode; its pod replaced goes back to the node it first ran
/// on, though that node is now the fuller one (the default scores would send it to the other).
#[tokio::test]
async fn a_sticky_job_admitted_by_kueue_returns_to_its_pin() -> anyhow::Result<()> {
    kueue::ensure()?;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kueue-sticky").await?;
    let filler_ns = TestNamespace::create(&client, "kueue-sticky-filler").await?;
    let nodes = TestNodes::create(&client, "kueue-sticky", 2, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    let profile = format!("kueue-sticky-{suffix}");
    opt_in_with(
        &client,
        &ns.name,
        &profile,
        json!({
            "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}},
            "pluginConfig": [{"name": "StickyNode", "args": {"skipMultiReplica": true}}],
        }),
    )
    .await?;
    let queues = Queues::create(&ns.name, "2")?;
    apply(job(&ns.name, "db", 1, "1", &nodes))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let (first_name, pin) = bound_job_pod(&pods, "db").await?;
    // The pin's node fills up: by the scores alone a new pod would go to the other node.
    let mut filler = json!({
        "nodeName": pin,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "2"}}}],
    });
    nodes.isolate(&mut filler);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": "filler", "namespace": filler_ns.name}, "spec": filler}))?;
    tether_e2e::wait_bound(&client, &filler_ns.name, "filler", TIMEOUT).await?;
    // The pin is recorded before the pod goes.
    binding_pinning(&ns.name, &pin).await?;
    pods.delete(&first_name, &DeleteParams::default()).await?;
    let replacement = wait_for("the replacement bound", TIMEOUT, || async {
        let listed = pods
            .list(&ListParams::default().labels("batch.kubernetes.io/job-name=db"))
            .await?;
        Ok(listed.items.into_iter().find_map(|p| {
            let name = p.metadata.name.clone()?;
            (name != first_name && p.metadata.deletion_timestamp.is_none())
                .then_some(())
                .and(p.spec.and_then(|s| s.node_name))
        }))
    })
    .await?;
    assert_eq!(replacement, pin, "the replacement returns to its pin");

    ns.delete().await?;
    filler_ns.delete().await?;
    nodes.delete().await?;
    queues.delete()?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}

/// Kueue's topology-aware admission and tether agree: a Job of three 1-CPU pods that must run
/// within one rack (`kueue.x-k8s.io/podset-required-topology`) is admitted where a rack has room
/// (rack a's nodes are mostly taken), Kueue lifts its topology gate with a node chosen for each
/// pod, and tether places each pod on the node Kueue chose.
#[tokio::test]
async fn a_job_kueue_admits_within_one_rack_is_placed_where_kueue_assigned_it() -> anyhow::Result<()>
{
    kueue::ensure()?;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kueue-tas").await?;
    let filler_ns = TestNamespace::create(&client, "kueue-tas-filler").await?;
    let rack = "e2e.tether.dev/rack";
    let nodes = TestNodes::create(&client, "kueue-tas", 4, "2", |i, node| {
        node["metadata"]["labels"][rack] = json!(if i < 2 { "rack-a" } else { "rack-b" });
    })
    .await?;
    let suffix = unique_suffix();
    let profile = format!("kueue-tas-{suffix}");
    opt_in(&client, &ns.name, &profile).await?;
    let (queues, topology) = rack_queues(&ns.name, "8", rack, &nodes, &suffix)?;
    // Rack a keeps half a CPU per node free: the Job fits rack b only.
    for i in 0..2 {
        let mut spec = json!({
            "nodeName": nodes.names[i],
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1500m"}}}],
        });
        nodes.isolate(&mut spec);
        apply(json!({"apiVersion": "v1", "kind": "Pod",
                     "metadata": {"name": format!("filler-{i}"), "namespace": filler_ns.name},
                     "spec": spec}))?;
        tether_e2e::wait_bound(&client, &filler_ns.name, &format!("filler-{i}"), TIMEOUT).await?;
    }
    let mut job = job(&ns.name, "ring", 3, "1", &nodes);
    job["spec"]["template"]["metadata"] =
        json!({"annotations": {"kueue.x-k8s.io/podset-required-topology": rack}});
    apply(job)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let placed = wait_for("the Job's pods bound", TIMEOUT, || async {
        let listed = pods
            .list(&ListParams::default().labels("batch.kubernetes.io/job-name=ring"))
            .await?;
        let bound: Vec<Pod> = listed
            .items
            .into_iter()
            .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
            .collect();
        Ok((bound.len() == 3).then_some(bound))
    })
    .await?;
    for pod in &placed {
        let spec = pod.spec.clone().unwrap_or_default();
        let node = spec.node_name.clone().unwrap_or_default();
        let index = nodes.names.iter().position(|n| *n == node).unwrap_or(99);
        assert!(index >= 2, "{node} is not in rack b");
        // Kueue's assignment names a node (its lowest level): tether placed the pod there.
        let chosen = spec
            .node_selector
            .as_ref()
            .and_then(|s| s.get("kubernetes.io/hostname"))
            .cloned();
        assert_eq!(chosen.as_deref(), Some(node.as_str()), "{spec:?}");
        assert_eq!(spec.scheduler_name.as_deref(), Some(profile.as_str()));
    }

    ns.delete().await?;
    filler_ns.delete().await?;
    nodes.delete().await?;
    queues.delete()?;
    kubectl_ok(
        &[
            "delete",
            "topology.kueue.x-k8s.io",
            &topology,
            "--ignore-not-found",
        ],
        None,
    )?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}

/// Where tether's own rule and Kueue's assignment disagree, the pod says why instead of waiting
/// in silence: a sticky one-pod Job admitted within one rack runs on the node Kueue chose; a
/// person moves its pin (the StickyBinding's spec.nodeName) to the other rack; the replacement
/// pod carries Kueue's assignment (a nodeSelector for the old node), and tether tells in its
/// FailedScheduling event that the pod's own nodeSelector, set by Kueue's topology-aware
/// admission, excludes the pin, and what to do. It binds nowhere meanwhile.
#[tokio::test]
async fn a_sticky_pin_kueue_assigned_elsewhere_says_why() -> anyhow::Result<()> {
    kueue::ensure()?;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "kueue-pin").await?;
    let rack = "e2e.tether.dev/rack";
    let nodes = TestNodes::create(&client, "kueue-pin", 2, "4", |i, node| {
        node["metadata"]["labels"][rack] = json!(format!("rack-{i}"));
    })
    .await?;
    let suffix = unique_suffix();
    let profile = format!("kueue-pin-{suffix}");
    opt_in_with(
        &client,
        &ns.name,
        &profile,
        json!({
            "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}},
            "pluginConfig": [{"name": "StickyNode", "args": {"skipMultiReplica": true}}],
        }),
    )
    .await?;
    let (queues, topology) = rack_queues(&ns.name, "4", rack, &nodes, &suffix)?;
    let mut job = job(&ns.name, "db", 1, "1", &nodes);
    job["spec"]["template"]["metadata"] =
        json!({"annotations": {"kueue.x-k8s.io/podset-required-topology": rack}});
    apply(job)?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let (first_name, assigned) = bound_job_pod(&pods, "db").await?;
    let elsewhere = nodes
        .names
        .iter()
        .find(|n| **n != assigned)
        .cloned()
        .unwrap_or_default();
    // The pin is recorded; then a person moves it to the other rack.
    let binding = binding_pinning(&ns.name, &assigned).await?;
    kubectl_ok(
        &[
            "patch",
            "stickybinding",
            &binding,
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            &json!({"spec": {"nodeName": elsewhere}}).to_string(),
        ],
        None,
    )?;
    pods.delete(&first_name, &DeleteParams::default()).await?;
    let replacement = wait_for("the replacement pod, ungated", TIMEOUT, || async {
        let listed = pods
            .list(&ListParams::default().labels("batch.kubernetes.io/job-name=db"))
            .await?;
        Ok(listed.items.into_iter().find(|p| {
            p.metadata.name.as_deref() != Some(first_name.as_str())
                && p.metadata.deletion_timestamp.is_none()
                && p.spec
                    .as_ref()
                    .is_some_and(|s| s.scheduling_gates.as_ref().is_none_or(Vec::is_empty))
        }))
    })
    .await?;
    let name = replacement.metadata.name.clone().unwrap_or_default();
    let selector = replacement
        .spec
        .as_ref()
        .and_then(|s| s.node_selector.as_ref())
        .and_then(|s| s.get("kubernetes.io/hostname"))
        .cloned();
    assert_eq!(
        selector.as_deref(),
        Some(assigned.as_str()),
        "Kueue keeps the workload's assignment for the replacement"
    );
    let events =
        tether_e2e::wait_event(&client, &ns.name, &name, "FailedScheduling", TIMEOUT, |e| {
            e.contains(&format!("sticky node {elsewhere}"))
                && e.contains(&format!(
                    "nodeSelector kubernetes.io/hostname={assigned} excludes"
                ))
                && e.contains("Kueue's topology-aware admission")
                && e.contains(&format!("StickyBinding {}/{binding}", ns.name))
        })
        .await?;
    let now = pods.get(&name).await?;
    assert!(
        now.spec.and_then(|s| s.node_name).is_none(),
        "bound against its pin or its assignment: {events:?}"
    );

    ns.delete().await?;
    nodes.delete().await?;
    queues.delete()?;
    kubectl_ok(
        &[
            "delete",
            "topology.kueue.x-k8s.io",
            &topology,
            "--ignore-not-found",
        ],
        None,
    )?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}
