//! A pod's inter-pod affinity and anti-affinity terms, parsed once. Which pods a term selects
//! is told beside the pod (`pod_info.rs`) and the group (`pod_group.rs`).

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PodAffinityTerm;

use crate::k8s::labels::{Selector, SelectorError};
use crate::scheduler::framework::topology::{self, Label};

/// An inter-pod (anti-)affinity term with its selectors parsed.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Namespaces named by the term; with no namespaceSelector and no namespaces, the pod's own.
    pub namespaces: BTreeSet<String>,
    /// `None`: only `namespaces` count. `Some(empty)` matches every namespace.
    pub namespace_selector: Option<Selector>,
    pub selector: Selector,
    /// Interned, so that nodes' values for it are looked up by number.
    pub topology_key: Arc<Label>,
}

impl AffinityTerm {
    /// `term` of a pod in `pod_namespace`, its selectors parsed.
    pub fn parse(term: &PodAffinityTerm, pod_namespace: &str) -> Result<Self, SelectorError> {
        let mut namespaces: BTreeSet<String> = term.namespaces.iter().flatten().cloned().collect();
        let namespace_selector = match term.namespace_selector.as_ref() {
            Some(s) => Some(Selector::from_label_selector(Some(s))?),
            None => None,
        };
        if namespaces.is_empty() && namespace_selector.is_none() {
            namespaces.insert(pod_namespace.to_string());
        }
        Ok(AffinityTerm {
            namespaces,
            namespace_selector,
            selector: Selector::from_label_selector(term.label_selector.as_ref())?,
            topology_key: topology::label(&term.topology_key),
        })
    }
}

/// An affinity term with the weight of a preferred term.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct WeightedAffinityTerm {
    pub term: AffinityTerm,
    pub weight: i32,
}

/// A pod's inter-pod affinity and anti-affinity terms, parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub struct AffinityTerms {
    pub required_affinity: Vec<AffinityTerm>,
    pub required_anti_affinity: Vec<AffinityTerm>,
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
}

impl AffinityTerms {
    /// Whether there is any term at all.
    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && self.preferred_affinity.is_empty()
            && self.preferred_anti_affinity.is_empty()
    }
}
