//! `PodTopologySpread` filter: the pod's hard (`DoNotSchedule`) topology spread constraints,
//! as kube-scheduler 1.20's plugin (`pkg/scheduler/framework/plugins/podtopologyspread/
//! filtering.go`), and the soft (`ScheduleAnyway`) ones as a score.
//!
//! PreFilter, once per pod: the eligible nodes are those the pod's `nodeSelector` and
//! required node affinity admit and that carry every constraint's key; for each constraint,
//! each eligible node's domain `(key, value)` counts the pods on all nodes of that domain in
//! the pod's namespace that the constraint's selector matches (pods being deleted do not
//! count). The minimum per key is the critical path.
//!
//! Filter: a node without a constraint's key fails (`... (missing required label)`); else
//! `count(domain) + (1 if the selector matches the pod itself) - min(key)` must not exceed
//! `maxSkew`, where `min(key)` is 0 while there are fewer eligible domains than the
//! constraint's `minDomains` (alpha in 1.24, on by default from 1.27; upstream's
//! `minMatchNum`).
//!
//! As a score (upstream's `scoring.go`) it spreads by the soft (`ScheduleAnyway`)
//! constraints: among the feasible nodes, those lacking a constraint's key are ignored
//! (score 0); each constraint's domains of the remaining feasible nodes count matching pods
//! over all nodes the pod's node affinity admits (the hostname key counts the node's own
//! pods); a node's raw score is `Σ count × ln(domains + 2) + (maxSkew − 1)`, and the
//! normalised score is `100 × (max + min − raw) / max` (100 everywhere when `max` is 0).
//! A pod without soft constraints scores 100 on every node.
//!
//! Pods that declare no constraints get the profile's default constraints, as upstream's
//! `defaultConstraints` with `defaultingType`: `List` uses the listed ones, `System` (the
//! default when none are listed, as in 1.20 with `DefaultPodTopologySpread` on) the system
//! defaults — `kubernetes.io/hostname` with maxSkew 3 and `topology.kubernetes.io/zone`
//! with maxSkew 5, both `ScheduleAnyway`. Their selector is the pod's
//! [`default_spread_selector`](loadstar_framework::snapshot::PodInfo::default_spread_selector),
//! what the Services, ReplicationControllers, ReplicaSets and StatefulSets selecting the pod
//! select, which the Kubernetes layer computes; a pod nothing selects gets none.
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};

use loadstar_framework::snapshot::{
    NodeInclusion, NodeView, PodInfo, PodOnNode, SpreadConstraint, WhenUnsatisfiable,
};
use loadstar_framework::{
    CycleContext, FilterPlugin, MAX_NODE_SCORE, PreFilterState, Reason, ScorePlugin,
};
use serde::Deserialize;

use crate::args::{PluginError, parse_args};
use crate::node_affinity::pod_matches_node;
use crate::taint_toleration::first_untolerated;

/// Plugin name.
pub const NAME: &str = "PodTopologySpread";
/// A domain would exceed `maxSkew`.
pub const REASON_CONSTRAINTS: &str = "node(s) didn't match pod topology spread constraints";
/// The node lacks a constraint's key.
pub const REASON_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// The plugin's arguments (`PodTopologySpreadArgs`).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Constraints for pods that declare none (with `defaultingType: List`).
    #[serde(default)]
    pub default_constraints: Vec<DefaultConstraint>,
    /// `System` or `List`; unset: `List` when constraints are listed, else `System`.
    #[serde(default)]
    pub defaulting_type: Option<String>,
}

/// One default constraint, as upstream spells it (without a selector: it is derived per
/// pod).
#[derive(Debug, Clone, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct DefaultConstraint {
    /// Largest allowed skew.
    pub max_skew: i32,
    /// The node label defining the domains.
    pub topology_key: String,
    /// `DoNotSchedule` or `ScheduleAnyway`.
    pub when_unsatisfiable: String,
    /// Forbidden (accepted only to be refused with upstream's message).
    #[serde(default)]
    pub label_selector: Option<serde_norway::Value>,
}

/// Upstream's system default constraints (`systemDefaultConstraints`).
pub fn system_defaults() -> Vec<SpreadConstraint> {
    [(HOSTNAME_LABEL, 3), ("topology.kubernetes.io/zone", 5)]
        .into_iter()
        .map(|(key, skew)| SpreadConstraint {
            max_skew: skew,
            topology_key: key.into(),
            when_unsatisfiable: WhenUnsatisfiable::ScheduleAnyway,
            selector: None,
            min_domains: 0,
            inclusion: None,
        })
        .collect()
}

/// Validates `args` as `ValidatePodTopologySpreadArgs` does and returns the effective
/// default constraints (selectors left `None`).
fn default_constraints(a: &Args) -> Result<Vec<SpreadConstraint>, PluginError> {
    let invalid = |path: String, msg: &str| PluginError::invalid(NAME, path, msg);
    let listed = !a.default_constraints.is_empty();
    let system = match a.defaulting_type.as_deref() {
        None => !listed,
        Some("System") if listed => {
            return Err(invalid(
                "defaultingType".into(),
                "must be List when .defaultConstraints are not empty",
            ));
        }
        Some("System") => true,
        Some("List") => false,
        Some(_) => {
            return Err(invalid(
                "defaultingType".into(),
                "must be one of {\"System\", \"List\"}",
            ));
        }
    };
    if system {
        return Ok(system_defaults());
    }
    let mut out: Vec<SpreadConstraint> = Vec::new();
    for (i, c) in a.default_constraints.iter().enumerate() {
        let at = |field: &str| format!("defaultConstraints[{i}].{field}");
        if c.max_skew <= 0 {
            return Err(invalid(at("maxSkew"), "must be greater than zero"));
        }
        if c.topology_key.is_empty() {
            return Err(invalid(at("topologyKey"), "can not be empty"));
        }
        let when = match c.when_unsatisfiable.as_str() {
            "DoNotSchedule" => WhenUnsatisfiable::DoNotSchedule,
            "ScheduleAnyway" => WhenUnsatisfiable::ScheduleAnyway,
            _ => {
                return Err(invalid(
                    at("whenUnsatisfiable"),
                    "must be DoNotSchedule or ScheduleAnyway",
                ));
            }
        };
        if c.label_selector.is_some() {
            return Err(invalid(
                at("labelSelector"),
                "constraint must not define a selector, as they deduced for each pod",
            ));
        }
        if out
            .iter()
            .any(|o| o.topology_key == c.topology_key && o.when_unsatisfiable == when)
        {
            return Err(invalid(
                format!("defaultConstraints[{i}]"),
                "duplicate topologyKey and whenUnsatisfiable",
            ));
        }
        out.push(SpreadConstraint {
            max_skew: c.max_skew,
            topology_key: c.topology_key.clone(),
            when_unsatisfiable: when,
            selector: None,
            min_domains: 0,
            inclusion: None,
        });
    }
    Ok(out)
}

/// The PreFilter state: per constraint, matching pods per domain value and the minimum.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct SpreadState {
    /// One entry per hard constraint, in the pod's order.
    pub constraints: Vec<ConstraintCounts>,
    /// The inclusion policies the counts gave constraints that state none (the snapshot's
    /// `spread_default_inclusion` at PreFilter), so updates count as the PreFilter did.
    pub unstated: Option<NodeInclusion>,
}

/// Counts of one hard constraint.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct ConstraintCounts {
    /// Matching pods per domain value (only domains of eligible nodes).
    pub per_value: HashMap<String, i32>,
    /// The smallest count among them (`i32::MAX` when there is no domain).
    pub min: i32,
}

/// The hard ones among a pod's effective constraints.
pub fn hard_constraints(constraints: &[SpreadConstraint]) -> Vec<&SpreadConstraint> {
    constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule)
        .collect()
}

/// Computes the PreFilter counts for `pod` with its effective `constraints` over every node
/// of the snapshot.
pub fn prefilter_state(
    nodes: &[NodeView],
    pod: &PodInfo,
    constraints: &[SpreadConstraint],
) -> SpreadState {
    let hard = hard_constraints(constraints);
    if hard.is_empty() {
        return SpreadState::default();
    }
    let mut counts: Vec<ConstraintCounts> = vec![ConstraintCounts::default(); hard.len()];
    for node in nodes {
        let l = node.labels_or_empty();
        if !hard.iter().all(|c| l.contains_key(&c.topology_key)) {
            continue;
        }
        let included = Included::new(pod, node);
        for (c, out) in hard.iter().zip(counts.iter_mut()) {
            if included.by(c) {
                out.per_value.entry(l[&c.topology_key].clone()).or_insert(0);
            }
        }
    }
    let stated = hard.iter().any(|c| c.inclusion.is_some());
    for node in nodes {
        let l = node.labels_or_empty();
        // Only constraints that state their policies read these (most state none).
        let all_keys = stated && hard.iter().all(|c| l.contains_key(&c.topology_key));
        let included = Included::new(pod, node);
        for (c, out) in hard.iter().zip(counts.iter_mut()) {
            // 1.20 counts the pods of every node in an eligible domain; releases with the
            // inclusion policies, only those of nodes that pass them.
            if c.inclusion.is_some() && !(all_keys && included.by(c)) {
                continue;
            }
            // A node outside the eligible domains adds nothing (upstream: nil counter).
            let value = l.get(&c.topology_key).map(String::as_str).unwrap_or("");
            let Some(n) = out.per_value.get_mut(value) else {
                continue;
            };
            let matching = node
                .alloc
                .pods
                .iter()
                .filter(|p| {
                    !p.terminating
                        && p.namespace == pod.namespace
                        && c.selector.as_ref().is_some_and(|s| s.matches(&p.labels))
                })
                .count();
            *n = n.saturating_add(i32::try_from(matching).unwrap_or(i32::MAX));
        }
    }
    for out in &mut counts {
        out.min = out.per_value.values().copied().min().unwrap_or(i32::MAX);
    }
    SpreadState {
        constraints: counts,
        unstated: None,
    }
}

/// `existing` added to (`delta` 1) or removed from (−1) `node`: kube-scheduler's
/// `updateWithPod` — a pod of the same namespace on a node carrying every constraint's key
/// counts in each constraint whose selector it matches (like upstream, whether or not it is
/// terminating). The minimum is then recomputed over every domain; upstream tracks only the
/// two smallest domains, which after several re-additions can report a larger minimum than
/// the true one (Loadstar keeps the exact one).
pub fn update_with_pod(
    state: &mut SpreadState,
    pod: &PodInfo,
    constraints: &[SpreadConstraint],
    existing: &PodOnNode,
    node: &NodeView,
    delta: i64,
) {
    if existing.namespace != pod.namespace {
        return;
    }
    let l = node.labels_or_empty();
    let hard = hard_constraints(constraints);
    if !hard.iter().all(|c| l.contains_key(&c.topology_key)) {
        return;
    }
    let included = Included::new(pod, node);
    for (c, counts) in hard.iter().zip(state.constraints.iter_mut()) {
        if !c
            .selector
            .as_ref()
            .is_some_and(|s| s.matches(&existing.labels))
            || (c.inclusion.is_some() && !included.by(c))
        {
            continue;
        }
        if let Some(n) = counts.per_value.get_mut(&l[&c.topology_key]) {
            *n = n.saturating_add(i32::try_from(delta).unwrap_or(0));
            counts.min = counts.per_value.values().copied().min().unwrap_or(i32::MAX);
        }
    }
}

/// Whether a node's domain and pods count for a constraint, the node's checks made at most
/// once: upstream's `matchNodeInclusionPolicies` for a constraint that states its policies,
/// else the pod's node affinity (1.20, and the policies' defaults).
struct Included<'a> {
    pod: &'a PodInfo,
    node: &'a NodeView,
    affinity: std::cell::OnceCell<bool>,
    tolerated: std::cell::OnceCell<bool>,
}

impl<'a> Included<'a> {
    fn new(pod: &'a PodInfo, node: &'a NodeView) -> Self {
        Included {
            pod,
            node,
            affinity: std::cell::OnceCell::new(),
            tolerated: std::cell::OnceCell::new(),
        }
    }

    fn affinity(&self) -> bool {
        *self
            .affinity
            .get_or_init(|| pod_matches_node(self.pod, self.node))
    }

    fn by(&self, c: &SpreadConstraint) -> bool {
        match c.inclusion {
            None => self.affinity(),
            Some(NodeInclusion {
                honor_affinity,
                honor_taints,
            }) => {
                (!honor_affinity || self.affinity())
                    && (!honor_taints
                        || *self
                            .tolerated
                            .get_or_init(|| first_untolerated(self.pod, self.node).is_none()))
            }
        }
    }
}

/// The filter verdict for one node given the PreFilter state.
pub fn check(
    state: &SpreadState,
    pod: &PodInfo,
    constraints: &[SpreadConstraint],
    node: &NodeView,
) -> Result<(), Reason> {
    let hard = constraints
        .iter()
        .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule);
    let l = node.labels_or_empty();
    for (c, counts) in hard.zip(&state.constraints) {
        let Some(value) = l.get(&c.topology_key) else {
            return Err(REASON_MISSING_LABEL.into());
        };
        let self_match = i64::from(c.selector.as_ref().is_some_and(|s| s.matches(&pod.labels)));
        let matching = i64::from(counts.per_value.get(value).copied().unwrap_or(0));
        // Upstream's `minMatchNum` with `minDomains` (1.25+): too few domains, minimum 0.
        let domains = i64::try_from(counts.per_value.len()).unwrap_or(i64::MAX);
        let min = if domains < i64::from(c.min_domains) {
            0
        } else {
            i64::from(counts.min)
        };
        let skew = matching + self_match - min;
        if skew > i64::from(c.max_skew) {
            return Err(REASON_CONSTRAINTS.into());
        }
    }
    Ok(())
}

/// The topology spread filter and score.
#[derive(Debug, Clone, Default)]
pub struct PodTopologySpread {
    /// Constraints for pods that declare none (selectors filled in per pod).
    defaults: Vec<SpreadConstraint>,
}

impl PodTopologySpread {
    /// Builds it from [`Args`], validated as upstream does.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let a: Args = parse_args(NAME, args)?;
        Ok(PodTopologySpread {
            defaults: default_constraints(&a)?,
        })
    }

    /// The pod's effective constraints: its own, else the defaults with the pod's default
    /// selector (none when nothing selects the pod); those that state no node inclusion
    /// policy get `unstated` (the cluster's release's counting, see
    /// `ClusterSnapshot::spread_default_inclusion`).
    pub fn constraints<'a>(
        &'a self,
        pod: &'a PodInfo,
        unstated: Option<NodeInclusion>,
    ) -> Cow<'a, [SpreadConstraint]> {
        let cs = self.own_or_default(pod);
        match unstated {
            Some(u) if cs.iter().any(|c| c.inclusion.is_none()) => Cow::Owned(
                cs.iter()
                    .map(|c| SpreadConstraint {
                        inclusion: c.inclusion.or(Some(u)),
                        ..c.clone()
                    })
                    .collect(),
            ),
            _ => cs,
        }
    }

    fn own_or_default<'a>(&'a self, pod: &'a PodInfo) -> Cow<'a, [SpreadConstraint]> {
        if !pod.spread_constraints.is_empty() {
            return Cow::Borrowed(&pod.spread_constraints);
        }
        match &pod.default_spread_selector {
            Some(sel) if !self.defaults.is_empty() => Cow::Owned(
                self.defaults
                    .iter()
                    .map(|c| SpreadConstraint {
                        selector: Some(sel.clone()),
                        ..c.clone()
                    })
                    .collect(),
            ),
            _ => Cow::Borrowed(&[]),
        }
    }
}

impl FilterPlugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn skips(&self, state: Option<&PreFilterState>, pod: &PodInfo) -> bool {
        // PreFilter returns no state exactly when the pod has no hard constraint.
        state.is_none() && hard_constraints(&self.own_or_default(pod)).is_empty()
    }

    fn prefilter(&self, ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<PreFilterState> {
        let unstated = ctx.snapshot.spread_default_inclusion;
        let cs = self.constraints(pod, unstated);
        if hard_constraints(&cs).is_empty() {
            return None;
        }
        let mut state = prefilter_state(ctx.snapshot.nodes(), pod, &cs);
        state.unstated = unstated;
        Some(Box::new(state))
    }

    fn filter_prepared(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        node: &NodeView,
    ) -> Result<(), Reason> {
        match state.and_then(|s| s.downcast_ref::<SpreadState>()) {
            Some(s) => check(s, pod, &self.constraints(pod, s.unstated), node),
            None => self.filter(ctx, pod, node),
        }
    }

    fn prefilter_update(
        &self,
        state: &mut PreFilterState,
        pod: &PodInfo,
        existing: &PodOnNode,
        node: &NodeView,
        delta: i64,
    ) {
        if let Some(s) = state.downcast_mut::<SpreadState>() {
            update_with_pod(
                s,
                pod,
                &self.constraints(pod, s.unstated),
                existing,
                node,
                delta,
            );
        }
    }

    /// Skew can change when matching pods are evicted; a node missing a topology label
    /// stays unusable (upstream: `UnschedulableAndUnresolvable`).
    fn preemption_may_help(&self, reason: &str) -> bool {
        reason != REASON_MISSING_LABEL
    }

    /// Without a PreFilter state (a single-node check), computes it on the spot.
    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        let cs = self.constraints(pod, ctx.snapshot.spread_default_inclusion);
        if hard_constraints(&cs).is_empty() {
            return Ok(());
        }
        check(
            &prefilter_state(ctx.snapshot.nodes(), pod, &cs),
            pod,
            &cs,
            node,
        )
    }
}

/// The well-known hostname label, which upstream's spreading score counts per node.
pub const HOSTNAME_LABEL: &str = "kubernetes.io/hostname";

fn matching_pods(node: &NodeView, c: &SpreadConstraint, namespace: &str) -> i64 {
    let n = node
        .alloc
        .pods
        .iter()
        .filter(|p| {
            !p.terminating
                && p.namespace == namespace
                && c.selector.as_ref().is_some_and(|s| s.matches(&p.labels))
        })
        .count();
    i64::try_from(n).unwrap_or(i64::MAX)
}

impl ScorePlugin for PodTopologySpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let cs = self.constraints(pod, ctx.snapshot.spread_default_inclusion);
        let soft: Vec<&SpreadConstraint> = cs
            .iter()
            .filter(|c| c.when_unsatisfiable == WhenUnsatisfiable::ScheduleAnyway)
            .collect();
        if soft.is_empty() {
            out.fill(MAX_NODE_SCORE);
            return;
        }
        let has_keys =
            |l: &BTreeMap<String, String>| soft.iter().all(|c| l.contains_key(&c.topology_key));
        // Domains of the feasible nodes, keyed like upstream's pairs (by key, not by
        // constraint: two constraints on one key share a count).
        let ignored: Vec<bool> = nodes
            .iter()
            .map(|n| !has_keys(n.labels_or_empty()))
            .collect();
        let mut counts: HashMap<&str, HashMap<&str, i64>> = HashMap::new();
        let mut sizes = vec![0usize; soft.len()];
        for (n, _) in nodes.iter().zip(&ignored).filter(|(_, ig)| !**ig) {
            let l = n.labels_or_empty();
            for (i, c) in soft.iter().enumerate() {
                if c.topology_key == HOSTNAME_LABEL {
                    continue;
                }
                let values = counts.entry(c.topology_key.as_str()).or_default();
                if !values.contains_key(l[&c.topology_key].as_str()) {
                    values.insert(l[&c.topology_key].as_str(), 0);
                    sizes[i] += 1;
                }
            }
        }
        let kept = ignored.iter().filter(|ig| !**ig).count();
        let weights: Vec<f64> = soft
            .iter()
            .zip(&sizes)
            .map(|(c, &sz)| {
                let sz = if c.topology_key == HOSTNAME_LABEL {
                    kept
                } else {
                    sz
                };
                ((sz + 2) as f64).ln()
            })
            .collect();
        for node in ctx.snapshot.nodes() {
            let l = node.labels_or_empty();
            if !has_keys(l) {
                continue;
            }
            let included = Included::new(pod, node);
            for c in &soft {
                if !included.by(c) {
                    continue;
                }
                if let Some(n) = counts
                    .get_mut(c.topology_key.as_str())
                    .and_then(|values| values.get_mut(l[&c.topology_key].as_str()))
                {
                    *n += matching_pods(node, c, &pod.namespace);
                }
            }
        }
        for ((o, n), ig) in out.iter_mut().zip(nodes).zip(&ignored) {
            if *ig {
                *o = -1;
                continue;
            }
            let l = n.labels_or_empty();
            let mut raw = 0.0;
            for (c, w) in soft.iter().zip(&weights) {
                let Some(value) = l.get(&c.topology_key) else {
                    continue;
                };
                let cnt = if c.topology_key == HOSTNAME_LABEL {
                    matching_pods(n, c, &pod.namespace)
                } else {
                    counts
                        .get(c.topology_key.as_str())
                        .and_then(|values| values.get(value.as_str()))
                        .copied()
                        .unwrap_or(0)
                };
                raw += cnt as f64 * w + f64::from(c.max_skew - 1);
            }
            *o = raw as i64;
        }
        let valid = out
            .iter()
            .zip(&ignored)
            .filter(|(_, ig)| !**ig)
            .map(|(o, _)| *o);
        let min = valid.clone().min().unwrap_or(0);
        let max = valid.max().unwrap_or(0).max(0);
        for (o, ig) in out.iter_mut().zip(&ignored) {
            *o = if *ig {
                0
            } else if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max + min - *o) / max
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use loadstar_framework::snapshot::{
        LabelSelector, NodeSelectorTerm, PodOnNode, SelectorOp, SelectorRequirement, Taint,
        TaintEffect, Toleration,
    };
    use loadstar_testkit::snapshot::*;

    fn l(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn node(name: &str, zone: Option<&str>, web_pods: usize) -> NodeView {
        let mut n = edit_kube(kube_node(name, 8000, 32 * GIB), |k| {
            k.labels = l(&[("kubernetes.io/hostname", name)]);
            if let Some(z) = zone {
                k.labels.insert("zone".into(), z.into());
            }
        });
        let mut alloc = (*n.alloc).clone();
        alloc.set_pods(
            (0..web_pods)
                .map(|i| PodOnNode {
                    uid: format!("{name}-{i}"),
                    namespace: "ns".into(),
                    labels: l(&[("app", "web")]),
                    ..Default::default()
                })
                .collect(),
        );
        n.alloc = Arc::new(alloc);
        n
    }

    fn spread(max_skew: i32, key: &str) -> PodInfo {
        let mut p = pod(100, MIB);
        p.namespace = "ns".into();
        p.labels = l(&[("app", "web")]);
        p.spread_constraints = vec![SpreadConstraint {
            max_skew,
            topology_key: key.into(),
            when_unsatisfiable: WhenUnsatisfiable::DoNotSchedule,
            selector: Some(LabelSelector {
                match_labels: l(&[("app", "web")]),
                ..Default::default()
            }),
            min_domains: 0,
            inclusion: None,
        }];
        p
    }

    fn feasible(nodes: Vec<NodeView>, p: &PodInfo) -> Vec<String> {
        feasible_names(
            vec![
                Box::new(crate::node_affinity::NodeAffinity),
                Box::new(PodTopologySpread::default()),
            ],
            nodes,
            p,
        )
    }

    #[test]
    fn skew_is_measured_against_the_emptiest_zone() {
        // Zone a: 2 web pods, zone b: 1, zone c: 1. With maxSkew 1 the pod goes to b or c.
        let nodes = || {
            vec![
                node("a1", Some("a"), 2),
                node("b1", Some("b"), 1),
                node("c1", Some("c"), 1),
                node("x", None, 0),
            ]
        };
        assert_eq!(feasible(nodes(), &spread(1, "zone")), vec!["b1", "c1"]);
        assert_eq!(
            feasible(nodes(), &spread(2, "zone")),
            vec!["a1", "b1", "c1"]
        );
        let snap = snapshot(nodes());
        assert_eq!(
            PodTopologySpread::default().filter(&ctx(&snap), &spread(1, "zone"), &snap.nodes()[3]),
            Err(REASON_MISSING_LABEL.into())
        );
    }

    /// Required node affinity to zones b and c.
    fn only_zones_b_and_c() -> Vec<NodeSelectorTerm> {
        vec![NodeSelectorTerm {
            expressions: vec![SelectorRequirement {
                key: "zone".into(),
                op: SelectorOp::In,
                values: vec!["b".into(), "c".into()],
            }],
            fields: vec![],
        }]
    }

    #[test]
    fn with_fewer_domains_than_min_domains_the_minimum_is_zero() {
        // Zones a and b hold 1 web pod each. maxSkew 1: any zone would do (skew 1)...
        let nodes = || vec![node("a1", Some("a"), 1), node("b1", Some("b"), 1)];
        assert_eq!(feasible(nodes(), &spread(1, "zone")), vec!["a1", "b1"]);
        // ...but with minDomains 3 only two domains exist, so the minimum counts as 0 and
        // a second pod in either zone would be a skew of 2: none fits until a third zone
        // appears (upstream's `minMatchNum`).
        let mut p = spread(1, "zone");
        p.spread_constraints[0].min_domains = 3;
        assert!(feasible(nodes(), &p).is_empty());
        // Three zones of one pod each: minDomains 3 is met (minimum 1, every zone fits);
        // minDomains 4 is not (minimum 0, none fits).
        let three = || {
            vec![
                node("a1", Some("a"), 1),
                node("b1", Some("b"), 1),
                node("c1", Some("c"), 1),
            ]
        };
        assert_eq!(feasible(three(), &p), vec!["a1", "b1", "c1"]);
        p.spread_constraints[0].min_domains = 4;
        assert!(feasible(three(), &p).is_empty());
        // minDomains 2 with two domains: as without it.
        p.spread_constraints[0].min_domains = 2;
        assert_eq!(feasible(nodes(), &p), vec!["a1", "b1"]);
        // Only eligible domains count: with the pod held to zones b and c, three zones
        // exist but two are eligible, so minDomains 3 is not met.
        p.spread_constraints[0].min_domains = 3;
        p.required_affinity = only_zones_b_and_c();
        assert!(feasible(three(), &p).is_empty());
        p.spread_constraints[0].min_domains = 2;
        assert_eq!(feasible(three(), &p), vec!["b1", "c1"]);
    }

    #[test]
    fn domains_outside_the_pods_node_affinity_do_not_count() {
        // The pod may only go to zones b and c: zone a's empty domain does not count, so
        // the minimum is b's 1 and c (2 + 1 - 1 > 1) fails; a is NodeAffinity's to reject.
        let nodes = vec![
            node("a1", Some("a"), 0),
            node("b1", Some("b"), 1),
            node("c1", Some("c"), 2),
        ];
        let mut p = spread(1, "zone");
        p.required_affinity = only_zones_b_and_c();
        assert_eq!(feasible(nodes.clone(), &p), vec!["b1"]);
        let snap = snapshot(nodes.clone());
        assert_eq!(
            PodTopologySpread::default().filter(&ctx(&snap), &p, &snap.nodes()[0]),
            Ok(()),
            "a node outside the eligible domains adds nothing and passes this filter"
        );
        // `nodeAffinityPolicy: Ignore`: zone a's empty domain counts though the pod cannot go
        // there, the minimum is 0, and neither b1 nor c1 fits.
        policies(&mut p, false, false);
        assert_eq!(feasible(nodes.clone(), &p), Vec::<String>::new());
        // Without the affinity zone a counts: minimum 0, only a fits.
        p.spread_constraints[0].inclusion = None;
        p.required_affinity.clear();
        assert_eq!(feasible(nodes, &p), vec!["a1"]);
    }

    fn policies(p: &mut PodInfo, honor_affinity: bool, honor_taints: bool) {
        for c in &mut p.spread_constraints {
            c.inclusion = Some(NodeInclusion {
                honor_affinity,
                honor_taints,
            });
        }
    }

    fn tainted(n: NodeView) -> NodeView {
        edit_kube(n, |k| {
            k.taints = vec![Taint {
                key: "dedicated".into(),
                value: "batch".into(),
                effect: TaintEffect::NoSchedule,
            }]
        })
    }

    #[test]
    fn node_taints_policy_honor_leaves_out_domains_of_untolerated_nodes() {
        // Zones a and b hold 1 web pod each; zone c's only node is tainted and empty.
        let nodes = || {
            vec![
                node("a1", Some("a"), 1),
                node("b1", Some("b"), 1),
                tainted(node("c1", Some("c"), 0)),
            ]
        };
        // Ignore (the default): zone c counts, the minimum is 0, only c1 fits this filter
        // (TaintToleration, not in this profile, would then refuse it).
        let mut p = spread(1, "zone");
        assert_eq!(feasible(nodes(), &p), vec!["c1"]);
        policies(&mut p, true, false);
        assert_eq!(feasible(nodes(), &p), vec!["c1"]);
        // Honor: zone c does not count, the minimum is 1, every node passes.
        policies(&mut p, true, true);
        assert_eq!(feasible(nodes(), &p), vec!["a1", "b1", "c1"]);
        // A pod tolerating the taint counts zone c again.
        p.tolerations = vec![Toleration {
            key: "dedicated".into(),
            exists: true,
            ..Default::default()
        }];
        assert_eq!(feasible(nodes(), &p), vec!["c1"]);
        // A PreferNoSchedule taint never excludes a node.
        p.tolerations.clear();
        let soft_taint = || {
            let mut n = nodes();
            n[2] = edit_kube(n[2].clone(), |k| {
                k.taints[0].effect = TaintEffect::PreferNoSchedule
            });
            n
        };
        assert_eq!(feasible(soft_taint(), &p), vec!["c1"]);
    }

    fn ssd(n: NodeView) -> NodeView {
        edit_kube(n, |k| {
            k.labels.insert("disk".into(), "ssd".into());
        })
    }

    /// Zone b has an SSD node b1 (empty) and a plain node b2 with 2 web pods; zone c an
    /// empty SSD node. The pod, spread by zone with maxSkew 1, needs an SSD.
    fn ssd_zones() -> (Vec<NodeView>, PodInfo) {
        let nodes = vec![
            ssd(node("b1", Some("b"), 0)),
            node("b2", Some("b"), 2),
            ssd(node("c1", Some("c"), 0)),
        ];
        let mut p = spread(1, "zone");
        p.node_selector = l(&[("disk", "ssd")]);
        (nodes, p)
    }

    #[test]
    fn a_1_24_or_later_cluster_counts_unstated_constraints_as_current_releases_do() {
        let (nodes, mut p) = ssd_zones();
        let mut snap = snapshot(nodes);
        let plugin = PodTopologySpread::default();
        let verdicts =
            |snap: &loadstar_framework::snapshot::ClusterSnapshot, p: &PodInfo| -> Vec<bool> {
                let c = ctx(snap);
                let state = plugin.prefilter(&c, p);
                snap.nodes()
                    .iter()
                    .map(|n| plugin.filter_prepared(&c, state.as_ref(), p, n).is_ok())
                    .collect()
            };
        // kube-scheduler 1.20–1.23: b2's pods count in zone b; only zone c fits.
        assert_eq!(verdicts(&snap, &p), [false, false, true]);
        // 1.24+: b2 fails the pod's selector, so its pods do not count; zone b is 0.
        snap.spread_default_inclusion = Some(NodeInclusion::CURRENT_DEFAULT);
        assert_eq!(verdicts(&snap, &p), [true, true, true]);
        // The PreFilter state remembers how it counted: updates agree with it.
        let c = ctx(&snap);
        let mut state = plugin.prefilter(&c, &p).expect("hard constraint");
        let b2 = &snap.nodes()[1];
        let victim = b2.alloc.pods.first().expect("a pod").clone();
        plugin.prefilter_update(&mut state, &p, &victim, b2, -1);
        let s = state.downcast_ref::<SpreadState>().expect("spread state");
        assert_eq!(
            s.constraints[0].per_value["b"], 0,
            "b2's pods never counted"
        );
        assert_eq!(s.unstated, Some(NodeInclusion::CURRENT_DEFAULT));
        // A stated policy wins over the cluster's default.
        policies(&mut p, false, false);
        assert_eq!(verdicts(&snap, &p), [false, false, true]);
    }

    #[test]
    fn stated_policies_count_only_pods_on_nodes_that_pass_them() {
        let (nodes, mut p) = ssd_zones();
        // 1.20 counts b2's pods in zone b (b = 2, c = 0): only c1 fits.
        assert_eq!(feasible(nodes.clone(), &p), vec!["c1"]);
        // Stated, as the releases with the fields count: b2 does not pass, zone b is 0.
        policies(&mut p, true, false);
        assert_eq!(feasible(nodes.clone(), &p), vec!["b1", "c1"]);
        // Removing a pod keeps the state equal to a recount: one on b1 (which passes) is
        // taken off zone b, one on b2 (which does not) changes nothing.
        let mut nodes = nodes;
        nodes[0] = ssd(node("b1", Some("b"), 1));
        let full = prefilter_state(&nodes, &p, &p.spread_constraints);
        assert_eq!(full.constraints[0].per_value["b"], 1);
        updates_match_recounts(&nodes, &p);
    }

    #[test]
    fn soft_constraints_count_by_their_policies() {
        // Zone a: 2 web pods on a tainted node and none on a1; zone b: 1.
        let nodes = vec![
            node("a1", Some("a"), 0),
            tainted(node("a2", Some("a"), 2)),
            node("b1", Some("b"), 1),
        ];
        let snap = snapshot(nodes);
        let refs: Vec<&NodeView> = vec![&snap.nodes()[0], &snap.nodes()[2]];
        let score = |p: &PodInfo| {
            let mut out = vec![0; 2];
            ScorePlugin::score(
                &PodTopologySpread::default(),
                &ctx(&snap),
                p,
                &refs,
                &mut out,
            );
            out
        };
        let mut p = spread(1, "zone");
        p.spread_constraints[0].when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
        // Ignore: zone a counts a2's 2 pods, b1's zone is emptier.
        let ignore = score(&p);
        assert!(ignore[1] > ignore[0], "{ignore:?}");
        // Honor: a2 does not count, zone a (0) is emptier than b (1).
        policies(&mut p, true, true);
        let honor = score(&p);
        assert!(honor[0] > honor[1], "{honor:?}");
    }

    #[test]
    fn soft_constraints_other_namespaces_and_terminating_pods_do_not_filter() {
        let mut nodes = vec![node("a1", Some("a"), 3), node("b1", Some("b"), 0)];
        let mut p = spread(1, "zone");
        p.spread_constraints[0].when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
        assert_eq!(feasible(nodes.clone(), &p).len(), 2);
        let mut alloc = (*nodes[0].alloc).clone();
        for (i, q) in alloc.pods.iter_mut().map(Arc::make_mut).enumerate() {
            if i == 0 {
                q.namespace = "other".into();
            } else {
                q.terminating = true;
            }
        }
        nodes[0].alloc = Arc::new(alloc);
        assert_eq!(feasible(nodes, &spread(1, "zone")).len(), 2);
    }

    fn y(s: &str) -> serde_norway::Value {
        serde_norway::from_str::<serde_norway::Value>(s).expect("yaml")
    }

    #[test]
    fn default_constraints_are_validated_as_upstream_does() {
        let built = |s: &str| PodTopologySpread::from_args(&y(s));
        // Unset: System defaults; listed: List.
        assert_eq!(built("{}").expect("ok").defaults, system_defaults());
        assert_eq!(
            built("defaultConstraints: []").expect("ok").defaults,
            system_defaults()
        );
        assert!(
            built("defaultingType: List")
                .expect("ok")
                .defaults
                .is_empty()
        );
        let listed = built(
            "defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
        )
        .expect("ok");
        assert_eq!(listed.defaults.len(), 1);
        for (bad, path) in [
            (
                "{defaultingType: System, defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]}",
                "defaultingType",
            ),
            ("defaultingType: Sometimes", "defaultingType"),
            (
                "defaultConstraints: [{maxSkew: 0, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
                "defaultConstraints[0].maxSkew",
            ),
            (
                "defaultConstraints: [{maxSkew: 1, topologyKey: '', whenUnsatisfiable: DoNotSchedule}]",
                "defaultConstraints[0].topologyKey",
            ),
            (
                "defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: Never}]",
                "defaultConstraints[0].whenUnsatisfiable",
            ),
            (
                "defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule, labelSelector: {}}]",
                "defaultConstraints[0].labelSelector",
            ),
            (
                "defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}, {maxSkew: 2, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
                "defaultConstraints[1]",
            ),
        ] {
            let err = built(bad).expect_err(bad).to_string();
            assert!(err.contains(path), "{bad}: {err}");
        }
    }

    #[test]
    fn pods_without_constraints_get_the_defaults_with_their_default_selector() {
        // Zone a: 2 web pods, b: 0. A hard default of maxSkew 1 by zone.
        let nodes = vec![
            node("a1", Some("a"), 2),
            node("b1", Some("b"), 0),
            node("x", None, 0),
        ];
        let plugin = PodTopologySpread::from_args(&y(
            "defaultConstraints: [{maxSkew: 1, topologyKey: zone, whenUnsatisfiable: DoNotSchedule}]",
        ))
        .expect("ok");
        let snap = snapshot(nodes);
        let verdicts = |p: &PodInfo| -> Vec<Result<(), Reason>> {
            snap.nodes()
                .iter()
                .map(|n| plugin.filter(&ctx(&snap), p, n))
                .collect()
        };
        let mut p = pod(100, MIB);
        p.namespace = "ns".into();
        p.labels = l(&[("app", "web")]);
        // Nothing selects it: no default constraints.
        assert_eq!(verdicts(&p), vec![Ok(()), Ok(()), Ok(())]);
        p.default_spread_selector = Some(LabelSelector {
            match_labels: l(&[("app", "web")]),
            ..Default::default()
        });
        assert_eq!(
            verdicts(&p),
            vec![
                Err(REASON_CONSTRAINTS.into()),
                Ok(()),
                Err(REASON_MISSING_LABEL.into())
            ]
        );
        // Its own constraints win over the defaults.
        let mut own = spread(5, "zone");
        own.default_spread_selector = p.default_spread_selector.clone();
        assert_eq!(verdicts(&own)[0], Ok(()));
    }

    #[test]
    fn soft_constraints_score_emptier_domains_higher() {
        // Zone a: 3 web pods, b: 1, c: 0; node x has no zone (ignored: 0).
        let nodes = vec![
            node("a1", Some("a"), 3),
            node("b1", Some("b"), 1),
            node("c1", Some("c"), 0),
            node("x", None, 0),
        ];
        let mut p = spread(1, "zone");
        p.spread_constraints[0].when_unsatisfiable = WhenUnsatisfiable::ScheduleAnyway;
        let snap = snapshot(nodes);
        let refs: Vec<&NodeView> = snap.nodes().iter().collect();
        let mut out = vec![0; 4];
        ScorePlugin::score(
            &PodTopologySpread::default(),
            &ctx(&snap),
            &p,
            &refs,
            &mut out,
        );
        // Raw = count × ln(3 + 2): a 4.83 → 4, b 1.61 → 1, c 0; 100 × (4 + 0 − raw) / 4.
        assert_eq!(out, vec![0, 75, 100, 0]);
        let plain = pod(100, MIB);
        ScorePlugin::score(
            &PodTopologySpread::default(),
            &ctx(&snap),
            &plain,
            &refs,
            &mut out,
        );
        assert_eq!(out, vec![100; 4]);
    }

    #[test]
    fn removing_a_pod_updates_the_state_as_recomputing_would() {
        let nodes = vec![
            node("a1", Some("a"), 2),
            node("a2", Some("a"), 1),
            node("b1", Some("b"), 1),
            node("c1", Some("c"), 3),
        ];
        let p = spread(1, "zone");
        updates_match_recounts(&nodes, &p);
    }

    /// Removing each pod (as preemption does) and adding it back keeps the PreFilter state
    /// equal to a recount.
    fn updates_match_recounts(nodes: &[NodeView], p: &PodInfo) {
        let cs = p.spread_constraints.clone();
        let full = prefilter_state(nodes, p, &cs);
        for (i, n) in nodes.iter().enumerate() {
            for victim in &n.alloc.pods {
                let mut fewer = nodes.to_vec();
                fewer[i] = edit_alloc(fewer[i].clone(), |a| {
                    a.remove_pod(&victim.uid);
                });
                let mut s = full.clone();
                update_with_pod(&mut s, p, &cs, victim, n, -1);
                assert_eq!(s, prefilter_state(&fewer, p, &cs), "without {}", victim.uid);
                update_with_pod(&mut s, p, &cs, victim, n, 1);
                assert_eq!(s, full, "and back with {}", victim.uid);
            }
        }
    }
}
