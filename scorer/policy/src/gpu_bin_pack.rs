//! `GpuBinPack` (seed 003): best-fit packing of GPU pods into *really* free GPUs, so 2-, 4-
//! and 8-GPU pods are not stranded by 1-GPU pods spread over every node.
//!
//! A node's free GPUs are the fewer of: Kubernetes' view (allocatable − requested
//! `nvidia.com/gpu`) and the agent's NVML view (healthy GPUs with no compute process and at
//! most `idleMemoryRatio` of their memory in use — a GPU someone uses outside Kubernetes is
//! not free). Either view alone is used when the other is missing; the NVML view is ignored
//! for stale nodes under the `fallback` policy.
//!
//! - **GPU pods** (requesting g GPUs): nodes with fewer than g free GPUs score 0; among the
//!   others the leftover ℓ = free − g is normalised over the nodes that fit,
//!   `100·(ℓmax − ℓ)/(ℓmax − ℓmin)` (integer): the tightest fit scores 100, the loosest 0,
//!   and all score 100 when their leftovers are equal.
//! - **Other pods** (`nonGpuPods`): `avoidFreeGpus` (default) scores
//!   `100·(total − free)/total`, 100 for nodes without GPUs: a CPU pod is steered away from
//!   nodes whose GPUs are idle (it would take CPU and memory a GPU pod needs there) but not
//!   from GPU nodes that are fully used. `neutral` scores every node 0 (the plugin does not
//!   apply), for clusters where GPU nodes should also take ordinary pods freely.
use serde::{Deserialize, Serialize};

use loadstar_framework::snapshot::{NodeDigest, NodeView, PodInfo};
use loadstar_framework::{CycleContext, MAX_NODE_SCORE, ScorePlugin};

use super::util;
use loadstar_parity::args::{PluginError, args_to_yaml, parse_args};
use loadstar_parity::rows::{RowCode, RowCodes, code_at};

/// Plugin name.
pub const NAME: &str = "GpuBinPack";

/// What the plugin does for pods without GPUs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum NonGpuPods {
    /// Prefer nodes without idle GPUs.
    #[default]
    AvoidFreeGpus,
    /// Score every node 0.
    Neutral,
}

/// Arguments.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct GpuBinPackArgs {
    /// Behaviour for pods that request no GPU.
    pub non_gpu_pods: NonGpuPods,
    /// A GPU without processes counts as free while at most this fraction of its memory is
    /// in use (driver/context overhead), 0–1.
    pub idle_memory_ratio: f64,
}

impl Default for GpuBinPackArgs {
    fn default() -> Self {
        GpuBinPackArgs {
            non_gpu_pods: NonGpuPods::AvoidFreeGpus,
            idle_memory_ratio: 0.05,
        }
    }
}

/// The GPU bin-packing score.
#[derive(Debug, Clone, Default)]
pub struct GpuBinPack {
    args: GpuBinPackArgs,
}

impl GpuBinPack {
    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: GpuBinPackArgs = parse_args(NAME, args)?;
        let r = args.idle_memory_ratio;
        if !(r.is_finite() && (0.0..=1.0).contains(&r)) {
            return Err(PluginError::invalid(
                NAME,
                "idleMemoryRatio",
                format!("must be between 0 and 1, got {r}"),
            ));
        }
        Ok(GpuBinPack { args })
    }

    /// (free, total) GPUs of the node.
    pub fn free_gpus(&self, ctx: &CycleContext<'_>, node: &NodeView) -> (i64, i64) {
        let d = ctx.digest(node);
        let kube = d.has_kube.then(|| {
            let total = d.allocatable_gpus;
            ((total - d.requested_gpus).clamp(0, total.max(0)), total)
        });
        let nvml = (d.agent_gpus > 0)
            .then(|| ctx.live_agent(node))
            .flatten()
            .map(|a| {
                let free = a
                    .gpus
                    .iter()
                    .filter(|g| {
                        g.healthy
                            && g.process_count == 0
                            && (g.memory_used_bytes as f64)
                                <= self.args.idle_memory_ratio * g.memory_total_bytes as f64
                    })
                    .count() as i64;
                (free, a.gpus.len() as i64)
            });
        match (kube, nvml) {
            (Some((kf, kt)), Some((nf, nt))) => (kf.min(nf), kt.max(nt)),
            (Some(k), None) => k,
            (None, Some(n)) => n,
            (None, None) => (0, 0),
        }
    }
}

impl ScorePlugin for GpuBinPack {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let want = util::pod_gpus(pod);
        if want == 0 {
            for (o, n) in out.iter_mut().zip(nodes) {
                *o = match self.args.non_gpu_pods {
                    NonGpuPods::Neutral => 0,
                    NonGpuPods::AvoidFreeGpus if !ctx.digest(n).has_gpus => MAX_NODE_SCORE,
                    NonGpuPods::AvoidFreeGpus => {
                        let (free, total) = self.free_gpus(ctx, n);
                        if total <= 0 {
                            MAX_NODE_SCORE
                        } else {
                            MAX_NODE_SCORE * (total - free) / total
                        }
                    }
                };
            }
            return;
        }
        // First pass: leftover per node (−1 = does not fit); second: normalise.
        let (mut min_left, mut max_left) = (i64::MAX, -1);
        for (o, n) in out.iter_mut().zip(nodes) {
            let (free, _) = self.free_gpus(ctx, n);
            *o = if free >= want { free - want } else { -1 };
            if *o >= 0 {
                min_left = min_left.min(*o);
                max_left = max_left.max(*o);
            }
        }
        let span = max_left - min_left;
        for o in out.iter_mut() {
            *o = if *o < 0 {
                0
            } else if span <= 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE * (max_left - *o) / span
            };
        }
    }

    /// A pod without GPUs on nodes without GPUs (most of both): one byte per node
    /// ([`HasGpus`]) memoised per table instead of each node's row.
    fn score_indexed(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: &[usize],
        out: &mut [i64],
    ) {
        if util::pod_gpus(pod) != 0 || self.args.non_gpu_pods != NonGpuPods::AvoidFreeGpus {
            return self.score(ctx, pod, nodes, out);
        }
        let codes = RowCodes::<HasGpus>::of(ctx);
        if codes.as_deref().is_some_and(RowCodes::all_zero) {
            // No node has GPUs: every node scores the maximum.
            out.fill(MAX_NODE_SCORE);
            return;
        }
        for ((o, n), &i) in out.iter_mut().zip(nodes).zip(indices) {
            *o = if code_at(codes.as_deref(), ctx, i) == 0 {
                MAX_NODE_SCORE
            } else {
                let (free, total) = self.free_gpus(ctx, n);
                if total <= 0 {
                    MAX_NODE_SCORE
                } else {
                    MAX_NODE_SCORE * (total - free) / total
                }
            };
        }
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

/// Whether the node has GPUs (1) or not (0).
#[derive(Debug)]
struct HasGpus;

impl RowCode for HasGpus {
    fn code(d: &NodeDigest, _: &NodeView) -> u8 {
        u8::from(d.has_gpus)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::StalePolicy;
    use loadstar_framework::snapshot::GpuState;
    use loadstar_testkit::snapshot::*;

    /// An 8-GPU node with `used` GPUs requested in Kubernetes.
    fn gpu_node(name: &str, used: i64) -> NodeView {
        let n = edit_kube(kube_node(name, 64_000, 256 * GIB), |k| {
            k.allocatable.gpus = 8
        });
        edit_alloc(n, |a| a.requested.gpus = used)
    }

    fn gpu_pod(g: i64) -> PodInfo {
        let mut p = pod(1000, GIB);
        p.requests.gpus = g;
        p.limits.gpus = g;
        p
    }

    #[test]
    fn gpu_pods_go_to_the_tightest_fit() {
        let snap = snapshot(vec![gpu_node("a", 7), gpu_node("b", 4), gpu_node("c", 0)]);
        let plugin = GpuBinPack::default();
        // 1 GPU: leftovers 0 / 3 / 7.
        assert_eq!(score_all(&plugin, &snap, &gpu_pod(1)), vec![100, 57, 0]);
        // 2 GPUs: a does not fit; leftovers 2 / 6.
        assert_eq!(score_all(&plugin, &snap, &gpu_pod(2)), vec![0, 100, 0]);
        // 8 GPUs: only c.
        assert_eq!(score_all(&plugin, &snap, &gpu_pod(8)), vec![0, 0, 100]);
    }

    #[test]
    fn nvml_busy_gpus_are_not_free() {
        let gpus = |busy: usize| {
            (0..8)
                .map(|i| GpuState {
                    index: i as u32,
                    memory_total_bytes: 16 << 30,
                    memory_used_bytes: if i < busy { 8 << 30 } else { 100 << 20 },
                    process_count: u32::from(i < busy),
                    healthy: true,
                    ..Default::default()
                })
                .collect::<Vec<_>>()
        };
        // Kubernetes thinks both are empty, but b runs 6 GPUs' worth outside Kubernetes.
        let a = edit_agent(gpu_node("a", 0), |ag| ag.gpus = gpus(0));
        let b = edit_agent(gpu_node("b", 0), |ag| ag.gpus = gpus(6));
        let snap = snapshot(vec![a, b]);
        let plugin = GpuBinPack::default();
        assert_eq!(plugin.free_gpus(&ctx(&snap), &snap.nodes()[1]), (2, 8));
        assert_eq!(score_all(&plugin, &snap, &gpu_pod(2)), vec![0, 100]);
        assert_eq!(score_all(&plugin, &snap, &gpu_pod(4)), vec![100, 0]);
        // Stale under fallback: NVML ignored, Kubernetes' view only.
        let mut stale = snap.nodes()[1].clone();
        stale.stale = true;
        let snap2 = snapshot(vec![stale]);
        assert_eq!(plugin.free_gpus(&ctx(&snap2), &snap2.nodes()[0]), (8, 8));
        let c = ctx_with(&snap2, StalePolicy::Penalize);
        assert_eq!(plugin.free_gpus(&c, &snap2.nodes()[0]), (2, 8));
    }

    #[test]
    fn non_gpu_pods_avoid_idle_gpus_or_are_neutral() {
        let snap = snapshot(vec![
            gpu_node("a", 8),
            gpu_node("b", 2),
            kube_node("cpu", 8000, 32 * GIB),
        ]);
        let plugin = GpuBinPack::default();
        assert_eq!(
            score_all(&plugin, &snap, &pod(500, GIB)),
            vec![100, 25, 100]
        );
        let neutral =
            GpuBinPack::from_args(&serde_norway::from_str("{nonGpuPods: neutral}").expect("yaml"))
                .expect("valid");
        assert_eq!(score_all(&neutral, &snap, &pod(500, GIB)), vec![0, 0, 0]);
        assert!(
            GpuBinPack::from_args(&serde_norway::from_str("{nonGpuPods: spread}").expect("yaml"))
                .is_err()
        );
    }
}
