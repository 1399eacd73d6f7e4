//! A pod's signature (upstream's PodSignature): everything of a pod that a profile's PreFilter,
//! Filter, PreScore and Score plugins read, so that two pods with equal signatures are feasible
//! on the same nodes and score them the same in the same cluster. Opportunistic batching
//! (`scheduler/batch.rs`) reuses one pod's ranking of the nodes for the next pod only when
//! their signatures are equal.
//!
//! Each plugin writes its parts ([`crate::scheduler::framework::Plugin::sign_pod`]) under the
//! keys below (upstream's signer names); plugins reading the same part (NodeResourcesFit and
//! NodeResourcesBalancedAllocation both read the requests) write it once. A value is written
//! as its `Debug` text, quoted strings included, so that no two different sets of parts read
//! the same. Where upstream sorts a list that only counts as a set (tolerations, host ports,
//! images) tether sorts it too; elsewhere (node affinity terms) it keeps the pod's order: a pod
//! that only orders its terms differently is not batched with the other, never batched wrongly.

use std::collections::BTreeSet;
use std::fmt::{Debug, Write};

use crate::scheduler::framework::pod_info::PodInfo;

/// The requests, overheads and pod-level resources (NodeResourcesFit, BalancedAllocation).
pub const RESOURCES: &str = "v1.Pod.Spec.ContainerRequestsAndOverheads()";
/// The tolerations (TaintToleration, NodeUnschedulable).
pub const TOLERATIONS: &str = "v1.Pod.Spec.Tolerations";
/// The required and preferred node affinity (NodeAffinity).
pub const NODE_AFFINITY: &str = "v1.Pod.Spec.Affinity.NodeAffinity";
/// The node selector (NodeAffinity).
pub const NODE_SELECTOR: &str = "v1.Pod.Spec.Affinity.NodeSelector";
/// The host ports (NodePorts).
pub const HOST_PORTS: &str = "v1.Pod.Spec.HostPorts()";
/// `spec.nodeName` (NodeName).
pub const NODE_NAME: &str = "v1.Pod.Spec.NodeName";
/// The volumes other than ConfigMaps and Secrets (the volume plugins).
pub const VOLUMES: &str = "v1.Pod.Spec.Volumes.NonSyntheticSources()";
/// The images, normalized (ImageLocality).
pub const IMAGE_NAMES: &str = "v1.Pod.Spec.CanonicalImageNames()";
/// The labels and namespace, which other pods' affinity terms select (InterPodAffinity).
pub const LABELS: &str = "v1.Pod.Labels";
/// The node features the pod needs (NodeDeclaredFeatures).
pub const FEATURES: &str = "v1.Pod.Spec.RequiredFeatures()";

/// A pod's signature: its parts, key and value, in the profile's plugin order.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Signature {
    text: String,
    keys: Vec<&'static str>,
}

impl Signature {
    /// A signature holding the pod's scheduler name (every profile's first part).
    pub fn new(scheduler_name: &str) -> Self {
        let mut signature = Signature::default();
        signature.part("v1.Pod.Spec.SchedulerName", &scheduler_name);
        signature
    }

    /// Adds the part `key` unless a plugin added it already (the same pod's part is the same
    /// whichever plugin writes it).
    pub fn part(&mut self, key: &'static str, value: &dyn Debug) {
        if self.keys.contains(&key) {
            return;
        }
        self.keys.push(key);
        // Writing to a String cannot fail.
        let _ = write!(self.text, "{key}={value:?};");
    }

    /// How long the signature's text is (for tests and logs).
    pub fn len(&self) -> usize {
        self.text.len()
    }

    pub fn is_empty(&self) -> bool {
        self.text.is_empty()
    }
}

/// The pod's tolerations as a set: sorted by their `Debug` text, duplicates once.
pub fn tolerations(pod: &PodInfo) -> Vec<String> {
    let set: BTreeSet<String> = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.tolerations.as_ref())
        .into_iter()
        .flatten()
        .map(|t| format!("{t:?}"))
        .collect();
    set.into_iter().collect()
}

/// The pod's volumes that the volume plugins read, as upstream's signer takes them: all but
/// ConfigMaps and Secrets, by their source alone (the volume's name in the pod changes nothing
/// on a node), sorted. A claim is the pod's namespace's, so with one the namespace is part of
/// it; an ephemeral volume's claim is named after the pod and the volume, so with one the
/// pod's name is too (such pods never share a signature). Upstream signs the sources alone.
pub fn volumes(pod: &PodInfo) -> Vec<String> {
    let all = pod
        .pod
        .spec
        .as_ref()
        .and_then(|s| s.volumes.as_ref())
        .into_iter()
        .flatten();
    let mut sources: Vec<String> = all
        .clone()
        .filter(|v| v.config_map.is_none() && v.secret.is_none())
        .map(|v| {
            let mut source = v.clone();
            source.name.clear();
            format!("{source:?}")
        })
        .collect();
    sources.sort_unstable();
    if all
        .clone()
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
    {
        sources.push(format!("namespace={:?}", pod.pod.metadata.namespace));
    }
    if all.clone().any(|v| v.ephemeral.is_some()) {
        sources.push(format!("pod={:?}", pod.pod.metadata.name));
    }
    sources
}

/// The pod's host ports as a set, sorted (protocol and address included: NodePorts reads
/// them all).
pub fn host_ports(pod: &PodInfo) -> Vec<String> {
    let set: BTreeSet<String> = pod.host_ports.iter().map(|p| format!("{p:?}")).collect();
    set.into_iter().collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::pod::Shared;
    use crate::scheduler::testing::PodBuilder;
    use k8s_openapi::api::core::v1::{Toleration, Volume};
    use std::sync::Arc;

    fn info(pod: crate::k8s::pod::Pod) -> PodInfo {
        PodInfo::new(Arc::new(pod))
    }

    #[test]
    fn a_part_written_twice_counts_once_and_different_values_differ() {
        let mut a = Signature::new("s");
        a.part(RESOURCES, &1);
        a.part(RESOURCES, &1);
        let mut b = Signature::new("s");
        b.part(RESOURCES, &1);
        assert_eq!(a, b);
        let mut c = Signature::new("s");
        c.part(RESOURCES, &2);
        assert_ne!(a, c);
        // A value cannot pass for another part: strings are quoted.
        let mut d = Signature::new("s");
        d.part(LABELS, &"1;v1.Pod.Spec.NodeName=\"\"");
        let mut e = Signature::new("s");
        e.part(LABELS, &"1");
        e.part(NODE_NAME, &"");
        assert_ne!(d, e);
    }

    #[test]
    fn tolerations_are_a_set_and_synthetic_volumes_do_not_count() {
        let tol = |key: &str| Toleration {
            key: Some(key.into()),
            operator: Some("Exists".into()),
            ..Default::default()
        };
        let a = info(
            PodBuilder::new("a")
                .with(|p| {
                    let spec = p.spec.get_or_insert_with(Default::default);
                    spec.tolerations = Some(Shared::new(vec![tol("x"), tol("y")]));
                    spec.volumes = Some(vec![Volume {
                        name: "cfg".into(),
                        config_map: Some(Default::default()),
                        ..Default::default()
                    }]);
                })
                .build(),
        );
        let b = info(
            PodBuilder::new("b")
                .with(|p| {
                    p.spec.get_or_insert_with(Default::default).tolerations =
                        Some(Shared::new(vec![tol("y"), tol("x")]));
                })
                .build(),
        );
        assert_eq!(tolerations(&a), tolerations(&b));
        assert!(volumes(&a).is_empty());
        let claim = info(
            PodBuilder::new("c")
                .with(|p| {
                    p.spec.get_or_insert_with(Default::default).volumes = Some(vec![Volume {
                        name: "data".into(),
                        persistent_volume_claim: Some(Default::default()),
                        ..Default::default()
                    }]);
                })
                .build(),
        );
        let signed = volumes(&claim);
        assert_eq!(
            signed.len(),
            2,
            "the claim's source and its namespace: {signed:?}"
        );
        assert!(signed[1].starts_with("namespace="));
    }
}
