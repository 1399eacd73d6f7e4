//! The binder: the pods waiting at Permit, the binding cycles under way (each spawned on the
//! runtime under the fatal guard), the places among those that bind now (what the scheduling
//! loop waits on for room and the shutdown waits on to end), and the gate every bind asks.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::Duration;

use crate::gate::WriteGate;
use crate::inflight::InFlight;
use crate::locks;
use crate::scheduler::framework::waiting_pods::WaitingPods;
use crate::supervise::Fatal;

/// Runs the binding cycles: each on the tokio runtime, under the fatal guard (a cycle that
/// panics stops the process with an error), counted while it runs.
pub struct Binder {
    pub cycles: Arc<BindingCycles>,
    /// The pods a Permit plugin holds, waiting to be allowed or rejected.
    pub waiting: WaitingPods,
    /// Asked before every bind: binds are made only while this replica leads.
    pub gate: WriteGate,
    runtime: tokio::runtime::Handle,
    fatal: Fatal,
}

impl Binder {
    pub fn new(runtime: tokio::runtime::Handle, fatal: Fatal, gate: WriteGate) -> Self {
        Binder {
            cycles: Arc::new(BindingCycles::default()),
            waiting: WaitingPods::default(),
            gate,
            runtime,
            fatal,
        }
    }

    /// Starts the binding cycle `cycle` makes of its place among those that bind now: taken
    /// here when `binds_now` (the loop waits for room before its next pod), else by the cycle
    /// itself when it binds (a pod that waits at Permit).
    pub fn spawn<F>(&self, binds_now: bool, cycle: impl FnOnce(Option<BindSlot>) -> F)
    where
        F: std::future::Future<Output = ()> + Send + 'static,
    {
        self.cycles.started();
        let slot = binds_now.then(|| self.cycles.take_slot());
        let guarded = self.fatal.guard("a binding cycle", cycle(slot));
        let cycles = self.cycles.clone();
        self.runtime.spawn(async move {
            guarded.await;
            cycles.finished();
        });
    }

    /// The runtime the binding cycles run on.
    pub fn runtime(&self) -> &tokio::runtime::Handle {
        &self.runtime
    }
}

/// How many binding cycles may bind at once (from the end of the scheduling cycle, or from a
/// Permit verdict, until the bind is answered): past that the scheduling loop waits for one of
/// their binds to be answered. Each holds its pod's cycle state and, the API client speaking
/// HTTP/1.1, a connection of its own: without a bound, a burst scheduled faster than the API
/// server binds would hold one of each per pod. PostBind (the history writes, bounded on their
/// own) runs after the bind's place is given back.
pub const MAX_BINDS_IN_FLIGHT: usize = 128;

/// The binding cycles under way (for the shutdown's wait), and the places among the
/// [`MAX_BINDS_IN_FLIGHT`] that bind now (for the scheduling loop's wait for room).
#[derive(Default)]
pub struct BindingCycles {
    running: InFlight,
    /// Binding cycles holding a [`BindSlot`] (from the end of their scheduling cycle or their
    /// Permit verdict until their bind is answered), and a wake-up for the scheduling loop
    /// waiting for one of them to give it back.
    binding_now: AtomicUsize,
    room: (Mutex<()>, Condvar),
}

impl BindingCycles {
    /// A binding cycle starts.
    pub fn started(&self) {
        self.running.start();
    }

    /// A binding cycle ended.
    pub fn finished(&self) {
        self.running.finish();
    }

    /// Takes a place among the binding cycles that bind now (the scheduling loop has waited
    /// for room).
    pub fn take_slot(self: &Arc<Self>) -> BindSlot {
        self.binding_now.fetch_add(1, Ordering::SeqCst);
        crate::k8s::budget::bind_started();
        BindSlot(self.clone())
    }

    /// Waits (on the scheduling loop's thread) while [`MAX_BINDS_IN_FLIGHT`] binding cycles
    /// bind, or until `closed`.
    pub fn wait_for_room(&self, closed: impl Fn() -> bool) {
        let mut room = locks::lock(&self.room.0);
        while self.binding_now.load(Ordering::SeqCst) >= MAX_BINDS_IN_FLIGHT && !closed() {
            room = match self.room.1.wait_timeout(room, Duration::from_millis(100)) {
                Ok((guard, _)) => guard,
                Err(poisoned) => poisoned.into_inner().0,
            };
        }
    }

    /// Waits until no binding cycle runs, at most `grace`; returns how many still run.
    pub async fn wait(&self, grace: Duration) -> usize {
        self.running.wait(grace).await
    }
}

/// A place among the [`MAX_BINDS_IN_FLIGHT`] binding cycles that bind now, held from the
/// scheduling cycle's end until the bind is answered (PostBind and its history writes run
/// after it is given back); given back when dropped.
pub struct BindSlot(Arc<BindingCycles>);

impl Drop for BindSlot {
    fn drop(&mut self) {
        self.0.binding_now.fetch_sub(1, Ordering::SeqCst);
        crate::k8s::budget::bind_answered();
        let _room = locks::lock(&self.0.room.0);
        self.0.room.1.notify_one();
    }
}
