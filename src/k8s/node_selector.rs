//! Node selection as a pod states it: `spec.nodeSelector` and node affinity terms
//! (matchExpressions over labels, matchFields over `metadata.name`, In/NotIn/Exists/
//! DoesNotExist/Gt/Lt), matched as kube-scheduler's component-helpers match them.
//!
//! A pod's required terms are parsed term by term, as upstream's LazyErrorNodeSelector: a
//! term that does not parse (an invalid label value, which the API server lets through) matches
//! no node, and the other terms still count.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Node, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};

use super::names;
use crate::k8s::pod::Pod;

mod ids;
pub use ids::{IdMatcher, LabelIds};

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
    #[error("{key}: values must be empty for operator {operator}")]
    UnexpectedValues { key: String, operator: String },
    #[error("{key}: the key is not a qualified name: {why}")]
    InvalidKey { key: String, why: String },
    #[error("{key}: {value:?} is not a valid label value")]
    InvalidValue { key: String, value: String },
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
        if field {
            // A field requirement (upstream's nodeSelectorRequirementsAsFieldSelector): In or
            // NotIn with exactly one value, on any key (only metadata.name has a value).
            let op = match (r.operator.as_str(), values.as_slice()) {
                ("In", [_]) => Op::In(values),
                ("NotIn", [_]) => Op::NotIn(values),
                ("In" | "NotIn", _) => {
                    return Err(NodeSelectorError::NeedsOneValue {
                        key: key(),
                        operator: operator(),
                    });
                }
                _ => {
                    return Err(NodeSelectorError::InvalidOperator {
                        key: key(),
                        operator: operator(),
                    });
                }
            };
            return Ok(Requirement { key: key(), op });
        }
        // A label requirement, checked as apimachinery's labels.NewRequirement.
        if let Err(why) = names::check_qualified_name(&r.key) {
            return Err(NodeSelectorError::InvalidKey {
                key: key(),
                why: why.to_string(),
            });
        }
        let op = match r.operator.as_str() {
            "In" | "NotIn" if values.is_empty() => {
                return Err(NodeSelectorError::MissingValues {
                    key: key(),
                    operator: operator(),
                });
            }
            "Exists" | "DoesNotExist" if !values.is_empty() => {
                return Err(NodeSelectorError::UnexpectedValues {
                    key: key(),
                    operator: operator(),
                });
            }
            "In" => Op::In(values.clone()),
            "NotIn" => Op::NotIn(values.clone()),
            "Exists" => Op::Exists,
            "DoesNotExist" => Op::DoesNotExist,
            "Gt" => Op::Gt(single_int(&values)?),
            "Lt" => Op::Lt(single_int(&values)?),
            _ => {
                return Err(NodeSelectorError::InvalidOperator {
                    key: key(),
                    operator: operator(),
                });
            }
        };
        if let Some(bad) = values.iter().find(|v| !names::is_label_value(v)) {
            return Err(NodeSelectorError::InvalidValue {
                key: key(),
                value: bad.clone(),
            });
        }
        Ok(Requirement { key: key(), op })
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

/// A node selector term: all its requirements must hold. A term with none matches no node,
/// and so does one that did not parse (kept as its error, as upstream keeps it).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Term {
    labels: Vec<Requirement>,
    fields: Vec<Requirement>,
    error: Option<NodeSelectorError>,
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
        Ok(Term {
            labels,
            fields,
            error: None,
        })
    }

    /// The term, or one that matches nothing when it does not parse.
    fn lenient(term: &NodeSelectorTerm) -> Self {
        Term::parse(term).unwrap_or_else(|e| Term {
            labels: Vec::new(),
            fields: Vec::new(),
            error: Some(e),
        })
    }

    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.error.is_some() || (self.labels.is_empty() && self.fields.is_empty()) {
            return false;
        }
        self.labels
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self
                .fields
                .iter()
                .all(|r| r.matches(Some(field_value(r, node_name))))
    }
}

/// A node's value for a field requirement: nodes have one field, `metadata.name`; another
/// key's value is empty.
fn field_value<'a>(r: &Requirement, node_name: &'a str) -> &'a str {
    if r.key == "metadata.name" {
        node_name
    } else {
        ""
    }
}

/// Terms of which at least one must hold (a NodeSelector's nodeSelectorTerms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Terms(Vec<Term>);

impl Terms {
    /// Every term must parse (a profile's addedAffinity, checked when the profile is).
    pub fn parse(selector: &NodeSelector) -> Result<Self, NodeSelectorError> {
        selector
            .node_selector_terms
            .iter()
            .map(Term::parse)
            .collect::<Result<_, _>>()
            .map(Terms)
    }

    /// Term by term: one that does not parse matches no node, the others still do (a pod's
    /// required affinity, as upstream's LazyErrorNodeSelector).
    pub fn lenient(selector: &NodeSelector) -> Self {
        Terms(
            selector
                .node_selector_terms
                .iter()
                .map(Term::lenient)
                .collect(),
        )
    }

    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.0.iter().any(|t| t.matches(node_name, labels))
    }

    /// Why the terms that did not parse did not, if any did not.
    pub fn errors(&self) -> impl Iterator<Item = &NodeSelectorError> {
        self.0.iter().filter_map(|t| t.error.as_ref())
    }
}

/// The only node names `selector` can match, read from its terms as upstream's NodeAffinity
/// PreFilter reads them: a term's `metadata.name In` requirements intersected, the terms'
/// names united; `None` when a term names none (any node may match it). An empty set means the
/// terms conflict and no node can match.
pub fn pinned_names(selector: &NodeSelector) -> Option<std::collections::BTreeSet<String>> {
    use std::collections::BTreeSet;
    let mut all = BTreeSet::new();
    for term in &selector.node_selector_terms {
        let mut names: Option<BTreeSet<String>> = None;
        for r in term.match_fields.iter().flatten() {
            if r.key == "metadata.name" && r.operator == "In" {
                let these: BTreeSet<String> = r.values.iter().flatten().cloned().collect();
                names = Some(match names {
                    None => these,
                    Some(before) => before.intersection(&these).cloned().collect(),
                });
            }
        }
        all.extend(names?);
    }
    Some(all)
}

/// What a pod requires of its node: `spec.nodeSelector` and the required node affinity.
/// Both must hold, as kube-scheduler's RequiredNodeAffinity checks them.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RequiredNodeAffinity {
    node_selector: BTreeMap<String, String>,
    required: Option<Terms>,
}

impl RequiredNodeAffinity {
    /// Reads the pod's requirements; a required term that does not parse matches no node.
    pub fn from_pod(pod: &Pod) -> Self {
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
            .map(Terms::lenient);
        RequiredNodeAffinity {
            node_selector,
            required,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.node_selector.is_empty() && self.required.is_none()
    }

    /// As upstream's RequiredNodeAffinity.Match: whether the node matches, and an error when
    /// its labels match the nodeSelector, no required term matches, and a term did not parse.
    pub fn try_matches(
        &self,
        node_name: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<bool, &NodeSelectorError> {
        if !self
            .node_selector
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
        {
            return Ok(false);
        }
        match &self.required {
            None => Ok(true),
            Some(terms) if terms.matches(node_name, labels) => Ok(true),
            Some(terms) => terms.errors().next().map_or(Ok(false), Err),
        }
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
            let affinity = RequiredNodeAffinity::from_pod(&pod);
            assert_eq!(affinity.matches(&node), want, "{name}");
        }
    }

    /// upstream's TestNodeAffinity "Pod with an invalid value in Affinity term won't be
    /// scheduled onto the node", and its LazyErrorNodeSelector: a term that does not parse
    /// (here for what apimachinery's labels.NewRequirement refuses) matches no node, whatever
    /// the node's labels, while the pod's other terms still count.
    #[test]
    fn a_term_that_does_not_parse_matches_no_node_and_the_others_still_count() {
        let node = NodeBuilder::new("n1")
            .label("foo", "bar")
            .label("gpus", "4")
            .build();
        let bad = [
            req("foo", "NotIn", &["invalid value: ___@#$%^"]),
            req("foo", "Near", &["a"]),
            req("gpus", "Gt", &["x"]),
            req("gpus", "Gt", &["1", "2"]),
            req("foo", "Exists", &["bar"]),
            req("-foo", "DoesNotExist", &[]),
        ];
        let good = req("gpus", "In", &["4"]);
        for r in bad {
            let alone = with_terms(vec![expr_term(vec![r.clone()])]);
            let affinity = RequiredNodeAffinity::from_pod(&alone);
            assert!(!affinity.matches(&node), "{r:?} alone matches nothing");
            assert_eq!(
                affinity.required_terms().map(|t| t.errors().count()),
                Some(1),
                "{r:?}"
            );
            let beside = with_terms(vec![
                expr_term(vec![r.clone()]),
                expr_term(vec![good.clone()]),
            ]);
            assert!(
                RequiredNodeAffinity::from_pod(&beside).matches(&node),
                "{r:?} beside a term that matches"
            );
        }
        // matchFields: In or NotIn with one value, on any key; only metadata.name has a value.
        let fields = |r: NodeSelectorRequirement| {
            with_terms(vec![NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![r]),
            }])
        };
        for (r, want) in [
            (req("metadata.name", "In", &["n1", "n2"]), false),
            (req("metadata.name", "Exists", &[]), false),
            (req("metadata.uid", "In", &["x"]), false),
            (req("metadata.uid", "NotIn", &["x"]), true),
            (req("metadata.name", "NotIn", &["n2"]), true),
        ] {
            let got = RequiredNodeAffinity::from_pod(&fields(r.clone())).matches(&node);
            assert_eq!(got, want, "{r:?}");
        }
    }

    /// upstream's NodeAffinity PreFilter: a term's `metadata.name In` requirements intersect,
    /// the terms' names unite, a term without one leaves every node open.
    #[test]
    fn pinned_names_come_from_match_fields() {
        let names = |terms: Vec<Vec<NodeSelectorRequirement>>| {
            pinned_names(&NodeSelector {
                node_selector_terms: terms
                    .into_iter()
                    .map(|f| NodeSelectorTerm {
                        match_expressions: None,
                        match_fields: Some(f),
                    })
                    .collect(),
            })
            .map(|s| s.into_iter().collect::<Vec<_>>())
        };
        let name_in = |v: &[&str]| req("metadata.name", "In", v);
        assert_eq!(
            names(vec![vec![name_in(&["n1", "n2"])]]),
            Some(vec!["n1".into(), "n2".into()])
        );
        assert_eq!(
            names(vec![vec![name_in(&["n1", "n2"]), name_in(&["n2", "n3"])]]),
            Some(vec!["n2".into()]),
            "ANDed within a term"
        );
        assert_eq!(
            names(vec![vec![name_in(&["n1"])], vec![name_in(&["n3"])]]),
            Some(vec!["n1".into(), "n3".into()]),
            "ORed across terms"
        );
        assert_eq!(
            names(vec![vec![name_in(&["n1"]), name_in(&["n2"])]]),
            Some(vec![]),
            "conflicting"
        );
        assert_eq!(names(vec![vec![name_in(&["n1"])], vec![]]), None);
    }
}
