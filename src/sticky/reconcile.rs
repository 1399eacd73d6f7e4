//! Counts binds this tether did not make and may not have been counted: at start, those made
//! before the restart whose history write was lost (a crash between a bind and its status
//! write, or a write that failed while the API server was away); afterwards, each pod the
//! watch shows bound by someone else (an earlier tether's bind that landed after this one
//! started). Lives beside the writer because it is the writer's second entry point.

use std::sync::Arc;

use futures::StreamExt;

use jiff::{SignedDuration, Timestamp};

use crate::api::StickyBinding;
use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::sticky::bindings::BindingLookup;
use crate::sticky::history::HistoryWriter;

/// How recently a bound pod without any binding must have been bound to be counted: an older
/// one may have had its binding deleted by a person, to free the workload. Both ends of the
/// comparison are the API server's clock: the bind time is the `PodScheduled` condition it set,
/// and "now" is the `Date` of its answer ([`server_now`]).
const UNBOUND_WINDOW: SignedDuration = SignedDuration::from_mins(10);

/// The API server's clock now: the `Date` header of its answer to a cheap request (`/version`),
/// to second precision. None when it does not answer or sends no readable date.
pub async fn server_now(client: &kube::Client) -> Option<Timestamp> {
    let request = http::Request::get("/version")
        .body(kube::client::Body::empty())
        .ok()?;
    let response = client.send(request).await.ok()?;
    let date = response.headers().get(http::header::DATE)?.to_str().ok()?;
    parse_http_date(date)
}

/// Reads an HTTP date (`Sun, 06 Nov 1994 08:49:37 GMT`, RFC 9110's IMF-fixdate, which RFC 2822
/// also reads).
fn parse_http_date(date: &str) -> Option<Timestamp> {
    jiff::fmt::rfc2822::DateTimeParser::new()
        .parse_timestamp(date)
        .ok()
}

/// Whether the bind of `pod` (bound at `bound_at`) is missing from `binding`. A pod in
/// `countedPods` or `recentBinds` never is, nor one bound before `countedBefore` (which vouches
/// for those); with a binding that keeps `countedPods` or `countedBefore`, every other pod is
/// (decided by UID alone); with an older binding that keeps neither, a pod bound after its last
/// recorded bind is; without a binding, a pod bound in the last ten minutes is. Pure.
pub fn missed(
    pod: &Pod,
    bound_at: Timestamp,
    binding: Option<&StickyBinding>,
    now: Timestamp,
) -> bool {
    match binding {
        Some(b) => {
            let empty = crate::api::StickyBindingStatus::default();
            let status = b.status.as_ref().unwrap_or(&empty);
            let uid = pod.metadata.uid.as_deref().unwrap_or_default();
            if status.recent_binds.iter().any(|r| r.pod_uid == uid)
                || status.counted_pods.iter().any(|u| u == uid)
                || status
                    .counted_before
                    .as_ref()
                    .is_some_and(|t| bound_at < t.0)
            {
                return false;
            }
            !status.counted_pods.is_empty()
                || status.counted_before.is_some()
                || status
                    .last_schedule_time
                    .as_ref()
                    .is_none_or(|t| t.0 < bound_at)
        }
        None => now.duration_since(bound_at) < UNBOUND_WINDOW,
    }
}

/// How long the reconcile waits for owners it does not know yet (a custom kind whose watch
/// starts when a pod names it) before giving up on their pods.
const OWNER_WAIT: std::time::Duration = std::time::Duration::from_secs(300);

/// How many history writes the reconcile has in flight at most.
const RECONCILE_WRITERS: usize = 16;

/// Records the binds among `pods` (bound pods of profiles that record history) that their
/// bindings missed. A pod already counted is never counted twice. Pods whose owner is not
/// known yet (custom owner kinds are watched from the moment a pod names them) are tried
/// again, with a backoff, until their owner is known, as built-in kinds' pods are.
///
/// Pruning of `countedPods` pauses when this is called, not when the future first runs, and
/// resumes when it ends: the decisions are made from `pods`, which may be deleted meanwhile,
/// and a pod dropped from `countedPods` would look missed.
///
/// Only the binds a reader of the pod's profile reads are recorded (`reads`, the rule
/// PlacementRecorder follows at PostBind: not the pods of a multi-replica workload under
/// `skipMultiReplica`, of an excluded namespace, or with the opt-out annotation), so a restart
/// writes no history the binds themselves would not have written.
pub fn record_missed_binds(
    writer: Arc<HistoryWriter>,
    pods: Vec<Arc<Pod>>,
    reads: Reads,
) -> impl Future<Output = ()> + Send + 'static {
    let paused = writer.pause_pruning();
    async move {
        record_each(writer, pods, reads).await;
        drop(paused);
    }
}

/// Whether a reader of `pod`'s profile reads its workload's history (see
/// [`record_missed_binds`]).
pub type Reads = Arc<dyn Fn(&Pod, &crate::sticky::workload::Workload) -> bool + Send + Sync>;

/// A [`Reads`] that reads every workload's history (tests).
pub fn reads_all() -> Reads {
    Arc::new(|_, _| true)
}

async fn record_each(writer: Arc<HistoryWriter>, pods: Vec<Arc<Pod>>, reads: Reads) {
    let mut waiting = pods;
    let mut delay = std::time::Duration::from_secs(1);
    let give_up = tokio::time::Instant::now() + OWNER_WAIT;
    loop {
        // The API server's clock is asked only when a pod has no binding to decide by.
        let mut now = None;
        let mut later = Vec::new();
        let mut missed_binds = Vec::new();
        for pod in waiting {
            let Some(bound_at) = pods::bound_at(&pod) else {
                continue;
            };
            // Counted when its migration completes (`super::migrations`), never from its bind.
            if crate::sticky::kubevirt::migration_of(&pod).is_some() {
                continue;
            }
            let workload = writer.workload_of(&pod);
            if workload.pending_owner.is_some() {
                later.push(pod);
                continue;
            }
            if !reads(&pod, &workload) {
                continue;
            }
            let binding = writer
                .bindings()
                .get(&workload.namespace, &workload.binding_name())
                .filter(|b| workload.owns(b));
            if binding.is_none() && now.is_none() {
                now = Some(server_clock(writer.client()).await);
            }
            let now = now.unwrap_or_else(Timestamp::now);
            if missed(&pod, bound_at, binding.as_deref(), now) {
                let node = pods::node_name(&pod).unwrap_or_default().to_string();
                tracing::info!(pod = %pods::key(&pod), node = %node, "recording a bind this tether did not make");
                missed_binds.push((pod, node));
            }
        }
        // Several at a time, so that the writer counts each binding's missed binds in one or two
        // writes rather than one write per pod.
        futures::stream::iter(&missed_binds)
            .for_each_concurrent(RECONCILE_WRITERS, |(pod, node)| {
                writer.record_bind(pod, node)
            })
            .await;
        if later.is_empty() {
            break;
        }
        if tokio::time::Instant::now() >= give_up {
            tracing::warn!(
                pods = later.len(),
                "the owners of some bound pods stayed unknown; their binds are not recorded"
            );
            break;
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(std::time::Duration::from_secs(30));
        waiting = later;
    }
}

/// The API server's clock ([`server_now`]), or this machine's (with a warning) when it does
/// not say.
async fn server_clock(client: &kube::Client) -> Timestamp {
    server_now(client).await.unwrap_or_else(|| {
        tracing::warn!(
            "the API server's clock is unknown (no Date on its answer); using this machine's to decide which binds without a binding to count"
        );
        Timestamp::now()
    })
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    use super::*;
    use crate::api::{BindRecord, StickyBindingSpec, StickyBindingStatus, WorkloadRef};

    fn at(second: i64) -> Timestamp {
        Timestamp::from_second(1_700_000_000 + second).expect("ts")
    }

    fn pod(uid: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.uid = Some(uid.into());
        p
    }

    fn binding(recorded: &[&str], last: i64) -> StickyBinding {
        let mut b = StickyBinding::new(
            "b",
            StickyBindingSpec {
                workload_ref: WorkloadRef {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name: "p".into(),
                    ordinal: None,
                },
                node_name: None,
            },
        );
        b.status = Some(StickyBindingStatus {
            last_schedule_time: Some(Time(at(last))),
            recent_binds: recorded
                .iter()
                .map(|uid| BindRecord {
                    pod_uid: uid.to_string(),
                    pod_name: "p".into(),
                    node: "n".into(),
                    time: Time(at(last)),
                })
                .collect(),
            ..Default::default()
        });
        b
    }

    #[test]
    fn only_binds_the_binding_has_not_seen_are_counted_again() {
        let now = at(3600);
        let cases = [
            ("already recorded", binding(&["u1"], 0), 10, false),
            ("bound after the last record", binding(&["u0"], 0), 10, true),
            (
                "bound before the last record",
                binding(&["u0"], 20),
                10,
                false,
            ),
        ];
        for (name, b, bound, want) in cases {
            assert_eq!(missed(&pod("u1"), at(bound), Some(&b), now), want, "{name}");
        }
        assert!(
            missed(&pod("u1"), at(3500), None, now),
            "no binding, bound lately"
        );
        assert!(
            !missed(&pod("u1"), at(0), None, now),
            "no binding, bound an hour ago: a person may have freed it"
        );
    }

    #[test]
    fn the_api_servers_date_is_read() {
        assert_eq!(
            parse_http_date("Mon, 23 Nov 2026 13:38:44 GMT"),
            Some("2026-11-23T13:38:44Z".parse().expect("ts"))
        );
        assert_eq!(parse_http_date("yesterday"), None);
    }

    #[tokio::test]
    async fn now_is_the_api_servers_clock() {
        let client = crate::scheduler::testing::stand_in_client(|_, _, _| {
            (200, serde_json::json!({"major": "1", "minor": "36"}))
        });
        // The stand-in sends no Date: unknown, never this machine's clock in disguise.
        assert_eq!(server_now(&client).await, None);
    }

    #[test]
    fn with_counted_pods_the_decision_is_by_uid_alone_whatever_the_clocks_say() {
        let now = at(3600);
        let mut b = binding(&["u9"], 20);
        if let Some(s) = b.status.as_mut() {
            s.counted_pods = vec!["u1".into(), "u9".into()];
        }
        // u1 fell out of recentBinds long ago: still counted, even "bound after" the last write
        // by another machine's clock.
        assert!(!missed(&pod("u1"), at(30), Some(&b), now));
        // u2 was never counted, even though its bind time reads "before" the last write.
        assert!(missed(&pod("u2"), at(10), Some(&b), now));
    }

    /// `countedBefore` vouches for every pod bound before it, listed or not; a pod bound since
    /// is decided by UID, even when `countedPods` has emptied.
    #[test]
    fn counted_before_vouches_for_older_binds_and_leaves_newer_ones_to_their_uid() {
        let now = at(3600);
        let mut b = binding(&["u9"], 20);
        if let Some(s) = b.status.as_mut() {
            s.counted_pods = Vec::new();
            s.counted_before = Some(Time(at(100)));
        }
        assert!(!missed(&pod("old"), at(99), Some(&b), now), "vouched for");
        assert!(
            missed(&pod("new"), at(100), Some(&b), now),
            "bound at it: not vouched for, and not listed"
        );
        assert!(!missed(&pod("u9"), at(150), Some(&b), now), "listed");
    }
}
