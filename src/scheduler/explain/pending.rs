//! `tether pending`: why every pending pod is pending, from the scheduler's own view, grouped
//! by what blocks it: the plugins that rejected it last and their reasons (the node counts of
//! the pod's message left out, so that pods blocked alike fall in one group), the PreEnqueue
//! plugin holding it back, or that it was not tried yet. The queue says where each pod waits
//! and who rejected it; the reasons are those of the pod's `PodScheduled` condition, which the
//! scheduler wrote at that rejection.

use std::collections::BTreeMap;
use std::time::Instant;

use serde::{Deserialize, Serialize};

use crate::k8s::pod::Pod;
use crate::scheduler::backend::queue::PendingPod;

/// The pods one group shows by name at most.
pub const EXAMPLES: usize = 5;

/// The pending pods of a namespace (or of all), grouped by blocker, the largest group first.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PendingSummary {
    /// The namespace asked about; none for every namespace.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
    /// The pods pending in it.
    pub pods: usize,
    pub groups: Vec<PendingGroup>,
    /// The smallest groups left out to keep the answer small (an ExplainRequest's status).
    #[serde(default, skip_serializing_if = "is_zero")]
    pub groups_omitted: usize,
}

fn is_zero(n: &usize) -> bool {
    *n == 0
}

/// Pods blocked alike.
#[derive(Clone, Debug, Default, Serialize, Deserialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PendingGroup {
    /// The plugins that rejected these pods last, or the PreEnqueue plugin holding them; empty
    /// when none did (not tried yet, or an error).
    pub plugins: Vec<String>,
    /// Why, in the scheduler's words without node counts: each distinct reason once, joined
    /// by `; `.
    pub reason: String,
    pub pods: usize,
    /// How long the pod that has waited longest has waited since it entered the queue, in
    /// seconds.
    pub oldest_seconds: u64,
    /// Where the pods wait: activeQ, backoffQ, the unschedulable pool, gated.
    pub queues: BTreeMap<String, usize>,
    /// Up to [`EXAMPLES`] of the pods, as namespace/name, the longest waiting first.
    pub examples: Vec<String>,
}

/// What blocks one pod: (plugins, reason).
fn blocker(pending: &PendingPod) -> (Vec<String>, String) {
    let pod = &pending.pod.pod;
    if let Some(gate) = pending.gated_by {
        let reason = if gate == "SchedulingGates" {
            let gates: Vec<&str> = pod
                .spec
                .as_ref()
                .and_then(|s| s.scheduling_gates.as_ref())
                .map(|g| g.iter().map(|g| g.name.as_str()).collect())
                .unwrap_or_default();
            format!("scheduling gates: {}", gates.join(", "))
        } else {
            condition_message(pod)
                .map(reasons)
                .unwrap_or_else(|| format!("held before the queue by {gate}"))
        };
        return (vec![gate.to_string()], reason);
    }
    if !pending.rejected_by.is_empty() {
        let plugins = pending.rejected_by.iter().map(|p| p.to_string()).collect();
        let reason = condition_message(pod)
            .map(reasons)
            .unwrap_or_else(|| "rejected (no message written yet)".into());
        return (plugins, reason);
    }
    if pending.attempts == 0 {
        return (Vec::new(), "not tried yet".into());
    }
    let reason = condition_message(pod)
        .map(|m| format!("error: {m}"))
        .unwrap_or_else(|| "error".into());
    (Vec::new(), reason)
}

/// The message of the pod's `PodScheduled=False` condition, when it has one.
fn condition_message(pod: &Pod) -> Option<&str> {
    pod.status
        .as_ref()?
        .conditions
        .as_ref()?
        .iter()
        .find(|c| c.type_ == "PodScheduled" && c.status == "False")?
        .message
        .as_deref()
        .filter(|m| !m.is_empty())
}

/// The reasons of a FitError message without their node counts, each once, sorted: "0/5
/// nodes are available: 2 Insufficient cpu, 3 node(s) had untolerated taint(s). preemption:
/// …" gives "Insufficient cpu; node(s) had untolerated taint(s)". A message of another shape
/// is kept whole.
pub fn reasons(message: &str) -> String {
    let Some(rest) = message
        .strip_prefix("0/")
        .and_then(|m| m.split_once(" nodes are available: "))
        .map(|(_, rest)| rest)
    else {
        return message.trim().to_string();
    };
    // The nodes' part ends at the first ". " (PostFilter's words follow) or at the end.
    let nodes = rest
        .split_once(". ")
        .map_or(rest, |(nodes, _)| nodes)
        .trim_end_matches('.');
    let mut parts: Vec<&str> = nodes
        .split(", ")
        .map(|part| match part.split_once(' ') {
            Some((count, reason)) if count.parse::<u64>().is_ok() => reason,
            _ => part,
        })
        .collect();
    parts.sort_unstable();
    parts.dedup();
    parts.join("; ")
}

/// Groups `pending` by blocker, at `now`: the largest group first, then the one waiting
/// longest.
pub fn summarize(
    namespace: Option<String>,
    mut pending: Vec<PendingPod>,
    now: Instant,
) -> PendingSummary {
    pending.sort_by_key(|p| p.since);
    let mut groups: BTreeMap<(Vec<String>, String), PendingGroup> = BTreeMap::new();
    for p in &pending {
        let (plugins, reason) = blocker(p);
        let group = groups
            .entry((plugins.clone(), reason.clone()))
            .or_insert_with(|| PendingGroup {
                plugins,
                reason,
                oldest_seconds: now.saturating_duration_since(p.since).as_secs(),
                ..PendingGroup::default()
            });
        group.pods += 1;
        *group.queues.entry(p.queue.to_string()).or_default() += 1;
        if group.examples.len() < EXAMPLES {
            group
                .examples
                .push(format!("{}/{}", p.pod.namespace(), p.pod.name()));
        }
    }
    let mut groups: Vec<PendingGroup> = groups.into_values().collect();
    groups.sort_by(|a, b| {
        (b.pods, b.oldest_seconds)
            .cmp(&(a.pods, a.oldest_seconds))
            .then_with(|| a.reason.cmp(&b.reason))
    });
    PendingSummary {
        namespace,
        pods: pending.len(),
        groups,
        groups_omitted: 0,
    }
}

/// A wait in seconds as kubectl prints ages: 45s, 12m, 3h, 2d.
fn age(seconds: u64) -> String {
    match seconds {
        s if s < 120 => format!("{s}s"),
        s if s < 2 * 3600 => format!("{}m", s / 60),
        s if s < 2 * 86400 => format!("{}h", s / 3600),
        s => format!("{}d", s / 86400),
    }
}

/// The summary as a table; `wide` adds the queues and the example pods.
pub fn text(summary: &PendingSummary, wide: bool) -> String {
    let mut out = match &summary.namespace {
        Some(ns) => format!("{} pods pending in namespace {ns}", summary.pods),
        None => format!("{} pods pending in all namespaces", summary.pods),
    };
    out.push('\n');
    if summary.groups.is_empty() {
        return out;
    }
    out.push('\n');
    let mut header = vec!["PODS", "OLDEST", "PLUGINS", "WHY"];
    if wide {
        header.extend(["QUEUES", "PODS (UP TO 5)"]);
    }
    let mut rows = vec![header.into_iter().map(String::from).collect::<Vec<_>>()];
    for g in &summary.groups {
        let mut row = vec![
            g.pods.to_string(),
            age(g.oldest_seconds),
            if g.plugins.is_empty() {
                "-".into()
            } else {
                g.plugins.join(",")
            },
            g.reason.clone(),
        ];
        if wide {
            let queues: Vec<String> = g.queues.iter().map(|(q, n)| format!("{q}={n}")).collect();
            row.push(queues.join(","));
            row.push(g.examples.join(","));
        }
        rows.push(row);
    }
    super::render::table(&mut out, &rows);
    if summary.groups_omitted > 0 {
        out.push_str(&format!(
            "  and {} smaller groups left out of this answer (--token-file asks the leader for all of them)\n",
            summary.groups_omitted
        ));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::PodBuilder;
    use std::time::Duration;

    #[test]
    fn the_reasons_drop_the_node_counts_and_postfilters_words() {
        assert_eq!(
            reasons(
                "0/5 nodes are available: 3 node(s) had untolerated taint(s), 2 Insufficient cpu. preemption: 0/5 nodes are available: 5 No preemption victims found for incoming pod."
            ),
            "Insufficient cpu; node(s) had untolerated taint(s)"
        );
        assert_eq!(
            reasons("0/3 nodes are available: pod has unbound immediate PersistentVolumeClaims."),
            "pod has unbound immediate PersistentVolumeClaims"
        );
        assert_eq!(
            reasons("no nodes available to schedule pods"),
            "no nodes available to schedule pods"
        );
    }

    fn pending(
        name: &str,
        message: Option<&str>,
        rejected_by: &[&'static str],
        since: Instant,
    ) -> PendingPod {
        let mut pod = PodBuilder::new(name).req_cpu("1").info();
        if let Some(message) = message {
            let mut with = (*pod.pod).clone();
            with.status.get_or_insert_default().conditions =
                Some(vec![k8s_openapi::api::core::v1::PodCondition {
                    type_: "PodScheduled".into(),
                    status: "False".into(),
                    reason: Some("Unschedulable".into()),
                    message: Some(message.into()),
                    ..Default::default()
                }]);
            pod = crate::scheduler::framework::pod_info::PodInfo::new(std::sync::Arc::new(with));
        }
        PendingPod {
            pod: std::sync::Arc::new(pod),
            queue: if rejected_by.is_empty() {
                "active"
            } else {
                "unschedulable"
            },
            rejected_by: rejected_by.to_vec(),
            gated_by: None,
            since,
            attempts: u32::from(!rejected_by.is_empty()),
        }
    }

    /// Pods rejected alike fall in one group whatever their node counts; the largest group
    /// comes first, with its longest-waiting pod's age and its pods named oldest first.
    #[test]
    fn pods_blocked_alike_are_one_group() {
        let now = Instant::now();
        let ago = |s| now - Duration::from_secs(s);
        let summary = summarize(
            Some("default".into()),
            vec![
                pending(
                    "a",
                    Some("0/3 nodes are available: 3 Insufficient cpu."),
                    &["NodeResourcesFit"],
                    ago(30),
                ),
                pending(
                    "b",
                    Some("0/4 nodes are available: 4 Insufficient cpu. preemption: not eligible"),
                    &["NodeResourcesFit"],
                    ago(300),
                ),
                pending("c", None, &[], ago(1)),
            ],
            now,
        );
        assert_eq!(summary.pods, 3);
        let first = &summary.groups[0];
        assert_eq!(
            (
                first.plugins.clone(),
                first.reason.as_str(),
                first.pods,
                first.oldest_seconds
            ),
            (
                vec!["NodeResourcesFit".to_string()],
                "Insufficient cpu",
                2,
                300
            )
        );
        assert_eq!(first.examples, ["default/b", "default/a"]);
        assert_eq!(first.queues.get("unschedulable"), Some(&2));
        assert_eq!(summary.groups[1].reason, "not tried yet");
        let table = text(&summary, false);
        assert!(
            table.contains("3 pods pending in namespace default"),
            "{table}"
        );
        assert!(
            table.lines().any(|l| l.trim_start().starts_with("2 ")
                && l.contains("5m")
                && l.ends_with("Insufficient cpu")),
            "{table}"
        );
    }
}
