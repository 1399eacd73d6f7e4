//! Soft constraints (and the default ones): counted in PreScore over the feasible nodes'
//! domains, each node scored by the skew it would make, normalized as upstream.

use super::*;

/// A soft constraint with what Score needs of it, computed in PreScore.
#[derive(Debug)]
pub(super) struct SoftConstraint {
    pub(super) constraint: Constraint,
    /// Matching pods per domain (every domain with an eligible node; Score reads the feasible
    /// nodes'); empty for hostname, whose counts Score takes node by node.
    pub(super) counts: Arc<DomainCounts>,
    /// ln(domains + 2), so that counts in topologies with few domains weigh less.
    pub(super) weight: f64,
}

#[derive(Debug)]
pub(super) struct PreScoreState {
    pub(super) constraints: Vec<SoftConstraint>,
    /// Feasible nodes lacking a topology key: they score 0.
    pub(super) ignored: HashSet<String>,
    /// Counts the pods of hostname constraints, node by node, in Score.
    pub(super) counted: Counted,
}

impl PreScorePlugin for PodTopologySpread {
    /// Takes the domains of the soft constraints from the feasible nodes, then counts the
    /// matching pods per domain over every eligible node of the cluster (kept from the last
    /// cycle that asked the same, brought up to date from the nodes changed since).
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
        // Hostname domains are single nodes: Score counts each node's own pods. With only
        // hostname constraints there is nothing to count over the cluster, and no walk.
        let only_hostname = constraints.iter().all(Constraint::is_hostname);
        // Counted in every domain (not only the feasible nodes'), so that the counts are kept
        // from cycle to cycle; Score reads only the feasible nodes' domains.
        let counts: Vec<Arc<DomainCounts>> = if only_hostname {
            vec![Arc::default(); constraints.len()]
        } else {
            let question = CountQuestion::new(pod, &constraints, &inclusion, require_all_keys);
            let tallies = tally(&self.soft_sums, snapshot, question, &counted, |node, i| {
                let c = &constraints[i];
                if c.is_hostname() || (require_all_keys && !has_all_keys(node, &constraints)) {
                    return None;
                }
                inclusion.includes(c, node).then(|| value_of(node, c))
            });
            tallies.iter().map(|t| t.counts.clone()).collect()
        };

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
        if !s.ignored.is_empty() && s.ignored.contains(&node.name) {
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
        let ignored = |name: &String| !s.ignored.is_empty() && s.ignored.contains(name);
        let counted = || scores.iter().filter(|n| !ignored(&n.name));
        let min = counted().map(|n| n.score).min().unwrap_or(0);
        let max = counted().map(|n| n.score).max().unwrap_or(0).max(0);
        for n in scores.iter_mut() {
            n.score = if ignored(&n.name) {
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
