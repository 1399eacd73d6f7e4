//! Watch-fed indexes of the cluster that plugins read besides the snapshot, as kube-scheduler's
//! plugins read informers' listers through the framework handle: the storage objects (volumes,
//! claims, classes, CSI objects, with the assume cache over volumes and claims), the
//! PodDisruptionBudgets preemption weighs, and the workload selectors of PodTopologySpread's
//! default constraints. They know the framework's contracts and nothing above them.

pub mod disruption_budgets;
pub mod selectors;
pub mod storage;
