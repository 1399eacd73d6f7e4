//! A pod's node requirements with label keys and values as interned ids, matched against a
//! node's ids: a cycle turns the pod's strings into ids once, and no string is compared per
//! node (Filter checks a share of every node, spread counts every node). The string matcher
//! ([`RequiredNodeAffinity::matches_labels`]) stays the reference; this one answers as it does.

use std::collections::BTreeMap;

use super::{Op, RequiredNodeAffinity, Requirement, Term, field_value};

/// Interned label strings: what turns a pod's requirements into ids.
pub trait LabelIds {
    /// What keeps an id the id of its string while it is held.
    type Held;
    /// The id of `s`; `None` only when no node can hold it (no label of any node has it).
    fn find(&self, s: &str) -> Option<(u32, Self::Held)>;
}

/// One label requirement by id. A key or value without an id is on no node.
#[derive(Clone, Debug)]
enum IdOp {
    In(Vec<u32>),
    NotIn(Vec<u32>),
    Exists,
    DoesNotExist,
    /// Gt and Lt (the requirement as parsed) compare the node's value as a number: read from
    /// its labels as a string.
    Numeric(Requirement),
}

#[derive(Clone, Debug)]
struct IdRequirement {
    key: Option<u32>,
    op: IdOp,
}

impl IdRequirement {
    fn matches(&self, value: Option<u32>, labels: &BTreeMap<String, String>) -> bool {
        match &self.op {
            IdOp::In(ids) => value.is_some_and(|v| ids.contains(&v)),
            IdOp::NotIn(ids) => value.is_none_or(|v| !ids.contains(&v)),
            IdOp::Exists => value.is_some(),
            IdOp::DoesNotExist => value.is_none(),
            IdOp::Numeric(r) => r.matches(labels.get(&r.key).map(String::as_str)),
        }
    }
}

/// A term by id; `None` in [`IdMatcher::terms`] for one that matches no node (empty, or not
/// parsed).
#[derive(Clone, Debug)]
struct IdTerm {
    labels: Vec<IdRequirement>,
    /// `metadata.name` requirements, compared with the node's name as strings.
    fields: Vec<Requirement>,
}

/// [`RequiredNodeAffinity`] by id (see the module's doc).
#[derive(Clone, Debug)]
pub struct IdMatcher<H> {
    /// `spec.nodeSelector`'s pairs; `None` when a key or value has no id (on no node).
    node_selector: Option<Vec<(u32, u32)>>,
    /// The required terms, one of which must hold; `None` when the pod has none.
    terms: Option<Vec<Option<IdTerm>>>,
    /// Keeps every id above the id of its string.
    _held: Vec<H>,
}

impl<H> IdMatcher<H> {
    /// Whether the node matches: `value_of` gives the id of the node's value for a key id,
    /// `labels` its labels as strings (read only for Gt and Lt).
    pub fn matches(
        &self,
        node_name: &str,
        value_of: impl Fn(u32) -> Option<u32>,
        labels: &BTreeMap<String, String>,
    ) -> bool {
        let Some(selector) = &self.node_selector else {
            return false;
        };
        if !selector.iter().all(|&(k, v)| value_of(k) == Some(v)) {
            return false;
        }
        let Some(terms) = &self.terms else {
            return true;
        };
        terms.iter().flatten().any(|term| {
            term.labels
                .iter()
                .all(|r| r.matches(r.key.and_then(&value_of), labels))
                && term
                    .fields
                    .iter()
                    .all(|r| r.matches(Some(field_value(r, node_name))))
        })
    }
}

impl RequiredNodeAffinity {
    /// These requirements by id, for matching many nodes whose labels `ids` interned.
    pub fn by_id<I: LabelIds>(&self, ids: &I) -> IdMatcher<I::Held> {
        let mut held = Vec::new();
        let mut find = |s: &str| {
            ids.find(s).map(|(id, h)| {
                held.push(h);
                id
            })
        };
        let node_selector = self
            .node_selector
            .iter()
            .map(|(k, v)| Some((find(k)?, find(v)?)))
            .collect();
        let terms = self
            .required
            .as_ref()
            .map(|terms| terms.0.iter().map(|t| term_by_id(t, &mut find)).collect());
        IdMatcher {
            node_selector,
            terms,
            _held: held,
        }
    }
}

fn term_by_id(term: &Term, find: &mut impl FnMut(&str) -> Option<u32>) -> Option<IdTerm> {
    if term.error.is_some() || (term.labels.is_empty() && term.fields.is_empty()) {
        return None;
    }
    let labels = term
        .labels
        .iter()
        .map(|r| {
            // Values without an id are dropped: no node's value equals them.
            let mut values = |vs: &[String]| vs.iter().filter_map(|v| find(v)).collect();
            let op = match &r.op {
                Op::In(vs) => IdOp::In(values(vs)),
                Op::NotIn(vs) => IdOp::NotIn(values(vs)),
                Op::Exists => IdOp::Exists,
                Op::DoesNotExist => IdOp::DoesNotExist,
                Op::Gt(_) | Op::Lt(_) => IdOp::Numeric(r.clone()),
            };
            IdRequirement {
                key: find(&r.key),
                op,
            }
        })
        .collect();
    Some(IdTerm {
        labels,
        fields: term.fields.clone(),
    })
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm,
    };

    use rand::rngs::StdRng;
    use rand::{Rng as _, SeedableRng};

    use super::*;
    use crate::scheduler::testing::PodBuilder;

    /// Ids for the strings the nodes hold, and none for any other.
    struct Table(HashMap<String, u32>);

    impl LabelIds for Table {
        type Held = ();
        fn find(&self, s: &str) -> Option<(u32, ())> {
            self.0.get(s).map(|&id| (id, ()))
        }
    }

    /// A seeded generator: the same rounds every run.
    struct Rng(StdRng);

    impl Rng {
        fn below(&mut self, n: usize) -> usize {
            self.0.random_range(0..n)
        }
    }

    const KEYS: [&str; 5] = ["zone", "tier", "gpu", "rack", "absent"];
    const VALUES: [&str; 8] = ["a", "b", "c", "1", "7", "12", "nowhere", "bad value!"];
    const OPS: [&str; 7] = ["In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt", "Bogus"];

    fn requirement(rng: &mut Rng, field: bool) -> NodeSelectorRequirement {
        let op = OPS[rng.below(OPS.len())];
        let values: Vec<String> = match op {
            "Exists" | "DoesNotExist" if rng.below(4) > 0 => Vec::new(),
            _ if field => vec![format!("n{}", rng.below(10))],
            _ => (0..1 + rng.below(2))
                .map(|_| VALUES[rng.below(VALUES.len())].into())
                .collect(),
        };
        NodeSelectorRequirement {
            key: if field {
                "metadata.name".into()
            } else {
                KEYS[rng.below(KEYS.len())].into()
            },
            operator: op.into(),
            values: (!values.is_empty()).then_some(values),
        }
    }

    /// Against the string matcher, on random nodes and random pods: keys and values from small
    /// pools (some on no node), every operator, numbers, a name field, nodeSelectors, terms that
    /// do not parse.
    #[test]
    fn requirements_by_id_match_the_nodes_the_strings_match() {
        let mut rng = Rng(StdRng::seed_from_u64(11));
        let mut matched = 0;
        for round in 0..400 {
            let nodes: Vec<(String, BTreeMap<String, String>)> = (0..8)
                .map(|i| {
                    let labels = (0..rng.below(4))
                        .map(|_| {
                            (
                                KEYS[rng.below(4)].to_string(),
                                VALUES[rng.below(6)].to_string(),
                            )
                        })
                        .collect();
                    (format!("n{i}"), labels)
                })
                .collect();
            let mut table = HashMap::new();
            for s in nodes
                .iter()
                .flat_map(|(_, l)| l.iter().flat_map(|(k, v)| [k, v]))
            {
                let id = table.len() as u32;
                table.entry(s.clone()).or_insert(id);
            }
            let table = Table(table);
            let terms: Vec<NodeSelectorTerm> = (0..rng.below(3))
                .map(|_| NodeSelectorTerm {
                    match_expressions: Some(
                        (0..rng.below(3))
                            .map(|_| requirement(&mut rng, false))
                            .collect(),
                    ),
                    match_fields: (rng.below(3) == 0).then(|| vec![requirement(&mut rng, true)]),
                })
                .collect();
            let mut pod = PodBuilder::new("p");
            if rng.below(2) == 0 {
                pod = pod.node_selector(KEYS[rng.below(4)], VALUES[rng.below(VALUES.len())]);
            }
            let mut pod = pod.build();
            if rng.below(4) > 0 {
                let spec = pod.spec.get_or_insert_with(Default::default);
                spec.affinity = Some(Affinity {
                    node_affinity: Some(NodeAffinity {
                        required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                            node_selector_terms: terms,
                        }),
                        ..Default::default()
                    }),
                    ..Default::default()
                });
            }
            let required = RequiredNodeAffinity::from_pod(&pod);
            let by_id = required.by_id(&table);
            for (name, labels) in &nodes {
                let ids: Vec<(u32, u32)> = labels
                    .iter()
                    .map(|(k, v)| (table.0[k], table.0[v]))
                    .collect();
                let value_of = |key: u32| ids.iter().find(|(k, _)| *k == key).map(|(_, v)| *v);
                let expected = required.matches_labels(name, labels);
                assert_eq!(
                    by_id.matches(name, value_of, labels),
                    expected,
                    "round {round}, node {name} {labels:?}, pod {required:?}"
                );
                matched += usize::from(expected);
            }
        }
        assert!(
            matched > 100,
            "only {matched} nodes matched: the pools are too sparse"
        );
    }
}
