//! The SchedulingProfile reconciler: read every profile from the store → decide which versions
//! serve (pure, [`ProfileSet`]) → swap them into the scheduler's registry → write this profile's
//! status (observedGeneration, Ready, effective plugins) and an Event when its verdict changes.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use std::future::Future;

use futures::StreamExt;
use kube::api::{Api, Patch, PatchParams};
use kube::runtime::controller::{Action, Controller, Error as ControllerError};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};

use crate::locks;
use crate::recorder::{EventType, EventWriter};
use crate::watch::{self, Readiness};
use kube::{Resource, ResourceExt};

use crate::api::conditions::set_condition;
use crate::api::{SchedulingProfile, SchedulingProfileStatus};
use crate::gate::{Write, WriteGate};
use crate::scheduler::Scheduler;
use crate::scheduler::plugins::registry::Handle;
use crate::scheduler::profile::set::{ProfileSet, Verdict};

/// Errors of one reconcile, each naming the profile.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error("writing the status of SchedulingProfile {name}: {source}")]
    Status {
        name: String,
        #[source]
        source: kube::Error,
    },
}

/// What every reconcile shares.
pub struct Context {
    client: kube::Client,
    scheduler: Arc<Scheduler>,
    handle: Handle,
    store: Store<SchedulingProfile>,
    set: Mutex<ProfileSet>,
    verdicts: Mutex<BTreeMap<String, Verdict>>,
    /// (generation, reason) last announced with an Event, by profile name.
    announced: Mutex<HashMap<String, (Option<i64>, &'static str)>>,
    events: EventWriter,
    resync: tokio::sync::mpsc::Sender<()>,
    /// Only a leader writes status and events; a standby compiles and serves profiles in
    /// memory, and reconciles them all again when it starts leading.
    gate: WriteGate,
}

impl Context {
    /// Decides for all profiles and swaps the result into the registry. Returns the verdict
    /// of `name`, and whether any other profile's verdict changed (they then need a reconcile).
    fn sync(&self, name: &str) -> (Option<Verdict>, bool) {
        let profiles = self.store.state();
        let decision = locks::lock(&self.set).decide(&profiles, &self.handle);
        self.scheduler.apply_profiles(decision.serving);
        let mut last = locks::lock(&self.verdicts);
        let others_changed = decision
            .verdicts
            .iter()
            .any(|(n, v)| n != name && last.get(n) != Some(v))
            || last
                .keys()
                .any(|n| n != name && !decision.verdicts.contains_key(n));
        let verdict = decision.verdicts.get(name).cloned();
        *last = decision.verdicts;
        (verdict, others_changed)
    }
}

async fn reconcile(profile: Arc<SchedulingProfile>, ctx: Arc<Context>) -> Result<Action, Error> {
    let name = profile.name_any();
    let (verdict, others_changed) = ctx.sync(&name);
    if others_changed {
        let _ = ctx.resync.try_send(());
    }
    let Some(verdict) = verdict else {
        return Ok(Action::await_change());
    };
    if !ctx.gate.admits(Write::ProfileStatus) {
        return Ok(Action::await_change());
    }

    let mut status = profile.status.clone().unwrap_or_default();
    let before = status.clone();
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
    status.plugins = verdict.effective.clone();
    if status != before {
        write_status(&ctx.client, &name, &status).await?;
    }
    announce(&ctx, &profile, &verdict).await;
    Ok(Action::requeue(Duration::from_secs(300)))
}

async fn write_status(
    client: &kube::Client,
    name: &str,
    status: &SchedulingProfileStatus,
) -> Result<(), Error> {
    let api: Api<SchedulingProfile> = Api::all(client.clone());
    crate::k8s::budget::get().status.take().await;
    let patch = serde_json::json!({"status": status});
    api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(|source| Error::Status {
            name: name.to_string(),
            source,
        })?;
    Ok(())
}

/// An Event when a profile's verdict for a generation is new: Accepted or Rejected.
async fn announce(ctx: &Context, profile: &SchedulingProfile, verdict: &Verdict) {
    let name = profile.name_any();
    let key = (verdict.generation, verdict.reason);
    {
        let mut announced = locks::lock(&ctx.announced);
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
    if let Err(e) = ctx
        .events
        .publish(&profile.object_ref(&()), type_, reason, "Compile", note)
        .await
    {
        tracing::debug!(profile = %name, error = %e, "could not publish the profile event");
    }
}

fn error_policy(profile: Arc<SchedulingProfile>, error: &Error, _ctx: Arc<Context>) -> Action {
    tracing::warn!(profile = %profile.name_any(), error = %error, "reconcile failed; retrying");
    Action::requeue(Duration::from_secs(5))
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
) -> impl Future<Output = ()> + Send + 'static {
    let feed = readiness.register("schedulingprofiles");
    async move {
        let api: Api<SchedulingProfile> = Api::all(client.clone());
        let (store, writer) = kube::runtime::reflector::store();
        let (resync_tx, resync_rx) = tokio::sync::mpsc::channel(1);
        let ctx = Arc::new(Context {
            events: EventWriter::new(client.clone(), instance).gated_by(gate.clone()),
            client,
            scheduler,
            handle,
            store: store.clone(),
            set: Mutex::new(ProfileSet::default()),
            verdicts: Mutex::new(BTreeMap::new()),
            announced: Mutex::new(HashMap::new()),
            resync: resync_tx.clone(),
            gate: gate.clone(),
        });
        // The reflector applies each event to the store before passing it on, so at each
        // InitDone the store holds every profile: fill the registry from all of them at once.
        // After a re-list, a profile deleted meanwhile is gone from the store: every profile is
        // reconciled again.
        let list_ctx = ctx.clone();
        let list_resync = resync_tx.clone();
        let profiles = watch::watch_each_object(api, "schedulingprofiles", Some(feed.clone()))
            .reflect(writer)
            .inspect(move |event| {
                if matches!(event, Ok(watcher::Event::InitDone)) {
                    list_ctx.sync("");
                    feed.listed();
                    let _ = list_resync.try_send(());
                }
            })
            .touched_objects();
        let sync_ctx = ctx.clone();
        Controller::for_stream(watch::objects_only(profiles), store)
            .reconcile_all_on(tokio_stream::wrappers::ReceiverStream::new(resync_rx))
            .reconcile_all_on(gate.leadership().gained())
            .run(reconcile, error_policy, ctx)
            .for_each(move |result| {
                // A deleted profile is gone from the store: decide again without it, and let
                // the others (a conflict's loser may now serve) be reconciled.
                if let Err(ControllerError::ObjectNotFound(obj)) = &result {
                    sync_ctx.sync(&obj.name);
                    let _ = resync_tx.try_send(());
                }
                async {}
            })
            .await;
    }
}
