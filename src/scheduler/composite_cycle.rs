//! The group cycle of a hierarchy (Kubernetes 1.38's CompositePodGroups, as kube-scheduler
//! 1.38 with its CompositePodGroup gate, which needs TopologyAwareWorkloadScheduling): the
//! root CompositePodGroup's pods, every leaf PodGroup's, are tried in one cycle.
//!
//! - **A CompositePodGroup** is tried in each placement its topology key makes of its parent's
//!   (one placement, the parent's, without a key; a zone's CompositePodGroup splits the cluster
//!   by zone, a rack's child splits each zone by rack). In a placement its children are tried in
//!   order (created first, then by name), each seeing the ones placed before it (their pods
//!   added to the nodes and reserved); it stops once `minGroupCount` children (1 for the basic
//!   policy) can no longer be placed, in PlacementFeasible's words. The search stops once enough
//!   placements fit (upstream's share); of several, the one whose placed pods fill it most
//!   (PodGroupPodsCount plus NodeResourcesFit's MostAllocated over the placement) wins. None
//!   fits: `0/N placements are available, first placement status: …`.
//! - **A PodGroup** under it is placed as the topology-aware cycle places a PodGroup, inside
//!   the placement it is given (and, with a key of its own, inside one domain of it), its failure
//!   worded the same way. No nominated placement goes first (upstream's fast path is off for a
//!   hierarchy's groups).
//! - **The outcome**: a group whose ancestor failed is not bound (`ancestor composite pod group
//!   "x" is unschedulable`); each CompositePodGroup says so in its
//!   `CompositePodGroupInitiallyScheduled` condition, each PodGroup in its
//!   `PodGroupInitiallyScheduled`; the placed pods of the groups that stand go to their binding
//!   cycles; every other pod fails with its own reason or `parent pod group "g" is
//!   unschedulable`.
//!
//! A hierarchy that cannot preempt yet: a CompositePodGroup that does not fit waits (upstream's
//! DefaultPreemption also preempts for it).

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::scheduling::v1beta1::PodGroup;

use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::scheduler::Scheduler;
use crate::scheduler::composite_placement::{Cycle, Leaf, Results, Verdict, settle};
use crate::scheduler::failure::{Failure, NominationOutcome};
use crate::scheduler::framework::group_post_filter::{GroupPreemptor, TrialCluster};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::{Nomination, QueuedPodInfo, Status};
use crate::scheduler::group_status::ConditionWrite;
use crate::scheduler::handoff::{search_over_message, to_binding};
use crate::scheduler::informers::pod_groups;
use crate::scheduler::informers::pod_groups::composite::{CompositeKey, MAX_DEPTH, Member, Tree};
use crate::scheduler::metrics::groups::COMPOSITE;
use crate::scheduler::outcome::FailureReason;
use crate::scheduler::plugins::gang_scheduling;
use crate::scheduler::schedule_one_group::{fail, stale_watch, take_members};

/// Runs the group cycle of the hierarchy under `root` (`tree`) for `first`, just popped.
pub fn schedule_composite(
    sched: &Arc<Scheduler>,
    first: QueuedPodInfo,
    profile: Arc<CompiledProfile>,
    (root, tree): (CompositeKey, Tree),
) {
    let start = Instant::now();
    let plugin = gang_scheduling::NAME;
    let leaf_keys = tree.leaves();
    let in_tree = |pod: &Pod| leaf_keys.iter().any(|k| k.has_member(pod));
    let Some(members) = take_members(sched, in_tree, first, (plugin, &root)) else {
        return;
    };
    let size = members.len();
    let in_cycle: HashSet<&str> = members.iter().map(|m| m.pod.uid()).collect();
    let mut leaves: HashMap<String, Leaf> = leaf_keys
        .iter()
        .map(|key| {
            let leaf = Leaf {
                key: key.clone(),
                members: Vec::new(),
                already: sched.scheduled_before(key, &in_cycle),
            };
            (key.name.clone(), leaf)
        })
        .collect();
    drop(in_cycle);
    for member in members {
        let name = pod_groups::group_name(&member.pod.pod).unwrap_or_default();
        if let Some(leaf) = leaves.get_mut(name) {
            leaf.members.push(member);
        }
    }

    let refused = stale_watch(sched, &profile)
        .map(|stale| (stale, "SchedulerError"))
        .or_else(|| {
            validate(&tree, &leaves)
                .err()
                .map(|e| (e, "CompositePodGroupError"))
        });
    if let Some((message, reason)) = refused {
        tracing::warn!(group = %root, error = %message, "composite pod group refused");
        let status = Status::error(message.clone());
        for leaf in leaves.values() {
            for member in &leaf.members {
                fail(
                    sched,
                    &profile,
                    member,
                    "error",
                    Failure::error(&status),
                    start,
                    size,
                );
            }
        }
        let leaf_reason = if reason == "SchedulerError" {
            reason
        } else {
            "PodGroupError"
        };
        tree.walk(&mut |t| {
            let reason = match t.group {
                Member::Leaf(_) => leaf_reason,
                Member::Composite(_) => reason,
            };
            condition(sched, &t.group, "False", reason, message.clone());
        });
        sched.metrics.group_attempt(
            COMPOSITE,
            "error",
            &profile.scheduler_name,
            (start.elapsed(), start.elapsed()),
        );
        return;
    }

    let snapshot = sched.lock_cache().snapshot();
    let none_removed = HashSet::new();
    let cycle = Cycle {
        sched,
        profile: &profile,
        leaves: &leaves,
        removed: &none_removed,
        ranks: None,
    };
    let mut results = Results::default();
    cycle.eval(&tree, &snapshot, &None, &mut results);
    let search = start.elapsed();
    sched.metrics.scheduling_algorithm(search);
    let mut verdicts = settle(&tree, &results);
    // Not placed: the profile's group PostFilter plugins (DefaultPreemption) make room for the
    // hierarchy as one preemptor; what they say is appended to every group's message.
    let mut nominations: HashMap<(String, usize), String> = HashMap::new();
    let mut waiting_on_preemption = false;
    if let Some(Verdict::Unschedulable(_)) = verdicts.composites.get(tree.group.name())
        && let Some(said) = preempt(sched, &profile, (&root, &tree), &leaves)
    {
        waiting_on_preemption = said.succeeded;
        nominations = said.nominations;
        for verdict in verdicts
            .leaves
            .values_mut()
            .chain(verdicts.composites.values_mut())
        {
            if let Verdict::Unschedulable(m) | Verdict::Error(m) = verdict
                && !said.words.is_empty()
            {
                m.push_str(", ");
                m.push_str(&said.words);
            }
        }
    }
    let root_verdict = verdicts
        .composites
        .get(tree.group.name())
        .cloned()
        .unwrap_or(Verdict::Error("the hierarchy was not evaluated".into()));
    tracing::debug!(group = %root, verdict = ?root_verdict, "composite pod group cycle");

    // The conditions.
    tree.walk(&mut |t| {
        let verdict = match t.group {
            Member::Leaf(_) => verdicts.leaves.get(t.group.name()),
            Member::Composite(_) => verdicts.composites.get(t.group.name()),
        };
        let (status, reason, message) = match verdict {
            Some(Verdict::Scheduled) => ("True", "Scheduled", String::new()),
            Some(Verdict::Unschedulable(m)) => ("False", "Unschedulable", m.clone()),
            Some(Verdict::Error(m)) => ("False", "SchedulerError", m.clone()),
            None => ("False", "SchedulerError", "not evaluated".to_string()),
        };
        condition(sched, &t.group, status, reason, message);
    });

    // The pods.
    let mut placed_any = false;
    for (name, leaf) in leaves {
        let verdict = verdicts
            .leaves
            .get(&name)
            .cloned()
            .unwrap_or(Verdict::Error("not evaluated".into()));
        let mut found = results.leaves.remove(&name);
        let evaluation = found.as_mut().and_then(|f| f.evaluation.take());
        let (placed, own_failures) = match evaluation {
            Some(e) => (e.placed, e.own_failures),
            None => (Vec::new(), Vec::new()),
        };
        let mut own: HashMap<usize, Failure> = own_failures.into_iter().collect();
        let mut members: Vec<Option<QueuedPodInfo>> = leaf.members.into_iter().map(Some).collect();
        if verdict == Verdict::Scheduled {
            for mut assigned in placed {
                let Some(queued) = members.get_mut(assigned.index).and_then(Option::take) else {
                    continue;
                };
                let pod = &queued.pod;
                sched.lock_cache().assume_pod(pod, &assigned.node);
                let status = profile.run_reserve(&mut assigned.state, pod, &assigned.node);
                if !status.is_success() {
                    sched.lock_cache().forget_pod(pod.uid());
                    let failure =
                        Failure::after_status(&status, true, search_over_message(&status));
                    fail(sched, &profile, &queued, "unschedulable", failure, start, 1);
                    continue;
                }
                placed_any = true;
                sched.state.room.nominator.forget(pod.uid());
                to_binding(
                    sched,
                    queued,
                    profile.clone(),
                    assigned.state,
                    assigned.node,
                    assigned.choice,
                    start,
                );
            }
        }
        for (index, member) in members.into_iter().enumerate() {
            let Some(member) = member else { continue };
            let group = &leaf.key.name;
            let (result, failure) = match (&verdict, own.remove(&index)) {
                (Verdict::Error(_), _) => (
                    "error",
                    Failure::error(&Status::error(format!(
                        "parent pod group {group:?} encountered an error"
                    ))),
                ),
                (_, Some(own)) => ("unschedulable", own),
                _ => (
                    "unschedulable",
                    Failure {
                        reason: FailureReason::Unschedulable,
                        message: format!("parent pod group {group:?} is unschedulable"),
                        rejected_by: vec![plugin],
                        retry_after: None,
                        nomination: NominationOutcome::PostFilter(None),
                    },
                ),
            };
            let mut failure = failure;
            if let Some(node) = nominations.remove(&(name.clone(), index)) {
                // Nominated where the preemption makes room for it.
                failure.nomination = NominationOutcome::PostFilter(Some(Nomination::Node(node)));
            }
            fail(sched, &profile, &member, result, failure, start, size);
        }
    }
    let result = match root_verdict {
        Verdict::Scheduled if placed_any => "scheduled",
        Verdict::Error(_) => "error",
        _ if waiting_on_preemption => "waiting_on_preemption",
        _ => "unschedulable",
    };
    sched.metrics.group_attempt(
        COMPOSITE,
        result,
        &profile.scheduler_name,
        (search, start.elapsed()),
    );
}

/// A rule checked at each group of a hierarchy: the group, its parent, its depth.
type Check<'a> = dyn FnMut(&Tree, Option<&Member>, usize) -> Result<(), String> + 'a;

/// What the hierarchy's preemption said: its words, whether it succeeded, and each member's
/// nomination (by leaf name and index in its members).
struct Said {
    words: String,
    succeeded: bool,
    nominations: HashMap<(String, usize), String>,
}

/// The hierarchy as one preemptor (upstream's PodGroupPostFilter for a CompositePodGroup): its
/// root's priority and preemption policy, every leaf's pods as the members, placed by the
/// hierarchy's own cycle on each trial cluster. None when the profile runs no group PostFilter.
fn preempt(
    sched: &Scheduler,
    profile: &CompiledProfile,
    (root, tree): (&CompositeKey, &Tree),
    leaves: &HashMap<String, Leaf>,
) -> Option<Said> {
    let Member::Composite(object) = &tree.group else {
        return None;
    };
    let mut flat: Vec<QueuedPodInfo> = Vec::new();
    let mut offsets: HashMap<String, usize> = HashMap::new();
    let mut owner: Vec<(String, usize)> = Vec::new();
    for key in tree.leaves() {
        if let Some(leaf) = leaves.get(&key.name) {
            offsets.insert(key.name.clone(), flat.len());
            for (i, member) in leaf.members.iter().enumerate() {
                flat.push(member.clone());
                owner.push((key.name.clone(), i));
            }
        }
    }
    let never = match object.preemption_policy.as_deref() {
        Some(set) => set == "Never",
        None => flat
            .iter()
            .any(|m| crate::scheduler::group_preemption::policy(&m.pod.pod) == "Never"),
    };
    let preemptor = GroupPreemptor {
        namespace: root.namespace.clone(),
        name: root.name.clone(),
        uid: object.uid.clone().unwrap_or_default(),
        api_version: "scheduling.k8s.io/v1beta1".into(),
        kind: "CompositePodGroup".into(),
        scheduler_name: flat
            .first()
            .map(|m| pods::scheduler_name(&m.pod.pod).to_string())
            .unwrap_or_default(),
        priority: tree.group.priority(),
        never,
    };
    let place = |trial: TrialCluster<'_>| {
        let cycle = Cycle {
            sched,
            profile,
            leaves,
            removed: trial.removed,
            ranks: trial.ranks,
        };
        let placed = cycle.place(tree, trial.snapshot)?;
        Ok(placed
            .into_iter()
            .filter_map(|(leaf, i, node)| Some((offsets.get(&leaf)?.checked_add(i)?, node)))
            .collect())
    };
    let said =
        crate::scheduler::group_preemption::preempt(sched, profile, &preemptor, &flat, &place)?;
    Some(Said {
        words: said.words,
        succeeded: said.succeeded,
        nominations: said
            .nominations
            .into_iter()
            .filter_map(|(i, node)| Some((owner.get(i)?.clone(), node)))
            .collect(),
    })
}

/// Upstream's validatePodGroupHierarchy: no deeper than [`MAX_DEPTH`] (no CompositePodGroup at
/// that depth), every group of the root's Workload and priority, preemption policies that agree,
/// no basic child under a gang, no Single child under an All parent, and every pod of one
/// schedulerName, the root's priority and the policy. The first broken rule, in upstream's
/// words.
fn validate(tree: &Tree, leaves: &HashMap<String, Leaf>) -> Result<(), String> {
    let root = &tree.group;
    let root_priority = root.priority();
    let root_key = root.entity();
    let first_pod = leaves
        .values()
        .flat_map(|l| l.members.first())
        .next()
        .map(|m| m.pod.pod.clone());
    let expected_policy = root
        .preemption_policy()
        .map(String::from)
        .or_else(|| {
            first_pod
                .as_ref()
                .map(|p| crate::scheduler::group_preemption::policy(p))
        })
        .unwrap_or_default();
    let scheduler = first_pod
        .as_ref()
        .map(|p| pods::scheduler_name(p).to_string())
        .unwrap_or_default();
    let first_name = first_pod
        .as_ref()
        .and_then(|p| p.metadata.name.clone())
        .unwrap_or_default();
    fn visit(
        tree: &Tree,
        parent: Option<&Member>,
        depth: usize,
        check: &mut Check<'_>,
    ) -> Result<(), String> {
        check(tree, parent, depth)?;
        for child in &tree.children {
            visit(child, Some(&tree.group), depth + 1, check)?;
        }
        Ok(())
    }
    let mut check = |t: &Tree, parent: Option<&Member>, depth: usize| -> Result<(), String> {
        let group = &t.group;
        if matches!(group, Member::Composite(_)) && depth == MAX_DEPTH {
            return Err(format!(
                "hierarchy depth exceeds maximum allowed depth {MAX_DEPTH} at {:?}",
                group.entity()
            ));
        }
        if let Some(parent) = parent {
            if group.workload() != root.workload() {
                return Err(format!(
                    "pod group workload does not match root workload, got: {:?} ({:?}) and {:?} ({root_key:?})",
                    group.workload().unwrap_or_default(),
                    group.entity(),
                    root.workload().unwrap_or_default(),
                ));
            }
            if group.priority() != root_priority {
                return Err(format!(
                    "all pod groups in a hierarchy should have the same priority as the root pod group's priority, got {} ({:?}) and {root_priority} ({root_key:?})",
                    group.priority(),
                    group.entity()
                ));
            }
            if let Some(own) = group.preemption_policy().filter(|p| !p.is_empty())
                && own != expected_policy
            {
                return Err(format!(
                    "all pod groups in a hierarchy should have the same preemption policy, got {own} ({:?}) and {expected_policy}",
                    group.entity()
                ));
            }
            if !parent.is_basic() && group.is_basic() {
                return Err(format!(
                    "gang parent {:?} cannot have basic child {:?}",
                    parent.entity(),
                    group.entity()
                ));
            }
            if parent.disruption_all() && !group.disruption_all() {
                return Err(format!(
                    "parent {:?} with All disruption mode cannot have child {:?} with Single disruption mode",
                    parent.entity(),
                    group.entity()
                ));
            }
        }
        if let Member::Leaf(_) = group
            && let Some(leaf) = leaves.get(group.name())
        {
            let pods = leaf
                .members
                .iter()
                .map(|m| m.pod.pod.as_ref())
                .chain(leaf.already.iter().map(Arc::as_ref));
            for pod in pods {
                let name = pod.metadata.name.clone().unwrap_or_default();
                let own = pods::scheduler_name(pod);
                if own != scheduler {
                    return Err(format!(
                        "all pods in a pod group hierarchy should have the same .spec.schedulerName set, got: {own:?} ({name:?}) and {scheduler:?} ({first_name:?})"
                    ));
                }
                let priority = crate::scheduler::framework::runtime::priority(pod);
                if priority != root_priority {
                    return Err(format!(
                        "all pods in a pod group hierarchy should have the same priority as the root pod group's priority, got {priority} ({name:?}) and {root_priority} ({root_key:?})"
                    ));
                }
                let policy = crate::scheduler::group_preemption::policy(pod);
                if policy != expected_policy {
                    return Err(format!(
                        "all pods in a pod group hierarchy should have the same preemption policy, got {policy} ({name:?}) and {expected_policy}"
                    ));
                }
            }
        }
        Ok(())
    };
    visit(tree, None, 1, &mut check)
}

/// Asks for `group`'s condition (its kind's), as the PodGroup cycle writes it: never from
/// True back, not at all when the watched copy says the same.
fn condition(
    sched: &Scheduler,
    group: &Member,
    status: &'static str,
    reason: &'static str,
    message: String,
) {
    let (namespace, name, uid, generation, watched, composite) = match group {
        Member::Leaf(g) => leaf_identity(g),
        Member::Composite(g) => (
            g.namespace.clone(),
            g.name.clone(),
            g.uid.clone(),
            g.generation,
            g.conditions.clone(),
            true,
        ),
    };
    let condition_type = if composite {
        crate::scheduler::informers::pod_groups::composite::COMPOSITE_INITIALLY_SCHEDULED
    } else {
        crate::scheduler::group_status::INITIALLY_SCHEDULED
    };
    if crate::scheduler::group_status::with_condition_of(
        condition_type,
        watched,
        generation,
        status,
        reason,
        &message,
        true,
    )
    .is_none()
    {
        return;
    }
    sched.reports.group_condition(ConditionWrite {
        namespace,
        name,
        status,
        reason,
        message,
        uid,
        keep_true: true,
        composite,
    });
}

type Identity = (
    String,
    String,
    Option<String>,
    Option<i64>,
    Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>,
    bool,
);

fn leaf_identity(g: &PodGroup) -> Identity {
    (
        g.metadata.namespace.clone().unwrap_or_default(),
        g.metadata.name.clone().unwrap_or_default(),
        g.metadata.uid.clone(),
        g.metadata.generation,
        g.status
            .as_ref()
            .and_then(|s| s.conditions.clone())
            .unwrap_or_default(),
        false,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::informers::pod_groups::composite::CompositeGroup;
    use crate::scheduler::testing::PodBuilder;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;
    use std::collections::BTreeSet;

    fn leaf(name: &str, policy: serde_json::Value) -> Tree {
        let group: PodGroup = serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"schedulingPolicy": policy, "parentCompositePodGroupName": "job",
                     "workloadRef": {"workloadName": "w", "podGroupTemplateName": "t"}},
        }))
        .expect("a PodGroup");
        Tree {
            group: Member::Leaf(Arc::new(group)),
            children: Vec::new(),
        }
    }

    fn root(children: Vec<Tree>) -> Tree {
        let object: kube::api::DynamicObject = serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup",
            "metadata": {"name": "job", "namespace": "ns"},
            "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 1}},
                     "workloadRef": {"workloadName": "w", "templateName": "t"}},
        }))
        .expect("a CompositePodGroup");
        Tree {
            group: Member::Composite(Arc::new(CompositeGroup::from_object(&object))),
            children,
        }
    }

    fn leaves(pods: &[(&str, &str, i32)]) -> HashMap<String, Leaf> {
        let mut out: HashMap<String, Leaf> = HashMap::new();
        for (group, name, priority) in pods {
            let now = Instant::now();
            let queued = QueuedPodInfo {
                pod: Arc::new(PodBuilder::new(name).priority(*priority).info()),
                initial_attempt_timestamp: now,
                timestamp: now,
                attempts: 0,
                unschedulable_plugins: BTreeSet::new(),
                unschedulable_count: 0,
                consecutive_errors_count: 0,
                gated_by: None,
            };
            out.entry(group.to_string())
                .or_insert_with(|| Leaf {
                    key: pod_groups::GroupKey {
                        api: pod_groups::GroupApi::Workload,
                        namespace: "ns".into(),
                        name: group.to_string(),
                    },
                    members: Vec::new(),
                    already: Vec::new(),
                })
                .members
                .push(queued);
        }
        out
    }

    /// Upstream's rules, in its words: a basic child under a gang parent; a pod of another
    /// priority than the root's. A hierarchy that keeps them passes.
    #[test]
    fn a_hierarchy_breaking_upstreams_rules_is_refused_in_its_words() {
        let gang = serde_json::json!({"gang": {"minCount": 1}});
        let basic = serde_json::json!({"basic": {}});
        let fine = root(vec![leaf("a", gang.clone()), leaf("b", gang.clone())]);
        assert_eq!(
            validate(&fine, &leaves(&[("a", "a-0", 0), ("b", "b-0", 0)])),
            Ok(())
        );
        let mixed = root(vec![leaf("a", gang.clone()), leaf("b", basic)]);
        assert_eq!(
            validate(&mixed, &leaves(&[("a", "a-0", 0)])),
            Err(
                r#"gang parent "compositepodgroup/ns/job" cannot have basic child "podgroup/ns/b""#
                    .into()
            )
        );
        assert_eq!(
            validate(&fine, &leaves(&[("a", "a-0", 0), ("b", "b-0", 5)])),
            Err(r#"all pods in a pod group hierarchy should have the same priority as the root pod group's priority, got 5 ("b-0") and 0 ("compositepodgroup/ns/job")"#.into())
        );
    }
}
