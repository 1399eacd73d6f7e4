//! What the queue holds, counted in one walk for the metrics read when `/metrics` is scraped.

use std::collections::{HashMap, HashSet};
use std::time::Instant;

use super::state::{PENDING_QUEUES, SchedulingQueue};
use crate::k8s::pods;

/// kube-scheduler 1.38's two pools of PodGroup members beside the sub-queues, as
/// `scheduler_pending_pods{queue}` names them: `incomplete`, the members of a PodGroup whose
/// group (or a CompositePodGroup above it) is not known yet; `pending`, the members that came
/// while a group cycle works on their group, waiting for it to end.
pub const GROUP_QUEUES: [&str; 2] = ["incomplete", "pending"];

/// A pod's sub-queue or group pool, and when it entered the queue.
type Pool = (&'static str, usize, Option<Instant>);

/// A PodGroup's members in each sub-queue: how many, and when the first entered the queue.
type Members = [(usize, Option<Instant>); 4];

/// What the queue holds, counted in one pass.
#[derive(Clone, Debug)]
pub struct Summary {
    /// Each sub-queue (active, backoff, unschedulable, gated), then [`GROUP_QUEUES`]: its pods,
    /// and when the one that has waited longest entered the queue. A pod is counted in one.
    pub pools: [Pool; 6],
    /// Pods waiting after a rejection, in any sub-queue, by each plugin that rejected them (or
    /// holds them at PreEnqueue) and their schedulerName: (plugin, schedulerName, pods).
    pub rejected_by: Vec<(&'static str, String, usize)>,
    /// The scheduling entities in each sub-queue, as kube-scheduler 1.38 counts them
    /// (`scheduler_queued_entities`): `pod` for a pod of no PodGroup, `podgroup` for each
    /// PodGroup (Workload API) with a member there, however many (the members in a group pool
    /// are in no entity, as upstream's).
    pub entities: [(&'static str, usize, usize); 4],
}

impl Default for Summary {
    fn default() -> Self {
        let [active, backoff, unschedulable, gated] = PENDING_QUEUES;
        let [incomplete, pending] = GROUP_QUEUES;
        Summary {
            pools: [active, backoff, unschedulable, gated, incomplete, pending]
                .map(|queue| (queue, 0, None)),
            rejected_by: Vec::new(),
            entities: PENDING_QUEUES.map(|queue| (queue, 0, 0)),
        }
    }
}

/// Adds `pods` pods to `pool`, the one that has waited longest having entered at `since`.
fn count(pool: &mut Pool, pods: usize, since: Option<Instant>) {
    pool.1 += pods;
    if let Some(since) = since
        && pool.2.is_none_or(|o| since < o)
    {
        pool.2 = Some(since);
    }
}

impl SchedulingQueue {
    /// The queue's [`Summary`] now, every PodGroup's root taken as known.
    pub fn summary(&self) -> Summary {
        self.summary_with(|_, _| true)
    }

    /// The queue's [`Summary`] now (pods in flight, assumed or unserved are not in it), read as
    /// [`SchedulingQueue::for_each_pending`] reads the queue. `root_known(namespace, group)`
    /// says whether PodGroup `group` and every CompositePodGroup above it are known: the
    /// members of one that is not are `incomplete`; the members of a group with a member in
    /// flight that wait in activeQ or backoffQ came after its cycle began, and are `pending`.
    pub fn summary_with(&self, root_known: impl Fn(&str, &str) -> bool) -> Summary {
        let mut summary = Summary::default();
        // By schedulerName, then plugin: a name is copied once, not once per pod.
        let mut rejected: HashMap<String, HashMap<&'static str, usize>> = HashMap::new();
        // The members of each PodGroup in each sub-queue, placed once the walk is over.
        let mut members: HashMap<(String, String), Members> = HashMap::new();
        let mut in_flight: HashSet<(String, String)> = HashSet::new();
        self.for_each_entry(|slot, entry| {
            let info = &entry.info;
            let group = pods::pod_group_name(&info.pod.pod)
                .map(|group| (info.pod.namespace().to_string(), group.to_string()));
            let Some(slot) = slot else {
                in_flight.extend(group);
                return;
            };
            let since = info.initial_attempt_timestamp;
            match group {
                Some(group) => {
                    let (pods, oldest) = &mut members.entry(group).or_default()[slot];
                    *pods += 1;
                    if oldest.is_none_or(|o| since < o) {
                        *oldest = Some(since);
                    }
                }
                None => {
                    count(&mut summary.pools[slot], 1, Some(since));
                    summary.entities[slot].1 += 1;
                }
            }
            let gate = info
                .gated_by
                .filter(|g| !info.unschedulable_plugins.contains(g));
            let mut plugins = info
                .unschedulable_plugins
                .iter()
                .copied()
                .chain(gate)
                .peekable();
            if plugins.peek().is_none() {
                return;
            }
            let scheduler = pods::scheduler_name(&info.pod.pod);
            if !rejected.contains_key(scheduler) {
                rejected.insert(scheduler.to_string(), HashMap::new());
            }
            if let Some(by_plugin) = rejected.get_mut(scheduler) {
                for plugin in plugins {
                    *by_plugin.entry(plugin).or_default() += 1;
                }
            }
        });
        for (group, slots) in &members {
            let incomplete = !root_known(&group.0, &group.1);
            let running = in_flight.contains(group);
            for (slot, (pods, oldest)) in slots.iter().enumerate() {
                if *pods == 0 {
                    continue;
                }
                if incomplete {
                    count(&mut summary.pools[4], *pods, *oldest);
                } else if running && slot < 2 {
                    count(&mut summary.pools[5], *pods, *oldest);
                } else {
                    count(&mut summary.pools[slot], *pods, *oldest);
                    summary.entities[slot].2 += 1;
                }
            }
        }
        summary.rejected_by = rejected
            .into_iter()
            .flat_map(|(scheduler, by_plugin)| {
                by_plugin
                    .into_iter()
                    .map(move |(plugin, n)| (plugin, scheduler.clone(), n))
            })
            .collect();
        summary
    }
}
