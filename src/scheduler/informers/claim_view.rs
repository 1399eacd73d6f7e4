//! Every ResourceClaim as the scheduler sees it (the watched claims with the allocations in
//! flight laid over them), kept as each change arrives instead of gathered per cycle, with the
//! recent changes themselves: what keeps something counted from the claims (the devices they
//! hold) reads only the changes since it last looked.
//!
//! A copy of the view is a pointer (a persistent map); a scheduling cycle takes one.

use std::collections::VecDeque;
use std::sync::Arc;

use k8s_openapi::api::resource::v1::ResourceClaim;

/// Every claim as the scheduler sees it, by UID (a claim without one, which the API server
/// never sends, by `/namespace/name`). A copy is a pointer.
pub type ClaimMap = imbl::GenericHashMap<
    String,
    Arc<ResourceClaim>,
    foldhash::fast::RandomState,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// How many changes the view remembers; a reader further behind counts afresh.
const REMEMBERED: usize = 4096;

/// One change of the view: what an entry held before and holds now (never the same object).
#[derive(Clone, Debug)]
pub struct ClaimChange {
    pub before: Option<Arc<ResourceClaim>>,
    pub after: Option<Arc<ResourceClaim>>,
}

/// The view and its recent changes, numbered: change `n` is the `n`-th since the index began;
/// a re-list skips a number, so every reader from before it counts afresh.
#[derive(Debug, Default)]
pub struct ClaimView {
    claims: ClaimMap,
    changes: VecDeque<ClaimChange>,
    /// The number of `changes[0]`.
    first: u64,
}

impl ClaimView {
    /// Every claim, each once.
    pub fn claims(&self) -> &ClaimMap {
        &self.claims
    }

    /// The number the next change will have: a reader that has applied every change before it
    /// is up to date at this number.
    pub fn next(&self) -> u64 {
        self.first.saturating_add(self.changes.len() as u64)
    }

    /// The changes from number `from` on, or `None` when they are no longer remembered (or
    /// `from` is not a number this view gave: count afresh from [`ClaimView::claims`]).
    pub fn since(&self, from: u64) -> Option<impl Iterator<Item = &ClaimChange>> {
        if from < self.first || from > self.next() {
            return None;
        }
        let skip = usize::try_from(from - self.first).ok()?;
        Some(self.changes.iter().skip(skip))
    }

    /// Sets the entry `key` to `now` (removed when `None`), remembering the change when the
    /// entry held another object.
    pub fn set(&mut self, key: String, now: Option<Arc<ResourceClaim>>) {
        let before = match &now {
            Some(c) => self.claims.insert(key, c.clone()),
            None => self.claims.remove(&key),
        };
        let same = match (&before, &now) {
            (Some(a), Some(b)) => Arc::ptr_eq(a, b),
            (None, None) => true,
            _ => false,
        };
        if same {
            return;
        }
        if self.changes.len() >= REMEMBERED {
            self.changes.pop_front();
            self.first = self.first.saturating_add(1);
        }
        self.changes.push_back(ClaimChange { before, after: now });
    }

    /// Replaces every entry (a re-list): no change before it is remembered, and the numbers
    /// skip one, so every reader counts afresh.
    pub fn replace(&mut self, claims: ClaimMap) {
        self.claims = claims;
        self.first = self.next().saturating_add(1);
        self.changes.clear();
    }
}

/// The key of a claim in the view: its UID, or `/namespace/name` without one.
pub fn view_key(uid: &str, key: &str) -> String {
    if uid.is_empty() {
        format!("/{key}")
    } else {
        uid.to_string()
    }
}

#[cfg(test)]
mod tests {
    use kube::api::ObjectMeta;

    use super::*;

    fn claim(name: &str) -> Arc<ResourceClaim> {
        Arc::new(ResourceClaim {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..Default::default()
            },
            ..Default::default()
        })
    }

    #[test]
    fn a_reader_behind_what_is_remembered_or_before_a_relist_counts_afresh() {
        let mut view = ClaimView::default();
        let start = view.next();
        view.set("a".into(), Some(claim("a")));
        let same = view.claims()["a"].clone();
        view.set("a".into(), Some(same));
        view.set("gone".into(), None);
        assert_eq!(
            view.next(),
            start + 1,
            "only a change that changed something counts"
        );
        assert_eq!(view.since(start).map(Iterator::count), Some(1));
        assert_eq!(view.since(view.next()).map(Iterator::count), Some(0));
        assert!(
            view.since(view.next() + 1).is_none(),
            "a number the view never gave"
        );

        for i in 0..REMEMBERED {
            view.set(format!("c{i}"), Some(claim("c")));
        }
        assert!(view.since(start).is_none(), "the first change is forgotten");
        assert_eq!(view.since(start + 1).map(Iterator::count), Some(REMEMBERED));

        let before = view.next();
        view.replace(ClaimMap::default());
        assert!(view.since(before).is_none(), "a re-list: count afresh");
        assert!(view.claims().is_empty());
        assert_eq!(view.since(view.next()).map(Iterator::count), Some(0));
    }
}
