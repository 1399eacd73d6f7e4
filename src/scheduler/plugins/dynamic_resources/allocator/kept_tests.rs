//! The allocated devices kept from cycle to cycle ([`KeptAllocated`]) against those counted
//! afresh ([`Allocated::of`]) over the same claims, along random lines of claims allocated,
//! changed, shared, given back and deleted.

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

/// A claim `uid` (none when empty) holding `devices` (unallocated when None).
fn claim(uid: &str, devices: Option<&[Held]>) -> Arc<ResourceClaim> {
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
            name: Some(format!("claim-{uid}")),
            namespace: Some("ns".into()),
            uid: (!uid.is_empty()).then(|| uid.to_string()),
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

/// One step of a line: what happens to the claim in slot `slot` (of six).
#[derive(Clone, Debug)]
enum Step {
    /// Allocated anew (a new object), or given back (None).
    Write(usize, Option<Vec<Held>>),
    /// Deleted.
    Delete(usize),
    /// Deleted and made again under a new UID (its devices allocated anew).
    Recreate(usize, Vec<Held>),
    /// Nothing changes (the same objects asked again).
    Again,
    /// A claim without a UID twice in the same ask.
    NoUid(Vec<Held>),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        5 => (0usize..6, prop::option::of(prop::collection::vec(held(), 1..3)))
            .prop_map(|(s, h)| Step::Write(s, h)),
        2 => (0usize..6).prop_map(Step::Delete),
        1 => (0usize..6, prop::collection::vec(held(), 1..3)).prop_map(|(s, h)| Step::Recreate(s, h)),
        1 => Just(Step::Again),
        1 => prop::collection::vec(held(), 1..2).prop_map(Step::NoUid),
    ]
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn kept_devices_are_those_counted_afresh(line in prop::collection::vec(step(), 1..40)) {
        let mut kept = KeptAllocated::default();
        let mut slots: Vec<Option<Arc<ResourceClaim>>> = vec![None; 6];
        for (n, step) in line.into_iter().enumerate() {
            let mut extra = Vec::new();
            match step {
                Step::Write(s, held) => {
                    slots[s] = Some(claim(&format!("uid-{s}"), held.as_deref()));
                }
                Step::Delete(s) => slots[s] = None,
                Step::Recreate(s, held) => {
                    slots[s] = Some(claim(&format!("uid-{s}-{n}"), Some(&held)));
                }
                Step::Again => {}
                Step::NoUid(held) => {
                    extra.push(claim("", Some(&held)));
                    extra.push(claim("", Some(&held)));
                }
            }
            let claims: Vec<Arc<ResourceClaim>> =
                slots.iter().flatten().cloned().chain(extra).collect();
            let kept_now = kept.update(&claims);
            let fresh = Allocated::of(claims.iter());
            prop_assert!(kept_now.same_as(&fresh), "kept {kept_now:?}\nfresh {fresh:?}");
            for device in 0..4 {
                let id = DeviceId {
                    driver: "gpu.example.com".into(),
                    pool: "node-0".into(),
                    device: format!("gpu-{device}"),
                };
                prop_assert_eq!(kept_now.holds(&id), fresh.holds(&id));
                prop_assert_eq!(kept_now.has_shares(&id), fresh.has_shares(&id));
                let memory = |a: &Allocated| {
                    a.shares(&id).and_then(|s| s.get("memory").copied()).unwrap_or(0)
                };
                prop_assert_eq!(memory(&kept_now), memory(&fresh));
            }
        }
    }
}
