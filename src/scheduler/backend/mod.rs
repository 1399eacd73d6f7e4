//! What feeds the scheduling cycle, as kube-scheduler's `backend`: the cache of nodes and pods
//! (with assumed pods), the scheduling queue, and the event handlers that keep both current from
//! the watches; plus the index of workload selectors PodTopologySpread's default constraints
//! read, and the index of storage objects (volumes, claims, classes, CSI objects) the volume
//! plugins read.

pub mod cache;
pub mod disruption_budgets;
pub mod handlers;
pub mod node_tree;
pub mod nominator;
pub mod queue;
pub mod selectors;
pub mod storage;
pub mod storage_handlers;
