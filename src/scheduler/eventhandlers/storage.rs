//! The watches of storage and device objects: each change goes into its index (the
//! [`StorageIndex`], the [`DeviceIndex`]) and, as a cluster event, to the queue (a volume bound,
//! a class added, a CSINode's limit raised, a ResourceSlice published, a claim deallocated may
//! make a rejected pod schedulable).

use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment,
};
use kube::api::Api;
use serde::de::DeserializeOwned;

use crate::k8s::volumes::version_of;
use crate::scheduler::Scheduler;
use crate::scheduler::framework::events::{ActionType, ClusterEvent, ClusterEvents, StorageObject};
use crate::scheduler::framework::needs::{DRA_PLUGINS, VOLUME_PLUGINS};
use crate::scheduler::informers::Keeps;
use crate::scheduler::informers::devices::DeviceIndex;
use crate::scheduler::informers::storage::StorageIndex;
use crate::watch::{self, Index, Readiness};

/// Feeds watched objects into an index and their changes to the queue.
pub struct Feed<I> {
    pub index: Arc<I>,
    pub events: Arc<dyn ClusterEvents>,
}

impl<I> Feed<I> {
    fn tell<K: StorageObject>(&self, action: ActionType, old: Option<Arc<K>>, new: Option<Arc<K>>) {
        self.events.on_event(
            ClusterEvent::new(K::RESOURCE, action),
            old.map(K::wrap),
            new.map(K::wrap),
        );
    }
}

fn key_of<K: kube::Resource>(obj: &K) -> (Option<String>, Option<String>) {
    (obj.meta().namespace.clone(), obj.meta().name.clone())
}

impl<K, I> Index<K> for Feed<I>
where
    K: StorageObject + kube::Resource,
    I: Keeps<K>,
{
    fn served(&self, what: &'static str, served: bool) {
        self.index.served(what, served);
    }
    fn apply(&self, obj: K) {
        let obj = Arc::new(obj);
        let old = self.index.current(obj.as_ref());
        if old
            .as_ref()
            .is_some_and(|o| version_of(o.meta()) == version_of(obj.meta()))
        {
            return;
        }
        self.index.apply(obj.clone());
        let action = if old.is_some() {
            ActionType::UPDATE
        } else {
            ActionType::ADD
        };
        self.tell(action, old, Some(obj));
    }

    fn delete(&self, obj: K) {
        let old = self.index.current(&obj);
        self.index.delete(&obj);
        let old = old.unwrap_or_else(|| Arc::new(obj));
        self.tell::<K>(ActionType::DELETE, Some(old), None);
    }

    /// A re-list: what changed meanwhile is told as adds, updates and deletes.
    fn reset(&self, objs: Vec<K>) {
        let before = Keeps::<K>::all(self.index.as_ref());
        let objs: Vec<Arc<K>> = objs.into_iter().map(Arc::new).collect();
        let seen: HashSet<_> = objs.iter().map(|o| key_of(o.as_ref())).collect();
        let olds: Vec<Option<Arc<K>>> = objs
            .iter()
            .map(|o| self.index.current(o.as_ref()))
            .collect();
        self.index.reset(objs.clone());
        for (old, new) in olds.into_iter().zip(objs) {
            match old {
                None => self.tell(ActionType::ADD, None, Some(new)),
                Some(o) if version_of(o.meta()) != version_of(new.meta()) => {
                    self.tell(ActionType::UPDATE, Some(o), Some(new))
                }
                Some(_) => {}
            }
        }
        for gone in before
            .into_iter()
            .filter(|o| !seen.contains(&key_of(o.as_ref())))
        {
            self.tell::<K>(ActionType::DELETE, Some(gone), None);
        }
    }
}

fn run_one<K, I>(
    feed: Arc<Feed<I>>,
    client: kube::Client,
    what: &'static str,
    plugins: &'static [&'static str],
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static
where
    I: Keeps<K>,
    K: StorageObject
        + kube::Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let registered = readiness.register_for(what, crate::watch::Need::Plugins(plugins));
    async move {
        watch::run(Api::<K>::all(client), what, Some(registered), feed.as_ref()).await;
    }
}

/// The storage watches, registered in `readiness` now; the returned future runs them until the
/// process stops.
pub fn run_watches(
    index: Arc<StorageIndex>,
    sched: Arc<Scheduler>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let feed = Arc::new(Feed {
        index,
        events: sched.state.queue.clone(),
    });
    let v = VOLUME_PLUGINS;
    let watches = (
        run_one::<PersistentVolume, _>(
            feed.clone(),
            client.clone(),
            "persistentvolumes",
            v,
            readiness,
        ),
        run_one::<PersistentVolumeClaim, _>(
            feed.clone(),
            client.clone(),
            "persistentvolumeclaims",
            v,
            readiness,
        ),
        run_one::<StorageClass, _>(feed.clone(), client.clone(), "storageclasses", v, readiness),
        run_one::<CSINode, _>(feed.clone(), client.clone(), "csinodes", v, readiness),
        run_one::<CSIDriver, _>(feed.clone(), client.clone(), "csidrivers", v, readiness),
        run_one::<CSIStorageCapacity, _>(
            feed.clone(),
            client.clone(),
            "csistoragecapacities",
            v,
            readiness,
        ),
        run_one::<VolumeAttachment, _>(feed, client, "volumeattachments", v, readiness),
    );
    async move {
        let (a, b, c, d, e, f, g) = watches;
        tokio::join!(a, b, c, d, e, f, g);
    }
}

/// The DRA watches (ResourceSlices, DeviceClasses, ResourceClaims, DeviceTaintRules),
/// registered in `readiness` now for DynamicResources alone; the returned future runs them
/// until the process stops. Each is optional: an API server that does not serve
/// resource.k8s.io/v1 (DRA turned off) has none of them, said once, and a pod that names a
/// claim is told why it waits; a kind tether may not read holds DRA's pods back, as a failing
/// watch does.
pub fn run_device_watches(
    index: Arc<DeviceIndex>,
    sched: Arc<Scheduler>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static {
    let feed = Arc::new(Feed {
        index,
        events: sched.state.queue.clone(),
    });
    use crate::scheduler::informers::pod_groups::{WhenForbidden, watch_optional};
    let d = DRA_PLUGINS;
    let waits = WhenForbidden::Waits;
    let watches = (
        watch_optional(
            Api::<ResourceSlice>::all(client.clone()),
            "resourceslices",
            d,
            waits,
            feed.clone(),
            readiness,
        ),
        watch_optional(
            Api::<DeviceClass>::all(client.clone()),
            "deviceclasses",
            d,
            waits,
            feed.clone(),
            readiness,
        ),
        watch_optional(
            Api::<ResourceClaim>::all(client.clone()),
            "resourceclaims",
            d,
            waits,
            feed.clone(),
            readiness,
        ),
        // Served from 1.37 (resource.k8s.io/v1); 1.36 applies none. A rule tether may not
        // read could taint any device: DRA's pods wait, as for a failing watch.
        watch_optional(
            Api::<DeviceTaintRule>::all(client),
            "devicetaintrules",
            d,
            waits,
            feed,
            readiness,
        ),
    );
    async move {
        let (a, b, c, d) = watches;
        tokio::join!(a, b, c, d);
    }
}
