//! The `tether` binary.

use std::io::Write;

use anyhow::Context;
use clap::{Parser, Subcommand};

/// tether: a Kubernetes scheduler whose scheduling policy lives in custom resources.
#[derive(Parser, Debug)]
#[command(name = "tether", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Print the CustomResourceDefinitions of tether.dev as YAML, for `kubectl apply -f -`.
    Crd,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crd => {
            let yaml = tether::api::crds_yaml().context("serializing the CRDs")?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .context("writing the CRDs to stdout")?;
        }
    }
    Ok(())
}
