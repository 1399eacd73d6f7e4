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
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::{ObjectRef, Store};
use kube::runtime::{WatchStreamExt, watcher};

use crate::watch::{self, Applier, Index, Readiness};
use kube::{Resource, ResourceExt};

use crate::api::StickyBinding;
use crate::api::StickyBindingStatus;
use crate::api::sticky_binding::{
    CONDITION_HISTORY_CONSISTENT, CONDITION_NODE_AVAILABLE, CONDITION_RECONCILING,
    CONDITION_STALLED, REASON_CONSISTENT, REASON_NODE_NOT_FOUND, REASON_NODE_NOT_READY,
    REASON_NODE_READY, REASON_ODD_VALUES,
};
use crate::controller::conditions::set_condition;
use crate::leader::Leadership;
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
    leadership: Leadership,
}

/// (available, reason, message) for the pinned node. Pure.
pub fn node_availability(pin: &str, node: Option<&Node>) -> ConditionValue {
    let Some(node) = node else {
        return (
            false,
            REASON_NODE_NOT_FOUND,
            format!("node {pin} does not exist"),
        );
    };
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "Ready"))
        .map(|c| c.status.as_str());
    match ready {
        Some("True") => (true, REASON_NODE_READY, String::new()),
        _ => (
            false,
            REASON_NODE_NOT_READY,
            format!("node {pin} is not Ready"),
        ),
    }
}

/// One condition to write: (status, reason, message).
pub type ConditionValue = (bool, &'static str, String);

/// kstatus's `Stalled` and `Reconciling` for a binding whose pin has `availability` (None when
/// nothing pins it). A pin to a node that does not exist stalls the workload until a person
/// moves or frees it: the message names the field that pins it. A node that exists but is not
/// Ready is waited for. Pure.
pub fn kstatus_conditions(
    binding: &StickyBinding,
    availability: Option<&ConditionValue>,
) -> [(&'static str, ConditionValue); 2] {
    let field = if binding
        .spec
        .node_name
        .as_deref()
        .is_some_and(|n| !n.is_empty())
    {
        "spec.nodeName"
    } else {
        "status.latest"
    };
    let (stalled, reconciling) = match availability {
        Some((false, reason, message)) if *reason == REASON_NODE_NOT_FOUND => (
            (
                true,
                *reason,
                format!(
                    "{field}: {message}; move the workload (set spec.nodeName) or free it (delete this StickyBinding)"
                ),
            ),
            (false, "Stalled", String::new()),
        ),
        Some((false, reason, message)) => (
            (false, "Waiting", String::new()),
            (
                true,
                *reason,
                format!("{field}: {message}; the workload waits for it"),
            ),
        ),
        _ => (
            (false, "Serving", String::new()),
            (false, "Reconciled", String::new()),
        ),
    };
    [
        (CONDITION_STALLED, stalled),
        (CONDITION_RECONCILING, reconciling),
    ]
}

/// The `HistoryConsistent` condition for a status: (consistent, reason, message). Pure.
pub fn history_consistency(status: &StickyBindingStatus) -> (bool, &'static str, String) {
    let odd = status.oddities();
    if odd.is_empty() {
        (true, REASON_CONSISTENT, String::new())
    } else {
        let message = format!(
            "{}; tether keeps counting from the values as written",
            odd.join("; ")
        );
        (false, REASON_ODD_VALUES, message)
    }
}

/// The conditions a binding should carry, computed from the binding as it is and its pinned
/// node's availability.
pub struct Desired {
    pub conditions: Vec<Condition>,
    /// Whether they (or `observedGeneration`) differ from what the binding carries.
    pub changed: bool,
    /// What does not add up in its history, when the binding does not say so yet.
    pub new_oddity: Option<String>,
}

/// The conditions of `binding` given `availability`, its pinned node's (None when nothing
/// pins it): `NodeAvailable` when it is pinned, `HistoryConsistent` once it has a history, and
/// kstatus's `Stalled` and `Reconciling`, each for the binding's generation. Pure: the
/// controller and the history writer both build a binding's conditions with it, so that the
/// writer's status writes carry them and the controller has nothing left to write.
pub fn desired_conditions(
    binding: &StickyBinding,
    availability: Option<&ConditionValue>,
) -> Desired {
    let status = binding.status.clone().unwrap_or_default();
    let mut conditions = status.conditions.clone();
    let generation = binding.meta().generation;
    let mut changed = status.observed_generation != generation;
    if let Some((available, reason, message)) = availability {
        changed |= set_condition(
            &mut conditions,
            CONDITION_NODE_AVAILABLE,
            *available,
            reason,
            message,
            generation,
        );
    }
    for (type_, (status, reason, message)) in kstatus_conditions(binding, availability) {
        changed |= set_condition(&mut conditions, type_, status, reason, &message, generation);
    }
    let mut new_oddity = None;
    if binding.status.is_some() {
        let (consistent, reason, message) = history_consistency(&status);
        if !consistent
            && !conditions
                .iter()
                .any(|c| c.type_ == CONDITION_HISTORY_CONSISTENT && c.message == message)
        {
            new_oddity = Some(message.clone());
        }
        changed |= set_condition(
            &mut conditions,
            CONDITION_HISTORY_CONSISTENT,
            consistent,
            reason,
            &message,
            generation,
        );
    }
    Desired {
        conditions,
        changed,
        new_oddity,
    }
}

/// Logs, once per new finding, that a binding's history does not add up (`odd` says how).
pub fn warn_oddity(binding: &StickyBinding, odd: &str) {
    tracing::warn!(binding = %format!("{}/{}", binding.namespace().unwrap_or_default(), binding.name_any()), odd = %odd, "a StickyBinding's history does not add up");
}

/// Keeps the binding's conditions (see [`desired_conditions`]). They are written only when
/// they change, so an odd value is reported once, not at every reconcile.
async fn reconcile(binding: Arc<StickyBinding>, ctx: Arc<Context>) -> Result<Action, Error> {
    if !ctx.leadership.is_leading() {
        return Ok(Action::await_change());
    }
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
        crate::k8s::budget::get().status.take().await;
        let patch = serde_json::json!({"status": {
            "conditions": conditions,
            "observedGeneration": generation,
        }});
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(|source| Error::Status {
                namespace,
                name,
                source,
            })?;
    }
    if binding.pin().is_none() {
        return Ok(Action::await_change());
    }
    Ok(Action::requeue(Duration::from_secs(300)))
}

fn error_policy(binding: Arc<StickyBinding>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(binding = %binding.name_any(), error = %error, "StickyBinding reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
}

/// What a StickyBinding change calls: the binding before and after (`None` when it was
/// added, or deleted).
pub type OnChange =
    Arc<dyn Fn(Option<Arc<StickyBinding>>, Option<Arc<StickyBinding>>) + Send + Sync>;

/// The plugins' view of the bindings, fed by the controller's watch: each change (and each
/// change a re-list finds) also runs `on_change`, which requeues the pods of that workload
/// waiting for their sticky node.
struct IndexFeed {
    index: Arc<BindingIndex>,
    on_change: OnChange,
}

impl Index<StickyBinding> for IndexFeed {
    fn apply(&self, binding: StickyBinding) {
        let old = self.index.get(
            &binding.namespace().unwrap_or_default(),
            &binding.name_any(),
        );
        self.index.upsert(binding.clone());
        (self.on_change)(old, Some(Arc::new(binding)));
    }

    fn delete(&self, binding: StickyBinding) {
        self.index.remove(
            &binding.namespace().unwrap_or_default(),
            &binding.name_any(),
        );
        (self.on_change)(Some(Arc::new(binding)), None);
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
                (self.on_change)(old, Some(Arc::new(binding)));
            }
        }
        for gone in before.into_values() {
            (self.on_change)(Some(gone), None);
        }
    }
}

/// The StickyBinding controller, its watches registered in `readiness` now; the future runs it
/// until the process stops. One watch of the bindings feeds the controller's store and the
/// plugins' `index`; one watch of the nodes feeds the store reconciles read.
pub fn run(
    client: kube::Client,
    index: Arc<BindingIndex>,
    on_change: OnChange,
    leadership: Leadership,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let binding_feed = readiness.register("stickybindings");
    let node_feed = readiness.register("nodes (StickyBinding controller)");
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
        .reflect(node_writer)
        .inspect(move |event| {
            if matches!(event, Ok(watcher::Event::InitDone)) {
                node_feed.listed();
            }
        })
        .touched_objects();
        let (binding_store, binding_writer) = kube::runtime::reflector::store();
        let gained = leadership.gained();
        let ctx = Arc::new(Context {
            client,
            nodes: node_store,
            leadership,
        });
        let feed = IndexFeed { index, on_change };
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

    #[test]
    fn availability_follows_the_node() {
        assert_eq!(node_availability("n1", None).1, "NodeNotFound");
        let ready: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "True"}]}})).expect("node");
        assert!(node_availability("n1", Some(&ready)).0);
        let not_ready: Node = serde_json::from_value(serde_json::json!({"metadata": {"name": "n1"}, "status": {"conditions": [{"type": "Ready", "status": "Unknown"}]}})).expect("node");
        assert_eq!(node_availability("n1", Some(&not_ready)).1, "NodeNotReady");
    }

    fn status(latest: Option<&str>, counts: &[(&str, i64)], total: i64) -> StickyBindingStatus {
        StickyBindingStatus {
            latest: latest.map(Into::into),
            node_count: counts.iter().map(|(n, c)| (n.to_string(), *c)).collect(),
            schedule_count: total,
            ..Default::default()
        }
    }

    #[test]
    fn odd_histories_are_named_and_consistent_ones_are_not() {
        let (ok, reason, _) = history_consistency(&status(Some("a"), &[("a", 2), ("b", 1)], 3));
        assert!(ok && reason == "Consistent");
        assert!(
            history_consistency(&StickyBindingStatus::default()).0,
            "empty"
        );
        let cases = [
            (
                status(Some("a"), &[("a", 2)], 5),
                "scheduleCount 5 is not the sum of nodeCount (2)",
            ),
            (status(None, &[("a", 2)], 2), "latest names no node"),
            (
                status(Some("gone"), &[("a", 2)], 2),
                "latest node gone has no nodeCount",
            ),
        ];
        for (odd, says) in cases {
            let (ok, reason, message) = history_consistency(&odd);
            assert!(!ok && reason == "OddValues", "{odd:?}");
            assert!(message.contains(says), "{message}");
            assert!(message.ends_with("tether keeps counting from the values as written"));
        }
        let mut listed = status(Some("a"), &[("a", 1)], 1);
        listed.counted_pods = vec!["u1".into(), "u2".into()];
        assert!(
            history_consistency(&listed)
                .2
                .contains("countedPods lists 2 pods")
        );
        // The largest counts do not overflow the sum: counts saturate, and so does their sum.
        let huge = status(Some("a"), &[("a", i64::MAX), ("b", i64::MAX)], i64::MAX);
        assert!(history_consistency(&huge).0);
    }

    #[test]
    fn gitops_tools_read_a_lost_pin_as_failed_and_a_node_not_ready_as_in_progress() {
        use crate::api::sticky_binding::{StickyBindingSpec, WorkloadRef};
        let binding = |pinned: Option<&str>| {
            let mut b = StickyBinding::new(
                "deployment-web",
                StickyBindingSpec {
                    workload_ref: WorkloadRef {
                        api_version: "apps/v1".into(),
                        kind: "Deployment".into(),
                        name: "web".into(),
                        ordinal: None,
                    },
                    node_name: pinned.map(Into::into),
                },
            );
            b.status = Some(status(Some("n1"), &[("n1", 1)], 1));
            b
        };
        let by_type = |b: &StickyBinding, availability: Option<ConditionValue>| {
            kstatus_conditions(b, availability.as_ref())
                .map(|(type_, (on, reason, message))| (type_, on, reason, message))
        };

        let [stalled, reconciling] =
            by_type(&binding(Some("n9")), Some(node_availability("n9", None)));
        assert_eq!(
            (stalled.0, stalled.1, stalled.2),
            ("Stalled", true, "NodeNotFound")
        );
        assert!(
            stalled
                .3
                .starts_with("spec.nodeName: node n9 does not exist"),
            "{}",
            stalled.3
        );
        assert!(!reconciling.1);

        let not_ready = (
            false,
            REASON_NODE_NOT_READY,
            "node n1 is not Ready".to_string(),
        );
        let [stalled, reconciling] = by_type(&binding(None), Some(not_ready));
        assert!(!stalled.1);
        assert_eq!(
            (reconciling.0, reconciling.1, reconciling.2),
            ("Reconciling", true, "NodeNotReady")
        );
        assert!(
            reconciling
                .3
                .starts_with("status.latest: node n1 is not Ready"),
            "{}",
            reconciling.3
        );

        for availability in [None, Some((true, REASON_NODE_READY, String::new()))] {
            let [stalled, reconciling] = by_type(&binding(None), availability);
            assert!(!stalled.1 && !reconciling.1, "served: Current");
        }
    }
}
