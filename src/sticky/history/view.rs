//! The view the plugins read: the bindings as last written (the index), with the binds
//! counted that wait to be written (or are being written) laid on top.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::pending::PendingBinds;
use super::records::new_binding;
use crate::api::{StickyBinding, StickyBindingStatus};
use crate::sticky::bindings::{BindingIndex, BindingLookup};

/// The index and the pending binds, read together.
#[derive(Clone)]
pub struct HistoryView {
    pub index: Arc<BindingIndex>,
    pub pending: Arc<PendingBinds>,
}

/// What the plugins read of a binding (its pin, counts and conditions), without the lists that
/// only the writer and a restart's reconcile read (`countedPods`, `recentBinds`): a lookup costs
/// the counts, not the whole status.
fn read_copy(binding: &StickyBinding) -> StickyBinding {
    StickyBinding {
        metadata: binding.metadata.clone(),
        spec: binding.spec.clone(),
        status: binding.status.as_ref().map(|s| StickyBindingStatus {
            latest: s.latest.clone(),
            node_count: s.node_count.clone(),
            schedule_count: s.schedule_count,
            pruned_count: s.pruned_count,
            last_schedule_time: s.last_schedule_time.clone(),
            recent_binds: Vec::new(),
            counted_pods: Vec::new(),
            counted_before: s.counted_before.clone(),
            released_from: s.released_from.clone(),
            observed_generation: s.observed_generation,
            conditions: s.conditions.clone(),
        }),
    }
}

/// The bindings as the plugins read them: as last written, with the binds counted that are
/// waiting to be written (or being written) on top, so that a decision made while history
/// writes trail the binds (a burst) already knows where the workload went. What the waiting
/// binds add is kept per node as they arrive ([`super::pending::Delta`]): a lookup costs the
/// nodes, never a replay of the binds.
impl BindingLookup for HistoryView {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>> {
        let written = self.index.get(namespace, name);
        let Some(unwritten) = self
            .pending
            .unwritten(&(namespace.to_string(), name.to_string()))
        else {
            return written;
        };
        let mut binding = written
            .as_deref()
            .map(read_copy)
            .unwrap_or_else(|| new_binding(&unwritten.workload));
        let recorded = written.as_ref().and_then(|b| b.status.as_ref());
        // A status write is all or nothing: when the written status has the in-flight batch's
        // newest bind, it has the whole batch (its answer is in, its batch not yet done).
        let landed = unwritten.in_flight.newest_pod.as_ref().is_some_and(|uid| {
            recorded.is_some_and(|s| s.recent_binds.iter().any(|r| r.pod_uid == *uid))
        });
        let status = binding.status.get_or_insert_with(Default::default);
        let now = Time(jiff::Timestamp::now());
        let deltas = [
            (!landed).then_some(&unwritten.in_flight),
            Some(&unwritten.queued),
        ];
        for delta in deltas.into_iter().flatten().filter(|d| !d.is_empty()) {
            for (node, n) in &delta.node_count {
                let on_node = status.node_count.entry(node.clone()).or_insert(0);
                *on_node = (*on_node).max(0).saturating_add(*n);
            }
            status.schedule_count = status.schedule_count.max(0).saturating_add(delta.binds);
            status.latest = delta.latest.clone();
            status.last_schedule_time = Some(now.clone());
        }
        Some(Arc::new(binding))
    }
}
