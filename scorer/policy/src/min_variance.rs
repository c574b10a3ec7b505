//! `MinVariance` (seed 004): place the pod where it lowers — or raises least — the
//! cluster-wide variance of one utilisation (CPU by default).
//!
//! With N nodes of utilisation uᵢ, S = Σuᵢ and Q = Σuᵢ² (one O(N) pass over the whole
//! snapshot), placing a pod that adds dⱼ (its request over node j's capacity) on node j gives
//! Var'ⱼ = (Q + 2uⱼdⱼ + dⱼ²)/N − ((S + dⱼ)/N)², O(1) per node. Scores are normalised over
//! the feasible nodes: `100·(max − Var'ⱼ)/(max − min)`, truncated; all 100 when every node
//! gives the same variance (within 1e-12). For equal dⱼ this ranks nodes by utilisation,
//! least first; heterogeneous nodes are compared by what the pod really does to the spread.
//!
//! uᵢ is the profile window's `statistic` (default mean, with in-flight estimates); nodes
//! without load (no agent, or stale under `fallback`) use their requests over allocatable
//! (CPU, memory, GPU) or 0. The pod's demand is its effective request (CPU with upstream's
//! 100m non-zero default, memory 200Mi, GPUs in devices; 0 for network and disk IO).
use serde::{Deserialize, Serialize};

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{ClusterSnapshot, Memo, NodeDigest, NodeView, PodInfo};
use loadstar_framework::{CycleContext, MAX_NODE_SCORE, ScorePlugin, StalePolicy};

use super::util::{self, Statistic};
use loadstar_parity::args::{PluginError, args_to_yaml, parse_args};

/// Plugin name.
pub const NAME: &str = "MinVariance";

/// Arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct MinVarianceArgs {
    /// The utilisation whose variance is minimised: `cpu`, `memory`, `network`, `disk_io`,
    /// `gpu`, `gpu_memory`.
    pub resource: String,
    /// Window statistic: `mean`, `p95`, `max`, `latest`.
    pub statistic: Statistic,
}

impl Default for MinVarianceArgs {
    fn default() -> Self {
        MinVarianceArgs {
            resource: "cpu".into(),
            statistic: Statistic::Mean,
        }
    }
}

/// The variance after adding `d` to one node of utilisation `u`, given the cluster's N, S, Q.
pub fn variance_after(n: f64, s: f64, q: f64, u: f64, d: f64) -> f64 {
    let mean = (s + d) / n;
    ((q + 2.0 * u * d + d * d) / n - mean * mean).max(0.0)
}

/// [`variance_after`] × N², without its two divisions: N·(Q + 2ud + d²) − (S + d)². The
/// score compares nodes of one cluster only through differences over the span, which the
/// common factor N² leaves as they are.
#[inline(always)]
fn scaled_variance_after(n: f64, s: f64, q: f64, u: f64, d: f64) -> f64 {
    let sum = s + d;
    (n * (q + 2.0 * u * d + d * d) - sum * sum).max(0.0)
}

/// The min-variance score.
#[derive(Debug, Clone)]
pub struct MinVariance {
    args: MinVarianceArgs,
    kind: ResourceKind,
}

impl Default for MinVariance {
    fn default() -> Self {
        MinVariance {
            args: MinVarianceArgs::default(),
            kind: ResourceKind::Cpu,
        }
    }
}

impl MinVariance {
    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: MinVarianceArgs = parse_args(NAME, args)?;
        let kind = ResourceKind::from_name(&args.resource).ok_or_else(|| {
            PluginError::invalid(
                NAME,
                "resource",
                format!(
                    "unknown resource {:?} (one of cpu, memory, network, disk_io, gpu, gpu_memory)",
                    args.resource
                ),
            )
        })?;
        Ok(MinVariance { args, kind })
    }

    fn utilisation(&self, ctx: &CycleContext<'_>, node: &NodeView, d: &NodeDigest) -> f64 {
        utilisation(ctx, node, d, self.kind, self.args.statistic)
    }

    /// What the pod asks of the resource, in [`util::capacity`] units.
    fn amount(&self, pod: &PodInfo) -> f64 {
        match self.kind {
            ResourceKind::Cpu => pod.nonzero_cpu_millis as f64,
            ResourceKind::Memory => pod.nonzero_memory_bytes as f64,
            k => util::pod_request(pod, k),
        }
    }
}

/// The pod's `amount` as a utilisation of a node of capacity `cap` (0 without capacity).
#[inline(always)]
fn demand(amount: f64, cap: f64) -> f64 {
    if amount == 0.0 {
        return 0.0;
    }
    if cap > 0.0 { amount / cap } else { 0.0 }
}

/// A node's utilisation as MinVariance counts it.
fn utilisation(
    ctx: &CycleContext<'_>,
    node: &NodeView,
    d: &NodeDigest,
    kind: ResourceKind,
    statistic: Statistic,
) -> f64 {
    util::finite_or_zero(util::utilisation(ctx, node, d, kind, statistic).unwrap_or(0.0))
}

/// Nodes a partial sum of [`ClusterLoad`] covers.
const BLOCK: usize = 64;

/// The sum and the sum of squares of `utils`, added in order.
fn sums(utils: &[f64]) -> (f64, f64) {
    utils
        .iter()
        .fold((0.0, 0.0), |(s, q), &u| (s + u, q + u * u))
}

/// The [`sums`] of each [`BLOCK`] of `utils` in order, then S and Q as the blocks' sums
/// added in order: patching one node adds one block and the block sums again, not every
/// node, and gives exactly what this gives for the patched utilisations.
fn block_sums(utils: &[f64]) -> (Vec<(f64, f64)>, f64, f64) {
    let blocks: Vec<(f64, f64)> = utils.chunks(BLOCK).map(sums).collect();
    let (s, q) = total(&blocks);
    (blocks, s, q)
}

/// S and Q from the blocks' sums, added in order.
fn total(blocks: &[(f64, f64)]) -> (f64, f64) {
    blocks
        .iter()
        .fold((0.0, 0.0), |(s, q), &(bs, bq)| (s + bs, q + bq))
}

/// One pass over the whole snapshot: each node's utilisation, in `nodes` order, with their
/// sum S and sum of squares Q, and what they were computed with (to patch one node).
#[derive(Debug)]
struct ClusterLoad {
    utils: Vec<f64>,
    /// Each node's capacity ([`util::capacity`]), the pod's demand's denominator.
    caps: Vec<f64>,
    /// [`block_sums`]' partial sums.
    blocks: Vec<(f64, f64)>,
    s: f64,
    q: f64,
    kind: ResourceKind,
    statistic: Statistic,
    window_seconds: u32,
    stale_policy: StalePolicy,
}

impl MinVariance {
    fn cluster(&self, ctx: &CycleContext<'_>) -> ClusterLoad {
        let (utils, caps): (Vec<f64>, Vec<f64>) = ctx
            .snapshot
            .nodes()
            .iter()
            .map(|n| {
                let d = ctx.digest(n);
                (self.utilisation(ctx, n, &d), util::capacity(&d, self.kind))
            })
            .unzip();
        let (blocks, s, q) = block_sums(&utils);
        ClusterLoad {
            utils,
            caps,
            blocks,
            s,
            q,
            kind: self.kind,
            statistic: self.args.statistic,
            window_seconds: ctx.window_seconds,
            stale_policy: ctx.stale_policy,
        }
    }
}

impl Memo for ClusterLoad {
    /// The scheduler assumed a pod on one node: its utilisation is computed again from its
    /// new row, then its block's sums and S and Q from the blocks' sums ([`block_sums`]):
    /// exactly what a fresh pass gives, for a block and the block sums instead of every node.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        if self.utils.len() != snapshot.nodes().len() {
            return false;
        }
        let (Some(slot), Some(cap)) = (self.utils.get_mut(index), self.caps.get_mut(index)) else {
            return false;
        };
        let ctx = CycleContext::new(snapshot, self.window_seconds, self.stale_policy);
        *slot = utilisation(&ctx, node, row, self.kind, self.statistic);
        *cap = util::capacity(row, self.kind);
        let block = index / BLOCK;
        let (Some(nodes), Some(sum)) = (
            self.utils
                .get(block * BLOCK..((block + 1) * BLOCK).min(self.utils.len())),
            self.blocks.get_mut(block),
        ) else {
            return false;
        };
        *sum = sums(nodes);
        (self.s, self.q) = total(&self.blocks);
        true
    }
}

impl ScorePlugin for MinVariance {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        self.score_nodes(ctx, pod, nodes, None, out);
    }

    /// By index over the table's rows.
    fn score_indexed(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: &[usize],
        out: &mut [i64],
    ) {
        self.score_nodes(ctx, pod, nodes, Some(indices), out);
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

impl MinVariance {
    /// Scores `nodes`; `indices[j]`, when given, is `nodes[j]`'s index in the snapshot.
    fn score_nodes(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: Option<&[usize]>,
        out: &mut [i64],
    ) {
        // The cluster pass depends on the rows alone: once per digest table when it can be.
        let key = self.kind as u64 * 64 + self.args.statistic as u64 * 4 + ctx.stale_policy as u64;
        let cluster = ctx
            .memo(key, || self.cluster(ctx))
            .unwrap_or_else(|| std::sync::Arc::new(self.cluster(ctx)));
        let ClusterLoad {
            utils, caps, s, q, ..
        } = &*cluster;
        let (s, q) = (*s, *q);
        let count = utils.len().max(1) as f64;
        let amount = self.amount(pod);
        let (mut lo, mut hi) = (f64::INFINITY, f64::NEG_INFINITY);
        // Each node's variance is kept in its own output slot (as the float's bits) until the
        // span is known: no buffer per pod.
        for (j, (n, o)) in nodes.iter().zip(out.iter_mut()).enumerate() {
            let index = match indices {
                Some(ix) => ix.get(j).copied(),
                None => ctx.snapshot.position_of(n),
            };
            let v = match index.and_then(|i| Some((*utils.get(i)?, *caps.get(i)?))) {
                Some((u, cap)) => scaled_variance_after(count, s, q, u, demand(amount, cap)),
                None => {
                    // A node outside the snapshot joins the cluster for this comparison
                    // (scaled by the snapshot's N² like the others).
                    let digest = ctx.digest(n);
                    let u = self.utilisation(ctx, n, &digest);
                    let d = demand(amount, util::capacity(&digest, self.kind));
                    variance_after(count + 1.0, s + u, q + u * u, u, d) * count * count
                }
            };
            lo = lo.min(v);
            hi = hi.max(v);
            *o = v.to_bits() as i64;
        }
        let span = hi - lo;
        for o in out.iter_mut() {
            let v = f64::from_bits(*o as u64);
            // Variances within 1e-12 of each other are equal (scaled like them).
            *o = if span.is_nan() || span <= 1e-12 * count * count {
                MAX_NODE_SCORE
            } else {
                util::trunc_score(MAX_NODE_SCORE as f64 * (hi - v) / span)
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    fn cpu_node(name: &str, cpus: u32, ratio: f64) -> NodeView {
        with_load(
            with_capacity(
                kube_node(name, i64::from(cpus) * 1000, 16 * GIB),
                cpus,
                16 * GIB,
            ),
            ResourceKind::Cpu,
            ratio,
            0.0,
        )
    }

    fn brute_variance(values: &[f64]) -> f64 {
        let n = values.len() as f64;
        let mean = values.iter().sum::<f64>() / n;
        values.iter().map(|v| (v - mean) * (v - mean)).sum::<f64>() / n
    }

    #[test]
    fn incremental_variance_equals_recomputation() {
        let u = [0.2, 0.5, 0.9, 0.1];
        let (s, q) = (u.iter().sum::<f64>(), u.iter().map(|x| x * x).sum::<f64>());
        for j in 0..u.len() {
            let mut after = u;
            after[j] += 0.15;
            let fast = variance_after(4.0, s, q, u[j], 0.15);
            assert!((fast - brute_variance(&after)).abs() < 1e-12);
        }
    }

    #[test]
    fn prefers_the_node_that_lowers_variance() {
        // 4-core nodes at 20 % / 50 % / 80 %, pod of 1 core (+25 %).
        let snap = snapshot(vec![
            cpu_node("a", 4, 0.2),
            cpu_node("b", 4, 0.5),
            cpu_node("c", 4, 0.8),
        ]);
        let s = score_all(&MinVariance::default(), &snap, &pod(1000, GIB));
        assert_eq!((s[0], s[2]), (100, 0));
        assert!((49..=50).contains(&s[1]), "{s:?}");
        // A 16-core node at 55 % absorbs 1 core as +6.25 %: better for the spread than a
        // 4-core node at 50 % going to 75 %, though it is the busier one now.
        let snap = snapshot(vec![cpu_node("a", 4, 0.5), cpu_node("big", 16, 0.55)]);
        let s = score_all(&MinVariance::default(), &snap, &pod(1000, GIB));
        assert!(s[1] > s[0], "{s:?}");
        // Equal nodes: all 100.
        let snap = snapshot(vec![cpu_node("a", 4, 0.5), cpu_node("b", 4, 0.5)]);
        assert_eq!(
            score_all(&MinVariance::default(), &snap, &pod(1000, GIB)),
            vec![100, 100]
        );
    }

    #[test]
    fn a_patched_cluster_load_is_exactly_a_fresh_one() {
        // Three blocks, the last one short; the edited node in the middle one, then in the
        // short one.
        for at in [100, 149] {
            let nodes = |edited: f64| -> Vec<NodeView> {
                (0..150u32)
                    .map(|i| {
                        let ratio = if i as usize == at {
                            edited
                        } else {
                            (f64::from(i) * 0.37) % 1.0
                        };
                        cpu_node(&format!("n{i:03}"), 4 + i % 5, ratio)
                    })
                    .collect()
            };
            let plugin = MinVariance::default();
            let old = snapshot(nodes(0.25));
            let mut load = plugin.cluster(&ctx(&old));
            let new = snapshot(nodes(0.9));
            let row = NodeDigest::of(&new.nodes()[at], 60);
            assert!(load.patch(at, &row, &new.nodes()[at], &new));
            let fresh = plugin.cluster(&ctx(&new));
            assert_eq!(load.utils, fresh.utils);
            assert_eq!(load.blocks, fresh.blocks);
            assert_eq!(
                (load.s.to_bits(), load.q.to_bits()),
                (fresh.s.to_bits(), fresh.q.to_bits())
            );
            // And the sums changed by the edit (not a patch that did nothing).
            let before = plugin.cluster(&ctx(&old)).s;
            assert!((load.s - before - 0.65).abs() < 1e-9, "{at}: {}", load.s);
            // A node past the end cannot be patched: the memo is dropped instead.
            assert!(!load.patch(150, &row, &new.nodes()[at], &new));
        }
    }

    #[test]
    fn rejects_unknown_resource() {
        let err =
            MinVariance::from_args(&serde_norway::from_str("{resource: disk}").expect("yaml"))
                .expect_err("unknown");
        assert!(matches!(err, PluginError::InvalidArgs { ref path, .. } if path == "resource"));
    }

    proptest! {
        #[test]
        fn in_range_and_favours_less_loaded(loads in proptest::collection::vec(0.0f64..1.5, 2..12)) {
            let nodes: Vec<NodeView> = loads
                .iter()
                .enumerate()
                .map(|(i, l)| cpu_node(&format!("n{i:02}"), 8, *l))
                .collect();
            let snap = snapshot(nodes);
            let s = score_all(&MinVariance::default(), &snap, &pod(500, GIB));
            for (i, si) in s.iter().enumerate() {
                prop_assert!((0..=100).contains(si));
                for (j, sj) in s.iter().enumerate() {
                    if loads[i] < loads[j] {
                        prop_assert!(si >= sj);
                    }
                }
            }
        }
    }
}
