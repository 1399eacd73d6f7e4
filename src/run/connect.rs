//! What the process and each session need first: the API client, the Kubernetes release a
//! session schedules as, and the Filter/Score thread pool.

use anyhow::Context;

use super::RunConfig;
use crate::k8s::release::Release;
use crate::scheduler::metrics::Metrics;

/// The API client, its requests counted in `metrics`.
pub(super) async fn connect(config: &RunConfig, metrics: &Metrics) -> anyhow::Result<kube::Client> {
    let kube_config = kube::Config::infer()
        .await
        .context("reading the kubeconfig or in-cluster config")?;
    let client = crate::k8s::client::build_counted(kube_config, &metrics.api_requests())?;
    crate::k8s::budget::set(config.budget.clone());
    Ok(client)
}

/// The Kubernetes minor a session schedules as: the one `--kubernetes-release` names, else the
/// API server's, asked until it answers (a session waits for it as its watches wait for the API
/// server; the endpoints serve meanwhile, so an API server down at start is no crash loop). A
/// release tether does not schedule as is an error that stops the process with the reason. Read
/// again by each session: a control plane upgraded while this replica stood by is scheduled as
/// its new release from the next term on.
pub(super) async fn release(
    config: &RunConfig,
    client: &kube::Client,
    metrics: &Metrics,
) -> anyhow::Result<Release> {
    if let Some(pinned) = config.release {
        // Only for the metric's label: the pinned release decides.
        let said = tokio::time::timeout(VERSION_WAIT, client.apiserver_version()).await;
        let apiserver = match said {
            Ok(Ok(info)) => info.git_version,
            _ => "unknown".to_string(),
        };
        tracing::info!(release = %pinned, %apiserver, "scheduling as kube-scheduler of the pinned Kubernetes release");
        metrics.set_release(pinned, &apiserver);
        return Ok(pinned);
    }
    let mut delay = std::time::Duration::from_secs(1);
    let info = loop {
        match client.apiserver_version().await {
            Ok(info) => break info,
            Err(error) => {
                tracing::warn!(%error, retry_in = ?delay, "the API server did not say its version (/version); asking again");
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(VERSION_WAIT);
            }
        }
    };
    let release = Release::from_info(&info)?.supported()?;
    tracing::info!(%release, apiserver = %info.git_version, "scheduling as kube-scheduler of this Kubernetes release");
    metrics.set_release(release, &info.git_version);
    Ok(release)
}

/// The longest wait between two questions of the API server's version.
const VERSION_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

pub(super) fn start_filter_pool(parallelism: usize) -> anyhow::Result<()> {
    rayon::ThreadPoolBuilder::new()
        .num_threads(parallelism.max(1))
        .thread_name(|i| format!("filter-score-{i}"))
        .build_global()
        .context("starting the Filter/Score thread pool")
}
