//! The sticky story in one place: a pod's workload identity (over an owner cache fed by watches),
//! the StickyBindings index the plugins read, and the history writer that records every bind
//! exactly once. StickyNode and PlacementHistory (in `scheduler/plugins`) read what is here; the
//! PlacementRecorder plugin and the StickyBinding controller write it.

pub mod bindings;
pub mod history;
pub mod kubevirt;
pub mod migrations;
pub mod owners;
pub mod reconcile;
pub mod workload;
