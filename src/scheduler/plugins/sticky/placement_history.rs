//! PlacementHistory: when a workload's pod is scheduled again, prefer the nodes the workload
//! used least, as the out-of-tree "SPPriority" plugin, with the history read from the
//! StickyBinding's status (`latest`, `nodeCount`, `scheduleCount`) instead of ReplicaSet
//! annotations. The history is written after each bind by the PlacementRecorder PostBind plugin, not
//! by this plugin.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

use crate::scheduler::framework::HistoryReadership;
use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::FieldPath;
use crate::scheduler::framework::validation::{FieldErrors, decode_args};
use crate::scheduler::framework::{
    CycleState, MAX_NODE_SCORE, MIN_NODE_SCORE, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::plugins::handle::Handle;
use crate::sticky::bindings::BindingLookup;
use crate::sticky::workload::OwnerLookup;

use crate::scheduler::plugins::sticky::{cycle_workload, opted_out, wait_for_owner};

pub const NAME: &str = "PlacementHistory";

/// The weight it scores with unless the profile says otherwise, high enough to outweigh the
/// default Score plugins, as SPPriority's.
pub const DEFAULT_WEIGHT: i32 = 5;

/// The annotation that turns the plugin off for a pod (value `"true"`) unless the args name
/// another.
pub const DEFAULT_DISABLE_ANNOTATION: &str = "tether.dev/placement-history-disabled";

/// The CycleState key of the history read in PreScore.
const STATE_KEY: &str = "PreScorePlacementHistory";

/// The plugin's args.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct PlacementHistoryArgs {
    /// Leave alone the pods of a ReplicaSet or Deployment with more than one replica.
    /// StatefulSet ordinals each have their own history whatever the replicas.
    pub skip_multi_replica: bool,
    /// Namespaces whose pods the plugin leaves alone.
    pub excluded_namespaces: Vec<String>,
    /// A pod annotation that, set to `"true"`, turns the plugin off for that pod.
    pub disable_annotation: String,
}

impl Default for PlacementHistoryArgs {
    fn default() -> Self {
        PlacementHistoryArgs {
            skip_multi_replica: true,
            excluded_namespaces: Vec::new(),
            disable_annotation: DEFAULT_DISABLE_ANNOTATION.into(),
        }
    }
}

impl PlacementHistoryArgs {
    /// Checks the args, naming fields under `path` (e.g. `pluginConfig[0].args.disableAnnotation`).
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        if self.disable_annotation.is_empty() {
            errs.push(path.child("disableAnnotation"), "must not be empty");
        }
        for (i, ns) in self.excluded_namespaces.iter().enumerate() {
            if ns.is_empty() {
                errs.push(
                    path.child("excludedNamespaces").index(i),
                    "must not be empty",
                );
            }
        }
        errs.into_result()
    }
}

/// Scores nodes by how rarely the pod's workload was placed on them.
pub struct PlacementHistory {
    args: PlacementHistoryArgs,
    owners: Arc<dyn OwnerLookup>,
    bindings: Arc<dyn BindingLookup>,
}

/// The workload's history, read once in PreScore.
#[derive(Clone, Debug, PartialEq, Eq)]
struct History {
    latest: Option<String>,
    node_count: BTreeMap<String, i64>,
    schedule_count: i64,
}

/// The score of `node` given the workload's history: the node it was last bound to (`latest`)
/// scores 0; any other node `n` scores `(1 - count[n] / (total - count[latest])) * 100`,
/// floored and clamped to 0..=100, so the nodes used least score highest. When no bind went
/// elsewhere than `latest` (the denominator is <= 0), every other node scores 100.
pub fn history_score(
    node: &str,
    latest: Option<&str>,
    node_count: &BTreeMap<String, i64>,
    schedule_count: i64,
) -> i64 {
    if latest == Some(node) {
        return MIN_NODE_SCORE;
    }
    let count = |n: &str| node_count.get(n).copied().unwrap_or(0);
    let others = schedule_count - latest.map_or(0, count);
    if others <= 0 {
        return MAX_NODE_SCORE;
    }
    let score = (MAX_NODE_SCORE * (others - count(node))).div_euclid(others);
    score.clamp(MIN_NODE_SCORE, MAX_NODE_SCORE)
}

impl Plugin for PlacementHistory {
    fn name(&self) -> &'static str {
        NAME
    }

    fn history_readership(&self) -> Option<HistoryReadership> {
        Some(HistoryReadership {
            skip_multi_replica: self.args.skip_multi_replica,
            excluded_namespaces: self.args.excluded_namespaces.clone(),
            disable_annotation: self.args.disable_annotation.clone(),
        })
    }

    /// Its PreFilter only waits for the pod's owner, and asks to be retried then itself.
    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(Vec::new())
    }

    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn pre_score(&self) -> Option<&dyn PreScorePlugin> {
        Some(self)
    }

    fn score(&self) -> Option<&dyn ScorePlugin> {
        Some(self)
    }
}

/// PreFilter only holds a pod back while its workload is not known yet, so that its history
/// is neither read from nor written to the wrong binding.
impl PreFilterPlugin for PlacementHistory {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let workload = cycle_workload(state, pod, self.owners.as_ref());
        let status = wait_for_owner(&pod.pod, &workload).unwrap_or_else(Status::skip);
        (PreFilterResult::all_nodes(), status)
    }
}

impl PreScorePlugin for PlacementHistory {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let args = &self.args;
        if opted_out(
            &pod.pod,
            &args.excluded_namespaces,
            &args.disable_annotation,
        ) {
            return Status::skip();
        }
        let workload = cycle_workload(state, pod, self.owners.as_ref());
        if workload.pending_owner.is_some()
            || (args.skip_multi_replica && workload.is_multi_replica())
        {
            return Status::skip();
        }
        let Some(status) = self
            .bindings
            .get(&workload.namespace, &workload.binding_name())
            .filter(|b| workload.owns(b))
            .and_then(|b| b.status.clone())
            .filter(|s| s.schedule_count > 0)
        else {
            return Status::skip();
        };
        state.write(
            STATE_KEY,
            History {
                latest: status.latest,
                node_count: status.node_count,
                schedule_count: status.schedule_count,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for PlacementHistory {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let h = state.read::<History>(STATE_KEY).ok_or_else(|| {
            Status::error(format!("{NAME}: no history in the cycle state for Score"))
        })?;
        Ok(history_score(
            &node.name,
            h.latest.as_deref(),
            &h.node_count,
            h.schedule_count,
        ))
    }
}

/// Builds the plugin from its args (absent means defaults), validated and named under `path`.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let owners = handle.owners.clone();
    let bindings = handle.bindings.clone();
    let args: PlacementHistoryArgs = decode_args(args, path)?;
    args.validate(path)?;
    Ok(Arc::new(PlacementHistory {
        args,
        owners,
        bindings,
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use serde_json::json;

    use super::*;
    use crate::api::{StickyBinding, StickyBindingSpec, StickyBindingStatus};
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};
    use crate::sticky::bindings::BindingIndex;
    use crate::sticky::workload::OwnerMeta;

    fn counts(c: &[(&str, i64)]) -> BTreeMap<String, i64> {
        c.iter().map(|(n, k)| (n.to_string(), *k)).collect()
    }

    /// A row of hand-computed scores: the counts, latest, total, and (node, score) wanted.
    type ScoreCase = (
        &'static str,
        &'static [(&'static str, i64)],
        Option<&'static str>,
        i64,
        Vec<(&'static str, i64)>,
    );

    #[test]
    fn history_score_by_hand() {
        let cases: Vec<ScoreCase> = vec![
            (
                "a:3 b:1 c:0, latest a",
                &[("a", 3), ("b", 1), ("c", 0)],
                Some("a"),
                4,
                vec![("a", 0), ("b", 0), ("c", 100)],
            ),
            (
                "a:5 b:3 c:2, latest a",
                &[("a", 5), ("b", 3), ("c", 2)],
                Some("a"),
                10,
                vec![("a", 0), ("b", 40), ("c", 60)],
            ),
            (
                "SPPriority's example A:11 B:3 C:6, latest A: floored",
                &[("A", 11), ("B", 3), ("C", 6)],
                Some("A"),
                20,
                vec![("A", 0), ("B", 66), ("C", 33), ("D", 100)],
            ),
            (
                "only ever on latest: every other node 100",
                &[("a", 4)],
                Some("a"),
                4,
                vec![("a", 0), ("b", 100)],
            ),
            (
                "no latest: the whole history is the denominator",
                &[("a", 1), ("b", 3)],
                None,
                4,
                vec![("a", 75), ("b", 25), ("c", 100)],
            ),
            (
                "inconsistent counts clamp to 0",
                &[("a", 1), ("b", 9)],
                Some("a"),
                3,
                vec![("b", 0)],
            ),
        ];
        for (name, c, latest, total, want) in cases {
            let node_count = counts(c);
            for (node, score) in want {
                assert_eq!(
                    history_score(node, latest, &node_count, total),
                    score,
                    "{name}: node {node}"
                );
            }
        }
    }

    struct Deployment3;

    impl OwnerLookup for Deployment3 {
        fn get(&self, _ns: &str, _api_version: &str, kind: &str, name: &str) -> Option<OwnerMeta> {
            (kind == "Deployment" && name == "web").then(|| OwnerMeta {
                api_version: "apps/v1".into(),
                kind: "Deployment".into(),
                name: "web".into(),
                uid: "uid-web".into(),
                controller: None,
                replicas: Some(3),
            })
        }
    }

    fn binding(namespace: &str, name: &str, status: StickyBindingStatus) -> StickyBinding {
        let mut b = StickyBinding::new(
            name,
            StickyBindingSpec {
                workload_ref: crate::scheduler::testing::workload_ref_for(name),
                node_name: None,
            },
        );
        b.metadata.namespace = Some(namespace.into());
        b.status = Some(status);
        b
    }

    fn history(latest: &str, c: &[(&str, i64)]) -> StickyBindingStatus {
        StickyBindingStatus {
            latest: Some(latest.into()),
            node_count: counts(c),
            schedule_count: c.iter().map(|(_, k)| k).sum(),
            ..Default::default()
        }
    }

    /// Runs PreScore then Score over n1..n3: `None` when PreScore skips.
    fn run(
        args: PlacementHistoryArgs,
        bindings: Vec<StickyBinding>,
        pod: PodBuilder,
    ) -> Option<Vec<i64>> {
        let index = BindingIndex::default();
        bindings.into_iter().for_each(|b| index.upsert(b));
        let pl = PlacementHistory {
            args,
            owners: Arc::new(Deployment3),
            bindings: Arc::new(index),
        };
        let snap = snapshot(
            ["n1", "n2", "n3"]
                .into_iter()
                .map(NodeBuilder::new)
                .collect(),
            vec![],
        );
        let pod = pod.info();
        let mut state = CycleState::new();
        let status = PreScorePlugin::pre_score(&pl, &mut state, &pod, snap.nodes(), &snap);
        if status.is_skip() {
            return None;
        }
        assert!(status.is_success(), "{status}");
        let scores = snap
            .nodes()
            .iter()
            .map(|n| ScorePlugin::score(&pl, &state, &pod, n).expect("scores"))
            .collect();
        Some(scores)
    }

    /// The scores of n1..n3, or `None` when PreScore skips.
    type Scores = Option<Vec<i64>>;

    #[test]
    fn pre_score_and_score() {
        let hist = || history("n1", &[("n1", 5), ("n2", 3), ("n3", 2)]);
        let pod = || PodBuilder::new("p");
        let web = || {
            PodBuilder::new("web-x").with(|p| {
                p.metadata.owner_references = Some(vec![OwnerReference {
                    api_version: "apps/v1".into(),
                    kind: "Deployment".into(),
                    name: "web".into(),
                    uid: "uid-web".into(),
                    controller: Some(true),
                    block_owner_deletion: None,
                }])
            })
        };
        let default = PlacementHistoryArgs::default;
        let cases: Vec<(
            &str,
            PlacementHistoryArgs,
            Vec<StickyBinding>,
            PodBuilder,
            Scores,
        )> = vec![
            ("no binding", default(), vec![], pod(), None),
            (
                "binding with no schedules",
                default(),
                vec![binding("default", "pod-p", StickyBindingStatus::default())],
                pod(),
                None,
            ),
            (
                "history scores",
                default(),
                vec![binding("default", "pod-p", hist())],
                pod(),
                Some(vec![0, 40, 60]),
            ),
            (
                "excluded namespace",
                PlacementHistoryArgs {
                    excluded_namespaces: vec!["default".into()],
                    ..default()
                },
                vec![binding("default", "pod-p", hist())],
                pod(),
                None,
            ),
            (
                "disable annotation",
                default(),
                vec![binding("default", "pod-p", hist())],
                pod().annotation(DEFAULT_DISABLE_ANNOTATION, "true"),
                None,
            ),
            (
                "skipMultiReplica: Deployment with 3 replicas",
                default(),
                vec![binding("default", "deployment-web", hist())],
                web(),
                None,
            ),
            (
                "skipMultiReplica off: Deployment with 3 replicas scores",
                PlacementHistoryArgs {
                    skip_multi_replica: false,
                    ..default()
                },
                vec![binding("default", "deployment-web", hist())],
                web(),
                Some(vec![0, 40, 60]),
            ),
        ];
        for (name, args, bindings, pod, want) in cases {
            assert_eq!(run(args, bindings, pod), want, "{name}");
        }
    }

    /// A row of args to decode and validate: the args, and the args or the paths of the errors.
    type ArgsCase<T> = (
        &'static str,
        Option<serde_json::Value>,
        Result<T, Vec<&'static str>>,
    );

    #[test]
    fn args_default_and_are_validated_naming_the_field() {
        let p = "pluginConfig[4].args";
        let cases: Vec<ArgsCase<PlacementHistoryArgs>> = vec![
            ("absent", None, Ok(PlacementHistoryArgs::default())),
            (
                "all set",
                Some(
                    json!({"skipMultiReplica": false, "excludedNamespaces": ["kube-system"], "disableAnnotation": "x/y"}),
                ),
                Ok(PlacementHistoryArgs {
                    skip_multi_replica: false,
                    excluded_namespaces: vec!["kube-system".into()],
                    disable_annotation: "x/y".into(),
                }),
            ),
            (
                "empty disableAnnotation and namespace",
                Some(json!({"disableAnnotation": "", "excludedNamespaces": [""]})),
                Err(vec![
                    "pluginConfig[4].args.disableAnnotation",
                    "pluginConfig[4].args.excludedNamespaces[0]",
                ]),
            ),
            (
                "unknown field",
                Some(json!({"namespaceWhiteList": ["kube-system"]})),
                Err(vec!["pluginConfig[4].args"]),
            ),
        ];
        for (name, args, want) in cases {
            let got = decode_args::<PlacementHistoryArgs>(args.as_ref(), &p.into())
                .and_then(|a| a.validate(&p.into()).map(|()| a));
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{name}"),
                (Err(errs), Err(paths)) => {
                    let got: Vec<&str> = errs.0.iter().map(|e| e.path.as_str()).collect();
                    assert_eq!(got, paths, "{name}");
                }
                (got, _) => panic!("{name}: got {got:?}"),
            }
            let built = build(args.as_ref(), &p.into(), &Handle::default());
            assert_eq!(
                built.is_ok(),
                name == "absent" || name == "all set",
                "{name}"
            );
        }
    }
}
