//! Placement constraints a pod carries besides resources, in the shape kube-scheduler 1.20
//! evaluates them: label selectors, node selector terms (with `matchFields`), inter-pod
//! affinity terms with their namespaces resolved, and topology spread constraints. Pure data
//! with the matching rules of `k8s.io/apimachinery` label selectors; the plugins that use
//! them live in `loadstar-policy`.
use std::collections::BTreeMap;
use std::sync::Arc;

/// Operator of a selector requirement (node selectors accept all six, label selectors the
/// first four).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SelectorOp {
    /// Label value is one of `values`.
    In,
    /// Label value is none of `values` (or the label is absent).
    NotIn,
    /// Label is present.
    Exists,
    /// Label is absent.
    DoesNotExist,
    /// Label value, as an integer, is greater than the single value.
    Gt,
    /// Label value, as an integer, is less than the single value.
    Lt,
}

/// One requirement of a selector.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct SelectorRequirement {
    /// Label key (for a node's `matchFields`, the field: only `metadata.name`).
    pub key: String,
    /// Operator.
    pub op: SelectorOp,
    /// Values.
    pub values: Vec<String>,
}

impl SelectorRequirement {
    /// Whether the requirement holds for a value (`None`: the label is absent). `Gt`/`Lt`
    /// hold only when the value and the single bound both parse as integers.
    pub fn matches_value(&self, value: Option<&str>) -> bool {
        match self.op {
            SelectorOp::In => value.is_some_and(|v| self.values.iter().any(|x| x == v)),
            SelectorOp::NotIn => value.is_none_or(|v| self.values.iter().all(|x| x != v)),
            SelectorOp::Exists => value.is_some(),
            SelectorOp::DoesNotExist => value.is_none(),
            SelectorOp::Gt | SelectorOp::Lt => {
                let [bound] = self.values.as_slice() else {
                    return false;
                };
                let (Some(v), Ok(bound)) = (value, bound.parse::<i64>()) else {
                    return false;
                };
                let Ok(v) = v.parse::<i64>() else {
                    return false;
                };
                if self.op == SelectorOp::Gt {
                    v > bound
                } else {
                    v < bound
                }
            }
        }
    }

    /// Whether the requirement holds for `labels`.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.matches_value(labels.get(&self.key).map(String::as_str))
    }
}

/// A node selector term: every label requirement and every field requirement must hold.
/// A term with neither matches nothing (upstream).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeSelectorTerm {
    /// `matchExpressions`, against the node's labels.
    pub expressions: Vec<SelectorRequirement>,
    /// `matchFields`, against the node's fields (only `metadata.name` exists).
    pub fields: Vec<SelectorRequirement>,
}

impl NodeSelectorTerm {
    /// Whether the term matches a node with this name and these labels.
    pub fn matches(&self, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
        (!self.expressions.is_empty() || !self.fields.is_empty())
            && self.expressions.iter().all(|r| r.matches(labels))
            && self.fields.iter().all(|r| r.matches_value(Some(node_name)))
    }
}

/// A `metav1.LabelSelector`: all of `match_labels` and every expression must hold. The
/// empty selector matches everything; an absent one (`Option::None` where it is used)
/// matches nothing, as `LabelSelectorAsSelector(nil)` does.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct LabelSelector {
    /// `matchLabels`.
    pub match_labels: BTreeMap<String, String>,
    /// `matchExpressions` (`In`, `NotIn`, `Exists`, `DoesNotExist`).
    pub match_expressions: Vec<SelectorRequirement>,
}

impl LabelSelector {
    /// Whether `labels` satisfy the selector.
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.match_labels
            .iter()
            .all(|(k, v)| labels.get(k) == Some(v))
            && self.match_expressions.iter().all(|r| r.matches(labels))
    }
}

/// Whether an optional selector matches: `None` matches nothing.
pub fn selector_matches(
    selector: Option<&LabelSelector>,
    labels: &BTreeMap<String, String>,
) -> bool {
    selector.is_some_and(|s| s.matches(labels))
}

/// A pod (anti-)affinity term as kube-scheduler's `framework.AffinityTerm`: the namespaces
/// are already resolved (an empty list in the spec means the owning pod's namespace).
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Namespaces whose pods the term looks at; never empty once converted.
    pub namespaces: Vec<String>,
    /// Which pods; `None` matches no pod.
    pub selector: Option<LabelSelector>,
    /// The node label that defines the topology domain.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Whether a pod in `namespace` with `labels` matches the term
    /// (`PodMatchesTermsNamespaceAndSelector`).
    pub fn matches_pod(&self, namespace: &str, labels: &BTreeMap<String, String>) -> bool {
        self.namespaces.iter().any(|n| n == namespace)
            && selector_matches(self.selector.as_ref(), labels)
    }
}

/// A preferred (soft) term with its weight, 1–100.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WeightedAffinityTerm {
    /// Weight.
    pub weight: i32,
    /// The term.
    pub term: AffinityTerm,
}

/// A pod's inter-pod affinity and anti-affinity, required and preferred.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAffinity {
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required: Vec<AffinityTerm>,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_anti: Vec<AffinityTerm>,
    /// `podAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred: Vec<WeightedAffinityTerm>,
    /// `podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_anti: Vec<WeightedAffinityTerm>,
}

impl PodAffinity {
    /// True when the pod has no inter-pod affinity at all.
    pub fn is_empty(&self) -> bool {
        self.required.is_empty()
            && self.required_anti.is_empty()
            && self.preferred.is_empty()
            && self.preferred_anti.is_empty()
    }
}

/// Shared, cheaply cloned affinity (pods on nodes hold one per pod).
pub type SharedAffinity = Arc<PodAffinity>;

/// What a topology spread constraint does when it cannot be met.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum WhenUnsatisfiable {
    /// A hard constraint: a filter.
    #[default]
    DoNotSchedule,
    /// A soft constraint: a score.
    ScheduleAnyway,
}

/// One `topologySpreadConstraints` entry.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SpreadConstraint {
    /// Largest allowed difference between a domain's matching pods and the minimum.
    pub max_skew: i32,
    /// The node label that defines the domains.
    pub topology_key: String,
    /// Hard or soft.
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// Which pods count (in the incoming pod's namespace); `None` counts none.
    pub selector: Option<LabelSelector>,
    /// `minDomains` (hard constraints only): with fewer eligible domains than this, the
    /// global minimum counts as 0, so pods spread into domains that do not exist yet (a
    /// cluster autoscaler adds them). 1 or less changes nothing.
    pub min_domains: i32,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn req(key: &str, op: SelectorOp, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.into(),
            op,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    #[test]
    fn label_selectors_follow_apimachinery() {
        let l = labels(&[("app", "web"), ("team", "x")]);
        assert!(LabelSelector::default().matches(&l), "empty matches all");
        assert!(!selector_matches(None, &l), "absent matches none");
        let s = LabelSelector {
            match_labels: labels(&[("app", "web")]),
            match_expressions: vec![req("team", SelectorOp::NotIn, &["y"])],
        };
        assert!(s.matches(&l));
        let s = LabelSelector {
            match_expressions: vec![req("tier", SelectorOp::Exists, &[])],
            ..s
        };
        assert!(!s.matches(&l));
    }

    #[test]
    fn node_terms_match_fields_on_the_name_only() {
        let l = labels(&[("metadata.name", "b")]);
        let term = NodeSelectorTerm {
            expressions: vec![],
            fields: vec![req("metadata.name", SelectorOp::In, &["a"])],
        };
        assert!(term.matches("a", &l));
        assert!(
            !term.matches("b", &l),
            "a label of that name is not the field"
        );
        assert!(!NodeSelectorTerm::default().matches("a", &l), "empty term");
    }

    #[test]
    fn affinity_terms_need_namespace_and_selector() {
        let t = AffinityTerm {
            namespaces: vec!["ns".into()],
            selector: Some(LabelSelector {
                match_labels: labels(&[("app", "db")]),
                ..Default::default()
            }),
            topology_key: "zone".into(),
        };
        assert!(t.matches_pod("ns", &labels(&[("app", "db")])));
        assert!(!t.matches_pod("other", &labels(&[("app", "db")])));
        assert!(!t.matches_pod("ns", &labels(&[("app", "web")])));
    }
}
