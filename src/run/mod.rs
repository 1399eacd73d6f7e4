//! `tether run`: the scheduler process. Watches the cluster, schedules the pods of every
//! profile it serves, and serves the endpoints of `crate::endpoints`. [`run`] is the sequence of
//! steps; each step is a function below it.
//!
//! The process outlives its schedulers. What lasts as long as the process: the API client,
//! metrics, the election and the endpoints. What a [`Session`] holds: the watches, caches,
//! queue, controllers and the scheduling loop, with a write gate of their own. A replica that
//! led and lost its Lease (a brownout, a hung renewal) drops its session (queue, assumed pods,
//! binds in flight), builds a new one that lists everything afresh, and stands by again; it
//! does not exit, so kubelet's restart backoff never stands between the cluster and a leader.
//! A part that dies still stops the process.

mod connect;
mod sessions;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::Context;

use crate::controller;
use crate::endpoints::{self, HttpState, Serving};
use crate::gate::WriteGate;
use crate::k8s::pod::Pod;
use crate::k8s::release::Release;
use crate::leader::{self, Leadership, LeaseConfig};
use crate::recorder::EventWriter;
use crate::scheduler::backend::queue::SchedulingQueue;
use crate::scheduler::eventhandlers::{self, EventHandlers};
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::informers::disruption_budgets::{self, DisruptionBudgets};
use crate::scheduler::informers::pod_groups::{self, PodGroupIndex};
use crate::scheduler::informers::selectors::{self, WorkloadSelectors};
use crate::scheduler::informers::storage::StorageIndex;

use crate::scheduler::framework::profile::ProfileRegistry;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::outcome::Reports;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::priority_sort;
use crate::scheduler::plugins::sticky::placement_recorder;
use crate::scheduler::{BindObserver, Scheduler, SchedulerState, Services};
use crate::sticky::bindings::BindingIndex;
use crate::sticky::history::HistoryWriter;
use crate::sticky::owners::{self, OwnerCache};
use crate::sticky::reconcile;
use crate::supervise::Fatal;
use crate::watch::Readiness;

use self::sessions::{HeldSession, Parts};

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
    /// How long a counted bind stays named in `countedPods` (see
    /// [`crate::sticky::history::bounds::SETTLE`], the default).
    pub history_settle: jiff::SignedDuration,
    /// Owner kinds (group-qualified) followed besides the built-in ones.
    pub owner_kinds: Vec<String>,
    /// The Lease this replica competes for; `None`: it runs alone and leads from the start.
    pub lease: Option<LeaseConfig>,
    /// The rate limits of bookkeeping writes (binds have none).
    pub budget: crate::k8s::budget::Budget,
    /// How long a watch that pods need may stay stale before it is loud (`/readyz` 503, the
    /// profiles' `WatchesCurrent=False`).
    pub watch_stale: std::time::Duration,
    /// The Kubernetes minor to schedule as, when set; else the API server's.
    pub release: Option<Release>,
    /// `--feature-gates`: the gates whose default this cluster changes.
    pub features: crate::k8s::features::FeatureGates,
    /// The namespace tether runs in (its pods are never sent to a profile by a
    /// namespaceSelector).
    pub namespace: String,
    /// The admission policy that vouches for an ExplainRequest's requester.
    pub explain_policy: String,
}

/// How a session ended.
enum Ended {
    /// SIGINT or SIGTERM.
    Signal,
    /// A part died (its name).
    Died(String),
    /// The term it led is over.
    TermOver,
}

/// Runs the scheduler until SIGINT or SIGTERM, or until a part dies: each step below builds
/// what the next needs, completely, before anything runs. A session whose term is over gives
/// way to a new one.
pub async fn run(config: RunConfig) -> anyhow::Result<()> {
    let metrics = Arc::new(Metrics::default());
    let client = connect::connect(&config, &metrics).await?;
    let (process, mut died) = Process::new(&config, metrics)?;
    connect::start_filter_pool(config.parallelism)?;
    let election = start_leader_election(&config, &client, &process);
    let mut tasks = serve_endpoints(&config, &client, &process).await?;
    tasks.push(tokio::spawn(sessions::watch_freed(
        process.sessions.clone(),
        process.metrics.clone(),
    )));
    let mut signal = std::pin::pin!(shutdown_signal());
    let ended = loop {
        let session = Session::start(&config, &client, &process).await?;
        let ended = tokio::select! {
            () = &mut signal => Ended::Signal,
            part = died.recv() => Ended::Died(part.unwrap_or_default()),
            () = session.gate.term_over() => Ended::TermOver,
        };
        match ended {
            Ended::TermOver => session.step_down().await,
            ended => {
                // The Lease is not renewed from now on (and, released, not taken again).
                if let Some(election) = &election {
                    election.abort();
                }
                session.shut_down(&config, &client, &process, &ended).await;
                break ended;
            }
        }
    };
    for task in tasks {
        task.abort();
    }
    if let Some(election) = election {
        election.abort();
    }
    tracing::info!("stopped");
    match ended {
        Ended::Died(part) => Err(anyhow::anyhow!("{part}")),
        _ => Ok(()),
    }
}

/// What every part of the process shares, across sessions: metrics, the supervisor that turns
/// a dead part into an exit, whether this replica leads, and the scheduler the endpoints serve.
struct Process {
    metrics: Arc<Metrics>,
    fatal: Fatal,
    leadership: Leadership,
    serving: Serving,
    /// The sessions whose parts are still in memory ([`sessions::watch_freed`]).
    sessions: Arc<std::sync::Mutex<Vec<HeldSession>>>,
}

impl Process {
    fn new(
        config: &RunConfig,
        metrics: Arc<Metrics>,
    ) -> anyhow::Result<(Self, tokio::sync::mpsc::UnboundedReceiver<String>)> {
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
            fatal,
            leadership,
            serving: Serving::default(),
            sessions: Arc::default(),
        };
        Ok((process, died))
    }
}

/// One scheduler and everything that feeds it, for at most one term of leading: its watches
/// (registered in its own readiness), its controllers, its scheduling thread, and the write
/// gate all their writes go through.
struct Session {
    /// When its term ended, shared with its entry in the process's held sessions.
    ended: Arc<std::sync::OnceLock<std::time::Instant>>,
    parts: Parts,
    gate: WriteGate,
    tasks: Vec<tokio::task::JoinHandle<()>>,
    scheduling: std::thread::JoinHandle<()>,
}

impl Session {
    /// Builds a scheduler with empty caches, starts its watches, controllers and scheduling
    /// thread, and makes it the one the endpoints serve.
    async fn start(
        config: &RunConfig,
        client: &kube::Client,
        process: &Process,
    ) -> anyhow::Result<Session> {
        let readiness = Readiness::loud_after(config.watch_stale);
        let gate = WriteGate::new(process.leadership.clone());
        let release = connect::release(config, client, &process.metrics).await?;
        let parts = build_scheduler(config, client, process, release, &readiness, &gate)?;
        let tasks =
            start_watches_and_controllers(config, client, process, &readiness, &gate, &parts).await;
        let scheduling = start_scheduling_loop(process, &parts)?;
        process.serving.set(parts.sched.clone(), readiness);
        let ended = Arc::default();
        crate::locks::lock(&process.sessions).push(HeldSession::of(&parts, Arc::clone(&ended)));
        Ok(Session {
            ended,
            parts,
            gate,
            tasks,
            scheduling,
        })
    }

    /// The term this session led is over: its gate admits nothing more. Its queue, assumed
    /// pods and binds in flight are dropped (what was not bound is the next leader's; binds
    /// whose history was not written are counted by the next leader's start-up reconcile),
    /// its watches stopped; the next session lists afresh.
    async fn step_down(self) {
        tracing::warn!(
            "the term this replica led is over: dropping its queue, assumed pods and binds in flight; standing by with fresh caches"
        );
        let _ = self.ended.set(std::time::Instant::now());
        self.gate.close();
        self.parts.sched.state.queue.close();
        let scheduling = self.scheduling;
        let _ = tokio::task::spawn_blocking(move || scheduling.join()).await;
        for task in &self.tasks {
            task.abort();
        }
        // The profiles' plugins hold the history writer, which reads the queue that holds the
        // profiles: cut, or the session never leaves memory.
        self.parts.sched.profiles.clear();
        // Their writes are refused now: binding cycles end at their next write.
        let left = self
            .parts
            .sched
            .wait_binding_cycles(std::time::Duration::from_secs(5))
            .await;
        if left > 0 {
            tracing::info!(
                binds = left,
                "binding cycles still waiting (Permit or PreBind); their writes will be refused"
            );
        }
    }

    /// No pod is taken from the queue from now on; the cycle under way ends. Then the gate
    /// admits nothing new but history: the binds already past it finish and are counted
    /// (within the grace), and once their history is written a leader that stopped cleanly
    /// gives its Lease up, so a standby takes over at its next try. A bind not past the gate
    /// stays with its pod for the next leader.
    async fn shut_down(
        self,
        config: &RunConfig,
        client: &kube::Client,
        process: &Process,
        ended: &Ended,
    ) {
        tracing::info!("shutting down: no new pods are scheduled; the binds under way finish");
        self.parts.sched.state.queue.close();
        let scheduling = self.scheduling;
        let _ = tokio::task::spawn_blocking(move || scheduling.join()).await;
        if matches!(ended, Ended::Died(_)) {
            return;
        }
        // Checked, though the flag is bounded: the end of the grace is never past the clock's.
        let now = tokio::time::Instant::now();
        let grace_ends = now.checked_add(config.shutdown_grace).unwrap_or(now);
        let leading = process.leadership.is_leading();
        self.gate.close_but_history();
        let left = self
            .parts
            .sched
            .wait_binding_cycles(config.shutdown_grace)
            .await;
        if left > 0 {
            tracing::warn!(binds = left, grace = ?config.shutdown_grace, "binds still in flight at the end of the grace period; the start-up reconcile counts their history");
        }
        let writes = self
            .parts
            .history
            .wait_idle(grace_ends.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        if writes > 0 {
            tracing::warn!(bindings = writes, grace = ?config.shutdown_grace, "history writes still under way at the end of the grace period; the start-up reconcile counts their binds");
        }
        self.gate.close();
        self.gate
            .drain(grace_ends.saturating_duration_since(tokio::time::Instant::now()))
            .await;
        if let Some(lease) = &config.lease
            && leading
        {
            leader::release(client.clone(), lease).await;
        }
        for task in &self.tasks {
            task.abort();
        }
    }
}

/// Every object a watch skips as unreadable gets a Warning event `Unreadable` (when the watch
/// first skips it, written through this session's gate), so its owner learns why what needs it
/// waits without reading tether's log.
fn report_unreadable_objects(events: EventWriter, client: kube::Client, gate: WriteGate) {
    crate::watch::on_skipped(Box::new(move |watch, object| {
        let (Some(api_version), Some(kind), Some(name)) =
            (&object.api_version, &object.kind, &object.name)
        else {
            return;
        };
        if kind == "SchedulingProfile" {
            // A profile also says so in its status, where GitOps tools and `kubectl wait` look.
            let (client, gate, name) = (client.clone(), gate.clone(), name.clone());
            let (generation, reason) = (object.generation, object.reason.clone());
            tokio::spawn(async move {
                let written = crate::controller::scheduling_profile::report_unreadable(
                    &client, &gate, &name, generation, &reason,
                )
                .await;
                if let Err(error) = written {
                    tracing::warn!(%error, profile = %name, "could not say on the profile that it cannot be read");
                }
            });
        }
        let regarding = k8s_openapi::api::core::v1::ObjectReference {
            api_version: Some(api_version.clone()),
            kind: Some(kind.clone()),
            name: Some(name.clone()),
            namespace: object.namespace.clone(),
            uid: object.uid.clone(),
            resource_version: object.version.clone(),
            ..Default::default()
        };
        let note = format!(
            "tether cannot read this {kind} ({}) and treats it as absent: whatever needs it waits until it is fixed or replaced (watch: {watch})",
            object.reason
        );
        let events = events.clone();
        tokio::spawn(async move {
            let reported = events
                .publish(
                    &regarding,
                    crate::recorder::EventType::Warning,
                    "Unreadable",
                    "Watch",
                    note,
                )
                .await;
            if let Err(error) = reported {
                tracing::debug!(%error, "could not report an unreadable object");
            }
        });
    }));
}

fn build_scheduler(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
    release: Release,
    readiness: &Arc<Readiness>,
    gate: &WriteGate,
) -> anyhow::Result<Parts> {
    let selectors = Arc::new(WorkloadSelectors::default());
    let owners = Arc::new(OwnerCache::with_kinds(config.owner_kinds.clone()));
    let bindings = Arc::new(BindingIndex::default());
    let storage = Arc::new(StorageIndex::default());
    let devices = Arc::new(DeviceIndex::default());
    let budgets = Arc::new(DisruptionBudgets::default());
    let pod_groups = Arc::new(PodGroupIndex::default());

    // Profiles come only from SchedulingProfile objects; the controller fills the registry.
    let profiles = Arc::new(ProfileRegistry::new());
    let queue_sort = priority_sort::build(None, &"plugins.queueSort".into(), &Handle::default())
        .map_err(|e| anyhow::anyhow!("building the queue's QueueSort: {e}"))?;
    let queue = SchedulingQueue::new(queue_sort, profiles.clone());
    queue.count_incoming_with(Box::new(process.metrics.queue_incoming()));
    let view = SchedulerState::new(queue, process.metrics.clone());

    // A StickyBinding's countedPods keeps the pods the scheduler knows, and its status writes
    // carry the conditions judged from the nodes in the cache.
    let history = Arc::new(
        HistoryWriter::new(
            client.clone(),
            config.instance.clone(),
            bindings.clone(),
            owners.clone(),
            process.metrics.clone(),
            gate.clone(),
        )
        .reading(Arc::new(view.clone()))
        .settling_after(config.history_settle),
    );

    let reports = Reports::new(client.clone(), config.instance.clone(), gate.clone())
        .counting_drops_in(process.metrics.events_dropped());
    let sched = Scheduler::new(
        view,
        profiles,
        Services {
            metrics: process.metrics.clone(),
            reports,
            readiness: readiness.clone(),
            runtime: tokio::runtime::Handle::current(),
            fatal: process.fatal.clone(),
            gate: gate.clone(),
            pod_groups: pod_groups.clone(),
        },
    );
    report_unreadable_objects(
        EventWriter::new(client.clone(), config.instance.clone(), gate.clone()),
        client.clone(),
        gate.clone(),
    );
    let handle = Handle {
        client: Some(client.clone()),
        storage: storage.clone(),
        devices: devices.clone(),
        budgets: budgets.clone(),
        pod_groups: pod_groups.clone(),
        events: Some(EventWriter::new(
            client.clone(),
            config.instance.clone(),
            gate.clone(),
        )),
        gate: gate.clone(),
        default_selectors: selectors.clone(),
        owners: owners.clone(),
        // The plugins read the bindings through the writer: binds not written yet count.
        bindings: history.clone(),
        history: Some(history.clone()),
        evictions: Arc::default(),
        activator: Some(sched.activator()),
        metrics: Some(process.metrics.clone()),
        release,
        features: {
            let (features, ignored) = config.features.for_release(release);
            if let Some(why) = ignored {
                tracing::warn!("{why}");
            }
            features
        },
    };
    Ok(Parts {
        sched,
        history,
        handle,
        selectors,
        owners,
        bindings,
        storage,
        devices,
        budgets,
        pod_groups,
    })
}

/// Every watch and both controllers, each registered in `readiness` before anything runs.
async fn start_watches_and_controllers(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
    readiness: &Arc<Readiness>,
    gate: &WriteGate,
    parts: &Parts,
) -> Vec<tokio::task::JoinHandle<()>> {
    let fatal = &process.fatal;
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
            "the DRA watches",
            eventhandlers::storage::run_device_watches(
                parts.devices.clone(),
                parts.sched.clone(),
                client.clone(),
                readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the PodGroup watch",
            pod_groups::run_watch(
                Arc::new(eventhandlers::storage::Feed {
                    index: parts.pod_groups.clone(),
                    events: parts.sched.state.queue.clone(),
                }),
                client.clone(),
                readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the Coscheduling PodGroup watch",
            pod_groups::run_coscheduling_watch(
                Arc::new(pod_groups::CoschedulingFeed {
                    index: parts.pod_groups.clone(),
                    events: parts.sched.state.queue.clone(),
                }),
                client.clone(),
                readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the CompositePodGroup watch",
            pod_groups::composite::run_composite_watch(
                Arc::new(pod_groups::composite::CompositeFeed {
                    index: parts.pod_groups.clone(),
                    events: parts.sched.state.queue.clone(),
                }),
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
            owners::run_owner_watches(parts.owners.clone(), client.clone(), readiness),
        )),
        tokio::spawn(fatal.forever("the room holds' expiry", {
            let sched = Arc::downgrade(&parts.sched);
            async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(1));
                loop {
                    tick.tick().await;
                    match sched.upgrade() {
                        Some(sched) => sched.state.room.expire_holds(),
                        None => std::future::pending::<()>().await,
                    }
                }
            }
        })),
        tokio::spawn(fatal.forever(
            "the live migration follower",
            crate::sticky::migrations::follow(
                parts.history.clone(),
                client.clone(),
                records_history(&parts.sched),
                gate.leadership().clone(),
            ),
        )),
        tokio::spawn(fatal.forever(
            "the StickyBinding controller",
            controller::sticky_binding::run(
                client.clone(),
                parts.bindings.clone(),
                requeue.state.queue.clone(),
                gate.clone(),
                readiness,
            ),
        )),
        tokio::spawn(fatal.forever(
            "the ExplainRequest answerer",
            endpoints::requests::run(
                client.clone(),
                parts.sched.clone(),
                gate.clone(),
                config.explain_policy.clone(),
            ),
        )),
        tokio::spawn(fatal.forever(
            "the SchedulingProfile controller",
            controller::scheduling_profile::run(
                client.clone(),
                parts.sched.clone(),
                parts.handle.clone(),
                config.instance.clone(),
                gate.clone(),
                readiness,
                config.namespace.clone(),
            ),
        )),
    ]
}

/// Competes for the Lease when one is configured, for as long as the process runs: a replica
/// that stopped leading stands by and competes again (its session starts over, see [`run`]).
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
    Some(tokio::spawn(fatal.forever(
        "the leader election",
        leader::run(client, lease, leadership, move |event| match event {
            leader::Election::Leading(leading) => metrics.set_leading(leading),
            leader::Election::Unreachable(unreachable) => {
                metrics.set_lease_unreachable(unreachable)
            }
        }),
    )))
}

/// `/metrics` and `/explain` on `--http-addr`, `/healthz` and `/readyz` on `--health-addr`.
async fn serve_endpoints(
    config: &RunConfig,
    client: &kube::Client,
    process: &Process,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<()>>> {
    let state = HttpState {
        metrics: process.metrics.clone(),
        fatal: process.fatal.clone(),
        leadership: process.leadership.clone(),
        serving: process.serving.clone(),
        client: client.clone(),
        explain_limit: endpoints::explain::limiter(),
    };
    let mut tasks = Vec::new();
    for (what, addr, app, limits) in [
        (
            "/metrics and /explain",
            config.http_addr,
            endpoints::main_router(state.clone()),
            endpoints::serve::Limits::MAIN,
        ),
        (
            "/healthz and /readyz",
            config.health_addr,
            endpoints::health_router(state.clone()),
            endpoints::serve::Limits::HEALTH,
        ),
    ] {
        let listener = tokio::net::TcpListener::bind(addr)
            .await
            .with_context(|| format!("binding {addr} for {what}"))?;
        tracing::info!(addr = %listener.local_addr().unwrap_or(addr), "serving {what}");
        tasks.push(tokio::spawn(process.fatal.forever(
            "an HTTP endpoint",
            async move {
                let trusted = endpoints::serve::trusted_sources();
                if let Err(e) = endpoints::serve::serve(listener, app, limits, trusted).await {
                    tracing::error!(error = %e, "an HTTP endpoint stopped");
                }
            },
        )));
    }
    Ok(tasks)
}

/// The scheduling thread: waits for the caches and for leadership, counts the binds whose
/// history a restart lost, then runs the scheduling loop until the queue closes or the term is
/// over.
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
                crate::scheduler::schedule_one::run_loop(&sched);
                if !sched.state.queue.is_closed()
                    && sched.binder.gate.admits(crate::gate::Write::Bind)
                {
                    fatal.report("the scheduling loop ended");
                }
            })
        })
        .context("starting the scheduling loop")
}

/// Waits, on the scheduling thread, until every watch has listed (as kube-scheduler waits for
/// its informers) and this replica leads; `false` when the queue closed first.
fn wait_to_schedule(sched: &Scheduler, runtime: &tokio::runtime::Handle) -> bool {
    if !sched
        .readiness
        .wait_current(|| sched.state.queue.is_closed())
    {
        return false;
    }
    let leadership = sched.binder.gate.leadership();
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
            if sched.state.queue.is_closed() {
                return false;
            }
        }
    }
    true
}

/// Whether a pod's binds are counted in history: its profile runs PlacementRecorder (read
/// through a weak reference, so that the scheduler of a session that ended is not kept).
fn records_history(sched: &Arc<Scheduler>) -> crate::sticky::migrations::Records {
    let observed = Arc::downgrade(sched);
    Arc::new(move |pod: &Pod| {
        observed.upgrade().is_some_and(|s| {
            s.profiles
                .get(crate::k8s::pods::scheduler_name(pod))
                .is_some_and(|p| p.uses(placement_recorder::NAME))
        })
    })
}

/// Binds made before a restart whose history write was lost are counted now, and binds an
/// earlier tether made that show up from now on as they come.
fn record_missed_binds(
    sched: &Arc<Scheduler>,
    history: &Arc<HistoryWriter>,
    runtime: &tokio::runtime::Handle,
) {
    let records = records_history(sched);
    let reads: reconcile::Reads = {
        let observed = Arc::downgrade(sched);
        Arc::new(move |pod, workload| {
            observed.upgrade().is_some_and(|s| {
                s.profiles
                    .get(crate::k8s::pods::scheduler_name(pod))
                    .is_some_and(|p| {
                        crate::scheduler::plugins::sticky::profile_reads_history_of(
                            &p, pod, workload,
                        )
                    })
            })
        })
    };
    // The cache holds the observer, and the history writer reads the cache: the observer holds
    // the writer weakly, or the two would keep each other (and a lost term's session) alive.
    let (writer, spawner) = (Arc::downgrade(history), runtime.clone());
    let observer: BindObserver = {
        let (records, reads) = (records.clone(), reads.clone());
        Arc::new(move |pod| {
            let Some(writer) = writer.upgrade() else {
                return;
            };
            if records(&pod) {
                spawner.spawn(reconcile::record_missed_binds(
                    writer,
                    vec![pod],
                    reads.clone(),
                ));
            }
        })
    };
    let recorded: Vec<_> = sched
        .bound_pods_then_observe(observer)
        .into_iter()
        .filter(|pod| records(pod))
        .collect();
    runtime.spawn(reconcile::record_missed_binds(
        history.clone(),
        recorded,
        reads,
    ));
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
