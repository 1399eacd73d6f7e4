//! Reconcilers, one file each: read → compile/validate (pure) → apply → status. Both write
//! status the same way: conditions built by [`crate::api::conditions::set_condition`], the
//! status written by server-side apply through [`apply_status`].

pub mod scheduling_profile;
pub mod sticky_binding;

use kube::Resource;
use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;

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
    crate::k8s::budget::get().status.take().await;
    let patch = serde_json::json!({
        "apiVersion": K::api_version(&()),
        "kind": K::kind(&()),
        "status": status,
    });
    api.patch_status(
        name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&patch),
    )
    .await
}
