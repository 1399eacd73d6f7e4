//! `tether simulate`: what a SchedulingProfile change would do before it merges. The candidates
//! (one or more profiles, new or changed) are judged as the profile controller judges them (the same compiler, the same conflict and
//! QueueSort rules, the same words); then the pending pods of its schedulerName, and the last
//! bound ones if asked, are placed by the live profile and by the candidate on the same
//! snapshot, and every placement that differs is reported with the plugins that made it
//! differ. Nothing is written anywhere.
//!
//! Pending pods are placed one after another in the queue's order (priority, then age; pods
//! held by scheduling gates after the others), each counted on its node for the next, as the
//! scheduler would place them; bound pods are each
//! placed alone, on the cluster without them. Ties go to the first node by name (the scheduler
//! picks one of the tied nodes at random; `tied` lists them). Like `tether explain`, every node
//! is filtered; neither preemption nor history written by these placements is simulated.

pub mod cluster;
pub mod render;

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

pub use self::cluster::ClusterState;
use crate::api::SchedulingProfile;
use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::scheduler::explain::{self, Explanation};
use crate::scheduler::framework::NoNominations;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::runtime;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::informers::pod_groups::composite::{CompositeKey, Member, Tree};
use crate::scheduler::informers::pod_groups::{self, GroupKey, PodGroupIndex};
use crate::scheduler::profile::set::{ProfileSet, Verdict};

/// What a simulation found.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Simulation {
    /// The candidate SchedulingProfile's name.
    pub profile: String,
    pub scheduler_name: String,
    /// The profile serving the schedulerName now, if one does.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub live_profile: Option<String>,
    pub nodes: usize,
    /// The pending pods, in the order they were placed.
    pub pending: Vec<Placement>,
    /// The bound pods replayed (`--replay-bound`), newest first.
    #[serde(default)]
    pub bound: Vec<Placement>,
}

impl Simulation {
    /// How many placements differ.
    pub fn changes(&self) -> usize {
        self.pending
            .iter()
            .chain(&self.bound)
            .filter(|p| p.differs)
            .count()
    }
}

/// One pod, placed by the live profile and by the candidate.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Placement {
    /// namespace/name.
    pub pod: String,
    /// A pending pod held back by scheduling gates: placed as it would be once they are gone.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub gated: bool,
    /// A bound pod's node now.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub bound_to: Option<String>,
    pub live: Decision,
    pub candidate: Decision,
    pub differs: bool,
    /// Why the candidate decides otherwise, plugin by plugin.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub why: Vec<String>,
}

/// Where a profile places a pod.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Decision {
    /// None: no node fits (`message` says why), or no profile serves the pod.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub total: Option<i64>,
    /// The nodes tied at the best total, when several are.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub tied: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub message: Option<String>,
}

/// Why the candidate does not serve: the controller's `Ready=False` reason and message.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
#[error("SchedulingProfile {name}: Ready=False {reason}: {message}")]
pub struct Rejected {
    pub name: String,
    pub reason: String,
    pub message: String,
}

/// A candidate that would serve: its compiled version, and the profile serving its
/// schedulerName now.
struct Judged {
    name: String,
    compiled: Arc<CompiledProfile>,
    live: Option<Arc<CompiledProfile>>,
}

/// Judges `candidates` against the cluster's profiles as the controller would, all of them
/// at once (each takes the place of the profile of its name: the same object, one generation
/// on; a new one is the youngest). Every candidate that would not serve is refused.
fn judge(
    cluster: &ClusterState,
    candidates: &[SchedulingProfile],
    handle: &crate::scheduler::plugins::handle::Handle,
) -> Result<Vec<Judged>, Vec<Rejected>> {
    let live: Vec<Arc<SchedulingProfile>> = cluster
        .scheduling_profiles
        .iter()
        .cloned()
        .map(Arc::new)
        .collect();
    // One set for both decisions, as the controller keeps one: the live profiles compile once,
    // and a candidate that breaks a serving profile is told that the last good version keeps
    // serving, as the controller tells it.
    let mut profiles = ProfileSet::default();
    let serving_now = profiles.decide(&live, handle).serving;
    let name_of = |p: &SchedulingProfile| p.metadata.name.clone().unwrap_or_default();
    let mut refused: Vec<Rejected> = Vec::new();
    let mut seen = std::collections::HashSet::new();
    for candidate in candidates {
        let name = name_of(candidate);
        if name.is_empty() || !seen.insert(name.clone()) {
            refused.push(Rejected {
                message: if name.is_empty() {
                    "metadata.name: a SchedulingProfile needs a name".into()
                } else {
                    "metadata.name: given twice".into()
                },
                name,
                reason: "InvalidSpec".into(),
            });
        }
    }
    if !refused.is_empty() {
        return Err(refused);
    }
    let now = k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(jiff::Timestamp::now());
    let mut next: Vec<Arc<SchedulingProfile>> = live
        .iter()
        .filter(|p| !seen.contains(&name_of(p)))
        .cloned()
        .collect();
    for candidate in candidates {
        let name = name_of(candidate);
        let existing = live.iter().find(|p| name_of(p) == name);
        let mut changed = candidate.clone();
        changed.metadata.uid = existing
            .and_then(|p| p.metadata.uid.clone())
            .or_else(|| Some(format!("simulated-{name}")));
        changed.metadata.generation =
            Some(existing.and_then(|p| p.metadata.generation).unwrap_or(0) + 1);
        changed.metadata.creation_timestamp = existing
            .and_then(|p| p.metadata.creation_timestamp.clone())
            .or_else(|| Some(now.clone()));
        changed.metadata.deletion_timestamp = None;
        next.push(Arc::new(changed));
    }
    let mut decided = profiles.decide(&next, handle);
    let mut judged = Vec::new();
    for candidate in candidates {
        let name = name_of(candidate);
        let reject = |reason: &str, message: String| Rejected {
            name: name.clone(),
            reason: reason.to_string(),
            message,
        };
        let scheduler_name = &candidate.spec.scheduler_name;
        match decided.verdicts.get(&name) {
            Some(Verdict { ready: true, .. }) => match decided.serving.remove(scheduler_name) {
                Some(compiled) => judged.push(Judged {
                    name,
                    compiled,
                    live: serving_now.get(scheduler_name).cloned(),
                }),
                None => refused.push(reject(
                    "InvalidSpec",
                    "the profile compiled but serves nothing".into(),
                )),
            },
            Some(verdict) => refused.push(reject(verdict.reason, verdict.message.clone())),
            None => refused.push(reject("InvalidSpec", "the profile was not judged".into())),
        }
    }
    if refused.is_empty() {
        Ok(judged)
    } else {
        Err(refused)
    }
}

/// Judges `candidates` (one or more SchedulingProfiles, new or changed), then, for each,
/// places the pending pods of its schedulerName (and the `replay_bound` newest bound ones)
/// with it and with the live profile.
pub fn simulate(
    cluster: &ClusterState,
    candidates: &[SchedulingProfile],
    replay_bound: usize,
) -> Result<Vec<Simulation>, Vec<Rejected>> {
    let handle = cluster.handle();
    let judged = judge(cluster, candidates, &handle)?;
    let snapshot = cluster.snapshot();
    Ok(judged
        .into_iter()
        .map(|j| replay(cluster, &snapshot, j, replay_bound, &handle.pod_groups))
        .collect())
}

/// One candidate's placements next to the live profile's.
fn replay(
    cluster: &ClusterState,
    snapshot: &Snapshot,
    judged: Judged,
    replay_bound: usize,
    groups: &PodGroupIndex,
) -> Simulation {
    let Judged {
        name,
        compiled,
        live,
    } = judged;
    let scheduler_name = compiled.scheduler_name.clone();
    let ours = |p: &&Pod| pods::scheduler_name(p) == scheduler_name;

    let mut pending: Vec<&Pod> = cluster
        .pods
        .iter()
        .filter(ours)
        .filter(|p| pods::node_name(p).is_none())
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter(|p| {
            let phase = p.status.as_ref().and_then(|s| s.phase.as_deref());
            !matches!(phase, Some("Succeeded" | "Failed"))
        })
        .collect();
    // The queue's order: priority, then age. Gated pods come last: they wait until their
    // gates go, so the pods that can be scheduled now take their nodes first.
    let gated = |p: &Pod| {
        p.spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty())
    };
    pending.sort_by(|a, b| {
        let created = |p: &Pod| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
        gated(a)
            .cmp(&gated(b))
            .then_with(|| runtime::priority(b).cmp(&runtime::priority(a)))
            .then_with(|| created(a).cmp(&created(b)))
            .then_with(|| pods::key(a).cmp(&pods::key(b)))
    });
    let bound_members = |key: &GroupKey| {
        cluster
            .pods
            .iter()
            .filter(|p| crate::scheduler::backend::cache::occupies_node(p))
            .filter(|p| pod_groups::group_of(p).as_ref() == Some(key))
            .count()
    };
    let gangs = Gangs {
        groups,
        bound_members: &bound_members,
    };
    let live_places = place_in_turn(live.as_deref(), &pending, snapshot, &gangs);
    let candidate_places = place_in_turn(Some(&compiled), &pending, snapshot, &gangs);
    let pending = pending
        .iter()
        .zip(live_places.iter().zip(&candidate_places))
        .map(|(pod, (l, c))| {
            let mut placement = compare(pod, l.as_ref(), c.as_ref());
            placement.gated = gated(pod);
            placement
        })
        .collect();

    let mut bound: Vec<&Pod> = cluster
        .pods
        .iter()
        .filter(ours)
        .filter(|p| crate::scheduler::backend::cache::occupies_node(p))
        .collect();
    bound.sort_by_key(|p| std::cmp::Reverse(scheduled_at(p)));
    let bound = bound
        .into_iter()
        .take(replay_bound)
        .map(|pod| {
            let l = live
                .as_deref()
                .map(|p| explain::explain_pod(p, pod, snapshot, &NoNominations));
            let c = explain::explain_pod(&compiled, pod, snapshot, &NoNominations);
            let mut placement = compare(pod, l.as_ref(), Some(&c));
            placement.bound_to = pods::node_name(pod).map(str::to_string);
            placement
        })
        .collect();

    Simulation {
        profile: name,
        scheduler_name,
        live_profile: live.map(|p| p.source.clone()),
        nodes: snapshot.len(),
        pending,
        bound,
    }
}

/// When the pod was bound: its PodScheduled condition's time, else its creation.
fn scheduled_at(pod: &Pod) -> Option<jiff::Timestamp> {
    pod.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|cs| cs.iter().find(|c| c.type_ == "PodScheduled"))
        .and_then(|c| c.last_transition_time.as_ref())
        .map(|t| t.0)
        .or_else(|| pod.metadata.creation_timestamp.as_ref().map(|t| t.0))
}

/// The gangs among the pending pods: their PodGroups and how many of each are bound.
struct Gangs<'a> {
    groups: &'a PodGroupIndex,
    bound_members: &'a dyn Fn(&GroupKey) -> usize,
}

impl Gangs<'_> {
    /// The gang of `pod` (its group's key and minCount), as the scheduler decides it.
    fn of(&self, profile: &CompiledProfile, pod: &Pod) -> Option<(GroupKey, usize)> {
        crate::scheduler::plugins::gangs::gang_of_pod(self.groups, profile, pod)
            .map(|g| (g.key, g.min_count))
    }
}

/// Places `pods` one after another with `profile`, each counted on its node for the next. The
/// pending members of a gang are placed together when its first member's turn comes, as the
/// group cycle places them, and kept only if at least `minCount` of the gang are then placed
/// or bound: otherwise none of them is.
fn place_in_turn(
    profile: Option<&CompiledProfile>,
    pods: &[&Pod],
    snapshot: &Snapshot,
    gangs: &Gangs<'_>,
) -> Vec<Option<Explanation>> {
    let Some(profile) = profile else {
        return pods.iter().map(|_| None).collect();
    };
    let mut snapshot = snapshot.clone();
    let mut out: Vec<Option<Explanation>> = vec![None; pods.len()];
    for (i, pod) in pods.iter().enumerate() {
        if out[i].is_some() {
            continue;
        }
        if let Some((root, tree)) =
            crate::scheduler::plugins::gangs::hierarchy_of_pod(gangs.groups, profile, pod)
        {
            place_hierarchy(
                profile,
                pods,
                (i, &root, &tree),
                (&mut snapshot, &mut out),
                gangs,
            );
            continue;
        }
        let Some((key, min_count)) = gangs.of(profile, pod) else {
            out[i] = Some(place(profile, pod, &mut snapshot));
            continue;
        };
        let members: Vec<usize> = (i..pods.len())
            .filter(|j| out[*j].is_none() && pod_groups::group_of(pods[*j]).as_ref() == Some(&key))
            .collect();
        let before = (gangs.bound_members)(&key);
        let mut trial = snapshot.clone();
        let placed: Vec<Explanation> = if before.saturating_add(members.len()) < min_count {
            members
                .iter()
                .map(|j| {
                    let mut e = place(profile, pods[*j], &mut snapshot.clone());
                    unplace(
                        &mut e,
                        "waiting for minCount pods from a gang to appear in scheduling queue"
                            .into(),
                    );
                    e
                })
                .collect()
        } else {
            members
                .iter()
                .map(|j| place(profile, pods[*j], &mut trial))
                .collect()
        };
        let fit = placed.iter().filter(|e| e.winner.is_some()).count();
        let whole = fit > 0 && before.saturating_add(fit) >= min_count;
        if whole {
            snapshot = trial;
        }
        for (j, mut e) in members.into_iter().zip(placed) {
            if !whole && e.winner.is_some() {
                unplace(
                    &mut e,
                    format!(
                        "pod group {key} is not placed: minCount {min_count}, {} of its pods fit or are bound",
                        before.saturating_add(fit)
                    ),
                );
            }
            out[j] = Some(e);
        }
    }
    out
}

/// A hierarchy's pending pods (from `first` on, those of its leaves) placed together at its
/// first pod's turn, leaf by leaf in the tree's order, each leaf standing when its `minCount`
/// of pods fit or are bound, each CompositePodGroup when `minGroupCount` of its children stand;
/// kept only if the root stands. Topology keys are not followed (as for a lone PodGroup).
fn place_hierarchy(
    profile: &CompiledProfile,
    pods: &[&Pod],
    (first, root, tree): (usize, &CompositeKey, &Tree),
    (snapshot, out): (&mut Snapshot, &mut [Option<Explanation>]),
    gangs: &Gangs<'_>,
) {
    let leaves = tree.leaves();
    let mut trial = snapshot.clone();
    let mut placed: Vec<(usize, Explanation)> = Vec::new();
    let mut fit: HashMap<String, usize> = HashMap::new();
    for leaf in &leaves {
        let mut count = (gangs.bound_members)(leaf);
        for j in first..pods.len() {
            if out[j].is_none() && leaf.has_member(pods[j]) {
                let e = place(profile, pods[j], &mut trial);
                count += usize::from(e.winner.is_some());
                placed.push((j, e));
            }
        }
        fit.insert(leaf.name.clone(), count);
    }
    fn stands(tree: &Tree, fit: &HashMap<String, usize>) -> bool {
        match &tree.group {
            Member::Leaf(_) => {
                fit.get(tree.group.name()).copied().unwrap_or(0) >= tree.group.min_count()
            }
            Member::Composite(_) => {
                tree.children.iter().filter(|c| stands(c, fit)).count() >= tree.group.min_count()
            }
        }
    }
    let any = placed.iter().any(|(_, e)| e.winner.is_some());
    let whole = any && stands(tree, &fit);
    if whole {
        *snapshot = trial;
    }
    for (j, mut e) in placed {
        if !whole && e.winner.is_some() {
            unplace(
                &mut e,
                format!("{root} is not placed: its groups do not reach their minimum counts"),
            );
        }
        out[j] = Some(e);
    }
}

/// Places `pod` with `profile` on `snapshot`, counting it on its node.
fn place(profile: &CompiledProfile, pod: &Pod, snapshot: &mut Snapshot) -> Explanation {
    let info = PodInfo::new(Arc::new(pod.clone()));
    let e = explain::explain(profile, &info, snapshot, &NoNominations, None);
    if let Some(node) = e.winner.as_deref().and_then(|n| snapshot.get(n)) {
        let mut placed = pod.clone();
        placed.spec.get_or_insert_default().node_name = Some(node.name.clone());
        let mut with = (**node).clone();
        with.add_pod(Arc::new(PodInfo::new(Arc::new(placed))));
        *snapshot = snapshot.with_node(with);
    }
    e
}

/// A member that fit, taken back because its gang is not placed: no node, and why.
fn unplace(e: &mut Explanation, message: String) {
    e.winner = None;
    e.tied.clear();
    e.runner_up = None;
    e.margin = None;
    e.nominated = false;
    e.message = Some(message);
}

fn decision(e: Option<&Explanation>) -> Decision {
    let Some(e) = e else {
        return Decision {
            message: Some("no profile serves this schedulerName now".into()),
            ..Default::default()
        };
    };
    let total = |node: &str| e.scores.iter().find(|s| s.node == node).map(|s| s.total);
    Decision {
        node: e.winner.clone(),
        total: e.winner.as_deref().and_then(total),
        tied: if e.tied.len() > 1 {
            e.tied.clone()
        } else {
            Vec::new()
        },
        message: e.message.clone().or_else(|| e.error.clone()),
    }
}

/// The two decisions for one pod, and why they differ.
fn compare(pod: &Pod, live: Option<&Explanation>, candidate: Option<&Explanation>) -> Placement {
    let (l, c) = (decision(live), decision(candidate));
    let differs = l.node != c.node;
    let why = match (differs, candidate) {
        (true, Some(cand)) => why(l.node.as_deref(), cand),
        _ => Vec::new(),
    };
    Placement {
        pod: pods::key(pod),
        live: l,
        candidate: c,
        differs,
        why,
        ..Default::default()
    }
}

/// Why the candidate does not pick `live_node`, in the candidate's own verdicts: the filter
/// that rejects it there, or the plugins whose weighted scores favour the candidate's node.
fn why(live_node: Option<&str>, cand: &Explanation) -> Vec<String> {
    let Some(chosen) = cand.winner.as_deref() else {
        return cand.message.iter().cloned().collect();
    };
    let Some(live_node) = live_node else {
        return vec![format!("the candidate fits it on {chosen}")];
    };
    if let Some(rejected) = cand
        .filters
        .iter()
        .find(|n| n.node == live_node && !n.feasible)
    {
        return rejected
            .verdicts
            .iter()
            .filter(|v| v.counted)
            .map(|v| format!("{}: {} on {live_node}", v.plugin, v.reasons.join(", ")))
            .collect();
    }
    let scores = |node: &str| cand.scores.iter().find(|s| s.node == node);
    let (Some(a), Some(b)) = (scores(chosen), scores(live_node)) else {
        return Vec::new();
    };
    let mut lines = vec![format!(
        "total {} on {chosen} vs {} on {live_node}",
        a.total, b.total
    )];
    let mut diffs: Vec<(i64, String)> = a
        .plugins
        .iter()
        .zip(&b.plugins)
        .filter(|(x, y)| x.weighted != y.weighted)
        .map(|(x, y)| {
            (
                (x.weighted - y.weighted).abs(),
                format!("{}: {} vs {}", x.plugin, x.weighted, y.weighted),
            )
        })
        .collect();
    diffs.sort_by(|x, y| y.0.cmp(&x.0).then_with(|| x.1.cmp(&y.1)));
    lines.extend(diffs.into_iter().take(3).map(|(_, line)| line));
    lines
}

#[cfg(test)]
mod tests;
