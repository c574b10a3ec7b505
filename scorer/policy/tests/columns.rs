//! `ScorePlugin::column_key` and `FilterPlugin::column_key` are exact for every plugin of
//! every profile of the embedded default config: a plugin that keys a pod's shape scores
//! (or filters) each node the same whatever other nodes it is given with, and the same for
//! every pod of equal key; and a profile reading columns (replicas placed one after the
//! other, each assumed on its best node) reaches the verdicts of the same profile whose
//! plugins score and filter every pod themselves.
use std::collections::BTreeMap;
use std::sync::Arc;

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{ClusterSnapshot, NodeView, PodInfo, PodOnNode};
use loadstar_framework::{
    CycleContext, Evaluation, FilterPlugin, FilteredNode, PreFilterState, Profile, Reason,
    ScorePlugin,
};
use loadstar_policy::config::ScorerConfig;
use loadstar_testkit::snapshot::{
    edit_kube, kube_node, pod, snapshot, with_capacity, with_load, with_requested,
};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

const GIB: i64 = 1 << 30;

/// Nodes of 2–16 cores with requests, measured CPU and memory load (some without, one in
/// ten stale), a few with PreferNoSchedule taints.
fn cluster(n: usize, seed: u64) -> ClusterSnapshot {
    let mut rng = StdRng::seed_from_u64(seed);
    let nodes = (0..n)
        .map(|i| {
            let cores = [2i64, 4, 8, 16][rng.random_range(0..4)];
            let name = format!("n{i:03}");
            let mut node = kube_node(&name, cores * 1000, cores * 4 * GIB);
            node = with_requested(
                node,
                rng.random_range(0..cores * 900),
                rng.random_range(0..cores * 3 * GIB),
            );
            if i % 7 != 3 {
                node = with_capacity(node, cores as u32, cores * 4 * GIB);
                node = with_load(
                    node,
                    ResourceKind::Cpu,
                    rng.random_range(0.0..1.0),
                    rng.random_range(0.0..0.3),
                );
                node = with_load(
                    node,
                    ResourceKind::Memory,
                    rng.random_range(0.0..1.0),
                    rng.random_range(0.0..0.3),
                );
                node.stale = i % 10 == 0;
            }
            if i % 11 == 0 {
                node = edit_kube(node, |k| {
                    k.taints.push(loadstar_framework::snapshot::Taint {
                        key: "spot".into(),
                        value: "yes".into(),
                        effect: loadstar_framework::snapshot::TaintEffect::PreferNoSchedule,
                    })
                });
            }
            node
        })
        .collect();
    snapshot(nodes)
}

/// The embedded profiles, on the 60 s window the test nodes' load is in.
fn profiles() -> Vec<Profile> {
    let mut profiles = ScorerConfig::embedded_default()
        .build_profiles()
        .expect("embedded profiles");
    for p in &mut profiles {
        p.window_seconds = 60;
    }
    profiles
}

/// Pods of a few shapes, each paired with a pod equal to it but for what no score plugin of
/// the default config reads per node (name, labels, priority), for its non-zero requests, or
/// for one of its requests.
fn pods() -> Vec<(PodInfo, PodInfo)> {
    let mut out = Vec::new();
    for (cpu, mem) in [(100, 128 << 20), (0, 0), (2500, 6 * GIB), (300, 0)] {
        let a = pod(cpu, mem);
        let mut b = a.clone();
        b.name = "other".into();
        b.uid = "uid-other".into();
        b.labels = BTreeMap::from([("app".into(), "x".into())]);
        b.priority = 7;
        out.push((a.clone(), b));
        let mut c = a.clone();
        c.nonzero_cpu_millis = cpu + 100;
        c.nonzero_memory_bytes = mem + (200 << 20);
        out.push((a.clone(), c));
        // Each request alone: a key that left one out would be caught here.
        out.push((a.clone(), pod(cpu, mem + 3 * GIB)));
        out.push((a, pod(cpu + 700, mem)));
    }
    out
}

/// `plugin`'s scores of the nodes `indices` (in their order), clamped as evaluation reads them.
fn scores(
    plugin: &dyn ScorePlugin,
    ctx: &CycleContext<'_>,
    pod: &PodInfo,
    indices: &[usize],
) -> Vec<i64> {
    let views: Vec<&NodeView> = indices.iter().map(|&i| &ctx.snapshot.nodes()[i]).collect();
    let mut out = vec![0; indices.len()];
    plugin.score_indexed(ctx, pod, &views, indices, &mut out);
    out.iter().map(|s| (*s).clamp(0, 100)).collect()
}

/// Five random subsets of `all` (each node kept with probability 0.3), in reverse order.
fn subsets(all: &[usize], seed: u64) -> Vec<Vec<usize>> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..5)
        .map(|_| {
            let mut some: Vec<usize> = all
                .iter()
                .copied()
                .filter(|_| rng.random_bool(0.3))
                .collect();
            some.reverse();
            some
        })
        .collect()
}

/// Calls `f` with a cycle context of `profile` over `snap` and the snapshot's digest table,
/// every row current (as evaluation reads columns).
fn with_table(snap: &ClusterSnapshot, profile: &Profile, f: impl FnOnce(CycleContext<'_>)) {
    let table = snap.digests(profile.window_seconds);
    let mut current = Vec::new();
    f(CycleContext {
        snapshot: snap,
        window_seconds: profile.window_seconds,
        stale_policy: profile.stale_policy,
        digests: Some(&table),
        current: Some(table.current_rows(snap.nodes(), &mut current)),
    });
}

/// Every keyed score plugin scores a node alike whatever nodes come with it, and alike for
/// pods of equal key (pods differing in what the key covers are caught by it).
#[test]
fn keyed_scores_depend_on_the_node_and_the_key_alone() {
    let snap = cluster(60, 1);
    let all: Vec<usize> = (0..snap.nodes().len()).collect();
    let mut keyed = std::collections::BTreeSet::new();
    for profile in profiles() {
        with_table(&snap, &profile, |ctx| {
            for (plugin, _) in &profile.scores {
                for (a, b) in pods() {
                    let Some(key) = plugin.column_key(&ctx, &a) else {
                        continue;
                    };
                    keyed.insert(plugin.name());
                    let whole = scores(plugin.as_ref(), &ctx, &a, &all);
                    // Any subset, in any order, scores each node as the whole does.
                    for some in subsets(&all, 9) {
                        let got = scores(plugin.as_ref(), &ctx, &a, &some);
                        let want: Vec<i64> = some.iter().map(|&i| whole[i]).collect();
                        assert_eq!(got, want, "{} on a subset", plugin.name());
                    }
                    if plugin.column_key(&ctx, &b) == Some(key) {
                        assert_eq!(
                            scores(plugin.as_ref(), &ctx, &b, &all),
                            whole,
                            "{}: equal keys, different scores",
                            plugin.name()
                        );
                    }
                }
            }
        });
    }
    // The default profile's two per-node scores are among them.
    assert!(keyed.contains("LoadVariationRiskBalancing"), "{keyed:?}");
    assert!(keyed.contains("BalancedAllocation"), "{keyed:?}");
    assert!(keyed.contains("TargetLoadPacking"), "{keyed:?}");
    assert!(keyed.contains("LeastAllocated"), "{keyed:?}");
}

/// `filter`'s verdict on each of `indices` (in their order): `None` for a pass.
fn verdicts_on(
    filter: &dyn FilterPlugin,
    ctx: &CycleContext<'_>,
    state: Option<&PreFilterState>,
    pod: &PodInfo,
    indices: &[usize],
) -> Vec<Option<Reason>> {
    let mut passing = indices.to_vec();
    let mut refused = Vec::new();
    filter.filter_nodes(ctx, state, pod, &mut passing, &mut refused);
    indices
        .iter()
        .map(|i| {
            refused
                .iter()
                .find(|f| f.index == *i)
                .map(|f| f.reason.clone())
        })
        .collect()
}

/// Every keyed filter refuses a node alike (with the same reason) whatever nodes come with
/// it, and alike for pods of equal key.
#[test]
fn keyed_verdicts_depend_on_the_node_and_the_key_alone() {
    let snap = cluster(60, 3);
    let all: Vec<usize> = (0..snap.nodes().len()).collect();
    let mut keyed = std::collections::BTreeSet::new();
    let mut refusals = 0;
    for profile in profiles() {
        with_table(&snap, &profile, |ctx| {
            for f in &profile.filters {
                for (a, b) in pods() {
                    let state = f.prefilter(&ctx, &a);
                    let Some(key) = f.column_key(&ctx, state.as_ref(), &a) else {
                        continue;
                    };
                    keyed.insert(f.name());
                    let whole = verdicts_on(f.as_ref(), &ctx, state.as_ref(), &a, &all);
                    refusals += whole.iter().filter(|v| v.is_some()).count();
                    for some in subsets(&all, 11) {
                        let got = verdicts_on(f.as_ref(), &ctx, state.as_ref(), &a, &some);
                        let want: Vec<Option<Reason>> =
                            some.iter().map(|&i| whole[i].clone()).collect();
                        assert_eq!(got, want, "{} on a subset", f.name());
                    }
                    let state_b = f.prefilter(&ctx, &b);
                    if f.column_key(&ctx, state_b.as_ref(), &b) == Some(key) {
                        assert_eq!(
                            verdicts_on(f.as_ref(), &ctx, state_b.as_ref(), &b, &all),
                            whole,
                            "{}: equal keys, different verdicts",
                            f.name()
                        );
                    }
                }
            }
        });
    }
    assert!(keyed.contains("NodeResourcesFit"), "{keyed:?}");
    assert!(keyed.contains("UsageThreshold"), "{keyed:?}");
    // The cluster is full and loaded enough for verdicts to differ between nodes.
    assert!(refusals > 0);
}

/// A filter that hides its column key: filters every pod itself.
#[derive(Debug)]
struct UnkeyedFilter(Box<dyn FilterPlugin>);
impl FilterPlugin for UnkeyedFilter {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn prefilter(&self, ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<PreFilterState> {
        self.0.prefilter(ctx, pod)
    }
    fn skips(&self, state: Option<&PreFilterState>, pod: &PodInfo) -> bool {
        self.0.skips(state, pod)
    }
    fn filter_prepared(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        node: &NodeView,
    ) -> Result<(), Reason> {
        self.0.filter_prepared(ctx, state, pod, node)
    }
    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        self.0.filter(ctx, pod, node)
    }
    fn filter_nodes(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        nodes: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        self.0.filter_nodes(ctx, state, pod, nodes, filtered);
    }
}

/// A score plugin that hides its column key: scores every pod itself.
#[derive(Debug)]
struct Unkeyed(Box<dyn ScorePlugin>);
impl ScorePlugin for Unkeyed {
    fn name(&self) -> &'static str {
        self.0.name()
    }
    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        self.0.score(ctx, pod, nodes, out);
    }
    fn score_indexed(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: &[usize],
        out: &mut [i64],
    ) {
        self.0.score_indexed(ctx, pod, nodes, indices, out);
    }
}

/// Feasible nodes with their totals' bits and plugin scores, by index.
type Ranked = Vec<(usize, u64, Vec<i64>)>;

/// The ranked nodes (by index) and the rejected ones with their filter and reason.
fn verdicts(ev: &Evaluation) -> (Ranked, Vec<(usize, &'static str, Reason)>) {
    let mut ranked: Ranked = ev
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
    let filtered = ev
        .filtered
        .iter()
        .map(|f| (f.index, f.plugin, f.reason.clone()))
        .collect();
    (ranked, filtered)
}

/// `profile` with every plugin's column key hidden: it filters and scores every pod itself.
fn unkeyed(mut profile: Profile) -> Profile {
    profile.scores = profile
        .scores
        .into_iter()
        .map(|(s, w)| (Box::new(Unkeyed(s)) as Box<dyn ScorePlugin>, w))
        .collect();
    profile.filters = profile
        .filters
        .into_iter()
        .map(|f| Box::new(UnkeyedFilter(f)) as Box<dyn FilterPlugin>)
        .collect();
    profile
}

/// Each embedded profile, on its own cluster: replicas of one shape (and now and then
/// another) placed one after the other get the verdicts of the same profile's plugins
/// filtering and scoring every pod themselves.
#[test]
fn replicas_placed_one_after_the_other_get_the_verdicts_of_plugins_scoring_each_pod() {
    let keyed = profiles();
    let unkeyed: Vec<Profile> = profiles().into_iter().map(unkeyed).collect();
    let mut rng = StdRng::seed_from_u64(5);
    for (k, u) in keyed.iter().zip(&unkeyed) {
        let mut snap = cluster(80, 2);
        let mut columns = 0;
        for round in 0..25 {
            // Mostly one shape, now and then another.
            let p = if round % 6 == 5 {
                pod(1500, 2 * GIB)
            } else {
                pod(200, 256 << 20)
            };
            let got = k.evaluate(&snap, &p, None, 0, &mut rng);
            let want = u.evaluate(&snap, &p, None, 0, &mut rng);
            assert_eq!(verdicts(&got), verdicts(&want), "{} round {round}", k.name);
            columns = columns.max(snap.digests(k.window_seconds).columns());
            let Some(best) = got.best().map(|b| b.index) else {
                continue;
            };
            let mut alloc = (*snap.nodes()[best].alloc).clone();
            alloc.put_pod(PodOnNode {
                uid: format!("r{round}"),
                requests: p.requests.clone(),
                ..Default::default()
            });
            snap.set_alloc(best, Arc::new(alloc));
        }
        let one = cluster(1, 0);
        let ctx = loadstar_testkit::snapshot::ctx(&one);
        let keys = k
            .scores
            .iter()
            .any(|(s, _)| s.column_key(&ctx, &pod(1, 1)).is_some())
            || k.filters.iter().any(|f| {
                let state = f.prefilter(&ctx, &pod(1, 1));
                !f.skips(state.as_ref(), &pod(1, 1))
                    && f.column_key(&ctx, state.as_ref(), &pod(1, 1)).is_some()
            });
        assert_eq!(columns > 0, keys, "{}: columns built {columns}", k.name);
    }
}

/// Three profiles of one window share the snapshot's digest table, and so its columns: the
/// same keyed plugins with other arguments, and the same arguments under another stale
/// policy. Placing replicas with each in turn on one cluster gives every profile the
/// verdicts of its own plugins scoring each pod: a key that left out an argument or the
/// stale policy would hand one profile another's column.
#[test]
fn profiles_sharing_a_table_never_read_each_others_columns() {
    let yaml = r#"
profiles:
  - schedulerName: a
    windowSeconds: 60
    stalePolicy: fallback
    filters: [NodeResourcesFit, {name: UsageThreshold, args: {thresholds: {cpu: 70}}}]
    scores:
      - {name: LoadVariationRiskBalancing, weight: 2}
      - {name: BalancedAllocation, weight: 1}
      - {name: LeastAllocated, weight: 1}
      - {name: TargetLoadPacking, weight: 1, args: {targetUtilization: 40}}
  - schedulerName: b
    windowSeconds: 60
    stalePolicy: fallback
    filters:
      - NodeResourcesFit
      - {name: UsageThreshold, args: {thresholds: {cpu: 45, memory: 60}, statistic: p95}}
    scores:
      - {name: LoadVariationRiskBalancing, weight: 2, args: {safeVarianceMargin: 3}}
      - {name: BalancedAllocation, weight: 1}
      - name: LeastAllocated
        weight: 1
        args: {resources: [{name: cpu, weight: 5}, {name: memory, weight: 1}]}
      - {name: TargetLoadPacking, weight: 1, args: {targetUtilization: 75}}
  - schedulerName: c
    windowSeconds: 60
    stalePolicy: penalize
    stalePenalty: 0.5
    filters: [NodeResourcesFit, {name: UsageThreshold, args: {thresholds: {cpu: 70}}}]
    scores:
      - {name: LoadVariationRiskBalancing, weight: 2}
      - {name: BalancedAllocation, weight: 1}
      - {name: LeastAllocated, weight: 1}
      - {name: TargetLoadPacking, weight: 1, args: {targetUtilization: 40}}
"#;
    let build = || {
        ScorerConfig::from_yaml(yaml)
            .expect("valid config")
            .build_profiles()
            .expect("profiles build")
    };
    let keyed = build();
    let plain: Vec<Profile> = build().into_iter().map(unkeyed).collect();
    let mut snap = cluster(80, 4);
    let mut rng = StdRng::seed_from_u64(6);
    let shape = pod(200, 256 << 20);
    for round in 0..12 {
        for (k, u) in keyed.iter().zip(&plain) {
            let got = k.evaluate(&snap, &shape, None, 0, &mut rng);
            let want = u.evaluate(&snap, &shape, None, 0, &mut rng);
            assert_eq!(verdicts(&got), verdicts(&want), "{} round {round}", k.name);
            let Some(best) = got.best().map(|b| b.index) else {
                continue;
            };
            let mut alloc = (*snap.nodes()[best].alloc).clone();
            alloc.put_pod(PodOnNode {
                uid: format!("{}-{round}", k.name),
                requests: shape.requests.clone(),
                ..Default::default()
            });
            snap.set_alloc(best, Arc::new(alloc));
        }
    }
    // Each profile's keyed plugins built their own columns in the one table: the profiles
    // differ in at least one key word of every keyed plugin but BalancedAllocation and
    // NodeResourcesFit (shared by right, as equal keys) between a and b.
    assert!(
        snap.digests(60).columns() >= 12,
        "{}",
        snap.digests(60).columns()
    );
}
