//! PreBind: the claims' allocations and reservations written (the extended resources' claim
//! created before its own are), then the devices' binding conditions waited for.

use super::*;

impl DynamicResources {
    /// PreBind for the extended resources' claim: created on the API server, its allocation
    /// and the pod's reservation written, the pod's status told which claim and requests serve
    /// its resources. The claim's in-flight allocation moves to the UID the API server gave.
    async fn bind_extended(
        &self,
        s: &State,
        client: &kube::Client,
        pod: &Pod,
        claim: Arc<ResourceClaim>,
        mappings: &[ContainerExtendedResourceRequest],
    ) -> Result<Arc<ResourceClaim>, String> {
        let allocation = claim.status.as_ref().and_then(|st| st.allocation.clone());
        let created = match self
            .gate
            .write(Write::DynamicResources, create_claim(client, &claim))
            .await
        {
            Ok(r) => Arc::new(r?),
            Err(refused) => return Err(refused.to_string()),
        };
        let mut in_flight = (*created).clone();
        in_flight.metadata.finalizers = claim.metadata.finalizers.clone();
        in_flight.status.get_or_insert_default().allocation = allocation.clone();
        self.devices.set_in_flight(Arc::new(in_flight));
        self.devices
            .forget_in_flight(claim.metadata.uid.as_deref().unwrap_or_default());
        *locks::lock(&s.created_extended) = Some((created.clone(), false));
        let written = match self
            .gate
            .write(
                Write::DynamicResources,
                bind_claim(client, created.clone(), allocation, claims::consumer(pod)),
            )
            .await
        {
            Ok(r) => Arc::new(r?),
            Err(refused) => return Err(refused.to_string()),
        };
        *locks::lock(&s.created_extended) = Some((written.clone(), true));
        let name = written.metadata.name.clone().unwrap_or_default();
        match self
            .gate
            .write(
                Write::DynamicResources,
                patch_extended_status(client, pod, &name, mappings),
            )
            .await
        {
            Ok(r) => r?,
            Err(refused) => return Err(refused.to_string()),
        }
        Ok(written)
    }
}

impl PreBindPlugin for DynamicResources {
    fn pre_bind_pre_flight(&self, state: &CycleState, _pod: &Pod, _node_name: &str) -> Status {
        match state.read::<State>(STATE_KEY) {
            Some(s) if !s.claims.is_empty() || s.extended.is_some() => Status::success(),
            _ => Status::skip(),
        }
    }

    fn pre_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(s) = state.read::<State>(STATE_KEY) else {
                return Status::error(format!("cannot read {STATE_KEY:?} from cycleState"));
            };
            if s.claims.is_empty() && s.extended.is_none() {
                return Status::success();
            }
            let Some(client) = &self.client else {
                return Status::error("DynamicResources has no API client");
            };
            let reserved = locks::lock(&s.reserved).clone();
            for (i, claim) in s.claims.iter().enumerate() {
                // Reserved for the pod, or for its PodGroup by a member before it: nothing to
                // write.
                if claims::reserved_for(claim, pod, self.group_claims) {
                    continue;
                }
                let consumer = s
                    .bind_to
                    .get(i)
                    .cloned()
                    .unwrap_or_else(|| claims::consumer(pod));
                let allocation = reserved
                    .iter()
                    .find(|r| r.metadata.uid == claim.metadata.uid)
                    .and_then(|r| r.status.as_ref())
                    .and_then(|st| st.allocation.clone());
                let bound = self
                    .gate
                    .write(
                        Write::DynamicResources,
                        bind_claim(client, claim.clone(), allocation, consumer),
                    )
                    .await;
                match bound {
                    Ok(Ok(written)) => locks::lock(&s.written).push(Arc::new(written)),
                    Ok(Err(e)) => return Status::error(e),
                    Err(refused) => return Status::error(refused.to_string()),
                }
            }
            let mut keys: Vec<(String, String)> = s
                .claims
                .iter()
                .map(|c| {
                    (
                        c.metadata.namespace.clone().unwrap_or_default(),
                        c.metadata.name.clone().unwrap_or_default(),
                    )
                })
                .collect();
            let reserved_extended = locks::lock(&s.reserved_extended).clone();
            let mut extended_waits = false;
            if let Some((claim, mappings)) = reserved_extended {
                extended_waits = binding::has_binding_conditions(&claim);
                match self.bind_extended(s, client, pod, claim, &mappings).await {
                    Ok(written) => keys.push((
                        written.metadata.namespace.clone().unwrap_or_default(),
                        written.metadata.name.clone().unwrap_or_default(),
                    )),
                    Err(e) => return Status::error(e),
                }
            }
            let waits = extended_waits
                || s.claims.iter().any(|c| binding::has_binding_conditions(c))
                || reserved.iter().any(|c| binding::has_binding_conditions(c));
            if !waits {
                return Status::success();
            }
            if let Some(events) = &self.events {
                use kube::Resource;
                let _ = events
                    .publish(
                        &pod.object_ref(&()),
                        crate::recorder::EventType::Normal,
                        "BindingConditionsPending",
                        "Scheduling",
                        format!("waiting for binding conditions for device on node {node_name}"),
                    )
                    .await;
            }
            match binding::wait_until_ready(&self.devices, &keys, self.timeouts.binding, &self.gate)
                .await
            {
                Ok(()) => Status::success(),
                Err(e) => Status::error(e),
            }
        })
    }
}
