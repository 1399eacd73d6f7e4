//! Fault injection for the e2e tests: an HTTP proxy between tether and the API server that can
//! cut tether off, answer errors, hold requests or lose replies; a tether of the test's own that
//! talks through it; and restarts (or crashes) of kube-apiserver and etcd.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, bail};
use http::{Method, Request, Response, StatusCode, header};
use http_body_util::BodyExt;
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;
use kube::client::Body;
use kube::config::{KubeConfigOptions, Kubeconfig};
use tokio::net::TcpListener;
use tokio::sync::watch;

use crate::{repo_dir, wait_for};

/// What the [`Proxy`] does with a request a [`Fault`] matches.
#[derive(Clone, Debug)]
pub enum Action {
    /// Answer with this status code (and a Kubernetes `Status` body) without forwarding; 429 and
    /// 503 carry `Retry-After: 1`, as the API server's own do.
    Answer(u16),
    /// Forward the request, then close the connection without answering: the API server did
    /// what was asked and the client never hears so, as when a reply is lost to a reset.
    DropReply,
    /// Hold the request this long, then forward it; a client that gives up first takes the
    /// request with it.
    Delay(Duration),
    /// Hold the request this long, then forward it even when its client has given up: an API
    /// server (or a queue in front of it) that received the request in time and applies it late.
    Hold(Duration),
}

/// Which requests a fault applies to: a method (any when None) and a fragment of the path
/// (with its query).
#[derive(Clone, Debug)]
pub struct Matcher {
    pub method: Option<Method>,
    pub path_contains: String,
    /// Watch requests (`watch=true`) match only when set: a watch already open is never hit,
    /// and most faults are about the requests a client makes, not its streams.
    pub watches: bool,
}

impl Matcher {
    /// Requests with `method` whose path contains `fragment`.
    pub fn new(method: Method, fragment: &str) -> Self {
        Matcher {
            method: Some(method),
            path_contains: fragment.into(),
            watches: false,
        }
    }

    /// Every request, watches included.
    pub fn everything() -> Self {
        Matcher {
            method: None,
            path_contains: String::new(),
            watches: true,
        }
    }

    fn matches(&self, method: &Method, path: &str) -> bool {
        self.method.as_ref().is_none_or(|m| m == method)
            && path.contains(&self.path_contains)
            && (self.watches || !path.contains("watch=true"))
    }
}

/// A fault installed in a [`Proxy`]: how often it has hit so far.
#[derive(Clone, Debug)]
pub struct Fault {
    id: u64,
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
}

impl Fault {
    /// How many requests it has hit.
    pub fn hits(&self) -> u64 {
        self.hits_by_path().values().sum()
    }

    /// How many requests it has hit, by path (without the query).
    pub fn hits_by_path(&self) -> BTreeMap<String, u64> {
        self.hits.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }
}

struct Rule {
    id: u64,
    matcher: Matcher,
    action: Action,
    /// How many more requests it hits (None: until removed).
    left: Option<u64>,
    hits: Arc<Mutex<BTreeMap<String, u64>>>,
}

struct Shared {
    upstream: kube::Client,
    cut: AtomicBool,
    rules: Mutex<Vec<Rule>>,
    next_id: AtomicU64,
    requests: AtomicU64,
    /// Connections open now.
    open: AtomicU64,
    /// Watch requests whose answer is still streaming.
    watches: Arc<AtomicU64>,
    /// Bumped to close every open connection.
    generation: watch::Sender<u64>,
    /// Every request passed on to the API server: when, its method and path (watches left
    /// out).
    forwarded: Mutex<Vec<Forwarded>>,
}

/// A request the proxy passed on to the API server: when it was received, and when passed on.
#[derive(Clone, Debug)]
pub struct Forwarded {
    pub received: std::time::Instant,
    pub at: std::time::Instant,
    pub method: Method,
    pub path: String,
}

/// An HTTP proxy on 127.0.0.1 in front of the API server. Clients speak plain HTTP to it (their
/// bearer token passes through untouched, so RBAC is the API server's as ever); it speaks TLS to
/// the API server. Watches stream through. [`Proxy::cut`] closes every connection and refuses
/// new ones (a network partition, as tether sees it) until [`Proxy::restore`]; [`Proxy::inject`]
/// makes chosen requests fail, hang or lose their reply.
pub struct Proxy {
    pub addr: SocketAddr,
    shared: Arc<Shared>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy to the API server in tether's kubeconfig.
    pub async fn start() -> anyhow::Result<Self> {
        let (text, _) = tether_kubeconfig()?;
        let kubeconfig = Kubeconfig::from_yaml(&text).context("parsing tether's kubeconfig")?;
        let mut config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .context("loading tether's kubeconfig")?;
        // The client's own credentials pass through; the proxy adds none, never times out a
        // watch the client keeps open, and never retries: every answer reaches the client as
        // the API server gave it.
        config.auth_info = Default::default();
        config.read_timeout = None;
        config.default_retry = false;
        let upstream = kube::Client::try_from(config).context("building the proxy's client")?;
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the proxy")?;
        let addr = listener.local_addr()?;
        let (generation, _) = watch::channel(0u64);
        let shared = Arc::new(Shared {
            upstream,
            cut: AtomicBool::new(false),
            rules: Mutex::new(Vec::new()),
            next_id: AtomicU64::new(0),
            requests: AtomicU64::new(0),
            open: AtomicU64::new(0),
            watches: Arc::new(AtomicU64::new(0)),
            generation,
            forwarded: Mutex::default(),
        });
        let serving = shared.clone();
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                if serving.cut.load(Ordering::SeqCst) {
                    drop(stream);
                    continue;
                }
                let mut cut_off = serving.generation.subscribe();
                let shared = serving.clone();
                shared.open.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    let counted = shared.clone();
                    let service = hyper::service::service_fn(move |req| shared.clone().handle(req));
                    let connection = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service);
                    tokio::select! {
                        _ = connection => {}
                        _ = cut_off.changed() => {}
                    }
                    counted.open.fetch_sub(1, Ordering::SeqCst);
                });
            }
        });
        Ok(Proxy { addr, shared, task })
    }

    /// Closes every open connection and refuses new ones.
    pub fn cut(&self) {
        self.shared.cut.store(true, Ordering::SeqCst);
        self.shared.generation.send_modify(|g| *g += 1);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.shared.cut.store(false, Ordering::SeqCst);
    }

    /// Applies `action` to the next `times` requests `matcher` matches (every one until
    /// [`Proxy::remove`] when None). The first fault installed that matches a request wins.
    pub fn inject(&self, matcher: Matcher, action: Action, times: Option<u64>) -> Fault {
        let fault = Fault {
            id: self.shared.next_id.fetch_add(1, Ordering::SeqCst),
            hits: Arc::new(Mutex::new(BTreeMap::new())),
        };
        self.shared.rules().push(Rule {
            id: fault.id,
            matcher,
            action,
            left: times,
            hits: fault.hits.clone(),
        });
        fault
    }

    /// Removes a fault; requests pass untouched again.
    pub fn remove(&self, fault: &Fault) {
        self.shared.rules().retain(|r| r.id != fault.id);
    }

    /// How many connections are open through the proxy now (each watch holds one).
    pub fn open_connections(&self) -> u64 {
        self.shared.open.load(Ordering::SeqCst)
    }

    /// How many watch requests are open through the proxy now.
    pub fn open_watches(&self) -> u64 {
        self.shared.watches.load(Ordering::SeqCst)
    }

    /// The requests passed on to the API server so far (a request delayed by a fault, then given
    /// up by its client, never is; a held one is).
    pub fn forwarded(&self) -> Vec<Forwarded> {
        self.shared
            .forwarded
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// How many requests the proxy has received so far.
    pub fn requests(&self) -> u64 {
        self.shared.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.shared.generation.send_modify(|g| *g += 1);
    }
}

type ProxyError = Box<dyn std::error::Error + Send + Sync>;

impl Shared {
    fn rules(&self) -> std::sync::MutexGuard<'_, Vec<Rule>> {
        self.rules
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// The action for a request, counting the hit.
    fn action_for(&self, method: &Method, path: &str) -> Option<Action> {
        let mut rules = self.rules();
        let rule = rules
            .iter_mut()
            .find(|r| r.left != Some(0) && r.matcher.matches(method, path))?;
        let without_query = path.split('?').next().unwrap_or_default().to_string();
        *rule
            .hits
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(without_query)
            .or_default() += 1;
        if let Some(left) = rule.left.as_mut() {
            *left -= 1;
        }
        Some(rule.action.clone())
    }

    async fn handle(
        self: Arc<Self>,
        req: Request<Incoming>,
    ) -> Result<Response<Counted>, ProxyError> {
        self.requests.fetch_add(1, Ordering::SeqCst);
        let received = std::time::Instant::now();
        let path = req
            .uri()
            .path_and_query()
            .map(|p| p.as_str().to_string())
            .unwrap_or_default();
        let action = self.action_for(req.method(), &path);
        match &action {
            Some(Action::Answer(code)) => return Ok(error_response(*code).map(Counted::plain)),
            Some(Action::Delay(hold)) => tokio::time::sleep(*hold).await,
            Some(Action::Hold(hold)) => {
                // Read the whole request now, then let a task of its own pass it on: dropping
                // this future (the client hanging up) no longer stops it.
                let (parts, body) = req.into_parts();
                let body = body.collect().await?.to_bytes();
                let (hold, shared) = (*hold, self.clone());
                let late = tokio::spawn(async move {
                    tokio::time::sleep(hold).await;
                    shared.forward(parts, body, path, received, None).await
                });
                return late.await?;
            }
            _ => {}
        }
        let (parts, body) = req.into_parts();
        let body = body.collect().await?.to_bytes();
        self.forward(parts, body, path, received, action).await
    }

    /// Passes a request on to the API server and its answer back, as `action` says.
    async fn forward(
        self: Arc<Self>,
        mut parts: http::request::Parts,
        body: hyper::body::Bytes,
        path: String,
        received: std::time::Instant,
        action: Option<Action>,
    ) -> Result<Response<Counted>, ProxyError> {
        if !path.contains("watch=true") {
            self.forwarded
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(Forwarded {
                    received,
                    at: std::time::Instant::now(),
                    method: parts.method.clone(),
                    path: path.clone(),
                });
        }
        for hop in [header::HOST, header::CONNECTION, header::TRANSFER_ENCODING] {
            parts.headers.remove(hop);
        }
        let response = self
            .upstream
            .send(Request::from_parts(parts, Body::from(body)))
            .await?;
        if matches!(action, Some(Action::DropReply)) {
            // Read the answer so the API server is done, then hang up instead of passing it on.
            let _ = response.into_body().collect_bytes().await;
            return Err("the fault proxy dropped this reply".into());
        }
        if path.contains("watch=true") {
            return Ok(response.map(|body| Counted::watch(body, &self.watches)));
        }
        Ok(response.map(Counted::plain))
    }
}

/// An answer passed on; a watch's counts as open until its body ends or is dropped.
pub struct Counted {
    body: Body,
    open_watches: Option<Arc<AtomicU64>>,
}

impl Counted {
    fn plain(body: Body) -> Self {
        Counted {
            body,
            open_watches: None,
        }
    }

    fn watch(body: Body, open_watches: &Arc<AtomicU64>) -> Self {
        open_watches.fetch_add(1, Ordering::SeqCst);
        Counted {
            body,
            open_watches: Some(open_watches.clone()),
        }
    }
}

impl Drop for Counted {
    fn drop(&mut self) {
        if let Some(open) = self.open_watches.take() {
            open.fetch_sub(1, Ordering::SeqCst);
        }
    }
}

impl hyper::body::Body for Counted {
    type Data = hyper::body::Bytes;
    type Error = kube::Error;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Self::Data>, Self::Error>>> {
        std::pin::Pin::new(&mut self.body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

/// A Kubernetes `Status` answer with `code`, as the API server writes one.
fn error_response(code: u16) -> Response<Body> {
    let status = StatusCode::from_u16(code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let reason = match code {
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    };
    let body = serde_json::json!({
        "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("injected by the e2e fault proxy ({code})"),
        "reason": reason, "code": code,
    });
    let mut response = Response::new(Body::from(body.to_string().into_bytes()));
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        header::CONTENT_TYPE,
        header::HeaderValue::from_static("application/json"),
    );
    if code == 429 || code == 503 {
        headers.insert(header::RETRY_AFTER, header::HeaderValue::from_static("1"));
    }
    response
}

/// The API server address in tether's kubeconfig (`.cluster/tether.kubeconfig`, written by
/// `e2e/scripts/tether-up.sh` with the tether ServiceAccount's token).
fn tether_kubeconfig() -> anyhow::Result<(String, SocketAddr)> {
    let path = repo_dir().join(".cluster/tether.kubeconfig");
    let text = std::fs::read_to_string(&path)
        .with_context(|| format!("reading {} (written by tether-up.sh)", path.display()))?;
    let server = text
        .lines()
        .find_map(|l| l.trim().strip_prefix("server: https://"))
        .context("no server in tether's kubeconfig")?
        .trim()
        .to_string();
    let addr = server
        .parse()
        .with_context(|| format!("the server {server} is not an address"))?;
    Ok((text, addr))
}

/// A kubeconfig for the local cluster (tether-up.sh's, with its CA) that authenticates with
/// `token` instead of the tether ServiceAccount's.
pub fn kubeconfig_with_token(token: &str) -> anyhow::Result<String> {
    let (text, _) = tether_kubeconfig()?;
    let mut replaced = false;
    let lines: Vec<String> = text
        .lines()
        .map(|line| match line.split_once("user: {token: ") {
            Some((indent, _)) => {
                replaced = true;
                format!("{indent}user: {{token: {token}}}")
            }
            None => line.to_string(),
        })
        .collect();
    anyhow::ensure!(replaced, "no token line in tether's kubeconfig");
    Ok(lines.join("\n") + "\n")
}

/// A tether process of the test's own, talking to the API server through a [`Proxy`] as the
/// tether ServiceAccount. Stopped when dropped; logs to `.cluster/logs/tether-<name>.log`.
pub struct OwnTether {
    child: Child,
    /// Where its probes (`/healthz`, `/readyz`) answer.
    pub http: SocketAddr,
    /// Where its `/metrics` answer.
    pub metrics: SocketAddr,
    pub log: PathBuf,
}

impl OwnTether {
    /// Starts `target/debug/tether` (or `$TETHER_BIN`) against `proxy` and waits for `/readyz`.
    pub async fn start(name: &str, proxy: &Proxy) -> anyhow::Result<Self> {
        Self::start_with(name, proxy, &[]).await
    }

    /// As [`OwnTether::start`], with `args` added to `tether run`'s.
    pub async fn start_with(name: &str, proxy: &Proxy, args: &[&str]) -> anyhow::Result<Self> {
        Self::start_at(name, proxy, args, crate::free_local_addr()?).await
    }

    /// As [`OwnTether::start_with`], serving `/metrics` and `/explain` at `metrics`.
    pub async fn start_at(
        name: &str,
        proxy: &Proxy,
        args: &[&str],
        metrics: SocketAddr,
    ) -> anyhow::Result<Self> {
        let (text, upstream) = tether_kubeconfig()?;
        let kubeconfig = repo_dir().join(format!(".cluster/tether-{name}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            text.replace(
                &format!("https://{upstream}"),
                &format!("http://{}", proxy.addr),
            ),
        )
        .context("writing the proxied kubeconfig")?;
        let http = crate::free_local_addr()?;
        let bin = crate::tether_bin();
        let log = repo_dir().join(format!(".cluster/logs/tether-{name}.log"));
        let out = std::fs::File::create(&log).context("creating the tether log")?;
        let child = Command::new(&bin)
            .args(["run", "--http-addr", &metrics.to_string()])
            .args(["--health-addr", &http.to_string(), "--instance"])
            .arg(format!("tether-{name}"))
            .args(args)
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,tether=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let tether = OwnTether {
            child,
            http,
            metrics,
            log,
        };
        wait_for(
            "the test's tether to be ready",
            Duration::from_secs(60),
            || {
                let url = format!("http://{http}/readyz");
                async move { Ok(curl(&url)?.filter(|body| body.starts_with("ok"))) }
            },
        )
        .await?;
        Ok(tether)
    }

    /// Sends SIGTERM and waits (up to `timeout`) for the process to exit; returns whether it
    /// exited with status 0.
    pub async fn terminate(&mut self, timeout: Duration) -> anyhow::Result<bool> {
        let pid = self.child.id().to_string();
        let sent = Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .context("running kill")?;
        anyhow::ensure!(sent.success(), "kill -TERM {pid} failed");
        let child = &mut self.child;
        let status = wait_for("the test's tether to exit", timeout, || {
            let exited = child.try_wait().map_err(anyhow::Error::from);
            async move { exited }
        })
        .await?;
        Ok(status.success())
    }

    /// Kills the process with SIGKILL, as a crash or an OOM kill would, and reaps it.
    pub fn kill(&mut self) -> anyhow::Result<()> {
        self.child.kill().context("killing the test's tether")?;
        self.child.wait().context("reaping the test's tether")?;
        Ok(())
    }

    /// Whether the process is still running.
    pub fn running(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// Its resident memory now, in bytes (from /proc).
    pub fn rss_bytes(&self) -> anyhow::Result<u64> {
        Ok(crate::process_memory_kib(self.child.id(), "VmRSS")? * 1024)
    }

    /// The sum of the samples of metric `name` (all label sets) on its `/metrics`.
    pub fn metric_sum(&self, name: &str) -> anyhow::Result<f64> {
        let text = curl(&format!("http://{}/metrics", self.metrics))?
            .context("tether's /metrics did not answer")?;
        Ok(text
            .lines()
            .filter(|l| {
                l.strip_prefix(name)
                    .is_some_and(|rest| rest.starts_with(' ') || rest.starts_with('{'))
            })
            .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
            .sum())
    }

    /// What `/healthz` says now (None when it does not answer 200).
    pub fn healthz(&self) -> anyhow::Result<Option<String>> {
        curl(&format!("http://{}/healthz", self.http))
    }

    /// How many lines of its log contain `text`.
    pub fn log_lines_with(&self, text: &str) -> anyhow::Result<usize> {
        let log = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        Ok(log.lines().filter(|l| l.contains(text)).count())
    }

    /// What `/readyz` says now (None when it does not answer 200).
    pub fn readyz(&self) -> anyhow::Result<Option<String>> {
        curl(&format!("http://{}/readyz", self.http))
    }

    /// Whether it says it leads (`/readyz` lists `leading`).
    pub fn leads(&self) -> anyhow::Result<bool> {
        Ok(self
            .readyz()?
            .is_some_and(|body| body.lines().any(|l| l == "leading")))
    }

    /// A Lease left by an earlier run would make the first replica of a test wait for it to
    /// expire: deleted before one starts.
    pub fn fresh_lease() -> anyhow::Result<()> {
        crate::kubectl_ok(
            &[
                "delete",
                "lease",
                "tether",
                "-n",
                "tether-system",
                "--ignore-not-found",
            ],
            None,
        )
        .map(|_| ())
    }

    /// What `/readyz` says, ready or not (a test's failure names the watches still stale).
    pub fn readyz_says(&self) -> String {
        Command::new("curl")
            .args([
                "-s",
                "--max-time",
                "5",
                &format!("http://{}/readyz", self.http),
            ])
            .output()
            .map(|out| String::from_utf8_lossy(&out.stdout).into_owned())
            .unwrap_or_else(|e| format!("(curl failed: {e})"))
    }
}

impl Drop for OwnTether {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of a GET, or None when it did not answer 200.
pub fn curl(url: &str) -> anyhow::Result<Option<String>> {
    get(url, &[])
}

/// As [`curl`], taking any certificate of an https address (a component's self-signed one).
pub fn curl_self_signed(url: &str) -> anyhow::Result<Option<String>> {
    get(url, &["-k"])
}

fn get(url: &str, extra: &[&str]) -> anyhow::Result<Option<String>> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5"])
        .args(extra)
        .arg(url)
        .output()
        .context("running curl")?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// How a control-plane component is stopped before [`restart`] starts it again.
#[derive(Clone, Copy, Debug)]
pub enum Stop {
    /// SIGTERM: a clean shutdown.
    Term,
    /// SIGKILL: a crash.
    Kill,
}

/// Restarts `component` (`kube-apiserver` or `etcd`) with `e2e/scripts/restart.sh`, keeping it
/// down for `down` first, and waits until it is healthy. A restarted kube-apiserver's watch
/// cache starts afresh, so every watch resumed from before answers `410 Gone`.
pub fn restart(component: &str, stop: Stop, down: Duration) -> anyhow::Result<()> {
    restart_within(component, stop, down, Duration::from_secs(90))
}

/// As [`restart`], giving the component `healthy_within` to be healthy again (a kube-apiserver
/// holding 150,000 pods takes longer than the 90 s the tests allow).
pub fn restart_within(
    component: &str,
    stop: Stop,
    down: Duration,
    healthy_within: Duration,
) -> anyhow::Result<()> {
    let script = repo_dir().join("e2e/scripts/restart.sh");
    let mut cmd = Command::new("bash");
    cmd.env("START_TIMEOUT", healthy_within.as_secs().to_string())
        .arg(&script)
        .arg(component)
        .args(["--down", &down.as_secs().to_string()]);
    if matches!(stop, Stop::Kill) {
        cmd.arg("--kill");
    }
    let out = cmd
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "restarting {component} failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
