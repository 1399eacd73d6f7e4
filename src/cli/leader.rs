//! Reaching the leader without a hand-made port-forward: its Lease names the leading replica
//! (the pod name is its identity), and the API server forwards a connection to that pod's port
//! (`pods/portforward`, as `kubectl port-forward` does), over which one HTTP/1 request is sent.
//! The caller's kubeconfig is used for these API calls only; what reaches tether is the token
//! bound to its audience.

use k8s_openapi::api::core::v1::Pod;

use std::time::Duration;

use anyhow::Context;
use http_body_util::BodyExt;
use k8s_openapi::api::coordination::v1::Lease;
use kube::api::Api;

/// The port of tether's `--http-addr` in its pod when no container port is named `http`.
pub const DEFAULT_PORT: u16 = 8080;

/// How long one request through the forward may take, connection included: an explanation
/// runs a cycle over every node, which takes well under a second on 5,000 nodes.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(60);

/// How long to wait for the kubelet's word on a forward that closed without an answer.
const ERROR_WAIT: Duration = Duration::from_secs(2);

/// The leading replica's pod and the port of its `--http-addr`.
#[derive(Debug)]
pub struct Leader {
    pods: Api<Pod>,
    /// The pod, as namespace/name (for messages).
    pub pod: String,
    name: String,
    pub port: u16,
    /// When the holder last renewed the Lease, as the Lease says (for messages).
    renewed: Option<String>,
}

/// Splits `namespace/name`.
fn lease_name(lease: &str) -> anyhow::Result<(&str, &str)> {
    lease
        .split_once('/')
        .filter(|(ns, name)| !ns.is_empty() && !name.is_empty() && !name.contains('/'))
        .with_context(|| format!("--leader-lease {lease:?} is not namespace/name"))
}

/// The port named `http` among the pod's containers' ports.
fn http_port(pod: &Pod) -> Option<u16> {
    pod.spec
        .as_ref()?
        .containers
        .iter()
        .flat_map(|c| c.ports.iter().flatten())
        .find(|p| p.name.as_deref() == Some("http"))
        .and_then(|p| u16::try_from(p.container_port).ok())
}

/// Finds the leader: the holder of `lease` (namespace/name), a pod in the Lease's namespace,
/// and its port `port`, or else its container port named `http`, or else [`DEFAULT_PORT`].
pub async fn find(client: &kube::Client, lease: &str, port: Option<u16>) -> anyhow::Result<Leader> {
    let (namespace, name) = lease_name(lease)?;
    let record = Api::<Lease>::namespaced(client.clone(), namespace)
        .get_opt(name)
        .await
        .with_context(|| format!("reading the Lease {namespace}/{name} (who leads)"))?
        .with_context(|| {
            format!(
                "there is no Lease {namespace}/{name}: tether runs elsewhere (--leader-lease), or without --leader-elect (then pass --endpoint)"
            )
        })?;
    let spec = record.spec.unwrap_or_default();
    let holder = spec
        .holder_identity
        .filter(|h| !h.is_empty())
        .with_context(|| {
            format!(
                "no replica of tether holds the Lease {namespace}/{name} now: none leads (is one starting, or all stopped?)"
            )
        })?;
    let renewed = spec.renew_time.map(|t| t.0.to_string());
    let seen = renewed
        .as_deref()
        .map(|t| format!(" (renewed {t})"))
        .unwrap_or_default();
    let pods = Api::<Pod>::namespaced(client.clone(), namespace);
    let pod = pods
        .get_opt(&holder)
        .await
        .with_context(|| format!("reading the leader's pod {namespace}/{holder}"))?
        .with_context(|| {
            format!(
                "the Lease {namespace}/{name} names {holder:?} as the leader{seen}, but there is no such pod in {namespace}: tether's identity is its pod's name (POD_NAME) when it runs in a pod; if it runs elsewhere, pass --endpoint"
            )
        })?;
    let port = port.or_else(|| http_port(&pod)).unwrap_or(DEFAULT_PORT);
    Ok(Leader {
        pods,
        pod: format!("{namespace}/{holder}"),
        name: holder,
        port,
        renewed,
    })
}

/// What the leader answered.
#[derive(Debug)]
pub struct Answer {
    pub status: http::StatusCode,
    pub body: String,
}

impl Leader {
    /// Sends `GET path` with `authorization` to the leader through a port-forward.
    pub async fn get(
        &self,
        path: &str,
        authorization: &http::HeaderValue,
    ) -> anyhow::Result<Answer> {
        let seen = self
            .renewed
            .as_deref()
            .map(|t| format!(", its Lease renewed {t},"))
            .unwrap_or_default();
        let doing = format!(
            "asking the leader, pod {}{seen} on port {} through the API server's port-forward",
            self.pod, self.port
        );
        tokio::time::timeout(REQUEST_TIMEOUT, self.exchange(path, authorization))
            .await
            .map_err(|_| anyhow::anyhow!("no answer within {}s", REQUEST_TIMEOUT.as_secs()))
            .and_then(|answer| answer)
            .context(doing)
    }

    async fn exchange(
        &self,
        path: &str,
        authorization: &http::HeaderValue,
    ) -> anyhow::Result<Answer> {
        let mut forward = self
            .pods
            .portforward(&self.name, &[self.port])
            .await
            .context(
                "opening the port-forward (you need get and create on pods/portforward there)",
            )?;
        let stream = forward
            .take_stream(self.port)
            .context("the port-forward gave no stream for the port")?;
        let kubelet_error = forward.take_error(self.port);
        let answer = request(stream, path, authorization).await;
        forward.abort();
        match answer {
            Ok(answer) => Ok(answer),
            Err(e) => {
                // A forward the node could not connect closes at once; the node says why.
                let said = match kubelet_error {
                    Some(said) => tokio::time::timeout(ERROR_WAIT, said).await.ok().flatten(),
                    None => None,
                };
                Err(match said {
                    Some(said) => e.context(format!("the node says: {said}")),
                    None => e,
                })
            }
        }
    }
}

/// One HTTP/1 exchange over `stream`.
async fn request<S>(
    stream: S,
    path: &str,
    authorization: &http::HeaderValue,
) -> anyhow::Result<Answer>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    let (mut sender, connection) =
        hyper::client::conn::http1::handshake(hyper_util::rt::TokioIo::new(stream))
            .await
            .context("starting HTTP over the forward")?;
    let driver = tokio::spawn(connection);
    let request = http::Request::get(path)
        .header(http::header::HOST, "localhost")
        .header(http::header::AUTHORIZATION, authorization.clone())
        .body(http_body_util::Empty::<hyper::body::Bytes>::new())
        .context("building the request")?;
    let answer = async {
        let response = sender
            .send_request(request)
            .await
            .context("sending the request (did the leader's port answer?)")?;
        let status = response.status();
        let body = response
            .into_body()
            .collect()
            .await
            .context("reading the answer")?
            .to_bytes();
        Ok(Answer {
            status,
            body: String::from_utf8_lossy(&body).into_owned(),
        })
    }
    .await;
    driver.abort();
    answer
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lease_is_named_namespace_slash_name() {
        assert_eq!(
            lease_name("tether-system/tether").unwrap(),
            ("tether-system", "tether")
        );
        for bad in ["tether", "/tether", "tether-system/", "a/b/c"] {
            assert!(lease_name(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn the_port_named_http_is_the_leaders() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [
                {"name": "sidecar", "ports": [{"name": "web", "containerPort": 80}]},
                {"name": "tether", "ports": [
                    {"name": "health", "containerPort": 8081},
                    {"name": "http", "containerPort": 9090}]}]}
        }))
        .unwrap();
        assert_eq!(http_port(&pod), Some(9090));
        let unnamed: Pod = serde_json::from_value(serde_json::json!({
            "spec": {"containers": [{"name": "tether", "ports": [{"containerPort": 8080}]}]}
        }))
        .unwrap();
        assert_eq!(http_port(&unnamed), None);
    }

    /// The exchange over a stream, against a small HTTP server on the other end: the request
    /// carries the path and the token; the status and body come back.
    #[tokio::test]
    async fn one_request_crosses_the_stream() {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (ours, mut theirs) = tokio::io::duplex(4096);
        let server = tokio::spawn(async move {
            let mut seen = Vec::new();
            let mut buf = [0u8; 1024];
            while !seen.windows(4).any(|w| w == b"\r\n\r\n") {
                let n = theirs.read(&mut buf).await.unwrap();
                assert!(n > 0, "the request ended early");
                seen.extend_from_slice(&buf[..n]);
            }
            theirs
                .write_all(b"HTTP/1.1 403 Forbidden\r\ncontent-length: 7\r\n\r\nno, you")
                .await
                .unwrap();
            String::from_utf8(seen).unwrap()
        });
        let token = http::HeaderValue::from_static("Bearer abc");
        let answer = request(ours, "/explain/ns/web", &token).await.unwrap();
        assert_eq!(answer.status, http::StatusCode::FORBIDDEN);
        assert_eq!(answer.body, "no, you");
        let seen = server.await.unwrap().to_lowercase();
        assert!(
            seen.starts_with("get /explain/ns/web http/1.1\r\n"),
            "{seen}"
        );
        assert!(seen.contains("authorization: bearer abc\r\n"), "{seen}");
    }
}
