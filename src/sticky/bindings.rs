//! The StickyBindings the plugins read: an in-memory index fed by the StickyBinding watch and
//! by the history writer's own writes. No API call.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::api::StickyBinding;
use crate::locks;
use crate::scheduler::framework::events::{ActionType, ClusterEvent, EventObject, EventResource};

/// The kind of cluster event a StickyBinding change is, as StickyNode registers it (the
/// framework knows StickyBindings only by this name).
pub const EVENT_RESOURCE: EventResource = EventResource::Custom("StickyBinding");

/// The cluster event of a StickyBinding going from `old` to `new` (`None`: absent), with its
/// objects as the queue hands them to hints.
pub fn cluster_event(
    old: Option<Arc<StickyBinding>>,
    new: Option<Arc<StickyBinding>>,
) -> (ClusterEvent, Option<EventObject>, Option<EventObject>) {
    let action = match (&old, &new) {
        (None, _) => ActionType::ADD,
        (_, None) => ActionType::DELETE,
        _ => ActionType::UPDATE,
    };
    let wrap = |b: Arc<StickyBinding>| EventObject::Custom(b);
    (
        ClusterEvent::new(EVENT_RESOURCE, action),
        old.map(wrap),
        new.map(wrap),
    )
}

/// StickyBindings by namespace and name, from a watch. No API call.
pub trait BindingLookup: Send + Sync {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>>;
}

/// The in-memory index of StickyBindings.
#[derive(Default)]
pub struct BindingIndex {
    bindings: RwLock<HashMap<(String, String), Arc<StickyBinding>>>,
}

type Key = (String, String);

fn key_of(binding: &StickyBinding) -> Key {
    (
        binding.metadata.namespace.clone().unwrap_or_default(),
        binding.metadata.name.clone().unwrap_or_default(),
    )
}

/// Whether `held` is a newer version than `incoming`. Versions are compared as numbers when
/// both are, as client-go's mutation cache does; else the incoming one counts as newer.
fn is_newer(held: &StickyBinding, incoming: &StickyBinding) -> bool {
    let version = |b: &StickyBinding| {
        b.metadata
            .resource_version
            .as_deref()
            .and_then(|v| v.parse::<u64>().ok())
    };
    matches!((version(held), version(incoming)), (Some(h), Some(i)) if h > i)
}

impl BindingIndex {
    fn write(&self) -> std::sync::RwLockWriteGuard<'_, HashMap<Key, Arc<StickyBinding>>> {
        locks::write(&self.bindings)
    }

    /// Stores a binding from the watch or from one of our own writes, unless the index
    /// already holds a newer version (a write's response and the watch event of a later
    /// change race).
    pub fn upsert(&self, binding: StickyBinding) {
        let key = key_of(&binding);
        let mut map = self.write();
        if !map.get(&key).is_some_and(|held| is_newer(held, &binding)) {
            map.insert(key, Arc::new(binding));
        }
    }

    /// Replaces the whole index with a fresh list: a binding deleted while the watch was down
    /// is forgotten; a listed one is stored unless our own write left a newer version.
    pub fn reset(&self, bindings: Vec<StickyBinding>) {
        let mut map = self.write();
        let mut next = HashMap::with_capacity(bindings.len());
        for binding in bindings {
            let key = key_of(&binding);
            let keep = map.remove(&key).filter(|held| is_newer(held, &binding));
            next.insert(key, keep.unwrap_or_else(|| Arc::new(binding)));
        }
        *map = next;
    }

    /// Every binding held.
    pub fn all(&self) -> Vec<Arc<StickyBinding>> {
        locks::read(&self.bindings).values().cloned().collect()
    }

    pub fn remove(&self, namespace: &str, name: &str) {
        self.write()
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

impl BindingLookup for BindingIndex {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>> {
        locks::read(&self.bindings)
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::api::{StickyBindingSpec, StickyBindingStatus};

    fn versioned(rv: &str, latest: &str) -> StickyBinding {
        let mut b = StickyBinding::new(
            "b",
            StickyBindingSpec {
                workload_ref: crate::api::WorkloadRef {
                    api_version: "apps/v1".into(),
                    kind: "StatefulSet".into(),
                    name: "db".into(),
                    ordinal: Some(0),
                },
                node_name: None,
            },
        );
        b.metadata.namespace = Some("ns".into());
        b.metadata.resource_version = Some(rv.into());
        b.status = Some(StickyBindingStatus {
            latest: Some(latest.into()),
            ..Default::default()
        });
        b
    }

    #[test]
    fn a_write_never_replaces_a_newer_version_the_watch_delivered() {
        let index = BindingIndex::default();
        let latest = |i: &BindingIndex| {
            i.get("ns", "b")
                .and_then(|b| b.status.clone())
                .and_then(|s| s.latest)
        };
        index.upsert(versioned("10", "a"));
        assert_eq!(latest(&index).as_deref(), Some("a"), "absent: stored");
        index.upsert(versioned("12", "b"));
        assert_eq!(latest(&index).as_deref(), Some("b"), "newer: replaces");
        index.upsert(versioned("11", "c"));
        assert_eq!(latest(&index).as_deref(), Some("b"), "older: kept out");
        index.upsert(versioned("opaque", "d"));
        assert_eq!(
            latest(&index).as_deref(),
            Some("d"),
            "not numbers: the write wins"
        );
    }
}
