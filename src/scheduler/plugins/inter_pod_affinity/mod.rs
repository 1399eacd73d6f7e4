//! InterPodAffinity: places a pod relative to the pods already running, by topology domain, as
//! kube-scheduler's InterPodAffinity plugin does. Filter enforces the required terms (the
//! incoming pod's affinity and anti-affinity, and the existing pods' anti-affinity toward it);
//! Score ranks nodes by the preferred terms of both sides and the existing pods' required
//! affinity terms.
//!
//! All matching of pods against terms happens once per cycle in PreFilter and PreScore, which
//! reduce it to counts per topology pair (`topologyKey` = value). Filter and Score, which run
//! for every node, only look the node's labels up in those counts.

mod filtering;
mod hints;
mod scoring;

use std::collections::BTreeMap;

// Per-cycle maps keyed by topology keys and values: foldhash is several times faster than
// SipHash on them, and nothing outside the cycle chooses their keys.
use foldhash::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::node_sums::NodeSums;
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
use crate::scheduler::plugins::handle::Handle;

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
    /// PreScore's sums kept from cycle to cycle.
    score_sums: Arc<NodeSums<scoring::ScoreQuestion, scoring::ScoreSums>>,
}

impl InterPodAffinity {
    /// A plugin with args that [`InterPodAffinityArgs::validate`] accepted.
    pub fn new(args: InterPodAffinityArgs) -> Self {
        InterPodAffinity {
            args,
            score_sums: Arc::default(),
        }
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
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        let affinity = pod.pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        if affinity.is_some_and(|a| a.pod_affinity.is_some() || a.pod_anti_affinity.is_some()) {
            return false;
        }
        // Other pods' preferred terms score it by its labels, within namespaces: upstream signs
        // the labels alone; tether adds the namespace, so that two pods scored differently by
        // a term's namespaces never share a signature.
        if !self.args.ignore_preferred_terms_of_existing_pods {
            let labels = (&pod.pod.metadata.namespace, &pod.pod.metadata.labels);
            signature.part(crate::scheduler::framework::signature::LABELS, &labels);
        }
        true
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
    /// Whether it added.
    fn add_for_node(&mut self, node: &NodeInfo, key: &Arc<Label>, n: i64) -> bool {
        let value = node.topology.value(key);
        if let Some(value) = value {
            self.values_mut(key).add(value, n);
        }
        value.is_some()
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

#[cfg(test)]
mod tests;
