//! The API client tether talks to the API server with: deadlines on every request, and a short,
//! bounded retry of answers that ask for one (429, 503, 504).
//!
//! kube's own default retries such answers up to 15 times with delays doubling from 5 ms to
//! 1000 s: a bind could wait minutes behind it in a storm of 429s, and a watch whose re-list met
//! a restarting API server's 503s came back seconds after the server did. tether retries each
//! request a few times within about a second and a half, then hands the error to the caller,
//! which backs off its own way (watches re-list, history writes retry, a failed bind requeues
//! its pod).

use std::time::Duration;

use anyhow::Context;
use kube::client::ClientBuilder;
use kube::client::retry::RetryPolicy;
use tower::buffer::BufferLayer;
use tower::retry::RetryLayer;

/// The first retry waits this long; each next one twice as long (with jitter), up to
/// [`RETRY_MAX_DELAY`].
const RETRY_FIRST_DELAY: Duration = Duration::from_millis(50);
const RETRY_MAX_DELAY: Duration = Duration::from_secs(1);
/// How many times one request is retried: delays of about 50, 100, 200, 400 and 800 ms.
const RETRIES: u32 = 5;
/// Requests waiting for the retrying layer (the client queues as many again in front of it).
const QUEUED_REQUESTS: usize = 1024;

/// A client for `config` with tether's timeouts and retry policy.
pub fn build(mut config: kube::Config) -> anyhow::Result<kube::Client> {
    // Every request has a deadline: a connection that went half-open is given up within a
    // minute (watch requests are renewed every 50 s, so a silent minute means a dead one).
    config.connect_timeout = Some(Duration::from_secs(10));
    config.read_timeout = Some(Duration::from_secs(60));
    config.write_timeout = Some(Duration::from_secs(30));
    config.reset_reader_on_write = true;
    config.default_retry = false;
    let policy = RetryPolicy::new(RETRY_FIRST_DELAY, RETRY_MAX_DELAY, RETRIES, true)
        .context("the API client's retry policy")?;
    let builder = ClientBuilder::try_from(config).context("connecting to the API server")?;
    // The retry layer clones the service it wraps; a buffer makes the boxed one clonable.
    Ok(builder
        .with_layer(&BufferLayer::new(QUEUED_REQUESTS))
        .with_layer(&RetryLayer::new(policy))
        .build())
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
}
