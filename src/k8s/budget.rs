//! Client-side rate limits for tether's bookkeeping writes, each its own token bucket (QPS and
//! burst, like kube-scheduler's `clientConnection.qps/burst`): events, StickyBinding history
//! writes, the status of SchedulingProfiles and StickyBindings, and failed attempts' pod
//! conditions. Binds have none: they never
//! wait behind bookkeeping. A write waits for its token; nothing is dropped.
//!
//! And [`GiveWay`]: bookkeeping that steps aside while binds are in flight. Events and history
//! writes cost the API server as much as a bind (on a small control plane, more than the
//! scheduler's own work), so during a burst each class runs only a few writes at once and
//! catches up when the burst is over; a backlog past its bound is written at full pace again,
//! so nothing waits without limit and nothing is dropped for it.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use governor::{DefaultDirectRateLimiter, Quota, RateLimiter};

/// The slowest refill of a bucket: a token a day.
const MAX_PERIOD: Duration = Duration::from_secs(86_400);

/// One token bucket; unlimited when built with a QPS of zero.
#[derive(Clone, Default)]
pub struct Bucket(Option<Arc<DefaultDirectRateLimiter>>);

impl Bucket {
    /// `qps` tokens a second, up to `burst` at once (at least one); `qps` 0, or anything not
    /// a positive number: unlimited.
    pub fn new(qps: f64, burst: u32) -> Self {
        if !(qps.is_finite() && qps > 0.0) {
            return Bucket(None);
        }
        // Checked: a rate from a flag never overflows a duration (1e-300 per second).
        let period = Duration::try_from_secs_f64(1.0 / qps)
            .unwrap_or(Duration::MAX)
            .clamp(Duration::from_nanos(1), MAX_PERIOD);
        let burst = NonZeroU32::new(burst.max(1)).unwrap_or(NonZeroU32::MIN);
        Bucket(
            Quota::with_period(period).map(|q| Arc::new(RateLimiter::direct(q.allow_burst(burst)))),
        )
    }

    /// Waits for a token.
    pub async fn take(&self) {
        if let Some(limiter) = &self.0 {
            limiter.until_ready().await;
        }
    }

    /// Takes a token if one is there now.
    pub fn try_take(&self) -> bool {
        self.0.as_ref().is_none_or(|l| l.check().is_ok())
    }
}

impl std::fmt::Debug for Bucket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Bucket(limited)"
        } else {
            "Bucket(unlimited)"
        })
    }
}

/// The buckets of the bookkeeping writes.
#[derive(Clone, Debug, Default)]
pub struct Budget {
    /// Events (Scheduled, FailedScheduling, profile and binding events).
    pub events: Bucket,
    /// StickyBinding history writes (create and status).
    pub history: Bucket,
    /// Condition and status writes of SchedulingProfiles and StickyBindings.
    pub status: Bucket,
    /// Failed attempts' `PodScheduled=False` conditions (what autoscalers read): never behind
    /// the events.
    pub failures: Bucket,
}

static BUDGET: std::sync::OnceLock<Budget> = std::sync::OnceLock::new();

/// Sets the process's budget (once, at start; before that, and in tests, nothing is limited).
pub fn set(budget: Budget) {
    let _ = BUDGET.set(budget);
}

/// The process's budget.
pub fn get() -> Budget {
    BUDGET.get().cloned().unwrap_or_default()
}

/// Binds in flight in this process: binding cycles between the end of their scheduling cycle
/// and the bind's answer (see `scheduler::binding::BindSlot`).
static BINDS_IN_FLIGHT: AtomicUsize = AtomicUsize::new(0);

/// A bind is on its way; [`bind_answered`] when it is answered.
pub fn bind_started() {
    BINDS_IN_FLIGHT.fetch_add(1, Ordering::SeqCst);
}

/// A bind counted by [`bind_started`] was answered (or its cycle ended without one).
pub fn bind_answered() {
    // Never below zero, whatever the order of calls.
    let _ = BINDS_IN_FLIGHT.fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1));
}

/// Whether any bind is in flight.
pub fn binding() -> bool {
    BINDS_IN_FLIGHT.load(Ordering::SeqCst) > 0
}

/// One class of bookkeeping writes that gives way to binds: while a bind is in flight at most
/// `while_binding` of its writes run at once; otherwise as many as the class's own limit.
#[derive(Clone, Debug)]
pub struct GiveWay(Arc<tokio::sync::Semaphore>);

/// A turn taken from [`GiveWay::turn`], held for the write.
pub type Turn = Option<tokio::sync::OwnedSemaphorePermit>;

impl GiveWay {
    pub fn new(while_binding: usize) -> Self {
        GiveWay(Arc::new(tokio::sync::Semaphore::new(while_binding.max(1))))
    }

    /// Waits for a turn to write: at once while no bind is in flight or when `behind` (the
    /// class's backlog has reached its bound), else for one of the few turns left to writes
    /// while binding.
    pub async fn turn(&self, behind: bool) -> Turn {
        if behind || !binding() {
            return None;
        }
        self.0.clone().acquire_owned().await.ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bucket_admits_its_burst_then_refuses_until_it_refills() {
        let bucket = Bucket::new(0.001, 3);
        assert!((0..3).all(|_| bucket.try_take()), "the burst is admitted");
        assert!(!bucket.try_take(), "then the bucket is empty");
        let unlimited = Bucket::new(0.0, 0);
        assert!((0..10_000).all(|_| unlimited.try_take()));
    }

    #[tokio::test]
    async fn writes_give_way_while_a_bind_is_in_flight_unless_behind() {
        let way = GiveWay::new(2);
        // Another test of this process may bind meanwhile: the idle case is asserted only
        // when nothing else binds.
        bind_started();
        let first = way.turn(false).await;
        let second = way.turn(false).await;
        assert!(
            first.is_some() && second.is_some(),
            "two turns while binding"
        );
        let third = tokio::time::timeout(Duration::from_millis(50), way.turn(false)).await;
        assert!(
            third.is_err(),
            "a third write waits while a bind is in flight"
        );
        assert!(
            way.turn(true).await.is_none(),
            "a write behind its bound does not wait"
        );
        drop(first);
        let third = tokio::time::timeout(Duration::from_secs(5), way.turn(false)).await;
        assert!(matches!(third, Ok(Some(_))), "a turn given back is taken");
        bind_answered();
        if !binding() {
            assert!(way.turn(false).await.is_none(), "no bind, no waiting");
        }
    }
}
