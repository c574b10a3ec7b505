//! Scoring one pod against 5 000 and 10 000 synthetic nodes with the default profile
//! (`Profile::evaluate`, all filters and weighted scores, top 10 sorted), plus each plugin of
//! the default profile alone at 5 000 nodes to show where the time goes, and every other
//! profile of the embedded config at 5 000 nodes.
//!
//! The on-CPU cases `5000-assume` and `5000-scheduler` follow each evaluation by assuming the
//! pod on the best node, as the scheduler does; `5000-scheduler` also samples the nodes as
//! kube-scheduler's default `percentageOfNodesToScore` does (it stops at 500 feasible nodes).
//!
//! Also DefaultPreemption on a full cluster of 5 000 nodes (every pod of lower priority than
//! the incoming one; 10 % of the nodes examined, as upstream).
//!
//! Run: `cargo bench -p loadstar-policy --bench score`. Target: ≤ 250 µs mean at 5 000 nodes.
// criterion's macros generate undocumented items.
#![allow(missing_docs)]
use std::collections::{BTreeMap, HashMap};
use std::hint::black_box;
use std::sync::Arc;
use std::time::Instant;

use criterion::{BenchmarkId, Criterion, criterion_group, criterion_main};
use loadstar_common::model::{NodeCapacity, ResourceKind, ResourceList, ResourceLoad};
use loadstar_common::window::WindowSummary;
use loadstar_framework::snapshot::{
    AffinityTerm, AgentNode, ClusterSnapshot, ImageIndex, Inflight, KubeNode, LabelSelector,
    MeasuredPod, NodeAllocation, NodeImages, NodeView, Owner, PodAffinity, PodInfo, PodOnNode,
    Taint, TaintEffect,
};
use loadstar_framework::{CycleContext, NodeSampling, Profile, SampleCursor};
use loadstar_policy::config::ScorerConfig;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const GIB: i64 = 1 << 30;

/// A deterministic cluster: 8–64 cores, 32–256 GiB, 3 zones, 10–30 pods per node, load on
/// CPU/memory/network/disk in three windows (60/300/900 s), an in-flight estimate on 5 % of
/// nodes, 1 % of nodes tainted, 0.4 % stale, and up to 28 images per node ([`node_images`]).
fn cluster(n: usize, seed: u64) -> ClusterSnapshot {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut images = node_images(n, seed);
    let nodes = (0..n)
        .map(|i| {
            let cores = [8u32, 16, 32, 64][rng.random_range(0..4)];
            let mem = i64::from(cores) * 4 * GIB;
            let mut labels = BTreeMap::new();
            labels.insert("kubernetes.io/hostname".into(), format!("node-{i:05}"));
            labels.insert(
                "topology.kubernetes.io/zone".into(),
                format!("zone-{}", i % 3),
            );
            let mut extended = BTreeMap::new();
            extended.insert("hugepages-2Mi".into(), 0);
            let taints = if i % 100 == 0 {
                vec![Taint {
                    key: "dedicated".into(),
                    value: "infra".into(),
                    effect: TaintEffect::NoSchedule,
                }]
            } else {
                vec![]
            };
            let kube = KubeNode {
                allocatable: ResourceList {
                    cpu_millis: i64::from(cores) * 1000 - 100,
                    memory_bytes: mem - GIB,
                    ephemeral_storage_bytes: 100 * GIB,
                    pods: 110,
                    gpus: 0,
                    extended,
                },
                labels,
                taints,
                unschedulable: false,
                ready: true,
                volume_limits: Default::default(),
                images: images.next().unwrap_or_default(),
            };
            let mut load = loadstar_common::model::LoadSummary::default();
            for kind in [
                ResourceKind::Cpu,
                ResourceKind::Memory,
                ResourceKind::Network,
                ResourceKind::DiskIo,
            ] {
                let mean: f64 = rng.random_range(0.05..0.85);
                let windows = [60u32, 300, 900]
                    .into_iter()
                    .map(|w| WindowSummary {
                        window_seconds: w,
                        mean,
                        stddev: mean * 0.1,
                        min: mean * 0.8,
                        max: mean * 1.2,
                        p95: mean * 1.15,
                        count: w,
                    })
                    .collect();
                load.set(
                    kind,
                    ResourceLoad {
                        latest: mean,
                        windows,
                    },
                );
            }
            let pods_here = rng.random_range(10..30);
            let mut pods = Vec::with_capacity(pods_here);
            let mut measured = HashMap::new();
            for p in 0..pods_here {
                let uid = format!("pod-{i}-{p}");
                measured.insert(
                    uid.clone(),
                    MeasuredPod {
                        cpu_millis: 100.0,
                        memory_bytes: 1e8,
                    },
                );
                // About one pod in 80 is a replica of an HA deployment that keeps its
                // replicas on separate hosts (label `ha=web`, required anti-affinity against
                // it): a quarter of the nodes carry one, the affinity plugins' real load.
                let app = format!("rs-{}", p % 7);
                let ha = (i * 31 + p) % 80 == 0;
                let mut labels = BTreeMap::from([("app".to_string(), app.clone())]);
                let pod_affinity = if ha {
                    labels.insert("ha".into(), "web".into());
                    Arc::new(PodAffinity {
                        required_anti: vec![AffinityTerm {
                            namespaces: vec!["default".into()],
                            selector: Some(LabelSelector {
                                match_labels: BTreeMap::from([("ha".into(), "web".into())]),
                                ..Default::default()
                            }),
                            topology_key: "kubernetes.io/hostname".into(),
                            namespace_selector: None,
                        }],
                        ..Default::default()
                    })
                } else {
                    Arc::default()
                };
                pods.push(PodOnNode {
                    uid,
                    namespace: "default".into(),
                    labels,
                    owner: Some(Owner {
                        kind: "ReplicaSet".into(),
                        name: app,
                    }),
                    pod_affinity,
                    ..PodOnNode::default()
                });
            }
            // In-flight estimates live until the load window covers the pod: about 5 % of
            // nodes carry one at any moment in a busy cluster.
            let inflight = (0..usize::from(rng.random_bool(0.05)))
                .map(|k| Inflight::new(format!("new-{i}-{k}"), 250, 200 << 20, Instant::now()))
                .collect();
            let requested_cpu = pods_here as i64 * 200;
            let requested_mem = pods_here as i64 * 256 * (1 << 20);
            let agent = AgentNode {
                capacity: NodeCapacity {
                    logical_cpus: cores,
                    cpu_max_frequency_hz: 3.0e9,
                    memory_bytes: mem as u64,
                    ..Default::default()
                },
                load,
                memory_available_bytes: (mem / 2) as u64,
                nodefs_available_ratio: Some(0.6),
                nodefs_inodes_free_ratio: Some(0.8),
                gpus: vec![],
                pods: measured,
                interval_seconds: 1.0,
                report_interval_seconds: 0.0,
                received_at: Some(Instant::now()),
                last_pressure_at: None,
            };
            NodeView {
                name: Arc::from(format!("node-{i:05}").as_str()),
                agent: Some(Arc::new(agent)),
                kube: Some(Arc::new(kube)),
                alloc: Arc::new({
                    let mut a = NodeAllocation {
                        requested: ResourceList {
                            cpu_millis: requested_cpu,
                            memory_bytes: requested_mem,
                            pods: pods_here as i64,
                            ..Default::default()
                        },
                        nonzero_cpu_millis: requested_cpu,
                        nonzero_memory_bytes: requested_mem,
                        inflight,
                        ..Default::default()
                    };
                    a.set_pods(pods);
                    a
                }),
                stale: i % 250 == 0,
                report_age_seconds: Some(1.0),
            }
        })
        .collect::<Vec<NodeView>>();
    ClusterSnapshot::new(nodes, 1)
}

/// Each node's images as a kubelet lists them (a tag and a digest name per image): the
/// pause, mesh-proxy and node-agent images on every node, and 25 of 200 applications'
/// images (50 MiB–2 GiB), one name shared by every node listing it as the store shares it.
/// Drawn from their own generator, so the rest of the cluster is the same as without them.
fn node_images(n: usize, seed: u64) -> impl Iterator<Item = NodeImages> {
    let mut rng = StdRng::seed_from_u64(seed ^ 0x1a6e);
    let image = |tag: String, digest: String, size: i64| -> [(Arc<str>, i64); 2] {
        [(Arc::from(tag), size), (Arc::from(digest), size)]
    };
    let everywhere: Vec<[(Arc<str>, i64); 2]> = [
        ("registry.k8s.io/pause:3.9", 300_000),
        ("registry.example.com/mesh/proxy:1.2", 150 << 20),
        ("registry.example.com/node-agent:2", 80 << 20),
    ]
    .into_iter()
    .map(|(name, size)| {
        let repo = name.rsplit_once(':').map_or(name, |(r, _)| r);
        image(name.into(), format!("{repo}@sha256:{:064x}", size), size)
    })
    .collect();
    let apps: Vec<[(Arc<str>, i64); 2]> = (0..200)
        .map(|k| {
            image(
                format!("registry.example.com/team/rs-{k}:v1"),
                format!("registry.example.com/team/rs-{k}@sha256:{k:064x}"),
                rng.random_range(50..2048) << 20,
            )
        })
        .collect();
    (0..n).map(move |_| {
        let mine = (0..25).map(|_| &apps[rng.random_range(0..apps.len())]);
        NodeImages::new(everywhere.iter().chain(mine).flatten().cloned())
    })
}

fn pod() -> PodInfo {
    PodInfo {
        uid: "bench-pod".into(),
        namespace: "default".into(),
        name: "web-1".into(),
        labels: BTreeMap::from([("app".into(), "rs-3".into())]),
        owner: Some(Owner {
            kind: "ReplicaSet".into(),
            name: "rs-3".into(),
        }),
        requests: ResourceList {
            cpu_millis: 500,
            memory_bytes: GIB,
            ..Default::default()
        },
        limits: ResourceList {
            cpu_millis: 1000,
            memory_bytes: 2 * GIB,
            ..Default::default()
        },
        nonzero_cpu_millis: 500,
        nonzero_memory_bytes: GIB,
        // Its app (on about one node in eight) and the mesh proxy (on every node).
        images: vec![
            "registry.example.com/mesh/proxy:1.2".into(),
            "registry.example.com/team/rs-3:v1".into(),
        ],
        ..Default::default()
    }
}

/// A replica of the HA deployment (`ha=web`): one per host (required anti-affinity against
/// its own label) and preferably away from `rs-4` pods in the same zone (soft
/// anti-affinity) — a pod for which the affinity plugins scan every pod in the cluster.
fn ha_pod() -> PodInfo {
    let app = |a: &str| LabelSelector {
        match_labels: BTreeMap::from([("app".into(), a.into())]),
        ..Default::default()
    };
    PodInfo {
        pod_affinity: Arc::new(PodAffinity {
            required_anti: vec![AffinityTerm {
                namespaces: vec!["default".into()],
                selector: Some(LabelSelector {
                    match_labels: BTreeMap::from([("ha".into(), "web".into())]),
                    ..Default::default()
                }),
                topology_key: "kubernetes.io/hostname".into(),
                namespace_selector: None,
            }],
            preferred_anti: vec![loadstar_framework::snapshot::WeightedAffinityTerm {
                weight: 50,
                term: AffinityTerm {
                    namespaces: vec!["default".into()],
                    selector: Some(app("rs-4")),
                    topology_key: "topology.kubernetes.io/zone".into(),
                    namespace_selector: None,
                },
            }],
            ..Default::default()
        }),
        labels: BTreeMap::from([
            ("app".to_string(), "rs-3".to_string()),
            ("ha".to_string(), "web".to_string()),
        ]),
        ..pod()
    }
}

fn default_profile() -> Profile {
    let profiles = ScorerConfig::embedded_default()
        .build_profiles()
        .expect("embedded profiles build");
    profiles.into_iter().next().expect("a default profile")
}

/// This thread's on-CPU time so far (Linux `/proc/thread-self/schedstat`), for a figure that
/// other processes on a shared machine do not inflate; `None` elsewhere.
fn thread_cpu_ns() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/thread-self/schedstat").ok()?;
    s.split_whitespace().next()?.parse().ok()
}

/// Mean on-CPU time of one call of `run`, µs, over `iters` calls.
fn cpu_micros_per_call(iters: u32, mut run: impl FnMut()) -> Option<f64> {
    let start = thread_cpu_ns()?;
    for _ in 0..iters {
        run();
    }
    let end = thread_cpu_ns()?;
    Some((end - start) as f64 / f64::from(iters) / 1000.0)
}

/// Mean on-CPU time of one evaluation, µs, over `iters` runs.
fn cpu_micros_per_eval(
    profile: &Profile,
    snap: &ClusterSnapshot,
    pod: &PodInfo,
    iters: u32,
) -> Option<f64> {
    let mut rng = StdRng::seed_from_u64(2);
    cpu_micros_per_call(iters, || {
        black_box(profile.evaluate(snap, pod, None, 10, &mut rng));
    })
}

/// p50 and p99 wall-clock time of one evaluation, µs, over `iters` runs: an upper bound on
/// the tail (a run the host preempts counts its wait too).
fn wall_micros_p50_p99(
    profile: &Profile,
    snap: &ClusterSnapshot,
    pod: &PodInfo,
    iters: u32,
) -> (f64, f64) {
    let mut rng = StdRng::seed_from_u64(2);
    let mut took: Vec<f64> = (0..iters.max(1))
        .map(|_| {
            let t = std::time::Instant::now();
            black_box(profile.evaluate(snap, pod, None, 10, &mut rng));
            t.elapsed().as_secs_f64() * 1e6
        })
        .collect();
    took.sort_by(f64::total_cmp);
    let at = |q: f64| took[((took.len() - 1) as f64 * q).round() as usize];
    (at(0.5), at(0.99))
}

/// `LOADSTAR_SCORE_CASES=1000,5000,10000` keeps only those cases of the evaluation group
/// (`plugins` and `preempt` name the other groups): their setup, which measures on-CPU
/// time, runs whatever criterion's filter says, so `perf record` needs this to see one case.
fn selected(case: &str) -> bool {
    std::env::var("LOADSTAR_SCORE_CASES").map_or(true, |only| only.split(',').any(|c| c == case))
}

/// Evaluations the on-CPU figures average: 300, or `LOADSTAR_SCORE_EVALS` (more, so that
/// evaluation dominates a `perf record` of the setup).
fn evaluations() -> u32 {
    std::env::var("LOADSTAR_SCORE_EVALS")
        .ok()
        .and_then(|v| v.parse().ok())
        .filter(|&n| n > 0)
        .unwrap_or(300)
}

fn bench_evaluate(c: &mut Criterion) {
    let profile = default_profile();
    let mut group = c.benchmark_group("score_default_profile");
    for (n, label, pod) in [
        (1_000usize, "1000".to_string(), pod()),
        (5_000, "5000".to_string(), pod()),
        (10_000, "10000".to_string(), pod()),
        (5_000, "5000-anti-affinity".to_string(), ha_pod()),
    ] {
        if !selected(&label) {
            continue;
        }
        let snap = cluster(n, 42);
        let mut rng = StdRng::seed_from_u64(1);
        // Sanity: most nodes are feasible, so scoring really runs over thousands.
        let e = profile.evaluate(&snap, &pod, None, 10, &mut rng);
        assert!(e.evaluated - e.filtered.len() > n / 2, "{}", e.summary());
        let evals = evaluations();
        if let Some(us) = cpu_micros_per_eval(&profile, &snap, &pod, evals) {
            println!(
                "score_default_profile/{label}: {us:.0} µs on-CPU per evaluation (mean of {evals}; {})",
                e.summary()
            );
        }
        let (p50, p99) = wall_micros_p50_p99(&profile, &snap, &pod, evals);
        println!(
            "score_default_profile/{label}: wall p50 {p50:.0} µs, p99 {p99:.0} µs per evaluation ({evals} runs)"
        );
        group.bench_with_input(BenchmarkId::from_parameter(label), &snap, |b, snap| {
            b.iter(|| black_box(profile.evaluate(snap, black_box(&pod), None, 10, &mut rng)))
        });
    }
    if selected("5000-adaptive") {
        // As the scheduler runs a cycle with `percentageOfNodesToScore: 0` (kube-scheduler's
        // default: 10 % of 5 000 nodes), the cursor moving on from cycle to cycle.
        let sampled = Profile {
            sampling: NodeSampling::ADAPTIVE,
            ..default_profile()
        };
        let snap = cluster(5_000, 42);
        let pod = pod();
        let mut rng = StdRng::seed_from_u64(1);
        let mut cursor = SampleCursor::default();
        let examined = sampled
            .evaluate_sampled(&snap, &pod, None, 10, &mut rng, &mut cursor)
            .evaluated;
        let evals = evaluations();
        if let Some(us) = cpu_micros_per_call(evals, || {
            black_box(sampled.evaluate_sampled(&snap, &pod, None, 10, &mut rng, &mut cursor));
        }) {
            println!(
                "score_default_profile/5000-adaptive: {us:.0} µs on-CPU per evaluation (mean of {evals}; {examined} nodes examined)"
            );
        }
        group.bench_function("5000-adaptive", |b| {
            b.iter(|| {
                black_box(sampled.evaluate_sampled(
                    &snap,
                    black_box(&pod),
                    None,
                    10,
                    &mut rng,
                    &mut cursor,
                ))
            })
        });
    }
    group.finish();
    if selected("5000-shapes") {
        // Every evaluation a pod of a shape not seen before (its CPU request and limit a
        // millicore more each time; UsageThreshold estimates by the limit): no column is
        // built, as for a stream of one-off pods. The cases above evaluate one shape again
        // and again, as for a workload's replicas.
        let snap = cluster(5_000, 42);
        let mut rng = StdRng::seed_from_u64(1);
        let mut shape = pod();
        let evals = evaluations();
        if let Some(us) = cpu_micros_per_call(evals, || {
            shape.requests.cpu_millis += 1;
            shape.nonzero_cpu_millis += 1;
            shape.limits.cpu_millis += 1;
            black_box(profile.evaluate(&snap, &shape, None, 10, &mut rng));
        }) {
            println!(
                "score_default_profile/5000-shapes: {us:.0} µs on-CPU per evaluation, a new pod \
                 shape each (mean of {evals})"
            );
        }
    }
    if selected("5000-assume")
        && let Some(us) = cpu_micros_with_assumptions(&profile, &pod(), 5_000, 300, None)
    {
        println!(
            "score_default_profile/5000-assume: {us:.0} µs on-CPU per evaluation and \
             assumption (mean of 300)"
        );
    }
    // The scheduler's cycle at 5 000 nodes: sampled as `percentageOfNodesToScore: 0` (the
    // cursor moving on), then the pod assumed on the best node; `-no-images` with a pod
    // that names no image (ImageLocality then scores every node 0 at once), the pair
    // showing what reading the images costs.
    for (case, images) in [
        ("5000-scheduler", true),
        ("5000-scheduler-no-images", false),
    ] {
        if !selected(case) {
            continue;
        }
        let sampled = Profile {
            sampling: NodeSampling::ADAPTIVE,
            ..default_profile()
        };
        let pod = PodInfo {
            images: if images { pod().images } else { vec![] },
            ..pod()
        };
        let evals = evaluations();
        if let Some(us) =
            cpu_micros_with_assumptions(&sampled, &pod, 5_000, evals, Some(SampleCursor::default()))
        {
            println!(
                "score_default_profile/{case}: {us:.0} µs on-CPU per sampled evaluation and \
                 assumption (mean of {evals})"
            );
        }
    }
}

/// As the scheduler runs: each evaluation is followed by assuming the pod on the best node
/// (`set_alloc`, which patches that node's digest row and the table's memos), so no two
/// evaluations see the same table contents; sampled from `cursor` on when given (as
/// `Profile::evaluate_sampled`). Mean on-CPU µs per evaluation and assumption.
fn cpu_micros_with_assumptions(
    profile: &Profile,
    pod: &PodInfo,
    nodes: usize,
    iters: u32,
    mut cursor: Option<SampleCursor>,
) -> Option<f64> {
    let mut snap = cluster(nodes, 42);
    // Built before timing, as the scheduler's snapshots take it over from one another while
    // no node's images change (its build is timed apart, in `bench_plugins`).
    snap.image_index();
    let mut rng = StdRng::seed_from_u64(3);
    let start = thread_cpu_ns()?;
    for k in 0..iters {
        let e = match cursor.as_mut() {
            Some(c) => profile.evaluate_sampled(&snap, pod, None, 10, &mut rng, c),
            None => profile.evaluate(&snap, pod, None, 10, &mut rng),
        };
        let Some(best) = e.best() else { break };
        let index = best.index;
        let mut alloc = (*snap.nodes()[index].alloc).clone();
        alloc.admit(PodOnNode {
            uid: format!("assumed-{k}"),
            ..PodOnNode::of(pod)
        });
        snap.set_alloc(index, Arc::new(alloc));
    }
    let end = thread_cpu_ns()?;
    Some((end - start) as f64 / f64::from(iters) / 1000.0)
}

/// Every other profile of the embedded config over the same 5 000 nodes and pod.
fn bench_profiles(c: &mut Criterion) {
    if !selected("profiles") {
        return;
    }
    let profiles = ScorerConfig::embedded_default()
        .build_profiles()
        .expect("embedded profiles build");
    let snap = cluster(5_000, 42);
    let pod = pod();
    let mut group = c.benchmark_group("score_profile_5000");
    for profile in profiles.iter().skip(1) {
        let mut rng = StdRng::seed_from_u64(1);
        let e = profile.evaluate(&snap, &pod, None, 10, &mut rng);
        if let Some(us) = cpu_micros_per_eval(profile, &snap, &pod, 100) {
            println!(
                "score_profile_5000/{}: {us:.0} µs on-CPU per evaluation (mean of 100; {} \
                 filters, {} scores; {})",
                profile.name,
                profile.filters.len(),
                profile.scores.len(),
                e.summary()
            );
        }
        group.bench_function(profile.name.as_str(), |b| {
            b.iter(|| black_box(profile.evaluate(&snap, black_box(&pod), None, 10, &mut rng)))
        });
    }
    group.finish();
}

/// What the image index costs a snapshot on its first ImageLocality score: a build (the
/// first snapshot, or one where more than a quarter of the nodes changed), and the patch of
/// the previous snapshot's index where one node's images changed, one node joined or one
/// left.
fn bench_image_index(snap: &ClusterSnapshot) {
    type Node = (Arc<str>, Option<NodeImages>);
    let nodes: Vec<Node> = snap
        .nodes()
        .iter()
        .map(|n| (n.name.clone(), n.kube.as_ref().map(|k| k.images.clone())))
        .collect();
    fn view(v: &[(Arc<str>, Option<NodeImages>)]) -> Vec<(&Arc<str>, Option<&NodeImages>)> {
        v.iter().map(|(n, i)| (n, i.as_ref())).collect()
    }
    let mean_ms = |runs: u32, mut f: Box<dyn FnMut() + '_>| {
        let start = Instant::now();
        for _ in 0..runs {
            f();
        }
        start.elapsed().as_secs_f64() * 1e3 / f64::from(runs)
    };
    let built = Arc::new(ImageIndex::build(view(&nodes)));
    let build = mean_ms(
        20,
        Box::new(|| drop(black_box(ImageIndex::build(view(&nodes))))),
    );
    // One node pulls a new image (its list gains a name).
    let mut changed = nodes.clone();
    let mid = changed.len() / 2;
    if let Some(images) = &changed[mid].1 {
        changed[mid].1 =
            Some(NodeImages::new(images.entries().iter().cloned().chain([(
                Arc::<str>::from("registry.example/new:v1"),
                100 << 20,
            )])));
    }
    let patch = mean_ms(
        200,
        Box::new(|| drop(black_box(ImageIndex::after(&built, view(&changed))))),
    );
    // One node joins in the middle of the name order (every later position moves).
    let mut joined = nodes.clone();
    joined.insert(
        mid,
        (
            Arc::from(format!("{}-joined", nodes[mid - 1].0)),
            changed[mid].1.clone(),
        ),
    );
    let join = mean_ms(
        50,
        Box::new(|| drop(black_box(ImageIndex::after(&built, view(&joined))))),
    );
    // The node in the middle leaves (every later position moves).
    let mut left = nodes.clone();
    left.remove(mid);
    let leave = mean_ms(
        50,
        Box::new(|| drop(black_box(ImageIndex::after(&built, view(&left))))),
    );
    let unchanged = mean_ms(
        200,
        Box::new(|| drop(black_box(ImageIndex::after(&built, view(&nodes))))),
    );
    println!(
        "image index of {} nodes (two names per image, up to 28 images each): built in \
         {build:.2} ms; from the last snapshot's: unchanged {unchanged:.3} ms, one node's \
         images changed {patch:.3} ms, one node joined {join:.3} ms, one node left \
         {leave:.3} ms (means)",
        built.nodes(),
    );
}

fn bench_plugins(c: &mut Criterion) {
    if !selected("plugins") {
        return;
    }
    let profile = default_profile();
    let pod = pod();
    let snap = cluster(5_000, 42);
    bench_image_index(&snap);
    let table = snap.digests(profile.window_seconds);
    let mut current = Vec::new();
    // As `Profile::evaluate` builds it: rows checked once, memos allowed.
    let ctx = CycleContext {
        digests: Some(&table),
        current: Some(table.current_rows(snap.nodes(), &mut current)),
        ..CycleContext::new(&snap, profile.window_seconds, profile.stale_policy)
    };
    let nodes: Vec<&NodeView> = snap.nodes().iter().collect();
    let all: Vec<usize> = (0..nodes.len()).collect();
    let mut group = c.benchmark_group("plugin_5000");
    let (mut passing, mut filtered) = (Vec::new(), Vec::new());
    for f in &profile.filters {
        group.bench_function(format!("filter/{}", f.name()), |b| {
            b.iter(|| {
                // As `Profile::evaluate` runs it: PreFilter once per pod, then the plugin's
                // pass over every node (here all of them, not only those earlier filters
                // kept).
                let state = f.prefilter(&ctx, black_box(&pod));
                passing.clone_from(&all);
                filtered.clear();
                if !f.skips(state.as_ref(), &pod) {
                    f.filter_nodes(&ctx, state.as_ref(), &pod, &mut passing, &mut filtered);
                }
                passing.len()
            })
        });
    }
    let mut out = vec![0i64; nodes.len()];
    for (s, _) in &profile.scores {
        group.bench_function(format!("score/{}", s.name()), |b| {
            b.iter(|| {
                s.score_indexed(&ctx, black_box(&pod), &nodes, &all, &mut out);
                black_box(out[0])
            })
        });
    }
    group.finish();
}

/// `cluster` made full: each node's pods share all but 250m of its CPU, with priorities 0,
/// 100 and 200; the requests and sums are consistent, so a 500m pod fits nowhere and needs
/// about one victim per node.
fn full_cluster(n: usize, seed: u64) -> ClusterSnapshot {
    let mut snap = cluster(n, seed);
    for node in snap.nodes_mut() {
        let cpu = node.allocatable().cpu_millis;
        let alloc = Arc::make_mut(&mut node.alloc);
        let pods: Vec<PodOnNode> = alloc.pods.drain(..).map(Arc::unwrap_or_clone).collect();
        let share = (cpu - 250) / pods.len().max(1) as i64;
        let mut fresh = NodeAllocation {
            inflight: std::mem::take(&mut alloc.inflight),
            ..Default::default()
        };
        for (k, mut p) in pods.into_iter().enumerate() {
            p.priority = (k % 3) as i32 * 100;
            p.start_time = Some(1_700_000_000 + k as i64);
            p.requests = ResourceList {
                cpu_millis: share,
                memory_bytes: 256 << 20,
                ..Default::default()
            };
            p.nonzero_cpu_millis = share;
            p.nonzero_memory_bytes = 256 << 20;
            fresh.admit(p);
        }
        *alloc = fresh;
    }
    snap.generation += 1;
    snap
}

fn bench_preempt(c: &mut Criterion) {
    if !selected("preempt") {
        return;
    }
    let profile = default_profile();
    let snap = full_cluster(5_000, 42);
    let mut group = c.benchmark_group("preempt_default_profile");
    for (label, base) in [("5000", pod()), ("5000-anti-affinity", ha_pod())] {
        let pod = PodInfo {
            priority: 1000,
            ..base
        };
        let mut rng = StdRng::seed_from_u64(3);
        let ev = profile.evaluate(&snap, &pod, None, 10, &mut rng);
        assert_eq!(ev.feasible(), 0, "{}", ev.summary());
        let outcome = profile.preempt(&snap, &pod, &ev, &[], &mut rng);
        let loadstar_framework::preemption::PreemptionOutcome::Proposal(p) = &outcome else {
            panic!("expected a proposal: {outcome:?}");
        };
        if let Some(start) = thread_cpu_ns() {
            let iters = 20u32;
            for _ in 0..iters {
                black_box(profile.preempt(&snap, &pod, &ev, &[], &mut rng));
            }
            if let Some(end) = thread_cpu_ns() {
                println!(
                    "preempt_default_profile/{label}: {:.1} ms on-CPU per preemption (mean of \
                     {iters}; {} potential nodes, {} examined, {} candidates, {} victim(s) on \
                     the chosen node)",
                    (end - start) as f64 / f64::from(iters) / 1e6,
                    p.potential,
                    p.examined,
                    p.candidates.len(),
                    p.chosen().map_or(0, |c| c.victims.len())
                );
            }
        }
        group.bench_function(label, |b| {
            b.iter(|| black_box(profile.preempt(&snap, black_box(&pod), &ev, &[], &mut rng)))
        });
    }
    group.finish();
}

criterion_group! {
    name = benches;
    config = Criterion::default().sample_size(30).warm_up_time(std::time::Duration::from_secs(1)).measurement_time(std::time::Duration::from_secs(3));
    targets = bench_evaluate, bench_profiles, bench_plugins, bench_preempt
}
criterion_main!(benches);
