//! Watch-fed indexes of the cluster that plugins read besides the snapshot, as kube-scheduler's
//! plugins read informers' listers through the framework handle: the storage objects (volumes,
//! claims, classes, CSI objects, with the assume cache over volumes and claims), the DRA objects
//! (ResourceSlices, DeviceClasses, ResourceClaims with their in-flight allocations), the
//! PodDisruptionBudgets preemption weighs, and the workload selectors of PodTopologySpread's
//! default constraints. They know the framework's contracts and nothing above them.

use std::sync::Arc;

pub mod claim_view;
pub mod devices;
pub mod disruption_budgets;
pub mod pod_groups;
pub mod selectors;
pub mod storage;

/// An index that keeps watched objects of kind `K`: what a watch feeding it needs.
pub trait Keeps<K>: Send + Sync + 'static {
    fn apply(&self, obj: Arc<K>);
    fn delete(&self, obj: &K);
    fn reset(&self, objs: Vec<Arc<K>>);
    /// The object the index holds under `obj`'s key (before a change), as watched.
    fn current(&self, obj: &K) -> Option<Arc<K>>;
    /// Every object of the kind, as watched.
    fn all(&self) -> Vec<Arc<K>>;
    /// Whether the API server serves the kind `what` ([`crate::watch::Index::served`]).
    fn served(&self, _what: &'static str, _served: bool) {}
}
