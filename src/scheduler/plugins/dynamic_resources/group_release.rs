//! DynamicResources' PodGroupPostFilter: when a group cycle placed its group nowhere, free
//! what kept its members off nodes, as upstream's, before the group's preemption runs.
//!
//! 1. Each member whose PreFilter ran frees as a lone pod's PostFilter would: one claim
//!    allocated for nobody else and not available on some node, else the extended resources'
//!    claim an earlier attempt left.
//! 2. With DRAWorkloadResourceClaims, when some member freed nothing and none of the group's
//!    pods is scheduled: a claim not available on some node and reserved for nobody or only
//!    for the group is deallocated; else the group's reservation is taken off one allocated
//!    claim of the PodGroup's, which ends the group's PostFilter (the devices are taken again
//!    on the next attempt, possibly elsewhere).

use super::*;
use crate::scheduler::framework::group_post_filter::{GroupReleaseContext, GroupReleasePlugin};

impl GroupReleasePlugin for DynamicResources {
    fn release(&self, ctx: &GroupReleaseContext<'_>) -> Status {
        let members: Vec<(String, SharedState)> = locks::lock(&ctx.cycle.members).clone();
        let state_of = |uid: &str| {
            members
                .iter()
                .find(|(u, _)| u == uid)
                .and_then(|(_, s)| s.clone().downcast::<State>().ok())
        };
        let mut unreserve_group = false;
        for pod in ctx.unscheduled {
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            let Some(s) = state_of(uid) else {
                continue;
            };
            match self.free_one(&s, uid) {
                Some(status) if status.code == Code::Error => return status,
                Some(_) => {}
                None => unreserve_group = true,
            }
        }
        if unreserve_group
            && self.group_claims
            && let Some(first) = ctx.unscheduled.first()
            && ctx.scheduled == 0
        {
            let states: Vec<Arc<State>> = members
                .iter()
                .filter_map(|(_, s)| s.clone().downcast::<State>().ok())
                .collect();
            if let Some(status) = self.free_group_claim(first, &states) {
                return status;
            }
        }
        Status::unschedulable("deallocation and deletion of ResourceClaims completed")
    }
}

impl DynamicResources {
    /// Step 2 for the group `pod` names: the outcome of the one write made, or None.
    fn free_group_claim(&self, pod: &Pod, states: &[Arc<State>]) -> Option<Status> {
        let group = match self.pod_group(pod) {
            Ok(Some(group)) => group,
            Ok(None) => return None,
            Err(why) => return Some(Status::error(why)),
        };
        let key = crate::scheduler::informers::pod_groups::key(&group);
        let group_uid = group.metadata.uid.as_deref().unwrap_or_default();
        for s in states {
            let unavailable: Vec<usize> = locks::lock(&s.unavailable).iter().copied().collect();
            for claim in unavailable.into_iter().filter_map(|i| s.claims.get(i)) {
                let reserved = claim
                    .status
                    .as_ref()
                    .and_then(|st| st.reserved_for.as_deref())
                    .unwrap_or_default();
                let free =
                    reserved.is_empty() || (reserved.len() == 1 && reserved[0].uid == group_uid);
                if free {
                    return Some(
                        self.deallocate(claim, "deallocation of PodGroup ResourceClaim completed"),
                    );
                }
            }
        }
        // The group's claims reserved for it, found under the device index's lock and written
        // after it is released: the write blocks this thread on the runtime, whose claim watch
        // takes that lock to apply the write's own event (held across it, the two waited on
        // each other for good and scheduling stopped).
        let mut reserved = Vec::new();
        let devices = self.devices.read();
        for entry in group.spec.resource_claims.iter().flatten() {
            let (claim_name, must_own) = if let Some(n) = &entry.resource_claim_name {
                (n.clone(), false)
            } else if entry.resource_claim_template_name.is_some() {
                let status = group
                    .status
                    .as_ref()
                    .and_then(|st| st.resource_claim_statuses.as_ref())
                    .and_then(|all| all.iter().find(|st| st.name == entry.name));
                match status {
                    None => {
                        return Some(Status::error(format!(
                            "PodGroup {key}: ResourceClaim not created yet"
                        )));
                    }
                    Some(st) => match &st.resource_claim_name {
                        None => continue,
                        Some(n) => (n.clone(), true),
                    },
                }
            } else {
                return Some(Status::error(format!(
                    "PodGroup {key}, spec.resourceClaim {}: none of the supported fields are set",
                    entry.name
                )));
            };
            let Some(claim) = devices.claim(&key.namespace, &claim_name).cloned() else {
                return Some(Status::error(format!(
                    "resourceclaim.resource.k8s.io {claim_name:?} not found"
                )));
            };
            let controlled = claim
                .metadata
                .owner_references
                .iter()
                .flatten()
                .any(|r| r.controller == Some(true) && r.uid == group_uid);
            if must_own && !controlled {
                continue;
            }
            if claims::allocated(&claim) && claims::reserved_for(&claim, pod, true) {
                reserved.push(claim);
            }
        }
        drop(devices);
        let (Some(client), Some(runtime)) = (&self.client, &self.runtime) else {
            return None;
        };
        for claim in reserved {
            match bounded_unreserve(self, client, runtime, &claim, group_uid) {
                Ok(()) => {
                    return Some(Status::unresolvable(
                        "ResourceClaim unreserved for PodGroup",
                    ));
                }
                // Tried again on the group's next attempt.
                Err(e) => {
                    tracing::warn!(claim = %claims::key(&claim), group = %key, error = %e, "taking the PodGroup's reservation off its claim failed");
                }
            }
        }
        None
    }
}

/// Takes `uid`'s entry off the claim's `reservedFor` (a strategic merge patch, which needs no
/// fresh copy), bounded as PostFilter's other writes.
fn bounded_unreserve(
    plugin: &DynamicResources,
    client: &kube::Client,
    runtime: &tokio::runtime::Handle,
    claim: &ResourceClaim,
    uid: &str,
) -> Result<(), String> {
    let written = post_filter::bounded(
        runtime,
        plugin.gate.write(
            Write::DynamicResources,
            super::writes::remove_reservation(client, claim, uid),
        ),
    );
    match written {
        Ok(Ok(Ok(_))) => Ok(()),
        Ok(Ok(Err(e))) => Err(api_errors::message(&e)),
        Ok(Err(refused)) => Err(refused.to_string()),
        Err(_) => Err(format!("no answer within {DEALLOCATION_TIMEOUT:?}")),
    }
}
