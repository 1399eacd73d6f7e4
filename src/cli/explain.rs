//! `tether explain <namespace>/<pod>` (also `kubectl tether explain`): asks the running leader
//! why the pod went where it went, or why it is pending, and prints the answer.

use anyhow::Context;

use super::leader;
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
    /// text (the FILTER table names the first 20 rejected nodes); wide lists every one; json
    /// or yaml for tools (an object of apiVersion tether.dev/v1alpha1, kind Explanation).
    #[arg(short, long, default_value = "text", value_parser = ["text", "wide", "json", "yaml"])]
    pub output: String,
    /// One node's Filter verdicts and scores (and its rank among the feasible nodes) instead of
    /// the tables.
    #[arg(long, value_name = "NAME")]
    pub node: Option<String>,
}

/// How to reach the leader's `--http-addr`.
#[derive(clap::Args, Debug)]
pub struct Endpoint {
    /// The leader's HTTP endpoint, when you reach it yourself (`http://127.0.0.1:8080` behind
    /// your own port-forward, or an https address). Without it but with --token-file, explain
    /// finds the leader: the holder of the Lease --leader-lease, reached through the API
    /// server's port-forward to its pod (your kubeconfig's credentials serve for that; you need
    /// get on the Lease and on pods, and get and create on pods/portforward in tether's
    /// namespace: the Role tether-explainer there grants them).
    #[arg(long, env = "TETHER_ENDPOINT")]
    pub endpoint: Option<String>,
    /// tether's Lease, as namespace/name: its holder is the leader.
    #[arg(
        long,
        env = "TETHER_LEADER_LEASE",
        default_value = "tether-system/tether"
    )]
    pub leader_lease: String,
    /// The port of the leader's --http-addr in its pod; by default its container port named
    /// `http`, else 8080.
    #[arg(long)]
    pub leader_port: Option<u16>,
    /// A file holding a bearer token bound to the audience `tether`, to ask the leader's HTTP
    /// endpoint directly (`kubectl create token <serviceaccount> --audience tether --duration
    /// 1h > token`; tether refuses any other). Without it and without --endpoint the question
    /// is an ExplainRequest made with your kubeconfig's credentials (you need the ClusterRole
    /// tether-explainer).
    #[arg(long, env = "TETHER_TOKEN_FILE")]
    pub token_file: Option<std::path::PathBuf>,
    /// Accept any certificate of an https endpoint.
    #[arg(long)]
    pub insecure_skip_tls_verify: bool,
    #[command(flatten)]
    pub kubeconfig: super::kubeconfig::KubeconfigArgs,
}

/// The way to the leader: an address given, or the Lease's holder through a port-forward.
pub enum Route {
    Direct {
        url: String,
        client: kube::Client,
    },
    Forward {
        leader: Box<leader::Leader>,
        authorization: http::HeaderValue,
    },
    /// No token and no endpoint: an ExplainRequest made with the kubeconfig's credentials.
    Request {
        client: kube::Client,
    },
}

/// What is asked.
pub enum Question<'a> {
    /// Why pod `name` of `namespace` went where it went, or is pending.
    Pod { namespace: &'a str, name: &'a str },
    /// Why the pods of `namespace` (of every namespace: `None`) are pending.
    Pending { namespace: Option<&'a str> },
}

impl Endpoint {
    /// The `Authorization` header carrying the token of --token-file.
    fn authorization(&self) -> anyhow::Result<http::HeaderValue> {
        let path = self.token_file.as_ref().context(
            "no --token-file (or TETHER_TOKEN_FILE): tether takes only a token bound to the audience \"tether\"; create one with kubectl create token <serviceaccount> --audience tether > token",
        )?;
        let token = std::fs::read_to_string(path)
            .with_context(|| format!("reading the token in {}", path.display()))?;
        http::HeaderValue::from_str(&format!("Bearer {}", token.trim()))
            .with_context(|| format!("{} holds characters no header may", path.display()))
    }

    /// A client for `url`, carrying the caller's token and nothing else.
    fn direct(&self, url: &str, authorization: http::HeaderValue) -> anyhow::Result<Route> {
        let uri: http::Uri = url
            .parse()
            .with_context(|| format!("--endpoint {url:?} is not a URL"))?;
        // A token sent in the clear could be read and replayed against tether.
        let host = uri.host().unwrap_or_default();
        let loopback = matches!(host, "localhost" | "127.0.0.1" | "[::1]" | "::1");
        anyhow::ensure!(
            uri.scheme_str() != Some("http") || loopback,
            "refusing to send a token over plain HTTP to {host}: use https://, or leave out --endpoint to reach the leader through the API server"
        );
        let mut config = kube::Config::new(uri);
        config.accept_invalid_certs = self.insecure_skip_tls_verify;
        config
            .headers
            .push((http::header::AUTHORIZATION, authorization));
        let client = kube::Client::try_from(config).context("building the HTTP client")?;
        Ok(Route::Direct {
            url: url.to_string(),
            client,
        })
    }

    /// The route to the leader and the kubeconfig's namespace.
    pub async fn route(&self) -> anyhow::Result<(Route, String)> {
        if self.endpoint.is_none() && self.token_file.is_none() {
            let config = self.kubeconfig.config().await.context(
                "reading your kubeconfig, to ask with an ExplainRequest (or pass --token-file)",
            )?;
            let namespace = config.default_namespace.clone();
            let client =
                kube::Client::try_from(config).context("building the API server's client")?;
            return Ok((Route::Request { client }, namespace));
        }
        let authorization = self.authorization()?;
        if let Some(url) = &self.endpoint {
            // The kubeconfig gives the default namespace only: none of its credentials is sent.
            // A kubeconfig or context asked for must be found; without either, none is needed.
            let namespace = match self.kubeconfig.config().await {
                Ok(config) => config.default_namespace,
                Err(e)
                    if self.kubeconfig.kubeconfig.is_some()
                        || self.kubeconfig.context.is_some() =>
                {
                    return Err(e);
                }
                Err(_) => "default".into(),
            };
            return Ok((self.direct(url, authorization)?, namespace));
        }
        let config = self.kubeconfig.config().await.context(
            "reading your kubeconfig, to find the leader through the API server (or pass --endpoint)",
        )?;
        let namespace = config.default_namespace.clone();
        let client = kube::Client::try_from(config).context("building the API server's client")?;
        let leader = leader::find(&client, &self.leader_lease, self.leader_port).await?;
        Ok((
            Route::Forward {
                leader: Box::new(leader),
                authorization,
            },
            namespace,
        ))
    }

    /// Asks `question` by `route`; the answer's JSON (an Explanation or a PendingSummary). A
    /// refusal becomes an error with tether's words.
    pub async fn ask(route: &Route, question: Question<'_>) -> anyhow::Result<String> {
        let Route::Request { client } = route else {
            let path = match question {
                Question::Pod { namespace, name } => format!("/explain/{namespace}/{name}"),
                Question::Pending { namespace: None } => "/pending".to_string(),
                Question::Pending {
                    namespace: Some(namespace),
                } => format!("/pending/{namespace}"),
            };
            return Self::get(route, &path).await;
        };
        let status = match question {
            Question::Pod { namespace, name } => {
                super::request::ask(client, namespace, Some(name)).await?
            }
            Question::Pending {
                namespace: Some(namespace),
            } => super::request::ask(client, namespace, None).await?,
            Question::Pending { namespace: None } => anyhow::bail!(
                "-A asks the leader directly (an ExplainRequest lives in one namespace): pass --token-file, or -n NAMESPACE"
            ),
        };
        let answer = status
            .explanation
            .or(status.pending)
            .context("tether's answer holds neither an explanation nor a pending summary")?;
        serde_json::to_string(&answer).context("reading tether's answer")
    }

    /// GETs `path` from the leader; a refusal becomes an error with the leader's words.
    pub async fn get(route: &Route, path: &str) -> anyhow::Result<String> {
        match route {
            Route::Request { .. } => anyhow::bail!("an ExplainRequest has no path to GET"),
            Route::Direct { url, client } => {
                let request = http::Request::get(path)
                    .body(Vec::new())
                    .context("building the request")?;
                match client.request_text(request).await {
                    Ok(body) => Ok(body),
                    Err(kube::Error::Api(status)) => Err(anyhow::anyhow!(
                        "{url} answered {}: {}",
                        status.code,
                        status.message
                    )),
                    Err(e) => Err(anyhow::anyhow!(e).context(format!(
                        "asking {url} (is tether's --http-addr reachable there?)"
                    ))),
                }
            }
            Route::Forward {
                leader,
                authorization,
            } => {
                let answer = leader.get(path, authorization).await?;
                if answer.status.is_success() {
                    return Ok(answer.body);
                }
                // tether refuses with a Status object; anything else is shown as it came.
                let message = serde_json::from_str::<serde_json::Value>(&answer.body)
                    .ok()
                    .and_then(|v| v.get("message")?.as_str().map(String::from))
                    .unwrap_or(answer.body);
                Err(anyhow::anyhow!(
                    "the leader, pod {}, answered {}: {}",
                    leader.pod,
                    answer.status.as_u16(),
                    message.trim()
                ))
            }
        }
    }
}

/// Runs `tether explain`; the text to print.
pub async fn run(args: &ExplainArgs) -> anyhow::Result<String> {
    let (route, default_namespace) = args.endpoint.route().await?;
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
    let body = Endpoint::ask(
        &route,
        Question::Pod {
            namespace: &namespace,
            name: &name,
        },
    )
    .await?;
    let explanation: Explanation =
        serde_json::from_str(&body).context("reading the endpoint's answer")?;
    Ok(match args.output.as_str() {
        format @ ("json" | "yaml") => {
            super::kubeconfig::structured("Explanation", &explanation, format)?
        }
        wide => render::text_with(
            &explanation,
            &render::View {
                wide: wide == "wide",
                node: args.node.clone(),
            },
        ),
    })
}
