//! PreBind: writes the volume choices made in Reserve (a volume's claimRef, a claim's selected
//! node), then waits until the PV controller has bound every claim (kube-scheduler's
//! BindPodVolumes). The wait follows the storage watches, so it ends as soon as the last
//! binding is seen, without polling the API.

use std::time::Duration;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use kube::api::Api;

use super::matching::PodVolumes;
use crate::k8s::api_errors;
use crate::k8s::patch::{self, Part};
use crate::k8s::volumes::{self, version_of};
use crate::scheduler::informers::storage::StorageIndex;

/// The text of a failed API call, as the API server words it.
/// Writes the reserved volumes and waits (at most `timeout`) for them to be bound. The error
/// is the reason the pod fails, worded as upstream's.
pub async fn bind(
    client: &kube::Client,
    storage: &StorageIndex,
    reserved: &PodVolumes,
    node: &str,
    timeout: Duration,
) -> Result<(), String> {
    let mut changes = storage.subscribe();
    // Checked: a timeout from a profile never overflows the clock.
    let now = tokio::time::Instant::now();
    let deadline = now
        .checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(86_400));
    let written = write(client, storage, reserved).await?;
    loop {
        match check(storage, &written, node) {
            Ok(true) => return Ok(()),
            Ok(false) => {}
            Err(e) => return Err(format!("binding volumes: {e}")),
        }
        if tokio::time::timeout_at(deadline, changes.changed())
            .await
            .is_err()
        {
            return Err("binding volumes: context deadline exceeded".into());
        }
    }
}

/// What the API server answered for each write.
struct Written {
    volumes: Vec<(PersistentVolume, PersistentVolumeClaim)>,
    claims: Vec<PersistentVolumeClaim>,
}

async fn write(
    client: &kube::Client,
    storage: &StorageIndex,
    reserved: &PodVolumes,
) -> Result<Written, String> {
    let mut written = Written {
        volumes: Vec::new(),
        claims: Vec::new(),
    };
    let restore_from = |pvs: usize, pvcs: usize| {
        for b in &reserved.static_bindings[pvs..] {
            storage.restore_volume(&b.volume);
        }
        for p in &reserved.provisions[pvcs..] {
            storage.restore_claim(&p.claim);
        }
    };
    // Each write sends only what Reserve changed (a claimRef, an annotation), conditional on
    // the version read, so what tether's copy lacks stays on the user's object.
    let pv_api: Api<PersistentVolume> = Api::all(client.clone());
    for (i, b) in reserved.static_bindings.iter().enumerate() {
        let name = b.volume.metadata.name.as_deref().unwrap_or_default();
        let read = storage.read().volumes.watched(name).cloned();
        let before = read.as_deref().unwrap_or(&b.volume);
        match patch::write_changes(&pv_api, name, before, &b.volume, Part::Main).await {
            Ok(pv) => written.volumes.push((pv, (*b.claim).clone())),
            Err(e) => {
                restore_from(i, 0);
                return Err(api_errors::message(&e));
            }
        }
    }
    for (i, p) in reserved.provisions.iter().enumerate() {
        let namespace = p.claim.metadata.namespace.as_deref().unwrap_or_default();
        let name = p.claim.metadata.name.as_deref().unwrap_or_default();
        let api: Api<PersistentVolumeClaim> = Api::namespaced(client.clone(), namespace);
        let key = volumes::claim_key(namespace, name);
        let read = storage.read().claims.watched(&key).cloned();
        let before = read.as_deref().unwrap_or(&p.claim);
        match patch::write_changes(&api, name, before, &p.claim, Part::Main).await {
            Ok(pvc) => written.claims.push(pvc),
            Err(e) => {
                restore_from(reserved.static_bindings.len(), i);
                return Err(api_errors::message(&e));
            }
        }
    }
    Ok(written)
}

/// Whether every write has been carried through by the PV controller (`Ok(false)`: not yet),
/// or an error when one was undone (a claimRef reset, a provisioner that gave the node up).
fn check(storage: &StorageIndex, written: &Written, node: &str) -> Result<bool, String> {
    let stores = storage.read();
    for (pv, claim) in &written.volumes {
        let name = pv.metadata.name.as_deref().unwrap_or_default();
        let Some(seen) = stores.volumes.watched(name) else {
            return Err(format!(
                "failed to check binding: persistentvolume \"{name}\" not found"
            ));
        };
        if version_of(&pv.metadata) > version_of(&seen.metadata) {
            return Ok(false);
        }
        let claim_ref = seen.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        if claim_ref
            .and_then(|r| r.uid.as_deref())
            .is_none_or(str::is_empty)
        {
            return Err(format!("ClaimRef got reset for pv \"{name}\""));
        }
        let key = volumes::claim_key(
            claim.metadata.namespace.as_deref().unwrap_or_default(),
            claim.metadata.name.as_deref().unwrap_or_default(),
        );
        let Some(claim) = stores.claims.watched(&key) else {
            return Err(format!(
                "failed to check binding: persistentvolumeclaim \"{}\" not found",
                claim.metadata.name.as_deref().unwrap_or_default()
            ));
        };
        if !volumes::fully_bound(claim) {
            return Ok(false);
        }
    }
    for pvc in &written.claims {
        let name = pvc.metadata.name.as_deref().unwrap_or_default();
        let key = volumes::claim_key(pvc.metadata.namespace.as_deref().unwrap_or_default(), name);
        let Some(seen) = stores.claims.watched(&key) else {
            return Err(format!(
                "failed to check provisioning pvc: persistentvolumeclaim \"{name}\" not found"
            ));
        };
        if version_of(&pvc.metadata) > version_of(&seen.metadata) {
            return Ok(false);
        }
        if seen
            .metadata
            .annotations
            .as_ref()
            .is_none_or(|a| a.is_empty())
        {
            return Err(format!("selectedNode annotation reset for PVC \"{name}\""));
        }
        if volumes::selected_node(seen) != Some(node) {
            return Err(format!("provisioning failed for PVC \"{name}\""));
        }
        let volume = volumes::claim_volume_name(seen);
        if volume.is_empty() || stores.volumes.watched(volume).is_none() {
            return Ok(false);
        }
        if !volumes::fully_bound(seen) {
            return Ok(false);
        }
    }
    Ok(true)
}
