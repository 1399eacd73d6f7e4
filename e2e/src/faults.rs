//! Fault injection for the e2e tests: a TCP proxy that can cut tether off the API server, a
//! tether of the test's own that talks through it, and a restart of kube-apiserver.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use anyhow::{Context, bail};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;

use crate::{repo_dir, wait_for};

/// A TCP proxy on 127.0.0.1 in front of `upstream`. [`Proxy::cut`] closes every connection
/// and refuses new ones (as a network partition would look to tether) until
/// [`Proxy::restore`]. TLS passes through untouched.
pub struct Proxy {
    pub addr: SocketAddr,
    cut: Arc<AtomicBool>,
    generation: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Proxy {
    pub async fn start(upstream: SocketAddr) -> anyhow::Result<Self> {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .context("binding the proxy")?;
        let addr = listener.local_addr()?;
        let cut = Arc::new(AtomicBool::new(false));
        let (generation, _) = watch::channel(0u64);
        let (accept_cut, accept_gen) = (cut.clone(), generation.clone());
        let task = tokio::spawn(async move {
            while let Ok((mut downstream, _)) = listener.accept().await {
                if accept_cut.load(Ordering::SeqCst) {
                    drop(downstream);
                    continue;
                }
                let mut cut_off = accept_gen.subscribe();
                tokio::spawn(async move {
                    let Ok(mut up) = TcpStream::connect(upstream).await else {
                        return;
                    };
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut downstream, &mut up) => {}
                        _ = cut_off.changed() => {}
                    }
                });
            }
        });
        Ok(Proxy {
            addr,
            cut,
            generation,
            task,
        })
    }

    /// Closes every open connection and refuses new ones.
    pub fn cut(&self) {
        self.cut.store(true, Ordering::SeqCst);
        self.generation.send_modify(|g| *g += 1);
    }

    /// Lets connections through again.
    pub fn restore(&self) {
        self.cut.store(false, Ordering::SeqCst);
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.task.abort();
        self.generation.send_modify(|g| *g += 1);
    }
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

/// The API server's address, as tether's kubeconfig names it: where a [`Proxy`] forwards to.
pub fn apiserver_addr() -> anyhow::Result<SocketAddr> {
    Ok(tether_kubeconfig()?.1)
}

/// A tether process of the test's own, talking to the API server through a [`Proxy`] as the
/// tether ServiceAccount. Stopped when dropped; logs to `.cluster/logs/tether-<name>.log`.
pub struct OwnTether {
    child: Child,
    /// Where its probes (`/healthz`, `/readyz`) answer.
    pub http: SocketAddr,
    pub log: PathBuf,
}

impl OwnTether {
    /// Starts `target/debug/tether` (or `$TETHER_BIN`) against `proxy` and waits for `/readyz`.
    pub async fn start(name: &str, proxy: &Proxy) -> anyhow::Result<Self> {
        let (text, upstream) = tether_kubeconfig()?;
        let kubeconfig = repo_dir().join(format!(".cluster/tether-{name}.kubeconfig"));
        std::fs::write(
            &kubeconfig,
            text.replace(&upstream.to_string(), &proxy.addr.to_string()),
        )
        .context("writing the proxied kubeconfig")?;
        let free = || -> anyhow::Result<SocketAddr> {
            let probe = std::net::TcpListener::bind("127.0.0.1:0")?;
            Ok(probe.local_addr()?)
        };
        let (metrics, http) = (free()?, free()?);
        let bin = std::env::var_os("TETHER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_dir().join("target/debug/tether"));
        let log = repo_dir().join(format!(".cluster/logs/tether-{name}.log"));
        let out = std::fs::File::create(&log).context("creating the tether log")?;
        let child = Command::new(&bin)
            .args(["run", "--http-addr", &metrics.to_string()])
            .args(["--health-addr", &http.to_string(), "--instance"])
            .arg(format!("tether-{name}"))
            .env("KUBECONFIG", &kubeconfig)
            .env("RUST_LOG", "info,tether=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        let tether = OwnTether { child, http, log };
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

    /// What `/readyz` says now (None when it does not answer 200).
    pub fn readyz(&self) -> anyhow::Result<Option<String>> {
        curl(&format!("http://{}/readyz", self.http))
    }
}

impl Drop for OwnTether {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The body of a GET, or None when it did not answer 200.
fn curl(url: &str) -> anyhow::Result<Option<String>> {
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5", url])
        .output()
        .context("running curl")?;
    Ok(out
        .status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).into_owned()))
}

/// Restarts kube-apiserver (`e2e/scripts/apiserver-restart.sh`) and waits until it is ready.
/// Its watch cache starts afresh, so every watch resumed from before answers `410 Gone`.
pub fn restart_apiserver() -> anyhow::Result<()> {
    let script = repo_dir().join("e2e/scripts/apiserver-restart.sh");
    let out = Command::new("bash")
        .arg(&script)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "restarting kube-apiserver failed:\n{}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
