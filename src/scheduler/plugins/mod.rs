//! kube-scheduler's default plugins and tether's own, one file per plugin, named after it.

pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod dynamic_resources;
pub mod gang_scheduling;
pub mod gangs;
pub mod handle;
pub mod helper;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod node_affinity;
pub mod node_declared_features;
pub mod node_name;
pub mod node_ports;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod noderesources;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod registry;
pub mod scheduling_gates;
pub mod sticky;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

#[cfg(test)]
mod kept_sums_tests;
