//! Live migrations followed to their end. virt-controller reports a migration on its
//! VirtualMachineInstance (`status.migrationState`); when one has completed, and the VMI runs
//! on the target (`status.nodeName`), the target pod's bind is counted in the VM's history, so
//! `latest` (the pin, unless a person set `spec.nodeName`) follows the VM. A migration that
//! fails or is aborted is never counted: the pin stays on the source.
//!
//! VMIs are an optional kind: followed while the API server serves them, their list tried
//! again (1 s doubling to 30 s) while it answers 404. Nothing is counted before
//! this replica leads; every VMI is listed again when it does, so a migration that completed
//! while another replica led (or none) is counted then, once: the writer counts a pod once.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use futures::StreamExt;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind};

use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::leader::Leadership;
use crate::locks;
use crate::sticky::history::HistoryWriter;
use crate::sticky::kubevirt::{self, Completed};
use crate::watch::{self, Index};

/// Whether a pod's bind is recorded at all (its profile keeps history).
pub type Records = Arc<dyn Fn(&Pod) -> bool + Send + Sync>;

/// The longest wait between two tries of the VMI watch while the kind is not served.
const NOT_SERVED_MAX_DELAY: std::time::Duration = std::time::Duration::from_secs(30);

/// Counts the completed migrations the VMI watch shows.
struct Follower {
    writer: Arc<HistoryWriter>,
    client: kube::Client,
    records: Records,
    /// The migration counted (or being counted) per VMI UID, so that the VMI's later updates
    /// do not count it again. Forgotten with the VMI.
    counted: Mutex<HashMap<String, String>>,
}

impl Follower {
    /// Counts the migration `vmi` reports completed, if it has not been yet.
    fn saw(self: &Arc<Self>, vmi: &DynamicObject) {
        let Some(status) = vmi.data.get("status") else {
            return;
        };
        let Some(done) = kubevirt::completed_migration(status) else {
            return;
        };
        let uid = vmi.metadata.uid.clone().unwrap_or_default();
        let key = format!("{}/{}", done.migration_uid, done.target_pod);
        if locks::lock(&self.counted).insert(uid.clone(), key.clone()) == Some(key) {
            return;
        }
        let namespace = vmi.metadata.namespace.clone().unwrap_or_default();
        let this = self.clone();
        tokio::spawn(async move {
            if !this.count(&namespace, &done).await {
                // Tried again at the VMI's next update or the next list.
                locks::lock(&this.counted).remove(&uid);
            }
        });
    }

    /// Counts the target pod's bind; `false` when it could not be read (tried again later).
    async fn count(&self, namespace: &str, done: &Completed) -> bool {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), namespace);
        let pod = match pods.get_opt(&done.target_pod).await {
            Ok(Some(pod)) => pod,
            // Gone already (the VM stopped since): nothing runs there to count.
            Ok(None) => return true,
            Err(e) => {
                tracing::warn!(pod = %format!("{namespace}/{}", done.target_pod), error = %e, "could not read a migration's target pod; its move is counted later");
                return false;
            }
        };
        let labelled = kubevirt::migration_of(&pod);
        let same_migration = done.migration_uid.is_empty() || labelled == Some(&done.migration_uid);
        if labelled.is_none()
            || !same_migration
            || pods::node_name(&pod) != Some(done.target_node.as_str())
            || !(self.records)(&pod)
        {
            return true;
        }
        tracing::info!(pod = %pods::key(&pod), node = %done.target_node, "a live migration completed; the VM's history follows it");
        self.writer
            .record_completed_migration(&pod, &done.target_node)
            .await;
        true
    }
}

impl Index<DynamicObject> for Arc<Follower> {
    fn apply(&self, vmi: DynamicObject) {
        self.saw(&vmi);
    }

    fn delete(&self, vmi: DynamicObject) {
        locks::lock(&self.counted).remove(vmi.metadata.uid.as_deref().unwrap_or_default());
    }

    fn reset(&self, vmis: Vec<DynamicObject>) {
        let listed: std::collections::HashSet<&str> = vmis
            .iter()
            .filter_map(|v| v.metadata.uid.as_deref())
            .collect();
        locks::lock(&self.counted).retain(|uid, _| listed.contains(uid.as_str()));
        for vmi in &vmis {
            self.saw(vmi);
        }
    }
}

/// Follows live migrations for as long as the process runs, counting the completed ones once
/// `leadership` says this replica leads.
pub async fn follow(
    writer: Arc<HistoryWriter>,
    client: kube::Client,
    records: Records,
    leadership: Leadership,
) {
    leadership.wait_leading().await;
    let follower = Arc::new(Follower {
        writer,
        client: client.clone(),
        records,
        counted: Mutex::default(),
    });
    // No discovery of its own: the owner watches already ask discovery about KubeVirt, and a
    // third asker would be one more request per try on an API server in trouble. A VMI list
    // that answers 404 says the kind is not served; it is tried again with a backoff.
    let resource = ApiResource::from_gvk(&GroupVersionKind::gvk(
        "kubevirt.io",
        "v1",
        "VirtualMachineInstance",
    ));
    let mut delay = std::time::Duration::from_secs(1);
    loop {
        let api = Api::<DynamicObject>::all_with(client.clone(), &resource);
        let mut applier = watch::Applier::new(None);
        let mut events =
            std::pin::pin!(watch::watch(api, "VirtualMachineInstance migrations", None));
        let mut served = false;
        while let Some(event) = events.next().await {
            if let Err(e) = &event
                && super::owners::not_served(e)
            {
                break;
            }
            served |= event.is_ok();
            applier.apply(&follower, event);
        }
        locks::lock(&follower.counted).clear();
        if served {
            delay = std::time::Duration::from_secs(1);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(NOT_SERVED_MAX_DELAY);
    }
}
