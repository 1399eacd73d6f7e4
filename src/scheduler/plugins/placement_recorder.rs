//! PlacementRecorder: a PostBind plugin that counts every bind in the workload's StickyBinding
//! (`status.latest`, `nodeCount`, `recentBinds`), exactly once per pod, for StickyNode and
//! PlacementHistory to read. The profile compiler enables it at postBind whenever either of
//! them runs; it has no args.

use std::sync::Arc;

use futures::future::BoxFuture;
use k8s_openapi::api::core::v1::Pod;

use crate::scheduler::framework::{CycleState, Plugin, PostBindPlugin};
use crate::scheduler::plugins::helper::expect_no_args;
use crate::scheduler::profile::validation::FieldErrors;
use crate::scheduler::profile::validation::FieldPath;
use crate::sticky::history::HistoryWriter;

pub const NAME: &str = "PlacementRecorder";

/// Records binds with the history writer it was built with.
pub struct PlacementRecorder {
    /// `None` in unit tests, where nothing is written.
    writer: Option<Arc<HistoryWriter>>,
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
        _state: &'a CycleState,
        pod: &'a Pod,
        node_name: &'a str,
    ) -> BoxFuture<'a, ()> {
        Box::pin(async move {
            if let Some(writer) = &self.writer {
                writer.record_bind(pod, node_name).await;
            }
        })
    }
}

/// PlacementRecorder takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    writer: Option<Arc<HistoryWriter>>,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(PlacementRecorder { writer }))
}
