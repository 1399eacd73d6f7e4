//! Runs a [`CompiledProfile`]'s plugins, as kube-scheduler's frameworkImpl runs them: every
//! extension point has its runner here, a method of the compiled profile. This file holds
//! PreEnqueue and the points of the search for a node (PreFilter, Filter, PostFilter, PreScore,
//! Score); [`binding`] the points from Reserve on. The algorithm that calls them (how many nodes
//! to filter, from where, how the winner is picked) is the scheduler's: `scheduler/algorithm.rs`.

pub mod binding;

pub use self::binding::{MAX_PERMIT_WAIT, PermitWait};

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use rayon::prelude::*;

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    Code, CycleState, MAX_NODE_SCORE, MIN_NODE_SCORE, NodeScore, NominatedPods, Nomination,
    PodsChange, PostFilterContext, PreFilterPlugin, PreFilterResult, ScorePlugin, Status,
};

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

/// What PreFilter left of the search: the nodes it narrowed it to, and which plugins narrowed.
#[derive(Clone, Debug, Default)]
pub struct PreFiltered {
    pub result: PreFilterResult,
    pub narrowed_by: BTreeSet<&'static str>,
}

/// Why PreFilter ended the attempt.
#[derive(Clone, Debug)]
pub enum PreFilterFailure {
    /// A plugin rejected the pod; the diagnosis says which and how.
    Rejected,
    /// A plugin failed.
    Error(Status),
}

impl CompiledProfile {
    /// Runs PreEnqueue: the name of the first plugin that holds the pod back (a scheduling
    /// gate), or `None` when the pod may enter the active queue.
    pub fn run_pre_enqueue(&self, pod: &PodInfo) -> Option<&'static str> {
        self.pre_enqueue.iter().find_map(|p| {
            let status = p.pre_enqueue()?.pre_enqueue(pod);
            (!status.is_success()).then(|| p.name())
        })
    }

    /// Runs PreFilter (as upstream's RunPreFilterPlugins): the nodes the plugins narrowed the
    /// search to and which plugins narrowed it; [`PreFilterFailure::Rejected`] when the pod
    /// was rejected (`diagnosis` says how).
    pub fn run_pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        diagnosis: &mut Diagnosis,
    ) -> Result<PreFiltered, PreFilterFailure> {
        let mut narrowed = PreFilterResult::all_nodes();
        // As upstream's RunPreFilterPlugins: UnschedulableAndUnresolvable stops at once; an
        // Unschedulable answer lets the other plugins run and rejects the pod after them.
        let mut rejected_by: Option<Status> = None;
        let mut narrowing: BTreeSet<&'static str> = BTreeSet::new();
        for plugin in &self.pre_filter {
            let Some(pf) = plugin.pre_filter() else {
                continue;
            };
            let clock = state.plugin_clock();
            let (result, status) = pf.pre_filter(state, pod, snapshot);
            state.record_plugin(plugin.name(), "PreFilter", status.code, clock);
            if !status.is_skip() {
                state.record_evaluations("PreFilter", plugin.name(), 1);
            }
            let status = status.with_plugin(plugin.name());
            if status.is_skip() {
                state.mark_skip_filter(plugin.name());
                continue;
            }
            // The plugins that may requeue the pod, as upstream records them: the rejecting
            // plugin alone on UnschedulableAndUnresolvable; on Unschedulable the last such
            // plugin with those that narrowed the nodes; on an empty intersection the latter.
            if status.code == Code::UnschedulableAndUnresolvable {
                diagnosis.unschedulable_plugins = vec![plugin.name()];
                diagnosis.pre_filter_status = Some(status);
                return Err(PreFilterFailure::Rejected);
            }
            if status.code == Code::Unschedulable {
                rejected_by = Some(status);
                continue;
            }
            if !status.is_success() {
                return Err(PreFilterFailure::Error(
                    Status::error(format!(
                        "running PreFilter plugin {:?}: {}",
                        plugin.name(),
                        status.message()
                    ))
                    .with_plugin(plugin.name()),
                ));
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
                diagnosis.unschedulable_plugins = names;
                diagnosis.pre_filter_status = Some(Status::unresolvable(message));
                return Err(PreFilterFailure::Rejected);
            }
        }
        if let Some(status) = rejected_by {
            diagnosis.unschedulable_plugins =
                narrowing.iter().copied().chain(status.plugin).collect();
            diagnosis.unschedulable_plugins.dedup();
            diagnosis.pre_filter_status = Some(status);
            return Err(PreFilterFailure::Rejected);
        }
        Ok(PreFiltered {
            result: narrowed,
            narrowed_by: narrowing,
        })
    }

    /// Runs PreFilter alone (tests that need a cycle's state without its filters): the nodes it
    /// narrowed the search to, or the status that rejected the pod.
    #[cfg(test)]
    pub fn run_pre_filter_alone(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Result<PreFilterResult, Status> {
        let mut diagnosis = Diagnosis::default();
        match self.run_pre_filter(state, pod, snapshot, &mut diagnosis) {
            Ok(pre_filtered) => Ok(pre_filtered.result),
            Err(PreFilterFailure::Error(error)) => Err(error),
            Err(PreFilterFailure::Rejected) => Err(diagnosis
                .pre_filter_status
                .unwrap_or_else(|| Status::unresolvable("rejected by PreFilter"))),
        }
    }

    /// Brings `state` to what PreFilter would have computed with `removed` (pods of `node`)
    /// gone, for the plugins whose PreFilter reads other pods: each rewrites its own state
    /// where it can ([`PreFilterPlugin::lay_over_pods`]); the others run PreFilter again against
    /// `without()`, the snapshot with the changed node (built once, only if one needs it). The
    /// other plugins' PreFilter answers depend on the pod alone and stand, and so does a skip
    /// (fewer pods never make a skipped plugin matter). The status that rejects the pod, if
    /// one does.
    pub fn pre_filters_without(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        removed: &[&PodInfo],
        snapshot: &Snapshot,
        without: &dyn Fn() -> Snapshot,
    ) -> Result<(), Status> {
        let mut changed: Option<Snapshot> = None;
        for (name, pf) in self.pod_reading_pre_filters() {
            if state.skips_filter(name)
                || pf.lay_over_pods(state, pod, node, removed, PodsChange::TakenOff, snapshot)
            {
                continue;
            }
            let changed = changed.get_or_insert_with(without);
            let (_, status) = pf.pre_filter(state, pod, changed);
            let status = status.with_plugin(name);
            if status.is_skip() {
                state.mark_skip_filter(name);
            } else if status.is_success() {
                state.unmark_skip_filter(name);
            } else {
                return Err(status);
            }
        }
        Ok(())
    }

    /// The PreFilter plugins whose PreFilter reads other pods, with their names.
    fn pod_reading_pre_filters(
        &self,
    ) -> impl Iterator<Item = (&'static str, &dyn PreFilterPlugin)> {
        (self.pre_filter.iter())
            .filter(|p| p.pre_filter_reads_pods())
            .filter_map(|p| Some((p.name(), p.pre_filter()?)))
    }

    /// Runs every Filter plugin on one node, stopping at the first that rejects it.
    pub fn run_filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        for plugin in &self.filter {
            let Some(f) = plugin.filter() else { continue };
            if state.skips_filter(plugin.name()) {
                continue;
            }
            let clock = state.plugin_clock();
            let status = f.filter(state, pod, node);
            state.record_plugin(plugin.name(), "Filter", status.code, clock);
            if status.code == Code::Error {
                return Status::error(format!(
                    "running {:?} filter plugin: {}",
                    plugin.name(),
                    status.message()
                ))
                .with_plugin(plugin.name());
            }
            if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// Records the Filter runs of a search for kube-scheduler's `scheduler_plugin_evaluation_total`,
    /// counted after it from its outcome rather than on each node (an atomic shared by every
    /// worker, per plugin and node, would cost the search more than the filters): every Filter
    /// plugin the pod does not skip ran on each of the `passed` nodes, and on each `rejected`
    /// node up to the plugin that rejected it. The second pass over a node with nominated pods
    /// is not counted.
    pub fn record_filter_evaluations(
        &self,
        state: &mut CycleState,
        passed: usize,
        rejected: &[(String, Status)],
    ) {
        let active: Vec<&'static str> = self
            .filter
            .iter()
            .filter(|p| p.filter().is_some() && !state.skips_filter(p.name()))
            .map(|p| p.name())
            .collect();
        let Some(last) = active.len().checked_sub(1) else {
            return;
        };
        // Nodes whose filtering ended at each plugin: where one rejected, else the last.
        let mut ended_at = vec![0u64; active.len()];
        for (_, status) in rejected {
            let at = status
                .plugin
                .and_then(|p| active.iter().position(|a| *a == p))
                .unwrap_or(last);
            ended_at[at] += 1;
        }
        let mut reached = passed as u64;
        let mut runs = vec![0u64; active.len()];
        for at in (0..active.len()).rev() {
            reached += ended_at[at];
            runs[at] = reached;
        }
        for (plugin, runs) in active.into_iter().zip(runs) {
            state.record_evaluations("Filter", plugin, runs);
        }
    }

    /// Records the Score runs of a search over `nodes` nodes: once per node for every Score
    /// plugin the pod does not skip.
    pub fn record_score_evaluations(&self, state: &mut CycleState, nodes: usize) {
        let active: Vec<&'static str> = self
            .score
            .iter()
            .filter(|w| w.plugin.score().is_some() && !state.skips_score(w.plugin.name()))
            .map(|w| w.plugin.name())
            .collect();
        for plugin in active {
            state.record_evaluations("Score", plugin, nodes as u64);
        }
    }

    /// Runs the filters as upstream's RunFilterPluginsWithNominatedPods: when pods of at least
    /// the pod's priority are nominated to the node, first with them counted on it (the pod must
    /// leave them room), then, if that passed, without them (what holds only with them there,
    /// such as affinity to them, must not decide).
    pub fn run_filters_with_nominated(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        nominated: &dyn NominatedPods,
        snapshot: &Snapshot,
    ) -> Status {
        let Some((with, ahead)) = with_nominated(pod, node, nominated) else {
            return self.run_filter(state, pod, node);
        };
        let laid = self.state_with_pods(state, pod, node, &ahead, snapshot);
        let status = self.run_filter(laid.as_ref().unwrap_or(state), pod, &with);
        if !status.is_success() {
            return status;
        }
        self.run_filter(state, pod, node)
    }

    /// `state` with `added` counted on `node` by the PreFilter states that count other pods
    /// (upstream's addGENominatedPods, through [`PreFilterPlugin::lay_over_pods`]), for the plugins
    /// that did not skip the pod; `None` when no state changed.
    pub fn state_with_pods(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        added: &[Arc<PodInfo>],
        snapshot: &Snapshot,
    ) -> Option<CycleState> {
        let added: Vec<&PodInfo> = added.iter().map(|p| p.as_ref()).collect();
        let mut laid: Option<CycleState> = None;
        for (name, pf) in self.pod_reading_pre_filters() {
            if state.skips_filter(name) {
                continue;
            }
            let next = laid.get_or_insert_with(|| state.clone());
            pf.lay_over_pods(next, pod, node, &added, PodsChange::Added, snapshot);
        }
        laid
    }

    /// Runs PostFilter (as upstream's RunPostFilterPlugins): the first plugin that succeeds
    /// decides the nomination; its message, or the rejections' joined, is added to the
    /// diagnosis.
    pub fn run_post_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
        nominated: &dyn NominatedPods,
        mut diagnosis: Diagnosis,
    ) -> Diagnosis {
        if self.post_filter.is_empty() {
            // No plugin to decide: the nomination ends, as upstream's clearNominatedNode.
            diagnosis.nomination = Some(Nomination::Clear);
            return diagnosis;
        }
        let started = std::time::Instant::now();
        let mut messages = Vec::new();
        let mut code = Code::Unschedulable;
        for plugin in &self.post_filter {
            let Some(pf) = plugin.post_filter() else {
                continue;
            };
            let clock = state.plugin_clock();
            let (nomination, status) = pf.post_filter(&PostFilterContext {
                profile: self,
                state,
                pod,
                snapshot,
                diagnosis: &diagnosis,
                nominated,
            });
            state.record_plugin(plugin.name(), "PostFilter", status.code, clock);
            if status.code == Code::Skip {
                // Nothing to say about this pod (StickyNode for a pod it did not pin).
                continue;
            }
            if status.is_success() {
                diagnosis.nomination = Some(nomination);
                code = Code::Success;
                // The plugin that succeeded has the last word (1.37's DefaultPreemption says
                // where the pod is going).
                messages.clear();
                messages.push(status.message());
                break;
            }
            if status.is_rejected() {
                // Its reasons, as upstream appends them: a rejection without any (as
                // DynamicResources' for a pod without claims) adds nothing.
                messages.extend(status.reasons.iter().cloned());
            } else {
                messages.push(status.message());
            }
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

    /// Runs PreScore in order, stopping at the first failure; a plugin that answers Skip is
    /// left out of Score.
    pub fn run_pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        for plugin in &self.pre_score {
            let Some(ps) = plugin.pre_score() else {
                continue;
            };
            let clock = state.plugin_clock();
            let status = ps
                .pre_score(state, pod, nodes, snapshot)
                .with_plugin(plugin.name());
            state.record_plugin(plugin.name(), "PreScore", status.code, clock);
            if !status.is_skip() && !plugin.pre_score_is_own() {
                state.record_evaluations("PreScore", plugin.name(), 1);
            }
            if status.is_skip() {
                state.mark_skip_score(plugin.name());
            } else if !status.is_success() {
                return Status::error(format!(
                    "running PreScore plugin {:?}: {}",
                    plugin.name(),
                    status.message()
                ))
                .with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// Score, NormalizeScore and weights: the total per node. `detail`, when given, receives
    /// each Score plugin's scores (`tether explain`): [`Self::raw_scores`] then
    /// [`Self::combine_scores`].
    pub fn run_score(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        detail: Option<&mut Vec<PluginScores>>,
    ) -> Result<Vec<NodeScore>, Status> {
        let raw = self.raw_scores(state, pod, nodes)?;
        let mut scores: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.name.clone(),
                score: 0,
            })
            .collect();
        self.combine_scores(state, pod, &mut scores, &raw, detail)?;
        Ok(scores)
    }

    /// The Score plugins that run in this cycle (those whose PreScore did not skip), with their
    /// index in the profile.
    fn active_scores(&self, state: &CycleState) -> Vec<usize> {
        self.score
            .iter()
            .enumerate()
            .filter(|(_, weighted)| {
                weighted.plugin.score().is_some() && !state.skips_score(weighted.plugin.name())
            })
            .map(|(i, _)| i)
            .collect()
    }

    /// Score: each active plugin's raw score of each node, as kube-scheduler's
    /// RunScorePlugins runs them before normalizing: one parallel section over the nodes runs
    /// every Score plugin on each node (not one section per plugin: each wakes the worker
    /// threads). A failing plugin fails the cycle; when several fail, the first in the
    /// profile's order (on the first node it failed on) is reported.
    pub fn raw_scores(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
    ) -> Result<RawScores, Status> {
        let plugins = self.active_scores(state);
        let active: Vec<(&'static str, &dyn ScorePlugin)> = plugins
            .iter()
            .filter_map(|&i| {
                let plugin = &self.score[i].plugin;
                Some((plugin.name(), plugin.score()?))
            })
            .collect();
        let width = active.len();
        if width == 0 {
            return Ok(RawScores {
                plugins,
                raw: Vec::new(),
            });
        }
        // Node n's raw score from the i-th active plugin is raw[n * width + i].
        let mut raw = vec![0i64; nodes.len() * width];
        let failed = raw
            .par_chunks_mut(width)
            .zip(nodes.par_iter())
            .enumerate()
            .with_min_len(16)
            .filter_map(|(n, (row, node))| {
                for (i, ((name, sp), slot)) in active.iter().zip(row).enumerate() {
                    let clock = state.plugin_clock();
                    let score = sp.score(state, pod, node);
                    let code = score.as_ref().map_or_else(|s| s.code, |_| Code::Success);
                    state.record_plugin(name, "Score", code, clock);
                    match score {
                        Ok(score) => *slot = score,
                        Err(status) => return Some((i, n, *name, status)),
                    }
                }
                None
            })
            .min_by_key(|(i, n, _, _)| (*i, *n));
        if let Some((_, _, name, status)) = failed {
            return Err(Status::error(format!(
                "running Score plugins: plugin {name:?} failed with: {}",
                status.message()
            ))
            .with_plugin(name));
        }
        Ok(RawScores { plugins, raw })
    }

    /// NormalizeScore and weights over `raw` (the raw scores of the nodes `scores` names, in
    /// that order): each node's total into `scores`. A plugin that ran when `raw` was scored
    /// but skips in this cycle (or the reverse) is an error: the scores do not fit the cycle.
    pub fn combine_scores(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        scores: &mut [NodeScore],
        raw: &RawScores,
        mut detail: Option<&mut Vec<PluginScores>>,
    ) -> Result<(), Status> {
        let width = raw.plugins.len();
        if width == 0 {
            scores.iter_mut().for_each(|s| s.score = 0);
            return Ok(());
        }
        if raw.raw.len() != scores.len() * width || raw.plugins != self.active_scores(state) {
            return Err(Status::error(
                "the raw scores kept do not match the Score plugins of this cycle",
            ));
        }
        let mut totals = vec![0i64; scores.len()];
        for (i, &index) in raw.plugins.iter().enumerate() {
            let weighted = &self.score[index];
            let name = weighted.plugin.name();
            let Some(sp) = weighted.plugin.score() else {
                continue;
            };
            for (s, row) in scores.iter_mut().zip(raw.raw.chunks(width)) {
                s.score = row[i];
            }
            let clock = state.plugin_clock();
            let status = sp.normalize_scores(state, pod, scores);
            state.record_plugin(name, "ScoreExtensionNormalize", status.code, clock);
            if !status.is_success() {
                return Err(Status::error(format!(
                    "running Normalize on Score plugins: plugin {name:?} failed with: {}",
                    status.message()
                ))
                .with_plugin(name));
            }
            for (total, s) in totals.iter_mut().zip(scores.iter()) {
                if !(MIN_NODE_SCORE..=MAX_NODE_SCORE).contains(&s.score) {
                    return Err(Status::error(format!(
                        "applying score defaultWeights on Score plugins: plugin {name:?} returns an invalid score {}, it should in the range of [{MIN_NODE_SCORE}, {MAX_NODE_SCORE}] after normalizing",
                        s.score,
                    ))
                    .with_plugin(name));
                }
                *total += s.score * weighted.weight;
            }
            if let Some(detail) = detail.as_deref_mut() {
                detail.push(PluginScores {
                    plugin: name,
                    weight: weighted.weight,
                    raw: raw.raw.chunks(width).map(|row| row[i]).collect(),
                    normalized: scores.iter().map(|s| s.score).collect(),
                });
            }
        }
        for (s, total) in scores.iter_mut().zip(totals) {
            s.score = total;
        }
        Ok(())
    }
}

/// The raw scores of one cycle's Score plugins: what [`CompiledProfile::combine_scores`]
/// normalizes and weighs, kept by opportunistic batching to normalize again with a node
/// rescored.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RawScores {
    /// The index in the profile's Score plugins of each plugin that ran.
    pub plugins: Vec<usize>,
    /// Node n's raw score from the i-th plugin that ran is `raw[n * plugins.len() + i]`.
    pub raw: Vec<i64>,
}

impl RawScores {
    /// Node `n`'s raw scores, one per plugin that ran.
    pub fn row(&self, n: usize) -> &[i64] {
        let width = self.plugins.len();
        self.raw.get(n * width..(n + 1) * width).unwrap_or(&[])
    }
}

/// `status.nominatedNodeName`, when set.
pub fn nominated_node(pod: &crate::k8s::pod::Pod) -> Option<&str> {
    pod.status
        .as_ref()
        .and_then(|s| s.nominated_node_name.as_deref())
        .filter(|n| !n.is_empty())
}

/// `spec.priority`, 0 when unset.
pub fn priority(pod: &crate::k8s::pod::Pod) -> i32 {
    pod.spec.as_ref().and_then(|s| s.priority).unwrap_or(0)
}

/// The node with the pods nominated to it that `pod` must leave room for (those of at least
/// its priority), and those pods; `None` when there are none.
pub fn with_nominated(
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &dyn NominatedPods,
) -> Option<(NodeInfo, Vec<Arc<PodInfo>>)> {
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
    for p in &ahead {
        with.add_pod(p.clone());
    }
    Some((with, ahead))
}

/// The status counted for the nodes PreFilter left out, naming the plugins that narrowed.
pub fn left_out_status(narrowing: &BTreeSet<&'static str>) -> Status {
    let list: Vec<&str> = narrowing.iter().copied().collect();
    Status::unresolvable(format!(
        "node(s) didn't satisfy plugin(s) [{}]",
        list.join(" ")
    ))
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::profile::WeightedScore;

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
    /// A plugin that errs at every point it runs at.
    struct Erring;

    impl crate::scheduler::framework::Plugin for Erring {
        fn name(&self) -> &'static str {
            "Erring"
        }
        fn pre_filter(&self) -> Option<&dyn crate::scheduler::framework::PreFilterPlugin> {
            Some(self)
        }
        fn filter(&self) -> Option<&dyn crate::scheduler::framework::FilterPlugin> {
            Some(self)
        }
        fn pre_score(&self) -> Option<&dyn crate::scheduler::framework::PreScorePlugin> {
            Some(self)
        }
        fn score(&self) -> Option<&dyn crate::scheduler::framework::ScorePlugin> {
            Some(self)
        }
        fn reserve(&self) -> Option<&dyn crate::scheduler::framework::ReservePlugin> {
            Some(self)
        }
        fn permit(&self) -> Option<&dyn crate::scheduler::framework::PermitPlugin> {
            Some(self)
        }
    }

    impl crate::scheduler::framework::PreFilterPlugin for Erring {
        fn pre_filter(
            &self,
            _: &mut CycleState,
            _: &PodInfo,
            _: &Snapshot,
        ) -> (PreFilterResult, Status) {
            (PreFilterResult::all_nodes(), Status::error("boom"))
        }
    }
    impl crate::scheduler::framework::FilterPlugin for Erring {
        fn filter(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Status {
            Status::error("boom")
        }
    }
    impl crate::scheduler::framework::PreScorePlugin for Erring {
        fn pre_score(
            &self,
            _: &mut CycleState,
            _: &PodInfo,
            _: &[Arc<NodeInfo>],
            _: &Snapshot,
        ) -> Status {
            Status::error("boom")
        }
    }
    impl crate::scheduler::framework::ScorePlugin for Erring {
        fn score(&self, _: &CycleState, _: &PodInfo, _: &NodeInfo) -> Result<i64, Status> {
            Err(Status::error("boom"))
        }
    }
    impl crate::scheduler::framework::ReservePlugin for Erring {
        fn reserve(&self, _: &mut CycleState, _: &PodInfo, _: &str) -> Status {
            Status::error("boom")
        }
        fn unreserve(&self, _: &CycleState, _: &PodInfo, _: &str) {}
    }
    impl crate::scheduler::framework::PermitPlugin for Erring {
        fn permit(&self, _: &CycleState, _: &PodInfo, _: &str) -> (Status, std::time::Duration) {
            (Status::error("boom"), std::time::Duration::ZERO)
        }
    }

    /// A Score plugin for the tests below: `raw` scores the node of that index, `normalize`
    /// maps each raw score.
    struct Scoring {
        name: &'static str,
        raw: fn(usize) -> Result<i64, Status>,
        normalize: fn(i64) -> i64,
    }

    impl crate::scheduler::framework::Plugin for Scoring {
        fn name(&self) -> &'static str {
            self.name
        }
        fn score(&self) -> Option<&dyn crate::scheduler::framework::ScorePlugin> {
            Some(self)
        }
    }

    impl crate::scheduler::framework::ScorePlugin for Scoring {
        fn score(&self, _: &CycleState, _: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
            let index = node
                .name
                .trim_start_matches('n')
                .parse()
                .expect("node n<index>");
            (self.raw)(index)
        }
        fn normalize_scores(
            &self,
            _: &CycleState,
            _: &PodInfo,
            scores: &mut [NodeScore],
        ) -> Status {
            for s in scores {
                s.score = (self.normalize)(s.score);
            }
            Status::success()
        }
    }

    fn scoring_profile(plugins: Vec<(Scoring, i64)>) -> CompiledProfile {
        let mut profile = crate::scheduler::profile::default_profile(
            "s",
            &crate::scheduler::plugins::handle::Handle::default(),
        )
        .expect("default profile")
        .profile;
        profile.score = plugins
            .into_iter()
            .map(|(plugin, weight)| WeightedScore {
                plugin: Arc::new(plugin),
                weight,
            })
            .collect();
        profile
    }

    fn indexed_nodes(count: usize) -> Vec<Arc<NodeInfo>> {
        (0..count)
            .map(|i| {
                Arc::new(crate::scheduler::testing::NodeBuilder::new(&format!("n{i}")).info(vec![]))
            })
            .collect()
    }

    /// Every Score plugin runs on every node in one parallel section; each node's total is
    /// the sum of each plugin's normalized score times its weight, and `explain`'s detail holds
    /// each plugin's own column, raw and normalized, node by node.
    #[test]
    fn each_node_totals_every_plugins_weighted_normalized_score() {
        let profile = scoring_profile(vec![
            (
                Scoring {
                    name: "ByIndex",
                    raw: |i| Ok(i as i64),
                    normalize: |s| s,
                },
                3,
            ),
            (
                Scoring {
                    name: "Inverse",
                    raw: |i| Ok(2 * i as i64),
                    normalize: |s| 100 - s,
                },
                2,
            ),
        ]);
        let nodes = indexed_nodes(40);
        let mut detail = vec![];
        let scores = profile
            .run_score(
                &CycleState::new(),
                &crate::scheduler::testing::PodBuilder::new("p").info(),
                &nodes,
                Some(&mut detail),
            )
            .expect("scores");
        let want: Vec<(String, i64)> = (0..40i64)
            .map(|i| (format!("n{i}"), 3 * i + 2 * (100 - 2 * i)))
            .collect();
        let got: Vec<(String, i64)> = scores.into_iter().map(|s| (s.name, s.score)).collect();
        assert_eq!(got, want);
        assert_eq!(
            detail,
            vec![
                PluginScores {
                    plugin: "ByIndex",
                    weight: 3,
                    raw: (0..40).collect(),
                    normalized: (0..40).collect(),
                },
                PluginScores {
                    plugin: "Inverse",
                    weight: 2,
                    raw: (0..40).map(|i| 2 * i).collect(),
                    normalized: (0..40).map(|i| 100 - 2 * i).collect(),
                },
            ]
        );
    }

    /// When plugins fail on several nodes, the cycle reports the first failing plugin in the
    /// profile's order, on the first node it failed on, whatever thread met which failure first.
    #[test]
    fn the_first_failing_plugin_in_order_is_reported() {
        let profile = scoring_profile(vec![
            (
                Scoring {
                    name: "Fine",
                    raw: |_| Ok(1),
                    normalize: |s| s,
                },
                1,
            ),
            (
                Scoring {
                    name: "FailsLate",
                    raw: |i| match i {
                        7 | 30 => Err(Status::error(format!("no score for n{i}"))),
                        _ => Ok(1),
                    },
                    normalize: |s| s,
                },
                1,
            ),
            (
                Scoring {
                    name: "FailsEarly",
                    raw: |i| match i {
                        3 => Err(Status::error("no score for n3")),
                        _ => Ok(1),
                    },
                    normalize: |s| s,
                },
                1,
            ),
        ]);
        let nodes = indexed_nodes(40);
        let pod = crate::scheduler::testing::PodBuilder::new("p").info();
        for _ in 0..20 {
            let failed = profile
                .run_score(&CycleState::new(), &pod, &nodes, None)
                .expect_err("a plugin fails");
            assert_eq!(
                failed.message(),
                "running Score plugins: plugin \"FailsLate\" failed with: no score for n7"
            );
        }
    }

    /// A plugin's error reads as kube-scheduler's framework wraps it at each point
    /// (framework.go), so a SchedulerError condition says the same as upstream's.
    #[test]
    fn plugin_errors_are_wrapped_as_upstreams_framework_wraps_them() {
        use crate::scheduler::testing::{NodeBuilder, PodBuilder};
        let erring: Arc<dyn crate::scheduler::framework::Plugin> = Arc::new(Erring);
        let profile = CompiledProfile {
            scheduler_name: "s".into(),
            source: "test".into(),
            percentage_of_nodes_to_score: 0,
            pod_initial_backoff: std::time::Duration::from_secs(1),
            pod_max_backoff: std::time::Duration::from_secs(10),
            queue_sort: crate::scheduler::plugins::priority_sort::build(
                None,
                &"pluginConfig".into(),
                &crate::scheduler::plugins::handle::Handle::default(),
            )
            .expect("PrioritySort"),
            pre_enqueue: vec![],
            pre_filter: vec![erring.clone()],
            filter: vec![erring.clone()],
            post_filter: vec![],
            pre_score: vec![erring.clone()],
            score: vec![WeightedScore {
                plugin: erring.clone(),
                weight: 1,
            }],
            reserve: vec![erring.clone()],
            permit: vec![erring.clone()],
            pre_bind: vec![],
            bind: vec![],
            post_bind: vec![],
            hints: Arc::default(),
            release: Default::default(),
        };
        let pod = PodBuilder::new("p").info();
        let node = Arc::new(NodeBuilder::new("n1").info(vec![]));
        let mut state = CycleState::new();
        let snapshot = Snapshot::default();
        let said = |status: Status| (status.code, status.message());
        let error = |m: &str| (Code::Error, m.to_string());

        let pre_filter = profile
            .run_pre_filter_alone(&mut state, &pod, &snapshot)
            .expect_err("PreFilter errs");
        assert_eq!(
            said(pre_filter),
            error("running PreFilter plugin \"Erring\": boom")
        );
        assert_eq!(
            said(profile.run_filter(&state, &pod, &node)),
            error("running \"Erring\" filter plugin: boom")
        );
        assert_eq!(
            said(profile.run_pre_score(&mut state, &pod, std::slice::from_ref(&node), &snapshot)),
            error("running PreScore plugin \"Erring\": boom")
        );
        assert_eq!(
            said(
                profile
                    .run_score(&state, &pod, std::slice::from_ref(&node), None)
                    .expect_err("Score errs")
            ),
            error("running Score plugins: plugin \"Erring\" failed with: boom")
        );
        assert_eq!(
            said(profile.run_reserve(&mut state, &pod, "n1")),
            error("running Reserve plugin \"Erring\": boom")
        );
        let waiting = crate::scheduler::framework::waiting_pods::WaitingPods::default();
        assert_eq!(
            said(
                profile
                    .run_permit(&state, &pod, "n1", &waiting)
                    .expect_err("Permit errs")
            ),
            error("running Permit plugin \"Erring\": boom")
        );
    }
    /// Without PostFilter plugins a failed attempt ends the pod's nomination, as upstream's
    /// clearNominatedNode.
    #[test]
    fn without_post_filter_plugins_the_nomination_ends() {
        let profile = crate::scheduler::profile::default_profile(
            "s",
            &crate::scheduler::plugins::handle::Handle::default(),
        )
        .expect("the default profile")
        .profile;
        let profile = CompiledProfile {
            post_filter: vec![],
            ..profile
        };
        let pod = crate::scheduler::testing::PodBuilder::new("p").info();
        let d = profile.run_post_filter(
            &mut CycleState::new(),
            &pod,
            &Snapshot::default(),
            &crate::scheduler::backend::nominator::Nominator::default(),
            Diagnosis::default(),
        );
        assert_eq!(d.nomination, Some(Nomination::Clear));
    }
    /// A PreFilter plugin that answers `code`.
    struct Answering(&'static str, Code);

    impl crate::scheduler::framework::Plugin for Answering {
        fn name(&self) -> &'static str {
            self.0
        }
        fn pre_filter(&self) -> Option<&dyn crate::scheduler::framework::PreFilterPlugin> {
            Some(self)
        }
    }

    impl crate::scheduler::framework::PreFilterPlugin for Answering {
        fn pre_filter(
            &self,
            _: &mut CycleState,
            _: &PodInfo,
            _: &Snapshot,
        ) -> (PreFilterResult, Status) {
            (PreFilterResult::all_nodes(), Status::new(self.1, "no"))
        }
    }

    /// The plugins a PreFilter rejection names for the queue, as upstream records them: of
    /// several Unschedulable answers the last alone; on UnschedulableAndUnresolvable that plugin
    /// alone.
    #[test]
    fn a_pre_filter_rejection_names_the_plugins_upstream_names() {
        let base = crate::scheduler::profile::default_profile(
            "s",
            &crate::scheduler::plugins::handle::Handle::default(),
        )
        .expect("the default profile")
        .profile;
        let with = |plugins: Vec<Arc<dyn crate::scheduler::framework::Plugin>>| {
            let profile = CompiledProfile {
                pre_filter: plugins,
                ..base.clone()
            };
            let mut diagnosis = Diagnosis::default();
            let pod = crate::scheduler::testing::PodBuilder::new("p").info();
            let _ = profile.run_pre_filter(
                &mut CycleState::new(),
                &pod,
                &Snapshot::default(),
                &mut diagnosis,
            );
            diagnosis.unschedulable_plugins
        };
        assert_eq!(
            with(vec![
                Arc::new(Answering("A", Code::Unschedulable)),
                Arc::new(Answering("B", Code::Unschedulable)),
            ]),
            ["B"]
        );
        assert_eq!(
            with(vec![
                Arc::new(Answering("A", Code::Unschedulable)),
                Arc::new(Answering("B", Code::UnschedulableAndUnresolvable)),
            ]),
            ["B"]
        );
    }
}
