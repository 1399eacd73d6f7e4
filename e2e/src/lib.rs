//! The harness of tether's end-to-end tests: a client for the local control plane that
//! `make cluster` starts, kubectl, per-test namespaces and waiting on conditions with a deadline.
//!
//! Every test fails (never skips) when the cluster is not there.

pub mod bench;
pub mod faults;
pub mod ground_truth;
pub mod groups;
pub mod kueue;
pub mod reference;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use anyhow::{Context, anyhow, bail};
use k8s_openapi::api::core::v1::Namespace;
use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
use kube::api::{Api, DeleteParams, PostParams};
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

/// The repository root, where `crds/`, `config/` and `.cluster/` live.
pub fn repo_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .map(Path::to_path_buf)
        .unwrap_or_else(|| PathBuf::from(".."))
}

/// tether's version, from the repository's Cargo.toml (`[package] version`).
pub fn repo_version() -> anyhow::Result<String> {
    let manifest = std::fs::read_to_string(repo_dir().join("Cargo.toml"))
        .context("reading the repository's Cargo.toml")?;
    manifest
        .lines()
        .skip_while(|l| l.trim() != "[package]")
        .find_map(|l| {
            let (key, value) = l.split_once('=')?;
            (key.trim() == "version").then(|| value.trim().trim_matches('"').to_string())
        })
        .ok_or_else(|| anyhow!("no [package] version in Cargo.toml"))
}

/// The admin kubeconfig of the local cluster: `$TETHER_KUBECONFIG`, else `.cluster/kubeconfig`.
pub fn kubeconfig_path() -> PathBuf {
    std::env::var_os("TETHER_KUBECONFIG")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join(".cluster/kubeconfig"))
}

/// The minor of the local control plane's release (37 for v1.37.2), as its API server says.
pub async fn cluster_minor(client: &Client) -> anyhow::Result<u32> {
    let info = client.apiserver_version().await?;
    info.minor
        .trim_end_matches('+')
        .parse()
        .with_context(|| format!("the API server's minor {:?}", info.minor))
}

/// The minor of the release the side-by-side tests compare under: `$TETHER_KUBERNETES_RELEASE`
/// (`1.38`) when `make test-matrix` pins tether and the reference to a release, else the control
/// plane's ([`cluster_minor`]).
pub async fn compared_minor(client: &Client) -> anyhow::Result<u32> {
    match std::env::var("TETHER_KUBERNETES_RELEASE") {
        Ok(pinned) => pinned
            .trim_start_matches('v')
            .strip_prefix("1.")
            .and_then(|m| m.parse().ok())
            .with_context(|| format!("TETHER_KUBERNETES_RELEASE={pinned:?}")),
        Err(_) => cluster_minor(client).await,
    }
}

/// A client for the local cluster, checked to answer. Fails with what to do when it is not up.
pub async fn client() -> anyhow::Result<Client> {
    let path = kubeconfig_path();
    if !path.exists() {
        bail!(
            "no local cluster: {} does not exist. Start one with `make cluster` (or run `make test`, which starts it)",
            path.display()
        );
    }
    let kubeconfig = Kubeconfig::read_from(&path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let config = Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
        .await
        .with_context(|| format!("loading kubeconfig {}", path.display()))?;
    let client = Client::try_from(config).context("building the client")?;
    client.apiserver_version().await.with_context(|| {
        format!(
            "the local cluster in {} does not answer; is `make cluster` running? (logs in .cluster/logs)",
            path.display()
        )
    })?;
    Ok(client)
}

/// The outcome of one kubectl call.
#[derive(Debug)]
pub struct Kubectl {
    pub success: bool,
    pub stdout: String,
    pub stderr: String,
}

impl From<Output> for Kubectl {
    fn from(out: Output) -> Self {
        Kubectl {
            success: out.status.success(),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        }
    }
}

/// Runs the cached kubectl (`$TETHER_KUBECTL`) against the local cluster, with `stdin` piped in.
pub fn kubectl(args: &[&str], stdin: Option<&str>) -> anyhow::Result<Kubectl> {
    let bin = std::env::var_os("TETHER_KUBECTL").ok_or_else(|| {
        anyhow!("TETHER_KUBECTL is not set: run the end-to-end tests through `make e2e`")
    })?;
    let mut child = Command::new(&bin)
        .arg(format!("--kubeconfig={}", kubeconfig_path().display()))
        .args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", PathBuf::from(&bin).display()))?;
    if let (Some(input), Some(mut pipe)) = (stdin, child.stdin.take()) {
        use std::io::Write;
        pipe.write_all(input.as_bytes())
            .context("writing kubectl's stdin")?;
    }
    let out = child.wait_with_output().context("waiting for kubectl")?;
    Ok(out.into())
}

/// The tether binary the tests run: `$TETHER_BIN`, else the debug build `make e2e` made.
pub fn tether_bin() -> PathBuf {
    std::env::var_os("TETHER_BIN")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_dir().join("target/debug/tether"))
}

/// Where the tether `make e2e` started serves `--http-addr` (`/metrics`, `/explain`):
/// `$TETHER_HTTP_PORT`, default 18080, on 127.0.0.1.
pub fn tether_url() -> String {
    let port = std::env::var("TETHER_HTTP_PORT").unwrap_or_else(|_| "18080".into());
    format!("http://127.0.0.1:{port}")
}

/// The label the tests' PersistentVolumes and StorageClasses carry, valued with what they
/// belong to (a namespace, a class), so that each test deletes its own.
pub const VOLUME_OF: &str = "e2e.tether.dev/volume-of";

/// Deletes, without waiting, the objects of `kind` labelled [`VOLUME_OF`]`=owner`.
pub fn delete_labelled(kind: &str, owner: &str) -> anyhow::Result<()> {
    kubectl_ok(
        &[
            "delete",
            kind,
            "-l",
            &format!("{VOLUME_OF}={owner}"),
            "--wait=false",
        ],
        None,
    )?;
    Ok(())
}

/// The value of one sample on tether's `/metrics` (the tether `make e2e` started, at
/// [`tether_url`]), e.g. `tether_binds_total{profile="p"}`; `None` when the sample is absent.
pub fn tether_metric(sample: &str) -> anyhow::Result<Option<f64>> {
    let url = tether_url();
    let out = Command::new("curl")
        .args(["-sf", "--max-time", "5"])
        .arg(format!("{url}/metrics"))
        .output()
        .context("running curl")?;
    if !out.status.success() {
        bail!("tether's /metrics at {url} did not answer");
    }
    Ok(sample_value(&String::from_utf8_lossy(&out.stdout), sample))
}

/// The value of `sample` (a name with its labels as exposed, `name{label="v"}`) in the
/// exposition `text`, when it is there.
pub fn sample_value(text: &str, sample: &str) -> Option<f64> {
    text.lines().find_map(|line| {
        let value = line.strip_prefix(sample)?.strip_prefix(' ')?;
        value.trim().parse().ok()
    })
}

/// Like [`kubectl`], but fails when kubectl fails, with what it printed.
pub fn kubectl_ok(args: &[&str], stdin: Option<&str>) -> anyhow::Result<String> {
    let out = kubectl(args, stdin)?;
    if !out.success {
        bail!(
            "kubectl {} failed:\n{}{}",
            args.join(" "),
            out.stdout,
            out.stderr
        );
    }
    Ok(out.stdout)
}

/// Runs the helper `name` built beside the cached kubectl (e2e/kstatus, e2e/argocd-health)
/// with `args`, `object` on its stdin; what it printed, trimmed.
fn run_helper(name: &str, args: &[&std::ffi::OsStr], object: &str) -> anyhow::Result<String> {
    let kubectl = std::env::var_os("TETHER_KUBECTL").ok_or_else(|| {
        anyhow!("TETHER_KUBECTL is not set: run the end-to-end tests through `make e2e`")
    })?;
    let bin = PathBuf::from(kubectl).with_file_name(name);
    let mut child = Command::new(&bin)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("starting {}", bin.display()))?;
    if let Some(mut pipe) = child.stdin.take() {
        use std::io::Write;
        pipe.write_all(object.as_bytes())
            .with_context(|| format!("writing {name}'s stdin"))?;
    }
    let out = Kubectl::from(
        child
            .wait_with_output()
            .with_context(|| format!("waiting for {name}"))?,
    );
    if !out.success {
        bail!("{name} failed: {}", out.stderr);
    }
    Ok(out.stdout.trim().to_string())
}

/// The kstatus verdict of `object` (its JSON), as Flux and kpt compute it: "Current",
/// "InProgress", "Failed"…, then a space and kstatus' message. Runs the helper built beside the
/// cached kubectl (e2e/kstatus, sigs.k8s.io/cli-utils).
pub fn kstatus(object: &str) -> anyhow::Result<String> {
    run_helper("kstatus", &[], object)
}

/// The documents of a YAML stream (empty ones skipped), with YAML 1.2's booleans only (a value
/// such as `n` or `off` stays a string).
pub fn yaml_documents(text: &str) -> anyhow::Result<Vec<serde_json::Value>> {
    let mut options = serde_saphyr::Options::default();
    options.strict_booleans = true;
    let documents: Vec<serde_json::Value> =
        serde_saphyr::from_multiple_with_options(text, options).context("parsing YAML")?;
    Ok(documents.into_iter().filter(|d| !d.is_null()).collect())
}

/// Argo CD's health verdict of `object` (its JSON), with the health check deploy/argocd ships
/// for `kind` (SchedulingProfile or StickyBinding): "Healthy", "Progressing", "Degraded"…, then
/// a space and the check's message. Runs the check as Argo CD does (gopher-lua), through the
/// helper built beside the cached kubectl (e2e/argocd-health).
pub fn argocd_health(kind: &str, object: &str) -> anyhow::Result<String> {
    let patch_path = repo_dir().join("deploy/argocd/argocd-cm-patch.yaml");
    let patch = yaml_documents(
        &std::fs::read_to_string(&patch_path)
            .with_context(|| format!("reading {}", patch_path.display()))?,
    )
    .with_context(|| format!("{} is not YAML", patch_path.display()))?
    .into_iter()
    .next()
    .unwrap_or_default();
    let key = format!("resource.customizations.health.tether.dev_{kind}");
    let script = patch["data"][&key]
        .as_str()
        .ok_or_else(|| anyhow!("{} has no {key}", patch_path.display()))?;
    let script_path =
        std::env::temp_dir().join(format!("tether-argocd-{kind}-{}.lua", unique_suffix()));
    std::fs::write(&script_path, script).context("writing the health check")?;
    let verdict = run_helper("argocd-health", &[script_path.as_os_str()], object);
    let _ = std::fs::remove_file(&script_path);
    verdict
}

/// Applies one object given as JSON with `kubectl apply`.
pub fn apply(doc: serde_json::Value) -> anyhow::Result<()> {
    kubectl_ok(&["apply", "-f", "-"], Some(&serde_json::to_string(&doc)?))?;
    Ok(())
}

/// The API resource of a KubeVirt kind (`kubevirt.io/v1`), whose CRDs the local control
/// plane serves (the e2e plays virt-controller).
pub fn kubevirt(kind: &str) -> kube::api::ApiResource {
    kube::api::ApiResource::from_gvk(&kube::api::GroupVersionKind::gvk("kubevirt.io", "v1", kind))
}

/// The `ownerReferences` of an object `kind`/`name` (UID `uid`) controls.
pub fn controller_ref(api_version: &str, kind: &str, name: &str, uid: &str) -> serde_json::Value {
    serde_json::json!([{"apiVersion": api_version, "kind": kind, "name": name, "uid": uid,
                        "controller": true, "blockOwnerDeletion": true}])
}

/// A DeviceClass `class` that selects the devices of `driver` by CEL, as a DRA driver ships.
pub fn device_class(class: &str, driver: &str) -> anyhow::Result<()> {
    apply(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass",
        "metadata": {"name": class},
        "spec": {"selectors": [{"cel": {"expression": format!("device.driver == \"{driver}\"")}}]},
    }))
}

/// The ResourceSlice `name` a DRA driver `driver` would publish for `node`: the pool `pool`
/// (generation 1, one slice) with `devices` (their JSON).
pub fn resource_slice(
    name: &str,
    driver: &str,
    node: &str,
    pool: &str,
    devices: serde_json::Value,
) -> anyhow::Result<()> {
    apply(serde_json::json!({
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
        "metadata": {"name": name},
        "spec": {
            "driver": driver, "nodeName": node,
            "pool": {"name": pool, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }))
}

/// Applies the SchedulingProfile `name` with `spec` and waits until tether reports it Ready
/// for this generation.
pub async fn apply_profile(
    client: &Client,
    name: &str,
    spec: serde_json::Value,
) -> anyhow::Result<()> {
    use tether::api::SchedulingProfile;
    apply(serde_json::json!({
        "apiVersion": "tether.dev/v1alpha1", "kind": "SchedulingProfile",
        "metadata": {"name": name}, "spec": spec,
    }))?;
    let api: Api<SchedulingProfile> = Api::all(client.clone());
    wait_for(
        &format!("profile {name} Ready"),
        Duration::from_secs(60),
        || {
            let api = api.clone();
            async move {
                let p = api.get(name).await?;
                let ready = p.status.unwrap_or_default().conditions.iter().any(|c| {
                    c.type_ == "Ready"
                        && c.status == "True"
                        && c.observed_generation == p.metadata.generation
                });
                Ok(ready.then_some(()))
            }
        },
    )
    .await
}

/// Polls `check` until it returns `Ok(Some(_))` or `timeout` passes. `check` returns
/// `Ok(None)` while the condition does not hold yet; the error on timeout says what was awaited
/// and what `describe` reports of the state at that moment.
pub async fn wait_for<T, F, Fut>(what: &str, timeout: Duration, mut check: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = anyhow::Result<Option<T>>>,
{
    let deadline = Instant::now() + timeout;
    let mut last_error = None;
    loop {
        match check().await {
            Ok(Some(value)) => return Ok(value),
            Ok(None) => {}
            Err(e) => last_error = Some(e),
        }
        if Instant::now() >= deadline {
            let cause = last_error
                .map(|e| format!("; last error: {e:#}"))
                .unwrap_or_default();
            bail!("timed out after {timeout:?} waiting for {what}{cause}");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// Whether `error` is one a busy control plane gives and a second try may not: the API server
/// or etcd overloaded or timing out (429, 500, 502–504), or the connection lost mid-request.
pub fn transient(error: &kube::Error) -> bool {
    match error {
        kube::Error::Api(status) => matches!(status.code, 429 | 500 | 502 | 503 | 504),
        kube::Error::HyperError(_) | kube::Error::Service(_) | kube::Error::ReadEvents(_) => true,
        _ => false,
    }
}

/// Runs `call` until it succeeds, fails for a reason that is not [`transient`], or has failed
/// `TRIES` times, waiting a little longer after each failure. The harness's own calls go
/// through it where a large run (the 5,000-node bench) meets an overloaded control plane; a
/// create retried after a lost answer that had in fact been carried out gives `AlreadyExists`
/// (409): [`create_retried`] takes that for success.
pub async fn retried<T, F, Fut>(what: &str, mut call: F) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    const TRIES: u32 = 8;
    let mut wait = Duration::from_millis(200);
    let mut attempt = 0;
    loop {
        attempt += 1;
        match call().await {
            Ok(value) => return Ok(value),
            Err(e) if attempt < TRIES && transient(&e) => {
                eprintln!("{what}: {e} (try {attempt} of {TRIES}; again in {wait:?})");
                tokio::time::sleep(wait).await;
                wait = (wait * 2).min(Duration::from_secs(10));
            }
            Err(e) => return Err(anyhow::Error::new(e).context(format!("{what} (try {attempt})"))),
        }
    }
}

/// Creates an object through [`retried`]: an `AlreadyExists` answer (409) counts as created,
/// as it is for a create retried after a lost answer whose first try was carried out (the
/// harness names every object it makes uniquely, so nothing else has made it).
pub async fn create_retried<T, F, Fut>(what: &str, call: F) -> anyhow::Result<()>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, kube::Error>>,
{
    match retried(what, call).await {
        Ok(_) => Ok(()),
        Err(e)
            if e.downcast_ref::<kube::Error>().is_some_and(|e| {
                matches!(e, kube::Error::Api(s) if s.code == 409 && s.reason == "AlreadyExists")
            }) =>
        {
            Ok(())
        }
        Err(e) => Err(e),
    }
}

/// A local address no one listens on now, for a process the test starts to serve on.
pub fn free_local_addr() -> anyhow::Result<std::net::SocketAddr> {
    let probe = std::net::TcpListener::bind("127.0.0.1:0").context("finding a free port")?;
    Ok(probe.local_addr()?)
}

/// A memory figure of process `pid` from /proc/<pid>/status (`VmRSS`, `VmHWM`…), in KiB.
pub fn process_memory_kib(pid: u32, field: &str) -> anyhow::Result<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
        .context("reading the process status")?;
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .with_context(|| format!("no {field} in the process status"))
}

/// A short suffix that differs between calls and between test processes, for object names.
pub fn unique_suffix() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    let mixed = nanos ^ std::process::id().rotate_left(16) ^ NEXT.fetch_add(1, Ordering::Relaxed);
    format!("{:06x}", mixed & 0xff_ffff)
}

/// Applies `crds/` and waits until both CRDs are Established.
pub async fn install_crds(client: &Client) -> anyhow::Result<()> {
    let file = repo_dir().join("crds/tether.dev.yaml");
    kubectl_ok(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-f",
            &file.to_string_lossy(),
        ],
        None,
    )?;
    let crds: Api<CustomResourceDefinition> = Api::all(client.clone());
    for name in ["schedulingprofiles.tether.dev", "stickybindings.tether.dev"] {
        wait_for(
            &format!("CRD {name} to be Established"),
            Duration::from_secs(30),
            || {
                let crds = crds.clone();
                async move {
                    let crd = crds.get(name).await?;
                    let established = crd
                        .status
                        .and_then(|s| s.conditions)
                        .unwrap_or_default()
                        .iter()
                        .any(|c| c.type_ == "Established" && c.status == "True");
                    Ok(established.then_some(()))
                }
            },
        )
        .await?;
    }
    Ok(())
}

/// A namespace of one test, named after it with a random suffix. Delete it with
/// [`TestNamespace::delete`]; a test that fails early deletes it when the value is dropped.
pub struct TestNamespace {
    pub name: String,
    client: Client,
    deleted: bool,
}

impl Drop for TestNamespace {
    fn drop(&mut self) {
        if !self.deleted {
            let _ = kubectl(
                &[
                    "delete",
                    "namespace",
                    &self.name,
                    "--wait=false",
                    "--ignore-not-found",
                ],
                None,
            );
        }
    }
}

impl TestNamespace {
    pub async fn create(client: &Client, test: &str) -> anyhow::Result<Self> {
        let name = format!("e2e-{test}-{}", unique_suffix());
        let ns = Namespace {
            metadata: kube::api::ObjectMeta {
                name: Some(name.clone()),
                ..Default::default()
            },
            ..Default::default()
        };
        Api::<Namespace>::all(client.clone())
            .create(&PostParams::default(), &ns)
            .await
            .with_context(|| format!("creating namespace {name}"))?;
        // Pods are refused until kube-controller-manager has made the namespace's `default`
        // ServiceAccount, a moment after the namespace. Right after a fault test restarted the
        // API server, kube-controller-manager's informers may still be backing off (up to 30 s
        // a try): the wait allows for that.
        let accounts: Api<k8s_openapi::api::core::v1::ServiceAccount> =
            Api::namespaced(client.clone(), &name);
        wait_for(
            &format!("the default ServiceAccount of {name}"),
            Duration::from_secs(90),
            || {
                let accounts = accounts.clone();
                async move { Ok(accounts.get_opt("default").await?.map(|_| ())) }
            },
        )
        .await?;
        Ok(TestNamespace {
            name,
            client: client.clone(),
            deleted: false,
        })
    }

    /// Leaves it in the cluster (for a run that follows on it).
    pub fn keep(mut self) {
        self.deleted = true;
    }

    pub async fn delete(mut self) -> anyhow::Result<()> {
        self.deleted = true;
        Api::<Namespace>::all(self.client.clone())
            .delete(&self.name, &DeleteParams::background())
            .await
            .with_context(|| format!("deleting namespace {}", self.name))?;
        Ok(())
    }
}

/// Kwok nodes that belong to one test: labelled and tainted `e2e.tether.dev/test=<name>`, so
/// that only that test's pods (which select and tolerate it, see [`TestNodes::isolate`]) land on them.
/// A test that fails early deletes its nodes when the value is dropped.
pub struct TestNodes {
    pub test: String,
    pub names: Vec<String>,
    client: Client,
    deleted: bool,
}

impl Drop for TestNodes {
    fn drop(&mut self) {
        if !self.deleted {
            let selector = format!("{TEST_KEY}={}", self.test);
            let _ = kubectl(
                &[
                    "delete",
                    "nodes",
                    "-l",
                    &selector,
                    "--wait=false",
                    "--ignore-not-found",
                ],
                None,
            );
        }
    }
}

/// Ready, and the node lifecycle controller has lifted its not-ready taints.
fn node_is_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    let tainted = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|ts| ts.iter().any(|t| t.key.starts_with("node.kubernetes.io/")));
    !tainted
        && node
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The label and taint key that isolates a test's nodes.
pub const TEST_KEY: &str = "e2e.tether.dev/test";

impl TestNodes {
    /// Creates `count` nodes named `<test>-<i>` with `cpu` CPUs, 64Gi and 110 pods, zones
    /// zone-a/b/c round-robin, plus `extra(i, &mut node_json)` changes; waits until they are Ready.
    pub async fn create(
        client: &Client,
        test: &str,
        count: usize,
        cpu: &str,
        extra: impl Fn(usize, &mut serde_json::Value),
    ) -> anyhow::Result<Self> {
        use futures::{StreamExt, TryStreamExt};
        use k8s_openapi::api::core::v1::Node;
        let test = format!("{test}-{}", unique_suffix());
        let nodes: Api<Node> = Api::all(client.clone());
        // Built first, so that the nodes made so far go away if a later step fails.
        let mut made = TestNodes {
            test: test.clone(),
            names: Vec::new(),
            client: client.clone(),
            deleted: false,
        };
        let built = (0..count)
            .map(|i| {
                let name = format!("{test}-{i}");
                let zone = ["zone-a", "zone-b", "zone-c"][i % 3];
                let mut node = serde_json::json!({
                    "apiVersion": "v1", "kind": "Node",
                    "metadata": {
                        "name": name,
                        "annotations": {"kwok.x-k8s.io/node": "fake"},
                        "labels": {
                            "kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                            "topology.kubernetes.io/zone": zone, "type": "kwok", TEST_KEY: test,
                        },
                    },
                    "spec": {"taints": [{"key": TEST_KEY, "value": test, "effect": "NoSchedule"}]},
                    "status": {
                        "allocatable": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                        "capacity": {"cpu": cpu, "memory": "64Gi", "pods": "110"},
                    },
                });
                extra(i, &mut node);
                serde_json::from_value::<Node>(node).context("building a node")
            })
            .collect::<anyhow::Result<Vec<Node>>>()?;
        // A fleet of a thousand or more is made sixteen at a time (15,000 in minutes, not one
        // node at a time at about 28 a second); a smaller one in order, one by one, as the tests
        // have always made theirs. The names stay in index order.
        let in_flight = if count >= 1000 { 16 } else { 1 };
        made.names = futures::stream::iter(built)
            .map(|node| {
                let nodes = nodes.clone();
                async move {
                    let name = node.metadata.name.clone().unwrap_or_default();
                    let params = PostParams::default();
                    create_retried(&format!("creating node {name}"), || {
                        nodes.create(&params, &node)
                    })
                    .await?;
                    Ok::<_, anyhow::Error>(name)
                }
            })
            .buffered(in_flight)
            .try_collect()
            .await?;
        // After a test restarted the control plane, the node lifecycle controller may take
        // half a minute or more to lift the not-ready taints of new nodes, and kwok reports a
        // large fleet Ready at its own pace (15 to 30 nodes a second here): 90 s, plus a second
        // for every 20 nodes, for the whole fleet. One node read at a time, in the order they
        // were made: a list of a large fleet every 100 ms would load the API server that kwok
        // reports their status through.
        let fleet = Duration::from_secs(90 + count as u64 / 20);
        let deadline = Instant::now() + fleet;
        for name in &made.names {
            let left = deadline.saturating_duration_since(Instant::now());
            wait_for(
                &format!("node {name} to be Ready (the fleet of {count} within {fleet:?})"),
                left,
                || {
                    let nodes = nodes.clone();
                    async move { Ok(node_is_ready(&nodes.get(name).await?).then_some(())) }
                },
            )
            .await?;
        }
        Ok(made)
    }

    /// Creates pod `name` through `pods`, on these nodes, for `scheduler`, requesting `cpu`
    /// (one container of the image `pause`).
    pub async fn create_pod(
        &self,
        pods: &Api<k8s_openapi::api::core::v1::Pod>,
        scheduler: &str,
        name: &str,
        cpu: &str,
    ) -> anyhow::Result<()> {
        let mut spec = serde_json::json!({"schedulerName": scheduler, "containers": [{"name": "c", "image": "pause", "resources": {"requests": {"cpu": cpu}}}]});
        self.isolate(&mut spec);
        let pod = serde_json::from_value(serde_json::json!({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec,
        }))?;
        pods.create(&PostParams::default(), &pod)
            .await
            .with_context(|| format!("creating pod {name}"))?;
        Ok(())
    }

    /// Makes a pod (as JSON) select and tolerate this test's nodes.
    pub fn isolate(&self, pod_spec: &mut serde_json::Value) {
        let spec = pod_spec.as_object_mut().expect("a pod spec is an object");
        let selector = spec
            .entry("nodeSelector")
            .or_insert_with(|| serde_json::json!({}));
        selector[TEST_KEY] = serde_json::json!(self.test);
        let tolerations = spec
            .entry("tolerations")
            .or_insert_with(|| serde_json::json!([]));
        if let Some(list) = tolerations.as_array_mut() {
            list.push(serde_json::json!({"key": TEST_KEY, "operator": "Equal", "value": self.test, "effect": "NoSchedule"}));
        }
    }

    /// Leaves it in the cluster (for a run that follows on it).
    pub fn keep(mut self) {
        self.deleted = true;
    }

    pub async fn delete(mut self) -> anyhow::Result<()> {
        self.deleted = true;
        use k8s_openapi::api::core::v1::Node;
        let nodes: Api<Node> = Api::all(self.client.clone());
        for name in &self.names {
            let _ = nodes.delete(name, &DeleteParams::default()).await;
        }
        Ok(())
    }
}

/// Deletes the pod `pod` whose UID is `uid` at once (grace 0) and waits until its controller
/// made a pod of the same name with another UID (a StatefulSet's ordinal). A pod already gone
/// (replaced meanwhile) counts as deleted.
pub async fn delete_and_wait_replaced(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    pod: &str,
    uid: &str,
    timeout: Duration,
) -> anyhow::Result<()> {
    match pods
        .delete(pod, &DeleteParams::default().grace_period(0))
        .await
    {
        Err(kube::Error::Api(e)) if e.code == 404 => {}
        other => drop(other?),
    }
    wait_for(&format!("{pod} recreated"), timeout, || async move {
        Ok(pods
            .get_opt(pod)
            .await?
            .filter(|p| p.metadata.uid.as_deref() != Some(uid))
            .map(|_| ()))
    })
    .await
}

/// The node a pod is bound to, waiting for the bind.
pub async fn wait_bound(
    client: &Client,
    namespace: &str,
    pod: &str,
    timeout: Duration,
) -> anyhow::Result<String> {
    use k8s_openapi::api::core::v1::Pod;
    let pods: Api<Pod> = Api::namespaced(client.clone(), namespace);
    wait_for(
        &format!("pod {namespace}/{pod} to be bound"),
        timeout,
        || {
            let pods = pods.clone();
            async move { Ok(pods.get(pod).await?.spec.and_then(|s| s.node_name)) }
        },
    )
    .await
}

/// Waits for an event with `reason` about one object whose message satisfies `matches`, and
/// returns the messages of all such events. Events are written after the bind, each behind a
/// token of tether's events budget, so a burst elsewhere in the cluster delays them: wait, never
/// read once.
pub async fn wait_event(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
    timeout: Duration,
    matches: impl Fn(&str) -> bool,
) -> anyhow::Result<Vec<String>> {
    let what = format!("a {reason} event about {namespace}/{name}");
    let found = wait_for(&what, timeout, || async {
        let events = events_for(client, namespace, name, reason).await?;
        Ok(events.iter().any(|e| matches(e)).then_some(events))
    })
    .await;
    match found {
        Ok(events) => Ok(events),
        Err(e) => {
            let seen = events_for(client, namespace, name, reason).await?;
            Err(e.context(format!("{reason} events seen: {seen:?}")))
        }
    }
}

/// Messages of the events with `reason` about one object, newest last: ordered by when each
/// was last observed (a repeated event is one object whose `series` counts the repeats).
pub async fn events_for(
    client: &Client,
    namespace: &str,
    name: &str,
    reason: &str,
) -> anyhow::Result<Vec<String>> {
    use k8s_openapi::api::events::v1::Event;
    let events: Api<Event> = Api::namespaced(client.clone(), namespace);
    let list = events.list(&kube::api::ListParams::default()).await?;
    let mut matching: Vec<Event> = list
        .items
        .into_iter()
        .filter(|e| {
            e.regarding.as_ref().and_then(|r| r.name.as_deref()) == Some(name)
                && e.reason.as_deref() == Some(reason)
        })
        .collect();
    let last_observed = |e: &Event| {
        e.series
            .as_ref()
            .map(|s| s.last_observed_time.0)
            .or(e.event_time.as_ref().map(|t| t.0))
    };
    matching.sort_by_key(last_observed);
    Ok(matching.into_iter().filter_map(|e| e.note).collect())
}
