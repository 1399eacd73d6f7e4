//! The storage objects the volume plugins read, fed by watches: PersistentVolumes and
//! PersistentVolumeClaims (each with kube-scheduler's assume cache over it), StorageClasses,
//! CSINodes, CSIDrivers, CSIStorageCapacities and VolumeAttachments.
//!
//! VolumeBinding's Reserve *assumes* the writes its PreBind will make (a volume's claimRef, a
//! claim's selected node), so that the next scheduling cycle does not hand the same volume to
//! another pod before the API has the write. An assumed object is served instead of the watched
//! one while the watched one keeps the resourceVersion the assumption was made from; any newer
//! version from the watch (the write coming back, or anyone else's) replaces it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, CSIStorageCapacity, StorageClass, VolumeAttachment,
};
use kube::Resource;

use super::Keeps;
use crate::k8s::volumes::{self, version_of};

/// Why an assumption could not be made.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AssumeError {
    #[error("{kind} {key:?} not found")]
    NotFound { kind: &'static str, key: String },
    #[error("{key:?} is out of sync (stored: {stored}, assume: {assumed})")]
    OutOfSync {
        key: String,
        stored: u64,
        assumed: u64,
    },
}

/// Watched objects of one kind by key, with local assumptions over them.
#[derive(Debug)]
pub struct Assumable<T> {
    kind: &'static str,
    watched: foldhash::HashMap<String, Arc<T>>,
    assumed: foldhash::HashMap<String, Arc<T>>,
}

impl<T: Resource> Assumable<T> {
    pub(crate) fn new(kind: &'static str) -> Self {
        Assumable {
            kind,
            watched: Default::default(),
            assumed: Default::default(),
        }
    }

    /// The object as the scheduler sees it: the assumed one while it is current.
    pub fn get(&self, key: &str) -> Option<&Arc<T>> {
        let watched = self.watched.get(key)?;
        match self.assumed.get(key) {
            Some(a) if version_of(a.meta()) == version_of(watched.meta()) => Some(a),
            _ => Some(watched),
        }
    }

    /// The object as the API server last sent it, assumptions aside.
    pub fn watched(&self, key: &str) -> Option<&Arc<T>> {
        self.watched.get(key)
    }

    pub(crate) fn apply(&mut self, key: String, obj: Arc<T>) {
        let version = version_of(obj.meta());
        if let Some(old) = self.watched.get(&key)
            && version_of(old.meta()) > version
        {
            return;
        }
        if self
            .assumed
            .get(&key)
            .is_some_and(|a| version_of(a.meta()) != version)
        {
            self.assumed.remove(&key);
        }
        self.watched.insert(key, obj);
    }

    pub(crate) fn delete(&mut self, key: &str) {
        self.watched.remove(key);
        self.assumed.remove(key);
    }

    pub(crate) fn reset(&mut self, objs: impl IntoIterator<Item = (String, Arc<T>)>) {
        let fresh: foldhash::HashMap<String, Arc<T>> = objs.into_iter().collect();
        self.assumed.retain(|k, a| {
            fresh
                .get(k)
                .is_some_and(|w| version_of(w.meta()) == version_of(a.meta()))
        });
        self.watched = fresh;
    }

    /// Serves `obj` for `key` until the watch sends a newer version. The watched object must
    /// exist at the version `obj` was made from.
    pub(crate) fn assume(&mut self, key: &str, obj: Arc<T>) -> Result<(), AssumeError> {
        let Some(watched) = self.watched.get(key) else {
            return Err(AssumeError::NotFound {
                kind: self.kind,
                key: key.to_string(),
            });
        };
        let (stored, assumed) = (version_of(watched.meta()), version_of(obj.meta()));
        if stored != assumed {
            return Err(AssumeError::OutOfSync {
                key: key.to_string(),
                stored,
                assumed,
            });
        }
        self.assumed.insert(key.to_string(), obj);
        Ok(())
    }

    /// Drops the assumption for `key` if it is still the one made at `version`.
    pub(crate) fn restore(&mut self, key: &str, version: u64) {
        if self
            .assumed
            .get(key)
            .is_some_and(|a| version_of(a.meta()) == version)
        {
            self.assumed.remove(key);
        }
    }

    /// Every object as the API server last sent it.
    pub fn watched_values(&self) -> impl Iterator<Item = &Arc<T>> {
        self.watched.values()
    }

    pub fn values(&self) -> impl Iterator<Item = &Arc<T>> {
        self.watched.keys().filter_map(|k| self.get(k))
    }
}

/// Everything the index holds, read under one lock.
#[derive(Debug)]
pub struct Stores {
    pub volumes: Assumable<PersistentVolume>,
    /// By `ns/name`.
    pub claims: Assumable<PersistentVolumeClaim>,
    pub classes: HashMap<String, Arc<StorageClass>>,
    pub csi_nodes: HashMap<String, Arc<CSINode>>,
    pub csi_drivers: HashMap<String, Arc<CSIDriver>>,
    /// By `ns/name`.
    pub capacities: BTreeMap<String, Arc<CSIStorageCapacity>>,
    pub attachments: HashMap<String, Arc<VolumeAttachment>>,
    /// Node name → the names of the VolumeAttachments on it.
    attachments_by_node: HashMap<String, std::collections::BTreeSet<String>>,
}

impl Default for Stores {
    fn default() -> Self {
        Stores {
            volumes: Assumable::new("persistentvolumes"),
            claims: Assumable::new("persistentvolumeclaims"),
            classes: HashMap::new(),
            csi_nodes: HashMap::new(),
            csi_drivers: HashMap::new(),
            capacities: BTreeMap::new(),
            attachments: HashMap::new(),
            attachments_by_node: HashMap::new(),
        }
    }
}

impl Stores {
    /// The claim `name` in `namespace`, as the scheduler sees it.
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<PersistentVolumeClaim>> {
        self.claims.get(&volumes::claim_key(namespace, name))
    }

    pub fn volume(&self, name: &str) -> Option<&Arc<PersistentVolume>> {
        self.volumes.get(name)
    }

    /// The volumes of a class, by name (so that equal candidates are chosen the same way
    /// every time), assumptions included.
    pub fn volumes_of_class(&self, class: &str) -> Vec<Arc<PersistentVolume>> {
        let mut found: Vec<Arc<PersistentVolume>> = self
            .volumes
            .values()
            .filter(|pv| volumes::pv_class(pv) == class)
            .cloned()
            .collect();
        found.sort_by(|a, b| a.metadata.name.cmp(&b.metadata.name));
        found
    }

    /// The VolumeAttachments on a node.
    pub fn attachments_on<'a>(
        &'a self,
        node: &'a str,
    ) -> impl Iterator<Item = &'a Arc<VolumeAttachment>> + 'a {
        self.attachments_by_node
            .get(node)
            .into_iter()
            .flatten()
            .filter_map(|name| self.attachments.get(name))
    }

    fn attach(&mut self, va: Arc<VolumeAttachment>) {
        let name = name_of(va.as_ref());
        self.detach(&name);
        self.attachments_by_node
            .entry(va.spec.node_name.clone())
            .or_default()
            .insert(name.clone());
        self.attachments.insert(name, va);
    }

    fn detach(&mut self, name: &str) {
        if let Some(old) = self.attachments.remove(name)
            && let Some(names) = self.attachments_by_node.get_mut(&old.spec.node_name)
        {
            names.remove(name);
            if names.is_empty() {
                self.attachments_by_node.remove(&old.spec.node_name);
            }
        }
    }
}

/// The storage objects, with a counter bumped on every change (PreBind waits on it for the
/// PV controller to finish a binding).
pub struct StorageIndex {
    stores: RwLock<Stores>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for StorageIndex {
    fn default() -> Self {
        StorageIndex {
            stores: RwLock::new(Stores::default()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl std::fmt::Debug for StorageIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("StorageIndex")
    }
}

impl StorageIndex {
    pub fn read(&self) -> RwLockReadGuard<'_, Stores> {
        self.stores.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Stores> {
        self.stores.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver that sees every change from now on.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n += 1);
    }

    /// Serves `pv` in place of the watched volume until the watch has a newer one.
    pub fn assume_volume(&self, pv: Arc<PersistentVolume>) -> Result<(), AssumeError> {
        let key = pv.metadata.name.clone().unwrap_or_default();
        self.write().volumes.assume(&key, pv)
    }

    /// Serves `pvc` in place of the watched claim until the watch has a newer one.
    pub fn assume_claim(&self, pvc: Arc<PersistentVolumeClaim>) -> Result<(), AssumeError> {
        let key = claim_key_of(&pvc);
        self.write().claims.assume(&key, pvc)
    }

    /// Drops the assumption made with `pv`, if it still stands.
    pub fn restore_volume(&self, pv: &PersistentVolume) {
        let key = pv.metadata.name.as_deref().unwrap_or_default();
        self.write().volumes.restore(key, version_of(&pv.metadata));
    }

    /// Drops the assumption made with `pvc`, if it still stands.
    pub fn restore_claim(&self, pvc: &PersistentVolumeClaim) {
        let key = claim_key_of(pvc);
        self.write().claims.restore(&key, version_of(&pvc.metadata));
    }

    /// Applies one watched object of any kind the index holds.
    pub fn apply<K: Stored>(&self, obj: Arc<K>) {
        K::apply(&mut self.write(), obj);
        self.bump();
    }

    pub fn delete<K: Stored>(&self, obj: &K) {
        K::delete(&mut self.write(), obj);
        self.bump();
    }

    pub fn reset<K: Stored>(&self, objs: Vec<Arc<K>>) {
        K::reset(&mut self.write(), objs);
        self.bump();
    }

    /// The object of this kind the index holds under `obj`'s key (before a change).
    pub fn current<K: Stored>(&self, obj: &K) -> Option<Arc<K>> {
        K::current(&self.read(), obj)
    }

    /// Every object of this kind the index holds.
    pub fn all<K: Stored>(&self) -> Vec<Arc<K>> {
        K::all(&self.read())
    }
}

impl<K: Stored> Keeps<K> for StorageIndex {
    fn apply(&self, obj: Arc<K>) {
        StorageIndex::apply(self, obj);
    }
    fn delete(&self, obj: &K) {
        StorageIndex::delete(self, obj);
    }
    fn reset(&self, objs: Vec<Arc<K>>) {
        StorageIndex::reset(self, objs);
    }
    fn current(&self, obj: &K) -> Option<Arc<K>> {
        StorageIndex::current(self, obj)
    }
    fn all(&self) -> Vec<Arc<K>> {
        StorageIndex::all(self)
    }
}

fn claim_key_of(pvc: &PersistentVolumeClaim) -> String {
    volumes::claim_key(
        pvc.metadata.namespace.as_deref().unwrap_or_default(),
        pvc.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn name_of<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

fn namespaced_key<K: Resource>(obj: &K) -> String {
    volumes::claim_key(
        obj.meta().namespace.as_deref().unwrap_or_default(),
        obj.meta().name.as_deref().unwrap_or_default(),
    )
}

/// A kind of object the index holds: where it goes in [`Stores`].
pub trait Stored: Resource + Sized + Send + Sync + 'static {
    fn apply(stores: &mut Stores, obj: Arc<Self>);
    fn delete(stores: &mut Stores, obj: &Self);
    fn reset(stores: &mut Stores, objs: Vec<Arc<Self>>);
    fn current(stores: &Stores, obj: &Self) -> Option<Arc<Self>>;
    /// Every object of the kind, as watched.
    fn all(stores: &Stores) -> Vec<Arc<Self>>;
}

impl Stored for PersistentVolume {
    fn apply(stores: &mut Stores, obj: Arc<Self>) {
        stores.volumes.apply(name_of(obj.as_ref()), obj);
    }
    fn delete(stores: &mut Stores, obj: &Self) {
        stores.volumes.delete(&name_of(obj));
    }
    fn reset(stores: &mut Stores, objs: Vec<Arc<Self>>) {
        stores
            .volumes
            .reset(objs.into_iter().map(|o| (name_of(o.as_ref()), o)));
    }
    fn current(stores: &Stores, obj: &Self) -> Option<Arc<Self>> {
        stores.volumes.watched(&name_of(obj)).cloned()
    }
    fn all(stores: &Stores) -> Vec<Arc<Self>> {
        stores.volumes.watched.values().cloned().collect()
    }
}

impl Stored for PersistentVolumeClaim {
    fn apply(stores: &mut Stores, obj: Arc<Self>) {
        stores.claims.apply(claim_key_of(&obj), obj);
    }
    fn delete(stores: &mut Stores, obj: &Self) {
        stores.claims.delete(&claim_key_of(obj));
    }
    fn reset(stores: &mut Stores, objs: Vec<Arc<Self>>) {
        stores
            .claims
            .reset(objs.into_iter().map(|o| (claim_key_of(&o), o)));
    }
    fn current(stores: &Stores, obj: &Self) -> Option<Arc<Self>> {
        stores.claims.watched(&claim_key_of(obj)).cloned()
    }
    fn all(stores: &Stores) -> Vec<Arc<Self>> {
        stores.claims.watched.values().cloned().collect()
    }
}

/// The kinds kept in a plain map by a key, without assumptions.
macro_rules! plain_store {
    ($kind:ty, $field:ident, $key:ident) => {
        impl Stored for $kind {
            fn apply(stores: &mut Stores, obj: Arc<Self>) {
                stores.$field.insert($key(obj.as_ref()), obj);
            }
            fn delete(stores: &mut Stores, obj: &Self) {
                stores.$field.remove(&$key(obj));
            }
            fn reset(stores: &mut Stores, objs: Vec<Arc<Self>>) {
                stores.$field = objs.into_iter().map(|o| ($key(o.as_ref()), o)).collect();
            }
            fn current(stores: &Stores, obj: &Self) -> Option<Arc<Self>> {
                stores.$field.get(&$key(obj)).cloned()
            }
            fn all(stores: &Stores) -> Vec<Arc<Self>> {
                stores.$field.values().cloned().collect()
            }
        }
    };
}

plain_store!(StorageClass, classes, name_of);
plain_store!(CSINode, csi_nodes, name_of);
plain_store!(CSIDriver, csi_drivers, name_of);
plain_store!(CSIStorageCapacity, capacities, namespaced_key);
impl Stored for VolumeAttachment {
    fn apply(stores: &mut Stores, obj: Arc<Self>) {
        stores.attach(obj);
    }
    fn delete(stores: &mut Stores, obj: &Self) {
        stores.detach(&name_of(obj));
    }
    fn reset(stores: &mut Stores, objs: Vec<Arc<Self>>) {
        stores.attachments.clear();
        stores.attachments_by_node.clear();
        for o in objs {
            stores.attach(o);
        }
    }
    fn current(stores: &Stores, obj: &Self) -> Option<Arc<Self>> {
        stores.attachments.get(&name_of(obj)).cloned()
    }
    fn all(stores: &Stores) -> Vec<Arc<Self>> {
        stores.attachments.values().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ObjectReference, PersistentVolumeSpec};
    use kube::api::ObjectMeta;

    use super::*;

    fn pv(name: &str, version: &str, claim: Option<&str>) -> Arc<PersistentVolume> {
        Arc::new(PersistentVolume {
            metadata: ObjectMeta {
                name: Some(name.into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeSpec {
                claim_ref: claim.map(|c| ObjectReference {
                    name: Some(c.into()),
                    namespace: Some("ns".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
    }

    fn claim_of(index: &StorageIndex, name: &str) -> Option<String> {
        index
            .read()
            .volume(name)
            .and_then(|v| v.spec.as_ref()?.claim_ref.as_ref()?.name.clone())
    }

    /// An assumed volume is served until the watch brings a newer version, which replaces it.
    #[test]
    fn an_assumption_stands_until_a_newer_version_is_watched() {
        let index = StorageIndex::default();
        index.apply(pv("a", "5", None));
        index
            .assume_volume(pv("a", "5", Some("c1")))
            .expect("assume");
        assert_eq!(claim_of(&index, "a").as_deref(), Some("c1"));
        // A re-list at the same version keeps it.
        index.reset(vec![pv("a", "5", None)]);
        assert_eq!(claim_of(&index, "a").as_deref(), Some("c1"));
        // The write coming back (or anyone's) replaces it.
        index.apply(pv("a", "6", Some("c2")));
        assert_eq!(claim_of(&index, "a").as_deref(), Some("c2"));
        // An older version never goes back over a newer one.
        index.apply(pv("a", "5", None));
        assert_eq!(claim_of(&index, "a").as_deref(), Some("c2"));
    }

    #[test]
    fn an_assumption_needs_the_watched_version_and_restores_only_itself() {
        let index = StorageIndex::default();
        assert!(matches!(
            index.assume_volume(pv("a", "1", Some("c"))),
            Err(AssumeError::NotFound { .. })
        ));
        index.apply(pv("a", "2", None));
        assert_eq!(
            index.assume_volume(pv("a", "1", Some("c"))),
            Err(AssumeError::OutOfSync {
                key: "a".into(),
                stored: 2,
                assumed: 1
            })
        );
        index
            .assume_volume(pv("a", "2", Some("c")))
            .expect("assume");
        index.restore_volume(&pv("a", "1", None));
        assert_eq!(claim_of(&index, "a").as_deref(), Some("c"));
        index.restore_volume(&pv("a", "2", None));
        assert_eq!(claim_of(&index, "a"), None);
    }

    #[test]
    fn volumes_of_a_class_come_by_name_with_assumptions() {
        let index = StorageIndex::default();
        index.apply(pv("b", "1", None));
        index.apply(pv("a", "1", None));
        index
            .assume_volume(pv("b", "1", Some("c")))
            .expect("assume");
        let names: Vec<_> = index
            .read()
            .volumes_of_class("")
            .iter()
            .map(|v| v.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(claim_of(&index, "b").as_deref(), Some("c"));
    }

    #[test]
    fn attachments_are_found_by_their_node_as_they_move_and_go() {
        use k8s_openapi::api::storage::v1::VolumeAttachmentSpec;
        let va = |name: &str, node: &str| {
            Arc::new(VolumeAttachment {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    ..Default::default()
                },
                spec: VolumeAttachmentSpec {
                    node_name: node.into(),
                    attacher: "csi.example.com".into(),
                    ..Default::default()
                },
                status: None,
            })
        };
        let index = StorageIndex::default();
        let on = |node: &str| -> Vec<String> {
            index
                .read()
                .attachments_on(node)
                .map(|a| a.metadata.name.clone().unwrap_or_default())
                .collect()
        };
        index.apply(va("a", "n1"));
        index.apply(va("b", "n1"));
        assert_eq!(on("n1"), ["a", "b"]);
        index.apply(va("a", "n2"));
        assert_eq!(
            (on("n1"), on("n2")),
            (vec!["b".to_string()], vec!["a".to_string()])
        );
        index.delete(va("b", "n1").as_ref());
        index.reset(vec![va("c", "n3")]);
        assert!(on("n1").is_empty() && on("n2").is_empty());
        assert_eq!(on("n3"), ["c"]);
    }
}
