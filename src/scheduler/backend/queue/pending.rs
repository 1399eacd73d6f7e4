//! The pending pods as the queue holds them, for `tether pending`: where each waits and what
//! held it back last, read in slices as [`SchedulingQueue::summary`] reads them.

use std::sync::Arc;
use std::time::Instant;

use super::state::{PENDING_QUEUES, SchedulingQueue};
use crate::scheduler::framework::pod_info::PodInfo;

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
    /// pending for the queue), read in slices as the metrics' summary reads the queue, so that
    /// the scheduling loop never waits on the walk for long.
    pub fn pending(&self, namespace: Option<&str>) -> Vec<PendingPod> {
        let mut pending = Vec::new();
        self.for_each_pending(|slot, entry| {
            let info = &entry.info;
            if namespace.is_some_and(|ns| info.pod.namespace() != ns) {
                return;
            }
            pending.push(PendingPod {
                pod: info.pod.clone(),
                queue: PENDING_QUEUES[slot],
                rejected_by: info.unschedulable_plugins.iter().copied().collect(),
                gated_by: info.gated_by,
                since: info.initial_attempt_timestamp,
                attempts: info.attempts,
            });
        });
        pending
    }
}
