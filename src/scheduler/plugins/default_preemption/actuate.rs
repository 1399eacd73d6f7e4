//! Carrying a preemption out, off the scheduling cycle (kube-scheduler's asynchronous
//! preemption): the lower-priority pods nominated to the preemptor's nodes lose their
//! nomination, and each victim gets the `DisruptionTarget` condition, is deleted, and gets a
//! `Preempted` event. The preemptor is a pod, or a pod group preempting as one unit.

use std::sync::Arc;

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Resource;
use kube::api::{Api, DeleteParams, Patch, PatchParams, Preconditions};

use super::evictions::Evictions;
use crate::gate::{Write, WriteGate};
use crate::k8s::pod::Pod;
use crate::recorder::{EventType, EventWriter};
use crate::scheduler::framework::PodActivator;
use crate::scheduler::framework::group_post_filter::GroupPreemptor;

/// Who preempts: one pod, or a pod group (its members to place, held while the writes run).
pub enum Preemptor {
    Pod(Arc<Pod>),
    Group {
        group: GroupPreemptor,
        members: Vec<Arc<Pod>>,
    },
}

impl Preemptor {
    /// The word upstream's messages use for it.
    fn kind_word(&self) -> &'static str {
        match self {
            Preemptor::Pod(_) => "pod",
            Preemptor::Group { group, .. } => group.entity(),
        }
    }

    fn uid(&self) -> String {
        match self {
            Preemptor::Pod(pod) => pod.metadata.uid.clone().unwrap_or_default(),
            Preemptor::Group { group, .. } => group.uid.clone(),
        }
    }

    fn key(&self) -> String {
        match self {
            Preemptor::Pod(pod) => format!("{}/{}", name_of(pod).0, name_of(pod).1),
            Preemptor::Group { group, .. } => format!("{}/{}", group.namespace, group.name),
        }
    }

    fn scheduler_name(&self) -> String {
        match self {
            Preemptor::Pod(pod) => pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduler_name.clone())
                .unwrap_or_default(),
            Preemptor::Group { group, .. } => group.scheduler_name.clone(),
        }
    }

    fn object_ref(&self) -> ObjectReference {
        match self {
            Preemptor::Pod(pod) => pod.object_ref(&()),
            Preemptor::Group { group, .. } => ObjectReference {
                api_version: Some(group.api_version.clone()),
                kind: Some(group.kind.clone()),
                namespace: Some(group.namespace.clone()),
                name: Some(group.name.clone()),
                uid: Some(group.uid.clone()),
                ..ObjectReference::default()
            },
        }
    }

    /// The pods held back while the writes run, and tried again when one fails.
    pub fn held(&self) -> Vec<Arc<Pod>> {
        match self {
            Preemptor::Pod(pod) => vec![pod.clone()],
            Preemptor::Group { members, .. } => members.clone(),
        }
    }
}

/// What to do: the preemptor, the node it preempts on (`cluster` for a group, as upstream
/// says), the victims and the nominations to clear.
pub struct Preemption {
    pub preemptor: Preemptor,
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
/// `evictions` (a later preemption may pick those pods again). The preemptor, which the plugin
/// held back through `activator` when it started the preemption, is let go when the writes
/// end; when a write failed, it is also tried again at once, as upstream re-activates it: no
/// victim's deletion may come to move it.
pub async fn carry_out(
    client: kube::Client,
    events: Option<EventWriter>,
    gate: WriteGate,
    evictions: Arc<Evictions>,
    activator: Option<Arc<dyn PodActivator>>,
    p: Preemption,
) {
    let preemptor = p.preemptor.key();
    let victims = p.victims.clone();
    let held = p.preemptor.held();
    // Fenced as a whole: when the term ends half-way, the victims not deleted yet are left.
    let result = gate
        .write(Write::Eviction, actuate(client, events, &evictions, p))
        .await;
    // The writes ended: the preemptor may be tried again (the plugin held it when it began).
    if let Some(activator) = &activator {
        for pod in &held {
            activator.preempted(pod.metadata.uid.as_deref().unwrap_or_default(), &victims);
        }
    }
    match result {
        Ok(Failed(false)) => {}
        Ok(Failed(true)) => {
            tracing::info!(pod = %preemptor, "a write of the preemption failed; the preemptor is tried again");
            if let Some(activator) = &activator {
                for pod in &held {
                    activator.activate(pod);
                }
            }
        }
        Err(refused) => {
            for victim in &victims {
                evictions.failed(victim);
            }
            tracing::info!(pod = %preemptor, error = %refused, "the preemption is not carried out");
        }
    }
}

/// Whether a write of the preemption failed (other than on a pod already gone).
struct Failed(bool);

/// The preemption's writes, in kube-scheduler's order: clear the nominations of the pods it
/// outranks, then mark and delete each victim.
async fn actuate(
    client: kube::Client,
    events: Option<EventWriter>,
    evictions: &Evictions,
    p: Preemption,
) -> Failed {
    let mut failed = false;
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
            failed = true;
        }
    }
    let scheduler = p.preemptor.scheduler_name();
    let preemptor_uid = p.preemptor.uid();
    let kind = p.preemptor.kind_word();
    let preemptor_ref = p.preemptor.object_ref();
    let preemptor_key = p.preemptor.key();
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
                "message": format!("{scheduler}: preempting to accommodate a higher priority {kind}"),
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
                failed = true;
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
                failed = true;
                continue;
            }
            Ok(_) => {}
        }
        tracing::info!(victim = %format!("{ns}/{name}"), node = %p.node, preemptor = %preemptor_key, "preempted");
        if let Some(events) = &events {
            let note = format!("Preempted by {kind} {preemptor_uid} on node {}", p.node);
            // About the victim, related to the preemptor, as upstream's.
            let _ = events
                .publish_related(
                    &victim.object_ref(&()),
                    Some(&preemptor_ref),
                    EventType::Normal,
                    "Preempted",
                    "Preempting",
                    note,
                )
                .await;
        }
    }
    Failed(failed)
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::scheduler::testing::{PodBuilder, stand_in_client};

    /// What the preemption asked of the queue, in order: `activate <name>`, `preempted <uid>`.
    #[derive(Default)]
    struct Activations(Mutex<Vec<String>>);

    impl Activations {
        fn note(&self, what: String) {
            self.0.lock().expect("activations").push(what);
        }
        fn activated(&self) -> bool {
            self.0
                .lock()
                .expect("activations")
                .iter()
                .any(|a| a.starts_with("activate"))
        }
    }

    impl PodActivator for Activations {
        fn activate(&self, pod: &Arc<Pod>) {
            self.note(format!(
                "activate {}",
                pod.metadata.name.clone().unwrap_or_default()
            ));
        }
        fn preempting(&self, uid: &str) {
            self.note(format!("preempting {uid}"));
        }
        fn preempted(&self, uid: &str, _victims: &[Arc<Pod>]) {
            self.note(format!("preempted {uid}"));
        }
    }

    fn running(name: &str) -> Arc<Pod> {
        Arc::new(PodBuilder::new(name).uid(name).node_name("n1").build())
    }

    /// A victim's `Preempted` event names the preemptor as its related object, as upstream's;
    /// a preemption whose eviction failed tries its preemptor again at once (no victim's
    /// deletion will come to move it), and one that went through does not; either lets the
    /// preemptor go when its writes end.
    #[tokio::test]
    async fn the_preempted_event_names_the_preemptor_and_a_failed_eviction_reactivates_it() {
        let sent = Arc::new(Mutex::new(Vec::<serde_json::Value>::new()));
        let log = sent.clone();
        let client = stand_in_client(move |method, path, body| {
            log.lock().expect("log").push(serde_json::json!({
                "method": method, "path": path, "body": body.clone()}));
            match method {
                "DELETE" if path.ends_with("/pods/stuck") => (
                    500,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                        "message": "etcd is down", "reason": "InternalError", "code": 500}),
                ),
                "DELETE" => (
                    200,
                    serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                ),
                _ => (201, body),
            }
        });
        let activations = Arc::new(Activations::default());
        let preemptor = Arc::new(PodBuilder::new("vip").uid("vip-uid").priority(1000).build());
        for (victim, reactivated) in [("low", false), ("stuck", true)] {
            carry_out(
                client.clone(),
                Some(EventWriter::new(client.clone(), None, WriteGate::alone())),
                WriteGate::alone(),
                Arc::default(),
                Some(activations.clone()),
                Preemption {
                    preemptor: Preemptor::Pod(preemptor.clone()),
                    node: "n1".into(),
                    victims: vec![running(victim)],
                    outranked: vec![],
                },
            )
            .await;
            assert_eq!(activations.activated(), reactivated, "after {victim}");
        }
        assert_eq!(
            *activations.0.lock().expect("activations"),
            ["preempted vip-uid", "preempted vip-uid", "activate vip"],
            "the preemptor is let go after each preemption's writes, before it is re-activated"
        );
        let sent = sent.lock().expect("log").clone();
        let event = sent
            .iter()
            .find(|r| {
                r["method"] == "POST" && r["path"].as_str().is_some_and(|p| p.contains("/events"))
            })
            .expect("a Preempted event");
        assert_eq!(event["body"]["reason"], "Preempted");
        assert_eq!(event["body"]["note"], "Preempted by pod vip-uid on node n1");
        assert_eq!(event["body"]["regarding"]["name"], "low");
        assert_eq!(event["body"]["related"]["name"], "vip");
        assert_eq!(event["body"]["related"]["uid"], "vip-uid");
    }
}
