//! What keeps a StickyBinding's status bounded whatever the workload's size or age, pure:
//! `countedPods` keeps only the pods `countedBefore` cannot vouch for yet (at most
//! [`MAX_COUNTED_PODS`]), and `nodeCount` drops the nodes long gone from the cluster (their
//! binds move to `prunedCount`), within [`NODE_COUNT_BYTES`].
//!
//! Why a time, and why it is safe: after a restart, the reconcile must tell a bind that was
//! counted from one whose count was lost (a crash between the bind and its status write). A lost
//! count is always recent: tether writes a bind's history within moments of it. So a pod bound
//! more than [`SETTLE`] before the newest counted bind (both times are the API server's, from the
//! pods' `PodScheduled` conditions) was counted, and need not be named. Pods bound since are
//! decided by UID, as before.

use std::collections::BTreeMap;
use std::time::Duration;

use jiff::{SignedDuration, Timestamp};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

use crate::api::{MAX_COUNTED_PODS, MAX_NODE_COUNTS, StickyBindingStatus};

/// How long before the newest counted bind `countedBefore` is set: longer than a bind takes to
/// be written to its history (or to reach the watch, for a bind someone else made), so that no
/// bind whose count was lost is older than it.
pub const SETTLE: SignedDuration = SignedDuration::from_mins(2);

/// How long a node must have been gone from the cluster for its count to be dropped from
/// `nodeCount` (a node that comes back within it keeps its count).
pub const NODE_RETENTION: Duration = Duration::from_secs(3600);

/// The most `nodeCount` may take, in bytes of JSON (about 20,000 nodes of ordinary names): past
/// it, the nodes gone from the cluster go first, then those used least.
pub const NODE_COUNT_BYTES: usize = 512 * 1024;

/// What the scheduler knows of a pod listed in `countedPods`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Seen {
    /// The scheduler no longer knows it: it was deleted.
    Gone,
    /// It exists, and its bind time is not known yet (its bind's watch event is on its way).
    Unbound,
    /// It was bound at this time (its `PodScheduled` condition).
    BoundAt(Timestamp),
}

impl Seen {
    /// The order in which pods leave `countedPods` when more than [`MAX_COUNTED_PODS`] are
    /// recent: the longest bound first; one whose bind time is unknown is the newest.
    fn age_key(self) -> Option<Timestamp> {
        match self {
            Seen::BoundAt(t) => Some(t),
            Seen::Gone | Seen::Unbound => None,
        }
    }
}

/// `t` down to the second: a `Time` is written to the second, and a `countedBefore` rounded
/// up would vouch for pods bound in the second it was rounded past.
fn floor_second(t: Timestamp) -> Timestamp {
    Timestamp::from_second(t.as_second()).unwrap_or(t)
}

/// `t` moved by `by`, held within the timestamps jiff can hold.
fn shifted(t: Timestamp, by: SignedDuration) -> Timestamp {
    t.checked_add(by).unwrap_or(if by.is_negative() {
        Timestamp::MIN
    } else {
        Timestamp::MAX
    })
}

/// Drops from `status.countedPods` the pods that need not be named: those gone, and those bound
/// before `countedBefore`, which moves to `settle` ([`SETTLE`] unless configured) before the
/// newest bind of a pod still listed (never past `now`, this machine's clock, less `settle`: a bind time from a clock
/// ahead of everyone's moves it no further, and one from a clock behind only keeps more). At
/// most [`MAX_COUNTED_PODS`] stay: past it, the longest bound go and `countedBefore` moves past
/// them. Never moves `countedBefore` back. Pure.
pub fn settle_counted_pods(
    status: &mut StickyBindingStatus,
    seen: impl Fn(&str) -> Seen,
    now: Timestamp,
    settle: SignedDuration,
) {
    let mut listed: Vec<(String, Seen)> = std::mem::take(&mut status.counted_pods)
        .into_iter()
        .map(|uid| {
            let s = seen(&uid);
            (uid, s)
        })
        .filter(|(_, s)| *s != Seen::Gone)
        .collect();
    let old = status.counted_before.as_ref().map(|t| t.0);
    let newest = listed.iter().filter_map(|(_, s)| s.age_key()).max();
    let mut before = old;
    if let Some(newest) = newest {
        let candidate = floor_second(shifted(newest.min(now), -settle));
        before = Some(before.map_or(candidate, |old| old.max(candidate)));
    }
    if let Some(before) = before {
        listed.retain(|(_, s)| s.age_key().is_none_or(|t| t >= before));
    }
    if listed.len() > MAX_COUNTED_PODS {
        // The newest stay; the rest go, and countedBefore moves past the newest of them.
        listed.sort_by_key(|(_, s)| s.age_key().map_or((1, Timestamp::MAX), |t| (0, t)));
        let excess = listed.len() - MAX_COUNTED_PODS;
        let past = listed
            .drain(..excess)
            .filter_map(|(_, s)| s.age_key())
            .max();
        if let Some(past) = past {
            let next = shifted(floor_second(past), SignedDuration::from_secs(1));
            before = Some(before.map_or(next, |b| b.max(next)));
        } else {
            tracing::warn!(
                kept = MAX_COUNTED_PODS,
                dropped = excess,
                "more pods of one workload were bound than countedPods can keep before their bind times were known; a restart now may count some of them again"
            );
        }
    }
    status.counted_pods = listed.into_iter().map(|(uid, _)| uid).collect();
    if before != old {
        status.counted_before = before.map(Time);
    }
}

/// The bytes a `nodeCount` entry takes in JSON, about.
fn entry_bytes(node: &str, count: i64) -> usize {
    // "name":count,
    node.len() + count.unsigned_abs().to_string().len() + 4
}

/// Drops from `status.nodeCount` the nodes gone for [`NODE_RETENTION`] (`gone_for` says how
/// long a node has been absent, `None` while it exists), then, while it takes more than
/// [`NODE_COUNT_BYTES`] or [`MAX_NODE_COUNTS`] entries, the nodes gone longest and then those
/// used least. Never the nodes in `keep` (the pin). Each dropped count moves to `prunedCount`,
/// so `scheduleCount` stays their sum. Returns how many nodes were dropped. Pure.
pub fn prune_node_counts(
    status: &mut StickyBindingStatus,
    keep: &[&str],
    gone_for: impl Fn(&str) -> Option<Duration>,
) -> usize {
    let absence: BTreeMap<String, Duration> = status
        .node_count
        .keys()
        .filter(|n| !keep.contains(&n.as_str()))
        .filter_map(|n| gone_for(n).map(|d| (n.clone(), d)))
        .collect();
    let mut dropped = 0;
    for (node, gone) in &absence {
        if *gone >= NODE_RETENTION {
            drop_node(status, node);
            dropped += 1;
        }
    }
    let mut bytes: usize = status
        .node_count
        .iter()
        .map(|(n, c)| entry_bytes(n, *c))
        .sum();
    if bytes <= NODE_COUNT_BYTES && status.node_count.len() <= MAX_NODE_COUNTS {
        return dropped;
    }
    // Gone nodes first, the longest gone first; then the nodes used least.
    let mut candidates: Vec<(String, i64)> = status
        .node_count
        .iter()
        .filter(|(n, _)| !keep.contains(&n.as_str()))
        .map(|(n, c)| (n.clone(), *c))
        .collect();
    candidates.sort_by_key(|(n, c)| match absence.get(n) {
        Some(gone) => (0, std::cmp::Reverse(*gone), *c),
        None => (1, std::cmp::Reverse(Duration::ZERO), *c),
    });
    for (node, count) in candidates {
        if bytes <= NODE_COUNT_BYTES && status.node_count.len() <= MAX_NODE_COUNTS {
            break;
        }
        bytes = bytes.saturating_sub(entry_bytes(&node, count));
        drop_node(status, &node);
        dropped += 1;
    }
    dropped
}

/// Moves `node`'s count to `prunedCount`.
fn drop_node(status: &mut StickyBindingStatus, node: &str) {
    if let Some(count) = status.node_count.remove(node) {
        status.pruned_count = status.pruned_count.max(0).saturating_add(count.max(0));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("ts")
    }

    fn status(uids: &[&str]) -> StickyBindingStatus {
        StickyBindingStatus {
            counted_pods: uids.iter().map(|u| u.to_string()).collect(),
            ..Default::default()
        }
    }

    #[test]
    fn a_pod_leaves_counted_pods_once_gone_or_bound_settle_before_the_newest() {
        let mut s = status(&["old", "recent", "gone", "binding"]);
        let seen = |uid: &str| match uid {
            "old" => Seen::BoundAt(at(0)),
            "recent" => Seen::BoundAt(at(200)),
            "gone" => Seen::Gone,
            _ => Seen::Unbound,
        };
        settle_counted_pods(&mut s, seen, at(1000), SETTLE);
        assert_eq!(s.counted_pods, ["recent", "binding"]);
        assert_eq!(
            s.counted_before.map(|t| t.0),
            Some(shifted(at(200), -SETTLE)),
            "two minutes before the newest bind"
        );
    }

    #[test]
    fn counted_before_never_goes_back_nor_past_this_clock() {
        let mut s = status(&["a"]);
        s.counted_before = Some(Time(at(500)));
        settle_counted_pods(&mut s, |_| Seen::BoundAt(at(100)), at(1000), SETTLE);
        assert_eq!(s.counted_before.map(|t| t.0), Some(at(500)), "not back");
        assert!(s.counted_pods.is_empty(), "bound before it: vouched for");

        let mut ahead = status(&["a", "b"]);
        let seen = |uid: &str| match uid {
            "a" => Seen::BoundAt(at(10_000)),
            _ => Seen::BoundAt(at(900)),
        };
        settle_counted_pods(&mut ahead, seen, at(1000), SETTLE);
        assert_eq!(
            ahead.counted_before.map(|t| t.0),
            Some(shifted(at(1000), -SETTLE)),
            "a bind time ahead of this clock moves it no further than this clock allows"
        );
        assert_eq!(ahead.counted_pods, ["a", "b"]);
    }

    #[test]
    fn past_the_limit_the_longest_bound_go_and_counted_before_vouches_for_them() {
        let n = MAX_COUNTED_PODS + 100;
        let uids: Vec<String> = (0..n).map(|i| format!("u{i}")).collect();
        let mut s = StickyBindingStatus {
            counted_pods: uids.clone(),
            ..Default::default()
        };
        // All bound within the last minute: none is old enough to leave on its own.
        let bound = |uid: &str| {
            let i: i64 = uid[1..].parse().expect("index");
            Seen::BoundAt(at(1000 + i / 200))
        };
        settle_counted_pods(&mut s, bound, at(1100), SETTLE);
        assert_eq!(s.counted_pods.len(), MAX_COUNTED_PODS);
        let before = s.counted_before.as_ref().map(|t| t.0).expect("set");
        for uid in &uids {
            let Seen::BoundAt(t) = bound(uid) else {
                unreachable!()
            };
            let listed = s.counted_pods.contains(uid);
            assert!(
                listed || t < before,
                "{uid} (bound {t}) is neither listed nor vouched for by {before}"
            );
        }
    }

    #[test]
    fn nodes_long_gone_leave_node_count_for_pruned_count_but_never_the_pin() {
        let mut s = StickyBindingStatus {
            node_count: [
                ("live".to_string(), 3),
                ("gone-long".to_string(), 4),
                ("gone-briefly".to_string(), 5),
                ("pinned-gone".to_string(), 6),
            ]
            .into(),
            schedule_count: 18,
            latest: Some("pinned-gone".into()),
            ..Default::default()
        };
        let gone_for = |n: &str| match n {
            "live" => None,
            "gone-briefly" => Some(Duration::from_secs(60)),
            _ => Some(NODE_RETENTION),
        };
        assert_eq!(prune_node_counts(&mut s, &["pinned-gone"], gone_for), 1);
        assert_eq!(
            s.node_count.keys().collect::<Vec<_>>(),
            ["gone-briefly", "live", "pinned-gone"]
        );
        assert_eq!(s.pruned_count, 4);
        assert!(s.oddities().is_empty(), "{:?}", s.oddities());
    }

    #[test]
    fn past_its_size_node_count_drops_gone_nodes_first_then_the_least_used() {
        let name = |i: usize| format!("{i:0>200}");
        let entries = NODE_COUNT_BYTES / 205 + 50;
        let mut s = StickyBindingStatus {
            node_count: (0..entries)
                .map(|i| (name(i), i64::try_from(i % 7 + 1).expect("small")))
                .collect(),
            ..Default::default()
        };
        s.schedule_count = s.node_count.values().sum();
        let total = s.schedule_count;
        let before = s.node_count.clone();
        let gone = name(3);
        prune_node_counts(&mut s, &[], |n| {
            (n == gone).then_some(Duration::from_secs(5))
        });
        let bytes: usize = s.node_count.iter().map(|(n, c)| entry_bytes(n, *c)).sum();
        assert!(bytes <= NODE_COUNT_BYTES);
        assert!(
            !s.node_count.contains_key(&gone),
            "the gone node went first"
        );
        let most_dropped = before
            .iter()
            .filter(|(n, _)| **n != gone && !s.node_count.contains_key(*n))
            .map(|(_, c)| *c)
            .max()
            .expect("some live nodes dropped");
        let least_kept = s.node_count.values().copied().min().expect("some kept");
        assert!(
            most_dropped <= least_kept,
            "the least used went next: dropped up to {most_dropped}, kept from {least_kept}"
        );
        assert_eq!(s.node_count.values().sum::<i64>() + s.pruned_count, total);
    }
}
