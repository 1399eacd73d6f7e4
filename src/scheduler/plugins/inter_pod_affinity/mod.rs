//! InterPodAffinity: places a pod relative to the pods already running, by topology domain, as
//! kube-scheduler's InterPodAffinity plugin does. Filter enforces the required terms (the
//! incoming pod's affinity and anti-affinity, and the existing pods' anti-affinity toward it);
//! Score ranks nodes by the preferred terms of both sides and the existing pods' required
//! affinity terms.
//!
//! All matching of pods against terms happens once per cycle in PreFilter and PreScore, which
//! reduce it to counts per topology pair (`topologyKey` = value). Filter and Score, which run
//! for every node, only look the node's labels up in those counts.

mod hints;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::{AffinityTerm, PodInfo, WeightedAffinityTerm};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::profile::validation::{FieldErrors, FieldPath, decode_args};

pub const NAME: &str = "InterPodAffinity";
/// The weight kube-scheduler's default profile gives this plugin's score.
pub const DEFAULT_WEIGHT: i32 = 2;

/// Reason when placing the pod would break a required anti-affinity term of an existing pod.
pub const ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";
/// Reason when the node's domain holds no pod matching the pod's required affinity terms.
pub const ERR_REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// Reason when the node's domain holds a pod matching the pod's required anti-affinity terms.
pub const ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";

const PRE_FILTER_STATE_KEY: &str = "PreFilterInterPodAffinity";
const PRE_SCORE_STATE_KEY: &str = "PreScoreInterPodAffinity";

const MIN_HARD_POD_AFFINITY_WEIGHT: i32 = 0;
const MAX_HARD_POD_AFFINITY_WEIGHT: i32 = 100;

/// The plugin's args, as kube-scheduler's `InterPodAffinityArgs`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct InterPodAffinityArgs {
    /// The score an existing pod's required affinity term adds when the incoming pod matches
    /// it, so that pods land near the pods that require them. 0..=100; 0 turns this off.
    pub hard_pod_affinity_weight: i32,
    /// When the incoming pod has no preferred terms, skip scoring altogether instead of
    /// looking at the existing pods' terms toward it.
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs {
            hard_pod_affinity_weight: 1,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl InterPodAffinityArgs {
    /// Checks the args as kube-scheduler's ValidateInterPodAffinityArgs; `path` is where the
    /// args sit in the profile (`pluginConfig[2].args`).
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        let w = self.hard_pod_affinity_weight;
        if !(MIN_HARD_POD_AFFINITY_WEIGHT..=MAX_HARD_POD_AFFINITY_WEIGHT).contains(&w) {
            errs.push(
                path.child("hardPodAffinityWeight"),
                format!(
                    "invalid value {w}: not in valid range [{MIN_HARD_POD_AFFINITY_WEIGHT}, \
                     {MAX_HARD_POD_AFFINITY_WEIGHT}]"
                ),
            );
        }
        errs.into_result()
    }
}

/// The plugin: its validated args, nothing else (it reads the cluster from the snapshot).
#[derive(Clone, Debug, Default)]
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
}

impl InterPodAffinity {
    /// A plugin with args that [`InterPodAffinityArgs::validate`] accepted.
    pub fn new(args: InterPodAffinityArgs) -> Self {
        InterPodAffinity { args }
    }
}

/// Decodes and validates the args at `path`, then builds the plugin.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let args: InterPodAffinityArgs = decode_args(args, path)?;
    args.validate(path)?;
    Ok(Arc::new(InterPodAffinity::new(args)))
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(hints::registrations())
    }
    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }
    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }
    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// A number per topology pair, `topologyKey → value → n`: kube-scheduler's
/// topologyToMatchedTermCount (Filter) and scoreMap (Score). Keyed by topology key first so
/// that a node is checked with one label lookup per key.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
struct TopologyMap(HashMap<String, HashMap<String, i64>>);

impl TopologyMap {
    /// Adds `n` to the pair (`key`, the node's value for it); nothing when the node lacks `key`.
    fn add_for_node(&mut self, node_labels: &BTreeMap<String, String>, key: &str, n: i64) {
        if let Some(value) = node_labels.get(key) {
            *self
                .0
                .entry(key.to_string())
                .or_default()
                .entry(value.clone())
                .or_default() += n;
        }
    }

    fn get(&self, key: &str, value: &str) -> i64 {
        self.0
            .get(key)
            .and_then(|values| values.get(value))
            .copied()
            .unwrap_or(0)
    }

    /// The number for the pair of `key` on a node with these labels; `None` when it lacks `key`.
    fn for_node(&self, node_labels: &BTreeMap<String, String>, key: &str) -> Option<i64> {
        node_labels.get(key).map(|value| self.get(key, value))
    }

    /// Whether any topology pair of the node has a positive number.
    fn any_positive_for_node(&self, node_labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().any(|(key, values)| {
            node_labels
                .get(key)
                .and_then(|v| values.get(v))
                .is_some_and(|n| *n > 0)
        })
    }

    /// The sum of the numbers of every topology pair of the node.
    fn sum_for_node(&self, node_labels: &BTreeMap<String, String>) -> i64 {
        self.0
            .iter()
            .filter_map(|(key, values)| node_labels.get(key).and_then(|v| values.get(v)))
            .sum()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Both maps added pair by pair.
    fn merge(self, other: TopologyMap) -> TopologyMap {
        let (mut big, small) = if self.0.len() >= other.0.len() {
            (self, other)
        } else {
            (other, self)
        };
        for (key, values) in small.0 {
            let entry = big.0.entry(key).or_default();
            for (value, n) in values {
                *entry.entry(value).or_default() += n;
            }
        }
        big
    }
}

/// An incoming pod's term with its namespaceSelector resolved into namespace names, as
/// kube-scheduler's mergeAffinityTermNamespacesIfNotEmpty does, so that matching it against
/// existing pods needs no namespace label lookups. An empty selector (every namespace) is kept.
fn resolve_namespaces(term: &AffinityTerm, snapshot: &Snapshot) -> AffinityTerm {
    let mut term = term.clone();
    if let Some(selector) = term.namespace_selector.take() {
        if selector.is_empty() {
            term.namespace_selector = Some(selector);
        } else {
            term.namespaces.extend(
                snapshot
                    .namespace_labels
                    .iter()
                    .filter(|(_, labels)| selector.matches(labels))
                    .map(|(ns, _)| ns.clone()),
            );
        }
    }
    term
}

fn resolve_weighted(
    terms: &[WeightedAffinityTerm],
    snapshot: &Snapshot,
) -> Vec<WeightedAffinityTerm> {
    terms
        .iter()
        .map(|w| WeightedAffinityTerm {
            term: resolve_namespaces(&w.term, snapshot),
            weight: w.weight,
        })
        .collect()
}

/// Whether `pod` matches every one of the (namespace-resolved) terms; false for no terms.
fn matches_all_terms(terms: &[AffinityTerm], pod: &PodInfo) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches(pod, None))
}

/// What PreFilter computed for Filter (kube-scheduler's preFilterState).
#[derive(Debug)]
struct PreFilterState {
    /// Existing pods whose required anti-affinity terms match the incoming pod, per pair.
    existing_anti_affinity_counts: TopologyMap,
    /// Pods matching all of the incoming pod's required affinity terms, per pair of each term.
    affinity_counts: TopologyMap,
    /// Pods matching each of the incoming pod's required anti-affinity terms, per pair.
    anti_affinity_counts: TopologyMap,
    /// The incoming pod's topology keys of its required affinity / anti-affinity terms.
    affinity_keys: Vec<String>,
    anti_affinity_keys: Vec<String>,
    /// Whether the incoming pod matches all its own required affinity terms (the first pod of
    /// a group that has affinity to itself).
    matches_own_affinity: bool,
}

impl PreFilterState {
    /// Every required affinity term has a matching pod in the node's domain, or no pod matches
    /// anywhere and the pod matches its own terms. A node lacking a topology key fails.
    fn satisfies_pod_affinity(&self, labels: &BTreeMap<String, String>) -> bool {
        let mut pods_exist = true;
        for key in &self.affinity_keys {
            match self.affinity_counts.for_node(labels, key) {
                None => return false,
                Some(n) if n <= 0 => pods_exist = false,
                Some(_) => {}
            }
        }
        pods_exist || (self.affinity_counts.is_empty() && self.matches_own_affinity)
    }

    /// No required anti-affinity term of the pod has a matching pod in the node's domain.
    fn satisfies_pod_anti_affinity(&self, labels: &BTreeMap<String, String>) -> bool {
        self.anti_affinity_counts.is_empty()
            || !self
                .anti_affinity_keys
                .iter()
                .any(|key| self.anti_affinity_counts.for_node(labels, key).unwrap_or(0) > 0)
    }

    /// No existing pod's required anti-affinity term covers the node's domain.
    fn satisfies_existing_pods_anti_affinity(&self, labels: &BTreeMap<String, String>) -> bool {
        !self
            .existing_anti_affinity_counts
            .any_positive_for_node(labels)
    }
}

/// For every existing pod with required anti-affinity terms, the pairs (on its node) of the
/// terms the incoming pod matches.
fn existing_anti_affinity_counts(pod: &PodInfo, snapshot: &Snapshot) -> TopologyMap {
    let ns_labels = snapshot.namespace_labels(pod.namespace());
    let nodes: Vec<&Arc<NodeInfo>> = snapshot.have_pods_with_required_anti_affinity().collect();
    nodes
        .par_iter()
        .fold(TopologyMap::default, |mut counts, node| {
            let labels = node.labels();
            for existing in &node.pods_with_required_anti_affinity {
                for term in &existing.required_anti_affinity_terms {
                    if term.matches(pod, ns_labels) {
                        counts.add_for_node(labels, &term.topology_key, 1);
                    }
                }
            }
            counts
        })
        .reduce(TopologyMap::default, TopologyMap::merge)
}

/// The pairs of the existing pods matching the incoming pod's required affinity terms (all of
/// them at once) and anti-affinity terms (each on its own).
fn incoming_counts(
    affinity: &[AffinityTerm],
    anti_affinity: &[AffinityTerm],
    snapshot: &Snapshot,
) -> (TopologyMap, TopologyMap) {
    if affinity.is_empty() && anti_affinity.is_empty() {
        return Default::default();
    }
    snapshot
        .nodes()
        .par_iter()
        .fold(
            <(TopologyMap, TopologyMap)>::default,
            |(mut aff, mut anti), node| {
                let labels = node.labels();
                for existing in &node.pods {
                    if matches_all_terms(affinity, existing) {
                        for term in affinity {
                            aff.add_for_node(labels, &term.topology_key, 1);
                        }
                    }
                    for term in anti_affinity {
                        if term.matches(existing, None) {
                            anti.add_for_node(labels, &term.topology_key, 1);
                        }
                    }
                }
                (aff, anti)
            },
        )
        .reduce(Default::default, |(a1, b1), (a2, b2)| {
            (a1.merge(a2), b1.merge(b2))
        })
}

impl PreFilterPlugin for InterPodAffinity {
    /// Counts, per topology pair, the pods the required terms of both sides see. Skips when
    /// the pod has no required terms and no existing pod's anti-affinity matches it.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        if let Some(err) = &pod.parse_error {
            return (
                PreFilterResult::all_nodes(),
                Status::unresolvable(format!("parsing pod: {err}")),
            );
        }
        let affinity: Vec<AffinityTerm> = pod
            .required_affinity_terms
            .iter()
            .map(|t| resolve_namespaces(t, snapshot))
            .collect();
        let anti_affinity: Vec<AffinityTerm> = pod
            .required_anti_affinity_terms
            .iter()
            .map(|t| resolve_namespaces(t, snapshot))
            .collect();

        let existing_anti_affinity_counts = existing_anti_affinity_counts(pod, snapshot);
        if existing_anti_affinity_counts.is_empty()
            && affinity.is_empty()
            && anti_affinity.is_empty()
        {
            return (PreFilterResult::all_nodes(), Status::skip());
        }
        let (affinity_counts, anti_affinity_counts) =
            incoming_counts(&affinity, &anti_affinity, snapshot);
        state.write(
            PRE_FILTER_STATE_KEY,
            PreFilterState {
                existing_anti_affinity_counts,
                affinity_counts,
                anti_affinity_counts,
                affinity_keys: affinity.iter().map(|t| t.topology_key.clone()).collect(),
                anti_affinity_keys: anti_affinity
                    .iter()
                    .map(|t| t.topology_key.clone())
                    .collect(),
                matches_own_affinity: matches_all_terms(&affinity, pod),
            },
        );
        (PreFilterResult::all_nodes(), Status::success())
    }
}

impl FilterPlugin for InterPodAffinity {
    /// Checks, in kube-scheduler's order and with its codes: the pod's affinity
    /// (UnschedulableAndUnresolvable), its anti-affinity and the existing pods' anti-affinity
    /// (Unschedulable: preempting the matching pods could help).
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY) else {
            return Status::error(format!("reading {PRE_FILTER_STATE_KEY:?} from cycle state"));
        };
        let labels = node.labels();
        if !s.satisfies_pod_affinity(labels) {
            return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_pod_anti_affinity(labels) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_existing_pods_anti_affinity(labels) {
            return Status::unschedulable(ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        Status::success()
    }
}

/// What PreScore computed for Score (kube-scheduler's preScoreState): the summed weights per
/// topology pair, positive for affinity and negative for anti-affinity.
#[derive(Debug)]
struct PreScoreState {
    topology_score: TopologyMap,
}

/// The incoming pod's side of scoring, shared by every existing pod looked at.
struct ScoreInputs<'a> {
    pod: &'a PodInfo,
    pod_ns_labels: Option<&'a BTreeMap<String, String>>,
    preferred_affinity: Vec<WeightedAffinityTerm>,
    preferred_anti_affinity: Vec<WeightedAffinityTerm>,
    hard_pod_affinity_weight: i32,
}

impl ScoreInputs<'_> {
    /// Adds what one existing pod contributes to the pairs of its node, as kube-scheduler's
    /// processExistingPod: the incoming pod's preferred terms matching it, and its own
    /// required affinity (at hardPodAffinityWeight) and preferred terms matching the incoming pod.
    fn add_existing_pod(
        &self,
        scores: &mut TopologyMap,
        existing: &PodInfo,
        labels: &BTreeMap<String, String>,
    ) {
        for w in &self.preferred_affinity {
            if w.term.matches(existing, None) {
                scores.add_for_node(labels, &w.term.topology_key, i64::from(w.weight));
            }
        }
        for w in &self.preferred_anti_affinity {
            if w.term.matches(existing, None) {
                scores.add_for_node(labels, &w.term.topology_key, -i64::from(w.weight));
            }
        }
        if self.hard_pod_affinity_weight > 0 {
            for term in &existing.required_affinity_terms {
                if term.matches(self.pod, self.pod_ns_labels) {
                    let weight = i64::from(self.hard_pod_affinity_weight);
                    scores.add_for_node(labels, &term.topology_key, weight);
                }
            }
        }
        for w in &existing.preferred_affinity_terms {
            if w.term.matches(self.pod, self.pod_ns_labels) {
                scores.add_for_node(labels, &w.term.topology_key, i64::from(w.weight));
            }
        }
        for w in &existing.preferred_anti_affinity_terms {
            if w.term.matches(self.pod, self.pod_ns_labels) {
                scores.add_for_node(labels, &w.term.topology_key, -i64::from(w.weight));
            }
        }
    }
}

impl PreScorePlugin for InterPodAffinity {
    /// Sums the weights of every matching term per topology pair, over the whole snapshot (a
    /// pod on an infeasible node still counts for its domain). Without preferred terms of the
    /// incoming pod, only pods with affinity terms can contribute, so only they are looked at.
    /// Skips when nothing matched, or, with ignorePreferredTermsOfExistingPods, when the pod
    /// has no preferred terms.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        if let Some(err) = &pod.parse_error {
            return Status::error(format!("parsing pod: {err}"));
        }
        let has_constraints = !pod.preferred_affinity_terms.is_empty()
            || !pod.preferred_anti_affinity_terms.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        let inputs = ScoreInputs {
            pod,
            pod_ns_labels: snapshot.namespace_labels(pod.namespace()),
            preferred_affinity: resolve_weighted(&pod.preferred_affinity_terms, snapshot),
            preferred_anti_affinity: resolve_weighted(&pod.preferred_anti_affinity_terms, snapshot),
            hard_pod_affinity_weight: self.args.hard_pod_affinity_weight,
        };
        let nodes: Vec<&Arc<NodeInfo>> = if has_constraints {
            snapshot.nodes().iter().collect()
        } else {
            snapshot.have_pods_with_affinity().collect()
        };
        let topology_score = nodes
            .par_iter()
            .fold(TopologyMap::default, |mut scores, node| {
                let labels = node.labels();
                let pods = if has_constraints {
                    &node.pods
                } else {
                    &node.pods_with_affinity
                };
                for existing in pods {
                    inputs.add_existing_pod(&mut scores, existing, labels);
                }
                scores
            })
            .reduce(TopologyMap::default, TopologyMap::merge);
        if topology_score.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_STATE_KEY, PreScoreState { topology_score });
        Status::success()
    }
}

impl ScorePlugin for InterPodAffinity {
    /// The sum of the scores of the node's topology pairs; may be negative until normalized.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_STATE_KEY)
            .ok_or_else(|| {
                Status::error(format!("reading {PRE_SCORE_STATE_KEY:?} from cycle state"))
            })?;
        Ok(s.topology_score.sum_for_node(node.labels()))
    }

    /// Min-max scaling to 0..=MAX_NODE_SCORE, rounding down; all equal scores become 0.
    fn normalize_scores(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_STATE_KEY) else {
            return Status::error(format!("reading {PRE_SCORE_STATE_KEY:?} from cycle state"));
        };
        if s.topology_score.is_empty() {
            return Status::success();
        }
        let min = scores.iter().map(|s| s.score).min().unwrap_or(0);
        let max = scores.iter().map(|s| s.score).max().unwrap_or(0);
        let diff = max - min;
        for s in scores.iter_mut() {
            s.score = if diff > 0 {
                (MAX_NODE_SCORE as f64 * ((s.score - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
