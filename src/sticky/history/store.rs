//! The store that writes: counts a batch of binds in a workload's StickyBinding in one status
//! write (creating the binding if missing), with a resourceVersion precondition, retried with
//! backoff and jitter on conflicts, throttling, server errors and lost connections until it
//! lands; each write carries the conditions the StickyBinding controller would set.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};

use super::bounds::{self, Seen};
use super::records::{Bind, HistoryError, SchedulerView, count_binds, new_binding};
use crate::api::sticky_binding::conditions as sticky_binding;
use crate::api::sticky_binding::{CONDITION_HISTORY_RECORDED, REASON_RECORDED, REASON_TOO_LARGE};
use crate::api::{Release, StickyBinding};
use crate::gate::{Write, WriteGate};
use crate::k8s::api_errors::{self, denied_for_now, maybe_applied, retryable};
use crate::k8s::budget;
use crate::recorder::{EventType, EventWriter};
use crate::sticky::bindings::{BindingIndex, BindingLookup};
use crate::sticky::workload::Workload;

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

/// How long history writes may be denied (401/403) before the denial is reported (a condition
/// on the profiles that record history, and `tether_history_denied`): longer than a restarted
/// API server's authorizer takes to catch up.
pub const DENIAL_PERSISTS: Duration = Duration::from_secs(30);

/// Whether history writes are denied now, and why: set once a denial has lasted
/// [`DENIAL_PERSISTS`], cleared by the next write that lands. The profile controller turns it
/// into a condition; the metric follows it.
#[derive(Clone)]
pub struct Denial {
    state: Arc<tokio::sync::watch::Sender<Option<String>>>,
    metrics: Option<Arc<crate::scheduler::metrics::Metrics>>,
}

impl Default for Denial {
    fn default() -> Self {
        Denial {
            state: Arc::new(tokio::sync::watch::Sender::new(None)),
            metrics: None,
        }
    }
}

impl Denial {
    /// A denial reported in `metrics` too.
    pub fn counted_in(metrics: Arc<crate::scheduler::metrics::Metrics>) -> Self {
        Denial {
            metrics: Some(metrics),
            ..Denial::default()
        }
    }

    /// Why history writes are denied, while they are.
    pub fn current(&self) -> Option<String> {
        self.state.borrow().clone()
    }

    /// A receiver that hears each change.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<Option<String>> {
        self.state.subscribe()
    }

    fn set(&self, why: Option<String>) {
        let changed = self.state.send_if_modified(|now| {
            let changed = *now != why;
            *now = why.clone();
            changed
        });
        if changed {
            if let Some(metrics) = &self.metrics {
                metrics.set_history_denied(why.is_some());
            }
            match &why {
                Some(why) => {
                    tracing::warn!(error = %why, "StickyBinding history writes are denied; the binds wait, and the profiles that record history say so")
                }
                None => tracing::info!("StickyBinding history writes land again"),
            }
        }
    }
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

/// Sets `HistoryRecorded` back to True on a binding whose history a write refused for its
/// size said False: the write carrying this lands.
fn recorded_again(binding: &mut StickyBinding) {
    let generation = binding.metadata.generation;
    let Some(status) = binding.status.as_mut() else {
        return;
    };
    let refused = status
        .conditions
        .iter()
        .any(|c| c.type_ == CONDITION_HISTORY_RECORDED && c.status == "False");
    if refused {
        crate::api::conditions::set_condition(
            &mut status.conditions,
            CONDITION_HISTORY_RECORDED,
            true,
            REASON_RECORDED,
            "",
            generation,
        );
    }
}

/// Writes batches of binds; see the module.
pub struct HistoryStore {
    pub client: kube::Client,
    pub events: EventWriter,
    pub index: Arc<BindingIndex>,
    /// The scheduler's pods and nodes: `countedPods` keeps only the pods it knows, and each
    /// status write carries the binding's conditions judged from its nodes. `None` (unit
    /// tests): nothing is dropped, and the conditions are left to the controller.
    pub view: Option<Arc<dyn SchedulerView>>,
    /// How many reconciles of binds made before a restart run now; none is dropped from
    /// `countedPods` meanwhile (see [`super::HistoryWriter::pause_pruning`]).
    pub reconciling: Arc<AtomicUsize>,
    /// Asked before every write: only a leader writes history.
    pub gate: WriteGate,
    /// Whether writes are denied for long.
    pub denial: Denial,
    /// How long a counted bind stays named in `countedPods` ([`bounds::SETTLE`] by default).
    pub settle: jiff::SignedDuration,
    /// The nodes found gone from the cluster, from when (see [`HistoryStore::gone_for`]).
    pub departed: std::sync::Mutex<std::collections::HashMap<String, tokio::time::Instant>>,
}

/// How many gone nodes [`HistoryStore::departed`] holds before it forgets those noticed long
/// ago.
const DEPARTED_KEPT: usize = 4096;

impl HistoryStore {
    /// Waits before retrying after `error` (see [`backoff`]); a denial that has lasted
    /// [`DENIAL_PERSISTS`] since `denied_since` is reported.
    async fn backoff(
        &self,
        delay: &mut Duration,
        denied_since: &mut Option<tokio::time::Instant>,
        error: &kube::Error,
    ) {
        if denied_for_now(error) {
            let since = *denied_since.get_or_insert_with(tokio::time::Instant::now);
            if since.elapsed() >= DENIAL_PERSISTS {
                self.denial
                    .set(Some(crate::k8s::api_errors::message(error)));
            }
        } else {
            *denied_since = None;
        }
        backoff(delay, error).await;
    }

    fn pruning_paused(&self) -> bool {
        self.reconciling.load(Ordering::SeqCst) > 0
    }

    /// Counts `binds` in the workload's binding in one status write, creating the binding if
    /// missing, retrying until it lands or fails for good. Returns how many were new.
    /// Fenced as a whole: a write not done when the term ends is abandoned (the next leader's
    /// start-up reconcile counts its binds).
    pub async fn write(&self, workload: &Workload, binds: &[Bind]) -> Result<usize, HistoryError> {
        match self
            .gate
            .write(Write::History, self.write_in_term(workload, binds))
            .await
        {
            Ok(written) => {
                if written.is_ok() {
                    self.denial.set(None);
                }
                written
            }
            Err(_) => Err(HistoryError::NotLeading {
                namespace: workload.namespace.clone(),
                name: workload.binding_name(),
            }),
        }
    }

    async fn write_in_term(
        &self,
        workload: &Workload,
        binds: &[Bind],
    ) -> Result<usize, HistoryError> {
        let namespace = workload.namespace.clone();
        let name = workload.binding_name();
        let api: Api<StickyBinding> = Api::namespaced(self.client.clone(), &namespace);
        let mut delay = RETRY_INITIAL;
        let mut denied_since = None;
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
                        self.backoff(&mut delay, &mut denied_since, &e).await;
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
                    self.backoff(&mut delay, &mut denied_since, &e).await;
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
            if !workload.owns(&current) {
                let describe = |r: &crate::api::WorkloadRef| {
                    format!("{} {} {}", r.api_version, r.kind, r.name)
                        + &r.ordinal
                            .map(|o| format!(" ordinal {o}"))
                            .unwrap_or_default()
                };
                return Err(HistoryError::NotThisWorkloads {
                    namespace,
                    name,
                    names: describe(&current.spec.workload_ref),
                    ours: describe(&workload.workload_ref()),
                });
            }
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
            let newly = count_binds(&mut next, binds, now.clone());
            if newly.is_empty() {
                return Ok(0);
            }
            let counted = newly.len();
            let released = newly
                .iter()
                .find_map(|i| current.released_by_bind_to(&binds[*i].node));
            self.bound(&current, &mut next, binds, &now);
            if let Some(old) = &released {
                next.released_from = Some(Release {
                    node: old.clone(),
                    time: now,
                });
            }
            let mut updated = current.clone();
            updated.status = Some(next);
            self.set_conditions(&mut updated);
            recorded_again(&mut updated);
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
                Err(e) if api_errors::too_large(&e) => {
                    let message = api_errors::message(&e);
                    self.announce_too_large(&current, &message).await;
                    self.mark_too_large(&api, &current, &message, binds.len())
                        .await;
                    return Err(HistoryError::TooLarge {
                        namespace,
                        name,
                        message,
                    });
                }
                Err(e) if retryable(&e) => {
                    maybe_landed |= maybe_applied(&e);
                    self.backoff(&mut delay, &mut denied_since, &e).await;
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

    /// Keeps `status` within its bounds (see [`bounds`]): `countedPods` settled against the
    /// scheduler's pods, and `nodeCount` pruned of the nodes long gone, never the pin. Without
    /// the scheduler's view (unit tests), nothing is dropped.
    fn bound(
        &self,
        binding: &StickyBinding,
        status: &mut crate::api::StickyBindingStatus,
        binds: &[Bind],
        now: &Time,
    ) {
        let Some(view) = &self.view else {
            return;
        };
        // While a reconcile of binds made before a restart runs, a deleted pod stays listed:
        // the reconcile decides from the pods bound when it began, and a pod neither listed
        // nor vouched for would look missed. Pods countedBefore passes may still go (the
        // reconcile reads it too), so the list keeps its bound meanwhile.
        let paused = self.pruning_paused();
        let batch: std::collections::HashMap<&str, &Bind> =
            binds.iter().map(|b| (b.pod_uid.as_str(), b)).collect();
        let seen = |uid: &str| match (view.pod_seen(uid), batch.get(uid)) {
            // Just counted: the scheduler may not have seen it (or its bind) yet.
            (Seen::Gone, Some(b)) => b.bound_at.map_or(Seen::Unbound, Seen::BoundAt),
            (Seen::Gone, None) if paused => Seen::Unbound,
            (seen, _) => seen,
        };
        bounds::settle_counted_pods(status, seen, now.0, self.settle);
        let pinned = binding.spec.node_name.as_deref();
        let latest = status.latest.clone();
        let keep: Vec<&str> = pinned.into_iter().chain(latest.as_deref()).collect();
        let dropped = bounds::prune_node_counts(status, &keep, |node| self.gone_for(view, node));
        if dropped > 0 {
            tracing::info!(binding = %format!("{}/{}", binding.metadata.namespace.as_deref().unwrap_or_default(), binding.metadata.name.as_deref().unwrap_or_default()), nodes = dropped, "nodes gone from the cluster left the binding's nodeCount for prunedCount");
        }
    }

    /// How long `node` has been seen gone from the cluster by this replica (`None` while it
    /// exists): from the first write that found it absent. A replica that starts anew starts
    /// counting again, so a node is dropped only once it has been gone that long for sure.
    fn gone_for(&self, view: &Arc<dyn SchedulerView>, node: &str) -> Option<Duration> {
        let mut departed = crate::locks::lock(&self.departed);
        if view.node(node).is_some() {
            departed.remove(node);
            return None;
        }
        let now = tokio::time::Instant::now();
        if departed.len() > DEPARTED_KEPT {
            // Those noticed long before any retention: noticed again, they start anew.
            departed.retain(|_, since| now.duration_since(*since) < bounds::NODE_RETENTION * 2);
        }
        let since = *departed.entry(node.to_string()).or_insert(now);
        Some(now.duration_since(since))
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

    /// Says in the binding's `HistoryRecorded` condition that a write of `binds` binds was
    /// refused for its size: one write of the status as it stands (which the API server holds,
    /// so it fits) with the condition. Best effort: the event says it too.
    async fn mark_too_large(
        &self,
        api: &Api<StickyBinding>,
        binding: &StickyBinding,
        message: &str,
        binds: usize,
    ) {
        let mut marked = binding.clone();
        let generation = marked.metadata.generation;
        let status = marked.status.get_or_insert_with(Default::default);
        let note = format!(
            "status: too large for the API server with {binds} more bind(s) ({message}); they are not recorded. Delete this StickyBinding to start its history afresh"
        );
        if !crate::api::conditions::set_condition(
            &mut status.conditions,
            CONDITION_HISTORY_RECORDED,
            false,
            REASON_TOO_LARGE,
            &note,
            generation,
        ) {
            return;
        }
        let name = binding.metadata.name.clone().unwrap_or_default();
        match api
            .replace_status(&name, &PostParams::default(), &marked)
            .await
        {
            Ok(written) => self.index.upsert(written),
            Err(e) => {
                tracing::warn!(binding = %name, error = %e, "could not set HistoryRecorded=False on a binding too large to write")
            }
        }
    }

    /// Says on the binding, in a Warning event, that its status no longer fits the API
    /// server: its history stops there (the binds are counted nowhere) until a person trims
    /// it or frees the workload (deletes the binding).
    async fn announce_too_large(&self, binding: &StickyBinding, message: &str) {
        let note = format!(
            "the status is too large to write ({message}): binds are no longer recorded; delete this StickyBinding to start its history afresh"
        );
        self.warn(binding, "HistoryTooLarge", "Record", note).await;
    }

    async fn announce_release(&self, binding: &StickyBinding, from: &str, to: &str) {
        let note = format!("node {from} was lost; the workload was released and bound to {to}");
        self.warn(binding, "Released", "Release", note).await;
    }

    /// A Warning event on `binding`, best effort.
    async fn warn(
        &self,
        binding: &StickyBinding,
        reason: &'static str,
        action: &'static str,
        note: String,
    ) {
        use kube::Resource;
        if let Err(e) = self
            .events
            .publish(
                &binding.object_ref(&()),
                EventType::Warning,
                reason,
                action,
                note,
            )
            .await
        {
            tracing::debug!(error = %e, reason, "could not publish an event on a StickyBinding");
        }
    }
}
