//! Pods held at Permit (a plugin answered Wait), until every waiting plugin allows them, one
//! rejects them, or the timeout passes, as kube-scheduler's waitingPodsMap.

use std::collections::{BTreeSet, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::locks;
use crate::scheduler::framework::Status;

struct Waiting {
    pending: BTreeSet<&'static str>,
    done: Option<oneshot::Sender<Status>>,
}

/// The pods waiting at Permit, by UID.
#[derive(Default)]
pub struct WaitingPods {
    pods: Mutex<HashMap<String, Waiting>>,
}

impl WaitingPods {
    /// Registers a pod that `plugins` hold; the receiver yields the verdict.
    pub fn add(&self, uid: &str, plugins: BTreeSet<&'static str>) -> oneshot::Receiver<Status> {
        let (tx, rx) = oneshot::channel();
        let mut pods = locks::lock(&self.pods);
        pods.insert(
            uid.to_string(),
            Waiting {
                pending: plugins,
                done: Some(tx),
            },
        );
        rx
    }

    /// `plugin` allows the pod; once no plugin holds it, it proceeds to binding.
    pub fn allow(&self, uid: &str, plugin: &'static str) {
        let mut pods = locks::lock(&self.pods);
        let Some(w) = pods.get_mut(uid) else { return };
        w.pending.remove(plugin);
        if w.pending.is_empty() {
            if let Some(tx) = w.done.take() {
                let _ = tx.send(Status::success());
            }
            pods.remove(uid);
        }
    }

    /// `plugin` rejects the pod.
    pub fn reject(&self, uid: &str, plugin: &'static str, message: &str) {
        let mut pods = locks::lock(&self.pods);
        if let Some(mut w) = pods.remove(uid)
            && let Some(tx) = w.done.take()
        {
            let _ = tx.send(Status::unschedulable(message.to_string()).with_plugin(plugin));
        }
    }

    /// Forgets a waiting pod whose binding cycle ended before its wait (its PreBind pre-flight
    /// failed).
    pub fn forget(&self, uid: &str) {
        locks::lock(&self.pods).remove(uid);
    }

    /// Waits for the verdict on a pod, at most `timeout`; a timeout rejects it.
    pub async fn wait(
        &self,
        uid: &str,
        rx: oneshot::Receiver<Status>,
        timeout: Duration,
    ) -> Status {
        let verdict = match tokio::time::timeout(timeout, rx).await {
            Ok(Ok(status)) => status,
            Ok(Err(_)) => Status::error("the waiting pod was dropped"),
            Err(_) => Status::unschedulable(format!(
                "rejected due to timeout after waiting {timeout:?} at permit"
            )),
        };
        locks::lock(&self.pods).remove(uid);
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_pod_proceeds_once_every_plugin_allows_it() {
        let w = WaitingPods::default();
        let rx = w.add("u", ["A", "B"].into_iter().collect());
        w.allow("u", "A");
        w.allow("u", "B");
        assert!(w.wait("u", rx, Duration::from_secs(5)).await.is_success());
    }

    #[tokio::test]
    async fn a_rejection_or_a_timeout_stops_it() {
        let w = WaitingPods::default();
        let rx = w.add("u", ["A"].into_iter().collect());
        w.reject("u", "A", "no");
        let s = w.wait("u", rx, Duration::from_secs(5)).await;
        assert_eq!(
            (s.code, s.plugin),
            (crate::scheduler::framework::Code::Unschedulable, Some("A"))
        );
        let rx = w.add("v", ["A"].into_iter().collect());
        let s = w.wait("v", rx, Duration::from_millis(10)).await;
        assert!(s.message().contains("timeout"));
    }
}
