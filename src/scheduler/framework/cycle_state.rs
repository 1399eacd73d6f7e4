//! Per-cycle data that plugins compute once (in PreFilter or PreScore) and read many times
//! (in Filter or Score, from several threads).

use std::any::Any;
use std::collections::HashMap;
use std::sync::Arc;

/// A map from a key private to one plugin to that plugin's data for the current pod.
/// Written during the serial phases (PreFilter, PreScore, Reserve), read concurrently during
/// Filter and Score. Values are `Arc`s so that the binding cycle can keep the state cheaply.
#[derive(Default, Clone)]
pub struct CycleState {
    data: HashMap<&'static str, Arc<dyn Any + Send + Sync>>,
    /// Whether the Filter of a plugin should be skipped because its PreFilter returned Skip.
    skip_filter: Vec<&'static str>,
    skip_score: Vec<&'static str>,
    /// How long each extension point of the scheduling cycle took, with its outcome, for
    /// kube-scheduler's `scheduler_framework_extension_point_duration_seconds`.
    timings: Vec<Timing>,
}

/// One extension point's run: its name as kube-scheduler labels it, the outcome's code, and
/// how long it took.
pub type Timing = (&'static str, super::status::Code, std::time::Duration);

impl CycleState {
    pub fn new() -> Self {
        Self::default()
    }

    pub fn write<T: Any + Send + Sync>(&mut self, key: &'static str, value: T) {
        self.data.insert(key, Arc::new(value));
    }

    /// The value stored under `key`, if one of type `T` is there.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.data.get(key).and_then(|v| v.downcast_ref::<T>())
    }

    pub fn mark_skip_filter(&mut self, plugin: &'static str) {
        self.skip_filter.push(plugin);
    }

    pub fn skips_filter(&self, plugin: &'static str) -> bool {
        self.skip_filter.contains(&plugin)
    }

    pub fn mark_skip_score(&mut self, plugin: &'static str) {
        self.skip_score.push(plugin);
    }

    pub fn skips_score(&self, plugin: &'static str) -> bool {
        self.skip_score.contains(&plugin)
    }

    /// Records that extension point `point` ran for `took` and ended with `code`.
    pub fn record_timing(
        &mut self,
        point: &'static str,
        code: super::status::Code,
        took: std::time::Duration,
    ) {
        self.timings.push((point, code, took));
    }

    /// The timings recorded so far, taken out.
    pub fn take_timings(&mut self) -> Vec<Timing> {
        std::mem::take(&mut self.timings)
    }
}
