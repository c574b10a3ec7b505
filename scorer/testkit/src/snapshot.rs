//! Builders for plugin unit tests: nodes with Kubernetes facts, agent load and pods, a
//! snapshot, and helpers that run one plugin over it.
use std::sync::Arc;

use loadstar_common::model::{NodeCapacity, ResourceKind, ResourceList, ResourceLoad};
use loadstar_common::window::WindowSummary;

use loadstar_framework::snapshot::{
    AgentNode, ClusterSnapshot, KubeNode, NodeAllocation, NodeView, PodInfo, PodOnNode, Toleration,
};
use loadstar_framework::{CycleContext, FilterPlugin, Profile, Reason, ScorePlugin, StalePolicy};
use rand::SeedableRng;

/// One gibibyte in bytes.
pub const GIB: i64 = 1 << 30;
/// One mebibyte in bytes.
pub const MIB: i64 = 1 << 20;

/// A Ready Kubernetes node with this allocatable CPU and memory and 110 pods.
pub fn kube_node(name: &str, cpu_millis: i64, memory_bytes: i64) -> NodeView {
    NodeView {
        name: Arc::from(name),
        agent: None,
        kube: Some(Arc::new(KubeNode {
            allocatable: ResourceList {
                cpu_millis,
                memory_bytes,
                pods: 110,
                ephemeral_storage_bytes: 100 * GIB,
                ..Default::default()
            },
            ready: true,
            ..Default::default()
        })),
        alloc: Arc::new(NodeAllocation::default()),
        stale: false,
        report_age_seconds: None,
    }
}

/// Edits the node's Kubernetes facts.
pub fn edit_kube(mut n: NodeView, f: impl FnOnce(&mut KubeNode)) -> NodeView {
    let mut k = n.kube.as_deref().cloned().unwrap_or_default();
    f(&mut k);
    n.kube = Some(Arc::new(k));
    n
}

/// Edits the node's allocation.
pub fn edit_alloc(mut n: NodeView, f: impl FnOnce(&mut NodeAllocation)) -> NodeView {
    let mut a = (*n.alloc).clone();
    f(&mut a);
    n.alloc = Arc::new(a);
    n
}

/// Sets the requests placed on the node (requested = non-zero requested).
pub fn with_requested(n: NodeView, cpu_millis: i64, memory_bytes: i64) -> NodeView {
    edit_alloc(n, |a| {
        a.requested.cpu_millis = cpu_millis;
        a.requested.memory_bytes = memory_bytes;
        a.nonzero_cpu_millis = cpu_millis;
        a.nonzero_memory_bytes = memory_bytes;
    })
}

/// Adds a pod to the node's allocation.
pub fn with_pod(n: NodeView, pod: PodOnNode) -> NodeView {
    edit_alloc(n, |a| {
        a.requested.pods += 1;
        a.put_pod(pod);
    })
}

/// Edits (or creates) the node's agent report.
pub fn edit_agent(mut n: NodeView, f: impl FnOnce(&mut AgentNode)) -> NodeView {
    let mut a = n.agent.as_deref().cloned().unwrap_or_else(|| AgentNode {
        capacity: NodeCapacity {
            logical_cpus: 4,
            cpu_max_frequency_hz: 2.0e9,
            memory_bytes: 16 * GIB as u64,
            ..Default::default()
        },
        memory_available_bytes: 8 * GIB as u64,
        nodefs_available_ratio: Some(0.5),
        nodefs_inodes_free_ratio: Some(0.5),
        interval_seconds: 1.0,
        ..Default::default()
    });
    f(&mut a);
    n.agent = Some(Arc::new(a));
    n
}

/// Gives the node a measured load of `kind`: window mean and stddev (ratios), 60 s window.
pub fn with_load(n: NodeView, kind: ResourceKind, mean: f64, stddev: f64) -> NodeView {
    edit_agent(n, |a| {
        a.load.set(
            kind,
            ResourceLoad {
                latest: mean,
                windows: vec![WindowSummary {
                    window_seconds: 60,
                    mean,
                    stddev,
                    min: mean,
                    max: mean,
                    p95: mean,
                    count: 60,
                }],
            },
        )
    })
}

/// Sets the agent's capacity CPUs and memory.
pub fn with_capacity(n: NodeView, cpus: u32, memory_bytes: i64) -> NodeView {
    edit_agent(n, |a| {
        a.capacity.logical_cpus = cpus;
        a.capacity.memory_bytes = memory_bytes as u64;
    })
}

/// A pod with these CPU/memory requests (non-zero requests equal to them).
pub fn pod(cpu_millis: i64, memory_bytes: i64) -> PodInfo {
    PodInfo {
        uid: "uid-new".into(),
        namespace: "default".into(),
        name: "new".into(),
        requests: ResourceList {
            cpu_millis,
            memory_bytes,
            ..Default::default()
        },
        nonzero_cpu_millis: cpu_millis,
        nonzero_memory_bytes: memory_bytes,
        ..Default::default()
    }
}

/// A 100m / 1 MiB pod tolerating each of `keys` with any value and effect (`Exists`).
pub fn pod_tolerating(keys: &[&str]) -> PodInfo {
    let mut p = pod(100, MIB);
    p.tolerations = keys
        .iter()
        .map(|k| Toleration {
            key: (*k).into(),
            exists: true,
            ..Default::default()
        })
        .collect();
    p
}

/// A snapshot of `nodes` (sorted by name).
pub fn snapshot(nodes: Vec<NodeView>) -> ClusterSnapshot {
    ClusterSnapshot::new(nodes, 1)
}

/// A cycle context with a 60 s window and `policy`.
pub fn ctx_with(snap: &ClusterSnapshot, policy: StalePolicy) -> CycleContext<'_> {
    CycleContext::new(snap, 60, policy)
}

/// A cycle context with a 60 s window and the fallback policy.
pub fn ctx(snap: &ClusterSnapshot) -> CycleContext<'_> {
    ctx_with(snap, StalePolicy::Fallback)
}

/// The nodes a profile of just these `filters` finds feasible for `pod` (through
/// `Profile::evaluate`, so PreFilter states are computed as in production), sorted by name.
pub fn feasible_names(
    filters: Vec<Box<dyn FilterPlugin>>,
    nodes: Vec<NodeView>,
    pod: &PodInfo,
) -> Vec<String> {
    feasible_names_in(filters, &snapshot(nodes), pod)
}

/// [`feasible_names`] over a snapshot built by the caller (e.g. with namespace labels).
pub fn feasible_names_in(
    filters: Vec<Box<dyn FilterPlugin>>,
    snap: &ClusterSnapshot,
    pod: &PodInfo,
) -> Vec<String> {
    let profile = Profile {
        name: "t".into(),
        filters,
        scores: vec![],
        window_seconds: 60,
        stale_policy: StalePolicy::Fallback,
        stale_penalty: 1.0,
        preemption: None,
        sampling: loadstar_framework::NodeSampling::ALL,
    };
    let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
    let ev = profile.evaluate(snap, pod, None, 0, &mut rng);
    let mut names: Vec<String> = ev
        .ranked
        .iter()
        .map(|r| snap.nodes()[r.index].name.to_string())
        .collect();
    names.sort();
    names
}

/// Scores every node of the snapshot (in name order), and asserts the scores are the same
/// by index over the snapshot's digest table, as evaluation scores (twice: the second pass
/// reads what the first memoised).
pub fn score_all(plugin: &dyn ScorePlugin, snap: &ClusterSnapshot, pod: &PodInfo) -> Vec<i64> {
    let nodes: Vec<&NodeView> = snap.nodes().iter().collect();
    let mut out = vec![-1; nodes.len()];
    let plain = ctx(snap);
    plugin.score(&plain, pod, &nodes, &mut out);
    let table = snap.digests(60);
    let mut buf = Vec::new();
    let checked = CycleContext {
        digests: Some(&table),
        current: Some(table.current_rows(snap.nodes(), &mut buf)),
        ..plain
    };
    let all: Vec<usize> = (0..nodes.len()).collect();
    for _ in 0..2 {
        let mut indexed = vec![-1; nodes.len()];
        plugin.score_indexed(&checked, pod, &nodes, &all, &mut indexed);
        assert_eq!(indexed, out, "{} by index", plugin.name());
    }
    out
}

/// Each node's verdict from [`FilterPlugin::filter_nodes`] over all of `ctx`'s nodes, in
/// node order, as [`FilterPlugin::filter`] gives it.
pub fn batch_verdicts(
    plugin: &dyn FilterPlugin,
    ctx: &CycleContext<'_>,
    pod: &PodInfo,
) -> Vec<Result<(), Reason>> {
    let state = plugin.prefilter(ctx, pod);
    let mut passing: Vec<usize> = (0..ctx.snapshot.nodes().len()).collect();
    let mut filtered = Vec::new();
    plugin.filter_nodes(ctx, state.as_ref(), pod, &mut passing, &mut filtered);
    assert!(
        passing.is_sorted_by(|a, b| a < b),
        "kept nodes stay in order, once"
    );
    assert_eq!(
        passing.len() + filtered.len(),
        ctx.snapshot.nodes().len(),
        "each node kept or rejected"
    );
    let mut out = vec![Ok(()); ctx.snapshot.nodes().len()];
    for f in filtered {
        assert!(
            !passing.contains(&f.index),
            "node {} both kept and rejected",
            f.index
        );
        assert_eq!(f.plugin, plugin.name());
        out[f.index] = Err(f.reason);
    }
    out
}

/// Asserts that `plugin` gives each node of `snap` the same verdict for `pod` node by node
/// without a digest table as batched the way evaluation runs it: over the table with its
/// rows checked once, twice (the second pass reads what the first memoised).
pub fn assert_batch_agrees(
    plugin: &dyn FilterPlugin,
    snap: &ClusterSnapshot,
    pod: &PodInfo,
    policy: StalePolicy,
) {
    let plain = ctx_with(snap, policy);
    let want: Vec<_> = snap
        .nodes()
        .iter()
        .map(|n| plugin.filter(&plain, pod, n))
        .collect();
    let table = snap.digests(60);
    let mut buf = Vec::new();
    let checked = CycleContext {
        digests: Some(&table),
        current: Some(table.current_rows(snap.nodes(), &mut buf)),
        ..plain
    };
    for _ in 0..2 {
        assert_eq!(
            batch_verdicts(plugin, &checked, pod),
            want,
            "{} batched",
            plugin.name()
        );
    }
    assert_eq!(
        batch_verdicts(plugin, &plain, pod),
        want,
        "{} without a table",
        plugin.name()
    );
}

/// Runs a filter on one node alone (and asserts [`assert_batch_agrees`] on it).
pub fn filter_one(plugin: &dyn FilterPlugin, node: NodeView, pod: &PodInfo) -> Result<(), Reason> {
    let snap = snapshot(vec![node]);
    assert_batch_agrees(plugin, &snap, pod, StalePolicy::Fallback);
    plugin.filter(&ctx(&snap), pod, &snap.nodes()[0])
}
