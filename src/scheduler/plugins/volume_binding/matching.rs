//! Which volumes a pod's claims can have on a node: bound claims' volumes must reach it, claims
//! waiting for their first consumer take the smallest fitting available volume there, or else a
//! class that can provision for it (kube-scheduler's FindPodVolumes).

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, CSIStorageCapacity, StorageClass};

use crate::k8s::labels::Selector;
use crate::k8s::volumes::{self, NO_PROVISIONER};

pub const ERR_NODE_CONFLICT: &str = "node(s) didn't match PersistentVolume's node affinity";
pub const ERR_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
pub const ERR_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";
pub const ERR_PV_NOT_EXIST: &str =
    "node(s) unavailable due to one or more pvc(s) bound to non-existent pv(s)";

/// A claim and the static volume chosen for it.
#[derive(Clone, Debug)]
pub struct StaticBinding {
    pub claim: Arc<PersistentVolumeClaim>,
    pub volume: Arc<PersistentVolume>,
}

/// A claim to be provisioned for the node, with the capacity object that allowed it (when the
/// driver reports capacity).
#[derive(Clone, Debug)]
pub struct Provision {
    pub claim: Arc<PersistentVolumeClaim>,
    pub capacity: Option<Arc<CSIStorageCapacity>>,
}

/// What a pod's unbound claims get on one node.
#[derive(Clone, Debug, Default)]
pub struct PodVolumes {
    pub static_bindings: Vec<StaticBinding>,
    pub provisions: Vec<Provision>,
}

impl PodVolumes {
    /// Whether nothing is to be bound or provisioned.
    pub fn is_empty(&self) -> bool {
        self.static_bindings.is_empty() && self.provisions.is_empty()
    }
}

/// What a node needs answered, read once per cycle in PreFilter.
#[derive(Debug, Default)]
pub struct Claims {
    /// Fully bound claims, with their volume (`None`: the volume does not exist).
    pub bound: Vec<(Arc<PersistentVolumeClaim>, Option<Arc<PersistentVolume>>)>,
    /// Claims waiting for their first consumer, in the order of the pod's volumes.
    pub to_bind: Vec<Arc<PersistentVolumeClaim>>,
    /// The volumes of each class a claim to bind names, by name.
    pub volumes_by_class: BTreeMap<String, Vec<Arc<PersistentVolume>>>,
    /// The classes the claims to bind name.
    pub classes: BTreeMap<String, Arc<StorageClass>>,
    /// The CSI drivers named as those classes' provisioners.
    pub drivers: BTreeMap<String, Arc<CSIDriver>>,
    /// Every CSIStorageCapacity, for drivers that report capacity.
    pub capacities: Vec<Arc<CSIStorageCapacity>>,
    /// Whether a capacity's limit and a claim's request are compared as written (1.38 on) or
    /// rounded up to whole bytes first (1.36, 1.37): [`volumes::capacity_holds`].
    pub exact_sizes: bool,
}

/// A node's verdict: the volumes chosen, or the reasons it does not fit (in upstream's order),
/// or an error.
pub enum Verdict {
    Fits(PodVolumes),
    Conflicts(Vec<&'static str>),
    Error(String),
}

/// Finds the pod's volumes on a node with these labels.
pub fn find_pod_volumes(claims: &Claims, node: &str, labels: &BTreeMap<String, String>) -> Verdict {
    let mut bound_ok = true;
    let mut pvs_found = true;
    for (_, pv) in &claims.bound {
        match pv {
            None => {
                pvs_found = false;
                break;
            }
            Some(pv) if !volumes::pv_reaches(pv, labels) => {
                bound_ok = false;
                break;
            }
            Some(_) => {}
        }
    }
    let mut found = PodVolumes::default();
    let mut unbound_ok = true;
    let mut enough_space = true;
    if !claims.to_bind.is_empty() {
        let mut to_provision = Vec::new();
        let mut to_match = Vec::new();
        let mut elsewhere = false;
        for claim in &claims.to_bind {
            match volumes::selected_node(claim) {
                Some(n) if n != node => {
                    elsewhere = true;
                    break;
                }
                Some(_) => to_provision.push(claim.clone()),
                None => to_match.push(claim.clone()),
            }
        }
        if elsewhere {
            return conflicts(bound_ok, false, true, pvs_found);
        }
        if !to_match.is_empty() {
            let (bindings, unmatched) = match match_static(claims, &to_match, labels) {
                Ok(matched) => matched,
                Err(e) => return Verdict::Error(e),
            };
            unbound_ok = unmatched.is_empty();
            found.static_bindings = bindings;
            to_provision.extend(unmatched);
        }
        if !to_provision.is_empty() {
            match check_provisions(claims, &to_provision, labels) {
                Err(e) => return Verdict::Error(e),
                Ok(Provisioning::Possible(p)) => {
                    unbound_ok = true;
                    found.provisions = p;
                }
                Ok(Provisioning::NotHere) => unbound_ok = false,
                Ok(Provisioning::NoSpace) => {
                    unbound_ok = true;
                    enough_space = false;
                }
            }
        }
    }
    if bound_ok && unbound_ok && enough_space && pvs_found {
        Verdict::Fits(found)
    } else {
        conflicts(bound_ok, unbound_ok, enough_space, pvs_found)
    }
}

fn conflicts(bound_ok: bool, unbound_ok: bool, enough_space: bool, pvs_found: bool) -> Verdict {
    let reasons = [
        (bound_ok, ERR_NODE_CONFLICT),
        (unbound_ok, ERR_BIND_CONFLICT),
        (enough_space, ERR_NOT_ENOUGH_SPACE),
        (pvs_found, ERR_PV_NOT_EXIST),
    ];
    Verdict::Conflicts(
        reasons
            .into_iter()
            .filter(|(ok, _)| !ok)
            .map(|(_, r)| r)
            .collect(),
    )
}

/// Matches claims (smallest request first) to distinct available volumes; returns the bindings
/// and the claims no volume was found for.
/// A claim's selector that does not parse is an error, as upstream's.
type Matched = (Vec<StaticBinding>, Vec<Arc<PersistentVolumeClaim>>);

fn match_static(
    claims: &Claims,
    to_match: &[Arc<PersistentVolumeClaim>],
    labels: &BTreeMap<String, String>,
) -> Result<Matched, String> {
    let mut ordered = to_match.to_vec();
    ordered.sort_by_key(|c| volumes::claim_request(c));
    let mut chosen: HashSet<String> = HashSet::new();
    let mut bindings = Vec::new();
    let mut unmatched = Vec::new();
    for claim in ordered {
        let candidates = claims
            .volumes_by_class
            .get(volumes::claim_class(&claim))
            .map(Vec::as_slice)
            .unwrap_or_default();
        match find_matching_volume(&claim, candidates, labels, &chosen)? {
            Some(pv) => {
                chosen.insert(pv.metadata.name.clone().unwrap_or_default());
                bindings.push(StaticBinding { claim, volume: pv });
            }
            None => unmatched.push(claim),
        }
    }
    Ok((bindings, unmatched))
}

/// The smallest volume among `candidates` that this claim can bind on a node with `labels`
/// (the first of equal ones), skipping those in `excluded`. A volume already reserved for the
/// claim (its claimRef names it) is the answer if it reaches the node, and none otherwise.
pub fn find_matching_volume(
    claim: &PersistentVolumeClaim,
    candidates: &[Arc<PersistentVolume>],
    labels: &BTreeMap<String, String>,
    excluded: &HashSet<String>,
) -> Result<Option<Arc<PersistentVolume>>, String> {
    let request = volumes::claim_request(claim);
    let selector = match claim.spec.as_ref().and_then(|s| s.selector.as_ref()) {
        None => None,
        Some(s) => Some(Selector::from_label_selector(Some(s)).map_err(|e| {
            format!(
                "error creating internal label selector for claim: {}/{}: {e}",
                claim.metadata.namespace.as_deref().unwrap_or_default(),
                claim.metadata.name.as_deref().unwrap_or_default()
            )
        })?),
    };
    let class = volumes::claim_class(claim);
    let mut best: Option<&Arc<PersistentVolume>> = None;
    for pv in candidates {
        let name = pv.metadata.name.as_deref().unwrap_or_default();
        let claim_ref = pv.spec.as_ref().and_then(|s| s.claim_ref.as_ref());
        let for_this_claim = volumes::bound_to_claim(pv, claim);
        if excluded.contains(name)
            || (claim_ref.is_some() && !for_this_claim)
            || volumes::pv_capacity(pv) < request
            || !volumes::same_volume_mode(pv, claim)
            || !volumes::same_attributes_class(pv, claim)
            || pv.metadata.deletion_timestamp.is_some()
        {
            continue;
        }
        let reaches = volumes::pv_reaches(pv, labels);
        if for_this_claim {
            return Ok(reaches.then(|| pv.clone()));
        }
        let labels_ok = match &selector {
            Some(s) => s.matches(pv.metadata.labels.as_ref().unwrap_or(&BTreeMap::new())),
            None => true,
        };
        if volumes::pv_phase(pv) != "Available"
            || !labels_ok
            || volumes::pv_class(pv) != class
            || !reaches
            || !volumes::offers_access_modes(pv, claim)
        {
            continue;
        }
        if best.is_none_or(|b| volumes::pv_capacity(pv) < volumes::pv_capacity(b)) {
            best = Some(pv);
        }
    }
    Ok(best.cloned())
}

enum Provisioning {
    Possible(Vec<Provision>),
    /// No provisioner, or its class cannot reach the node.
    NotHere,
    /// The driver reports no capacity on the node for one of the claims.
    NoSpace,
}

fn check_provisions(
    claims: &Claims,
    to_provision: &[Arc<PersistentVolumeClaim>],
    labels: &BTreeMap<String, String>,
) -> Result<Provisioning, String> {
    let mut provisions = Vec::new();
    for claim in to_provision {
        let class_name = volumes::claim_class(claim);
        if class_name.is_empty() {
            return Err(format!(
                "no class for claim \"{}/{}\"",
                claim.metadata.namespace.as_deref().unwrap_or_default(),
                claim.metadata.name.as_deref().unwrap_or_default()
            ));
        }
        let Some(class) = claims.classes.get(class_name) else {
            return Err(format!("failed to find storage class \"{class_name}\""));
        };
        if class.provisioner.is_empty() || class.provisioner == NO_PROVISIONER {
            return Ok(Provisioning::NotHere);
        }
        if !volumes::class_reaches(class, labels) {
            return Ok(Provisioning::NotHere);
        }
        match capacity_for(claims, claim, class, labels) {
            Some(capacity) => provisions.push(Provision {
                claim: claim.clone(),
                capacity,
            }),
            None => return Ok(Provisioning::NoSpace),
        }
    }
    Ok(Provisioning::Possible(provisions))
}

/// Whether the driver has room for the claim on the node: `Some(None)` when it reports no
/// capacity (or the claim asks for no size), `Some(Some(c))` with the capacity object that has
/// room, `None` when none has.
fn capacity_for(
    claims: &Claims,
    claim: &PersistentVolumeClaim,
    class: &StorageClass,
    labels: &BTreeMap<String, String>,
) -> Option<Option<Arc<CSIStorageCapacity>>> {
    if !volumes::claim_has_request(claim) {
        return Some(None);
    }
    let reports = claims
        .drivers
        .get(&class.provisioner)
        .and_then(|d| d.spec.storage_capacity)
        .unwrap_or(false);
    if !reports {
        return Some(None);
    }
    let class_name = class.metadata.name.as_deref().unwrap_or_default();
    claims
        .capacities
        .iter()
        .find(|c| {
            c.storage_class_name == class_name
                && volumes::capacity_holds(c, claim, claims.exact_sizes)
                && c.node_topology.as_ref().is_some_and(|t| {
                    Selector::from_label_selector(Some(t)).is_ok_and(|s| s.matches(labels))
                })
        })
        .map(|c| Some(c.clone()))
}
