//! The PodGroup condition writer: the `PodGroupInitiallyScheduled` writes the group cycles ask
//! for, written in order by one task that the reports start with themselves.

use k8s_openapi::api::scheduling::v1beta1::PodGroup;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{Condition, Time};
use kube::api::{Api, Patch, PatchParams};

use crate::gate::Write;
use crate::scheduler::informers::pod_groups::composite::COMPOSITE_INITIALLY_SCHEDULED;

/// The condition type the group cycle sets on a Workload API PodGroup.
pub const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";

/// Starts the writer on the current tokio runtime; the writes asked for through the sender are
/// written in order, each fenced by `gate`. The task ends when the last sender is dropped.
pub fn start(
    client: kube::Client,
    gate: crate::gate::WriteGate,
) -> tokio::sync::mpsc::Sender<ConditionWrite> {
    let (tx, rx) = tokio::sync::mpsc::channel(CONDITIONS_QUEUED);
    tokio::spawn(write_conditions(client, gate, rx));
    tx
}

/// A `PodGroupInitiallyScheduled` write the group cycle asks for.
pub struct ConditionWrite {
    pub namespace: String,
    pub name: String,
    pub status: &'static str,
    pub reason: &'static str,
    pub message: String,
    /// The UID of the group the cycle placed; [`Self::keep_true`] writes only to that group.
    pub uid: Option<String>,
    /// kube-scheduler 1.38's rule: a condition that is True is never written again, and a group
    /// deleted and made anew under the same name (another UID) is not written to by a cycle of
    /// the old one. 1.36 and 1.37 write True again when its generation, reason or message moved.
    pub keep_true: bool,
    /// Whether the group is a CompositePodGroup (its condition is
    /// `CompositePodGroupInitiallyScheduled`), else a PodGroup.
    pub composite: bool,
}

/// What a condition write reads of the group before it patches.
struct Read {
    uid: Option<String>,
    generation: Option<i64>,
    resource_version: Option<String>,
    conditions: Vec<Condition>,
}

/// Reads the group `write` is for (None: not found).
async fn read(client: &kube::Client, write: &ConditionWrite) -> Result<Option<Read>, kube::Error> {
    if write.composite {
        let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
            client.clone(),
            &write.namespace,
            &crate::scheduler::informers::pod_groups::composite::composite_resource(),
        );
        return Ok(api.get_opt(&write.name).await?.map(|g| Read {
            uid: g.metadata.uid,
            generation: g.metadata.generation,
            resource_version: g.metadata.resource_version,
            conditions: serde_json::from_value(g.data["status"]["conditions"].clone())
                .unwrap_or_default(),
        }));
    }
    let api: Api<PodGroup> = Api::namespaced(client.clone(), &write.namespace);
    Ok(api.get_opt(&write.name).await?.map(|g| Read {
        uid: g.metadata.uid,
        generation: g.metadata.generation,
        resource_version: g.metadata.resource_version,
        conditions: g.status.and_then(|s| s.conditions).unwrap_or_default(),
    }))
}

/// How many times a write is tried when the PodGroup changed between its read and the patch.
const CONDITION_TRIES: usize = 3;

/// PodGroup condition writes waiting at most; past that a write is dropped (the group's next
/// attempt asks again).
pub const CONDITIONS_QUEUED: usize = 1024;

/// Writes the conditions asked for, one after another: each reads the PodGroup, sets the
/// condition on what it read, and patches with that read's resourceVersion (tried again on a
/// conflict).
pub async fn write_conditions(
    client: kube::Client,
    gate: crate::gate::WriteGate,
    mut asked: tokio::sync::mpsc::Receiver<ConditionWrite>,
) {
    while let Some(write) = asked.recv().await {
        let group = format!("{}/{}", write.namespace, write.name);
        let condition_type = if write.composite {
            COMPOSITE_INITIALLY_SCHEDULED
        } else {
            INITIALLY_SCHEDULED
        };
        for _ in 0..CONDITION_TRIES {
            let current = match read(&client, &write).await {
                Ok(Some(current))
                    if write.keep_true && write.uid.is_some() && current.uid != write.uid =>
                {
                    tracing::debug!(group = %group, "the group was made anew since the cycle; its condition is not written");
                    break;
                }
                Ok(Some(current)) => current,
                Ok(None) => break,
                Err(e) => {
                    tracing::debug!(group = %group, error = %e, "could not read the group; its condition is not written");
                    break;
                }
            };
            let Some(conditions) = with_condition_of(
                condition_type,
                current.conditions,
                current.generation,
                write.status,
                write.reason,
                &write.message,
                write.keep_true,
            ) else {
                break;
            };
            let patch = serde_json::json!({
                "metadata": {"resourceVersion": current.resource_version},
                "status": {"conditions": conditions},
            });
            let params = PatchParams::default();
            let patched = async {
                if write.composite {
                    let api: Api<kube::api::DynamicObject> = Api::namespaced_with(
                        client.clone(),
                        &write.namespace,
                        &crate::scheduler::informers::pod_groups::composite::composite_resource(),
                    );
                    api.patch_status(&write.name, &params, &Patch::Merge(&patch))
                        .await
                        .map(drop)
                } else {
                    let api: Api<PodGroup> = Api::namespaced(client.clone(), &write.namespace);
                    api.patch_status(&write.name, &params, &Patch::Merge(&patch))
                        .await
                        .map(drop)
                }
            };
            let written = gate.write(Write::PodGroupStatus, patched).await;
            match written {
                Ok(Ok(_)) => break,
                Ok(Err(kube::Error::Api(e))) if e.code == 409 => continue,
                Ok(Err(e)) => {
                    tracing::debug!(group = %group, error = %e, "could not write the PodGroup's condition");
                    break;
                }
                Err(refused) => {
                    tracing::debug!(group = %group, error = %refused, "the PodGroup's condition is not written");
                    break;
                }
            }
        }
    }
}

/// `conditions` with [`INITIALLY_SCHEDULED`] set to `status`/`reason`/`message`, or None when
/// nothing is to be written: it is True already and would not be (or, `keep_true`, is True at
/// all), or it says the same for the same generation. The transition time moves only when the
/// status does.
pub fn with_condition(
    conditions: Vec<Condition>,
    generation: Option<i64>,
    status: &str,
    reason: &str,
    message: &str,
    keep_true: bool,
) -> Option<Vec<Condition>> {
    with_condition_of(
        INITIALLY_SCHEDULED,
        conditions,
        generation,
        status,
        reason,
        message,
        keep_true,
    )
}

/// [`with_condition`] for the condition `condition_type`.
pub fn with_condition_of(
    condition_type: &str,
    mut conditions: Vec<Condition>,
    generation: Option<i64>,
    status: &str,
    reason: &str,
    message: &str,
    keep_true: bool,
) -> Option<Vec<Condition>> {
    let now = Time(jiff::Timestamp::now());
    match conditions.iter_mut().find(|c| c.type_ == condition_type) {
        Some(c) if c.status == "True" && (keep_true || status != "True") => None,
        Some(c)
            if c.status == status
                && c.reason == reason
                && c.message == message
                && c.observed_generation == generation =>
        {
            None
        }
        Some(c) => {
            if c.status != status {
                c.last_transition_time = now;
            }
            c.status = status.into();
            c.reason = reason.into();
            c.message = message.into();
            c.observed_generation = generation;
            Some(conditions)
        }
        None => {
            conditions.push(Condition {
                type_: condition_type.into(),
                status: status.into(),
                reason: reason.into(),
                message: message.into(),
                observed_generation: generation,
                last_transition_time: now,
            });
            Some(conditions)
        }
    }
}
