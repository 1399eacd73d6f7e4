//! The selectors of the Services that select a pod and of its controller (ReplicationController,
//! ReplicaSet or StatefulSet), merged into one, as kube-scheduler's DefaultSelector builds them
//! for PodTopologySpread's default (system) constraints. Fed by watches; read in
//! PreFilter/PreScore.

use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::sync::{Arc, RwLock};

use k8s_openapi::api::apps::v1::{ReplicaSet, StatefulSet};
use k8s_openapi::api::core::v1::{ReplicationController, Service};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;
use kube::api::Api;

use crate::locks;
use crate::watch::{self, Index, Readiness};

use crate::k8s::labels::Selector;
use crate::scheduler::framework::pod_info::PodInfo;

/// Selectors by namespace, then by `Kind/name`.
#[derive(Default)]
pub struct WorkloadSelectors {
    by_namespace: RwLock<HashMap<String, HashMap<String, Selector>>>,
}

impl WorkloadSelectors {
    /// Records (or replaces) the selector of `kind/name` in `namespace`.
    pub fn set(&self, namespace: &str, kind: &str, name: &str, selector: Selector) {
        let mut map = locks::write(&self.by_namespace);
        map.entry(namespace.to_string())
            .or_default()
            .insert(format!("{kind}/{name}"), selector);
    }

    pub fn remove(&self, namespace: &str, kind: &str, name: &str) {
        let mut map = locks::write(&self.by_namespace);
        if let Some(ns) = map.get_mut(namespace) {
            ns.remove(&format!("{kind}/{name}"));
        }
    }

    /// Replaces every selector of `kind` (after a relist) with `selectors`, given as
    /// (namespace, name, selector).
    pub fn reset_kind(&self, kind: &str, selectors: Vec<(String, String, Selector)>) {
        let prefix = format!("{kind}/");
        let mut map = locks::write(&self.by_namespace);
        for ns in map.values_mut() {
            ns.retain(|key, _| !key.starts_with(&prefix));
        }
        for (namespace, name, selector) in selectors {
            map.entry(namespace)
                .or_default()
                .insert(format!("{kind}/{name}"), selector);
        }
    }
}

/// The selectors of one kind, as an [`Index`] of its watch.
struct SelectorsOf<K> {
    selectors: Arc<WorkloadSelectors>,
    kind: &'static str,
    selector: fn(&K) -> Option<Selector>,
}

fn key<K: kube::Resource>(o: &K) -> (String, String) {
    (
        o.meta().namespace.clone().unwrap_or_default(),
        o.meta().name.clone().unwrap_or_default(),
    )
}

impl<K: kube::Resource + Send + Sync> Index<K> for SelectorsOf<K> {
    fn apply(&self, obj: K) {
        let (ns, name) = key(&obj);
        match (self.selector)(&obj) {
            Some(s) => self.selectors.set(&ns, self.kind, &name, s),
            None => self.selectors.remove(&ns, self.kind, &name),
        }
    }

    fn delete(&self, obj: K) {
        let (ns, name) = key(&obj);
        self.selectors.remove(&ns, self.kind, &name);
    }

    fn reset(&self, objs: Vec<K>) {
        let selectors = objs
            .iter()
            .filter_map(|o| {
                let (ns, name) = key(o);
                (self.selector)(o).map(|s| (ns, name, s))
            })
            .collect();
        self.selectors.reset_kind(self.kind, selectors);
    }
}

fn map_selector(m: Option<&BTreeMap<String, String>>) -> Option<Selector> {
    m.filter(|m| !m.is_empty()).map(Selector::from_map)
}

fn label_selector(s: Option<&LabelSelector>) -> Option<Selector> {
    Selector::from_label_selector(s)
        .ok()
        .filter(|s| !s.is_empty())
}

/// Watches Services, ReplicationControllers, ReplicaSets and StatefulSets into `selectors`,
/// for PodTopologySpread's default constraints; registered in `readiness` now.
type Indexes = (
    SelectorsOf<Service>,
    SelectorsOf<ReplicationController>,
    SelectorsOf<ReplicaSet>,
    SelectorsOf<StatefulSet>,
);

/// The index of each of the four kinds, feeding `selectors`.
fn indexes(selectors: &Arc<WorkloadSelectors>) -> Indexes {
    (
        SelectorsOf {
            selectors: selectors.clone(),
            kind: "Service",
            selector: |o: &Service| map_selector(o.spec.as_ref().and_then(|s| s.selector.as_ref())),
        },
        SelectorsOf {
            selectors: selectors.clone(),
            kind: "ReplicationController",
            selector: |o: &ReplicationController| {
                map_selector(o.spec.as_ref().and_then(|s| s.selector.as_ref()))
            },
        },
        SelectorsOf {
            selectors: selectors.clone(),
            kind: "ReplicaSet",
            selector: |o: &ReplicaSet| label_selector(Some(&o.spec.selector)),
        },
        SelectorsOf {
            selectors: selectors.clone(),
            kind: "StatefulSet",
            selector: |o: &StatefulSet| label_selector(Some(&o.spec.selector)),
        },
    )
}

/// Fills `selectors` from lists instead of watches (`tether simulate`).
pub fn fill(
    selectors: &Arc<WorkloadSelectors>,
    services: Vec<Service>,
    replica_sets: Vec<ReplicaSet>,
    stateful_sets: Vec<StatefulSet>,
) {
    let (services_index, rcs_index, replica_sets_index, stateful_sets_index) = indexes(selectors);
    services_index.reset(services);
    rcs_index.reset(Vec::new());
    replica_sets_index.reset(replica_sets);
    stateful_sets_index.reset(stateful_sets);
}

pub fn run_watches(
    selectors: Arc<WorkloadSelectors>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let spread = crate::watch::Need::Plugins(crate::scheduler::framework::needs::SPREAD_PLUGINS);
    let feeds = [
        readiness.register_for("Service selectors", spread),
        readiness.register_for("ReplicationController selectors", spread),
        readiness.register_for("ReplicaSet selectors", spread),
        readiness.register_for("StatefulSet selectors", spread),
    ];
    async move {
        let [services, rcs, replica_sets, stateful_sets] = feeds;
        let (services_index, rcs_index, replica_sets_index, stateful_sets_index) =
            indexes(&selectors);
        tokio::join!(
            watch::run(
                Api::<Service>::all(client.clone()),
                "services",
                Some(services),
                &services_index,
            ),
            watch::run(
                Api::<ReplicationController>::all(client.clone()),
                "replicationcontrollers",
                Some(rcs),
                &rcs_index,
            ),
            watch::run(
                Api::<ReplicaSet>::all(client.clone()),
                "replicasets (selectors)",
                Some(replica_sets),
                &replica_sets_index,
            ),
            watch::run(
                Api::<StatefulSet>::all(client),
                "statefulsets (selectors)",
                Some(stateful_sets),
                &stateful_sets_index,
            ),
        );
    }
}

/// The selector of the workloads a pod belongs to: the Services, ReplicaSets,
/// ReplicationControllers and StatefulSets that select it, as kube-scheduler's
/// `helper.DefaultSelector` builds it. Only default constraints use it.
pub trait DefaultSelectorSource: Send + Sync {
    /// `None` (or an empty selector) when nothing selects the pod; then no default applies.
    fn default_selector(&self, pod: &PodInfo) -> Option<Selector>;
}

/// A source for schedulers that keep no workload caches: default constraints never apply.
pub struct NoDefaultSelectors;

impl DefaultSelectorSource for NoDefaultSelectors {
    fn default_selector(&self, _pod: &PodInfo) -> Option<Selector> {
        None
    }
}

/// The controller kinds whose selector joins the default one when they control the pod, by
/// the API version and kind of the ownerReference, as upstream's DefaultSelector.
const CONTROLLER_KINDS: [(&str, &str); 3] = [
    ("v1", "ReplicationController"),
    ("apps/v1", "ReplicaSet"),
    ("apps/v1", "StatefulSet"),
];

impl DefaultSelectorSource for WorkloadSelectors {
    /// As upstream's DefaultSelector: the selectors of the Services that select the pod, and
    /// the selector of the pod's controller (its ownerReference with `controller: true`) when
    /// that is a ReplicationController, ReplicaSet or StatefulSet. A ReplicaSet that merely
    /// matches the pod's labels adds nothing. An empty selector adds nothing either.
    fn default_selector(&self, pod: &PodInfo) -> Option<Selector> {
        let map = locks::read(&self.by_namespace);
        let selectors = map.get(pod.namespace())?;
        let services = selectors
            .iter()
            .filter(|(key, s)| key.starts_with("Service/") && s.matches(pod.labels()))
            .map(|(_, s)| s);
        let controller = pod
            .pod
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .filter(|o| {
                CONTROLLER_KINDS
                    .iter()
                    .any(|(v, k)| o.api_version == *v && o.kind == *k)
            })
            .and_then(|o| selectors.get(&format!("{}/{}", o.kind, o.name)));
        let mut merged: Option<Selector> = None;
        for selector in services.chain(controller).filter(|s| !s.is_empty()) {
            merged
                .get_or_insert_with(Selector::everything)
                .merge(selector);
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn merges_the_services_that_select_the_pod_and_its_controller_only() {
        let w = WorkloadSelectors::default();
        let sel = |pairs: &[(&str, &str)]| {
            Selector::from_map(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        w.set("default", "Service", "web", sel(&[("app", "web")]));
        w.set(
            "default",
            "ReplicaSet",
            "web-1",
            sel(&[("app", "web"), ("hash", "1")]),
        );
        w.set("default", "Service", "other", sel(&[("app", "db")]));
        w.set("shop", "Service", "web", sel(&[("app", "web")]));
        w.set(
            "default",
            "StatefulSet",
            "matches-but-controls-nothing",
            sel(&[("app", "web"), ("tier", "x")]),
        );
        let owned_by = |kind: &str, name: &str| {
            vec![OwnerReference {
                api_version: "apps/v1".into(),
                kind: kind.into(),
                name: name.into(),
                uid: "u".into(),
                controller: Some(true),
                block_owner_deletion: None,
            }]
        };
        let pod = PodBuilder::new("p")
            .label("app", "web")
            .label("hash", "1")
            .with(|p| p.metadata.owner_references = Some(owned_by("ReplicaSet", "web-1")))
            .info();
        let merged = w.default_selector(&pod).expect("selected");
        assert!(merged.matches(pod.labels()));
        let sibling = PodBuilder::new("q")
            .label("app", "web")
            .label("hash", "2")
            .info();
        assert!(
            !merged.matches(sibling.labels()),
            "the ReplicaSet's selector is part of it"
        );
        let tiered = PodBuilder::new("t")
            .label("app", "web")
            .label("hash", "1")
            .label("tier", "y")
            .info();
        assert!(
            merged.matches(tiered.labels()),
            "a StatefulSet that is not the pod's controller adds nothing"
        );
        let loner = PodBuilder::new("l").label("app", "cache").info();
        assert!(w.default_selector(&loner).is_none());
        w.remove("default", "ReplicaSet", "web-1");
        assert!(
            w.default_selector(&pod)
                .expect("the service")
                .matches(sibling.labels())
        );
    }
}
