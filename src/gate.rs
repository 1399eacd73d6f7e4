//! The write gate: every write tether makes to the cluster goes through it (a bind, a history
//! write, a status, an event, a failure report, a preemption's eviction, VolumeBinding's
//! writes). It is the one place that decides whether this replica may write now, so that
//! fencing a deposed leader is a rule here, not a check scattered over the writers.
//!
//! The rule: a write is admitted only while this replica leads, in the term its scheduler
//! first wrote in (a scheduler leads one term at most: a replica that lost its Lease builds a
//! new one), and only until the gate is closed (at shutdown). An admitted write is then
//! **fenced**: [`Permit::fence`] abandons it the moment the term ends, so that no write, client
//! retries included, is sent after this replica stopped leading. A term ends at the renew
//! deadline, a lease duration less the renew deadline (5 s by default) before any other replica
//! may take the Lease.
//!
//! What is left: a request sent before the term ended can still be applied by the API server
//! later (queued by API Priority and Fairness, or held in a proxy), and Kubernetes has no
//! fencing token an API server could check. An admission policy that refuses a binding unless
//! the Lease names its sender would close that, at the cost of a webhook on the hot path;
//! tether does not ship one. The Lease itself (`leader.rs`) is the gate's source, not a write
//! through it.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use crate::leader::Leadership;

/// What a write is: refusals name it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Write {
    /// A pod's binding (the Bind plugin).
    Bind,
    /// A StickyBinding's creation or history status.
    History,
    /// A SchedulingProfile's status.
    ProfileStatus,
    /// A StickyBinding's conditions (its controller).
    BindingStatus,
    /// A failed attempt's `PodScheduled=False` and `nominatedNodeName`.
    FailureReport,
    /// The binding cycle's `nominatedNodeName`: the node a pod goes to while PreBind works for
    /// it or Permit holds it.
    Nomination,
    /// An events.k8s.io Event.
    Event,
    /// Preemption's `DisruptionTarget` condition and the victim's deletion.
    Eviction,
    /// VolumeBinding's PreBind writes (a volume's `claimRef`, a claim's `selected-node`).
    VolumeBinding,
    /// DynamicResources' writes: a claim's allocation and reservation (PreBind), the pod's
    /// reservation taken back (Unreserve), a claim deallocated (PostFilter).
    DynamicResources,
    /// A PodGroup's `PodGroupInitiallyScheduled` condition (the group cycle).
    PodGroupStatus,
    /// An ExplainRequest's answer, or its deletion once old.
    ExplainAnswer,
}

/// Why a write was refused or abandoned.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum Why {
    #[error("this replica does not lead")]
    NotLeading,
    #[error("the term it was admitted in ended before it was answered; abandoned")]
    TermEnded,
    #[error("this scheduler led an earlier term and stands down")]
    EarlierTerm,
    #[error("this scheduler is stopping")]
    Closed,
}

/// A write the gate refused, or abandoned when its term ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("not writing ({write:?}): {why}")]
pub struct Refused {
    pub write: Write,
    pub why: Why,
}

/// The gate every writer of one scheduler holds a clone of.
#[derive(Clone)]
pub struct WriteGate {
    leadership: Leadership,
    shared: Arc<Shared>,
}

/// Every write is admitted (while leading).
const OPEN: u8 = 0;
/// Only history writes are: the binds made are still counted, nothing new is decided.
const HISTORY_ONLY: u8 = 1;
/// Nothing is.
const CLOSED: u8 = 2;

#[derive(Default)]
struct Shared {
    /// The term this gate admitted writes in (0: none yet).
    term: AtomicU64,
    /// [`OPEN`], [`HISTORY_ONLY`] or [`CLOSED`].
    closed: AtomicU8,
    /// Permits held now.
    in_flight: AtomicUsize,
    idle: tokio::sync::Notify,
}

impl WriteGate {
    /// A gate for a new scheduler following `leadership`.
    pub fn new(leadership: Leadership) -> Self {
        WriteGate {
            leadership,
            shared: Arc::default(),
        }
    }

    /// The gate of a replica that runs alone: it always leads.
    pub fn alone() -> Self {
        WriteGate::new(Leadership::alone())
    }

    /// Admits `write` now, or says why not. The permit fences the write's requests
    /// ([`Permit::fence`]) and is counted in flight until dropped.
    pub fn admit(&self, write: Write) -> Result<Permit, Refused> {
        let refuse = |why| Err(Refused { write, why });
        match self.shared.closed.load(Ordering::SeqCst) {
            OPEN => {}
            HISTORY_ONLY if write == Write::History => {}
            _ => return refuse(Why::Closed),
        }
        let term = if self.leadership.is_elected() {
            let Some(term) = self.leadership.current_term() else {
                return refuse(Why::NotLeading);
            };
            match self
                .shared
                .term
                .compare_exchange(0, term, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => {}
                Err(pinned) if pinned == term => {}
                Err(_) => return refuse(Why::EarlierTerm),
            }
            Some(term)
        } else {
            None
        };
        self.shared.in_flight.fetch_add(1, Ordering::SeqCst);
        Ok(Permit {
            write,
            term,
            gate: self.clone(),
        })
    }

    /// Whether `write` would be admitted now.
    pub fn admits(&self, write: Write) -> bool {
        self.admit(write).is_ok()
    }

    /// Admits `write` and runs it fenced: `Err` when refused, or abandoned as its term ended.
    pub async fn write<T>(
        &self,
        write: Write,
        body: impl Future<Output = T>,
    ) -> Result<T, Refused> {
        self.admit(write)?.fence(body).await
    }

    /// Resolves once the term this gate writes in is over (the term current now, or the next
    /// one): from then on it admits nothing. Never resolves for a replica that runs alone.
    pub async fn term_over(&self) {
        let mut number = self.leadership.next_term().await;
        if let Err(pinned) =
            self.shared
                .term
                .compare_exchange(0, number, Ordering::SeqCst, Ordering::SeqCst)
        {
            number = pinned;
        }
        self.leadership.term_ended(number).await;
        self.close();
    }

    /// Admits nothing from now on; the permits already given may finish.
    pub fn close(&self) {
        self.shared.closed.store(CLOSED, Ordering::SeqCst);
    }

    /// Admits only history writes from now on (a scheduler shutting down: the binds it made
    /// are still counted; it binds, evicts and reports nothing more).
    pub fn close_but_history(&self) {
        let _ = self.shared.closed.compare_exchange(
            OPEN,
            HISTORY_ONLY,
            Ordering::SeqCst,
            Ordering::SeqCst,
        );
    }

    /// Waits until no permit is held, at most `within`; returns how many still are.
    pub async fn drain(&self, within: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + within;
        loop {
            let idle = self.shared.idle.notified();
            let held = self.shared.in_flight.load(Ordering::SeqCst);
            if held == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, idle).await.is_err() {
                return self.shared.in_flight.load(Ordering::SeqCst);
            }
        }
    }

    /// The leadership the gate follows (for waiting to lead, and for what gaining it starts).
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }
}

/// An admitted write.
pub struct Permit {
    write: Write,
    /// The term it was admitted in; `None` for a replica that runs alone.
    term: Option<u64>,
    gate: WriteGate,
}

impl Permit {
    /// Runs `body` (the write's requests) until it ends or the term ends, whichever is first:
    /// then the requests not answered are dropped, and none is sent (or retried) later.
    pub async fn fence<T>(&self, body: impl Future<Output = T>) -> Result<T, Refused> {
        let Some(term) = self.term else {
            return Ok(body.await);
        };
        tokio::select! {
            biased;
            () = self.gate.leadership.term_ended(term) => Err(Refused {
                write: self.write,
                why: Why::TermEnded,
            }),
            out = body => Ok(out),
        }
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if self.gate.shared.in_flight.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.gate.shared.idle.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const ALL: [Write; 12] = [
        Write::Bind,
        Write::History,
        Write::ProfileStatus,
        Write::BindingStatus,
        Write::FailureReport,
        Write::Nomination,
        Write::Event,
        Write::Eviction,
        Write::VolumeBinding,
        Write::DynamicResources,
        Write::PodGroupStatus,
        Write::ExplainAnswer,
    ];

    #[test]
    fn a_standby_is_refused_every_write_and_a_lone_replica_none() {
        let standby = WriteGate::new(Leadership::elected());
        for write in ALL {
            let refused = standby
                .admit(write)
                .err()
                .expect("a standby does not write");
            assert_eq!(
                refused,
                Refused {
                    write,
                    why: Why::NotLeading
                }
            );
        }
        let alone = WriteGate::alone();
        assert!(ALL.iter().all(|w| alone.admits(*w)));
        alone.close_but_history();
        assert!(
            alone.admits(Write::History),
            "the binds made are still counted"
        );
        assert_eq!(
            alone.admit(Write::Bind).err().map(|r| r.why),
            Some(Why::Closed)
        );
        alone.close();
        assert!(!alone.admits(Write::History));
        assert_eq!(
            alone.admit(Write::Bind).err().map(|r| r.why),
            Some(Why::Closed)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_write_under_way_when_the_term_ends_is_abandoned() {
        let leadership = Leadership::elected();
        let gate = WriteGate::new(leadership.clone());
        let term_ends = tokio::time::Instant::now() + Duration::from_secs(10);
        leadership.lead_until_for_tests(term_ends);
        let permit = gate.admit(Write::Bind).expect("leading");
        // A renewal moves the end on: the write goes on past the first end.
        let renewer = {
            let leadership = leadership.clone();
            async move {
                tokio::time::sleep(Duration::from_secs(5)).await;
                leadership.lead_until_for_tests(term_ends + Duration::from_secs(10));
            }
        };
        let slow_write = async {
            tokio::time::sleep(Duration::from_secs(15)).await;
            "answered"
        };
        let (written, ()) = tokio::join!(permit.fence(slow_write), renewer);
        assert_eq!(written, Ok("answered"), "the term was renewed under it");

        // No renewal: a write that hangs is dropped when the term ends, and not later.
        let hung = permit.fence(std::future::pending::<()>());
        let began = tokio::time::Instant::now();
        let abandoned = tokio::time::timeout(Duration::from_secs(60), hung)
            .await
            .expect("abandoned when the term ends, not left hanging");
        assert_eq!(abandoned.err().map(|r| r.why), Some(Why::TermEnded));
        assert_eq!(began.elapsed(), Duration::from_secs(5));
        assert!(!gate.admits(Write::Bind), "the term is over");
        drop(permit);
        assert_eq!(gate.drain(Duration::ZERO).await, 0);
    }

    #[test]
    fn a_gate_writes_in_one_term_only() {
        let leadership = Leadership::elected();
        let old = WriteGate::new(leadership.clone());
        let later = tokio::time::Instant::now() + Duration::from_secs(60);
        leadership.lead_until_for_tests(later);
        assert!(old.admits(Write::Bind));
        leadership.stop_for_tests();
        leadership.lead_until_for_tests(later);
        assert_eq!(
            old.admit(Write::Event).err().map(|r| r.why),
            Some(Why::EarlierTerm),
            "the scheduler of the first term stood down"
        );
        let new = WriteGate::new(leadership);
        assert!(new.admits(Write::Event), "the next scheduler writes");
    }

    #[tokio::test(start_paused = true)]
    async fn term_over_resolves_when_the_term_the_gate_writes_in_ends() {
        let leadership = Leadership::elected();
        let gate = WriteGate::new(leadership.clone());
        let over = tokio::spawn({
            let gate = gate.clone();
            async move { gate.term_over().await }
        });
        tokio::time::sleep(Duration::from_secs(30)).await;
        assert!(
            !over.is_finished(),
            "a standby's term is not over: it has none"
        );
        let ends = tokio::time::Instant::now() + Duration::from_secs(10);
        leadership.lead_until_for_tests(ends);
        over.await.expect("term_over");
        assert_eq!(tokio::time::Instant::now(), ends);
        assert_eq!(
            gate.admit(Write::Bind).err().map(|r| r.why),
            Some(Why::Closed)
        );
    }

    #[tokio::test(start_paused = true)]
    async fn drain_waits_for_the_permits_already_given() {
        let gate = WriteGate::alone();
        let permit = gate.admit(Write::Bind).expect("alone");
        gate.close();
        assert_eq!(gate.drain(Duration::from_secs(1)).await, 1);
        let release = async {
            tokio::time::sleep(Duration::from_millis(300)).await;
            drop(permit);
        };
        let (left, ()) = tokio::join!(gate.drain(Duration::from_secs(5)), release);
        assert_eq!(left, 0);
    }
}
