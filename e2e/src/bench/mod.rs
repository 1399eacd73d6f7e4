//! The scheduler bench (`make bench`): kube-scheduler, tether and a raw binder, one at a time,
//! on the same local cluster, each binding the same pods in a namespace of its own. Workloads
//! after upstream's scheduler_perf: SchedulingBasic, a hard zone spread with a soft hostname
//! spread, required pod anti-affinity, and preferred affinity to pods already running; and batch
//! Jobs behind a real Kueue (kueue.rs).
//!
//! What is measured comes from the bench's own watch of the pods (when each was seen bound) and
//! from /proc (the scheduler process's CPU time and peak resident memory), never from a
//! scheduler's own figures.

use std::collections::HashMap;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use futures::{StreamExt, TryStreamExt};
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, PostParams};

use crate::kubevirt;
use serde::Serialize;
use serde_json::{Value, json};

mod claims;
mod cpu;
mod kueue;
mod report;
mod start;

pub use kueue::{KueueResult, PODS_PER_JOB, kueue_report};
pub use report::{into_benchmarks, report, sweep_report, write_json};
pub use start::{
    ReadyResult, ScaleResult, node_images, ready_report, scale_report, start_to_ready,
};

use crate::ground_truth::{BindLedger, EventLedger};
use crate::{
    TestNamespace, TestNodes, apply, create_retried, free_local_addr, kubeconfig_path, repo_dir,
    retried, unique_suffix, wait_for,
};

/// Who binds the pods.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Contender {
    /// kube-scheduler of the control plane's release: default plugins, client QPS and burst
    /// 5,000, leader election off.
    KubeScheduler,
    /// tether with the default profile (kube-scheduler's default plugins), no client-side
    /// throttling below 5,000 requests a second.
    Tether,
    /// tether with StickyNode and PlacementHistory, one workload (a VirtualMachine) per pod: every
    /// bind also writes a StickyBinding.
    TetherHistory,
    /// The bench itself binding each pod round-robin with no logic: the ceiling of this control
    /// plane here.
    RawBinder,
}

impl Contender {
    pub const ALL: [Contender; 4] = [
        Contender::KubeScheduler,
        Contender::Tether,
        Contender::RawBinder,
        Contender::TetherHistory,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Contender::KubeScheduler => "kube-scheduler",
            Contender::Tether => "tether",
            Contender::TetherHistory => "tether (sticky + history)",
            Contender::RawBinder => "raw binder",
        }
    }
}

/// What the pods ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
pub enum Workload {
    /// 100m CPU and 200Mi each, nothing else (SchedulingBasic).
    Basic,
    /// A hard spread over zones (maxSkew 1) and a soft one over hostnames.
    Spread,
    /// Required anti-affinity per hostname to the pods of the same group; the groups are as
    /// many as it takes for each to fit one pod per node.
    AntiAffinity,
    /// Preferred affinity (per zone) to pods already running, a tenth as many as measured.
    PreferredAffinity,
    /// Gangs of [`GANG_SIZE`] pods (PodGroups of the Workload API, minCount their size), each
    /// placed whole in one group cycle; kube-scheduler runs with GenericWorkload on.
    Gang,
    /// The same gangs, each to be placed within one of the bench nodes' four racks (1.38's
    /// topology-aware placement); kube-scheduler runs with TopologyAwareWorkloadScheduling too.
    GangRacks,
    /// Gangs of higher priority whose members (4 CPUs each) fit nowhere until they preempt: a
    /// lower pod of 31 CPUs on every node first. Measures the time from a member's creation to
    /// its bind through the group's preemption (workload-aware preemption).
    GangPreempt,
    /// SchedulingBasic's pods under a profile whose PodTopologySpread has no default
    /// constraints (`defaultingType: List`), the one change that lets kube-scheduler sign them
    /// and batch them (OpportunisticBatching, on by default since 1.35: a pod like the one
    /// before takes the next node of that pod's ranking); tether runs the same profile.
    BasicBatchable,
    /// One GPU per pod through a ResourceClaimTemplate (DRA): the scheduler allocates a device
    /// to each pod's claim before it binds the pod (claims.rs).
    Claims,
}

/// The profile both schedulers run `workload` under (a KubeSchedulerProfile; a
/// SchedulingProfile's spec reads the same): the default plugins, and for
/// [`Workload::BasicBatchable`] PodTopologySpread without default constraints.
fn profile_for(scheduler: &str, workload: Workload) -> Value {
    let mut profile = json!({"schedulerName": scheduler});
    if workload == Workload::BasicBatchable {
        profile["pluginConfig"] =
            json!([{"name": "PodTopologySpread", "args": {"defaultingType": "List"}}]);
    }
    profile
}

/// The PriorityClasses of [`Workload::GangPreempt`]: the fillers' and the gangs'.
pub const PREEMPT_CLASSES: [(&str, i32); 2] = [("bench-low", 100), ("bench-high", 1000)];

/// The bench nodes' rack label (four racks, round-robin).
pub const RACK: &str = "e2e.tether.dev/rack";

/// The pods of one gang in the [`Workload::Gang`] workload.
pub const GANG_SIZE: usize = 16;

impl Workload {
    pub const ALL: [Workload; 4] = [
        Workload::Basic,
        Workload::Spread,
        Workload::AntiAffinity,
        Workload::PreferredAffinity,
    ];

    pub fn label(self) -> &'static str {
        match self {
            Workload::Basic => "SchedulingBasic",
            Workload::Spread => "TopologySpreading",
            Workload::AntiAffinity => "PodAntiAffinity",
            Workload::PreferredAffinity => "PreferredPodAffinity",
            Workload::Gang => "GangScheduling",
            Workload::GangRacks => "GangSchedulingRacks",
            Workload::GangPreempt => "GangSchedulingPreempting",
            Workload::Claims => "SchedulingWithResourceClaimTemplate",
            Workload::BasicBatchable => "SchedulingBasicBatchable",
        }
    }
}

/// Pods created before the scheduler starts (pure scheduling), or at a steady rate while it
/// runs (latency).
#[derive(Clone, Copy, Debug, PartialEq, Serialize)]
pub enum Mode {
    Batch,
    /// Pods per second.
    Steady(u32),
}

impl Mode {
    pub const KINDS: [&str; 2] = ["batch", "steady"];

    /// `batch` or `steady`, without the rate.
    pub fn kind(self) -> &'static str {
        match self {
            Mode::Batch => "batch",
            Mode::Steady(_) => "steady",
        }
    }
}

/// The figures of one run.
#[derive(Clone, Debug, Serialize)]
pub struct RunResult {
    pub contender: Contender,
    pub workload: Workload,
    pub mode: Mode,
    pub nodes: usize,
    pub pods: usize,
    /// From the first bind seen to the last.
    pub seconds: f64,
    pub pods_per_second: f64,
    /// The median of the binds seen in each whole second between the first bind and the last.
    pub pods_per_second_p50: f64,
    /// From the pod's creation (the create call's return) to its bind being seen.
    pub latency_p50_ms: f64,
    pub latency_p99_ms: f64,
    /// CPU time (user and system) of the scheduler process over its whole life; None for the
    /// raw binder, which runs in the bench.
    pub cpu_seconds: Option<f64>,
    pub cpu_ms_per_pod: Option<f64>,
    /// The process's peak resident memory (VmHWM).
    pub peak_rss_mib: Option<f64>,
    /// With the history profiles: seconds from the last bind seen until the StickyBindings
    /// had counted every bind (the scheduler writes history after the bind, off its binding
    /// cycle, and runs until it is written: its CPU time includes the writes).
    pub history_lag_seconds: Option<f64>,
    /// How many of the pods got a `Scheduled` event (the bench's own watch; a scheduler may
    /// drop events when they queue up), and seconds from the last bind seen until the last of
    /// them was seen: both schedulers write them after the bind. None for the raw binder.
    pub scheduled_events: Option<usize>,
    pub events_lag_seconds: Option<f64>,
    /// CPU milliseconds per pod the control plane (kube-apiserver, etcd,
    /// kube-controller-manager, kwok) and the bench itself (its watches; the raw binder's
    /// binds) spent from the scheduler's start until every pod and event was seen (cpu.rs).
    pub plane_cpu_ms_per_pod: Option<f64>,
    pub bench_cpu_ms_per_pod: Option<f64>,
}

/// The nodes every run uses, and a client.
pub struct Bench {
    client: kube::Client,
    pub nodes: TestNodes,
}

impl Bench {
    /// Creates `nodes` nodes of 32 CPUs (zones a/b/c and racks 0 to 3 round-robin).
    pub async fn new(client: kube::Client, nodes: usize) -> anyhow::Result<Self> {
        let nodes = TestNodes::create(&client, "bench", nodes, "32", |i, node| {
            node["metadata"]["labels"][RACK] = json!(format!("rack-{}", i % 4));
        })
        .await?;
        Ok(Bench { client, nodes })
    }

    /// Waits until the StickyBindings of `ns` have counted `pods` binds; returns when.
    async fn history_written(
        &self,
        ns: &str,
        pods: usize,
        deadline: Duration,
    ) -> anyhow::Result<Instant> {
        let api: Api<tether::api::StickyBinding> = Api::namespaced(self.client.clone(), ns);
        let counted = || async {
            let listed = api.list(&ListParams::default()).await?;
            Ok::<i64, anyhow::Error>(
                listed
                    .items
                    .iter()
                    .filter_map(|b| b.status.as_ref())
                    .map(|s| s.schedule_count)
                    .sum(),
            )
        };
        wait_for("every bind counted in history", deadline, || async {
            Ok((counted().await? >= pods as i64).then(Instant::now))
        })
        .await
        .with_context(|| format!("the StickyBindings of {ns} did not count {pods} binds"))
    }

    /// One run: a fresh namespace, `pods` pods of `workload` for `contender`, bound while the
    /// bench watches; the namespace's pods are gone again when it returns.
    pub async fn run(
        &self,
        contender: Contender,
        workload: Workload,
        mode: Mode,
        pods: usize,
    ) -> anyhow::Result<RunResult> {
        anyhow::ensure!(
            !(contender == Contender::RawBinder && workload == Workload::Claims),
            "the raw binder allocates no devices: it cannot bind pods with claims"
        );
        let ns = TestNamespace::create(&self.client, "bench").await?;
        let scheduler = format!("bench-{}", unique_suffix());
        let profile = match contender {
            Contender::Tether => Some(profile_for(&scheduler, workload)),
            Contender::TetherHistory => Some(
                json!({"schedulerName": scheduler, "plugins": {"multiPoint": {"enabled": [
                {"name": "StickyNode"}, {"name": "PlacementHistory", "weight": 5}]}}}),
            ),
            _ => None,
        };
        if let Some(spec) = &profile {
            apply(
                json!({"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
                "metadata": {"name": scheduler}, "spec": spec}),
            )?;
        }
        if workload == Workload::PreferredAffinity {
            self.running_pods(&ns.name, pods / 10, "100m", None).await?;
        }
        if workload == Workload::GangPreempt {
            for (name, value) in PREEMPT_CLASSES {
                apply(
                    json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                             "metadata": {"name": name}, "value": value}),
                )?;
            }
            // Every node nearly full of a lower pod: each gang must preempt.
            let nodes = self.nodes.names.len();
            self.running_pods(&ns.name, nodes, "31", Some(PREEMPT_CLASSES[0].0))
                .await?;
        }
        if matches!(
            workload,
            Workload::Gang | Workload::GangRacks | Workload::GangPreempt
        ) {
            for group in 0..pods.div_ceil(GANG_SIZE) {
                let size = GANG_SIZE.min(pods - group * GANG_SIZE);
                let mut spec = json!({"schedulingPolicy": {"gang": {"minCount": size}}});
                if workload == Workload::GangRacks {
                    spec["schedulingConstraints"] = json!({"topology": [{"key": RACK}]});
                }
                if workload == Workload::GangPreempt {
                    spec["priorityClassName"] = json!(PREEMPT_CLASSES[1].0);
                }
                apply(json!({
                    "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                    "metadata": {"name": format!("gang-{group}"), "namespace": ns.name},
                    "spec": spec,
                }))?;
            }
        }
        let devices = if workload == Workload::Claims {
            let per_node = claims::devices_per_node(pods, self.nodes.names.len());
            let published =
                claims::Devices::publish(&self.client, &self.nodes, &ns.name, &scheduler, per_node);
            Some(published.await?)
        } else {
            None
        };
        // Only the measured pods carry the label `bench`.
        let seen = BindLedger::start(&self.client, &ns.name, "bench");
        // The measured pods are `pod-<i>` (not the warm-up pod of a steady run).
        let events = EventLedger::start(&self.client, &ns.name, "pod-");
        let created: Arc<Mutex<HashMap<String, Instant>>> = Arc::default();
        let maker = PodMaker {
            client: self.client.clone(),
            ns: ns.name.clone(),
            workload,
            pods,
            nodes: self.nodes.names.len(),
            owned: contender == Contender::TetherHistory,
            template: self.template(&scheduler, workload),
        };
        let result = async {
            let window;
            let process = match mode {
                Mode::Batch => {
                    maker.create_all(&created, None).await?;
                    if workload == Workload::Claims {
                        let deadline =
                            Duration::from_secs(60).max(Duration::from_millis(pods as u64 * 20));
                        claims::wait_for_claims(&self.client, &ns.name, pods, deadline).await?;
                    }
                    window = cpu::CpuWindow::start()?;
                    self.start(contender, workload, &scheduler, &ns.name, &created)
                        .await?
                }
                Mode::Steady(rate) => {
                    anyhow::ensure!(
                        contender != Contender::RawBinder,
                        "the raw binder binds the pods made before it starts: batch mode only"
                    );
                    window = cpu::CpuWindow::start()?;
                    let process = self
                        .start(contender, workload, &scheduler, &ns.name, &created)
                        .await?;
                    // Timed from a scheduler that serves: one pod first, outside the figures.
                    maker.warm_up().await?;
                    maker.create_all(&created, Some(rate)).await?;
                    process
                }
            };
            let deadline = Duration::from_secs(120).max(Duration::from_millis(pods as u64 * 40));
            wait_for("every bench pod bound", deadline, || async {
                Ok((seen.len() >= pods).then_some(()))
            })
            .await
            .with_context(|| format!("{} bound {} of {pods}", contender.label(), seen.len()))?;
            let history_done = if contender == Contender::TetherHistory {
                Some(self.history_written(&ns.name, pods, deadline).await?)
            } else {
                None
            };
            let events_seen = match contender {
                Contender::RawBinder => None,
                _ => Some(events_written(&events, pods, deadline).await),
            };
            let usage = match &process {
                Some(p) => Some(p.usage()?),
                None => None,
            };
            let elsewhere = Some(window.since()?);
            drop(process);
            let created = created.lock().map_err(|_| anyhow!("poisoned"))?.clone();
            Ok::<_, anyhow::Error>(summarize(
                contender,
                workload,
                mode,
                self.nodes.names.len(),
                pods,
                &seen.seen_at(),
                &created,
                usage,
                history_done,
                events_seen,
                elsewhere,
            ))
        }
        .await;
        drop((seen, events));
        if profile.is_some() {
            let _ = crate::kubectl_ok(&["delete", "sp", &scheduler, "--wait=false"], None);
        }
        // The run's devices go first: a failing clean-up below must not leave them behind.
        let devices_gone = match devices {
            Some(devices) => devices.delete().await,
            None => Ok(()),
        };
        empty(&self.client, &ns.name).await?;
        ns.delete().await?;
        devices_gone?;
        result
    }

    /// Pods already running (bound by the bench, labelled `existing=yes`), of `cpu` each and
    /// PriorityClass `class` when given: the preferred affinity workload's, and the lower pods
    /// the preempting gangs evict.
    async fn running_pods(
        &self,
        ns: &str,
        count: usize,
        cpu: &str,
        class: Option<&str>,
    ) -> anyhow::Result<()> {
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), ns);
        let nodes = self.nodes.names.clone();
        futures::stream::iter(0..count)
            .map(|i| {
                let (pods, node) = (pods.clone(), nodes[i % nodes.len()].clone());
                let mut spec = json!({"nodeName": node, "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "c", "image": "pause",
                    "resources": {"requests": {"cpu": cpu, "memory": "200Mi"}}}]});
                if let Some(class) = class {
                    spec["priorityClassName"] = json!(class);
                }
                self.nodes.isolate(&mut spec);
                async move {
                    let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": format!("existing-{i}"), "labels": {"existing": "yes"}},
                        "spec": spec}))?;
                    let params = PostParams::default();
                    create_retried("creating a running pod", || pods.create(&params, &pod)).await
                }
            })
            .buffer_unordered(32)
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    /// The pod spec of `workload` (an anti-affinity pod's term is added per pod, for its group).
    fn template(&self, scheduler: &str, workload: Workload) -> Value {
        let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause",
            "resources": {"requests": {"cpu": "100m", "memory": "200Mi"}}}]});
        self.nodes.isolate(&mut spec);
        match workload {
            Workload::Basic
            | Workload::BasicBatchable
            | Workload::AntiAffinity
            | Workload::Gang
            | Workload::GangRacks => {}
            Workload::Claims => claims::ask_for_a_gpu(&mut spec),
            Workload::GangPreempt => {
                spec["containers"][0]["resources"]["requests"]["cpu"] = json!("4");
                spec["priorityClassName"] = json!(PREEMPT_CLASSES[1].0);
            }
            Workload::Spread => {
                spec["topologySpreadConstraints"] = json!([
                    {"maxSkew": 1, "topologyKey": "topology.kubernetes.io/zone", "whenUnsatisfiable": "DoNotSchedule",
                     "labelSelector": {"matchLabels": {"bench": "spread"}}},
                    {"maxSkew": 1, "topologyKey": "kubernetes.io/hostname", "whenUnsatisfiable": "ScheduleAnyway",
                     "labelSelector": {"matchLabels": {"bench": "spread"}}},
                ]);
            }
            Workload::PreferredAffinity => {
                spec["affinity"] = json!({"podAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 1, "podAffinityTerm": {"topologyKey": "topology.kubernetes.io/zone",
                     "labelSelector": {"matchLabels": {"existing": "yes"}}}}]}});
            }
        }
        spec
    }

    /// Starts `contender` (the raw binder as a task of the bench); None for the raw binder.
    async fn start(
        &self,
        contender: Contender,
        workload: Workload,
        scheduler: &str,
        ns: &str,
        created: &Arc<Mutex<HashMap<String, Instant>>>,
    ) -> anyhow::Result<Option<Process>> {
        match contender {
            Contender::KubeScheduler => Process::kube_scheduler(scheduler, workload).map(Some),
            Contender::Tether | Contender::TetherHistory => {
                Process::tether(scheduler).await.map(Some)
            }
            Contender::RawBinder => {
                raw_bind(
                    self.client.clone(),
                    ns,
                    created.clone(),
                    self.nodes.names.clone(),
                );
                Ok(None)
            }
        }
    }
}

/// Makes the measured pods.
struct PodMaker {
    client: kube::Client,
    ns: String,
    workload: Workload,
    pods: usize,
    nodes: usize,
    /// Each pod owned by a VirtualMachineInstance of a VirtualMachine of its own.
    owned: bool,
    template: Value,
}

impl PodMaker {
    /// Creates every pod, at `rate` a second or as fast as the API server takes them, noting
    /// when each create returned.
    async fn create_all(
        &self,
        created: &Arc<Mutex<HashMap<String, Instant>>>,
        rate: Option<u32>,
    ) -> anyhow::Result<()> {
        let started = Instant::now();
        futures::stream::iter(0..self.pods)
            .map(|i| async move {
                if let Some(rate) = rate {
                    let due = started + Duration::from_secs_f64(i as f64 / f64::from(rate.max(1)));
                    tokio::time::sleep_until(due.into()).await;
                }
                let name = self.create(i).await?;
                created
                    .lock()
                    .map_err(|_| anyhow!("poisoned"))?
                    .insert(name, Instant::now());
                Ok::<_, anyhow::Error>(())
            })
            .buffer_unordered(if rate.is_some() { 256 } else { 48 })
            .try_collect::<Vec<_>>()
            .await?;
        Ok(())
    }

    /// One pod like the measured ones but not counted, bound before the measure starts.
    async fn warm_up(&self) -> anyhow::Result<()> {
        let pod: Pod = serde_json::from_value(json!({"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "warm-up"}, "spec": self.template}))?;
        Api::<Pod>::namespaced(self.client.clone(), &self.ns)
            .create(&PostParams::default(), &pod)
            .await?;
        crate::wait_bound(&self.client, &self.ns, "warm-up", Duration::from_secs(60)).await?;
        Ok(())
    }

    async fn create(&self, i: usize) -> anyhow::Result<String> {
        let name = format!("pod-{i}");
        let mut spec = self.template.clone();
        let mut labels = json!({"bench": "measured"});
        match self.workload {
            Workload::Spread => labels = json!({"bench": "spread"}),
            Workload::Gang | Workload::GangRacks | Workload::GangPreempt => {
                spec["schedulingGroup"] =
                    json!({"podGroupName": format!("gang-{}", i / GANG_SIZE)});
            }
            Workload::AntiAffinity => {
                let groups = self.pods.div_ceil(self.nodes.max(1)).max(1);
                let group = format!("g{}", i % groups);
                labels = json!({"bench": "measured", "group": group});
                spec["affinity"] = json!({"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname", "labelSelector": {"matchLabels": {"group": group}}}]}});
            }
            _ => {}
        }
        let mut metadata = json!({"name": name, "labels": labels});
        if self.owned {
            metadata["ownerReferences"] = self.owner(&name).await?;
        }
        let pod: Pod = serde_json::from_value(
            json!({"apiVersion": "v1", "kind": "Pod", "metadata": metadata, "spec": spec}),
        )?;
        let pods = Api::<Pod>::namespaced(self.client.clone(), &self.ns);
        let params = PostParams::default();
        create_retried(&format!("creating bench pod {name}"), || {
            pods.create(&params, &pod)
        })
        .await?;
        Ok(name)
    }

    /// A VirtualMachine and its VirtualMachineInstance named `name`: the VMI is the pod's
    /// controller, as KubeVirt's virt-launcher pods have it.
    async fn owner(&self, name: &str) -> anyhow::Result<Value> {
        let owner_ref = |kind: &str, uid: Option<String>| {
            json!([{"apiVersion": "kubevirt.io/v1", "kind": kind, "name": name,
                    "uid": uid.unwrap_or_default(), "controller": true, "blockOwnerDeletion": true}])
        };
        let vms: Api<DynamicObject> =
            Api::namespaced_with(self.client.clone(), &self.ns, &kubevirt("VirtualMachine"));
        let vm = vms
            .create(
                &PostParams::default(),
                &DynamicObject::new(name, &kubevirt("VirtualMachine")),
            )
            .await?;
        let vmis: Api<DynamicObject> = Api::namespaced_with(
            self.client.clone(),
            &self.ns,
            &kubevirt("VirtualMachineInstance"),
        );
        let mut vmi = DynamicObject::new(name, &kubevirt("VirtualMachineInstance"));
        vmi.metadata.owner_references =
            serde_json::from_value(owner_ref("VirtualMachine", vm.metadata.uid))?;
        let vmi = vmis.create(&PostParams::default(), &vmi).await?;
        Ok(owner_ref("VirtualMachineInstance", vmi.metadata.uid))
    }
}

/// Binds each created pod to the next node round-robin, 32 binds in flight.
fn raw_bind(
    client: kube::Client,
    ns: &str,
    created: Arc<Mutex<HashMap<String, Instant>>>,
    nodes: Vec<String>,
) {
    let pods: Api<Pod> = Api::namespaced(client, ns);
    tokio::spawn(async move {
        let names: Vec<String> = match created.lock() {
            Ok(c) => c.keys().cloned().collect(),
            Err(_) => return,
        };
        futures::stream::iter(names.into_iter().enumerate())
            .for_each_concurrent(32, |(i, name)| {
                let (pods, node) = (pods.clone(), nodes[i % nodes.len()].clone());
                async move {
                    let binding = json!({"apiVersion": "v1", "kind": "Binding",
                        "metadata": {"name": name}, "target": {"kind": "Node", "name": node}});
                    // A retried bind whose first try was carried out is refused (409): it counts
                    // once in the bench's watch all the same.
                    let params = PostParams::default();
                    if let Err(e) = retried(&format!("raw bind of {name}"), || {
                        pods.create_subresource::<Value, Value>("binding", &name, &params, &binding)
                    })
                    .await
                    {
                        eprintln!("{e:#}");
                    }
                }
            })
            .await;
    });
}

/// Waits until `events` counts a `Scheduled` event for each of `pods`, or `deadline` passes,
/// or 15 s pass with no new one (a scheduler that dropped events writes no more); returns how
/// many pods got one and when the last was seen.
async fn events_written(
    events: &EventLedger,
    pods: usize,
    deadline: Duration,
) -> (usize, Option<Instant>) {
    const QUIET: Duration = Duration::from_secs(15);
    let give_up = Instant::now() + deadline;
    let (mut count, mut changed) = (events.seen().0, Instant::now());
    loop {
        let (now_seen, last) = events.seen();
        if now_seen != count {
            (count, changed) = (now_seen, Instant::now());
        }
        if now_seen >= pods || changed.elapsed() >= QUIET || Instant::now() >= give_up {
            return (now_seen, last);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Deletes every pod of `ns` at once and waits until they are gone, so that the next run finds
/// the nodes empty. The API server deletes a collection one pod at a time (about 120 a second
/// here) and stops when the request times out, as it does for tens of thousands: the deletion
/// is asked again whenever a minute passes with pods left.
async fn empty(client: &kube::Client, ns: &str) -> anyhow::Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), ns);
    let (delete, list) = (
        DeleteParams::default().grace_period(0),
        ListParams::default(),
    );
    let one = ListParams::default().limit(1);
    let deadline = Instant::now() + Duration::from_secs(3600);
    loop {
        let asked = Instant::now();
        let answer = tokio::time::timeout(
            Duration::from_secs(60),
            pods.delete_collection(&delete, &list),
        )
        .await;
        if let Ok(Err(e)) = answer {
            eprintln!("deleting the bench pods of {ns}: {e} (asked again while pods are left)");
        }
        loop {
            let left = retried("listing the bench pods", || pods.list_metadata(&one)).await?;
            if left.items.is_empty() {
                return Ok(());
            }
            if Instant::now() >= deadline {
                bail!("the pods of {ns} were not gone within an hour");
            }
            if asked.elapsed() >= Duration::from_secs(60) {
                break;
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// A scheduler process of the bench, killed when dropped.
struct Process {
    child: Child,
}

/// CPU seconds and peak resident MiB of a process.
type Usage = (f64, f64);

impl Process {
    /// kube-scheduler for `workload` (with GenericWorkload on for gangs).
    fn kube_scheduler(scheduler: &str, workload: Workload) -> anyhow::Result<Self> {
        let gates = match workload {
            Workload::Gang | Workload::GangPreempt => Some("GenericWorkload=true"),
            Workload::GangRacks => {
                Some("GenericWorkload=true,TopologyAwareWorkloadScheduling=true")
            }
            _ => None,
        };
        Self::kube_scheduler_serving(profile_for(scheduler, workload), None, gates)
    }

    /// kube-scheduler, serving its probes on `port` when given (its own certificate, in a
    /// directory of its own under .cluster/).
    fn kube_scheduler_serving(
        profile: Value,
        port: Option<u16>,
        gates: Option<&str>,
    ) -> anyhow::Result<Self> {
        let bin = crate::reference::kube_scheduler_bin()?;
        let logs = repo_dir().join(".cluster/logs");
        std::fs::create_dir_all(&logs)?;
        let config = logs.join("bench-kube-scheduler.yaml");
        let doc = json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "KubeSchedulerConfiguration",
            "clientConnection": {"kubeconfig": kubeconfig_path(), "qps": 5000, "burst": 5000},
            "leaderElection": {"leaderElect": false},
            "profiles": [profile],
        });
        std::fs::write(&config, serde_json::to_string(&doc)?)?;
        let log = std::fs::File::create(logs.join("bench-kube-scheduler.log"))?;
        let mut cmd = Command::new(&bin);
        cmd.arg(format!("--config={}", config.display()));
        if let Some(gates) = gates {
            cmd.arg(format!("--feature-gates={gates}"));
        }
        match port {
            Some(port) => {
                let certs = repo_dir().join(".cluster/bench-kube-scheduler-certs");
                cmd.arg(format!("--secure-port={port}"))
                    .arg("--bind-address=127.0.0.1")
                    .arg(format!("--cert-dir={}", certs.display()));
            }
            None => {
                cmd.arg("--secure-port=0");
            }
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok(Process { child })
    }

    /// The tether binary as shipped (`$TETHER_BIN`, else target/dist/tether, as `make bench` builds it) as
    /// the tether ServiceAccount, with its API budgets opened to 5,000 a second.
    async fn tether(scheduler: &str) -> anyhow::Result<Self> {
        Ok(Self::tether_with_health(scheduler).await?.0)
    }

    /// As [`Process::tether`], with the address its probes are served on.
    async fn tether_with_health(scheduler: &str) -> anyhow::Result<(Self, std::net::SocketAddr)> {
        let bin = std::env::var_os("TETHER_BIN")
            .map(PathBuf::from)
            .unwrap_or_else(|| repo_dir().join("target/dist/tether"));
        let log = std::fs::File::create(repo_dir().join(".cluster/logs/bench-tether.log"))?;
        let (metrics, health) = (free_local_addr()?, free_local_addr()?);
        let mut cmd = Command::new(&bin);
        cmd.args(["run", "--http-addr", &metrics.to_string()])
            .args(["--health-addr", &health.to_string()])
            .args(["--instance", &format!("bench-{scheduler}")]);
        for budget in ["events", "history", "status"] {
            cmd.args([format!("--{budget}-qps"), "5000".into()])
                .args([format!("--{budget}-burst"), "5000".into()]);
        }
        let child = cmd
            .env("KUBECONFIG", repo_dir().join(".cluster/tether.kubeconfig"))
            .env("RUST_LOG", "info")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .spawn()
            .with_context(|| format!("starting {}", bin.display()))?;
        Ok((Process { child }, health))
    }

    /// CPU seconds used so far and peak resident memory, from /proc.
    fn usage(&self) -> anyhow::Result<Usage> {
        let pid = self.child.id();
        let cpu = cpu::cpu_seconds(pid)?;
        let peak_kib = crate::process_memory_kib(pid, "VmHWM")?;
        Ok((cpu, peak_kib as f64 / 1024.0))
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value at quantile `q` of sorted `values`.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    if sorted.is_empty() {
        return 0.0;
    }
    let i = ((sorted.len() - 1) as f64 * q).round() as usize;
    sorted[i.min(sorted.len() - 1)]
}

#[allow(clippy::too_many_arguments)]
fn summarize(
    contender: Contender,
    workload: Workload,
    mode: Mode,
    nodes: usize,
    pods: usize,
    bound: &HashMap<String, Instant>,
    created: &HashMap<String, Instant>,
    usage: Option<Usage>,
    history_done: Option<Instant>,
    events_seen: Option<(usize, Option<Instant>)>,
    elsewhere: Option<(f64, f64)>,
) -> RunResult {
    let mut times: Vec<Instant> = bound.values().copied().collect();
    times.sort();
    let (first, last) = match (times.first(), times.last()) {
        (Some(f), Some(l)) => (*f, *l),
        _ => (Instant::now(), Instant::now()),
    };
    let seconds = last.duration_since(first).as_secs_f64().max(1e-3);
    let whole = seconds.floor() as usize;
    let mut per_second = vec![0.0; whole.max(1)];
    for t in &times {
        let s = t.duration_since(first).as_secs_f64() as usize;
        if s < whole {
            per_second[s] += 1.0;
        }
    }
    per_second.sort_by(f64::total_cmp);
    let mut latencies: Vec<f64> = bound
        .iter()
        .filter_map(|(name, at)| {
            let made = created.get(name)?;
            Some(at.saturating_duration_since(*made).as_secs_f64() * 1000.0)
        })
        .collect();
    latencies.sort_by(f64::total_cmp);
    RunResult {
        contender,
        workload,
        mode,
        nodes,
        pods,
        seconds,
        pods_per_second: pods as f64 / seconds,
        pods_per_second_p50: if whole == 0 {
            pods as f64 / seconds
        } else {
            quantile(&per_second, 0.5)
        },
        latency_p50_ms: quantile(&latencies, 0.5),
        latency_p99_ms: quantile(&latencies, 0.99),
        cpu_seconds: usage.map(|u| u.0),
        cpu_ms_per_pod: usage.map(|u| u.0 * 1000.0 / pods.max(1) as f64),
        peak_rss_mib: usage.map(|u| u.1),
        history_lag_seconds: history_done
            .map(|done| done.saturating_duration_since(last).as_secs_f64()),
        scheduled_events: events_seen.map(|(count, _)| count),
        events_lag_seconds: events_seen
            .and_then(|(_, at)| at)
            .map(|at| at.saturating_duration_since(last).as_secs_f64()),
        plane_cpu_ms_per_pod: elsewhere.map(|(plane, _)| plane * 1000.0 / pods.max(1) as f64),
        bench_cpu_ms_per_pod: elsewhere.map(|(_, bench)| bench * 1000.0 / pods.max(1) as f64),
    }
}
