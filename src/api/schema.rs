//! Small schema helpers for fields that schemars cannot describe on its own.

use schemars::{Schema, SchemaGenerator, json_schema};

/// A free-form object kept as the user wrote it (`x-kubernetes-preserve-unknown-fields`).
/// Plugin args are decoded and validated by tether when a profile compiles, not by the API server.
pub fn preserve_unknown_object(_: &mut SchemaGenerator) -> Schema {
    json_schema!({
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true,
    })
}

/// Conditions as a list map keyed by `type`, as Kubernetes' own status conditions are.
pub fn conditions(generator: &mut SchemaGenerator) -> Schema {
    let mut schema =
        generator.subschema_for::<Vec<k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition>>();
    schema.insert("x-kubernetes-list-type".into(), "map".into());
    schema.insert(
        "x-kubernetes-list-map-keys".into(),
        serde_json::json!(["type"]),
    );
    schema
}
