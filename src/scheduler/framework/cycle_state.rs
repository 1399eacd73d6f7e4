//! Per-cycle data that plugins compute once (in PreFilter or PreScore) and read many times
//! (in Filter or Score, from several threads).

use std::any::Any;
// Read for every node by every plugin with state: foldhash, not SipHash, hashes the keys
// (static names chosen by the code, not by anyone outside).
use foldhash::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use super::status::Code;

/// A plugin's cycle state, shared (see [`CycleState::shared`]).
pub type SharedState = Arc<dyn Any + Send + Sync>;

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
    /// In a sampled cycle, every plugin run timed so far (for kube-scheduler's
    /// `scheduler_plugin_execution_duration_seconds`); `None` in the others.
    plugin_runs: Option<Arc<Mutex<Vec<PluginRun>>>>,
    /// How many times each plugin ran at PreFilter, Filter, PreScore and Score in this cycle's
    /// search for a node, for kube-scheduler's `scheduler_plugin_evaluation_total`.
    evaluations: Vec<Evaluations>,
}

/// One plugin's runs at one extension point: (point, plugin, runs).
pub type Evaluations = (&'static str, &'static str, u64);

/// One plugin's run at an extension point, with its outcome and duration.
#[derive(Clone, Copy, Debug)]
pub struct PluginRun {
    pub plugin: &'static str,
    /// kube-scheduler's name of the point: Filter, ScoreExtensionNormalize, Unreserve…
    pub point: &'static str,
    pub code: Code,
    pub took: Duration,
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

    /// The value stored under `key`, shared: what a group cycle keeps of a member's state.
    pub fn shared(&self, key: &'static str) -> Option<SharedState> {
        self.data.get(key).cloned()
    }

    /// The value stored under `key`, if one of type `T` is there.
    pub fn read<T: Any + Send + Sync>(&self, key: &'static str) -> Option<&T> {
        self.data.get(key).and_then(|v| v.downcast_ref::<T>())
    }

    pub fn mark_skip_filter(&mut self, plugin: &'static str) {
        if !self.skip_filter.contains(&plugin) {
            self.skip_filter.push(plugin);
        }
    }

    /// Undoes [`CycleState::mark_skip_filter`] (a PreFilter run again that no longer skips).
    pub fn unmark_skip_filter(&mut self, plugin: &'static str) {
        self.skip_filter.retain(|p| *p != plugin);
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

    /// Records that `plugin` ran `runs` times at `point` (PreFilter, Filter, PreScore, Score).
    pub fn record_evaluations(&mut self, point: &'static str, plugin: &'static str, runs: u64) {
        if runs > 0 {
            self.evaluations.push((point, plugin, runs));
        }
    }

    /// The plugin evaluations recorded so far, taken out.
    pub fn take_evaluations(&mut self) -> Vec<Evaluations> {
        std::mem::take(&mut self.evaluations)
    }

    /// Times every plugin run of this cycle (kube-scheduler samples 10 % of its cycles so).
    pub fn time_plugins(&mut self) {
        self.plugin_runs = Some(Arc::default());
    }

    /// In a sampled cycle, the time a plugin's run starts; `None` in the others, which costs
    /// nothing more.
    pub fn plugin_clock(&self) -> Option<Instant> {
        self.plugin_runs.as_ref().map(|_| Instant::now())
    }

    /// Records that `plugin` ran at `point` since `clock` (from [`Self::plugin_clock`]) and
    /// ended with `code`.
    pub fn record_plugin(
        &self,
        plugin: &'static str,
        point: &'static str,
        code: Code,
        clock: Option<Instant>,
    ) {
        if let (Some(runs), Some(started)) = (&self.plugin_runs, clock) {
            crate::locks::lock(runs).push(PluginRun {
                plugin,
                point,
                code,
                took: started.elapsed(),
            });
        }
    }

    /// The plugin runs recorded so far, taken out.
    pub fn take_plugin_runs(&self) -> Vec<PluginRun> {
        self.plugin_runs
            .as_ref()
            .map(|runs| std::mem::take(&mut *crate::locks::lock(runs)))
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_sampled_cycle_times_its_plugins() {
        let mut state = CycleState::new();
        let clock = state.plugin_clock();
        assert!(clock.is_none(), "an unsampled cycle reads no clock");
        state.record_plugin("P", "Filter", Code::Success, clock);
        assert!(state.take_plugin_runs().is_empty());

        state.time_plugins();
        let clock = state.plugin_clock();
        state.record_plugin("P", "Filter", Code::Unschedulable, clock);
        let shared = state.clone();
        shared.record_plugin("P", "Bind", Code::Success, shared.plugin_clock());
        let runs = state.take_plugin_runs();
        let seen: Vec<_> = runs.iter().map(|r| (r.plugin, r.point, r.code)).collect();
        assert_eq!(
            seen,
            [
                ("P", "Filter", Code::Unschedulable),
                ("P", "Bind", Code::Success)
            ],
            "a clone (the binding cycle's) records into the same cycle"
        );
        assert!(state.take_plugin_runs().is_empty(), "taken once");
    }
}
