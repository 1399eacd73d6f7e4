//! VolumeRestrictions: volumes two pods cannot share, as kube-scheduler's VolumeRestrictions
//! plugin: a ReadWriteOncePod claim already used by a scheduled pod, and the inline disks
//! (GCE PD, AWS EBS, iSCSI, RBD) that a node cannot mount twice.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Volume;

use crate::k8s::pod::Pod;
use crate::k8s::volumes::{self, READ_WRITE_ONCE_POD};
use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration, queue_if,
};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::helper::{after_claim_of_pod, expect_no_args};

pub const NAME: &str = "VolumeRestrictions";
pub const ERR_DISK_CONFLICT: &str = "node(s) had no available disk";
pub const ERR_READ_WRITE_ONCE_POD: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

const STATE_KEY: &str = "PreFilterVolumeRestrictions";

/// What PreFilter found: the pod's ReadWriteOncePod claims, and how many of them a scheduled
/// pod already uses.
#[derive(Debug)]
struct State {
    rwop_claims: BTreeSet<String>,
    in_use: usize,
}

/// Rejects a pod whose volumes another pod holds exclusively.
pub struct VolumeRestrictions {
    storage: Arc<StorageIndex>,
}

/// Whether the volume is an inline disk of a kind two pods on a node cannot both mount.
fn restricted(v: &Volume) -> bool {
    v.gce_persistent_disk.is_some()
        || v.aws_elastic_block_store.is_some()
        || v.rbd.is_some()
        || v.iscsi.is_some()
}

/// Whether two inline disks are the same disk mounted in a way that conflicts.
fn conflicts(v: &Volume, e: &Volume) -> bool {
    if let (Some(a), Some(b)) = (&v.gce_persistent_disk, &e.gce_persistent_disk) {
        return a.pd_name == b.pd_name && !(a.read_only == Some(true) && b.read_only == Some(true));
    }
    if let (Some(a), Some(b)) = (&v.aws_elastic_block_store, &e.aws_elastic_block_store) {
        return a.volume_id == b.volume_id;
    }
    if let (Some(a), Some(b)) = (&v.iscsi, &e.iscsi) {
        return a.iqn == b.iqn && !(a.read_only == Some(true) && b.read_only == Some(true));
    }
    if let (Some(a), Some(b)) = (&v.rbd, &e.rbd) {
        return a.monitors.iter().any(|m| b.monitors.contains(m))
            && a.pool == b.pool
            && a.image == b.image
            && !(a.read_only == Some(true) && b.read_only == Some(true));
    }
    false
}

fn pod_volumes(pod: &Pod) -> impl Iterator<Item = &Volume> {
    pod.spec.iter().flat_map(|s| s.volumes.iter().flatten())
}

/// Whether none of the pod's inline disks is mounted by `others` in a conflicting way.
fn disks_free<'a>(pod: &Pod, mut others: impl Iterator<Item = &'a Pod>) -> bool {
    let wanted: Vec<&Volume> = pod_volumes(pod).filter(|v| restricted(v)).collect();
    wanted.is_empty()
        || !others.any(|o| pod_volumes(o).any(|e| wanted.iter().any(|v| conflicts(v, e))))
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        signature.part(
            crate::scheduler::framework::signature::VOLUMES,
            &crate::scheduler::framework::signature::volumes(pod),
        );
        true
    }
    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(vec![
            Registration::new(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                Arc::new(after_pod_deleted),
            ),
            Registration::always(ClusterEvent::new(EventResource::Node, ActionType::ADD)),
            Registration::new(
                ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
                Arc::new(after_claim_added),
            ),
        ])
    }
    fn pre_filter_reads_pods(&self) -> bool {
        true
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let all = PreFilterResult::all_nodes();
        let needs_disk_check = pod_volumes(&pod.pod).any(restricted);
        let namespace = pod.pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut rwop_claims = BTreeSet::new();
        {
            let stores = self.storage.read();
            for name in volumes::pvc_claim_names(&pod.pod) {
                let Some(pvc) = stores.claims.watched(&volumes::claim_key(namespace, name)) else {
                    return (
                        all,
                        Status::unresolvable(format!("persistentvolumeclaim \"{name}\" not found")),
                    );
                };
                if volumes::claim_access_modes(pvc)
                    .iter()
                    .any(|m| m == READ_WRITE_ONCE_POD)
                {
                    rwop_claims.insert(name.to_string());
                }
            }
        }
        let in_use = if rwop_claims.is_empty() {
            0
        } else {
            let used: BTreeSet<&str> = snapshot
                .nodes()
                .iter()
                .flat_map(|n| n.pods.iter())
                .filter(|p| p.pod.metadata.namespace.as_deref() == Some(namespace))
                .flat_map(|p| volumes::pvc_claim_names(&p.pod))
                .collect();
            rwop_claims
                .iter()
                .filter(|c| used.contains(c.as_str()))
                .count()
        };
        if !needs_disk_check && in_use == 0 {
            return (all, Status::skip());
        }
        state.write(
            STATE_KEY,
            State {
                rwop_claims,
                in_use,
            },
        );
        (all, Status::success())
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if !disks_free(&pod.pod, node.pods.iter().map(|p| p.pod.as_ref())) {
            return Status::unschedulable(ERR_DISK_CONFLICT);
        }
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
        };
        debug_assert!(s.in_use <= s.rwop_claims.len());
        if s.in_use > 0 {
            return Status::unschedulable(ERR_READ_WRITE_ONCE_POD);
        }
        Status::success()
    }
}

/// A pod deleted in the pod's namespace that mounted one of its disks or used one of its claims.
fn after_pod_deleted(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let Some(deleted) = events::pods(old, new).0 else {
        return Hint::Queue;
    };
    if deleted.metadata.namespace != pod.pod.metadata.namespace {
        return Hint::Skip;
    }
    if !disks_free(&pod.pod, std::iter::once(deleted)) {
        return Hint::Queue;
    }
    let mine: BTreeSet<&str> = volumes::pvc_claim_names(&pod.pod).collect();
    queue_if(volumes::pvc_claim_names(deleted).any(|c| mine.contains(c)))
}

/// One of the pod's claims created.
fn after_claim_added(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    after_claim_of_pod(pod, old, new, false)
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let storage = handle.storage.clone();
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(VolumeRestrictions { storage }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::GCEPersistentDiskVolumeSource;

    use super::*;
    use crate::scheduler::testing::volumes::claim;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

    fn run(plugin: &VolumeRestrictions, pod: &PodInfo, snap: &Snapshot) -> Status {
        let mut state = CycleState::new();
        let (_, status) = PreFilterPlugin::pre_filter(plugin, &mut state, pod, snap);
        if !status.is_success() {
            return status;
        }
        let node = snap.nodes()[0].clone();
        FilterPlugin::filter(plugin, &state, pod, &node)
    }

    /// A ReadWriteOncePod claim used by a scheduled pod keeps a second pod out of every node
    /// (upstream's message); one not in use lets PreFilter skip.
    #[test]
    fn a_read_write_once_pod_claim_in_use_rejects_the_second_pod() {
        let storage = Arc::new(StorageIndex::default());
        storage.apply(Arc::new(
            claim("solo", "")
                .access_modes(&[READ_WRITE_ONCE_POD])
                .build(),
        ));
        storage.apply(Arc::new(claim("shared", "").build()));
        let plugin = VolumeRestrictions { storage };
        let user = PodBuilder::new("first")
            .claim("solo")
            .node_name("n1")
            .build();
        let other = PodBuilder::new("other")
            .claim("shared")
            .node_name("n1")
            .build();
        let busy = snapshot(vec![NodeBuilder::new("n1")], vec![user, other]);
        let idle = snapshot(vec![NodeBuilder::new("n1")], vec![]);

        let second = PodBuilder::new("second").claim("solo").info();
        let status = run(&plugin, &second, &busy);
        assert_eq!(
            status.code,
            crate::scheduler::framework::Code::Unschedulable
        );
        assert_eq!(status.message(), ERR_READ_WRITE_ONCE_POD);
        assert!(run(&plugin, &second, &idle).is_skip());

        let sharing = PodBuilder::new("sharing").claim("shared").info();
        assert!(
            run(&plugin, &sharing, &busy).is_skip(),
            "ReadWriteOnce is not exclusive per pod"
        );

        let missing = PodBuilder::new("m").claim("nope").info();
        assert_eq!(
            run(&plugin, &missing, &idle).message(),
            "persistentvolumeclaim \"nope\" not found"
        );
    }

    #[test]
    fn an_inline_disk_mounted_read_write_conflicts() {
        let disk = |read_only: bool| {
            move |p: &mut Pod| {
                p.spec.get_or_insert_default().volumes = Some(vec![Volume {
                    name: "d".into(),
                    gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
                        pd_name: "pd-1".into(),
                        read_only: Some(read_only),
                        ..Default::default()
                    }),
                    ..Default::default()
                }]);
            }
        };
        let plugin = VolumeRestrictions {
            storage: Arc::new(StorageIndex::default()),
        };
        let holder = PodBuilder::new("h")
            .node_name("n1")
            .with(disk(true))
            .build();
        let snap = snapshot(vec![NodeBuilder::new("n1")], vec![holder]);
        let reader = PodBuilder::new("r").with(disk(true)).info();
        assert!(
            run(&plugin, &reader, &snap).is_success(),
            "two readers share a disk"
        );
        let writer = PodBuilder::new("w").with(disk(false)).info();
        assert_eq!(run(&plugin, &writer, &snap).message(), ERR_DISK_CONFLICT);
    }
}
