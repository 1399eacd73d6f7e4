//! tether's sticky plugins and what they share: StickyNode (a workload returns to the node it
//! is pinned to), PlacementHistory (on reschedule, prefer the nodes a workload used least) and
//! PlacementRecorder (counts each bind once in the workload's StickyBinding, enabled by the
//! profile compiler wherever a plugin reads history). The workload identity, the bindings index
//! and the history writer they read and write live in `crate::sticky`, below the plugins.

pub mod placement_history;
pub mod placement_recorder;
pub mod sticky_node;

use std::sync::Arc;

use crate::k8s::pod::Pod;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::{CycleState, Status};
use crate::sticky::workload::{self, OwnerLookup, Workload};

/// Where the pod's workload is kept in the cycle state.
const WORKLOAD: &str = "sticky/workload";

/// The pod's workload, resolved once per cycle: the first sticky plugin to ask resolves it and
/// keeps it in the cycle state, the others (PlacementRecorder too, at PostBind, on the same
/// state) read it there.
pub fn cycle_workload(
    state: &mut CycleState,
    pod: &PodInfo,
    owners: &dyn OwnerLookup,
) -> Arc<Workload> {
    if let Some(known) = state.read::<Arc<Workload>>(WORKLOAD) {
        return known.clone();
    }
    let resolved = Arc::new(workload::resolve(&pod.pod, owners));
    state.write(WORKLOAD, resolved.clone());
    resolved
}

/// The workload a sticky plugin resolved in this cycle, if one did.
pub fn resolved_workload(state: &CycleState) -> Option<Arc<Workload>> {
    state.read::<Arc<Workload>>(WORKLOAD).cloned()
}

/// How soon a pod whose owner the watches have not delivered yet is tried again.
const OWNER_RETRY: std::time::Duration = std::time::Duration::from_millis(500);

/// How long after its creation a pod waits for its controller to be known. A controller the
/// watches have not delivered by then does not exist with the UID the pod names (a reference
/// made up, or to an object deleted and created again): the pod is then scheduled without its
/// workload's history (never pinned by it, never counted in it), instead of being retried
/// twice a second for good.
pub const OWNER_WAIT_LIMIT: jiff::SignedDuration = jiff::SignedDuration::from_secs(30);

/// For a plugin keyed on the pod's workload: a rejection, retried shortly, while the pod's
/// controller is not known yet (its identity would be a guess: a VMI's pod would be taken for
/// the VMI's own workload instead of its VM's). `None` once the workload is known, and once
/// the pod has waited [`OWNER_WAIT_LIMIT`] (the caller then leaves an unknown workload alone).
pub fn wait_for_owner(pod: &Pod, workload: &Workload) -> Option<Status> {
    let owner = workload.pending_owner.as_ref()?;
    let created = pod.metadata.creation_timestamp.as_ref().map(|t| t.0);
    if created.is_some_and(|c| jiff::Timestamp::now().duration_since(c) > OWNER_WAIT_LIMIT) {
        return None;
    }
    Some(
        Status::unschedulable(format!("waiting for the pod's owner {owner} to be known"))
            .with_retry_after(OWNER_RETRY),
    )
}

/// Whose history a reader plugin (StickyNode, PlacementHistory) reads, as it declares it
/// ([`Plugin::history_readership`](crate::scheduler::framework::Plugin::history_readership)).
/// PlacementRecorder writes only what some reader of the profile reads.
pub use crate::scheduler::framework::HistoryReadership as Readership;

impl Readership {
    /// Whether the reader reads the history of `workload` for `pod`.
    pub fn reads(&self, pod: &Pod, workload: &Workload) -> bool {
        let skipped = self.skip_multi_replica && workload.is_multi_replica();
        !(skipped || opted_out(pod, &self.excluded_namespaces, &self.disable_annotation))
    }
}

/// Whether a plugin of `profile` that reads workload history (StickyNode, PlacementHistory)
/// reads `workload`'s for `pod`: the rule PlacementRecorder records by, and the start-up
/// reconcile too.
pub fn profile_reads_history_of(
    profile: &crate::scheduler::framework::profile::CompiledProfile,
    pod: &Pod,
    workload: &Workload,
) -> bool {
    profile
        .pre_filter
        .iter()
        .chain(profile.pre_score.iter())
        .filter_map(|p| p.history_readership())
        .any(|r| r.reads(pod, workload))
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

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use crate::scheduler::testing::PodBuilder;
    use crate::sticky::workload::OwnerMeta;

    /// Counts the owner lookups; every ReplicaSet is `web`'s.
    #[derive(Default)]
    struct Counting(AtomicUsize);

    impl OwnerLookup for Counting {
        fn get(&self, _ns: &str, _v: &str, kind: &str, name: &str) -> Option<OwnerMeta> {
            self.0.fetch_add(1, Ordering::SeqCst);
            Some(OwnerMeta {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                controller: None,
                replicas: Some(1),
            })
        }
    }

    /// The sticky plugins of one cycle resolve the pod's workload once: PreFilter of the first
    /// to ask, the rest (PostBind too) read it from the cycle state.
    #[test]
    fn a_pods_workload_is_resolved_once_per_cycle() {
        let owners = Counting::default();
        let pod = PodBuilder::new("web-1-abc")
            .with(|p| {
                p.metadata.owner_references = Some(vec![
                    serde_json::from_value(serde_json::json!({"apiVersion": "apps/v1",
                        "kind": "ReplicaSet", "name": "web-1", "uid": "uid-web-1",
                        "controller": true}))
                    .expect("an owner reference"),
                ]);
            })
            .info();
        let mut state = CycleState::new();
        assert!(resolved_workload(&state).is_none());
        let first = cycle_workload(&mut state, &pod, &owners);
        let lookups = owners.0.load(Ordering::SeqCst);
        assert!(lookups > 0, "the first ask resolves");
        for _ in 0..4 {
            assert_eq!(cycle_workload(&mut state, &pod, &owners), first);
        }
        assert_eq!(resolved_workload(&state), Some(first));
        assert_eq!(
            owners.0.load(Ordering::SeqCst),
            lookups,
            "no lookup after the first"
        );
    }
}

#[cfg(test)]
mod owner_wait_tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::scheduler::testing::PodBuilder;

    /// A pod whose controller is not known waits for it, a while: a reference nobody can vouch
    /// for (made up, or naming an object deleted and created again) is not retried for good.
    #[test]
    fn a_pod_waits_for_its_owner_a_while_not_for_good() {
        let workload = Workload {
            namespace: "ns".into(),
            api_version: "kubevirt.io/v1".into(),
            kind: "VirtualMachineInstance".into(),
            name: "vm".into(),
            uid: "forged".into(),
            ordinal: None,
            pod_name: None,
            replicas: None,
            pending_owner: Some("VirtualMachineInstance/vm".into()),
        };
        let created = |ago: i64| {
            PodBuilder::new("p")
                .with(|p| {
                    p.metadata.creation_timestamp = Some(Time(
                        jiff::Timestamp::now() - jiff::SignedDuration::from_secs(ago),
                    ))
                })
                .build()
        };
        let waiting = wait_for_owner(&created(1), &workload).expect("waits");
        assert!(waiting.retry_after.is_some(), "{waiting:?}");
        assert!(
            wait_for_owner(&created(31), &workload).is_none(),
            "waited long enough"
        );
        let known = Workload {
            pending_owner: None,
            ..workload
        };
        assert!(wait_for_owner(&created(1), &known).is_none());
    }
}
