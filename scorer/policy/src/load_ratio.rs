//! `LoadRatio` (the seed paper): score = (1 − L/S)·10 with L = L(cpu) + L(mem) + L(net) +
//! L(disk), the node's utilisation ratios, and S = n·S(c) + S(m) + S(n) + S(d), its
//! performance figures (cores × GHz, memory, NIC speed, disk throughput).
//!
//! Taken literally the terms of S have different units (GHz + bytes + bit/s + byte/s), so the
//! biggest number — whichever unit makes it so — decides everything. Loadstar's default
//! (`normalization: clusterMean`) divides each term of S by the cluster mean of that term, as
//! the paper's own efficiency measure H(i) = (L(i)/L(avg)) / (S(i)/S(avg)) does: an average
//! node has S ≈ the number of terms, a node twice as big in every dimension S ≈ twice that.
//! Terms no node has (e.g. no disk rates reported) are left out of S, and their L is 0.
//! The result is scaled to 0–100 (×100 instead of ×10), clamped, and truncated.
//!
//! `normalization: literal` keeps the paper's sum with S(c) in GHz, S(m) in GiB, S(n) in
//! Gbit/s and S(d) in GB/s; it is offered for comparison and is nearly constant (S ≫ L).
//!
//! L uses the profile window's `statistic` (default mean, with in-flight estimates). Without
//! load (no agent, or stale under `fallback`), CPU and memory use requests over allocatable
//! and network/disk count 0; without an agent's capacity, S(c) is the allocatable cores × the
//! cluster's mean GHz per core (1 GHz when no agent reports) and S(m) the allocatable memory.
use serde::{Deserialize, Serialize};

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{Memo, NodeView, PodInfo};
use loadstar_framework::{CycleContext, ScorePlugin};

use super::util::{self, Statistic};
use loadstar_parity::args::{PluginError, args_to_yaml, parse_args};

/// Plugin name.
pub const NAME: &str = "LoadRatio";

/// How the terms of S are combined.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Normalization {
    /// Each term over its cluster mean.
    #[default]
    ClusterMean,
    /// The paper's literal sum (GHz + GiB + Gbit/s + GB/s).
    Literal,
}

/// Arguments.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadRatioArgs {
    /// How S is formed.
    pub normalization: Normalization,
    /// Window statistic for L.
    pub statistic: Statistic,
}

/// The four terms of S for one node, in the literal units (GHz, GiB, Gbit/s, GB/s).
fn s_terms(node: &NodeView, ghz_per_core: f64) -> [f64; 4] {
    if let Some(a) = &node.agent
        && a.capacity.logical_cpus > 0
    {
        let c = &a.capacity;
        return [
            c.cpu_ghz_total(),
            c.memory_bytes as f64 / (1u64 << 30) as f64,
            c.network_bits_per_second() as f64 / 1e9,
            c.disk_bytes_per_second() as f64 / 1e9,
        ];
    }
    let alloc = node.allocatable_ref();
    [
        alloc.cpu_millis as f64 / 1000.0 * ghz_per_core,
        alloc.memory_bytes as f64 / (1u64 << 30) as f64,
        0.0,
        0.0,
    ]
}

const L_KINDS: [ResourceKind; 4] = [
    ResourceKind::Cpu,
    ResourceKind::Memory,
    ResourceKind::Network,
    ResourceKind::DiskIo,
];

/// The paper's score on 0–100 for L and S (S ≤ 0 scores 0).
pub fn load_ratio_score(l: f64, s: f64) -> i64 {
    if s.is_nan() || s <= 0.0 {
        return 0;
    }
    util::trunc_score((1.0 - l / s) * 100.0)
}

/// The load-ratio score.
#[derive(Debug, Clone, Default)]
pub struct LoadRatio {
    args: LoadRatioArgs,
}

impl LoadRatio {
    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        Ok(LoadRatio {
            args: parse_args(NAME, args)?,
        })
    }
}

/// Every node's score, in snapshot order (the plugin's memo: a type of its own, so no other
/// plugin's memo can be taken for it).
#[derive(Debug)]
struct NodeScores(Vec<i64>);

/// Dropped when a node's row is patched: every score depends on the cluster's means.
impl Memo for NodeScores {}

impl LoadRatio {
    /// Scores `nodes` against the whole snapshot's means.
    fn score_nodes(&self, ctx: &CycleContext<'_>, nodes: &[&NodeView], out: &mut [i64]) {
        // Cluster pass: mean GHz per core of agent nodes, then the mean of every S term.
        let (mut ghz, mut cores) = (0.0, 0.0);
        for n in ctx.snapshot.nodes() {
            if let Some(a) = &n.agent
                && a.capacity.logical_cpus > 0
            {
                ghz += a.capacity.cpu_ghz_total();
                cores += f64::from(a.capacity.logical_cpus);
            }
        }
        let ghz_per_core = if ghz > 0.0 { ghz / cores } else { 1.0 };
        let mut means = [0.0f64; 4];
        if self.args.normalization == Normalization::ClusterMean {
            for n in ctx.snapshot.nodes() {
                for (m, t) in means.iter_mut().zip(s_terms(n, ghz_per_core)) {
                    *m += util::finite_or_zero(t);
                }
            }
            let count = ctx.snapshot.nodes().len().max(1) as f64;
            for m in &mut means {
                *m /= count;
            }
        }
        for (o, n) in out.iter_mut().zip(nodes) {
            let terms = s_terms(n, ghz_per_core);
            let s: f64 = match self.args.normalization {
                Normalization::Literal => terms.iter().map(|t| util::finite_or_zero(*t)).sum(),
                Normalization::ClusterMean => terms
                    .iter()
                    .zip(&means)
                    .filter(|(_, m)| **m > 0.0)
                    .map(|(t, m)| util::finite_or_zero(*t) / m)
                    .sum(),
            };
            let d = ctx.digest(n);
            let l: f64 = L_KINDS
                .iter()
                .map(|k| {
                    util::finite_or_zero(
                        util::utilisation(ctx, n, &d, *k, self.args.statistic).unwrap_or(0.0),
                    )
                    .max(0.0)
                })
                .sum();
            *o = load_ratio_score(l, s);
        }
    }
}

impl ScorePlugin for LoadRatio {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, _: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        // Nothing here depends on the pod: with a current digest table, every node's score
        // is computed once per table and looked up for each pod after.
        let key = self.args.normalization as u64 * 64
            + self.args.statistic as u64 * 4
            + ctx.stale_policy as u64;
        if let Some(all) = ctx.memo(key, || {
            let all: Vec<&NodeView> = ctx.snapshot.nodes().iter().collect();
            let mut scores = vec![0; all.len()];
            self.score_nodes(ctx, &all, &mut scores);
            NodeScores(scores)
        }) {
            let mut missing = false;
            for (o, n) in out.iter_mut().zip(nodes) {
                match ctx.snapshot.position_of(n).and_then(|i| all.0.get(i)) {
                    Some(&score) => *o = score,
                    None => missing = true,
                }
            }
            if !missing {
                return;
            }
        }
        self.score_nodes(ctx, nodes, out);
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_common::model::Nic;
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    fn node(name: &str, cpus: u32, gib: i64, cpu: f64, mem: f64) -> NodeView {
        let n = with_capacity(
            kube_node(name, i64::from(cpus) * 1000, gib * GIB),
            cpus,
            gib * GIB,
        );
        let n = with_load(n, ResourceKind::Cpu, cpu, 0.0);
        with_load(n, ResourceKind::Memory, mem, 0.0)
    }

    #[test]
    fn cluster_mean_normalisation() {
        // Two equal-frequency nodes, one twice the other. Mean S terms: cpu 12 GHz... each node's
        // S = cpu/mean + mem/mean: small = 2/3 + 2/3 = 4/3, big = 8/3.
        let snap = snapshot(vec![node("a", 4, 8, 0.5, 0.5), node("b", 8, 16, 0.5, 0.5)]);
        let s = score_all(&LoadRatio::default(), &snap, &pod(0, 0));
        // a: 1 − 1/(4/3) = 0.25 → 25; b: 1 − 1/(8/3) = 0.625 → 62.
        assert_eq!(s, vec![25, 62]);
        // Idle nodes score 100; overloaded nodes 0.
        let snap = snapshot(vec![node("a", 4, 8, 0.0, 0.0), node("b", 4, 8, 1.0, 1.0)]);
        assert_eq!(
            score_all(&LoadRatio::default(), &snap, &pod(0, 0)),
            vec![100, 0]
        );
    }

    #[test]
    fn network_term_joins_when_reported() {
        let with_nic = |n: NodeView, gbit: u64| {
            edit_agent(n, |a| {
                a.capacity.nics = vec![Nic {
                    name: "eth0".into(),
                    speed_bits_per_second: gbit * 1_000_000_000,
                    speed_assumed: false,
                }]
            })
        };
        let a = with_load(
            with_nic(node("a", 4, 8, 0.5, 0.5), 10),
            ResourceKind::Network,
            0.5,
            0.0,
        );
        let b = with_nic(node("b", 4, 8, 0.5, 0.5), 10);
        let snap = snapshot(vec![a, b]);
        // S = 3 on both; L = 1.5 vs 1.0 → 50 vs 66.
        assert_eq!(
            score_all(&LoadRatio::default(), &snap, &pod(0, 0)),
            vec![50, 66]
        );
    }

    #[test]
    fn literal_form_is_nearly_constant() {
        let lit = LoadRatio::from_args(
            &serde_norway::from_str("{normalization: literal}").expect("yaml"),
        )
        .expect("valid");
        let snap = snapshot(vec![node("a", 4, 8, 0.9, 0.9), node("b", 4, 8, 0.1, 0.1)]);
        // S = 4·2 GHz + 8 GiB = 16: L 1.8 → 88, L 0.2 → 98.
        assert_eq!(score_all(&lit, &snap, &pod(0, 0)), vec![88, 98]);
    }

    #[test]
    fn falls_back_to_requests_without_agent() {
        let a = with_requested(kube_node("a", 4000, 8 * GIB), 2000, 4 * GIB);
        let b = kube_node("b", 4000, 8 * GIB);
        let snap = snapshot(vec![a, b]);
        // S = 2 each; L = 1.0 vs 0 → 50 vs 100.
        assert_eq!(
            score_all(&LoadRatio::default(), &snap, &pod(0, 0)),
            vec![50, 100]
        );
    }

    proptest! {
        #[test]
        fn in_range_and_decreasing_in_load(cpu in 0.0f64..1.0, extra in 0.0f64..1.0, mem in 0.0f64..1.0) {
            let snap = snapshot(vec![node("a", 4, 8, cpu, mem), node("b", 4, 8, cpu + extra, mem)]);
            let s = score_all(&LoadRatio::default(), &snap, &pod(0, 0));
            prop_assert!((0..=100).contains(&s[0]) && (0..=100).contains(&s[1]));
            prop_assert!(s[1] <= s[0]);
        }
    }
}
