//! Validation errors that name the field, as `pluginConfig[2].args.scoringStrategy.type`, with
//! a typed path to build them and the checks plugin args share.

use std::fmt;

use crate::k8s::names::check_qualified_name;

/// Where a field sits in a SchedulingProfile spec, as users read it:
/// `pluginConfig[2].args.scoringStrategy.resources[0].weight`.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct FieldPath(String);

impl FieldPath {
    /// A path starting at `root` (`pluginConfig[0].args`, `plugins.queueSort`).
    pub fn new(root: impl Into<String>) -> Self {
        FieldPath(root.into())
    }

    /// The field `name` under this one.
    pub fn child(&self, name: &str) -> Self {
        FieldPath(format!("{}.{name}", self.0))
    }

    /// The element `i` of this list.
    pub fn index(&self, i: usize) -> Self {
        FieldPath(format!("{}[{i}]", self.0))
    }

    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl From<&str> for FieldPath {
    fn from(root: &str) -> Self {
        FieldPath::new(root)
    }
}

impl From<&FieldPath> for String {
    fn from(path: &FieldPath) -> Self {
        path.0.clone()
    }
}

impl From<FieldPath> for String {
    fn from(path: FieldPath) -> Self {
        path.0
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// One invalid field: its path in the SchedulingProfile spec and what is wrong with it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FieldError {
    pub path: String,
    pub message: String,
}

/// Every invalid field found; empty means valid.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FieldErrors(pub Vec<FieldError>);

impl FieldErrors {
    pub fn new() -> Self {
        FieldErrors(Vec::new())
    }

    /// Records that the field at `path` is invalid.
    pub fn push(&mut self, path: impl Into<String>, message: impl Into<String>) {
        self.0.push(FieldError {
            path: path.into(),
            message: message.into(),
        });
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Records an error at `path` unless `value` is a qualified name (a label key), as
    /// apimachinery validates label keys, topology keys and resource names.
    pub fn check_qualified_name(&mut self, path: &FieldPath, value: &str) {
        if let Err(e) = check_qualified_name(value) {
            self.push(path, format!("{value:?}: {e}"));
        }
    }

    /// `Ok(())` when nothing was recorded.
    pub fn into_result(self) -> Result<(), FieldErrors> {
        if self.0.is_empty() { Ok(()) } else { Err(self) }
    }
}

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<_> = self
            .0
            .iter()
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect();
        f.write_str(&parts.join("; "))
    }
}

impl std::error::Error for FieldErrors {}

/// Decodes a plugin's args (absent means defaults) into its typed struct, refusing unknown
/// fields; a decoding error names `path` (for example `pluginConfig[0].args`).
pub fn decode_args<T: serde::de::DeserializeOwned + Default>(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
) -> Result<T, FieldErrors> {
    match args {
        None | Some(serde_json::Value::Null) => Ok(T::default()),
        Some(v) => serde_json::from_value(v.clone()).map_err(|e| {
            let mut errs = FieldErrors::new();
            errs.push(path, e.to_string());
            errs
        }),
    }
}
