//! NodeName: a pod that names its node (`spec.nodeName`) fits only that node, as
//! kube-scheduler's NodeName Filter plugin.

use crate::scheduler::framework::events::{ActionType, ClusterEvent, EventResource, Registration};
use crate::scheduler::plugins::handle::Handle;
use std::sync::Arc;

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};

use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "NodeName";

/// The reason a node is rejected, as upstream words it.
pub const ERR_REASON: &str = "node(s) didn't match the requested node name";

/// Rejects every node but the one a pod's `spec.nodeName` names.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeName;

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        let node_name = pod.pod.spec.as_ref().and_then(|s| s.node_name.as_deref());
        signature.part(
            crate::scheduler::framework::signature::NODE_NAME,
            &node_name,
        );
        true
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(vec![Registration::always(ClusterEvent::new(
            EventResource::Node,
            ActionType::ADD,
        ))])
    }

    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

/// As kube-scheduler 1.37's: a pod that names its node narrows the search to that node;
/// otherwise nothing to do (but Filter still runs).
impl PreFilterPlugin for NodeName {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        match pod.node_name() {
            Some(node) => (
                PreFilterResult::nodes([node.to_string()]),
                Status::success(),
            ),
            None => (PreFilterResult::all_nodes(), Status::success()),
        }
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match pod.node_name() {
            Some(wanted) if wanted != node.name => Status::unresolvable(ERR_REASON),
            _ => Status::success(),
        }
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    _handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(NodeName))
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn filter_matches_the_requested_node_name() {
        let cases = [
            ("no host specified", PodBuilder::new("p"), Status::success()),
            (
                "host matches",
                PodBuilder::new("p").node_name("foo"),
                Status::success(),
            ),
            (
                "host doesn't match",
                PodBuilder::new("p").node_name("bar"),
                Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON),
            ),
        ];
        let node = NodeBuilder::new("foo").info(vec![]);
        for (name, pod, want) in cases {
            let got = FilterPlugin::filter(&NodeName, &CycleState::new(), &pod.info(), &node);
            assert_eq!(got, want, "{name}");
        }
    }
}
