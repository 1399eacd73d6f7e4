use super::*;
use crate::api::SchedulingProfileSpec;
use crate::scheduler::testing::{NodeBuilder, PodBuilder};

fn profile(name: &str, strategy: &str) -> SchedulingProfile {
    let spec: SchedulingProfileSpec = serde_json::from_value(serde_json::json!({
        "schedulerName": "tether-scheduler",
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}],
    }))
    .expect("a spec");
    let mut p = SchedulingProfile::new(name, spec);
    p.metadata.uid = Some(format!("uid-{name}"));
    p.metadata.generation = Some(1);
    p
}

/// Two nodes, one half full; three pending pods of one CPU each.
fn cluster() -> ClusterState {
    let nodes = vec![
        NodeBuilder::new("full").allocatable("cpu", "4").build(),
        NodeBuilder::new("empty").allocatable("cpu", "4").build(),
    ];
    let mut pods = vec![
        PodBuilder::new("load")
            .uid("load")
            .req_cpu("2")
            .node_name("full")
            .build(),
    ];
    for i in 0..3 {
        pods.push(
            PodBuilder::new(&format!("p{i}"))
                .uid(&format!("p{i}"))
                .req_cpu("1")
                .scheduler_name("tether-scheduler")
                .build(),
        );
    }
    ClusterState {
        kind: cluster::KIND.into(),
        nodes,
        pods,
        scheduling_profiles: vec![profile("default", "LeastAllocated")],
        ..Default::default()
    }
}

/// LeastAllocated spreads onto the empty node; MostAllocated packs the half-full one: the
/// simulation says which pods move, and that NodeResourcesFit moves them.
#[test]
fn a_scoring_strategy_change_moves_the_pods_it_would_move() {
    let sim = simulate(&cluster(), &[profile("default", "MostAllocated")], 0)
        .expect("serves")
        .remove(0);
    let live: Vec<_> = sim
        .pending
        .iter()
        .map(|p| p.live.node.clone().unwrap_or_default())
        .collect();
    let cand: Vec<_> = sim
        .pending
        .iter()
        .map(|p| p.candidate.node.clone().unwrap_or_default())
        .collect();
    assert_eq!(live, ["empty", "empty", "full"], "{sim:#?}");
    assert_eq!(cand, ["full", "full", "empty"], "{sim:#?}");
    assert_eq!(sim.changes(), 3);
    assert!(
        sim.pending[0]
            .why
            .iter()
            .any(|w| w.starts_with("NodeResourcesFit: ")),
        "{:?}",
        sim.pending[0].why
    );
    assert_eq!(
        sim.live_profile.as_deref(),
        Some("SchedulingProfile/default@1")
    );
    let text = render::text(&sim);
    assert!(text.contains("3 would land differently"), "{text}");
}

/// The same profile changes nothing.
#[test]
fn an_unchanged_profile_moves_nothing() {
    let sim = simulate(&cluster(), &[profile("default", "LeastAllocated")], 5)
        .expect("serves")
        .remove(0);
    assert_eq!(sim.changes(), 0, "{sim:#?}");
    assert_eq!(
        sim.bound.len(),
        0,
        "the only bound pod is not the scheduler's"
    );
}

/// A profile that does not compile is refused with the controller's words, naming the field.
#[test]
fn an_invalid_candidate_is_refused_as_the_controller_refuses_it() {
    let mut bad = profile("default", "LeastAllocated");
    bad.spec.percentage_of_nodes_to_score = 140;
    let err = simulate(&cluster(), &[bad], 0).expect_err("invalid");
    assert_eq!(err.len(), 1);
    assert_eq!(err[0].reason, "InvalidSpec");
    assert!(
        err[0].message.contains("spec.percentageOfNodesToScore")
            && err[0]
                .message
                .ends_with("; the last good version (generation 1) keeps serving"),
        "the controller's words, which keep the live version serving: {}",
        err[0]
    );
    let mut other = profile("other", "LeastAllocated");
    other.metadata.uid = None;
    let err = simulate(&cluster(), &[other], 0).expect_err("conflict");
    assert_eq!(err[0].reason, "SchedulerNameConflict", "{}", err[0]);
}

/// Several candidates are judged together, as one apply of them all would be: a new profile
/// for another schedulerName is simulated beside the change to the live one, and a name
/// given twice is refused.
#[test]
fn several_candidates_are_judged_together() {
    let mut gpu = profile("gpu", "MostAllocated");
    gpu.spec.scheduler_name = "tether-gpu".into();
    let sims = simulate(
        &cluster(),
        &[profile("default", "MostAllocated"), gpu.clone()],
        0,
    )
    .expect("both serve");
    let names: Vec<_> = sims.iter().map(|s| s.scheduler_name.as_str()).collect();
    assert_eq!(names, ["tether-scheduler", "tether-gpu"]);
    assert_eq!(
        sims[0].changes(),
        3,
        "the change to the live profile moves pods"
    );
    assert!(
        sims[1].live_profile.is_none() && sims[1].pending.is_empty(),
        "no pod waits for tether-gpu: {:?}",
        sims[1]
    );
    let err = simulate(&cluster(), &[gpu.clone(), gpu], 0).expect_err("twice");
    assert_eq!(err[0].message, "metadata.name: given twice");
}

/// Offline, the StickyBindings and owners in the lists pin as they do live: a StatefulSet's
/// pod pinned to the fuller node goes there under the sticky profile, and the candidate
/// without StickyNode sends it to the emptier node, saying which plugin decides.
#[test]
fn a_pin_read_from_the_lists_holds_until_the_candidate_drops_stickynode() {
    let mut state = cluster();
    state
        .pods
        .retain(|p| p.metadata.name.as_deref() == Some("load"));
    let sticky = |name: &str, plugins: serde_json::Value| {
        let spec: SchedulingProfileSpec = serde_json::from_value(serde_json::json!({
            "schedulerName": "tether-sticky",
            "plugins": plugins,
        }))
        .expect("a spec");
        let mut p = SchedulingProfile::new(name, spec);
        p.metadata.uid = Some(format!("uid-{name}"));
        p.metadata.generation = Some(1);
        p
    };
    state.scheduling_profiles = vec![sticky(
        "vms",
        serde_json::json!({"multiPoint": {"enabled": [{"name": "StickyNode"}]}}),
    )];
    let set: k8s_openapi::api::apps::v1::StatefulSet = serde_json::from_value(serde_json::json!({
        "metadata": {"name": "db", "namespace": "default", "uid": "sts-db"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "serviceName": "db",
                 "template": {"metadata": {"labels": {"app": "db"}}}},
    }))
    .expect("a StatefulSet");
    state.stateful_sets = vec![set];
    let pod = PodBuilder::new("db-0")
        .uid("db-0")
        .label("app", "db")
        .req_cpu("1")
        .scheduler_name("tether-sticky")
        .with(|p| {
            p.metadata.owner_references =
                Some(vec![serde_json::from_value(serde_json::json!({
                "apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "uid": "sts-db",
                "controller": true,
            }))
            .expect("an owner reference")]);
        })
        .build();
    state.pods.push(pod);
    let binding: crate::api::StickyBinding = serde_json::from_value(serde_json::json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "StickyBinding",
        "metadata": {"name": "statefulset-db-0", "namespace": "default"},
        "spec": {"workloadRef": {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "db", "ordinal": 0},
                 "nodeName": "full"},
    }))
    .expect("a StickyBinding");
    state.sticky_bindings = vec![binding];

    let unchanged = simulate(&state, &state.scheduling_profiles.clone(), 0)
        .expect("serves")
        .remove(0);
    assert_eq!(
        unchanged.pending[0].live.node.as_deref(),
        Some("full"),
        "{unchanged:#?}"
    );
    assert_eq!(unchanged.changes(), 0);

    let plain = sticky("vms", serde_json::json!({}));
    let sim = simulate(&state, &[plain], 0).expect("serves").remove(0);
    let p = &sim.pending[0];
    assert_eq!(
        (p.live.node.as_deref(), p.candidate.node.as_deref()),
        (Some("full"), Some("empty")),
        "{sim:#?}"
    );
    assert!(
        p.why.iter().any(|w| w.starts_with("NodeResourcesFit: ")),
        "{:?}",
        p.why
    );
}

/// A container that carries a secret in every place a container can.
fn leaky_container() -> serde_json::Value {
    serde_json::json!({
        "name": "c", "image": "app:1",
        "command": ["/bin/app", "--token=CANARY-command"],
        "args": ["--password=CANARY-args"],
        "env": [{"name": "PASSWORD", "value": "CANARY-env"}],
        "envFrom": [{"secretRef": {"name": "CANARY-envfrom"}}],
        "readinessProbe": {"httpGet": {"path": "/", "port": 80,
            "httpHeaders": [{"name": "Authorization", "value": "CANARY-probe"}]}},
        "livenessProbe": {"exec": {"command": ["check", "CANARY-liveness"]}},
        "lifecycle": {"preStop": {"exec": {"command": ["CANARY-hook"]}}},
        "resources": {"requests": {"cpu": "250m"}},
    })
}

/// Annotations a person or a tool may write, kubectl's copy of the applied object included.
fn leaky_annotations(extra: &[(&str, &str)]) -> serde_json::Value {
    let mut annotations = serde_json::json!({
        "kubectl.kubernetes.io/last-applied-configuration": "{\"env\": \"CANARY-last-applied\"}",
        "example.com/credentials": "CANARY-annotation",
    });
    for (k, v) in extra {
        annotations[*k] = serde_json::json!(v);
    }
    annotations
}

fn leaky_pod_spec() -> serde_json::Value {
    serde_json::json!({
        "containers": [leaky_container()],
        "initContainers": [leaky_container()],
        "volumes": [
            {"name": "flex", "flexVolume": {"driver": "example/flex", "options": {"password": "CANARY-flex"}}},
            {"name": "inline", "csi": {"driver": "example.csi", "volumeAttributes": {"key": "CANARY-csi"}}},
            {"name": "data", "persistentVolumeClaim": {"claimName": "data"}},
        ],
    })
}

#[test]
fn a_snapshot_keeps_what_scheduling_reads_and_no_secret() {
    let template = serde_json::json!({
        "metadata": {"labels": {"app": "web"}, "annotations": leaky_annotations(&[])},
        "spec": leaky_pod_spec(),
    });
    let meta = |name: &str| {
        serde_json::json!({"name": name, "namespace": "ns",
            "annotations": leaky_annotations(&[]),
            "managedFields": [{"manager": "CANARY-manager"}]})
    };
    let mut state: ClusterState = serde_json::from_value(serde_json::json!({
        "kind": cluster::KIND,
        "nodes": [{"metadata": meta("n1")}],
        "namespaces": [{"metadata": meta("ns")}],
        "pods": [{
            "metadata": {"name": "p", "namespace": "ns", "labels": {"app": "web"},
                "annotations": leaky_annotations(&[(crate::scheduler::plugins::sticky::sticky_node::DEFAULT_DISABLE_ANNOTATION, "true"), ("example.com/opt-out", "true")])},
            "spec": leaky_pod_spec(),
        }],
        "schedulingProfiles": [{"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
            "metadata": {"name": "p", "annotations": leaky_annotations(&[])},
            "spec": {"schedulerName": "s", "pluginConfig": [
                {"name": "PlacementHistory", "args": {"disableAnnotation": "example.com/opt-out"}}]}}],
        "services": [{"metadata": meta("svc"), "spec": {"selector": {"app": "web"}}}],
        "replicaSets": [{"metadata": meta("rs"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}],
        "deployments": [{"metadata": meta("d"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template}}],
        "statefulSets": [{"metadata": meta("ss"), "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": template,
            "serviceName": "web",
            "volumeClaimTemplates": [{"metadata": {"name": "data", "annotations": leaky_annotations(&[])}}]}}],
        "persistentVolumeClaims": [{"metadata": {"name": "data", "namespace": "ns",
            "annotations": leaky_annotations(&[(crate::k8s::volumes::ANN_SELECTED_NODE, "n1")])}}],
        "persistentVolumes": [{"metadata": meta("pv")}],
        "storageClasses": [{"metadata": meta("sc"), "provisioner": "example.csi",
            "parameters": {"adminPassword": "CANARY-class"}}],
        "deviceClasses": [{"metadata": meta("gpu"), "spec": {
            "selectors": [{"cel": {"expression": "device.driver == \"gpu.example.com\""}}],
            "config": [{"opaque": {"driver": "gpu.example.com",
                                   "parameters": {"token": "CANARY-device-class"}}}]}}],
        "resourceClaims": [{"metadata": meta("claim"), "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu"}}],
            "config": [{"opaque": {"driver": "gpu.example.com",
                                   "parameters": {"token": "CANARY-claim"}}}]}},
            "status": {"allocation": {"devices": {
                "results": [{"request": "gpu", "driver": "gpu.example.com", "pool": "n1", "device": "gpu-0"}],
                "config": [{"source": "FromClaim", "opaque": {"driver": "gpu.example.com",
                                                           "parameters": {"token": "CANARY-allocation"}}}]}},
                "devices": [{"driver": "gpu.example.com", "pool": "n1", "device": "gpu-0",
                             "data": {"token": "CANARY-device-data"}}]}}],
        "resourceSlices": [{"metadata": meta("slice"), "spec": {"driver": "gpu.example.com",
            "nodeName": "n1", "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
            "devices": [{"name": "gpu-0"}]}}],
    }))
    .expect("a cluster");
    state.keep_only_what_scheduling_reads();
    let written = serde_json::to_string(&state).expect("json");
    assert!(!written.contains("CANARY"), "a secret left: {written}");
    // The devices and the claim's allocation, which placement reads, stay.
    assert_eq!(state.resource_slices.len(), 1);
    assert!(written.contains("\"device\":\"gpu-0\""));
    let handle = state.handle();
    assert!(
        handle.devices.read().claim("ns", "claim").is_some(),
        "the claims reach DynamicResources"
    );

    // What scheduling reads is all there.
    let pod = &state.pods[0];
    let annotations = pod.metadata.annotations.clone().unwrap_or_default();
    assert_eq!(
        annotations.keys().collect::<Vec<_>>(),
        [
            "example.com/opt-out",
            crate::scheduler::plugins::sticky::sticky_node::DEFAULT_DISABLE_ANNOTATION
        ],
        "the opt-outs, the profiles' own included"
    );
    let spec = pod.spec.as_ref().expect("a spec");
    assert_eq!(
        spec.containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .map(|r| r["cpu"].0.as_str()),
        Some("250m")
    );
    assert_eq!(
        spec.volumes.as_ref().map(Vec::len),
        Some(3),
        "volumes stay, bare"
    );
    let claim = &state.persistent_volume_claims[0].metadata;
    assert_eq!(
        claim
            .annotations
            .as_ref()
            .map(|a| a.keys().collect::<Vec<_>>()),
        Some(vec![&crate::k8s::volumes::ANN_SELECTED_NODE.to_string()])
    );
    let template = state.deployments[0]
        .spec
        .template
        .metadata
        .as_ref()
        .and_then(|m| m.labels.clone());
    assert_eq!(template.map(|l| l["app"].clone()).as_deref(), Some("web"));
}

/// A gang member of `group` asking for one CPU.
fn gang_member(name: &str, group: &str) -> Pod {
    let mut pod = PodBuilder::new(name)
        .uid(name)
        .req_cpu("1")
        .scheduler_name("tether-scheduler")
        .build();
    if let Some(spec) = pod.spec.as_mut() {
        spec.scheduling_group = Some(k8s_openapi::api::core::v1::PodSchedulingGroup {
            pod_group_name: Some(group.into()),
        });
    }
    pod
}

fn pod_group(name: &str, min_count: i32) -> k8s_openapi::api::scheduling::v1beta1::PodGroup {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
    }))
    .expect("a PodGroup")
}

/// On 2 + 4 free CPUs (the `cluster()` nodes, its three plain pods gone), in the queue's order (here by name): a gang of 5 does not
/// fit whole after a gang of 3 has taken its room, so none of its members is placed, and the
/// plain pod after it takes a node its members had fit on; the gang of 3 is placed whole.
#[test]
fn pending_gangs_are_placed_whole_or_not_at_all() {
    let mut cluster = cluster();
    cluster
        .pods
        .retain(|p| p.metadata.name.as_deref() == Some("load"));
    for i in 0..3 {
        cluster
            .pods
            .push(gang_member(&format!("a-small-{i}"), "a-small"));
    }
    for i in 0..5 {
        cluster
            .pods
            .push(gang_member(&format!("b-large-{i}"), "b-large"));
    }
    cluster.pods.push(
        PodBuilder::new("c-plain")
            .uid("c-plain")
            .req_cpu("1")
            .scheduler_name("tether-scheduler")
            .build(),
    );
    cluster.pod_groups = vec![pod_group("a-small", 3), pod_group("b-large", 5)];
    let sim = simulate(&cluster, &[profile("default", "LeastAllocated")], 0)
        .expect("serves")
        .remove(0);
    let node_of = |name: &str| {
        sim.pending
            .iter()
            .find(|p| p.pod == format!("default/{name}"))
            .and_then(|p| p.candidate.node.clone())
    };
    for i in 0..3 {
        assert!(node_of(&format!("a-small-{i}")).is_some(), "{sim:#?}");
    }
    for i in 0..5 {
        assert_eq!(node_of(&format!("b-large-{i}")), None, "{sim:#?}");
    }
    assert!(
        node_of("c-plain").is_some(),
        "the room the large gang did not take is free"
    );
    let large = sim
        .pending
        .iter()
        .find(|p| p.pod == "default/b-large-0")
        .expect("b-large-0");
    assert!(
        large
            .candidate
            .message
            .as_deref()
            .is_some_and(|m| m.starts_with("pod group default/b-large is not placed: minCount 5")),
        "{large:#?}"
    );
}

/// scheduler-plugins' PodGroups, with a profile that enables Coscheduling: 7 labelled pods of
/// a group of minMember 7 do not fit on the 6 free CPUs, so none is placed; with minMember 6
/// the six that fit are.
#[test]
fn coscheduling_groups_are_placed_whole_or_not_at_all() {
    let labelled = |i: usize| {
        PodBuilder::new(&format!("mpi-{i}"))
            .uid(&format!("mpi-{i}"))
            .req_cpu("1")
            .scheduler_name("tether-scheduler")
            .label("scheduling.x-k8s.io/pod-group", "mpi")
            .build()
    };
    let group = |min_member: i64| -> kube::api::DynamicObject {
        serde_json::from_value(serde_json::json!({
            "apiVersion": "scheduling.x-k8s.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": "mpi", "namespace": "default"},
            "spec": {"minMember": min_member},
        }))
        .expect("a PodGroup")
    };
    let spec: SchedulingProfileSpec = serde_json::from_value(serde_json::json!({
        "schedulerName": "tether-scheduler",
        "plugins": {"multiPoint": {"enabled": [{"name": "Coscheduling"}]}},
    }))
    .expect("a spec");
    let mut candidate = SchedulingProfile::new("default", spec);
    candidate.metadata.uid = Some("uid-default".into());
    candidate.metadata.generation = Some(2);
    let placed = |min_member: i64| {
        let mut cluster = cluster();
        cluster
            .pods
            .retain(|p| p.metadata.name.as_deref() == Some("load"));
        cluster.pods.extend((0..7).map(labelled));
        cluster.coscheduling_pod_groups = vec![group(min_member)];
        let sim = simulate(&cluster, std::slice::from_ref(&candidate), 0)
            .expect("serves")
            .remove(0);
        sim.pending
            .iter()
            .filter(|p| p.candidate.node.is_some())
            .count()
    };
    assert_eq!(placed(7), 0);
    assert_eq!(placed(6), 6);
}

fn child_group(name: &str, min_count: i32) -> k8s_openapi::api::scheduling::v1beta1::PodGroup {
    serde_json::from_value(serde_json::json!({
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}},
                 "parentCompositePodGroupName": "job"},
    }))
    .expect("a PodGroup")
}

/// A 1.38 hierarchy (CompositePodGroup `job`, a gang of its two PodGroups) on 2 + 4 free CPUs:
/// a leader of 1 pod and workers of 4 fit together, so all five are placed; with workers of 6
/// the workers cannot stand, so the root does not and the leader that fit is not placed either.
#[test]
fn a_hierarchy_is_placed_whole_or_not_at_all() {
    for (workers, placed) in [(4, true), (6, false)] {
        let mut cluster = cluster();
        cluster.kubernetes_version = Some("v1.38.0".into());
        cluster
            .pods
            .retain(|p| p.metadata.name.as_deref() == Some("load"));
        cluster.pods.push(gang_member("leader-0", "leader"));
        for i in 0..workers {
            cluster
                .pods
                .push(gang_member(&format!("workers-{i}"), "workers"));
        }
        cluster.pod_groups = vec![child_group("leader", 1), child_group("workers", workers)];
        cluster.composite_pod_groups = vec![
            serde_json::from_value(serde_json::json!({
                "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup",
                "metadata": {"name": "job", "namespace": "default"},
                "spec": {"schedulingPolicy": {"gang": {"minGroupCount": 2}},
                         "workloadRef": {"workloadName": "job", "templateName": "t"}},
            }))
            .expect("a CompositePodGroup"),
        ];
        let sim = simulate(&cluster, &[profile("default", "LeastAllocated")], 0)
            .expect("serves")
            .remove(0);
        let leader = sim
            .pending
            .iter()
            .find(|p| p.pod == "default/leader-0")
            .expect("leader-0");
        assert_eq!(leader.candidate.node.is_some(), placed, "{sim:#?}");
        let placed_workers = sim
            .pending
            .iter()
            .filter(|p| p.pod.starts_with("default/workers-") && p.candidate.node.is_some())
            .count();
        assert_eq!(placed_workers, if placed { workers as usize } else { 0 });
        if !placed {
            assert_eq!(
                leader.candidate.message.as_deref(),
                Some(
                    "compositepodgroup/default/job is not placed: its groups do not reach their minimum counts"
                ),
                "{leader:#?}"
            );
        }
    }
}

/// The API server keeps a PodGroup's `spec.resourceClaims` only with DRAWorkloadResourceClaims
/// on: a snapshot holding one is simulated with the scheduler's gate on too, one without it
/// (or of 1.36, where tether reads no v1beta1 PodGroup) with the gate off.
#[test]
fn a_snapshot_with_pod_group_claims_simulates_the_gate_on() {
    let mut group = pod_group("train", 2);
    group.spec.resource_claims = Some(vec![
        k8s_openapi::api::scheduling::v1beta1::PodGroupResourceClaim {
            name: "gpu".into(),
            resource_claim_template_name: Some("one-gpu".into()),
            ..Default::default()
        },
    ]);
    let mut state = ClusterState {
        kubernetes_version: Some("v1.38.0".into()),
        pod_groups: vec![pod_group("plain", 2)],
        ..Default::default()
    };
    assert!(!state.handle().features.dra_workload_resource_claims);
    state.pod_groups.push(group);
    assert!(state.handle().features.dra_workload_resource_claims);
    state.kubernetes_version = Some("v1.36.5".into());
    assert!(!state.handle().features.dra_workload_resource_claims);
}
