//! Resource amounts as the scheduler counts them: requested by pods, allocatable on nodes.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use crate::k8s::pod::{Container, ContainerStatus, Pod, PodSpec};
use crate::k8s::quantity::{parse_milli, parse_value};
use crate::k8s::release::Release;

pub const CPU: &str = "cpu";
pub const MEMORY: &str = "memory";
pub const EPHEMERAL_STORAGE: &str = "ephemeral-storage";
pub const PODS: &str = "pods";

/// The CPU a container without a CPU request counts as when scoring (kube-scheduler's
/// DefaultMilliCPURequest), so that best-effort pods still spread.
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 100;
/// The memory a container without a memory request counts as when scoring (200 MiB).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A set of resource amounts: CPU in millicores, memory and storage in bytes, everything else
/// (extended resources, hugepages) in whole units under its name.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Resource {
    pub milli_cpu: i64,
    pub memory: i64,
    pub ephemeral_storage: i64,
    pub allowed_pod_number: i64,
    pub scalar: BTreeMap<String, i64>,
}

/// The exact sum of resource amounts: kept in 128 bits, which no sum of 64-bit amounts can
/// overflow, so subtracting what was added restores it exactly (saturating 64-bit sums forget:
/// a pod asking for `8Ei` added then removed would erase the node's real usage). Read it as a
/// [`Resource`] with [`ResourceSum::saturated`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ResourceSum {
    milli_cpu: i128,
    memory: i128,
    ephemeral_storage: i128,
    allowed_pod_number: i128,
    scalar: BTreeMap<String, i128>,
}

fn saturate(v: i128) -> i64 {
    i64::try_from(v).unwrap_or(if v < 0 { i64::MIN } else { i64::MAX })
}

impl ResourceSum {
    pub fn add(&mut self, r: &Resource) {
        self.milli_cpu += i128::from(r.milli_cpu);
        self.memory += i128::from(r.memory);
        self.ephemeral_storage += i128::from(r.ephemeral_storage);
        self.allowed_pod_number += i128::from(r.allowed_pod_number);
        for (k, v) in &r.scalar {
            *self.scalar.entry(k.clone()).or_insert(0) += i128::from(*v);
        }
    }

    pub fn sub(&mut self, r: &Resource) {
        self.milli_cpu -= i128::from(r.milli_cpu);
        self.memory -= i128::from(r.memory);
        self.ephemeral_storage -= i128::from(r.ephemeral_storage);
        self.allowed_pod_number -= i128::from(r.allowed_pod_number);
        for (k, v) in &r.scalar {
            *self.scalar.entry(k.clone()).or_insert(0) -= i128::from(*v);
        }
    }

    /// The sum as 64-bit amounts, each held at the largest (smallest) one when beyond.
    pub fn saturated(&self) -> Resource {
        Resource {
            milli_cpu: saturate(self.milli_cpu),
            memory: saturate(self.memory),
            ephemeral_storage: saturate(self.ephemeral_storage),
            allowed_pod_number: saturate(self.allowed_pod_number),
            scalar: self
                .scalar
                .iter()
                .map(|(k, v)| (k.clone(), saturate(*v)))
                .collect(),
        }
    }
}

impl Resource {
    /// Reads a resource list. A malformed quantity counts as zero; the API server validates
    /// quantities, so this only happens with objects it never admitted.
    pub fn from_list(list: Option<&BTreeMap<String, Quantity>>) -> Self {
        let mut r = Resource::default();
        for (name, q) in list.into_iter().flatten() {
            r.set(name, &q.0);
        }
        r
    }

    fn set(&mut self, name: &str, quantity: &str) {
        match name {
            CPU => self.milli_cpu = parse_milli(quantity).unwrap_or(0),
            MEMORY => self.memory = parse_value(quantity).unwrap_or(0),
            EPHEMERAL_STORAGE => self.ephemeral_storage = parse_value(quantity).unwrap_or(0),
            PODS => self.allowed_pod_number = parse_value(quantity).unwrap_or(0),
            _ => {
                self.scalar
                    .insert(name.to_string(), parse_value(quantity).unwrap_or(0));
            }
        }
    }

    /// The amount of one resource by name.
    pub fn get(&self, name: &str) -> i64 {
        match name {
            CPU => self.milli_cpu,
            MEMORY => self.memory,
            EPHEMERAL_STORAGE => self.ephemeral_storage,
            PODS => self.allowed_pod_number,
            _ => self.scalar.get(name).copied().unwrap_or(0),
        }
    }

    pub fn add(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_add(other.milli_cpu);
        self.memory = self.memory.saturating_add(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_add(other.ephemeral_storage);
        self.allowed_pod_number = self
            .allowed_pod_number
            .saturating_add(other.allowed_pod_number);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_add(*v);
        }
    }

    pub fn sub(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.saturating_sub(other.milli_cpu);
        self.memory = self.memory.saturating_sub(other.memory);
        self.ephemeral_storage = self
            .ephemeral_storage
            .saturating_sub(other.ephemeral_storage);
        self.allowed_pod_number = self
            .allowed_pod_number
            .saturating_sub(other.allowed_pod_number);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = e.saturating_sub(*v);
        }
    }

    /// Raises every amount to at least `other`'s.
    pub fn set_max(&mut self, other: &Resource) {
        self.milli_cpu = self.milli_cpu.max(other.milli_cpu);
        self.memory = self.memory.max(other.memory);
        self.ephemeral_storage = self.ephemeral_storage.max(other.ephemeral_storage);
        self.allowed_pod_number = self.allowed_pod_number.max(other.allowed_pod_number);
        for (k, v) in &other.scalar {
            let e = self.scalar.entry(k.clone()).or_insert(0);
            *e = (*e).max(*v);
        }
    }

    /// The names of the resources with a non-zero amount, CPU and memory first.
    pub fn names(&self) -> impl Iterator<Item = &str> {
        [
            (CPU, self.milli_cpu),
            (MEMORY, self.memory),
            (EPHEMERAL_STORAGE, self.ephemeral_storage),
        ]
        .into_iter()
        .filter(|(_, v)| *v != 0)
        .map(|(n, _)| n)
        .chain(
            self.scalar
                .iter()
                .filter(|(_, v)| **v != 0)
                .map(|(k, _)| k.as_str()),
        )
    }
}

type ResourceList = BTreeMap<String, Quantity>;

fn requests_of(c: &Container) -> Option<&ResourceList> {
    c.resources.as_ref().and_then(|r| r.requests.as_ref())
}

/// Whether pod-level requests are set for a resource pod-level resources support (cpu, memory,
/// hugepages), as upstream's IsPodLevelRequestsSet.
fn pod_level_requests(pod: &Pod) -> Option<&ResourceList> {
    pod.spec
        .as_ref()?
        .resources
        .as_ref()?
        .requests
        .as_ref()
        .filter(|l| l.keys().any(|k| is_pod_level_resource(k)))
}

/// Whether the pod's resize was found infeasible (`PodResizePending` with reason Infeasible).
fn resize_infeasible(pod: &Pod) -> bool {
    pod.status
        .iter()
        .flat_map(|s| s.conditions.iter().flatten())
        .find(|c| c.type_ == "PodResizePending")
        .is_some_and(|c| c.reason.as_deref() == Some("Infeasible"))
}

fn is_pod_level_resource(name: &str) -> bool {
    name == CPU || name == MEMORY || name.starts_with("hugepages-")
}

/// What a pod requests, as kube-scheduler computes it: the regular containers and restartable
/// init containers (sidecars) add up; each other init container runs alone beside the sidecars
/// started before it, and the pod needs the larger of the two; pod-level
/// `spec.resources.requests` replace the container sum for the resources they name; pod overhead
/// is added on top.
///
/// With `non_zero_defaults` (kube-scheduler's non-zero requests, for scoring), a container that
/// does not name a CPU or memory request counts as 100m CPU / 200Mi memory; a request set to
/// zero stays zero. When pod-level requests are set, the defaults apply only to a resource that
/// neither the pod level nor any container names, as upstream's getNonMissingContainerRequests.
pub fn pod_requests(pod: &Pod, non_zero_defaults: bool) -> Resource {
    requests_with(
        pod,
        if non_zero_defaults {
            Defaults::WhereNoneNamed
        } else {
            Defaults::None
        },
    )
}

/// What the incoming pod requests as NodeResourcesFit scores it under kube-scheduler of
/// `release` (calculatePodResourceRequest with the non-zero defaults): each container that names
/// no CPU or memory request counts 100m / 200Mi, whatever else names it. From 1.38 the pod-level
/// requests then stand for the containers' sum where they name a resource; 1.36 and 1.37 build
/// Fit's scorer without the PodLevelResources gate (its `enablePodLevelResources` is never set
/// there), so their scores read the containers alone (measured side by side; BalancedAllocation
/// and Filter read pod-level requests in every release). The scorer's reading of status
/// resources (1.38) changes nothing here: the pod being scored is pending and has none. (A pod's
/// requests counted on its node, [`pod_requests`] with defaults, leave out the defaults for a
/// resource the pod level or a container names.)
pub fn pod_requests_scored(pod: &Pod, release: Release) -> Resource {
    if release.at_least(38) {
        requests_with(pod, Defaults::EveryContainerThenPodLevel)
    } else {
        requests_with(pod, Defaults::EveryContainer)
    }
}

/// Which containers count the non-zero defaults for a CPU or memory request they do not name.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Defaults {
    None,
    /// Every one (without pod-level requests, always so), unless pod-level requests are set
    /// and the pod level, a container or the overhead names the resource (upstream's
    /// getNonMissingContainerRequests, for a pod counted on a node).
    WhereNoneNamed,
    /// Every one, and pod-level requests left out (upstream's calculatePodResourceRequest in
    /// Fit's scorer before 1.38, for the pod being scored).
    EveryContainer,
    /// Every one, then the pod-level requests in place of the sum where they name a resource
    /// (Fit's scorer from 1.38).
    EveryContainerThenPodLevel,
}

/// The containers' lists as `get` reads them (each with `with_defaults`), added up as
/// kube-scheduler does: the regular containers and restartable init containers (sidecars) add
/// up; each other init container runs alone beside the sidecars started before it, and the pod
/// needs the larger of the two.
fn aggregate<'p>(
    spec: &'p PodSpec,
    get: &dyn Fn(&'p Container) -> Option<&'p ResourceList>,
    with_defaults: &dyn Fn(Option<&ResourceList>) -> Resource,
) -> Resource {
    let mut total = Resource::default();
    for c in &spec.containers {
        total.add(&with_defaults(get(c)));
    }
    let mut sidecars = Resource::default();
    let mut init_peak = Resource::default();
    for c in spec.init_containers.iter().flatten() {
        let r = with_defaults(get(c));
        let during = if c.restart_policy.as_deref() == Some("Always") {
            total.add(&r);
            sidecars.add(&r);
            sidecars.clone()
        } else {
            let mut during = r;
            during.add(&sidecars);
            during
        };
        init_peak.set_max(&during);
    }
    total.set_max(&init_peak);
    total
}

fn requests_with(pod: &Pod, defaults: Defaults) -> Resource {
    let Some(spec) = pod.spec.as_ref() else {
        return Resource::default();
    };
    let status = pod.status.as_ref();
    // The pod-level status the kubelet keeps (InPlacePodLevelResourcesVerticalScaling, beta and
    // on in 1.37): what it allocated and what runs, summed over the containers already.
    let pod_allocated = status.and_then(|s| s.allocated_resources.as_ref());
    let pod_actuated = status.and_then(|s| s.resources.as_ref()?.requests.as_ref());
    let pod_level = pod_level_requests(pod).filter(|_| defaults != Defaults::EveryContainer);
    let statuses: HashMap<&str, &ContainerStatus> = status
        .iter()
        .flat_map(|s| {
            s.container_statuses
                .iter()
                .flatten()
                .chain(s.init_container_statuses.iter().flatten())
        })
        .map(|cs| (cs.name.as_str(), cs))
        .collect();
    let named_anywhere = |name: &str| {
        let in_list = |l: Option<&ResourceList>| l.is_some_and(|l| l.contains_key(name));
        in_list(pod_level)
            || spec
                .containers
                .iter()
                .chain(spec.init_containers.iter().flatten())
                .any(|c| in_list(requests_of(c)))
            || in_list(spec.overhead.as_ref())
            || in_list(pod_allocated)
            || in_list(pod_actuated)
            || statuses.values().any(|cs| {
                in_list(cs.allocated_resources.as_ref())
                    || in_list(cs.resources.as_ref().and_then(|r| r.requests.as_ref()))
            })
    };
    let default = |name: &str| match defaults {
        Defaults::None => false,
        Defaults::WhereNoneNamed => pod_level.is_none() || !named_anywhere(name),
        Defaults::EveryContainer | Defaults::EveryContainerThenPodLevel => true,
    };
    let (default_cpu, default_memory) = (default(CPU), default(MEMORY));
    let infeasible = resize_infeasible(pod);
    // One container's list as `get` reads it, with the non-zero defaults for the CPU and memory
    // it does not name (upstream's applyNonMissing).
    let with_defaults = |list: Option<&ResourceList>| {
        let mut r = Resource::from_list(list);
        let missing = |name: &str| !list.is_some_and(|l| l.contains_key(name));
        if default_cpu && missing(CPU) {
            r.milli_cpu = DEFAULT_MILLI_CPU_REQUEST;
        }
        if default_memory && missing(MEMORY) {
            r.memory = DEFAULT_MEMORY_REQUEST;
        }
        r
    };
    let specified = aggregate(spec, &|c| requests_of(c), &with_defaults);
    // A resized pod counts the larger of what its spec asks, what the kubelet allocated and
    // what runs (only the latter two while the resize is infeasible), as upstream's
    // AggregateContainerRequests: from the pod-level status where the kubelet keeps it, else
    // summed from the containers' statuses.
    let (allocated, actuated) = match (pod_allocated, pod_actuated) {
        (Some(allocated), Some(actuated)) => (
            Resource::from_list(Some(allocated)),
            Resource::from_list(Some(actuated)),
        ),
        _ => {
            let status_of = |c: &Container| statuses.get(c.name.as_str()).copied();
            let allocated = aggregate(
                spec,
                &|c| match status_of(c) {
                    Some(cs) if cs.allocated_resources.is_some() => cs.allocated_resources.as_ref(),
                    _ if infeasible => None,
                    _ => requests_of(c),
                },
                &with_defaults,
            );
            let actuated = aggregate(
                spec,
                &|c| {
                    let cs = status_of(c);
                    match cs.and_then(|cs| cs.resources.as_ref()?.requests.as_ref()) {
                        Some(running) => Some(running),
                        None => match cs.and_then(|cs| cs.allocated_resources.as_ref()) {
                            Some(allocated) => Some(allocated),
                            None if infeasible => None,
                            None => requests_of(c),
                        },
                    }
                },
                &with_defaults,
            );
            (allocated, actuated)
        }
    };
    let mut total = if infeasible {
        actuated
    } else {
        let mut t = specified;
        t.set_max(&actuated);
        t
    };
    total.set_max(&allocated);

    // Pod-level requests replace the sum for the resources they name (cpu, memory, huge
    // pages), as upstream's PodRequests: while the pod has a pod-level `status.resources`, the
    // larger of the spec (left out while a resize is infeasible), `status.resources.requests`
    // and `status.allocatedResources`, for every resource one of them names; else the spec.
    if let Some(pod_level) = pod_level {
        let has_status_resources = status.is_some_and(|s| s.resources.is_some());
        let lists: Vec<&ResourceList> = if has_status_resources {
            [
                (!infeasible).then_some(pod_level),
                pod_actuated,
                pod_allocated,
            ]
            .into_iter()
            .flatten()
            .collect()
        } else {
            vec![pod_level]
        };
        let mut effective = Resource::default();
        for list in &lists {
            effective.set_max(&Resource::from_list(Some(list)));
        }
        for name in lists.iter().flat_map(|l| l.keys()) {
            match name.as_str() {
                CPU => total.milli_cpu = effective.milli_cpu,
                MEMORY => total.memory = effective.memory,
                huge if huge.starts_with("hugepages-") => {
                    total.scalar.insert(huge.to_string(), effective.get(huge));
                }
                _ => {}
            }
        }
    }
    // Overhead on top. For a running pod whose kubelet keeps the pod-level status, that status
    // includes the overhead already, so it counts twice, as in kube-scheduler v1.37.2
    // (kubernetes/kubernetes#139627, not fixed in any release yet): matched, so that both
    // schedulers see a node as equally full.
    if let Some(overhead) = spec.overhead.as_ref() {
        total.add(&Resource::from_list(Some(overhead)));
    }
    total
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::PodBuilder;

    #[test]
    fn pod_requests_count_init_containers_and_sidecars_as_kube_scheduler() {
        // (name, pod, want milli cpu, want memory)
        let cases = [
            (
                "containers add up",
                PodBuilder::new("p").req_cpu("100m").req_cpu("200m"),
                300,
                0,
            ),
            (
                "an init container larger than the containers wins",
                PodBuilder::new("p").req_cpu("100m").init_cpu("500m", false),
                500,
                0,
            ),
            (
                "a smaller init container does not count",
                PodBuilder::new("p").req_cpu("300m").init_cpu("100m", false),
                300,
                0,
            ),
            (
                "a sidecar adds to the containers",
                PodBuilder::new("p").req_cpu("100m").init_cpu("50m", true),
                150,
                0,
            ),
            (
                "an init container after a sidecar runs beside it",
                PodBuilder::new("p")
                    .req_cpu("100m")
                    .init_cpu("200m", true)
                    .init_cpu("250m", false),
                450,
                0,
            ),
            (
                "overhead is added",
                PodBuilder::new("p").req_cpu("100m").overhead_cpu("10m"),
                110,
                0,
            ),
            ("memory", PodBuilder::new("p").req_mem("1Gi"), 0, 1 << 30),
        ];
        for (name, pod, cpu, mem) in cases {
            let r = pod_requests(&pod.build(), false);
            assert_eq!((r.milli_cpu, r.memory), (cpu, mem), "{name}");
        }
    }

    #[test]
    fn non_zero_defaults_replace_only_requests_that_are_absent() {
        let non_zero = |pod: PodBuilder| {
            let r = pod_requests(&pod.build(), true);
            (r.milli_cpu, r.memory)
        };
        assert_eq!(
            non_zero(PodBuilder::new("p").req_cpu("0")),
            (0, DEFAULT_MEMORY_REQUEST),
            "an explicit zero stays zero"
        );
        let pod_level = |cpu: &str| {
            PodBuilder::new("p").container().with(|p| {
                if let Some(spec) = p.spec.as_mut() {
                    spec.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
                        requests: Some([("cpu".to_string(), Quantity(cpu.into()))].into()),
                        ..Default::default()
                    });
                }
            })
        };
        assert_eq!(
            non_zero(pod_level("500m")),
            (500, DEFAULT_MEMORY_REQUEST),
            "pod-level cpu wins; memory named nowhere gets the default"
        );
        assert_eq!(
            non_zero(pod_level("0")),
            (0, DEFAULT_MEMORY_REQUEST),
            "a pod-level zero is a request"
        );
    }

    /// The pod being scored (NodeResourcesFit's calculatePodResourceRequest) counts the
    /// defaults for every container that names no CPU or memory request and, as upstream's Fit
    /// scorer, no pod-level requests; counted on a node, the same pod reads the pod level and
    /// leaves out the defaults for a resource a container names. Pod-level huge pages replace
    /// the containers' sum.
    #[test]
    fn the_scored_pod_counts_defaults_per_container_under_pod_level_requests() {
        let pod = serde_json::from_value::<Pod>(serde_json::json!({
            "metadata": {"name": "p"},
            "spec": {
                "resources": {"requests": {"cpu": "1", "hugepages-2Mi": "8Mi"}},
                "containers": [
                    {"name": "a", "resources": {"requests": {"memory": "1Gi", "hugepages-2Mi": "2Mi"}}},
                    {"name": "b", "resources": {"requests": {"hugepages-2Mi": "2Mi"}}},
                ],
            },
        }))
        .expect("a pod");
        let gi = 1024 * 1024 * 1024;
        let scored = pod_requests_scored(&pod, Release::of_minor(37));
        assert_eq!(
            (scored.milli_cpu, scored.memory),
            (2 * DEFAULT_MILLI_CPU_REQUEST, gi + DEFAULT_MEMORY_REQUEST),
            "each container's defaults; the pod level left out, as 1.37's Fit scorer"
        );
        let from_138 = pod_requests_scored(&pod, Release::of_minor(38));
        assert_eq!(
            (from_138.milli_cpu, from_138.memory),
            (1000, gi + DEFAULT_MEMORY_REQUEST),
            "1.38's Fit scorer: the pod level's cpu, the defaulted containers' memory"
        );
        assert_eq!(
            from_138.scalar.get("hugepages-2Mi"),
            Some(&(8 * 1024 * 1024)),
            "1.38: the pod level's huge pages"
        );
        let counted = pod_requests(&pod, true);
        assert_eq!(
            (counted.milli_cpu, counted.memory),
            (1000, gi),
            "a container names memory: no default"
        );
        for r in [&counted, &pod_requests(&pod, false)] {
            assert_eq!(
                r.scalar.get("hugepages-2Mi"),
                Some(&(8 * 1024 * 1024)),
                "the pod level's huge pages"
            );
        }
        assert_eq!(scored.scalar.get("hugepages-2Mi"), Some(&(4 * 1024 * 1024)));
        let plain = PodBuilder::new("p").req_cpu("200m").container().build();
        for minor in [36, 37, 38] {
            assert_eq!(
                pod_requests_scored(&plain, Release::of_minor(minor)),
                pod_requests(&plain, true),
                "without pod-level requests the two agree"
            );
        }
    }

    /// kube-scheduler 1.37's accounting of a running pod (component-helpers' PodRequests with
    /// status resources): the larger of the sums of spec, allocated and actuated requests, not
    /// the sum of each container's larger one (upstream's "max of sums instead of sum of maxes");
    /// from the pod-level status where the kubelet keeps it, which already holds the overhead,
    /// so the overhead counts twice, as upstream (kubernetes/kubernetes#139627).
    #[test]
    fn a_running_pod_counts_the_larger_sum_and_its_pod_level_status() {
        let pod = |status: serde_json::Value, overhead: Option<&str>| {
            let mut spec = serde_json::json!({"containers": [
                {"name": "c1", "resources": {"requests": {"cpu": "1"}}},
                {"name": "c2", "resources": {"requests": {"cpu": "2"}}},
            ]});
            if let Some(o) = overhead {
                spec["overhead"] = serde_json::json!({"cpu": o});
            }
            serde_json::from_value::<Pod>(serde_json::json!({
                "metadata": {"name": "p"}, "spec": spec, "status": status,
            }))
            .expect("a pod")
        };
        let resized = pod(
            serde_json::json!({"containerStatuses": [
                {"name": "c1", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                 "allocatedResources": {"cpu": "2"}},
                {"name": "c2", "image": "i", "imageID": "", "ready": true, "restartCount": 0,
                 "allocatedResources": {"cpu": "1"}},
            ]}),
            None,
        );
        assert_eq!(pod_requests(&resized, false).milli_cpu, 3000, "max of sums");
        let running = pod(
            serde_json::json!({"allocatedResources": {"cpu": "3250m"},
                "resources": {"requests": {"cpu": "3250m"}}}),
            Some("250m"),
        );
        assert_eq!(
            pod_requests(&running, false).milli_cpu,
            3500,
            "the pod-level status (overhead included) and the overhead again"
        );
        let pending = pod(serde_json::json!({}), Some("250m"));
        assert_eq!(pod_requests(&pending, false).milli_cpu, 3250);
    }

    /// Pod-level requests of a running pod as upstream's PodRequests reads them: the spec alone
    /// while the pod has no pod-level `status.resources` (even when a resize is infeasible);
    /// with one, the larger of the spec (dropped while infeasible), the running and the
    /// allocated requests, for every resource one of them names.
    #[test]
    fn pod_level_requests_of_a_running_pod_follow_its_pod_level_status() {
        let pod = |status: serde_json::Value| {
            serde_json::from_value::<Pod>(serde_json::json!({
                "metadata": {"name": "p"},
                "spec": {"resources": {"requests": {"cpu": "2"}},
                         "containers": [{"name": "c", "resources": {"requests": {"memory": "512Mi"}}}]},
                "status": status,
            }))
            .expect("a pod")
        };
        let infeasible = serde_json::json!([{"type": "PodResizePending", "status": "True", "reason": "Infeasible"}]);
        let cpu_mem = |p: &Pod| {
            let r = pod_requests(p, false);
            (r.milli_cpu, r.memory)
        };
        let mi = 1024 * 1024;
        assert_eq!(
            cpu_mem(&pod(serde_json::json!({"conditions": infeasible}))),
            (2000, 0),
            "no pod-level status: the pod level's spec, infeasible or not (the containers count \
             only what their statuses say while the resize is infeasible, here nothing)"
        );
        assert_eq!(
            cpu_mem(&pod(serde_json::json!({
                "resources": {"requests": {"cpu": "3"}},
                "allocatedResources": {"cpu": "2500m", "memory": "1Gi"},
            }))),
            (3000, 1024 * mi),
            "the larger of spec, running and allocated, for what any names"
        );
        assert_eq!(
            cpu_mem(&pod(serde_json::json!({
                "conditions": infeasible,
                "resources": {"requests": {"cpu": "1"}},
                "allocatedResources": {"cpu": "1500m"},
            }))),
            (1500, 0),
            "an infeasible resize: the spec left out (the statuses name no memory)"
        );
        assert_eq!(
            cpu_mem(&pod(
                serde_json::json!({"resources": {}, "allocatedResources": {"cpu": "1"}})
            )),
            (2000, 512 * mi),
            "allocated counts without running requests"
        );
    }

    #[test]
    fn a_resized_container_counts_the_larger_of_spec_actuated_and_allocated() {
        let resized = |spec: &str, actuated: &str, allocated: &str, infeasible: bool| {
            let pod = PodBuilder::new("p").req_cpu(spec).with(|p| {
                let name = p.spec.as_ref().map(|s| s.containers[0].name.clone());
                let list = |q: &str| Some([("cpu".to_string(), Quantity(q.into()))].into());
                let status: crate::k8s::pod::PodStatus =
                    serde_json::from_value(serde_json::json!({"containerStatuses": [{
                        "name": name, "image": "i", "imageID": "", "ready": true,
                        "restartCount": 0,
                    }]}))
                    .expect("status");
                let mut status = status;
                if let Some(cs) = status
                    .container_statuses
                    .as_mut()
                    .and_then(|c| c.first_mut())
                {
                    cs.resources = Some(k8s_openapi::api::core::v1::ResourceRequirements {
                        requests: list(actuated),
                        ..Default::default()
                    });
                    cs.allocated_resources = list(allocated);
                }
                if infeasible {
                    status.conditions = serde_json::from_value(serde_json::json!([{
                        "type": "PodResizePending", "status": "True", "reason": "Infeasible"}]))
                    .ok();
                }
                p.status = Some(status);
            });
            pod_requests(&pod.build(), false).milli_cpu
        };
        assert_eq!(
            resized("2", "1", "1", false),
            2000,
            "a pending resize up: the spec"
        );
        assert_eq!(
            resized("1", "2", "2", false),
            2000,
            "a pending resize down: what runs"
        );
        assert_eq!(
            resized("4", "1", "2", true),
            2000,
            "an infeasible resize: the spec no longer counts"
        );
    }

    #[test]
    fn non_zero_requests_default_missing_cpu_and_memory() {
        let r = pod_requests(&PodBuilder::new("p").container().build(), true);
        assert_eq!(
            (r.milli_cpu, r.memory),
            (DEFAULT_MILLI_CPU_REQUEST, DEFAULT_MEMORY_REQUEST)
        );
        let r = pod_requests(&PodBuilder::new("p").req_cpu("1").build(), true);
        assert_eq!((r.milli_cpu, r.memory), (1000, DEFAULT_MEMORY_REQUEST));
    }
}
