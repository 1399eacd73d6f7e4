//! Validation errors that name the field, as `pluginConfig[2].args.scoringStrategy.type`.

use std::fmt;

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
    path: &str,
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
