//! What a failed API call tells about the request: whether it may have been applied anyway,
//! and whether making it again may succeed. The history writer and the binder decide their
//! retries and read-backs from these.

/// Whether the API server may have applied a request whose call failed: no answer came (a
/// timeout, a broken connection) or the server failed while handling it.
pub fn maybe_applied(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(e) => e.code >= 500,
        kube::Error::SerdeError(_) | kube::Error::BuildRequest(_) => false,
        _ => true,
    }
}

/// Whether the API server refused the request for now: a conflict with a newer version, or
/// throttling.
pub fn conflict_or_throttled(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 409 || e.code == 429)
}

/// Whether a failed request may succeed if made again: refused for now, or without a definite
/// answer.
pub fn retryable(error: &kube::Error) -> bool {
    conflict_or_throttled(error) || maybe_applied(error)
}
