//! CompositePodGroups (`scheduling.k8s.io/v1beta1`, Kubernetes 1.38, the `CompositePodGroup`
//! gate, beta and off by default): a hierarchy of groups, as JobSet and LeaderWorkerSet shape
//! their workloads. A PodGroup or a CompositePodGroup names its parent in
//! `spec.parentCompositePodGroupName`; the root of a hierarchy is placed whole in one group
//! cycle, with the gang rule (`schedulingPolicy.gang.minGroupCount` children placed) and the
//! topology rule (`schedulingConstraints.topology[0].key`) at each level.
//!
//! Read from the watched object field by field (a value of the wrong shape reads as absent),
//! as tether reads every optional kind: k8s-openapi 0.29 has the kind only at v1alpha3.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;

use super::{GroupApi, GroupKey, PodGroupIndex, Policy};
use crate::scheduler::framework::events::{ActionType, ClusterEvent, EventObject, EventResource};
use crate::watch::{Index, Readiness};

/// The event resource of a CompositePodGroup's change.
pub const COMPOSITE_EVENT: EventResource = EventResource::Custom("CompositePodGroup");

/// How deep a hierarchy may be (upstream's WorkloadMaxTreeDepth), its root at depth 1.
pub const MAX_DEPTH: usize = 4;

/// The condition a CompositePodGroup's cycle writes.
pub const COMPOSITE_INITIALLY_SCHEDULED: &str = "CompositePodGroupInitiallyScheduled";

/// A CompositePodGroup's key: its namespace and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct CompositeKey {
    pub namespace: String,
    pub name: String,
}

impl std::fmt::Display for CompositeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "compositepodgroup/{}/{}", self.namespace, self.name)
    }
}

/// A CompositePodGroup, as tether reads it.
#[derive(Clone, Debug, PartialEq)]
pub struct CompositeGroup {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    pub generation: Option<i64>,
    pub resource_version: Option<String>,
    pub created: Option<String>,
    /// `spec.parentCompositePodGroupName`.
    pub parent: Option<String>,
    /// The gang policy's `minGroupCount` (a negative one counts as 0), or the basic policy.
    pub policy: Policy,
    /// `schedulingConstraints.topology[0].key`, where set and not empty.
    pub topology_key: Option<String>,
    pub priority: Option<i32>,
    pub preemption_policy: Option<String>,
    /// `disruptionMode: {all: {}}`.
    pub disruption_all: bool,
    /// `spec.workloadRef.workloadName`.
    pub workload: Option<String>,
    pub conditions: Vec<Condition>,
}

impl CompositeGroup {
    /// Reads one from its object.
    pub fn from_object(obj: &kube::api::DynamicObject) -> Self {
        let spec = &obj.data["spec"];
        let text = |v: &serde_json::Value| v.as_str().filter(|s| !s.is_empty()).map(String::from);
        let policy = match spec["schedulingPolicy"]["gang"].as_object() {
            Some(gang) => Policy::Gang {
                min_count: gang
                    .get("minGroupCount")
                    .and_then(serde_json::Value::as_i64)
                    .and_then(|m| usize::try_from(m).ok())
                    .unwrap_or(0),
            },
            None => Policy::Basic,
        };
        let conditions =
            serde_json::from_value::<Vec<Condition>>(obj.data["status"]["conditions"].clone())
                .unwrap_or_default();
        CompositeGroup {
            namespace: obj.metadata.namespace.clone().unwrap_or_default(),
            name: obj.metadata.name.clone().unwrap_or_default(),
            uid: obj.metadata.uid.clone(),
            generation: obj.metadata.generation,
            resource_version: obj.metadata.resource_version.clone(),
            created: obj
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            parent: text(&spec["parentCompositePodGroupName"]),
            policy,
            topology_key: text(&spec["schedulingConstraints"]["topology"][0]["key"]),
            priority: spec["priority"]
                .as_i64()
                .and_then(|p| i32::try_from(p).ok()),
            preemption_policy: text(&spec["preemptionPolicy"]),
            disruption_all: spec["disruptionMode"]["all"].is_object(),
            workload: text(&spec["workloadRef"]["workloadName"]),
            conditions,
        }
    }

    pub fn key(&self) -> CompositeKey {
        CompositeKey {
            namespace: self.namespace.clone(),
            name: self.name.clone(),
        }
    }
}

/// The CompositePodGroup kind.
pub fn composite_resource() -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk(
        "scheduling.k8s.io",
        "v1beta1",
        "CompositePodGroup",
    ))
}

/// The CompositePodGroup watch, registered in `readiness` now for GangScheduling alone; none
/// while the API server does not serve the kind.
pub fn run_composite_watch(
    feed: Arc<CompositeFeed>,
    client: kube::Client,
    readiness: &Arc<Readiness>,
) -> impl std::future::Future<Output = ()> + Send + 'static {
    super::watch_optional(
        kube::api::Api::<kube::api::DynamicObject>::all_with(client, &composite_resource()),
        "compositepodgroups",
        crate::scheduler::framework::needs::GANG_PLUGINS,
        super::WhenForbidden::NoneExist("the pods of a hierarchy wait for its groups"),
        feed,
        readiness,
    )
}

/// Feeds CompositePodGroups into the index and their changes to the queue.
pub struct CompositeFeed {
    pub index: Arc<PodGroupIndex>,
    pub events: Arc<dyn crate::scheduler::framework::events::ClusterEvents>,
}

impl CompositeFeed {
    fn told(
        &self,
        action: ActionType,
        old: Option<Arc<CompositeGroup>>,
        new: Option<Arc<CompositeGroup>>,
    ) {
        let wrap = |g: Arc<CompositeGroup>| EventObject::Custom(g);
        self.events.on_event(
            ClusterEvent::new(COMPOSITE_EVENT, action),
            old.map(wrap),
            new.map(wrap),
        );
    }
}

impl Index<kube::api::DynamicObject> for CompositeFeed {
    fn apply(&self, obj: kube::api::DynamicObject) {
        let group = Arc::new(CompositeGroup::from_object(&obj));
        let old = self
            .index
            .write()
            .composites
            .insert(group.key(), group.clone());
        match old {
            Some(old) if old.resource_version == group.resource_version => {}
            Some(old) => self.told(ActionType::UPDATE, Some(old), Some(group)),
            None => self.told(ActionType::ADD, None, Some(group)),
        }
    }

    fn delete(&self, obj: kube::api::DynamicObject) {
        let group = CompositeGroup::from_object(&obj);
        let old = self.index.write().composites.remove(&group.key());
        self.told(
            ActionType::DELETE,
            Some(old.unwrap_or_else(|| Arc::new(group))),
            None,
        );
    }

    fn reset(&self, objs: Vec<kube::api::DynamicObject>) {
        let groups: Vec<Arc<CompositeGroup>> = objs
            .iter()
            .map(|o| Arc::new(CompositeGroup::from_object(o)))
            .collect();
        let new = groups.iter().map(|g| (g.key(), g.clone())).collect();
        let before = std::mem::replace(&mut self.index.write().composites, new);
        for group in groups {
            match before.get(&group.key()).cloned() {
                Some(old) if old.resource_version == group.resource_version => {}
                Some(old) => self.told(ActionType::UPDATE, Some(old), Some(group)),
                None => self.told(ActionType::ADD, None, Some(group)),
            }
        }
    }
}

/// A group of a hierarchy: a PodGroup (a leaf, holding pods) or a CompositePodGroup.
#[derive(Clone, Debug)]
pub enum Member {
    Leaf(Arc<k8s_openapi::api::scheduling::v1beta1::PodGroup>),
    Composite(Arc<CompositeGroup>),
}

/// A hierarchy, from its root CompositePodGroup down: each CompositePodGroup's children
/// ordered as upstream's (created first, then by name, CompositePodGroups after PodGroups of
/// the same name).
#[derive(Clone, Debug)]
pub struct Tree {
    pub group: Member,
    pub children: Vec<Tree>,
}

impl Member {
    pub fn name(&self) -> &str {
        match self {
            Member::Leaf(g) => g.metadata.name.as_deref().unwrap_or_default(),
            Member::Composite(g) => &g.name,
        }
    }

    /// The group's `minCount` (a PodGroup's pods) or `minGroupCount` (a CompositePodGroup's
    /// children); 1 for the basic policy.
    pub fn min_count(&self) -> usize {
        match self {
            Member::Leaf(g) => super::policy(g).min_count(),
            Member::Composite(g) => g.policy.min_count(),
        }
    }

    pub fn is_basic(&self) -> bool {
        match self {
            Member::Leaf(g) => super::policy(g) == Policy::Basic,
            Member::Composite(g) => g.policy == Policy::Basic,
        }
    }

    /// Its key as upstream prints it (`podgroup/ns/name`, `compositepodgroup/ns/name`).
    pub fn entity(&self) -> String {
        match self {
            Member::Leaf(g) => format!(
                "podgroup/{}/{}",
                g.metadata.namespace.as_deref().unwrap_or_default(),
                g.metadata.name.as_deref().unwrap_or_default()
            ),
            Member::Composite(g) => g.key().to_string(),
        }
    }

    pub fn topology_key(&self) -> Option<&str> {
        match self {
            Member::Leaf(g) => g
                .spec
                .scheduling_constraints
                .as_ref()?
                .topology
                .as_ref()?
                .first()
                .map(|t| t.key.as_str())
                .filter(|k| !k.is_empty()),
            Member::Composite(g) => g.topology_key.as_deref(),
        }
    }

    pub fn priority(&self) -> i32 {
        match self {
            Member::Leaf(g) => g.spec.priority.unwrap_or(0),
            Member::Composite(g) => g.priority.unwrap_or(0),
        }
    }

    pub fn preemption_policy(&self) -> Option<&str> {
        match self {
            Member::Leaf(g) => g.spec.preemption_policy.as_deref(),
            Member::Composite(g) => g.preemption_policy.as_deref(),
        }
    }

    pub fn workload(&self) -> Option<&str> {
        match self {
            Member::Leaf(g) => g
                .spec
                .workload_ref
                .as_ref()
                .map(|w| w.workload_name.as_str())
                .filter(|n| !n.is_empty()),
            Member::Composite(g) => g.workload.as_deref(),
        }
    }

    /// Whether `disruptionMode` is All (Single when unset).
    pub fn disruption_all(&self) -> bool {
        match self {
            Member::Leaf(g) => g
                .spec
                .disruption_mode
                .as_ref()
                .is_some_and(|m| m.all.is_some()),
            Member::Composite(g) => g.disruption_all,
        }
    }

    fn created(&self) -> Option<String> {
        match self {
            Member::Leaf(g) => g
                .metadata
                .creation_timestamp
                .as_ref()
                .map(|t| t.0.to_string()),
            Member::Composite(g) => g.created.clone(),
        }
    }
}

impl Tree {
    /// The PodGroups of the hierarchy, leaves in the children's order.
    pub fn leaves(&self) -> Vec<GroupKey> {
        let mut out = Vec::new();
        self.walk(&mut |t| {
            if let Member::Leaf(g) = &t.group {
                out.push(super::key(g));
            }
        });
        out
    }

    /// Visits every group, parents before their children.
    pub fn walk(&self, visit: &mut impl FnMut(&Tree)) {
        visit(self);
        for child in &self.children {
            child.walk(visit);
        }
    }
}

/// Where a PodGroup's hierarchy starts.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Root {
    /// It has no parent: a PodGroup scheduled on its own.
    Alone,
    /// The root CompositePodGroup of its hierarchy.
    Composite(CompositeKey),
}

impl PodGroupIndex {
    /// The root of the hierarchy of PodGroup `key` (of the Workload API, known): `Ok(None)`
    /// while an ancestor is not known; an error naming the cycle when the parents loop.
    pub fn root_of(&self, key: &GroupKey) -> Result<Option<Root>, String> {
        let inner = self.read();
        let Some(group) = inner.groups.get(key) else {
            return Ok(None);
        };
        let Some(mut parent) = group
            .spec
            .parent_composite_pod_group_name
            .clone()
            .filter(|p| !p.is_empty())
        else {
            return Ok(Some(Root::Alone));
        };
        let mut visited = vec![format!("podgroup/{key}")];
        loop {
            let at = CompositeKey {
                namespace: key.namespace.clone(),
                name: parent,
            };
            let name = at.to_string();
            if visited.contains(&name) {
                visited.push(name);
                return Err(format!(
                    "cycle detected in the hierarchy: [{}]",
                    visited.join(" ")
                ));
            }
            visited.push(name);
            let Some(composite) = inner.composites.get(&at) else {
                return Ok(None);
            };
            match &composite.parent {
                Some(next) => parent = next.clone(),
                None => return Ok(Some(Root::Composite(at))),
            }
        }
    }

    /// The hierarchy under CompositePodGroup `root`, each group at most once (a loop or a
    /// hierarchy deeper than [`MAX_DEPTH`] levels below the root is cut there), or None when the
    /// root is not known.
    pub fn tree(&self, root: &CompositeKey) -> Option<Tree> {
        let inner = self.read();
        let top = inner.composites.get(root)?.clone();
        // Children by parent name, in this namespace.
        let mut children: BTreeMap<&str, Vec<Member>> = BTreeMap::new();
        for group in inner.groups.values() {
            if group.metadata.namespace.as_deref() == Some(root.namespace.as_str())
                && let Some(parent) = group.spec.parent_composite_pod_group_name.as_deref()
            {
                children
                    .entry(parent)
                    .or_default()
                    .push(Member::Leaf(group.clone()));
            }
        }
        for group in inner.composites.values() {
            if group.namespace == root.namespace
                && let Some(parent) = group.parent.as_deref()
            {
                children
                    .entry(parent)
                    .or_default()
                    .push(Member::Composite(group.clone()));
            }
        }
        for list in children.values_mut() {
            list.sort_by(|a, b| {
                a.created()
                    .cmp(&b.created())
                    .then_with(|| a.name().cmp(b.name()))
                    .then_with(|| {
                        matches!(a, Member::Composite(_)).cmp(&matches!(b, Member::Composite(_)))
                    })
            });
        }
        let mut seen = HashSet::new();
        Some(build(
            Member::Composite(top),
            &children,
            &mut seen,
            MAX_DEPTH + 1,
        ))
    }

    /// Whether the hierarchy under `root` is ready to be tried (upstream's hierarchy tracker):
    /// a PodGroup has at least `minCount` live pods; a CompositePodGroup at least
    /// `minGroupCount` ready children (1 for the basic policy).
    pub fn ready(&self, tree: &Tree) -> bool {
        match &tree.group {
            Member::Leaf(g) => self.member_count(&super::key(g)) >= tree.group.min_count(),
            Member::Composite(_) => {
                let ready = tree.children.iter().filter(|c| self.ready(c)).count();
                ready >= tree.group.min_count()
            }
        }
    }

    /// The highest ancestor of PodGroup `key` whose `disruptionMode` is All: its pods go with
    /// that ancestor's whole hierarchy when preempted. None when there is none (or the parents
    /// loop).
    pub fn all_ancestor(&self, key: &GroupKey) -> Option<Arc<CompositeGroup>> {
        let inner = self.read();
        let mut parent = inner
            .groups
            .get(key)?
            .spec
            .parent_composite_pod_group_name
            .clone()?;
        let mut highest = None;
        for _ in 0..=MAX_DEPTH {
            let at = CompositeKey {
                namespace: key.namespace.clone(),
                name: parent,
            };
            let Some(group) = inner.composites.get(&at) else {
                break;
            };
            if group.disruption_all {
                highest = Some(group.clone());
            }
            match &group.parent {
                Some(next) => parent = next.clone(),
                None => break,
            }
        }
        highest
    }

    /// Every CompositePodGroup now `groups` (a simulation's snapshot; the watch goes through
    /// [`CompositeFeed`], which tells the queue).
    pub fn reset_composites(&self, groups: Vec<Arc<CompositeGroup>>) {
        self.write().composites = groups.into_iter().map(|g| (g.key(), g)).collect();
    }

    /// The CompositePodGroup `key`, as watched.
    pub fn composite(&self, key: &CompositeKey) -> Option<Arc<CompositeGroup>> {
        self.read().composites.get(key).cloned()
    }

    /// Whether any CompositePodGroup is known: while none is, no pod is in a hierarchy, and the
    /// questions asked of every pod at every event stop here.
    pub fn has_composites(&self) -> bool {
        !self.read().composites.is_empty()
    }

    /// Whether the PodGroup `key` names a parent.
    pub fn has_parent(&self, key: &GroupKey) -> bool {
        key.api == GroupApi::Workload
            && self.read().groups.get(key).is_some_and(|g| {
                g.spec
                    .parent_composite_pod_group_name
                    .as_deref()
                    .is_some_and(|p| !p.is_empty())
            })
    }
}

fn build(
    group: Member,
    children: &BTreeMap<&str, Vec<Member>>,
    seen: &mut HashSet<String>,
    depth_left: usize,
) -> Tree {
    let mut tree = Tree {
        group,
        children: Vec::new(),
    };
    let Member::Composite(own) = &tree.group else {
        return tree;
    };
    if !seen.insert(own.name.clone()) || depth_left == 0 {
        return tree;
    }
    let own = own.name.clone();
    for child in children.get(own.as_str()).into_iter().flatten() {
        tree.children
            .push(build(child.clone(), children, seen, depth_left - 1));
    }
    tree
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::k8s::pod::Pod;
    use crate::scheduler::informers::Keeps;
    use k8s_openapi::api::scheduling::v1beta1::PodGroup;

    fn pod_group(name: &str, parent: Option<&str>, min: i32) -> Arc<PodGroup> {
        Arc::new(
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"schedulingPolicy": {"gang": {"minCount": min}},
                         "parentCompositePodGroupName": parent},
            }))
            .expect("a PodGroup"),
        )
    }

    fn composite(name: &str, parent: Option<&str>, min: Option<i64>) -> kube::api::DynamicObject {
        let policy = match min {
            Some(m) => serde_json::json!({"gang": {"minGroupCount": m}}),
            None => serde_json::json!({"basic": {}}),
        };
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"parentCompositePodGroupName": parent, "schedulingPolicy": policy,
                     "schedulingConstraints": {"topology": [{"key": "rack"}]},
                     "workloadRef": {"workloadName": "w", "templateName": "t"}},
        }))
        .expect("a CompositePodGroup")
    }

    fn pod(name: &str, group: &str) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "namespace": "ns", "uid": name},
            "spec": {"containers": [], "schedulingGroup": {"podGroupName": group}},
        }))
        .expect("a pod")
    }

    struct Quiet;
    impl crate::scheduler::framework::events::ClusterEvents for Quiet {
        fn on_event(&self, _: ClusterEvent, _: Option<EventObject>, _: Option<EventObject>) {}
    }

    fn index() -> (Arc<PodGroupIndex>, CompositeFeed) {
        let index = Arc::new(PodGroupIndex::default());
        let feed = CompositeFeed {
            index: index.clone(),
            events: Arc::new(Quiet),
        };
        (index, feed)
    }

    fn key(name: &str) -> GroupKey {
        GroupKey {
            api: GroupApi::Workload,
            namespace: "ns".into(),
            name: name.into(),
        }
    }

    #[test]
    fn reads_a_composite_and_its_rules() {
        let group = CompositeGroup::from_object(&composite("job", None, Some(2)));
        assert_eq!(group.policy, Policy::Gang { min_count: 2 });
        assert_eq!(group.topology_key.as_deref(), Some("rack"));
        assert_eq!(group.workload.as_deref(), Some("w"));
        assert_eq!(group.parent, None);
        let basic = CompositeGroup::from_object(&composite("b", Some("job"), None));
        assert_eq!(basic.policy, Policy::Basic);
        assert_eq!(basic.parent.as_deref(), Some("job"));
    }

    #[test]
    fn a_leaf_finds_its_root_and_the_tree_its_leaves() {
        let (index, feed) = index();
        Keeps::<PodGroup>::reset(
            &*index,
            vec![
                pod_group("leader", Some("replica"), 1),
                pod_group("workers", Some("replica"), 2),
                pod_group("alone", None, 1),
            ],
        );
        assert_eq!(index.root_of(&key("leader")), Ok(None), "parent unknown");
        feed.reset(vec![
            composite("job", None, Some(1)),
            composite("replica", Some("job"), Some(2)),
        ]);
        let root = CompositeKey {
            namespace: "ns".into(),
            name: "job".into(),
        };
        assert_eq!(index.root_of(&key("alone")), Ok(Some(Root::Alone)));
        assert_eq!(
            index.root_of(&key("workers")),
            Ok(Some(Root::Composite(root.clone())))
        );
        let tree = index.tree(&root).expect("the tree");
        let names: Vec<String> = tree.leaves().into_iter().map(|k| k.name).collect();
        assert_eq!(names, ["leader", "workers"]);
        // Ready: the replica needs both children ready; workers need 2 pods.
        index.observe_pod(&pod("l0", "leader"));
        index.observe_pod(&pod("w0", "workers"));
        assert!(!index.ready(&tree));
        index.observe_pod(&pod("w1", "workers"));
        assert!(index.ready(&tree));
    }

    #[test]
    fn a_loop_of_parents_is_named() {
        let (index, feed) = index();
        Keeps::<PodGroup>::reset(&*index, vec![pod_group("leaf", Some("a"), 1)]);
        feed.reset(vec![
            composite("a", Some("b"), Some(1)),
            composite("b", Some("a"), Some(1)),
        ]);
        let err = index.root_of(&key("leaf")).expect_err("a cycle");
        assert_eq!(
            err,
            "cycle detected in the hierarchy: [podgroup/ns/leaf compositepodgroup/ns/a compositepodgroup/ns/b compositepodgroup/ns/a]"
        );
    }
}
