//! What one bind writes into a StickyBinding, and what every part of the history reads: the
//! bind itself, how binds are counted into a status, a workload's new binding, the errors, and
//! the scheduler's view the writer asks.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{OwnerReference, Time};
use kube::api::ObjectMeta;

use super::bounds;
use crate::api::{BindRecord, StickyBinding, StickyBindingSpec, StickyBindingStatus};
use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::sticky::workload::Workload;

/// How many binds `status.recentBinds` keeps.
pub const RECENT_BINDS: usize = 16;

/// Errors of a history write, each naming the binding.
#[derive(Debug, thiserror::Error)]
pub enum HistoryError {
    #[error("reading StickyBinding {namespace}/{name}: {source}")]
    Get {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("creating StickyBinding {namespace}/{name}: {source}")]
    Create {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error("writing the status of StickyBinding {namespace}/{name}: {source}")]
    Update {
        namespace: String,
        name: String,
        source: kube::Error,
    },
    #[error(
        "not writing StickyBinding {namespace}/{name}: this replica no longer leads (the next leader's start-up reconcile counts the bind)"
    )]
    NotLeading { namespace: String, name: String },
    #[error(
        "the status of StickyBinding {namespace}/{name} is too large for the API server ({message}); its binds are not recorded"
    )]
    TooLarge {
        namespace: String,
        name: String,
        message: String,
    },
    #[error(
        "not writing StickyBinding {namespace}/{name}: its spec.workloadRef names {names}, not this workload ({ours}); it reports Stalled until it is deleted or renamed"
    )]
    NotThisWorkloads {
        namespace: String,
        name: String,
        names: String,
        ours: String,
    },
}

/// The status after counting `pod_uid` bound to `node`, or `None` when that pod is already
/// counted (a repeated report of the same bind). Pure.
pub fn count_bind(
    status: &StickyBindingStatus,
    pod_uid: &str,
    pod_name: &str,
    node: &str,
    now: Time,
) -> Option<StickyBindingStatus> {
    let mut next = status.clone();
    let bind = Bind {
        pod_uid: pod_uid.to_string(),
        pod_name: pod_name.to_string(),
        node: node.to_string(),
        bound_at: None,
    };
    let counted = count_binds(&mut next, std::slice::from_ref(&bind), now);
    (!counted.is_empty()).then_some(next)
}

/// Counts each of `binds` in `status` whose pod is not counted yet, in place; returns the
/// indexes of those counted. A pod is counted already when `recentBinds` or `countedPods` name
/// it, or when it was bound before `countedBefore` (which vouches for every such pod). Linear in
/// the status and the binds. Pure.
pub fn count_binds(status: &mut StickyBindingStatus, binds: &[Bind], now: Time) -> Vec<usize> {
    let mut known: std::collections::HashSet<String> = status
        .recent_binds
        .iter()
        .map(|b| b.pod_uid.clone())
        .chain(status.counted_pods.iter().cloned())
        .collect();
    let vouched_before = status.counted_before.as_ref().map(|t| t.0);
    let mut counted = Vec::new();
    for (i, bind) in binds.iter().enumerate() {
        let vouched =
            matches!((bind.bound_at, vouched_before), (Some(at), Some(before)) if at < before);
        if vouched || !known.insert(bind.pod_uid.clone()) {
            continue;
        }
        status.counted_pods.push(bind.pod_uid.clone());
        add_to_counts(status, &bind.node, now.clone());
        status.recent_binds.push(BindRecord {
            pod_uid: bind.pod_uid.clone(),
            pod_name: bind.pod_name.clone(),
            node: bind.node.clone(),
            time: now.clone(),
        });
        counted.push(i);
    }
    let excess = status.recent_binds.len().saturating_sub(RECENT_BINDS);
    status.recent_binds.drain(..excess);
    counted
}

/// Adds one bind to `node` to the counts, `latest` and `lastScheduleTime` (what the plugins
/// read). Saturating: a count edited by hand to the largest integer stays there, never wraps;
/// a negative one starts again from zero.
fn add_to_counts(status: &mut StickyBindingStatus, node: &str, now: Time) {
    let on_node = status.node_count.entry(node.to_string()).or_insert(0);
    *on_node = (*on_node).max(0).saturating_add(1);
    status.schedule_count = status.schedule_count.max(0).saturating_add(1);
    status.latest = Some(node.to_string());
    status.last_schedule_time = Some(now);
}

/// A new StickyBinding for `workload`, owned by it (so that it is garbage-collected with it).
pub fn new_binding(workload: &Workload) -> StickyBinding {
    let mut binding = StickyBinding::new(
        &workload.binding_name(),
        StickyBindingSpec {
            workload_ref: workload.workload_ref(),
            node_name: None,
        },
    );
    binding.metadata = ObjectMeta {
        name: Some(workload.binding_name()),
        namespace: Some(workload.namespace.clone()),
        labels: Some(
            [
                (
                    "tether.dev/workload-kind".to_string(),
                    workload.kind.to_lowercase(),
                ),
                (
                    "tether.dev/workload-name".to_string(),
                    truncate_label(&workload.name),
                ),
            ]
            .into(),
        ),
        owner_references: (!workload.uid.is_empty()).then(|| {
            vec![OwnerReference {
                api_version: workload.api_version.clone(),
                kind: workload.kind.clone(),
                name: workload.name.clone(),
                uid: workload.uid.clone(),
                controller: Some(false),
                block_owner_deletion: None,
            }]
        }),
        ..Default::default()
    };
    binding
}

fn truncate_label(v: &str) -> String {
    v.chars()
        .take(63)
        .collect::<String>()
        .trim_end_matches(['-', '.', '_'])
        .to_string()
}

/// What a history write did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Recorded {
    /// The bind was counted.
    Counted,
    /// The binding had counted this pod already (a repeated report); nothing was written.
    AlreadyCounted,
}

/// A bind waiting to be counted in its workload's binding.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bind {
    pub pod_uid: String,
    pub pod_name: String,
    pub node: String,
    /// When the API server recorded the bind (the pod's `PodScheduled` condition), when the
    /// pod read says: a bind reported again after `countedBefore` passed it is counted already.
    pub bound_at: Option<jiff::Timestamp>,
}

impl Bind {
    pub(super) fn of(pod: &Pod, node: &str) -> Self {
        Bind {
            pod_uid: pod.metadata.uid.clone().unwrap_or_default(),
            pod_name: pod.metadata.name.clone().unwrap_or_default(),
            node: node.to_string(),
            bound_at: pods::bound_at(pod),
        }
    }
}

/// What the writer reads of the scheduler's own state (its cache and queue), handed in when the
/// writer is built.
pub trait SchedulerView: Send + Sync {
    /// Whether the scheduler knows the pod of `uid` (bound or assumed, or pending), and when
    /// it was bound if its `PodScheduled` condition says.
    fn pod_seen(&self, uid: &str) -> bounds::Seen;
    /// The Node object of `name`, while the node exists.
    fn node(&self, name: &str) -> Option<Arc<Node>>;
}
