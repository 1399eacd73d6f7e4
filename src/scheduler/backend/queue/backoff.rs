//! Backoff: how long a failed pod waits (doubling with its failures, up to the profile's
//! maximum), the windows backoff ends on, and the flush that moves pods whose backoff ended, or
//! that were parked too long, back to activeQ.

use std::collections::BinaryHeap;
use std::time::{Duration, Instant};

use super::heap::HeapEntry;
use super::state::{
    BACKOFF_COMPLETE, LEFTOVER_FLUSH_INTERVAL, MAX_IN_UNSCHEDULABLE, Pool, SchedulingQueue, State,
};
use crate::scheduler::framework::QueuedPodInfo;
use crate::scheduler::framework::events::UNSCHEDULABLE_TIMEOUT;

/// Backoff ends on whole windows of this length, as upstream's backoffQ ordering window: pods
/// whose backoff ends in the same window leave it together, in QueueSort order.
pub(super) const BACKOFF_WINDOW: Duration = Duration::from_secs(1);

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
pub(super) fn later(now: Instant, d: Duration) -> Instant {
    now.checked_add(d)
        .or_else(|| now.checked_add(Duration::from_secs(365 * 86_400)))
        .unwrap_or(now)
}

/// The failures a pod's backoff doubles with, as upstream's getBackoffTime: its consecutive
/// errors while it has any, else its unschedulable attempts.
pub(super) fn backoff_failures(info: &QueuedPodInfo) -> u32 {
    if info.consecutive_errors_count > 0 {
        info.consecutive_errors_count
    } else {
        info.unschedulable_count
    }
}

impl SchedulingQueue {
    /// The start of the backoff window `t` falls in.
    pub(super) fn align(&self, t: Instant) -> Instant {
        let since = t.saturating_duration_since(self.epoch);
        let windows = since.as_nanos() / BACKOFF_WINDOW.as_nanos();
        let aligned = BACKOFF_WINDOW.saturating_mul(u32::try_from(windows).unwrap_or(u32::MAX));
        self.epoch.checked_add(aligned).unwrap_or(t)
    }

    /// Whether a backoff ending at `until` still lasts: it ends with the window it falls in.
    pub(super) fn backing_off(&self, until: Option<Instant>, now: Instant) -> bool {
        until.is_some_and(|until| until >= self.align(now))
    }

    /// Moves pods whose backoff ended to activeQ, and (every 30 s) pods parked for longer than
    /// [`MAX_IN_UNSCHEDULABLE`] to activeQ or backoffQ.
    pub(super) fn flush(&self, st: &mut State) {
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
            let moved = self.move_parked(st, &UNSCHEDULABLE_TIMEOUT, None, None, |e| {
                now.duration_since(e.info.timestamp) > MAX_IN_UNSCHEDULABLE
            });
            // As any event that moved pods, it is kept for the pods in flight: one rejected
            // now is tried again after its backoff instead of waiting five minutes more.
            if moved > 0 {
                Self::record(st, UNSCHEDULABLE_TIMEOUT, None, None, None);
            }
        }
    }
}
