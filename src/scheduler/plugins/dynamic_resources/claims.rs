//! A pod's ResourceClaims as DynamicResources finds them (upstream's foreachPodResourceClaim
//! over resourceclaim.Name): a claim named in the pod, or the one kube-controller-manager made
//! from a template, named in the pod's status and owned by the pod (or, with
//! DRAWorkloadResourceClaims, by the pod's PodGroup). The errors are upstream's, word for word:
//! they are what `kubectl describe pod` shows while a pod waits.

use std::sync::Arc;

use k8s_openapi::api::core::v1::PodResourceClaim;
use k8s_openapi::api::resource::v1::{ResourceClaim, ResourceClaimConsumerReference};
use k8s_openapi::api::scheduling::v1beta1::PodGroup;

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

/// Why a pod that names claims cannot have them: the API server does not serve ResourceClaims
/// (DRA turned off in the cluster), so none can exist. None while they are served.
pub fn not_served(devices: &Devices, pod: &Pod) -> Option<String> {
    (!devices.served("resourceclaims")).then(|| {
        format!(
            "pod \"{}\" names ResourceClaims, which this API server does not serve \
             (resource.k8s.io/v1, Dynamic Resource Allocation, is off in the cluster)",
            pod_key(pod)
        )
    })
}

/// The pod's claims in the order the pod names them, as the scheduler sees them now, or why
/// one cannot be used (the first reason, in upstream's words). A template claim the controller
/// chose not to create is left out, as upstream. `accept_group`: a template claim controlled
/// by the pod's PodGroup is the pod's too (DRAWorkloadResourceClaims).
pub fn pod_claims<'p>(
    devices: &Devices,
    pod: &'p Pod,
    accept_group: bool,
) -> Result<Vec<Arc<ResourceClaim>>, ClaimProblem<'p>> {
    Ok(pod_claim_entries(devices, pod, accept_group)?
        .into_iter()
        .map(|(claim, _)| claim)
        .collect())
}

/// Why a pod's claims cannot be used yet. Worded (upstream's words) only when displayed: the
/// queueing hints ask for every pending pod on every claim event and need no words.
#[derive(Debug)]
pub enum ClaimProblem<'p> {
    NotCreatedYet(&'p Pod),
    NoSupportedField(&'p Pod, &'p str),
    NotFound(&'p str, &'p str),
    BeingDeleted(&'p str),
    NotOwned(String),
}

impl std::fmt::Display for ClaimProblem<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClaimProblem::NotCreatedYet(pod) => {
                write!(f, "pod \"{}\": ResourceClaim not created yet", pod_key(pod))
            }
            ClaimProblem::NoSupportedField(pod, entry) => write!(
                f,
                "pod \"{}\", spec.resourceClaim {entry:?}: none of the supported fields are set",
                pod_key(pod)
            ),
            ClaimProblem::NotFound(namespace, name) => {
                write!(f, "could not find ResourceClaim \"{namespace}/{name}\"")
            }
            ClaimProblem::BeingDeleted(name) => {
                write!(f, "resourceclaim {name:?} is being deleted")
            }
            ClaimProblem::NotOwned(why) => f.write_str(why),
        }
    }
}

/// [`pod_claims`], each with the pod's entry that names it.
pub fn pod_claim_entries<'p>(
    devices: &Devices,
    pod: &'p Pod,
    accept_group: bool,
) -> Result<Vec<(Arc<ResourceClaim>, &'p PodResourceClaim)>, ClaimProblem<'p>> {
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
            (name.as_str(), false)
        } else if pc.resource_claim_template_name.is_some() {
            let status = pod
                .status
                .as_ref()
                .and_then(|s| s.resource_claim_statuses.as_ref())
                .and_then(|all| all.iter().find(|s| s.name == pc.name));
            match status {
                None => return Err(ClaimProblem::NotCreatedYet(pod)),
                Some(s) => match &s.resource_claim_name {
                    None => continue,
                    Some(name) => (name.as_str(), true),
                },
            }
        } else {
            return Err(ClaimProblem::NoSupportedField(pod, &pc.name));
        };
        let Some(claim) = devices.claim(namespace, name) else {
            return Err(ClaimProblem::NotFound(namespace, name));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return Err(ClaimProblem::BeingDeleted(name));
        }
        if must_own {
            owned_by(claim, pod, accept_group).map_err(ClaimProblem::NotOwned)?;
        }
        claims.push((claim.clone(), pc));
    }
    Ok(claims)
}

/// A template claim must be in the pod's namespace and controlled by the pod or, with
/// `accept_group`, by the PodGroup the pod names (matched by kind, API group and name: a pod
/// does not know its group's UID).
fn owned_by(claim: &ResourceClaim, pod: &Pod, accept_group: bool) -> Result<(), String> {
    // Worded only when refused: the queueing hints ask this of every held pod.
    let claim_key = || {
        format!(
            "{}/{}",
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default()
        )
    };
    if claim.metadata.namespace != pod.metadata.namespace {
        return Err(format!(
            "ResourceClaim {} is not in the same namespace as Pod {}",
            claim_key(),
            pod_key(pod)
        ));
    }
    let controlled = claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|r| r.controller == Some(true) && Some(&r.uid) == pod.metadata.uid.as_ref());
    if controlled {
        return Ok(());
    }
    if let Some(group) = crate::scheduler::informers::pod_groups::group_name(pod)
        && accept_group
    {
        let by_group = claim
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|r| r.controller == Some(true))
            .is_some_and(|r| {
                r.name == group
                    && r.kind == "PodGroup"
                    && r.api_version.starts_with(SCHEDULING_GROUP_PREFIX)
            });
        if by_group {
            return Ok(());
        }
        return Err(format!(
            "ResourceClaim {} was not created for Pod {} (neither Pod nor PodGroup {group} is the owner)",
            claim_key(),
            pod_key(pod)
        ));
    }
    Err(format!(
        "ResourceClaim {} was not created for Pod {} (Pod is not owner)",
        claim_key(),
        pod_key(pod)
    ))
}

/// The API group of the Workload API, as an owner reference's apiVersion starts (the version
/// may change; the group may not).
const SCHEDULING_GROUP_PREFIX: &str = "scheduling.k8s.io/";

/// What a claim the pod names is reserved for when PreBind writes it (upstream's BindTo): the
/// pod's PodGroup when `group` (DRAWorkloadResourceClaims on, the pod's group) has an entry of
/// the same name, claim name and template name, else the pod.
pub fn bind_to(
    pod: &Pod,
    group: Option<&PodGroup>,
    entry: &PodResourceClaim,
) -> Result<ResourceClaimConsumerReference, String> {
    if entry.resource_claim_name.is_none() && entry.resource_claim_template_name.is_none() {
        return Err(format!(
            "Pod {} claim {}: {UNSUPPORTED}",
            pod_key(pod),
            entry.name
        ));
    }
    let Some(group) = group else {
        return Ok(consumer(pod));
    };
    let namespace = pod.metadata.namespace.as_deref().unwrap_or_default();
    let group_namespace = group.metadata.namespace.as_deref().unwrap_or_default();
    let group_name = group.metadata.name.as_deref().unwrap_or_default();
    match crate::scheduler::informers::pod_groups::group_name(pod) {
        None => {
            return Err(format!(
                "Pod {} does not belong to a PodGroup",
                pod_key(pod)
            ));
        }
        Some(named) if named != group_name || namespace != group_namespace => {
            return Err(format!(
                "Pod {} belongs to PodGroup {namespace}/{named}, not PodGroup {group_namespace}/{group_name}",
                pod_key(pod)
            ));
        }
        Some(_) => {}
    }
    for g in group.spec.resource_claims.iter().flatten() {
        if g.resource_claim_name.is_none() && g.resource_claim_template_name.is_none() {
            return Err(format!(
                "PodGroup {group_namespace}/{group_name} claim {}: {UNSUPPORTED}",
                g.name
            ));
        }
        if g.name == entry.name
            && g.resource_claim_name == entry.resource_claim_name
            && g.resource_claim_template_name == entry.resource_claim_template_name
        {
            return Ok(ResourceClaimConsumerReference {
                api_group: Some("scheduling.k8s.io".into()),
                resource: "podgroups".into(),
                name: group_name.to_string(),
                uid: group.metadata.uid.clone().unwrap_or_default(),
            });
        }
    }
    Ok(consumer(pod))
}

/// upstream's ErrAPIUnsupported, as its errors end.
const UNSUPPORTED: &str = "none of the supported fields are set";

/// Whether a `reservedFor` entry is a PodGroup's.
pub fn is_group_consumer(c: &ResourceClaimConsumerReference) -> bool {
    c.api_group.as_deref() == Some("scheduling.k8s.io") && c.resource == "podgroups"
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

/// Whether the claim is reserved for the pod (some `reservedFor` entry has its UID) or, with
/// `accept_group`, for the PodGroup the pod names (by API group, resource and name: a pod
/// does not know its group's UID).
pub fn reserved_for(claim: &ResourceClaim, pod: &Pod, accept_group: bool) -> bool {
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let group = crate::scheduler::informers::pod_groups::group_name(pod).filter(|_| accept_group);
    claim
        .status
        .as_ref()
        .and_then(|s| s.reserved_for.as_ref())
        .is_some_and(|r| {
            r.iter()
                .any(|c| c.uid == uid || group.is_some_and(|g| is_group_consumer(c) && c.name == g))
        })
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::informers::Keeps;
    use crate::scheduler::informers::devices::DeviceIndex;

    fn member() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ml", "name": "worker-0", "uid": "pod-uid"},
            "spec": {
                "containers": [],
                "schedulingGroup": {"podGroupName": "train"},
                "resourceClaims": [
                    {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
                    {"name": "own", "resourceClaimTemplateName": "one-gpu"},
                ],
            },
            "status": {"resourceClaimStatuses": [
                {"name": "gpu", "resourceClaimName": "train-gpu-x"},
                {"name": "own", "resourceClaimName": "worker-0-own-y"},
            ]},
        }))
        .expect("a pod")
    }

    /// `pod` as if it named PodGroup `group`.
    fn in_group(pod: &Pod, group: &str) -> Pod {
        let mut moved = pod.clone();
        if let Some(g) = moved
            .spec
            .as_mut()
            .and_then(|s| s.scheduling_group.as_mut())
        {
            g.pod_group_name = Some(group.into());
        }
        moved
    }

    fn claim(name: &str, owner: serde_json::Value) -> Arc<ResourceClaim> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"namespace": "ml", "name": name, "uid": format!("{name}-uid"),
                    "ownerReferences": [owner]},
                "spec": {},
            }))
            .expect("a claim"),
        )
    }

    fn group() -> PodGroup {
        serde_json::from_value(serde_json::json!({
            "metadata": {"namespace": "ml", "name": "train", "uid": "group-uid"},
            "spec": {
                "schedulingPolicy": {"gang": {"minCount": 2}},
                "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
            },
        }))
        .expect("a podgroup")
    }

    fn devices() -> Arc<DeviceIndex> {
        let devices = Arc::new(DeviceIndex::default());
        Keeps::<ResourceClaim>::reset(
            &*devices,
            vec![
                claim(
                    "train-gpu-x",
                    serde_json::json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                        "name": "train", "uid": "group-uid", "controller": true}),
                ),
                claim(
                    "worker-0-own-y",
                    serde_json::json!({"apiVersion": "v1", "kind": "Pod",
                        "name": "worker-0", "uid": "pod-uid", "controller": true}),
                ),
            ],
        );
        devices
    }

    /// An API server that does not serve ResourceClaims: a pod naming one is told so (and
    /// nothing else), until the kind is served again.
    #[test]
    fn a_pod_naming_claims_where_they_are_not_served_is_told_so() {
        let devices = devices();
        let pod = member();
        assert_eq!(not_served(&devices.read(), &pod), None);
        Keeps::<ResourceClaim>::served(&*devices, "resourceclaims", false);
        assert_eq!(
            not_served(&devices.read(), &pod).as_deref(),
            Some(
                "pod \"ml/worker-0\" names ResourceClaims, which this API server does not \
                 serve (resource.k8s.io/v1, Dynamic Resource Allocation, is off in the cluster)"
            )
        );
        // Another kind's answer says nothing of claims.
        Keeps::<ResourceClaim>::served(&*devices, "resourceclaims", true);
        Keeps::<ResourceClaim>::served(&*devices, "devicetaintrules", false);
        assert_eq!(not_served(&devices.read(), &pod), None);
    }

    #[test]
    fn a_claim_the_pods_group_controls_is_the_pods_only_with_the_gate() {
        let devices = devices();
        let pod = member();
        let off = pod_claims(&devices.read(), &pod, false)
            .expect_err("refused without the gate")
            .to_string();
        assert_eq!(
            off,
            "ResourceClaim ml/train-gpu-x was not created for Pod ml/worker-0 (Pod is not owner)"
        );
        let on = pod_claims(&devices.read(), &pod, true).expect("the group's claim is the pod's");
        assert_eq!(on.len(), 2);
        // Another group's claim is refused in upstream's words.
        let stranger = in_group(&pod, "other");
        assert_eq!(
            pod_claims(&devices.read(), &stranger, true)
                .expect_err("not its group's")
                .to_string(),
            "ResourceClaim ml/train-gpu-x was not created for Pod ml/worker-0 (neither Pod nor PodGroup other is the owner)"
        );
    }

    #[test]
    fn a_claim_the_group_declares_is_bound_to_the_group_and_others_to_the_pod() {
        let pod = member();
        let group = group();
        let entries = pod.spec.as_ref().and_then(|s| s.resource_claims.clone());
        let entries = entries.expect("entries");
        let gpu = bind_to(&pod, Some(&group), &entries[0]).expect("bound");
        assert_eq!(
            (
                gpu.api_group.as_deref(),
                gpu.resource.as_str(),
                gpu.name.as_str(),
                gpu.uid.as_str()
            ),
            (Some("scheduling.k8s.io"), "podgroups", "train", "group-uid")
        );
        let own = bind_to(&pod, Some(&group), &entries[1]).expect("bound");
        assert_eq!(
            (own.resource.as_str(), own.uid.as_str()),
            ("pods", "pod-uid")
        );
        // Without the gate (no group given) every claim is the pod's.
        assert_eq!(
            bind_to(&pod, None, &entries[0]).expect("bound").resource,
            "pods"
        );
        // A group entry naming another template is not the pod's entry.
        let mut other = group.clone();
        if let Some(c) = other.spec.resource_claims.as_mut() {
            c[0].resource_claim_template_name = Some("two-gpus".into());
        }
        assert_eq!(
            bind_to(&pod, Some(&other), &entries[0])
                .expect("bound")
                .resource,
            "pods"
        );
    }

    #[test]
    fn a_group_reservation_is_the_members_by_name_only_with_the_gate() {
        let pod = member();
        let mut c = (*claim("train-gpu-x", serde_json::json!({}))).clone();
        c.status = Some(
            serde_json::from_value(serde_json::json!({
                "reservedFor": [{"apiGroup": "scheduling.k8s.io", "resource": "podgroups",
                    "name": "train", "uid": "group-uid"}],
            }))
            .expect("a status"),
        );
        assert!(reserved_for(&c, &pod, true));
        assert!(!reserved_for(&c, &pod, false));
        let stranger = in_group(&pod, "other");
        assert!(!reserved_for(&c, &stranger, true));
    }
}
