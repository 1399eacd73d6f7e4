//! The API client tether talks to the API server with: deadlines on every request, and a short,
//! bounded retry of answers that ask for one (429, 503, 504).
//!
//! kube's own default retries such answers up to 15 times with delays doubling from 5 ms to
//! 1000 s: a bind could wait minutes behind it in a storm of 429s, and a watch whose re-list met
//! a restarting API server's 503s came back seconds after the server did. tether retries each
//! request a few times within about a second and a half, then hands the error to the caller,
//! which backs off its own way (watches re-list, history writes retry, a failed bind requeues
//! its pod).
//!
//! A server's `Retry-After` is honoured up to [`RETRY_MAX_DELAY`]. A restarted kube-apiserver
//! answers requests for custom resources 503 with `Retry-After: 5` until it has installed their
//! paths, which takes it well under a second: waiting the full five seconds kept the
//! SchedulingProfile and StickyBinding watches down that long after the server was back.

use std::time::Duration;

use anyhow::Context;
use http::{HeaderMap, Request, Response};
use kube::client::retry::RetryPolicy;
use kube::client::{Body, ClientBuilder};
use tokio::time::{Instant, Sleep};
use tower::BoxError;
use tower::buffer::BufferLayer;
use tower::retry::{Policy, RetryLayer};

use super::client_metrics::{RequestMetrics, host_label};

/// The first retry waits this long; each next one twice as long (with jitter), up to
/// [`RETRY_MAX_DELAY`].
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(50);
const RETRY_MAX_DELAY: Duration = Duration::from_secs(1);
/// How many times one request is retried: delays of about 50, 100, 200, 400 and 800 ms.
const RETRIES: u32 = 5;
/// Requests waiting for the retrying layer (the client queues as many again in front of it).
const QUEUED_REQUESTS: usize = 1024;

/// A client for `config` with tether's timeouts and retry policy.
pub fn build(config: kube::Config) -> anyhow::Result<kube::Client> {
    build_with(config, None)
}

/// [`build`], counting its requests in `metrics` (client-go's `rest_client_*`; see
/// [`super::client_metrics`]).
pub fn build_counted(
    config: kube::Config,
    metrics: &RequestMetrics,
) -> anyhow::Result<kube::Client> {
    build_with(config, Some(metrics))
}

fn build_with(
    mut config: kube::Config,
    metrics: Option<&RequestMetrics>,
) -> anyhow::Result<kube::Client> {
    // Every request has a deadline: a connection that went half-open is given up within a
    // minute (watch requests are renewed every 50 s, so a silent minute means a dead one).
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(60));
    config.write_timeout = Some(Duration::from_secs(30));
    config.reset_reader_on_write = true;
    config.default_retry = false;
    let policy = CappedRetry::new()?;
    let host = host_label(&config.cluster_url);
    let builder = ClientBuilder::try_from(config).context("connecting to the API server")?;
    // The retry layer clones the service it wraps; a buffer makes the boxed one clonable.
    // Counted, each try is counted inside the retries and each request timed outside them.
    Ok(match metrics {
        None => builder
            .with_layer(&BufferLayer::new(QUEUED_REQUESTS))
            .with_layer(&RetryLayer::new(policy))
            .build(),
        Some(metrics) => builder
            .with_layer(&metrics.count_tries(&host))
            .with_layer(&BufferLayer::new(QUEUED_REQUESTS))
            .with_layer(&RetryLayer::new(policy))
            .with_layer(&metrics.time_requests(&host))
            .build(),
    })
}

/// kube's retry policy (429, 503 and 504; jittered exponential backoff) with the server's
/// `Retry-After` waited at most [`RETRY_MAX_DELAY`].
#[derive(Clone)]
struct CappedRetry {
    /// Ignores `Retry-After`; this policy applies it.
    backoff: RetryPolicy,
}

impl CappedRetry {
    fn new() -> anyhow::Result<Self> {
        let backoff = RetryPolicy::new(RETRY_FIRST_DELAY, RETRY_MAX_DELAY, RETRIES, false)
            .context("the API client's retry policy")?;
        Ok(CappedRetry { backoff })
    }
}

impl<Res> Policy<Request<Body>, Response<Res>, BoxError> for CappedRetry {
    type Future = Sleep;

    fn retry(
        &mut self,
        req: &mut Request<Body>,
        result: &mut Result<Response<Res>, BoxError>,
    ) -> Option<Sleep> {
        let answer = result
            .as_ref()
            .ok()
            .map(|response| (response.status(), retry_after(response.headers())));
        let backoff = self.backoff.retry(req, result)?;
        let asked = answer.and_then(|(_, asked)| asked);
        if let Some((status, _)) = answer {
            tracing::debug!(path = req.uri().path(), %status, retry_after = ?asked, "retrying a request the API server asked to retry");
        }
        match asked {
            Some(asked) => {
                let asked = asked.min(RETRY_MAX_DELAY);
                let until = Instant::now() + asked;
                Some(if until > backoff.deadline() {
                    tokio::time::sleep_until(until)
                } else {
                    backoff
                })
            }
            None => Some(backoff),
        }
    }

    fn clone_request(&mut self, req: &Request<Body>) -> Option<Request<Body>> {
        Policy::<Request<Body>, Response<Res>, BoxError>::clone_request(&mut self.backoff, req)
    }
}

/// The delay a `Retry-After` header asks for, in seconds as the API server writes it.
fn retry_after(headers: &HeaderMap) -> Option<Duration> {
    let seconds = headers.get(http::header::RETRY_AFTER)?.to_str().ok()?;
    seconds.trim().parse().ok().map(Duration::from_secs)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;

    /// An API server that answers every request 503: the client tries a request six times
    /// (the first and five retries), then hands the 503 to the caller.
    #[tokio::test]
    async fn a_503_is_retried_five_times_then_returned() {
        let tries = Arc::new(AtomicUsize::new(0));
        let counted = tries.clone();
        let app = axum::Router::new().fallback(move || {
            counted.fetch_add(1, Ordering::SeqCst);
            async { (axum::http::StatusCode::SERVICE_UNAVAILABLE, "busy") }
        });
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let url = format!("http://{}", listener.local_addr().expect("an address"));
        tokio::spawn(async move { axum::serve(listener, app).await });

        let client = build(kube::Config::new(url.parse().expect("a url"))).expect("a client");
        let answer = client.apiserver_version().await;

        assert!(answer.is_err(), "the 503 reaches the caller");
        assert_eq!(tries.load(Ordering::SeqCst), 1 + RETRIES as usize);
    }

    /// Counted, a request the API server answers 503 every time is six tries of one request:
    /// six `rest_client_requests_total` with its code and one latency, retries included; a
    /// watch is one try and no latency, as client-go counts them.
    #[tokio::test]
    async fn a_counted_client_counts_every_try_and_times_each_request_once() {
        let app = axum::Router::new()
            .route(
                "/version",
                axum::routing::get(|| async {
                    (axum::http::StatusCode::SERVICE_UNAVAILABLE, "busy")
                }),
            )
            .route("/api/v1/pods", axum::routing::get(|| async { "" }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port");
        let addr = listener.local_addr().expect("an address");
        tokio::spawn(async move { axum::serve(listener, app).await });
        let metrics = RequestMetrics::default();
        let config = kube::Config::new(format!("http://{addr}").parse().expect("a url"));
        let client = build_counted(config, &metrics).expect("a client");

        assert!(client.apiserver_version().await.is_err());
        let watch = Request::get("/api/v1/pods?watch=true&resourceVersion=0")
            .body(Vec::new())
            .expect("a request");
        client
            .request_text(watch)
            .await
            .expect("the watch answered");

        let mut registry = prometheus_client::registry::Registry::default();
        registry.register("rest_client_requests", "", metrics.requests.clone());
        registry.register(
            "rest_client_request_duration_seconds",
            "",
            metrics.latency.clone(),
        );
        let mut text = String::new();
        prometheus_client::encoding::text::encode(&mut text, &registry).expect("encoded");
        for line in [
            format!(r#"rest_client_requests_total{{code="503",method="GET",host="{addr}"}} 6"#),
            format!(r#"rest_client_requests_total{{code="200",method="GET",host="{addr}"}} 1"#),
            format!(r#"rest_client_request_duration_seconds_count{{verb="GET",host="{addr}"}} 1"#),
            format!(
                r#"rest_client_request_duration_seconds_bucket{{le="0.005",verb="GET",host="{addr}"}} 0"#
            ),
        ] {
            assert!(text.lines().any(|l| l == line), "{line} in:\n{text}");
        }
    }

    /// A restarting API server's `Retry-After: 5` is waited one second at most, and longer
    /// than the backoff alone would wait.
    #[tokio::test]
    async fn retry_after_is_honoured_up_to_the_longest_delay() {
        let answer = |retry_after: &str| {
            Response::builder()
                .status(503)
                .header("Retry-After", retry_after)
                .body(())
                .expect("a response")
        };
        let mut policy = CappedRetry::new().expect("a policy");
        let mut request = Request::new(Body::from(Vec::new()));

        let mut result: Result<_, BoxError> = Ok(answer("5"));
        let wait = policy.retry(&mut request, &mut result).expect("retried");
        let waits = wait.deadline() - Instant::now();
        assert!(waits <= RETRY_MAX_DELAY, "waits {waits:?}");
        assert!(waits > RETRY_MAX_DELAY / 2, "waits {waits:?}");

        // Without an ask, the backoff's own delay (the second: about 100 ms).
        let mut result: Result<_, BoxError> = Ok(answer("0"));
        let wait = policy.retry(&mut request, &mut result).expect("retried");
        assert!(wait.deadline() - Instant::now() < RETRY_MAX_DELAY / 2);
    }
}
