//! PlacementRecorder: a PostBind plugin that counts binds in the workload's StickyBinding
//! (`status.latest`, `nodeCount`, `recentBinds`), exactly once per pod, for StickyNode and
//! PlacementHistory to read. The profile compiler enables it at postBind whenever either of
//! them runs, with whose history they read: a bind is written only when one of them reads that
//! workload's history (not for pods they leave alone: excluded namespaces, the opt-out
//! annotation, multi-replica ReplicaSets and Deployments under `skipMultiReplica`). It has no
//! args.

use std::sync::Arc;

use futures::future::BoxFuture;

use crate::k8s::pod::Pod;
use crate::scheduler::framework::validation::FieldErrors;
use crate::scheduler::framework::validation::FieldPath;
use crate::scheduler::framework::{CycleState, Plugin, PostBindPlugin};
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::plugins::helper::expect_no_args;
use crate::scheduler::plugins::sticky::{Readership, resolved_workload};
use crate::sticky::history::HistoryWriter;

pub const NAME: &str = "PlacementRecorder";

/// Records binds with the history writer it was built with.
pub struct PlacementRecorder {
    /// `None` in unit tests, where nothing is written.
    writer: Option<Arc<HistoryWriter>>,
    /// Whose history the profile's readers read; `None`: everyone's.
    readers: Option<Vec<Readership>>,
}

impl PlacementRecorder {
    /// A recorder that writes the binds some of `readers` read.
    pub fn for_readers(writer: Option<Arc<HistoryWriter>>, readers: Vec<Readership>) -> Self {
        PlacementRecorder {
            writer,
            readers: Some(readers),
        }
    }
}

impl Plugin for PlacementRecorder {
    fn name(&self) -> &'static str {
        NAME
    }

    fn post_bind(&self) -> Option<&dyn PostBindPlugin> {
        Some(self)
    }
}

impl PostBindPlugin for PlacementRecorder {
    fn post_bind<'a>(
        &'a self,
        state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            let Some(writer) = &self.writer else {
                return;
            };
            // Resolved by StickyNode or PlacementHistory in this pod's cycle.
            let workload = match resolved_workload(state) {
                Some(known) => known,
                None => Arc::new(writer.workload_of(pod)),
            };
            if let Some(readers) = &self.readers {
                // An owner not known yet: record_bind says so (and the reconcile counts it).
                if workload.pending_owner.is_none()
                    && !readers.iter().any(|r| r.reads(pod, &workload))
                {
                    return;
                }
            }
            // Written on a task of its own: the binding cycle does not wait for it, and the
            // plugins read the bind from the writer meanwhile.
            writer.record_workload_bind_later(pod, &workload, node_name);
        })
    }
}

/// PlacementRecorder takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let writer = handle.history.clone();
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(PlacementRecorder {
        writer,
        readers: None,
    }))
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::scheduler::metrics::Metrics;
    use crate::scheduler::testing::stand_in_client;
    use crate::sticky::bindings::BindingIndex;
    use crate::sticky::workload::{OwnerLookup, OwnerMeta};

    /// A Deployment `web` with `replicas`, owning the ReplicaSet `web-1`.
    struct Web(i32);

    impl OwnerLookup for Web {
        fn get(&self, _ns: &str, _v: &str, kind: &str, name: &str) -> Option<OwnerMeta> {
            let deployment = OwnerMeta {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "uid-web".into(),
                controller: None,
                replicas: Some(self.0),
            };
            match (kind, name) {
                ("ReplicaSet", "web-1") => Some(OwnerMeta {
                    kind: "ReplicaSet".into(),
                    name: "web-1".into(),
                    uid: "uid-rs".into(),
                    controller: Some(
                        k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference {
                            api_version: "apps/v1".into(),
                            kind: "Deployment".into(),
                            name: "web".into(),
                            uid: "uid-web".into(),
                            controller: Some(true),
                            ..Default::default()
                        },
                    ),
                    ..deployment
                }),
                ("Deployment", "web") => Some(deployment),
                _ => None,
            }
        }
    }

    fn web_pod() -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "web-1-x", "namespace": "ns", "uid": "pod-x",
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet", "name": "web-1",
                    "uid": "uid-rs", "controller": true}]},
            "spec": {"containers": []},
        }))
        .expect("a pod")
    }

    /// Binds the pod through a recorder reading with `skip_multi_replica`, for a Deployment
    /// of `replicas`; returns the API calls made.
    async fn calls(replicas: i32, skip_multi_replica: bool) -> Vec<String> {
        let calls = Arc::new(Mutex::new(Vec::new()));
        let log = calls.clone();
        let client = stand_in_client(move |method, path, body| {
            log.lock().expect("calls").push(format!("{method} {path}"));
            if method == "GET" {
                let status = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                    "status": "Failure", "reason": "NotFound", "code": 404, "message": "no"});
                return (404, status);
            }
            let mut body = body;
            body["metadata"]["resourceVersion"] = "1".into();
            (201, body)
        });
        let writer = Arc::new(HistoryWriter::new(
            client,
            None,
            Arc::new(BindingIndex::default()),
            Arc::new(Web(replicas)),
            Arc::new(Metrics::default()),
            crate::gate::WriteGate::alone(),
        ));
        let recorder = PlacementRecorder::for_readers(
            Some(writer.clone()),
            vec![Readership {
                skip_multi_replica,
                excluded_namespaces: vec![],
                disable_annotation: "off".into(),
            }],
        );
        PostBindPlugin::post_bind(&recorder, &CycleState::new(), &web_pod(), "n1").await;
        assert_eq!(
            writer.wait_idle(std::time::Duration::from_secs(10)).await,
            0,
            "the write ends"
        );
        calls.lock().expect("calls").clone()
    }

    #[tokio::test]
    async fn only_history_some_reader_reads_is_written() {
        assert!(
            calls(3, true).await.is_empty(),
            "a 3-replica Deployment its readers skip costs no API call"
        );
        assert!(!calls(1, true).await.is_empty(), "a single replica is read");
        assert!(!calls(3, false).await.is_empty(), "read when not skipped");
    }
}
