//! The README's kind quickstart, its commands run as written (by bash, with `kubectl`, `helm`
//! and the `kubectl-tether` plugin on the PATH) against the local control plane. Two lines
//! cannot run here and are covered elsewhere: `kind create cluster` (no container runtime for
//! kind's nodes; the local control plane stands in) and `kind load` (image.rs builds and runs
//! the image `make image` makes; kwok runs the chart's pods without pulling it). `cargo install`
//! is the tether binary the tests run. The names the shared cluster already holds (the
//! namespace `tether-system`, the release `tether`, the profile `default` of schedulerName
//! `tether-scheduler`) are made unique; every other word is the README's. The chart's pods run
//! on kwok, so the shared tether `make e2e` started stands in for them: it serves the release's
//! profile and answers the explanation, as the release would.
//!
//! It runs alone, after the shared tests (see the Makefile): it schedules a pod in `default`
//! with the profile the release makes.

use std::path::PathBuf;
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, ensure};
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{kubeconfig_path, kubectl, repo_dir, tether_bin, unique_suffix, wait_for};

const TIMEOUT: Duration = Duration::from_secs(120);

/// The commands of the README's ```sh block after `marker`, one per line, comments and blank
/// lines left out, continuation lines joined.
fn readme_block(marker: &str) -> anyhow::Result<Vec<String>> {
    let readme = std::fs::read_to_string(repo_dir().join("README.md"))?;
    let after = readme
        .split_once(marker)
        .with_context(|| format!("README.md has no {marker:?}"))?
        .1;
    let block = after
        .split_once("```sh\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .context("no sh block after the marker")?
        .0;
    let mut commands = Vec::new();
    let mut pending = String::new();
    for line in block.lines() {
        // A comment starts at `  #` (two spaces, as the README aligns them); no command of the
        // block holds that sequence.
        let line = line.split_once("  #").map_or(line, |(command, _)| command);
        let line = line.trim_end();
        if let Some(start) = line.strip_suffix('\\') {
            pending.push_str(start);
            continue;
        }
        pending.push_str(line);
        let command = std::mem::take(&mut pending).trim().to_string();
        if !command.is_empty() {
            commands.push(command);
        }
    }
    Ok(commands)
}

/// A directory holding `kubectl`, `helm` and `kubectl-tether`, put first on the PATH the
/// commands run with. Removed when dropped.
struct Tools {
    dir: PathBuf,
}

impl Tools {
    fn new() -> anyhow::Result<Self> {
        let dir = std::env::temp_dir().join(format!("tether-quickstart-{}", unique_suffix()));
        std::fs::create_dir_all(&dir)?;
        let kubectl = PathBuf::from(std::env::var("TETHER_KUBECTL")?);
        let helm = std::env::var_os("TETHER_HELM")
            .map(PathBuf::from)
            .unwrap_or_else(|| kubectl.with_file_name("helm"));
        for (name, target) in [
            ("kubectl", kubectl),
            ("helm", helm),
            ("kubectl-tether", tether_bin()),
        ] {
            std::os::unix::fs::symlink(&target, dir.join(name))?;
        }
        Ok(Tools { dir })
    }

    /// Runs `command` with bash in the repository, as a person at its root would.
    fn run(&self, command: &str) -> anyhow::Result<(bool, String)> {
        let home = std::env::temp_dir().join("tether-e2e-helm");
        let out = Command::new("bash")
            .args(["-c", command])
            .current_dir(repo_dir())
            .env(
                "PATH",
                format!(
                    "{}:{}",
                    self.dir.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
            )
            .env("KUBECONFIG", kubeconfig_path())
            .env("HELM_CONFIG_HOME", home.join("config"))
            .env("HELM_CACHE_HOME", home.join("cache"))
            .env("HELM_DATA_HOME", home.join("data"))
            .env_remove("TETHER_TOKEN_FILE")
            .env_remove("TETHER_ENDPOINT")
            .output()
            .with_context(|| format!("running {command}"))?;
        Ok((
            out.status.success(),
            format!(
                "{}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ),
        ))
    }
}

impl Drop for Tools {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Where the test leaves the cluster as it found it, whatever happened.
struct Cleanup {
    namespace: String,
    release: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let _ = kubectl(
            &[
                "delete",
                "pod",
                "hello",
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
        if let Ok(tools) = Tools::new() {
            let _ = tools.run(&format!(
                "helm uninstall {} -n {} --wait --timeout 60s",
                self.release, self.namespace
            ));
        }
        let _ = kubectl(
            &["delete", "namespace", &self.namespace, "--wait=false"],
            None,
        );
    }
}

#[tokio::test]
async fn the_readme_kind_quickstart_runs_as_written() -> anyhow::Result<()> {
    let commands = readme_block("**On kind**, no registry needed:")?;
    ensure!(commands.len() >= 8, "the quickstart: {commands:?}");
    let suffix = unique_suffix();
    let (namespace, release) = (format!("qs-system-{suffix}"), format!("qs-{suffix}"));
    let scheduler = format!("{release}-scheduler");
    let tools = Tools::new()?;
    kubectl(&["delete", "pod", "hello", "--ignore-not-found"], None)?;
    let _cleanup = Cleanup {
        namespace: namespace.clone(),
        release: release.clone(),
    };
    let mut ran = Vec::new();
    for command in &commands {
        // Here, not runnable: see the module's comment.
        if command.starts_with("kind ")
            || command.starts_with("make image")
            || command.starts_with("cargo install")
        {
            continue;
        }
        let command = command
            .replace("tether-system", &namespace)
            .replace("helm install tether ", &format!("helm install {release} "))
            .replace(
                "defaultProfile.enabled=true",
                &format!(
                    "defaultProfile.enabled=true,defaultProfile.name={release},defaultProfile.schedulerName={scheduler}"
                ),
            )
            .replace("\"tether-scheduler\"", &format!("\"{scheduler}\""));
        let (ok, said) = if command.starts_with("helm install") {
            // The chart's pods name no scheduler: kube-scheduler places them, as on any
            // cluster, while `--wait` waits for them.
            let _default = ReferenceScheduler::start_preempting(
                "quickstart-default-scheduler",
                &["default-scheduler"],
            )?;
            tools.run(&command)?
        } else if command.starts_with("kubectl get sp") {
            // The profile is Ready once tether has served it.
            wait_for("the release's profile Ready", TIMEOUT, || async {
                let (ok, said) = tools.run(&command)?;
                let ready = said
                    .lines()
                    .any(|l| l.starts_with(&format!("{release} ")) && l.contains("True"));
                Ok((ok && ready).then_some((ok, said)))
            })
            .await?
        } else if command.contains("get events") {
            wait_for("hello's Scheduled event", TIMEOUT, || async {
                let (ok, said) = tools.run(&command)?;
                Ok((ok && said.contains("Scheduled")).then_some((ok, said)))
            })
            .await?
        } else {
            tools.run(&command)?
        };
        ensure!(ok, "{command}:\n{said}");
        ran.push((command, said));
    }
    let said = |prefix: &str| {
        ran.iter()
            .find(|(c, _)| c.starts_with(prefix))
            .map(|(_, s)| s.clone())
            .unwrap_or_default()
    };
    // hello is bound by the release's profile (its schedulerName is the one the run names).
    let node = tether_e2e::kubectl_ok(
        &[
            "get",
            "pod",
            "hello",
            "-o",
            "jsonpath={.spec.schedulerName} {.spec.nodeName}",
        ],
        None,
    )?;
    let (named, bound) = node.trim().split_once(' ').unwrap_or_default();
    assert!(named == scheduler && !bound.is_empty(), "hello: {node}");
    let explained = said("kubectl tether explain");
    assert!(
        explained.contains(&format!("Bound to {bound}")),
        "kubectl tether explain default/hello: {explained}"
    );
    assert!(
        ran.iter().any(|(c, _)| c.starts_with("helm install")),
        "the quickstart installs the chart: {commands:?}"
    );
    Ok(())
}
