//! `tether run`: the scheduler process. Watches the cluster, schedules the pods of every
//! profile it serves, and serves the endpoints of `crate::endpoints`. [`run`] is the sequence of
//! steps; each step is a function below it.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;

use crate::controller;
use crate::endpoints::{self, HttpState};
use crate::gate::WriteGate;
use crate::leader::{self, Leadership, LeaseConfig};
use crate::recorder::EventWriter;
use crate::scheduler::backend::queue::SchedulingQueue;
use crate::scheduler::eventhandlers::{self, EventHandlers};
use crate::scheduler::informers::disruption_budgets::{self, DisruptionBudgets};
use crate::scheduler::informers::selectors::{self, WorkloadSelectors};
use crate::scheduler::informers::storage::StorageIndex;

use crate::scheduler::framework::profile::ProfileRegistry;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::outcome::Reports;
use crate::scheduler::plugins::priority_sort;
use crate::scheduler::plugins::registry::Handle;
use crate::scheduler::plugins::sticky::placement_recorder;
use crate::scheduler::{BindObserver, CacheView, Scheduler, Services};
use crate::sticky::bindings::BindingIndex;
use crate::sticky::history::HistoryWriter;
use crate::sticky::owners::{self, OwnerCache};
use crate::sticky::reconcile;
use crate::supervise::Fatal;
use crate::watch::Readiness;

/// How `tether run` is configured.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Where `/metrics` is served.
    pub http_addr: SocketAddr,
    /// Where `/healthz` and `/readyz` are served (probes stay apart from metrics).
    pub health_addr: SocketAddr,
    /// Threads for Filter and Score.
    pub parallelism: usize,
    /// This replica's name, for events.
    pub instance: Option<String>,
    /// How long binds in flight may take to finish after SIGTERM.
    pub shutdown_grace: std::time::Duration,
    /// Owner kinds (group-qualified) followed besides the built-in ones.
    pub owner_kinds: Vec<String>,
    /// The Lease this replica competes for; `None`: it runs alone and leads from the start.
    pub lease: Option<LeaseConfig>,
    /// The rate limits of bookkeeping writes (binds have none).
    pub budget: crate::k8s::budget::Budget,
}

/// Runs the scheduler until SIGINT or SIGTERM: each step below builds what the next needs,
/// completely, before anything runs.
pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    let client = connect(&config).await?;
    start_filter_pool(config.parallelism)?;
    let (process, died) = Process::new(&config)?;
    let parts = build_scheduler(&config, &client, &process)?;
    let mut tasks = start_watches_and_controllers(&config, &client, &process, &parts).await;
    tasks.extend(start_leader_election(&config, &client, &process));
    tasks.extend(serve_endpoints(&config, &client, &process, &parts).await?);
    let scheduling = start_scheduling_loop(&process, &parts)?;
    let died = wait_for_stop(died).await;
    shut_down(&config, &client, &process, &parts, scheduling, &died).await;
    for task in tasks {
        task.abort();
    }
    tracing::info!("stopped");
    match died {
        Some(part) => Err(anyhow::anyhow!("{part}")),
        None => Ok(()),
    }
}

/// What every part of the process shares: metrics, the watches' readiness, the supervisor that
/// turns a dead part into an exit, whether this replica leads, and the write gate every write
/// to the cluster asks.
struct Process {
    metrics: Arc<Metrics>,
    readiness: Arc<Readiness>,
    fatal: Fatal,
    leadership: Leadership,
    gate: WriteGate,
}

impl Process {
    fn new(
        config: &RunConfig,
    ) -> anyhow::Result<(Self, tokio::sync::mpsc::UnboundedReceiver<String>)> {
        let metrics = Arc::new(Metrics::default());
        let (fatal, died) = Fatal::new();
        let leadership = match &config.lease {
            Some(lease) => {
                lease.validate().context("the leader election flags")?;
                Leadership::elected()
            }
            None => Leadership::alone(),
        };
        metrics.set_leading(!leadership.is_elected());
        let process = Process {
            metrics,
            readiness: Readiness::new(),
            fatal,
            gate: WriteGate::new(leadership.clone()),
            leadership,
        };
        Ok((process, died))
    }
}

/// The scheduler and the watch-fed state around it, built in order: the indexes, the cache
/// and queue, the history writer (which reads them), the scheduler, and the handle the profile
/// controller builds plugins with.
struct Parts {
    sched: Arc<Scheduler>,
    history: Arc<HistoryWriter>,
    handle: Handle,
    selectors: Arc<WorkloadSelectors>,
    owners: Arc<OwnerCache>,
    bindings: Arc<BindingIndex>,
    storage: Arc<StorageIndex>,
    budgets: Arc<DisruptionBudgets>,
}

async fn connect(config: &RunConfig) -> anyhow::Result<kube::Client> {
    let kube_config = kube::Config::infer()
        .await
        .context("reading the kubeconfig or in-cluster config")?;
    let client = crate::k8s::client::build(kube_config)?;
    crate::k8s::budget::set(config.budget.clone());
    Ok(client)
}

fn start_filter_pool(parallelism: usize) -> anyhow::Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(parallelism.max(1))
        .thread_name(|i| format!("filter-score-{i}"))
        .build_global()
        .context("starting the Filter/Score thread pool")
}

fn build_scheduler(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
) -> anyhow::Result<Parts> {
    let selectors = Arc::new(WorkloadSelectors::default());
    let owners = Arc::new(OwnerCache::with_kinds(config.owner_kinds.clone()));
    let bindings = Arc::new(BindingIndex::default());
    let storage = Arc::new(StorageIndex::default());
    let budgets = Arc::new(DisruptionBudgets::default());

    // Profiles come only from SchedulingProfile objects; the controller fills the registry.
    let profiles = Arc::new(ProfileRegistry::new());
    let queue_sort = priority_sort::build(None, &"plugins.queueSort".into(), &Handle::default())
        .map_err(|e| anyhow::anyhow!("building the queue's QueueSort: {e}"))?;
    let queue = SchedulingQueue::new(queue_sort, profiles.clone());
    queue.count_incoming_with(Box::new(process.metrics.queue_incoming()));
    let view = CacheView::new(queue);

    // A StickyBinding's countedPods keeps the pods the scheduler knows, and its status writes
    // carry the conditions judged from the nodes in the cache.
    let history = Arc::new(
        HistoryWriter::new(
            client.clone(),
            config.instance.clone(),
            bindings.clone(),
            owners.clone(),
            process.metrics.clone(),
        )
        .reading(Arc::new(view.clone()))
        .gated_by(process.gate.clone()),
    );

    let reports = Reports::new(
        client.clone(),
        config.instance.clone(),
        process.gate.clone(),
    )
    .counting_drops_in(process.metrics.events_dropped());
    let sched = Scheduler::new(
        view,
        profiles,
        Services {
            metrics: process.metrics.clone(),
            reports,
            readiness: process.readiness.clone(),
            runtime: tokio::runtime::Handle::current(),
            fatal: process.fatal.clone(),
            gate: process.gate.clone(),
        },
    );
    let handle = Handle {
        client: Some(client.clone()),
        storage: storage.clone(),
        budgets: budgets.clone(),
        events: Some(
            EventWriter::new(client.clone(), config.instance.clone())
                .gated_by(process.gate.clone()),
        ),
        gate: process.gate.clone(),
        default_selectors: selectors.clone(),
        owners: owners.clone(),
        // The plugins read the bindings through the writer: binds not written yet count.
        bindings: history.clone(),
        history: Some(history.clone()),
    };
    Ok(Parts {
        sched,
        history,
        handle,
        selectors,
        owners,
        bindings,
        storage,
        budgets,
    })
}

/// Every watch and both controllers, each registered in `readiness` before anything runs.
async fn start_watches_and_controllers(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
    parts: &Parts,
) -> Vec<tokio::task::JoinHandle<()>> {
    let (fatal, readiness) = (&process.fatal, &process.readiness);
    let kubevirt = owners::kubevirt_served(client).await;
    let requeue = parts.sched.clone();
    vec![
        tokio::spawn(fatal.forever(
            "the pod, node and namespace watches",
            eventhandlers::run_watches(
                EventHandlers::new(parts.sched.clone()),
                client.clone(),
                readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the PodDisruptionBudget watch",
            disruption_budgets::run_watch(parts.budgets.clone(), client.clone(), readiness),
        )),
        tokio::spawn(fatal.forever(
            "the storage watches",
            eventhandlers::storage::run_watches(
                parts.storage.clone(),
                parts.sched.clone(),
                client.clone(),
                readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the workload selector watches",
            selectors::run_watches(parts.selectors.clone(), client.clone(), readiness),
        )),
        tokio::spawn(fatal.forever(
            "the owner watches",
            owners::run_owner_watches(parts.owners.clone(), client.clone(), readiness, kubevirt),
        )),
        tokio::spawn(fatal.forever(
            "the StickyBinding controller",
            controller::sticky_binding::run(
                client.clone(),
                parts.bindings.clone(),
                Arc::new(move |old, new| {
                    let (event, old, new) = crate::sticky::bindings::cluster_event(old, new);
                    requeue.queue.on_event(event, old, new)
                }),
                process.gate.clone(),
                readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the SchedulingProfile controller",
            controller::scheduling_profile::run(
                client.clone(),
                parts.sched.clone(),
                parts.handle.clone(),
                config.instance.clone(),
                process.gate.clone(),
                readiness,
            ),
        )),
    ]
}

/// Competes for the Lease when one is configured. As kube-scheduler does, a replica that
/// stopped leading exits, to start again as a standby with fresh caches.
fn start_leader_election(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
) -> Option<tokio::task::JoinHandle<()>> {
    let lease = config.lease.clone()?;
    let (client, leadership, fatal, metrics) = (
        client.clone(),
        process.leadership.clone(),
        process.fatal.clone(),
        process.metrics.clone(),
    );
    Some(tokio::spawn(async move {
        let reason = leader::run(client, lease, leadership, move |event| match event {
            leader::Election::Leading(leading) => metrics.set_leading(leading),
            leader::Election::Unreachable(unreachable) => {
                metrics.set_lease_unreachable(unreachable)
            }
        })
        .await;
        fatal.report(format!("leadership lost: {reason}"));
    }))
}

/// `/metrics` and `/explain` on `--http-addr`, `/healthz` and `/readyz` on `--health-addr`.
async fn serve_endpoints(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
    parts: &Parts,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let state = HttpState {
        metrics: process.metrics.clone(),
        readiness: process.readiness.clone(),
        fatal: process.fatal.clone(),
        leadership: process.leadership.clone(),
        sched: parts.sched.clone(),
        client: client.clone(),
        explain_limit: endpoints::explain::limiter(),
    };
    let mut tasks = Vec::new();
    for (what, addr, app) in [
        (
            "/metrics and /explain",
            config.http_addr,
            endpoints::main_router(state.clone()),
        ),
        (
            "/healthz and /readyz",
            config.health_addr,
            endpoints::health_router(state.clone()),
        ),
    ] {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr} for {what}"))?;
        tracing::info!(addr = %listener.local_addr().unwrap_or(addr), "serving {what}");
        tasks.push(tokio::spawn(process.fatal.forever(
            "an HTTP endpoint",
            async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "an HTTP endpoint stopped");
                }
            },
        )));
    }
    Ok(tasks)
}

/// The scheduling thread: waits for the caches and for leadership, counts the binds whose
/// history a restart lost, then runs the scheduling loop until the queue closes.
fn start_scheduling_loop(
    process: &Process,
    parts: &Parts,
) -> anyhow::Result<std::thread::JoinHandle<()>> {
    let (sched, history) = (parts.sched.clone(), parts.history.clone());
    let runtime = tokio::runtime::Handle::current();
    let fatal = process.fatal.clone();
    std::thread::Builder::new()
        .name("scheduling-loop".into())
        .spawn(move || {
            fatal.guard_thread("the scheduling loop", || {
                if !wait_to_schedule(&sched, &runtime) {
                    return;
                }
                tracing::info!("caches synced; scheduling");
                record_missed_binds(&sched, &history, &runtime);
                sched.run_loop();
                if !sched.queue.is_closed() {
                    fatal.report("the scheduling loop ended");
                }
            })
        })
        .context("starting the scheduling loop")
}

/// Waits, on the scheduling thread, until every watch has listed (as kube-scheduler waits for
/// its informers) and this replica leads; `false` when the queue closed first.
fn wait_to_schedule(sched: &Scheduler, runtime: &tokio::runtime::Handle) -> bool {
    if !sched.readiness.wait_current(|| sched.queue.is_closed()) {
        return false;
    }
    let leadership = sched.gate.leadership();
    if leadership.is_elected() {
        tracing::info!("caches synced; waiting to lead");
        loop {
            let won = runtime.block_on(async {
                tokio::time::timeout(std::time::Duration::from_secs(1), leadership.wait_leading())
                    .await
            });
            if won.is_ok() {
                break;
            }
            if sched.queue.is_closed() {
                return false;
            }
        }
    }
    true
}

/// Binds made before a restart whose history write was lost are counted now, and binds an
/// earlier tether made that show up from now on as they come.
fn record_missed_binds(
    sched: &Arc<Scheduler>,
    history: &Arc<HistoryWriter>,
    runtime: &tokio::runtime::Handle,
) {
    let records = |sched: &Scheduler, pod: &Pod| {
        let name = crate::k8s::pods::scheduler_name(pod);
        sched
            .profiles
            .get(name)
            .is_some_and(|p| p.uses(placement_recorder::NAME))
    };
    let (writer, spawner) = (history.clone(), runtime.clone());
    let observed = Arc::downgrade(sched);
    let observer: BindObserver = Arc::new(move |pod| {
        if observed.upgrade().is_some_and(|s| records(&s, &pod)) {
            spawner.spawn(reconcile::record_missed_binds(writer.clone(), vec![pod]));
        }
    });
    let recorded: Vec<_> = sched
        .bound_pods_then_observe(observer)
        .into_iter()
        .filter(|pod| records(sched, pod))
        .collect();
    runtime.spawn(reconcile::record_missed_binds(history.clone(), recorded));
}

/// Until SIGINT or SIGTERM (`None`), or until a part dies (its name).
async fn wait_for_stop(mut died: tokio::sync::mpsc::UnboundedReceiver<String>) -> Option<String> {
    tokio::select! {
        () = shutdown_signal() => None,
        part = died.recv() => part,
    }
}

/// No pod is taken from the queue from now on; the cycle under way ends, then the binds in
/// flight (and their history writes) finish while the watches still run, within the grace.
/// A leader that stopped cleanly gives its Lease up.
async fn shut_down(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
    parts: &Parts,
    scheduling: std::thread::JoinHandle<()>,
    died: &Option<String>,
) {
    tracing::info!("shutting down: no new pods are scheduled; waiting for binds in flight");
    parts.sched.queue.close();
    let _ = tokio::task::spawn_blocking(move || scheduling.join()).await;
    if died.is_none() {
        let grace_ends = tokio::time::Instant::now() + config.shutdown_grace;
        let left = parts.sched.wait_binding_cycles(config.shutdown_grace).await;
        if left > 0 {
            tracing::warn!(binds = left, grace = ?config.shutdown_grace, "binds still in flight at the end of the grace period; the start-up reconcile counts their history");
        }
        let writes = parts
            .history
            .wait_idle(grace_ends.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        if writes > 0 {
            tracing::warn!(bindings = writes, grace = ?config.shutdown_grace, "history writes still under way at the end of the grace period; the start-up reconcile counts their binds");
        }
    }
    if let Some(lease) = &config.lease
        && died.is_none()
        && process.leadership.is_leading()
    {
        // Binds are done: a standby may take over at once rather than when the Lease expires.
        leader::release(client.clone(), lease).await;
    }
}

async fn shutdown_signal() {
    let ctrl_c = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    #[cfg(unix)]
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let term = std::future::pending::<()>();
    tokio::select! { _ = ctrl_c => {}, _ = term => {} }
}
