//! NodePorts: a pod asking for host ports fits only nodes where those ports are free, as
//! kube-scheduler's NodePorts PreFilter and Filter.

use crate::scheduler::framework::events::{
    self, ActionType, ClusterEvent, EventObject, EventResource, Hint, Registration,
};
use crate::scheduler::plugins::handle::Handle;
use std::sync::Arc;

use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::{HostPort, PodInfo};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};
use crate::scheduler::framework::{
    CycleState, FilterPlugin, Plugin, PreFilterPlugin, PreFilterResult, Status,
};

use crate::scheduler::plugins::helper::expect_no_args;

pub const NAME: &str = "NodePorts";

/// The reason a node is rejected, as upstream words it.
pub const ERR_REASON: &str = "node(s) didn't have free ports for the requested pod ports";

/// Rejects nodes where a host port the pod wants is already in use.
#[derive(Clone, Copy, Debug, Default)]
pub struct NodePorts;

fn binds_all(ip: &str) -> bool {
    ip.is_empty() || ip == "0.0.0.0"
}

/// Whether `want` collides with `used`, as upstream's HostPortInfo.CheckConflict: the same
/// protocol and port, and the same IP or either of them 0.0.0.0.
fn conflicts(want: &HostPort, used: &HostPort) -> bool {
    want.port == used.port
        && want.protocol == used.protocol
        && (binds_all(&want.ip) || binds_all(&used.ip) || want.ip == used.ip)
}

/// Whether every port the pod wants is free on the node.
fn fits_ports(wanted: &[HostPort], node: &NodeInfo) -> bool {
    !wanted
        .iter()
        .any(|w| node.used_ports.iter().any(|u| conflicts(w, u)))
}

impl Plugin for NodePorts {
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
            crate::scheduler::framework::signature::HOST_PORTS,
            &crate::scheduler::framework::signature::host_ports(pod),
        );
        true
    }

    fn events_to_register(&self) -> Option<Vec<Registration>> {
        Some(vec![
            Registration::new(
                ClusterEvent::new(EventResource::Pod, ActionType::DELETE),
                Arc::new(after_pod_deleted),
            ),
            Registration::always(ClusterEvent::new(EventResource::Node, ActionType::ADD)),
        ])
    }

    fn pre_filter(&self) -> Option<&dyn PreFilterPlugin> {
        Some(self)
    }

    fn filter(&self) -> Option<&dyn FilterPlugin> {
        Some(self)
    }
}

impl PreFilterPlugin for NodePorts {
    /// Skip for a pod without host ports. The ports themselves need no stashing: `PodInfo`
    /// already holds them (containers and sidecar init containers, as upstream's GetHostPorts).
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _snapshot: &Snapshot,
    ) -> (PreFilterResult, Status) {
        let status = if pod.host_ports.is_empty() {
            Status::skip()
        } else {
            Status::success()
        };
        (PreFilterResult::all_nodes(), status)
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fits_ports(&pod.host_ports, node) {
            Status::success()
        } else {
            Status::unschedulable(ERR_REASON)
        }
    }
}

/// A pod deleted that held a host port this pod wants.
fn after_pod_deleted(pod: &PodInfo, old: Option<&EventObject>, _new: Option<&EventObject>) -> Hint {
    let Some(deleted) = events::pods(old, None).0 else {
        return Hint::Queue;
    };
    if !events::assigned_or_nominated(deleted) {
        return Hint::Skip;
    }
    let freed = PodInfo::new(std::sync::Arc::new(deleted.clone())).host_ports;
    events::queue_if(
        pod.host_ports
            .iter()
            .any(|w| freed.iter().any(|u| conflicts(w, u))),
    )
}

/// Builds the plugin; it takes no args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    _handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    expect_no_args(NAME, args, path)?;
    Ok(Arc::new(NodePorts))
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::ContainerPort;

    use super::*;
    use crate::k8s::pod::Container;
    use crate::scheduler::framework::Code;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};

    /// A pod with these `(protocol, ip, port)` host ports.
    fn pod_with(ports: &[(&str, &str, i32)]) -> PodBuilder {
        ports
            .iter()
            .fold(PodBuilder::new("p").container(), |b, (proto, ip, port)| {
                b.host_port(*port, proto, ip)
            })
    }

    /// A pod whose only host port is on a sidecar (restartable init) container, or a plain
    /// init container when `sidecar` is false.
    fn pod_with_init_port(port: i32, sidecar: bool) -> PodBuilder {
        PodBuilder::new("p").with(|p| {
            if let Some(spec) = p.spec.as_mut() {
                spec.init_containers = Some(
                    vec![Container {
                        name: "init".into(),
                        restart_policy: sidecar.then(|| "Always".to_string()),
                        ports: Some(vec![ContainerPort {
                            container_port: port,
                            host_port: Some(port),
                            protocol: Some("TCP".into()),
                            ..Default::default()
                        }]),
                        ..Default::default()
                    }]
                    .into(),
                );
            }
        })
    }

    #[test]
    fn filter_rejects_host_port_conflicts() {
        let conflict = || Some(Status::new(Code::Unschedulable, ERR_REASON));
        // (name, pod, existing pod on the node, want: None = PreFilter Skip, Some(filter status))
        let cases: Vec<(&str, PodBuilder, PodBuilder, Option<Status>)> = vec![
            (
                "nothing running",
                PodBuilder::new("p"),
                PodBuilder::new("e"),
                None,
            ),
            (
                "other port",
                pod_with(&[("UDP", "127.0.0.1", 8080)]),
                pod_with(&[("UDP", "127.0.0.1", 9090)]),
                Some(Status::success()),
            ),
            (
                "same udp port",
                pod_with(&[("UDP", "127.0.0.1", 8080)]),
                pod_with(&[("UDP", "127.0.0.1", 8080)]),
                conflict(),
            ),
            (
                "same tcp port",
                pod_with(&[("TCP", "127.0.0.1", 8080)]),
                pod_with(&[("TCP", "127.0.0.1", 8080)]),
                conflict(),
            ),
            (
                "different host ip",
                pod_with(&[("TCP", "127.0.0.1", 8080)]),
                pod_with(&[("TCP", "127.0.0.2", 8080)]),
                Some(Status::success()),
            ),
            (
                "different protocol",
                pod_with(&[("UDP", "127.0.0.1", 8080)]),
                pod_with(&[("TCP", "127.0.0.1", 8080)]),
                Some(Status::success()),
            ),
            (
                "second udp port conflict",
                pod_with(&[("UDP", "127.0.0.1", 8000), ("UDP", "127.0.0.1", 8080)]),
                pod_with(&[("UDP", "127.0.0.1", 8080)]),
                conflict(),
            ),
            (
                "first tcp port conflict",
                pod_with(&[("TCP", "127.0.0.1", 8001), ("UDP", "127.0.0.1", 8080)]),
                pod_with(&[("TCP", "127.0.0.1", 8001), ("UDP", "127.0.0.1", 8081)]),
                conflict(),
            ),
            (
                "first tcp port conflict due to 0.0.0.0 hostIP",
                pod_with(&[("TCP", "0.0.0.0", 8001)]),
                pod_with(&[("TCP", "127.0.0.1", 8001)]),
                conflict(),
            ),
            (
                "tcp hostPort conflict due to 0.0.0.0 hostIP",
                pod_with(&[("TCP", "10.0.10.10", 8001), ("TCP", "0.0.0.0", 8001)]),
                pod_with(&[("TCP", "127.0.0.1", 8001)]),
                conflict(),
            ),
            (
                "second tcp port conflict to 0.0.0.0 hostIP",
                pod_with(&[("TCP", "127.0.0.1", 8001)]),
                pod_with(&[("TCP", "0.0.0.0", 8001)]),
                conflict(),
            ),
            (
                "an empty hostIP binds all addresses",
                pod_with(&[("TCP", "127.0.0.1", 8001)]),
                pod_with(&[("TCP", "", 8001)]),
                conflict(),
            ),
            (
                "second different protocol",
                pod_with(&[("UDP", "127.0.0.1", 8001)]),
                pod_with(&[("TCP", "0.0.0.0", 8001)]),
                Some(Status::success()),
            ),
            (
                "udp hostPort conflict due to 0.0.0.0 hostIP",
                pod_with(&[("UDP", "0.0.0.0", 8001)]),
                pod_with(&[("TCP", "127.0.0.1", 8001), ("UDP", "127.0.0.1", 8001)]),
                conflict(),
            ),
            (
                "a sidecar's host port conflicts",
                pod_with_init_port(8001, true),
                pod_with(&[("TCP", "0.0.0.0", 8001)]),
                conflict(),
            ),
            (
                "a plain init container's host port does not count",
                pod_with_init_port(8001, false),
                pod_with(&[("TCP", "0.0.0.0", 8001)]),
                None,
            ),
            (
                "an existing sidecar's host port is in use",
                pod_with(&[("TCP", "127.0.0.1", 8001)]),
                pod_with_init_port(8001, true),
                conflict(),
            ),
        ];
        for (name, pod, existing, want) in cases {
            let pod = pod.info();
            let node = NodeBuilder::new("n").info(vec![existing.build()]);
            let mut state = CycleState::new();
            let (result, pre) =
                PreFilterPlugin::pre_filter(&NodePorts, &mut state, &pod, &Snapshot::default());
            assert_eq!(result, PreFilterResult::all_nodes(), "{name}");
            match want {
                None => assert!(pre.is_skip(), "{name}: {pre}"),
                Some(want) => {
                    assert!(pre.is_success(), "{name}: {pre}");
                    assert_eq!(
                        FilterPlugin::filter(&NodePorts, &state, &pod, &node),
                        want,
                        "{name}"
                    );
                }
            }
        }
    }
}
