//! `tether run`: the scheduler process. Watches the cluster, schedules the pods of every
//! profile it serves, and serves `/metrics`, `/healthz` and `/readyz`.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use anyhow::Context;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::get;

use crate::controller;
use crate::history::{BindingIndex, HistoryWriter};
use crate::owners::{self, OwnerCache};
use crate::scheduler::default_selectors::WorkloadSelectors;
use crate::scheduler::framework::registry::Handle;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::plugins::priority_sort;
use crate::scheduler::profile::ProfileRegistry;
use crate::scheduler::queue::ClusterEvent;
use crate::scheduler::queue::SchedulingQueue;
use crate::scheduler::report::Reports;
use crate::scheduler::{Scheduler, Services, watch};

/// How `tether run` is configured.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Where `/metrics`, `/healthz` and `/readyz` are served.
    pub http_addr: SocketAddr,
    /// Threads for Filter and Score.
    pub parallelism: usize,
    /// This replica's name, for events.
    pub instance: Option<String>,
}

#[derive(Clone)]
struct HttpState {
    metrics: Arc<Metrics>,
    synced: Arc<AtomicUsize>,
    /// How many watches must have listed.
    watches: usize,
}

/// What must have listed once before scheduling starts: the pod, node and namespace watches,
/// the SchedulingProfiles, the StickyBindings, and the ReplicaSet, Deployment, StatefulSet
/// and Job owner watches; plus the VirtualMachineInstance and VirtualMachine watches where
/// the cluster serves KubeVirt's API.
const WATCHES: usize = 9;

/// Runs the scheduler until SIGINT or SIGTERM.
pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    let client = kube::Client::try_default()
        .await
        .context("connecting to the API server")?;
    rayon::ThreadPoolBuilder::new()
        .num_threads(config.parallelism.max(1))
        .thread_name(|i| format!("filter-score-{i}"))
        .build_global()
        .context("starting the Filter/Score thread pool")?;

    let selectors = Arc::new(WorkloadSelectors::default());
    let owners = Arc::new(OwnerCache::default());
    let bindings = Arc::new(BindingIndex::default());
    let handle = Handle {
        client: Some(client.clone()),
        default_selectors: selectors.clone(),
        owners: owners.clone(),
        bindings: bindings.clone(),
    };
    // Profiles come only from SchedulingProfile objects; the controller fills the registry.
    let profiles = Arc::new(ProfileRegistry::new());
    let queue_sort = priority_sort::build(None, "plugins.queueSort")
        .map_err(|e| anyhow::anyhow!("building the queue's QueueSort: {e}"))?;
    let queue = SchedulingQueue::new(queue_sort);

    let metrics = Arc::new(Metrics::default());
    let reports = Reports::new(client.clone(), config.instance.clone());
    let sched = Scheduler::new(
        queue,
        profiles,
        Services {
            metrics: metrics.clone(),
            reports,
            history: Some(Arc::new(HistoryWriter::new(
                client.clone(),
                config.instance.clone(),
                bindings.clone(),
            ))),
            owners: owners.clone(),
            runtime: tokio::runtime::Handle::current(),
        },
    );
    let synced = Arc::new(AtomicUsize::new(0));
    let kubevirt = owners::kubevirt_served(&client).await;
    let must_list = WATCHES + if kubevirt { 2 } else { 0 };
    let owner_watches = tokio::spawn(owners::run_owner_watches(
        owners,
        client.clone(),
        synced.clone(),
        kubevirt,
    ));
    let requeue = sched.clone();
    let binding_controller = tokio::spawn(controller::sticky_binding::run(
        client.clone(),
        bindings.clone(),
        Arc::new(move || {
            requeue
                .queue
                .move_all_to_active_or_backoff(ClusterEvent::BindingChanged)
        }),
        synced.clone(),
    ));

    let profile_controller = tokio::spawn(controller::scheduling_profile::run(
        client.clone(),
        sched.clone(),
        handle.clone(),
        config.instance.clone(),
        synced.clone(),
    ));
    let selector_watches = tokio::spawn(watch::run_selector_watches(selectors, client.clone()));
    let watches = tokio::spawn(watch::run_watches(
        sched.clone(),
        client.clone(),
        synced.clone(),
    ));

    let listener = tokio::net::TcpListener::bind(config.http_addr)
        .await
        .with_context(|| format!("binding the HTTP endpoint {}", config.http_addr))?;
    tracing::info!(addr = %listener.local_addr().unwrap_or(config.http_addr), "serving /metrics, /healthz, /readyz");
    let app = Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(ready))
        .with_state(HttpState {
            metrics,
            synced: synced.clone(),
            watches: must_list,
        });
    let http = tokio::spawn(async move { axum::serve(listener, app).await });

    let loop_sched = sched.clone();
    let loop_synced = synced.clone();
    let loop_bindings = bindings;
    let scheduling = std::thread::Builder::new()
        .name("scheduling-loop".into())
        .spawn(move || {
            // kube-scheduler waits for its informers to sync; so does tether.
            while loop_synced.load(Ordering::Acquire) < must_list {
                if loop_sched.queue.is_closed() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(20));
            }
            tracing::info!("caches synced; scheduling");
            loop_sched.reconcile_history(loop_bindings.as_ref());
            loop_sched.run_loop();
        })
        .context("starting the scheduling loop")?;

    shutdown_signal().await;
    tracing::info!("shutting down");
    sched.queue.close();
    watches.abort();
    owner_watches.abort();
    binding_controller.abort();
    profile_controller.abort();
    selector_watches.abort();
    http.abort();
    let _ = tokio::task::spawn_blocking(move || scheduling.join()).await;
    Ok(())
}

async fn serve_metrics(
    State(state): State<HttpState>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

async fn ready(State(state): State<HttpState>) -> (StatusCode, String) {
    let synced = state.synced.load(Ordering::Acquire);
    if synced >= state.watches {
        (StatusCode::OK, "ok".into())
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!("caches not synced ({synced} of {} listed)", state.watches),
        )
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
