//! PodGroups of the Workload API (`scheduling.k8s.io/v1beta1`) from a watch, and the pods that
//! name each group in `spec.schedulingGroup.podGroupName`, for GangScheduling and the group
//! scheduling cycle.
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
use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::Api;

use crate::scheduler::informers::Keeps;
use crate::watch::{self, Index, Readiness};

/// The longest wait between two tries of the PodGroup watch while the API is not served.
const NOT_SERVED_MAX_DELAY: Duration = Duration::from_secs(30);

/// A group's key: its namespace and name.
pub type GroupKey = (String, String);

/// How a PodGroup asks its pods to be scheduled.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Each pod on its own (`basic: {}`).
    Basic,
    /// All at once or none: at least `min_count` pods placed in one group cycle.
    Gang { min_count: usize },
}

/// The group a pod names (`spec.schedulingGroup.podGroupName`), if any.
pub fn group_name(pod: &Pod) -> Option<&str> {
    pod.spec
        .as_ref()?
        .scheduling_group
        .as_ref()?
        .pod_group_name
        .as_deref()
        .filter(|n| !n.is_empty())
}

/// The key of the group a pod names, if any.
pub fn group_of(pod: &Pod) -> Option<GroupKey> {
    let name = group_name(pod)?;
    Some((
        pod.metadata.namespace.clone().unwrap_or_default(),
        name.to_string(),
    ))
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

fn key(group: &PodGroup) -> GroupKey {
    (
        group.metadata.namespace.clone().unwrap_or_default(),
        group.metadata.name.clone().unwrap_or_default(),
    )
}

#[derive(Default)]
struct Inner {
    groups: HashMap<GroupKey, Arc<PodGroup>>,
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

    /// The PodGroup `namespace/name`, as watched.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>> {
        self.read()
            .groups
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }

    /// The group `pod` names, when the PodGroup exists.
    pub fn group_of_pod(&self, pod: &Pod) -> Option<Arc<PodGroup>> {
        let (namespace, name) = group_of(pod)?;
        self.get(&namespace, &name)
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
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let live = pod.metadata.deletion_timestamp.is_none()
            && !matches!(
                pod.status.as_ref().and_then(|s| s.phase.as_deref()),
                Some("Succeeded" | "Failed")
            );
        let group = group_of(pod).filter(|_| live);
        let mut inner = self.write();
        if inner.group_of_member.get(&uid) == group.as_ref() {
            return false;
        }
        forget(&mut inner, &uid);
        let Some(group) = group else {
            return false;
        };
        inner
            .members
            .entry(group.clone())
            .or_default()
            .insert(uid.clone());
        inner.group_of_member.insert(uid, group);
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

/// The PodGroup watch, registered in `readiness` now for GangScheduling alone; it feeds
/// `index` (and the queue, through `feed`) until the process stops. While the API server
/// answers 404 (the Workload API is not served) the watch counts as current with no PodGroups
/// and is tried again after 1 s doubling to 30 s.
pub fn run_watch<I>(
    feed: Arc<I>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static
where
    I: Index<PodGroup> + 'static,
{
    const WHAT: &str = "podgroups";
    let registered = readiness.register_for(
        WHAT,
        crate::watch::Need::Plugins(crate::scheduler::framework::needs::GANG_PLUGINS),
    );
    async move {
        let mut delay = Duration::from_secs(1);
        loop {
            let api = Api::<PodGroup>::all(client.clone());
            let mut applier = watch::Applier::new(Some(registered.clone()));
            let mut events = std::pin::pin!(watch::watch(api, WHAT, Some(registered.clone())));
            let mut served = false;
            while let Some(event) = events.next().await {
                if let Err(e) = &event
                    && let Some(why) = unavailable(e)
                {
                    match why {
                        Unavailable::NotServed => tracing::debug!(
                            "the Workload API (scheduling.k8s.io/v1beta1 PodGroups) is not served; no gangs"
                        ),
                        Unavailable::Forbidden => tracing::warn!(
                            "tether may not list PodGroups (RBAC): the pods of gangs wait for their group; the ClusterRole needs list and watch on podgroups"
                        ),
                    }
                    feed.reset(Vec::new());
                    registered.listed();
                    break;
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

/// Why PodGroups cannot be watched, where that is no failure of the watch.
enum Unavailable {
    /// 404: the API server does not serve the Workload API.
    NotServed,
    /// 403: tether may not list them.
    Forbidden,
}

/// A 404 or 403 of the PodGroup watch: there are no PodGroups tether can see. Their pods wait
/// at PreEnqueue for a group that does not appear, and every other pod is scheduled.
fn unavailable(error: &kube::runtime::watcher::Error) -> Option<Unavailable> {
    use kube::runtime::watcher::Error;
    match error {
        Error::InitialListFailed(kube::Error::Api(e))
        | Error::WatchStartFailed(kube::Error::Api(e))
        | Error::WatchFailed(kube::Error::Api(e)) => match e.code {
            404 => Some(Unavailable::NotServed),
            403 => Some(Unavailable::Forbidden),
            _ => None,
        },
        _ => None,
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
        ("ns".to_string(), name.to_string())
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
        done.status = Some(k8s_openapi::api::core::v1::PodStatus {
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
