//! Which watches are current. Every watch-fed structure registers its watch here when the watch
//! is created ([`Readiness::register`]), saying what needs it ([`Need`]); the watch marks itself
//! stale when it fails or starts a re-list, and current again once its index holds the whole
//! list, or its resumed watch has caught up. `/readyz` answers from the first lists. The scheduling loop runs only while the watches
//! every decision needs (pods, nodes, namespaces, profiles) are current, so no pod is placed
//! against a view of the nodes or pods from before an outage; a watch only some plugins need
//! holds back only the pods of profiles that run one of them ([`Readiness::stale_for`]).

use crate::locks;
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What needs a watch to be current.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Need {
    /// Every scheduling decision (pods, nodes, namespaces, profiles).
    Scheduling,
    /// The decisions of profiles that run one of these plugins.
    Plugins(&'static [&'static str]),
    /// No decision (a controller's own watch): only `/readyz`'s first list waits for it.
    Nothing,
}

#[derive(Debug)]
struct WatchState {
    name: String,
    need: Need,
    listed_once: bool,
    current: bool,
    /// Since when it is not current (its registration, before the first list).
    stale_since: Option<Instant>,
    /// Why it last failed (the API server's answer or the client's error), while not current.
    reason: Option<String>,
}

/// A watch that has not been current for long: which, for how long, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stale {
    pub watch: String,
    pub for_: Duration,
    /// The last failure, or None when it has not failed (a list still under way).
    pub reason: Option<String>,
}

impl std::fmt::Display for Stale {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "the {} watch has not been current for {}s",
            self.watch,
            self.for_.as_secs()
        )?;
        match &self.reason {
            Some(reason) => write!(f, " (last error: {reason})"),
            None => write!(f, " (still listing)"),
        }
    }
}

/// How long a watch that decisions need may stay stale before it is loud: `/readyz` fails
/// naming it and why, and each SchedulingProfile whose pods wait for it says so in its
/// `WatchesCurrent` condition. Pods wait silently meanwhile only for a moment: a watch comes
/// back within seconds of an API server's return.
pub const STALE_LOUD: Duration = Duration::from_secs(120);

/// The registered watches and where each stands.
#[derive(Debug, Default)]
pub struct Readiness {
    watches: Mutex<Vec<WatchState>>,
    changed: Condvar,
    /// How long a watch may stay stale before it is loud; [`STALE_LOUD`] when unset.
    loud_after: Option<Duration>,
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

    /// A readiness whose stale watches are loud after `bound` (`--watch-stale-seconds`).
    pub fn loud_after(bound: Duration) -> Arc<Self> {
        Arc::new(Readiness {
            loud_after: Some(bound),
            ..Self::default()
        })
    }

    /// The watches some decision needs (every one, or one of the plugins `runs` says yes to)
    /// stale for longer than this readiness's bound ([`Readiness::loud_after`]).
    pub fn stale_loud(&self, runs: impl Fn(&str) -> bool) -> Vec<Stale> {
        self.stale_long(self.loud_after.unwrap_or(STALE_LOUD), runs)
    }

    fn lock(&self) -> MutexGuard<'_, Vec<WatchState>> {
        locks::lock(&self.watches)
    }

    /// Registers a watch every scheduling decision needs, not listed yet.
    pub fn register(self: &Arc<Self>, name: impl Into<String>) -> Feed {
        self.register_for(name, Need::Scheduling)
    }

    /// Registers a watch that `need` needs, not listed yet.
    pub fn register_for(self: &Arc<Self>, name: impl Into<String>, need: Need) -> Feed {
        let mut watches = self.lock();
        watches.push(WatchState {
            name: name.into(),
            need,
            listed_once: false,
            current: false,
            stale_since: Some(Instant::now()),
            reason: None,
        });
        Feed {
            readiness: self.clone(),
            id: watches.len() - 1,
        }
    }

    /// Whether every watch scheduling needs has listed at least once (kube-scheduler's
    /// informers synced): the process is ready.
    pub fn all_listed(&self) -> bool {
        self.lock()
            .iter()
            .all(|w| w.listed_once || w.need != Need::Scheduling)
    }

    /// Whether every watch scheduling needs has listed and is current now.
    pub fn is_current(&self) -> bool {
        self.lock().iter().all(WatchState::current_or_not_needed)
    }

    /// The first watch not current now that a plugin `runs` says yes to needs: the pods of
    /// such a profile wait for it.
    pub fn stale_for(&self, runs: impl Fn(&str) -> bool) -> Option<String> {
        self.lock()
            .iter()
            .find(|w| {
                !w.current && matches!(w.need, Need::Plugins(ps) if ps.iter().any(|p| runs(p)))
            })
            .map(|w| w.name.clone())
    }

    /// The watches scheduling needs that have not been current for longer than `bound`, with
    /// how long: `/healthz` turns red on them.
    pub fn stale_longer_than(&self, bound: Duration) -> Vec<(String, Duration)> {
        // No plugin's watch: those scheduling itself needs.
        self.stale_long(bound, |_| false)
            .into_iter()
            .map(|s| (s.watch, s.for_))
            .collect()
    }

    /// The watches some decision needs (every one, or one of the plugins `runs` says yes to)
    /// that have not been current for longer than `bound`: the pods that wait for them wait
    /// loudly from then on.
    pub fn stale_long(&self, bound: Duration, runs: impl Fn(&str) -> bool) -> Vec<Stale> {
        self.lock()
            .iter()
            .filter(|w| match w.need {
                Need::Scheduling => true,
                Need::Plugins(plugins) => plugins.iter().any(|p| runs(p)),
                Need::Nothing => false,
            })
            .filter_map(|w| {
                // Set exactly while the watch is not current.
                let for_ = w.stale_since?.elapsed();
                (for_ > bound).then(|| Stale {
                    watch: w.name.clone(),
                    for_,
                    reason: w.reason.clone(),
                })
            })
            .collect()
    }

    /// Each watch and whether it is current now (`tether_watch_current`).
    pub fn by_watch(&self) -> Vec<(String, bool)> {
        self.lock()
            .iter()
            .map(|w| (w.name.clone(), w.current))
            .collect()
    }

    /// For `/readyz`: how many of the watches scheduling needs have listed once, and every
    /// watch not current now (what it holds back is named by the pods' conditions).
    pub fn summary(&self) -> Summary {
        let watches = self.lock();
        let needed = || watches.iter().filter(|w| w.need == Need::Scheduling);
        Summary {
            registered: needed().count(),
            listed_once: needed().filter(|w| w.listed_once).count(),
            not_current: watches
                .iter()
                .filter(|w| !w.current)
                .map(|w| w.name.clone())
                .collect(),
        }
    }

    /// Blocks until every watch scheduling needs is current, or `stop` says to give up
    /// (checked every 100ms). Returns whether they are current. For the scheduling thread,
    /// never a tokio task.
    pub fn wait_current(&self, stop: impl Fn() -> bool) -> bool {
        let mut watches = self.lock();
        loop {
            if watches.iter().all(WatchState::current_or_not_needed) {
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
        self.set_because(id, current, None);
    }

    fn set_because(&self, id: usize, current: bool, reason: Option<String>) {
        let mut watches = self.lock();
        if let Some(w) = watches.get_mut(id) {
            if current {
                w.reason = None;
            } else if reason.is_some() {
                w.reason = reason;
            }
            if current && !w.listed_once {
                tracing::debug!(watch = %w.name, "listed");
            } else if current != w.current {
                tracing::info!(watch = %w.name, current, "watch {}", if current { "current again" } else { "failing or re-listing" });
            }
            if current {
                w.stale_since = None;
            } else if w.current || w.stale_since.is_none() {
                w.stale_since = Some(Instant::now());
            }
            w.current = current;
            w.listed_once |= current;
        }
        drop(watches);
        self.changed.notify_all();
    }
}

impl WatchState {
    fn current_or_not_needed(&self) -> bool {
        self.current || self.need != Need::Scheduling
    }
}

/// One registered watch, held by the code that feeds its index.
#[derive(Debug, Clone)]
pub struct Feed {
    readiness: Arc<Readiness>,
    id: usize,
}

impl Feed {
    /// The index now holds the whole list (after the first list or a re-list), or what a resumed
    /// watch missed.
    pub fn listed(&self) {
        self.readiness.set(self.id, true);
    }

    /// The watch failed or began a re-list: its index may miss changes until it has listed.
    pub fn stale(&self) {
        self.readiness.set(self.id, false);
    }

    /// The watch failed, for `reason` (kept, at most 300 characters, until it is current).
    pub fn failing(&self, reason: &str) {
        let mut reason = reason.to_string();
        if reason.len() > 300 {
            let mut end = 300;
            while !reason.is_char_boundary(end) {
                end -= 1;
            }
            reason.truncate(end);
            reason.push('…');
        }
        self.readiness.set_because(self.id, false, Some(reason));
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

    #[test]
    fn a_watch_some_plugins_need_holds_back_only_their_profiles() {
        let readiness = Readiness::new();
        let pods = readiness.register("pods");
        let volumes = readiness.register_for(
            "persistentvolumes",
            Need::Plugins(&["VolumeBinding", "VolumeZone"]),
        );
        let own = readiness.register_for("nodes (a controller)", Need::Nothing);
        pods.listed();
        assert!(readiness.is_current(), "scheduling goes on");
        assert!(
            readiness.all_listed(),
            "ready: what scheduling needs has listed"
        );
        assert_eq!(
            readiness.summary().not_current,
            ["persistentvolumes", "nodes (a controller)"],
            "/readyz names what is not current"
        );
        assert_eq!(
            readiness.stale_for(|p| p == "VolumeZone").as_deref(),
            Some("persistentvolumes")
        );
        assert_eq!(readiness.stale_for(|p| p == "NodeAffinity"), None);
        volumes.listed();
        own.listed();
        assert_eq!(readiness.stale_for(|_| true), None);
        assert!(readiness.stale_longer_than(Duration::ZERO).is_empty());
        volumes.stale();
        pods.stale();
        let stale: Vec<String> = readiness
            .stale_longer_than(Duration::ZERO)
            .into_iter()
            .map(|(name, _)| name)
            .collect();
        assert_eq!(
            stale,
            ["pods"],
            "only what scheduling needs makes /healthz red"
        );
        assert!(
            readiness
                .stale_longer_than(Duration::from_secs(60))
                .is_empty()
        );
        volumes.failing("forbidden");
        let long = readiness.stale_long(Duration::ZERO, |p| p == "VolumeZone");
        assert_eq!(
            long.iter().map(|s| s.watch.as_str()).collect::<Vec<_>>(),
            ["pods", "persistentvolumes"],
            "a profile waits loudly for what it needs"
        );
        assert_eq!(long[0].reason, None);
        assert_eq!(long[1].reason.as_deref(), Some("forbidden"));
        assert!(long[1].to_string().contains("last error: forbidden"));
        assert_eq!(
            readiness
                .stale_long(Duration::ZERO, |p| p == "NodeAffinity")
                .len(),
            1,
            "and not for what it does not"
        );
        assert!(
            readiness
                .stale_long(Duration::from_secs(60), |_| true)
                .is_empty()
        );
        volumes.listed();
        volumes.stale();
        assert_eq!(
            readiness.stale_long(Duration::ZERO, |_| true)[1].reason,
            None,
            "a reason lasts until the watch is current"
        );
        assert_eq!(
            readiness.by_watch(),
            [
                ("pods".to_string(), false),
                ("persistentvolumes".to_string(), false),
                ("nodes (a controller)".to_string(), true)
            ]
        );
    }
}
