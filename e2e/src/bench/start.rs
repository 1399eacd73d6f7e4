//! The bench's measures of a scheduler's start: start to ready on a large fleet, and the scale
//! run (many pods waiting, then kube-apiserver restarted).

use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};

use super::report::{machine, ratio};
use super::{Bench, Contender, PodMaker, Process, Workload, empty};
use crate::ground_truth::BindLedger;
use crate::{
    TestNamespace, TestNodes, apply, create_retried, free_local_addr, unique_suffix, wait_for,
};

impl Process {
    /// Starts `contender` (kube-scheduler or tether) for `scheduler`, serving its probes, and
    /// waits until its `/readyz` answers 200 (tether's: every watch a decision needs has
    /// listed and the cache holds it; kube-scheduler's: its informers synced and handlers
    /// run), at most `timeout`; returns it and the seconds from `started` until then.
    async fn until_ready(
        contender: Contender,
        scheduler: &str,
        started: Instant,
        timeout: Duration,
    ) -> anyhow::Result<(Self, f64)> {
        let (process, url) = match contender {
            Contender::KubeScheduler => {
                let port = free_local_addr()?.port();
                let process = Process::kube_scheduler_serving(
                    json!({"schedulerName": scheduler}),
                    Some(port),
                    None,
                )?;
                (process, format!("https://127.0.0.1:{port}/readyz"))
            }
            Contender::Tether => {
                let (process, health) = Process::tether_with_health(scheduler).await?;
                (process, format!("http://{health}/readyz"))
            }
            other => bail!("{} has no start to measure", other.label()),
        };
        let seconds = wait_for(
            &format!("{} to be ready", contender.label()),
            timeout,
            || async { Ok(answers_ok(&url).then(|| started.elapsed().as_secs_f64())) },
        )
        .await?;
        Ok((process, seconds))
    }
}

impl Bench {
    /// Runs on `nodes` made already (the scale run's, with their images).
    pub fn on(client: kube::Client, nodes: TestNodes) -> Self {
        Bench { client, nodes }
    }

    /// The scale run of one scheduler: `pods` pods wait in a namespace of their own before it
    /// starts; measured are its start to `/readyz`, to the first bind and to the last, its
    /// CPU and peak memory once all are bound, and then the time from kube-apiserver being
    /// restarted (killed, and ready again) to a new pod being bound. Both schedulers must
    /// notice the lost watches, list again what they hold (every node and pod) and resume.
    /// With `keep`, the pods stay bound when it ends (for a soak at this size to follow); with
    /// `keep_failed`, they stay when it fails (to look into; deleting 150,000 takes minutes).
    pub async fn start_and_restart(
        &self,
        contender: Contender,
        pods: usize,
        keep: bool,
        keep_failed: bool,
    ) -> anyhow::Result<ScaleResult> {
        let ns = TestNamespace::create(&self.client, "scale").await?;
        let scheduler = format!("scale-{}", unique_suffix());
        if contender == Contender::Tether {
            apply(
                json!({"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
                "metadata": {"name": scheduler}, "spec": {"schedulerName": scheduler}}),
            )?;
        }
        let seen = BindLedger::start(&self.client, &ns.name, "bench");
        let maker = PodMaker {
            client: self.client.clone(),
            ns: ns.name.clone(),
            workload: Workload::Basic,
            pods,
            nodes: self.nodes.names.len(),
            owned: false,
            template: self.template(&scheduler, Workload::Basic),
        };
        let result = async {
            maker.create_all(&Arc::default(), None).await?;
            let started = Instant::now();
            let (process, ready_seconds) =
                Process::until_ready(contender, &scheduler, started, Duration::from_secs(900))
                    .await?;
            let deadline = Duration::from_secs(900).max(Duration::from_millis(pods as u64 * 40));
            wait_for("every pod bound", deadline, || async {
                Ok((seen.len() >= pods).then_some(()))
            })
            .await
            .with_context(|| format!("{} bound {} of {pods}", contender.label(), seen.len()))?;
            let (cpu_seconds, peak_rss_mib) = process.usage()?;
            let times: Vec<Instant> = seen.seen_at().into_values().collect();
            let first = times.iter().min().copied().unwrap_or(started);
            let last = times.iter().max().copied().unwrap_or(started);

            // kube-apiserver killed and started again; then a new pod.
            crate::faults::restart_within(
                "kube-apiserver",
                crate::faults::Stop::Kill,
                Duration::ZERO,
                Duration::from_secs(600),
            )?;
            let back = Instant::now();
            let probe = "after-restart";
            let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": probe, "labels": {"bench": "probe"}}, "spec": maker.template}))?;
            let api = Api::<Pod>::namespaced(self.client.clone(), &ns.name);
            let params = PostParams::default();
            // Until the API server takes it: healthy again, one holding 150,000 pods answers
            // 429 and 503 for longer than `create_retried`'s eight tries while its caches fill,
            // so those tries are made again until the deadline.
            let (api, params, pod) = (&api, &params, &pod);
            wait_for("the restarted API server to take a pod", Duration::from_secs(600), || async move {
                create_retried("creating the pod after the restart", || api.create(params, pod))
                    .await
                    .map(Some)
            })
            .await?;
            crate::wait_bound(&self.client, &ns.name, probe, Duration::from_secs(600)).await?;
            let restart_to_bind_seconds = back.elapsed().as_secs_f64();
            drop(process);
            let result = ScaleResult {
                contender,
                nodes: self.nodes.names.len(),
                pods,
                ready_seconds,
                first_bind_seconds: first.saturating_duration_since(started).as_secs_f64(),
                pods_per_second: pods as f64
                    / last.saturating_duration_since(first).as_secs_f64().max(1e-3),
                cpu_seconds,
                cpu_ms_per_pod: cpu_seconds * 1000.0 / pods.max(1) as f64,
                peak_rss_mib,
                restart_to_bind_seconds,
            };
            // Shown before the clean-up, which takes minutes at this size.
            println!("{result:?}");
            Ok::<_, anyhow::Error>(result)
        }
        .await;
        drop(seen);
        if contender == Contender::Tether {
            let _ = crate::kubectl_ok(&["delete", "sp", &scheduler, "--wait=false"], None);
        }
        if keep && result.is_ok() {
            println!("kept: {pods} pods bound in namespace {}", ns.name);
            ns.keep();
            return result;
        }
        if keep_failed && result.is_err() {
            println!(
                "kept for a look: the pods of the failed run in namespace {}",
                ns.name
            );
            ns.keep();
            return result;
        }
        empty(&self.client, &ns.name).await?;
        ns.delete().await?;
        result
    }
}

/// One scheduler's scale run (see [`Bench::start_and_restart`]).
#[derive(Clone, Debug, serde::Serialize)]
pub struct ScaleResult {
    pub contender: Contender,
    pub nodes: usize,
    pub pods: usize,
    /// From the process's start to its `/readyz` answering 200.
    pub ready_seconds: f64,
    /// From the process's start to the first bind the bench saw.
    pub first_bind_seconds: f64,
    /// From the first bind seen to the last.
    pub pods_per_second: f64,
    /// CPU seconds and peak resident memory once every pod was bound.
    pub cpu_seconds: f64,
    pub cpu_ms_per_pod: f64,
    pub peak_rss_mib: f64,
    /// From kube-apiserver ready again after a kill to a pod created then being bound.
    pub restart_to_bind_seconds: f64,
}

/// The scale figures as Markdown, each with its ratio to kube-scheduler's.
pub fn scale_report(results: &[ScaleResult], command: &str, versions: &str) -> String {
    let kube = results
        .iter()
        .find(|r| r.contender == Contender::KubeScheduler);
    let mut out = format!("Run `{command}` on {}; {versions}.\n\n", machine());
    out.push_str("| nodes × images | pods waiting | scheduler | start to ready (s) | start to first bind (s) | pods/s | CPU ms/pod | peak RSS MiB | kube-apiserver killed: ready again to a new pod bound (s) | pods/s vs kube-scheduler | CPU/pod vs kube-scheduler | RSS vs kube-scheduler |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in results {
        out.push_str(&format!(
            "| {} × 50 | {} | {} | {:.1} | {:.1} | {:.0} | {:.2} | {:.0} | {:.1} | {} | {} | {} |\n",
            r.nodes,
            r.pods,
            r.contender.label(),
            r.ready_seconds,
            r.first_bind_seconds,
            r.pods_per_second,
            r.cpu_ms_per_pod,
            r.peak_rss_mib,
            r.restart_to_bind_seconds,
            ratio(Some(r.pods_per_second), kube.map(|k| k.pods_per_second)),
            ratio(Some(r.cpu_ms_per_pod), kube.map(|k| k.cpu_ms_per_pod)),
            ratio(Some(r.peak_rss_mib), kube.map(|k| k.peak_rss_mib)),
        ));
    }
    out
}

/// One scheduler's start: from its process starting to its `/readyz` answering 200 on a cluster
/// of `nodes` nodes with `images` images each.
#[derive(Clone, Debug, serde::Serialize)]
pub struct ReadyResult {
    pub contender: Contender,
    pub nodes: usize,
    pub images: usize,
    pub round: usize,
    pub seconds: f64,
    /// CPU seconds the process had used when it was ready.
    pub cpu_seconds: f64,
    pub peak_rss_mib: f64,
}

/// The `status.images` of a node: `count` images, most of them shared with other nodes (a pool
/// of 4 × `count`, a window per node), as ImageLocality sees a real fleet.
pub fn node_images(node: usize, count: usize) -> Value {
    let pool = (4 * count).max(1);
    let images: Vec<Value> = (0..count)
        .map(|j| {
            let image = (node * 7 + j) % pool;
            json!({"names": [format!("registry.example/team-{}/app-{image}:v1", image % 13),
                             format!("registry.example/team-{}/app-{image}@sha256:{image:064x}", image % 13)],
                   "sizeBytes": 50_000_000 + (image as i64) * 1_000_000})
        })
        .collect();
    Value::Array(images)
}

/// `GET <url>` with curl; whether it answered 200.
fn answers_ok(url: &str) -> bool {
    Command::new("curl")
        .args([
            "-sk",
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "--max-time",
            "2",
            url,
        ])
        .output()
        .is_ok_and(|out| out.stdout == b"200")
}

/// Starts `contender` (kube-scheduler or tether) on the cluster as it is, and measures how long
/// it takes to be ready: tether's `/readyz` (every watch a decision needs has listed and the
/// cache holds it) and kube-scheduler's `/readyz` (its informers synced and handlers run).
pub async fn start_to_ready(
    contender: Contender,
    nodes: usize,
    images: usize,
    round: usize,
) -> anyhow::Result<ReadyResult> {
    let (process, seconds) = Process::until_ready(
        contender,
        "ready-bench",
        Instant::now(),
        Duration::from_secs(600),
    )
    .await?;
    let (cpu_seconds, peak_rss_mib) = process.usage()?;
    Ok(ReadyResult {
        contender,
        nodes,
        images,
        round,
        seconds,
        cpu_seconds,
        peak_rss_mib,
    })
}

/// The start-to-ready figures as Markdown, each round's tether figure next to kube-scheduler's
/// of the same round.
pub fn ready_report(results: &[ReadyResult], command: &str, versions: &str) -> String {
    let mut out = format!("Run `{command}` on {}; {versions}.\n\n", machine());
    out.push_str("| nodes × images | round | scheduler | start to ready (s) | CPU s | peak RSS MiB | time vs kube-scheduler | CPU vs kube-scheduler |\n");
    out.push_str("|---|---|---|---|---|---|---|---|\n");
    for r in results {
        let kube = results.iter().find(|o| {
            o.contender == Contender::KubeScheduler && o.round == r.round && o.nodes == r.nodes
        });
        out.push_str(&format!(
            "| {} × {} | {} | {} | {:.1} | {:.1} | {:.0} | {} | {} |\n",
            r.nodes,
            r.images,
            r.round,
            r.contender.label(),
            r.seconds,
            r.cpu_seconds,
            r.peak_rss_mib,
            ratio(Some(r.seconds), kube.map(|k| k.seconds)),
            ratio(Some(r.cpu_seconds), kube.map(|k| k.cpu_seconds)),
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(
        contender: Contender,
        pods_per_second: f64,
        cpu_ms_per_pod: f64,
        rss: f64,
    ) -> ScaleResult {
        ScaleResult {
            contender,
            nodes: 15000,
            pods: 150000,
            ready_seconds: 20.0,
            first_bind_seconds: 20.5,
            pods_per_second,
            cpu_seconds: cpu_ms_per_pod * 150.0,
            cpu_ms_per_pod,
            peak_rss_mib: rss,
            restart_to_bind_seconds: 5.0,
        }
    }

    #[test]
    fn the_scale_table_ratios_each_figure_to_kube_schedulers() {
        let results = [
            run(Contender::KubeScheduler, 68.0, 8.0, 4000.0),
            run(Contender::Tether, 340.0, 2.0, 1000.0),
        ];
        let table = scale_report(&results, "make bench-scale", "test");
        let row = |who: &str| {
            table
                .lines()
                .find(|l| l.contains(&format!("| {who} |")))
                .unwrap_or_default()
                .to_string()
        };
        // Throughput, CPU a pod, memory: 340/68, 2/8, 1000/4000.
        assert!(
            row("tether").ends_with("| 5.00x | 0.25x | 0.25x |"),
            "{table}"
        );
        assert!(
            row("kube-scheduler").ends_with("| 1.00x | 1.00x | 1.00x |"),
            "{table}"
        );
        let header = table
            .lines()
            .find(|l| l.starts_with("| nodes"))
            .unwrap_or_default();
        assert_eq!(
            header.matches('|').count(),
            row("tether").matches('|').count(),
            "{table}"
        );
    }
}
