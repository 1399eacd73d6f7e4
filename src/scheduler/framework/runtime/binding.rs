//! The runners of the points from Reserve on, methods of the compiled profile: Reserve and
//! Unreserve (scheduling cycle), Permit (its verdict, or a wait registered with the waiting
//! pods), then PreBind, Bind and PostBind (binding cycle).

use std::collections::BTreeSet;
use std::time::Duration;

use tokio::sync::oneshot;

use crate::k8s::pod::Pod;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::profile::CompiledProfile;
use crate::scheduler::framework::waiting_pods::WaitingPods;
use crate::scheduler::framework::{Code, CycleState, Status};

/// A Permit wait: the verdict to come, and how long to wait for it at most.
#[derive(Debug)]
pub struct PermitWait {
    pub verdict: oneshot::Receiver<Status>,
    pub timeout: Duration,
}

/// The longest a Permit plugin may make a pod wait (kube-scheduler's maxTimeout).
pub const MAX_PERMIT_WAIT: Duration = Duration::from_secs(15 * 60);

impl CompiledProfile {
    /// Runs Reserve in order; on the first failure, Unreserve runs for all of them in reverse.
    pub fn run_reserve(&self, state: &mut CycleState, pod: &PodInfo, node: &str) -> Status {
        for plugin in &self.reserve {
            let Some(r) = plugin.reserve() else { continue };
            let clock = state.plugin_clock();
            let status = r.reserve(state, pod, node);
            state.record_plugin(plugin.name(), "Reserve", status.code, clock);
            if !status.is_success() {
                self.run_unreserve(state, pod, node);
                if status.is_rejected() {
                    return status.with_plugin(plugin.name());
                }
                return Status::error(format!(
                    "running Reserve plugin {:?}: {}",
                    plugin.name(),
                    status.message()
                ))
                .with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// Runs Unreserve of every Reserve plugin, in reverse order.
    pub fn run_unreserve(&self, state: &CycleState, pod: &PodInfo, node: &str) {
        for plugin in self.reserve.iter().rev() {
            if let Some(r) = plugin.reserve() {
                let clock = state.plugin_clock();
                r.unreserve(state, pod, node);
                state.record_plugin(plugin.name(), "Unreserve", Code::Success, clock);
            }
        }
    }

    /// Runs Permit: any rejection fails the pod; Wait answers register it with `waiting` for
    /// the longest of the timeouts asked for, at most [`MAX_PERMIT_WAIT`]. `Ok(None)`: allowed
    /// at once.
    pub fn run_permit(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        node: &str,
        waiting: &WaitingPods,
    ) -> Result<Option<PermitWait>, Status> {
        let mut waiting_on = BTreeSet::new();
        let mut timeout = Duration::ZERO;
        for plugin in &self.permit {
            let Some(p) = plugin.permit() else { continue };
            let clock = state.plugin_clock();
            let (status, t) = p.permit(state, pod, node);
            state.record_plugin(plugin.name(), "Permit", status.code, clock);
            match status.code {
                Code::Success => {}
                Code::Wait => {
                    waiting_on.insert(plugin.name());
                    timeout = timeout.max(t.min(MAX_PERMIT_WAIT));
                }
                _ if status.is_rejected() => return Err(status.with_plugin(plugin.name())),
                _ => {
                    return Err(Status::error(format!(
                        "running Permit plugin {:?}: {}",
                        plugin.name(),
                        status.message()
                    ))
                    .with_plugin(plugin.name()));
                }
            }
        }
        if waiting_on.is_empty() {
            return Ok(None);
        }
        Ok(Some(PermitWait {
            verdict: waiting.add(pod.uid(), waiting_on),
            timeout,
        }))
    }

    /// Asks every PreBind plugin whether it has work to do for the pod on `node`
    /// (kube-scheduler's RunPreBindPreFlights): Success when one has, Skip when none has (or
    /// there is none), the first error wrapped as upstream wraps it (`running PreBindPreFlight
    /// "VolumeBinding": …`). Any other answer is an error, as upstream.
    pub fn run_pre_bind_pre_flights(&self, state: &CycleState, pod: &Pod, node: &str) -> Status {
        let mut verdict = Status::skip();
        for plugin in &self.pre_bind {
            let Some(p) = plugin.pre_bind() else { continue };
            let status = p.pre_bind_pre_flight(state, pod, node);
            match status.code {
                Code::Success => verdict = Status::success(),
                Code::Skip => {}
                Code::Error => {
                    return Status::error(format!(
                        "running PreBindPreFlight {:?}: {}",
                        plugin.name(),
                        status.message()
                    ));
                }
                other => {
                    return Status::error(format!(
                        "PreBindPreFlight {} returned \"{other:?}\", which is unsupported. It is supposed to return Success, Skip, or Error status",
                        plugin.name(),
                    ));
                }
            }
        }
        verdict
    }

    /// Runs PreBind in order, stopping at the first failure.
    pub async fn run_pre_bind(&self, state: &CycleState, pod: &Pod, node: &str) -> Status {
        for plugin in &self.pre_bind {
            let Some(p) = plugin.pre_bind() else { continue };
            let clock = state.plugin_clock();
            let status = p.pre_bind(state, pod, node).await;
            state.record_plugin(plugin.name(), "PreBind", status.code, clock);
            if !status.is_success() {
                return status.with_plugin(plugin.name());
            }
        }
        Status::success()
    }

    /// Runs Bind plugins in order until one does not Skip.
    pub async fn run_bind(&self, state: &CycleState, pod: &Pod, node: &str) -> Status {
        for plugin in &self.bind {
            let Some(p) = plugin.bind() else { continue };
            let clock = state.plugin_clock();
            let status = p.bind(state, pod, node).await;
            state.record_plugin(plugin.name(), "Bind", status.code, clock);
            if status.code != Code::Skip {
                return status.with_plugin(plugin.name());
            }
        }
        Status::error("no bind plugin bound the pod")
    }

    /// Runs every PostBind plugin (informational: nothing can fail the pod any more).
    pub async fn run_post_bind(&self, state: &CycleState, pod: &Pod, node: &str) {
        for plugin in &self.post_bind {
            if let Some(p) = plugin.post_bind() {
                let clock = state.plugin_clock();
                p.post_bind(state, pod, node).await;
                state.record_plugin(plugin.name(), "PostBind", Code::Success, clock);
            }
        }
    }
}
