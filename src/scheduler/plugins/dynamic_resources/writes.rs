//! The claim writes of PreBind and Unreserve, as upstream's bindClaim and its reservation
//! removal: each through the write gate its caller holds.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{
    AllocationResult, ResourceClaim, ResourceClaimConsumerReference,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::api::{Api, PostParams};

use super::claims;
use crate::gate::{Write, WriteGate};
use crate::k8s::api_errors;
use crate::k8s::patch::{self, Part};
use crate::k8s::pod::Pod;

/// How many times PreBind reads a claim again after a conflict: five attempts in all, 10 ms
/// apart, as client-go's DefaultRetry.
const CONFLICT_RETRIES: usize = 4;

/// Takes the entry of `uid` (a pod's, or a PodGroup's) off a claim's `status.reservedFor`: a
/// strategic merge patch, as upstream's, which needs no fresh copy of the claim. The caller
/// holds the write gate.
pub(super) async fn remove_reservation(
    client: &kube::Client,
    claim: &ResourceClaim,
    uid: &str,
) -> Result<ResourceClaim, kube::Error> {
    let api: Api<ResourceClaim> = Api::namespaced(
        client.clone(),
        claim.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let patch = serde_json::json!({
        "metadata": {"uid": claim.metadata.uid},
        "status": {"reservedFor": [{"$patch": "delete", "uid": uid}]},
    });
    api.patch_status(
        claim.metadata.name.as_deref().unwrap_or_default(),
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(&patch),
    )
    .await
}

/// Removes the pod from a claim's `status.reservedFor` (Unreserve's, logged, not retried).
pub(super) async fn unreserve_claim(
    client: kube::Client,
    gate: WriteGate,
    claim: Arc<ResourceClaim>,
    pod_uid: String,
) {
    let done = gate
        .write(
            Write::DynamicResources,
            remove_reservation(&client, &claim, &pod_uid),
        )
        .await;
    match done {
        Ok(Ok(_)) => {}
        Ok(Err(e)) => {
            tracing::warn!(claim = %claims::key(&claim), error = %api_errors::message(&e), "removing the pod's reservation failed")
        }
        Err(refused) => {
            tracing::info!(claim = %claims::key(&claim), %refused, "not removing the pod's reservation")
        }
    }
}

/// Writes one claim's allocation (when Reserve chose one) and its reservation for `consumer`
/// (the pod, or its PodGroup), reading the claim again after a conflict, as upstream's
/// bindClaim.
pub(super) async fn bind_claim(
    client: &kube::Client,
    cached: Arc<ResourceClaim>,
    allocation: Option<AllocationResult>,
    consumer: ResourceClaimConsumerReference,
) -> Result<ResourceClaim, String> {
    let key = claims::key(&cached);
    let api: Api<ResourceClaim> = Api::namespaced(
        client.clone(),
        cached.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let name = cached.metadata.name.clone().unwrap_or_default();
    let mut claim = (*cached).clone();
    // Each write sends only what changed from the copy read (a finalizer, the allocation, the
    // reservation), conditional on its version: what tether's copy lacks (the last-applied
    // annotation, fields of a newer API) stays on the user's claim.
    for attempt in 0..=CONFLICT_RETRIES {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            claim = api.get(&name).await.map_err(|e| {
                format!(
                    "get updated claim {key} after conflict: {}",
                    api_errors::message(&e)
                )
            })?;
        }
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("claim {key} got deleted in the meantime"));
        }
        if allocation.is_some() {
            if claims::allocated(&claim) {
                return Err(format!(
                    "claim {key} got allocated elsewhere in the meantime"
                ));
            }
            let read = claim.clone();
            let finalizers = claim.metadata.finalizers.get_or_insert_default();
            if !finalizers.iter().any(|f| f == claims::FINALIZER) {
                finalizers.push(claims::FINALIZER.into());
                match patch::write_changes(&api, &name, &read, &claim, Part::Main).await {
                    Ok(updated) => claim = updated,
                    Err(e)
                        if api_errors::conflict_or_throttled(&e) && attempt < CONFLICT_RETRIES =>
                    {
                        continue;
                    }
                    Err(e) => {
                        return Err(format!(
                            "add finalizer to claim {key}: {}",
                            api_errors::message(&e)
                        ));
                    }
                }
            }
        }
        // The status write sends what changes from here: the allocation (when Reserve chose
        // one), the reservation and the allocation's time.
        let read = claim.clone();
        let status = claim.status.get_or_insert_default();
        if let Some(allocation) = &allocation {
            status.allocation = Some(allocation.clone());
        }
        status
            .reserved_for
            .get_or_insert_default()
            .push(consumer.clone());
        match status.allocation.as_mut() {
            None => {
                return Err(format!(
                    "claim {key} got deallocated elsewhere in the meantime"
                ));
            }
            Some(a) if a.allocation_timestamp.is_none() => {
                a.allocation_timestamp = Some(Time(jiff::Timestamp::now()));
            }
            Some(_) => {}
        }
        match patch::write_changes(&api, &name, &read, &claim, Part::Status).await {
            Ok(written) => return Ok(written),
            Err(e) if api_errors::conflict_or_throttled(&e) && attempt < CONFLICT_RETRIES => {
                continue;
            }
            Err(e) => {
                let what = if allocation.is_some() {
                    "add allocation and reservation to"
                } else {
                    "add reservation to"
                };
                return Err(format!("{what} claim {key}: {}", api_errors::message(&e)));
            }
        }
    }
    Err(format!(
        "add reservation to claim {key}: too many conflicts"
    ))
}

/// Creates the claim for a pod's extended resources (the node's variant Filter made, its
/// in-memory name and UID cleared for the API server to generate).
pub(super) async fn create_claim(
    client: &kube::Client,
    claim: &ResourceClaim,
) -> Result<ResourceClaim, String> {
    let namespace = claim.metadata.namespace.clone().unwrap_or_default();
    let mut fresh = claim.clone();
    fresh.metadata.name = None;
    fresh.metadata.uid = None;
    fresh.status = None;
    let api: Api<ResourceClaim> = Api::namespaced(client.clone(), &namespace);
    let created = api.create(&PostParams::default(), &fresh).await;
    crate::scheduler::metrics::cycle::pod_claim_created(created.is_ok());
    created.map_err(|e| {
        format!(
            "create claim for extended resources {namespace}/: {}",
            api_errors::message(&e)
        )
    })
}

/// Deletes a claim the scheduler created (an extended resource's), its finalizer removed
/// first so that the deletion is not held, reading the claim again after a conflict.
pub(super) async fn delete_claim(
    client: &kube::Client,
    claim: &ResourceClaim,
) -> Result<(), String> {
    let key = claims::key(claim);
    let api: Api<ResourceClaim> = Api::namespaced(
        client.clone(),
        claim.metadata.namespace.as_deref().unwrap_or_default(),
    );
    let name = claim.metadata.name.clone().unwrap_or_default();
    let mut current = claim.clone();
    for attempt in 0..=CONFLICT_RETRIES {
        if attempt > 0 {
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            current = match api.get(&name).await {
                Ok(c) => c,
                Err(e) if api_errors::not_found(&e) => return Ok(()),
                Err(e) => {
                    return Err(format!(
                        "get resourceclaim {key}: {}",
                        api_errors::message(&e)
                    ));
                }
            };
        }
        let read = current.clone();
        let finalizers = current.metadata.finalizers.get_or_insert_default();
        let before = finalizers.len();
        finalizers.retain(|f| f != claims::FINALIZER);
        if finalizers.len() == before {
            break;
        }
        match patch::write_changes(&api, &name, &read, &current, Part::Main).await {
            Ok(_) => break,
            Err(e) if api_errors::not_found(&e) => return Ok(()),
            Err(e) if api_errors::conflict_or_throttled(&e) && attempt < CONFLICT_RETRIES => {}
            Err(e) => {
                return Err(format!(
                    "update resourceclaim {key}: {}",
                    api_errors::message(&e)
                ));
            }
        }
    }
    match api.delete(&name, &Default::default()).await {
        Ok(_) => Ok(()),
        Err(e) if api_errors::not_found(&e) => Ok(()),
        Err(e) => Err(format!(
            "delete resourceclaim {key}: {}",
            api_errors::message(&e)
        )),
    }
}

/// Records in the pod's status which claim holds its extended resources and which of the
/// claim's requests serves each container's resource.
pub(super) async fn patch_extended_status(
    client: &kube::Client,
    pod: &Pod,
    claim_name: &str,
    mappings: &[k8s_openapi::api::core::v1::ContainerExtendedResourceRequest],
) -> Result<(), String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if mappings.is_empty() {
        return Err(format!(
            "nil or empty request mappings, no update of pod {namespace}/{name} ExtendedResourceClaimStatus"
        ));
    }
    let api: Api<Pod> = Api::namespaced(client.clone(), namespace);
    let patch = serde_json::json!({
        "metadata": {"uid": pod.metadata.uid},
        "status": {"extendedResourceClaimStatus": {
            "requestMappings": mappings,
            "resourceClaimName": claim_name,
        }},
    });
    api.patch_status(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Strategic(&patch),
    )
    .await
    .map(|_| ())
    .map_err(|e| {
        format!(
            "update pod {namespace}/{name} ExtendedResourceClaimStatus: {}",
            api_errors::message(&e)
        )
    })
}
