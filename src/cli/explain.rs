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
    /// A file holding the bearer token to send: a token bound to the audience `tether`, so
    /// that no credential for the API server leaves your machine (`kubectl create token
    /// <serviceaccount> --audience tether --duration 1h > token`). tether refuses any other.
    #[arg(long, env = "TETHER_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
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
        // A token sent in the clear could be read and replayed against tether.
        let host = url.host().unwrap_or_default();
        let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1");
        anyhow::ensure!(
            url.scheme_str() != Some("http") || loopback,
            "refusing to send a token over plain HTTP to {host}: use https://, or `kubectl port-forward` and http://127.0.0.1"
        );
        // The kubeconfig gives the default namespace only: none of its credentials is sent.
        let namespace = kube::Config::infer()
            .await
            .map(|c| c.default_namespace)
            .unwrap_or_else(|_| "default".into());
        let mut config = kube::Config::new(url);
        config.accept_invalid_certs = self.insecure_skip_tls_verify;
        let path = self.token_file.as_ref().context(
            "no --token-file (or TETHER_TOKEN_FILE): tether takes only a token bound to the audience \"tether\"; create one with kubectl create token <serviceaccount> --audience tether > token",
        )?;
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("reading the token in {}", path.display()))?;
        let value = http::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
            .with_context(|| format!("{} holds characters no header may", path.display()))?;
        config.headers.push((http::header::AUTHORIZATION, value));
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
