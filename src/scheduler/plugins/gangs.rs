//! A pod's gang: which plugin serves a group of each API (GangScheduling the Workload API's,
//! Coscheduling scheduler-plugins'), and the gang a pod belongs to under a profile.

use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::informers::pod_groups::{self, Group, GroupApi, GroupKey, PodGroupIndex};
use crate::scheduler::plugins::{coscheduling, gang_scheduling};

/// A pod's gang: its PodGroup (of either API), with the gang policy.
pub struct Gang {
    pub key: GroupKey,
    pub group: Group,
    pub min_count: usize,
}

/// The plugin that serves groups of `api`: a profile places them only if it runs it.
pub fn plugin_for(api: GroupApi) -> &'static str {
    match api {
        GroupApi::Workload => gang_scheduling::NAME,
        GroupApi::Coscheduling => coscheduling::NAME,
    }
}

/// The gang `pod` belongs to, when `profile` runs the plugin of its group's API and its
/// PodGroup is in `groups` (the scheduler's, or a simulation's); a group of the basic policy
/// is a gang of `minCount` 1 (upstream's getMinCount). A pod of a group not seen (any more)
/// is scheduled alone.
pub fn gang_of_pod(
    groups: &PodGroupIndex,
    profile: &CompiledProfile,
    pod: &crate::k8s::pod::Pod,
) -> Option<Gang> {
    let key = pod_groups::group_of(pod)?;
    if !profile.uses(plugin_for(key.api)) {
        return None;
    }
    let group = groups.get(&key)?;
    let min_count = group.policy().min_count();
    Some(Gang {
        key,
        group,
        min_count,
    })
}

/// The hierarchy (1.38's CompositePodGroups) `profile` tries `pod` in: its root and the tree
/// under it, when the pod's PodGroup (in `groups`, the scheduler's or a simulation's) has a
/// parent, the profile runs GangScheduling, and the root is known.
pub fn hierarchy_of_pod(
    groups: &PodGroupIndex,
    profile: &CompiledProfile,
    pod: &crate::k8s::pod::Pod,
) -> Option<(
    pod_groups::composite::CompositeKey,
    pod_groups::composite::Tree,
)> {
    use pod_groups::composite::Root;
    let key = pod_groups::group_of(pod)?;
    if !profile.release.at_least(38)
        || !profile.uses(crate::scheduler::plugins::gang_scheduling::NAME)
        || !groups.has_parent(&key)
    {
        return None;
    }
    match groups.root_of(&key) {
        Ok(Some(Root::Composite(root))) => {
            let tree = groups.tree(&root)?;
            Some((root, tree))
        }
        _ => None,
    }
}
