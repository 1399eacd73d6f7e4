//! NodeResourcesFit's scoring strategies: LeastAllocated, MostAllocated and
//! RequestedToCapacityRatio, their args, and the score of one resource under each.

use serde::{Deserialize, Serialize};

use super::resource_allocation::{ResourceSpec, default_resources};
use crate::scheduler::framework::MAX_NODE_SCORE;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};

/// The highest score a RequestedToCapacityRatio shape point may give (kube-scheduler's
/// MaxCustomPriorityScore); shape scores are scaled up to MAX_NODE_SCORE.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
pub const MAX_UTILIZATION: i64 = 100;

/// How Score ranks the nodes that fit.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct ScoringStrategy {
    #[serde(rename = "type")]
    pub type_: ScoringStrategyType,
    /// The resources scored and their weights; empty means cpu and memory.
    pub resources: Vec<ResourceSpec>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioParam>,
}

impl Default for ScoringStrategy {
    fn default() -> Self {
        ScoringStrategy {
            type_: ScoringStrategyType::LeastAllocated,
            resources: default_resources(),
            requested_to_capacity_ratio: None,
        }
    }
}

/// kube-scheduler's scoring strategy types. An unknown name decodes into `Unsupported`, so that
/// validation can name the field rather than fail the whole decoding.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ScoringStrategyType {
    /// Favours nodes with the most free room left.
    #[default]
    LeastAllocated,
    /// Favours the fullest nodes (bin packing).
    MostAllocated,
    /// Scores utilization through a piecewise linear shape.
    RequestedToCapacityRatio,
    #[serde(untagged)]
    Unsupported(String),
}

/// The shape of the RequestedToCapacityRatio strategy.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct RequestedToCapacityRatioParam {
    /// Points of a piecewise linear function from utilization (0..=100) to score (0..=10),
    /// in strictly increasing utilization.
    pub shape: Vec<UtilizationShapePoint>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct UtilizationShapePoint {
    pub utilization: i32,
    pub score: i32,
}

/// The strategy a built plugin scores with.
pub enum Strategy {
    LeastAllocated,
    MostAllocated,
    /// The shape as (utilization, score scaled to 0..=MAX_NODE_SCORE) points.
    RequestedToCapacityRatio(Vec<(i64, i64)>),
}

/// As kube-scheduler's validateFunctionShape.
pub fn validate_shape(shape: &[UtilizationShapePoint], path: &FieldPath, errs: &mut FieldErrors) {
    if shape.is_empty() {
        errs.push(path, "at least one point must be specified");
        return;
    }
    if let Some(i) = (1..shape.len()).find(|&i| shape[i - 1].utilization >= shape[i].utilization) {
        errs.push(
            path.index(i).child("utilization"),
            "values must be sorted in increasing order",
        );
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=MAX_UTILIZATION).contains(&i64::from(p.utilization)) {
            errs.push(
                path.index(i).child("utilization"),
                format!("not in valid range [0, {MAX_UTILIZATION}]"),
            );
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&i64::from(p.score)) {
            errs.push(
                path.index(i).child("score"),
                format!("not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"),
            );
        }
    }
}

/// As upstream's leastRequestedScore: the free share of the node, 0 when over capacity.
pub fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return 0;
    }
    // Never above the top score, whatever a sum says.
    let requested = requested.max(0);
    ((i128::from(capacity - requested) * i128::from(MAX_NODE_SCORE)) / i128::from(capacity)) as i64
}

/// As upstream's mostRequestedScore: the used share of the node, requests capped at capacity.
pub fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 {
        return 0;
    }
    let requested = requested.clamp(0, capacity);
    ((i128::from(requested) * i128::from(MAX_NODE_SCORE)) / i128::from(capacity)) as i64
}

/// Utilization in percent (0..=100), truncated; over capacity counts as full.
pub fn utilization(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested > capacity {
        return MAX_UTILIZATION;
    }
    let requested = requested.max(0);
    ((i128::from(requested) * i128::from(MAX_UTILIZATION)) / i128::from(capacity)) as i64
}

/// The piecewise linear function through `shape` at `p`, flat before the first point and after
/// the last, in integer arithmetic as upstream's BuildBrokenLinearFunction.
pub fn broken_linear(shape: &[(i64, i64)], p: i64) -> i64 {
    for (i, &(u, s)) in shape.iter().enumerate() {
        if p <= u {
            return match i.checked_sub(1).map(|j| shape[j]) {
                None => s,
                Some((u0, s0)) => s0 + (s - s0) * (p - u0) / (u - u0),
            };
        }
    }
    shape.last().map_or(0, |&(_, s)| s)
}
