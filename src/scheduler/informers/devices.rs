//! The objects of Dynamic Resource Allocation that DynamicResources reads, fed by watches:
//! ResourceSlices (the devices drivers publish), DeviceClasses, ResourceClaims and
//! DeviceTaintRules.
//!
//! An allocation that Reserve made is *in flight* (by claim UID) until the watch brings the
//! claim with an allocation of its own (PreBind's write coming back), or until Unreserve drops
//! it: every scheduling cycle in between counts its devices as taken, as upstream's in-flight
//! allocations and assume cache do together.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, OnceLock, RwLock, RwLockReadGuard, RwLockWriteGuard};

use k8s_openapi::api::resource::v1::{DeviceClass, DeviceTaintRule, ResourceClaim, ResourceSlice};
use kube::Resource;

use super::Keeps;
use super::claim_view::{ClaimView, view_key};
use super::storage::Assumable;
use crate::k8s::volumes::{claim_key, version_of};

/// The prefix of the extended resource name every DeviceClass serves without saying so.
pub const IMPLICIT_CLASS_PREFIX: &str = "deviceclass.resource.kubernetes.io/";

/// The name of a claim the scheduler will create (an extended resources' claim before PreBind).
pub const UNWRITTEN_CLAIM_NAME: &str = "<extended-resources>";

/// The annotation on the claim the scheduler creates for a pod's extended resources.
pub const EXTENDED_CLAIM_ANNOTATION: &str = "resource.kubernetes.io/extended-resource-claim";

/// Whether an extended resource may be served by DRA (upstream's IsDRAExtendedResourceName):
/// an extended resource name, or a class's implicit one.
pub fn is_dra_extended_resource_name(name: &str) -> bool {
    crate::k8s::names::is_extended_resource_name(name) || name.starts_with(IMPLICIT_CLASS_PREFIX)
}

/// Everything the index holds, read under one lock.
#[derive(Debug)]
pub struct Devices {
    /// By name.
    pub slices: BTreeMap<String, Arc<ResourceSlice>>,
    pub classes: HashMap<String, Arc<DeviceClass>>,
    /// By `ns/name`.
    pub claims: Assumable<ResourceClaim>,
    pub taint_rules: BTreeMap<String, Arc<DeviceTaintRule>>,
    /// Claims allocated at Reserve and not yet written, by UID.
    in_flight: foldhash::HashMap<String, Arc<ResourceClaim>>,
    /// How many more pods share an in-flight allocation (members of one group cycle reusing
    /// the allocation another member made), by UID: each Unreserve takes one back, the last
    /// ends it.
    sharers: foldhash::HashMap<String, usize>,
    /// The kinds (by their watch's name, `resourceclaims`) the API server does not serve.
    not_served: BTreeSet<&'static str>,
    /// The slices indexed for the allocator, built on first use after they changed (they
    /// change seldom; every scheduling cycle of a pod with claims reads them).
    slice_index: OnceLock<Arc<SliceIndex>>,
    /// Every claim as [`Devices::all_claims`] gives it, kept as each change arrives.
    claim_view: ClaimView,
}

/// The ResourceSlices as the allocator reads them: those that name a node, by node; the others
/// (a node selector, all nodes, per device), which every node looks at; every slice of a pool,
/// by (driver, pool).
#[derive(Debug, Default)]
pub struct SliceIndex {
    pub on_node: foldhash::HashMap<String, Vec<Arc<ResourceSlice>>>,
    pub shared: Vec<Arc<ResourceSlice>>,
    pub of_pool: foldhash::HashMap<(String, String), Vec<Arc<ResourceSlice>>>,
}

impl SliceIndex {
    pub fn new(slices: impl IntoIterator<Item = Arc<ResourceSlice>>) -> Self {
        let mut index = SliceIndex::default();
        for s in slices {
            index
                .of_pool
                .entry((s.spec.driver.clone(), s.spec.pool.name.clone()))
                .or_default()
                .push(s.clone());
            match s.spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                Some(node) => index.on_node.entry(node.to_string()).or_default().push(s),
                None => index.shared.push(s),
            }
        }
        index
    }
}

impl Default for Devices {
    fn default() -> Self {
        Devices {
            slices: BTreeMap::new(),
            classes: HashMap::new(),
            claims: Assumable::new("resourceclaims"),
            taint_rules: BTreeMap::new(),
            in_flight: Default::default(),
            sharers: Default::default(),
            not_served: BTreeSet::new(),
            slice_index: OnceLock::new(),
            claim_view: ClaimView::default(),
        }
    }
}

impl Devices {
    /// The slices, indexed for the allocator (kept until a slice changes).
    pub fn slice_index(&self) -> Arc<SliceIndex> {
        self.slice_index
            .get_or_init(|| Arc::new(SliceIndex::new(self.slices.values().cloned())))
            .clone()
    }

    /// Whether the API server serves the kind whose watch is named `what` (as far as the
    /// watch has seen: served until it answered 404).
    pub fn served(&self, what: &str) -> bool {
        !self.not_served.contains(what)
    }

    /// The claim `name` in `namespace` as the API server has it (an allocation in flight is
    /// not in it: see [`Devices::in_flight`]).
    pub fn claim(&self, namespace: &str, name: &str) -> Option<&Arc<ResourceClaim>> {
        self.claims.get(&claim_key(namespace, name))
    }

    /// Every claim as the scheduler sees it, in-flight allocations included (each claim once),
    /// also those of claims the API does not have yet (an extended resource's claim between
    /// Reserve and its creation in PreBind).
    pub fn all_claims(&self) -> impl Iterator<Item = &Arc<ResourceClaim>> {
        self.claim_view.claims().values()
    }

    /// Every claim as [`Devices::all_claims`] gives it, and its recent changes.
    pub fn claim_view(&self) -> &ClaimView {
        &self.claim_view
    }

    /// The claim with this UID (under `key`, `ns/name`) as the scheduler sees it: the
    /// allocation in flight for it, else the claim as watched (or assumed) while it still has
    /// this UID, else none. The one definition the view is kept by and counted afresh by.
    fn claim_as_seen(&self, uid: &str, key: &str) -> Option<Arc<ResourceClaim>> {
        let in_flight = (!uid.is_empty())
            .then(|| self.in_flight.get(uid).cloned())
            .flatten();
        in_flight.or_else(|| {
            self.claims
                .get(key)
                .filter(|c| c.metadata.uid.as_deref().unwrap_or_default() == uid)
                .cloned()
        })
    }

    /// Brings the view's entries under `key` up to date: the claim with `uid`, and the one
    /// with the UID the watch had there before (`replaced`), when that was another.
    fn refresh_claim(&mut self, uid: &str, key: &str, replaced: Option<String>) {
        for uid in std::iter::once(uid.to_string()).chain(replaced.filter(|old| old != uid)) {
            let now = self.claim_as_seen(&uid, key);
            self.claim_view.set(view_key(&uid, key), now);
        }
    }

    /// Counts the view afresh (a re-list): every claim watched or in flight, as seen.
    fn rebuild_claim_view(&mut self) {
        let mut view = super::claim_view::ClaimMap::default();
        let in_flight = self
            .in_flight
            .iter()
            .filter(|(uid, _)| !uid.is_empty())
            .map(|(uid, c)| (uid.clone(), claim_key_of(c)));
        let watched = self.claims.values().map(|c| {
            let uid = c.metadata.uid.clone().unwrap_or_default();
            (uid, claim_key_of(c))
        });
        for (uid, key) in in_flight.chain(watched) {
            if let Some(c) = self.claim_as_seen(&uid, &key) {
                view.insert(view_key(&uid, &key), c);
            }
        }
        self.claim_view.replace(view);
    }

    /// The DeviceClass that serves an extended resource (upstream's DeviceClassResolver): the
    /// class named by the implicit `deviceclass.resource.kubernetes.io/<class>`, or the one
    /// whose `spec.extendedResourceName` is the resource; of several such classes the newest
    /// (a migration from one class to another), then the first by name.
    pub fn class_for_resource(&self, resource: &str) -> Option<&Arc<DeviceClass>> {
        if let Some(class) = resource.strip_prefix(IMPLICIT_CLASS_PREFIX) {
            return self.classes.get(class);
        }
        self.classes
            .values()
            .filter(|c| {
                c.spec
                    .as_ref()
                    .and_then(|s| s.extended_resource_name.as_deref())
                    == Some(resource)
            })
            .max_by(|a, b| {
                let created = |c: &DeviceClass| c.metadata.creation_timestamp.as_ref().map(|t| t.0);
                created(a)
                    .cmp(&created(b))
                    .then_with(|| b.metadata.name.cmp(&a.metadata.name))
            })
    }

    /// The claim the scheduler created for a pod's extended resources in an earlier attempt:
    /// annotated as such and controlled by the pod.
    pub fn extended_claim_of(
        &self,
        namespace: &str,
        pod_name: &str,
        pod_uid: &str,
    ) -> Option<&Arc<ResourceClaim>> {
        self.claims.values().find(|c| {
            c.metadata.namespace.as_deref() == Some(namespace)
                && c.metadata
                    .annotations
                    .as_ref()
                    .and_then(|a| a.get(EXTENDED_CLAIM_ANNOTATION))
                    .is_some_and(|v| v == "true")
                && c.metadata
                    .owner_references
                    .iter()
                    .flatten()
                    .any(|r| r.controller == Some(true) && r.name == pod_name && r.uid == pod_uid)
        })
    }

    /// Whether an allocation for the claim with this UID is in flight.
    pub fn in_flight(&self, uid: &str) -> bool {
        self.in_flight.contains_key(uid)
    }

    /// The claim with this UID with the allocation in flight for it, if any.
    pub fn in_flight_claim(&self, uid: &str) -> Option<&Arc<ResourceClaim>> {
        self.in_flight.get(uid)
    }

    /// Ends the in-flight allocation of `uid` and its sharers (the watch showed it written, or
    /// the claim gone).
    fn end_in_flight(&mut self, uid: &str) {
        self.in_flight.remove(uid);
        self.sharers.remove(uid);
    }
}

/// The DRA objects, with a counter bumped on every change (PreBind waits on it for binding
/// conditions).
pub struct DeviceIndex {
    devices: RwLock<Devices>,
    changed: tokio::sync::watch::Sender<u64>,
}

impl Default for DeviceIndex {
    fn default() -> Self {
        DeviceIndex {
            devices: RwLock::new(Devices::default()),
            changed: tokio::sync::watch::Sender::new(0),
        }
    }
}

impl std::fmt::Debug for DeviceIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DeviceIndex")
    }
}

impl DeviceIndex {
    pub fn read(&self) -> RwLockReadGuard<'_, Devices> {
        self.devices.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> RwLockWriteGuard<'_, Devices> {
        self.devices.write().unwrap_or_else(|e| e.into_inner())
    }

    /// A receiver that sees every change from now on.
    pub fn subscribe(&self) -> tokio::sync::watch::Receiver<u64> {
        self.changed.subscribe()
    }

    fn bump(&self) {
        self.changed.send_modify(|n| *n = n.wrapping_add(1));
    }

    /// Counts `claim` (with the allocation Reserve chose) as allocated until
    /// [`DeviceIndex::forget_in_flight`].
    pub fn set_in_flight(&self, claim: Arc<ResourceClaim>) {
        let uid = claim.metadata.uid.clone().unwrap_or_default();
        let key = claim_key_of(&claim);
        let mut devices = self.write();
        devices.in_flight.insert(uid.clone(), claim);
        devices.refresh_claim(&uid, &key, None);
        drop(devices);
        self.bump();
    }

    /// Ends the in-flight allocation of the claim with this UID (Unreserve), or takes one
    /// sharer back from it while others hold it.
    pub fn forget_in_flight(&self, uid: &str) {
        let mut devices = self.write();
        if let Some(more) = devices.sharers.get_mut(uid)
            && *more > 0
        {
            *more -= 1;
            return;
        }
        devices.sharers.remove(uid);
        if let Some(gone) = devices.in_flight.remove(uid) {
            devices.refresh_claim(uid, &claim_key_of(&gone), None);
            drop(devices);
            self.bump();
        }
    }

    /// Shares the in-flight allocation of the claim with this UID with one more pod (a member
    /// of the group cycle whose member made it): it ends only once every sharer's Unreserve
    /// (or the watch) ends it. False when none is in flight.
    pub fn share_in_flight(&self, uid: &str) -> bool {
        let mut devices = self.write();
        if !devices.in_flight.contains_key(uid) {
            return false;
        }
        *devices.sharers.entry(uid.to_string()).or_insert(0) += 1;
        true
    }
}

fn claim_key_of(claim: &ResourceClaim) -> String {
    claim_key(
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// The UID of the claim watched under `key` (empty when it has none), if one is.
fn watched_uid(devices: &Devices, key: &str) -> Option<String> {
    devices
        .claims
        .watched(key)
        .map(|c| c.metadata.uid.clone().unwrap_or_default())
}

fn name_of<K: Resource>(obj: &K) -> String {
    obj.meta().name.clone().unwrap_or_default()
}

/// A kind of object the device index holds: where it goes in [`Devices`].
pub trait DeviceStored: Resource + Sized + Send + Sync + 'static {
    fn apply(devices: &mut Devices, obj: Arc<Self>);
    fn delete(devices: &mut Devices, obj: &Self);
    fn reset(devices: &mut Devices, objs: Vec<Arc<Self>>);
    fn current(devices: &Devices, obj: &Self) -> Option<Arc<Self>>;
    fn all(devices: &Devices) -> Vec<Arc<Self>>;
}

impl<K: DeviceStored> Keeps<K> for DeviceIndex {
    fn apply(&self, obj: Arc<K>) {
        K::apply(&mut self.write(), obj);
        self.bump();
    }
    fn delete(&self, obj: &K) {
        K::delete(&mut self.write(), obj);
        self.bump();
    }
    fn reset(&self, objs: Vec<Arc<K>>) {
        K::reset(&mut self.write(), objs);
        self.bump();
    }
    fn current(&self, obj: &K) -> Option<Arc<K>> {
        K::current(&self.read(), obj)
    }
    fn all(&self) -> Vec<Arc<K>> {
        K::all(&self.read())
    }
    fn served(&self, what: &'static str, served: bool) {
        let mut devices = self.write();
        let changed = if served {
            devices.not_served.remove(what)
        } else {
            devices.not_served.insert(what)
        };
        drop(devices);
        if changed {
            self.bump();
        }
    }
}

impl DeviceStored for ResourceClaim {
    fn apply(devices: &mut Devices, obj: Arc<Self>) {
        // The watch has the claim as written: an in-flight allocation of it is over once the
        // watched claim shows an allocation of its own.
        let key = claim_key_of(&obj);
        let stale = devices
            .claims
            .watched(&key)
            .is_some_and(|old| version_of(old.meta()) > version_of(obj.meta()));
        if stale {
            return;
        }
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        let replaced = watched_uid(devices, &key);
        if obj.status.as_ref().is_some_and(|s| s.allocation.is_some()) {
            devices.end_in_flight(&uid);
        }
        devices.claims.apply(key.clone(), obj);
        devices.refresh_claim(&uid, &key, replaced);
    }
    fn delete(devices: &mut Devices, obj: &Self) {
        let key = claim_key_of(obj);
        let uid = obj.metadata.uid.clone().unwrap_or_default();
        let replaced = watched_uid(devices, &key);
        if !uid.is_empty() {
            devices.end_in_flight(&uid);
        }
        devices.claims.delete(&key);
        devices.refresh_claim(&uid, &key, replaced);
    }
    fn reset(devices: &mut Devices, objs: Vec<Arc<Self>>) {
        for o in &objs {
            if o.status.as_ref().is_some_and(|s| s.allocation.is_some())
                && let Some(uid) = o.metadata.uid.as_deref()
            {
                devices.end_in_flight(uid);
            }
        }
        // A claim deleted while the watch re-listed: its in-flight allocation ends too (one of
        // a claim the scheduler has not created yet stays).
        let listed: std::collections::HashSet<String> =
            objs.iter().map(|o| claim_key_of(o)).collect();
        devices.in_flight.retain(|_, c| {
            c.metadata.name.as_deref() == Some(UNWRITTEN_CLAIM_NAME)
                || listed.contains(&claim_key_of(c))
        });
        let Devices {
            in_flight, sharers, ..
        } = devices;
        sharers.retain(|uid, _| in_flight.contains_key(uid));
        devices
            .claims
            .reset(objs.into_iter().map(|o| (claim_key_of(&o), o)));
        devices.rebuild_claim_view();
    }
    fn current(devices: &Devices, obj: &Self) -> Option<Arc<Self>> {
        devices.claims.watched(&claim_key_of(obj)).cloned()
    }
    fn all(devices: &Devices) -> Vec<Arc<Self>> {
        devices.claims.watched_values().cloned().collect()
    }
}

/// The kinds kept in a plain map by name.
macro_rules! plain_store {
    ($kind:ty, $field:ident) => {
        impl DeviceStored for $kind {
            fn apply(devices: &mut Devices, obj: Arc<Self>) {
                let key = name_of(obj.as_ref());
                if devices
                    .$field
                    .get(&key)
                    .is_some_and(|old| version_of(old.meta()) > version_of(obj.meta()))
                {
                    return;
                }
                devices.$field.insert(key, obj);
                devices.slice_index = OnceLock::new();
            }
            fn delete(devices: &mut Devices, obj: &Self) {
                devices.$field.remove(&name_of(obj));
                devices.slice_index = OnceLock::new();
            }
            fn reset(devices: &mut Devices, objs: Vec<Arc<Self>>) {
                devices.$field = objs.into_iter().map(|o| (name_of(o.as_ref()), o)).collect();
                devices.slice_index = OnceLock::new();
            }
            fn current(devices: &Devices, obj: &Self) -> Option<Arc<Self>> {
                devices.$field.get(&name_of(obj)).cloned()
            }
            fn all(devices: &Devices) -> Vec<Arc<Self>> {
                devices.$field.values().cloned().collect()
            }
        }
    };
}

plain_store!(ResourceSlice, slices);
plain_store!(DeviceClass, classes);
plain_store!(DeviceTaintRule, taint_rules);

#[cfg(test)]
mod tests {
    use k8s_openapi::api::resource::v1::{
        AllocationResult, ResourceClaimSpec, ResourceClaimStatus,
    };
    use kube::api::ObjectMeta;

    use super::*;

    #[test]
    fn the_slice_index_follows_every_slice_change() {
        let slice = |name: &str, node: &str, version: &str| {
            Arc::new(ResourceSlice {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    resource_version: Some(version.into()),
                    ..Default::default()
                },
                spec: k8s_openapi::api::resource::v1::ResourceSliceSpec {
                    driver: "gpu.example.com".into(),
                    node_name: Some(node.into()),
                    pool: k8s_openapi::api::resource::v1::ResourcePool {
                        name: node.into(),
                        generation: 1,
                        resource_slice_count: 1,
                    },
                    ..Default::default()
                },
            })
        };
        let on = |d: &Devices, node: &str| {
            let index = d.slice_index();
            let mut names: Vec<String> = index
                .on_node
                .get(node)
                .into_iter()
                .flatten()
                .filter_map(|s| s.metadata.name.clone())
                .collect();
            names.sort();
            names
        };
        let mut d = Devices::default();
        ResourceSlice::apply(&mut d, slice("a", "n1", "1"));
        assert_eq!(on(&d, "n1"), ["a"]);
        ResourceSlice::apply(&mut d, slice("b", "n1", "2"));
        assert_eq!(on(&d, "n1"), ["a", "b"]);
        ResourceSlice::apply(&mut d, slice("a", "n2", "3"));
        assert_eq!(
            (on(&d, "n1"), on(&d, "n2")),
            (vec!["b".to_string()], vec!["a".to_string()])
        );
        ResourceSlice::delete(&mut d, &slice("b", "n1", "2"));
        assert!(on(&d, "n1").is_empty());
        ResourceSlice::reset(&mut d, vec![slice("c", "n3", "4")]);
        assert_eq!((on(&d, "n2").len(), on(&d, "n3").len()), (0, 1));
    }

    fn claim(version: &str, allocated: bool) -> Arc<ResourceClaim> {
        Arc::new(ResourceClaim {
            metadata: ObjectMeta {
                name: Some("gpu".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                resource_version: Some(version.into()),
                ..Default::default()
            },
            spec: Some(ResourceClaimSpec::default()),
            status: allocated.then(|| ResourceClaimStatus {
                allocation: Some(AllocationResult::default()),
                ..Default::default()
            }),
        })
    }

    /// Whether the claim's devices count as taken, as the allocator's input reads them.
    fn allocated(index: &DeviceIndex) -> bool {
        index
            .read()
            .all_claims()
            .any(|c| c.status.as_ref().is_some_and(|s| s.allocation.is_some()))
    }

    /// upstream's ExtendedResourceCache: the implicit name, or the class naming the resource;
    /// of two, the newer, then the first by name.
    #[test]
    fn the_class_serving_an_extended_resource_is_the_newest_naming_it() {
        use k8s_openapi::api::resource::v1::DeviceClassSpec;
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
        let class = |name: &str, serves: &str, created: i64| {
            Arc::new(DeviceClass {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    creation_timestamp: Some(Time(
                        jiff::Timestamp::from_second(created).expect("a time"),
                    )),
                    ..Default::default()
                },
                spec: Some(DeviceClassSpec {
                    extended_resource_name: Some(serves.into()),
                    ..Default::default()
                }),
            })
        };
        let index = DeviceIndex::default();
        for c in [
            class("old", "example.com/gpu", 100),
            class("new-b", "example.com/gpu", 200),
            class("new-a", "example.com/gpu", 200),
            class("other", "example.com/fpga", 300),
        ] {
            Keeps::apply(&index, c);
        }
        let devices = index.read();
        let name = |r: &str| {
            devices
                .class_for_resource(r)
                .and_then(|c| c.metadata.name.clone())
        };
        assert_eq!(name("example.com/gpu").as_deref(), Some("new-a"));
        assert_eq!(
            name("deviceclass.resource.kubernetes.io/old").as_deref(),
            Some("old")
        );
        assert_eq!(name("deviceclass.resource.kubernetes.io/missing"), None);
        assert_eq!(name("example.com/nic"), None);
    }

    /// An allocation for a claim the API does not have yet (an extended resource's, between
    /// Reserve and PreBind's create) counts as taken too.
    #[test]
    fn an_unwritten_claims_allocation_counts() {
        let index = DeviceIndex::default();
        let mut c = (*claim("1", true)).clone();
        c.metadata.name = Some("<extended-resources>".into());
        c.metadata.uid = Some("pod/extended-resources".into());
        index.set_in_flight(Arc::new(c));
        assert!(allocated(&index));
        index.forget_in_flight("pod/extended-resources");
        assert!(!allocated(&index));
    }

    #[test]
    fn an_in_flight_allocation_is_seen_until_the_watch_brings_the_written_claim() {
        let index = DeviceIndex::default();
        Keeps::apply(&index, claim("1", false));
        assert!(!allocated(&index));
        index.set_in_flight(claim("1", true));
        assert!(allocated(&index), "Reserve's allocation counts at once");
        // Another update of the claim (not the allocation) keeps the in-flight one.
        Keeps::apply(&index, claim("2", false));
        assert!(
            allocated(&index),
            "an unrelated update does not free the devices"
        );
        index.forget_in_flight("u1");
        assert!(!allocated(&index), "Unreserve frees them");
        index.set_in_flight(claim("2", true));
        Keeps::apply(&index, claim("3", true));
        assert!(
            !index.read().in_flight("u1"),
            "the written allocation ends the flight"
        );
        assert!(allocated(&index));
    }

    /// An allocation shared by members of one group cycle lasts until the last sharer's
    /// Unreserve (or the watch) ends it; none in flight cannot be shared.
    #[test]
    fn a_shared_in_flight_allocation_ends_with_its_last_sharer() {
        let index = DeviceIndex::default();
        Keeps::apply(&index, claim("1", false));
        assert!(!index.share_in_flight("u1"), "nothing in flight to share");
        index.set_in_flight(claim("1", true));
        assert!(index.share_in_flight("u1"));
        index.forget_in_flight("u1");
        assert!(allocated(&index), "the other member still holds it");
        index.forget_in_flight("u1");
        assert!(!allocated(&index), "the last one frees it");
        index.set_in_flight(claim("2", true));
        assert!(index.share_in_flight("u1"));
        Keeps::apply(&index, claim("3", true));
        assert!(!index.read().in_flight("u1"), "written: the flight ends");
        index.forget_in_flight("u1");
        assert!(allocated(&index), "the written claim stays allocated");
    }
}
