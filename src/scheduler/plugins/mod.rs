//! kube-scheduler's default plugins and tether's own, one file per plugin, named after it.

pub mod node_resources_balanced_allocation;
pub mod node_resources_fit;
pub mod default_binder;
pub mod pod_topology_spread;

use crate::scheduler::framework::FieldErrors;

/// For plugins without args: only absent, null or `{}` args are accepted.
pub fn no_args(
    plugin: &str,
    args: Option<&serde_json::Value>,
    path: &str,
) -> Result<(), FieldErrors> {
    match args {
        None | Some(serde_json::Value::Null) => Ok(()),
        Some(serde_json::Value::Object(m)) if m.is_empty() => Ok(()),
        Some(_) => {
            let mut errs = FieldErrors::new();
            errs.push(path, format!("plugin {plugin} takes no args"));
            Err(errs)
        }
    }
}
