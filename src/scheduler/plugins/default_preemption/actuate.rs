//! Carrying a preemption out, off the scheduling cycle (kube-scheduler's asynchronous
//! preemption): the lower-priority pods nominated to the node lose their nomination, and each
//! victim gets the `DisruptionTarget` condition, is deleted, and gets a `Preempted` event.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use super::evictions::Evictions;
use crate::gate::{Write, WriteGate};
use crate::recorder::{EventType, EventWriter};

/// What to do: the preemptor, its node, the victims and the nominations to clear.
pub struct Preemption {
    pub preemptor: Arc<Pod>,
    pub node: String,
    pub victims: Vec<Arc<Pod>>,
    pub outranked: Vec<Arc<Pod>>,
}

fn is_not_found(e: &kube::Error) -> bool {
    matches!(e, kube::Error::Api(s) if s.code == 404)
}

fn name_of(pod: &Pod) -> (&str, &str) {
    (
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// Carries `p` out. Failures are logged, and the evictions that failed are forgotten in
/// `evictions` (a later preemption may pick those pods again): the preemptor is retried by the
/// events of the pods that do go, or by its backoff.
pub async fn carry_out(
    client: kube::Client,
    events: Option<EventWriter>,
    gate: WriteGate,
    evictions: Arc<Evictions>,
    p: Preemption,
) {
    let preemptor = format!("{}/{}", name_of(&p.preemptor).0, name_of(&p.preemptor).1);
    let victims = p.victims.clone();
    // Fenced as a whole: when the term ends half-way, the victims not deleted yet are left.
    if let Err(refused) = gate
        .write(Write::Eviction, actuate(client, events, &evictions, p))
        .await
    {
        for victim in &victims {
            evictions.failed(victim);
        }
        tracing::info!(pod = %preemptor, error = %refused, "the preemption is not carried out");
    }
}

/// The preemption's writes, in kube-scheduler's order: clear the nominations of the pods it
/// outranks, then mark and delete each victim.
async fn actuate(
    client: kube::Client,
    events: Option<EventWriter>,
    evictions: &Evictions,
    p: Preemption,
) {
    for pod in &p.outranked {
        let (ns, name) = name_of(pod);
        let patch = serde_json::json!({
            "metadata": {"uid": pod.metadata.uid},
            "status": {"nominatedNodeName": null},
        });
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        if let Err(e) = api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&patch))
            .await
            && !is_not_found(&e)
        {
            tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "could not clear the nomination of a pod of lower priority");
        }
    }
    let scheduler = p
        .preemptor
        .spec
        .as_ref()
        .and_then(|s| s.scheduler_name.clone())
        .unwrap_or_default();
    let preemptor_uid = p.preemptor.metadata.uid.clone().unwrap_or_default();
    for victim in &p.victims {
        if victim.metadata.deletion_timestamp.is_some() {
            continue;
        }
        let (ns, name) = name_of(victim);
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        let condition = serde_json::json!({
            "metadata": {"uid": victim.metadata.uid},
            "status": {"conditions": [{
                "type": "DisruptionTarget",
                "status": "True",
                "reason": "PreemptionByScheduler",
                "message": format!("{scheduler}: preempting to accommodate a higher priority pod"),
                "observedGeneration": victim.metadata.generation,
                "lastTransitionTime": k8s_openapi::jiff::Timestamp::now().to_string(),
            }]},
        });
        match api
            .patch_status(name, &PatchParams::default(), &Patch::Strategic(&condition))
            .await
        {
            Err(e) if is_not_found(&e) => continue,
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "could not mark a preemption victim");
                evictions.failed(victim);
                continue;
            }
            Ok(_) => {}
        }
        let delete = DeleteParams {
            preconditions: Some(Preconditions {
                uid: victim.metadata.uid.clone(),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        match api.delete(name, &delete).await {
            Err(e) if is_not_found(&e) => continue,
            Err(e) => {
                tracing::warn!(pod = %format!("{ns}/{name}"), error = %e, "could not delete a preemption victim");
                evictions.failed(victim);
                continue;
            }
            Ok(_) => {}
        }
        tracing::info!(victim = %format!("{ns}/{name}"), node = %p.node, preemptor = %format!("{}/{}", name_of(&p.preemptor).0, name_of(&p.preemptor).1), "preempted");
        if let Some(events) = &events {
            let note = format!("Preempted by pod {preemptor_uid} on node {}", p.node);
            let _ = events
                .publish(
                    &victim.object_ref(&()),
                    EventType::Normal,
                    "Preempted",
                    "Preempting",
                    note,
                )
                .await;
        }
    }
}
