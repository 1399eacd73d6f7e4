//! Hard constraints: counted once in PreFilter, the skew each node would make checked in
//! Filter (with a remedy that says what would have to change).

use super::*;

/// A hard constraint with what Filter needs of it, computed in PreFilter.
#[derive(Debug)]
pub(super) struct HardConstraint {
    pub(super) constraint: Constraint,
    /// Matching pods per domain, over the eligible nodes.
    pub(super) counts: DomainCounts,
    /// The global minimum the skew is measured against: 0 with fewer domains than minDomains.
    pub(super) min_match: i64,
    /// 1 when the pod being scheduled matches the selector itself.
    pub(super) self_match: i64,
}

#[derive(Debug)]
pub(super) struct PreFilterState {
    pub(super) constraints: Vec<HardConstraint>,
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
