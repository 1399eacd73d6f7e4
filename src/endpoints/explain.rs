//! `GET /explain/{namespace}/{name}`: the leader re-runs the pod's profile on its current
//! snapshot, dry (`scheduler::explain`), for a caller who may get the pod and list the nodes
//! (the answer names every node, its taints and what is requested on it). At most [`AT_ONCE`]
//! requests are under way, and each caller gets [`PER_SECOND`] (each costs a TokenReview and
//! a cycle over every node).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::authentication::v1::UserInfo;
use kube::api::Api;

use super::auth;
use super::{HttpState, failure};
use crate::k8s::names;
use crate::k8s::pod::Pod;
use crate::scheduler::explain::{self};

/// Explanations answered per second to one caller at most (with a burst of as many); past
/// that, 429. Counted after authentication, so nobody spends another caller's.
pub const PER_SECOND: u32 = 5;

/// Requests under way at once at most, authentication included; past that, 429 at once, before
/// any TokenReview (anyone who can reach the port can send requests).
pub const AT_ONCE: usize = 8;

/// Requests one source address may have authenticated per second (with a burst of as many):
/// past that, 429 before any TokenReview, so that a client without a valid token cannot make
/// tether ask the API server about tokens as fast as it can send them.
pub const PER_SOURCE_PER_SECOND: u32 = 10;

/// The members of a gang one explanation dry-runs at most (each is a cycle over every node).
pub const MAX_MEMBERS: usize = 64;

/// How long an explanation's work may run: past it the gang's remaining members are not
/// dry-run (the request itself is answered within the endpoint's 30 s).
pub const WORK_DEADLINE: std::time::Duration = std::time::Duration::from_secs(20);

/// The threads explanations run on: their own, one, never the scheduler's Filter/Score pool, so
/// that no number of explanations takes the scheduling loop's CPU (rayon's parallel folds run
/// on the pool of the thread that calls them). On Linux the thread runs at nice 19: when the
/// node's CPU is contended (two cores, the API server beside tether) it gets a sliver of it,
/// and an explanation is cut at its deadline rather than slow the binds; on an idle node it
/// runs at full speed.
fn explain_pool() -> Option<&'static rayon::ThreadPool> {
    static POOL: std::sync::OnceLock<Option<rayon::ThreadPool>> = std::sync::OnceLock::new();
    POOL.get_or_init(|| {
        rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "explain".into())
            .start_handler(|_| lowest_priority())
            .build()
            .map_err(|e| tracing::warn!(error = %e, "could not start the explain thread"))
            .ok()
    })
    .as_ref()
}

/// The nice value of the explain thread: the lowest priority of the normal policy.
#[cfg(target_os = "linux")]
const EXPLAIN_NICE: libc::c_int = 19;

/// Gives the calling thread the nice value [`EXPLAIN_NICE`] (see [`explain_pool`]). On Linux
/// the nice value is a thread's own: `setpriority` on who 0 sets the caller's only. A refusal
/// is logged and the thread runs as any other.
#[cfg(target_os = "linux")]
#[allow(unsafe_code)]
fn lowest_priority() {
    // SAFETY: setpriority takes plain integers and touches no memory of ours.
    let status = unsafe { libc::setpriority(libc::PRIO_PROCESS, 0, EXPLAIN_NICE) };
    if status != 0 {
        tracing::warn!(error = %std::io::Error::last_os_error(), "the explain thread could not lower its priority; it runs as any other");
    }
}

#[cfg(not(target_os = "linux"))]
fn lowest_priority() {}

/// How `/explain` is rationed: requests at once, then each authenticated caller's rate.
pub struct Limiter {
    at_once: tokio::sync::Semaphore,
    per_caller: governor::DefaultKeyedRateLimiter<String>,
    per_source: governor::DefaultKeyedRateLimiter<std::net::IpAddr>,
    /// The reviews' positive answers, taken again for a while.
    pub(super) auth: auth::AuthCache,
}

/// The limiter of [`AT_ONCE`] and [`PER_SECOND`].
pub fn limiter() -> Arc<Limiter> {
    let rate = std::num::NonZeroU32::new(PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN);
    let source_rate =
        std::num::NonZeroU32::new(PER_SOURCE_PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN);
    Arc::new(Limiter {
        at_once: tokio::sync::Semaphore::new(AT_ONCE),
        per_caller: governor::RateLimiter::keyed(governor::Quota::per_second(rate)),
        per_source: governor::RateLimiter::keyed(governor::Quota::per_second(source_rate)),
        auth: auth::AuthCache::default(),
    })
}

/// Whether `name` is a DNS-1123 label (a namespace's name) when `subdomain` is false, or a
/// DNS-1123 subdomain (a pod's name) when it is: what the API server accepts as such names.
pub(super) fn valid_name(name: &str, subdomain: bool) -> bool {
    if subdomain {
        names::is_dns1123_subdomain(name, 253)
    } else {
        !name.contains('.') && names::is_dns1123_subdomain(name, 63)
    }
}

/// What every asking endpoint (`/explain`, `/pending`) does first, in this order, each step
/// refused with its status: a place among [`AT_ONCE`] requests (before any TokenReview), a
/// replica that leads, the source address's budget, a caller whose token tether takes, and that
/// caller's budget. `what` names the requests in the refusals. The place is held while the
/// permit lives.
pub(super) async fn admit<'a>(
    state: &'a HttpState,
    extensions: &axum::http::Extensions,
    headers: &HeaderMap,
    what: &str,
) -> Result<(tokio::sync::SemaphorePermit<'a>, UserInfo), Response> {
    let Ok(turn) = state.explain_limit.at_once.try_acquire() else {
        return Err(failure(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("more than {AT_ONCE} {what} are under way: try again"),
        ));
    };
    if state.leadership.is_elected() && !state.leadership.is_leading() {
        return Err(failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica is a standby: ask the leader (the holder of the tether Lease)",
        ));
    }
    // The source's budget first: a TokenReview is spent only within it.
    if let Some(axum::extract::ConnectInfo(peer)) =
        extensions.get::<axum::extract::ConnectInfo<std::net::SocketAddr>>()
    {
        let source = peer.ip().to_canonical();
        if state.explain_limit.per_source.check_key(&source).is_err() {
            return Err(failure(
                StatusCode::TOO_MANY_REQUESTS,
                &format!(
                    "more than {PER_SOURCE_PER_SECOND} {what} a second were asked for from {source}: try again"
                ),
            ));
        }
        state.explain_limit.per_source.retain_recent();
    }
    let caller = match auth::authenticate(&state.client, &state.explain_limit.auth, headers).await {
        Ok(user) => user,
        Err(refusal) => return Err(failure(refusal.status(), &refusal.to_string())),
    };
    let who = caller.username.clone().unwrap_or_default();
    if state.explain_limit.per_caller.check_key(&who).is_err() {
        return Err(failure(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("more than {PER_SECOND} {what} a second were asked for by {who}: try again"),
        ));
    }
    state.explain_limit.per_caller.retain_recent();
    Ok((turn, caller))
}

pub async fn explain(
    State(state): State<HttpState>,
    Path((namespace, name)): Path<(String, String)>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    if !valid_name(&namespace, false) || !valid_name(&name, true) {
        return failure(
            StatusCode::BAD_REQUEST,
            "the path must be /explain/<namespace>/<pod>, each a valid Kubernetes name",
        );
    }
    let (_turn, caller) = match admit(&state, &extensions, &headers, "explanations").await {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal,
    };
    match explain_for(
        &state.client,
        &state.explain_limit.auth,
        state.serving.sched(),
        &caller,
        &namespace,
        &name,
    )
    .await
    {
        Ok(explanation) => Json(explanation).into_response(),
        Err((status, message)) => failure(status, &message),
    }
}

/// Explains pod `namespace/name` for `caller`, who must be allowed to get it and list the nodes:
/// the work behind `/explain` and behind an ExplainRequest ([`super::requests`]). A refusal is
/// the HTTP status and message to answer.
pub(crate) async fn explain_for(
    client: &kube::Client,
    cache: &auth::AuthCache,
    sched: Option<Arc<crate::scheduler::Scheduler>>,
    caller: &UserInfo,
    namespace: &str,
    name: &str,
) -> Result<explain::Explanation, (StatusCode, String)> {
    for (verb, resource, ns, object) in [
        ("get", "pods", Some(namespace), Some(name)),
        ("list", "nodes", None, None),
    ] {
        auth::authorize(client, cache, caller, verb, resource, ns, object)
            .await
            .map_err(|refusal| (refusal.status(), refusal.to_string()))?;
    }
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let pod = match pods.get_opt(name).await {
        Ok(Some(pod)) => pod,
        Ok(None) => {
            return Err((
                StatusCode::NOT_FOUND,
                format!("pod {namespace}/{name} not found"),
            ));
        }
        Err(e) => {
            return Err((
                StatusCode::BAD_GATEWAY,
                format!("reading pod {namespace}/{name}: {e}"),
            ));
        }
    };
    tracing::info!(pod = %format!("{namespace}/{name}"), user = caller.username.as_deref().unwrap_or_default(), "explaining a pod");
    let Some(sched) = sched else {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "the scheduler is starting".to_string(),
        ));
    };
    // A gated pod: its gates, and what Kueue says where Kueue holds it.
    let admission = super::admission::of_pod(client, cache, caller, &pod).await;
    let deadline = std::time::Instant::now() + WORK_DEADLINE;
    let explained = tokio::task::spawn_blocking(move || match explain_pool() {
        // A request whose deadline passed while it waited for the thread is not worked on at
        // all: its caller is answered now, and the thread goes to the next one.
        Some(pool) => pool.install(|| {
            if std::time::Instant::now() >= deadline {
                return Ok(None);
            }
            let limits = explain::GroupLimits {
                max_members: MAX_MEMBERS,
                deadline: Some(deadline),
            };
            sched.explain(pod, limits).map(Some)
        }),
        None => Err("the explain thread could not be started".to_string()),
    });
    match explained.await {
        Ok(Ok(Some(mut explanation))) => {
            explanation.admission = admission;
            Ok(explanation)
        }
        Ok(Ok(None)) => Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "explanations are busy: this one waited {}s for its turn; try again",
                WORK_DEADLINE.as_secs()
            ),
        )),
        Ok(Err(message)) => Err((StatusCode::UNPROCESSABLE_ENTITY, message)),
        Err(e) => Err((
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("explaining failed: {e}"),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A client that cannot authenticate spends at most its source's budget of TokenReviews,
    /// however fast it asks; every request past it is refused before one.
    #[tokio::test]
    async fn a_source_without_a_valid_token_spends_at_most_its_budget_of_token_reviews() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use tower::ServiceExt;
        let reviews = Arc::new(AtomicUsize::new(0));
        let counted = reviews.clone();
        let api = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let counted = counted.clone();
            async move {
                if req.uri().path().ends_with("/tokenreviews") {
                    counted.fetch_add(1, Ordering::SeqCst);
                }
                let body = serde_json::json!({"apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview", "spec": {}, "status": {"authenticated": false}});
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(201)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&body).expect("json"),
                        ))
                        .expect("a response"),
                )
            }
        });
        let (fatal, _died) = crate::supervise::Fatal::new();
        let state = HttpState {
            metrics: Arc::default(),
            fatal,
            leadership: crate::leader::Leadership::alone(),
            serving: super::super::Serving::default(),
            client: kube::Client::new(api, "default"),
            explain_limit: limiter(),
        };
        let app = super::super::main_router(state);
        let peer: std::net::SocketAddr = ([10, 0, 0, 7], 40000).into();
        let mut refused_early = 0;
        for _ in 0..50 {
            let request = http::Request::get("/explain/default/web-0")
                .header("authorization", "Bearer not-a-token")
                .extension(axum::extract::ConnectInfo(peer))
                .body(axum::body::Body::empty())
                .expect("a request");
            let answer = app.clone().oneshot(request).await.expect("an answer");
            if answer.status() == StatusCode::TOO_MANY_REQUESTS {
                refused_early += 1;
            }
        }
        let spent = reviews.load(Ordering::SeqCst);
        assert!(
            spent <= PER_SOURCE_PER_SECOND as usize + 2,
            "{spent} TokenReviews for one source in a burst"
        );
        assert!(
            refused_early >= 50 - spent,
            "{refused_early} refused before a review"
        );
    }

    #[test]
    fn only_kubernetes_names_reach_the_api_server() {
        assert!(valid_name("default", false) && valid_name("web-0", true));
        assert!(valid_name("a.b-c.d", true) && !valid_name("a.b", false));
        for bad in [
            "",
            "..",
            "../x",
            "UPPER",
            "-x",
            "x-",
            "a b",
            "a%2Fb",
            &"x".repeat(64),
        ] {
            assert!(!valid_name(bad, false), "{bad:?} as a namespace");
        }
        for bad in ["", "a..b", ".a", "a_b", &"x".repeat(254)] {
            assert!(!valid_name(bad, true), "{bad:?} as a pod");
        }
    }

    /// The explain thread runs at the lowest priority; the thread that asks does not.
    #[cfg(target_os = "linux")]
    #[test]
    fn explanations_run_on_a_thread_of_the_lowest_priority() {
        #[allow(unsafe_code)]
        fn nice() -> libc::c_int {
            // SAFETY: getpriority only reads the calling thread's nice value.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, 0) }
        }
        let pool = explain_pool().expect("the explain thread");
        assert_eq!(pool.install(nice), EXPLAIN_NICE);
        assert_ne!(nice(), EXPLAIN_NICE);
    }
}
