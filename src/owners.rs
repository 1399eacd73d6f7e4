//! The owner metadata cache behind workload resolution: ReplicaSets, Deployments, Jobs,
//! StatefulSets and KubeVirt VirtualMachineInstances / VirtualMachines, fed by metadata-only
//! watches (typed watches where `spec.replicas` is needed), read without API calls.

use std::collections::HashMap;
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
}

impl OwnerCache {
    pub fn upsert(&self, namespace: &str, meta: OwnerMeta) {
        let key = (namespace.to_string(), meta.kind.clone(), meta.name.clone());
        self.owners
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, meta);
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
async fn feed<K, F>(cache: Arc<OwnerCache>, api: Api<K>, kind: &'static str, to_meta: F)
where
    K: kube::Resource + Clone + std::fmt::Debug + serde::de::DeserializeOwned + Send + 'static,
    F: Fn(&K) -> OwnerMeta,
{
    let stream = watcher::watcher(api, watcher::Config::default().any_semantic())
        .default_backoff()
        .boxed();
    feed_stream(cache, stream, kind, to_meta).await;
}

async fn feed_stream<K, F>(
    cache: Arc<OwnerCache>,
    mut stream: futures::stream::BoxStream<'static, Result<Event<K>, watcher::Error>>,
    kind: &'static str,
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
            Ok(Some(_)) => {}
            Ok(None) => return,
            Err(e) => tracing::debug!(kind, error = %e, "owner watch error; retrying"),
        }
    }
}

/// Runs the owner watches until the process stops. KubeVirt kinds are watched through the
/// metadata API; where KubeVirt is not installed those watches just keep retrying quietly.
pub async fn run_owner_watches(cache: Arc<OwnerCache>, client: kube::Client) {
    let kubevirt =
        |kind: &str| ApiResource::from_gvk(&GroupVersionKind::gvk("kubevirt.io", "v1", kind));
    let vmi = kubevirt("VirtualMachineInstance");
    let vm = kubevirt("VirtualMachine");
    tokio::join!(
        feed(
            cache.clone(),
            Api::<ReplicaSet>::all(client.clone()),
            "ReplicaSet",
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
            |o: &PartialObjectMeta<DynamicObject>| meta_of(
                &o.metadata,
                "kubevirt.io/v1",
                "VirtualMachine",
                None
            )
        ),
    );
}
