//! The SchedulingProfile reconciler. Profiles are decided as a set (two may claim one
//! schedulerName; an invalid change keeps the last good version), so they are reconciled as a
//! set: every change the watch brings, every regained leadership and a periodic resync wake one
//! reconcile of all of them, which reads every profile from the store → decides which versions
//! serve (pure, [`ProfileSet`]) → swaps them into the scheduler's registry → writes each
//! profile's status (observedGeneration, Ready, kstatus's Stalled and Reconciling, the effective
//! plugins) by server-side apply where it changed, and an Event when its verdict changes. A
//! deleted profile simply leaves the set.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt;
use kube::api::Api;
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Resource, ResourceExt};

use super::admission;
use crate::api::conditions::set_condition;
use crate::api::{SchedulingProfile, SchedulingProfileStatus};
use crate::gate::{Write, WriteGate};
use crate::locks;
use crate::recorder::{EventType, EventWriter};
use crate::scheduler::Scheduler;
use crate::scheduler::plugins::handle::Handle;
use crate::scheduler::profile::set::{ProfileSet, Verdict};
use crate::watch::{self, Readiness};

/// How often the whole set is reconciled when nothing wakes it.
const RESYNC: Duration = Duration::from_secs(300);

/// Errors of one reconcile, each naming the profile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(
        "bringing the admission policy of SchedulingProfile {name}'s namespaceSelector in step (its NamespaceDefaulting condition says why not)"
    )]
    Admission { name: String },
    #[error("writing the status of SchedulingProfile {name}: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What the reconciles share.
struct Context {
    client: kube::Client,
    scheduler: Arc<Scheduler>,
    handle: Handle,
    store: Store<SchedulingProfile>,
    set: Mutex<ProfileSet>,
    /// (generation, reason) last announced with an Event, by profile name.
    announced: Mutex<HashMap<String, (Option<i64>, &'static str)>>,
    events: EventWriter,
    /// Only a leader writes status and events; a standby compiles and serves profiles in
    /// memory, and reconciles them all again when it starts leading.
    gate: WriteGate,
    /// The namespace tether runs in: a namespaceSelector never sends its pods to a profile.
    own_namespace: String,
    /// Which watches are current: a profile whose pods wait for one that stays stale says so.
    readiness: Arc<Readiness>,
}

impl Context {
    /// Decides for every profile in the store and swaps the result into the registry; returns
    /// the profiles and their verdicts.
    fn decide(&self) -> Vec<(Arc<SchedulingProfile>, Verdict)> {
        let profiles = self.store.state();
        let decision = locks::lock(&self.set).decide(&profiles, &self.handle);
        self.scheduler.apply_profiles(decision.serving);
        let mut verdicts = decision.verdicts;
        locks::lock(&self.announced).retain(|name, _| verdicts.contains_key(name));
        let decided: Vec<_> = profiles
            .into_iter()
            .filter_map(|p| {
                let verdict = verdicts.remove(&p.name_any())?;
                Some((p, verdict))
            })
            .collect();
        self.scheduler
            .metrics
            .set_schedulingprofiles_ready(decided.iter().map(|(p, v)| {
                let name = p.metadata.name.as_deref().unwrap_or_default();
                (name, p.spec.scheduler_name.as_str(), v.ready)
            }));
        decided
    }

    /// One reconcile of the set: decide, serve, then (leading) write what changed. A failed
    /// status write does not stop the others; the first failure is returned.
    async fn reconcile(&self) -> Result<(), Error> {
        let decided = self.decide();
        let denied = self
            .handle
            .history
            .as_ref()
            .and_then(|h| h.denial().current());
        let Ok(permit) = self.gate.admit(Write::ProfileStatus) else {
            // Not leading: the conditions are the leader's to decide, and this replica's
            // series (from a term it led) would speak for it.
            self.scheduler
                .metrics
                .set_schedulingprofile_conditions(std::iter::empty());
            return Ok(());
        };
        // The namespaces the Ready profiles select, in force through admission first: their
        // conditions say how that went.
        let ready: BTreeMap<String, _> = decided
            .iter()
            .filter(|(_, v)| v.ready)
            .map(|(p, _)| (p.name_any(), admission::desired(p, &self.own_namespace)))
            .collect();
        let kept: BTreeSet<String> = decided
            .iter()
            .filter(|(_, v)| !v.ready)
            .map(|(p, _)| p.name_any())
            .collect();
        let defaulting = match permit
            .fence(admission::sync(&self.client, &ready, &kept))
            .await
        {
            Ok(Ok(outcome)) => outcome,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "the admission policies of the profiles' namespaceSelectors could not be brought in step; retrying");
                ready
                    .iter()
                    .map(|(name, objects)| {
                        let said = match objects {
                            Some(_) => admission::Defaulting::Failed(e.to_string()),
                            None => admission::Defaulting::Off,
                        };
                        (name.clone(), said)
                    })
                    .collect()
            }
            // The term ended: the next leader writes what is left.
            Err(_) => return Ok(()),
        };
        let mut failed = None;
        let mut conditions: Vec<(String, String, String)> = Vec::new();
        for (profile, verdict) in decided {
            let mut said = defaulting
                .get(&profile.name_any())
                .cloned()
                .unwrap_or(admission::Defaulting::Unchanged);
            if let admission::Defaulting::InForce(_, not_opted_in) = &mut said {
                *not_opted_in = admission::not_opted_in(&self.client, &profile).await;
            }
            if matches!(said, admission::Defaulting::Failed(_)) {
                failed.get_or_insert(Error::Admission {
                    name: profile.name_any(),
                });
            }
            let mut status = status_for(&profile, &verdict, denied.as_deref(), &said);
            // What the pods of its schedulerName wait for is what the profile serving it runs
            // (the last good version, when the current spec is invalid), as the cycle asks.
            let serving = self.scheduler.profiles.get(&profile.spec.scheduler_name);
            let stale = self
                .readiness
                .stale_loud(|plugin| serving.as_ref().is_some_and(|p| p.uses(plugin)));
            with_watches(&mut status, &stale, verdict.generation);
            conditions.extend(
                status
                    .conditions
                    .iter()
                    .map(|c| (profile.name_any(), c.type_.clone(), c.status.clone())),
            );
            if profile.status.as_ref() == Some(&status) {
                self.announce(&profile, &verdict).await;
                continue;
            }
            let written = match permit
                .fence(write_status(&self.client, &profile.name_any(), &status))
                .await
            {
                Ok(written) => written,
                // The term ended: the next leader writes what is left.
                Err(_) => return Ok(()),
            };
            if let Err(e) = written {
                tracing::warn!(error = %e, "reconcile of a SchedulingProfile failed; retrying");
                failed.get_or_insert(e);
                continue;
            }
            self.announce(&profile, &verdict).await;
        }
        // The conditions as this leader decided them (written, or to be written again on the
        // next try): `tether_schedulingprofile_condition`.
        self.scheduler.metrics.set_schedulingprofile_conditions(
            conditions
                .iter()
                .map(|(n, t, s)| (n.as_str(), t.as_str(), s.as_str())),
        );
        failed.map_or(Ok(()), Err)
    }

    /// An Event when a profile's verdict for a generation is new: Accepted or Rejected.
    async fn announce(&self, profile: &SchedulingProfile, verdict: &Verdict) {
        let name = profile.name_any();
        let key = (verdict.generation, verdict.reason);
        {
            let mut announced = locks::lock(&self.announced);
            if announced.get(&name) == Some(&key) {
                return;
            }
            announced.insert(name.clone(), key);
        }
        let generation = verdict.generation.unwrap_or(0);
        let (type_, reason, note) = if verdict.ready {
            tracing::info!(profile = %name, generation, scheduler = %profile.spec.scheduler_name, "profile serving");
            (
                EventType::Normal,
                "Accepted",
                format!(
                    "generation {generation} serves schedulerName {}",
                    profile.spec.scheduler_name
                ),
            )
        } else {
            tracing::warn!(profile = %name, generation, reason = verdict.reason, message = %verdict.message, "profile rejected");
            (
                EventType::Warning,
                verdict.reason,
                verdict.message.chars().take(1000).collect(),
            )
        };
        if let Err(e) = self
            .events
            .publish(&profile.object_ref(&()), type_, reason, "Compile", note)
            .await
        {
            tracing::debug!(profile = %name, error = %e, "could not publish the profile event");
        }
    }
}

/// The status `profile` should carry under `verdict`: its current status with Ready, kstatus's
/// Stalled and Reconciling (each transition time kept while its status holds), the observed
/// generation and the effective plugins. Pure.
/// The status that says `verdict`. A profile that records history (PlacementRecorder runs
/// at PostBind) also says whether its writes land: `HistoryWritable=False, Denied` while
/// `history_denied` (the API server's message) holds.
/// A profile with a namespaceSelector says whether it is in force in `NamespaceDefaulting`
/// (`defaulting`; without a selector the condition goes, and a profile not Ready keeps it).
pub fn status_for(
    profile: &SchedulingProfile,
    verdict: &Verdict,
    history_denied: Option<&str>,
    defaulting: &admission::Defaulting,
) -> SchedulingProfileStatus {
    let mut status = profile.status.clone().unwrap_or_default();
    match defaulting {
        admission::Defaulting::Off => status
            .conditions
            .retain(|c| c.type_ != "NamespaceDefaulting"),
        admission::Defaulting::Unchanged => {}
        admission::Defaulting::InForce(policy, not_opted_in) => {
            let mut message = format!(
                "pods created without a scheduler of their own in the namespaces namespaceSelector selects that opted in (label {}={}) get schedulerName {} (MutatingAdmissionPolicy {policy}); kube-* namespaces and tether's own never do",
                admission::OPT_IN_LABEL,
                profile.name_any(),
                profile.spec.scheduler_name
            );
            if !not_opted_in.is_empty() {
                let named: Vec<&str> = not_opted_in.iter().take(5).map(String::as_str).collect();
                let more = not_opted_in.len().saturating_sub(named.len());
                message.push_str(&format!(
                    "; selected but not opted in, so left alone: {}{}",
                    named.join(", "),
                    if more > 0 {
                        format!(" and {more} more")
                    } else {
                        String::new()
                    }
                ));
            }
            set_condition(
                &mut status.conditions,
                "NamespaceDefaulting",
                true,
                "InForce",
                &message,
                verdict.generation,
            );
        }
        admission::Defaulting::Failed(why) => {
            set_condition(
                &mut status.conditions,
                "NamespaceDefaulting",
                false,
                "WriteFailed",
                why,
                verdict.generation,
            );
        }
    }
    status.observed_generation = verdict.generation;
    set_condition(
        &mut status.conditions,
        "Ready",
        verdict.ready,
        verdict.reason,
        &verdict.message,
        verdict.generation,
    );
    // kstatus (Flux, kpt, Argo CD's health checks): a spec that cannot be served is Stalled, so a
    // pipeline fails at once instead of waiting for Ready; Reconciling is False once a verdict
    // for the generation is written (kstatus reads a newer generation as in progress by itself).
    set_condition(
        &mut status.conditions,
        "Stalled",
        !verdict.ready,
        if verdict.ready {
            "Serving"
        } else {
            verdict.reason
        },
        if verdict.ready { "" } else { &verdict.message },
        verdict.generation,
    );
    set_condition(
        &mut status.conditions,
        "Reconciling",
        false,
        "Reconciled",
        "",
        verdict.generation,
    );
    let records = verdict
        .effective
        .as_ref()
        .is_some_and(|e| e.post_bind.iter().any(|p| p == "PlacementRecorder"));
    if records {
        set_condition(
            &mut status.conditions,
            "HistoryWritable",
            history_denied.is_none(),
            if history_denied.is_some() {
                "Denied"
            } else {
                "Writable"
            },
            history_denied.unwrap_or_default(),
            verdict.generation,
        );
    }
    status.plugins = verdict.effective.clone();
    status
}

/// The `WatchesCurrent` condition: False (`WatchStale`, naming each watch and why) while a watch
/// this profile's pods need has not been current for `--watch-stale-seconds`; absent otherwise,
/// so a profile says nothing of watches until its pods wait on one for that long. Pure.
pub fn with_watches(
    status: &mut SchedulingProfileStatus,
    stale: &[watch::Stale],
    generation: Option<i64>,
) {
    if stale.is_empty() {
        status.conditions.retain(|c| c.type_ != "WatchesCurrent");
        return;
    }
    let said: Vec<String> = stale.iter().map(ToString::to_string).collect();
    set_condition(
        &mut status.conditions,
        "WatchesCurrent",
        false,
        "WatchStale",
        &format!("{}; this profile's pods wait for it", said.join("; ")),
        generation,
    );
}

/// The field manager of the conditions written on a profile tether cannot read: its own, so
/// that the apply owns those two conditions only and leaves what the controller wrote
/// (`status.plugins`, the other conditions) as it is. Once the profile reads again, the
/// controller's forced apply takes both conditions back.
pub const UNREADABLE_MANAGER: &str = "tether-unreadable";

/// The status apply that says a profile cannot be read: `Ready=False` and `Stalled=True`,
/// reason `Unreadable`, naming why (never a value of the object) and that the version read
/// before, if any, still serves. Pure.
pub fn unreadable_status(generation: Option<i64>, reason: &str) -> serde_json::Value {
    let message = format!(
        "tether cannot read this SchedulingProfile ({reason}); the version it read before, if any, still serves: fix the object or apply it again"
    );
    let mut conditions = Vec::new();
    set_condition(
        &mut conditions,
        "Ready",
        false,
        "Unreadable",
        &message,
        generation,
    );
    set_condition(
        &mut conditions,
        "Stalled",
        true,
        "Unreadable",
        &message,
        generation,
    );
    serde_json::json!({
        "apiVersion": SchedulingProfile::api_version(&()),
        "kind": SchedulingProfile::kind(&()),
        "status": {"conditions": conditions},
    })
}

/// Writes [`unreadable_status`] on profile `name`, fenced by `gate` and within the status
/// budget. The answer is not decoded: it is the object that could not be read.
pub async fn report_unreadable(
    client: &kube::Client,
    gate: &WriteGate,
    name: &str,
    generation: Option<i64>,
    reason: &str,
) -> Result<(), Error> {
    let body = unreadable_status(generation, reason);
    let params = kube::api::PatchParams::apply(UNREADABLE_MANAGER).force();
    let request = kube::core::Request::new(SchedulingProfile::url_path(&(), None))
        .patch_subresource("status", name, &params, &kube::api::Patch::Apply(&body))
        .map_err(|e| Error::Status {
            name: name.to_string(),
            source: kube::Error::BuildRequest(e),
        })?;
    let written = gate
        .write(Write::ProfileStatus, async {
            crate::k8s::budget::get().status.take().await;
            client.request_text(request).await
        })
        .await;
    match written {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(source)) => Err(Error::Status {
            name: name.to_string(),
            source,
        }),
        Err(refused) => {
            tracing::debug!(%refused, profile = name, "not saying the profile is unreadable");
            Ok(())
        }
    }
}

/// How often the reconciler looks for watches that became stale for long, or current again.
const STALE_CHECK: Duration = Duration::from_secs(15);

/// Writes `status` by server-side apply (see [`super::apply_status`]).
async fn write_status(
    client: &kube::Client,
    name: &str,
    status: &SchedulingProfileStatus,
) -> Result<(), Error> {
    let api: Api<SchedulingProfile> = Api::all(client.clone());
    super::apply_status(&api, name, status)
        .await
        .map_err(|source| Error::Status {
            name: name.to_string(),
            source,
        })?;
    Ok(())
}

/// The SchedulingProfile controller, its watch registered in `readiness` now; the future runs
/// it until the process stops. The watch counts as listed once the registry holds every
/// profile.
pub fn run(
    client: kube::Client,
    scheduler: Arc<Scheduler>,
    handle: Handle,
    instance: Option<String>,
    gate: WriteGate,
    readiness: &Arc<Readiness>,
    own_namespace: String,
) -> impl Future<Output = ()> + Send + 'static {
    let feed = readiness.register("schedulingprofiles");
    let readiness = readiness.clone();
    async move {
        let api: Api<SchedulingProfile> = Api::all(client.clone());
        let (store, writer) = kube::runtime::reflector::store();
        let ctx = Arc::new(Context {
            events: EventWriter::new(client.clone(), instance, gate.clone()),
            client,
            scheduler,
            handle,
            store,
            set: Mutex::new(ProfileSet::default()),
            announced: Mutex::new(HashMap::new()),
            gate: gate.clone(),
            own_namespace,
            readiness,
        });
        let changed = Arc::new(tokio::sync::Notify::new());

        // The reflector applies each event to the store before passing it on, and swaps a
        // whole list in at its InitDone: at each InitDone the registry is filled from every
        // profile at once, before the watch counts as listed.
        let (list_ctx, wake) = (ctx.clone(), changed.clone());
        // A watch resumed after a failure counts as current once the registry holds what it
        // brought, as after a list.
        let (resumed_ctx, resumed_wake) = (ctx.clone(), changed.clone());
        let before_current: watch::BeforeCurrent = Box::new(move || {
            resumed_ctx.decide();
            resumed_wake.notify_one();
        });
        let watching = watch::watch_then(
            api,
            "schedulingprofiles",
            Some(feed.clone()),
            before_current,
        )
        .reflect(writer)
        .for_each(move |event| {
            match event {
                Ok(watcher::Event::InitDone) => {
                    list_ctx.decide();
                    feed.listed();
                    wake.notify_one();
                }
                Ok(watcher::Event::Apply(_) | watcher::Event::Delete(_)) => wake.notify_one(),
                Ok(_) | Err(_) => {}
            }
            async {}
        });

        let mut denial = ctx.handle.history.as_ref().map(|h| h.denial().subscribe());
        let stale_ctx = ctx.readiness.clone();
        let reconciling = async move {
            let mut gained = Box::pin(gate.leadership().gained());
            let mut wait = RESYNC;
            let mut delay = Duration::ZERO;
            let mut resync_at = tokio::time::Instant::now() + wait;
            let mut checks = tokio::time::interval(STALE_CHECK);
            let mut loud: Vec<String> = Vec::new();
            loop {
                tokio::select! {
                    () = changed.notified() => {}
                    _ = checks.tick() => {
                        let now: Vec<String> = stale_ctx
                            .stale_loud(|_| true)
                            .into_iter()
                            .map(|s| s.watch)
                            .collect();
                        if now == loud {
                            continue;
                        }
                        loud = now;
                    }
                    Some(()) = gained.next() => {}
                    Some(Ok(())) = async {
                        match denial.as_mut() {
                            Some(rx) => Some(rx.changed().await),
                            None => std::future::pending().await,
                        }
                    } => {}
                    () = tokio::time::sleep_until(resync_at) => {}
                }
                match ctx.reconcile().await {
                    Ok(()) => {
                        delay = Duration::ZERO;
                        wait = RESYNC;
                    }
                    Err(_) => {
                        delay = super::next_retry(delay);
                        wait = delay;
                    }
                }
                resync_at = tokio::time::Instant::now() + wait;
            }
        };
        tokio::join!(watching, reconciling);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::EffectivePlugins;

    fn verdict(post_bind: &[&str]) -> Verdict {
        Verdict {
            ready: true,
            reason: "Serving",
            message: String::new(),
            generation: Some(3),
            effective: Some(EffectivePlugins {
                post_bind: post_bind.iter().map(|p| p.to_string()).collect(),
                ..Default::default()
            }),
        }
    }

    fn condition(status: &SchedulingProfileStatus, type_: &str) -> Option<(String, String)> {
        status
            .conditions
            .iter()
            .find(|c| c.type_ == type_)
            .map(|c| (c.status.clone(), c.reason.clone()))
    }

    /// A profile that records history says whether its writes land; one that does not, says
    /// nothing of it.
    #[test]
    fn a_profile_that_records_history_says_when_its_writes_are_denied() {
        let spec =
            serde_json::from_value(serde_json::json!({"schedulerName": "s"})).expect("a spec");
        let profile = SchedulingProfile::new("p", spec);
        let records = verdict(&["PlacementRecorder"]);
        let denied = status_for(
            &profile,
            &records,
            Some("forbidden"),
            &admission::Defaulting::Off,
        );
        assert_eq!(
            condition(&denied, "HistoryWritable"),
            Some(("False".into(), "Denied".into()))
        );
        assert_eq!(
            condition(
                &status_for(&profile, &records, None, &admission::Defaulting::Off),
                "HistoryWritable"
            ),
            Some(("True".into(), "Writable".into()))
        );
        let plain = status_for(
            &profile,
            &verdict(&[]),
            Some("forbidden"),
            &admission::Defaulting::Off,
        );
        assert_eq!(condition(&plain, "HistoryWritable"), None);
    }

    /// A watch the profile's pods need that stays stale is named, with why, in
    /// `WatchesCurrent=False`; once it is current the condition goes.
    #[test]
    fn a_profile_says_which_stale_watch_its_pods_wait_for() {
        let mut status = SchedulingProfileStatus::default();
        let stale = [watch::Stale {
            watch: "resourceclaims".into(),
            for_: Duration::from_secs(150),
            reason: Some("forbidden".into()),
        }];
        with_watches(&mut status, &stale, Some(2));
        let c = status
            .conditions
            .iter()
            .find(|c| c.type_ == "WatchesCurrent")
            .expect("the condition");
        assert_eq!(
            (c.status.as_str(), c.reason.as_str()),
            ("False", "WatchStale")
        );
        assert!(c.message.contains("resourceclaims") && c.message.contains("forbidden"));
        with_watches(&mut status, &[], Some(2));
        assert!(
            status
                .conditions
                .iter()
                .all(|c| c.type_ != "WatchesCurrent")
        );
    }

    /// An unreadable profile is said so on itself: Ready=False and Stalled=True, reason
    /// Unreadable, for its generation, naming why and nothing of its values.
    #[test]
    fn an_unreadable_profile_is_not_ready_and_says_why() {
        let body = unreadable_status(Some(4), "recursion limit exceeded at line 1 column 900");
        assert_eq!(body["kind"], "SchedulingProfile");
        let conditions = body["status"]["conditions"].as_array().expect("conditions");
        let find = |t: &str| {
            conditions
                .iter()
                .find(|c| c["type"] == t)
                .unwrap_or_else(|| panic!("no {t}: {body}"))
        };
        for (type_, status) in [("Ready", "False"), ("Stalled", "True")] {
            let c = find(type_);
            assert_eq!(c["status"], status);
            assert_eq!(c["reason"], "Unreadable");
            assert_eq!(c["observedGeneration"], 4);
            assert!(
                c["message"].as_str().is_some_and(
                    |m| m.contains("recursion limit exceeded") && m.contains("still serves")
                ),
                "{c}"
            );
        }
        assert_eq!(conditions.len(), 2, "only the two conditions it owns");
    }
}
