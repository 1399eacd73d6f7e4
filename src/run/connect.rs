//! What the process needs before its first session: the API client with the Kubernetes release
//! tether schedules as, and the Filter/Score thread pool.

use anyhow::Context;

use super::RunConfig;
use crate::k8s::release::Release;
use crate::scheduler::metrics::Metrics;

/// The API client, and the Kubernetes minor tether schedules as: the one `--kubernetes-release`
/// names, else the API server's (asked a few times while it does not answer; a release tether
/// does not schedule as stops the start with the reason).
pub(super) async fn connect(
    config: &RunConfig,
    metrics: &Metrics,
) -> anyhow::Result<(kube::Client, Release)> {
    let kube_config = kube::Config::infer()
        .await
        .context("reading the kubeconfig or in-cluster config")?;
    let client = crate::k8s::client::build_counted(kube_config, &metrics.api_requests())?;
    crate::k8s::budget::set(config.budget.clone());
    let mut tries = 0;
    let info = loop {
        match client.apiserver_version().await {
            Ok(info) => break info,
            Err(error) if tries < VERSION_TRIES => {
                tries += 1;
                tracing::warn!(%error, "the API server did not say its version; asking again");
                tokio::time::sleep(std::time::Duration::from_secs(2)).await;
            }
            Err(error) => {
                return Err(error).context("asking the API server for its version (/version)");
            }
        }
    };
    let release = match config.release {
        Some(release) => release,
        None => Release::from_info(&info)?.supported()?,
    };
    tracing::info!(%release, apiserver = %info.git_version, "scheduling as kube-scheduler of this Kubernetes release");
    metrics.set_release(release, &info.git_version);
    Ok((client, release))
}

/// How many more times the API server's version is asked for before the start fails.
const VERSION_TRIES: usize = 5;

pub(super) fn start_filter_pool(parallelism: usize) -> anyhow::Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(parallelism.max(1))
        .thread_name(|i| format!("filter-score-{i}"))
        .build_global()
        .context("starting the Filter/Score thread pool")
}
