//! Extended resources backed by DRA (GA in Kubernetes 1.37): a pod asking for `example.com/gpu`
//! where a DeviceClass serves that name (its `extendedResourceName`, or the implicit
//! `deviceclass.resource.kubernetes.io/<class>`) gets its devices through a claim the scheduler
//! makes for it, on every node whose allocatable does not have the resource (a device plugin's
//! node keeps serving it the old way), as upstream's extendeddynamicresources.go.
//!
//! - PreFilter finds which of the pod's extended resources a class serves and the claim an
//!   earlier attempt created (annotated and controlled by the pod), if any.
//! - Filter builds, per node, the claim's requests for the resources the node's allocatable
//!   lacks: one request per container (`container-<i>-request-<j>`), init containers that run
//!   before the others reusing the long-lived containers' devices, and the mappings from
//!   container and resource to request that the pod's status gets.
//! - PreBind creates the claim (`<pod>-extended-resources-<random>`), writes its allocation
//!   and reservation as for any claim, then `status.extendedResourceClaimStatus` of the pod.
//! - A claim left by an earlier attempt is deleted (PostFilter), and a new one made.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::ContainerExtendedResourceRequest;
use k8s_openapi::api::resource::v1::{
    DeviceClaim, DeviceRequest, ExactDeviceRequest, ResourceClaim, ResourceClaimSpec,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::api::ObjectMeta;

use crate::k8s::pod::{Container, Pod, PodSpec};
use crate::k8s::quantity;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::informers::devices::{
    Devices, EXTENDED_CLAIM_ANNOTATION, is_dra_extended_resource_name,
};

/// The name of the claim while it exists only in the scheduler (not a valid object name, so
/// never a real claim's).
pub const IN_MEMORY_NAME: &str = crate::scheduler::informers::devices::UNWRITTEN_CLAIM_NAME;

/// What PreFilter learnt of the pod's extended resources that classes serve.
pub struct Extended {
    /// Resource → (the pod's request, the class serving it), for each requested extended
    /// resource a class serves.
    pub resources: BTreeMap<String, (i64, String)>,
    /// Every extended resource the pod requests (served by a class or not), with its request:
    /// a node must have those no class serves in its allocatable.
    pub requested: BTreeMap<String, i64>,
    /// The claim: the one an earlier attempt created, or the one to create, in memory.
    pub claim: Arc<ResourceClaim>,
}

impl Extended {
    /// Whether the claim is one an earlier attempt wrote (it is deleted, and the pod tried
    /// again).
    pub fn stale(&self) -> bool {
        self.claim.metadata.name.as_deref() != Some(IN_MEMORY_NAME)
    }
}

/// The pod's extended resources a class serves, or `None` when it requests none.
pub fn pre_filter(devices: &Devices, pod: &PodInfo) -> Option<Extended> {
    let requested: BTreeMap<String, i64> = pod
        .requests
        .scalar
        .iter()
        .filter(|(name, v)| **v != 0 && is_dra_extended_resource_name(name))
        .map(|(n, v)| (n.clone(), *v))
        .collect();
    let resources: BTreeMap<String, (i64, String)> = requested
        .iter()
        .filter_map(|(name, v)| {
            let class = devices.class_for_resource(name)?;
            Some((
                name.clone(),
                (*v, class.metadata.name.clone().unwrap_or_default()),
            ))
        })
        .collect();
    if resources.is_empty() {
        return None;
    }
    let p = &pod.pod.metadata;
    let namespace = p.namespace.clone().unwrap_or_default();
    let name = p.name.clone().unwrap_or_default();
    let uid = p.uid.clone().unwrap_or_default();
    let claim = match devices.extended_claim_of(&namespace, &name, &uid) {
        Some(c) => c.clone(),
        None => Arc::new(ResourceClaim {
            metadata: ObjectMeta {
                namespace: Some(namespace),
                name: Some(IN_MEMORY_NAME.into()),
                // Only for the in-flight allocation's key until the API gives it a real one.
                uid: Some(format!("{uid}/extended-resources")),
                generate_name: Some(format!("{name}-extended-resources-")),
                owner_references: Some(vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Pod".into(),
                    name,
                    uid,
                    controller: Some(true),
                    block_owner_deletion: None,
                }]),
                annotations: Some(BTreeMap::from([(
                    EXTENDED_CLAIM_ANNOTATION.to_string(),
                    "true".to_string(),
                )])),
                ..Default::default()
            },
            spec: Some(ResourceClaimSpec::default()),
            status: None,
        }),
    };
    Some(Extended {
        resources,
        requested,
        claim,
    })
}

/// Which of the served resources the node leaves to DRA (its allocatable has none of them),
/// or why the node cannot run the pod: a resource neither the node nor any class serves, in
/// upstream's words.
pub fn on_node(ext: &Extended, node: &NodeInfo) -> Result<BTreeSet<String>, &'static str> {
    let mut to_dra = BTreeSet::new();
    for name in ext.requested.keys() {
        let allocatable = node.allocatable.scalar.get(name);
        let served = ext.resources.contains_key(name);
        if served && allocatable.is_none_or(|a| *a == 0) {
            to_dra.insert(name.clone());
        } else if allocatable.is_none() {
            return Err("cannot fit resource");
        }
    }
    Ok(to_dra)
}

/// The claim for the resources a node leaves to DRA: its requests, and the mapping of each
/// container's request of a resource to the claim's request, as upstream's
/// createRequestsAndMappings.
pub fn node_claim(
    ext: &Extended,
    pod: &Pod,
    to_dra: &BTreeSet<String>,
) -> (ResourceClaim, Vec<ContainerExtendedResourceRequest>) {
    let spec = pod.spec.as_ref();
    let init = spec.map_or(&[][..], PodSpec::init_containers);
    let main = spec.map(|s| s.containers.as_slice()).unwrap_or_default();
    let containers: Vec<&Container> = init.iter().chain(main).collect();
    // Regular containers and sidecars run together; plain init containers one at a time,
    // before them.
    let (long_lived, short_lived): (Vec<usize>, Vec<usize>) =
        (0..containers.len()).partition(|&i| {
            i >= init.len() || containers[i].restart_policy.as_deref() == Some("Always")
        });
    let mut requests: Vec<DeviceRequest> = Vec::new();
    let mut mappings = Vec::new();
    for resource in to_dra {
        let Some((_, class)) = ext.resources.get(resource) else {
            continue;
        };
        let mut long_requests: Vec<Option<DeviceRequest>> = vec![None; containers.len()];
        let mut long_mappings = Vec::new();
        for &i in &long_lived {
            let (req, m) = container_request(i, containers[i], resource, class, &[]);
            long_requests[i] = req;
            long_mappings.extend(m);
        }
        let mut short_max: Option<DeviceRequest> = None;
        let mut short_names = BTreeSet::new();
        let mut short_mappings = Vec::new();
        for &i in &short_lived {
            let reusable = long_requests.get(i..).unwrap_or_default();
            let (req, m) = container_request(i, containers[i], resource, class, reusable);
            if let Some(req) = req {
                short_names.insert(req.name.clone());
                if short_max
                    .as_ref()
                    .is_none_or(|max| count(max) < count(&req))
                {
                    short_max = Some(req);
                }
            }
            short_mappings.extend(m);
        }
        // The init containers run one after another: the largest one's devices serve all.
        if let Some(max) = &short_max
            && short_names.len() > 1
        {
            for m in &mut short_mappings {
                if short_names.contains(&m.request_name) {
                    m.request_name = max.name.clone();
                }
            }
        }
        requests.extend(short_max);
        requests.extend(long_requests.into_iter().flatten());
        mappings.extend(long_mappings);
        mappings.extend(short_mappings);
    }
    requests.sort_by(|a, b| a.name.cmp(&b.name));
    let mut claim = (*ext.claim).clone();
    claim.spec = Some(ResourceClaimSpec {
        devices: Some(DeviceClaim {
            requests: Some(requests),
            ..Default::default()
        }),
    });
    (claim, mappings)
}

fn count(r: &DeviceRequest) -> i64 {
    r.exactly.as_ref().and_then(|e| e.count).unwrap_or(0)
}

/// A container's request of `resource` as quantities an integer (`AsInt64`), else none.
fn container_quantity(c: &Container, resource: &str) -> Option<i64> {
    let q = c.resources.as_ref()?.requests.as_ref()?.get(resource)?;
    let (num, den) = quantity::parse_ratio(&q.0).ok()?;
    if den == 0 || num % den != 0 {
        return None;
    }
    i64::try_from(num / den).ok().filter(|v| *v != 0)
}

/// One container's request of a resource: the devices requests after it (`reusable`, for an
/// init container: the long-lived containers that start after it) already cover first, the
/// rest as a request of its own named by the container's index and the resource's index among
/// the container's requests by name.
fn container_request(
    index: usize,
    c: &Container,
    resource: &str,
    class: &str,
    reusable: &[Option<DeviceRequest>],
) -> (Option<DeviceRequest>, Vec<ContainerExtendedResourceRequest>) {
    let Some(want) = container_quantity(c, resource) else {
        return (None, Vec::new());
    };
    let mapping = |request: &str| ContainerExtendedResourceRequest {
        container_name: c.name.clone(),
        resource_name: resource.to_string(),
        request_name: request.to_string(),
    };
    let mut mappings = Vec::new();
    let mut covered: i64 = 0;
    for r in reusable.iter().flatten() {
        covered = covered.saturating_add(count(r));
        mappings.push(mapping(&r.name));
        if covered >= want {
            return (None, mappings);
        }
    }
    // The container's requests are a map: the resource's index is its place by name.
    let position = c
        .resources
        .as_ref()
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.keys().position(|k| k == resource))
        .unwrap_or(0);
    let name = format!("container-{index}-request-{position}");
    mappings.push(mapping(&name));
    let request = DeviceRequest {
        name,
        exactly: Some(ExactDeviceRequest {
            device_class_name: class.to_string(),
            allocation_mode: Some("ExactCount".into()),
            count: Some(want.saturating_sub(covered)),
            ..Default::default()
        }),
        first_available: None,
    };
    (Some(request), mappings)
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ResourceRequirements;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;

    fn container(name: &str, requests: &[(&str, &str)], sidecar: bool) -> Container {
        Container {
            name: name.into(),
            restart_policy: sidecar.then(|| "Always".to_string()),
            resources: Some(ResourceRequirements {
                requests: Some(
                    requests
                        .iter()
                        .map(|(k, v)| (k.to_string(), Quantity(v.to_string())))
                        .collect(),
                ),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    fn ext() -> Extended {
        Extended {
            resources: BTreeMap::from([("example.com/gpu".into(), (3, "gpu".into()))]),
            requested: BTreeMap::from([("example.com/gpu".into(), 3)]),
            claim: Arc::new(ResourceClaim::default()),
        }
    }

    fn requests(claim: &ResourceClaim) -> Vec<(String, i64)> {
        claim
            .spec
            .iter()
            .flat_map(|s| s.devices.iter())
            .flat_map(|d| d.requests.iter().flatten())
            .map(|r| (r.name.clone(), count(r)))
            .collect()
    }

    /// Upstream's naming: the container's index among init and regular containers, the
    /// resource's index among the container's requests by name; init containers reuse the
    /// devices of the containers that start after them, and only the largest plain init
    /// container gets a request of its own.
    #[test]
    fn requests_are_named_and_shared_as_upstream_makes_them() {
        let pod = Pod {
            spec: Some(PodSpec {
                init_containers: Some(
                    vec![
                        container("init-a", &[("example.com/gpu", "1")], false),
                        container("init-b", &[("cpu", "1"), ("example.com/gpu", "4")], false),
                        container("sidecar", &[("example.com/gpu", "1")], true),
                    ]
                    .into(),
                ),
                containers: vec![
                    container(
                        "main",
                        &[("example.com/gpu", "2"), ("memory", "1Gi")],
                        false,
                    ),
                    container("none", &[("cpu", "1")], false),
                ]
                .into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let to_dra = BTreeSet::from(["example.com/gpu".to_string()]);
        let (claim, mappings) = node_claim(&ext(), &pod, &to_dra);
        assert_eq!(
            requests(&claim),
            vec![
                // init-b: 4 wanted, the sidecar's 1 and main's 2 reused, 1 more.
                ("container-1-request-1".to_string(), 1),
                ("container-2-request-0".to_string(), 1),
                ("container-3-request-0".to_string(), 2),
            ]
        );
        let m: Vec<(&str, &str)> = mappings
            .iter()
            .map(|m| (m.container_name.as_str(), m.request_name.as_str()))
            .collect();
        assert_eq!(
            m,
            vec![
                ("sidecar", "container-2-request-0"),
                ("main", "container-3-request-0"),
                // init-a is covered by the sidecar's device alone.
                ("init-a", "container-2-request-0"),
                ("init-b", "container-2-request-0"),
                ("init-b", "container-3-request-0"),
                ("init-b", "container-1-request-1"),
            ]
        );
    }

    #[test]
    fn a_fractional_request_gets_no_devices() {
        let pod = Pod {
            spec: Some(PodSpec {
                containers: vec![container("main", &[("example.com/gpu", "1500m")], false)].into(),
                ..Default::default()
            }),
            ..Default::default()
        };
        let to_dra = BTreeSet::from(["example.com/gpu".to_string()]);
        let (claim, mappings) = node_claim(&ext(), &pod, &to_dra);
        assert!(requests(&claim).is_empty());
        assert!(mappings.is_empty());
    }
}
