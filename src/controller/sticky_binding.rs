//! The StickyBinding reconciler: keeps the condition `NodeAvailable` (the pinned node exists and
//! is Ready) on every binding, re-checked whenever a node changes.

use std::sync::Arc;
use std::time::Duration;

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::conditions::set_condition;
use crate::api::StickyBinding;
use crate::history::BindingIndex;

/// Errors of one reconcile, naming the binding.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status of StickyBinding {namespace}/{name}: {source}")]
    Status {
        namespace: String,
        name: String,
        source: kube::Error,
    },
}

pub struct Context {
    client: kube::Client,
    nodes: Store<Node>,
}

/// The node a binding pins its workload to: spec.nodeName, else status.latest.
pub fn pinned_node(binding: &StickyBinding) -> Option<String> {
    binding
        .spec
        .node_name
        .clone()
        .filter(|n| !n.is_empty())
        .or_else(|| binding.status.as_ref().and_then(|s| s.latest.clone()))
}

/// (available, reason, message) for the pinned node. Pure.
pub fn node_availability(pin: &str, node: Option<&Node>) -> (bool, &'static str, String) {
    let Some(node) = node else {
        return (false, "NodeNotFound", format!("node {pin} does not exist"));
    };
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    match ready {
        Some("True") => (true, "NodeReady", String::new()),
        _ => (false, "NodeNotReady", format!("node {pin} is not Ready")),
    }
}

async fn reconcile(binding: Arc<StickyBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Some(pin) = pinned_node(&binding) else {
        return Ok(Action::await_change());
    };
    let node = ctx.nodes.get(&ObjectRef::new(&pin));
    let (available, reason, message) = node_availability(&pin, node.as_deref());
    let mut conditions = binding
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    if set_condition(
        &mut conditions,
        "NodeAvailable",
        available,
        reason,
        &message,
        binding.meta().generation,
    ) {
        let namespace = binding.namespace().unwrap_or_default();
        let name = binding.name_any();
        let api: Api<StickyBinding> = Api::namespaced(ctx.client.clone(), &namespace);
        let patch = serde_json::json!({"status": {"conditions": conditions}});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Status {
                namespace,
                name,
                source,
            })?;
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(binding: Arc<StickyBinding>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(binding = %binding.name_any(), error = %error, "StickyBinding reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// Runs the StickyBinding controller until the process stops; also feeds `index` (the
/// plugins' view of the bindings).
/// `on_change` runs whenever a binding is added, changed or deleted (the scheduler requeues
/// the pods waiting for a sticky node).
pub async fn run(
    client: kube::Client,
    index: Arc<BindingIndex>,
    on_change: Arc<dyn Fn() + Send + Sync>,
    synced: Arc<std::sync::atomic::AtomicUsize>,
) {
    let bindings: Api<StickyBinding> = Api::all(client.clone());
    let nodes: Api<Node> = Api::all(client.clone());
    // The node store is updated before a node event triggers a reconcile, so a reconcile
    // never reads a node older than the event that woke it.
    let (node_store, node_writer) = kube::runtime::reflector::store();
    let node_events = watcher::watcher(nodes, watcher::Config::default().any_semantic())
        .default_backoff()
        .reflect(node_writer)
        .touched_objects();
    let (binding_store, binding_writer) = kube::runtime::reflector::store();
    let ctx = Arc::new(Context {
        client,
        nodes: node_store,
    });
    // One watch of the bindings feeds the controller's store, the plugins' index (deletions
    // included) and the requeue of pods that wait for a sticky node.
    let mut listed = false;
    let binding_events = watcher::watcher(bindings, watcher::Config::default().any_semantic())
        .default_backoff()
        .reflect(binding_writer)
        .inspect_ok(move |event| match event {
            watcher::Event::Delete(b) => {
                index.remove(&b.namespace().unwrap_or_default(), &b.name_any());
                on_change();
            }
            watcher::Event::Apply(b) => {
                index.upsert(b.clone());
                on_change();
            }
            watcher::Event::InitApply(b) => index.upsert(b.clone()),
            watcher::Event::InitDone if !listed => {
                listed = true;
                tracing::debug!("StickyBindings listed");
                synced.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
            }
            watcher::Event::Init | watcher::Event::InitDone => {}
        })
        .applied_objects();
    let controller = Controller::for_stream(binding_events, binding_store.clone());
    let run = controller
        .watches_stream(node_events, move |node: Node| {
            let name = node.name_any();
            binding_store
                .state()
                .into_iter()
                .filter(|b| pinned_node(b).as_deref() == Some(name.as_str()))
                .map(|b| ObjectRef::from_obj(&*b))
                .collect::<Vec<_>>()
        })
        .run(reconcile, error_policy, ctx)
        .for_each(|_| async {});
    run.await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{StickyBindingSpec, StickyBindingStatus, WorkloadRef};

    fn binding(node_name: Option<&str>, latest: Option<&str>) -> StickyBinding {
        let mut b = StickyBinding::new(
            "b",
            StickyBindingSpec {
                workload_ref: WorkloadRef {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: "p".into(),
                    ordinal: None,
                },
                node_name: node_name.map(String::from),
            },
        );
        b.status = Some(StickyBindingStatus {
            latest: latest.map(String::from),
            ..Default::default()
        });
        b
    }

    #[test]
    fn a_persons_pin_beats_the_history() {
        assert_eq!(
            pinned_node(&binding(Some("n2"), Some("n1"))).as_deref(),
            Some("n2")
        );
        assert_eq!(
            pinned_node(&binding(Some(""), Some("n1"))).as_deref(),
            Some("n1")
        );
        assert_eq!(pinned_node(&binding(None, None)), None);
    }

    #[test]
    fn availability_follows_the_node() {
        assert_eq!(node_availability("n1", None).1, "NodeNotFound");
        let ready: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})).expect("node");
        assert!(node_availability("n1", Some(&ready)).0);
        let not_ready: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})).expect("node");
        assert_eq!(node_availability("n1", Some(&not_ready)).1, "NodeNotReady");
    }
}
