//! What DynamicResources tells preemption: which pods hold claims, whether a node's devices
//! wait to be deallocated, and the allocator a dry run uses with its removed pods' devices freed
//! (which pods hold claims is `claims::holds_claims`).

use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;

use super::allocator::{Allocated, Allocator};
use super::{State, Variant};
use crate::k8s::node_selector::Terms;
use crate::locks;
use crate::scheduler::framework::node_info::NodeInfo;

impl State {
    /// Whether devices of `node` are held by claims whose pods are gone from it (and not just
    /// taken off by a preemption dry run, `removed`): an allocated claim of the node's own devices,
    /// reserved for nobody, or only for pods not on the node. Those devices come free once
    /// kube-controller-manager deallocates the claim; preemption should not evict others
    /// meanwhile. A claim reserved for a PodGroup is in use while the group exists, pods or
    /// none: its devices do not come free by themselves.
    pub(super) fn awaits_deallocation(
        &self,
        node: &NodeInfo,
        removed: Option<&std::collections::HashSet<String>>,
    ) -> bool {
        let Some(inputs) = &self.inputs else {
            return false;
        };
        let labels = node.labels();
        let on_node: std::collections::HashSet<&str> = node.pods.iter().map(|p| p.uid()).collect();
        inputs.everyone.values().any(|c| {
            let Some(status) = c.status.as_ref() else {
                return false;
            };
            let Some(allocation) = status.allocation.as_ref() else {
                return false;
            };
            // Node-local devices only: their users can only be on this node, so a user not on it
            // is gone (a claim of devices many nodes reach may have users elsewhere).
            let here = allocation.node_selector.as_ref().is_some_and(|sel| {
                sel.node_selector_terms.iter().any(|t| {
                    t.match_fields.iter().flatten().any(|f| {
                        f.key == "metadata.name"
                            && f.values.iter().flatten().any(|v| *v == node.name)
                    })
                }) && Terms::lenient(sel).matches(&node.name, labels)
            });
            let users = status.reserved_for.as_deref().unwrap_or_default();
            here && users.iter().all(|u| {
                !super::claims::is_group_consumer(u)
                    && !on_node.contains(u.uid.as_str())
                    && removed.is_none_or(|r| !r.contains(&u.uid))
            })
        })
    }

    /// In a preemption dry run: an allocator that counts as free the devices of the claims that
    /// only `removed` pods use, or `None` when their removal frees no claim.
    pub(super) fn freed_allocator(
        &self,
        removed: &std::collections::HashSet<String>,
        variant: Option<&Arc<Variant>>,
    ) -> Result<Option<Arc<Allocator>>, String> {
        let Some(inputs) = &self.inputs else {
            return Ok(None);
        };
        let frees = |c: &ResourceClaim| {
            let users = c
                .status
                .as_ref()
                .filter(|st| st.allocation.is_some())
                .and_then(|st| st.reserved_for.as_deref())
                .unwrap_or_default();
            !users.is_empty() && users.iter().all(|u| removed.contains(&u.uid))
        };
        let mut freed: Vec<String> = inputs
            .everyone
            .values()
            .filter(|c| frees(c))
            .filter_map(|c| c.metadata.uid.clone())
            .collect();
        freed.sort();
        if freed.is_empty() {
            return Ok(None);
        }
        // A dry run asks many times with the same claims freed (each reprieve, each node whose
        // victims hold them): one allocator for each set, with its selector cache.
        let key = (variant.map(|v| Arc::as_ptr(v) as usize), freed);
        if let Some(a) = locks::lock(&self.freed).get(&key) {
            return Ok(Some(a.clone()));
        }
        let mut to_allocate = inputs.to_allocate.clone();
        to_allocate.extend(variant.map(|v| v.claim.clone()));
        let allocator = Arc::new(
            Allocator::new(
                to_allocate,
                &inputs.classes,
                inputs.slices.clone(),
                inputs.rules.clone(),
                Allocated::of(inputs.everyone.values().filter(|c| !frees(c))),
            )?
            .following(inputs.release),
        );
        Ok(Some(
            locks::lock(&self.freed)
                .entry(key)
                .or_insert(allocator)
                .clone(),
        ))
    }
}
