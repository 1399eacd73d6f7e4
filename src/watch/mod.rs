//! One pattern for every watch-fed structure, as linkerd2's policy-controller indexes are fed:
//! a watch that keeps itself current ([`watch`]) and an [`Index`] that applies its events, with
//! a re-list replacing what the index holds ([`Index::reset`]), so an object deleted while the
//! watch was down never outlives the outage.
//!
//! The watch behaves as client-go's reflector ([`lister`]): one that ends or fails for any
//! reason but `410 Gone` resumes from the last version it saw, after a backoff (0.5 s doubling
//! to 1 s, each wait drawn from 75–125 % of it so that two dozen watches do not come back in
//! step), and the API server sends what it missed; a `410 Gone` (the API server no longer has
//! that history, as after its restart) lists again at once. The short ceiling keeps every watch
//! back within a few seconds of the API server's return; a failed attempt costs a refused
//! connection, and an API server that is up but overloaded says when to come back (429 with
//! `Retry-After`), which the client honours before the watch sees a failure. A run of failures
//! is logged once as a warning when it starts and every [`WARN_EVERY`] attempts after (the
//! others at debug level); [`Readiness`] says when the watch is current again. From its failure
//! until the index holds the new list, or the resumed watch has caught up ([`CatchUp`]), the
//! watch is marked stale in [`Readiness`], and the scheduling loop waits. A list or watch
//! request that gets no answer for [`LIST_STALL`] is given up and asked again, whatever kept it.

mod lister;
pub mod readiness;

use std::collections::HashSet;
use std::fmt::Debug;
use std::time::Duration;

use futures::{Stream, StreamExt};
use kube::api::Api;
use kube::runtime::watcher::{self, Event};

use crate::k8s::client_metrics::{SKIPPED, SkippedLabels};
use crate::k8s::pod::Pod;
use crate::k8s::pods;
use serde::de::DeserializeOwned;

use self::lister::{LIST_PAGE_SIZE, Lister, Step};
pub use self::lister::{Unreadable, decode, list_each};
pub use self::readiness::{Feed, Need, Readiness, STALE_LOUD, Stale};

/// How many skipped objects a watch remembers having logged.
const SKIPPED_LOGGED: usize = 4096;

/// What the process does with an object a watch skipped, besides counting and logging it (the
/// scheduler reports it on the object as an event).
pub type SkippedHook = Box<dyn Fn(&str, &Unreadable) + Send + Sync>;

static SKIPPED_HOOK: std::sync::RwLock<Option<SkippedHook>> = std::sync::RwLock::new(None);

/// Sets the hook every watch calls the first time it skips an object, in place of the one
/// before (each leadership session sets its own, writing through its own gate).
pub fn on_skipped(hook: SkippedHook) {
    *crate::locks::write(&SKIPPED_HOOK) = Some(hook);
}

/// The first wait after a failed watch; it doubles up to [`MAX_BACKOFF`].
const INITIAL_BACKOFF: Duration = Duration::from_millis(500);
/// The longest wait between two attempts (before jitter).
const MAX_BACKOFF: Duration = Duration::from_secs(1);
/// Of a run of failed attempts, the first and every this many after are logged as warnings.
const WARN_EVERY: u32 = 30;
/// How long a list may go without a page (or its end) before it is given up and started over.
/// The client's own read deadline (60 s) should end such a list first; this one holds when it
/// does not, so one request stuck somewhere in the client cannot keep a watch stale, and
/// tether unready, for good. A list page of 500 objects takes well under a second.
const LIST_STALL: Duration = Duration::from_secs(75);

/// `backoff` spread over 75–125 % of itself.
fn jittered(backoff: Duration) -> Duration {
    backoff.mul_f64(rand::random_range(0.75..1.25))
}

/// An in-memory structure fed by one watch.
pub trait Index<K>: Send + Sync {
    /// An object was added or changed.
    fn apply(&self, obj: K);
    /// An object was deleted.
    fn delete(&self, obj: K);
    /// A list (the first, or a re-list after the watch failed): `objs` is every object that
    /// exists now. Anything else the index holds was deleted meanwhile and must go.
    fn reset(&self, objs: Vec<K>);
    /// The watch failed; it will re-list. Most indexes need not care.
    fn failed(&self, _error: &watcher::Error) {}
    /// Whether the API server serves the kind `what` (an optional kind's watch answers 404
    /// while it does not, and the kind counts as empty). Most indexes need not care.
    fn served(&self, _what: &'static str, _served: bool) {}
    /// For an index whose reset is "apply each object, then drop what the list did not hold":
    /// the key of `obj` (its UID). Then a list's objects are applied one by one as they arrive
    /// and [`Index::listed`] gets their keys at the end, instead of all of them held until
    /// [`Index::reset`]: a list of 100,000 pods is never held whole (it was, in a vector
    /// doubling as it grew, next to the pods the cache made of it). `None` (the default): held.
    fn list_key(&self, _obj: &K) -> Option<String> {
        None
    }
    /// The end of a list applied one by one (see [`Index::list_key`]): `seen` holds the keys of
    /// every object it held; anything else the index holds was deleted meanwhile and must go.
    /// (A list that held nothing ends in [`Index::reset`] with no objects.)
    fn listed(&self, _seen: HashSet<String>) {}
}

/// Why the API server will not let a watch read its kind at all, where that is no failure of
/// the watch: an optional kind not served, or one tether may not list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unavailable {
    /// 404: the API server does not serve the kind (its API or CRD is not installed).
    NotServed,
    /// 403: tether may not list it.
    Forbidden,
}

/// The [`Unavailable`] a watch failure says, if it says one.
pub fn unavailable(error: &watcher::Error) -> Option<Unavailable> {
    match error {
        watcher::Error::InitialListFailed(e)
        | watcher::Error::WatchStartFailed(e)
        | watcher::Error::WatchFailed(e) => api_unavailable(e),
        _ => None,
    }
}

/// The [`Unavailable`] an answer of the API server says: 404 not served, 403 not readable.
pub fn api_unavailable(error: &kube::Error) -> Option<Unavailable> {
    match error {
        kube::Error::Api(e) if e.code == 404 => Some(Unavailable::NotServed),
        kube::Error::Api(e) if e.code == 403 => Some(Unavailable::Forbidden),
        _ => None,
    }
}

/// Whether a watch failure means the API server no longer has the requested history.
fn is_gone(error: &watcher::Error) -> bool {
    match error {
        watcher::Error::WatchError(status) => status.code == 410,
        watcher::Error::InitialListFailed(kube::Error::Api(status))
        | watcher::Error::WatchStartFailed(kube::Error::Api(status))
        | watcher::Error::WatchFailed(kube::Error::Api(status)) => status.code == 410,
        _ => false,
    }
}

/// Whether the API server answered the failed request (as opposed to no answer at all: refused,
/// reset, timed out).
fn answered(error: &watcher::Error) -> bool {
    matches!(
        error,
        watcher::Error::WatchError(_)
            | watcher::Error::InitialListFailed(kube::Error::Api(_))
            | watcher::Error::WatchStartFailed(kube::Error::Api(_))
            | watcher::Error::WatchFailed(kube::Error::Api(_))
    )
}

/// Where a watch stands after a failure it resumes from.
enum CatchUp {
    /// Nothing to catch up: the watch is current, or a list is under way (current at its end).
    No,
    /// The watch failed; it resumes from the last version seen.
    Failed,
    /// The API server accepted the resumed watch (at the instant held): it is current once it
    /// has reached the version the API server had then (what it missed is sent first, in
    /// order), or has been quiet for [`CAUGHT_UP_QUIET`] (what it missed, if anything, has
    /// come), or at the latest [`CATCH_UP_LIMIT`] after it was accepted.
    Until(Option<String>, tokio::time::Instant),
}

/// The longest a resumed watch is held stale while it catches up. Only a watch whose newest
/// version could not be read and whose events never pause for [`CAUGHT_UP_QUIET`] waits this
/// long; what it missed came within moments of its start.
const CATCH_UP_LIMIT: Duration = Duration::from_secs(5);

/// How long the one-object list that reads the newest version may take.
const NEWEST_TIMEOUT: Duration = Duration::from_secs(10);

/// A list that takes this long or longer is logged (at info) with its size and time.
const SLOW_LIST: Duration = Duration::from_secs(2);

/// How long a resumed watch must stay quiet to be taken as caught up. The API server sends what
/// the watch missed at once, from its cache, before anything new.
const CAUGHT_UP_QUIET: Duration = Duration::from_millis(100);

struct WatchLoop<K> {
    lister: Lister<K>,
    feed: Option<Feed>,
    what: String,
    backoff: Duration,
    /// Set after a failure: wait this long before the next attempt.
    pause: Option<Duration>,
    /// Whether the API server answered the last failed attempt.
    last_answered: bool,
    /// Failed attempts since the watch was last current.
    failures: u32,
    /// The objects skipped as unreadable and logged as such, so each is logged once (at warn;
    /// again at debug). Bounded: emptied when it reaches [`SKIPPED_LOGGED`].
    logged: HashSet<String>,
    catch_up: CatchUp,
    /// Called when a resumed watch has caught up, before its feed is marked current: for a
    /// consumer that acts on what the watch brought before it may count as current.
    before_current: Option<BeforeCurrent>,
    /// The list under way: when it started and how many objects it has brought.
    listing: Option<(std::time::Instant, u64)>,
}

/// See [`watch_then`].
pub type BeforeCurrent = Box<dyn Fn() + Send + Sync>;

impl<K> WatchLoop<K> {
    /// An object of this watch could not be read and is skipped (`deleted`: a `Delete` of what
    /// was read of it before follows). Counted; logged with its name and the reason (never its
    /// contents) at warn the first time, at debug after; reported to the process's
    /// [`on_skipped`] hook.
    fn skipped(&mut self, unreadable: &Unreadable, deleted: bool) {
        SKIPPED
            .get_or_create(&SkippedLabels {
                resource: self.what.clone(),
            })
            .inc();
        if self.logged.len() >= SKIPPED_LOGGED {
            self.logged.clear();
        }
        let first = self
            .logged
            .insert(unreadable.uid.clone().unwrap_or_else(|| unreadable.key()));
        let (object, reason) = (unreadable.key(), &unreadable.reason);
        let held = if deleted {
            "treated as deleted"
        } else {
            "treated as absent"
        };
        if first {
            tracing::warn!(watch = %self.what, %object, %reason, held, "skipped an object the client cannot read; everything else of this watch is read as usual");
            if let Some(hook) = crate::locks::read(&SKIPPED_HOOK).as_ref() {
                hook(&self.what, unreadable);
            }
        } else {
            tracing::debug!(watch = %self.what, %object, %reason, held, "skipped an unreadable object again");
        }
    }

    /// A watch resumed after a failure has caught up: it is current again.
    fn caught_up(&mut self, how: &str) {
        tracing::debug!(watch = %self.what, how, "the resumed watch caught up");
        self.catch_up = CatchUp::No;
        self.backoff = INITIAL_BACKOFF;
        self.failures = 0;
        if let Some(before_current) = &self.before_current {
            before_current();
        }
        if let Some(feed) = &self.feed {
            feed.listed();
        }
    }
}

/// Watches `api`: yields every event of a list (`Init`, `InitApply`…, `InitDone`) and then of a
/// watch from the list's version, resumed from the last version seen whenever it ends. On a
/// failure the error is yielded for the caller to note and `feed` is marked stale; after the
/// backoff the watch resumes where it was, and `feed` is current again once the resumed watch
/// has caught up (see [`CatchUp`]); after a `410 Gone` it lists again at once, and `feed` is
/// current at the list's end. The stream never ends.
pub fn watch<K>(
    api: Api<K>,
    what: impl Into<String>,
    feed: Option<Feed>,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    watch_loop(api, what.into(), feed, None)
}

/// Like [`watch`], for a consumer that acts on the events it is handed only later
/// (the profiles' registry is rebuilt by a task of its own): `before_current` runs when a
/// resumed watch has caught up, before `feed` is marked current, with every event before it
/// handed on. (After a list the consumer marks `feed` itself, at `InitDone`.)
pub fn watch_then<K>(
    api: Api<K>,
    what: impl Into<String>,
    feed: Option<Feed>,
    before_current: BeforeCurrent,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    watch_loop(api, what.into(), feed, Some(before_current))
}

fn watch_loop<K>(
    api: Api<K>,
    what: String,
    feed: Option<Feed>,
    before_current: Option<BeforeCurrent>,
) -> impl Stream<Item = watcher::Result<Event<K>>> + Send + 'static
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    // Each watch's count exists from its start, at 0: an alert on its increase sees the first
    // object skipped.
    drop(SKIPPED.get_or_create(&SkippedLabels {
        resource: what.clone(),
    }));
    let state = WatchLoop {
        lister: Lister::new(api, LIST_PAGE_SIZE, WATCH_TIMEOUT_SECONDS),
        feed,
        what,
        backoff: INITIAL_BACKOFF,
        pause: None,
        last_answered: false,
        failures: 0,
        logged: HashSet::new(),
        catch_up: CatchUp::No,
        before_current,
        listing: None,
    };
    futures::stream::unfold(state, |mut st| async move {
        if let Some(pause) = st.pause.take() {
            tokio::time::sleep(pause).await;
        }
        loop {
            // Checked when the caller asks for the next event: whatever came before is applied.
            if let CatchUp::Until(target, since) = &st.catch_up {
                if target.as_deref().is_some_and(|target| {
                    st.lister
                        .version()
                        .is_some_and(|seen| lister::reached(seen, target))
                }) {
                    st.caught_up("reached the version the API server had when it resumed");
                } else if since.elapsed() >= CATCH_UP_LIMIT {
                    st.caught_up("resumed long enough ago");
                }
            }
            let quiet = matches!(st.catch_up, CatchUp::Until(..)).then_some(CAUGHT_UP_QUIET);
            let step = if st.lister.waiting_for_an_answer() {
                match tokio::time::timeout(LIST_STALL, st.lister.step(quiet)).await {
                    Ok(step) => step,
                    Err(_) => {
                        let pause = jittered(st.backoff);
                        tracing::warn!(watch = %st.what, stalled_for = ?LIST_STALL, retry_in = ?pause, "a list or watch request got no answer in time; giving it up and asking again");
                        st.lister.stalled();
                        st.catch_up = if st.lister.starts_over() {
                            CatchUp::No
                        } else {
                            CatchUp::Failed
                        };
                        if let Some(feed) = &st.feed {
                            feed.stale();
                        }
                        tokio::time::sleep(pause).await;
                        continue;
                    }
                }
            } else {
                st.lister.step(quiet).await
            };
            match step {
                Step::Nothing => {}
                Step::Quiet => st.caught_up("quiet since it resumed"),
                Step::Resumed => {
                    if matches!(st.catch_up, CatchUp::Failed) {
                        let newest =
                            tokio::time::timeout(NEWEST_TIMEOUT, st.lister.newest_version()).await;
                        let target = match newest {
                            Ok(Ok(target)) => target,
                            Ok(Err(error)) => {
                                tracing::debug!(watch = %st.what, %error, "could not read the newest version; the resumed watch is current once quiet");
                                None
                            }
                            Err(_) => {
                                tracing::debug!(watch = %st.what, "the newest version got no answer in time; the resumed watch is current once quiet");
                                None
                            }
                        };
                        st.catch_up = CatchUp::Until(target, tokio::time::Instant::now());
                    }
                }
                Step::Item(Ok(mut event)) => {
                    trim(&mut event);
                    match &event {
                        Event::Init => {
                            st.catch_up = CatchUp::No;
                            st.listing = Some((std::time::Instant::now(), 0));
                            if let Some(feed) = &st.feed {
                                feed.stale();
                            }
                        }
                        Event::InitApply(_) => {
                            if let Some((_, objects)) = &mut st.listing {
                                *objects = objects.saturating_add(1);
                            }
                        }
                        Event::InitDone => {
                            st.backoff = INITIAL_BACKOFF;
                            st.failures = 0;
                            if let Some((started, objects)) = st.listing.take() {
                                let took = started.elapsed();
                                if took >= SLOW_LIST {
                                    tracing::info!(watch = %st.what, objects, ?took, "listed");
                                } else {
                                    tracing::debug!(watch = %st.what, objects, ?took, "listed");
                                }
                            }
                        }
                        _ => {}
                    }
                    return Some((Ok(event), st));
                }
                Step::Skipped { unreadable, absent } => {
                    st.skipped(&unreadable, absent.is_some());
                    if let Some(obj) = absent {
                        let mut event = Event::Delete(obj);
                        trim(&mut event);
                        return Some((Ok(event), st));
                    }
                }
                Step::Item(Err(error)) => {
                    if let Some(feed) = &st.feed {
                        feed.failing(&error.to_string());
                    }
                    let relist = st.lister.starts_over();
                    st.catch_up = if relist { CatchUp::No } else { CatchUp::Failed };
                    if is_gone(&error) {
                        tracing::info!(watch = %st.what, "the API server no longer has this watch's history (410 Gone); re-listing");
                    } else {
                        // The API server answers again (after an outage, a restarted one may
                        // deny requests for a moment): a new situation, a fresh backoff.
                        if answered(&error) && !st.last_answered {
                            st.backoff = INITIAL_BACKOFF;
                        }
                        st.last_answered = answered(&error);
                        let pause = jittered(st.backoff);
                        let next = if relist {
                            "listing again"
                        } else {
                            "resuming from the last version seen"
                        };
                        if st.failures % WARN_EVERY == 0 {
                            tracing::warn!(watch = %st.what, error = %error, failures = st.failures + 1, retry_in = ?pause, next, "watch failed; trying again until it is current");
                        } else {
                            tracing::debug!(watch = %st.what, error = %error, failures = st.failures + 1, retry_in = ?pause, next, "watch failed again");
                        }
                        st.failures = st.failures.saturating_add(1);
                        st.pause = Some(pause);
                        st.backoff = (st.backoff * 2).min(MAX_BACKOFF);
                    }
                    return Some((Err(error), st));
                }
            }
        }
    })
}

/// The annotation `kubectl apply` keeps the whole applied object in.
const LAST_APPLIED: &str = "kubectl.kubernetes.io/last-applied-configuration";

/// Drops from a watched object what no part of tether reads and what costs the most memory:
/// `managedFields` (tens of kilobytes per pod once decoded) and the last-applied annotation,
/// as kube-scheduler's informers drop managedFields. A status written back from such an object
/// leaves them as they are on the server (the status subresource ignores metadata). A pod,
/// the object held by the thousand, is also compacted ([`pods::compact`]) as it arrives, so a
/// list of thousands is never held whole.
fn trim<K: kube::Resource + 'static>(event: &mut Event<K>) {
    if let Event::Apply(obj) | Event::InitApply(obj) | Event::Delete(obj) = event {
        let meta = obj.meta_mut();
        meta.managed_fields = None;
        if let Some(annotations) = meta.annotations.as_mut() {
            annotations.remove(LAST_APPLIED);
        }
        if let Some(pod) = (obj as &mut dyn std::any::Any).downcast_mut::<Pod>() {
            pods::compact(pod);
        }
    }
}

/// The objects of a watch stream, its errors left out, for a kube-runtime `Controller`.
///
/// The errors are noted where the watch runs (its log lines and readiness feed). Passed on, each
/// one would wait inside the controller until something else woke it: kube-runtime's applier
/// peeks the next item for its reconcile queue and leaves an error to a branch that is polled
/// only then. A failing watch resumed seconds after its backoff (up to 5 s after a restarted API
/// server was back), and so did the profiles' and bindings' controllers.
pub fn objects_only<K, S>(stream: S) -> impl Stream<Item = watcher::Result<K>> + Send + 'static
where
    S: Stream<Item = watcher::Result<K>> + Send + 'static,
    K: Send + 'static,
{
    stream.filter(|item| std::future::ready(item.is_ok()))
}

/// Applies watch events to an index: objects of a (re)list are collected until `InitDone` and
/// handed to [`Index::reset`] at once (or, for an index that names a [`Index::list_key`],
/// applied as they arrive and their keys handed to [`Index::listed`]), then `feed` is marked
/// listed.
pub struct Applier<K> {
    listing: Option<Listing<K>>,
    feed: Option<Feed>,
}

/// A list in progress: the objects held for [`Index::reset`], or the keys of those applied
/// already (see [`Index::list_key`]).
struct Listing<K> {
    held: Vec<K>,
    applied: Option<HashSet<String>>,
}

impl<K> Default for Listing<K> {
    fn default() -> Self {
        Listing {
            held: Vec::new(),
            applied: None,
        }
    }
}

impl<K> Applier<K> {
    pub fn new(feed: Option<Feed>) -> Self {
        Applier {
            listing: None,
            feed,
        }
    }

    /// Applies one item of [`watch`]'s stream.
    pub fn apply(&mut self, index: &dyn Index<K>, item: watcher::Result<Event<K>>) {
        match item {
            Ok(event) => self.event(index, event),
            Err(error) => self.failed(index, &error),
        }
    }

    /// Applies one watch event.
    pub fn event(&mut self, index: &dyn Index<K>, event: Event<K>) {
        match event {
            Event::Init => self.listing = Some(Listing::default()),
            Event::InitApply(obj) => {
                let listing = self.listing.get_or_insert_with(Listing::default);
                match index.list_key(&obj) {
                    Some(key) => {
                        listing.applied.get_or_insert_with(HashSet::new).insert(key);
                        index.apply(obj);
                    }
                    None => listing.held.push(obj),
                }
            }
            Event::InitDone => {
                let listing = self.listing.take().unwrap_or_default();
                match listing.applied {
                    Some(seen) => index.listed(seen),
                    None => index.reset(listing.held),
                }
                if let Some(feed) = &self.feed {
                    feed.listed();
                }
            }
            Event::Apply(obj) => index.apply(obj),
            Event::Delete(obj) => index.delete(obj),
        }
    }

    /// The watch failed: a list in progress is dropped (the watch starts a new one).
    pub fn failed(&mut self, index: &dyn Index<K>, error: &watcher::Error) {
        self.listing = None;
        index.failed(error);
    }
}

/// Feeds `index` from a watch of `api` until the process stops. `feed` is this watch's entry in
/// [`Readiness`] (None for a watch nothing waits for).
pub async fn run<K>(api: Api<K>, what: impl Into<String>, feed: Option<Feed>, index: &dyn Index<K>)
where
    K: kube::Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
{
    let mut applier = Applier::new(feed.clone());
    let mut events = std::pin::pin!(watch(api, what, feed));
    while let Some(event) = events.next().await {
        applier.apply(index, event);
    }
}

/// How long the API server keeps one watch request open. The watcher gives up on a request
/// that stays silent a few seconds longer, so a half-open connection is noticed within a
/// minute; a watch that simply ended resumes from where it was, without a re-list.
const WATCH_TIMEOUT_SECONDS: u32 = 50;

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[derive(Default)]
    struct Names(Mutex<Vec<String>>);

    impl Index<String> for Names {
        fn apply(&self, obj: String) {
            let mut names = self.0.lock().expect("lock");
            if !names.contains(&obj) {
                names.push(obj);
            }
        }
        fn delete(&self, obj: String) {
            self.0.lock().expect("lock").retain(|n| *n != obj);
        }
        fn reset(&self, objs: Vec<String>) {
            *self.0.lock().expect("lock") = objs;
        }
    }

    /// Names applied as a list's items arrive (as the pod index is).
    #[derive(Default)]
    struct Keyed(Names);

    impl Index<String> for Keyed {
        fn apply(&self, obj: String) {
            self.0.apply(obj);
        }
        fn delete(&self, obj: String) {
            self.0.delete(obj);
        }
        fn reset(&self, objs: Vec<String>) {
            assert!(
                objs.is_empty(),
                "a keyed index is reset only by an empty list"
            );
            self.listed(HashSet::new());
        }
        fn list_key(&self, obj: &String) -> Option<String> {
            Some(obj.clone())
        }
        fn listed(&self, seen: HashSet<String>) {
            self.0.0.lock().expect("lock").retain(|n| seen.contains(n));
        }
    }

    #[test]
    fn a_keyed_index_applies_a_list_as_it_arrives_and_drops_the_rest_at_its_end() {
        let readiness = Readiness::new();
        let feed = readiness.register("names");
        let index = Keyed::default();
        let mut applier = Applier::new(Some(feed.clone()));
        let names = || index.0.0.lock().expect("lock").clone();
        for e in [
            Event::Init,
            Event::InitApply("a".to_string()),
            Event::InitApply("b".to_string()),
        ] {
            applier.apply(&index, Ok(e));
        }
        assert_eq!(names(), ["a", "b"], "applied as they arrive");
        assert!(!readiness.is_current(), "not listed before the list ends");
        applier.apply(&index, Ok(Event::InitDone));
        assert!(readiness.is_current());

        feed.stale();
        applier.apply(&index, Err(watcher::Error::NoResourceVersion));
        applier.apply(&index, Ok(Event::Init));
        applier.apply(&index, Ok(Event::InitApply("c".to_string())));
        assert_eq!(names(), ["a", "b", "c"]);
        applier.apply(&index, Ok(Event::InitDone));
        assert_eq!(names(), ["c"], "what the re-list did not hold is gone");
        assert!(readiness.is_current());

        // An empty list empties the index.
        for e in [Event::Init, Event::InitDone] {
            applier.apply(&index, Ok(e));
        }
        assert!(names().is_empty());
    }

    #[test]
    fn a_relist_drops_what_was_deleted_while_the_watch_was_down_and_marks_the_feed() {
        let readiness = Readiness::new();
        let feed = readiness.register("names");
        let index = Names::default();
        let mut applier = Applier::new(Some(feed.clone()));
        for e in [
            Event::Init,
            Event::InitApply("a".to_string()),
            Event::InitApply("b".to_string()),
        ] {
            applier.apply(&index, Ok(e));
        }
        assert!(
            index.0.lock().expect("lock").is_empty(),
            "a list applies whole, at its end"
        );
        applier.apply(&index, Ok(Event::InitDone));
        assert_eq!(*index.0.lock().expect("lock"), ["a", "b"]);
        assert!(readiness.is_current());

        applier.apply(&index, Ok(Event::Apply("c".to_string())));
        feed.stale();
        applier.apply(&index, Err(watcher::Error::NoResourceVersion));
        for e in [
            Event::Init,
            Event::InitApply("c".to_string()),
            Event::InitDone,
        ] {
            applier.apply(&index, Ok(e));
        }
        assert_eq!(
            *index.0.lock().expect("lock"),
            ["c"],
            "a and b were deleted meanwhile"
        );
        assert!(readiness.is_current());
    }

    #[test]
    fn gone_is_recognised_in_every_shape_kube_reports_it() {
        let status = |code| kube::core::Status {
            code,
            ..Default::default()
        };
        assert!(is_gone(&watcher::Error::WatchError(Box::new(status(410)))));
        assert!(is_gone(&watcher::Error::WatchStartFailed(
            kube::Error::Api(Box::new(status(410)))
        )));
        assert!(!is_gone(&watcher::Error::WatchError(Box::new(status(500)))));
        assert!(!is_gone(&watcher::Error::NoResourceVersion));
    }

    #[tokio::test]
    async fn a_controller_is_handed_the_objects_of_a_watch_and_never_its_errors() {
        let items: Vec<watcher::Result<String>> = vec![
            Ok("a".into()),
            Err(watcher::Error::NoResourceVersion),
            Ok("b".into()),
        ];
        let passed: Vec<String> = objects_only(futures::stream::iter(items))
            .map(|item| item.expect("only objects"))
            .collect()
            .await;
        assert_eq!(passed, ["a", "b"]);
    }

    #[test]
    fn watched_objects_are_kept_without_managed_fields_or_the_last_applied_copy() {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({"metadata": {
            "name": "p",
            "annotations": {LAST_APPLIED: "{...}", "team": "a"},
            "managedFields": [{"manager": "kubectl", "operation": "Update", "fieldsType": "FieldsV1", "fieldsV1": {"f:spec": {}}}],
        }}))
        .expect("a pod");
        let mut event = Event::Apply(pod.clone());
        trim(&mut event);
        let Event::Apply(trimmed) = event else {
            panic!("an Apply event");
        };
        assert!(trimmed.metadata.managed_fields.is_none());
        let annotations = trimmed.metadata.annotations.expect("annotations");
        assert_eq!(annotations.keys().collect::<Vec<_>>(), ["team"]);
        pod.metadata.managed_fields = None;
        let mut init = Event::InitApply(pod);
        trim(&mut init);
        assert!(matches!(init, Event::InitApply(_)));
    }
    /// A list that gets no answer at all (a request stuck in the client, past its own read
    /// deadline) is given up after [`LIST_STALL`] and listed again, so the watch becomes current
    /// instead of staying stale for good.
    #[tokio::test(start_paused = true)]
    async fn a_list_that_gets_no_answer_is_given_up_and_listed_again() {
        use k8s_openapi::api::core::v1::Namespace;
        use std::sync::atomic::{AtomicU32, Ordering};
        let lists = Arc::new(AtomicU32::new(0));
        let counted = lists.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let counted = counted.clone();
            async move {
                let query = req.uri().query().unwrap_or_default();
                if query.contains("sendInitialEvents=true") {
                    // Refused: lists come in pages.
                    return Ok::<_, std::convert::Infallible>(
                        http::Response::builder()
                            .status(422)
                            .header("content-type", "application/json")
                            .body(kube::client::Body::from(
                                br#"{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422}"#.to_vec(),
                            ))
                            .expect("a response"),
                    );
                }
                let watching = query.contains("watch=true");
                if !watching && counted.fetch_add(1, Ordering::SeqCst) == 0 {
                    // The first list: never answered.
                    futures::future::pending::<()>().await;
                }
                let body = if watching {
                    futures::future::pending::<()>().await;
                    Vec::new()
                } else {
                    serde_json::to_vec(&serde_json::json!({
                        "apiVersion": "v1", "kind": "NamespaceList",
                        "metadata": {"resourceVersion": "7"},
                        "items": [{"metadata": {"name": "team-a"}}],
                    }))
                    .expect("json")
                };
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(200)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(body))
                        .expect("a response"),
                )
            }
        });
        let client = kube::Client::new(service, "default");
        let readiness = Readiness::new();
        let feed = readiness.register("namespaces");
        let events = watch(
            Api::<Namespace>::all(client),
            "namespaces",
            Some(feed.clone()),
        );
        let mut events = std::pin::pin!(events);
        let mut applied = Vec::new();
        let started = tokio::time::Instant::now();
        let listed = tokio::time::timeout(LIST_STALL * 4, async {
            while let Some(event) = events.next().await {
                match event.expect("no error is yielded for a stalled list") {
                    Event::InitApply(ns) => applied.push(ns.metadata.name.unwrap_or_default()),
                    Event::InitDone => break,
                    _ => {}
                }
            }
        })
        .await;
        assert!(listed.is_ok(), "the stalled list was never given up");
        assert_eq!(applied, ["team-a"]);
        assert_eq!(lists.load(Ordering::SeqCst), 2, "listed again once");
        assert!(started.elapsed() >= LIST_STALL);
    }
    /// What a fake API server answers each watch request with, in turn.
    enum Answer {
        /// These lines, then the request ends (its timeout).
        Ends(Vec<serde_json::Value>),
        /// These lines, then the connection drops.
        Drops(Vec<serde_json::Value>),
        /// These lines, then nothing more.
        Stays(Vec<serde_json::Value>),
        /// Nothing for this long, then the connection drops.
        DropsAfter(Duration),
        /// A change to `b` every 50 ms, from version 100 on, for good.
        Busy,
        /// No answer at all, not even the response's head.
        Hangs,
    }

    /// A fake API server for namespaces: a list of `a` at version 10, the watch answers given,
    /// and `newest` as the version a one-object list reads. It records the version each watch
    /// request asked for, and counts the lists.
    #[derive(Default)]
    struct FakeApi {
        answers: Mutex<std::collections::VecDeque<Answer>>,
        newest: Mutex<String>,
        watched_from: Mutex<Vec<String>>,
        lists: std::sync::atomic::AtomicU32,
        /// The items of a list, in place of `a` alone.
        items: Mutex<Option<Vec<serde_json::Value>>>,
        /// The answers to streamed lists, in turn; with none left, a streamed list is refused
        /// (422, as by an API server whose `WatchList` gate is off).
        streamed: Mutex<std::collections::VecDeque<Answer>>,
        /// How many streamed lists were asked for.
        streams: std::sync::atomic::AtomicU32,
    }

    type FakeBody = http_body_util::StreamBody<
        futures::stream::BoxStream<
            'static,
            Result<hyper::body::Frame<hyper::body::Bytes>, std::io::Error>,
        >,
    >;

    fn line(
        value: &serde_json::Value,
    ) -> Result<hyper::body::Frame<hyper::body::Bytes>, std::io::Error> {
        let mut bytes = with_nesting(value).into_bytes();
        bytes.push(b'\n');
        Ok(hyper::body::Frame::data(bytes.into()))
    }

    /// The API server's answer of failure `code` for `reason`, a Status.
    fn failure(code: u16, reason: &str) -> http::Response<FakeBody> {
        let status = serde_json::json!({"apiVersion": "v1", "kind": "Status",
            "status": "Failure", "reason": reason, "code": code});
        http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(http_body_util::StreamBody::new(
                futures::stream::iter([line(&status)]).boxed(),
            ))
            .expect("a response")
    }

    fn namespace_event(kind: &str, name: &str, version: &str) -> serde_json::Value {
        serde_json::json!({"type": kind, "object": {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": name, "resourceVersion": version}}})
    }

    impl FakeApi {
        /// The answer to `req`, None for none at all.
        fn answer(
            &self,
            req: &http::Request<kube::client::Body>,
        ) -> Option<http::Response<FakeBody>> {
            use std::sync::atomic::Ordering;
            let query: std::collections::HashMap<String, String> =
                url_query(req.uri().query().unwrap_or_default());
            let streamed = query.get("sendInitialEvents").map(String::as_str) == Some("true");
            let answers = if streamed {
                self.streams.fetch_add(1, Ordering::SeqCst);
                if self.streamed.lock().expect("lock").is_empty() {
                    return Some(failure(422, "Invalid"));
                }
                &self.streamed
            } else {
                &self.answers
            };
            let body: futures::stream::BoxStream<'static, _> = if query.contains_key("watch") {
                self.watched_from
                    .lock()
                    .expect("lock")
                    .push(query.get("resourceVersion").cloned().unwrap_or_default());
                match answers.lock().expect("lock").pop_front() {
                    Some(Answer::Ends(lines)) => {
                        futures::stream::iter(lines.iter().map(line).collect::<Vec<_>>()).boxed()
                    }
                    Some(Answer::Drops(lines)) => {
                        futures::stream::iter(lines.iter().map(line).collect::<Vec<_>>())
                            .chain(futures::stream::once(async {
                                Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
                            }))
                            .boxed()
                    }
                    Some(Answer::Stays(lines)) => {
                        futures::stream::iter(lines.iter().map(line).collect::<Vec<_>>())
                            .chain(futures::stream::pending())
                            .boxed()
                    }
                    Some(Answer::DropsAfter(quiet)) => futures::stream::once(async move {
                        tokio::time::sleep(quiet).await;
                        Err(std::io::Error::from(std::io::ErrorKind::ConnectionReset))
                    })
                    .boxed(),
                    Some(Answer::Busy) => futures::stream::unfold(100u64, |version| async move {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        let event = namespace_event("MODIFIED", "b", &version.to_string());
                        Some((line(&event), version + 1))
                    })
                    .boxed(),
                    Some(Answer::Hangs) => return None,
                    None => futures::stream::pending().boxed(),
                }
            } else if query.get("limit").map(String::as_str) == Some("1") {
                let newest = self.newest.lock().expect("lock").clone();
                if newest == "fails" {
                    return Some(failure(500, "InternalError"));
                }
                futures::stream::iter([line(&serde_json::json!({
                    "apiVersion": "v1", "kind": "NamespaceList",
                    "metadata": {"resourceVersion": newest},
                    "items": [{"metadata": {"name": "a", "resourceVersion": "5"}}],
                }))])
                .boxed()
            } else {
                self.lists.fetch_add(1, Ordering::SeqCst);
                let items = self.items.lock().expect("lock").clone().unwrap_or_else(|| {
                    vec![serde_json::json!({"metadata": {"name": "a", "resourceVersion": "5"}})]
                });
                futures::stream::iter([line(&serde_json::json!({
                    "apiVersion": "v1", "kind": "NamespaceList",
                    "metadata": {"resourceVersion": "10"},
                    "items": items,
                }))])
                .boxed()
            };
            Some(
                http::Response::builder()
                    .status(200)
                    .header("content-type", "application/json")
                    .body(http_body_util::StreamBody::new(body))
                    .expect("a response"),
            )
        }

        fn client(self: &Arc<Self>) -> kube::Client {
            let api = self.clone();
            let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
                let response = api.answer(&req);
                async move {
                    match response {
                        Some(response) => Ok::<_, std::convert::Infallible>(response),
                        None => futures::future::pending().await,
                    }
                }
            });
            kube::Client::new(service, "default")
        }
    }

    fn url_query(query: &str) -> std::collections::HashMap<String, String> {
        query
            .split('&')
            .filter_map(|pair| pair.split_once('='))
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// The names an event carries, for the assertions.
    fn described(event: &Event<Namespace>) -> String {
        let name = |ns: &Namespace| ns.metadata.name.clone().unwrap_or_default();
        match event {
            Event::Init => "init".into(),
            Event::InitApply(ns) => format!("list {}", name(ns)),
            Event::InitDone => "listed".into(),
            Event::Apply(ns) => format!("apply {}", name(ns)),
            Event::Delete(ns) => format!("delete {}", name(ns)),
        }
    }

    use k8s_openapi::api::core::v1::Namespace;

    impl Index<Namespace> for Names {
        fn apply(&self, obj: Namespace) {
            <Self as Index<String>>::apply(self, obj.metadata.name.unwrap_or_default());
        }
        fn delete(&self, obj: Namespace) {
            <Self as Index<String>>::delete(self, obj.metadata.name.unwrap_or_default());
        }
        fn reset(&self, objs: Vec<Namespace>) {
            let names = objs
                .into_iter()
                .map(|o| o.metadata.name.unwrap_or_default());
            <Self as Index<String>>::reset(self, names.collect());
        }
    }

    /// A watch of the fake API's namespaces, its feed in a `Readiness` of its own, its events
    /// applied to a `Names` index as a test hands them on.
    struct Watched {
        readiness: Arc<Readiness>,
        applier: Applier<Namespace>,
        index: Names,
        events: futures::stream::BoxStream<'static, watcher::Result<Event<Namespace>>>,
    }

    impl Watched {
        /// [`watch`] on `api`.
        fn new(api: &Arc<FakeApi>) -> Self {
            let readiness = Readiness::new();
            let feed = readiness.register("namespaces");
            let events = watch(
                Api::<Namespace>::all(api.client()),
                "namespaces",
                Some(feed.clone()),
            );
            Self::with(readiness, feed, events.boxed())
        }

        fn with(
            readiness: Arc<Readiness>,
            feed: Feed,
            events: futures::stream::BoxStream<'static, watcher::Result<Event<Namespace>>>,
        ) -> Self {
            Watched {
                readiness,
                applier: Applier::new(Some(feed)),
                index: Names::default(),
                events,
            }
        }

        /// Applies the next `n` items of the watch.
        async fn apply(&mut self, n: usize) {
            for _ in 0..n {
                let item = self.events.next().await.expect("a watch never ends");
                self.applier.apply(&self.index, item);
            }
        }
    }

    /// A watch that ends resumes from the last version without anyone noticing; one whose
    /// connection drops is stale until it resumes from the last version seen, and current again
    /// once it has caught up with the version the API server had then, never listing again.
    #[tokio::test(start_paused = true)]
    async fn a_failed_watch_resumes_from_the_last_version_and_is_current_once_caught_up() {
        let api = Arc::new(FakeApi::default());
        *api.newest.lock().expect("lock") = "13".into();
        api.answers.lock().expect("lock").extend([
            Answer::Ends(vec![namespace_event("ADDED", "b", "11")]),
            Answer::Drops(vec![namespace_event("MODIFIED", "b", "12")]),
            Answer::Stays(vec![namespace_event("DELETED", "a", "13")]),
        ]);
        let mut w = Watched::new(&api);
        let mut seen = Vec::new();
        while seen.len() < 5 {
            let item = w.events.next().await.expect("a watch never ends");
            if let Ok(event) = &item {
                seen.push(described(event));
            }
            w.applier.apply(&w.index, item);
            if seen.len() == 5 {
                assert!(
                    w.readiness.is_current(),
                    "a watch that ended is not a failure"
                );
            }
        }
        // The drop is noted: stale until the resumed watch has caught up.
        let failed = w.events.next().await.expect("the drop");
        assert!(failed.is_err(), "{:?}", failed.map(|e| described(&e)));
        w.applier.apply(&w.index, failed);
        assert!(!w.readiness.is_current(), "stale once the watch failed");
        let item = w.events.next().await.expect("a watch never ends");
        seen.push(described(item.as_ref().expect("an event")));
        w.applier.apply(&w.index, item);
        assert!(
            !w.readiness.is_current(),
            "not current before the caller has applied it"
        );
        // Asking for the next event: what came before is applied, and it reached version 13.
        assert!(futures::poll!(w.events.next()).is_pending());
        assert!(
            w.readiness.is_current(),
            "current once it reached the newest version"
        );
        assert_eq!(
            seen,
            ["init", "list a", "listed", "apply b", "apply b", "delete a"]
        );
        assert_eq!(*api.watched_from.lock().expect("lock"), ["10", "11", "12"]);
        assert_eq!(
            api.lists.load(std::sync::atomic::Ordering::SeqCst),
            1,
            "never listed again"
        );
    }

    fn end_of_initial_events(version: &str) -> serde_json::Value {
        serde_json::json!({"type": "BOOKMARK", "object": {"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"resourceVersion": version,
                "annotations": {"k8s.io/initial-events-end": "true"}}}})
    }

    fn gone() -> serde_json::Value {
        serde_json::json!({"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status",
            "status": "Failure", "reason": "Expired", "code": 410, "message": "too old"}})
    }

    /// Reads the watch until `n` events came, errors left out; the events described.
    async fn events_of(w: &mut Watched, n: usize) -> Vec<String> {
        let mut seen = Vec::new();
        while seen.len() < n {
            let item = w.events.next().await.expect("a watch never ends");
            if let Ok(event) = &item {
                seen.push(described(event));
            }
            w.applier.apply(&w.index, item);
        }
        seen
    }

    /// A list is streamed: its objects come as events of one watch request, the bookmark that
    /// ends them makes the watch current, and the same request goes on as the watch (no page is
    /// asked for, no second request made).
    #[tokio::test(start_paused = true)]
    async fn a_list_is_streamed_and_its_request_watches_on() {
        let api = Arc::new(FakeApi::default());
        api.streamed
            .lock()
            .expect("lock")
            .push_back(Answer::Stays(vec![
                namespace_event("ADDED", "a", "5"),
                namespace_event("ADDED", "c", "6"),
                end_of_initial_events("10"),
                namespace_event("MODIFIED", "c", "11"),
            ]));
        let mut w = Watched::new(&api);
        assert_eq!(
            events_of(&mut w, 4).await,
            ["init", "list a", "list c", "listed"]
        );
        assert!(w.readiness.is_current(), "current once listed");
        assert_eq!(events_of(&mut w, 1).await, ["apply c"]);
        assert_eq!(*w.index.0.lock().expect("lock"), ["a", "c"]);
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 0);
        assert_eq!(api.streams.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(*api.watched_from.lock().expect("lock"), [""]);
    }

    /// A streamed list that breaks off before its last object is listed again in pages (what
    /// it had sent is not taken as the whole); a later list is streamed again.
    #[tokio::test(start_paused = true)]
    async fn a_streamed_list_that_breaks_off_is_listed_in_pages_then_streamed_again() {
        let api = Arc::new(FakeApi::default());
        api.streamed.lock().expect("lock").extend([
            Answer::Drops(vec![namespace_event("ADDED", "z", "5")]),
            Answer::Stays(vec![
                namespace_event("ADDED", "b", "20"),
                end_of_initial_events("21"),
            ]),
        ]);
        // The watch after the paged list: its history is gone, so a new list.
        api.answers
            .lock()
            .expect("lock")
            .push_back(Answer::Stays(vec![gone()]));
        let mut w = Watched::new(&api);
        assert_eq!(
            events_of(&mut w, 5).await,
            ["init", "list z", "init", "list a", "listed"]
        );
        assert_eq!(
            *w.index.0.lock().expect("lock"),
            ["a"],
            "z was never listed"
        );
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(
            events_of(&mut w, 3).await,
            ["init", "list b", "listed"],
            "streamed again after the 410"
        );
        assert_eq!(*w.index.0.lock().expect("lock"), ["b"]);
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 1);
        assert_eq!(api.streams.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    /// An API server that refuses a streamed list (its `WatchList` gate off) is listed in pages,
    /// and never asked to stream again.
    #[tokio::test(start_paused = true)]
    async fn an_api_server_that_does_not_stream_is_listed_in_pages_from_then_on() {
        let api = Arc::new(FakeApi::default());
        api.answers
            .lock()
            .expect("lock")
            .push_back(Answer::Stays(vec![gone()]));
        let mut w = Watched::new(&api);
        assert_eq!(
            events_of(&mut w, 6).await,
            ["init", "list a", "listed", "init", "list a", "listed"]
        );
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 2);
        assert_eq!(api.streams.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A resumed watch that reaches no newer version (nothing changed meanwhile) is current once
    /// it has been quiet for a moment; one the API server no longer has the history of (410)
    /// lists again at once.
    #[tokio::test(start_paused = true)]
    async fn a_resumed_watch_is_current_once_quiet_and_lists_again_when_its_history_is_gone() {
        let api = Arc::new(FakeApi::default());
        *api.newest.lock().expect("lock") = "99".into();
        api.answers.lock().expect("lock").extend([
            Answer::Drops(vec![]),
            Answer::DropsAfter(Duration::from_secs(5)),
            Answer::Stays(vec![serde_json::json!({"type": "ERROR", "object": {
                "apiVersion": "v1", "kind": "Status", "status": "Failure",
                "reason": "Expired", "message": "too old resource version: 10 (50)", "code": 410}})]),
        ]);
        let mut w = Watched::new(&api);
        w.apply(3).await;
        assert!(w.readiness.is_current());
        let failed = w.events.next().await.expect("the drop");
        w.applier.apply(&w.index, failed);
        assert!(!w.readiness.is_current());
        // Resumed, quiet, not at version 99: current only after the quiet time.
        assert!(futures::poll!(w.events.next()).is_pending());
        assert!(!w.readiness.is_current(), "not current at once");
        let quiet = tokio::time::timeout(MAX_BACKOFF * 2, w.events.next()).await;
        assert!(quiet.is_err(), "nothing comes before the second drop");
        assert!(w.readiness.is_current(), "current once quiet");
        let failed = w.events.next().await.expect("the second drop");
        assert!(failed.is_err());
        w.applier.apply(&w.index, failed);
        assert!(!w.readiness.is_current());
        let gone = w.events.next().await.expect("the 410");
        assert!(gone.as_ref().is_err_and(is_gone));
        w.applier.apply(&w.index, gone);
        let relisted: Vec<String> = (&mut w.events)
            .take(3)
            .map(|item| described(item.as_ref().expect("an event")))
            .collect()
            .await;
        assert_eq!(relisted, ["init", "list a", "listed"]);
        assert_eq!(
            api.lists.load(std::sync::atomic::Ordering::SeqCst),
            2,
            "listed again"
        );
        assert_eq!(*api.watched_from.lock().expect("lock"), ["10", "10", "10"]);
    }

    /// A resumed watch whose events never pause and never reach the newest version (here it
    /// could not be read) is current at the latest [`CATCH_UP_LIMIT`] after it resumed, not
    /// stale for good.
    #[tokio::test(start_paused = true)]
    async fn a_busy_resumed_watch_is_current_within_the_catch_up_limit() {
        let api = Arc::new(FakeApi::default());
        *api.newest.lock().expect("lock") = "fails".into();
        api.answers
            .lock()
            .expect("lock")
            .extend([Answer::Drops(vec![]), Answer::Busy]);
        let mut w = Watched::new(&api);
        w.apply(4).await;
        assert!(!w.readiness.is_current());
        let resumed = tokio::time::Instant::now();
        while !w.readiness.is_current() {
            let item = w.events.next().await.expect("a watch never ends");
            w.applier.apply(&w.index, item);
            assert!(
                resumed.elapsed() <= CATCH_UP_LIMIT + MAX_BACKOFF * 2,
                "still stale {:?} after the drop",
                resumed.elapsed()
            );
        }
        assert!(
            resumed.elapsed() >= CATCH_UP_LIMIT,
            "not current before the limit"
        );
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A watch request that gets no answer after a watch ended is given up after
    /// [`LIST_STALL`], the watch stale meanwhile, and asked again; the watch is current again
    /// once the new one is answered, without a list.
    #[tokio::test(start_paused = true)]
    async fn a_resumed_watch_that_gets_no_answer_is_asked_again_and_current_once_answered() {
        let api = Arc::new(FakeApi::default());
        *api.newest.lock().expect("lock") = "10".into();
        api.answers.lock().expect("lock").extend([
            Answer::Ends(vec![]),
            Answer::Hangs,
            Answer::Stays(vec![]),
        ]);
        let mut w = Watched::new(&api);
        w.apply(3).await;
        assert!(w.readiness.is_current());
        let started = tokio::time::Instant::now();
        let (mut stale_at, mut current_again_at) = (None, None);
        while current_again_at.is_none() && started.elapsed() < LIST_STALL * 3 {
            if let Ok(item) = tokio::time::timeout(Duration::from_secs(1), w.events.next()).await {
                w.applier.apply(&w.index, item.expect("a watch never ends"));
            }
            match (w.readiness.is_current(), stale_at) {
                (false, None) => stale_at = Some(started.elapsed()),
                (true, Some(_)) => current_again_at = Some(started.elapsed()),
                _ => {}
            }
        }
        let stale_at = stale_at.expect("stale while the request got no answer");
        assert!(
            stale_at >= LIST_STALL,
            "stale only once given up: {stale_at:?}"
        );
        assert!(current_again_at.is_some(), "current again once answered");
        assert_eq!(*api.watched_from.lock().expect("lock"), ["10", "10", "10"]);
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// A consumer's `before_current` runs when a resumed watch has caught up, before its feed
    /// counts as current (the profiles' registry is rebuilt there), and not after a list.
    #[tokio::test(start_paused = true)]
    async fn before_current_runs_once_a_resumed_watch_caught_up_before_the_feed_is_current() {
        let api = Arc::new(FakeApi::default());
        *api.newest.lock().expect("lock") = "10".into();
        api.answers
            .lock()
            .expect("lock")
            .extend([Answer::Drops(vec![]), Answer::Stays(vec![])]);
        let readiness = Readiness::new();
        let feed = readiness.register("namespaces");
        let calls = Arc::new(Mutex::new(Vec::new()));
        let (seen_by, seen_in) = (readiness.clone(), calls.clone());
        let events = watch_then(
            Api::<Namespace>::all(api.client()),
            "namespaces",
            Some(feed.clone()),
            Box::new(move || seen_in.lock().expect("lock").push(seen_by.is_current())),
        );
        let mut w = Watched::with(readiness, feed, events.boxed());
        w.apply(4).await;
        assert!(calls.lock().expect("lock").is_empty(), "not after a list");
        let quiet = tokio::time::timeout(MAX_BACKOFF * 3, w.events.next()).await;
        assert!(quiet.is_err(), "nothing more comes");
        assert!(w.readiness.is_current());
        assert_eq!(
            *calls.lock().expect("lock"),
            [false],
            "once, before the feed was current"
        );
    }

    /// Where [`with_nesting`] puts `depth` arrays, one inside the other, around a number: JSON
    /// the API server accepts (to 10,000 levels) and the decoder refuses past 128. (A `Value`
    /// cannot hold it: serde_json's own would refuse it too.)
    fn nested(depth: usize) -> serde_json::Value {
        serde_json::Value::String(format!("__nested_{depth}__"))
    }

    /// `value` as JSON text, each [`nested`] mark replaced by its nesting.
    fn with_nesting(value: &serde_json::Value) -> String {
        let mut text = value.to_string();
        while let Some(start) = text.find("\"__nested_") {
            let Some(len) = text[start + 1..].find('"') else {
                break;
            };
            let mark = &text[start + 10..start + 1 + len - 2];
            let depth: usize = mark.parse().expect("a depth");
            let nesting = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
            text.replace_range(start..start + len + 2, &nesting);
        }
        text
    }

    /// A namespace no client can read: its creation time is past year 9999.
    fn unreadable_namespace(name: &str, version: &str) -> serde_json::Value {
        serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": name, "uid": format!("uid-{name}"), "resourceVersion": version,
            "creationTimestamp": "10000-01-01T00:00:00Z"}})
    }

    /// One object the client cannot read is skipped, counted and treated as absent, in a list
    /// and on the watch alike, and every other object is read; the watch stays current. A
    /// managedFields entry no client can read costs nothing (it is dropped before decoding).
    #[tokio::test(start_paused = true)]
    async fn one_unreadable_object_is_skipped_and_every_other_one_is_read() {
        let api = Arc::new(FakeApi::default());
        *api.newest.lock().expect("lock") = "10".into();
        *api.items.lock().expect("lock") = Some(vec![
            serde_json::json!({"metadata": {"name": "a", "resourceVersion": "5"}}),
            unreadable_namespace("bad", "6"),
            serde_json::json!({"metadata": {"name": "b", "resourceVersion": "7",
                "managedFields": [{"manager": "x", "operation": "Update",
                    "time": "10000-01-01T00:00:00Z"}]}}),
        ]);
        let mut modified = serde_json::json!({"apiVersion": "v1", "kind": "Namespace",
            "metadata": {"name": "a", "uid": "uid-a", "resourceVersion": "11"}});
        modified["spec"] = serde_json::json!({"finalizers": nested(200)});
        api.answers
            .lock()
            .expect("lock")
            .push_back(Answer::Stays(vec![
                serde_json::json!({"type": "MODIFIED", "object": modified}),
                namespace_event("ADDED", "c", "12"),
            ]));
        let what = "namespaces (one unreadable)";
        let readiness = Readiness::new();
        let feed = readiness.register(what);
        let events = watch(
            Api::<Namespace>::all(api.client()),
            what,
            Some(feed.clone()),
        );
        let mut w = Watched::with(readiness, feed, events.boxed());
        let mut seen = Vec::new();
        while seen.len() < 6 {
            let item = w.events.next().await.expect("a watch never ends");
            seen.push(described(
                item.as_ref().expect("no error: the object is skipped"),
            ));
            w.applier.apply(&w.index, item);
        }
        assert_eq!(
            seen,
            ["init", "list a", "list b", "listed", "delete a", "apply c"]
        );
        assert!(w.readiness.is_current(), "the watch stays current");
        assert_eq!(*w.index.0.lock().expect("lock"), ["b", "c"]);
        let skipped = SKIPPED
            .get_or_create(&SkippedLabels {
                resource: what.to_string(),
            })
            .get();
        assert_eq!(skipped, 2, "one in the list, one on the watch");
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 1);
    }

    /// An unreadable object is named by whatever of its metadata reads, and the reason never
    /// carries its values.
    #[test]
    fn an_unreadable_object_is_named_and_its_values_are_not_repeated() {
        let claim = serde_json::json!({
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"namespace": "team-a", "name": "deep", "uid": "u1", "resourceVersion": "9"},
            "spec": {"devices": {"config": [{"opaque": {"driver": "d", "parameters": nested(200)}}]}},
        });
        let unreadable =
            decode::<k8s_openapi::api::resource::v1::ResourceClaim>(&with_nesting(&claim))
                .expect_err("nested past the decoder's limit");
        assert_eq!(unreadable.key(), "team-a/deep");
        assert_eq!(unreadable.uid.as_deref(), Some("u1"));
        assert_eq!(unreadable.version.as_deref(), Some("9"));
        assert!(
            unreadable.reason.contains("recursion"),
            "{}",
            unreadable.reason
        );

        let secret = "s3cr3t-value";
        let pvc = serde_json::json!({"metadata": {"name": "p", "namespace": "n"},
            "spec": {"accessModes": secret, "volumeName": 5}});
        let unreadable =
            decode::<k8s_openapi::api::core::v1::PersistentVolumeClaim>(&pvc.to_string())
                .expect_err("a string where a list goes");
        assert!(!unreadable.reason.contains(secret), "{}", unreadable.reason);
        assert_eq!(unreadable.key(), "n/p");
    }

    /// A resumed watch the API server refuses because the version asked for is ahead of its own
    /// ("Too large resource version", as after a failover to a lagging API server) lists again,
    /// as client-go does: that version may never come.
    #[tokio::test(start_paused = true)]
    async fn a_watch_refused_as_too_new_lists_again() {
        let api = Arc::new(FakeApi::default());
        *api.newest.lock().expect("lock") = "10".into();
        api.answers
            .lock()
            .expect("lock")
            .push_back(Answer::Stays(vec![
                serde_json::json!({"type": "ERROR", "object": {"apiVersion": "v1", "kind": "Status",
                "status": "Failure", "reason": "Timeout", "code": 504,
                "message": "Too large resource version: 10, current: 9",
                "details": {"causes": [{"reason": "ResourceVersionTooLarge",
                    "message": "Too large resource version"}], "retryAfterSeconds": 1}}}),
            ]));
        let mut w = Watched::new(&api);
        w.apply(3).await;
        let refused = w.events.next().await.expect("the refusal");
        assert!(refused.is_err());
        w.applier.apply(&w.index, refused);
        let relisted = tokio::time::timeout(
            Duration::from_secs(600),
            (&mut w.events)
                .take(3)
                .map(|item| described(item.as_ref().expect("an event")))
                .collect::<Vec<String>>(),
        )
        .await
        .expect("listed again, not resumed from the version refused");
        assert_eq!(relisted, ["init", "list a", "listed"]);
        assert_eq!(api.lists.load(std::sync::atomic::Ordering::SeqCst), 2);
    }

    mod hostile {
        //! Every kind tether watches, fed hostile JSON through the real list-and-decode path.
        use super::*;
        use proptest::prelude::*;

        /// A readable object of each watched kind, named `name`.
        fn base(kind: usize, name: &str) -> serde_json::Value {
            let meta = serde_json::json!({"name": name, "namespace": "n", "uid": format!("uid-{name}"),
                "resourceVersion": "3", "labels": {"app": "a"}, "annotations": {"note": "n"}});
            let (api_version, kind, spec, status) = match kind {
                0 => (
                    "v1",
                    "Pod",
                    serde_json::json!({"nodeName": "n1", "containers": [{"name": "c",
                    "image": "i", "resources": {"requests": {"cpu": "1"}}}]}),
                    serde_json::json!({"phase": "Running"}),
                ),
                1 => (
                    "v1",
                    "Node",
                    serde_json::json!({"taints": [{"key": "k", "effect": "NoSchedule"}]}),
                    serde_json::json!({"allocatable": {"cpu": "4"}}),
                ),
                2 => (
                    "v1",
                    "PersistentVolume",
                    serde_json::json!({"capacity": {"storage": "1Gi"},
                    "accessModes": ["ReadWriteOnce"]}),
                    serde_json::json!({"phase": "Available"}),
                ),
                3 => (
                    "v1",
                    "PersistentVolumeClaim",
                    serde_json::json!({"accessModes": ["ReadWriteOnce"],
                    "resources": {"requests": {"storage": "1Gi"}}}),
                    serde_json::json!({"phase": "Pending"}),
                ),
                4 => (
                    "resource.k8s.io/v1",
                    "ResourceClaim",
                    serde_json::json!({"devices": {"requests":
                    [{"name": "gpu", "exactly": {"deviceClassName": "c"}}]}}),
                    serde_json::json!({}),
                ),
                5 => (
                    "resource.k8s.io/v1",
                    "ResourceSlice",
                    serde_json::json!({"driver": "d",
                    "pool": {"name": "p", "generation": 1, "resourceSliceCount": 1}, "nodeName": "n1",
                    "devices": [{"name": "g", "attributes": {"model": {"string": "a"}}}]}),
                    serde_json::json!(null),
                ),
                6 => (
                    "tether.dev/v1alpha1",
                    "StickyBinding",
                    serde_json::json!({"workloadRef":
                    {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "ordinal": 0}}),
                    serde_json::json!({"scheduleCount": 1, "nodeCount": {"n1": 1}}),
                ),
                7 => (
                    "scheduling.k8s.io/v1beta1",
                    "PodGroup",
                    serde_json::json!({}),
                    serde_json::json!({}),
                ),
                8 => (
                    "v1",
                    "Namespace",
                    serde_json::json!({}),
                    serde_json::json!({"phase": "Active"}),
                ),
                9 => (
                    "tether.dev/v1alpha1",
                    "ExplainRequest",
                    serde_json::json!({"pod": "web-0", "requester": {"username": "alice",
                    "groups": ["g"], "extra": {"k": ["v"]}}}),
                    serde_json::json!({"answeredAt": "2026-01-01T00:00:00Z", "summary": "s",
                    "explanation": {"pod": "n/web-0"}}),
                ),
                _ => (
                    "kubevirt.io/v1",
                    "VirtualMachineInstance",
                    serde_json::json!({"domain": {}}),
                    serde_json::json!({"phase": "Running"}),
                ),
            };
            serde_json::json!({"apiVersion": api_version, "kind": kind, "metadata": meta,
                "spec": spec, "status": status})
        }

        /// The hostile values: nesting past any decoder's limit, numbers past every bound, times
        /// past year 9999, 1 MiB strings, the wrong types.
        fn hostile(which: usize) -> serde_json::Value {
            match which {
                0 => nested(200),
                1 => serde_json::json!(1e300),
                2 => serde_json::json!(-9_223_372_036_854_775_808_i64),
                3 => serde_json::json!(u64::MAX),
                4 => serde_json::json!("10000-01-01T00:00:00Z"),
                5 => serde_json::json!("x".repeat(1 << 20)),
                6 => serde_json::json!([1, "a", null]),
                7 => serde_json::json!({"a": {"b": nested(150)}}),
                _ => serde_json::json!(null),
            }
        }

        /// Where a hostile value goes.
        const PATHS: [&[&str]; 10] = [
            &["spec"],
            &["status"],
            &["metadata", "labels"],
            &["metadata", "annotations", "note"],
            &["metadata", "creationTimestamp"],
            &["metadata", "managedFields"],
            &["metadata", "ownerReferences"],
            &["spec", "nodeName"],
            &["spec", "anUnknownField"],
            &["status", "conditions"],
        ];

        fn set(obj: &mut serde_json::Value, path: &[&str], value: serde_json::Value) {
            let mut at = obj;
            for key in &path[..path.len() - 1] {
                if !at[*key].is_object() {
                    at[*key] = serde_json::json!({});
                }
                at = &mut at[*key];
            }
            at[path[path.len() - 1]] = value;
        }

        /// Lists `items` (hostile and not) as kind `K` through the watch and returns the names
        /// listed, once the list is done; panics if the watch errs or is not current.
        fn listed<K>(
            items: Vec<serde_json::Value>,
            make: impl FnOnce(kube::Client) -> Api<K> + Send + 'static,
        ) -> Vec<String>
        where
            K: kube::Resource + Clone + Debug + DeserializeOwned + Send + Sync + 'static,
        {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .start_paused(true)
                .build()
                .expect("a runtime");
            runtime.block_on(async move {
                let api = Arc::new(FakeApi::default());
                *api.items.lock().expect("lock") = Some(items);
                let readiness = Readiness::new();
                let feed = readiness.register("hostile");
                let mut events =
                    std::pin::pin!(watch(make(api.client()), "hostile", Some(feed.clone())));
                let mut names = Vec::new();
                loop {
                    match events.next().await.expect("a watch never ends") {
                        Ok(Event::InitApply(obj)) => {
                            names.push(obj.meta().name.clone().unwrap_or_default())
                        }
                        Ok(Event::InitDone) => break,
                        Ok(_) => {}
                        Err(e) => panic!("the watch failed: {e}"),
                    }
                }
                feed.listed();
                assert!(readiness.is_current());
                names
            })
        }

        fn listed_as(kind: usize, items: Vec<serde_json::Value>) -> Vec<String> {
            use k8s_openapi::api::core::v1 as core;
            use k8s_openapi::api::resource::v1 as resource;
            match kind {
                0 => listed(items, Api::<crate::k8s::pod::Pod>::all),
                1 => listed(items, Api::<core::Node>::all),
                2 => listed(items, Api::<core::PersistentVolume>::all),
                3 => listed(items, Api::<core::PersistentVolumeClaim>::all),
                4 => listed(items, Api::<resource::ResourceClaim>::all),
                5 => listed(items, Api::<resource::ResourceSlice>::all),
                6 => listed(items, Api::<crate::api::StickyBinding>::all),
                7 => listed(
                    items,
                    Api::<k8s_openapi::api::scheduling::v1beta1::PodGroup>::all,
                ),
                8 => listed(items, Api::<core::Namespace>::all),
                9 => listed(items, Api::<crate::api::ExplainRequest>::all),
                _ => listed(items, |client| {
                    let vmi = kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
                        "kubevirt.io",
                        "v1",
                        "VirtualMachineInstance",
                    ));
                    Api::<kube::api::DynamicObject>::all_with(client, &vmi)
                }),
            }
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(64))]

            /// Whatever hostile value lands wherever in an object of any watched kind, the
            /// list goes on: the readable objects beside it are read, and the watch is current.
            #[test]
            fn no_hostile_object_stops_a_watch_of_any_kind(
                kind in 0usize..11,
                path in 0usize..PATHS.len(),
                value in 0usize..9,
            ) {
                let mut bad = base(kind, "bad");
                set(&mut bad, PATHS[path], hostile(value));
                let names = listed_as(kind, vec![base(kind, "before"), bad, base(kind, "after")]);
                prop_assert!(names.contains(&"before".to_string()), "{names:?}");
                prop_assert!(names.contains(&"after".to_string()), "{names:?}");
            }
        }
    }
}
