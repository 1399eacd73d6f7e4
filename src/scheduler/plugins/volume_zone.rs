//! VolumeZone: a pod whose bound volumes are labelled with a zone or region runs only on nodes
//! in it, as kube-scheduler's VolumeZone plugin.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolume;
use k8s_openapi::api::storage::v1::StorageClass;

use crate::k8s::volumes::{self, WAIT_FOR_FIRST_CONSUMER};
use crate::scheduler::framework::events::{
    ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration, objects, queue_if,
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

pub const NAME: &str = "VolumeZone";
pub const ERR_REASON: &str = "node(s) had no available volume zone";

const STATE_KEY: &str = "PreFilterVolumeZone";

/// The labels that place a volume, in the order upstream reads them.
const TOPOLOGY_LABELS: [&str; 4] = [
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// For a volume's beta label, the GA label a node may carry instead.
fn ga_label(key: &str) -> &str {
    match key {
        "failure-domain.beta.kubernetes.io/zone" => "topology.kubernetes.io/zone",
        "failure-domain.beta.kubernetes.io/region" => "topology.kubernetes.io/region",
        other => other,
    }
}

/// One topology label of a bound volume: the values (`a__b` names two) a node must have.
#[derive(Clone, Debug, PartialEq, Eq)]
struct VolumeTopology {
    key: &'static str,
    values: BTreeSet<String>,
}

/// The topology labels of a volume; a value with an empty part is ignored.
fn topologies(pv: &PersistentVolume) -> Vec<VolumeTopology> {
    let Some(labels) = pv.metadata.labels.as_ref() else {
        return Vec::new();
    };
    TOPOLOGY_LABELS
        .iter()
        .filter_map(|&key| {
            let value = labels.get(key)?;
            let values: BTreeSet<String> =
                value.split("__").map(|v| v.trim().to_string()).collect();
            (!values.iter().any(String::is_empty)).then_some(VolumeTopology { key, values })
        })
        .collect()
}

/// Rejects nodes outside the zones and regions of the pod's bound volumes.
pub struct VolumeZone {
    storage: Arc<StorageIndex>,
}

impl Plugin for VolumeZone {
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
        let add_update = ActionType::ADD | ActionType::UPDATE;
        Some(vec![
            Registration::new(
                ClusterEvent::new(EventResource::StorageClass, ActionType::ADD),
                Arc::new(after_class_added),
            ),
            Registration::always(ClusterEvent::new(
                EventResource::Node,
                ActionType::ADD | ActionType::UPDATE_NODE_LABEL,
            )),
            Registration::new(
                ClusterEvent::new(EventResource::PersistentVolumeClaim, add_update),
                Arc::new(after_claim_change),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::PersistentVolume, add_update),
                Arc::new(after_volume_change),
            ),
        ])
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl VolumeZone {
    /// The topologies of the pod's bound volumes, or the status that rejects the pod.
    fn volume_topologies(&self, pod: &PodInfo) -> Result<Vec<VolumeTopology>, Status> {
        let stores = self.storage.read();
        let namespace = pod.pod.metadata.namespace.as_deref().unwrap_or_default();
        let mut found = Vec::new();
        for claim_name in volumes::pvc_claim_names(&pod.pod) {
            if claim_name.is_empty() {
                return Err(Status::unresolvable("PersistentVolumeClaim had no name"));
            }
            let Some(pvc) = stores
                .claims
                .watched(&volumes::claim_key(namespace, claim_name))
            else {
                return Err(Status::unresolvable(format!(
                    "persistentvolumeclaim \"{claim_name}\" not found"
                )));
            };
            let pv_name = volumes::claim_volume_name(pvc);
            if pv_name.is_empty() {
                let class = volumes::claim_class(pvc);
                if class.is_empty() {
                    return Err(Status::unresolvable(
                        "PersistentVolumeClaim had no pv name and storageClass name",
                    ));
                }
                let Some(sc) = stores.classes.get(class) else {
                    return Err(Status::unresolvable(format!(
                        "storageclass.storage.k8s.io \"{class}\" not found"
                    )));
                };
                match sc.volume_binding_mode.as_deref() {
                    None => {
                        return Err(Status::unresolvable(format!(
                            "VolumeBindingMode not set for StorageClass \"{class}\""
                        )));
                    }
                    Some(WAIT_FOR_FIRST_CONSUMER) => continue,
                    Some(_) => return Err(Status::unresolvable("PersistentVolume had no name")),
                }
            }
            let Some(pv) = stores.volumes.watched(pv_name) else {
                return Err(Status::unresolvable(format!(
                    "persistentvolume \"{pv_name}\" not found"
                )));
            };
            found.extend(topologies(pv));
        }
        Ok(found)
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let all = PreFilterResult::all_nodes();
        match self.volume_topologies(pod) {
            Err(status) => (all, status),
            Ok(found) if found.is_empty() => (all, Status::skip()),
            Ok(found) => {
                state.write(STATE_KEY, found);
                (all, Status::success())
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(found) = state.read::<Vec<VolumeTopology>>(STATE_KEY) else {
            return Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
        };
        let labels = node.labels();
        if !TOPOLOGY_LABELS.iter().any(|k| labels.contains_key(*k)) {
            return Status::success();
        }
        let fits = found.iter().all(|t| {
            labels
                .get(t.key)
                .or_else(|| labels.get(ga_label(t.key)))
                .is_some_and(|v| t.values.contains(v))
        });
        if fits {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON)
        }
    }
}

fn after_class_added(_: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    match objects::<StorageClass>(old, new).1 {
        Some(sc) => queue_if(sc.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER)),
        None => Hint::Queue,
    }
}

/// A `persistentVolumeClaim` volume of the pod added or changed (ephemeral ones not counted).
fn after_claim_change(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    after_claim_of_pod(pod, old, new, false)
}

/// A volume added, or one whose topology labels changed.
fn after_volume_change(_: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    match objects::<PersistentVolume>(old, new) {
        (Some(old), Some(new)) => queue_if(topologies(old) != topologies(new)),
        _ => Hint::Queue,
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let storage = handle.storage.clone();
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(VolumeZone { storage }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::volumes::{claim, class, volume};
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn zoned(name: &str, zone: &str) -> PersistentVolume {
        volume(name, "10Gi")
            .label("topology.kubernetes.io/zone", zone)
            .build()
    }

    /// Upstream's cases: a bound volume's zone (or a `__`-separated set of zones) admits
    /// only nodes in it; a node with no topology label at all is admitted; beta volume labels
    /// are read against the node's GA labels.
    #[test]
    fn nodes_outside_the_volumes_zone_are_rejected() {
        let storage = Arc::new(StorageIndex::default());
        storage.apply(Arc::new(zoned("pv-a", "zone-a")));
        storage.apply(Arc::new(
            volume("pv-ab", "10Gi")
                .label("failure-domain.beta.kubernetes.io/zone", "zone-a__zone-b")
                .build(),
        ));
        storage.apply(Arc::new(claim("c-a", "").bound_to("pv-a").build()));
        storage.apply(Arc::new(claim("c-ab", "").bound_to("pv-ab").build()));
        let plugin = VolumeZone { storage };
        let node = |zone: Option<&str>| {
            let b = NodeBuilder::new("n");
            match zone {
                Some(z) => b.label("topology.kubernetes.io/zone", z),
                None => b.label("kubernetes.io/hostname", "n"),
            }
            .info(vec![])
        };
        let cases = [
            ("c-a", Some("zone-a"), true),
            ("c-a", Some("zone-b"), false),
            ("c-a", None, true),
            ("c-ab", Some("zone-b"), true),
            ("c-ab", Some("zone-c"), false),
        ];
        for (claim_name, zone, fits) in cases {
            let pod = PodBuilder::new("p").claim(claim_name).info();
            let mut state = CycleState::new();
            let (_, status) =
                PreFilterPlugin::pre_filter(&plugin, &mut state, &pod, &Snapshot::default());
            assert!(status.is_success(), "{claim_name}: {status:?}");
            let status = FilterPlugin::filter(&plugin, &state, &pod, &node(zone));
            assert_eq!(
                status.is_success(),
                fits,
                "{claim_name} in {zone:?}: {status:?}"
            );
            if !fits {
                assert_eq!(status.message(), ERR_REASON);
            }
        }
    }

    #[test]
    fn unbound_claims_are_skipped_or_rejected_by_their_class() {
        let storage = Arc::new(StorageIndex::default());
        storage.apply(Arc::new(class("wait", WAIT_FOR_FIRST_CONSUMER)));
        storage.apply(Arc::new(class("now", "Immediate")));
        storage.apply(Arc::new(claim("waits", "wait").build()));
        storage.apply(Arc::new(claim("now", "now").build()));
        let plugin = VolumeZone { storage };
        let run = |claim_name: &str| {
            let pod = PodBuilder::new("p").claim(claim_name).info();
            PreFilterPlugin::pre_filter(&plugin, &mut CycleState::new(), &pod, &Snapshot::default())
                .1
        };
        assert!(run("waits").is_skip());
        assert_eq!(run("now").message(), "PersistentVolume had no name");
        assert_eq!(
            run("missing").message(),
            "persistentvolumeclaim \"missing\" not found"
        );
    }
}
