//! The StickyBinding reconciler: keeps the condition `NodeAvailable` (the pinned node exists and
//! is Ready) on every binding, re-checked whenever a node changes, `HistoryConsistent` (the
//! counts agree with each other), and kstatus's `Stalled` and `Reconciling` with
//! `observedGeneration`, written only when they change.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use std::future::Future;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::watch::{self, Applier, Index, Need, Readiness};
use kube::{Resource, ResourceExt};

use crate::api::StickyBinding;
use crate::api::sticky_binding::conditions::{
    Desired, desired_conditions, node_availability, warn_oddity,
};
use crate::gate::{Write, WriteGate};
use crate::scheduler::framework::events::ClusterEvents;
use crate::sticky::bindings::{BindingIndex, BindingLookup};

/// How long a binding's reconcile waits for it to stop changing. The history writer creates a
/// binding, then writes its status with its conditions: reconciled at once, the bare binding
/// would get a status write of its own that races the writer's (a conflict and a retry on
/// every new binding); reconciled after the writer's write, it has nothing left to write.
const DEBOUNCE: Duration = Duration::from_secs(1);

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
    /// Only a leader writes; a standby's bindings are reconciled again when it starts leading.
    gate: WriteGate,
    /// The last retry wait of each binding whose reconcile failed, until one succeeds.
    retries: std::sync::Mutex<std::collections::HashMap<(String, String), Duration>>,
}

fn key_of(binding: &StickyBinding) -> (String, String) {
    (binding.namespace().unwrap_or_default(), binding.name_any())
}

/// Keeps the binding's conditions (see [`desired_conditions`], the rules on the API type). They are written only when
/// they change, so an odd value is reported once, not at every reconcile.
async fn reconcile(binding: Arc<StickyBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    let Ok(permit) = ctx.gate.admit(Write::BindingStatus) else {
        return Ok(Action::await_change());
    };
    let generation = binding.meta().generation;
    let availability = binding.pin().map(|pin| {
        let node = ctx.nodes.get(&ObjectRef::new(pin));
        node_availability(pin, node.as_deref())
    });
    let Desired {
        conditions,
        changed,
        new_oddity,
    } = desired_conditions(&binding, availability.as_ref());
    if let Some(odd) = new_oddity {
        warn_oddity(&binding, &odd);
    }
    if changed {
        let namespace = binding.namespace().unwrap_or_default();
        let name = binding.name_any();
        let api: Api<StickyBinding> = Api::namespaced(ctx.client.clone(), &namespace);
        let status = serde_json::json!({
            "conditions": conditions,
            "observedGeneration": generation,
        });
        let Ok(written) = permit
            .fence(super::apply_status(&api, &name, &status))
            .await
        else {
            // The term ended: the next leader reconciles it.
            return Ok(Action::await_change());
        };
        written.map_err(|source| Error::Status {
            namespace,
            name,
            source,
        })?;
    }
    crate::locks::lock(&ctx.retries).remove(&key_of(&binding));
    if binding.pin().is_none() {
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

/// What the controller reads of a node: its name and its `Ready` condition. The rest (its
/// images above all, half of the object on a kubelet reporting 50) is dropped before the store
/// keeps it: this store holds every node of the cluster, beside the scheduler's own cache.
fn keep_availability(node: &mut Node) {
    node.spec = None;
    node.metadata.labels = None;
    node.metadata.annotations = None;
    if let Some(status) = node.status.take() {
        let ready: Vec<_> = status
            .conditions
            .into_iter()
            .flatten()
            .filter(|c| c.type_ == "Ready")
            .collect();
        node.status = Some(k8s_openapi::api::core::v1::NodeStatus {
            conditions: Some(ready),
            ..Default::default()
        });
    }
}

/// A failed reconcile is retried after a doubling, jittered wait (see
/// [`super::next_retry`]), per binding.
fn error_policy(binding: Arc<StickyBinding>, error: &Error, ctx: Arc<Context>) -> Action {
    let wait = {
        let mut retries = crate::locks::lock(&ctx.retries);
        let last = retries.entry(key_of(&binding)).or_default();
        *last = super::next_retry(*last);
        *last
    };
    tracing::warn!(binding = %binding.name_any(), error = %error, retry_in = ?wait, "StickyBinding reconcile failed; retrying");
    Action::requeue(wait)
}

/// The plugins' view of the bindings, fed by the controller's watch: each change (and each
/// change a re-list finds) also runs `on_change`, which requeues the pods of that workload
/// waiting for their sticky node.
struct IndexFeed {
    index: Arc<BindingIndex>,
    events: Arc<dyn ClusterEvents>,
}

impl IndexFeed {
    /// The binding before and after (`None` when it was added, or deleted), told to the queue.
    fn on_change(&self, old: Option<Arc<StickyBinding>>, new: Option<Arc<StickyBinding>>) {
        let (event, old, new) = crate::sticky::bindings::cluster_event(old, new);
        self.events.on_event(event, old, new);
    }
}

impl Index<StickyBinding> for IndexFeed {
    fn apply(&self, binding: StickyBinding) {
        let old = self.index.get(
            &binding.namespace().unwrap_or_default(),
            &binding.name_any(),
        );
        self.index.upsert(binding.clone());
        self.on_change(old, Some(Arc::new(binding)));
    }

    fn delete(&self, binding: StickyBinding) {
        self.index.remove(
            &binding.namespace().unwrap_or_default(),
            &binding.name_any(),
        );
        self.on_change(Some(Arc::new(binding)), None);
    }

    fn reset(&self, bindings: Vec<StickyBinding>) {
        let key = |b: &StickyBinding| (b.namespace().unwrap_or_default(), b.name_any());
        let mut before: HashMap<(String, String), Arc<StickyBinding>> =
            self.index.all().into_iter().map(|b| (key(&b), b)).collect();
        self.index.reset(bindings.clone());
        for binding in bindings {
            let old = before.remove(&key(&binding));
            let same = old
                .as_ref()
                .is_some_and(|o| o.metadata.resource_version == binding.metadata.resource_version);
            if !same {
                self.on_change(old, Some(Arc::new(binding)));
            }
        }
        for gone in before.into_values() {
            self.on_change(Some(gone), None);
        }
    }
}

/// The StickyBinding controller, its watches registered in `readiness` now; the future runs it
/// until the process stops. One watch of the bindings feeds the controller's store and the
/// plugins' `index`; one watch of the nodes feeds the store reconciles read.
pub fn run(
    client: kube::Client,
    index: Arc<BindingIndex>,
    events: Arc<dyn ClusterEvents>,
    gate: WriteGate,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let binding_feed = readiness.register_for(
        "stickybindings",
        Need::Plugins(crate::scheduler::framework::needs::STICKY_PLUGINS),
    );
    let node_feed = readiness.register_for("nodes (StickyBinding controller)", Need::Nothing);
    async move {
        let bindings: Api<StickyBinding> = Api::all(client.clone());
        let nodes: Api<Node> = Api::all(client.clone());
        // The node store is updated before a node event triggers a reconcile, so a reconcile
        // never reads a node older than the event that woke it.
        let (node_store, node_writer) = kube::runtime::reflector::store();
        let node_events = watch::watch(
            nodes,
            "nodes (StickyBinding controller)",
            Some(node_feed.clone()),
        )
        .modify(keep_availability)
        .reflect(node_writer)
        .inspect(move |event| {
            if matches!(event, Ok(watcher::Event::InitDone)) {
                node_feed.listed();
            }
        })
        .touched_objects();
        let (binding_store, binding_writer) = kube::runtime::reflector::store();
        let gained = gate.leadership().gained();
        let ctx = Arc::new(Context {
            client,
            nodes: node_store,
            gate,
            retries: Default::default(),
        });
        let feed = IndexFeed { index, events };
        let mut applier = Applier::new(Some(binding_feed.clone()));
        let binding_events = watch::watch(bindings, "stickybindings", Some(binding_feed))
            .reflect(binding_writer)
            .inspect(move |event| match event {
                Ok(e) => applier.event(&feed, e.clone()),
                Err(e) => applier.failed(&feed, e),
            })
            .applied_objects();
        Controller::for_stream(watch::objects_only(binding_events), binding_store.clone())
            .watches_stream(watch::objects_only(node_events), move |node: Node| {
                let name = node.name_any();
                binding_store
                    .state()
                    .into_iter()
                    .filter(|b| b.pin() == Some(name.as_str()))
                    .map(|b| ObjectRef::from_obj(&*b))
                    .collect::<Vec<_>>()
            })
            .reconcile_all_on(gained)
            .with_config(kube::runtime::controller::Config::default().debounce(DEBOUNCE))
            .run(reconcile, error_policy, ctx)
            .for_each(|_| async {})
            .await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(ready: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"zone": "a"}, "annotations": {"a": "b"}},
            "spec": {"taints": [{"key": "k", "effect": "NoSchedule"}]},
            "status": {
                "conditions": [
                    {"type": "MemoryPressure", "status": "False"},
                    {"type": "Ready", "status": ready, "message": "kubelet is posting ready status"},
                ],
                "images": [{"names": ["registry.example/app:v1"], "sizeBytes": 1}],
                "allocatable": {"cpu": "4"},
            }
        }))
        .expect("a node")
    }

    #[test]
    fn a_node_kept_for_availability_answers_as_the_whole_node_does() {
        for ready in ["True", "False", "Unknown"] {
            let whole = node(ready);
            let mut kept = whole.clone();
            keep_availability(&mut kept);
            assert_eq!(
                node_availability("n1", Some(&kept)),
                node_availability("n1", Some(&whole)),
                "{ready}"
            );
            assert_eq!(kept.metadata.name.as_deref(), Some("n1"));
            let status = kept.status.expect("status kept");
            assert!(status.images.is_none() && status.allocatable.is_none());
            assert_eq!(status.conditions.map(|c| c.len()), Some(1));
            assert!(kept.spec.is_none() && kept.metadata.labels.is_none());
        }
    }
}
