//! `tether explain` on a pending pod of a hierarchy (1.38's CompositePodGroups): each group of
//! the tree, what it needs to be ready and what it has, its topology key, and what the last
//! cycle wrote on it. Read from the index alone: the hierarchy's walk reserves as it places,
//! which an explanation must not do beside the scheduling loop.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::types::{HierarchyExplanation, HierarchyGroup};
use crate::scheduler::informers::pod_groups::composite::{
    COMPOSITE_INITIALLY_SCHEDULED, CompositeKey, Member, Tree,
};
use crate::scheduler::informers::pod_groups::{self, PodGroupIndex};

/// The hierarchy under `root` (`tree`), as `groups` knows it now.
pub fn explain_hierarchy(
    groups: &PodGroupIndex,
    root: &CompositeKey,
    tree: &Tree,
) -> HierarchyExplanation {
    let mut out = HierarchyExplanation {
        root: root.to_string(),
        ready: groups.ready(tree),
        groups: Vec::new(),
    };
    fn visit(groups: &PodGroupIndex, tree: &Tree, depth: usize, out: &mut Vec<HierarchyGroup>) {
        let (has, conditions, condition_type) = match &tree.group {
            Member::Leaf(g) => (
                groups.member_count(&pod_groups::key(g)),
                g.status
                    .as_ref()
                    .and_then(|s| s.conditions.clone())
                    .unwrap_or_default(),
                crate::scheduler::group_status::INITIALLY_SCHEDULED,
            ),
            Member::Composite(g) => (
                tree.children.iter().filter(|c| groups.ready(c)).count(),
                g.conditions.clone(),
                COMPOSITE_INITIALLY_SCHEDULED,
            ),
        };
        out.push(HierarchyGroup {
            group: tree.group.entity(),
            depth,
            needs: tree.group.min_count(),
            has,
            topology_key: tree.group.topology_key().map(String::from),
            last: last(&conditions, condition_type),
        });
        for child in &tree.children {
            visit(groups, child, depth + 1, out);
        }
    }
    visit(groups, tree, 1, &mut out.groups);
    out
}

/// `True`, or `False <reason>: <message>`, of the condition `type_`.
fn last(conditions: &[Condition], type_: &str) -> Option<String> {
    let c = conditions.iter().find(|c| c.type_ == type_)?;
    Some(if c.status == "True" {
        "True".to_string()
    } else {
        format!("{} {}: {}", c.status, c.reason, c.message)
    })
}
