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

use std::collections::BTreeMap;

// Per-cycle maps keyed by topology keys and values: foldhash is several times faster than
// SipHash on them, and nothing outside the cycle chooses their keys.
use foldhash::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::parallel::fold_per_thread;
use crate::scheduler::framework::pod_group::{Answers, GroupMemo, PodGroup};
use crate::scheduler::framework::pod_info::{AffinityTerm, PodInfo, WeightedAffinityTerm};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::topology::Label;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath, decode_args};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PodsChange, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::plugins::registry::Handle;

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
    _handle: &Handle,
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
    fn pre_filter_reads_pods(&self) -> bool {
        true
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

/// Numbers per topology value of one key, by the value's interned id: in a vector for the
/// usual small ids (no hashing on the per-node path), in a map past `DENSE_IDS`.
#[derive(Clone, Debug, Default)]
struct Sums {
    dense: Vec<i64>,
    sparse: HashMap<u32, i64>,
    /// The sum over every value.
    total: i64,
}

/// Ids below this are summed in a vector (at most 512 KiB per key and thread).
const DENSE_IDS: u32 = 1 << 16;

impl Sums {
    fn add(&mut self, value: u32, n: i64) {
        self.total += n;
        if value < DENSE_IDS {
            let i = value as usize;
            if i >= self.dense.len() {
                self.dense.resize(i + 1, 0);
            }
            self.dense[i] += n;
        } else {
            *self.sparse.entry(value).or_default() += n;
        }
    }

    fn get(&self, value: u32) -> i64 {
        if value < DENSE_IDS {
            self.dense.get(value as usize).copied().unwrap_or(0)
        } else {
            self.sparse.get(&value).copied().unwrap_or(0)
        }
    }

    fn merge(&mut self, other: Sums) {
        self.total += other.total;
        if self.dense.len() < other.dense.len() {
            self.dense.resize(other.dense.len(), 0);
        }
        for (into, n) in self.dense.iter_mut().zip(other.dense) {
            *into += n;
        }
        for (value, n) in other.sparse {
            *self.sparse.entry(value).or_default() += n;
        }
    }
}

/// A number per topology pair, `topologyKey → value → n`: kube-scheduler's
/// topologyToMatchedTermCount (Filter) and scoreMap (Score). Keyed by topology key first so
/// that a node is checked with one lookup per key; a pod's terms name few keys, so they are a
/// short list. Keys and values are interned labels: a node's pair is found by number.
#[derive(Clone, Debug, Default)]
struct TopologyMap(Vec<(Arc<Label>, Sums)>);

impl TopologyMap {
    fn values(&self, key: &Label) -> Option<&Sums> {
        self.0
            .iter()
            .find(|(k, _)| k.id() == key.id())
            .map(|(_, v)| v)
    }

    fn values_mut(&mut self, key: &Arc<Label>) -> &mut Sums {
        let i = match self.0.iter().position(|(k, _)| k.id() == key.id()) {
            Some(i) => i,
            None => {
                self.0.push((key.clone(), Sums::default()));
                self.0.len() - 1
            }
        };
        &mut self.0[i].1
    }

    /// Adds `n` to the pair (`key`, the node's value for it); nothing when the node lacks `key`.
    fn add_for_node(&mut self, node: &NodeInfo, key: &Arc<Label>, n: i64) {
        if let Some(value) = node.topology.value(key) {
            self.values_mut(key).add(value, n);
        }
    }

    /// The sum of the numbers of every topology pair of the node.
    fn sum_for_node(&self, node: &NodeInfo) -> i64 {
        self.0
            .iter()
            .filter_map(|(key, values)| node.topology.value(key).map(|v| values.get(v)))
            .sum()
    }

    fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The sum of every pair's number.
    fn total(&self) -> i64 {
        self.0.iter().map(|(_, values)| values.total).sum()
    }

    /// Both maps added pair by pair.
    fn merge(mut self, other: TopologyMap) -> TopologyMap {
        for (key, from) in other.0 {
            self.values_mut(&key).merge(from);
        }
        self
    }

    /// Every map of `maps` added pair by pair.
    fn sum(maps: impl IntoIterator<Item = TopologyMap>) -> TopologyMap {
        maps.into_iter()
            .reduce(TopologyMap::merge)
            .unwrap_or_default()
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

/// Whether the pods of `group` match every one of the (namespace-resolved) terms; false for
/// no terms.
fn matches_all_terms(terms: &[AffinityTerm], group: &PodGroup) -> bool {
    !terms.is_empty() && terms.iter().all(|t| t.matches_group(group, None))
}

/// What left one node in a preemption dry run, per pair (key id, value id, pods), or came to
/// it as nominated pods (a negative number): a few entries, laid over a [`TopologyMap`] shared
/// with the cycle.
#[derive(Clone, Debug, Default)]
struct Removed(Vec<(u32, u32, i64)>);

impl Removed {
    /// Counts `n` pods off the pair (`key`, the node's value for it); nothing when it lacks it.
    fn add_for_node(&mut self, node: &NodeInfo, key: &Label, n: i64) {
        if let Some(value) = node.topology.value(key) {
            self.0.push((key.id(), value, n));
        }
    }

    fn get(&self, key: u32, value: u32) -> i64 {
        (self.0.iter())
            .filter(|&&(k, v, _)| k == key && v == value)
            .map(|&(_, _, n)| n)
            .sum()
    }

    fn total(&self) -> i64 {
        self.0.iter().map(|&(_, _, n)| n).sum()
    }
}

/// A map of the cycle and what a dry run took off it.
struct Counts<'a>(&'a TopologyMap, &'a Removed);

impl Counts<'_> {
    /// Whether no pair has a pod (upstream deletes a pair that falls to 0).
    fn is_empty(&self) -> bool {
        self.0.total() - self.1.total() <= 0
    }

    /// The number for the pair of `key` on the node; `None` when it lacks `key`.
    fn for_node(&self, node: &NodeInfo, key: &Label) -> Option<i64> {
        let value = node.topology.value(key)?;
        let n = self.0.values(key).map_or(0, |values| values.get(value));
        Some(n - self.1.get(key.id(), value))
    }

    /// Whether any topology pair of the node has a positive number.
    fn any_positive_for_node(&self, node: &NodeInfo) -> bool {
        self.0.0.iter().any(|(key, values)| {
            node.topology
                .value(key)
                .is_some_and(|v| values.get(v) - self.1.get(key.id(), v) > 0)
        })
    }
}

/// What PreFilter computed for Filter (kube-scheduler's preFilterState). The maps are shared,
/// so that a preemption dry run copies the state cheaply and lays what it removed over them.
#[derive(Clone, Debug)]
struct PreFilterState {
    /// Existing pods whose required anti-affinity terms match the incoming pod, per pair.
    existing_anti_affinity_counts: Arc<TopologyMap>,
    /// Pods matching all of the incoming pod's required affinity terms, per pair of each term.
    affinity_counts: Arc<TopologyMap>,
    /// Pods matching each of the incoming pod's required anti-affinity terms, per pair.
    anti_affinity_counts: Arc<TopologyMap>,
    /// The incoming pod's required affinity / anti-affinity terms, namespaces resolved.
    affinity: Arc<Vec<AffinityTerm>>,
    anti_affinity: Arc<Vec<AffinityTerm>>,
    /// The incoming pod's topology keys of its required affinity / anti-affinity terms.
    affinity_keys: Vec<Arc<Label>>,
    anti_affinity_keys: Vec<Arc<Label>>,
    /// Whether the incoming pod matches all its own required affinity terms (the first pod of
    /// a group that has affinity to itself).
    matches_own_affinity: bool,
    /// What left or came to one node (see [`Removed`]), for each of the three maps.
    removed_existing: Removed,
    removed_affinity: Removed,
    removed_anti_affinity: Removed,
}

impl PreFilterState {
    /// This state with `pods` of `node` counted `sign` times off the three maps (1: taken
    /// off, -1: added), each matched as PreFilter matches the groups: their required
    /// anti-affinity terms against the incoming pod, the incoming pod's required terms
    /// against them.
    fn lay_over(
        &self,
        pod: &PodInfo,
        node: &NodeInfo,
        pods: &[&PodInfo],
        sign: i64,
        snapshot: &Snapshot,
    ) -> Self {
        let mut next = self.clone();
        let ns_labels = snapshot.namespace_labels(pod.namespace());
        for p in pods {
            for term in &p.group.terms().required_anti_affinity {
                if term.matches(pod, ns_labels) {
                    next.removed_existing
                        .add_for_node(node, &term.topology_key, sign);
                }
            }
            if matches_all_terms(&self.affinity, &p.group) {
                for term in self.affinity.iter() {
                    next.removed_affinity
                        .add_for_node(node, &term.topology_key, sign);
                }
            }
            for term in self.anti_affinity.iter() {
                if term.matches_group(&p.group, None) {
                    next.removed_anti_affinity
                        .add_for_node(node, &term.topology_key, sign);
                }
            }
        }
        next
    }

    fn existing(&self) -> Counts<'_> {
        Counts(&self.existing_anti_affinity_counts, &self.removed_existing)
    }

    fn affinity(&self) -> Counts<'_> {
        Counts(&self.affinity_counts, &self.removed_affinity)
    }

    fn anti_affinity(&self) -> Counts<'_> {
        Counts(&self.anti_affinity_counts, &self.removed_anti_affinity)
    }

    /// Every required affinity term has a matching pod in the node's domain, or no pod matches
    /// anywhere and the pod matches its own terms. A node lacking a topology key fails.
    fn satisfies_pod_affinity(&self, node: &NodeInfo) -> bool {
        let counts = self.affinity();
        let mut pods_exist = true;
        for key in &self.affinity_keys {
            match counts.for_node(node, key) {
                None => return false,
                Some(n) if n <= 0 => pods_exist = false,
                Some(_) => {}
            }
        }
        pods_exist || (counts.is_empty() && self.matches_own_affinity)
    }

    /// No required anti-affinity term of the pod has a matching pod in the node's domain.
    fn satisfies_pod_anti_affinity(&self, node: &NodeInfo) -> bool {
        let counts = self.anti_affinity();
        counts.is_empty()
            || !self
                .anti_affinity_keys
                .iter()
                .any(|key| counts.for_node(node, key).unwrap_or(0) > 0)
    }

    /// No existing pod's required anti-affinity term covers the node's domain.
    fn satisfies_existing_pods_anti_affinity(&self, node: &NodeInfo) -> bool {
        !self.existing().any_positive_for_node(node)
    }
}

/// For every existing pod with required anti-affinity terms, the pairs (on its node) of the
/// terms the incoming pod matches. Terms are matched once per group of alike pods.
fn existing_anti_affinity_counts(pod: &PodInfo, snapshot: &Snapshot) -> TopologyMap {
    let ns_labels = snapshot.namespace_labels(pod.namespace());
    let memo = GroupMemo::new();
    let nodes: Vec<&Arc<NodeInfo>> = snapshot.have_pods_with_required_anti_affinity().collect();
    let per_thread = fold_per_thread(&nodes, TopologyMap::default, |counts, node| {
        for g in &node.groups {
            let terms = &g.group.terms().required_anti_affinity;
            if terms.is_empty() {
                continue;
            }
            let answers = || Answers::ask(terms.len(), |t| terms[t].matches(pod, ns_labels));
            memo.with(&g.group, answers, |matched| {
                for (t, term) in terms.iter().enumerate() {
                    if matched.get(t) {
                        counts.add_for_node(node, &term.topology_key, i64::from(g.pods));
                    }
                }
            });
        }
    });
    TopologyMap::sum(per_thread)
}

/// The pairs of the existing pods matching the incoming pod's required affinity terms (all of
/// them at once) and anti-affinity terms (each on its own), matched once per group.
fn incoming_counts(
    affinity: &[AffinityTerm],
    anti_affinity: &[AffinityTerm],
    snapshot: &Snapshot,
) -> (TopologyMap, TopologyMap) {
    if affinity.is_empty() && anti_affinity.is_empty() {
        return Default::default();
    }
    // Question 0: all affinity terms match; question 1 + j: anti-affinity term j matches.
    let memo = GroupMemo::new();
    let questions = 1 + anti_affinity.len();
    let per_thread = fold_per_thread(
        snapshot.nodes(),
        <(TopologyMap, TopologyMap)>::default,
        |(aff, anti), node| {
            for g in &node.groups {
                let ask = |q: usize| match q {
                    0 => matches_all_terms(affinity, &g.group),
                    q => anti_affinity[q - 1].matches_group(&g.group, None),
                };
                let n = i64::from(g.pods);
                memo.with(
                    &g.group,
                    || Answers::ask(questions, ask),
                    |matched| {
                        if matched.get(0) {
                            for term in affinity {
                                aff.add_for_node(node, &term.topology_key, n);
                            }
                        }
                        for (j, term) in anti_affinity.iter().enumerate() {
                            if matched.get(1 + j) {
                                anti.add_for_node(node, &term.topology_key, n);
                            }
                        }
                    },
                );
            }
        },
    );
    let (aff, anti): (Vec<_>, Vec<_>) = per_thread.into_iter().unzip();
    (TopologyMap::sum(aff), TopologyMap::sum(anti))
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
            .terms()
            .required_affinity
            .iter()
            .map(|t| resolve_namespaces(t, snapshot))
            .collect();
        let anti_affinity: Vec<AffinityTerm> = pod
            .terms()
            .required_anti_affinity
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
                existing_anti_affinity_counts: Arc::new(existing_anti_affinity_counts),
                affinity_counts: Arc::new(affinity_counts),
                anti_affinity_counts: Arc::new(anti_affinity_counts),
                affinity_keys: affinity.iter().map(|t| t.topology_key.clone()).collect(),
                anti_affinity_keys: anti_affinity
                    .iter()
                    .map(|t| t.topology_key.clone())
                    .collect(),
                matches_own_affinity: matches_all_terms(&affinity, &pod.group),
                affinity: Arc::new(affinity),
                anti_affinity: Arc::new(anti_affinity),
                removed_existing: Removed::default(),
                removed_affinity: Removed::default(),
                removed_anti_affinity: Removed::default(),
            },
        );
        (PreFilterResult::all_nodes(), Status::success())
    }

    /// Takes the pods off, or adds them to, the three maps at the node's pairs.
    fn lay_over_pods(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        pods: &[&PodInfo],
        change: PodsChange,
        snapshot: &Snapshot,
    ) -> bool {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY) else {
            return false;
        };
        let next = s.lay_over(pod, node, pods, change.taken_off(), snapshot);
        state.write(PRE_FILTER_STATE_KEY, next);
        true
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
        if !s.satisfies_pod_affinity(node) {
            return Status::unresolvable(ERR_REASON_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_pod_anti_affinity(node) {
            return Status::unschedulable(ERR_REASON_ANTI_AFFINITY_RULES_NOT_MATCH);
        }
        if !s.satisfies_existing_pods_anti_affinity(node) {
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
    /// Adds what the `n` pods of one group on a node contribute to the pairs of that node, as
    /// kube-scheduler's processExistingPod does for each: the incoming pod's preferred terms
    /// matching them, and their own required affinity (at hardPodAffinityWeight) and preferred
    /// terms matching the incoming pod. Terms are matched once per group through `memo`.
    fn add_group(
        &self,
        scores: &mut TopologyMap,
        memo: &GroupMemo,
        group: &PodGroup,
        n: u32,
        node: &NodeInfo,
    ) {
        let theirs = group.terms();
        let hard = i64::from(self.hard_pod_affinity_weight);
        // Every term that may add to the node's pairs, with its signed weight and the pod it
        // must select: the incoming pod's preferred terms select the group; the group's required
        // affinity (at hardPodAffinityWeight) and preferred terms select the incoming pod.
        let terms = || {
            let ours = (self.preferred_affinity.iter())
                .map(|w| (&w.term, i64::from(w.weight)))
                .chain(
                    (self.preferred_anti_affinity.iter()).map(|w| (&w.term, -i64::from(w.weight))),
                )
                .map(|(term, weight)| (term, weight, Selects::Group));
            let their_terms = (theirs.required_affinity.iter())
                .map(move |term| (term, hard))
                .chain((theirs.preferred_affinity.iter()).map(|w| (&w.term, i64::from(w.weight))))
                .chain(
                    (theirs.preferred_anti_affinity.iter())
                        .map(|w| (&w.term, -i64::from(w.weight))),
                )
                .map(|(term, weight)| (term, weight, Selects::IncomingPod));
            ours.chain(their_terms)
        };
        let ask = |q: usize| match terms().nth(q) {
            // hardPodAffinityWeight 0 turns the required terms off: they add nothing, not even
            // their topology key.
            None | Some((_, 0, _)) => false,
            Some((term, _, Selects::Group)) => term.matches_group(group, None),
            Some((term, _, Selects::IncomingPod)) => term.matches(self.pod, self.pod_ns_labels),
        };
        let answers = || Answers::ask(terms().count(), ask);
        memo.with(group, answers, |matched| {
            if matched.none() {
                return;
            }
            for (q, (term, weight, _)) in terms().enumerate() {
                if matched.get(q) {
                    scores.add_for_node(node, &term.topology_key, weight * i64::from(n));
                }
            }
        });
    }
}

/// Which pod a scoring term is matched against.
#[derive(Clone, Copy)]
enum Selects {
    /// The group of existing pods (the incoming pod's terms).
    Group,
    /// The incoming pod (the existing pods' own terms).
    IncomingPod,
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
        let has_constraints = !pod.terms().preferred_affinity.is_empty()
            || !pod.terms().preferred_anti_affinity.is_empty();
        if self.args.ignore_preferred_terms_of_existing_pods && !has_constraints {
            return Status::skip();
        }
        let inputs = ScoreInputs {
            pod,
            pod_ns_labels: snapshot.namespace_labels(pod.namespace()),
            preferred_affinity: resolve_weighted(&pod.terms().preferred_affinity, snapshot),
            preferred_anti_affinity: resolve_weighted(
                &pod.terms().preferred_anti_affinity,
                snapshot,
            ),
            hard_pod_affinity_weight: self.args.hard_pod_affinity_weight,
        };
        let nodes: Vec<&Arc<NodeInfo>> = if has_constraints {
            snapshot.nodes().iter().collect()
        } else {
            snapshot.have_pods_with_affinity().collect()
        };
        let memo = GroupMemo::new();
        let per_thread = fold_per_thread(&nodes, TopologyMap::default, |scores, node| {
            // Without preferred terms of the pod's own, only groups with terms contribute.
            let groups = node
                .groups
                .iter()
                .filter(|g| has_constraints || !g.group.terms().is_empty());
            for g in groups {
                inputs.add_group(scores, &memo, &g.group, g.pods, node);
            }
        });
        let topology_score = TopologyMap::sum(per_thread);
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
        Ok(s.topology_score.sum_for_node(node))
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
