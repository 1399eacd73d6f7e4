//! The commands a person runs against a cluster where tether runs: `tether explain` (also
//! `kubectl tether explain`, through a symlink or copy named `kubectl-tether`), `tether
//! simulate` and `tether snapshot`. They read; none writes to the cluster.

pub mod explain;
pub mod kubeconfig;
pub mod leader;
pub mod simulate;
