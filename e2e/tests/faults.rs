//! Faults: tether cut off the API server while the cluster changes, then the API server
//! restarted (its watch cache starts afresh, so every resumed watch gets 410 Gone). These tests
//! run a tether of their own behind a proxy and restart kube-apiserver, so `make e2e` runs them
//! alone, after the shared tether has stopped.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::Context;
use http::Method;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tether::api::StickyBinding;
use tether_e2e::faults::{Action, Matcher, OwnTether, Proxy, Stop, restart};
use tether_e2e::ground_truth::{BindLedger, HistoryWorkload, assert_within_allocatable};
use tether_e2e::kubevirt;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, kubectl_ok, unique_suffix, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// How soon after the API server's return every watch must be current again, and a profile
/// created then Ready. Measured 2-4 s: a restarted kube-apiserver first denies requests for a
/// moment (its authorizer syncing) and answers those for custom resources 503 until it has
/// installed their paths.
const BACK_WITHIN: Duration = Duration::from_secs(5);

/// The pods in `ns` reported as failing to bind although they are bound: a `FailedScheduling`
/// event of a failed binding cycle ("running Bind plugin …", "running PreBind plugin …", or
/// tether's "Binding rejected: …" when it may not bind), or a `PodScheduled=False` condition
/// left on a bound pod. (A
/// pod may legitimately have waited before its cycle, e.g. for its owner ReplicaSet to be
/// known: that event is not a misreport.)
async fn bound_yet_reported_failed(client: &kube::Client, ns: &str) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::api::events::v1::Event;
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let events: Api<Event> = Api::namespaced(client.clone(), ns);
    let failed_events: Vec<String> = events
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| e.reason.as_deref() == Some("FailedScheduling"))
        .filter(|e| {
            e.note.as_deref().is_some_and(|n| {
                [
                    "Binding rejected",
                    "running Bind plugin",
                    "running PreBind plugin",
                ]
                .iter()
                .any(|p| n.starts_with(p))
            })
        })
        .filter_map(|e| e.regarding.and_then(|r| r.uid))
        .collect();
    Ok(pods
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some())
        .filter(|p| {
            let uid = p.metadata.uid.clone().unwrap_or_default();
            let condition_false = p
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                });
            condition_false || failed_events.contains(&uid)
        })
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// Checks that tether is still running and its log shows no panic.
fn assert_alive(tether: &mut OwnTether) {
    assert!(
        tether.running(),
        "tether kept running (log: {})",
        tether.log.display()
    );
    let panicked = std::fs::read_to_string(&tether.log).is_ok_and(|log| log.contains("panicked"));
    assert!(!panicked, "tether panicked (log: {})", tether.log.display());
}

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
        Ok(tether.readyz()?.filter(|body| body.contains("not current")))
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

/// Cut off for a few seconds (the API server stays up), tether resumes its watches from where
/// they were, as kube-scheduler's informers do, instead of listing every pod and node again, and
/// still schedules on the current view: a node cordoned meanwhile is not chosen, a pod created
/// meanwhile is bound. The lists are counted at the proxy, not from tether.
#[tokio::test]
async fn after_a_cut_tether_resumes_its_watches_without_listing_again() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "resume").await?;
    let nodes = TestNodes::create(&client, "resume", 2, "16", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    // Every list of pods and of nodes tether makes, counted from its start: streamed (a watch
    // request that sends the objects first, the only one asking for 300 s) or in pages (kube
    // writes a page's query as `?&limit=500`). The first lists show the count works.
    let count = |fragment: String, watches: bool| {
        proxy.inject(
            Matcher {
                method: Some(Method::GET),
                path_contains: fragment,
                watches,
            },
            Action::Delay(Duration::ZERO),
            None,
        )
    };
    let lists = ["pods", "nodes"].map(|what| {
        [
            count(
                format!("/api/v1/{what}?&watch=true&timeoutSeconds=300&"),
                true,
            ),
            count(format!("/api/v1/{what}?&limit=500"), false),
        ]
    });
    let listed = || -> Vec<u64> {
        lists
            .iter()
            .map(|[streamed, paged]| streamed.hits() + paged.hits())
            .collect()
    };
    let tether = OwnTether::start("resume", &proxy).await?;
    let name = format!("resume-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(&client, &name, json!({"schedulerName": scheduler})).await?;
    let pod = |pod_name: &str| {
        let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "100m"}}}]});
        nodes.isolate(&mut spec);
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name, "namespace": ns.name}, "spec": spec})
    };
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let bound = |pod_name: &'static str| {
        let pods = pods.clone();
        move || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .get_opt(pod_name)
                    .await?
                    .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some())))
            }
        }
    };
    apply(pod("first"))?;
    let first = wait_for("the first pod bound", TIMEOUT, bound("first")).await?;
    let listed_before = listed();
    assert!(
        listed_before.iter().all(|&n| n >= 1),
        "tether's first lists of pods and nodes went uncounted: {listed_before:?}"
    );

    proxy.cut();
    wait_for("tether to notice the cut", TIMEOUT, || async {
        Ok(tether.readyz()?.filter(|body| body.contains("not current")))
    })
    .await?;
    let cordoned = node_of(&first);
    Api::<Node>::all(client.clone())
        .patch(
            &cordoned,
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"unschedulable": true}})),
        )
        .await?;
    apply(pod("second"))?;
    proxy.restore();

    let second = wait_for(
        "the pod created during the cut bound",
        TIMEOUT,
        bound("second"),
    )
    .await?;
    assert_ne!(
        node_of(&second),
        cordoned,
        "bound to the node cordoned during the cut; tether's log: {}",
        tether.log.display()
    );
    assert_eq!(
        listed(),
        listed_before,
        "listed pods or nodes again after the cut instead of resuming; tether's log: {}",
        tether.log.display()
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
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", REPLICAS, "10m").await?;
    let bound_uids = || async {
        let bound: Vec<String> = web
            .bound_pods()
            .await?
            .into_iter()
            .filter_map(|p| p.metadata.uid)
            .collect();
        anyhow::Ok(bound)
    };
    wait_for("some pods bound", TIMEOUT, || async {
        Ok(bound_uids()
            .await
            .ok()
            .filter(|b| b.len() >= 10)
            .map(|_| ()))
    })
    .await?;

    let clean = tether.terminate(Duration::from_secs(40)).await?;
    assert!(
        clean,
        "tether exits 0 after SIGTERM (log: {})",
        tether.log.display()
    );

    let bound = bound_uids().await?;
    let status = web.history().await?;
    println!(
        "{} of {REPLICAS} pods bound before tether stopped; scheduleCount {}",
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

    web.delete_profile()?;
    nodes.delete().await?;
    ns.delete().await
}

/// The replies to three binds are lost (the API server binds the pod, then the connection drops
/// before tether hears so). tether reads each pod back, finds it bound where it chose, and counts
/// it as a success: every pod is bound once, counted once, and none is reported as failed.
#[tokio::test]
async fn a_bind_whose_reply_is_lost_is_counted_once_and_never_reported_failed() -> anyhow::Result<()>
{
    const REPLICAS: usize = 8;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "lostreply").await?;
    let nodes = TestNodes::create(&client, "lostreply", 2, "16", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let lost = proxy.inject(
        Matcher::new(Method::POST, "/binding"),
        Action::DropReply,
        Some(3),
    );
    let tether = OwnTether::start("lostreply", &proxy).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", REPLICAS, "100m").await?;

    web.wait_all_bound(REPLICAS, TIMEOUT).await?;
    assert_eq!(lost.hits(), 3, "three bind replies were lost");
    let status = web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert_eq!(status.schedule_count, REPLICAS as i64, "{status:?}");
    let misreported = bound_yet_reported_failed(&client, &ns.name).await?;
    assert!(
        misreported.is_empty(),
        "bound pods reported as failed: {misreported:?} (tether's log: {})",
        tether.log.display()
    );

    web.delete_profile()?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

/// For ten seconds the API server answers every write with 429 and every other request with
/// 503 (both with `Retry-After: 1`), while 60 pods wait; its connections are cut as the storm
/// begins, so every watch must be opened again through it. tether (its client) retries no
/// request faster than the API server asks, keeps running, and once the API server answers again
/// binds every pod exactly once, within the nodes' capacity, with its history exact.
#[tokio::test]
async fn through_a_storm_of_429_and_503_tether_backs_off_and_recovers() -> anyhow::Result<()> {
    const REPLICAS: usize = 60;
    const STORM: Duration = Duration::from_secs(10);
    let client = client().await?;
    let ns = TestNamespace::create(&client, "storm").await?;
    let nodes = TestNodes::create(&client, "storm", 3, "4", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start("storm", &proxy).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 0, "200m").await?;

    let writes = |method: Method| {
        let matcher = Matcher {
            method: Some(method),
            ..Matcher::everything()
        };
        proxy.inject(matcher, Action::Answer(429), None)
    };
    let storm = [
        writes(Method::POST),
        writes(Method::PATCH),
        writes(Method::PUT),
        proxy.inject(Matcher::everything(), Action::Answer(503), None),
    ];
    // tether sees the pods through the watches it has open; then they break too.
    web.scale(REPLICAS).await?;
    tokio::time::sleep(STORM / 3).await;
    proxy.cut();
    proxy.restore();
    tokio::time::sleep(STORM - STORM / 3).await;
    assert!(ledger.is_empty(), "a bind got through the storm");
    for fault in &storm {
        proxy.remove(fault);
    }
    let mut by_path: std::collections::BTreeMap<String, u64> = Default::default();
    for fault in &storm {
        for (path, hits) in fault.hits_by_path() {
            *by_path.entry(path).or_default() += hits;
        }
    }
    let (busiest, most) = by_path
        .iter()
        .max_by_key(|(_, hits)| **hits)
        .map(|(p, h)| (p.clone(), *h))
        .unwrap_or_default();
    println!(
        "{} requests refused in the {}s storm, on {} paths; the busiest, {busiest}, {most} times",
        by_path.values().sum::<u64>(),
        STORM.as_secs(),
        by_path.len()
    );
    assert!(storm[0].hits() > 0, "the storm hit tether's binds");
    assert!(
        storm[3].hits() > 0,
        "the storm hit tether's watches as they re-opened"
    );
    // The API server asked for a second between tries: no request is made more often. A bind
    // has one maker; a list of owners or selectors may have two watches making it.
    let limit = STORM.as_secs() + 2;
    for (path, hits) in &by_path {
        // Events are created for many pods on one path: each is its own request.
        if path.ends_with("/events") {
            continue;
        }
        let makers = if path.ends_with("/binding") { 1 } else { 2 };
        assert!(
            *hits <= limit * makers,
            "{path} was tried {hits} times in {}s: tether does not back off",
            STORM.as_secs()
        );
    }

    web.wait_all_bound(REPLICAS, TIMEOUT * 2).await?;
    assert_alive(&mut tether);
    web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert_within_allocatable(&client, &nodes).await?;

    web.delete_profile()?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

/// Every StickyBinding history write (a PUT of its status; the binding itself is created)
/// fails (500) after the binds succeed; then tether is killed (SIGKILL) before it could write
/// any of them, and started again with the API server healthy.
/// The start-up reconcile counts each bind made before the crash exactly once, and binds after
/// it add up with them.
#[tokio::test]
async fn binds_whose_history_write_failed_before_a_crash_are_counted_once_after_it()
-> anyhow::Result<()> {
    const REPLICAS: usize = 20;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "lostwrite").await?;
    let nodes = TestNodes::create(&client, "lostwrite", 3, "16", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let writes = |method: Method| {
        proxy.inject(
            Matcher::new(method, "/stickybindings"),
            Action::Answer(500),
            None,
        )
    };
    let (puts, patches) = (writes(Method::PUT), writes(Method::PATCH));
    let mut tether = OwnTether::start("lostwrite-1", &proxy).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", REPLICAS, "100m").await?;
    web.wait_all_bound(REPLICAS, TIMEOUT).await?;
    wait_for("tether to try writing the history", TIMEOUT, || async {
        Ok((puts.hits() > 0).then_some(()))
    })
    .await?;
    assert_eq!(
        web.history().await?.schedule_count,
        0,
        "no history write got through"
    );

    tether.kill()?;
    proxy.remove(&puts);
    proxy.remove(&patches);
    let tether = OwnTether::start("lostwrite-2", &proxy).await?;
    let status = web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert_eq!(status.schedule_count, REPLICAS as i64, "{status:?}");

    web.scale(REPLICAS + 10).await?;
    web.wait_all_bound(REPLICAS + 10, TIMEOUT).await?;
    let status = web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert_eq!(status.schedule_count, (REPLICAS + 10) as i64, "{status:?}");

    web.delete_profile()?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

/// The newest time any of `pods` was bound (its `PodScheduled` condition).
fn newest_bind(pods: &[Pod]) -> Option<jiff::Timestamp> {
    pods.iter()
        .filter_map(|p| p.status.as_ref()?.conditions.as_ref())
        .flatten()
        .filter(|c| c.type_ == "PodScheduled" && c.status == "True")
        .filter_map(|c| c.last_transition_time.as_ref().map(|t| t.0))
        .max()
}

/// Binds counted long enough ago leave `countedPods` (`countedBefore` vouches for them, here
/// after 5 s): the binding names only the recent ones. tether is then killed with the history
/// writes of the newest binds failing, and started again: its reconcile counts exactly those,
/// and none of the binds `countedPods` no longer names is counted twice. The API server's own
/// bind times decide, against the test's own count of binds.
#[tokio::test]
async fn binds_that_left_counted_pods_are_not_counted_again_after_a_crash() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "settle").await?;
    let nodes = TestNodes::create(&client, "settle", 3, "32", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let settle = ["--history-settle-seconds", "5"];
    let mut tether = OwnTether::start_with("settle-1", &proxy, &settle).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 30, "100m").await?;
    web.wait_all_bound(30, TIMEOUT).await?;
    web.assert_history_matches(&ledger, TIMEOUT).await?;

    // The next binds come more than 5 s after the first 30: their write lets those go.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let first = pods.list(&ListParams::default().labels("app=web")).await?;
    let first_uids: Vec<String> = first.items.iter().filter_map(|p| p.uid()).collect();
    let newest = newest_bind(&first.items).context("the pods' bind times")?;
    wait_for("6 s since the last bind", TIMEOUT, || async {
        Ok((jiff::Timestamp::now() >= newest + jiff::SignedDuration::from_secs(6)).then_some(()))
    })
    .await?;
    web.scale(40).await?;
    web.wait_all_bound(40, TIMEOUT).await?;
    let status = web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert!(
        status.counted_before.is_some(),
        "countedBefore is set: {status:?}"
    );
    assert!(
        first_uids.iter().all(|u| !status.counted_pods.contains(u)),
        "the first 30 binds left countedPods: {} listed",
        status.counted_pods.len()
    );

    // The next binds' history writes fail, and tether dies before it could write them.
    let puts = proxy.inject(
        Matcher::new(Method::PUT, "/stickybindings"),
        Action::Answer(500),
        None,
    );
    web.scale(50).await?;
    web.wait_all_bound(50, TIMEOUT).await?;
    wait_for("tether to try writing the history", TIMEOUT, || async {
        Ok((puts.hits() > 0).then_some(()))
    })
    .await?;
    tether.kill()?;
    proxy.remove(&puts);
    assert_eq!(
        web.history().await?.schedule_count,
        40,
        "the last ten are not written"
    );

    let tether = OwnTether::start_with("settle-2", &proxy, &settle).await?;
    let status = web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert_eq!(status.schedule_count, 50, "{status:?}");

    web.delete_profile()?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

/// tether is killed (SIGKILL) in the middle of a burst, restarted, and the workload is scaled
/// up and down around it. Every bind the test saw, before, during and after the crash, is
/// counted exactly once.
///
/// The scale-down comes while the restarted tether still counts the binds made before the
/// crash: a pod counted before the crash and deleted since must not look missed (it did, in
/// about half the runs, until the reconcile kept deleted pods in `countedPods` while it runs).
#[tokio::test]
async fn binds_before_during_and_after_a_crash_add_up_exactly() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "crash").await?;
    let nodes = TestNodes::create(&client, "crash", 4, "32", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start("crash-1", &proxy).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 120, "100m").await?;
    ledger.wait_at_least(30, TIMEOUT).await?;
    tether.kill()?;
    let at_crash = ledger.len();

    let tether = OwnTether::start("crash-2", &proxy).await?;
    web.wait_all_bound(120, TIMEOUT).await?;
    web.scale(40).await?;
    web.wait_all_bound(40, TIMEOUT).await?;
    web.scale(100).await?;
    web.wait_all_bound(100, TIMEOUT).await?;
    let status = web.assert_history_matches(&ledger, TIMEOUT).await?;
    println!(
        "{} binds seen ({at_crash} before the crash); scheduleCount {}",
        ledger.len(),
        status.schedule_count
    );
    assert!(
        ledger.len() >= 180,
        "the churn made new binds after the crash"
    );
    assert_within_allocatable(&client, &nodes).await?;

    web.delete_profile()?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

/// `component` is killed (SIGKILL) while 500 pods are being scheduled and comes back after
/// `down`. The nodes hold exactly 500 such pods, so a pod counted twice in tether's cache would
/// leave another pending. Every pod ends bound, no node holds more than it can, tether keeps
/// running, and the history equals the binds the test saw.
async fn five_hundred_pods_through_a_crash_of(component: &str) -> anyhow::Result<()> {
    const REPLICAS: usize = 500;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "crash-cp").await?;
    let nodes = TestNodes::create(&client, "crash-cp", 5, "10", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start(&format!("crash-{component}"), &proxy).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", REPLICAS, "100m").await?;
    ledger.wait_at_least(50, TIMEOUT).await?;

    let crashed = component.to_string();
    tokio::task::spawn_blocking(move || restart(&crashed, Stop::Kill, Duration::from_secs(5)))
        .await??;
    let at_return = ledger.len();

    // Every watch is back soon after the API server's return (tether's /readyz says so), and
    // the profile controller serves a profile created then within that time.
    let started = std::time::Instant::now();
    let within = |limit: Duration| limit.saturating_sub(started.elapsed());
    let probe = format!("probe-{}", unique_suffix());
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            &json!({"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
                "metadata": {"name": probe}, "spec": {"schedulerName": format!("{probe}-sched")}})
            .to_string(),
        ),
    )?;
    let last_readyz = std::cell::RefCell::new(None);
    wait_for(
        "every watch of tether current",
        within(BACK_WITHIN),
        || async {
            let body = tether.readyz()?;
            last_readyz.replace(body.clone());
            Ok(body.filter(|body| body.trim() == "ok"))
        },
    )
    .await
    .with_context(|| format!("tether's /readyz said last: {:?}", last_readyz.borrow()))?;
    let watches_back = started.elapsed();
    wait_for("the new profile Ready", within(BACK_WITHIN), || async {
        let ready = kubectl_ok(
            &[
                "get",
                "sp",
                &probe,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
        )?;
        Ok((ready == "True").then_some(()))
    })
    .await?;
    println!(
        "{component} back: {at_return} of {REPLICAS} pods bound then; every watch current {:.1}s later, a new profile Ready {:.1}s later",
        watches_back.as_secs_f64(),
        started.elapsed().as_secs_f64()
    );
    let mut spec = json!({"schedulerName": format!("{probe}-sched"), "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    apply(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "probe", "namespace": ns.name}, "spec": spec}),
    )?;

    web.wait_all_bound(REPLICAS, Duration::from_secs(120))
        .await?;
    tether_e2e::wait_bound(&client, &ns.name, "probe", TIMEOUT).await?;
    assert_alive(&mut tether);
    // The history equals the binds seen. That may be more than 500: after the outage the
    // ReplicaSet controller, acting on its stale view, can create a pod too many and delete it
    // again, and tether binds what exists.
    let status = web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert!(
        status.schedule_count >= REPLICAS as i64,
        "scheduleCount {} for {REPLICAS} pods",
        status.schedule_count
    );
    assert_within_allocatable(&client, &nodes).await?;

    kubectl_ok(&["delete", "sp", &probe], None)?;
    web.delete_profile()?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn five_hundred_pods_through_a_crash_of_kube_apiserver() -> anyhow::Result<()> {
    five_hundred_pods_through_a_crash_of("kube-apiserver").await
}

#[tokio::test]
async fn five_hundred_pods_through_a_crash_of_etcd() -> anyhow::Result<()> {
    five_hundred_pods_through_a_crash_of("etcd").await
}

/// A pod is deleted while its bind is held in flight, and a node is deleted while binds to it
/// are. The failed binds give back what they reserved: a node that fits exactly one more such
/// pod takes the next one; tether keeps running; no node ends over its capacity.
#[tokio::test]
async fn pods_and_nodes_deleted_mid_bind_give_back_what_they_held() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "midbind").await?;
    let nodes = TestNodes::create(&client, "midbind", 2, "1", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start("midbind", &proxy).await?;
    let scheduler = format!("midbind-{}", unique_suffix());
    apply_profile(&client, &scheduler, json!({"schedulerName": scheduler})).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    // A pod asking for a whole CPU, on one of the two nodes.
    let pod = |name: &str, node: &str| {
        let mut spec = json!({"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]});
        nodes.isolate(&mut spec);
        spec["nodeSelector"]["kubernetes.io/hostname"] = json!(node);
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns.name}, "spec": spec})
    };
    let (first, second) = (nodes.names[0].clone(), nodes.names[1].clone());

    // The bind of `doomed` is held; the pod is deleted meanwhile, so the bind fails.
    let held = proxy.inject(
        Matcher::new(Method::POST, "/pods/doomed/binding"),
        Action::Delay(Duration::from_secs(3)),
        Some(1),
    );
    apply(pod("doomed", &first))?;
    wait_for("the bind of doomed to be held", TIMEOUT, || async {
        Ok((held.hits() == 1).then_some(()))
    })
    .await?;
    pods.delete("doomed", &DeleteParams::default().grace_period(0))
        .await?;
    // The CPU it held on the node is free again once the bind failed.
    apply(pod("after-doomed", &first))?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "after-doomed", TIMEOUT).await?;
    assert_eq!(node, first);

    // Binds to the second node are held; the node is deleted meanwhile.
    let held = proxy.inject(
        Matcher::new(Method::POST, "/pods/orphan/binding"),
        Action::Delay(Duration::from_secs(3)),
        Some(1),
    );
    apply(pod("orphan", &second))?;
    wait_for("the bind of orphan to be held", TIMEOUT, || async {
        Ok((held.hits() == 1).then_some(()))
    })
    .await?;
    Api::<Node>::all(client.clone())
        .delete(&second, &DeleteParams::default())
        .await?;
    // The API server accepts a bind to a node that no longer exists (as it does for
    // kube-scheduler; the pod garbage collector deletes such pods later): what matters is
    // that tether forgets the node and keeps going.
    wait_for("the held bind of orphan to finish", TIMEOUT, || async {
        let bound_or_gone = pods
            .get_opt("orphan")
            .await?
            .is_none_or(|p| p.spec.and_then(|s| s.node_name).is_some());
        Ok(bound_or_gone.then_some(()))
    })
    .await?;

    // The first node is full: a pod for it is refused (had the failed bind of doomed given
    // back its CPU twice, tether would place it there on top of after-doomed)…
    apply(pod("waiting", &first))?;
    wait_for("waiting to be refused for lack of CPU", TIMEOUT, || async {
        let refused = pods
            .get("waiting")
            .await?
            .status
            .and_then(|s| s.conditions)
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.type_ == "PodScheduled"
                        && c.status == "False"
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.contains("Insufficient cpu"))
                })
            });
        Ok(refused.then_some(()))
    })
    .await?;
    // …and bound there once the pod holding the node goes.
    pods.delete("after-doomed", &DeleteParams::default().grace_period(0))
        .await?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "waiting", TIMEOUT).await?;
    assert_eq!(node, first);

    assert_alive(&mut tether);
    assert_within_allocatable(&client, &nodes).await?;

    kubectl_ok(&["delete", "sp", &scheduler], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// Binds never wait behind bookkeeping: with the events budget at one event a second, 60 pods
/// are all bound while only a few of their `Scheduled` events are written (the rest follow at
/// the budget's pace), and the history is exact.
#[tokio::test]
async fn binds_never_wait_behind_the_events_budget() -> anyhow::Result<()> {
    use k8s_openapi::api::events::v1::Event;
    const REPLICAS: usize = 60;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "budget").await?;
    let nodes = TestNodes::create(&client, "budget", 3, "16", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start_with(
        "budget",
        &proxy,
        &["--events-qps", "1", "--events-burst", "1"],
    )
    .await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let started = std::time::Instant::now();
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", REPLICAS, "100m").await?;
    web.wait_all_bound(REPLICAS, TIMEOUT).await?;
    let took = started.elapsed();
    let events: Api<Event> = Api::namespaced(client.clone(), &ns.name);
    let scheduled = events
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .filter(|e| e.reason.as_deref() == Some("Scheduled"))
        .count();
    println!(
        "{REPLICAS} pods bound in {:.1}s; {scheduled} Scheduled events written by then",
        took.as_secs_f64()
    );
    // One a second, and one at once: never more than the seconds elapsed and the burst.
    assert!(
        scheduled < REPLICAS && scheduled as f64 <= took.as_secs_f64() + 2.0,
        "{scheduled} events in {took:?}: the budget holds and binds did not wait for it"
    );
    web.assert_history_matches(&ledger, TIMEOUT).await?;
    assert_alive(&mut tether);

    web.delete_profile()?;
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}

/// Plays virt-controller for VM `vm`: the VirtualMachine, its VMI and the VMI's launcher pod
/// (owned as KubeVirt owns them). Returns the pod's name.
async fn start_vm(
    client: &kube::Client,
    ns: &str,
    vm: &str,
    scheduler: &str,
    nodes: &TestNodes,
) -> anyhow::Result<String> {
    use kube::api::{DynamicObject, PostParams};
    let owned_by = |kind: &str, uid: Option<String>| {
        json!([{"apiVersion": "kubevirt.io/v1", "kind": kind, "name": vm,
                "uid": uid.unwrap_or_default(), "controller": true}])
    };
    let vms: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kubevirt("VirtualMachine"));
    let created = vms
        .create(
            &PostParams::default(),
            &DynamicObject::new(vm, &kubevirt("VirtualMachine")),
        )
        .await?;
    let vmis: Api<DynamicObject> =
        Api::namespaced_with(client.clone(), ns, &kubevirt("VirtualMachineInstance"));
    let mut vmi = DynamicObject::new(vm, &kubevirt("VirtualMachineInstance"));
    vmi.metadata.owner_references =
        serde_json::from_value(owned_by("VirtualMachine", created.metadata.uid))?;
    let vmi = vmis.create(&PostParams::default(), &vmi).await?;
    let mut spec = json!({"schedulerName": scheduler,
        "containers": [{"name": "compute", "image": "virt-launcher"}]});
    nodes.isolate(&mut spec);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"generateName": format!("virt-launcher-{vm}-"), "namespace": ns,
                     "ownerReferences": owned_by("VirtualMachineInstance", vmi.metadata.uid)},
        "spec": spec,
    }))?;
    let pod = Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(pod.metadata.name.unwrap_or_default())
}

/// KubeVirt's CRDs deleted under a running tether whose profile runs StickyNode: a plain pod
/// is bound within 10 s (nothing waits for an API that is gone; before, the VM watches'
/// failures held every pod of every profile). The CRDs come back: a VM started then is served
/// as a VM (its binding is the VirtualMachine's, found through the restored owner watch)
/// without a restart.
#[tokio::test]
async fn kubevirt_removed_and_restored_under_a_running_tether() -> anyhow::Result<()> {
    let client = client().await?;
    let proxy = Proxy::start().await?;
    let tether = OwnTether::start("kubevirt-gone", &proxy).await?;
    let ns = TestNamespace::create(&client, "kv-gone").await?;
    let nodes = TestNodes::create(&client, "kv-gone", 2, "16", |_, _| {}).await?;
    let name = format!("kv-gone-{}", unique_suffix());
    let scheduler = format!("{name}-sched");
    apply_profile(
        &client,
        &name,
        json!({"schedulerName": scheduler,
               "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}}}),
    )
    .await?;
    let crds = tether_e2e::repo_dir().join("e2e/kubevirt/crds.yaml");
    let crds = crds.to_string_lossy();
    let kinds = [
        "crd/virtualmachines.kubevirt.io",
        "crd/virtualmachineinstances.kubevirt.io",
    ];
    kubectl_ok(&["delete", "-f", &crds, "--wait=true"], None)?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut spec = json!({"schedulerName": scheduler,
        "containers": [{"name": "c", "image": "pause"}]});
    nodes.isolate(&mut spec);
    let plain: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "plain", "namespace": ns.name}, "spec": spec}))?;
    let created = std::time::Instant::now();
    pods.create(&Default::default(), &plain).await?;
    tether_e2e::wait_bound(&client, &ns.name, "plain", Duration::from_secs(10)).await?;
    println!(
        "with KubeVirt's CRDs gone, a plain pod was bound {:.1}s after its creation",
        created.elapsed().as_secs_f64()
    );

    kubectl_ok(&["apply", "-f", &crds], None)?;
    let mut wait = vec!["wait", "--for", "condition=established", "--timeout=60s"];
    wait.extend(kinds);
    kubectl_ok(&wait, None)?;
    let pod = start_vm(&client, &ns.name, "fedora", &scheduler, &nodes).await?;
    tether_e2e::wait_bound(&client, &ns.name, &pod, TIMEOUT).await?;
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let binding = wait_for("the VM's binding", TIMEOUT, || async {
        Ok(bindings.get_opt("virtualmachine-fedora").await?)
    })
    .await?;
    assert_eq!(binding.spec.workload_ref.kind, "VirtualMachine");
    let mut tether = tether;
    assert!(
        tether.running(),
        "no restart (log: {})",
        tether.log.display()
    );

    kubectl_ok(&["delete", "sp", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// Puts the ClusterRole `tether` back as it was when dropped.
struct RestoreRole(k8s_openapi::api::rbac::v1::ClusterRole);

impl Drop for RestoreRole {
    fn drop(&mut self) {
        let mut role = self.0.clone();
        role.metadata.resource_version = None;
        role.metadata.managed_fields = None;
        if let Ok(json) = serde_json::to_string(&role) {
            let _ = kubectl_ok(&["replace", "-f", "-"], Some(&json));
        }
    }
}

/// RBAC denies tether one storage kind (CSIStorageCapacity): only the profiles whose plugins
/// read it wait. A profile without the volume plugins binds its pod at once; a profile with
/// them keeps its pod Pending with a condition naming the watch, `/readyz` says which watch is
/// not current, and `tether_watch_current` is 0 for it. Past `--watch-stale-seconds` (20 s
/// here) the wait is loud: `/readyz` answers 503 naming the watch and the API server's
/// refusal, and the profile whose pods wait has `WatchesCurrent=False` naming it (the other
/// profile does not). Once RBAC allows it again, the watch lists, the waiting pod is bound and
/// the condition goes, without a restart.
#[tokio::test]
async fn a_storage_watch_rbac_denies_holds_back_only_the_profiles_that_need_it()
-> anyhow::Result<()> {
    use k8s_openapi::api::rbac::v1::ClusterRole;
    let client = client().await?;
    let roles: Api<ClusterRole> = Api::all(client.clone());
    let original = roles.get("tether").await?;
    let restore = RestoreRole(original.clone());
    let mut denied = original;
    for rule in denied.rules.iter_mut().flatten() {
        if let Some(resources) = rule.resources.as_mut() {
            resources.retain(|r| r != "csistoragecapacities");
        }
    }
    roles
        .replace("tether", &Default::default(), &denied)
        .await?;
    let proxy = Proxy::start().await?;
    let mut tether =
        OwnTether::start_with("storage-denied", &proxy, &["--watch-stale-seconds=20"]).await?;
    let ns = TestNamespace::create(&client, "storage-denied").await?;
    let nodes = TestNodes::create(&client, "storage-denied", 2, "16", |_, _| {}).await?;
    let suffix = unique_suffix();
    let (plain, volumes) = (format!("plain-{suffix}"), format!("volumes-{suffix}"));
    let disabled: Vec<_> = [
        "VolumeBinding",
        "VolumeRestrictions",
        "VolumeZone",
        "NodeVolumeLimits",
    ]
    .iter()
    .map(|name| json!({"name": name}))
    .collect();
    apply_profile(
        &client,
        &plain,
        json!({"schedulerName": plain, "plugins": {"multiPoint": {"disabled": disabled}}}),
    )
    .await?;
    apply_profile(&client, &volumes, json!({"schedulerName": volumes})).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for scheduler in [&plain, &volumes] {
        let mut spec = json!({"schedulerName": scheduler,
            "containers": [{"name": "c", "image": "pause"}]});
        nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": scheduler, "namespace": ns.name}, "spec": spec}))?;
        pods.create(&Default::default(), &pod).await?;
    }
    tether_e2e::wait_bound(&client, &ns.name, &plain, Duration::from_secs(10)).await?;
    let why = wait_for("the waiting pod's condition", TIMEOUT, || async {
        let pod = pods.get(&volumes).await?;
        Ok(pod
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            .and_then(|c| c.message))
    })
    .await?;
    assert!(why.contains("csistoragecapacities watch"), "{why}");
    assert!(
        pods.get(&volumes)
            .await?
            .spec
            .and_then(|s| s.node_name)
            .is_none(),
        "the profile that needs the watch waits"
    );
    // Within the bound the replica is ready and says what is not current; past it, not ready.
    let said = tether.readyz_says();
    assert!(
        said.starts_with("ok (not current: csistoragecapacities")
            || said.starts_with("the csistoragecapacities watch has not been current"),
        "{said}"
    );
    let loud = wait_for("/readyz to fail naming the watch", TIMEOUT, || async {
        let said = tether.readyz_says();
        Ok((tether.readyz()?.is_none()
            && said.starts_with("the csistoragecapacities watch has not been current"))
        .then_some(said))
    })
    .await?;
    assert!(
        loud.contains("forbidden"),
        "the API server's refusal: {loud}"
    );
    let profiles: Api<tether::api::SchedulingProfile> = Api::all(client.clone());
    let watches_current = |name: String| {
        let profiles = profiles.clone();
        async move {
            let p = profiles.get(&name).await?;
            anyhow::Ok(
                p.status
                    .unwrap_or_default()
                    .conditions
                    .into_iter()
                    .find(|c| c.type_ == "WatchesCurrent"),
            )
        }
    };
    let said = wait_for(
        "the waiting profile's WatchesCurrent=False",
        TIMEOUT,
        || {
            let volumes = volumes.clone();
            let watches_current = &watches_current;
            async move {
                Ok(watches_current(volumes)
                    .await?
                    .filter(|c| c.status == "False"))
            }
        },
    )
    .await?;
    assert_eq!(said.reason, "WatchStale");
    assert!(
        said.message.contains("csistoragecapacities"),
        "{}",
        said.message
    );
    assert!(
        watches_current(plain.clone()).await?.is_none(),
        "a profile that does not need the watch says nothing of it"
    );
    let text = std::process::Command::new("curl")
        .args(["-sf", &format!("http://{}/metrics", tether.metrics)])
        .output()?;
    let metrics = String::from_utf8_lossy(&text.stdout);
    assert!(
        metrics
            .lines()
            .any(|l| l == r#"tether_watch_current{watch="csistoragecapacities"} 0"#),
        "tether_watch_current says which watch waits"
    );

    drop(restore);
    tether_e2e::wait_bound(&client, &ns.name, &volumes, TIMEOUT).await?;
    wait_for(
        "the condition gone once the watch is current",
        TIMEOUT,
        || {
            let volumes = volumes.clone();
            let watches_current = &watches_current;
            async move { Ok(watches_current(volumes).await?.is_none().then_some(())) }
        },
    )
    .await?;
    assert!(tether.readyz()?.is_some(), "ready again");
    assert!(
        tether.running(),
        "no restart (log: {})",
        tether.log.display()
    );
    assert!(tether.healthz()?.is_some());

    kubectl_ok(&["delete", "sp", &plain, &volumes], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// When the test first saw each pod, and when it first saw it `PodScheduled=False`.
#[derive(Default)]
struct Reported {
    created: Option<k8s_openapi::jiff::Timestamp>,
    unschedulable: Option<k8s_openapi::jiff::Timestamp>,
    deleted: bool,
}

/// 2,000 pods that fit nowhere, and churn (pods deleted and recreated by their ReplicaSet)
/// for a minute: every pod's `PodScheduled=False` is written within 30 s of its creation (the
/// test's own watch is the ground truth: its first sight of the condition against the pod's
/// creationTimestamp, both on the API server's clock), and tether's memory holds flat through
/// the churn (the failure reports are one entry per pod, not a task per attempt).
#[tokio::test]
async fn two_thousand_pods_that_fit_nowhere_each_get_their_condition_in_time() -> anyhow::Result<()>
{
    use futures::StreamExt;
    use kube::runtime::watcher;
    const PODS: usize = 2000;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "unfit").await?;
    let nodes = TestNodes::create(&client, "unfit", 2, "2", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start("unfit", &proxy).await?;

    let seen = Arc::new(Mutex::new(BTreeMap::<String, Reported>::new()));
    let watch = {
        let (seen, pods) = (
            seen.clone(),
            Api::<Pod>::namespaced(client.clone(), &ns.name),
        );
        tokio::spawn(async move {
            let mut events = std::pin::pin!(watcher::watcher(pods, Default::default()));
            while let Some(event) = events.next().await {
                let (pod, deleted) = match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => (p, false),
                    Ok(watcher::Event::Delete(p)) => (p, true),
                    _ => continue,
                };
                let now = k8s_openapi::jiff::Timestamp::now();
                let failed = pod
                    .status
                    .as_ref()
                    .and_then(|s| s.conditions.as_ref())
                    .is_some_and(|cs| {
                        cs.iter()
                            .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                    });
                let mut seen = seen.lock().unwrap_or_else(|e| e.into_inner());
                let entry = seen
                    .entry(pod.metadata.uid.clone().unwrap_or_default())
                    .or_default();
                entry.created =
                    entry
                        .created
                        .or(pod.metadata.creation_timestamp.as_ref().map(|t| t.0));
                if failed && entry.unschedulable.is_none() {
                    entry.unschedulable = Some(now);
                }
                entry.deleted |= deleted;
            }
        })
    };
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "unfit", PODS, "64").await?;
    let all_reported = |seen: &BTreeMap<String, Reported>| {
        seen.values()
            .filter(|r| !r.deleted && r.unschedulable.is_some())
            .count()
            >= PODS
    };
    wait_for(
        "every pod reported unschedulable",
        Duration::from_secs(180),
        || async {
            Ok(all_reported(&seen.lock().unwrap_or_else(|e| e.into_inner())).then_some(()))
        },
    )
    .await?;
    let before_churn = tether.rss_bytes()?;

    // Churn: for a minute, 20 pods deleted every 2 s (their ReplicaSet makes new ones).
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let churn_ends = std::time::Instant::now() + Duration::from_secs(60);
    let mut round = 0usize;
    while std::time::Instant::now() < churn_ends {
        let listed = pods.list(&ListParams::default().limit(500)).await?;
        for pod in listed.items.iter().skip(round * 20 % 480).take(20) {
            let _ = pods
                .delete(&pod.name_any(), &DeleteParams::default().grace_period(0))
                .await;
        }
        round += 1;
        // The churn's pace, not a wait for anything.
        tokio::time::sleep(Duration::from_secs(2)).await;
    }
    wait_for(
        "every pod after the churn reported",
        Duration::from_secs(60),
        || async {
            Ok(all_reported(&seen.lock().unwrap_or_else(|e| e.into_inner())).then_some(()))
        },
    )
    .await?;
    let after_churn = tether.rss_bytes()?;
    watch.abort();

    let seen = std::mem::take(&mut *seen.lock().unwrap_or_else(|e| e.into_inner()));
    let mut late = Vec::new();
    let mut slowest = 0.0f64;
    for (uid, r) in seen.iter() {
        let (Some(created), Some(reported)) = (r.created, r.unschedulable) else {
            // Deleted by the churn before its report: nothing to wait for.
            anyhow::ensure!(r.deleted, "pod {uid} never reported unschedulable");
            continue;
        };
        let took = reported.duration_since(created).as_secs_f64();
        slowest = slowest.max(took);
        if took > 30.0 {
            late.push((uid.clone(), took));
        }
    }
    println!(
        "{} pods seen; the slowest PodScheduled=False came {slowest:.1}s after its pod; RSS {} MiB before the churn, {} MiB after",
        seen.len(),
        before_churn >> 20,
        after_churn >> 20
    );
    assert!(late.is_empty(), "written more than 30 s late: {late:?}");
    assert!(
        after_churn <= before_churn + before_churn / 4 + (16 << 20),
        "memory grew through the churn: {before_churn} to {after_churn} bytes"
    );
    assert!(tether.running());

    web.delete_profile()?;
    nodes.delete().await?;
    ns.delete().await
}

/// A preemptor is not tried again while its preemption is carried out (kube-scheduler v1.37
/// holds it at PreEnqueue, "waiting for the preemption for this pod to be finished"): the
/// victim's deletion is held for 3 s, and meanwhile a bound pod elsewhere is deleted, an event
/// that sends pods waiting for CPU back to be tried. The preemptor is not tried then (a retry
/// would only find its victim still there, and write "not eligible due to a terminating pod on
/// the nominated node" over its status); it is bound where its victim was once the victim is
/// gone. Every state of the preemptor is read from this test's own watch.
#[tokio::test]
async fn a_preemptor_is_not_tried_again_while_its_evictions_are_carried_out() -> anyhow::Result<()>
{
    use futures::StreamExt;
    use kube::runtime::watcher;

    let client = client().await?;
    let ns = TestNamespace::create(&client, "preempting").await?;
    let nodes = TestNodes::create(&client, "preempting", 2, "4", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let mut tether = OwnTether::start("preempting", &proxy).await?;
    let suffix = unique_suffix();
    let scheduler = format!("preempting-{suffix}");
    let (low, high) = (
        format!("preempting-{suffix}-low"),
        format!("preempting-{suffix}-high"),
    );
    for (class, value) in [(&low, 0), (&high, 1000)] {
        apply(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
            "metadata": {"name": class}, "value": value}),
        )?;
    }
    apply_profile(&client, &scheduler, json!({"schedulerName": scheduler})).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod = |name: &str, class: &str, cpu: &str, node: Option<&str>| {
        let mut spec = json!({"schedulerName": scheduler, "priorityClassName": class,
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]});
        nodes.isolate(&mut spec);
        if let Some(node) = node {
            spec["nodeName"] = json!(node);
        }
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns.name}, "spec": spec})
    };
    // The victim fills the first node; the second is full of pods as important as the
    // preemptor (never victims), one of them the bystander deleted later.
    apply(pod("victim", &low, "4", Some(&nodes.names[0])))?;
    apply(pod("filler", &high, "3500m", Some(&nodes.names[1])))?;
    apply(pod("bystander", &high, "500m", Some(&nodes.names[1])))?;

    let messages: Arc<Mutex<Vec<String>>> = Arc::default();
    let record = messages.clone();
    let watch = tokio::spawn(
        watcher::watcher(
            pods.clone(),
            watcher::Config::default().fields("metadata.name=vip"),
        )
        .for_each(move |event| {
            if let Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) = event {
                let message = p
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .into_iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
                    .and_then(|c| c.message);
                let mut seen = record.lock().unwrap_or_else(|p| p.into_inner());
                if let Some(m) = message
                    && seen.last() != Some(&m)
                {
                    seen.push(m);
                }
            }
            futures::future::ready(())
        }),
    );
    let held = proxy.inject(
        Matcher::new(
            Method::DELETE,
            &format!("/namespaces/{}/pods/victim", ns.name),
        ),
        Action::Delay(Duration::from_secs(3)),
        Some(1),
    );
    apply(pod("vip", &high, "4", None))?;
    wait_for("the victim's deletion to be held", TIMEOUT, || async {
        Ok((held.hits() == 1).then_some(()))
    })
    .await?;
    pods.delete("bystander", &DeleteParams::default().grace_period(0))
        .await?;
    let node = tether_e2e::wait_bound(&client, &ns.name, "vip", TIMEOUT).await?;
    watch.abort();
    assert_eq!(node, nodes.names[0], "bound where its victim was");
    let messages = messages.lock().unwrap_or_else(|p| p.into_inner()).clone();
    assert_eq!(
        messages.len(),
        1,
        "one failed attempt (the one that preempted), none while its eviction ran: {messages:#?} (tether's log: {})",
        tether.log.display()
    );
    assert!(
        messages[0].contains("preempting 1 victims"),
        "{messages:#?}"
    );

    assert_alive(&mut tether);
    kubectl_ok(&["delete", "sp", &scheduler], None)?;
    for class in [&low, &high] {
        kubectl_ok(
            &["delete", "priorityclass", class, "--ignore-not-found"],
            None,
        )?;
    }
    nodes.delete().await?;
    ns.delete().await
}
