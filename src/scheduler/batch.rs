//! Opportunistic batching, as kube-scheduler's OpportunisticBatch (beta and on since 1.35):
//! when pods of one signature come one after another, the ranking of the nodes computed for
//! the first is reused for the next instead of filtering and scoring every node again.
//!
//! A cycle that scored its feasible nodes keeps them, best first, with their raw scores
//! ([`Batch`]). The profile's next cycle, if it comes right after (no other pod or group was
//! taken from the queue in between: [`BatchSlot`] counts the cycles), serves the same profile, its pod is not nominated, has the same signature
//! ([`crate::scheduler::framework::signature`]) and the ranking is at most
//! [`MAX_BATCH_AGE`] old, takes a hint from it: the node the previous pod went to (the one node
//! that changed) is filtered again and, when the pod still fits, rescored (PreScore over the
//! kept nodes and it, its raw scores) and put back among the others; every kept node is
//! normalized again; the best node then is the hint. The hint is filtered like a nominated
//! node and, when the pod fits, taken without a search; the ranking then serves the next pod.
//! When it does not fit, the pod is searched for as ever and its own ranking is kept.
//!
//! So, where the kept nodes did not change otherwise, a batched pod goes to a node a full
//! search of the same nodes scores best (`batch_tests.rs` checks it cycle by cycle). One
//! difference from upstream makes that hold: when the previous pod's node no longer fits,
//! upstream keeps the others' totals as they were, normalized with a node that is gone;
//! tether normalizes them again. A node that changed in other ways (another scheduler's pod, a
//! pod deleted) keeps its score for up to [`MAX_BATCH_AGE`], as upstream's; feasibility never
//! goes stale, since the hint is filtered before it is taken. Ties are broken at random, as
//! tether breaks them without batching.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use rand::Rng;

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime::{RawScores, nominated_node};
use crate::scheduler::framework::signature::Signature;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{Code, CycleState, NodeScore};
pub use crate::scheduler::metrics::cycle::{BatchOutcome, FlushReason};

/// How long a ranking serves (kube-scheduler's DefaultMaxBatchAge).
pub const MAX_BATCH_AGE: Duration = Duration::from_millis(500);

/// The signature of `pod` under `profile`: `None` when a plugin the profile runs at PreFilter,
/// Filter, PreScore or Score does not sign pods, or cannot sign this one.
pub fn sign(profile: &CompiledProfile, pod: &PodInfo) -> Option<Signature> {
    let mut signature = Signature::new(&profile.scheduler_name);
    let mut seen: Vec<&'static str> = Vec::new();
    let plugins = profile
        .pre_filter
        .iter()
        .chain(&profile.filter)
        .chain(&profile.pre_score)
        .chain(profile.score.iter().map(|w| &w.plugin));
    for plugin in plugins {
        if seen.contains(&plugin.name()) {
            continue;
        }
        seen.push(plugin.name());
        if !plugin.signs_pods() || !plugin.sign_pod(pod, &mut signature) {
            return None;
        }
    }
    Some(signature)
}

/// One kept node: its name, total, a random tie-break and its raw scores.
#[derive(Debug)]
struct Ranked {
    name: String,
    total: i64,
    tie: u64,
    raw: Box<[i64]>,
}

/// A ranking kept from a cycle for the next pods of its signature.
#[derive(Debug)]
pub struct Batch {
    /// The profile that ranked (compared by identity: a profile changed since is another).
    profile: Weak<CompiledProfile>,
    signature: Signature,
    created: Instant,
    /// Where the last pod of the batch went, and in which cycle.
    chosen: String,
    last_cycle: u64,
    /// The Score plugins that ran (their index in the profile), in the order of `raw`.
    plugins: Vec<usize>,
    /// The nodes left, worst first: the best is popped.
    ranked: Vec<Ranked>,
}

/// The rankings kept between cycles, one per profile (by scheduler name), and the count of
/// cycles (upstream's scheduling cycle: every pod or group taken from the queue is one), by
/// which a ranking serves only the cycle right after the one that kept it.
#[derive(Debug, Default)]
pub struct BatchSlot {
    kept: Mutex<HashMap<String, Batch>>,
    cycles: AtomicU64,
}

impl BatchSlot {
    /// Counts a cycle begun; its number.
    pub fn next_cycle(&self) -> u64 {
        self.cycles.fetch_add(1, Ordering::Relaxed) + 1
    }
    /// The ranking `scheduler_name`'s profile kept, taken for this cycle.
    pub fn take(&self, scheduler_name: &str) -> Option<Batch> {
        crate::locks::lock(&self.kept).remove(scheduler_name)
    }
    /// Keeps `batch` for `scheduler_name`'s next cycle; forgets the rankings of profiles gone.
    pub fn put(&self, scheduler_name: &str, batch: Option<Batch>) {
        let mut kept = crate::locks::lock(&self.kept);
        kept.retain(|_, b| b.profile.strong_count() > 0);
        if let Some(batch) = batch {
            kept.insert(scheduler_name.to_string(), batch);
        }
    }
}

/// One cycle's batching: the ranking kept from the previous cycle, the pod's signature, the
/// hint given and what happened.
pub struct BatchCycle {
    profile: Weak<CompiledProfile>,
    cycle: u64,
    kept: Option<Batch>,
    signature: Option<Signature>,
    hint: Option<String>,
    pub outcome: BatchOutcome,
}

/// The ranking of a scored cycle, for [`BatchCycle::store`]: each scored node's total and raw
/// scores.
pub struct Ranking<'a> {
    pub scores: &'a [NodeScore],
    pub raw: RawScores,
}

impl BatchCycle {
    /// Cycle number `cycle`, of `pod` under `profile`, with the ranking the profile kept.
    pub fn new(
        kept: Option<Batch>,
        cycle: u64,
        profile: &Arc<CompiledProfile>,
        pod: &PodInfo,
    ) -> Self {
        BatchCycle {
            profile: Arc::downgrade(profile),
            cycle,
            kept,
            signature: sign(profile, pod),
            hint: None,
            outcome: BatchOutcome::default(),
        }
    }

    /// The hint, asked after PreFilter (kube-scheduler's GetNodeHint): the best node of the
    /// kept ranking, with the previous pod's node filtered and rescored first. `None`, and the
    /// ranking dropped, when it cannot serve this pod.
    pub fn hint(
        &mut self,
        profile: &CompiledProfile,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Option<(String, i64)> {
        let hint = self.take_hint(profile, state, pod, snapshot);
        self.outcome.attempt = hint.is_none().then_some("no_hint");
        if let Some((node, _)) = &hint {
            self.hint = Some(node.clone());
        }
        hint
    }

    fn take_hint(
        &mut self,
        profile: &CompiledProfile,
        state: &CycleState,
        pod: &PodInfo,
        snapshot: &Snapshot,
    ) -> Option<(String, i64)> {
        let mut kept = self.kept.take().filter(|k| !k.ranked.is_empty())?;
        let flush = |outcome: &mut BatchOutcome, reason| {
            outcome.flushed = Some(reason);
            None
        };
        if kept.profile.as_ptr() != self.profile.as_ptr() {
            // The profile changed since: its ranking is another profile's, as upstream drops
            // a framework's batch with it.
            return None;
        }
        if kept.last_cycle.checked_add(1) != Some(self.cycle) {
            return flush(&mut self.outcome, "pod_skipped");
        }
        if nominated_node(&pod.pod).is_some() {
            return flush(&mut self.outcome, "pod_nominated");
        }
        if self.signature.as_ref() != Some(&kept.signature) {
            return flush(&mut self.outcome, "pod_incompatible");
        }
        if kept.created.elapsed() > MAX_BATCH_AGE {
            return flush(&mut self.outcome, "expired");
        }
        let Some(last) = snapshot.get(&kept.chosen) else {
            return flush(&mut self.outcome, "node_missing");
        };
        // Filtered as upstream's refreshHintCandidates does, without the nominated pods: the
        // hint itself is checked with them before it is taken.
        let status = profile.run_filter(state, pod, last);
        if !status.is_success() && status.code == Code::Error {
            return flush(&mut self.outcome, "filter_error");
        }
        let fits = status.is_success().then_some(last);
        self.outcome.rescored = fits.is_some();
        if let Err(reason) = rescore(&mut kept, profile, state, pod, snapshot, fits) {
            return flush(&mut self.outcome, reason);
        }
        let best = kept.ranked.pop()?;
        self.kept = Some(kept);
        Some((best.name, best.total))
    }

    /// Records where the pod goes (kube-scheduler's StoreScheduleResults): when it is the hint,
    /// the ranking serves on; otherwise `ranking` (the nodes scored, `chosen` among them) is
    /// kept, or nothing when the pod was not scored or has no signature.
    pub fn store(&mut self, chosen: &str, ranking: Option<Ranking>) {
        if self.hint.as_deref() == Some(chosen) {
            self.outcome.attempt = Some("hint_used");
            if let Some(kept) = &mut self.kept {
                kept.chosen = chosen.to_string();
                kept.last_cycle = self.cycle;
            }
            return;
        }
        if self.hint.is_some() {
            self.outcome.attempt = Some("hint_not_used");
        }
        self.kept = None;
        let Some(signature) = self.signature.clone() else {
            self.outcome.stored = Some("pod_not_batchable");
            return;
        };
        self.outcome.stored = Some("empty_list");
        let Some(ranking) = ranking else {
            return;
        };
        let mut rng = rand::rng();
        let mut ranked: Vec<Ranked> = ranking
            .scores
            .iter()
            .enumerate()
            .filter(|(_, s)| s.name != chosen)
            .map(|(n, s)| Ranked {
                name: s.name.clone(),
                total: s.score,
                tie: rng.random(),
                raw: ranking.raw.row(n).into(),
            })
            .collect();
        if ranked.is_empty() {
            return;
        }
        ranked.sort_unstable_by_key(|r| (r.total, r.tie));
        self.outcome.stored = Some("stored");
        self.kept = Some(Batch {
            profile: self.profile.clone(),
            signature,
            created: Instant::now(),
            chosen: chosen.to_string(),
            last_cycle: self.cycle,
            plugins: ranking.raw.plugins,
            ranked,
        });
    }

    /// The ranking for the profile's next cycle: the one this cycle stored, or the one it was
    /// given (with its hint taken, if it took one) when it stored none; it serves only the
    /// cycle after the one that stored it.
    pub fn into_kept(self) -> Option<Batch> {
        self.kept
    }
}

/// Puts `last` (the previous pod's node) back among the kept nodes with fresh scores when
/// the pod still fits it (kube-scheduler's rescoreHintedNode): PreScore over them all on a copy
/// of the cycle state, `last`'s raw scores, every total normalized again. When the pod no longer
/// fits it (`None`), the kept nodes are normalized again without it, where upstream keeps their
/// totals as they were: a plugin that normalizes by the best raw score (NodeAffinity,
/// TaintToleration) would otherwise keep counting a node that is gone, and rank the rest as no
/// search would. The reason to drop the ranking when a step fails.
fn rescore(
    kept: &mut Batch,
    profile: &CompiledProfile,
    state: &CycleState,
    pod: &PodInfo,
    snapshot: &Snapshot,
    last: Option<&Arc<NodeInfo>>,
) -> Result<(), FlushReason> {
    // The node may be in the ranking already (a hint the pod did not take): it is rescored.
    kept.ranked
        .retain(|r| Some(&r.name) != last.map(|l| &l.name));
    if kept.ranked.is_empty() && last.is_none() {
        return Ok(());
    }
    let mut nodes: Vec<Arc<NodeInfo>> = Vec::with_capacity(kept.ranked.len() + 1);
    for r in &kept.ranked {
        nodes.push(Arc::clone(snapshot.get(&r.name).ok_or("node_missing")?));
    }
    nodes.extend(last.cloned());
    let mut rescore_state = state.clone();
    let status = profile.run_pre_score(&mut rescore_state, pod, &nodes, snapshot);
    if !status.is_success() {
        return Err("prescore_error");
    }
    let fresh = match last {
        Some(last) => Some(
            profile
                .raw_scores(&rescore_state, pod, std::slice::from_ref(last))
                .map_err(|_| "rescore_error")?,
        ),
        None => None,
    };
    if fresh.as_ref().is_some_and(|f| f.plugins != kept.plugins) {
        return Err("rescore_error");
    }
    let mut raw = RawScores {
        plugins: kept.plugins.clone(),
        raw: Vec::with_capacity(nodes.len() * kept.plugins.len()),
    };
    for r in &kept.ranked {
        raw.raw.extend_from_slice(&r.raw);
    }
    if let Some(fresh) = &fresh {
        raw.raw.extend_from_slice(&fresh.raw);
    }
    // The names move into the scores and back: nothing is copied.
    let mut scores: Vec<NodeScore> = kept
        .ranked
        .iter_mut()
        .map(|r| NodeScore {
            name: std::mem::take(&mut r.name),
            score: 0,
        })
        .collect();
    scores.extend(last.map(|l| NodeScore {
        name: l.name.clone(),
        score: 0,
    }));
    profile
        .combine_scores(&rescore_state, pod, &mut scores, &raw, None)
        .map_err(|_| "normalize_error")?;
    let mut scores = scores.into_iter();
    for (r, s) in kept.ranked.iter_mut().zip(scores.by_ref()) {
        r.name = s.name;
        r.total = s.score;
    }
    if let (Some(s), Some(fresh)) = (scores.next(), fresh) {
        kept.ranked.push(Ranked {
            name: s.name,
            total: s.score,
            tie: rand::rng().random(),
            raw: fresh.raw.into_boxed_slice(),
        });
    }
    kept.ranked.sort_unstable_by_key(|r| (r.total, r.tie));
    Ok(())
}

#[cfg(test)]
#[path = "batch_tests.rs"]
mod tests;
