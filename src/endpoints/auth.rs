//! Who may ask tether about a pod: the caller's bearer token is checked with a TokenReview for
//! the audience [`AUDIENCE`], and what the caller may do with a SubjectAccessReview, as
//! kube-scheduler's and the kubelet's delegated authentication and authorization do (tether
//! holds `system:auth-delegator` for this). A positive answer is taken again for
//! [`CACHE_TTL`] ([`AuthCache`]), as kube-apiserver's delegated authentication and
//! authorization cache theirs: a person (or a script) asking in a loop costs the API server
//! one review per 10 s, not one per question, while the API server binds pods. A refusal is
//! never cached: a grant works at once, and a revoked one within 10 s.
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
use sha2::{Digest, Sha256};
use std::collections::HashMap;
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How long a positive answer of a TokenReview or SubjectAccessReview is taken again.
pub const CACHE_TTL: Duration = Duration::from_secs(10);
/// Answers kept at most, of each kind: past it the expired ones go, and if none has, all.
const CACHE_ENTRIES: usize = 1024;

/// The positive answers of the API server's reviews, each for [`CACHE_TTL`]. Tokens are kept
/// as their SHA-256, never as themselves.
#[derive(Default)]
pub struct AuthCache {
    users: Mutex<HashMap<[u8; 32], (Instant, UserInfo)>>,
    allowed: Mutex<HashMap<String, Instant>>,
}

impl AuthCache {
    fn user(&self, token: &[u8; 32]) -> Option<UserInfo> {
        let users = crate::locks::lock(&self.users);
        let (at, user) = users.get(token)?;
        (at.elapsed() < CACHE_TTL).then(|| user.clone())
    }

    fn remember_user(&self, token: [u8; 32], user: &UserInfo) {
        let mut users = crate::locks::lock(&self.users);
        make_room(&mut users, |(at, _)| *at);
        users.insert(token, (Instant::now(), user.clone()));
    }

    fn is_allowed(&self, key: &str) -> bool {
        crate::locks::lock(&self.allowed)
            .get(key)
            .is_some_and(|at| at.elapsed() < CACHE_TTL)
    }

    fn remember_allowed(&self, key: String) {
        let mut allowed = crate::locks::lock(&self.allowed);
        make_room(&mut allowed, |at| *at);
        allowed.insert(key, Instant::now());
    }
}

/// Keeps `map` under [`CACHE_ENTRIES`]: the expired answers go, and if none had, all.
fn make_room<K, V>(map: &mut HashMap<K, V>, at: impl Fn(&V) -> Instant) {
    if map.len() < CACHE_ENTRIES {
        return;
    }
    map.retain(|_, v| at(v).elapsed() < CACHE_TTL);
    if map.len() >= CACHE_ENTRIES {
        map.clear();
    }
}

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
pub async fn authenticate(
    client: &kube::Client,
    cache: &AuthCache,
    headers: &HeaderMap,
) -> Result<UserInfo, Refusal> {
    let token = bearer(headers).ok_or(Refusal::NoToken)?;
    let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
    if let Some(user) = cache.user(&digest) {
        return Ok(user);
    }
    let user = review_token(client, token).await?;
    cache.remember_user(digest, &user);
    Ok(user)
}

/// Asks the API server who `token` is.
async fn review_token(client: &kube::Client, token: &str) -> Result<UserInfo, Refusal> {
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
    cache: &AuthCache,
    user: &UserInfo,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(), Refusal> {
    // Everything the review is asked about, each part told apart from the next.
    let key = serde_json::to_string(&(user, verb, resource, namespace, name))
        .map_err(|e| Refusal::Failed(format!("SubjectAccessReview: {e}")))?;
    if cache.is_allowed(&key) {
        return Ok(());
    }
    review_access(client, user, verb, resource, namespace, name).await?;
    cache.remember_allowed(key);
    Ok(())
}

/// Asks the API server whether `user` may `verb` the `resource` (`plural` of the core group, or
/// `plural.group`, each with `/subresource` after the plural where one is meant).
async fn review_access(
    client: &kube::Client,
    user: &UserInfo,
    verb: &str,
    resource: &str,
    namespace: Option<&str>,
    name: Option<&str>,
) -> Result<(), Refusal> {
    // `plural.group` for a resource outside the core group, `plural/subresource` for a
    // subresource.
    let (path, group) = match resource.split_once('.') {
        Some((path, group)) => (path, Some(group)),
        None => (resource, None),
    };
    let (plural, subresource) = match path.split_once('/') {
        Some((plural, sub)) => (plural, Some(sub)),
        None => (path, None),
    };
    let review = SubjectAccessReview {
        spec: SubjectAccessReviewSpec {
            user: user.username.clone(),
            groups: user.groups.clone(),
            uid: user.uid.clone(),
            extra: user.extra.clone(),
            resource_attributes: Some(ResourceAttributes {
                verb: Some(verb.to_string()),
                resource: Some(plural.to_string()),
                subresource: subresource.map(str::to_string),
                group: group.map(str::to_string),
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

    /// A stand-in API server that counts the reviews it answers: every token is `alice`, and
    /// she may do anything.
    fn counting_api() -> (kube::Client, std::sync::Arc<std::sync::atomic::AtomicUsize>) {
        use std::sync::atomic::Ordering;
        let reviews = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = reviews.clone();
        let client = crate::scheduler::testing::stand_in_client(move |_, path, _| {
            counted.fetch_add(1, Ordering::SeqCst);
            let body = if path.ends_with("/tokenreviews") {
                serde_json::json!({"apiVersion": "authentication.k8s.io/v1",
                    "kind": "TokenReview", "spec": {}, "status": {"authenticated": true,
                    "audiences": [AUDIENCE], "user": {"username": "alice"}}})
            } else {
                serde_json::json!({"apiVersion": "authorization.k8s.io/v1",
                    "kind": "SubjectAccessReview", "spec": {}, "status": {"allowed": true}})
            };
            (201, body)
        });
        (client, reviews)
    }

    /// A caller asking again within the TTL costs the API server nothing more; another token,
    /// or another question, is reviewed.
    #[tokio::test]
    async fn a_positive_answer_is_taken_again_within_its_ttl() {
        use std::sync::atomic::Ordering;
        let (client, reviews) = counting_api();
        let cache = AuthCache::default();
        let headers = |token: &str| {
            let mut h = HeaderMap::new();
            h.insert(
                axum::http::header::AUTHORIZATION,
                format!("Bearer {token}").parse().expect("header"),
            );
            h
        };
        for _ in 0..5 {
            let user = authenticate(&client, &cache, &headers("t1"))
                .await
                .expect("alice");
            authorize(&client, &cache, &user, "get", "pods", Some("a"), Some("p"))
                .await
                .expect("allowed");
        }
        assert_eq!(reviews.load(Ordering::SeqCst), 2, "one of each");
        let user = authenticate(&client, &cache, &headers("t2"))
            .await
            .expect("alice");
        authorize(&client, &cache, &user, "get", "pods", Some("b"), Some("p"))
            .await
            .expect("allowed");
        assert_eq!(
            reviews.load(Ordering::SeqCst),
            4,
            "another token, another question"
        );
    }
}
