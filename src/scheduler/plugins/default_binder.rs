//! DefaultBinder: binds a pod through the `pods/binding` subresource, as kube-scheduler's
//! DefaultBinder does. The bind is the only API call tether makes per scheduled pod.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::{Binding, ObjectReference, Pod};
use kube::api::{Api, ObjectMeta, PostParams};

use crate::scheduler::framework::{BindPlugin, CycleState, Plugin, Status};
use crate::scheduler::profile::validation::FieldErrors;
use crate::scheduler::profile::validation::FieldPath;

pub const NAME: &str = "DefaultBinder";

/// Binds pods with the API client it was built with.
pub struct DefaultBinder {
    client: Option<kube::Client>,
}

/// DefaultBinder takes no args. Without a client (unit tests) every bind fails with an error.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    client: Option<kube::Client>,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    crate::scheduler::plugins::helper::expect_no_args(NAME, args, path)?;
    Ok(Arc::new(DefaultBinder { client }))
}

/// The Binding object for `pod` on `node`; it carries the pod's UID so that a pod deleted and
/// recreated under the same name in the meantime is never bound by mistake.
pub fn binding_for(pod: &Pod, node: &str) -> Binding {
    Binding {
        metadata: ObjectMeta {
            name: pod.metadata.name.clone(),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.clone(),
            ..Default::default()
        },
        target: ObjectReference {
            kind: Some("Node".into()),
            name: Some(node.into()),
            ..Default::default()
        },
    }
}

impl BindPlugin for DefaultBinder {
    fn bind<'a>(
        &'a self,
        _state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, Status> {
        Box::pin(async move {
            let Some(client) = self.client.clone() else {
                return Status::error("DefaultBinder has no API client");
            };
            let name = pod.metadata.name.clone().unwrap_or_default();
            let namespace = pod.metadata.namespace.clone().unwrap_or_default();
            let body = binding_for(pod, node_name);
            let api: Api<Pod> = Api::namespaced(client, &namespace);
            match api
                .create_subresource::<Binding, serde_json::Value>(
                    "binding",
                    &name,
                    &PostParams::default(),
                    &body,
                )
                .await
            {
                Ok(_) => Status::success(),
                Err(e) => Status::error(format!("binding {namespace}/{name} to {node_name}: {e}")),
            }
        })
    }
}

impl Plugin for DefaultBinder {
    fn name(&self) -> &'static str {
        NAME
    }
    fn bind(&self) -> Option<&dyn BindPlugin> {
        Some(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn the_binding_names_the_pod_its_uid_and_the_node() {
        let pod = PodBuilder::new("web").namespace("shop").uid("u-1").build();
        let b = binding_for(&pod, "node-3");
        assert_eq!(b.metadata.name.as_deref(), Some("web"));
        assert_eq!(b.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(b.metadata.uid.as_deref(), Some("u-1"));
        assert_eq!(b.target.kind.as_deref(), Some("Node"));
        assert_eq!(b.target.name.as_deref(), Some("node-3"));
    }

    #[test]
    fn takes_no_args() {
        assert!(build(None, &"pluginConfig[0].args".into(), None).is_ok());
        let err = build(
            Some(&serde_json::json!({"x": 1})),
            &"pluginConfig[0].args".into(),
            None,
        )
        .err()
        .expect("refused");
        assert_eq!(err.0[0].path, "pluginConfig[0].args");
    }
}
