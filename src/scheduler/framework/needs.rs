//! Which plugins need which watches. A watch registered for some plugins
//! ([`crate::watch::Need::Plugins`]) holds back only the pods of profiles that run one of them
//! while it fails or re-lists (a storage kind RBAC denies, a PodDisruptionBudget watch
//! re-listing): every other profile goes on scheduling. The names are the plugins' own; a test
//! in `plugins::registry` checks that each names a registered plugin.

/// The storage watches (volumes, claims, classes, CSI objects).
pub const VOLUME_PLUGINS: &[&str] = &[
    "VolumeBinding",
    "VolumeRestrictions",
    "VolumeZone",
    "NodeVolumeLimits",
];

/// The DRA watches (ResourceSlices, DeviceClasses, ResourceClaims, DeviceTaintRules).
pub const DRA_PLUGINS: &[&str] = &["DynamicResources"];

/// The PodDisruptionBudget watch: victims are chosen against the budgets.
pub const PREEMPTION_PLUGINS: &[&str] = &["DefaultPreemption"];

/// The Service, ReplicationController, ReplicaSet and StatefulSet selectors: the system
/// default spreading constraints select a pod's siblings through them.
pub const SPREAD_PLUGINS: &[&str] = &["PodTopologySpread"];

/// The owner and StickyBinding watches: a pod's workload and its history.
pub const STICKY_PLUGINS: &[&str] = &["StickyNode", "PlacementHistory", "PlacementRecorder"];

/// The PodGroup watch (the Workload API): gangs and their members.
pub const GANG_PLUGINS: &[&str] = &["GangScheduling"];

/// scheduler-plugins' PodGroup watch (`scheduling.x-k8s.io`): Coscheduling's gangs.
pub const COSCHEDULING_PLUGINS: &[&str] = &["Coscheduling"];
