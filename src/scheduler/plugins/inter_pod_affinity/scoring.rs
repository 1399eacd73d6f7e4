//! Score's side of InterPodAffinity (upstream's scoring.go): PreScore sums the preferred
//! terms of both sides (and the existing pods' required affinity) per topology pair, Score
//! adds up the node's pairs.

use super::*;

/// What PreScore computed for Score (kube-scheduler's preScoreState): the summed weights per
/// topology pair, positive for affinity and negative for anti-affinity.
#[derive(Debug)]
struct PreScoreState {
    /// Shared with the sums kept for the next cycle.
    topology_score: Arc<TopologyMap>,
}

/// What PreScore's sums depend on besides the nodes: the incoming pod's group (its namespace,
/// labels and terms) and the namespaces' labels its terms' namespaceSelectors read. Compared by
/// identity: an equal group is the same interned one.
#[derive(Debug)]
pub(super) struct ScoreQuestion {
    group: Arc<PodGroup>,
    namespaces: Arc<std::collections::HashMap<String, BTreeMap<String, String>>>,
}

impl PartialEq for ScoreQuestion {
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.group, &other.group) && Arc::ptr_eq(&self.namespaces, &other.namespaces)
    }
}

/// The summed weights per topology pair, and how many terms were added to a pair (taking a
/// node's share off subtracts its terms): none means nothing matched, and Score is skipped, as
/// upstream skips on an empty map.
#[derive(Clone, Debug, Default)]
pub(super) struct ScoreSums {
    map: Arc<TopologyMap>,
    added: i64,
}

impl ScoreSums {
    fn merge(mut self, other: ScoreSums) -> ScoreSums {
        let map = Arc::make_mut(&mut self.map);
        *map = std::mem::take(map).merge(Arc::unwrap_or_clone(other.map));
        self.added += other.added;
        self
    }
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
    /// `n` is negative to take the pods' share off.
    fn add_group(
        &self,
        sums: &mut ScoreSums,
        memo: &GroupMemo,
        group: &PodGroup,
        n: i64,
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
            let scores = Arc::make_mut(&mut sums.map);
            for (q, (term, weight, _)) in terms().enumerate() {
                if matched.get(q) && scores.add_for_node(node, &term.topology_key, weight * n) {
                    sums.added += n.signum();
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
    /// The sums are kept for the next cycle of a pod of the same group, which brings them up
    /// to date from the nodes changed since instead of walking again.
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
        let memo = GroupMemo::new();
        // A node's share: without preferred terms of the pod's own, only groups with terms add.
        let share = |sums: &mut ScoreSums, node: &NodeInfo, sign: i64| {
            let groups = node
                .groups
                .iter()
                .filter(|g| has_constraints || !g.group.terms().is_empty());
            for g in groups {
                inputs.add_group(sums, &memo, &g.group, sign * i64::from(g.pods), node);
            }
        };
        let whole = || {
            let nodes: Vec<&Arc<NodeInfo>> = if has_constraints {
                snapshot.nodes().iter().collect()
            } else {
                snapshot.have_pods_with_affinity().collect()
            };
            let per_thread = fold_per_thread(&nodes, ScoreSums::default, |sums, node| {
                share(sums, node, 1)
            });
            (per_thread.into_iter())
                .reduce(ScoreSums::merge)
                .unwrap_or_default()
        };
        let question = ScoreQuestion {
            group: pod.group.clone(),
            namespaces: snapshot.namespace_labels.clone(),
        };
        let sums = self.score_sums.sums(snapshot, question, whole, share);
        if sums.added == 0 {
            return Status::skip();
        }
        state.write(
            PRE_SCORE_STATE_KEY,
            PreScoreState {
                topology_score: sums.map,
            },
        );
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
