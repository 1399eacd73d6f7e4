//! `tether simulate -f profile.yaml` and `tether snapshot`: a profile change judged and
//! replayed against the cluster (or a snapshot file of it) before it merges.

use std::io::Read;
use std::path::PathBuf;

use anyhow::Context;

use crate::api::SchedulingProfile;
use crate::simulate::{self, ClusterState, render};

#[derive(clap::Args, Debug)]
pub struct SimulateArgs {
    /// The candidate SchedulingProfile (YAML or JSON; - reads standard input). One with the
    /// name of an existing profile is a change to it.
    #[arg(short = 'f', long = "filename")]
    pub file: PathBuf,
    /// Also replay the N most recently bound pods of the schedulerName.
    #[arg(long, default_value_t = 0)]
    pub replay_bound: usize,
    /// Replay against a file `tether snapshot` wrote instead of the cluster.
    #[arg(long)]
    pub snapshot: Option<PathBuf>,
    /// text, or json for tools.
    #[arg(short, long, default_value = "text", value_parser = ["text", "json"])]
    pub output: String,
}

/// What `tether simulate` ends with.
pub enum Outcome {
    /// The candidate serves: the report.
    Report(String),
    /// The candidate would not serve: the controller's words.
    Rejected(String),
}

/// Reads the candidate profile.
fn read_candidate(path: &PathBuf) -> anyhow::Result<SchedulingProfile> {
    let text = if path.as_os_str() == "-" {
        let mut text = String::new();
        std::io::stdin()
            .read_to_string(&mut text)
            .context("reading the profile from standard input")?;
        text
    } else {
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
    };
    let head: serde_yaml::Value = serde_yaml::from_str(&text)
        .with_context(|| format!("{} is not YAML or JSON", path.display()))?;
    let kind = head
        .get("kind")
        .and_then(|k| k.as_str())
        .unwrap_or_default();
    anyhow::ensure!(
        kind == "SchedulingProfile",
        "{} holds a {kind:?}, not a SchedulingProfile (one object per file)",
        path.display()
    );
    let profile: SchedulingProfile = serde_yaml::from_value(head)
        .with_context(|| format!("{} is not a valid SchedulingProfile", path.display()))?;
    Ok(profile)
}

pub async fn run(args: &SimulateArgs) -> anyhow::Result<Outcome> {
    let candidate = read_candidate(&args.file)?;
    let cluster = match &args.snapshot {
        Some(path) => ClusterState::load(path)?,
        None => {
            let client = kube::Client::try_default()
                .await
                .context("reading the kubeconfig (or pass --snapshot)")?;
            ClusterState::read(&client).await?
        }
    };
    let replay_bound = args.replay_bound;
    let simulated =
        tokio::task::spawn_blocking(move || simulate::simulate(&cluster, &candidate, replay_bound))
            .await
            .context("the simulation panicked")?;
    Ok(match simulated {
        Err(rejected) => Outcome::Rejected(rejected.to_string()),
        Ok(sim) if args.output == "json" => {
            Outcome::Report(serde_json::to_string_pretty(&sim)? + "\n")
        }
        Ok(sim) => Outcome::Report(render::text(&sim)),
    })
}

/// `tether snapshot`: the cluster as JSON, for `tether simulate --snapshot`.
pub async fn snapshot() -> anyhow::Result<String> {
    let client = kube::Client::try_default()
        .await
        .context("reading the kubeconfig")?;
    let state = ClusterState::read(&client).await?;
    Ok(serde_json::to_string(&state)? + "\n")
}
