//! NodeAffinity: a pod fits nodes matching its `spec.nodeSelector` and required node affinity,
//! and prefers nodes matching its preferred terms, as kube-scheduler's NodeAffinity PreFilter,
//! Filter, PreScore, Score and NormalizeScore. Its args add a node affinity (`addedAffinity`)
//! that every pod of the profile must also satisfy and whose preferences add to every score.

mod hints;

use std::sync::Arc;

use k8s_openapi::api::core::v1::{NodeSelectorTerm, PreferredSchedulingTerm};
use serde::{Deserialize, Serialize};

use crate::k8s::node_selector::{self, NodeSelectorError, RequiredNodeAffinity, Term, Terms};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::topology::{NodeLabelIds, NodeMatcher};
use crate::scheduler::framework::validation::FieldPath;
use crate::scheduler::framework::validation::{FieldErrors, decode_args};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PreFilterPlugin, PreFilterResult,
    PreScorePlugin, ScorePlugin, Status,
};
use crate::scheduler::plugins::handle::Handle;

use crate::scheduler::framework::events::Registration;
use crate::scheduler::plugins::helper::default_normalize_score;

pub const NAME: &str = "NodeAffinity";
/// Upstream's default weight of this plugin's score.
pub const DEFAULT_WEIGHT: i32 = 2;

/// A node does not match the pod's nodeSelector or required node affinity (upstream's
/// ErrReasonPod).
pub const ERR_REASON_POD: &str = "node(s) didn't match Pod's node affinity/selector";
/// Every required term pins node names and no name is in all of one term's lists (upstream's
/// errReasonConflict).
pub const ERR_REASON_CONFLICT: &str = "pod affinity terms conflict";
/// A node does not match the profile's addedAffinity (upstream's errReasonEnforced).
pub const ERR_REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";

const PRE_FILTER_STATE_KEY: &str = "PreFilterNodeAffinity";
const PRE_SCORE_STATE_KEY: &str = "PreScoreNodeAffinity";

/// NodeAffinity's args, as kube-scheduler's NodeAffinityArgs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NodeAffinityArgs {
    /// Applied to every pod: its required terms must also match, its preferred terms add to
    /// the pod's own.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub added_affinity: Option<k8s_openapi::api::core::v1::NodeAffinity>,
}

/// Checks one node selector term requirement by requirement, so an error names the
/// requirement (`{path}.matchExpressions[1]`), as upstream's validation names them.
fn validate_term(term: &NodeSelectorTerm, path: &FieldPath, errs: &mut FieldErrors) {
    let groups = [
        ("matchExpressions", &term.match_expressions, false),
        ("matchFields", &term.match_fields, true),
    ];
    for (field, reqs, is_field) in groups {
        for (j, r) in reqs.iter().flatten().enumerate() {
            let single = if is_field {
                NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![r.clone()]),
                }
            } else {
                NodeSelectorTerm {
                    match_expressions: Some(vec![r.clone()]),
                    match_fields: None,
                }
            };
            if let Err(e) = Term::parse(&single) {
                errs.push(path.child(field).index(j), e.to_string());
            }
        }
    }
}

impl NodeAffinityArgs {
    /// Every term of addedAffinity must parse; errors name the term's full path under
    /// `{path}.addedAffinity`, as upstream's ValidateNodeAffinityArgs.
    pub fn validate(&self, path: &FieldPath) -> Result<(), FieldErrors> {
        let mut errs = FieldErrors::new();
        let Some(added) = self.added_affinity.as_ref() else {
            return Ok(());
        };
        let base = path.child("addedAffinity");
        if let Some(required) = added
            .required_during_scheduling_ignored_during_execution
            .as_ref()
        {
            for (i, term) in required.node_selector_terms.iter().enumerate() {
                let p = base
                    .child("requiredDuringSchedulingIgnoredDuringExecution")
                    .child("nodeSelectorTerms")
                    .index(i);
                validate_term(term, &p, &mut errs);
            }
        }
        for (i, pref) in added
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
        {
            let at = base
                .child("preferredDuringSchedulingIgnoredDuringExecution")
                .index(i);
            // As the API server's own check of a pod's preferred terms: a weight outside
            // 1-100 would score a node below 0 or past what normalizing can bring back.
            if !(1..=100).contains(&pref.weight) {
                errs.push(
                    at.child("weight"),
                    format!("Invalid value: {}: must be in the range 1-100", pref.weight),
                );
            }
            validate_term(&pref.preference, &at.child("preference"), &mut errs);
        }
        errs.into_result()
    }
}

/// A preferred term with its weight; terms of weight 0 are dropped when parsed, as upstream.
#[derive(Clone, Debug)]
struct WeightedTerm {
    weight: i64,
    term: Term,
}

fn parse_preferred(
    terms: &[PreferredSchedulingTerm],
) -> Result<Vec<WeightedTerm>, NodeSelectorError> {
    terms
        .iter()
        .filter(|t| t.weight != 0)
        .map(|t| {
            Term::parse(&t.preference).map(|term| WeightedTerm {
                weight: i64::from(t.weight),
                term,
            })
        })
        .collect()
}

/// The sum of the weights of the terms the node matches.
fn preferred_score(terms: &[WeightedTerm], node: &NodeInfo) -> i64 {
    let labels = node.labels();
    terms
        .iter()
        .filter(|t| t.term.matches(&node.name, labels))
        .map(|t| t.weight)
        .sum()
}

/// Filters and scores nodes by node affinity; holds the profile's parsed addedAffinity.
#[derive(Clone, Debug, Default)]
pub struct NodeAffinity {
    /// addedAffinity's required terms (upstream's addedNodeSelector).
    added_required: Option<Terms>,
    /// addedAffinity's preferred terms (upstream's addedPrefSchedTerms).
    added_preferred: Vec<WeightedTerm>,
}

impl NodeAffinity {
    /// Builds the plugin from validated args.
    pub fn new(args: &NodeAffinityArgs) -> Result<Self, NodeSelectorError> {
        let Some(added) = args.added_affinity.as_ref() else {
            return Ok(NodeAffinity::default());
        };
        let added_required = added
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(Terms::parse)
            .transpose()?;
        let added_preferred = parse_preferred(
            added
                .preferred_during_scheduling_ignored_during_execution
                .as_deref()
                .unwrap_or_default(),
        )?;
        Ok(NodeAffinity {
            added_required,
            added_preferred,
        })
    }
}

impl Plugin for NodeAffinity {
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
        let spec = pod.pod.spec.as_ref();
        let affinity = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref());
        signature.part(
            crate::scheduler::framework::signature::NODE_AFFINITY,
            &affinity,
        );
        signature.part(
            crate::scheduler::framework::signature::NODE_SELECTOR,
            &spec.and_then(|s| s.node_selector.as_ref()),
        );
        true
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(hints::registrations(self.added_required.clone()))
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

impl PreFilterPlugin for NodeAffinity {
    /// Parses the pod's requirements once. Skip when neither the pod nor addedAffinity requires
    /// anything; narrows the nodes when every required term pins `metadata.name In (...)`, and
    /// rejects the pod when those names conflict.
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let required = RequiredNodeAffinity::from_pod(&pod.pod);
        if required.is_empty() && self.added_required.is_none() {
            return (PreFilterResult::all_nodes(), Status::skip());
        }
        state.write(PRE_FILTER_STATE_KEY, required.by_id(&NodeLabelIds));
        let pinned = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .filter(|selector| !selector.node_selector_terms.is_empty())
            .and_then(node_selector::pinned_names);
        match pinned {
            Some(names) if names.is_empty() => (
                PreFilterResult::all_nodes(),
                Status::unresolvable(ERR_REASON_CONFLICT),
            ),
            Some(names) => (PreFilterResult::nodes(names), Status::success()),
            None => (PreFilterResult::all_nodes(), Status::success()),
        }
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let labels = node.labels();
        if let Some(added) = &self.added_required
            && !added.matches(&node.name, labels)
        {
            return Status::unresolvable(ERR_REASON_ENFORCED);
        }
        let matched = match state.read::<NodeMatcher>(PRE_FILTER_STATE_KEY) {
            Some(required) => node.meets(required),
            // PreFilter did not run: parse here, as upstream falls back to.
            None => RequiredNodeAffinity::from_pod(&pod.pod).matches_labels(&node.name, labels),
        };
        if matched {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON_POD)
        }
    }

    /// The pod's nodeSelector labels the node lacks, or that none of its required terms match.
    fn remedy(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<String> {
        let labels = node.labels();
        let selector = pod.pod.spec.as_ref().and_then(|s| s.node_selector.as_ref());
        let missing: Vec<String> = selector
            .into_iter()
            .flatten()
            .filter(|(k, v)| labels.get(*k) != Some(*v))
            .map(|(k, v)| match labels.get(k) {
                Some(has) => format!("{k}={v} (it has {k}={has})"),
                None => format!("{k}={v}"),
            })
            .collect();
        if !missing.is_empty() {
            return Some(format!(
                "label {} {}, or change the pod's nodeSelector",
                node.name,
                missing.join(", ")
            ));
        }
        Some(format!(
            "no nodeSelectorTerm of the pod's required node affinity matches the labels of {}",
            node.name
        ))
    }
}

/// The pod's parsed preferred terms, for Score.
struct PreScoreState {
    preferred: Vec<WeightedTerm>,
}

fn pod_preferred_terms(pod: &PodInfo) -> &[PreferredSchedulingTerm] {
    pod.pod
        .spec
        .as_ref()
        .and_then(|s| s.affinity.as_ref())
        .and_then(|a| a.node_affinity.as_ref())
        .and_then(|na| {
            na.preferred_during_scheduling_ignored_during_execution
                .as_deref()
        })
        .unwrap_or_default()
}

impl PreScorePlugin for NodeAffinity {
    /// Parses the pod's preferred terms once; Skip when neither the pod nor addedAffinity
    /// prefers anything.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _nodes: &[Arc<NodeInfo>],
        _snapshot: &Snapshot,
    ) -> Status {
        let preferred = match parse_preferred(pod_preferred_terms(pod)) {
            Ok(p) => p,
            Err(e) => return Status::error(format!("invalid preferred node affinity: {e}")),
        };
        if preferred.is_empty() && self.added_preferred.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_STATE_KEY, PreScoreState { preferred });
        Status::success()
    }
}

impl ScorePlugin for NodeAffinity {
    /// The sum of the weights of the preferred terms (the pod's and addedAffinity's) the node
    /// matches.
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let s = state
            .read::<PreScoreState>(PRE_SCORE_STATE_KEY)
            .ok_or_else(|| Status::error("NodeAffinity: PreScore state not found"))?;
        Ok(preferred_score(&self.added_preferred, node) + preferred_score(&s.preferred, node))
    }

    /// The highest sum becomes MAX_NODE_SCORE, the others in proportion (DefaultNormalizeScore).
    fn normalize_scores(
        &self,
        _state: &CycleState,
        _pod: &PodInfo,
        scores: &mut [NodeScore],
    ) -> Status {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
        Status::success()
    }
}

/// Decodes and validates the args (errors name fields under `path`) and builds the plugin.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    _handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let args: NodeAffinityArgs = decode_args(args, path)?;
    args.validate(path)?;
    NodeAffinity::new(&args)
        .map(|p| Arc::new(p) as Arc<dyn Plugin>)
        .map_err(|e| {
            let mut errs = FieldErrors::new();
            errs.push(path.child("addedAffinity"), e.to_string());
            errs
        })
}

#[cfg(test)]
mod tests;
