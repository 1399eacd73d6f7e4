//! The tether.dev API on a real API server: the CRDs install, objects round-trip through kubectl
//! with their printer columns, and the API server itself refuses invalid profiles, naming the field.

use std::time::Duration;

use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams};
use tether::api::{SchedulingProfile, StickyBinding};
use tether_e2e::{
    TestNamespace, client, install_crds, kubectl, kubectl_ok, unique_suffix, wait_for,
};

fn profile_yaml(name: &str, scheduler_name: &str, extra_spec: &str) -> String {
    format!(
        "apiVersion: tether.dev/v1alpha1\nkind: SchedulingProfile\nmetadata:\n  name: {name}\nspec:\n  schedulerName: {scheduler_name}\n{extra_spec}"
    )
}

#[tokio::test]
async fn profiles_and_bindings_round_trip_with_printer_columns() -> anyhow::Result<()> {
    let client = client().await?;
    install_crds(&client).await?;
    let ns = TestNamespace::create(&client, "api").await?;
    let name = format!("e2e-roundtrip-{}", unique_suffix());

    let spec = "  plugins:\n    multiPoint: {enabled: [{name: StickyNode}, {name: PlacementHistory, weight: 5}]}\n    score:\n      disabled: [{name: ImageLocality}]\n  pluginConfig:\n  - name: PlacementHistory\n    args: {skipMultiReplica: true, excludedNamespaces: [kube-system]}\n";
    kubectl_ok(
        &["apply", "-f", "-"],
        Some(&profile_yaml(&name, &format!("{name}-sched"), spec)),
    )?;

    // Read back through the typed API: defaults applied by the schema, args kept verbatim.
    let profiles: Api<SchedulingProfile> = Api::all(client.clone());
    let profile = profiles.get(&name).await?;
    assert_eq!(profile.spec.scheduler_name, format!("{name}-sched"));
    assert_eq!(profile.spec.percentage_of_nodes_to_score, 0);
    assert_eq!(profile.spec.pod_initial_backoff_seconds, 1);
    assert_eq!(profile.spec.pod_max_backoff_seconds, 10);
    let args = profile.spec.plugin_config[0]
        .args
        .clone()
        .unwrap_or_default();
    assert_eq!(args["excludedNamespaces"][0], "kube-system");
    let plugins = profile.spec.plugins.unwrap_or_default();
    let multi_point = plugins.multi_point.unwrap_or_default();
    assert_eq!(multi_point.enabled[1].weight, Some(5));
    assert_eq!(
        plugins.score.unwrap_or_default().disabled[0].name,
        "ImageLocality"
    );

    // The printer columns, by their long name and by the short name.
    let table = kubectl_ok(&["get", "schedulingprofiles", &name], None)?;
    let header: Vec<_> = table
        .lines()
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        ["NAME", "SCHEDULER", "READY", "REASON", "AGE"],
        "got:\n{table}"
    );
    assert!(table.contains(&format!("{name}-sched")), "got:\n{table}");
    let short = kubectl_ok(&["get", "sp", &name, "-o", "name"], None)?;
    assert_eq!(short.trim(), format!("schedulingprofile.tether.dev/{name}"));

    // A StickyBinding, pinned by a person.
    let binding = format!(
        "apiVersion: tether.dev/v1alpha1\nkind: StickyBinding\nmetadata:\n  name: virtualmachine-fedora\n  namespace: {ns}\nspec:\n  workloadRef: {{apiVersion: kubevirt.io/v1, kind: VirtualMachine, name: fedora}}\n  nodeName: kwok-node-0\n",
        ns = ns.name
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&binding))?;
    let table = kubectl_ok(&["get", "sb", "-n", &ns.name], None)?;
    let mut lines = table.lines();
    let header: Vec<_> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        header,
        [
            "NAME",
            "KIND",
            "WORKLOAD",
            "PINNED",
            "LATEST",
            "SCHEDULES",
            "AVAILABLE",
            "AGE"
        ],
        "got:\n{table}"
    );
    let row: Vec<_> = lines
        .next()
        .unwrap_or_default()
        .split_whitespace()
        .collect();
    assert_eq!(
        &row[..4],
        [
            "virtualmachine-fedora",
            "VirtualMachine",
            "fedora",
            "kwok-node-0"
        ],
        "got:\n{table}"
    );
    let bindings: Api<StickyBinding> = Api::namespaced(client.clone(), &ns.name);
    let sb = bindings.get("virtualmachine-fedora").await?;
    assert_eq!(sb.spec.node_name.as_deref(), Some("kwok-node-0"));

    // The workload a binding belongs to cannot be swapped for another.
    let swapped = binding.replace("name: fedora", "name: centos");
    let out = kubectl(&["apply", "-f", "-"], Some(&swapped))?;
    assert!(
        !out.success && out.stderr.contains("workloadRef is immutable"),
        "got: {}",
        out.stderr
    );

    // The category lists both kinds.
    let all = kubectl_ok(&["get", "tether", "-A", "-o", "name"], None)?;
    assert!(
        all.contains(&format!("schedulingprofile.tether.dev/{name}")),
        "got:\n{all}"
    );
    assert!(
        all.contains("stickybinding.tether.dev/virtualmachine-fedora"),
        "got:\n{all}"
    );

    // kubectl explain shows the doc comments.
    let explain = kubectl_ok(&["explain", "schedulingprofile.spec.schedulerName"], None)?;
    assert!(explain.contains("default-scheduler"), "got:\n{explain}");

    kubectl_ok(&["delete", "sp", &name], None)?;
    ns.delete().await
}

#[tokio::test]
async fn the_api_server_refuses_invalid_profiles_naming_the_field() -> anyhow::Result<()> {
    let client = client().await?;
    install_crds(&client).await?;
    let name = format!("e2e-invalid-{}", unique_suffix());
    let cases = [
        (
            "weight 0",
            "ok-name",
            "  plugins:\n    score:\n      enabled: [{name: NodeResourcesFit, weight: 0}]\n",
            "spec.plugins.score.enabled[0].weight",
        ),
        (
            "weight 101",
            "ok-name",
            "  plugins:\n    score:\n      enabled: [{name: NodeResourcesFit, weight: 101}]\n",
            "spec.plugins.score.enabled[0].weight",
        ),
        (
            "not a DNS-1123 subdomain",
            "Bad_Name",
            "",
            "spec.schedulerName",
        ),
        (
            "kube-scheduler's name",
            "default-scheduler",
            "",
            "spec.schedulerName",
        ),
        (
            "percentage over 100",
            "ok-name",
            "  percentageOfNodesToScore: 101\n",
            "spec.percentageOfNodesToScore",
        ),
        (
            "initial backoff over max",
            "ok-name",
            "  podInitialBackoffSeconds: 20\n  podMaxBackoffSeconds: 10\n",
            "spec.podInitialBackoffSeconds",
        ),
        (
            "initial backoff over the default max",
            "ok-name",
            "  podInitialBackoffSeconds: 11\n",
            "spec.podInitialBackoffSeconds",
        ),
        (
            "a backoff near the largest integer (it used to stop the scheduling loop)",
            "ok-name",
            "  podInitialBackoffSeconds: 9223372036854775000\n  podMaxBackoffSeconds: 9223372036854775807\n",
            "spec.podInitialBackoffSeconds",
        ),
        (
            "a max backoff over a day",
            "ok-name",
            "  podMaxBackoffSeconds: 86401\n",
            "spec.podMaxBackoffSeconds",
        ),
        (
            "a plugin twice in one list",
            "ok-name",
            "  plugins:\n    filter:\n      enabled: [{name: NodeName}, {name: NodeName}]\n",
            "spec.plugins.filter.enabled[1]",
        ),
        (
            "pluginConfig twice for one plugin",
            "ok-name",
            "  pluginConfig:\n  - {name: NodeResourcesFit, args: {}}\n  - {name: NodeResourcesFit, args: {}}\n",
            "spec.pluginConfig[1]",
        ),
    ];
    let mut failures = Vec::new();
    for (what, scheduler_name, extra, field) in cases {
        let out = kubectl(
            &["apply", "-f", "-"],
            Some(&profile_yaml(&name, scheduler_name, extra)),
        )?;
        if out.success || !out.stderr.contains(field) {
            failures.push(format!(
                "{what}: want a refusal naming {field}, got success={} stderr={}",
                out.success,
                out.stderr.trim()
            ));
        }
        // Nothing of a refused object is stored.
        let get = kubectl(&["get", "sp", &name], None)?;
        if get.success {
            failures.push(format!("{what}: the refused profile was stored"));
            kubectl(&["delete", "sp", &name], None)?;
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    Ok(())
}

#[tokio::test]
async fn samples_in_config_are_accepted() -> anyhow::Result<()> {
    let client = client().await?;
    install_crds(&client).await?;
    let samples = tether_e2e::repo_dir().join("config/samples");
    let samples = samples.to_string_lossy();
    let out = kubectl_ok(&["apply", "-f", &samples, "-o", "name"], None)?;
    let names: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("schedulingprofile.tether.dev/"))
        .collect();
    assert!(names.len() >= 3, "got:\n{out}");
    // Every sample compiles and serves.
    let profiles: Api<SchedulingProfile> = Api::all(client.clone());
    for name in &names {
        wait_for(
            &format!("the sample SchedulingProfile {name} to be Ready"),
            Duration::from_secs(30),
            || {
                let profiles = profiles.clone();
                async move {
                    let p = profiles.get(name).await?;
                    let ready = p
                        .status
                        .and_then(|s| s.conditions.into_iter().find(|c| c.type_ == "Ready"));
                    Ok(ready.filter(|c| c.status == "True").map(|_| ()))
                }
            },
        )
        .await?;
    }
    Ok(())
}

#[tokio::test]
async fn a_deployment_for_an_unserved_scheduler_gets_a_pending_pod_from_the_replicaset_controller()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "pending").await?;
    let deployment = format!(
        "apiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: web\n  namespace: {ns}\nspec:\n  replicas: 1\n  selector: {{matchLabels: {{app: web}}}}\n  template:\n    metadata: {{labels: {{app: web}}}}\n    spec:\n      schedulerName: nobody-serves-this\n      containers:\n      - {{name: web, image: nginx, resources: {{requests: {{cpu: 100m}}}}}}\n",
        ns = ns.name
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&deployment))?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    let pod = wait_for(
        "the ReplicaSet controller to create the pod",
        Duration::from_secs(60),
        || {
            let pods = pods.clone();
            async move {
                Ok(pods
                    .list(&ListParams::default().labels("app=web"))
                    .await?
                    .items
                    .into_iter()
                    .next())
            }
        },
    )
    .await?;

    let owner = pod.metadata.owner_references.clone().unwrap_or_default();
    assert!(
        owner
            .iter()
            .any(|o| o.kind == "ReplicaSet" && o.controller == Some(true)),
        "the pod is not controlled by a ReplicaSet: {owner:?}"
    );
    let spec = pod.spec.clone().unwrap_or_default();
    assert_eq!(spec.scheduler_name.as_deref(), Some("nobody-serves-this"));
    assert_eq!(
        spec.node_name, None,
        "no scheduler serves this pod, yet it was bound"
    );
    let phase = pod.status.and_then(|s| s.phase);
    assert_eq!(phase.as_deref(), Some("Pending"));
    ns.delete().await
}

/// The install command docs/install.md gives, exactly as written, works on the cluster: the API server
/// accepts deploy/ in a server-side dry run, kubectl's built-in kustomize applies it (CRDs
/// included), it runs two replicas behind a Lease with a PodDisruptionBudget, its
/// ServiceAccount may do what tether does and nothing else asked about (no Secrets, no
/// RoleBindings, no deleting nodes, Leases only in its own namespace), and a pod is then
/// scheduled by tether running as that ServiceAccount (as `make e2e` runs it).
#[tokio::test]
async fn the_documented_install_applies_as_written_and_tether_schedules_with_it()
-> anyhow::Result<()> {
    let client = client().await?;
    let deploy = tether_e2e::repo_dir().join("deploy");
    let deploy = deploy.to_string_lossy();
    kubectl_ok(&["apply", "--dry-run=server", "-k", &deploy], None)?;
    let applied = tether_e2e::kubectl(&["apply", "-k", &deploy], None)?;
    anyhow::ensure!(
        applied.success,
        "kubectl apply -k deploy/: {}",
        applied.stderr
    );
    // The namespace enforces (and warns of) the restricted Pod Security Standard, and nothing
    // deploy/ holds falls short of it: the API server warns of no violation.
    anyhow::ensure!(
        !applied.stderr.contains("PodSecurity"),
        "deploy/ falls short of the restricted standard: {}",
        applied.stderr
    );
    let get = |kind: &str, path: &str| {
        kubectl_ok(
            &[
                "get",
                kind,
                "tether",
                "-n",
                "tether-system",
                "-o",
                &format!("jsonpath={path}"),
            ],
            None,
        )
    };
    assert_eq!(get("deployment", "{.spec.replicas}")?, "2");
    assert_eq!(
        get("deployment", "{.spec.template.spec.containers[0].args}")?,
        r#"["run","--leader-elect"]"#
    );
    assert_eq!(get("poddisruptionbudget", "{.spec.minAvailable}")?, "1");
    let template = |path: &str| get("deployment", &format!("{{.spec.template.spec.{path}}}"));
    assert_eq!(
        template("priorityClassName")?,
        "system-cluster-critical",
        "the scheduler is evicted last"
    );
    assert_eq!(
        template("topologySpreadConstraints[0].whenUnsatisfiable")?
            + " "
            + &template("topologySpreadConstraints[0].topologyKey")?,
        "DoNotSchedule kubernetes.io/hostname",
        "two replicas never share a node"
    );
    // The release's image, never a moving tag.
    let image = template("containers[0].image")?;
    let version = tether_e2e::repo_version()?;
    assert_eq!(image, format!("tether:{version}"));
    for object in [
        "deployment",
        "poddisruptionbudget",
        "networkpolicy",
        "serviceaccount",
    ] {
        let labels = kubectl_ok(
            &[
                "get",
                object,
                "tether",
                "-n",
                "tether-system",
                "-o",
                "jsonpath={.metadata.labels}",
            ],
            None,
        )?;
        let labels: std::collections::BTreeMap<String, String> = serde_json::from_str(&labels)?;
        for key in [
            "name",
            "instance",
            "component",
            "part-of",
            "version",
            "managed-by",
        ] {
            assert!(
                labels.contains_key(&format!("app.kubernetes.io/{key}")),
                "{object} lacks app.kubernetes.io/{key}: {labels:?}"
            );
        }
        assert_eq!(labels["app.kubernetes.io/version"], version);
    }
    let enforced = kubectl_ok(
        &[
            "get",
            "namespace",
            "tether-system",
            "-o",
            "jsonpath={.metadata.labels.pod-security\\.kubernetes\\.io/enforce}",
        ],
        None,
    )?;
    assert_eq!(enforced, "restricted");
    // Pod Security admission and the Priority admission plugin admit the Deployment's pods
    // themselves: its ReplicaSet creates both (they cannot run on kwok nodes; they exist).
    tether_e2e::wait_for(
        "deploy/'s two pods admitted",
        Duration::from_secs(30),
        || async {
            let pods: Api<Pod> = Api::namespaced(client.clone(), "tether-system");
            let listed = pods
                .list(&kube::api::ListParams::default().labels("app.kubernetes.io/name=tether"))
                .await?;
            Ok((listed.items.len() >= 2).then_some(()))
        },
    )
    .await?;
    for (kind, name) in [
        ("crd", "schedulingprofiles.tether.dev"),
        ("crd", "stickybindings.tether.dev"),
        ("serviceaccount", "tether"),
        ("networkpolicy", "tether"),
        ("role", "tether-leader-election"),
        ("rolebinding", "tether-leader-election"),
    ] {
        kubectl_ok(&["get", kind, name, "-n", "tether-system"], None)?;
    }
    let may = |args: &[&str]| -> anyhow::Result<bool> {
        let mut all = vec!["auth", "can-i"];
        all.extend_from_slice(args);
        all.extend_from_slice(&["--as", "system:serviceaccount:tether-system:tether"]);
        Ok(tether_e2e::kubectl(&all, None)?.stdout.trim() == "yes")
    };
    assert!(may(&[
        "create",
        "pods",
        "--subresource=binding",
        "-n",
        "default"
    ])?);
    assert!(may(&["update", "leases/tether", "-n", "tether-system"])?);
    // Preemption deletes its victims; VolumeBinding patches volumes and claims (the fields it
    // changes, never an update of its trimmed copy), DynamicResources its claims.
    assert!(may(&["delete", "pods", "-n", "default"])?);
    assert!(may(&["patch", "persistentvolumes"])?);
    assert!(may(&["patch", "persistentvolumeclaims", "-n", "default"])?);
    assert!(may(&[
        "patch",
        "resourceclaims.resource.k8s.io",
        "-n",
        "default"
    ])?);
    for denied in [
        &["get", "secrets", "-n", "tether-system"][..],
        &["list", "secrets", "-A"],
        &["create", "rolebindings", "-n", "tether-system"],
        &["delete", "nodes"],
        &["update", "leases/tether", "-n", "kube-system"],
        &["update", "leases/other", "-n", "tether-system"],
        &["delete", "persistentvolumes"],
        &["update", "persistentvolumes"],
        &["update", "persistentvolumeclaims", "-n", "default"],
        &["update", "resourceclaims.resource.k8s.io", "-n", "default"],
        &["create", "persistentvolumeclaims", "-n", "default"],
    ] {
        assert!(!may(denied)?, "the ServiceAccount may not {denied:?}");
    }

    let ns = TestNamespace::create(&client, "install").await?;
    let pod: Pod = serde_json::from_value(serde_json::json!({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "installed"},
        "spec": {"schedulerName": "tether-scheduler", "containers": [{"name": "c", "image": "pause"}]},
    }))?;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns.name);
    pods.create(&kube::api::PostParams::default(), &pod).await?;
    tether_e2e::wait_bound(&client, &ns.name, "installed", Duration::from_secs(30)).await?;

    // The Deployment's own pod cannot run here (kwok nodes, no image): only the objects count.
    kubectl_ok(
        &[
            "delete",
            "deployment",
            "tether",
            "-n",
            "tether-system",
            "--wait=false",
        ],
        None,
    )?;
    ns.delete().await
}

/// A StickyBinding status edited by hand into what can never be true is refused by the API
/// server, naming the field: negative counts, more than 16 recent binds. (A count at the largest
/// integer is accepted by the schema; tether saturates it instead of wrapping.)
#[tokio::test]
async fn the_api_server_refuses_impossible_binding_history() -> anyhow::Result<()> {
    let client = client().await?;
    install_crds(&client).await?;
    let ns = TestNamespace::create(&client, "odd-history").await?;
    let binding = format!(
        "apiVersion: tether.dev/v1alpha1\nkind: StickyBinding\nmetadata:\n  name: deployment-web\n  namespace: {ns}\nspec:\n  workloadRef: {{apiVersion: apps/v1, kind: Deployment, name: web}}\n",
        ns = ns.name
    );
    kubectl_ok(&["apply", "-f", "-"], Some(&binding))?;
    let record = |i: usize| {
        serde_json::json!({"podUID": format!("u{i}"), "podName": "p", "node": "n0",
            "time": "2026-01-01T00:00:00Z"})
    };
    let cases = [
        (
            "a negative node count",
            serde_json::json!({"status": {"nodeCount": {"n0": -5}}}),
            "status.nodeCount.n0",
        ),
        (
            "a negative schedule count",
            serde_json::json!({"status": {"scheduleCount": -3}}),
            "status.scheduleCount",
        ),
        (
            "17 recent binds",
            serde_json::json!({"status": {"recentBinds": (0..17).map(record).collect::<Vec<_>>()}}),
            "status.recentBinds",
        ),
    ];
    let mut failures = Vec::new();
    for (what, patch, field) in cases {
        let out = kubectl(
            &[
                "patch",
                "sb",
                "deployment-web",
                "-n",
                &ns.name,
                "--subresource=status",
                "--type=merge",
                "-p",
                &patch.to_string(),
            ],
            None,
        )?;
        if out.success || !out.stderr.contains(field) {
            failures.push(format!(
                "{what}: want a refusal naming {field}, got success={} stderr={}",
                out.success,
                out.stderr.trim()
            ));
        }
    }
    assert!(failures.is_empty(), "{}", failures.join("\n"));
    ns.delete().await
}

/// Namespace users see and manage their workloads' StickyBindings with the built-in roles:
/// deploy/rbac.yaml's rules are aggregated into `view` (read) and `edit` (write), never the
/// status, which is tether's. Asked of the API server as a user bound to each role in one
/// namespace.
#[tokio::test]
async fn namespace_users_see_and_edit_their_stickybindings_through_the_built_in_roles()
-> anyhow::Result<()> {
    let client = client().await?;
    let ns = TestNamespace::create(&client, "binding-roles").await?;
    for role in ["view", "edit"] {
        let binding = serde_json::json!({"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "RoleBinding",
            "metadata": {"name": format!("alice-{role}"), "namespace": ns.name},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
            "subjects": [{"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": format!("{role}-user")}]});
        kubectl_ok(&["apply", "-f", "-"], Some(&binding.to_string()))?;
    }
    let can = |user: &str, verb: &str, resource: &str| {
        // `can-i` answers "yes" (exit 0) or "no" (exit 1); `<resource>/status` asks for the
        // status subresource (kubectl reads `a/b` as the object named b).
        let (resource, subresource) = match resource.split_once('/') {
            Some((r, sub)) => (r, format!("--subresource={sub}")),
            None => (resource, String::new()),
        };
        let mut args = vec![
            "auth", "can-i", verb, resource, "-n", &ns.name, "--as", user,
        ];
        if !subresource.is_empty() {
            args.push(&subresource);
        }
        let out = kubectl(&args, None)?;
        Ok::<_, anyhow::Error>(out.stdout.trim() == "yes")
    };
    // The aggregation controller fills the roles in a moment after deploy/rbac.yaml lands.
    wait_for(
        "the view role to read stickybindings",
        Duration::from_secs(30),
        || async { Ok(can("view-user", "list", "stickybindings.tether.dev")?.then_some(())) },
    )
    .await?;
    wait_for(
        "the edit role to write stickybindings",
        Duration::from_secs(30),
        || async { Ok(can("edit-user", "patch", "stickybindings.tether.dev")?.then_some(())) },
    )
    .await?;
    assert!(can("view-user", "get", "stickybindings.tether.dev")?);
    assert!(can("view-user", "watch", "stickybindings.tether.dev")?);
    assert!(
        !can("view-user", "patch", "stickybindings.tether.dev")?,
        "view reads only"
    );
    assert!(can("edit-user", "delete", "stickybindings.tether.dev")?);
    assert!(
        !can("edit-user", "patch", "stickybindings.tether.dev/status")?,
        "the status is tether's"
    );
    ns.delete().await
}
