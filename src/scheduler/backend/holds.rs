//! Room held for a pinned workload that has no pod for a while (a VM stopped and started, a
//! StatefulSet pod deleted for an upgrade): for a bounded time after its pod left its pinned
//! node, the resources that pod used there count as taken for every pod of lower or equal
//! priority, as a nominated pod's do (kube-scheduler's nominator rule), so the workload finds
//! its room when it comes back. A hold ends when the workload's pod is bound again (anywhere),
//! when it expires, or when the workload's pin moves off the node.
//!
//! Each hold stands for its pod by a stand-in: the pod's name, namespace, priority and
//! resource requests, nothing else (no labels, no affinity: a pod that is gone attracts and
//! repels nothing).

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Instant;

use crate::k8s::pod::{Pod, PodSpec};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::{HoldIdentity, NominatedPods, RoomHold};

/// One workload's held room.
#[derive(Clone, Debug)]
pub struct Hold {
    /// `<Kind>/<namespace>/<name>` of the workload, for messages and explain.
    pub workload: String,
    /// The schedulerName of the profile that holds it.
    pub profile: String,
    pub node: String,
    /// The stand-in counted on the node.
    pub pod: Arc<PodInfo>,
    pub until: Instant,
    /// `until` on the wall clock, for people.
    pub until_wall: jiff::Timestamp,
}

/// The holds, by workload key (`<namespace>/<binding name>`), and who each running pod of a
/// holding profile would hold room for.
#[derive(Default)]
pub struct Holds {
    inner: RwLock<HashMap<String, Hold>>,
    /// Per pod UID, read while the pod runs: when it leaves, its owners may be gone from the
    /// caches already (a VM's VMI deleted with its pod), and its workload could not be told.
    identities: RwLock<HashMap<String, HoldIdentity>>,
}

/// A stand-in for `pod`, held on `node`: what of it a node's room is made of, nominated there
/// (so that the queue's hints read its end as room given up on that node).
fn stand_in(pod: &Pod, node: &str) -> Pod {
    Pod {
        metadata: kube::api::ObjectMeta {
            name: pod.metadata.name.as_ref().map(|n| format!("{n} (held)")),
            namespace: pod.metadata.namespace.clone(),
            uid: pod.metadata.uid.as_ref().map(|u| format!("hold-{u}")),
            ..Default::default()
        },
        spec: pod.spec.as_ref().map(|s| PodSpec {
            containers: s.containers.clone(),
            init_containers: s.init_containers.clone(),
            overhead: s.overhead.clone(),
            priority: s.priority,
            priority_class_name: s.priority_class_name.clone(),
            resources: s.resources.clone(),
            ..Default::default()
        }),
        status: Some(crate::k8s::pod::PodStatus {
            nominated_node_name: Some(node.to_string()),
            ..Default::default()
        }),
    }
}

impl Holds {
    fn read(&self) -> std::sync::RwLockReadGuard<'_, HashMap<String, Hold>> {
        self.inner.read().unwrap_or_else(|e| e.into_inner())
    }

    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<String, Hold>> {
        self.inner.write().unwrap_or_else(|e| e.into_inner())
    }

    /// Whether who pod `uid` holds room for is known.
    pub fn knows(&self, uid: &str) -> bool {
        self.identities
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .contains_key(uid)
    }

    /// Notes who pod `uid` holds room for.
    pub fn remember(&self, uid: &str, who: HoldIdentity) {
        self.identities
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(uid.to_string(), who);
    }

    /// Who pod `uid` held room for, forgotten now.
    pub fn forget(&self, uid: &str) -> Option<HoldIdentity> {
        self.identities
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(uid)
    }

    /// Holds what `pod` used on `node` as `room` says (its workload's key, for how long), for
    /// `profile`, unless the holds of the key's namespace or of the profile are at the room's
    /// caps: then nothing is held and the refusal is returned.
    pub fn hold(
        &self,
        room: &RoomHold,
        pod: &Pod,
        node: &str,
        profile: &str,
    ) -> Result<(), &'static str> {
        let now = Instant::now();
        let Some(until) = now.checked_add(room.span) else {
            return Ok(());
        };
        let key = room.key.as_str();
        let namespace = key.split_once('/').map_or("", |(ns, _)| ns);
        let mut holds = self.write();
        let others = || holds.iter().filter(|(k, h)| *k != key && h.until > now);
        if others()
            .filter(|(k, _)| k.split_once('/').is_some_and(|(ns, _)| ns == namespace))
            .count()
            >= room.per_namespace
        {
            return Err("the namespace's held rooms are at maxHeldRoomsPerNamespace");
        }
        if others().filter(|(_, h)| h.profile == profile).count() >= room.per_profile {
            return Err("the profile's held rooms are at maxHeldRooms");
        }
        let until_wall = jiff::Timestamp::now()
            .checked_add(
                jiff::SignedDuration::try_from(room.span).unwrap_or(jiff::SignedDuration::ZERO),
            )
            .unwrap_or(jiff::Timestamp::MAX);
        holds.insert(
            key.to_string(),
            Hold {
                workload: room.workload.clone(),
                profile: profile.to_string(),
                node: node.to_string(),
                pod: Arc::new(PodInfo::new(Arc::new(stand_in(pod, node)))),
                until,
                until_wall,
            },
        );
        Ok(())
    }

    /// Ends the hold of `key`, if there is one.
    pub fn release(&self, key: &str) -> Option<Hold> {
        if self.is_empty() {
            return None;
        }
        self.write().remove(key)
    }

    /// Ends the holds that expired by `now`, and returns them.
    pub fn sweep(&self, now: Instant) -> Vec<Hold> {
        if self.read().values().all(|h| h.until > now) {
            return Vec::new();
        }
        let mut holds = self.write();
        let expired: Vec<String> = holds
            .iter()
            .filter(|(_, h)| h.until <= now)
            .map(|(k, _)| k.clone())
            .collect();
        expired.iter().filter_map(|k| holds.remove(k)).collect()
    }

    /// Ends the holds whose node `keep` no longer wants held (the workload's pin moved), and
    /// returns them.
    pub fn retain(&self, keep: impl Fn(&str, &Hold) -> bool) -> Vec<Hold> {
        let mut holds = self.write();
        let gone: Vec<String> = holds
            .iter()
            .filter(|(k, h)| !keep(k, h))
            .map(|(k, _)| k.clone())
            .collect();
        gone.iter().filter_map(|k| holds.remove(k)).collect()
    }

    /// The holds in force, by workload key.
    pub fn active(&self) -> Vec<(String, Hold)> {
        let now = Instant::now();
        let mut all: Vec<(String, Hold)> = self
            .read()
            .iter()
            .filter(|(_, h)| h.until > now)
            .map(|(k, h)| (k.clone(), h.clone()))
            .collect();
        all.sort_by(|a, b| a.0.cmp(&b.0));
        all
    }

    pub fn len(&self) -> usize {
        self.read().len()
    }

    pub fn is_empty(&self) -> bool {
        self.read().is_empty()
    }
}

/// The nominated pods and the holds, as one [`NominatedPods`] for a cycle of a pod of workload
/// `own` (whose own hold does not count against it).
pub struct WithHolds<'a> {
    pub nominated: &'a dyn NominatedPods,
    pub holds: &'a Holds,
    pub own: Option<String>,
}

impl NominatedPods for WithHolds<'_> {
    fn any(&self) -> bool {
        self.nominated.any() || !self.holds.is_empty()
    }

    fn for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
        let mut pods = self.nominated.for_node(node);
        let now = Instant::now();
        pods.extend(
            self.holds
                .read()
                .iter()
                .filter(|(k, h)| h.node == node && h.until > now && Some(*k) != self.own.as_ref())
                .map(|(_, h)| h.pod.clone()),
        );
        pods
    }

    fn node_of(&self, uid: &str) -> Option<String> {
        self.nominated.node_of(uid)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::scheduler::framework::NoNominations;
    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn a_hold_counts_for_others_on_its_node_until_it_ends() {
        let holds = Holds::default();
        let vm = PodBuilder::new("virt-launcher-vm-x")
            .req_cpu("2")
            .priority(100)
            .label("app", "vm")
            .build();
        holds
            .hold(
                &room("ns/virtualmachine-vm", "VirtualMachine/ns/vm", usize::MAX),
                &vm,
                "n1",
                "sticky",
            )
            .expect("held");
        let other = WithHolds {
            nominated: &NoNominations,
            holds: &holds,
            own: Some("ns/statefulset-db-0".into()),
        };
        let held = other.for_node("n1");
        assert_eq!(held.len(), 1);
        assert_eq!(
            held[0].pod.spec.as_ref().and_then(|s| s.priority),
            Some(100)
        );
        assert!(
            held[0].pod.metadata.labels.is_none(),
            "a stand-in has no labels"
        );
        assert!(other.for_node("n2").is_empty());
        let own = WithHolds {
            nominated: &NoNominations,
            holds: &holds,
            own: Some("ns/virtualmachine-vm".into()),
        };
        assert!(
            own.for_node("n1").is_empty(),
            "its own hold leaves the workload alone"
        );
        assert!(holds.sweep(Instant::now()).is_empty());
        assert!(holds.sweep(Instant::now() + Duration::from_secs(61)).len() == 1);
        assert!(holds.is_empty());
        holds
            .hold(&room("k", "w", usize::MAX), &vm, "n1", "sticky")
            .expect("held");
        assert!(holds.release("k").is_some() && holds.is_empty());
    }

    /// A room of 60 s for `key`, `cap` rooms at most in its namespace and in its profile.
    fn room(key: &str, workload: &str, cap: usize) -> RoomHold {
        RoomHold {
            key: key.into(),
            workload: workload.into(),
            span: Duration::from_secs(60),
            per_namespace: cap,
            per_profile: cap,
        }
    }

    /// A tenant who deletes the pods of many pinned workloads holds no more rooms than the
    /// namespace's cap, and a profile no more than its own; a workload's own hold renewed does
    /// not count against itself, and room comes back as holds end.
    #[test]
    fn holds_stop_at_the_namespaces_cap_and_the_profiles() {
        let holds = Holds::default();
        let vm = PodBuilder::new("virt-launcher").req_cpu("2").build();
        let hold = |key: &str, profile: &str| {
            let capped = RoomHold {
                per_namespace: 2,
                per_profile: 3,
                ..room(key, "w", 0)
            };
            holds.hold(&capped, &vm, "n1", profile)
        };
        assert!(hold("team-a/vm-1", "sticky").is_ok());
        assert!(hold("team-a/vm-2", "sticky").is_ok());
        assert!(
            hold("team-a/vm-2", "sticky").is_ok(),
            "its own hold, renewed"
        );
        assert_eq!(
            hold("team-a/vm-3", "sticky"),
            Err("the namespace's held rooms are at maxHeldRoomsPerNamespace")
        );
        assert!(hold("team-b/vm-1", "sticky").is_ok(), "another namespace");
        assert_eq!(
            hold("team-c/vm-1", "sticky"),
            Err("the profile's held rooms are at maxHeldRooms")
        );
        assert!(hold("team-c/vm-1", "other").is_ok(), "another profile");
        assert_eq!(holds.len(), 4);
        assert!(holds.release("team-a/vm-1").is_some());
        assert!(
            hold("team-a/vm-3", "other").is_ok(),
            "room back in the namespace"
        );
    }
}
