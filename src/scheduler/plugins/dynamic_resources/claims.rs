//! A pod's ResourceClaims as DynamicResources finds them (upstream's foreachPodResourceClaim
//! over resourceclaim.Name): a claim named in the pod, or the one kube-controller-manager made
//! from a template, named in the pod's status and owned by the pod. The errors are upstream's,
//! word for word: they are what `kubectl describe pod` shows while a pod waits.

use std::sync::Arc;

use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimConsumerReference};

use crate::k8s::pod::Pod;
use crate::scheduler::informers::devices::Devices;

/// The finalizer the scheduler puts on a claim it allocates, so that it is not deleted while
/// allocated.
pub const FINALIZER: &str = "resource.kubernetes.io/delete-protection";

fn pod_key(pod: &Pod) -> String {
    let ns = pod.metadata.namespace.as_deref().unwrap_or_default();
    let name = pod.metadata.name.as_deref().unwrap_or_default();
    if ns.is_empty() {
        name.to_string()
    } else {
        format!("{ns}/{name}")
    }
}

/// Whether the pod names any ResourceClaim.
pub fn has_claims(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .is_some_and(|c| !c.is_empty())
}

/// The pod's claims in the order the pod names them, as the scheduler sees them now, or why
/// one cannot be used (the first reason, in upstream's words). A template claim the controller
/// chose not to create is left out, as upstream.
pub fn pod_claims(devices: &Devices, pod: &Pod) -> Result<Vec<Arc<ResourceClaim>>, String> {
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let mut claims = Vec::new();
    for pc in pod
        .spec
        .as_ref()
        .and_then(|s| s.resource_claims.as_ref())
        .into_iter()
        .flatten()
    {
        let (name, must_own) = if let Some(name) = &pc.resource_claim_name {
            (name.clone(), false)
        } else if pc.resource_claim_template_name.is_some() {
            let status = pod
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .and_then(|all| all.iter().find(|s| s.name == pc.name));
            match status {
                None => {
                    return Err(format!(
                        "pod \"{}\": ResourceClaim not created yet",
                        pod_key(pod)
                    ));
                }
                Some(s) => match &s.resource_claim_name {
                    None => continue,
                    Some(name) => (name.clone(), true),
                },
            }
        } else {
            return Err(format!(
                "pod \"{}\", spec.resourceClaim {:?}: none of the supported fields are set",
                pod_key(pod),
                pc.name
            ));
        };
        let Some(claim) = devices.claim(namespace, &name) else {
            return Err(format!(
                "could not find ResourceClaim \"{namespace}/{name}\""
            ));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(format!("resourceclaim {name:?} is being deleted"));
        }
        if must_own {
            owned_by(claim, pod)?;
        }
        claims.push(claim.clone());
    }
    Ok(claims)
}

/// A template claim must be in the pod's namespace and controlled by the pod.
fn owned_by(claim: &ResourceClaim, pod: &Pod) -> Result<(), String> {
    let claim_key = format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    );
    if claim.metadata.namespace != pod.metadata.namespace {
        return Err(format!(
            "ResourceClaim {claim_key} is not in the same namespace as Pod {}",
            pod_key(pod)
        ));
    }
    let controlled = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && Some(&r.uid) == pod.metadata.uid.as_ref());
    if !controlled {
        return Err(format!(
            "ResourceClaim {claim_key} was not created for Pod {} (Pod is not owner)",
            pod_key(pod)
        ));
    }
    Ok(())
}

/// The entry a pod has in `status.reservedFor` of a claim it uses.
pub fn consumer(pod: &Pod) -> ResourceClaimConsumerReference {
    ResourceClaimConsumerReference {
        api_group: Some(String::new()),
        resource: "pods".into(),
        name: pod.metadata.name.clone().unwrap_or_default(),
        uid: pod.metadata.uid.clone().unwrap_or_default(),
    }
}

/// Whether the claim is reserved for the pod (some `reservedFor` entry has its UID).
pub fn reserved_for(claim: &ResourceClaim, pod: &Pod) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| r.iter().any(|c| c.uid == uid))
}

/// Whether the claim has an allocation.
pub fn allocated(claim: &ResourceClaim) -> bool {
    claim
        .status
        .as_ref()
        .is_some_and(|s| s.allocation.is_some())
}

/// `ns/name` of a claim, as upstream's klog.KObj prints it.
pub fn key(claim: &ResourceClaim) -> String {
    format!(
        "{}/{}",
        claim.metadata.namespace.as_deref().unwrap_or_default(),
        claim.metadata.name.as_deref().unwrap_or_default()
    )
}

/// Whether a pod uses ResourceClaims (its own, or its extended resources').
pub fn holds_claims(pod: &Pod) -> bool {
    has_claims(pod)
        || pod
            .status
            .as_ref()
            .is_some_and(|s| s.extended_resource_claim_status.is_some())
}
