//! Reconcilers, one file each: read → compile/validate (pure) → apply → status. Both write
//! status the same way: conditions built by [`crate::api::conditions::set_condition`], the
//! status written by server-side apply through [`apply_status`].

pub mod admission;
pub mod scheduling_profile;
pub mod sticky_binding;

use std::time::Duration;

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The first wait after a failed reconcile, doubling up to [`RETRY_MAX`], jittered.
pub const RETRY_INITIAL: Duration = Duration::from_millis(500);
pub const RETRY_MAX: Duration = Duration::from_secs(30);

/// The next wait after a failure, `delay` (the last wait, zero after a success) doubled up to
/// [`RETRY_MAX`], with ±25 % jitter so that objects that failed together do not retry in step.
pub fn next_retry(delay: Duration) -> Duration {
    let doubled = delay.saturating_mul(2).clamp(RETRY_INITIAL, RETRY_MAX);
    doubled.mul_f64(rand::random_range(0.75..1.25))
}

/// The field manager of tether's status writes.
pub const FIELD_MANAGER: &str = "tether";

/// Writes `status` (the fields tether sets, and only those) into the status subresource of
/// object `name` by server-side apply, as [`FIELD_MANAGER`], forced: tether owns what it
/// writes there. Waits for the status budget first.
pub async fn apply_status<K>(
    api: &Api<K>,
    name: &str,
    status: &impl Serialize,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    apply_status_of(api, name, None, status).await
}

/// [`apply_status`], only while `name` is the object of `uid` when one is given: an object
/// made again with the same name has another, and the API server refuses to change an object's
/// uid (422), so the status never lands on the newer object.
pub async fn apply_status_of<K>(
    api: &Api<K>,
    name: &str,
    uid: Option<&str>,
    status: &impl Serialize,
) -> Result<K, kube::Error>
where
    K: Resource<DynamicType = ()> + Clone + DeserializeOwned + std::fmt::Debug,
{
    crate::k8s::budget::get().status.take().await;
    let mut patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    if let Some(uid) = uid {
        patch["metadata"] = serde_json::json!({"uid": uid});
    }
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_back_off_with_jitter_up_to_the_max() {
        let mut delay = Duration::ZERO;
        let mut seen = Vec::new();
        for _ in 0..12 {
            delay = next_retry(delay);
            seen.push(delay);
        }
        assert!(seen[0] >= RETRY_INITIAL.mul_f64(0.75) && seen[0] <= RETRY_INITIAL.mul_f64(1.25));
        assert!(seen.iter().all(|d| *d <= RETRY_MAX.mul_f64(1.25)));
        assert!(seen[11] >= RETRY_MAX.mul_f64(0.75), "{seen:?}");
    }
}
