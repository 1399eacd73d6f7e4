//! `tether simulate -f profile.yaml` and `tether snapshot`: a profile change judged and
//! replayed against the cluster (or a snapshot file of it) before it merges.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;

use crate::api::SchedulingProfile;
use crate::simulate::{self, ClusterState, render};

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// The candidate SchedulingProfiles (YAML or JSON, one or more documents; - reads standard
    /// input). One with the name of an existing profile is a change to it.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Also replay the N most recently bound pods of the schedulerName.
    #[arg(long, default_value_t = 0)]
    pub replay_bound: usize,
    /// Replay against a file `tether snapshot` wrote instead of the cluster.
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    /// text; json or yaml for tools (an object of apiVersion tether.dev/v1alpha1, kind
    /// SimulationList, one item per candidate profile).
    #[arg(short, long, default_value = "text", value_parser = ["text", "json", "yaml"])]
    pub output: String,
    #[command(flatten)]
    pub kubeconfig: super::kubeconfig::KubeconfigArgs,
}

/// `tether snapshot`'s flags.
#[derive(clap::Args, Debug)]
pub struct SnapshotArgs {
    #[command(flatten)]
    pub kubeconfig: super::kubeconfig::KubeconfigArgs,
}

/// What `tether simulate` ends with.
pub enum Outcome {
    /// The candidates serve: the report, and how many placements would change.
    Report(String, usize),
    /// The candidate would not serve: the controller's words.
    Rejected(String),
}

/// Reads the candidate profiles: every SchedulingProfile among the documents of the file
/// (`kustomize build … | tether simulate -f -` works); other kinds are skipped with a warning.
fn read_candidates(path: &PathBuf) -> anyhow::Result<Vec<SchedulingProfile>> {
    let text = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the profiles from standard input")?;
        text
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    // YAML 1.2's booleans only (`true`/`false`): a value such as `n` or `off` stays a string.
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple_with_options(&text, options)
            .with_context(|| format!("{} is not YAML or JSON", path.display()))?;
    let mut profiles = Vec::new();
    for (i, value) in documents.into_iter().enumerate() {
        if value.is_null() {
            continue;
        }
        let kind = value
            .get("kind")
            .and_then(|k| k.as_str())
            .unwrap_or_default();
        if kind != "SchedulingProfile" {
            tracing::warn!(
                document = i + 1,
                kind,
                "skipped: only SchedulingProfiles are simulated"
            );
            continue;
        }
        let profile: SchedulingProfile = serde_json::from_value(value).with_context(|| {
            format!(
                "document {} of {} is not a valid SchedulingProfile",
                i + 1,
                path.display()
            )
        })?;
        profiles.push(profile);
    }
    anyhow::ensure!(
        !profiles.is_empty(),
        "{} holds no SchedulingProfile",
        path.display()
    );
    Ok(profiles)
}

pub async fn run(args: &SimulateArgs) -> anyhow::Result<Outcome> {
    let candidates = read_candidates(&args.file)?;
    let cluster = match &args.snapshot {
        Some(path) => ClusterState::load(path)?,
        None => {
            let client = args
                .kubeconfig
                .client()
                .await
                .context("reading the kubeconfig (or pass --snapshot)")?;
            ClusterState::read(&client).await?
        }
    };
    let replay_bound = args.replay_bound;
    let simulated = tokio::task::spawn_blocking(move || {
        simulate::simulate(&cluster, &candidates, replay_bound)
    })
    .await
    .context("the simulation panicked")?;
    Ok(match simulated {
        Err(rejected) => Outcome::Rejected(
            rejected
                .iter()
                .map(ToString::to_string)
                .collect::<Vec<_>>()
                .join("\n"),
        ),
        Ok(sims) => {
            let changes = sims.iter().map(|s| s.changes()).sum();
            let text = if matches!(args.output.as_str(), "json" | "yaml") {
                crate::cli::kubeconfig::structured("SimulationList", &sims, &args.output)?
            } else {
                sims.iter().map(render::text).collect::<Vec<_>>().join("\n")
            };
            Outcome::Report(text, changes)
        }
    })
}

/// `tether snapshot`: the cluster as JSON, for `tether simulate --snapshot`.
pub async fn snapshot(args: &SnapshotArgs) -> anyhow::Result<String> {
    let client = args.kubeconfig.client().await?;
    let state = ClusterState::read(&client).await?;
    Ok(serde_json::to_string(&state)? + "\n")
}
