//! VolumeBinding: a pod's PersistentVolumeClaims decide where it can run, and where it runs
//! decides which volumes its unbound claims get, as kube-scheduler's VolumeBinding plugin.
//!
//! - PreFilter reads the pod's claims: a missing, lost or deleted claim, or an unbound one of
//!   an `Immediate` class, rejects the pod; claims of a `WaitForFirstConsumer` class are to
//!   be bound here ([`matching`]).
//! - Filter keeps the nodes that bound claims' volumes reach and where every claim to bind
//!   gets an available volume, or a class that can provision there.
//! - Reserve assumes the choice in the [`StorageIndex`] (a volume's claimRef, a claim's
//!   selected node) so that the next pods do not take the same volume; Unreserve undoes it.
//! - PreBind writes the choice and waits for the PV controller to bind ([`binder`]).
//! - Score prefers nodes by how full the chosen volumes leave them (the `shape` arg; by
//!   default 100 less the percentage used, as kube-scheduler 1.37).

pub mod args;
pub mod binder;
pub mod hints;
pub mod matching;
#[cfg(test)]
mod tests;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::ObjectReference;

use self::args::{VolumeBindingArgs, shape_score};
use self::matching::{Claims, PodVolumes, Verdict};
use crate::gate::{Write, WriteGate};
use crate::k8s::pod::Pod;
use crate::k8s::volumes::{
    self, ANN_BOUND_BY_CONTROLLER, ANN_SELECTED_NODE, WAIT_FOR_FIRST_CONSUMER,
};
use crate::locks;
use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath, decode_args};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, Plugin, PreBindPlugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ReservePlugin, ScorePlugin, Status,
};
use crate::scheduler::informers::storage::{StorageIndex, Stores};
use crate::scheduler::plugins::handle::Handle;

pub const NAME: &str = "VolumeBinding";
/// kube-scheduler's weight for VolumeBinding's score (it is listed without one).
pub const DEFAULT_WEIGHT: i32 = 1;

pub const ERR_UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

const STATE_KEY: &str = "PreFilterVolumeBinding";

/// The plugin: its args, the storage objects it reads, and the client PreBind writes with.
pub struct VolumeBinding {
    args: VolumeBindingArgs,
    storage: Arc<StorageIndex>,
    client: Option<kube::Client>,
    /// Asked before PreBind writes.
    gate: WriteGate,
    /// Storage sizes compared as written (kube-scheduler 1.38 on), not rounded to whole bytes.
    exact_sizes: bool,
}

/// What the cycle learnt of the pod's claims, and what each node and the reservation chose.
struct State {
    claims: Claims,
    by_node: Mutex<HashMap<String, PodVolumes>>,
    /// The node's choice as Reserve assumed it: empty when every claim is bound already.
    reserved: Mutex<Option<PodVolumes>>,
}

impl Plugin for VolumeBinding {
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
        Some(hints::registrations(self.exact_sizes))
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
    fn reserve(&self) -> Option<&dyn ReservePlugin> {
        Some(self)
    }
    fn pre_bind(&self) -> Option<&dyn PreBindPlugin> {
        Some(self)
    }
}

/// Why a claim the pod names cannot be used at all (upstream's podHasPVCs), read from the
/// watched claims.
fn claim_problem(stores: &Stores, pod: &Pod) -> Option<String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    for c in volumes::pod_claims(pod) {
        let Some(pvc) = stores
            .claims
            .watched(&volumes::claim_key(namespace, &c.name))
        else {
            return Some(if c.ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the persistentvolumeclaim \"{}\"",
                    c.name
                )
            } else {
                format!("persistentvolumeclaim \"{}\" not found", c.name)
            });
        };
        if pvc.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Lost") {
            return Some(format!(
                "persistentvolumeclaim \"{}\" bound to non-existent persistentvolume \"{}\"",
                c.name,
                volumes::claim_volume_name(pvc)
            ));
        }
        if pvc.metadata.deletion_timestamp.is_some() {
            return Some(format!(
                "persistentvolumeclaim \"{}\" is being deleted",
                c.name
            ));
        }
        if c.ephemeral && !volumes::owned_by_pod(pvc, pod) {
            return Some(volumes::not_owner_message(pvc, pod));
        }
    }
    None
}

/// Sorts the pod's claims into bound ones and ones to bind here (upstream's
/// GetPodVolumeClaims), with what Filter will need of volumes, classes and drivers, and how it
/// compares sizes (`exact_sizes`).
/// `Err(status)`: the pod cannot be scheduled now.
fn read_claims(stores: &Stores, pod: &Pod, exact_sizes: bool) -> Result<Claims, Status> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut claims = Claims {
        exact_sizes,
        ..Claims::default()
    };
    let mut immediate = false;
    for c in volumes::pod_claims(pod) {
        let Some(pvc) = stores.claim(namespace, &c.name) else {
            return Err(Status::error(format!(
                "error getting PVC \"{namespace}/{}\": persistentvolumeclaim \"{}\" not found",
                c.name, c.name
            )));
        };
        if volumes::fully_bound(pvc) {
            let pv = stores.volume(volumes::claim_volume_name(pvc)).cloned();
            claims.bound.push((pvc.clone(), pv));
            continue;
        }
        let class_name = volumes::claim_class(pvc);
        let class = (!class_name.is_empty())
            .then(|| stores.classes.get(class_name))
            .flatten();
        let delayed = match class {
            None => false,
            Some(class) => match class.volume_binding_mode.as_deref() {
                None => {
                    return Err(Status::error(format!(
                        "VolumeBindingMode not set for StorageClass \"{class_name}\""
                    )));
                }
                Some(mode) => mode == WAIT_FOR_FIRST_CONSUMER,
            },
        };
        if !delayed || !volumes::claim_volume_name(pvc).is_empty() {
            immediate = true;
            continue;
        }
        claims.to_bind.push(pvc.clone());
        if let Some(class) = class
            && !claims.classes.contains_key(class_name)
        {
            claims.classes.insert(class_name.to_string(), class.clone());
            claims
                .volumes_by_class
                .insert(class_name.to_string(), stores.volumes_of_class(class_name));
            if let Some(driver) = stores.csi_drivers.get(&class.provisioner) {
                claims
                    .drivers
                    .insert(class.provisioner.clone(), driver.clone());
            }
        }
    }
    if immediate {
        return Err(Status::unresolvable(ERR_UNBOUND_IMMEDIATE));
    }
    if claims
        .drivers
        .values()
        .any(|d| d.spec.storage_capacity == Some(true))
    {
        claims.capacities = stores.capacities.values().cloned().collect();
    }
    Ok(claims)
}

impl PreFilterPlugin for VolumeBinding {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let all = PreFilterResult::all_nodes();
        if !volumes::has_claims(&pod.pod) {
            return (all, Status::skip());
        }
        let stores = self.storage.read();
        if let Some(problem) = claim_problem(&stores, &pod.pod) {
            return (all, Status::unresolvable(problem));
        }
        match read_claims(&stores, &pod.pod, self.exact_sizes) {
            Err(status) => (all, status),
            Ok(claims) => {
                drop(stores);
                state.write(
                    STATE_KEY,
                    State {
                        claims,
                        by_node: Mutex::default(),
                        reserved: Mutex::default(),
                    },
                );
                (all, Status::success())
            }
        }
    }
}

impl FilterPlugin for VolumeBinding {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
        };
        match matching::find_pod_volumes(&s.claims, &node.name, node.labels()) {
            Verdict::Fits(found) => {
                locks::lock(&s.by_node).insert(node.name.clone(), found);
                Status::success()
            }
            Verdict::Conflicts(reasons) => Status::with_reasons(
                crate::scheduler::framework::Code::UnschedulableAndUnresolvable,
                reasons.into_iter().map(String::from).collect(),
            ),
            Verdict::Error(e) => Status::error(e),
        }
    }
}

impl PreScorePlugin for VolumeBinding {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        if self.args.shape.is_some() {
            Status::success()
        } else {
            Status::skip()
        }
    }
}

impl ScorePlugin for VolumeBinding {
    /// The mean over the classes of the node's chosen volumes of the shape's score for how
    /// full they would be.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let (Some(shape), Some(s)) = (&self.args.shape, state.read::<State>(STATE_KEY)) else {
            return Ok(0);
        };
        let by_node = locks::lock(&s.by_node);
        let Some(found) = by_node.get(&node.name) else {
            return Ok(0);
        };
        // Per class: (requested, capacity) in bytes.
        let mut classes: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        if !found.static_bindings.is_empty() {
            for b in &found.static_bindings {
                let class = b
                    .volume
                    .spec
                    .as_ref()
                    .and_then(|s| s.storage_class_name.clone())
                    .unwrap_or_default();
                let e = classes.entry(class).or_default();
                e.0 += volumes::claim_request(&b.claim);
                e.1 += volumes::pv_capacity(&b.volume);
            }
        } else {
            for p in &found.provisions {
                let Some(capacity) = &p.capacity else {
                    continue;
                };
                let class = volumes::claim_class(&p.claim).to_string();
                let e = classes.entry(class).or_default();
                e.0 += volumes::claim_request(&p.claim);
                e.1 = capacity
                    .capacity
                    .as_ref()
                    .and_then(|q| crate::k8s::quantity::parse_value(&q.0).ok())
                    .unwrap_or(0);
            }
        }
        if classes.is_empty() {
            return Ok(0);
        }
        let total: i64 = classes
            .values()
            .map(|&(requested, capacity)| {
                let utilization = if capacity == 0 || requested > capacity {
                    100
                } else {
                    requested * 100 / capacity
                };
                shape_score(shape, utilization)
            })
            .sum();
        Ok((total as f64 / classes.len() as f64).round() as i64)
    }
}

impl VolumeBinding {
    /// Whether every claim of the pod is bound, as the scheduler sees them now.
    fn all_bound(&self, pod: &Pod) -> bool {
        let stores = self.storage.read();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        volumes::pod_claims(pod).iter().all(|c| {
            stores
                .claim(namespace, &c.name)
                .is_some_and(|pvc| volumes::fully_bound(pvc))
        })
    }

    /// Assumes the node's choice: each chosen volume's claimRef names its claim, each claim to
    /// provision names the node. Returns the choice as assumed, or undoes it on a failure.
    fn assume(&self, found: &PodVolumes, node: &str) -> Result<PodVolumes, String> {
        let mut assumed = PodVolumes::default();
        let undo = |assumed: &PodVolumes| {
            for b in &assumed.static_bindings {
                self.storage.restore_volume(&b.volume);
            }
            for p in &assumed.provisions {
                self.storage.restore_claim(&p.claim);
            }
        };
        for b in &found.static_bindings {
            let mut pv = (*b.volume).clone();
            let claim = &b.claim;
            let mut dirty = false;
            let spec = pv.spec.get_or_insert_default();
            let points_at_claim = spec.claim_ref.as_ref().is_some_and(|r| {
                r.name == claim.metadata.name
                    && r.namespace == claim.metadata.namespace
                    && r.uid == claim.metadata.uid
            });
            if !points_at_claim {
                spec.claim_ref = Some(ObjectReference {
                    kind: Some("PersistentVolumeClaim".into()),
                    api_version: Some("v1".into()),
                    name: claim.metadata.name.clone(),
                    namespace: claim.metadata.namespace.clone(),
                    uid: claim.metadata.uid.clone(),
                    resource_version: claim.metadata.resource_version.clone(),
                    ..Default::default()
                });
                dirty = true;
            }
            let annotations = pv.metadata.annotations.get_or_insert_default();
            if !volumes::bound_to_claim(&b.volume, claim)
                && !annotations.contains_key(ANN_BOUND_BY_CONTROLLER)
            {
                annotations.insert(ANN_BOUND_BY_CONTROLLER.into(), "yes".into());
                dirty = true;
            }
            let pv = Arc::new(pv);
            if dirty && let Err(e) = self.storage.assume_volume(pv.clone()) {
                undo(&assumed);
                return Err(e.to_string());
            }
            assumed.static_bindings.push(matching::StaticBinding {
                claim: claim.clone(),
                volume: if dirty { pv } else { b.volume.clone() },
            });
        }
        for p in &found.provisions {
            let mut pvc = (*p.claim).clone();
            pvc.metadata
                .annotations
                .get_or_insert_default()
                .insert(ANN_SELECTED_NODE.into(), node.into());
            let pvc = Arc::new(pvc);
            if let Err(e) = self.storage.assume_claim(pvc.clone()) {
                undo(&assumed);
                return Err(e.to_string());
            }
            assumed.provisions.push(matching::Provision {
                claim: pvc,
                capacity: p.capacity.clone(),
            });
        }
        Ok(assumed)
    }
}

impl ReservePlugin for VolumeBinding {
    fn reserve(&self, state: &mut CycleState, pod: &PodInfo, node_name: &str) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::success();
        };
        let found = locks::lock(&s.by_node)
            .get(node_name)
            .cloned()
            .filter(|_| !self.all_bound(&pod.pod))
            .unwrap_or_default();
        let volumes = if found.is_empty() {
            found
        } else {
            match self.assume(&found, node_name) {
                Ok(volumes) => volumes,
                Err(e) => return Status::error(e),
            }
        };
        *locks::lock(&s.reserved) = Some(volumes);
        Status::success()
    }

    fn unreserve(&self, state: &CycleState, _pod: &PodInfo, _node_name: &str) {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return;
        };
        if let Some(reserved) = locks::lock(&s.reserved).take() {
            for b in &reserved.static_bindings {
                self.storage.restore_volume(&b.volume);
            }
            for p in &reserved.provisions {
                self.storage.restore_claim(&p.claim);
            }
        }
    }
}

impl PreBindPlugin for VolumeBinding {
    /// Work when claims are to be bound or provisioned on the node: Skip when the pod has no
    /// claims or all are bound, an error when Reserve chose nothing for this node.
    fn pre_bind_pre_flight(&self, state: &CycleState, _pod: &Pod, node_name: &str) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::skip();
        };
        match locks::lock(&s.reserved).as_ref() {
            None => Status::error(format!("no pod volume found for node {node_name:?}")),
            Some(reserved) if reserved.is_empty() => Status::skip(),
            Some(_) => Status::success(),
        }
    }

    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        _pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(s) = state.read::<State>(STATE_KEY) else {
                return Status::success();
            };
            let Some(reserved) = locks::lock(&s.reserved).clone() else {
                return Status::error(format!("no pod volume found for node {node_name:?}"));
            };
            if reserved.is_empty() {
                return Status::success();
            }
            let Some(client) = &self.client else {
                return Status::error("VolumeBinding has no API client");
            };
            let timeout = Duration::from_secs(self.args.bind_timeout_seconds.max(0) as u64);
            let bound = self
                .gate
                .write(
                    Write::VolumeBinding,
                    binder::bind(client, &self.storage, &reserved, node_name, timeout),
                )
                .await;
            match bound {
                Ok(Ok(())) => Status::success(),
                Ok(Err(e)) => Status::error(e),
                Err(refused) => Status::error(refused.to_string()),
            }
        })
    }
}

/// Builds the plugin from its args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let storage = handle.storage.clone();
    let client = handle.client.clone();
    let gate = handle.gate.clone();
    // Until 1.37 kube-scheduler does not score volumes (StorageCapacityScoring alpha and off in
    // 1.36): no shape is defaulted, and one given is refused.
    let scores = handle.release.at_least(37);
    if !scores && let Some(shape) = args.and_then(|a| a.get("shape")) {
        let mut errs = FieldErrors::new();
        errs.push(
            path.child("shape"),
            format!(
                "Invalid value: {shape}: unexpected field `shape`, remove it or turn on the feature gate StorageCapacityScoring"
            ),
        );
        return Err(errs);
    }
    let mut args = decode_args::<VolumeBindingArgs>(args, path)?;
    if scores {
        args = args.defaulted();
    } else {
        args.shape = None;
    }
    args.validate(path)?;
    Ok(Arc::new(VolumeBinding {
        args,
        storage,
        client,
        gate,
        exact_sizes: handle.release.at_least(38),
    }))
}
