//! `tether pending` (also `kubectl tether pending`): asks the running leader why every pending
//! pod of a namespace (or of all) is pending, grouped by what blocks it, and prints the groups.

use anyhow::Context;

use super::explain::{Endpoint, Question};
use crate::scheduler::explain::pending::{self, PendingSummary};

/// Which pods and how to print.
#[derive(clap::Args, Debug)]
pub struct PendingArgs {
    /// The namespace; by default the kubeconfig's.
    #[arg(short, long, conflicts_with = "all_namespaces")]
    pub namespace: Option<String>,
    /// Every namespace (you need list on pods across the cluster; asked of the leader
    /// directly, with --token-file).
    #[arg(short = 'A', long)]
    pub all_namespaces: bool,
    #[command(flatten)]
    pub endpoint: Endpoint,
    /// text; wide adds where the pods wait and names up to five of each group; json or yaml
    /// for tools (an object of apiVersion tether.dev/v1alpha1, kind PendingSummary).
    #[arg(short, long, default_value = "text", value_parser = ["text", "wide", "json", "yaml"])]
    pub output: String,
}

/// Runs `tether pending`; the text to print.
pub async fn run(args: &PendingArgs) -> anyhow::Result<String> {
    let (route, default_namespace) = args.endpoint.route().await?;
    let namespace = args.namespace.clone().unwrap_or(default_namespace);
    let question = if args.all_namespaces {
        Question::Pending { namespace: None }
    } else {
        anyhow::ensure!(!namespace.is_empty(), "no namespace: give -n or -A");
        Question::Pending {
            namespace: Some(&namespace),
        }
    };
    let body = Endpoint::ask(&route, question).await?;
    let summary: PendingSummary =
        serde_json::from_str(&body).context("reading the endpoint's answer")?;
    Ok(match args.output.as_str() {
        format @ ("json" | "yaml") => {
            super::kubeconfig::structured("PendingSummary", &summary, format)?
        }
        wide => pending::text(&summary, wide == "wide"),
    })
}
