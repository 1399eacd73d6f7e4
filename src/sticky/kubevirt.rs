//! What KubeVirt writes that the sticky plugins read: the label virt-controller puts on a live
//! migration's target pod, and the migration state a VirtualMachineInstance reports
//! (kubevirt.io/api `core/v1`: `VirtualMachineInstanceStatus.migrationState`, a
//! `VirtualMachineInstanceMigrationState`).
//!
//! A migration target pod is a second virt-launcher pod of a running VMI. It is not the VM
//! coming back, so it is held to no pin; and it is not where the VM runs until the migration
//! has completed, so its bind is counted in the VM's history only then (a failed or aborted
//! migration leaves the pin where it was).

use serde::Deserialize;

use crate::k8s::pod::Pod;

/// The label virt-controller sets on a migration target pod: the migration's UID.
pub const MIGRATION_JOB_UID: &str = "kubevirt.io/migrationJobUID";

/// The migration `pod` is the target of, by UID: a pod labelled [`MIGRATION_JOB_UID`] and
/// controlled by a VirtualMachineInstance.
pub fn migration_of(pod: &Pod) -> Option<&str> {
    let uid = pod.metadata.labels.as_ref()?.get(MIGRATION_JOB_UID)?;
    let owned_by_vmi = pod.metadata.owner_references.as_ref().is_some_and(|refs| {
        refs.iter().any(|r| {
            r.controller == Some(true)
                && r.kind == "VirtualMachineInstance"
                && r.api_version.starts_with("kubevirt.io/")
        })
    });
    (owned_by_vmi && !uid.is_empty()).then_some(uid.as_str())
}

/// The fields of a VMI's `status.migrationState` the history needs, as KubeVirt names them.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct MigrationState {
    #[serde(default)]
    pub migration_uid: Option<String>,
    #[serde(default)]
    pub target_node: Option<String>,
    #[serde(default)]
    pub target_pod: Option<String>,
    #[serde(default)]
    pub completed: bool,
    #[serde(default)]
    pub failed: bool,
}

/// A migration a VMI reports completed: the VM now runs in `target_pod` on `target_node`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Completed {
    pub migration_uid: String,
    pub target_pod: String,
    pub target_node: String,
}

/// The migration `vmi_status` (a VMI's `status`, as JSON) reports completed, if its last one
/// did: completed, not failed, with the target named, and the VMI's `nodeName` moved to the
/// target (virt-controller moves it when it sees the target running the domain).
pub fn completed_migration(vmi_status: &serde_json::Value) -> Option<Completed> {
    let state: MigrationState =
        serde_json::from_value(vmi_status.get("migrationState")?.clone()).ok()?;
    if !state.completed || state.failed {
        return None;
    }
    let target_node = state.target_node.filter(|n| !n.is_empty())?;
    let runs_on = vmi_status.get("nodeName").and_then(|n| n.as_str());
    if runs_on != Some(target_node.as_str()) {
        return None;
    }
    Some(Completed {
        migration_uid: state.migration_uid.unwrap_or_default(),
        target_pod: state.target_pod.filter(|p| !p.is_empty())?,
        target_node,
    })
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;
    use crate::scheduler::testing::PodBuilder;

    fn vmi_owned(pod: &mut Pod) {
        pod.metadata.owner_references = Some(vec![
            serde_json::from_value(json!({"apiVersion": "kubevirt.io/v1",
                "kind": "VirtualMachineInstance", "name": "vm", "uid": "uid-vmi",
                "controller": true, "blockOwnerDeletion": true}))
            .expect("an owner reference"),
        ]);
    }

    #[test]
    fn a_migration_target_is_a_labelled_pod_of_a_vmi() {
        let target = PodBuilder::new("virt-launcher-vm-x")
            .label(MIGRATION_JOB_UID, "uid-mig")
            .with(vmi_owned)
            .build();
        assert_eq!(migration_of(&target), Some("uid-mig"));
        let source = PodBuilder::new("virt-launcher-vm-s")
            .with(vmi_owned)
            .build();
        assert_eq!(migration_of(&source), None, "the source has no label");
        let stray = PodBuilder::new("p")
            .label(MIGRATION_JOB_UID, "uid-mig")
            .build();
        assert_eq!(migration_of(&stray), None, "not a VMI's pod");
    }

    #[test]
    fn only_a_completed_migration_that_moved_the_vmi_counts() {
        let status = |completed: bool, failed: bool, node: &str| {
            json!({"nodeName": node, "migrationState": {
                "migrationUid": "uid-mig", "sourceNode": "n1", "targetNode": "n2",
                "targetPod": "virt-launcher-vm-x", "completed": completed, "failed": failed}})
        };
        assert_eq!(
            completed_migration(&status(true, false, "n2")),
            Some(Completed {
                migration_uid: "uid-mig".into(),
                target_pod: "virt-launcher-vm-x".into(),
                target_node: "n2".into(),
            })
        );
        assert_eq!(
            completed_migration(&status(false, false, "n1")),
            None,
            "running"
        );
        assert_eq!(
            completed_migration(&status(true, true, "n1")),
            None,
            "failed"
        );
        assert_eq!(
            completed_migration(&status(true, false, "n1")),
            None,
            "the VMI does not run on the target yet"
        );
        assert_eq!(completed_migration(&json!({"nodeName": "n1"})), None);
    }
}
