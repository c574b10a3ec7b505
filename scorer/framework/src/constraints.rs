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
    /// Whether the selector has no requirement (it matches everything).
    pub fn is_empty(&self) -> bool {
        self.match_labels.is_empty() && self.match_expressions.is_empty()
    }

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

/// A pod (anti-)affinity term as kube-scheduler's `framework.AffinityTerm` (1.22+, with
/// `namespaceSelector`): a pod matches when its namespace is one of `namespaces` or its
/// namespace's labels match `namespace_selector`, and its labels match `selector`. The
/// owning pod's namespace is already filled in where the spec names neither.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct AffinityTerm {
    /// Namespaces whose pods the term looks at (the spec's list; the owning pod's namespace
    /// when the spec sets neither a list nor a namespace selector).
    pub namespaces: Vec<String>,
    /// `namespaceSelector`: namespaces, by their labels, whose pods the term also looks at.
    /// `None` (not set) adds none; the empty selector adds every namespace.
    pub namespace_selector: Option<LabelSelector>,
    /// Which pods; `None` matches no pod.
    pub selector: Option<LabelSelector>,
    /// The node label that defines the topology domain.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Whether a pod in `namespace` with `labels` matches the term (upstream's
    /// `AffinityTerm.Matches`). `namespace_labels` gives the labels of the pod's namespace,
    /// called only when the term has a non-empty namespace selector; `None` when the
    /// namespace is not known, which such a selector never matches (upstream resolves a
    /// term's selector to the namespaces it lists; see [`NamespaceLabels::of_incoming`] for
    /// the incoming pod's own namespace).
    #[inline]
    pub fn matches_pod<'l>(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        namespace_labels: impl FnOnce() -> Option<&'l BTreeMap<String, String>>,
    ) -> bool {
        let in_namespace = self.namespaces.iter().any(|n| n == namespace)
            || self
                .namespace_selector
                .as_ref()
                .is_some_and(|s| s.is_empty() || namespace_labels().is_some_and(|l| s.matches(l)));
        in_namespace && selector_matches(self.selector.as_ref(), labels)
    }

    /// Whether the term has a namespace selector that needs namespaces' labels (the empty
    /// selector needs none: it takes every namespace).
    pub fn selects_namespaces_by_label(&self) -> bool {
        self.namespace_selector
            .as_ref()
            .is_some_and(|s| !s.is_empty())
    }
}

/// The cluster's namespaces and their labels, for `namespaceSelector`s (the scorer's
/// Namespace watch keeps it; see `NodeStore::set_namespaces`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NamespaceLabels {
    by_name: std::collections::HashMap<String, BTreeMap<String, String>>,
}

/// No labels, for a namespace that has none or is not known.
static NO_LABELS: BTreeMap<String, String> = BTreeMap::new();

impl NamespaceLabels {
    /// The table of `(name, labels)` pairs.
    pub fn new(namespaces: impl IntoIterator<Item = (String, BTreeMap<String, String>)>) -> Self {
        NamespaceLabels {
            by_name: namespaces.into_iter().collect(),
        }
    }

    /// The labels of namespace `name`, if it is known.
    pub fn get(&self, name: &str) -> Option<&BTreeMap<String, String>> {
        self.by_name.get(name)
    }

    /// The labels of an existing pod's namespace, for matching it against the incoming
    /// pod's terms: `None` when the namespace (or the whole table) is not known.
    pub fn of_existing<'a>(
        table: Option<&'a NamespaceLabels>,
        name: &str,
    ) -> Option<&'a BTreeMap<String, String>> {
        table.and_then(|t| t.get(name))
    }

    /// The labels of the incoming pod's namespace, for matching it against existing pods'
    /// terms: no labels when it is not known (upstream's `GetNamespaceLabelsSnapshot`). So
    /// is it without a table, which in a cluster does not happen: the scheduler waits for
    /// the Namespace list (and without a cluster no existing pod carries terms).
    pub fn of_incoming<'a>(
        table: Option<&'a NamespaceLabels>,
        name: &str,
    ) -> Option<&'a BTreeMap<String, String>> {
        Some(table.and_then(|t| t.get(name)).unwrap_or(&NO_LABELS))
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
    /// Every term, required and preferred, affinity and anti-affinity.
    pub fn terms(&self) -> impl Iterator<Item = &AffinityTerm> {
        self.required
            .iter()
            .chain(&self.required_anti)
            .chain(self.preferred.iter().map(|w| &w.term))
            .chain(self.preferred_anti.iter().map(|w| &w.term))
    }

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
    /// `nodeAffinityPolicy` / `nodeTaintsPolicy` (1.26+), when the pod states either:
    /// which nodes' domains and pods count, as releases with the fields count them. `None`
    /// (neither stated) counts as kube-scheduler 1.20 does.
    pub inclusion: Option<NodeInclusion>,
}

/// A spread constraint's node inclusion policies: a node's domain and pods count only if the
/// node passes them (upstream's `matchNodeInclusionPolicies`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeInclusion {
    /// `nodeAffinityPolicy: Honor` (its default): only nodes the pod's `nodeSelector` and
    /// required node affinity admit. `Ignore`: every node.
    pub honor_affinity: bool,
    /// `nodeTaintsPolicy: Honor`: only nodes whose `NoSchedule`/`NoExecute` taints the pod
    /// tolerates. `Ignore` (its default): every node.
    pub honor_taints: bool,
}

impl NodeInclusion {
    /// What current releases count a constraint that states no policy with:
    /// `nodeAffinityPolicy: Honor`, `nodeTaintsPolicy: Ignore`.
    pub const CURRENT_DEFAULT: NodeInclusion = NodeInclusion {
        honor_affinity: true,
        honor_taints: false,
    };
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
            ..Default::default()
        };
        let db = labels(&[("app", "db")]);
        assert!(t.matches_pod("ns", &db, || None));
        assert!(!t.matches_pod("other", &db, || None));
        assert!(!t.matches_pod("ns", &labels(&[("app", "web")]), || None));
    }

    #[test]
    fn namespace_selectors_add_namespaces_by_label() {
        let db = labels(&[("app", "db")]);
        let team_a = labels(&[("team", "a")]);
        let t = AffinityTerm {
            namespaces: vec!["listed".into()],
            namespace_selector: Some(LabelSelector {
                match_labels: team_a.clone(),
                ..Default::default()
            }),
            selector: Some(LabelSelector::default()),
            topology_key: "zone".into(),
        };
        assert!(t.selects_namespaces_by_label());
        // The list and the selector are ORed.
        assert!(t.matches_pod("listed", &db, || None));
        assert!(t.matches_pod("x", &db, || Some(&team_a)));
        let team_b = labels(&[("team", "b")]);
        assert!(!t.matches_pod("x", &db, || Some(&team_b)));
        // A namespace not known matches no non-empty selector...
        assert!(!t.matches_pod("x", &db, || None));
        // ...and the incoming pod's unknown namespace is read as having no labels.
        let not_a = AffinityTerm {
            namespace_selector: Some(LabelSelector {
                match_expressions: vec![req("team", SelectorOp::NotIn, &["a"])],
                ..Default::default()
            }),
            ..t.clone()
        };
        let table = NamespaceLabels::new([("x".to_string(), team_a.clone())]);
        let table = &table;
        let incoming = |ns| move || NamespaceLabels::of_incoming(Some(table), ns);
        assert!(!not_a.matches_pod("x", &db, incoming("x")));
        assert!(not_a.matches_pod("y", &db, incoming("y")));
        assert!(!not_a.matches_pod("y", &db, || {
            NamespaceLabels::of_existing(Some(table), "y")
        }));
        // The empty selector takes every namespace, known or not.
        let every = AffinityTerm {
            namespaces: vec![],
            namespace_selector: Some(LabelSelector::default()),
            ..t
        };
        assert!(!every.selects_namespaces_by_label());
        assert!(every.matches_pod("anywhere", &db, || None));
    }
}
