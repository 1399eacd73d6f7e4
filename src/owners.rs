//! The owner metadata cache behind workload resolution: ReplicaSets, Deployments, Jobs,
//! StatefulSets and KubeVirt VirtualMachineInstances / VirtualMachines, fed by metadata-only
//! watches (typed watches where `spec.replicas` is needed), read without API calls.

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, RwLock};

use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet, StatefulSet};
use k8s_openapi::api::batch::v1::Job;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};
use kube::core::PartialObjectMeta;
use kube::runtime::WatchStreamExt;
use kube::runtime::watcher::{self, Event};

use crate::workload::{OwnerLookup, OwnerMeta};

type Key = (String, String, String);

/// Owner objects by (namespace, kind, name).
#[derive(Default)]
pub struct OwnerCache {
    owners: RwLock<HashMap<Key, OwnerMeta>>,
    /// Kinds whose watch has listed at least once.
    listed: RwLock<HashSet<&'static str>>,
}

impl OwnerCache {
    pub fn upsert(&self, namespace: &str, meta: OwnerMeta) {
        let key = (namespace.to_string(), meta.kind.clone(), meta.name.clone());
        self.owners
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, meta);
    }

    /// Marks `kind` listed; true the first time.
    pub fn mark_listed(&self, kind: &'static str) -> bool {
        self.listed
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(kind)
    }

    pub fn remove(&self, namespace: &str, kind: &str, name: &str) {
        self.owners
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_string(), kind.to_string(), name.to_string()));
    }
}

impl OwnerLookup for OwnerCache {
    fn get(&self, namespace: &str, kind: &str, name: &str) -> Option<OwnerMeta> {
        self.owners
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), kind.to_string(), name.to_string()))
            .cloned()
    }

    fn is_watched(&self, kind: &str) -> bool {
        self.listed
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains(kind)
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

/// Feeds `cache` from a watch of `api`, `to_meta` giving each object's namespace and metadata.
async fn feed<K, F>(
    cache: Arc<OwnerCache>,
    api: Api<K>,
    kind: &'static str,
    synced: Option<Arc<AtomicUsize>>,
    to_meta: F,
) where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&K) -> OwnerMeta,
{
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .boxed();
    feed_stream(cache, stream, kind, synced, to_meta).await;
}

async fn feed_stream<K, F>(
    cache: Arc<OwnerCache>,
    mut stream: futures::stream::BoxStream<'static, Result<Event<K>, watcher::Error>>,
    kind: &'static str,
    synced: Option<Arc<AtomicUsize>>,
    to_meta: F,
) where
    K: kube::Resource + Clone + std::fmt::Debug + Send + 'static,
    F: Fn(&K) -> OwnerMeta,
{
    loop {
        match stream.try_next().await {
            Ok(Some(Event::Apply(o) | Event::InitApply(o))) => {
                cache.upsert(
                    o.meta().namespace.as_deref().unwrap_or_default(),
                    to_meta(&o),
                );
            }
            Ok(Some(Event::Delete(o))) => {
                cache.remove(
                    o.meta().namespace.as_deref().unwrap_or_default(),
                    kind,
                    o.meta().name.as_deref().unwrap_or_default(),
                );
            }
            Ok(Some(Event::InitDone)) => {
                if cache.mark_listed(kind) {
                    tracing::debug!(kind, "owner watch listed");
                    if let Some(synced) = &synced {
                        synced.fetch_add(1, Ordering::AcqRel);
                    }
                }
            }
            Ok(Some(Event::Init)) => {}
            Ok(None) => return,
            Err(e) => tracing::debug!(kind, error = %e, "owner watch error; retrying"),
        }
    }
}

/// Runs the owner watches until the process stops. KubeVirt kinds are watched through the
/// metadata API; where KubeVirt is not installed those watches just keep retrying quietly.
/// Whether the cluster serves `kubevirt.io/v1` (one discovery call at start-up).
pub async fn kubevirt_served(client: &kube::Client) -> bool {
    let served = client
        .list_api_group_resources("kubevirt.io/v1")
        .await
        .is_ok();
    tracing::info!(served, "KubeVirt API (kubevirt.io/v1)");
    served
}

/// `synced` gains one per watch at its first list: the four built-in kinds, and the two
/// KubeVirt kinds when `kubevirt` says the cluster serves them.
pub async fn run_owner_watches(
    cache: Arc<OwnerCache>,
    client: kube::Client,
    synced: Arc<AtomicUsize>,
    kubevirt_served: bool,
) {
    let kubevirt =
        |kind: &str| ApiResource::from_gvk(&GroupVersionKind::gvk("kubevirt.io", "v1", kind));
    let vmi = kubevirt("VirtualMachineInstance");
    let vm = kubevirt("VirtualMachine");
    tokio::join!(
        feed(
            cache.clone(),
            Api::<ReplicaSet>::all(client.clone()),
            "ReplicaSet",
            Some(synced.clone()),
            |o: &ReplicaSet| {
                meta_of(
                    &o.metadata,
                    "apps/v1",
                    "ReplicaSet",
                    o.spec.as_ref().and_then(|s| s.replicas),
                )
            }
        ),
        feed(
            cache.clone(),
            Api::<Deployment>::all(client.clone()),
            "Deployment",
            Some(synced.clone()),
            |o: &Deployment| {
                meta_of(
                    &o.metadata,
                    "apps/v1",
                    "Deployment",
                    o.spec.as_ref().and_then(|s| s.replicas),
                )
            }
        ),
        feed(
            cache.clone(),
            Api::<StatefulSet>::all(client.clone()),
            "StatefulSet",
            Some(synced.clone()),
            |o: &StatefulSet| {
                meta_of(
                    &o.metadata,
                    "apps/v1",
                    "StatefulSet",
                    o.spec.as_ref().and_then(|s| s.replicas),
                )
            }
        ),
        feed(
            cache.clone(),
            Api::<Job>::all(client.clone()),
            "Job",
            Some(synced.clone()),
            |o: &Job| meta_of(&o.metadata, "batch/v1", "Job", None)
        ),
        feed_stream(
            cache.clone(),
            watcher::watcher(
                Api::<PartialObjectMeta<DynamicObject>>::all_with(client.clone(), &vmi),
                watcher::Config::default().any_semantic()
            )
            .default_backoff()
            .boxed(),
            "VirtualMachineInstance",
            kubevirt_served.then(|| synced.clone()),
            |o: &PartialObjectMeta<DynamicObject>| meta_of(
                &o.metadata,
                "kubevirt.io/v1",
                "VirtualMachineInstance",
                None
            )
        ),
        feed_stream(
            cache,
            watcher::watcher(
                Api::<PartialObjectMeta<DynamicObject>>::all_with(client, &vm),
                watcher::Config::default().any_semantic()
            )
            .default_backoff()
            .boxed(),
            "VirtualMachine",
            kubevirt_served.then(|| synced.clone()),
            |o: &PartialObjectMeta<DynamicObject>| meta_of(
                &o.metadata,
                "kubevirt.io/v1",
                "VirtualMachine",
                None
            )
        ),
    );
}
