//! The extension points, in the order a pod meets them.

use std::fmt;

use super::Plugin;

/// One extension point of the scheduling framework.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ExtensionPoint {
    PreEnqueue,
    QueueSort,
    PreFilter,
    Filter,
    PostFilter,
    PreScore,
    Score,
    Reserve,
    Permit,
    PreBind,
    Bind,
    PostBind,
}

impl ExtensionPoint {
    /// Every extension point, in the order of a profile's `plugins` (multiPoint aside).
    pub const ALL: [ExtensionPoint; 12] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::QueueSort,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PostFilter,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
        ExtensionPoint::PreBind,
        ExtensionPoint::Bind,
        ExtensionPoint::PostBind,
    ];

    /// Its field name under a profile's `plugins`, as in KubeSchedulerConfiguration.
    pub fn field(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "preEnqueue",
            ExtensionPoint::QueueSort => "queueSort",
            ExtensionPoint::PreFilter => "preFilter",
            ExtensionPoint::Filter => "filter",
            ExtensionPoint::PostFilter => "postFilter",
            ExtensionPoint::PreScore => "preScore",
            ExtensionPoint::Score => "score",
            ExtensionPoint::Reserve => "reserve",
            ExtensionPoint::Permit => "permit",
            ExtensionPoint::PreBind => "preBind",
            ExtensionPoint::Bind => "bind",
            ExtensionPoint::PostBind => "postBind",
        }
    }

    /// Whether `plugin` takes part in this extension point.
    pub fn implemented_by(self, plugin: &dyn Plugin) -> bool {
        match self {
            ExtensionPoint::PreEnqueue => plugin.pre_enqueue().is_some(),
            ExtensionPoint::QueueSort => plugin.queue_sort().is_some(),
            ExtensionPoint::PreFilter => plugin.pre_filter().is_some(),
            ExtensionPoint::Filter => plugin.filter().is_some(),
            ExtensionPoint::PostFilter => plugin.post_filter().is_some(),
            ExtensionPoint::PreScore => plugin.pre_score().is_some(),
            ExtensionPoint::Score => plugin.score().is_some(),
            ExtensionPoint::Reserve => plugin.reserve().is_some(),
            ExtensionPoint::Permit => plugin.permit().is_some(),
            ExtensionPoint::PreBind => plugin.pre_bind().is_some(),
            ExtensionPoint::Bind => plugin.bind().is_some(),
            ExtensionPoint::PostBind => plugin.post_bind().is_some(),
        }
    }

    /// The point whose per-pod data this one reads, where it has one: a plugin's Filter reads
    /// what its PreFilter computed, its Score what its PreScore computed.
    pub fn prerequisite(self) -> Option<ExtensionPoint> {
        match self {
            ExtensionPoint::Filter => Some(ExtensionPoint::PreFilter),
            ExtensionPoint::Score => Some(ExtensionPoint::PreScore),
            _ => None,
        }
    }
}

impl fmt::Display for ExtensionPoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.field())
    }
}
