//! client-go's request metrics for tether's API client, with client-go's names, labels and
//! buckets, so that the dashboards and alerts written for Kubernetes components read tether's:
//!
//! - `rest_client_requests_total{code,method,host}`: every try of a request, as client-go counts
//!   them (a request retried after a 503 counts each answer); `code` is the HTTP status, or
//!   `<error>` when no answer came. A watch counts once, when the API server answers it, however
//!   many events it then streams.
//! - `rest_client_request_duration_seconds{verb,host}`: a request from its first try to the
//!   answer of its last (retries and their waits included), watches left out, as client-go
//!   times them.
//!
//! Two tower layers count them, one inside the client's retrying layer ([`CountTries`]) and one
//! outside it ([`TimeRequests`]); [`RequestMetrics`] holds the families the process registers.
//! A count is a lookup and an atomic increment: nothing on the bind's path waits on it.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Instant;

use http::{Request, Response};
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::histogram::Histogram;
use tower::{Layer, Service};

/// The labels of `tether_watch_objects_skipped_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SkippedLabels {
    /// The watch, as its log lines name it (`pods`, `resourceclaims`, `Deployment owners`…).
    pub resource: String,
}

/// `tether_watch_objects_skipped_total`: objects of a watch that could not be read and were
/// skipped, by watch. One family for the process (watches start in many places); the metrics
/// registry registers it ([`skipped_objects`]). It lives with the client's metrics: the
/// metrics layer may not reach up to the watches.
pub static SKIPPED: std::sync::LazyLock<Family<SkippedLabels, Counter>> =
    std::sync::LazyLock::new(Family::default);

/// The family behind `tether_watch_objects_skipped_total`, for the metrics registry.
pub fn skipped_objects() -> Family<SkippedLabels, Counter> {
    SKIPPED.clone()
}

/// client-go's latency buckets (component-base's restclient metrics), in seconds.
const LATENCY_BUCKETS: [f64; 12] = [
    0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 15.0, 30.0, 60.0,
];

/// The labels of `rest_client_requests_total`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RequestLabels {
    /// The HTTP status code, or `<error>` when the try got no answer.
    pub code: String,
    /// The HTTP method (`GET`, `POST`, `PATCH`…).
    pub method: String,
    /// The API server's host and port, as the client's URL names it.
    pub host: String,
}

/// The labels of `rest_client_request_duration_seconds`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LatencyLabels {
    /// The HTTP method, as client-go's `verb`.
    pub verb: String,
    pub host: String,
}

fn latency_histogram() -> Histogram {
    Histogram::new(LATENCY_BUCKETS)
}

/// The two families; clones share them.
#[derive(Clone, Debug)]
pub struct RequestMetrics {
    pub requests: Family<RequestLabels, Counter>,
    pub latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
}

impl Default for RequestMetrics {
    fn default() -> Self {
        RequestMetrics {
            requests: Family::default(),
            latency: Family::new_with_constructor(latency_histogram as fn() -> Histogram),
        }
    }
}

impl RequestMetrics {
    /// The layer that counts every try; it goes inside the retrying layer.
    pub fn count_tries(&self, host: &str) -> CountTries {
        CountTries {
            requests: self.requests.clone(),
            host: host.to_string(),
        }
    }

    /// The layer that times whole requests; it goes outside the retrying layer.
    pub fn time_requests(&self, host: &str) -> TimeRequests {
        TimeRequests {
            latency: self.latency.clone(),
            host: host.to_string(),
        }
    }
}

/// The `host` label of a client for `url`: its host and port (client-go's `URL.Host`), or
/// `none` when the URL has none.
pub fn host_label(url: &http::Uri) -> String {
    match (url.host(), url.port_u16()) {
        (Some(host), Some(port)) => format!("{host}:{port}"),
        (Some(host), None) => host.to_string(),
        (None, _) => "none".to_string(),
    }
}

/// Whether a request is a watch (`watch=true` or `watch=1` in its query).
fn is_watch(uri: &http::Uri) -> bool {
    uri.query().is_some_and(|query| {
        query
            .split('&')
            .any(|pair| pair == "watch=true" || pair == "watch=1")
    })
}

type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

/// Counts every try in `rest_client_requests_total`.
#[derive(Clone, Debug)]
pub struct CountTries {
    requests: Family<RequestLabels, Counter>,
    host: String,
}

impl<S> Layer<S> for CountTries {
    type Service = Counted<S>;

    fn layer(&self, inner: S) -> Counted<S> {
        Counted {
            inner,
            requests: self.requests.clone(),
            host: self.host.clone(),
        }
    }
}

/// The service [`CountTries`] makes.
#[derive(Clone, Debug)]
pub struct Counted<S> {
    inner: S,
    requests: Family<RequestLabels, Counter>,
    host: String,
}

impl<S, B, R> Service<Request<B>> for Counted<S>
where
    S: Service<Request<B>, Response = Response<R>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<Response<R>, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let method = req.method().as_str().to_string();
        let answer = self.inner.call(req);
        let (requests, host) = (self.requests.clone(), self.host.clone());
        Box::pin(async move {
            let result = answer.await;
            let code = match &result {
                Ok(response) => response.status().as_str().to_string(),
                Err(_) => "<error>".to_string(),
            };
            requests
                .get_or_create(&RequestLabels { code, method, host })
                .inc();
            result
        })
    }
}

/// Times whole requests (watches left out) in `rest_client_request_duration_seconds`.
#[derive(Clone, Debug)]
pub struct TimeRequests {
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    host: String,
}

impl<S> Layer<S> for TimeRequests {
    type Service = Timed<S>;

    fn layer(&self, inner: S) -> Timed<S> {
        Timed {
            inner,
            latency: self.latency.clone(),
            host: self.host.clone(),
        }
    }
}

/// The service [`TimeRequests`] makes.
#[derive(Clone, Debug)]
pub struct Timed<S> {
    inner: S,
    latency: Family<LatencyLabels, Histogram, fn() -> Histogram>,
    host: String,
}

impl<S, B> Service<Request<B>> for Timed<S>
where
    S: Service<Request<B>>,
    S::Future: Send + 'static,
{
    type Response = S::Response;
    type Error = S::Error;
    type Future = BoxFuture<Result<S::Response, S::Error>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.inner.poll_ready(cx)
    }

    fn call(&mut self, req: Request<B>) -> Self::Future {
        let timed = (!is_watch(req.uri())).then(|| LatencyLabels {
            verb: req.method().as_str().to_string(),
            host: self.host.clone(),
        });
        let answer = self.inner.call(req);
        let latency = self.latency.clone();
        Box::pin(async move {
            let started = Instant::now();
            let result = answer.await;
            if let Some(labels) = timed {
                latency
                    .get_or_create(&labels)
                    .observe(started.elapsed().as_secs_f64());
            }
            result
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_host_label_is_host_and_port_as_client_go_writes_it() {
        let host = |url: &str| host_label(&url.parse().expect("a url"));
        assert_eq!(host("https://10.96.0.1:443"), "10.96.0.1:443");
        assert_eq!(
            host("https://kubernetes.default.svc"),
            "kubernetes.default.svc"
        );
        assert_eq!(host("https://[::1]:6443/"), "[::1]:6443");
        assert_eq!(host("/api"), "none");
    }

    #[test]
    fn a_watch_is_told_by_its_query() {
        let watch = |uri: &str| is_watch(&uri.parse().expect("a uri"));
        assert!(watch("/api/v1/pods?watch=true&resourceVersion=1"));
        assert!(watch("/api/v1/pods?allowWatchBookmarks=true&watch=1"));
        assert!(!watch("/api/v1/pods?limit=500"));
        assert!(!watch("/api/v1/namespaces/watch/pods"));
        assert!(!watch("/api/v1/pods?watchy=true"));
    }
}
