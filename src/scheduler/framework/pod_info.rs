//! A pod with what the scheduler derives from it once, when it enters the cache or the queue:
//! its requests, host ports and parsed inter-pod affinity terms.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::PodAffinityTerm;

use crate::k8s::labels::SelectorError;
use crate::k8s::pod::Pod;
use crate::k8s::pods;
use crate::k8s::resource::{Resource, pod_requests};
pub use crate::scheduler::framework::affinity_terms::{AffinityTerm, WeightedAffinityTerm};
use crate::scheduler::framework::pod_group::{AffinityTerms, GroupKey, PodGroup};

/// A host port a container asks for: (host IP, protocol, port). An empty IP means 0.0.0.0.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct HostPort {
    pub ip: String,
    pub protocol: String,
    pub port: i32,
}

/// Whether a term selects a pod: here, beside [`PodInfo`], so that the term's own file
/// names no pod.
impl AffinityTerm {
    /// Whether `pod` (in a namespace labelled `namespace_labels`) is one this term selects.
    pub fn matches(
        &self,
        pod: &PodInfo,
        namespace_labels: Option<&BTreeMap<String, String>>,
    ) -> bool {
        self.matches_group(&pod.group, namespace_labels)
    }
}

/// A pod plus everything derived from it once.
#[derive(Clone, Debug)]
pub struct PodInfo {
    pub pod: Arc<Pod>,
    /// What the pod requests, as NodeResourcesFit counts it.
    pub requests: Resource,
    /// The requests with kube-scheduler's non-zero defaults, as scoring counts them.
    pub non_zero_requests: Resource,
    pub host_ports: Vec<HostPort>,
    /// The pods alike to this one for inter-pod scheduling; it holds the pod's parsed
    /// inter-pod affinity terms.
    pub group: Arc<PodGroup>,
    /// An affinity term that could not be parsed; the pod cannot be scheduled while it has one.
    pub parse_error: Option<SelectorError>,
}

static EMPTY_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl PodInfo {
    pub fn new(pod: Arc<Pod>) -> Self {
        let requests = pod_requests(&pod, false);
        let non_zero_requests = pod_requests(&pod, true);
        let namespace = pod.metadata.namespace.clone().unwrap_or_default();
        let mut parse_error = None;
        let mut parse_terms = |terms: Option<&Vec<PodAffinityTerm>>| -> Vec<AffinityTerm> {
            terms
                .into_iter()
                .flatten()
                .filter_map(|t| {
                    AffinityTerm::parse(t, &namespace)
                        .map_err(|e| parse_error = Some(e))
                        .ok()
                })
                .collect()
        };
        let affinity = pod.spec.as_ref().and_then(|s| s.affinity.as_ref());
        let pa = affinity.and_then(|a| a.pod_affinity.as_ref());
        let paa = affinity.and_then(|a| a.pod_anti_affinity.as_ref());
        let required_affinity = parse_terms(pa.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let required_anti_affinity = parse_terms(paa.and_then(|a| {
            a.required_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let mut parse_weighted =
            |terms: Option<&Vec<k8s_openapi::api::core::v1::WeightedPodAffinityTerm>>| {
                terms
                    .into_iter()
                    .flatten()
                    .filter_map(|w| {
                        AffinityTerm::parse(&w.pod_affinity_term, &namespace)
                            .map(|term| WeightedAffinityTerm {
                                term,
                                weight: w.weight,
                            })
                            .map_err(|e| parse_error = Some(e))
                            .ok()
                    })
                    .collect::<Vec<_>>()
            };
        let preferred_affinity = parse_weighted(pa.and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }));
        let preferred_anti_affinity = parse_weighted(paa.and_then(|a| {
            a.preferred_during_scheduling_ignored_during_execution
                .as_ref()
        }));

        let mut host_ports = Vec::new();
        if let Some(spec) = pod.spec.as_ref() {
            let sidecars = spec
                .init_containers
                .iter()
                .flatten()
                .filter(|c| c.restart_policy.as_deref() == Some("Always"));
            for c in spec.containers.iter().chain(sidecars) {
                for p in c.ports.iter().flatten() {
                    if let Some(host_port) = p.host_port.filter(|hp| *hp > 0) {
                        host_ports.push(HostPort {
                            ip: p
                                .host_ip
                                .clone()
                                .filter(|ip| !ip.is_empty())
                                .unwrap_or_else(|| "0.0.0.0".into()),
                            protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                            port: host_port,
                        });
                    }
                }
            }
        }
        let group = PodGroup::intern(GroupKey {
            namespace,
            labels: pod.metadata.labels.clone().unwrap_or_default(),
            terminating: pod.metadata.deletion_timestamp.is_some(),
            terms: AffinityTerms {
                required_affinity,
                required_anti_affinity,
                preferred_affinity,
                preferred_anti_affinity,
            },
        });
        PodInfo {
            pod,
            requests,
            non_zero_requests,
            host_ports,
            group,
            parse_error,
        }
    }

    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn uid(&self) -> &str {
        self.pod.metadata.uid.as_deref().unwrap_or_default()
    }

    pub fn labels(&self) -> &BTreeMap<String, String> {
        self.pod.metadata.labels.as_ref().unwrap_or(&EMPTY_LABELS)
    }

    /// `namespace/name`, the key the queue and the cache use.
    pub fn key(&self) -> String {
        pods::key(&self.pod)
    }

    pub fn node_name(&self) -> Option<&str> {
        pods::node_name(&self.pod)
    }

    /// This pod as if bound to `node` (what an assumed pod looks like on its node).
    pub fn on_node(&self, node: &str) -> PodInfo {
        let mut bound = (*self.pod).clone();
        bound.spec.get_or_insert_with(Default::default).node_name = Some(node.to_string());
        PodInfo {
            pod: Arc::new(bound),
            ..self.clone()
        }
    }

    /// The pod's inter-pod affinity and anti-affinity terms, parsed.
    pub fn terms(&self) -> &AffinityTerms {
        self.group.terms()
    }

    /// Whether the pod has any inter-pod affinity or anti-affinity terms.
    pub fn has_affinity(&self) -> bool {
        !self.terms().is_empty()
    }
}
