//! Binding conditions (DRADeviceBindingConditions, beta and on in 1.37): a device may need
//! preparing (attached over the fabric, flashed) before a pod can run with it. Its driver names
//! the conditions in the device; the allocation carries them, and the driver reports them in
//! the claim's `status.devices`. PreBind waits until every one is true, or one of the failure
//! conditions is, at most `bindingTimeout` (600 s, upstream's default) after the allocation;
//! Filter no longer offers a node whose claim failed or timed out, so that PostFilter may
//! deallocate it.

use std::time::Duration;

use k8s_openapi::api::resource::v1::{AllocatedDeviceStatus, ResourceClaim};
use tokio::time::Instant;

use super::claims;
use crate::scheduler::informers::devices::DeviceIndex;

/// How long a claim's devices may take to meet their binding conditions (upstream's
/// bindingTimeout default).
pub const BINDING_TIMEOUT: Duration = Duration::from_secs(600);

/// Whether any device of the claim's allocation has binding conditions.
pub fn has_binding_conditions(claim: &ResourceClaim) -> bool {
    results(claim).any(|r| r.binding_conditions.as_ref().is_some_and(|b| !b.is_empty()))
}

fn results(
    claim: &ResourceClaim,
) -> impl Iterator<Item = &k8s_openapi::api::resource::v1::DeviceRequestAllocationResult> {
    claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref())
        .into_iter()
        .flatten()
}

/// Whether the claim's devices are ready (upstream's isClaimReadyForBinding): every binding
/// condition true, and no failure condition true (the error says which failed). A claim
/// without binding conditions is ready; one without an allocation is not.
pub fn ready_for_binding(claim: &ResourceClaim) -> Result<bool, String> {
    if !claims::allocated(claim) {
        return Ok(false);
    }
    for r in results(claim) {
        let Some(wanted) = r.binding_conditions.as_ref().filter(|b| !b.is_empty()) else {
            continue;
        };
        let status: Option<&AllocatedDeviceStatus> = claim
            .status
            .as_ref()
            .and_then(|s| s.devices.as_ref())
            .and_then(|d| {
                d.iter()
                    .find(|s| s.driver == r.driver && s.pool == r.pool && s.device == r.device)
            });
        let Some(status) = status else {
            return Ok(false);
        };
        let conditions = status.conditions.as_deref().unwrap_or_default();
        for failure in r.binding_failure_conditions.iter().flatten() {
            if let Some(c) = conditions
                .iter()
                .find(|c| c.type_ == *failure && c.status == "True")
            {
                return Err(format!(
                    "device binding failed: claim={}, reason={}, message={:?}",
                    claim.metadata.name.as_deref().unwrap_or_default(),
                    c.reason,
                    c.message
                ));
            }
        }
        let all_true = wanted.iter().all(|w| {
            conditions
                .iter()
                .any(|c| c.type_ == *w && c.status == "True")
        });
        if !all_true {
            return Ok(false);
        }
    }
    Ok(true)
}

/// Whether the claim's devices with binding conditions were allocated longer than `timeout`
/// ago (upstream's isClaimTimeout).
pub fn timed_out(claim: &ResourceClaim, timeout: Duration) -> bool {
    let Some(at) = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.allocation_timestamp.as_ref())
    else {
        return false;
    };
    let Ok(timeout) = jiff::SignedDuration::try_from(timeout) else {
        return false;
    };
    has_binding_conditions(claim)
        && at
            .0
            .checked_add(timeout)
            .is_ok_and(|deadline| deadline < jiff::Timestamp::now())
}

/// Waits until the devices of the claims `keys` (`(namespace, name)`) are ready for binding,
/// following the device index (no polling of the API), at most `timeout`.
pub async fn wait_until_ready(
    devices: &DeviceIndex,
    keys: &[(String, String)],
    timeout: Duration,
    gate: &crate::gate::WriteGate,
) -> Result<(), String> {
    // Fenced to the term: a replica that stops leading ends the wait at once (the next leader
    // binds the pod), instead of holding its binding cycle, and its session, until the timeout.
    let mut term_over = std::pin::pin!(gate.term_over());
    // A timeout too long to add to now (the args cap it far below) waits as long as it can.
    let deadline = Instant::now()
        .checked_add(timeout)
        .unwrap_or_else(|| Instant::now() + Duration::from_secs(86_400 * 365));
    let mut changed = devices.subscribe();
    loop {
        changed.borrow_and_update();
        let mut ready = true;
        {
            let index = devices.read();
            for (ns, name) in keys {
                let Some(claim) = index.claim(ns, name) else {
                    return Err(format!("claim {ns}/{name} got deleted in the meantime"));
                };
                if !ready_for_binding(claim)? {
                    if timed_out(claim, timeout) {
                        return Err(format!("device binding timeout: claim={name}"));
                    }
                    ready = false;
                }
            }
        }
        if ready {
            return Ok(());
        }
        tokio::select! {
            _ = changed.changed() => {}
            _ = tokio::time::sleep_until(deadline) => {
                return Err("device binding timeout: context deadline exceeded".into());
            }
            () = &mut term_over => {
                return Err("the term this replica led is over".into());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::resource::v1::{
        AllocationResult, DeviceAllocationResult, DeviceRequestAllocationResult,
        ResourceClaimStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};

    use super::*;

    fn claim(conditions: &[(&str, &str)], allocated_secs_ago: i64) -> ResourceClaim {
        ResourceClaim {
            metadata: kube::api::ObjectMeta {
                name: Some("gpu".into()),
                namespace: Some("ns".into()),
                ..Default::default()
            },
            spec: None,
            status: Some(ResourceClaimStatus {
                allocation: Some(AllocationResult {
                    allocation_timestamp: Some(Time(
                        jiff::Timestamp::now()
                            - jiff::SignedDuration::from_secs(allocated_secs_ago),
                    )),
                    devices: Some(DeviceAllocationResult {
                        results: Some(vec![DeviceRequestAllocationResult {
                            request: "req".into(),
                            driver: "d".into(),
                            pool: "p".into(),
                            device: "dev".into(),
                            binding_conditions: Some(vec!["Attached".into()]),
                            binding_failure_conditions: Some(vec!["AttachFailed".into()]),
                            ..Default::default()
                        }]),
                        config: None,
                    }),
                    node_selector: None,
                }),
                devices: (!conditions.is_empty()).then(|| {
                    vec![AllocatedDeviceStatus {
                        driver: "d".into(),
                        pool: "p".into(),
                        device: "dev".into(),
                        conditions: Some(
                            conditions
                                .iter()
                                .map(|(t, s)| Condition {
                                    type_: t.to_string(),
                                    status: s.to_string(),
                                    reason: "Driver".into(),
                                    message: "said so".into(),
                                    last_transition_time: Time(jiff::Timestamp::now()),
                                    observed_generation: None,
                                })
                                .collect(),
                        ),
                        ..Default::default()
                    }]
                }),
                reserved_for: None,
            }),
        }
    }

    #[test]
    fn a_device_is_ready_when_its_conditions_are_and_fails_on_a_failure_condition() {
        assert_eq!(
            ready_for_binding(&claim(&[], 0)),
            Ok(false),
            "no status yet"
        );
        assert_eq!(
            ready_for_binding(&claim(&[("Attached", "False")], 0)),
            Ok(false)
        );
        assert_eq!(
            ready_for_binding(&claim(&[("Attached", "True")], 0)),
            Ok(true)
        );
        assert_eq!(
            ready_for_binding(&claim(
                &[("Attached", "False"), ("AttachFailed", "True")],
                0
            )),
            Err("device binding failed: claim=gpu, reason=Driver, message=\"said so\"".into())
        );
    }

    #[test]
    fn a_claim_times_out_after_the_binding_timeout_from_its_allocation() {
        assert!(!timed_out(&claim(&[], 599), BINDING_TIMEOUT));
        assert!(timed_out(&claim(&[], 601), BINDING_TIMEOUT));
    }

    /// A wait for binding conditions ends with the term this replica led: the next leader
    /// binds the pod, and the session that stepped down is not held until the timeout.
    #[tokio::test(start_paused = true)]
    async fn a_wait_for_binding_conditions_ends_with_the_term() {
        use crate::scheduler::informers::Keeps;
        use std::sync::Arc;
        let devices = DeviceIndex::default();
        devices.apply(Arc::new(claim(&[("Attached", "False")], 0)));
        let leadership = crate::leader::Leadership::elected();
        let gate = crate::gate::WriteGate::new(leadership.clone());
        let ends = tokio::time::Instant::now() + Duration::from_secs(10);
        leadership.lead_until_for_tests(ends);
        let keys = [("ns".to_string(), "gpu".to_string())];
        let waited = wait_until_ready(&devices, &keys, Duration::from_secs(600), &gate).await;
        assert_eq!(waited, Err("the term this replica led is over".to_string()));
        assert_eq!(
            tokio::time::Instant::now(),
            ends,
            "not a moment after the term"
        );
    }
}
