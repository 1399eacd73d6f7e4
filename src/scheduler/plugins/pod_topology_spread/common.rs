//! What PreFilter and PreScore share: a pod's constraints as parsed once, which nodes a
//! constraint counts (node affinity and taints, as its policies say), and the matching pods
//! counted per topology domain in parallel.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::HashMap;
use k8s_openapi::api::core::v1::{Toleration, TopologySpreadConstraint};

use super::args::LABEL_HOSTNAME;
use crate::k8s::labels::{Requirement, Selector, SelectorError};
use crate::k8s::node_selector::RequiredNodeAffinity;
use crate::k8s::pod::PodSpec;
use crate::k8s::release::Release;
use crate::k8s::taints::{self, find_untolerated};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::node_sums::NodeSums;
use crate::scheduler::framework::parallel::fold_per_thread;
use crate::scheduler::framework::pod_group::{Answers, GroupMemo, PodGroup};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::topology::{self, Label, NodeLabelIds, NodeMatcher};

pub(super) fn own_constraints(pod: &PodInfo) -> &[TopologySpreadConstraint] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.topology_spread_constraints.as_deref())
        .unwrap_or_default()
}

pub(super) fn has_own_constraints(pod: &PodInfo) -> bool {
    !own_constraints(pod).is_empty()
}

/// One topology spread constraint, parsed for the pod being scheduled.
#[derive(Clone, Debug)]
pub(super) struct Constraint {
    pub(super) max_skew: i64,
    /// Interned, so that nodes' values for it are looked up by number.
    pub(super) topology_key: Arc<Label>,
    /// The labelSelector with the pod's values for `matchLabelKeys` merged in.
    pub(super) selector: Selector,
    /// The selector the pods counted in a domain are matched by: `selector`, but nothing for an
    /// empty one before 1.38 (kube-scheduler's countPodsMatchSelector returned 0 for an empty
    /// selector until 1.38, which counts every pod of the namespace; the incoming pod's own
    /// match reads `selector` in every release).
    pub(super) counted: Selector,
    /// Fewer eligible domains than this make the global minimum 0 (DoNotSchedule only).
    pub(super) min_domains: i64,
    /// nodeAffinityPolicy Honor (the default): only nodes matching the pod's nodeSelector and
    /// required node affinity count.
    pub(super) honor_node_affinity: bool,
    /// nodeTaintsPolicy Honor (default Ignore): nodes with taints the pod does not tolerate
    /// do not count.
    pub(super) honor_node_taints: bool,
}

impl Constraint {
    pub(super) fn parse(
        c: &TopologySpreadConstraint,
        pod_labels: &BTreeMap<String, String>,
        release: Release,
    ) -> Result<Self, SelectorError> {
        let mut selector = Selector::from_label_selector(c.label_selector.as_ref())?;
        for key in c.match_label_keys.iter().flatten() {
            if let Some(value) = pod_labels.get(key) {
                selector.add(Requirement::In(key.clone(), vec![value.clone()]));
            }
        }
        let counted = if selector.is_empty() && !release.at_least(38) {
            Selector::nothing()
        } else {
            selector.clone()
        };
        Ok(Constraint {
            max_skew: i64::from(c.max_skew),
            topology_key: topology::label(&c.topology_key),
            selector,
            counted,
            min_domains: i64::from(c.min_domains.unwrap_or(1)),
            honor_node_affinity: c.node_affinity_policy.as_deref() != Some("Ignore"),
            honor_node_taints: c.node_taints_policy.as_deref() == Some("Honor"),
        })
    }

    pub(super) fn is_hostname(&self) -> bool {
        self.topology_key.as_str() == LABEL_HOSTNAME
    }
}

/// Decides which nodes' pods count for a constraint (nodeAffinityPolicy, nodeTaintsPolicy).
pub(super) struct Inclusion<'a> {
    /// A required term that does not parse matches no node (upstream ignores the error).
    pub(super) affinity: RequiredNodeAffinity,
    /// `affinity` by label id, for matching many nodes; `None` for one node (the string
    /// matcher then, sparing the interning).
    by_id: Option<NodeMatcher>,
    pub(super) tolerations: &'a [Toleration],
}

impl<'a> Inclusion<'a> {
    /// For many nodes (counting over the snapshot): the affinity matched by label id.
    pub(super) fn new(pod: &'a PodInfo) -> Self {
        let mut inclusion = Inclusion::for_one_node(pod);
        inclusion.by_id = Some(inclusion.affinity.by_id(&NodeLabelIds));
        inclusion
    }

    /// For one node (a node's pods laid over a state): the affinity matched as strings.
    pub(super) fn for_one_node(pod: &'a PodInfo) -> Self {
        let spec = pod.pod.spec.as_ref();
        Inclusion {
            by_id: None,
            affinity: RequiredNodeAffinity::from_pod(&pod.pod),
            tolerations: spec.map_or(&[], PodSpec::tolerations),
        }
    }

    pub(super) fn includes(&self, c: &Constraint, node: &NodeInfo) -> bool {
        // An empty affinity matches every node; checking that first spares reading the node.
        if c.honor_node_affinity
            && !(self.affinity.is_empty()
                || match &self.by_id {
                    Some(by_id) => node.meets(by_id),
                    None => self.affinity.matches_labels(&node.name, node.labels()),
                })
        {
            return false;
        }
        if c.honor_node_taints
            && find_untolerated(&node.taints, self.tolerations, taints::is_hard).is_some()
        {
            return false;
        }
        true
    }
}

pub(super) fn has_all_keys(node: &NodeInfo, constraints: &[Constraint]) -> bool {
    constraints
        .iter()
        .all(|c| node.topology.has(&c.topology_key))
}

/// Which constraints count the pods of each group, answered once per group in a cycle: pods in
/// the incoming pod's namespace, not terminating, that the constraint's counting selector
/// matches (see [`Constraint::counted`]).
#[derive(Debug)]
pub(super) struct Counted {
    pub(super) selectors: Vec<Selector>,
    pub(super) namespace: String,
    pub(super) memo: GroupMemo,
}

impl Counted {
    pub(super) fn new(constraints: &[Constraint], namespace: &str) -> Self {
        Counted {
            selectors: constraints.iter().map(|c| c.counted.clone()).collect(),
            namespace: namespace.to_string(),
            memo: GroupMemo::new(),
        }
    }

    /// The pods on `node` that constraint `i` counts.
    pub(super) fn on_node(&self, node: &NodeInfo, i: usize) -> i64 {
        let ask =
            |group: &PodGroup, c: usize| counts_group(&self.selectors[c], &self.namespace, group);
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

/// Whether a constraint of a pod in `namespace` counting by `selector` (its
/// [`Constraint::counted`]) counts the pods of `group`: in that namespace, not terminating,
/// matched by the selector.
pub(super) fn counts_group(selector: &Selector, namespace: &str, group: &PodGroup) -> bool {
    !group.terminating() && group.namespace() == namespace && selector.matches(group.labels())
}

/// Domain (the id of a topology value) → matching pods in that domain, for one constraint.
pub(super) type DomainCounts = HashMap<u32, i64>;

/// What a pod's constraints count on a node, as a question kept sums answer
/// ([`crate::scheduler::framework::node_sums`]): two pods asking equal questions count the same
/// pods on every node (their namespace, each constraint's key, counting selector and inclusion
/// policies, and what those policies read of the pod).
#[derive(Debug)]
pub(super) struct CountQuestion {
    namespace: String,
    /// Whether a node lacking any constraint's key is left out (else it counts in the "" domain
    /// of the keys it lacks); the "" label held, so that its id stays its own.
    require_all_keys: bool,
    #[expect(dead_code, reason = "held only to keep the id of \"\" alive")]
    no_value: Arc<Label>,
    /// Holds the keys, so that their ids stay theirs while the question is kept.
    constraints: Vec<(Arc<Label>, Selector, bool, bool)>,
    /// The pod's node requirements, when a constraint honors them.
    affinity: Option<RequiredNodeAffinity>,
    /// The pod's tolerations, when a constraint honors taints.
    tolerations: Vec<Toleration>,
}

impl CountQuestion {
    pub(super) fn new(
        pod: &PodInfo,
        constraints: &[Constraint],
        inclusion: &Inclusion,
        require_all_keys: bool,
    ) -> Self {
        let affinity = (constraints.iter())
            .any(|c| c.honor_node_affinity)
            .then(|| inclusion.affinity.clone());
        let tolerations = if constraints.iter().any(|c| c.honor_node_taints) {
            inclusion.tolerations.to_vec()
        } else {
            Vec::new()
        };
        CountQuestion {
            namespace: pod.namespace().to_string(),
            require_all_keys,
            no_value: topology::label(""),
            constraints: (constraints.iter())
                .map(|c| {
                    (
                        c.topology_key.clone(),
                        c.counted.clone(),
                        c.honor_node_affinity,
                        c.honor_node_taints,
                    )
                })
                .collect(),
            affinity,
            tolerations,
        }
    }
}

impl PartialEq for CountQuestion {
    fn eq(&self, other: &Self) -> bool {
        let same = |a: &(Arc<Label>, Selector, bool, bool),
                    b: &(Arc<Label>, Selector, bool, bool)| {
            a.0.id() == b.0.id() && a.1 == b.1 && a.2 == b.2 && a.3 == b.3
        };
        self.namespace == other.namespace
            && self.require_all_keys == other.require_all_keys
            && self.constraints.len() == other.constraints.len()
            && (self.constraints.iter().zip(&other.constraints)).all(|(a, b)| same(a, b))
            && self.affinity == other.affinity
            && self.tolerations == other.tolerations
    }
}

/// One constraint's counts per domain, with the eligible nodes in each, so that a domain
/// leaves when its last node does.
#[derive(Clone, Debug, Default)]
pub(super) struct Tally {
    /// Shared with the cycle states that read it; copied only when one still does.
    pub(super) counts: Arc<DomainCounts>,
    nodes: DomainCounts,
}

impl Tally {
    /// Adds `pods` matching pods and one eligible node to `domain`, `sign` times.
    fn add(&mut self, domain: u32, pods: i64, sign: i64) {
        let nodes = self.nodes.entry(domain).or_default();
        *nodes += sign;
        let gone = *nodes <= 0;
        let counts = Arc::make_mut(&mut self.counts);
        if gone {
            self.nodes.remove(&domain);
            counts.remove(&domain);
        } else {
            *counts.entry(domain).or_default() += sign * pods;
        }
    }

    fn merge(mut self, from: Tally) -> Tally {
        for (domain, n) in from.nodes {
            *self.nodes.entry(domain).or_default() += n;
        }
        let counts = Arc::make_mut(&mut self.counts);
        for (domain, n) in Arc::unwrap_or_clone(from.counts) {
            *counts.entry(domain).or_default() += n;
        }
        self
    }
}

/// Per-constraint tallies, kept between cycles.
pub(super) type Tallies = Arc<Vec<Tally>>;

/// Counts for `counted`'s constraints over every node `share` takes, kept in `kept` for the
/// next cycle that asks `question`: `share(node)` names, per constraint, the domain a node counts
/// in (`None`: not eligible), and the pods counted are [`Counted::on_node`]'s.
pub(super) fn tally(
    kept: &NodeSums<CountQuestion, Tallies>,
    snapshot: &Snapshot,
    question: CountQuestion,
    counted: &Counted,
    domain: impl Fn(&NodeInfo, usize) -> Option<u32> + Sync + Send,
) -> Tallies {
    let constraints = counted.selectors.len();
    let share = |tallies: &mut Vec<Tally>, node: &NodeInfo, sign: i64| {
        for (i, tally) in tallies.iter_mut().enumerate() {
            if let Some(d) = domain(node, i) {
                tally.add(d, counted.on_node(node, i), sign);
            }
        }
    };
    let whole = || {
        let empty = || vec![Tally::default(); constraints];
        let per_thread = fold_per_thread(snapshot.nodes(), empty, |acc, node| share(acc, node, 1));
        let merged = per_thread.into_iter().reduce(|into, from| {
            into.into_iter()
                .zip(from)
                .map(|(a, b)| a.merge(b))
                .collect()
        });
        Arc::new(merged.unwrap_or_else(empty))
    };
    kept.sums(snapshot, question, whole, |tallies, node, sign| {
        share(Arc::make_mut(tallies), node, sign)
    })
}
