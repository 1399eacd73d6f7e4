//! kube-scheduler's metric families on tether, side by side with kube-scheduler itself (the
//! binary of the API server's release, serving `/metrics`): the same two pods, one that fits
//! and one that fits nowhere, are scheduled by a kube-scheduler profile and by a tether
//! SchedulingProfile; both are scraped, and every sample kube-scheduler exports of the families
//! below must be on tether under the same name with the same label names. The plugins
//! `scheduler_plugin_evaluation_total` counts at each extension point must be kube-scheduler's
//! too. The exposition is read by this file's own parser, not tether's code.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use anyhow::bail;
use k8s_openapi::api::core::v1::Pod;
use kube::api::Api;
use serde_json::json;
use tether_e2e::faults::curl_self_signed;
use tether_e2e::reference::ReferenceScheduler;
use tether_e2e::{
    TestNamespace, TestNodes, apply_profile, client, free_local_addr, kubectl_ok, sample_value,
    tether_url, unique_suffix, wait_bound, wait_for,
};

/// The samples compared: kube-scheduler exports each of them after the scenario, and tether
/// must too, with the same label names (the bucket bound `le` aside).
const SAMPLES: &[&str] = &[
    "scheduler_schedule_attempts_total",
    "scheduler_scheduling_attempt_duration_seconds_bucket",
    "scheduler_scheduling_algorithm_duration_seconds_bucket",
    "scheduler_pod_scheduling_attempts_bucket",
    "scheduler_pod_scheduling_sli_duration_seconds_bucket",
    "scheduler_framework_extension_point_duration_seconds_bucket",
    "scheduler_plugin_evaluation_total",
    "scheduler_queue_incoming_pods_total",
    "scheduler_pending_pods",
    "scheduler_unschedulable_pods",
    "scheduler_cache_size",
    "scheduler_queued_entities",
    "scheduler_preemption_attempts_total",
];

/// tether's own plugins, which a SchedulingProfile may run beside kube-scheduler's.
const TETHER_PLUGINS: &[&str] = &["StickyNode", "PlacementHistory"];

/// One sample line: its name and its labels.
type Sample = (String, BTreeMap<String, String>);

/// The samples of a text or OpenMetrics exposition (comments and blank lines skipped).
fn parse(text: &str) -> anyhow::Result<Vec<Sample>> {
    let mut samples = Vec::new();
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') {
            continue;
        }
        let name_end = line.find(['{', ' ']).unwrap_or(line.len());
        let name = line[..name_end].to_string();
        let mut labels = BTreeMap::new();
        if line[name_end..].starts_with('{') {
            let mut chars = line[name_end + 1..].chars();
            loop {
                let mut key = String::new();
                for c in chars.by_ref() {
                    if c == '=' || c == '}' {
                        break;
                    }
                    if c != ',' && c != ' ' {
                        key.push(c);
                    }
                }
                if key.is_empty() {
                    break;
                }
                if chars.next() != Some('"') {
                    bail!("a label value without a quote in {line:?}");
                }
                let mut value = String::new();
                let mut escaped = false;
                for c in chars.by_ref() {
                    match (escaped, c) {
                        (false, '\\') => escaped = true,
                        (false, '"') => break,
                        (_, c) => {
                            value.push(c);
                            escaped = false;
                        }
                    }
                }
                labels.insert(key, value);
            }
        }
        samples.push((name, labels));
    }
    Ok(samples)
}

/// The label names each sample name carries, over all its samples (`le` aside).
fn label_names(samples: &[Sample]) -> BTreeMap<&str, BTreeSet<&str>> {
    let mut names: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for (name, labels) in samples {
        let set = names.entry(name.as_str()).or_default();
        set.extend(labels.keys().map(String::as_str).filter(|k| *k != "le"));
    }
    names
}

/// The values label `label` takes on the samples of `family`.
fn values<'a>(samples: &'a [Sample], family: &str, label: &str) -> BTreeSet<&'a str> {
    samples
        .iter()
        .filter(|(name, _)| name == family)
        .filter_map(|(_, labels)| labels.get(label).map(String::as_str))
        .collect()
}

/// The (extension point, plugin) pairs `scheduler_plugin_evaluation_total` counts for
/// `profile`.
fn evaluated(samples: &[Sample], profile: &str) -> BTreeSet<(String, String)> {
    samples
        .iter()
        .filter(|(name, labels)| {
            name == "scheduler_plugin_evaluation_total"
                && labels.get("profile").is_some_and(|p| p == profile)
        })
        .filter_map(|(_, labels)| {
            Some((
                labels.get("extension_point")?.clone(),
                labels.get("plugin")?.clone(),
            ))
        })
        .collect()
}

/// The exposition at `url` once it holds every sample of [`SAMPLES`] and `profile`'s plugin
/// evaluations at Score (the fitting pod was scored), or the last one at the deadline.
async fn scrape_settled(url: &str, profile: &str) -> anyhow::Result<Vec<Sample>> {
    let last = std::cell::RefCell::new(Vec::new());
    let settled = wait_for(
        &format!("{url} to export every family compared"),
        Duration::from_secs(60),
        || {
            let last = &last;
            async move {
                let Some(text) = curl_self_signed(url)? else {
                    return Ok(None);
                };
                let samples = parse(&text)?;
                let names = label_names(&samples);
                let complete = SAMPLES.iter().all(|s| names.contains_key(s))
                    && evaluated(&samples, profile)
                        .iter()
                        .any(|(point, _)| point == "Score");
                *last.borrow_mut() = samples.clone();
                Ok(complete.then_some(samples))
            }
        },
    )
    .await;
    match settled {
        Ok(samples) => Ok(samples),
        Err(e) => {
            let last = last.borrow();
            let names = label_names(&last);
            let missing: Vec<&&str> = SAMPLES.iter().filter(|s| !names.contains_key(*s)).collect();
            Err(e.context(format!("still missing: {missing:?}")))
        }
    }
}

#[test]
fn the_expositions_are_read_with_their_labels() {
    let text = "# HELP x y\n# TYPE x counter\nx_total{a=\"1\",b=\"q\\\"u,o}te\"} 3\nup 1\nh_bucket{le=\"+Inf\",p=\"d\"} 2\n";
    let samples = parse(text).expect("parses");
    assert_eq!(samples.len(), 3);
    assert_eq!(samples[0].1.get("b").map(String::as_str), Some("q\"u,o}te"));
    let names = label_names(&samples);
    assert_eq!(names["x_total"], BTreeSet::from(["a", "b"]));
    assert!(names["up"].is_empty());
    assert_eq!(names["h_bucket"], BTreeSet::from(["p"]));
}

#[tokio::test]
async fn kube_schedulers_metric_families_are_tethers_with_the_same_labels() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "metrics").await?;
    let nodes = TestNodes::create(&client, "metrics", 2, "4", |_, _| {}).await?;
    let reference = format!("metrics-ref-{}", unique_suffix());
    let ours = format!("metrics-tether-{}", unique_suffix());
    let addr = free_local_addr()?;
    let kube = ReferenceScheduler::start_serving(
        "kube-scheduler-metrics",
        json!({"profiles": [{"schedulerName": reference}]}),
        &["GenericWorkload=true"],
        addr,
    )?;
    apply_profile(&client, &ours, json!({"schedulerName": ours})).await?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for scheduler in [&reference, &ours] {
        nodes
            .create_pod(&pods, scheduler, &format!("{scheduler}-fits"), "100m")
            .await?;
        nodes
            .create_pod(&pods, scheduler, &format!("{scheduler}-too-big"), "64")
            .await?;
    }
    for scheduler in [&reference, &ours] {
        wait_bound(
            &client,
            &ns.name,
            &format!("{scheduler}-fits"),
            Duration::from_secs(60),
        )
        .await?;
    }

    // A member of a PodGroup that does not exist: 1.38 counts it `incomplete`.
    for scheduler in [&reference, &ours] {
        let mut spec = json!({
            "schedulerName": scheduler,
            "schedulingGroup": {"podGroupName": "never-made"},
            "containers": [{"name": "c", "image": "pause"}],
        });
        nodes.isolate(&mut spec);
        let pod: Pod = serde_json::from_value(json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": format!("{scheduler}-lost")}, "spec": spec,
        }))?;
        pods.create(&Default::default(), &pod).await?;
    }

    // The member of no known PodGroup: `incomplete` on both (at least: tether's queue holds
    // every profile's pods, the other tests' too).
    for (url, exact) in [
        (format!("https://{addr}/metrics"), true),
        (format!("{}/metrics", tether_url()), false),
    ] {
        wait_for(
            &format!("{url} to count the lost member incomplete"),
            Duration::from_secs(30),
            || {
                let url = url.clone();
                async move {
                    let Some(text) = curl_self_signed(&url)? else {
                        return Ok(None);
                    };
                    let pods = sample_value(&text, r#"scheduler_pending_pods{queue="incomplete"}"#)
                        .unwrap_or(0.0);
                    Ok((if exact { pods == 1.0 } else { pods >= 1.0 }).then_some(()))
                }
            },
        )
        .await?;
    }

    let upstream = scrape_settled(&format!("https://{addr}/metrics"), &reference).await?;
    let tether = scrape_settled(&format!("{}/metrics", tether_url()), &ours).await?;
    drop(kube);

    let (upstream_labels, tether_labels) = (label_names(&upstream), label_names(&tether));
    let mut differ = Vec::new();
    for sample in SAMPLES {
        let (want, got) = (&upstream_labels[sample], tether_labels.get(sample));
        if got != Some(want) {
            differ.push(format!(
                "{sample}: kube-scheduler's labels {want:?}, tether's {got:?}"
            ));
        }
    }
    assert!(differ.is_empty(), "{}", differ.join("\n"));

    // The sub-queues and group pools `scheduler_pending_pods` names, each exported from the
    // start: 1.38's incomplete and pending beside the four.
    assert_eq!(
        values(&tether, "scheduler_pending_pods", "queue"),
        values(&upstream, "scheduler_pending_pods", "queue"),
        "the queues of scheduler_pending_pods"
    );

    let kube_pairs = evaluated(&upstream, &reference);
    let tether_pairs: BTreeSet<(String, String)> = evaluated(&tether, &ours)
        .into_iter()
        .filter(|(_, plugin)| !TETHER_PLUGINS.contains(&plugin.as_str()))
        .collect();
    assert_eq!(
        tether_pairs, kube_pairs,
        "the plugins scheduler_plugin_evaluation_total counts at each extension point"
    );

    kubectl_ok(&["delete", "sp", &ours], None)?;
    nodes.delete().await?;
    ns.delete().await
}
