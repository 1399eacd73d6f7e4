//! StickyBinding reads for the plugins (an index fed by a watch) and the exactly-once status
//! writes of PostBind.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};

use crate::api::StickyBinding;

/// StickyBindings by namespace and name, from a watch. No API call.
pub trait BindingLookup: Send + Sync {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>>;
}

/// The in-memory index of StickyBindings.
#[derive(Default)]
pub struct BindingIndex {
    bindings: RwLock<HashMap<(String, String), Arc<StickyBinding>>>,
}

impl BindingIndex {
    pub fn upsert(&self, binding: StickyBinding) {
        let key = (
            binding.metadata.namespace.clone().unwrap_or_default(),
            binding.metadata.name.clone().unwrap_or_default(),
        );
        self.bindings
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, Arc::new(binding));
    }

    pub fn remove(&self, namespace: &str, name: &str) {
        self.bindings
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&(namespace.to_string(), name.to_string()));
    }
}

impl BindingLookup for BindingIndex {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>> {
        self.bindings
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&(namespace.to_string(), name.to_string()))
            .cloned()
    }
}
