//! Hard constraints: counted once in PreFilter, the skew each node would make checked in
//! Filter (with a remedy that says what would have to change).

use super::*;

/// A hard constraint with what Filter needs of it, computed in PreFilter.
#[derive(Debug)]
pub(super) struct HardConstraint {
    pub(super) constraint: Constraint,
    /// Matching pods per domain, over the eligible nodes.
    pub(super) counts: Arc<DomainCounts>,
    /// The global minimum the skew is measured against: 0 with fewer domains than minDomains.
    pub(super) min_match: i64,
    /// 1 when the pod being scheduled matches the selector itself.
    pub(super) self_match: i64,
}

#[derive(Clone, Debug)]
pub(super) struct PreFilterState {
    /// Shared, so that a preemption dry run copies the state cheaply.
    pub(super) constraints: Arc<Vec<HardConstraint>>,
    /// What left one node in a preemption dry run (constraint, domain, matching pods), or
    /// came to it as nominated pods (a negative number).
    pub(super) removed: Vec<(usize, u32, i64)>,
}

impl PreFilterState {
    /// The pods constraint `i` counts in `domain`, less those laid over as gone and plus those
    /// laid over as come.
    fn matching(&self, i: usize, domain: u32) -> i64 {
        let counted = self.constraints[i]
            .counts
            .get(&domain)
            .copied()
            .unwrap_or(0);
        let gone: i64 = (self.removed.iter())
            .filter(|&&(c, d, _)| c == i && d == domain)
            .map(|&(_, _, n)| n)
            .sum();
        counted - gone
    }

    /// The global minimum of constraint `i`: the emptiest domain. Where pods only left, only
    /// their domains can have gone below it; where pods came, the minimum is sought again.
    fn min_match(&self, i: usize) -> i64 {
        let hc = &self.constraints[i];
        let changes = || self.removed.iter().filter(move |&&(c, _, _)| c == i);
        if changes().any(|&(_, _, n)| n < 0) {
            let domains = i64::try_from(hc.counts.len()).unwrap_or(i64::MAX);
            if domains < hc.constraint.min_domains {
                return 0;
            }
            return (hc.counts.keys())
                .map(|&d| self.matching(i, d))
                .min()
                .unwrap_or(0);
        }
        changes().fold(hc.min_match, |min, &(_, d, _)| min.min(self.matching(i, d)))
    }

    /// This state with `pods` of `node` counted `sign` times off their domains (1: taken off,
    /// -1: added), for each constraint whose selector counts them, when the node has every
    /// constraint's key and passes the constraint's inclusion policies, as PreFilter counts.
    fn lay_over(&self, pod: &PodInfo, node: &NodeInfo, pods: &[&PodInfo], sign: i64) -> Self {
        let mut next = self.clone();
        if !(self.constraints.iter()).all(|hc| node.topology.has(&hc.constraint.topology_key)) {
            return next;
        }
        let inclusion = Inclusion::for_one_node(pod);
        for (i, hc) in self.constraints.iter().enumerate() {
            let c = &hc.constraint;
            let Some(domain) = node.topology.value(&c.topology_key) else {
                continue;
            };
            if !inclusion.includes(c, node) {
                continue;
            }
            let counted = (pods.iter())
                .filter(|p| counts_group(&c.counted, pod.namespace(), &p.group))
                .count();
            if counted > 0 {
                let n = i64::try_from(counted).unwrap_or(i64::MAX);
                next.removed.push((i, domain, sign * n));
            }
        }
        next
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
        let question = CountQuestion::new(pod, &constraints, &inclusion, true);
        let tallies = tally(&self.hard_sums, snapshot, question, &counted, |node, i| {
            let c = &constraints[i];
            let value = node.topology.value(&c.topology_key)?;
            (has_all_keys(node, &constraints) && inclusion.includes(c, node)).then_some(value)
        });
        let counts = tallies.iter().map(|t| t.counts.clone());
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
        state.write(
            PRE_FILTER_STATE_KEY,
            PreFilterState {
                constraints: Arc::new(constraints),
                removed: Vec::new(),
            },
        );
        (PreFilterResult::all_nodes(), Status::success())
    }

    /// Takes the pods off, or adds them to, the counts of the node's domains.
    fn lay_over_pods(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
        pods: &[&PodInfo],
        change: PodsChange,
        _snapshot: &Snapshot,
    ) -> bool {
        let Some(s) = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY) else {
            return false;
        };
        let next = s.lay_over(pod, node, pods, change.taken_off());
        state.write(PRE_FILTER_STATE_KEY, next);
        true
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
        for (i, hc) in s.constraints.iter().enumerate() {
            let Some(value) = node.topology.value(&hc.constraint.topology_key) else {
                return Status::unresolvable(ERR_REASON_NODE_LABEL_NOT_MATCH);
            };
            if s.matching(i, value) + hc.self_match - s.min_match(i) > hc.constraint.max_skew {
                return Status::unschedulable(ERR_REASON_CONSTRAINTS_NOT_MATCH);
            }
        }
        Status::success()
    }

    /// The constraint the node breaks: the topology label it lacks, or the skew the pod would
    /// make in its domain.
    fn remedy(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let s = state.read::<PreFilterState>(PRE_FILTER_STATE_KEY)?;
        for (i, hc) in s.constraints.iter().enumerate() {
            let key = hc.constraint.topology_key.value();
            let Some(value) = node.topology.value(&hc.constraint.topology_key) else {
                return Some(format!(
                    "label {} with {key}: the pod spreads over {key}, and only nodes that have it count",
                    node.name
                ));
            };
            let with_pod = s.matching(i, value) + hc.self_match;
            let min_match = s.min_match(i);
            let skew = with_pod - min_match;
            if skew > hc.constraint.max_skew {
                let domain = node.labels().get(key).cloned().unwrap_or_default();
                return Some(format!(
                    "{key}={domain} would hold {with_pod} matching pods against {} in the emptiest domain, a skew of {skew} over maxSkew {}: schedule the pod once its workload has fewer pods there, or raise maxSkew, or spread with whenUnsatisfiable: ScheduleAnyway",
                    min_match, hc.constraint.max_skew
                ));
            }
        }
        None
    }
}
