//! ExplainRequests: `/explain` and `/pending` for a user with nothing but a kubeconfig. The user
//! creates an ExplainRequest (the API server authenticates and authorizes that, with any
//! authenticator it has); the leader answers it in its status, for the requester the admission
//! policy `tether-explainrequests` vouches for, with the same SubjectAccessReviews as the
//! endpoints; the request is deleted [`book::ANSWERED_TTL`] after its answer.
//!
//! What a user can do with it is bounded: the watch feeds no scheduling structure (scheduling
//! never waits on it), questions are answered [`AT_ONCE`] at a time on the explain thread,
//! each requester gets [`PER_REQUESTER_PER_SECOND`] and its turn in rotation with the others,
//! one with more than [`MAX_PER_REQUESTER`] requests is refused, every answer is one status
//! write through the gate and the status budget, of [`answer::MAX_ANSWER_BYTES`] at most, and
//! old requests are deleted [`DELETES_PER_TICK`] a second at most.

mod answer;
mod book;

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use futures::StreamExt;
use jiff::Timestamp;
use kube::api::{Api, DeleteParams, Preconditions};
use kube::runtime::watcher::Event;

pub use self::book::MAX_PER_REQUESTER;
use self::book::{Book, Key, Question};
use super::auth::AuthCache;
use crate::api::ExplainRequest;
use crate::gate::{Write, WriteGate};
use crate::scheduler::Scheduler;

/// Questions worked on at once (they queue for the one explain thread).
pub const AT_ONCE: usize = 2;
/// Questions one requester gets answered per second at most (with a burst of as many).
pub const PER_REQUESTER_PER_SECOND: u32 = 5;
/// Old requests deleted per second at most.
pub const DELETES_PER_TICK: usize = 32;
/// How often a question whose answer could not be written is asked again.
const TRIES: u32 = 3;
/// The default name of the admission policy (and of its binding) that admits a request only
/// when its requester is its creator, and an answer only from tether (`--explain-policy`).
pub const POLICY: &str = "tether-explainrequests";
/// How long the policy's check is taken again before it is read anew.
const POLICY_RECHECK: Duration = Duration::from_secs(30);
/// How long a replica waits before it asks again whether ExplainRequests are served.
const NOT_SERVED_RETRY: Duration = Duration::from_secs(30);

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

/// How a question's work ended.
enum Outcome {
    /// Answered (or the request went).
    Done,
    /// Its answer was not written: ask again.
    Again,
}

impl Answerer {
    /// Watches and answers until the watch says ExplainRequests are unavailable (that error).
    async fn serve(&self) -> Option<kube::runtime::watcher::Error> {
        let api: Api<ExplainRequest> = Api::all(self.client.clone());
        let mut events = std::pin::pin!(crate::watch::watch(api, "explainrequests", None));
        let mut book = Book::default();
        let mut listed: Option<Vec<ExplainRequest>> = None;
        let rate = std::num::NonZeroU32::new(PER_REQUESTER_PER_SECOND)
            .unwrap_or(std::num::NonZeroU32::MIN);
        let per_requester: governor::DefaultKeyedRateLimiter<String> =
            governor::RateLimiter::keyed(governor::Quota::per_second(rate));
        let mut working = tokio::task::JoinSet::new();
        // What each task works on, so that one that panics still gives its question back.
        let mut in_task: HashMap<tokio::task::Id, (Key, String)> = HashMap::new();
        let mut tries: HashMap<(Key, String), u32> = HashMap::new();
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
                    // Not served (the CRD of an older release) or not readable (403).
                    Some(Err(e)) if crate::watch::unavailable(&e).is_some() => return Some(e),
                    // The watch notes and retries its other failures.
                    Some(Err(_)) => {}
                    None => return None,
                },
                Some(done) = working.join_next_with_id(), if !working.is_empty() => {
                    let (id, outcome) = match done {
                        Ok((id, outcome)) => (id, outcome),
                        Err(e) => (e.id(), Outcome::Again),
                    };
                    if let Some((key, uid)) = in_task.remove(&id) {
                        let n = tries.entry((key.clone(), uid.clone())).or_default();
                        *n += 1;
                        let again = matches!(outcome, Outcome::Again) && *n < TRIES;
                        if !again {
                            tries.remove(&(key.clone(), uid.clone()));
                        }
                        book.done(&key, &uid, again);
                    }
                }
                _ = tick.tick() => {
                    if self.gate.admits(Write::ExplainAnswer) {
                        self.delete_expired(&mut book).await;
                    }
                }
            }
            // Hand out work while there is room and a question whose requester has budget.
            while working.len() < AT_ONCE && self.gate.admits(Write::ExplainAnswer) {
                let Some(question) =
                    book.next(|who| per_requester.check_key(&who.to_string()).is_ok())
                else {
                    break;
                };
                per_requester.retain_recent();
                // A request over its requester's share is refused without asking the policy.
                let in_force = if question.over {
                    Ok(())
                } else {
                    let fresh = policy
                        .as_ref()
                        .is_some_and(|(at, _)| at.elapsed() < POLICY_RECHECK);
                    if !fresh {
                        let checked =
                            answer::policy_in_force(&self.client, &self.policy_name).await;
                        policy = Some((std::time::Instant::now(), checked));
                    }
                    policy.as_ref().map_or(Ok(()), |(_, p)| p.clone())
                };
                let work = self.work(question.clone(), in_force);
                let id = working.spawn(work).id();
                in_task.insert(id, (question.key(), question.uid.clone()));
            }
        }
    }

    /// Answers `question` (or refuses it, when it is over its requester's share) and writes
    /// the answer.
    fn work(
        &self,
        question: Question,
        policy: Result<(), String>,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        let (client, cache, sched, gate) = (
            self.client.clone(),
            self.cache.clone(),
            self.sched.clone(),
            self.gate.clone(),
        );
        async move {
            let status = if question.over {
                answer::refused(
                    StatusCode::TOO_MANY_REQUESTS,
                    format!(
                        "{} has more than {MAX_PER_REQUESTER} ExplainRequests: delete some, or wait for tether to delete the old ones",
                        question.requester()
                    ),
                )
            } else {
                answer::answer(&client, &cache, &sched, policy, &question).await
            };
            let request = format!("{}/{}", question.namespace, question.name);
            let api: Api<ExplainRequest> = Api::namespaced(client, &question.namespace);
            let written = gate
                .write(
                    Write::ExplainAnswer,
                    crate::controller::apply_status_of(
                        &api,
                        &question.name,
                        Some(&question.uid),
                        &status,
                    ),
                )
                .await;
            match written {
                Ok(Ok(_)) => {
                    tracing::debug!(%request, "answered an ExplainRequest");
                    Outcome::Done
                }
                // Gone, or another request of the same name now (its uid differs).
                Ok(Err(e))
                    if crate::k8s::api_errors::not_found(&e)
                        || matches!(&e, kube::Error::Api(s) if s.code == 422 || s.code == 409) =>
                {
                    Outcome::Done
                }
                Ok(Err(e)) => {
                    tracing::warn!(%request, error = %e, "could not write an ExplainRequest's answer; asking again");
                    Outcome::Again
                }
                Err(refused) => {
                    tracing::debug!(error = %refused, "not answering an ExplainRequest");
                    Outcome::Again
                }
            }
        }
    }

    /// Deletes up to [`DELETES_PER_TICK`] requests past their time to live, each only while it
    /// is the request it was (its uid).
    async fn delete_expired(&self, book: &mut Book) {
        for (key, uid) in book.expired(Timestamp::now(), DELETES_PER_TICK) {
            book.deleting(&key);
            let api: Api<ExplainRequest> = Api::namespaced(self.client.clone(), &key.0);
            let name = key.1.clone();
            let params = DeleteParams {
                preconditions: Some(Preconditions {
                    uid: Some(uid),
                    resource_version: None,
                }),
                ..DeleteParams::default()
            };
            let gone = self
                .gate
                .write(Write::ExplainAnswer, async move {
                    api.delete(&name, &params).await
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
