//! The scheduling queue, as kube-scheduler's PriorityQueue: `activeQ` ordered by the QueueSort
//! plugin, `backoffQ` for pods that failed recently, the unschedulable pool for pods that wait
//! for a cluster event, and the gated set for pods held by PreEnqueue (scheduling gates). Pods
//! are known by UID: a pod deleted and created again under its name is another pod.
//!
//! A cluster event moves a pod out of the unschedulable pool only when one of the plugins that
//! rejected it registered the event and its queueing hint says the change may help
//! (`framework/events.rs`). Events that arrive while a pod is being scheduled are kept and
//! replayed against it if it fails, so a change during its cycle is never missed.

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeMap, BTreeSet, BinaryHeap, HashMap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::k8s::pods;
use crate::locks;
use crate::scheduler::framework::events::{
    self, ClusterEvent, EventObject, QueueingHints, UNSCHEDULABLE_TIMEOUT,
};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::{Plugin, QueuedPodInfo};

/// How long a pod may stay in the unschedulable pool before it is retried anyway
/// (kube-scheduler's podMaxInUnschedulablePodsDuration).
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);
/// How often the unschedulable pool is checked for pods parked too long (upstream: 30 s).
const LEFTOVER_FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// How often a waiting `pop` looks at backoffQ.
const FLUSH_INTERVAL: Duration = Duration::from_millis(200);
/// Backoff ends on whole windows of this length, as upstream's backoffQ ordering window: pods
/// whose backoff ends in the same window leave it together, in QueueSort order.
const BACKOFF_WINDOW: Duration = Duration::from_secs(1);

/// Counts a pod entering a sub-queue (`active`, `backoff` or `unschedulable`) and the event
/// that sent it there, as kube-scheduler's `scheduler_queue_incoming_pods_total{queue,event}`.
pub type IncomingCounter = Box<dyn Fn(&'static str, &str) + Send + Sync>;

/// The event label of a pod the queue first sees.
const POD_ADD: &str = "UnschedulablePodAdd";
/// The event label of a pending pod's own update.
const POD_UPDATE: &str = "UnschedulablePodUpdate";
/// The event label of a pod back from a failed attempt.
const ATTEMPT_FAILURE: &str = "ScheduleAttemptFailure";
/// The event label of a pod whose backoff ended.
const BACKOFF_COMPLETE: &str = "BackoffComplete";
/// The event label of a pod taken from backoffQ early, activeQ being empty.
const POP_FROM_BACKOFF: &str = "PopFromBackoffQ";

/// The queueing hints of the profile that serves a schedulerName.
pub trait HintSource: Send + Sync {
    fn hints(&self, scheduler_name: &str) -> Option<Arc<QueueingHints>>;
    /// Whether any profile registered an event covering `event`.
    fn interested_in(&self, event: &ClusterEvent) -> bool;
}

/// Where a queued pod is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Pool {
    Active,
    Backoff,
    Unschedulable,
    Gated,
    /// Popped; a scheduling cycle works on it.
    InFlight,
    /// Assumed on a node; waits for the watch to confirm the bind (then it is deleted) or for a
    /// failed bind to requeue it.
    Assumed,
}

/// A pod in activeQ or backoffQ: heaps hold these, ordered by QueueSort (and, in backoffQ, by
/// the end of the backoff first).
struct HeapEntry {
    info: QueuedPodInfo,
    sort: Arc<dyn Plugin>,
    /// When the backoff ends (backoffQ only; activeQ entries all hold the same instant).
    until: Instant,
    seq: u64,
}

impl PartialEq for HeapEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for HeapEntry {}
impl PartialOrd for HeapEntry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapEntry {
    /// BinaryHeap pops the greatest: the entry whose backoff ends first, then the one
    /// QueueSort says goes first, then the oldest push.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .until
            .cmp(&self.until)
            .then_with(|| match self.sort.queue_sort() {
                Some(qs) if qs.less(&self.info, &other.info) => CmpOrdering::Greater,
                Some(qs) if qs.less(&other.info, &self.info) => CmpOrdering::Less,
                _ => other.seq.cmp(&self.seq),
            })
    }
}

#[derive(Clone)]
struct Entry {
    info: QueuedPodInfo,
    pool: Pool,
    /// When the pod's backoff ends (aligned to a window); `None` when it has none.
    backoff_until: Option<Instant>,
    /// While in flight: the sequence number of the first event recorded for it.
    in_flight_from: Option<u64>,
    /// A deletion arrived while the pod was in flight.
    deleted_while_in_flight: bool,
    /// The pod must wait out its backoff (it failed with an error, or a plugin named when to
    /// ask again): it is never taken from backoffQ early.
    full_backoff: bool,
    /// The sequence number of this pod's newest heap entry: older heap entries of the pod
    /// (pushed before an update re-sorted it, or before it moved) are skipped when popped.
    heap_seq: u64,
}

/// An event recorded while pods were in flight.
struct RecordedEvent {
    seq: u64,
    event: ClusterEvent,
    old: Option<EventObject>,
    new: Option<EventObject>,
    /// For a pending pod's own update: the UID it concerns (other pods skip it).
    only_for: Option<String>,
}

struct State {
    entries: HashMap<String, Entry>,
    active: BinaryHeap<HeapEntry>,
    /// Pods rejected by plugins, waiting out their backoff.
    backoff: BinaryHeap<HeapEntry>,
    /// Pods that failed with an error (or asked to be retried at a time), waiting out their
    /// backoff: never popped early.
    error_backoff: BinaryHeap<HeapEntry>,
    seq: u64,
    /// Events received while some pod was in flight, oldest first.
    in_flight_events: VecDeque<RecordedEvent>,
    next_event: u64,
    /// The `in_flight_from` of every pod in flight, counted.
    in_flight_starts: BTreeMap<u64, usize>,
    last_leftover_flush: Instant,
    /// The keys of the pods in the unschedulable pool (and of some that left it since; they are
    /// dropped when the pool is next looked at).
    parked: std::collections::HashSet<String>,
    closed: bool,
}

/// The queue shared by the watch tasks (add, update, delete, events) and the scheduling loop (pop).
pub struct SchedulingQueue {
    state: Mutex<State>,
    ready: Condvar,
    sort: Arc<dyn Plugin>,
    hints: Arc<dyn HintSource>,
    /// The origin of the backoff windows.
    epoch: Instant,
    incoming: std::sync::OnceLock<IncomingCounter>,
}

/// The backoff of a pod after `failures` failures: none before the first, then
/// initial × 2^(failures-1), at most max.
pub fn backoff_duration(failures: u32, initial: Duration, max: Duration) -> Duration {
    if failures == 0 || max.is_zero() {
        return Duration::ZERO;
    }
    let exp = (failures - 1).min(30);
    initial.saturating_mul(1u32 << exp).min(max)
}

/// `now + d`, or as far as the clock goes: a duration from a plugin or a profile never panics.
fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(365 * 86_400)))
        .unwrap_or(now)
}

/// The failures a pod's backoff doubles with, as upstream's getBackoffTime: its consecutive
/// errors while it has any, else its unschedulable attempts.
fn backoff_failures(info: &QueuedPodInfo) -> u32 {
    if info.consecutive_errors_count > 0 {
        info.consecutive_errors_count
    } else {
        info.unschedulable_count
    }
}

impl SchedulingQueue {
    /// A queue ordered by `sort`, the QueueSort plugin all profiles share, that asks `hints`
    /// which events may help a rejected pod.
    pub fn new(sort: Arc<dyn Plugin>, hints: Arc<dyn HintSource>) -> Self {
        let now = Instant::now();
        SchedulingQueue {
            state: Mutex::new(State {
                entries: HashMap::new(),
                active: BinaryHeap::new(),
                backoff: BinaryHeap::new(),
                error_backoff: BinaryHeap::new(),
                seq: 0,
                in_flight_events: VecDeque::new(),
                next_event: 0,
                in_flight_starts: BTreeMap::new(),
                last_leftover_flush: now,
                parked: std::collections::HashSet::new(),
                closed: false,
            }),
            ready: Condvar::new(),
            sort,
            hints,
            epoch: now,
            incoming: std::sync::OnceLock::new(),
        }
    }

    /// Counts every pod entering a sub-queue with `counter` from now on (set once).
    pub fn count_incoming_with(&self, counter: IncomingCounter) {
        let _ = self.incoming.set(counter);
    }

    /// A pod entered sub-queue `queue` because of `event`.
    fn incoming(&self, queue: &'static str, event: &str) {
        if let Some(count) = self.incoming.get() {
            count(queue, event);
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the queue usable: its state is always consistent
        // between statements that change it.
        locks::lock(&self.state)
    }

    /// The start of the backoff window `t` falls in.
    fn align(&self, t: Instant) -> Instant {
        let since = t.saturating_duration_since(self.epoch);
        let windows = since.as_nanos() / BACKOFF_WINDOW.as_nanos();
        let aligned = BACKOFF_WINDOW.saturating_mul(u32::try_from(windows).unwrap_or(u32::MAX));
        self.epoch.checked_add(aligned).unwrap_or(t)
    }

    /// Whether a backoff ending at `until` still lasts: it ends with the window it falls in.
    fn backing_off(&self, until: Option<Instant>, now: Instant) -> bool {
        until.is_some_and(|until| until >= self.align(now))
    }

    fn push(&self, st: &mut State, info: QueuedPodInfo, until: Option<Instant>) {
        st.seq += 1;
        let seq = st.seq;
        let key = info.pod.uid().to_string();
        let mut full_backoff = info.unschedulable_plugins.is_empty();
        if let Some(entry) = st.entries.get_mut(&key) {
            entry.heap_seq = seq;
            full_backoff |= entry.full_backoff;
        }
        let heap_entry = HeapEntry {
            info,
            sort: self.sort.clone(),
            until: until.unwrap_or(self.epoch),
            seq,
        };
        match until {
            None => st.active.push(heap_entry),
            Some(_) if full_backoff => st.error_backoff.push(heap_entry),
            Some(_) => st.backoff.push(heap_entry),
        }
        self.ready.notify_one();
    }

    /// Adds a new pending pod. `gate` is the PreEnqueue plugin holding it, if any.
    pub fn add(&self, pod: Arc<PodInfo>, gate: Option<&'static str>) {
        let key = pod.uid().to_string();
        let mut st = self.lock();
        if st.entries.contains_key(&key) {
            drop(st);
            self.update(pod, gate);
            return;
        }
        let now = Instant::now();
        let info = QueuedPodInfo {
            pod,
            initial_attempt_timestamp: now,
            timestamp: now,
            attempts: 0,
            unschedulable_count: 0,
            consecutive_errors_count: 0,
            unschedulable_plugins: BTreeSet::new(),
            gated_by: gate,
        };
        let pool = if gate.is_some() {
            Pool::Gated
        } else {
            Pool::Active
        };
        st.entries.insert(
            key,
            Entry {
                info: info.clone(),
                pool,
                backoff_until: None,
                in_flight_from: None,
                deleted_while_in_flight: false,
                full_backoff: false,
                heap_seq: 0,
            },
        );
        if pool == Pool::Active {
            self.push(&mut st, info, None);
            self.incoming("active", POD_ADD);
        } else {
            // Upstream keeps gated pods in its unschedulable pool.
            self.incoming("unschedulable", POD_ADD);
        }
    }

    /// An update of a pending pod: the newest object is used. A pod in activeQ or backoffQ is
    /// re-sorted with it; a gated pod whose gates are gone goes to activeQ; for a pod in the
    /// unschedulable pool the plugins that rejected it decide whether the change may help; a
    /// pod in flight has the change kept for when its cycle ends.
    pub fn update(&self, pod: Arc<PodInfo>, gate: Option<&'static str>) {
        let key = pod.uid().to_string();
        let mut st = self.lock();
        let Some(entry) = st.entries.get_mut(&key) else {
            drop(st);
            self.add(pod, gate);
            return;
        };
        let old = entry.info.pod.pod.clone();
        if old.metadata.resource_version.is_some()
            && old.metadata.resource_version == pod.pod.metadata.resource_version
            && old.metadata.uid == pod.pod.metadata.uid
        {
            return;
        }
        entry.info.pod = pod.clone();
        entry.info.gated_by = gate;
        let changes = events::pod_changes(&pod.pod, &old);
        let (old, new) = (EventObject::Pod(old), EventObject::Pod(pod.pod.clone()));
        match entry.pool {
            Pool::Active => {
                let info = entry.info.clone();
                self.push(&mut st, info, None);
            }
            Pool::Backoff => {
                let (info, until) = (entry.info.clone(), entry.backoff_until);
                self.push(&mut st, info, Some(until.unwrap_or(self.epoch)));
            }
            Pool::Gated if gate.is_none() => {
                entry.pool = Pool::Active;
                entry.info.timestamp = Instant::now();
                let info = entry.info.clone();
                self.push(&mut st, info, None);
                self.incoming("active", POD_UPDATE);
            }
            Pool::Unschedulable => {
                let info = entry.info.clone();
                let helping = changes
                    .iter()
                    .find(|event| self.worth_requeuing(&info, event, Some(&old), Some(&new)));
                if let Some(event) = helping {
                    self.to_active_or_backoff(&mut st, &key, &event.to_string());
                }
            }
            Pool::InFlight | Pool::Assumed => {
                let uid = pod.uid().to_string();
                for event in changes {
                    Self::record(
                        &mut st,
                        event,
                        Some(old.clone()),
                        Some(new.clone()),
                        Some(uid.clone()),
                    );
                }
            }
            Pool::Gated => {}
        }
    }

    /// Forgets a pod (deleted, bound by someone else, or no longer ours).
    pub fn delete(&self, uid: &str) {
        let mut st = self.lock();
        if let Some(entry) = st.entries.get_mut(uid) {
            if entry.pool == Pool::InFlight {
                entry.deleted_while_in_flight = true;
            } else {
                Self::remove(&mut st, uid);
            }
        }
    }

    /// Removes a pod's entry, ending its flight if it was in flight. Stale heap entries are
    /// skipped when popped.
    fn remove(st: &mut State, key: &str) {
        if let Some(entry) = st.entries.remove(key) {
            Self::land(st, entry.in_flight_from);
        }
    }

    /// A pod's flight that started at `from` ended: events no pod in flight needs are dropped.
    fn land(st: &mut State, from: Option<u64>) {
        let Some(from) = from else { return };
        if let Some(n) = st.in_flight_starts.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                st.in_flight_starts.remove(&from);
            }
        }
        let oldest = st
            .in_flight_starts
            .keys()
            .next()
            .copied()
            .unwrap_or(st.next_event);
        while st.in_flight_events.front().is_some_and(|e| e.seq < oldest) {
            st.in_flight_events.pop_front();
        }
    }

    /// Keeps an event for the pods in flight, if there are any.
    fn record(
        st: &mut State,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
        only_for: Option<String>,
    ) {
        if st.in_flight_starts.is_empty() {
            return;
        }
        let seq = st.next_event;
        st.next_event += 1;
        st.in_flight_events.push_back(RecordedEvent {
            seq,
            event,
            old,
            new,
            only_for,
        });
    }

    /// Moves a pod to activeQ, or to backoffQ while its backoff lasts, because of `event`. Its
    /// timestamp stays: an event moving a pod does not send it behind pods that failed after
    /// it.
    fn to_active_or_backoff(&self, st: &mut State, key: &str, event: &str) {
        let now = Instant::now();
        let Some(entry) = st.entries.get_mut(key) else {
            return;
        };
        let info = entry.info.clone();
        let until = entry.backoff_until;
        if let Some(until) = until.filter(|_| self.backing_off(until, now)) {
            entry.pool = Pool::Backoff;
            self.push(st, info, Some(until));
            self.incoming("backoff", event);
        } else {
            entry.pool = Pool::Active;
            self.push(st, info, None);
            self.incoming("active", event);
        }
    }

    /// Whether `event` may make the pod schedulable (upstream's isPodWorthRequeuing): always
    /// for a pod no plugin rejected and for the wildcard events (a wildcard event about one pod
    /// only for that pod); else when a plugin that rejected it registered the event and hints
    /// `Queue`.
    fn worth_requeuing(
        &self,
        info: &QueuedPodInfo,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> bool {
        if info.unschedulable_plugins.is_empty() {
            return true;
        }
        if event.is_wildcard() {
            return match new {
                None => true,
                Some(obj) => obj
                    .pod()
                    .is_some_and(|p| p.metadata.uid.as_deref() == Some(info.pod.uid())),
            };
        }
        match self.hints.hints(pods::scheduler_name(&info.pod.pod)) {
            Some(hints) => {
                hints.worth_requeuing(&info.pod, &info.unschedulable_plugins, event, old, new)
            }
            // The profile is gone; the pod leaves the queue when the profile change is applied.
            None => true,
        }
    }

    /// A cluster event (upstream's MoveAllToActiveOrBackoffQueue): the pods in the
    /// unschedulable pool it may help move to activeQ or backoffQ, and it is kept for the pods
    /// in flight. An event no plugin registered does nothing.
    pub fn on_event(
        &self,
        event: ClusterEvent,
        old: Option<EventObject>,
        new: Option<EventObject>,
    ) {
        if !event.is_wildcard() && !self.hints.interested_in(&event) {
            return;
        }
        let mut st = self.lock();
        self.move_parked(&mut st, &event, old.as_ref(), new.as_ref(), |_| true);
        Self::record(&mut st, event, old, new, None);
    }

    /// Moves the parked pods that `event` may help among those `candidate` selects.
    fn move_parked(
        &self,
        st: &mut State,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
        candidate: impl Fn(&Entry) -> bool,
    ) -> usize {
        // Only the pool is looked at, not every queued pod: keys of pods that left it since are
        // dropped from it here.
        let entries = &st.entries;
        st.parked.retain(|k| {
            entries
                .get(k)
                .is_some_and(|e| e.pool == Pool::Unschedulable)
        });
        let keys: Vec<String> = st
            .parked
            .iter()
            .filter_map(|k| st.entries.get(k).map(|e| (k, e)))
            .filter(|(_, e)| candidate(e))
            .filter(|(_, e)| self.worth_requeuing(&e.info, event, old, new))
            .map(|(k, _)| k.clone())
            .collect();
        let label = event.to_string();
        for key in &keys {
            self.to_active_or_backoff(st, key, &label);
        }
        if !keys.is_empty() {
            tracing::debug!(event = %event, pods = keys.len(), "event moved pods out of the unschedulable pool");
        }
        keys.len()
    }

    /// Takes the next pod to schedule, waiting for one; `None` once the queue is closed. When
    /// activeQ is empty, a pod still backing off after a rejection is taken rather than
    /// leaving the scheduler idle (upstream's SchedulerPopFromBackoffQ).
    pub fn pop(&self) -> Option<QueuedPodInfo> {
        let mut st = self.lock();
        loop {
            if st.closed {
                return None;
            }
            self.flush(&mut st);
            if let Some(info) = Self::pop_from(&mut st, Pool::Active) {
                return Some(info);
            }
            if let Some(info) = Self::pop_from(&mut st, Pool::Backoff) {
                self.incoming("active", POP_FROM_BACKOFF);
                return Some(info);
            }
            st = match self.ready.wait_timeout(st, FLUSH_INTERVAL) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Pops the first current entry of activeQ or (rejected pods') backoffQ and puts it in
    /// flight.
    fn pop_from(st: &mut State, pool: Pool) -> Option<QueuedPodInfo> {
        loop {
            let top = match pool {
                Pool::Active => st.active.pop(),
                _ => st.backoff.pop(),
            }?;
            let key = top.info.pod.uid().to_string();
            // Skip heap entries of pods deleted, moved or re-sorted since they were pushed;
            // the pod's newest object is the entry's, not the heap entry's.
            let from = st.next_event;
            let Some(entry) = st
                .entries
                .get_mut(&key)
                .filter(|e| e.pool == pool && e.heap_seq == top.seq)
            else {
                continue;
            };
            entry.pool = Pool::InFlight;
            entry.info.attempts += 1;
            entry.in_flight_from = Some(from);
            let info = entry.info.clone();
            *st.in_flight_starts.entry(from).or_default() += 1;
            return Some(info);
        }
    }

    /// Moves pods whose backoff ended to activeQ, and (every 30 s) pods parked for longer than
    /// [`MAX_IN_UNSCHEDULABLE`] to activeQ or backoffQ.
    fn flush(&self, st: &mut State) {
        let now = Instant::now();
        loop {
            let expired = |h: &BinaryHeap<HeapEntry>| {
                h.peek()
                    .is_some_and(|b| !self.backing_off(Some(b.until), now))
            };
            let top = if expired(&st.backoff) {
                st.backoff.pop()
            } else if expired(&st.error_backoff) {
                st.error_backoff.pop()
            } else {
                None
            };
            let Some(top) = top else { break };
            let key = top.info.pod.uid().to_string();
            if let Some(entry) = st
                .entries
                .get_mut(&key)
                .filter(|e| e.pool == Pool::Backoff && e.heap_seq == top.seq)
            {
                entry.pool = Pool::Active;
                let info = entry.info.clone();
                self.push(st, info, None);
                self.incoming("active", BACKOFF_COMPLETE);
            }
        }
        if now.duration_since(st.last_leftover_flush) >= LEFTOVER_FLUSH_INTERVAL {
            st.last_leftover_flush = now;
            self.move_parked(st, &UNSCHEDULABLE_TIMEOUT, None, None, |e| {
                now.duration_since(e.info.timestamp) > MAX_IN_UNSCHEDULABLE
            });
        }
    }

    /// The pod was assumed on a node: it stays known (so that a failed bind can requeue it)
    /// until the watch shows it bound or deleted. It stays in flight until
    /// [`permitted`](Self::permitted).
    pub fn done(&self, uid: &str) {
        let mut st = self.lock();
        let Some(entry) = st.entries.get_mut(uid) else {
            return;
        };
        if entry.deleted_while_in_flight {
            // Deleted during its cycle: the watch will not report it again.
            Self::remove(&mut st, uid);
        } else {
            entry.pool = Pool::Assumed;
        }
    }

    /// The pod passed Permit: no rejection can send it back to the unschedulable pool any
    /// more, so events are no longer kept for it (upstream calls Done here).
    pub fn permitted(&self, uid: &str) {
        let mut st = self.lock();
        let from = st
            .entries
            .get_mut(uid)
            .and_then(|e| e.in_flight_from.take());
        Self::land(&mut st, from);
    }

    /// Drops a pod from the queue whatever its state (no profile serves it any more).
    pub fn forget(&self, uid: &str) {
        Self::remove(&mut self.lock(), uid);
    }

    /// The attempt failed (upstream's AddUnschedulableIfNotPresent). `plugins` rejected the
    /// pod; none means an error. A rejected pod waits in the unschedulable pool for an event
    /// that may help it, or goes to backoffQ at once when such an event arrived during its
    /// attempt; an error always backs off. With `retry_after` (a plugin's answer changes by
    /// itself then) it goes to backoffQ until then at least.
    pub fn add_unschedulable(
        &self,
        plugins: &[&'static str],
        uid: &str,
        backoff: (Duration, Duration),
        retry_after: Option<Duration>,
    ) {
        let mut st = self.lock();
        let Some(entry) = st.entries.get_mut(uid) else {
            return;
        };
        if entry.deleted_while_in_flight {
            Self::remove(&mut st, uid);
            return;
        }
        let now = Instant::now();
        let from = entry.in_flight_from.take();
        entry.info.unschedulable_plugins = plugins.iter().copied().collect();
        let error = plugins.is_empty();
        if error {
            entry.info.consecutive_errors_count += 1;
        } else {
            entry.info.unschedulable_count += 1;
            entry.info.consecutive_errors_count = 0;
        }
        entry.info.timestamp = now;
        let duration = backoff_duration(backoff_failures(&entry.info), backoff.0, backoff.1);
        entry.backoff_until = (!duration.is_zero()).then(|| self.align(later(now, duration)));
        entry.full_backoff = error || retry_after.is_some();
        if let Some(after) = retry_after {
            entry.backoff_until = Some(
                entry
                    .backoff_until
                    .map_or(later(now, after), |u| u.max(later(now, after))),
            );
        }
        let info = entry.info.clone();
        let helped = error
            || retry_after.is_some()
            || from.is_some_and(|from| {
                st.in_flight_events
                    .iter()
                    .filter(|e| e.seq >= from)
                    .filter(|e| e.only_for.as_deref().is_none_or(|u| u == uid))
                    .any(|e| self.worth_requeuing(&info, &e.event, e.old.as_ref(), e.new.as_ref()))
            });
        Self::land(&mut st, from);
        if helped {
            self.to_active_or_backoff(&mut st, uid, ATTEMPT_FAILURE);
        } else if let Some(entry) = st.entries.get_mut(uid) {
            entry.pool = Pool::Unschedulable;
            st.parked.insert(uid.to_string());
            self.incoming("unschedulable", ATTEMPT_FAILURE);
        }
    }

    /// An error or a failed bind: retry after backoff, which doubles with the errors in a row.
    pub fn requeue_with_backoff(&self, uid: &str, backoff: (Duration, Duration)) {
        self.add_unschedulable(&[], uid, backoff, None);
    }

    /// Removes the waiting pods of `scheduler_name` (its profile is gone) and returns them.
    /// Pods in flight or assumed finish their cycle.
    pub fn drain_scheduler(&self, scheduler_name: &str) -> Vec<Arc<PodInfo>> {
        let mut st = self.lock();
        let keys: Vec<String> = st
            .entries
            .iter()
            .filter(|(_, e)| {
                !matches!(e.pool, Pool::InFlight | Pool::Assumed)
                    && pods::scheduler_name(&e.info.pod.pod) == scheduler_name
            })
            .map(|(k, _)| k.clone())
            .collect();
        keys.into_iter()
            .filter_map(|k| st.entries.remove(&k))
            .map(|e| e.info.pod)
            .collect()
    }

    /// Keeps only the pods whose UID is in `uids` (after a relist of pods).
    pub fn retain_uids(&self, uids: &std::collections::HashSet<String>) {
        let mut st = self.lock();
        let gone: Vec<String> = st
            .entries
            .iter()
            .filter(|(_, e)| e.pool != Pool::InFlight && !uids.contains(e.info.pod.uid()))
            .map(|(k, _)| k.clone())
            .collect();
        for key in gone {
            Self::remove(&mut st, &key);
        }
    }

    /// Stops the queue; `pop` returns `None` from now on.
    pub fn close(&self) {
        self.lock().closed = true;
        self.ready.notify_all();
    }

    /// Whether [`close`](Self::close) was called.
    pub fn is_closed(&self) -> bool {
        self.lock().closed
    }

    /// Pods per pool: (active, backoff, unschedulable, gated), for metrics.
    pub fn lengths(&self) -> (usize, usize, usize, usize) {
        let st = self.lock();
        let count = |p: Pool| st.entries.values().filter(|e| e.pool == p).count();
        (
            count(Pool::Active),
            count(Pool::Backoff),
            count(Pool::Unschedulable),
            count(Pool::Gated),
        )
    }

    pub fn contains(&self, uid: &str) -> bool {
        self.lock().entries.contains_key(uid)
    }

    /// How many events are kept for pods in flight (for tests: they must not pile up).
    #[cfg(test)]
    fn kept_events(&self) -> usize {
        self.lock().in_flight_events.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::events::{
        ASSIGNED_POD_ADD, ActionType, EventResource, Hint, NODE_ADD, Registration,
    };
    use crate::scheduler::plugins::priority_sort;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    /// A plugin that rejects pods and registers `events`.
    struct Rejector {
        name: &'static str,
        events: Vec<Registration>,
    }

    impl Plugin for Rejector {
        fn name(&self) -> &'static str {
            self.name
        }
        fn events_to_register(&self) -> Option<Vec<Registration>> {
            Some(self.events.clone())
        }
    }

    /// Every profile has the same hints: those of the plugins given.
    struct Hints(Arc<QueueingHints>);

    impl HintSource for Hints {
        fn hints(&self, _scheduler_name: &str) -> Option<Arc<QueueingHints>> {
            Some(self.0.clone())
        }
        fn interested_in(&self, event: &ClusterEvent) -> bool {
            self.0.interested_in(event)
        }
    }

    /// "Fit" waits for nodes (any added node helps); "Affinity" waits for bound pods labelled
    /// `app=web` (its hint looks at the pod).
    fn queue() -> SchedulingQueue {
        let fit: Arc<dyn Plugin> = Arc::new(Rejector {
            name: "Fit",
            events: vec![Registration::always(NODE_ADD)],
        });
        let affinity: Arc<dyn Plugin> = Arc::new(Rejector {
            name: "Affinity",
            events: vec![Registration::new(
                ClusterEvent::new(
                    EventResource::Pod,
                    ActionType::ADD | ActionType::UPDATE_POD_LABEL,
                ),
                Arc::new(|_pod, _old, new| {
                    let web = new
                        .and_then(EventObject::pod)
                        .and_then(|p| p.metadata.labels.as_ref())
                        .and_then(|l| l.get("app"))
                        .is_some_and(|v| v == "web");
                    if web { Hint::Queue } else { Hint::Skip }
                }),
            )],
        });
        SchedulingQueue::new(
            priority_sort::build(None, &"pluginConfig".into()).expect("PrioritySort builds"),
            Arc::new(Hints(Arc::new(QueueingHints::build([&fit, &affinity])))),
        )
    }

    fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(name).priority(priority).info())
    }

    /// The UID PodBuilder gives a pod: the queue knows pods by UID.
    fn key(name: &str) -> String {
        format!("uid-{name}")
    }

    fn bound(name: &str, app: &str) -> Option<EventObject> {
        Some(EventObject::Pod(Arc::new(
            PodBuilder::new(name)
                .label("app", app)
                .node_name("n1")
                .build(),
        )))
    }

    fn node(name: &str) -> Option<EventObject> {
        NodeBuilder::new(name)
            .info(vec![])
            .node
            .map(EventObject::Node)
    }

    const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(200));
    const NO_BACKOFF: (Duration, Duration) = (Duration::ZERO, Duration::ZERO);
    const LONG_BACKOFF: (Duration, Duration) = (Duration::from_secs(60), Duration::from_secs(60));

    /// Pops `n` pods, returning their names.
    fn pop_names(q: &SchedulingQueue, n: usize) -> Vec<String> {
        (0..n)
            .filter_map(|_| q.pop())
            .map(|p| p.pod.name().to_string())
            .collect()
    }

    #[test]
    fn pops_by_priority_then_arrival() {
        let q = queue();
        q.add(pod("low", 1), None);
        q.add(pod("high", 10), None);
        q.add(pod("low-later", 1), None);
        assert_eq!(pop_names(&q, 3), ["high", "low", "low-later"]);
    }

    #[test]
    fn a_pod_updated_while_it_waits_in_active_q_is_popped_with_its_newest_object() {
        let q = queue();
        q.add(pod("relabelled", 5), None);
        let relabelled = PodBuilder::new("relabelled")
            .priority(5)
            .label("touched", "yes")
            .info();
        q.update(Arc::new(relabelled), None);
        q.add(pod("later", 1), None);
        let first = q.pop().expect("a pod");
        assert_eq!(first.pod.name(), "relabelled", "not lost by the update");
        assert_eq!(
            first.pod.labels().get("touched").map(String::as_str),
            Some("yes")
        );
        assert_eq!(pop_names(&q, 1), ["later"]);
        assert_eq!(q.lengths(), (0, 0, 0, 0), "nothing left behind");
    }

    #[test]
    fn an_update_that_raises_priority_re_sorts_active_q() {
        let q = queue();
        q.add(pod("x", 1), None);
        q.add(pod("y", 5), None);
        q.add(pod("z", 0), None);
        q.update(pod("x", 10), None);
        assert_eq!(pop_names(&q, 2), ["x", "y"]);
    }

    #[test]
    fn a_failure_no_plugin_rejected_backs_off_as_an_error_and_never_waits_for_an_event() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("p");
        q.add_unschedulable(&[], &key("p"), BACKOFF, None);
        assert_eq!(q.lengths(), (0, 1, 0, 0), "in backoffQ, not the pool");
        let again = q.pop().expect("retried after its backoff");
        assert_eq!(
            (again.consecutive_errors_count, again.unschedulable_count),
            (1, 0)
        );
    }

    #[test]
    fn errors_in_a_row_and_unschedulable_attempts_are_counted_apart() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("p");
        q.requeue_with_backoff(&key("p"), BACKOFF);
        q.pop().expect("after the first error");
        q.requeue_with_backoff(&key("p"), BACKOFF);
        let popped = q.pop().expect("after the second error");
        assert_eq!(
            (popped.consecutive_errors_count, popped.unschedulable_count),
            (2, 0)
        );
        q.add_unschedulable(&["Fit"], &key("p"), BACKOFF, None);
        q.on_event(NODE_ADD, None, node("n2"));
        let popped = q.pop().expect("after a rejection and a node");
        assert_eq!(
            (popped.consecutive_errors_count, popped.unschedulable_count),
            (0, 1),
            "a rejection ends the run of errors"
        );
        assert_eq!(backoff_duration(0, BACKOFF.0, BACKOFF.1), Duration::ZERO);
    }

    #[test]
    fn an_event_moves_pods_without_sending_them_behind_pods_that_failed_later() {
        let q = queue();
        q.add(pod("a", 0), None);
        q.add(pod("b", 0), None);
        q.pop().expect("a");
        q.pop().expect("b");
        q.add_unschedulable(&["Fit"], &key("b"), NO_BACKOFF, None);
        std::thread::sleep(Duration::from_millis(2));
        q.add_unschedulable(&["Fit"], &key("a"), NO_BACKOFF, None);
        q.on_event(NODE_ADD, None, node("n2"));
        assert_eq!(
            pop_names(&q, 2),
            ["b", "a"],
            "b failed first, so it goes first"
        );
    }

    #[test]
    fn gated_pods_wait_until_an_update_clears_the_gate() {
        let q = queue();
        q.add(pod("gated", 0), Some("SchedulingGates"));
        assert_eq!(q.lengths(), (0, 0, 0, 1));
        q.on_event(NODE_ADD, None, node("n2"));
        assert_eq!(q.lengths(), (0, 0, 0, 1), "events do not move gated pods");
        q.update(pod("gated", 0), None);
        assert_eq!(pop_names(&q, 1), ["gated"]);
    }

    #[test]
    fn only_events_a_rejecting_plugin_registered_and_hints_for_move_a_pod() {
        let q = queue();
        q.add(pod("needs-node", 0), None);
        q.add(pod("needs-web", 0), None);
        q.pop().expect("needs-node");
        q.pop().expect("needs-web");
        q.add_unschedulable(&["Fit"], &key("needs-node"), NO_BACKOFF, None);
        q.add_unschedulable(&["Affinity"], &key("needs-web"), NO_BACKOFF, None);
        assert_eq!(q.lengths(), (0, 0, 2, 0));

        q.on_event(ASSIGNED_POD_ADD, None, bound("db-0", "db"));
        assert_eq!(
            q.lengths(),
            (0, 0, 2, 0),
            "the hint skips a pod that does not help"
        );
        let node_label = ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_LABEL);
        q.on_event(node_label, node("n1"), node("n1"));
        assert_eq!(q.lengths(), (0, 0, 2, 0), "nobody registered node labels");

        q.on_event(ASSIGNED_POD_ADD, None, bound("web-0", "web"));
        assert_eq!(
            pop_names(&q, 1),
            ["needs-web"],
            "moved by the pod it waited for"
        );
        assert_eq!(q.lengths(), (0, 0, 1, 0), "the other pod still waits");
        q.on_event(NODE_ADD, None, node("n2"));
        assert_eq!(pop_names(&q, 1), ["needs-node"]);
    }

    #[test]
    fn an_event_during_the_attempt_that_helps_sends_the_pod_to_backoff_not_the_pool() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("a pod");
        q.on_event(NODE_ADD, None, node("n2"));
        q.add_unschedulable(&["Fit"], &key("p"), BACKOFF, None);
        assert_eq!(
            q.lengths(),
            (0, 1, 0, 0),
            "the node arrived during its cycle"
        );
        assert!(q.pop().is_some(), "comes back after its backoff");

        q.on_event(ASSIGNED_POD_ADD, None, bound("db-0", "db"));
        q.add_unschedulable(&["Fit"], &key("p"), BACKOFF, None);
        assert_eq!(
            q.lengths(),
            (0, 0, 1, 0),
            "an event that cannot help changes nothing"
        );
        assert_eq!(q.kept_events(), 0, "no pod in flight keeps no events");
    }

    #[test]
    fn a_pending_pods_own_update_during_its_attempt_is_replayed_through_its_hints() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("p");
        // Its own label change while in flight: Affinity's hint sees the pod labelled web.
        let mut web = PodBuilder::new("p").label("app", "web").build();
        web.metadata.resource_version = Some("2".into());
        q.update(Arc::new(PodInfo::new(Arc::new(web))), None);
        q.add_unschedulable(&["Affinity"], &key("p"), NO_BACKOFF, None);
        let again = q.pop().expect("requeued by its own update");
        assert_eq!(
            again.pod.labels().get("app").map(String::as_str),
            Some("web")
        );
    }

    #[test]
    fn backoff_q_is_popped_when_active_q_is_empty_but_errors_wait_their_backoff() {
        let q = queue();
        q.add(pod("rejected", 0), None);
        q.add(pod("failed", 5), None);
        q.pop().expect("failed");
        q.pop().expect("rejected");
        q.requeue_with_backoff(&key("failed"), LONG_BACKOFF);
        q.add_unschedulable(&["Fit"], &key("rejected"), LONG_BACKOFF, None);
        q.on_event(NODE_ADD, None, node("n2"));
        assert_eq!(q.lengths(), (0, 2, 0, 0), "both back off for a minute");
        let popped = q.pop().expect("popped from backoffQ at once");
        assert_eq!(popped.pod.name(), "rejected");
        assert_eq!(q.lengths(), (0, 1, 0, 0), "the error keeps its backoff");
    }

    #[test]
    fn a_rejection_with_a_deadline_is_retried_then_without_an_event() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("a pod");
        q.add_unschedulable(
            &["StickyNode"],
            &key("p"),
            BACKOFF,
            Some(Duration::from_millis(50)),
        );
        assert_eq!(q.lengths(), (0, 1, 0, 0), "in backoff, not parked");
        assert!(q.pop().is_some(), "comes back when the deadline passes");
    }

    #[test]
    fn deleted_and_assumed_pods_are_not_requeued() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("a pod");
        q.delete(&key("p"));
        q.add_unschedulable(&[], &key("p"), BACKOFF, None);
        assert!(!q.contains(&key("p")), "deleted while in flight: gone");

        q.add(pod("c", 0), None);
        q.pop().expect("c");
        q.delete(&key("c"));
        q.done(&key("c"));
        assert!(
            !q.contains(&key("c")),
            "deleted during a cycle that placed it: gone"
        );

        q.add(pod("b", 0), None);
        q.pop().expect("a pod");
        q.done(&key("b"));
        q.delete(&key("b")); // the watch saw it bound
        q.requeue_with_backoff(&key("b"), BACKOFF);
        assert!(!q.contains(&key("b")), "a bound pod is never requeued");
        assert_eq!(q.kept_events(), 0);
    }

    #[test]
    fn events_are_kept_only_while_a_pod_is_in_flight() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.on_event(NODE_ADD, None, node("n1"));
        assert_eq!(q.kept_events(), 0);
        q.pop().expect("p");
        q.on_event(NODE_ADD, None, node("n2"));
        assert_eq!(q.kept_events(), 1);
        q.done(&key("p"));
        q.on_event(NODE_ADD, None, node("n3"));
        assert_eq!(q.kept_events(), 2, "kept through Permit");
        q.permitted(&key("p"));
        assert_eq!(q.kept_events(), 0, "dropped once no pod needs them");
    }

    #[test]
    fn a_pod_recreated_under_its_name_is_another_pod() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("the first p");
        let again = Arc::new(PodBuilder::new("p").uid("second").info());
        q.add(again, None);
        q.delete(&key("p")); // the first one's deletion, while it is in flight
        q.add_unschedulable(&["Fit"], &key("p"), NO_BACKOFF, None);
        assert!(!q.contains(&key("p")), "the first one is gone");
        let popped = q.pop().expect("the second p is still queued");
        assert_eq!(popped.pod.uid(), "second");
    }

    #[test]
    fn huge_backoffs_and_retry_times_never_panic() {
        let q = queue();
        q.add(pod("p", 0), None);
        q.pop().expect("p");
        let huge = (Duration::MAX, Duration::MAX);
        q.add_unschedulable(&["Fit"], &key("p"), huge, Some(Duration::MAX));
        assert_eq!(
            q.lengths(),
            (0, 1, 0, 0),
            "backing off, as long as the clock allows"
        );
        assert_eq!(
            backoff_duration(40, Duration::MAX, Duration::MAX),
            Duration::MAX
        );
    }

    #[test]
    fn backoff_doubles_up_to_the_max() {
        let (i, m) = (Duration::from_secs(1), Duration::from_secs(10));
        let got: Vec<u64> = (1..=6)
            .map(|a| backoff_duration(a, i, m).as_secs())
            .collect();
        assert_eq!(got, [1, 2, 4, 8, 10, 10]);
    }

    #[test]
    fn backoff_ends_with_the_window_it_falls_in() {
        let q = queue();
        let now = q.epoch + Duration::from_millis(10_300);
        let until = Some(q.align(now + Duration::from_secs(1)));
        assert_eq!(until, Some(q.epoch + Duration::from_secs(11)));
        assert!(q.backing_off(until, q.epoch + Duration::from_millis(11_900)));
        assert!(!q.backing_off(until, q.epoch + Duration::from_secs(12)));
    }

    /// kube-scheduler's `scheduler_queue_incoming_pods_total`: each entry into a sub-queue is
    /// counted once, with the event that caused it.
    #[test]
    fn every_entry_into_a_sub_queue_is_counted_with_its_event() {
        let q = queue();
        let seen: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
        let sink = seen.clone();
        q.count_incoming_with(Box::new(move |queue, event| {
            sink.lock()
                .expect("lock")
                .push((queue.to_string(), event.to_string()));
        }));
        let take = || std::mem::take(&mut *seen.lock().expect("lock"));
        let pair = |queue: &str, event: &str| (queue.to_string(), event.to_string());

        q.add(pod("a", 0), None);
        q.add(pod("gated", 0), Some("SchedulingGates"));
        assert_eq!(
            take(),
            [
                pair("active", "UnschedulablePodAdd"),
                pair("unschedulable", "UnschedulablePodAdd")
            ]
        );
        q.update(pod("gated", 0), None);
        assert_eq!(take(), [pair("active", "UnschedulablePodUpdate")]);

        pop_names(&q, 2);
        q.add_unschedulable(&["Fit"], &key("a"), NO_BACKOFF, None);
        q.requeue_with_backoff(&key("gated"), LONG_BACKOFF);
        assert_eq!(
            take(),
            [
                pair("unschedulable", "ScheduleAttemptFailure"),
                pair("backoff", "ScheduleAttemptFailure")
            ]
        );
        q.on_event(NODE_ADD, None, node("n2"));
        assert_eq!(take(), [pair("active", "NodeAdd")]);
        assert_eq!(pop_names(&q, 1), ["a"]);
        assert!(take().is_empty(), "a pop is no entry");
    }
}
