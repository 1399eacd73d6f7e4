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

/// How many errors a message names; a profile with hundreds of wrong entries gets a condition
/// of readable size, the first ones and how many more.
const MAX_ERRORS_SHOWN: usize = 10;

impl fmt::Display for FieldErrors {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parts: Vec<_> = self
            .0
            .iter()
            .take(MAX_ERRORS_SHOWN)
            .map(|e| format!("{}: {}", e.path, e.message))
            .collect();
        f.write_str(&parts.join("; "))?;
        if self.0.len() > MAX_ERRORS_SHOWN {
            write!(f, "; and {} more", self.0.len() - MAX_ERRORS_SHOWN)?;
        }
        Ok(())
    }
}

/// How deep a plugin's args may nest. No plugin's args go deeper than 4; the API server
/// accepts 10,000, which must never reach a plugin.
pub const MAX_ARGS_DEPTH: usize = 16;

/// How deep `value` nests (a scalar is 0, `{}` or `[]` is 1), counted without recursion and
/// stopping at `limit + 1`.
pub fn depth(value: &serde_json::Value, limit: usize) -> usize {
    let mut deepest = 0;
    let mut stack = vec![(value, 0usize)];
    while let Some((v, d)) = stack.pop() {
        let children: Box<dyn Iterator<Item = &serde_json::Value>> = match v {
            serde_json::Value::Object(m) => Box::new(m.values()),
            serde_json::Value::Array(a) => Box::new(a.iter()),
            _ => continue,
        };
        deepest = deepest.max(d + 1);
        if deepest > limit {
            return deepest;
        }
        stack.extend(children.map(|c| (c, d + 1)));
    }
    deepest
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
