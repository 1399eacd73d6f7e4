//! The node-resources plugins, as kube-scheduler's `noderesources` package: NodeResourcesFit
//! ([`fit`]) with its scoring strategies ([`scoring`]), NodeResourcesBalancedAllocation
//! ([`balanced_allocation`]), and the per-resource accounting both score with
//! ([`resource_allocation`], kube-scheduler's `resourceAllocationScorer`).

pub mod balanced_allocation;
pub mod dra_scoring;
pub mod fit;
mod fit_hints;
pub mod resource_allocation;
pub mod scoring;

#[cfg(test)]
mod tests;
