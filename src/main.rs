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

fn init_logging(format: &str) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
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
