//! The write gate: every write tether makes to the cluster asks it first (a bind, a history
//! write, a status, an event, a failure report, a preemption's eviction, VolumeBinding's
//! writes). It is the one place that decides whether this replica may write now, so that
//! fencing a deposed leader is a rule here, not a check scattered over the writers.
//!
//! The rule today is the one the writers kept before the gate existed: binds, history and the
//! two controllers' status writes need this replica to lead; the other writes are let through.
//! Fencing them all to the leader's term is the Fencing and liveness work, a change of
//! [`Write::fenced`] alone. The Lease itself (`leader.rs`) is the gate's source, not a write
//! through it.

use crate::leader::Leadership;

/// What a write is: the gate's rule and its refusals name it.
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
    /// An events.k8s.io Event.
    Event,
    /// Preemption's `DisruptionTarget` condition and the victim's deletion.
    Eviction,
    /// VolumeBinding's PreBind writes (a volume's `claimRef`, a claim's `selected-node`).
    VolumeBinding,
}

impl Write {
    /// Whether this kind of write is made only while this replica leads.
    pub fn fenced(self) -> bool {
        matches!(
            self,
            Write::Bind | Write::History | Write::ProfileStatus | Write::BindingStatus
        )
    }
}

/// A write the gate refused.
#[derive(Debug, thiserror::Error)]
#[error("not writing ({write:?}): this replica does not lead")]
pub struct NotLeading {
    pub write: Write,
}

/// The gate every writer holds a clone of.
#[derive(Clone)]
pub struct WriteGate {
    leadership: Leadership,
}

impl WriteGate {
    pub fn new(leadership: Leadership) -> Self {
        WriteGate { leadership }
    }

    /// The gate of a replica that runs alone: it always leads.
    pub fn alone() -> Self {
        WriteGate::new(Leadership::alone())
    }

    /// Whether `write` may be made now.
    pub fn admit(&self, write: Write) -> Result<(), NotLeading> {
        if write.fenced() && !self.leadership.is_leading() {
            return Err(NotLeading { write });
        }
        Ok(())
    }

    /// Whether `write` may be made now, as a plain answer.
    pub fn admits(&self, write: Write) -> bool {
        self.admit(write).is_ok()
    }

    /// The leadership the gate follows (for waiting to lead, and for what gaining it starts).
    pub fn leadership(&self) -> &Leadership {
        &self.leadership
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_standby_is_refused_fenced_writes_and_a_lone_replica_never() {
        let standby = WriteGate::new(Leadership::elected());
        for write in [
            Write::Bind,
            Write::History,
            Write::ProfileStatus,
            Write::BindingStatus,
        ] {
            let refused = standby.admit(write).expect_err("a standby does not write");
            assert_eq!(refused.write, write);
        }
        assert!(standby.admits(Write::Event), "not fenced yet");
        let alone = WriteGate::alone();
        assert!(alone.admits(Write::Bind) && alone.admits(Write::History));
    }
}
