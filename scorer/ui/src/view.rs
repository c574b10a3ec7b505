//! What the web view shows, as JSON-ready values built from the store's snapshot, the
//! decision log and the profiles: pure functions, no I/O, so that every figure the page
//! draws is tested here.
use std::sync::Arc;

use loadstar_common::model::ResourceKind;
use loadstar_framework::Profile;
use loadstar_framework::snapshot::{ClusterSnapshot, NodeView};
use loadstar_store::decisions::Recorded;
use serde::Serialize;

/// The resources a tile can be coloured by, in the order of [`NodeRow::load`].
pub const RESOURCES: [ResourceKind; 5] = [
    ResourceKind::Cpu,
    ResourceKind::Memory,
    ResourceKind::Network,
    ResourceKind::DiskIo,
    ResourceKind::Gpu,
];

/// One frame of the node grid: every node's latest load, compactly (5 000 nodes ≈ 250 KB).
#[derive(Debug, Serialize, PartialEq)]
pub struct NodesFrame {
    /// The store generation the frame reflects.
    pub generation: u64,
    /// Names of the columns of each row's `load`.
    pub resources: Vec<&'static str>,
    /// One row per node, by name.
    pub nodes: Vec<NodeRow>,
}

/// A node in the grid: `[name, flags, [cpu, memory, network, disk_io, gpu]]`, each load the
/// latest sample as a ratio rounded to 0.001, `null` when not reported.
#[derive(Debug, Serialize, PartialEq)]
pub struct NodeRow(pub Arc<str>, pub u8, pub [Option<f32>; 5]);

/// Bits of [`NodeRow`]'s flags.
pub mod flags {
    /// The node's load is stale (or was never reported).
    pub const STALE: u8 = 1;
    /// Kubernetes knows the node.
    pub const KUBE: u8 = 2;
    /// An agent reports for it.
    pub const AGENT: u8 = 4;
    /// Kubernetes marks it unschedulable or not ready.
    pub const CORDONED: u8 = 8;
}

fn round3(x: f64) -> f32 {
    ((x * 1000.0).round() / 1000.0) as f32
}

/// The grid frame of `snap`.
pub fn nodes_frame(snap: &ClusterSnapshot) -> NodesFrame {
    NodesFrame {
        generation: snap.generation,
        resources: RESOURCES.iter().map(|r| r.name()).collect(),
        nodes: snap.nodes().iter().map(row).collect(),
    }
}

fn row(n: &NodeView) -> NodeRow {
    let mut f = 0u8;
    if n.stale {
        f |= flags::STALE;
    }
    if let Some(k) = &n.kube {
        f |= flags::KUBE;
        if k.unschedulable || !k.ready {
            f |= flags::CORDONED;
        }
    }
    let mut load = [None; 5];
    if let Some(a) = &n.agent {
        f |= flags::AGENT;
        for (slot, kind) in load.iter_mut().zip(RESOURCES) {
            *slot = a.load.get(kind).map(|l| round3(l.latest.clamp(0.0, 1.0)));
        }
    }
    NodeRow(n.name.clone(), f, load)
}

/// One resource's windows on the node page.
#[derive(Debug, Serialize, PartialEq)]
pub struct ResourceDetail {
    /// `cpu`, `memory`, …
    pub resource: &'static str,
    /// Latest sample, ratio.
    pub latest: f64,
    /// Every window the agent keeps, shortest first.
    pub windows: Vec<WindowDetail>,
}

/// One window's statistics.
#[derive(Debug, Serialize, PartialEq)]
pub struct WindowDetail {
    /// Length, seconds.
    pub seconds: u32,
    /// Mean ratio.
    pub mean: f64,
    /// Standard deviation.
    pub stddev: f64,
    /// Smallest sample.
    pub min: f64,
    /// Largest sample.
    pub max: f64,
    /// 95th percentile.
    pub p95: f64,
    /// Samples covered.
    pub samples: u64,
}

/// Everything the page shows about one node.
#[derive(Debug, Serialize, PartialEq)]
pub struct NodeDetail {
    /// Name.
    pub name: String,
    /// Stale (or never reported).
    pub stale: bool,
    /// Seconds since the latest report.
    pub report_age_seconds: Option<f64>,
    /// Logical CPUs the agent reports.
    pub logical_cpus: Option<u32>,
    /// Memory the agent reports, bytes.
    pub memory_bytes: Option<u64>,
    /// GPUs the agent reports.
    pub gpus: usize,
    /// Allocatable, as Kubernetes quantities.
    pub allocatable: std::collections::BTreeMap<String, String>,
    /// Requested by the pods on it, as Kubernetes quantities.
    pub requested: std::collections::BTreeMap<String, String>,
    /// Pods on it (by Kubernetes or assumed).
    pub pods: usize,
    /// Pods the agent measures.
    pub measured_pods: usize,
    /// In-flight usage estimates of just-placed pods.
    pub inflight: usize,
    /// Kubernetes labels.
    pub labels: std::collections::BTreeMap<String, String>,
    /// Taints, `key=value:Effect`.
    pub taints: Vec<String>,
    /// Kubernetes says unschedulable.
    pub unschedulable: bool,
    /// Kubernetes Ready condition (None: not a Kubernetes node).
    pub ready: Option<bool>,
    /// Per resource.
    pub resources: Vec<ResourceDetail>,
}

/// The node page of `name`, if the snapshot has it.
pub fn node_detail(snap: &ClusterSnapshot, name: &str) -> Option<NodeDetail> {
    let n = &snap.nodes()[*snap.index.get(name)?];
    let agent = n.agent.as_deref();
    let kube = n.kube.as_deref();
    Some(NodeDetail {
        name: n.name.to_string(),
        stale: n.stale,
        report_age_seconds: n.report_age_seconds,
        logical_cpus: agent.map(|a| a.capacity.logical_cpus),
        memory_bytes: agent.map(|a| a.capacity.memory_bytes),
        gpus: agent.map_or(0, |a| a.capacity.gpus.len()),
        allocatable: n.allocatable().to_quantities(),
        requested: n.alloc.requested.to_quantities(),
        pods: n.alloc.pods.len(),
        measured_pods: agent.map_or(0, |a| a.pods.len()),
        inflight: n.alloc.inflight.len(),
        labels: kube.map(|k| k.labels.clone()).unwrap_or_default(),
        taints: kube
            .map(|k| {
                k.taints
                    .iter()
                    .map(|t| {
                        if t.value.is_empty() {
                            format!("{}:{:?}", t.key, t.effect)
                        } else {
                            format!("{}={}:{:?}", t.key, t.value, t.effect)
                        }
                    })
                    .collect()
            })
            .unwrap_or_default(),
        unschedulable: kube.is_some_and(|k| k.unschedulable),
        ready: kube.map(|k| k.ready),
        resources: agent
            .map(|a| {
                a.load
                    .iter()
                    .map(|(kind, l)| ResourceDetail {
                        resource: kind.name(),
                        latest: l.latest,
                        windows: l
                            .windows
                            .iter()
                            .map(|w| WindowDetail {
                                seconds: w.window_seconds,
                                mean: w.mean,
                                stddev: w.stddev,
                                min: w.min,
                                max: w.max,
                                p95: w.p95,
                                samples: u64::from(w.count),
                            })
                            .collect(),
                    })
                    .collect()
            })
            .unwrap_or_default(),
    })
}

/// A decision as the page lists it.
#[derive(Debug, Serialize, PartialEq)]
pub struct DecisionView {
    /// Position in the log (the page asks for what is newer).
    pub seq: u64,
    /// `scheduler` or `score`.
    pub source: &'static str,
    /// `namespace/name`.
    pub pod: String,
    /// Profile.
    pub profile: String,
    /// Unix ms.
    pub at_ms: i64,
    /// Attempt (0 for Score calls).
    pub attempt: u32,
    /// Outcome kind (`bound`, `unschedulable`, …).
    pub outcome: &'static str,
    /// Node the outcome names.
    pub node: Option<String>,
    /// A failed binding's error.
    pub error: Option<String>,
    /// kube-scheduler's summary.
    pub summary: String,
    /// Nodes evaluated.
    pub evaluated: usize,
    /// Nodes feasible.
    pub feasible: usize,
    /// The best candidates: node, total, stale, and each plugin's `[name, score, weight]`.
    pub candidates: Vec<CandidateView>,
    /// Rejections grouped by filter and reason.
    pub filtered: Vec<FilteredView>,
}

/// A ranked candidate.
#[derive(Debug, Serialize, PartialEq)]
pub struct CandidateView {
    /// Node.
    pub node: Arc<str>,
    /// Weighted total, 0–100.
    pub total: f64,
    /// Stale load.
    pub stale: bool,
    /// `(plugin, score, weight)`.
    pub plugins: Vec<(&'static str, i64, i64)>,
}

/// A rejection group.
#[derive(Debug, Serialize, PartialEq)]
pub struct FilteredView {
    /// Filter.
    pub plugin: &'static str,
    /// Reason.
    pub reason: String,
    /// Nodes rejected.
    pub count: usize,
    /// Some of them by name.
    pub nodes: Vec<Arc<str>>,
}

/// The page's form of a recorded decision.
pub fn decision_view(r: &Recorded) -> DecisionView {
    let d = &r.decision;
    DecisionView {
        seq: r.seq,
        source: d.source.as_str(),
        pod: d.key(),
        profile: d.profile.clone(),
        at_ms: d.decided_at_ms,
        attempt: d.attempt,
        outcome: r.outcome.kind(),
        node: r.outcome.node().map(str::to_string),
        error: r.outcome.error().map(str::to_string),
        summary: d.summary.clone(),
        evaluated: d.evaluated,
        feasible: d.feasible,
        candidates: d
            .ranked
            .iter()
            .map(|c| CandidateView {
                node: c.node.clone(),
                total: (c.total * 100.0).round() / 100.0,
                stale: c.stale,
                plugins: c.plugins.clone(),
            })
            .collect(),
        filtered: d
            .filtered
            .iter()
            .map(|g| FilteredView {
                plugin: g.plugin,
                reason: g.reason.clone(),
                count: g.count,
                nodes: g.nodes.clone(),
            })
            .collect(),
    }
}

/// A profile as the page lists it.
#[derive(Debug, Serialize, PartialEq)]
pub struct ProfileView {
    /// Name (the pods' `schedulerName`).
    pub name: String,
    /// Load window scored, seconds.
    pub window_seconds: u32,
    /// What happens to stale nodes.
    pub stale_policy: &'static str,
    /// `percentageOfNodesToScore` (100: every node; 0: kube-scheduler's adaptive share).
    pub percentage_of_nodes_to_score: u32,
    /// Filter plugins, in order.
    pub filters: Vec<&'static str>,
    /// Score plugins with their weights.
    pub scores: Vec<(&'static str, i64)>,
}

/// The page's form of a profile.
pub fn profile_view(p: &Profile) -> ProfileView {
    ProfileView {
        name: p.name.clone(),
        window_seconds: p.window_seconds,
        stale_policy: p.stale_policy.name(),
        percentage_of_nodes_to_score: p.sampling.percentage(),
        filters: p.filters.iter().map(|f| f.name()).collect(),
        scores: p.scores.iter().map(|(s, w)| (s.name(), *w)).collect(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{Taint, TaintEffect};
    use loadstar_store::decisions::{Decision, DecisionLimits, DecisionLog, Outcome, Source};
    use loadstar_testkit::snapshot::{edit_kube, kube_node, snapshot, with_load};

    fn cluster() -> ClusterSnapshot {
        let hot = with_load(
            kube_node("hot", 4000, 8 << 30),
            ResourceKind::Cpu,
            0.9,
            0.05,
        );
        let hot = with_load(hot, ResourceKind::Memory, 0.123_456, 0.0);
        let tainted = edit_kube(kube_node("tainted", 4000, 8 << 30), |k| {
            k.taints.push(Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: TaintEffect::NoSchedule,
            });
            k.unschedulable = true;
        });
        snapshot(vec![hot, tainted])
    }

    #[test]
    fn a_frame_has_one_compact_row_per_node_with_rounded_loads_and_flags() {
        let snap = cluster();
        let frame = nodes_frame(&snap);
        assert_eq!(
            frame.resources,
            ["cpu", "memory", "network", "disk_io", "gpu"]
        );
        let json = serde_json::to_string(&frame.nodes).expect("serialises");
        let hot = &frame.nodes[0];
        assert_eq!(&*hot.0, "hot");
        assert_eq!(hot.2[1], Some(0.123));
        assert!(hot.1 & flags::AGENT != 0 && hot.1 & flags::KUBE != 0);
        let tainted = &frame.nodes[1];
        assert_eq!(tainted.2, [None; 5], "no agent: no load");
        assert!(tainted.1 & flags::CORDONED != 0);
        assert!(json.starts_with("[[\"hot\","), "{json}");
    }

    #[test]
    fn a_node_page_has_every_window_and_kubernetes_facts() {
        let snap = cluster();
        let hot = node_detail(&snap, "hot").expect("hot exists");
        let cpu = hot
            .resources
            .iter()
            .find(|r| r.resource == "cpu")
            .expect("cpu reported");
        assert!(!cpu.windows.is_empty());
        assert!((cpu.windows[0].mean - 0.9).abs() < 1e-9);
        let tainted = node_detail(&snap, "tainted").expect("tainted exists");
        assert_eq!(tainted.taints, vec!["dedicated=gpu:NoSchedule"]);
        assert!(tainted.unschedulable);
        assert!(tainted.resources.is_empty());
        assert!(node_detail(&snap, "missing").is_none());
    }

    #[test]
    fn a_decision_lists_candidates_with_plugin_scores_and_rejections() {
        let snap = cluster();
        let ev = loadstar_framework::Evaluation {
            ranked: vec![loadstar_framework::RankedNode {
                index: 0,
                total: 71.234,
                plugins: vec![("TargetLoadPacking", 60, 2), ("BalancedAllocation", 93, 1)],
                stale: false,
            }],
            filtered: vec![loadstar_framework::FilteredNode {
                index: 1,
                plugin: "NodeUnschedulable",
                reason: "node(s) were unschedulable".into(),
            }],
            evaluated: 2,
            ..Default::default()
        };
        let log = DecisionLog::new(DecisionLimits::default());
        let pod = loadstar_testkit::snapshot::pod(100, 1 << 20);
        log.record(
            Decision::of(
                Source::Scheduler,
                &pod,
                "loadstar",
                1,
                &snap,
                &ev,
                DecisionLimits::default(),
            ),
            Outcome::Bound { node: "hot".into() },
        );
        let v = decision_view(&log.latest(1, 0)[0]);
        assert_eq!(v.outcome, "bound");
        assert_eq!(v.node.as_deref(), Some("hot"));
        assert_eq!(v.candidates[0].total, 71.23);
        assert_eq!(v.candidates[0].plugins[1], ("BalancedAllocation", 93, 1));
        assert_eq!(v.filtered[0].nodes, vec![Arc::<str>::from("tainted")]);
        assert_eq!(
            v.summary,
            "1/2 nodes are available: 1 node(s) were unschedulable."
        );
    }
}
