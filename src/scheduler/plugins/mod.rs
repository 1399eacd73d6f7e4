//! kube-scheduler's default plugins and tether's own, one file per plugin, named after it.

pub mod inter_pod_affinity;
