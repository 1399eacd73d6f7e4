//! The pending pods as the queue holds them, for `tether pending`: where each waits and what
//! held it back last, read in slices as [`SchedulingQueue::summary`] reads them.

use std::sync::Arc;
use std::time::Instant;

use super::state::{Pool, SchedulingQueue};
use crate::scheduler::framework::pod_info::PodInfo;

/// How many pods [`SchedulingQueue::pending`] reads under the lock at a time (as the
/// metrics' summary does).
const SLICE: usize = 2048;

/// One pending pod: the queue's view of it.
#[derive(Clone)]
pub struct PendingPod {
    pub pod: Arc<PodInfo>,
    /// `active`, `backoff`, `unschedulable` or `gated`.
    pub queue: &'static str,
    /// The plugins that rejected it last (empty before its first attempt and after an error).
    pub rejected_by: Vec<&'static str>,
    /// The PreEnqueue plugin holding it back, if one does.
    pub gated_by: Option<&'static str>,
    /// When it entered the queue.
    pub since: Instant,
    pub attempts: u32,
}

impl SchedulingQueue {
    /// The pods pending for a profile, of `namespace` or of every namespace: in activeQ,
    /// backoffQ, the unschedulable pool or gated (in flight, assumed and unserved pods are not
    /// pending for the queue). Read in slices of [`SLICE`] pods, the lock let go in
    /// between, so that the scheduling loop never waits on the walk for long.
    pub fn pending(&self, namespace: Option<&str>) -> Vec<PendingPod> {
        let mut pending = Vec::new();
        let mut at: usize = 0;
        loop {
            let st = self.lock();
            let end = at.saturating_add(SLICE).min(st.entries.len());
            for index in at..end {
                let Some((_, entry)) = st.entries.get_index(index) else {
                    break;
                };
                let queue = match entry.pool {
                    Pool::Active => "active",
                    Pool::Backoff => "backoff",
                    Pool::Unschedulable => "unschedulable",
                    Pool::Gated => "gated",
                    Pool::InFlight | Pool::Assumed | Pool::Unserved => continue,
                };
                let info = &entry.info;
                if namespace.is_some_and(|ns| info.pod.namespace() != ns) {
                    continue;
                }
                pending.push(PendingPod {
                    pod: info.pod.clone(),
                    queue,
                    rejected_by: info.unschedulable_plugins.iter().copied().collect(),
                    gated_by: info.gated_by,
                    since: info.initial_attempt_timestamp,
                    attempts: info.attempts,
                });
            }
            if end >= st.entries.len() {
                break;
            }
            at = end;
        }
        pending
    }
}
