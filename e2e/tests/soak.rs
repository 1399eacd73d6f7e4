//! The soak: mixed churn on many nodes for a long while (`make soak`: 30 minutes on 200 nodes;
//! `SOAK_MINUTES` and `SOAK_NODES` change that). tether's memory, its queue and its open
//! watches must stay flat, and every workload's history must equal the binds the test saw.
//! Not part of `make test`: it is ignored unless asked for by name.

use std::fmt::Write as _;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use serde_json::json;
use tether_e2e::faults::{OwnTether, Proxy};
use tether_e2e::ground_truth::{BindLedger, HistoryWorkload, assert_within_allocatable};
use tether_e2e::{TestNamespace, TestNodes, apply, client, repo_dir, wait_for};

fn env_or(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// A small deterministic generator: the churn differs from step to step, not from run to run.
struct Dice(u64);

impl Dice {
    fn roll(&mut self, below: u64) -> u64 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) % below.max(1)
    }
}

/// One sample of what must stay flat.
struct Sample {
    minute: f64,
    rss_mib: f64,
    pending: f64,
    cache_pods: f64,
    watches: u64,
    binds: usize,
}

impl Sample {
    /// What tether, the proxy and the ledgers say now, `started` being the soak's start.
    fn take(
        started: Instant,
        tether: &OwnTether,
        proxy: &Proxy,
        ledgers: &[BindLedger],
    ) -> anyhow::Result<Self> {
        Ok(Sample {
            minute: started.elapsed().as_secs_f64() / 60.0,
            rss_mib: tether.rss_bytes()? as f64 / (1024.0 * 1024.0),
            pending: tether.metric_sum("tether_pending_pods")?,
            cache_pods: tether.metric_sum("tether_cache_pods")?,
            watches: proxy.open_watches(),
            binds: ledgers.iter().map(BindLedger::len).sum(),
        })
    }
}

/// The least-squares slope of `points` (x, y); 0 for fewer than two distinct x.
fn slope_per_minute(points: impl Iterator<Item = (f64, f64)>) -> f64 {
    let points: Vec<(f64, f64)> = points.collect();
    let n = points.len() as f64;
    let (mx, my) = points
        .iter()
        .fold((0.0, 0.0), |(x, y), p| (x + p.0 / n, y + p.1 / n));
    let (num, den) = points.iter().fold((0.0, 0.0), |(num, den), (x, y)| {
        (num + (x - mx) * (y - my), den + (x - mx) * (x - mx))
    });
    if den > 0.0 { num / den } else { 0.0 }
}

#[test]
fn the_slope_is_that_of_the_line_through_the_points() {
    let line = (0..10).map(|m| (f64::from(m), 100.0 + 2.5 * f64::from(m)));
    assert!((slope_per_minute(line) - 2.5).abs() < 1e-9);
    let flat = [(1.0, 50.0), (2.0, 52.0), (3.0, 50.0), (4.0, 52.0)];
    assert!(slope_per_minute(flat.into_iter()).abs() < 0.5);
    assert_eq!(slope_per_minute([(1.0, 3.0)].into_iter()), 0.0);
}

#[tokio::test]
#[ignore = "the soak runs for half an hour: make soak"]
async fn soak() -> anyhow::Result<()> {
    const WORKLOADS: usize = 5;
    let minutes = env_or("SOAK_MINUTES", 30);
    let node_count = env_or("SOAK_NODES", 200) as usize;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "soak").await?;
    let nodes = TestNodes::create(&client, "soak", node_count, "8", |_, _| {}).await?;
    let proxy = Proxy::start().await?;
    let tether = OwnTether::start("soak", &proxy).await?;
    let mut workloads = Vec::new();
    let mut ledgers = Vec::new();
    for i in 0..WORKLOADS {
        let app = format!("web-{i}");
        ledgers.push(BindLedger::start(&client, &ns.name, &format!("app={app}")));
        workloads.push(HistoryWorkload::create(&client, &ns.name, &nodes, &app, 10, "100m").await?);
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let node_api: Api<Node> = Api::all(client.clone());
    let solo_spec = {
        let mut spec = json!({"schedulerName": "tether-scheduler", "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "50m"}}}]});
        nodes.isolate(&mut spec);
        spec
    };

    let mut dice = Dice(7);
    let mut samples: Vec<Sample> = Vec::new();
    let started = Instant::now();
    let until = started + Duration::from_secs(minutes * 60);
    let sample_every = Duration::from_secs(env_or("SOAK_SAMPLE_SECONDS", 30));
    let mut next_sample = started;
    let mut solo = 0u64;
    let mut cordoned: Option<String> = None;
    while Instant::now() < until {
        // Scale a workload, replace a bare pod or two, cordon or uncordon a node.
        let w = &workloads[dice.roll(WORKLOADS as u64) as usize];
        w.scale(dice.roll(60) as usize).await?;
        for _ in 0..2 {
            solo += 1;
            apply(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": format!("solo-{solo}"), "namespace": ns.name, "labels": {"app": "solo"}},
                "spec": solo_spec}))?;
            if solo > 40 {
                let _ = pods
                    .delete(&format!("solo-{}", solo - 40), &DeleteParams::default())
                    .await;
            }
        }
        let node = nodes.names[dice.roll(nodes.names.len() as u64) as usize].clone();
        let patch =
            |unschedulable: bool| Patch::Merge(json!({"spec": {"unschedulable": unschedulable}}));
        if let Some(old) = cordoned.take() {
            node_api
                .patch(&old, &PatchParams::default(), &patch(false))
                .await?;
        }
        node_api
            .patch(&node, &PatchParams::default(), &patch(true))
            .await?;
        cordoned = Some(node);

        if Instant::now() >= next_sample {
            next_sample += sample_every;
            samples.push(Sample::take(started, &tether, &proxy, &ledgers)?);
        }
        tokio::time::sleep(Duration::from_secs(2)).await;
    }

    // Settle: no more churn; every workload at 20 replicas, every pod bound.
    if let Some(old) = cordoned.take() {
        node_api
            .patch(
                &old,
                &PatchParams::default(),
                &Patch::Merge(json!({"spec": {"unschedulable": false}})),
            )
            .await?;
    }
    for w in &workloads {
        w.scale(20).await?;
    }
    for w in &workloads {
        w.wait_all_bound(20, Duration::from_secs(300)).await?;
    }
    wait_for("the bare pods bound", Duration::from_secs(300), || async {
        let list = pods.list(&ListParams::default().labels("app=solo")).await?;
        let unbound = list
            .items
            .iter()
            .filter(|p| p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_none())
            .count();
        Ok((unbound == 0).then_some(()))
    })
    .await?;
    wait_for("tether's queue empty", Duration::from_secs(60), || async {
        Ok((tether.metric_sum("tether_pending_pods")? == 0.0).then_some(()))
    })
    .await?;
    samples.push(Sample::take(started, &tether, &proxy, &ledgers)?);

    let mut report = format!(
        "soak: {minutes} min of churn on {node_count} nodes ({WORKLOADS} workloads scaled 0-60, \
         bare pods replaced, a node cordoned every 2 s)\n\
         minute  rss MiB  pending  cache pods  watches  binds seen\n"
    );
    for s in &samples {
        let _ = writeln!(
            report,
            "{:6.1}  {:7.1}  {:7}  {:10}  {:7}  {:10}",
            s.minute, s.rss_mib, s.pending, s.cache_pods, s.watches, s.binds
        );
    }
    // The slope of memory over the churn (least squares, MiB a minute) after the first third,
    // when the caches have filled: what a leak shows as, whatever the start.
    let settled = &samples[samples.len() / 3..];
    let slope = slope_per_minute(settled.iter().map(|s| (s.minute, s.rss_mib)));
    let _ = writeln!(
        report,
        "memory slope after the first third: {slope:+.2} MiB a minute over {} samples",
        settled.len()
    );
    print!("{report}");
    std::fs::write(repo_dir().join(".cluster/logs/soak.txt"), &report)?;

    // Flat: memory at the end within 25 % (and 16 MiB) of the highest of the first third, and
    // no more open watches than then (a leaked watch would add one each time it restarts).
    let third = &samples[..samples.len().div_ceil(3)];
    let early_rss = third.iter().map(|s| s.rss_mib).fold(0.0, f64::max);
    let early_watches = third.iter().map(|s| s.watches).max().unwrap_or(0);
    let last = samples.last().expect("a final sample");
    assert!(
        last.rss_mib <= early_rss * 1.25 + 16.0,
        "memory grew: {:.1} MiB at the end, {early_rss:.1} MiB early on",
        last.rss_mib
    );
    assert!(
        last.watches <= early_watches,
        "open watches grew: {} at the end, {early_watches} early on",
        last.watches
    );
    for (w, ledger) in workloads.iter().zip(&ledgers) {
        w.assert_history_matches(ledger, Duration::from_secs(60))
            .await?;
    }
    assert_within_allocatable(&client, &nodes).await?;

    for w in &workloads {
        w.delete_profile()?;
    }
    drop(tether);
    nodes.delete().await?;
    ns.delete().await
}
