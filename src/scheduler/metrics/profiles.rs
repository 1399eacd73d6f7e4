//! What the SchedulingProfile controller tells the metrics: each profile's readiness
//! (`tether_schedulingprofile_ready`) and its conditions (`tether_schedulingprofile_condition`),
//! each family holding exactly the profiles (and conditions) named last.

use std::collections::HashSet;

use super::{Metrics, SchedulingProfileConditionLabels, SchedulingProfileLabels};
use crate::locks;

impl Metrics {
    /// Every SchedulingProfile now, as (name, schedulerName, Ready): the profiles not named
    /// leave the metric.
    pub fn set_schedulingprofiles_ready<'a>(
        &self,
        profiles: impl IntoIterator<Item = (&'a str, &'a str, bool)>,
    ) {
        let mut now = HashSet::new();
        for (name, scheduler, ready) in profiles {
            let labels = SchedulingProfileLabels {
                schedulingprofile: name.into(),
                profile: scheduler.into(),
            };
            self.profiles_ready
                .get_or_create(&labels)
                .set(i64::from(ready));
            now.insert(labels);
        }
        let mut before = locks::lock(&self.profiles_ready_now);
        for gone in before.difference(&now) {
            self.profiles_ready.remove(gone);
        }
        *before = now;
    }

    /// Every SchedulingProfile's conditions now, as (name, type, status): one series of 1 per
    /// condition; a condition, or a profile, not named leaves the metric.
    pub fn set_schedulingprofile_conditions<'a>(
        &self,
        conditions: impl IntoIterator<Item = (&'a str, &'a str, &'a str)>,
    ) {
        let mut now = HashSet::new();
        for (name, type_, status) in conditions {
            let labels = SchedulingProfileConditionLabels {
                schedulingprofile: name.into(),
                r#type: type_.into(),
                status: status.into(),
            };
            self.profile_conditions.get_or_create(&labels).set(1);
            now.insert(labels);
        }
        let mut before = locks::lock(&self.profile_conditions_now);
        for gone in before.difference(&now) {
            self.profile_conditions.remove(gone);
        }
        *before = now;
    }
}
