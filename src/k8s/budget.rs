//! Client-side rate limits for tether's bookkeeping writes, each its own token bucket (QPS and
//! burst, like kube-scheduler's `clientConnection.qps/burst`): events, StickyBinding history
//! writes, the status of SchedulingProfiles and StickyBindings, and failed attempts' pod
//! conditions. Binds have none: they never
//! wait behind bookkeeping. A write waits for its token; nothing is dropped.

use std::num::NonZeroU32;
use std::sync::Arc;
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
}
