//! The Kueue bench: batch behind a real Kueue. `jobs` Jobs of [`PODS_PER_JOB`] pods wait in one
//! LocalQueue whose ClusterQueue has quota for a tenth of them (`room`); Kueue admits (unsuspends) as
//! quota frees, kube-controller-manager's Job controller makes the pods, the scheduler under
//! test binds them, kwok runs each for a second and completes it (the stage
//! `tether-pod-complete`, asked for by the annotation `e2e.tether.dev/completes`), the Job
//! finishes and Kueue admits the next. Kueue + tether and Kueue + kube-scheduler run the same
//! Jobs on the same nodes in one bench run.
//!
//! Each stage is timed from the bench's own watches (a Job seen unsuspended, a pod seen first,
//! a pod seen bound), so the report says which stage the pods wait in: the scheduler's (created
//! to bound) should never be the long one.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, ListParams, PostParams, PropagationPolicy};
use kube::runtime::{WatchStreamExt, watcher};
use serde::Serialize;
use serde_json::json;

use super::report::{machine, ratio};
use super::{Bench, Contender, Process, Workload, empty, quantile};
use crate::kueue::{KUEUE_LABEL, QUEUE_NAME, Queues};
use crate::{TestNamespace, apply, create_retried, kubectl_ok, unique_suffix, wait_for};

/// The pods of each Job (parallelism and completions).
pub const PODS_PER_JOB: usize = 4;

/// The CPU each pod asks for, in millicores (the ClusterQueue's quota is sized from it).
const POD_MILLICPU: usize = 100;

/// The label the Job controller puts on a Job's pods.
const JOB_NAME: &str = "batch.kubernetes.io/job-name";

/// The figures of one run of the Kueue bench.
#[derive(Clone, Debug, Serialize)]
pub struct KueueResult {
    pub contender: Contender,
    pub nodes: usize,
    pub jobs: usize,
    pub pods: usize,
    /// How many Jobs the ClusterQueue's quota admits at once.
    pub room: usize,
    /// From the first Job seen admitted to the last pod seen bound.
    pub seconds: f64,
    pub pods_per_second: f64,
    /// Per pod, from its Job seen admitted to the pod seen (Kueue's unsuspend reaching the Job
    /// controller, and its pod creation).
    pub admitted_to_created_p50_ms: f64,
    pub admitted_to_created_p99_ms: f64,
    /// Per pod, from the pod seen to the pod seen bound: the scheduler's stage.
    pub created_to_bound_p50_ms: f64,
    pub created_to_bound_p99_ms: f64,
    /// Per Job, from its admission to its last pod bound.
    pub admitted_to_bound_p50_ms: f64,
    pub admitted_to_bound_p99_ms: f64,
    /// The scheduler process's CPU time over its whole life and its peak resident memory.
    pub cpu_seconds: f64,
    pub cpu_ms_per_pod: f64,
    pub peak_rss_mib: f64,
}

/// When the bench's watches first saw each thing happen.
#[derive(Default)]
struct Stamps {
    /// Job name → seen unsuspended.
    admitted: HashMap<String, Instant>,
    /// Pod name → (its Job, seen first).
    created: HashMap<String, (String, Instant)>,
    /// Pod name → seen with a node.
    bound: HashMap<String, Instant>,
}

type Shared = Arc<Mutex<Stamps>>;

fn lock(stamps: &Shared) -> anyhow::Result<std::sync::MutexGuard<'_, Stamps>> {
    stamps
        .lock()
        .map_err(|_| anyhow!("the bench's stamps were poisoned"))
}

/// Watches the Jobs and the pods of `ns`, stamping into `stamps`; stops when dropped.
struct Watches(Vec<tokio::task::JoinHandle<()>>);

impl Drop for Watches {
    fn drop(&mut self) {
        for task in &self.0 {
            task.abort();
        }
    }
}

impl Watches {
    fn start(client: &kube::Client, ns: &str, stamps: &Shared) -> Self {
        let jobs: Api<Job> = Api::namespaced(client.clone(), ns);
        let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
        let seen = stamps.clone();
        let job_task = tokio::spawn(async move {
            let mut stream = watcher(jobs, watcher::Config::default())
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = stream.next().await {
                let Ok(job) = event else { continue };
                let running = job.spec.as_ref().and_then(|s| s.suspend) == Some(false);
                if let (true, Some(name), Ok(mut s)) = (running, job.metadata.name, seen.lock()) {
                    s.admitted.entry(name).or_insert_with(Instant::now);
                }
            }
        });
        let seen = stamps.clone();
        let config = watcher::Config::default().labels(JOB_NAME);
        let pod_task = tokio::spawn(async move {
            let mut stream = watcher(pods, config)
                .default_backoff()
                .applied_objects()
                .boxed();
            while let Some(event) = stream.next().await {
                let Ok(pod) = event else { continue };
                let now = Instant::now();
                let (Some(name), Some(job)) = (
                    pod.metadata.name.clone(),
                    pod.metadata
                        .labels
                        .as_ref()
                        .and_then(|l| l.get(JOB_NAME).cloned()),
                ) else {
                    continue;
                };
                let Ok(mut s) = seen.lock() else { return };
                s.created.entry(name.clone()).or_insert((job, now));
                if pod.spec.and_then(|s| s.node_name).is_some() {
                    s.bound.entry(name).or_insert(now);
                }
            }
        });
        Watches(vec![job_task, pod_task])
    }
}

impl Bench {
    /// One run of the Kueue bench: `jobs` Jobs through one ClusterQueue with quota for `room`
    /// of them at once, bound by `contender` (kube-scheduler or tether); every object the run
    /// made is gone again when it returns.
    pub async fn run_kueue(
        &self,
        contender: Contender,
        jobs: usize,
        room: usize,
    ) -> anyhow::Result<KueueResult> {
        anyhow::ensure!(
            matches!(contender, Contender::KubeScheduler | Contender::Tether),
            "the Kueue bench runs kube-scheduler and tether, not {}",
            contender.label()
        );
        crate::kueue::ensure()?;
        let ns = TestNamespace::create(&self.client, "bench-kueue").await?;
        kubectl_ok(
            &[
                "label",
                "namespace",
                &ns.name,
                &format!("{KUEUE_LABEL}=true"),
            ],
            None,
        )?;
        anyhow::ensure!(room > 0, "a ClusterQueue with room for no Job admits none");
        let quota = format!("{}m", room * PODS_PER_JOB * POD_MILLICPU);
        let queues = Queues::create(&ns.name, &quota)?;
        let scheduler = format!("bench-{}", unique_suffix());
        if contender == Contender::Tether {
            apply(
                json!({"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
                "metadata": {"name": scheduler}, "spec": {"schedulerName": scheduler}}),
            )?;
        }
        let stamps: Shared = Arc::default();
        let result = async {
            let process = match contender {
                Contender::KubeScheduler => Process::kube_scheduler(&scheduler, Workload::Basic)?,
                _ => Process::tether(&scheduler).await?,
            };
            self.warm_up(&ns.name, &scheduler).await?;
            let watches = Watches::start(&self.client, &ns.name, &stamps);
            self.create_jobs(&ns.name, &scheduler, jobs).await?;
            let pods = jobs * PODS_PER_JOB;
            let deadline = Duration::from_secs(300).max(Duration::from_millis(pods as u64 * 150));
            wait_for("every Job's pods bound", deadline, || async {
                Ok((lock(&stamps)?.bound.len() >= pods).then_some(()))
            })
            .await
            .with_context(|| {
                let bound = lock(&stamps).map_or(0, |s| s.bound.len());
                format!("Kueue + {} bound {bound} of {pods}", contender.label())
            })?;
            let (cpu, rss) = process.usage()?;
            drop((process, watches));
            let stamps = lock(&stamps)?;
            Ok::<_, anyhow::Error>(summarize(
                contender,
                self.nodes.names.len(),
                jobs,
                room,
                &stamps,
                (cpu, rss),
            ))
        }
        .await;
        // The Jobs first (their controller would make the pods again), then their pods.
        let job_api: Api<Job> = Api::namespaced(self.client.clone(), &ns.name);
        let background = DeleteParams {
            propagation_policy: Some(PropagationPolicy::Background),
            ..DeleteParams::default()
        };
        job_api
            .delete_collection(&background, &ListParams::default())
            .await
            .context("deleting the bench's Jobs")?;
        empty(&self.client, &ns.name).await?;
        ns.delete().await?;
        queues.delete()?;
        if contender == Contender::Tether {
            let _ = kubectl_ok(&["delete", "sp", &scheduler, "--wait=false"], None);
        }
        result
    }

    /// A pod outside Kueue's queues (it names none), bound before the measure starts, so that
    /// the scheduler is timed from when it serves.
    async fn warm_up(&self, ns: &str, scheduler: &str) -> anyhow::Result<()> {
        let mut spec = json!({"schedulerName": scheduler, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause"}]});
        self.nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "warm-up"}, "spec": spec}))?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), ns);
        // Kueue's pod webhook looks the namespace up in its own cache, which learns of a new
        // namespace a moment after the API server: until then it refuses the pod with the
        // namespace "not found".
        wait_for(
            "Kueue's webhook to know the namespace",
            Duration::from_secs(60),
            || {
                let (pods, pod) = (pods.clone(), pod.clone());
                async move {
                    match pods.create(&PostParams::default(), &pod).await {
                        Ok(_) => Ok(Some(())),
                        Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(())),
                        Err(kube::Error::Api(e)) if e.message.contains("not found") => Ok(None),
                        Err(e) => Err(e.into()),
                    }
                }
            },
        )
        .await?;
        crate::wait_bound(&self.client, ns, "warm-up", Duration::from_secs(60)).await?;
        Ok(())
    }

    /// The Jobs, suspended until Kueue admits them, as fast as the API server takes them.
    async fn create_jobs(&self, ns: &str, scheduler: &str, jobs: usize) -> anyhow::Result<()> {
        let mut spec = json!({"schedulerName": scheduler, "restartPolicy": "Never",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "pause",
                "resources": {"requests": {"cpu": format!("{POD_MILLICPU}m")}}}]});
        self.nodes.isolate(&mut spec);
        let api: Api<Job> = Api::namespaced(self.client.clone(), ns);
        futures::stream::iter(0..jobs)
            .map(|i| {
                let (api, spec) = (api.clone(), spec.clone());
                async move {
                    let job: Job = serde_json::from_value(json!({
                        "apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": format!("job-{i}"), "labels": {QUEUE_NAME: "lq"}},
                        "spec": {"parallelism": PODS_PER_JOB, "completions": PODS_PER_JOB,
                            "suspend": true,
                            "template": {
                                "metadata": {"annotations": {"e2e.tether.dev/completes": "true"}},
                                "spec": spec}},
                    }))?;
                    let params = PostParams::default();
                    create_retried(&format!("creating bench Job job-{i}"), || {
                        api.create(&params, &job)
                    })
                    .await
                }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }
}

fn millis(from: Instant, to: Instant) -> f64 {
    to.saturating_duration_since(from).as_secs_f64() * 1000.0
}

fn sorted(mut values: Vec<f64>) -> Vec<f64> {
    values.sort_by(f64::total_cmp);
    values
}

fn summarize(
    contender: Contender,
    nodes: usize,
    jobs: usize,
    room: usize,
    stamps: &Stamps,
    (cpu, rss): (f64, f64),
) -> KueueResult {
    let pods = stamps.bound.len();
    let first = stamps.admitted.values().min().copied();
    let last = stamps.bound.values().max().copied();
    let seconds = match (first, last) {
        (Some(f), Some(l)) => l.saturating_duration_since(f).as_secs_f64().max(1e-3),
        _ => 1e-3,
    };
    let mut to_created = Vec::new();
    let mut to_bound = Vec::new();
    let mut job_done: HashMap<&str, Instant> = HashMap::new();
    for (pod, (job, created)) in &stamps.created {
        let Some(bound) = stamps.bound.get(pod) else {
            continue;
        };
        if let Some(admitted) = stamps.admitted.get(job) {
            to_created.push(millis(*admitted, *created));
        }
        to_bound.push(millis(*created, *bound));
        let done = job_done.entry(job.as_str()).or_insert(*bound);
        *done = (*done).max(*bound);
    }
    let job_times = sorted(
        job_done
            .iter()
            .filter_map(|(job, done)| Some(millis(*stamps.admitted.get(*job)?, *done)))
            .collect(),
    );
    let (to_created, to_bound) = (sorted(to_created), sorted(to_bound));
    KueueResult {
        contender,
        nodes,
        jobs,
        pods,
        room,
        seconds,
        pods_per_second: pods as f64 / seconds,
        admitted_to_created_p50_ms: quantile(&to_created, 0.5),
        admitted_to_created_p99_ms: quantile(&to_created, 0.99),
        created_to_bound_p50_ms: quantile(&to_bound, 0.5),
        created_to_bound_p99_ms: quantile(&to_bound, 0.99),
        admitted_to_bound_p50_ms: quantile(&job_times, 0.5),
        admitted_to_bound_p99_ms: quantile(&job_times, 0.99),
        cpu_seconds: cpu,
        cpu_ms_per_pod: cpu * 1000.0 / pods.max(1) as f64,
        peak_rss_mib: rss,
    }
}

/// The Kueue bench's table for BENCHMARKS.md: one row per scheduler, with tether's ratios to
/// kube-scheduler's run.
pub fn kueue_report(results: &[KueueResult], command: &str, versions: &str) -> String {
    let kube = results
        .iter()
        .find(|r| r.contender == Contender::KubeScheduler);
    let mut out = format!("Run `{command}` on {}; {versions}.\n\n", machine());
    out.push_str("| scheduler | Jobs × pods (admitted at once) | s | pods/s | admitted → pod made, p50 / p99 ms | pod made → bound (the scheduler), p50 / p99 ms | admitted → Job's pods all bound, p50 / p99 ms | CPU s | CPU ms/pod | peak RSS MiB | pods/s vs kube-scheduler | CPU/pod vs kube-scheduler |\n");
    out.push_str("|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    for r in results {
        out.push_str(&format!(
            "| Kueue + {} | {} × {PODS_PER_JOB} ({}) | {:.1} | {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.0} / {:.0} | {:.1} | {:.2} | {:.0} | {} | {} |\n",
            r.contender.label(),
            r.jobs,
            r.room,
            r.seconds,
            r.pods_per_second,
            r.admitted_to_created_p50_ms,
            r.admitted_to_created_p99_ms,
            r.created_to_bound_p50_ms,
            r.created_to_bound_p99_ms,
            r.admitted_to_bound_p50_ms,
            r.admitted_to_bound_p99_ms,
            r.cpu_seconds,
            r.cpu_ms_per_pod,
            r.peak_rss_mib,
            ratio(Some(r.pods_per_second), kube.map(|k| k.pods_per_second)),
            ratio(Some(r.cpu_ms_per_pod), kube.map(|k| k.cpu_ms_per_pod)),
        ));
    }
    out
}
