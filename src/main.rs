//! The `tether` binary.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// tether: a Kubernetes scheduler whose scheduling policy lives in custom resources.
#[derive(Parser, Debug)]
#[command(name = "tether", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the scheduler against the cluster of the current kubeconfig (or in-cluster config).
    Run(RunArgs),
    /// Print the CustomResourceDefinitions of tether.dev as YAML, for `kubectl apply -f -`.
    Crd,
}

#[derive(Args, Debug)]
struct RunArgs {
    /// Where /metrics is served.
    #[arg(long, env = "TETHER_HTTP_ADDR", default_value = "0.0.0.0:8080")]
    http_addr: SocketAddr,
    /// Where /healthz and /readyz (the probes) are served.
    #[arg(long, env = "TETHER_HEALTH_ADDR", default_value = "0.0.0.0:8081")]
    health_addr: SocketAddr,
    /// Threads running Filter and Score over the nodes (default: one per CPU).
    #[arg(long, env = "TETHER_PARALLELISM")]
    parallelism: Option<usize>,
    /// Log format: text or json. The level comes from RUST_LOG (default info).
    #[arg(long, env = "TETHER_LOG_FORMAT", default_value = "text")]
    log_format: String,
    /// This replica's name, recorded on the events it publishes (the pod name in a Deployment).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// After SIGTERM: how long binds in flight (and their history writes) may take to finish,
    /// in seconds. Keep it below the pod's terminationGracePeriodSeconds (30 by default).
    #[arg(long, env = "TETHER_SHUTDOWN_GRACE_SECONDS", default_value_t = 20)]
    shutdown_grace_seconds: u64,
    /// Owner kinds to follow besides ReplicaSet, Deployment, StatefulSet, Job and KubeVirt's
    /// VirtualMachine(Instance), as group/Kind (e.g. apps.kruise.io/StatefulSet), comma
    /// separated. tether never reads other kinds; grant it get/list/watch on these.
    #[arg(long, env = "TETHER_OWNER_KINDS", value_delimiter = ',')]
    owner_kinds: Vec<String>,
}

/// The log filter: RUST_LOG (default `info`), with the API client's own per-request lines
/// turned off unless RUST_LOG names the client. tether logs every failure itself, with its
/// context and once per backoff step; the client would add a line per failed request (over 400
/// ERROR lines in a 30-second API server outage).
fn log_filter(rust_log: Option<&str>) -> EnvFilter {
    let spec = rust_log.filter(|s| !s.trim().is_empty()).unwrap_or("info");
    let mut filter = EnvFilter::try_new(spec).unwrap_or_else(|_| EnvFilter::new("info"));
    for quiet in ["kube_client", "kube_runtime"] {
        if !spec.contains(quiet)
            && let Ok(directive) = format!("{quiet}=off").parse()
        {
            filter = filter.add_directive(directive);
        }
    }
    filter
}

fn init_logging(format: &str) {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    if format == "json" {
        builder.json().init();
    } else {
        builder.init();
    }
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
        Command::Run(args) => {
            init_logging(&args.log_format);
            let parallelism = args
                .parallelism
                .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
            let config = tether::run::RunConfig {
                http_addr: args.http_addr,
                health_addr: args.health_addr,
                parallelism,
                instance: args.instance,
                shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace_seconds),
                owner_kinds: args.owner_kinds,
            };
            let runtime = tokio::runtime::Builder::new_multi_thread()
                .enable_all()
                .thread_name("tether-io")
                .build()
                .context("starting the tokio runtime")?;
            runtime.block_on(tether::run::run(config))?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_clients_per_request_lines_are_off_unless_asked_for() {
        let quiet = log_filter(Some("info,tether=debug")).to_string();
        assert!(
            quiet.contains("kube_client=off") && quiet.contains("kube_runtime=off"),
            "{quiet}"
        );
        let asked = log_filter(Some("info,kube_client=debug")).to_string();
        assert!(
            !asked.contains("kube_client=off") && asked.contains("kube_runtime=off"),
            "{asked}"
        );
        assert!(log_filter(None).to_string().contains("info"));
    }
}
