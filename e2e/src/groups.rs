//! What the gang, topology and hierarchy tests share: victims pinned to a node and held by a
//! finalizer until the test lets them go, and the PriorityClasses of a scenario.

use serde_json::json;

use crate::{TestNodes, apply};

/// The finalizer that keeps a victim terminating until the test lets it go (so what the
/// preemption wrote can be read before its preemptor moves on).
pub const HOLD: &str = "e2e.tether.dev/hold";

/// A pod bound to `node` (no scheduler), asking for `cpu`, of PriorityClass `class`, naming
/// `group` when given, held by [`HOLD`].
pub fn pinned(
    ns: &str,
    nodes: &TestNodes,
    name: &str,
    (group, class, cpu): (Option<&str>, &str, &str),
    node: usize,
) -> anyhow::Result<()> {
    let mut spec = json!({
        "nodeName": nodes.names[node],
        "priorityClassName": class,
        "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}],
    });
    if let Some(group) = group {
        spec["schedulingGroup"] = json!({"podGroupName": group});
    }
    nodes.isolate(&mut spec);
    apply(json!({"apiVersion": "v1", "kind": "Pod",
                 "metadata": {"name": name, "namespace": ns, "finalizers": [HOLD]}, "spec": spec}))
}

/// PriorityClasses `<test>-<name>` of each value.
pub fn priority_classes(test: &str, classes: &[(&str, i32)]) -> anyhow::Result<()> {
    for (name, value) in classes {
        apply(
            json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                     "metadata": {"name": format!("{test}-{name}")}, "value": value}),
        )?;
    }
    Ok(())
}

/// Deletes the PriorityClasses [`priority_classes`] made.
pub fn delete_priority_classes(test: &str, classes: &[(&str, i32)]) -> anyhow::Result<()> {
    for (name, _) in classes {
        crate::kubectl_ok(
            &["delete", "priorityclass", &format!("{test}-{name}")],
            None,
        )?;
    }
    Ok(())
}

/// Lets the `held` pods go: removes [`HOLD`] (a pod already gone is no error).
pub fn let_go<'a>(ns: &str, held: impl IntoIterator<Item = &'a str>) {
    for name in held {
        let _ = crate::kubectl(
            &[
                "patch",
                "pod",
                name,
                "-n",
                ns,
                "--type",
                "json",
                "-p",
                r#"[{"op": "remove", "path": "/metadata/finalizers"}]"#,
            ],
            None,
        );
    }
}
