//! kube-scheduler itself, as the reference tether's decisions are compared with: the binary
//! e2e/scripts/build-k8s.sh built (next to kubectl), run by the test with profiles of its own
//! and the score of every node logged (`--vmodule=schedule_one=10`).

use std::collections::BTreeMap;
use std::fs::File;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use anyhow::{Context, anyhow};

use crate::{kubeconfig_path, repo_dir};

/// The kube-scheduler binary e2e/scripts/build-k8s.sh built, next to `$TETHER_KUBECTL`; or
/// `$TETHER_KUBE_SCHEDULER`, one of another release (e2e/scripts/build-reference-scheduler.sh:
/// `make test-matrix` compares tether scheduling as 1.38 with 1.38's kube-scheduler so).
pub fn kube_scheduler_bin() -> anyhow::Result<PathBuf> {
    if let Some(own) = std::env::var_os("TETHER_KUBE_SCHEDULER") {
        return Ok(PathBuf::from(own));
    }
    let kubectl = std::env::var_os("TETHER_KUBECTL")
        .ok_or_else(|| anyhow!("TETHER_KUBECTL is not set: run the tests through make"))?;
    PathBuf::from(kubectl)
        .parent()
        .map(|dir| dir.join("kube-scheduler"))
        .ok_or_else(|| anyhow!("no directory for TETHER_KUBECTL"))
}

/// A kube-scheduler process serving `profiles` (default plugins, no PostFilter), stopped when
/// dropped.
pub struct ReferenceScheduler {
    child: Child,
    log: PathBuf,
}

impl ReferenceScheduler {
    /// Starts kube-scheduler with one profile per schedulerName in `profiles`: kube-scheduler's
    /// default plugins without the PostFilter ones, DefaultPreemption and DynamicResources (each
    /// appends its own words to a failure message; a test comparing messages turns them off in
    /// tether's profile too). Leader election and serving are off; the log goes to
    /// `.cluster/logs/<name>.log`.
    pub fn start(name: &str, profiles: &[&str]) -> anyhow::Result<Self> {
        Self::start_configured(name, profiles, false)
    }

    /// As [`ReferenceScheduler::start`], with kube-scheduler's PostFilter plugins
    /// (DefaultPreemption) left on.
    pub fn start_preempting(name: &str, profiles: &[&str]) -> anyhow::Result<Self> {
        Self::start_configured(name, profiles, true)
    }

    fn start_configured(name: &str, profiles: &[&str], preempting: bool) -> anyhow::Result<Self> {
        let profiles: Vec<serde_json::Value> = profiles
            .iter()
            .map(|p| {
                if preempting {
                    serde_json::json!({"schedulerName": p})
                } else {
                    serde_json::json!({
                        "schedulerName": p,
                        "plugins": {"postFilter": {"disabled": [{"name": "*"}]}},
                    })
                }
            })
            .collect();
        Self::start_with(name, profiles)
    }

    /// Starts kube-scheduler with `profiles` as they are (each a KubeSchedulerProfile: its
    /// `schedulerName`, `plugins`, `pluginConfig`).
    pub fn start_with(name: &str, profiles: Vec<serde_json::Value>) -> anyhow::Result<Self> {
        Self::start_config(name, serde_json::json!({"profiles": profiles}))
    }

    /// Starts kube-scheduler with `config`'s fields (`profiles`, `parallelism`, …) in its
    /// KubeSchedulerConfiguration.
    pub fn start_config(name: &str, config: serde_json::Value) -> anyhow::Result<Self> {
        Self::start_gated(name, config, &[])
    }

    /// As [`ReferenceScheduler::start_config`], with kube-scheduler's `--feature-gates` set to
    /// `gates` (`GenericWorkload=true` for gangs).
    pub fn start_gated(
        name: &str,
        config: serde_json::Value,
        gates: &[&str],
    ) -> anyhow::Result<Self> {
        Self::launch(name, config, gates, None)
    }

    /// As [`ReferenceScheduler::start_config`], serving on `addr` (its own self-signed
    /// certificate, under `.cluster/<name>-certs`) with `/metrics` open to anyone, as the
    /// probes are: the tests compare its metrics with tether's. `gates` as
    /// [`ReferenceScheduler::start_gated`]'s.
    pub fn start_serving(
        name: &str,
        config: serde_json::Value,
        gates: &[&str],
        addr: std::net::SocketAddr,
    ) -> anyhow::Result<Self> {
        Self::launch(name, config, gates, Some(addr))
    }

    fn launch(
        name: &str,
        config: serde_json::Value,
        gates: &[&str],
        serve: Option<std::net::SocketAddr>,
    ) -> anyhow::Result<Self> {
        let bin = kube_scheduler_bin()?;
        let logs = repo_dir().join(".cluster/logs");
        std::fs::create_dir_all(&logs).context("creating .cluster/logs")?;
        let config_file = logs.join(format!("{name}.yaml"));
        let mut doc = serde_json::json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig_path()},
            "leaderElection": {"leaderElect": false},
        });
        if let (Some(doc), Some(fields)) = (doc.as_object_mut(), config.as_object()) {
            for (k, v) in fields {
                doc.insert(k.clone(), v.clone());
            }
        }
        std::fs::write(&config_file, serde_json::to_string(&doc)?)
            .with_context(|| format!("writing {}", config_file.display()))?;
        let log = logs.join(format!("{name}.log"));
        let out = File::create(&log).with_context(|| format!("creating {}", log.display()))?;
        let mut command = Command::new(&bin);
        if !gates.is_empty() {
            command.arg(format!("--feature-gates={}", gates.join(",")));
        }
        match serve {
            Some(addr) => {
                let certs = repo_dir().join(format!(".cluster/{name}-certs"));
                command
                    .arg(format!("--secure-port={}", addr.port()))
                    .arg(format!("--bind-address={}", addr.ip()))
                    .arg(format!("--cert-dir={}", certs.display()))
                    .arg("--authorization-always-allow-paths=/healthz,/readyz,/livez,/metrics");
            }
            None => {
                command.arg("--secure-port=0");
            }
        }
        let child = command
            .arg(format!("--config={}", config_file.display()))
            .arg("--vmodule=schedule_one=10")
            .stdout(Stdio::null())
            .stderr(out)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(ReferenceScheduler { child, log })
    }

    /// The final score kube-scheduler logged for each node when it scheduled `pod`
    /// (`namespace/name`); empty when it logged none (a single feasible node is not scored).
    pub fn scores(&self, pod: &str) -> anyhow::Result<BTreeMap<String, i64>> {
        let text = std::fs::read_to_string(&self.log)
            .with_context(|| format!("reading {}", self.log.display()))?;
        Ok(parse_scores(&text, pod))
    }

    /// Where the process logs.
    pub fn log(&self) -> &PathBuf {
        &self.log
    }
}

impl Drop for ReferenceScheduler {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The scores of `pod` in klog lines such as
/// `... "Calculated node's final score for pod" pod="ns/p" node="n1" score=237`. The last
/// attempt wins when there were several.
pub fn parse_scores(log: &str, pod: &str) -> BTreeMap<String, i64> {
    let mut scores = BTreeMap::new();
    let pod_field = format!("pod=\"{pod}\"");
    for line in log.lines() {
        if !line.contains("\"Calculated node's final score for pod\"") || !line.contains(&pod_field)
        {
            continue;
        }
        let field = |key: &str| {
            line.split(&format!(" {key}="))
                .nth(1)
                .and_then(|rest| rest.split(' ').next())
                .map(|v| v.trim_matches('"').to_string())
        };
        if let (Some(node), Some(Ok(score))) = (field("node"), field("score").map(|s| s.parse())) {
            scores.insert(node, score);
        }
    }
    scores
}

/// A scenario run side by side: first under kube-scheduler (started as `name` with `gates`, a
/// profile of a fresh schedulerName), then under a tether SchedulingProfile of its own (deleted
/// after); `run` is given the schedulerName and the scenario's name (`<name>-ref`,
/// `<name>-tether`). Returns (kube-scheduler's outcome, tether's).
pub async fn side_by_side<T, F, Fut>(name: &str, gates: &[&str], run: F) -> anyhow::Result<(T, T)>
where
    F: Fn(String, String) -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<T>>,
{
    let reference = format!("{name}-ref-{}", crate::unique_suffix());
    let kube = ReferenceScheduler::start_gated(
        &format!("kube-scheduler-{name}"),
        serde_json::json!({"profiles": [{"schedulerName": reference}]}),
        gates,
    )?;
    let upstream = run(reference, format!("{name}-ref")).await?;
    drop(kube);
    let ours = format!("{name}-tether-{}", crate::unique_suffix());
    let client = crate::client().await?;
    crate::apply_profile(&client, &ours, serde_json::json!({"schedulerName": ours})).await?;
    let tether = run(ours.clone(), format!("{name}-tether")).await?;
    crate::kubectl_ok(&["delete", "sp", &ours], None)?;
    Ok((upstream, tether))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_scores_of_one_pod() {
        let log = r#"I1123 10:00:00.1 1 schedule_one.go:1050] "Calculated node's final score for pod" pod="ns/a" node="n1" score=237
I1123 10:00:00.1 1 schedule_one.go:1050] "Calculated node's final score for pod" pod="ns/a" node="n2" score=90
I1123 10:00:00.1 1 schedule_one.go:1050] "Calculated node's final score for pod" pod="ns/ab" node="n1" score=5
I1123 10:00:00.2 1 other.go:1] "unrelated" pod="ns/a""#;
        let scores = parse_scores(log, "ns/a");
        assert_eq!(
            scores,
            BTreeMap::from([("n1".to_string(), 237), ("n2".to_string(), 90)])
        );
    }
}
