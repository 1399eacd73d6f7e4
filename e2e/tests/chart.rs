//! The Helm chart, charts/tether: it holds the same objects as deploy/ (a difference fails with a
//! diff of the two renderings), `helm lint` passes, its values change what they say and refuse
//! what cannot work, and on the local control plane the API server accepts it, `helm install`
//! makes it, `helm upgrade` changes it and `helm uninstall` removes it while the CRDs and every
//! StickyBinding stay.
//!
//! helm is the release pinned in e2e/helm/go.mod, built by e2e/scripts/build-helm.sh beside the
//! cached kubectl. The release's pods cannot run here (kwok nodes, no image, no scheduler for
//! them): the test reads the API objects. It installs a tether of its own making (its own
//! cluster-scoped names, no shared ones), so `make e2e` runs it after the shared tether stopped.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, anyhow, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use kube::api::{Api, ListParams};
use serde_json::Value;
use tether::api::StickyBinding;
use tether_e2e::{
    Kubectl, TestNamespace, client, install_crds, kubeconfig_path, kubectl, kubectl_ok, repo_dir,
    repo_version, unique_suffix, wait_for,
};

const TIMEOUT: Duration = Duration::from_secs(60);

/// The helm binary: `$TETHER_HELM`, else the one e2e/scripts/build-helm.sh put beside the cached
/// kubectl (`$TETHER_KUBECTL`).
fn helm_bin() -> anyhow::Result<PathBuf> {
    let bin = match std::env::var_os("TETHER_HELM") {
        Some(path) => PathBuf::from(path),
        None => {
            let kubectl = std::env::var_os("TETHER_KUBECTL").ok_or_else(|| {
                anyhow!("TETHER_KUBECTL is not set: run the end-to-end tests through `make e2e`")
            })?;
            PathBuf::from(kubectl).with_file_name("helm")
        }
    };
    ensure!(
        bin.exists(),
        "{} does not exist: build it with e2e/scripts/build-helm.sh (`make e2e` does)",
        bin.display()
    );
    Ok(bin)
}

/// Runs helm against the local cluster, in the repository, with its configuration and caches
/// in a directory of the tests' own (never the user's).
fn helm(args: &[&str]) -> anyhow::Result<Kubectl> {
    let home = std::env::temp_dir().join("tether-e2e-helm");
    let out = Command::new(helm_bin()?)
        .args(args)
        .arg(format!("--kubeconfig={}", kubeconfig_path().display()))
        .current_dir(repo_dir())
        .env("HELM_CONFIG_HOME", home.join("config"))
        .env("HELM_CACHE_HOME", home.join("cache"))
        .env("HELM_DATA_HOME", home.join("data"))
        .stdin(Stdio::null())
        .output()
        .context("running helm")?;
    Ok(out.into())
}

/// Like [`helm`], but fails when helm fails, with what it printed.
fn helm_ok(args: &[&str]) -> anyhow::Result<String> {
    let out = helm(args)?;
    if !out.success {
        bail!(
            "helm {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// The objects of a multi-document YAML stream (empty documents skipped).
fn parse_objects(yaml: &str) -> anyhow::Result<Vec<Value>> {
    tether_e2e::yaml_documents(yaml)
}

/// `Kind namespace/name`, or `Kind name` for a cluster-scoped object.
fn object_key(object: &Value) -> String {
    let kind = object["kind"].as_str().unwrap_or("?");
    let name = object["metadata"]["name"].as_str().unwrap_or("?");
    match object["metadata"]["namespace"].as_str() {
        Some(ns) => format!("{kind} {ns}/{name}"),
        None => format!("{kind} {name}"),
    }
}

/// The labels that say who manages an object, which only differ by tool: kustomize's
/// `managed-by: kustomize` against Helm's `managed-by: Helm` and its `helm.sh/chart`.
const TOOL_LABELS: [&str; 2] = ["app.kubernetes.io/managed-by", "helm.sh/chart"];

/// An object with what only the tool adds removed, and its keys sorted (for a stable print):
/// the tool labels on the object and on its pod template, Helm's `meta.helm.sh/*` annotations,
/// and a CRD's labels (the chart's crds/ are copied verbatim, never templated, so they cannot
/// carry the release's labels; their spec is compared).
fn normalise(mut object: Value) -> Value {
    let is_crd = object["kind"] == "CustomResourceDefinition";
    for pointer in ["/metadata", "/spec/template/metadata"] {
        let Some(meta) = object.pointer_mut(pointer).and_then(Value::as_object_mut) else {
            continue;
        };
        if is_crd {
            meta.remove("labels");
        }
        let tool_label = |k: &str| TOOL_LABELS.contains(&k);
        let helm_annotation = |k: &str| k.starts_with("meta.helm.sh/");
        for (field, drop) in [
            ("labels", &tool_label as &dyn Fn(&str) -> bool),
            ("annotations", &helm_annotation),
        ] {
            let empty = match meta.get_mut(field).and_then(Value::as_object_mut) {
                Some(map) => {
                    map.retain(|k, _| !drop(k));
                    map.is_empty()
                }
                None => false,
            };
            if empty {
                meta.remove(field);
            }
        }
    }
    sorted(&object)
}

/// `value` with its keys sorted, and whole numbers written as integers (kustomize prints the
/// CRDs' `maximum: 100.0` as `100`: the same number).
fn sorted(value: &Value) -> Value {
    match value {
        Value::Number(n) if n.is_f64() => match n.as_f64() {
            // Every integer up to 2^53 is exact as a float (a CRD's bound of 2^53-1 among them).
            Some(f) if f.fract() == 0.0 && f.abs() <= 9_007_199_254_740_992.0 => {
                Value::from(f as i64)
            }
            _ => value.clone(),
        },
        Value::Object(map) => {
            let ordered: BTreeMap<_, _> = map.iter().map(|(k, v)| (k.clone(), sorted(v))).collect();
            Value::Object(ordered.into_iter().collect())
        }
        Value::Array(items) => Value::Array(items.iter().map(sorted).collect()),
        other => other.clone(),
    }
}

/// The normalised objects of a rendering, by [`object_key`].
fn by_key(yaml: &str) -> anyhow::Result<BTreeMap<String, Value>> {
    let mut objects = BTreeMap::new();
    for object in parse_objects(yaml)? {
        let key = object_key(&object);
        if objects.insert(key.clone(), normalise(object)).is_some() {
            bail!("{key} is rendered twice");
        }
    }
    Ok(objects)
}

/// What differs between two sets of objects, readably: the objects only one side has, then a
/// line diff (`-` left, `+` right) of each object both have that differs. Empty when they match.
fn compare(
    left_name: &str,
    left: &BTreeMap<String, Value>,
    right_name: &str,
    right: &BTreeMap<String, Value>,
) -> anyhow::Result<String> {
    let mut report = String::new();
    for key in left.keys().filter(|k| !right.contains_key(*k)) {
        report += &format!("only in {left_name}: {key}\n");
    }
    for key in right.keys().filter(|k| !left.contains_key(*k)) {
        report += &format!("only in {right_name}: {key}\n");
    }
    for (key, l) in left {
        let Some(r) = right.get(key) else { continue };
        if l != r {
            report += &format!(
                "{key} differs (- {left_name}, + {right_name}):\n{}",
                line_diff(&serde_saphyr::to_string(l)?, &serde_saphyr::to_string(r)?)
            );
        }
    }
    Ok(report)
}

/// A line diff of `a` and `b` with two lines of context around each change (a longest common
/// subsequence over the lines between the common head and tail).
fn line_diff(a: &str, b: &str) -> String {
    let (a, b): (Vec<&str>, Vec<&str>) = (a.lines().collect(), b.lines().collect());
    let head = a.iter().zip(&b).take_while(|(x, y)| x == y).count();
    let tail = a[head..]
        .iter()
        .rev()
        .zip(b[head..].iter().rev())
        .take_while(|(x, y)| x == y)
        .count();
    let (am, bm) = (&a[head..a.len() - tail], &b[head..b.len() - tail]);
    // lcs[i][j]: the longest common subsequence of am[i..] and bm[j..].
    let mut lcs = vec![vec![0usize; bm.len() + 1]; am.len() + 1];
    for i in (0..am.len()).rev() {
        for j in (0..bm.len()).rev() {
            lcs[i][j] = if am[i] == bm[j] {
                lcs[i + 1][j + 1] + 1
            } else {
                lcs[i + 1][j].max(lcs[i][j + 1])
            };
        }
    }
    let mut lines: Vec<(char, &str)> = a[..head].iter().map(|l| (' ', *l)).collect();
    let (mut i, mut j) = (0, 0);
    while i < am.len() || j < bm.len() {
        if i < am.len() && j < bm.len() && am[i] == bm[j] {
            lines.push((' ', am[i]));
            (i, j) = (i + 1, j + 1);
        } else if i < am.len() && (j == bm.len() || lcs[i + 1][j] >= lcs[i][j + 1]) {
            lines.push(('-', am[i]));
            i += 1;
        } else {
            lines.push(('+', bm[j]));
            j += 1;
        }
    }
    lines.extend(a[a.len() - tail..].iter().map(|l| (' ', *l)));
    let changed: Vec<usize> = (0..lines.len()).filter(|&k| lines[k].0 != ' ').collect();
    let near = |k: usize| changed.iter().any(|&c| c.abs_diff(k) <= 2);
    let mut out = String::new();
    let mut skipped = false;
    for (k, (mark, line)) in lines.iter().enumerate() {
        if near(k) {
            out += &format!("  {mark} {line}\n");
            skipped = false;
        } else if !skipped {
            out += "  ...\n";
            skipped = true;
        }
    }
    out
}

/// `helm template` of the chart as release `release` in `namespace`, with `--set` values.
fn template(release: &str, namespace: &str, sets: &[&str]) -> anyhow::Result<String> {
    let mut args = vec![
        "template",
        release,
        "charts/tether",
        "--namespace",
        namespace,
        "--include-crds",
    ];
    for set in sets {
        args.extend(["--set", set]);
    }
    helm_ok(&args)
}

/// deploy/ and the chart's default rendering hold the same objects: the same kinds, names and
/// namespaces, and the same content, labels included, but for the labels that name the tool
/// (kustomize or Helm) and Helm's annotations. The namespace is the one object the defaults
/// leave out (`helm install` cannot make the namespace it keeps its release in): it must be
/// deploy/'s with `namespace.create=true`, and the defaults must be that rendering without it.
#[test]
fn deploy_and_the_chart_hold_the_same_objects() -> anyhow::Result<()> {
    let deploy = repo_dir().join("deploy");
    let kustomized = by_key(&kubectl_ok(
        &["kustomize", &deploy.to_string_lossy()],
        None,
    )?)?;
    let with_namespace = by_key(&template(
        "tether",
        "tether-system",
        &["namespace.create=true"],
    )?)?;
    let drift = compare(
        "deploy/",
        &kustomized,
        "charts/tether (namespace.create=true)",
        &with_namespace,
    )?;
    ensure!(
        drift.is_empty(),
        "deploy/ and charts/tether have drifted apart; change both the same way:\n{drift}"
    );
    let defaults = by_key(&template("tether", "tether-system", &[])?)?;
    let mut without_namespace = with_namespace.clone();
    without_namespace.retain(|key, _| !key.starts_with("Namespace "));
    let drift = compare(
        "charts/tether (defaults)",
        &defaults,
        "charts/tether (namespace.create=true, its Namespace left out)",
        &without_namespace,
    )?;
    ensure!(
        drift.is_empty(),
        "namespace.create changes more than the Namespace:\n{drift}"
    );
    ensure!(
        defaults.len() >= 15,
        "too few objects rendered: {:?}",
        defaults.keys()
    );

    // The default profile is config/samples/default.yaml.
    let sample = by_key(&std::fs::read_to_string(
        repo_dir().join("config/samples/default.yaml"),
    )?)?;
    let mut profile = by_key(&helm_ok(&[
        "template",
        "tether",
        "charts/tether",
        "--set",
        "defaultProfile.enabled=true",
        "--show-only",
        "templates/schedulingprofile.yaml",
    ])?)?;
    for object in profile.values_mut() {
        if let Some(meta) = object["metadata"].as_object_mut() {
            meta.remove("labels");
        }
    }
    let drift = compare(
        "config/samples/default.yaml",
        &sample,
        "charts/tether (defaultProfile.enabled=true)",
        &profile,
    )?;
    ensure!(
        drift.is_empty(),
        "the chart's default profile is not config/samples/default.yaml:\n{drift}"
    );

    // The alerting rules, once deploy/ has them: the chart carries the same groups.
    let deploy_alerts = repo_dir().join("deploy/monitoring/alerts.yaml");
    let chart_alerts = repo_dir().join("charts/tether/files/alerts.yaml");
    if deploy_alerts.exists() {
        ensure!(
            chart_alerts.exists(),
            "deploy/monitoring/alerts.yaml exists but the chart has no copy: run make monitoring-sync"
        );
        let groups = |yaml: &str| -> anyhow::Result<Value> {
            let object = parse_objects(yaml)?
                .into_iter()
                .next()
                .ok_or_else(|| anyhow!("no object"))?;
            Ok(sorted(&object["spec"]["groups"]))
        };
        let want = groups(&std::fs::read_to_string(&deploy_alerts)?)?;
        let rendered = helm_ok(&[
            "template",
            "tether",
            "charts/tether",
            "--set",
            "alerts.prometheusRule.enabled=true",
            "--show-only",
            "templates/prometheusrule.yaml",
        ])?;
        let have = groups(&rendered)?;
        ensure!(
            want == have,
            "the chart's PrometheusRule differs from deploy/monitoring/alerts.yaml (- deploy/, + chart); run make monitoring-sync:\n{}",
            line_diff(
                &serde_saphyr::to_string(&want)?,
                &serde_saphyr::to_string(&have)?
            )
        );
        // A runbook base of one's own (a fork, a wiki) is where every alert points.
        let own = helm_ok(&[
            "template",
            "tether",
            "charts/tether",
            "--set",
            "alerts.prometheusRule.enabled=true",
            "--set",
            "alerts.runbookBaseURL=https://wiki.example/tether/",
            "--show-only",
            "templates/prometheusrule.yaml",
        ])?;
        let runbooks: Vec<&str> = own
            .lines()
            .filter_map(|l| l.trim().strip_prefix("runbook_url: "))
            .collect();
        ensure!(
            !runbooks.is_empty()
                && runbooks
                    .iter()
                    .all(|r| r.starts_with("https://wiki.example/tether#tether")),
            "runbooks not at the base given: {runbooks:?}"
        );
    }
    Ok(())
}

/// The check above fails, and says where, when the two differ.
#[test]
fn a_difference_is_reported_as_a_diff() -> anyhow::Result<()> {
    let deploy = by_key(
        "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: n, labels: {app.kubernetes.io/managed-by: kustomize}}\nspec:\n  ports:\n  - {name: http, port: 8080}\n  selector: {app: a}\n---\nkind: ConfigMap\nmetadata: {name: only-here}\n",
    )?;
    let chart = by_key(
        "apiVersion: v1\nkind: Service\nmetadata: {name: s, namespace: n, labels: {app.kubernetes.io/managed-by: Helm, helm.sh/chart: c-1}}\nspec:\n  ports:\n  - {name: http, port: 9090}\n  selector: {app: a}\n",
    )?;
    let report = compare("deploy/", &deploy, "chart", &chart)?;
    assert!(
        report.contains("only in deploy/: ConfigMap only-here"),
        "{report}"
    );
    assert!(report.contains("Service n/s differs"), "{report}");
    // The changed lines, marked; the lines around them only for context.
    let changed: Vec<&str> = report
        .lines()
        .filter(|l| l.starts_with("  - ") || l.starts_with("  + "))
        .collect();
    assert_eq!(
        changed,
        ["  -     port: 8080", "  +     port: 9090"],
        "{report}"
    );
    assert!(
        !report.contains("managed-by"),
        "tool labels are ignored: {report}"
    );
    Ok(())
}

/// The objects of one kind in a rendering.
fn of_kind<'a>(objects: &'a [Value], kind: &'a str) -> impl Iterator<Item = &'a Value> + 'a {
    objects.iter().filter(move |o| o["kind"] == kind)
}

/// `helm lint` passes, with the defaults and with every optional object on, and the values do
/// what values.yaml says: names from the release, the image, leader election, the budget, and
/// refusals of what cannot work.
#[test]
fn the_chart_lints_and_its_values_do_what_they_say() -> anyhow::Result<()> {
    helm_ok(&["lint", "--strict", "charts/tether"])?;
    let everything = "explainer.enabled=true,defaultProfile.enabled=true,namespace.create=true,\
        metrics.serviceMonitor.enabled=true,alerts.prometheusRule.enabled=true";
    helm_ok(&["lint", "--strict", "charts/tether", "--set", everything])?;

    // Another release's names never meet deploy/'s, and its bindings name its own namespace.
    let objects = parse_objects(&template(
        "other",
        "elsewhere",
        &[everything, "defaultProfile.name=other-default"],
    )?)?;
    for object in &objects {
        let name = object["metadata"]["name"].as_str().unwrap_or_default();
        let kind = object["kind"].as_str().unwrap_or_default();
        if !matches!(kind, "CustomResourceDefinition" | "Namespace") {
            assert!(name.starts_with("other-"), "{kind} {name}");
        }
        if let Some(ns) = object["metadata"]["namespace"].as_str() {
            assert_eq!(ns, "elsewhere", "{kind} {name}");
        }
        for subject in object["subjects"].as_array().into_iter().flatten() {
            assert_eq!(subject["namespace"], "elsewhere", "{kind} {name}");
            assert_eq!(subject["name"], "other-tether", "{kind} {name}");
        }
    }
    for kind in ["ServiceMonitor", "SchedulingProfile", "Namespace"] {
        assert_eq!(of_kind(&objects, kind).count(), 1, "one {kind}");
    }
    // The chart has no files/alerts.yaml yet: then the PrometheusRule is not rendered at all.
    let has_alerts = repo_dir().join("charts/tether/files/alerts.yaml").exists();
    assert_eq!(
        of_kind(&objects, "PrometheusRule").count(),
        usize::from(has_alerts)
    );
    let explainer = |sets: &[&str]| -> anyhow::Result<usize> {
        let objects = parse_objects(&template("tether", "tether-system", sets)?)?;
        Ok(objects
            .iter()
            .filter(|o| o["metadata"]["name"] == "tether-explainer")
            .count())
    };
    // The ClusterRole and the Role that lets explain find the leader.
    assert_eq!(explainer(&[])?, 2);
    assert_eq!(explainer(&["explainer.enabled=false"])?, 0);

    // The pod spec and the number of PodDisruptionBudgets rendered with `sets`.
    let render = |sets: &[&str]| -> anyhow::Result<(Value, usize)> {
        let objects = parse_objects(&template("tether", "tether-system", sets)?)?;
        let pod = of_kind(&objects, "Deployment")
            .next()
            .map(|d| d["spec"]["template"]["spec"].clone())
            .ok_or_else(|| anyhow!("no Deployment"))?;
        Ok((pod, of_kind(&objects, "PodDisruptionBudget").count()))
    };
    let (pod, budgets) = render(&[])?;
    let container = &pod["containers"][0];
    assert_eq!(container["image"], format!("tether:{}", repo_version()?));
    assert_eq!(
        container["args"],
        serde_json::json!(["run", "--leader-elect"])
    );
    assert_eq!(budgets, 1, "a budget for two replicas");
    let (pod, budgets) = render(&[
        "image.repository=registry.example/tether",
        "image.digest=sha256:0000000000000000000000000000000000000000000000000000000000000123",
        "replicas=1",
        "leaderElection.enabled=false",
        "logFormat=text",
        "priorityClassName=",
    ])?;
    assert_eq!(
        pod["containers"][0]["image"],
        "registry.example/tether@sha256:0000000000000000000000000000000000000000000000000000000000000123"
    );
    assert_eq!(pod["containers"][0]["args"], serde_json::json!(["run"]));
    let log_format = pod["containers"][0]["env"]
        .as_array()
        .and_then(|env| env.iter().find(|e| e["name"] == "TETHER_LOG_FORMAT"))
        .map(|e| e["value"].clone());
    assert_eq!(log_format, Some(serde_json::json!("text")), "{pod}");
    assert!(pod.get("priorityClassName").is_none(), "{pod}");
    assert_eq!(
        budgets, 0,
        "no budget for one replica: it would block every drain"
    );
    let objects = parse_objects(&template(
        "tether",
        "tether-system",
        &["leaderElection.leaseName=sched"],
    )?)?;
    let args = &of_kind(&objects, "Deployment")
        .next()
        .ok_or_else(|| anyhow!("no Deployment"))?["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(
        *args,
        serde_json::json!([
            "run",
            "--leader-elect",
            "--leader-elect-resource-name=sched"
        ])
    );
    let role = of_kind(&objects, "Role")
        .next()
        .ok_or_else(|| anyhow!("no Role"))?;
    assert_eq!(
        role["rules"][1]["resourceNames"],
        serde_json::json!(["sched"])
    );

    // The values for real clusters: the log level and more env, the critical pods' quota
    // (rendered only with a critical class), more egress and Cilium's entity.
    let objects = parse_objects(&template(
        "tether",
        "tether-system",
        &[
            "logLevel=debug",
            "extraEnv[0].name=HTTPS_PROXY",
            "extraEnv[0].value=http://proxy:3128",
            "networkPolicy.extraEgress[0].ports[0].port=3128",
            "networkPolicy.cilium=true",
        ],
    )?)?;
    let env = of_kind(&objects, "Deployment")
        .next()
        .map(|d| d["spec"]["template"]["spec"]["containers"][0]["env"].clone())
        .unwrap_or_default();
    let value_of = |name: &str| {
        env.as_array()
            .and_then(|env| env.iter().find(|e| e["name"] == name))
            .map(|e| e["value"].clone())
    };
    assert_eq!(value_of("RUST_LOG"), Some(serde_json::json!("debug")));
    assert_eq!(
        value_of("HTTPS_PROXY"),
        Some(serde_json::json!("http://proxy:3128"))
    );
    let policy = of_kind(&objects, "NetworkPolicy")
        .next()
        .ok_or_else(|| anyhow!("no NetworkPolicy"))?;
    let egress = policy["spec"]["egress"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert_eq!(
        egress.len(),
        3,
        "API server, DNS, and the extra rule: {egress:?}"
    );
    assert_eq!(egress[2]["ports"][0]["port"], 3128);
    let cilium = of_kind(&objects, "CiliumNetworkPolicy")
        .next()
        .ok_or_else(|| anyhow!("no CiliumNetworkPolicy"))?;
    assert_eq!(
        cilium["spec"]["egress"][0]["toEntities"],
        serde_json::json!(["kube-apiserver"])
    );
    let quota = of_kind(&objects, "ResourceQuota")
        .next()
        .ok_or_else(|| anyhow!("no ResourceQuota for the critical class"))?;
    assert_eq!(
        quota["spec"]["scopeSelector"]["matchExpressions"][0]["values"],
        serde_json::json!(["system-cluster-critical"])
    );
    let plain = parse_objects(&template(
        "tether",
        "tether-system",
        &["priorityClassName="],
    )?)?;
    assert_eq!(
        of_kind(&plain, "ResourceQuota").count(),
        0,
        "no class, no quota"
    );
    let system = parse_objects(&template("tether", "kube-system", &[])?)?;
    assert_eq!(
        of_kind(&system, "ResourceQuota").count(),
        0,
        "kube-system's critical pods need no quota, and one would cap the cluster's own"
    );

    // values.schema.json refuses a misspelled key and a wrong type, naming it, before
    // anything is rendered; the template refuses what cannot work.
    for (sets, refusal) in [
        ("leaderElection.enabled=false", "turn leader election on"),
        ("logFormat=xml", "/logFormat"),
        ("replica=3", "replica"),
        ("networkPolicy.cilium=yes", "/networkPolicy/cilium"),
    ] {
        let out = helm(&["template", "tether", "charts/tether", "--set", sets])?;
        assert!(
            !out.success && out.stderr.contains(refusal),
            "{sets}: want a refusal saying {refusal:?}, got success={} {}",
            out.success,
            out.stderr
        );
    }
    Ok(())
}

/// A field of a Deployment, by JSON pointer (null when absent).
async fn deployment_field(
    deployments: &Api<Deployment>,
    name: &str,
    pointer: &str,
) -> anyhow::Result<Value> {
    let d = serde_json::to_value(deployments.get(name).await?)?;
    Ok(d.pointer(pointer).cloned().unwrap_or(Value::Null))
}

/// Whether `kubectl get <kind> <name>` finds the object (in `namespace` when given).
fn exists(kind: &str, name: &str, namespace: Option<&str>) -> anyhow::Result<bool> {
    let mut args = vec!["get", kind, name, "--ignore-not-found", "-o", "name"];
    if let Some(ns) = namespace {
        args.extend(["-n", ns]);
    }
    Ok(!kubectl_ok(&args, None)?.trim().is_empty())
}

/// A release the test installed. A test that fails removes it when the value is dropped (before
/// its namespace, which holds Helm's record of it): `helm uninstall` unless that ran, then
/// whatever cluster-scoped object of it is left, by its `app.kubernetes.io/instance` label.
struct Release {
    name: String,
    namespace: String,
    uninstalled: bool,
    checked: bool,
}

impl Drop for Release {
    fn drop(&mut self) {
        if self.checked {
            return;
        }
        if !self.uninstalled {
            let _ = helm(&["uninstall", &self.name, "--namespace", &self.namespace]);
        }
        let _ = kubectl(
            &[
                "delete",
                "clusterrole,clusterrolebinding,schedulingprofile",
                "-l",
                &format!("app.kubernetes.io/instance={}", self.name),
                "--ignore-not-found",
                "--wait=false",
            ],
            None,
        );
    }
}

/// The objects a release makes besides its Deployment, as (kind, name, namespaced): what the
/// install must make and the uninstall must delete.
fn release_objects(fullname: &str, profile: &str) -> Vec<(&'static str, String, bool)> {
    vec![
        ("serviceaccount", fullname.to_string(), true),
        ("clusterrole", fullname.to_string(), false),
        ("clusterrolebinding", fullname.to_string(), false),
        (
            "clusterrolebinding",
            format!("{fullname}-auth-delegator"),
            false,
        ),
        ("role", format!("{fullname}-leader-election"), true),
        ("rolebinding", format!("{fullname}-leader-election"), true),
        ("clusterrole", format!("{fullname}-explainer"), false),
        ("role", format!("{fullname}-explainer"), true),
        (
            "validatingadmissionpolicy",
            format!("{fullname}-explainrequests"),
            false,
        ),
        (
            "validatingadmissionpolicybinding",
            format!("{fullname}-explainrequests"),
            false,
        ),
        (
            "clusterrole",
            format!("{fullname}-stickybindings-view"),
            false,
        ),
        (
            "clusterrole",
            format!("{fullname}-stickybindings-edit"),
            false,
        ),
        ("poddisruptionbudget", fullname.to_string(), true),
        ("service", format!("{fullname}-metrics"), true),
        ("networkpolicy", fullname.to_string(), true),
        ("schedulingprofile", profile.to_string(), false),
    ]
}

/// The chart on the local control plane: the API server accepts its rendering (dry run),
/// `helm install` makes it in a fresh namespace as a release of another name than deploy/'s
/// (the CRDs already exist: `--skip-crds`), `helm upgrade` changes the Deployment, and `helm
/// uninstall` removes every object of the release while the CRDs and a StickyBinding stay.
#[tokio::test]
async fn the_chart_installs_upgrades_and_uninstalls_on_the_cluster() -> anyhow::Result<()> {
    let client = client().await?;
    install_crds(&client).await?;
    let ns = TestNamespace::create(&client, "chart").await?;
    let workloads = TestNamespace::create(&client, "chart-workloads").await?;
    // The release's namespace, made as the chart's README says: restricted, enforced.
    kubectl_ok(
        &[
            "label",
            "namespace",
            &ns.name,
            "pod-security.kubernetes.io/enforce=restricted",
            "pod-security.kubernetes.io/warn=restricted",
            "pod-security.kubernetes.io/audit=restricted",
        ],
        None,
    )?;
    let release = format!("e2e-chart-{}", unique_suffix());
    let fullname = format!("{release}-tether");
    let profile = format!("{release}-default");
    let base = format!(
        "defaultProfile.enabled=true,defaultProfile.name={profile},defaultProfile.schedulerName={release}-scheduler"
    );

    // The rendering, every object the cluster knows the kind of, is accepted by the API server
    // (schemas, admission, the namespace's Pod Security warnings), and nothing is made.
    let rendered = template(&release, &ns.name, &[&base, "namespace.create=true"])?;
    let dry = kubectl(&["apply", "--dry-run=server", "-f", "-"], Some(&rendered))?;
    ensure!(
        dry.success,
        "the API server refused the chart:\n{}{}",
        dry.stdout,
        dry.stderr
    );
    ensure!(
        !dry.stderr.contains("PodSecurity"),
        "the chart's pods fall short of the restricted standard: {}",
        dry.stderr
    );
    let accepted = dry.stdout.matches("(server dry run)").count();
    assert_eq!(
        accepted,
        parse_objects(&rendered)?.len(),
        "every object accepted:\n{}",
        dry.stdout
    );
    assert!(!exists("deployment", &fullname, Some(&ns.name))?);

    // Install.
    let mut installed = Release {
        name: release.clone(),
        namespace: ns.name.clone(),
        uninstalled: false,
        checked: false,
    };
    // `helm install --wait`, the documented command: it returns once the Deployment is
    // available. The chart's pods name no scheduler: kube-scheduler of the control plane's
    // release places them (as on any cluster) and kwok runs them on its nodes.
    let default_scheduler = tether_e2e::reference::ReferenceScheduler::start_preempting(
        "chart-default-scheduler",
        &["default-scheduler"],
    )?;
    helm_ok(&[
        "install",
        &release,
        "charts/tether",
        "--namespace",
        &ns.name,
        "--skip-crds",
        "--set",
        &base,
        "--wait",
        "--timeout",
        "120s",
    ])?;
    drop(default_scheduler);
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns.name);
    let field = |pointer: &'static str| {
        let (deployments, fullname) = (deployments.clone(), fullname.clone());
        async move { deployment_field(&deployments, &fullname, pointer).await }
    };
    assert_eq!(field("/spec/replicas").await?, 2);
    assert_eq!(
        field("/spec/template/spec/containers/0/args").await?,
        // The release's own admission policy for ExplainRequests (deploy/'s is the default).
        serde_json::json!([
            "run",
            "--leader-elect",
            format!("--explain-policy={fullname}-explainrequests")
        ])
    );
    assert_eq!(
        field("/spec/template/spec/containers/0/image").await?,
        format!("tether:{}", repo_version()?)
    );
    assert_eq!(
        field("/spec/template/spec/serviceAccountName").await?,
        fullname.as_str()
    );
    assert_eq!(
        field("/metadata/labels/app.kubernetes.io~1managed-by").await?,
        "Helm"
    );
    for (kind, name, namespaced) in release_objects(&fullname, &profile) {
        let namespace = namespaced.then_some(ns.name.as_str());
        assert!(
            exists(kind, &name, namespace)?,
            "{kind} {name} was not made"
        );
    }
    // The CRDs are not the release's: what `helm uninstall` deletes never holds them.
    let manifest = helm_ok(&["get", "manifest", &release, "--namespace", &ns.name])?;
    assert!(
        !manifest.contains("kind: CustomResourceDefinition"),
        "{manifest}"
    );
    // The ServiceAccount may do what tether does, in the release's namespace for its Lease.
    let sa = format!("system:serviceaccount:{}:{fullname}", ns.name);
    let may = |args: &[&str]| -> anyhow::Result<bool> {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", &sa]);
        Ok(kubectl(&all, None)?.stdout.trim() == "yes")
    };
    assert!(may(&[
        "create",
        "pods",
        "--subresource=binding",
        "-n",
        "default"
    ])?);
    assert!(may(&["update", "leases/tether", "-n", &ns.name])?);
    assert!(may(&["create", "tokenreviews.authentication.k8s.io"])?);
    assert!(!may(&["update", "leases/tether", "-n", "kube-system"])?);
    assert!(!may(&["get", "secrets", "-n", &ns.name])?);
    // Pod Security admission (restricted, enforced) and the Priority admission plugin admit the
    // pods themselves: the ReplicaSet made both, and --wait saw them ready.
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    wait_for("the release's two pods admitted", TIMEOUT, || async {
        let listed = pods
            .list(&ListParams::default().labels(&format!("app.kubernetes.io/instance={release}")))
            .await?;
        Ok((listed.items.len() == 2).then_some(()))
    })
    .await?;

    // Placement history in a workload's namespace, as tether writes it.
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&format!(
            "apiVersion: tether.dev/v1alpha1\nkind: StickyBinding\nmetadata:\n  name: statefulset-db-0\n  namespace: {}\nspec:\n  workloadRef: {{apiVersion: apps/v1, kind: StatefulSet, name: db-0}}\n  nodeName: kwok-node-0\n",
            workloads.name
        )),
    )?;
    kubectl_ok(
        &[
            "patch",
            "sb",
            "statefulset-db-0",
            "-n",
            &workloads.name,
            "--subresource=status",
            "--type=merge",
            "-p",
            r#"{"status": {"latest": "kwok-node-1", "nodeCount": {"kwok-node-0": 1, "kwok-node-1": 3}, "scheduleCount": 4}}"#,
        ],
        None,
    )?;
    let history = |binding: &StickyBinding| {
        let status = binding.status.clone().unwrap_or_default();
        (status.latest, status.node_count, status.schedule_count)
    };

    // Upgrade to a second build (another image), with more replicas, other resources and no
    // explainer role, as the documented `helm upgrade --wait`: it returns once the rollout is
    // done, every replica of the new build available.
    let generation = field("/metadata/generation").await?;
    let second_build = format!("{}-rebuilt", repo_version()?);
    let default_scheduler = tether_e2e::reference::ReferenceScheduler::start_preempting(
        "chart-default-scheduler-upgrade",
        &["default-scheduler"],
    )?;
    helm_ok(&[
        "upgrade",
        &release,
        "charts/tether",
        "--namespace",
        &ns.name,
        "--set",
        &base,
        "--set",
        "replicas=3,resources.requests.cpu=250m,resources.requests.memory=128Mi,resources.limits.memory=512Mi",
        "--set",
        "explainer.enabled=false",
        "--set",
        &format!("image.tag={second_build}"),
        "--wait",
        "--timeout",
        "120s",
    ])?;
    drop(default_scheduler);
    assert_eq!(
        field("/spec/template/spec/containers/0/image").await?,
        format!("tether:{second_build}")
    );
    assert_eq!(field("/status/updatedReplicas").await?, 3);
    assert_eq!(field("/status/availableReplicas").await?, 3);
    let running: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let images: Vec<String> = running
        .list(&ListParams::default().labels("app.kubernetes.io/name=tether"))
        .await?
        .items
        .into_iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
        .filter_map(|p| p.spec?.containers.into_iter().next()?.image)
        .collect();
    assert!(
        images.len() == 3
            && images
                .iter()
                .all(|i| *i == format!("tether:{second_build}")),
        "the new build's pods alone: {images:?}"
    );
    assert_eq!(field("/spec/replicas").await?, 3);
    assert_eq!(
        field("/spec/template/spec/containers/0/resources").await?,
        serde_json::json!({"requests": {"cpu": "250m", "memory": "128Mi"}, "limits": {"memory": "512Mi"}})
    );
    assert_ne!(field("/metadata/generation").await?, generation);
    assert!(
        !exists("clusterrole", &format!("{fullname}-explainer"), None)?
            && !exists("role", &format!("{fullname}-explainer"), Some(&ns.name))?
            && !exists(
                "validatingadmissionpolicy",
                &format!("{fullname}-explainrequests"),
                None
            )?,
        "the upgrade removes what the values no longer render"
    );
    let status: Value = serde_json::from_str(&helm_ok(&[
        "status", &release, "-n", &ns.name, "-o", "json",
    ])?)?;
    assert_eq!(status["version"], 2, "{status}");
    assert_eq!(status["info"]["status"], "deployed", "{status}");

    // Uninstall: every object of the release goes; the CRDs and the placement history stay.
    helm_ok(&[
        "uninstall",
        &release,
        "--namespace",
        &ns.name,
        "--wait",
        "--timeout",
        "60s",
    ])?;
    installed.uninstalled = true;
    wait_for("the release's objects deleted", TIMEOUT, || async {
        let mut left = Vec::new();
        // Everything the install made (the explainer role went at the upgrade already).
        let made = release_objects(&fullname, &profile);
        for (kind, name, namespaced) in
            std::iter::once(("deployment", fullname.clone(), true)).chain(made)
        {
            if exists(kind, &name, namespaced.then_some(ns.name.as_str()))? {
                left.push(format!("{kind} {name}"));
            }
        }
        if left.is_empty() {
            Ok(Some(()))
        } else {
            Err(anyhow!("still there: {left:?}"))
        }
    })
    .await?;
    installed.checked = true;
    for crd in ["schedulingprofiles.tether.dev", "stickybindings.tether.dev"] {
        assert!(exists("crd", crd, None)?, "helm uninstall deleted {crd}");
    }
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &workloads.name);
    let binding = bindings.get("statefulset-db-0").await?;
    assert_eq!(binding.spec.node_name.as_deref(), Some("kwok-node-0"));
    let kept = history(&binding);
    assert_eq!(kept.0.as_deref(), Some("kwok-node-1"), "{kept:?}");
    assert_eq!(kept.2, 4, "{kept:?}");
    assert!(
        helm_ok(&["list", "--namespace", &ns.name, "-q"])?
            .trim()
            .is_empty()
    );
    // The namespace was made before the release, and is not the release's.
    assert!(exists("namespace", &ns.name, None)?);

    // The chart README's backup and restore of the placement history: `kubectl get -o yaml`,
    // then, without each object's resourceVersion and uid, the objects and their status.
    let backup = kubectl_ok(
        &[
            "get",
            "stickybindings.tether.dev",
            "-n",
            &workloads.name,
            "-o",
            "yaml",
        ],
        None,
    )?;
    let restore: String = backup
        .lines()
        .filter(|l| !l.starts_with("    resourceVersion:") && !l.starts_with("    uid:"))
        .map(|l| format!("{l}\n"))
        .collect();
    kubectl_ok(
        &["delete", "sb", "statefulset-db-0", "-n", &workloads.name],
        None,
    )?;
    kubectl_ok(&["apply", "--server-side", "-f", "-"], Some(&restore))?;
    kubectl_ok(
        &["apply", "--server-side", "--subresource=status", "-f", "-"],
        Some(&restore),
    )?;
    let restored = bindings.get("statefulset-db-0").await?;
    assert_ne!(restored.metadata.uid, binding.metadata.uid, "made anew");
    assert_eq!(restored.spec.node_name.as_deref(), Some("kwok-node-0"));
    assert_eq!(history(&restored), kept, "the history restored");

    // Leave the cluster as it was for the tests after this one.
    let names = [ns.name.clone(), workloads.name.clone()];
    ns.delete().await?;
    workloads.delete().await?;
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for name in &names {
        wait_for(&format!("namespace {name} deleted"), TIMEOUT, || async {
            Ok(namespaces.get_opt(name).await?.is_none().then_some(()))
        })
        .await?;
    }
    Ok(())
}
