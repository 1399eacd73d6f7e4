//! The view the plugins read: the bindings as last written (the index), with the binds
//! counted that wait to be written (or are being written) laid on top.

use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use super::pending::PendingBinds;
use super::{count_bind, new_binding};
use crate::api::StickyBinding;
use crate::sticky::bindings::{BindingIndex, BindingLookup};

/// The index and the pending binds, read together.
#[derive(Clone)]
pub struct HistoryView {
    pub index: Arc<BindingIndex>,
    pub pending: Arc<PendingBinds>,
}

/// The bindings as the plugins read them: as last written, with the binds counted that are
/// waiting to be written (or being written) on top, so that a decision made while history
/// writes trail the binds (a burst) already knows where the workload went.
impl BindingLookup for HistoryView {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>> {
        let written = self.index.get(namespace, name);
        let Some((workload, unwritten)) = self
            .pending
            .unwritten(&(namespace.to_string(), name.to_string()))
        else {
            return written;
        };
        let mut binding = written
            .map(|b| StickyBinding::clone(&b))
            .unwrap_or_else(|| new_binding(&workload));
        let mut status = binding.status.take().unwrap_or_default();
        let now = Time(jiff::Timestamp::now());
        for bind in &unwritten {
            if let Some(next) = count_bind(
                &status,
                &bind.pod_uid,
                &bind.pod_name,
                &bind.node,
                now.clone(),
            ) {
                status = next;
            }
        }
        binding.status = Some(status);
        Some(Arc::new(binding))
    }
}
