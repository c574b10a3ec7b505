//! `InterPodAffinity` filter: required pod affinity and anti-affinity, both the incoming
//! pod's and existing pods' anti-affinity against it, as kube-scheduler 1.20's plugin
//! (`pkg/scheduler/framework/plugins/interpodaffinity/filtering.go`).
//!
//! PreFilter counts, once per pod, matching pods per topology pair `(key, value)`:
//! - existing pods' required anti-affinity terms that match the incoming pod, by the
//!   existing pod's node's value of the term's key;
//! - existing pods that match *all* of the incoming pod's required affinity terms, for each
//!   term's key on their node;
//! - existing pods that match each incoming anti-affinity term.
//!
//! A node then fails when (in this order, reasons as upstream):
//! 1. it lacks a required affinity term's key, or a term's pair has no matching pod — unless
//!    no pod matches anywhere and the pod matches all its own terms (the first pod of a
//!    group that wants to be together);
//! 2. an incoming anti-affinity term's pair on the node has a matching pod;
//! 3. any of its label pairs carries an existing pod's anti-affinity against the pod.
//!
//! As a score (upstream's `scoring.go`), every existing pod adds, per topology pair of its
//! node: the incoming pod's preferred affinity weights it matches (anti-affinity: minus),
//! `hardPodAffinityWeight` (default 1) for each of its own required affinity terms the
//! incoming pod matches, and its preferred (anti-)affinity weights the incoming pod
//! matches. A node scores the sum over its label pairs; sums are scaled from the minimum
//! (0 at most) to the maximum (0 at least) onto 0–100. No pair at all: every node scores 0.
//!
//! Terms match a pod by namespace (the term owner's own when the term lists none and has no
//! namespace selector) and label selector (an absent selector matches nothing). A term's
//! `namespaceSelector` (1.22+) adds the namespaces whose labels it matches, read from the
//! snapshot's namespace table: an existing pod of a namespace the table lacks matches only
//! the empty selector, and the incoming pod's namespace reads as unlabelled when the table
//! lacks it (upstream's `mergeAffinityTermNamespacesIfNotEmpty` and
//! `GetNamespaceLabelsSnapshot`). Nodes without Kubernetes facts have no labels.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use loadstar_framework::snapshot::{
    AffinityTerm, AntiAffinityIndex, NamespaceLabels, NodeDigest, NodeView, PodInfo, PodOnNode,
};
use loadstar_framework::{
    CycleContext, FilterPlugin, MAX_NODE_SCORE, PreFilterState, REASON_SEPARATOR, Reason,
    ScorePlugin,
};
use serde::{Deserialize, Serialize};

use crate::args::{PluginError, args_to_yaml, parse_args};
use crate::rows::{RowCode, RowCodes, code_at};

/// Plugin name.
pub const NAME: &str = "InterPodAffinity";
/// Upstream's umbrella reason, given with each specific one.
pub const REASON_AFFINITY_NOT_MATCH: &str = "node(s) didn't match pod affinity/anti-affinity";
/// The pod's required affinity is not met.
pub const REASON_AFFINITY_RULES: &str = "node(s) didn't match pod affinity rules";
/// The pod's required anti-affinity is not met.
pub const REASON_ANTI_AFFINITY_RULES: &str = "node(s) didn't match pod anti-affinity rules";
/// An existing pod's required anti-affinity rejects the pod.
pub const REASON_EXISTING_ANTI_AFFINITY: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Matching pods per topology pair: key → value → count (nested so lookups borrow `&str`).
pub type PairCounts = HashMap<String, HashMap<String, i64>>;

/// The PreFilter state: three counts per topology pair.
#[derive(Debug, Default, Clone, PartialEq)]
pub struct AffinityState {
    /// Existing pods' anti-affinity terms that match the incoming pod.
    pub existing_anti: PairCounts,
    /// Existing pods matching all the incoming pod's affinity terms.
    pub affinity: PairCounts,
    /// Existing pods matching the incoming pod's anti-affinity terms.
    pub anti: PairCounts,
    /// The cluster's namespace labels the counts were made with (for namespace selectors;
    /// kept so updates during preemption match as the PreFilter did).
    pub namespaces: Option<Arc<NamespaceLabels>>,
}

/// Adds `by` to the pair `(key, node's value of key)`; nothing when the node lacks the key.
/// Existing entries are updated in place (no allocation per matching pod). Pairs (and keys)
/// that reach zero are dropped, as kube-scheduler's `topologyToMatchedTermCount` does: the
/// PreFilter's "first pod of a group" rule reads whether any pair is left, and its
/// `AddPod`/`RemovePod` updates must give back the same map; the scores read a missing
/// pair as 0.
fn add_to_pair(
    counts: &mut PairCounts,
    key: &str,
    node_labels: &BTreeMap<String, String>,
    by: i64,
) {
    let Some(v) = node_labels.get(key) else {
        return;
    };
    match counts.get_mut(key) {
        Some(values) => match values.get_mut(v.as_str()) {
            Some(n) => {
                *n += by;
                if *n == 0 {
                    values.remove(v.as_str());
                    if values.is_empty() {
                        counts.remove(key);
                    }
                }
            }
            None if by != 0 => {
                values.insert(v.clone(), by);
            }
            None => {}
        },
        None if by != 0 => {
            counts.insert(key.to_string(), HashMap::from([(v.clone(), by)]));
        }
        None => {}
    }
}

/// Whether a pod of `namespace` with `pod_labels` matches every one of `terms` (none: no).
/// `incoming`: the pod is the one being scheduled (its namespace's labels are read as
/// [`NamespaceLabels::of_incoming`]), else an existing pod.
fn matches_all(
    terms: &[AffinityTerm],
    namespace: &str,
    pod_labels: &BTreeMap<String, String>,
    namespaces: Option<&NamespaceLabels>,
    incoming: bool,
) -> bool {
    !terms.is_empty()
        && terms.iter().all(|t| {
            t.matches_pod(
                namespace,
                pod_labels,
                ns_labels(namespaces, namespace, incoming),
            )
        })
}

/// The lookup of a pod's namespace labels for [`AffinityTerm::matches_pod`].
fn ns_labels<'a>(
    namespaces: Option<&'a NamespaceLabels>,
    namespace: &'a str,
    incoming: bool,
) -> impl FnOnce() -> Option<&'a BTreeMap<String, String>> + 'a {
    move || {
        if incoming {
            NamespaceLabels::of_incoming(namespaces, namespace)
        } else {
            NamespaceLabels::of_existing(namespaces, namespace)
        }
    }
}

/// What one existing pod on a node with `node_labels` adds to (`by` 1) or takes from (−1)
/// `pod`'s PreFilter counts (kube-scheduler's `updateWithPod`). `anti_terms`: whether its
/// own anti-affinity terms are to be read (false past the affinity prefix, where there are
/// none).
fn apply_pod(
    s: &mut AffinityState,
    pod: &PodInfo,
    existing: &PodOnNode,
    node_labels: &BTreeMap<String, String>,
    anti_terms: bool,
    by: i64,
) {
    let namespaces = s.namespaces.as_deref();
    if anti_terms {
        for term in &existing.pod_affinity.required_anti {
            if term.matches_pod(
                &pod.namespace,
                &pod.labels,
                ns_labels(namespaces, &pod.namespace, true),
            ) {
                add_to_pair(&mut s.existing_anti, &term.topology_key, node_labels, by);
            }
        }
    }
    let affinity = &pod.pod_affinity.required;
    if matches_all(
        affinity,
        &existing.namespace,
        &existing.labels,
        namespaces,
        false,
    ) {
        for term in affinity {
            add_to_pair(&mut s.affinity, &term.topology_key, node_labels, by);
        }
    }
    for term in &pod.pod_affinity.required_anti {
        if term.matches_pod(
            &existing.namespace,
            &existing.labels,
            ns_labels(namespaces, &existing.namespace, false),
        ) {
            add_to_pair(&mut s.anti, &term.topology_key, node_labels, by);
        }
    }
}

/// Whether the snapshot's node `index` may hold pods with terms that score other pods:
/// `false` only when the cycle's digest row for it (still current) counts none, so the
/// node's pods are never loaded. Most nodes of a cluster have none, and reading each one's
/// pod list is a cluster-wide pass's main cost.
fn may_hold_scoring_terms(
    ctx: &CycleContext<'_>,
    codes: Option<&RowCodes<ScoringHolder>>,
    index: usize,
) -> bool {
    match codes {
        Some(_) => code_at(codes, ctx, index) != 0,
        None => ctx
            .row_at(index)
            .is_none_or(|r| r.pods_with_scoring_affinity > 0),
    }
}

/// Whether the node holds pods with terms that score other pods (1) or not (0), memoised
/// per table: a pod without preferred terms of its own reads only the nodes that do.
#[derive(Debug)]
struct ScoringHolder;

impl RowCode for ScoringHolder {
    fn code(d: &NodeDigest, _: &NodeView) -> u8 {
        u8::from(d.pods_with_scoring_affinity > 0)
    }
}

/// Whether `pod` has required (anti-)affinity terms of its own: then every existing pod may
/// count, not only those with terms.
fn has_required_terms(pod: &PodInfo) -> bool {
    !pod.pod_affinity.required.is_empty() || !pod.pod_affinity.required_anti.is_empty()
}

/// Computes the PreFilter counts for `pod` over every node of the snapshot, with the
/// cluster's `namespaces` for namespace selectors.
pub fn prefilter_state(
    nodes: &[NodeView],
    pod: &PodInfo,
    namespaces: Option<&Arc<NamespaceLabels>>,
) -> AffinityState {
    let mut s = AffinityState {
        namespaces: namespaces.cloned(),
        ..AffinityState::default()
    };
    let every_pod = has_required_terms(pod);
    for node in nodes {
        add_node(&mut s, pod, node, every_pod);
    }
    s
}

/// Adds what `node`'s pods count for `pod`: all of them when `every_pod`, else only those
/// with affinity terms (then a node without any is skipped unread).
fn add_node(s: &mut AffinityState, pod: &PodInfo, node: &NodeView, every_pod: bool) {
    if !every_pod && node.alloc.pods_with_affinity == 0 {
        return;
    }
    let node_labels = node.labels_or_empty();
    let candidates = if every_pod {
        &node.alloc.pods[..]
    } else {
        node.alloc.affinity_pods()
    };
    let with_affinity = node.alloc.pods_with_affinity;
    for (i, existing) in candidates.iter().enumerate() {
        // The pod itself (already assumed somewhere) never counts.
        if existing.uid == pod.uid {
            continue;
        }
        // Pods past the affinity prefix have none: their terms are not even loaded.
        apply_pod(s, pod, existing, node_labels, i < with_affinity, 1);
    }
}

/// Whether `index`'s entries for node `n` hold in `ctx`: it covers the node, and the node's
/// row is unchanged since (else its pods are read directly).
fn current(ctx: &CycleContext<'_>, index: &AntiAffinityIndex, n: usize) -> bool {
    index.covers(n) && ctx.row_at(n).is_some()
}

/// [`prefilter_state`] for a pod without required terms of its own, where only existing
/// pods' anti-affinity counts: each distinct term of `index` is matched once, its holders
/// added when it matches; nodes the index does not cover, or edited since it was built, are
/// read directly.
fn existing_anti_state(
    ctx: &CycleContext<'_>,
    index: &AntiAffinityIndex,
    pod: &PodInfo,
) -> AffinityState {
    let nodes = ctx.snapshot.nodes();
    let mut s = AffinityState {
        namespaces: ctx.snapshot.namespaces.clone(),
        ..AffinityState::default()
    };
    let namespaces = ctx.snapshot.namespaces.as_deref();
    for (term, holders) in &index.terms {
        if !term.matches_pod(
            &pod.namespace,
            &pod.labels,
            ns_labels(namespaces, &pod.namespace, true),
        ) {
            continue;
        }
        for &(n, p) in holders {
            let n = n as usize;
            if !current(ctx, index, n) {
                continue; // edited since: read below
            }
            let node = &nodes[n];
            // The pod itself (already assumed somewhere) never counts.
            if node
                .alloc
                .pods
                .get(p as usize)
                .is_some_and(|e| e.uid == pod.uid)
            {
                continue;
            }
            add_to_pair(
                &mut s.existing_anti,
                &term.topology_key,
                node.labels_or_empty(),
                1,
            );
        }
    }
    // Every row is current: only the nodes the index leaves out are read directly (none
    // until the scheduler assumes a pod somewhere).
    if index.covered_len() == nodes.len() && ctx.current.is_some_and(|c| c.all()) {
        if !index.covers_all() {
            for n in index.uncovered() {
                add_node(&mut s, pod, &nodes[n], false);
            }
        }
        return s;
    }
    for (n, node) in nodes.iter().enumerate() {
        if !current(ctx, index, n) {
            add_node(&mut s, pod, node, false);
        }
    }
    s
}

fn count(counts: &PairCounts, key: &str, value: &str) -> i64 {
    counts
        .get(key)
        .and_then(|values| values.get(value))
        .copied()
        .unwrap_or(0)
}

/// The filter verdict for one node given the PreFilter state.
pub fn check(state: &AffinityState, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
    let node_labels = node.labels_or_empty();
    // 1. Required affinity.
    let mut pods_exist = true;
    for term in &pod.pod_affinity.required {
        match node_labels.get(&term.topology_key) {
            Some(v) => {
                if count(&state.affinity, &term.topology_key, v) <= 0 {
                    pods_exist = false;
                }
            }
            None => return Err(reason(REASON_AFFINITY_RULES)),
        }
    }
    // The first pod of a group that wants to be together: no pod matches anywhere yet and
    // the pod matches all its own terms.
    // Its own terms select it as they select existing pods (upstream matches it against the
    // namespaces the terms' selectors resolved to): an unknown namespace matches no
    // non-empty namespace selector.
    let first_of_group = state.affinity.is_empty()
        && matches_all(
            &pod.pod_affinity.required,
            &pod.namespace,
            &pod.labels,
            state.namespaces.as_deref(),
            false,
        );
    if !pods_exist && !first_of_group {
        return Err(reason(REASON_AFFINITY_RULES));
    }
    // 2. The pod's anti-affinity.
    if !state.anti.is_empty() {
        for term in &pod.pod_affinity.required_anti {
            if let Some(v) = node_labels.get(&term.topology_key)
                && count(&state.anti, &term.topology_key, v) > 0
            {
                return Err(reason(REASON_ANTI_AFFINITY_RULES));
            }
        }
    }
    // 3. Existing pods' anti-affinity.
    if !state.existing_anti.is_empty()
        && state.existing_anti.iter().any(|(k, values)| {
            node_labels
                .get(k)
                .is_some_and(|v| values.get(v).is_some_and(|n| *n > 0))
        })
    {
        return Err(reason(REASON_EXISTING_ANTI_AFFINITY));
    }
    Ok(())
}

fn reason(specific: &str) -> Reason {
    format!("{REASON_AFFINITY_NOT_MATCH}{REASON_SEPARATOR}{specific}").into()
}

/// The plugin's arguments (`InterPodAffinityArgs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct Args {
    /// Score weight of an existing pod's *required* affinity term that the incoming pod
    /// matches, 0–100 (default 1, upstream's).
    #[serde(default = "default_hard_weight")]
    pub hard_pod_affinity_weight: i32,
}

fn default_hard_weight() -> i32 {
    1
}

impl Default for Args {
    fn default() -> Self {
        Args {
            hard_pod_affinity_weight: default_hard_weight(),
        }
    }
}

/// The inter-pod affinity filter and score.
#[derive(Debug, Clone, Default)]
pub struct InterPodAffinity {
    args: Args,
}

impl InterPodAffinity {
    /// Builds it from [`Args`].
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: Args = parse_args(NAME, args)?;
        if !(0..=100).contains(&args.hard_pod_affinity_weight) {
            return Err(PluginError::invalid(
                NAME,
                "hardPodAffinityWeight",
                "must be between 0 and 100",
            ));
        }
        Ok(InterPodAffinity { args })
    }

    /// Topology pair → summed weights, for scoring `pod` (upstream's PreScore).
    fn topology_scores(&self, ctx: &CycleContext<'_>, pod: &PodInfo) -> PairCounts {
        let mine = &pod.pod_affinity;
        let preferred = !mine.preferred.is_empty() || !mine.preferred_anti.is_empty();
        let hard = i64::from(self.args.hard_pod_affinity_weight);
        let mut m = PairCounts::new();
        let namespaces = ctx.snapshot.namespaces.as_deref();
        let mut add = |key: &str, l: &BTreeMap<String, String>, w: i64| {
            add_to_pair(&mut m, key, l, w);
        };
        let codes = if preferred {
            None
        } else {
            RowCodes::<ScoringHolder>::of(ctx)
        };
        // Without terms of its own the pod is scored only by existing pods' terms: none on
        // any node, nothing to add (no pass over the nodes).
        if codes.as_deref().is_some_and(RowCodes::all_zero) {
            return m;
        }
        for (index, node) in ctx.snapshot.nodes().iter().enumerate() {
            if !preferred
                && (!may_hold_scoring_terms(ctx, codes.as_deref(), index)
                    || node.alloc.pods_with_affinity == 0)
            {
                continue;
            }
            let l = node.labels_or_empty();
            if l.is_empty() {
                continue;
            }
            let candidates = if preferred {
                &node.alloc.pods[..]
            } else {
                node.alloc.affinity_pods()
            };
            let with_affinity = node.alloc.pods_with_affinity;
            for (i, existing) in candidates.iter().enumerate() {
                let other = || existing.uid != pod.uid;
                let theirs_ns = || ns_labels(namespaces, &existing.namespace, false);
                for t in &mine.preferred {
                    if t.term
                        .matches_pod(&existing.namespace, &existing.labels, theirs_ns())
                        && other()
                    {
                        add(&t.term.topology_key, l, i64::from(t.weight));
                    }
                }
                for t in &mine.preferred_anti {
                    if t.term
                        .matches_pod(&existing.namespace, &existing.labels, theirs_ns())
                        && other()
                    {
                        add(&t.term.topology_key, l, -i64::from(t.weight));
                    }
                }
                if i >= with_affinity {
                    continue;
                }
                let theirs = &existing.pod_affinity;
                let mine_ns = || ns_labels(namespaces, &pod.namespace, true);
                if hard > 0 {
                    for t in &theirs.required {
                        if t.matches_pod(&pod.namespace, &pod.labels, mine_ns()) && other() {
                            add(&t.topology_key, l, hard);
                        }
                    }
                }
                for t in &theirs.preferred {
                    if t.term.matches_pod(&pod.namespace, &pod.labels, mine_ns()) && other() {
                        add(&t.term.topology_key, l, i64::from(t.weight));
                    }
                }
                for t in &theirs.preferred_anti {
                    if t.term.matches_pod(&pod.namespace, &pod.labels, mine_ns()) && other() {
                        add(&t.term.topology_key, l, -i64::from(t.weight));
                    }
                }
            }
        }
        m
    }
}

impl ScorePlugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let topo = self.topology_scores(ctx, pod);
        if topo.is_empty() {
            out.fill(0);
            return;
        }
        for (o, n) in out.iter_mut().zip(nodes) {
            let l = n.labels_or_empty();
            *o = topo
                .iter()
                .filter_map(|(k, values)| l.get(k).and_then(|v| values.get(v)))
                .sum();
        }
        let max = out.iter().copied().max().unwrap_or(0).max(0);
        let min = out.iter().copied().min().unwrap_or(0).min(0);
        let diff = max - min;
        for o in out.iter_mut() {
            *o = if diff > 0 {
                // Float then truncation, as upstream.
                (MAX_NODE_SCORE as f64 * ((*o - min) as f64 / diff as f64)) as i64
            } else {
                0
            };
        }
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

impl FilterPlugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn prefilter(&self, ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<PreFilterState> {
        Some(Box::new(match ctx.anti_affinity_index() {
            Some(index) if !has_required_terms(pod) => existing_anti_state(ctx, index, pod),
            _ => prefilter_state(ctx.snapshot.nodes(), pod, ctx.snapshot.namespaces.as_ref()),
        }))
    }

    /// Nothing to check: no pair counted anywhere and no required affinity of the pod's own
    /// (whose "first pod of a group" rule needs the check). Every node then passes `check`.
    fn skips(&self, state: Option<&PreFilterState>, pod: &PodInfo) -> bool {
        pod.pod_affinity.required.is_empty()
            && state
                .and_then(|s| s.downcast_ref::<AffinityState>())
                .is_some_and(|s| {
                    s.existing_anti.is_empty() && s.affinity.is_empty() && s.anti.is_empty()
                })
    }

    fn filter_prepared(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        node: &NodeView,
    ) -> Result<(), Reason> {
        match state.and_then(|s| s.downcast_ref::<AffinityState>()) {
            Some(s) => check(s, pod, node),
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
        if let Some(s) = state.downcast_mut::<AffinityState>() {
            apply_pod(s, pod, existing, node.labels_or_empty(), true, delta);
        }
    }

    /// Anti-affinity (the pod's or an existing pod's) is lifted by evicting the matching
    /// pods; the pod's own required affinity is not (upstream:
    /// `UnschedulableAndUnresolvable`).
    fn preemption_may_help(&self, reason: &str) -> bool {
        !reason
            .split(REASON_SEPARATOR)
            .any(|r| r == REASON_AFFINITY_RULES)
    }

    /// Without a PreFilter state (a single-node check), computes it on the spot.
    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        let state = prefilter_state(ctx.snapshot.nodes(), pod, ctx.snapshot.namespaces.as_ref());
        check(&state, pod, node)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    use loadstar_framework::snapshot::{LabelSelector, PodAffinity, PodOnNode, SharedAffinity};
    use loadstar_testkit::snapshot::*;

    fn l(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn term(app: &str, key: &str) -> AffinityTerm {
        AffinityTerm {
            namespaces: vec!["ns".into()],
            selector: Some(LabelSelector {
                match_labels: l(&[("app", app)]),
                ..Default::default()
            }),
            topology_key: key.into(),
            ..Default::default()
        }
    }

    fn zoned(name: &str, zone: Option<&str>, pods: Vec<PodOnNode>) -> NodeView {
        let mut n = edit_kube(kube_node(name, 8000, 32 * GIB), |k| {
            k.labels = l(&[("kubernetes.io/hostname", name)]);
            if let Some(z) = zone {
                k.labels.insert("zone".into(), z.into());
            }
        });
        let mut alloc = (*n.alloc).clone();
        alloc.set_pods(pods);
        n.alloc = Arc::new(alloc);
        n
    }

    fn running(uid: &str, app: &str, affinity: SharedAffinity) -> PodOnNode {
        PodOnNode {
            uid: uid.into(),
            namespace: "ns".into(),
            labels: l(&[("app", app)]),
            pod_affinity: affinity,
            ..Default::default()
        }
    }

    fn incoming(app: &str, affinity: PodAffinity) -> PodInfo {
        let mut p = pod(100, MIB);
        p.namespace = "ns".into();
        p.labels = l(&[("app", app)]);
        p.pod_affinity = Arc::new(affinity);
        p
    }

    fn feasible(nodes: Vec<NodeView>, p: &PodInfo) -> Vec<String> {
        feasible_names(vec![Box::new(InterPodAffinity::default())], nodes, p)
    }

    #[test]
    fn anti_affinity_keeps_a_zone_free_of_matching_pods() {
        let nodes = vec![
            zoned("a1", Some("a"), vec![running("1", "web", Arc::default())]),
            zoned("a2", Some("a"), vec![]),
            zoned("b1", Some("b"), vec![running("2", "db", Arc::default())]),
            zoned("x", None, vec![]),
        ];
        let p = incoming(
            "web",
            PodAffinity {
                required_anti: vec![term("web", "zone")],
                ..Default::default()
            },
        );
        // Zone a holds a web pod; a node without the key is not in any zone.
        assert_eq!(feasible(nodes, &p), vec!["b1", "x"]);
    }

    #[test]
    fn existing_pods_anti_affinity_rejects_the_newcomer() {
        let guard = Arc::new(PodAffinity {
            required_anti: vec![term("web", "kubernetes.io/hostname")],
            ..Default::default()
        });
        let nodes = vec![
            zoned("a1", Some("a"), vec![running("1", "db", guard)]),
            zoned("a2", Some("a"), vec![]),
        ];
        let p = incoming("web", PodAffinity::default());
        assert_eq!(feasible(nodes.clone(), &p), vec!["a2"]);
        let snap = snapshot(nodes);
        let ctx = ctx(&snap);
        assert_eq!(
            InterPodAffinity::default().filter(&ctx, &p, &snap.nodes()[0]),
            Err(format!("{REASON_AFFINITY_NOT_MATCH}, {REASON_EXISTING_ANTI_AFFINITY}").into())
        );
        // A pod the term does not select is welcome.
        assert_eq!(
            feasible(
                snap.nodes().to_vec(),
                &incoming("api", PodAffinity::default())
            )
            .len(),
            2
        );
    }

    #[test]
    fn the_term_index_counts_what_the_full_scan_counts_also_after_an_edit_in_place() {
        let guard = |app: &str, key: &str| {
            Arc::new(PodAffinity {
                required_anti: vec![term(app, key)],
                ..Default::default()
            })
        };
        let mut snap = snapshot(vec![
            zoned(
                "a1",
                Some("a"),
                vec![running("1", "db", guard("web", "zone"))],
            ),
            zoned(
                "a2",
                Some("a"),
                vec![
                    running("2", "db", guard("web", "kubernetes.io/hostname")),
                    running("3", "db", guard("web", "zone")),
                ],
            ),
            zoned(
                "b1",
                Some("b"),
                vec![running("4", "db", guard("api", "zone"))],
            ),
            zoned("b2", Some("b"), vec![running("5", "db", Arc::default())]),
            // The incoming pod itself, already assumed: never counts.
            zoned(
                "b3",
                Some("b"),
                vec![running("uid-new", "web", guard("web", "zone"))],
            ),
        ]);
        let plugin = InterPodAffinity::default();
        let state = |snap: &loadstar_framework::snapshot::ClusterSnapshot, p: &PodInfo| {
            let table = snap.digests(60);
            let ctx = CycleContext {
                digests: Some(&table),
                ..ctx(snap)
            };
            assert!(ctx.anti_affinity_index().is_some());
            let s = plugin.prefilter(&ctx, p).expect("a state");
            s.downcast_ref::<AffinityState>()
                .expect("affinity state")
                .clone()
        };
        // As evaluation runs it: rows checked once, so while every one is current only
        // the nodes the index leaves out are read directly.
        let checked = |snap: &loadstar_framework::snapshot::ClusterSnapshot, p: &PodInfo| {
            let table = snap.digests(60);
            let mut buf = Vec::new();
            let ctx = CycleContext {
                digests: Some(&table),
                current: Some(table.current_rows(snap.nodes(), &mut buf)),
                ..ctx(snap)
            };
            let s = plugin.prefilter(&ctx, p).expect("a state");
            s.downcast_ref::<AffinityState>()
                .expect("affinity state")
                .clone()
        };
        for app in ["web", "api", "db"] {
            let p = incoming(app, PodAffinity::default());
            assert_eq!(
                state(&snap, &p),
                prefilter_state(snap.nodes(), &p, None),
                "{app}"
            );
            assert_eq!(
                checked(&snap, &p),
                prefilter_state(snap.nodes(), &p, None),
                "{app}"
            );
        }
        let web = incoming("web", PodAffinity::default());
        assert_eq!(
            state(&snap, &web).existing_anti,
            HashMap::from([
                ("zone".to_string(), HashMap::from([("a".to_string(), 2)])),
                (
                    "kubernetes.io/hostname".to_string(),
                    HashMap::from([("a2".to_string(), 1)])
                ),
            ])
        );
        // Edited in place after the table was built (as the scheduler assumes pods): the
        // index's entries for b2 are stale, and the node is read itself.
        let table = snap.digests(60);
        let ctx_before = CycleContext {
            digests: Some(&table),
            ..ctx(&snap)
        };
        let _ = ctx_before.anti_affinity_index();
        let mut alloc = (*snap.nodes()[3].alloc).clone();
        alloc.put_pod(running("6", "db", guard("web", "zone")));
        snap.nodes_mut()[3].alloc = Arc::new(alloc);
        let ctx_after = CycleContext {
            digests: Some(&table),
            ..ctx(&snap)
        };
        let s = plugin.prefilter(&ctx_after, &web).expect("a state");
        let s = s.downcast_ref::<AffinityState>().expect("affinity state");
        assert_eq!(*s, prefilter_state(snap.nodes(), &web, None));
        assert_eq!(s.existing_anti["zone"]["b"], 1);
        // Edited through `set_alloc`, as the scheduler does: the row is brought up to date
        // (it matches the node again) while the index still lists the node's old pods, so
        // the node is read once, directly, and its old entries are not counted as well.
        let mut snap = snapshot(vec![
            zoned(
                "d1",
                Some("d"),
                vec![running("9", "db", guard("web", "zone"))],
            ),
            zoned("d2", Some("d"), vec![]),
        ]);
        let table = snap.digests(60);
        let _ = CycleContext {
            digests: Some(&table),
            ..ctx(&snap)
        }
        .anti_affinity_index();
        drop(table);
        let mut alloc = (*snap.nodes()[0].alloc).clone();
        alloc.put_pod(running("10", "db", guard("web", "zone")));
        snap.set_alloc(0, Arc::new(alloc));
        let table = snap.digests(60);
        let patched = CycleContext {
            digests: Some(&table),
            ..ctx(&snap)
        };
        assert!(patched.row_at(0).is_some(), "the row was patched in place");
        let s = plugin.prefilter(&patched, &web).expect("a state");
        let s = s.downcast_ref::<AffinityState>().expect("affinity state");
        assert_eq!(*s, prefilter_state(snap.nodes(), &web, None));
        assert_eq!(s.existing_anti["zone"]["d"], 2);
        drop(table);
        assert_eq!(
            checked(&snap, &web),
            *s,
            "the assumed node is read directly"
        );
        // A table someone still holds is left alone: its row no longer matches the node.
        let held = snap.digests(60);
        let mut alloc = (*snap.nodes()[1].alloc).clone();
        alloc.put_pod(running("11", "db", guard("web", "zone")));
        snap.set_alloc(1, Arc::new(alloc));
        let stale = CycleContext {
            digests: Some(&held),
            ..ctx(&snap)
        };
        assert!(stale.row_at(1).is_none());
        let s = plugin.prefilter(&stale, &web).expect("a state");
        let s = s.downcast_ref::<AffinityState>().expect("affinity state");
        assert_eq!(*s, prefilter_state(snap.nodes(), &web, None));
        assert_eq!(s.existing_anti["zone"]["d"], 3);
        // The reverse: a node edited before the index was built, then given back the data
        // its row was computed from. Its row matches again, yet the index never covered it.
        let mut snap = snapshot(vec![zoned(
            "c1",
            Some("c"),
            vec![running("7", "db", guard("web", "zone"))],
        )]);
        let table = snap.digests(60);
        let original = snap.nodes()[0].alloc.clone();
        snap.nodes_mut()[0].alloc = Arc::new((*original).clone());
        let edited = CycleContext {
            digests: Some(&table),
            ..ctx(&snap)
        };
        let _ = edited.anti_affinity_index();
        snap.nodes_mut()[0].alloc = original;
        let restored = CycleContext {
            digests: Some(&table),
            ..ctx(&snap)
        };
        assert!(restored.row_at(0).is_some());
        let s = plugin.prefilter(&restored, &web).expect("a state");
        let s = s.downcast_ref::<AffinityState>().expect("affinity state");
        assert_eq!(*s, prefilter_state(snap.nodes(), &web, None));
        assert_eq!(s.existing_anti["zone"]["c"], 1);
        drop(table);
        assert_eq!(checked(&snap, &web), *s, "the node the index never covered");
    }

    #[test]
    fn affinity_needs_a_matching_pod_in_the_domain_except_for_the_first_of_a_group() {
        let together = PodAffinity {
            required: vec![term("cache", "zone")],
            ..Default::default()
        };
        let empty = vec![
            zoned("a1", Some("a"), vec![]),
            zoned("b1", Some("b"), vec![]),
            zoned("x", None, vec![]),
        ];
        // No cache pod anywhere and the pod is itself a cache pod: any node with the key.
        assert_eq!(
            feasible(empty.clone(), &incoming("cache", together.clone())),
            vec!["a1", "b1"]
        );
        // Not a cache pod itself: nowhere.
        assert!(feasible(empty, &incoming("web", together.clone())).is_empty());
        // A cache pod in zone b: only zone b.
        let nodes = vec![
            zoned("a1", Some("a"), vec![]),
            zoned("b1", Some("b"), vec![]),
            zoned("b2", Some("b"), vec![running("1", "cache", Arc::default())]),
        ];
        assert_eq!(
            feasible(nodes, &incoming("cache", together)),
            vec!["b1", "b2"]
        );
    }

    #[test]
    fn preferences_and_existing_required_terms_score_by_domain() {
        let weighted = |w: i32, t: AffinityTerm| {
            loadstar_framework::snapshot::WeightedAffinityTerm { weight: w, term: t }
        };
        // An existing db pod in zone a requires app=web next to it (hard weight 1); the
        // incoming web pod prefers cache pods (weight 10) and avoids db pods (weight 4).
        let db = Arc::new(PodAffinity {
            required: vec![term("web", "zone")],
            ..Default::default()
        });
        let nodes = vec![
            zoned("a1", Some("a"), vec![running("1", "db", db)]),
            zoned("b1", Some("b"), vec![running("2", "cache", Arc::default())]),
            zoned("c1", Some("c"), vec![]),
        ];
        let p = incoming(
            "web",
            PodAffinity {
                preferred: vec![weighted(10, term("cache", "zone"))],
                preferred_anti: vec![weighted(4, term("db", "zone"))],
                ..Default::default()
            },
        );
        let snap = snapshot(nodes);
        let refs: Vec<&NodeView> = snap.nodes().iter().collect();
        let mut out = vec![0; 3];
        // Raw: a = 1 - 4 = -3, b = 10, c = 0; scaled from -3..10.
        ScorePlugin::score(
            &InterPodAffinity::default(),
            &ctx(&snap),
            &p,
            &refs,
            &mut out,
        );
        assert_eq!(out, vec![0, 100, 23]);
        // No pair anywhere: all zero.
        let plain = incoming("web", PodAffinity::default());
        let bare = snapshot(vec![
            zoned("a1", Some("a"), vec![]),
            zoned("b1", Some("b"), vec![]),
        ]);
        let refs: Vec<&NodeView> = bare.nodes().iter().collect();
        let mut out = vec![7; 2];
        ScorePlugin::score(
            &InterPodAffinity::default(),
            &ctx(&bare),
            &plain,
            &refs,
            &mut out,
        );
        assert_eq!(out, vec![0, 0]);
        let y = serde_norway::from_str::<serde_norway::Value>("hardPodAffinityWeight: 101")
            .expect("yaml");
        assert!(InterPodAffinity::from_args(&y).is_err());
    }

    #[test]
    fn other_namespaces_do_not_match_unless_named() {
        let mut other = running("1", "web", Arc::default());
        other.namespace = "elsewhere".into();
        let nodes = vec![
            zoned("a1", Some("a"), vec![other]),
            zoned("b1", Some("b"), vec![]),
        ];
        let mut t = term("web", "zone");
        let p = incoming(
            "web",
            PodAffinity {
                required_anti: vec![t.clone()],
                ..Default::default()
            },
        );
        assert_eq!(feasible(nodes.clone(), &p).len(), 2);
        t.namespaces.push("elsewhere".into());
        let p = incoming(
            "web",
            PodAffinity {
                required_anti: vec![t],
                ..Default::default()
            },
        );
        assert_eq!(feasible(nodes, &p), vec!["b1"]);
    }

    /// A term selecting `app` pods in namespaces labelled `team=<team>` (no namespace list).
    fn team_term(app: &str, team: &str, key: &str) -> AffinityTerm {
        AffinityTerm {
            namespaces: vec![],
            namespace_selector: Some(LabelSelector {
                match_labels: l(&[("team", team)]),
                ..Default::default()
            }),
            ..term(app, key)
        }
    }

    /// A term selecting `app` pods in namespaces not labelled `team=<team>` (a namespace
    /// without labels included).
    fn not_team_term(app: &str, team: &str, key: &str) -> AffinityTerm {
        AffinityTerm {
            namespace_selector: Some(LabelSelector {
                match_expressions: vec![loadstar_framework::snapshot::SelectorRequirement {
                    key: "team".into(),
                    op: loadstar_framework::snapshot::SelectorOp::NotIn,
                    values: vec![team.into()],
                }],
                ..Default::default()
            }),
            ..team_term(app, team, key)
        }
    }

    fn in_ns(mut p: PodOnNode, namespace: &str) -> PodOnNode {
        p.namespace = namespace.into();
        p
    }

    /// Namespaces `a1`, `a2` (team a), `b` (team b), `plain` (no labels).
    fn teams() -> Arc<NamespaceLabels> {
        Arc::new(NamespaceLabels::new([
            ("a1".to_string(), l(&[("team", "a")])),
            ("a2".to_string(), l(&[("team", "a")])),
            ("b".to_string(), l(&[("team", "b")])),
            ("plain".to_string(), l(&[])),
        ]))
    }

    /// [`feasible`] over a snapshot that knows `namespaces`.
    fn feasible_in(
        nodes: Vec<NodeView>,
        namespaces: Option<Arc<NamespaceLabels>>,
        p: &PodInfo,
    ) -> Vec<String> {
        let mut snap = snapshot(nodes);
        snap.namespaces = namespaces;
        feasible_names_in(vec![Box::new(InterPodAffinity::default())], &snap, p)
    }

    #[test]
    fn the_incoming_pods_namespace_selector_counts_pods_of_the_namespaces_it_selects() {
        let nodes = vec![
            zoned(
                "n1",
                Some("z1"),
                vec![in_ns(running("1", "web", Arc::default()), "a1")],
            ),
            zoned(
                "n2",
                Some("z2"),
                vec![in_ns(running("2", "web", Arc::default()), "b")],
            ),
            zoned(
                "n3",
                Some("z3"),
                vec![in_ns(running("3", "web", Arc::default()), "a2")],
            ),
            // A namespace the table does not know: its pods match no non-empty selector.
            zoned(
                "n4",
                Some("z4"),
                vec![in_ns(running("4", "web", Arc::default()), "gone")],
            ),
            zoned("n5", Some("z5"), vec![]),
        ];
        let avoiding = |t: AffinityTerm| {
            incoming(
                "web",
                PodAffinity {
                    required_anti: vec![t],
                    ..Default::default()
                },
            )
        };
        let feasible_avoiding =
            |t: AffinityTerm| feasible_in(nodes.clone(), Some(teams()), &avoiding(t));
        let anti = avoiding(team_term("web", "a", "zone"));
        // Team a's web pods keep z1 and z3; team b's pod and the unknown namespace's do not.
        assert_eq!(
            feasible_avoiding(team_term("web", "a", "zone")),
            vec!["n2", "n4", "n5"]
        );
        // The namespace list and the selector are ORed.
        let mut listed = team_term("web", "a", "zone");
        listed.namespaces.push("b".into());
        assert_eq!(feasible_avoiding(listed), vec!["n4", "n5"]);
        // The empty selector is every namespace, known or not.
        let mut every = team_term("web", "a", "zone");
        every.namespace_selector = Some(LabelSelector::default());
        assert_eq!(feasible_avoiding(every), vec!["n5"]);
        // Required affinity to team b's web pods: only z2.
        let near_b = incoming(
            "api",
            PodAffinity {
                required: vec![team_term("web", "b", "zone")],
                ..Default::default()
            },
        );
        assert_eq!(
            feasible_in(nodes.clone(), Some(teams()), &near_b),
            vec!["n2"]
        );
        // The first pod of a group: no pod matches anywhere, so it goes anywhere if its own
        // terms select it; a namespace the table lacks is selected by no non-empty selector.
        let not_a = not_team_term("first", "a", "zone");
        let mut first = incoming(
            "first",
            PodAffinity {
                required: vec![not_a],
                ..Default::default()
            },
        );
        for (ns, fits) in [("b", 5), ("plain", 5), ("a1", 0), ("unknown", 0)] {
            first.namespace = ns.into();
            assert_eq!(
                feasible_in(nodes.clone(), Some(teams()), &first).len(),
                fits,
                "{ns}"
            );
        }
        // Without the namespaces' labels the pod is refused, never placed in violation.
        assert!(feasible_in(nodes, None, &anti).is_empty());
    }

    #[test]
    fn an_existing_pods_namespace_selector_reads_the_incoming_pods_namespace() {
        let guard = Arc::new(PodAffinity {
            required_anti: vec![team_term("web", "a", "kubernetes.io/hostname")],
            ..Default::default()
        });
        let nodes = vec![
            zoned(
                "n1",
                Some("z1"),
                vec![in_ns(running("1", "db", guard), "b")],
            ),
            zoned("n2", Some("z2"), vec![]),
        ];
        let web_in = |ns: &str| {
            let mut p = incoming("web", PodAffinity::default());
            p.namespace = ns.into();
            p
        };
        assert_eq!(
            feasible_in(nodes.clone(), Some(teams()), &web_in("a1")),
            vec!["n2"]
        );
        assert_eq!(
            feasible_in(nodes.clone(), Some(teams()), &web_in("b")),
            vec!["n1", "n2"]
        );
        // A selector that matches no labels: the incoming pod's namespace, known without
        // labels or not known at all, has none.
        let not_a = Arc::new(PodAffinity {
            required_anti: vec![not_team_term("web", "a", "kubernetes.io/hostname")],
            ..Default::default()
        });
        let nodes = vec![
            zoned(
                "n1",
                Some("z1"),
                vec![in_ns(running("1", "db", not_a), "b")],
            ),
            zoned("n2", Some("z2"), vec![]),
        ];
        for ns in ["plain", "unknown", "b"] {
            assert_eq!(
                feasible_in(nodes.clone(), Some(teams()), &web_in(ns)),
                vec!["n2"],
                "{ns}"
            );
        }
        assert_eq!(
            feasible_in(nodes.clone(), Some(teams()), &web_in("a2")),
            vec!["n1", "n2"]
        );
        // Without a table (no cluster), the incoming pod's namespace reads as unlabelled.
        assert_eq!(feasible_in(nodes, None, &web_in("a2")), vec!["n2"]);
    }

    #[test]
    fn namespace_selectors_score_both_ways_and_the_index_counts_as_the_scan() {
        let weighted = |w: i32, t: AffinityTerm| {
            loadstar_framework::snapshot::WeightedAffinityTerm { weight: w, term: t }
        };
        // An existing pod in b prefers (weight 5) web pods of team a in its zone.
        let likes_a = Arc::new(PodAffinity {
            preferred: vec![weighted(5, team_term("web", "a", "zone"))],
            ..Default::default()
        });
        let nodes = vec![
            zoned(
                "n1",
                Some("z1"),
                vec![in_ns(running("1", "db", likes_a), "b")],
            ),
            zoned(
                "n2",
                Some("z2"),
                vec![in_ns(running("2", "cache", Arc::default()), "a2")],
            ),
            zoned(
                "n3",
                Some("z3"),
                vec![in_ns(running("3", "cache", Arc::default()), "b")],
            ),
        ];
        let mut snap = snapshot(nodes);
        snap.namespaces = Some(teams());
        let score = |p: &PodInfo| {
            let refs: Vec<&NodeView> = snap.nodes().iter().collect();
            let mut out = vec![0; refs.len()];
            ScorePlugin::score(
                &InterPodAffinity::default(),
                &ctx(&snap),
                p,
                &refs,
                &mut out,
            );
            out
        };
        // The web pod of a1 is wanted in z1 and itself wants team a's cache pods (z2, 10).
        let mut web = incoming(
            "web",
            PodAffinity {
                preferred: vec![weighted(10, team_term("cache", "a", "zone"))],
                ..Default::default()
            },
        );
        web.namespace = "a1".into();
        assert_eq!(score(&web), vec![50, 100, 0]);
        // From b, neither the existing preference nor its own selects anything but z2's.
        web.namespace = "b".into();
        assert_eq!(score(&web), vec![0, 100, 0]);

        // The anti-affinity index (terms matched once) counts as the full scan does.
        let guard = Arc::new(PodAffinity {
            required_anti: vec![team_term("web", "a", "zone")],
            ..Default::default()
        });
        let mut snap = snapshot(vec![
            zoned(
                "n1",
                Some("z1"),
                vec![in_ns(running("1", "db", guard.clone()), "b")],
            ),
            zoned(
                "n2",
                Some("z2"),
                vec![in_ns(running("2", "db", guard), "a1")],
            ),
            zoned("n3", Some("z3"), vec![]),
        ]);
        snap.namespaces = Some(teams());
        let table = snap.digests(60);
        let ctx = CycleContext {
            digests: Some(&table),
            ..ctx(&snap)
        };
        assert!(ctx.anti_affinity_index().is_some());
        for ns in ["a1", "b", "unknown"] {
            let mut p = incoming("web", PodAffinity::default());
            p.namespace = ns.into();
            let state = InterPodAffinity::default()
                .prefilter(&ctx, &p)
                .expect("a state");
            let indexed = state
                .downcast_ref::<AffinityState>()
                .expect("affinity state");
            assert_eq!(
                *indexed,
                prefilter_state(snap.nodes(), &p, snap.namespaces.as_ref()),
                "{ns}"
            );
            assert_eq!(indexed.existing_anti.is_empty(), ns != "a1", "{ns}");
        }
    }

    /// What preemption proposes for `p` on `nodes` with anti-affinity and resource filters.
    fn preempt(nodes: Vec<NodeView>, p: &PodInfo) -> Vec<(String, Vec<String>)> {
        use loadstar_framework::preemption::{PreemptionArgs, PreemptionOutcome};
        use loadstar_framework::{Profile, StalePolicy};
        use rand::SeedableRng;
        let snap = snapshot(nodes);
        let profile = Profile {
            name: "t".into(),
            filters: vec![
                Box::new(crate::node_resources_fit::NodeResourcesFit::default()),
                Box::new(InterPodAffinity::default()),
            ],
            scores: vec![],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 1.0,
            preemption: Some(PreemptionArgs::default()),
            sampling: loadstar_framework::NodeSampling::ALL,
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(3);
        let ev = profile.evaluate(&snap, p, None, 0, &mut rng);
        match profile.preempt(&snap, p, &ev, &[], &mut rng) {
            PreemptionOutcome::Proposal(pr) => pr
                .candidates
                .iter()
                .map(|c| {
                    let victims = c.victims.iter().map(|v| v.uid.clone()).collect();
                    (snap.nodes()[c.index].name.to_string(), victims)
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    fn placed(uid: &str, app: &str, priority: i32, affinity: SharedAffinity) -> PodOnNode {
        PodOnNode {
            priority,
            requests: loadstar_common::model::ResourceList {
                cpu_millis: 100,
                pods: 0,
                ..Default::default()
            },
            ..running(uid, app, affinity)
        }
    }

    fn host(name: &str, pods: Vec<PodOnNode>) -> NodeView {
        let mut n = zoned(name, None, vec![]);
        let alloc = Arc::make_mut(&mut n.alloc);
        for p in pods {
            alloc.admit(p);
        }
        n
    }

    #[test]
    fn preemption_evicts_what_anti_affinity_objects_to_and_only_that() {
        // The newcomer (priority 10) refuses hosts with a `web` pod. h1's web pod is
        // low-priority (evictable), h2's is not; the `db` pod on h1 is reprieved.
        let mut p = incoming(
            "api",
            PodAffinity {
                required_anti: vec![term("web", "kubernetes.io/hostname")],
                ..Default::default()
            },
        );
        p.priority = 10;
        let nodes = vec![
            host(
                "h1",
                vec![
                    placed("w1", "web", 1, Default::default()),
                    placed("d1", "db", 1, Default::default()),
                ],
            ),
            host("h2", vec![placed("w2", "web", 100, Default::default())]),
        ];
        assert_eq!(
            preempt(nodes, &p),
            vec![("h1".to_string(), vec!["w1".to_string()])]
        );
    }

    #[test]
    fn preemption_evicts_an_existing_pods_anti_affinity_but_never_helps_required_affinity() {
        // h1 holds a low-priority pod whose anti-affinity rejects `api` pods: evicting it
        // (a victim with affinity terms: the PreFilter state is recomputed) opens h1.
        let rejects_api = Arc::new(PodAffinity {
            required_anti: vec![term("api", "kubernetes.io/hostname")],
            ..Default::default()
        });
        let mut p = incoming("api", PodAffinity::default());
        p.priority = 10;
        let nodes = vec![host("h1", vec![placed("x1", "other", 1, rejects_api)])];
        assert_eq!(
            preempt(nodes.clone(), &p),
            vec![("h1".to_string(), vec!["x1".to_string()])]
        );
        // Required affinity to pods that do not exist: no eviction can help.
        let mut q = incoming(
            "api",
            PodAffinity {
                required: vec![term("cache", "kubernetes.io/hostname")],
                ..Default::default()
            },
        );
        q.priority = 10;
        let nodes = vec![host(
            "h1",
            vec![placed("c1", "other", 1, Default::default())],
        )];
        assert_eq!(preempt(nodes, &q), Vec::<(String, Vec<String>)>::new());
    }

    #[test]
    fn removing_a_pod_updates_the_state_as_recomputing_would() {
        let anti_web = Arc::new(PodAffinity {
            required_anti: vec![term("web", "zone")],
            ..Default::default()
        });
        let nodes = vec![
            zoned(
                "a1",
                Some("a"),
                vec![
                    running("w1", "web", Default::default()),
                    running("x1", "db", anti_web.clone()),
                ],
            ),
            zoned(
                "a2",
                Some("a"),
                vec![running("w2", "web", anti_web.clone())],
            ),
            zoned(
                "b1",
                Some("b"),
                vec![running("d1", "db", Default::default())],
            ),
        ];
        let p = incoming(
            "web",
            PodAffinity {
                required: vec![term("db", "zone")],
                required_anti: vec![term("web", "kubernetes.io/hostname")],
                ..Default::default()
            },
        );
        let full = prefilter_state(&nodes, &p, None);
        for (i, n) in nodes.iter().enumerate() {
            for victim in &n.alloc.pods {
                let mut fewer = nodes.clone();
                let mut alloc = (*fewer[i].alloc).clone();
                alloc.remove_pod(&victim.uid);
                fewer[i].alloc = Arc::new(alloc);
                let mut s = full.clone();
                apply_pod(&mut s, &p, victim, n.labels_or_empty(), true, -1);
                assert_eq!(
                    s,
                    prefilter_state(&fewer, &p, None),
                    "without {}",
                    victim.uid
                );
                apply_pod(&mut s, &p, victim, n.labels_or_empty(), true, 1);
                assert_eq!(s, full, "and back with {}", victim.uid);
            }
        }
    }
}
