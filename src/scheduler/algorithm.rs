//! The scheduling algorithm, as kube-scheduler's schedule_one.go holds it: schedulePod (PreFilter
//! once, the nominated node first, Filter per node in parallel until enough feasible nodes are
//! found, PreScore and Score, the winner), findNodesThatPassFilters, prioritizeNodes and
//! selectHost. It calls the compiled profile's runners (`framework/runtime`); the cycles that
//! use it are `cycle.rs` (the scheduling cycle) and `binding.rs`, and `explain` runs the same
//! functions dry.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::Rng;
use rayon::prelude::*;

use crate::scheduler::batch::{BatchCycle, Ranking};
use crate::scheduler::framework::group_post_filter::{
    IN_PLACEMENT, InPlacement, NODE_RANKS, RankedBy,
};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::{
    Diagnosis, PluginScores, PreFilterFailure, PreFiltered, RawScores, left_out_status,
    nominated_node,
};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{Code, CycleState, NodeScore, NominatedPods, Nomination, Status};

/// Below this many nodes every node is filtered (kube-scheduler's minFeasibleNodesToFind).
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// The least adaptive percentage (kube-scheduler's minFeasibleNodesPercentageToFind).
pub const MIN_FEASIBLE_NODES_PERCENTAGE: usize = 5;

/// How many feasible nodes to look for before scoring, as kube-scheduler's
/// numFeasibleNodesToFind: all of a small cluster; else `percentage` of the nodes, where 0
/// means adaptive (50% minus 1% per 125 nodes, at least 5%), never fewer than 100.
pub fn num_feasible_nodes_to_find(percentage: i32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return num_all_nodes;
    }
    let percentage = if percentage <= 0 {
        (50usize.saturating_sub(num_all_nodes / 125)).max(MIN_FEASIBLE_NODES_PERCENTAGE)
    } else {
        percentage as usize
    };
    (num_all_nodes * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

/// How the chosen node won, for the `Scheduled` event.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Choice {
    /// The best total score among `feasible` scored nodes; the best of the others with its
    /// total.
    Scored {
        score: i64,
        runner_up: Option<NodeScore>,
        feasible: usize,
    },
    /// The one node that passed the filters: nothing was scored.
    OnlyFeasible,
    /// The node the pod was nominated to (by preemption), which passed the filters.
    Nominated,
    /// The best node left of the ranking kept for the previous pod of the same signature
    /// (opportunistic batching), with its total there, which passed the filters.
    Batched { score: i64 },
}

impl Choice {
    /// How `chosen` won among `scores`.
    pub fn scored(chosen: &str, scores: &[NodeScore]) -> Choice {
        let score = scores
            .iter()
            .find(|s| s.name == chosen)
            .map_or(0, |s| s.score);
        let runner_up = scores
            .iter()
            .filter(|s| s.name != chosen)
            .max_by(|a, b| a.score.cmp(&b.score).then_with(|| b.name.cmp(&a.name)))
            .cloned();
        Choice::Scored {
            score,
            runner_up,
            feasible: scores.len(),
        }
    }
}

/// The outcome of a scheduling attempt before Reserve.
#[derive(Debug)]
pub enum ScheduleResult {
    /// The chosen node, how many nodes were evaluated and how many were feasible, and how it
    /// won.
    Scheduled {
        node: String,
        evaluated: usize,
        feasible: usize,
        choice: Choice,
    },
    Unschedulable(Diagnosis),
    Error(Status),
}

/// Runs the scheduling algorithm (kube-scheduler's schedulePod) of `profile` for `pod`.
/// `start_index` rotates where the search begins, so that successive pods look at different
/// nodes first when only a share of the nodes is filtered.
pub fn schedule_pod(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    start_index: &AtomicUsize,
    nominated: &dyn NominatedPods,
) -> ScheduleResult {
    schedule_pod_with(profile, state, pod, snapshot, start_index, nominated, true)
}

/// [`schedule_pod`], with PostFilter run on a pod that fits nowhere only when `post_filter`
/// (a member of a gang's group cycle is tried without it, as upstream's).
pub fn schedule_pod_with(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    start_index: &AtomicUsize,
    nominated: &dyn NominatedPods,
    post_filter: bool,
) -> ScheduleResult {
    schedule(
        profile,
        state,
        pod,
        snapshot,
        start_index,
        nominated,
        post_filter,
        None,
    )
}

/// [`schedule_pod`] with opportunistic batching (`batch.rs`): the hint of `batch` is tried
/// after PreFilter, as a nominated node is, and where the pod goes is stored in it.
pub fn schedule_pod_batched(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    start_index: &AtomicUsize,
    nominated: &dyn NominatedPods,
    batch: &mut BatchCycle,
) -> ScheduleResult {
    schedule(
        profile,
        state,
        pod,
        snapshot,
        start_index,
        nominated,
        true,
        Some(batch),
    )
}

#[allow(clippy::too_many_arguments)]
fn schedule(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    start_index: &AtomicUsize,
    nominated: &dyn NominatedPods,
    post_filter: bool,
    mut batch: Option<&mut BatchCycle>,
) -> ScheduleResult {
    let unschedulable = |state: &mut CycleState, diagnosis: Diagnosis| {
        ScheduleResult::Unschedulable(if post_filter {
            profile.run_post_filter(state, pod, snapshot, nominated, diagnosis)
        } else {
            diagnosis
        })
    };
    // A member placed in one placement (a topology domain) searches its nodes alone.
    let placement = state.read::<InPlacement>(IN_PLACEMENT).map(|p| p.0.clone());
    let in_placement = |name: &str| placement.as_ref().is_none_or(|p| p.contains(name));
    let num_all = placement.as_ref().map_or(snapshot.len(), |p| p.len());
    if num_all == 0 {
        // No nodes: the nomination ends, as upstream's clearNominatedNode.
        return ScheduleResult::Unschedulable(Diagnosis {
            num_all_nodes: 0,
            nomination: Some(Nomination::Clear),
            ..Default::default()
        });
    }
    let mut diagnosis = Diagnosis {
        num_all_nodes: num_all,
        ..Default::default()
    };
    let started = std::time::Instant::now();
    let pre_filtered = profile.run_pre_filter(state, pod, snapshot, &mut diagnosis);
    let code = match &pre_filtered {
        Ok(_) => Code::Success,
        Err(PreFilterFailure::Error(error)) => error.code,
        Err(PreFilterFailure::Rejected) => diagnosis
            .pre_filter_status
            .as_ref()
            .map_or(Code::Unschedulable, |s| s.code),
    };
    state.record_timing("PreFilter", code, started.elapsed());
    let PreFiltered {
        result: narrowed,
        narrowed_by,
    } = match pre_filtered {
        Ok(done) => done,
        Err(PreFilterFailure::Error(error)) => return ScheduleResult::Error(error),
        Err(PreFilterFailure::Rejected) => return unschedulable(state, diagnosis),
    };

    // A node the pod was nominated to (by preemption) is tried first, alone, as upstream's
    // evaluateNominatedNode: the room made for it is there. A batch's hint (the best node left
    // of the ranking of the previous pod of the same signature), asked before (a nominated pod
    // ends the batch, so there is never both), is tried the same way.
    let reachable = |n: &str| {
        in_placement(n)
            && narrowed
                .node_names
                .as_ref()
                .is_none_or(|names| names.contains(n))
    };
    let hinted = batch
        .as_deref_mut()
        .and_then(|batch| batch.hint(profile, state, pod, snapshot))
        .filter(|(n, _)| reachable(n))
        .map(|(n, score)| (n, Choice::Batched { score }));
    let nominee = nominated_node(&pod.pod)
        .filter(|n| reachable(n))
        .map(|n| (n.to_string(), Choice::Nominated));
    for (name, choice) in nominee.into_iter().chain(hinted) {
        let Some(node) = snapshot.get(&name) else {
            continue;
        };
        let status = profile.run_filters_with_nominated(state, pod, node, nominated, snapshot);
        if status.is_success() {
            profile.record_filter_evaluations(state, 1, &[]);
            if let Some(batch) = batch.as_deref_mut() {
                batch.store(&node.name, None);
            }
            return ScheduleResult::Scheduled {
                node: node.name.clone(),
                evaluated: 1,
                feasible: 1,
                choice,
            };
        }
        profile.record_filter_evaluations(state, 0, &[(node.name.clone(), status)]);
    }

    // Filter.
    let candidates: Vec<&Arc<NodeInfo>> = match &narrowed.node_names {
        Some(names) => {
            diagnosis.absent_nodes_status = Some(left_out_status(&narrowed_by));
            names
                .iter()
                .filter(|n| in_placement(n))
                .filter_map(|n| snapshot.get(n))
                .collect()
        }
        None => snapshot
            .nodes()
            .iter()
            .filter(|n| in_placement(&n.name))
            .collect(),
    };
    if candidates.is_empty() {
        // PreFilter named only nodes that do not exist: every node is absent.
        diagnosis
            .unschedulable_plugins
            .extend(narrowed_by.iter().copied());
        return unschedulable(state, diagnosis);
    }
    let Feasible {
        nodes: feasible,
        rejected,
        evaluated,
    } = find_feasible(
        profile,
        state,
        pod,
        &candidates,
        start_index,
        nominated,
        snapshot,
    );
    profile.record_filter_evaluations(state, feasible.len(), &rejected);
    if feasible.is_empty() {
        // With the plugins PreFilter narrowed the nodes by, as upstream keeps them.
        let mut plugins: Vec<&'static str> = rejected
            .iter()
            .filter_map(|(_, s)| s.plugin)
            .chain(narrowed_by.iter().copied())
            .collect();
        plugins.sort_unstable();
        plugins.dedup();
        if let Some((_, err)) = rejected.iter().find(|(_, s)| s.code == Code::Error) {
            return ScheduleResult::Error(err.clone());
        }
        diagnosis.unschedulable_plugins = plugins;
        diagnosis.node_statuses = rejected;
        return unschedulable(state, diagnosis);
    }
    if feasible.len() == 1 {
        if let Some(batch) = batch.as_deref_mut() {
            batch.store(&feasible[0].name, None);
        }
        return ScheduleResult::Scheduled {
            node: feasible[0].name.clone(),
            evaluated,
            feasible: 1,
            choice: Choice::OnlyFeasible,
        };
    }

    // A member placed for a group's preemption (1.38) is scored among the feasible nodes that
    // cost the fewest victims only.
    let feasible = match state.read::<RankedBy>(NODE_RANKS) {
        Some(RankedBy(ranks)) => ranks.cheapest(feasible),
        None => feasible,
    };

    // PreScore, Score.
    let (scores, raw) = match prioritize_raw(profile, state, pod, &feasible, snapshot, None) {
        Ok(scored) => scored,
        Err(status) => return ScheduleResult::Error(status),
    };
    let node = select_host(&scores);
    let choice = Choice::scored(&node, &scores);
    if let Some(batch) = batch {
        batch.store(
            &node,
            Some(Ranking {
                scores: &scores,
                raw,
            }),
        );
    }
    ScheduleResult::Scheduled {
        node,
        evaluated,
        feasible: feasible.len(),
        choice,
    }
}

/// What the Filter search found: the feasible nodes, the rejections (node and status), and how
/// many nodes were evaluated.
pub struct Feasible {
    pub nodes: Vec<Arc<NodeInfo>>,
    pub rejected: Vec<(String, Status)>,
    pub evaluated: usize,
}

/// How many nodes a Filter worker takes at a time (kube-scheduler's `chunkSizeFor`): the square
/// root of the nodes, at most an even share per worker, at least one.
pub fn chunk_size_for(n: usize, parallelism: usize) -> usize {
    let root = n.isqrt();
    let share = n / parallelism.max(1) + 1;
    root.min(share).max(1)
}

/// Filters nodes from `start_index` round-robin until enough feasible nodes are found, as
/// kube-scheduler's findNodesThatPassFilters: the workers take chunks of the window in order
/// from a shared counter ([`chunk_size_for`]), each node is checked in turn, and once the
/// feasible nodes number [`num_feasible_nodes_to_find`] (one when the profile scores nothing)
/// no further node is checked. The start then moves on by the nodes processed: the feasible
/// ones kept and the rejected. How many is counted over `candidates`, the nodes PreFilter left;
/// the start index wraps at the number of nodes of `snapshot`.
fn find_feasible(
    profile: &CompiledProfile,
    state: &CycleState,
    pod: &PodInfo,
    candidates: &[&Arc<NodeInfo>],
    start_index: &AtomicUsize,
    nominated: &dyn NominatedPods,
    snapshot: &Snapshot,
) -> Feasible {
    let num_all = snapshot.len();
    let nominated = nominated.any().then_some(nominated);
    let n = candidates.len();
    // Counted over the nodes PreFilter left, as upstream's findNodesThatPassFilters.
    let want = if profile.score.is_empty() {
        1
    } else {
        num_feasible_nodes_to_find(profile.percentage_of_nodes_to_score, n).min(n)
    };
    let next_start = start_index.load(Ordering::Relaxed);
    let start = next_start % n.max(1);
    let workers = rayon::current_num_threads().max(1);
    let chunk = chunk_size_for(n, workers);
    let chunks = n.div_ceil(chunk);
    let next_chunk = AtomicUsize::new(0);
    let found = AtomicUsize::new(0);
    let stop = std::sync::atomic::AtomicBool::new(false);
    let checked: Vec<Vec<(usize, Option<Status>)>> = (0..workers.min(chunks))
        .into_par_iter()
        .map(|_| {
            let mut mine = Vec::new();
            loop {
                let c = next_chunk.fetch_add(1, Ordering::Relaxed);
                if c >= chunks {
                    return mine;
                }
                for i in c * chunk..((c + 1) * chunk).min(n) {
                    if stop.load(Ordering::Relaxed) {
                        return mine;
                    }
                    let node = candidates[(start + i) % n];
                    let status = match nominated {
                        None => profile.run_filter(state, pod, node),
                        Some(nominated) => profile
                            .run_filters_with_nominated(state, pod, node, nominated, snapshot),
                    };
                    if status.is_success() {
                        if found.fetch_add(1, Ordering::Relaxed) >= want {
                            // One too many: upstream cancels the search and drops it.
                            found.fetch_sub(1, Ordering::Relaxed);
                            stop.store(true, Ordering::Relaxed);
                            return mine;
                        }
                        mine.push((i, None));
                    } else {
                        if status.code == Code::Error {
                            stop.store(true, Ordering::Relaxed);
                        }
                        mine.push((i, Some(status)));
                    }
                }
            }
        })
        .collect();
    let mut results: Vec<(usize, Option<Status>)> = checked.into_iter().flatten().collect();
    // In window order, whichever worker checked them (the order of completion upstream; the
    // host is drawn at random among the best either way).
    results.sort_unstable_by_key(|(i, _)| *i);
    let evaluated = results.len();
    // As upstream's nextStartNodeIndex: advanced by the nodes processed, modulo all nodes.
    start_index.store((next_start + evaluated) % num_all.max(1), Ordering::Relaxed);
    let mut nodes = Vec::with_capacity(want);
    let mut rejected = Vec::new();
    for (i, status) in results {
        let node = candidates[(start + i) % n];
        match status {
            None => nodes.push(Arc::clone(node)),
            Some(s) => rejected.push((node.name.clone(), s)),
        }
    }
    Feasible {
        nodes,
        rejected,
        evaluated,
    }
}

/// PreScore, Score (parallel over nodes), NormalizeScore and weights, timed as extension
/// points: the total per node. `detail`, when given, receives each Score plugin's scores
/// (`tether explain`).
pub fn prioritize(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    snapshot: &Snapshot,
    detail: Option<&mut Vec<PluginScores>>,
) -> Result<Vec<NodeScore>, Status> {
    prioritize_raw(profile, state, pod, nodes, snapshot, detail).map(|(scores, _)| scores)
}

/// [`prioritize`], with each node's raw scores (what batching keeps).
pub fn prioritize_raw(
    profile: &CompiledProfile,
    state: &mut CycleState,
    pod: &PodInfo,
    nodes: &[Arc<NodeInfo>],
    snapshot: &Snapshot,
    detail: Option<&mut Vec<PluginScores>>,
) -> Result<(Vec<NodeScore>, RawScores), Status> {
    let started = std::time::Instant::now();
    let status = profile.run_pre_score(state, pod, nodes, snapshot);
    state.record_timing("PreScore", status.code, started.elapsed());
    if !status.is_success() {
        return Err(status);
    }
    let started = std::time::Instant::now();
    let scored = profile.raw_scores(state, pod, nodes).and_then(|raw| {
        let mut scores: Vec<NodeScore> = nodes
            .iter()
            .map(|n| NodeScore {
                name: n.name.clone(),
                score: 0,
            })
            .collect();
        profile.combine_scores(state, pod, &mut scores, &raw, detail)?;
        Ok((scores, raw))
    });
    let code = scored.as_ref().map_or_else(|s| s.code, |_| Code::Success);
    state.record_timing("Score", code, started.elapsed());
    profile.record_score_evaluations(state, nodes.len());
    scored
}

/// The node with the highest total; ties broken uniformly at random (reservoir sampling),
/// as kube-scheduler's selectHost.
pub fn select_host(scores: &[NodeScore]) -> String {
    let mut rng = rand::rng();
    let mut best: Option<&NodeScore> = None;
    let mut ties = 0u32;
    for s in scores {
        match best {
            Some(b) if s.score < b.score => {}
            Some(b) if s.score == b.score => {
                ties += 1;
                if rng.random_range(0..ties) == 0 {
                    best = Some(s);
                }
            }
            _ => {
                best = Some(s);
                ties = 1;
            }
        }
    }
    best.map(|b| b.name.clone()).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::NoNominations;
    use crate::scheduler::plugins::handle::Handle;
    use crate::scheduler::profile::default_profile;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

    #[test]
    fn feasible_nodes_to_find_is_adaptive_as_kube_scheduler() {
        assert_eq!(
            num_feasible_nodes_to_find(0, 50),
            50,
            "small clusters: every node"
        );
        assert_eq!(
            num_feasible_nodes_to_find(0, 5000),
            5000 * 10 / 100,
            "50% - 5000/125 = 10%"
        );
        assert_eq!(
            num_feasible_nodes_to_find(0, 100_000),
            5000,
            "never under 5%"
        );
        assert_eq!(num_feasible_nodes_to_find(30, 1000), 300);
        assert_eq!(
            num_feasible_nodes_to_find(1, 1000),
            100,
            "never under 100 nodes"
        );
        assert_eq!(num_feasible_nodes_to_find(100, 1000), 1000);
    }

    #[test]
    fn feasible_nodes_are_counted_over_the_nodes_prefilter_left() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let snap = snapshot(
            (0..300)
                .map(|i| NodeBuilder::new(&format!("n{i:03}")))
                .collect(),
            vec![],
        );
        let names: Vec<String> = (0..150).map(|i| format!("n{i:03}")).collect();
        let pod = PodBuilder::new("p")
            .with(|p| {
                p.spec.get_or_insert_with(Default::default).affinity = serde_json::from_value(
                    // One term per node: a field requirement takes exactly one value.
                    serde_json::json!({"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution":
                        {"nodeSelectorTerms": names.iter().map(|n| serde_json::json!({"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": [n]}]})).collect::<Vec<_>>()}}}),
                )
                .ok();
            })
            .info();
        let mut state = CycleState::new();
        match schedule_pod(
            &profile,
            &mut state,
            &pod,
            &snap,
            &AtomicUsize::new(0),
            &NoNominations,
        ) {
            ScheduleResult::Scheduled { feasible, .. } => assert_eq!(
                feasible,
                num_feasible_nodes_to_find(0, 150),
                "150 nodes after PreFilter: 100 to find, not 300's 144"
            ),
            other => panic!("want a node, got {other:?}"),
        }
    }

    /// The feasible nodes (in window order) and the next start of one Filter search of `pod`
    /// over `nodes` from `start`, on `threads` workers.
    fn search(
        profile: &CompiledProfile,
        nodes: &Snapshot,
        start: usize,
        threads: usize,
    ) -> (Vec<String>, usize, usize) {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(threads)
            .build()
            .expect("a pool");
        let pod = PodBuilder::new("p").info();
        let candidates: Vec<&Arc<NodeInfo>> = nodes.nodes().iter().collect();
        let start_index = AtomicUsize::new(start);
        let mut state = CycleState::new();
        let mut diagnosis = Diagnosis::default();
        assert!(
            profile
                .run_pre_filter(&mut state, &pod, nodes, &mut diagnosis)
                .is_ok()
        );
        let found = pool.install(|| {
            find_feasible(
                profile,
                &state,
                &pod,
                &candidates,
                &start_index,
                &NoNominations,
                nodes,
            )
        });
        let names = found.nodes.iter().map(|n| n.name.clone()).collect();
        (names, found.evaluated, start_index.load(Ordering::Relaxed))
    }

    /// As kube-scheduler's findNodesThatPassFilters with one worker: the nodes checked are one
    /// window from the start, up to the feasible nodes wanted; the next search starts where this
    /// one stopped (rejected nodes count as processed), wrapping round.
    #[test]
    fn the_filter_search_checks_one_window_and_moves_on_by_what_it_processed() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let nodes = snapshot(
            (0..300)
                .map(|i| {
                    let node = NodeBuilder::new(&format!("n{i:03}"));
                    if i < 50 {
                        node.taint("dedicated", "gpu", "NoSchedule")
                    } else {
                        node
                    }
                })
                .collect(),
            vec![],
        );
        let want = num_feasible_nodes_to_find(0, 300);
        assert_eq!(want, 144);
        let name = |i: usize| format!("n{:03}", i % 300);
        let (found, evaluated, next) = search(&profile, &nodes, 0, 1);
        assert_eq!(found, (50..194).map(name).collect::<Vec<_>>());
        assert_eq!(
            (evaluated, next),
            (194, 194),
            "50 rejected and 144 feasible"
        );
        let (found, _, next) = search(&profile, &nodes, 194, 1);
        assert_eq!(
            found,
            (194..300).chain(50..88).map(name).collect::<Vec<_>>(),
            "round the end and past the tainted nodes"
        );
        assert_eq!(next, (194 + 106 + 50 + 38) % 300);
    }

    /// With several workers the nodes checked still form one window from the start (chunks
    /// taken in order), give or take the chunks in flight when enough were found: never nodes
    /// from across the cluster.
    #[test]
    fn several_workers_check_one_window_not_slices_of_the_whole() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let nodes = snapshot(
            (0..1000)
                .map(|i| NodeBuilder::new(&format!("n{i:04}")))
                .collect(),
            vec![],
        );
        let want = num_feasible_nodes_to_find(0, 1000);
        let threads = 4;
        let reach = want + threads * chunk_size_for(1000, threads);
        for _ in 0..20 {
            let (found, evaluated, next) = search(&profile, &nodes, 0, threads);
            assert_eq!(found.len(), want);
            assert_eq!(
                (evaluated, next),
                (want, want),
                "only the feasible kept count"
            );
            for name in &found {
                let i: usize = name[1..].parse().expect("index");
                assert!(i < reach, "{name} is outside the window of {reach}");
            }
        }
    }

    /// A profile with no Score plugin takes the first feasible node, as upstream.
    #[test]
    fn without_score_plugins_the_first_feasible_node_is_enough() {
        let mut profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        profile.score.clear();
        let nodes = snapshot(
            (0..10)
                .map(|i| NodeBuilder::new(&format!("n{i}")))
                .collect(),
            vec![],
        );
        let (found, evaluated, next) = search(&profile, &nodes, 3, 1);
        assert_eq!((found, evaluated, next), (vec!["n3".to_string()], 1, 4));
    }

    #[test]
    fn chunks_are_sized_as_kube_schedulers() {
        assert_eq!(chunk_size_for(1000, 16), 31, "the square root");
        assert_eq!(chunk_size_for(100, 16), 7, "an even share, plus one");
        assert_eq!(chunk_size_for(0, 16), 1);
        assert_eq!(chunk_size_for(5, 1), 2);
    }

    #[test]
    fn the_default_profile_places_a_pod_only_where_it_fits() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let snap = snapshot(
            vec![
                NodeBuilder::new("small").allocatable("cpu", "1"),
                NodeBuilder::new("tainted").taint("dedicated", "gpu", "NoSchedule"),
                NodeBuilder::new("fits"),
            ],
            vec![],
        );
        let pod = PodBuilder::new("p").req_cpu("2").info();
        let start = AtomicUsize::new(0);
        for _ in 0..20 {
            let mut state = CycleState::new();
            match schedule_pod(&profile, &mut state, &pod, &snap, &start, &NoNominations) {
                ScheduleResult::Scheduled { node, .. } => assert_eq!(node, "fits"),
                other => panic!("want fits, got {other:?}"),
            }
        }
        let huge = PodBuilder::new("h").req_cpu("64").info();
        let mut state = CycleState::new();
        match schedule_pod(&profile, &mut state, &huge, &snap, &start, &NoNominations) {
            ScheduleResult::Unschedulable(d) => {
                assert_eq!(
                    d.message(),
                    "0/3 nodes are available: 1 node(s) had untolerated taint(s), 2 Insufficient cpu. \
                     preemption: 0/3 nodes are available: 3 Preemption is not helpful for scheduling.",
                    "\"count reason\" strings sorted as strings, as upstream's FitError; \
                     DefaultPreemption's words after them"
                )
            }
            other => panic!("want unschedulable, got {other:?}"),
        }
    }

    /// `scheduler_plugin_evaluation_total`'s counts of one search, as kube-scheduler's
    /// instrumented plugins count them: each Filter plugin on every node that reached it (a
    /// rejection ends a node's filtering), each Score plugin on every feasible node.
    #[test]
    fn plugin_evaluations_count_each_node_that_reached_the_plugin() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let snap = snapshot(
            vec![
                NodeBuilder::new("small").allocatable("cpu", "1"),
                NodeBuilder::new("tainted").taint("dedicated", "gpu", "NoSchedule"),
                NodeBuilder::new("fits"),
                NodeBuilder::new("fits-too"),
            ],
            vec![],
        );
        let pod = PodBuilder::new("p").req_cpu("2").info();
        let mut state = CycleState::new();
        let start = AtomicUsize::new(0);
        let result = schedule_pod(&profile, &mut state, &pod, &snap, &start, &NoNominations);
        assert!(matches!(result, ScheduleResult::Scheduled { .. }));
        let runs: std::collections::BTreeMap<(&str, &str), u64> = state
            .take_evaluations()
            .into_iter()
            .map(|(point, plugin, n)| ((point, plugin), n))
            .collect();
        let filters: Vec<&str> = profile
            .filter
            .iter()
            .filter(|p| p.filter().is_some())
            .map(|p| p.name())
            .collect();
        let at = |name: &str| filters.iter().position(|p| *p == name).expect("a filter");
        let (taints, fit) = (at("TaintToleration"), at("NodeResourcesFit"));
        for (i, plugin) in filters.iter().enumerate() {
            // A plugin whose PreFilter skipped the pod does not filter it (NodeAffinity for a
            // pod without affinity), as upstream; the others: four nodes start, the tainted one
            // stops at TaintToleration, the small one at NodeResourcesFit, two pass them all.
            if state.skips_filter(plugin) {
                assert_eq!(runs.get(&("Filter", *plugin)), None, "{plugin} skipped");
                continue;
            }
            let mut want = 4;
            if i > taints {
                want -= 1;
            }
            if i > fit {
                want -= 1;
            }
            assert_eq!(
                runs.get(&("Filter", *plugin)).copied().unwrap_or(0),
                want,
                "{plugin}"
            );
        }
        assert_eq!(runs.get(&("Score", "NodeResourcesFit")), Some(&2));
        assert_eq!(runs.get(&("PreFilter", "NodeResourcesFit")), Some(&1));
    }

    #[test]
    fn ties_are_broken_at_random_among_the_best() {
        let scores: Vec<NodeScore> = ["a", "b", "c"]
            .iter()
            .map(|n| NodeScore {
                name: n.to_string(),
                score: if *n == "c" { 1 } else { 5 },
            })
            .collect();
        let picks: std::collections::BTreeSet<String> =
            (0..200).map(|_| select_host(&scores)).collect();
        assert_eq!(picks.into_iter().collect::<Vec<_>>(), ["a", "b"]);
    }

    /// Pods nominated to a node, in the given priority, answering for every node.
    struct Nominated(Vec<(String, Arc<PodInfo>)>);

    impl NominatedPods for Nominated {
        fn any(&self) -> bool {
            !self.0.is_empty()
        }
        fn for_node(&self, node: &str) -> Vec<Arc<PodInfo>> {
            self.0
                .iter()
                .filter(|(n, _)| n == node)
                .map(|(_, p)| p.clone())
                .collect()
        }
        fn node_of(&self, uid: &str) -> Option<String> {
            self.0
                .iter()
                .find(|(_, p)| p.uid() == uid)
                .map(|(n, _)| n.clone())
        }
    }

    /// The room preemption made for a nominated pod is kept for it: a pod of lower or equal
    /// priority goes elsewhere, a pod of higher priority may take it, and the nominated pod
    /// itself is tried on its node first.
    #[test]
    fn a_nominated_pod_keeps_its_room_from_pods_of_lower_priority() {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let snap = snapshot(
            vec![NodeBuilder::new("room").allocatable("cpu", "2")],
            vec![],
        );
        let vip = Arc::new(
            PodBuilder::new("vip")
                .req_cpu("2")
                .priority(1000)
                .with(|p| {
                    p.status.get_or_insert_default().nominated_node_name = Some("room".into());
                })
                .info(),
        );
        let nominated = Nominated(vec![("room".into(), vip.clone())]);
        let place = |pod: &PodInfo| {
            let mut state = CycleState::new();
            match schedule_pod(
                &profile,
                &mut state,
                pod,
                &snap,
                &AtomicUsize::new(0),
                &nominated,
            ) {
                ScheduleResult::Scheduled { node, .. } => Ok(node),
                ScheduleResult::Unschedulable(d) => Err(d.message()),
                other => panic!("unexpected {other:?}"),
            }
        };
        let low = PodBuilder::new("low").req_cpu("1").priority(10).info();
        let told = place(&low).expect_err("a lower-priority pod leaves the room alone");
        assert!(
            told.starts_with("0/1 nodes are available: 1 Insufficient cpu."),
            "{told}"
        );
        assert_eq!(
            place(&vip).as_deref(),
            Ok("room"),
            "the nominated pod itself fits"
        );
        let boss = PodBuilder::new("boss").req_cpu("2").priority(2000).info();
        assert_eq!(
            place(&boss).as_deref(),
            Ok("room"),
            "a higher priority may take it"
        );
    }
}
