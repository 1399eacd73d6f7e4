//! tether's small HTTP surface. On `--http-addr`: `/metrics` (prometheus-client, open) and
//! `/explain/{namespace}/{name}` (`tether explain`; a bearer token that may get the pod and
//! list the nodes, see [`auth`]), `/pending[/{namespace}]` (`tether pending`; a token that may
//! list the pods there). On `--health-addr`: `/healthz` and `/readyz` for the probes.

pub mod admission;
pub mod auth;
pub mod explain;
pub mod pending;
pub mod requests;
pub mod serve;

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;

use crate::leader::Leadership;
use crate::scheduler::Scheduler;
use crate::scheduler::metrics::{Metrics, PendingQueue};
use crate::supervise::Fatal;
use crate::watch::Readiness;

/// The scheduler the endpoints answer for, and its watches. A replica that lost its Lease
/// builds a new scheduler (fresh caches) and puts it here; `None` until the first is built.
#[derive(Clone, Default)]
pub struct Serving(Arc<std::sync::RwLock<Option<Served>>>);

/// A scheduler and the readiness of its watches.
type Served = (Arc<Scheduler>, Arc<Readiness>);

impl Serving {
    /// From now on the endpoints answer for `sched`, fed by the watches of `readiness`.
    pub fn set(&self, sched: Arc<Scheduler>, readiness: Arc<Readiness>) {
        *crate::locks::write(&self.0) = Some((sched, readiness));
    }

    /// The scheduler served now.
    pub fn sched(&self) -> Option<Arc<Scheduler>> {
        self.current().map(|(sched, _)| sched)
    }

    /// Its watches.
    pub fn readiness(&self) -> Option<Arc<Readiness>> {
        self.current().map(|(_, readiness)| readiness)
    }

    fn current(&self) -> Option<Served> {
        crate::locks::read(&self.0).clone()
    }
}

/// What the endpoints read.
#[derive(Clone)]
pub struct HttpState {
    pub metrics: Arc<Metrics>,
    pub fatal: Fatal,
    pub leadership: Leadership,
    pub serving: Serving,
    /// tether's own client: TokenReviews, SubjectAccessReviews, the pod to explain.
    pub client: kube::Client,
    /// How often `/explain` answers.
    pub explain_limit: Arc<explain::Limiter>,
}

/// `/metrics` and `/explain`.
pub fn main_router(state: HttpState) -> Router {
    Router::new()
        .route("/metrics", get(serve_metrics))
        .route("/explain/{namespace}/{name}", get(explain::explain))
        .route("/pending", get(pending::all))
        .route("/pending/{namespace}", get(pending::namespaced))
        .with_state(state)
}

/// `/healthz` and `/readyz`.
pub fn health_router(state: HttpState) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/readyz", get(ready))
        .with_state(state)
}

/// A refusal or failure as a Kubernetes `Status`, which kubectl and kube clients read.
pub fn failure(code: StatusCode, message: &str) -> Response {
    let body = serde_json::json!({
        "kind": "Status",
        "apiVersion": "v1",
        "status": "Failure",
        "message": message,
        "reason": code.canonical_reason().unwrap_or_default().replace(' ', ""),
        "code": code.as_u16(),
    });
    (code, axum::Json(body)).into_response()
}

/// How long a watch every decision needs (pods, nodes, namespaces, profiles) may stay stale
/// before `/healthz` turns red: past it, scheduling has stood still that long behind a watch
/// that does not recover, and a restart (with the alert it raises) is the remedy left.
pub const WATCH_STALE_UNHEALTHY: Duration = Duration::from_secs(300);

/// 200 while every part of the process runs and the watches scheduling needs are current
/// (or stale for less than [`WATCH_STALE_UNHEALTHY`]); 500 otherwise (a dead part stops the
/// process too).
async fn healthz(State(state): State<HttpState>) -> (StatusCode, String) {
    let stale = state
        .serving
        .readiness()
        .map(|r| r.stale_longer_than(WATCH_STALE_UNHEALTHY))
        .unwrap_or_default();
    health(state.fatal.is_healthy(), &stale)
}

/// `/healthz`'s answer.
fn health(parts_alive: bool, stale: &[(String, Duration)]) -> (StatusCode, String) {
    if !parts_alive {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            "a part of tether died".into(),
        );
    }
    if let Some((watch, for_)) = stale.first() {
        return (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!(
                "the {watch} watch has not been current for {}s; nothing is scheduled meanwhile",
                for_.as_secs()
            ),
        );
    }
    (StatusCode::OK, "ok".into())
}

async fn serve_metrics(
    State(state): State<HttpState>,
) -> ([(axum::http::HeaderName, &'static str); 1], String) {
    if let Some(readiness) = state.serving.readiness() {
        state.metrics.set_watches_current(&readiness.by_watch());
    }
    refresh_queue_metrics(&state);
    (
        [(
            axum::http::header::CONTENT_TYPE,
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        state.metrics.encode(),
    )
}

/// The queue's gauges as the queue is now: the leader's; a standby's are 0 (the pods pending
/// are the leader's to schedule, and a replica that stopped leading keeps no stale figures).
/// Also the cache's sizes. Read when scraped, never per scheduling cycle: counting the queue
/// walks every pending pod under its lock.
fn refresh_queue_metrics(state: &HttpState) {
    if let Some(sched) = state.serving.sched() {
        let cache = sched.lock_cache();
        let (nodes, pods, assumed) = (cache.node_count(), cache.pod_count(), cache.assumed_count());
        drop(cache);
        state.metrics.set_cache_size(nodes, pods, assumed);
    }
    let summary = state
        .serving
        .sched()
        .filter(|_| state.leadership.is_leading())
        .map(|sched| queue_summary(&sched))
        .unwrap_or_default();
    let now = std::time::Instant::now();
    let queues: Vec<PendingQueue<'_>> = summary
        .pools
        .iter()
        .map(|(queue, pods, oldest)| PendingQueue {
            queue,
            pods: *pods,
            oldest: oldest.map(|since| now.saturating_duration_since(since)),
        })
        .collect();
    state.metrics.set_queued_entities(&summary.entities);
    state.metrics.set_queue(
        &queues,
        summary
            .rejected_by
            .iter()
            .map(|(plugin, scheduler, pods)| (*plugin, scheduler.as_str(), *pods)),
    );
}

/// How often the queue is walked for its gauges at most, however often `/metrics` is read.
const QUEUE_SUMMARY_EVERY: Duration = Duration::from_secs(10);

/// The queue's summary, walked at most once every [`QUEUE_SUMMARY_EVERY`]: the walk holds the
/// queue's lock over every pending pod (100,000 of them in a large cluster), and whoever can
/// reach `/metrics` could otherwise make the scheduling loop wait on it as often as they like.
fn queue_summary(sched: &Arc<Scheduler>) -> crate::scheduler::backend::queue::Summary {
    type Walked = (
        std::time::Instant,
        usize,
        crate::scheduler::backend::queue::Summary,
    );
    static LAST: std::sync::Mutex<Option<Walked>> = std::sync::Mutex::new(None);
    let id = Arc::as_ptr(sched) as usize;
    let mut last = crate::locks::lock(&LAST);
    if let Some((at, of, summary)) = last.as_ref()
        && *of == id
        && at.elapsed() < QUEUE_SUMMARY_EVERY
    {
        return summary.clone();
    }
    let groups = sched.pod_groups.clone();
    let summary = sched.state.queue.summary_with(|namespace, name| {
        let key = crate::scheduler::informers::pod_groups::GroupKey {
            api: crate::scheduler::informers::pod_groups::GroupApi::Workload,
            namespace: namespace.to_string(),
            name: name.to_string(),
        };
        // A cycle in the hierarchy is an error the pods are told of, not a missing root.
        !matches!(groups.root_of(&key), Ok(None))
    });
    *last = Some((std::time::Instant::now(), id, summary.clone()));
    summary
}

async fn ready(State(state): State<HttpState>) -> (StatusCode, String) {
    let Some(readiness) = state.serving.readiness() else {
        return (StatusCode::SERVICE_UNAVAILABLE, "starting".to_string());
    };
    let summary = readiness.summary();
    if summary.listed_once == summary.registered {
        // A watch that some decision needs and that stays stale is loud: the replica is not
        // ready, naming the watch and why, instead of `ok` while pods wait.
        let stale = readiness.stale_loud(|_| true);
        if !stale.is_empty() {
            let said: Vec<String> = stale.iter().map(ToString::to_string).collect();
            return (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "{}; the pods that need it wait (their PodScheduled condition and their profile's WatchesCurrent condition say so)",
                    said.join("; ")
                ),
            );
        }
        let mut body = if summary.not_current.is_empty() {
            "ok".to_string()
        } else {
            format!("ok (not current: {})", summary.not_current.join(", "))
        };
        // A standby is ready too (its caches are warm); the body says which it is.
        if state.leadership.is_elected() {
            body.push_str(if state.leadership.is_leading() {
                "\nleading"
            } else {
                "\nstandby"
            });
            if let Some(why) = state.leadership.unreachable() {
                body.push_str(&format!(" ({why})"));
            }
        }
        (StatusCode::OK, body)
    } else {
        (
            StatusCode::SERVICE_UNAVAILABLE,
            format!(
                "caches not synced ({} of {} listed; waiting for {})",
                summary.listed_once,
                summary.registered,
                summary.not_current.join(", ")
            ),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn healthz_is_red_when_a_part_died_or_a_watch_scheduling_needs_stays_stale() {
        assert_eq!(health(true, &[]), (StatusCode::OK, "ok".to_string()));
        assert_eq!(health(false, &[]).0, StatusCode::INTERNAL_SERVER_ERROR);
        let (code, body) = health(true, &[("pods".into(), Duration::from_secs(301))]);
        assert_eq!(code, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(
            body,
            "the pods watch has not been current for 301s; nothing is scheduled meanwhile"
        );
    }
}
