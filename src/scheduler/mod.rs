//! The embedded scheduler: queue, cache, the framework of extension points, plugins, binder.

pub mod framework;
pub mod labels;
pub mod node_info;
pub mod node_selector;
pub mod plugins;
pub mod pod_info;
pub mod quantity;
pub mod resource;
pub mod snapshot;
pub mod taints;

#[cfg(test)]
pub mod testing;
