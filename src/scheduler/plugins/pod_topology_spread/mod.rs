//! PodTopologySpread: spreads the pods a selector matches evenly across topology domains
//! (zones, nodes, any node label), as kube-scheduler's PodTopologySpread plugin does.
//!
//! Hard constraints (`whenUnsatisfiable: DoNotSchedule`) are checked in Filter against counts
//! taken once in PreFilter; soft ones (`ScheduleAnyway`, and the cluster's default constraints
//! for pods without constraints of their own) rank nodes in Score from counts taken in PreScore.

mod args;
mod common;
mod filter;
mod hints;
mod score;

use self::args::{DO_NOT_SCHEDULE, SCHEDULE_ANYWAY, system_default_constraints};
pub use self::args::{DefaultingType, PodTopologySpreadArgs};
use self::common::*;

// Per-cycle maps keyed by node and domain names: foldhash is several times faster than
// SipHash on them, and nothing outside the cycle chooses their keys.
use foldhash::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint;

use crate::k8s::labels::SelectorError;
use crate::k8s::release::Release;
use crate::scheduler::framework::events::Registration;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::node_sums::NodeSums;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::topology::{self};
use crate::scheduler::framework::validation::FieldPath;
use crate::scheduler::framework::validation::{FieldErrors, decode_args};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, MAX_NODE_SCORE, NodeScore, Plugin, PodsChange, PreFilterPlugin,
    PreFilterResult, PreScorePlugin, ScorePlugin, Status,
};
pub use crate::scheduler::informers::selectors::{DefaultSelectorSource, NoDefaultSelectors};
use crate::scheduler::plugins::handle::Handle;

pub const NAME: &str = "PodTopologySpread";
/// The plugin's Score weight in kube-scheduler's default profile.
pub const DEFAULT_WEIGHT: i32 = 2;

/// Filter's reason when the skew would exceed a constraint's maxSkew.
pub const ERR_REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Filter's reason when the node lacks a constraint's topology key.
pub const ERR_REASON_NODE_LABEL_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

const PRE_FILTER_STATE_KEY: &str = "PreFilterPodTopologySpread";
const PRE_SCORE_STATE_KEY: &str = "PreScorePodTopologySpread";

/// Builds the plugin from its args (absent means defaults), validated and named under `path`.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let selectors = handle.default_selectors.clone();
    let args: PodTopologySpreadArgs = decode_args(args, path)?;
    args.validate(path)?;
    let mut plugin = PodTopologySpread::new(args, selectors);
    plugin.release = handle.release;
    Ok(Arc::new(plugin))
}

/// The plugin: its default constraints and where default selectors come from.
#[derive(Clone)]
pub struct PodTopologySpread {
    default_constraints: Vec<TopologySpreadConstraint>,
    /// Whether the defaults are the system ones; then scoring does not require nodes to have
    /// every topology key, so nodes without a zone label still get hostname spreading.
    system_defaulted: bool,
    selectors: Arc<dyn DefaultSelectorSource>,
    /// The release whose counting this plugin follows (see [`Constraint::counted`]).
    release: Release,
    /// Hard and soft constraints' counts kept from cycle to cycle.
    hard_sums: Arc<NodeSums<CountQuestion, Tallies>>,
    soft_sums: Arc<NodeSums<CountQuestion, Tallies>>,
}

impl PodTopologySpread {
    /// The plugin for args already validated.
    pub fn new(args: PodTopologySpreadArgs, selectors: Arc<dyn DefaultSelectorSource>) -> Self {
        let system_defaulted = args.defaulting_type == DefaultingType::System;
        PodTopologySpread {
            default_constraints: if system_defaulted {
                system_default_constraints()
            } else {
                args.default_constraints
            },
            system_defaulted,
            selectors,
            release: Release::default(),
            hard_sums: Arc::default(),
            soft_sums: Arc::default(),
        }
    }

    /// The pod's constraints with this `whenUnsatisfiable`; for a pod with none of its own, the
    /// default constraints with the pod's default selector (none without one).
    fn constraints(&self, pod: &PodInfo, action: &str) -> Result<Vec<Constraint>, SelectorError> {
        if has_own_constraints(pod) {
            return own_constraints(pod)
                .iter()
                .filter(|c| c.when_unsatisfiable == action)
                .map(|c| Constraint::parse(c, pod.labels(), self.release))
                .collect();
        }
        let defaults: Vec<_> = self
            .default_constraints
            .iter()
            .filter(|c| c.when_unsatisfiable == action)
            .collect();
        if defaults.is_empty() {
            return Ok(Vec::new());
        }
        let Some(selector) = self
            .selectors
            .default_selector(pod)
            .filter(|s| !s.is_empty())
        else {
            return Ok(Vec::new());
        };
        defaults
            .into_iter()
            .map(|c| {
                let mut parsed = Constraint::parse(c, pod.labels(), self.release)?;
                parsed.selector = selector.clone();
                parsed.counted = selector.clone();
                Ok(parsed)
            })
            .collect()
    }
}

impl Plugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        _signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        let own = pod
            .pod
            .spec
            .as_ref()
            .and_then(|s| s.topology_spread_constraints.as_ref())
            .is_some_and(|c| !c.is_empty());
        !own && self.default_constraints.is_empty()
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(hints::registrations(Arc::new(self.clone())))
    }
    fn pre_filter_reads_pods(&self) -> bool {
        true
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

#[cfg(test)]
mod tests;
