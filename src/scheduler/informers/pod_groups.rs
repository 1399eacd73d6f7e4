//! PodGroups from watches, and the live pods of each, for the group scheduling cycle: the
//! Workload API's (`scheduling.k8s.io/v1beta1`, a pod names its group in
//! `spec.schedulingGroup.podGroupName`; GangScheduling) and scheduler-plugins' Coscheduling
//! PodGroups (`scheduling.x-k8s.io/v1alpha1`, a pod names its group in the label
//! `scheduling.x-k8s.io/pod-group`; `minMember`), so that jobs written for Coscheduling
//! (Kubeflow's) are placed by the same cycle.
//!
//! The API is beta and off by default in Kubernetes 1.37 (kube-apiserver's `GenericWorkload`
//! gate and `--runtime-config scheduling.k8s.io/v1beta1=true`). A cluster that does not serve
//! it (404) has no PodGroups: the watch counts as current with none, and is tried again with a
//! backoff, so that a cluster without the API never holds back a profile.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::Api;

use crate::k8s::pod::Pod;
use crate::scheduler::informers::Keeps;
use crate::watch::{self, Index, Readiness, Unavailable, api_unavailable, unavailable};

pub mod composite;

/// The longest wait between two tries of the PodGroup watch while the API is not served.
const NOT_SERVED_MAX_DELAY: Duration = Duration::from_secs(30);

/// Which API a group is of.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum GroupApi {
    /// `scheduling.k8s.io/v1beta1` PodGroup (GangScheduling).
    Workload,
    /// scheduler-plugins' `scheduling.x-k8s.io/v1alpha1` PodGroup (Coscheduling).
    Coscheduling,
}

/// A group's key: its API, namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct GroupKey {
    pub api: GroupApi,
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for GroupKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The label a pod names its Coscheduling PodGroup with (scheduler-plugins').
pub const COSCHEDULING_LABEL: &str = "scheduling.x-k8s.io/pod-group";

/// A Coscheduling PodGroup (`scheduling.x-k8s.io/v1alpha1`), as tether reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CoschedulingGroup {
    pub namespace: String,
    pub name: String,
    pub resource_version: Option<String>,
    /// `spec.minMember`.
    pub min_member: usize,
}

impl CoschedulingGroup {
    /// Reads one from its object; `spec.minMember` absent or negative counts as 0.
    pub fn from_object(obj: &kube::api::DynamicObject) -> Self {
        let min_member = obj.data["spec"]["minMember"]
            .as_i64()
            .and_then(|m| usize::try_from(m).ok())
            .unwrap_or(0);
        CoschedulingGroup {
            namespace: obj.metadata.namespace.clone().unwrap_or_default(),
            name: obj.metadata.name.clone().unwrap_or_default(),
            resource_version: obj.metadata.resource_version.clone(),
            min_member,
        }
    }

    fn key(&self) -> GroupKey {
        GroupKey {
            api: GroupApi::Coscheduling,
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// A group of either API.
#[derive(Clone, Debug)]
pub enum Group {
    Workload(Arc<PodGroup>),
    Coscheduling(Arc<CoschedulingGroup>),
}

impl Group {
    /// How its pods are scheduled: a Coscheduling PodGroup is a gang of `minMember`.
    pub fn policy(&self) -> Policy {
        match self {
            Group::Workload(g) => policy(g),
            Group::Coscheduling(g) => Policy::Gang {
                min_count: g.min_member,
            },
        }
    }

    /// The group's own priority, where its API has one.
    pub fn priority(&self) -> Option<i32> {
        match self {
            Group::Workload(g) => g.spec.priority,
            Group::Coscheduling(_) => None,
        }
    }
}

/// How a PodGroup asks its pods to be scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Each pod on its own (`basic: {}`).
    Basic,
    /// All at once or none: at least `min_count` pods placed in one group cycle.
    Gang { min_count: usize },
}

impl Policy {
    /// How many pods a group cycle must place: the gang's `minCount`, 1 for the basic policy
    /// (upstream's getMinCount).
    pub fn min_count(self) -> usize {
        match self {
            Policy::Gang { min_count } => min_count,
            Policy::Basic => 1,
        }
    }
}

/// The group a pod names (`spec.schedulingGroup.podGroupName`), if any.
pub fn group_name(pod: &Pod) -> Option<&str> {
    crate::k8s::pods::pod_group_name(pod)
}

/// The group a pod names, borrowed from the pod: what [`group_of`] owns. Asked of every
/// queued pod when a gang is taken, explained or told of an event, so it allocates nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GroupRef<'a> {
    pub api: GroupApi,
    pub namespace: &'a str,
    pub name: &'a str,
}

/// The group a pod names, if any: its Workload API group, else the Coscheduling group its
/// label names.
pub fn group_ref(pod: &Pod) -> Option<GroupRef<'_>> {
    let (api, name) = match group_name(pod) {
        Some(name) => (GroupApi::Workload, name),
        None => (
            GroupApi::Coscheduling,
            pod.metadata
                .labels
                .as_ref()?
                .get(COSCHEDULING_LABEL)
                .filter(|n| !n.is_empty())?
                .as_str(),
        ),
    };
    Some(GroupRef {
        api,
        namespace: pod.metadata.namespace.as_deref().unwrap_or_default(),
        name,
    })
}

impl GroupKey {
    /// Whether `group` is this group.
    pub fn is(&self, group: &GroupRef<'_>) -> bool {
        self.api == group.api && self.namespace == group.namespace && self.name == group.name
    }

    /// Whether `pod` is a member of this group.
    pub fn has_member(&self, pod: &Pod) -> bool {
        group_ref(pod).is_some_and(|group| self.is(&group))
    }
}

/// The key of the group a pod names, if any: its Workload API group, else the Coscheduling
/// group its label names.
pub fn group_of(pod: &Pod) -> Option<GroupKey> {
    group_ref(pod).map(|group| GroupKey {
        api: group.api,
        namespace: group.namespace.to_string(),
        name: group.name.to_string(),
    })
}

/// A PodGroup's policy: the gang policy with its `minCount` (a negative one counts as 0), else
/// basic.
pub fn policy(group: &PodGroup) -> Policy {
    match &group.spec.scheduling_policy.gang {
        Some(gang) => Policy::Gang {
            min_count: usize::try_from(gang.min_count).unwrap_or(0),
        },
        None => Policy::Basic,
    }
}

/// The key of a Workload API PodGroup.
pub fn key(group: &PodGroup) -> GroupKey {
    GroupKey {
        api: GroupApi::Workload,
        namespace: group.metadata.namespace.clone().unwrap_or_default(),
        name: group.metadata.name.clone().unwrap_or_default(),
    }
}

#[derive(Default)]
struct Inner {
    groups: HashMap<GroupKey, Arc<PodGroup>>,
    coscheduling: HashMap<GroupKey, Arc<CoschedulingGroup>>,
    /// CompositePodGroups (1.38), the parents of a hierarchy.
    composites: HashMap<composite::CompositeKey, Arc<composite::CompositeGroup>>,
    /// The pods (UIDs) naming each group that are not finished or being deleted, pending or
    /// bound.
    members: HashMap<GroupKey, BTreeSet<String>>,
    /// Each member's group, to forget it by UID.
    group_of_member: HashMap<String, GroupKey>,
}

/// Every PodGroup, and the live pods naming each.
#[derive(Default)]
pub struct PodGroupIndex {
    inner: RwLock<Inner>,
}

impl PodGroupIndex {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, Inner> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, Inner> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// The group `key`, as watched.
    pub fn get(&self, key: &GroupKey) -> Option<Group> {
        let inner = self.read();
        match key.api {
            GroupApi::Workload => inner.groups.get(key).cloned().map(Group::Workload),
            GroupApi::Coscheduling => inner
                .coscheduling
                .get(key)
                .cloned()
                .map(Group::Coscheduling),
        }
    }

    /// A Coscheduling PodGroup added or changed; the one it replaces, if any.
    pub fn apply_coscheduling(
        &self,
        group: Arc<CoschedulingGroup>,
    ) -> Option<Arc<CoschedulingGroup>> {
        self.write().coscheduling.insert(group.key(), group)
    }

    /// A Coscheduling PodGroup deleted; the one held, if any.
    pub fn delete_coscheduling(&self, group: &CoschedulingGroup) -> Option<Arc<CoschedulingGroup>> {
        self.write().coscheduling.remove(&group.key())
    }

    /// Every Coscheduling PodGroup now `groups` (a list); those it replaced.
    pub fn reset_coscheduling(
        &self,
        groups: Vec<Arc<CoschedulingGroup>>,
    ) -> Vec<Arc<CoschedulingGroup>> {
        let new = groups.into_iter().map(|g| (g.key(), g)).collect();
        std::mem::replace(&mut self.write().coscheduling, new)
            .into_values()
            .collect()
    }

    /// How many live pods name the group (pending or bound).
    pub fn member_count(&self, key: &GroupKey) -> usize {
        self.read().members.get(key).map_or(0, BTreeSet::len)
    }

    /// The UIDs of the live pods naming the group.
    pub fn members(&self, key: &GroupKey) -> Vec<String> {
        self.read()
            .members
            .get(key)
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// A pod was seen: a live pod naming a group is its member; a pod finished or being
    /// deleted is not. Returns whether it became a member now.
    pub fn observe_pod(&self, pod: &Pod) -> bool {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let live = pod.metadata.deletion_timestamp.is_none()
            && !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
        let group = group_of(pod).filter(|_| live);
        // Every pod event comes here: one that names no group, and never did, takes no write
        // lock (the scheduling cycle reads this index).
        if group.is_none() && !self.read().group_of_member.contains_key(uid) {
            return false;
        }
        let mut inner = self.write();
        if inner.group_of_member.get(uid) == group.as_ref() {
            return false;
        }
        forget(&mut inner, uid);
        let Some(group) = group else {
            return false;
        };
        inner
            .members
            .entry(group.clone())
            .or_default()
            .insert(uid.to_string());
        inner.group_of_member.insert(uid.to_string(), group);
        true
    }

    /// A pod was deleted.
    pub fn forget_pod(&self, uid: &str) {
        forget(&mut self.write(), uid);
    }

    /// Keeps only the members whose UID is in `uids` (after a re-list of pods).
    pub fn retain_pods(&self, uids: &HashSet<String>) {
        let mut inner = self.write();
        let gone: Vec<String> = inner
            .group_of_member
            .keys()
            .filter(|uid| !uids.contains(*uid))
            .cloned()
            .collect();
        for uid in gone {
            forget(&mut inner, &uid);
        }
    }
}

fn forget(inner: &mut Inner, uid: &str) {
    if let Some(group) = inner.group_of_member.remove(uid)
        && let Some(members) = inner.members.get_mut(&group)
    {
        members.remove(uid);
        if members.is_empty() {
            inner.members.remove(&group);
        }
    }
}

impl Keeps<PodGroup> for PodGroupIndex {
    fn apply(&self, group: Arc<PodGroup>) {
        self.write().groups.insert(key(&group), group);
    }

    fn delete(&self, group: &PodGroup) {
        self.write().groups.remove(&key(group));
    }

    fn reset(&self, groups: Vec<Arc<PodGroup>>) {
        self.write().groups = groups.into_iter().map(|g| (key(&g), g)).collect();
    }

    fn current(&self, group: &PodGroup) -> Option<Arc<PodGroup>> {
        self.read().groups.get(&key(group)).cloned()
    }

    fn all(&self) -> Vec<Arc<PodGroup>> {
        self.read().groups.values().cloned().collect()
    }
}

/// The Workload API's PodGroup watch, registered in `readiness` now for GangScheduling alone;
/// it feeds `feed` (the index, and the queue) until the process stops.
pub fn run_watch<I>(
    feed: Arc<I>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static
where
    I: Index<PodGroup> + 'static,
{
    watch_optional(
        Api::<PodGroup>::all(client),
        "podgroups",
        crate::scheduler::framework::needs::GANG_PLUGINS,
        WhenForbidden::NoneExist("the pods naming such a group wait for it"),
        feed,
        readiness,
    )
}

/// The Coscheduling kind: scheduler-plugins' `scheduling.x-k8s.io/v1alpha1` PodGroup.
pub fn coscheduling_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "scheduling.x-k8s.io",
        "v1alpha1",
        "PodGroup",
    ))
}

/// scheduler-plugins' PodGroup watch, registered in `readiness` now for Coscheduling alone.
pub fn run_coscheduling_watch(
    feed: Arc<CoschedulingFeed>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    watch_optional(
        Api::<kube::api::DynamicObject>::all_with(client, &coscheduling_resource()),
        "podgroups.scheduling.x-k8s.io",
        crate::scheduler::framework::needs::COSCHEDULING_PLUGINS,
        WhenForbidden::NoneExist("the pods naming such a group wait for it"),
        feed,
        readiness,
    )
}

/// What a watch of an optional kind does while tether may not list it (403).
#[derive(Clone, Copy)]
pub enum WhenForbidden {
    /// Counts as current with no objects; the warning says what then happens.
    NoneExist(&'static str),
    /// Stays stale (its plugins' pods wait, as for a watch that fails), tried again.
    Waits,
}

/// Feeds `feed` from a watch of `api`, a kind the API server may not serve (the Workload API,
/// scheduler-plugins' PodGroups, DRA's kinds, DeviceTaintRules before 1.37), until the process
/// stops. While it answers 404 (not served) the watch counts as current with no objects, the
/// feed is told so ([`crate::watch::Index::served`]) and the log says it once (and again when it
/// is served); a 403 (tether may not list it) does as `forbidden` says. Either is tried again
/// after 1 s doubling to 30 s.
pub fn watch_optional<K, I>(
    api: Api<K>,
    what: &'static str,
    plugins: &'static [&'static str],
    forbidden: WhenForbidden,
    feed: Arc<I>,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static
where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
    I: Index<K> + 'static,
{
    let registered = readiness.register_for(what, crate::watch::Need::Plugins(plugins));
    async move {
        let mut delay = Duration::from_secs(1);
        // Set while the kind counts as none (not served, or not readable where none are
        // assumed): the feed stays current with nothing in it, and a plain list asks whether
        // that changed. Starting the watch to ask would mark the feed failing for each try,
        // and a pod tried in that moment would wait on a watch it does not need.
        let mut counted_as_none = false;
        // Said once per change: not served, then served again.
        let mut said_not_served = false;
        loop {
            if counted_as_none {
                let probe = api.list(&kube::api::ListParams::default().limit(1)).await;
                let still_none = matches!(
                    (probe.as_ref().err().and_then(api_unavailable), forbidden),
                    (Some(Unavailable::NotServed), _)
                        | (Some(Unavailable::Forbidden), WhenForbidden::NoneExist(_))
                );
                if still_none {
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(NOT_SERVED_MAX_DELAY);
                    continue;
                }
                // Served and readable now, or an answer that says nothing of it: the watch
                // decides.
                counted_as_none = false;
            }
            let mut applier = watch::Applier::new(Some(registered.clone()));
            let mut events =
                std::pin::pin!(watch::watch(api.clone(), what, Some(registered.clone())));
            let mut served = false;
            while let Some(event) = events.next().await {
                if let Err(e) = &event
                    && let Some(why) = unavailable(e)
                {
                    match (why, forbidden) {
                        (Unavailable::NotServed, _) => {
                            feed.served(what, false);
                            if !said_not_served {
                                said_not_served = true;
                                tracing::warn!(
                                    kind = what,
                                    plugins = ?plugins,
                                    "not served by this API server: tether counts none, the pods that need them are told so, and asks again every 30 s"
                                );
                            }
                        }
                        (Unavailable::Forbidden, WhenForbidden::NoneExist(then)) => {
                            tracing::warn!(
                                kind = what,
                                "tether may not list these (RBAC): {then}; the ClusterRole needs list and watch on them"
                            )
                        }
                        (Unavailable::Forbidden, WhenForbidden::Waits) => {
                            tracing::warn!(
                                kind = what,
                                "tether may not list these (RBAC): the pods that need them wait; the ClusterRole needs list and watch on them"
                            );
                            break;
                        }
                    }
                    feed.reset(Vec::new());
                    registered.listed();
                    counted_as_none = true;
                    break;
                }
                if event.is_ok() && !served {
                    feed.served(what, true);
                    if said_not_served {
                        said_not_served = false;
                        tracing::info!(kind = what, "served by the API server now");
                    }
                }
                served |= event.is_ok();
                applier.apply(feed.as_ref(), event);
            }
            if served {
                delay = Duration::from_secs(1);
            }
            tokio::time::sleep(delay).await;
            delay = (delay * 2).min(NOT_SERVED_MAX_DELAY);
        }
    }
}

/// The event resource of a Coscheduling PodGroup's change.
pub const COSCHEDULING_EVENT: crate::scheduler::framework::events::EventResource =
    crate::scheduler::framework::events::EventResource::Custom("CoschedulingPodGroup");

/// Feeds Coscheduling PodGroups into the index and their changes to the queue.
pub struct CoschedulingFeed {
    pub index: Arc<PodGroupIndex>,
    pub events: Arc<dyn crate::scheduler::framework::events::ClusterEvents>,
}

impl CoschedulingFeed {
    fn told(
        &self,
        action: crate::scheduler::framework::events::ActionType,
        old: Option<Arc<CoschedulingGroup>>,
        new: Option<Arc<CoschedulingGroup>>,
    ) {
        use crate::scheduler::framework::events::{ClusterEvent, EventObject};
        let wrap = |g: Arc<CoschedulingGroup>| EventObject::Custom(g);
        self.events.on_event(
            ClusterEvent::new(COSCHEDULING_EVENT, action),
            old.map(wrap),
            new.map(wrap),
        );
    }
}

impl Index<kube::api::DynamicObject> for CoschedulingFeed {
    fn apply(&self, obj: kube::api::DynamicObject) {
        use crate::scheduler::framework::events::ActionType;
        let group = Arc::new(CoschedulingGroup::from_object(&obj));
        let old = self.index.apply_coscheduling(group.clone());
        match old {
            Some(old) if old.resource_version == group.resource_version => {}
            Some(old) => self.told(ActionType::UPDATE, Some(old), Some(group)),
            None => self.told(ActionType::ADD, None, Some(group)),
        }
    }

    fn delete(&self, obj: kube::api::DynamicObject) {
        use crate::scheduler::framework::events::ActionType;
        let group = CoschedulingGroup::from_object(&obj);
        let old = self
            .index
            .delete_coscheduling(&group)
            .unwrap_or_else(|| Arc::new(group));
        self.told(ActionType::DELETE, Some(old), None);
    }

    fn reset(&self, objs: Vec<kube::api::DynamicObject>) {
        use crate::scheduler::framework::events::ActionType;
        let groups: Vec<Arc<CoschedulingGroup>> = objs
            .iter()
            .map(|o| Arc::new(CoschedulingGroup::from_object(o)))
            .collect();
        let before = self.index.reset_coscheduling(groups.clone());
        for group in groups {
            let old = before.iter().find(|o| o.key() == group.key()).cloned();
            match old {
                Some(old) if old.resource_version == group.resource_version => {}
                Some(old) => self.told(ActionType::UPDATE, Some(old), Some(group)),
                None => self.told(ActionType::ADD, None, Some(group)),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(uid: &str, group: Option<&str>) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": uid, "namespace": "ns", "uid": uid},
            "spec": {"containers": [], "schedulingGroup": group.map(|g| json!({"podGroupName": g}))},
        }))
        .expect("a pod")
    }

    fn key(name: &str) -> GroupKey {
        GroupKey {
            api: GroupApi::Workload,
            namespace: "ns".to_string(),
            name: name.to_string(),
        }
    }

    #[test]
    fn members_are_the_live_pods_naming_the_group() {
        let index = PodGroupIndex::default();
        index.observe_pod(&pod("a", Some("g")));
        index.observe_pod(&pod("b", Some("g")));
        index.observe_pod(&pod("b", Some("g")));
        index.observe_pod(&pod("c", None));
        assert_eq!(index.member_count(&key("g")), 2);

        let mut done = pod("a", Some("g"));
        done.status = Some(crate::k8s::pod::PodStatus {
            phase: Some("Succeeded".into()),
            ..Default::default()
        });
        index.observe_pod(&done);
        assert_eq!(index.member_count(&key("g")), 1, "a finished pod is none");
        index.forget_pod("b");
        assert_eq!(index.member_count(&key("g")), 0);

        index.observe_pod(&pod("d", Some("g")));
        index.observe_pod(&pod("e", Some("h")));
        index.retain_pods(&HashSet::from(["e".to_string()]));
        assert_eq!(index.member_count(&key("g")), 0, "gone in a re-list");
        assert_eq!(index.member_count(&key("h")), 1);
    }

    #[test]
    fn the_policy_is_read_from_the_spec() {
        let group = |policy: serde_json::Value| -> PodGroup {
            serde_json::from_value(json!({
                "metadata": {"name": "g", "namespace": "ns"},
                "spec": {"schedulingPolicy": policy},
            }))
            .expect("a PodGroup")
        };
        assert_eq!(
            policy(&group(json!({"gang": {"minCount": 3}}))),
            Policy::Gang { min_count: 3 }
        );
        assert_eq!(
            policy(&group(json!({"gang": {"minCount": -1}}))),
            Policy::Gang { min_count: 0 }
        );
        assert_eq!(policy(&group(json!({"basic": {}}))), Policy::Basic);
    }
}
