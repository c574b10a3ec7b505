//! Fixed scheduling inputs shared by the scorer-side targets: a small cluster snapshot (a
//! loaded node, an idle node, a stale agent-only node, a tainted Kubernetes-only node, with
//! pods that carry labels and anti-affinity) and the embedded default profile, so that a
//! fuzzed pod or profile is evaluated against something, deterministically.
use std::collections::BTreeMap;
use std::sync::Arc;

use loadstar_common::model::{NodeCapacity, ResourceKind, ResourceList, ResourceLoad};
use loadstar_common::window::WindowSummary;
use loadstar_framework::snapshot::{
    AgentNode, ClusterSnapshot, GpuState, KubeNode, NodeAllocation, NodeView, PodInfo, PodOnNode,
    Taint, TaintEffect,
};
use loadstar_framework::{MAX_NODE_SCORE, Profile};
use loadstar_policy::config::ScorerConfig;
use rand::SeedableRng;
use rand::rngs::StdRng;

const GIB: i64 = 1 << 30;

/// Node names in the snapshot, also used by the extender corpus.
pub const NODE_NAMES: [&str; 4] = ["node-a", "node-b", "node-c", "node-d"];

fn load(mean: f64, stddev: f64) -> ResourceLoad {
    ResourceLoad {
        latest: mean,
        windows: [60, 300, 900]
            .into_iter()
            .map(|w| WindowSummary {
                window_seconds: w,
                mean,
                stddev,
                min: (mean - stddev).max(0.0),
                max: (mean + stddev).min(1.0),
                p95: (mean + stddev).min(1.0),
                count: w,
            })
            .collect(),
    }
}

fn agent(cpu: f64, mem: f64, gpus: usize) -> Arc<AgentNode> {
    let mut a = AgentNode {
        capacity: NodeCapacity {
            logical_cpus: 8,
            cpu_max_frequency_hz: 3.0e9,
            memory_bytes: 32 * GIB as u64,
            ..Default::default()
        },
        memory_available_bytes: ((1.0 - mem) * 32.0 * GIB as f64) as u64,
        nodefs_available_ratio: Some(0.4),
        nodefs_inodes_free_ratio: Some(0.9),
        interval_seconds: 1.0,
        gpus: (0..gpus)
            .map(|i| GpuState {
                index: i as u32,
                utilization: 0.3,
                memory_used_bytes: 4 * GIB as u64,
                memory_total_bytes: 16 * GIB as u64,
                process_count: 1,
                healthy: true,
            })
            .collect(),
        ..Default::default()
    };
    for (kind, v) in [
        (ResourceKind::Cpu, cpu),
        (ResourceKind::Memory, mem),
        (ResourceKind::Network, cpu / 2.0),
        (ResourceKind::DiskIo, mem / 3.0),
    ] {
        a.load.set(kind, load(v, 0.05));
    }
    if gpus > 0 {
        a.load.set(ResourceKind::Gpu, load(0.3, 0.1));
        a.load.set(ResourceKind::GpuMemory, load(0.25, 0.0));
    }
    Arc::new(a)
}

fn kube(labels: &[(&str, &str)], taints: Vec<Taint>, gpus: i64) -> Arc<KubeNode> {
    Arc::new(KubeNode {
        allocatable: ResourceList {
            cpu_millis: 8000,
            memory_bytes: 32 * GIB,
            ephemeral_storage_bytes: 100 * GIB,
            pods: 110,
            gpus,
            ..Default::default()
        },
        labels: labels
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .chain([("kubernetes.io/hostname".to_string(), "x".to_string())])
            .collect(),
        taints,
        unschedulable: false,
        ready: true,
        volume_limits: BTreeMap::new(),
        images: Default::default(),
    })
}

fn pod_on_node(name: &str, app: &str, cpu: i64) -> PodOnNode {
    PodOnNode {
        uid: format!("uid-{name}"),
        namespace: "default".into(),
        name: name.into(),
        labels: BTreeMap::from([("app".to_string(), app.to_string())]),
        requests: ResourceList {
            cpu_millis: cpu,
            memory_bytes: GIB,
            pods: 1,
            ..Default::default()
        },
        nonzero_cpu_millis: cpu,
        nonzero_memory_bytes: GIB,
        start_time: Some(1_700_000_000),
        ..Default::default()
    }
}

fn alloc(pods: Vec<PodOnNode>) -> Arc<NodeAllocation> {
    let mut a = NodeAllocation::default();
    for p in pods {
        a.requested.add(&p.requests);
        a.nonzero_cpu_millis += p.nonzero_cpu_millis;
        a.nonzero_memory_bytes += p.nonzero_memory_bytes;
        a.put_pod(p);
    }
    Arc::new(a)
}

/// The fixed snapshot (built fresh per call: snapshots cache digests internally).
pub fn snapshot() -> ClusterSnapshot {
    let zone = "topology.kubernetes.io/zone";
    let nodes = vec![
        NodeView {
            name: Arc::from(NODE_NAMES[0]),
            agent: Some(agent(0.8, 0.7, 2)),
            kube: Some(kube(&[(zone, "z1"), ("disk", "ssd")], Vec::new(), 2)),
            alloc: alloc(vec![
                pod_on_node("web-1", "web", 500),
                pod_on_node("db-1", "db", 2000),
            ]),
            stale: false,
            report_age_seconds: Some(1.0),
        },
        NodeView {
            name: Arc::from(NODE_NAMES[1]),
            agent: Some(agent(0.1, 0.2, 0)),
            kube: Some(kube(&[(zone, "z2")], Vec::new(), 0)),
            alloc: alloc(vec![pod_on_node("web-2", "web", 250)]),
            stale: false,
            report_age_seconds: Some(0.5),
        },
        NodeView {
            name: Arc::from(NODE_NAMES[2]),
            agent: Some(agent(0.5, 0.5, 0)),
            kube: None,
            alloc: Arc::new(NodeAllocation::default()),
            stale: true,
            report_age_seconds: Some(120.0),
        },
        NodeView {
            name: Arc::from(NODE_NAMES[3]),
            agent: None,
            kube: Some(kube(
                &[(zone, "z1")],
                vec![Taint {
                    key: "dedicated".into(),
                    value: "gpu".into(),
                    effect: TaintEffect::NoSchedule,
                }],
                0,
            )),
            alloc: Arc::new(NodeAllocation::default()),
            stale: false,
            report_age_seconds: None,
        },
    ];
    ClusterSnapshot::new(nodes, 1)
}

/// The embedded default profiles, built.
pub fn default_profiles() -> Vec<Profile> {
    #[allow(clippy::expect_used)]
    ScorerConfig::embedded_default()
        .build_profiles()
        .expect("embedded default profiles build")
}

/// A deterministic RNG (ties are broken at random).
pub fn rng() -> StdRng {
    StdRng::seed_from_u64(0x10AD_57A2)
}

/// Evaluates `pod` with `profile` on the fixed snapshot and checks the result's invariants:
/// indices in range, every node either ranked or filtered, totals and plugin scores in
/// 0–[`MAX_NODE_SCORE`].
pub fn evaluate_and_check(profile: &Profile, pod: &PodInfo) {
    let snap = snapshot();
    let mut rng = rng();
    let ev = profile.evaluate(&snap, pod, None, usize::MAX, &mut rng);
    let _ = ev.summary();
    for f in &ev.filtered {
        assert!(f.index < snap.nodes().len());
    }
    for r in &ev.ranked {
        assert!(r.index < snap.nodes().len());
        assert!(
            r.total.is_finite() && (0.0..=MAX_NODE_SCORE as f64).contains(&r.total),
            "profile {}: node {} total {} out of 0..={MAX_NODE_SCORE} ({:?})",
            profile.name,
            snap.nodes()[r.index].name,
            r.total,
            r.plugins
        );
        for (name, score, _) in &r.plugins {
            assert!(
                (0..=MAX_NODE_SCORE).contains(score),
                "profile {}: plugin {name} scored {score}",
                profile.name
            );
        }
    }
    // A subset of candidates, with a limit, as the gRPC Score call and the extender ask.
    let some = [1usize, 3];
    let ev = profile.evaluate(&snap, pod, Some(&some), 1, &mut rng);
    for r in &ev.ranked {
        assert!(
            some.contains(&r.index),
            "ranked a node outside the candidates"
        );
    }
}
