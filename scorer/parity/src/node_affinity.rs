//! `NodeAffinity` filter: the pod's `nodeSelector` and required node affinity, as
//! kube-scheduler's `NodeAffinity` plugin (`pkg/scheduler/framework/plugins/nodeaffinity/
//! node_affinity.go`, matching rules of `k8s.io/component-helpers/scheduling/corev1/
//! nodeaffinity`).
//!
//! Every `nodeSelector` label must equal the node's; and when required terms are given, at
//! least one term must match, a term matching when all its requirements hold. An empty term
//! matches nothing (upstream). Operators: `In` (label present, value listed), `NotIn` (absent,
//! or value not listed), `Exists`, `DoesNotExist`, `Gt`/`Lt` (label and the single value both
//! parse as integers and compare strictly; anything else does not match). Reason, as
//! upstream: `node(s) didn't match Pod's node affinity/selector`. A node without Kubernetes
//! facts has no labels.
//!
//! As a score it sums the weights of the preferred terms a node matches (terms of weight 0
//! or without requirements are skipped) and scales the sums so the best node gets 100
//! (upstream's `DefaultNormalizeScore`; all 0 when no node matches any).
use std::collections::BTreeMap;

use loadstar_framework::snapshot::{NodeView, PodInfo, SelectorRequirement};
use loadstar_framework::{CycleContext, FilterPlugin, MAX_NODE_SCORE, Reason, ScorePlugin};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "NodeAffinity";
/// Upstream's reason.
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

/// Whether one requirement holds for `labels`.
pub fn requirement_matches(r: &SelectorRequirement, labels: &BTreeMap<String, String>) -> bool {
    r.matches(labels)
}

/// Whether the pod's `nodeSelector` and required node affinity admit the node with this name
/// and labels (`helper.PodMatchesNodeSelectorAndAffinityTerms`).
pub fn pod_matches(pod: &PodInfo, node_name: &str, labels: &BTreeMap<String, String>) -> bool {
    let selector_ok = pod
        .node_selector
        .iter()
        .all(|(k, v)| labels.get(k) == Some(v));
    selector_ok
        && (pod.required_affinity.is_empty()
            || pod
                .required_affinity
                .iter()
                .any(|term| term.matches(node_name, labels)))
}

/// [`pod_matches`] for a node of the snapshot (no Kubernetes facts: no labels).
pub fn pod_matches_node(pod: &PodInfo, node: &NodeView) -> bool {
    if pod.node_selector.is_empty() && pod.required_affinity.is_empty() {
        return true;
    }
    pod_matches(pod, &node.name, node.labels_or_empty())
}

/// The node selector / required affinity filter.
#[derive(Debug, Clone, Default)]
pub struct NodeAffinity;

impl NodeAffinity {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(NodeAffinity)
    }
}

impl FilterPlugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    /// No node selector and no required node affinity: every node matches.
    fn skips(&self, _: Option<&loadstar_framework::PreFilterState>, pod: &PodInfo) -> bool {
        pod.node_selector.is_empty() && pod.required_affinity.is_empty()
    }

    fn filter(&self, _: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        if pod_matches_node(pod, node) {
            Ok(())
        } else {
            Err(REASON.into())
        }
    }
}

impl ScorePlugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, _: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let terms: Vec<&(i32, _)> = pod
            .preferred_node_affinity
            .iter()
            .filter(|(w, t)| *w != 0 && (!t.expressions.is_empty() || !t.fields.is_empty()))
            .collect();
        if terms.is_empty() {
            // Every node scores 0 (most pods): no need to open each node's labels.
            out.fill(0);
            return;
        }
        for (o, n) in out.iter_mut().zip(nodes) {
            let labels = n.labels_or_empty();
            *o = terms
                .iter()
                .filter(|(_, t)| t.matches(&n.name, labels))
                .map(|(w, _)| i64::from(*w))
                .sum();
        }
        default_normalize(out);
    }
}

/// Upstream's `DefaultNormalizeScore` (not reversed): scales so the largest becomes 100,
/// integer arithmetic; all zero stays zero.
pub fn default_normalize(out: &mut [i64]) {
    let max = out.iter().copied().max().unwrap_or(0);
    if max == 0 {
        return;
    }
    for o in out.iter_mut() {
        *o = MAX_NODE_SCORE * *o / max;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{NodeSelectorTerm, SelectorOp};
    use loadstar_testkit::snapshot::*;

    fn req(key: &str, op: SelectorOp, values: &[&str]) -> SelectorRequirement {
        SelectorRequirement {
            key: key.into(),
            op,
            values: values.iter().map(|s| s.to_string()).collect(),
        }
    }

    fn labels(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn operators_match_like_upstream() {
        use SelectorOp::*;
        let l = labels(&[("zone", "a"), ("gen", "5"), ("bad", "x")]);
        assert!(requirement_matches(&req("zone", In, &["a", "b"]), &l));
        assert!(!requirement_matches(&req("zone", In, &["b"]), &l));
        assert!(!requirement_matches(&req("nope", In, &["a"]), &l));
        assert!(requirement_matches(&req("zone", NotIn, &["b"]), &l));
        assert!(requirement_matches(&req("nope", NotIn, &["b"]), &l));
        assert!(!requirement_matches(&req("zone", NotIn, &["a"]), &l));
        assert!(requirement_matches(&req("zone", Exists, &[]), &l));
        assert!(!requirement_matches(&req("nope", Exists, &[]), &l));
        assert!(requirement_matches(&req("nope", DoesNotExist, &[]), &l));
        assert!(!requirement_matches(&req("zone", DoesNotExist, &[]), &l));
        assert!(requirement_matches(&req("gen", Gt, &["4"]), &l));
        assert!(!requirement_matches(&req("gen", Gt, &["5"]), &l));
        assert!(requirement_matches(&req("gen", Lt, &["6"]), &l));
        assert!(!requirement_matches(&req("gen", Lt, &["5"]), &l));
        assert!(!requirement_matches(&req("bad", Gt, &["1"]), &l));
        assert!(!requirement_matches(&req("gen", Gt, &["1", "2"]), &l));
        assert!(!requirement_matches(&req("nope", Lt, &["9"]), &l));
    }

    #[test]
    fn preferred_terms_add_their_weights_then_scale_to_the_best() {
        let zone = |z: &str| {
            edit_kube(kube_node(z, 1000, GIB), |k| {
                k.labels = labels(&[("zone", z)]);
            })
        };
        let nodes = [zone("a"), zone("b"), zone("c")];
        let refs: Vec<&NodeView> = nodes.iter().collect();
        let term = |z: &str| NodeSelectorTerm {
            expressions: vec![req("zone", SelectorOp::In, &[z])],
            fields: vec![],
        };
        let mut p = pod(100, MIB);
        p.preferred_node_affinity = vec![(20, term("a")), (60, term("b")), (0, term("c"))];
        let snap = snapshot(vec![]);
        let mut out = vec![0; 3];
        ScorePlugin::score(&NodeAffinity, &ctx(&snap), &p, &refs, &mut out);
        assert_eq!(out, vec![33, 100, 0]);
        p.preferred_node_affinity.clear();
        ScorePlugin::score(&NodeAffinity, &ctx(&snap), &p, &refs, &mut out);
        assert_eq!(out, vec![0, 0, 0]);
    }

    #[test]
    fn selector_and_terms_combine() {
        let node = edit_kube(kube_node("n", 1000, GIB), |k| {
            k.labels = labels(&[("disk", "ssd"), ("zone", "a")])
        });
        let mut p = pod(100, MIB);
        assert_eq!(filter_one(&NodeAffinity, node.clone(), &p), Ok(()));
        p.node_selector = labels(&[("disk", "ssd")]);
        assert_eq!(filter_one(&NodeAffinity, node.clone(), &p), Ok(()));
        // Terms are ORed; requirements within a term ANDed.
        let term = |expressions| NodeSelectorTerm {
            expressions,
            fields: vec![],
        };
        p.required_affinity = vec![
            term(vec![req("zone", SelectorOp::In, &["b"])]),
            term(vec![
                req("zone", SelectorOp::In, &["a"]),
                req("gpu", SelectorOp::DoesNotExist, &[]),
            ]),
        ];
        assert_eq!(filter_one(&NodeAffinity, node.clone(), &p), Ok(()));
        // matchFields compare the node's name.
        p.required_affinity = vec![NodeSelectorTerm {
            expressions: vec![],
            fields: vec![req("metadata.name", SelectorOp::In, &["n"])],
        }];
        assert_eq!(filter_one(&NodeAffinity, node.clone(), &p), Ok(()));
        p.required_affinity = vec![NodeSelectorTerm::default()];
        assert_eq!(
            filter_one(&NodeAffinity, node.clone(), &p),
            Err(REASON.into())
        );
        p.required_affinity.clear();
        p.node_selector = labels(&[("disk", "hdd")]);
        assert_eq!(filter_one(&NodeAffinity, node, &p), Err(REASON.into()));
    }
}
