//! The API client ([`client`]), and small, pure helpers over Kubernetes types that the plugins share: label selectors, node
//! selectors and affinity terms, quantities, resource lists and taints. Each returns typed errors.

pub mod api_errors;
pub mod budget;
pub mod client;
pub mod client_metrics;
pub mod features;
pub mod labels;
pub mod names;
pub mod node_selector;
pub mod patch;
pub mod pod;
pub mod pods;
pub mod quantity;
pub mod release;
pub mod resource;
pub mod taints;
pub mod volumes;
