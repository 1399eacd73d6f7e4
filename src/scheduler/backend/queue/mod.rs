//! The scheduling queue, as kube-scheduler's PriorityQueue: `activeQ` ordered by the QueueSort
//! plugin, `backoffQ` for pods that failed recently, the unschedulable pool for pods that wait
//! for a cluster event, and the gated set for pods held by PreEnqueue (scheduling gates,
//! DynamicResources while a claim is missing: asked again on the pod's updates and on the
//! events the holding plugin registered). Pods are known by UID: a pod deleted and created
//! again under its name is another pod.
//!
//! A cluster event moves a pod out of the unschedulable pool only when one of the plugins that
//! rejected it registered the event and its queueing hint says the change may help
//! (`framework/events.rs`). Events that arrive while a pod is being scheduled are kept and
//! replayed against it if it fails, so a change during its cycle is never missed.
//!
//! Every pending pod the watch shows is here: a pod whose schedulerName no profile serves waits
//! in the unserved pool, never popped, until a profile for it appears.
//!
//! Here: the queue's state and a pod's way through it (add, update, pop, done, forget);
//! `requeue.rs`: what sends a pod back (events, failed attempts); `backoff.rs`: how long it
//! waits, and the flush that ends the wait; `heap.rs`: the order of activeQ and backoffQ.

mod backoff;
mod heap;
mod pending;
mod requeue;
mod state;
mod summary;

use std::collections::{BTreeMap, BinaryHeap, VecDeque};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use indexmap::IndexMap;

pub use self::backoff::backoff_duration;
use self::heap::HeapEntry;
pub use self::pending::PendingPod;
use self::state::{Entry, POD_ADD, POD_UPDATE, POP_FROM_BACKOFF, Pool, State};
pub use self::state::{IncomingCounter, MAX_IN_UNSCHEDULABLE, SchedulingQueue};
pub use self::summary::{GROUP_QUEUES, Summary};
use crate::k8s::pods;
use crate::locks;
use crate::scheduler::framework::events::{self, EventObject, HintSource};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::{Plugin, QueuedPodInfo};

/// How many pods [`SchedulingQueue::summary`] reads under the lock at a time.
const SUMMARY_SLICE: usize = 2048;
/// How often a waiting `pop` looks at backoffQ.
const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

impl SchedulingQueue {
    /// A queue ordered by `sort`, the QueueSort plugin all profiles share, that asks `hints`
    /// which events may help a rejected pod.
    pub fn new(sort: Arc<dyn Plugin>, hints: Arc<dyn HintSource>) -> Self {
        let now = Instant::now();
        SchedulingQueue {
            state: Mutex::new(State {
                entries: IndexMap::new(),
                active: BinaryHeap::new(),
                backoff: BinaryHeap::new(),
                error_backoff: BinaryHeap::new(),
                seq: 0,
                in_flight_events: VecDeque::new(),
                next_event: 0,
                in_flight_starts: BTreeMap::new(),
                last_leftover_flush: now,
                parked: std::collections::HashSet::new(),
                gated: std::collections::HashSet::new(),
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

    /// A pod PreEnqueue held back goes to activeQ. As upstream, it keeps its place (its
    /// timestamp is when it was created, not ungated: Kueue and JobSet create pods gated), and
    /// its first attempt is timed from now.
    fn ungate(&self, st: &mut State, key: &str, label: &str) {
        let Some(entry) = st.entries.get_mut(key) else {
            return;
        };
        entry.pool = Pool::Active;
        entry.info.gated_by = None;
        if !entry.activated {
            entry.activated = true;
            entry.info.initial_attempt_timestamp = Instant::now();
        }
        let info = entry.info.clone();
        self.push(st, info, None);
        self.incoming("active", label);
    }

    /// The plugin holding `pod` back, asked again under the queue's lock when it registers
    /// events: the caller ran PreEnqueue before taking the lock, and an event that would have
    /// freed the pod (its claim created) may have passed in between, finding the pod not yet
    /// queued. Events are handled under the same lock, so one of the two sees the other.
    fn gate_now(&self, pod: &PodInfo, gate: Option<&'static str>) -> Option<&'static str> {
        let plugin = gate?;
        let name = pods::scheduler_name(&pod.pod);
        if self.hints.hints(name).is_some_and(|h| h.registers(plugin)) {
            self.hints.pre_enqueue(name, pod)
        } else {
            Some(plugin)
        }
    }

    /// Adds a new pending pod. `gate` is the PreEnqueue plugin holding it, if any.
    pub fn add(&self, pod: Arc<PodInfo>, gate: Option<&'static str>) {
        let key = pod.uid().to_string();
        let mut st = self.lock();
        let gate = self.gate_now(&pod, gate);
        if st
            .entries
            .get(&key)
            .is_some_and(|e| e.pool == Pool::Unserved)
        {
            // Served now: it starts afresh, as a pod first seen.
            Self::remove(&mut st, &key);
        }
        if st.entries.contains_key(&key) {
            drop(st);
            self.update(pod, gate);
            return;
        }
        let pool = if gate.is_some() {
            Pool::Gated
        } else {
            Pool::Active
        };
        let entry = Entry::new(pod, pool, gate);
        let info = entry.info.clone();
        if pool == Pool::Gated {
            st.gated.insert(key.clone());
        }
        st.entries.insert(key, entry);
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
        let gate = self.gate_now(&pod, gate);
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
                self.ungate(&mut st, &key, POD_UPDATE);
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
            Pool::Gated | Pool::Unserved => {}
        }
    }

    /// A pending pod whose schedulerName no profile serves: kept (its newest object) in the
    /// unserved pool, never popped. A pod in flight or assumed finishes its attempt first; if
    /// that fails, it goes to the unserved pool instead of back to wait.
    pub fn add_unserved(&self, pod: Arc<PodInfo>) {
        let key = pod.uid().to_string();
        let mut st = self.lock();
        match st.entries.get_mut(&key) {
            Some(entry) if matches!(entry.pool, Pool::InFlight | Pool::Assumed) => {
                entry.unserved_after_flight = true;
                entry.info.pod = pod;
            }
            Some(entry) => {
                entry.pool = Pool::Unserved;
                entry.info.pod = pod;
            }
            None => {
                st.entries
                    .insert(key, Entry::new(pod, Pool::Unserved, None));
            }
        }
    }

    /// Takes out the unserved pods of `scheduler_name` (a profile for it appeared), to be added
    /// afresh; its pods in flight or assumed are served again whatever their attempt's end.
    pub fn take_unserved(&self, scheduler_name: &str) -> Vec<Arc<PodInfo>> {
        let mut st = self.lock();
        let mut keys = Vec::new();
        for (key, entry) in st
            .entries
            .iter_mut()
            .filter(|(_, e)| pods::scheduler_name(&e.info.pod.pod) == scheduler_name)
        {
            match entry.pool {
                Pool::Unserved => keys.push(key.clone()),
                Pool::InFlight | Pool::Assumed => entry.unserved_after_flight = false,
                _ => {}
            }
        }
        keys.into_iter()
            .filter_map(|k| st.entries.swap_remove(&k))
            .map(|e| e.info.pod)
            .collect()
    }

    /// Forgets a pod (deleted, bound by someone else, or no longer ours). Returns whether it
    /// waited in activeQ or backoffQ, to be tried soon (upstream would pop it and skip it).
    pub fn delete(&self, uid: &str) -> bool {
        let mut st = self.lock();
        let Some(entry) = st.entries.get_mut(uid) else {
            return false;
        };
        let waiting = matches!(entry.pool, Pool::Active | Pool::Backoff);
        if entry.pool == Pool::InFlight {
            entry.deleted_while_in_flight = true;
        } else {
            Self::remove(&mut st, uid);
        }
        waiting
    }

    /// Removes a pod's entry, ending its flight if it was in flight. Stale heap entries are
    /// skipped when popped.
    fn remove(st: &mut State, key: &str) {
        if let Some(entry) = st.entries.swap_remove(key) {
            Self::land(st, entry.in_flight_from);
        }
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

    /// Takes every other waiting pod of a group (those `in_group` says are its members: in
    /// activeQ, backoffQ or the
    /// unschedulable pool, or held at PreEnqueue by `group_plugin` alone) and puts it in flight
    /// with the pod just popped: a gang is tried whole in one group cycle, as upstream's queue
    /// holds a PodGroup as one entity. A sibling `group_plugin` still holds is taken too: the
    /// popped pod passed that plugin's PreEnqueue, so the group is complete, and the event that
    /// frees the siblings may not have been handled yet. The order is the caller's.
    pub fn take_group(
        &self,
        in_group: impl Fn(&crate::k8s::pod::Pod) -> bool,
        popped: &str,
        group_plugin: &'static str,
    ) -> Vec<QueuedPodInfo> {
        let mut st = self.lock();
        let from = st.next_event;
        let mut taken = Vec::new();
        for (uid, entry) in st.entries.iter_mut() {
            let waiting = match entry.pool {
                Pool::Active | Pool::Backoff | Pool::Unschedulable => true,
                Pool::Gated => entry.info.gated_by == Some(group_plugin),
                _ => false,
            };
            if uid == popped || !waiting || !in_group(&entry.info.pod.pod) {
                continue;
            }
            if entry.pool == Pool::Gated {
                entry.info.gated_by = None;
                if !entry.activated {
                    entry.activated = true;
                    entry.info.initial_attempt_timestamp = Instant::now();
                }
            }
            entry.pool = Pool::InFlight;
            entry.info.attempts += 1;
            entry.in_flight_from = Some(from);
            taken.push(entry.info.clone());
        }
        if !taken.is_empty() {
            *st.in_flight_starts.entry(from).or_default() += taken.len();
        }
        taken
    }

    /// Whether a member of the group of `popped` (those `in_group` says are its members) is
    /// held at PreEnqueue by a plugin other than `group_plugin` (a scheduling gate): then, as
    /// upstream's queue gates a PodGroup's whole entity while any of its pods is gated, the
    /// popped pod and its waiting siblings are held by `group_plugin` instead of tried, with no
    /// failure written. The held member's release (its gates removed) puts it back in the
    /// active queue, and its group cycle takes them all.
    pub fn hold_group_while_gated(
        &self,
        in_group: impl Fn(&crate::k8s::pod::Pod) -> bool,
        popped: &str,
        group_plugin: &'static str,
    ) -> bool {
        let mut st = self.lock();
        let gated = st.entries.iter().any(|(uid, e)| {
            uid != popped
                && e.pool == Pool::Gated
                && e.info.gated_by != Some(group_plugin)
                && in_group(&e.info.pod.pod)
        });
        if !gated {
            return false;
        }
        let siblings: Vec<String> = st
            .entries
            .iter()
            .filter(|(uid, e)| {
                (uid.as_str() == popped
                    || matches!(e.pool, Pool::Active | Pool::Backoff | Pool::Unschedulable))
                    && in_group(&e.info.pod.pod)
            })
            .map(|(uid, _)| uid.clone())
            .collect();
        for uid in siblings {
            let Some(entry) = st.entries.get_mut(&uid) else {
                continue;
            };
            let from = entry.in_flight_from.take();
            if uid == popped {
                // Not an attempt: upstream never pops a gated entity.
                entry.info.attempts = entry.info.attempts.saturating_sub(1);
            }
            entry.pool = Pool::Gated;
            entry.info.gated_by = Some(group_plugin);
            entry.backoff_until = None;
            st.gated.insert(uid);
            Self::land(&mut st, from);
        }
        // Their entries in activeQ and backoffQ are stale now (another pool) and skipped.
        true
    }

    /// The pods of a group (those `in_group` says are its members) waiting in the queue (held
    /// at PreEnqueue included), for `tether explain`.
    pub fn pending_of_group(
        &self,
        in_group: impl Fn(&crate::k8s::pod::Pod) -> bool,
    ) -> Vec<Arc<PodInfo>> {
        self.lock()
            .entries
            .values()
            .filter(|e| {
                matches!(
                    e.pool,
                    Pool::Active | Pool::Backoff | Pool::Unschedulable | Pool::Gated
                ) && in_group(&e.info.pod.pod)
            })
            .map(|e| e.info.pod.clone())
            .collect()
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

    /// Drops a pod from the queue whatever its state.
    pub fn forget(&self, uid: &str) {
        Self::remove(&mut self.lock(), uid);
    }

    /// A popped pod no profile serves any more: its attempt ends, and it waits in the unserved
    /// pool for a profile (as a pod first seen under an unserved name would).
    pub fn unserve_popped(&self, uid: &str) {
        Self::end_flight_unserved(&mut self.lock(), uid);
    }

    /// Ends the flight of `uid` into the unserved pool (or removes it, deleted meanwhile).
    fn end_flight_unserved(st: &mut State, uid: &str) {
        let Some(entry) = st.entries.get_mut(uid) else {
            return;
        };
        if entry.deleted_while_in_flight {
            Self::remove(st, uid);
            return;
        }
        let from = entry.in_flight_from.take();
        entry.pool = Pool::Unserved;
        entry.unserved_after_flight = false;
        Self::land(st, from);
    }

    /// Moves the waiting pods of `scheduler_name` (its profile is gone) to the unserved pool.
    /// Pods in flight or assumed finish their cycle; a failed one goes there too.
    pub fn unserve(&self, scheduler_name: &str) {
        let mut st = self.lock();
        for entry in st
            .entries
            .values_mut()
            .filter(|e| pods::scheduler_name(&e.info.pod.pod) == scheduler_name)
        {
            match entry.pool {
                Pool::InFlight | Pool::Assumed => entry.unserved_after_flight = true,
                _ => entry.pool = Pool::Unserved,
            }
        }
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

    /// Pods per pool: (active, backoff, unschedulable, gated), for metrics, counted in one pass.
    pub fn lengths(&self) -> (usize, usize, usize, usize) {
        let st = self.lock();
        let mut counts = (0, 0, 0, 0);
        for entry in st.entries.values() {
            match entry.pool {
                Pool::Active => counts.0 += 1,
                Pool::Backoff => counts.1 += 1,
                Pool::Unschedulable => counts.2 += 1,
                Pool::Gated => counts.3 += 1,
                Pool::InFlight | Pool::Assumed | Pool::Unserved => {}
            }
        }
        counts
    }

    /// Calls `each` with every pod pending for a profile (activeQ, backoffQ, the unschedulable
    /// pool, gated: not in flight, assumed or unserved) and its sub-queue's place in
    /// [`state::PENDING_QUEUES`] (and [`Summary::pools`]), reading [`SUMMARY_SLICE`] pods at a
    /// time with the lock let go in between: however many pods wait (100,000 in a large
    /// cluster), a reader never holds the scheduling loop up for more than one slice. A pod
    /// that moves while it is read may be seen in neither of its pools or in both; a queue at
    /// rest is read exactly.
    fn for_each_pending(&self, mut each: impl FnMut(usize, &Entry)) {
        self.for_each_entry(|slot, entry| {
            if let Some(slot) = slot {
                each(slot, entry);
            }
        });
    }

    /// [`SchedulingQueue::for_each_pending`], with the pods in flight too (slot `None`).
    fn for_each_entry(&self, mut each: impl FnMut(Option<usize>, &Entry)) {
        let mut at: usize = 0;
        loop {
            let st = self.lock();
            let end = at.saturating_add(SUMMARY_SLICE).min(st.entries.len());
            for index in at..end {
                let Some((_, entry)) = st.entries.get_index(index) else {
                    break;
                };
                let slot = match entry.pool {
                    Pool::Active => Some(0),
                    Pool::Backoff => Some(1),
                    Pool::Unschedulable => Some(2),
                    Pool::Gated => Some(3),
                    Pool::InFlight => None,
                    Pool::Assumed | Pool::Unserved => continue,
                };
                each(slot, entry);
            }
            if end >= st.entries.len() {
                break;
            }
            at = end;
        }
    }

    /// Whether the pod is pending for a profile (in any pool but the unserved one).
    pub fn contains(&self, uid: &str) -> bool {
        self.lock()
            .entries
            .get(uid)
            .is_some_and(|e| e.pool != Pool::Unserved)
    }

    /// Whether `uid` is a pending pod the queue holds for a profile (waiting, or in flight and
    /// not deleted meanwhile).
    pub fn holds_pending(&self, uid: &str) -> bool {
        self.lock()
            .entries
            .get(uid)
            .is_some_and(|e| e.pool != Pool::Unserved && !e.deleted_while_in_flight)
    }

    /// How many events are kept for pods in flight (for tests: they must not pile up).
    #[cfg(test)]
    fn kept_events(&self) -> usize {
        self.lock().in_flight_events.len()
    }
}

#[cfg(test)]
mod tests;
