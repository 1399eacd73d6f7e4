//! The watches of storage objects: each change goes into the [`StorageIndex`] and, as a cluster
//! event, to the queue (a volume bound, a class added, a CSINode's limit raised may make a
//! rejected pod schedulable).

use std::collections::HashSet;
use std::fmt::Debug;
use std::future::Future;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment,
};
use kube::api::Api;
use serde::de::DeserializeOwned;

use crate::k8s::volumes::version_of;
use crate::scheduler::Scheduler;
use crate::scheduler::framework::events::{ActionType, ClusterEvent, StorageObject};
use crate::scheduler::informers::storage::{StorageIndex, Stored};
use crate::watch::{self, Index, Readiness};

/// Feeds one kind of storage object into the index and its changes to the queue.
pub struct StorageFeed {
    pub index: Arc<StorageIndex>,
    pub sched: Arc<Scheduler>,
}

impl StorageFeed {
    fn tell<K: StorageObject>(&self, action: ActionType, old: Option<Arc<K>>, new: Option<Arc<K>>) {
        self.sched.queue.on_event(
            ClusterEvent::new(K::RESOURCE, action),
            old.map(K::wrap),
            new.map(K::wrap),
        );
    }
}

fn key_of<K: kube::Resource>(obj: &K) -> (Option<String>, Option<String>) {
    (obj.meta().namespace.clone(), obj.meta().name.clone())
}

impl<K> Index<K> for StorageFeed
where
    K: Stored + StorageObject + kube::Resource,
{
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
        let before = self.index.all::<K>();
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

fn run_one<K>(
    feed: Arc<StorageFeed>,
    client: kube::Client,
    what: &'static str,
    readiness: &Arc<Readiness>,
) -> impl Future<Output = ()> + Send + 'static
where
    K: Stored
        + StorageObject
        + kube::Resource<DynamicType = ()>
        + Clone
        + Debug
        + DeserializeOwned
        + Send
        + Sync
        + 'static,
{
    let registered = readiness.register_for(
        what,
        crate::watch::Need::Plugins(crate::scheduler::framework::needs::VOLUME_PLUGINS),
    );
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
    let feed = Arc::new(StorageFeed { index, sched });
    let watches = (
        run_one::<PersistentVolume>(feed.clone(), client.clone(), "persistentvolumes", readiness),
        run_one::<PersistentVolumeClaim>(
            feed.clone(),
            client.clone(),
            "persistentvolumeclaims",
            readiness,
        ),
        run_one::<StorageClass>(feed.clone(), client.clone(), "storageclasses", readiness),
        run_one::<CSINode>(feed.clone(), client.clone(), "csinodes", readiness),
        run_one::<CSIDriver>(feed.clone(), client.clone(), "csidrivers", readiness),
        run_one::<CSIStorageCapacity>(
            feed.clone(),
            client.clone(),
            "csistoragecapacities",
            readiness,
        ),
        run_one::<VolumeAttachment>(feed, client, "volumeattachments", readiness),
    );
    async move {
        let (a, b, c, d, e, f, g) = watches;
        tokio::join!(a, b, c, d, e, f, g);
    }
}
