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
    if let Err(refusal) = auth::authorize(
        &state.client,
        &state.explain_limit.auth,
        &caller,
        "list",
        "pods",
        namespace.as_deref(),
        None,
    )
    .await
    {
        return failure(refusal.status(), &refusal.to_string());
    }
    let Some(sched) = state.serving.sched() else {
        return failure(StatusCode::SERVICE_UNAVAILABLE, "the scheduler is starting");
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
    match walked {
        Ok(summary) => Json(summary).into_response(),
        Err(e) => failure(
            StatusCode::INTERNAL_SERVER_ERROR,
            &format!("reading the queue failed: {e}"),
        ),
    }
}
