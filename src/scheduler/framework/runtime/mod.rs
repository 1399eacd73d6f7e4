//! Runs a [`CompiledProfile`]'s plugins, as kube-scheduler's frameworkImpl runs them: every
//! extension point has its runner here. This file holds PreEnqueue and the search for a node
//! (PreFilter once, Filter per node in parallel until enough feasible nodes are found, PreScore
//! once, Score per node in parallel, normalize, weigh); [`binding`] the points from Reserve on.

pub mod binding;

pub use self::binding::{
    PermitWait, run_bind, run_permit, run_post_bind, run_pre_bind, run_reserve, run_unreserve,
};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::Rng;
use rayon::prelude::*;

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    Code, CycleState, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeScore, NominatedPods, Nomination,
    PostFilterContext, PreFilterResult, Status,
};

/// Below this many nodes every node is filtered (kube-scheduler's minFeasibleNodesToFind).
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The least adaptive percentage (kube-scheduler's minFeasibleNodesPercentageToFind).
pub const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;

/// How many feasible nodes to look for before scoring, as kube-scheduler's
/// numFeasibleNodesToFind: all of a small cluster; else `percentage` of the nodes, where 0
/// means adaptive (50% minus 1% per 125 nodes, at least 5%), never fewer than 100.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return num_all_nodes;
    }
    let percentage = if percentage <= 0 {
        (50usize.saturating_sub(num_all_nodes / 125)).max(MIN_FEASIBLE_NODES_PERCENTAGE)
    } else {
        percentage as usize
    };
    (num_all_nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// Why a pod fits on no node: the status of each node that was filtered out, or of the
/// PreFilter plugin that rejected the pod outright.
#[derive(Clone, Debug, Default)]
pub struct Diagnosis {
    pub num_all_nodes: usize,
    pub node_statuses: Vec<(String, Status)>,
    pub pre_filter_status: Option<Status>,
    /// The status of the nodes PreFilter left out (upstream's absent nodes status), counted for
    /// every node without a status of its own.
    pub absent_nodes_status: Option<Status>,
    /// Plugins that rejected the pod; events that concern them requeue it.
    pub unschedulable_plugins: Vec<&'static str>,
    /// What PostFilter (preemption) said, appended to the message ("preemption: …").
    pub post_filter_message: Option<String>,
    /// What PostFilter decided of the pod's nominated node.
    pub nomination: Option<Nomination>,
}

impl Diagnosis {
    /// The earliest time a rejecting plugin asked to be asked again, if any did.
    pub fn retry_after(&self) -> Option<std::time::Duration> {
        self.pre_filter_status
            .iter()
            .chain(self.node_statuses.iter().map(|(_, s)| s))
            .filter_map(|s| s.retry_after)
            .min()
    }

    /// kube-scheduler's FitError message, byte for byte: "0/5 nodes are available: 2 Insufficient
    /// cpu, 3 node(s) had untolerated taint(s)." — each reason counted over the nodes (the nodes
    /// PreFilter left out under its absent-nodes reason), as "count reason" strings sorted as
    /// strings; a PreFilter rejection's message alone when PreFilter rejected the pod.
    pub fn message(&self) -> String {
        let n = self.num_all_nodes;
        if n == 0 {
            // Upstream's ErrNoNodesAvailable.
            return "no nodes available to schedule pods".into();
        }
        let mut message = format!("0/{n} nodes are available:");
        if let Some(status) = &self.pre_filter_status {
            message.push_str(&format!(" {}.", status.message()));
        } else {
            message.push_str(&self.histogram());
        }
        if let Some(post) = self.post_filter_message.as_ref().filter(|m| !m.is_empty()) {
            message.push(' ');
            message.push_str(post);
        }
        message
    }

    /// The nodes' reasons counted, as " 2 Insufficient cpu, 3 node(s) had untolerated
    /// taint(s)." (empty when no node has a status).
    fn histogram(&self) -> String {
        let n = self.num_all_nodes;
        let mut histogram: BTreeMap<&str, usize> = BTreeMap::new();
        for (_, status) in &self.node_statuses {
            for reason in &status.reasons {
                *histogram.entry(reason.as_str()).or_default() += 1;
            }
        }
        let absent = n.saturating_sub(self.node_statuses.len());
        if let Some(status) = self.absent_nodes_status.as_ref().filter(|_| absent > 0) {
            for reason in &status.reasons {
                *histogram.entry(reason.as_str()).or_default() += absent;
            }
        }
        let mut parts: Vec<String> = histogram
            .into_iter()
            .map(|(reason, count)| format!("{count} {reason}"))
            .collect();
        parts.sort();
        if parts.is_empty() {
            String::new()
        } else {
            format!(" {}.", parts.join(", "))
        }
    }
}

/// How the chosen node won, for the `Scheduled` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The best total score among `feasible` scored nodes; the best of the others with its
    /// total.
    Scored {
        score: i64,
        runner_up: Option<NodeScore>,
        feasible: usize,
    },
    /// The one node that passed the filters: nothing was scored.
    OnlyFeasible,
    /// The node the pod was nominated to (by preemption), which passed the filters.
    Nominated,
}

impl Choice {
    /// How `chosen` won among `scores`.
    pub fn scored(chosen: &str, scores: &[NodeScore]) -> Choice {
        let score = scores
            .iter()
            .find(|s| s.name == chosen)
            .map_or(0, |s| s.score);
        let runner_up = scores
            .iter()
            .filter(|s| s.name != chosen)
            .max_by(|a, b| a.score.cmp(&b.score).then_with(|| b.name.cmp(&a.name)))
            .cloned();
        Choice::Scored {
            score,
            runner_up,
            feasible: scores.len(),
        }
    }
}

/// The outcome of a scheduling attempt before Reserve.
#[derive(Debug)]
pub enum ScheduleResult {
    /// The chosen node, how many nodes were evaluated and how many were feasible, and how it
    /// won.
    Scheduled {
        node: String,
        evaluated: usize,
        feasible: usize,
        choice: Choice,
    },
    Unschedulable(Diagnosis),
    Error(Status),
}

/// Runs PreEnqueue: the name of the first plugin that holds the pod back (a scheduling gate),
/// or `None` when the pod may enter the active queue.
pub fn run_pre_enqueue(profile: &CompiledProfile, pod: &PodInfo) -> Option<&'static str> {
    profile.pre_enqueue.iter().find_map(|p| {
        let status = p.pre_enqueue()?.pre_enqueue(pod);
        (!status.is_success()).then(|| p.name())
    })
}

/// Runs the scheduling algorithm (kube-scheduler's schedulePod) of `profile` for `pod`.
/// `start_index` rotates where the search begins, so that successive pods look at different
/// nodes first when only a share of the nodes is filtered.
pub fn schedule_pod(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    start_index: &AtomicUsize,
    nominated: &dyn NominatedPods,
) -> ScheduleResult {
    let unschedulable = |state: &mut CycleState, diagnosis: Diagnosis| {
        ScheduleResult::Unschedulable(post_filter(
            profile, state, pod, snapshot, nominated, diagnosis,
        ))
    };
    let num_all = snapshot.len();
    if num_all == 0 {
        return ScheduleResult::Unschedulable(Diagnosis {
            num_all_nodes: 0,
            ..Default::default()
        });
    }
    let mut diagnosis = Diagnosis {
        num_all_nodes: num_all,
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let pre_filtered = pre_filter(profile, state, pod, snapshot, &mut diagnosis);
    let code = match &pre_filtered {
        Ok(_) => Code::Success,
        Err(Some(error)) => error.code,
        Err(None) => diagnosis
            .pre_filter_status
            .as_ref()
            .map_or(Code::Unschedulable, |s| s.code),
    };
    state.record_timing("PreFilter", code, started.elapsed());
    let (narrowed, narrowing) = match pre_filtered {
        Ok(done) => done,
        Err(Some(error)) => return ScheduleResult::Error(error),
        Err(None) => return unschedulable(state, diagnosis),
    };

    // A node the pod was nominated to (by preemption) is tried first, alone, as upstream's
    // evaluateNominatedNode: the room made for it is there.
    if let Some(node) = nominated_node(&pod.pod)
        .filter(|n| {
            narrowed
                .node_names
                .as_ref()
                .is_none_or(|names| names.contains(*n))
        })
        .and_then(|n| snapshot.get(n))
        && run_filters_with_nominated(profile, state, pod, node, nominated).is_success()
    {
        return ScheduleResult::Scheduled {
            node: node.name.clone(),
            evaluated: 1,
            feasible: 1,
            choice: Choice::Nominated,
        };
    }

    // Filter.
    let candidates: Vec<&Arc<NodeInfo>> = match &narrowed.node_names {
        Some(names) => {
            diagnosis.absent_nodes_status = Some(left_out_status(&narrowing));
            names.iter().filter_map(|n| snapshot.get(n)).collect()
        }
        None => snapshot.nodes().iter().collect(),
    };
    if candidates.is_empty() {
        // PreFilter named only nodes that do not exist: every node is absent.
        diagnosis
            .unschedulable_plugins
            .extend(narrowing.iter().copied());
        return unschedulable(state, diagnosis);
    }
    let (feasible, rejected, evaluated) = find_feasible(
        profile,
        state,
        pod,
        &candidates,
        start_index,
        num_all,
        nominated,
    );
    if feasible.is_empty() {
        let mut plugins: Vec<&'static str> =
            rejected.iter().filter_map(|(_, s)| s.plugin).collect();
        plugins.sort_unstable();
        plugins.dedup();
        if let Some((_, err)) = rejected.iter().find(|(_, s)| s.code == Code::Error) {
            return ScheduleResult::Error(err.clone());
        }
        diagnosis.unschedulable_plugins = plugins;
        diagnosis.node_statuses = rejected;
        return unschedulable(state, diagnosis);
    }
    if feasible.len() == 1 {
        return ScheduleResult::Scheduled {
            node: feasible[0].name.clone(),
            evaluated,
            feasible: 1,
            choice: Choice::OnlyFeasible,
        };
    }

    // PreScore, Score.
    let scores = match prioritize(profile, state, pod, &feasible, snapshot, None) {
        Ok(scores) => scores,
        Err(status) => return ScheduleResult::Error(status),
    };
    let node = select_host(&scores);
    let choice = Choice::scored(&node, &scores);
    ScheduleResult::Scheduled {
        node,
        evaluated,
        feasible: feasible.len(),
        choice,
    }
}

/// Runs PreFilter alone (tests that need a cycle's state without its filters): the nodes it
/// narrowed the search to, or the status that rejected the pod.
#[cfg(test)]
pub fn run_pre_filter(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
) -> Result<PreFilterResult, Status> {
    let mut diagnosis = Diagnosis::default();
    match pre_filter(profile, state, pod, snapshot, &mut diagnosis) {
        Ok((narrowed, _)) => Ok(narrowed),
        Err(Some(error)) => Err(error),
        Err(None) => Err(diagnosis
            .pre_filter_status
            .unwrap_or_else(|| Status::unresolvable("rejected by PreFilter"))),
    }
}

/// Runs again, into `state`, the PreFilter of the plugins whose PreFilter reads other pods,
/// against `snapshot` (a preemption dry run's changed node): the other plugins' PreFilter
/// answers depend on the pod alone and stand. The status that rejects the pod, if one does.
pub fn rerun_pod_reading_pre_filters(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
) -> Result<(), Status> {
    for plugin in profile
        .pre_filter
        .iter()
        .filter(|p| p.pre_filter_reads_pods())
    {
        let Some(pf) = plugin.pre_filter() else {
            continue;
        };
        let (_, status) = pf.pre_filter(state, pod, snapshot);
        let status = status.with_plugin(plugin.name());
        if status.is_skip() {
            state.mark_skip_filter(plugin.name());
        } else if status.is_success() {
            state.unmark_skip_filter(plugin.name());
        } else {
            return Err(status);
        }
    }
    Ok(())
}

/// PreFilter (as upstream's RunPreFilterPlugins): the nodes the plugins narrowed the search to
/// and which plugins narrowed it; `Err(None)` when the pod was rejected (`diagnosis` says how),
/// `Err(Some(status))` on an error.
pub(crate) fn pre_filter(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    diagnosis: &mut Diagnosis,
) -> Result<(PreFilterResult, BTreeSet<&'static str>), Option<Status>> {
    let mut narrowed = PreFilterResult::all_nodes();
    // As upstream's RunPreFilterPlugins: UnschedulableAndUnresolvable stops at once; an
    // Unschedulable answer lets the other plugins run and rejects the pod after them.
    let mut rejected_by: Option<Status> = None;
    let mut narrowing: BTreeSet<&'static str> = BTreeSet::new();
    for plugin in &profile.pre_filter {
        let Some(pf) = plugin.pre_filter() else {
            continue;
        };
        let clock = state.plugin_clock();
        let (result, status) = pf.pre_filter(state, pod, snapshot);
        state.record_plugin(plugin.name(), "PreFilter", status.code, clock);
        let status = status.with_plugin(plugin.name());
        if status.is_skip() {
            state.mark_skip_filter(plugin.name());
            continue;
        }
        if status.code == Code::UnschedulableAndUnresolvable {
            diagnosis.unschedulable_plugins.push(plugin.name());
            diagnosis.pre_filter_status = Some(status);
            return Err(None);
        }
        if status.code == Code::Unschedulable {
            diagnosis.unschedulable_plugins.push(plugin.name());
            rejected_by = Some(status);
            continue;
        }
        if !status.is_success() {
            return Err(Some(status));
        }
        if result.node_names.is_some() {
            narrowing.insert(plugin.name());
        }
        narrowed = narrowed.merge(result);
        if narrowed.node_names.as_ref().is_some_and(|n| n.is_empty()) {
            let names: Vec<&str> = narrowing.iter().copied().collect();
            let message = match names.as_slice() {
                [one] => format!("node(s) didn't satisfy plugin {one}"),
                many => format!(
                    "node(s) didn't satisfy plugin(s) [{}] simultaneously",
                    many.join(" ")
                ),
            };
            diagnosis.unschedulable_plugins.extend(names);
            diagnosis.pre_filter_status = Some(Status::unresolvable(message));
            return Err(None);
        }
    }
    if let Some(status) = rejected_by {
        diagnosis.pre_filter_status = Some(status);
        return Err(None);
    }
    Ok((narrowed, narrowing))
}

/// Runs every Filter plugin on one node, stopping at the first that rejects it.
pub fn run_filters(
    profile: &CompiledProfile,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
) -> Status {
    for plugin in &profile.filter {
        let Some(f) = plugin.filter() else { continue };
        if state.skips_filter(plugin.name()) {
            continue;
        }
        let clock = state.plugin_clock();
        let status = f.filter(state, pod, node);
        state.record_plugin(plugin.name(), "Filter", status.code, clock);
        if !status.is_success() {
            return status.with_plugin(plugin.name());
        }
    }
    Status::success()
}

/// `status.nominatedNodeName`, when set.
pub fn nominated_node(pod: &k8s_openapi::api::core::v1::Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// `spec.priority`, 0 when unset.
pub fn priority(pod: &k8s_openapi::api::core::v1::Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// Runs the filters as upstream's RunFilterPluginsWithNominatedPods: when pods of at least
/// the pod's priority are nominated to the node, first with them counted on it (the pod must
/// leave them room), then, if that passed, without them (what holds only with them there,
/// such as affinity to them, must not decide).
pub fn run_filters_with_nominated(
    profile: &CompiledProfile,
    state: &CycleState,
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &dyn NominatedPods,
) -> Status {
    let Some(with) = with_nominated(pod, node, nominated) else {
        return run_filters(profile, state, pod, node);
    };
    let status = run_filters(profile, state, pod, &with);
    if !status.is_success() {
        return status;
    }
    run_filters(profile, state, pod, node)
}

/// The node with the pods nominated to it that `pod` must leave room for (those of at least
/// its priority), or `None` when there are none.
pub fn with_nominated(
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &dyn NominatedPods,
) -> Option<NodeInfo> {
    let own = priority(&pod.pod);
    let ahead: Vec<Arc<PodInfo>> = nominated
        .for_node(&node.name)
        .into_iter()
        .filter(|p| p.uid() != pod.uid() && priority(&p.pod) >= own)
        .collect();
    if ahead.is_empty() {
        return None;
    }
    let mut with = node.clone();
    for p in ahead {
        with.add_pod(p);
    }
    Some(with)
}

/// The status counted for the nodes PreFilter left out, naming the plugins that narrowed.
pub fn left_out_status(narrowing: &BTreeSet<&'static str>) -> Status {
    let list: Vec<&str> = narrowing.iter().copied().collect();
    Status::unresolvable(format!(
        "node(s) didn't satisfy plugin(s) [{}]",
        list.join(" ")
    ))
}

/// Runs PostFilter (as upstream's RunPostFilterPlugins): the first plugin that succeeds
/// decides the nomination; its message, or the rejections' joined, is added to the diagnosis.
fn post_filter(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    nominated: &dyn NominatedPods,
    mut diagnosis: Diagnosis,
) -> Diagnosis {
    if profile.post_filter.is_empty() {
        return diagnosis;
    }
    let started = std::time::Instant::now();
    let mut messages = Vec::new();
    let mut code = Code::Unschedulable;
    for plugin in &profile.post_filter {
        let Some(pf) = plugin.post_filter() else {
            continue;
        };
        let clock = state.plugin_clock();
        let (nomination, status) = pf.post_filter(&PostFilterContext {
            profile,
            state,
            pod,
            snapshot,
            diagnosis: &diagnosis,
            nominated,
        });
        state.record_plugin(plugin.name(), "PostFilter", status.code, clock);
        if status.is_success() {
            diagnosis.nomination = Some(nomination);
            code = Code::Success;
            messages.clear();
            break;
        }
        messages.push(status.message());
        if !status.is_rejected() {
            // An error decides nothing of the nomination.
            code = status.code;
            break;
        }
        if nomination != Nomination::Keep {
            diagnosis.nomination = Some(nomination);
        }
        if status.code == Code::UnschedulableAndUnresolvable {
            break;
        }
    }
    state.record_timing("PostFilter", code, started.elapsed());
    let message = messages.join(", ");
    if !message.is_empty() {
        diagnosis.post_filter_message = Some(message);
    }
    diagnosis
}

type Feasible<'a> = (Vec<Arc<NodeInfo>>, Vec<(String, Status)>, usize);

/// Filters nodes in parallel from `start_index` round-robin, until enough feasible nodes are
/// found (kube-scheduler's findNodesThatPassFilters): how many is counted over `candidates`,
/// the nodes PreFilter left, and `num_all` (every node of the snapshot) wraps the start index. Returns the feasible nodes, the
/// rejections, and how many nodes were evaluated.
fn find_feasible<'a>(
    profile: &CompiledProfile,
    state: &CycleState,
    pod: &PodInfo,
    candidates: &[&'a Arc<NodeInfo>],
    start_index: &AtomicUsize,
    num_all: usize,
    nominated: &dyn NominatedPods,
) -> Feasible<'a> {
    let nominated = nominated.any().then_some(nominated);
    let n = candidates.len();
    // Counted over the nodes PreFilter left, as upstream's findNodesThatPassFilters.
    let want = num_feasible_nodes_to_find(profile.percentage_of_nodes_to_score, n).min(n);
    let next_start = start_index.load(Ordering::Relaxed);
    let start = next_start % n;
    let found = AtomicUsize::new(0);
    let results: Vec<(usize, Option<Status>)> = (0..n)
        .into_par_iter()
        .with_min_len(16)
        .filter_map(|i| {
            if found.load(Ordering::Relaxed) >= want {
                return None;
            }
            let node = candidates[(start + i) % n];
            let status = match nominated {
                None => run_filters(profile, state, pod, node),
                Some(nominated) => run_filters_with_nominated(profile, state, pod, node, nominated),
            };
            if status.is_success() {
                if found.fetch_add(1, Ordering::Relaxed) >= want {
                    return None;
                }
                Some((i, None))
            } else {
                Some((i, Some(status)))
            }
        })
        .collect();
    let evaluated = results.iter().map(|(i, _)| i + 1).max().unwrap_or(0);
    // As upstream's nextStartNodeIndex: advanced by the nodes processed, modulo all nodes.
    start_index.store((next_start + evaluated) % num_all.max(1), Ordering::Relaxed);
    let mut feasible = Vec::with_capacity(want);
    let mut rejected = Vec::new();
    for (i, status) in results {
        let node = candidates[(start + i) % n];
        match status {
            None => feasible.push(Arc::clone(node)),
            Some(s) => rejected.push((node.name.clone(), s)),
        }
    }
    (feasible, rejected, evaluated)
}

/// One Score plugin's scores of the nodes, in the order of the nodes scored: raw (as Score
/// returned them) and normalized, and the weight the profile gives the plugin.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginScores {
    pub plugin: &'static str,
    pub weight: i64,
    pub raw: Vec<i64>,
    pub normalized: Vec<i64>,
}

/// PreScore, Score (parallel over nodes), NormalizeScore and weights: the total per node.
/// `detail`, when given, receives each Score plugin's scores (`tether explain`).
pub fn prioritize(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    snapshot: &Snapshot,
    detail: Option<&mut Vec<PluginScores>>,
) -> Result<Vec<NodeScore>, Status> {
    let started = std::time::Instant::now();
    for plugin in &profile.pre_score {
        let Some(ps) = plugin.pre_score() else {
            continue;
        };
        let clock = state.plugin_clock();
        let status = ps
            .pre_score(state, pod, nodes, snapshot)
            .with_plugin(plugin.name());
        state.record_plugin(plugin.name(), "PreScore", status.code, clock);
        if status.is_skip() {
            state.mark_skip_score(plugin.name());
        } else if !status.is_success() {
            state.record_timing("PreScore", status.code, started.elapsed());
            return Err(status);
        }
    }
    state.record_timing("PreScore", Code::Success, started.elapsed());
    let started = std::time::Instant::now();
    let scored = score(profile, state, pod, nodes, detail);
    let code = scored.as_ref().map_or_else(|s| s.code, |_| Code::Success);
    state.record_timing("Score", code, started.elapsed());
    scored
}

/// Score (parallel over nodes), NormalizeScore and weights: the total per node.
fn score(
    profile: &CompiledProfile,
    state: &CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    mut detail: Option<&mut Vec<PluginScores>>,
) -> Result<Vec<NodeScore>, Status> {
    let mut totals: Vec<NodeScore> = nodes
        .iter()
        .map(|n| NodeScore {
            name: n.name.clone(),
            score: 0,
        })
        .collect();
    for weighted in &profile.score {
        let plugin = &weighted.plugin;
        let Some(sp) = plugin.score() else { continue };
        if state.skips_score(plugin.name()) {
            continue;
        }
        let raw: Result<Vec<i64>, Status> = nodes
            .par_iter()
            .with_min_len(16)
            .map(|node| {
                let clock = state.plugin_clock();
                let score = sp.score(state, pod, node);
                let code = score.as_ref().map_or_else(|s| s.code, |_| Code::Success);
                state.record_plugin(plugin.name(), "Score", code, clock);
                score.map_err(|s| s.with_plugin(plugin.name()))
            })
            .collect();
        let raw = raw?;
        let mut scores: Vec<NodeScore> = raw
            .iter()
            .zip(nodes)
            .map(|(&score, n)| NodeScore {
                name: n.name.clone(),
                score,
            })
            .collect();
        let clock = state.plugin_clock();
        let status = sp.normalize_scores(state, pod, &mut scores);
        state.record_plugin(plugin.name(), "ScoreExtensionNormalize", status.code, clock);
        if !status.is_success() {
            return Err(status.with_plugin(plugin.name()));
        }
        for (total, s) in totals.iter_mut().zip(&scores) {
            if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&s.score) {
                return Err(Status::error(format!(
                    "plugin {} returned an invalid score {} for node {}",
                    plugin.name(),
                    s.score,
                    s.name
                ))
                .with_plugin(plugin.name()));
            }
            total.score += s.score * weighted.weight;
        }
        if let Some(detail) = detail.as_deref_mut() {
            detail.push(PluginScores {
                plugin: plugin.name(),
                weight: weighted.weight,
                raw,
                normalized: scores.iter().map(|s| s.score).collect(),
            });
        }
    }
    Ok(totals)
}

/// The node with the highest total; ties broken uniformly at random (reservoir sampling),
/// as kube-scheduler's selectHost.
pub fn select_host(scores: &[NodeScore]) -> String {
    let mut rng = rand::rng();
    let mut best: Option<&NodeScore> = None;
    let mut ties = 0u32;
    for s in scores {
        match best {
            Some(b) if s.score < b.score => {}
            Some(b) if s.score == b.score => {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    best = Some(s);
                }
            }
            _ => {
                best = Some(s);
                ties = 1;
            }
        }
    }
    best.map(|b| b.name.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::NoNominations;
    use crate::scheduler::plugins::registry::Handle;
    use crate::scheduler::profile::default_profile;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

    #[test]
    fn feasible_nodes_to_find_is_adaptive_as_kube_scheduler() {
        assert_eq!(
            num_feasible_nodes_to_find(0, 50),
            50,
            "small clusters: every node"
        );
        assert_eq!(
            num_feasible_nodes_to_find(0, 5000),
            5000 * 10 / 100,
            "50% - 5000/125 = 10%"
        );
        assert_eq!(
            num_feasible_nodes_to_find(0, 100_000),
            5000,
            "never under 5%"
        );
        assert_eq!(num_feasible_nodes_to_find(30, 1000), 300);
        assert_eq!(
            num_feasible_nodes_to_find(1, 1000),
            100,
            "never under 100 nodes"
        );
        assert_eq!(num_feasible_nodes_to_find(100, 1000), 1000);
    }

    #[test]
    fn feasible_nodes_are_counted_over_the_nodes_prefilter_left() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let snap = snapshot(
            (0..300)
                .map(|i| NodeBuilder::new(&format!("n{i:03}")))
                .collect(),
            vec![],
        );
        let names: Vec<String> = (0..150).map(|i| format!("n{i:03}")).collect();
        let pod = PodBuilder::new("p")
            .with(|p| {
                p.spec.get_or_insert_with(Default::default).affinity = serde_json::from_value(
                    serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                        {"nodeSelectorTerms": [{"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": names}]}]}}}),
                )
                .ok();
            })
            .info();
        let mut state = CycleState::new();
        match schedule_pod(
            &profile,
            &mut state,
            &pod,
            &snap,
            &AtomicUsize::new(0),
            &NoNominations,
        ) {
            ScheduleResult::Scheduled { feasible, .. } => assert_eq!(
                feasible,
                num_feasible_nodes_to_find(0, 150),
                "150 nodes after PreFilter: 100 to find, not 300's 144"
            ),
            other => panic!("want a node, got {other:?}"),
        }
    }

    #[test]
    fn nodes_prefilter_left_out_are_counted_under_the_plugins_that_narrowed() {
        let d = Diagnosis {
            num_all_nodes: 5,
            node_statuses: vec![("a".into(), Status::unschedulable("Insufficient cpu"))],
            absent_nodes_status: Some(Status::unresolvable(
                "node(s) didn't satisfy plugin(s) [NodeAffinity]",
            )),
            ..Default::default()
        };
        assert_eq!(
            d.message(),
            "0/5 nodes are available: 1 Insufficient cpu, 4 node(s) didn't satisfy plugin(s) [NodeAffinity]."
        );
        let none = Diagnosis::default();
        assert_eq!(none.message(), "no nodes available to schedule pods");
    }

    #[test]
    fn the_failure_message_counts_reasons_over_nodes() {
        let d = Diagnosis {
            num_all_nodes: 5,
            node_statuses: vec![
                ("a".into(), Status::unschedulable("Insufficient cpu")),
                ("b".into(), Status::unschedulable("Insufficient cpu")),
                (
                    "c".into(),
                    Status::unresolvable("node(s) had untolerated taint(s)"),
                ),
                (
                    "d".into(),
                    Status::unresolvable("node(s) had untolerated taint(s)"),
                ),
                (
                    "e".into(),
                    Status::unresolvable("node(s) had untolerated taint(s)"),
                ),
            ],
            ..Default::default()
        };
        assert_eq!(
            d.message(),
            "0/5 nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s)."
        );
    }

    #[test]
    fn the_default_profile_places_a_pod_only_where_it_fits() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let snap = snapshot(
            vec![
                NodeBuilder::new("small").allocatable("cpu", "1"),
                NodeBuilder::new("tainted").taint("dedicated", "gpu", "NoSchedule"),
                NodeBuilder::new("fits"),
            ],
            vec![],
        );
        let pod = PodBuilder::new("p").req_cpu("2").info();
        let start = AtomicUsize::new(0);
        for _ in 0..20 {
            let mut state = CycleState::new();
            match schedule_pod(&profile, &mut state, &pod, &snap, &start, &NoNominations) {
                ScheduleResult::Scheduled { node, .. } => assert_eq!(node, "fits"),
                other => panic!("want fits, got {other:?}"),
            }
        }
        let huge = PodBuilder::new("h").req_cpu("64").info();
        let mut state = CycleState::new();
        match schedule_pod(&profile, &mut state, &huge, &snap, &start, &NoNominations) {
            ScheduleResult::Unschedulable(d) => {
                assert_eq!(
                    d.message(),
                    "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. \
                     preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
                    "\"count reason\" strings sorted as strings, as upstream's FitError; \
                     DefaultPreemption's words after them"
                )
            }
            other => panic!("want unschedulable, got {other:?}"),
        }
    }

    #[test]
    fn ties_are_broken_at_random_among_the_best() {
        let scores: Vec<NodeScore> = ["a", "b", "c"]
            .iter()
            .map(|n| NodeScore {
                name: n.to_string(),
                score: if *n == "c" { 1 } else { 5 },
            })
            .collect();
        let picks: std::collections::BTreeSet<String> =
            (0..200).map(|_| select_host(&scores)).collect();
        assert_eq!(picks.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    }

    /// Pods nominated to a node, in the given priority, answering for every node.
    struct Nominated(Vec<(String, Arc<PodInfo>)>);

    impl NominatedPods for Nominated {
        fn any(&self) -> bool {
            !self.0.is_empty()
        }
        fn for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
            self.0
                .iter()
                .filter(|(n, _)| n == node)
                .map(|(_, p)| p.clone())
                .collect()
        }
        fn node_of(&self, uid: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(_, p)| p.uid() == uid)
                .map(|(n, _)| n.clone())
        }
    }

    /// The room preemption made for a nominated pod is kept for it: a pod of lower or equal
    /// priority goes elsewhere, a pod of higher priority may take it, and the nominated pod
    /// itself is tried on its node first.
    #[test]
    fn a_nominated_pod_keeps_its_room_from_pods_of_lower_priority() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let snap = snapshot(
            vec![NodeBuilder::new("room").allocatable("cpu", "2")],
            vec![],
        );
        let vip = Arc::new(
            PodBuilder::new("vip")
                .req_cpu("2")
                .priority(1000)
                .with(|p| {
                    p.status.get_or_insert_default().nominated_node_name = Some("room".into());
                })
                .info(),
        );
        let nominated = Nominated(vec![("room".into(), vip.clone())]);
        let place = |pod: &PodInfo| {
            let mut state = CycleState::new();
            match schedule_pod(
                &profile,
                &mut state,
                pod,
                &snap,
                &AtomicUsize::new(0),
                &nominated,
            ) {
                ScheduleResult::Scheduled { node, .. } => Ok(node),
                ScheduleResult::Unschedulable(d) => Err(d.message()),
                other => panic!("unexpected {other:?}"),
            }
        };
        let low = PodBuilder::new("low").req_cpu("1").priority(10).info();
        let told = place(&low).expect_err("a lower-priority pod leaves the room alone");
        assert!(
            told.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
            "{told}"
        );
        assert_eq!(
            place(&vip).as_deref(),
            Ok("room"),
            "the nominated pod itself fits"
        );
        let boss = PodBuilder::new("boss").req_cpu("2").priority(2000).info();
        assert_eq!(
            place(&boss).as_deref(),
            Ok("room"),
            "a higher priority may take it"
        );
    }
}
