//! VolumeBinding's cases, after upstream's volume_binding_test.go and binder_test.go: what
//! PreFilter says of a pod's claims, which nodes Filter keeps and why, which volume a claim
//! gets, and what Reserve assumes.

use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::storage::v1::StorageClass;

use super::*;
use crate::scheduler::framework::Code;
use crate::scheduler::testing::volumes::{claim, class, volume};
use crate::scheduler::testing::{NodeBuilder, PodBuilder};

fn plugin(storage: &Arc<StorageIndex>) -> VolumeBinding {
    VolumeBinding {
        args: VolumeBindingArgs::default(),
        storage: storage.clone(),
        client: None,
        gate: WriteGate::alone(),
        exact_sizes: false,
    }
}

fn node(name: &str) -> NodeInfo {
    NodeBuilder::new(name)
        .label("kubernetes.io/hostname", name)
        .info(vec![])
}

/// A provisioning class that waits for the first consumer.
fn provisioned(name: &str) -> StorageClass {
    let mut c = class(name, WAIT_FOR_FIRST_CONSUMER);
    c.provisioner = "csi.example.com".into();
    c
}

/// Runs PreFilter, then Filter on each node: the PreFilter status, or each node's.
fn run(p: &VolumeBinding, pod: &PodInfo, nodes: &[NodeInfo]) -> (CycleState, Vec<Status>) {
    let mut state = CycleState::new();
    let (_, status) = PreFilterPlugin::pre_filter(p, &mut state, pod, &Snapshot::default());
    if !status.is_success() {
        return (state, vec![status]);
    }
    let statuses = nodes
        .iter()
        .map(|n| FilterPlugin::filter(p, &state, pod, n))
        .collect();
    (state, statuses)
}

fn storage_with(objects: impl FnOnce(&StorageIndex)) -> Arc<StorageIndex> {
    let s = Arc::new(StorageIndex::default());
    objects(&s);
    s
}

#[test]
fn pre_filter_reads_the_pods_claims_as_upstream() {
    let storage = storage_with(|s| {
        s.apply(Arc::new(class("wait", WAIT_FOR_FIRST_CONSUMER)));
        s.apply(Arc::new(class("now", "Immediate")));
        s.apply(Arc::new(claim("unbound-now", "now").build()));
        s.apply(Arc::new(claim("unbound-wait", "wait").build()));
        let mut deleting = claim("deleting", "wait").build();
        deleting.metadata.deletion_timestamp = Some(
            k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(Default::default()),
        );
        s.apply(Arc::new(deleting));
        let mut lost = claim("lost", "wait").build();
        lost.spec.get_or_insert_default().volume_name = Some("gone".into());
        lost.status.get_or_insert_default().phase = Some("Lost".into());
        s.apply(Arc::new(lost));
    });
    let p = plugin(&storage);
    let pre = |pod: PodBuilder| {
        let mut state = CycleState::new();
        PreFilterPlugin::pre_filter(&p, &mut state, &pod.info(), &Snapshot::default()).1
    };
    let status = pre(PodBuilder::new("none"));
    assert!(status.is_skip(), "a pod without claims is skipped");
    let cases = [
        ("missing", "persistentvolumeclaim \"missing\" not found"),
        (
            "deleting",
            "persistentvolumeclaim \"deleting\" is being deleted",
        ),
        (
            "lost",
            "persistentvolumeclaim \"lost\" bound to non-existent persistentvolume \"gone\"",
        ),
        ("unbound-now", ERR_UNBOUND_IMMEDIATE),
    ];
    for (c, message) in cases {
        let status = pre(PodBuilder::new("p").claim(c));
        assert_eq!(status.code, Code::UnschedulableAndUnresolvable, "{c}");
        assert_eq!(status.message(), message, "{c}");
    }
    let status = pre(PodBuilder::new("p").claim("unbound-wait"));
    assert!(status.is_success(), "{status:?}");
}

/// A bound claim's volume must reach the node; a claim bound to a volume that is gone makes
/// every node fail with its own reason.
#[test]
fn bound_claims_keep_the_pod_where_their_volumes_are() {
    let storage = storage_with(|s| {
        s.apply(Arc::new(
            volume("pv-1", "10Gi")
                .on_node("n1")
                .claimed_by("data")
                .build(),
        ));
        s.apply(Arc::new(claim("data", "").bound_to("pv-1").build()));
        s.apply(Arc::new(claim("orphan", "").bound_to("pv-gone").build()));
    });
    let p = plugin(&storage);
    let (_, statuses) = run(
        &p,
        &PodBuilder::new("p").claim("data").info(),
        &[node("n1"), node("n2")],
    );
    assert!(statuses[0].is_success(), "{:?}", statuses[0]);
    assert_eq!(statuses[1].code, Code::UnschedulableAndUnresolvable);
    assert_eq!(statuses[1].message(), matching::ERR_NODE_CONFLICT);
    let (_, statuses) = run(
        &p,
        &PodBuilder::new("p").claim("orphan").info(),
        &[node("n1")],
    );
    assert_eq!(statuses[0].message(), matching::ERR_PV_NOT_EXIST);
}

/// A claim waiting for its first consumer gets the smallest available volume that fits on the
/// node; a node without one fails with upstream's bind conflict; two claims of the pod never
/// get the same volume.
#[test]
fn claims_to_bind_take_the_smallest_fitting_volume_on_the_node() {
    let storage = storage_with(|s| {
        s.apply(Arc::new(class("local", WAIT_FOR_FIRST_CONSUMER)));
        s.apply(Arc::new(
            volume("big", "100Gi").class("local").on_node("n1").build(),
        ));
        s.apply(Arc::new(
            volume("small", "10Gi").class("local").on_node("n1").build(),
        ));
        s.apply(Arc::new(
            volume("tiny", "1Gi").class("local").on_node("n1").build(),
        ));
        s.apply(Arc::new(
            volume("other", "10Gi").class("local").on_node("n2").build(),
        ));
        s.apply(Arc::new(
            volume("taken", "10Gi")
                .class("local")
                .on_node("n3")
                .claimed_by("x")
                .build(),
        ));
        s.apply(Arc::new(claim("a", "local").build()));
        s.apply(Arc::new(claim("b", "local").build()));
    });
    let p = plugin(&storage);
    let pod = PodBuilder::new("p").claim("a").claim("b").info();
    let (state, statuses) = run(&p, &pod, &[node("n1"), node("n2"), node("n3")]);
    assert!(statuses[0].is_success(), "{:?}", statuses[0]);
    assert_eq!(
        statuses[1].message(),
        matching::ERR_BIND_CONFLICT,
        "one volume for two claims"
    );
    assert_eq!(
        statuses[2].message(),
        matching::ERR_BIND_CONFLICT,
        "a claimed volume is not available"
    );
    let s = state.read::<State>(STATE_KEY).expect("state");
    let chosen: Vec<String> = locks::lock(&s.by_node)["n1"]
        .static_bindings
        .iter()
        .map(|b| b.volume.metadata.name.clone().unwrap_or_default())
        .collect();
    assert_eq!(
        chosen,
        ["small", "big"],
        "5Gi claims take 10Gi then 100Gi, never the 1Gi one"
    );
}

#[test]
fn a_volume_matches_a_claim_only_with_its_class_modes_and_selector() {
    let c = claim("c", "local").request("5Gi").build();
    let none = HashSet::new();
    let labels = BTreeMap::from([("kubernetes.io/hostname".to_string(), "n1".to_string())]);
    let pick = |pvs: Vec<PersistentVolumeBuilderOut>| {
        let pvs: Vec<_> = pvs.into_iter().map(Arc::new).collect();
        matching::find_matching_volume(&c, &pvs, &labels, &none)
            .expect("the selector parses")
            .and_then(|v| v.metadata.name.clone())
    };
    type PersistentVolumeBuilderOut = k8s_openapi::api::core::v1::PersistentVolume;
    assert_eq!(
        pick(vec![volume("v", "5Gi").class("local").build()]).as_deref(),
        Some("v")
    );
    assert_eq!(
        pick(vec![volume("v", "4Gi").class("local").build()]),
        None,
        "too small"
    );
    assert_eq!(
        pick(vec![volume("v", "5Gi").class("other").build()]),
        None,
        "other class"
    );
    assert_eq!(
        pick(vec![
            volume("v", "5Gi")
                .class("local")
                .access_modes(&["ReadOnlyMany"])
                .build()
        ]),
        None,
        "access modes"
    );
    let mut released = volume("v", "5Gi").class("local").build();
    released.status.get_or_insert_default().phase = Some("Released".into());
    assert_eq!(pick(vec![released]), None, "not Available");
    // A volume reserved for this claim wins over a smaller free one, and only if it reaches.
    let reserved = volume("r", "50Gi").class("local").claimed_by("c").build();
    let free = volume("f", "5Gi").class("local").build();
    assert_eq!(pick(vec![free.clone(), reserved]).as_deref(), Some("r"));
    let far = volume("r", "50Gi")
        .class("local")
        .claimed_by("c")
        .on_node("n2")
        .build();
    assert_eq!(pick(vec![free, far]), None);
}

/// Without a matching volume a claim is provisioned where its class can: not by the
/// no-provisioner class, not outside `allowedTopologies`; a claim already given a node only
/// fits that node.
#[test]
fn claims_without_a_volume_are_provisioned_where_the_class_allows() {
    let storage = storage_with(|s| {
        s.apply(Arc::new(class("local", WAIT_FOR_FIRST_CONSUMER)));
        let mut zoned = provisioned("zoned");
        zoned.allowed_topologies = Some(vec![k8s_openapi::api::core::v1::TopologySelectorTerm {
            match_label_expressions: Some(vec![
                k8s_openapi::api::core::v1::TopologySelectorLabelRequirement {
                    key: "kubernetes.io/hostname".into(),
                    values: vec!["n1".into()],
                },
            ]),
        }]);
        s.apply(Arc::new(zoned));
        s.apply(Arc::new(claim("local-claim", "local").build()));
        s.apply(Arc::new(claim("zoned-claim", "zoned").build()));
        s.apply(Arc::new(
            claim("chosen", "zoned")
                .annotation(ANN_SELECTED_NODE, "n2")
                .build(),
        ));
    });
    let p = plugin(&storage);
    let nodes = [node("n1"), node("n2")];
    let (_, s) = run(
        &p,
        &PodBuilder::new("p").claim("local-claim").info(),
        &nodes,
    );
    assert_eq!(
        s[0].message(),
        matching::ERR_BIND_CONFLICT,
        "no volume, no provisioner"
    );
    let (state, s) = run(
        &p,
        &PodBuilder::new("p").claim("zoned-claim").info(),
        &nodes,
    );
    assert!(s[0].is_success(), "{:?}", s[0]);
    assert_eq!(
        s[1].message(),
        matching::ERR_BIND_CONFLICT,
        "outside allowedTopologies"
    );
    let st = state.read::<State>(STATE_KEY).expect("state");
    assert_eq!(locks::lock(&st.by_node)["n1"].provisions.len(), 1);
    let (_, s) = run(&p, &PodBuilder::new("p").claim("chosen").info(), &nodes);
    assert_eq!(
        s[0].message(),
        matching::ERR_BIND_CONFLICT,
        "selected for another node"
    );
}

/// Reserve assumes the chosen volume for the claim, so the next pod's claim cannot take it;
/// Unreserve gives it back.
#[test]
fn a_reserved_volume_is_not_offered_to_the_next_pod_until_unreserved() {
    let storage = storage_with(|s| {
        s.apply(Arc::new(class("local", WAIT_FOR_FIRST_CONSUMER)));
        s.apply(Arc::new(
            volume("only", "10Gi").class("local").on_node("n1").build(),
        ));
        s.apply(Arc::new(claim("first", "local").build()));
        s.apply(Arc::new(claim("second", "local").build()));
    });
    let p = plugin(&storage);
    let first = PodBuilder::new("a").claim("first").info();
    let (mut state, s) = run(&p, &first, &[node("n1")]);
    assert!(s[0].is_success());
    assert!(ReservePlugin::reserve(&p, &mut state, &first, "n1").is_success());
    let claimed_by = storage
        .read()
        .volume("only")
        .and_then(|v| v.spec.as_ref()?.claim_ref.as_ref()?.name.clone());
    assert_eq!(claimed_by.as_deref(), Some("first"));

    let second = PodBuilder::new("b").claim("second").info();
    let (_, s) = run(&p, &second, &[node("n1")]);
    assert_eq!(s[0].message(), matching::ERR_BIND_CONFLICT);

    ReservePlugin::unreserve(&p, &state, &first, "n1");
    let (_, s) = run(&p, &second, &[node("n1")]);
    assert!(s[0].is_success(), "{:?}", s[0]);
}

#[test]
fn scores_follow_the_default_shape_as_kube_scheduler_1_37() {
    let storage = storage_with(|s| {
        s.apply(Arc::new(class("local", WAIT_FOR_FIRST_CONSUMER)));
        s.apply(Arc::new(
            volume("half", "10Gi").class("local").on_node("n1").build(),
        ));
        s.apply(Arc::new(
            volume("tenth", "50Gi").class("local").on_node("n2").build(),
        ));
        s.apply(Arc::new(claim("c", "local").build()));
    });
    let p = plugin(&storage);
    let pod = PodBuilder::new("p").claim("c").info();
    let nodes = [node("n1"), node("n2")];
    let (mut state, _) = run(&p, &pod, &nodes);
    assert!(
        PreScorePlugin::pre_score(&p, &mut state, &pod, &[], &Snapshot::default()).is_success(),
        "StorageCapacityScoring is on by default in 1.37: no Skip"
    );
    assert_eq!(p.args.shape, Some(args::default_shape()));
    let scores: Vec<i64> = nodes
        .iter()
        .map(|n| ScorePlugin::score(&p, &state, &pod, n).expect("score"))
        .collect();
    assert_eq!(scores, [50, 90], "5Gi of 10Gi is 50 % used, of 50Gi 10 %");
}

/// PreBindPreFlight, as upstream's: work (Success) when Reserve chose claims to bind or
/// provision on the node, Skip when the pod has no claims or all are bound, an error when
/// nothing was reserved for the node. Work is what makes the binding cycle write the node as
/// the pod's nominated node first.
#[test]
fn pre_bind_has_work_only_for_claims_to_bind_or_provision() {
    let storage = storage_with(|s| {
        s.apply(Arc::new(provisioned("fast")));
        s.apply(Arc::new(claim("new", "fast").build()));
        s.apply(Arc::new(
            volume("pv-1", "10Gi")
                .on_node("n1")
                .claimed_by("data")
                .build(),
        ));
        s.apply(Arc::new(claim("data", "").bound_to("pv-1").build()));
    });
    let p = plugin(&storage);
    let pre_flight = |state: &CycleState, pod: &PodInfo| {
        PreBindPlugin::pre_bind_pre_flight(&p, state, &pod.pod, "n1").code
    };

    let none = PodBuilder::new("none").info();
    let (state, _) = run(&p, &none, &[node("n1")]);
    assert_eq!(pre_flight(&state, &none), Code::Skip, "no claims");

    let bound = PodBuilder::new("bound").claim("data").info();
    let (mut state, s) = run(&p, &bound, &[node("n1")]);
    assert!(s[0].is_success(), "{:?}", s[0]);
    assert!(ReservePlugin::reserve(&p, &mut state, &bound, "n1").is_success());
    assert_eq!(pre_flight(&state, &bound), Code::Skip, "all bound");

    let new = PodBuilder::new("new").claim("new").info();
    let (mut state, s) = run(&p, &new, &[node("n1")]);
    assert!(s[0].is_success(), "{:?}", s[0]);
    assert_eq!(
        PreBindPlugin::pre_bind_pre_flight(&p, &state, &new.pod, "n1").message(),
        "no pod volume found for node \"n1\"",
        "nothing reserved"
    );
    assert!(ReservePlugin::reserve(&p, &mut state, &new, "n1").is_success());
    assert_eq!(pre_flight(&state, &new), Code::Success, "to provision");
}
