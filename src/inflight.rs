//! A count of pieces of work under way, and a wait, with a deadline, for none to be left: the
//! shutdown drain of the binding cycles and of the history writes they leave behind.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

/// How many pieces of work run now; [`InFlight::wait`] returns when none is left.
#[derive(Debug, Default)]
pub struct InFlight {
    running: AtomicUsize,
    done: tokio::sync::Notify,
}

impl InFlight {
    /// One more piece of work runs.
    pub fn start(&self) {
        self.running.fetch_add(1, Ordering::SeqCst);
    }

    /// One piece of work ended; the last one wakes the waiters.
    pub fn finish(&self) {
        if self.running.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.done.notify_waiters();
        }
    }

    /// Waits until none runs, at most `grace`; returns how many still run.
    pub async fn wait(&self, grace: Duration) -> usize {
        let deadline = tokio::time::Instant::now() + grace;
        loop {
            // Registered before the count is read, so that a last `finish` in between wakes it.
            let done = self.done.notified();
            if self.running.load(Ordering::SeqCst) == 0 {
                return 0;
            }
            if tokio::time::timeout_at(deadline, done).await.is_err() {
                return self.running.load(Ordering::SeqCst);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn the_wait_ends_with_the_last_piece_or_at_the_deadline() {
        let work = std::sync::Arc::new(InFlight::default());
        assert_eq!(work.wait(Duration::ZERO).await, 0, "nothing runs");
        work.start();
        work.start();
        assert_eq!(
            work.wait(Duration::from_millis(20)).await,
            2,
            "the deadline"
        );
        let ending = work.clone();
        tokio::spawn(async move {
            ending.finish();
            ending.finish();
        });
        assert_eq!(work.wait(Duration::from_secs(10)).await, 0, "the last one");
    }
}
