//! Pod → workload identity, following controller ownerReferences over cached metadata:
//! Pod → ReplicaSet → Deployment, Pod → VirtualMachineInstance → VirtualMachine (KubeVirt),
//! Pod → Job, Pod → StatefulSet (each ordinal its own identity), a pod without a controller is
//! its own workload. No API call: the owners come from an [`OwnerLookup`] fed by watches
//! (which may start watching an owner kind it is asked about for the first time).

use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;

use crate::api::{StickyBinding, WorkloadRef};
use crate::k8s::pod::Pod;

/// What the resolver needs to know of an owner object.
#[derive(Clone, Debug, PartialEq)]
pub struct OwnerMeta {
    pub api_version: String,
    pub kind: String,
    pub name: String,
    pub uid: String,
    /// The owner's own controller ownerReference, if it has one.
    pub controller: Option<OwnerReference>,
    /// `spec.replicas` of a ReplicaSet, Deployment or StatefulSet; `spec.parallelism` of a Job.
    pub replicas: Option<i32>,
}

/// Owner metadata by namespace, kind and name, from watch caches. No API call.
pub trait OwnerLookup: Send + Sync {
    /// The owner of this API version's group and kind, by namespace and name: an
    /// `apps.kruise.io` StatefulSet is not an `apps` one.
    fn get(&self, namespace: &str, api_version: &str, kind: &str, name: &str) -> Option<OwnerMeta>;

    /// Whether owners of `kind` are (being) watched: then an owner missing from the lookup is
    /// one the watch has not delivered yet, not one that cannot be known. A lookup may start
    /// watching a kind it is asked about for the first time.
    fn is_watched(&self, _api_version: &str, _kind: &str) -> bool {
        false
    }
}

/// The workload a pod belongs to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Workload {
    pub namespace: String,
    pub api_version: String,
    pub kind: String,
    pub name: String,
    /// The workload object's UID, for the StickyBinding's ownerReference.
    pub uid: String,
    /// For a StatefulSet: the pod's ordinal.
    pub ordinal: Option<i32>,
    /// The pod's name, for a StatefulSet (whose binding is named after the pod).
    pub pod_name: Option<String>,
    /// `spec.replicas` of the workload, where it has one.
    pub replicas: Option<i32>,
    /// `<Kind>/<name>` of the pod's controller when its kind is watched but the watch has not
    /// delivered it yet (a VMI created a moment before its pod): the identity above is then
    /// only a guess, and a plugin keyed on it must wait.
    pub pending_owner: Option<String>,
}

impl Workload {
    /// The StickyBinding's name: `<kind>-<name>` in lower case (`<kind>.<group>-<name>` for
    /// a kind outside the core, apps, batch and kubevirt.io groups); a StatefulSet's is named
    /// after the pod, since its ordinals each stick on their own.
    pub fn binding_name(&self) -> String {
        let base = match (&self.kind[..], &self.pod_name) {
            ("StatefulSet", Some(pod)) => pod,
            _ => &self.name,
        };
        crate::api::binding_name(&self.api_version, &self.kind, base)
    }

    /// Whether `binding` is this workload's: its `spec.workloadRef` names this workload. A
    /// binding of this name that names another (made by hand, or by an older tether for a
    /// workload of another group) is neither read nor written.
    pub fn owns(&self, binding: &StickyBinding) -> bool {
        binding
            .spec
            .workload_ref
            .same_workload(&self.workload_ref())
    }

    pub fn workload_ref(&self) -> WorkloadRef {
        WorkloadRef {
            api_version: self.api_version.clone(),
            kind: self.kind.clone(),
            name: self.name.clone(),
            ordinal: self.ordinal,
        }
    }
}

/// The workload `pod` belongs to, following its controller ownerReference over `owners`.
///
/// - No controller: the pod is its own workload (`v1` `Pod`, its name and UID).
/// - StatefulSet: the StatefulSet, with the pod's ordinal (the number after the last `-` of
///   its name) and the pod's name, since each ordinal sticks on its own.
/// - Job: the Job.
/// - Any other kind (ReplicaSet, VirtualMachineInstance, …): that owner, or its own controller
///   one level up when it has one (ReplicaSet → Deployment, VirtualMachineInstance →
///   VirtualMachine).
///
/// An owner `owners` does not know yet is still named by the reference that points to it, so
/// a pod is never left without a workload while a watch catches up. `replicas` comes from the
/// workload's metadata; when only a reference names it, from the owner below it.
pub fn resolve(pod: &Pod, owners: &dyn OwnerLookup) -> Workload {
    let namespace = pod.metadata.namespace.clone().unwrap_or_default();
    let pod_name = pod.metadata.name.clone().unwrap_or_default();
    let Some(owner_ref) = controller_of(pod.metadata.owner_references.as_deref()) else {
        return Workload {
            namespace,
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: pod_name,
            uid: pod.metadata.uid.clone().unwrap_or_default(),
            ordinal: None,
            pod_name: None,
            replicas: None,
            pending_owner: None,
        };
    };
    // A cached owner of another UID is an older object of the same name: not this pod's.
    let owner = owners
        .get(
            &namespace,
            &owner_ref.api_version,
            &owner_ref.kind,
            &owner_ref.name,
        )
        .filter(|meta| owner_ref.uid.is_empty() || meta.uid == owner_ref.uid);
    let pending_owner = (owner.is_none()
        && owners.is_watched(&owner_ref.api_version, &owner_ref.kind))
    .then(|| format!("{}/{}", owner_ref.kind, owner_ref.name));
    let mut workload = match owner.as_ref() {
        Some(meta) => Workload::from_meta(&namespace, meta),
        None => Workload::from_ref(&namespace, owner_ref),
    };
    match owner_ref.kind.as_str() {
        "StatefulSet" => {
            workload.ordinal = ordinal_of(&pod_name);
            workload.pod_name = Some(pod_name);
        }
        "Job" => {}
        _ => {
            if let Some(up) = owner.as_ref().and_then(|m| m.controller.as_ref()) {
                let below_replicas = workload.replicas;
                workload = match owners.get(&namespace, &up.api_version, &up.kind, &up.name) {
                    Some(meta) => {
                        // The same UID check one level up: a VirtualMachine deleted and
                        // created again under its name is another workload, whose history
                        // this pod is not. (Not cached yet, it is named by the reference.)
                        if !up.uid.is_empty() && meta.uid != up.uid {
                            workload
                                .pending_owner
                                .get_or_insert(format!("{}/{}", up.kind, up.name));
                        }
                        Workload {
                            pending_owner: workload.pending_owner.take(),
                            ..Workload::from_meta(&namespace, &meta)
                        }
                    }
                    None => Workload {
                        replicas: below_replicas,
                        pending_owner: workload.pending_owner.take(),
                        ..Workload::from_ref(&namespace, up)
                    },
                };
            }
        }
    }
    workload.pending_owner = workload.pending_owner.take().or(pending_owner);
    workload
}

/// The controller among `refs` (`controller: true`), as kube's `controller_owner_ref`.
fn controller_of(refs: Option<&[OwnerReference]>) -> Option<&OwnerReference> {
    refs?.iter().find(|r| r.controller == Some(true))
}

/// A StatefulSet pod's ordinal: the number after the last `-` of its name.
fn ordinal_of(pod_name: &str) -> Option<i32> {
    pod_name.rsplit_once('-')?.1.parse().ok()
}

impl Workload {
    fn from_meta(namespace: &str, meta: &OwnerMeta) -> Self {
        Workload {
            namespace: namespace.into(),
            api_version: meta.api_version.clone(),
            kind: meta.kind.clone(),
            name: meta.name.clone(),
            uid: meta.uid.clone(),
            ordinal: None,
            pod_name: None,
            replicas: meta.replicas,
            pending_owner: None,
        }
    }

    fn from_ref(namespace: &str, r: &OwnerReference) -> Self {
        Workload {
            namespace: namespace.into(),
            api_version: r.api_version.clone(),
            kind: r.kind.clone(),
            name: r.name.clone(),
            uid: r.uid.clone(),
            ordinal: None,
            pod_name: None,
            replicas: None,
            pending_owner: None,
        }
    }

    /// Whether the workload is a ReplicaSet or Deployment with more than one replica, or a Job
    /// with a parallelism above one: the pods of such a workload are interchangeable, so
    /// StickyNode never pins them and the `skipMultiReplica` switch of PlacementHistory leaves
    /// them alone. A StatefulSet never is: each of its ordinals sticks on its own.
    pub fn is_multi_replica(&self) -> bool {
        matches!(self.kind.as_str(), "ReplicaSet" | "Deployment" | "Job")
            && self.replicas.unwrap_or(1) > 1
    }
}

/// An [`OwnerLookup`] that knows no owner: every pod's workload is named by its references.
/// For unit tests and the default plugin [`Handle`](crate::scheduler::plugins::handle::Handle).
#[derive(Clone, Copy, Debug, Default)]
pub struct NoOwners;

impl OwnerLookup for NoOwners {
    fn get(
        &self,
        _namespace: &str,
        _api_version: &str,
        _kind: &str,
        _name: &str,
    ) -> Option<OwnerMeta> {
        None
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    use super::*;
    use crate::scheduler::testing::PodBuilder;

    /// Owners by (namespace, kind, name).
    #[derive(Default)]
    struct FakeOwners(HashMap<(String, String, String), OwnerMeta>);

    impl FakeOwners {
        fn with(mut self, meta: OwnerMeta) -> Self {
            let key = ("default".to_string(), meta.kind.clone(), meta.name.clone());
            self.0.insert(key, meta);
            self
        }
    }

    impl OwnerLookup for FakeOwners {
        fn get(
            &self,
            namespace: &str,
            _api_version: &str,
            kind: &str,
            name: &str,
        ) -> Option<OwnerMeta> {
            self.0
                .get(&(namespace.into(), kind.into(), name.into()))
                .cloned()
        }
    }

    fn oref(api_version: &str, kind: &str, name: &str, controller: bool) -> OwnerReference {
        OwnerReference {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller: Some(controller),
            block_owner_deletion: None,
        }
    }

    fn meta(
        api_version: &str,
        kind: &str,
        name: &str,
        controller: Option<OwnerReference>,
        replicas: Option<i32>,
    ) -> OwnerMeta {
        OwnerMeta {
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            controller,
            replicas,
        }
    }

    fn pod(name: &str, refs: Vec<OwnerReference>) -> Pod {
        PodBuilder::new(name)
            .with(|p| p.metadata.owner_references = Some(refs))
            .build()
    }

    /// FakeOwners whose kinds are all watched.
    struct Watched(FakeOwners);

    impl OwnerLookup for Watched {
        fn get(
            &self,
            namespace: &str,
            api_version: &str,
            kind: &str,
            name: &str,
        ) -> Option<OwnerMeta> {
            self.0.get(namespace, api_version, kind, name)
        }

        fn is_watched(&self, _api_version: &str, _kind: &str) -> bool {
            true
        }
    }

    #[test]
    fn an_owner_the_watch_has_not_delivered_leaves_the_workload_pending() {
        let vmi_ref = oref("kubevirt.io/v1", "VirtualMachineInstance", "fedora", true);
        let p = pod("virt-launcher-fedora-x1", vec![vmi_ref.clone()]);
        let vm_ref = oref("kubevirt.io/v1", "VirtualMachine", "fedora", true);
        let vmi = meta(
            "kubevirt.io/v1",
            "VirtualMachineInstance",
            "fedora",
            Some(vm_ref),
            None,
        );

        let pending = resolve(&p, &Watched(FakeOwners::default()));
        assert_eq!(
            pending.pending_owner.as_deref(),
            Some("VirtualMachineInstance/fedora"),
            "watched kind, not delivered yet"
        );
        let older = OwnerMeta {
            uid: "uid-of-an-older-vmi".into(),
            ..vmi.clone()
        };
        let stale = resolve(&p, &Watched(FakeOwners::default().with(older)));
        assert!(
            stale.pending_owner.is_some(),
            "a cached owner of another UID is not this pod's"
        );
        let vm = meta("kubevirt.io/v1", "VirtualMachine", "fedora", None, None);
        let known = resolve(
            &p,
            &Watched(FakeOwners::default().with(vmi.clone()).with(vm.clone())),
        );
        assert_eq!(known.pending_owner, None);
        assert_eq!(known.kind, "VirtualMachine", "resolved up to the VM");
        let vm_not_yet = resolve(&p, &Watched(FakeOwners::default().with(vmi.clone())));
        assert_eq!(
            (vm_not_yet.kind.as_str(), vm_not_yet.pending_owner),
            ("VirtualMachine", None),
            "the VMI's own controller, not cached yet, is named by the VMI's reference"
        );
        let vm_recreated = OwnerMeta {
            uid: "uid-of-a-newer-vm".into(),
            ..vm
        };
        let other_vm = resolve(
            &p,
            &Watched(FakeOwners::default().with(vmi).with(vm_recreated)),
        );
        assert!(
            other_vm.pending_owner.is_some(),
            "a VM of the same name and another UID is not this VMI's: its history is not counted"
        );
        let unwatched = resolve(&p, &FakeOwners::default());
        assert_eq!(
            unwatched.pending_owner, None,
            "a kind nobody watches is named by its reference"
        );
    }

    fn want(api_version: &str, kind: &str, name: &str, replicas: Option<i32>) -> Workload {
        Workload {
            namespace: "default".into(),
            api_version: api_version.into(),
            kind: kind.into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            ordinal: None,
            pod_name: None,
            replicas,
            pending_owner: None,
        }
    }

    #[test]
    fn resolve_follows_controller_references() {
        let rs_of_deploy = oref("apps/v1", "ReplicaSet", "web-7d9f", true);
        let deploy = oref("apps/v1", "Deployment", "web", true);
        let vmi = oref("kubevirt.io/v1", "VirtualMachineInstance", "fedora", true);
        let vm = oref("kubevirt.io/v1", "VirtualMachine", "fedora", true);
        let owners = FakeOwners::default()
            .with(meta(
                "apps/v1",
                "ReplicaSet",
                "web-7d9f",
                Some(deploy.clone()),
                Some(3),
            ))
            .with(meta("apps/v1", "Deployment", "web", None, Some(2)))
            .with(meta("apps/v1", "ReplicaSet", "bare", None, Some(1)))
            .with(meta(
                "kubevirt.io/v1",
                "VirtualMachineInstance",
                "fedora",
                Some(vm),
                None,
            ))
            .with(meta(
                "kubevirt.io/v1",
                "VirtualMachine",
                "fedora",
                None,
                None,
            ))
            .with(meta(
                "kubevirt.io/v1",
                "VirtualMachineInstance",
                "lone",
                None,
                None,
            ))
            .with(meta("apps/v1", "StatefulSet", "db", None, Some(3)))
            .with(meta(
                "batch/v1",
                "Job",
                "backup",
                Some(oref("batch/v1", "CronJob", "nightly", true)),
                None,
            ))
            .with(meta(
                "example.dev/v1",
                "Widget",
                "w",
                Some(oref("example.dev/v1", "WidgetSet", "ws", true)),
                None,
            ))
            .with(meta(
                "apps/v1",
                "ReplicaSet",
                "orphan-deploy-rs",
                Some(oref("apps/v1", "Deployment", "gone", true)),
                Some(4),
            ));
        let no_controller = Pod {
            metadata: ObjectMeta {
                owner_references: Some(vec![oref("v1", "ConfigMap", "cm", false)]),
                ..PodBuilder::new("solo").build().metadata
            },
            ..Default::default()
        };

        let cases: Vec<(&str, Pod, Workload)> = vec![
            (
                "no controller: the pod itself",
                no_controller,
                want("v1", "Pod", "solo", None),
            ),
            (
                "no references at all: the pod itself",
                PodBuilder::new("bare").build(),
                want("v1", "Pod", "bare", None),
            ),
            (
                "ReplicaSet of a Deployment: the Deployment and its replicas",
                pod(
                    "web-7d9f-x",
                    vec![oref("v1", "ConfigMap", "cm", false), rs_of_deploy],
                ),
                want("apps/v1", "Deployment", "web", Some(2)),
            ),
            (
                "ReplicaSet without a controller: the ReplicaSet",
                pod("bare-x", vec![oref("apps/v1", "ReplicaSet", "bare", true)]),
                want("apps/v1", "ReplicaSet", "bare", Some(1)),
            ),
            (
                "Deployment not known yet: named by the ReplicaSet's reference, RS replicas",
                pod(
                    "orphan-x",
                    vec![oref("apps/v1", "ReplicaSet", "orphan-deploy-rs", true)],
                ),
                want("apps/v1", "Deployment", "gone", Some(4)),
            ),
            (
                "ReplicaSet not known yet: named by the pod's reference",
                pod("new-x", vec![oref("apps/v1", "ReplicaSet", "new-rs", true)]),
                want("apps/v1", "ReplicaSet", "new-rs", None),
            ),
            (
                "VirtualMachineInstance of a VirtualMachine: the VirtualMachine",
                pod("virt-launcher-fedora-abcde", vec![vmi]),
                want("kubevirt.io/v1", "VirtualMachine", "fedora", None),
            ),
            (
                "VirtualMachineInstance without a VirtualMachine: the VMI",
                pod(
                    "virt-launcher-lone-abcde",
                    vec![oref(
                        "kubevirt.io/v1",
                        "VirtualMachineInstance",
                        "lone",
                        true,
                    )],
                ),
                want("kubevirt.io/v1", "VirtualMachineInstance", "lone", None),
            ),
            (
                "Job: the Job, not its CronJob",
                pod("backup-xyz", vec![oref("batch/v1", "Job", "backup", true)]),
                want("batch/v1", "Job", "backup", None),
            ),
            (
                "StatefulSet: the StatefulSet with the pod's ordinal",
                pod("db-12", vec![oref("apps/v1", "StatefulSet", "db", true)]),
                Workload {
                    ordinal: Some(12),
                    pod_name: Some("db-12".into()),
                    ..want("apps/v1", "StatefulSet", "db", Some(3))
                },
            ),
            (
                "StatefulSet not known yet: named by the reference, ordinal from the name",
                pod(
                    "cache-0",
                    vec![oref("apps/v1", "StatefulSet", "cache", true)],
                ),
                Workload {
                    ordinal: Some(0),
                    pod_name: Some("cache-0".into()),
                    ..want("apps/v1", "StatefulSet", "cache", None)
                },
            ),
            (
                "other kind with a controller: one level up",
                pod("w-1", vec![oref("example.dev/v1", "Widget", "w", true)]),
                want("example.dev/v1", "WidgetSet", "ws", None),
            ),
            (
                "other kind not known yet: named by the pod's reference",
                pod("g-1", vec![oref("example.dev/v1", "Gadget", "g", true)]),
                want("example.dev/v1", "Gadget", "g", None),
            ),
        ];
        for (name, pod, want) in cases {
            assert_eq!(resolve(&pod, &owners), want, "{name}");
        }
    }

    #[test]
    fn binding_names_and_multi_replica() {
        let sts = Workload {
            ordinal: Some(1),
            pod_name: Some("DB-1".into()),
            ..want("apps/v1", "StatefulSet", "DB", Some(3))
        };
        let cases = [
            (
                "deployment with 3",
                want("apps/v1", "Deployment", "Web", Some(3)),
                "deployment-web",
                true,
            ),
            (
                "replicaset with 1",
                want("apps/v1", "ReplicaSet", "rs", Some(1)),
                "replicaset-rs",
                false,
            ),
            (
                "replicas unknown",
                want("apps/v1", "Deployment", "d", None),
                "deployment-d",
                false,
            ),
            ("statefulset ordinal", sts, "statefulset-db-1", false),
            (
                "virtual machine",
                want("kubevirt.io/v1", "VirtualMachine", "fedora", None),
                "virtualmachine-fedora",
                false,
            ),
        ];
        for (name, w, binding, multi) in cases {
            assert_eq!(w.binding_name(), binding, "{name}");
            assert_eq!(w.is_multi_replica(), multi, "{name}");
        }
    }

    /// Two StatefulSets `db` of different groups in one namespace never share a binding, and
    /// neither reads or writes the other's: the group is in the name outside the core, apps,
    /// batch and kubevirt.io groups, and every lookup compares `spec.workloadRef`.
    #[test]
    fn workloads_of_two_groups_never_share_a_binding() {
        let set = |api_version: &str| Workload {
            namespace: "ns".into(),
            api_version: api_version.into(),
            kind: "StatefulSet".into(),
            name: "db".into(),
            uid: "u".into(),
            ordinal: Some(0),
            pod_name: Some("db-0".into()),
            replicas: Some(3),
            pending_owner: None,
        };
        let (apps, kruise) = (set("apps/v1"), set("apps.kruise.io/v1beta1"));
        assert_eq!(apps.binding_name(), "statefulset-db-0");
        assert_eq!(kruise.binding_name(), "statefulset.apps.kruise.io-db-0");
        assert_eq!(
            kruise.workload_ref().binding_name(),
            kruise.binding_name(),
            "the name follows from the reference alone"
        );
        let binding_of = |w: &Workload| {
            crate::api::StickyBinding::new(
                &w.binding_name(),
                crate::api::StickyBindingSpec {
                    workload_ref: w.workload_ref(),
                    node_name: None,
                },
            )
        };
        assert!(apps.owns(&binding_of(&apps)) && kruise.owns(&binding_of(&kruise)));
        assert!(!apps.owns(&binding_of(&kruise)) && !kruise.owns(&binding_of(&apps)));
        let other_version = set("apps/v1beta2");
        assert!(
            other_version.owns(&binding_of(&apps)),
            "any version of the group"
        );
    }

    /// Interchangeable replicas (a pin means nothing for them): a ReplicaSet, Deployment or Job
    /// of several; never a StatefulSet, whose ordinals stick each on their own.
    #[test]
    fn which_workloads_are_many_interchangeable_replicas() {
        let of = |kind: &str, replicas: Option<i32>| Workload {
            namespace: "ns".into(),
            api_version: "v1".into(),
            kind: kind.into(),
            name: "w".into(),
            uid: String::new(),
            ordinal: None,
            pod_name: None,
            replicas,
            pending_owner: None,
        };
        for (kind, replicas, many) in [
            ("Deployment", Some(3), true),
            ("ReplicaSet", Some(2), true),
            ("Job", Some(4), true),
            ("Job", Some(1), false),
            ("Job", None, false),
            ("Deployment", Some(1), false),
            ("StatefulSet", Some(3), false),
            ("VirtualMachine", None, false),
        ] {
            assert_eq!(
                of(kind, replicas).is_multi_replica(),
                many,
                "{kind} {replicas:?}"
            );
        }
    }
}
