//! Builders for unit tests: small pods and nodes, written the way a test reads.
//! `PodBuilder::new("p").req_cpu("100m").toleration("k", "Equal", "v", "NoSchedule").build()`

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Affinity, ContainerImage, ContainerPort, Node, NodeSpec, NodeStatus,
    PersistentVolumeClaimVolumeSource, ResourceRequirements, Taint, Toleration,
    TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub mod volumes;

use crate::k8s::pod::{Container, Pod, PodSpec};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::snapshot::Snapshot;

/// Builds a pod. Resource requests go to the last container (one is created on demand).
#[derive(Clone, Debug)]
pub struct PodBuilder {
    pod: Pod,
}

impl PodBuilder {
    pub fn new(name: &str) -> Self {
        PodBuilder {
            pod: Pod {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    namespace: Some("default".into()),
                    uid: Some(format!("uid-{name}")),
                    ..Default::default()
                },
                spec: Some(PodSpec {
                    containers: vec![].into(),
                    ..Default::default()
                }),
                status: None,
            },
        }
    }

    fn spec(&mut self) -> &mut PodSpec {
        self.pod.spec.get_or_insert_with(Default::default)
    }

    fn last_container(&mut self) -> &mut Container {
        let spec = self.spec();
        if spec.containers.is_empty() {
            spec.containers.push(Container {
                name: "c0".into(),
                ..Default::default()
            });
        }
        let last = spec.containers.len() - 1;
        &mut spec.containers[last]
    }

    /// Adds an empty container (requests then go to it).
    pub fn container(mut self) -> Self {
        let n = self.spec().containers.len();
        self.spec().containers.push(Container {
            name: format!("c{n}"),
            ..Default::default()
        });
        self
    }

    pub fn namespace(mut self, ns: &str) -> Self {
        self.pod.metadata.namespace = Some(ns.into());
        self
    }

    pub fn uid(mut self, uid: &str) -> Self {
        self.pod.metadata.uid = Some(uid.into());
        self
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.pod
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// Adds a request of any resource to the last container.
    pub fn req(mut self, resource: &str, quantity: &str) -> Self {
        let c = self.last_container();
        c.resources
            .get_or_insert_with(ResourceRequirements::default)
            .requests
            .get_or_insert_with(BTreeMap::new)
            .insert(resource.into(), Quantity(quantity.into()));
        self
    }

    /// Adds a new container requesting this CPU.
    pub fn req_cpu(self, quantity: &str) -> Self {
        self.container().req("cpu", quantity)
    }

    /// Adds a new container requesting this memory.
    pub fn req_mem(self, quantity: &str) -> Self {
        self.container().req("memory", quantity)
    }

    /// Adds an init container requesting this CPU; `restartable` makes it a sidecar.
    pub fn init_cpu(mut self, quantity: &str, restartable: bool) -> Self {
        let spec = self.spec();
        let n = spec.init_containers.as_ref().map_or(0, |c| c.len());
        spec.init_containers
            .get_or_insert_with(Default::default)
            .push(Container {
                name: format!("init{n}"),
                restart_policy: restartable.then(|| "Always".to_string()),
                resources: Some(ResourceRequirements {
                    requests: Some([("cpu".to_string(), Quantity(quantity.into()))].into()),
                    ..Default::default()
                }),
                ..Default::default()
            });
        self
    }

    pub fn overhead_cpu(mut self, quantity: &str) -> Self {
        self.spec()
            .overhead
            .get_or_insert_with(BTreeMap::new)
            .insert("cpu".into(), Quantity(quantity.into()));
        self
    }

    pub fn image(mut self, image: &str) -> Self {
        self.last_container().image = Some(image.into());
        self
    }

    pub fn host_port(mut self, port: i32, protocol: &str, ip: &str) -> Self {
        self.last_container()
            .ports
            .get_or_insert_with(Vec::new)
            .push(ContainerPort {
                container_port: port,
                host_port: Some(port),
                protocol: Some(protocol.into()),
                host_ip: (!ip.is_empty()).then(|| ip.into()),
                ..Default::default()
            });
        self
    }

    pub fn node_name(mut self, node: &str) -> Self {
        self.spec().node_name = Some(node.into());
        self
    }

    pub fn scheduler_name(mut self, name: &str) -> Self {
        self.spec().scheduler_name = Some(name.into());
        self
    }

    pub fn priority(mut self, p: i32) -> Self {
        self.spec().priority = Some(p);
        self
    }

    pub fn node_selector(mut self, k: &str, v: &str) -> Self {
        self.spec()
            .node_selector
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    pub fn toleration(mut self, key: &str, operator: &str, value: &str, effect: &str) -> Self {
        self.spec()
            .tolerations
            .get_or_insert_with(Default::default)
            .push(Toleration {
                key: (!key.is_empty()).then(|| key.into()),
                operator: Some(operator.into()),
                value: (!value.is_empty()).then(|| value.into()),
                effect: (!effect.is_empty()).then(|| effect.into()),
                toleration_seconds: None,
            });
        self
    }

    pub fn affinity(mut self, affinity: Affinity) -> Self {
        self.spec().affinity = Some(affinity);
        self
    }

    pub fn spread(mut self, constraint: TopologySpreadConstraint) -> Self {
        self.spec()
            .topology_spread_constraints
            .get_or_insert_with(Vec::new)
            .push(constraint);
        self
    }

    pub fn scheduling_gate(mut self, name: &str) -> Self {
        self.spec()
            .scheduling_gates
            .get_or_insert_with(Vec::new)
            .push(k8s_openapi::api::core::v1::PodSchedulingGate { name: name.into() });
        self
    }

    /// Any other change to the pod.
    pub fn with(mut self, f: impl FnOnce(&mut Pod)) -> Self {
        f(&mut self.pod);
        self
    }

    /// Adds a volume backed by the claim `claim`.
    pub fn claim(mut self, claim: &str) -> Self {
        let n = self.spec().volumes.as_ref().map_or(0, Vec::len);
        self.spec().volumes.get_or_insert_default().push(Volume {
            name: format!("v{n}"),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: claim.into(),
                ..Default::default()
            }),
            ..Default::default()
        });
        self
    }

    pub fn build(self) -> Pod {
        self.pod
    }

    pub fn info(self) -> PodInfo {
        PodInfo::new(Arc::new(self.pod))
    }
}

/// Builds a node with 4 CPUs, 16Gi and 110 pods allocatable unless told otherwise.
#[derive(Clone, Debug)]
pub struct NodeBuilder {
    node: Node,
}

impl NodeBuilder {
    pub fn new(name: &str) -> Self {
        let resources: BTreeMap<String, Quantity> =
            [("cpu", "4"), ("memory", "16Gi"), ("pods", "110")]
                .into_iter()
                .map(|(k, v)| (k.to_string(), Quantity(v.into())))
                .collect();
        NodeBuilder {
            node: Node {
                metadata: ObjectMeta {
                    name: Some(name.into()),
                    labels: Some([("kubernetes.io/hostname".to_string(), name.to_string())].into()),
                    ..Default::default()
                },
                spec: Some(NodeSpec::default()),
                status: Some(NodeStatus {
                    allocatable: Some(resources.clone()),
                    capacity: Some(resources),
                    ..Default::default()
                }),
            },
        }
    }

    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.node
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// Sets the allocatable (and capacity) amount of one resource.
    pub fn allocatable(mut self, resource: &str, quantity: &str) -> Self {
        let status = self.node.status.get_or_insert_with(Default::default);
        for list in [&mut status.allocatable, &mut status.capacity] {
            list.get_or_insert_with(BTreeMap::new)
                .insert(resource.into(), Quantity(quantity.into()));
        }
        self
    }

    pub fn taint(mut self, key: &str, value: &str, effect: &str) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .taints
            .get_or_insert_with(Vec::new)
            .push(Taint {
                key: key.into(),
                value: (!value.is_empty()).then(|| value.into()),
                effect: effect.into(),
                time_added: None,
            });
        self
    }

    pub fn unschedulable(mut self) -> Self {
        self.node
            .spec
            .get_or_insert_with(Default::default)
            .unschedulable = Some(true);
        self
    }

    pub fn image(mut self, name: &str, size_bytes: i64) -> Self {
        let status = self.node.status.get_or_insert_with(Default::default);
        status
            .images
            .get_or_insert_with(Vec::new)
            .push(ContainerImage {
                names: Some(vec![name.into()]),
                size_bytes: Some(size_bytes),
            });
        self
    }

    pub fn with(mut self, f: impl FnOnce(&mut Node)) -> Self {
        f(&mut self.node);
        self
    }

    pub fn build(self) -> Node {
        self.node
    }

    /// A NodeInfo for this node with `pods` on it.
    pub fn info(self, pods: Vec<Pod>) -> NodeInfo {
        let name = self.node.metadata.name.clone().unwrap_or_default();
        let mut info = NodeInfo::new(name.clone());
        info.set_node(Arc::new(self.node));
        for mut pod in pods {
            pod.spec.get_or_insert_with(Default::default).node_name = Some(name.clone());
            info.add_pod(Arc::new(PodInfo::new(Arc::new(pod))));
        }
        info
    }
}

/// A snapshot of these nodes, each with the pods whose `spec.nodeName` names it.
pub fn snapshot(nodes: Vec<NodeBuilder>, pods: Vec<Pod>) -> Snapshot {
    let infos = nodes
        .into_iter()
        .map(|n| {
            let name = n.node.metadata.name.clone().unwrap_or_default();
            let on_node = pods
                .iter()
                .filter(|p| {
                    p.spec.as_ref().and_then(|s| s.node_name.as_deref()) == Some(name.as_str())
                })
                .cloned()
                .collect();
            n.info(on_node)
        })
        .collect();
    Snapshot::from_node_infos(infos)
}

/// A client whose API server is `answer`: called with each request's method, path and JSON
/// body, it returns the status code and JSON body of the reply. For unit tests of code that
/// writes through the API (no cluster, no mock framework).
pub fn stand_in_client(
    answer: impl Fn(&str, &str, serde_json::Value) -> (u16, serde_json::Value) + Send + Sync + 'static,
) -> kube::Client {
    let answer = Arc::new(answer);
    let service = tower::service_fn(move |req: http::Request<kube::client::Body>| {
        let answer = answer.clone();
        async move {
            let (parts, body) = req.into_parts();
            let bytes = body.collect_bytes().await.unwrap_or_default();
            let sent = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
            let (code, reply) = answer(parts.method.as_str(), parts.uri.path(), sent);
            Ok::<_, std::convert::Infallible>(
                http::Response::builder()
                    .status(code)
                    .header("content-type", "application/json")
                    .body(kube::client::Body::from(
                        serde_json::to_vec(&reply).unwrap_or_default(),
                    ))
                    .expect("a valid response"),
            )
        }
    });
    kube::Client::new(service, "default")
}

/// The workload a test binding named `<kind>-<name>` is for (`pod-p`, `deployment-web`,
/// `statefulset-db-0`, `virtualmachine-vm`): what a binding of that name holds in its
/// `spec.workloadRef`.
pub fn workload_ref_for(binding_name: &str) -> crate::api::WorkloadRef {
    let (kind, name) = binding_name.split_once('-').expect("<kind>-<name>");
    let (api_version, kind) = match kind {
        "pod" => ("v1", "Pod"),
        "replicaset" => ("apps/v1", "ReplicaSet"),
        "deployment" => ("apps/v1", "Deployment"),
        "statefulset" => ("apps/v1", "StatefulSet"),
        "job" => ("batch/v1", "Job"),
        "virtualmachine" => ("kubevirt.io/v1", "VirtualMachine"),
        "virtualmachineinstance" => ("kubevirt.io/v1", "VirtualMachineInstance"),
        other => panic!("no test kind {other}"),
    };
    let (name, ordinal) = match (kind, name.rsplit_once('-')) {
        ("StatefulSet", Some((set, n))) => (set, n.parse().ok()),
        _ => (name, None),
    };
    crate::api::WorkloadRef {
        api_version: api_version.into(),
        kind: kind.into(),
        name: name.into(),
        ordinal,
    }
}
