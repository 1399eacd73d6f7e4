//! SchedulingGates: holds a pod out of the active queue while it has `spec.schedulingGates`,
//! as kube-scheduler's SchedulingGates PreEnqueue plugin.

use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::plugins::handle::Handle;
use std::sync::Arc;

use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{Plugin, PreEnqueuePlugin, Status};

use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "SchedulingGates";

/// Lets a pod into the active queue only once its scheduling gates are all removed.
#[derive(Clone, Copy, Debug, Default)]
pub struct SchedulingGates;

impl Plugin for SchedulingGates {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(vec![Registration::new(
            ClusterEvent::new(
                EventResource::Pod,
                ActionType::UPDATE_POD_SCHEDULING_GATES_ELIMINATED,
            ),
            Arc::new(after_gates_removed),
        )])
    }

    fn pre_enqueue(&self) -> Option<&dyn PreEnqueuePlugin> {
        Some(self)
    }
}

impl PreEnqueuePlugin for SchedulingGates {
    /// UnschedulableAndUnresolvable naming the gates, in upstream's
    /// `waiting for scheduling gates: [a b]` format, while any remain.
    fn pre_enqueue(&self, pod: &PodInfo) -> Status {
        let gates: Vec<&str> = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .into_iter()
            .flatten()
            .map(|g| g.name.as_str())
            .collect();
        if gates.is_empty() {
            return Status::success();
        }
        Status::unresolvable(format!(
            "waiting for scheduling gates: [{}]",
            gates.join(" ")
        ))
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    _handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(SchedulingGates))
}

/// The pod's own gates are gone (other pods' are no concern of it).
fn after_gates_removed(
    pod: &PodInfo,
    _old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    match events::pods(None, new).1 {
        Some(new) => events::queue_if(events::is_same_pod(pod, new)),
        None => Hint::Queue,
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn pre_enqueue_holds_gated_pods() {
        let cases = [
            (
                "pod does not carry scheduling gates",
                PodBuilder::new("p"),
                Status::success(),
            ),
            (
                "pod with an empty gate list",
                PodBuilder::new("p").with(|p| {
                    if let Some(s) = p.spec.as_mut() {
                        s.scheduling_gates = Some(vec![]);
                    }
                }),
                Status::success(),
            ),
            (
                "pod carries one scheduling gate",
                PodBuilder::new("p").scheduling_gate("foo"),
                Status::new(
                    Code::UnschedulableAndUnresolvable,
                    "waiting for scheduling gates: [foo]",
                ),
            ),
            (
                "pod carries scheduling gates",
                PodBuilder::new("p")
                    .scheduling_gate("foo")
                    .scheduling_gate("bar"),
                Status::new(
                    Code::UnschedulableAndUnresolvable,
                    "waiting for scheduling gates: [foo bar]",
                ),
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(
                PreEnqueuePlugin::pre_enqueue(&SchedulingGates, &pod.info()),
                want,
                "{name}"
            );
        }
    }
}
