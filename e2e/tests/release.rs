//! The release process for this machine's architecture, as .github/workflows/release.yml runs it
//! before publishing: actionlint passes the workflow; `scripts/release.sh` makes the archive of
//! the static binary, its SBOM, the packaged chart, the krew manifest and the checksums; the
//! checksums hold, krew's own validator takes the manifest, and krew installs the kubectl plugin
//! from the local archive, after which `kubectl tether` runs. A tag that does not match the
//! versions is refused. (Publishing, signing and the arm64 build run only in the workflow.)
//!
//! Runs with the tether-down tests (it needs no cluster; it builds the static binary, which the
//! image test builds too: one build serves both).

use std::path::PathBuf;
use std::process::Command;

use anyhow::{Context, anyhow, ensure};
use tether_e2e::repo_dir;

fn run(cmd: &mut Command, what: &str) -> anyhow::Result<String> {
    let out = cmd.output().with_context(|| format!("running {what}"))?;
    ensure!(
        out.status.success(),
        "{what} failed ({}):\n{}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// actionlint, krew and validate-krew-manifest, built once into the cache.
fn tools() -> anyhow::Result<PathBuf> {
    let script = repo_dir().join("e2e/scripts/build-release-tools.sh");
    let out = run(&mut Command::new(&script), "build-release-tools.sh")?;
    let dir = out.lines().last().unwrap_or_default().trim();
    ensure!(!dir.is_empty(), "build-release-tools.sh named no directory");
    Ok(PathBuf::from(dir))
}

/// The cached kubectl and the helm beside it (e2e/scripts/build-helm.sh).
fn kubectl_and_helm() -> anyhow::Result<(PathBuf, PathBuf)> {
    let kubectl = PathBuf::from(std::env::var_os("TETHER_KUBECTL").ok_or_else(|| {
        anyhow!("TETHER_KUBECTL is not set: run the end-to-end tests through `make e2e`")
    })?);
    let helm = kubectl.with_file_name("helm");
    ensure!(
        helm.exists(),
        "{} is missing: e2e/scripts/build-helm.sh builds it",
        helm.display()
    );
    Ok((kubectl, helm))
}

fn cargo_version() -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(repo_dir().join("Cargo.toml"))?;
    manifest
        .lines()
        .find_map(|l| l.strip_prefix("version = \""))
        .and_then(|v| v.strip_suffix('"'))
        .map(str::to_string)
        .context("no version in Cargo.toml")
}

#[test]
fn the_release_workflow_passes_actionlint() -> anyhow::Result<()> {
    let tools = tools()?;
    let repo = repo_dir();
    run(
        Command::new(tools.join("actionlint"))
            .arg("-no-color")
            .arg(".github/workflows/release.yml")
            .current_dir(&repo),
        "actionlint",
    )?;
    Ok(())
}

#[test]
fn a_release_is_made_for_this_architecture_and_its_plugin_installs_with_krew() -> anyhow::Result<()>
{
    let tools = tools()?;
    let (kubectl, helm) = kubectl_and_helm()?;
    let repo = repo_dir();
    let version = cargo_version()?;
    let tag = format!("v{version}");
    run(
        &mut Command::new(repo.join("e2e/scripts/install-musl.sh")),
        "e2e/scripts/install-musl.sh",
    )?;
    let release = |tag: &str| {
        let mut cmd = Command::new(repo.join("scripts/release.sh"));
        cmd.arg(tag)
            .env("PROFILE", "release")
            .env("HELM", &helm)
            .env("TETHER_REPOSITORY", "example/tether")
            .current_dir(&repo);
        cmd
    };

    // A tag the versions do not say is refused, naming the mismatch.
    let wrong = release("v9.9.9").output()?;
    assert!(
        !wrong.status.success(),
        "a tag for another version is refused"
    );
    let said = String::from_utf8_lossy(&wrong.stderr);
    assert!(
        said.contains(&format!("Cargo.toml says {version}, the tag v9.9.9")),
        "{said}"
    );

    run(&mut release(&tag), "scripts/release.sh")?;
    let dir = repo.join("target/publish").join(&tag);
    let arch = match std::env::consts::ARCH {
        "x86_64" => "amd64",
        "aarch64" => "arm64",
        other => anyhow::bail!("no release for {other}"),
    };
    let archive = format!("tether-{tag}-linux-{arch}.tar.gz");
    for file in [
        archive.as_str(),
        &format!("tether-{tag}-linux-{arch}.sbom.cdx.json"),
        &format!("tether-{version}.tgz"),
        "tether.yaml",
        "checksums.txt",
    ] {
        ensure!(dir.join(file).exists(), "{} is missing", file);
    }
    run(
        Command::new("sha256sum")
            .args(["-c", "checksums.txt"])
            .current_dir(&dir),
        "sha256sum -c checksums.txt",
    )?;
    let listed = run(
        Command::new("tar")
            .args(["-tzf", &archive])
            .current_dir(&dir),
        "tar -t",
    )?;
    let mut files: Vec<&str> = listed.lines().collect();
    files.sort();
    assert_eq!(files, ["LICENSE", "README.md", "tether"]);
    let chart = run(
        Command::new(&helm)
            .args(["show", "chart"])
            .arg(dir.join(format!("tether-{version}.tgz"))),
        "helm show chart",
    )?;
    assert!(chart.contains(&format!("appVersion: {version}")), "{chart}");
    // The released chart's alerts point at the runbooks of the tag it was released from.
    let rules = run(
        Command::new(&helm)
            .arg("template")
            .arg(dir.join(format!("tether-{version}.tgz")))
            .args(["--set", "alerts.prometheusRule.enabled=true"]),
        "helm template",
    )?;
    let runbook = format!(
        "runbook_url: https://github.com/example/tether/blob/{tag}/docs/operate.md#tethernoleader"
    );
    assert!(rules.contains(&runbook), "{runbook} in:\n{rules}");
    assert!(
        !rules.contains("runbook_url: https://github.com/tether-dev/"),
        "{rules}"
    );

    // krew's validator takes the manifest; krew installs the plugin from the local archive,
    // checking its sha256, and `kubectl tether` runs it.
    run(
        Command::new(tools.join("validate-krew-manifest"))
            .arg("-manifest")
            .arg(dir.join("tether.yaml"))
            .arg("-skip-install"),
        "validate-krew-manifest",
    )?;
    let krew_root = tempdir("krew")?;
    run(
        Command::new(tools.join("krew"))
            .arg("install")
            .arg(format!("--manifest={}", dir.join("tether.yaml").display()))
            .arg(format!("--archive={}", dir.join(&archive).display()))
            .env("KREW_ROOT", &krew_root),
        "krew install",
    )?;
    let path = format!(
        "{}:{}",
        krew_root.join("bin").display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let said = run(
        Command::new(&kubectl)
            .args(["tether", "version"])
            .env("PATH", path),
        "kubectl tether version",
    )?;
    assert!(said.contains(&version), "{said}");
    let _ = std::fs::remove_dir_all(&krew_root);
    Ok(())
}

/// A directory of the test's own under target/.
fn tempdir(name: &str) -> anyhow::Result<PathBuf> {
    let dir = repo_dir()
        .join("target/e2e-tmp")
        .join(format!("{name}-{}", tether_e2e::unique_suffix()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}
