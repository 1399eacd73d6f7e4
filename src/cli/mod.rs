//! The commands a person runs against a cluster where tether runs: `tether explain` and `tether
//! pending` (also `kubectl tether explain`, `kubectl tether pending`, through a symlink or copy
//! named `kubectl-tether`), `tether simulate` and `tether snapshot`. They read; the one thing any
//! of them writes is the ExplainRequest explain and pending ask with (deleted once answered).

pub mod complete;
pub mod explain;
pub mod kubeconfig;
pub mod leader;
pub mod pending;
pub mod request;
pub mod simulate;
