//! `LoadVariationRiskBalancing` (Trimaran, `pkg/trimaran/loadvariationriskbalancing/` and
//! `pkg/trimaran/resourcestats.go` of kubernetes-sigs/scheduler-plugins): equalise the *risk*
//! of nodes, risk being the mean load plus its variation.
//!
//! Per resource, with capacity = the node's allocatable: μ = (mean·capacity + pod request) /
//! capacity clamped to [0, 1] (the used mean clamped to [0, capacity] first), σ = stddev
//! clamped to [0, 1]; σ' = σ^(1/sensitivity) (when sensitivity ≥ 0), then × margin, clamped
//! to [0, 1]; resource score = (1 − (μ + σ')/2)·100. The node score is the minimum of the
//! CPU and memory scores when both have data, else the maximum (a missing one scores 0) —
//! Trimaran's rule; rounded half away from zero (`math.Round`). Defaults margin 1,
//! sensitivity 1. `mean` is the profile window's mean plus in-flight estimates.
//!
//! Option `extendedResources: true` (not Trimaran; off by default) adds network, disk IO and
//! GPU utilisation with a zero request except GPUs (the pod's GPU count over the node's), and
//! takes the minimum over every resource with data.
//!
//! Without load for a resource (no agent, or stale under `fallback`) Trimaran has no data for
//! it; Loadstar falls back to requests for CPU and memory (μ = (requested + request) /
//! allocatable, σ = 0), so request-only nodes are still compared, and leaves the extended
//! resources out.
use serde::{Deserialize, Serialize};

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{
    ClusterSnapshot, ColumnWords, Memo, NodeDigest, NodeView, PodInfo, Usage, patch_entry,
};
use loadstar_framework::{CycleContext, MAX_NODE_SCORE, ScorePlugin, StalePolicy};

use super::util;
use loadstar_parity::args::{PluginError, args_to_yaml, parse_args};

/// Plugin name.
pub const NAME: &str = "LoadVariationRiskBalancing";

/// Arguments (Trimaran's `LoadVariationRiskBalancingArgs`, plus `extendedResources`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LvrbArgs {
    /// Multiplier on the deviation term (≥ 0).
    pub safe_variance_margin: f64,
    /// Root power applied to the deviation (≥ 0).
    pub safe_variance_sensitivity: f64,
    /// Also score network, disk IO and GPU (not Trimaran).
    pub extended_resources: bool,
}

impl Default for LvrbArgs {
    fn default() -> Self {
        LvrbArgs {
            safe_variance_margin: 1.0,
            safe_variance_sensitivity: 1.0,
            extended_resources: false,
        }
    }
}

/// Trimaran's `computeScore` on ratios: `mean` and `stddev` of utilisation (of capacity) and
/// the pod's request as a ratio of capacity; a float 0–100.
pub fn risk_score(mean: f64, stddev: f64, request: f64, margin: f64, sensitivity: f64) -> f64 {
    risk_with(
        clamped_mean(mean),
        request,
        risk_sigma(stddev, margin, sensitivity),
    )
}

/// [`risk_score`]'s mean term before the request is added.
#[inline]
fn clamped_mean(mean: f64) -> f64 {
    util::finite_or_zero(mean).clamp(0.0, 1.0)
}

/// [`risk_score`]'s σ' (it does not depend on the pod).
#[inline]
fn risk_sigma(stddev: f64, margin: f64, sensitivity: f64) -> f64 {
    let mut sigma = util::finite_or_zero(stddev).clamp(0.0, 1.0);
    if sensitivity >= 0.0 && sensitivity != 1.0 {
        sigma = sigma.powf(1.0 / sensitivity);
    }
    util::finite_or_zero(sigma * margin).clamp(0.0, 1.0)
}

/// [`risk_score`] from its clamped mean and σ'.
#[inline(always)]
fn risk_with(mean: f64, request: f64, sigma: f64) -> f64 {
    let request = util::finite_or_zero(request).max(0.0);
    let mu = (mean + request).clamp(0.0, 1.0);
    let risk = (mu + sigma) / 2.0;
    (1.0 - risk) * MAX_NODE_SCORE as f64
}

/// The load-variation risk-balancing score.
#[derive(Debug, Clone, Default)]
pub struct LoadVariationRiskBalancing {
    args: LvrbArgs,
}

impl LoadVariationRiskBalancing {
    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: LvrbArgs = parse_args(NAME, args)?;
        for (path, v) in [
            ("safeVarianceMargin", args.safe_variance_margin),
            ("safeVarianceSensitivity", args.safe_variance_sensitivity),
        ] {
            if !(v.is_finite() && v >= 0.0) {
                return Err(PluginError::invalid(
                    NAME,
                    path,
                    format!("must be a non-negative number, got {v}"),
                ));
            }
        }
        Ok(LoadVariationRiskBalancing { args })
    }

    /// The CPU and memory cells of the node whose row is `d`: measured use over
    /// allocatable, else (no fresh load) the node's requests; no score without either.
    fn cells(&self, d: &NodeDigest, stale_policy: StalePolicy) -> [RiskCell; 2] {
        // The hot path reads the digest directly (same rule as `ctx.usage`).
        let fresh = !(d.stale && stale_policy == StalePolicy::Fallback);
        [
            self.cell(
                d.cpu.as_ref().filter(|_| fresh),
                d.requested_cpu_millis,
                d.allocatable_cpu_millis,
            ),
            self.cell(
                d.memory.as_ref().filter(|_| fresh),
                d.requested_memory_bytes,
                d.allocatable_memory_bytes,
            ),
        ]
    }

    fn cell(&self, used: Option<&Usage>, requested: i64, allocatable: i64) -> RiskCell {
        let (m, s) = (
            self.args.safe_variance_margin,
            self.args.safe_variance_sensitivity,
        );
        let alloc = allocatable as f64;
        let (state, mean, stddev) = match used {
            // Trimaran: invalid capacity scores 0.
            Some(_) if alloc <= 0.0 => (CellState::Zero, 0.0, 0.0),
            Some(u) => (CellState::Risk, u.mean, u.stddev),
            None if alloc > 0.0 => (CellState::Risk, requested as f64 / alloc, 0.0),
            None => (CellState::Unknown, 0.0, 0.0),
        };
        RiskCell {
            mean: clamped_mean(mean),
            sigma: risk_sigma(stddev, m, s),
            alloc,
            state,
        }
    }

    /// [`RiskColumns`]' memo key (checked against the columns' own arguments on use).
    fn columns_key(&self, stale_policy: StalePolicy) -> u64 {
        self.args.safe_variance_margin.to_bits()
            ^ self
                .args
                .safe_variance_sensitivity
                .to_bits()
                .rotate_left(29)
            ^ stale_policy as u64
    }

    /// The score of one resource, `None` without data.
    fn resource_score(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        node: &NodeView,
        d: &NodeDigest,
        kind: ResourceKind,
    ) -> Option<f64> {
        let alloc = match kind {
            ResourceKind::Cpu => d.allocatable_cpu_millis as f64,
            ResourceKind::Memory => d.allocatable_memory_bytes as f64,
            _ => 0.0,
        };
        let (m, s) = (
            self.args.safe_variance_margin,
            self.args.safe_variance_sensitivity,
        );
        let request = match kind {
            ResourceKind::Cpu => pod.requests.cpu_millis as f64,
            ResourceKind::Memory => pod.requests.memory_bytes as f64,
            ResourceKind::Gpu => util::pod_gpus(pod) as f64,
            _ => 0.0,
        };
        match ctx.usage_of(node, d, kind) {
            Some(u) => {
                let cap = match kind {
                    ResourceKind::Cpu | ResourceKind::Memory => alloc,
                    _ => util::capacity(d, kind),
                };
                if cap <= 0.0 && request > 0.0 {
                    return Some(0.0);
                }
                let req_ratio = if cap > 0.0 { request / cap } else { 0.0 };
                Some(risk_score(u.mean, u.stddev, req_ratio, m, s))
            }
            None => {
                if !matches!(kind, ResourceKind::Cpu | ResourceKind::Memory) || alloc <= 0.0 {
                    return None;
                }
                let requested = match kind {
                    ResourceKind::Cpu => d.requested_cpu_millis,
                    _ => d.requested_memory_bytes,
                } as f64;
                Some(risk_score(requested / alloc, 0.0, request / alloc, m, s))
            }
        }
    }
}

impl LoadVariationRiskBalancing {
    /// The score of `n`, whose row is `d`.
    #[inline]
    fn node_score(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        n: &NodeView,
        d: &NodeDigest,
    ) -> i64 {
        let cells = self.cells(d, ctx.stale_policy);
        let requests = pod_requests(pod);
        if !self.args.extended_resources {
            return cells_score(&cells, requests);
        }
        let mut total = combine(cells[0].score(requests[0]), cells[1].score(requests[1]));
        for kind in [
            ResourceKind::Network,
            ResourceKind::DiskIo,
            ResourceKind::Gpu,
        ] {
            if let Some(s) = self.resource_score(ctx, pod, n, d, kind) {
                total = total.min(s);
            }
        }
        util::round_half_away(total).clamp(0, MAX_NODE_SCORE)
    }
}

/// Whether a [`RiskCell`] scores, and how.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
enum CellState {
    /// No data for the resource: no score.
    #[default]
    Unknown,
    /// Measured, but no allocatable: 0.
    Zero,
    /// [`risk_score`] from the cell.
    Risk,
}

/// One node's CPU or memory terms of [`risk_score`] that do not depend on the pod.
#[derive(Debug, Clone, Copy, Default)]
struct RiskCell {
    /// The clamped mean utilisation (or requests over allocatable without load).
    mean: f64,
    /// σ'.
    sigma: f64,
    /// Allocatable, the pod's request's denominator.
    alloc: f64,
    state: CellState,
}

impl RiskCell {
    /// The resource's score for a pod requesting `request`.
    #[inline(always)]
    fn score(&self, request: f64) -> Option<f64> {
        match self.state {
            CellState::Risk => Some(risk_with(self.mean, request / self.alloc, self.sigma)),
            CellState::Zero => Some(0.0),
            CellState::Unknown => None,
        }
    }
}

/// Trimaran's rule: the minimum of CPU and memory when both have data, else the maximum (a
/// missing one scores 0).
#[inline(always)]
fn combine(cpu: Option<f64>, mem: Option<f64>) -> f64 {
    match (cpu, mem) {
        (Some(c), Some(m)) => c.min(m),
        (c, m) => c.unwrap_or(0.0).max(m.unwrap_or(0.0)),
    }
}

/// The pod's CPU and memory requests.
#[inline(always)]
fn pod_requests(pod: &PodInfo) -> [f64; 2] {
    [
        pod.requests.cpu_millis as f64,
        pod.requests.memory_bytes as f64,
    ]
}

/// A node's score from its cells (CPU and memory only).
#[inline(always)]
fn cells_score(cells: &[RiskCell; 2], requests: [f64; 2]) -> i64 {
    let total = combine(cells[0].score(requests[0]), cells[1].score(requests[1]));
    util::round_half_away(total).clamp(0, MAX_NODE_SCORE)
}

/// Every node's [`RiskCell`]s, in `nodes` order, built once per digest table: a pod's
/// score is then its requests over each cell's allocatable and a few float operations.
#[derive(Debug)]
struct RiskColumns {
    cells: Vec<[RiskCell; 2]>,
    plugin: LoadVariationRiskBalancing,
    stale_policy: StalePolicy,
}

impl Memo for RiskColumns {
    /// The scheduler assumed a pod on one node: its cells are computed again.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        _node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        patch_entry(&mut self.cells, index, snapshot, || {
            self.plugin.cells(row, self.stale_policy)
        })
    }
}

impl ScorePlugin for LoadVariationRiskBalancing {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        for (o, n) in out.iter_mut().zip(nodes) {
            *o = self.node_score(ctx, pod, n, &ctx.digest(n));
        }
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
        let columns = (!self.args.extended_resources)
            .then(|| {
                ctx.memo(self.columns_key(ctx.stale_policy), || RiskColumns {
                    cells: ctx
                        .snapshot
                        .nodes()
                        .iter()
                        .map(|n| self.cells(&ctx.digest(n), ctx.stale_policy))
                        .collect(),
                    plugin: self.clone(),
                    stale_policy: ctx.stale_policy,
                })
            })
            .flatten()
            .filter(|c| c.plugin.args == self.args && c.stale_policy == ctx.stale_policy);
        match columns {
            Some(columns) => {
                let requests = pod_requests(pod);
                for (o, &i) in out.iter_mut().zip(indices) {
                    *o = match columns.cells.get(i) {
                        Some(cells) => cells_score(cells, requests),
                        None => {
                            cells_score(&self.cells(&ctx.digest_at(i), ctx.stale_policy), requests)
                        }
                    };
                }
            }
            None => {
                for ((o, n), &i) in out.iter_mut().zip(nodes).zip(indices) {
                    *o = self.node_score(ctx, pod, n, &ctx.digest_at(i));
                }
            }
        }
    }

    /// Without extended resources a node's score is a function of its row (the stale
    /// policy is the column's too), the two arguments and the pod's CPU and memory requests.
    fn column_key(&self, _ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<ColumnWords> {
        (!self.args.extended_resources).then(|| {
            [
                pod.requests.cpu_millis as u64,
                pod.requests.memory_bytes as u64,
                self.args.safe_variance_margin.to_bits(),
                self.args.safe_variance_sensitivity.to_bits(),
                0,
                0,
                0,
                0,
            ]
        })
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    fn node(name: &str, cpu: (f64, f64), mem: Option<(f64, f64)>) -> NodeView {
        let n = with_capacity(kube_node(name, 1000, GIB), 1, GIB);
        let n = with_load(n, ResourceKind::Cpu, cpu.0, cpu.1);
        match mem {
            Some((m, s)) => with_load(n, ResourceKind::Memory, m, s),
            None => n,
        }
    }

    #[test]
    fn trimaran_formula() {
        // μ = 0.3 + 0.2 = 0.5, σ = 0.1 → risk 0.3 → 70.
        assert!((risk_score(0.3, 0.1, 0.2, 1.0, 1.0) - 70.0).abs() < 1e-9);
        // Sensitivity 2: σ' = √0.09 = 0.3 → risk (0.5 + 0.3)/2 = 0.4 → 60.
        assert!((risk_score(0.3, 0.09, 0.2, 1.0, 2.0) - 60.0).abs() < 1e-9);
        // Margin clamps σ' to 1.
        assert!((risk_score(0.0, 0.5, 0.0, 10.0, 1.0) - 50.0).abs() < 1e-9);
        // Over-full clamps μ to 1.
        assert!((risk_score(0.9, 0.0, 0.5, 1.0, 1.0) - 50.0).abs() < 1e-9);
    }

    #[test]
    fn node_score_is_min_of_cpu_and_memory() {
        let plugin = LoadVariationRiskBalancing::default();
        // Trimaran test "two resources": pod 0; cpu 30 % ± 10 % → 80, memory 50 % ± 20 % → 65.
        let snap = snapshot(vec![
            node("a", (0.3, 0.1), Some((0.5, 0.2))),
            node("b", (0.3, 0.1), None),
        ]);
        let s = score_all(&plugin, &snap, &pod(0, 0));
        assert_eq!(s[0], 65);
        // Memory without load falls back to requests (0 → 100): min(80, 100) = 80.
        assert_eq!(s[1], 80);
        // A pod of 200m on a 1000m node: cpu μ = 0.5 → risk 0.3 → 70.
        let s = score_all(&plugin, &snap, &pod(200, 0));
        assert_eq!(s[1], 70);
    }

    #[test]
    fn extended_resources_only_when_enabled() {
        let n = with_load(
            node("a", (0.1, 0.0), Some((0.1, 0.0))),
            ResourceKind::Network,
            0.8,
            0.1,
        );
        let snap = snapshot(vec![n]);
        assert_eq!(
            score_all(&LoadVariationRiskBalancing::default(), &snap, &pod(0, 0)),
            vec![95]
        );
        let ext = LoadVariationRiskBalancing::from_args(
            &serde_norway::from_str("{extendedResources: true}").expect("yaml"),
        )
        .expect("valid");
        assert_eq!(score_all(&ext, &snap, &pod(0, 0)), vec![55]);
        assert!(
            LoadVariationRiskBalancing::from_args(
                &serde_norway::from_str("{safeVarianceMargin: -1}").expect("yaml")
            )
            .is_err()
        );
    }

    proptest! {
        #[test]
        fn in_range_nan_free_and_decreasing_in_load(
            mean in -1.0f64..2.0, extra in 0.0f64..1.0, sd in -1.0f64..2.0,
            req in -1.0f64..2.0, margin in 0.0f64..5.0, sens in 0.0f64..5.0
        ) {
            let a = risk_score(mean, sd, req, margin, sens);
            let b = risk_score(mean + extra, sd, req, margin, sens);
            prop_assert!(a.is_finite() && (0.0..=100.0).contains(&a));
            prop_assert!(b <= a + 1e-9);
        }
    }
}
