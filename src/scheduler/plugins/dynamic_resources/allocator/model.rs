//! What the allocator is made of: the devices and claims as it reads them, its errors, and
//! the allocator itself; its ways are in `mod.rs` (building and asking it), `pools.rs` (what a
//! node sees) and `search.rs` (the search). None of them is read from here.

use std::collections::BTreeMap;

use crate::scheduler::informers::claim_view::ClaimView;
use crate::scheduler::informers::devices::SliceIndex;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::NodeSelector;
use k8s_openapi::api::resource::v1::{
    Device, DeviceClass, DeviceConstraint, DeviceTaint, DeviceTaintRule, DeviceToleration,
    ResourceClaim, ResourceSlice,
};

use crate::k8s::node_selector::Terms;
use crate::k8s::quantity;
use crate::scheduler::plugins::dynamic_resources::cel::Selector;

/// At most this many devices in one claim's allocation (upstream's AllocationResultsMaxSize).
pub const MAX_DEVICES_PER_CLAIM: usize = 32;

/// One device: its driver, pool and name.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct DeviceId {
    pub driver: String,
    pub pool: String,
    pub device: String,
}

impl std::fmt::Display for DeviceId {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}", self.driver, self.pool, self.device)
    }
}

/// The devices other claims hold (upstream's allocated state): those allocated in the API or
/// in flight, admin-access allocations aside. Persistent maps: a copy is a pointer, and one
/// claim more or less changes a few entries, so the plugin keeps one from cycle to cycle
/// ([`KeptAllocated`]) and hands each cycle a copy.
#[derive(Clone, Debug, Default)]
pub struct Allocated {
    /// Devices allocated whole, with how many claims hold each (one, but for an allocation
    /// written and in flight under different UIDs at once).
    devices: DeviceMap<u32>,
    /// Devices with at least one share: how many shares, and what they consume of each
    /// capacity (nano-units).
    shared: DeviceMap<Shares>,
}

/// A persistent map by device (a copy is a pointer).
type DeviceMap<V> = imbl::GenericHashMap<
    DeviceId,
    V,
    foldhash::fast::RandomState,
    imbl::shared_ptr::DefaultSharedPtr,
>;

/// The shares of one device that claims hold.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Shares {
    holders: u32,
    consumed: BTreeMap<String, i128>,
}

impl Allocated {
    /// The devices of every allocated claim.
    pub fn of<'a>(claims: impl Iterator<Item = &'a Arc<ResourceClaim>>) -> Self {
        let mut allocated = Allocated::default();
        for c in claims {
            allocated.add(c);
        }
        allocated
    }

    /// Devices allocated whole and shares, in any order (tests).
    #[cfg(test)]
    pub fn from_parts(
        devices: impl IntoIterator<Item = DeviceId>,
        shared: impl IntoIterator<Item = DeviceId>,
    ) -> Self {
        let mut allocated = Allocated::default();
        for id in devices {
            *allocated.devices.entry(id).or_default() += 1;
        }
        for id in shared {
            allocated.shared.entry(id).or_default().holders += 1;
        }
        allocated
    }

    /// Counts `claim`'s allocation in.
    pub fn add(&mut self, claim: &ResourceClaim) {
        for (id, share) in held(claim) {
            match share {
                None => {
                    let n = self.devices.entry(id).or_default();
                    *n = n.saturating_add(1);
                }
                Some(consumed) => {
                    let held = self.shared.entry(id).or_default();
                    held.holders = held.holders.saturating_add(1);
                    for (name, n) in consumed {
                        let e = held.consumed.entry(name).or_default();
                        *e = e.saturating_add(n);
                    }
                }
            }
        }
    }

    /// Counts `claim`'s allocation out again (what [`Allocated::add`] counted in).
    pub fn remove(&mut self, claim: &ResourceClaim) {
        for (id, share) in held(claim) {
            match share {
                None => {
                    if let Some(n) = self.devices.get_mut(&id) {
                        *n = n.saturating_sub(1);
                        if *n == 0 {
                            self.devices.remove(&id);
                        }
                    }
                }
                Some(consumed) => {
                    let Some(held) = self.shared.get_mut(&id) else {
                        continue;
                    };
                    held.holders = held.holders.saturating_sub(1);
                    if held.holders == 0 {
                        self.shared.remove(&id);
                        continue;
                    }
                    for (name, n) in consumed {
                        if let Some(e) = held.consumed.get_mut(&name) {
                            *e = e.saturating_sub(n);
                        }
                    }
                }
            }
        }
    }

    /// Whether a claim holds the device whole.
    pub fn holds(&self, id: &DeviceId) -> bool {
        self.devices.contains_key(id)
    }

    /// Whether shares of the device live.
    pub fn has_shares(&self, id: &DeviceId) -> bool {
        self.shared.contains_key(id)
    }

    /// Whether any claim holds the device, whole or a share of it.
    pub fn in_use(&self, id: &DeviceId) -> bool {
        self.holds(id) || self.has_shares(id)
    }

    /// What the device's shares consume of each capacity, when it has any.
    pub fn shares(&self, id: &DeviceId) -> Option<&BTreeMap<String, i128>> {
        self.shared.get(id).map(|s| &s.consumed)
    }

    /// Whether both count the same devices and shares (a capacity consumed to zero counts as
    /// none, as capacity checks read it).
    #[cfg(test)]
    pub fn same_as(&self, other: &Allocated) -> bool {
        fn nonzero(s: &Shares) -> (u32, Vec<(&String, &i128)>) {
            let consumed = s.consumed.iter().filter(|(_, v)| **v != 0).collect();
            (s.holders, consumed)
        }
        self.devices == other.devices
            && self.shared.len() == other.shared.len()
            && self.shared.iter().all(|(id, s)| {
                other
                    .shared
                    .get(id)
                    .is_some_and(|o| nonzero(s) == nonzero(o))
            })
    }
}

/// What one share of a device consumes of each capacity (nano-units).
type ShareConsumed = Vec<(String, i128)>;

/// The devices `claim`'s allocation holds (admin access aside): each with what its share
/// consumes, or None when it is held whole.
fn held(claim: &ResourceClaim) -> Vec<(DeviceId, Option<ShareConsumed>)> {
    let results = claim
        .status
        .as_ref()
        .and_then(|s| s.allocation.as_ref())
        .and_then(|a| a.devices.as_ref())
        .and_then(|d| d.results.as_ref());
    results
        .into_iter()
        .flatten()
        .filter(|r| r.admin_access != Some(true))
        .map(|r| {
            let id = DeviceId {
                driver: r.driver.clone(),
                pool: r.pool.clone(),
                device: r.device.clone(),
            };
            let share = r.share_id.is_some().then(|| {
                r.consumed_capacity
                    .iter()
                    .flatten()
                    .map(|(name, q)| (name.clone(), consumed(&q.0).max(0)))
                    .collect()
            });
            (id, share)
        })
        .collect()
}

/// [`Allocated`] kept from cycle to cycle: each cycle counts out and in only the claims that
/// changed since the last (the device index's [`ClaimView`] remembers its recent changes),
/// instead of counting the devices of every claim in the cluster again; a reader further
/// behind than the view remembers, or from before a re-list, counts afresh.
#[derive(Debug, Default)]
pub struct KeptAllocated {
    /// The view's change number this count is up to date at (`None`: never counted).
    at: Option<u64>,
    allocated: Allocated,
}

impl KeptAllocated {
    /// The devices the view's claims hold (each claim once), brought up to date from the
    /// last call's.
    pub fn update(&mut self, view: &ClaimView) -> Allocated {
        // Taken out while it changes: were a step to panic, the next call would find it empty
        // and count afresh, never half brought up to date.
        let mut kept = std::mem::take(self);
        match kept.at.and_then(|at| view.since(at)) {
            Some(changes) => {
                for change in changes {
                    if let Some(before) = &change.before {
                        kept.allocated.remove(before);
                    }
                    if let Some(after) = &change.after {
                        kept.allocated.add(after);
                    }
                }
            }
            None => kept.allocated = Allocated::of(view.claims().values()),
        }
        kept.at = Some(view.next());
        let allocated = kept.allocated.clone();
        *self = kept;
        allocated
    }
}

/// Why allocation on a node failed other than by finding no devices.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AllocateError {
    /// The node cannot be used now (upstream's ErrFailedAllocationOnNode): the pod is
    /// unschedulable there.
    #[error("{0}")]
    OnNode(String),
    /// Anything else (a CEL error, a request that cannot be served): the attempt fails.
    #[error("{0}")]
    Fatal(String),
    /// The search ran past its deadline (the plugin's `filterTimeout`).
    #[error("timed out")]
    TimedOut,
}

/// A node as the allocator reads it.
pub struct NodeView<'a> {
    pub name: &'a str,
    pub labels: &'a BTreeMap<String, String>,
}

/// A (sub)request as the search sees it.
pub(super) struct Want {
    /// `req` or `req/sub`: the name in the result and in constraints.
    pub(super) name: String,
    /// The (sub)request's own name, for messages.
    pub(super) own_name: String,
    /// The top-level request's name.
    pub(super) parent: String,
    pub(super) class: Arc<DeviceClass>,
    pub(super) class_selectors: Vec<Result<Selector, String>>,
    pub(super) selectors: Vec<Result<Selector, String>>,
    pub(super) all: bool,
    pub(super) count: usize,
    pub(super) admin: bool,
    pub(super) tolerations: Option<Vec<DeviceToleration>>,
    /// What the request asks of the device's capacities, by name (quantities).
    pub(super) capacity: BTreeMap<String, String>,
}

/// One request of a claim: a single want, or the alternatives of `firstAvailable`.
pub(super) struct Request {
    pub(super) wants: Vec<Want>,
    pub(super) first_available: bool,
}

pub(super) struct ClaimPlan {
    pub(super) claim: Arc<ResourceClaim>,
    pub(super) key: String,
    pub(super) requests: Vec<Request>,
    pub(super) constraints: Vec<DeviceConstraint>,
}

/// A device, by the address of its `Device` in a slice the allocator holds (so stable and
/// never shared by two devices while the allocator lives, and no allocation per lookup), and
/// a want (claim, request, want by index).
pub(super) type SelectableKey = (usize, usize, usize, usize);

/// The allocator for one pod's claims, built once per scheduling cycle (PreFilter) and asked
/// node by node (Filter, in parallel).
pub struct Allocator {
    pub(super) plans: Vec<ClaimPlan>,
    /// The slices, indexed by node and by pool (shared with the device index until a slice
    /// changes): a node reads its own and the shared ones, not the whole cluster's.
    pub(super) slices: Arc<SliceIndex>,
    pub(super) taint_rules: Vec<Arc<DeviceTaintRule>>,
    pub(super) allocated: Allocated,
    /// Whether a device matches a want: by (device, its slice, claim, request, want). The
    /// slice is in the key because a pool's slices on different nodes may name their devices
    /// alike.
    pub(super) selectable: Mutex<foldhash::HashMap<SelectableKey, bool>>,
    /// kube-scheduler 1.38's allocator (upstream's stable variant, which 1.38 picks with its
    /// default gates; 1.36 and 1.37 pick the incubating one): an `All` request meeting a pool
    /// being updated rejects the node, not the attempt; a device that lost
    /// `allowMultipleAllocations` while shares of it live is not taken whole; versions compare
    /// as semantic versions (build metadata ignored) in matchAttribute and distinctAttribute;
    /// a consumable capacity's fractional range is stepped in thousandths.
    pub(super) stable: bool,
}

/// A device the node sees, in search order.
pub(super) struct Candidate<'a> {
    pub(super) id: DeviceId,
    pub(super) pool: usize,
    pub(super) slice: &'a ResourceSlice,
    pub(super) device: &'a Device,
    pub(super) taints: Vec<DeviceTaint>,
}

pub(super) struct Pool<'a> {
    pub(super) driver: String,
    pub(super) name: String,
    pub(super) slices: Vec<&'a ResourceSlice>,
    pub(super) incomplete: bool,
    pub(super) invalid: bool,
    pub(super) binding: bool,
    /// Counter set → counter → what is left (nano-units), after allocated devices.
    pub(super) counters: BTreeMap<String, BTreeMap<String, i128>>,
}

/// Whether a slice's (or device's) node selection takes `node`.
pub(crate) fn node_matches(
    name: Option<&str>,
    all_nodes: Option<bool>,
    selector: Option<&NodeSelector>,
    node: &NodeView<'_>,
) -> Result<bool, String> {
    if let Some(n) = name.filter(|n| !n.is_empty()) {
        return Ok(n == node.name);
    }
    if all_nodes == Some(true) {
        return Ok(true);
    }
    if let Some(selector) = selector {
        let terms = Terms::parse(selector)
            .map_err(|e| format!("failed to parse node selector {selector:?}: {e}"))?;
        return Ok(terms.matches(node.name, node.labels));
    }
    Ok(false)
}

/// What a counter holds, in nano-units (a malformed quantity holds nothing).
pub(super) fn counter_amount(q: &str) -> i128 {
    nanos(q).unwrap_or(0)
}

/// What a device consumes of a counter, in nano-units; a malformed quantity (the API server
/// validates them) consumes more than any counter holds, so the device never fits.
pub(super) fn consumed(q: &str) -> i128 {
    nanos(q).unwrap_or(UNFITTING)
}

/// More than any counter holds, and far enough from `i128::MAX` that taking it and giving it
/// back is exact.
const UNFITTING: i128 = 1_000_000_000_000_000_000_000_000_000_000;

/// A quantity in nano-units, exactly as resource.Quantity keeps it (rounded up to a nano),
/// capped at [`UNFITTING`].
fn nanos(q: &str) -> Option<i128> {
    let (num, den) = quantity::parse_ratio(q).ok()?;
    let scaled = if den <= 1_000_000_000 {
        num.checked_mul(1_000_000_000 / den)?
    } else {
        let per = den / 1_000_000_000;
        num.div_euclid(per) + i128::from(num.rem_euclid(per) != 0)
    };
    Some(scaled.min(UNFITTING))
}
