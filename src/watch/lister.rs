//! The list-then-watch under [`super::watch`], in place of kube's `watcher`. It yields the same
//! events (`Init`, `InitApply`…, `InitDone`, then `Apply` and `Delete`) and errors, and it says
//! what kube's does not: when the API server has accepted a watch resumed from the last version
//! seen ([`Step::Resumed`]), and which version the watch has reached ([`Lister::version`]).
//! With both, a watch that failed for any reason but `410 Gone` resumes where it was, as
//! client-go's reflector does, and its caller can tell when it is current again without a new
//! list. (kube's watcher resumes too, but says nothing when it has; a caller that must know
//! could only list again, and a list of 100,000 pods takes a minute.)
//!
//! A list is streamed, as client-go's reflector lists from 1.35 (kube-scheduler's informers
//! among them): one watch request with `sendInitialEvents=true` brings every object as an
//! `ADDED` event, then a bookmark marked `k8s.io/initial-events-end` with the version they were
//! read at, and goes on as the watch from there. The API server sends them from its watch cache,
//! one at a time, instead of answering hundreds of page requests one after another (a minute
//! for 150,000 pods). An API server that refuses such a request (its `WatchList` feature gate
//! off, on by default from 1.34) is listed in pages from then on; a streamed list that breaks
//! off is listed in pages once, then streamed again.
//!
//! Every object is decoded on its own ([`decode`]): a list page and a watch event are read as
//! raw JSON first, so one object the client cannot read (JSON nested past the decoder's 128
//! levels, a number past its type, a time past year 9999) is one [`Step::Skipped`], and every
//! other object of the page or the stream is read as usual. Whoever may write a kind can write
//! such an object (the API server accepts nesting to 10,000 levels), so none of them may stop a
//! watch.

use std::collections::BTreeMap;
use std::time::Duration;

use futures::StreamExt;
use futures::stream::BoxStream;
use kube::api::{Api, ListParams, WatchParams};
use kube::runtime::watcher::{self, Event};
use serde::Deserialize;
use serde::de::DeserializeOwned;
use serde_json::value::RawValue;

/// How many objects one page of a list holds, where a list is not streamed. Lists are read
/// consistently, never with `resourceVersion=0`: the API server answers such a list whole,
/// whatever the limit, and every object of it would be decoded at once, managedFields and all,
/// before any is trimmed.
pub(super) const LIST_PAGE_SIZE: u32 = 500;

/// How long the API server may take over a streamed list and the watch that follows it in one
/// request (client-go asks for five to ten minutes). A list that is not whole by then is listed
/// again, in pages.
const STREAM_TIMEOUT_SECONDS: u32 = 300;

/// The annotation of the bookmark that ends a streamed list's objects.
const INITIAL_EVENTS_END: &str = "k8s.io/initial-events-end";

/// The events of one watch request, each object decoded on its own.
type Events<K> = BoxStream<'static, kube::Result<RawEvent<K>>>;

/// An object of a watch event: read, or why not and what stands for it as absent.
type Decoded<K> = Result<K, (Box<Unreadable>, Option<K>)>;

/// One event of a watch.
enum RawEvent<K> {
    /// Added or modified.
    Applied(Decoded<K>),
    Deleted(Decoded<K>),
    /// A bookmark: the version the watch has reached, and whether it ends a streamed list's
    /// objects.
    Bookmark {
        version: String,
        initial_end: bool,
    },
    Error(Box<kube::core::Status>),
}

/// A line of a watch as it comes: its type, and its object as raw JSON. (kube's `WatchEvent`
/// cannot hold a raw object: serde buffers an object that comes before its `type`, and its
/// buffer has the decoder's depth limit.)
#[derive(Deserialize)]
struct EventLine<'a> {
    #[serde(rename = "type")]
    kind: Option<&'a str>,
    #[serde(borrow)]
    object: Option<&'a RawValue>,
}

/// An object of a watch decoded from its raw JSON, straight from the line (no copy).
fn decoded<K: DeserializeOwned>(raw: &str) -> Decoded<K> {
    decode(raw).map_err(|unreadable| {
        let absent = absent(&unreadable);
        (unreadable, absent)
    })
}

/// Reads one line of a watch. None for an empty line.
fn event<K: DeserializeOwned>(line: &str) -> Option<kube::Result<RawEvent<K>>> {
    if line.trim().is_empty() {
        return None;
    }
    let parsed = serde_json::from_str::<EventLine<'_>>(line);
    let event = match parsed {
        Ok(EventLine {
            kind: Some(kind),
            object: Some(object),
        }) => match kind {
            "ADDED" | "MODIFIED" => Some(RawEvent::Applied(decoded(object.get()))),
            "DELETED" => Some(RawEvent::Deleted(decoded(object.get()))),
            "BOOKMARK" => {
                serde_json::from_str::<Mark>(object.get())
                    .ok()
                    .map(|mark| RawEvent::Bookmark {
                        initial_end: mark
                            .metadata
                            .annotations
                            .get(INITIAL_EVENTS_END)
                            .is_some_and(|v| v == "true"),
                        version: mark.metadata.resource_version.unwrap_or_default(),
                    })
            }
            "ERROR" => serde_json::from_str::<kube::core::Status>(object.get())
                .ok()
                .map(|status| RawEvent::Error(Box::new(status))),
            _ => None,
        },
        _ => None,
    };
    Some(match event {
        Some(event) => Ok(event),
        // Not an event: an error the API server wrote as a bare Status, or not the API
        // server's at all.
        None => match serde_json::from_str::<kube::core::Status>(line) {
            Ok(status) => Err(kube::Error::Api(Box::new(status))),
            Err(e) => Err(kube::Error::SerdeError(e)),
        },
    })
}

/// Opens a watch: the response's lines, each read by [`event`].
async fn open_watch<K: DeserializeOwned + Send + 'static>(
    client: &kube::Client,
    mut request: http::Request<Vec<u8>>,
) -> kube::Result<Events<K>> {
    use futures::AsyncBufReadExt;
    // Kubernetes gzips watch streams one member per event, which the client's decompression
    // does not read whole (as kube's own watch requests do, ask for none).
    request.headers_mut().insert(
        http::header::ACCEPT_ENCODING,
        http::HeaderValue::from_static("identity"),
    );
    let body = client.request_stream(request).await?;
    let lines = body.lines().filter_map(|line| {
        std::future::ready(match line {
            Ok(line) => event(&line),
            // The connection ended mid-chunk, as it does after minutes of watching: the
            // request is over and the watch resumes.
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => None,
            Err(e) => Some(Err(kube::Error::ReadEvents(e))),
        })
    });
    Ok(lines.boxed())
}

/// How much longer than the watch request's own timeout a watch may stay silent before its
/// connection is taken for dead and the watch resumed (as kube's watcher allows).
const SILENCE_MARGIN: Duration = Duration::from_secs(5);

/// Where the lister is.
enum Phase<K> {
    /// Nothing held: the next step lists.
    Start,
    /// A list in pages: what is left of the page (each object decoded, or why not), the token
    /// of the next page, and the version the list was read at (the last page's).
    Paging {
        page: std::vec::IntoIter<Result<K, Box<Unreadable>>>,
        next: Option<String>,
        version: Option<String>,
    },
    /// A streamed list: its objects come as events until the bookmark that ends them.
    Streaming { events: Events<K> },
    /// Listed, or a watch ended or failed: the next step watches from `version`.
    Resume { version: String },
    /// Watching; `version` is the last one seen (an object's or a bookmark's).
    Watching { version: String, events: Events<K> },
}

/// An object the client could not read: who it is, as far as its metadata reads, and why.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Unreadable {
    pub api_version: Option<String>,
    pub kind: Option<String>,
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub uid: Option<String>,
    /// Its `resourceVersion`.
    pub version: Option<String>,
    /// Its `metadata.generation` (a condition written on it says which generation it judged).
    pub generation: Option<i64>,
    /// Why it could not be read: the decoder's error, without any of the object's values.
    pub reason: String,
}

impl Unreadable {
    /// `namespace/name` (or `name`, or `<unnamed>`), for logs and messages.
    pub fn key(&self) -> String {
        match (&self.namespace, &self.name) {
            (Some(ns), Some(name)) => format!("{ns}/{name}"),
            (None, Some(name)) => name.clone(),
            _ => "<unnamed>".to_string(),
        }
    }
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
    /// An object the client could not read. In a list it is simply left out (absent); on a
    /// watch it may have replaced a version that was read before, so `absent` carries what
    /// stands for it in a `Delete` (its identity alone), where the type can be made of that.
    Skipped {
        unreadable: Box<Unreadable>,
        absent: Option<K>,
    },
}

/// One watch: a list, then a watch from the list's version, resumed from the last version seen
/// whenever it ends or fails, listed again after a `410 Gone`.
pub(super) struct Lister<K> {
    client: kube::Client,
    request: kube::core::Request,
    page_size: u32,
    timeout: u32,
    phase: Phase<K>,
    /// Whether lists are streamed (until the API server refuses to).
    streams: bool,
    /// Whether the next list is read in pages: a streamed one broke off.
    page_next: bool,
}

/// A bookmark's object: its version and annotations, nothing else read.
#[derive(Deserialize, Default)]
struct Mark {
    #[serde(default)]
    metadata: MarkMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct MarkMeta {
    resource_version: Option<String>,
    #[serde(default)]
    annotations: BTreeMap<String, String>,
}

/// Whether the API server refused a streamed list as a request it does not take (400 or 422:
/// its `WatchList` feature gate is off), rather than failing it.
fn refuses_streaming(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(status) if status.code == 400 || status.code == 422)
}

/// The error for a streamed list that broke off before its last object.
fn broke_off(what: &str) -> watcher::Error {
    watcher::Error::InitialListFailed(kube::Error::ReadEvents(std::io::Error::new(
        std::io::ErrorKind::UnexpectedEof,
        format!("the streamed list broke off: {what}"),
    )))
}

/// A list as it comes: its metadata, and each item as raw JSON.
#[derive(Deserialize)]
struct RawList<'a> {
    #[serde(default)]
    metadata: kube::api::ListMeta,
    #[serde(borrow, default)]
    items: Option<Vec<&'a RawValue>>,
}

/// The part of any object that says who it is; every other field is skipped unread (serde's
/// skipping has no depth limit).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct Identity {
    api_version: Option<String>,
    kind: Option<String>,
    #[serde(default)]
    metadata: IdentityMeta,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase")]
struct IdentityMeta {
    namespace: Option<String>,
    name: Option<String>,
    uid: Option<String>,
    resource_version: Option<String>,
    generation: Option<i64>,
}

/// Decodes one object. One that does not read is read once more without its `managedFields`
/// (no part of tether reads them, so nothing in them may stop an object: a time past year
/// 9999, an entry of a type the client does not know); one that still does not read is
/// [`Unreadable`], named by whatever of its metadata reads.
pub fn decode<K: DeserializeOwned>(raw: &str) -> Result<K, Box<Unreadable>> {
    let error = match serde_json::from_str::<K>(raw) {
        Ok(obj) => return Ok(obj),
        Err(error) => error,
    };
    if let Some(Ok(obj)) = without_managed_fields(raw).map(|raw| serde_json::from_str::<K>(&raw)) {
        return Ok(obj);
    }
    let identity = serde_json::from_str::<Identity>(raw).unwrap_or_default();
    Err(Box::new(Unreadable {
        api_version: identity.api_version,
        kind: identity.kind,
        namespace: identity.metadata.namespace,
        name: identity.metadata.name,
        uid: identity.metadata.uid,
        version: identity.metadata.resource_version,
        generation: identity.metadata.generation,
        reason: without_values(&error),
    }))
}

/// `raw` without `metadata.managedFields`, None when it has none (or does not read as an
/// object whose metadata is one).
fn without_managed_fields(raw: &str) -> Option<String> {
    let mut obj: BTreeMap<&str, &RawValue> = serde_json::from_str(raw).ok()?;
    let mut metadata: BTreeMap<&str, &RawValue> =
        serde_json::from_str(obj.get("metadata")?.get()).ok()?;
    metadata.remove("managedFields")?;
    let metadata = serde_json::value::to_raw_value(&metadata).ok()?;
    obj.insert("metadata", &metadata);
    serde_json::to_string(&obj).ok()
}

/// A decoder's error as a reason to log and report: serde's text with every quoted value left
/// out (it quotes what it could not read, and the object is a user's), at most 300 characters.
fn without_values(error: &serde_json::Error) -> String {
    let text = error.to_string();
    let mut reason = String::with_capacity(text.len().min(300));
    let mut quoted = false;
    for c in text.chars() {
        match (c, quoted) {
            ('"', false) => {
                quoted = true;
                reason.push_str("\"…");
            }
            ('"', true) => {
                quoted = false;
                reason.push('"');
            }
            (_, true) => {}
            (c, false) => reason.push(c),
        }
        if reason.len() >= 300 {
            reason.push('…');
            break;
        }
    }
    reason
}

/// One page of a list: its items decoded one by one, its version and continue token.
async fn list<K: DeserializeOwned>(
    client: &kube::Client,
    request: &kube::core::Request,
    params: &ListParams,
) -> kube::Result<(Vec<Result<K, Box<Unreadable>>>, kube::api::ListMeta)> {
    let request = request.list(params).map_err(kube::Error::BuildRequest)?;
    let text = client.request_text(request).await?;
    let list: RawList<'_> = serde_json::from_str(&text).map_err(kube::Error::SerdeError)?;
    let items = list.items.unwrap_or_default();
    let page = items.into_iter().map(|raw| decode(raw.get())).collect();
    Ok((page, list.metadata))
}

/// Every object `api` lists, in pages of [`LIST_PAGE_SIZE`], each decoded on its own as a watch decodes them:
/// the objects read, and those skipped as unreadable (for a one-off reader such as
/// `tether simulate`, which one bad object must not stop either).
pub async fn list_each<K: kube::Resource + DeserializeOwned>(
    api: Api<K>,
) -> kube::Result<(Vec<K>, Vec<Box<Unreadable>>)> {
    let request = kube::core::Request::new(api.resource_url());
    let client = api.into_client();
    let (mut read, mut skipped) = (Vec::new(), Vec::new());
    let mut next = None;
    loop {
        let params = ListParams {
            limit: Some(LIST_PAGE_SIZE),
            continue_token: next.take(),
            ..ListParams::default()
        };
        let (page, metadata) = list::<K>(&client, &request, &params).await?;
        for item in page {
            match item {
                Ok(obj) => read.push(obj),
                Err(unreadable) => skipped.push(unreadable),
            }
        }
        match metadata.continue_.filter(|c| !c.is_empty()) {
            Some(token) => next = Some(token),
            None => return Ok((read, skipped)),
        }
    }
}

/// Opens a streamed list (a watch from the newest version, every object sent first).
async fn open_stream<K: DeserializeOwned + Send + 'static>(
    client: &kube::Client,
    request: &kube::core::Request,
) -> kube::Result<Events<K>> {
    let params = WatchParams {
        timeout: Some(STREAM_TIMEOUT_SECONDS),
        bookmarks: true,
        send_initial_events: true,
        ..WatchParams::default()
    };
    let request = request
        .watch(&params, "")
        .map_err(kube::Error::BuildRequest)?;
    open_watch(client, request).await
}

/// What stands for an unreadable object in a `Delete`: its kind and identity alone, as `K`
/// (None where `K` needs more than that, as a custom resource with a required `spec`).
fn absent<K: DeserializeOwned>(who: &Unreadable) -> Option<K> {
    let stand_in = serde_json::json!({
        "apiVersion": who.api_version,
        "kind": who.kind,
        "metadata": {
            "namespace": who.namespace,
            "name": who.name,
            "uid": who.uid,
            "resourceVersion": who.version,
        },
    });
    serde_json::from_value(stand_in).ok()
}

impl<K> Lister<K>
where
    K: kube::Resource + Clone + std::fmt::Debug + DeserializeOwned + Send + 'static,
{
    /// Lists in pages of `page_size`; each watch request asks the API server to end it after
    /// `timeout` seconds.
    pub(super) fn new(api: Api<K>, page_size: u32, timeout: u32) -> Self {
        let request = kube::core::Request::new(api.resource_url());
        Lister {
            client: api.into_client(),
            request,
            page_size,
            timeout,
            phase: Phase::Start,
            streams: true,
            page_next: false,
        }
    }

    /// Whether the lister is listing, or asking for a watch: what the API server owes an answer
    /// to, as opposed to a watch that is open and may be quiet for long.
    pub(super) fn waiting_for_an_answer(&self) -> bool {
        !matches!(self.phase, Phase::Watching { .. })
    }

    /// A list or watch request got no answer in time and was given up: a list starts over, a
    /// watch is asked for again.
    pub(super) fn stalled(&mut self) {
        if matches!(self.phase, Phase::Streaming { .. }) {
            self.page_next = true;
        }
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
        let params = ListParams::default().limit(1);
        let (_, metadata) = list::<K>(&self.client, &self.request, &params).await?;
        Ok(metadata.resource_version.filter(|v| !v.is_empty()))
    }

    /// The next step of a streamed list.
    async fn stream_step(&mut self) -> Step<K> {
        let Phase::Streaming { events } = &mut self.phase else {
            return Step::Nothing;
        };
        let next = events.next().await;
        let failed = match next {
            Some(Ok(RawEvent::Applied(Ok(obj)))) => return Step::Item(Ok(Event::InitApply(obj))),
            Some(Ok(RawEvent::Applied(Err((unreadable, _))))) => {
                return Step::Skipped {
                    unreadable,
                    absent: None,
                };
            }
            Some(Ok(RawEvent::Bookmark {
                version,
                initial_end: true,
            })) if !version.is_empty() => {
                // Every object is in: the same request goes on as the watch from here.
                if let Phase::Streaming { events } =
                    std::mem::replace(&mut self.phase, Phase::Start)
                {
                    self.phase = Phase::Watching { version, events };
                }
                return Step::Item(Ok(Event::InitDone));
            }
            Some(Ok(RawEvent::Bookmark { .. })) => return Step::Nothing,
            Some(Ok(RawEvent::Deleted(_))) => broke_off("a deletion among its objects"),
            Some(Ok(RawEvent::Error(status))) => watcher::Error::WatchError(status),
            Some(Err(e)) => watcher::Error::InitialListFailed(e),
            None => broke_off("the request ended before its last object"),
        };
        self.phase = Phase::Start;
        self.page_next = true;
        Step::Item(Err(failed))
    }

    fn watch_params(&self) -> WatchParams {
        WatchParams {
            timeout: Some(self.timeout),
            bookmarks: true,
            ..WatchParams::default()
        }
    }

    /// Takes one step. `quiet`: while a watch is open, give [`Step::Quiet`] when nothing
    /// comes within it.
    pub(super) async fn step(&mut self, quiet: Option<Duration>) -> Step<K> {
        match &mut self.phase {
            Phase::Start => {
                if self.streams && !std::mem::take(&mut self.page_next) {
                    match open_stream(&self.client, &self.request).await {
                        Ok(events) => {
                            self.phase = Phase::Streaming { events };
                            return Step::Item(Ok(Event::Init));
                        }
                        Err(e) if refuses_streaming(&e) => {
                            tracing::info!(resource = %self.request.url_path, error = %e, "the API server does not stream lists; listing in pages");
                            self.streams = false;
                        }
                        Err(e) => return Step::Item(Err(watcher::Error::InitialListFailed(e))),
                    }
                }
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
                match page.next() {
                    Some(Ok(obj)) => return Step::Item(Ok(Event::InitApply(obj))),
                    Some(Err(unreadable)) => {
                        return Step::Skipped {
                            unreadable,
                            absent: None,
                        };
                    }
                    None => {}
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
                match list(&self.client, &self.request, &params).await {
                    Ok((items, metadata)) => {
                        let version = metadata.resource_version.filter(|v| !v.is_empty());
                        let next = metadata.continue_.filter(|c| !c.is_empty());
                        if version.is_none() && next.is_none() {
                            self.phase = Phase::Start;
                            return Step::Item(Err(watcher::Error::NoResourceVersion));
                        }
                        self.phase = Phase::Paging {
                            page: items.into_iter(),
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
            Phase::Streaming { .. } => self.stream_step().await,
            Phase::Resume { version } => {
                let version = version.clone();
                let watched = match self.request.watch(&self.watch_params(), &version) {
                    Ok(request) => open_watch(&self.client, request).await,
                    Err(e) => Err(kube::Error::BuildRequest(e)),
                };
                match watched {
                    Ok(events) => {
                        self.phase = Phase::Watching {
                            version,
                            events: events.boxed(),
                        };
                        Step::Resumed
                    }
                    Err(e) => {
                        if matches!(&e, kube::Error::Api(status) if status.code == 410 || too_large(status))
                        {
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
                    Ok(Some(Ok(RawEvent::Applied(obj)))) => watched(version, obj, Event::Apply)
                        .unwrap_or_else(|| {
                            self.phase = Phase::Start;
                            Step::Item(Err(watcher::Error::NoResourceVersion))
                        }),
                    Ok(Some(Ok(RawEvent::Deleted(obj)))) => watched(version, obj, Event::Delete)
                        .unwrap_or_else(|| {
                            self.phase = Phase::Start;
                            Step::Item(Err(watcher::Error::NoResourceVersion))
                        }),
                    Ok(Some(Ok(RawEvent::Bookmark { version: mark, .. }))) => {
                        *version = mark;
                        Step::Nothing
                    }
                    Ok(Some(Ok(RawEvent::Error(status)))) => {
                        // The API server ends the request after an error; a 410 means the
                        // history asked for is gone, so a new list.
                        self.phase = if status.code == 410 || too_large(&status) {
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
                        // A line that does not read even as an event with a raw object (every
                        // object does) is not the API server's: it lists again, as does a 410
                        // reported this way.
                        let gone = matches!(&e, kube::Error::Api(status) if status.code == 410);
                        self.phase = if gone || undecodable(&e) {
                            Phase::Start
                        } else {
                            Phase::Resume {
                                version: std::mem::take(version),
                            }
                        };
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

/// The step for a watched object: `version` moves to its own, and it is handed on as `event`
/// says; one that could not be decoded is skipped and stands as absent (a `Delete` of what was
/// read before). None when the object has no version (the watch must list again).
fn watched<K: kube::Resource>(
    version: &mut String,
    obj: Decoded<K>,
    event: fn(K) -> Event<K>,
) -> Option<Step<K>> {
    match obj {
        Ok(obj) => {
            let seen = obj
                .meta()
                .resource_version
                .clone()
                .filter(|v| !v.is_empty())?;
            *version = seen;
            Some(Step::Item(Ok(event(obj))))
        }
        Err((unreadable, absent)) => {
            *version = unreadable.version.clone().filter(|v| !v.is_empty())?;
            Some(Step::Skipped { absent, unreadable })
        }
    }
}

/// Whether a watch's error is a line the client could not decode. kube reports such a line
/// as a decoding error, or, when the line reads as an (empty) `Status`, as an API error without
/// a code; the API server's own errors always carry one.
pub(super) fn undecodable(error: &kube::Error) -> bool {
    match error {
        kube::Error::SerdeError(_) => true,
        kube::Error::Api(status) => status.code == 0,
        _ => false,
    }
}

/// Whether the API server refused a watch because the version asked for is ahead of its own
/// (an API server behind the one the version was read from, as after a failover to a lagging
/// one): client-go lists again, since that version may never come; so does the lister.
pub(super) fn too_large(status: &kube::core::Status) -> bool {
    status.details.as_ref().is_some_and(|d| {
        d.causes
            .iter()
            .any(|c| c.reason == "ResourceVersionTooLarge")
    }) || status.message.contains("Too large resource version")
}

/// Whether `seen` is at or past `target`. Versions are compared as numbers (the API server's
/// are etcd revisions); one that does not read as a number is never taken as reached.
pub(super) fn reached(seen: &str, target: &str) -> bool {
    match (seen.parse::<u64>(), target.parse::<u64>()) {
        (Ok(seen), Ok(target)) => seen >= target,
        _ => false,
    }
}
