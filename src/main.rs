//! The `tether` binary.

use std::io::Write;
use std::net::SocketAddr;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use tracing_subscriber::EnvFilter;

/// mimalloc instead of the system allocator: with glibc's per-thread arenas, tether's resident
/// memory ran to nearly three times its live heap under a burst of pods (`make bench`).
#[cfg(not(feature = "system-allocator"))]
#[global_allocator]
static ALLOCATOR: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Has mimalloc give memory freed back to the system at once rather than a second later (its
/// `purge_delay`, 1,000 ms in mimalloc 3), unless `MIMALLOC_PURGE_DELAY` says otherwise. A burst
/// of pods frees what decoding them and each binding cycle used while more is being allocated;
/// with the delay the freed pages still counted in tether's resident memory at its peak
/// (500 nodes, 5,000 spreading pods, `make bench`: 157 MiB, 122 MiB at once, for a live heap
/// of 62 MiB).
#[cfg(not(feature = "system-allocator"))]
fn purge_freed_memory_at_once() {
    /// `mi_option_purge_delay` in `mi_option_t` (mimalloc.h, the same in mimalloc 2 and 3);
    /// libmimalloc-sys does not name it.
    const MI_OPTION_PURGE_DELAY: libmimalloc_sys::mi_option_t = 15;
    if std::env::var_os("MIMALLOC_PURGE_DELAY").is_none() {
        // SAFETY: mi_option_set only stores the option's value; mimalloc reads it each time it
        // schedules a purge, and any value is valid for this option.
        unsafe { libmimalloc_sys::mi_option_set(MI_OPTION_PURGE_DELAY, 0) };
    }
}

#[cfg(feature = "system-allocator")]
fn purge_freed_memory_at_once() {}

/// The version and the commit built from (see build.rs), and the Kubernetes release whose
/// kube-scheduler tether matches.
const VERSION: &str = concat!(
    env!("CARGO_PKG_VERSION"),
    " (commit ",
    env!("TETHER_COMMIT"),
    "; schedules as kube-scheduler of the cluster's release, 1.36 to 1.38)"
);

/// tether: a Kubernetes scheduler whose scheduling policy lives in custom resources.
#[derive(Parser, Debug)]
#[command(name = "tether", version = VERSION, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Run the scheduler against the cluster of the current kubeconfig (or in-cluster config).
    Run(Box<RunArgs>),
    /// Print the CustomResourceDefinitions of tether.dev as YAML, for `kubectl apply -f -`.
    Crd {
        /// Print the API reference (Markdown, docs/reference.md) instead.
        #[arg(long)]
        reference: bool,
    },
    /// Why a pod went where it went, or why it is pending: asks the running leader to run the
    /// pod's profile again, dry, and prints every filter verdict and score.
    Explain(tether::cli::explain::ExplainArgs),
    /// Why every pending pod of a namespace (or of all, -A) is pending, grouped by what blocks
    /// it (the plugins that rejected it and their reasons, a gate, not tried yet), from the
    /// running leader's queue.
    Pending(tether::cli::pending::PendingArgs),
    /// What SchedulingProfile changes would do: judges them as the controller would, then
    /// places the pending pods of each one's schedulerName with it and with the live profile,
    /// and prints the placements that differ. Exits 0 when no placement would change, 1 when
    /// some would, 2 when a profile would not serve or the simulation failed (as `kubectl
    /// diff`).
    Simulate(tether::cli::simulate::SimulateArgs),
    /// Print the cluster as tether's scheduler sees it (nodes, pods, profiles, bindings, ...)
    /// as JSON, for `tether simulate --snapshot`.
    Snapshot(tether::cli::simulate::SnapshotArgs),
    /// Print tether's version, the commit it was built from, and the kube-scheduler release it
    /// matches.
    Version,
    /// Print a completion script for `shell` (bash, zsh, fish, elvish or powershell), e.g.
    /// `source <(tether completion bash)`.
    Completion { shell: clap_complete::Shell },
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
    /// Log format. The level comes from RUST_LOG (default info).
    #[arg(long, env = "TETHER_LOG_FORMAT", value_enum, default_value_t = LogFormat::Text)]
    log_format: LogFormat,
    /// This replica's name, recorded on the events it publishes (the pod name in a Deployment).
    #[arg(long, env = "POD_NAME")]
    instance: Option<String>,
    /// After SIGTERM: how long binds in flight (and their history writes) may take to finish,
    /// in seconds. Keep it below the pod's terminationGracePeriodSeconds (30 by default).
    #[arg(long, env = "TETHER_SHUTDOWN_GRACE_SECONDS", default_value_t = 20)]
    shutdown_grace_seconds: u64,
    /// How long, in seconds, a counted bind stays named in its StickyBinding's countedPods
    /// before `countedBefore` vouches for it: longer than a bind takes to reach tether's watch
    /// and its history write. Raise it when the API server's watches lag by minutes.
    #[arg(long, env = "TETHER_HISTORY_SETTLE_SECONDS", default_value_t = 120)]
    history_settle_seconds: u64,
    /// How long, in seconds, a watch that pods need may stay stale before tether says so
    /// loudly: /readyz answers 503 naming it, and each SchedulingProfile whose pods wait for it
    /// has WatchesCurrent=False (5 to 3600).
    #[arg(long, env = "TETHER_WATCH_STALE_SECONDS", default_value_t = 120)]
    watch_stale_seconds: u64,
    /// Schedule as kube-scheduler of this Kubernetes minor (e.g. 1.37) instead of the one the
    /// API server's /version names: for a distribution whose version tether cannot read, or to
    /// keep the old minor's behaviour through a control plane upgrade. 1.36 to 1.38.
    #[arg(long, env = "TETHER_KUBERNETES_RELEASE", value_parser = parse_release)]
    kubernetes_release: Option<tether::k8s::release::Release>,
    /// Owner kinds to follow besides ReplicaSet, Deployment, StatefulSet, Job and KubeVirt's
    /// VirtualMachine(Instance), as group/Kind (e.g. apps.kruise.io/StatefulSet), comma
    /// separated. tether never reads other kinds; grant it get/list/watch on these.
    #[arg(long, env = "TETHER_OWNER_KINDS", value_delimiter = ',')]
    owner_kinds: Vec<String>,
    /// Feature gates as kube-scheduler's `--feature-gates` (`Name=true,...`); tether takes
    /// DRAWorkloadResourceClaims (off by default, as upstream's beta): turn it on with the same
    /// gate of kube-apiserver and kube-controller-manager.
    #[arg(long, env = "TETHER_FEATURE_GATES", default_value = "", value_parser = parse_feature_gates)]
    feature_gates: tether::k8s::features::FeatureGates,
    /// Take part in leader election on a Lease, so that of several replicas exactly one
    /// schedules and writes while the others stand by with warm caches.
    #[arg(long, env = "TETHER_LEADER_ELECT", default_value_t = false, action = clap::ArgAction::Set, num_args = 0..=1, default_missing_value = "true")]
    leader_elect: bool,
    /// How long a Lease not renewed keeps the other replicas from taking it (e.g. 15s).
    #[arg(long, env = "TETHER_LEADER_ELECT_LEASE_DURATION", default_value = "15s", value_parser = parse_duration)]
    leader_elect_lease_duration: std::time::Duration,
    /// How long the leader keeps leading while it cannot renew the Lease; then its term ends:
    /// it stops binding and writing, starts its scheduler afresh and stands by to compete
    /// again. Shorter than the lease duration.
    #[arg(long, env = "TETHER_LEADER_ELECT_RENEW_DEADLINE", default_value = "10s", value_parser = parse_duration)]
    leader_elect_renew_deadline: std::time::Duration,
    /// How often the leader renews the Lease and a standby tries to take it.
    #[arg(long, env = "TETHER_LEADER_ELECT_RETRY_PERIOD", default_value = "2s", value_parser = parse_duration)]
    leader_elect_retry_period: std::time::Duration,
    /// The Lease's name.
    #[arg(
        long,
        env = "TETHER_LEADER_ELECT_RESOURCE_NAME",
        default_value = "tether"
    )]
    leader_elect_resource_name: String,
    /// The Lease's namespace (default: this pod's namespace, else tether-system). A profile's
    /// namespaceSelector never selects it: tether's own pods do not wait for tether.
    #[arg(long, env = "POD_NAMESPACE", default_value = "tether-system")]
    leader_elect_resource_namespace: String,
    /// The ValidatingAdmissionPolicy (and its binding, of the same name) that admits an
    /// ExplainRequest only when its requester is its creator: tether answers none while it is
    /// missing or changed.
    #[arg(
        long,
        env = "TETHER_EXPLAIN_POLICY",
        default_value = tether::endpoints::requests::POLICY
    )]
    explain_policy: String,
    /// Events written per second at most (0: no limit); binds are never limited.
    #[arg(long, env = "TETHER_EVENTS_QPS", default_value_t = 50.0)]
    events_qps: f64,
    /// Events written at once at most before the QPS applies.
    #[arg(long, env = "TETHER_EVENTS_BURST", default_value_t = 100)]
    events_burst: u32,
    /// StickyBinding history writes per second at most (0: no limit).
    #[arg(long, env = "TETHER_HISTORY_QPS", default_value_t = 200.0)]
    history_qps: f64,
    /// History writes at once at most before the QPS applies.
    #[arg(long, env = "TETHER_HISTORY_BURST", default_value_t = 400)]
    history_burst: u32,
    /// Status writes of SchedulingProfiles and StickyBindings per second at most (0: no limit).
    #[arg(long, env = "TETHER_STATUS_QPS", default_value_t = 20.0)]
    status_qps: f64,
    /// Status writes at once at most before the QPS applies.
    #[arg(long, env = "TETHER_STATUS_BURST", default_value_t = 40)]
    status_burst: u32,
    /// `PodScheduled=False` writes of failed attempts per second at most (0: no limit). A
    /// pod's failures waiting for a token are coalesced: the newest is written.
    #[arg(long, env = "TETHER_FAILURE_REPORTS_QPS", default_value_t = 100.0)]
    failure_reports_qps: f64,
    /// Failure reports written at once at most before the QPS applies.
    #[arg(long, env = "TETHER_FAILURE_REPORTS_BURST", default_value_t = 200)]
    failure_reports_burst: u32,
}

/// The most of any rate flag (`--events-qps` and the like) and of any burst.
const MAX_QPS: f64 = 1_000_000.0;
const MAX_BURST: u32 = 1_000_000;
/// The longest shutdown grace taken: an hour (a pod's grace period is seconds to minutes).
const MAX_SHUTDOWN_GRACE_SECONDS: u64 = 3600;
/// `--history-settle-seconds`: at least the time a bind's watch event and history write take
/// on a healthy cluster; at most a day (countedPods keeps at most 8192 pods however long).
const MIN_HISTORY_SETTLE_SECONDS: u64 = 5;
const MAX_HISTORY_SETTLE_SECONDS: u64 = 86_400;
/// `--watch-stale-seconds`: a few seconds at least (a watch resumes within seconds of an
/// outage's end), an hour at most.
const MIN_WATCH_STALE_SECONDS: u64 = 5;
const MAX_WATCH_STALE_SECONDS: u64 = 3600;
/// The most threads Filter and Score may use.
const MAX_PARALLELISM: usize = 1024;

impl RunArgs {
    /// Checks the numbers the flags carry; each error names its flag. The election's own
    /// durations are checked with the rest of its settings (`LeaseConfig::validate`).
    fn check(&self) -> Result<(), String> {
        let mut errors = Vec::new();
        let rates = [
            (
                "--events-qps",
                self.events_qps,
                self.events_burst,
                "--events-burst",
            ),
            (
                "--history-qps",
                self.history_qps,
                self.history_burst,
                "--history-burst",
            ),
            (
                "--status-qps",
                self.status_qps,
                self.status_burst,
                "--status-burst",
            ),
            (
                "--failure-reports-qps",
                self.failure_reports_qps,
                self.failure_reports_burst,
                "--failure-reports-burst",
            ),
        ];
        for (flag, qps, burst, burst_flag) in rates {
            if !(qps == 0.0 || (0.001..=MAX_QPS).contains(&qps)) {
                errors.push(format!(
                    "{flag} {qps}: must be 0 (no limit) or between 0.001 and {MAX_QPS}"
                ));
            }
            if burst > MAX_BURST {
                errors.push(format!("{burst_flag} {burst}: must be at most {MAX_BURST}"));
            }
        }
        if !(MIN_HISTORY_SETTLE_SECONDS..=MAX_HISTORY_SETTLE_SECONDS)
            .contains(&self.history_settle_seconds)
        {
            errors.push(format!(
                "--history-settle-seconds {}: must be between {MIN_HISTORY_SETTLE_SECONDS} and {MAX_HISTORY_SETTLE_SECONDS}",
                self.history_settle_seconds
            ));
        }
        if !(MIN_WATCH_STALE_SECONDS..=MAX_WATCH_STALE_SECONDS).contains(&self.watch_stale_seconds)
        {
            errors.push(format!(
                "--watch-stale-seconds {}: must be between {MIN_WATCH_STALE_SECONDS} and {MAX_WATCH_STALE_SECONDS}",
                self.watch_stale_seconds
            ));
        }
        if self.shutdown_grace_seconds > MAX_SHUTDOWN_GRACE_SECONDS {
            errors.push(format!(
                "--shutdown-grace-seconds {}: must be at most {MAX_SHUTDOWN_GRACE_SECONDS}",
                self.shutdown_grace_seconds
            ));
        }
        if let Some(n) = self.parallelism
            && !(1..=MAX_PARALLELISM).contains(&n)
        {
            errors.push(format!(
                "--parallelism {n}: must be between 1 and {MAX_PARALLELISM}"
            ));
        }
        if errors.is_empty() {
            Ok(())
        } else {
            Err(errors.join("; "))
        }
    }
}

/// Reads a duration as kube-scheduler's flags take it: a number and a unit (`500ms`, `15s`,
/// `2m`); a bare number is seconds.
fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !c.is_ascii_digit() && c != '.')
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("{text:?} is not a duration (e.g. 15s, 500ms, 2m)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        _ => return Err(format!("{text:?}: the unit must be ms, s or m")),
    };
    std::time::Duration::try_from_secs_f64(seconds).map_err(|e| format!("{text:?}: {e}"))
}

/// This replica's identity in the Lease: the pod name, else the host name with a random
/// suffix (as kube-scheduler's), so that two processes on one machine never share one.
fn identity(instance: Option<&str>) -> String {
    if let Some(name) = instance.filter(|n| !n.is_empty()) {
        return name.to_string();
    }
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|h| h.trim().to_string())
        .unwrap_or_else(|_| "tether".into());
    format!("{host}_{:08x}", rand::random::<u32>())
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

/// How `tether run` writes its log: an unknown value is refused, not read as text.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

fn init_logging(format: LogFormat) {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref());
    let builder = tracing_subscriber::fmt().with_env_filter(filter);
    match format {
        LogFormat::Json => builder.json().init(),
        LogFormat::Text => builder.init(),
    }
}

/// Runs a command that talks to the cluster as a person would, on a small runtime; warnings
/// go to standard error.
fn client_command<T>(
    work: impl std::future::Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    let filter = log_filter(std::env::var("RUST_LOG").ok().as_deref().or(Some("warn")));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .without_time()
        .init();
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the tokio runtime")?
        .block_on(work)
}

fn print(text: &str) -> anyhow::Result<()> {
    std::io::stdout()
        .write_all(text.as_bytes())
        .context("writing to standard output")
}

/// Ends a person's command: what it printed, or its error in one line (never a backtrace)
/// and exit status 1.
fn finish(done: anyhow::Result<String>) -> anyhow::Result<()> {
    match done {
        Ok(text) => print(&text),
        Err(e) => {
            eprintln!("error: {e:#}");
            std::process::exit(1);
        }
    }
}

/// The scheduler's settings from its flags, every number checked (each error names its flag).
fn run_config(args: RunArgs) -> Result<tether::run::RunConfig, String> {
    args.check()?;
    let parallelism = args
        .parallelism
        .unwrap_or_else(|| std::thread::available_parallelism().map_or(2, |n| n.get()));
    let lease = args.leader_elect.then(|| tether::leader::LeaseConfig {
        name: args.leader_elect_resource_name.clone(),
        namespace: args.leader_elect_resource_namespace.clone(),
        identity: identity(args.instance.as_deref()),
        lease_duration: args.leader_elect_lease_duration,
        renew_deadline: args.leader_elect_renew_deadline,
        retry_period: args.leader_elect_retry_period,
    });
    if let Some(lease) = &lease {
        lease
            .validate()
            .map_err(|e| format!("the --leader-elect-* flags: {e}"))?;
    }
    Ok(tether::run::RunConfig {
        http_addr: args.http_addr,
        health_addr: args.health_addr,
        parallelism,
        shutdown_grace: std::time::Duration::from_secs(args.shutdown_grace_seconds),
        history_settle: jiff::SignedDuration::from_secs(
            i64::try_from(args.history_settle_seconds).map_err(|e| e.to_string())?,
        ),
        lease,
        watch_stale: std::time::Duration::from_secs(args.watch_stale_seconds),
        budget: tether::k8s::budget::Budget {
            events: tether::k8s::budget::Bucket::new(args.events_qps, args.events_burst),
            history: tether::k8s::budget::Bucket::new(args.history_qps, args.history_burst),
            status: tether::k8s::budget::Bucket::new(args.status_qps, args.status_burst),
            failures: tether::k8s::budget::Bucket::new(
                args.failure_reports_qps,
                args.failure_reports_burst,
            ),
        },
        instance: args.instance,
        owner_kinds: args.owner_kinds,
        release: args.kubernetes_release,
        features: args.feature_gates,
        namespace: args.leader_elect_resource_namespace,
        explain_policy: args.explain_policy,
    })
}

fn parse_feature_gates(text: &str) -> Result<tether::k8s::features::FeatureGates, String> {
    tether::k8s::features::FeatureGates::parse(text).map_err(|e| e.to_string())
}

fn parse_release(text: &str) -> Result<tether::k8s::release::Release, String> {
    tether::k8s::release::Release::parse(text)
        .and_then(tether::k8s::release::Release::supported)
        .map_err(|e| e.to_string())
}

fn main() -> anyhow::Result<()> {
    purge_freed_memory_at_once();
    // Run as `kubectl_complete-tether` (a link kubectl finds on the PATH): kubectl asks for the
    // candidates of the words typed after `kubectl tether`.
    let invoked_as = std::env::args_os()
        .next()
        .map(std::path::PathBuf::from)
        .and_then(|p| p.file_name().map(|n| n.to_string_lossy().into_owned()));
    if invoked_as.as_deref() == Some("kubectl_complete-tether") {
        use clap::CommandFactory;
        let words: Vec<String> = std::env::args().skip(1).collect();
        return print(&tether::cli::complete::candidates(&Cli::command(), &words));
    }
    let cli = Cli::parse();
    match cli.command {
        Command::Completion { shell } => {
            use clap::CommandFactory;
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tether", &mut out);
            print(&String::from_utf8_lossy(&out))?;
        }
        Command::Explain(args) => finish(client_command(tether::cli::explain::run(&args)))?,
        Command::Pending(args) => finish(client_command(tether::cli::pending::run(&args)))?,
        Command::Simulate(args) => {
            // As `kubectl diff`: 0 when no placement would change, 1 when some would (the
            // report says which), 2 when a candidate would not serve or the simulation failed.
            use tether::cli::simulate::Outcome;
            match client_command(tether::cli::simulate::run(&args)) {
                Ok(Outcome::Report(text, changes)) => {
                    print(&text)?;
                    if changes > 0 {
                        // exit() skips destructors: flush what is buffered first.
                        std::io::stdout()
                            .flush()
                            .context("writing to standard output")?;
                        std::process::exit(1);
                    }
                }
                Ok(Outcome::Rejected(message)) => {
                    eprintln!("error: {message}");
                    std::process::exit(2);
                }
                Err(e) => {
                    eprintln!("error: {e:#}");
                    std::process::exit(2);
                }
            }
        }
        Command::Snapshot(args) => finish(client_command(tether::cli::simulate::snapshot(&args)))?,
        Command::Version => println!("tether {VERSION}"),
        Command::Crd { reference: true } => print(&tether::api::reference_markdown())?,
        Command::Crd { reference: false } => {
            let yaml = tether::api::crds_yaml().context("serializing the CRDs")?;
            std::io::stdout()
                .write_all(yaml.as_bytes())
                .context("writing the CRDs to stdout")?;
        }
        Command::Run(args) => {
            init_logging(args.log_format);
            let config = match run_config(*args) {
                Ok(config) => config,
                Err(e) => {
                    eprintln!("error: {e}");
                    std::process::exit(2);
                }
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

    /// `tether completion bash` prints a script bash reads without error, completing the
    /// subcommands and their flags; the other shells get theirs.
    #[test]
    fn completion_scripts_cover_the_commands_and_bash_reads_its_own() {
        use clap::CommandFactory;
        let script = |shell| {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut Cli::command(), "tether", &mut out);
            String::from_utf8(out).expect("a completion script is text")
        };
        let bash = script(clap_complete::Shell::Bash);
        for word in [
            "explain",
            "simulate",
            "completion",
            "--leader-elect",
            "--token-file",
        ] {
            assert!(bash.contains(word), "bash completion lacks {word}");
        }
        let mut check = std::process::Command::new("bash")
            .arg("-n")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .expect("bash runs");
        check
            .stdin
            .take()
            .expect("stdin")
            .write_all(bash.as_bytes())
            .expect("the script is written");
        assert!(
            check.wait().expect("bash ends").success(),
            "bash -n refused the script"
        );
        for shell in [clap_complete::Shell::Zsh, clap_complete::Shell::Fish] {
            assert!(script(shell).contains("simulate"), "{shell}");
        }
    }

    /// `tether version` (and `--version`) say the version, the commit built from (git's, or
    /// `unknown` outside a checkout) and the kube-scheduler release tether matches.
    #[test]
    fn version_names_the_release_the_commit_and_the_kube_scheduler_matched() {
        assert!(matches!(
            Cli::try_parse_from(["tether", "version"]).map(|c| c.command),
            Ok(Command::Version)
        ));
        assert!(VERSION.starts_with(env!("CARGO_PKG_VERSION")));
        let commit = env!("TETHER_COMMIT");
        assert!(!commit.is_empty() && VERSION.contains(&format!("commit {commit}")));
        assert!(VERSION.contains("kube-scheduler of the cluster's release, 1.36 to 1.38"));
    }

    #[test]
    fn durations_read_as_kube_scheduler_flags_take_them() {
        let d = |t: &str| parse_duration(t);
        assert_eq!(d("15s"), Ok(std::time::Duration::from_secs(15)));
        assert_eq!(d("500ms"), Ok(std::time::Duration::from_millis(500)));
        assert_eq!(d("2m"), Ok(std::time::Duration::from_secs(120)));
        assert_eq!(d("10"), Ok(std::time::Duration::from_secs(10)));
        assert!(d("ten").is_err() && d("5h").is_err() && d("-1s").is_err());
    }

    /// `tether run` with these flags, as the scheduler would read them.
    fn run_flags(flags: &[String]) -> Result<tether::run::RunConfig, String> {
        let argv = ["tether", "run"]
            .into_iter()
            .map(String::from)
            .chain(flags.iter().cloned());
        let cli = Cli::try_parse_from(argv).map_err(|e| e.to_string())?;
        match cli.command {
            Command::Run(args) => run_config(*args),
            other => Err(format!("not run: {other:?}")),
        }
    }

    #[test]
    fn a_huge_or_tiny_flag_is_refused_naming_the_flag() {
        let refused = |flags: &[&str], named: &str| {
            let flags: Vec<String> = flags.iter().map(|f| f.to_string()).collect();
            match run_flags(&flags) {
                Err(e) => assert!(e.contains(named), "{flags:?}: {e}"),
                Ok(_) => panic!("{flags:?} accepted"),
            }
        };
        refused(
            &[
                "--leader-elect",
                "--leader-elect-retry-period=9000000000000000000s",
                "--leader-elect-renew-deadline=9100000000000000000s",
                "--leader-elect-lease-duration=9200000000000000000s",
            ],
            "--leader-elect",
        );
        refused(
            &["--shutdown-grace-seconds=18446744073709551615"],
            "--shutdown-grace-seconds",
        );
        refused(&["--events-qps=1e-300"], "--events-qps");
        refused(&["--log-format=jsn"], "--log-format");
        refused(&["--status-qps=-1"], "--status-qps");
        refused(&["--history-qps=NaN"], "--history-qps");
        refused(
            &["--failure-reports-burst=4294967295"],
            "--failure-reports-burst",
        );
        refused(&["--parallelism=0"], "--parallelism");
        refused(&["--history-settle-seconds=1"], "--history-settle-seconds");
        refused(
            &["--history-settle-seconds=18446744073709551615"],
            "--history-settle-seconds",
        );
        assert!(run_flags(&[]).is_ok(), "the defaults are taken");
        assert!(run_flags(&["--leader-elect".into()]).is_ok());
    }

    proptest::proptest! {
        /// Any value of any numeric flag is refused, or every deadline tether derives from it
        /// stays on the clock and every rate builds its bucket.
        #[test]
        fn any_numeric_flag_is_refused_or_usable(
            flag in proptest::sample::select(vec![
                "--leader-elect-lease-duration", "--leader-elect-renew-deadline",
                "--leader-elect-retry-period", "--shutdown-grace-seconds", "--events-qps",
                "--events-burst", "--history-qps", "--status-qps", "--failure-reports-qps",
                "--parallelism", "--history-settle-seconds", "--watch-stale-seconds",
            ]),
            value in proptest::prop_oneof![
                "[0-9]{1,25}(\\.[0-9]{1,3})?(ms|s|m)?",
                "[1-9][0-9]{16,19}(s|m)?",
                proptest::prelude::Just("18446744073709551615".to_string()),
                proptest::prelude::Just("9223372036854775807s".to_string()),
                proptest::prelude::Just("1e308".to_string()),
                proptest::prelude::Just("-0".to_string()),
                proptest::prelude::Just("inf".to_string()),
            ],
        ) {
            let flags = vec!["--leader-elect".to_string(), format!("{flag}={value}")];
            if let Ok(config) = run_flags(&flags) {
                let now = tokio::time::Instant::now();
                let lease = config.lease.as_ref().expect("elected");
                for d in [lease.lease_duration, lease.renew_deadline, lease.retry_period, config.shutdown_grace] {
                    proptest::prop_assert!(now.checked_add(d.saturating_mul(4)).is_some(), "{flag}={value}: {d:?}");
                }
            }
        }
    }

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
