//! `TargetLoadPacking` (Trimaran, `pkg/trimaran/targetloadpacking/targetloadpacking.go` of
//! kubernetes-sigs/scheduler-plugins): best-fit packing of measured CPU up to a target
//! utilisation X, then spreading among the hot nodes.
//!
//! U = 100 · (node CPU used + pod's predicted CPU) / node CPU capacity, with the node's
//! window mean (plus in-flight estimates, Loadstar's equivalent of Trimaran's
//! `ScheduledPodsCache`). Score, rounded half away from zero as Go's `math.Round`:
//! `(100 − X)·U/X + X` for U ≤ X; `X·(100 − U)/(100 − X)` for X < U ≤ 100; 0 above 100.
//!
//! The pod's predicted CPU is Trimaran's per-container `PredictUtilisation` (limit, else
//! request × `defaultRequestsMultiplier` rounded, else `defaultRequests` = 1000m), computed
//! from the pod's effective totals: `limits + round((requests − limits)⁺ × multiplier)`, and
//! `defaultRequests` per container without a CPU request (inferred from the non-zero request
//! total, 100m each) when it declares no CPU at all; a pod with no containers, or whose
//! containers all request 0, predicts 0. This equals Trimaran's sum for pods whose containers
//! all set limits, all set only requests, or set neither; for mixed pods it is exact when
//! limited containers request their limit (Kubernetes' default).
//!
//! Without load (no agent, or stale under `fallback`) Trimaran scores the minimum (0);
//! Loadstar instead falls back to requests: U from the node's CPU requests over allocatable
//! plus the prediction, so request-only nodes still rank sensibly.
use serde::{Deserialize, Serialize};

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{ColumnWords, DEFAULT_NONZERO_CPU_MILLIS, NodeView, PodInfo};
use loadstar_framework::{CycleContext, ScorePlugin};

use super::util;
use loadstar_parity::args::{PluginError, args_to_yaml, parse_args};

/// Plugin name.
pub const NAME: &str = "TargetLoadPacking";
/// Trimaran's default target utilisation, percent.
pub const DEFAULT_TARGET_UTILIZATION: i64 = 40;
/// Trimaran's default CPU prediction for a container without CPU figures, millicores.
pub const DEFAULT_REQUESTS_MILLIS: i64 = 1000;
/// Trimaran's default multiplier on requests without limits.
pub const DEFAULT_REQUESTS_MULTIPLIER: f64 = 1.5;

/// Arguments (Trimaran's `TargetLoadPackingArgs`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct TargetLoadPackingArgs {
    /// Target CPU utilisation X, percent (1–99).
    pub target_utilization: i64,
    /// CPU predicted for a container without CPU request or limit (YAML: quantity `1000m`).
    #[serde(rename = "defaultRequests", with = "util::cpu_millis")]
    pub default_requests_millis: i64,
    /// Multiplier on a request without limit.
    pub default_requests_multiplier: f64,
}

impl Default for TargetLoadPackingArgs {
    fn default() -> Self {
        TargetLoadPackingArgs {
            target_utilization: DEFAULT_TARGET_UTILIZATION,
            default_requests_millis: DEFAULT_REQUESTS_MILLIS,
            default_requests_multiplier: DEFAULT_REQUESTS_MULTIPLIER,
        }
    }
}

/// The pod's predicted CPU, millicores (see the module docs).
pub fn predict_cpu_millis(pod: &PodInfo, multiplier: f64, default_millis: i64) -> i64 {
    let limits = pod.limits.cpu_millis;
    let requests = pod.requests.cpu_millis;
    if limits == 0 && requests == 0 {
        let containers = pod.nonzero_cpu_millis / DEFAULT_NONZERO_CPU_MILLIS;
        return default_millis.saturating_mul(containers);
    }
    let unlimited = (requests - limits).max(0);
    limits.saturating_add((unlimited as f64 * multiplier).round() as i64)
}

/// Trimaran's score for predicted utilisation `u` (percent) and target `x` (percent).
pub fn target_score(u: f64, x: i64) -> i64 {
    let x = x as f64;
    let u = util::finite_or_zero(u).max(0.0);
    if u > x {
        if u > 100.0 {
            return 0;
        }
        return util::round_half_away(x * (100.0 - u) / (100.0 - x));
    }
    util::round_half_away((100.0 - x) * u / x + x)
}

/// The target-load-packing score.
#[derive(Debug, Clone, Default)]
pub struct TargetLoadPacking {
    args: TargetLoadPackingArgs,
}

impl TargetLoadPacking {
    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: TargetLoadPackingArgs = parse_args(NAME, args)?;
        if !(1..=99).contains(&args.target_utilization) {
            return Err(PluginError::invalid(
                NAME,
                "targetUtilization",
                format!("must be between 1 and 99, got {}", args.target_utilization),
            ));
        }
        let m = args.default_requests_multiplier;
        if !(m.is_finite() && (0.0..=100.0).contains(&m)) {
            return Err(PluginError::invalid(
                NAME,
                "defaultRequestsMultiplier",
                format!("must be a number between 0 and 100, got {m}"),
            ));
        }
        Ok(TargetLoadPacking { args })
    }

    /// Predicted utilisation (percent) of `node` with `pod_millis` more CPU.
    fn predicted(ctx: &CycleContext<'_>, node: &NodeView, pod_millis: f64) -> f64 {
        let d = ctx.digest(node);
        match ctx.usage_of(node, &d, ResourceKind::Cpu) {
            Some(u) => {
                let cap = util::capacity(&d, ResourceKind::Cpu);
                if cap > 0.0 {
                    100.0 * (u.mean * cap + pod_millis) / cap
                } else {
                    0.0
                }
            }
            None => {
                let alloc = d.allocatable_cpu_millis as f64;
                if alloc > 0.0 {
                    100.0 * (d.requested_cpu_millis as f64 + pod_millis) / alloc
                } else {
                    0.0
                }
            }
        }
    }
}

impl ScorePlugin for TargetLoadPacking {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let pod_millis = predict_cpu_millis(
            pod,
            self.args.default_requests_multiplier,
            self.args.default_requests_millis,
        ) as f64;
        for (o, n) in out.iter_mut().zip(nodes) {
            let u = Self::predicted(ctx, n, pod_millis);
            *o = target_score(u, self.args.target_utilization);
        }
    }

    /// A node's score is a function of its row, the target and the pod's predicted CPU
    /// (which covers the other two arguments and all the score reads of the pod).
    fn column_key(&self, _ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<ColumnWords> {
        let pod_millis = predict_cpu_millis(
            pod,
            self.args.default_requests_multiplier,
            self.args.default_requests_millis,
        );
        let mut words = ColumnWords::default();
        words[0] = pod_millis as u64;
        words[1] = self.args.target_utilization as u64;
        Some(words)
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::PodInfo;
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    fn loaded(name: &str, cores_used: f64) -> NodeView {
        let n = with_capacity(kube_node(name, 4000, 16 * GIB), 4, 16 * GIB);
        with_load(n, ResourceKind::Cpu, cores_used / 4.0, 0.0)
    }

    fn zero_cpu_pod() -> PodInfo {
        // No containers: Trimaran predicts 0.
        PodInfo::default()
    }

    /// Issue 4's example: 4-core nodes at 1/2/3 cores used, zero-CPU pod, X = 50.
    #[test]
    fn worked_example_75_100_25() {
        let plugin = TargetLoadPacking::from_args(
            &serde_norway::from_str("{targetUtilization: 50}").expect("yaml"),
        )
        .expect("valid");
        let snap = snapshot(vec![loaded("a", 1.0), loaded("b", 2.0), loaded("c", 3.0)]);
        assert_eq!(
            score_all(&plugin, &snap, &zero_cpu_pod()),
            vec![75, 100, 25]
        );
    }

    #[test]
    fn trimaran_test_cases() {
        // targetloadpacking_test.go, 1000m nodes, X = 40: idle → 40; at 50 % → 33; a pod of
        // 1000m (limit) on a node at 30 % → over 100 % → 0.
        let node = |name: &str, ratio: f64| {
            with_load(
                with_capacity(kube_node(name, 1000, GIB), 1, GIB),
                ResourceKind::Cpu,
                ratio,
                0.0,
            )
        };
        let plugin = TargetLoadPacking::default();
        let snap = snapshot(vec![node("a", 0.0), node("b", 0.5), node("c", 0.3)]);
        let s = score_all(&plugin, &snap, &zero_cpu_pod());
        assert_eq!(&s[..2], &[40, 33]);
        let mut big = pod(1000, 0);
        big.limits.cpu_millis = 1000;
        assert_eq!(score_all(&plugin, &snap, &big)[2], 0);
    }

    #[test]
    fn prediction_follows_trimaran() {
        let mut p = pod(0, 0);
        p.nonzero_cpu_millis = 200; // two containers without CPU figures
        assert_eq!(predict_cpu_millis(&p, 1.5, 1000), 2000);
        let mut p = pod(300, 0);
        assert_eq!(predict_cpu_millis(&p, 1.5, 1000), 450);
        p.limits.cpu_millis = 500; // limited container (request 100 defaulted? here 300 total)
        assert_eq!(predict_cpu_millis(&p, 1.5, 1000), 500);
        // Mixed: one container limited at 500 (request 500), one requesting 200 only.
        let mut p = pod(700, 0);
        p.limits.cpu_millis = 500;
        assert_eq!(predict_cpu_millis(&p, 1.5, 1000), 800);
        assert_eq!(predict_cpu_millis(&PodInfo::default(), 1.5, 1000), 0);
    }

    #[test]
    fn falls_back_to_requests_without_load() {
        let plugin = TargetLoadPacking::default();
        // 4 cores, 1 core requested, pod predicted 0 → U = 25 → (60·25/40 + 40) = 77.5 → 78.
        let snap = snapshot(vec![with_requested(kube_node("a", 4000, GIB), 1000, 0)]);
        assert_eq!(score_all(&plugin, &snap, &zero_cpu_pod()), vec![78]);
        let snap = snapshot(vec![kube_node("z", 0, 0)]);
        assert_eq!(score_all(&plugin, &snap, &zero_cpu_pod()), vec![40]);
    }

    proptest! {
        #[test]
        fn scores_in_range_and_peak_at_target(u in -10.0f64..200.0, x in 1i64..100) {
            let s = target_score(u, x);
            prop_assert!((0..=100).contains(&s));
            prop_assert!(s <= target_score(x as f64, x));
        }

        #[test]
        fn decreasing_above_target(u in 0.0f64..100.0, d in 0.0f64..50.0, x in 1i64..100) {
            let a = u.max(x as f64);
            prop_assert!(target_score(a + d, x) <= target_score(a, x));
        }
    }
}
