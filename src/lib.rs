//! tether: a Kubernetes scheduler whose scheduling policy lives in custom resources.

pub mod api;
pub mod cli;
pub mod controller;
pub mod endpoints;
pub mod gate;
pub mod inflight;
pub mod k8s;
pub mod leader;
pub mod locks;
pub mod recorder;
pub mod run;
pub mod scheduler;
pub mod simulate;
pub mod sticky;
pub mod supervise;
pub mod watch;
