//! The list-then-watch under [`super::watch`], in place of kube's `watcher`. It yields the same
//! events (`Init`, `InitApply`…, `InitDone`, then `Apply` and `Delete`) and errors, and it says
//! what kube's does not: when the API server has accepted a watch resumed from the last version
//! seen ([`Step::Resumed`]), and which version the watch has reached ([`Lister::version`]).
//! With both, a watch that failed for any reason but `410 Gone` resumes where it was, as
//! client-go's reflector does, and its caller can tell when it is current again without a new
//! list. (kube's watcher resumes too, but says nothing when it has; a caller that must know
//! could only list again, and a list of 100,000 pods takes a minute.)

use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, ListParams, WatchEvent, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde::de::DeserializeOwned;

/// The events of one watch request.
type Events<K> = BoxStream<'static, kube::Result<WatchEvent<K>>>;

/// The annotation of the bookmark that ends a streaming list's initial events.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// How much longer than the watch request's own timeout a watch may stay silent before its
/// connection is taken for dead and the watch resumed (as kube's watcher allows).
const SILENCE_MARGIN: Duration = Duration::from_secs(5);

/// Where the lister is.
enum Phase<K> {
    /// Nothing held: the next step lists (or starts a streaming list).
    Start,
    /// A list in pages: what is left of the page, the token of the next page, and the version
    /// the list was read at (the last page's).
    Paging {
        page: std::vec::IntoIter<K>,
        next: Option<String>,
        version: Option<String>,
    },
    /// A streaming list: its initial events, until the bookmark that ends them.
    Streaming(Events<K>),
    /// Listed, or a watch ended or failed: the next step watches from `version`.
    Resume { version: String },
    /// Watching; `version` is the last one seen (an object's or a bookmark's).
    Watching { version: String, events: Events<K> },
}

/// What one step gives.
pub(super) enum Step<K> {
    /// An event or an error for the caller.
    Item(watcher::Result<Event<K>>),
    /// The API server accepted a watch from the last version seen: everything since comes next,
    /// in order (or a `410 Gone` that starts a new list).
    Resumed,
    /// Nothing came within the quiet time asked for ([`Lister::step`]).
    Quiet,
    /// Nothing to hand on (a page fetched, a bookmark): step again.
    Nothing,
}

/// One watch: a list, then a watch from the list's version, resumed from the last version seen
/// whenever it ends or fails, listed again after a `410 Gone`.
pub(super) struct Lister<K> {
    api: Api<K>,
    page_size: u32,
    timeout: u32,
    /// Whether the initial state comes as watch events (`sendInitialEvents`).
    streaming: bool,
    /// Whether an object the client cannot decode is skipped (the stream goes on) rather than
    /// ending the request (the watch resumes from the last version).
    skip_undecodable: bool,
    phase: Phase<K>,
}

impl<K> Lister<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    /// Lists in pages of `page_size`; each watch request asks the API server to end it after
    /// `timeout` seconds.
    pub(super) fn new(api: Api<K>, page_size: u32, timeout: u32, skip_undecodable: bool) -> Self {
        Lister {
            api,
            page_size,
            timeout,
            streaming: false,
            skip_undecodable,
            phase: Phase::Start,
        }
    }

    /// Lists again from the start, streaming the list (`sendInitialEvents`) or not.
    pub(super) fn restart(&mut self, streaming: bool) {
        self.streaming = streaming;
        self.phase = Phase::Start;
    }

    /// Whether the lister is listing, or asking for a watch: what the API server owes an answer
    /// to, as opposed to a watch that is open and may be quiet for long.
    pub(super) fn waiting_for_an_answer(&self) -> bool {
        !matches!(self.phase, Phase::Watching { .. })
    }

    /// A list or watch request got no answer in time and was given up: a list starts over, a
    /// watch is asked for again.
    pub(super) fn stalled(&mut self) {
        if !matches!(self.phase, Phase::Resume { .. }) {
            self.phase = Phase::Start;
        }
    }

    /// Whether the next step starts a list.
    pub(super) fn starts_over(&self) -> bool {
        matches!(self.phase, Phase::Start)
    }

    /// The version the open watch has reached, None unless one is open.
    pub(super) fn version(&self) -> Option<&str> {
        match &self.phase {
            Phase::Watching { version, .. } => Some(version),
            _ => None,
        }
    }

    /// The version of the newest state the API server has now (the version of a one-object
    /// list, read as consistently as a list): a watch that has reached it has delivered every
    /// change made before the call.
    pub(super) async fn newest_version(&mut self) -> kube::Result<Option<String>> {
        let list = self.api.list(&ListParams::default().limit(1)).await?;
        Ok(list.metadata.resource_version.filter(|v| !v.is_empty()))
    }

    fn watch_params(&self, initial: bool) -> WatchParams {
        WatchParams {
            timeout: Some(self.timeout),
            bookmarks: true,
            send_initial_events: initial,
            ..WatchParams::default()
        }
    }

    /// Takes one step. `quiet`: while a watch is open, give [`Step::Quiet`] when nothing
    /// comes within it.
    pub(super) async fn step(&mut self, quiet: Option<Duration>) -> Step<K> {
        match &mut self.phase {
            Phase::Start if self.streaming => {
                match self.api.watch(&self.watch_params(true), "0").await {
                    Ok(events) => {
                        self.phase = Phase::Streaming(events.boxed());
                        Step::Item(Ok(Event::Init))
                    }
                    Err(e) => Step::Item(Err(watcher::Error::WatchStartFailed(e))),
                }
            }
            Phase::Start => {
                self.phase = Phase::Paging {
                    page: Vec::new().into_iter(),
                    next: None,
                    version: None,
                };
                Step::Item(Ok(Event::Init))
            }
            Phase::Paging {
                page,
                next,
                version,
            } => {
                if let Some(obj) = page.next() {
                    return Step::Item(Ok(Event::InitApply(obj)));
                }
                if next.is_none()
                    && let Some(version) = version.take()
                {
                    self.phase = Phase::Resume { version };
                    return Step::Item(Ok(Event::InitDone));
                }
                let params = ListParams {
                    limit: Some(self.page_size),
                    continue_token: next.take(),
                    ..ListParams::default()
                };
                match self.api.list(&params).await {
                    Ok(list) => {
                        let version = list.metadata.resource_version.filter(|v| !v.is_empty());
                        let next = list.metadata.continue_.filter(|c| !c.is_empty());
                        if version.is_none() && next.is_none() {
                            self.phase = Phase::Start;
                            return Step::Item(Err(watcher::Error::NoResourceVersion));
                        }
                        self.phase = Phase::Paging {
                            page: list.items.into_iter(),
                            next,
                            version,
                        };
                        Step::Nothing
                    }
                    Err(e) => {
                        self.phase = Phase::Start;
                        Step::Item(Err(watcher::Error::InitialListFailed(e)))
                    }
                }
            }
            Phase::Streaming(events) => match events.next().await {
                Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj))) => {
                    Step::Item(Ok(Event::InitApply(obj)))
                }
                // The API server sends no deletions among the initial events.
                Some(Ok(WatchEvent::Deleted(_))) => Step::Nothing,
                Some(Ok(WatchEvent::Bookmark(mark))) => {
                    if mark.metadata.annotations.contains_key(INITIAL_EVENTS_END) {
                        let Phase::Streaming(events) =
                            std::mem::replace(&mut self.phase, Phase::Start)
                        else {
                            unreachable!("matched as streaming above");
                        };
                        self.phase = Phase::Watching {
                            version: mark.metadata.resource_version,
                            events,
                        };
                        Step::Item(Ok(Event::InitDone))
                    } else {
                        Step::Nothing
                    }
                }
                Some(Ok(WatchEvent::Error(status))) => {
                    // A list cut short starts over, whatever the reason.
                    self.phase = Phase::Start;
                    Step::Item(Err(watcher::Error::WatchError(status)))
                }
                Some(Err(e)) => {
                    if !(self.skip_undecodable && undecodable(&e)) {
                        self.phase = Phase::Start;
                    }
                    Step::Item(Err(watcher::Error::WatchFailed(e)))
                }
                None => {
                    self.phase = Phase::Start;
                    Step::Nothing
                }
            },
            Phase::Resume { version } => {
                let version = version.clone();
                match self.api.watch(&self.watch_params(false), &version).await {
                    Ok(events) => {
                        self.phase = Phase::Watching {
                            version,
                            events: events.boxed(),
                        };
                        Step::Resumed
                    }
                    Err(e) => {
                        if matches!(&e, kube::Error::Api(status) if status.code == 410) {
                            self.phase = Phase::Start;
                        }
                        Step::Item(Err(watcher::Error::WatchStartFailed(e)))
                    }
                }
            }
            Phase::Watching { version, events } => {
                let silence = Duration::from_secs(u64::from(self.timeout)) + SILENCE_MARGIN;
                let next = match quiet {
                    Some(quiet) => match tokio::time::timeout(quiet, events.next()).await {
                        Ok(next) => Ok(next),
                        Err(_) => return Step::Quiet,
                    },
                    None => tokio::time::timeout(silence, events.next()).await,
                };
                match next {
                    Ok(Some(Ok(WatchEvent::Added(obj) | WatchEvent::Modified(obj)))) => {
                        advance(version, obj, Event::Apply).unwrap_or_else(|| {
                            self.phase = Phase::Start;
                            Step::Item(Err(watcher::Error::NoResourceVersion))
                        })
                    }
                    Ok(Some(Ok(WatchEvent::Deleted(obj)))) => advance(version, obj, Event::Delete)
                        .unwrap_or_else(|| {
                            self.phase = Phase::Start;
                            Step::Item(Err(watcher::Error::NoResourceVersion))
                        }),
                    Ok(Some(Ok(WatchEvent::Bookmark(mark)))) => {
                        *version = mark.metadata.resource_version;
                        Step::Nothing
                    }
                    Ok(Some(Ok(WatchEvent::Error(status)))) => {
                        // The API server ends the request after an error; a 410 means the
                        // history asked for is gone, so a new list.
                        self.phase = if status.code == 410 {
                            Phase::Start
                        } else {
                            Phase::Resume {
                                version: std::mem::take(version),
                            }
                        };
                        Step::Item(Err(watcher::Error::WatchError(status)))
                    }
                    Ok(Some(Err(e))) => {
                        // A dropped connection: the request is given up and the watch resumed.
                        // A line the client cannot read is skipped where such lines are;
                        // elsewhere it would come again with every resume, so it lists again,
                        // as does a 410 reported this way.
                        let gone = matches!(&e, kube::Error::Api(status) if status.code == 410);
                        if gone || (undecodable(&e) && !self.skip_undecodable) {
                            self.phase = Phase::Start;
                        } else if !undecodable(&e) {
                            self.phase = Phase::Resume {
                                version: std::mem::take(version),
                            };
                        }
                        Step::Item(Err(watcher::Error::WatchFailed(e)))
                    }
                    // The request ended (its timeout), or went silent for longer than that:
                    // resumed, nothing missed.
                    Ok(None) | Err(_) => {
                        self.phase = Phase::Resume {
                            version: std::mem::take(version),
                        };
                        Step::Nothing
                    }
                }
            }
        }
    }
}

/// The step for a watched object: `version` moves to the object's, and the object is handed on
/// as `event` says. None when the object has no version (the watch must list again).
fn advance<K: kube::Resource>(
    version: &mut String,
    obj: K,
    event: fn(K) -> Event<K>,
) -> Option<Step<K>> {
    let seen = obj
        .meta()
        .resource_version
        .clone()
        .filter(|v| !v.is_empty())?;
    *version = seen;
    Some(Step::Item(Ok(event(obj))))
}

/// Whether a watch's error is one object the client could not decode. kube reports such a line
/// as a decoding error, or, when the line reads as an (empty) `Status`, as an API error without
/// a code; the API server's own errors always carry one.
pub(super) fn undecodable(error: &kube::Error) -> bool {
    match error {
        kube::Error::SerdeError(_) => true,
        kube::Error::Api(status) => status.code == 0,
        _ => false,
    }
}

/// Whether `seen` is at or past `target`. Versions are compared as numbers (the API server's
/// are etcd revisions); one that does not read as a number is never taken as reached.
pub(super) fn reached(seen: &str, target: &str) -> bool {
    match (seen.parse::<u64>(), target.parse::<u64>()) {
        (Ok(seen), Ok(target)) => seen >= target,
        _ => false,
    }
}
