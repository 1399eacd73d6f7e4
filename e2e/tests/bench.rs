//! The scheduler bench. `make bench` runs [`bench`] (500 nodes and 5,000 pods unless
//! `BENCH_NODES` and `BENCH_PODS` say otherwise) and writes BENCHMARKS.md and
//! `target/bench/results.json`; `make test` runs [`a_small_bench_runs_every_contender`], so the
//! bench cannot rot (no ratio is asserted: these machines are too small and too noisy for one).
//! Both start schedulers of their own, so they run alone, after the shared tether has stopped.

use tether_e2e::bench::{
    Bench, Contender, Mode, PODS_PER_JOB, ReadyResult, RunResult, Workload, into_benchmarks,
    kueue_report, node_images, ready_report, report, scale_report, start_to_ready, sweep_report,
    write_json,
};
use tether_e2e::{TestNodes, client};

fn env_or(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// Runs each (contender, workload, mode) in turn and prints each result as it comes.
async fn run_all(
    bench: &Bench,
    pods: usize,
    runs: &[(Contender, Workload, Mode)],
) -> anyhow::Result<Vec<RunResult>> {
    let mut results = Vec::new();
    for &(contender, workload, mode) in runs {
        let result = bench.run(contender, workload, mode, pods).await?;
        println!(
            "{} / {:?} / {}: {:.0} pods/s (p50 {:.0}), latency p50 {:.0} ms p99 {:.0} ms, CPU {:?} s, peak RSS {:?} MiB, Scheduled events {:?} ({:?} s after the last bind), history {:?} s after",
            workload.label(),
            mode,
            contender.label(),
            result.pods_per_second,
            result.pods_per_second_p50,
            result.latency_p50_ms,
            result.latency_p99_ms,
            result.cpu_seconds,
            result.peak_rss_mib,
            result.scheduled_events,
            result.events_lag_seconds,
            result.history_lag_seconds,
        );
        results.push(result);
    }
    Ok(results)
}

#[tokio::test]
async fn a_small_bench_runs_every_contender() -> anyhow::Result<()> {
    const PODS: usize = 60;
    let client = client().await?;
    let bench = Bench::new(client, 6).await?;
    let runs = [
        (Contender::KubeScheduler, Workload::Basic, Mode::Batch),
        (Contender::Tether, Workload::Basic, Mode::Batch),
        (Contender::RawBinder, Workload::Basic, Mode::Batch),
        (Contender::TetherHistory, Workload::Basic, Mode::Batch),
        (Contender::Tether, Workload::AntiAffinity, Mode::Steady(30)),
        (Contender::KubeScheduler, Workload::Gang, Mode::Batch),
        (Contender::Tether, Workload::Gang, Mode::Batch),
        (Contender::KubeScheduler, Workload::Claims, Mode::Batch),
        (Contender::Tether, Workload::Claims, Mode::Batch),
    ];
    let results = run_all(&bench, PODS, &runs).await?;
    for r in &results {
        assert_eq!(r.pods, PODS);
        assert!(r.pods_per_second > 0.0, "{r:?}");
        if matches!(r.contender, Contender::Tether | Contender::TetherHistory) {
            // Its events give way to binds during the burst, and none is dropped for it.
            assert_eq!(
                r.scheduled_events,
                Some(PODS),
                "every pod tether bound got its Scheduled event: {r:?}"
            );
        }
        if r.contender != Contender::RawBinder {
            assert!(
                r.cpu_seconds.is_some_and(|c| c > 0.0) && r.peak_rss_mib.is_some_and(|m| m > 1.0),
                "the scheduler's process was measured: {r:?}"
            );
        }
        // The control plane's processes were found and their CPU counted (cpu.rs).
        assert!(
            r.plane_cpu_ms_per_pod.is_some_and(|c| c > 0.0)
                && r.bench_cpu_ms_per_pod.is_some_and(|c| c >= 0.0),
            "the control plane's CPU was measured: {r:?}"
        );
    }
    let table = report(&results, "make test", "small run");
    assert_eq!(
        table.lines().filter(|l| l.starts_with("| ")).count(),
        1 + runs.len()
    );
    write_json(&results, "results-small")?;
    // The sweep's table, from the same runs (one node count).
    let swept: Vec<RunResult> = results
        .iter()
        .filter(|r| r.workload == Workload::Basic && r.contender != Contender::TetherHistory)
        .cloned()
        .collect();
    let table = sweep_report(&swept, "make test", "small run");
    assert_eq!(table.lines().filter(|l| l.starts_with("| ")).count(), 4);
    assert!(table.contains("| 6 | tether | "), "{table}");
    // Two gangs that must preempt (every node holds a lower pod first): 4 of the 6 nodes.
    let preempting = run_all(
        &bench,
        2 * tether_e2e::bench::GANG_SIZE,
        &[(Contender::Tether, Workload::GangPreempt, Mode::Batch)],
    )
    .await?;
    assert!(
        preempting
            .iter()
            .all(|r| r.pods == 2 * tether_e2e::bench::GANG_SIZE && r.pods_per_second > 0.0),
        "{preempting:?}"
    );
    bench.nodes.delete().await?;

    // Start to ready, small: the nodes carry their images as the big run's do.
    let client = tether_e2e::client().await?;
    let nodes = nodes_with_images(&client, 20, 50).await?;
    let mut ready = Vec::new();
    for contender in [Contender::KubeScheduler, Contender::Tether] {
        let r = start_to_ready(contender, 20, 50, 1).await?;
        assert!(r.seconds > 0.0 && r.cpu_seconds > 0.0, "{r:?}");
        ready.push(r);
    }
    let table = ready_report(&ready, "make test", "small run");
    assert_eq!(table.lines().filter(|l| l.starts_with("| ")).count(), 3);

    // The scale run, small: 30 pods waiting on the same nodes; kube-apiserver restarted.
    let bench = Bench::on(client, nodes);
    let mut scale = Vec::new();
    for contender in [Contender::KubeScheduler, Contender::Tether] {
        let r = bench.start_and_restart(contender, 30, false, false).await?;
        assert!(
            r.ready_seconds > 0.0
                && r.first_bind_seconds > 0.0
                && r.restart_to_bind_seconds > 0.0
                && r.peak_rss_mib > 1.0,
            "{r:?}"
        );
        scale.push(r);
    }
    let table = scale_report(&scale, "make test", "small run");
    println!("{table}");
    assert_eq!(table.lines().filter(|l| l.starts_with("| ")).count(), 3);
    // kube-scheduler's row is its own reference: throughput, CPU and memory all 1.00x.
    assert!(
        table
            .lines()
            .any(|l| l.contains("| kube-scheduler |") && l.ends_with("| 1.00x | 1.00x | 1.00x |")),
        "{table}"
    );
    bench.nodes.delete().await
}

/// `count` nodes of `images` images each; checks that the images stay on them (kwok manages
/// the nodes' status), so that the start measured is that of a fleet with images.
async fn nodes_with_images(
    client: &kube::Client,
    count: usize,
    images: usize,
) -> anyhow::Result<TestNodes> {
    let nodes = TestNodes::create(client, "ready", count, "32", |i, node| {
        node["status"]["images"] = node_images(i, images);
    })
    .await?;
    let api: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(client.clone());
    let last = nodes.names.last().expect("nodes were made");
    let held = api
        .get(last)
        .await?
        .status
        .and_then(|s| s.images)
        .map_or(0, |i| i.len());
    anyhow::ensure!(
        held == images,
        "node {last} holds {held} images, not {images}"
    );
    Ok(nodes)
}

/// Start to ready on `BENCH_READY_NODES` nodes (5,000 unless told otherwise) of 50 images each,
/// kube-scheduler and tether in turn, two rounds; writes its table into BENCHMARKS.md and
/// target/bench/ready.json.
#[tokio::test]
#[ignore = "thousands of nodes: make bench"]
async fn start_to_ready_on_a_large_fleet() -> anyhow::Result<()> {
    const IMAGES: usize = 50;
    let count = env_or("BENCH_READY_NODES", 5000);
    let client = client().await?;
    let nodes = nodes_with_images(&client, count, IMAGES).await?;
    let mut results: Vec<ReadyResult> = Vec::new();
    for round in 1..=2 {
        for contender in [Contender::KubeScheduler, Contender::Tether] {
            let r = start_to_ready(contender, count, IMAGES, round).await?;
            println!(
                "{} nodes × {IMAGES} images, round {round}: {} ready in {:.1} s ({:.1} CPU s, {:.0} MiB)",
                count,
                contender.label(),
                r.seconds,
                r.cpu_seconds,
                r.peak_rss_mib
            );
            results.push(r);
        }
    }
    write_json(&results, "ready")?;
    let versions = std::env::var("BENCH_VERSIONS").unwrap_or_default();
    let table = ready_report(
        &results,
        &format!("make bench BENCH_READY_NODES={count}"),
        &versions,
    );
    into_benchmarks("ready", Some("Start to ready"), &table)?;
    println!("{table}");
    nodes.delete().await
}

/// The scale run: `BENCH_SCALE_NODES` nodes (5,000 unless told otherwise) of 50 images each and
/// `BENCH_SCALE_PODS` pods waiting (none unless told: `make bench BENCH_SCALE_PODS=100000`),
/// kube-scheduler and tether in turn (see [`Bench::start_and_restart`]); writes its table into
/// BENCHMARKS.md (`scale table` at 5,000 nodes, `scale-N table` at N) and target/bench/scale.json.
#[tokio::test]
#[ignore = "100,000 pods on 5,000 nodes: make bench BENCH_SCALE_PODS=100000"]
async fn start_and_restart_at_scale() -> anyhow::Result<()> {
    let pods = env_or("BENCH_SCALE_PODS", 0);
    if pods == 0 {
        println!("the scale run is skipped: BENCH_SCALE_PODS is 0");
        return Ok(());
    }
    let count = env_or("BENCH_SCALE_NODES", 5000);
    let client = client().await?;
    // Before the nodes: tether's profile would otherwise fail after an hour of set-up and
    // kube-scheduler's run, on a cluster `make bench` did not start.
    tether_e2e::install_crds(&client).await?;
    let nodes = nodes_with_images(&client, count, 50).await?;
    let bench = Bench::on(client, nodes);
    // BENCH_SCALE_ONLY=tether (or kube-scheduler) runs one of them.
    let only = std::env::var("BENCH_SCALE_ONLY").unwrap_or_default();
    // BENCH_SCALE_KEEP=1 leaves the last run's pods and the nodes for a soak at this size, and
    // a failed run's pods and the nodes to look into.
    let keep = env_or("BENCH_SCALE_KEEP", 0) == 1;
    let contenders: Vec<Contender> = [Contender::KubeScheduler, Contender::Tether]
        .into_iter()
        .filter(|c| only.is_empty() || only.split(',').any(|o| o == c.label()))
        .collect();
    let mut results = Vec::new();
    for (i, contender) in contenders.iter().enumerate() {
        let last = i + 1 == contenders.len();
        match bench
            .start_and_restart(*contender, pods, keep && last, keep)
            .await
        {
            Ok(result) => results.push(result),
            Err(e) if keep => {
                bench.nodes.keep();
                return Err(e);
            }
            Err(e) => return Err(e),
        }
    }
    write_json(&results, "scale")?;
    let versions = std::env::var("BENCH_VERSIONS").unwrap_or_default();
    let table = scale_report(
        &results,
        &format!("make bench-scale BENCH_SCALE_NODES={count} BENCH_SCALE_PODS={pods}"),
        &versions,
    );
    // The 5,000-node run's table and each other size's of its own.
    let block = match count {
        5000 => "scale".to_string(),
        other => format!("scale-{other}"),
    };
    into_benchmarks(&block, Some(&format!("At scale: {count} nodes")), &table)?;
    println!("{table}");
    if keep {
        bench.nodes.keep();
        return Ok(());
    }
    bench.nodes.delete().await
}

/// The Kueue bench, small: 8 Jobs of 4 pods with room for 2 at a time, Kueue + kube-scheduler
/// and Kueue + tether; every pod bound, each stage timed, nothing ratioed.
#[tokio::test]
async fn a_small_kueue_bench_runs_both_schedulers() -> anyhow::Result<()> {
    const JOBS: usize = 8;
    let client = client().await?;
    let bench = Bench::new(client, 6).await?;
    let mut results = Vec::new();
    for contender in [Contender::KubeScheduler, Contender::Tether] {
        let r = bench.run_kueue(contender, JOBS, 2).await?;
        println!("{r:?}");
        assert_eq!(r.pods, JOBS * PODS_PER_JOB, "{r:?}");
        assert!(
            r.pods_per_second > 0.0 && r.cpu_seconds > 0.0 && r.peak_rss_mib > 1.0,
            "{r:?}"
        );
        // Quota for 2 of the 8 at once: Kueue admitted them in 4 waves, each after a Job
        // finished (kwok completes a pod a second after it runs).
        assert!(
            r.admitted_to_bound_p99_ms > 0.0 && r.seconds > 3.0,
            "admitted in waves: {r:?}"
        );
        results.push(r);
    }
    let table = kueue_report(&results, "make test", "small run");
    assert_eq!(table.lines().filter(|l| l.starts_with("| ")).count(), 3);
    bench.nodes.delete().await
}

/// Batch behind Kueue: `BENCH_KUEUE_JOBS` Jobs of 4 pods (1,000 unless told otherwise) through
/// one ClusterQueue with room for a tenth of them, Kueue + kube-scheduler and Kueue + tether on
/// `BENCH_NODES` nodes; writes its table into BENCHMARKS.md and target/bench/kueue.json.
#[tokio::test]
#[ignore = "1,000 Jobs through Kueue, twice: make bench"]
async fn kueue_bench() -> anyhow::Result<()> {
    let nodes = env_or("BENCH_NODES", 500);
    let jobs = env_or("BENCH_KUEUE_JOBS", 1000);
    if jobs == 0 {
        println!("the Kueue bench is skipped: BENCH_KUEUE_JOBS is 0");
        return Ok(());
    }
    let client = client().await?;
    let bench = Bench::new(client, nodes).await?;
    let mut results = Vec::new();
    for contender in [Contender::KubeScheduler, Contender::Tether] {
        let r = bench.run_kueue(contender, jobs, (jobs / 10).max(1)).await?;
        println!("{r:?}");
        results.push(r);
    }
    write_json(&results, "kueue")?;
    let versions = std::env::var("BENCH_VERSIONS").unwrap_or_default();
    let table = kueue_report(
        &results,
        &format!("make bench BENCH_NODES={nodes} BENCH_KUEUE_JOBS={jobs}"),
        &versions,
    );
    into_benchmarks("kueue", Some("Batch behind Kueue"), &table)?;
    println!("{table}");
    bench.nodes.delete().await
}

/// The cost of scheduling against the number of nodes: for each count in `BENCH_SWEEP_NODES`
/// (comma-separated; `make bench-sweep` gives 500,1000,5000,15000), that many nodes and
/// `BENCH_SWEEP_PODS` pods (5,000 unless told otherwise) of SchedulingBasic in batch, bound by
/// kube-scheduler, tether and the raw binder in turn. Writes target/bench/sweep.json (the
/// figures `e2e/scripts/plot-sweep.py` plots) and its table into BENCHMARKS.md.
#[tokio::test]
#[ignore = "up to 15,000 nodes: make bench-sweep"]
async fn node_count_sweep() -> anyhow::Result<()> {
    let counts: Vec<usize> = std::env::var("BENCH_SWEEP_NODES")
        .unwrap_or_default()
        .split(',')
        .filter_map(|n| n.trim().parse().ok())
        .collect();
    if counts.is_empty() {
        println!("the sweep is skipped: BENCH_SWEEP_NODES names no node count");
        return Ok(());
    }
    let pods = env_or("BENCH_SWEEP_PODS", 5000);
    let mut results = Vec::new();
    for &count in &counts {
        let bench = Bench::new(client().await?, count).await?;
        let runs = [
            Contender::KubeScheduler,
            Contender::Tether,
            Contender::RawBinder,
        ]
        .map(|c| (c, Workload::Basic, Mode::Batch));
        results.extend(run_all(&bench, pods, &runs).await?);
        bench.nodes.delete().await?;
        // Written after each count, so that a sweep stopped by the control plane keeps the
        // counts it finished.
        write_json(&results, "sweep")?;
    }
    let versions = std::env::var("BENCH_VERSIONS").unwrap_or_default();
    let command = format!(
        "make bench-sweep BENCH_SWEEP_NODES={} BENCH_SWEEP_PODS={pods}",
        counts
            .iter()
            .map(usize::to_string)
            .collect::<Vec<_>>()
            .join(",")
    );
    let table = sweep_report(&results, &command, &versions);
    into_benchmarks("sweep", Some("Against the number of nodes"), &table)?;
    println!("{table}");
    Ok(())
}

#[tokio::test]
#[ignore = "the bench takes a quarter of an hour: make bench"]
async fn bench() -> anyhow::Result<()> {
    let nodes = env_or("BENCH_NODES", 500);
    let pods = env_or("BENCH_PODS", 5000);
    let rate = env_or("BENCH_RATE", 100) as u32;
    let client = client().await?;
    let bench = Bench::new(client, nodes).await?;
    let mut runs = Vec::new();
    for workload in Workload::ALL {
        for contender in [
            Contender::KubeScheduler,
            Contender::Tether,
            Contender::RawBinder,
        ] {
            runs.push((contender, workload, Mode::Batch));
        }
    }
    // The same pods where kube-scheduler batches them (no default spread in the profile).
    for contender in [Contender::KubeScheduler, Contender::Tether] {
        runs.push((contender, Workload::BasicBatchable, Mode::Batch));
    }
    runs.push((Contender::TetherHistory, Workload::Basic, Mode::Batch));
    for contender in [Contender::KubeScheduler, Contender::Tether] {
        runs.push((contender, Workload::Basic, Mode::Steady(rate)));
    }
    // BENCH_ONLY=tether,kube-scheduler,SchedulingBasic,batch keeps the runs of the schedulers
    // named (all when none is) on the workloads named (all when none is) in the modes named
    // (both when neither is), for profiling and the large run; such a run leaves BENCHMARKS.md
    // alone and writes target/bench/results-only.json.
    let only: Vec<String> = std::env::var("BENCH_ONLY")
        .unwrap_or_default()
        .split(',')
        .filter(|s| !s.is_empty())
        .map(str::to_string)
        .collect();
    let listed = |labels: &[&str], label: &str| {
        !only.iter().any(|o| labels.contains(&o.as_str())) || only.iter().any(|o| o == label)
    };
    let contenders = Contender::ALL.map(Contender::label);
    let workloads: Vec<&str> = Workload::ALL
        .iter()
        .chain([
            &Workload::Gang,
            &Workload::GangRacks,
            &Workload::GangPreempt,
            &Workload::Claims,
            &Workload::BasicBatchable,
        ])
        .map(|w| w.label())
        .collect();
    let wanted = |(c, w, m): &(Contender, Workload, Mode)| {
        listed(&contenders, c.label())
            && listed(&workloads, w.label())
            && listed(&Mode::KINDS, m.kind())
    };
    let runs: Vec<_> = runs.into_iter().filter(|r| wanted(r)).collect();
    let mut results = run_all(&bench, pods, &runs).await?;
    // Gangs: BENCH_GANGS groups of 16 (100 unless told otherwise), each placed whole.
    let gang_pods = env_or("BENCH_GANGS", 100) * tether_e2e::bench::GANG_SIZE;
    // And the same gangs each within one of four racks (1.38), and gangs that must preempt a
    // lower pod on every node they take.
    let gang_runs: Vec<_> = [Workload::Gang, Workload::GangRacks, Workload::GangPreempt]
        .into_iter()
        .flat_map(|w| {
            [Contender::KubeScheduler, Contender::Tether]
                .into_iter()
                .map(move |c| (c, w, Mode::Batch))
        })
        .filter(|r| wanted(r))
        .collect();
    results.extend(run_all(&bench, gang_pods, &gang_runs).await?);
    // A GPU claim per pod (DRA), BENCH_CLAIM_PODS pods (BENCH_PODS unless told otherwise) on
    // nodes that offer twice as many GPUs as the pods take; kube-scheduler and tether only.
    let claim_pods = env_or("BENCH_CLAIM_PODS", pods);
    let claim_runs: Vec<_> = [Contender::KubeScheduler, Contender::Tether]
        .into_iter()
        .map(|c| (c, Workload::Claims, Mode::Batch))
        .filter(|r| wanted(r))
        .collect();
    results.extend(run_all(&bench, claim_pods, &claim_runs).await?);
    if !only.is_empty() {
        write_json(&results, "results-only")?;
        return bench.nodes.delete().await;
    }
    let json = write_json(&results, "results")?;
    let command = format!("make bench BENCH_NODES={nodes} BENCH_PODS={pods} BENCH_RATE={rate}");
    let versions = std::env::var("BENCH_VERSIONS").unwrap_or_default();
    let table = report(&results, &command, &versions);
    into_benchmarks("bench", None, &table)?;
    println!("{table}\nraw figures: {}", json.display());
    bench.nodes.delete().await
}
