//! Taints and tolerations, matched as `v1.Toleration.ToleratesTaint` matches them.

use k8s_openapi::api::core::v1::{Node, Taint, Toleration};

/// A node's `spec.taints` (none when unset).
pub fn of_node(node: &Node) -> &[Taint] {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_deref())
        .unwrap_or_default()
}

/// Whether a node is cordoned (`spec.unschedulable`): treated as carrying the
/// `node.kubernetes.io/unschedulable:NoSchedule` taint.
pub fn cordoned(node: &Node) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.unschedulable)
        .unwrap_or(false)
}

/// Whether a taint keeps pods off the node (NoSchedule) or evicts them (NoExecute): the taints
/// Filter checks; PreferNoSchedule only scores.
pub fn is_hard(taint: &Taint) -> bool {
    taint.effect == "NoSchedule" || taint.effect == "NoExecute"
}

/// Whether `toleration` tolerates `taint`: the effect matches (an empty effect tolerates every
/// effect), the key matches (an empty key with Exists tolerates every key), and with Equal (the
/// default operator) the values are equal.
pub fn tolerates(toleration: &Toleration, taint: &Taint) -> bool {
    let effect_ok = toleration
        .effect
        .as_deref()
        .is_none_or(|e| e.is_empty() || e == taint.effect);
    if !effect_ok {
        return false;
    }
    let key = toleration.key.as_deref().unwrap_or_default();
    if !key.is_empty() && key != taint.key {
        return false;
    }
    match toleration.operator.as_deref().unwrap_or("Equal") {
        "Exists" => true,
        "Equal" | "" => {
            !key.is_empty()
                && toleration.value.as_deref().unwrap_or_default()
                    == taint.value.as_deref().unwrap_or_default()
        }
        _ => false,
    }
}

/// The first taint, among those `relevant` selects, that no toleration tolerates.
pub fn find_untolerated<'a>(
    taints: &'a [Taint],
    tolerations: &[Toleration],
    relevant: impl Fn(&Taint) -> bool,
) -> Option<&'a Taint> {
    taints
        .iter()
        .filter(|t| relevant(t))
        .find(|t| !tolerations.iter().any(|tol| tolerates(tol, t)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(key: &str, value: &str, effect: &str) -> Taint {
        Taint {
            key: key.into(),
            value: (!value.is_empty()).then(|| value.into()),
            effect: effect.into(),
            time_added: None,
        }
    }

    fn tol(key: &str, op: &str, value: &str, effect: &str) -> Toleration {
        Toleration {
            key: (!key.is_empty()).then(|| key.into()),
            operator: (!op.is_empty()).then(|| op.into()),
            value: (!value.is_empty()).then(|| value.into()),
            effect: (!effect.is_empty()).then(|| effect.into()),
            toleration_seconds: None,
        }
    }

    #[test]
    fn tolerations_match_taints_as_kubernetes_does() {
        let t = taint("dedicated", "gpu", "NoSchedule");
        let cases = [
            (
                "equal key, value, effect",
                tol("dedicated", "Equal", "gpu", "NoSchedule"),
                true,
            ),
            (
                "default operator is Equal",
                tol("dedicated", "", "gpu", "NoSchedule"),
                true,
            ),
            (
                "other value",
                tol("dedicated", "Equal", "cpu", "NoSchedule"),
                false,
            ),
            (
                "other effect",
                tol("dedicated", "Equal", "gpu", "NoExecute"),
                false,
            ),
            (
                "empty effect tolerates any effect",
                tol("dedicated", "Equal", "gpu", ""),
                true,
            ),
            (
                "Exists ignores the value",
                tol("dedicated", "Exists", "", "NoSchedule"),
                true,
            ),
            (
                "empty key with Exists tolerates everything",
                tol("", "Exists", "", ""),
                true,
            ),
            ("other key", tol("team", "Exists", "", ""), false),
            (
                "empty key with Equal tolerates nothing",
                tol("", "Equal", "gpu", ""),
                false,
            ),
        ];
        for (name, toleration, want) in cases {
            assert_eq!(tolerates(&toleration, &t), want, "{name}");
        }
    }

    #[test]
    fn find_untolerated_honours_the_filter() {
        let taints = [
            taint("a", "", "PreferNoSchedule"),
            taint("b", "", "NoSchedule"),
        ];
        let hard = |t: &Taint| t.effect == "NoSchedule" || t.effect == "NoExecute";
        assert_eq!(
            find_untolerated(&taints, &[], hard).map(|t| t.key.as_str()),
            Some("b")
        );
        assert_eq!(
            find_untolerated(&taints, &[tol("b", "Exists", "", "")], hard),
            None
        );
    }
}
