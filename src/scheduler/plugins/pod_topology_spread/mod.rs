//! PodTopologySpread: spreads the pods a selector matches evenly across topology domains
//! (zones, nodes, any node label), as kube-scheduler's PodTopologySpread plugin does.
//!
//! Hard constraints (`whenUnsatisfiable: DoNotSchedule`) are checked in Filter against counts
//! taken once in PreFilter; soft ones (`ScheduleAnyway`, and the cluster's default constraints
//! for pods without constraints of their own) rank nodes in Score from counts taken in PreScore.

mod hints;

use std::collections::BTreeMap;

// Per-cycle maps keyed by node and domain names: foldhash is several times faster than
// SipHash on them, and nothing outside the cycle chooses their keys.
use foldhash::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration, TopologySpreadConstraint};
use serde::{Deserialize, Serialize};

use crate::k8s::labels::{Requirement, Selector, SelectorError};
use crate::k8s::node_selector::RequiredNodeAffinity;
use crate::k8s::taints::find_untolerated;
use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::parallel::fold_per_thread;
use crate::scheduler::framework::pod_group::{Answers, GroupMemo, PodGroup};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::topology::{self, Label};
use crate::scheduler::framework::validation::FieldPath;
use crate::scheduler::framework::validation::{FieldErrors, decode_args};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
pub use crate::scheduler::informers::selectors::{DefaultSelectorSource, NoDefaultSelectors};
use crate::scheduler::plugins::registry::Handle;

pub const NAME: &str = "PodTopologySpread";
/// The plugin's Score weight in kube-scheduler's default profile.
pub const DEFAULT_WEIGHT: i32 = 2;

/// Filter's reason when the skew would exceed a constraint's maxSkew.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Filter's reason when the node lacks a constraint's topology key.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

const PRE_FILTER_STATE_KEY: &str = "PreFilterPodTopologySpread";
const PRE_SCORE_STATE_KEY: &str = "PreScorePodTopologySpread";

const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";
const DO_NOT_SCHEDULE: &str = "DoNotSchedule";
const SCHEDULE_ANYWAY: &str = "ScheduleAnyway";

/// Where the default constraints come from, as kube-scheduler's `defaultingType`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum DefaultingType {
    /// kube-scheduler's built-in defaults: hostname maxSkew 3 and zone maxSkew 5, both
    /// ScheduleAnyway. `defaultConstraints` must then be empty.
    #[default]
    System,
    /// The `defaultConstraints` listed in the args (possibly none).
    List,
}

/// The plugin's args, as kube-scheduler's PodTopologySpreadArgs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct PodTopologySpreadArgs {
    /// Constraints for pods that state none of their own; they must not have a labelSelector,
    /// which is derived for each pod from the workloads selecting it.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub default_constraints: Vec<TopologySpreadConstraint>,
    #[serde(default)]
    pub defaulting_type: DefaultingType,
}

impl PodTopologySpreadArgs {
    /// Checks the args as kube-scheduler's ValidatePodTopologySpreadArgs, naming fields under
    /// `path` (for example `pluginConfig[1].args.defaultConstraints[0].maxSkew`).
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        if self.defaulting_type == DefaultingType::System && !self.default_constraints.is_empty() {
            errs.push(
                path.child("defaultingType"),
                "must be List when defaultConstraints are set",
            );
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let at = path.child("defaultConstraints").index(i);
            if c.max_skew <= 0 {
                errs.push(
                    at.child("maxSkew"),
                    format!("{} is not in the valid range (0, inf)", c.max_skew),
                );
            }
            if c.topology_key.is_empty() {
                errs.push(at.child("topologyKey"), "must not be empty");
            } else {
                errs.check_qualified_name(&at.child("topologyKey"), &c.topology_key);
            }
            match c.when_unsatisfiable.as_str() {
                DO_NOT_SCHEDULE | SCHEDULE_ANYWAY => {}
                "" => errs.push(at.child("whenUnsatisfiable"), "must not be empty"),
                other => errs.push(
                    at.child("whenUnsatisfiable"),
                    format!("{other:?} is not supported: must be DoNotSchedule or ScheduleAnyway"),
                ),
            }
            if c.label_selector.is_some() {
                errs.push(
                    at.child("labelSelector"),
                    "must not be set: default constraints take their selector from the pod's workloads",
                );
            }
            let repeated = self.default_constraints[..i].iter().any(|o| {
                o.topology_key == c.topology_key && o.when_unsatisfiable == c.when_unsatisfiable
            });
            if repeated {
                errs.push(
                    at,
                    format!(
                        "duplicate constraint {{{}, {}}}",
                        c.topology_key, c.when_unsatisfiable
                    ),
                );
            }
        }
        errs.into_result()
    }
}

/// kube-scheduler's system default constraints, used when `defaultingType` is System.
fn system_default_constraints() -> Vec<TopologySpreadConstraint> {
    [(LABEL_HOSTNAME, 3), (LABEL_TOPOLOGY_ZONE, 5)]
        .into_iter()
        .map(|(key, max_skew)| TopologySpreadConstraint {
            topology_key: key.into(),
            max_skew,
            when_unsatisfiable: SCHEDULE_ANYWAY.into(),
            ..Default::default()
        })
        .collect()
}

/// Builds the plugin from its args (absent means defaults), validated and named under `path`.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let selectors = handle.default_selectors.clone();
    let args: PodTopologySpreadArgs = decode_args(args, path)?;
    args.validate(path)?;
    Ok(Arc::new(PodTopologySpread::new(args, selectors)))
}

/// The plugin: its default constraints and where default selectors come from.
#[derive(Clone)]
pub struct PodTopologySpread {
    default_constraints: Vec<TopologySpreadConstraint>,
    /// Whether the defaults are the system ones; then scoring does not require nodes to have
    /// every topology key, so nodes without a zone label still get hostname spreading.
    system_defaulted: bool,
    selectors: Arc<dyn DefaultSelectorSource>,
}

impl PodTopologySpread {
    /// The plugin for args already validated.
    pub fn new(args: PodTopologySpreadArgs, selectors: Arc<dyn DefaultSelectorSource>) -> Self {
        let system_defaulted = args.defaulting_type == DefaultingType::System;
        PodTopologySpread {
            default_constraints: if system_defaulted {
                system_default_constraints()
            } else {
                args.default_constraints
            },
            system_defaulted,
            selectors,
        }
    }

    /// The pod's constraints with this `whenUnsatisfiable`; for a pod with none of its own, the
    /// default constraints with the pod's default selector (none without one).
    fn constraints(&self, pod: &PodInfo, action: &str) -> Result<Vec<Constraint>, SelectorError> {
        if has_own_constraints(pod) {
            return own_constraints(pod)
                .iter()
                .filter(|c| c.when_unsatisfiable == action)
                .map(|c| Constraint::parse(c, pod.labels()))
                .collect();
        }
        let defaults: Vec<_> = self
            .default_constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == action)
            .collect();
        if defaults.is_empty() {
            return Ok(Vec::new());
        }
        let Some(selector) = self
            .selectors
            .default_selector(pod)
            .filter(|s| !s.is_empty())
        else {
            return Ok(Vec::new());
        };
        defaults
            .into_iter()
            .map(|c| {
                let mut parsed = Constraint::parse(c, pod.labels())?;
                parsed.selector = selector.clone();
                Ok(parsed)
            })
            .collect()
    }
}

fn own_constraints(pod: &PodInfo) -> &[TopologySpreadConstraint] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or_default()
}

fn has_own_constraints(pod: &PodInfo) -> bool {
    !own_constraints(pod).is_empty()
}

/// One topology spread constraint, parsed for the pod being scheduled.
#[derive(Clone, Debug)]
struct Constraint {
    max_skew: i64,
    /// Interned, so that nodes' values for it are looked up by number.
    topology_key: Arc<Label>,
    /// The labelSelector with the pod's values for `matchLabelKeys` merged in.
    selector: Selector,
    /// Fewer eligible domains than this make the global minimum 0 (DoNotSchedule only).
    min_domains: i64,
    /// nodeAffinityPolicy Honor (the default): only nodes matching the pod's nodeSelector and
    /// required node affinity count.
    honor_node_affinity: bool,
    /// nodeTaintsPolicy Honor (default Ignore): nodes with taints the pod does not tolerate
    /// do not count.
    honor_node_taints: bool,
}

impl Constraint {
    fn parse(
        c: &TopologySpreadConstraint,
        pod_labels: &BTreeMap<String, String>,
    ) -> Result<Self, SelectorError> {
        let mut selector = Selector::from_label_selector(c.label_selector.as_ref())?;
        for key in c.match_label_keys.iter().flatten() {
            if let Some(value) = pod_labels.get(key) {
                selector.add(Requirement::In(key.clone(), vec![value.clone()]));
            }
        }
        Ok(Constraint {
            max_skew: i64::from(c.max_skew),
            topology_key: topology::label(&c.topology_key),
            selector,
            min_domains: i64::from(c.min_domains.unwrap_or(1)),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        })
    }

    fn is_hostname(&self) -> bool {
        self.topology_key.as_str() == LABEL_HOSTNAME
    }
}

/// Decides which nodes' pods count for a constraint (nodeAffinityPolicy, nodeTaintsPolicy).
struct Inclusion<'a> {
    /// `None` when the pod's node affinity does not parse: then it matches no node.
    affinity: Option<RequiredNodeAffinity>,
    tolerations: &'a [Toleration],
}

impl<'a> Inclusion<'a> {
    fn new(pod: &'a PodInfo) -> Self {
        let spec = pod.pod.spec.as_ref();
        Inclusion {
            affinity: RequiredNodeAffinity::from_pod(&pod.pod).ok(),
            tolerations: spec
                .and_then(|s| s.tolerations.as_deref())
                .unwrap_or_default(),
        }
    }

    fn includes(&self, c: &Constraint, node: &NodeInfo) -> bool {
        // An empty affinity matches every node; checking that first spares reading the node.
        if c.honor_node_affinity
            && !self
                .affinity
                .as_ref()
                .is_some_and(|a| a.is_empty() || a.matches_labels(&node.name, node.labels()))
        {
            return false;
        }
        if c.honor_node_taints {
            let taints = node
                .node
                .as_ref()
                .and_then(|n| n.spec.as_ref())
                .and_then(|s| s.taints.as_deref())
                .unwrap_or_default();
            let hard = |t: &Taint| t.effect == "NoSchedule" || t.effect == "NoExecute";
            if find_untolerated(taints, self.tolerations, hard).is_some() {
                return false;
            }
        }
        true
    }
}

fn has_all_keys(node: &NodeInfo, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| node.topology.has(&c.topology_key))
}

/// Which constraints count the pods of each group, answered once per group in a cycle: pods in
/// the incoming pod's namespace, not terminating, that the constraint's selector matches. An
/// empty selector counts nothing, as kube-scheduler's countPodsMatchSelector.
#[derive(Debug)]
struct Counted {
    selectors: Vec<Selector>,
    namespace: String,
    memo: GroupMemo,
}

impl Counted {
    fn new(constraints: &[Constraint], namespace: &str) -> Self {
        Counted {
            selectors: constraints.iter().map(|c| c.selector.clone()).collect(),
            namespace: namespace.to_string(),
            memo: GroupMemo::new(),
        }
    }

    /// The pods on `node` that constraint `i` counts.
    fn on_node(&self, node: &NodeInfo, i: usize) -> i64 {
        let ask = |group: &PodGroup, c: usize| {
            let selector = &self.selectors[c];
            !selector.is_empty()
                && !group.terminating()
                && group.namespace() == self.namespace
                && selector.matches(group.labels())
        };
        node.groups
            .iter()
            .filter(|g| {
                let answers = || Answers::ask(self.selectors.len(), |c| ask(&g.group, c));
                self.memo.with(&g.group, answers, |answers| answers.get(i))
            })
            .map(|g| i64::from(g.pods))
            .sum()
    }
}

/// Domain (the id of a topology value) → matching pods in that domain, for one constraint.
type DomainCounts = HashMap<u32, i64>;

/// Sums per-constraint domain counts over `nodes` in parallel; `per_node` adds one node's share.
fn count_by_domain<F>(nodes: &[Arc<NodeInfo>], constraints: usize, per_node: F) -> Vec<DomainCounts>
where
    F: Fn(&NodeInfo, &mut [DomainCounts]) + Sync + Send,
{
    let empty = || vec![DomainCounts::default(); constraints];
    fold_per_thread(nodes, empty, |acc, node| per_node(node, acc))
        .into_iter()
        .reduce(merge_counts)
        .unwrap_or_else(empty)
}

fn merge_counts(mut into: Vec<DomainCounts>, from: Vec<DomainCounts>) -> Vec<DomainCounts> {
    for (into, from) in into.iter_mut().zip(from) {
        for (domain, n) in from {
            *into.entry(domain).or_default() += n;
        }
    }
    into
}

/// A hard constraint with what Filter needs of it, computed in PreFilter.
#[derive(Debug)]
struct HardConstraint {
    constraint: Constraint,
    /// Matching pods per domain, over the eligible nodes.
    counts: DomainCounts,
    /// The global minimum the skew is measured against: 0 with fewer domains than minDomains.
    min_match: i64,
    /// 1 when the pod being scheduled matches the selector itself.
    self_match: i64,
}

#[derive(Debug)]
struct PreFilterState {
    constraints: Vec<HardConstraint>,
}

/// A soft constraint with what Score needs of it, computed in PreScore.
#[derive(Debug)]
struct SoftConstraint {
    constraint: Constraint,
    /// Matching pods per domain among the feasible nodes' domains; for hostname, per node
    /// name, counting only that node's pods.
    counts: DomainCounts,
    /// ln(domains + 2), so that counts in topologies with few domains weigh less.
    weight: f64,
}

#[derive(Debug)]
struct PreScoreState {
    constraints: Vec<SoftConstraint>,
    /// Feasible nodes lacking a topology key: they score 0.
    ignored: HashSet<String>,
    /// Counts the pods of hostname constraints, node by node, in Score.
    counted: Counted,
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(hints::registrations(Arc::new(self.clone())))
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

impl PreFilterPlugin for PodTopologySpread {
    /// Counts the matching pods per domain of every hard constraint over the nodes that have
    /// all the constraints' topology keys and pass the constraint's inclusion policies.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let constraints = match self.constraints(pod, DO_NOT_SCHEDULE) {
            Ok(c) => c,
            Err(e) => {
                return (
                    PreFilterResult::all_nodes(),
                    Status::error(format!(
                        "obtaining pod's hard topology spread constraints: {e}"
                    )),
                );
            }
        };
        if constraints.is_empty() {
            return (PreFilterResult::all_nodes(), Status::skip());
        }
        let inclusion = Inclusion::new(pod);
        let counted = Counted::new(&constraints, pod.namespace());
        let counts = count_by_domain(snapshot.nodes(), constraints.len(), |node, acc| {
            if !has_all_keys(node, &constraints) {
                return;
            }
            for (i, (c, counts)) in constraints.iter().zip(acc.iter_mut()).enumerate() {
                let Some(value) = node.topology.value(&c.topology_key) else {
                    continue;
                };
                if inclusion.includes(c, node) {
                    *counts.entry(value).or_default() += counted.on_node(node, i);
                }
            }
        });
        let constraints = constraints
            .into_iter()
            .zip(counts)
            .map(|(constraint, counts)| {
                let domains = i64::try_from(counts.len()).unwrap_or(i64::MAX);
                let min_match = if domains < constraint.min_domains {
                    0
                } else {
                    counts.values().copied().min().unwrap_or(0)
                };
                let self_match = i64::from(constraint.selector.matches(pod.labels()));
                HardConstraint {
                    constraint,
                    counts,
                    min_match,
                    self_match,
                }
            })
            .collect();
        state.write(PRE_FILTER_STATE_KEY, PreFilterState { constraints });
        (PreFilterResult::all_nodes(), Status::success())
    }
}

impl FilterPlugin for PodTopologySpread {
    /// Rejects a node lacking a topology key, or whose domain would exceed maxSkew over the
    /// global minimum with the pod placed there.
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY) else {
            return Status::error(format!(
                "reading {PRE_FILTER_STATE_KEY} from the cycle state"
            ));
        };
        for hc in &s.constraints {
            let Some(value) = node.topology.value(&hc.constraint.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let matching = hc.counts.get(&value).copied().unwrap_or(0);
            if matching + hc.self_match - hc.min_match > hc.constraint.max_skew {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }

    /// The constraint the node breaks: the topology label it lacks, or the skew the pod would
    /// make in its domain.
    fn remedy(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let s = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY)?;
        for hc in &s.constraints {
            let key = hc.constraint.topology_key.value();
            let Some(value) = node.topology.value(&hc.constraint.topology_key) else {
                return Some(format!(
                    "label {} with {key}: the pod spreads over {key}, and only nodes that have it count",
                    node.name
                ));
            };
            let with_pod = hc.counts.get(&value).copied().unwrap_or(0) + hc.self_match;
            let skew = with_pod - hc.min_match;
            if skew > hc.constraint.max_skew {
                let domain = node.labels().get(key).cloned().unwrap_or_default();
                return Some(format!(
                    "{key}={domain} would hold {with_pod} matching pods against {} in the emptiest domain, a skew of {skew} over maxSkew {}: schedule the pod once its workload has fewer pods there, or raise maxSkew, or spread with whenUnsatisfiable: ScheduleAnyway",
                    hc.min_match, hc.constraint.max_skew
                ));
            }
        }
        None
    }
}

impl PreScorePlugin for PodTopologySpread {
    /// Takes the domains of the soft constraints from the feasible nodes, then counts the
    /// matching pods in those domains over every eligible node of the cluster.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snapshot: &Snapshot,
    ) -> Status {
        if snapshot.is_empty() {
            return Status::skip();
        }
        let constraints = match self.constraints(pod, SCHEDULE_ANYWAY) {
            Ok(c) => c,
            Err(e) => {
                return Status::error(format!(
                    "obtaining pod's soft topology spread constraints: {e}"
                ));
            }
        };
        if constraints.is_empty() {
            return Status::skip();
        }
        // System defaults spread over hostname even on nodes without a zone label.
        let require_all_keys = has_own_constraints(pod) || !self.system_defaulted;

        // As upstream, a node without a topology key is in the "" domain of that key.
        let no_value = topology::label("");
        let value_of = |node: &NodeInfo, c: &Constraint| {
            node.topology
                .value(&c.topology_key)
                .unwrap_or(no_value.id())
        };
        let mut ignored = HashSet::default();
        let mut domains = vec![HashSet::<u32>::default(); constraints.len()];
        for node in nodes {
            if require_all_keys && !has_all_keys(node, &constraints) {
                ignored.insert(node.name.clone());
                continue;
            }
            for (c, domains) in constraints.iter().zip(domains.iter_mut()) {
                if !c.is_hostname() {
                    domains.insert(value_of(node, c));
                }
            }
        }
        let scored_nodes = nodes.len() - ignored.len();

        let inclusion = Inclusion::new(pod);
        let counted = Counted::new(&constraints, pod.namespace());
        // Hostname domains are single nodes: Score counts each node's own pods.
        let counts = count_by_domain(snapshot.nodes(), constraints.len(), |node, acc| {
            if require_all_keys && !has_all_keys(node, &constraints) {
                return;
            }
            let per_constraint = constraints.iter().zip(&domains).zip(acc.iter_mut());
            for (i, ((c, domains), counts)) in per_constraint.enumerate() {
                if c.is_hostname() {
                    continue;
                }
                let value = value_of(node, c);
                if domains.contains(&value) && inclusion.includes(c, node) {
                    *counts.entry(value).or_default() += counted.on_node(node, i);
                }
            }
        });

        let constraints = constraints
            .into_iter()
            .zip(counts)
            .zip(&domains)
            .map(|((constraint, counts), domains)| {
                let size = if constraint.is_hostname() {
                    scored_nodes
                } else {
                    domains.len()
                };
                SoftConstraint {
                    constraint,
                    counts,
                    weight: ((size + 2) as f64).ln(),
                }
            })
            .collect();
        state.write(
            PRE_SCORE_STATE_KEY,
            PreScoreState {
                constraints,
                ignored,
                counted,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for PodTopologySpread {
    /// The weighted matching pods in the node's domains, each constraint adding `maxSkew - 1`
    /// to water down small differences; lower is better until normalized.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_STATE_KEY)
            .ok_or_else(|| {
                Status::error(format!(
                    "reading {PRE_SCORE_STATE_KEY} from the cycle state"
                ))
            })?;
        if s.ignored.contains(&node.name) {
            return Ok(0);
        }
        let mut score = 0.0;
        for (i, sc) in s.constraints.iter().enumerate() {
            let Some(value) = node.topology.value(&sc.constraint.topology_key) else {
                continue;
            };
            let count = if sc.constraint.is_hostname() {
                s.counted.on_node(node, i)
            } else {
                sc.counts.get(&value).copied().unwrap_or(0)
            };
            score += count as f64 * sc.weight + (sc.constraint.max_skew - 1) as f64;
        }
        Ok(score.round() as i64)
    }

    /// Inverts the scores so that the least crowded node gets MAX_NODE_SCORE; ignored nodes
    /// get 0.
    fn normalize_scores(
        &self,
        state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        let Some(s) = state.read::<PreScoreState>(PRE_SCORE_STATE_KEY) else {
            return Status::error(format!(
                "reading {PRE_SCORE_STATE_KEY} from the cycle state"
            ));
        };
        let counted = || scores.iter().filter(|n| !s.ignored.contains(&n.name));
        let min = counted().map(|n| n.score).min().unwrap_or(0);
        let max = counted().map(|n| n.score).max().unwrap_or(0).max(0);
        for n in scores.iter_mut() {
            n.score = if s.ignored.contains(&n.name) {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - n.score) / max
            };
        }
        Status::success()
    }
}

#[cfg(test)]
mod tests;
