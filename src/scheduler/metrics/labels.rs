//! The label sets of the scheduler's metric families, and the buckets of its histograms
//! (kube-scheduler's where the family is kube-scheduler's).

use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct AttemptLabels {
    /// scheduled, unschedulable or error.
    pub result: String,
    pub profile: String,
}

/// A group cycle's labels: kube-scheduler 1.38's (1.37 had no `entity`; the label is added for
/// every release, as a query that does not name it reads the same series).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupAttemptLabels {
    /// scheduled, unschedulable or error.
    pub result: String,
    pub profile: String,
    /// What the cycle placed: `podgroup` (1.38 also knows `compositepodgroup`).
    pub entity: &'static str,
}

/// The group search's labels (1.38's; 1.37's histogram had none).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct GroupSearchLabels {
    pub profile: String,
    pub entity: &'static str,
}

/// A workload preemption's labels (kube-scheduler 1.38's; 1.37's attempts had `result` alone
/// and its victims none: the label is added for every release).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkloadPreemptionLabels {
    /// Who preempted: `podgroup` (1.38 also knows `compositepodgroup`).
    pub preemptor: &'static str,
    /// The PostFilter's code: Success, Unschedulable, UnschedulableAndUnresolvable, Error.
    pub result: &'static str,
}

/// Who preempted (`pod` or `podgroup`).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PreemptorLabels {
    pub preemptor: &'static str,
}

/// The units a workload preemption evicted, by what they were: `pod` (alone) or `podgroup`
/// (a group of disruptionMode All, whole).
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct DisruptionLabels {
    pub preemptor: &'static str,
    pub victim: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProfileLabels {
    pub profile: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HistoryLabels {
    /// recorded (the bind was counted), duplicate (it already was) or failed.
    pub result: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HoldEndLabels {
    /// `claimed` or `expired`.
    pub how: &'static str,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WatchLabels {
    /// The watch, as `/readyz` names it (`pods`, `persistentvolumes`, `ReplicaSet owners`…).
    pub watch: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    /// active, backoff, unschedulable or gated.
    pub queue: String,
}

/// The labels of `tether_schedulingprofile_condition`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SchedulingProfileConditionLabels {
    /// The SchedulingProfile's name.
    pub schedulingprofile: String,
    /// The condition's type (`Ready`, `NamespaceDefaulting`, `HistoryWritable`, …).
    pub r#type: String,
    /// Its status: `True`, `False` or `Unknown`.
    pub status: String,
}

/// The labels of `tether_schedulingprofile_ready`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SchedulingProfileLabels {
    /// The SchedulingProfile's name.
    pub schedulingprofile: String,
    /// The schedulerName its spec names (what the other metrics call `profile`).
    pub profile: String,
}

/// The labels of `tether_build_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct BuildLabels {
    pub version: &'static str,
    pub commit: &'static str,
}

/// The labels of `tether_kubernetes_release_info`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ReleaseLabels {
    /// The minor tether schedules as (`1.37`).
    pub release: String,
    /// What the API server's `/version` said (`v1.37.2`).
    pub apiserver: String,
}

/// The labels of kube-scheduler's `scheduler_unschedulable_pods`.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct UnschedulableLabels {
    /// A plugin that rejected the pods (or holds them at PreEnqueue).
    pub plugin: String,
    /// Their schedulerName.
    pub profile: String,
}

/// One sub-queue as the queue reports it at scrape time.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingQueue<'a> {
    /// active, backoff, unschedulable or gated.
    pub queue: &'a str,
    pub pods: usize,
    /// How long its longest-waiting pod has waited since it entered the queue.
    pub oldest: Option<Duration>,
}

/// The labels of kube-scheduler's incoming pods counter.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct IncomingLabels {
    /// active, backoff or unschedulable.
    pub queue: String,
    /// What sent the pod there: UnschedulablePodAdd, ScheduleAttemptFailure, BackoffComplete,
    /// a cluster event (NodeAdd, AssignedPodDelete…).
    pub event: String,
}

/// The labels of kube-scheduler's plugin histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct PluginLabels {
    pub plugin: String,
    pub extension_point: String,
    pub status: String,
}

/// kube-scheduler's: from 0.01 ms by a factor of 1.5, the last bucket from about 22 ms.
pub(super) fn plugin_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.00001, 1.5, 20))
}

/// The labels of kube-scheduler's extension point histogram.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ExtensionPointLabels {
    pub extension_point: String,
    pub status: String,
    pub profile: String,
}

/// kube-scheduler's: 1, 2, 4… 64 victims.
pub(super) fn victim_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 7))
}

/// A workload preemption's victims and units: 1 to 1024, doubling.
pub(super) fn workload_victim_buckets() -> Histogram {
    Histogram::new(exponential_buckets(1.0, 2.0, 11))
}

pub(super) fn extension_point_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 12))
}

/// The SLI histogram's `attempts` label, capped as kube-scheduler caps it: `1`…`14`, then
/// `15+`, so that a pod retried for days makes no new series.
pub(super) fn attempts_label(attempts: u32) -> String {
    if attempts >= 15 {
        "15+".into()
    } else {
        attempts.to_string()
    }
}

/// The label of kube-scheduler's SLI histogram: how many attempts the pod took.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct SliLabels {
    pub attempts: String,
}

pub(super) fn attempt_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.001, 2.0, 15))
}

pub(super) fn sli_buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.01, 2.0, 20))
}

/// The label kube-scheduler's `leader_election_master_status` carries: the Lease's user.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct LeaderLabels {
    pub name: String,
}

pub(super) fn buckets() -> Histogram {
    Histogram::new(exponential_buckets(0.0001, 2.0, 18))
}
