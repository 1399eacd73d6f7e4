//! The scheduling queue, as kube-scheduler's PriorityQueue: `activeQ` ordered by the QueueSort
//! plugin, `backoffQ` for pods that failed recently, the unschedulable pool for pods that wait
//! for a cluster event, and the gated set for pods held by PreEnqueue (scheduling gates).

use std::cmp::Ordering as CmpOrdering;
use std::collections::{BTreeSet, BinaryHeap, HashMap};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use crate::k8s::pods;
use crate::locks;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::{Plugin, QueuedPodInfo};

/// How long a pod may stay in the unschedulable pool before it is retried anyway
/// (kube-scheduler's podMaxInUnschedulablePodsDuration).
pub const MAX_IN_UNSCHEDULABLE: Duration = Duration::from_secs(5 * 60);
/// How often backoff and the unschedulable pool are flushed.
const FLUSH_INTERVAL: Duration = Duration::from_millis(200);

/// What happened in the cluster that may make unschedulable pods fit now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClusterEvent {
    NodeAdded,
    NodeChanged,
    PodDeleted,
    PodMoved,
    ProfileChanged,
    BindingChanged,
    UnschedulableTimeout,
}

impl ClusterEvent {
    pub fn label(self) -> &'static str {
        match self {
            ClusterEvent::NodeAdded => "NodeAdd",
            ClusterEvent::NodeChanged => "NodeUpdate",
            ClusterEvent::PodDeleted => "AssignedPodDelete",
            ClusterEvent::PodMoved => "AssignedPodUpdate",
            ClusterEvent::ProfileChanged => "ProfileChange",
            ClusterEvent::BindingChanged => "StickyBindingChange",
            ClusterEvent::UnschedulableTimeout => "UnschedulableTimeout",
        }
    }
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

struct ActiveEntry {
    info: QueuedPodInfo,
    sort: Arc<dyn Plugin>,
    seq: u64,
}

impl PartialEq for ActiveEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for ActiveEntry {}
impl PartialOrd for ActiveEntry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for ActiveEntry {
    /// BinaryHeap pops the greatest: the entry QueueSort says goes first.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        match self.sort.queue_sort() {
            Some(qs) if qs.less(&self.info, &other.info) => CmpOrdering::Greater,
            Some(qs) if qs.less(&other.info, &self.info) => CmpOrdering::Less,
            _ => other.seq.cmp(&self.seq),
        }
    }
}

struct BackoffEntry {
    until: Instant,
    key: String,
}
impl PartialEq for BackoffEntry {
    fn eq(&self, other: &Self) -> bool {
        self.until == other.until && self.key == other.key
    }
}
impl Eq for BackoffEntry {}
impl PartialOrd for BackoffEntry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for BackoffEntry {
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .until
            .cmp(&self.until)
            .then_with(|| other.key.cmp(&self.key))
    }
}

#[derive(Clone)]
struct Entry {
    info: QueuedPodInfo,
    pool: Pool,
    /// In the unschedulable pool since.
    since: Instant,
    backoff_until: Instant,
    /// An event or update arrived while the pod was in flight: retry it rather than park it.
    moved_while_in_flight: bool,
    /// A deletion arrived while the pod was in flight.
    deleted_while_in_flight: bool,
    /// The sequence number of this pod's newest activeQ heap entry: older heap entries of the
    /// pod (pushed before an update re-sorted it) are skipped when popped.
    heap_seq: u64,
}

#[derive(Default)]
struct State {
    entries: HashMap<String, Entry>,
    active: BinaryHeap<ActiveEntry>,
    backoff: BinaryHeap<BackoffEntry>,
    seq: u64,
    closed: bool,
}

/// The queue shared by the watch tasks (add, update, delete, events) and the scheduling loop (pop).
pub struct SchedulingQueue {
    state: Mutex<State>,
    ready: Condvar,
    sort: Arc<dyn Plugin>,
}

/// The backoff of a pod after `failures` failures: none before the first, then
/// initial × 2^(failures-1), at most max.
pub fn backoff_duration(failures: u32, initial: Duration, max: Duration) -> Duration {
    if failures == 0 {
        return Duration::ZERO;
    }
    let exp = (failures - 1).min(30);
    initial.saturating_mul(1u32 << exp).min(max)
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
    /// A queue ordered by `sort`, the QueueSort plugin all profiles share.
    pub fn new(sort: Arc<dyn Plugin>) -> Self {
        SchedulingQueue {
            state: Mutex::new(State::default()),
            ready: Condvar::new(),
            sort,
        }
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the queue usable: its state is always consistent
        // between statements that change it.
        locks::lock(&self.state)
    }

    /// Pushes `info` on activeQ as the pod's current heap entry.
    fn push_active(&self, st: &mut State, info: QueuedPodInfo) {
        st.seq += 1;
        let seq = st.seq;
        if let Some(entry) = st.entries.get_mut(&info.pod.key()) {
            entry.heap_seq = seq;
        }
        st.active.push(ActiveEntry {
            info,
            sort: self.sort.clone(),
            seq,
        });
        self.ready.notify_one();
    }

    /// Adds a new pending pod. `gate` is the PreEnqueue plugin holding it, if any.
    pub fn add(&self, pod: Arc<PodInfo>, gate: Option<&'static str>) {
        let key = pod.key();
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
                since: now,
                backoff_until: now,
                moved_while_in_flight: false,
                deleted_while_in_flight: false,
                heap_seq: 0,
            },
        );
        if pool == Pool::Active {
            self.push_active(&mut st, info);
        }
    }

    /// An update of a pending pod: the newest object is used (a pod in activeQ is re-sorted
    /// with it); a gated pod whose gates are gone, or an unschedulable pod that changed, is
    /// retried.
    pub fn update(&self, pod: Arc<PodInfo>, gate: Option<&'static str>) {
        let key = pod.key();
        let mut st = self.lock();
        let Some(entry) = st.entries.get_mut(&key) else {
            drop(st);
            self.add(pod, gate);
            return;
        };
        let spec_changed = entry.info.pod.pod.spec != pod.pod.spec
            || entry.info.pod.pod.metadata.labels != pod.pod.metadata.labels;
        entry.info.pod = pod;
        entry.info.gated_by = gate;
        match entry.pool {
            Pool::Active => {
                let info = entry.info.clone();
                self.push_active(&mut st, info);
            }
            Pool::Gated if gate.is_none() => {
                entry.pool = Pool::Active;
                entry.info.timestamp = Instant::now();
                let info = entry.info.clone();
                self.push_active(&mut st, info);
            }
            Pool::Unschedulable if spec_changed => {
                let info = entry.info.clone();
                let until = entry.backoff_until;
                self.to_active_or_backoff(&mut st, info, until);
            }
            Pool::InFlight if spec_changed => entry.moved_while_in_flight = true,
            _ => {}
        }
    }

    /// Forgets a pod (deleted, bound by someone else, or no longer ours).
    pub fn delete(&self, key: &str) {
        let mut st = self.lock();
        if let Some(entry) = st.entries.get_mut(key) {
            if entry.pool == Pool::InFlight {
                entry.deleted_while_in_flight = true;
            } else {
                st.entries.remove(key);
                // Stale heap entries are skipped on pop.
            }
        }
    }

    /// Moves a pod to activeQ, or to backoffQ while its backoff lasts. Its timestamp stays:
    /// an event moving a pod does not send it behind pods that failed after it.
    fn to_active_or_backoff(&self, st: &mut State, info: QueuedPodInfo, until: Instant) {
        let key = info.pod.key();
        let Some(entry) = st.entries.get_mut(&key) else {
            return;
        };
        entry.info = info.clone();
        if until > Instant::now() {
            entry.pool = Pool::Backoff;
            st.backoff.push(BackoffEntry { until, key });
        } else {
            entry.pool = Pool::Active;
            self.push_active(st, info);
        }
    }

    /// Takes the next pod to schedule, waiting for one; `None` once the queue is closed.
    pub fn pop(&self) -> Option<QueuedPodInfo> {
        let mut st = self.lock();
        loop {
            if st.closed {
                return None;
            }
            self.flush(&mut st);
            while let Some(top) = st.active.pop() {
                let key = top.info.pod.key();
                let current = st.entries.get_mut(&key);
                // Skip heap entries of pods deleted, moved or re-sorted since they were pushed;
                // the pod's newest object is the entry's, not the heap entry's.
                if let Some(entry) =
                    current.filter(|e| e.pool == Pool::Active && e.heap_seq == top.seq)
                {
                    entry.pool = Pool::InFlight;
                    entry.info.attempts += 1;
                    entry.moved_while_in_flight = false;
                    return Some(entry.info.clone());
                }
            }
            st = match self.ready.wait_timeout(st, FLUSH_INTERVAL) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Moves pods whose backoff expired to activeQ, and pods parked too long to activeQ/backoffQ.
    fn flush(&self, st: &mut State) {
        let now = Instant::now();
        while st.backoff.peek().is_some_and(|b| b.until <= now) {
            let Some(b) = st.backoff.pop() else { break };
            let Some(entry) = st.entries.get_mut(&b.key) else {
                continue;
            };
            if entry.pool == Pool::Backoff && entry.backoff_until <= now {
                entry.pool = Pool::Active;
                let info = entry.info.clone();
                self.push_active(st, info);
            }
        }
        let stale: Vec<(QueuedPodInfo, Instant)> = st
            .entries
            .values()
            .filter(|e| {
                e.pool == Pool::Unschedulable && now.duration_since(e.since) >= MAX_IN_UNSCHEDULABLE
            })
            .map(|e| (e.info.clone(), e.backoff_until))
            .collect();
        for (info, until) in stale {
            self.to_active_or_backoff(st, info, until);
        }
    }

    /// The cycle for a popped pod ended with it assumed on a node: it stays known (so that a
    /// failed bind can requeue it) until the watch shows it bound or deleted.
    pub fn done(&self, key: &str) {
        if let Some(entry) = self.lock().entries.get_mut(key) {
            entry.pool = Pool::Assumed;
        }
    }

    /// Drops a pod from the queue whatever its state (no profile serves it any more).
    pub fn forget(&self, key: &str) {
        self.lock().entries.remove(key);
    }

    /// The pod did not fit. It waits in the unschedulable pool for a cluster event, or goes
    /// to backoffQ at once when an event arrived while it was being scheduled. With
    /// `retry_after` (a plugin's answer changes by itself then) it goes to backoffQ until then.
    pub fn add_unschedulable(
        &self,
        info: QueuedPodInfo,
        plugins: &[&'static str],
        backoff: (Duration, Duration),
        retry_after: Option<Duration>,
    ) {
        let key = info.pod.key();
        let mut st = self.lock();
        let Some(entry) = st.entries.get_mut(&key) else {
            return;
        };
        if entry.deleted_while_in_flight {
            st.entries.remove(&key);
            return;
        }
        let now = Instant::now();
        entry.info.unschedulable_plugins = plugins.iter().copied().collect();
        // No plugin rejected the pod: something unusual failed; it backs off as an error would,
        // never waits in the pool for an event (upstream's determineSchedulingHintForInFlightPod).
        let error = plugins.is_empty();
        if error {
            entry.info.consecutive_errors_count += 1;
        } else {
            entry.info.unschedulable_count += 1;
            entry.info.consecutive_errors_count = 0;
        }
        entry.info.timestamp = now;
        entry.backoff_until =
            now + backoff_duration(backoff_failures(&entry.info), backoff.0, backoff.1);
        entry.since = now;
        if let Some(after) = retry_after {
            entry.backoff_until = entry.backoff_until.max(now + after);
        }
        if error || entry.moved_while_in_flight || retry_after.is_some() {
            entry.pool = Pool::Backoff;
            let until = entry.backoff_until;
            st.backoff.push(BackoffEntry { until, key });
        } else {
            entry.pool = Pool::Unschedulable;
        }
    }

    /// An error or a failed bind: retry after backoff, which doubles with the errors in a row.
    pub fn requeue_with_backoff(&self, info: QueuedPodInfo, backoff: (Duration, Duration)) {
        let key = info.pod.key();
        let mut st = self.lock();
        let now = Instant::now();
        // A pod deleted (or bound by someone else) meanwhile is not requeued.
        let Some(entry) = st.entries.get_mut(&key) else {
            return;
        };
        entry.info = info;
        if entry.deleted_while_in_flight {
            st.entries.remove(&key);
            return;
        }
        entry.info.consecutive_errors_count += 1;
        entry.info.timestamp = now;
        entry.backoff_until =
            now + backoff_duration(backoff_failures(&entry.info), backoff.0, backoff.1);
        entry.pool = Pool::Backoff;
        let until = entry.backoff_until;
        st.backoff.push(BackoffEntry { until, key });
    }

    /// A cluster event: every unschedulable pod is retried (after its backoff), and pods in
    /// flight are marked so that a failure sends them to backoff instead of the pool.
    pub fn move_all_to_active_or_backoff(&self, _event: ClusterEvent) {
        let mut st = self.lock();
        let parked: Vec<(QueuedPodInfo, Instant)> = st
            .entries
            .values_mut()
            .filter_map(|e| match e.pool {
                Pool::Unschedulable => Some((e.info.clone(), e.backoff_until)),
                Pool::InFlight => {
                    e.moved_while_in_flight = true;
                    None
                }
                _ => None,
            })
            .collect();
        for (info, until) in parked {
            self.to_active_or_backoff(&mut st, info, until);
        }
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
        st.entries
            .retain(|_, e| e.pool == Pool::InFlight || uids.contains(e.info.pod.uid()));
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

    pub fn contains(&self, key: &str) -> bool {
        self.lock().entries.contains_key(key)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::plugins::priority_sort;
    use crate::scheduler::testing::PodBuilder;

    fn queue() -> SchedulingQueue {
        SchedulingQueue::new(
            priority_sort::build(None, &"pluginConfig".into()).expect("PrioritySort builds"),
        )
    }

    fn pod(name: &str, priority: i32) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(name).priority(priority).info())
    }

    const BACKOFF: (Duration, Duration) = (Duration::from_millis(50), Duration::from_millis(200));

    #[test]
    fn pops_by_priority_then_arrival() {
        let q = queue();
        q.add(pod("low", 1), None);
        q.add(pod("high", 10), None);
        q.add(pod("low-later", 1), None);
        let order: Vec<String> = (0..3)
            .filter_map(|_| q.pop())
            .map(|p| p.pod.name().to_string())
            .collect();
        assert_eq!(order, ["high", "low", "low-later"]);
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
        assert_eq!(
            q.pop().map(|p| p.pod.name().to_string()).as_deref(),
            Some("later")
        );
        assert_eq!(q.lengths(), (0, 0, 0, 0), "nothing left behind");
    }

    #[test]
    fn an_update_that_raises_priority_re_sorts_active_q() {
        let q = queue();
        q.add(pod("x", 1), None);
        q.add(pod("y", 5), None);
        q.add(pod("z", 0), None);
        q.update(pod("x", 10), None);
        let order: Vec<String> = (0..2)
            .filter_map(|_| q.pop())
            .map(|p| p.pod.name().to_string())
            .collect();
        assert_eq!(order, ["x", "y"]);
    }

    #[test]
    fn a_failure_no_plugin_rejected_backs_off_as_an_error_and_never_waits_for_an_event() {
        let q = queue();
        q.add(pod("p", 0), None);
        let popped = q.pop().expect("p");
        q.add_unschedulable(popped, &[], BACKOFF, None);
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
        let popped = q.pop().expect("p");
        q.requeue_with_backoff(popped, BACKOFF);
        let popped = q.pop().expect("after the first error");
        q.requeue_with_backoff(popped, BACKOFF);
        let popped = q.pop().expect("after the second error");
        assert_eq!(
            (popped.consecutive_errors_count, popped.unschedulable_count),
            (2, 0)
        );
        q.move_all_to_active_or_backoff(ClusterEvent::NodeAdded);
        q.add_unschedulable(popped, &["NodeResourcesFit"], BACKOFF, None);
        let popped = q.pop().expect("after a rejection");
        assert_eq!(
            (popped.consecutive_errors_count, popped.unschedulable_count),
            (0, 1),
            "a rejection ends the run of errors"
        );
        assert_eq!(backoff_duration(0, BACKOFF.0, BACKOFF.1), Duration::ZERO);
    }

    #[test]
    fn an_event_moves_pods_without_sending_them_behind_pods_that_failed_later() {
        let none = (Duration::ZERO, Duration::ZERO);
        let q = queue();
        q.add(pod("a", 0), None);
        q.add(pod("b", 0), None);
        let a = q.pop().expect("a");
        let b = q.pop().expect("b");
        q.add_unschedulable(b, &["NodeAffinity"], none, None);
        std::thread::sleep(Duration::from_millis(2));
        q.add_unschedulable(a, &["NodeAffinity"], none, None);
        q.move_all_to_active_or_backoff(ClusterEvent::NodeChanged);
        let order: Vec<String> = (0..2)
            .filter_map(|_| q.pop())
            .map(|p| p.pod.name().to_string())
            .collect();
        assert_eq!(order, ["b", "a"], "b failed first, so it goes first");
    }

    #[test]
    fn gated_pods_wait_until_an_update_clears_the_gate() {
        let q = queue();
        q.add(pod("gated", 0), Some("SchedulingGates"));
        assert_eq!(q.lengths(), (0, 0, 0, 1));
        q.update(pod("gated", 0), None);
        assert_eq!(
            q.pop().map(|p| p.pod.name().to_string()).as_deref(),
            Some("gated")
        );
    }

    #[test]
    fn unschedulable_pods_wait_for_an_event_then_back_off() {
        let q = queue();
        q.add(pod("p", 0), None);
        let popped = q.pop().expect("a pod");
        assert_eq!(popped.attempts, 1);
        q.add_unschedulable(popped, &["NodeResourcesFit"], BACKOFF, None);
        assert_eq!(q.lengths(), (0, 0, 1, 0), "parked until an event");
        q.move_all_to_active_or_backoff(ClusterEvent::NodeAdded);
        let (active, backoff, _, _) = q.lengths();
        assert_eq!(active + backoff, 1);
        let again = q.pop().expect("retried after the event");
        assert_eq!(again.attempts, 2);
    }

    #[test]
    fn an_event_during_the_cycle_sends_the_pod_to_backoff_not_the_pool() {
        let q = queue();
        q.add(pod("p", 0), None);
        let popped = q.pop().expect("a pod");
        q.move_all_to_active_or_backoff(ClusterEvent::NodeAdded);
        q.add_unschedulable(popped, &[], BACKOFF, None);
        assert_eq!(q.lengths(), (0, 1, 0, 0));
        assert!(q.pop().is_some(), "comes back after its backoff");
    }

    #[test]
    fn a_rejection_with_a_deadline_is_retried_then_without_an_event() {
        let q = queue();
        q.add(pod("p", 0), None);
        let popped = q.pop().expect("a pod");
        q.add_unschedulable(
            popped,
            &["StickyNode"],
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
        let popped = q.pop().expect("a pod");
        q.delete("default/p");
        q.add_unschedulable(popped, &[], BACKOFF, None);
        assert!(!q.contains("default/p"), "deleted while in flight: gone");

        q.add(pod("b", 0), None);
        let popped = q.pop().expect("a pod");
        q.done("default/b");
        q.delete("default/b"); // the watch saw it bound
        q.requeue_with_backoff(popped, BACKOFF);
        assert!(!q.contains("default/b"), "a bound pod is never requeued");
    }

    #[test]
    fn backoff_doubles_up_to_the_max() {
        let (i, m) = (Duration::from_secs(1), Duration::from_secs(10));
        let got: Vec<u64> = (1..=6)
            .map(|a| backoff_duration(a, i, m).as_secs())
            .collect();
        assert_eq!(got, [1, 2, 4, 8, 10, 10]);
    }
}
