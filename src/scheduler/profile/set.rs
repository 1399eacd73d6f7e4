//! Which SchedulingProfiles serve, decided for all of them at once (pure): each one compiles or
//! not; an invalid one keeps serving its last good version; of two claiming one schedulerName
//! the older wins; every profile must use the queue's QueueSort. The result is the registry
//! content and one verdict per profile, for its status.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::api::{EffectivePlugins, SchedulingProfile};
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::validation::FieldErrors;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::profile::compile;

/// The QueueSort of the one scheduling queue; every profile must use it.
pub const QUEUE_SORT: &str = crate::scheduler::plugins::priority_sort::NAME;

/// What a profile's status says.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    pub ready: bool,
    /// Serving, InvalidSpec, SchedulerNameConflict or QueueSortMismatch.
    pub reason: &'static str,
    pub message: String,
    pub generation: Option<i64>,
    /// The effective plugins of the version that serves (the current one when Ready).
    pub effective: Option<EffectivePlugins>,
}

/// The compiled current version of a profile, cached by UID and generation.
struct Compiled {
    generation: Option<i64>,
    result: Result<(Arc<CompiledProfile>, EffectivePlugins), FieldErrors>,
}

/// The last version of a profile that compiled, by UID.
#[derive(Clone)]
struct LastGood {
    generation: Option<i64>,
    profile: Arc<CompiledProfile>,
    effective: EffectivePlugins,
}

/// Profile versions across syncs: what compiled, and what last compiled well.
#[derive(Default)]
pub struct ProfileSet {
    compiled: HashMap<String, Compiled>,
    last_good: HashMap<String, LastGood>,
}

/// The outcome of one sync.
pub struct Decision {
    /// schedulerName → the version that serves it.
    pub serving: HashMap<String, Arc<CompiledProfile>>,
    /// Profile name → its verdict.
    pub verdicts: BTreeMap<String, Verdict>,
}

impl ProfileSet {
    /// Decides for every profile in `profiles` (the whole current set).
    pub fn decide(&mut self, profiles: &[Arc<SchedulingProfile>], handle: &Handle) -> Decision {
        let mut ordered: Vec<&Arc<SchedulingProfile>> = profiles
            .iter()
            .filter(|p| p.metadata.deletion_timestamp.is_none())
            .collect();
        // Older first: the older of two claimants keeps its schedulerName.
        ordered.sort_by(|a, b| {
            let ts = |p: &SchedulingProfile| p.metadata.creation_timestamp.as_ref().map(|t| t.0);
            ts(a)
                .cmp(&ts(b))
                .then_with(|| a.metadata.name.cmp(&b.metadata.name))
        });
        let live: std::collections::HashSet<String> = ordered.iter().map(|p| uid(p)).collect();
        self.compiled.retain(|u, _| live.contains(u));
        self.last_good.retain(|u, _| live.contains(u));

        let mut serving: HashMap<String, Arc<CompiledProfile>> = HashMap::new();
        let mut owner: HashMap<String, String> = HashMap::new();
        let mut verdicts = BTreeMap::new();
        for p in ordered {
            let name = p.metadata.name.clone().unwrap_or_default();
            let generation = p.metadata.generation;
            let uid = uid(p);
            let fresh = self
                .compiled
                .get(&uid)
                .is_none_or(|c| c.generation != generation);
            if fresh {
                let source = format!("SchedulingProfile/{name}@{}", generation.unwrap_or(0));
                let result =
                    compile(&p.spec, &source, handle).map(|c| (Arc::new(c.profile), c.effective));
                self.compiled
                    .insert(uid.clone(), Compiled { generation, result });
            }
            let Some(current) = self.compiled.get(&uid) else {
                continue;
            };
            let scheduler_name = p.spec.scheduler_name.clone();
            let verdict = match &current.result {
                Ok((profile, effective)) => {
                    let queue_sort = effective
                        .queue_sort
                        .first()
                        .map(String::as_str)
                        .unwrap_or_default();
                    if queue_sort != QUEUE_SORT {
                        self.invalid(&uid, generation, "QueueSortMismatch", format!(
                            "plugins.queueSort: all profiles share one queue sorted by {QUEUE_SORT}, this profile uses {queue_sort}"
                        ))
                    } else if let Some(other) = owner.get(&scheduler_name) {
                        Verdict {
                            ready: false,
                            reason: "SchedulerNameConflict",
                            message: format!(
                                "spec.schedulerName: {scheduler_name} is already served by the older SchedulingProfile {other}"
                            ),
                            generation,
                            effective: None,
                        }
                    } else {
                        self.last_good.insert(
                            uid.clone(),
                            LastGood {
                                generation,
                                profile: profile.clone(),
                                effective: effective.clone(),
                            },
                        );
                        Verdict {
                            ready: true,
                            reason: "Serving",
                            message: String::new(),
                            generation,
                            effective: Some(effective.clone()),
                        }
                    }
                }
                Err(errors) => {
                    let message = prefix_spec(errors);
                    self.invalid(&uid, generation, "InvalidSpec", message)
                }
            };
            // Who serves this schedulerName: a ready profile, or an invalid one's last good version.
            let serves = if verdict.ready {
                self.last_good.get(&uid).map(|g| g.profile.clone())
            } else if verdict.reason != "SchedulerNameConflict" {
                self.last_good
                    .get(&uid)
                    .filter(|g| g.profile.scheduler_name == scheduler_name)
                    .map(|g| g.profile.clone())
            } else {
                None
            };
            if let Some(profile) = serves
                && !owner.contains_key(&profile.scheduler_name)
            {
                owner.insert(profile.scheduler_name.clone(), name.clone());
                serving.insert(profile.scheduler_name.clone(), profile);
            }
            verdicts.insert(name, verdict);
        }
        Decision { serving, verdicts }
    }

    fn invalid(
        &self,
        uid: &str,
        generation: Option<i64>,
        reason: &'static str,
        message: String,
    ) -> Verdict {
        let (message, effective) = match self.last_good.get(uid) {
            Some(g) => (
                format!(
                    "{message}; the last good version (generation {}) keeps serving",
                    g.generation.unwrap_or(0)
                ),
                Some(g.effective.clone()),
            ),
            None => (message, None),
        };
        Verdict {
            ready: false,
            reason,
            message,
            generation,
            effective,
        }
    }
}

fn uid(p: &SchedulingProfile) -> String {
    p.metadata
        .uid
        .clone()
        .unwrap_or_else(|| p.metadata.name.clone().unwrap_or_default())
}

/// Field errors as one message, each path under `spec.`.
fn prefix_spec(errors: &FieldErrors) -> String {
    errors
        .0
        .iter()
        .map(|e| format!("spec.{}: {}", e.path, e.message))
        .collect::<Vec<_>>()
        .join("; ")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::SchedulingProfileSpec;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn profile(
        name: &str,
        created_s: i64,
        generation: i64,
        spec: serde_json::Value,
    ) -> Arc<SchedulingProfile> {
        let spec: SchedulingProfileSpec = serde_json::from_value(spec).expect("spec");
        let mut p = SchedulingProfile::new(name, spec);
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.generation = Some(generation);
        p.metadata.creation_timestamp = Some(Time(
            jiff::Timestamp::from_second(1_700_000_000 + created_s).expect("ts"),
        ));
        Arc::new(p)
    }

    #[test]
    fn an_invalid_change_keeps_the_last_good_version_serving() {
        let mut set = ProfileSet::default();
        let h = Handle::default();
        let good = profile("a", 0, 1, serde_json::json!({"schedulerName": "s"}));
        let d = set.decide(&[good], &h);
        assert!(d.verdicts["a"].ready);
        let served = d.serving["s"].clone();

        let bad = profile(
            "a",
            0,
            2,
            serde_json::json!({"schedulerName": "s", "plugins": {"filter": {"enabled": [{"name": "Nope"}]}}}),
        );
        let d = set.decide(&[bad], &h);
        let v = &d.verdicts["a"];
        assert!(!v.ready);
        assert_eq!(v.reason, "InvalidSpec");
        assert!(
            v.message.contains("spec.plugins.filter.enabled[0].name"),
            "{}",
            v.message
        );
        assert!(
            v.message.contains("generation 1) keeps serving"),
            "{}",
            v.message
        );
        assert!(
            Arc::ptr_eq(&d.serving["s"], &served),
            "the last good version serves"
        );
    }

    #[test]
    fn a_new_invalid_profile_serves_nothing() {
        let mut set = ProfileSet::default();
        let bad = profile(
            "a",
            0,
            1,
            serde_json::json!({"schedulerName": "s", "pluginConfig": [{"name": "NodeResourcesFit", "args": {"x": 1}}]}),
        );
        let d = set.decide(&[bad], &Handle::default());
        assert!(!d.verdicts["a"].ready);
        assert!(
            d.verdicts["a"]
                .message
                .contains("spec.pluginConfig[0].args")
        );
        assert!(d.serving.is_empty());
    }

    #[test]
    fn the_older_of_two_claimants_wins() {
        let mut set = ProfileSet::default();
        let old = profile("old", 0, 1, serde_json::json!({"schedulerName": "s"}));
        let new = profile("new", 10, 1, serde_json::json!({"schedulerName": "s"}));
        let d = set.decide(&[new.clone(), old.clone()], &Handle::default());
        assert!(d.verdicts["old"].ready);
        assert_eq!(d.verdicts["new"].reason, "SchedulerNameConflict");
        assert!(d.verdicts["new"].message.contains("SchedulingProfile old"));
        assert_eq!(d.serving["s"].source, "SchedulingProfile/old@1");
        // The older one deleted: the newer one serves.
        let d = set.decide(&[new], &Handle::default());
        assert!(d.verdicts["new"].ready);
        assert_eq!(d.serving["s"].source, "SchedulingProfile/new@1");
    }

    #[test]
    fn every_profile_must_use_the_queues_sort() {
        let mut set = ProfileSet::default();
        let p = profile(
            "a",
            0,
            1,
            serde_json::json!({"schedulerName": "s", "plugins": {"queueSort": {"disabled": [{"name": "*"}]}}}),
        );
        let d = set.decide(&[p], &Handle::default());
        assert!(!d.verdicts["a"].ready);
        assert!(
            d.verdicts["a"].message.contains("plugins.queueSort"),
            "{}",
            d.verdicts["a"].message
        );
    }

    #[test]
    fn two_profiles_with_two_names_both_serve_and_unchanged_ones_are_not_recompiled() {
        let mut set = ProfileSet::default();
        let a = profile("a", 0, 1, serde_json::json!({"schedulerName": "s1"}));
        let b = profile("b", 1, 1, serde_json::json!({"schedulerName": "s2"}));
        let d1 = set.decide(&[a.clone(), b.clone()], &Handle::default());
        assert_eq!(d1.serving.len(), 2);
        let d2 = set.decide(&[a, b], &Handle::default());
        assert!(
            Arc::ptr_eq(&d1.serving["s1"], &d2.serving["s1"]),
            "same generation, same compiled profile"
        );
    }
}
