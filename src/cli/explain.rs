//! `tether explain <namespace>/<pod>` (also `kubectl tether explain`): asks the running leader
//! why the pod went where it went, or why it is pending, and prints the answer.

use anyhow::Context;

use crate::scheduler::explain::{Explanation, render};

/// Where to ask and how to print.
#[derive(clap::Args, Debug)]
pub struct ExplainArgs {
    /// The pod, as namespace/name (or name, in --namespace or the kubeconfig's namespace).
    pub pod: String,
    /// The pod's namespace, when `pod` is a bare name.
    #[arg(short, long)]
    pub namespace: Option<String>,
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// text, or json for tools.
    #[arg(short, long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
}

/// How to reach the leader's `--http-addr`.
#[derive(clap::Args, Debug)]
pub struct Endpoint {
    /// The leader's HTTP endpoint. In a cluster: `kubectl -n tether-system port-forward
    /// pod/<the tether Lease's holder> 8080`, then the default.
    #[arg(long, env = "TETHER_ENDPOINT", default_value = "http://127.0.0.1:8080")]
    pub endpoint: String,
    /// The bearer token to send (default: the kubeconfig user's token, or its exec plugin's).
    /// A user that authenticates with a client certificate needs one, e.g. `kubectl create
    /// token <serviceaccount>`.
    #[arg(long, env = "TETHER_TOKEN", hide_env_values = true)]
    pub token: Option<String>,
    /// Accept any certificate of an https endpoint.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
}

impl Endpoint {
    /// A client for the endpoint, carrying the caller's token; and the kubeconfig's namespace.
    pub async fn client(&self) -> anyhow::Result<(kube::Client, String)> {
        let url: http::Uri = self
            .endpoint
            .parse()
            .with_context(|| format!("--endpoint {:?} is not a URL", self.endpoint))?;
        // A token sent in the clear could be read and replayed against the API server.
        let host = url.host().unwrap_or_default();
        let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1");
        anyhow::ensure!(
            url.scheme_str() != Some("http") || loopback,
            "refusing to send a token over plain HTTP to {host}: use https://, or `kubectl port-forward` and http://127.0.0.1"
        );
        let mut config = match (kube::Config::infer().await, &self.token) {
            (Ok(config), _) => config,
            (Err(_), Some(_)) => kube::Config::new(url.clone()),
            (Err(e), None) => {
                return Err(anyhow::anyhow!(e).context(
                    "reading the kubeconfig for a token (or pass --token / TETHER_TOKEN)",
                ));
            }
        };
        let namespace = config.default_namespace.clone();
        config.cluster_url = url;
        config.root_cert = None;
        config.tls_server_name = None;
        config.proxy_url = None;
        config.accept_invalid_certs = self.insecure_skip_tls_verify;
        if let Some(token) = &self.token {
            config.auth_info = Default::default();
            let value = http::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
                .context("--token holds characters no header may")?;
            config.headers.push((http::header::AUTHORIZATION, value));
        } else {
            let user = &config.auth_info;
            let has_token = user.token.is_some()
                || user.token_file.is_some()
                || user.exec.is_some()
                || user.auth_provider.is_some();
            if !has_token {
                tracing::warn!(
                    "the kubeconfig's user has no token (a client certificate cannot be passed on): tether will refuse the request; pass --token or TETHER_TOKEN"
                );
            }
        }
        let client = kube::Client::try_from(config).context("building the HTTP client")?;
        Ok((client, namespace))
    }

    /// GETs `path` from the endpoint; a refusal becomes an error with the endpoint's words.
    pub async fn get(&self, client: &kube::Client, path: &str) -> anyhow::Result<String> {
        let request = http::Request::get(path)
            .body(Vec::new())
            .context("building the request")?;
        match client.request_text(request).await {
            Ok(body) => Ok(body),
            Err(kube::Error::Api(status)) => Err(anyhow::anyhow!(
                "{} answered {}: {}",
                self.endpoint,
                status.code,
                status.message
            )),
            Err(e) => Err(anyhow::anyhow!(e).context(format!(
                "asking {} (is tether's --http-addr reachable there?)",
                self.endpoint
            ))),
        }
    }
}

/// Runs `tether explain`; the text to print.
pub async fn run(args: &ExplainArgs) -> anyhow::Result<String> {
    let (client, default_namespace) = args.endpoint.client().await?;
    let (namespace, name) = match args.pod.split_once('/') {
        Some((ns, name)) => (ns.to_string(), name.to_string()),
        None => (
            args.namespace.clone().unwrap_or(default_namespace),
            args.pod.clone(),
        ),
    };
    anyhow::ensure!(
        !namespace.is_empty() && !name.is_empty() && !name.contains('/'),
        "{:?} is not a pod: give namespace/name",
        args.pod
    );
    let body = args
        .endpoint
        .get(&client, &format!("/explain/{namespace}/{name}"))
        .await?;
    let explanation: Explanation =
        serde_json::from_str(&body).context("reading the endpoint's answer")?;
    Ok(match args.output.as_str() {
        "json" => serde_json::to_string_pretty(&explanation)? + "\n",
        _ => render::text(&explanation),
    })
}
