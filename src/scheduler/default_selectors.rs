//! The selectors of the Services, ReplicationControllers, ReplicaSets and StatefulSets that
//! select a pod, merged into one, as kube-scheduler's DefaultSelector builds them for
//! PodTopologySpread's default (system) constraints. Fed by watches; read in PreFilter/PreScore.

use std::collections::HashMap;
use std::sync::RwLock;

use super::labels::Selector;
use super::plugins::pod_topology_spread::DefaultSelectorSource;
use super::pod_info::PodInfo;

/// Selectors by namespace, then by `Kind/name`.
#[derive(Default)]
pub struct WorkloadSelectors {
    by_namespace: RwLock<HashMap<String, HashMap<String, Selector>>>,
}

impl WorkloadSelectors {
    /// Records (or replaces) the selector of `kind/name` in `namespace`.
    pub fn set(&self, namespace: &str, kind: &str, name: &str, selector: Selector) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        map.entry(namespace.to_string())
            .or_default()
            .insert(format!("{kind}/{name}"), selector);
    }

    pub fn remove(&self, namespace: &str, kind: &str, name: &str) {
        let mut map = self.by_namespace.write().unwrap_or_else(|e| e.into_inner());
        if let Some(ns) = map.get_mut(namespace) {
            ns.remove(&format!("{kind}/{name}"));
        }
    }
}

impl DefaultSelectorSource for WorkloadSelectors {
    fn default_selector(&self, pod: &PodInfo) -> Option<Selector> {
        let map = self.by_namespace.read().unwrap_or_else(|e| e.into_inner());
        let mut merged: Option<Selector> = None;
        // An empty selector selects every pod; it adds nothing and is skipped, as upstream.
        for selector in map
            .get(pod.namespace())?
            .values()
            .filter(|s| !s.is_empty() && s.matches(pod.labels()))
        {
            merged
                .get_or_insert_with(Selector::everything)
                .merge(selector);
        }
        merged
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn merges_the_selectors_that_select_the_pod() {
        let w = WorkloadSelectors::default();
        let sel = |pairs: &[(&str, &str)]| {
            Selector::from_map(
                &pairs
                    .iter()
                    .map(|(k, v)| (k.to_string(), v.to_string()))
                    .collect(),
            )
        };
        w.set("default", "Service", "web", sel(&[("app", "web")]));
        w.set(
            "default",
            "ReplicaSet",
            "web-1",
            sel(&[("app", "web"), ("hash", "1")]),
        );
        w.set("default", "Service", "other", sel(&[("app", "db")]));
        w.set("shop", "Service", "web", sel(&[("app", "web")]));
        let pod = PodBuilder::new("p")
            .label("app", "web")
            .label("hash", "1")
            .info();
        let merged = w.default_selector(&pod).expect("selected");
        assert!(merged.matches(pod.labels()));
        let sibling = PodBuilder::new("q")
            .label("app", "web")
            .label("hash", "2")
            .info();
        assert!(
            !merged.matches(sibling.labels()),
            "the ReplicaSet's selector is part of it"
        );
        let loner = PodBuilder::new("l").label("app", "cache").info();
        assert!(w.default_selector(&loner).is_none());
        w.remove("default", "ReplicaSet", "web-1");
        assert!(
            w.default_selector(&pod)
                .expect("the service")
                .matches(sibling.labels())
        );
    }
}
