//! High availability: two tether replicas of the test's own, each behind its own proxy, compete
//! for the Lease `tether` in tether-system as the deploy/ ServiceAccount. One leads and binds;
//! the other stands by and writes nothing; when the leader dies or is cut off, the standby takes
//! over. `make e2e` runs these alone, after the shared tether has stopped.

use anyhow::Context;
use std::time::{Duration, Instant};

use http::Method;
use serde_json::json;
use tether_e2e::faults::{Action, Fault, Matcher, OwnTether, Proxy, kubeconfig_with_token};
use tether_e2e::ground_truth::{
    BindLedger, HistoryWorkload, assert_within_allocatable, within_allocatable,
};
use tether_e2e::{
    TestNamespace, TestNodes, VOLUME_OF, apply, client, delete_labelled, kubectl_ok, unique_suffix,
    wait_bound, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(120);
/// kube-scheduler's defaults, which tether's flags default to.
const LEASE: Duration = Duration::from_secs(15);
const RETRY: Duration = Duration::from_secs(2);
/// A standby sees the dead leader's last renewal within a retry period (plus its 20 % jitter)
/// and takes the Lease once it has not changed for a lease duration, at its next try.
const TAKEOVER_WITHIN: Duration =
    Duration::from_millis(LEASE.as_millis() as u64 + 2 * RETRY.as_millis() as u64 * 12 / 10);

/// A replica that takes part in the election, named `name`.
async fn replica(name: &str, proxy: &Proxy) -> anyhow::Result<OwnTether> {
    OwnTether::start_with(name, proxy, &["--leader-elect"]).await
}

/// Waits (at most `within`) until `tether` says it leads.
async fn until_leads(tether: &OwnTether, within: Duration) -> anyhow::Result<()> {
    let what = format!("the replica logging to {} to lead", tether.log.display());
    wait_for(&what, within, || async {
        Ok(tether.leads()?.then_some(()))
    })
    .await
}

/// The HTTP status `/explain` answers on `tether` for a request without a token: a standby
/// says it is one (503) before anything else, the leader asks for a token (401).
fn explain_status(tether: &OwnTether) -> anyhow::Result<String> {
    let out = std::process::Command::new("curl")
        .args([
            "-s",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "5",
        ])
        .arg(format!("http://{}/explain/default/any", tether.metrics))
        .output()?;
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Counts the writes a replica makes through its proxy (binds, StickyBindings, status, events),
/// Lease requests left out.
fn writes(proxy: &Proxy) -> Vec<Fault> {
    [Method::POST, Method::PUT, Method::PATCH]
        .into_iter()
        .map(|method| {
            proxy.inject(
                Matcher {
                    method: Some(method),
                    ..Matcher::everything()
                },
                Action::Delay(Duration::ZERO),
                None,
            )
        })
        .collect()
}

fn write_count(faults: &[Fault]) -> u64 {
    faults
        .iter()
        .flat_map(|f| f.hits_by_path())
        .filter(|(path, _)| !path.contains("/leases"))
        .map(|(_, hits)| hits)
        .sum()
}

/// A namespace and `count` nodes for test `name`, two proxies, and the first replica,
/// `<name>-a` behind the first proxy, leading.
async fn first_replica_leading(
    client: &kube::Client,
    name: &str,
    count: usize,
    cpu: &str,
) -> anyhow::Result<(TestNamespace, TestNodes, [Proxy; 2], OwnTether)> {
    OwnTether::fresh_lease()?;
    let ns = TestNamespace::create(client, name).await?;
    let nodes = TestNodes::create(client, name, count, cpu, |_, _| {}).await?;
    let proxies = [Proxy::start().await?, Proxy::start().await?];
    let a = replica(&format!("{name}-a"), &proxies[0]).await?;
    until_leads(&a, TIMEOUT).await?;
    Ok((ns, nodes, proxies, a))
}

/// 300 pods of two workloads whose history is kept are being scheduled when the leader is
/// SIGKILLed. The standby, which wrote nothing until then, takes over within the lease duration
/// (plus its polling), binds the rest, and every pod is bound once with its history exact.
#[tokio::test]
async fn the_standby_takes_over_when_the_leader_is_killed() -> anyhow::Result<()> {
    let client = client().await?;
    let (ns, nodes, [_proxy_a, proxy_b], mut a) =
        first_replica_leading(&client, "ha-kill", 4, "32").await?;
    let standby_writes = writes(&proxy_b);
    let mut b = replica("ha-kill-b", &proxy_b).await?;
    assert!(!b.leads()?, "one leader at a time");
    assert_eq!(
        (explain_status(&a)?, explain_status(&b)?),
        ("401".to_string(), "503".to_string()),
        "only the leader explains"
    );

    let web_ledger = BindLedger::start(&client, &ns.name, "app=web");
    let api_ledger = BindLedger::start(&client, &ns.name, "app=api");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 200, "100m").await?;
    let api = HistoryWorkload::create(&client, &ns.name, &nodes, "api", 100, "100m").await?;
    web_ledger.wait_at_least(40, TIMEOUT).await?;
    assert_eq!(
        write_count(&standby_writes),
        0,
        "the standby wrote nothing: {:?}",
        standby_writes
            .iter()
            .flat_map(|f| f.hits_by_path())
            .collect::<Vec<_>>()
    );
    a.kill()?;
    let killed = Instant::now();
    let at_kill = web_ledger.len() + api_ledger.len();
    until_leads(&b, TAKEOVER_WITHIN).await?;
    let takeover = killed.elapsed();
    println!(
        "{at_kill} of 300 pods bound when the leader was killed; the standby led {:.1}s later",
        takeover.as_secs_f64()
    );

    web.wait_all_bound(200, TIMEOUT).await?;
    api.wait_all_bound(100, TIMEOUT).await?;
    assert!(
        b.running(),
        "the new leader runs (log: {})",
        b.log.display()
    );
    web.assert_history_matches(&web_ledger, TIMEOUT).await?;
    api.assert_history_matches(&api_ledger, TIMEOUT).await?;
    assert_within_allocatable(&client, &nodes).await?;
    assert_eq!(b.metric_sum("leader_election_master_status")?, 1.0);

    web.delete_profile()?;
    api.delete_profile()?;
    drop(b);
    nodes.delete().await?;
    ns.delete().await
}

/// The leader's connection to the API server is cut: it cannot renew the Lease, so it stops
/// leading at the renew deadline (10 s) and stands by without exiting (kubelet's restart
/// backoff never delays the next leader); the standby takes over and binds the pods created
/// meanwhile. Once the cut mends, the old leader is a ready standby with fresh caches.
#[tokio::test]
async fn a_leader_cut_off_stands_down_and_the_standby_takes_over() -> anyhow::Result<()> {
    let client = client().await?;
    let (ns, nodes, [proxy_a, proxy_b], mut a) =
        first_replica_leading(&client, "ha-cut", 2, "16").await?;
    let mut b = replica("ha-cut-b", &proxy_b).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 10, "100m").await?;
    web.wait_all_bound(10, TIMEOUT).await?;

    proxy_a.cut();
    let cut = Instant::now();
    wait_for("the cut-off leader to stop leading", LEASE, || async {
        Ok((a.log_lines_with("stopped leading")? > 0).then_some(()))
    })
    .await?;
    let stopped = cut.elapsed();
    web.scale(30).await?;
    until_leads(&b, TAKEOVER_WITHIN).await?;
    println!(
        "the cut-off leader stopped leading {:.1}s after the cut; the standby led {:.1}s after the cut",
        stopped.as_secs_f64(),
        cut.elapsed().as_secs_f64()
    );
    assert!(
        a.running(),
        "the old leader stands by, it does not exit (log: {})",
        a.log.display()
    );
    web.wait_all_bound(30, TIMEOUT).await?;
    web.assert_history_matches(&ledger, TIMEOUT).await?;

    proxy_a.restore();
    wait_for("the old leader to be a ready standby", TIMEOUT, || async {
        Ok(a.readyz()?
            .filter(|body| body.lines().any(|l| l.starts_with("standby"))))
    })
    .await
    .with_context(|| format!("its /readyz says: {}", a.readyz_says()))?;
    assert!(
        a.healthz()?.is_some(),
        "healthy: losing the Lease is no fault"
    );
    assert!(a.running() && b.running());
    assert!(b.leads()? && !a.leads()?, "one leader at a time");

    web.delete_profile()?;
    drop(b);
    nodes.delete().await?;
    ns.delete().await
}

/// Three API brownouts of 12 s each, 60 s apart, on the leader's Lease requests (answered 503):
/// each time the leader stops leading at its renew deadline, and a replica (it again once its
/// Lease answers, or the standby) leads within 20 s of the brownout's start. Neither process
/// exits, both stay healthy, and the pods created after each brownout are bound with history
/// exact.
#[tokio::test]
async fn lease_brownouts_hand_over_without_a_restart() -> anyhow::Result<()> {
    let client = client().await?;
    let (ns, nodes, proxies, a) = first_replica_leading(&client, "ha-brown", 2, "16").await?;
    let b = replica("ha-brown-b", &proxies[1]).await?;
    let mut tethers = [a, b];
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 10, "100m").await?;
    web.wait_all_bound(10, TIMEOUT).await?;

    for round in 1..=3usize {
        let leader = wait_for("a replica to lead", TIMEOUT, || async {
            Ok(tethers
                .iter()
                .map(OwnTether::leads)
                .collect::<anyhow::Result<Vec<_>>>()?
                .iter()
                .position(|l| *l))
        })
        .await?;
        let stood_down = tethers[leader].log_lines_with("stopped leading")?;
        let brownout = proxies[leader].inject(
            Matcher {
                method: None,
                path_contains: "/leases/tether".into(),
                watches: false,
            },
            Action::Answer(503),
            None,
        );
        let began = Instant::now();
        // The brownout lasts 12 s: this wait is its length, not a guess at anything.
        tokio::time::sleep(Duration::from_secs(12)).await;
        proxies[leader].remove(&brownout);
        assert!(
            tethers[leader].log_lines_with("stopped leading")? > stood_down,
            "round {round}: the leader stopped leading during the brownout (log: {})",
            tethers[leader].log.display()
        );
        let next = wait_for(
            "a replica to lead again",
            Duration::from_secs(20).saturating_sub(began.elapsed()),
            || async {
                Ok(tethers
                    .iter()
                    .map(OwnTether::leads)
                    .collect::<anyhow::Result<Vec<_>>>()?
                    .iter()
                    .position(|l| *l))
            },
        )
        .await?;
        println!(
            "brownout {round}: replica {} led again {:.1}s after it began (replica {leader} led before)",
            ["a", "b"][next],
            began.elapsed().as_secs_f64()
        );
        for tether in &mut tethers {
            assert!(
                tether.running(),
                "no process exits (log: {})",
                tether.log.display()
            );
            assert!(tether.healthz()?.is_some(), "and both stay healthy");
        }
        web.scale(10 + 10 * round).await?;
        web.wait_all_bound(10 + 10 * round, TIMEOUT).await?;
        if round < 3 {
            // Brownouts start 60 s apart.
            tokio::time::sleep(Duration::from_secs(60).saturating_sub(began.elapsed())).await;
        }
    }
    web.assert_history_matches(&ledger, TIMEOUT).await?;
    // Each lost term freed its session: its caches, queue, owner cache and bindings are gone
    // from memory (each brownout would otherwise keep one more copy of the cluster, and
    // repeated brownouts end in an OOM kill). Binding cycles and writes of an ended term let
    // go within a minute.
    for (tether, name) in tethers.iter().zip(["a", "b"]) {
        let held = wait_for(
            &format!("replica {name}'s ended sessions freed"),
            Duration::from_secs(90),
            || async {
                let held = tether.metric_sum("tether_sessions_held")?;
                Ok((held <= 1.0).then_some(held))
            },
        )
        .await?;
        println!("replica {name}: {held} session(s) held after three brownouts");
    }

    web.delete_profile()?;
    drop(tethers);
    nodes.delete().await?;
    ns.delete().await
}

/// SIGTERM to the leader: it finishes its binds, releases the Lease and exits 0, and the standby
/// takes over at its next try (a retry period), not a lease duration later.
#[tokio::test]
async fn a_leader_shut_down_releases_the_lease_for_the_standby() -> anyhow::Result<()> {
    let client = client().await?;
    let (ns, nodes, [_proxy_a, proxy_b], mut a) =
        first_replica_leading(&client, "ha-term", 2, "16").await?;
    let b = replica("ha-term-b", &proxy_b).await?;
    let ledger = BindLedger::start(&client, &ns.name, "app=web");
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 10, "100m").await?;
    web.wait_all_bound(10, TIMEOUT).await?;

    let stopped = Instant::now();
    assert!(
        a.terminate(Duration::from_secs(30)).await?,
        "the leader exits 0 after SIGTERM (log: {})",
        a.log.display()
    );
    let released = std::fs::read_to_string(&a.log)?.contains("released the Lease");
    assert!(
        released,
        "the leader released the Lease (log: {})",
        a.log.display()
    );
    // A standby tries every retry period (with up to 20 % jitter): well before a lease duration.
    until_leads(&b, LEASE - RETRY).await?;
    println!(
        "the standby led {:.1}s after SIGTERM to the leader",
        stopped.elapsed().as_secs_f64()
    );
    web.scale(20).await?;
    web.wait_all_bound(20, TIMEOUT).await?;
    web.assert_history_matches(&ledger, TIMEOUT).await?;

    web.delete_profile()?;
    drop(b);
    nodes.delete().await?;
    ns.delete().await
}

/// A replica whose Lease cannot be created (here its namespace does not exist, as when the
/// chart's namespace was not made) stands by for good, and says why where the person who
/// installed it looks: a WARN line in its log, its `/readyz` body, and
/// `tether_lease_unreachable`.
#[tokio::test]
async fn a_replica_that_cannot_take_its_lease_says_why() -> anyhow::Result<()> {
    let proxy = Proxy::start().await?;
    let tether = OwnTether::start_with(
        "ha-no-lease",
        &proxy,
        &[
            "--leader-elect",
            "--leader-elect-resource-namespace",
            "tether-no-such-namespace",
        ],
    )
    .await?;
    let why = "cannot read or take the Lease tether-no-such-namespace/tether";
    let body = wait_for(
        "/readyz to say why the replica stands by",
        TIMEOUT,
        || async { Ok(tether.readyz()?.filter(|b| b.contains(why))) },
    )
    .await?;
    // The deploy/ ServiceAccount may use Leases only in tether-system: the API server says so.
    assert!(
        body.contains("standby (") && body.contains("forbidden"),
        "{body}"
    );
    assert_eq!(tether.metric_sum("tether_lease_unreachable")?, 1.0);
    let log = std::fs::read_to_string(&tether.log)?;
    assert!(
        log.lines().any(|l| l.contains("WARN") && l.contains(why)),
        "a WARN line says why (log: {})",
        tether.log.display()
    );
    assert!(!tether.leads()?);
    Ok(())
}

/// The renew deadline (kube-scheduler's default, tether's flag default).
const RENEW_DEADLINE: Duration = Duration::from_secs(10);

/// Pods of low priority leave two CPUs of two 4-CPU nodes free. Then every Lease request and
/// every write of the leader is held at its proxy for 25 s, longer than its term, and passed on
/// after that even when the leader has given up on it (an API server that queued it), while six
/// pods of high priority arrive: four that can run only by preempting, and two whose claims wait
/// for their first consumer (local volumes, two per node). The old leader's term ends at most a
/// renew deadline after the hold began; from then on it sends not one write (the proxy's own log,
/// by when each request was received). The standby takes over and preempts. What the old leader
/// had sent before its deadline lands late, and harms nothing: no node is ever over-committed
/// (the test's own arithmetic, sampled twice a second throughout), each victim is deleted once
/// and by one leader, no bound pod carries
/// `PodScheduled=False`, each claim is bound to a volume on its pod's node, the nodes end
/// exactly full, and the history matches the test's own ledger.
#[tokio::test]
async fn a_leader_held_past_its_term_writes_nothing_after_it() -> anyhow::Result<()> {
    let client = client().await?;
    let (ns, nodes, [proxy_a, proxy_b], mut a) =
        first_replica_leading(&client, "ha-held", 2, "4").await?;
    let mut b = replica("ha-held-b", &proxy_b).await?;
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(
            r#"{"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                "metadata": {"name": "e2e-ha-high"}, "value": 1000000}"#,
        ),
    )?;
    let class = format!("ha-held-{}", unique_suffix());
    apply(json!({
        "apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
        "metadata": {"name": class}, "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer",
    }))?;
    for (i, node) in nodes.names.iter().enumerate() {
        for j in 0..2 {
            apply(json!({
                "apiVersion": "v1", "kind": "PersistentVolume",
                "metadata": {"name": format!("{class}-{i}-{j}"), "labels": {VOLUME_OF: class}},
                "spec": {
                    "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
                    "persistentVolumeReclaimPolicy": "Retain", "storageClassName": class,
                    "local": {"path": format!("/mnt/{class}-{i}-{j}")},
                    "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": [node]}]}]}},
                },
            }))?;
        }
    }
    let disks = ["disk-0", "disk-1"];
    for disk in disks {
        apply(json!({
            "apiVersion": "v1", "kind": "PersistentVolumeClaim",
            "metadata": {"name": disk, "namespace": ns.name},
            "spec": {"accessModes": ["ReadWriteOnce"], "storageClassName": class,
                     "resources": {"requests": {"storage": "1Gi"}}},
        }))?;
    }
    let web_ledger = BindLedger::start(&client, &ns.name, "app=web");
    let vip_ledger = BindLedger::start(&client, &ns.name, "app=vip");
    // 6 pods of one CPU on two nodes of four: two CPUs free.
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 6, "1").await?;
    web.wait_all_bound(6, TIMEOUT).await?;
    let vip = HistoryWorkload::create(&client, &ns.name, &nodes, "vip", 0, "1").await?;
    kubectl_ok(
        &[
            "patch",
            "deployment",
            "vip",
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            r#"{"spec": {"template": {"spec": {"priorityClassName": "e2e-ha-high"}}}}"#,
        ],
        None,
    )?;

    let overcommits = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sampler = {
        let (client, overcommits) = (client.clone(), overcommits.clone());
        let names = nodes.names.clone();
        tokio::spawn(async move {
            loop {
                if let Err(e) = within_allocatable(&client, &names).await {
                    let text = e.to_string();
                    if text.contains("over-committed") || text.contains("more than it allows") {
                        overcommits
                            .lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(text);
                    }
                }
                tokio::time::sleep(Duration::from_millis(500)).await;
            }
        })
    };

    let held = Duration::from_secs(25);
    let hold = |matcher: Matcher| proxy_a.inject(matcher, Action::Hold(held), None);
    let mut faults = vec![hold(Matcher {
        method: None,
        path_contains: "/leases/tether".into(),
        watches: false,
    })];
    for method in [Method::POST, Method::PUT, Method::PATCH, Method::DELETE] {
        faults.push(hold(Matcher {
            method: Some(method),
            path_contains: String::new(),
            watches: false,
        }));
    }
    let held_from = Instant::now();
    vip.scale(4).await?;
    for disk in disks {
        let mut spec = json!({"schedulerName": "tether-scheduler", "priorityClassName": "e2e-ha-high",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": disk}}]});
        nodes.isolate(&mut spec);
        apply(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": disk, "namespace": ns.name, "labels": {"app": "disk"}}, "spec": spec}))?;
    }
    until_leads(&b, TAKEOVER_WITHIN + RETRY).await?;
    let took_over = held_from.elapsed();
    vip.wait_all_bound(4, TIMEOUT).await?;
    let mut placed = std::collections::BTreeMap::new();
    for disk in disks {
        placed.insert(disk, wait_bound(&client, &ns.name, disk, TIMEOUT).await?);
    }
    // Four of web were preempted; their replacements find no room.
    wait_for("two pods of web left bound", TIMEOUT, || async {
        Ok((web.bound_pods().await?.len() == 2).then_some(()))
    })
    .await?;
    // The holds end: what the old leader had sent before its deadline is passed on now.
    let released = held_from + held + Duration::from_secs(1);
    tokio::time::sleep(released.saturating_duration_since(Instant::now())).await;
    for fault in &faults {
        proxy_a.remove(fault);
    }
    web.assert_history_matches(&web_ledger, TIMEOUT).await?;
    vip.assert_history_matches(&vip_ledger, TIMEOUT).await?;
    sampler.abort();

    let term_over = held_from + RENEW_DEADLINE;
    let writes = |proxy: &Proxy| {
        proxy
            .forwarded()
            .into_iter()
            .filter(|f| f.method != Method::GET && !f.path.contains("/leases/"))
            .collect::<Vec<_>>()
    };
    let describe = |f: &tether_e2e::faults::Forwarded| {
        format!(
            "{} {} sent at +{:.1}s, passed on at +{:.1}s",
            f.method,
            f.path,
            f.received
                .saturating_duration_since(held_from)
                .as_secs_f64(),
            f.at.saturating_duration_since(held_from).as_secs_f64()
        )
    };
    let sent_late: Vec<String> = writes(&proxy_a)
        .iter()
        .filter(|f| f.received > term_over)
        .map(describe)
        .collect();
    let landed_late: Vec<String> = writes(&proxy_a)
        .iter()
        .filter(|f| f.at > term_over)
        .map(describe)
        .collect();
    let deletes = |proxy: &Proxy| {
        writes(proxy)
            .into_iter()
            .filter(|f| f.method == Method::DELETE && f.path.contains("/pods/"))
            .map(|f| f.path)
            .collect::<Vec<String>>()
    };
    let (by_a, by_b) = (deletes(&proxy_a), deletes(&proxy_b));
    let mut victims = std::collections::BTreeMap::<&String, usize>::new();
    for path in by_a.iter().chain(&by_b) {
        *victims.entry(path).or_default() += 1;
    }
    let twice: Vec<_> = victims.iter().filter(|(_, n)| **n > 1).collect();
    let pods: kube::Api<k8s_openapi::api::core::v1::Pod> =
        kube::Api::namespaced(client.clone(), &ns.name);
    let listed = pods.list(&Default::default()).await?.items;
    let misreported: Vec<String> = listed
        .iter()
        .filter(|p| p.spec.as_ref().is_some_and(|s| s.node_name.is_some()))
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| {
                    cs.iter()
                        .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                })
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    // The residual risk, shown not hidden: a DisruptionTarget patch the old leader sent in
    // its term and the API server applied late marks a pod nobody evicts (kube-controller-
    // manager clears such a condition after two minutes).
    let marked_alive: Vec<String> = listed
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .is_some_and(|cs| cs.iter().any(|c| c.type_ == "DisruptionTarget"))
        })
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    let claims: kube::Api<k8s_openapi::api::core::v1::PersistentVolumeClaim> =
        kube::Api::namespaced(client.clone(), &ns.name);
    let volumes: kube::Api<k8s_openapi::api::core::v1::PersistentVolume> =
        kube::Api::all(client.clone());
    for disk in disks {
        let node = &placed[disk];
        let volume = wait_for(&format!("claim {disk} bound"), TIMEOUT, || {
            let claims = claims.clone();
            async move {
                let claim = claims.get(disk).await?;
                let bound = claim.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Bound");
                Ok(bound
                    .then(|| claim.spec.and_then(|s| s.volume_name))
                    .flatten())
            }
        })
        .await?;
        let index = nodes
            .names
            .iter()
            .position(|n| n == node)
            .expect("a test node");
        assert!(
            volume.starts_with(&format!("{class}-{index}-")),
            "claim {disk} of a pod on {node} is bound to {volume}, on another node"
        );
        let pv = volumes.get(&volume).await?;
        let claim_ref = pv.spec.and_then(|s| s.claim_ref).and_then(|r| r.name);
        assert_eq!(claim_ref.as_deref(), Some(disk), "{volume} names its claim");
    }
    let cpus_bound: usize = nodes
        .names
        .iter()
        .map(|node| {
            listed
                .iter()
                .filter(|p| p.metadata.deletion_timestamp.is_none())
                .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()) == Some(node))
                .count()
        })
        .sum();
    println!(
        "held at +0s; the standby led at +{:.1}s; victims: {} delete requests by the old leader, {} by the new, {} distinct; {} writes sent after the old leader's term, {} passed on after it (sent before): {landed_late:#?}; pods alive marked DisruptionTarget: {marked_alive:?}",
        took_over.as_secs_f64(),
        by_a.len(),
        by_b.len(),
        victims.len(),
        sent_late.len(),
        landed_late.len(),
    );
    assert!(
        sent_late.is_empty(),
        "the old leader wrote after its term: {sent_late:?}"
    );
    let overcommits = overcommits
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .clone();
    assert!(overcommits.is_empty(), "{overcommits:?}");
    assert!(
        !by_b.is_empty(),
        "the new leader preempted for the pods of high priority"
    );
    assert!(twice.is_empty(), "each victim is deleted once: {twice:?}");
    // Six CPUs asked for, two free: four victims, no more.
    assert_eq!(victims.len(), 4, "the fewest victims: {victims:?}");
    assert!(
        misreported.is_empty(),
        "bound yet PodScheduled=False: {misreported:?}"
    );
    assert_eq!(cpus_bound, 8, "both nodes exactly full, one CPU per pod");
    assert!(a.running() && b.running(), "neither process exits");

    web.delete_profile()?;
    vip.delete_profile()?;
    drop((a, b));
    nodes.delete().await?;
    ns.delete().await?;
    delete_labelled("pv", &class)?;
    kubectl_ok(
        &["delete", "storageclass", &class, "--ignore-not-found"],
        None,
    )?;
    Ok(())
}

/// The address kwok forwards the port 8080 of the pod `tether-system/<pod>` to, as
/// e2e/kwok/stages.yaml (kwok's configuration) says.
fn kwok_forward(pod: &str) -> anyhow::Result<std::net::SocketAddr> {
    let path = tether_e2e::repo_dir().join("e2e/kwok/stages.yaml");
    let text = std::fs::read_to_string(&path)?;
    for doc in tether_e2e::yaml_documents(&text)? {
        let names = &doc["spec"]["selector"]["matchNames"];
        if doc["kind"] == "ClusterPortForward"
            && names.as_array().is_some_and(|n| n.iter().any(|n| n == pod))
        {
            let target = &doc["spec"]["forwards"][0]["target"];
            return Ok(format!(
                "{}:{}",
                target["address"].as_str().unwrap_or_default(),
                target["port"]
            )
            .parse()?);
        }
    }
    anyhow::bail!("{} forwards no port of {pod}", path.display())
}

fn delete_pod_in_tether_system(pod: &str) -> anyhow::Result<()> {
    let args = [
        "-n",
        "tether-system",
        "delete",
        "pod",
        pod,
        "--ignore-not-found",
    ];
    kubectl_ok(&args, None).map(|_| ())
}

/// `tether explain <pod> --token-file <token>` with `kubeconfig` and no `--endpoint`, as a
/// person runs it: explain finds the leader itself. Its stdout, or its stderr as the error.
/// Awaited, not waited on: the replicas' proxies run on the test's runtime, and the leader
/// checks the caller's token through its proxy while explain waits for the answer.
async fn explain_found(
    kubeconfig: &std::path::Path,
    token: &std::path::Path,
    pod: &str,
) -> anyhow::Result<Result<String, String>> {
    let out = tokio::process::Command::new(tether_e2e::tether_bin())
        .args(["explain", pod, "--token-file"])
        .arg(token)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("TETHER_ENDPOINT")
        .env_remove("TETHER_TOKEN_FILE")
        .output()
        .await?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    Ok(if out.status.success() {
        Ok(stdout)
    } else {
        Err(stderr)
    })
}

/// `tether explain` without `--endpoint` finds the leader by its Lease and reaches it through
/// the API server's port-forward to the leader's pod, as the person it serves: a ServiceAccount
/// holding only deploy/'s `tether-explainer` roles (the ClusterRole for what tether checks, the
/// Role in tether-system for the Lease and the forward). kwok plays the kubelet: the pods that
/// stand for the two replicas are forwarded to their `--http-addr`. The standby answers 503, so
/// an answer proves the leader was reached; after the leader shuts down the next call reaches
/// the new one; with no replica left, explain says none leads.
#[tokio::test]
async fn explain_finds_the_leader_by_its_lease() -> anyhow::Result<()> {
    let client = client().await?;
    OwnTether::fresh_lease()?;
    let ns = TestNamespace::create(&client, "ha-explain").await?;
    let nodes = TestNodes::create(&client, "ha-explain", 2, "16", |_, _| {}).await?;
    let [proxy_a, proxy_b] = [Proxy::start().await?, Proxy::start().await?];
    // The replicas' pods, on a fake node: their names are the replicas' identities.
    let pods = ["tether-leader-a", "tether-leader-b"];
    for pod in pods {
        delete_pod_in_tether_system(pod)?;
        apply(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": pod, "namespace": "tether-system"},
            "spec": {
                "nodeName": nodes.names[0],
                // tether-system enforces the restricted Pod Security Standard.
                "securityContext": {"runAsNonRoot": true, "runAsUser": 65532,
                    "seccompProfile": {"type": "RuntimeDefault"}},
                "containers": [{"name": "tether", "image": "tether",
                    "ports": [{"name": "http", "containerPort": 8080}],
                    "securityContext": {"allowPrivilegeEscalation": false,
                        "capabilities": {"drop": ["ALL"]}}}],
            },
        }))?;
    }
    let mut a = OwnTether::start_at(
        "leader-a",
        &proxy_a,
        &["--leader-elect"],
        kwok_forward(pods[0])?,
    )
    .await?;
    until_leads(&a, TIMEOUT).await?;
    let mut b = OwnTether::start_at(
        "leader-b",
        &proxy_b,
        &["--leader-elect"],
        kwok_forward(pods[1])?,
    )
    .await?;
    let web = HistoryWorkload::create(&client, &ns.name, &nodes, "web", 1, "100m").await?;
    web.wait_all_bound(1, TIMEOUT).await?;
    let listed = kubectl_ok(
        &[
            "-n",
            &ns.name,
            "get",
            "pods",
            "-l",
            "app=web",
            "-o",
            "jsonpath={.items[0].metadata.name} {.items[0].spec.nodeName}",
        ],
        None,
    )?;
    let (pod, node) = listed.split_once(' ').context("the workload's pod")?;
    let pod = format!("{}/{pod}", ns.name);

    // The person: a ServiceAccount with the explainer ClusterRole, a kubeconfig of its own and a
    // token for tether's audience.
    let subject = format!("--serviceaccount={}:alice", ns.name);
    kubectl_ok(&["-n", &ns.name, "create", "serviceaccount", "alice"], None)?;
    let binding = format!("{}-alice", ns.name);
    kubectl_ok(
        &[
            "create",
            "clusterrolebinding",
            &binding,
            "--clusterrole=tether-explainer",
            &subject,
        ],
        None,
    )?;
    let dir = tether_e2e::repo_dir().join(format!(".cluster/{}", ns.name));
    std::fs::create_dir_all(&dir)?;
    let (kubeconfig, token) = (dir.join("kubeconfig"), dir.join("token"));
    let api_token = kubectl_ok(&["-n", &ns.name, "create", "token", "alice"], None)?;
    std::fs::write(&kubeconfig, kubeconfig_with_token(api_token.trim())?)?;
    let tether_token = kubectl_ok(
        &[
            "-n",
            &ns.name,
            "create",
            "token",
            "alice",
            "--audience",
            "tether",
        ],
        None,
    )?;
    std::fs::write(&token, tether_token.trim())?;

    // Without the Role in tether-system, the Lease is out of reach, and explain says so.
    let refused = explain_found(&kubeconfig, &token, &pod)
        .await?
        .expect_err("explain needs the Role");
    assert!(
        refused.contains("reading the Lease tether-system/tether") && refused.contains("forbidden"),
        "{refused}"
    );
    kubectl_ok(
        &[
            "-n",
            "tether-system",
            "create",
            "rolebinding",
            &binding,
            "--role=tether-explainer",
            &subject,
        ],
        None,
    )?;

    // The leader answers, whoever it is. RBAC may take a moment to reach the authorizer's cache.
    let explained = async |what: &str| {
        let waited = wait_for(what, TIMEOUT, || async {
            Ok(explain_found(&kubeconfig, &token, &pod).await?.ok())
        })
        .await;
        match waited {
            Ok(answer) => Ok(answer),
            Err(e) => match explain_found(&kubeconfig, &token, &pod).await {
                Ok(Err(said)) => Err(e.context(format!("explain's last words: {said}"))),
                _ => Err(e),
            },
        }
    };
    let first = explained("explain to reach the first leader").await?;
    assert!(first.contains(&format!("Bound to {node}")), "{first}");

    assert!(
        a.terminate(Duration::from_secs(30)).await?,
        "the leader exits 0 (log: {})",
        a.log.display()
    );
    until_leads(&b, TIMEOUT).await?;
    let second = explained("explain to reach the new leader").await?;
    assert!(second.contains(&format!("Bound to {node}")), "{second}");

    // No replica left: the Lease is released, and explain says nobody leads.
    assert!(
        b.terminate(Duration::from_secs(30)).await?,
        "the new leader exits 0 (log: {})",
        b.log.display()
    );
    let none = explain_found(&kubeconfig, &token, &pod)
        .await?
        .expect_err("nobody leads");
    assert!(
        none.contains("no replica of tether holds the Lease tether-system/tether"),
        "{none}"
    );

    kubectl_ok(
        &["-n", "tether-system", "delete", "rolebinding", &binding],
        None,
    )?;
    kubectl_ok(&["delete", "clusterrolebinding", &binding], None)?;
    for pod in pods {
        delete_pod_in_tether_system(pod)?;
    }
    std::fs::remove_dir_all(&dir)?;
    web.delete_profile()?;
    nodes.delete().await?;
    ns.delete().await
}
