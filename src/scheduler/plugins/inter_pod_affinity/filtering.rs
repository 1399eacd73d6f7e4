//! Filter's side of InterPodAffinity (upstream's filtering.go): PreFilter counts the pods
//! that the required terms of both sides see per topology pair, Filter looks the node's pairs
//! up, and a preemption dry run or nominated pods lay changes over those counts.

use super::*;

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
