//! PodTopologySpread: spreads the pods a selector matches evenly across topology domains
//! (zones, nodes, any node label), as kube-scheduler's PodTopologySpread plugin does.
//!
//! Hard constraints (`whenUnsatisfiable: DoNotSchedule`) are checked in Filter against counts
//! taken once in PreFilter; soft ones (`ScheduleAnyway`, and the cluster's default constraints
//! for pods without constraints of their own) rank nodes in Score from counts taken in PreScore.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Taint, Toleration, TopologySpreadConstraint};
use rayon::prelude::*;
use serde::{Deserialize, Serialize};

use crate::k8s::labels::{Requirement, Selector};
use crate::k8s::node_selector::RequiredNodeAffinity;
use crate::k8s::taints::find_untolerated;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::profile::validation::{FieldErrors, decode_args};

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
    pub fn validate(&self, path: &str) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        if self.defaulting_type == DefaultingType::System && !self.default_constraints.is_empty() {
            errs.push(
                format!("{path}.defaultingType"),
                "must be List when defaultConstraints are set",
            );
        }
        for (i, c) in self.default_constraints.iter().enumerate() {
            let at = format!("{path}.defaultConstraints[{i}]");
            if c.max_skew <= 0 {
                errs.push(
                    format!("{at}.maxSkew"),
                    format!("{} is not in the valid range (0, inf)", c.max_skew),
                );
            }
            if c.topology_key.is_empty() {
                errs.push(format!("{at}.topologyKey"), "must not be empty");
            } else if let Some(e) = label_key_error(&c.topology_key) {
                errs.push(format!("{at}.topologyKey"), e);
            }
            match c.when_unsatisfiable.as_str() {
                DO_NOT_SCHEDULE | SCHEDULE_ANYWAY => {}
                "" => errs.push(format!("{at}.whenUnsatisfiable"), "must not be empty"),
                other => errs.push(
                    format!("{at}.whenUnsatisfiable"),
                    format!("{other:?} is not supported: must be DoNotSchedule or ScheduleAnyway"),
                ),
            }
            if c.label_selector.is_some() {
                errs.push(
                    format!("{at}.labelSelector"),
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

/// Why `key` is not a valid label key: an optional DNS-subdomain prefix and `/`, then a name of
/// at most 63 alphanumerics, `-`, `_` or `.` that starts and ends alphanumeric (as
/// ValidateLabelName checks it).
fn label_key_error(key: &str) -> Option<String> {
    let (prefix, name) = match key.split_once('/') {
        Some((p, n)) => (Some(p), n),
        None => (None, key),
    };
    if let Some(p) = prefix {
        let dns_label = |l: &str| {
            !l.is_empty()
                && l.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-')
                && !l.starts_with('-')
                && !l.ends_with('-')
        };
        if p.len() > 253 || !p.split('.').all(dns_label) {
            return Some(format!("{key:?}: prefix must be a DNS subdomain"));
        }
    }
    let edge_ok = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    let name_ok = !name.is_empty()
        && name.len() <= 63
        && edge_ok(name.chars().next())
        && edge_ok(name.chars().last())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'));
    (!name_ok).then(|| {
        format!(
            "{key:?}: name must be at most 63 alphanumerics, '-', '_' or '.', \
             starting and ending alphanumeric"
        )
    })
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

/// The selector of the workloads a pod belongs to: the Services, ReplicaSets,
/// ReplicationControllers and StatefulSets that select it, as kube-scheduler's
/// `helper.DefaultSelector` builds it. Only default constraints use it.
pub trait DefaultSelectorSource: Send + Sync {
    /// `None` (or an empty selector) when nothing selects the pod; then no default applies.
    fn default_selector(&self, pod: &PodInfo) -> Option<Selector>;
}

/// A source for schedulers that keep no workload caches: default constraints never apply.
pub struct NoDefaultSelectors;

impl DefaultSelectorSource for NoDefaultSelectors {
    fn default_selector(&self, _pod: &PodInfo) -> Option<Selector> {
        None
    }
}

/// Builds the plugin from its args (absent means defaults), validated and named under `path`.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &str,
    selectors: Arc<dyn DefaultSelectorSource>,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let args: PodTopologySpreadArgs = decode_args(args, path)?;
    args.validate(path)?;
    Ok(Arc::new(PodTopologySpread::new(args, selectors)))
}

/// The plugin: its default constraints and where default selectors come from.
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
    fn constraints(&self, pod: &PodInfo, action: &str) -> Result<Vec<Constraint>, String> {
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
    topology_key: String,
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
    ) -> Result<Self, String> {
        let mut selector = Selector::from_label_selector(c.label_selector.as_ref())?;
        for key in c.match_label_keys.iter().flatten() {
            if let Some(value) = pod_labels.get(key) {
                selector.add(Requirement::In(key.clone(), vec![value.clone()]));
            }
        }
        Ok(Constraint {
            max_skew: i64::from(c.max_skew),
            topology_key: c.topology_key.clone(),
            selector,
            min_domains: i64::from(c.min_domains.unwrap_or(1)),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        })
    }

    fn is_hostname(&self) -> bool {
        self.topology_key == LABEL_HOSTNAME
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
        if c.honor_node_affinity
            && !self
                .affinity
                .as_ref()
                .is_some_and(|a| a.matches_labels(&node.name, node.labels()))
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

fn has_all_keys(labels: &BTreeMap<String, String>, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// The pods in `namespace` the selector matches, leaving out terminating pods. An empty
/// selector counts nothing, as kube-scheduler's countPodsMatchSelector.
fn count_matching(pods: &[Arc<PodInfo>], selector: &Selector, namespace: &str) -> i64 {
    if selector.is_empty() {
        return 0;
    }
    let matching = pods.iter().filter(|p| {
        p.pod.metadata.deletion_timestamp.is_none()
            && p.namespace() == namespace
            && selector.matches(p.labels())
    });
    i64::try_from(matching.count()).unwrap_or(i64::MAX)
}

/// Topology value → matching pods in that domain, for one constraint.
type DomainCounts = HashMap<String, i64>;

/// Sums per-constraint domain counts over `nodes` in parallel; `per_node` adds one node's share.
fn count_by_domain<F>(nodes: &[Arc<NodeInfo>], constraints: usize, per_node: F) -> Vec<DomainCounts>
where
    F: Fn(&NodeInfo, &mut [DomainCounts]) + Sync + Send,
{
    let empty = || vec![DomainCounts::new(); constraints];
    nodes
        .par_iter()
        .fold(empty, |mut acc, node| {
            per_node(node, &mut acc);
            acc
        })
        .reduce(empty, merge_counts)
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
}

impl Plugin for PodTopologySpread {
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
        let namespace = pod.namespace();
        let counts = count_by_domain(snapshot.nodes(), constraints.len(), |node, acc| {
            let labels = node.labels();
            if !has_all_keys(labels, &constraints) {
                return;
            }
            for (c, counts) in constraints.iter().zip(acc.iter_mut()) {
                let Some(value) = labels.get(&c.topology_key) else {
                    continue;
                };
                if inclusion.includes(c, node) {
                    *counts.entry(value.clone()).or_default() +=
                        count_matching(&node.pods, &c.selector, namespace);
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
        let labels = node.labels();
        for hc in &s.constraints {
            let Some(value) = labels.get(&hc.constraint.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            let matching = hc.counts.get(value).copied().unwrap_or(0);
            if matching + hc.self_match - hc.min_match > hc.constraint.max_skew {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
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

        let mut ignored = HashSet::new();
        let mut domains = vec![HashSet::<String>::new(); constraints.len()];
        for node in nodes {
            let labels = node.labels();
            if require_all_keys && !has_all_keys(labels, &constraints) {
                ignored.insert(node.name.clone());
                continue;
            }
            for (c, domains) in constraints.iter().zip(domains.iter_mut()) {
                if !c.is_hostname() {
                    // As upstream, a missing label is the "" domain and counts in the weight.
                    let value = labels.get(&c.topology_key).cloned().unwrap_or_default();
                    domains.insert(value);
                }
            }
        }
        let scored_nodes = nodes.len() - ignored.len();

        let inclusion = Inclusion::new(pod);
        let namespace = pod.namespace();
        let domain_counts = count_by_domain(snapshot.nodes(), constraints.len(), |node, acc| {
            let labels = node.labels();
            if require_all_keys && !has_all_keys(labels, &constraints) {
                return;
            }
            for ((c, domains), counts) in constraints.iter().zip(&domains).zip(acc.iter_mut()) {
                let value = labels.get(&c.topology_key).map_or("", String::as_str);
                if domains.contains(value) && inclusion.includes(c, node) {
                    *counts.entry(value.to_string()).or_default() +=
                        count_matching(&node.pods, &c.selector, namespace);
                }
            }
        });
        // Hostname domains are single nodes: count each feasible node's own pods.
        let node_counts = count_by_domain(nodes, constraints.len(), |node, acc| {
            if ignored.contains(&node.name) {
                return;
            }
            for (c, counts) in constraints.iter().zip(acc.iter_mut()) {
                if c.is_hostname() {
                    counts.insert(
                        node.name.clone(),
                        count_matching(&node.pods, &c.selector, namespace),
                    );
                }
            }
        });
        let counts = merge_counts(domain_counts, node_counts);

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
        let labels = node.labels();
        let mut score = 0.0;
        for sc in &s.constraints {
            let Some(value) = labels.get(&sc.constraint.topology_key) else {
                continue;
            };
            let domain = if sc.constraint.is_hostname() {
                &node.name
            } else {
                value
            };
            let count = sc.counts.get(domain).copied().unwrap_or(0);
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
mod tests {
    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
    use k8s_openapi::api::core::v1::Pod;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, Time};
    use serde_json::json;

    const OK: Code = Code::Success;
    const UNSCHED: Code = Code::Unschedulable;
    const UNRESOLVABLE: Code = Code::UnschedulableAndUnresolvable;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    /// A constraint selecting pods labelled `selector` (matchLabels).
    fn spread(
        max_skew: i32,
        key: &str,
        when: &str,
        selector: &[(&str, &str)],
    ) -> TopologySpreadConstraint {
        TopologySpreadConstraint {
            max_skew,
            topology_key: key.into(),
            when_unsatisfiable: when.into(),
            label_selector: Some(LabelSelector {
                match_labels: Some(labels(selector)),
                match_expressions: None,
            }),
            ..Default::default()
        }
    }

    fn hard(key: &str) -> TopologySpreadConstraint {
        spread(1, key, DO_NOT_SCHEDULE, &[("foo", "bar")])
    }

    fn soft(max_skew: i32, key: &str) -> TopologySpreadConstraint {
        spread(max_skew, key, SCHEDULE_ANYWAY, &[("foo", "bar")])
    }

    /// The pod being scheduled, labelled foo=bar, with these constraints.
    fn incoming(constraints: Vec<TopologySpreadConstraint>) -> PodBuilder {
        constraints
            .into_iter()
            .fold(PodBuilder::new("p").label("foo", "bar"), PodBuilder::spread)
    }

    /// `n` pods labelled foo=bar on `node`.
    fn matching(node: &str, n: usize) -> Vec<Pod> {
        (0..n)
            .map(|i| {
                PodBuilder::new(&format!("{node}-{i}"))
                    .label("foo", "bar")
                    .node_name(node)
                    .build()
            })
            .collect()
    }

    fn node(name: &str, zone: &str) -> NodeBuilder {
        NodeBuilder::new(name).label("zone", zone)
    }

    /// node-a, node-b in zone1; node-x, node-y in zone2.
    fn four_nodes() -> Vec<NodeBuilder> {
        vec![
            node("node-a", "zone1"),
            node("node-b", "zone1"),
            node("node-x", "zone2"),
            node("node-y", "zone2"),
        ]
    }

    fn pods(groups: Vec<Vec<Pod>>) -> Vec<Pod> {
        groups.into_iter().flatten().collect()
    }

    fn plugin_with(args: PodTopologySpreadArgs, selector: Option<Selector>) -> PodTopologySpread {
        struct Fixed(Option<Selector>);
        impl DefaultSelectorSource for Fixed {
            fn default_selector(&self, _pod: &PodInfo) -> Option<Selector> {
                self.0.clone()
            }
        }
        PodTopologySpread::new(args, Arc::new(Fixed(selector)))
    }

    fn plugin() -> PodTopologySpread {
        PodTopologySpread::new(
            PodTopologySpreadArgs::default(),
            Arc::new(NoDefaultSelectors),
        )
    }

    fn foo_bar() -> Selector {
        Selector::from_map(&labels(&[("foo", "bar")]))
    }

    // The extension points, reached through the Plugin accessors as the runtime reaches them.
    fn pre_filter(
        pl: &PodTopologySpread,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let pl: &dyn Plugin = pl;
        pl.pre_filter()
            .expect("PreFilter")
            .pre_filter(state, pod, snap)
    }

    fn filter(
        pl: &PodTopologySpread,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        let pl: &dyn Plugin = pl;
        pl.filter().expect("Filter").filter(state, pod, node)
    }

    fn pre_score(
        pl: &PodTopologySpread,
        state: &mut CycleState,
        pod: &PodInfo,
        nodes: &[Arc<NodeInfo>],
        snap: &Snapshot,
    ) -> Status {
        let pl: &dyn Plugin = pl;
        pl.pre_score()
            .expect("PreScore")
            .pre_score(state, pod, nodes, snap)
    }

    fn score(
        pl: &PodTopologySpread,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Result<i64, Status> {
        let pl: &dyn Plugin = pl;
        pl.score().expect("Score").score(state, pod, node)
    }

    fn normalize_scores(
        pl: &PodTopologySpread,
        state: &CycleState,
        pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        let pl: &dyn Plugin = pl;
        pl.score()
            .expect("Score")
            .normalize_scores(state, pod, scores)
    }

    fn run_filter(pl: &PodTopologySpread, pod: &PodInfo, snap: &Snapshot) -> Vec<(String, Code)> {
        let mut state = CycleState::new();
        let (result, status) = pre_filter(pl, &mut state, pod, snap);
        assert_eq!(result, PreFilterResult::all_nodes());
        assert!(status.is_success(), "pre_filter: {status}");
        snap.nodes()
            .iter()
            .map(|n| (n.name.clone(), filter(pl, &state, pod, n).code))
            .collect()
    }

    fn want_codes(want: &[(&str, Code)]) -> Vec<(String, Code)> {
        want.iter().map(|(n, c)| (n.to_string(), *c)).collect()
    }

    #[test]
    fn filter_enforces_hard_constraints() {
        let honor = |mut c: TopologySpreadConstraint, affinity: &str, taints: &str| {
            c.node_affinity_policy = Some(affinity.into());
            c.node_taints_policy = Some(taints.into());
            c
        };
        let min_domains = |n: i32| TopologySpreadConstraint {
            min_domains: Some(n),
            ..hard("zone")
        };
        let envs = || {
            vec![
                node("node-a", "zone1").label("env", "prod"),
                node("node-x", "zone2").label("env", "prod"),
                node("node-z", "zone3").label("env", "dev"),
            ]
        };
        let tainted = || {
            vec![
                node("node-a", "zone1"),
                node("node-x", "zone2"),
                node("node-z", "zone3").taint("dedicated", "gpu", "NoSchedule"),
            ]
        };
        let in_other_ns = PodBuilder::new("other")
            .namespace("other")
            .label("foo", "bar")
            .node_name("node-a")
            .build();
        let terminating = PodBuilder::new("gone")
            .label("foo", "bar")
            .node_name("node-b")
            .with(|p| p.metadata.deletion_timestamp = Some(Time(Default::default())))
            .build();
        let rev = |name: &str, node: &str| {
            PodBuilder::new(name)
                .label("foo", "bar")
                .label("rev", "1")
                .node_name(node)
                .build()
        };
        let with_keys = TopologySpreadConstraint {
            match_label_keys: Some(vec!["rev".into()]),
            ..hard("zone")
        };
        let app_web = PodBuilder::new("web")
            .label("app", "web")
            .node_name("node-x")
            .build();

        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            PodBuilder,
            Vec<NodeBuilder>,
            Vec<Pod>,
            &[(&str, Code)],
        )> = vec![
            (
                "no existing pods: every node fits",
                incoming(vec![hard("zone")]),
                four_nodes(),
                vec![],
                &[
                    ("node-a", OK),
                    ("node-b", OK),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "balanced zones: skew 1 everywhere",
                incoming(vec![hard("zone")]),
                four_nodes(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[
                    ("node-a", OK),
                    ("node-b", OK),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "the crowded zone would exceed maxSkew",
                incoming(vec![hard("zone")]),
                four_nodes(),
                pods(vec![matching("node-a", 1), matching("node-b", 1)]),
                &[
                    ("node-a", UNSCHED),
                    ("node-b", UNSCHED),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "the pod matching its own selector adds one",
                incoming(vec![hard("zone")]),
                four_nodes(),
                matching("node-a", 1),
                &[
                    ("node-a", UNSCHED),
                    ("node-b", UNSCHED),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "a pod not matching its own selector adds nothing",
                PodBuilder::new("p").spread(spread(1, "zone", DO_NOT_SCHEDULE, &[("foo", "bar")])),
                four_nodes(),
                matching("node-a", 1),
                &[
                    ("node-a", OK),
                    ("node-b", OK),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "pods of other namespaces and terminating pods do not count",
                incoming(vec![hard("zone")]),
                four_nodes(),
                vec![in_other_ns, terminating],
                &[
                    ("node-a", OK),
                    ("node-b", OK),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "a node without the topology key is unresolvable",
                incoming(vec![hard("zone")]),
                vec![node("node-a", "zone1"), NodeBuilder::new("node-z")],
                vec![],
                &[("node-a", OK), ("node-z", UNRESOLVABLE)],
            ),
            (
                "fewer domains than minDomains: the global minimum is 0",
                incoming(vec![min_domains(3)]),
                four_nodes(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[
                    ("node-a", UNSCHED),
                    ("node-b", UNSCHED),
                    ("node-x", UNSCHED),
                    ("node-y", UNSCHED),
                ],
            ),
            (
                "minDomains met: the real minimum",
                incoming(vec![min_domains(2)]),
                four_nodes(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[
                    ("node-a", OK),
                    ("node-b", OK),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "nodeAffinityPolicy Honor: nodes the pod cannot use are no domain",
                incoming(vec![hard("zone")]).node_selector("env", "prod"),
                envs(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[("node-a", OK), ("node-x", OK), ("node-z", OK)],
            ),
            (
                "nodeAffinityPolicy Ignore: every node is a domain",
                incoming(vec![honor(hard("zone"), "Ignore", "Ignore")])
                    .node_selector("env", "prod"),
                envs(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[("node-a", UNSCHED), ("node-x", UNSCHED), ("node-z", OK)],
            ),
            (
                "nodeTaintsPolicy Ignore (default): tainted nodes are domains",
                incoming(vec![hard("zone")]),
                tainted(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[("node-a", UNSCHED), ("node-x", UNSCHED), ("node-z", OK)],
            ),
            (
                "nodeTaintsPolicy Honor: untolerated taints exclude the node",
                incoming(vec![honor(hard("zone"), "Honor", "Honor")]),
                tainted(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[("node-a", OK), ("node-x", OK), ("node-z", OK)],
            ),
            (
                "nodeTaintsPolicy Honor: tolerated taints keep the node",
                incoming(vec![honor(hard("zone"), "Honor", "Honor")]).toleration(
                    "dedicated",
                    "Equal",
                    "gpu",
                    "NoSchedule",
                ),
                tainted(),
                pods(vec![matching("node-a", 1), matching("node-x", 1)]),
                &[("node-a", UNSCHED), ("node-x", UNSCHED), ("node-z", OK)],
            ),
            (
                "without matchLabelKeys every revision counts",
                incoming(vec![hard("zone")]).label("rev", "2"),
                four_nodes(),
                vec![rev("r1", "node-a"), rev("r2", "node-b")],
                &[
                    ("node-a", UNSCHED),
                    ("node-b", UNSCHED),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "matchLabelKeys: only pods of the pod's own revision count",
                incoming(vec![with_keys]).label("rev", "2"),
                four_nodes(),
                vec![rev("r1", "node-a"), rev("r2", "node-b")],
                &[
                    ("node-a", OK),
                    ("node-b", OK),
                    ("node-x", OK),
                    ("node-y", OK),
                ],
            ),
            (
                "zone and hostname constraints must both hold",
                incoming(vec![hard("zone"), hard(LABEL_HOSTNAME)]),
                four_nodes(),
                pods(vec![
                    matching("node-a", 1),
                    matching("node-x", 1),
                    matching("node-y", 1),
                ]),
                &[
                    ("node-a", UNSCHED),
                    ("node-b", OK),
                    ("node-x", UNSCHED),
                    ("node-y", UNSCHED),
                ],
            ),
            (
                "two constraints on one key count their own selectors",
                incoming(vec![
                    hard("zone"),
                    spread(1, "zone", DO_NOT_SCHEDULE, &[("app", "web")]),
                ])
                .label("app", "web"),
                four_nodes(),
                pods(vec![matching("node-a", 1), vec![app_web]]),
                &[
                    ("node-a", UNSCHED),
                    ("node-b", UNSCHED),
                    ("node-x", UNSCHED),
                    ("node-y", UNSCHED),
                ],
            ),
        ];
        for (name, pod, nodes, existing, want) in cases {
            let snap = snapshot(nodes, existing);
            let got = run_filter(&plugin(), &pod.info(), &snap);
            assert_eq!(got, want_codes(want), "{name}");
        }
    }

    #[test]
    fn filter_reasons_name_the_failure() {
        let snap = snapshot(
            vec![
                node("node-a", "zone1"),
                node("node-x", "zone2"),
                NodeBuilder::new("node-z"),
            ],
            matching("node-a", 1),
        );
        let pod = incoming(vec![hard("zone")]).info();
        let pl = plugin();
        let mut state = CycleState::new();
        assert!(pre_filter(&pl, &mut state, &pod, &snap).1.is_success());
        let node = |name: &str| snap.get(name).expect("node in snapshot");
        let (a, z) = (node("node-a"), node("node-z"));
        assert_eq!(
            filter(&pl, &state, &pod, a),
            Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH)
        );
        assert_eq!(
            filter(&pl, &state, &pod, z),
            Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH)
        );
        let empty = CycleState::new();
        assert_eq!(filter(&pl, &empty, &pod, a).code, Code::Error);
    }

    #[test]
    fn pre_filter_skips_without_hard_constraints() {
        let list = PodTopologySpreadArgs {
            defaulting_type: DefaultingType::List,
            default_constraints: vec![TopologySpreadConstraint {
                label_selector: None,
                ..hard("zone")
            }],
        };
        let cases: Vec<(&str, PodTopologySpread, PodBuilder)> = vec![
            ("no constraints", plugin(), PodBuilder::new("p")),
            (
                "only soft constraints",
                plugin(),
                incoming(vec![soft(1, "zone")]),
            ),
            (
                "hard defaults but nothing selects the pod",
                plugin_with(list.clone(), None),
                incoming(vec![]),
            ),
            (
                "hard defaults with an empty default selector",
                plugin_with(list.clone(), Some(Selector::everything())),
                incoming(vec![]),
            ),
            (
                "the pod's own constraints replace the defaults",
                plugin_with(list, Some(foo_bar())),
                incoming(vec![soft(1, "zone")]),
            ),
        ];
        let snap = snapshot(four_nodes(), vec![]);
        for (name, pl, pod) in cases {
            let mut state = CycleState::new();
            let (_, status) = pre_filter(&pl, &mut state, &pod.info(), &snap);
            assert!(status.is_skip(), "{name}: {status}");
        }
    }

    #[test]
    fn hard_default_constraints_use_the_default_selector() {
        let list = PodTopologySpreadArgs {
            defaulting_type: DefaultingType::List,
            default_constraints: vec![TopologySpreadConstraint {
                label_selector: None,
                ..hard("zone")
            }],
        };
        let snap = snapshot(
            four_nodes(),
            pods(vec![matching("node-a", 1), matching("node-b", 1)]),
        );
        let got = run_filter(
            &plugin_with(list, Some(foo_bar())),
            &incoming(vec![]).info(),
            &snap,
        );
        assert_eq!(
            got,
            want_codes(&[
                ("node-a", UNSCHED),
                ("node-b", UNSCHED),
                ("node-x", OK),
                ("node-y", OK),
            ])
        );
    }

    /// Runs PreScore over the `feasible` nodes, Score on each, then NormalizeScore.
    fn run_score(
        pl: &PodTopologySpread,
        pod: &PodInfo,
        snap: &Snapshot,
        feasible: &[&str],
    ) -> Vec<(String, i64)> {
        let nodes: Vec<_> = snap
            .nodes()
            .iter()
            .filter(|n| feasible.contains(&n.name.as_str()))
            .cloned()
            .collect();
        let mut state = CycleState::new();
        let status = pre_score(pl, &mut state, pod, &nodes, snap);
        assert!(status.is_success(), "pre_score: {status}");
        let mut scores: Vec<_> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.name.clone(),
                score: score(pl, &state, pod, n).expect("score"),
            })
            .collect();
        assert!(normalize_scores(pl, &state, pod, &mut scores).is_success());
        scores.into_iter().map(|s| (s.name, s.score)).collect()
    }

    fn want_scores(want: &[(&str, i64)]) -> Vec<(String, i64)> {
        want.iter().map(|(n, s)| (n.to_string(), *s)).collect()
    }

    #[test]
    fn score_prefers_the_least_crowded_domains() {
        const ALL: &[&str] = &["node-a", "node-b", "node-c", "node-x", "node-y", "node-z"];
        // zone1 = 3 matching pods, zone2 = 1 (node-a: 2, node-b: 1, node-x: 1).
        let s1 = || {
            pods(vec![
                matching("node-a", 2),
                matching("node-b", 1),
                matching("node-x", 1),
            ])
        };
        let ignore_affinity = TopologySpreadConstraint {
            node_affinity_policy: Some("Ignore".into()),
            ..soft(1, "zone")
        };
        let with_dev_node = || {
            let mut nodes: Vec<_> = four_nodes()
                .into_iter()
                .map(|n| n.label("env", "prod"))
                .collect();
            nodes.push(node("node-c", "zone2").label("env", "dev"));
            nodes
        };
        let with_zone3 = || {
            let mut nodes = four_nodes();
            nodes.push(node("node-c", "zone3"));
            nodes
        };

        #[allow(clippy::type_complexity)]
        let cases: Vec<(
            &str,
            PodBuilder,
            Vec<NodeBuilder>,
            Vec<Pod>,
            &[&str],
            &[(&str, i64)],
        )> = vec![
            (
                // weight ln(2+2) = 1.386: zone1 3*1.386 = 4.16 -> 4, zone2 1.39 -> 1;
                // normalized 100*(4+1-s)/4.
                "zone: 3 vs 1 matching pods",
                incoming(vec![soft(1, "zone")]),
                four_nodes(),
                s1(),
                ALL,
                &[
                    ("node-a", 25),
                    ("node-b", 25),
                    ("node-x", 100),
                    ("node-y", 100),
                ],
            ),
            (
                // weight ln(4+2) = 1.792: a 3.58 -> 4, b 1.79 -> 2, x/y 0; 100*(4+0-s)/4.
                "hostname: only the node's own pods count",
                incoming(vec![soft(1, LABEL_HOSTNAME)]),
                four_nodes(),
                pods(vec![matching("node-a", 2), matching("node-b", 1)]),
                ALL,
                &[
                    ("node-a", 0),
                    ("node-b", 50),
                    ("node-x", 100),
                    ("node-y", 100),
                ],
            ),
            (
                // as the first row; node-z lacks the key, is ignored and scores 0.
                "a feasible node without the topology key scores 0",
                incoming(vec![soft(1, "zone")]),
                {
                    let mut nodes = four_nodes();
                    nodes.push(NodeBuilder::new("node-z"));
                    nodes
                },
                pods(vec![s1(), matching("node-z", 3)]),
                ALL,
                &[
                    ("node-a", 25),
                    ("node-b", 25),
                    ("node-x", 100),
                    ("node-y", 100),
                    ("node-z", 0),
                ],
            ),
            (
                // zone3 has no feasible node: weight stays ln(4), its pods never count.
                "domains come from feasible nodes, counts from all",
                incoming(vec![soft(1, "zone")]),
                with_zone3(),
                pods(vec![s1(), matching("node-c", 5)]),
                &["node-a", "node-x"],
                &[("node-a", 25), ("node-x", 100)],
            ),
            (
                // zone1 4.16 + 2 = 6.16 -> 6, zone2 1.39 + 2 = 3.39 -> 3; 100*(6+3-s)/6.
                "maxSkew waters differences down",
                incoming(vec![soft(3, "zone")]),
                four_nodes(),
                s1(),
                ALL,
                &[
                    ("node-a", 50),
                    ("node-b", 50),
                    ("node-x", 100),
                    ("node-y", 100),
                ],
            ),
            (
                // zone ln4 = 1.386, hostname ln6 = 1.792:
                // a 3*1.386 + 2*1.792 = 7.74 -> 8, b 4.16 + 1.79 = 5.95 -> 6,
                // x 1.39 + 1.79 = 3.18 -> 3, y 1.39 -> 1; 100*(8+1-s)/8.
                "zone and hostname add up",
                incoming(vec![soft(1, "zone"), soft(1, LABEL_HOSTNAME)]),
                four_nodes(),
                s1(),
                ALL,
                &[
                    ("node-a", 12),
                    ("node-b", 37),
                    ("node-x", 75),
                    ("node-y", 100),
                ],
            ),
            (
                // node-c (env=dev) holds 3 pods the pod's nodeSelector excludes.
                "nodeAffinityPolicy Honor: excluded nodes' pods do not count",
                incoming(vec![soft(1, "zone")]).node_selector("env", "prod"),
                with_dev_node(),
                pods(vec![s1(), matching("node-c", 3)]),
                &["node-a", "node-b", "node-x", "node-y"],
                &[
                    ("node-a", 25),
                    ("node-b", 25),
                    ("node-x", 100),
                    ("node-y", 100),
                ],
            ),
            (
                // zone2 = 4: a 4.16 -> 4, x 5.55 -> 6; 100*(6+4-s)/6.
                "nodeAffinityPolicy Ignore: every node's pods count",
                incoming(vec![ignore_affinity]).node_selector("env", "prod"),
                with_dev_node(),
                pods(vec![s1(), matching("node-c", 3)]),
                &["node-a", "node-b", "node-x", "node-y"],
                &[
                    ("node-a", 100),
                    ("node-b", 100),
                    ("node-x", 66),
                    ("node-y", 66),
                ],
            ),
            (
                "no matching pods anywhere: every node scores 100",
                incoming(vec![soft(1, "zone")]),
                four_nodes(),
                vec![],
                ALL,
                &[
                    ("node-a", 100),
                    ("node-b", 100),
                    ("node-x", 100),
                    ("node-y", 100),
                ],
            ),
        ];
        for (name, pod, nodes, existing, feasible, want) in cases {
            let snap = snapshot(nodes, existing);
            let got = run_score(&plugin(), &pod.info(), &snap, feasible);
            assert_eq!(got, want_scores(want), "{name}");
        }
    }

    #[test]
    fn system_defaults_spread_by_hostname_and_zone() {
        let zone = |name: &str, z: &str| NodeBuilder::new(name).label(LABEL_TOPOLOGY_ZONE, z);
        let snap = snapshot(
            vec![
                zone("node-a", "zone1"),
                zone("node-b", "zone1"),
                zone("node-x", "zone2"),
                NodeBuilder::new("node-z"),
            ],
            pods(vec![
                matching("node-a", 2),
                matching("node-x", 1),
                matching("node-z", 1),
            ]),
        );
        let all = ["node-a", "node-b", "node-x", "node-z"];
        // hostname maxSkew 3, weight ln(4+2) = 1.792; zone maxSkew 5 over the domains zone1,
        // zone2 and node-z's "" (as upstream), weight ln(3+2) = 1.609:
        // a (2*1.792 + 2) + (2*1.609 + 4) = 12.80 -> 13; b 2 + 7.22 = 9.22 -> 9;
        // x 3.79 + 5.61 = 9.40 -> 9; z has no zone: 3.79 -> 4. Normalized 100*(13+4-s)/13.
        let got = run_score(
            &plugin_with(PodTopologySpreadArgs::default(), Some(foo_bar())),
            &incoming(vec![]).info(),
            &snap,
            &all,
        );
        assert_eq!(
            got,
            want_scores(&[
                ("node-a", 30),
                ("node-b", 61),
                ("node-x", 61),
                ("node-z", 100)
            ])
        );

        // The defaults are soft: Filter has nothing to do.
        let pl = plugin_with(PodTopologySpreadArgs::default(), Some(foo_bar()));
        let mut state = CycleState::new();
        let (_, status) = pre_filter(&pl, &mut state, &incoming(vec![]).info(), &snap);
        assert!(status.is_skip());
    }

    #[test]
    fn pre_score_skips_without_soft_constraints() {
        let snap = snapshot(four_nodes(), vec![]);
        let cases: Vec<(&str, PodTopologySpread, PodBuilder)> = vec![
            (
                "no constraints, no default selector",
                plugin(),
                incoming(vec![]),
            ),
            (
                "only hard constraints",
                plugin_with(PodTopologySpreadArgs::default(), Some(foo_bar())),
                incoming(vec![hard("zone")]),
            ),
            (
                "system defaults but nothing selects the pod",
                plugin_with(PodTopologySpreadArgs::default(), None),
                incoming(vec![]),
            ),
        ];
        for (name, pl, pod) in cases {
            let mut state = CycleState::new();
            let status = pre_score(&pl, &mut state, &pod.info(), snap.nodes(), &snap);
            assert!(status.is_skip(), "{name}: {status}");
        }
        let empty = Snapshot::default();
        let mut state = CycleState::new();
        let pod = incoming(vec![soft(1, "zone")]).info();
        assert!(pre_score(&plugin(), &mut state, &pod, &[], &empty).is_skip());
    }

    #[test]
    fn args_are_validated_naming_the_field() {
        let c = |key: &str, skew: i32, when: &str| json!({"maxSkew": skew, "topologyKey": key, "whenUnsatisfiable": when});
        let list = |cs: Vec<serde_json::Value>| json!({"defaultingType": "List", "defaultConstraints": cs});
        let p = "pluginConfig[3].args";
        let cases: Vec<(&str, Option<serde_json::Value>, &[&str])> = vec![
            ("absent args are the defaults", None, &[]),
            ("List with no constraints", Some(list(vec![])), &[]),
            (
                "valid List",
                Some(list(vec![
                    c("zone", 1, DO_NOT_SCHEDULE),
                    c("zone", 2, SCHEDULE_ANYWAY),
                    c("example.com/rack", 1, DO_NOT_SCHEDULE),
                ])),
                &[],
            ),
            (
                "maxSkew must be positive",
                Some(list(vec![c("zone", 0, DO_NOT_SCHEDULE)])),
                &["pluginConfig[3].args.defaultConstraints[0].maxSkew"],
            ),
            (
                "topologyKey must not be empty",
                Some(list(vec![c("", 1, DO_NOT_SCHEDULE)])),
                &["pluginConfig[3].args.defaultConstraints[0].topologyKey"],
            ),
            (
                "topologyKey must be a label key",
                Some(list(vec![c("not a key", 1, DO_NOT_SCHEDULE)])),
                &["pluginConfig[3].args.defaultConstraints[0].topologyKey"],
            ),
            (
                "whenUnsatisfiable must be supported",
                Some(list(vec![c("zone", 1, "Sometimes")])),
                &["pluginConfig[3].args.defaultConstraints[0].whenUnsatisfiable"],
            ),
            (
                "whenUnsatisfiable must not be empty",
                Some(list(vec![c("zone", 1, "")])),
                &["pluginConfig[3].args.defaultConstraints[0].whenUnsatisfiable"],
            ),
            (
                "defaults must not have a selector",
                Some(list(vec![json!({
                    "maxSkew": 1, "topologyKey": "zone", "whenUnsatisfiable": DO_NOT_SCHEDULE,
                    "labelSelector": {"matchLabels": {"a": "b"}}
                })])),
                &["pluginConfig[3].args.defaultConstraints[0].labelSelector"],
            ),
            (
                "no two constraints on one key and action",
                Some(list(vec![
                    c("zone", 1, DO_NOT_SCHEDULE),
                    c("zone", 2, DO_NOT_SCHEDULE),
                ])),
                &["pluginConfig[3].args.defaultConstraints[1]"],
            ),
            (
                "System takes no constraints",
                Some(json!({"defaultConstraints": [c("zone", 1, DO_NOT_SCHEDULE)]})),
                &["pluginConfig[3].args.defaultingType"],
            ),
            (
                "unknown defaultingType",
                Some(json!({"defaultingType": "Cluster"})),
                &["pluginConfig[3].args"],
            ),
            (
                "unknown field",
                Some(json!({"defaultConstraint": []})),
                &["pluginConfig[3].args"],
            ),
        ];
        for (name, args, want) in cases {
            let got = match build(args.as_ref(), p, Arc::new(NoDefaultSelectors)) {
                Ok(plugin) => {
                    assert_eq!(plugin.name(), NAME);
                    Vec::new()
                }
                Err(errs) => errs.0.into_iter().map(|e| e.path).collect(),
            };
            assert_eq!(got, want, "{name}");
        }
    }
}
