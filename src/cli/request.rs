//! The route of a user with nothing but a kubeconfig: an ExplainRequest made with its
//! credentials, answered by the leader in its status, read and deleted.

use std::time::Duration;

use anyhow::Context;
use k8s_openapi::api::authentication::v1::{SelfSubjectReview, UserInfo};
use kube::api::{Api, DeleteParams, PostParams};

use crate::api::{ExplainRequest, ExplainRequestSpec, ExplainRequestStatus, Requester};

/// How long the answer is waited for.
pub const ANSWER_WAIT: Duration = Duration::from_secs(60);
/// How often the request is read again while waiting.
const POLL: Duration = Duration::from_millis(300);

/// Who the API server says the kubeconfig's credentials are (`kubectl auth whoami`).
async fn whoami(client: &kube::Client) -> anyhow::Result<UserInfo> {
    let reviews: Api<SelfSubjectReview> = Api::all(client.clone());
    let review = reviews
        .create(&PostParams::default(), &SelfSubjectReview::default())
        .await
        .context("asking the API server who you are (a SelfSubjectReview)")?;
    review
        .status
        .and_then(|s| s.user_info)
        .context("the API server's SelfSubjectReview named no user")
}

/// Asks about `pod` in `namespace` (the namespace's pending pods without one): makes the
/// request, waits up to [`ANSWER_WAIT`] for the leader's answer, deletes the request and
/// returns the answer; tether's refusal is an error with its words.
pub async fn ask(
    client: &kube::Client,
    namespace: &str,
    pod: Option<&str>,
) -> anyhow::Result<ExplainRequestStatus> {
    let user = whoami(client).await?;
    let requester = Requester {
        username: user.username.unwrap_or_default(),
        groups: user.groups.unwrap_or_default(),
        uid: user.uid.filter(|u| !u.is_empty()),
        extra: user.extra.unwrap_or_default(),
    };
    let mut request = ExplainRequest::new(
        "",
        ExplainRequestSpec {
            pod: pod.map(String::from),
            requester,
        },
    );
    request.metadata.name = None;
    request.metadata.generate_name = Some("explain-".into());
    let requests: Api<ExplainRequest> = Api::namespaced(client.clone(), namespace);
    let made = requests
        .create(&PostParams::default(), &request)
        .await
        .map_err(|e| refused_to_make(e, namespace))?;
    let name = made.metadata.name.clone().unwrap_or_default();
    let answered = wait(&requests, &name).await;
    // The request has served its purpose either way; tether deletes what is left later.
    if let Err(e) = requests.delete(&name, &DeleteParams::default()).await
        && !crate::k8s::api_errors::not_found(&e)
    {
        tracing::warn!(request = %format!("{namespace}/{name}"), error = %e, "could not delete the ExplainRequest (tether deletes it within the hour)");
    }
    let status = answered?;
    if let Some(refusal) = &status.refused {
        anyhow::bail!(
            "tether answered {}: {}",
            refusal.code,
            refusal.message.trim()
        );
    }
    Ok(status)
}

/// The answer of request `name`, once it has one.
async fn wait(requests: &Api<ExplainRequest>, name: &str) -> anyhow::Result<ExplainRequestStatus> {
    let deadline = tokio::time::Instant::now() + ANSWER_WAIT;
    loop {
        let request = requests
            .get(name)
            .await
            .with_context(|| format!("reading ExplainRequest {name}"))?;
        if request.answered() {
            return Ok(request.status.unwrap_or_default());
        }
        if tokio::time::Instant::now() >= deadline {
            anyhow::bail!(
                "ExplainRequest {name} had no answer within {}s: is tether running, leading and up to date? (kubectl -n tether-system get lease tether)",
                ANSWER_WAIT.as_secs()
            );
        }
        tokio::time::sleep(POLL).await;
    }
}

/// The API server's refusal to make the request, with what to do about it.
fn refused_to_make(error: kube::Error, namespace: &str) -> anyhow::Error {
    let hint = match &error {
        kube::Error::Api(status)
            if status.code == 403 && status.message.contains("spec.requester") =>
        {
            "the admission policy on ExplainRequests refused the requester"
        }
        kube::Error::Api(status) if status.code == 403 => {
            "you may not create ExplainRequests there: ask for tether's explainer ClusterRole (tether-explainer from deploy/, RELEASE-explainer from the chart), or pass --token-file"
        }
        kube::Error::Api(status) if status.code == 404 => {
            "this cluster serves no ExplainRequests: install tether's CRDs of this release (kubectl apply -f crds/), or pass --token-file"
        }
        _ => "",
    };
    let message = format!("making an ExplainRequest in namespace {namespace}");
    if hint.is_empty() {
        anyhow::Error::new(error).context(message)
    } else {
        anyhow::Error::new(error).context(format!("{message}: {hint}"))
    }
}
