//! The owner metadata cache behind workload resolution: ReplicaSets, Deployments, Jobs,
//! StatefulSets and KubeVirt VirtualMachineInstances / VirtualMachines from the start, and any
//! other owner kind a pod names from the moment it is first seen (found through discovery and
//! watched through the metadata API), read without API calls.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::watcher;

use crate::locks;
use crate::watch::{self, Feed, Index, Readiness};

use crate::sticky::workload::{OwnerLookup, OwnerMeta};

/// (namespace, group-qualified kind, name).
type Key = (String, String, String);

/// An owner kind with its API group (`apps/StatefulSet`, `apps.kruise.io/StatefulSet`; core
/// kinds bare), so that same-named kinds of different groups are never confused.
pub fn group_kind(api_version: &str, kind: &str) -> String {
    match api_version.split_once('/') {
        Some((group, _)) => format!("{group}/{kind}"),
        None => kind.to_string(),
    }
}

/// Where the watch of one owner kind stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KindState {
    /// Started, not listed yet: owners of this kind are not known yet.
    Starting,
    /// Listed at least once: an owner missing from the cache does not exist (yet).
    Listed,
    /// Not served, or not readable by tether (RBAC): owners are named by their reference.
    Unavailable,
}

/// Owner objects by (namespace, group-qualified kind, name).
#[derive(Default)]
pub struct OwnerCache {
    owners: RwLock<HashMap<Key, OwnerMeta>>,
    kinds: RwLock<HashMap<String, KindState>>,
    /// Where a kind seen for the first time is sent to be watched (`run_owner_watches`).
    discover: Mutex<Option<tokio::sync::mpsc::UnboundedSender<(String, String)>>>,
    /// Group-qualified kinds besides the built-in ones that tether may watch when a pod names
    /// them (`--owner-kinds`). Any other kind a pod names is never listed or watched: a pod
    /// author cannot make tether read arbitrary kinds. `None`: any kind (unit tests).
    extra_kinds: Option<std::collections::HashSet<String>>,
}

/// The owner kinds tether always follows (when the cluster serves them).
pub const BUILT_IN_KINDS: [&str; 6] = [
    "apps/ReplicaSet",
    "apps/Deployment",
    "apps/StatefulSet",
    "batch/Job",
    "kubevirt.io/VirtualMachineInstance",
    "kubevirt.io/VirtualMachine",
];

impl OwnerCache {
    /// A cache that follows the built-in owner kinds and `extra` (group-qualified, e.g.
    /// `apps.kruise.io/StatefulSet`).
    pub fn with_kinds(extra: impl IntoIterator<Item = String>) -> Self {
        OwnerCache {
            extra_kinds: Some(extra.into_iter().collect()),
            ..OwnerCache::default()
        }
    }

    /// Whether pods' owners of this group-qualified kind may be watched.
    fn follows(&self, kind: &str) -> bool {
        BUILT_IN_KINDS.contains(&kind)
            || self
                .extra_kinds
                .as_ref()
                .is_none_or(|extra| extra.contains(kind))
    }

    pub fn upsert(&self, namespace: &str, meta: OwnerMeta) {
        let key = (
            namespace.to_string(),
            group_kind(&meta.api_version, &meta.kind),
            meta.name.clone(),
        );
        locks::write(&self.owners).insert(key, meta);
    }

    fn set_kind(&self, kind: &str, state: KindState) -> Option<KindState> {
        locks::write(&self.kinds).insert(kind.to_string(), state)
    }

    /// Marks `kind` listed; true the first time.
    pub fn mark_listed(&self, kind: &str) -> bool {
        self.set_kind(kind, KindState::Listed) != Some(KindState::Listed)
    }

    /// Marks `kind` unavailable unless it has listed; true when that changed its state.
    fn mark_unavailable(&self, kind: &str) -> bool {
        let mut kinds = locks::write(&self.kinds);
        match kinds.get(kind) {
            Some(KindState::Listed | KindState::Unavailable) => false,
            _ => {
                kinds.insert(kind.to_string(), KindState::Unavailable);
                true
            }
        }
    }

    /// Replaces every owner of the group-qualified `kind` (after a relist) with `owners`, given
    /// with their namespace.
    pub fn reset_kind(&self, kind: &str, owners: Vec<(String, OwnerMeta)>) {
        let mut map = locks::write(&self.owners);
        map.retain(|(_, k, _), _| k != kind);
        for (namespace, meta) in owners {
            let key = (
                namespace,
                group_kind(&meta.api_version, &meta.kind),
                meta.name.clone(),
            );
            map.insert(key, meta);
        }
    }

    pub fn remove(&self, namespace: &str, kind: &str, name: &str) {
        locks::write(&self.owners).remove(&(
            namespace.to_string(),
            kind.to_string(),
            name.to_string(),
        ));
    }
}

impl OwnerLookup for OwnerCache {
    fn get(&self, namespace: &str, api_version: &str, kind: &str, name: &str) -> Option<OwnerMeta> {
        locks::read(&self.owners)
            .get(&(
                namespace.to_string(),
                group_kind(api_version, kind),
                name.to_string(),
            ))
            .cloned()
    }

    /// A kind seen for the first time is sent to be watched, and counts as watched (its
    /// owners pending) until its watch lists or turns out unavailable.
    fn is_watched(&self, api_version: &str, kind: &str) -> bool {
        let kind = group_kind(api_version, kind);
        let kind = kind.as_str();
        if !self.follows(kind) {
            return false;
        }
        let state = locks::read(&self.kinds).get(kind).copied();
        match state {
            Some(KindState::Starting | KindState::Listed) => true,
            Some(KindState::Unavailable) => false,
            None => {
                let discover = locks::lock(&self.discover);
                let Some(tx) = discover.as_ref() else {
                    return false;
                };
                let mut kinds = locks::write(&self.kinds);
                if let Some(state) = kinds.get(kind) {
                    return *state != KindState::Unavailable;
                }
                kinds.insert(kind.to_string(), KindState::Starting);
                let bare = kind.rsplit('/').next().unwrap_or(kind);
                tx.send((api_version.to_string(), bare.to_string())).is_ok()
            }
        }
    }
}

fn meta_of(
    meta: &kube::api::ObjectMeta,
    api_version: &str,
    kind: &str,
    replicas: Option<i32>,
) -> OwnerMeta {
    OwnerMeta {
        api_version: api_version.to_string(),
        kind: kind.to_string(),
        name: meta.name.clone().unwrap_or_default(),
        uid: meta.uid.clone().unwrap_or_default(),
        controller: meta
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .cloned(),
        replicas,
    }
}

/// The owners of one kind, as an [`Index`] of its watch.
struct OwnersOf<K> {
    cache: Arc<OwnerCache>,
    kind: String,
    to_meta: Box<dyn Fn(&K) -> OwnerMeta + Send + Sync>,
}

impl<K: kube::Resource + Send + Sync> Index<K> for OwnersOf<K> {
    fn apply(&self, obj: K) {
        self.cache.upsert(
            obj.meta().namespace.as_deref().unwrap_or_default(),
            (self.to_meta)(&obj),
        );
    }

    fn delete(&self, obj: K) {
        self.cache.remove(
            obj.meta().namespace.as_deref().unwrap_or_default(),
            &self.kind,
            obj.meta().name.as_deref().unwrap_or_default(),
        );
    }

    fn reset(&self, objs: Vec<K>) {
        let metas = objs
            .iter()
            .map(|o| {
                (
                    o.meta().namespace.clone().unwrap_or_default(),
                    (self.to_meta)(o),
                )
            })
            .collect();
        self.cache.reset_kind(&self.kind, metas);
        if self.cache.mark_listed(&self.kind) {
            tracing::debug!(kind = %self.kind, "owner watch listed");
        }
    }

    /// Before its first list, a failing watch (forbidden, not served) must not hold pods
    /// back: their owners are named by their references meanwhile.
    fn failed(&self, error: &watcher::Error) {
        if self.cache.mark_unavailable(&self.kind) {
            tracing::warn!(kind = %self.kind, error = %error, "cannot watch this owner kind; its pods' workloads are named by their ownerReference");
        }
    }
}

/// Feeds `cache` from a watch of `api`, `to_meta` giving each object's metadata.
async fn feed<K>(
    cache: Arc<OwnerCache>,
    api: Api<K>,
    kind: &str,
    api_version: &str,
    feed: Option<Feed>,
    to_meta: impl Fn(&K) -> OwnerMeta + Send + Sync + 'static,
) where
    K: kube::Resource
        + Clone
        + std::fmt::Debug
        + serde::de::DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let index = OwnersOf {
        cache,
        kind: group_kind(api_version, kind),
        to_meta: Box::new(to_meta),
    };
    watch::run(api, format!("{kind} owners"), feed, &index).await;
}

/// KubeVirt's owner kinds: watched from the start when the cluster serves them, as optional
/// kinds (see [`watch_discovered`]): nothing waits for them, and they come and go with their
/// CRDs.
const KUBEVIRT_KINDS: [&str; 2] = ["VirtualMachineInstance", "VirtualMachine"];

/// The owner watches, the four built-in kinds registered in `readiness` now. KubeVirt's two
/// and any other kind (watched once a pod names it, see [`OwnerCache::is_watched`]) are
/// optional: nothing waits for them. The future runs them until the process stops.
pub fn run_owner_watches(
    cache: Arc<OwnerCache>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let kinds = [
        ("apps/v1", "ReplicaSet"),
        ("apps/v1", "Deployment"),
        ("apps/v1", "StatefulSet"),
        ("batch/v1", "Job"),
    ];
    let mut feeds: HashMap<&str, Feed> = HashMap::new();
    for (api_version, kind) in kinds {
        cache.set_kind(&group_kind(api_version, kind), KindState::Starting);
        feeds.insert(
            kind,
            readiness.register_for(
                format!("{kind} owners"),
                watch::Need::Plugins(crate::scheduler::framework::needs::STICKY_PLUGINS),
            ),
        );
    }
    for kind in KUBEVIRT_KINDS {
        cache.set_kind(&group_kind("kubevirt.io/v1", kind), KindState::Starting);
    }
    async move { run_owner_watches_with(cache, client, feeds).await }
}

async fn run_owner_watches_with(
    cache: Arc<OwnerCache>,
    client: kube::Client,
    mut feeds: HashMap<&'static str, Feed>,
) {
    let mut feed_of = |kind| feeds.remove(kind);
    let (rs, deploy, sts, job) = (
        feed_of("ReplicaSet"),
        feed_of("Deployment"),
        feed_of("StatefulSet"),
        feed_of("Job"),
    );
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<(String, String)>();
    for kind in KUBEVIRT_KINDS {
        let _ = tx.send(("kubevirt.io/v1".to_string(), kind.to_string()));
    }
    *locks::lock(&cache.discover) = Some(tx);
    let discovered = {
        let (cache, client) = (cache.clone(), client.clone());
        async move {
            // The discovered kinds' watches are this future's own: aborted with it (a session
            // whose term is over), they stop feeding, and stop holding, its owner cache.
            let mut watches = tokio::task::JoinSet::new();
            while let Some((api_version, kind)) = rx.recv().await {
                watches.spawn(watch_discovered(
                    cache.clone(),
                    client.clone(),
                    api_version,
                    kind,
                ));
            }
            // The sender lives in the cache; keep the watches while the cache does.
            watches.join_all().await;
        }
    };
    tokio::join!(
        discovered,
        feed(
            cache.clone(),
            Api::<ReplicaSet>::all(client.clone()),
            "ReplicaSet",
            "apps/v1",
            rs,
            replica_set_meta
        ),
        feed(
            cache.clone(),
            Api::<Deployment>::all(client.clone()),
            "Deployment",
            "apps/v1",
            deploy,
            deployment_meta
        ),
        feed(
            cache.clone(),
            Api::<StatefulSet>::all(client.clone()),
            "StatefulSet",
            "apps/v1",
            sts,
            stateful_set_meta
        ),
        feed(
            cache.clone(),
            Api::<Job>::all(client.clone()),
            "Job",
            "batch/v1",
            job,
            |o: &Job| meta_of(
                &o.metadata,
                "batch/v1",
                "Job",
                o.spec.as_ref().and_then(|s| s.parallelism)
            )
        ),
    );
}

fn replica_set_meta(o: &ReplicaSet) -> OwnerMeta {
    let replicas = o.spec.replicas;
    meta_of(&o.metadata, "apps/v1", "ReplicaSet", replicas)
}

fn deployment_meta(o: &Deployment) -> OwnerMeta {
    let replicas = o.spec.replicas;
    meta_of(&o.metadata, "apps/v1", "Deployment", replicas)
}

fn stateful_set_meta(o: &StatefulSet) -> OwnerMeta {
    let replicas = o.spec.replicas;
    meta_of(&o.metadata, "apps/v1", "StatefulSet", replicas)
}

/// Fills `cache` from lists instead of watches (`tether simulate`): ReplicaSets, Deployments
/// and StatefulSets; the other kinds' pods are named by their ownerReference.
pub fn fill(
    cache: &OwnerCache,
    replica_sets: &[ReplicaSet],
    deployments: &[Deployment],
    stateful_sets: &[StatefulSet],
) {
    let fill_kind = |kind: &str, metas: Vec<(String, OwnerMeta)>| {
        cache.reset_kind(&group_kind("apps/v1", kind), metas);
        cache.mark_listed(&group_kind("apps/v1", kind));
    };
    let ns = |m: &kube::api::ObjectMeta| m.namespace.clone().unwrap_or_default();
    fill_kind(
        "ReplicaSet",
        replica_sets
            .iter()
            .map(|o| (ns(&o.metadata), replica_set_meta(o)))
            .collect(),
    );
    fill_kind(
        "Deployment",
        deployments
            .iter()
            .map(|o| (ns(&o.metadata), deployment_meta(o)))
            .collect(),
    );
    fill_kind(
        "StatefulSet",
        stateful_sets
            .iter()
            .map(|o| (ns(&o.metadata), stateful_set_meta(o)))
            .collect(),
    );
}

/// Feeds `cache` from a metadata-only watch of `resource`, an optional kind, until the API
/// server stops serving it (its CRD deleted: the watch's requests answer 404).
async fn watch_while_served(cache: Arc<OwnerCache>, client: kube::Client, resource: ApiResource) {
    use futures::StreamExt;
    let (api_version, kind) = (resource.api_version.clone(), resource.kind.clone());
    let index = OwnersOf {
        cache,
        kind: group_kind(&api_version, &kind),
        to_meta: Box::new(move |o: &PartialObjectMeta<DynamicObject>| {
            meta_of(&o.metadata, &api_version, &kind, None)
        }),
    };
    let api = Api::<PartialObjectMeta<DynamicObject>>::all_with(client, &resource);
    let mut applier = watch::Applier::new(None);
    let mut events = std::pin::pin!(watch::watch(api, format!("{} owners", resource.kind), None));
    while let Some(event) = events.next().await {
        if let Err(e) = &event
            && not_served(e)
        {
            return;
        }
        applier.apply(&index, event);
    }
}

/// Whether a watch failed because its resource is not served (404).
pub(crate) fn not_served(error: &watcher::Error) -> bool {
    crate::watch::unavailable(error) == Some(crate::watch::Unavailable::NotServed)
}

/// The longest wait between two discoveries of an optional kind not served.
const DISCOVERY_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(30);

/// Watches an optional owner kind (KubeVirt's, or one a pod named for the first time), found
/// through discovery, for as long as the process runs. While discovery fails (the kind is not
/// served yet, or the API server is away) the kind counts as unavailable, so its pods are not
/// held back, and discovery is retried with a backoff of 1 s doubling to 30 s. When the kind
/// stops being served (its CRD deleted) its owners are forgotten, the kind is unavailable
/// again, and discovery resumes: a kind installed, removed and installed again is followed
/// without a restart.
async fn watch_discovered(
    cache: Arc<OwnerCache>,
    client: kube::Client,
    api_version: String,
    kind: String,
) {
    let (group, version) = api_version.split_once('/').unwrap_or(("", &api_version));
    let gvk = GroupVersionKind::gvk(group, version, &kind);
    let key = group_kind(&api_version, &kind);
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        match kube::discovery::pinned_kind(&client, &gvk).await {
            Ok((resource, _)) => {
                tracing::info!(api_version = %api_version, kind = %kind, "watching an owner kind");
                watch_while_served(cache.clone(), client.clone(), resource).await;
                cache.set_kind(&key, KindState::Unavailable);
                cache.reset_kind(&key, Vec::new());
                tracing::warn!(api_version = %api_version, kind = %kind, "owner kind no longer served; its pods' workloads are named by their ownerReference until it is again");
                delay = std::time::Duration::from_secs(1);
            }
            Err(e) => {
                if cache.mark_unavailable(&key) {
                    tracing::warn!(api_version = %api_version, kind = %kind, error = %e, "owner kind not served; its pods' workloads are named by their ownerReference meanwhile; discovery is retried");
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(DISCOVERY_MAX_DELAY);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kind_seen_first_is_sent_to_be_watched_and_pending_until_decided() {
        let cache = OwnerCache::default();
        assert!(
            !cache.is_watched("example.com/v1", "Widget"),
            "without the watch runner, nothing is pending"
        );
        let cache = OwnerCache::default();
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        *cache.discover.lock().expect("lock") = Some(tx);

        assert!(cache.is_watched("example.com/v1", "Widget"), "starting");
        assert!(
            cache.is_watched("example.com/v1", "Widget"),
            "still starting"
        );
        assert_eq!(
            rx.try_recv().ok(),
            Some(("example.com/v1".to_string(), "Widget".to_string()))
        );
        assert!(rx.try_recv().is_err(), "asked for once");

        assert!(cache.mark_listed("example.com/Widget"));
        assert!(
            !cache.mark_listed("example.com/Widget"),
            "only the first list counts"
        );
        assert!(cache.is_watched("example.com/v1", "Widget"), "listed");
        assert!(
            !cache.mark_unavailable("example.com/Widget"),
            "a listed kind stays listed"
        );

        assert!(cache.is_watched("example.com/v1", "Gadget"));
        assert!(cache.mark_unavailable("example.com/Gadget"));
        assert!(
            !cache.is_watched("example.com/v1", "Gadget"),
            "unavailable: named by reference"
        );
    }

    #[test]
    fn only_allowed_kinds_are_ever_watched() {
        let cache = OwnerCache::with_kinds(["example.com/Widget".to_string()]);
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        *cache.discover.lock().expect("lock") = Some(tx);
        assert!(
            !cache.is_watched("evil.com/v1", "Secret"),
            "not allowed: named by reference"
        );
        assert!(rx.try_recv().is_err(), "nothing discovered or watched");
        assert!(cache.is_watched("example.com/v1", "Widget"));
        assert_eq!(
            rx.try_recv().ok(),
            Some(("example.com/v1".to_string(), "Widget".to_string()))
        );
    }

    #[test]
    fn same_named_kinds_of_two_groups_are_two_owners() {
        let cache = OwnerCache::default();
        let meta = |api_version: &str, uid: &str| OwnerMeta {
            api_version: api_version.into(),
            kind: "StatefulSet".into(),
            name: "db".into(),
            uid: uid.into(),
            controller: None,
            replicas: Some(3),
        };
        cache.upsert("ns", meta("apps/v1", "apps-uid"));
        cache.upsert("ns", meta("apps.kruise.io/v1beta1", "kruise-uid"));
        let uid = |api_version| {
            cache
                .get("ns", api_version, "StatefulSet", "db")
                .map(|m| m.uid)
        };
        assert_eq!(uid("apps/v1").as_deref(), Some("apps-uid"));
        assert_eq!(uid("apps.kruise.io/v1beta1").as_deref(), Some("kruise-uid"));
        assert_eq!(
            uid("apps.kruise.io/v1alpha1").as_deref(),
            Some("kruise-uid"),
            "any version"
        );
        cache.mark_listed("apps/StatefulSet");
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
        *cache.discover.lock().expect("lock") = Some(tx);
        assert!(
            cache.is_watched("apps.kruise.io/v1beta1", "StatefulSet"),
            "its own watch"
        );
        assert_eq!(
            rx.try_recv().ok(),
            Some((
                "apps.kruise.io/v1beta1".to_string(),
                "StatefulSet".to_string()
            ))
        );
    }
}
