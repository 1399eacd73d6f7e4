//! Who may ask tether about a pod: the caller's bearer token is checked with a TokenReview for
//! the audience [`AUDIENCE`], and what the caller may do with a SubjectAccessReview, as
//! kube-scheduler's and the kubelet's delegated authentication and authorization do (tether
//! holds `system:auth-delegator` for this). Nothing is cached: these endpoints are for people,
//! not for hot paths.
//!
//! Only a token bound to tether's audience is taken (`kubectl create token <serviceaccount>
//! --audience tether`): no credential that works against the API server is ever handed to
//! tether, so a tether (or anything listening at its address) that reads a token can replay it
//! nowhere else. A token for the API server's own audience is refused.

use axum::http::{HeaderMap, StatusCode};
use k8s_openapi::api::authentication::v1::{TokenReview, TokenReviewSpec, UserInfo};
use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SubjectAccessReview, SubjectAccessReviewSpec,
};
use kube::api::{Api, PostParams};

/// Why a request is refused, with the HTTP status it answers with.
#[derive(Debug, thiserror::Error)]
pub enum Refusal {
    #[error(
        "no bearer token: send a token bound to the audience \"tether\" (kubectl create token <serviceaccount> --audience tether) in the Authorization header (tether explain reads it from --token-file or TETHER_TOKEN_FILE)"
    )]
    NoToken,
    #[error("the bearer token was not accepted by the API server's TokenReview{0}")]
    BadToken(String),
    #[error("{0}")]
    Forbidden(String),
    #[error("could not check the caller with the API server: {0}")]
    Failed(String),
}

impl Refusal {
    pub fn status(&self) -> StatusCode {
        match self {
            Refusal::NoToken | Refusal::BadToken(_) => StatusCode::UNAUTHORIZED,
            Refusal::Forbidden(_) => StatusCode::FORBIDDEN,
            Refusal::Failed(_) => StatusCode::BAD_GATEWAY,
        }
    }
}

/// The audience a token must be bound to.
pub const AUDIENCE: &str = "tether";

/// The bearer token of the request.
fn bearer(headers: &HeaderMap) -> Option<&str> {
    let value = headers
        .get(axum::http::header::AUTHORIZATION)?
        .to_str()
        .ok()?;
    let (scheme, token) = value.split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Who sent the request, as the API server's TokenReview tells.
pub async fn authenticate(client: &kube::Client, headers: &HeaderMap) -> Result<UserInfo, Refusal> {
    let token = bearer(headers).ok_or(Refusal::NoToken)?;
    let review = TokenReview {
        spec: TokenReviewSpec {
            token: token.to_string(),
            audiences: Some(vec![AUDIENCE.to_string()]),
        },
        ..Default::default()
    };
    let answered = Api::<TokenReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| Refusal::Failed(format!("TokenReview: {e}")))?;
    let status = answered.status.unwrap_or_default();
    // An authenticator that does not check audiences answers with none: the token is then
    // one for the API server, and not taken.
    let for_tether = status
        .audiences
        .as_ref()
        .is_some_and(|a| a.iter().any(|a| a == AUDIENCE));
    match (status.authenticated, status.user) {
        (Some(true), Some(_)) if !for_tether => Err(Refusal::BadToken(format!(
            ": it is not bound to the audience \"{AUDIENCE}\" (create one with kubectl create token <serviceaccount> --audience {AUDIENCE})"
        ))),
        (Some(true), Some(user)) => Ok(user),
        _ => Err(Refusal::BadToken(
            status
                .error
                .filter(|e| !e.is_empty())
                .map(|e| format!(": {e}"))
                .unwrap_or_default(),
        )),
    }
}

/// Whether `user` may `verb` the `resource` named `name` in `namespace`, as the API server's
/// SubjectAccessReview tells.
pub async fn authorize(
    client: &kube::Client,
    user: &UserInfo,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(), Refusal> {
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_string()),
                resource: Some(resource.to_string()),
                namespace: namespace.map(str::to_string),
                name: name.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        },
        ..Default::default()
    };
    let answered = Api::<SubjectAccessReview>::all(client.clone())
        .create(&PostParams::default(), &review)
        .await
        .map_err(|e| Refusal::Failed(format!("SubjectAccessReview: {e}")))?;
    let status = answered.status.unwrap_or_default();
    if status.allowed {
        return Ok(());
    }
    let who = user.username.as_deref().unwrap_or("the caller");
    let what = match (namespace, name) {
        (Some(ns), Some(n)) => format!("{resource} {ns}/{n}"),
        (Some(ns), None) => format!("{resource} in {ns}"),
        (None, Some(n)) => format!("{resource} {n}"),
        (None, None) => resource.to_string(),
    };
    let why = status
        .reason
        .filter(|r| !r.is_empty())
        .map(|r| format!(": {r}"))
        .unwrap_or_default();
    Err(Refusal::Forbidden(format!(
        "{who} may not {verb} {what}{why}"
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_token_is_taken() {
        let with = |value: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                axum::http::header::AUTHORIZATION,
                value.parse().expect("header"),
            );
            h
        };
        assert_eq!(bearer(&with("Bearer abc")), Some("abc"));
        assert_eq!(bearer(&with("bearer abc ")), Some("abc"));
        assert_eq!(bearer(&with("Basic abc")), None);
        assert_eq!(bearer(&with("Bearer ")), None);
        assert_eq!(bearer(&HeaderMap::new()), None);
    }
}
