//! activeQ and backoffQ are binary heaps of these entries.

use std::cmp::Ordering as CmpOrdering;
use std::sync::Arc;
use std::time::Instant;

use crate::scheduler::framework::{Plugin, QueuedPodInfo};

/// A pod in activeQ or backoffQ: heaps hold these, ordered by QueueSort (and, in backoffQ, by
/// the end of the backoff first).
pub(super) struct HeapEntry {
    pub(super) info: QueuedPodInfo,
    pub(super) sort: Arc<dyn Plugin>,
    /// When the backoff ends (backoffQ only; activeQ entries all hold the same instant).
    pub(super) until: Instant,
    pub(super) seq: u64,
}

impl PartialEq for HeapEntry {
    fn eq(&self, other: &Self) -> bool {
        self.cmp(other) == CmpOrdering::Equal
    }
}
impl Eq for HeapEntry {}
impl PartialOrd for HeapEntry {
    fn partial_cmp(&self, other: &Self) -> Option<CmpOrdering> {
        Some(self.cmp(other))
    }
}
impl Ord for HeapEntry {
    /// BinaryHeap pops the greatest: the entry whose backoff ends first, then the one
    /// QueueSort says goes first, then the oldest push.
    fn cmp(&self, other: &Self) -> CmpOrdering {
        other
            .until
            .cmp(&self.until)
            .then_with(|| match self.sort.queue_sort() {
                Some(qs) if qs.less(&self.info, &other.info) => CmpOrdering::Greater,
                Some(qs) if qs.less(&other.info, &self.info) => CmpOrdering::Less,
                _ => other.seq.cmp(&self.seq),
            })
    }
}
