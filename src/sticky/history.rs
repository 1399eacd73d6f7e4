//! The exactly-once StickyBinding history writes: every bind of a pod of a workload whose
//! profile runs StickyNode or PlacementHistory is counted once in the workload's binding, by the
//! PlacementRecorder PostBind plugin (and, after a restart, by [`super::reconcile`]).

use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::api::sticky_binding::conditions as sticky_binding;
use crate::api::{BindRecord, Release, StickyBinding, StickyBindingSpec, StickyBindingStatus};
use crate::gate::{Write, WriteGate};
use crate::inflight::InFlight;
use crate::k8s::api_errors::{denied_for_now, maybe_applied, retryable};
use crate::k8s::{budget, pods};
use crate::locks;
use crate::recorder::{EventType, EventWriter};
use crate::scheduler::metrics::Metrics;
use crate::sticky::bindings::{BindingIndex, BindingLookup};
use crate::sticky::workload::{self, OwnerLookup, Workload};
use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How many binds `status.recentBinds` keeps.
pub const RECENT_BINDS: usize = 16;

/// Errors of a history write, each naming the binding.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("reading StickyBinding {namespace}/{name}: {source}")]
    Get {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("creating StickyBinding {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("writing the status of StickyBinding {namespace}/{name}: {source}")]
    Update {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error(
        "not writing StickyBinding {namespace}/{name}: this replica no longer leads (the next leader's start-up reconcile counts the bind)"
    )]
    NotLeading { namespace: String, name: String },
}

/// The status after counting `pod_uid` bound to `node`, or `None` when that pod is already
/// counted (a repeated report of the same bind). Pure.
pub fn count_bind(
    status: &StickyBindingStatus,
    pod_uid: &str,
    pod_name: &str,
    node: &str,
    now: Time,
) -> Option<StickyBindingStatus> {
    if status.recent_binds.iter().any(|b| b.pod_uid == pod_uid)
        || status.counted_pods.iter().any(|u| u == pod_uid)
    {
        return None;
    }
    let mut next = status.clone();
    next.counted_pods.push(pod_uid.to_string());
    // Saturating: a count edited by hand to the largest integer stays there, never wraps.
    let on_node = next.node_count.entry(node.to_string()).or_insert(0);
    *on_node = (*on_node).max(0).saturating_add(1);
    next.schedule_count = next.schedule_count.max(0).saturating_add(1);
    next.latest = Some(node.to_string());
    next.last_schedule_time = Some(now.clone());
    next.recent_binds.push(BindRecord {
        pod_uid: pod_uid.to_string(),
        pod_name: pod_name.to_string(),
        node: node.to_string(),
        time: now,
    });
    let excess = next.recent_binds.len().saturating_sub(RECENT_BINDS);
    next.recent_binds.drain(..excess);
    Some(next)
}

/// A new StickyBinding for `workload`, owned by it (so that it is garbage-collected with it).
pub fn new_binding(workload: &Workload) -> StickyBinding {
    let mut binding = StickyBinding::new(
        &workload.binding_name(),
        StickyBindingSpec {
            workload_ref: workload.workload_ref(),
            node_name: None,
        },
    );
    binding.metadata = ObjectMeta {
        name: Some(workload.binding_name()),
        namespace: Some(workload.namespace.clone()),
        labels: Some(
            [
                (
                    "tether.dev/workload-kind".to_string(),
                    workload.kind.to_lowercase(),
                ),
                (
                    "tether.dev/workload-name".to_string(),
                    truncate_label(&workload.name),
                ),
            ]
            .into(),
        ),
        owner_references: (!workload.uid.is_empty()).then(|| {
            vec![OwnerReference {
                api_version: workload.api_version.clone(),
                kind: workload.kind.clone(),
                name: workload.name.clone(),
                uid: workload.uid.clone(),
                controller: Some(false),
                block_owner_deletion: None,
            }]
        }),
        ..Default::default()
    };
    binding
}

fn truncate_label(v: &str) -> String {
    v.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.', '_'])
        .to_string()
}

/// What a history write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The bind was counted.
    Counted,
    /// The binding had counted this pod already (a repeated report); nothing was written.
    AlreadyCounted,
}

/// A bind waiting to be counted in its workload's binding.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Bind {
    pod_uid: String,
    pod_name: String,
    node: String,
}

/// The binds of one binding not written yet, and whether a writer is at it.
struct Pending {
    workload: Workload,
    binds: Vec<Bind>,
    /// The binds of the write in flight.
    writing_now: Vec<Bind>,
    writing: bool,
}

/// How many bindings are written at once. Binds wait for no history write (the binding cycle
/// gives back its place among the binds first), so this bounds the writes, and the connections
/// they hold, when binds outpace them; binds to a binding that waits join its next write.
pub const WRITES_IN_FLIGHT: usize = 64;

/// How long to wait before retrying a write, doubling up to the max.
const RETRY_INITIAL: Duration = Duration::from_millis(100);
const RETRY_MAX: Duration = Duration::from_secs(5);

/// The next retry delay after `delay`, and the delay to sleep now with up to ±25% jitter, so
/// that writers that collided do not collide again.
fn next_delay(delay: Duration) -> (Duration, Duration) {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos());
    let jitter = f64::from(nanos % 1000) / 1000.0 * 0.5 + 0.75;
    (
        delay.saturating_mul(2).min(RETRY_MAX),
        delay.mul_f64(jitter),
    )
}

/// Waits before retrying after `error`, and doubles `delay`.
async fn backoff(delay: &mut Duration, error: &kube::Error) {
    let (next, now) = next_delay(*delay);
    if denied_for_now(error) && *delay >= RETRY_MAX {
        // Denied for longer than an API server restart explains: say so, once per wait.
        tracing::warn!(error = %error, wait = ?now, "history write denied; retrying");
    } else {
        tracing::debug!(error = %error, wait = ?now, "retrying a history write");
    }
    *delay = next;
    tokio::time::sleep(now).await;
}

/// Writes StickyBinding history: exactly once per bound pod. Each binding has one writer at a
/// time: binds that arrive while a write is in flight are counted together in the next write,
/// so a burst of binds to one workload costs a few writes, not one conflict race per bind.
/// Writes carry a resourceVersion precondition and are retried with backoff and jitter on
/// conflicts, throttling, server errors and lost connections until they land.
pub struct HistoryWriter {
    client: kube::Client,
    events: EventWriter,
    index: Arc<BindingIndex>,
    owners: Arc<dyn OwnerLookup>,
    metrics: Arc<Metrics>,
    pending: Mutex<HashMap<(String, String), Pending>>,
    /// Turns to write, [`WRITES_IN_FLIGHT`] at once.
    in_flight: tokio::sync::Semaphore,
    /// The bindings `record_bind_later` queued that are not written yet.
    writers: InFlight,
    /// The bindings queued by `record_bind_later`, each once while its binds wait, and the
    /// writer tasks that write them (started with the first).
    turns: Mutex<std::collections::VecDeque<(String, String)>>,
    turn_queued: tokio::sync::Notify,
    workers: std::sync::OnceLock<()>,
    /// The scheduler's pods and nodes: `countedPods` keeps only the pods it knows, and each
    /// status write carries the binding's conditions judged from its nodes. `None` (unit
    /// tests): nothing is dropped, and the conditions are left to the controller.
    view: Option<Arc<dyn SchedulerView>>,
    /// How many reconciles of binds made before a restart run now; none is dropped from
    /// `countedPods` meanwhile (see [`HistoryWriter::pause_pruning`]).
    reconciling: Arc<AtomicUsize>,
    /// Asked before every write: only a leader writes history.
    gate: WriteGate,
}

/// While it lives, no pod is dropped from any binding's `countedPods`.
pub struct PruningPaused(Arc<AtomicUsize>);

impl Drop for PruningPaused {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// What the writer reads of the scheduler's own state (its cache and queue), handed in when the
/// writer is built.
pub trait SchedulerView: Send + Sync {
    /// Whether the scheduler knows the pod of `uid`: bound or assumed, or pending.
    fn knows_pod(&self, uid: &str) -> bool;
    /// The Node object of `name`, while the node exists.
    fn node(&self, name: &str) -> Option<Arc<Node>>;
}

impl HistoryWriter {
    /// `index` is read for the current binding (no GET unless it is stale) and receives what
    /// each write returns, so the plugins see a bind's history before the watch delivers it.
    /// `owners` resolves a pod's workload; `metrics` counts each write's result.
    pub fn new(
        client: kube::Client,
        instance: Option<String>,
        index: Arc<BindingIndex>,
        owners: Arc<dyn OwnerLookup>,
        metrics: Arc<Metrics>,
    ) -> Self {
        HistoryWriter {
            events: EventWriter::new(client.clone(), instance),
            client,
            index,
            owners,
            metrics,
            pending: Mutex::new(HashMap::new()),
            in_flight: tokio::sync::Semaphore::new(WRITES_IN_FLIGHT),
            writers: InFlight::default(),
            turns: Mutex::new(std::collections::VecDeque::new()),
            turn_queued: tokio::sync::Notify::new(),
            workers: std::sync::OnceLock::new(),
            view: None,
            reconciling: Arc::new(AtomicUsize::new(0)),
            gate: WriteGate::alone(),
        }
    }

    /// Reads the scheduler's pods and nodes through `view`: `countedPods` holds only the
    /// workload's pods the scheduler knows, and status writes carry the binding's conditions
    /// (the StickyBinding controller then has nothing to add).
    pub fn reading(mut self, view: Arc<dyn SchedulerView>) -> Self {
        self.view = Some(view);
        self
    }

    /// Writes (history and its events) only what `gate` admits.
    pub fn gated_by(mut self, gate: WriteGate) -> Self {
        self.events = self.events.gated_by(gate.clone());
        self.gate = gate;
        self
    }

    /// Keeps every pod in `countedPods` until the guard is dropped. The reconcile of binds
    /// made before a restart holds it: it decides from the pods bound when it started, and a
    /// pod deleted since then and dropped from `countedPods` would look never counted to it.
    pub fn pause_pruning(&self) -> PruningPaused {
        self.reconciling.fetch_add(1, Ordering::SeqCst);
        PruningPaused(self.reconciling.clone())
    }

    fn pruning_paused(&self) -> bool {
        self.reconciling.load(Ordering::SeqCst) > 0
    }

    /// The bindings this writer reads and updates.
    pub fn bindings(&self) -> &BindingIndex {
        &self.index
    }

    /// Counts the bind of `pod` to `node` in its workload's binding, once, and counts the
    /// outcome in `tether_history_writes_total`. When a write to that binding is in flight the
    /// bind joins the next one, which the caller in charge makes; otherwise this call writes
    /// until no bind of the binding waits. A failure is logged, never returned: the bind stands,
    /// and the start-up reconcile of a later restart counts what was missed.
    pub async fn record_bind(&self, pod: &Pod, node: &str) {
        if let Some(key) = self.enqueue(pod, node) {
            self.write_pending(&key).await;
        }
    }

    /// Like [`HistoryWriter::record_bind`], without waiting: the binding's turn is queued for
    /// one of [`WRITES_IN_FLIGHT`] writer tasks, so that a binding cycle ends when its bind is
    /// answered (the plugins see the bind at once all the same, see the [`BindingLookup`] of
    /// the writer). A queued turn is its binding's key; its binds wait in the pending map, so a
    /// burst of thousands of binds waits as data, not as thousands of tasks.
    /// [`HistoryWriter::wait_idle`] waits for these writes.
    pub fn record_bind_later(self: &Arc<Self>, pod: &Pod, node: &str) {
        let workload = workload::resolve(pod, self.owners.as_ref());
        self.record_workload_bind_later(pod, &workload, node);
    }

    /// As [`HistoryWriter::record_bind_later`], for a pod whose workload is known already (the
    /// scheduling cycle resolved it).
    pub fn record_workload_bind_later(
        self: &Arc<Self>,
        pod: &Pod,
        workload: &Workload,
        node: &str,
    ) {
        let Some(key) = self.enqueue_for(pod, workload, node) else {
            return;
        };
        self.writers.start();
        locks::lock(&self.turns).push_back(key);
        self.turn_queued.notify_one();
        self.workers.get_or_init(|| {
            for _ in 0..WRITES_IN_FLIGHT {
                let this = Arc::downgrade(self);
                tokio::spawn(async move {
                    while let Some(writer) = this.upgrade() {
                        writer.take_turn().await;
                    }
                });
            }
        });
    }

    /// Writes the binds of the next queued binding, or waits for one to be queued.
    async fn take_turn(&self) {
        let next = locks::lock(&self.turns).pop_front();
        let Some(key) = next else {
            // Woken by the next turn queued (or by one queued since the queue was found empty:
            // `notify_one` keeps a permit when nobody waits).
            self.turn_queued.notified().await;
            return;
        };
        self.write_pending(&key).await;
        self.writers.finish();
    }

    /// Waits until no write started by [`HistoryWriter::record_bind_later`] runs, at most
    /// `grace`; returns how many still run.
    pub async fn wait_idle(&self, grace: Duration) -> usize {
        self.writers.wait(grace).await
    }

    /// Adds the bind to its binding's pending binds; returns the binding's key when the caller
    /// is to write them (no write to that binding is under way).
    fn enqueue(&self, pod: &Pod, node: &str) -> Option<(String, String)> {
        let workload = workload::resolve(pod, self.owners.as_ref());
        self.enqueue_for(pod, &workload, node)
    }

    /// As [`HistoryWriter::enqueue`], for a pod whose workload is known.
    fn enqueue_for(&self, pod: &Pod, workload: &Workload, node: &str) -> Option<(String, String)> {
        if let Some(owner) = &workload.pending_owner {
            // Not this pod's binding to guess at; a restart's reconcile counts it later.
            tracing::warn!(pod = %pods::key(pod), owner = %owner, "the pod's owner is not known yet; its bind is not recorded now");
            self.metrics.history_write("failed");
            return None;
        }
        let key = (workload.namespace.clone(), workload.binding_name());
        let bind = Bind {
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            node: node.to_string(),
        };
        let mut pending = locks::lock(&self.pending);
        let entry = pending.entry(key.clone()).or_insert_with(|| Pending {
            workload: workload.clone(),
            binds: Vec::new(),
            writing_now: Vec::new(),
            writing: false,
        });
        entry.binds.push(bind);
        if entry.writing {
            return None;
        }
        entry.writing = true;
        Some(key)
    }

    /// Writes the binds waiting for `key`, batch after batch, until none is left.
    async fn write_pending(&self, key: &(String, String)) {
        loop {
            // Binds that arrive while this waits for its turn join the batch.
            let _turn = self.in_flight.acquire().await;
            let (workload, batch) = {
                let mut pending = locks::lock(&self.pending);
                let Some(entry) = pending.get_mut(key) else {
                    return;
                };
                if entry.binds.is_empty() {
                    pending.remove(key);
                    return;
                }
                entry.writing_now = std::mem::take(&mut entry.binds);
                (entry.workload.clone(), entry.writing_now.clone())
            };
            let written = self.write(&workload, &batch).await;
            if let Some(entry) = locks::lock(&self.pending).get_mut(key) {
                entry.writing_now.clear();
            }
            match written {
                Ok(counted) => {
                    for _ in 0..counted {
                        self.metrics.history_write("recorded");
                    }
                    for _ in counted..batch.len() {
                        self.metrics.history_write("duplicate");
                    }
                }
                Err(e) => {
                    tracing::warn!(binding = %format!("{}/{}", key.0, key.1), binds = batch.len(), error = %e, "could not record binds in the StickyBinding");
                    for _ in &batch {
                        self.metrics.history_write("failed");
                    }
                }
            }
        }
    }

    /// The API client the writer writes with.
    pub fn client(&self) -> &kube::Client {
        &self.client
    }

    /// The workload `pod` belongs to, as the writer resolves it.
    pub fn workload_of(&self, pod: &Pod) -> Workload {
        workload::resolve(pod, self.owners.as_ref())
    }

    /// Counts `pod` bound to `node` in its workload's binding now, creating the binding if
    /// missing (one write, not batched).
    pub async fn record(
        &self,
        workload: &Workload,
        pod: &Pod,
        node: &str,
    ) -> Result<Recorded, HistoryError> {
        let bind = Bind {
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            node: node.to_string(),
        };
        let counted = self.write(workload, std::slice::from_ref(&bind)).await?;
        Ok(if counted == 1 {
            Recorded::Counted
        } else {
            Recorded::AlreadyCounted
        })
    }

    /// Counts `binds` in the workload's binding in one status write, creating the binding if
    /// missing, retrying until it lands or fails for good. Returns how many were new.
    async fn write(&self, workload: &Workload, binds: &[Bind]) -> Result<usize, HistoryError> {
        let namespace = workload.namespace.clone();
        let name = workload.binding_name();
        let api: Api<StickyBinding> = Api::namespaced(self.client.clone(), &namespace);
        let mut delay = RETRY_INITIAL;
        // Set once a status write got no definite answer: it may have been applied.
        let mut maybe_landed = false;
        // The index's copy first; after a conflict, the API server's. A binding the index
        // does not hold is created straight away (one call, not a read that finds nothing and
        // then a create); when it exists after all (the watch lagging), it is read.
        let mut cached = self.index.get(&namespace, &name);
        let mut create_first = cached.is_none();
        loop {
            if !self.gate.admits(Write::History) {
                return Err(HistoryError::NotLeading { namespace, name });
            }
            budget::get().history.take().await;
            let fetched = match cached.take() {
                Some(b) => Ok(Some(StickyBinding::clone(&b))),
                None if create_first => Ok(None),
                None => api.get_opt(&name).await,
            };
            create_first = false;
            let current = match fetched {
                Ok(Some(b)) => b,
                Ok(None) => match api
                    .create(&PostParams::default(), &new_binding(workload))
                    .await
                {
                    Ok(b) => {
                        self.index.upsert(b.clone());
                        b
                    }
                    // It exists: read it at once.
                    Err(kube::Error::Api(e)) if e.code == 409 && e.reason == "AlreadyExists" => {
                        continue;
                    }
                    Err(e) if retryable(&e) => {
                        backoff(&mut delay, &e).await;
                        continue;
                    }
                    Err(source) => {
                        return Err(HistoryError::Create {
                            namespace,
                            name,
                            source,
                        });
                    }
                },
                Err(e) if retryable(&e) => {
                    backoff(&mut delay, &e).await;
                    continue;
                }
                Err(source) => {
                    return Err(HistoryError::Get {
                        namespace,
                        name,
                        source,
                    });
                }
            };
            let status = current.status.clone().unwrap_or_default();
            // A write of this batch whose answer was lost may have landed: its newest bind is
            // then recorded, and the whole batch with it (a status write is all or nothing).
            if maybe_landed
                && binds
                    .last()
                    .is_some_and(|b| status.recent_binds.iter().any(|r| r.pod_uid == b.pod_uid))
            {
                return Ok(binds.len());
            }
            let now = Time(jiff::Timestamp::now());
            let mut next = status;
            let mut counted = 0;
            let mut released = None;
            for bind in binds {
                if let Some(after) = count_bind(
                    &next,
                    &bind.pod_uid,
                    &bind.pod_name,
                    &bind.node,
                    now.clone(),
                ) {
                    next = after;
                    counted += 1;
                    released = released.or_else(|| current.released_by_bind_to(&bind.node));
                }
            }
            if counted == 0 {
                return Ok(0);
            }
            if let Some(view) = self.view.as_ref().filter(|_| !self.pruning_paused()) {
                let fresh = |u: &String| binds.iter().any(|b| b.pod_uid == *u);
                next.counted_pods.retain(|u| fresh(u) || view.knows_pod(u));
            }
            if let Some(old) = &released {
                next.released_from = Some(Release {
                    node: old.clone(),
                    time: now,
                });
            }
            let mut updated = current.clone();
            updated.status = Some(next);
            self.set_conditions(&mut updated);
            match api
                .replace_status(&name, &PostParams::default(), &updated)
                .await
            {
                Ok(written) => {
                    self.index.upsert(written);
                    if let (Some(old), Some(last)) = (released, binds.last()) {
                        self.announce_release(&current, &old, &last.node).await;
                    }
                    return Ok(counted);
                }
                // Deleted since it was read (a person freeing the workload, or a copy from
                // before an outage): the binds still count, in a binding created anew.
                Err(kube::Error::Api(e)) if e.code == 404 => {
                    self.index.remove(&namespace, &name);
                    create_first = true;
                }
                Err(e) if retryable(&e) => {
                    maybe_landed |= maybe_applied(&e);
                    backoff(&mut delay, &e).await;
                }
                Err(source) => {
                    return Err(HistoryError::Update {
                        namespace,
                        name,
                        source,
                    });
                }
            }
        }
    }

    /// Sets the conditions and `observedGeneration` the StickyBinding controller would set on
    /// `binding`, its pinned node judged from the scheduler's cache.
    fn set_conditions(&self, binding: &mut StickyBinding) {
        let Some(view) = &self.view else {
            return;
        };
        let availability = binding
            .pin()
            .map(|pin| sticky_binding::node_availability(pin, view.node(pin).as_deref()));
        let desired = sticky_binding::desired_conditions(binding, availability.as_ref());
        if let Some(odd) = desired.new_oddity {
            sticky_binding::warn_oddity(binding, &odd);
        }
        if desired.changed {
            let generation = binding.metadata.generation;
            let status = binding.status.get_or_insert_with(Default::default);
            status.conditions = desired.conditions;
            status.observed_generation = generation;
        }
    }

    async fn announce_release(&self, binding: &StickyBinding, from: &str, to: &str) {
        use kube::Resource;
        let note = format!("node {from} was lost; the workload was released and bound to {to}");
        if let Err(e) = self
            .events
            .publish(
                &binding.object_ref(&()),
                EventType::Warning,
                "Released",
                "Release",
                note,
            )
            .await
        {
            tracing::debug!(error = %e, "could not publish the Released event");
        }
    }
}

/// The bindings as the plugins read them: as last written, with the binds counted that are
/// waiting to be written (or being written) on top, so that a decision made while history
/// writes trail the binds (a burst) already knows where the workload went.
impl BindingLookup for HistoryWriter {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>> {
        let written = self.index.get(namespace, name);
        let (workload, unwritten) = {
            let pending = locks::lock(&self.pending);
            match pending.get(&(namespace.to_string(), name.to_string())) {
                Some(p) if !(p.binds.is_empty() && p.writing_now.is_empty()) => (
                    p.workload.clone(),
                    p.writing_now
                        .iter()
                        .chain(&p.binds)
                        .cloned()
                        .collect::<Vec<_>>(),
                ),
                _ => return written,
            }
        };
        let mut binding = written
            .map(|b| StickyBinding::clone(&b))
            .unwrap_or_else(|| new_binding(&workload));
        let mut status = binding.status.take().unwrap_or_default();
        let now = Time(jiff::Timestamp::now());
        for bind in &unwritten {
            if let Some(next) = count_bind(
                &status,
                &bind.pod_uid,
                &bind.pod_name,
                &bind.node,
                now.clone(),
            ) {
                status = next;
            }
        }
        binding.status = Some(status);
        Some(Arc::new(binding))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::stand_in_client;
    use crate::sticky::bindings::BindingLookup;
    use crate::sticky::reconcile;

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000).expect("ts"))
    }

    #[test]
    fn a_bind_is_counted_once_however_often_it_is_reported() {
        let s0 = StickyBindingStatus::default();
        let s1 = count_bind(&s0, "u1", "p1", "n1", now()).expect("first report counts");
        assert_eq!(
            (s1.schedule_count, s1.node_count["n1"], s1.latest.as_deref()),
            (1, 1, Some("n1"))
        );
        assert!(
            count_bind(&s1, "u1", "p1", "n1", now()).is_none(),
            "the same pod again: nothing"
        );
        let s2 = count_bind(&s1, "u2", "p2", "n2", now()).expect("another pod counts");
        assert_eq!(
            (s2.schedule_count, s2.node_count["n2"], s2.latest.as_deref()),
            (2, 1, Some("n2"))
        );
        assert_eq!(s2.node_count.values().sum::<i64>(), s2.schedule_count);
    }

    #[test]
    fn recent_binds_are_bounded() {
        let mut s = StickyBindingStatus::default();
        for i in 0..40 {
            s = count_bind(&s, &format!("u{i}"), "p", "n", now()).expect("counts");
        }
        assert_eq!(s.recent_binds.len(), RECENT_BINDS);
        assert_eq!(
            s.recent_binds.last().map(|b| b.pod_uid.as_str()),
            Some("u39")
        );
        assert_eq!(s.schedule_count, 40);
    }

    #[test]
    fn new_bindings_are_named_labelled_and_owned_by_the_workload() {
        let w = Workload {
            namespace: "vms".into(),
            api_version: "kubevirt.io/v1".into(),
            kind: "VirtualMachine".into(),
            name: "Fedora".into(),
            uid: "vm-uid".into(),
            ordinal: None,
            pod_name: None,
            replicas: None,
            pending_owner: None,
        };
        let b = new_binding(&w);
        assert_eq!(b.metadata.name.as_deref(), Some("virtualmachine-fedora"));
        assert_eq!(b.metadata.namespace.as_deref(), Some("vms"));
        let owner = &b.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("VirtualMachine", "vm-uid")
        );
        assert_eq!(b.spec.workload_ref.kind, "VirtualMachine");
    }

    /// A stand-in API server for one StickyBinding, `deployment-web`, deleted after the index
    /// read it: answers the history writer's calls and records them.
    fn api_server(calls: Arc<std::sync::Mutex<Vec<String>>>) -> kube::Client {
        stand_in_client(move |method, path, mut sent| {
            let base = "/apis/tether.dev/v1alpha1/namespaces/ns/stickybindings";
            let path = path.trim_start_matches(base).to_string();
            calls
                .lock()
                .expect("calls")
                .push(format!("{method} {path}"));
            let not_found = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "reason": "NotFound", "code": 404,
                "message": "stickybindings.tether.dev \"deployment-web\" not found"});
            match (method, path.as_str()) {
                ("PUT", "/deployment-web/status") if sent["metadata"]["uid"] == "recreated" => {
                    sent["metadata"]["resourceVersion"] = "8".into();
                    (200, sent)
                }
                ("POST", "") => {
                    sent["metadata"]["uid"] = "recreated".into();
                    sent["metadata"]["resourceVersion"] = "7".into();
                    (201, sent)
                }
                _ => (404, not_found),
            }
        })
    }

    #[tokio::test]
    async fn a_binding_deleted_since_the_index_read_it_is_created_anew_with_the_bind_counted() {
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let client = api_server(calls.clone());
        let index = Arc::new(BindingIndex::default());
        let workload = Workload {
            namespace: "ns".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "web-uid".into(),
            ordinal: None,
            pod_name: None,
            replicas: Some(1),
            pending_owner: None,
        };
        let mut stale = new_binding(&workload);
        stale.metadata.uid = Some("deleted".into());
        stale.metadata.resource_version = Some("5".into());
        stale.status = Some(StickyBindingStatus {
            latest: Some("n1".into()),
            node_count: [("n1".to_string(), 3)].into(),
            schedule_count: 3,
            ..Default::default()
        });
        index.upsert(stale);
        let writer = HistoryWriter::new(
            client,
            None,
            index.clone(),
            Arc::new(crate::sticky::workload::NoOwners),
            Arc::new(Metrics::default()),
        );
        let mut pod = Pod::default();
        pod.metadata.uid = Some("pod-2".into());
        pod.metadata.name = Some("web-abc".into());

        let recorded = writer
            .record(&workload, &pod, "n2")
            .await
            .expect("recorded");

        assert_eq!(recorded, Recorded::Counted);
        assert_eq!(
            *calls.lock().expect("calls"),
            [
                "PUT /deployment-web/status",
                "POST ",
                "PUT /deployment-web/status"
            ],
            "404 on the write: create, count"
        );
        let now = index.get("ns", "deployment-web").expect("indexed");
        assert_eq!(now.metadata.uid.as_deref(), Some("recreated"));
        let status = now.status.clone().unwrap_or_default();
        assert_eq!(
            (status.schedule_count, status.latest.as_deref()),
            (1, Some("n2")),
            "only this bind, in the new binding: {status:?}"
        );
        assert_eq!(status.recent_binds[0].pod_uid, "pod-2");
    }

    /// A stand-in API server holding one StickyBinding, with resourceVersion preconditions.
    /// `faults` are served in turn to status writes: "lost" applies the write but answers 500
    /// (an answer lost on the way), "busy" answers 429 without applying it.
    struct Store {
        binding: std::sync::Mutex<Option<serde_json::Value>>,
        faults: std::sync::Mutex<Vec<&'static str>>,
        writes: std::sync::atomic::AtomicUsize,
        /// Every call, as "METHOD path".
        calls: std::sync::Mutex<Vec<String>>,
    }

    fn empty_store() -> Arc<Store> {
        Arc::new(Store {
            binding: std::sync::Mutex::new(None),
            faults: std::sync::Mutex::new(Vec::new()),
            writes: std::sync::atomic::AtomicUsize::new(0),
            calls: std::sync::Mutex::new(Vec::new()),
        })
    }

    fn store_client(store: Arc<Store>) -> kube::Client {
        stand_in_client(move |method, path, mut sent| {
            let base = "/apis/tether.dev/v1alpha1/namespaces/ns/stickybindings";
            let path = path.trim_start_matches(base).to_string();
            store
                .calls
                .lock()
                .expect("calls")
                .push(format!("{method} {path}"));
            let mut held = store.binding.lock().expect("binding");
            let status = |code: u16, reason: &str| {
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": reason, "code": code, "message": reason})
            };
            match (method, path.as_str()) {
                ("GET", "/deployment-web") => match held.as_ref() {
                    Some(b) => (200, b.clone()),
                    None => (404, status(404, "NotFound")),
                },
                ("POST", "") if held.is_some() => (409, status(409, "AlreadyExists")),
                ("POST", "") => {
                    sent["metadata"]["uid"] = "b-uid".into();
                    sent["metadata"]["generation"] = 1.into();
                    sent["metadata"]["resourceVersion"] = "1".into();
                    *held = Some(sent.clone());
                    (201, sent)
                }
                ("PUT", "/deployment-web/status") => {
                    let Some(current) = held.clone() else {
                        return (404, status(404, "NotFound"));
                    };
                    if sent["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]
                    {
                        return (409, status(409, "Conflict"));
                    }
                    let fault = store.faults.lock().expect("faults").pop();
                    if fault == Some("busy") {
                        return (429, status(429, "TooManyRequests"));
                    }
                    store
                        .writes
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let rv: u64 = current["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    sent["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
                    *held = Some(sent.clone());
                    if fault == Some("lost") {
                        return (500, status(500, "InternalError"));
                    }
                    (200, sent)
                }
                _ => (404, status(404, "NotFound")),
            }
        })
    }

    fn web_pod(i: usize) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("web-{i}"), "namespace": "ns", "uid": format!("pod-{i}"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                    "uid": "web-uid", "controller": true}]},
        }))
        .expect("a pod");
        pod.spec = Some(Default::default());
        pod
    }

    fn writer_for(store: &Arc<Store>) -> Arc<HistoryWriter> {
        Arc::new(unread_writer(store))
    }

    fn unread_writer(store: &Arc<Store>) -> HistoryWriter {
        HistoryWriter::new(
            store_client(store.clone()),
            None,
            Arc::new(BindingIndex::default()),
            Arc::new(crate::sticky::workload::NoOwners),
            Arc::new(Metrics::default()),
        )
    }

    /// The scheduler's pods and nodes as a test sets them: every pod is known but those
    /// marked gone.
    #[derive(Default)]
    struct View {
        gone: Mutex<std::collections::HashSet<String>>,
        nodes: Vec<Arc<Node>>,
    }

    impl SchedulerView for View {
        fn knows_pod(&self, uid: &str) -> bool {
            !self.gone.lock().expect("gone").contains(uid)
        }
        fn node(&self, name: &str) -> Option<Arc<Node>> {
            self.nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(name))
                .cloned()
        }
    }

    fn held_status(store: &Store) -> StickyBindingStatus {
        let held = store
            .binding
            .lock()
            .expect("binding")
            .clone()
            .expect("a binding");
        serde_json::from_value(held["status"].clone()).unwrap_or_default()
    }

    #[test]
    fn counts_edited_to_odd_values_saturate_instead_of_wrapping() {
        let status = StickyBindingStatus {
            node_count: [("n1".to_string(), i64::MAX), ("n2".to_string(), -5)].into(),
            schedule_count: i64::MAX,
            ..Default::default()
        };
        let s1 = count_bind(&status, "u1", "p", "n1", now()).expect("counted");
        assert_eq!(
            (s1.node_count["n1"], s1.schedule_count),
            (i64::MAX, i64::MAX)
        );
        let s2 = count_bind(&status, "u2", "p", "n2", now()).expect("counted");
        assert_eq!(
            s2.node_count["n2"], 1,
            "a negative count starts again from zero"
        );
    }

    #[test]
    fn counted_pods_keep_what_fell_out_of_recent_binds() {
        let mut status = StickyBindingStatus::default();
        for i in 0..40 {
            status = count_bind(&status, &format!("u{i}"), "p", "n1", now()).expect("new");
        }
        assert_eq!(status.recent_binds.len(), RECENT_BINDS);
        assert_eq!(status.counted_pods.len(), 40);
        assert!(
            count_bind(&status, "u0", "p", "n1", now()).is_none(),
            "u0 left recentBinds but is still counted once"
        );
    }

    #[tokio::test]
    async fn a_burst_of_binds_to_one_binding_is_counted_exactly_once_in_few_writes() {
        let store = empty_store();
        *store.faults.lock().expect("faults") = vec!["busy", "lost", "busy"];
        let writer = writer_for(&store);
        let binds = (0..150).map(|i| {
            let writer = writer.clone();
            async move {
                writer
                    .record_bind(&web_pod(i), &format!("n{}", i % 3))
                    .await
            }
        });
        futures::future::join_all(binds).await;

        let status = held_status(&store);
        assert_eq!(
            status.schedule_count, 150,
            "every bind counted once: {status:?}"
        );
        assert_eq!(status.node_count.values().sum::<i64>(), 150);
        let writes = store.writes.load(std::sync::atomic::Ordering::SeqCst);
        assert!(writes < 150, "binds share writes: {writes} writes");
    }

    /// A bound pod deleted while the start-up reconcile works through the pods bound when it
    /// began: it stays in `countedPods` until the reconcile is done, so the reconcile does not
    /// take it for a missed bind and count it twice; afterwards it is dropped.
    #[tokio::test]
    async fn a_pod_deleted_during_the_reconcile_is_not_counted_again() {
        let store = empty_store();
        let view = Arc::new(View::default());
        let writer = Arc::new(unread_writer(&store).reading(view.clone()));
        let scheduled = |i: usize| {
            let mut pod = web_pod(i);
            pod.spec.get_or_insert_with(Default::default).node_name = Some("n1".into());
            pod.status = Some(
                serde_json::from_value(serde_json::json!({"conditions": [
                {"type": "PodScheduled", "status": "True",
                 "lastTransitionTime": "2026-01-01T00:00:00Z"}]}))
                .expect("status"),
            );
            Arc::new(pod)
        };
        writer.record_bind(&scheduled(0), "n1").await;
        writer.record_bind(&scheduled(1), "n1").await;
        view.gone.lock().expect("gone").insert("pod-0".into());

        // Pruning pauses when the reconcile is created, before it first runs.
        let reconcile =
            reconcile::record_missed_binds(writer.clone(), vec![scheduled(0), scheduled(1)]);
        writer.record_bind(&web_pod(2), "n2").await;
        assert!(held_status(&store).counted_pods.contains(&"pod-0".into()));
        reconcile.await;
        assert_eq!(held_status(&store).schedule_count, 3, "pod-0 counted once");

        writer.record_bind(&web_pod(3), "n2").await;
        let status = held_status(&store);
        assert_eq!(status.schedule_count, 4);
        assert_eq!(status.counted_pods, ["pod-1", "pod-2", "pod-3"]);
    }

    fn ready_node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(serde_json::json!({"metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("a node"),
        )
    }

    /// The first bind of a workload costs a create and one status write, and that write
    /// carries the conditions the StickyBinding controller would set: it has nothing left to
    /// write (before, its own status write raced the writer's on every new binding).
    #[tokio::test]
    async fn a_new_binding_costs_a_create_and_a_status_write_that_carries_its_conditions() {
        let store = empty_store();
        let n1 = ready_node("n1");
        let view = View {
            nodes: vec![n1.clone()],
            ..View::default()
        };
        let writer = Arc::new(unread_writer(&store).reading(Arc::new(view)));

        writer.record_bind(&web_pod(0), "n1").await;

        assert_eq!(
            *store.calls.lock().expect("calls"),
            ["POST ", "PUT /deployment-web/status"],
            "no read of a binding the index does not hold"
        );
        let held: StickyBinding = serde_json::from_value(
            store
                .binding
                .lock()
                .expect("binding")
                .clone()
                .expect("a binding"),
        )
        .expect("a StickyBinding");
        let status = held.status.clone().unwrap_or_default();
        let condition = |t: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        assert_eq!(condition("NodeAvailable").as_deref(), Some("True"));
        assert_eq!(condition("HistoryConsistent").as_deref(), Some("True"));
        assert_eq!(condition("Stalled").as_deref(), Some("False"));
        assert_eq!(condition("Reconciling").as_deref(), Some("False"));
        assert_eq!(status.observed_generation, Some(1));
        let availability = sticky_binding::node_availability("n1", Some(&n1));
        assert!(
            !sticky_binding::desired_conditions(&held, Some(&availability)).changed,
            "the controller has nothing to add: {:?}",
            status.conditions
        );
    }

    /// A binding that exists but is missing from the index (its watch event not here yet):
    /// the create is refused, the binding is read and the bind counted in it.
    #[tokio::test]
    async fn a_binding_the_index_has_not_seen_yet_is_read_after_the_create_is_refused() {
        let store = empty_store();
        let writer = writer_for(&store);
        writer.record_bind(&web_pod(0), "n1").await;
        let lagging = writer_for(&store);

        lagging.record_bind(&web_pod(1), "n2").await;

        assert_eq!(held_status(&store).schedule_count, 2);
        assert_eq!(
            store.calls.lock().expect("calls")[2..],
            ["POST ", "GET /deployment-web", "PUT /deployment-web/status"]
        );
    }

    /// While a bind waits to be written (binds outpace history writes in a burst), the plugins
    /// reading through the writer already see it: where the workload went, and its counts.
    #[tokio::test]
    async fn the_plugins_read_binds_not_written_yet() {
        let store = empty_store();
        let writer = writer_for(&store);
        writer.record_bind(&web_pod(0), "n1").await;
        assert!(
            writer.enqueue(&web_pod(1), "n2").is_some(),
            "pending, not written"
        );

        let read = BindingLookup::get(writer.as_ref(), "ns", "deployment-web").expect("read");
        let status = read.status.clone().unwrap_or_default();
        assert_eq!(read.pin(), Some("n2"));
        assert_eq!((status.schedule_count, status.node_count.len()), (2, 2));
        let written = writer
            .bindings()
            .get("ns", "deployment-web")
            .expect("indexed");
        assert_eq!(
            written.pin(),
            Some("n1"),
            "the index holds what was written"
        );
        assert_eq!(held_status(&store).schedule_count, 1);

        let mut other = web_pod(2);
        other.metadata.owner_references = None;
        other.metadata.name = Some("lone".into());
        writer.enqueue(&other, "n3");
        let lone = BindingLookup::get(writer.as_ref(), "ns", "pod-lone").expect("read");
        assert_eq!(lone.pin(), Some("n3"), "a binding not created yet");
    }
}
