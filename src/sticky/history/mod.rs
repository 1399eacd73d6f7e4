//! The exactly-once StickyBinding history writes: every bind of a pod of a workload whose
//! profile runs StickyNode or PlacementHistory is counted once in the workload's binding, by the
//! PlacementRecorder PostBind plugin (and, after a restart, by [`super::reconcile`]).
//!
//! In three parts behind [`HistoryWriter`]: the queue of pending binds (`pending.rs`), the store
//! that writes them (`store.rs`), and the view the plugins read (`view.rs`: what was written,
//! with what waits laid on top), each reading what a bind is and how binds are counted
//! (`records.rs`). Here: the writer that joins them (a bind goes into the queue, a turn takes
//! its binding's batch to the store).

pub mod bounds;
pub mod pending;
pub mod records;
pub mod store;
pub mod view;

use crate::k8s::pod::Pod;

use self::pending::{Key, PendingBinds};
pub use self::records::{
    Bind, HistoryError, RECENT_BINDS, Recorded, SchedulerView, count_bind, count_binds, new_binding,
};
use self::store::HistoryStore;
use self::view::HistoryView;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use crate::api::StickyBinding;
use crate::gate::WriteGate;
use crate::k8s::pods;
use crate::recorder::EventWriter;
use crate::scheduler::metrics::Metrics;
use crate::sticky::bindings::{BindingIndex, BindingLookup};
use crate::sticky::workload::{self, OwnerLookup, Workload};

/// How many bindings are written at once. Binds wait for no history write (the binding cycle
/// gives back its place among the binds first), so this bounds the writes, and the connections
/// they hold, when binds outpace them; binds to a binding that waits join its next write.
pub const WRITES_IN_FLIGHT: usize = 64;

/// How many bindings are written at once while a bind is in flight, until
/// [`BEHIND_BINDINGS`] wait for a turn (see [`crate::k8s::budget::GiveWay`]). A new workload's
/// history costs two writes of a custom resource, each costlier to the API server than the
/// bind: during a burst the binds go first and the history follows, the plugins reading the
/// binds not written yet from the writer meanwhile, so no decision misses one.
pub const WRITES_WHILE_BINDING: usize = 4;

/// How many bindings may wait for a turn before history is written at full pace again, binds
/// in flight or not (about a KiB each while they wait).
pub const BEHIND_BINDINGS: usize = 5_000;

/// Writes StickyBinding history: exactly once per bound pod. Each binding has one writer at a
/// time: binds that arrive while a write is in flight are counted together in the next write,
/// so a burst of binds to one workload costs a few writes, not one conflict race per bind.
pub struct HistoryWriter {
    owners: Arc<dyn OwnerLookup>,
    metrics: Arc<Metrics>,
    pending: Arc<PendingBinds>,
    store: HistoryStore,
    view: HistoryView,
    /// Turns to write, [`WRITES_IN_FLIGHT`] at once.
    in_flight: tokio::sync::Semaphore,
    /// The turns taken while binds are in flight, [`WRITES_WHILE_BINDING`] at once.
    give_way: crate::k8s::budget::GiveWay,
    /// The writer tasks that take the queued turns (started with the first).
    workers: std::sync::OnceLock<()>,
}

impl Drop for HistoryWriter {
    /// Its workers wait for turns on the queue it shares with them; they end now.
    fn drop(&mut self) {
        self.pending.close();
    }
}

/// While it lives, no deleted pod is dropped from any binding's `countedPods` (but those
/// `countedBefore` vouches for).
pub struct PruningPaused(Arc<AtomicUsize>);

impl Drop for PruningPaused {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

impl HistoryWriter {
    /// `index` is read for the current binding (no GET unless it is stale) and receives what
    /// each write returns, so the plugins see a bind's history before the watch delivers it.
    /// `owners` resolves a pod's workload; `metrics` counts each write's result.
    pub fn new(
        client: kube::Client,
        instance: Option<String>,
        index: Arc<BindingIndex>,
        owners: Arc<dyn OwnerLookup>,
        metrics: Arc<Metrics>,
        gate: WriteGate,
    ) -> Self {
        let pending = Arc::new(PendingBinds::default());
        let denial_metrics = metrics.clone();
        HistoryWriter {
            owners,
            metrics,
            store: HistoryStore {
                events: EventWriter::new(client.clone(), instance, gate.clone()),
                client,
                index: index.clone(),
                view: None,
                reconciling: Arc::new(AtomicUsize::new(0)),
                gate,
                denial: store::Denial::counted_in(denial_metrics),
                departed: Default::default(),
                settle: bounds::SETTLE,
            },
            view: HistoryView {
                index,
                pending: pending.clone(),
            },
            pending,
            in_flight: tokio::sync::Semaphore::new(WRITES_IN_FLIGHT),
            give_way: crate::k8s::budget::GiveWay::new(WRITES_WHILE_BINDING),
            workers: std::sync::OnceLock::new(),
        }
    }

    /// Reads the scheduler's pods and nodes through `view`: `countedPods` holds only the
    /// workload's pods the scheduler knows, and status writes carry the binding's conditions
    /// (the StickyBinding controller then has nothing to add).
    pub fn reading(mut self, view: Arc<dyn SchedulerView>) -> Self {
        self.store.view = Some(view);
        self
    }

    /// Keeps a counted bind named in `countedPods` for `settle` (see [`bounds::SETTLE`]).
    pub fn settling_after(mut self, settle: jiff::SignedDuration) -> Self {
        self.store.settle = settle;
        self
    }

    /// Keeps every deleted pod in `countedPods` until the guard is dropped (unless
    /// `countedBefore` passes it). The reconcile of binds made before a restart holds it: it
    /// decides from the pods bound when it started, and a pod deleted since then and dropped
    /// from `countedPods` would look never counted to it.
    pub fn pause_pruning(&self) -> PruningPaused {
        self.store.reconciling.fetch_add(1, Ordering::SeqCst);
        PruningPaused(self.store.reconciling.clone())
    }

    /// The bindings this writer reads and updates.
    pub fn bindings(&self) -> &BindingIndex {
        &self.store.index
    }

    /// Counts the bind of `pod` to `node` in its workload's binding, once, and counts the
    /// outcome in `tether_history_writes_total`. When a write to that binding is in flight the
    /// bind joins the next one, which the caller in charge makes; otherwise this call writes
    /// until no bind of the binding waits. A failure is logged, never returned: the bind stands,
    /// and the start-up reconcile of a later restart counts what was missed.
    pub async fn record_bind(&self, pod: &Pod, node: &str) {
        if let Some(key) = self.enqueue(pod, node) {
            self.write_pending(&key).await;
        }
    }

    /// Counts the bind of a live migration's target `pod` to `node` once its VMI reports the
    /// migration completed: the VM runs there now, so its history and `latest` say so.
    pub async fn record_completed_migration(&self, pod: &Pod, node: &str) {
        let workload = workload::resolve(pod, self.owners.as_ref());
        if let Some(key) = self.enqueue_counted(pod, &workload, node) {
            self.write_pending(&key).await;
        }
    }

    /// Like [`HistoryWriter::record_bind`], without waiting: the binding's turn is queued for
    /// one of [`WRITES_IN_FLIGHT`] writer tasks, so that a binding cycle ends when its bind is
    /// answered (the plugins see the bind at once all the same, see the [`BindingLookup`] of
    /// the writer). A queued turn is its binding's key; its binds wait in the pending map, so a
    /// burst of thousands of binds waits as data, not as thousands of tasks.
    /// [`HistoryWriter::wait_idle`] waits for these writes.
    pub fn record_bind_later(self: &Arc<Self>, pod: &Pod, node: &str) {
        let workload = workload::resolve(pod, self.owners.as_ref());
        self.record_workload_bind_later(pod, &workload, node);
    }

    /// As [`HistoryWriter::record_bind_later`], for a pod whose workload is known already (the
    /// scheduling cycle resolved it).
    pub fn record_workload_bind_later(
        self: &Arc<Self>,
        pod: &Pod,
        workload: &Workload,
        node: &str,
    ) {
        let Some(key) = self.enqueue_for(pod, workload, node) else {
            return;
        };
        self.pending.queue_turn(key);
        self.workers.get_or_init(|| {
            for _ in 0..WRITES_IN_FLIGHT {
                // A worker waits for a turn holding only the queue, and the writer only while
                // it writes: an idle worker keeps no session alive (its writer holds the cache,
                // queue, owner cache and bindings), and ends once the writer is gone.
                let (this, pending) = (Arc::downgrade(self), self.pending.clone());
                tokio::spawn(async move {
                    loop {
                        let key = pending.next_turn().await;
                        let Some(writer) = this.upgrade() else {
                            return;
                        };
                        if let Some(key) = key {
                            writer.take_turn(key).await;
                        }
                    }
                });
            }
        });
    }

    /// Writes the binds of the binding whose turn it is.
    async fn take_turn(&self, key: Key) {
        let behind = self.pending.turns_waiting() >= BEHIND_BINDINGS;
        let turn = self.give_way.turn(behind).await;
        self.write_pending(&key).await;
        drop(turn);
        self.pending.turn_done();
    }

    /// Waits until no write started by [`HistoryWriter::record_bind_later`] runs, at most
    /// `grace`; returns how many still run.
    pub async fn wait_idle(&self, grace: Duration) -> usize {
        self.pending.wait_idle(grace).await
    }

    /// Adds the bind to its binding's pending binds; returns the binding's key when the caller
    /// is to write them (no write to that binding is under way).
    fn enqueue(&self, pod: &Pod, node: &str) -> Option<Key> {
        let workload = workload::resolve(pod, self.owners.as_ref());
        self.enqueue_for(pod, &workload, node)
    }

    /// As [`HistoryWriter::enqueue`], for a pod whose workload is known. A live migration's
    /// target pod is not counted at its bind: only a migration that completes moves the VM
    /// ([`HistoryWriter::record_completed_migration`]).
    fn enqueue_for(&self, pod: &Pod, workload: &Workload, node: &str) -> Option<Key> {
        if let Some(migration) = crate::sticky::kubevirt::migration_of(pod) {
            tracing::debug!(pod = %pods::key(pod), migration = %migration, "a migration target's bind is counted when the migration completes");
            return None;
        }
        self.enqueue_counted(pod, workload, node)
    }

    /// Queues the bind, unless the pod's owner is not known yet.
    fn enqueue_counted(&self, pod: &Pod, workload: &Workload, node: &str) -> Option<Key> {
        if let Some(owner) = &workload.pending_owner {
            // Not this pod's binding to guess at; a restart's reconcile counts it later.
            tracing::warn!(pod = %pods::key(pod), owner = %owner, "the pod's owner is not known yet; its bind is not recorded now");
            self.metrics.history_write("failed");
            return None;
        }
        self.pending.add(workload, Bind::of(pod, node))
    }

    /// Writes the binds waiting for `key`, batch after batch, until none is left.
    async fn write_pending(&self, key: &Key) {
        loop {
            // Binds that arrive while this waits for its turn join the batch.
            let _turn = self.in_flight.acquire().await;
            let Some((workload, batch)) = self.pending.take_batch(key) else {
                return;
            };
            let written = self.store.write(&workload, &batch).await;
            self.pending.batch_done(key);
            match written {
                Ok(counted) => {
                    for _ in 0..counted {
                        self.metrics.history_write("recorded");
                    }
                    for _ in counted..batch.len() {
                        self.metrics.history_write("duplicate");
                    }
                }
                Err(e) => {
                    tracing::warn!(binding = %format!("{}/{}", key.0, key.1), binds = batch.len(), error = %e, "could not record binds in the StickyBinding");
                    for _ in &batch {
                        self.metrics.history_write("failed");
                    }
                }
            }
        }
    }

    /// Whether its writes are denied for long now, and why.
    pub fn denial(&self) -> &store::Denial {
        &self.store.denial
    }

    /// The API client the writer writes with.
    pub fn client(&self) -> &kube::Client {
        &self.store.client
    }

    /// The workload `pod` belongs to, as the writer resolves it.
    pub fn workload_of(&self, pod: &Pod) -> Workload {
        workload::resolve(pod, self.owners.as_ref())
    }

    /// Counts `pod` bound to `node` in its workload's binding now, creating the binding if
    /// missing (one write, not batched).
    pub async fn record(
        &self,
        workload: &Workload,
        pod: &Pod,
        node: &str,
    ) -> Result<Recorded, HistoryError> {
        let bind = Bind::of(pod, node);
        let counted = self
            .store
            .write(workload, std::slice::from_ref(&bind))
            .await?;
        Ok(if counted == 1 {
            Recorded::Counted
        } else {
            Recorded::AlreadyCounted
        })
    }
}

/// The bindings as the plugins read them: see [`HistoryView`].
impl BindingLookup for HistoryWriter {
    fn get(&self, namespace: &str, name: &str) -> Option<Arc<StickyBinding>> {
        self.view.get(namespace, name)
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Mutex;

    use super::*;
    use crate::api::StickyBindingStatus;
    use crate::api::sticky_binding::conditions as sticky_binding;
    use crate::scheduler::testing::stand_in_client;
    use crate::sticky::bindings::BindingLookup;
    use crate::sticky::reconcile;
    use k8s_openapi::api::core::v1::Node;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;

    fn now() -> Time {
        Time(jiff::Timestamp::from_second(1_700_000_000).expect("ts"))
    }

    #[test]
    fn a_bind_is_counted_once_however_often_it_is_reported() {
        let s0 = StickyBindingStatus::default();
        let s1 = count_bind(&s0, "u1", "p1", "n1", now()).expect("first report counts");
        assert_eq!(
            (s1.schedule_count, s1.node_count["n1"], s1.latest.as_deref()),
            (1, 1, Some("n1"))
        );
        assert!(
            count_bind(&s1, "u1", "p1", "n1", now()).is_none(),
            "the same pod again: nothing"
        );
        let s2 = count_bind(&s1, "u2", "p2", "n2", now()).expect("another pod counts");
        assert_eq!(
            (s2.schedule_count, s2.node_count["n2"], s2.latest.as_deref()),
            (2, 1, Some("n2"))
        );
        assert_eq!(s2.node_count.values().sum::<i64>(), s2.schedule_count);
    }

    #[test]
    fn recent_binds_are_bounded() {
        let mut s = StickyBindingStatus::default();
        for i in 0..40 {
            s = count_bind(&s, &format!("u{i}"), "p", "n", now()).expect("counts");
        }
        assert_eq!(s.recent_binds.len(), RECENT_BINDS);
        assert_eq!(
            s.recent_binds.last().map(|b| b.pod_uid.as_str()),
            Some("u39")
        );
        assert_eq!(s.schedule_count, 40);
    }

    #[test]
    fn new_bindings_are_named_labelled_and_owned_by_the_workload() {
        let w = Workload {
            namespace: "vms".into(),
            api_version: "kubevirt.io/v1".into(),
            kind: "VirtualMachine".into(),
            name: "Fedora".into(),
            uid: "vm-uid".into(),
            ordinal: None,
            pod_name: None,
            replicas: None,
            pending_owner: None,
        };
        let b = new_binding(&w);
        assert_eq!(b.metadata.name.as_deref(), Some("virtualmachine-fedora"));
        assert_eq!(b.metadata.namespace.as_deref(), Some("vms"));
        let owner = &b.metadata.owner_references.as_ref().expect("owned")[0];
        assert_eq!(
            (owner.kind.as_str(), owner.uid.as_str()),
            ("VirtualMachine", "vm-uid")
        );
        assert_eq!(b.spec.workload_ref.kind, "VirtualMachine");
    }

    /// A stand-in API server for one StickyBinding, `deployment-web`, deleted after the index
    /// read it: answers the history writer's calls and records them.
    fn api_server(calls: Arc<std::sync::Mutex<Vec<String>>>) -> kube::Client {
        stand_in_client(move |method, path, mut sent| {
            let base = "/apis/tether.dev/v1alpha1/namespaces/ns/stickybindings";
            let path = path.trim_start_matches(base).to_string();
            calls
                .lock()
                .expect("calls")
                .push(format!("{method} {path}"));
            let not_found = serde_json::json!({"kind": "Status", "apiVersion": "v1",
                "status": "Failure", "reason": "NotFound", "code": 404,
                "message": "stickybindings.tether.dev \"deployment-web\" not found"});
            match (method, path.as_str()) {
                ("PUT", "/deployment-web/status") if sent["metadata"]["uid"] == "recreated" => {
                    sent["metadata"]["resourceVersion"] = "8".into();
                    (200, sent)
                }
                ("POST", "") => {
                    sent["metadata"]["uid"] = "recreated".into();
                    sent["metadata"]["resourceVersion"] = "7".into();
                    (201, sent)
                }
                _ => (404, not_found),
            }
        })
    }

    #[tokio::test]
    async fn a_binding_deleted_since_the_index_read_it_is_created_anew_with_the_bind_counted() {
        let calls = Arc::new(std::sync::Mutex::new(Vec::new()));
        let client = api_server(calls.clone());
        let index = Arc::new(BindingIndex::default());
        let workload = Workload {
            namespace: "ns".into(),
            api_version: "apps/v1".into(),
            kind: "Deployment".into(),
            name: "web".into(),
            uid: "web-uid".into(),
            ordinal: None,
            pod_name: None,
            replicas: Some(1),
            pending_owner: None,
        };
        let mut stale = new_binding(&workload);
        stale.metadata.uid = Some("deleted".into());
        stale.metadata.resource_version = Some("5".into());
        stale.status = Some(StickyBindingStatus {
            latest: Some("n1".into()),
            node_count: [("n1".to_string(), 3)].into(),
            schedule_count: 3,
            ..Default::default()
        });
        index.upsert(stale);
        let writer = HistoryWriter::new(
            client,
            None,
            index.clone(),
            Arc::new(crate::sticky::workload::NoOwners),
            Arc::new(Metrics::default()),
            crate::gate::WriteGate::alone(),
        );
        let mut pod = Pod::default();
        pod.metadata.uid = Some("pod-2".into());
        pod.metadata.name = Some("web-abc".into());

        let recorded = writer
            .record(&workload, &pod, "n2")
            .await
            .expect("recorded");

        assert_eq!(recorded, Recorded::Counted);
        assert_eq!(
            *calls.lock().expect("calls"),
            [
                "PUT /deployment-web/status",
                "POST ",
                "PUT /deployment-web/status"
            ],
            "404 on the write: create, count"
        );
        let now = index.get("ns", "deployment-web").expect("indexed");
        assert_eq!(now.metadata.uid.as_deref(), Some("recreated"));
        let status = now.status.clone().unwrap_or_default();
        assert_eq!(
            (status.schedule_count, status.latest.as_deref()),
            (1, Some("n2")),
            "only this bind, in the new binding: {status:?}"
        );
        assert_eq!(status.recent_binds[0].pod_uid, "pod-2");
    }

    /// A stand-in API server holding one StickyBinding, with resourceVersion preconditions.
    /// `faults` are served in turn to status writes: "lost" applies the write but answers 500
    /// (an answer lost on the way), "busy" answers 429 and "denied" 403, without applying it.
    struct Store {
        binding: std::sync::Mutex<Option<serde_json::Value>>,
        faults: std::sync::Mutex<Vec<&'static str>>,
        writes: std::sync::atomic::AtomicUsize,
        /// Every call, as "METHOD path".
        calls: std::sync::Mutex<Vec<String>>,
        /// The largest binding written, in bytes of JSON.
        largest: std::sync::atomic::AtomicUsize,
    }

    /// etcd's default limit on a request (`--max-request-bytes`, 1.5 MiB): a binding past it is
    /// refused as "request is too large".
    const ETCD_LIMIT: usize = 1536 * 1024;

    fn empty_store() -> Arc<Store> {
        Arc::new(Store {
            binding: std::sync::Mutex::new(None),
            faults: std::sync::Mutex::new(Vec::new()),
            writes: std::sync::atomic::AtomicUsize::new(0),
            calls: std::sync::Mutex::new(Vec::new()),
            largest: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    fn store_client(store: Arc<Store>) -> kube::Client {
        stand_in_client(move |method, path, mut sent| {
            let base = "/apis/tether.dev/v1alpha1/namespaces/ns/stickybindings";
            let path = path.trim_start_matches(base).to_string();
            store
                .calls
                .lock()
                .expect("calls")
                .push(format!("{method} {path}"));
            let mut held = store.binding.lock().expect("binding");
            let status = |code: u16, reason: &str| {
                serde_json::json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": reason, "code": code, "message": reason})
            };
            match (method, path.as_str()) {
                ("GET", "/deployment-web") => match held.as_ref() {
                    Some(b) => (200, b.clone()),
                    None => (404, status(404, "NotFound")),
                },
                ("POST", "") if held.is_some() => (409, status(409, "AlreadyExists")),
                ("POST", "") => {
                    sent["metadata"]["uid"] = "b-uid".into();
                    sent["metadata"]["generation"] = 1.into();
                    sent["metadata"]["resourceVersion"] = "1".into();
                    *held = Some(sent.clone());
                    (201, sent)
                }
                ("PUT", "/deployment-web/status") => {
                    let Some(current) = held.clone() else {
                        return (404, status(404, "NotFound"));
                    };
                    if sent["metadata"]["resourceVersion"] != current["metadata"]["resourceVersion"]
                    {
                        return (409, status(409, "Conflict"));
                    }
                    let fault = store.faults.lock().expect("faults").pop();
                    if fault == Some("busy") {
                        return (429, status(429, "TooManyRequests"));
                    }
                    if fault == Some("denied") {
                        return (403, status(403, "Forbidden"));
                    }
                    let size = serde_json::to_vec(&sent).map_or(0, |v| v.len());
                    store
                        .largest
                        .fetch_max(size, std::sync::atomic::Ordering::SeqCst);
                    if fault == Some("too-large") || size > ETCD_LIMIT {
                        let mut refused = status(500, "InternalError");
                        refused["message"] = "etcdserver: request is too large".into();
                        return (500, refused);
                    }
                    store
                        .writes
                        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                    let rv: u64 = current["metadata"]["resourceVersion"]
                        .as_str()
                        .and_then(|v| v.parse().ok())
                        .unwrap_or(0);
                    sent["metadata"]["resourceVersion"] = (rv + 1).to_string().into();
                    *held = Some(sent.clone());
                    if fault == Some("lost") {
                        return (500, status(500, "InternalError"));
                    }
                    (200, sent)
                }
                _ => (404, status(404, "NotFound")),
            }
        })
    }

    fn web_pod(i: usize) -> Pod {
        let mut pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {"name": format!("web-{i}"), "namespace": "ns", "uid": format!("pod-{i}"),
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "Deployment", "name": "web",
                    "uid": "web-uid", "controller": true}]},
        }))
        .expect("a pod");
        pod.spec = Some(Default::default());
        pod
    }

    fn writer_for(store: &Arc<Store>) -> Arc<HistoryWriter> {
        Arc::new(unread_writer(store))
    }

    /// `web_pod(i)` bound to n1, its PodScheduled condition set at `at`.
    fn bound_web_pod(i: usize, at: &str) -> Arc<Pod> {
        let mut pod = web_pod(i);
        pod.spec.get_or_insert_with(Default::default).node_name = Some("n1".into());
        pod.status = Some(
            serde_json::from_value(serde_json::json!({"conditions": [
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]}))
            .expect("status"),
        );
        Arc::new(pod)
    }

    fn unread_writer(store: &Arc<Store>) -> HistoryWriter {
        HistoryWriter::new(
            store_client(store.clone()),
            None,
            Arc::new(BindingIndex::default()),
            Arc::new(crate::sticky::workload::NoOwners),
            Arc::new(Metrics::default()),
            crate::gate::WriteGate::alone(),
        )
    }

    /// The scheduler's pods and nodes as a test sets them: every pod is known but those
    /// marked gone, bound when `bound` says; the nodes are `nodes`, and those named in
    /// `live_nodes` (Ready).
    #[derive(Default)]
    struct View {
        gone: Mutex<std::collections::HashSet<String>>,
        bound: Mutex<std::collections::HashMap<String, jiff::Timestamp>>,
        nodes: Vec<Arc<Node>>,
        live_nodes: Mutex<std::collections::HashSet<String>>,
    }

    impl SchedulerView for View {
        fn pod_seen(&self, uid: &str) -> bounds::Seen {
            if self.gone.lock().expect("gone").contains(uid) {
                return bounds::Seen::Gone;
            }
            self.bound
                .lock()
                .expect("bound")
                .get(uid)
                .map_or(bounds::Seen::Unbound, |t| bounds::Seen::BoundAt(*t))
        }
        fn node(&self, name: &str) -> Option<Arc<Node>> {
            if self.live_nodes.lock().expect("nodes").contains(name) {
                return Some(ready_node(name));
            }
            self.nodes
                .iter()
                .find(|n| n.metadata.name.as_deref() == Some(name))
                .cloned()
        }
    }

    fn held_status(store: &Store) -> StickyBindingStatus {
        let held = store
            .binding
            .lock()
            .expect("binding")
            .clone()
            .expect("a binding");
        serde_json::from_value(held["status"].clone()).unwrap_or_default()
    }

    #[test]
    fn counts_edited_to_odd_values_saturate_instead_of_wrapping() {
        let status = StickyBindingStatus {
            node_count: [("n1".to_string(), i64::MAX), ("n2".to_string(), -5)].into(),
            schedule_count: i64::MAX,
            ..Default::default()
        };
        let s1 = count_bind(&status, "u1", "p", "n1", now()).expect("counted");
        assert_eq!(
            (s1.node_count["n1"], s1.schedule_count),
            (i64::MAX, i64::MAX)
        );
        let s2 = count_bind(&status, "u2", "p", "n2", now()).expect("counted");
        assert_eq!(
            s2.node_count["n2"], 1,
            "a negative count starts again from zero"
        );
    }

    #[test]
    fn counted_pods_keep_what_fell_out_of_recent_binds() {
        let mut status = StickyBindingStatus::default();
        for i in 0..40 {
            status = count_bind(&status, &format!("u{i}"), "p", "n1", now()).expect("new");
        }
        assert_eq!(status.recent_binds.len(), RECENT_BINDS);
        assert_eq!(status.counted_pods.len(), 40);
        assert!(
            count_bind(&status, "u0", "p", "n1", now()).is_none(),
            "u0 left recentBinds but is still counted once"
        );
    }

    /// A live migration's target pod is not counted at its bind (the migration may fail);
    /// the VMI's other pods are.
    #[tokio::test]
    async fn a_migration_targets_bind_waits_for_the_migration() {
        let writer = writer_for(&empty_store());
        let vmi_pod = |name: &str, target: bool| {
            let mut labels = serde_json::json!({"kubevirt.io/created-by": "uid-vmi"});
            if target {
                labels[crate::sticky::kubevirt::MIGRATION_JOB_UID] = "uid-mig".into();
            }
            serde_json::from_value::<Pod>(serde_json::json!({
                "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}"),
                    "labels": labels,
                    "ownerReferences": [{"apiVersion": "kubevirt.io/v1",
                        "kind": "VirtualMachineInstance", "name": "vm", "uid": "uid-vmi",
                        "controller": true}]},
            }))
            .expect("a pod")
        };
        assert!(writer.enqueue(&vmi_pod("source", false), "n1").is_some());
        assert!(writer.enqueue(&vmi_pod("target", true), "n2").is_none());
    }

    #[tokio::test]
    async fn a_burst_of_binds_to_one_binding_is_counted_exactly_once_in_few_writes() {
        let store = empty_store();
        *store.faults.lock().expect("faults") = vec!["busy", "lost", "busy"];
        let writer = writer_for(&store);
        let binds = (0..150).map(|i| {
            let writer = writer.clone();
            async move {
                writer
                    .record_bind(&web_pod(i), &format!("n{}", i % 3))
                    .await
            }
        });
        futures::future::join_all(binds).await;

        let status = held_status(&store);
        assert_eq!(
            status.schedule_count, 150,
            "every bind counted once: {status:?}"
        );
        assert_eq!(status.node_count.values().sum::<i64>(), 150);
        let writes = store.writes.load(std::sync::atomic::Ordering::SeqCst);
        assert!(writes < 150, "binds share writes: {writes} writes");
    }

    /// A bound pod deleted while the start-up reconcile works through the pods bound when it
    /// began: it stays in `countedPods` until the reconcile is done, so the reconcile does not
    /// take it for a missed bind and count it twice; afterwards it is dropped.
    #[tokio::test]
    async fn a_pod_deleted_during_the_reconcile_is_not_counted_again() {
        let store = empty_store();
        let view = Arc::new(View::default());
        let writer = Arc::new(unread_writer(&store).reading(view.clone()));
        let scheduled = |i: usize| bound_web_pod(i, "2026-01-01T00:00:00Z");
        writer.record_bind(&scheduled(0), "n1").await;
        writer.record_bind(&scheduled(1), "n1").await;
        view.gone.lock().expect("gone").insert("pod-0".into());

        // Pruning pauses when the reconcile is created, before it first runs.
        let reconcile = reconcile::record_missed_binds(
            writer.clone(),
            vec![scheduled(0), scheduled(1)],
            reconcile::reads_all(),
        );
        writer.record_bind(&web_pod(2), "n2").await;
        assert!(held_status(&store).counted_pods.contains(&"pod-0".into()));
        reconcile.await;
        assert_eq!(held_status(&store).schedule_count, 3, "pod-0 counted once");

        writer.record_bind(&web_pod(3), "n2").await;
        let status = held_status(&store);
        assert_eq!(status.schedule_count, 4);
        assert_eq!(status.counted_pods, ["pod-1", "pod-2", "pod-3"]);
    }

    /// The start-up reconcile writes only the binds a reader of the pod's profile reads: a
    /// Deployment of many replicas under `skipMultiReplica` gets no history from a restart,
    /// as it gets none from its binds (a 200-replica Deployment had all its binds written).
    #[tokio::test]
    async fn a_reconcile_records_only_the_binds_a_reader_reads() {
        let store = empty_store();
        let writer = Arc::new(unread_writer(&store));
        // Bound moments ago: a bind the binding does not hold is a missed one.
        let recent = (jiff::Timestamp::now() - jiff::SignedDuration::from_secs(5)).to_string();
        let scheduled = |i: usize| bound_web_pod(i, &recent);
        let skipped: reconcile::Reads = Arc::new(|_, w| w.kind != "Deployment");
        reconcile::record_missed_binds(writer.clone(), vec![scheduled(0), scheduled(1)], skipped)
            .await;
        assert_eq!(
            store.writes.load(std::sync::atomic::Ordering::SeqCst),
            0,
            "no history written for a workload no reader reads"
        );
        assert!(store.binding.lock().expect("binding").is_none());
    }

    /// While the start-up reconcile runs, a deleted pod stays in `countedPods` (the reconcile
    /// decides from the pods bound when it began), yet a burst meanwhile keeps the list within
    /// its bound (the API server would refuse a longer one): the oldest binds go, vouched for by
    /// `countedBefore`, which the reconcile reads too.
    #[tokio::test]
    async fn while_a_reconcile_runs_deleted_pods_stay_listed_and_the_list_keeps_its_bound() {
        let store = empty_store();
        let view = Arc::new(View::default());
        let writer = Arc::new(unread_writer(&store).reading(view.clone()));
        writer.record_bind(&web_pod(0), "n1").await;
        view.gone.lock().expect("gone").insert("pod-0".into());
        let paused = writer.pause_pruning();
        let burst = crate::api::MAX_COUNTED_PODS + 100;
        let start = jiff::Timestamp::now() - jiff::SignedDuration::from_secs(60);
        for wave in (1..=burst).collect::<Vec<_>>().chunks(1000) {
            {
                let mut bound = view.bound.lock().expect("bound");
                for i in wave {
                    let ms = i64::try_from(*i).expect("small");
                    bound.insert(
                        format!("pod-{i}"),
                        start + jiff::SignedDuration::from_millis(ms),
                    );
                }
            }
            futures::future::join_all(wave.iter().map(|i| {
                let writer = writer.clone();
                async move { writer.record_bind(&web_pod(*i), "n1").await }
            }))
            .await;
        }
        let status = held_status(&store);
        assert_eq!(status.schedule_count, (burst + 1) as i64);
        assert!(
            status.counted_pods.len() <= crate::api::MAX_COUNTED_PODS,
            "{} listed",
            status.counted_pods.len()
        );
        assert!(status.counted_pods.contains(&"pod-0".to_string()));
        drop(paused);
        writer.record_bind(&web_pod(burst + 1), "n1").await;
        assert!(
            !held_status(&store)
                .counted_pods
                .contains(&"pod-0".to_string())
        );
    }

    fn ready_node(name: &str) -> Arc<Node> {
        Arc::new(
            serde_json::from_value(serde_json::json!({"metadata": {"name": name},
                "status": {"conditions": [{"type": "Ready", "status": "True"}]}}))
            .expect("a node"),
        )
    }

    /// The first bind of a workload costs a create and one status write, and that write
    /// carries the conditions the StickyBinding controller would set: it has nothing left to
    /// write, so its status write never races the writer's on a new binding.
    #[tokio::test]
    async fn a_new_binding_costs_a_create_and_a_status_write_that_carries_its_conditions() {
        let store = empty_store();
        let n1 = ready_node("n1");
        let view = View {
            nodes: vec![n1.clone()],
            ..View::default()
        };
        let writer = Arc::new(unread_writer(&store).reading(Arc::new(view)));

        writer.record_bind(&web_pod(0), "n1").await;

        assert_eq!(
            *store.calls.lock().expect("calls"),
            ["POST ", "PUT /deployment-web/status"],
            "no read of a binding the index does not hold"
        );
        let held: StickyBinding = serde_json::from_value(
            store
                .binding
                .lock()
                .expect("binding")
                .clone()
                .expect("a binding"),
        )
        .expect("a StickyBinding");
        let status = held.status.clone().unwrap_or_default();
        let condition = |t: &str| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == t)
                .map(|c| c.status.clone())
        };
        assert_eq!(condition("NodeAvailable").as_deref(), Some("True"));
        assert_eq!(condition("HistoryConsistent").as_deref(), Some("True"));
        assert_eq!(condition("Stalled").as_deref(), Some("False"));
        assert_eq!(condition("Reconciling").as_deref(), Some("False"));
        assert_eq!(status.observed_generation, Some(1));
        let availability = sticky_binding::node_availability("n1", Some(&n1));
        assert!(
            !sticky_binding::desired_conditions(&held, Some(&availability)).changed,
            "the controller has nothing to add: {:?}",
            status.conditions
        );
    }

    /// A binding that exists but is missing from the index (its watch event not here yet):
    /// the create is refused, the binding is read and the bind counted in it.
    #[tokio::test]
    async fn a_binding_the_index_has_not_seen_yet_is_read_after_the_create_is_refused() {
        let store = empty_store();
        let writer = writer_for(&store);
        writer.record_bind(&web_pod(0), "n1").await;
        let lagging = writer_for(&store);

        lagging.record_bind(&web_pod(1), "n2").await;

        assert_eq!(held_status(&store).schedule_count, 2);
        assert_eq!(
            store.calls.lock().expect("calls")[2..],
            ["POST ", "GET /deployment-web", "PUT /deployment-web/status"]
        );
    }

    /// While a bind waits to be written (binds outpace history writes in a burst), the plugins
    /// reading through the writer already see it: where the workload went, and its counts.
    #[tokio::test]
    async fn the_plugins_read_binds_not_written_yet() {
        let store = empty_store();
        let writer = writer_for(&store);
        writer.record_bind(&web_pod(0), "n1").await;
        assert!(
            writer.enqueue(&web_pod(1), "n2").is_some(),
            "pending, not written"
        );

        let read = BindingLookup::get(writer.as_ref(), "ns", "deployment-web").expect("read");
        let status = read.status.clone().unwrap_or_default();
        assert_eq!(read.pin(), Some("n2"));
        assert_eq!((status.schedule_count, status.node_count.len()), (2, 2));
        let written = writer
            .bindings()
            .get("ns", "deployment-web")
            .expect("indexed");
        assert_eq!(
            written.pin(),
            Some("n1"),
            "the index holds what was written"
        );
        assert_eq!(held_status(&store).schedule_count, 1);

        let mut other = web_pod(2);
        other.metadata.owner_references = None;
        other.metadata.name = Some("lone".into());
        writer.enqueue(&other, "n3");
        let lone = BindingLookup::get(writer.as_ref(), "ns", "pod-lone").expect("read");
        assert_eq!(lone.pin(), Some("n3"), "a binding not created yet");
    }

    /// A replica of a Deployment of many: a UID and node name as long as real ones.
    fn replica(i: usize, node: &str, bound: Option<jiff::Timestamp>) -> Arc<Pod> {
        let mut pod = web_pod(i);
        pod.metadata.uid = Some(format!("{i:08x}-1b4e-4f7a-9c1d-5e6f7a8b9c0d"));
        if let Some(at) = bound {
            pod.spec.get_or_insert_with(Default::default).node_name = Some(node.into());
            pod.status = Some(
                serde_json::from_value(serde_json::json!({"conditions": [
                    {"type": "PodScheduled", "status": "True", "lastTransitionTime": at}]}))
                .expect("status"),
            );
        }
        Arc::new(pod)
    }

    fn ec2_node(generation: usize, i: usize) -> String {
        format!(
            "ip-10-{generation}-{}-{}.eu-west-1.compute.internal",
            i / 250,
            i % 250
        )
    }

    /// A Deployment of 20,000 replicas bound 100 a second over 500 nodes, then moved to new
    /// nodes: every status write stays well under etcd's limit, every bind is counted exactly
    /// once, a restart's reconcile counts exactly the binds whose writes were lost (no pod
    /// counted twice though most left `countedPods`), and the nodes long gone leave `nodeCount`
    /// with the counts kept consistent.
    #[tokio::test(start_paused = true)]
    async fn a_workload_of_twenty_thousand_replicas_keeps_exact_counts_well_under_the_limit() {
        const REPLICAS: usize = 20_000;
        const LOST: usize = 37;
        let store = empty_store();
        let view = Arc::new(View::default());
        *view.live_nodes.lock().expect("nodes") = (0..500).map(|i| ec2_node(0, i)).collect();
        let writer = Arc::new(unread_writer(&store).reading(view.clone()));
        let start = jiff::Timestamp::now() - jiff::SignedDuration::from_hours(1);
        let bound_at = |i: usize| {
            start + jiff::SignedDuration::from_millis(i64::try_from(i).expect("small") * 10)
        };
        let node_of = |i: usize| ec2_node(0, i % 500);

        // 100 binds a second; the watch brings each second's bind times a second later.
        for second in 0..REPLICAS / 100 {
            let wave = second * 100..(second + 1) * 100;
            futures::future::join_all(
                wave.clone()
                    .map(|i| (replica(i, "", None), node_of(i)))
                    .map(|(pod, node)| {
                        let writer = writer.clone();
                        async move { writer.record_bind(&pod, &node).await }
                    }),
            )
            .await;
            let mut bound = view.bound.lock().expect("bound");
            for i in wave {
                bound.insert(
                    replica(i, "", None).metadata.uid.clone().expect("uid"),
                    bound_at(i),
                );
            }
        }
        let status = held_status(&store);
        assert_eq!(status.schedule_count, 20_000, "each bind once");
        assert_eq!(status.node_count.values().sum::<i64>(), 20_000);
        assert!(status.counted_pods.len() <= crate::api::MAX_COUNTED_PODS);
        let largest = store.largest.load(std::sync::atomic::Ordering::SeqCst);
        println!("the largest of the binding's writes: {largest} bytes");
        assert!(
            largest < ETCD_LIMIT / 3,
            "the largest write, {largest} bytes, is well under etcd's limit"
        );

        // A restart: the last binds were made but their writes lost. The new leader's
        // reconcile reads every bound pod and counts exactly those.
        for i in REPLICAS..REPLICAS + LOST {
            let uid = replica(i, "", None).metadata.uid.clone().expect("uid");
            view.bound.lock().expect("bound").insert(uid, bound_at(i));
        }
        let index = Arc::new(BindingIndex::default());
        index.upsert(
            serde_json::from_value(
                store
                    .binding
                    .lock()
                    .expect("binding")
                    .clone()
                    .expect("held"),
            )
            .expect("a binding"),
        );
        let restarted = Arc::new(
            HistoryWriter::new(
                store_client(store.clone()),
                None,
                index,
                Arc::new(crate::sticky::workload::NoOwners),
                Arc::new(Metrics::default()),
                crate::gate::WriteGate::alone(),
            )
            .reading(view.clone()),
        );
        let bound_pods = (0..REPLICAS + LOST)
            .map(|i| replica(i, &node_of(i), Some(bound_at(i))))
            .collect();
        reconcile::record_missed_binds(restarted.clone(), bound_pods, reconcile::reads_all()).await;
        let status = held_status(&store);
        assert_eq!(
            status.schedule_count,
            (REPLICAS + LOST) as i64,
            "exactly the lost binds counted again"
        );

        // The cluster moves to new nodes: the old ones go, and their pods with them.
        {
            let mut gone = view.gone.lock().expect("gone");
            gone.extend(
                (0..REPLICAS + LOST)
                    .map(|i| replica(i, "", None).metadata.uid.clone().expect("uid")),
            );
            *view.live_nodes.lock().expect("nodes") = (0..500).map(|i| ec2_node(1, i)).collect();
        }
        let later = REPLICAS + LOST..REPLICAS + LOST + 200;
        for (wave, pods) in [later.start..later.start + 100, later.start + 100..later.end]
            .into_iter()
            .enumerate()
        {
            for i in pods {
                restarted
                    .record_bind(&replica(i, "", None), &ec2_node(1, i % 500))
                    .await;
            }
            if wave == 0 {
                // The old nodes have been seen gone; an hour later they leave nodeCount.
                tokio::time::advance(bounds::NODE_RETENTION + Duration::from_secs(1)).await;
            }
        }
        let status = held_status(&store);
        let total = (REPLICAS + LOST + 200) as i64;
        assert_eq!(status.schedule_count, total);
        assert_eq!(
            status.pruned_count,
            (REPLICAS + LOST) as i64,
            "the old nodes' binds"
        );
        assert!(
            status.node_count.keys().all(|n| n.starts_with("ip-10-1-")),
            "only the new nodes are left: {:?}",
            status.node_count.keys().take(5).collect::<Vec<_>>()
        );
        assert_eq!(
            status.node_count.values().sum::<i64>() + status.pruned_count,
            total
        );
        assert!(status.oddities().is_empty(), "{:?}", status.oddities());
        assert_eq!(
            status.counted_pods.len(),
            200,
            "only the live pods bound since"
        );
    }

    /// A status too large for the API server (etcd's limit, answered as a 500) is not retried
    /// for good while binds pile up: the write gives up at once, and says so in an event and
    /// in the binding's `HistoryRecorded` condition (written on the status as it stands, which
    /// fits); the next write that lands sets it True again.
    #[tokio::test(start_paused = true)]
    async fn a_status_too_large_for_the_api_server_is_not_retried_and_is_told_in_a_condition() {
        let store = empty_store();
        let writer = writer_for(&store);
        writer.record_bind(&web_pod(0), "n1").await;
        // The next write with binds is refused for its size, as etcd refuses a value past its
        // limit.
        *store.faults.lock().expect("faults") = vec!["too-large"];
        let written = tokio::time::timeout(
            Duration::from_secs(60),
            writer.record_bind(&web_pod(1), "n1"),
        )
        .await;
        assert!(
            written.is_ok(),
            "the write gave up instead of retrying for good"
        );
        let calls = store.calls.lock().expect("calls").clone();
        let puts = calls.iter().filter(|c| c.starts_with("PUT")).count();
        assert_eq!(
            puts, 3,
            "the first bind, the refused one, the condition: {calls:?}"
        );
        assert!(
            calls
                .iter()
                .any(|c| c.starts_with("POST /apis/events.k8s.io/v1/namespaces/ns/events")),
            "an event tells: {calls:?}"
        );
        let condition = |status: &StickyBindingStatus| {
            status
                .conditions
                .iter()
                .find(|c| c.type_ == "HistoryRecorded")
                .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()))
        };
        let status = held_status(&store);
        assert_eq!(status.schedule_count, 1, "the refused bind is not recorded");
        let (said, reason, message) = condition(&status).expect("HistoryRecorded");
        assert_eq!((said.as_str(), reason.as_str()), ("False", "TooLarge"));
        assert!(message.starts_with("status: too large"), "{message}");

        writer.record_bind(&web_pod(2), "n1").await;
        let status = held_status(&store);
        assert_eq!(status.schedule_count, 2);
        assert_eq!(
            condition(&status).map(|(s, r, _)| (s, r)),
            Some(("True".to_string(), "Recorded".to_string()))
        );
    }

    /// Status writes denied (403) for longer than DENIAL_PERSISTS: the denial is reported
    /// (what the profile condition and `tether_history_denied` read) while the bind waits,
    /// and cleared by the write that lands once RBAC allows it again.
    #[tokio::test(start_paused = true)]
    async fn a_denial_that_lasts_is_reported_and_cleared_by_the_write_that_lands() {
        let store = empty_store();
        *store.faults.lock().expect("faults") = vec!["denied"; 20];
        let writer = writer_for(&store);
        let denial = writer.denial().clone();
        let mut heard = denial.subscribe();
        let writing = tokio::spawn({
            let writer = writer.clone();
            async move { writer.record_bind(&web_pod(0), "n1").await }
        });
        let began = tokio::time::Instant::now();
        let why = tokio::time::timeout(Duration::from_secs(300), heard.wait_for(Option::is_some))
            .await
            .expect("reported")
            .expect("the denial lives")
            .clone();
        assert_eq!(why.as_deref(), Some("Forbidden"));
        assert!(
            began.elapsed() >= store::DENIAL_PERSISTS,
            "not at the first 403"
        );
        assert_eq!(held_status(&store).schedule_count, 0, "the bind waits");
        writing.await.expect("written");
        assert_eq!(denial.current(), None, "cleared by the write that landed");
        assert_eq!(held_status(&store).schedule_count, 1);
    }
}
