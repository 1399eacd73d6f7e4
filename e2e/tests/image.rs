//! tether's image, built here and run against the local control plane: `scripts/image.sh` (what
//! `make image` runs) builds it FROM scratch with podman, twice (the same image ID: it is
//! reproducible), from a static binary (the image holds no library), with its SBOM beside it; a
//! container of it schedules a pod. The tests build the `release` profile, minutes faster than
//! the `dist` (fat LTO) one `make image` ships.
//!
//! How the container runs in a sandbox without CAP_SYS_RESOURCE and with hybrid cgroups: podman
//! asks the runtime to *raise* RLIMIT_NOFILE and RLIMIT_NPROC to its defaults (1048576), which
//! only CAP_SYS_RESOURCE may do, so crun and runc both fail; limits at or below the current ones
//! are always allowed, so the container gets `--ulimit nofile=4096:4096 --ulimit
//! nproc=4096:4096`. crun refuses hybrid cgroup hierarchies outright; runc with podman's
//! cgroupfs manager runs there. The image itself is what any cluster runs: only the runtime's
//! settings differ, never the image (a chroot into its exported filesystem was the fallback,
//! not needed).
//!
//! Runs with the tether-down tests: the container is a second tether, serving every profile.

use std::process::{Command, Output};
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use tether_e2e::faults::curl;
use tether_e2e::{
    TestNamespace, TestNodes, apply, apply_profile, client, free_local_addr, kubectl_ok, repo_dir,
    unique_suffix, wait_bound, wait_for,
};

const TAG: &str = "localhost/tether:e2e";
/// The second build of the same commit.
const AGAIN: &str = "localhost/tether:e2e-again";

/// The regular files of a tar stream, sorted (directories left out).
fn list_tar(tar: &[u8]) -> anyhow::Result<Vec<String>> {
    let mut child = Command::new("tar")
        .args(["-t", "-v", "-f", "-"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()?;
    {
        use std::io::Write;
        let mut stdin = child.stdin.take().context("tar's stdin")?;
        stdin.write_all(tar)?;
    }
    let out = child.wait_with_output()?;
    let text = String::from_utf8(out.stdout)?;
    let mut files: Vec<String> = text
        .lines()
        .filter(|l| l.starts_with('-'))
        .filter_map(|l| l.split_whitespace().last())
        .map(|f| f.trim_start_matches("./").to_string())
        .collect();
    files.sort();
    Ok(files)
}

/// podman, with the runtime settings this sandbox needs (see the module's comment).
fn podman() -> Command {
    let mut cmd = Command::new("podman");
    cmd.args(["--runtime", "runc", "--cgroup-manager", "cgroupfs"]);
    cmd
}

const LIMITS: [&str; 4] = [
    "--ulimit",
    "nofile=4096:4096",
    "--ulimit",
    "nproc=4096:4096",
];

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<Output> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    anyhow::ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(out)
}

/// podman, and what the static build needs for `arch` (this machine's when none) through
/// e2e/scripts/install-musl.sh.
fn install_tools(arch: Option<&str>) -> anyhow::Result<()> {
    let scripts = repo_dir().join("e2e/scripts");
    run(
        &mut Command::new(scripts.join("install-podman.sh")),
        "e2e/scripts/install-podman.sh",
    )?;
    let mut musl = Command::new(scripts.join("install-musl.sh"));
    if let Some(arch) = arch {
        musl.env("ARCH", arch);
    }
    run(&mut musl, "e2e/scripts/install-musl.sh")?;
    Ok(())
}

/// Removes the container when the test ends, passed or failed; its log goes to
/// `.cluster/logs/tether-image.log` first.
struct Container(String);

impl Drop for Container {
    fn drop(&mut self) {
        if let Ok(out) = podman().args(["logs", &self.0]).output() {
            let mut log = out.stdout;
            log.extend_from_slice(&out.stderr);
            let _ = std::fs::write(repo_dir().join(".cluster/logs/tether-image.log"), log);
        }
        let _ = podman().args(["rm", "-f", "-t", "5", &self.0]).output();
    }
}

#[tokio::test]
async fn the_image_builds_from_scratch_and_its_tether_schedules_a_pod() -> anyhow::Result<()> {
    let repo = repo_dir();
    install_tools(None)?;
    // Built twice from the same commit (the second from scratch, no layer cache): the same
    // image ID, the digest of its config and layers.
    let mut ids = Vec::new();
    for tag in [TAG, AGAIN] {
        run(
            Command::new(repo.join("scripts/image.sh"))
                .arg(tag)
                .env("ENGINE", "podman")
                .env("PROFILE", "release")
                .current_dir(&repo),
            "scripts/image.sh",
        )?;
        let id = run(
            podman().args(["image", "inspect", "--format", "{{.Id}}", tag]),
            "podman image inspect",
        )?;
        ids.push(String::from_utf8(id.stdout)?.trim().to_string());
    }
    assert_eq!(ids[0], ids[1], "two builds of one commit, one image");
    let _ = podman().args(["rmi", AGAIN]).output();

    // Exactly the static binary, CA certificates, passwd and group: no host library.
    let container = format!("tether-e2e-files-{}", unique_suffix());
    run(
        podman().args(["create", "--name", &container, TAG]),
        "podman create",
    )?;
    let exported = podman().args(["export", &container]).output()?;
    let _ = podman().args(["rm", &container]).output();
    let files = list_tar(&exported.stdout)?;
    assert_eq!(
        files,
        [
            "etc/group",
            "etc/passwd",
            "etc/ssl/certs/ca-certificates.crt",
            "usr/local/bin/tether",
        ],
        "the image's files"
    );
    // The SBOM beside it names what went into the binary, at the versions Cargo.lock holds.
    let sbom: serde_json::Value =
        serde_json::from_slice(&std::fs::read(repo.join("target/image/sbom.cdx.json"))?)?;
    let components = sbom["components"].as_array().cloned().unwrap_or_default();
    let version_of = |name: &str| {
        components
            .iter()
            .find(|c| c["name"] == name)
            .and_then(|c| c["version"].as_str().map(str::to_string))
    };
    assert!(
        version_of("kube").is_some_and(|v| v.starts_with("5.")),
        "kube in the SBOM: {:?}",
        version_of("kube")
    );
    assert!(
        version_of("k8s-openapi").is_some_and(|v| v.starts_with("0.29")),
        "k8s-openapi in the SBOM"
    );

    // What the image is: user 65532, the commit it was built from, no shell.
    let commit = String::from_utf8(
        run(
            Command::new("git")
                .args(["rev-parse", "--short=12", "HEAD"])
                .current_dir(&repo),
            "git rev-parse",
        )?
        .stdout,
    )?
    .trim()
    .to_string();
    let config: serde_json::Value = serde_json::from_slice(
        &run(
            podman().args(["image", "inspect", "--format", "{{json .Config}}", TAG]),
            "podman image inspect",
        )?
        .stdout,
    )?;
    assert_eq!(config["User"], "65532:65532", "{config:#}");
    assert_eq!(
        config["Labels"]["org.opencontainers.image.revision"], commit,
        "{config:#}"
    );
    let version = run(
        podman()
            .args(["run", "--rm"])
            .args(LIMITS)
            .args([TAG, "version"]),
        "tether version in the image",
    )?;
    let version = String::from_utf8_lossy(&version.stdout).into_owned();
    assert!(
        version.contains(&commit)
            && version.contains("schedules as kube-scheduler of the cluster's release"),
        "{version}"
    );
    let shell = podman()
        .args(["run", "--rm", "--entrypoint", "/bin/sh"])
        .args(LIMITS)
        .args([TAG, "-c", "true"])
        .output()?;
    assert!(!shell.status.success(), "the image has no shell");

    // Run it as the tether ServiceAccount (the kubeconfig tether-up.sh wrote), on the host's
    // network, where the API server listens on 127.0.0.1.
    let kubeconfig = repo.join(".cluster/tether.kubeconfig");
    anyhow::ensure!(
        kubeconfig.exists(),
        "{} is missing: tether-up.sh writes it",
        kubeconfig.display()
    );
    let (metrics, health) = (free_local_addr()?, free_local_addr()?);
    let suffix = unique_suffix();
    let name = format!("tether-e2e-image-{suffix}");
    let started = run(
        podman()
            .args(["run", "-d", "--name", &name, "--network", "host"])
            .args(LIMITS)
            .arg("-v")
            .arg(format!(
                "{}:/etc/tether/kubeconfig:ro",
                kubeconfig.display()
            ))
            .args(["-e", "KUBECONFIG=/etc/tether/kubeconfig"])
            .args(["-e", "RUST_LOG=info,tether=debug"])
            .args([TAG, "run", "--instance", "tether-image", "--http-addr"])
            .arg(metrics.to_string())
            .arg("--health-addr")
            .arg(health.to_string()),
        "podman run",
    )?;
    let _container = Container(name.clone());
    anyhow::ensure!(
        !started.stdout.is_empty(),
        "podman run printed no container ID"
    );
    wait_for(
        "the image's tether to be ready",
        Duration::from_secs(90),
        || {
            let url = format!("http://{health}/readyz");
            async move { Ok(curl(&url)?.filter(|body| body.starts_with("ok"))) }
        },
    )
    .await?;

    let client = client().await?;
    let ns = TestNamespace::create(&client, "image").await?;
    let nodes = TestNodes::create(&client, "image", 2, "4", |_, _| {}).await?;
    let scheduler = format!("image-{suffix}");
    apply_profile(&client, &scheduler, json!({"schedulerName": scheduler})).await?;
    let mut spec = json!({"schedulerName": scheduler,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "1"}}}]});
    nodes.isolate(&mut spec);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "scheduled", "namespace": ns.name}, "spec": spec}))?;
    let node = wait_bound(&client, &ns.name, "scheduled", Duration::from_secs(60)).await?;
    assert!(nodes.names.contains(&node), "bound to {node}");
    let scraped = curl(&format!("http://{metrics}/metrics"))?.unwrap_or_default();
    assert!(
        scraped.contains("scheduler_schedule_attempts_total"),
        "the container's /metrics answers"
    );

    kubectl_ok(&["delete", "sp", &scheduler], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// The arm64 image, cross-built on this x86_64 machine (`ARCH=arm64 scripts/image.sh`: Debian's
/// aarch64 gcc compiles the C parts and links against Rust's own musl), FROM scratch for
/// linux/arm64, static; its binary, taken out of the image, runs under qemu-user. A second
/// static build of minutes, so not in `make test`: `make image-arm64-check`.
#[test]
#[ignore = "cross-builds a second static binary (minutes): make image-arm64-check"]
fn the_arm64_image_cross_builds_and_its_binary_runs_under_qemu() -> anyhow::Result<()> {
    if std::env::consts::ARCH != "x86_64" {
        eprintln!("not on x86_64: the release workflow builds arm64 on an arm64 runner");
        return Ok(());
    }
    let repo = repo_dir();
    install_tools(Some("aarch64"))?;
    let tag = "localhost/tether:e2e-arm64";
    run(
        Command::new(repo.join("scripts/image.sh"))
            .arg(tag)
            .env("ENGINE", "podman")
            .env("PROFILE", "release")
            .env("ARCH", "arm64")
            .current_dir(&repo),
        "ARCH=arm64 scripts/image.sh",
    )?;
    let platform = run(
        podman().args([
            "image",
            "inspect",
            "--format",
            "{{.Os}}/{{.Architecture}}",
            tag,
        ]),
        "podman image inspect",
    )?;
    assert_eq!(String::from_utf8(platform.stdout)?.trim(), "linux/arm64");
    let container = format!("tether-e2e-arm64-{}", unique_suffix());
    run(
        podman().args(["create", "--name", &container, tag]),
        "podman create",
    )?;
    let dir = repo.join("target/e2e-arm64");
    std::fs::create_dir_all(&dir)?;
    let bin = dir.join("tether");
    let copied = podman()
        .args(["cp", &format!("{container}:/usr/local/bin/tether")])
        .arg(&bin)
        .output();
    let _ = podman().args(["rm", "-f", &container]).output();
    let _ = podman().args(["rmi", tag]).output();
    anyhow::ensure!(copied?.status.success(), "podman cp of the binary failed");
    let kind = run(Command::new("file").arg(&bin), "file")?;
    let kind = String::from_utf8(kind.stdout)?;
    assert!(
        kind.contains("ARM aarch64") && kind.contains("statically linked"),
        "{kind}"
    );
    let version = run(
        Command::new("qemu-aarch64-static").arg(&bin).arg("version"),
        "tether version under qemu-aarch64-static",
    )?;
    let said = String::from_utf8(version.stdout)?;
    assert!(said.starts_with("tether "), "{said}");
    Ok(())
}
