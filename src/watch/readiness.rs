//! Which watches are current. Every watch-fed structure registers its watch here when the watch
//! is created ([`Readiness::register`]); the watch marks itself stale when it fails or starts a
//! re-list, and current again once its index holds the whole list. `/readyz` answers from the
//! first lists; the scheduling loop runs only while every watch is current, so no pod is placed
//! against a view of the nodes or pods from before an outage.

use crate::locks;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

#[derive(Debug)]
struct WatchState {
    name: String,
    listed_once: bool,
    current: bool,
}

/// The registered watches and where each stands.
#[derive(Debug, Default)]
pub struct Readiness {
    watches: Mutex<Vec<WatchState>>,
    changed: Condvar,
}

/// What `/readyz` reports.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Summary {
    pub registered: usize,
    pub listed_once: usize,
    /// Watches that are failing or re-listing now.
    pub not_current: Vec<String>,
}

impl Readiness {
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    fn lock(&self) -> MutexGuard<'_, Vec<WatchState>> {
        locks::lock(&self.watches)
    }

    /// Registers a watch, not listed yet.
    pub fn register(self: &Arc<Self>, name: impl Into<String>) -> Feed {
        let mut watches = self.lock();
        watches.push(WatchState {
            name: name.into(),
            listed_once: false,
            current: false,
        });
        Feed {
            readiness: self.clone(),
            id: watches.len() - 1,
        }
    }

    /// Whether every registered watch has listed at least once (kube-scheduler's informers
    /// synced): the process is ready.
    pub fn all_listed(&self) -> bool {
        self.lock().iter().all(|w| w.listed_once)
    }

    /// Whether every registered watch has listed and is current now.
    pub fn is_current(&self) -> bool {
        self.lock().iter().all(|w| w.current)
    }

    pub fn summary(&self) -> Summary {
        let watches = self.lock();
        Summary {
            registered: watches.len(),
            listed_once: watches.iter().filter(|w| w.listed_once).count(),
            not_current: watches
                .iter()
                .filter(|w| !w.current)
                .map(|w| w.name.clone())
                .collect(),
        }
    }

    /// Blocks until every watch is current, or `stop` says to give up (checked every 100ms).
    /// Returns whether the watches are current. For the scheduling thread, never a tokio task.
    pub fn wait_current(&self, stop: impl Fn() -> bool) -> bool {
        let mut watches = self.lock();
        loop {
            if watches.iter().all(|w| w.current) {
                return true;
            }
            if stop() {
                return false;
            }
            watches = self
                .changed
                .wait_timeout(watches, Duration::from_millis(100))
                .map(|(guard, _)| guard)
                .unwrap_or_else(|e| e.into_inner().0);
        }
    }

    fn set(&self, id: usize, current: bool) {
        let mut watches = self.lock();
        if let Some(w) = watches.get_mut(id) {
            if current && !w.listed_once {
                tracing::debug!(watch = %w.name, "listed");
            } else if current != w.current {
                tracing::info!(watch = %w.name, current, "watch {}", if current { "current again" } else { "failing or re-listing" });
            }
            w.current = current;
            w.listed_once |= current;
        }
        drop(watches);
        self.changed.notify_all();
    }
}

/// One registered watch, held by the code that feeds its index.
#[derive(Debug, Clone)]
pub struct Feed {
    readiness: Arc<Readiness>,
    id: usize,
}

impl Feed {
    /// The index now holds the whole list (after the first list or a re-list).
    pub fn listed(&self) {
        self.readiness.set(self.id, true);
    }

    /// The watch failed or began a re-list: its index may miss changes until it has listed.
    pub fn stale(&self) {
        self.readiness.set(self.id, false);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scheduling_waits_while_any_watch_relists_and_readiness_keeps_its_first_list() {
        let readiness = Readiness::new();
        let pods = readiness.register("pods");
        let nodes = readiness.register("nodes");
        assert!(!readiness.all_listed() && !readiness.is_current());
        pods.listed();
        assert_eq!(readiness.summary().not_current, ["nodes"]);
        nodes.listed();
        assert!(readiness.all_listed() && readiness.is_current());

        nodes.stale();
        assert!(readiness.all_listed(), "ready stays: it listed once");
        assert!(!readiness.is_current(), "but scheduling must wait");
        assert!(!readiness.wait_current(|| true), "gives up when told to");

        let waiter = {
            let readiness = readiness.clone();
            std::thread::spawn(move || readiness.wait_current(|| false))
        };
        nodes.listed();
        assert!(waiter.join().expect("waiter"), "woken once current");
    }
}
