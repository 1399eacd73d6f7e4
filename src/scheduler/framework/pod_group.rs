//! Pods that are alike for inter-pod scheduling, and a per-cycle memo of what a cycle's terms
//! and selectors say of each such group.
//!
//! PodTopologySpread and InterPodAffinity ask the same questions of every pod in the cluster:
//! does this selector match its labels, does this term of its own match the incoming pod. The
//! answers depend only on the pod's namespace, labels, whether it is terminating and its own
//! affinity terms, and the pods of one workload share all four. So pods are interned into
//! [`PodGroup`]s (process-wide, while any pod of the group is known), each node counts its pods
//! per group, and a cycle answers each question once per group through a [`GroupMemo`]
//! instead of once per pod: 50,000 pods of five workloads cost five selector matches.

use std::collections::BTreeMap;
use std::sync::{Arc, LazyLock, OnceLock};

use crate::scheduler::framework::affinity_terms::AffinityTerm;
pub use crate::scheduler::framework::affinity_terms::AffinityTerms;
use crate::scheduler::framework::interner::{Interned, Interner};

/// Whether a term selects the pods of a group: here, beside [`PodGroup`], so that the term's
/// own file names no group.
impl AffinityTerm {
    /// Whether the pods of `group` (in a namespace labelled `namespace_labels`) are ones this
    /// term selects.
    pub fn matches_group(
        &self,
        group: &PodGroup,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        let ns_ok = self.namespaces.contains(group.namespace())
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| namespace_labels.is_some_and(|l| s.matches(l)) || s.is_empty());
        ns_ok && self.selector.matches(group.labels())
    }
}

/// What makes pods alike for inter-pod scheduling. Interned: equal keys share one group.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct GroupKey {
    pub namespace: String,
    pub labels: BTreeMap<String, String>,
    /// Whether the pods are being deleted (PodTopologySpread does not count them).
    pub terminating: bool,
    pub terms: AffinityTerms,
}

/// The pods sharing a [`GroupKey`]. Its id is small and reused after the group is gone, so
/// that a [`GroupMemo`] can be a plain vector.
pub type PodGroup = Interned<GroupKey>;

static GROUPS: LazyLock<Interner<GroupKey>> = LazyLock::new(Interner::new);

impl Interned<GroupKey> {
    /// The group for this key: the existing one while any pod holds it, else a new one.
    pub fn intern(key: GroupKey) -> Arc<PodGroup> {
        GROUPS.intern(key)
    }

    pub fn key(&self) -> &GroupKey {
        self.value()
    }

    pub fn namespace(&self) -> &str {
        &self.value().namespace
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        &self.value().labels
    }

    pub fn terminating(&self) -> bool {
        self.value().terminating
    }

    pub fn terms(&self) -> &AffinityTerms {
        &self.value().terms
    }
}

/// The answers to a list of yes/no questions about one group (bit `i`: question `i`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Answers {
    Few(u64),
    Many(Box<[u64]>),
}

impl Answers {
    /// Asks `count` questions through `ask`.
    pub fn ask(count: usize, mut ask: impl FnMut(usize) -> bool) -> Self {
        if count <= 64 {
            let bits = (0..count).filter(|&i| ask(i)).fold(0, |b, i| b | (1 << i));
            return Answers::Few(bits);
        }
        let mut words = vec![0u64; count.div_ceil(64)];
        for i in (0..count).filter(|&i| ask(i)) {
            words[i / 64] |= 1 << (i % 64);
        }
        Answers::Many(words.into_boxed_slice())
    }

    /// Whether question `i` was answered yes.
    pub fn get(&self, i: usize) -> bool {
        let word = match self {
            Answers::Few(bits) if i < 64 => *bits,
            Answers::Few(_) => 0,
            Answers::Many(words) => words.get(i / 64).copied().unwrap_or(0),
        };
        word & (1 << (i % 64)) != 0
    }

    /// Whether every question was answered no.
    pub fn none(&self) -> bool {
        match self {
            Answers::Few(bits) => *bits == 0,
            Answers::Many(words) => words.iter().all(|w| *w == 0),
        }
    }
}

/// Per-cycle answers per group, filled on first use by whichever thread gets there first.
/// Make it after the snapshot it serves exists: it has room for every group alive then.
pub struct GroupMemo {
    slots: Vec<OnceLock<Answers>>,
}

impl GroupMemo {
    pub fn new() -> Self {
        let bound = GROUPS.id_bound() as usize;
        GroupMemo {
            slots: (0..bound).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Calls `f` with the answers for `group`, made by `answers` the first time this memo sees
    /// the group. The questions must be the same for every call on one group.
    pub fn with<R>(
        &self,
        group: &PodGroup,
        answers: impl FnOnce() -> Answers,
        f: impl FnOnce(&Answers) -> R,
    ) -> R {
        match self.slots.get(group.id() as usize) {
            Some(slot) => f(slot.get_or_init(answers)),
            // A group younger than the memo (never one of its snapshot's): answer afresh.
            None => f(&answers()),
        }
    }
}

impl std::fmt::Debug for GroupMemo {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let answered = self.slots.iter().filter(|s| s.get().is_some()).count();
        write!(f, "GroupMemo({answered} groups answered)")
    }
}

impl Default for GroupMemo {
    fn default() -> Self {
        GroupMemo::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(ns: &str, app: &str) -> GroupKey {
        GroupKey {
            namespace: ns.into(),
            labels: BTreeMap::from([("app".to_string(), app.to_string())]),
            ..Default::default()
        }
    }

    #[test]
    fn pods_alike_share_a_group() {
        let a = PodGroup::intern(key("pg-test", "a"));
        assert!(Arc::ptr_eq(&a, &PodGroup::intern(key("pg-test", "a"))));
        let terminating = PodGroup::intern(GroupKey {
            terminating: true,
            ..key("pg-test", "a")
        });
        assert!(!Arc::ptr_eq(&a, &terminating));
        assert!(!Arc::ptr_eq(&a, &PodGroup::intern(key("pg-other", "a"))));
    }

    #[test]
    fn a_memo_asks_once_per_group() {
        let a = PodGroup::intern(key("pg-memo", "a"));
        let memo = GroupMemo::new();
        let mut asked = 0;
        for _ in 0..3 {
            let answers = || {
                Answers::ask(2, |i| {
                    asked += 1;
                    i == 1
                })
            };
            let yes = memo.with(&a, answers, |ans| (ans.get(0), ans.get(1)));
            assert_eq!(yes, (false, true));
        }
        assert_eq!(asked, 2, "two questions, asked once");
    }

    #[test]
    fn many_answers_are_kept_past_64() {
        let ans = Answers::ask(130, |i| i % 65 == 0);
        assert!(ans.get(0) && ans.get(65));
        assert!(!ans.get(1) && !ans.get(129));
        assert!(!ans.none());
        assert!(Answers::ask(3, |_| false).none());
    }
}
