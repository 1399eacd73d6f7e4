//! `tether explain` on a member of a gang: the group cycle run dry over the gang's pending
//! members, each placed on a copy of the snapshot that holds the members placed before it, as
//! the cycle places them. It says which members fit where, what keeps the others out, and
//! whether `minCount` is reached. Pure; nothing is reserved (so a member's volumes or devices
//! are not counted against the next member, which the real cycle does through Reserve).

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;

use crate::scheduler::algorithm::{self, ScheduleResult};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::priority;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{CycleState, NominatedPods};

use super::types::{GroupExplanation, GroupMember};

/// The gang `pod_group` (namespace/name), with `min_count`, `scheduled_before` of its pods
/// assumed or bound already and `pending` waiting, tried whole on `snapshot`.
/// How much of a gang one explanation dry-runs: members × nodes is the caller's to ask, so it is
/// bounded by a count of members and a deadline (checked before each member), the work itself
/// cut short, not only the answer.
#[derive(Clone, Copy, Debug)]
pub struct GroupLimits {
    pub max_members: usize,
    pub deadline: Option<std::time::Instant>,
}

impl GroupLimits {
    /// No bound (the CLI's own simulation, and tests).
    pub const NONE: GroupLimits = GroupLimits {
        max_members: usize::MAX,
        deadline: None,
    };
}

#[allow(clippy::too_many_arguments)]
pub fn explain_group(
    profile: &CompiledProfile,
    pod_group: String,
    min_count: usize,
    scheduled_before: usize,
    mut pending: Vec<Arc<PodInfo>>,
    snapshot: &Snapshot,
    nominated: &dyn NominatedPods,
    limits: GroupLimits,
) -> GroupExplanation {
    pending.sort_by(|a, b| {
        priority(&b.pod)
            .cmp(&priority(&a.pod))
            .then_with(|| a.key().cmp(&b.key()))
    });
    let start = AtomicUsize::new(0);
    let mut current = snapshot.clone();
    let mut members = Vec::new();
    for pod in &pending {
        if members.len() >= limits.max_members
            || limits
                .deadline
                .is_some_and(|d| std::time::Instant::now() >= d)
        {
            break;
        }
        let mut state = CycleState::new();
        let result = algorithm::schedule_pod_with(
            profile, &mut state, pod, &current, &start, nominated, false,
        );
        let member = match result {
            ScheduleResult::Scheduled { node, .. } => {
                if let Some(info) = current.get(&node) {
                    let mut with_member = (**info).clone();
                    with_member.add_pod(pod.clone());
                    current = current.with_node(with_member);
                }
                GroupMember {
                    pod: pod.key(),
                    node: Some(node),
                    reason: None,
                }
            }
            ScheduleResult::Unschedulable(diagnosis) => GroupMember {
                pod: pod.key(),
                node: None,
                reason: Some(diagnosis.message()),
            },
            ScheduleResult::Error(status) => GroupMember {
                pod: pod.key(),
                node: None,
                reason: Some(status.message()),
            },
        };
        members.push(member);
    }
    let not_tried = pending.len().saturating_sub(members.len());
    let fit = members.iter().filter(|m| m.node.is_some()).count();
    let placed = scheduled_before.saturating_add(fit) >= min_count && fit > 0;
    let mut verdict = format!(
        "minCount {min_count}, {} scheduled before, {fit} of {} pending fit",
        scheduled_before,
        members.len()
    );
    if not_tried > 0 && !placed {
        verdict.push_str(&format!(
            ": not known; {not_tried} more members were not dry-run (past the explanation's cap of members or its deadline)"
        ));
    } else if placed {
        verdict.push_str(": the group is placed");
    } else if let Some(first) = members.iter().find_map(|m| {
        m.reason
            .as_ref()
            .map(|r| format!("{} does not: {r}", m.pod))
    }) {
        verdict.push_str(&format!(": the group is not placed; {first}"));
    } else {
        verdict.push_str(": the group is not placed (too few members)");
    }
    GroupExplanation {
        pod_group,
        min_count,
        scheduled_before,
        placed,
        members,
        verdict,
        not_tried,
    }
}
