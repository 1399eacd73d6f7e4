//! Where a hierarchy's groups go (see [`crate::scheduler::composite_cycle`]): each
//! CompositePodGroup tried in the placements its topology key makes of its parent's, its
//! children in order in each, each PodGroup placed inside the placement it is given as the
//! topology-aware cycle places one; then each group's final verdict, a failed ancestor's
//! passed down.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use crate::k8s::pod::Pod;
use crate::scheduler::Scheduler;
use crate::scheduler::framework::group_post_filter::NodeRanks;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{CycleState, QueuedPodInfo};
use crate::scheduler::group_placement::{Evaluation, Trial, evaluate, infeasible};
use crate::scheduler::group_topology::{self, Domain};
use crate::scheduler::informers::pod_groups::GroupKey;
use crate::scheduler::informers::pod_groups::composite::{Member, Tree};

/// A leaf PodGroup of the hierarchy, with its pods in this cycle (in the cycle's order) and
/// those scheduled before.
pub struct Leaf {
    pub key: GroupKey,
    pub members: Vec<QueuedPodInfo>,
    pub already: Vec<Arc<Pod>>,
}

/// A group's verdict in one evaluation.
#[derive(Clone, Debug, PartialEq)]
pub enum Verdict {
    Scheduled,
    Unschedulable(String),
    Error(String),
}

/// What one group found: its verdict, whether it placed any pod, and (a leaf) its evaluation.
pub struct Found {
    pub verdict: Verdict,
    pub any: bool,
    pub evaluation: Option<Evaluation>,
}

impl Found {
    /// A group that placed nothing, for `verdict`'s reason.
    fn failed(verdict: Verdict) -> Self {
        Found {
            verdict,
            any: false,
            evaluation: None,
        }
    }
}

/// Every group's result in one evaluation of a subtree, by name (CompositePodGroups and
/// PodGroups apart: a PodGroup and a CompositePodGroup may share a name).
#[derive(Default)]
pub struct Results {
    pub leaves: HashMap<String, Found>,
    pub composites: HashMap<String, Found>,
}

impl Results {
    fn extend(&mut self, other: Results) {
        self.leaves.extend(other.leaves);
        self.composites.extend(other.composites);
    }

    fn get(&self, group: &Member) -> Option<&Found> {
        match group {
            Member::Leaf(_) => self.leaves.get(group.name()),
            Member::Composite(_) => self.composites.get(group.name()),
        }
    }

    fn set(&mut self, group: &Member, found: Found) {
        let name = group.name().to_string();
        match group {
            Member::Leaf(_) => self.leaves.insert(name, found),
            Member::Composite(_) => self.composites.insert(name, found),
        };
    }
}

pub struct Cycle<'a> {
    pub sched: &'a Scheduler,
    pub profile: &'a CompiledProfile,
    pub leaves: &'a HashMap<String, Leaf>,
    /// Pods taken off the cluster (a preemption's trial: its victims).
    pub removed: &'a HashSet<String>,
    /// The ranks a preemption's trial weighs nodes by.
    pub ranks: Option<Arc<dyn NodeRanks>>,
}

/// The nodes of a placement (None: every node).
pub type Nodes = Option<Arc<HashSet<String>>>;

impl Cycle<'_> {
    /// Where the hierarchy `tree` (its root) goes on `snapshot`: each standing leaf's placed
    /// pods (leaf name, index into its members, node), or why it does not fit. Nothing is held
    /// once it returns.
    pub fn place(
        &self,
        tree: &Tree,
        snapshot: &Snapshot,
    ) -> Result<Vec<(String, usize, String)>, String> {
        let mut results = Results::default();
        match self.eval(tree, snapshot, &None, &mut results) {
            (Verdict::Scheduled, true) => {}
            (Verdict::Scheduled, false) => {
                return Err(crate::scheduler::group_placement::GROUP_UNSCHEDULABLE.into());
            }
            (Verdict::Unschedulable(m) | Verdict::Error(m), _) => return Err(m),
        }
        let mut out = Vec::new();
        for name in standing_leaves(tree, &results) {
            if let Some(e) = results
                .leaves
                .get(&name)
                .and_then(|f| f.evaluation.as_ref())
            {
                out.extend(
                    e.placed
                        .iter()
                        .map(|a| (name.clone(), a.index, a.node.clone())),
                );
            }
        }
        Ok(out)
    }

    /// Evaluates `tree` on `snapshot` inside `placement`, its results (and its subtree's) put in
    /// `results`; returns its verdict and whether it placed any pod.
    pub fn eval(
        &self,
        tree: &Tree,
        snapshot: &Snapshot,
        placement: &Nodes,
        results: &mut Results,
    ) -> (Verdict, bool) {
        let found = match &tree.group {
            Member::Leaf(_) => self.leaf(tree, snapshot, placement),
            Member::Composite(_) => self.composite(tree, snapshot, placement, results),
        };
        let out = (found.verdict.clone(), found.any);
        results.set(&tree.group, found);
        out
    }

    /// The placements of `group` inside `placement`: the domains of its key (only the one of
    /// `scheduled` pods when there are), or the placement itself; and how many that fit end
    /// the search.
    fn placements(
        &self,
        group: &Member,
        snapshot: &Snapshot,
        placement: &Nodes,
        scheduled: &[Arc<Pod>],
    ) -> Result<(Vec<Domain>, usize), Verdict> {
        let Some(key) = group.topology_key() else {
            let nodes = placement.clone().unwrap_or_else(|| {
                Arc::new(snapshot.nodes().iter().map(|n| n.name.clone()).collect())
            });
            return Ok((
                vec![Domain {
                    name: String::new(),
                    nodes,
                }],
                1,
            ));
        };
        let domains = group_topology::domains(snapshot, key, scheduled).map_err(|why| {
            Verdict::Error(format!(
                "cannot determine domain for already scheduled pods: {why}"
            ))
        })?;
        let domains: Vec<Domain> = domains
            .into_iter()
            .filter_map(|d| {
                let nodes = match placement {
                    Some(within) => Arc::new(d.nodes.intersection(within).cloned().collect()),
                    None => d.nodes,
                };
                (!nodes.is_empty()).then_some(Domain {
                    name: d.name,
                    nodes,
                })
            })
            .collect();
        if domains.is_empty() {
            return Err(Verdict::Unschedulable(
                "no feasible placements found".into(),
            ));
        }
        self.sched.metrics.generated_placements(
            &self.profile.scheduler_name,
            entity(group),
            domains.len(),
        );
        let wanted = group_topology::placements_to_find(&domains);
        Ok((domains, wanted))
    }

    /// A PodGroup: tried in each of its placements until enough fit, the best kept.
    fn leaf(&self, tree: &Tree, snapshot: &Snapshot, placement: &Nodes) -> Found {
        let Some(leaf) = self.leaves.get(tree.group.name()) else {
            return Found::failed(Verdict::Error(format!(
                "pod group {:?} not found",
                tree.group.name()
            )));
        };
        let (domains, wanted) =
            match self.placements(&tree.group, snapshot, placement, &leaf.already) {
                Ok(placements) => placements,
                Err(verdict) => {
                    return Found::failed(verdict);
                }
            };
        let mut first: Option<Evaluation> = None;
        let mut feasible: Vec<(usize, Evaluation)> = Vec::new();
        for (i, domain) in domains.iter().enumerate() {
            let trial = Trial {
                snapshot,
                removed: self.removed,
                ranks: self.ranks.clone(),
                placement: Some(domain.nodes.clone()),
            };
            let started = Instant::now();
            let min = tree.group.min_count();
            let evaluation = evaluate(
                self.sched,
                self.profile,
                &leaf.members,
                (leaf.already.len(), min),
                &trial,
            );
            if let Some((_, status)) = &evaluation.error {
                return Found {
                    verdict: Verdict::Error(status.message()),
                    any: false,
                    evaluation: Some(evaluation),
                };
            }
            let fits = evaluation.group_failure.is_none();
            self.sched.metrics.placement_evaluation(
                (&self.profile.scheduler_name, entity(&tree.group)),
                fits,
                started.elapsed(),
            );
            if fits {
                feasible.push((i, evaluation));
                if feasible.len() >= wanted {
                    break;
                }
            } else if first.is_none() {
                first = Some(evaluation);
            }
        }
        if feasible.is_empty() {
            let reason = first
                .as_ref()
                .and_then(|e| e.group_failure.clone())
                .unwrap_or_default();
            return Found {
                verdict: Verdict::Unschedulable(format!(
                    "0/{} placements are available, first placement status: {reason}",
                    domains.len()
                )),
                any: false,
                evaluation: first,
            };
        }
        let best = group_topology::choose(
            self.profile,
            snapshot,
            &leaf.members,
            leaf.already.len(),
            &domains,
            &feasible,
        );
        let (_, winner) = feasible.swap_remove(best);
        Found {
            verdict: Verdict::Scheduled,
            any: !winner.placed.is_empty(),
            evaluation: Some(winner),
        }
    }

    /// A CompositePodGroup: tried in each of its placements until enough fit, the subtree of
    /// the best kept in `results`.
    fn composite(
        &self,
        tree: &Tree,
        snapshot: &Snapshot,
        placement: &Nodes,
        results: &mut Results,
    ) -> Found {
        let scheduled: Vec<Arc<Pod>> = tree
            .leaves()
            .iter()
            .filter_map(|k| self.leaves.get(&k.name))
            .flat_map(|l| l.already.iter().cloned())
            .collect();
        let (domains, wanted) = match self.placements(&tree.group, snapshot, placement, &scheduled)
        {
            Ok(placements) => placements,
            Err(verdict) => {
                return Found::failed(verdict);
            }
        };
        let mut first: Option<(Verdict, Results)> = None;
        let mut feasible: Vec<(usize, Results, bool)> = Vec::new();
        for (i, domain) in domains.iter().enumerate() {
            let started = Instant::now();
            let mut subtree = Results::default();
            let nodes = Some(domain.nodes.clone());
            let (verdict, any) = self.children(tree, snapshot, &nodes, &mut subtree);
            if let Verdict::Error(_) = verdict {
                results.extend(subtree);
                return Found::failed(verdict);
            }
            let fits = verdict == Verdict::Scheduled;
            self.sched.metrics.placement_evaluation(
                (&self.profile.scheduler_name, entity(&tree.group)),
                fits,
                started.elapsed(),
            );
            if fits {
                feasible.push((i, subtree, any));
                if feasible.len() >= wanted {
                    break;
                }
            } else if first.is_none() {
                first = Some((verdict, subtree));
            }
        }
        if feasible.is_empty() {
            let (reason, subtree) =
                first.unwrap_or_else(|| (Verdict::Scheduled, Results::default()));
            results.extend(subtree);
            let reason = match reason {
                Verdict::Unschedulable(m) | Verdict::Error(m) => m,
                Verdict::Scheduled => String::new(),
            };
            return Found {
                verdict: Verdict::Unschedulable(format!(
                    "0/{} placements are available, first placement status: {reason}",
                    domains.len()
                )),
                any: false,
                evaluation: None,
            };
        }
        let best = self.best(tree, snapshot, &domains, &feasible);
        let (_, subtree, any) = feasible.swap_remove(best);
        results.extend(subtree);
        Found {
            verdict: Verdict::Scheduled,
            any,
            evaluation: None,
        }
    }

    /// The index (into `feasible`) of the subtree placement that scores highest: the pods of
    /// its standing leaves there (placed now or before), normalized to the most, plus
    /// NodeResourcesFit's MostAllocated over the placement; the first on a tie.
    fn best(
        &self,
        tree: &Tree,
        snapshot: &Snapshot,
        domains: &[Domain],
        feasible: &[(usize, Results, bool)],
    ) -> usize {
        if feasible.len() == 1 {
            return 0;
        }
        let runs_fit = self
            .profile
            .uses(crate::scheduler::plugins::noderesources::fit::NAME);
        let mut counts = Vec::new();
        let mut fit = Vec::new();
        for (i, subtree, _) in feasible {
            let mut placed: Vec<&crate::scheduler::framework::pod_info::PodInfo> = Vec::new();
            let mut count = 0usize;
            for name in standing_leaves(tree, subtree) {
                let Some(leaf) = self.leaves.get(&name) else {
                    continue;
                };
                count = count.saturating_add(leaf.already.len());
                if let Some(e) = subtree
                    .leaves
                    .get(&name)
                    .and_then(|f| f.evaluation.as_ref())
                {
                    count = count.saturating_add(e.placed.len());
                    placed.extend(e.placed.iter().map(|a| leaf.members[a.index].pod.as_ref()));
                }
            }
            counts.push(i64::try_from(count).unwrap_or(i64::MAX));
            fit.push(runs_fit.then(|| {
                group_topology::fit_score(snapshot, &domains[*i].nodes, placed.iter().copied())
            }));
        }
        let scores = group_topology::totals(&counts, &fit);
        let mut best = 0;
        for (k, score) in scores.iter().enumerate() {
            if *score > scores[best] {
                best = k;
            }
        }
        best
    }

    /// The children of `tree` tried in order in one placement, each seeing the pods placed by
    /// those before it; stops once `minGroupCount` is out of reach (upstream's
    /// compositePodGroupSchedulingDefaultAlgorithm). Every reservation is given back.
    fn children(
        &self,
        tree: &Tree,
        snapshot: &Snapshot,
        placement: &Nodes,
        results: &mut Results,
    ) -> (Verdict, bool) {
        let release = self.profile.release;
        let min = tree.group.min_count();
        let count = tree.children.len();
        let (mut scheduled, mut unschedulable, mut remaining) = (0, 0, count);
        if let Some(message) = infeasible(release, min, 0, 0, remaining) {
            return (Verdict::Unschedulable(message), false);
        }
        let mut snapshot = snapshot.clone();
        let mut held: Vec<(
            CycleState,
            Arc<crate::scheduler::framework::pod_info::PodInfo>,
            String,
        )> = Vec::new();
        let mut any = false;
        let mut verdict = Verdict::Scheduled;
        for (i, child) in tree.children.iter().enumerate() {
            let (child_verdict, child_any) = self.eval(child, &snapshot, placement, results);
            if let Verdict::Error(message) = &child_verdict {
                verdict = Verdict::Error(format!(
                    "composite pod group {:?} evaluation failed due to child {:?} error: {message}",
                    tree.group.name(),
                    child.group.name()
                ));
                break;
            }
            any |= child_any;
            remaining -= 1;
            if child_verdict == Verdict::Scheduled {
                scheduled += 1;
            } else {
                unschedulable += 1;
            }
            if let Some(message) = infeasible(release, min, scheduled, unschedulable, remaining) {
                verdict = Verdict::Unschedulable(message);
                break;
            }
            if i + 1 < count && child_verdict == Verdict::Scheduled && child_any {
                // Its pods stand on the nodes for the siblings after it.
                for name in standing_leaves(child, results) {
                    let (Some(leaf), Some(found)) =
                        (self.leaves.get(&name), results.leaves.get(&name))
                    else {
                        continue;
                    };
                    for a in found.evaluation.iter().flat_map(|e| e.placed.iter()) {
                        let pod = &leaf.members[a.index].pod;
                        let mut state = a.state.clone();
                        if self
                            .profile
                            .run_reserve(&mut state, pod, &a.node)
                            .is_success()
                        {
                            held.push((state, pod.clone(), a.node.clone()));
                        }
                        if let Some(info) = snapshot.get(&a.node) {
                            let mut info = (**info).clone();
                            info.add_pod(Arc::new(pod.on_node(&a.node)));
                            snapshot = snapshot.with_node(info);
                        }
                    }
                }
            }
        }
        for (state, pod, node) in held.iter().rev() {
            self.profile.run_unreserve(state, pod, node);
        }
        if verdict != Verdict::Scheduled {
            any = false;
        }
        (verdict, any)
    }
}

/// A group's metrics entity label.
fn entity(group: &Member) -> &'static str {
    match group {
        Member::Leaf(_) => crate::scheduler::metrics::groups::PODGROUP,
        Member::Composite(_) => crate::scheduler::metrics::groups::COMPOSITE,
    }
}

/// The leaves of `tree` that stand in `results`: each of their ancestors (within `tree`) and
/// they themselves scheduled (upstream's SuccessfulLeafResults).
fn standing_leaves(tree: &Tree, results: &Results) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(tree: &Tree, results: &Results, out: &mut Vec<String>) {
        let Some(found) = results.get(&tree.group) else {
            return;
        };
        if found.verdict != Verdict::Scheduled {
            return;
        }
        match &tree.group {
            Member::Leaf(_) => out.push(tree.group.name().to_string()),
            Member::Composite(_) => {
                for child in &tree.children {
                    walk(child, results, out);
                }
            }
        }
    }
    walk(tree, results, &mut out);
    out
}

/// Each group's final verdict (upstream's completeCompositePodGroupAlgorithmResultMap): a
/// group whose ancestor failed takes the nearest failed ancestor's (`ancestor composite pod
/// group "x" is unschedulable`, or `… encountered an error`) unless it failed on its own (an
/// ancestor's error still wins over its own rejection); a group not evaluated is one whose
/// ancestor failed.
pub fn settle(tree: &Tree, results: &Results) -> Verdicts {
    let mut out = Verdicts::default();
    fn walk(tree: &Tree, results: &Results, failed: Option<(String, bool)>, out: &mut Verdicts) {
        let own = results.get(&tree.group).map(|f| f.verdict.clone());
        let ancestor = |(name, error): &(String, bool)| {
            if *error {
                Verdict::Error(format!(
                    "ancestor composite pod group {name:?} encountered an error"
                ))
            } else {
                Verdict::Unschedulable(format!(
                    "ancestor composite pod group {name:?} is unschedulable"
                ))
            }
        };
        let mut failed = failed;
        let verdict = match (&failed, own) {
            (Some(a), None | Some(Verdict::Scheduled)) => ancestor(a),
            (Some(a), Some(Verdict::Unschedulable(_))) if a.1 => ancestor(a),
            (_, Some(v @ (Verdict::Unschedulable(_) | Verdict::Error(_)))) => {
                failed = Some((
                    tree.group.name().to_string(),
                    matches!(v, Verdict::Error(_)),
                ));
                v
            }
            (None, Some(Verdict::Scheduled)) => Verdict::Scheduled,
            (None, None) => Verdict::Error("not evaluated".into()),
        };
        match &tree.group {
            Member::Leaf(_) => out.leaves.insert(tree.group.name().to_string(), verdict),
            Member::Composite(_) => out
                .composites
                .insert(tree.group.name().to_string(), verdict),
        };
        for child in &tree.children {
            walk(child, results, failed.clone(), out);
        }
    }
    walk(tree, results, None, &mut out);
    out
}

#[derive(Default)]
pub struct Verdicts {
    pub leaves: HashMap<String, Verdict>,
    pub composites: HashMap<String, Verdict>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::informers::pod_groups::composite::CompositeGroup;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;

    fn leaf(name: &str) -> Tree {
        let group: PodGroup = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 1}}},
        }))
        .expect("a PodGroup");
        Tree {
            group: Member::Leaf(Arc::new(group)),
            children: Vec::new(),
        }
    }

    fn composite(name: &str, children: Vec<Tree>) -> Tree {
        let object: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 1}}},
        }))
        .expect("a CompositePodGroup");
        Tree {
            group: Member::Composite(Arc::new(CompositeGroup::from_object(&object))),
            children,
        }
    }

    fn found(verdict: Verdict) -> Found {
        Found {
            verdict,
            any: false,
            evaluation: None,
        }
    }

    /// job ⊃ {replica ⊃ {a, b}, c}.
    fn tree() -> Tree {
        composite(
            "job",
            vec![composite("replica", vec![leaf("a"), leaf("b")]), leaf("c")],
        )
    }

    /// A failed root passes its verdict down to every group that stood or was not evaluated;
    /// a group that failed on its own keeps its reason (upstream's
    /// completeCompositePodGroupAlgorithmResultMap).
    #[test]
    fn a_failed_ancestor_is_named_below_it_unless_a_group_failed_on_its_own() {
        let mut results = Results::default();
        let unschedulable = |m: &str| Verdict::Unschedulable(m.into());
        results
            .composites
            .insert("job".into(), found(unschedulable("0/2 placements")));
        results
            .composites
            .insert("replica".into(), found(Verdict::Scheduled));
        results.leaves.insert("a".into(), found(Verdict::Scheduled));
        results
            .leaves
            .insert("b".into(), found(unschedulable("own reason")));
        let v = settle(&tree(), &results);
        let ancestor = unschedulable("ancestor composite pod group \"job\" is unschedulable");
        assert_eq!(v.composites["job"], unschedulable("0/2 placements"));
        assert_eq!(v.composites["replica"], ancestor);
        assert_eq!(v.leaves["a"], ancestor);
        assert_eq!(v.leaves["b"], unschedulable("own reason"));
        assert_eq!(v.leaves["c"], ancestor, "not evaluated");
    }

    /// An ancestor's error wins over a group's own rejection; all standing: all scheduled.
    #[test]
    fn an_ancestor_error_wins_and_a_standing_tree_stands() {
        let mut results = Results::default();
        results
            .composites
            .insert("job".into(), found(Verdict::Error("boom".into())));
        results
            .leaves
            .insert("b".into(), found(Verdict::Unschedulable("own".into())));
        let v = settle(&tree(), &results);
        let error =
            Verdict::Error("ancestor composite pod group \"job\" encountered an error".into());
        assert_eq!(v.leaves["b"], error);
        assert_eq!(v.composites["replica"], error);

        let mut results = Results::default();
        for name in ["job", "replica"] {
            results
                .composites
                .insert(name.into(), found(Verdict::Scheduled));
        }
        for name in ["a", "b", "c"] {
            results
                .leaves
                .insert(name.into(), found(Verdict::Scheduled));
        }
        let v = settle(&tree(), &results);
        assert!(
            v.leaves
                .values()
                .chain(v.composites.values())
                .all(|v| *v == Verdict::Scheduled)
        );
        assert_eq!(standing_leaves(&tree(), &results), ["a", "b", "c"]);
    }
}
