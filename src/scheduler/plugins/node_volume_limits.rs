//! NodeVolumeLimits: a node takes no more volumes of a CSI driver than its CSINode says the
//! driver can attach (`spec.drivers[].allocatable.count`), as kube-scheduler's
//! NodeVolumeLimits plugin. Volumes are counted by driver and volume handle, so a volume two
//! pods share counts once; a claim not bound yet counts against its class's provisioner.
//!
//! In-tree volume types (GCE PD, AWS EBS, …) migrated to CSI are not translated and not
//! counted: tether schedules clusters whose volumes are CSI or local.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use k8s_openapi::api::storage::v1::CSINode;

use crate::k8s::pod::Pod;
use crate::k8s::volumes;
use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration, objects,
    queue_if,
};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};
use crate::scheduler::informers::storage::{StorageIndex, Stores};
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::helper::{after_claim_of_pod, expect_no_args};

pub const NAME: &str = "NodeVolumeLimits";
pub const ERR_REASON: &str = "node(s) exceed max volume count";

/// Rejects nodes where the pod's volumes would pass a driver's attach limit.
pub struct NodeVolumeLimits {
    storage: Arc<StorageIndex>,
    /// Whose checks apply (a missing driver keeps pods off from 1.37).
    release: crate::k8s::release::Release,
}

/// Why a pod's volumes cannot be counted.
enum CountError {
    /// A claim the new pod names does not exist.
    NotFound(String),
    Other(String),
}

/// The driver and volume handle behind a claim: its CSI volume when bound, else its class's
/// provisioner with a handle made of the claim's name (so pods sharing it count it once).
fn driver_of(stores: &Stores, pvc: &PersistentVolumeClaim) -> Option<(String, String)> {
    let bound = volumes::claim_volume_name(pvc);
    if !bound.is_empty()
        && let Some(pv) = stores.volumes.watched(bound)
    {
        let csi = pv.spec.as_ref()?.csi.as_ref()?;
        return Some((csi.driver.clone(), csi.volume_handle.clone()));
    }
    let class = stores.classes.get(volumes::claim_class(pvc))?;
    let handle = format!(
        "unbound-{}",
        volumes::claim_key(
            pvc.metadata.namespace.as_deref().unwrap_or_default(),
            pvc.metadata.name.as_deref().unwrap_or_default()
        )
    );
    Some((class.provisioner.clone(), handle))
}

/// Adds the pod's CSI volumes to `out` (`driver/handle` → driver). For the pod being
/// scheduled a missing claim is an error; an existing pod's is skipped.
fn collect(
    stores: &Stores,
    pod: &Pod,
    new_pod: bool,
    out: &mut HashMap<String, String>,
) -> Result<(), CountError> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    for claim in volumes::pod_claims(pod) {
        if claim.name.is_empty() {
            return Err(CountError::Other(
                "PersistentVolumeClaim had no name".into(),
            ));
        }
        let Some(pvc) = stores
            .claims
            .watched(&volumes::claim_key(namespace, &claim.name))
        else {
            if new_pod {
                return Err(CountError::NotFound(format!(
                    "looking up PVC {namespace}/{}: persistentvolumeclaim \"{}\" not found",
                    claim.name, claim.name
                )));
            }
            continue;
        };
        if claim.ephemeral && !volumes::owned_by_pod(pvc, pod) {
            return Err(CountError::Other(volumes::not_owner_message(pvc, pod)));
        }
        if let Some((driver, handle)) = driver_of(stores, pvc)
            && !driver.is_empty()
            && !handle.is_empty()
        {
            out.insert(format!("{driver}/{handle}"), driver);
        }
    }
    Ok(())
}

/// The attach limit of each driver on the node.
/// Whether `driver` may serve a pod on the node of `csi_node`: unless its CSIDriver sets
/// `preventPodSchedulingIfMissing`, always (a driver tether knows nothing of may not be CSI at
/// all); else only when the node's CSINode lists it.
fn driver_installed(
    stores: &crate::scheduler::informers::storage::Stores,
    driver: &str,
    csi_node: Option<&CSINode>,
) -> bool {
    let opted_in = stores
        .csi_drivers
        .get(driver)
        .and_then(|d| d.spec.prevent_pod_scheduling_if_missing)
        .unwrap_or(false);
    !opted_in || csi_node.is_some_and(|n| n.spec.drivers.iter().any(|d| d.name == driver))
}

fn limits(csi_node: &CSINode) -> BTreeMap<&str, i64> {
    csi_node
        .spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((d.name.as_str(), i64::from(count)))
        })
        .collect()
}

impl Plugin for NodeVolumeLimits {
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
            Registration::always(ClusterEvent::new(EventResource::CSINode, ActionType::ADD)),
            Registration::new(
                ClusterEvent::new(EventResource::CSINode, ActionType::UPDATE),
                Arc::new(after_csi_node_updated),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                Arc::new(after_pod_deleted),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::PersistentVolumeClaim, ActionType::ADD),
                Arc::new(after_claim_added),
            ),
            Registration::always(ClusterEvent::new(
                EventResource::VolumeAttachment,
                ActionType::DELETE,
            )),
        ])
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

/// The pod's own CSI volumes, the same on every node: found once, in PreFilter.
const STATE_KEY: &str = "PreFilterNodeVolumeLimits";

/// The pod's volumes (`driver/handle` → driver), or the status every node gives when they
/// cannot be counted.
type NewVolumes = Result<HashMap<String, String>, Status>;

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if !volumes::has_claims(&pod.pod) {
            return (PreFilterResult::all_nodes(), Status::skip());
        }
        let mut found = HashMap::new();
        let new_volumes: NewVolumes =
            match collect(&self.storage.read(), &pod.pod, true, &mut found) {
                Err(CountError::NotFound(m)) => Err(Status::unresolvable(m)),
                Err(CountError::Other(m)) => Err(Status::error(m)),
                Ok(()) => Ok(found),
            };
        state.write(STATE_KEY, new_volumes);
        (PreFilterResult::all_nodes(), Status::success())
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(new_volumes) = state.read::<NewVolumes>(STATE_KEY) else {
            return Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
        };
        let mut new_volumes = match new_volumes {
            Err(status) => return status.clone(),
            Ok(v) if v.is_empty() => return Status::success(),
            Ok(v) => v.clone(),
        };
        let stores = self.storage.read();
        let csi_node = stores.csi_nodes.get(&node.name);
        // From 1.37 (VolumeLimitScaling, beta and on; alpha and off in 1.36): a driver that
        // asks for it keeps pods off the nodes it is not installed on.
        let mut drivers: Vec<&str> = new_volumes.values().map(String::as_str).collect();
        drivers.sort_unstable();
        drivers.dedup();
        let checks_drivers = self.release.at_least(37);
        if let Some(missing) = drivers
            .into_iter()
            .find(|d| checks_drivers && !driver_installed(&stores, d, csi_node.map(|n| n.as_ref())))
        {
            return Status::unschedulable(format!(
                "{missing} CSI driver is not installed on the node"
            ));
        }
        let Some(csi_node) = csi_node else {
            return Status::success();
        };
        let limits = limits(csi_node);
        if limits.is_empty() {
            return Status::success();
        }
        let mut attached = HashMap::new();
        for p in &node.pods {
            if let Err(CountError::NotFound(m) | CountError::Other(m)) =
                collect(&stores, &p.pod, false, &mut attached)
            {
                return Status::error(m);
            }
        }
        let mut counts: HashMap<String, i64> = HashMap::new();
        for (key, driver) in &attached {
            new_volumes.remove(key);
            *counts.entry(driver.clone()).or_default() += 1;
        }
        for a in stores.attachments_on(&node.name) {
            let Some(pv) = a
                .spec
                .source
                .persistent_volume_name
                .as_deref()
                .and_then(|n| stores.volumes.watched(n))
            else {
                continue;
            };
            let Some(csi) = pv.spec.as_ref().and_then(|s| s.csi.as_ref()) else {
                continue;
            };
            if a.spec.attacher.is_empty() {
                continue;
            }
            let key = format!("{}/{}", a.spec.attacher, csi.volume_handle);
            if !attached.contains_key(&key) {
                *counts.entry(a.spec.attacher.clone()).or_default() += 1;
            }
        }
        let mut wanted: HashMap<&str, i64> = HashMap::new();
        for driver in new_volumes.values() {
            *wanted.entry(driver.as_str()).or_default() += 1;
        }
        let over = wanted.iter().any(|(driver, n)| {
            limits
                .get(driver)
                .is_some_and(|limit| counts.get(*driver).copied().unwrap_or(0) + n > *limit)
        });
        if over {
            Status::unschedulable(ERR_REASON)
        } else {
            Status::success()
        }
    }
}

/// A CSINode whose limit for some driver went up.
fn after_csi_node_updated(
    _: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (Some(old), Some(new)) = objects::<CSINode>(old, new) else {
        return Hint::Queue;
    };
    let count = |n: &CSINode| -> BTreeMap<String, i32> {
        n.spec
            .drivers
            .iter()
            .map(|d| {
                let c = d.allocatable.as_ref().and_then(|a| a.count).unwrap_or(0);
                (d.name.clone(), c)
            })
            .collect()
    };
    let before = count(old);
    queue_if(
        count(new)
            .iter()
            .any(|(d, c)| *c > before.get(d).copied().unwrap_or(0)),
    )
}

/// A pod deleted that held a place and had claim volumes.
fn after_pod_deleted(_: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let Some(deleted) = events::pods(old, new).0 else {
        return Hint::Queue;
    };
    queue_if(events::assigned_or_nominated(deleted) && volumes::has_claims(deleted))
}

/// One of the pod's claims created (an ephemeral volume's too).
fn after_claim_added(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    after_claim_of_pod(pod, old, new, true)
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let storage = handle.storage.clone();
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(NodeVolumeLimits {
        storage,
        release: handle.release,
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::CSIPersistentVolumeSource;
    use k8s_openapi::api::storage::v1::{CSINodeDriver, CSINodeSpec, VolumeNodeResources};
    use kube::api::ObjectMeta;

    use super::*;
    use crate::scheduler::testing::volumes::{claim, volume};
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn csi_volume(name: &str, handle: &str) -> k8s_openapi::api::core::v1::PersistentVolume {
        let mut pv = volume(name, "1Gi").build();
        pv.spec.get_or_insert_default().csi = Some(CSIPersistentVolumeSource {
            driver: "csi.example.com".into(),
            volume_handle: handle.into(),
            ..Default::default()
        });
        pv
    }

    fn csi_node(name: &str, limit: i32) -> CSINode {
        CSINode {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            spec: CSINodeSpec {
                drivers: vec![CSINodeDriver {
                    name: "csi.example.com".into(),
                    node_id: name.into(),
                    allocatable: Some(VolumeNodeResources { count: Some(limit) }),
                    ..Default::default()
                }],
            },
            status: None,
        }
    }

    /// A node at its driver's attach limit takes no new volume of that driver, but does take a
    /// pod whose volume is already attached there (counted once); a node without limits
    /// takes anything.
    #[test]
    fn a_node_at_its_attach_limit_is_skipped() {
        let storage = Arc::new(StorageIndex::default());
        for (pv, handle, c) in [("pv1", "h1", "c1"), ("pv2", "h2", "c2")] {
            storage.apply(Arc::new(csi_volume(pv, handle)));
            storage.apply(Arc::new(claim(c, "").bound_to(pv).build()));
        }
        storage.apply(Arc::new(csi_node("full", 1)));
        storage.apply(Arc::new(csi_node("roomy", 2)));
        let plugin = NodeVolumeLimits {
            storage,
            release: Default::default(),
        };
        let holder = |node: &str| {
            PodBuilder::new("holder")
                .claim("c1")
                .node_name(node)
                .build()
        };
        let full = NodeBuilder::new("full").info(vec![holder("full")]);
        let roomy = NodeBuilder::new("roomy").info(vec![holder("roomy")]);
        let unlimited = NodeBuilder::new("free").info(vec![holder("free")]);

        let new = PodBuilder::new("new").claim("c2").info();
        // PreFilter (counting the pod's own volumes), then Filter on `node`.
        let run = |pod: &PodInfo, node: &NodeInfo| {
            let mut state = CycleState::new();
            let (_, status) =
                PreFilterPlugin::pre_filter(&plugin, &mut state, pod, &Snapshot::default());
            assert!(status.is_success(), "{status:?}");
            FilterPlugin::filter(&plugin, &state, pod, node)
        };
        let filter = |n: &NodeInfo| run(&new, n);
        assert_eq!(filter(&full).message(), ERR_REASON);
        assert!(filter(&roomy).is_success());
        assert!(filter(&unlimited).is_success());

        let sharing = PodBuilder::new("sharing").claim("c1").info();
        assert!(run(&sharing, &full).is_success());

        let missing = PodBuilder::new("m").claim("nope").info();
        let status = run(&missing, &full);
        assert_eq!(
            status.message(),
            "looking up PVC default/nope: persistentvolumeclaim \"nope\" not found"
        );
    }

    /// 1.37's VolumeLimitScaling: a CSIDriver with `preventPodSchedulingIfMissing` keeps a
    /// pod with its volume off a node whose CSINode does not list it (or that has none), with
    /// upstream's words; a driver that does not ask for it is taken on trust.
    #[test]
    fn a_driver_that_asks_for_it_keeps_pods_off_nodes_without_it() {
        use k8s_openapi::api::storage::v1::{CSIDriver, CSIDriverSpec};
        let storage = Arc::new(StorageIndex::default());
        storage.apply(Arc::new(csi_volume("pv1", "h1")));
        storage.apply(Arc::new(claim("c1", "").bound_to("pv1").build()));
        storage.apply(Arc::new(csi_node("has-it", 5)));
        let mut elsewhere = csi_node("other-driver", 5);
        elsewhere.spec.drivers[0].name = "other.example.com".into();
        storage.apply(Arc::new(elsewhere));
        let plugin = NodeVolumeLimits {
            storage: storage.clone(),
            release: Default::default(),
        };
        let pod = PodBuilder::new("p").claim("c1").info();
        let run = |node: &str| {
            let mut state = CycleState::new();
            let (_, status) =
                PreFilterPlugin::pre_filter(&plugin, &mut state, &pod, &Snapshot::default());
            assert!(status.is_success(), "{status:?}");
            FilterPlugin::filter(&plugin, &state, &pod, &NodeBuilder::new(node).info(vec![]))
        };
        assert!(run("other-driver").is_success(), "no CSIDriver: on trust");

        storage.apply(Arc::new(CSIDriver {
            metadata: ObjectMeta {
                name: Some("csi.example.com".into()),
                ..Default::default()
            },
            spec: CSIDriverSpec {
                prevent_pod_scheduling_if_missing: Some(true),
                ..Default::default()
            },
        }));
        assert!(run("has-it").is_success());
        for node in ["other-driver", "no-csinode"] {
            let status = run(node);
            assert_eq!(
                status.code,
                crate::scheduler::framework::Code::Unschedulable,
                "{node}"
            );
            assert_eq!(
                status.message(),
                "csi.example.com CSI driver is not installed on the node"
            );
        }
    }
}
