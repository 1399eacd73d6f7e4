//! ExplainRequest: a question to the scheduler, asked by creating an object with the asker's own
//! kubeconfig, and answered by tether in its status.

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use kube::{CustomResource, KubeSchema};
use serde::{Deserialize, Serialize};

/// Ask the leader why a pod went where it went or what keeps it pending (`spec.pod`), or, without
/// a pod, why every pending pod of this namespace is pending. tether answers in `status` within
/// seconds and deletes the request 10 minutes after answering (an hour after it was made when it
/// could not be answered). `tether explain` and `tether pending` create one, read the answer
/// and delete it.
///
/// The admission policy `tether-explainrequests` admits a request only when `spec.requester`
/// is who creates it, and an answer only from tether; tether then answers only what that user
/// may read: `get` on the pod and `list` on nodes (the answer names every node, its taints and
/// what is requested on it), or `list` on pods for a namespace's pending pods. One user has at
/// most 16 requests at a time (past that, they are refused), and users take turns.
#[derive(CustomResource, KubeSchema, Serialize, Deserialize, Clone, Debug, PartialEq)]
#[kube(
    group = "tether.dev",
    version = "v1alpha1",
    kind = "ExplainRequest",
    doc = "A question to tether's scheduler (why a pod went where it went, or why this namespace's pods are pending), answered in status.",
    namespaced,
    shortname = "xr",
    category = "tether",
    status = "ExplainRequestStatus",
    printcolumn = r#"{"name":"Pod","type":"string","jsonPath":".spec.pod","description":"The pod asked about (none: the namespace's pending pods)"}"#,
    printcolumn = r#"{"name":"Answer","type":"string","jsonPath":".status.summary","description":"The answer in one line"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = kube::core::Rule::new("self == oldSelf").message("an ExplainRequest's spec cannot be changed: make a new one"))]
pub struct ExplainRequestSpec {
    /// The pod to explain, in the request's namespace. Leave it out to ask why every pending
    /// pod of the namespace is pending, grouped by what blocks them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(
        length(min = 1, max = 253),
        regex(pattern = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
    )]
    pub pod: Option<String>,

    /// Who asks: the creator's own user name and groups, as `kubectl auth whoami` shows them.
    /// The admission policy `tether-explainrequests` refuses a request whose requester is not
    /// its creator.
    pub requester: Requester,
}

/// The user a request is answered for.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, KubeSchema, Default)]
#[serde(rename_all = "camelCase")]
pub struct Requester {
    /// The user name the API server authenticated.
    #[schemars(length(min = 1, max = 1024))]
    pub username: String,
    /// The user's groups, as the API server authenticated them (any order).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 128), inner(length(max = 1024)))]
    pub groups: Vec<String>,
    /// The user's uid, when the authenticator gives one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 1024))]
    pub uid: Option<String>,
    /// What else the authenticator said of the user (a token's credential id, its scopes), as
    /// the API server has it: authorizers may read it, so tether asks with it too.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    #[x_kube(validation = kube::core::Rule::new("size(self) <= 32").message("at most 32 extra keys"))]
    pub extra: std::collections::BTreeMap<String, Vec<String>>,
}

/// tether's answer. Set once; the request is not answered again.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ExplainRequestStatus {
    /// When tether answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub answered_at: Option<Time>,

    /// The answer in one line: the node the pod went to, what keeps it pending, how many pods
    /// are pending, or why the question was refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<String>,

    /// Why the question was not answered (the asker may not read the pod, the pod does not
    /// exist, the scheduler is starting…), as the HTTP status tether would have answered
    /// (`403`, `404`, `503`) and its message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refused: Option<Refusal>,

    /// The explanation of the pod: what `tether explain -o json` prints (kind Explanation).
    /// At most 256 KiB: on a large cluster the per-node verdicts past that are left out and
    /// counted in `passingOmitted`, `rejectedOmitted` and `scoresOmitted`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::preserve_unknown_object")]
    pub explanation: Option<serde_json::Value>,

    /// The namespace's pending pods grouped by blocker: what `tether pending -o json` prints
    /// (kind PendingSummary), at most 256 KiB (the smallest groups past that are counted in
    /// `groupsOmitted`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "super::schema::preserve_unknown_object")]
    pub pending: Option<serde_json::Value>,
}

/// A question tether did not answer, and why.
#[derive(Serialize, Deserialize, Clone, Debug, PartialEq, Eq, Default, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Refusal {
    /// The HTTP status of the refusal: 403 (the requester may not read it), 404 (no such
    /// pod), 422 (it cannot be explained), 429 (the requester has too many requests), 503 (try
    /// again).
    #[schemars(range(min = 100, max = 599))]
    pub code: i32,
    /// What was refused and why.
    pub message: String,
}

impl ExplainRequest {
    /// Whether tether answered it.
    pub fn answered(&self) -> bool {
        self.status
            .as_ref()
            .is_some_and(|s| s.answered_at.is_some())
    }
}
