//! Small pieces several plugins share, as kube-scheduler's `plugins/helper` package holds them.

use k8s_openapi::api::core::v1::PersistentVolumeClaim;
use serde_json::Value;

use crate::k8s::volumes;
use crate::scheduler::framework::events::{self, EventObject, Hint};
use crate::scheduler::framework::pod_info::PodInfo;

use crate::scheduler::framework::NodeScore;
use crate::scheduler::framework::validation::{FieldErrors, FieldPath};

/// For the volume plugins: a claim added or changed is worth a retry when it is one the pod
/// names (`ephemeral_too`: the claims of its generic ephemeral volumes count as well).
pub fn after_claim_of_pod(
    pod: &PodInfo,
    old: Option<&EventObject>,
    new: Option<&EventObject>,
    ephemeral_too: bool,
) -> Hint {
    let Some(claim) = events::objects::<PersistentVolumeClaim>(old, new).1 else {
        return Hint::Queue;
    };
    if claim.metadata.namespace != pod.pod.metadata.namespace {
        return Hint::Skip;
    }
    let name = claim.metadata.name.as_deref().unwrap_or_default();
    events::queue_if(if ephemeral_too {
        volumes::pod_claims(&pod.pod).iter().any(|c| c.name == name)
    } else {
        volumes::pvc_claim_names(&pod.pod).any(|c| c == name)
    })
}

/// Accepts the args of a plugin that takes none: absent, `null` or `{}`. Anything else is an
/// error at `path`, so a typo in a profile is not silently ignored.
pub fn expect_no_args(
    plugin: &str,
    args: Option<&Value>,
    path: &FieldPath,
) -> Result<(), FieldErrors> {
    match args {
        None | Some(Value::Null) => Ok(()),
        Some(Value::Object(m)) if m.is_empty() => Ok(()),
        Some(_) => {
            let mut errs = FieldErrors::new();
            errs.push(path, format!("plugin {plugin} takes no args"));
            Err(errs)
        }
    }
}

/// Scales scores so the highest becomes `max_priority`, as kube-scheduler's
/// DefaultNormalizeScore: `reverse` turns the scale round (the highest raw score gets 0), and
/// when every score is 0 they all become `max_priority` if reversed and stay 0 otherwise.
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [NodeScore]) {
    let max_count = scores.iter().map(|s| s.score).max().unwrap_or(0).max(0);
    if max_count == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| s.score = max_priority);
        }
        return;
    }
    for s in scores.iter_mut() {
        let scaled = max_priority * s.score / max_count;
        s.score = if reverse {
            max_priority - scaled
        } else {
            scaled
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn no_args_accepts_only_absent_null_or_empty() {
        let cases = [
            ("absent", None, true),
            ("null", Some(json!(null)), true),
            ("empty object", Some(json!({})), true),
            ("a field", Some(json!({"x": 1})), false),
            ("not an object", Some(json!([1])), false),
        ];
        for (name, args, ok) in cases {
            let got = expect_no_args("P", args.as_ref(), &"pluginConfig[0].args".into());
            match got {
                Ok(()) => assert!(ok, "{name}"),
                Err(e) => {
                    assert!(!ok, "{name}");
                    assert_eq!(e.0[0].path, "pluginConfig[0].args", "{name}");
                    assert_eq!(e.0[0].message, "plugin P takes no args", "{name}");
                }
            }
        }
    }

    #[test]
    fn default_normalize_score_as_kube_scheduler() {
        let cases: Vec<(&str, bool, Vec<i64>, Vec<i64>)> = vec![
            (
                "scaled to the max",
                false,
                vec![2, 4, 11],
                vec![18, 36, 100],
            ),
            ("proportional", false, vec![0, 1, 2], vec![0, 50, 100]),
            ("reverse", true, vec![0, 1, 2], vec![100, 50, 0]),
            ("all zero stays zero", false, vec![0, 0], vec![0, 0]),
            ("all zero reversed is max", true, vec![0, 0], vec![100, 100]),
        ];
        for (name, reverse, raw, want) in cases {
            let mut scores: Vec<NodeScore> = raw
                .iter()
                .enumerate()
                .map(|(i, s)| NodeScore {
                    name: format!("n{i}"),
                    score: *s,
                })
                .collect();
            default_normalize_score(100, reverse, &mut scores);
            let got: Vec<i64> = scores.iter().map(|s| s.score).collect();
            assert_eq!(got, want, "{name}");
        }
    }
}
