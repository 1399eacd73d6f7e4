//! NodeDeclaredFeatures: a pod that needs a node feature (inferred from its spec) fits only
//! nodes that declare it in `status.declaredFeatures`, as kube-scheduler's NodeDeclaredFeatures
//! plugin (beta and on by default since 1.36).
//!
//! The features a pod can need when it is scheduled, as upstream's registry infers them:
//! - `RestartAllContainersOnContainerExits`: a container or init container has a restart rule
//!   with the action `RestartAllContainers`;
//! - `UserNamespacesHostNetworkSupport`: the pod uses the host network in its own user
//!   namespace (`hostNetwork: true`, `hostUsers: false`);
//! - `VolumeBindMountOptions` (from 1.37): a container or init container mounts a volume with
//!   `bindMountOptions`;
//! - `PodCertificateMLDSA` (from 1.38): a projected `podCertificate` volume source asks for an
//!   ML-DSA key (`MLDSA44`, `MLDSA65`, `MLDSA87`);
//! - `SecurityProfileOCI` (from 1.38): the pod's or a container's seccomp profile is of type
//!   `OCI`.
//!
//! (Upstream also reads ephemeral containers, which tether does not keep: a pod being scheduled
//! has none, they are added to running pods.)

use std::collections::BTreeSet;
use std::sync::Arc;

use crate::k8s::pod::{Container, Pod, SecurityContext};
use crate::k8s::release::Release;
use crate::scheduler::framework::events::{
    ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};
use crate::scheduler::plugins::handle::Handle;

use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "NodeDeclaredFeatures";

/// The reason a node is rejected, as upstream words it.
pub const ERR_REASON: &str = "node(s) didn't match Pod's required features";

/// The CycleState key of the features PreFilter found.
const STATE_KEY: &str = "PreFilterNodeDeclaredFeatures";

const RESTART_ALL_CONTAINERS: &str = "RestartAllContainersOnContainerExits";
const USER_NAMESPACES_HOST_NETWORK: &str = "UserNamespacesHostNetworkSupport";
const VOLUME_BIND_MOUNT_OPTIONS: &str = "VolumeBindMountOptions";
const POD_CERTIFICATE_MLDSA: &str = "PodCertificateMLDSA";
const SECURITY_PROFILE_OCI: &str = "SecurityProfileOCI";

/// The node features `pod` needs to run, as kube-scheduler of `release` infers them.
pub fn required_features(pod: &Pod, release: Release) -> BTreeSet<&'static str> {
    let mut features = BTreeSet::new();
    let Some(spec) = pod.spec.as_ref() else {
        return features;
    };
    let restarts_all = |c: &Container| {
        c.restart_policy_rules
            .iter()
            .flatten()
            .any(|rule| rule.action == "RestartAllContainers")
    };
    let init = spec.init_containers.iter().flatten();
    if spec.containers.iter().chain(init).any(restarts_all) {
        features.insert(RESTART_ALL_CONTAINERS);
    }
    if spec.host_network == Some(true) && spec.host_users == Some(false) {
        features.insert(USER_NAMESPACES_HOST_NETWORK);
    }
    let bind_mount_options = |c: &Container| {
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.bind_mount_options.as_ref().is_some_and(|o| !o.is_empty()))
    };
    let all = || spec.containers.iter().chain(spec.init_containers());
    if release.at_least(37) && all().any(bind_mount_options) {
        features.insert(VOLUME_BIND_MOUNT_OPTIONS);
    }
    if !release.at_least(38) {
        return features;
    }
    let mldsa = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.projected.as_ref())
        .flat_map(|p| p.sources.iter().flatten())
        .filter_map(|source| source.pod_certificate.as_ref())
        .any(|c| matches!(c.key_type.as_str(), "MLDSA44" | "MLDSA65" | "MLDSA87"));
    if mldsa {
        features.insert(POD_CERTIFICATE_MLDSA);
    }
    let oci = |sc: Option<&SecurityContext>| {
        sc.and_then(|sc| sc.seccomp_profile.as_ref())
            .is_some_and(|p| p.type_ == "OCI")
    };
    if oci(spec.security_context.as_ref()) || all().any(|c| oci(c.security_context.as_ref())) {
        features.insert(SECURITY_PROFILE_OCI);
    }
    features
}

/// Rejects nodes that do not declare every feature the pod needs.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodeDeclaredFeatures {
    /// Whose registry of features the plugin infers by.
    release: Release,
}

impl Plugin for NodeDeclaredFeatures {
    fn name(&self) -> &'static str {
        NAME
    }
    fn signs_pods(&self) -> bool {
        true
    }
    fn sign_pod(
        &self,
        pod: &PodInfo,
        signature: &mut crate::scheduler::framework::signature::Signature,
    ) -> bool {
        signature.part(
            crate::scheduler::framework::signature::FEATURES,
            &required_features(&pod.pod, self.release),
        );
        true
    }

    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(vec![
            Registration::new(
                ClusterEvent::new(
                    EventResource::Node,
                    ActionType::ADD | ActionType::UPDATE_NODE_DECLARED_FEATURE,
                ),
                Arc::new(after_node_change),
            ),
            Registration::new(ClusterEvent::new(EventResource::Pod, ActionType::UPDATE), {
                let release = self.release;
                Arc::new(move |pod, old, new| after_pod_update(release, pod, old, new))
            }),
        ])
    }
}

/// A node added, or its declared features changed.
fn after_node_change(_pod: &PodInfo, old: Option<&EventObject>, new: Option<&EventObject>) -> Hint {
    let features = |o: Option<&EventObject>| {
        o.and_then(EventObject::node)
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.declared_features.clone())
    };
    match old {
        Some(_) if features(old) == features(new) => Hint::Skip,
        _ => Hint::Queue,
    }
}

/// The pending pod itself changed what it needs.
fn after_pod_update(
    release: Release,
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
) -> Hint {
    let (Some(old), Some(new)) = (
        old.and_then(EventObject::pod),
        new.and_then(EventObject::pod),
    ) else {
        return Hint::Queue;
    };
    if new.metadata.uid.as_deref() != Some(pod.uid()) {
        return Hint::Skip;
    }
    if required_features(old, release) == required_features(new, release) {
        Hint::Skip
    } else {
        Hint::Queue
    }
}

impl PreFilterPlugin for NodeDeclaredFeatures {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let needed = required_features(&pod.pod, self.release);
        if needed.is_empty() {
            return (PreFilterResult::all_nodes(), Status::skip());
        }
        state.write(STATE_KEY, needed);
        (PreFilterResult::all_nodes(), Status::success())
    }
}

impl FilterPlugin for NodeDeclaredFeatures {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(needed) = state.read::<BTreeSet<&'static str>>(STATE_KEY) else {
            return Status::success();
        };
        let declared: BTreeSet<&str> = node
            .node
            .as_ref()
            .and_then(|n| n.status.as_ref())
            .and_then(|s| s.declared_features.as_ref())
            .into_iter()
            .flatten()
            .map(String::as_str)
            .collect();
        if needed.iter().all(|f| declared.contains(f)) {
            Status::success()
        } else {
            Status::unresolvable(ERR_REASON)
        }
    }
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(NodeDeclaredFeatures {
        release: handle.release,
    }))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::{ContainerRestartRule, Node, NodeStatus};

    use super::*;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    fn restart_all(mut pod: Pod, init: bool) -> Pod {
        let rule = ContainerRestartRule {
            action: "RestartAllContainers".into(),
            ..Default::default()
        };
        let spec = pod.spec.get_or_insert_with(Default::default);
        let container = Container {
            name: "c".into(),
            restart_policy_rules: Some(vec![rule]),
            ..Default::default()
        };
        if init {
            spec.init_containers = Some(vec![container].into());
        } else {
            spec.containers.push(container);
        }
        pod
    }

    fn host_network_userns(mut pod: Pod) -> Pod {
        let spec = pod.spec.get_or_insert_with(Default::default);
        spec.host_network = Some(true);
        spec.host_users = Some(false);
        pod
    }

    fn node(features: &[&str]) -> NodeInfo {
        let mut info = NodeBuilder::new("n").info(vec![]);
        let mut node: Node = info.node.as_deref().cloned().unwrap_or_default();
        node.status
            .get_or_insert_with(NodeStatus::default)
            .declared_features = Some(features.iter().map(|f| f.to_string()).collect());
        info.node = Some(Arc::new(node));
        info
    }

    fn run(pod: Pod, node: &NodeInfo) -> Status {
        let info = PodInfo::new(Arc::new(pod));
        let mut state = CycleState::new();
        let (_, status) = PreFilterPlugin::pre_filter(
            &NodeDeclaredFeatures::default(),
            &mut state,
            &info,
            &Snapshot::default(),
        );
        if status.is_skip() {
            return Status::success();
        }
        FilterPlugin::filter(&NodeDeclaredFeatures::default(), &state, &info, node)
    }

    #[test]
    fn pods_needing_nothing_skip_and_fit_every_node() {
        let pod = PodBuilder::new("p").build();
        assert!(required_features(&pod, Release::default()).is_empty());
        let mut state = CycleState::new();
        let (_, status) = PreFilterPlugin::pre_filter(
            &NodeDeclaredFeatures::default(),
            &mut state,
            &PodInfo::new(Arc::new(pod)),
            &Snapshot::default(),
        );
        assert!(status.is_skip());
    }

    #[test]
    fn a_pod_fits_only_nodes_declaring_every_feature_it_needs() {
        let both = host_network_userns(restart_all(PodBuilder::new("p").build(), true));
        assert_eq!(
            required_features(&both, Release::default()),
            BTreeSet::from([RESTART_ALL_CONTAINERS, USER_NAMESPACES_HOST_NETWORK])
        );
        let unresolvable = Status::new(Code::UnschedulableAndUnresolvable, ERR_REASON);
        let cases = [
            (
                "needs one, declares it",
                restart_all(PodBuilder::new("p").build(), false),
                vec![RESTART_ALL_CONTAINERS],
                Status::success(),
            ),
            (
                "needs one, declares others",
                restart_all(PodBuilder::new("p").build(), false),
                vec!["SomethingElse"],
                unresolvable.clone(),
            ),
            (
                "needs one, declares none",
                host_network_userns(PodBuilder::new("p").build()),
                vec![],
                unresolvable.clone(),
            ),
            (
                "needs two, declares one",
                both.clone(),
                vec![RESTART_ALL_CONTAINERS],
                unresolvable.clone(),
            ),
            (
                "needs two, declares both and more",
                both,
                vec![RESTART_ALL_CONTAINERS, "X", USER_NAMESPACES_HOST_NETWORK],
                Status::success(),
            ),
        ];
        for (name, pod, declared, want) in cases {
            assert_eq!(run(pod, &node(&declared)), want, "{name}");
        }
    }

    #[test]
    fn host_network_alone_needs_nothing() {
        let mut pod = PodBuilder::new("p").build();
        pod.spec.get_or_insert_with(Default::default).host_network = Some(true);
        assert!(required_features(&pod, Release::default()).is_empty());
    }

    #[test]
    fn hints_queue_only_on_a_change_of_features() {
        let pod = PodInfo::new(Arc::new(restart_all(PodBuilder::new("p").build(), false)));
        let n = |f: &[&str]| EventObject::Node(node(f).node.expect("a node"));
        let (a, b) = (n(&["A"]), n(&["A", RESTART_ALL_CONTAINERS]));
        assert_eq!(
            after_node_change(&pod, None, Some(&b)),
            Hint::Queue,
            "added"
        );
        assert_eq!(after_node_change(&pod, Some(&a), Some(&b)), Hint::Queue);
        assert_eq!(after_node_change(&pod, Some(&b), Some(&b)), Hint::Skip);

        let old = EventObject::Pod(Arc::new(PodBuilder::new("p").build()));
        let new = EventObject::Pod(pod.pod.clone());
        assert_eq!(
            after_pod_update(Release::default(), &pod, Some(&new), Some(&old)),
            Hint::Queue
        );
        assert_eq!(
            after_pod_update(Release::default(), &pod, Some(&new), Some(&new)),
            Hint::Skip
        );
        let other = EventObject::Pod(Arc::new(PodBuilder::new("q").uid("other").build()));
        assert_eq!(
            after_pod_update(Release::default(), &pod, Some(&other), Some(&other)),
            Hint::Skip
        );
    }

    /// Each release infers the features of its own registry: bind mount options from 1.37,
    /// ML-DSA pod certificates and OCI seccomp profiles from 1.38.
    #[test]
    fn each_release_infers_the_features_of_its_registry() {
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "securityContext": {"seccompProfile": {"type": "OCI"}},
                "containers": [{"name": "c", "volumeMounts": [
                    {"name": "v", "mountPath": "/v", "bindMountOptions": ["nosuid"]}
                ]}],
                "volumes": [{"name": "cert", "projected": {"sources": [
                    {"podCertificate": {"signerName": "x.io/s", "keyType": "MLDSA65", "credentialBundlePath": "b"}}
                ]}}],
            },
        }))
        .expect("a pod");
        let of = |minor| required_features(&pod, Release::of_minor(minor));
        assert!(of(36).is_empty());
        assert_eq!(of(37), BTreeSet::from([VOLUME_BIND_MOUNT_OPTIONS]));
        assert_eq!(
            of(38),
            BTreeSet::from([
                VOLUME_BIND_MOUNT_OPTIONS,
                POD_CERTIFICATE_MLDSA,
                SECURITY_PROFILE_OCI
            ])
        );
        let in_a_container: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {"initContainers": [{"name": "i", "securityContext": {"seccompProfile": {"type": "OCI"}}}],
                     "containers": [{"name": "c", "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}}}]},
        }))
        .expect("a pod");
        assert_eq!(
            required_features(&in_a_container, Release::of_minor(38)),
            BTreeSet::from([SECURITY_PROFILE_OCI])
        );
    }
}
