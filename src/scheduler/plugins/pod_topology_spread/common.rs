//! What PreFilter and PreScore share: a pod's constraints as parsed once, which nodes a
//! constraint counts (node affinity and taints, as its policies say), and the matching pods
//! counted per topology domain in parallel.

use std::collections::BTreeMap;
use std::sync::Arc;

use foldhash::HashMap;
use k8s_openapi::api::core::v1::{Taint, Toleration, TopologySpreadConstraint};

use super::args::LABEL_HOSTNAME;
use crate::k8s::labels::{Requirement, Selector, SelectorError};
use crate::k8s::node_selector::RequiredNodeAffinity;
use crate::k8s::pod::PodSpec;
use crate::k8s::release::Release;
use crate::k8s::taints::find_untolerated;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::parallel::fold_per_thread;
use crate::scheduler::framework::pod_group::{Answers, GroupMemo, PodGroup};
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::topology::{self, Label};

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
    pub(super) tolerations: &'a [Toleration],
}

impl<'a> Inclusion<'a> {
    pub(super) fn new(pod: &'a PodInfo) -> Self {
        let spec = pod.pod.spec.as_ref();
        Inclusion {
            affinity: RequiredNodeAffinity::from_pod(&pod.pod),
            tolerations: spec.map_or(&[], PodSpec::tolerations),
        }
    }

    pub(super) fn includes(&self, c: &Constraint, node: &NodeInfo) -> bool {
        // An empty affinity matches every node; checking that first spares reading the node.
        if c.honor_node_affinity
            && !(self.affinity.is_empty()
                || self.affinity.matches_labels(&node.name, node.labels()))
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

/// Sums per-constraint domain counts over `nodes` in parallel; `per_node` adds one node's share.
pub(super) fn count_by_domain<F>(
    nodes: &[Arc<NodeInfo>],
    constraints: usize,
    per_node: F,
) -> Vec<DomainCounts>
where
    F: Fn(&NodeInfo, &mut [DomainCounts]) + Sync + Send,
{
    let empty = || vec![DomainCounts::default(); constraints];
    fold_per_thread(nodes, empty, |acc, node| per_node(node, acc))
        .into_iter()
        .reduce(merge_counts)
        .unwrap_or_else(empty)
}

pub(super) fn merge_counts(
    mut into: Vec<DomainCounts>,
    from: Vec<DomainCounts>,
) -> Vec<DomainCounts> {
    for (into, from) in into.iter_mut().zip(from) {
        for (domain, n) in from {
            *into.entry(domain).or_default() += n;
        }
    }
    into
}
