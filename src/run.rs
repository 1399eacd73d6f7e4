//! `tether run`: the scheduler process. Watches the cluster, schedules the pods of every
//! profile it serves, and serves the endpoints of `crate::endpoints`.

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;
use k8s_openapi::api::core::v1::Pod;

use crate::controller;
use crate::endpoints::{self, HttpState};
use crate::k8s::recorder::EventWriter;
use crate::leader::{self, Leadership, LeaseConfig};
use crate::scheduler::backend::queue::SchedulingQueue;
use crate::scheduler::eventhandlers;
use crate::scheduler::informers::disruption_budgets::{self, DisruptionBudgets};
use crate::scheduler::informers::selectors::{self, WorkloadSelectors};
use crate::scheduler::informers::storage::StorageIndex;

use crate::scheduler::framework::profile::ProfileRegistry;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::plugins::priority_sort;
use crate::scheduler::plugins::registry::Handle;
use crate::scheduler::plugins::sticky::placement_recorder;
use crate::scheduler::report::Reports;
use crate::scheduler::{BindObserver, Scheduler, Services};
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

/// Runs the scheduler until SIGINT or SIGTERM.
pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    let kube_config = kube::Config::infer()
        .await
        .context("reading the kubeconfig or in-cluster config")?;
    let client = crate::k8s::client::build(kube_config)?;
    crate::k8s::budget::set(config.budget.clone());
    rayon::ThreadPoolBuilder::new()
        .num_threads(config.parallelism.max(1))
        .thread_name(|i| format!("filter-score-{i}"))
        .build_global()
        .context("starting the Filter/Score thread pool")?;

    let metrics = Arc::new(Metrics::default());
    let readiness = Readiness::new();
    let (fatal, mut died) = Fatal::new();
    let leadership = match &config.lease {
        Some(lease) => {
            lease.validate().context("the leader election flags")?;
            Leadership::elected()
        }
        None => Leadership::alone(),
    };
    metrics.set_leading(!leadership.is_elected());
    let selectors = Arc::new(WorkloadSelectors::default());
    let owners = Arc::new(OwnerCache::with_kinds(config.owner_kinds.clone()));
    let bindings = Arc::new(BindingIndex::default());
    let history = Arc::new(HistoryWriter::new(
        client.clone(),
        config.instance.clone(),
        bindings.clone(),
        owners.clone(),
        metrics.clone(),
    ));
    history.gate_on(leadership.clone());
    let storage = Arc::new(StorageIndex::default());
    let budgets = Arc::new(DisruptionBudgets::default());
    let handle = Handle {
        client: Some(client.clone()),
        storage: storage.clone(),
        budgets: budgets.clone(),
        events: Some(EventWriter::new(client.clone(), config.instance.clone())),
        default_selectors: selectors.clone(),
        owners: owners.clone(),
        // The plugins read the bindings through the writer: binds not written yet count.
        bindings: history.clone(),
        history: Some(history.clone()),
    };
    // Profiles come only from SchedulingProfile objects; the controller fills the registry.
    let profiles = Arc::new(ProfileRegistry::new());
    let queue_sort = priority_sort::build(None, &"plugins.queueSort".into())
        .map_err(|e| anyhow::anyhow!("building the queue's QueueSort: {e}"))?;
    let queue = SchedulingQueue::new(queue_sort, profiles.clone());
    queue.count_incoming_with(Box::new(metrics.queue_incoming()));
    let reports = Reports::new(client.clone(), config.instance.clone())
        .counting_drops_in(metrics.events_dropped());
    let sched = Scheduler::new(
        queue,
        profiles,
        Services {
            metrics: metrics.clone(),
            reports,
            readiness: readiness.clone(),
            runtime: tokio::runtime::Handle::current(),
            fatal: fatal.clone(),
            leadership: leadership.clone(),
        },
    );
    // A StickyBinding's countedPods keeps the pods the scheduler knows (bound or pending).
    let known_to = Arc::downgrade(&sched);
    history.set_alive(Arc::new(move |uid| {
        known_to.upgrade().is_none_or(|s| s.knows_pod(uid))
    }));
    // Its status writes carry the binding's conditions, judged from the nodes in the cache.
    let nodes_of = Arc::downgrade(&sched);
    history.set_nodes(Arc::new(move |name| {
        nodes_of.upgrade().and_then(|s| s.node(name))
    }));

    // Every watch registers itself in `readiness` here, before anything runs.
    let kubevirt = owners::kubevirt_served(&client).await;
    let requeue = sched.clone();
    let mut tasks = vec![
        tokio::spawn(fatal.forever(
            "the pod, node and namespace watches",
            eventhandlers::run_watches(
                eventhandlers::EventHandlers::new(sched.clone()),
                client.clone(),
                &readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the PodDisruptionBudget watch",
            disruption_budgets::run_watch(budgets, client.clone(), &readiness),
        )),
        tokio::spawn(fatal.forever(
            "the storage watches",
            eventhandlers::storage::run_watches(storage, sched.clone(), client.clone(), &readiness),
        )),
        tokio::spawn(fatal.forever(
            "the workload selector watches",
            selectors::run_watches(selectors, client.clone(), &readiness),
        )),
        tokio::spawn(fatal.forever(
            "the owner watches",
            owners::run_owner_watches(owners, client.clone(), &readiness, kubevirt),
        )),
        tokio::spawn(fatal.forever(
            "the StickyBinding controller",
            controller::sticky_binding::run(
                client.clone(),
                bindings,
                Arc::new(move |old, new| {
                    let (event, old, new) = crate::sticky::bindings::cluster_event(old, new);
                    requeue.queue.on_event(event, old, new)
                }),
                leadership.clone(),
                &readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the SchedulingProfile controller",
            controller::scheduling_profile::run(
                client.clone(),
                sched.clone(),
                handle,
                config.instance.clone(),
                leadership.clone(),
                &readiness,
            ),
        )),
    ];
    if let Some(lease) = config.lease.clone() {
        let (client, leadership, fatal, metrics) = (
            client.clone(),
            leadership.clone(),
            fatal.clone(),
            metrics.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let reason = leader::run(client, lease, leadership, move |leading| {
                metrics.set_leading(leading)
            })
            .await;
            // As kube-scheduler does: a replica that stopped leading exits, to start again as
            // a standby with fresh caches.
            fatal.report(format!("leadership lost: {reason}"));
        }));
    }

    let state = HttpState {
        metrics,
        readiness: readiness.clone(),
        fatal: fatal.clone(),
        leadership: leadership.clone(),
        sched: sched.clone(),
        client: client.clone(),
        explain_limit: endpoints::explain::limiter(),
    };
    for (what, addr, app) in [
        (
            "/metrics and /explain",
            config.http_addr,
            endpoints::main_router(state.clone()),
        ),
        (
            "/healthz and /readyz",
            config.health_addr,
            endpoints::health_router(state),
        ),
    ] {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr} for {what}"))?;
        tracing::info!(addr = %listener.local_addr().unwrap_or(addr), "serving {what}");
        tasks.push(tokio::spawn(fatal.forever(
            "an HTTP endpoint",
            async move {
                if let Err(e) = axum::serve(listener, app).await {
                    tracing::error!(error = %e, "an HTTP endpoint stopped");
                }
            },
        )));
    }

    let loop_sched = sched.clone();
    let loop_history = history.clone();
    let runtime = tokio::runtime::Handle::current();
    let loop_fatal = fatal.clone();
    let scheduling = std::thread::Builder::new()
        .name("scheduling-loop".into())
        .spawn(move || {
            loop_fatal.guard_thread("the scheduling loop", || {
                // kube-scheduler waits for its informers to sync; so does tether.
                if !loop_sched
                    .readiness
                    .wait_current(|| loop_sched.queue.is_closed())
                {
                    return;
                }
                if loop_sched.leadership.is_elected() {
                    tracing::info!("caches synced; waiting to lead");
                    loop {
                        let won = runtime.block_on(async {
                            tokio::time::timeout(
                                std::time::Duration::from_secs(1),
                                loop_sched.leadership.wait_leading(),
                            )
                            .await
                        });
                        if won.is_ok() {
                            break;
                        }
                        if loop_sched.queue.is_closed() {
                            return;
                        }
                    }
                }
                tracing::info!("caches synced; scheduling");
                // Binds made before a restart whose history write was lost are counted now, and
                // binds an earlier tether made that show up from now on as they come.
                let records = |sched: &Scheduler, pod: &Pod| {
                    let name = crate::k8s::pods::scheduler_name(pod);
                    sched
                        .profiles
                        .get(name)
                        .is_some_and(|p| p.uses(placement_recorder::NAME))
                };
                let (writer, spawner) = (loop_history.clone(), runtime.clone());
                let observed = Arc::downgrade(&loop_sched);
                let observer: BindObserver = Arc::new(move |pod| {
                    if observed.upgrade().is_some_and(|s| records(&s, &pod)) {
                        spawner.spawn(reconcile::record_missed_binds(writer.clone(), vec![pod]));
                    }
                });
                let recorded: Vec<_> = loop_sched
                    .bound_pods_then_observe(observer)
                    .into_iter()
                    .filter(|pod| records(&loop_sched, pod))
                    .collect();
                runtime.spawn(reconcile::record_missed_binds(loop_history, recorded));
                loop_sched.run_loop();
                if !loop_sched.queue.is_closed() {
                    loop_fatal.report("the scheduling loop ended");
                }
            })
        })
        .context("starting the scheduling loop")?;

    let died = tokio::select! {
        () = shutdown_signal() => None,
        part = died.recv() => part,
    };
    // No pod is taken from the queue from now on; the cycle under way ends, then the binds in
    // flight (and their history writes) finish while the watches still run.
    tracing::info!("shutting down: no new pods are scheduled; waiting for binds in flight");
    sched.queue.close();
    let _ = tokio::task::spawn_blocking(move || scheduling.join()).await;
    if died.is_none() {
        let grace_ends = tokio::time::Instant::now() + config.shutdown_grace;
        let left = sched.wait_binding_cycles(config.shutdown_grace).await;
        if left > 0 {
            tracing::warn!(binds = left, grace = ?config.shutdown_grace, "binds still in flight at the end of the grace period; the start-up reconcile counts their history");
        }
        let writes = history
            .wait_idle(grace_ends.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        if writes > 0 {
            tracing::warn!(bindings = writes, grace = ?config.shutdown_grace, "history writes still under way at the end of the grace period; the start-up reconcile counts their binds");
        }
    }
    if let Some(lease) = &config.lease
        && died.is_none()
        && leadership.is_leading()
    {
        // Binds are done: a standby may take over at once rather than when the Lease expires.
        leader::release(client.clone(), lease).await;
    }
    for task in tasks {
        task.abort();
    }
    tracing::info!("stopped");
    match died {
        Some(part) => Err(anyhow::anyhow!("{part}")),
        None => Ok(()),
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
