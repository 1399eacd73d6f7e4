//! Supervision: every long-running part of tether (watches, controllers, the HTTP endpoint, the
//! scheduling loop) and every binding cycle runs under a [`Fatal`] reporter. A part that ends
//! or panics is reported; the process then reports unhealthy and stops with an error instead of
//! running half alive (answering its probes while no pod is scheduled).

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::FutureExt;
use tokio::sync::mpsc;

/// Reports that a part of the process died. Cheap to clone.
#[derive(Clone)]
pub struct Fatal {
    tx: mpsc::UnboundedSender<String>,
    healthy: Arc<AtomicBool>,
}

impl Fatal {
    /// A reporter and the receiver the main task waits on.
    pub fn new() -> (Self, mpsc::UnboundedReceiver<String>) {
        let (tx, rx) = mpsc::unbounded_channel();
        let fatal = Fatal {
            tx,
            healthy: Arc::new(AtomicBool::new(true)),
        };
        (fatal, rx)
    }

    /// Whether nothing died so far (`/healthz`).
    pub fn is_healthy(&self) -> bool {
        self.healthy.load(Ordering::SeqCst)
    }

    /// Records that `what` died: the process is unhealthy from now on.
    pub fn report(&self, what: impl Into<String>) {
        let what = what.into();
        self.healthy.store(false, Ordering::SeqCst);
        tracing::error!(part = %what, "a part of tether died; stopping");
        // The receiver is gone only while the process is shutting down anyway.
        let _ = self.tx.send(what);
    }

    /// Runs `task`, which must run as long as the process does: its end, or its panic, is
    /// reported.
    pub fn forever(
        &self,
        what: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let fatal = self.clone();
        async move {
            match AssertUnwindSafe(task).catch_unwind().await {
                Ok(()) => fatal.report(format!("{what} ended")),
                Err(panic) => fatal.report(format!("{what} panicked: {}", message(&panic))),
            }
        }
    }

    /// Runs `task`, which may end; its panic is reported.
    pub fn guard(
        &self,
        what: &'static str,
        task: impl Future<Output = ()> + Send + 'static,
    ) -> impl Future<Output = ()> + Send + 'static {
        let fatal = self.clone();
        async move {
            if let Err(panic) = AssertUnwindSafe(task).catch_unwind().await {
                fatal.report(format!("{what} panicked: {}", message(&panic)));
            }
        }
    }

    /// Runs `body` on the current thread; its panic is reported.
    pub fn guard_thread(&self, what: &'static str, body: impl FnOnce()) {
        if let Err(panic) = std::panic::catch_unwind(AssertUnwindSafe(body)) {
            self.report(format!("{what} panicked: {}", message(&panic)));
        }
    }
}

/// The text of a panic's payload.
fn message(panic: &Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_task_that_ends_or_panics_is_reported_and_the_process_is_unhealthy() {
        let (fatal, mut rx) = Fatal::new();
        assert!(fatal.is_healthy());
        fatal.guard("fine", async {}).await;
        assert!(fatal.is_healthy(), "a guarded task may end");
        fatal.forever("the pod watch", async {}).await;
        assert_eq!(rx.recv().await.as_deref(), Some("the pod watch ended"));
        fatal
            .guard("a binding cycle", async { panic!("boom") })
            .await;
        assert_eq!(
            rx.recv().await.as_deref(),
            Some("a binding cycle panicked: boom")
        );
        fatal.guard_thread("the scheduling loop", || panic!("overflow"));
        assert_eq!(
            rx.recv().await.as_deref(),
            Some("the scheduling loop panicked: overflow")
        );
        assert!(!fatal.is_healthy());
    }
}
