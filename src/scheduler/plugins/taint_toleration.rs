//! TaintToleration: keeps pods off nodes whose NoSchedule / NoExecute taints they do not
//! tolerate, and prefers nodes with fewer untolerated PreferNoSchedule taints, as
//! kube-scheduler's TaintToleration Filter, PreScore, Score and NormalizeScore.

use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::plugins::handle::Handle;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Toleration};

use crate::k8s::pod::PodSpec;
use crate::k8s::taints::{self, find_untolerated, tolerates};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};

use crate::scheduler::plugins::helper::{default_normalize_score, expect_no_args};

pub const NAME: &str = "TaintToleration";
/// Upstream's default weight of this plugin's score.
pub const DEFAULT_WEIGHT: i32 = 3;

const PRE_SCORE_STATE_KEY: &str = "PreScoreTaintToleration";

/// The pod's tolerations that can tolerate a PreferNoSchedule taint (that effect or none),
/// computed once in PreScore.
struct PreScoreState {
    tolerations_prefer_no_schedule: Vec<Toleration>,
}

/// Filters on hard taints and scores on soft ones.
#[derive(Clone, Copy, Debug, Default)]
pub struct TaintToleration;

fn pod_tolerations(pod: &PodInfo) -> &[Toleration] {
    pod.pod.spec.as_ref().map_or(&[], PodSpec::tolerations)
}

impl Plugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        signature.part(
            crate::scheduler::framework::signature::TOLERATIONS,
            &crate::scheduler::framework::signature::tolerations(pod),
        );
        true
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(vec![
            Registration::new(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_TAINT,
                ),
                Arc::new(after_node_change),
            ),
            Registration::new(
                ClusterEvent::new(EventResource::Pod, ActionType::UPDATE_POD_TOLERATION),
                Arc::new(after_toleration_added),
            ),
        ])
    }

    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }

    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }

    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// The reason a node with an untolerated NoSchedule or NoExecute taint is filtered out,
/// upstream's ErrReasonNotMatch: it names no taint, so that the failure message counts every such
/// node under one reason.
pub const ERR_REASON_NOT_MATCH: &str = "node(s) had untolerated taint(s)";

impl FilterPlugin for TaintToleration {
    /// UnschedulableAndUnresolvable on the first untolerated NoSchedule or NoExecute taint; the
    /// taint is named in the debug log only, as upstream logs it.
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match find_untolerated(&node.taints, pod_tolerations(pod), taints::is_hard) {
            None => Status::success(),
            Some(taint) => {
                tracing::debug!(node = %node.name, pod = %pod.key(), taint = %taint.key, "node had untolerated taints");
                Status::unresolvable(ERR_REASON_NOT_MATCH)
            }
        }
    }

    /// Every NoSchedule and NoExecute taint of the node the pod does not tolerate.
    fn remedy(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let tolerations = pod_tolerations(pod);
        let untolerated: Vec<String> = node
            .taints
            .iter()
            .filter(|t| taints::is_hard(t))
            .filter(|t| {
                !tolerations
                    .iter()
                    .any(|tol| crate::k8s::taints::tolerates(tol, t))
            })
            .map(|t| match t.value.as_deref().filter(|v| !v.is_empty()) {
                Some(value) => format!("{}={value}:{}", t.key, t.effect),
                None => format!("{}:{}", t.key, t.effect),
            })
            .collect();
        match untolerated.as_slice() {
            [] => None,
            [one] => Some(format!(
                "tolerate the taint {one} of {}, or remove it",
                node.name
            )),
            many => Some(format!(
                "tolerate the taints {} of {}, or remove them",
                many.join(", "),
                node.name
            )),
        }
    }
}

impl PreScorePlugin for TaintToleration {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let tolerations_prefer_no_schedule = pod_tolerations(pod)
            .iter()
            .filter(|t| {
                t.effect
                    .as_deref()
                    .is_none_or(|e| e.is_empty() || e == "PreferNoSchedule")
            })
            .cloned()
            .collect();
        state.write(
            PRE_SCORE_STATE_KEY,
            PreScoreState {
                tolerations_prefer_no_schedule,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for TaintToleration {
    /// The number of PreferNoSchedule taints on the node the pod does not tolerate.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_STATE_KEY)
            .ok_or_else(|| Status::error("TaintToleration: PreScore state not found"))?;
        let count = node
            .taints
            .iter()
            .filter(|t| t.effect == "PreferNoSchedule")
            .filter(|t| {
                !s.tolerations_prefer_no_schedule
                    .iter()
                    .any(|tol| tolerates(tol, t))
            })
            .count();
        Ok(count as i64)
    }

    /// Fewer untolerated taints score higher: the reversed DefaultNormalizeScore.
    fn normalize_scores(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        default_normalize_score(MAX_NODE_SCORE, true, scores);
        Status::success()
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    _handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(TaintToleration))
}

/// Whether the pod does not tolerate a NoSchedule or NoExecute taint of `node`.
fn untolerated(pod: &PodInfo, node: &Node) -> bool {
    find_untolerated(taints::of_node(node), pod_tolerations(pod), taints::is_hard).is_some()
}

/// A node added, or whose taints changed, that the pod now tolerates.
fn after_node_change(pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let Some((old, new)) = events::node_change(old, new) else {
        return Hint::Queue;
    };
    let was = old.is_none_or(|old| untolerated(pod, old));
    events::queue_if(was && !untolerated(pod, new))
}

/// The pod itself got a toleration.
fn after_toleration_added(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    match events::pod_update(old, new) {
        Some(new) => events::queue_if(events::is_same_pod(pod, new)),
        None => Hint::Queue,
    }
}

/// As kube-scheduler 1.37's: nothing to do here (it matters only to resizes deferred for
/// preemption, an alpha feature), so Filter runs as before; listed at PreFilter as upstream lists
/// it.
impl PreFilterPlugin for TaintToleration {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        _pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        (PreFilterResult::all_nodes(), Status::success())
    }
}

#[cfg(test)]
mod tests {

    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn untolerated() -> Status {
        Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON_NOT_MATCH)
    }

    #[test]
    fn filter_rejects_untolerated_hard_taints() {
        let cases = [
            (
                "a pod having no tolerations can't be scheduled onto a node with nonempty taints",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint("dedicated", "user1", "NoSchedule"),
                untolerated(),
            ),
            (
                "a pod tolerating the dedicated taint with effect NoSchedule",
                PodBuilder::new("p").toleration("dedicated", "Equal", "user1", "NoSchedule"),
                NodeBuilder::new("n").taint("dedicated", "user1", "NoSchedule"),
                Status::success(),
            ),
            (
                "a pod tolerating another value can't be scheduled",
                PodBuilder::new("p").toleration("dedicated", "Equal", "user2", "NoSchedule"),
                NodeBuilder::new("n").taint("dedicated", "user1", "NoSchedule"),
                untolerated(),
            ),
            (
                "a toleration with operator Exists tolerates the taint",
                PodBuilder::new("p").toleration("foo", "Exists", "", "NoSchedule"),
                NodeBuilder::new("n").taint("foo", "bar", "NoSchedule"),
                Status::success(),
            ),
            (
                "multiple tolerations tolerate all of multiple taints",
                PodBuilder::new("p")
                    .toleration("dedicated", "Equal", "user2", "NoSchedule")
                    .toleration("foo", "Exists", "", "NoSchedule"),
                NodeBuilder::new("n")
                    .taint("dedicated", "user2", "NoSchedule")
                    .taint("foo", "bar", "NoSchedule"),
                Status::success(),
            ),
            (
                "key and value match but the non-empty effect differs",
                PodBuilder::new("p").toleration("foo", "Equal", "bar", "PreferNoSchedule"),
                NodeBuilder::new("n").taint("foo", "bar", "NoSchedule"),
                untolerated(),
            ),
            (
                "key and value match and the toleration's effect is empty",
                PodBuilder::new("p").toleration("foo", "Equal", "bar", ""),
                NodeBuilder::new("n").taint("foo", "bar", "NoSchedule"),
                Status::success(),
            ),
            (
                "an untolerated PreferNoSchedule taint does not filter",
                PodBuilder::new("p").toleration("dedicated", "Equal", "user2", "NoSchedule"),
                NodeBuilder::new("n").taint("dedicated", "user1", "PreferNoSchedule"),
                Status::success(),
            ),
            (
                "no tolerations and only a PreferNoSchedule taint",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint("dedicated", "user1", "PreferNoSchedule"),
                Status::success(),
            ),
            (
                "an untolerated NoExecute taint filters",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint("evict", "now", "NoExecute"),
                untolerated(),
            ),
            (
                "an empty taint value prints empty",
                PodBuilder::new("p"),
                NodeBuilder::new("n").taint("gpu", "", "NoSchedule"),
                untolerated(),
            ),
        ];
        for (name, pod, node, want) in cases {
            let got = FilterPlugin::filter(
                &TaintToleration,
                &CycleState::new(),
                &pod.info(),
                &node.info(vec![]),
            );
            assert_eq!(got, want, "{name}");
        }
    }

    /// Runs PreScore, Score on every node and NormalizeScore; returns the final scores.
    fn run_score(pod: PodBuilder, nodes: Vec<NodeBuilder>) -> Vec<i64> {
        let pod = pod.info();
        let infos: Vec<Arc<NodeInfo>> = nodes
            .into_iter()
            .map(|n| Arc::new(n.info(vec![])))
            .collect();
        let mut state = CycleState::new();
        let status = PreScorePlugin::pre_score(
            &TaintToleration,
            &mut state,
            &pod,
            &infos,
            &Snapshot::default(),
        );
        assert!(status.is_success(), "{status}");
        let mut scores: Vec<NodeScore> = infos
            .iter()
            .map(|n| NodeScore {
                name: n.name.clone(),
                score: ScorePlugin::score(&TaintToleration, &state, &pod, n).expect("score"),
            })
            .collect();
        assert!(
            TaintToleration
                .normalize_scores(&state, &pod, &mut scores)
                .is_success()
        );
        scores.into_iter().map(|s| s.score).collect()
    }

    #[test]
    fn score_prefers_fewer_untolerated_prefer_no_schedule_taints() {
        let cases = [
            (
                "a node whose taint is tolerated beats one whose taint is not",
                PodBuilder::new("p").toleration("foo", "Equal", "bar", "PreferNoSchedule"),
                vec![
                    NodeBuilder::new("a").taint("foo", "bar", "PreferNoSchedule"),
                    NodeBuilder::new("b").taint("foo", "blah", "PreferNoSchedule"),
                ],
                // raw 0, 1 → reversed 100, 0
                vec![100, 0],
            ),
            (
                "nodes whose taints are all tolerated score the same, however many",
                PodBuilder::new("p")
                    .toleration("cpu-type", "Equal", "arm64", "PreferNoSchedule")
                    .toleration("disk-type", "Equal", "ssd", "PreferNoSchedule"),
                vec![
                    NodeBuilder::new("a"),
                    NodeBuilder::new("b").taint("cpu-type", "arm64", "PreferNoSchedule"),
                    NodeBuilder::new("c")
                        .taint("cpu-type", "arm64", "PreferNoSchedule")
                        .taint("disk-type", "ssd", "PreferNoSchedule"),
                ],
                // raw 0, 0, 0 → all max
                vec![100, 100, 100],
            ),
            (
                "the more untolerated taints, the lower the score",
                PodBuilder::new("p").toleration("foo", "Equal", "bar", "PreferNoSchedule"),
                vec![
                    NodeBuilder::new("a"),
                    NodeBuilder::new("b").taint("cpu-type", "arm64", "PreferNoSchedule"),
                    NodeBuilder::new("c")
                        .taint("cpu-type", "arm64", "PreferNoSchedule")
                        .taint("disk-type", "ssd", "PreferNoSchedule"),
                ],
                // raw 0, 1, 2 → 100 - 100*r/2 = 100, 50, 0
                vec![100, 50, 0],
            ),
            (
                "only PreferNoSchedule taints and tolerations count",
                PodBuilder::new("p")
                    .toleration("cpu-type", "Equal", "arm64", "NoSchedule")
                    .toleration("disk-type", "Equal", "ssd", "NoSchedule"),
                vec![
                    NodeBuilder::new("a"),
                    NodeBuilder::new("b").taint("cpu-type", "arm64", "NoSchedule"),
                    NodeBuilder::new("c")
                        .taint("cpu-type", "arm64", "PreferNoSchedule")
                        .taint("disk-type", "ssd", "PreferNoSchedule"),
                ],
                // raw 0, 0, 2 → 100, 100, 0
                vec![100, 100, 0],
            ),
            (
                "a toleration with an empty effect counts for PreferNoSchedule",
                PodBuilder::new("p").toleration("cpu-type", "Exists", "", ""),
                vec![
                    NodeBuilder::new("a").taint("cpu-type", "arm64", "PreferNoSchedule"),
                    NodeBuilder::new("b").taint("disk-type", "ssd", "PreferNoSchedule"),
                ],
                vec![100, 0],
            ),
            (
                "no taints and no tolerations",
                PodBuilder::new("p"),
                vec![
                    NodeBuilder::new("a"),
                    NodeBuilder::new("b").taint("cpu-type", "arm64", "PreferNoSchedule"),
                ],
                vec![100, 0],
            ),
            (
                "three untolerated taints against one",
                PodBuilder::new("p"),
                vec![
                    NodeBuilder::new("a").taint("x", "", "PreferNoSchedule"),
                    NodeBuilder::new("b")
                        .taint("x", "", "PreferNoSchedule")
                        .taint("y", "", "PreferNoSchedule")
                        .taint("z", "", "PreferNoSchedule"),
                ],
                // raw 1, 3 → 100 - 100*1/3 = 67, 0
                vec![67, 0],
            ),
        ];
        for (name, pod, nodes, want) in cases {
            assert_eq!(run_score(pod, nodes), want, "{name}");
        }
    }

    #[test]
    fn score_without_pre_score_is_an_error() {
        let got = ScorePlugin::score(
            &TaintToleration,
            &CycleState::new(),
            &PodBuilder::new("p").info(),
            &NodeBuilder::new("n").info(vec![]),
        );
        assert_eq!(got.map_err(|s| s.code), Err(Code::Error));
    }

    /// Upstream's `podWithTolerations("pod1", {dedicated Equal user2 NoSchedule})`.
    fn tolerating_user2() -> PodBuilder {
        PodBuilder::new("pod1").toleration("dedicated", "Equal", "user2", "NoSchedule")
    }

    /// Upstream's `nodeWithTaints("nodeA", ..)`: one `dedicated=<value>:NoSchedule` taint a value.
    fn node_a(values: &[&str]) -> Option<EventObject> {
        let node = values.iter().fold(NodeBuilder::new("nodeA"), |n, v| {
            n.taint("dedicated", v, "NoSchedule")
        });
        Some(EventObject::Node(Arc::new(node.build())))
    }

    /// An event object of the wrong kind for a node hint (upstream's `"not-a-node"`).
    fn not_a_node() -> Option<EventObject> {
        Some(EventObject::Pod(Arc::new(
            PodBuilder::new("not-a-node").build(),
        )))
    }

    /// Upstream `TestIsSchedulableAfterNodeChange` (tainttoleration), every row but
    /// "backoff-wrong-old-object" (its own test below): (name, pod, old node, new node, hint).
    /// Upstream's pod is nil in the "backoff" rows; here it has no tolerations.
    #[test]
    fn upstream_is_schedulable_after_node_change() {
        let rows = [
            (
                "backoff-wrong-new-object",
                PodBuilder::new("pod1"),
                None,
                not_a_node(),
                Hint::Queue,
            ),
            (
                "skip-queue-on-untoleratedtaint-node-added",
                tolerating_user2(),
                None,
                node_a(&["user1"]),
                Hint::Skip,
            ),
            (
                "queue-on-toleratedtaint-node-added",
                tolerating_user2(),
                None,
                node_a(&["user2"]),
                Hint::Queue,
            ),
            (
                "skip-unrelated-change",
                tolerating_user2(),
                node_a(&["user1"]),
                node_a(&["user1", "user3"]),
                Hint::Skip,
            ),
            (
                "queue-on-taint-change",
                tolerating_user2(),
                node_a(&["user1"]),
                node_a(&["user2"]),
                Hint::Queue,
            ),
        ];
        for (name, pod, old, new, want) in rows {
            assert_eq!(
                after_node_change(&pod.info(), old.as_ref(), new.as_ref()),
                want,
                "{name}"
            );
        }
    }

    /// Upstream `TestIsSchedulableAfterNodeChange` (tainttoleration) "backoff-wrong-old-object":
    /// an old object that is not a node is an error upstream, so the pod is queued (tether's
    /// `HintFn` documents the same rule), even though the new node's taint is not tolerated.
    #[test]
    fn upstream_is_schedulable_after_node_change_wrong_old_object() {
        assert_eq!(
            after_node_change(
                &PodBuilder::new("pod1").info(),
                not_a_node().as_ref(),
                node_a(&["user1"]).as_ref()
            ),
            Hint::Queue,
            "backoff-wrong-old-object"
        );
    }

    /// Upstream `Test_isSchedulableAfterTargetPodTolerationChange`, "queue-on-toleration-added".
    /// Upstream registers the hint for the target pod only; tether's hint checks that the
    /// updated pod is the pending one by uid, so all three share `PodBuilder`'s uid.
    #[test]
    fn upstream_is_schedulable_after_target_pod_toleration_change() {
        let pod = || PodBuilder::new("pod-1").namespace("ns-1");
        let old = EventObject::Pod(Arc::new(pod().build()));
        let new = EventObject::Pod(Arc::new(
            pod()
                .with(|p| {
                    p.spec.get_or_insert_with(Default::default).tolerations = Some(
                        vec![Toleration {
                            key: Some("foo".into()),
                            effect: Some("NoSchedule".into()),
                            ..Default::default()
                        }]
                        .into(),
                    );
                })
                .build(),
        ));
        assert_eq!(
            after_toleration_added(&pod().info(), Some(&old), Some(&new)),
            Hint::Queue,
            "queue-on-toleration-added"
        );
    }
}
