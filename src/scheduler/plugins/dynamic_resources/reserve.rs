//! Reserve puts the node's allocation of each claim in flight (or shares one another member of
//! the group cycle made pending); Unreserve takes it back, and the pod's reservation if PreBind
//! wrote it.

use super::*;

impl ReservePlugin for DynamicResources {
    fn reserve(&self, state: &mut CycleState, _pod: &PodInfo, node_name: &str) -> Status {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return Status::success();
        };
        // The group cycle's pending allocations this pod reuses: one more sharer each (gone
        // since PreFilter: the pod waits, as for any allocation in flight).
        let mut shared = Vec::new();
        for c in &s.shared {
            let uid = c.metadata.uid.as_deref().unwrap_or_default();
            if !self.devices.share_in_flight(uid) {
                for taken in &shared {
                    let taken: &Arc<ResourceClaim> = taken;
                    self.devices
                        .forget_in_flight(taken.metadata.uid.as_deref().unwrap_or_default());
                }
                return Status::unschedulable(format!(
                    "resource claim {} is in the process of being allocated",
                    claims::key(c)
                ));
            }
            shared.push(c.clone());
        }
        let group = state.read::<GroupClaims>(GROUP_CLAIMS_KEY).cloned();
        let mut to_allocate: Vec<Arc<ResourceClaim>> =
            s.to_allocate().map(|(_, c)| c.clone()).collect();
        if s.allocator.is_none() {
            to_allocate.clear();
        }
        let variant = locks::lock(&s.extended_by_node).get(node_name).cloned();
        if to_allocate.is_empty() && variant.is_none() {
            *locks::lock(&s.reserved) = shared;
            return Status::success();
        }
        let Some(found) = locks::lock(&s.by_node).get(node_name).cloned() else {
            return Status::error("claim allocation not found for node");
        };
        let users = to_allocate.len();
        if let Some(v) = &variant {
            to_allocate.push(v.claim.clone());
        }
        if found.len() != to_allocate.len() {
            return Status::error(format!(
                "internal error, have {} allocations, {} claims to allocate, want {} claims",
                found.len(),
                to_allocate.len(),
                to_allocate.len()
            ));
        }
        let mut reserved = Vec::new();
        for (i, (claim, allocation)) in to_allocate.into_iter().zip(found).enumerate() {
            let mut c = (*claim).clone();
            let finalizers = c.metadata.finalizers.get_or_insert_default();
            if !finalizers.iter().any(|f| f == claims::FINALIZER) {
                finalizers.push(claims::FINALIZER.into());
            }
            c.status.get_or_insert_default().allocation = Some(allocation);
            let c = Arc::new(c);
            self.devices.set_in_flight(c.clone());
            if i < users {
                if let Some(group) = &group {
                    // Another member of this group cycle naming the claim reuses it.
                    locks::lock(&group.pending).insert(c.metadata.uid.clone().unwrap_or_default());
                }
                reserved.push(c);
            } else if let Some(v) = &variant {
                *locks::lock(&s.reserved_extended) = Some((c, v.mappings.clone()));
            }
        }
        reserved.extend(shared);
        *locks::lock(&s.reserved) = reserved;
        Status::success()
    }

    fn unreserve(&self, state: &CycleState, pod: &PodInfo, _node_name: &str) {
        let Some(s) = state.read::<State>(STATE_KEY) else {
            return;
        };
        let written = std::mem::take(&mut *locks::lock(&s.written));
        // The extended resources' claim: its in-memory allocation dropped; the claim, once
        // created, deleted (its allocation, if written, stays in flight until the watch shows
        // the claim gone).
        if let Some((c, _)) = locks::lock(&s.reserved_extended).take() {
            self.devices
                .forget_in_flight(c.metadata.uid.as_deref().unwrap_or_default());
        }
        let created = locks::lock(&s.created_extended).take();
        if let Some((c, allocation_written)) = &created
            && !allocation_written
        {
            self.devices
                .forget_in_flight(c.metadata.uid.as_deref().unwrap_or_default());
        }
        if let (Some((claim, _)), Some(client), Some(runtime)) =
            (created, &self.client, &self.runtime)
        {
            let (client, gate) = (client.clone(), self.gate.clone());
            runtime.spawn(async move {
                let deleted = gate
                    .write(Write::DynamicResources, delete_claim(&client, &claim))
                    .await;
                match deleted {
                    Ok(Ok(())) => {}
                    Ok(Err(e)) => tracing::warn!(claim = %claims::key(&claim), error = %e, "deleting the extended resources' claim failed"),
                    Err(refused) => tracing::info!(claim = %claims::key(&claim), %refused, "not deleting the extended resources' claim"),
                }
            });
        }
        for c in locks::lock(&s.reserved).drain(..) {
            // An allocation PreBind wrote stays allocated: its devices stay taken until the
            // watch shows it. One never written is dropped.
            if !written.iter().any(|w| w.metadata.uid == c.metadata.uid) {
                self.devices
                    .forget_in_flight(c.metadata.uid.as_deref().unwrap_or_default());
            }
        }
        // The reservations PreBind wrote for the pod: take them back. One for its PodGroup stays:
        // other members may need the claim (the group's PostFilter or the PodGroup's deletion
        // ends it).
        let (Some(client), Some(runtime)) = (&self.client, &self.runtime) else {
            return;
        };
        for claim in written
            .into_iter()
            .filter(|c| claims::reserved_for(c, &pod.pod, false))
        {
            runtime.spawn(unreserve_claim(
                client.clone(),
                self.gate.clone(),
                claim,
                pod.pod.metadata.uid.clone().unwrap_or_default(),
            ));
        }
    }
}
