//! The result of running a plugin: a [`Code`] and the reasons a user reads.

use std::fmt;

/// What a plugin decided, with kube-scheduler's codes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Code {
    /// The plugin ran and is content.
    Success,
    /// An unexpected failure; the pod is retried with backoff.
    Error,
    /// The pod does not fit on this node now; preemption might make it fit.
    Unschedulable,
    /// The pod cannot fit on this node whatever is evicted; preemption does not try it.
    UnschedulableAndUnresolvable,
    /// Permit: hold the pod before binding until it is allowed, rejected, or times out.
    Wait,
    /// PreFilter / PreScore: this plugin has nothing to do for the pod, so its Filter / Score is
    /// skipped. Bind: this plugin does not bind this pod; the next Bind plugin is asked.
    Skip,
}

/// The outcome of one plugin call. `reasons` are shown to users in FailedScheduling messages.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Status {
    pub code: Code,
    pub reasons: Vec<String>,
    /// The plugin that returned this status, filled in by the runtime.
    pub plugin: Option<&'static str>,
    /// For a rejection: when the answer may change by itself (a deadline passes), so that the
    /// pod is retried then instead of waiting for a cluster event.
    pub retry_after: Option<std::time::Duration>,
    /// Bind: the bind's answer was lost and the pod turned out bound to this other node (by
    /// someone else): it is not ours to requeue or to report unschedulable.
    pub bound_elsewhere: Option<String>,
}

impl Status {
    pub fn success() -> Self {
        Status {
            code: Code::Success,
            reasons: Vec::new(),
            plugin: None,
            retry_after: None,
            bound_elsewhere: None,
        }
    }

    pub fn new(code: Code, reason: impl Into<String>) -> Self {
        Status {
            code,
            reasons: vec![reason.into()],
            plugin: None,
            retry_after: None,
            bound_elsewhere: None,
        }
    }

    pub fn with_reasons(code: Code, reasons: Vec<String>) -> Self {
        Status {
            code,
            reasons,
            plugin: None,
            retry_after: None,
            bound_elsewhere: None,
        }
    }

    pub fn unschedulable(reason: impl Into<String>) -> Self {
        Status::new(Code::Unschedulable, reason)
    }

    pub fn unresolvable(reason: impl Into<String>) -> Self {
        Status::new(Code::UnschedulableAndUnresolvable, reason)
    }

    pub fn error(reason: impl Into<String>) -> Self {
        Status::new(Code::Error, reason)
    }

    pub fn skip() -> Self {
        Status {
            code: Code::Skip,
            reasons: Vec::new(),
            plugin: None,
            retry_after: None,
            bound_elsewhere: None,
        }
    }

    pub fn is_success(&self) -> bool {
        self.code == Code::Success
    }

    pub fn is_skip(&self) -> bool {
        self.code == Code::Skip
    }

    /// Unschedulable or UnschedulableAndUnresolvable: the pod does not fit, as opposed to an error.
    pub fn is_rejected(&self) -> bool {
        matches!(
            self.code,
            Code::Unschedulable | Code::UnschedulableAndUnresolvable
        )
    }

    /// Asks for a retry after `after` (see [`Status::retry_after`]).
    pub fn with_retry_after(mut self, after: std::time::Duration) -> Self {
        self.retry_after = Some(after);
        self
    }

    /// Bind: the pod is bound to `node`, not where this cycle meant to bind it.
    pub fn bound_elsewhere(node: &str) -> Self {
        Status {
            bound_elsewhere: Some(node.to_string()),
            ..Status::error(format!("the pod is bound to {node} already"))
        }
    }

    pub fn with_plugin(mut self, plugin: &'static str) -> Self {
        self.plugin = Some(plugin);
        self
    }

    /// The reasons joined, as a message.
    pub fn message(&self) -> String {
        self.reasons.join(", ")
    }
}

impl fmt::Display for Status {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.plugin {
            Some(p) => write!(f, "{:?} from {p}: {}", self.code, self.message()),
            None => write!(f, "{:?}: {}", self.code, self.message()),
        }
    }
}
