//! tether's sticky plugins and what they share: StickyNode (a workload returns to the node it
//! is pinned to), PlacementHistory (on reschedule, prefer the nodes a workload used least) and
//! PlacementRecorder (counts each bind once in the workload's StickyBinding, enabled by the
//! profile compiler wherever a plugin reads history). The workload identity, the bindings index
//! and the history writer they read and write live in `crate::sticky`, below the plugins.

pub mod placement_history;
pub mod placement_recorder;
pub mod sticky_node;

use k8s_openapi::api::core::v1::Pod;

use crate::scheduler::framework::Status;
use crate::sticky::workload::Workload;

/// How soon a pod whose owner the watches have not delivered yet is tried again.
const OWNER_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// For a plugin keyed on the pod's workload: a rejection, retried shortly, while the pod's
/// controller is not known yet (its identity would be a guess: a VMI's pod would be taken for
/// the VMI's own workload instead of its VM's). `None` once the workload is known.
pub fn wait_for_owner(workload: &Workload) -> Option<Status> {
    let owner = workload.pending_owner.as_ref()?;
    Some(
        Status::unschedulable(format!("waiting for the pod's owner {owner} to be known"))
            .with_retry_after(OWNER_RETRY),
    )
}

/// Whose history a reader plugin (StickyNode, PlacementHistory) reads, from its args: the pods
/// it does not leave alone. PlacementRecorder writes only what some reader of the profile reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Readership {
    pub skip_multi_replica: bool,
    pub excluded_namespaces: Vec<String>,
    pub disable_annotation: String,
}

impl Readership {
    /// Whether the reader reads the history of `workload` for `pod`.
    pub fn reads(&self, pod: &Pod, workload: &Workload) -> bool {
        let skipped = self.skip_multi_replica && workload.is_multi_replica();
        !(skipped || opted_out(pod, &self.excluded_namespaces, &self.disable_annotation))
    }
}

/// Whether a pod opted out of a workload-history plugin (StickyNode, PlacementHistory): it is in
/// one of `excluded_namespaces`, or carries `disable_annotation` set to `"true"`.
pub fn opted_out(pod: &Pod, excluded_namespaces: &[String], disable_annotation: &str) -> bool {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    excluded_namespaces.iter().any(|n| n == namespace)
        || pod
            .metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(disable_annotation))
            .is_some_and(|v| v == "true")
}
