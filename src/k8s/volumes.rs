//! What the volume plugins read of pods, PersistentVolumeClaims, PersistentVolumes and
//! StorageClasses, as kube-scheduler's storage helpers read it: a claim's class and request, a
//! volume's capacity and node affinity, whether a claim is fully bound.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelectorTerm, PersistentVolume, PersistentVolumeClaim, TopologySelectorTerm,
};
use k8s_openapi::api::storage::v1::{CSIStorageCapacity, StorageClass};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::k8s::node_selector::Term;
use crate::k8s::pod::Pod;
use crate::k8s::quantity;

/// Set on a claim once the PV controller has bound it.
pub const ANN_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Set on a volume whose claimRef a controller (or the scheduler) wrote, not a person.
pub const ANN_BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// The node the scheduler chose for a claim to be provisioned for.
pub const ANN_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The beta annotation naming a claim's or volume's class; it wins over `storageClassName`.
pub const ANN_BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// The provisioner of classes whose volumes are created by hand (local volumes).
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";
/// Binding mode that waits for the first pod before a claim is bound or provisioned.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";
/// The access mode that allows one pod only.
pub const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// A claim a pod uses: a `persistentVolumeClaim` volume, or the claim a generic `ephemeral`
/// volume gets (named `<pod>-<volume>`, created by the ephemeral volume controller).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PodClaim {
    pub name: String,
    pub ephemeral: bool,
}

/// The claims of the pod's volumes, in the order of its volumes.
pub fn pod_claims(pod: &Pod) -> Vec<PodClaim> {
    let pod_name = pod.metadata.name.as_deref().unwrap_or_default();
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| {
            if let Some(c) = &v.persistent_volume_claim {
                Some(PodClaim {
                    name: c.claim_name.clone(),
                    ephemeral: false,
                })
            } else {
                v.ephemeral.as_ref().map(|_| PodClaim {
                    name: format!("{pod_name}-{}", v.name),
                    ephemeral: true,
                })
            }
        })
        .collect()
}

/// The claims of the pod's `persistentVolumeClaim` volumes (generic ephemeral volumes' claims
/// left out, as VolumeZone and VolumeRestrictions read them).
pub fn pvc_claim_names(pod: &Pod) -> impl Iterator<Item = &str> {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| v.persistent_volume_claim.as_ref())
        .map(|c| c.claim_name.as_str())
}

/// Whether the pod has any volume backed by a claim.
pub fn has_claims(pod: &Pod) -> bool {
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .any(|v| v.persistent_volume_claim.is_some() || v.ephemeral.is_some())
}

/// `ns/name`, the key claims are stored and counted by.
pub fn claim_key(namespace: &str, name: &str) -> String {
    format!("{namespace}/{name}")
}

/// Whether an ephemeral volume's claim was made for this pod: its controller is the pod.
pub fn owned_by_pod(pvc: &PersistentVolumeClaim, pod: &Pod) -> bool {
    pvc.metadata.namespace == pod.metadata.namespace
        && pvc
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .is_some_and(|o| Some(&o.uid) == pod.metadata.uid.as_ref())
}

/// The message for an ephemeral volume's claim that belongs to another owner.
pub fn not_owner_message(pvc: &PersistentVolumeClaim, pod: &Pod) -> String {
    format!(
        "PVC {}/{} was not created for pod {}/{} (pod is not owner)",
        pvc.metadata.namespace.as_deref().unwrap_or_default(),
        pvc.metadata.name.as_deref().unwrap_or_default(),
        pod.metadata.namespace.as_deref().unwrap_or_default(),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

fn annotation<'a>(meta: &'a kube::api::ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// A claim's class: the beta annotation when present (even empty), else `storageClassName`.
pub fn claim_class(pvc: &PersistentVolumeClaim) -> &str {
    annotation(&pvc.metadata, ANN_BETA_CLASS)
        .or_else(|| pvc.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// A volume's class, read as a claim's is.
pub fn pv_class(pv: &PersistentVolume) -> &str {
    annotation(&pv.metadata, ANN_BETA_CLASS)
        .or_else(|| pv.spec.as_ref()?.storage_class_name.as_deref())
        .unwrap_or_default()
}

/// The `storage` a claim requests, as written.
fn requested_storage(pvc: &PersistentVolumeClaim) -> Option<&Quantity> {
    pvc.spec
        .as_ref()
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
}

/// The storage a claim requests, in bytes (0 when it names none).
pub fn claim_request(pvc: &PersistentVolumeClaim) -> i64 {
    requested_storage(pvc)
        .and_then(|q| quantity::parse_value(&q.0).ok())
        .unwrap_or(0)
}

/// Whether the claim names a storage request at all.
pub fn claim_has_request(pvc: &PersistentVolumeClaim) -> bool {
    requested_storage(pvc).is_some()
}

/// The largest volume a CSIStorageCapacity says can be made, as written: its
/// `maximumVolumeSize`, else its `capacity`.
pub fn capacity_limit_as_written(c: &CSIStorageCapacity) -> Option<&Quantity> {
    c.maximum_volume_size.as_ref().or(c.capacity.as_ref())
}

/// [`capacity_limit_as_written`] in bytes, rounded up.
pub fn capacity_limit(c: &CSIStorageCapacity) -> Option<i64> {
    capacity_limit_as_written(c).and_then(|q| quantity::parse_value(&q.0).ok())
}

/// Whether a CSIStorageCapacity has room for the claim's request (its `maximumVolumeSize`, else
/// its `capacity`, at least the request). `exact`: compared as written (kube-scheduler 1.38 on);
/// else both rounded up to whole bytes first, as 1.36 and 1.37 compare them (a request of 1.8
/// fits a limit of 1.5 there: both are 2).
pub fn capacity_holds(c: &CSIStorageCapacity, pvc: &PersistentVolumeClaim, exact: bool) -> bool {
    let Some(limit) = capacity_limit_as_written(c) else {
        return false;
    };
    if !exact {
        return quantity::parse_value(&limit.0).is_ok_and(|l| l >= claim_request(pvc));
    }
    let zero = Quantity("0".into());
    let request = requested_storage(pvc).unwrap_or(&zero);
    quantity::compare(&limit.0, &request.0).is_ok_and(|o| o.is_ge())
}

/// A volume's capacity in bytes (0 when it names none).
pub fn pv_capacity(pv: &PersistentVolume) -> i64 {
    pv.spec
        .as_ref()
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| quantity::parse_value(&q.0).ok())
        .unwrap_or(0)
}

/// Whether the PV controller has finished binding the claim: it names its volume and carries
/// the bind-completed annotation.
pub fn fully_bound(pvc: &PersistentVolumeClaim) -> bool {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && annotation(&pvc.metadata, ANN_BIND_COMPLETED).is_some()
}

/// The volume a claim names, if any.
pub fn claim_volume_name(pvc: &PersistentVolumeClaim) -> &str {
    pvc.spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .unwrap_or_default()
}

/// The node chosen for the claim to be provisioned for.
pub fn selected_node(pvc: &PersistentVolumeClaim) -> Option<&str> {
    annotation(&pvc.metadata, ANN_SELECTED_NODE)
}

/// Whether the volume's claimRef points at this claim (a uid left empty matches any).
pub fn bound_to_claim(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let Some(r) = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref()) else {
        return false;
    };
    r.name == pvc.metadata.name
        && r.namespace == pvc.metadata.namespace
        && r.uid
            .as_deref()
            .is_none_or(|u| u.is_empty() || Some(u) == pvc.metadata.uid.as_deref())
}

/// Whether a volume lets a node with these labels reach it: no required node affinity, or
/// one of its terms matches the labels (a term that does not parse matches nothing; a field
/// requirement on the node name never matches, as upstream checks labels only).
pub fn pv_reaches(pv: &PersistentVolume, labels: &BTreeMap<String, String>) -> bool {
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return true;
    };
    required
        .node_selector_terms
        .iter()
        .any(|t| term_matches(t, labels))
}

fn term_matches(term: &NodeSelectorTerm, labels: &BTreeMap<String, String>) -> bool {
    Term::parse(term).is_ok_and(|t| t.matches("", labels))
}

/// Whether a class lets its volumes be provisioned for a node with these labels: no
/// `allowedTopologies`, or one of its terms (all of whose `key In values` hold) matches.
pub fn class_reaches(class: &StorageClass, labels: &BTreeMap<String, String>) -> bool {
    let Some(terms) = class.allowed_topologies.as_ref().filter(|t| !t.is_empty()) else {
        return true;
    };
    terms.iter().any(|t| topology_term_matches(t, labels))
}

fn topology_term_matches(term: &TopologySelectorTerm, labels: &BTreeMap<String, String>) -> bool {
    let Some(exprs) = term
        .match_label_expressions
        .as_ref()
        .filter(|e| !e.is_empty())
    else {
        return false;
    };
    exprs
        .iter()
        .all(|e| labels.get(&e.key).is_some_and(|v| e.values.contains(v)))
}

/// `Filesystem` unless the spec says `Block`.
fn mode_or_default(mode: Option<&String>) -> &str {
    mode.map(String::as_str).unwrap_or("Filesystem")
}

/// Whether claim and volume agree on the volume mode (absent means Filesystem on both sides).
pub fn same_volume_mode(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    mode_or_default(pv.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
        == mode_or_default(pvc.spec.as_ref().and_then(|s| s.volume_mode.as_ref()))
}

/// Whether claim and volume name the same VolumeAttributesClass (absent means none).
pub fn same_attributes_class(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    pv.spec
        .as_ref()
        .and_then(|s| s.volume_attributes_class_name.as_deref())
        .unwrap_or_default()
        == pvc
            .spec
            .as_ref()
            .and_then(|s| s.volume_attributes_class_name.as_deref())
            .unwrap_or_default()
}

/// The claim's access modes.
pub fn claim_access_modes(pvc: &PersistentVolumeClaim) -> &[String] {
    pvc.spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default()
}

/// Whether the volume offers every access mode the claim asks for.
pub fn offers_access_modes(pv: &PersistentVolume, pvc: &PersistentVolumeClaim) -> bool {
    let offered = pv
        .spec
        .as_ref()
        .and_then(|s| s.access_modes.as_deref())
        .unwrap_or_default();
    claim_access_modes(pvc).iter().all(|m| offered.contains(m))
}

/// The volume's phase (`Available`, `Bound`, `Released`…), empty when not reported.
pub fn pv_phase(pv: &PersistentVolume) -> &str {
    pv.status
        .as_ref()
        .and_then(|s| s.phase.as_deref())
        .unwrap_or_default()
}

/// The resourceVersion as a number, for "which is newer" (empty or unparsable is 0).
pub fn version_of(meta: &kube::api::ObjectMeta) -> u64 {
    meta.resource_version
        .as_deref()
        .and_then(|v| v.parse().ok())
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{
        NodeSelector, NodeSelectorRequirement, ObjectReference, PersistentVolumeSpec,
        VolumeNodeAffinity,
    };
    use kube::api::ObjectMeta;

    use super::*;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn pv_on(key: &str, values: &[&str]) -> PersistentVolume {
        PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                node_affinity: Some(VolumeNodeAffinity {
                    required: Some(NodeSelector {
                        node_selector_terms: vec![NodeSelectorTerm {
                            match_expressions: Some(vec![NodeSelectorRequirement {
                                key: key.into(),
                                operator: "In".into(),
                                values: Some(values.iter().map(|v| v.to_string()).collect()),
                            }]),
                            ..Default::default()
                        }],
                    }),
                }),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_capacitys_room_is_compared_rounded_before_1_38_and_as_written_after() {
        let capacity = |limit: &str| CSIStorageCapacity {
            maximum_volume_size: Some(Quantity(limit.into())),
            ..Default::default()
        };
        let claim = |request: &str| {
            let mut pvc = PersistentVolumeClaim::default();
            pvc.spec
                .get_or_insert_default()
                .resources
                .get_or_insert_default()
                .requests
                .get_or_insert_default()
                .insert("storage".into(), Quantity(request.into()));
            pvc
        };
        // 1.8 and 1.5 are both 2 whole bytes.
        assert!(capacity_holds(&capacity("1.5"), &claim("1.8"), false));
        assert!(!capacity_holds(&capacity("1.5"), &claim("1.8"), true));
        assert!(capacity_holds(&capacity("1Gi"), &claim("1Gi"), true));
        assert!(!capacity_holds(&capacity("1Gi"), &claim("2Gi"), false));
        assert!(capacity_holds(
            &capacity("1Gi"),
            &PersistentVolumeClaim::default(),
            true
        ));
        assert!(!capacity_holds(
            &CSIStorageCapacity::default(),
            &claim("1"),
            true
        ));
    }

    #[test]
    fn a_volume_reaches_the_nodes_its_affinity_names() {
        let pv = pv_on("kubernetes.io/hostname", &["n1"]);
        assert!(pv_reaches(
            &pv,
            &labels(&[("kubernetes.io/hostname", "n1")])
        ));
        assert!(!pv_reaches(
            &pv,
            &labels(&[("kubernetes.io/hostname", "n2")])
        ));
        assert!(pv_reaches(&PersistentVolume::default(), &labels(&[])));
    }

    #[test]
    fn a_volume_pinned_by_node_name_field_reaches_no_node() {
        let mut pv = pv_on("x", &["y"]);
        let term = &mut pv.spec.as_mut().unwrap().node_affinity.as_mut().unwrap();
        let terms = &mut term.required.as_mut().unwrap().node_selector_terms;
        terms[0] = NodeSelectorTerm {
            match_fields: Some(vec![NodeSelectorRequirement {
                key: "metadata.name".into(),
                operator: "In".into(),
                values: Some(vec!["n1".into()]),
            }]),
            ..Default::default()
        };
        assert!(!pv_reaches(
            &pv,
            &labels(&[("kubernetes.io/hostname", "n1")])
        ));
    }

    #[test]
    fn a_claim_ref_without_uid_binds_to_the_claim_by_name() {
        let pvc = PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data".into()),
                namespace: Some("ns".into()),
                uid: Some("u1".into()),
                ..Default::default()
            },
            ..Default::default()
        };
        let mut pv = PersistentVolume {
            spec: Some(PersistentVolumeSpec {
                claim_ref: Some(ObjectReference {
                    name: Some("data".into()),
                    namespace: Some("ns".into()),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        };
        assert!(bound_to_claim(&pv, &pvc));
        pv.spec.as_mut().unwrap().claim_ref.as_mut().unwrap().uid = Some("u2".into());
        assert!(!bound_to_claim(&pv, &pvc));
    }
}
