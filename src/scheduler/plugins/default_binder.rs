//! DefaultBinder: binds a pod through the `pods/binding` subresource, as kube-scheduler's
//! DefaultBinder does. The bind is the only API call tether makes per scheduled pod.

use std::sync::Arc;
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Binding, ObjectReference};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::k8s::api_errors::{maybe_applied, retryable};
use crate::k8s::pod::Pod;
use crate::scheduler::framework::validation::FieldErrors;
use crate::scheduler::framework::validation::FieldPath;
use crate::scheduler::framework::{BindPlugin, CycleState, Plugin, Status};
use crate::scheduler::plugins::handle::Handle;

pub const NAME: &str = "DefaultBinder";

/// Binds pods with the API client it was built with.
pub struct DefaultBinder {
    client: Option<kube::Client>,
}

/// DefaultBinder takes no args. Without a client (unit tests) every bind fails with an error.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let client = handle.client.clone();
    crate::scheduler::plugins::helper::expect_no_args(NAME, args, path)?;
    Ok(Arc::new(DefaultBinder { client }))
}

/// The Binding object for `pod` on `node`; it carries the pod's UID so that a pod deleted and
/// recreated under the same name in the meantime is never bound by mistake.
pub fn binding_for(pod: &Pod, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    }
}

impl BindPlugin for DefaultBinder {
    fn bind<'a>(
        &'a self,
        _state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(client) = self.client.clone() else {
                return Status::error("DefaultBinder has no API client");
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let body = binding_for(pod, node_name);
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            let mut delay = BIND_RETRY_INITIAL;
            let mut attempt = 1;
            loop {
                let error = match api
                    .create_subresource::<Binding, serde_json::Value>(
                        "binding",
                        &name,
                        &PostParams::default(),
                        &body,
                    )
                    .await
                {
                    Ok(_) => return Status::success(),
                    Err(e) => e,
                };
                let mut not_bound = !maybe_applied(&error);
                // No definite answer, or a conflict (the pod is bound, maybe by this very call).
                if maybe_applied(&error) || matches!(&error, kube::Error::Api(s) if s.code == 409) {
                    tracing::debug!(pod = %format!("{namespace}/{name}"), error = %error, "no definite answer to a bind; reading the pod back");
                    match read_back(&api, &name, pod.metadata.uid.as_deref()).await {
                        Some(Some(node)) if node == node_name => return Status::success(),
                        Some(Some(node)) => return Status::bound_elsewhere(&node),
                        Some(None) => not_bound = true,
                        None => {}
                    }
                }
                // 1.37's BindPod: a bind the API server failed (500, 503) or whose connection
                // it refused is made again, at most four times in all, 10 ms apart and five
                // times longer each time.
                if not_bound && bind_retriable(&error) && attempt < BIND_ATTEMPTS {
                    tracing::debug!(pod = %format!("{namespace}/{name}"), error = %error, attempt, "the bind failed; making it again");
                    tokio::time::sleep(jittered(delay)).await;
                    delay = delay.saturating_mul(5);
                    attempt += 1;
                    continue;
                }
                // The API server's own words, as upstream's DefaultBinder returns them.
                tracing::debug!(pod = %format!("{namespace}/{name}"), node = %node_name, error = %error, "the bind failed");
                return Status::error(crate::k8s::api_errors::message(&error));
            }
        })
    }
}

/// How many times a bind is made at most when the API server fails it (kube-scheduler 1.37's
/// `retry.DefaultBackoff`: 4 steps of 10 ms, factor 5, jitter 0.1).
const BIND_ATTEMPTS: u32 = 4;
const BIND_RETRY_INITIAL: Duration = Duration::from_millis(10);

/// `delay` with up to 10% more, as client-go's jitter.
fn jittered(delay: Duration) -> Duration {
    delay.mul_f64(rand::random_range(1.0..1.1))
}

/// Whether a failed bind is made again, as client-go's `Retriable`: an internal error (500),
/// service unavailable (503), or a refused connection.
fn bind_retriable(error: &kube::Error) -> bool {
    if let kube::Error::Api(s) = error {
        return s.code == 500 || s.code == 503;
    }
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.downcast_ref::<std::io::Error>()
            .is_some_and(|io| io.kind() == std::io::ErrorKind::ConnectionRefused)
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// How long a bind without a definite answer waits for the API server to say where the pod is.
/// Until then the pod keeps its place in the cache: the bind may well have happened.
const READ_BACK_PATIENCE: Duration = Duration::from_secs(600);

/// Where the pod `name` (with `uid`) is bound, read back after a bind without a definite
/// answer: `Some(Some(node))` bound, `Some(None)` not bound, None when the pod is gone (or
/// replaced) or the API server gave no answer within [`READ_BACK_PATIENCE`]. Reads that fail
/// without an answer are retried with backoff: calling the bind failed while it happened would
/// lose it from the workload's history.
async fn read_back(api: &Api<Pod>, name: &str, uid: Option<&str>) -> Option<Option<String>> {
    let give_up = tokio::time::Instant::now() + READ_BACK_PATIENCE;
    let mut wait = Duration::from_millis(250);
    loop {
        match api.get_opt(name).await {
            Ok(Some(now)) if now.metadata.uid.as_deref() == uid => {
                return Some(now.spec.and_then(|s| s.node_name));
            }
            Ok(_) => return None,
            Err(e) if retryable(&e) && tokio::time::Instant::now() + wait < give_up => {
                tracing::debug!(pod = %name, error = %e, retry_in = ?wait, "reading a pod back after a bind failed; retrying");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(5));
            }
            Err(e) => {
                tracing::warn!(pod = %name, error = %e, "could not learn whether a bind happened; the start-up reconcile counts it if it did");
                return None;
            }
        }
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
    fn bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn the_binding_names_the_pod_its_uid_and_the_node() {
        let pod = PodBuilder::new("web").namespace("shop").uid("u-1").build();
        let b = binding_for(&pod, "node-3");
        assert_eq!(b.metadata.name.as_deref(), Some("web"));
        assert_eq!(b.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(b.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(b.target.kind.as_deref(), Some("Node"));
        assert_eq!(b.target.name.as_deref(), Some("node-3"));
    }

    /// A stand-in API server whose bind call fails with `code` after (maybe) binding, and whose
    /// pod reads answer `bound_to`.
    fn binder(code: u16, bound_to: Option<&'static str>) -> DefaultBinder {
        let client = crate::scheduler::testing::stand_in_client(move |method, _path, _sent| {
            if method == "POST" {
                let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Failure", "reason": "InternalError", "code": code, "message": "lost"});
                return (code, status);
            }
            let mut pod = serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"}, "spec": {"containers": []}});
            if let Some(node) = bound_to {
                pod["spec"]["nodeName"] = node.into();
            }
            (200, pod)
        });
        DefaultBinder {
            client: Some(client),
        }
    }

    #[tokio::test]
    async fn a_bind_whose_answer_was_lost_is_decided_by_reading_the_pod_back() {
        let pod = PodBuilder::new("web").namespace("shop").uid("u-1").build();
        let state = CycleState::new();
        let bind = |b: DefaultBinder| {
            let pod = pod.clone();
            let state = &state;
            async move { BindPlugin::bind(&b, state, &pod, "node-3").await }
        };
        assert!(
            bind(binder(500, Some("node-3"))).await.is_success(),
            "it did bind"
        );
        let elsewhere = bind(binder(500, Some("node-1"))).await;
        assert_eq!(elsewhere.bound_elsewhere.as_deref(), Some("node-1"));
        let unbound = bind(binder(503, None)).await;
        assert!(
            !unbound.is_success() && unbound.bound_elsewhere.is_none(),
            "requeued"
        );
        let refused = bind(binder(403, Some("node-3"))).await;
        assert!(!refused.is_success(), "a definite refusal is not read back");
    }

    /// A bind the API server failed (500) and did not make is made again, as 1.37's BindPod,
    /// at most four times in all; a definite refusal (403) is not.
    #[tokio::test(start_paused = true)]
    async fn a_bind_the_api_server_failed_is_made_again_up_to_four_times() {
        for (fail, code, want_posts, want_success) in
            [(1, 500, 2, true), (10, 500, 4, false), (10, 403, 1, false)]
        {
            let posts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let seen = posts.clone();
            let client = crate::scheduler::testing::stand_in_client(move |method, _path, _sent| {
                if method == "POST" {
                    if seen.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < fail {
                        return (
                            code,
                            serde_json::json!({"kind": "Status", "apiVersion": "v1",
                                "status": "Failure", "reason": "InternalError", "code": code,
                                "message": "etcd timed out"}),
                        );
                    }
                    return (
                        201,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Success", "code": 201}),
                    );
                }
                // Not bound: the failed bind did not happen.
                (
                    200,
                    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
                        "spec": {"containers": []}}),
                )
            });
            let binder = DefaultBinder {
                client: Some(client),
            };
            let pod = PodBuilder::new("web").namespace("shop").uid("u-1").build();
            let status = BindPlugin::bind(&binder, &CycleState::new(), &pod, "node-3").await;
            assert_eq!(
                status.is_success(),
                want_success,
                "{fail} × {code}: {status:?}"
            );
            assert_eq!(
                posts.load(std::sync::atomic::Ordering::SeqCst),
                want_posts,
                "{fail} × {code}"
            );
        }
    }

    /// The reads after a lost bind answer 503 three times before the API server says the pod
    /// is bound where tether chose: the bind is a success, not a failure to requeue (which
    /// would lose it from history).
    #[tokio::test(start_paused = true)]
    async fn the_read_back_waits_for_an_answer() {
        let reads = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = reads.clone();
        let client = crate::scheduler::testing::stand_in_client(move |method, _path, _sent| {
            let status = |code: u16| {
                serde_json::json!({"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "reason": "ServiceUnavailable", "code": code, "message": "down"})
            };
            if method == "POST" {
                return (503, status(503));
            }
            if counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst) < 3 {
                return (500, status(500));
            }
            (
                200,
                serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                "metadata": {"name": "web", "namespace": "shop", "uid": "u-1"},
                "spec": {"containers": [], "nodeName": "node-3"}}),
            )
        });
        let binder = DefaultBinder {
            client: Some(client),
        };
        let pod = PodBuilder::new("web").namespace("shop").uid("u-1").build();
        let status = BindPlugin::bind(&binder, &CycleState::new(), &pod, "node-3").await;
        assert!(status.is_success(), "{status:?}");
        assert_eq!(reads.load(std::sync::atomic::Ordering::SeqCst), 4);
    }
}
