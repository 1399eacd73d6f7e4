//! Leader election on a `coordination.k8s.io` Lease, as kube-scheduler (client-go's
//! leaderelection) does it: a candidate takes the Lease when its holder has not renewed it for a
//! lease duration (measured on this replica's clock, from when it saw the record change, so two
//! machines' clocks are never compared); the leader renews it every retry period; a leader that
//! could not renew for a renew deadline stops leading (writes nothing more). Where kube-scheduler
//! then exits to come back as a standby, tether stays up: its scheduler is dropped and built
//! again with fresh caches (`run.rs`), and the replica competes again, so a brownout of the API
//! server never turns into kubelet's CrashLoopBackOff. The renew deadline is shorter than the
//! lease duration, so a leader stops writing seconds before anyone else may take over.
//!
//! kube-lease-manager was tried first: it does not tell its caller that renewals are failing
//! until the lease is lost, so a leader cut off from the API server could not stop binding
//! before its lease expired.

use std::sync::Arc;
use std::time::Duration;

use futures::Stream;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::api::{Api, ObjectMeta, PostParams};
use tokio::sync::watch;
use tokio::time::Instant;

/// Where and how this replica takes part in the election.
#[derive(Clone, Debug)]
pub struct LeaseConfig {
    /// The Lease's name and namespace.
    pub name: String,
    pub namespace: String,
    /// This replica's identity in the Lease (the pod name).
    pub identity: String,
    /// How long a Lease not renewed keeps others from taking it.
    pub lease_duration: Duration,
    /// How long the leader keeps leading while its renewals fail.
    pub renew_deadline: Duration,
    /// How often the leader renews and a candidate tries.
    pub retry_period: Duration,
}

/// Errors of the election settings.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error(
        "the renew deadline ({renew:?}) must be shorter than the lease duration ({lease:?}) and longer than the retry period ({retry:?})"
    )]
    Durations {
        lease: Duration,
        renew: Duration,
        retry: Duration,
    },
    #[error("the Lease name, namespace and this replica's identity must not be empty")]
    Empty,
    #[error(
        "the lease duration ({lease:?}) must be at most {MAX_LEASE_DURATION:?}, and the retry period at least {MIN_RETRY_PERIOD:?}"
    )]
    OutOfRange { lease: Duration },
}

/// The longest lease duration taken: a standby waits this long for a leader that is gone, so
/// anything longer is a mistake, and every deadline derived from it stays far from the limits
/// of the clock.
pub const MAX_LEASE_DURATION: Duration = Duration::from_secs(3600);
/// The shortest retry period taken (a renew every millisecond would flood the API server).
pub const MIN_RETRY_PERIOD: Duration = Duration::from_millis(10);

impl LeaseConfig {
    /// Checks the settings as kube-scheduler does: retry period < renew deadline < lease
    /// duration.
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.name.is_empty() || self.namespace.is_empty() || self.identity.is_empty() {
            return Err(ConfigError::Empty);
        }
        if self.lease_duration > MAX_LEASE_DURATION || self.retry_period < MIN_RETRY_PERIOD {
            return Err(ConfigError::OutOfRange {
                lease: self.lease_duration,
            });
        }
        if !(self.retry_period < self.renew_deadline && self.renew_deadline < self.lease_duration) {
            return Err(ConfigError::Durations {
                lease: self.lease_duration,
                renew: self.renew_deadline,
                retry: self.retry_period,
            });
        }
        Ok(())
    }
}

/// Whether this replica leads: read by everything that writes to the API server. Without an
/// election it leads from the start and for good.
#[derive(Clone)]
pub struct Leadership {
    state: Arc<watch::Sender<Term>>,
    elected: bool,
    /// Why this replica, a candidate, cannot read or take the Lease now (its namespace missing,
    /// RBAC denied, the API server refusing): `None` while its tries are answered.
    unreachable: Arc<std::sync::Mutex<Option<String>>>,
}

/// Which term of leading this is (counted from 1; 0: never led) and until when it lasts.
#[derive(Clone, Copy, Debug, Default)]
struct Term {
    number: u64,
    /// Leading until this instant (a renewal moves it on); `None`: not leading.
    until: Option<Instant>,
}

impl Leadership {
    /// For a replica that runs alone (`--leader-elect=false`): it always leads.
    pub fn alone() -> Self {
        Leadership {
            state: Arc::new(watch::Sender::new(Term::default())),
            elected: false,
            unreachable: Arc::default(),
        }
    }

    /// For a replica that takes part in an election: a standby until it wins.
    pub fn elected() -> Self {
        Leadership {
            state: Arc::new(watch::Sender::new(Term::default())),
            elected: true,
            unreachable: Arc::default(),
        }
    }

    /// Why this replica cannot read or take the Lease now, while it cannot (a standby that
    /// will never lead until someone fixes what this says).
    pub fn unreachable(&self) -> Option<String> {
        crate::locks::lock(&self.unreachable).clone()
    }

    /// Records whether the last try was answered; returns whether that changed.
    fn set_unreachable(&self, reason: Option<String>) -> bool {
        let mut held = crate::locks::lock(&self.unreachable);
        let changed = *held != reason;
        *held = reason;
        changed
    }

    /// Whether leader election is on.
    pub fn is_elected(&self) -> bool {
        self.elected
    }

    /// Whether this replica leads now: it runs alone, or it holds the Lease and its last
    /// renewal is recent enough.
    pub fn is_leading(&self) -> bool {
        !self.elected
            || self
                .state
                .borrow()
                .until
                .is_some_and(|t| Instant::now() < t)
    }

    /// The term this replica leads in now (its number), while it leads; `None` for a replica
    /// that runs alone or does not lead.
    pub fn current_term(&self) -> Option<u64> {
        let term = *self.state.borrow();
        term.until
            .is_some_and(|until| Instant::now() < until)
            .then_some(term.number)
    }

    /// Resolves once term `number` is over: its end passed without a renewal, or it was
    /// stopped. Never resolves for a replica that runs alone.
    pub async fn term_ended(&self, number: u64) {
        if !self.elected {
            return std::future::pending().await;
        }
        let mut rx = self.state.subscribe();
        loop {
            let term = *rx.borrow_and_update();
            let Some(until) = term.until.filter(|_| term.number == number) else {
                return;
            };
            if Instant::now() >= until {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep_until(until) => {}
                changed = rx.changed() => {
                    if changed.is_err() {
                        return;
                    }
                }
            }
        }
    }

    /// The number of the term this replica leads in now, or of the next one, once it begins.
    /// Never resolves for a replica that runs alone.
    pub async fn next_term(&self) -> u64 {
        if !self.elected {
            return std::future::pending().await;
        }
        let mut rx = self.state.subscribe();
        let number = rx.wait_for(|t| t.until.is_some()).await.map(|t| t.number);
        match number {
            Ok(number) => number,
            // The sender lives as long as `self`: never.
            Err(_) => std::future::pending().await,
        }
    }

    #[cfg(test)]
    pub(crate) fn lead_until_for_tests(&self, until: Instant) {
        self.lead_until(until);
    }

    #[cfg(test)]
    pub(crate) fn stop_for_tests(&self) {
        self.stop();
    }

    /// Waits until this replica leads.
    pub async fn wait_leading(&self) {
        if !self.elected {
            return;
        }
        let mut rx = self.state.subscribe();
        let _ = rx.wait_for(|t| t.until.is_some()).await;
    }

    /// One item each time this replica starts leading (a term begins).
    pub fn gained(&self) -> impl Stream<Item = ()> + Send + 'static {
        let rx = self.state.subscribe();
        futures::stream::unfold((rx, 0), |(mut rx, seen)| async move {
            loop {
                let term = rx.borrow_and_update().number;
                if term > seen {
                    return Some(((), (rx, term)));
                }
                rx.changed().await.ok()?;
            }
        })
    }

    fn lead_until(&self, until: Instant) {
        self.state.send_modify(|t| {
            if t.until.is_none() {
                t.number += 1;
            }
            t.until = Some(until);
        });
    }

    fn stop(&self) {
        self.state.send_modify(|t| t.until = None);
    }
}

/// What a replica does with the Lease record it read.
#[derive(Debug, PartialEq, Eq)]
enum Decision {
    /// Renew its own Lease.
    Renew,
    /// Take the Lease: free, or not renewed by its holder for a lease duration.
    Take,
    /// Another replica holds it.
    HeldBy(String),
}

/// Decides from the Lease `spec` read, as `me`, the record having looked the same for
/// `unchanged_for` (on this replica's clock). Pure.
fn decide(
    spec: &LeaseSpec,
    me: &str,
    unchanged_for: Duration,
    default_lease: Duration,
) -> Decision {
    let holder = spec.holder_identity.as_deref().unwrap_or_default();
    if holder == me {
        return Decision::Renew;
    }
    if holder.is_empty() {
        return Decision::Take;
    }
    let lease = spec
        .lease_duration_seconds
        .and_then(|s| u64::try_from(s).ok())
        .map_or(default_lease, Duration::from_secs);
    if unchanged_for >= lease {
        Decision::Take
    } else {
        Decision::HeldBy(holder.to_string())
    }
}

/// The record as this replica last saw it change.
struct Observed {
    record: LeaseSpec,
    since: Instant,
}

/// What [`run`] tells its caller as the election goes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Election {
    /// This replica started (`true`) or stopped leading.
    Leading(bool),
    /// This replica, a candidate, cannot read or take the Lease (`true`), or can again.
    Unreachable(bool),
}

/// Runs the election for `leadership` for as long as the process runs. A replica that stops
/// leading (its renewals failed for the renew deadline, or another replica took the Lease)
/// stands by and competes again; its scheduler, told by the end of the term, starts over.
/// `on_change` hears each start and end of leading.
pub async fn run(
    client: kube::Client,
    config: LeaseConfig,
    leadership: Leadership,
    on_change: impl Fn(Election) + Send + Sync + 'static,
) {
    let lease = format!("{}/{}", config.namespace, config.name);
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let mut observed: Option<Observed> = None;
    let mut logged_holder = String::new();
    let mut leading_until: Option<Instant> = None;
    loop {
        let started = Instant::now();
        // A renewal is abandoned when the term ends (as client-go's is cancelled at the renew
        // deadline): a call that hangs never keeps a deposed leader going.
        let attempt = try_acquire_or_renew(&api, &config, &mut observed);
        // A candidate's try is bounded too: one that hangs would keep it from trying again.
        let tried = tokio::time::timeout_at(
            leading_until.unwrap_or(started + config.renew_deadline),
            attempt,
        )
        .await
        .unwrap_or(Err(TryError::NotAnswered));
        let reason = match &tried {
            Err(e) if leading_until.is_none() => {
                Some(format!("cannot read or take the Lease {lease}: {e}"))
            }
            _ => None,
        };
        if leadership.set_unreachable(reason.clone()) {
            match &reason {
                // Said once per new reason: a replica that can never lead says why, at WARN.
                Some(why) => {
                    tracing::warn!(identity = %config.identity, "{why}; this replica stands by until it can")
                }
                None => tracing::info!(lease = %lease, "the Lease can be read and taken again"),
            }
            on_change(Election::Unreachable(reason.is_some()));
        }
        match tried {
            Ok(None) => {
                let until = started + config.renew_deadline;
                if leading_until.is_none() {
                    tracing::info!(lease = %lease, identity = %config.identity, "leading: this replica holds the Lease");
                    on_change(Election::Leading(true));
                }
                leading_until = Some(until);
                leadership.lead_until(until);
            }
            Ok(Some(holder)) => {
                if leading_until.take().is_some() {
                    leadership.stop();
                    on_change(Election::Leading(false));
                    tracing::warn!(leader = %holder, "stopped leading: the Lease was taken by another replica; standing by");
                    logged_holder = holder;
                } else if holder != logged_holder {
                    tracing::info!(leader = %holder, "standing by: another replica leads");
                    logged_holder = holder;
                }
            }
            Err(e) => {
                if let Some(until) = leading_until {
                    if Instant::now() >= until {
                        leading_until = None;
                        logged_holder.clear();
                        leadership.stop();
                        on_change(Election::Leading(false));
                        tracing::warn!(error = %e, renew_deadline = ?config.renew_deadline, "stopped leading: could not renew the Lease within the renew deadline; standing by");
                    } else {
                        tracing::warn!(error = %e, "could not renew the Lease; still leading until the renew deadline");
                    }
                } else {
                    tracing::debug!(error = %e, "could not read or take the Lease");
                }
            }
        }
        // A candidate spreads its tries (as client-go does) so that standbys do not try in step.
        let wait = if leading_until.is_some() {
            config.retry_period
        } else {
            config.retry_period.mul_f64(rand::random_range(1.0..1.2))
        };
        let next = started + wait;
        match leading_until {
            // Never sleep past the deadline: stop leading the moment it passes.
            Some(until) if until < next => {
                tokio::time::sleep_until(until.max(Instant::now())).await;
            }
            _ => tokio::time::sleep_until(next).await,
        }
    }
}

/// Why a try of the Lease failed.
#[derive(Debug, thiserror::Error)]
enum TryError {
    #[error("{}", crate::k8s::api_errors::message(.0))]
    Api(#[from] kube::Error),
    #[error(
        "the try was not answered in time (before the term ended, or within the renew deadline)"
    )]
    NotAnswered,
}

/// One try: `Ok(None)` when this replica holds the Lease now, `Ok(Some(holder))` when another
/// does.
async fn try_acquire_or_renew(
    api: &Api<Lease>,
    config: &LeaseConfig,
    observed: &mut Option<Observed>,
) -> Result<Option<String>, TryError> {
    let now = MicroTime(jiff::Timestamp::now());
    let lease_seconds = i32::try_from(config.lease_duration.as_secs()).unwrap_or(i32::MAX);
    let Some(current) = api.get_opt(&config.name).await? else {
        let lease = Lease {
            metadata: ObjectMeta {
                name: Some(config.name.clone()),
                namespace: Some(config.namespace.clone()),
                ..Default::default()
            },
            spec: Some(LeaseSpec {
                holder_identity: Some(config.identity.clone()),
                lease_duration_seconds: Some(lease_seconds),
                acquire_time: Some(now.clone()),
                renew_time: Some(now),
                lease_transitions: Some(0),
                ..Default::default()
            }),
        };
        return match api.create(&PostParams::default(), &lease).await {
            Ok(_) => Ok(None),
            // Another replica created it first.
            Err(kube::Error::Api(e)) if e.code == 409 => Ok(Some(String::new())),
            Err(e) => Err(e.into()),
        };
    };
    let record = current.spec.clone().unwrap_or_default();
    if observed.as_ref().is_none_or(|o| o.record != record) {
        *observed = Some(Observed {
            record: record.clone(),
            since: Instant::now(),
        });
    }
    let unchanged_for = observed
        .as_ref()
        .map_or(Duration::ZERO, |o| o.since.elapsed());
    let mut spec = record.clone();
    match decide(
        &record,
        &config.identity,
        unchanged_for,
        config.lease_duration,
    ) {
        Decision::HeldBy(holder) => return Ok(Some(holder)),
        Decision::Renew => {}
        Decision::Take => {
            spec.holder_identity = Some(config.identity.clone());
            spec.acquire_time = Some(now.clone());
            spec.lease_transitions = Some(record.lease_transitions.unwrap_or(0).saturating_add(1));
        }
    }
    spec.lease_duration_seconds = Some(lease_seconds);
    spec.renew_time = Some(now);
    let mut updated = current;
    updated.spec = Some(spec);
    match api
        .replace(&config.name, &PostParams::default(), &updated)
        .await
    {
        Ok(_) => Ok(None),
        // Written by another replica since it was read: not ours this time.
        Err(kube::Error::Api(e)) if e.code == 409 => {
            Ok(Some(record.holder_identity.unwrap_or_default()))
        }
        Err(e) => Err(e.into()),
    }
}

/// Gives the Lease up (a clean shutdown of the leader): a standby takes it at its next try
/// instead of waiting for it to expire. Best effort.
pub async fn release(client: kube::Client, config: &LeaseConfig) {
    let api: Api<Lease> = Api::namespaced(client, &config.namespace);
    let Ok(Some(mut lease)) = api.get_opt(&config.name).await else {
        return;
    };
    let Some(spec) = lease.spec.as_mut() else {
        return;
    };
    if spec.holder_identity.as_deref() != Some(config.identity.as_str()) {
        return;
    }
    let now = MicroTime(jiff::Timestamp::now());
    spec.holder_identity = None;
    spec.lease_duration_seconds = Some(1);
    spec.acquire_time = Some(now.clone());
    spec.renew_time = Some(now);
    match api
        .replace(&config.name, &PostParams::default(), &lease)
        .await
    {
        Ok(_) => tracing::info!("released the Lease"),
        Err(e) => {
            tracing::warn!(error = %e, "could not release the Lease; a standby takes over once it expires")
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn held_by(holder: Option<&str>, seconds: Option<i32>) -> LeaseSpec {
        LeaseSpec {
            holder_identity: holder.map(String::from),
            lease_duration_seconds: seconds,
            ..Default::default()
        }
    }

    #[test]
    fn a_lease_is_taken_only_when_free_or_not_renewed_for_its_duration() {
        let lease = Duration::from_secs(15);
        let s = Duration::from_secs;
        let cases = [
            (
                "mine",
                held_by(Some("me"), Some(15)),
                s(60),
                Decision::Renew,
            ),
            ("free", held_by(None, Some(15)), s(0), Decision::Take),
            ("released", held_by(Some(""), Some(1)), s(0), Decision::Take),
            (
                "renewed recently",
                held_by(Some("other"), Some(15)),
                s(14),
                Decision::HeldBy("other".into()),
            ),
            (
                "expired",
                held_by(Some("other"), Some(15)),
                s(15),
                Decision::Take,
            ),
            (
                "the record's own duration counts",
                held_by(Some("other"), Some(30)),
                s(20),
                Decision::HeldBy("other".into()),
            ),
            (
                "no duration: ours",
                held_by(Some("other"), None),
                s(16),
                Decision::Take,
            ),
        ];
        for (name, spec, unchanged, want) in cases {
            assert_eq!(decide(&spec, "me", unchanged, lease), want, "{name}");
        }
    }

    #[test]
    fn the_renew_deadline_must_fall_between_the_retry_period_and_the_lease_duration() {
        let config = |lease: u64, renew: u64, retry: u64| LeaseConfig {
            name: "tether".into(),
            namespace: "tether-system".into(),
            identity: "tether-0".into(),
            lease_duration: Duration::from_secs(lease),
            renew_deadline: Duration::from_secs(renew),
            retry_period: Duration::from_secs(retry),
        };
        assert!(config(15, 10, 2).validate().is_ok());
        assert!(config(10, 10, 2).validate().is_err());
        assert!(config(15, 2, 2).validate().is_err());
        assert!(config(3600, 10, 2).validate().is_ok());
        // A huge retry period, with a renew deadline and a lease longer still: refused, not a
        // deadline past the end of the clock.
        assert!(
            config(u64::MAX, u64::MAX - 1, u64::MAX - 2)
                .validate()
                .is_err()
        );
        assert!(config(3601, 10, 2).validate().is_err());
        assert!(config(15, 10, 0).validate().is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn leading_lapses_at_the_deadline_and_each_start_is_announced_once() {
        use futures::StreamExt;
        let leadership = Leadership::elected();
        assert!(!leadership.is_leading(), "a standby at first");
        let mut gained = Box::pin(leadership.gained());
        leadership.lead_until(Instant::now() + Duration::from_secs(10));
        assert!(leadership.is_leading());
        leadership.lead_until(Instant::now() + Duration::from_secs(12));
        assert_eq!(gained.next().await, Some(()), "started leading");
        tokio::time::advance(Duration::from_secs(13)).await;
        assert!(!leadership.is_leading(), "not renewed: no longer leading");
        leadership.stop();
        leadership.lead_until(Instant::now() + Duration::from_secs(10));
        assert_eq!(gained.next().await, Some(()), "leading again");
        assert!(Leadership::alone().is_leading());
    }

    /// A candidate whose Lease cannot be created (its namespace missing) says why, and says so
    /// again no more while the reason stays; once a try is answered the reason is gone.
    #[tokio::test]
    async fn a_candidate_that_cannot_take_the_lease_says_why() {
        let namespace_exists = Arc::new(std::sync::atomic::AtomicBool::new(false));
        let exists = namespace_exists.clone();
        let client = crate::scheduler::testing::stand_in_client(move |method, _path, sent| {
            let missing = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "reason": "NotFound", "code": 404,
                "message": "namespaces \"tether-system\" not found"});
            match method {
                "GET" => (404, missing),
                _ if exists.load(std::sync::atomic::Ordering::SeqCst) => (201, sent),
                _ => (404, missing),
            }
        });
        let leadership = Leadership::elected();
        let config = LeaseConfig {
            name: "tether".into(),
            namespace: "tether-system".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_millis(20),
        };
        let events = Arc::new(std::sync::Mutex::new(Vec::new()));
        let heard = events.clone();
        let running = tokio::spawn(run(client, config, leadership.clone(), move |e| {
            heard.lock().expect("events").push(e)
        }));
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        while leadership.unreachable().is_none() {
            assert!(tokio::time::Instant::now() < deadline, "no reason given");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let why = leadership.unreachable().expect("a reason");
        assert!(why.contains("tether-system/tether"), "{why}");
        assert!(why.contains("not found"), "{why}");
        assert!(!leadership.is_leading());
        tokio::time::sleep(Duration::from_millis(100)).await;
        assert_eq!(
            *events.lock().expect("events"),
            [Election::Unreachable(true)],
            "said once while the reason stays"
        );

        namespace_exists.store(true, std::sync::atomic::Ordering::SeqCst);
        while !leadership.is_leading() {
            assert!(tokio::time::Instant::now() < deadline, "never led");
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert_eq!(leadership.unreachable(), None);
        assert_eq!(
            *events.lock().expect("events"),
            [
                Election::Unreachable(true),
                Election::Unreachable(false),
                Election::Leading(true)
            ]
        );
        running.abort();
    }

    /// A renewal that is never answered (a half-open connection, a request stuck in a queue)
    /// is abandoned when the term ends: the leader stops then, instead of waiting on the call
    /// while another replica may already lead, and stands by.
    #[tokio::test(start_paused = true)]
    async fn a_renewal_that_hangs_ends_the_term_on_time() {
        let calls = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let counted = calls.clone();
        let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
            let n = counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            async move {
                let reply = if n == 0 {
                    // The first GET: no Lease yet.
                    (
                        404,
                        serde_json::json!({"kind": "Status", "apiVersion": "v1",
                        "status": "Failure", "reason": "NotFound", "code": 404, "message": "no"}),
                    )
                } else if n == 1 {
                    // The create: the Lease is ours.
                    let bytes = req.into_body().collect_bytes().await.unwrap_or_default();
                    (201, serde_json::from_slice(&bytes).unwrap_or_default())
                } else {
                    // Every renewal after it hangs.
                    std::future::pending::<()>().await;
                    unreachable!("pending never ends")
                };
                Ok::<_, std::convert::Infallible>(
                    http::Response::builder()
                        .status(reply.0)
                        .header("content-type", "application/json")
                        .body(kube::client::Body::from(
                            serde_json::to_vec(&reply.1).unwrap_or_default(),
                        ))
                        .expect("a response"),
                )
            }
        });
        let client = kube::Client::new(service, "default");
        let leadership = Leadership::elected();
        let config = LeaseConfig {
            name: "tether".into(),
            namespace: "tether-system".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        };
        let started = Instant::now();
        let (tx, mut heard) = tokio::sync::mpsc::unbounded_channel();
        let running = tokio::spawn(run(client, config, leadership.clone(), move |e| {
            let _ = tx.send((e, Instant::now()));
        }));
        let stopped = tokio::time::timeout(Duration::from_secs(60), async {
            while let Some((event, at)) = heard.recv().await {
                if event == Election::Leading(false) {
                    return Some(at);
                }
            }
            None
        })
        .await
        .expect("the term ends when its deadline passes, not when the call is answered")
        .expect("stopped leading");
        let took = stopped.duration_since(started);
        assert!(!leadership.is_leading());
        assert!(
            took <= Duration::from_secs(10) + Duration::from_millis(100),
            "ended with the term, {took:?} after it began"
        );
        assert!(!running.is_finished(), "it stands by and competes again");
        running.abort();
        assert!(
            calls.load(std::sync::atomic::Ordering::SeqCst) >= 3,
            "a renewal was tried"
        );
    }
}
