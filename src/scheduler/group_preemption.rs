//! The group cycle's PodGroupPostFilter: when a gang did not fit, the profile's group
//! PostFilter plugins (DefaultPreemption) are asked, in order, to make room for it as one unit
//! (upstream's RunPodGroupPostFilterPlugins); the first that succeeds decides.

use crate::k8s::pod::Pod;
use crate::scheduler::Scheduler;
use crate::scheduler::explain::PreemptionExplanation;
use crate::scheduler::framework::group_post_filter::{ChosenVictim, Placement};
use crate::scheduler::framework::group_post_filter::{
    GroupPostFilterContext, GroupPreemptor, TrialCluster, VictimGroup,
};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::priority;
use crate::scheduler::framework::{Code, QueuedPodInfo};
use crate::scheduler::group_placement::{GROUP_UNSCHEDULABLE, Trial, evaluate};
use crate::scheduler::group_topology;
use crate::scheduler::informers::pod_groups::{self, Group, GroupApi};
use crate::scheduler::plugins::gangs::Gang;

/// What the group's preemption said: its words (appended to the group's message), whether no
/// preemption can resolve the group (upstream's UnschedulableAndUnresolvable: no victims, until
/// 1.38), and on success the node each member (by index) is nominated to.
pub struct GroupPreemption {
    pub words: String,
    pub unresolvable: bool,
    pub succeeded: bool,
    pub nominations: Vec<(usize, String)>,
}

/// How many groups' last preemption [`Preemptions`] keeps.
const PREEMPTIONS_KEPT: usize = 1024;

/// The last preemption each group decided (by its key), for `tether explain`: at most
/// [`PREEMPTIONS_KEPT`] groups, the oldest record forgotten first.
#[derive(Default)]
pub struct Preemptions {
    inner: std::sync::Mutex<(
        std::collections::HashMap<String, PreemptionExplanation>,
        std::collections::VecDeque<String>,
    )>,
}

impl Preemptions {
    /// Keeps `victims`, chosen now by `preemptor`, as the last preemption of `group`.
    pub fn record(&self, group: String, preemptor: String, victims: Vec<ChosenVictim>) {
        if victims.is_empty() {
            return;
        }
        let mut inner = crate::locks::lock(&self.inner);
        let (records, order) = &mut *inner;
        let fresh = records
            .insert(
                group.clone(),
                PreemptionExplanation {
                    preemptor,
                    at: jiff::Timestamp::now().to_string(),
                    victims,
                },
            )
            .is_none();
        if fresh {
            order.push_back(group);
            while order.len() > PREEMPTIONS_KEPT {
                if let Some(oldest) = order.pop_front() {
                    records.remove(&oldest);
                }
            }
        }
    }

    /// The last preemption `group` decided, if kept.
    pub fn last(&self, group: &str) -> Option<PreemptionExplanation> {
        crate::locks::lock(&self.inner).0.get(group).cloned()
    }
}

/// A member's preemption policy, `PreemptLowerPriority` when unset.
pub fn policy(pod: &Pod) -> String {
    pod.spec
        .as_ref()
        .and_then(|s| s.preemption_policy.clone())
        .unwrap_or_else(|| "PreemptLowerPriority".to_string())
}

/// Runs the profile's group PostFilter plugins for `gang`, whose `members` (in the cycle's
/// order; `already` more scheduled before) did not fit. None when the profile runs none, or the
/// group is not of the Workload API (a Coscheduling group is never a preemptor upstream).
pub fn run(
    sched: &Scheduler,
    profile: &CompiledProfile,
    gang: &Gang,
    members: &[QueuedPodInfo],
    already: usize,
) -> Option<GroupPreemption> {
    let Group::Workload(object) = &gang.group else {
        return None;
    };
    // The group's preemption policy: 1.38's the PodGroup's where it sets one; else (and in
    // 1.37, PodGroupPreemptionPolicy off) Never when any member to place says Never.
    let members_never = members.iter().any(|m| policy(&m.pod.pod) == "Never");
    let never = match object.spec.preemption_policy.as_deref() {
        Some(set) if !set.is_empty() && profile.release.at_least(38) => set == "Never",
        _ => members_never,
    };
    let preemptor = GroupPreemptor {
        namespace: gang.key.namespace.clone(),
        name: gang.key.name.clone(),
        uid: object.metadata.uid.clone().unwrap_or_default(),
        api_version: "scheduling.k8s.io/v1beta1".into(),
        kind: "PodGroup".into(),
        scheduler_name: members
            .first()
            .map(|m| crate::k8s::pods::scheduler_name(&m.pod.pod).to_string())
            .unwrap_or_default(),
        priority: gang
            .group
            .priority()
            .or_else(|| members.first().map(|m| priority(&m.pod.pod)))
            .unwrap_or(0),
        never,
    };
    let place = |trial: TrialCluster<'_>| place_on(sched, profile, members, (gang, already), trial);
    preempt(sched, profile, &preemptor, members, &place)
}

/// Runs the profile's group PostFilter plugins for `preemptor`, whose `members` (in the cycle's
/// order) `place` puts on a trial cluster; None when the profile runs none.
pub fn preempt(
    sched: &Scheduler,
    profile: &CompiledProfile,
    preemptor: &GroupPreemptor,
    members: &[QueuedPodInfo],
    place: &crate::scheduler::framework::group_post_filter::PlaceFn<'_>,
) -> Option<GroupPreemption> {
    let plugins: Vec<_> = profile
        .post_filter
        .iter()
        .filter_map(|p| p.group_post_filter())
        .collect();
    if plugins.is_empty() {
        return None;
    }
    let pods: Vec<_> = members.iter().map(|m| m.pod.clone()).collect();
    let snapshot = sched.lock_cache().snapshot();
    let nominated = sched.state.room.for_group();
    let group_of = |pod: &Pod| victim_group(sched, pod);
    let ctx = GroupPostFilterContext {
        profile,
        preemptor,
        members: &pods,
        snapshot: &snapshot,
        nominated: &nominated,
        group_of: &group_of,
        place,
    };
    let mut reasons = Vec::new();
    for plugin in plugins {
        let result = plugin.group_post_filter(&ctx);
        let status = result.status;
        match status.code {
            Code::Success => {
                let unit = format!(
                    "{} {}/{}",
                    preemptor.entity(),
                    preemptor.namespace,
                    preemptor.name
                );
                sched.preemptions.record(
                    format!(
                        "{}/{}/{}",
                        preemptor.entity(),
                        preemptor.namespace,
                        preemptor.name
                    ),
                    unit,
                    result.victims,
                );
                return Some(GroupPreemption {
                    words: status.message(),
                    unresolvable: false,
                    succeeded: true,
                    nominations: result.nominations,
                });
            }
            Code::UnschedulableAndUnresolvable => {
                return Some(GroupPreemption {
                    words: status.message(),
                    unresolvable: true,
                    succeeded: false,
                    nominations: Vec::new(),
                });
            }
            _ => reasons.push(status.message()),
        }
    }
    Some(GroupPreemption {
        words: reasons.join(", "),
        unresolvable: false,
        succeeded: false,
        nominations: Vec::new(),
    })
}

/// The group of a pod on a node as preemption sees it: a pod naming a Workload API PodGroup;
/// its `disruptionMode` and priority when the group is known.
fn victim_group(sched: &Scheduler, pod: &Pod) -> Option<VictimGroup> {
    let key = pod_groups::group_of(pod)?;
    if key.api != GroupApi::Workload {
        return None;
    }
    if let Some(ancestor) = sched.pod_groups.all_ancestor(&key) {
        // Under a CompositePodGroup whose disruptionMode is All: its whole hierarchy goes.
        return Some(VictimGroup {
            key: ancestor.key().to_string(),
            disrupt_all: true,
            priority: ancestor.priority,
        });
    }
    let group = match sched.pod_groups.get(&key) {
        Some(Group::Workload(group)) => Some(group),
        _ => None,
    };
    Some(VictimGroup {
        key: key.to_string(),
        disrupt_all: group.as_ref().is_some_and(|g| {
            g.spec
                .disruption_mode
                .as_ref()
                .is_some_and(|d| d.all.is_some())
        }),
        priority: group.and_then(|g| g.spec.priority),
    })
}

/// Where the group cycle would place the members on `trial` (upstream's
/// PodGroupSchedulingFunc, for group preemption): in the best domain of its topology
/// constraint where it has one, else on the whole cluster. Nothing is held once it returns.
pub fn place_on(
    sched: &Scheduler,
    profile: &CompiledProfile,
    members: &[QueuedPodInfo],
    (gang, already): (&Gang, usize),
    trial: TrialCluster<'_>,
) -> Placement {
    let whole = Trial {
        snapshot: trial.snapshot,
        removed: trial.removed,
        ranks: trial.ranks,
        placement: None,
    };
    let evaluation = match group_topology::key_of(gang, profile.release) {
        Some(key) => {
            match group_topology::search(sched, profile, members, (gang, already), &whole, &key) {
                group_topology::Search::Placed { winner, .. } => winner,
                group_topology::Search::Refused { message, .. } => return Err(message),
                group_topology::Search::Error { status, .. } => return Err(status.message()),
            }
        }
        None => evaluate(sched, profile, members, (already, gang.min_count), &whole),
    };
    if let Some((_, status)) = &evaluation.error {
        return Err(status.message());
    }
    if let Some(message) = evaluation.group_failure {
        return Err(message);
    }
    if evaluation.placed.is_empty() {
        return Err(GROUP_UNSCHEDULABLE.into());
    }
    Ok(evaluation
        .placed
        .into_iter()
        .map(|a| (a.index, a.node))
        .collect())
}
