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

/// Whether the object is not there (404).
pub fn not_found(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e) if e.code == 404)
}

/// Whether the API server denied the request for now: 401 or 403, unless the namespace is
/// being deleted. A kube-apiserver that has just restarted denies requests until its authorizer
/// has caught up; a denial that lasts (RBAC taken away) keeps being retried, slowly, and logged.
pub fn denied_for_now(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e)
        if (e.code == 401 || e.code == 403) && !e.message.contains("is being terminated"))
}

/// Whether the API server refused the request for its size: 413 from kube-apiserver's own
/// limit, or etcd's "request is too large" (which reaches the client as a 500). Making it again
/// fails the same way, so it is never retried.
pub fn too_large(error: &kube::Error) -> bool {
    matches!(error, kube::Error::Api(e)
        if e.code == 413
            || (e.code >= 500 && e.message.contains("request is too large"))
            || e.message.contains("Request entity too large"))
}

/// Whether a failed request may succeed if made again: refused for now, denied for now, or
/// without a definite answer.
pub fn retryable(error: &kube::Error) -> bool {
    !too_large(error)
        && (conflict_or_throttled(error) || maybe_applied(error) || denied_for_now(error))
}

/// What the API server said, without the Status around it (or the client's error as it is).
pub fn message(error: &kube::Error) -> String {
    match error {
        kube::Error::Api(status) => status.message.clone(),
        other => other.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api(code: u16, message: &str) -> kube::Error {
        kube::Error::Api(
            kube::core::Status::failure(message, "Forbidden")
                .with_code(code)
                .boxed(),
        )
    }

    #[test]
    fn a_denial_is_retried_unless_the_namespace_is_going_away() {
        assert!(retryable(&api(
            403,
            "User \"tether\" cannot get resource \"stickybindings\""
        )));
        assert!(retryable(&api(401, "Unauthorized")));
        assert!(!retryable(&api(
            403,
            "unable to create new content in namespace shop because it is being terminated"
        )));
        assert!(!retryable(&api(404, "not found")));
        assert!(!retryable(&api(422, "invalid")));
        assert!(retryable(&api(409, "conflict")) && retryable(&api(429, "slow down")));
        assert!(retryable(&api(503, "unavailable")));
    }
}
