//! `GET /pending` and `GET /pending/{namespace}`: the leader's pending pods grouped by what
//! blocks them (`scheduler::explain::pending`), for a caller who may list the pods there
//! (across the cluster for `/pending`). Rationed with `/explain` (one walk of the queue costs
//! about what one explanation does at 100,000 pending pods).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};

use super::explain::{admit, valid_name};
use super::{HttpState, auth, failure};
use crate::scheduler::explain::pending;

/// The pending pods of every namespace.
pub async fn all(
    State(state): State<HttpState>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    answer(state, None, extensions, headers).await
}

/// The pending pods of one namespace.
pub async fn namespaced(
    State(state): State<HttpState>,
    Path(namespace): Path<String>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    if !valid_name(&namespace, false) {
        return failure(
            StatusCode::BAD_REQUEST,
            "the path must be /pending or /pending/<namespace>, a valid Kubernetes name",
        );
    }
    answer(state, Some(namespace), extensions, headers).await
}

async fn answer(
    state: HttpState,
    namespace: Option<String>,
    extensions: axum::http::Extensions,
    headers: HeaderMap,
) -> Response {
    let (_turn, caller) = match admit(&state, &extensions, &headers, "pending summaries").await {
        Ok(admitted) => admitted,
        Err(refusal) => return refusal,
    };
    match pending_for(
        &state.client,
        &state.explain_limit.auth,
        state.serving.sched(),
        &caller,
        namespace,
    )
    .await
    {
        Ok(summary) => Json(summary).into_response(),
        Err((status, message)) => failure(status, &message),
    }
}

/// The pending pods of `namespace` (every namespace for `None`) grouped by blocker, for `caller`,
/// who must be allowed to list the pods there: the work behind `/pending` and behind an
/// ExplainRequest without a pod ([`super::requests`]).
pub(crate) async fn pending_for(
    client: &kube::Client,
    cache: &auth::AuthCache,
    sched: Option<std::sync::Arc<crate::scheduler::Scheduler>>,
    caller: &k8s_openapi::api::authentication::v1::UserInfo,
    namespace: Option<String>,
) -> Result<pending::PendingSummary, (StatusCode, String)> {
    auth::authorize(
        client,
        cache,
        caller,
        "list",
        "pods",
        namespace.as_deref(),
        None,
    )
    .await
    .map_err(|refusal| (refusal.status(), refusal.to_string()))?;
    let Some(sched) = sched else {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            "the scheduler is starting".to_string(),
        ));
    };
    tracing::info!(
        namespace = namespace.as_deref().unwrap_or("(all)"),
        user = caller.username.as_deref().unwrap_or_default(),
        "summarizing the pending pods"
    );
    let walked = tokio::task::spawn_blocking(move || {
        let pods = sched.state.queue.pending(namespace.as_deref());
        pending::summarize(namespace, pods, std::time::Instant::now())
    })
    .await;
    walked.map_err(|e| {
        (
            StatusCode::INTERNAL_SERVER_ERROR,
            format!("reading the queue failed: {e}"),
        )
    })
}
