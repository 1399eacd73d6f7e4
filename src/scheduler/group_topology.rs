//! Topology-aware workload placement (kube-scheduler 1.38's TopologyAwareWorkloadScheduling):
//! a PodGroup whose `schedulingConstraints.topology` names a node label key is placed inside
//! one domain of it (one rack, one block), never across two.
//!
//! 1. **Placements** (TopologyPlacementGenerator): the nodes grouped by the key's value (a node
//!    without the label, or with an empty value, is in none); when members are already
//!    scheduled, only their one domain (they must share one).
//! 2. **Evaluation**: the group is tried in each placement as the group cycle tries it on the
//!    cluster, the members seeing only the placement's nodes (plugins still see every node:
//!    spreading and affinity count the whole cluster), everything given back after each. A
//!    placement holding a member's nominated node (a preemption made room there) is tried
//!    first and taken when the group fits there. The search stops once enough placements fit
//!    (upstream's share: all below 1 placement, else `max(5, 100 − nodes·9/500)` percent of
//!    them, at least one).
//! 3. **Choice**: one feasible placement is taken; of several, the highest sum of
//!    NodeResourcesFit's placement score (MostAllocated over the placement: the members' and
//!    its pods' non-zero cpu and memory requests against its allocatable) and PodGroupPodsCount
//!    (the group's pods placed or scheduled there, normalized to the best). Upstream breaks a
//!    tie at random; tether takes the first domain by name.
//!
//! The cluster needs kube-apiserver's TopologyAwareWorkloadScheduling gate (beta, off in 1.38)
//! for a PodGroup to keep its constraints; tether follows the constraint wherever the API has
//! one, on 1.38 and later.

use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::k8s::release::Release;
use crate::scheduler::Scheduler;
use crate::scheduler::failure::Failure;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{QueuedPodInfo, Status};
use crate::scheduler::group_placement::{Assigned, Evaluation, Trial, evaluate};
use crate::scheduler::handoff::search_over_message;
use crate::scheduler::informers::pod_groups::Group;
use crate::scheduler::metrics::groups::PODGROUP;
use crate::scheduler::plugins::gangs::Gang;
use crate::scheduler::plugins::noderesources::scoring::most_requested_score;

/// The plugin that says no placement exists (upstream's TopologyPlacementGenerator).
pub const GENERATOR: &str = "TopologyPlacementGenerator";

/// The node label key the group must be placed within one domain of, where it names one (1.38
/// on: a Workload API PodGroup's `schedulingConstraints.topology[0].key`).
pub fn key_of(gang: &Gang, release: Release) -> Option<String> {
    if !release.at_least(38) {
        return None;
    }
    let Group::Workload(group) = &gang.group else {
        return None;
    };
    group
        .spec
        .scheduling_constraints
        .as_ref()?
        .topology
        .as_ref()?
        .first()
        .map(|t| t.key.clone())
        .filter(|k| !k.is_empty())
}

/// One domain of the key: its value and its nodes.
pub struct Domain {
    pub name: String,
    pub nodes: Arc<HashSet<String>>,
}

/// The domains of `key` among the snapshot's nodes, by name; only the one of the group's
/// `scheduled` pods when there are any (their nodes must all carry one non-empty value).
pub fn domains(
    snapshot: &Snapshot,
    key: &str,
    scheduled: &[Arc<Pod>],
) -> Result<Vec<Domain>, String> {
    let mut required: Option<String> = None;
    for pod in scheduled {
        let name = pods::key(pod);
        let node = pods::node_name(pod).unwrap_or_default();
        let info = snapshot.get(node).ok_or_else(|| {
            format!("getting node for pod {name}: nodeinfo not found for node name {node:?}")
        })?;
        let domain = info
            .labels()
            .get(key)
            .ok_or_else(|| format!("no topology domain found for pod {name}"))?;
        if domain.is_empty() {
            return Err(format!("empty topology domain found for pod {name}"));
        }
        match &required {
            Some(seen) if seen != domain => {
                return Err(format!(
                    "more than 1 domain found for pod group: {seen:?}, {domain:?}"
                ));
            }
            _ => required = Some(domain.clone()),
        }
    }
    let mut by_value: BTreeMap<&str, HashSet<String>> = BTreeMap::new();
    for node in snapshot.nodes() {
        if let Some(value) = node.labels().get(key).filter(|v| !v.is_empty())
            && required.as_deref().is_none_or(|r| r == value)
        {
            by_value
                .entry(value.as_str())
                .or_default()
                .insert(node.name.clone());
        }
    }
    Ok(by_value
        .into_iter()
        .map(|(name, nodes)| Domain {
            name: name.to_string(),
            nodes: Arc::new(nodes),
        })
        .collect())
}

/// How many feasible placements the search finds before it stops (upstream's
/// numFeasiblePlacementsToFind with `percentageOfPlacementsToScore` unset).
pub fn placements_to_find(domains: &[Domain]) -> usize {
    let all = domains.len();
    if all < 1 {
        return all;
    }
    let nodes: usize = domains.iter().map(|d| d.nodes.len()).sum();
    let percentage = 100usize
        .saturating_sub(nodes.saturating_mul(9) / 500)
        .max(5);
    (all.saturating_mul(percentage) / 100).max(1)
}

/// What the search found.
pub enum Search {
    /// The chosen placement, and the group's evaluation there.
    Placed { winner: Evaluation, domain: String },
    /// No placement fits: why (`0/N placements are available, first placement status: …`, or
    /// the generator's), and the first placement's evaluation (the members' own failures).
    Refused {
        message: String,
        first: Option<Evaluation>,
    },
    /// An error, from the generator (no member) or a member's trial.
    Error {
        member: Option<usize>,
        status: Status,
    },
}

/// Searches the domains of `key` for the group's placement on `whole` (a trial of the whole
/// cluster), as upstream's podGroupSchedulingPlacementAlgorithm.
pub fn search(
    sched: &Scheduler,
    profile: &CompiledProfile,
    members: &[QueuedPodInfo],
    (gang, already): (&Gang, usize),
    whole: &Trial<'_>,
    key: &str,
) -> Search {
    let in_cycle: HashSet<&str> = members.iter().map(|m| m.pod.uid()).collect();
    let scheduled = sched.scheduled_before(&gang.key, &in_cycle);
    let domains = match domains(whole.snapshot, key, &scheduled) {
        Ok(domains) => domains,
        Err(why) => {
            return Search::Error {
                member: None,
                status: Status::error(format!(
                    "cannot determine domain for already scheduled pods: {why}"
                ))
                .with_plugin(GENERATOR),
            };
        }
    };
    if domains.is_empty() {
        return Search::Refused {
            message: "no feasible placements found".into(),
            first: None,
        };
    }
    sched
        .metrics
        .generated_placements(&profile.scheduler_name, PODGROUP, domains.len());
    let try_domain = |domain: &Domain| {
        let started = Instant::now();
        let trial = Trial {
            snapshot: whole.snapshot,
            removed: whole.removed,
            ranks: whole.ranks.clone(),
            placement: Some(domain.nodes.clone()),
        };
        let evaluation = evaluate(sched, profile, members, (already, gang.min_count), &trial);
        if evaluation.error.is_none() {
            sched.metrics.placement_evaluation(
                (&profile.scheduler_name, PODGROUP),
                evaluation.feasible(),
                started.elapsed(),
            );
        }
        evaluation
    };
    // The placement of the members' nominated node first: taken when the group fits there.
    let nominated: HashSet<&str> = members
        .iter()
        .filter_map(|m| crate::scheduler::framework::runtime::nominated_node(&m.pod.pod))
        .collect();
    let holding: Vec<usize> = (0..domains.len())
        .filter(|&i| {
            domains[i]
                .nodes
                .iter()
                .any(|n| nominated.contains(n.as_str()))
        })
        .collect();
    let mut first: Option<Evaluation> = None;
    let mut feasible: Vec<(usize, Evaluation)> = Vec::new();
    let nominated_domain = match holding.as_slice() {
        [only] => Some(*only),
        _ => None,
    };
    if let Some(i) = nominated_domain {
        let evaluation = try_domain(&domains[i]);
        if let Some((member, status)) = evaluation.error {
            return Search::Error {
                member: Some(member),
                status,
            };
        }
        if evaluation.feasible() {
            return Search::Placed {
                winner: evaluation,
                domain: domains[i].name.clone(),
            };
        }
        first = Some(evaluation);
    }
    let wanted = placements_to_find(&domains);
    for (i, domain) in domains.iter().enumerate() {
        if Some(i) == nominated_domain {
            continue;
        }
        let evaluation = try_domain(domain);
        if let Some((member, status)) = evaluation.error {
            return Search::Error {
                member: Some(member),
                status,
            };
        }
        if evaluation.feasible() {
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
            .unwrap_or_else(|| {
                "nominated placement is feasible but no pending pod was scheduled".into()
            });
        return Search::Refused {
            message: format!(
                "0/{} placements are available, first placement status: {reason}",
                domains.len()
            ),
            first,
        };
    }
    let best = choose(
        profile,
        whole.snapshot,
        members,
        already,
        &domains,
        &feasible,
    );
    let (i, winner) = feasible.swap_remove(best);
    Search::Placed {
        winner,
        domain: domains[i].name.clone(),
    }
}

/// The index (into `feasible`) of the placement with the highest score: NodeResourcesFit's
/// (when the profile runs it) plus PodGroupPodsCount's, the first on a tie.
pub fn choose(
    profile: &CompiledProfile,
    snapshot: &Snapshot,
    members: &[QueuedPodInfo],
    already: usize,
    domains: &[Domain],
    feasible: &[(usize, Evaluation)],
) -> usize {
    if feasible.len() == 1 {
        return 0;
    }
    let runs_fit = profile.uses(crate::scheduler::plugins::noderesources::fit::NAME);
    let counts: Vec<i64> = feasible
        .iter()
        .map(|(_, e)| i64::try_from(already.saturating_add(e.placed.len())).unwrap_or(i64::MAX))
        .collect();
    let fit: Vec<Option<i64>> = feasible
        .iter()
        .map(|(i, e)| {
            runs_fit.then(|| {
                fit_score(
                    snapshot,
                    &domains[*i].nodes,
                    e.placed.iter().map(|a| members[a.index].pod.as_ref()),
                )
            })
        })
        .collect();
    let scores = totals(&counts, &fit);
    let mut best = 0;
    for (k, score) in scores.iter().enumerate() {
        if *score > scores[best] {
            best = k;
        }
    }
    best
}

/// NodeResourcesFit's placement score (MostAllocated, cpu and memory of weight 1): the pods
/// `placed` there and the placement's own, their non-zero requests summed, against the
/// placement's allocatable.
pub fn fit_score<'a>(
    snapshot: &Snapshot,
    nodes: &HashSet<String>,
    placed: impl IntoIterator<Item = &'a PodInfo>,
) -> i64 {
    let (mut cpu, mut memory, mut cpu_alloc, mut memory_alloc) = (0i64, 0i64, 0i64, 0i64);
    for pod in placed {
        cpu = cpu.saturating_add(pod.non_zero_requests.milli_cpu);
        memory = memory.saturating_add(pod.non_zero_requests.memory);
    }
    for node in snapshot.nodes().iter().filter(|n| nodes.contains(&n.name)) {
        cpu = cpu.saturating_add(node.non_zero_requested.milli_cpu);
        memory = memory.saturating_add(node.non_zero_requested.memory);
        cpu_alloc = cpu_alloc.saturating_add(node.allocatable.milli_cpu);
        memory_alloc = memory_alloc.saturating_add(node.allocatable.memory);
    }
    let mut sum = 0;
    let mut weights = 0;
    for (requested, allocatable) in [(cpu, cpu_alloc), (memory, memory_alloc)] {
        if allocatable == 0 {
            continue;
        }
        sum += most_requested_score(requested, allocatable);
        weights += 1;
    }
    if weights == 0 { 0 } else { sum / weights }
}

/// Each placement's total score: PodGroupPodsCount's (`counts`: the group's pods there,
/// normalized to the most) plus NodeResourcesFit's (`fit`, where the profile runs it).
pub fn totals(counts: &[i64], fit: &[Option<i64>]) -> Vec<i64> {
    let most = counts.iter().copied().max().unwrap_or(0).max(1);
    counts
        .iter()
        .zip(fit)
        .map(|(&count, fit)| (count.saturating_mul(100) / most).saturating_add(fit.unwrap_or(0)))
        .collect()
}

/// A group cycle's outcome in the chosen placement, its members placed for real (assumed in
/// the cache and reserved), or why no placement fits.
pub struct Cycle {
    pub placed: Vec<Assigned>,
    pub own_failures: Vec<(usize, Failure)>,
    pub rejected_by: BTreeSet<&'static str>,
    pub retry_after: Option<std::time::Duration>,
    pub group_failure: Option<String>,
    pub error: Option<(Option<usize>, Status)>,
    pub evaluated: usize,
}

/// The group cycle of a group with a topology constraint: the search on the cycle's snapshot,
/// then the winner's members assumed and reserved again (a member whose Reserve fails now
/// fails alone, as upstream's prepareForBindingCycle).
pub fn cycle(
    sched: &Scheduler,
    profile: &CompiledProfile,
    members: &[QueuedPodInfo],
    (gang, already): (&Gang, usize),
    key: &str,
) -> Cycle {
    let snapshot = sched.lock_cache().snapshot();
    let removed = HashSet::new();
    let whole = Trial {
        snapshot: &snapshot,
        removed: &removed,
        ranks: None,
        placement: None,
    };
    let mut out = Cycle {
        placed: Vec::new(),
        own_failures: Vec::new(),
        rejected_by: BTreeSet::new(),
        retry_after: None,
        group_failure: None,
        error: None,
        evaluated: 0,
    };
    match search(sched, profile, members, (gang, already), &whole, key) {
        Search::Error { member, status } => out.error = Some((member, status)),
        Search::Refused { message, first } => {
            out.group_failure = Some(message);
            match first {
                Some(first) => {
                    out.own_failures = first.own_failures;
                    out.rejected_by = first.rejected_by;
                    out.retry_after = first.retry_after;
                    out.evaluated = first.evaluated;
                }
                None => {
                    out.rejected_by.insert(GENERATOR);
                }
            }
        }
        Search::Placed { winner, domain } => {
            tracing::debug!(group = %gang.key, %domain, "placement chosen");
            out.own_failures = winner.own_failures;
            out.rejected_by = winner.rejected_by;
            out.retry_after = winner.retry_after;
            out.evaluated = winner.evaluated;
            for mut assigned in winner.placed {
                let pod = &members[assigned.index].pod;
                sched.lock_cache().assume_pod(pod, &assigned.node);
                let status = profile.run_reserve(&mut assigned.state, pod, &assigned.node);
                if status.is_success() {
                    out.placed.push(assigned);
                } else {
                    sched.lock_cache().forget_pod(pod.uid());
                    out.rejected_by.extend(status.plugin);
                    out.own_failures.push((
                        assigned.index,
                        Failure::after_status(&status, true, search_over_message(&status)),
                    ));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

    const RACK: &str = "example.com/rack";

    fn cluster() -> Snapshot {
        snapshot(
            vec![
                NodeBuilder::new("a1").label(RACK, "a"),
                NodeBuilder::new("a2").label(RACK, "a"),
                NodeBuilder::new("b1").label(RACK, "b"),
                NodeBuilder::new("empty").label(RACK, ""),
                NodeBuilder::new("none"),
            ],
            vec![],
        )
    }

    fn names(domains: &[Domain]) -> Vec<(String, Vec<String>)> {
        domains
            .iter()
            .map(|d| {
                let mut nodes: Vec<String> = d.nodes.iter().cloned().collect();
                nodes.sort();
                (d.name.clone(), nodes)
            })
            .collect()
    }

    /// A domain per value of the key; a node without it, or with an empty value, is in none.
    /// Members already scheduled leave only their domain, and must share one.
    #[test]
    fn domains_group_nodes_by_the_keys_value_and_follow_scheduled_members() {
        let snap = cluster();
        assert_eq!(
            names(&domains(&snap, RACK, &[]).expect("domains")),
            [
                ("a".to_string(), vec!["a1".to_string(), "a2".to_string()]),
                ("b".to_string(), vec!["b1".to_string()]),
            ]
        );
        let on = |node: &str| {
            Arc::new(
                PodBuilder::new(&format!("p-{node}"))
                    .node_name(node)
                    .build(),
            )
        };
        assert_eq!(
            names(&domains(&snap, RACK, &[on("b1")]).expect("domains")),
            [("b".to_string(), vec!["b1".to_string()])]
        );
        assert_eq!(
            domains(&snap, RACK, &[on("a1"), on("b1")]).err().as_deref(),
            Some("more than 1 domain found for pod group: \"a\", \"b\"")
        );
        assert_eq!(
            domains(&snap, RACK, &[on("none")]).err().as_deref(),
            Some("no topology domain found for pod default/p-none")
        );
        assert_eq!(
            domains(&snap, RACK, &[on("empty")]).err().as_deref(),
            Some("empty topology domain found for pod default/p-empty")
        );
        assert!(
            domains(&snap, "example.com/absent", &[])
                .expect("none")
                .is_empty()
        );
    }

    /// All placements are searched on a small cluster; past 5,000 nodes in them, 5 percent.
    #[test]
    fn the_share_of_placements_searched_shrinks_with_their_nodes() {
        let domain = |nodes: usize| Domain {
            name: String::new(),
            nodes: Arc::new((0..nodes).map(|i| i.to_string()).collect()),
        };
        assert_eq!(placements_to_find(&[domain(3), domain(3)]), 2);
        let many: Vec<Domain> = (0..100).map(|_| domain(100)).collect();
        assert_eq!(placements_to_find(&many), 5, "10,000 nodes: the 5% floor");
        let some: Vec<Domain> = (0..10).map(|_| domain(100)).collect();
        assert_eq!(placements_to_find(&some), 8, "1,000 nodes: 82%");
    }

    /// MostAllocated over the placement: the members' and its pods' non-zero requests against
    /// its allocatable, cpu and memory averaged.
    #[test]
    fn the_fit_score_of_a_placement_is_how_full_the_members_leave_it() {
        let snap = snapshot(
            vec![
                NodeBuilder::new("a1")
                    .allocatable("cpu", "2")
                    .allocatable("memory", "4Gi"),
                NodeBuilder::new("a2")
                    .allocatable("cpu", "2")
                    .allocatable("memory", "4Gi"),
            ],
            vec![],
        );
        let domain = Domain {
            name: "a".into(),
            nodes: Arc::new(["a1".to_string(), "a2".to_string()].into()),
        };
        let now = Instant::now();
        let members: Vec<QueuedPodInfo> = (0..4)
            .map(|i| QueuedPodInfo {
                pod: Arc::new(
                    PodBuilder::new(&format!("m{i}"))
                        .req_cpu("1")
                        .req("memory", "1Gi")
                        .info(),
                ),
                initial_attempt_timestamp: now,
                timestamp: now,
                attempts: 1,
                unschedulable_plugins: Default::default(),
                unschedulable_count: 0,
                consecutive_errors_count: 0,
                gated_by: None,
            })
            .collect();
        let evaluation = Evaluation {
            placed: (0..4)
                .map(|index| Assigned {
                    index,
                    node: if index < 2 { "a1" } else { "a2" }.into(),
                    state: Default::default(),
                    choice: crate::scheduler::algorithm::Choice::OnlyFeasible,
                })
                .collect(),
            ..Default::default()
        };
        // cpu 4/4 → 100, memory 4Gi/8Gi → 50.
        let placed = evaluation
            .placed
            .iter()
            .map(|a| members[a.index].pod.as_ref());
        assert_eq!(fit_score(&snap, &domain.nodes, placed), 75);
        assert_eq!(totals(&[4, 2], &[Some(75), Some(90)]), [175, 140]);
    }
}
