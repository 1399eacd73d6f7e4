//! Writes that change only what the writer changed. tether holds objects trimmed (no
//! `managedFields`, no last-applied annotation) and typed by the API version it was built
//! against, so an update that sends its copy back would remove from the user's object what the
//! copy lacks: `kubectl.kubernetes.io/last-applied-configuration` (the next `kubectl apply` or
//! Argo CD client-side apply loses its three-way diff) and any field of a newer API. Instead the
//! writer sends a JSON merge patch of the fields that differ between the copy it read and the
//! copy it changed ([`merge_patch`]), with the version it read as a precondition: the API server
//! refuses it with a conflict when the object moved on, exactly as it would refuse the update.

use kube::api::{Api, Patch, PatchParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Map, Value};

/// The JSON merge patch (RFC 7386) that turns `before` into `after`: the members of objects
/// that differ, recursively; a member `after` lacks as null; any other value that differs
/// (an array, a string) whole. None when they are equal.
pub fn merge_patch(before: &Value, after: &Value) -> Option<Value> {
    match (before, after) {
        (Value::Object(before), Value::Object(after)) => {
            let mut patch = Map::new();
            for (key, was) in before {
                match after.get(key) {
                    None => {
                        patch.insert(key.clone(), Value::Null);
                    }
                    Some(now) => {
                        if let Some(change) = merge_patch(was, now) {
                            patch.insert(key.clone(), change);
                        }
                    }
                }
            }
            for (key, now) in after {
                if !before.contains_key(key) && !now.is_null() {
                    patch.insert(key.clone(), now.clone());
                }
            }
            (!patch.is_empty()).then_some(Value::Object(patch))
        }
        // A null in a merge patch removes; an object that replaces a scalar or an array is
        // written whole, its nulls dropped (they would mean nothing there).
        (before, after) if before == after => None,
        (_, Value::Object(after)) => Some(without_nulls(after)),
        (_, after) => Some(after.clone()),
    }
}

fn without_nulls(object: &Map<String, Value>) -> Value {
    Value::Object(
        object
            .iter()
            .filter(|(_, v)| !v.is_null())
            .map(|(k, v)| match v {
                Value::Object(inner) => (k.clone(), without_nulls(inner)),
                v => (k.clone(), v.clone()),
            })
            .collect(),
    )
}

/// Which part of the object a write goes to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Part {
    /// The object itself (metadata and spec).
    Main,
    /// The `status` subresource.
    Status,
}

/// Writes what differs between `before` (the copy read) and `after` (that copy changed, still
/// at the `resourceVersion` read) to the object `name`, as a merge patch conditional on that
/// version; returns the object as the API server has it then. With nothing changed the patch
/// holds only the precondition (the API server checks it and writes nothing).
pub async fn write_changes<K>(
    api: &Api<K>,
    name: &str,
    before: &K,
    after: &K,
    part: Part,
) -> kube::Result<K>
where
    K: kube::Resource + Serialize + DeserializeOwned + Clone + std::fmt::Debug,
{
    let patch = conditional_patch(before, after).map_err(kube::Error::SerdeError)?;
    let params = PatchParams::default();
    match part {
        Part::Main => api.patch(name, &params, &Patch::Merge(&patch)).await,
        Part::Status => api.patch_status(name, &params, &Patch::Merge(&patch)).await,
    }
}

/// The merge patch from `before` to `after`, with the `resourceVersion` (and UID) `after` was
/// read at as its precondition (a changed copy keeps the version of the copy it was made from).
pub fn conditional_patch<K>(before: &K, after: &K) -> serde_json::Result<Value>
where
    K: kube::Resource + Serialize,
{
    let was = serde_json::to_value(before)?;
    let now = serde_json::to_value(after)?;
    let mut patch = merge_patch(&was, &now).unwrap_or_else(|| Value::Object(Map::new()));
    let meta = after.meta();
    let Value::Object(fields) = &mut patch else {
        // Two objects' difference is an object.
        return Ok(patch);
    };
    let metadata = fields
        .entry("metadata")
        .or_insert_with(|| Value::Object(Map::new()));
    if let Value::Object(metadata) = metadata {
        if let Some(version) = &meta.resource_version {
            metadata.insert("resourceVersion".into(), Value::String(version.clone()));
        }
        if let Some(uid) = &meta.uid {
            metadata.insert("uid".into(), Value::String(uid.clone()));
        }
    }
    Ok(patch)
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::PersistentVolume;
    use serde_json::json;

    #[test]
    fn a_merge_patch_holds_only_what_changed() {
        let before = json!({"metadata": {"name": "a", "labels": {"x": "1", "y": "2"}},
            "spec": {"list": [1, 2], "keep": "k", "gone": "g"}});
        let after = json!({"metadata": {"name": "a", "labels": {"x": "1", "z": "3"}},
            "spec": {"list": [1, 2, 3], "keep": "k", "new": {"a": null, "b": 1}}});
        assert_eq!(
            merge_patch(&before, &after),
            Some(json!({"metadata": {"labels": {"y": null, "z": "3"}},
                "spec": {"list": [1, 2, 3], "gone": null, "new": {"a": null, "b": 1}}}))
        );
        assert_eq!(merge_patch(&before, &before), None);
    }

    /// The patch a bind sends for a volume names the claim, conditional on the version read,
    /// and nothing of what the copy lacks (the last-applied annotation it was trimmed of).
    #[test]
    fn a_volume_write_names_only_the_claim_and_the_version_it_read() {
        let before: PersistentVolume = serde_json::from_value(json!({
            "metadata": {"name": "pv", "uid": "u", "resourceVersion": "7",
                "annotations": {"team": "a"}},
            "spec": {"capacity": {"storage": "1Gi"}},
        }))
        .expect("a volume");
        let mut after = before.clone();
        after.spec.get_or_insert_default().claim_ref = Some(Default::default());
        after
            .spec
            .get_or_insert_default()
            .claim_ref
            .get_or_insert_default()
            .name = Some("data".into());
        let patch = conditional_patch(&before, &after).expect("a patch");
        assert_eq!(
            patch,
            json!({"metadata": {"resourceVersion": "7", "uid": "u"},
                "spec": {"claimRef": {"name": "data"}}})
        );
    }
}
