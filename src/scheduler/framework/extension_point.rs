//! The extension points, in the order a pod meets them.

use std::fmt;

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
