//! PostFilter: when no node fits, deallocate a claim that kept the pod off a node, or delete
//! the extended resources' claim an earlier attempt left, bounded, from the scheduling thread.

use super::*;
use crate::k8s::patch::{self, Part};

/// Runs a PostFilter write from the scheduling thread (outside the runtime), bounded by
/// [`DEALLOCATION_TIMEOUT`]: the timer is made inside the runtime, which alone can make one.
pub(super) fn bounded<F: std::future::Future>(
    runtime: &tokio::runtime::Handle,
    write: F,
) -> Result<F::Output, tokio::time::error::Elapsed> {
    runtime.block_on(async { tokio::time::timeout(DEALLOCATION_TIMEOUT, write).await })
}

impl PostFilterPlugin for DynamicResources {
    fn post_filter(&self, ctx: &PostFilterContext<'_>) -> (Nomination, Status) {
        let Some(s) = ctx.state.read::<State>(STATE_KEY) else {
            return (
                Nomination::Keep,
                Status::error(format!("cannot read {STATE_KEY:?} from cycleState")),
            );
        };
        // Until 1.37 kube-scheduler said why nothing was freed, and every unschedulable pod's
        // message carried it; from 1.37 it says nothing.
        let nothing = |before_137: &str| {
            let reasons = if self.release.at_least(37) {
                Vec::new()
            } else {
                vec![before_137.to_string()]
            };
            (
                Nomination::Keep,
                Status::with_reasons(Code::Unschedulable, reasons),
            )
        };
        if s.claims.is_empty() && s.extended.is_none() {
            return nothing("no new claims to deallocate");
        }
        match self.free_one(s, ctx.pod.uid()) {
            Some(status) => (Nomination::Keep, status),
            None => nothing("still not schedulable"),
        }
    }
}

impl DynamicResources {
    /// upstream's deallocateOrDeletePodClaims: deallocates one claim that kept the pod off a
    /// node and is reserved for nobody else, or deletes the extended resources' claim an
    /// earlier attempt left; the outcome, or None when there was nothing to free.
    pub(super) fn free_one(&self, s: &State, pod_uid: &str) -> Option<Status> {
        let candidate = locks::lock(&s.unavailable).iter().find_map(|&i| {
            let claim = s.claims.get(i)?;
            let reserved = claim
                .status
                .as_ref()
                .and_then(|st| st.reserved_for.as_ref())
                .map(Vec::as_slice)
                .unwrap_or_default();
            let free = reserved.is_empty() || (reserved.len() == 1 && reserved[0].uid == pod_uid);
            free.then(|| claim.clone())
        });
        let Some(claim) = candidate else {
            return s
                .extended
                .as_ref()
                .filter(|e| e.stale())
                .map(|ext| self.delete_stale(&ext.claim));
        };
        Some(self.deallocate(&claim, "deallocation of ResourceClaim completed"))
    }

    /// Clears a claim's reservations, allocation and devices (one status write, conditional on
    /// the version read, bounded: a slow API server delays this failure, not every cycle for
    /// the client's read timeout); Unschedulable saying `done` once written.
    pub(super) fn deallocate(&self, claim: &ResourceClaim, done: &str) -> Status {
        let (Some(client), Some(runtime)) = (&self.client, &self.runtime) else {
            return Status::with_reasons(Code::Unschedulable, Vec::new());
        };
        let mut freed = claim.clone();
        if let Some(st) = freed.status.as_mut() {
            st.reserved_for = None;
            st.allocation = None;
            st.devices = None;
        }
        let api: Api<ResourceClaim> = Api::namespaced(
            client.clone(),
            freed.metadata.namespace.as_deref().unwrap_or_default(),
        );
        let name = freed.metadata.name.clone().unwrap_or_default();
        let written = bounded(
            runtime,
            self.gate.write(Write::DynamicResources, async {
                // Only the three fields cleared, conditional on the version read.
                patch::write_changes(&api, &name, claim, &freed, Part::Status).await
            }),
        );
        match written {
            Ok(Ok(Ok(_))) => Status::unschedulable(done),
            Ok(Ok(Err(e))) => Status::error(api_errors::message(&e)),
            Ok(Err(refused)) => Status::error(refused.to_string()),
            Err(_) => Status::error(format!(
                "deallocating ResourceClaim {}: no answer within {DEALLOCATION_TIMEOUT:?}",
                claims::key(claim)
            )),
        }
    }

    /// Deletes the extended resources' claim an earlier attempt made (PostFilter), bounded as
    /// a deallocation is.
    fn delete_stale(&self, claim: &ResourceClaim) -> Status {
        let (Some(client), Some(runtime)) = (&self.client, &self.runtime) else {
            return Status::with_reasons(Code::Unschedulable, Vec::new());
        };
        let done = bounded(
            runtime,
            self.gate
                .write(Write::DynamicResources, delete_claim(client, claim)),
        );
        match done {
            Ok(Ok(Ok(()))) => Status::unschedulable("deletion of ResourceClaim completed"),
            Ok(Ok(Err(e))) => Status::error(e),
            Ok(Err(refused)) => Status::error(refused.to_string()),
            Err(_) => Status::error(format!(
                "deleting ResourceClaim {}: no answer within {DEALLOCATION_TIMEOUT:?}",
                claims::key(claim)
            )),
        }
    }
}
