//! Node selection as a pod states it: `spec.nodeSelector` and node affinity terms
//! (matchExpressions over labels, matchFields over `metadata.name`, In/NotIn/Exists/
//! DoesNotExist/Gt/Lt), matched as kube-scheduler's component-helpers match them.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, Pod,
};

/// One requirement on a node label or field.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Op {
    In(Vec<String>),
    NotIn(Vec<String>),
    Exists,
    DoesNotExist,
    Gt(i64),
    Lt(i64),
}

/// Why a node selector term does not parse, naming the requirement's key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum NodeSelectorError {
    #[error("{key}: operator {operator} needs values")]
    MissingValues { key: String, operator: String },
    #[error("{key}: operator {operator} needs exactly one value")]
    NeedsOneValue { key: String, operator: String },
    #[error("{key}: {value:?} is not an integer")]
    NotAnInteger { key: String, value: String },
    #[error("{key}: {operator:?} is not a valid node selector operator here")]
    InvalidOperator { key: String, operator: String },
    #[error("{key}: matchFields supports only metadata.name")]
    UnsupportedField { key: String },
}

#[derive(Clone, Debug, PartialEq, Eq)]
struct Requirement {
    key: String,
    op: Op,
}

impl Requirement {
    fn parse(r: &NodeSelectorRequirement, field: bool) -> Result<Self, NodeSelectorError> {
        let values = r.values.clone().unwrap_or_default();
        let key = || r.key.clone();
        let operator = || r.operator.clone();
        let single_int = |values: &[String]| -> Result<i64, NodeSelectorError> {
            match values {
                [v] => v.parse().map_err(|_| NodeSelectorError::NotAnInteger {
                    key: key(),
                    value: v.clone(),
                }),
                _ => Err(NodeSelectorError::NeedsOneValue {
                    key: key(),
                    operator: operator(),
                }),
            }
        };
        let op = match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(NodeSelectorError::MissingValues {
                    key: key(),
                    operator: operator(),
                });
            }
            "In" => Op::In(values),
            "NotIn" => Op::NotIn(values),
            "Exists" if !field => Op::Exists,
            "DoesNotExist" if !field => Op::DoesNotExist,
            "Gt" if !field => Op::Gt(single_int(&values)?),
            "Lt" if !field => Op::Lt(single_int(&values)?),
            _ => {
                return Err(NodeSelectorError::InvalidOperator {
                    key: key(),
                    operator: operator(),
                });
            }
        };
        if field && r.key != "metadata.name" {
            return Err(NodeSelectorError::UnsupportedField { key: key() });
        }
        Ok(Requirement {
            key: r.key.clone(),
            op,
        })
    }

    fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Op::In(vs), Some(v)) => vs.iter().any(|x| x == v),
            (Op::In(_), None) => false,
            (Op::NotIn(vs), Some(v)) => !vs.iter().any(|x| x == v),
            (Op::NotIn(_), None) => true,
            (Op::Exists, v) => v.is_some(),
            (Op::DoesNotExist, v) => v.is_none(),
            (Op::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x > *n),
            (Op::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x < *n),
            (Op::Gt(_) | Op::Lt(_), None) => false,
        }
    }
}

/// A node selector term: all its requirements must hold. A term with none matches no node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
}

impl Term {
    pub fn parse(term: &NodeSelectorTerm) -> Result<Self, NodeSelectorError> {
        let labels = term
            .match_expressions
            .iter()
            .flatten()
            .map(|r| Requirement::parse(r, false))
            .collect::<Result<_, _>>()?;
        let fields = term
            .match_fields
            .iter()
            .flatten()
            .map(|r| Requirement::parse(r, true))
            .collect::<Result<_, _>>()?;
        Ok(Term { labels, fields })
    }

    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.labels.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.labels
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self.fields.iter().all(|r| r.matches(Some(node_name)))
    }

    /// The node names this term allows, when it pins them with `metadata.name In (...)`.
    fn pinned_names(&self) -> Option<Vec<String>> {
        self.fields.iter().find_map(|r| match &r.op {
            Op::In(names) => Some(names.clone()),
            _ => None,
        })
    }
}

/// Terms of which at least one must hold (a NodeSelector's nodeSelectorTerms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terms(Vec<Term>);

impl Terms {
    pub fn parse(selector: &NodeSelector) -> Result<Self, NodeSelectorError> {
        selector
            .node_selector_terms
            .iter()
            .map(Term::parse)
            .collect::<Result<_, _>>()
            .map(Terms)
    }

    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().any(|t| t.matches(node_name, labels))
    }

    /// The only node names these terms can match, when every term pins names with
    /// `metadata.name In`: the union of those names. `None` when any term leaves it open.
    pub fn pinned_names(&self) -> Option<Vec<String>> {
        let mut all = Vec::new();
        for t in &self.0 {
            all.extend(t.pinned_names()?);
        }
        Some(all)
    }
}

/// What a pod requires of its node: `spec.nodeSelector` and the required node affinity.
/// Both must hold, as kube-scheduler's RequiredNodeAffinity checks them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequiredNodeAffinity {
    node_selector: BTreeMap<String, String>,
    required: Option<Terms>,
}

impl RequiredNodeAffinity {
    /// Reads the pod's requirements; an invalid term is an error that names it.
    pub fn from_pod(pod: &Pod) -> Result<Self, NodeSelectorError> {
        let spec = pod.spec.as_ref();
        let node_selector = spec
            .and_then(|s| s.node_selector.clone())
            .unwrap_or_default();
        let required = spec
            .and_then(|s| s.affinity.as_ref())
            .and_then(|a| a.node_affinity.as_ref())
            .and_then(|na| {
                na.required_during_scheduling_ignored_during_execution
                    .as_ref()
            })
            .map(Terms::parse)
            .transpose()?;
        Ok(RequiredNodeAffinity {
            node_selector,
            required,
        })
    }

    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.required.is_none()
    }

    pub fn required_terms(&self) -> Option<&Terms> {
        self.required.as_ref()
    }

    pub fn matches_labels(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self
                .required
                .as_ref()
                .is_none_or(|t| t.matches(node_name, labels))
    }

    pub fn matches(&self, node: &Node) -> bool {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        let name = node.metadata.name.as_deref().unwrap_or_default();
        self.matches_labels(name, node.metadata.labels.as_ref().unwrap_or(&EMPTY))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scheduler::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::{Affinity, NodeAffinity};

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: (!values.is_empty()).then(|| values.iter().map(|v| v.to_string()).collect()),
        }
    }

    fn with_terms(terms: Vec<NodeSelectorTerm>) -> Pod {
        PodBuilder::new("p")
            .affinity(Affinity {
                node_affinity: Some(NodeAffinity {
                    required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                        node_selector_terms: terms,
                    }),
                    ..Default::default()
                }),
                ..Default::default()
            })
            .build()
    }

    fn expr_term(exprs: Vec<NodeSelectorRequirement>) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_expressions: Some(exprs),
            match_fields: None,
        }
    }

    #[test]
    fn required_node_affinity_matches_as_kube_scheduler() {
        let node = NodeBuilder::new("n1")
            .label("zone", "a")
            .label("gpus", "4")
            .build();
        let cases: Vec<(&str, Pod, bool)> = vec![
            ("no requirements", PodBuilder::new("p").build(), true),
            (
                "nodeSelector match",
                PodBuilder::new("p").node_selector("zone", "a").build(),
                true,
            ),
            (
                "nodeSelector mismatch",
                PodBuilder::new("p").node_selector("zone", "b").build(),
                false,
            ),
            (
                "In",
                with_terms(vec![expr_term(vec![req("zone", "In", &["a", "b"])])]),
                true,
            ),
            (
                "NotIn",
                with_terms(vec![expr_term(vec![req("zone", "NotIn", &["a"])])]),
                false,
            ),
            (
                "Exists",
                with_terms(vec![expr_term(vec![req("zone", "Exists", &[])])]),
                true,
            ),
            (
                "DoesNotExist",
                with_terms(vec![expr_term(vec![req("zone", "DoesNotExist", &[])])]),
                false,
            ),
            (
                "Gt",
                with_terms(vec![expr_term(vec![req("gpus", "Gt", &["3"])])]),
                true,
            ),
            (
                "Lt",
                with_terms(vec![expr_term(vec![req("gpus", "Lt", &["3"])])]),
                false,
            ),
            (
                "Gt on a missing label",
                with_terms(vec![expr_term(vec![req("cores", "Gt", &["1"])])]),
                false,
            ),
            (
                "terms are ORed",
                with_terms(vec![
                    expr_term(vec![req("zone", "In", &["b"])]),
                    expr_term(vec![req("zone", "In", &["a"])]),
                ]),
                true,
            ),
            (
                "expressions in a term are ANDed",
                with_terms(vec![expr_term(vec![
                    req("zone", "In", &["a"]),
                    req("gpus", "In", &["8"]),
                ])]),
                false,
            ),
            (
                "an empty term matches nothing",
                with_terms(vec![NodeSelectorTerm::default()]),
                false,
            ),
            (
                "matchFields metadata.name",
                with_terms(vec![NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![req("metadata.name", "In", &["n1"])]),
                }]),
                true,
            ),
            (
                "matchFields other name",
                with_terms(vec![NodeSelectorTerm {
                    match_expressions: None,
                    match_fields: Some(vec![req("metadata.name", "In", &["n2"])]),
                }]),
                false,
            ),
        ];
        for (name, pod, want) in cases {
            let affinity = RequiredNodeAffinity::from_pod(&pod).expect(name);
            assert_eq!(affinity.matches(&node), want, "{name}");
        }
    }

    #[test]
    fn invalid_terms_are_errors() {
        let bad = [
            with_terms(vec![expr_term(vec![req("zone", "Near", &["a"])])]),
            with_terms(vec![expr_term(vec![req("gpus", "Gt", &["x"])])]),
            with_terms(vec![expr_term(vec![req("gpus", "Gt", &["1", "2"])])]),
            with_terms(vec![NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![req("metadata.uid", "In", &["x"])]),
            }]),
        ];
        for pod in bad {
            assert!(RequiredNodeAffinity::from_pod(&pod).is_err());
        }
    }

    #[test]
    fn pinned_names_come_from_match_fields() {
        let pod = with_terms(vec![NodeSelectorTerm {
            match_expressions: None,
            match_fields: Some(vec![req("metadata.name", "In", &["n1", "n2"])]),
        }]);
        let affinity = RequiredNodeAffinity::from_pod(&pod).expect("valid");
        assert_eq!(
            affinity.required_terms().and_then(Terms::pinned_names),
            Some(vec!["n1".into(), "n2".into()])
        );
        let open = with_terms(vec![expr_term(vec![req("zone", "In", &["a"])])]);
        let affinity = RequiredNodeAffinity::from_pod(&open).expect("valid");
        assert_eq!(
            affinity.required_terms().and_then(Terms::pinned_names),
            None
        );
    }
}
