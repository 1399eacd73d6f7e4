//! `GET /explain/{namespace}/{name}`: the leader re-runs the pod's profile on its current
//! snapshot, dry (`scheduler::explain`), for a caller who may get the pod and list the nodes
//! (the answer names every node, its taints and what is requested on it). Requests are
//! limited to [`PER_SECOND`] (each costs a TokenReview and a cycle over every node).

use std::sync::Arc;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;

use super::auth;
use super::{HttpState, failure};
use crate::k8s::pods;
use crate::scheduler::Scheduler;
use crate::scheduler::explain::{self, Explanation};

/// Explanations answered per second at most (with a burst of as many); past that, 429.
pub const PER_SECOND: u32 = 5;

/// The limiter of the explain endpoint.
pub type Limiter = governor::DefaultDirectRateLimiter;

/// A limiter of [`PER_SECOND`].
pub fn limiter() -> Arc<Limiter> {
    let rate = std::num::NonZeroU32::new(PER_SECOND).unwrap_or(std::num::NonZeroU32::MIN);
    Arc::new(governor::RateLimiter::direct(governor::Quota::per_second(
        rate,
    )))
}

pub async fn explain(
    State(state): State<HttpState>,
    Path((namespace, name)): Path<(String, String)>,
    headers: HeaderMap,
) -> Response {
    if state.explain_limit.check().is_err() {
        return failure(
            StatusCode::TOO_MANY_REQUESTS,
            &format!("more than {PER_SECOND} explanations a second were asked for: try again"),
        );
    }
    if state.leadership.is_elected() && !state.leadership.is_leading() {
        return failure(
            StatusCode::SERVICE_UNAVAILABLE,
            "this replica is a standby: ask the leader (the holder of the tether Lease)",
        );
    }
    let caller = match auth::authenticate(&state.client, &headers).await {
        Ok(user) => user,
        Err(refusal) => return failure(refusal.status(), &refusal.to_string()),
    };
    for (verb, resource, ns, object) in [
        ("get", "pods", Some(namespace.as_str()), Some(name.as_str())),
        ("list", "nodes", None, None),
    ] {
        if let Err(refusal) =
            auth::authorize(&state.client, &caller, verb, resource, ns, object).await
        {
            return failure(refusal.status(), &refusal.to_string());
        }
    }
    let pods: Api<Pod> = Api::namespaced(state.client.clone(), &namespace);
    let pod = match pods.get_opt(&name).await {
        Ok(Some(pod)) => pod,
        Ok(None) => {
            return failure(
                StatusCode::NOT_FOUND,
                &format!("pod {namespace}/{name} not found"),
            );
        }
        Err(e) => {
            return failure(
                StatusCode::BAD_GATEWAY,
                &format!("reading pod {namespace}/{name}: {e}"),
            );
        }
    };
    tracing::info!(pod = %format!("{namespace}/{name}"), user = caller.username.as_deref().unwrap_or_default(), "explaining a pod");
    let Some(sched) = state.serving.sched() else {
        return failure(StatusCode::SERVICE_UNAVAILABLE, "the scheduler is starting");
    };
    match tokio::task::spawn_blocking(move || explain_now(&sched, pod)).await {
        Ok(Ok(explanation)) => Json(explanation).into_response(),
        Ok(Err(message)) => failure(StatusCode::UNPROCESSABLE_ENTITY, &message),
        Err(e) => failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("explaining failed: {e}"),
        ),
    }
}

/// The explanation of `pod` on the scheduler's snapshot now, with the profile that serves it.
fn explain_now(sched: &Arc<Scheduler>, mut pod: Pod) -> Result<Explanation, String> {
    let scheduler_name = pods::scheduler_name(&pod).to_string();
    let Some(profile) = sched.profiles.get(&scheduler_name) else {
        return Err(format!(
            "no SchedulingProfile of this tether serves schedulerName {scheduler_name:?}"
        ));
    };
    let snapshot = {
        let mut cache = sched.lock_cache();
        // Assumed but not bound yet: explained as bound to the node it is assumed on.
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let unbound = pod.spec.as_ref().is_none_or(|s| s.node_name.is_none());
        if unbound && let Some(node) = cache.pod_node(&uid).map(str::to_string) {
            pod.spec.get_or_insert_default().node_name = Some(node);
        }
        cache.snapshot()
    };
    let nominated = crate::scheduler::backend::holds::WithHolds {
        nominated: &sched.nominator,
        holds: &sched.holds,
        own: profile.holds_key(&pod),
    };
    let mut explanation = explain::explain_pod(&profile, &pod, &snapshot, &nominated);
    let own = profile.holds_key(&pod);
    explanation.held = sched
        .holds
        .active()
        .into_iter()
        .filter(|(key, _)| Some(key) != own.as_ref())
        .map(|(_, hold)| explain::HeldRoom {
            workload: hold.workload,
            node: hold.node,
            until: hold.until_wall.to_string(),
            requests: explain::held_requests(&hold.pod),
        })
        .collect();
    Ok(explanation)
}
