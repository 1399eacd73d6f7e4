//! Cluster events and queueing hints (kube-scheduler's EnqueueExtensions): each plugin that can
//! reject a pod names the events that can make that pod schedulable, each with a hint function
//! that looks at the change and says whether it may help this pod. The queue moves a rejected
//! pod only on an event that one of its rejecting plugins registered and hinted `Queue` for.

use std::any::Any;
use std::collections::BTreeMap;
use std::fmt;
use std::ops::BitOr;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment,
};

use crate::k8s::pod::Pod;
use crate::k8s::{quantity, resource};
use crate::scheduler::framework::Plugin;
use crate::scheduler::framework::pod_info::PodInfo;

/// What kind of object changed. `Pod` is what plugins register; incoming pod events are
/// `AssignedPod` (bound pods) or `UnschedulablePod` (the pending pod itself), and `Pod` matches
/// both, as upstream.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventResource {
    Pod,
    AssignedPod,
    UnschedulablePod,
    Node,
    /// A kind the framework does not know, named by the code that watches it and registered
    /// by the plugins that read it (tether's StickyBinding is `Custom("StickyBinding")`), as
    /// upstream names custom resources by their GVK.
    Custom(&'static str),
    PersistentVolume,
    PersistentVolumeClaim,
    StorageClass,
    CSINode,
    CSIDriver,
    CSIStorageCapacity,
    VolumeAttachment,
    ResourceClaim,
    ResourceSlice,
    DeviceClass,
    DeviceTaintRule,
    /// A PodGroup of the Workload API (`scheduling.k8s.io/v1beta1`).
    PodGroup,
    /// Every resource (only with [`ActionType::ALL`]: an event that moves every pod).
    WildCard,
}

impl EventResource {
    fn name(self) -> &'static str {
        match self {
            EventResource::Pod => "Pod",
            EventResource::AssignedPod => "AssignedPod",
            EventResource::UnschedulablePod => "UnschedulablePod",
            EventResource::Node => "Node",
            EventResource::Custom(name) => name,
            EventResource::PersistentVolume => "PersistentVolume",
            EventResource::PersistentVolumeClaim => "PersistentVolumeClaim",
            EventResource::StorageClass => "StorageClass",
            EventResource::CSINode => "CSINode",
            EventResource::CSIDriver => "CSIDriver",
            EventResource::CSIStorageCapacity => "CSIStorageCapacity",
            EventResource::VolumeAttachment => "VolumeAttachment",
            EventResource::ResourceClaim => "ResourceClaim",
            EventResource::ResourceSlice => "ResourceSlice",
            EventResource::DeviceClass => "DeviceClass",
            EventResource::DeviceTaintRule => "DeviceTaintRule",
            EventResource::PodGroup => "PodGroup",
            EventResource::WildCard => "*",
        }
    }

    /// Whether a registration for `self` covers an incoming event on `incoming`.
    fn covers(self, incoming: EventResource) -> bool {
        self == EventResource::WildCard
            || self == incoming
            || (self == EventResource::Pod
                && matches!(
                    incoming,
                    EventResource::AssignedPod | EventResource::UnschedulablePod
                ))
    }
}

/// What happened to the object: bits, so that a registration can name several.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ActionType(u32);

impl ActionType {
    pub const ADD: ActionType = ActionType(1);
    pub const DELETE: ActionType = ActionType(1 << 1);
    pub const UPDATE_NODE_ALLOCATABLE: ActionType = ActionType(1 << 2);
    pub const UPDATE_NODE_LABEL: ActionType = ActionType(1 << 3);
    /// The node's taints changed, or it was uncordoned.
    pub const UPDATE_NODE_TAINT: ActionType = ActionType(1 << 4);
    pub const UPDATE_NODE_CONDITION: ActionType = ActionType(1 << 5);
    pub const UPDATE_NODE_ANNOTATION: ActionType = ActionType(1 << 6);
    pub const UPDATE_NODE_DECLARED_FEATURE: ActionType = ActionType(1 << 7);
    pub const UPDATE_POD_LABEL: ActionType = ActionType(1 << 8);
    /// A request of the pod went down or away.
    pub const UPDATE_POD_SCALE_DOWN: ActionType = ActionType(1 << 9);
    /// The pod got a toleration (they can only be added).
    pub const UPDATE_POD_TOLERATION: ActionType = ActionType(1 << 10);
    pub const UPDATE_POD_SCHEDULING_GATES_ELIMINATED: ActionType = ActionType(1 << 11);
    pub const UPDATE_POD_GENERATED_RESOURCE_CLAIM: ActionType = ActionType(1 << 12);
    pub const ALL: ActionType = ActionType((1 << 13) - 1);
    /// Any update: every `UPDATE_*` bit.
    pub const UPDATE: ActionType = ActionType(Self::ALL.0 & !(Self::ADD.0 | Self::DELETE.0));

    const NAMES: [(ActionType, &'static str); 13] = [
        (Self::ADD, "Add"),
        (Self::DELETE, "Delete"),
        (Self::UPDATE_NODE_ALLOCATABLE, "UpdateNodeAllocatable"),
        (Self::UPDATE_NODE_LABEL, "UpdateNodeLabel"),
        (Self::UPDATE_NODE_TAINT, "UpdateNodeTaint"),
        (Self::UPDATE_NODE_CONDITION, "UpdateNodeCondition"),
        (Self::UPDATE_NODE_ANNOTATION, "UpdateNodeAnnotation"),
        (
            Self::UPDATE_NODE_DECLARED_FEATURE,
            "UpdateNodeDeclaredFeature",
        ),
        (Self::UPDATE_POD_LABEL, "UpdatePodLabel"),
        (Self::UPDATE_POD_SCALE_DOWN, "UpdatePodScaleDown"),
        (Self::UPDATE_POD_TOLERATION, "UpdatePodToleration"),
        (
            Self::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            "UpdatePodSchedulingGatesEliminated",
        ),
        (
            Self::UPDATE_POD_GENERATED_RESOURCE_CLAIM,
            "UpdatePodGeneratedResourceClaim",
        ),
    ];

    pub fn intersects(self, other: ActionType) -> bool {
        self.0 & other.0 != 0
    }
}

impl BitOr for ActionType {
    type Output = ActionType;
    fn bitor(self, rhs: ActionType) -> ActionType {
        ActionType(self.0 | rhs.0)
    }
}

impl fmt::Display for ActionType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if *self == Self::ALL {
            return f.write_str("All");
        }
        if *self == Self::UPDATE {
            return f.write_str("Update");
        }
        match Self::NAMES.iter().find(|(a, _)| a == self) {
            Some((_, name)) => f.write_str(name),
            None => write!(f, "{:#x}", self.0),
        }
    }
}

/// One change in the cluster, as the queue sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ClusterEvent {
    pub resource: EventResource,
    pub action: ActionType,
    /// A name for special events (`UnschedulableTimeout`, `ForceActivate`), for logs.
    pub label: Option<&'static str>,
}

impl ClusterEvent {
    pub const fn new(resource: EventResource, action: ActionType) -> Self {
        ClusterEvent {
            resource,
            action,
            label: None,
        }
    }

    /// An event that moves every pod whatever rejected it (upstream's wildcard events).
    pub const fn wildcard(label: &'static str) -> Self {
        ClusterEvent {
            resource: EventResource::WildCard,
            action: ActionType::ALL,
            label: Some(label),
        }
    }

    pub fn is_wildcard(&self) -> bool {
        self.resource == EventResource::WildCard && self.action == ActionType::ALL
    }

    /// Whether this registered event covers `incoming`: the same resource (or `Pod` for either
    /// kind of pod, or the wildcard) and an action that is the same or more specific.
    pub fn matches(&self, incoming: &ClusterEvent) -> bool {
        self.is_wildcard()
            || (self.resource.covers(incoming.resource)
                && self.action.intersects(incoming.action)
                && incoming.action.0 <= self.action.0)
    }
}

impl fmt::Display for ClusterEvent {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.label {
            Some(label) => f.write_str(label),
            None => write!(f, "{}{}", self.resource.name(), self.action),
        }
    }
}

/// A pod moved out of the unschedulable pool because it stayed there too long.
pub const UNSCHEDULABLE_TIMEOUT: ClusterEvent = ClusterEvent::wildcard("UnschedulableTimeout");
/// A plugin asked for a pod to be tried again at once (upstream's ForceActivate: a preemption
/// whose evictions failed re-activates its preemptor).
pub const FORCE_ACTIVATE: ClusterEvent = ClusterEvent::wildcard("ForceActivate");
/// Every pod is retried: the profile that serves them changed.
pub const PROFILE_CHANGE: ClusterEvent = ClusterEvent::wildcard("ProfileChange");
pub const ASSIGNED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::ADD);
/// A pending pod first seen. Told only for pods that name a PodGroup: GangScheduling holds
/// their siblings until enough of them exist.
pub const UNSCHEDULED_POD_ADD: ClusterEvent =
    ClusterEvent::new(EventResource::UnschedulablePod, ActionType::ADD);
pub const ASSIGNED_POD_DELETE: ClusterEvent =
    ClusterEvent::new(EventResource::AssignedPod, ActionType::DELETE);
pub const NODE_ADD: ClusterEvent = ClusterEvent::new(EventResource::Node, ActionType::ADD);
pub const NODE_DELETE: ClusterEvent = ClusterEvent::new(EventResource::Node, ActionType::DELETE);

/// The object an event is about, before or after the change.
#[derive(Clone, Debug)]
pub enum EventObject {
    Pod(Arc<Pod>),
    Node(Arc<Node>),
    /// An object of a [`EventResource::Custom`] kind; the plugin that registered the kind
    /// reads it back with [`EventObject::custom`].
    Custom(Arc<dyn Any + Send + Sync>),
    PersistentVolume(Arc<PersistentVolume>),
    PersistentVolumeClaim(Arc<PersistentVolumeClaim>),
    StorageClass(Arc<StorageClass>),
    CSINode(Arc<CSINode>),
    CSIDriver(Arc<CSIDriver>),
    CSIStorageCapacity(Arc<CSIStorageCapacity>),
    VolumeAttachment(Arc<VolumeAttachment>),
    ResourceClaim(Arc<ResourceClaim>),
    ResourceSlice(Arc<ResourceSlice>),
    DeviceClass(Arc<DeviceClass>),
    DeviceTaintRule(Arc<DeviceTaintRule>),
    PodGroup(Arc<PodGroup>),
}

impl EventObject {
    pub fn pod(&self) -> Option<&Pod> {
        match self {
            EventObject::Pod(p) => Some(p),
            _ => None,
        }
    }

    /// The pod, shared (to build a `PodInfo` without copying it).
    pub fn shared_pod(&self) -> Option<&Arc<Pod>> {
        match self {
            EventObject::Pod(p) => Some(p),
            _ => None,
        }
    }

    pub fn node(&self) -> Option<&Node> {
        match self {
            EventObject::Node(n) => Some(n),
            _ => None,
        }
    }

    /// The object of a custom kind, when it is a `T`.
    pub fn custom<T: Any>(&self) -> Option<&T> {
        match self {
            EventObject::Custom(o) => o.downcast_ref(),
            _ => None,
        }
    }
}

/// The storage and device kinds an event can be about: how each is wrapped, and the resource it names.
pub trait StorageObject: Sized {
    const RESOURCE: EventResource;
    fn wrap(obj: Arc<Self>) -> EventObject;
    fn unwrap(obj: &EventObject) -> Option<&Self>;
}

macro_rules! storage_object {
    ($kind:ident) => {
        impl StorageObject for $kind {
            const RESOURCE: EventResource = EventResource::$kind;
            fn wrap(obj: Arc<Self>) -> EventObject {
                EventObject::$kind(obj)
            }
            fn unwrap(obj: &EventObject) -> Option<&Self> {
                match obj {
                    EventObject::$kind(o) => Some(o),
                    _ => None,
                }
            }
        }
    };
}

storage_object!(PersistentVolume);
storage_object!(PersistentVolumeClaim);
storage_object!(StorageClass);
storage_object!(CSINode);
storage_object!(CSIDriver);
storage_object!(CSIStorageCapacity);
storage_object!(VolumeAttachment);
storage_object!(ResourceClaim);
storage_object!(ResourceSlice);
storage_object!(DeviceClass);
storage_object!(DeviceTaintRule);
storage_object!(PodGroup);

/// The objects of a storage event, before and after.
pub fn objects<'a, K: StorageObject>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> (Option<&'a K>, Option<&'a K>) {
    (old.and_then(K::unwrap), new.and_then(K::unwrap))
}

/// A hint function's answer: whether the event may make the pod schedulable.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    Queue,
    Skip,
}

/// Looks at an event (`old` is `None` for an add, `new` for a delete) for a pod the plugin
/// rejected. Where the objects are not what the registration expects it answers `Queue`, as
/// upstream does with an error: a pod is never stranded by a hint that cannot decide.
pub type HintFn =
    Arc<dyn Fn(&PodInfo, Option<&EventObject>, Option<&EventObject>) -> Hint + Send + Sync>;

/// One event a plugin registers, with its hint (none: always `Queue`).
#[derive(Clone)]
pub struct Registration {
    pub event: ClusterEvent,
    pub hint: Option<HintFn>,
}

impl Registration {
    pub fn new(event: ClusterEvent, hint: HintFn) -> Self {
        Registration {
            event,
            hint: Some(hint),
        }
    }

    /// An event that always requeues the pods the plugin rejected.
    pub fn always(event: ClusterEvent) -> Self {
        Registration { event, hint: None }
    }
}

/// The events of a plugin that does not say which it needs: every kind of object (custom kinds
/// too), any change, as upstream registers `{WildCard, All}` for such a plugin.
pub fn every_event() -> Vec<Registration> {
    vec![Registration::always(ClusterEvent::new(
        EventResource::WildCard,
        ActionType::ALL,
    ))]
}

/// A registered event of a profile: which plugin, and its hint.
#[derive(Clone)]
pub struct HintEntry {
    pub event: ClusterEvent,
    pub plugin: &'static str,
    pub hint: Option<HintFn>,
}

/// A profile's queueing hints (upstream's QueueingHintMap), built when the profile compiles
/// from the plugins that can reject a pod (PreEnqueue, PreFilter, Filter, Reserve, Permit).
#[derive(Clone, Default)]
pub struct QueueingHints {
    entries: Vec<HintEntry>,
}

impl fmt::Debug for QueueingHints {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let list: Vec<String> = self
            .entries
            .iter()
            .map(|e| format!("{}:{}", e.plugin, e.event))
            .collect();
        f.debug_tuple("QueueingHints").field(&list).finish()
    }
}

impl QueueingHints {
    /// Whether `plugin` registered any event: its PreEnqueue verdict may change without the
    /// pod changing (DynamicResources' claim created), where SchedulingGates' cannot.
    pub fn registers(&self, plugin: &str) -> bool {
        self.entries.iter().any(|e| e.plugin == plugin)
    }

    /// The hints of `plugins` (each once, in order).
    pub fn build<'a>(plugins: impl IntoIterator<Item = &'a Arc<dyn Plugin>>) -> Self {
        let mut entries = Vec::new();
        let mut seen = std::collections::BTreeSet::new();
        for plugin in plugins {
            let name = plugin.name();
            if !seen.insert(name) {
                continue;
            }
            let registrations = plugin.events_to_register().unwrap_or_else(every_event);
            // 1.37 no longer adds a node taint change to the events of a plugin that waits for
            // new nodes: each plugin hears what it registers, no more.
            for r in &registrations {
                entries.push(HintEntry {
                    event: r.event,
                    plugin: name,
                    hint: r.hint.clone(),
                });
            }
        }
        QueueingHints { entries }
    }

    /// Whether any plugin registered an event that covers `event`.
    pub fn interested_in(&self, event: &ClusterEvent) -> bool {
        event.is_wildcard() || self.entries.iter().any(|e| e.event.matches(event))
    }

    /// Whether `event` may make `pod`, rejected by `rejectors`, schedulable: some rejector
    /// registered an event covering it and its hint says `Queue`.
    pub fn worth_requeuing(
        &self,
        pod: &PodInfo,
        rejectors: &std::collections::BTreeSet<&'static str>,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> bool {
        self.worth_requeuing_by(pod, |plugin| rejectors.contains(plugin), event, old, new)
    }

    /// [`QueueingHints::worth_requeuing`] with the rejectors told by `rejected` (a gate: one
    /// plugin, with no set to build for it).
    pub fn worth_requeuing_by(
        &self,
        pod: &PodInfo,
        rejected: impl Fn(&'static str) -> bool,
        event: &ClusterEvent,
        old: Option<&EventObject>,
        new: Option<&EventObject>,
    ) -> bool {
        self.entries.iter().any(|e| {
            rejected(e.plugin)
                && e.event.matches(event)
                && e.hint
                    .as_ref()
                    .is_none_or(|hint| hint(pod, old, new) == Hint::Queue)
        })
    }
}

/// The pod events an update of `old` to `new` is (upstream's PodSchedulingPropertiesChange):
/// one per kind of change that can matter, or a plain update when none of them happened.
pub fn pod_changes(new: &Pod, old: &Pod) -> Vec<ClusterEvent> {
    let resource = if new
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
    {
        EventResource::AssignedPod
    } else {
        EventResource::UnschedulablePod
    };
    let mut actions = Vec::new();
    let labels = |p: &Pod| p.metadata.labels.clone().unwrap_or_default();
    if labels(new) != labels(old) {
        actions.push(ActionType::UPDATE_POD_LABEL);
    }
    if scaled_down(new, old) {
        actions.push(ActionType::UPDATE_POD_SCALE_DOWN);
    }
    let gates = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .map_or(0, Vec::len)
    };
    if gates(new) == 0 && gates(old) != 0 {
        actions.push(ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED);
    }
    let tolerations = |p: &Pod| p.spec.as_ref().map_or(0, |s| s.tolerations().len());
    if tolerations(new) != tolerations(old) {
        actions.push(ActionType::UPDATE_POD_TOLERATION);
    }
    let claims = |p: &Pod| {
        p.status.as_ref().map(|s| {
            (
                s.resource_claim_statuses.clone().unwrap_or_default(),
                s.extended_resource_claim_status.clone(),
            )
        })
    };
    if claims(new) != claims(old) {
        actions.push(ActionType::UPDATE_POD_GENERATED_RESOURCE_CLAIM);
    }
    if actions.is_empty() {
        actions.push(ActionType::UPDATE);
    }
    actions
        .into_iter()
        .map(|a| ClusterEvent::new(resource, a))
        .collect()
}

/// Whether a request of the pod went down, or away.
fn scaled_down(new: &Pod, old: &Pod) -> bool {
    let new_requests = resource::pod_requests(new, false);
    let old_requests = resource::pod_requests(old, false);
    old_requests
        .names()
        .any(|name| old_requests.get(name) > new_requests.get(name))
}

/// The node events an update of `old` to `new` is (upstream's NodeSchedulingPropertiesChange);
/// none when nothing that scheduling reads changed (status heartbeats).
pub fn node_changes(new: &Node, old: &Node) -> Vec<ClusterEvent> {
    let mut actions = Vec::new();
    let cordoned = crate::k8s::taints::cordoned;
    if cordoned(new) != cordoned(old) && !cordoned(new) {
        actions.push(ActionType::UPDATE_NODE_TAINT);
    }
    if allocatable(new) != allocatable(old) {
        actions.push(ActionType::UPDATE_NODE_ALLOCATABLE);
    }
    let labels = |n: &Node| n.metadata.labels.clone().unwrap_or_default();
    if labels(new) != labels(old) {
        actions.push(ActionType::UPDATE_NODE_LABEL);
    }
    if crate::k8s::taints::of_node(new) != crate::k8s::taints::of_node(old) {
        actions.push(ActionType::UPDATE_NODE_TAINT);
    }
    let conditions = |n: &Node| -> BTreeMap<String, String> {
        n.status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .into_iter()
            .flatten()
            .map(|c| (c.type_.clone(), c.status.clone()))
            .collect()
    };
    if conditions(new) != conditions(old) {
        actions.push(ActionType::UPDATE_NODE_CONDITION);
    }
    let annotations = |n: &Node| n.metadata.annotations.clone().unwrap_or_default();
    if annotations(new) != annotations(old) {
        actions.push(ActionType::UPDATE_NODE_ANNOTATION);
    }
    let features = |n: &Node| {
        n.status
            .as_ref()
            .and_then(|s| s.declared_features.clone())
            .unwrap_or_default()
    };
    if features(new) != features(old) {
        actions.push(ActionType::UPDATE_NODE_DECLARED_FEATURE);
    }
    actions
        .into_iter()
        .map(|a| ClusterEvent::new(EventResource::Node, a))
        .collect()
}

/// A node's allocatable as numbers, so that `1` and `1000m` are the same.
fn allocatable(node: &Node) -> BTreeMap<String, Option<i64>> {
    node.status
        .as_ref()
        .and_then(|s| s.allocatable.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, v)| (k.clone(), quantity::parse_milli(&v.0).ok()))
        .collect()
}

/// The pods of a pod event, before and after.
pub fn pods<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> (Option<&'a Pod>, Option<&'a Pod>) {
    (
        old.and_then(EventObject::pod),
        new.and_then(EventObject::pod),
    )
}

/// The nodes of a node event, before and after.
pub fn nodes<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> (Option<&'a Node>, Option<&'a Node>) {
    (
        old.and_then(EventObject::node),
        new.and_then(EventObject::node),
    )
}

/// The nodes of a node event when they are nodes: the new one, and the old one if any.
/// `None` when the new object is missing or either is of another kind (the hint then queues,
/// as upstream's hints do on the error they return).
pub fn node_change<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Option<(Option<&'a Node>, &'a Node)> {
    let new = new?.node()?;
    match old {
        None => Some((None, new)),
        Some(old) => Some((Some(old.node()?), new)),
    }
}

/// The new pod of a pod update when both objects are pods (`None` otherwise, as
/// [`node_change`]).
pub fn pod_update<'a>(
    old: Option<&'a EventObject>,
    new: Option<&'a EventObject>,
) -> Option<&'a Pod> {
    if old.is_some_and(|o| o.pod().is_none()) {
        return None;
    }
    new?.pod()
}

/// Whether `other` is the pod `pod` itself.
pub fn is_same_pod(pod: &PodInfo, other: &Pod) -> bool {
    other.metadata.uid.as_deref() == Some(pod.uid())
}

/// Whether a pod holds a place on a node: bound, or nominated for one.
pub fn assigned_or_nominated(pod: &Pod) -> bool {
    let bound = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    let nominated = pod
        .status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .is_some_and(|n| !n.is_empty());
    bound || nominated
}

/// `Hint::Queue` when `helps`, else `Hint::Skip`.
pub fn queue_if(helps: bool) -> Hint {
    if helps { Hint::Queue } else { Hint::Skip }
}

/// Where a cluster event goes: the scheduling queue implements it, and every feed (the storage
/// kinds', the PodGroups', the StickyBindings', the event handlers') tells it the same way.
pub trait ClusterEvents: Send + Sync {
    /// `event` happened to an object (`old`, `new`: before and after; `None` when it was
    /// added, or deleted).
    fn on_event(&self, event: ClusterEvent, old: Option<EventObject>, new: Option<EventObject>);
}

/// The queueing hints of the profile that serves a schedulerName: what the queue asks when an
/// event arrives (the profile registry answers it).
pub trait HintSource: Send + Sync {
    fn hints(&self, scheduler_name: &str) -> Option<Arc<QueueingHints>>;
    /// Whether any profile registered an event covering `event`.
    fn interested_in(&self, event: &ClusterEvent) -> bool;
    /// Runs the PreEnqueue plugins of the profile that serves a schedulerName: the plugin
    /// that still holds `pod` back, if any (`None` too when no profile serves the name).
    fn pre_enqueue(&self, scheduler_name: &str, pod: &PodInfo) -> Option<&'static str>;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn ev(resource: EventResource, action: ActionType) -> ClusterEvent {
        ClusterEvent::new(resource, action)
    }

    #[test]
    fn registrations_match_the_same_or_more_specific_events_as_upstream() {
        let pod_label = ev(EventResource::Pod, ActionType::UPDATE_POD_LABEL);
        let any_update = ev(EventResource::Pod, ActionType::UPDATE);
        let assigned_label = ev(EventResource::AssignedPod, ActionType::UPDATE_POD_LABEL);
        assert!(
            pod_label.matches(&assigned_label),
            "Pod covers assigned pods"
        );
        assert!(
            any_update.matches(&assigned_label),
            "Update covers every update"
        );
        assert!(
            !pod_label.matches(&ev(EventResource::AssignedPod, ActionType::UPDATE)),
            "a plain update is not a label change"
        );
        assert!(!pod_label.matches(&ev(EventResource::Node, ActionType::UPDATE_POD_LABEL)));
        assert!(ClusterEvent::wildcard("x").matches(&NODE_ADD));
        assert!(!NODE_ADD.matches(&UNSCHEDULABLE_TIMEOUT));
        assert_eq!(assigned_label.to_string(), "AssignedPodUpdatePodLabel");
        assert_eq!(any_update.to_string(), "PodUpdate");
    }

    #[test]
    fn node_changes_name_each_kind_of_change_and_ignore_heartbeats() {
        let base = NodeBuilder::new("n")
            .label("zone", "a")
            .allocatable("cpu", "1")
            .build();
        let mut relabelled = base.clone();
        relabelled.metadata.labels = Some([("zone".to_string(), "b".to_string())].into());
        assert_eq!(
            node_changes(&relabelled, &base),
            [ev(EventResource::Node, ActionType::UPDATE_NODE_LABEL)]
        );
        let same_cpu = NodeBuilder::new("n")
            .label("zone", "a")
            .allocatable("cpu", "1000m")
            .build();
        assert!(
            node_changes(&same_cpu, &base).is_empty(),
            "1 and 1000m are equal"
        );
        let cordoned = NodeBuilder::new("n")
            .label("zone", "a")
            .allocatable("cpu", "1")
            .unschedulable()
            .build();
        assert!(
            node_changes(&cordoned, &base).is_empty(),
            "cordoning helps no pod"
        );
        assert_eq!(
            node_changes(&base, &cordoned),
            [ev(EventResource::Node, ActionType::UPDATE_NODE_TAINT)],
            "uncordoning is a taint change"
        );
    }

    #[test]
    fn pod_changes_fall_back_to_a_plain_update() {
        let pending = PodBuilder::new("p").req_cpu("2").build();
        let smaller = PodBuilder::new("p").req_cpu("1").build();
        assert_eq!(
            pod_changes(&smaller, &pending),
            [ev(
                EventResource::UnschedulablePod,
                ActionType::UPDATE_POD_SCALE_DOWN
            )]
        );
        let annotated = PodBuilder::new("p")
            .req_cpu("2")
            .annotation("a", "b")
            .build();
        assert_eq!(
            pod_changes(&annotated, &pending),
            [ev(EventResource::UnschedulablePod, ActionType::UPDATE)]
        );
        let bound = PodBuilder::new("p")
            .req_cpu("2")
            .node_name("n")
            .label("x", "y")
            .build();
        let bound_before = PodBuilder::new("p").req_cpu("2").node_name("n").build();
        assert_eq!(
            pod_changes(&bound, &bound_before),
            [ev(EventResource::AssignedPod, ActionType::UPDATE_POD_LABEL)]
        );
    }

    #[test]
    fn a_plugin_hears_only_the_events_it_registers() {
        struct NodeWaiter;
        impl Plugin for NodeWaiter {
            fn name(&self) -> &'static str {
                "NodeWaiter"
            }
            fn events_to_register(&self) -> Option<Vec<Registration>> {
                Some(vec![Registration::new(
                    NODE_ADD,
                    Arc::new(|_, _, _| Hint::Skip),
                )])
            }
        }
        struct Silent;
        impl Plugin for Silent {
            fn name(&self) -> &'static str {
                "Silent"
            }
        }
        let plugins: Vec<Arc<dyn Plugin>> = vec![Arc::new(NodeWaiter), Arc::new(Silent)];
        let hints = QueueingHints::build(&plugins);
        let pod = PodBuilder::new("p").info();
        let taint = ev(EventResource::Node, ActionType::UPDATE_NODE_TAINT);
        let rejected_by = |name: &'static str| std::collections::BTreeSet::from([name]);
        assert!(
            !hints.worth_requeuing(&pod, &rejected_by("NodeWaiter"), &taint, None, None),
            "1.37 no longer adds node taint changes to a plugin that waits for new nodes"
        );
        assert!(
            !hints.worth_requeuing(&pod, &rejected_by("NodeWaiter"), &NODE_ADD, None, None),
            "its hint said Skip"
        );
        let binding = ev(EventResource::Custom("Widget"), ActionType::DELETE);
        assert!(
            hints.worth_requeuing(&pod, &rejected_by("Silent"), &binding, None, None),
            "says nothing: every event"
        );
        assert!(!hints.worth_requeuing(&pod, &rejected_by("Other"), &binding, None, None));
    }
}
