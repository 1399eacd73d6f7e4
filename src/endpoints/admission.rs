//! What holds a gated pod back, for `tether explain`: its scheduling gates and, where Kueue
//! gates it (`kueue.x-k8s.io/admission`, `kueue.x-k8s.io/topology`), what Kueue says: the
//! pod's LocalQueue and ClusterQueue, its Workload's admission conditions, the quota in the way
//! and how many workloads wait. Read from the API when asked (never on the scheduling path),
//! each only where the caller may read it: the Workload needs `get workloads.kueue.x-k8s.io` in
//! the pod's namespace, the LocalQueue `get localqueues.kueue.x-k8s.io` there, the ClusterQueue's
//! quota `get clusterqueues.kueue.x-k8s.io` (else the LocalQueue's own figures are shown), the
//! Workload's position among the pending (Kueue's visibility API) `get
//! localqueues/pendingworkloads.visibility.kueue.x-k8s.io` there. Where Kueue is not served,
//! or a read fails, it says so.

use k8s_openapi::api::authentication::v1::UserInfo;
use kube::api::{Api, ApiResource, DynamicObject, GroupVersionKind, ListParams};
use serde_json::Value;

use super::auth::{self, AuthCache};
use crate::k8s::pod::Pod;
use crate::scheduler::explain::Admission;

const GROUP: &str = "kueue.x-k8s.io";
const VERSION: &str = "v1beta2";
/// The label that names a pod's (or its job's) LocalQueue.
const QUEUE_LABEL: &str = "kueue.x-k8s.io/queue-name";
/// The annotation naming the Workload of a pod Kueue gates for topology.
const WORKLOAD_ANNOTATION: &str = "kueue.x-k8s.io/workload";
/// The gates Kueue puts on the pods it manages.
const GATE_PREFIX: &str = "kueue.x-k8s.io/";
/// A Workload's conditions that decide its admission, in the order they are shown.
const CONDITIONS: [&str; 4] = ["QuotaReserved", "Admitted", "Evicted", "Preempted"];

fn api(client: &kube::Client, kind: &str, plural: &str, ns: Option<&str>) -> Api<DynamicObject> {
    let resource =
        ApiResource::from_gvk_with_plural(&GroupVersionKind::gvk(GROUP, VERSION, kind), plural);
    match ns {
        Some(ns) => Api::namespaced_with(client.clone(), ns, &resource),
        None => Api::all_with(client.clone(), &resource),
    }
}

/// How long the reads for one explanation may take in all.
const READ_DEADLINE: std::time::Duration = std::time::Duration::from_secs(5);

/// The pod's gates and what Kueue says of them, read within [`READ_DEADLINE`] (past it, the
/// gates alone and why); None for a pod without gates.
pub async fn of_pod(
    client: &kube::Client,
    cache: &AuthCache,
    caller: &UserInfo,
    pod: &Pod,
) -> Option<Admission> {
    match tokio::time::timeout(READ_DEADLINE, read(client, cache, caller, pod)).await {
        Ok(found) => found,
        Err(_) => {
            let gates = gates_of(pod);
            (!gates.is_empty()).then(|| Admission {
                gates,
                unread: vec![format!(
                    "Kueue's objects: no answer within {}s",
                    READ_DEADLINE.as_secs()
                )],
                ..Default::default()
            })
        }
    }
}

fn gates_of(pod: &Pod) -> Vec<String> {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .map(|g| g.iter().map(|g| g.name.clone()).collect())
        .unwrap_or_default()
}

async fn read(
    client: &kube::Client,
    cache: &AuthCache,
    caller: &UserInfo,
    pod: &Pod,
) -> Option<Admission> {
    let gates = gates_of(pod);
    if gates.is_empty() {
        return None;
    }
    let mut out = Admission {
        gates,
        ..Default::default()
    };
    if !out.gates.iter().any(|g| g.starts_with(GATE_PREFIX)) {
        return Some(out);
    }
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    if let Err(refused) = auth::authorize(
        client,
        cache,
        caller,
        "get",
        "workloads.kueue.x-k8s.io",
        Some(&ns),
        None,
    )
    .await
    {
        out.unread.push(format!("Kueue's workloads: {refused}"));
        return Some(out);
    }
    // The pod's Workload: the one Kueue names on the pod (a Job's pod it gates for topology),
    // else the one the pod or its controller owns (a plain pod, a pod group's member).
    let named = pod
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(WORKLOAD_ANNOTATION))
        .cloned();
    let mut owners: Vec<String> = pod.metadata.uid.iter().cloned().collect();
    owners.extend(
        pod.metadata
            .owner_references
            .iter()
            .flatten()
            .filter(|o| o.controller == Some(true))
            .map(|o| o.uid.clone()),
    );
    let mut queue = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(QUEUE_LABEL))
        .cloned();
    let mut workload_name = None;
    match api(client, "Workload", "workloads", Some(&ns))
        .list(&ListParams::default())
        .await
    {
        Ok(list) => {
            let found = list.items.iter().find(|w| {
                named.is_some() && w.metadata.name == named
                    || w.metadata
                        .owner_references
                        .iter()
                        .flatten()
                        .any(|o| owners.contains(&o.uid))
            });
            if let Some(w) = found {
                workload_name = w.metadata.name.clone();
                out.workload = Some(format!(
                    "{ns}/{}",
                    w.metadata.name.as_deref().unwrap_or_default()
                ));
                out.conditions = conditions(&w.data);
                out.cluster_queue = str_at(&w.data, &["status", "admission", "clusterQueue"]);
                queue = queue.or_else(|| str_at(&w.data, &["spec", "queueName"]));
            }
        }
        Err(e) => out
            .unread
            .push(format!("Kueue's workloads in {ns}: {}", unread(&e))),
    }
    let Some(queue) = queue else {
        return Some(out);
    };
    out.local_queue = Some(format!("{ns}/{queue}"));
    let local = match auth::authorize(
        client,
        cache,
        caller,
        "get",
        "localqueues.kueue.x-k8s.io",
        Some(&ns),
        Some(&queue),
    )
    .await
    {
        Err(refused) => {
            out.unread
                .push(format!("LocalQueue {ns}/{queue}: {refused}"));
            None
        }
        Ok(()) => match api(client, "LocalQueue", "localqueues", Some(&ns))
            .get(&queue)
            .await
        {
            Ok(lq) => Some(lq),
            Err(e) => {
                out.unread
                    .push(format!("LocalQueue {ns}/{queue}: {}", unread(&e)));
                None
            }
        },
    };
    if let Some(workload) = &workload_name {
        position(client, cache, caller, &ns, &queue, workload, &mut out).await;
    }
    if out.cluster_queue.is_none() {
        out.cluster_queue = local
            .as_ref()
            .and_then(|lq| str_at(&lq.data, &["spec", "clusterQueue"]));
    }
    let cluster = match &out.cluster_queue {
        Some(cq) => match auth::authorize(
            client,
            cache,
            caller,
            "get",
            "clusterqueues.kueue.x-k8s.io",
            None,
            Some(cq),
        )
        .await
        {
            Ok(()) => match api(client, "ClusterQueue", "clusterqueues", None)
                .get(cq)
                .await
            {
                Ok(found) => Some(found),
                Err(e) => {
                    out.unread
                        .push(format!("ClusterQueue {cq}: {}", unread(&e)));
                    None
                }
            },
            Err(refused) => {
                out.unread
                    .push(format!("ClusterQueue {cq}'s quota: {refused}"));
                None
            }
        },
        None => None,
    };
    match (&cluster, &local) {
        (Some(cq), _) => {
            out.quota = cluster_quota(&cq.data);
            out.pending_workloads = cq.data["status"]["pendingWorkloads"].as_i64();
        }
        (None, Some(lq)) => {
            out.quota = reservations(&lq.data["status"]["flavorsReservation"])
                .into_iter()
                .map(|(flavor, resource, total)| {
                    format!("{resource}: {total} reserved by LocalQueue {queue} (flavor {flavor})")
                })
                .collect();
            out.pending_workloads = lq.data["status"]["pendingWorkloads"].as_i64();
        }
        (None, None) => {}
    }
    Some(out)
}

/// Kueue's visibility API: the workloads pending in a LocalQueue, with their positions.
const VISIBILITY_GROUP: &str = "visibility.kueue.x-k8s.io";
/// How many pending workloads Kueue's visibility API answers with by default.
const PENDING_LIMIT: usize = 1000;

/// The Workload's place among the pending ones of its LocalQueue (and ClusterQueue), from
/// Kueue's visibility API, where the caller may read it (`get
/// localqueues/pendingworkloads.visibility.kueue.x-k8s.io` in the namespace). A Workload not
/// among them is admitted (or not queued yet): nothing is shown.
async fn position(
    client: &kube::Client,
    cache: &AuthCache,
    caller: &UserInfo,
    ns: &str,
    queue: &str,
    workload: &str,
    out: &mut Admission,
) {
    let what = format!("the positions in LocalQueue {ns}/{queue}");
    if let Err(refused) = auth::authorize(
        client,
        cache,
        caller,
        "get",
        &format!("localqueues/pendingworkloads.{VISIBILITY_GROUP}"),
        Some(ns),
        Some(queue),
    )
    .await
    {
        out.unread.push(format!("{what}: {refused}"));
        return;
    }
    let resource = ApiResource::from_gvk_with_plural(
        &GroupVersionKind::gvk(VISIBILITY_GROUP, VERSION, "LocalQueue"),
        "localqueues",
    );
    let pending = Api::<DynamicObject>::namespaced_with(client.clone(), ns, &resource)
        .get_subresource("pendingworkloads", queue)
        .await;
    match pending {
        Ok(summary) => {
            let items = summary.data["items"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let found = items
                .iter()
                .find(|w| w["metadata"]["name"].as_str() == Some(workload));
            match found {
                Some(w) => {
                    out.position_in_cluster_queue = w["positionInClusterQueue"].as_i64();
                    out.position_in_local_queue = w["positionInLocalQueue"].as_i64();
                }
                None if items.len() >= PENDING_LIMIT => out.unread.push(format!(
                    "{what}: the Workload is not among the first {PENDING_LIMIT} pending"
                )),
                None => {}
            }
        }
        Err(e) => out.unread.push(format!("{what}: {}", unread(&e))),
    }
}

/// A read's failure as a person reads it (Kueue not installed: its kinds are not served).
fn unread(e: &kube::Error) -> String {
    match e {
        kube::Error::Api(s) if s.code == 404 => "not found (is Kueue installed?)".to_string(),
        kube::Error::Api(s) if s.code == 403 => format!("tether may not read it: {}", s.message),
        other => crate::k8s::api_errors::message(other),
    }
}

fn str_at(v: &Value, path: &[&str]) -> Option<String> {
    let mut at = v;
    for p in path {
        at = at.get(p)?;
    }
    at.as_str().filter(|s| !s.is_empty()).map(str::to_string)
}

/// The Workload's admission conditions, `Type=Status (Reason): message`.
fn conditions(workload: &Value) -> Vec<String> {
    let all = workload["status"]["conditions"].as_array();
    CONDITIONS
        .iter()
        .filter_map(|t| {
            let c = all?.iter().find(|c| c["type"] == *t)?;
            let status = c["status"].as_str().unwrap_or_default();
            let reason = c["reason"].as_str().unwrap_or_default();
            let message = c["message"].as_str().unwrap_or_default();
            Some(format!("{t}={status} ({reason}): {message}"))
        })
        .collect()
}

/// `(flavor, resource, total)` of a `flavorsReservation` list.
fn reservations(list: &Value) -> Vec<(String, String, String)> {
    let mut out = Vec::new();
    for f in list.as_array().into_iter().flatten() {
        let flavor = f["name"].as_str().unwrap_or_default();
        for r in f["resources"].as_array().into_iter().flatten() {
            out.push((
                flavor.to_string(),
                r["name"].as_str().unwrap_or_default().to_string(),
                r["total"].as_str().unwrap_or("0").to_string(),
            ));
        }
    }
    out
}

/// Each resource of each flavor of the ClusterQueue: what is reserved of its nominal quota.
fn cluster_quota(cq: &Value) -> Vec<String> {
    let reserved = reservations(&cq["status"]["flavorsReservation"]);
    let mut out = Vec::new();
    for group in cq["spec"]["resourceGroups"]
        .as_array()
        .into_iter()
        .flatten()
    {
        for f in group["flavors"].as_array().into_iter().flatten() {
            let flavor = f["name"].as_str().unwrap_or_default();
            for r in f["resources"].as_array().into_iter().flatten() {
                let resource = r["name"].as_str().unwrap_or_default();
                let nominal = match &r["nominalQuota"] {
                    Value::String(s) => s.clone(),
                    Value::Number(n) => n.to_string(),
                    _ => "0".to_string(),
                };
                let used = reserved
                    .iter()
                    .find(|(fl, res, _)| fl == flavor && res == resource)
                    .map_or("0", |(_, _, t)| t.as_str());
                out.push(format!(
                    "{resource}: {used} reserved of nominal {nominal} (flavor {flavor})"
                ));
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cluster_queues_quota_reads_reserved_against_nominal() {
        let cq = serde_json::json!({
            "spec": {"resourceGroups": [{"coveredResources": ["cpu", "memory"], "flavors": [
                {"name": "default", "resources": [
                    {"name": "cpu", "nominalQuota": "1"},
                    {"name": "memory", "nominalQuota": "100Gi"}]}]}]},
            "status": {"pendingWorkloads": 1, "flavorsReservation": [
                {"name": "default", "resources": [{"name": "cpu", "total": "800m"}]}]},
        });
        assert_eq!(
            cluster_quota(&cq),
            vec![
                "cpu: 800m reserved of nominal 1 (flavor default)".to_string(),
                "memory: 0 reserved of nominal 100Gi (flavor default)".to_string(),
            ]
        );
    }

    #[test]
    fn a_workloads_conditions_are_shown_in_admission_order() {
        let w = serde_json::json!({"status": {"conditions": [
            {"type": "Admitted", "status": "False", "reason": "NoReservation", "message": "m2"},
            {"type": "QuotaReserved", "status": "False", "reason": "Pending",
             "message": "couldn't assign flavors to pod set main: insufficient unused quota for cpu in flavor default, 200m more needed"},
        ]}});
        let c = conditions(&w);
        assert_eq!(c.len(), 2);
        assert!(
            c[0].starts_with("QuotaReserved=False (Pending): couldn't assign"),
            "{c:?}"
        );
        assert_eq!(c[1], "Admitted=False (NoReservation): m2");
    }
}
