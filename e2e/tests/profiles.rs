//! SchedulingProfiles on a real cluster: applied live with no restart, validated with
//! Ready=False naming the field while the last good version serves, two names served at once,
//! conflicts refused, and a deleted profile's pods left alone.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use tether::api::SchedulingProfile;
use tether_e2e::{
    TestNamespace, TestNodes, argocd_health, client, kstatus, kubectl_ok, tether_metric,
    unique_suffix, wait_bound, wait_event, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(30);

fn apply_profile(name: &str, spec: Value) -> anyhow::Result<()> {
    let doc = json!({"apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile", "metadata": {"name": name}, "spec": spec});
    kubectl_ok(&["apply", "-f", "-"], Some(&serde_json::to_string(&doc)?))?;
    Ok(())
}

/// Waits until the profile's Ready condition describes its current generation with `ready`,
/// and returns (reason, message).
async fn wait_ready(client: &Client, name: &str, ready: bool) -> anyhow::Result<(String, String)> {
    let api: Api<SchedulingProfile> = Api::all(client.clone());
    wait_for(
        &format!("SchedulingProfile {name} Ready={ready}"),
        TIMEOUT,
        || {
            let api = api.clone();
            async move {
                let p = api.get(name).await?;
                let generation = p.metadata.generation;
                let status = p.status.unwrap_or_default();
                if status.observed_generation != generation {
                    return Ok(None);
                }
                Ok(status
                    .conditions
                    .iter()
                    .find(|c| {
                        c.type_ == "Ready"
                            && c.observed_generation == generation
                            && (c.status == "True") == ready
                    })
                    .map(|c| (c.reason.clone(), c.message.clone())))
            }
        },
    )
    .await
}

async fn create_pod(
    client: &Client,
    ns: &str,
    name: &str,
    scheduler: &str,
    nodes: &TestNodes,
    cpu: &str,
) -> anyhow::Result<()> {
    let mut spec = json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]});
    nodes.isolate(&mut spec);
    let pod: Pod = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": ns}, "spec": spec}),
    )?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await?;
    Ok(())
}

/// Only NodeResourcesFit scores, with `strategy`: placements depend on it alone.
fn fit_only(scheduler: &str, strategy: &str) -> Value {
    json!({
        "schedulerName": scheduler,
        "plugins": {"score": {"disabled": [{"name": "*"}], "enabled": [{"name": "NodeResourcesFit", "weight": 1}]}},
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": strategy}}}],
    })
}

#[tokio::test]
async fn a_profile_change_takes_effect_live_and_a_bad_one_keeps_the_last_good_serving()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "live").await?;
    let nodes = TestNodes::create(&client, "live", 2, "16", |_, _| {}).await?;
    let (busy, idle) = (&nodes.names[0], &nodes.names[1]);
    let profile = format!("live-{}", unique_suffix());
    let scheduler = format!("{profile}-sched");

    // Load one node so that the strategies disagree: LeastAllocated picks the idle node,
    // MostAllocated the busy one.
    apply_profile(&profile, fit_only(&scheduler, "LeastAllocated"))?;
    let (reason, _) = wait_ready(&client, &profile, true).await?;
    assert_eq!(reason, "Serving");
    let p: SchedulingProfile = Api::all(client.clone()).get(&profile).await?;
    let effective = p.status.and_then(|s| s.plugins).unwrap_or_default();
    assert_eq!(
        effective
            .score
            .iter()
            .map(|s| s.name.as_str())
            .collect::<Vec<_>>(),
        ["NodeResourcesFit"],
        "{effective:?}"
    );
    assert!(effective.filter.contains(&"NodeResourcesFit".to_string()));

    let mut load = json!({"schedulerName": scheduler, "nodeName": busy, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": "8"}}}]});
    nodes.isolate(&mut load);
    let load: Pod = serde_json::from_value(
        json!({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "load", "namespace": ns.name}, "spec": load}),
    )?;
    Api::<Pod>::namespaced(client.clone(), &ns.name)
        .create(&PostParams::default(), &load)
        .await?;

    create_pod(&client, &ns.name, "least", &scheduler, &nodes, "1").await?;
    assert_eq!(
        &wait_bound(&client, &ns.name, "least", TIMEOUT).await?,
        idle,
        "LeastAllocated picks the idle node"
    );

    // Live switch to MostAllocated: no restart of tether.
    apply_profile(&profile, fit_only(&scheduler, "MostAllocated"))?;
    wait_ready(&client, &profile, true).await?;
    create_pod(&client, &ns.name, "most", &scheduler, &nodes, "1").await?;
    assert_eq!(
        &wait_bound(&client, &ns.name, "most", TIMEOUT).await?,
        busy,
        "MostAllocated picks the busy node"
    );

    // An invalid change: Ready=False naming the field; MostAllocated keeps serving.
    let mut bad = fit_only(&scheduler, "LeastAllocated");
    bad["plugins"]["filter"] = json!({"enabled": [{"name": "NoSuchPlugin"}]});
    apply_profile(&profile, bad)?;
    let (reason, message) = wait_ready(&client, &profile, false).await?;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("spec.plugins.filter.enabled[0].name"),
        "got: {message}"
    );
    assert!(message.contains("keeps serving"), "got: {message}");
    create_pod(&client, &ns.name, "still-most", &scheduler, &nodes, "1").await?;
    assert_eq!(
        &wait_bound(&client, &ns.name, "still-most", TIMEOUT).await?,
        busy,
        "the last good version (MostAllocated) serves"
    );

    wait_event(&client, "default", &profile, "InvalidSpec", TIMEOUT, |e| {
        e.contains("NoSuchPlugin")
    })
    .await?;

    // A plugin disabled live: without NodeResourcesFit's PreFilter and Filter, a pod asking
    // for more CPU than any node has is bound all the same.
    create_pod(&client, &ns.name, "too-big", &scheduler, &nodes, "100").await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    wait_for(
        "too-big refused while NodeResourcesFit filters",
        TIMEOUT,
        || {
            let pods = pods.clone();
            async move {
                let p = pods.get("too-big").await?;
                let refused = p
                    .status
                    .and_then(|s| s.conditions)
                    .unwrap_or_default()
                    .iter()
                    .any(|c| c.type_ == "PodScheduled" && c.status == "False");
                Ok(refused.then_some(()))
            }
        },
    )
    .await?;
    apply_profile(
        &profile,
        json!({
            "schedulerName": scheduler,
            "plugins": {
                "preFilter": {"disabled": [{"name": "NodeResourcesFit"}]},
                "filter": {"disabled": [{"name": "NodeResourcesFit"}]},
                "score": {"disabled": [{"name": "*"}]},
            },
        }),
    )?;
    wait_ready(&client, &profile, true).await?;
    wait_bound(&client, &ns.name, "too-big", TIMEOUT).await?;

    kubectl_ok(&["delete", "sp", &profile], None)?;
    nodes.delete().await?;
    ns.delete().await
}

#[tokio::test]
async fn two_names_serve_at_once_a_conflict_is_refused_and_a_deleted_profile_leaves_its_pods_alone()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "two").await?;
    let nodes = TestNodes::create(&client, "two", 1, "16", |_, _| {}).await?;
    let base = format!("two-{}", unique_suffix());
    let (a, b, dup) = (
        format!("{base}-a"),
        format!("{base}-b"),
        format!("{base}-dup"),
    );
    apply_profile(&a, json!({"schedulerName": format!("{a}-sched")}))?;
    apply_profile(&b, json!({"schedulerName": format!("{b}-sched")}))?;
    wait_ready(&client, &a, true).await?;
    wait_ready(&client, &b, true).await?;
    create_pod(
        &client,
        &ns.name,
        "via-a",
        &format!("{a}-sched"),
        &nodes,
        "100m",
    )
    .await?;
    create_pod(
        &client,
        &ns.name,
        "via-b",
        &format!("{b}-sched"),
        &nodes,
        "100m",
    )
    .await?;
    wait_bound(&client, &ns.name, "via-a", TIMEOUT).await?;
    wait_bound(&client, &ns.name, "via-b", TIMEOUT).await?;
    let serving = format!(r#"tether_profiles_serving{{profile="{b}-sched"}}"#);
    assert_eq!(tether_metric(&serving)?, Some(1.0), "b serves");

    // A newer profile claiming a's schedulerName is refused; a keeps serving.
    apply_profile(&dup, json!({"schedulerName": format!("{a}-sched")}))?;
    let (reason, message) = wait_ready(&client, &dup, false).await?;
    assert_eq!(reason, "SchedulerNameConflict");
    assert!(
        message.contains(&format!("SchedulingProfile {a}")),
        "got: {message}"
    );
    kubectl_ok(&["delete", "sp", &dup], None)?;

    // b deleted: its pods stay Pending and untouched; a's pods still get bound.
    kubectl_ok(&["delete", "sp", &b], None)?;
    let api: Api<SchedulingProfile> = Api::all(client.clone());
    wait_for("profile b gone", TIMEOUT, || {
        let api = api.clone();
        let b = b.clone();
        async move { Ok(api.get_opt(&b).await?.is_none().then_some(())) }
    })
    .await?;
    // …and tether has seen it go (its watch follows the API server by a moment).
    wait_for("tether to stop serving b", TIMEOUT, || {
        let serving = serving.clone();
        async move { Ok(tether_metric(&serving)?.is_none().then_some(())) }
    })
    .await?;
    create_pod(
        &client,
        &ns.name,
        "orphan",
        &format!("{b}-sched"),
        &nodes,
        "100m",
    )
    .await?;
    create_pod(
        &client,
        &ns.name,
        "after",
        &format!("{a}-sched"),
        &nodes,
        "100m",
    )
    .await?;
    wait_bound(&client, &ns.name, "after", TIMEOUT).await?;
    let orphan = Api::<Pod>::namespaced(client.clone(), &ns.name)
        .get("orphan")
        .await?;
    assert_eq!(orphan.spec.and_then(|s| s.node_name), None);
    assert!(
        orphan
            .status
            .and_then(|s| s.conditions)
            .unwrap_or_default()
            .iter()
            .all(|c| c.type_ != "PodScheduled")
    );

    // b back: the waiting pod is scheduled, with no restart.
    apply_profile(&b, json!({"schedulerName": format!("{b}-sched")}))?;
    wait_ready(&client, &b, true).await?;
    wait_bound(&client, &ns.name, "orphan", TIMEOUT).await?;

    kubectl_ok(&["delete", "sp", &a, &b], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// Plugin args nested `levels` deep (the API server accepts up to 10,000).
fn nested_args(levels: usize) -> Value {
    let mut args = json!(1);
    for _ in 0..levels {
        args = json!({"a": args});
    }
    args
}

/// Args nested 40 levels deep are refused naming the field. A profile nested 200 levels deep,
/// more than the client can decode, is skipped: profiles created after it are served, and a
/// profile edited into one keeps serving its last readable version.
#[tokio::test]
async fn deeply_nested_args_never_stop_the_other_profiles() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "deep").await?;
    let nodes = TestNodes::create(&client, "deep", 1, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    let (refused, deep, after, edited) = (
        format!("deep40-{suffix}"),
        format!("deep200-{suffix}"),
        format!("after-deep-{suffix}"),
        format!("edited-{suffix}"),
    );
    let with_args = |name: &str, levels: usize| json!({"schedulerName": name, "pluginConfig": [{"name": "NodeResourcesFit", "args": nested_args(levels)}]});

    apply_profile(&refused, with_args(&refused, 40))?;
    let (reason, message) = wait_ready(&client, &refused, false).await?;
    assert_eq!(reason, "InvalidSpec");
    assert!(
        message.contains("pluginConfig[0].args: nests deeper than 16 levels"),
        "{message}"
    );

    apply_profile(&edited, json!({"schedulerName": edited}))?;
    wait_ready(&client, &edited, true).await?;
    apply_profile(&deep, with_args(&deep, 200))?;
    apply_profile(&edited, with_args(&edited, 200))?;
    apply_profile(&after, json!({"schedulerName": after}))?;
    wait_ready(&client, &after, true).await?;
    for scheduler in [&after, &edited] {
        let mut spec =
            json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause"}]});
        nodes.isolate(&mut spec);
        let pod: Pod =
            serde_json::from_value(json!({"metadata": {"name": scheduler}, "spec": spec}))?;
        Api::<Pod>::namespaced(client.clone(), &ns.name)
            .create(&PostParams::default(), &pod)
            .await?;
        wait_bound(&client, &ns.name, scheduler, TIMEOUT).await?;
    }

    for name in [&refused, &deep, &after, &edited] {
        kubectl_ok(&["delete", "sp", name], None)?;
    }
    nodes.delete().await?;
    ns.delete().await
}

/// What a GitOps tool reads from a profile, computed by kstatus itself (sigs.k8s.io/cli-utils,
/// as Flux and kpt do): a serving profile is Current; one just edited is InProgress until tether
/// has judged the new generation; an invalid one is Failed at once with the field named
/// (`Stalled=True`), not InProgress until the pipeline's timeout; fixed, it is Current again.
#[tokio::test]
async fn gitops_tools_read_profiles_as_current_in_progress_or_failed() -> anyhow::Result<()> {
    let client = client().await?;
    let profile = format!("gitops-{}", unique_suffix());
    let scheduler = format!("{profile}-sched");
    let profile_json = || kubectl_ok(&["get", "sp", &profile, "-o", "json"], None);
    let of_profile = || -> anyhow::Result<String> { kstatus(&profile_json()?) };
    // Argo CD's verdict with deploy/argocd's health check, beside kstatus' at every step.
    let argocd = |object: &str| argocd_health("SchedulingProfile", object);
    let argocd_now = || -> anyhow::Result<String> { argocd(&profile_json()?) };
    apply_profile(&profile, fit_only(&scheduler, "LeastAllocated"))?;
    wait_ready(&client, &profile, true).await?;
    assert!(of_profile()?.starts_with("Current"), "{}", of_profile()?);
    assert!(argocd_now()?.starts_with("Healthy"), "{}", argocd_now()?);

    // The object as the edit left it, before tether could have seen it.
    let edit = |spec: Value| -> anyhow::Result<String> {
        kubectl_ok(
            &[
                "patch",
                "sp",
                &profile,
                "--type=merge",
                "-p",
                &json!({"spec": spec}).to_string(),
                "-o",
                "json",
            ],
            None,
        )
    };
    let edited = edit(fit_only(&scheduler, "MostAllocated"))?;
    assert!(
        kstatus(&edited)?.starts_with("InProgress"),
        "{}",
        kstatus(&edited)?
    );
    assert!(
        argocd(&edited)?.starts_with("Progressing"),
        "{}",
        argocd(&edited)?
    );
    wait_ready(&client, &profile, true).await?;
    assert!(of_profile()?.starts_with("Current"), "{}", of_profile()?);

    let mut invalid = fit_only(&scheduler, "MostAllocated");
    invalid["plugins"]["score"]["enabled"] = json!([{"name": "NoSuchPlugin"}]);
    let edited = edit(invalid)?;
    assert!(
        kstatus(&edited)?.starts_with("InProgress"),
        "{}",
        kstatus(&edited)?
    );
    wait_ready(&client, &profile, false).await?;
    let verdict = of_profile()?;
    assert!(
        verdict.starts_with("Failed") && verdict.contains("NoSuchPlugin"),
        "an invalid profile fails with the field named: {verdict}"
    );
    let health = argocd_now()?;
    assert!(
        health.starts_with("Degraded") && health.contains("NoSuchPlugin"),
        "Argo CD shows it Degraded with the field named: {health}"
    );

    edit(fit_only(&scheduler, "LeastAllocated"))?;
    wait_ready(&client, &profile, true).await?;
    assert!(of_profile()?.starts_with("Current"), "{}", of_profile()?);
    kubectl_ok(&["delete", "sp", &profile], None)?;
    Ok(())
}

/// kube-scheduler's metric names work on tether's `/metrics` with the values of what happened:
/// three pods of a profile bound are three `scheduled` attempts (and three attempt durations),
/// one that fits nowhere is an `unschedulable` attempt, and tether's own counter agrees.
#[tokio::test]
async fn kube_scheduler_metrics_count_what_the_test_did() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "metrics").await?;
    let nodes = TestNodes::create(&client, "metrics", 1, "4", |_, _| {}).await?;
    let profile = format!("metrics-{}", unique_suffix());
    let scheduler = format!("{profile}-sched");
    apply_profile(&profile, fit_only(&scheduler, "LeastAllocated"))?;
    wait_ready(&client, &profile, true).await?;
    // Other tests run meanwhile: the queue's counters (not per profile) only grow by at least
    // what this test did.
    let incoming = |queue: &str, event: &str| {
        format!(r#"scheduler_queue_incoming_pods_total{{queue="{queue}",event="{event}"}}"#)
    };
    let added = incoming("active", "UnschedulablePodAdd");
    let parked = incoming("unschedulable", "ScheduleAttemptFailure");
    let added_before = tether_metric(&added)?.unwrap_or(0.0);
    let parked_before = tether_metric(&parked)?.unwrap_or(0.0);
    for name in ["m1", "m2", "m3"] {
        create_pod(&client, &ns.name, name, &scheduler, &nodes, "1").await?;
    }
    create_pod(&client, &ns.name, "too-big", &scheduler, &nodes, "64").await?;
    for name in ["m1", "m2", "m3"] {
        wait_bound(&client, &ns.name, name, TIMEOUT).await?;
    }
    let sample =
        |name: &str, result: &str| format!(r#"{name}{{result="{result}",profile="{scheduler}"}}"#);
    wait_for("the unschedulable attempt counted", TIMEOUT, || {
        let unschedulable = sample("scheduler_schedule_attempts_total", "unschedulable");
        async move { Ok(tether_metric(&unschedulable)?.filter(|n| *n >= 1.0)) }
    })
    .await?;
    // The scheduled attempts are counted once bound, just before the pod's watch event.
    wait_for("three scheduled attempts", TIMEOUT, || {
        let scheduled = sample("scheduler_schedule_attempts_total", "scheduled");
        async move { Ok(tether_metric(&scheduled)?.filter(|n| *n == 3.0)) }
    })
    .await?;
    assert_eq!(
        tether_metric(&sample(
            "scheduler_scheduling_attempt_duration_seconds_count",
            "scheduled"
        ))?,
        Some(3.0)
    );
    assert_eq!(
        tether_metric(&sample("tether_schedule_attempts_total", "scheduled"))?,
        Some(3.0)
    );
    assert!(tether_metric(r#"scheduler_pending_pods{queue="unschedulable"}"#)?.is_some());
    let point = |point: &str| {
        format!(
            r#"scheduler_framework_extension_point_duration_seconds_count{{extension_point="{point}",status="Success",profile="{scheduler}"}}"#
        )
    };
    assert_eq!(tether_metric(&point("Bind"))?, Some(3.0), "three binds");
    assert_eq!(tether_metric(&point("Reserve"))?, Some(3.0));
    assert!(
        tether_metric(&point("PreFilter"))?.is_some_and(|n| n >= 4.0),
        "PreFilter ran for every attempt, the unschedulable pod's too"
    );

    let grew = |name: &str, before: f64| {
        Ok::<_, anyhow::Error>(tether_metric(name)?.unwrap_or(0.0) - before)
    };
    assert!(
        grew(&added, added_before)? >= 4.0,
        "four pods entered activeQ"
    );
    assert!(
        grew(&parked, parked_before)? >= 1.0,
        "the pod too big waits in the unschedulable pool"
    );

    kubectl_ok(&["delete", "sp", &profile], None)?;
    nodes.delete().await?;
    ns.delete().await
}
