//! A PodGroup's own ResourceClaims (DRAWorkloadResourceClaims, 1.37 and later; the local
//! control plane runs kube-apiserver and kube-controller-manager with the gate, tether with
//! `--feature-gates DRAWorkloadResourceClaims=true`), side by side with kube-scheduler run with
//! the same gate: kube-controller-manager makes the group's claim from its template and names
//! it in the group's and its pods' status; the scheduler allocates it once, reserves it for the
//! PodGroup (not for each pod), writes nothing more for later members, and, when the group
//! fits nowhere with none of its pods scheduled, takes the group's reservation off the claim so
//! its devices can be allocated again.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::resource::v1::ResourceClaim;
use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use kube::api::Api;
use serde_json::json;
use tether_e2e::{TestNamespace, TestNodes, apply, client, unique_suffix, wait_bound, wait_for};

const TIMEOUT: Duration = Duration::from_secs(60);
/// How long the group's reservation is given to go once the group fits nowhere: a scheduler
/// that never takes it off is seen as `false`, not as an error.
const UNRESERVE_WAIT: Duration = Duration::from_secs(30);

/// What a scheduler made of the scenario, compared between the two.
#[derive(Debug, PartialEq)]
struct GroupClaims {
    /// Each member's node (index among the test's nodes), in member order.
    nodes: Vec<usize>,
    /// Every member names, for `gpu`, the claim the PodGroup's status names.
    members_share_the_groups_claim: bool,
    /// The group claim's `reservedFor` (apiGroup, resource, name, whether the UID is the
    /// PodGroup's) once the first two are bound.
    group_claim_reserved_for: Vec<(String, String, String, bool)>,
    /// The group claim and the three members' own claims hold one device each, no device twice.
    /// (Which device the group claim gets is not compared: kube-scheduler hands a member that
    /// reuses the group claim's pending allocation its results by position, fresh ones first,
    /// so that member's PreBind, when it lands first, writes its own claim's device into the
    /// group claim; which member lands first is a race there.)
    one_device_per_claim: bool,
    /// Each member's own claim is reserved for that member alone.
    own_claims_reserved_for_their_pod: bool,
    /// The third member, joining the running group, bound without a write to the group claim.
    group_claim_untouched_by_a_later_member: bool,
    /// A new gang of the same PodGroup that fits nowhere, none of its pods scheduled: the
    /// group's reservation was taken off the claim.
    group_reservation_taken_back: bool,
}

fn member(
    ns: &str,
    name: &str,
    scheduler: &str,
    cpu: &str,
    nodes: &TestNodes,
) -> serde_json::Value {
    let mut spec = json!({
        "schedulerName": scheduler,
        "terminationGracePeriodSeconds": 0,
        "schedulingGroup": {"podGroupName": "train"},
        "resourceClaims": [
            {"name": "gpu", "resourceClaimTemplateName": "one-gpu"},
            {"name": "own", "resourceClaimTemplateName": "one-gpu"},
        ],
        "containers": [{"name": "c", "image": "pause",
                        "resources": {"requests": {"cpu": cpu},
                                      "claims": [{"name": "gpu"}, {"name": "own"}]}}],
    });
    nodes.isolate(&mut spec);
    json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns},
           "spec": spec})
}

/// The claim the pod's status names for its entry `entry`.
fn claim_named(pod: &Pod, entry: &str) -> Option<String> {
    pod.status
        .as_ref()?
        .resource_claim_statuses
        .as_ref()?
        .iter()
        .find(|s| s.name == entry)?
        .resource_claim_name
        .clone()
}

async fn run(scheduler: &str, test: &str) -> anyhow::Result<GroupClaims> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, test).await?;
    let nodes = TestNodes::create(&client, test, 2, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    let (driver, class) = (
        format!("group-{suffix}.example.com"),
        format!("group-{suffix}"),
    );
    tether_e2e::device_class(&class, &driver)?;
    let slice = format!("{}-{suffix}", nodes.names[0]);
    let gpus: Vec<_> = (0..4)
        .map(|i| json!({"name": format!("gpu-{i}")}))
        .collect();
    tether_e2e::resource_slice(&slice, &driver, &nodes.names[0], "pool", json!(gpus))?;
    apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
        "metadata": {"name": "one-gpu", "namespace": ns.name},
        "spec": {"spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": class}}]}}},
    }))?;
    apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": ns.name},
        "spec": {
            "schedulingPolicy": {"gang": {"minCount": 2}},
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}],
        },
    }))?;
    for i in 0..2 {
        apply(member(
            &ns.name,
            &format!("m-{i}"),
            scheduler,
            "100m",
            &nodes,
        ))?;
    }
    let index = |node: &str| nodes.names.iter().position(|n| n == node).unwrap_or(99);
    let mut placed = Vec::new();
    for i in 0..2 {
        placed.push(index(
            &wait_bound(&client, &ns.name, &format!("m-{i}"), TIMEOUT).await?,
        ));
    }
    let groups: Api<PodGroup> = Api::namespaced(client.clone(), &ns.name);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let claims: Api<ResourceClaim> = Api::namespaced(client.clone(), &ns.name);
    let group = groups.get("train").await?;
    let group_uid = group.metadata.uid.clone().unwrap_or_default();
    let shared = group
        .status
        .and_then(|s| s.resource_claim_statuses)
        .unwrap_or_default()
        .into_iter()
        .find(|s| s.name == "gpu")
        .and_then(|s| s.resource_claim_name)
        .ok_or_else(|| anyhow::anyhow!("the PodGroup's status names no claim for gpu"))?;
    let reserved = |claim: &ResourceClaim| -> Vec<(String, String, String, bool)> {
        claim
            .status
            .iter()
            .flat_map(|s| s.reserved_for.iter().flatten())
            .map(|r| {
                (
                    r.api_group.clone().unwrap_or_default(),
                    r.resource.clone(),
                    r.name.clone(),
                    r.uid == group_uid,
                )
            })
            .collect()
    };
    // Both members bound; the claim's reservation is written once (a member's PreBind may
    // find it allocated by the other and retry: the final state is compared).
    let bound_claim = wait_for("the group claim reserved", TIMEOUT, || async {
        let c = claims.get(&shared).await?;
        Ok((!reserved(&c).is_empty()).then_some(c))
    })
    .await?;
    let group_claim_reserved_for = reserved(&bound_claim);
    let devices_of = |claim: &ResourceClaim| -> Vec<String> {
        claim
            .status
            .as_ref()
            .and_then(|s| s.allocation.as_ref())
            .and_then(|a| a.devices.as_ref())
            .map(|d| {
                d.results
                    .iter()
                    .flatten()
                    .map(|r| r.device.clone())
                    .collect()
            })
            .unwrap_or_default()
    };
    let mut devices = devices_of(&bound_claim);
    let mut members_share_the_groups_claim = true;
    let mut own_claims_reserved_for_their_pod = true;
    for i in 0..2 {
        let pod = pods.get(&format!("m-{i}")).await?;
        members_share_the_groups_claim &= claim_named(&pod, "gpu").as_deref() == Some(&shared);
        let own = claim_named(&pod, "own").unwrap_or_default();
        let own = wait_for("the member's own claim reserved", TIMEOUT, || async {
            let c = claims.get(&own).await?;
            Ok(c.status
                .as_ref()
                .and_then(|s| s.reserved_for.clone())
                .filter(|r| !r.is_empty()))
        })
        .await?;
        own_claims_reserved_for_their_pod &= own.len() == 1
            && own[0].resource == "pods"
            && Some(&own[0].uid) == pod.metadata.uid.as_ref();
    }

    // A third member joins the running group: its PreBind finds the claim reserved for the
    // group and writes nothing to it.
    let before = claims.get(&shared).await?.metadata.resource_version;
    apply(member(&ns.name, "m-2", scheduler, "100m", &nodes))?;
    placed.push(index(&wait_bound(&client, &ns.name, "m-2", TIMEOUT).await?));
    let third = pods.get("m-2").await?;
    members_share_the_groups_claim &= claim_named(&third, "gpu").as_deref() == Some(&shared);
    let after = claims.get(&shared).await?.metadata.resource_version;
    let group_claim_untouched_by_a_later_member = before == after;
    for i in 0..3 {
        let pod = pods.get(&format!("m-{i}")).await?;
        let own = claim_named(&pod, "own").unwrap_or_default();
        let own = wait_for("the member's own claim allocated", TIMEOUT, || async {
            let c = claims.get(&own).await?;
            Ok(Some(devices_of(&c)).filter(|d| !d.is_empty()))
        })
        .await?;
        devices.extend(own);
    }
    let one_device_per_claim = devices.len() == 4 && {
        let mut distinct = devices.clone();
        distinct.sort();
        distinct.dedup();
        distinct.len() == 4
    };

    // The members go; the claim stays reserved for the group while it exists. A new gang of
    // the group asks for more CPU than any node has: the group fits nowhere with none of its
    // pods scheduled, and the scheduler takes the group's reservation off its claim.
    for i in 0..3 {
        tether_e2e::kubectl_ok(
            &[
                "delete",
                "pod",
                &format!("m-{i}"),
                "-n",
                &ns.name,
                "--wait=true",
            ],
            None,
        )?;
    }
    wait_for("the members gone", TIMEOUT, || async {
        Ok(pods
            .list(&Default::default())
            .await?
            .items
            .is_empty()
            .then_some(()))
    })
    .await?;
    for i in 3..5 {
        apply(member(&ns.name, &format!("m-{i}"), scheduler, "64", &nodes))?;
    }
    let group_reservation_taken_back = wait_for(
        "the group's reservation taken off",
        UNRESERVE_WAIT,
        || async {
            let c = claims.get(&shared).await?;
            Ok(reserved(&c)
                .iter()
                .all(|r| r.1 != "podgroups")
                .then_some(()))
        },
    )
    .await
    .is_ok();

    // The PodGroup keeps its protection finalizer (no podgroup-protection controller here):
    // take it off so the namespace can go.
    tether_e2e::kubectl_ok(
        &[
            "patch",
            "podgroup",
            "train",
            "-n",
            &ns.name,
            "--type=merge",
            "-p",
            r#"{"metadata":{"finalizers":null}}"#,
        ],
        None,
    )?;
    ns.delete().await?;
    nodes.delete().await?;
    tether_e2e::kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    tether_e2e::kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    Ok(GroupClaims {
        nodes: placed,
        members_share_the_groups_claim,
        group_claim_reserved_for,
        one_device_per_claim,
        own_claims_reserved_for_their_pod,
        group_claim_untouched_by_a_later_member,
        group_reservation_taken_back,
    })
}

/// Side by side with kube-scheduler (GenericWorkload and DRAWorkloadResourceClaims on): the
/// group's claim is shared by its members and reserved for the PodGroup, written once, and its
/// reservation taken back when the group fits nowhere.
#[tokio::test]
async fn a_pod_groups_claim_is_shared_and_reserved_for_the_group() -> anyhow::Result<()> {
    let client = client().await?;
    if tether_e2e::compared_minor(&client).await? < 37 {
        return Ok(());
    }
    let (upstream, tether) = tether_e2e::reference::side_by_side(
        "group-claims",
        &["GenericWorkload=true", "DRAWorkloadResourceClaims=true"],
        |scheduler, test| async move { run(&scheduler, &test).await },
    )
    .await?;
    println!("kube-scheduler: {upstream:?}\ntether: {tether:?}");
    assert_eq!(tether, upstream);
    // What both must show, not only agree on.
    assert_eq!(tether.nodes, vec![0, 0, 0]);
    assert!(tether.members_share_the_groups_claim);
    assert_eq!(
        tether.group_claim_reserved_for,
        vec![(
            "scheduling.k8s.io".to_string(),
            "podgroups".to_string(),
            "train".to_string(),
            true
        )]
    );
    assert!(tether.own_claims_reserved_for_their_pod);
    assert!(tether.one_device_per_claim);
    assert!(tether.group_claim_untouched_by_a_later_member);
    assert!(tether.group_reservation_taken_back);
    Ok(())
}
