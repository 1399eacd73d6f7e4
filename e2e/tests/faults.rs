//! Faults: tether cut off the API server while the cluster changes, then the API server
//! restarted (its watch cache starts afresh, so every resumed watch gets 410 Gone). These tests
//! run a tether of their own behind a proxy and restart kube-apiserver, so `make e2e` runs them
//! alone, after the shared tether has stopped.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tether::api::StickyBinding;
use tether_e2e::faults::{OwnTether, Proxy, Stop, restart};
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, kubectl_ok, unique_suffix, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The bound pod of the Deployment `app`, other than `not_uid`.
async fn bound_pod(
    pods: &Api<Pod>,
    app: &str,
    not_uid: Option<&str>,
) -> anyhow::Result<Option<Pod>> {
    let list = pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?;
    Ok(list.items.into_iter().find(|p| {
        p.metadata.deletion_timestamp.is_none()
            && p.metadata.uid.as_deref() != not_uid
            && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
    }))
}

fn node_of(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .unwrap_or_default()
}

/// Cut off, a person deletes a workload's StickyBinding (freeing it) and cordons its node; the
/// workload's pod is replaced; the API server restarts. Reconnected, tether must re-list before
/// it schedules: the new pod does not land on the cordoned node, the deleted pin is forgotten,
/// and the new bind is counted in a binding created anew.
#[tokio::test]
async fn after_an_outage_and_an_api_server_restart_tether_schedules_on_the_current_view()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "relist").await?;
    let nodes = TestNodes::create(&client, "relist", 3, "16", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let tether = OwnTether::start("relist", &proxy).await?;

    let name = format!("relist-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}}),
    )
    .await?;
    let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]});
    nodes.isolate(&mut spec);
    apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "vm", "namespace": ns.name},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "vm"}}, "template": {"metadata": {"labels": {"app": "vm"}}, "spec": spec}},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let first = wait_for("the first pod bound", TIMEOUT, || {
        bound_pod(&pods, "vm", None)
    })
    .await?;
    let pinned = node_of(&first);
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let old_binding = wait_for("the first bind recorded", TIMEOUT, || {
        let bindings = bindings.clone();
        async move {
            Ok(bindings
                .get_opt("deployment-vm")
                .await?
                .filter(|b| b.status.as_ref().is_some_and(|s| s.schedule_count == 1)))
        }
    })
    .await?;
    assert_eq!(old_binding.pin(), Some(pinned.as_str()));

    // Cut off: tether notices (its watches fail and it stops scheduling).
    proxy.cut();
    wait_for("tether to notice the outage", TIMEOUT, || async {
        Ok(tether.readyz()?.filter(|body| body.contains("re-listing")))
    })
    .await?;
    // Meanwhile a person frees the workload and cordons its node, and the pod is replaced.
    bindings
        .delete("deployment-vm", &DeleteParams::default())
        .await?;
    Api::<Node>::all(client.clone())
        .patch(
            &pinned,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await?;
    let first_uid = first.metadata.uid.clone().unwrap_or_default();
    pods.delete(
        first.metadata.name.as_deref().unwrap_or_default(),
        &DeleteParams::default().grace_period(0),
    )
    .await?;
    restart("kube-apiserver", Stop::Term, Duration::ZERO)?;
    proxy.restore();

    let second = wait_for(
        "the replacement pod bound after the outage",
        TIMEOUT,
        || bound_pod(&pods, "vm", Some(&first_uid)),
    )
    .await?;
    let node = node_of(&second);
    assert_ne!(
        node,
        pinned,
        "bound to the node that was cordoned (and unpinned) during the outage; tether's log: {}",
        tether.log.display()
    );
    let second_uid = second.metadata.uid.clone().unwrap_or_default();
    let binding = wait_for("the new bind recorded in a new binding", TIMEOUT, || {
        let bindings = bindings.clone();
        let uid = second_uid.clone();
        async move {
            Ok(bindings.get_opt("deployment-vm").await?.filter(|b| {
                b.status
                    .as_ref()
                    .is_some_and(|s| s.recent_binds.iter().any(|r| r.pod_uid == uid))
            }))
        }
    })
    .await?;
    assert_ne!(
        binding.metadata.uid, old_binding.metadata.uid,
        "a binding created anew"
    );
    let status = binding.status.clone().unwrap_or_default();
    assert_eq!(status.schedule_count, 1, "only the new bind: {status:?}");
    assert_eq!(status.node_count.get(&node), Some(&1), "{status:?}");
    assert_eq!(
        binding.pin(),
        Some(node.as_str()),
        "pinned anew where it went"
    );

    kubectl_ok(&["delete", "sp", &name], None)?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

/// SIGTERM in the middle of a burst: tether takes no new pod from its queue, lets the binds in
/// flight finish with their history writes, and exits 0. Every pod the test sees bound is
/// counted in the workload's binding, exactly once; the others stay pending.
#[tokio::test]
async fn on_sigterm_binds_in_flight_finish_with_their_history_and_tether_exits_cleanly()
-> anyhow::Result<()> {
    const REPLICAS: usize = 300;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "sigterm").await?;
    let nodes = TestNodes::create(&client, "sigterm", 4, "64", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start("sigterm", &proxy).await?;
    let name = format!("sigterm-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [{"name": "PlacementHistory", "weight": 5}]}},
            "pluginConfig": [{"name": "PlacementHistory", "args": {"skipMultiReplica": false}}]}),
    )
    .await?;
    let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "10m"}}}]});
    nodes.isolate(&mut spec);
    apply(json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "namespace": ns.name},
        "spec": {"replicas": REPLICAS, "selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}}, "spec": spec}},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let bound_uids = || {
        let pods = pods.clone();
        async move {
            let list = pods.list(&ListParams::default().labels("app=web")).await?;
            let bound: Vec<String> = list
                .items
                .iter()
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
                .filter_map(|p| p.metadata.uid.clone())
                .collect();
            anyhow::Ok((bound, list.items.len()))
        }
    };
    wait_for("some pods bound", TIMEOUT, || async {
        Ok(bound_uids()
            .await
            .ok()
            .filter(|(b, _)| b.len() >= 10)
            .map(|_| ()))
    })
    .await?;

    let clean = tether.terminate(Duration::from_secs(40)).await?;
    assert!(
        clean,
        "tether exits 0 after SIGTERM (log: {})",
        tether.log.display()
    );

    let (bound, all) = bound_uids().await?;
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let status = bindings
        .get("deployment-web")
        .await?
        .status
        .unwrap_or_default();
    println!(
        "{} of {all} pods bound before tether stopped; scheduleCount {}",
        bound.len(),
        status.schedule_count
    );
    assert_eq!(
        status.schedule_count,
        bound.len() as i64,
        "every bind made before the exit is counted, once: {status:?}"
    );
    assert_eq!(status.node_count.values().sum::<i64>(), bound.len() as i64);
    let recent_bound = status
        .recent_binds
        .iter()
        .all(|b| bound.contains(&b.pod_uid));
    assert!(recent_bound, "recentBinds names only bound pods");

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}
