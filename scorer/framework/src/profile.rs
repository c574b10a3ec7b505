//! The scheduling framework: filter and score plugin traits, the per-cycle context, and a
//! [`Profile`] that runs its filters, its weighted scores and its stale-node policy over a
//! [`ClusterSnapshot`], explaining every verdict (per-plugin scores, filter reasons, and a
//! kube-scheduler-style summary).
use std::any::Any;
use std::collections::{BTreeMap, HashMap};
use std::fmt::Debug;

use loadstar_common::model::ResourceKind;
use rand::Rng;

use std::borrow::Cow;

use crate::sampling::{NodeSampling, SampleCursor};
use crate::snapshot::{
    AffinityTerm, AgentNode, AntiAffinityIndex, AttachKind, ClusterSnapshot, ColumnKey,
    ColumnState, ColumnWords, CurrentRows, DigestTable, Memo, NodeDigest, NodeView, PodInfo, Usage,
    raw_usage,
};

/// What a profile does with a node whose load is stale (or was never reported).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum StalePolicy {
    /// Score it on requests only: load-aware plugins see no load for it.
    Fallback,
    /// Filter it out.
    Filter,
    /// Score it on its last known load, then multiply its total by the profile's penalty.
    Penalize,
}

impl StalePolicy {
    /// Config spelling.
    pub fn name(self) -> &'static str {
        match self {
            StalePolicy::Fallback => "fallback",
            StalePolicy::Filter => "filter",
            StalePolicy::Penalize => "penalize",
        }
    }
}

/// Per-cycle facts the plugins share: which window to read, and how to treat stale nodes.
#[derive(Debug, Clone, Copy)]
pub struct CycleContext<'a> {
    /// The whole snapshot (for cluster-wide policies).
    pub snapshot: &'a ClusterSnapshot,
    /// Load window to use, seconds.
    pub window_seconds: u32,
    /// The profile's stale policy.
    pub stale_policy: StalePolicy,
    /// The snapshot's digest rows for this window, when built (see
    /// [`ClusterSnapshot::digests`]); without them rows are computed per call.
    pub digests: Option<&'a DigestTable>,
    /// Which rows of `digests` are current for `snapshot` ([`ClusterSnapshot::current_rows`],
    /// checked at most once per evaluation); `None`: each row is checked against its node
    /// when read.
    pub current: Option<CurrentRows<'a>>,
}

impl<'a> CycleContext<'a> {
    /// The node's utilisation of `kind` for scoring: the profile's window plus in-flight
    /// estimates; `None` when the node has no agent data for it, or is stale under
    /// [`StalePolicy::Fallback`] (then plugins fall back to requests).
    #[inline]
    pub fn usage(&self, node: &NodeView, kind: ResourceKind) -> Option<Usage> {
        if node.stale && self.stale_policy == StalePolicy::Fallback {
            return None;
        }
        if matches!(kind, ResourceKind::Cpu | ResourceKind::Memory)
            && let Some(row) = self.row(node)
        {
            return row.usage(kind);
        }
        raw_usage(node, kind, self.window_seconds)
    }

    /// [`CycleContext::usage`] when the caller already holds the node's digest `d` (saves a
    /// table lookup in hot loops).
    #[inline]
    pub fn usage_of(&self, node: &NodeView, d: &NodeDigest, kind: ResourceKind) -> Option<Usage> {
        // `d` is the node's row, so its staleness is the node's (read without the view).
        if d.stale && self.stale_policy == StalePolicy::Fallback {
            return None;
        }
        match kind {
            ResourceKind::Cpu | ResourceKind::Memory => d.usage(kind),
            _ => raw_usage(node, kind, self.window_seconds),
        }
    }

    /// A context without digest rows (they are computed per call).
    pub fn new(
        snapshot: &'a ClusterSnapshot,
        window_seconds: u32,
        stale_policy: StalePolicy,
    ) -> Self {
        CycleContext {
            snapshot,
            window_seconds,
            stale_policy,
            digests: None,
            current: None,
        }
    }

    /// The table row of `node`, when the node is in the snapshot and unchanged since.
    #[inline(always)]
    fn row(&self, node: &NodeView) -> Option<&'a NodeDigest> {
        self.row_at(self.snapshot.position_of(node)?)
    }

    /// Existing pods' required anti-affinity terms grouped by term
    /// ([`DigestTable::anti_affinity`]), when the cycle has a digest table.
    pub fn anti_affinity_index(&self) -> Option<&'a AntiAffinityIndex> {
        Some(self.digests?.anti_affinity(self.snapshot))
    }

    /// The table row of the snapshot's node `index`, when the cycle has a table and that
    /// node is unchanged since it was built: for passes over `snapshot.nodes()` by index,
    /// which then read the row's totals instead of the node's own data.
    #[inline(always)]
    pub fn row_at(&self, index: usize) -> Option<&'a NodeDigest> {
        let table = self.digests?;
        let row = table.rows.get(index)?;
        let current = match self.current {
            Some(current) => current.get(index),
            None => table.row_matches(index, self.snapshot.nodes().get(index)?),
        };
        current.then_some(row)
    }

    /// [`DigestTable::memo`] of the cycle's table, when the cycle has one and every row of
    /// it is current (checked for this evaluation); else `None`, and the caller computes
    /// the value itself. `build` must read only the snapshot's nodes (not the pod).
    pub fn memo<T: Memo>(&self, key: u64, build: impl FnOnce() -> T) -> Option<std::sync::Arc<T>> {
        let table = self.digests?;
        debug_assert_eq!(
            table.window_seconds, self.window_seconds,
            "a cycle's digest table is for its window"
        );
        self.current?
            .all()
            .then(|| table.memo(key, build))
            .flatten()
    }

    /// The node's digest row (Kubernetes facts, totals, pressure data and CPU/memory usage
    /// in one flat struct): borrowed from the cycle's table, else computed. Usage in the row
    /// ignores staleness: read it through [`CycleContext::usage`].
    #[inline(always)]
    pub fn digest<'n>(&'n self, node: &'n NodeView) -> Cow<'n, NodeDigest> {
        match self.row(node) {
            Some(row) => Cow::Borrowed(row),
            None => self.computed_digest(node),
        }
    }

    /// [`CycleContext::digest`] of the snapshot's node `index`, for passes by index (no
    /// lookup of the node's position).
    #[inline(always)]
    pub fn digest_at(&self, index: usize) -> Cow<'a, NodeDigest> {
        match self.row_at(index) {
            Some(row) => Cow::Borrowed(row),
            None => self.computed_digest(&self.snapshot.nodes()[index]),
        }
    }

    /// [`CycleContext::digest`]'s rare path, kept out of the plugins' loops.
    #[cold]
    #[inline(never)]
    fn computed_digest<'n>(&self, node: &NodeView) -> Cow<'n, NodeDigest> {
        Cow::Owned(NodeDigest::of(node, self.window_seconds))
    }

    /// The node's agent report when load-aware plugins may use it: `None` without an agent,
    /// or when the node is stale under [`StalePolicy::Fallback`] (the same rule as
    /// [`CycleContext::usage`], for per-device and pressure data that are not windows).
    #[inline]
    pub fn live_agent<'n>(&self, node: &'n NodeView) -> Option<&'n AgentNode> {
        if node.stale && self.stale_policy == StalePolicy::Fallback {
            return None;
        }
        node.agent.as_deref()
    }
}

/// What a filter's PreFilter computed for one pod: read back by the same plugin's
/// [`FilterPlugin::filter_prepared`], and kept up to date by
/// [`FilterPlugin::prefilter_update`] while preemption tries evicting pods.
pub type PreFilterState = Box<dyn Any + Send + Sync>;

/// A filter: can the pod run on this node at all?
pub trait FilterPlugin: Send + Sync + Debug {
    /// Plugin name as in configs and answers.
    fn name(&self) -> &'static str;
    /// kube-scheduler's PreFilter: cluster-wide facts this pod's checks need (matching pods
    /// per topology domain), computed once per pod and cycle rather than once per node.
    /// `None` (the default) when the plugin needs nothing for this pod.
    fn prefilter(&self, _ctx: &CycleContext<'_>, _pod: &PodInfo) -> Option<PreFilterState> {
        None
    }
    /// `true` when this plugin passes every node for this pod whatever the node holds (the
    /// pod asks nothing this plugin checks: no host ports, no volumes of its kind, no hard
    /// spread constraint), given what [`FilterPlugin::prefilter`] returned. Evaluation then
    /// leaves the plugin out of the per-node loop, like kube-scheduler's PreFilter `Skip`.
    /// Must be exact: a skipped plugin would have passed every node. The default, `false`,
    /// always runs it.
    fn skips(&self, _state: Option<&PreFilterState>, _pod: &PodInfo) -> bool {
        false
    }
    /// [`FilterPlugin::filter`] with what [`FilterPlugin::prefilter`] returned for this pod.
    /// Plugins with a PreFilter override it; the default ignores the state.
    fn filter_prepared(
        &self,
        ctx: &CycleContext<'_>,
        _state: Option<&PreFilterState>,
        pod: &PodInfo,
        node: &NodeView,
    ) -> Result<(), Reason> {
        self.filter(ctx, pod, node)
    }
    /// `Ok` when the node passes; otherwise the reason, phrased for a summary line
    /// (`Insufficient cpu`, `node(s) had untolerated taint {k: v}`). Several reasons are
    /// joined with [`REASON_SEPARATOR`] (like upstream's status message); the summary counts
    /// each.
    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason>;
    /// [`FilterPlugin::filter_prepared`] over many nodes at once: keeps in `nodes` (indices
    /// into the snapshot, order kept) the ones that pass, and appends each rejected one to
    /// `filtered`. Evaluation runs the filters plugin by plugin over the nodes still
    /// feasible, so this is one loop per plugin, not one dynamic call per node and plugin.
    /// The default calls [`FilterPlugin::filter_prepared`] for each node (statically: the
    /// default is instantiated per plugin); plugins override it to read digest rows by index
    /// or columns computed once per digest table. Must give the same verdicts and reasons.
    fn filter_nodes(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        nodes: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        retain_passing(self.name(), nodes, filtered, |index| {
            self.filter_prepared(ctx, state, pod, &ctx.snapshot.nodes()[index])
        });
    }
    /// kube-scheduler's PreFilter extensions `AddPod` (`delta` 1) and `RemovePod` (−1):
    /// `existing` is added to or removed from `node`, and `state` (this plugin's, for `pod`)
    /// must follow. Preemption calls it while trying victims, and relies on it being exact:
    /// removing then adding a pod gives back the same state. The default does nothing:
    /// right for plugins without cluster-wide state.
    fn prefilter_update(
        &self,
        _state: &mut PreFilterState,
        _pod: &PodInfo,
        _existing: &crate::snapshot::PodOnNode,
        _node: &NodeView,
        _delta: i64,
    ) {
    }
    /// When this filter's verdict on a node for `pod` (given what its PreFilter returned) is
    /// a function of that node's data and of these words alone — not of other nodes, nor of
    /// the clock, nor of anything else of the pod — the words: its arguments and what it
    /// reads of the pod. Pods with equal words then get equal verdicts (and reasons) on
    /// every node, so evaluation keeps one column of verdicts per words and digest table
    /// (`DigestTable::column`) and filters again only the nodes edited since. `None` (the
    /// default): the plugin filters every pod itself. Checked for the embedded profiles by
    /// the policy crate's tests.
    fn column_key(
        &self,
        _ctx: &CycleContext<'_>,
        _state: Option<&PreFilterState>,
        _pod: &PodInfo,
    ) -> Option<ColumnWords> {
        None
    }
    /// Whether evicting lower-priority pods from a node may lift this plugin's rejection
    /// `reason` (kube-scheduler's `Unschedulable`, as opposed to
    /// `UnschedulableAndUnresolvable`). The default, `false`, keeps preemption away from
    /// nodes that no eviction can open: taints, selectors, readiness, volumes, load.
    fn preemption_may_help(&self, _reason: &str) -> bool {
        false
    }
}

/// The loop of a [`FilterPlugin::filter_nodes`]: keeps in `nodes` those whose `verdict` is
/// `Ok`, in order, and records each other one as rejected by `plugin`.
///
/// A plain compaction loop rather than `Vec::retain`, whose per-element adapter the compiler
/// kept as a call: here `verdict` inlines into one loop per plugin.
#[inline(always)]
pub fn retain_passing(
    plugin: &'static str,
    nodes: &mut Vec<usize>,
    filtered: &mut Vec<FilteredNode>,
    mut verdict: impl FnMut(usize) -> Result<(), Reason>,
) {
    let mut kept = 0;
    for read in 0..nodes.len() {
        let index = nodes[read];
        match verdict(index) {
            Ok(()) => {
                nodes[kept] = index;
                kept += 1;
            }
            Err(reason) => filtered.push(FilteredNode {
                index,
                plugin,
                reason,
            }),
        }
    }
    nodes.truncate(kept);
}

/// A score: how good is each feasible node, 0–100.
pub trait ScorePlugin: Send + Sync + Debug {
    /// Plugin name as in configs and answers.
    fn name(&self) -> &'static str;
    /// Scores every node in `nodes` into `out` (same length), each in 0..=100, writing every
    /// entry (`out` holds the previous pod's scores on entry). Scoring all feasible nodes at
    /// once lets cluster-wide plugins do one O(N) pass and normalise.
    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]);
    /// [`ScorePlugin::score`] knowing each node's index in the snapshot (`indices[j]` is
    /// `nodes[j]`'s), as evaluation calls it: plugins that read digest rows or per-table
    /// columns by index override it. Must give the same scores; the default calls
    /// [`ScorePlugin::score`].
    fn score_indexed(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: &[usize],
        out: &mut [i64],
    ) {
        debug_assert_eq!(nodes.len(), indices.len());
        self.score(ctx, pod, nodes, out);
    }
    /// When this plugin's score of a node for `pod` is a function of that node's data and of
    /// these words alone — not of the other nodes scored (no normalisation over them), nor of
    /// any cluster-wide figure, nor of anything else of the pod — the words: its arguments
    /// and what it reads of the pod (e.g. the pod's requests). Pods with equal words then get
    /// equal scores on every node, so evaluation keeps one column of scores per words and
    /// digest table (`DigestTable::column`) and scores again only the nodes edited
    /// since. `None` (the default): the plugin scores every pod itself. A plugin answering
    /// `Some` must score a node the same whatever other nodes it is scored with (checked for
    /// the embedded profiles by the policy crate's tests).
    fn column_key(&self, _ctx: &CycleContext<'_>, _pod: &PodInfo) -> Option<ColumnWords> {
        None
    }
    /// The plugin's arguments, for display (`ListProfiles`).
    fn args_yaml(&self) -> String {
        String::new()
    }
}

/// Highest score a plugin gives.
pub const MAX_NODE_SCORE: i64 = 100;

/// DefaultPreemption's arguments (`DefaultPreemptionArgs`): how many candidate nodes a
/// preemption examines before it picks one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PreemptionArgs {
    /// At least this share of the nodes where preemption may help, percent (0–100).
    pub min_candidate_nodes_percentage: u32,
    /// At least this many nodes (never more than there are).
    pub min_candidate_nodes_absolute: u32,
}

impl Default for PreemptionArgs {
    /// kube-scheduler's defaults: 10 % and 100 nodes.
    fn default() -> Self {
        PreemptionArgs {
            min_candidate_nodes_percentage: 10,
            min_candidate_nodes_absolute: 100,
        }
    }
}

impl PreemptionArgs {
    /// The rules of `ValidateDefaultPreemptionArgs`: a percentage up to 100, and not both 0.
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        if self.min_candidate_nodes_percentage > 100 {
            return Err((
                "minCandidateNodesPercentage",
                format!(
                    "must be between 0 and 100, got {}",
                    self.min_candidate_nodes_percentage
                ),
            ));
        }
        if self.min_candidate_nodes_percentage == 0 && self.min_candidate_nodes_absolute == 0 {
            return Err((
                "minCandidateNodesAbsolute",
                "must not be 0 when minCandidateNodesPercentage is 0".to_string(),
            ));
        }
        Ok(())
    }

    /// How many candidates to find among `potential` nodes (`calculateNumCandidates`).
    pub fn num_candidates(&self, potential: usize) -> usize {
        let pct = potential.saturating_mul(self.min_candidate_nodes_percentage as usize) / 100;
        pct.max(self.min_candidate_nodes_absolute as usize)
            .min(potential)
    }
}

/// A configured profile: filters, weighted scores, window and stale policy.
#[derive(Debug)]
pub struct Profile {
    /// Profile name (= schedulerName).
    pub name: String,
    /// Filters, run in order; the first failing one is the node's reason.
    pub filters: Vec<Box<dyn FilterPlugin>>,
    /// Score plugins with their weights.
    pub scores: Vec<(Box<dyn ScorePlugin>, i64)>,
    /// Load window, seconds.
    pub window_seconds: u32,
    /// Stale-node policy.
    pub stale_policy: StalePolicy,
    /// Multiplier for the total of a stale node under [`StalePolicy::Penalize`].
    pub stale_penalty: f64,
    /// DefaultPreemption's arguments (`None`: the profile never preempts).
    pub preemption: Option<PreemptionArgs>,
    /// How many nodes a scheduling cycle examines ([`Profile::evaluate_sampled`]).
    pub sampling: NodeSampling,
}

/// A feasible node and its score.
#[derive(Debug, Clone, PartialEq)]
pub struct RankedNode {
    /// Index into the snapshot.
    pub index: usize,
    /// Weighted mean of the plugin scores, 0–100 (after any stale penalty).
    pub total: f64,
    /// Per plugin: (name, score, weight).
    pub plugins: Vec<(&'static str, i64, i64)>,
    /// Whether the node was stale.
    pub stale: bool,
}

/// A node a filter rejected.
#[derive(Debug, Clone, PartialEq)]
pub struct FilteredNode {
    /// Index into the snapshot.
    pub index: usize,
    /// Filter name.
    pub plugin: &'static str,
    /// Reason.
    pub reason: Reason,
}

/// Why a filter rejected a node. Most reasons are fixed phrases (`Insufficient cpu`), and a
/// pod can be rejected by thousands of nodes, so they are borrowed, not allocated per node;
/// reasons that name something (a taint) are owned.
pub type Reason = Cow<'static, str>;

/// How many nodes one filter rejected for one reason ([`Evaluation::filtered_groups`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FilteredCount<'a> {
    /// Filter plugin.
    pub plugin: &'static str,
    /// Reason (several joined by [`REASON_SEPARATOR`] when one filter failed on several).
    pub reason: &'a str,
    /// Nodes rejected so.
    pub count: usize,
}

/// Filter name used for stale nodes under [`StalePolicy::Filter`].
pub const STALE_FILTER: &str = "StaleLoad";
/// Reason used for stale nodes under [`StalePolicy::Filter`].
pub const STALE_REASON: &str = "node(s) had stale load metrics";

/// Filter name used when the pod carries constraints Loadstar does not implement.
pub const UNSUPPORTED_FILTER: &str = "UnsupportedConstraints";

/// Most fields a refusal names (the rest are counted), and most bytes of each: the reason is
/// repeated for every node, and a client's `pod_json` names are not validated.
const REFUSAL_FIELDS: usize = 3;
const REFUSAL_FIELD_BYTES: usize = 160;

/// The reason given on every node for a pod with unimplemented constraints: the first
/// fields, each cut short, without the summary's separator.
pub fn unsupported_reason(fields: &[String]) -> String {
    let mut named: Vec<String> = fields
        .iter()
        .take(REFUSAL_FIELDS)
        .map(|f| loadstar_common::text::truncate(&f.replace(',', ";"), REFUSAL_FIELD_BYTES))
        .collect();
    if fields.len() > REFUSAL_FIELDS {
        named.push(format!("{} more", fields.len() - REFUSAL_FIELDS));
    }
    format!(
        "pod uses {} that Loadstar does not implement or cannot check here (refused rather \
         than placed in violation)",
        named.join(" and ")
    )
}

/// Separator of several reasons of one filter for one node (`Insufficient cpu, Insufficient
/// memory`); [`Evaluation::summary`] counts each part, as kube-scheduler does.
pub const REASON_SEPARATOR: &str = ", ";

/// A profile's verdict for one pod.
#[derive(Debug, Clone, Default)]
pub struct Evaluation {
    /// Feasible nodes, best first (ties in random order).
    pub ranked: Vec<RankedNode>,
    /// Rejected nodes.
    pub filtered: Vec<FilteredNode>,
    /// Nodes considered.
    pub evaluated: usize,
    /// Time spent in each extension point.
    pub timings: PhaseTimings,
}

/// Where an evaluation spent its time, by extension point (for the scheduler's histograms).
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct PhaseTimings {
    /// Every filter's PreFilter.
    pub prefilter: std::time::Duration,
    /// Filtering every node.
    pub filter: std::time::Duration,
    /// Scoring and normalising the feasible nodes, weighting and ranking them.
    pub score: std::time::Duration,
}

impl Evaluation {
    /// kube-scheduler's summary: `0/12 nodes are available: 7 Insufficient cpu, 5 ...` when
    /// nothing fits, else `N/M nodes are available`.
    pub fn summary(&self) -> String {
        self.summary_of(&self.filtered_groups())
    }

    /// [`Evaluation::summary`] from groups already counted by
    /// [`Evaluation::filtered_groups`] (a decision record needs both: one pass, not two).
    pub fn summary_of(&self, groups: &[FilteredCount<'_>]) -> String {
        let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
        for g in groups {
            for reason in g.reason.split(REASON_SEPARATOR) {
                *counts.entry(reason).or_default() += g.count;
            }
        }
        let mut parts: Vec<(usize, &str)> = counts.into_iter().map(|(r, c)| (c, r)).collect();
        parts.sort_by(|a, b| b.0.cmp(&a.0).then(a.1.cmp(b.1)));
        let head = format!("{}/{} nodes are available", self.feasible(), self.evaluated);
        if parts.is_empty() {
            head
        } else {
            let reasons: Vec<String> = parts.iter().map(|(c, r)| format!("{c} {r}")).collect();
            format!("{head}: {}.", reasons.join(", "))
        }
    }

    /// The filtered nodes counted by (plugin, reason), in order of first appearance. Most
    /// rejected nodes repeat the reason before them, so that is tried first; a map finds
    /// the others (a cluster may word thousands of distinct reasons, one per taint).
    pub fn filtered_groups(&self) -> Vec<FilteredCount<'_>> {
        let mut groups: Vec<FilteredCount<'_>> = Vec::new();
        let mut at: HashMap<(&str, &str), usize> = HashMap::new();
        let mut last = usize::MAX;
        for f in &self.filtered {
            let same = groups
                .get(last)
                .is_some_and(|g| g.plugin == f.plugin && g.reason == f.reason);
            if !same {
                last = *at.entry((f.plugin, &*f.reason)).or_insert_with(|| {
                    groups.push(FilteredCount {
                        plugin: f.plugin,
                        reason: &f.reason,
                        count: 0,
                    });
                    groups.len() - 1
                });
            }
            groups[last].count += 1;
        }
        groups
    }

    /// Nodes that passed every filter (`ranked` may hold fewer: it is cut to the limit).
    pub fn feasible(&self) -> usize {
        self.evaluated.saturating_sub(self.filtered.len())
    }

    /// The best node, if any.
    pub fn best(&self) -> Option<&RankedNode> {
        self.ranked.first()
    }
}

/// Whether a pod declares a constraint.
type DeclaresConstraint = fn(&PodInfo) -> bool;

/// Which filter checks which pod-declared constraint: a profile without it cannot honour
/// the constraint, so such a pod is refused by that profile rather than placed blindly.
const CONSTRAINT_FILTERS: &[(&str, &str, DeclaresConstraint)] = &[
    ("NodeAffinity", "spec.nodeSelector", |p| {
        !p.node_selector.is_empty()
    }),
    (
        "NodeAffinity",
        "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        |p| !p.required_affinity.is_empty(),
    ),
    (
        "InterPodAffinity",
        "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        |p| !p.pod_affinity.required.is_empty(),
    ),
    (
        "InterPodAffinity",
        "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution",
        |p| !p.pod_affinity.required_anti.is_empty(),
    ),
    (
        "PodTopologySpread",
        "spec.topologySpreadConstraints (DoNotSchedule)",
        |p| {
            p.spread_constraints
                .iter()
                .any(|c| c.when_unsatisfiable == crate::snapshot::WhenUnsatisfiable::DoNotSchedule)
        },
    ),
    ("NodePorts", "hostPort", |p| !p.host_ports.is_empty()),
    (
        "VolumeRestrictions",
        "spec.volumes[] (gcePersistentDisk, awsElasticBlockStore, iscsi, rbd)",
        |p| !p.disks.is_empty(),
    ),
    (
        "VolumeRestrictions",
        "spec.volumes[].persistentVolumeClaim (ReadWriteOncePod claims)",
        |p| {
            p.volumes
                .as_ref()
                .is_some_and(|v| !v.read_write_once_pod.is_empty())
        },
    ),
    (
        "VolumeBinding",
        "spec.volumes[] (persistentVolumeClaim, ephemeral)",
        |p| !p.claims.is_empty(),
    ),
    // Upstream's VolumeZone reads `persistentVolumeClaim` volumes only.
    ("VolumeZone", "spec.volumes[].persistentVolumeClaim", |p| {
        p.claims.iter().any(|c| !c.ephemeral)
    }),
    (
        "NodeVolumeLimits",
        "spec.volumes[] (claims of CSI volumes)",
        |p| attaches(p, AttachKind::Csi),
    ),
    ("EBSLimits", "spec.volumes[] (awsElasticBlockStore)", |p| {
        attaches(p, AttachKind::AwsEbs)
    }),
    ("GCEPDLimits", "spec.volumes[] (gcePersistentDisk)", |p| {
        attaches(p, AttachKind::GcePd)
    }),
    ("AzureDiskLimits", "spec.volumes[] (azureDisk)", |p| {
        attaches(p, AttachKind::AzureDisk)
    }),
    ("CinderLimits", "spec.volumes[] (cinder)", |p| {
        attaches(p, AttachKind::Cinder)
    }),
];

/// The working vectors of [`Profile::evaluate`], kept per thread from one evaluation to the
/// next. Over 5 000 nodes with the default profile's 8 scores they are ~600 KB per pod (the
/// score columns alone 320 KB), in blocks large enough that an allocator maps or trims them
/// (glibc consolidated its free lists and handed memory back to the kernel around them):
/// allocating them afresh for every pod cost allocator time and page faults on every
/// scheduling cycle. A thread keeps the capacity of its largest evaluation (~1.2 MB at
/// 10 000 nodes); a nested evaluation on the same thread starts empty.
#[derive(Debug, Default)]
struct Scratch {
    /// `0..nodes` when no candidates are given.
    all: Vec<usize>,
    /// Always empty here: only its allocation is kept (see [`Scratch::emptied`]).
    feasible: Vec<&'static NodeView>,
    feasible_idx: Vec<usize>,
    /// Score columns, one per plugin (as the plugins wrote them: clamped where read).
    scores: Vec<i64>,
    order: Vec<(f64, usize, u32)>,
    /// [`CycleContext::current`].
    current: Vec<bool>,
    /// Weighted score sums, per feasible node.
    weighted: Vec<i64>,
    /// Nodes not rejected yet, while the filters run.
    passing: Vec<usize>,
}

thread_local! {
    static SCRATCH: std::cell::Cell<Option<Box<Scratch>>> = const { std::cell::Cell::new(None) };
}

impl Scratch {
    /// This thread's scratch (empty vectors when it has none or it is in use).
    fn take() -> Box<Scratch> {
        SCRATCH.with(std::cell::Cell::take).unwrap_or_default()
    }

    /// Keeps `self` for this thread's next evaluation.
    fn put_back(self: Box<Self>) {
        SCRATCH.with(|cell| cell.set(Some(self)));
    }

    /// `v`'s allocation as an empty vector free of `v`'s lifetime: an empty `Vec` holds no
    /// reference, and collecting an iterator of a vector's own `IntoIter` into elements of
    /// the same layout reuses its buffer (std's in-place collection).
    #[allow(
        clippy::unnecessary_filter_map,
        reason = "the map changes the element's lifetime; `filter` could not"
    )]
    fn emptied(mut v: Vec<&NodeView>) -> Vec<&'static NodeView> {
        v.clear();
        v.into_iter().filter_map(|_| None).collect()
    }
}

/// The cycle's digest table when its columns may be read: every row current
/// ([`CurrentRows::all`], as for [`CycleContext::memo`]).
fn column_table<'a>(ctx: &CycleContext<'a>) -> Option<&'a DigestTable> {
    ctx.digests.filter(|_| ctx.current.is_some_and(|c| c.all()))
}

/// Calls `read` with the cycle's digest table's column for `plugin`'s shape `words`
/// ([`DigestTable::column`]), after `compute` has written the entries of the nodes edited
/// since (`compute` also builds the column, over every node, the second time the shape
/// comes); `false`, without calling `read`, when there is no such column (the cycle has no
/// table or one with rows out of date, the table builds columns only for shapes it has seen
/// before, or the column could not be built).
fn read_column(
    ctx: &CycleContext<'_>,
    plugin: &'static str,
    filter: bool,
    words: ColumnWords,
    compute: impl Fn(&mut ColumnState, &[usize]),
    read: impl FnOnce(&ColumnState),
) -> bool {
    let Some(table) = column_table(ctx) else {
        return false;
    };
    let key = ColumnKey {
        plugin,
        filter,
        stale_policy: ctx.stale_policy as u8,
        words,
    };
    let count = ctx.snapshot.nodes().len();
    let Some(column) = table.column(&key, || {
        let mut column = ColumnState {
            entries: vec![0; count],
            ..Default::default()
        };
        let all: Vec<usize> = (0..count).collect();
        compute(&mut column, &all);
        column
    }) else {
        return false;
    };
    let mut column = column.lock();
    if column.entries.len() != count {
        return false;
    }
    if !column.edited.is_empty() {
        // Cleared only once computed again: a plugin that panics leaves the list for the
        // next reader (the lock ignores poisoning).
        let mut edited = column.edited.clone();
        edited.sort_unstable();
        edited.dedup();
        compute(&mut column, &edited);
        column.edited.clear();
        if column.entries.len() != count {
            return false;
        }
    }
    read(&column);
    true
}

/// Writes `plugin`'s scores of the nodes `indices` into `out` from the cycle's digest table's
/// column for the pod's shape ([`ScorePlugin::column_key`], [`read_column`]); `false`, with
/// `out` untouched, when the plugin keys no shape or there is no such column.
fn column_scores(
    ctx: &CycleContext<'_>,
    plugin: &dyn ScorePlugin,
    pod: &PodInfo,
    indices: &[usize],
    out: &mut [i64],
) -> bool {
    let Some(words) = plugin.column_key(ctx, pod) else {
        return false;
    };
    let nodes = ctx.snapshot.nodes();
    let scores = |column: &mut ColumnState, indices: &[usize]| {
        let views: Vec<&NodeView> = indices.iter().map(|&i| &nodes[i]).collect();
        let mut scores = vec![0; indices.len()];
        plugin.score_indexed(ctx, pod, &views, indices, &mut scores);
        for (&i, s) in indices.iter().zip(scores) {
            if let Some(entry) = column.entries.get_mut(i) {
                *entry = s.clamp(0, MAX_NODE_SCORE) as u8;
            }
        }
    };
    read_column(ctx, plugin.name(), false, words, scores, |column| {
        for (o, &i) in out.iter_mut().zip(indices) {
            *o = i64::from(column.entries[i]);
        }
    })
}

/// Runs `filter` over `nodes` as [`FilterPlugin::filter_nodes`] does, from the cycle's
/// digest table's column of its verdicts for the pod's shape ([`FilterPlugin::column_key`],
/// [`read_column`]); `false`, with `nodes` and `filtered` untouched, when the filter keys no
/// shape or there is no such column.
fn column_filter(
    ctx: &CycleContext<'_>,
    filter: &dyn FilterPlugin,
    state: Option<&PreFilterState>,
    pod: &PodInfo,
    nodes: &mut Vec<usize>,
    filtered: &mut Vec<FilteredNode>,
) -> bool {
    let Some(words) = filter.column_key(ctx, state, pod) else {
        return false;
    };
    // The verdicts on `indices`, into `column` (emptied when it cannot hold them).
    let verdicts = |column: &mut ColumnState, indices: &[usize]| {
        let mut passing = indices.to_vec();
        let mut refused = Vec::new();
        filter.filter_nodes(ctx, state, pod, &mut passing, &mut refused);
        for i in passing {
            if let Some(e) = column.entries.get_mut(i) {
                *e = 0;
            }
        }
        for f in refused {
            let Some(code) = column.code(&f.reason) else {
                column.entries.clear();
                return;
            };
            if let Some(e) = column.entries.get_mut(f.index) {
                *e = code;
            }
        }
    };
    read_column(ctx, filter.name(), true, words, verdicts, |column| {
        retain_passing(filter.name(), nodes, filtered, |i| {
            match column.entries.get(i).copied().unwrap_or(0) {
                0 => Ok(()),
                code => Err(column.reasons[usize::from(code) - 1].clone()),
            }
        });
    })
}

/// A sampled evaluation ([`Profile::evaluate_sampled`]) filters at least this many nodes at a
/// time.
const MIN_SAMPLE_SLICE: usize = 64;

/// Up to this many best nodes are selected in one streaming pass ([`Profile::evaluate`]);
/// more are selected by partitioning every feasible node.
const STREAMED_LIMIT: usize = 64;

/// Whether the pod mounts a volume counted against the attach limit of `kind`.
fn attaches(pod: &PodInfo, kind: AttachKind) -> bool {
    pod.attachable.iter().any(|v| v.kind == kind)
}

/// A node as ranked: (total, position among the feasible nodes, random tie-break key).
type Ranked = (f64, usize, u32);

/// Best first; equal totals by their tie-break keys.
fn by_rank(a: &Ranked, b: &Ranked) -> std::cmp::Ordering {
    b.0.total_cmp(&a.0).then(a.2.cmp(&b.2))
}

/// Puts into `order` (cleared first) the best `limit` (0: all) of the nodes whose weighted
/// sums are `weighted`, best first, each with its total (`total_of(position, sum)`) and a
/// random tie-break key. `monotone`: a lower sum always means a lower total.
fn select_best(
    weighted: &[i64],
    limit: usize,
    monotone: bool,
    total_of: impl Fn(usize, i64) -> f64,
    rng: &mut impl Rng,
    order: &mut Vec<Ranked>,
) {
    order.clear();
    if limit == 0 || limit > STREAMED_LIMIT || limit >= weighted.len() {
        order.extend(
            weighted
                .iter()
                .enumerate()
                .map(|(j, &w)| (total_of(j, w), j, rng.random::<u32>())),
        );
        if limit > 0 && limit < order.len() {
            order.select_nth_unstable_by(limit - 1, by_rank);
            order.truncate(limit);
        }
        order.sort_unstable_by(by_rank);
        return;
    }
    // The best `limit` in one pass, kept sorted. A node's tie-break key is drawn only when it
    // is compared: a node below the worst kept total can never be returned, and keys are
    // independent, so drawing them late picks among ties as uniformly as drawing one per
    // node up front. When totals rise with the sums, a node whose sum is below the worst kept
    // one's is passed over on the integers, without the conversion, division and comparison
    // of its total, as the comparison of totals would pass it over (no key drawn either).
    let mut worst_weighted = i64::MIN;
    for (j, &w) in weighted.iter().enumerate() {
        if monotone && w < worst_weighted {
            debug_assert!(
                order
                    .last()
                    .is_some_and(|worst| total_of(j, w).total_cmp(&worst.0).is_lt()),
                "a node passed over on its sum is not below the worst kept total"
            );
            continue;
        }
        let total = total_of(j, w);
        if order.len() == limit
            && order
                .last()
                .is_some_and(|worst| total.total_cmp(&worst.0).is_lt())
        {
            continue;
        }
        let entry = (total, j, rng.random::<u32>());
        let at = order.partition_point(|e| by_rank(e, &entry).is_le());
        if at < limit {
            if order.len() == limit {
                order.pop();
            }
            order.insert(at, entry);
            if order.len() == limit {
                worst_weighted = order.last().map_or(i64::MIN, |e| weighted[e.1]);
            }
        }
    }
}

impl Profile {
    /// Constraints the pod declares that none of this profile's filters checks, each named
    /// with the filter it would need.
    pub fn unchecked_constraints(&self, pod: &PodInfo) -> Vec<String> {
        CONSTRAINT_FILTERS
            .iter()
            .filter(|(filter, _, declared)| {
                declared(pod) && !self.filters.iter().any(|f| f.name() == *filter)
            })
            .map(|(filter, field, _)| {
                format!("{field} (profile {:?} has no {filter} filter)", self.name)
            })
            .collect()
    }

    /// Filters and scores `snapshot`'s nodes (or only `candidates`, by index) for `pod`.
    /// Only the best `limit` nodes are sorted (0: all); ties are broken at random. Every
    /// node is examined, whatever the profile's [`NodeSampling`].
    pub fn evaluate(
        &self,
        snapshot: &ClusterSnapshot,
        pod: &PodInfo,
        candidates: Option<&[usize]>,
        limit: usize,
        rng: &mut impl Rng,
    ) -> Evaluation {
        self.evaluate_inner(snapshot, pod, candidates, limit, rng, None)
    }

    /// [`Profile::evaluate`] as a scheduling cycle runs it: with the profile's
    /// [`NodeSampling`], filtering starts at `cursor` and stops once enough feasible nodes
    /// are found, and `cursor` moves past the nodes examined (kube-scheduler's
    /// `nextStartNodeIndex`). A pod no node fits examines every node, so its reasons and
    /// preemption see the whole cluster. `candidates` must not repeat a node (the scheduler
    /// passes each Kubernetes node once): where a cycle stops is counted in nodes.
    pub fn evaluate_sampled(
        &self,
        snapshot: &ClusterSnapshot,
        pod: &PodInfo,
        candidates: Option<&[usize]>,
        limit: usize,
        rng: &mut impl Rng,
        cursor: &mut SampleCursor,
    ) -> Evaluation {
        self.evaluate_inner(snapshot, pod, candidates, limit, rng, Some(cursor))
    }

    /// Runs the stale-node policy and then `active` filters over `slice` (indices into the
    /// snapshot): the nodes passing end in `passing` (cleared first, in `slice`'s order), the
    /// rejections are appended to `filtered` in `slice`'s order, each with the first filter
    /// (in profile order) that refused it.
    fn filter_slice(
        &self,
        ctx: &CycleContext<'_>,
        active: &[(&dyn FilterPlugin, Option<&PreFilterState>)],
        pod: &PodInfo,
        slice: &[usize],
        passing: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        let mark = filtered.len();
        passing.clear();
        if self.stale_policy == StalePolicy::Filter {
            for &i in slice {
                if ctx.snapshot.nodes()[i].stale {
                    filtered.push(FilteredNode {
                        index: i,
                        plugin: STALE_FILTER,
                        reason: Reason::Borrowed(STALE_REASON),
                    });
                } else {
                    passing.push(i);
                }
            }
        } else {
            passing.extend_from_slice(slice);
        }
        for &(f, state) in active {
            if passing.is_empty() {
                break;
            }
            if !column_filter(ctx, f, state, pod, passing, filtered) {
                f.filter_nodes(ctx, state, pod, passing, filtered);
            }
        }
        let rejected = &mut filtered[mark..];
        // Rejections in slice order, as a node-by-node pass lists them.
        if slice.is_sorted() {
            // Each filter appends in order: a stable sort merges the runs.
            rejected.sort_by_key(|f| f.index);
        } else {
            // A node listed twice sorts at its first place.
            let mut position: HashMap<usize, usize> = HashMap::with_capacity(slice.len());
            for (p, &i) in slice.iter().enumerate() {
                position.entry(i).or_insert(p);
            }
            rejected.sort_by_key(|f| position.get(&f.index).copied());
        }
    }

    fn evaluate_inner(
        &self,
        snapshot: &ClusterSnapshot,
        pod: &PodInfo,
        candidates: Option<&[usize]>,
        limit: usize,
        rng: &mut impl Rng,
        cursor: Option<&mut SampleCursor>,
    ) -> Evaluation {
        // Digest rows pay off when most of the snapshot is evaluated (they are built once per
        // snapshot generation and window, then shared).
        let wide = candidates.is_none_or(|c| c.len().saturating_mul(8) >= snapshot.nodes().len());
        let mut unchecked = self.unchecked_constraints(pod);
        if !pod.claims.is_empty() && pod.volumes.is_none() {
            unchecked.push(
                "spec.volumes[] (persistentVolumeClaim or ephemeral claims not resolved: no \
                 cluster state)"
                    .to_string(),
            );
        }
        if snapshot.namespaces.is_none()
            && pod
                .pod_affinity
                .terms()
                .any(AffinityTerm::selects_namespaces_by_label)
        {
            unchecked.push(
                "spec.affinity namespaceSelector (namespaces' labels not known: no Namespace \
                 watch)"
                    .to_string(),
            );
        }
        if !pod.unsupported.is_empty() || !unchecked.is_empty() {
            // Never a silent violation: a constraint we cannot check refuses every node.
            let mut fields = pod.unsupported.clone();
            fields.extend(unchecked);
            let reason = unsupported_reason(&fields);
            let refuse = |index| FilteredNode {
                index,
                plugin: UNSUPPORTED_FILTER,
                reason: Reason::Owned(reason.clone()),
            };
            let filtered: Vec<FilteredNode> = match candidates {
                Some(c) => c.iter().copied().map(refuse).collect(),
                None => (0..snapshot.nodes().len()).map(refuse).collect(),
            };
            return Evaluation {
                ranked: Vec::new(),
                evaluated: filtered.len(),
                filtered,
                timings: PhaseTimings::default(),
            };
        }
        let mut scratch = Scratch::take();
        let table = wide.then(|| snapshot.digests(self.window_seconds));
        let mut current = std::mem::take(&mut scratch.current);
        let ctx = CycleContext {
            snapshot,
            window_seconds: self.window_seconds,
            stale_policy: self.stale_policy,
            digests: table.as_deref(),
            current: table
                .as_deref()
                .map(|t| snapshot.current_rows(t, &mut current)),
        };
        let indices: &[usize] = match candidates {
            Some(c) => c,
            None => {
                let all = &mut scratch.all;
                if all.len() != snapshot.nodes().len() {
                    all.clear();
                    all.extend(0..snapshot.nodes().len());
                }
                &scratch.all
            }
        };
        let mut feasible: Vec<&NodeView> = std::mem::take(&mut scratch.feasible);
        let mut feasible_idx: Vec<usize> = std::mem::take(&mut scratch.feasible_idx);
        feasible_idx.clear();
        feasible.reserve(indices.len());
        feasible_idx.reserve(indices.len());
        let mut filtered = Vec::new();
        let started = std::time::Instant::now();
        let states: Vec<Option<PreFilterState>> = self
            .filters
            .iter()
            .map(|f| f.prefilter(&ctx, pod))
            .collect();
        let prefiltered = std::time::Instant::now();
        // Only the filters that may refuse a node for this pod run per node.
        let active: Vec<(&dyn FilterPlugin, Option<&PreFilterState>)> = self
            .filters
            .iter()
            .zip(&states)
            .filter(|(f, s)| !f.skips(s.as_ref(), pod))
            .map(|(f, s)| (f.as_ref(), s.as_ref()))
            .collect();
        // Stale nodes first, then each filter over the nodes still feasible: a node is
        // rejected by the first filter (in profile order) that refuses it, as before. A
        // sampled cycle filters from its cursor on, a slice at a time, until it has found
        // the feasible nodes it wants (kube-scheduler's `percentageOfNodesToScore`).
        let mut passing = std::mem::take(&mut scratch.passing);
        let to_find = match cursor.as_ref() {
            Some(_) => self.sampling.feasible_to_find(indices.len()),
            None => indices.len(),
        };
        let examined = if to_find >= indices.len() {
            self.filter_slice(&ctx, &active, pod, indices, &mut passing, &mut filtered);
            feasible_idx.extend_from_slice(&passing);
            indices.len()
        } else {
            debug_assert!(
                indices.len()
                    == indices
                        .iter()
                        .collect::<std::collections::HashSet<_>>()
                        .len(),
                "a sampled evaluation's candidates repeat a node"
            );
            let start = cursor.as_ref().map_or(0, |c| c.next % indices.len());
            let mut examined = 0;
            while feasible_idx.len() < to_find && examined < indices.len() {
                let from = (start + examined) % indices.len();
                let wanted = to_find - feasible_idx.len();
                // As many as are still wanted (at least a few dozen, so a sparse tail is not
                // filtered node by node), never wrapping within a slice.
                let take = wanted
                    .max(MIN_SAMPLE_SLICE)
                    .min(indices.len() - examined)
                    .min(indices.len() - from);
                let slice = &indices[from..from + take];
                let mark = filtered.len();
                self.filter_slice(&ctx, &active, pod, slice, &mut passing, &mut filtered);
                if passing.len() >= wanted {
                    // Stop right after the last node wanted, as a node-by-node pass would:
                    // the rest of the slice is the next cycle's. Passing nodes and
                    // rejections are both in slice order, so one walk splits them.
                    let (mut kept, mut rejected, mut cut) = (0, 0, 0);
                    while kept < wanted {
                        if slice[cut] == passing[kept] {
                            kept += 1;
                        } else {
                            rejected += 1;
                        }
                        cut += 1;
                    }
                    passing.truncate(wanted);
                    filtered.truncate(mark + rejected);
                    feasible_idx.extend_from_slice(&passing);
                    examined += cut;
                    break;
                }
                feasible_idx.extend_from_slice(&passing);
                examined += take;
            }
            if let Some(c) = cursor {
                c.next = (start + examined) % indices.len();
            }
            examined
        };
        feasible.extend(feasible_idx.iter().map(|&i| &snapshot.nodes()[i]));
        scratch.passing = passing;
        let filtered_at = std::time::Instant::now();
        let n = feasible.len();
        // One column of `n` scores per plugin, plugin after plugin; each column is clamped
        // as it is added to the weighted sums (one pass), and the breakdowns of the nodes
        // returned clamp their own entries.
        let mut columns = std::mem::take(&mut scratch.scores);
        // Not zeroed between pods: every plugin writes every entry of its column (the
        // contract of `ScorePlugin::score`, checked for each plugin by the policy crate's
        // tests, and in debug builds here), and a score left over could only be clamped.
        if columns.len() < n * self.scores.len() {
            columns.resize(n * self.scores.len(), 0);
        }
        columns.truncate(n * self.scores.len());
        if cfg!(debug_assertions) {
            columns.fill(i64::MIN);
        }
        let mut weighted = std::mem::take(&mut scratch.weighted);
        weighted.clear();
        weighted.resize(n, 0);
        if n > 0 {
            for ((plugin, w), out) in self.scores.iter().zip(columns.chunks_exact_mut(n)) {
                if !column_scores(&ctx, plugin.as_ref(), pod, &feasible_idx, out) {
                    plugin.score_indexed(&ctx, pod, &feasible, &feasible_idx, out);
                }
                debug_assert!(
                    !out.contains(&i64::MIN),
                    "{} left scores unwritten",
                    plugin.name()
                );
                let w = *w;
                for (t, s) in weighted.iter_mut().zip(out.iter()) {
                    *t += w * (*s).clamp(0, MAX_NODE_SCORE);
                }
            }
        }
        let per_plugin = || columns.chunks_exact(n.max(1));
        let weight_sum: i64 = self.scores.iter().map(|(_, w)| *w).sum();
        let total_of = |j: usize, weighted: i64| {
            let mut total = if weight_sum > 0 {
                weighted as f64 / weight_sum as f64
            } else {
                0.0
            };
            if self.stale_policy == StalePolicy::Penalize && feasible[j].stale {
                total *= self.stale_penalty;
            }
            total
        };
        // Without a stale penalty a total is the weighted sum over a positive constant, so
        // totals rise with the sums. Exact while sums stay under 2^50: they convert exactly,
        // and two quotients' rounding errors (each at most 2^-53 of the value) are smaller
        // than the gap between distinct sums' quotients (at least 2^-50 of the larger).
        let exact = self
            .scores
            .iter()
            .try_fold(0u64, |a, (_, w)| a.checked_add(w.unsigned_abs()))
            .and_then(|s| s.checked_mul(MAX_NODE_SCORE.unsigned_abs()))
            .is_some_and(|m| m < 1 << 50);
        let monotone = exact && self.stale_policy != StalePolicy::Penalize && weight_sum > 0;
        // Upstream picks uniformly among equal best scores. Breakdowns are only built for the
        // nodes returned.
        let mut order = std::mem::take(&mut scratch.order);
        select_best(&weighted, limit, monotone, total_of, rng, &mut order);
        let ranked = order
            .iter()
            .map(|&(total, j, _)| RankedNode {
                index: feasible_idx[j],
                total,
                plugins: self
                    .scores
                    .iter()
                    .zip(per_plugin())
                    .map(|((p, w), s)| (p.name(), s[j].clamp(0, MAX_NODE_SCORE), *w))
                    .collect(),
                stale: feasible[j].stale,
            })
            .collect();
        scratch.feasible = Scratch::emptied(feasible);
        scratch.feasible_idx = feasible_idx;
        scratch.scores = columns;
        scratch.order = order;
        scratch.weighted = weighted;
        let evaluated = examined;
        scratch.current = current;
        scratch.put_back();
        let timings = PhaseTimings {
            prefilter: prefiltered - started,
            filter: filtered_at - prefiltered,
            score: filtered_at.elapsed(),
        };
        Evaluation {
            ranked,
            filtered,
            evaluated,
            timings,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::snapshot::NodeAllocation;
    use rand::SeedableRng;
    use std::sync::Arc;

    #[derive(Debug)]
    struct RejectNamed(&'static str);
    impl FilterPlugin for RejectNamed {
        fn name(&self) -> &'static str {
            "RejectNamed"
        }
        fn filter(&self, _: &CycleContext<'_>, _: &PodInfo, node: &NodeView) -> Result<(), Reason> {
            if &*node.name == self.0 {
                Err("node(s) were named badly".into())
            } else {
                Ok(())
            }
        }
    }

    /// A score plugin that scores each node by a function of its name.
    #[derive(Debug)]
    struct ByName(&'static str, fn(&str) -> i64);
    impl ScorePlugin for ByName {
        fn name(&self) -> &'static str {
            self.0
        }
        fn score(&self, _: &CycleContext<'_>, _: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
            for (o, n) in out.iter_mut().zip(nodes) {
                *o = (self.1)(&n.name);
            }
        }
    }

    fn by_name_length() -> ByName {
        ByName("ByNameLength", |n| n.len() as i64 * 10)
    }

    fn node(name: &str) -> NodeView {
        NodeView {
            name: Arc::from(name),
            agent: None,
            kube: None,
            alloc: Arc::new(NodeAllocation::default()),
            stale: true,
            report_age_seconds: None,
        }
    }

    /// A filter that refuses the nodes it names, with its own name and reason.
    #[derive(Debug)]
    struct RejectSet(&'static str, &'static [&'static str]);
    impl FilterPlugin for RejectSet {
        fn name(&self) -> &'static str {
            self.0
        }
        fn filter(&self, _: &CycleContext<'_>, _: &PodInfo, node: &NodeView) -> Result<(), Reason> {
            if self.1.contains(&&*node.name) {
                Err(Reason::Borrowed(self.0))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn rejections_name_the_first_filter_in_candidate_order() {
        let names = ["a", "b", "c", "d", "e", "f"];
        let mut nodes: Vec<NodeView> = names.iter().map(|n| node(n)).collect();
        for n in &mut nodes {
            n.stale = false;
        }
        nodes[4].stale = true; // e
        let snap = ClusterSnapshot::new(nodes, 1);
        let first = RejectSet("First", &["b", "d", "e"]);
        let second = RejectSet("Second", &["a", "d", "f"]);
        let profile = Profile {
            name: "t".into(),
            filters: vec![Box::new(first), Box::new(second)],
            scores: vec![],
            window_seconds: 60,
            stale_policy: StalePolicy::Filter,
            stale_penalty: 1.0,
            preemption: None,
            sampling: NodeSampling::ALL,
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let at = |name: &str| {
            snap.nodes()
                .iter()
                .position(|n| &*n.name == name)
                .expect("node")
        };
        let candidates: Vec<usize> = ["f", "d", "a", "e", "c", "b"].map(at).to_vec();
        let ev = profile.evaluate(&snap, &PodInfo::default(), Some(&candidates), 0, &mut rng);
        // A node-by-node pass: stale first, then the filters in profile order.
        let mut want = Vec::new();
        for &i in &candidates {
            let n = &snap.nodes()[i];
            let plugin = if n.stale {
                STALE_FILTER
            } else if profile.filters[0]
                .filter_prepared(
                    &CycleContext::new(&snap, 60, StalePolicy::Filter),
                    None,
                    &PodInfo::default(),
                    n,
                )
                .is_err()
            {
                "First"
            } else if profile.filters[1]
                .filter_prepared(
                    &CycleContext::new(&snap, 60, StalePolicy::Filter),
                    None,
                    &PodInfo::default(),
                    n,
                )
                .is_err()
            {
                "Second"
            } else {
                continue;
            };
            want.push((i, plugin));
        }
        let got: Vec<(usize, &str)> = ev.filtered.iter().map(|f| (f.index, f.plugin)).collect();
        assert_eq!(got, want);
        assert_eq!(ev.ranked.len(), 1);
        assert_eq!(&*snap.nodes()[ev.ranked[0].index].name, "c");
        // A candidate listed twice is rejected twice, both at its first place.
        let twice: Vec<usize> = ["d", "c", "d"].map(at).to_vec();
        let ev = profile.evaluate(&snap, &PodInfo::default(), Some(&twice), 0, &mut rng);
        let got: Vec<usize> = ev.filtered.iter().map(|f| f.index).collect();
        assert_eq!(got, vec![at("d"), at("d")]);
    }

    /// Refuses the nodes whose name `refuse` picks.
    #[derive(Debug)]
    struct RejectWhere(fn(&str) -> bool);
    impl FilterPlugin for RejectWhere {
        fn name(&self) -> &'static str {
            "RejectWhere"
        }
        fn filter(&self, _: &CycleContext<'_>, _: &PodInfo, node: &NodeView) -> Result<(), Reason> {
            if (self.0)(&node.name) {
                Err("node(s) were refused".into())
            } else {
                Ok(())
            }
        }
    }

    fn sampled(refuse: fn(&str) -> bool, sampling: NodeSampling) -> Profile {
        Profile {
            name: "t".into(),
            filters: vec![Box::new(RejectWhere(refuse))],
            scores: vec![(Box::new(by_name_length()), 1)],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 0.5,
            preemption: None,
            sampling,
        }
    }

    /// The node numbers (`n0042` → 42) of `indices` into `snap`.
    fn numbers(snap: &ClusterSnapshot, indices: impl IntoIterator<Item = usize>) -> Vec<usize> {
        indices
            .into_iter()
            .map(|i| snap.nodes()[i].name[1..].parse().expect("a number"))
            .collect()
    }

    #[test]
    fn a_sampled_cycle_stops_at_enough_feasible_nodes_and_the_next_goes_on_from_there() {
        let snap = ClusterSnapshot::new((0..1000).map(|i| node(&format!("n{i:04}"))).collect(), 1);
        let pod = PodInfo::default();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(5);
        let mut cursor = SampleCursor::default();
        // Adaptive at 1 000 nodes: 420 feasible nodes, from the cursor on.
        let profile = sampled(|_| false, NodeSampling::ADAPTIVE);
        let mut seen = Vec::new();
        for round in 0..3 {
            let ev = profile.evaluate_sampled(&snap, &pod, None, 0, &mut rng, &mut cursor);
            assert_eq!(ev.evaluated, 420, "round {round}");
            assert_eq!(ev.ranked.len(), 420);
            let mut got = numbers(&snap, ev.ranked.iter().map(|r| r.index));
            got.sort_unstable();
            seen.push(got);
        }
        assert_eq!(seen[0], (0..420).collect::<Vec<_>>());
        assert_eq!(seen[1], (420..840).collect::<Vec<_>>());
        // The third wraps around the end.
        assert_eq!(seen[2], (0..260).chain(840..1000).collect::<Vec<_>>());
        assert_eq!(cursor.next, 260);
        // Unsampled evaluation ignores the sampling and leaves no cursor behind.
        let ev = profile.evaluate(&snap, &pod, None, 0, &mut rng);
        assert_eq!(ev.evaluated, 1000);

        // Every odd node refused: up to the 420th even node (938) examined, the rejections in
        // node order.
        let odd = sampled(
            |n| n.ends_with(['1', '3', '5', '7', '9']),
            NodeSampling::ADAPTIVE,
        );
        let mut cursor = SampleCursor { next: 100 };
        let ev = odd.evaluate_sampled(&snap, &pod, None, 0, &mut rng, &mut cursor);
        assert_eq!(ev.evaluated, 839);
        assert_eq!(ev.ranked.len(), 420);
        assert_eq!(
            numbers(&snap, ev.filtered.iter().map(|f| f.index)),
            (100..939).filter(|i| i % 2 == 1).collect::<Vec<_>>()
        );
        assert_eq!(cursor.next, 939);

        // No node fits: every node is examined, so the reasons cover the cluster.
        let none = sampled(|_| true, NodeSampling::new(10).expect("valid"));
        let ev = none.evaluate_sampled(&snap, &pod, None, 0, &mut rng, &mut cursor);
        assert_eq!(
            (ev.evaluated, ev.filtered.len(), ev.ranked.len()),
            (1000, 1000, 0)
        );
        assert_eq!(
            ev.summary(),
            "0/1000 nodes are available: 1000 node(s) were refused."
        );
        // In the order examined: from the cursor round to it again.
        let order = numbers(&snap, ev.filtered.iter().map(|f| f.index));
        assert_eq!(order[..3], [939, 940, 941]);
        assert_eq!(order[61..64], [0, 1, 2]);
        assert_eq!(cursor.next, 939);

        // Below 100 nodes every node is examined, whatever the percentage.
        let small = ClusterSnapshot::new((0..50).map(|i| node(&format!("n{i:04}"))).collect(), 1);
        let one = sampled(|_| false, NodeSampling::new(1).expect("valid"));
        let ev = one.evaluate_sampled(&small, &pod, None, 0, &mut rng, &mut cursor);
        assert_eq!(ev.evaluated, 50);
        // Candidates: sampled among them only.
        let evens: Vec<usize> = (0..1000).step_by(2).collect();
        let ten = sampled(|_| false, NodeSampling::new(10).expect("valid"));
        let mut cursor = SampleCursor::default();
        let ev = ten.evaluate_sampled(&snap, &pod, Some(&evens), 0, &mut rng, &mut cursor);
        // 10 % of 500 candidates is 50: at least 100.
        assert_eq!(ev.evaluated, 100);
        let mut got = numbers(&snap, ev.ranked.iter().map(|r| r.index));
        got.sort_unstable();
        assert_eq!(got, (0..200).step_by(2).collect::<Vec<_>>());
    }

    /// Refuses the nodes named in its set, under its own name.
    #[derive(Debug)]
    struct RejectNames(&'static str, std::collections::HashSet<String>);
    impl FilterPlugin for RejectNames {
        fn name(&self) -> &'static str {
            self.0
        }
        fn filter(&self, _: &CycleContext<'_>, _: &PodInfo, node: &NodeView) -> Result<(), Reason> {
            if self.1.contains(&*node.name) {
                Err(Reason::Borrowed(self.0))
            } else {
                Ok(())
            }
        }
    }

    #[test]
    fn a_sampled_cycle_examines_what_a_node_by_node_walk_would() {
        use rand::Rng;
        use rand::seq::SliceRandom;
        use std::collections::HashSet;
        let mut draw = rand::rngs::SmallRng::seed_from_u64(11);
        let mut rng = rand::rngs::SmallRng::seed_from_u64(12);
        for case in 0..300 {
            let n = draw.random_range(100..700);
            let names: Vec<String> = (0..n).map(|i| format!("n{i:04}")).collect();
            let stale: Vec<bool> = (0..n).map(|_| draw.random_bool(0.1)).collect();
            let snap = ClusterSnapshot::new(
                names
                    .iter()
                    .zip(&stale)
                    .map(|(m, &stale)| NodeView { stale, ..node(m) })
                    .collect(),
                1,
            );
            // Dense, sparse or clustered refusals, by two filters.
            let density = draw.random_range(0.0..0.9);
            let mut refuse = |clustered: bool| -> HashSet<String> {
                names
                    .iter()
                    .enumerate()
                    .filter(|(i, _)| draw.random_bool(density / 2.0) || (clustered && i % 97 < 40))
                    .map(|(_, m)| m.clone())
                    .collect()
            };
            let (first, second) = (refuse(case % 3 == 0), refuse(false));
            let percentage = draw.random_range(0..=100);
            let stale_policy = if case % 4 < 2 {
                StalePolicy::Filter
            } else {
                StalePolicy::Fallback
            };
            let profile = Profile {
                name: "t".into(),
                filters: vec![
                    Box::new(RejectNames("First", first.clone())),
                    Box::new(RejectNames("Second", second.clone())),
                ],
                scores: vec![(Box::new(by_name_length()), 1)],
                window_seconds: 60,
                stale_policy,
                stale_penalty: 0.5,
                preemption: None,
                sampling: NodeSampling::new(percentage).expect("valid"),
            };
            // Every node, or some of them in a random order.
            let candidates: Option<Vec<usize>> = (case % 2 == 1).then(|| {
                let mut c: Vec<usize> = (0..n).filter(|_| draw.random_bool(0.7)).collect();
                c.shuffle(&mut draw);
                c
            });
            let list: Vec<usize> = candidates.clone().unwrap_or_else(|| (0..n).collect());
            let start = draw.random_range(0..n);
            let mut cursor = SampleCursor { next: start };
            let ev = profile.evaluate_sampled(
                &snap,
                &PodInfo::default(),
                candidates.as_deref(),
                0,
                &mut rng,
                &mut cursor,
            );
            // The walk: node by node from the cursor until enough are feasible (every node in
            // candidate order when every node is wanted), each rejected by the first check
            // that refuses it.
            let len = list.len();
            let to_find = profile.sampling.feasible_to_find(len);
            let begin = if to_find >= len {
                0
            } else {
                start % len.max(1)
            };
            let (mut feasible, mut rejected, mut walked) = (Vec::new(), Vec::new(), 0);
            while walked < len && feasible.len() < to_find {
                let i = list[(begin + walked) % len];
                let name = &*snap.nodes()[i].name;
                if stale_policy == StalePolicy::Filter && snap.nodes()[i].stale {
                    rejected.push((i, STALE_FILTER));
                } else if first.contains(name) {
                    rejected.push((i, "First"));
                } else if second.contains(name) {
                    rejected.push((i, "Second"));
                } else {
                    feasible.push(i);
                }
                walked += 1;
            }
            let what = format!(
                "case {case}: {len} of {n} nodes, {percentage} %, start {start}, {stale_policy:?}"
            );
            assert_eq!(ev.evaluated, walked, "{what}");
            let mut got: Vec<usize> = ev.ranked.iter().map(|r| r.index).collect();
            got.sort_unstable();
            feasible.sort_unstable();
            assert_eq!(got, feasible, "{what}");
            let got: Vec<(usize, &str)> = ev.filtered.iter().map(|f| (f.index, f.plugin)).collect();
            assert_eq!(got, rejected, "{what}");
            let moved = if to_find >= len {
                start
            } else {
                (start + walked) % len
            };
            assert_eq!(cursor.next, moved, "{what}");
        }
    }

    #[test]
    fn ranks_filters_and_summarises_with_a_limit() {
        let snap = ClusterSnapshot::new(vec![node("a"), node("bbb"), node("cc"), node("dddd")], 1);
        let profile = Profile {
            name: "t".into(),
            filters: vec![Box::new(RejectNamed("dddd"))],
            scores: vec![(Box::new(by_name_length()), 2)],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 0.5,
            preemption: None,
            sampling: NodeSampling::ALL,
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let ev = profile.evaluate(&snap, &PodInfo::default(), None, 1, &mut rng);
        assert_eq!(ev.ranked.len(), 1, "cut to the limit");
        assert_eq!(&*snap.nodes()[ev.ranked[0].index].name, "bbb");
        assert_eq!(ev.ranked[0].total, 30.0);
        assert_eq!(ev.ranked[0].plugins, vec![("ByNameLength", 30, 2)]);
        assert_eq!(
            ev.summary(),
            "3/4 nodes are available: 1 node(s) were named badly."
        );
        let stale = Profile {
            stale_policy: StalePolicy::Filter,
            ..profile
        };
        let ev = stale.evaluate(&snap, &PodInfo::default(), None, 0, &mut rng);
        assert_eq!(
            ev.summary(),
            "0/4 nodes are available: 4 node(s) had stale load metrics."
        );
    }

    fn last_digit() -> ByName {
        ByName("LastDigit", |n| {
            n.bytes().last().map_or(0, |b| i64::from(b % 10) * 10)
        })
    }

    /// Evaluations on one thread share working vectors: a smaller evaluation in between
    /// (fewer nodes, given candidates, nothing feasible) leaves nothing behind that changes
    /// the next verdict, and the vectors keep their capacity.
    #[test]
    fn evaluations_reuse_working_vectors_without_carrying_anything_over() {
        let names: Vec<String> = (0..60).map(|i| format!("n{i:02}")).collect();
        let big = ClusterSnapshot::new(names.iter().map(|n| node(n)).collect(), 1);
        let small = ClusterSnapshot::new(vec![node("a"), node("bbb"), node("cc")], 1);
        let profile = Profile {
            name: "t".into(),
            filters: vec![Box::new(RejectNamed("n07"))],
            scores: vec![(Box::new(by_name_length()), 1), (Box::new(last_digit()), 3)],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 0.5,
            preemption: None,
            sampling: NodeSampling::ALL,
        };
        let pod = PodInfo::default();
        let run = |snap: &ClusterSnapshot, candidates: Option<&[usize]>| {
            let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
            let ev = profile.evaluate(snap, &pod, candidates, 0, &mut rng);
            (ev.ranked, ev.filtered, ev.evaluated)
        };
        // The same evaluation on a thread of its own (nothing to reuse) is the reference.
        let fresh = |snap: &ClusterSnapshot, candidates: Option<&[usize]>| {
            std::thread::scope(|s| s.spawn(|| run(snap, candidates)).join())
                .expect("evaluation thread")
        };
        let first = run(&big, None);
        assert_eq!(first.0.len(), 59);
        // Best: last digit 9, (30 × 1 + 90 × 3) / 4 = 75.
        assert_eq!(first.0[0].total, 75.0);
        assert_eq!(
            first.0[0].plugins,
            vec![("ByNameLength", 30, 1), ("LastDigit", 90, 3)]
        );
        assert!(first.0.iter().all(|r| &*big.nodes()[r.index].name != "n07"));
        for (snap, candidates) in [
            (&small, Some(&[2usize][..])),
            (&small, Some(&[][..])),
            (&small, None),
            (&big, Some(&[3usize, 7, 9][..])),
            (&big, None),
        ] {
            assert_eq!(
                run(snap, candidates),
                fresh(snap, candidates),
                "{candidates:?}"
            );
        }
        let picked = run(&small, Some(&[2]));
        assert_eq!(picked.0.len(), 1);
        assert_eq!(&*small.nodes()[picked.0[0].index].name, "cc");
        assert_eq!(
            run(&big, None),
            first,
            "same verdict after smaller evaluations"
        );
        let kept = Scratch::take();
        assert!(kept.feasible.is_empty());
        assert!(
            kept.feasible.capacity() >= 59 && kept.order.capacity() >= 59,
            "buffers kept: {} {}",
            kept.feasible.capacity(),
            kept.order.capacity()
        );
        assert!(kept.scores.capacity() >= 2 * 59 && kept.all.len() == 60);
    }

    /// Scores `n<k>` by `k` × 7 mod 5, × 10: many ties.
    fn tied(name: &str) -> i64 {
        name[1..].parse::<i64>().map_or(0, |k| k * 7 % 5 * 10)
    }

    proptest::proptest! {
        /// The streaming selection of the best `limit` nodes returns the totals a full
        /// ranking puts first, in the same order, each the node's own total.
        #[test]
        fn streaming_top_k_matches_a_full_ranking(n in 1usize..150, limit in 1usize..70, seed in 0u64..1000) {
            let names: Vec<String> = (0..n).map(|k| format!("n{k}")).collect();
            let nodes: Vec<NodeView> = names.iter().map(|s| node(s)).collect();
            let snap = ClusterSnapshot::new(nodes, 1);
            let profile = Profile {
                name: "t".into(),
                filters: vec![],
                scores: vec![(Box::new(ByName("Tied", tied)), 1)],
                window_seconds: 60,
                stale_policy: StalePolicy::Fallback,
                stale_penalty: 1.0,
                preemption: None,
                sampling: NodeSampling::ALL,
            };
            let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
            let top = profile.evaluate(&snap, &PodInfo::default(), None, limit, &mut rng);
            let all = profile.evaluate(&snap, &PodInfo::default(), None, 0, &mut rng);
            let totals = |ev: &Evaluation| ev.ranked.iter().map(|r| r.total).collect::<Vec<_>>();
            let mut want = totals(&all);
            want.truncate(limit);
            proptest::prop_assert_eq!(totals(&top), want);
            let mut seen = std::collections::HashSet::new();
            for r in &top.ranked {
                proptest::prop_assert!(seen.insert(r.index), "a node returned twice");
                proptest::prop_assert_eq!(r.total, tied(&snap.nodes()[r.index].name) as f64);
            }
        }

        /// The streaming selection passes nodes over on their weighted sums when totals are
        /// the sums over a constant; it returns exactly the nodes, in the order and with the
        /// random tie-breaks, that comparing every total returns. (`Penalize` with a penalty
        /// of 1 has the same totals but compares them all: the test nodes are stale.)
        #[test]
        fn passing_over_on_sums_picks_what_comparing_totals_picks(
            n in 1usize..200,
            limit in 1usize..=STREAMED_LIMIT,
            seed in 0u64..1000,
            weights in (-4i64..9, -4i64..5),
        ) {
            proptest::prop_assume!(weights.0 + weights.1 > 0, "totals need a positive weight sum");
            let names: Vec<String> = (0..n).map(|k| format!("n{k}")).collect();
            let nodes: Vec<NodeView> = names.iter().map(|s| node(s)).collect();
            let snap = ClusterSnapshot::new(nodes, 1);
            let with = |stale_policy| Profile {
                name: "t".into(),
                filters: vec![],
                scores: vec![
                    (Box::new(ByName("Tied", tied)), weights.0),
                    (Box::new(by_name_length()), weights.1),
                ],
                window_seconds: 60,
                stale_policy,
                stale_penalty: 1.0,
                preemption: None,
                sampling: NodeSampling::ALL,
            };
            let ranked = |policy| {
                let mut rng = rand::rngs::SmallRng::seed_from_u64(seed);
                with(policy)
                    .evaluate(&snap, &PodInfo::default(), None, limit, &mut rng)
                    .ranked
                    .iter()
                    .map(|r| (r.index, r.total))
                    .collect::<Vec<_>>()
            };
            proptest::prop_assert_eq!(ranked(StalePolicy::Fallback), ranked(StalePolicy::Penalize));
        }

        /// Grouping by (plugin, reason) counts what a plain tally counts, whatever the order
        /// and however many reasons repeat or interleave, and the summary splits joined ones.
        #[test]
        fn filtered_groups_count_what_a_tally_counts(
            picks in proptest::collection::vec((0usize..3, 0usize..4), 0..200)
        ) {
            const PLUGINS: [&str; 3] = ["A", "B", "C"];
            const REASONS: [&str; 4] = ["r1", "r2", "r1, r2", "r3"];
            let ev = Evaluation {
                ranked: Vec::new(),
                filtered: picks
                    .iter()
                    .enumerate()
                    .map(|(index, &(p, r))| FilteredNode {
                        index,
                        plugin: PLUGINS[p],
                        reason: REASONS[r].into(),
                    })
                    .collect(),
                evaluated: picks.len() + 1,
                timings: PhaseTimings::default(),
            };
            let mut tally: BTreeMap<(&str, &str), usize> = BTreeMap::new();
            for &(p, r) in &picks {
                *tally.entry((PLUGINS[p], REASONS[r])).or_default() += 1;
            }
            let groups = ev.filtered_groups();
            let got: BTreeMap<(&str, &str), usize> =
                groups.iter().map(|g| ((g.plugin, g.reason), g.count)).collect();
            proptest::prop_assert_eq!(got.len(), groups.len(), "one group per pair");
            proptest::prop_assert_eq!(&got, &tally);
            let mut expected: BTreeMap<String, usize> = BTreeMap::new();
            for &(_, r) in &picks {
                for part in REASONS[r].split(REASON_SEPARATOR) {
                    *expected.entry(part.to_string()).or_default() += 1;
                }
            }
            let summary = ev.summary();
            let parts: BTreeMap<String, usize> = summary
                .split_once(": ")
                .map(|(_, rest)| rest.trim_end_matches('.'))
                .into_iter()
                .flat_map(|rest| rest.split(", "))
                .filter_map(|p| {
                    let (n, reason) = p.split_once(' ')?;
                    Some((reason.to_string(), n.parse().ok()?))
                })
                .collect();
            proptest::prop_assert_eq!(parts, expected, "{}", summary);
        }
    }

    #[test]
    fn constraints_nobody_checks_refuse_every_node_by_name() {
        let snap = ClusterSnapshot::new(vec![node("a"), node("b")], 1);
        let profile = Profile {
            name: "bare".into(),
            filters: vec![Box::new(RejectNamed("none"))],
            scores: vec![(Box::new(by_name_length()), 1)],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 0.5,
            preemption: None,
            sampling: NodeSampling::ALL,
        };
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let ok = profile.evaluate(&snap, &PodInfo::default(), None, 0, &mut rng);
        assert_eq!(ok.feasible(), 2);
        // A hard spread constraint this profile cannot check.
        let mut pod = PodInfo::default();
        pod.spread_constraints
            .push(crate::snapshot::SpreadConstraint::default());
        let ev = profile.evaluate(&snap, &pod, None, 0, &mut rng);
        assert_eq!(ev.feasible(), 0);
        assert!(ev.filtered.iter().all(|f| f.plugin == UNSUPPORTED_FILTER));
        assert_eq!(
            ev.summary(),
            "0/2 nodes are available: 2 pod uses spec.topologySpreadConstraints (DoNotSchedule) \
             (profile \"bare\" has no PodTopologySpread filter) that Loadstar does not \
             implement or cannot check here (refused rather than placed in violation)."
        );
        // Volume constraints: a ReadWriteOncePod claim needs VolumeRestrictions; a pod whose
        // only claims are ephemeral volumes' needs VolumeBinding but not VolumeZone, which
        // upstream does not run over them.
        let names = |pod: &PodInfo| -> Vec<String> {
            profile
                .unchecked_constraints(pod)
                .iter()
                .filter_map(|u| u.split(" has no ").nth(1).map(str::to_string))
                .collect()
        };
        let mut rwop = PodInfo {
            claims: vec!["data".into()],
            volumes: Some(crate::snapshot::VolumeNeeds {
                read_write_once_pod: vec!["data".into()],
                ..Default::default()
            }),
            ..PodInfo::default()
        };
        assert_eq!(
            names(&rwop),
            [
                "VolumeRestrictions filter)",
                "VolumeBinding filter)",
                "VolumeZone filter)"
            ]
        );
        rwop.claims = vec![crate::snapshot::PodClaim {
            name: "p-scratch".into(),
            ephemeral: true,
        }];
        rwop.volumes = Some(Default::default());
        assert_eq!(names(&rwop), ["VolumeBinding filter)"]);
        // A field the converter marked unsupported.
        let pod = PodInfo {
            unsupported: vec!["spec.volumes[0].persistentVolumeClaim".into()],
            ..PodInfo::default()
        };
        let ev = profile.evaluate(&snap, &pod, None, 0, &mut rng);
        assert_eq!(ev.feasible(), 0);
        assert!(ev.filtered[0].reason.contains("persistentVolumeClaim"));
        // A hostile client's names cannot make the reason, repeated per node, large, nor
        // split it into several summary entries.
        let pod = PodInfo {
            unsupported: (0..50)
                .map(|i| format!("spec.volumes[{i}].csi ({})", "x, y".repeat(100_000)))
                .collect(),
            ..PodInfo::default()
        };
        let ev = profile.evaluate(&snap, &pod, None, 0, &mut rng);
        let reason = &ev.filtered[0].reason;
        assert!(reason.len() < 800, "{} bytes", reason.len());
        assert!(reason.contains("47 more"), "{reason}");
        assert!(!reason.contains(REASON_SEPARATOR), "{reason}");
    }

    /// Scores a node 10 per pod on it plus the pod's CPU request in tenths of a core,
    /// counting the nodes it scores; keys a column per CPU request when `keyed`.
    #[derive(Debug)]
    struct PerPod {
        keyed: bool,
        scored: Arc<std::sync::atomic::AtomicUsize>,
    }
    impl ScorePlugin for PerPod {
        fn name(&self) -> &'static str {
            "PerPod"
        }
        fn score(&self, _: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
            self.scored
                .fetch_add(nodes.len(), std::sync::atomic::Ordering::Relaxed);
            for (o, n) in out.iter_mut().zip(nodes) {
                *o = n.alloc.pods.len() as i64 * 10 + pod.requests.cpu_millis / 100;
            }
        }
        fn column_key(&self, _: &CycleContext<'_>, pod: &PodInfo) -> Option<ColumnWords> {
            self.keyed
                .then_some([pod.requests.cpu_millis as u64, 0, 0, 0, 0, 0, 0, 0])
        }
    }

    /// A profile of these plugins on a 60 s window, every node examined.
    fn profile_of(
        filters: Vec<Box<dyn FilterPlugin>>,
        scores: Vec<(Box<dyn ScorePlugin>, i64)>,
    ) -> Profile {
        Profile {
            name: "p".into(),
            filters,
            scores,
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 1.0,
            preemption: None,
            sampling: NodeSampling::ALL,
        }
    }

    /// Nodes `n00`…`n39`, fresh, with Kubernetes facts and `pods(i)` pods on node `i`.
    fn forty_nodes(pods: impl Fn(usize) -> usize) -> ClusterSnapshot {
        let nodes = (0..40)
            .map(|i| {
                let mut alloc = NodeAllocation::default();
                for p in 0..pods(i) {
                    alloc.put_pod(crate::snapshot::PodOnNode {
                        uid: format!("old-{i}-{p}"),
                        ..Default::default()
                    });
                }
                NodeView {
                    kube: Some(Arc::default()),
                    stale: false,
                    alloc: Arc::new(alloc),
                    ..node(&format!("n{i:02}"))
                }
            })
            .collect();
        ClusterSnapshot::new(nodes, 1)
    }

    /// A pod requesting `cpu` millicores and nothing else.
    fn cpu_pod(cpu: i64) -> PodInfo {
        let mut p = PodInfo::default();
        p.requests.cpu_millis = cpu;
        p
    }

    /// Puts a pod on the evaluation's best node, as the scheduler's assumption does.
    fn assume_on_best(snap: &mut ClusterSnapshot, ev: &Evaluation, uid: String) {
        let best = ev.best().expect("feasible").index;
        let mut alloc = (*snap.nodes()[best].alloc).clone();
        alloc.put_pod(crate::snapshot::PodOnNode {
            uid,
            ..Default::default()
        });
        snap.set_alloc(best, Arc::new(alloc));
    }

    /// Ranked nodes by index (total's bits, plugin scores) and rejections in order.
    type Outcome = (
        Vec<(usize, u64, Vec<i64>)>,
        Vec<(usize, &'static str, String)>,
    );

    /// What two evaluations must agree on: every verdict, score and reason.
    fn outcome(ev: &Evaluation) -> Outcome {
        let mut ranked: Vec<(usize, u64, Vec<i64>)> = ev
            .ranked
            .iter()
            .map(|r| {
                (
                    r.index,
                    r.total.to_bits(),
                    r.plugins.iter().map(|p| p.1).collect(),
                )
            })
            .collect();
        ranked.sort();
        let refused = ev
            .filtered
            .iter()
            .map(|f| (f.index, f.plugin, f.reason.to_string()))
            .collect();
        (ranked, refused)
    }

    /// A plugin that keys its pods' shapes is scored from a column from the second pod of a
    /// shape on, and after an assumption only the node assumed on is scored again; the
    /// verdicts are those of the same plugin scoring every pod itself.
    #[test]
    fn shape_columns_score_again_only_the_nodes_edited_since() {
        let counted = |keyed| {
            let scored = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let plugin = PerPod {
                keyed,
                scored: scored.clone(),
            };
            let profile = profile_of(
                vec![Box::new(RejectNamed("n07"))],
                vec![(Box::new(plugin), 2), (Box::new(last_digit()), 1)],
            );
            (profile, scored)
        };
        let (keyed, scored) = counted(true);
        let (plain, _) = counted(false);
        let mut snap = forty_nodes(|_| 0);
        let mut rng = rand::rngs::StdRng::seed_from_u64(3);
        let scored_now = || scored.swap(0, std::sync::atomic::Ordering::Relaxed);
        let mut seen = Vec::new();
        for round in 0..6 {
            let ev = keyed.evaluate(&snap, &cpu_pod(300), None, 0, &mut rng);
            let want = plain.evaluate(&snap, &cpu_pod(300), None, 0, &mut rng);
            assert_eq!(outcome(&ev), outcome(&want), "round {round}");
            assert_eq!(ev.filtered.len(), 1);
            seen.push(scored_now());
            assume_on_best(&mut snap, &ev, format!("p{round}"));
        }
        // The first pod of the shape is scored by the plugin (39 feasible nodes), the second
        // builds the column (all 40), each later one scores the node assumed on.
        assert_eq!(seen, vec![39, 40, 1, 1, 1, 1]);
        assert_eq!(snap.digests(60).columns(), 1);
        // Another shape is scored by the plugin itself the first time.
        let ev = keyed.evaluate(&snap, &cpu_pod(500), None, 0, &mut rng);
        let want = plain.evaluate(&snap, &cpu_pod(500), None, 0, &mut rng);
        assert_eq!(outcome(&ev), outcome(&want));
        assert_eq!(scored_now(), 39);
        // A column someone holds while a node is edited is dropped, not left unmarked: the
        // next pod of the shape is scored by the plugin itself (the shape is new again).
        let key = ColumnKey {
            plugin: "PerPod",
            filter: false,
            stale_policy: StalePolicy::Fallback as u8,
            words: [300, 0, 0, 0, 0, 0, 0, 0],
        };
        let held = snap
            .digests(60)
            .column(&key, ColumnState::default)
            .expect("the shape's column");
        let marked = held.lock().edited.len();
        let at = (0..40).find(|&i| i != 7).expect("a feasible node");
        let mut alloc = (*snap.nodes()[at].alloc).clone();
        alloc.put_pod(crate::snapshot::PodOnNode {
            uid: "held".into(),
            ..Default::default()
        });
        snap.set_alloc(at, Arc::new(alloc));
        assert_eq!(
            held.lock().edited.len(),
            marked,
            "a held column is not marked"
        );
        drop(held);
        assert_eq!(snap.digests(60).columns(), 0);
        let ev = keyed.evaluate(&snap, &cpu_pod(300), None, 0, &mut rng);
        let want = plain.evaluate(&snap, &cpu_pod(300), None, 0, &mut rng);
        assert_eq!(outcome(&ev), outcome(&want));
        assert_eq!(scored_now(), 39);
        // A table someone holds is not patched at all: its rows no longer match the node,
        // so its columns are not read (the plugin scores the pod itself).
        let held = snap.digests(60);
        assume_on_best(&mut snap, &ev, "held-table".into());
        drop(held);
        let ev = keyed.evaluate(&snap, &cpu_pod(300), None, 0, &mut rng);
        let want = plain.evaluate(&snap, &cpu_pod(300), None, 0, &mut rng);
        assert_eq!(outcome(&ev), outcome(&want));
        assert_eq!(scored_now(), 39);
    }

    /// Refuses a node with more pods than the pod's CPU request in tenths of a core,
    /// counting the nodes it filters; keys a column per CPU request when `keyed`.
    #[derive(Debug)]
    struct Crowded {
        keyed: bool,
        filtered: Arc<std::sync::atomic::AtomicUsize>,
    }
    impl FilterPlugin for Crowded {
        fn name(&self) -> &'static str {
            "Crowded"
        }
        fn filter(
            &self,
            _: &CycleContext<'_>,
            pod: &PodInfo,
            node: &NodeView,
        ) -> Result<(), Reason> {
            self.filtered
                .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            let pods = node.alloc.pods.len() as i64;
            match pods > pod.requests.cpu_millis / 100 {
                true if pods % 2 == 0 => Err("node(s) were crowded".into()),
                true => Err(Reason::Owned(format!("node(s) had {pods} pods"))),
                false => Ok(()),
            }
        }
        fn column_key(
            &self,
            _: &CycleContext<'_>,
            _: Option<&PreFilterState>,
            pod: &PodInfo,
        ) -> Option<ColumnWords> {
            self.keyed
                .then_some([pod.requests.cpu_millis as u64, 0, 0, 0, 0, 0, 0, 0])
        }
    }

    /// A filter that keys its pods' shapes filters from a column from the second pod of a
    /// shape on, and after an assumption only the node assumed on is filtered again; the
    /// verdicts (reasons and their order included) are those of the same filter run for
    /// every pod.
    #[test]
    fn filter_columns_filter_again_only_the_nodes_edited_since() {
        let counted = |keyed| {
            let filtered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
            let crowded = Crowded {
                keyed,
                filtered: filtered.clone(),
            };
            let profile = profile_of(
                vec![Box::new(RejectNamed("n07")), Box::new(crowded)],
                vec![(Box::new(last_digit()), 1)],
            );
            (profile, filtered)
        };
        let (keyed, filtered) = counted(true);
        let (plain, _) = counted(false);
        let mut snap = forty_nodes(|i| i % 5);
        let mut rng = rand::rngs::StdRng::seed_from_u64(4);
        let filtered_now = || filtered.swap(0, std::sync::atomic::Ordering::Relaxed);
        let mut seen = Vec::new();
        for round in 0..6 {
            let ev = keyed.evaluate(&snap, &cpu_pod(200), None, 0, &mut rng);
            let want = plain.evaluate(&snap, &cpu_pod(200), None, 0, &mut rng);
            assert_eq!(outcome(&ev), outcome(&want), "round {round}");
            assert!(ev.filtered.len() > 10, "{}", ev.summary());
            seen.push(filtered_now());
            assume_on_best(&mut snap, &ev, format!("p{round}"));
        }
        // The first pod filters the 39 nodes RejectNamed passes, the second builds the column
        // (all 40), each later one filters the node assumed on.
        assert_eq!(seen, vec![39, 40, 1, 1, 1, 1]);
        assert_eq!(snap.digests(60).columns(), 1);
    }
}
