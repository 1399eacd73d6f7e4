//! `tether explain` and `tether simulate` against the local cluster, through the binary a
//! person runs. These tests run alone, one at a time, after the shared ones (see the Makefile):
//! explain compares counts over the whole cluster with the FailedScheduling event, and
//! simulate predicts placements from a snapshot, so no other test may change the cluster
//! meanwhile.

use std::path::PathBuf;
use std::process::{Command, Output};
use std::time::Duration;

use anyhow::{Context, bail};
use k8s_openapi::api::core::v1::Pod;
use kube::Client;
use kube::api::{Api, Patch, PatchParams, PostParams};
use serde_json::json;
use tether::scheduler::explain::Explanation;
use tether::simulate::Simulation;
use tether_e2e::{
    TestNamespace, TestNodes, apply_profile, client, kubeconfig_path, kubectl_ok, tether_bin,
    tether_url, unique_suffix, wait_bound, wait_event, wait_for,
};

const BIND_TIMEOUT: Duration = Duration::from_secs(60);

/// Runs `program args` as a person would: with the local cluster's kubeconfig.
fn run(program: &std::path::Path, args: &[&str], path: Option<&str>) -> anyhow::Result<Output> {
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig_path())
        .env_remove("RUST_BACKTRACE");
    if let Some(path) = path {
        cmd.env("PATH", path);
    }
    cmd.output()
        .with_context(|| format!("running {}", program.display()))
}

/// `tether <args> --endpoint <the tether make e2e started> --token-file <a file of token>`.
fn with_token(token: &str, args: &[&str]) -> anyhow::Result<Output> {
    let url = tether_url();
    // From a file, as a person passes it: never on the command line, where `ps` shows it.
    let dir = tempdir("token")?;
    let file = dir.join("token");
    std::fs::write(&file, token)?;
    let file = file.to_string_lossy().into_owned();
    let mut all = args.to_vec();
    all.extend_from_slice(&["--endpoint", &url, "--token-file", &file]);
    let out = run(&tether_bin(), &all, None);
    std::fs::remove_dir_all(&dir)?;
    out
}

/// tether as a kubectl plugin: a directory holding links named `kubectl-tether` and
/// `kubectl_complete-tether` to the binary and a file of `token`, put first on the PATH kubectl
/// runs with. Removed when dropped.
struct KubectlPlugin {
    dir: PathBuf,
    path: String,
    kubectl: PathBuf,
    token_file: String,
}

impl KubectlPlugin {
    fn new(what: &str, token: &str) -> anyhow::Result<Self> {
        let dir = tempdir(what)?;
        for name in ["kubectl-tether", "kubectl_complete-tether"] {
            std::os::unix::fs::symlink(tether_bin(), dir.join(name))?;
        }
        let token_file = dir.join("token");
        std::fs::write(&token_file, token)?;
        Ok(KubectlPlugin {
            path: format!(
                "{}:{}",
                dir.display(),
                std::env::var("PATH").unwrap_or_default()
            ),
            kubectl: PathBuf::from(std::env::var("TETHER_KUBECTL")?),
            token_file: token_file.to_string_lossy().into_owned(),
            dir,
        })
    }

    /// `kubectl <args>`, the plugin on its PATH.
    fn kubectl(&self, args: &[&str]) -> anyhow::Result<Output> {
        run(&self.kubectl, args, Some(&self.path))
    }

    /// `kubectl tether <args>`, asking the shared tether with the token.
    fn tether(&self, args: &[&str]) -> anyhow::Result<Output> {
        let url = tether_url();
        let mut all = vec!["tether"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--endpoint", &url, "--token-file", &self.token_file]);
        self.kubectl(&all)
    }
}

impl Drop for KubectlPlugin {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// `tether explain <pod> --token <token>` against the tether `make e2e` started, with `args`.
fn explain(pod: &str, token: &str, args: &[&str]) -> anyhow::Result<Output> {
    let mut all = vec!["explain", pod];
    all.extend_from_slice(args);
    with_token(token, &all)
}

/// `tether explain <pod> -o json` with `token`.
fn explain_json(pod: &str, token: &str) -> anyhow::Result<Explanation> {
    let out = explain(pod, token, &["-o", "json"])?;
    if !out.status.success() {
        bail!(
            "tether explain {pod} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let read: serde_json::Value =
        serde_json::from_slice(&out.stdout).context("reading explain's JSON")?;
    anyhow::ensure!(
        read["apiVersion"] == "tether.dev/v1alpha1" && read["kind"] == "Explanation",
        "explain's JSON names its version and kind: {read}"
    );
    serde_json::from_value(read).context("reading explain's JSON")
}

/// What a test's ServiceAccount may do.
#[derive(Clone, Copy, PartialEq)]
enum Grant {
    /// Nothing.
    None,
    /// deploy/'s `tether-explainer` in its namespace only: get pods there, but no nodes.
    PodsOnly,
    /// `tether-explainer` across the cluster: get pods, list nodes.
    Explainer,
}

/// A token of a new ServiceAccount `name` in `ns`, granted `grant`; a ClusterRoleBinding made
/// for it is named `<ns>-<name>` (deleted by [`revoke`]).
fn service_account_token(ns: &str, name: &str, grant: Grant) -> anyhow::Result<String> {
    kubectl_ok(&["-n", ns, "create", "serviceaccount", name], None)?;
    let subject = format!("--serviceaccount={ns}:{name}");
    match grant {
        Grant::None => {}
        Grant::PodsOnly => drop(kubectl_ok(
            &[
                "-n",
                ns,
                "create",
                "rolebinding",
                name,
                "--clusterrole=tether-explainer",
                &subject,
            ],
            None,
        )?),
        Grant::Explainer => drop(kubectl_ok(
            &[
                "create",
                "clusterrolebinding",
                &format!("{ns}-{name}"),
                "--clusterrole=tether-explainer",
                &subject,
            ],
            None,
        )?),
    }
    Ok(kubectl_ok(
        &["-n", ns, "create", "token", name, "--audience", "tether"],
        None,
    )?
    .trim()
    .to_string())
}

/// Deletes the ClusterRoleBinding [`service_account_token`] made for `name` in `ns`.
fn revoke(ns: &str, name: &str) -> anyhow::Result<()> {
    kubectl_ok(
        &[
            "delete",
            "clusterrolebinding",
            &format!("{ns}-{name}"),
            "--ignore-not-found",
        ],
        None,
    )?;
    Ok(())
}

/// A pod of `cpu` on `nodes` for `scheduler`, bound to `node` when given.
async fn make_pod(
    client: &Client,
    ns: &str,
    name: &str,
    cpu: &str,
    nodes: &TestNodes,
    scheduler: &str,
    extra: serde_json::Value,
) -> anyhow::Result<()> {
    let mut spec = json!({
        "schedulerName": scheduler,
        "containers": [{"name": "c", "image": "busybox", "resources": {"requests": {"cpu": cpu}}}],
    });
    nodes.isolate(&mut spec);
    if let (Some(spec), Some(extra)) = (spec.as_object_mut(), extra.as_object()) {
        spec.extend(extra.clone());
    }
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
    }))?;
    Api::<Pod>::namespaced(client.clone(), ns)
        .create(&PostParams::default(), &pod)
        .await
        .with_context(|| format!("creating pod {name}"))?;
    Ok(())
}

/// The score, runner-up and margin a `Scheduled` event tells.
fn trace(event: &str) -> Option<(i64, String, i64, i64)> {
    let inside = event.split_once(" (score ")?.1;
    let (score, rest) = inside.split_once("; runner-up ")?;
    let (runner_up, rest) = rest.split_once(" scored ")?;
    let (second, rest) = rest.split_once(", margin ")?;
    let margin = rest.split(';').next()?;
    Some((
        score.parse().ok()?,
        runner_up.to_string(),
        second.parse().ok()?,
        margin.parse().ok()?,
    ))
}

/// A bound pod's explanation gives the decision tether made (the node, its score, the
/// runner-up and the margin its Scheduled event tells); a pending pod's gives the reasons its
/// FailedScheduling event counts, with what would have to change; a caller who may not get
/// the pod is refused, and so is one without a valid token. Also as `kubectl tether explain`.
#[tokio::test]
async fn explain_tells_why_a_pod_went_where_it_went_and_why_another_waits() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "explain").await?;
    let nodes = TestNodes::create(&client, "explain", 3, "4", |_, _| {}).await?;
    let scheduler = "tether-scheduler";
    // Three loads, so that the nodes' scores differ: 3, 1 and 0 CPUs of 4 requested.
    for (i, cpu) in [(0, "3"), (1, "1")] {
        let node = &nodes.names[i];
        make_pod(
            &client,
            &ns.name,
            &format!("load-{i}"),
            cpu,
            &nodes,
            scheduler,
            json!({"nodeName": node}),
        )
        .await?;
    }
    make_pod(
        &client,
        &ns.name,
        "web",
        "500m",
        &nodes,
        scheduler,
        json!({}),
    )
    .await?;
    let node = wait_bound(&client, &ns.name, "web", BIND_TIMEOUT).await?;
    assert_eq!(node, nodes.names[2], "the least allocated node wins");
    let events = wait_event(&client, &ns.name, "web", "Scheduled", BIND_TIMEOUT, |e| {
        trace(e).is_some()
    })
    .await?;
    let (score, runner_up, _, margin) = events
        .iter()
        .find_map(|e| trace(e))
        .context("a Scheduled event with a trace")?;

    let reader = service_account_token(&ns.name, "reader", Grant::Explainer)?;
    let e = explain_json(&format!("{}/web", ns.name), &reader)?;
    assert_eq!(e.bound_to.as_deref(), Some(node.as_str()));
    assert_eq!(e.winner.as_deref(), Some(node.as_str()), "{e:#?}");
    assert_eq!(e.scores[0].node, node);
    assert_eq!(
        (e.scores[0].total, e.runner_up.clone(), e.margin),
        (score, Some(runner_up.clone()), Some(margin)),
        "explain gives the scores the Scheduled event told"
    );
    let feasible: Vec<&str> = e.scores.iter().map(|s| s.node.as_str()).collect();
    assert_eq!(
        feasible.len(),
        3,
        "only this test's nodes fit: {feasible:?}"
    );
    // The local cluster's own nodes (kwok-node-*): untainted, so NodeAffinity turns them down.
    let elsewhere = e
        .filters
        .iter()
        .find(|n| n.node.starts_with("kwok-node-"))
        .context("the cluster's own nodes")?;
    assert!(
        !elsewhere.feasible
            && elsewhere
                .verdicts
                .iter()
                .any(|v| v.counted && v.plugin == "NodeAffinity"),
        "{elsewhere:?}"
    );

    // As a kubectl plugin: a link named kubectl-tether on the PATH.
    let plugin = KubectlPlugin::new("kubectl-plugins", &reader)?;
    let pod = format!("{}/web", ns.name);
    // `kubectl tether explain <args>`, asking the shared tether with the reader's token.
    let kubectl_tether = |args: &[&str]| plugin.tether(&[&["explain"], args].concat());
    let out = kubectl_tether(&[&pod])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains(&format!("Winner: {node} (total {score})")),
        "kubectl tether explain: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // One node: the winner's verdicts and its score, first of the feasible nodes.
    let out = kubectl_tether(&[&pod, "--node", &node])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains(&format!("NODE {node}: feasible"))
            && text.contains(&format!("SCORE {node}: total {score}, 1st of")),
        "kubectl tether explain --node: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // kubectl's flags: a kubeconfig file of its own and a context in it whose namespace is the
    // test's, so the bare pod name is found there; YAML out, a versioned Explanation.
    let kubeconfig = plugin.dir.join("config");
    let mut config: serde_json::Value =
        serde_saphyr::from_str(&std::fs::read_to_string(kubeconfig_path())?)?;
    let mut context = config["contexts"][0].clone();
    context["name"] = json!("explainer");
    context["context"]["namespace"] = json!(ns.name);
    if let Some(contexts) = config["contexts"].as_array_mut() {
        contexts.push(context);
    }
    std::fs::write(&kubeconfig, serde_json::to_string(&config)?)?;
    let out = kubectl_tether(&[
        "web",
        "--kubeconfig",
        &kubeconfig.to_string_lossy(),
        "--context",
        "explainer",
        "-o",
        "yaml",
    ])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.starts_with("apiVersion: tether.dev/v1alpha1\nkind: Explanation\n")
            && text.contains(&format!("pod: {}/web", ns.name)),
        "kubectl tether explain --context -o yaml: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(plugin);

    // A pod that fits nowhere: 3.6 CPUs where at most 3.5 are free.
    make_pod(
        &client,
        &ns.name,
        "huge",
        "3600m",
        &nodes,
        scheduler,
        json!({}),
    )
    .await?;
    let huge = format!("{}/huge", ns.name);
    // The event counts every node of the cluster when it was written (other tests' nodes
    // may have gone since): compare what this test's nodes contribute, the CPU shortfall.
    let e = wait_for(
        "explain to count the CPU shortfall the FailedScheduling event counts",
        BIND_TIMEOUT,
        || {
            let (client, ns, huge, reader) = (&client, &ns.name, &huge, &reader);
            async move {
                let events = tether_e2e::events_for(client, ns, "huge", "FailedScheduling").await?;
                let e = explain_json(huge, reader)?;
                let counted = events.last().is_some_and(|last| {
                    last.contains(": 3 Insufficient cpu") || last.contains(", 3 Insufficient cpu")
                });
                let message = e.message.clone().unwrap_or_default();
                Ok((counted && message.contains("3 Insufficient cpu")).then_some(e))
            }
        },
    )
    .await?;
    let cpu = e
        .blocked
        .iter()
        .find(|b| b.reason == "Insufficient cpu")
        .context("cpu blocks")?;
    let mut ours = cpu.nodes.clone();
    ours.sort();
    assert_eq!(ours, nodes.names);
    assert!(
        cpu.remedies
            .iter()
            .any(|r| r.starts_with(&format!("free 100m cpu on {}", nodes.names[2]))),
        "0.5 of 4 requested there: 100m short: {:?}",
        cpu.remedies
    );

    // Who may not get the pod is refused; so is who may get it but not list the nodes (the
    // answer names them all), and a token the API server does not accept.
    let stranger = service_account_token(&ns.name, "stranger", Grant::None)?;
    let pods_only = service_account_token(&ns.name, "pods-only", Grant::PodsOnly)?;
    // The reader's own credential for the API server (a token of the API server's audience)
    // is refused: tether takes only tokens bound to its own audience.
    let for_the_api_server = kubectl_ok(&["-n", &ns.name, "create", "token", "reader"], None)?
        .trim()
        .to_string();
    let other_audience = kubectl_ok(
        &[
            "-n",
            &ns.name,
            "create",
            "token",
            "reader",
            "--audience",
            "elsewhere",
        ],
        None,
    )?
    .trim()
    .to_string();
    for (token, code, words) in [
        (stranger.as_str(), "403", "may not get pods"),
        (pods_only.as_str(), "403", "may not list nodes"),
        ("not-a-token", "401", "not accepted"),
        (for_the_api_server.as_str(), "401", "not accepted"),
        (other_audience.as_str(), "401", "not accepted"),
    ] {
        let out = explain(&huge, token, &[])?;
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            !out.status.success() && stderr.contains(code) && stderr.contains(words),
            "{stderr}"
        );
        assert!(out.stdout.is_empty(), "nothing is explained to them");
    }
    revoke(&ns.name, "reader")?;
    nodes.delete().await?;
    ns.delete().await
}

/// A fresh directory under the system's temporary directory.
fn tempdir(what: &str) -> anyhow::Result<PathBuf> {
    let dir = std::env::temp_dir().join(format!("tether-e2e-{what}-{}", unique_suffix()));
    std::fs::create_dir_all(&dir)?;
    Ok(dir)
}

/// `tether simulate` with `args` for one candidate; its output, or its failure's standard
/// error.
fn simulate(args: &[&str]) -> anyhow::Result<Result<Simulation, String>> {
    let mut all = vec!["simulate", "-o", "json"];
    all.extend_from_slice(args);
    let out = run(&tether_bin(), &all, None)?;
    // As `kubectl diff`: 0 no change, 1 placements would change, 2 not served or failed.
    let code = out.status.code();
    if code == Some(2) {
        return Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    let listed: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "reading simulate's JSON (exit {code:?}): {}",
            String::from_utf8_lossy(&out.stderr)
        )
    })?;
    // A versioned list, one simulation per candidate.
    anyhow::ensure!(
        listed["apiVersion"] == "tether.dev/v1alpha1" && listed["kind"] == "SimulationList",
        "simulate's JSON names its version and kind: {listed}"
    );
    let mut sims: Vec<Simulation> = serde_json::from_value(listed["items"].clone())?;
    anyhow::ensure!(sims.len() == 1, "one simulation per candidate: {sims:?}");
    let changes = sims[0].changes();
    anyhow::ensure!(
        code == Some(if changes > 0 { 1 } else { 0 }),
        "exit {code:?} with {changes} placements changing"
    );
    Ok(Ok(sims.remove(0)))
}

/// A pending pod with a ResourceClaim is simulated where its device is, online and from a
/// snapshot file (the snapshot carries ResourceSlices, DeviceClasses and claims, without the
/// drivers' opaque configuration).
#[tokio::test]
async fn simulate_places_a_pod_with_a_claim_where_its_device_is() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "simulate-dra").await?;
    let nodes = TestNodes::create(&client, "simulate-dra", 2, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    let name = format!("sim-dra-{suffix}");
    apply_profile(&client, &name, json!({"schedulerName": name})).await?;
    let driver = format!("sim-{suffix}.example.com");
    let class = format!("sim-{suffix}");
    tether_e2e::device_class(&class, &driver)?;
    let slice = format!("sim-{suffix}");
    tether_e2e::resource_slice(
        &slice,
        &driver,
        &nodes.names[1],
        "gpus",
        json!([{"name": "gpu-0"}]),
    )?;
    tether_e2e::apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "gpu", "namespace": ns.name},
        "spec": {"devices": {
            "requests": [{"name": "gpu", "exactly": {"deviceClassName": class}}],
            "config": [{"opaque": {"driver": driver, "parameters": {"token": "CANARY-claim"}}}]}},
    }))?;
    let mut spec = json!({
        "schedulerName": name,
        "schedulingGates": [{"name": "e2e.tether.dev/hold"}],
        "containers": [{"name": "c", "image": "pause", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "gpu"}],
    });
    nodes.isolate(&mut spec);
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "wants-gpu"}, "spec": spec,
    }))?;
    pods.create(&PostParams::default(), &pod).await?;

    let dir = tempdir("simulate-dra")?;
    let candidate = dir.join("profile.yaml");
    let doc = json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
        "metadata": {"name": name},
        "spec": {"schedulerName": name, "plugins": {"score": {"disabled": [{"name": "ImageLocality"}]}}},
    });
    std::fs::write(&candidate, serde_saphyr::to_string(&doc)?)?;
    let file = candidate.to_string_lossy().into_owned();
    let online = simulate(&["-f", &file])?.map_err(anyhow::Error::msg)?;
    let mine: Vec<_> = online
        .pending
        .iter()
        .filter(|p| p.pod.starts_with(&format!("{}/", ns.name)))
        .collect();
    assert_eq!(mine.len(), 1, "{online:#?}");
    assert_eq!(
        mine[0].live.node.as_deref(),
        Some(nodes.names[1].as_str()),
        "{online:#?}"
    );
    assert_eq!(
        mine[0].candidate.node.as_deref(),
        Some(nodes.names[1].as_str()),
        "{online:#?}"
    );

    let snapshot = dir.join("cluster.json");
    let out = run(&tether_bin(), &["snapshot"], None)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = String::from_utf8_lossy(&out.stdout).into_owned();
    assert!(
        !written.contains("CANARY"),
        "a driver's configuration in the snapshot"
    );
    std::fs::write(&snapshot, &out.stdout)?;
    let offline = simulate(&["-f", &file, "--snapshot", &snapshot.to_string_lossy()])?
        .map_err(anyhow::Error::msg)?;
    assert_eq!(offline, online);

    kubectl_ok(&["delete", "sp", &name], None)?;
    ns.delete().await?;
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// A switch from LeastAllocated to MostAllocated, simulated on a cluster with pending pods,
/// predicts the placements the live switch then makes; the same from a snapshot file; a
/// profile that does not compile exits 2 naming the field; a simulation that changes
/// placements exits 1.
#[tokio::test]
async fn simulate_predicts_what_a_scoring_strategy_switch_does() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "simulate").await?;
    let nodes = TestNodes::create(&client, "simulate", 2, "4", |_, _| {}).await?;
    let name = format!("sim-{}", unique_suffix());
    let strategy = |kind: &str| {
        json!({
            "schedulerName": name,
            "pluginConfig": [{"name": "NodeResourcesFit", "args": {"scoringStrategy": {"type": kind}}}],
        })
    };
    apply_profile(&client, &name, strategy("LeastAllocated")).await?;
    make_pod(
        &client,
        &ns.name,
        "load",
        "2",
        &nodes,
        &name,
        json!({"nodeName": nodes.names[0]}),
    )
    .await?;
    // Held back by a gate, so that they wait for the switch.
    let gate = json!({"schedulingGates": [{"name": "e2e.tether.dev/hold"}]});
    for i in 0..3 {
        make_pod(
            &client,
            &ns.name,
            &format!("p{i}"),
            "1",
            &nodes,
            &name,
            gate.clone(),
        )
        .await?;
    }

    let dir = tempdir("simulate")?;
    let candidate = dir.join("profile.yaml");
    let doc = json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
        "metadata": {"name": name}, "spec": strategy("MostAllocated"),
    });
    // As a GitOps tool hands it over: several documents, only the profile simulated.
    let other = json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unrelated"}});
    std::fs::write(
        &candidate,
        format!(
            "{}---\n{}",
            serde_saphyr::to_string(&other)?,
            serde_saphyr::to_string(&doc)?
        ),
    )?;
    let file = candidate.to_string_lossy().into_owned();
    let online = simulate(&["-f", &file])?.map_err(anyhow::Error::msg)?;
    assert_eq!(online.pending.len(), 3, "{online:#?}");
    assert!(online.pending.iter().all(|p| p.gated));
    let live: Vec<_> = online.pending.iter().map(|p| p.live.node.clone()).collect();
    let predicted: Vec<_> = online
        .pending
        .iter()
        .map(|p| p.candidate.node.clone())
        .collect();
    let (full, empty) = (Some(nodes.names[0].clone()), Some(nodes.names[1].clone()));
    assert_eq!(
        live,
        [empty.clone(), empty.clone(), full.clone()],
        "{online:#?}"
    );
    assert_eq!(predicted, [full.clone(), full, empty], "{online:#?}");
    assert!(online.changes() > 0);
    let moved = online
        .pending
        .iter()
        .find(|p| p.differs)
        .context("a move")?;
    assert!(
        moved
            .why
            .iter()
            .any(|w| w.starts_with("NodeResourcesFit: ")),
        "{:?}",
        moved.why
    );

    // Offline, from a snapshot file: the same answer.
    let snapshot = dir.join("cluster.json");
    let out = run(&tether_bin(), &["snapshot"], None)?;
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    std::fs::write(&snapshot, &out.stdout)?;
    let offline = simulate(&["-f", &file, "--snapshot", &snapshot.to_string_lossy()])?
        .map_err(anyhow::Error::msg)?;
    assert_eq!(offline, online);

    // A profile that does not compile: exit status 2, the field named.
    let bad = dir.join("bad.yaml");
    let mut wrong = doc.clone();
    wrong["spec"]["plugins"] = json!({"score": {"enabled": [{"name": "NoSuchPlugin"}]}});
    std::fs::write(&bad, serde_saphyr::to_string(&wrong)?)?;
    let refused = simulate(&["-f", &bad.to_string_lossy()])?.expect_err("does not compile");
    assert!(
        refused.contains("InvalidSpec") && refused.contains("spec.plugins.score.enabled[0].name"),
        "{refused}"
    );

    // The live switch, then each pod let go in the order the simulation placed them.
    apply_profile(&client, &name, strategy("MostAllocated")).await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    for placement in &online.pending {
        let pod = placement.pod.rsplit('/').next().context("a pod name")?;
        pods.patch(
            pod,
            &PatchParams::default(),
            &Patch::Json::<()>(serde_json::from_value(
                json!([{"op": "remove", "path": "/spec/schedulingGates"}]),
            )?),
        )
        .await?;
        let node = wait_bound(&client, &ns.name, pod, BIND_TIMEOUT).await?;
        assert_eq!(
            Some(node),
            placement.candidate.node,
            "{pod} lands where the simulation said"
        );
    }
    std::fs::remove_dir_all(&dir)?;
    kubectl_ok(&["delete", "schedulingprofile", &name], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// Room held for a pinned workload that is away: a StatefulSet's pod (its ordinal pinned)
/// scaled away from its full node leaves its room held for `holdRoomSeconds`. A pod of the
/// same priority that wants that node waits, and `explain` names the hold; the ordinal, back
/// within the time, gets its room; away again, its room goes to the waiting pod once the hold
/// ends, and not before.
#[tokio::test]
async fn room_held_for_a_pinned_workload_waits_for_it_then_is_released() -> anyhow::Result<()> {
    const HOLD_SECONDS: i64 = 6;
    let client = client().await?;
    let ns = TestNamespace::create(&client, "hold").await?;
    let nodes = TestNodes::create(&client, "hold", 2, "4", |_, _| {}).await?;
    let profile = format!("hold-{}", unique_suffix());
    let sticky = format!("{profile}-sched");
    apply_profile(
        &client,
        &profile,
        json!({"schedulerName": sticky, "plugins": {"multiPoint": {"enabled": [{"name": "StickyNode"}]}},
            "pluginConfig": [{"name": "StickyNode", "args": {"holdRoomSeconds": HOLD_SECONDS}}]}),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let mut spec = json!({"schedulerName": sticky, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "db", "resources": {"requests": {"cpu": "1"}}}]});
    nodes.isolate(&mut spec);
    tether_e2e::apply(json!({
        "apiVersion": "apps/v1", "kind": "StatefulSet",
        "metadata": {"name": "db", "namespace": ns.name},
        "spec": {"replicas": 1, "serviceName": "db", "selector": {"matchLabels": {"app": "db"}},
            "template": {"metadata": {"labels": {"app": "db"}}, "spec": spec}},
    }))?;
    let scale = |replicas: u32| {
        kubectl_ok(
            &[
                "scale",
                "statefulset",
                "db",
                "-n",
                &ns.name,
                &format!("--replicas={replicas}"),
            ],
            None,
        )
    };
    let gone = || {
        let pods = pods.clone();
        wait_for("db-0 gone", BIND_TIMEOUT, move || {
            let pods = pods.clone();
            async move { Ok(pods.get_opt("db-0").await?.is_none().then_some(())) }
        })
    };
    let pin = wait_bound(&client, &ns.name, "db-0", BIND_TIMEOUT).await?;
    let bindings: Api<tether::api::StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the pin recorded", BIND_TIMEOUT, || {
        let bindings = bindings.clone();
        let pin = pin.clone();
        async move {
            let b = bindings.get_opt("statefulset-db-0").await?;
            Ok(b.and_then(|b| b.status)
                .filter(|s| s.latest.as_deref() == Some(pin.as_str()))
                .map(|_| ()))
        }
    })
    .await?;
    for i in 0..3 {
        let name = format!("full-{i}");
        make_pod(
            &client,
            &ns.name,
            &name,
            "1",
            &nodes,
            "tether-scheduler",
            json!({"nodeName": pin}),
        )
        .await?;
        wait_bound(&client, &ns.name, &name, BIND_TIMEOUT).await?;
    }

    // Away: its room is held.
    scale(0)?;
    gone().await?;
    make_pod(
        &client,
        &ns.name,
        "late",
        "1",
        &nodes,
        "tether-scheduler",
        json!({"nodeSelector": {"kubernetes.io/hostname": pin}}),
    )
    .await?;
    let reader = service_account_token(&ns.name, "reader", Grant::Explainer)?;
    let e = wait_for("explain to name the hold", BIND_TIMEOUT, || {
        let reader = reader.clone();
        let ns = ns.name.clone();
        async move {
            let e = explain_json(&format!("{ns}/late"), &reader)?;
            Ok((!e.held.is_empty()).then_some(e))
        }
    })
    .await?;
    let held = &e.held[0];
    assert_eq!(held.workload, format!("StatefulSet/{}/db", ns.name));
    assert_eq!(
        (held.node.as_str(), held.requests.as_str()),
        (pin.as_str(), "cpu=1")
    );
    let text =
        String::from_utf8_lossy(&explain(&format!("{}/late", ns.name), &reader, &[])?.stdout)
            .into_owned();
    assert!(
        text.contains("ROOM HELD")
            && text.contains(&format!("StatefulSet/{}/db on {pin}", ns.name)),
        "{text}"
    );
    assert!(e.message.is_some(), "late waits: {e:#?}");

    // Back in time: its room is its own.
    scale(1)?;
    assert_eq!(
        wait_bound(&client, &ns.name, "db-0", BIND_TIMEOUT).await?,
        pin
    );
    assert_eq!(
        pods.get("late").await?.spec.and_then(|s| s.node_name),
        None,
        "late did not take the room"
    );

    // Away again, for good: the room goes to late once the hold ends.
    scale(0)?;
    let until = wait_for("the second hold", BIND_TIMEOUT, || {
        let reader = reader.clone();
        let ns = ns.name.clone();
        async move {
            let e = explain_json(&format!("{ns}/late"), &reader)?;
            Ok(e.held.first().map(|h| h.until.clone()))
        }
    })
    .await?;
    let until: k8s_openapi::jiff::Timestamp = until.parse()?;
    assert_eq!(
        wait_bound(&client, &ns.name, "late", BIND_TIMEOUT).await?,
        pin
    );
    let bound_at = pods
        .get("late")
        .await?
        .status
        .and_then(|s| s.conditions)
        .into_iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled" && c.status == "True")
        .and_then(|c| c.last_transition_time)
        .context("late's PodScheduled time")?
        .0;
    // The API server's condition time has whole seconds.
    assert!(
        bound_at.as_second() >= until.as_second() - 1,
        "late was bound at {bound_at}, before the hold ended at {until}"
    );
    // Counted by the sweep that ends it, within a second of its end: the pod may be bound
    // first, since an expired hold no longer counts.
    wait_for("the expired hold counted", BIND_TIMEOUT, || async {
        let ended = tether_e2e::tether_metric(r#"tether_room_holds_ended_total{how="expired"}"#)?;
        Ok((ended.unwrap_or(0.0) >= 1.0).then_some(()))
    })
    .await?;

    revoke(&ns.name, "reader")?;
    kubectl_ok(&["delete", "sp", &profile], None)?;
    nodes.delete().await?;
    ns.delete().await
}

/// `tether snapshot` writes a file docs/operate.md says to commit: no secret a workload carries
/// reaches it. A Deployment applied with kubectl (which keeps a copy of it in an annotation)
/// carries a canary in its template's environment, arguments, command, probe headers and
/// annotations, and in its own annotations; its pod carries them too. The file names the
/// Deployment and its pod, with the requests scheduling reads, and no canary.
#[tokio::test]
async fn a_snapshot_holds_no_secret_a_workload_carries() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "snapshot").await?;
    let deployment = json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "leaky", "namespace": ns.name,
            "annotations": {"example.com/notes": "CANARY-annotation"}},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "leaky"}},
            "template": {
                "metadata": {"labels": {"app": "leaky"},
                    "annotations": {"example.com/token": "CANARY-template-annotation"}},
                "spec": {"schedulerName": "nobody-serves-this", "containers": [{
                    "name": "c", "image": "pause",
                    "command": ["/app", "--token=CANARY-command"],
                    "args": ["--password=CANARY-args"],
                    "env": [{"name": "PASSWORD", "value": "CANARY-env"}],
                    "readinessProbe": {"httpGet": {"path": "/", "port": 80,
                        "httpHeaders": [{"name": "Authorization", "value": "CANARY-probe"}]}},
                    "resources": {"requests": {"cpu": "123m"}}}]}}}
    });
    kubectl_ok(&["apply", "-f", "-"], Some(&deployment.to_string()))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the Deployment's pod", BIND_TIMEOUT, || async {
        let listed = pods.list(&Default::default()).await?;
        Ok((!listed.items.is_empty()).then_some(()))
    })
    .await?;

    let out = run(&tether_bin(), &["snapshot"], None)?;
    anyhow::ensure!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let written = String::from_utf8(out.stdout)?;
    let leaked: Vec<&str> = written
        .match_indices("CANARY")
        .map(|(i, _)| &written[i.saturating_sub(60)..(i + 30).min(written.len())])
        .collect();
    anyhow::ensure!(leaked.is_empty(), "secrets in the snapshot: {leaked:#?}");
    let state: tether::simulate::cluster::ClusterState = serde_json::from_str(&written)?;
    let ours = |m: &kube::api::ObjectMeta| m.namespace.as_deref() == Some(ns.name.as_str());
    assert!(state.deployments.iter().any(|d| ours(&d.metadata)));
    let pod = state
        .pods
        .iter()
        .find(|p| ours(&p.metadata))
        .context("the pod is in the snapshot")?;
    let requests = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers[0].resources.as_ref())
        .and_then(|r| r.requests.clone())
        .unwrap_or_default();
    assert_eq!(requests.get("cpu").map(|q| q.0.as_str()), Some("123m"));
    ns.delete().await
}

/// "Why is my GPU pod pending": explain names, for the node that has the driver's devices,
/// the request and each device that does not serve it and why (taken by another claim, a
/// selector false, a taint not tolerated), where the pod's condition only says `cannot
/// allocate all claims`.
#[tokio::test]
async fn explain_names_the_devices_a_claim_cannot_have_and_why() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "explain-dra").await?;
    let nodes = TestNodes::create(&client, "explain-dra", 1, "4", |_, _| {}).await?;
    let suffix = unique_suffix();
    let driver = format!("gpu-{suffix}.example.com");
    let class = format!("gpu-{suffix}");
    tether_e2e::device_class(&class, &driver)?;
    let slice = format!("explain-{suffix}");
    tether_e2e::resource_slice(
        &slice,
        &driver,
        &nodes.names[0],
        "p",
        json!([
            {"name": "gpu-0", "attributes": {"model": {"string": "a100"}}},
            {"name": "gpu-1", "attributes": {"model": {"string": "h100"}},
             "taints": [{"key": "example.com/broken", "value": "fan", "effect": "NoSchedule"}]}]),
    )?;
    let selector = format!("device.attributes[\"{driver}\"].model == \"h100\"");
    tether_e2e::apply(json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
        "metadata": {"name": "h100", "namespace": ns.name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": class, "selectors": [{"cel": {"expression": selector}}]}}]}},
    }))?;
    make_pod(
        &client,
        &ns.name,
        "trainer",
        "100m",
        &nodes,
        "tether-scheduler",
        json!({"resourceClaims": [{"name": "gpu", "resourceClaimName": "h100"}]}),
    )
    .await?;
    wait_for("trainer rejected", BIND_TIMEOUT, || {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
        async move {
            let p = pods.get("trainer").await?;
            Ok(p.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| {
                    c.type_ == "PodScheduled"
                        && c.message
                            .as_deref()
                            .is_some_and(|m| m.contains("cannot allocate all claims"))
                })
                .then_some(()))
        }
    })
    .await?;
    let reader = service_account_token(&ns.name, "reader", Grant::Explainer)?;
    let e = explain_json(&format!("{}/trainer", ns.name), &reader)?;
    revoke(&ns.name, "reader")?;
    let blocker = e
        .blocked
        .iter()
        .find(|b| b.reason == "cannot allocate all claims")
        .with_context(|| format!("no DynamicResources blocker: {e:#?}"))?;
    assert_eq!(blocker.nodes, [nodes.names[0].clone()]);
    let remedy = blocker.remedies.join("\n");
    let claim = format!("{}/h100", ns.name);
    for want in [
        format!("claim {claim}, request gpu wants 1 device(s) of class {class}: no device fits"),
        format!("gpu-0 does not match the request's selector #0 ({selector})"),
        "gpu-1 has the taint example.com/broken=fan:NoSchedule the request does not tolerate"
            .to_string(),
    ] {
        assert!(
            remedy.contains(&want),
            "explain says {remedy:?}, not {want:?}"
        );
    }
    ns.delete().await?;
    kubectl_ok(
        &["delete", "resourceslice", &slice, "--ignore-not-found"],
        None,
    )?;
    kubectl_ok(
        &["delete", "deviceclass", &class, "--ignore-not-found"],
        None,
    )?;
    nodes.delete().await
}

/// A gang of 5 pods of 1 CPU (minCount 5) on two nodes of 2 CPUs stays pending; `tether
/// explain` on a member says which members fit where (two per node) and what keeps the fifth
/// out, and that the group is not placed.
#[tokio::test]
async fn explain_tells_which_members_of_a_gang_fit_and_what_blocks_the_rest() -> anyhow::Result<()>
{
    let client = client().await?;
    let ns = TestNamespace::create(&client, "explain-gang").await?;
    let nodes = TestNodes::create(&client, "explain-gang", 2, "2", |_, _| {}).await?;
    tether_e2e::apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "train", "namespace": ns.name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 5}}},
    }))?;
    for i in 0..5 {
        make_pod(
            &client,
            &ns.name,
            &format!("train-{i}"),
            "1",
            &nodes,
            "tether-scheduler",
            json!({"schedulingGroup": {"podGroupName": "train"}}),
        )
        .await?;
    }
    wait_for("train-0 rejected with its group", BIND_TIMEOUT, || {
        let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
        async move {
            let p = pods.get("train-0").await?;
            Ok(p.status
                .and_then(|s| s.conditions)
                .unwrap_or_default()
                .iter()
                .any(|c| c.type_ == "PodScheduled" && c.status == "False")
                .then_some(()))
        }
    })
    .await?;
    let reader = service_account_token(&ns.name, "reader", Grant::Explainer)?;
    let e = explain_json(&format!("{}/train-0", ns.name), &reader)?;
    let text = explain(&format!("{}/train-0", ns.name), &reader, &[])?;
    revoke(&ns.name, "reader")?;
    let group = e
        .group
        .clone()
        .with_context(|| format!("no group: {e:#?}"))?;
    assert_eq!(group.pod_group, format!("{}/train", ns.name));
    assert!(!group.placed);
    assert_eq!(group.members.len(), 5);
    for node in &nodes.names {
        assert_eq!(
            group
                .members
                .iter()
                .filter(|m| m.node.as_deref() == Some(node.as_str()))
                .count(),
            2,
            "{group:#?}"
        );
    }
    let out = group
        .members
        .iter()
        .find(|m| m.node.is_none())
        .with_context(|| format!("{group:#?}"))?;
    assert!(
        out.reason
            .as_deref()
            .is_some_and(|r| r.contains("Insufficient cpu")),
        "{out:?}"
    );
    assert!(
        group.verdict.starts_with(
            "minCount 5, 0 scheduled before, 4 of 5 pending fit: the group is not placed"
        ),
        "{}",
        group.verdict
    );
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains(&format!("GANG {}/train", ns.name)), "{text}");
    ns.delete().await?;
    nodes.delete().await
}

/// On a pending pod of a hierarchy (1.38's CompositePodGroups), explain shows the hierarchy:
/// each group, what it needs and has, so the user sees which group holds the root back (here
/// the workers, one pod of the two they need). Before 1.38 there are no hierarchies.
#[tokio::test]
async fn explain_shows_the_hierarchy_a_pod_waits_in() -> anyhow::Result<()> {
    let client = client().await?;
    if tether_e2e::cluster_minor(&client).await? < 38 {
        return Ok(());
    }
    let ns = TestNamespace::create(&client, "explain-hierarchy").await?;
    let nodes = TestNodes::create(&client, "explain-hierarchy", 1, "4", |_, _| {}).await?;
    // A profile of its own: its pods, pending while the test runs, are no other test's (the
    // simulations here compare the default profile's pending pods online and offline).
    let scheduler = format!("explain-hierarchy-{}", unique_suffix());
    apply_profile(&client, &scheduler, json!({"schedulerName": scheduler})).await?;
    let workload = json!({"workloadName": "job", "templateName": "replica"});
    tether_e2e::apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "CompositePodGroup",
        "metadata": {"name": "job", "namespace": ns.name},
        "spec": {"workloadRef": workload, "schedulingPolicy": {"gang": {"minGroupCount": 2}}},
    }))?;
    for (group, min) in [("leader", 1), ("workers", 2)] {
        tether_e2e::apply(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": group, "namespace": ns.name},
            "spec": {"parentCompositePodGroupName": "job", "workloadRef": workload,
                     "schedulingPolicy": {"gang": {"minCount": min}}},
        }))?;
        make_pod(
            &client,
            &ns.name,
            &format!("{group}-0"),
            "100m",
            &nodes,
            &scheduler,
            json!({"schedulingGroup": {"podGroupName": group}}),
        )
        .await?;
    }
    let token = service_account_token(&ns.name, "viewer", Grant::Explainer)?;
    let pod = format!("{}/leader-0", ns.name);
    let explained = wait_for("the hierarchy explained", BIND_TIMEOUT, || async {
        let e = explain_json(&pod, &token)?;
        Ok(e.hierarchy.filter(|h| h.groups.len() == 3))
    })
    .await?;
    revoke(&ns.name, "viewer")?;
    let rows: Vec<(String, usize, usize, usize)> = explained
        .groups
        .iter()
        .map(|g| (g.group.clone(), g.depth, g.needs, g.has))
        .collect();
    assert_eq!(explained.root, format!("compositepodgroup/{}/job", ns.name));
    assert!(!explained.ready, "{explained:?}");
    assert_eq!(
        rows,
        [
            (format!("compositepodgroup/{}/job", ns.name), 1, 2, 1),
            (format!("podgroup/{}/leader", ns.name), 2, 1, 1),
            (format!("podgroup/{}/workers", ns.name), 2, 2, 1),
        ]
    );
    let text = explain(&pod, &token, &[])?;
    let text = String::from_utf8_lossy(&text.stdout);
    assert!(text.contains("HIERARCHY compositepodgroup/"), "{text}");
    kubectl_ok(&["delete", "sp", &scheduler], None)?;
    ns.delete().await?;
    nodes.delete().await?;
    Ok(())
}

/// On a pending member of a gang whose cycle preempted, explain names each victim unit it
/// chose and why: a lower group with `disruptionMode: all` whole (both its pods, one on each
/// node), and a lower pod alone.
#[tokio::test]
async fn explain_names_the_victims_a_gangs_preemption_chose() -> anyhow::Result<()> {
    use tether_e2e::groups::{delete_priority_classes, let_go, pinned, priority_classes};
    let client = client().await?;
    if tether_e2e::cluster_minor(&client).await? < 37 {
        return Ok(());
    }
    let test = "explain-victims";
    let ns = TestNamespace::create(&client, test).await?;
    let nodes = TestNodes::create(&client, test, 2, "4", |_, _| {}).await?;
    let classes = [("low", 100), ("high", 1000)];
    priority_classes(test, &classes)?;
    let (low, high) = (format!("{test}-low"), format!("{test}-high"));
    tether_e2e::apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "low", "namespace": ns.name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}},
                 "priorityClassName": low, "disruptionMode": {"all": {}}},
    }))?;
    let held = [
        ("low-0", Some("low"), 0),
        ("low-1", Some("low"), 1),
        ("solo", None, 0),
    ];
    for (name, group, node) in held {
        pinned(&ns.name, &nodes, name, (group, &low, "2"), node)?;
    }
    for (name, _, _) in held {
        tether_e2e::wait_bound(&client, &ns.name, name, BIND_TIMEOUT).await?;
    }
    let scheduler = format!("{test}-{}", unique_suffix());
    apply_profile(&client, &scheduler, json!({"schedulerName": scheduler})).await?;
    tether_e2e::apply(json!({
        "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
        "metadata": {"name": "pre", "namespace": ns.name},
        "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}, "priorityClassName": high},
    }))?;
    for i in 0..2 {
        make_pod(
            &client,
            &ns.name,
            &format!("pre-{i}"),
            "4",
            &nodes,
            &scheduler,
            json!({"priorityClassName": high, "schedulingGroup": {"podGroupName": "pre"}}),
        )
        .await?;
    }
    let token = service_account_token(&ns.name, "viewer", Grant::Explainer)?;
    let pod = format!("{}/pre-0", ns.name);
    let preemption = wait_for("the preemption explained", BIND_TIMEOUT, || async {
        Ok(explain_json(&pod, &token)?.preemption)
    })
    .await?;
    let text = explain(&pod, &token, &[])?;
    let text = String::from_utf8_lossy(&text.stdout).into_owned();
    revoke(&ns.name, "viewer")?;
    let_go(&ns.name, held.iter().map(|(name, _, _)| *name));
    let units: std::collections::BTreeSet<String> =
        preemption.victims.iter().map(|v| v.unit.clone()).collect();
    assert_eq!(preemption.preemptor, format!("podgroup {}/pre", ns.name));
    assert_eq!(
        units,
        [
            format!("pod {}/solo", ns.name),
            format!("podgroup {}/low", ns.name)
        ]
        .into(),
        "{preemption:?}"
    );
    let whole = preemption
        .victims
        .iter()
        .find(|v| v.unit.starts_with("podgroup"))
        .expect("the group");
    assert_eq!(whole.pods.len(), 2, "{whole:?}");
    assert!(
        whole
            .why
            .contains("disruptionMode All: its 2 pods go together"),
        "{whole:?}"
    );
    assert!(text.contains("LAST PREEMPTION by podgroup"), "{text}");
    kubectl_ok(&["delete", "sp", &scheduler], None)?;
    ns.delete().await?;
    nodes.delete().await?;
    delete_priority_classes(test, &classes)?;
    Ok(())
}

/// `tether pending -o json -n <ns>` (or with `extra` flags instead of `-n`) against the shared
/// tether with `token`: the summary, or what tether refused with.
fn pending(
    ns: &str,
    token: &str,
    extra: &[&str],
) -> anyhow::Result<Result<serde_json::Value, String>> {
    let mut args = vec!["pending", "-o", "json"];
    if extra.is_empty() {
        args.extend_from_slice(&["-n", ns]);
    } else {
        args.extend_from_slice(extra);
    }
    let out = with_token(token, &args)?;
    if !out.status.success() {
        return Ok(Err(String::from_utf8_lossy(&out.stderr).into_owned()));
    }
    Ok(Ok(
        serde_json::from_slice(&out.stdout).context("reading pending's JSON")?
    ))
}

/// `tether pending` groups a namespace's pending pods by what blocks them, from the leader's
/// queue: two pods too big for any node in one group under NodeResourcesFit with its reason
/// (node counts left out), a gated pod under SchedulingGates with its gate; a bound pod is
/// not pending. A caller who may not list the namespace's pods is refused, and so is one who
/// asks for every namespace with a namespace's grant. Also as `kubectl tether pending`.
#[tokio::test]
async fn pending_pods_are_grouped_by_what_blocks_them() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "pending").await?;
    let nodes = TestNodes::create(&client, "pending", 2, "2", |_, _| {}).await?;
    let scheduler = "tether-scheduler";
    for name in ["big-0", "big-1"] {
        make_pod(&client, &ns.name, name, "64", &nodes, scheduler, json!({})).await?;
    }
    make_pod(
        &client,
        &ns.name,
        "held",
        "100m",
        &nodes,
        scheduler,
        json!({"schedulingGates": [{"name": "example.com/held"}]}),
    )
    .await?;
    make_pod(
        &client,
        &ns.name,
        "fits",
        "100m",
        &nodes,
        scheduler,
        json!({}),
    )
    .await?;
    wait_bound(&client, &ns.name, "fits", BIND_TIMEOUT).await?;

    let lister = service_account_token(&ns.name, "lister", Grant::PodsOnly)?;
    // Settled once both big pods were tried and their message written.
    let summary = wait_for(
        "both big pods rejected and the summary to say so",
        Duration::from_secs(60),
        || async {
            let summary = pending(&ns.name, &lister, &[])?.map_err(|e| anyhow::anyhow!(e))?;
            let rejected = summary["groups"].as_array().is_some_and(|groups| {
                groups.iter().any(|g| {
                    g["pods"] == 2
                        && g["reason"]
                            .as_str()
                            .is_some_and(|r| r.contains("Insufficient cpu"))
                })
            });
            Ok(rejected.then_some(summary))
        },
    )
    .await?;
    assert!(
        summary["apiVersion"] == "tether.dev/v1alpha1" && summary["kind"] == "PendingSummary",
        "versioned: {summary}"
    );
    assert_eq!(summary["namespace"], json!(ns.name));
    assert_eq!(
        summary["pods"], 3,
        "the bound pod is not pending: {summary}"
    );
    let groups = summary["groups"].as_array().context("groups")?;
    assert_eq!(groups.len(), 2, "{summary}");
    let big = &groups[0];
    let plugins: Vec<&str> = big["plugins"]
        .as_array()
        .context("plugins")?
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    assert!(plugins.contains(&"NodeResourcesFit"), "{big}");
    let reason = big["reason"].as_str().context("reason")?;
    assert!(
        reason.split("; ").any(|r| r == "Insufficient cpu"),
        "the reason without its node count: {reason}"
    );
    let mut examples: Vec<&str> = big["examples"]
        .as_array()
        .context("examples")?
        .iter()
        .filter_map(|p| p.as_str())
        .collect();
    examples.sort_unstable();
    assert_eq!(
        examples,
        [format!("{}/big-0", ns.name), format!("{}/big-1", ns.name)]
    );
    assert_eq!(
        groups[1]["plugins"],
        json!(["SchedulingGates"]),
        "{summary}"
    );
    assert_eq!(groups[1]["reason"], "scheduling gates: example.com/held");
    assert_eq!(groups[1]["queues"], json!({"gated": 1}));

    // Refusals: no grant at all; a namespace's grant asking for every namespace.
    let stranger = service_account_token(&ns.name, "stranger", Grant::None)?;
    let refused = pending(&ns.name, &stranger, &[])?
        .err()
        .context("a stranger is answered")?;
    assert!(
        refused.contains("403") && refused.contains("list"),
        "{refused}"
    );
    let refused = pending(&ns.name, &lister, &["-A"])?
        .err()
        .context("a namespace's grant is answered for every namespace")?;
    assert!(refused.contains("403"), "{refused}");

    // As a kubectl plugin, in text.
    let plugin = KubectlPlugin::new("kubectl-plugins-pending", &lister)?;
    let out = plugin.tether(&["pending", "-n", &ns.name, "-o", "wide"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success()
            && text.contains(&format!("3 pods pending in namespace {}", ns.name))
            && text
                .lines()
                .any(|l| l.contains("SchedulingGates") && l.contains("gated=1")),
        "kubectl tether pending: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // kubectl completes the plugin's words through kubectl_complete-tether on the PATH.
    let out = plugin.kubectl(&["__complete", "tether", "pend"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.lines().any(|l| l.starts_with("pending")),
        "kubectl __complete tether pend: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let out = plugin.kubectl(&["__complete", "tether", "pending", "--all"])?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.lines().any(|l| l.starts_with("--all-namespaces")),
        "kubectl __complete tether pending --all: {text}"
    );
    drop(plugin);

    nodes.delete().await?;
    ns.delete().await
}

/// A kubeconfig of the local cluster whose user is ServiceAccount `name` of `ns` (a token for
/// the API server, not for tether), as a person's own kubeconfig is. In `dir`.
fn kubeconfig_of(dir: &std::path::Path, ns: &str, name: &str) -> anyhow::Result<PathBuf> {
    let token = kubectl_ok(&["-n", ns, "create", "token", name], None)?;
    let mut config = kube::config::Kubeconfig::read_from(kubeconfig_path())?;
    for auth in &mut config.auth_infos {
        auth.auth_info = Some(kube::config::AuthInfo {
            token: Some(token.trim().to_string().into()),
            ..Default::default()
        });
    }
    let path = dir.join(format!("{name}.kubeconfig"));
    // JSON is YAML: kubectl and tether read it as a kubeconfig.
    std::fs::write(&path, serde_json::to_vec(&config)?)?;
    Ok(path)
}

/// `program args` with `kubeconfig` as the person's kubeconfig and no token or endpoint of
/// tether's in the environment.
fn as_user(
    program: &std::path::Path,
    kubeconfig: &std::path::Path,
    args: &[&str],
    stdin: Option<&str>,
) -> anyhow::Result<Output> {
    use std::io::Write as _;
    let mut cmd = Command::new(program);
    cmd.args(args)
        .env("KUBECONFIG", kubeconfig)
        .env_remove("TETHER_TOKEN_FILE")
        .env_remove("TETHER_ENDPOINT")
        .env_remove("RUST_BACKTRACE")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
    let mut child = cmd
        .spawn()
        .with_context(|| format!("running {}", program.display()))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(input.as_bytes())?;
    }
    drop(child.stdin.take());
    Ok(child.wait_with_output()?)
}

/// A user with nothing but a kubeconfig and the ClusterRole tether-explainer asks `tether
/// explain` and `tether pending` (no token, no endpoint): each is an ExplainRequest made with
/// the user's credentials, answered by the leader for that user, read and deleted. A user
/// without the role cannot make one, and one who may not list nodes is refused by tether; a
/// request that names somebody else as its requester is refused by the admission policy; a
/// request made with kubectl alone is answered in its status.
#[tokio::test]
async fn explain_and_pending_need_nothing_but_a_kubeconfig() -> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "asks").await?;
    let nodes = TestNodes::create(&client, "asks", 2, "2", |_, _| {}).await?;
    let scheduler = "tether-scheduler";
    make_pod(
        &client,
        &ns.name,
        "fits",
        "100m",
        &nodes,
        scheduler,
        json!({}),
    )
    .await?;
    make_pod(&client, &ns.name, "big", "64", &nodes, scheduler, json!({})).await?;
    let node = wait_bound(&client, &ns.name, "fits", BIND_TIMEOUT).await?;
    wait_event(
        &client,
        &ns.name,
        "big",
        "FailedScheduling",
        BIND_TIMEOUT,
        |_| true,
    )
    .await?;

    let dir = tempdir("asks")?;
    let tether = tether_bin();
    let kubectl = PathBuf::from(std::env::var("TETHER_KUBECTL")?);
    for (name, grant) in [
        ("asker", Grant::Explainer),
        ("podsonly", Grant::PodsOnly),
        ("stranger", Grant::None),
    ] {
        service_account_token(&ns.name, name, grant)?;
    }
    let asker = kubeconfig_of(&dir, &ns.name, "asker")?;
    let fits = format!("{}/fits", ns.name);

    // explain, -o json: the bound pod's node.
    let out = as_user(&tether, &asker, &["explain", &fits, "-o", "json"], None)?;
    anyhow::ensure!(
        out.status.success(),
        "tether explain with a kubeconfig: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let explanation: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(explanation["kind"], "Explanation");
    assert_eq!(explanation["boundTo"], json!(node), "{explanation}");
    // explain in text, on the pending pod: the reason its FailedScheduling event gives.
    let out = as_user(&tether, &asker, &["explain", "big", "-n", &ns.name], None)?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && text.contains("Insufficient cpu"),
        "tether explain big: {text}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // pending: the big pod under NodeResourcesFit.
    let out = as_user(
        &tether,
        &asker,
        &["pending", "-n", &ns.name, "-o", "json"],
        None,
    )?;
    anyhow::ensure!(
        out.status.success(),
        "tether pending with a kubeconfig: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let summary: serde_json::Value = serde_json::from_slice(&out.stdout)?;
    assert_eq!(summary["kind"], "PendingSummary");
    assert_eq!(summary["pods"], 1, "{summary}");
    assert!(
        summary["groups"][0]["plugins"]
            .as_array()
            .is_some_and(|p| p.contains(&json!("NodeResourcesFit"))),
        "{summary}"
    );
    // The command deleted its requests.
    let left = kubectl_ok(
        &["-n", &ns.name, "get", "explainrequests", "-o", "name"],
        None,
    )?;
    assert!(left.trim().is_empty(), "requests left behind: {left}");

    // Without the role: the API server refuses the request, and the command says what to ask for.
    let stranger = kubeconfig_of(&dir, &ns.name, "stranger")?;
    let out = as_user(&tether, &stranger, &["explain", &fits], None)?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("tether-explainer"),
        "a stranger: {said}"
    );
    // The role in the namespace only: the request is made, tether refuses it (no nodes).
    let podsonly = kubeconfig_of(&dir, &ns.name, "podsonly")?;
    let out = as_user(&tether, &podsonly, &["explain", &fits], None)?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("403") && said.contains("nodes"),
        "a namespace's grant: {said}"
    );
    // Asking in somebody else's name: the admission policy refuses it.
    let spoof = json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "ExplainRequest",
        "metadata": {"name": "as-admin", "namespace": ns.name},
        "spec": {"pod": "fits", "requester": {"username": "system:admin", "groups": ["system:masters"]}},
    })
    .to_string();
    let out = as_user(&kubectl, &podsonly, &["create", "-f", "-"], Some(&spoof))?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("spec.requester must be"),
        "a request in somebody else's name: {said}"
    );

    // kubectl alone: the requester as `kubectl auth whoami` gives it; the answer in status.
    let me: serde_json::Value =
        serde_json::from_str(&kubectl_ok(&["auth", "whoami", "-o", "json"], None)?)?;
    let user = &me["status"]["userInfo"];
    let request = json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "ExplainRequest",
        "metadata": {"name": "by-hand", "namespace": ns.name},
        "spec": {"pod": "fits", "requester": user},
    })
    .to_string();
    kubectl_ok(&["create", "-f", "-"], Some(&request))?;
    let answered = wait_for(
        "the request made with kubectl to be answered",
        Duration::from_secs(60),
        || async {
            let summary = kubectl_ok(
                &[
                    "-n",
                    &ns.name,
                    "get",
                    "explainrequest",
                    "by-hand",
                    "-o",
                    "jsonpath={.status.summary}",
                ],
                None,
            )?;
            Ok((!summary.is_empty()).then_some(summary))
        },
    )
    .await?;
    assert_eq!(answered, format!("bound to {node}"));
    let columns = kubectl_ok(&["-n", &ns.name, "get", "xr", "by-hand"], None)?;
    assert!(
        columns.contains("POD") && columns.contains(&format!("bound to {node}")),
        "kubectl get xr: {columns}"
    );

    // An answer planted by a co-tenant who may write the status in the namespace (a Role with
    // every verb there) is refused: only who may `answer` across the cluster writes one.
    kubectl_ok(
        &[
            "-n",
            &ns.name,
            "create",
            "role",
            "planter",
            "--verb=*",
            "--resource=explainrequests.tether.dev,explainrequests.tether.dev/status",
        ],
        None,
    )?;
    kubectl_ok(
        &[
            "-n",
            &ns.name,
            "create",
            "rolebinding",
            "planter",
            "--role=planter",
            &format!("--serviceaccount={}:podsonly", ns.name),
        ],
        None,
    )?;
    let out = as_user(
        &kubectl,
        &podsonly,
        &[
            "-n",
            &ns.name,
            "patch",
            "xr",
            "by-hand",
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"summary": "bound to somewhere-else"}}"#,
        ],
        None,
    )?;
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && said.contains("only tether writes"),
        "a planted answer: {said}"
    );

    // One requester has 16 requests at most: past that, tether refuses (429).
    let whoami = as_user(&kubectl, &asker, &["auth", "whoami", "-o", "json"], None)?;
    let asker_info: serde_json::Value = serde_json::from_slice(&whoami.stdout)?;
    for i in 0..18 {
        let request = json!({
            "apiVersion": "tether.dev/v1alpha1", "kind": "ExplainRequest",
            "metadata": {"name": format!("many-{i}"), "namespace": ns.name},
            "spec": {"pod": "fits", "requester": asker_info["status"]["userInfo"]},
        })
        .to_string();
        let out = as_user(&kubectl, &asker, &["create", "-f", "-"], Some(&request))?;
        anyhow::ensure!(
            out.status.success(),
            "request {i}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let codes = wait_for("the 18 requests answered", Duration::from_secs(60), || async {
        let listed = kubectl_ok(
            &[
                "-n",
                &ns.name,
                "get",
                "xr",
                "-o",
                "jsonpath={range .items[*]}{.metadata.name}={.status.answeredAt}/{.status.refused.code}{\"\\n\"}{end}",
            ],
            None,
        )?;
        let many: Vec<&str> = listed.lines().filter(|l| l.starts_with("many-")).collect();
        let answered = many.iter().all(|l| !l.contains("=/"));
        Ok((many.len() == 18 && answered).then(|| {
            many.iter()
                .filter(|l| l.ends_with("/429"))
                .count()
        }))
    })
    .await?;
    assert_eq!(codes, 2, "the 17th and 18th refused");

    std::fs::remove_dir_all(&dir)?;
    for name in ["asker", "podsonly", "stranger"] {
        revoke(&ns.name, name)?;
    }
    nodes.delete().await?;
    ns.delete().await
}
