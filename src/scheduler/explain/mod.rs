//! `tether explain`: a scheduling cycle run dry and written down. The pod's profile runs on a
//! snapshot as the scheduling cycle runs it (PreFilter, Filter, PreScore, Score, weights), but
//! nothing is reserved, assumed or bound, and every verdict is kept: each Filter plugin's on
//! every node (not only the first rejection), each Score plugin's raw and normalized score on
//! every feasible node. Pure: the caller hands in the snapshot and the profile.
//!
//! Two differences from the cycle, both so that the answer covers the whole cluster: every node
//! is filtered (the cycle stops once it has found `percentageOfNodesToScore` of them, which
//! matters above 100 nodes), and PostFilter (preemption) does not run (it would evict).

mod group;
mod hierarchy;
pub mod pending;
pub mod render;
mod types;

use std::collections::BTreeMap;
use std::sync::Arc;

pub use self::group::{Gang, GroupLimits, explain_domains, explain_group};
pub use self::hierarchy::explain_hierarchy;
pub use self::types::{
    Admission, Blocker, Explanation, FilterVerdict, GroupExplanation, GroupMember, HeldRoom,
    HierarchyExplanation, HierarchyGroup, NodeFilters, NodeScores, PluginScore,
    PreemptionExplanation, held_requests,
};
use crate::k8s::pod::Pod;
use crate::scheduler::algorithm;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::{
    self, Diagnosis, PluginScores, PreFilterFailure, PreFiltered,
};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{CycleState, NominatedPods, Status};

/// Explains `pod`, pending or bound: a bound pod is explained as the pending pod it was, on a
/// snapshot whose node no longer counts it (its own requests must not count against it).
pub fn explain_pod(
    profile: &CompiledProfile,
    pod: &Pod,
    snapshot: &Snapshot,
    nominated: &dyn NominatedPods,
) -> Explanation {
    let (pending, snapshot, bound_to) = as_pending(pod, snapshot);
    explain(profile, &pending, &snapshot, nominated, bound_to)
}

/// The pod as the scheduler saw it before its bind, the snapshot without it, and the node it
/// is bound to. A pending pod is returned as it is.
fn as_pending(pod: &Pod, snapshot: &Snapshot) -> (PodInfo, Snapshot, Option<String>) {
    let bound_to = pod
        .spec
        .as_ref()
        .and_then(|s| s.node_name.clone())
        .filter(|n| !n.is_empty());
    let mut pending = pod.clone();
    if let Some(spec) = pending.spec.as_mut() {
        spec.node_name = None;
    }
    let uid = pod.metadata.uid.as_deref().unwrap_or_default();
    let snapshot = match bound_to
        .as_deref()
        .filter(|_| !uid.is_empty())
        .and_then(|n| snapshot.get(n))
    {
        Some(node) => {
            let mut without: NodeInfo = (**node).clone();
            if without.remove_pod(uid) {
                snapshot.with_node(without)
            } else {
                snapshot.clone()
            }
        }
        None => snapshot.clone(),
    };
    (PodInfo::new(Arc::new(pending)), snapshot, bound_to)
}

/// Runs `profile` for the pending `pod` on `snapshot` without reserving anything, and writes
/// down every verdict and score.
pub fn explain(
    profile: &CompiledProfile,
    pod: &PodInfo,
    snapshot: &Snapshot,
    nominated: &dyn NominatedPods,
    bound_to: Option<String>,
) -> Explanation {
    let mut out = Explanation {
        pod: pod.key(),
        bound_to,
        scheduler_name: profile.scheduler_name.clone(),
        profile: profile.source.clone(),
        nodes: snapshot.len(),
        ..Default::default()
    };
    let mut diagnosis = Diagnosis {
        num_all_nodes: snapshot.len(),
        ..Default::default()
    };
    if let Some(err) = &pod.parse_error {
        diagnosis.pre_filter_status =
            Some(Status::unresolvable(format!("invalid pod affinity: {err}")));
        out.message = Some(diagnosis.message());
        return out;
    }
    if snapshot.is_empty() {
        out.message = Some(diagnosis.message());
        return out;
    }
    let mut state = CycleState::new();
    let PreFiltered {
        result: narrowed,
        narrowed_by: narrowing,
    } = match profile.run_pre_filter(&mut state, pod, snapshot, &mut diagnosis) {
        Ok(done) => done,
        Err(failure) => {
            if let PreFilterFailure::Error(error) = failure {
                out.error = Some(error.message());
            }
            out.pre_filter = diagnosis.pre_filter_status.as_ref().map(verdict);
            out.message = Some(diagnosis.message());
            return out;
        }
    };
    if let Some(names) = &narrowed.node_names {
        diagnosis.absent_nodes_status = Some(runtime::left_out_status(&narrowing));
        out.narrowed_to = Some(names.iter().cloned().collect());
    }

    // Filter: every plugin on every node the search looks at.
    let mut feasible: Vec<Arc<NodeInfo>> = Vec::new();
    let mut nodes: Vec<&Arc<NodeInfo>> = snapshot.nodes().iter().collect();
    nodes.sort_by(|a, b| a.name.cmp(&b.name));
    for node in nodes {
        let left_out = narrowed
            .node_names
            .as_ref()
            .is_some_and(|names| !names.contains(&node.name));
        if left_out {
            out.filters.push(NodeFilters {
                node: node.name.clone(),
                feasible: false,
                left_out_by_pre_filter: true,
                verdicts: Vec::new(),
            });
            continue;
        }
        let counted = profile.run_filters_with_nominated(&state, pod, node, nominated, snapshot);
        // As the cycle's first pass: with the pods nominated here that come first, counted by
        // the PreFilter states too.
        let with = runtime::with_nominated(pod, node, nominated).map(|(with, ahead)| {
            let laid = profile.state_with_pods(&state, pod, node, &ahead, snapshot);
            (with, laid)
        });
        let with = with
            .as_ref()
            .map(|(w, laid)| (w, laid.as_ref().unwrap_or(&state)));
        let verdicts = every_filter(profile, &state, pod, node, with, counted.plugin);
        let fits = counted.is_success();
        if fits {
            feasible.push(Arc::clone(node));
        } else {
            diagnosis.node_statuses.push((node.name.clone(), counted));
        }
        out.filters.push(NodeFilters {
            node: node.name.clone(),
            feasible: fits,
            left_out_by_pre_filter: false,
            verdicts,
        });
    }
    if feasible.is_empty() {
        // As the cycle: a plugin's error on a node stops it only when no node fits.
        match diagnosis
            .node_statuses
            .iter()
            .find(|(_, s)| s.code == crate::scheduler::framework::Code::Error)
        {
            Some((_, err)) => out.error = Some(err.message()),
            None => {
                out.message = Some(diagnosis.message());
                out.blocked = blockers(&diagnosis, &out.filters);
            }
        }
        return out;
    }
    // The cycle tries the node the pod is nominated to (by preemption) first, alone.
    let nominated_to = runtime::nominated_node(&pod.pod)
        .filter(|n| feasible.iter().any(|f| f.name == *n))
        .map(str::to_string);

    // PreScore, Score, weights.
    let mut detail: Vec<PluginScores> = Vec::new();
    match algorithm::prioritize(
        profile,
        &mut state,
        pod,
        &feasible,
        snapshot,
        Some(&mut detail),
    ) {
        Ok(totals) => {
            out.scores = node_scores(&feasible, &totals, &detail);
            decide(&mut out, nominated_to);
        }
        // The cycle scores only when several nodes fit: one node wins without its scores.
        Err(_) if feasible.len() == 1 => out.winner = Some(feasible[0].name.clone()),
        Err(status) => out.error = Some(status.message()),
    }
    out
}

/// Every Filter plugin's verdict on one node (the cycle stops at the first rejection; here
/// each one answers): on the node with the pods nominated to it first (`with`, when there
/// are any), then, where that passed, on the node as it is. `counted` names the plugin whose
/// rejection the failure message counts.
fn every_filter(
    profile: &CompiledProfile,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    with: Option<(&NodeInfo, &CycleState)>,
    counted: Option<&'static str>,
) -> Vec<FilterVerdict> {
    let mut verdicts = Vec::new();
    for plugin in &profile.filter {
        let Some(f) = plugin.filter() else { continue };
        if state.skips_filter(plugin.name()) {
            verdicts.push(FilterVerdict {
                plugin: plugin.name().to_string(),
                code: "Skip".into(),
                ..Default::default()
            });
            continue;
        }
        let (status, on, on_state) = match with.map(|(w, s)| (f.filter(s, pod, w), w, s)) {
            Some((status, w, s)) if !status.is_success() => (status, w, s),
            _ => (f.filter(state, pod, node), node, state),
        };
        let remedy = (!status.is_success())
            .then(|| f.remedy(on_state, pod, on))
            .flatten();
        verdicts.push(FilterVerdict {
            plugin: plugin.name().to_string(),
            code: format!("{:?}", status.code),
            reasons: status.reasons,
            remedy,
            counted: counted == Some(plugin.name()),
        });
    }
    verdicts
}

/// A status as a verdict (a PreFilter rejection).
fn verdict(status: &Status) -> FilterVerdict {
    FilterVerdict {
        plugin: status.plugin.unwrap_or_default().to_string(),
        code: format!("{:?}", status.code),
        reasons: status.reasons.clone(),
        remedy: None,
        counted: true,
    }
}

/// The reasons the failure message counts, each with its nodes and what the rejecting plugins
/// said would have to change there; in the order of the message.
fn blockers(diagnosis: &Diagnosis, filters: &[NodeFilters]) -> Vec<Blocker> {
    let mut by_reason: BTreeMap<String, Blocker> = BTreeMap::new();
    let remedies: BTreeMap<(&str, &str), &str> = filters
        .iter()
        .flat_map(|n| {
            n.verdicts
                .iter()
                .filter(|v| v.counted)
                .filter_map(move |v| {
                    Some(((n.node.as_str(), v.plugin.as_str()), v.remedy.as_deref()?))
                })
        })
        .collect();
    for (node, status) in &diagnosis.node_statuses {
        for reason in &status.reasons {
            let entry = by_reason.entry(reason.clone()).or_insert_with(|| Blocker {
                reason: reason.clone(),
                plugin: status.plugin.unwrap_or_default().to_string(),
                ..Default::default()
            });
            entry.count += 1;
            entry.nodes.push(node.clone());
            let plugin = status.plugin.unwrap_or_default();
            if let Some(remedy) = remedies.get(&(node.as_str(), plugin))
                && !entry.remedies.iter().any(|r| r == remedy)
            {
                entry.remedies.push((*remedy).to_string());
            }
        }
    }
    let left_out: Vec<String> = filters
        .iter()
        .filter(|n| n.left_out_by_pre_filter)
        .map(|n| n.node.clone())
        .collect();
    if let Some(status) = diagnosis
        .absent_nodes_status
        .as_ref()
        .filter(|_| !left_out.is_empty())
    {
        for reason in &status.reasons {
            let entry = by_reason.entry(reason.clone()).or_insert_with(|| Blocker {
                reason: reason.clone(),
                plugin: "PreFilter".into(),
                ..Default::default()
            });
            entry.count += left_out.len();
            entry.nodes.extend(left_out.iter().cloned());
        }
    }
    let mut list: Vec<Blocker> = by_reason.into_values().collect();
    // As the message orders them: "count reason" compared as strings.
    list.sort_by_cached_key(|b| format!("{} {}", b.count, b.reason));
    list
}

/// Each feasible node's total and per-plugin scores, best first (ties by name).
fn node_scores(
    feasible: &[Arc<NodeInfo>],
    totals: &[crate::scheduler::framework::NodeScore],
    detail: &[PluginScores],
) -> Vec<NodeScores> {
    let mut scores: Vec<NodeScores> = feasible
        .iter()
        .enumerate()
        .map(|(i, node)| NodeScores {
            node: node.name.clone(),
            total: totals.get(i).map_or(0, |t| t.score),
            plugins: detail
                .iter()
                .map(|d| PluginScore {
                    plugin: d.plugin.to_string(),
                    raw: d.raw.get(i).copied().unwrap_or_default(),
                    normalized: d.normalized.get(i).copied().unwrap_or_default(),
                    weight: d.weight,
                    weighted: d.normalized.get(i).copied().unwrap_or_default() * d.weight,
                })
                .collect(),
        })
        .collect();
    scores.sort_by(|a, b| b.total.cmp(&a.total).then_with(|| a.node.cmp(&b.node)));
    scores
}

/// The winner (the node the pod is nominated to when it fits, as the cycle tries it first;
/// else the best total, with the nodes tied with it, of which the cycle picks one at random),
/// the runner-up and the margin.
fn decide(out: &mut Explanation, nominated_to: Option<String>) {
    let Some(best) = out.scores.first() else {
        return;
    };
    let top = best.total;
    out.tied = out
        .scores
        .iter()
        .filter(|s| s.total == top)
        .map(|s| s.node.clone())
        .collect();
    // A bound pod's winner is the node it went to when that node is among the best.
    let winner = match (&nominated_to, &out.bound_to) {
        (Some(nominated), _) => nominated.clone(),
        (None, Some(bound)) if out.tied.contains(bound) => bound.clone(),
        _ => best.node.clone(),
    };
    out.nominated = nominated_to.is_some();
    if let Some(second) = out.scores.iter().find(|s| s.node != winner) {
        let won = out
            .scores
            .iter()
            .find(|s| s.node == winner)
            .map_or(top, |s| s.total);
        out.runner_up = Some(second.node.clone());
        out.margin = Some(won - second.total);
    }
    out.winner = Some(winner);
}

#[cfg(test)]
mod tests;
