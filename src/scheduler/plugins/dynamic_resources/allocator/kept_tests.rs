//! The device index's view of the claims, and the allocated devices kept from cycle to cycle
//! from its changes ([`KeptAllocated`]), against those this test works out and counts afresh
//! ([`Allocated::of`]), along random lines of claims allocated, changed, reserved, given back,
//! deleted, made again and listed again.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult, ResourceClaim,
    ResourceClaimStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::api::ObjectMeta;
use proptest::prelude::*;

use super::{Allocated, DeviceId, KeptAllocated};
use crate::scheduler::informers::Keeps;
use crate::scheduler::informers::devices::{DeviceIndex, UNWRITTEN_CLAIM_NAME};

/// One device a claim's allocation holds: its index among four, a share (with what it
/// consumes of `memory`, in Gi) or the device whole, admin access or not.
#[derive(Clone, Debug)]
struct Held {
    device: u8,
    share: Option<u8>,
    admin: bool,
}

fn held() -> impl Strategy<Value = Held> {
    (0u8..4, prop::option::of(0u8..3), prop::bool::weighted(0.1)).prop_map(
        |(device, share, admin)| Held {
            device,
            share,
            admin,
        },
    )
}

/// The claim of slot `slot` under `uid`, at `version`, holding `devices` (unallocated when
/// None); `name` overrides the slot's name.
fn claim(
    slot: usize,
    uid: &str,
    version: usize,
    devices: Option<&[Held]>,
    name: Option<&str>,
) -> Arc<ResourceClaim> {
    let results = devices.map(|held| {
        held.iter()
            .enumerate()
            .map(|(i, h)| DeviceRequestAllocationResult {
                request: format!("r{i}"),
                driver: "gpu.example.com".into(),
                pool: "node-0".into(),
                device: format!("gpu-{}", h.device),
                admin_access: h.admin.then_some(true),
                share_id: h.share.map(|_| format!("share-{uid}-{i}")),
                consumed_capacity: h.share.map(|gi| {
                    BTreeMap::from([("memory".to_string(), Quantity(format!("{gi}Gi")))])
                }),
                ..Default::default()
            })
            .collect()
    });
    Arc::new(ResourceClaim {
        metadata: ObjectMeta {
            name: Some(name.map_or_else(|| format!("claim-{slot}"), str::to_string)),
            namespace: Some("ns".into()),
            uid: Some(uid.to_string()),
            resource_version: Some(version.to_string()),
            ..Default::default()
        },
        status: Some(ResourceClaimStatus {
            allocation: results.map(|results| AllocationResult {
                devices: Some(DeviceAllocationResult {
                    results: Some(results),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        }),
        ..Default::default()
    })
}

/// One step of a line: what happens to the claim in slot `slot` (of four), as the device
/// index hears of it.
#[derive(Clone, Debug)]
enum Step {
    /// The watch brings the slot's claim allocated anew, or given back (None).
    Write(usize, Option<Vec<Held>>),
    /// The watch brings its deletion.
    Delete(usize),
    /// The watch brings a claim of the same name under a new UID (its deletion missed).
    Recreate(usize, Option<Vec<Held>>),
    /// Reserve allocates it (in flight until the watch brings an allocation).
    Reserve(usize, Vec<Held>),
    /// Unreserve gives the allocation in flight back.
    Unreserve(usize),
    /// Reserve allocates an extended resources' claim not written yet.
    Unwritten(usize, Vec<Held>),
    /// The watch lists every claim again.
    Relist,
    /// Nothing changes.
    Again,
}

fn devices() -> impl Strategy<Value = Vec<Held>> {
    prop::collection::vec(held(), 1..3)
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0usize..4, prop::option::of(devices())).prop_map(|(s, h)| Step::Write(s, h)),
        2 => (0usize..4).prop_map(Step::Delete),
        1 => (0usize..4, prop::option::of(devices())).prop_map(|(s, h)| Step::Recreate(s, h)),
        3 => (0usize..4, devices()).prop_map(|(s, h)| Step::Reserve(s, h)),
        2 => (0usize..4).prop_map(Step::Unreserve),
        1 => (0usize..2, devices()).prop_map(|(s, h)| Step::Unwritten(s, h)),
        1 => Just(Step::Relist),
        1 => Just(Step::Again),
    ]
}

/// What the scheduler should see, computed here from the test's own record: each watched
/// claim, or the allocation in flight for its UID; and every allocation in flight for a UID
/// no watched claim has.
fn expected(
    watched: &BTreeMap<usize, Arc<ResourceClaim>>,
    in_flight: &BTreeMap<String, Arc<ResourceClaim>>,
) -> Vec<Arc<ResourceClaim>> {
    let uid = |c: &ResourceClaim| c.metadata.uid.clone().unwrap_or_default();
    let mut seen = Vec::new();
    for w in watched.values() {
        seen.push(in_flight.get(&uid(w)).unwrap_or(w).clone());
    }
    for (u, c) in in_flight {
        if !watched.values().any(|w| uid(w) == *u) {
            seen.push(c.clone());
        }
    }
    seen
}

fn sorted_pointers<'a>(claims: impl Iterator<Item = &'a Arc<ResourceClaim>>) -> Vec<usize> {
    let mut p: Vec<usize> = claims.map(|c| Arc::as_ptr(c) as usize).collect();
    p.sort_unstable();
    p
}

fn same_devices(kept: &Allocated, fresh: &Allocated) -> Result<(), TestCaseError> {
    prop_assert!(kept.same_as(fresh), "kept {kept:?}\nfresh {fresh:?}");
    for device in 0..4 {
        let id = DeviceId {
            driver: "gpu.example.com".into(),
            pool: "node-0".into(),
            device: format!("gpu-{device}"),
        };
        prop_assert_eq!(kept.holds(&id), fresh.holds(&id));
        prop_assert_eq!(kept.has_shares(&id), fresh.has_shares(&id));
        let memory = |a: &Allocated| {
            a.shares(&id)
                .and_then(|s| s.get("memory").copied())
                .unwrap_or(0)
        };
        prop_assert_eq!(memory(kept), memory(fresh));
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// The device index's view of the claims, and the devices counted from its changes by a
    /// reader asking every step and one asking every third, against the claims and devices
    /// this test works out itself from what the index was told.
    #[test]
    fn kept_devices_are_those_counted_afresh(line in prop::collection::vec(step(), 1..60)) {
        let index = DeviceIndex::default();
        let (mut every, mut third) = (KeptAllocated::default(), KeptAllocated::default());
        let mut watched: BTreeMap<usize, Arc<ResourceClaim>> = BTreeMap::new();
        let mut in_flight: BTreeMap<String, Arc<ResourceClaim>> = BTreeMap::new();
        let mut uids: BTreeMap<usize, String> = BTreeMap::new();
        for (n, step) in line.into_iter().enumerate() {
            let version = n + 1;
            let uid_of = |uids: &BTreeMap<usize, String>, s: usize| {
                uids.get(&s).cloned().unwrap_or_else(|| format!("uid-{s}"))
            };
            match step {
                Step::Write(s, held) => {
                    let uid = uid_of(&uids, s);
                    let c = claim(s, &uid, version, held.as_deref(), None);
                    if held.is_some() {
                        in_flight.remove(&uid);
                    }
                    watched.insert(s, c.clone());
                    Keeps::<ResourceClaim>::apply(&index, c);
                }
                Step::Delete(s) => {
                    if let Some(c) = watched.remove(&s) {
                        in_flight.remove(&uid_of(&uids, s));
                        Keeps::<ResourceClaim>::delete(&index, &c);
                    }
                }
                Step::Recreate(s, held) => {
                    let uid = format!("uid-{s}-{n}");
                    uids.insert(s, uid.clone());
                    let c = claim(s, &uid, version, held.as_deref(), None);
                    if held.is_some() {
                        in_flight.remove(&uid);
                    }
                    watched.insert(s, c.clone());
                    Keeps::<ResourceClaim>::apply(&index, c);
                }
                Step::Reserve(s, held) => {
                    let uid = uid_of(&uids, s);
                    let c = claim(s, &uid, version, Some(&held), None);
                    in_flight.insert(uid, c.clone());
                    index.set_in_flight(c);
                }
                Step::Unreserve(s) => {
                    let uid = uid_of(&uids, s);
                    in_flight.remove(&uid);
                    index.forget_in_flight(&uid);
                }
                Step::Unwritten(s, held) => {
                    let uid = format!("pod-{s}/extended-resources");
                    let c = claim(s, &uid, version, Some(&held), Some(UNWRITTEN_CLAIM_NAME));
                    in_flight.insert(uid, c.clone());
                    index.set_in_flight(c);
                }
                Step::Relist => {
                    let listed: Vec<Arc<ResourceClaim>> = watched.values().cloned().collect();
                    let names: Vec<Option<String>> =
                        listed.iter().map(|c| c.metadata.name.clone()).collect();
                    in_flight.retain(|uid, c| {
                        let written = listed.iter().find(|w| w.metadata.uid.as_ref() == Some(uid));
                        let allocated = written
                            .is_some_and(|w| w.status.as_ref().is_some_and(|st| st.allocation.is_some()));
                        !allocated
                            && (c.metadata.name.as_deref() == Some(UNWRITTEN_CLAIM_NAME)
                                || names.contains(&c.metadata.name))
                    });
                    Keeps::<ResourceClaim>::reset(&index, listed);
                }
                Step::Again => {}
            }
            let want = expected(&watched, &in_flight);
            let fresh = Allocated::of(want.iter());
            let devices = index.read();
            prop_assert_eq!(
                sorted_pointers(devices.all_claims()),
                sorted_pointers(want.iter()),
                "the view after step {}", n
            );
            same_devices(&every.update(devices.claim_view()), &fresh)?;
            if n % 3 == 2 {
                same_devices(&third.update(devices.claim_view()), &fresh)?;
            }
        }
    }
}
