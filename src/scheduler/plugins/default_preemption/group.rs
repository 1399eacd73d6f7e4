//! DefaultPreemption for a pod group (upstream's PodGroupPostFilter, workload-aware
//! preemption): the group preempts as one unit, across the whole cluster.
//!
//! 1. A group that may not preempt (Never) is told so; one whose members' nominated nodes still
//!    have a lower-priority pod going because of a preemption waits for it (its nominations
//!    stand).
//! 2. The potential victims are units of every node: the scheduled pods of a group with
//!    `disruptionMode: All` together (wherever they run), every other pod alone, each of lower
//!    priority than the group.
//! 3. All of them are taken off a copy of the cluster and the group cycle places the members
//!    there once; where it cannot, preemption cannot help.
//! 4. Each unit is then given back, those a PodDisruptionBudget protects first and the most
//!    important first: it is spared when every member still fits where it was placed (each
//!    seeing the members placed before it); otherwise it is a victim.
//! 5. The victims are evicted off the cycle ([`super::actuate`]) and each member is nominated to
//!    its node; the members wait until the evictions' writes end.
//!
//! Each member of the trial placement and of each reprieve check is reserved as it is placed
//! (so the next sees its devices and volumes taken) and every reservation is given back; the
//! pods taken off are named to the plugins that free what they held beyond their node
//! (DynamicResources counts their claims' devices as free), as a pod's own dry run does.
//!
//! Where tether differs (named in install.md): the reprieve runs each member's PreFilter again
//! on the changed cluster instead of updating the placement's cycle states; 1.38's ranking
//! applies to the nodes the search found feasible (upstream also searches them in rank order);
//! and the victims' devices count as freed (upstream's group preemption does not free them).

use std::cmp::Ordering;
use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::jiff::Timestamp;

use super::dry_run::{split_by_budgets, start_time};
use super::evictions::Evictions;
use super::{DefaultPreemption, actuate, preempted};
use crate::k8s::release::Release;
use crate::scheduler::framework::group_post_filter::{
    ChosenVictim, GroupPostFilterContext, GroupPostFilterPlugin, GroupPostFilterResult, NodeRanks,
    TrialCluster,
};
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::runtime::{Diagnosis, nominated_node, priority};
use crate::scheduler::framework::snapshot::Snapshot;
use crate::scheduler::framework::{Code, CycleState, REMOVED_PODS_KEY, RemovedPods, Status};

/// What a unit of victims is, for their order (upstream's victimRank).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum UnitKind {
    Pod = 1,
    PodGroup = 2,
}

/// Pods evicted together or not at all.
#[derive(Clone, Debug)]
pub struct Unit {
    pub pods: Vec<Arc<PodInfo>>,
    pub priority: i32,
    pub kind: UnitKind,
    /// The group evicted whole (its key), for a unit of a group with `disruptionMode: all`.
    pub group: Option<String>,
}

impl Unit {
    fn earliest_start(&self, now: Timestamp) -> Timestamp {
        self.pods
            .iter()
            .map(|p| start_time(&p.pod, now))
            .min()
            .unwrap_or(now)
    }

    fn first_uid(&self) -> &str {
        self.pods.first().map_or("", |p| p.uid())
    }
}

/// Upstream's MoreImportantVictim as an ordering (most important first): priority, kind (a
/// group before a pod), more pods, the earliest start; from 1.38 then the first pod's UID.
pub fn more_important_first(a: &Unit, b: &Unit, now: Timestamp, release: Release) -> Ordering {
    let order = b
        .priority
        .cmp(&a.priority)
        .then(b.kind.cmp(&a.kind))
        .then(b.pods.len().cmp(&a.pods.len()))
        .then_with(|| a.earliest_start(now).cmp(&b.earliest_start(now)));
    if release.at_least(38) {
        order.then_with(|| a.first_uid().cmp(b.first_uid()))
    } else {
        order
    }
}

/// Every pod of the cluster as a unit of victims (upstream's getCrossNodesVictims): the pods
/// of one group with `disruptionMode: All` make one unit, wherever they run; any other pod is
/// one. A unit's priority is its pods' own from 1.38; until then a grouped pod's is its group's
/// (where the group sets one), and a grouped pod alone counts as a group.
pub fn units(ctx: &GroupPostFilterContext<'_>, release: Release) -> Vec<Unit> {
    let mut out: Vec<Unit> = Vec::new();
    let mut by_group: HashMap<String, usize> = HashMap::new();
    for node in ctx.snapshot.nodes() {
        for pod in &node.pods {
            let group = (ctx.group_of)(&pod.pod);
            let own = priority(&pod.pod);
            let priority = match &group {
                Some(g) if !release.at_least(38) => g.priority.unwrap_or(own),
                _ => own,
            };
            match group {
                Some(g) if g.disrupt_all => match by_group.get(&g.key) {
                    Some(&i) => out[i].pods.push(pod.clone()),
                    None => {
                        by_group.insert(g.key.clone(), out.len());
                        out.push(Unit {
                            pods: vec![pod.clone()],
                            priority,
                            kind: UnitKind::PodGroup,
                            group: Some(g.key),
                        });
                    }
                },
                grouped => out.push(Unit {
                    pods: vec![pod.clone()],
                    priority,
                    kind: if grouped.is_some() && !release.at_least(38) {
                        UnitKind::PodGroup
                    } else {
                        UnitKind::Pod
                    },
                    group: None,
                }),
            }
        }
    }
    out
}

/// A victim unit as `tether explain` names it: the group it goes with (or its pod), its pods,
/// and why: of lower priority than the preemptor's, and not given back because the placement
/// did not hold with it (past its budget, when one did not let it go).
fn chosen(unit: &Unit, violating: usize, preemptor: i32) -> ChosenVictim {
    let pods: Vec<String> = unit.pods.iter().map(|p| p.key()).collect();
    let what = match &unit.group {
        Some(group) if group.starts_with("compositepodgroup/") => group.clone(),
        Some(group) => format!("podgroup {group}"),
        None => format!("pod {}", pods.first().cloned().unwrap_or_default()),
    };
    let mut why = format!(
        "priority {} below {preemptor}; the placement does not hold with it given back",
        unit.priority
    );
    if unit.group.is_some() {
        why.push_str(&format!(
            "; disruptionMode All: its {} pods go together",
            pods.len()
        ));
    }
    if violating > 0 {
        why.push_str(&format!(
            "; {violating} of its pods past a PodDisruptionBudget (no choice within the budgets held)"
        ));
    }
    ChosenVictim {
        unit: what,
        pods,
        priority: unit.priority,
        why,
    }
}

/// Splits units (in their order) into those with pods some budget does not let go, each with
/// how many, and the others (upstream's FilterVictimsWithPDBViolation: a unit is atomic).
fn split_units_by_budgets(
    units: Vec<Unit>,
    budgets: &[Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>],
    release: Release,
) -> (Vec<(Unit, usize)>, Vec<Unit>) {
    let pods: Vec<Arc<PodInfo>> = units.iter().flat_map(|u| u.pods.clone()).collect();
    let (violating, _) = split_by_budgets(&pods, budgets, release);
    let violating: HashSet<&str> = violating.iter().map(|p| p.uid()).collect();
    let (mut protected, mut free) = (Vec::new(), Vec::new());
    for unit in units {
        let count = unit
            .pods
            .iter()
            .filter(|p| violating.contains(p.uid()))
            .count();
        if count > 0 {
            protected.push((unit, count));
        } else {
            free.push(unit);
        }
    }
    (protected, free)
}

/// The cluster as the trial sees it: node infos changed so far, over the cycle's snapshot.
struct Trial<'a> {
    base: &'a Snapshot,
    /// The nodes changed, shared with the snapshots made of the trial (copied on the next
    /// change only while one of them is alive).
    changed: HashMap<String, Arc<NodeInfo>>,
    /// The pods taken off (by UID), shared with the members' cycle states the same way.
    removed: Arc<HashSet<String>>,
}

impl<'a> Trial<'a> {
    fn new(base: &'a Snapshot) -> Self {
        Trial {
            base,
            changed: HashMap::new(),
            removed: Arc::default(),
        }
    }

    fn node_mut(&mut self, name: &str) -> Option<&mut NodeInfo> {
        if !self.changed.contains_key(name) {
            let info = self.base.get(name)?;
            self.changed.insert(name.to_string(), info.clone());
        }
        self.changed.get_mut(name).map(Arc::make_mut)
    }

    fn remove(&mut self, unit: &Unit) {
        for pod in &unit.pods {
            Arc::make_mut(&mut self.removed).insert(pod.uid().to_string());
            if let Some(node) = pod.node_name().map(str::to_string)
                && let Some(info) = self.node_mut(&node)
            {
                info.remove_pod(pod.uid());
            }
        }
    }

    fn add(&mut self, unit: &Unit) {
        for pod in &unit.pods {
            Arc::make_mut(&mut self.removed).remove(pod.uid());
            if let Some(node) = pod.node_name().map(str::to_string)
                && let Some(info) = self.node_mut(&node)
            {
                info.add_pod(pod.clone());
            }
        }
    }

    fn snapshot(&self) -> Snapshot {
        self.base
            .with_changed(
                self.changed.values().cloned(),
                self.base.namespace_labels.clone(),
                self.base.image_node_counts.clone(),
            )
            .into_view()
    }
}

/// Whether every member still fits on the node it was placed on in `trial`, in the order it
/// was placed, each seeing those before it (added to its node and reserved, every reservation
/// given back before it returns).
fn all_still_fit(
    ctx: &GroupPostFilterContext<'_>,
    trial: &Trial<'_>,
    placement: &[(usize, String)],
) -> bool {
    let mut reserved: Vec<(CycleState, usize, &str)> = Vec::new();
    let fits = fit_reserving(ctx, trial, placement, &mut reserved);
    for (state, index, node) in reserved.iter().rev() {
        if let Some(pod) = ctx.members.get(*index) {
            ctx.profile.run_unreserve(state, pod, node);
        }
    }
    fits
}

/// [`all_still_fit`]'s loop; what it reserved is left in `reserved` to give back.
fn fit_reserving<'p>(
    ctx: &GroupPostFilterContext<'_>,
    trial: &Trial<'_>,
    placement: &'p [(usize, String)],
    reserved: &mut Vec<(CycleState, usize, &'p str)>,
) -> bool {
    let mut snapshot = trial.snapshot();
    let group_claims = crate::scheduler::framework::GroupClaims::default();
    for (index, node) in placement {
        let Some(pod) = ctx.members.get(*index) else {
            return false;
        };
        let mut state = CycleState::new();
        state.write(
            crate::scheduler::framework::GROUP_CLAIMS_KEY,
            group_claims.clone(),
        );
        if !trial.removed.is_empty() {
            state.write(REMOVED_PODS_KEY, RemovedPods(trial.removed.clone()));
        }
        let mut diagnosis = Diagnosis::default();
        if ctx
            .profile
            .run_pre_filter(&mut state, pod, &snapshot, &mut diagnosis)
            .is_err()
        {
            return false;
        }
        let Some(info) = snapshot.get(node) else {
            return false;
        };
        let status =
            ctx.profile
                .run_filters_with_nominated(&state, pod, info, ctx.nominated, &snapshot);
        if !status.is_success() {
            return false;
        }
        if !ctx.profile.run_reserve(&mut state, pod, node).is_success() {
            return false;
        }
        let mut info = (**info).clone();
        info.add_pod(Arc::new(pod.on_node(node)));
        snapshot = snapshot.with_node(info);
        reserved.push((state, *index, node));
    }
    true
}

/// What a unit of victims costs where it runs, for [`Ranks`].
struct Cost {
    priority: i32,
    kind: UnitKind,
    pods: usize,
    /// Its pods a budget does not let go.
    pdb_violations: usize,
}

/// 1.38's node ranking during a group's preemption (upstream's PodGroupPreemptionState with
/// DefaultPreemption's RankNodes and Reserve): a node costs the units of victims still on it
/// (not condemned by a member placed before), compared as upstream's CompareVictimSets.
struct Ranks {
    costs: Vec<Cost>,
    /// Node → the units with pods on it (indexes into `costs`), most important first.
    by_node: HashMap<String, Vec<usize>>,
    condemned: std::sync::Mutex<HashSet<usize>>,
}

impl Ranks {
    /// Over `ordered`, the potential victims in the order they are given back (with their
    /// budget violations).
    fn new(ordered: &[(Unit, usize)], now: Timestamp, release: Release) -> Self {
        let mut by_node: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, (unit, _)) in ordered.iter().enumerate() {
            for pod in &unit.pods {
                let list = by_node
                    .entry(pod.node_name().unwrap_or_default().to_string())
                    .or_default();
                if !list.contains(&i) {
                    list.push(i);
                }
            }
        }
        for list in by_node.values_mut() {
            list.sort_by(|&a, &b| more_important_first(&ordered[a].0, &ordered[b].0, now, release));
        }
        Ranks {
            costs: ordered
                .iter()
                .map(|(u, violations)| Cost {
                    priority: u.priority,
                    kind: u.kind,
                    pods: u.pods.len(),
                    pdb_violations: *violations,
                })
                .collect(),
            by_node,
            condemned: std::sync::Mutex::default(),
        }
    }

    /// The units on `node` not condemned yet, most important first.
    fn surviving(&self, node: &str, condemned: &HashSet<usize>) -> Vec<usize> {
        self.by_node
            .get(node)
            .map(|list| {
                list.iter()
                    .copied()
                    .filter(|i| !condemned.contains(i))
                    .collect()
            })
            .unwrap_or_default()
    }

    /// Upstream's CompareVictimSets: none is cheapest; then fewer budget violations, then
    /// priority band by band from the most important (a lower band, or fewer pods in it), fewer
    /// pods, unit by unit a lesser kind and fewer pods, fewer units.
    fn compare(&self, a: &[usize], b: &[usize]) -> Ordering {
        if a.is_empty() || b.is_empty() {
            return a.len().cmp(&b.len());
        }
        let cost = |i: usize| &self.costs[i];
        let sum = |s: &[usize], f: fn(&Cost) -> usize| s.iter().map(|&i| f(cost(i))).sum::<usize>();
        let by_budget = sum(a, |c| c.pdb_violations).cmp(&sum(b, |c| c.pdb_violations));
        if by_budget != Ordering::Equal {
            return by_budget;
        }
        let (mut i, mut j) = (0, 0);
        while i < a.len() && j < b.len() {
            let (pa, pb) = (cost(a[i]).priority, cost(b[j]).priority);
            if pa != pb {
                return pa.cmp(&pb);
            }
            let band = |s: &[usize], k: &mut usize| {
                let mut pods = 0;
                while *k < s.len() && cost(s[*k]).priority == pa {
                    pods += cost(s[*k]).pods;
                    *k += 1;
                }
                pods
            };
            let (na, nb) = (band(a, &mut i), band(b, &mut j));
            if na != nb {
                return na.cmp(&nb);
            }
        }
        let by_pods = sum(a, |c| c.pods).cmp(&sum(b, |c| c.pods));
        if by_pods != Ordering::Equal {
            return by_pods;
        }
        for (&x, &y) in a.iter().zip(b) {
            let order = cost(x)
                .kind
                .cmp(&cost(y).kind)
                .then(cost(x).pods.cmp(&cost(y).pods));
            if order != Ordering::Equal {
                return order;
            }
        }
        a.len().cmp(&b.len())
    }
}

impl NodeRanks for Ranks {
    fn cheapest(&self, feasible: Vec<Arc<NodeInfo>>) -> Vec<Arc<NodeInfo>> {
        let condemned = crate::locks::lock(&self.condemned).clone();
        let sets: Vec<Vec<usize>> = feasible
            .iter()
            .map(|n| self.surviving(&n.name, &condemned))
            .collect();
        let Some(best) = sets.iter().min_by(|a, b| self.compare(a, b)) else {
            return feasible;
        };
        let best = best.clone();
        feasible
            .into_iter()
            .zip(&sets)
            .filter(|(_, set)| self.compare(set, &best) == Ordering::Equal)
            .map(|(node, _)| node)
            .collect()
    }

    fn condemn(&self, node: &str) {
        let mut condemned = crate::locks::lock(&self.condemned);
        let surviving = self.surviving(node, &condemned);
        condemned.extend(surviving);
    }

    fn forget_condemned(&self) {
        crate::locks::lock(&self.condemned).clear();
    }
}

/// The victims chosen, and the placement they make room for.
struct Decision {
    /// Each victim unit, with how many of its pods a budget does not let go.
    victims: Vec<(Unit, usize)>,
    placement: Vec<(usize, String)>,
    /// The victims' pods a budget does not let go.
    violations: usize,
}

impl DefaultPreemption {
    /// The group's preemption, unprefixed: its status and, on Success, the members'
    /// nominations.
    fn preempt_group(&self, ctx: &GroupPostFilterContext<'_>) -> GroupPostFilterResult {
        let release = self.release;
        let fail = |code, message: &str| GroupPostFilterResult {
            status: Status::new(code, message),
            nominations: Vec::new(),
            victims: Vec::new(),
        };
        let group = ctx.preemptor;
        if group.never {
            return fail(
                Code::Unschedulable,
                "not eligible due to preemptionPolicy=Never.",
            );
        }
        if let Some(nominations) = ongoing(ctx, &self.evictions) {
            return GroupPostFilterResult {
                status: Status::new(Code::Success, "ongoing preemption on nominated nodes"),
                nominations,
                victims: Vec::new(),
            };
        }
        let now = if release.at_least(38) {
            Timestamp::MAX
        } else {
            Timestamp::now()
        };
        let potential: Vec<Unit> = units(ctx, release)
            .into_iter()
            .filter(|u| u.priority < group.priority)
            .collect();
        if potential.is_empty() {
            // Until 1.38 no preemption can resolve it; from 1.38 a plain rejection.
            let code = if release.at_least(38) {
                Code::Unschedulable
            } else {
                Code::UnschedulableAndUnresolvable
            };
            return fail(code, "No preemption victims found for incoming preemptor");
        }
        let budgets = self.budgets.all();
        let decision = match self.decide(ctx, potential, now, &budgets) {
            Ok(decision) => decision,
            Err(message) => return fail(Code::Unschedulable, &message),
        };
        let count: usize = decision.victims.iter().map(|(u, _)| u.pods.len()).sum();
        self.carry_out_group(ctx, &decision);
        let victims = decision
            .victims
            .iter()
            .map(|(unit, violating)| chosen(unit, *violating, group.priority))
            .collect();
        GroupPostFilterResult {
            status: Status::new(
                Code::Success,
                format!("found a placement for podgroup, preempting {count} victims"),
            ),
            nominations: decision.placement,
            victims,
        }
    }

    /// Steps 3 and 4: where the members go with every potential victim gone, and which of
    /// those must go for it.
    fn decide(
        &self,
        ctx: &GroupPostFilterContext<'_>,
        mut potential: Vec<Unit>,
        now: Timestamp,
        budgets: &[Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>],
    ) -> Result<Decision, String> {
        let mut trial = Trial::new(ctx.snapshot);
        for unit in &potential {
            trial.remove(unit);
        }
        potential.sort_by(|a, b| more_important_first(a, b, now, self.release));
        let (protected, free) = split_units_by_budgets(potential, budgets, self.release);
        // The order units are given back in: those a budget protects, then the others, each
        // most important first.
        let ordered: Vec<(Unit, usize)> = protected
            .into_iter()
            .chain(free.into_iter().map(|u| (u, 0)))
            .collect();
        let ranks: Option<Arc<dyn NodeRanks>> = self
            .release
            .at_least(38)
            .then(|| Arc::new(Ranks::new(&ordered, now, self.release)) as Arc<dyn NodeRanks>);
        let snapshot = trial.snapshot();
        let placement = (ctx.place)(TrialCluster {
            snapshot: &snapshot,
            removed: &trial.removed,
            ranks,
        })?;
        let mut victims = Vec::new();
        let mut violations = 0;
        for (unit, violating) in ordered {
            trial.add(&unit);
            if all_still_fit(ctx, &trial, &placement) {
                continue;
            }
            trial.remove(&unit);
            violations += violating;
            victims.push((unit, violating));
        }
        Ok(Decision {
            victims,
            placement,
            violations,
        })
    }

    /// Step 5: the evictions, off the cycle, with the members held until their writes end.
    fn carry_out_group(&self, ctx: &GroupPostFilterContext<'_>, decision: &Decision) {
        let pods: Vec<Arc<crate::k8s::pod::Pod>> = decision
            .victims
            .iter()
            .flat_map(|(u, _)| u.pods.iter().map(|p| p.pod.clone()))
            .collect();
        if let Some(metrics) = &self.metrics {
            let count = |kind| {
                decision
                    .victims
                    .iter()
                    .filter(|(u, _)| u.kind == kind)
                    .count()
            };
            metrics.workload_preemption(
                ctx.preemptor.entity(),
                pods.len(),
                &[
                    ("pod", count(UnitKind::Pod)),
                    ("podgroup", count(UnitKind::PodGroup)),
                ],
                decision.violations,
            );
        }
        let victims = self.evictions.start(pods.iter());
        if victims.is_empty() {
            return;
        }
        let members: HashSet<&str> = ctx.members.iter().map(|m| m.uid()).collect();
        let nodes: HashSet<&str> = decision.placement.iter().map(|(_, n)| n.as_str()).collect();
        let mut seen = HashSet::new();
        let outranked = nodes
            .iter()
            .flat_map(|node| ctx.nominated.for_node(node))
            .filter(|p| priority(&p.pod) < ctx.preemptor.priority && !members.contains(p.uid()))
            .filter(|p| seen.insert(p.uid().to_string()))
            .map(|p| p.pod.clone())
            .collect();
        let held: Vec<Arc<crate::k8s::pod::Pod>> =
            ctx.members.iter().map(|m| m.pod.clone()).collect();
        tracing::info!(
            group = %format!("{}/{}", ctx.preemptor.namespace, ctx.preemptor.name),
            victims = pods.len(),
            evicting = victims.len(),
            "preempting for a pod group"
        );
        let preemption = actuate::Preemption {
            preemptor: actuate::Preemptor::Group {
                group: ctx.preemptor.clone(),
                members: held,
            },
            node: "cluster".into(),
            victims,
            outranked,
        };
        self.carry_out(preemption);
    }
}

/// The members' current nominations when any of their nominated nodes still has a pod of
/// lower priority going because of a preemption (upstream's isOngoingPreemption).
fn ongoing(
    ctx: &GroupPostFilterContext<'_>,
    evictions: &Evictions,
) -> Option<Vec<(usize, String)>> {
    let nominations: Vec<(usize, String)> = ctx
        .members
        .iter()
        .enumerate()
        .filter_map(|(i, m)| {
            ctx.nominated
                .node_of(m.uid())
                .or_else(|| nominated_node(&m.pod).map(String::from))
                .map(|n| (i, n))
        })
        .collect();
    let waiting = nominations.iter().any(|(_, node)| {
        ctx.snapshot.get(node).is_some_and(|info| {
            info.pods
                .iter()
                .any(|p| priority(&p.pod) < ctx.preemptor.priority && preempted(&p.pod, evictions))
        })
    });
    waiting.then_some(nominations)
}

impl GroupPostFilterPlugin for DefaultPreemption {
    /// Every message is prefixed `pod group preemption: `, as upstream's.
    fn group_post_filter(&self, ctx: &GroupPostFilterContext<'_>) -> GroupPostFilterResult {
        let mut result = self.preempt_group(ctx);
        if let Some(metrics) = &self.metrics {
            let code = match result.status.code {
                Code::Success => "Success",
                Code::Unschedulable => "Unschedulable",
                Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
                _ => "Error",
            };
            metrics.workload_preemption_attempt(ctx.preemptor.entity(), code);
        }
        let message = result.status.message();
        if !message.is_empty() {
            result.status = Status::new(
                result.status.code,
                format!("pod group preemption: {message}"),
            );
        }
        result
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::framework::NoNominations;
    use crate::scheduler::framework::group_post_filter::{GroupPreemptor, Placement, VictimGroup};
    use crate::scheduler::plugins::default_preemption::args::DefaultPreemptionArgs;
    use crate::scheduler::plugins::handle::Handle;
    use crate::scheduler::profile::default_profile;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder, snapshot};

    fn plugin(release: Release) -> DefaultPreemption {
        DefaultPreemption {
            args: DefaultPreemptionArgs::default(),
            budgets: Arc::default(),
            client: None,
            events: None,
            gate: crate::gate::WriteGate::alone(),
            evictions: Arc::default(),
            runtime: None,
            activator: None,
            metrics: None,
            release,
        }
    }

    fn preemptor(priority: i32) -> GroupPreemptor {
        GroupPreemptor {
            namespace: "default".into(),
            name: "pre".into(),
            uid: "pre-uid".into(),
            api_version: "scheduling.k8s.io/v1beta1".into(),
            kind: "PodGroup".into(),
            scheduler_name: "tether-scheduler".into(),
            priority,
            never: false,
        }
    }

    /// A pod of `priority` asking for `cpu` on `node`, labelled `app=<name>`.
    fn running(name: &str, node: &str, priority: i32, cpu: &str) -> crate::k8s::pod::Pod {
        PodBuilder::new(name)
            .uid(name)
            .label("app", name)
            .req_cpu(cpu)
            .priority(priority)
            .node_name(node)
            .build()
    }

    /// The group of the pods whose name starts `whole-` (disruptionMode All, priority 5) and
    /// `each-` (Single, priority 5).
    fn groups(pod: &crate::k8s::pod::Pod) -> Option<VictimGroup> {
        let name = pod.metadata.name.as_deref().unwrap_or_default();
        let (key, _) = name
            .split_once('-')
            .filter(|(g, _)| *g == "whole" || *g == "each")?;
        Some(VictimGroup {
            key: key.to_string(),
            disrupt_all: key == "whole",
            priority: Some(5),
        })
    }

    /// Places each member on the first node (in the snapshot's order) whose filters pass, each
    /// seeing those placed before it: a gang of all of them.
    /// With `ranks`, among the cheapest feasible nodes only, condemning what each costs.
    fn first_fit(
        profile: &crate::scheduler::framework::profile::CompiledProfile,
        members: &[Arc<PodInfo>],
        on: &Snapshot,
        ranks: Option<Arc<dyn NodeRanks>>,
    ) -> Placement {
        let mut snapshot = on.clone();
        let mut placed = Vec::new();
        for (index, pod) in members.iter().enumerate() {
            let mut state = CycleState::new();
            let mut diagnosis = Diagnosis::default();
            if profile
                .run_pre_filter(&mut state, pod, &snapshot, &mut diagnosis)
                .is_err()
            {
                return Err("rejected at PreFilter".into());
            }
            let mut feasible: Vec<Arc<NodeInfo>> = snapshot
                .nodes()
                .iter()
                .filter(|n| profile.run_filter(&state, pod, n).is_success())
                .cloned()
                .collect();
            if let Some(ranks) = ranks.as_ref().filter(|_| feasible.len() > 1) {
                feasible = ranks.cheapest(feasible);
            }
            let node = feasible
                .first()
                .cloned()
                .ok_or_else(|| format!("{} fits nowhere", pod.name()))?;
            if let Some(ranks) = &ranks {
                ranks.condemn(&node.name);
            }
            let mut info = (*node).clone();
            info.add_pod(Arc::new(pod.on_node(&node.name)));
            snapshot = snapshot.with_node(info);
            placed.push((index, node.name.clone()));
        }
        Ok(placed)
    }

    fn victims_of(
        release: Release,
        snap: &Snapshot,
        members: &[Arc<PodInfo>],
        budgets: &[Arc<k8s_openapi::api::policy::v1::PodDisruptionBudget>],
    ) -> Result<Vec<String>, String> {
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let group = preemptor(1000);
        let place =
            |trial: TrialCluster<'_>| first_fit(&profile, members, trial.snapshot, trial.ranks);
        let ctx = GroupPostFilterContext {
            profile: &profile,
            preemptor: &group,
            members,
            snapshot: snap,
            nominated: &NoNominations,
            group_of: &groups,
            place: &place,
        };
        let plugin = plugin(release);
        let potential: Vec<Unit> = units(&ctx, release)
            .into_iter()
            .filter(|u| u.priority < group.priority)
            .collect();
        let decision = plugin.decide(&ctx, potential, Timestamp::MAX, budgets)?;
        let mut names: Vec<String> = decision
            .victims
            .iter()
            .flat_map(|(u, _)| u.pods.iter().map(|p| p.name().to_string()))
            .collect();
        names.sort();
        Ok(names)
    }

    fn gang(count: usize, cpu: &str) -> Vec<Arc<PodInfo>> {
        (0..count)
            .map(|i| {
                Arc::new(
                    PodBuilder::new(&format!("pre-{i}"))
                        .uid(&format!("pre-{i}"))
                        .req_cpu(cpu)
                        .priority(1000)
                        .info(),
                )
            })
            .collect()
    }

    /// A group of disruptionMode All goes whole (its pod elsewhere too), one of Single loses
    /// only the pod in the way, and a pod of higher priority is never a victim.
    #[test]
    fn an_all_group_goes_whole_and_a_single_groups_pod_alone() {
        let snap = snapshot(
            vec![
                NodeBuilder::new("n0"),
                NodeBuilder::new("n1"),
                NodeBuilder::new("n2"),
                NodeBuilder::new("n3"),
            ],
            vec![
                running("whole-0", "n0", 5, "4"),
                running("whole-1", "n2", 5, "2"),
                running("each-0", "n1", 5, "4"),
                running("each-1", "n3", 5, "2"),
                running("top-0", "n2", 2000, "2"),
                running("top-1", "n3", 2000, "2"),
            ],
        );
        for release in [Release::of_minor(37), Release::of_minor(38)] {
            assert_eq!(
                victims_of(release, &snap, &gang(2, "4"), &[]),
                Ok(vec!["each-0".into(), "whole-0".into(), "whole-1".into()]),
                "{release:?}"
            );
        }
    }

    /// Units are given back most important first, those a budget protects before any other:
    /// of two lone pods either of which makes room, the protected one stays.
    #[test]
    fn a_unit_a_budget_protects_is_spared_first() {
        let snap = snapshot(
            vec![NodeBuilder::new("n0")],
            vec![running("a", "n0", 5, "2"), running("b", "n0", 5, "2")],
        );
        let members = gang(1, "2");
        let r38 = Release::of_minor(38);
        // Alike but for their UIDs: from 1.38 the lower UID is the more important, spared.
        assert_eq!(victims_of(r38, &snap, &members, &[]), Ok(vec!["b".into()]));
        let protect_b = Arc::new(k8s_openapi::api::policy::v1::PodDisruptionBudget {
            metadata: k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta {
                name: Some("keep-b".into()),
                namespace: Some("default".into()),
                ..Default::default()
            },
            spec: Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetSpec {
                selector: Some(
                    k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector {
                        match_labels: Some([("app".to_string(), "b".to_string())].into()),
                        ..Default::default()
                    },
                ),
                ..Default::default()
            }),
            status: Some(k8s_openapi::api::policy::v1::PodDisruptionBudgetStatus {
                disruptions_allowed: Some(0),
                ..Default::default()
            }),
        });
        assert_eq!(
            victims_of(r38, &snap, &members, &[protect_b]),
            Ok(vec!["a".into()])
        );
    }

    /// From 1.38 each member goes where it costs the fewest victims, and what one condemned
    /// costs the next nothing: of a lone pod and a group of two (one per node), the lower
    /// priority goes; at one priority the lone pod and the group (the cheapest node first);
    /// until 1.38 the first node that fits.
    #[test]
    fn from_1_38_members_go_where_they_cost_the_fewest_victims() {
        let with_lone_at = |priority| {
            snapshot(
                vec![
                    NodeBuilder::new("n0"),
                    NodeBuilder::new("n1"),
                    NodeBuilder::new("n2"),
                    NodeBuilder::new("n3"),
                ],
                vec![
                    running("lone", "n0", priority, "4"),
                    running("whole-0", "n1", 5, "4"),
                    running("whole-1", "n2", 5, "4"),
                    running("top", "n3", 2000, "4"),
                ],
            )
        };
        let members = gang(2, "4");
        let r38 = Release::of_minor(38);
        assert_eq!(
            victims_of(r38, &with_lone_at(7), &members, &[]),
            Ok(vec!["whole-0".into(), "whole-1".into()])
        );
        assert_eq!(
            victims_of(r38, &with_lone_at(5), &members, &[]),
            Ok(vec!["lone".into(), "whole-0".into(), "whole-1".into()])
        );
        assert_eq!(
            victims_of(Release::of_minor(37), &with_lone_at(7), &members, &[]),
            Ok(vec!["lone".into(), "whole-0".into(), "whole-1".into()])
        );
    }

    /// What a trial condemned is forgotten when the next trial (another placement) begins:
    /// a group of victims spread over two racks costs the second rack's members again.
    #[test]
    fn condemned_victims_are_forgotten_between_trials() {
        let unit = Unit {
            pods: vec![
                Arc::new(PodBuilder::new("w0").uid("w0").node_name("n0").info()),
                Arc::new(PodBuilder::new("w1").uid("w1").node_name("n1").info()),
            ],
            priority: 5,
            kind: UnitKind::PodGroup,
            group: Some("ns/w".into()),
        };
        let ranks = Ranks::new(&[(unit, 0)], Timestamp::MAX, Release::of_minor(38));
        let nodes = snapshot(
            vec![NodeBuilder::new("n1"), NodeBuilder::new("free")],
            vec![],
        );
        let names = |kept: Vec<Arc<NodeInfo>>| -> Vec<String> {
            kept.iter().map(|n| n.name.clone()).collect()
        };
        assert_eq!(names(ranks.cheapest(nodes.nodes().to_vec())), ["free"]);
        ranks.condemn("n0");
        assert_eq!(
            names(ranks.cheapest(nodes.nodes().to_vec())),
            ["n1", "free"],
            "the group is condemned already: n1 costs nothing more"
        );
        ranks.forget_condemned();
        assert_eq!(names(ranks.cheapest(nodes.nodes().to_vec())), ["free"]);
    }

    /// Where the group does not fit even with every lower pod gone, preemption cannot help,
    /// and says why.
    #[test]
    fn a_group_that_fits_nowhere_without_its_victims_evicts_nobody() {
        let snap = snapshot(
            vec![NodeBuilder::new("n0")],
            vec![running("a", "n0", 5, "2")],
        );
        assert_eq!(
            victims_of(Release::of_minor(38), &snap, &gang(2, "4"), &[]),
            Err("pre-1 fits nowhere".into())
        );
    }

    /// Until 1.38 a grouped pod counts at its group's priority and ranks as a group; from
    /// 1.38 at its own, as a pod.
    #[test]
    fn a_grouped_pods_priority_and_rank_follow_the_release() {
        let snap = snapshot(
            vec![NodeBuilder::new("n0")],
            vec![
                running("whole-0", "n0", 7, "1"),
                running("whole-1", "n0", 7, "1"),
                running("each-0", "n0", 7, "1"),
                running("lone", "n0", 7, "1"),
            ],
        );
        let profile = default_profile("tether-scheduler", &Handle::default())
            .expect("compiles")
            .profile;
        let group = preemptor(1000);
        let place = |_: TrialCluster<'_>| -> Placement { Ok(Vec::new()) };
        let ctx = GroupPostFilterContext {
            profile: &profile,
            preemptor: &group,
            members: &[],
            snapshot: &snap,
            nominated: &NoNominations,
            group_of: &groups,
            place: &place,
        };
        let seen = |release| {
            let mut units: Vec<(usize, i32, UnitKind)> = units(&ctx, release)
                .iter()
                .map(|u| (u.pods.len(), u.priority, u.kind))
                .collect();
            units.sort();
            units
        };
        assert_eq!(
            seen(Release::of_minor(37)),
            [
                (1, 5, UnitKind::PodGroup),
                (1, 7, UnitKind::Pod),
                (2, 5, UnitKind::PodGroup)
            ]
        );
        assert_eq!(
            seen(Release::of_minor(38)),
            [
                (1, 7, UnitKind::Pod),
                (1, 7, UnitKind::Pod),
                (2, 7, UnitKind::PodGroup)
            ]
        );
    }
}
