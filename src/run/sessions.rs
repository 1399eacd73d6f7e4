//! The sessions a process has had, held weakly, so that one whose term is over is seen to
//! leave memory (`tether_sessions_held`) or named when it does not.

use std::sync::Arc;

use crate::scheduler::Scheduler;
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::informers::disruption_budgets::DisruptionBudgets;
use crate::scheduler::informers::pod_groups::PodGroupIndex;
use crate::scheduler::informers::selectors::WorkloadSelectors;
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::metrics::Metrics;
use crate::scheduler::plugins::handle::Handle;
use crate::sticky::bindings::BindingIndex;
use crate::sticky::history::HistoryWriter;
use crate::sticky::owners::OwnerCache;

/// The scheduler and the watch-fed state around it, built in order: the indexes, the cache
/// and queue, the history writer (which reads them), the scheduler, and the handle the profile
/// controller builds plugins with.
pub(super) struct Parts {
    pub(super) sched: Arc<Scheduler>,
    pub(super) history: Arc<HistoryWriter>,
    pub(super) handle: Handle,
    pub(super) selectors: Arc<WorkloadSelectors>,
    pub(super) owners: Arc<OwnerCache>,
    pub(super) bindings: Arc<BindingIndex>,
    pub(super) storage: Arc<StorageIndex>,
    pub(super) devices: Arc<DeviceIndex>,
    pub(super) budgets: Arc<DisruptionBudgets>,
    pub(super) pod_groups: Arc<PodGroupIndex>,
}

/// What of a session may outlive it: its largest parts, held weakly. A session whose term is
/// over must free them (its tasks aborted, its workers ended), or every lost term would keep
/// one more copy of the cluster in memory until the process is killed.
pub(super) struct HeldSession {
    parts: Vec<(
        &'static str,
        std::sync::Weak<dyn std::any::Any + Send + Sync>,
    )>,
    /// When its term ended, set by the session as it steps down; unset while it runs.
    ended: Arc<std::sync::OnceLock<std::time::Instant>>,
    warned: bool,
}

impl HeldSession {
    pub(super) fn of(parts: &Parts, ended: Arc<std::sync::OnceLock<std::time::Instant>>) -> Self {
        fn weak<T: Send + Sync + 'static>(
            arc: &Arc<T>,
        ) -> std::sync::Weak<dyn std::any::Any + Send + Sync> {
            Arc::<T>::downgrade(arc)
        }
        HeldSession {
            parts: vec![
                ("scheduler", weak(&parts.sched)),
                ("history writer", weak(&parts.history)),
                ("owner cache", weak(&parts.owners)),
                ("binding index", weak(&parts.bindings)),
                ("storage index", weak(&parts.storage)),
                ("device index", weak(&parts.devices)),
            ],
            ended,
            warned: false,
        }
    }

    /// The parts still in memory.
    fn held(&self) -> Vec<&'static str> {
        self.parts
            .iter()
            .filter(|(_, part)| part.strong_count() > 0)
            .map(|(name, _)| *name)
            .collect()
    }
}

/// How long an ended session's binding cycles and writes may hold its parts before it counts as
/// leaked (a Permit wait ends at its timeout; the writes are refused at once).
const SESSION_FREED_WITHIN: std::time::Duration = std::time::Duration::from_secs(60);

/// Every few seconds: drops the sessions that are gone from memory, sets
/// `tether_sessions_held`, and warns once about a session still held
/// [`SESSION_FREED_WITHIN`] after its term ended, naming what of it is held.
pub(super) async fn watch_freed(
    sessions: Arc<std::sync::Mutex<Vec<HeldSession>>>,
    metrics: Arc<Metrics>,
) {
    let mut tick = tokio::time::interval(std::time::Duration::from_secs(5));
    loop {
        tick.tick().await;
        let mut sessions = crate::locks::lock(&sessions);
        sessions.retain(|s| !s.held().is_empty());
        for session in sessions.iter_mut() {
            if let Some(ended) = session.ended.get()
                && !session.warned
                && ended.elapsed() > SESSION_FREED_WITHIN
            {
                session.warned = true;
                tracing::warn!(held = ?session.held(), ended_ago = ?ended.elapsed(), "a session whose term is over is still in memory");
            }
        }
        metrics.set_sessions_held(sessions.len());
    }
}
