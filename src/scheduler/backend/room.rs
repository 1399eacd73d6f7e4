//! The room kept for pods that are not placed yet, in one place: the nominator's (pods a
//! preemption made room for) and the holds (StickyNode's pinned workloads whose pod left), and
//! the rule a cycle reads them by.

use super::holds::{Holds, WithHolds};
use super::nominator::Nominator;
use crate::k8s::pod::Pod;
use crate::scheduler::framework::profile::CompiledProfile;

/// The nominated pods and the room holds.
#[derive(Default)]
pub struct NominatedRoom {
    pub nominator: Nominator,
    pub holds: Holds,
}

impl NominatedRoom {
    /// What a cycle of `pod` under `profile` counts as taken: every nominated pod's room, and
    /// every hold but its own workload's (a pod of a pinned workload takes its own room back).
    pub fn for_pod(&self, profile: &CompiledProfile, pod: &Pod) -> WithHolds<'_> {
        WithHolds {
            nominated: &self.nominator,
            holds: &self.holds,
            own: if self.holds.is_empty() {
                None
            } else {
                profile.holds_key(pod)
            },
        }
    }

    /// What a gang's group cycle counts as taken: every nominated pod's room and every hold.
    pub fn for_group(&self) -> WithHolds<'_> {
        WithHolds {
            nominated: &self.nominator,
            holds: &self.holds,
            own: None,
        }
    }
}
