//! InterPodAffinity: places a pod relative to the pods already running, by topology domain, as
//! kube-scheduler's InterPodAffinity plugin does. Filter enforces the required terms (the
//! incoming pod's affinity and anti-affinity, and the existing pods' anti-affinity toward it);
//! Score ranks nodes by the preferred terms of both sides and the existing pods' required
//! affinity terms.
//!
//! All matching of pods against terms happens once per cycle in PreFilter and PreScore, which
//! reduce it to counts per topology pair (`topologyKey` = value). Filter and Score, which run
//! for every node, only look the node's labels up in those counts.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::{AffinityTerm, PodInfo, WeightedAffinityTerm};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::profile::validation::{FieldErrors, decode_args};

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
    pub fn validate(&self, path: &str) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        let w = self.hard_pod_affinity_weight;
        if !(MIN_HARD_POD_AFFINITY_WEIGHT..=MAX_HARD_POD_AFFINITY_WEIGHT).contains(&w) {
            errs.push(
                format!("{path}.hardPodAffinityWeight"),
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
pub fn build(args: Option<&serde_json::Value>, path: &str) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let args: InterPodAffinityArgs = decode_args(args, path)?;
    args.validate(path)?;
    Ok(Arc::new(InterPodAffinity::new(args)))
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
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
mod tests {
    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
    use k8s_openapi::api::core::v1::{
        Affinity, PodAffinity, PodAffinityTerm, PodAntiAffinity, WeightedPodAffinityTerm,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    const ZONE: &str = "topology.kubernetes.io/zone";
    const HOST: &str = "kubernetes.io/hostname";

    fn selector(pairs: &[(&str, &str)]) -> LabelSelector {
        LabelSelector {
            match_labels: Some(
                pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            ),
            match_expressions: None,
        }
    }

    /// A term selecting pods labelled with all `pairs`, over `topology_key`.
    fn term(topology_key: &str, pairs: &[(&str, &str)]) -> PodAffinityTerm {
        PodAffinityTerm {
            label_selector: Some(selector(pairs)),
            topology_key: topology_key.into(),
            ..Default::default()
        }
    }

    fn in_namespaces(mut t: PodAffinityTerm, namespaces: &[&str]) -> PodAffinityTerm {
        t.namespaces = Some(namespaces.iter().map(|n| n.to_string()).collect());
        t
    }

    fn ns_selector(mut t: PodAffinityTerm, pairs: &[(&str, &str)]) -> PodAffinityTerm {
        t.namespace_selector = Some(if pairs.is_empty() {
            LabelSelector::default()
        } else {
            selector(pairs)
        });
        t
    }

    /// Builds a pod's inter-pod affinity section term by term.
    #[derive(Default)]
    struct Terms(Affinity);

    impl Terms {
        fn pa(&mut self) -> &mut PodAffinity {
            self.0.pod_affinity.get_or_insert_with(Default::default)
        }
        fn paa(&mut self) -> &mut PodAntiAffinity {
            self.0
                .pod_anti_affinity
                .get_or_insert_with(Default::default)
        }
        fn required(mut self, t: PodAffinityTerm) -> Self {
            self.pa()
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(t);
            self
        }
        fn required_anti(mut self, t: PodAffinityTerm) -> Self {
            self.paa()
                .required_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(t);
            self
        }
        fn preferred(mut self, weight: i32, t: PodAffinityTerm) -> Self {
            self.pa()
                .preferred_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(WeightedPodAffinityTerm {
                    pod_affinity_term: t,
                    weight,
                });
            self
        }
        fn preferred_anti(mut self, weight: i32, t: PodAffinityTerm) -> Self {
            self.paa()
                .preferred_during_scheduling_ignored_during_execution
                .get_or_insert_with(Vec::new)
                .push(WeightedPodAffinityTerm {
                    pod_affinity_term: t,
                    weight,
                });
            self
        }
        fn build(self) -> Affinity {
            self.0
        }
    }

    fn terms() -> Terms {
        Terms::default()
    }

    /// An existing pod on `node`.
    fn on(node: &str, name: &str) -> PodBuilder {
        PodBuilder::new(name).node_name(node)
    }

    /// n1 and n2 in zone z1, n3 in z2, n4 without a zone label.
    fn zones() -> Vec<NodeBuilder> {
        vec![
            NodeBuilder::new("n1").label(ZONE, "z1"),
            NodeBuilder::new("n2").label(ZONE, "z1"),
            NodeBuilder::new("n3").label(ZONE, "z2"),
            NodeBuilder::new("n4"),
        ]
    }

    /// The snapshot every row runs against: `default` is labelled team=a, `other` team=b.
    fn cluster(nodes: Vec<NodeBuilder>, existing: Vec<PodBuilder>) -> Snapshot {
        let mut snap = snapshot(nodes, existing.into_iter().map(PodBuilder::build).collect());
        let ns = |team: &str| [("team".to_string(), team.to_string())].into();
        snap.namespace_labels = Arc::new(
            [
                ("default".to_string(), ns("a")),
                ("other".to_string(), ns("b")),
            ]
            .into(),
        );
        snap
    }

    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    enum Want {
        Pass,
        Affinity,
        AntiAffinity,
        Existing,
        ParseError,
    }
    use Want::*;

    fn classify(s: &Status) -> Want {
        match (s.code, s.message().as_str()) {
            (Code::Success, _) => Pass,
            (Code::UnschedulableAndUnresolvable, ERR_REASON_AFFINITY_RULES_NOT_MATCH) => Affinity,
            (Code::Unschedulable, ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH) => AntiAffinity,
            (Code::Unschedulable, ERR_REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH) => Existing,
            (Code::UnschedulableAndUnresolvable, m) if m.starts_with("parsing pod: ") => ParseError,
            _ => panic!("unexpected status {s}"),
        }
    }

    /// PreFilter then Filter on every node, as the runtime does (a Skip skips Filter, a
    /// rejection in PreFilter rejects every node).
    fn run_filter(plugin: &dyn Plugin, pod: &PodInfo, snap: &Snapshot) -> Vec<Want> {
        let mut state = CycleState::new();
        let pre_filter = plugin.pre_filter().expect("a PreFilter plugin");
        let filter = plugin.filter().expect("a Filter plugin");
        let (result, status) = pre_filter.pre_filter(&mut state, pod, snap);
        assert_eq!(result, PreFilterResult::all_nodes());
        snap.nodes()
            .iter()
            .map(|node| match status.code {
                Code::Skip => Pass,
                Code::Success => classify(&filter.filter(&state, pod, node)),
                _ => classify(&status),
            })
            .collect()
    }

    #[test]
    fn filter() {
        let db = |node: &str, name: &str| on(node, name).label("app", "db");
        let web = PodBuilder::new("p").label("app", "web");
        // (name, pod, existing pods, nodes, want per node)
        type Row = (
            &'static str,
            PodBuilder,
            Vec<PodBuilder>,
            Vec<NodeBuilder>,
            Vec<Want>,
        );
        let cases: Vec<Row> = vec![
            (
                "no terms anywhere: every node passes",
                PodBuilder::new("p"),
                vec![db("n1", "d1")],
                zones(),
                vec![Pass, Pass, Pass, Pass],
            ),
            (
                "required affinity: nodes in the zone of a matching pod pass",
                PodBuilder::new("p")
                    .affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
                vec![db("n1", "d1")],
                zones(),
                vec![Pass, Pass, Affinity, Affinity],
            ),
            (
                "required affinity per hostname: only the matching pod's node passes",
                PodBuilder::new("p")
                    .affinity(terms().required(term(HOST, &[("app", "db")])).build()),
                vec![db("n1", "d1")],
                zones(),
                vec![Pass, Affinity, Affinity, Affinity],
            ),
            (
                "required affinity: a node without the topology key fails, its own pods regardless",
                PodBuilder::new("p")
                    .affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
                vec![db("n4", "d4"), db("n3", "d3")],
                zones(),
                vec![Affinity, Affinity, Pass, Affinity],
            ),
            (
                "required affinity: no pod matches and the pod does not match itself",
                PodBuilder::new("p")
                    .affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
                vec![on("n1", "w1").label("app", "web")],
                zones(),
                vec![Affinity, Affinity, Affinity, Affinity],
            ),
            (
                "first pod of a group: nothing matches but the pod matches its own terms",
                web.clone()
                    .affinity(terms().required(term(ZONE, &[("app", "web")])).build()),
                vec![db("n1", "d1")],
                zones(),
                vec![Pass, Pass, Pass, Affinity],
            ),
            (
                "first-pod rule holds only while no pod matches anywhere",
                web.clone()
                    .affinity(terms().required(term(ZONE, &[("app", "web")])).build()),
                vec![on("n3", "w3").label("app", "web")],
                zones(),
                vec![Affinity, Affinity, Pass, Affinity],
            ),
            (
                "several affinity terms must all match one and the same pod",
                PodBuilder::new("p").affinity(
                    terms()
                        .required(term(ZONE, &[("app", "db")]))
                        .required(term(HOST, &[("tier", "cache")]))
                        .build(),
                ),
                vec![
                    db("n1", "both").label("tier", "cache"),
                    db("n2", "db-only"),
                    on("n3", "cache-only").label("tier", "cache"),
                ],
                zones(),
                vec![Pass, Affinity, Affinity, Affinity],
            ),
            (
                "affinity looks only in the pod's own namespace by default",
                PodBuilder::new("p")
                    .affinity(terms().required(term(ZONE, &[("app", "db")])).build()),
                vec![db("n1", "d1").namespace("other")],
                zones(),
                vec![Affinity, Affinity, Affinity, Affinity],
            ),
            (
                "affinity with namespaces looks in those namespaces",
                PodBuilder::new("p").affinity(
                    terms()
                        .required(in_namespaces(term(ZONE, &[("app", "db")]), &["other"]))
                        .build(),
                ),
                vec![db("n1", "d1").namespace("other")],
                zones(),
                vec![Pass, Pass, Affinity, Affinity],
            ),
            (
                "affinity with a namespaceSelector looks in the namespaces it selects",
                PodBuilder::new("p").affinity(
                    terms()
                        .required(ns_selector(term(ZONE, &[("app", "db")]), &[("team", "b")]))
                        .build(),
                ),
                vec![db("n1", "d1").namespace("other"), db("n3", "d3")],
                zones(),
                vec![Pass, Pass, Affinity, Affinity],
            ),
            (
                "an empty namespaceSelector selects every namespace",
                PodBuilder::new("p").affinity(
                    terms()
                        .required(ns_selector(term(ZONE, &[("app", "db")]), &[]))
                        .build(),
                ),
                vec![db("n3", "d3").namespace("other")],
                zones(),
                vec![Affinity, Affinity, Pass, Affinity],
            ),
            (
                "required anti-affinity: the zone of a matching pod is out, a node without the key is not",
                PodBuilder::new("p")
                    .affinity(terms().required_anti(term(ZONE, &[("app", "db")])).build()),
                vec![db("n1", "d1")],
                zones(),
                vec![AntiAffinity, AntiAffinity, Pass, Pass],
            ),
            (
                "required anti-affinity with a namespaceSelector",
                PodBuilder::new("p").affinity(
                    terms()
                        .required_anti(ns_selector(term(ZONE, &[("app", "db")]), &[("team", "b")]))
                        .build(),
                ),
                vec![db("n1", "d1"), db("n3", "d3").namespace("other")],
                zones(),
                vec![Pass, Pass, AntiAffinity, Pass],
            ),
            (
                "existing pod's anti-affinity keeps a matching pod out of its zone",
                web.clone(),
                vec![
                    on("n1", "e1")
                        .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
                ],
                zones(),
                vec![Existing, Existing, Pass, Pass],
            ),
            (
                "existing pod's anti-affinity that does not select the pod",
                PodBuilder::new("p").label("app", "api"),
                vec![
                    on("n1", "e1")
                        .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
                ],
                zones(),
                vec![Pass, Pass, Pass, Pass],
            ),
            (
                "existing pod's anti-affinity looks only in its own namespace by default",
                web.clone(),
                vec![
                    on("n1", "e1")
                        .namespace("other")
                        .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
                ],
                zones(),
                vec![Pass, Pass, Pass, Pass],
            ),
            (
                "existing pod's namespaceSelector is matched against the pod's namespace labels",
                web.clone(),
                vec![
                    on("n1", "e1").namespace("other").affinity(
                        terms()
                            .required_anti(ns_selector(
                                term(ZONE, &[("app", "web")]),
                                &[("team", "a")],
                            ))
                            .build(),
                    ),
                ],
                zones(),
                vec![Existing, Existing, Pass, Pass],
            ),
            (
                "affinity and anti-affinity together",
                PodBuilder::new("p").affinity(
                    terms()
                        .required(term(ZONE, &[("app", "db")]))
                        .required_anti(term(HOST, &[("app", "db")]))
                        .build(),
                ),
                vec![db("n1", "d1")],
                zones(),
                vec![AntiAffinity, Pass, Affinity, Affinity],
            ),
            (
                "affinity is checked first: a node failing several rules reports affinity",
                web.clone().affinity(
                    terms()
                        .required(term(ZONE, &[("app", "db")]))
                        .required_anti(term(ZONE, &[("app", "cache")]))
                        .build(),
                ),
                vec![
                    db("n1", "d1"),
                    on("n3", "c3")
                        .label("app", "cache")
                        .affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build()),
                ],
                zones(),
                vec![Pass, Pass, Affinity, Affinity],
            ),
            (
                "a term that cannot be parsed makes the pod unschedulable everywhere",
                PodBuilder::new("p").affinity(
                    terms()
                        .required(PodAffinityTerm {
                            label_selector: Some(LabelSelector {
                                match_expressions: Some(vec![LabelSelectorRequirement {
                                    key: "app".into(),
                                    operator: "In".into(),
                                    values: None,
                                }]),
                                match_labels: None,
                            }),
                            topology_key: ZONE.into(),
                            ..Default::default()
                        })
                        .build(),
                ),
                vec![],
                zones(),
                vec![ParseError, ParseError, ParseError, ParseError],
            ),
        ];
        let plugin = InterPodAffinity::default();
        for (name, pod, existing, nodes, want) in cases {
            let snap = cluster(nodes, existing);
            assert_eq!(run_filter(&plugin, &pod.info(), &snap), want, "{name}");
        }
    }

    #[test]
    fn pre_filter_skips_when_no_required_term_applies() {
        let anti_web = || {
            on("n1", "e1").affinity(terms().required_anti(term(ZONE, &[("app", "web")])).build())
        };
        let cases: Vec<(&str, PodBuilder, Vec<PodBuilder>, Code)> = vec![
            (
                "no terms, no pods with anti-affinity",
                PodBuilder::new("p"),
                vec![],
                Code::Skip,
            ),
            (
                "preferred terms only",
                PodBuilder::new("p")
                    .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
                vec![],
                Code::Skip,
            ),
            (
                "existing anti-affinity that does not select the pod",
                PodBuilder::new("p").label("app", "api"),
                vec![anti_web()],
                Code::Skip,
            ),
            (
                "existing anti-affinity that selects the pod",
                PodBuilder::new("p").label("app", "web"),
                vec![anti_web()],
                Code::Success,
            ),
            (
                "a required anti-affinity term of the pod",
                PodBuilder::new("p")
                    .affinity(terms().required_anti(term(ZONE, &[("app", "db")])).build()),
                vec![],
                Code::Success,
            ),
        ];
        for (name, pod, existing, want) in cases {
            let snap = cluster(zones(), existing);
            let mut state = CycleState::new();
            let (_, status) = PreFilterPlugin::pre_filter(
                &InterPodAffinity::default(),
                &mut state,
                &pod.info(),
                &snap,
            );
            assert_eq!(status.code, want, "{name}");
        }
    }

    /// PreScore, Score on every node, NormalizeScore: `None` when PreScore skips, else the raw
    /// and the normalized scores in node order.
    fn run_score(
        plugin: &dyn Plugin,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> Option<(Vec<i64>, Vec<i64>)> {
        let mut state = CycleState::new();
        let pre_score = plugin.pre_score().expect("a PreScore plugin");
        let scorer = plugin.score().expect("a Score plugin");
        let status = pre_score.pre_score(&mut state, pod, snap.nodes(), snap);
        if status.is_skip() {
            return None;
        }
        assert!(status.is_success(), "{status}");
        let mut scores: Vec<NodeScore> = snap
            .nodes()
            .iter()
            .map(|n| NodeScore {
                name: n.name.clone(),
                score: scorer.score(&state, pod, n).expect("score"),
            })
            .collect();
        let raw = scores.iter().map(|s| s.score).collect();
        assert!(
            scorer
                .normalize_scores(&state, pod, &mut scores)
                .is_success()
        );
        Some((raw, scores.iter().map(|s| s.score).collect()))
    }

    #[test]
    fn score() {
        let args = |hard: i32, ignore: bool| InterPodAffinityArgs {
            hard_pod_affinity_weight: hard,
            ignore_preferred_terms_of_existing_pods: ignore,
        };
        let db = |node: &str, name: &str| on(node, name).label("app", "db");
        let web = PodBuilder::new("p").label("app", "web");
        // An existing pod requiring (hard) affinity to web pods in its zone, on n3.
        let requires_web =
            || on("n3", "r3").affinity(terms().required(term(ZONE, &[("app", "web")])).build());
        // An existing pod preferring (weight 5) web pods in its zone, on n1.
        let prefers_web =
            || on("n1", "p1").affinity(terms().preferred(5, term(ZONE, &[("app", "web")])).build());
        type Row = (
            &'static str,
            InterPodAffinityArgs,
            PodBuilder,
            Vec<PodBuilder>,
            Vec<NodeBuilder>,
            Option<(Vec<i64>, Vec<i64>)>,
        );
        let cases: Vec<Row> = vec![
            (
                // z1 += 5; min 0, max 5.
                "preferred affinity adds its weight to the matching pod's zone",
                args(1, false),
                PodBuilder::new("p")
                    .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
                vec![db("n1", "d1")],
                zones(),
                Some((vec![5, 5, 0, 0], vec![100, 100, 0, 0])),
            ),
            (
                // z1 -= 4; min -4, max 0.
                "preferred anti-affinity subtracts its weight",
                args(1, false),
                PodBuilder::new("p").affinity(
                    terms()
                        .preferred_anti(4, term(ZONE, &[("app", "db")]))
                        .build(),
                ),
                vec![db("n1", "d1")],
                zones(),
                Some((vec![-4, -4, 0, 0], vec![0, 0, 100, 100])),
            ),
            (
                // host n1 += 8, host n3 += 8, z1 -= 3; min -3, max 8, diff 11:
                // n1 100*8/11 = 72.7, n4 100*3/11 = 27.3, rounded down.
                "affinity and anti-affinity over different topology keys add up per node",
                args(1, false),
                PodBuilder::new("p").affinity(
                    terms()
                        .preferred(8, term(HOST, &[("app", "db")]))
                        .preferred_anti(3, term(ZONE, &[("app", "web")]))
                        .build(),
                ),
                vec![
                    db("n1", "d1"),
                    db("n3", "d3"),
                    on("n2", "w2").label("app", "web"),
                ],
                zones(),
                Some((vec![5, -3, 8, 0], vec![72, 0, 100, 27])),
            ),
            (
                // z2 += 5 from d3; d4's node has no zone so it counts nowhere.
                "a pod on a node without the topology key counts for no domain",
                args(1, false),
                PodBuilder::new("p")
                    .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
                vec![db("n4", "d4"), db("n3", "d3")],
                zones(),
                Some((vec![0, 0, 5, 0], vec![0, 0, 100, 0])),
            ),
            (
                // z2 += 7, z1 -= 2; min -2, max 7, diff 9: n4 100*2/9 = 22.2.
                "existing pods' preferred terms toward the incoming pod",
                args(1, false),
                web.clone(),
                vec![
                    on("n3", "e3")
                        .affinity(terms().preferred(7, term(ZONE, &[("app", "web")])).build()),
                    on("n1", "e1").affinity(
                        terms()
                            .preferred_anti(2, term(ZONE, &[("app", "web")]))
                            .build(),
                    ),
                ],
                zones(),
                Some((vec![-2, -2, 7, 0], vec![0, 0, 100, 22])),
            ),
            (
                // z1 += 5 (preferred), z2 += 1 (required, hardPodAffinityWeight 1).
                "existing pods' required affinity counts hardPodAffinityWeight",
                args(1, false),
                web.clone(),
                vec![requires_web(), prefers_web()],
                zones(),
                Some((vec![5, 5, 1, 0], vec![100, 100, 20, 0])),
            ),
            (
                // z1 += 5, z2 += 10.
                "a higher hardPodAffinityWeight",
                args(10, false),
                web.clone(),
                vec![requires_web(), prefers_web()],
                zones(),
                Some((vec![5, 5, 10, 0], vec![50, 50, 100, 0])),
            ),
            (
                "hardPodAffinityWeight 0 ignores existing pods' required affinity",
                args(0, false),
                web.clone(),
                vec![requires_web()],
                zones(),
                None,
            ),
            (
                "ignorePreferredTermsOfExistingPods skips a pod without preferred terms",
                args(1, true),
                web.clone(),
                vec![requires_web(), prefers_web()],
                zones(),
                None,
            ),
            (
                // As kube-scheduler: the option only skips pods without preferred terms.
                // z1 += 5 (p1's preference), z2 += 1 (the pod's preference for d3).
                "ignorePreferredTermsOfExistingPods with a pod that has preferred terms",
                args(1, true),
                web.clone()
                    .affinity(terms().preferred(1, term(ZONE, &[("app", "db")])).build()),
                vec![prefers_web(), db("n3", "d3")],
                zones(),
                Some((vec![5, 5, 1, 0], vec![100, 100, 20, 0])),
            ),
            (
                "nothing matches: PreScore skips",
                args(1, false),
                PodBuilder::new("p")
                    .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
                vec![on("n1", "w1").label("app", "web")],
                zones(),
                None,
            ),
            (
                // Only d3 in `other` (team=b) is selected.
                "preferred term with a namespaceSelector",
                args(1, false),
                PodBuilder::new("p").affinity(
                    terms()
                        .preferred(
                            5,
                            ns_selector(term(ZONE, &[("app", "db")]), &[("team", "b")]),
                        )
                        .build(),
                ),
                vec![db("n1", "d1"), db("n3", "d3").namespace("other")],
                zones(),
                Some((vec![0, 0, 5, 0], vec![0, 0, 100, 0])),
            ),
            (
                // e3's term selects `default` (team=a) by label; e1's term, without namespaces,
                // looks only in its own namespace `other`.
                "existing pods' terms match the incoming pod through its namespace",
                args(1, false),
                web.clone(),
                vec![
                    on("n3", "e3").namespace("other").affinity(
                        terms()
                            .preferred(
                                3,
                                ns_selector(term(ZONE, &[("app", "web")]), &[("team", "a")]),
                            )
                            .build(),
                    ),
                    on("n1", "e1")
                        .namespace("other")
                        .affinity(terms().preferred(9, term(ZONE, &[("app", "web")])).build()),
                ],
                zones(),
                Some((vec![0, 0, 3, 0], vec![0, 0, 100, 0])),
            ),
            (
                "equal scores normalize to 0",
                args(1, false),
                PodBuilder::new("p")
                    .affinity(terms().preferred(5, term(ZONE, &[("app", "db")])).build()),
                vec![db("n1", "d1")],
                vec![
                    NodeBuilder::new("n1").label(ZONE, "z1"),
                    NodeBuilder::new("n2").label(ZONE, "z1"),
                ],
                Some((vec![5, 5], vec![0, 0])),
            ),
        ];
        for (name, args, pod, existing, nodes, want) in cases {
            let snap = cluster(nodes, existing);
            let plugin = InterPodAffinity::new(args);
            assert_eq!(run_score(&plugin, &pod.info(), &snap), want, "{name}");
        }
    }

    #[test]
    fn args_default_as_kube_scheduler() {
        let args: InterPodAffinityArgs =
            decode_args(None, "pluginConfig[0].args").expect("defaults");
        assert_eq!(args, InterPodAffinityArgs::default());
        assert_eq!(args.hard_pod_affinity_weight, 1);
        assert!(!args.ignore_preferred_terms_of_existing_pods);
        let partial: InterPodAffinityArgs = decode_args(
            Some(&serde_json::json!({"ignorePreferredTermsOfExistingPods": true})),
            "a",
        )
        .expect("valid");
        assert_eq!(partial.hard_pod_affinity_weight, 1);
        assert!(partial.ignore_preferred_terms_of_existing_pods);
    }

    #[test]
    fn build_validates_args() {
        let path = "pluginConfig[1].args";
        let cases: Vec<(&str, serde_json::Value, Option<&str>)> = vec![
            ("empty args", serde_json::json!({}), None),
            (
                "lowest weight",
                serde_json::json!({"hardPodAffinityWeight": 0}),
                None,
            ),
            (
                "highest weight and ignore",
                serde_json::json!({"hardPodAffinityWeight": 100, "ignorePreferredTermsOfExistingPods": true}),
                None,
            ),
            (
                "weight above 100",
                serde_json::json!({"hardPodAffinityWeight": 101}),
                Some("pluginConfig[1].args.hardPodAffinityWeight"),
            ),
            (
                "negative weight",
                serde_json::json!({"hardPodAffinityWeight": -1}),
                Some("pluginConfig[1].args.hardPodAffinityWeight"),
            ),
            (
                "unknown field",
                serde_json::json!({"hardPodAffinityWeights": 1}),
                Some("pluginConfig[1].args"),
            ),
            (
                "wrong type",
                serde_json::json!({"hardPodAffinityWeight": "1"}),
                Some("pluginConfig[1].args"),
            ),
        ];
        for (name, json, want) in cases {
            match (build(Some(&json), path), want) {
                (Ok(plugin), None) => assert_eq!(plugin.name(), NAME, "{name}"),
                (Err(errs), Some(want)) => {
                    let paths: Vec<&str> = errs.0.iter().map(|e| e.path.as_str()).collect();
                    assert_eq!(paths, vec![want], "{name}: {errs}");
                }
                (Ok(_), Some(want)) => panic!("{name}: want an error at {want}"),
                (Err(errs), None) => panic!("{name}: unexpected error {errs}"),
            }
        }
    }
}
