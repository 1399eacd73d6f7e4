//! The dry run on one node (upstream's SelectVictimsOnNode): take away every pod of lower
//! priority; if the pod fits then, give back as many as still let it fit, most important
//! first and those a PodDisruptionBudget protects before the others. What cannot be given
//! back are the victims.

use std::cmp::Ordering;
use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::jiff::Timestamp;

use crate::k8s::labels::Selector;
use crate::k8s::pod::Pod;
use crate::k8s::release::Release;
use crate::scheduler::framework::node_info::NodeInfo;
use crate::scheduler::framework::pod_info::PodInfo;
use crate::scheduler::framework::runtime::priority;
use crate::scheduler::framework::{PostFilterContext, REMOVED_PODS_KEY, RemovedPods, Status};

pub const ERR_NO_VICTIMS: &str = "No preemption victims found for incoming pod";

/// A node where preemption would make room, and at what cost.
#[derive(Clone, Debug)]
pub struct Candidate {
    pub node: String,
    /// Most important first.
    pub victims: Vec<Arc<PodInfo>>,
    /// Victims whose eviction a PodDisruptionBudget does not allow.
    pub pdb_violations: usize,
}

/// When a pod started (now when it has not), for "the older pod is more important".
pub fn start_time(pod: &Pod, now: Timestamp) -> Timestamp {
    pod.status
        .as_ref()
        .and_then(|s| s.start_time.as_ref())
        .map_or(now, |t| t.0)
}

/// Upstream's MoreImportantPod as an ordering: higher priority first, then the older; from 1.38
/// (MoreImportantVictim) a tie, two pods not started among them, goes to the lower UID.
pub fn more_important_first(
    a: &PodInfo,
    b: &PodInfo,
    now: Timestamp,
    release: Release,
) -> Ordering {
    let order = priority(&b.pod)
        .cmp(&priority(&a.pod))
        .then_with(|| start_time(&a.pod, now).cmp(&start_time(&b.pod, now)));
    if release.at_least(38) {
        order.then_with(|| a.uid().cmp(b.uid()))
    } else {
        order
    }
}

/// Splits pods (in their order) into those whose eviction some budget does not allow and the
/// others, counting each eviction against the budgets that select the pod: from 1.37 up to the
/// first it would break (FilterVictimsWithPDBViolation), in 1.36 every one of them
/// (filterPodsWithPDBViolation).
pub fn split_by_budgets(
    pods: &[Arc<PodInfo>],
    budgets: &[Arc<PodDisruptionBudget>],
    release: Release,
) -> (Vec<Arc<PodInfo>>, Vec<Arc<PodInfo>>) {
    let mut allowed: Vec<i32> = budgets
        .iter()
        .map(|b| {
            b.status
                .as_ref()
                .and_then(|s| s.disruptions_allowed)
                .unwrap_or(0)
        })
        .collect();
    let selectors: Vec<Option<Selector>> = budgets
        .iter()
        .map(|b| {
            let s = b.spec.as_ref()?.selector.as_ref()?;
            let selector = Selector::from_label_selector(Some(s)).ok()?;
            // From 1.38 an empty selector selects every pod of the namespace; before, none.
            (!selector.is_empty() || release.at_least(38)).then_some(selector)
        })
        .collect();
    let no_labels = std::collections::BTreeMap::new();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for pod in pods {
        let meta = &pod.pod.metadata;
        let mut violates = false;
        // Until 1.38 a pod without labels is selected by no budget.
        let labels = match meta.labels.as_ref().filter(|l| !l.is_empty()) {
            Some(labels) => Some(labels),
            None if release.at_least(38) => Some(&no_labels),
            None => None,
        };
        if let Some(labels) = labels {
            for (i, budget) in budgets.iter().enumerate() {
                let Some(selector) = &selectors[i] else {
                    continue;
                };
                let disrupted = budget
                    .status
                    .as_ref()
                    .and_then(|s| s.disrupted_pods.as_ref())
                    .is_some_and(|d| meta.name.as_ref().is_some_and(|n| d.contains_key(n)));
                if budget.metadata.namespace != meta.namespace
                    || !selector.matches(labels)
                    || disrupted
                {
                    continue;
                }
                allowed[i] -= 1;
                if allowed[i] < 0 {
                    violates = true;
                    if release.at_least(37) {
                        // The first budget it would break decides; the budgets after it are not
                        // counted down for this pod.
                        break;
                    }
                }
            }
        }
        if violates {
            violating.push(pod.clone());
        } else {
            fine.push(pod.clone());
        }
    }
    (violating, fine)
}

/// The dry run over one cycle's context.
pub struct DryRun<'a> {
    pub ctx: &'a PostFilterContext<'a>,
    pub budgets: &'a [Arc<PodDisruptionBudget>],
    /// Whether the PreFilters that read other pods must run again on the changed node (the
    /// profile has such a plugin); else the cycle's PreFilter state holds.
    pub fresh_pre_filter: bool,
    /// Whether a Filter frees what the pods taken off a node held beyond the node (the
    /// profile runs such a plugin): the dry run then tells it which pods it took off.
    pub removed_pods_matter: bool,
    pub now: Timestamp,
    /// Whose rules count the budgets down (see [`split_by_budgets`]).
    pub release: Release,
    /// The evictions already decided: a going pod is a victim, never reprieved.
    pub evictions: &'a super::evictions::Evictions,
}

impl DryRun<'_> {
    /// Whether the pod fits on `trial`, the dry run's copy of `node` with `removed` (UIDs)
    /// taken off it.
    fn fits(&self, node: &NodeInfo, trial: &NodeInfo, removed: &HashSet<String>) -> Status {
        let ctx = self.ctx;
        let tell = self.removed_pods_matter && !removed.is_empty();
        if !self.fresh_pre_filter && !tell {
            return ctx.profile.run_filters_with_nominated(
                ctx.state,
                ctx.pod,
                trial,
                ctx.nominated,
                ctx.snapshot,
            );
        }
        let mut state = ctx.state.clone();
        if tell {
            state.write(
                REMOVED_PODS_KEY,
                RemovedPods(std::sync::Arc::new(removed.clone())),
            );
        }
        if !self.fresh_pre_filter {
            return ctx.profile.run_filters_with_nominated(
                &state,
                ctx.pod,
                trial,
                ctx.nominated,
                ctx.snapshot,
            );
        }
        let gone: Vec<&PodInfo> = node
            .pods
            .iter()
            .filter(|p| removed.contains(p.uid()))
            .map(|p| p.as_ref())
            .collect();
        let without = || ctx.snapshot.with_node(trial.clone());
        match ctx.profile.pre_filters_without(
            &mut state,
            ctx.pod,
            node,
            &gone,
            ctx.snapshot,
            &without,
        ) {
            Err(status) => status,
            Ok(()) => ctx.profile.run_filters_with_nominated(
                &state,
                ctx.pod,
                trial,
                ctx.nominated,
                ctx.snapshot,
            ),
        }
    }

    /// The victims on `node`, or why preemption cannot help there.
    pub fn select_victims(&self, node: &NodeInfo) -> Result<Candidate, Status> {
        let own = priority(&self.ctx.pod.pod);
        let mut potential: Vec<Arc<PodInfo>> = node
            .pods
            .iter()
            .filter(|p| priority(&p.pod) < own)
            .cloned()
            .collect();
        if potential.is_empty() {
            return Err(Status::unresolvable(ERR_NO_VICTIMS));
        }
        let mut trial = node.clone();
        let mut removed: HashSet<String> = HashSet::new();
        for v in &potential {
            trial.remove_pod(v.uid());
            removed.insert(v.uid().to_string());
        }
        let status = self.fits(node, &trial, &removed);
        if !status.is_success() {
            return Err(status);
        }
        potential.sort_by(|a, b| more_important_first(a, b, self.now, self.release));
        // A going pod leaves whatever this pod does: its room is taken first, it costs no
        // budget and it is not reprieved (reprieving it would evict another in its place).
        let (going, potential): (Vec<_>, Vec<_>) = potential
            .into_iter()
            .partition(|p| self.evictions.going(&p.pod));
        let (violating, fine) = split_by_budgets(&potential, self.budgets, self.release);
        let any_going = !going.is_empty();
        let mut victims = going;
        let mut pdb_violations = 0;
        for (group, protected) in [(&violating, true), (&fine, false)] {
            for pod in group {
                trial.add_pod(pod.clone());
                removed.remove(pod.uid());
                if self.fits(node, &trial, &removed).is_success() {
                    continue;
                }
                trial.remove_pod(pod.uid());
                removed.insert(pod.uid().to_string());
                victims.push(pod.clone());
                if protected {
                    pdb_violations += 1;
                }
            }
        }
        if any_going || (!violating.is_empty() && !fine.is_empty()) {
            victims.sort_by(|a, b| more_important_first(a, b, self.now, self.release));
        }
        if victims.is_empty() {
            // 1.38 rejects the node as no candidate; before it, the preemption errs.
            if self.release.at_least(38) {
                return Err(Status::unresolvable(ERR_NO_VICTIMS));
            }
            return Err(Status::error(format!(
                "expected at least one victim pod on node {:?}",
                node.name
            )));
        }
        Ok(Candidate {
            node: node.name.clone(),
            victims,
            pdb_violations,
        })
    }
}

/// Of several candidates, the one upstream's pickOneNodeForPreemption picks: fewest budget
/// violations, then the lowest most important victim, the lowest sum of priorities, the fewest
/// victims, the most recently started most important victims; then the first.
pub fn pick(candidates: &[Candidate], now: Timestamp) -> Option<&Candidate> {
    type Key = fn(&Candidate, Timestamp) -> i128;
    let keys: [Key; 5] = [
        |c, _| -(c.pdb_violations as i128),
        |c, _| -i128::from(c.victims.first().map_or(0, |v| priority(&v.pod))),
        |c, _| {
            -c.victims
                .iter()
                .map(|v| i128::from(priority(&v.pod)) + (1i128 << 31))
                .sum::<i128>()
        },
        |c, _| -(c.victims.len() as i128),
        |c, now| {
            let top = c.victims.first().map_or(0, |v| priority(&v.pod));
            c.victims
                .iter()
                .filter(|v| priority(&v.pod) == top)
                .map(|v| start_time(&v.pod, now).as_nanosecond())
                .min()
                .unwrap_or(0)
        },
    ];
    let mut left: Vec<&Candidate> = candidates.iter().collect();
    for key in keys {
        if left.len() <= 1 {
            break;
        }
        let best = left.iter().map(|c| key(c, now)).max()?;
        left.retain(|c| key(c, now) == best);
    }
    left.first().copied()
}
