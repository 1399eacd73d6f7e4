//! The evictions this scheduler has started, remembered until the API's answer has reached the
//! cache (a victim's deletion shows there a watch event later).
//!
//! Upstream holds a preemptor at PreEnqueue while its evictions run and learns of a victim's
//! deletion from its informer. A retry that comes before the informer does (another pod's
//! event, a pop from backoffQ while activeQ is empty) finds the victims still running and
//! preempts again: more victims than needed, and the same victim deleted twice. What this
//! scheduler started itself it knows at once, so a victim is *going* from the moment its
//! eviction is decided:
//! - the preemptor's retry is not eligible while a victim on its nominated node is going;
//! - another preemptor's dry run never reprieves a going pod (it leaves anyway), so it takes
//!   the going pods' room first and asks for no more victims than it needs;
//! - an eviction is carried out once.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use crate::k8s::pod::Pod;
use crate::locks;

/// How long an eviction is remembered: far longer than a watch event takes to arrive, short
/// enough that the set stays as small as the evictions of the last minute.
const REMEMBERED: Duration = Duration::from_secs(60);

/// The victims whose eviction was decided (by UID), and when.
#[derive(Default)]
pub struct Evictions {
    started: Mutex<HashMap<String, Instant>>,
}

fn uid(pod: &Pod) -> &str {
    pod.metadata.uid.as_deref().unwrap_or_default()
}

impl Evictions {
    /// Whether `pod` is on its way out: being deleted, or its eviction started here.
    pub fn going(&self, pod: &Pod) -> bool {
        pod.metadata.deletion_timestamp.is_some() || self.started_here(pod)
    }

    /// Whether this scheduler started evicting `pod` (and has not given up on it).
    pub fn started_here(&self, pod: &Pod) -> bool {
        locks::lock(&self.started)
            .get(uid(pod))
            .is_some_and(|at| at.elapsed() < REMEMBERED)
    }

    /// Marks the `victims` that are not going yet as going, and returns them: the evictions to
    /// carry out.
    pub fn start<'a, I>(&self, victims: I) -> Vec<std::sync::Arc<Pod>>
    where
        I: IntoIterator<Item = &'a std::sync::Arc<Pod>>,
    {
        let now = Instant::now();
        let mut started = locks::lock(&self.started);
        started.retain(|_, at| now.saturating_duration_since(*at) < REMEMBERED);
        victims
            .into_iter()
            .filter(|v| v.metadata.deletion_timestamp.is_none())
            .filter(|v| started.insert(uid(v).to_string(), now).is_none())
            .cloned()
            .collect()
    }

    /// Forgets the eviction of `pod`: it was not carried out, so a later preemption may pick it.
    pub fn failed(&self, pod: &Pod) {
        locks::lock(&self.started).remove(uid(pod));
    }

    /// How many evictions are remembered.
    pub fn len(&self) -> usize {
        locks::lock(&self.started).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn an_eviction_starts_once_and_a_failed_one_may_start_again() {
        let evictions = Evictions::default();
        let (a, b) = (
            Arc::new(PodBuilder::new("a").build()),
            Arc::new(PodBuilder::new("b").build()),
        );
        assert!(!evictions.going(&a));
        assert_eq!(evictions.start([&a]).len(), 1);
        assert!(evictions.going(&a) && evictions.started_here(&a));
        let second = evictions.start([&a, &b]);
        assert_eq!(second.len(), 1, "a is going already");
        assert_eq!(second[0].metadata.name.as_deref(), Some("b"));
        evictions.failed(&a);
        assert!(!evictions.going(&a));
        assert_eq!(evictions.start([&a]).len(), 1);
        assert_eq!(evictions.len(), 2);
    }

    #[test]
    fn a_pod_being_deleted_is_going_and_never_evicted_again() {
        let evictions = Evictions::default();
        let mut pod = PodBuilder::new("a").build();
        pod.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
                k8s_openapi::jiff::Timestamp::now(),
            ));
        let pod = Arc::new(pod);
        assert!(evictions.going(&pod) && !evictions.started_here(&pod));
        assert!(evictions.start([&pod]).is_empty());
    }
}
