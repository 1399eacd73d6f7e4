//! DefaultPreemption: when a pod fits nowhere, find a node where evicting pods of lower
//! priority makes room, nominate the pod to it and evict them, as kube-scheduler's
//! DefaultPreemption PostFilter plugin (with its asynchronous preemption, on by default in
//! 1.36).
//!
//! Only nodes whose filters said `Unschedulable` are tried, never those that said
//! `UnschedulableAndUnresolvable`: a pod pinned by StickyNode therefore preempts only on its
//! pinned node. Among the nodes tried, the choice follows upstream's order (budget
//! violations, victims' priorities, their number, their start times).
//!
//! Differences from upstream: a victim waiting at Permit or in PreBind is evicted through
//! the API like any other (upstream stops it in memory); and instead of holding the preemptor
//! at PreEnqueue while the evictions run, a victim counts as going from the moment its eviction
//! is decided ([`evictions`]): a retry before the API's answer reaches the cache is told that a
//! pod on its nominated node is terminating, and another preemptor never reprieves a going pod
//! nor evicts it a second time.

pub mod actuate;
pub mod args;
pub mod dry_run;
pub mod evictions;
pub mod group;
#[cfg(test)]
mod tests;

use std::collections::HashMap;
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;
use rand::Rng;
use rayon::prelude::*;

use self::args::DefaultPreemptionArgs;
use self::dry_run::{Candidate, DryRun};
use self::evictions::Evictions;
use crate::gate::WriteGate;
use crate::recorder::EventWriter;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::runtime::{Diagnosis, nominated_node, priority};
use crate::scheduler::framework::validation::{FieldErrors, FieldPath, decode_args};
use crate::scheduler::framework::{
    Code, Nomination, Plugin, PostFilterContext, PostFilterPlugin, Status,
};
use crate::scheduler::informers::disruption_budgets::DisruptionBudgets;
use crate::scheduler::plugins::handle::Handle;

pub const NAME: &str = "DefaultPreemption";
pub const NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// The plugin.
pub struct DefaultPreemption {
    args: DefaultPreemptionArgs,
    budgets: Arc<DisruptionBudgets>,
    client: Option<kube::Client>,
    events: Option<EventWriter>,
    /// Asked before the evictions are written.
    gate: WriteGate,
    /// The evictions decided and not seen in the cache yet, shared by every profile.
    evictions: Arc<Evictions>,
    /// Where evictions run; `None` outside a tokio runtime (unit tests), where they do not.
    runtime: Option<tokio::runtime::Handle>,
    /// Tries the preemptor again when its evictions fail.
    activator: Option<Arc<dyn crate::scheduler::framework::PodActivator>>,
    /// Counts the attempts and victims (kube-scheduler's preemption metrics).
    metrics: Option<Arc<crate::scheduler::metrics::Metrics>>,
    /// The release whose rules apply where releases differ (a victim that has not started).
    release: crate::k8s::release::Release,
}

impl Plugin for DefaultPreemption {
    fn name(&self) -> &'static str {
        NAME
    }
    fn events_to_register(&self) -> Option<Vec<crate::scheduler::framework::events::Registration>> {
        Some(Vec::new())
    }
    fn post_filter(&self) -> Option<&dyn PostFilterPlugin> {
        Some(self)
    }
    fn group_post_filter(
        &self,
    ) -> Option<&dyn crate::scheduler::framework::group_post_filter::GroupPostFilterPlugin> {
        Some(self)
    }
}

/// Whether a dry run must run PreFilters again on each changed node: only those that read
/// other pods and did not skip this pod in its cycle (`state`). Taking pods off a node, all a
/// dry run does to the cycle's snapshot, never ends a skip (no spread constraint appears, no
/// existing pod's anti-affinity or claim starts to matter), so a skipped one stands and the
/// node list is not copied for it: at 5,000 nodes that copy was most of a preemption.
fn fresh_pre_filter(
    profile: &crate::scheduler::framework::profile::CompiledProfile,
    state: &crate::scheduler::framework::CycleState,
) -> bool {
    profile
        .pre_filter
        .iter()
        .any(|p| p.pre_filter_reads_pods() && !state.skips_filter(p.name()))
}

/// Whether a pod is going away because a scheduler preempted it (this one's decision counts
/// before the API has it).
fn preempted(pod: &crate::k8s::pod::Pod, evictions: &Evictions) -> bool {
    evictions.started_here(pod)
        || pod.metadata.deletion_timestamp.is_some()
            && pod
                .status
                .as_ref()
                .and_then(|s| s.conditions.as_ref())
                .and_then(|cs| cs.iter().find(|c| c.type_ == "DisruptionTarget"))
                .is_some_and(|c| {
                    c.status == "True" && c.reason.as_deref() == Some("PreemptionByScheduler")
                })
}

/// Why the pod may not preempt, if it may not (upstream's PodEligibleToPreemptOthers).
fn not_eligible(ctx: &PostFilterContext<'_>, evictions: &Evictions) -> Option<&'static str> {
    let pod = &ctx.pod.pod;
    if pod
        .spec
        .as_ref()
        .and_then(|s| s.preemption_policy.as_deref())
        == Some("Never")
    {
        return Some("not eligible due to preemptionPolicy=Never.");
    }
    // The nomination this scheduler made, before the API may have it.
    let nominated = ctx
        .nominated
        .node_of(ctx.pod.uid())
        .or_else(|| nominated_node(pod).map(String::from))?;
    if code_of(ctx.diagnosis, &nominated) == Code::UnschedulableAndUnresolvable {
        return None;
    }
    let own = priority(pod);
    let node = ctx.snapshot.get(&nominated)?;
    node.pods
        .iter()
        .any(|p| priority(&p.pod) < own && preempted(&p.pod, evictions))
        .then_some("not eligible due to a terminating pod on the nominated node.")
}

/// The code the filters gave `node` (the nodes without a status of their own share PreFilter's
/// rejection or the absent nodes' status, UnschedulableAndUnresolvable by default).
fn code_of(diagnosis: &Diagnosis, node: &str) -> Code {
    if let Some(status) = &diagnosis.pre_filter_status {
        return status.code;
    }
    diagnosis
        .node_statuses
        .iter()
        .find(|(n, _)| n == node)
        .map(|(_, s)| s.code)
        .or(diagnosis.absent_nodes_status.as_ref().map(|s| s.code))
        .unwrap_or(Code::UnschedulableAndUnresolvable)
}

/// The nodes worth a dry run: those the filters found `Unschedulable` (resolvable).
fn potential_nodes<'a>(ctx: &PostFilterContext<'a>) -> Vec<&'a Arc<NodeInfo>> {
    let d = ctx.diagnosis;
    if let Some(status) = &d.pre_filter_status {
        return if status.code == Code::Unschedulable {
            ctx.snapshot.nodes().iter().collect()
        } else {
            Vec::new()
        };
    }
    let explicit: HashMap<&str, Code> = d
        .node_statuses
        .iter()
        .map(|(n, s)| (n.as_str(), s.code))
        .collect();
    let absent = d
        .absent_nodes_status
        .as_ref()
        .map_or(Code::UnschedulableAndUnresolvable, |s| s.code);
    ctx.snapshot
        .nodes()
        .iter()
        .filter(|n| explicit.get(n.name.as_str()).copied().unwrap_or(absent) == Code::Unschedulable)
        .collect()
}

/// How many nodes are dry-run at once.
const CHUNK: usize = 16;

impl DefaultPreemption {
    /// Dry-runs the potential nodes from a random offset until enough candidates are found:
    /// the candidates (those without budget violations first), and why each other node tried
    /// could not help.
    fn find_candidates(
        &self,
        ctx: &PostFilterContext<'_>,
        potential: &[&Arc<NodeInfo>],
        now: Timestamp,
    ) -> (Vec<Candidate>, Vec<(String, Status)>) {
        let wanted = self.args.num_candidates(potential.len());
        let offset = rand::rng().random_range(0..potential.len());
        let budgets = self.budgets.all();
        let dry_run = DryRun {
            ctx,
            budgets: &budgets,
            fresh_pre_filter: fresh_pre_filter(ctx.profile, ctx.state),
            // A Filter that skips this pod (DynamicResources for a pod without claims) needs
            // not be told: the cycle state is then not copied for each check.
            removed_pods_matter: ctx
                .profile
                .filter
                .iter()
                .any(|p| p.filter_reads_removed_pods() && !ctx.state.skips_filter(p.name())),
            now,
            release: self.release,
            evictions: &self.evictions,
        };
        let order: Vec<&Arc<NodeInfo>> = (0..potential.len())
            .map(|i| potential[(offset + i) % potential.len()])
            .collect();
        let (mut fine, mut violating, mut failed) = (Vec::new(), Vec::new(), Vec::new());
        for chunk in order.chunks(CHUNK) {
            let results: Vec<Result<Candidate, (String, Status)>> = chunk
                .par_iter()
                .map(|n| dry_run.select_victims(n).map_err(|s| (n.name.clone(), s)))
                .collect();
            for r in results {
                match r {
                    Ok(c) if c.pdb_violations == 0 => {
                        if fine.len() < wanted {
                            fine.push(c)
                        }
                    }
                    Ok(c) => {
                        if violating.len() < wanted {
                            violating.push(c)
                        }
                    }
                    Err(f) => failed.push(f),
                }
            }
            if !fine.is_empty() && fine.len() + violating.len() >= wanted {
                break;
            }
        }
        fine.extend(violating);
        (fine, failed)
    }
}

impl PostFilterPlugin for DefaultPreemption {
    /// Every run counts as a preemption attempt, and a preemption decided observes its
    /// victims, as kube-scheduler's metrics count them.
    fn post_filter(&self, ctx: &PostFilterContext<'_>) -> (Nomination, Status) {
        let mut victims = None;
        let verdict = self.preempt(ctx, &mut victims);
        if let Some(metrics) = &self.metrics {
            metrics.preemption_attempt(victims);
        }
        verdict
    }
}

impl DefaultPreemption {
    /// The PostFilter's decision; `victims` is set to the chosen node's victims when it
    /// preempts.
    fn preempt(
        &self,
        ctx: &PostFilterContext<'_>,
        victims: &mut Option<usize>,
    ) -> (Nomination, Status) {
        let say = |code, message: String| Status::new(code, format!("preemption: {message}"));
        if let Some(why) = not_eligible(ctx, &self.evictions) {
            return (Nomination::Keep, say(Code::Unschedulable, why.to_string()));
        }
        // The start time of a pod that has not started: now until 1.38, from 1.38 the latest
        // time there is (kube-scheduler's GetPodStartTime).
        let now = if self.release.at_least(38) {
            Timestamp::MAX
        } else {
            Timestamp::now()
        };
        let potential = potential_nodes(ctx);
        let (candidates, failed) = if potential.is_empty() {
            (Vec::new(), Vec::new())
        } else {
            self.find_candidates(ctx, &potential, now)
        };
        if candidates.is_empty() {
            let errors: Vec<String> = failed
                .iter()
                .filter(|(_, s)| s.code == Code::Error)
                .map(|(_, s)| s.message())
                .collect();
            if !errors.is_empty() {
                let joined = match errors.as_slice() {
                    [one] => one.clone(),
                    many => format!("[{}]", many.join(", ")),
                };
                return (Nomination::Keep, say(Code::Error, joined));
            }
            let fit = Diagnosis {
                num_all_nodes: ctx.snapshot.len(),
                node_statuses: failed,
                absent_nodes_status: Some(Status::unresolvable(NOT_HELPFUL)),
                ..Default::default()
            };
            return (Nomination::Clear, say(Code::Unschedulable, fit.message()));
        }
        let Some(best) = dry_run::pick(&candidates, now) else {
            return (
                Nomination::Keep,
                say(
                    Code::Unschedulable,
                    "no candidate node for preemption".into(),
                ),
            );
        };
        *victims = Some(best.victims.len());
        if let Some(metrics) = &self.metrics {
            metrics.pdb_violations("pod", best.pdb_violations);
        }
        let own = priority(&ctx.pod.pod);
        // From 1.37 it says where the pod is going, after the filters' reasons; 1.36 says
        // nothing.
        let found = if self.release.at_least(37) {
            say(
                Code::Success,
                format!(
                    "found a potential placement for pod on node {}, preempting {} victims",
                    best.node,
                    best.victims.len()
                ),
            )
        } else {
            Status::success()
        };
        let victims = self.evictions.start(best.victims.iter().map(|v| &v.pod));
        if victims.is_empty() {
            // Every victim is already going: nothing to carry out, as upstream.
            return (Nomination::Node(best.node.clone()), found);
        }
        let outranked = ctx
            .nominated
            .for_node(&best.node)
            .into_iter()
            .filter(|p| priority(&p.pod) < own)
            .map(|p| p.pod.clone())
            .collect();
        let preemption = actuate::Preemption {
            preemptor: actuate::Preemptor::Pod(ctx.pod.pod.clone()),
            node: best.node.clone(),
            victims,
            outranked,
        };
        tracing::info!(
            pod = %ctx.pod.key(),
            node = %best.node,
            victims = best.victims.len(),
            evicting = preemption.victims.len(),
            "preempting"
        );
        self.carry_out(preemption);
        (Nomination::Node(best.node.clone()), found)
    }
}

impl DefaultPreemption {
    /// Starts carrying `preemption` out off the cycle: its preemptor (the pod, or the group's
    /// members) is not tried again until the writes end (upstream's PreEnqueue while
    /// preempting). Nothing runs outside a tokio runtime or without a client (unit tests).
    fn carry_out(&self, preemption: actuate::Preemption) {
        let (Some(client), Some(runtime)) = (&self.client, &self.runtime) else {
            return;
        };
        if let Some(activator) = &self.activator {
            for pod in preemption.preemptor.held() {
                activator.preempting(pod.metadata.uid.as_deref().unwrap_or_default());
            }
        }
        runtime.spawn(actuate::carry_out(
            client.clone(),
            self.events.clone(),
            self.gate.clone(),
            self.evictions.clone(),
            self.activator.clone(),
            preemption,
        ));
    }
}

/// Builds the plugin from its args.
pub fn build(
    args: Option<&serde_json::Value>,
    path: &FieldPath,
    handle: &Handle,
) -> Result<Arc<dyn Plugin>, FieldErrors> {
    let budgets = handle.budgets.clone();
    let client = handle.client.clone();
    let events = handle.events.clone();
    let gate = handle.gate.clone();
    let evictions = handle.evictions.clone();
    let args: DefaultPreemptionArgs = decode_args(args, path)?;
    args.validate(path)?;
    Ok(Arc::new(DefaultPreemption {
        args,
        budgets,
        client,
        events,
        gate,
        evictions,
        runtime: tokio::runtime::Handle::try_current().ok(),
        activator: handle.activator.clone(),
        metrics: handle.metrics.clone(),
        release: handle.release,
    }))
}
