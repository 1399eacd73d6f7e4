//! The custom resources of group `tether.dev`, version `v1alpha1`: tether's public contract.
//!
//! Doc comments on these types become the text of `kubectl explain`; they are written for users.

pub mod conditions;
pub mod explain_request;
pub mod reference;
pub mod scheduling_profile;
mod schema;
pub mod sticky_binding;

pub use explain_request::{
    ExplainRequest, ExplainRequestSpec, ExplainRequestStatus, Refusal, Requester,
};
pub use scheduling_profile::{
    EffectivePlugins, Plugin, PluginConfig, PluginSet, Plugins, SchedulingProfile,
    SchedulingProfileSpec, SchedulingProfileStatus, WeightedPlugin,
};
pub use sticky_binding::{
    BindRecord, MAX_COUNTED_PODS, MAX_NODE_COUNTS, Release, StickyBinding, StickyBindingSpec,
    StickyBindingStatus, WorkloadRef, api_group, binding_name,
};

use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::CustomResourceExt;

/// The API group of every tether resource.
pub const GROUP: &str = "tether.dev";

/// Every CRD tether serves, in the order `tether crd` prints them.
pub fn crds() -> Vec<CustomResourceDefinition> {
    vec![
        SchedulingProfile::crd(),
        StickyBinding::crd(),
        ExplainRequest::crd(),
    ]
}

/// The CRDs as one multi-document YAML stream, as `tether crd` prints it and `crds/` stores it.
pub fn crds_yaml() -> Result<String, serde_saphyr::SerializeError> {
    let mut out = String::new();
    for crd in crds() {
        out.push_str("---\n");
        out.push_str(&serde_saphyr::to_string(&crd)?);
    }
    Ok(out)
}

/// The API reference (docs/reference.md) of the CRDs, as `tether crd --reference` prints it.
pub fn reference_markdown() -> String {
    reference::markdown(&crds())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// `crds/` and the copy in `deploy/crds/` (inside the kustomization's root, so that
    /// `kubectl apply -k deploy/` takes it) are generated from these types; a change to them
    /// must regenerate both (`make crds`).
    #[test]
    fn crds_directory_is_up_to_date() {
        let want = crds_yaml().expect("CRDs serialize");
        for (path, have) in [
            (
                "crds/tether.dev.yaml",
                include_str!("../../crds/tether.dev.yaml"),
            ),
            (
                "deploy/crds/tether.dev.yaml",
                include_str!("../../deploy/crds/tether.dev.yaml"),
            ),
            (
                "charts/tether/crds/tether.dev.yaml",
                include_str!("../../charts/tether/crds/tether.dev.yaml"),
            ),
        ] {
            assert!(
                want == have,
                "{path} is stale: run `make crds` and commit the result"
            );
        }
    }

    /// docs/reference.md is generated from the same types: a change to them must regenerate it
    /// (`make crds`).
    #[test]
    fn the_api_reference_is_up_to_date() {
        assert!(
            reference_markdown() == include_str!("../../docs/reference.md"),
            "docs/reference.md is stale: run `make crds` and commit the result"
        );
    }

    #[test]
    fn crds_are_structural_and_named() {
        let names: Vec<_> = crds()
            .iter()
            .map(|c| c.metadata.name.clone().unwrap_or_default())
            .collect();
        assert_eq!(
            names,
            [
                "schedulingprofiles.tether.dev",
                "stickybindings.tether.dev",
                "explainrequests.tether.dev"
            ]
        );
        for crd in crds() {
            let version = &crd.spec.versions[0];
            assert!(
                version
                    .subresources
                    .as_ref()
                    .and_then(|s| s.status.as_ref())
                    .is_some()
            );
            assert_eq!(
                crd.spec.names.categories.as_deref(),
                Some(&["tether".to_string()][..])
            );
        }
    }
}
