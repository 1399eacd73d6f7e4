//! Label selectors, as `metav1.LabelSelector` and node selector terms match labels.
//!
//! Not kube's `Selector` (`kube::core::Selector`), on purpose: it differs from
//! `metav1.LabelSelectorAsSelector` where scheduling decisions and messages depend on it. It
//! accepts `In`/`NotIn` with an empty `values` (then matching nothing, or everything) where the
//! API machinery refuses the selector; it has no selector that matches nothing (a nil selector
//! in affinity terms and spread constraints); and its errors do not say which key and operator
//! are at fault, which a profile's `Ready=False` message must name.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

/// Why a LabelSelector does not parse, as `metav1.LabelSelectorAsSelector` reports it.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum SelectorError {
    #[error("{key}: values must be non-empty for operator {operator}")]
    MissingValues { key: String, operator: String },
    #[error("{key}: {operator:?} is not a valid label selector operator")]
    UnknownOperator { key: String, operator: String },
}

/// One requirement of a selector.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Requirement {
    In(String, Vec<String>),
    NotIn(String, Vec<String>),
    Exists(String),
    DoesNotExist(String),
}

impl Requirement {
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        match self {
            Requirement::In(k, vs) => labels.get(k).is_some_and(|v| vs.contains(v)),
            Requirement::NotIn(k, vs) => labels.get(k).is_none_or(|v| !vs.contains(v)),
            Requirement::Exists(k) => labels.contains_key(k),
            Requirement::DoesNotExist(k) => !labels.contains_key(k),
        }
    }
}

/// A parsed label selector. An empty selector matches everything; [`Selector::nothing`] matches
/// nothing (what a missing selector means in affinity terms and topology spread constraints).
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct Selector {
    requirements: Vec<Requirement>,
    matches_nothing: bool,
}

impl Selector {
    pub fn everything() -> Self {
        Selector::default()
    }

    pub fn nothing() -> Self {
        Selector {
            requirements: Vec::new(),
            matches_nothing: true,
        }
    }

    /// Parses a LabelSelector; `None` gives [`Selector::nothing`]. An unknown operator or an
    /// In/NotIn without values is an error, as `metav1.LabelSelectorAsSelector` reports it.
    pub fn from_label_selector(selector: Option<&LabelSelector>) -> Result<Self, SelectorError> {
        let Some(selector) = selector else {
            return Ok(Selector::nothing());
        };
        let mut requirements = Vec::new();
        for (k, v) in selector.match_labels.iter().flatten() {
            requirements.push(Requirement::In(k.clone(), vec![v.clone()]));
        }
        for expr in selector.match_expressions.iter().flatten() {
            let values = expr.values.clone().unwrap_or_default();
            let key = expr.key.clone();
            requirements.push(match expr.operator.as_str() {
                "In" | "NotIn" if values.is_empty() => {
                    return Err(SelectorError::MissingValues {
                        key,
                        operator: expr.operator.clone(),
                    });
                }
                "In" => Requirement::In(key, values),
                "NotIn" => Requirement::NotIn(key, values),
                "Exists" => Requirement::Exists(key),
                "DoesNotExist" => Requirement::DoesNotExist(key),
                op => {
                    return Err(SelectorError::UnknownOperator {
                        key,
                        operator: op.to_string(),
                    });
                }
            });
        }
        Ok(Selector {
            requirements,
            matches_nothing: false,
        })
    }

    /// A selector from plain `key=value` pairs (a nodeSelector, matchLabels).
    pub fn from_map(labels: &BTreeMap<String, String>) -> Self {
        Selector {
            requirements: labels
                .iter()
                .map(|(k, v)| Requirement::In(k.clone(), vec![v.clone()]))
                .collect(),
            matches_nothing: false,
        }
    }

    /// Adds a requirement (used to merge matchLabelKeys into a topology spread selector).
    pub fn add(&mut self, requirement: Requirement) {
        self.requirements.push(requirement);
    }

    /// Adds every requirement of `other` (both must then hold).
    pub fn merge(&mut self, other: &Selector) {
        self.matches_nothing |= other.matches_nothing;
        self.requirements.extend(other.requirements.iter().cloned());
    }

    pub fn is_empty(&self) -> bool {
        !self.matches_nothing && self.requirements.is_empty()
    }

    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        !self.matches_nothing && self.requirements.iter().all(|r| r.matches(labels))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    #[test]
    fn selectors_match_as_kubernetes_does() {
        let l = labels(&[("app", "web"), ("tier", "front")]);
        let sel = |ls: LabelSelector| Selector::from_label_selector(Some(&ls)).expect("valid");
        assert!(
            sel(LabelSelector::default()).matches(&l),
            "empty selects everything"
        );
        assert!(
            !Selector::from_label_selector(None)
                .expect("valid")
                .matches(&l),
            "nil selects nothing"
        );
        let in_ = LabelSelector {
            match_expressions: Some(vec![expr("app", "In", &["web", "api"])]),
            ..Default::default()
        };
        assert!(sel(in_).matches(&l));
        let not_in = LabelSelector {
            match_expressions: Some(vec![expr("app", "NotIn", &["web"])]),
            ..Default::default()
        };
        assert!(!sel(not_in).matches(&l));
        let not_in_missing = LabelSelector {
            match_expressions: Some(vec![expr("zone", "NotIn", &["a"])]),
            ..Default::default()
        };
        assert!(
            sel(not_in_missing).matches(&l),
            "NotIn matches a missing key"
        );
        let exists = LabelSelector {
            match_expressions: Some(vec![expr("tier", "Exists", &[])]),
            ..Default::default()
        };
        assert!(sel(exists).matches(&l));
        let dne = LabelSelector {
            match_expressions: Some(vec![expr("tier", "DoesNotExist", &[])]),
            ..Default::default()
        };
        assert!(!sel(dne).matches(&l));
        let both = LabelSelector {
            match_labels: Some(labels(&[("app", "web")])),
            match_expressions: Some(vec![expr("tier", "In", &["back"])]),
        };
        assert!(!sel(both).matches(&l), "all requirements must hold");
    }

    #[test]
    fn invalid_selectors_are_errors() {
        let bad_op = LabelSelector {
            match_expressions: Some(vec![expr("a", "Near", &["b"])]),
            ..Default::default()
        };
        assert!(Selector::from_label_selector(Some(&bad_op)).is_err());
        let no_values = LabelSelector {
            match_expressions: Some(vec![expr("a", "In", &[])]),
            ..Default::default()
        };
        assert!(Selector::from_label_selector(Some(&no_values)).is_err());
    }
}
