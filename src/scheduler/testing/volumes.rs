//! Builders of storage objects for the volume plugins' tests:
//! `volume("pv1", "10Gi").on_node("n1").class("local").build()`, `claim("data", "local")`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, PersistentVolumeClaimSpec, PersistentVolumeClaimStatus,
    PersistentVolumeSpec, PersistentVolumeStatus, VolumeNodeAffinity, VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::StorageClass;
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::k8s::volumes::ANN_BIND_COMPLETED;

/// An `Available` volume of this size, ReadWriteOnce, of no class, at resourceVersion 1.
pub fn volume(name: &str, size: &str) -> VolumeBuilder {
    VolumeBuilder(PersistentVolume {
        metadata: ObjectMeta {
            name: Some(name.into()),
            resource_version: Some("1".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeSpec {
            capacity: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            ..Default::default()
        }),
        status: Some(PersistentVolumeStatus {
            phase: Some("Available".into()),
            ..Default::default()
        }),
    })
}

pub struct VolumeBuilder(PersistentVolume);

impl VolumeBuilder {
    fn spec(&mut self) -> &mut PersistentVolumeSpec {
        self.0.spec.get_or_insert_default()
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .labels
            .get_or_insert_default()
            .insert(k.into(), v.into());
        self
    }

    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.into());
        self
    }

    /// Reachable only from the node whose hostname label is `node` (a local volume).
    pub fn on_node(mut self, node: &str) -> Self {
        self.spec().node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: "kubernetes.io/hostname".into(),
                        operator: "In".into(),
                        values: Some(vec![node.into()]),
                    }]),
                    ..Default::default()
                }],
            }),
        });
        self
    }

    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }

    /// Bound (or reserved) for the claim `name` in `default`.
    pub fn claimed_by(mut self, name: &str) -> Self {
        self.spec().claim_ref = Some(ObjectReference {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            ..Default::default()
        });
        self.0.status.get_or_insert_default().phase = Some("Bound".into());
        self
    }

    pub fn build(self) -> PersistentVolume {
        self.0
    }
}

/// A pending claim in `default` asking for 5Gi ReadWriteOnce of `class` ("" for none).
pub fn claim(name: &str, class: &str) -> ClaimBuilder {
    ClaimBuilder(PersistentVolumeClaim {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("default".into()),
            uid: Some(format!("uid-{name}")),
            resource_version: Some("1".into()),
            ..Default::default()
        },
        spec: Some(PersistentVolumeClaimSpec {
            storage_class_name: (!class.is_empty()).then(|| class.into()),
            access_modes: Some(vec!["ReadWriteOnce".into()]),
            resources: Some(VolumeResourceRequirements {
                requests: Some(BTreeMap::from([("storage".into(), Quantity("5Gi".into()))])),
                ..Default::default()
            }),
            ..Default::default()
        }),
        status: Some(PersistentVolumeClaimStatus {
            phase: Some("Pending".into()),
            ..Default::default()
        }),
    })
}

pub struct ClaimBuilder(PersistentVolumeClaim);

impl ClaimBuilder {
    fn spec(&mut self) -> &mut PersistentVolumeClaimSpec {
        self.0.spec.get_or_insert_default()
    }

    pub fn request(mut self, size: &str) -> Self {
        self.spec().resources = Some(VolumeResourceRequirements {
            requests: Some(BTreeMap::from([("storage".into(), Quantity(size.into()))])),
            ..Default::default()
        });
        self
    }

    pub fn access_modes(mut self, modes: &[&str]) -> Self {
        self.spec().access_modes = Some(modes.iter().map(|m| m.to_string()).collect());
        self
    }

    /// Bound by the PV controller to the volume `pv`.
    pub fn bound_to(mut self, pv: &str) -> Self {
        self.spec().volume_name = Some(pv.into());
        self.0
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(ANN_BIND_COMPLETED.into(), "yes".into());
        self.0.status.get_or_insert_default().phase = Some("Bound".into());
        self
    }

    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.0
            .metadata
            .annotations
            .get_or_insert_default()
            .insert(k.into(), v.into());
        self
    }

    pub fn build(self) -> PersistentVolumeClaim {
        self.0
    }
}

/// A class with this binding mode and no provisioner (local volumes).
pub fn class(name: &str, mode: &str) -> StorageClass {
    StorageClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        provisioner: crate::k8s::volumes::NO_PROVISIONER.into(),
        volume_binding_mode: Some(mode.into()),
        ..Default::default()
    }
}
