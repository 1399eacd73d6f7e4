//! PrioritySort: orders the active queue by pod priority, then by time in the queue, as
//! kube-scheduler's PrioritySort QueueSort plugin.

use std::sync::Arc;

use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{Plugin, QueueSortPlugin, QueuedPodInfo};
use crate::scheduler::plugins::handle::Handle;

use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "PrioritySort";

/// Higher `spec.priority` first; among equal priorities, the pod queued earlier first.
#[derive(Clone, Copy, Debug, Default)]
pub struct PrioritySort;

/// `spec.priority`, 0 when unset, as corev1helpers.PodPriority reads it.
fn pod_priority(pod: &PodInfo) -> i32 {
    crate::scheduler::framework::runtime::priority(&pod.pod)
}

impl Plugin for PrioritySort {
    fn name(&self) -> &'static str {
        NAME
    }

    fn queue_sort(&self) -> Option<&dyn QueueSortPlugin> {
        Some(self)
    }
}

impl QueueSortPlugin for PrioritySort {
    fn less(&self, a: &QueuedPodInfo, b: &QueuedPodInfo) -> bool {
        let (pa, pb) = (pod_priority(&a.pod), pod_priority(&b.pod));
        pa > pb || (pa == pb && a.timestamp < b.timestamp)
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    _handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(PrioritySort))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::time::{Duration, Instant};

    use super::*;
    use crate::scheduler::testing::PodBuilder;

    fn queued(pod: PodBuilder, timestamp: Instant) -> QueuedPodInfo {
        QueuedPodInfo {
            pod: Arc::new(pod.info()),
            initial_attempt_timestamp: timestamp,
            timestamp,
            attempts: 0,
            unschedulable_plugins: BTreeSet::new(),
            unschedulable_count: 0,
            consecutive_errors_count: 0,
            gated_by: None,
        }
    }

    #[test]
    fn less_orders_by_priority_then_timestamp() {
        let early = Instant::now();
        let late = early + Duration::from_secs(1);
        let low = || PodBuilder::new("low").priority(1);
        let high = || PodBuilder::new("high").priority(100);
        let cases = [
            (
                "p1.priority less than p2.priority",
                queued(low(), early),
                queued(high(), early),
                false,
            ),
            (
                "p1.priority greater than p2.priority",
                queued(high(), late),
                queued(low(), early),
                true,
            ),
            (
                "equal priority, p1 added to the queue earlier",
                queued(high(), early),
                queued(high(), late),
                true,
            ),
            (
                "equal priority, p2 added to the queue earlier",
                queued(high(), late),
                queued(high(), early),
                false,
            ),
            (
                "equal priority and timestamp is not less",
                queued(high(), early),
                queued(high(), early),
                false,
            ),
            (
                "missing priority counts as 0, above a negative one",
                queued(PodBuilder::new("none"), late),
                queued(PodBuilder::new("neg").priority(-1), early),
                true,
            ),
            (
                "missing priority counts as 0, below a positive one",
                queued(PodBuilder::new("none"), early),
                queued(low(), late),
                false,
            ),
        ];
        for (name, a, b, want) in cases {
            assert_eq!(PrioritySort.less(&a, &b), want, "{name}");
        }
    }
}
