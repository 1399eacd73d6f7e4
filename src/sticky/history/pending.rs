//! The queue of pending binds: per binding, the binds waiting to be counted and those of the
//! write in flight, and the turns of the bindings waiting for a writer. A burst of thousands of
//! binds waits here as data, not as thousands of tasks; binds that arrive while their binding is
//! written join its next write.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use super::records::Bind;
use crate::inflight::InFlight;
use crate::locks;
use crate::sticky::workload::Workload;

/// A binding's key: its namespace and name.
pub type Key = (String, String);

/// The binds of one binding not written yet, and whether a writer is at it.
pub struct Pending {
    workload: Workload,
    binds: Vec<Bind>,
    writing: bool,
    /// What `binds` and the write in flight add to the counts, each pod once: what the
    /// plugins lay on the written status (so a lookup costs the nodes, not the binds).
    queued: Delta,
    in_flight: Delta,
    /// The pods in `binds` and in the write in flight.
    uids: HashSet<String>,
}

/// What some binds add to a binding's counts.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Delta {
    /// Binds per node.
    pub node_count: BTreeMap<String, i64>,
    /// Binds in all.
    pub binds: i64,
    /// The node of the newest bind, and its pod.
    pub latest: Option<String>,
    pub newest_pod: Option<String>,
}

impl Delta {
    fn add(&mut self, bind: &Bind) {
        let n = self.node_count.entry(bind.node.clone()).or_insert(0);
        *n = n.saturating_add(1);
        self.binds = self.binds.saturating_add(1);
        self.latest = Some(bind.node.clone());
        self.newest_pod = Some(bind.pod_uid.clone());
    }

    pub fn is_empty(&self) -> bool {
        self.binds == 0
    }
}

/// A binding's binds not written yet.
pub struct Unwritten {
    pub workload: Workload,
    /// What the write in flight adds (it may have landed, its answer not yet handled).
    pub in_flight: Delta,
    /// What the binds waiting for the next write add.
    pub queued: Delta,
}

/// The pending binds of every binding, and the turns queued to write them.
#[derive(Default)]
pub struct PendingBinds {
    pending: Mutex<HashMap<Key, Pending>>,
    /// The bindings queued to be written, each once while its binds wait.
    turns: Mutex<VecDeque<Key>>,
    turn_queued: tokio::sync::Notify,
    /// The queued bindings not written yet.
    writers: InFlight,
    /// Set when the writer is gone: no turn comes any more, and the workers end.
    closed: std::sync::atomic::AtomicBool,
}

impl PendingBinds {
    /// Adds `bind` to `workload`'s binding; returns the binding's key when the caller is to
    /// write its binds (no write to that binding is under way).
    pub fn add(&self, workload: &Workload, bind: Bind) -> Option<Key> {
        let key = (workload.namespace.clone(), workload.binding_name());
        let mut pending = locks::lock(&self.pending);
        let entry = pending.entry(key.clone()).or_insert_with(|| Pending {
            workload: workload.clone(),
            binds: Vec::new(),
            writing: false,
            queued: Delta::default(),
            in_flight: Delta::default(),
            uids: HashSet::new(),
        });
        if entry.uids.insert(bind.pod_uid.clone()) {
            entry.queued.add(&bind);
        }
        entry.binds.push(bind);
        if entry.writing {
            return None;
        }
        entry.writing = true;
        Some(key)
    }

    /// The next batch of `key`'s binds, now in flight, with their workload; `None` when none
    /// waits (the binding leaves the map: the next bind starts a new write).
    pub fn take_batch(&self, key: &Key) -> Option<(Workload, Vec<Bind>)> {
        let mut pending = locks::lock(&self.pending);
        let entry = pending.get_mut(key)?;
        if entry.binds.is_empty() {
            pending.remove(key);
            return None;
        }
        entry.in_flight = std::mem::take(&mut entry.queued);
        Some((entry.workload.clone(), std::mem::take(&mut entry.binds)))
    }

    /// The batch in flight for `key` was written (or failed for good).
    pub fn batch_done(&self, key: &Key) {
        if let Some(entry) = locks::lock(&self.pending).get_mut(key) {
            // The pods waiting now: those of the next write (a pod reported again while its
            // first report was in flight among them).
            entry.uids = entry.binds.iter().map(|b| b.pod_uid.clone()).collect();
            entry.in_flight = Delta::default();
        }
    }

    /// The binds of binding `key` not written yet, with its workload; `None` when none waits.
    pub fn unwritten(&self, key: &Key) -> Option<Unwritten> {
        let pending = locks::lock(&self.pending);
        let p = pending.get(key)?;
        if p.binds.is_empty() && p.in_flight.is_empty() {
            return None;
        }
        Some(Unwritten {
            workload: p.workload.clone(),
            in_flight: p.in_flight.clone(),
            queued: p.queued.clone(),
        })
    }

    /// Queues a turn to write `key`'s binds.
    pub fn queue_turn(&self, key: Key) {
        self.writers.start();
        locks::lock(&self.turns).push_back(key);
        self.turn_queued.notify_one();
    }

    /// The next queued turn, or `None` after waiting for one to be queued (at once when
    /// closed).
    pub async fn next_turn(&self) -> Option<Key> {
        let notified = self.turn_queued.notified();
        let mut notified = std::pin::pin!(notified);
        // Registered before the checks: a close between them still wakes it.
        notified.as_mut().enable();
        let next = locks::lock(&self.turns).pop_front();
        if next.is_none() && !self.closed.load(std::sync::atomic::Ordering::Acquire) {
            // Woken by the next turn queued (or by one queued since the queue was found empty:
            // `notify_one` keeps a permit when nobody waits), or by the close.
            notified.await;
        }
        next
    }

    /// No turn comes any more (the writer is gone): every worker waiting for one is woken, and
    /// none waits again.
    pub fn close(&self) {
        self.closed
            .store(true, std::sync::atomic::Ordering::Release);
        self.turn_queued.notify_waiters();
    }

    /// How many bindings wait for a turn.
    pub fn turns_waiting(&self) -> usize {
        locks::lock(&self.turns).len()
    }

    /// A queued turn was taken and its binds written.
    pub fn turn_done(&self) {
        self.writers.finish();
    }

    /// Waits until no queued turn is left unwritten, at most `grace`; returns how many are.
    pub async fn wait_idle(&self, grace: std::time::Duration) -> usize {
        self.writers.wait(grace).await
    }
}
