//! kube-scheduler's default plugins and tether's own, one file per plugin, named after it.

pub mod node_resources_balanced_allocation;
pub mod node_resources_fit;
