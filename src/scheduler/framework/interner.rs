//! Values interned process-wide while anything holds them, each with a small id that is reused
//! once the value is gone, so that a cycle can key its maps, or index a vector, by number.
//!
//! Used for [`PodGroup`](crate::scheduler::framework::pod_group::PodGroup)s and for node label
//! keys and values ([`Label`](crate::scheduler::framework::topology::Label)).

use std::borrow::Borrow;
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::fmt;
use std::hash::{Hash, Hasher};
use std::ops::Deref;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, Weak};

/// Where values of one kind are interned. Lives in a `static`.
pub struct Interner<K: 'static> {
    state: Mutex<State<K>>,
    /// One more than the highest id ever given out: every live value's id is below it.
    bound: AtomicU32,
}

struct State<K: 'static> {
    /// Values by the hash of their key; a bucket holds more than one only on a collision.
    by_hash: HashMap<u64, Vec<Weak<Interned<K>>>>,
    free: Vec<u32>,
    next: u32,
}

/// One interned value: equal values share one. Dereferences to the value.
pub struct Interned<K: 'static> {
    id: u32,
    hash: u64,
    value: K,
    home: &'static Interner<K>,
}

impl<K: Hash + Eq> Interner<K> {
    pub fn new() -> Self {
        Interner {
            state: Mutex::new(State {
                by_hash: HashMap::new(),
                free: Vec::new(),
                next: 0,
            }),
            bound: AtomicU32::new(0),
        }
    }

    /// The interned value equal to `value`: the existing one while anything holds it, else a
    /// new one.
    pub fn intern(&'static self, value: K) -> Arc<Interned<K>> {
        let hash = hash_of(&value);
        let mut looked_at = Vec::new();
        let mut state = self.lock();
        if let Some(found) = state.find(hash, &value, &mut looked_at) {
            return found;
        }
        let id = state.free.pop().unwrap_or_else(|| {
            let id = state.next;
            state.next += 1;
            self.bound.store(state.next, Ordering::Release);
            id
        });
        let interned = Arc::new(Interned {
            id,
            hash,
            value,
            home: self,
        });
        state
            .by_hash
            .entry(hash)
            .or_default()
            .push(Arc::downgrade(&interned));
        interned
    }

    /// The interned value equal to `value`, if anything holds one.
    pub fn find<Q>(&'static self, value: &Q) -> Option<Arc<Interned<K>>>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        let hash = hash_of(value);
        let mut looked_at = Vec::new();
        let state = self.lock();
        state.find(hash, value, &mut looked_at)
    }

    /// Every live value's id is below this.
    pub fn id_bound(&self) -> u32 {
        self.bound.load(Ordering::Acquire)
    }

    fn lock(&self) -> MutexGuard<'_, State<K>> {
        // The state stays consistent even if a holder panicked: each change is one push or
        // removal.
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
}

impl<K> State<K> {
    /// The live value equal to `value` in the bucket of `hash`. The other live values of the
    /// bucket are put in `looked_at`, for the caller to release after the lock: releasing the
    /// last hold on one runs its Drop, which takes the lock.
    fn find<Q>(
        &self,
        hash: u64,
        value: &Q,
        looked_at: &mut Vec<Arc<Interned<K>>>,
    ) -> Option<Arc<Interned<K>>>
    where
        K: Borrow<Q>,
        Q: Eq + ?Sized,
    {
        for weak in self.by_hash.get(&hash).into_iter().flatten() {
            if let Some(found) = weak.upgrade() {
                if found.value.borrow() == value {
                    return Some(found);
                }
                looked_at.push(found);
            }
        }
        None
    }
}

impl<K: Hash + Eq> Default for Interner<K> {
    fn default() -> Self {
        Interner::new()
    }
}

fn hash_of<Q: Hash + ?Sized>(value: &Q) -> u64 {
    let mut h = DefaultHasher::new();
    value.hash(&mut h);
    h.finish()
}

impl<K> Interned<K> {
    /// Small, unique among live values of this kind, reused after this one is gone.
    pub fn id(&self) -> u32 {
        self.id
    }

    pub fn value(&self) -> &K {
        &self.value
    }
}

impl<K> Deref for Interned<K> {
    type Target = K;

    fn deref(&self) -> &K {
        &self.value
    }
}

/// Live values are equal exactly when they are one value, so ids compare and hash them.
impl<K> PartialEq for Interned<K> {
    fn eq(&self, other: &Self) -> bool {
        self.id == other.id
    }
}

impl<K> Eq for Interned<K> {}

impl<K> Hash for Interned<K> {
    fn hash<H: Hasher>(&self, state: &mut H) {
        self.id.hash(state);
    }
}

impl<K: fmt::Debug> fmt::Debug for Interned<K> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "#{} {:?}", self.id, self.value)
    }
}

impl<K> Drop for Interned<K> {
    /// Forgets the value and frees its id. The interner's entry for it can no longer be
    /// upgraded, so nobody can reach the value or its id any more.
    fn drop(&mut self) {
        let mut state = self.home.state.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(bucket) = state.by_hash.get_mut(&self.hash) {
            bucket.retain(|w| w.strong_count() > 0);
            if bucket.is_empty() {
                state.by_hash.remove(&self.hash);
            }
        }
        state.free.push(self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::sync::LazyLock;

    use super::*;

    static WORDS: LazyLock<Interner<String>> = LazyLock::new(Interner::new);

    #[test]
    fn equal_values_share_one_and_a_gone_value_frees_its_id() {
        let a = WORDS.intern("a".to_string());
        let a2 = WORDS.intern("a".to_string());
        let b = WORDS.intern("b".to_string());
        assert!(Arc::ptr_eq(&a, &a2));
        assert_ne!(a.id(), b.id());
        assert!(Arc::ptr_eq(&WORDS.find("b").expect("b is held"), &b));

        let b_id = b.id();
        drop(b);
        assert!(WORDS.find("b").is_none(), "nothing holds b any more");
        let c = WORDS.intern("c".to_string());
        assert_eq!(c.id(), b_id, "b's id is given to the next new value");
        assert!(c.id() < WORDS.id_bound());
        assert_eq!(**c, "c");
    }
}
