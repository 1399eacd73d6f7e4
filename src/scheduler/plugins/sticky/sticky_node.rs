//! StickyNode: a workload's pod goes back to the node its StickyBinding pins it to
//! (`spec.nodeName` if a person set it, else `status.latest`), as the out-of-tree "StickyVM"
//! plugin, with the pin read from the StickyBinding instead of the VM's annotations.
//!
//! PreFilter narrows the nodes to the pin and Filter rejects every other node as
//! UnschedulableAndUnresolvable, so preemption never evicts anything on its behalf. The
//! history the pin comes from is written after each bind by the PlacementRecorder PostBind
//! plugin, not by this plugin.

use std::sync::Arc;

use jiff::{SignedDuration, Timestamp};
use serde::{Deserialize, Serialize};

use crate::api::StickyBinding;
use crate::k8s::node_selector::RequiredNodeAffinity;
use crate::k8s::pod::Pod;
use crate::k8s::taints;
use crate::k8s::volumes;
use crate::scheduler::framework::HistoryReadership;
use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::FieldPath;
use crate::scheduler::framework::validation::{FieldErrors, decode_args};
use crate::scheduler::framework::{
    Code, CycleState, FilterPlugin, Nomination, Plugin, PostFilterContext, PostFilterPlugin,
    PreFilterPlugin, PreFilterResult, Status,
};
use crate::scheduler::informers::storage::StorageIndex;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::node_unschedulable;
use crate::sticky::bindings::{self, BindingLookup};
use crate::sticky::workload::{self, OwnerLookup, Workload};

use crate::scheduler::plugins::sticky::{cycle_workload, opted_out, wait_for_owner};

pub const NAME: &str = "StickyNode";

/// The CycleState key of the pin found in PreFilter.
const STATE_KEY: &str = "PreFilterStickyNode";

/// The annotation that turns the plugin off for a pod (value `"true"`) unless the args name
/// another.
pub const DEFAULT_DISABLE_ANNOTATION: &str = "tether.dev/sticky-node-disabled";

/// The longest `holdRoomSeconds` (a day): room held longer is capacity lost to a workload
/// that may never come back.
pub const MAX_HOLD_ROOM_SECONDS: i64 = 86_400;

/// The longest `releaseAfterSeconds` (a year).
pub const MAX_RELEASE_AFTER_SECONDS: i64 = 365 * 86_400;

/// What happens when the pinned node is lost (gone, or not Ready).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum OnNodeLoss {
    /// Keep the pin: the pod waits, unschedulable, until the node is back or a person moves
    /// the workload (`spec.nodeName`) or deletes its StickyBinding.
    #[default]
    Wait,
    /// Drop the pin once the node has been unavailable for `releaseAfterSeconds` (or tether
    /// recorded a release from it): the pod may then go to any node.
    Release,
}

/// The plugin's args.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct StickyNodeArgs {
    /// Leave alone the pods of a ReplicaSet or Deployment with more than one replica, or a Job
    /// with a parallelism above one, which are interchangeable: a pin means nothing for them.
    /// Must stay true (false is refused); StatefulSet ordinals stick whatever the replicas.
    pub skip_multi_replica: bool,
    /// Namespaces whose pods the plugin leaves alone.
    pub excluded_namespaces: Vec<String>,
    /// A pod annotation that, set to `"true"`, turns the plugin off for that pod.
    pub disable_annotation: String,
    /// What happens when the pinned node is lost.
    pub on_node_loss: OnNodeLoss,
    /// With `onNodeLoss: Release`: how long the node must have been unavailable first.
    pub release_after_seconds: i64,
    /// For how long after a pinned workload's pod left its pin the room it used there stays
    /// held: pods of lower or equal priority do not take it, so the workload (a VM stopped
    /// and started, a StatefulSet pod replaced) finds it when it comes back. 0 (the default)
    /// holds nothing; at most a day.
    pub hold_room_seconds: i64,
    /// The rooms held at once for the workloads of one namespace, at most (0 to 10000): past
    /// it a pod that leaves holds nothing, so no tenant reserves nodes for long by deleting
    /// pods of many pinned workloads.
    pub max_held_rooms_per_namespace: i64,
    /// The rooms this profile holds at once, at most (0 to 100000).
    pub max_held_rooms: i64,
}

/// The defaults of `maxHeldRoomsPerNamespace` and `maxHeldRooms`.
pub const DEFAULT_HELD_ROOMS_PER_NAMESPACE: i64 = 16;
pub const DEFAULT_HELD_ROOMS: i64 = 256;

impl Default for StickyNodeArgs {
    fn default() -> Self {
        StickyNodeArgs {
            skip_multi_replica: true,
            excluded_namespaces: Vec::new(),
            disable_annotation: DEFAULT_DISABLE_ANNOTATION.into(),
            on_node_loss: OnNodeLoss::Wait,
            release_after_seconds: 300,
            hold_room_seconds: 0,
            max_held_rooms_per_namespace: DEFAULT_HELD_ROOMS_PER_NAMESPACE,
            max_held_rooms: DEFAULT_HELD_ROOMS,
        }
    }
}

impl StickyNodeArgs {
    /// Checks the args, naming fields under `path` (e.g. `pluginConfig[0].args.releaseAfterSeconds`).
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        if !self.skip_multi_replica {
            errs.push(
                path.child("skipMultiReplica"),
                "StickyNode pins a workload that runs one pod at a time; the replicas of a \
                 ReplicaSet, Deployment or Job of several would all be held to the node of the \
                 last bind. Leave it true (PlacementHistory with skipMultiReplica: false spreads \
                 their reschedules), or give each replica its own pin with a StatefulSet",
            );
        }
        if !(0..=MAX_RELEASE_AFTER_SECONDS).contains(&self.release_after_seconds) {
            errs.push(
                path.child("releaseAfterSeconds"),
                format!(
                    "{} must be between 0 and {MAX_RELEASE_AFTER_SECONDS}",
                    self.release_after_seconds
                ),
            );
        }
        if !(0..=MAX_HOLD_ROOM_SECONDS).contains(&self.hold_room_seconds) {
            errs.push(
                path.child("holdRoomSeconds"),
                format!(
                    "{} must be between 0 and {MAX_HOLD_ROOM_SECONDS}",
                    self.hold_room_seconds
                ),
            );
        }
        for (field, value, max) in [
            (
                "maxHeldRoomsPerNamespace",
                self.max_held_rooms_per_namespace,
                10_000,
            ),
            ("maxHeldRooms", self.max_held_rooms, 100_000),
        ] {
            if !(0..=max).contains(&value) {
                errs.push(
                    path.child(field),
                    format!("{value} must be between 0 and {max}"),
                );
            }
        }
        if self.disable_annotation.is_empty() {
            errs.push(path.child("disableAnnotation"), "must not be empty");
        }
        for (i, ns) in self.excluded_namespaces.iter().enumerate() {
            if ns.is_empty() {
                errs.push(
                    path.child("excludedNamespaces").index(i),
                    "must not be empty",
                );
            }
        }
        errs.into_result()
    }
}

/// Pins a workload's pods to the node its StickyBinding names.
#[derive(Clone)]
pub struct StickyNode {
    args: StickyNodeArgs,
    owners: Arc<dyn OwnerLookup>,
    bindings: Arc<dyn BindingLookup>,
    /// Volumes and claims, to tell a released workload whose volume stayed on the lost node.
    storage: Arc<StorageIndex>,
    /// The clock `releaseAfterSeconds` is measured with.
    now: fn() -> Timestamp,
}

/// The pin PreFilter found, for Filter.
#[derive(Clone, Debug, PartialEq, Eq)]
struct StickyState {
    node: String,
    /// `<Kind>/<name>` of the workload, for messages.
    workload: String,
}

impl StickyState {
    fn reason(&self) -> String {
        format!(
            "node(s) didn't match the sticky node {} of {}",
            self.node, self.workload
        )
    }
}

/// The node `binding` pins its workload to, or `None` when it pins it nowhere: no pin yet, or
/// (with `onNodeLoss: Release`) the pinned node was lost at least `releaseAfterSeconds` before
/// `now`, or tether already recorded a release from it.
pub fn pinned_node(
    binding: &StickyBinding,
    args: &StickyNodeArgs,
    now: Timestamp,
) -> Option<String> {
    let pin = binding.pin()?;
    if args.on_node_loss == OnNodeLoss::Release {
        let released = binding
            .status
            .as_ref()
            .and_then(|s| s.released_from.as_ref())
            .is_some_and(|r| r.node == pin);
        if released || release_in(binding, args, now) == Some(std::time::Duration::ZERO) {
            return None;
        }
    }
    Some(pin.to_string())
}

/// With `onNodeLoss: Release` and the pinned node lost: how long until the pin is dropped
/// (zero once it is due). `None` when no release is coming.
fn release_in(
    binding: &StickyBinding,
    args: &StickyNodeArgs,
    now: Timestamp,
) -> Option<std::time::Duration> {
    if args.on_node_loss != OnNodeLoss::Release {
        return None;
    }
    let since = binding.node_lost_since()?;
    let due = since.checked_add(SignedDuration::from_secs(args.release_after_seconds));
    let left = due.map_or(SignedDuration::ZERO, |due| due.duration_since(now));
    Some(std::time::Duration::try_from(left).unwrap_or(std::time::Duration::ZERO))
}

impl Plugin for StickyNode {
    fn name(&self) -> &'static str {
        NAME
    }

    fn hold_identity(&self, pod: &Pod) -> Option<crate::scheduler::framework::HoldIdentity> {
        if self.args.hold_room_seconds <= 0 {
            return None;
        }
        let workload = workload::resolve(pod, self.owners.as_ref());
        if workload.pending_owner.is_some() {
            return None;
        }
        Some(crate::scheduler::framework::HoldIdentity {
            key: format!("{}/{}", workload.namespace, workload.binding_name()),
            workload: format!("{}/{}/{}", workload.kind, workload.namespace, workload.name),
            many: workload.is_multi_replica(),
            workload_ref: workload.workload_ref(),
        })
    }

    fn room_to_hold(
        &self,
        pod: &Pod,
        node: &str,
        who: &crate::scheduler::framework::HoldIdentity,
    ) -> Option<crate::scheduler::framework::RoomHold> {
        let args = &self.args;
        if args.hold_room_seconds <= 0
            || who.many
            || opted_out(pod, &args.excluded_namespaces, &args.disable_annotation)
            || crate::sticky::kubevirt::migration_of(pod).is_some()
        {
            return None;
        }
        let (namespace, name) = who.key.split_once('/')?;
        // The workload as read while its pod ran (its owners may be gone from the caches by
        // now), not resolved again.
        let binding = self
            .bindings
            .get(namespace, name)
            .filter(|b| b.spec.workload_ref.same_workload(&who.workload_ref))?;
        if pinned_node(&binding, args, (self.now)()).as_deref() != Some(node) {
            return None;
        }
        Some(crate::scheduler::framework::RoomHold {
            key: who.key.clone(),
            workload: who.workload.clone(),
            span: std::time::Duration::from_secs(u64::try_from(args.hold_room_seconds).ok()?),
            per_namespace: usize::try_from(args.max_held_rooms_per_namespace).unwrap_or(0),
            per_profile: usize::try_from(args.max_held_rooms).unwrap_or(0),
        })
    }

    fn history_readership(&self) -> Option<HistoryReadership> {
        Some(HistoryReadership {
            skip_multi_replica: self.args.skip_multi_replica,
            excluded_namespaces: self.args.excluded_namespaces.clone(),
            disable_annotation: self.args.disable_annotation.clone(),
        })
    }

    /// Only a change of the pod's own workload's binding, the pinned node coming (back) or its
    /// labels changing, an edit of the pod itself (its opt-out annotation), or a claim changing (for a released
    /// workload whose volume stayed behind) can change the answer.
    fn events_to_register(&self) -> Option<Vec<Registration>> {
        let (for_bindings, for_nodes, for_cordon, for_labels) =
            (self.clone(), self.clone(), self.clone(), self.clone());
        Some(vec![
            Registration::new(
                ClusterEvent::new(bindings::EVENT_RESOURCE, ActionType::ALL),
                Arc::new(move |pod, old, new| for_bindings.after_binding_change(pod, old, new)),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::Node, ActionType::ADD),
                Arc::new(move |pod, _old, new| for_nodes.after_node_added(pod, new)),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_TAINT),
                Arc::new(move |pod, old, new| for_cordon.after_node_uncordoned(pod, old, new)),
            ),
            // The pinned node's labels changed: a pin the pod's own selector ruled out may
            // match now.
            Registration::new(
                ClusterEvent::new(EventResource::Node, ActionType::UPDATE_NODE_LABEL),
                Arc::new(move |pod, _old, new| for_labels.after_node_added(pod, new)),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE),
                Arc::new(after_own_update),
            ),
            // A released workload held by a volume on the lost node: its claim deleted or
            // rebound may free it.
            Registration::always(ClusterEvent::new(
                EventResource::PersistentVolumeClaim,
                ActionType::ALL,
            )),
        ])
    }

    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }

    fn post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
}

impl StickyNode {
    /// The name of the StickyBinding of the pod's workload, with its namespace.
    fn binding_of(&self, pod: &PodInfo) -> (String, String) {
        let workload = workload::resolve(&pod.pod, self.owners.as_ref());
        (workload.namespace.clone(), workload.binding_name())
    }

    fn after_binding_change(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Hint {
        let Some(binding) = new.or(old).and_then(EventObject::custom::<StickyBinding>) else {
            return Hint::Queue;
        };
        let (namespace, name) = self.binding_of(pod);
        events::queue_if(
            binding.metadata.namespace.as_deref() == Some(namespace.as_str())
                && binding.metadata.name.as_deref() == Some(name.as_str()),
        )
    }

    /// The pinned node uncordoned (its `spec.unschedulable` went from true to false).
    fn after_node_uncordoned(
        &self,
        pod: &PodInfo,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> Hint {
        let (Some(old), Some(new)) = (
            old.and_then(EventObject::node),
            new.and_then(EventObject::node),
        ) else {
            return Hint::Queue;
        };
        if !taints::cordoned(old) || taints::cordoned(new) {
            return Hint::Skip;
        }
        let (namespace, name) = self.binding_of(pod);
        events::queue_if(
            self.bindings
                .get(&namespace, &name)
                .is_some_and(|b| b.pin() == new.metadata.name.as_deref()),
        )
    }

    /// The node added (or its labels changed) is the pod's pin.
    fn after_node_added(&self, pod: &PodInfo, new: Option<&EventObject>) -> Hint {
        let Some(node) = new.and_then(EventObject::node) else {
            return Hint::Queue;
        };
        let (namespace, name) = self.binding_of(pod);
        let pinned_here = self
            .bindings
            .get(&namespace, &name)
            .is_some_and(|b| b.pin() == node.metadata.name.as_deref());
        events::queue_if(pinned_here)
    }
}

/// Why `node` takes no new pods like `pod` (cordoned, as `kubectl cordon` or a drain leaves
/// it), unless `pod` tolerates it as NodeUnschedulable reads the toleration.
fn cordoned(node: &NodeInfo, pod: &Pod) -> Option<&'static str> {
    (node.unschedulable && !node_unschedulable::tolerates_cordon(pod))
        .then_some("cordoned (unschedulable)")
}

/// What of the pod's own node selection leaves `node` out, when it does: its nodeSelector
/// (the pairs the node lacks) or its required node affinity. A pin the pod itself rules out can
/// never be met; the pod says so instead of waiting on "didn't match Pod's node
/// affinity/selector" with no word of the pin (a queue's admission, Kueue's topology
/// assignment, writes such a selector after the pin was made).
fn selection_excludes(node: &NodeInfo, pod: &Pod) -> Option<String> {
    let spec = pod.spec.as_ref()?;
    let labels = node.labels();
    let missing: Vec<String> = spec
        .node_selector
        .iter()
        .flatten()
        .filter(|(k, v)| labels.get(*k) != Some(*v))
        .map(|(k, v)| format!("{k}={v}"))
        .collect();
    if !missing.is_empty() {
        return Some(format!("nodeSelector {}", missing.join(", ")));
    }
    let affinity = RequiredNodeAffinity::from_pod(pod);
    (!affinity.matches_labels(&node.name, labels)).then(|| "required node affinity".to_string())
}

/// Whether Kueue admitted the pod to a topology domain (its Job's template asks for one).
fn admitted_by_kueue_topology(pod: &Pod) -> bool {
    pod.metadata.annotations.as_ref().is_some_and(|a| {
        a.keys().any(|k| {
            k.starts_with("kueue.x-k8s.io/podset-") && k.ends_with("-topology")
                || k == "kueue.x-k8s.io/podset-required-topology-constraints"
        })
    })
}

/// The pod itself changed its annotations (it may have opted out) or owners.
fn after_own_update(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let (Some(old), Some(new)) = events::pods(old, new) else {
        return Hint::Queue;
    };
    events::queue_if(
        events::is_same_pod(pod, new)
            && (old.metadata.annotations != new.metadata.annotations
                || old.metadata.owner_references != new.metadata.owner_references),
    )
}

impl StickyNode {
    /// For a workload whose pin to `lost` was released: why it cannot move when a volume it
    /// has bound is reachable from no node there is (a local volume on the lost node), and
    /// what a person can do about it.
    fn left_behind(
        &self,
        pod: &Pod,
        lost: &str,
        workload: &Workload,
        snapshot: &Snapshot,
    ) -> Option<String> {
        if snapshot.is_empty() {
            return None;
        }
        let stores = self.storage.read();
        let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
        let reachable = |pv: &k8s_openapi::api::core::v1::PersistentVolume| {
            snapshot.nodes().iter().any(|n| {
                n.node
                    .as_ref()
                    .and_then(|n| n.metadata.labels.as_ref())
                    .is_some_and(|labels| volumes::pv_reaches(pv, labels))
            })
        };
        let (claim, pv) = volumes::pod_claims(pod).into_iter().find_map(|c| {
            let pvc = stores.claim(namespace, &c.name)?;
            let pv = stores.volume(volumes::claim_volume_name(pvc))?;
            (!reachable(pv)).then(|| (c.name, pv.metadata.name.clone().unwrap_or_default()))
        })?;
        Some(format!(
            "the pin of {kind}/{name} to node {lost} was released (onNodeLoss: Release), but its \
             volume {pv} (claim {claim}) is reachable only from that node: bring node {lost} \
             back, or set spec.nodeName of StickyBinding {ns}/{binding} to a node the volume \
             reaches, or delete claim {claim} to start over on a new volume (its data stays \
             behind)",
            kind = workload.kind,
            name = workload.name,
            ns = workload.namespace,
            binding = workload.binding_name(),
        ))
    }
}

impl PreFilterPlugin for StickyNode {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let skip = (PreFilterResult::all_nodes(), Status::skip());
        let args = &self.args;
        if opted_out(
            &pod.pod,
            &args.excluded_namespaces,
            &args.disable_annotation,
        ) {
            return skip;
        }
        // A live migration's target: the VM is running, not coming back; it goes where the
        // filters allow (its anti-affinity keeps it off the source).
        if crate::sticky::kubevirt::migration_of(&pod.pod).is_some() {
            return skip;
        }
        let workload = cycle_workload(state, pod, self.owners.as_ref());
        if let Some(wait) = wait_for_owner(&pod.pod, &workload) {
            return (PreFilterResult::all_nodes(), wait);
        }
        if workload.pending_owner.is_some() {
            // Waited long enough: an owner never vouched for pins nothing.
            return skip;
        }
        if args.skip_multi_replica && workload.is_multi_replica() {
            return skip;
        }
        let Some(binding) = self
            .bindings
            .get(&workload.namespace, &workload.binding_name())
            .filter(|b| workload.owns(b))
        else {
            return skip;
        };
        let Some(node) = pinned_node(&binding, args, (self.now)()) else {
            if let Some(lost) = binding.pin()
                && let Some(reason) = self.left_behind(&pod.pod, lost, &workload, snapshot)
            {
                return (PreFilterResult::all_nodes(), Status::unresolvable(reason));
            }
            return skip;
        };
        let sticky = StickyState {
            node,
            workload: format!("{}/{}", workload.kind, workload.name),
        };
        if snapshot.get(&sticky.node).is_none() || binding.node_lost_since().is_some() {
            let reason = format!("{}: the node is not available", sticky.reason());
            let mut status = Status::unresolvable(reason);
            // Under Release the answer changes by itself when the delay is over.
            if let Some(left) = release_in(&binding, args, (self.now)()) {
                status = status.with_retry_after(left);
            }
            return (PreFilterResult::all_nodes(), status);
        }
        if let Some(cordoned) = snapshot
            .get(&sticky.node)
            .and_then(|n| cordoned(n, &pod.pod))
        {
            return (
                PreFilterResult::all_nodes(),
                Status::unresolvable(format!(
                    "{}: the node is {cordoned}; uncordon it (kubectl uncordon {node}), or set \
                     spec.nodeName of StickyBinding {ns}/{binding} to another node",
                    sticky.reason(),
                    node = sticky.node,
                    ns = workload.namespace,
                    binding = workload.binding_name(),
                )),
            );
        }
        if let Some(excluded) = snapshot
            .get(&sticky.node)
            .and_then(|n| selection_excludes(n, &pod.pod))
        {
            return (
                PreFilterResult::all_nodes(),
                Status::unresolvable(format!(
                    "{}: the pod's own {excluded} excludes that node{by}; set spec.nodeName of \
                     StickyBinding {ns}/{binding} to a node it allows, or turn the pin off for \
                     this pod (annotation {annotation}: \"true\")",
                    sticky.reason(),
                    by = if admitted_by_kueue_topology(&pod.pod) {
                        " (set by Kueue's topology-aware admission)"
                    } else {
                        ""
                    },
                    ns = workload.namespace,
                    binding = workload.binding_name(),
                    annotation = args.disable_annotation,
                )),
            );
        }
        let result = PreFilterResult::nodes([sticky.node.clone()]);
        state.write(STATE_KEY, sticky);
        (result, Status::success())
    }
}

impl FilterPlugin for StickyNode {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        match state.read::<StickyState>(STATE_KEY) {
            Some(sticky) if sticky.node != node.name => Status::unresolvable(sticky.reason()),
            _ => Status::success(),
        }
    }
}

/// A pinned pod that waits for room on its pin is nominated to it (when preemption has not
/// nominated it already): `status.nominatedNodeName` tells autoscalers and people where it is
/// going, as kube-scheduler publishes its expectation, and the nominator keeps the room that
/// frees there for it against pods of lower or equal priority. Only when the pin turned it
/// down for what can change (room: `Unschedulable`), never for what cannot.
impl PostFilterPlugin for StickyNode {
    fn post_filter(&self, ctx: &PostFilterContext<'_>) -> (Nomination, Status) {
        let Some(sticky) = ctx.state.read::<StickyState>(STATE_KEY) else {
            return (Nomination::Keep, Status::skip());
        };
        let d = ctx.diagnosis;
        let on_pin = d
            .node_statuses
            .iter()
            .find(|(n, _)| *n == sticky.node)
            .map(|(_, s)| s.code);
        if d.pre_filter_status.is_some() || on_pin != Some(Code::Unschedulable) {
            return (Nomination::Keep, Status::skip());
        }
        (Nomination::Node(sticky.node.clone()), Status::success())
    }
}

/// Builds the plugin from its args (absent means defaults), validated and named under `path`.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let owners = handle.owners.clone();
    let bindings = handle.bindings.clone();
    let storage = handle.storage.clone();
    let args: StickyNodeArgs = decode_args(args, path)?;
    args.validate(path)?;
    Ok(Arc::new(StickyNode {
        args,
        owners,
        bindings,
        storage,
        now: Timestamp::now,
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, OwnerReference, Time};
    use serde_json::json;

    use super::*;
    use crate::api::sticky_binding::CONDITION_NODE_AVAILABLE;
    use crate::api::{Release, StickyBindingSpec, StickyBindingStatus};
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
    use crate::sticky::bindings::BindingIndex;
    use crate::sticky::workload::OwnerMeta;

    /// The tests' clock: 2025-01-01T00:10:00Z.
    fn now() -> Timestamp {
        Timestamp::from_second(1_735_690_200).unwrap_or(Timestamp::UNIX_EPOCH)
    }

    fn ago(secs: i64) -> Time {
        Time(now() - SignedDuration::from_secs(secs))
    }

    /// Owners: a Deployment `web` with 3 replicas (via ReplicaSet `web-rs`), a StatefulSet
    /// `db` with 3 replicas.
    struct Owners;

    impl OwnerLookup for Owners {
        fn get(&self, _ns: &str, _api_version: &str, kind: &str, name: &str) -> Option<OwnerMeta> {
            let meta = |kind: &str, name: &str, controller, replicas| OwnerMeta {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: name.into(),
                uid: format!("uid-{name}"),
                controller,
                replicas,
            };
            match (kind, name) {
                ("ReplicaSet", "web-rs") => Some(meta(
                    "ReplicaSet",
                    "web-rs",
                    Some(owner("Deployment", "web")),
                    Some(3),
                )),
                ("Deployment", "web") => Some(meta("Deployment", "web", None, Some(3))),
                ("StatefulSet", "db") => Some(meta("StatefulSet", "db", None, Some(3))),
                _ => None,
            }
        }
    }

    fn owner(kind: &str, name: &str) -> OwnerReference {
        OwnerReference {
            api_version: "apps/v1".into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(true),
            block_owner_deletion: None,
        }
    }

    fn owned(pod: PodBuilder, kind: &str, name: &str) -> PodBuilder {
        pod.with(|p| p.metadata.owner_references = Some(vec![owner(kind, name)]))
    }

    fn binding(
        namespace: &str,
        name: &str,
        node_name: Option<&str>,
        status: StickyBindingStatus,
    ) -> StickyBinding {
        let mut b = StickyBinding::new(
            name,
            StickyBindingSpec {
                workload_ref: crate::scheduler::testing::workload_ref_for(name),
                node_name: node_name.map(Into::into),
            },
        );
        b.metadata.namespace = Some(namespace.into());
        b.status = Some(status);
        b
    }

    fn latest(node: &str) -> StickyBindingStatus {
        StickyBindingStatus {
            latest: Some(node.into()),
            schedule_count: 1,
            node_count: [(node.to_string(), 1)].into(),
            ..Default::default()
        }
    }

    fn node_lost(node: &str, since: Time) -> StickyBindingStatus {
        StickyBindingStatus {
            conditions: vec![Condition {
                type_: CONDITION_NODE_AVAILABLE.into(),
                status: "False".into(),
                reason: "NodeNotFound".into(),
                message: String::new(),
                observed_generation: None,
                last_transition_time: since,
            }],
            ..latest(node)
        }
    }

    fn plugin(args: StickyNodeArgs, bindings: Vec<StickyBinding>) -> StickyNode {
        let index = BindingIndex::default();
        bindings.into_iter().for_each(|b| index.upsert(b));
        StickyNode {
            args,
            owners: Arc::new(Owners),
            bindings: Arc::new(index),
            storage: Arc::new(StorageIndex::default()),
            now,
        }
    }

    /// What the plugin decided: Skip, the nodes that pass Filter, or a rejection's code and
    /// message.
    #[derive(Debug, PartialEq)]
    enum Want {
        Skip,
        Only(&'static str),
        Rejected(Code, String),
    }

    fn run(plugin: &StickyNode, pod: PodBuilder) -> Want {
        let nodes = ["n1", "n2", "n3"];
        let snap = snapshot(nodes.iter().map(|n| NodeBuilder::new(n)).collect(), vec![]);
        let pod = pod.info();
        let mut state = CycleState::new();
        let (result, status) = PreFilterPlugin::pre_filter(plugin, &mut state, &pod, &snap);
        match status.code {
            Code::Skip => return Want::Skip,
            Code::Success => {}
            code => return Want::Rejected(code, status.message()),
        }
        let passing: Vec<&str> = nodes
            .iter()
            .filter(|n| {
                let info = snap.get(n).expect("node in snapshot");
                FilterPlugin::filter(plugin, &state, &pod, info).is_success()
            })
            .copied()
            .collect();
        let narrowed: Vec<&str> = result
            .node_names
            .iter()
            .flatten()
            .map(String::as_str)
            .collect();
        assert_eq!(passing, narrowed, "Filter and PreFilterResult agree");
        match passing[..] {
            [only] => Want::Only(only),
            _ => panic!("more than one node passes: {passing:?}"),
        }
    }

    #[test]
    fn pre_filter_and_filter_pin_the_workload() {
        let release = StickyNodeArgs {
            on_node_loss: OnNodeLoss::Release,
            ..Default::default()
        };
        let excluded = StickyNodeArgs {
            excluded_namespaces: vec!["kube-system".into()],
            ..Default::default()
        };
        let pod = || PodBuilder::new("p");
        let p_binding = |node_name, status| binding("default", "pod-p", node_name, status);
        let reject = |node: &str, of: &str| {
            Want::Rejected(
                Code::UnschedulableAndUnresolvable,
                format!(
                    "node(s) didn't match the sticky node {node} of {of}: the node is not available"
                ),
            )
        };
        let default = StickyNodeArgs::default;

        let cases: Vec<(&str, StickyNodeArgs, Vec<StickyBinding>, PodBuilder, Want)> = vec![
            (
                "no binding: every node passes",
                default(),
                vec![],
                pod(),
                Want::Skip,
            ),
            (
                "binding without a pin yet",
                default(),
                vec![p_binding(None, StickyBindingStatus::default())],
                pod(),
                Want::Skip,
            ),
            (
                "latest pins",
                default(),
                vec![p_binding(None, latest("n2"))],
                pod(),
                Want::Only("n2"),
            ),
            (
                "spec.nodeName beats latest",
                default(),
                vec![p_binding(Some("n3"), latest("n2"))],
                pod(),
                Want::Only("n3"),
            ),
            (
                "empty spec.nodeName falls back to latest",
                default(),
                vec![p_binding(Some(""), latest("n2"))],
                pod(),
                Want::Only("n2"),
            ),
            (
                "excluded namespace",
                excluded.clone(),
                vec![binding("kube-system", "pod-p", None, latest("n2"))],
                pod().namespace("kube-system"),
                Want::Skip,
            ),
            (
                "a namespace not excluded still sticks",
                excluded,
                vec![p_binding(None, latest("n2"))],
                pod(),
                Want::Only("n2"),
            ),
            (
                "disable annotation true",
                default(),
                vec![p_binding(None, latest("n2"))],
                pod().annotation(DEFAULT_DISABLE_ANNOTATION, "true"),
                Want::Skip,
            ),
            (
                "disable annotation other than true",
                default(),
                vec![p_binding(None, latest("n2"))],
                pod().annotation(DEFAULT_DISABLE_ANNOTATION, "false"),
                Want::Only("n2"),
            ),
            (
                "skipMultiReplica: Deployment with 3 replicas is skipped",
                default(),
                vec![binding("default", "deployment-web", None, latest("n2"))],
                owned(PodBuilder::new("web-rs-x"), "ReplicaSet", "web-rs"),
                Want::Skip,
            ),
            (
                "StatefulSet with 3 replicas: each ordinal sticks",
                default(),
                vec![
                    binding("default", "statefulset-db-0", None, latest("n1")),
                    binding("default", "statefulset-db-1", None, latest("n3")),
                ],
                owned(PodBuilder::new("db-1"), "StatefulSet", "db"),
                Want::Only("n3"),
            ),
            (
                "pinned node missing from the snapshot",
                default(),
                vec![p_binding(None, latest("gone"))],
                pod(),
                reject("gone", "Pod/p"),
            ),
            (
                "missing node names the workload kind",
                default(),
                vec![binding("default", "statefulset-db-2", None, latest("gone"))],
                owned(PodBuilder::new("db-2"), "StatefulSet", "db"),
                reject("gone", "StatefulSet/db"),
            ),
            (
                "Wait: a node lost long ago keeps the pin",
                default(),
                vec![p_binding(None, node_lost("gone", ago(3600)))],
                pod(),
                reject("gone", "Pod/p"),
            ),
            (
                "Release: lost for releaseAfterSeconds releases",
                release.clone(),
                vec![p_binding(None, node_lost("gone", ago(300)))],
                pod(),
                Want::Skip,
            ),
            (
                "Release: lost for less than releaseAfterSeconds keeps the pin",
                release.clone(),
                vec![p_binding(None, node_lost("gone", ago(299)))],
                pod(),
                reject("gone", "Pod/p"),
            ),
            (
                "Release: releasedFrom names the pinned node",
                release.clone(),
                vec![p_binding(
                    None,
                    StickyBindingStatus {
                        released_from: Some(Release {
                            node: "n2".into(),
                            time: ago(10),
                        }),
                        ..latest("n2")
                    },
                )],
                pod(),
                Want::Skip,
            ),
            (
                "Release: releasedFrom another node keeps the pin",
                release,
                vec![p_binding(
                    Some("n3"),
                    StickyBindingStatus {
                        released_from: Some(Release {
                            node: "n2".into(),
                            time: ago(10),
                        }),
                        ..latest("n2")
                    },
                )],
                pod(),
                Want::Only("n3"),
            ),
        ];
        for (name, args, bindings, pod, want) in cases {
            let got = run(&plugin(args, bindings), pod);
            assert_eq!(got, want, "{name}");
        }
    }

    #[test]
    fn a_release_to_come_asks_for_a_retry_when_it_is_due() {
        let release = StickyNodeArgs {
            on_node_loss: OnNodeLoss::Release,
            ..Default::default()
        };
        // n2 is in the snapshot but reported lost: rejected up front, not narrowed to.
        let snap = snapshot(vec![NodeBuilder::new("n1"), NodeBuilder::new("n2")], vec![]);
        let pod = PodBuilder::new("p").info();
        let status_for = |args: StickyNodeArgs| {
            let pl = plugin(
                args,
                vec![binding("default", "pod-p", None, node_lost("n2", ago(100)))],
            );
            PreFilterPlugin::pre_filter(&pl, &mut CycleState::new(), &pod, &snap).1
        };
        let status = status_for(release);
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.retry_after,
            Some(std::time::Duration::from_secs(200))
        );
        let status = status_for(StickyNodeArgs::default());
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(status.retry_after, None, "Wait never releases by itself");
    }

    /// Released from a lost node, a workload whose bound volume only that node reached
    /// cannot move: the rejection says why and what a person can do. A volume another node
    /// reaches lets it go.
    #[test]
    fn a_released_workload_whose_volume_stayed_on_the_lost_node_says_so() {
        use crate::scheduler::testing::volumes::{claim, volume};
        let args = StickyNodeArgs {
            on_node_loss: OnNodeLoss::Release,
            ..Default::default()
        };
        let mut pl = plugin(
            args,
            vec![binding(
                "default",
                "pod-p",
                None,
                node_lost("gone", ago(600)),
            )],
        );
        let storage = Arc::new(StorageIndex::default());
        let hostname = |n: &str| NodeBuilder::new(n).label("kubernetes.io/hostname", n);
        storage.apply(Arc::new(
            volume("local", "1Gi")
                .on_node("gone")
                .claimed_by("disk")
                .build(),
        ));
        storage.apply(Arc::new(claim("disk", "").bound_to("local").build()));
        storage.apply(Arc::new(volume("net", "1Gi").claimed_by("shared").build()));
        storage.apply(Arc::new(claim("shared", "").bound_to("net").build()));
        pl.storage = storage;
        let snap = snapshot(vec![hostname("n1"), hostname("n2")], vec![]);
        let decide = |pod: PodBuilder| {
            PreFilterPlugin::pre_filter(&pl, &mut CycleState::new(), &pod.info(), &snap).1
        };
        let status = decide(PodBuilder::new("p").claim("disk"));
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "the pin of Pod/p to node gone was released (onNodeLoss: Release), but its volume \
             local (claim disk) is reachable only from that node: bring node gone back, or set \
             spec.nodeName of StickyBinding default/pod-p to a node the volume reaches, or \
             delete claim disk to start over on a new volume (its data stays behind)"
        );
        assert!(decide(PodBuilder::new("p").claim("shared")).is_skip());
    }

    #[test]
    fn filter_message_names_the_sticky_node() {
        let pl = plugin(
            StickyNodeArgs::default(),
            vec![binding("default", "pod-p", None, latest("n2"))],
        );
        let snap = snapshot(vec![NodeBuilder::new("n1"), NodeBuilder::new("n2")], vec![]);
        let pod = PodBuilder::new("p").info();
        let mut state = CycleState::new();
        let _ = PreFilterPlugin::pre_filter(&pl, &mut state, &pod, &snap);
        let n1 = snap.get("n1").expect("n1");
        assert_eq!(
            FilterPlugin::filter(&pl, &state, &pod, n1),
            Status::unresolvable("node(s) didn't match the sticky node n2 of Pod/p")
        );
    }

    /// A row of args to decode and validate: the args, and the args or the paths of the errors.
    type ArgsCase<T> = (
        &'static str,
        Option<serde_json::Value>,
        Result<T, Vec<&'static str>>,
    );

    #[test]
    fn args_default_and_are_validated_naming_the_field() {
        let p = "pluginConfig[1].args";
        let cases: Vec<ArgsCase<StickyNodeArgs>> = vec![
            ("absent", None, Ok(StickyNodeArgs::default())),
            (
                "all set",
                Some(
                    json!({"skipMultiReplica": true, "excludedNamespaces": ["kube-system"],
                    "disableAnnotation": "x/y", "onNodeLoss": "Release", "releaseAfterSeconds": 0}),
                ),
                Ok(StickyNodeArgs {
                    skip_multi_replica: true,
                    excluded_namespaces: vec!["kube-system".into()],
                    disable_annotation: "x/y".into(),
                    on_node_loss: OnNodeLoss::Release,
                    release_after_seconds: 0,
                    hold_room_seconds: 0,
                    ..StickyNodeArgs::default()
                }),
            ),
            (
                "a hold longer than a day",
                Some(json!({"holdRoomSeconds": 86_401})),
                Err(vec!["pluginConfig[1].args.holdRoomSeconds"]),
            ),
            (
                "a pin for many replicas",
                Some(json!({"skipMultiReplica": false})),
                Err(vec!["pluginConfig[1].args.skipMultiReplica"]),
            ),
            (
                "negative releaseAfterSeconds",
                Some(json!({"releaseAfterSeconds": -1})),
                Err(vec!["pluginConfig[1].args.releaseAfterSeconds"]),
            ),
            (
                "empty disableAnnotation and namespace",
                Some(json!({"disableAnnotation": "", "excludedNamespaces": ["a", ""]})),
                Err(vec![
                    "pluginConfig[1].args.disableAnnotation",
                    "pluginConfig[1].args.excludedNamespaces[1]",
                ]),
            ),
            (
                "unknown field",
                Some(json!({"skipMultiReplicas": true})),
                Err(vec!["pluginConfig[1].args"]),
            ),
            (
                "unknown onNodeLoss",
                Some(json!({"onNodeLoss": "Evict"})),
                Err(vec!["pluginConfig[1].args"]),
            ),
        ];
        for (name, args, want) in cases {
            let got = decode_args::<StickyNodeArgs>(args.as_ref(), &p.into())
                .and_then(|a| a.validate(&p.into()).map(|()| a));
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(errs), Err(paths)) => {
                    let got: Vec<&str> = errs.0.iter().map(|e| e.path.as_str()).collect();
                    assert_eq!(got, paths, "{name}");
                }
                (got, _) => panic!("{name}: got {got:?}"),
            }
            let built = build(args.as_ref(), &p.into(), &Handle::default());
            assert_eq!(
                built.is_ok(),
                name == "absent" || name == "all set",
                "{name}"
            );
        }
    }

    fn vmi_pod(name: &str) -> PodBuilder {
        PodBuilder::new(name).with(|p| {
            p.metadata.owner_references = Some(vec![OwnerReference {
                api_version: "kubevirt.io/v1".into(),
                kind: "VirtualMachineInstance".into(),
                name: "vm".into(),
                uid: "uid-vmi".into(),
                controller: Some(true),
                block_owner_deletion: Some(true),
            }])
        })
    }

    /// A live migration's target pod is the running VM's second launcher, not the VM coming
    /// back: no pin holds it (its anti-affinity keeps it off the source).
    #[test]
    fn a_migration_target_is_held_to_no_pin() {
        let plugin = plugin(
            StickyNodeArgs::default(),
            vec![binding(
                "default",
                "virtualmachineinstance-vm",
                None,
                latest("n2"),
            )],
        );
        assert_eq!(
            run(&plugin, vmi_pod("virt-launcher-vm-a")),
            Want::Only("n2")
        );
        let target = vmi_pod("virt-launcher-vm-b")
            .label(crate::sticky::kubevirt::MIGRATION_JOB_UID, "uid-mig");
        assert_eq!(run(&plugin, target), Want::Skip);
    }

    /// A pin on a cordoned node (a drain) says so, and what a person can do; a pod that
    /// tolerates the cordon goes there as ever.
    #[test]
    fn a_cordoned_pin_says_what_to_do() {
        let plugin = plugin(
            StickyNodeArgs::default(),
            vec![binding("default", "pod-p", None, latest("n2"))],
        );
        let snap = snapshot(
            vec![
                NodeBuilder::new("n1"),
                NodeBuilder::new("n2").unschedulable(),
            ],
            vec![],
        );
        let attempt = |pod: PodBuilder| {
            let mut state = CycleState::new();
            PreFilterPlugin::pre_filter(&plugin, &mut state, &pod.info(), &snap).1
        };
        let status = attempt(PodBuilder::new("p"));
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "node(s) didn't match the sticky node n2 of Pod/p: the node is cordoned \
             (unschedulable); uncordon it (kubectl uncordon n2), or set spec.nodeName of \
             StickyBinding default/pod-p to another node"
        );
        let tolerating = PodBuilder::new("p").toleration(
            "node.kubernetes.io/unschedulable",
            "Exists",
            "",
            "NoSchedule",
        );
        assert!(attempt(tolerating).is_success());
        // Read as NodeUnschedulable reads it: the cordon's taint has no value, so `Equal` with
        // a value does not tolerate it (before, StickyNode let such a pod through to a Filter
        // that rejected the pin anyway, without this message).
        let with_a_value = PodBuilder::new("p").toleration(
            "node.kubernetes.io/unschedulable",
            "Equal",
            "yes",
            "NoSchedule",
        );
        assert_eq!(
            attempt(with_a_value).code,
            Code::UnschedulableAndUnresolvable
        );
    }

    /// A pin the pod's own node selection rules out (Kueue's topology assignment written as a
    /// nodeSelector after the pin was made) says which part, and what a person can do; a
    /// selection the pin meets goes there as ever.
    #[test]
    fn a_pin_the_pods_own_selector_excludes_says_so() {
        let plugin = plugin(
            StickyNodeArgs::default(),
            vec![binding("default", "pod-p", None, latest("n2"))],
        );
        let snap = snapshot(
            vec![
                NodeBuilder::new("n1").label("rack", "r1"),
                NodeBuilder::new("n2").label("rack", "r2"),
            ],
            vec![],
        );
        let attempt = |pod: PodBuilder| {
            let mut state = CycleState::new();
            PreFilterPlugin::pre_filter(&plugin, &mut state, &pod.info(), &snap).1
        };
        let assigned = PodBuilder::new("p")
            .annotation("kueue.x-k8s.io/podset-required-topology", "rack")
            .node_selector("kubernetes.io/hostname", "n1");
        let status = attempt(assigned);
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            status.message(),
            "node(s) didn't match the sticky node n2 of Pod/p: the pod's own nodeSelector \
             kubernetes.io/hostname=n1 excludes that node (set by Kueue's topology-aware \
             admission); set spec.nodeName of StickyBinding default/pod-p to a node it \
             allows, or turn the pin off for this pod (annotation \
             tether.dev/sticky-node-disabled: \"true\")"
        );
        let plain = attempt(PodBuilder::new("p").node_selector("rack", "r1"));
        assert!(
            plain
                .message()
                .contains("own nodeSelector rack=r1 excludes that node;"),
            "{}",
            plain.message()
        );
        assert!(attempt(PodBuilder::new("p").node_selector("rack", "r2")).is_success());
    }

    /// Uncordoning the pinned node wakes the pod; other nodes' and other changes do not.
    #[test]
    fn uncordoning_the_pin_wakes_the_pod() {
        let plugin = plugin(
            StickyNodeArgs::default(),
            vec![binding("default", "pod-p", None, latest("n2"))],
        );
        let pod = PodBuilder::new("p").info();
        let node = |name: &str, cordoned: bool| {
            let mut n = NodeBuilder::new(name);
            if cordoned {
                n = n.unschedulable();
            }
            EventObject::Node(Arc::new(n.build()))
        };
        let hint = |old, new| plugin.after_node_uncordoned(&pod, Some(&old), Some(&new));
        assert_eq!(hint(node("n2", true), node("n2", false)), Hint::Queue);
        assert_eq!(hint(node("n1", true), node("n1", false)), Hint::Skip);
        assert_eq!(hint(node("n2", false), node("n2", true)), Hint::Skip);
    }

    /// A label change of the pinned node wakes the pod (its own selector may match the pin
    /// now); another node's does not.
    #[test]
    fn a_label_change_of_the_pin_wakes_the_pod() {
        let plugin = plugin(
            StickyNodeArgs::default(),
            vec![binding("default", "pod-p", None, latest("n2"))],
        );
        let pod = PodBuilder::new("p").info();
        let registrations = Plugin::events_to_register(&plugin).expect("registrations");
        let labels = registrations
            .iter()
            .find(|r| {
                r.event.resource == EventResource::Node
                    && r.event.action == ActionType::UPDATE_NODE_LABEL
            })
            .and_then(|r| r.hint.clone())
            .expect("a hint on the nodes' label changes");
        let node = |name: &str| EventObject::Node(Arc::new(NodeBuilder::new(name).build()));
        assert_eq!(labels(&pod, None, Some(&node("n2"))), Hint::Queue);
        assert_eq!(labels(&pod, None, Some(&node("n1"))), Hint::Skip);
    }

    /// A pinned pod waiting for room on its pin is nominated to it; one its pin turned down for
    /// what cannot change, or that it did not pin, is not.
    #[test]
    fn a_pod_waiting_for_room_on_its_pin_is_nominated_to_it() {
        let plugin = plugin(
            StickyNodeArgs::default(),
            vec![binding("default", "pod-p", None, latest("n2"))],
        );
        let snap = snapshot(vec![NodeBuilder::new("n1"), NodeBuilder::new("n2")], vec![]);
        let profile = crate::scheduler::profile::default_profile(
            "tether-scheduler",
            &crate::scheduler::plugins::handle::Handle::default(),
        )
        .expect("compiles")
        .profile;
        let decide = |pod: PodBuilder, on_pin: Status| {
            let pod = pod.info();
            let mut state = CycleState::new();
            let _ = PreFilterPlugin::pre_filter(&plugin, &mut state, &pod, &snap);
            let diagnosis = crate::scheduler::framework::runtime::Diagnosis {
                num_all_nodes: 2,
                node_statuses: vec![
                    ("n1".into(), Status::unresolvable("not the pin")),
                    ("n2".into(), on_pin),
                ],
                ..Default::default()
            };
            let ctx = PostFilterContext {
                profile: &profile,
                state: &state,
                pod: &pod,
                snapshot: &snap,
                diagnosis: &diagnosis,
                nominated: &crate::scheduler::framework::NoNominations,
            };
            let (nomination, status) = PostFilterPlugin::post_filter(&plugin, &ctx);
            (nomination, status.code)
        };
        assert_eq!(
            decide(
                PodBuilder::new("p"),
                Status::unschedulable("Insufficient cpu")
            ),
            (Nomination::Node("n2".into()), Code::Success)
        );
        assert_eq!(
            decide(
                PodBuilder::new("p"),
                Status::unresolvable("untolerated taint")
            ),
            (Nomination::Keep, Code::Skip)
        );
        assert_eq!(
            decide(
                PodBuilder::new("other"),
                Status::unschedulable("Insufficient cpu")
            ),
            (Nomination::Keep, Code::Skip),
            "not pinned"
        );
    }

    /// Room is held only with `holdRoomSeconds`, for a pod that left its pin, never for a
    /// migration's target.
    #[test]
    fn room_is_held_for_a_pod_that_left_its_pin() {
        let holding = StickyNodeArgs {
            hold_room_seconds: 60,
            ..Default::default()
        };
        let bindings = || vec![binding("default", "pod-p", None, latest("n2"))];
        let p = PodBuilder::new("p").build();
        let room = |args: StickyNodeArgs, bindings: Vec<StickyBinding>, pod: &Pod, node: &str| {
            let plugin = plugin(args, bindings);
            let who = plugin.hold_identity(pod)?;
            plugin.room_to_hold(pod, node, &who)
        };
        let hold = room(holding.clone(), bindings(), &p, "n2");
        assert_eq!(
            hold,
            Some(crate::scheduler::framework::RoomHold {
                key: "default/pod-p".into(),
                workload: "Pod/default/p".into(),
                span: std::time::Duration::from_secs(60),
                per_namespace: 16,
                per_profile: 256,
            })
        );
        assert_eq!(
            room(holding.clone(), bindings(), &p, "n1"),
            None,
            "not its pin"
        );
        assert_eq!(
            room(StickyNodeArgs::default(), bindings(), &p, "n2"),
            None,
            "off by default"
        );
        let target = vmi_pod("virt-launcher-vm-b")
            .label(crate::sticky::kubevirt::MIGRATION_JOB_UID, "uid-mig")
            .build();
        let vm_bindings = vec![binding(
            "default",
            "virtualmachineinstance-vm",
            None,
            latest("n2"),
        )];
        assert_eq!(room(holding, vm_bindings, &target, "n2"), None);
    }
}
