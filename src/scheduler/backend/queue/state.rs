//! What the queue is made of: its state under the lock, each pod's entry and pool, and the
//! labels of the events that move pods. Its ways (`mod.rs`, `requeue.rs`, `backoff.rs`) all
//! read these; none of them is read from here.

use std::collections::{BTreeMap, BTreeSet, BinaryHeap, VecDeque};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use indexmap::IndexMap;

use super::heap::HeapEntry;
use crate::scheduler::framework::events::{ClusterEvent, EventObject, HintSource};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::{Plugin, QueuedPodInfo};

/// How long a pod may stay in the unschedulable pool before it is retried anyway
/// (kube-scheduler's podMaxInUnschedulablePodsDuration).
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);
/// How often the unschedulable pool is checked for pods parked too long (upstream: 30 s).
pub(super) const LEFTOVER_FLUSH_INTERVAL: Duration = Duration::from_secs(30);
/// Counts a pod entering a sub-queue (`active`, `backoff` or `unschedulable`) and the event
/// that sent it there, as kube-scheduler's `scheduler_queue_incoming_pods_total{queue,event}`.
pub type IncomingCounter = Box<dyn Fn(&'static str, &str) + Send + Sync>;

/// The event label of a pod the queue first sees.
pub(super) const POD_ADD: &str = "UnschedulablePodAdd";
/// The event label of a pending pod's own update.
pub(super) const POD_UPDATE: &str = "UnschedulablePodUpdate";
/// The event label of a pod back from a failed attempt.
pub(super) const ATTEMPT_FAILURE: &str = "ScheduleAttemptFailure";
/// The event label of a pod whose backoff ended.
pub(super) const BACKOFF_COMPLETE: &str = "BackoffComplete";
/// The event label of a pod taken from backoffQ early, activeQ being empty.
pub(super) const POP_FROM_BACKOFF: &str = "PopFromBackoffQ";

/// The sub-queues a pod pending for a profile waits in, in the order the queue's summary and
/// walk number them.
pub(super) const PENDING_QUEUES: [&str; 4] = ["active", "backoff", "unschedulable", "gated"];

/// Where a queued pod is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Pool {
    Active,
    Backoff,
    Unschedulable,
    Gated,
    /// Popped; a scheduling cycle works on it.
    InFlight,
    /// Assumed on a node; waits for the watch to confirm the bind (then it is deleted) or for a
    /// failed bind to requeue it.
    Assumed,
    /// No profile serves its schedulerName: never popped; handed back by
    /// [`SchedulingQueue::take_unserved`] when a profile for it appears.
    Unserved,
}

#[derive(Clone)]
pub(super) struct Entry {
    pub(super) info: QueuedPodInfo,
    pub(super) pool: Pool,
    /// When the pod's backoff ends (aligned to a window); `None` when it has none.
    pub(super) backoff_until: Option<Instant>,
    /// While in flight: the sequence number of the first event recorded for it.
    pub(super) in_flight_from: Option<u64>,
    /// A deletion arrived while the pod was in flight.
    pub(super) deleted_while_in_flight: bool,
    /// While in flight or assumed: its profile went away; a failed attempt sends it to the
    /// unserved pool.
    pub(super) unserved_after_flight: bool,
    /// The pod must wait out its backoff (it failed with an error, or a plugin named when to
    /// ask again): it is never taken from backoffQ early.
    pub(super) full_backoff: bool,
    /// The sequence number of this pod's newest heap entry: older heap entries of the pod
    /// (pushed before an update re-sorted it, or before it moved) are skipped when popped.
    pub(super) heap_seq: u64,
    /// Whether the pod has been in activeQ: its first attempt's time is taken then, so the
    /// time it spent gated is not counted in the SLI (upstream's InitialAttemptTimestamp).
    pub(super) activated: bool,
    /// Its preemption's writes are under way: it stays in the unschedulable pool until they
    /// end, whatever event comes (upstream's DefaultPreemption PreEnqueue, "waiting for the
    /// preemption for this pod to be finished").
    pub(super) preempting: bool,
}

impl Entry {
    /// A pod the queue first sees, in `pool` (`gate`: the PreEnqueue plugin holding it).
    pub(super) fn new(pod: Arc<PodInfo>, pool: Pool, gate: Option<&'static str>) -> Self {
        let now = Instant::now();
        Entry {
            info: QueuedPodInfo {
                pod,
                initial_attempt_timestamp: now,
                timestamp: now,
                attempts: 0,
                unschedulable_count: 0,
                consecutive_errors_count: 0,
                unschedulable_plugins: BTreeSet::new(),
                gated_by: gate,
            },
            pool,
            backoff_until: None,
            in_flight_from: None,
            deleted_while_in_flight: false,
            unserved_after_flight: false,
            full_backoff: false,
            heap_seq: 0,
            activated: pool != Pool::Gated,
            preempting: false,
        }
    }
}

pub(super) struct State {
    /// Every pod the queue knows, by UID: an index map, so that the metrics can read it in
    /// slices ([`SchedulingQueue::summary`]).
    pub(super) entries: IndexMap<String, Entry>,
    pub(super) active: BinaryHeap<HeapEntry>,
    /// Pods rejected by plugins, waiting out their backoff.
    pub(super) backoff: BinaryHeap<HeapEntry>,
    /// Pods that failed with an error (or asked to be retried at a time), waiting out their
    /// backoff: never popped early.
    pub(super) error_backoff: BinaryHeap<HeapEntry>,
    pub(super) seq: u64,
    /// Events received while some pod was in flight, oldest first.
    pub(super) in_flight_events: VecDeque<RecordedEvent>,
    pub(super) next_event: u64,
    /// The `in_flight_from` of every pod in flight, counted.
    pub(super) in_flight_starts: BTreeMap<u64, usize>,
    pub(super) last_leftover_flush: Instant,
    /// The keys of the pods in the unschedulable pool (and of some that left it since; they are
    /// dropped when the pool is next looked at).
    pub(super) parked: std::collections::HashSet<String>,
    /// The keys of the pods PreEnqueue holds back (and of some that left since, dropped as
    /// for `parked`).
    pub(super) gated: std::collections::HashSet<String>,
    pub(super) closed: bool,
}

/// The queue shared by the watch tasks (add, update, delete, events) and the scheduling loop (pop).
pub struct SchedulingQueue {
    pub(super) state: Mutex<State>,
    pub(super) ready: Condvar,
    pub(super) sort: Arc<dyn Plugin>,
    pub(super) hints: Arc<dyn HintSource>,
    /// The origin of the backoff windows.
    pub(super) epoch: Instant,
    pub(super) incoming: std::sync::OnceLock<IncomingCounter>,
}

/// An event recorded while pods were in flight.
pub(super) struct RecordedEvent {
    pub(super) seq: u64,
    pub(super) event: ClusterEvent,
    pub(super) old: Option<EventObject>,
    pub(super) new: Option<EventObject>,
    /// For a pending pod's own update: the UID it concerns (other pods skip it).
    pub(super) only_for: Option<String>,
}
