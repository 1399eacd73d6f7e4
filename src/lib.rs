//! tether: a Kubernetes scheduler whose scheduling policy lives in custom resources.

pub mod api;
pub mod controller;
pub mod history;
pub mod owners;
pub mod run;
pub mod scheduler;
pub mod workload;
