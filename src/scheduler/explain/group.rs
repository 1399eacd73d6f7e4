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

use super::types::{DomainExplanation, GroupExplanation, GroupMember};
use crate::scheduler::framework::group_post_filter::{IN_PLACEMENT, InPlacement};
use crate::scheduler::group_topology::{Domain, fit_score, totals};

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
    pending: Vec<Arc<PodInfo>>,
    snapshot: &Snapshot,
    nominated: &dyn NominatedPods,
    limits: GroupLimits,
) -> GroupExplanation {
    let gang = Gang {
        pod_group,
        min_count,
        scheduled_before,
    };
    explain_in(profile, &gang, pending, snapshot, nominated, limits, None)
}

/// The group being explained: its PodGroup (namespace/name), `minCount` and members assumed or
/// bound already.
pub struct Gang {
    pub pod_group: String,
    pub min_count: usize,
    pub scheduled_before: usize,
}

/// The gang tried in each of `domains` (its topology key's), as the group cycle tries them:
/// each domain's verdict and score, the chosen one's members (or, when none holds the group,
/// the first's). Each domain's dry run is bounded by `limits`.
pub fn explain_domains(
    profile: &CompiledProfile,
    gang: &Gang,
    pending: Vec<Arc<PodInfo>>,
    snapshot: &Snapshot,
    nominated: &dyn NominatedPods,
    limits: GroupLimits,
    domains: &[Domain],
) -> GroupExplanation {
    let tried: Vec<GroupExplanation> = domains
        .iter()
        .map(|d| {
            explain_in(
                profile,
                gang,
                pending.clone(),
                snapshot,
                nominated,
                limits,
                Some(&d.nodes),
            )
        })
        .collect();
    let fits: Vec<usize> = (0..tried.len()).filter(|&i| tried[i].placed).collect();
    let runs_fit = profile.uses(crate::scheduler::plugins::noderesources::fit::NAME);
    let by_key: std::collections::HashMap<String, &Arc<PodInfo>> =
        pending.iter().map(|p| (p.key(), p)).collect();
    let counts: Vec<i64> = fits
        .iter()
        .map(|&i| {
            let fit = tried[i].members.iter().filter(|m| m.node.is_some()).count();
            i64::try_from(gang.scheduled_before.saturating_add(fit)).unwrap_or(i64::MAX)
        })
        .collect();
    let fit: Vec<Option<i64>> = fits
        .iter()
        .map(|&i| {
            runs_fit.then(|| {
                let placed = tried[i]
                    .members
                    .iter()
                    .filter(|m| m.node.is_some())
                    .filter_map(|m| by_key.get(&m.pod).map(|p| p.as_ref()));
                fit_score(snapshot, &domains[i].nodes, placed)
            })
        })
        .collect();
    let scores = totals(&counts, &fit);
    // The highest score, the first of equals (as the group cycle chooses).
    let mut best: Option<usize> = None;
    for k in 0..fits.len() {
        if best.is_none_or(|b| scores[k] > scores[b]) {
            best = Some(k);
        }
    }
    let chosen = best.map(|k| fits[k]);
    let mut rows = Vec::new();
    for (i, (domain, explained)) in domains.iter().zip(&tried).enumerate() {
        rows.push(DomainExplanation {
            domain: domain.name.clone(),
            nodes: domain.nodes.len(),
            placed: explained.placed,
            score: fits.iter().position(|&f| f == i).map(|k| scores[k]),
            chosen: chosen == Some(i),
            verdict: explained.verdict.clone(),
        });
    }
    let shown = chosen.unwrap_or(0);
    let mut out = tried.into_iter().nth(shown).unwrap_or_default();
    out.verdict = match chosen {
        Some(i) => format!(
            "placed within {:?}, the best of {} that fit",
            domains[i].name,
            fits.len()
        ),
        None => format!(
            "0/{} placements are available{}",
            domains.len(),
            rows.first()
                .map(|r| format!("; the first, {:?}: {}", r.domain, r.verdict))
                .unwrap_or_else(|| ": no node carries the key".into())
        ),
    };
    out.domains = rows;
    out
}

/// [`explain_group`] with the members searching `placement`'s nodes alone, when given.
fn explain_in(
    profile: &CompiledProfile,
    gang: &Gang,
    mut pending: Vec<Arc<PodInfo>>,
    snapshot: &Snapshot,
    nominated: &dyn NominatedPods,
    limits: GroupLimits,
    placement: Option<&Arc<std::collections::HashSet<String>>>,
) -> GroupExplanation {
    let Gang {
        pod_group,
        min_count,
        scheduled_before,
    } = gang;
    let (pod_group, min_count, scheduled_before) =
        (pod_group.clone(), *min_count, *scheduled_before);
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
        if let Some(nodes) = placement {
            state.write(IN_PLACEMENT, InPlacement(nodes.clone()));
        }
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
        domains: Vec::new(),
    }
}
