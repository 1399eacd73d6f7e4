//! The room kept for pods that are not placed yet, in one place: the nominator's (pods a
//! preemption made room for) and the holds (StickyNode's pinned workloads whose pod left), with
//! the rules that keep them (when a hold is taken, claimed, expired; who is told when room is
//! given up) and the rule a cycle reads them by.

use std::sync::{Arc, Mutex};

use super::cache::Cache;
use super::holds::{Holds, WithHolds};
use super::nominator::Nominator;
use super::queue::SchedulingQueue;
use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::locks;
use crate::scheduler::framework::events::{ASSIGNED_POD_DELETE, EventObject};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::metrics::Metrics;

/// The nominated pods and the room holds, and whom they tell.
pub struct NominatedRoom {
    pub nominator: Nominator,
    pub holds: Holds,
    /// Told when room is given up: pods waiting for it may fit now.
    queue: Arc<SchedulingQueue>,
    /// Read for a leaving pod's siblings (a hold is not taken while its workload runs on).
    cache: Arc<Mutex<Cache>>,
    metrics: Arc<Metrics>,
}

impl NominatedRoom {
    pub fn new(
        queue: Arc<SchedulingQueue>,
        cache: Arc<Mutex<Cache>>,
        metrics: Arc<Metrics>,
    ) -> Self {
        NominatedRoom {
            nominator: Nominator::default(),
            holds: Holds::default(),
            queue,
            cache,
            metrics,
        }
    }

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

    /// A nominated pod gave up the room kept for it on its node (deleted, or nominated
    /// elsewhere or nowhere): pods of its priority or lower waiting for such room may fit now,
    /// as when a pod there is deleted (upstream moves them the same way; a pod of higher
    /// priority never left it room).
    pub fn given_up(&self, nominated: &PodInfo) {
        self.queue.on_event_up_to_priority(
            ASSIGNED_POD_DELETE,
            Some(EventObject::Pod(nominated.pod.clone())),
            None,
            crate::scheduler::framework::runtime::priority(&nominated.pod),
        );
    }

    /// Holds the room `pod` (which just left its node) used there, when `profile` (its own)
    /// holds room for its workload: not for a pod whose workload still runs another pod there
    /// or elsewhere (a live migration's source), which the cache tells.
    pub fn hold_room_of(&self, pod: &Pod, profile: &CompiledProfile) {
        let Some(node) = pods::node_name(pod) else {
            return;
        };
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        let Some(who) = self
            .holds
            .forget(uid)
            .or_else(|| profile.hold_identity(pod))
        else {
            return;
        };
        let Some(hold) = profile.room_to_hold(pod, node, &who) else {
            return;
        };
        let owner = pod
            .metadata
            .owner_references
            .as_ref()
            .and_then(|refs| refs.iter().find(|r| r.controller == Some(true)))
            .map(|r| r.uid.clone());
        let sibling_runs = owner.is_some_and(|owner| {
            locks::lock(&self.cache).bound_pods().iter().any(|p| {
                p.metadata.uid.as_deref() != Some(uid)
                    && p.metadata.owner_references.as_ref().is_some_and(|refs| {
                        refs.iter()
                            .any(|r| r.controller == Some(true) && r.uid == owner)
                    })
                    && profile.holds_key(p).as_deref() == Some(hold.key.as_str())
            })
        });
        if sibling_runs {
            return;
        }
        match self.holds.hold(&hold, pod, node, pods::scheduler_name(pod)) {
            Ok(()) => {
                tracing::info!(workload = %hold.workload, node = %node, seconds = hold.span.as_secs(), "holding the room of a pinned workload whose pod left");
            }
            Err(why) => {
                tracing::info!(workload = %hold.workload, node = %node, why, "not holding the room of a pinned workload whose pod left");
                self.metrics.room_hold_ended("refused");
            }
        }
        self.metrics.set_room_holds(self.holds.len());
    }

    /// Notes, while `pod` runs, who it would hold room for when it leaves (`profile`, its own,
    /// holds room): read once per pod.
    pub fn remember_hold_identity(&self, pod: &Pod, profile: &CompiledProfile) {
        let uid = pod.metadata.uid.as_deref().unwrap_or_default();
        if self.holds.knows(uid) {
            return;
        }
        if let Some(who) = profile.hold_identity(pod) {
            self.holds.remember(uid, who);
        }
    }

    /// `pod` was bound: the room held for its workload, if any, is its own now.
    pub fn claim_hold_of(&self, pod: &Pod, profile: &CompiledProfile) {
        if self.holds.is_empty() {
            return;
        }
        let Some(key) = profile.holds_key(pod) else {
            return;
        };
        if self.holds.release(&key).is_some() {
            self.metrics.room_hold_ended("claimed");
            self.metrics.set_room_holds(self.holds.len());
        }
    }

    /// Ends the holds that expired: pods waiting for that room may fit now.
    pub fn expire_holds(&self) {
        let expired = self.holds.sweep(std::time::Instant::now());
        if expired.is_empty() {
            return;
        }
        for hold in &expired {
            tracing::info!(workload = %hold.workload, node = %hold.node, "the room held for a workload was released: it did not come back in time");
            self.metrics.room_hold_ended("expired");
            self.given_up(&hold.pod);
        }
        self.metrics.set_room_holds(self.holds.len());
    }
}
