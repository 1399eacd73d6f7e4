//! ExplainRequests: `/explain` and `/pending` for a user with nothing but a kubeconfig. The user
//! creates an ExplainRequest (the API server authenticates and authorizes that, with any
//! authenticator it has); the leader answers it in its status, for the requester the admission
//! policy `tether-explainrequests` vouches for, with the same SubjectAccessReviews as the
//! endpoints; the request is deleted [`ANSWERED_TTL`] after its answer.
//!
//! What a namespace's users can do with it is bounded: its watch feeds no scheduling structure
//! (scheduling never waits on it), questions are answered [`AT_ONCE`] at a time on the explain
//! thread, each namespace gets [`PER_NAMESPACE_PER_SECOND`] and its turn in rotation with the
//! others, and every answer is one status write through the gate and the status budget.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use futures::StreamExt;
use jiff::Timestamp;
use k8s_openapi::api::admissionregistration::v1::{
    ValidatingAdmissionPolicy, ValidatingAdmissionPolicyBinding,
};
use k8s_openapi::api::authentication::v1::UserInfo;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, DeleteParams};
use kube::runtime::watcher::Event;
use kube::{Resource, ResourceExt};

use super::auth::AuthCache;
use crate::api::{ExplainRequest, ExplainRequestSpec, ExplainRequestStatus, Refusal};
use crate::gate::{Write, WriteGate};
use crate::scheduler::Scheduler;
use crate::scheduler::explain::Explanation;

/// Questions worked on at once (they queue for the one explain thread).
pub const AT_ONCE: usize = 2;
/// Questions one namespace gets answered per second at most (with a burst of as many).
pub const PER_NAMESPACE_PER_SECOND: u32 = 5;
/// How long an answered request is kept for its asker to read.
pub const ANSWERED_TTL: Duration = Duration::from_secs(600);
/// How long a request nobody answered is kept (tether was down, or the asker may not read it
/// and the refusal could not be written).
pub const UNANSWERED_TTL: Duration = Duration::from_secs(3600);
/// The largest answer written into a status: past it, node entries are left out.
pub const MAX_ANSWER_BYTES: usize = 512 * 1024;
/// The default name of the admission policy (and of its binding) that admits a request only
/// when its requester is its creator (`--explain-policy`).
pub const POLICY: &str = "tether-explainrequests";
/// How long the policy's check is taken again before it is read anew.
const POLICY_RECHECK: Duration = Duration::from_secs(30);

/// A request as the answerer keeps it.
#[derive(Clone, Debug)]
struct Question {
    namespace: String,
    name: String,
    created: Option<Timestamp>,
    answered: Option<Timestamp>,
    spec: ExplainRequestSpec,
}

impl Question {
    fn of(request: &ExplainRequest) -> Option<Question> {
        Some(Question {
            namespace: request.namespace()?,
            name: request.name_any(),
            created: request.meta().creation_timestamp.as_ref().map(|t| t.0),
            answered: request
                .status
                .as_ref()
                .and_then(|s| s.answered_at.as_ref())
                .map(|t| t.0),
            spec: request.spec.clone(),
        })
    }

    /// Whether it is past its time to live at `now`.
    fn expired(&self, now: Timestamp) -> bool {
        let older = |at: Option<Timestamp>, ttl: Duration| {
            at.is_some_and(|at| now.duration_since(at).unsigned_abs() > ttl && at <= now)
        };
        match self.answered {
            Some(_) => older(self.answered, ANSWERED_TTL),
            None => older(self.created, UNANSWERED_TTL),
        }
    }
}

type Key = (String, String);

/// The requests known, and the unanswered ones in the order each namespace made them.
#[derive(Default)]
struct Book {
    known: HashMap<Key, Question>,
    waiting: BTreeMap<String, VecDeque<String>>,
    /// The namespace served last: the next turn goes to the one after it.
    last_served: Option<String>,
    /// Requests being answered now.
    in_hand: std::collections::HashSet<Key>,
}

impl Book {
    fn apply(&mut self, request: &ExplainRequest) {
        let Some(q) = Question::of(request) else {
            return;
        };
        let key = (q.namespace.clone(), q.name.clone());
        let fresh = q.answered.is_none() && !self.known.contains_key(&key);
        if fresh {
            self.waiting
                .entry(q.namespace.clone())
                .or_default()
                .push_back(q.name.clone());
        }
        self.known.insert(key, q);
    }

    fn delete(&mut self, request: &ExplainRequest) {
        if let Some(namespace) = request.namespace() {
            self.known.remove(&(namespace, request.name_any()));
        }
    }

    /// Starts over from a list: what the list does not hold is forgotten.
    fn reset(&mut self, listed: Vec<ExplainRequest>) {
        let in_hand = std::mem::take(&mut self.in_hand);
        *self = Book::default();
        self.in_hand = in_hand;
        for request in &listed {
            self.apply(request);
        }
    }

    /// The next question to answer: the first waiting one of the namespace after the one
    /// served last (in name order, wrapping), among those `ready` lets through.
    fn next(&mut self, mut ready: impl FnMut(&str) -> bool) -> Option<Question> {
        let after = self.last_served.clone().unwrap_or_default();
        let order: Vec<String> = self
            .waiting
            .range::<String, _>((
                std::ops::Bound::Excluded(&after),
                std::ops::Bound::Unbounded,
            ))
            .chain(self.waiting.range::<String, _>(..=&after))
            .map(|(ns, _)| ns.clone())
            .collect();
        for namespace in order {
            let queue = self.waiting.get_mut(&namespace)?;
            // Forget the names answered or deleted meanwhile.
            while let Some(name) = queue.front() {
                let key = (namespace.clone(), name.clone());
                match self.known.get(&key) {
                    Some(q) if q.answered.is_none() && !self.in_hand.contains(&key) => break,
                    _ => {
                        queue.pop_front();
                    }
                }
            }
            if queue.is_empty() {
                self.waiting.remove(&namespace);
                continue;
            }
            if !ready(&namespace) {
                continue;
            }
            let name = queue.pop_front()?;
            if queue.is_empty() {
                self.waiting.remove(&namespace);
            }
            let key = (namespace.clone(), name);
            self.last_served = Some(namespace);
            self.in_hand.insert(key.clone());
            return self.known.get(&key).cloned();
        }
        None
    }

    /// The requests past their time to live at `now`.
    fn expired(&self, now: Timestamp) -> Vec<Key> {
        self.known
            .iter()
            .filter(|(key, q)| q.expired(now) && !self.in_hand.contains(*key))
            .map(|(key, _)| key.clone())
            .collect()
    }
}

/// Whether the policy that makes `spec.requester` the request's creator is in force: its
/// binding denies (not only warns or audits) and points at it, and it fails closed. Without
/// it anybody could ask as anybody, so tether answers nothing.
async fn policy_in_force(client: &kube::Client, name: &str) -> Result<(), String> {
    let bindings: Api<ValidatingAdmissionPolicyBinding> = Api::all(client.clone());
    let policies: Api<ValidatingAdmissionPolicy> = Api::all(client.clone());
    let missing = |what: &str| {
        format!(
            "the ValidatingAdmissionPolicy{what} {name} is not installed (deploy/explainrequests.yaml, or the chart): without it a request could name anybody as its requester, so tether answers none"
        )
    };
    let binding = bindings
        .get_opt(name)
        .await
        .map_err(|e| format!("reading ValidatingAdmissionPolicyBinding {name}: {e}"))?
        .ok_or_else(|| missing("Binding"))?;
    let policy = policies
        .get_opt(name)
        .await
        .map_err(|e| format!("reading ValidatingAdmissionPolicy {name}: {e}"))?
        .ok_or_else(|| missing(""))?;
    let spec = binding.spec;
    let denies = spec.validation_actions.iter().any(|a| a == "Deny");
    let fails_closed = policy
        .spec
        .as_ref()
        .and_then(|s| s.failure_policy.as_deref())
        .is_none_or(|p| p == "Fail");
    if spec.policy_name != name || !denies || !fails_closed {
        return Err(format!(
            "the ValidatingAdmissionPolicy {name} or its binding was changed (it must deny, bind {name} and fail closed): tether answers no request until it is as shipped"
        ));
    }
    Ok(())
}

/// The status answering `question`.
async fn answer(
    client: &kube::Client,
    cache: &AuthCache,
    sched: &Arc<Scheduler>,
    policy: Result<(), String>,
    question: &Question,
) -> ExplainRequestStatus {
    let refused = |code: StatusCode, message: String| ExplainRequestStatus {
        answered_at: Some(Time(Timestamp::now())),
        summary: Some(format!("refused ({}): {message}", code.as_u16())),
        refused: Some(Refusal {
            code: i32::from(code.as_u16()),
            message,
        }),
        ..Default::default()
    };
    if let Err(message) = policy {
        return refused(StatusCode::FORBIDDEN, message);
    }
    let requester = &question.spec.requester;
    let caller = UserInfo {
        username: Some(requester.username.clone()),
        groups: (!requester.groups.is_empty()).then(|| requester.groups.clone()),
        uid: requester.uid.clone(),
        extra: None,
    };
    let namespace = question.namespace.as_str();
    match &question.spec.pod {
        Some(pod) => {
            match super::explain::explain_for(
                client,
                cache,
                Some(sched.clone()),
                &caller,
                namespace,
                pod,
            )
            .await
            {
                Ok(mut explanation) => {
                    let summary = explanation_summary(&explanation);
                    match fit(&mut explanation) {
                        Some(value) => ExplainRequestStatus {
                            answered_at: Some(Time(Timestamp::now())),
                            summary: Some(summary),
                            explanation: Some(value),
                            ..Default::default()
                        },
                        None => refused(
                            StatusCode::PAYLOAD_TOO_LARGE,
                            format!(
                                "the explanation does not fit in {} KiB even without its node entries: ask with --token-file",
                                MAX_ANSWER_BYTES / 1024
                            ),
                        ),
                    }
                }
                Err((code, message)) => refused(code, message),
            }
        }
        None => match super::pending::pending_for(
            client,
            cache,
            Some(sched.clone()),
            &caller,
            Some(namespace.to_string()),
        )
        .await
        {
            Ok(summary) => ExplainRequestStatus {
                answered_at: Some(Time(Timestamp::now())),
                summary: Some(format!(
                    "{} pods pending, {} blockers",
                    summary.pods,
                    summary.groups.len()
                )),
                pending: serde_json::to_value(&summary).ok(),
                ..Default::default()
            },
            Err((code, message)) => refused(code, message),
        },
    }
}

/// The explanation in one line.
fn explanation_summary(e: &Explanation) -> String {
    if let Some(node) = &e.bound_to {
        return format!("bound to {node}");
    }
    if let Some(error) = &e.error {
        return format!("error: {error}");
    }
    if let Some(message) = &e.message {
        return format!("pending: {message}");
    }
    match &e.winner {
        Some(node) => format!("fits: the best node now is {node}"),
        None => "no verdict".to_string(),
    }
}

/// `e` as JSON within [`MAX_ANSWER_BYTES`], leaving node entries out as needed (the passing
/// nodes' Filter verdicts, which the scores repeat, first; then halving the scores and the
/// rejected nodes, keeping the best and the first); `None` when even the least does not fit.
fn fit(e: &mut Explanation) -> Option<serde_json::Value> {
    let size = |e: &Explanation| serde_json::to_vec(e).map(|v| v.len()).unwrap_or(usize::MAX);
    if size(e) > MAX_ANSWER_BYTES {
        let before = e.filters.len();
        e.filters.retain(|n| !n.feasible);
        e.nodes_omitted = e.nodes_omitted.saturating_add(before - e.filters.len());
    }
    while size(e) > MAX_ANSWER_BYTES {
        if e.scores.len() <= 10 && e.filters.len() <= 20 {
            return None;
        }
        let keep_scores = (e.scores.len() / 2).max(10).min(e.scores.len());
        let keep_filters = (e.filters.len() / 2).max(20).min(e.filters.len());
        e.nodes_omitted = e
            .nodes_omitted
            .saturating_add(e.scores.len() - keep_scores)
            .saturating_add(e.filters.len() - keep_filters);
        e.scores.truncate(keep_scores);
        e.filters.truncate(keep_filters);
    }
    serde_json::to_value(&*e).ok()
}

/// How long a replica waits before it asks again whether ExplainRequests are served.
const NOT_SERVED_RETRY: Duration = Duration::from_secs(30);

/// Whether a watch failure says the API server does not serve ExplainRequests (404: the CRD of
/// this release is not installed) or tether may not read them (403).
fn unavailable(error: &kube::runtime::watcher::Error) -> bool {
    use kube::runtime::watcher::Error;
    matches!(
        error,
        Error::InitialListFailed(kube::Error::Api(e))
            | Error::WatchStartFailed(kube::Error::Api(e))
            | Error::WatchFailed(kube::Error::Api(e)) if e.code == 404 || e.code == 403
    )
}

/// Answers ExplainRequests while this replica leads (a standby's gate admits no write: it
/// answers nothing, and the new leader answers what was left). Where the API server does not
/// serve them (the CRDs of an older release) or tether may not read them, says so once and
/// asks again every [`NOT_SERVED_RETRY`]. Runs until the process stops.
pub async fn run(
    client: kube::Client,
    sched: Arc<Scheduler>,
    gate: WriteGate,
    policy_name: String,
) {
    let answerer = Answerer {
        client,
        sched,
        gate,
        policy_name,
        cache: Arc::new(AuthCache::default()),
    };
    let mut said = false;
    loop {
        match answerer.serve().await {
            Some(error) => {
                if !said {
                    said = true;
                    tracing::warn!(%error, "ExplainRequests cannot be watched (this release's CRDs and ClusterRole installed?): tether explain works with --token-file meanwhile; asking again every 30 s");
                }
                tokio::time::sleep(NOT_SERVED_RETRY).await;
            }
            None => return,
        }
    }
}

/// What answering needs.
struct Answerer {
    client: kube::Client,
    sched: Arc<Scheduler>,
    gate: WriteGate,
    policy_name: String,
    cache: Arc<AuthCache>,
}

impl Answerer {
    /// Watches and answers until the watch says ExplainRequests are unavailable (that error).
    async fn serve(&self) -> Option<kube::runtime::watcher::Error> {
        let (client, gate) = (&self.client, &self.gate);
        let api: Api<ExplainRequest> = Api::all(client.clone());
        let mut events = std::pin::pin!(crate::watch::watch(api, "explainrequests", None));
        let mut book = Book::default();
        let mut listed: Option<Vec<ExplainRequest>> = None;
        let rate = std::num::NonZeroU32::new(PER_NAMESPACE_PER_SECOND)
            .unwrap_or(std::num::NonZeroU32::MIN);
        let per_namespace: governor::DefaultKeyedRateLimiter<String> =
            governor::RateLimiter::keyed(governor::Quota::per_second(rate));
        let mut working = tokio::task::JoinSet::new();
        let mut tick = tokio::time::interval(Duration::from_secs(1));
        let mut policy: Option<(std::time::Instant, Result<(), String>)> = None;
        loop {
            tokio::select! {
                event = events.next() => match event {
                    Some(Ok(Event::Init)) => listed = Some(Vec::new()),
                    Some(Ok(Event::InitApply(request))) => {
                        if let Some(list) = listed.as_mut() {
                            list.push(request);
                        }
                    }
                    Some(Ok(Event::InitDone)) => book.reset(listed.take().unwrap_or_default()),
                    Some(Ok(Event::Apply(request))) => book.apply(&request),
                    Some(Ok(Event::Delete(request))) => book.delete(&request),
                    Some(Err(e)) if unavailable(&e) => return Some(e),
                    // The watch notes and retries its other failures.
                    Some(Err(_)) => {}
                    None => return None,
                },
                Some(done) = working.join_next(), if !working.is_empty() => {
                    if let Ok(key) = done {
                        book.in_hand.remove(&key);
                    }
                }
                _ = tick.tick() => {
                    if gate.admits(Write::ExplainAnswer) {
                        self.delete_expired(&mut book).await;
                    }
                }
            }
            // Hand out work while there is room and a question whose namespace has budget.
            while working.len() < AT_ONCE && gate.admits(Write::ExplainAnswer) {
                let Some(question) =
                    book.next(|ns| per_namespace.check_key(&ns.to_string()).is_ok())
                else {
                    break;
                };
                per_namespace.retain_recent();
                let fresh = policy
                    .as_ref()
                    .is_some_and(|(at, _)| at.elapsed() < POLICY_RECHECK);
                if !fresh {
                    policy = Some((
                        std::time::Instant::now(),
                        policy_in_force(client, &self.policy_name).await,
                    ));
                }
                let in_force = policy.as_ref().map(|(_, p)| p.clone()).unwrap_or(Ok(()));
                let (client, cache, sched, gate) = (
                    client.clone(),
                    self.cache.clone(),
                    self.sched.clone(),
                    gate.clone(),
                );
                working.spawn(async move {
                    let key = (question.namespace.clone(), question.name.clone());
                    let status = answer(&client, &cache, &sched, in_force, &question).await;
                    let api: Api<ExplainRequest> =
                        Api::namespaced(client.clone(), &question.namespace);
                    let written = gate
                        .write(
                            Write::ExplainAnswer,
                            crate::controller::apply_status(&api, &question.name, &status),
                        )
                        .await;
                    let request = format!("{}/{}", key.0, key.1);
                    match written {
                        Ok(Ok(_)) => tracing::debug!(%request, "answered an ExplainRequest"),
                        Ok(Err(e)) if crate::k8s::api_errors::not_found(&e) => {}
                        Ok(Err(e)) => {
                            tracing::warn!(%request, error = %e, "could not write an ExplainRequest's answer")
                        }
                        Err(refused) => {
                            tracing::debug!(error = %refused, "not answering an ExplainRequest")
                        }
                    }
                    key
                });
            }
        }
    }

    /// Deletes the requests past their time to live.
    async fn delete_expired(&self, book: &mut Book) {
        for key in book.expired(Timestamp::now()) {
            book.known.remove(&key);
            let api: Api<ExplainRequest> = Api::namespaced(self.client.clone(), &key.0);
            let name = key.1.clone();
            let gone = self
                .gate
                .write(Write::ExplainAnswer, async move {
                    api.delete(&name, &DeleteParams::default()).await
                })
                .await;
            if let Ok(Err(e)) = gone
                && !crate::k8s::api_errors::not_found(&e)
            {
                tracing::debug!(request = %format!("{}/{}", key.0, key.1), error = %e, "could not delete an old ExplainRequest");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::Requester;

    fn request(namespace: &str, name: &str, answered: bool) -> ExplainRequest {
        let mut r = ExplainRequest::new(
            name,
            ExplainRequestSpec {
                pod: Some("web-0".into()),
                requester: Requester {
                    username: "alice".into(),
                    ..Default::default()
                },
            },
        );
        r.metadata.namespace = Some(namespace.into());
        r.metadata.creation_timestamp = Some(Time(Timestamp::now()));
        if answered {
            r.status = Some(ExplainRequestStatus {
                answered_at: Some(Time(Timestamp::now())),
                ..Default::default()
            });
        }
        r
    }

    /// A namespace that asks a thousand questions does not keep another's one waiting: turns
    /// rotate over the namespaces.
    #[test]
    fn namespaces_take_turns() {
        let mut book = Book::default();
        for i in 0..1000 {
            book.apply(&request("flood", &format!("q{i}"), false));
        }
        book.apply(&request("quiet", "one", false));
        let first: Vec<String> = (0..2)
            .filter_map(|_| book.next(|_| true))
            .map(|q| q.namespace)
            .collect();
        assert_eq!(first, ["flood", "quiet"]);
        // A namespace out of budget is passed over; the others are served.
        book.apply(&request("other", "two", false));
        let next = book.next(|ns| ns != "flood").map(|q| q.name);
        assert_eq!(next.as_deref(), Some("two"));
    }

    /// Answered requests are not asked again; a deleted one is forgotten; a request answered
    /// meanwhile is skipped.
    #[test]
    fn only_unanswered_requests_are_handed_out_once() {
        let mut book = Book::default();
        book.apply(&request("a", "done", true));
        book.apply(&request("a", "open", false));
        book.apply(&request("a", "gone", false));
        book.delete(&request("a", "gone", false));
        let q = book.next(|_| true).expect("one question");
        assert_eq!(q.name, "open");
        assert!(book.next(|_| true).is_none(), "handed out twice");
        // A re-list while it is worked on does not hand it out again.
        book.reset(vec![request("a", "open", false)]);
        assert!(book.next(|_| true).is_none());
    }

    #[test]
    fn old_requests_expire() {
        let mut book = Book::default();
        let mut old = request("a", "old", true);
        let long_ago = Timestamp::now() - jiff_hours(1);
        if let Some(s) = old.status.as_mut() {
            s.answered_at = Some(Time(long_ago));
        }
        book.apply(&old);
        book.apply(&request("a", "new", true));
        let mut stale = request("a", "stale", false);
        stale.metadata.creation_timestamp = Some(Time(Timestamp::now() - jiff_hours(2)));
        book.apply(&stale);
        let mut expired = book.expired(Timestamp::now());
        expired.sort();
        assert_eq!(
            expired,
            [
                ("a".to_string(), "old".to_string()),
                ("a".into(), "stale".into())
            ]
        );
    }

    fn jiff_hours(h: i64) -> jiff::SignedDuration {
        jiff::SignedDuration::from_hours(h)
    }

    /// An explanation over many nodes is cut to the budget, counting what it left out.
    #[test]
    fn a_large_explanation_is_cut_to_fit() {
        use crate::scheduler::explain::{NodeFilters, NodeScores};
        let mut e = Explanation {
            nodes: 20_000,
            ..Default::default()
        };
        for i in 0..20_000 {
            let mut f = NodeFilters {
                node: format!("node-{i:05}-{}", "x".repeat(40)),
                feasible: i % 2 == 0,
                ..Default::default()
            };
            f.verdicts = vec![];
            e.filters.push(f);
            if i % 2 == 0 {
                e.scores.push(NodeScores {
                    node: format!("node-{i:05}-{}", "x".repeat(40)),
                    ..Default::default()
                });
            }
        }
        let value = fit(&mut e).expect("fits");
        let len = serde_json::to_vec(&value).expect("json").len();
        assert!(len <= MAX_ANSWER_BYTES, "{len} bytes");
        assert!(e.nodes_omitted >= 10_000, "{}", e.nodes_omitted);
        assert!(e.filters.iter().all(|n| !n.feasible));
        assert_eq!(
            e.filters.len() + e.scores.len() + e.nodes_omitted,
            30_000,
            "every entry is kept or counted"
        );
    }
}
