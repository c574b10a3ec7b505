//! `LoadAwareScheduling`: Koordinator's load-aware filter and score
//! (`pkg/scheduler/plugins/loadaware/load_aware.go` and `estimator/default_estimator.go` of
//! koordinator-sh/koordinator), re-implemented from its semantics so that the simulator can
//! compare Loadstar's profiles with the peer most users would pick.
//!
//! **Estimated used** of a node, per resource = the node's usage + the estimate of every pod
//! assigned to it that its usage does not show yet + the estimate of the incoming pod.
//! - *Node usage*: Koordinator reads the `NodeMetric` koordlet reports (by default the average
//!   over its 60 s report interval); Loadstar reads the agent's window of `usageWindowSeconds`
//!   (default 60) — the mean ratio times the machine's capacity (cores × 1000 m, bytes).
//! - *Assigned, not yet measured*: Koordinator keeps a cache of pods it assigned and counts
//!   each until a `NodeMetric` newer than the assignment carries it; Loadstar's equivalent is
//!   the node's in-flight list: entries its agent has not measured yet. Each is estimated
//!   from the pod's requests on the node (the snapshot keeps requests, not limits, of placed
//!   pods, so their estimate is `requests × factor`).
//! - *Pod estimate* (`DefaultEstimator`): `max(request, limit) × estimatedScalingFactors%`
//!   (default CPU 85, memory 70), rounded, capped at the limit; a pod with neither request nor
//!   limit counts 250 m CPU and 200 MiB memory.
//!
//! **Filter**: for every resource with a non-zero `usageThresholds` entry (default CPU 65,
//! memory 95), `round(estimated used / allocatable × 100)` must be ≤ the threshold, else
//! `node(s) <resource> usage exceed threshold` (Koordinator's words). DaemonSet pods and nodes
//! without fresh load pass (Koordinator: no or expired `NodeMetric` → load-aware scheduling
//! is an optimisation and steps aside).
//!
//! **Score**: `Σ_r weight_r · leastUsed_r / Σ_r weight_r` with `resourceWeights` (default CPU 1,
//! memory 1) and `leastUsed = (allocatable − used) · 100 / allocatable` (0 when used exceeds
//! allocatable), integer arithmetic as Koordinator's. Nodes without fresh load score 0.
//!
//! Not modelled: the prod-usage and aggregated-usage variants (`scoreAccordingProdUsage`,
//! `aggregated`), per-node custom thresholds from annotations, and batch resources.
use serde::{Deserialize, Serialize};

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{NodeView, PodInfo};
use loadstar_framework::{CycleContext, FilterPlugin, MAX_NODE_SCORE, Reason, ScorePlugin};

use loadstar_parity::args::{PluginError, args_to_yaml, parse_args};

/// Plugin name (Koordinator's).
pub const NAME: &str = "LoadAwareScheduling";
/// CPU counted for a pod without CPU request or limit, millicores (Koordinator's).
pub const DEFAULT_MILLI_CPU_REQUEST: i64 = 250;
/// Memory counted for a pod without memory request or limit, bytes (Koordinator's).
pub const DEFAULT_MEMORY_REQUEST: i64 = 200 * 1024 * 1024;

/// A value per resource Koordinator's defaults name (CPU and memory).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PerResource {
    /// CPU.
    #[serde(default)]
    pub cpu: i64,
    /// Memory.
    #[serde(default)]
    pub memory: i64,
}

/// Arguments (Koordinator's `LoadAwareSchedulingArgs`, the parts modelled).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct LoadAwareArgs {
    /// Filter thresholds, percent of allocatable; 0 disables a resource (default CPU 65,
    /// memory 95).
    pub usage_thresholds: PerResource,
    /// Score weights (default 1 and 1).
    pub resource_weights: PerResource,
    /// Share of a pod's `max(request, limit)` it is expected to use, percent (default CPU 85,
    /// memory 70).
    pub estimated_scaling_factors: PerResource,
    /// The agent window read as the node's usage, seconds (default 60: koordlet's report
    /// interval).
    pub usage_window_seconds: u32,
}

impl Default for LoadAwareArgs {
    fn default() -> Self {
        LoadAwareArgs {
            usage_thresholds: PerResource {
                cpu: 65,
                memory: 95,
            },
            resource_weights: PerResource { cpu: 1, memory: 1 },
            estimated_scaling_factors: PerResource {
                cpu: 85,
                memory: 70,
            },
            usage_window_seconds: 60,
        }
    }
}

/// Koordinator's `DefaultEstimator` for one resource: `max(request, limit) × factor %`,
/// rounded half away from zero, capped at the limit; `default` when both are 0.
pub fn estimate(request: i64, limit: i64, factor: i64, default: i64) -> i64 {
    let quantity = request.max(limit);
    if quantity == 0 {
        return default;
    }
    let estimated = (quantity as f64 * factor as f64 / 100.0).round() as i64;
    if limit > 0 && estimated > limit {
        limit
    } else {
        estimated
    }
}

/// Koordinator's `leastUsedScore`.
pub fn least_used_score(used: i64, capacity: i64) -> i64 {
    if capacity <= 0 || used > capacity {
        return 0;
    }
    (capacity - used.max(0)) * MAX_NODE_SCORE / capacity
}

/// The load-aware filter and score.
#[derive(Debug, Clone, Default)]
pub struct LoadAwareScheduling {
    args: LoadAwareArgs,
}

/// (CPU millicores, memory bytes).
type Pair = (i64, i64);

impl LoadAwareScheduling {
    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: LoadAwareArgs = parse_args(NAME, args)?;
        let check = |field: &str, v: i64, max: i64| {
            if (0..=max).contains(&v) {
                Ok(())
            } else {
                Err(PluginError::invalid(
                    NAME,
                    field,
                    format!("must be between 0 and {max}, got {v}"),
                ))
            }
        };
        check("usageThresholds.cpu", args.usage_thresholds.cpu, 100)?;
        check("usageThresholds.memory", args.usage_thresholds.memory, 100)?;
        check("resourceWeights.cpu", args.resource_weights.cpu, 100)?;
        check("resourceWeights.memory", args.resource_weights.memory, 100)?;
        check(
            "estimatedScalingFactors.cpu",
            args.estimated_scaling_factors.cpu,
            100,
        )?;
        check(
            "estimatedScalingFactors.memory",
            args.estimated_scaling_factors.memory,
            100,
        )?;
        if args.resource_weights.cpu + args.resource_weights.memory == 0 {
            return Err(PluginError::invalid(
                NAME,
                "resourceWeights",
                "at least one weight must be positive".to_string(),
            ));
        }
        if args.usage_window_seconds == 0 {
            return Err(PluginError::invalid(
                NAME,
                "usageWindowSeconds",
                "must be positive".to_string(),
            ));
        }
        Ok(LoadAwareScheduling { args })
    }

    fn estimate_pod(&self, pod: &PodInfo) -> Pair {
        let f = self.args.estimated_scaling_factors;
        (
            estimate(
                pod.requests.cpu_millis,
                pod.limits.cpu_millis,
                f.cpu,
                DEFAULT_MILLI_CPU_REQUEST,
            ),
            estimate(
                pod.requests.memory_bytes,
                pod.limits.memory_bytes,
                f.memory,
                DEFAULT_MEMORY_REQUEST,
            ),
        )
    }

    /// The node's estimated used (without the incoming pod), or `None` when it has no
    /// fresh load (no agent, stale, or no such window yet).
    fn node_used(&self, node: &NodeView) -> Option<Pair> {
        if node.stale {
            return None;
        }
        let agent = node.agent.as_deref()?;
        let window = |kind| -> Option<f64> {
            let w = agent
                .load
                .get(kind)?
                .window(self.args.usage_window_seconds)?;
            (w.count > 0).then_some(w.mean.clamp(0.0, 1.0))
        };
        let cpu_capacity = i64::from(agent.capacity.logical_cpus) * 1000;
        let memory_capacity = i64::try_from(agent.capacity.memory_bytes).unwrap_or(i64::MAX);
        let mut cpu = (window(ResourceKind::Cpu)? * cpu_capacity as f64).round() as i64;
        let mut memory = window(ResourceKind::Memory)
            .map(|r| (r * memory_capacity as f64).round() as i64)
            .unwrap_or(0);
        // Pods assigned here that the agent has not measured yet, by their requests.
        let f = self.args.estimated_scaling_factors;
        for i in node
            .alloc
            .inflight
            .iter()
            .filter(|i| i.measured_since.is_none())
        {
            if let Some(p) = node.alloc.pods.iter().find(|p| p.uid == i.uid) {
                cpu += estimate(p.requests.cpu_millis, 0, f.cpu, DEFAULT_MILLI_CPU_REQUEST);
                memory += estimate(p.requests.memory_bytes, 0, f.memory, DEFAULT_MEMORY_REQUEST);
            }
        }
        Some((cpu, memory))
    }

    fn allocatable(node: &NodeView) -> Pair {
        let a = node.allocatable();
        (a.cpu_millis, a.memory_bytes)
    }
}

fn is_daemonset(pod: &PodInfo) -> bool {
    pod.owner.as_ref().is_some_and(|o| o.kind == "DaemonSet")
}

impl FilterPlugin for LoadAwareScheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        if is_daemonset(pod) {
            return Ok(());
        }
        let Some((cpu, memory)) = self.node_used(node) else {
            return Ok(());
        };
        let (pod_cpu, pod_memory) = self.estimate_pod(pod);
        let (alloc_cpu, alloc_memory) = Self::allocatable(node);
        let t = self.args.usage_thresholds;
        for (name, threshold, used, total) in [
            ("cpu", t.cpu, cpu + pod_cpu, alloc_cpu),
            ("memory", t.memory, memory + pod_memory, alloc_memory),
        ] {
            if threshold == 0 || total <= 0 {
                continue;
            }
            let usage = (used as f64 / total as f64 * 100.0).round() as i64;
            if usage > threshold {
                return Err(format!("node(s) {name} usage exceed threshold").into());
            }
        }
        Ok(())
    }
}

impl ScorePlugin for LoadAwareScheduling {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, _: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let (pod_cpu, pod_memory) = self.estimate_pod(pod);
        let w = self.args.resource_weights;
        for (o, n) in out.iter_mut().zip(nodes) {
            *o = match self.node_used(n) {
                None => 0,
                Some((cpu, memory)) => {
                    let (alloc_cpu, alloc_memory) = Self::allocatable(n);
                    let s = least_used_score(cpu + pod_cpu, alloc_cpu) * w.cpu
                        + least_used_score(memory + pod_memory, alloc_memory) * w.memory;
                    s / (w.cpu + w.memory)
                }
            };
        }
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{Inflight, Owner, PodOnNode};
    use loadstar_testkit::snapshot::*;

    /// Koordinator's test node: 96 cores and 512 GiB allocatable (and capacity).
    fn node(cpu_cores_used: f64, memory_gib_used: f64) -> NodeView {
        let n = with_capacity(kube_node("n", 96_000, 512 * GIB), 96, 512 * GIB);
        let n = with_load(n, ResourceKind::Cpu, cpu_cores_used / 96.0, 0.0);
        with_load(n, ResourceKind::Memory, memory_gib_used / 512.0, 0.0)
    }

    fn pod(cpu_millis: i64, memory: i64, cpu_limit: i64, memory_limit: i64) -> PodInfo {
        let mut p = loadstar_testkit::snapshot::pod(cpu_millis, memory);
        p.limits.cpu_millis = cpu_limit;
        p.limits.memory_bytes = memory_limit;
        p
    }

    fn plugin() -> LoadAwareScheduling {
        LoadAwareScheduling::from_args(&serde_norway::Value::Null).expect("defaults are valid")
    }

    fn score(n: NodeView, p: &PodInfo) -> i64 {
        let snap = snapshot(vec![n]);
        score_all(&plugin(), &snap, p)[0]
    }

    fn filter(n: NodeView, p: &PodInfo) -> Result<(), Reason> {
        let snap = snapshot(vec![n]);
        plugin().filter(&ctx(&snap), p, &snap.nodes()[0])
    }

    #[test]
    fn the_estimator_scales_the_larger_of_request_and_limit_capped_at_the_limit() {
        assert_eq!(estimate(16_000, 16_000, 85, 250), 13_600);
        assert_eq!(
            estimate(8_000, 16_000, 85, 250),
            13_600,
            "limit above request"
        );
        assert_eq!(estimate(0, 0, 85, 250), 250, "nothing declared");
        assert_eq!(estimate(1_000, 0, 85, 250), 850);
        assert_eq!(
            estimate(10, 0, 85, 250),
            9,
            "rounded half away from zero (8.5)"
        );
    }

    /// Koordinator's `TestScore` cases on its 96-core / 512 GiB node with a 16-core / 32 GiB
    /// pod (requests = limits): empty node 90, loaded node (32 cores, 10 GiB used) 72, the
    /// same with one such pod just assigned 63; a pod declaring nothing on an empty node 99.
    #[test]
    fn koordinators_score_cases() {
        let big = pod(16_000, 32 * GIB, 16_000, 32 * GIB);
        assert_eq!(score(node(0.0, 0.0), &big), 90);
        assert_eq!(score(node(32.0, 10.0), &big), 72);
        let assigned = with_pod(
            node(32.0, 10.0),
            PodOnNode {
                uid: "assigned".into(),
                requests: big.requests.clone(),
                ..PodOnNode::default()
            },
        );
        let assigned = edit_alloc(assigned, |a| {
            a.inflight.push(Inflight::new(
                "assigned".into(),
                13_600,
                22 * GIB,
                std::time::Instant::now(),
            ));
        });
        assert_eq!(score(assigned.clone(), &big), 63);
        // Once the agent measures it, it counts through the node's usage only.
        let measured = edit_alloc(assigned, |a| {
            a.inflight[0].measured_since = Some(std::time::Instant::now());
        });
        assert_eq!(score(measured, &big), 72);
        assert_eq!(score(node(0.0, 0.0), &pod(0, 0, 0, 0)), 99);
    }

    #[test]
    fn nodes_without_fresh_load_score_zero_and_pass_the_filter() {
        let big = pod(16_000, 32 * GIB, 16_000, 32 * GIB);
        let bare = kube_node("n", 96_000, 512 * GIB);
        assert_eq!(score(bare.clone(), &big), 0);
        assert_eq!(filter(bare, &big), Ok(()));
        let mut stale = node(90.0, 500.0);
        stale.stale = true;
        assert_eq!(score(stale.clone(), &big), 0);
        assert_eq!(filter(stale, &big), Ok(()));
    }

    /// Koordinator's `TestFilterUsage` cases (an empty pod, 96 cores / 512 GiB): 60 cores used
    /// passes (62.8 % with the pod's 250 m ≤ 65), 70 cores fails on CPU, 500 GiB fails on
    /// memory (97.7 % > 95); a threshold of 0 disables the check.
    #[test]
    fn koordinators_filter_cases() {
        let empty = pod(0, 0, 0, 0);
        assert_eq!(filter(node(60.0, 256.0), &empty), Ok(()));
        assert_eq!(
            filter(node(70.0, 256.0), &empty),
            Err("node(s) cpu usage exceed threshold".into())
        );
        assert_eq!(
            filter(node(30.0, 500.0), &empty),
            Err("node(s) memory usage exceed threshold".into())
        );
        let no_memory = LoadAwareScheduling::from_args(
            &serde_norway::from_str("{usageThresholds: {cpu: 65, memory: 0}}").expect("yaml"),
        )
        .expect("valid");
        let snap = snapshot(vec![node(30.0, 500.0)]);
        assert_eq!(
            no_memory.filter(&ctx(&snap), &empty, &snap.nodes()[0]),
            Ok(())
        );
        // The incoming pod's own estimate counts: 55 cores used + 13.6 estimated = 71.5 %.
        let big = pod(16_000, 32 * GIB, 16_000, 32 * GIB);
        assert!(filter(node(55.0, 10.0), &big).is_err());
        // DaemonSet pods are never filtered.
        let mut ds = big.clone();
        ds.owner = Some(Owner {
            kind: "DaemonSet".into(),
            name: "agent".into(),
        });
        assert_eq!(filter(node(95.0, 10.0), &ds), Ok(()));
    }

    #[test]
    fn weights_shape_the_score_and_bad_args_are_refused() {
        let cpu_only = LoadAwareScheduling::from_args(
            &serde_norway::from_str("{resourceWeights: {cpu: 1, memory: 0}}").expect("yaml"),
        )
        .expect("valid");
        let snap = snapshot(vec![node(48.0, 500.0)]);
        // CPU alone: (96000 − 48000 − 250) · 100 / 96000 = 49.7 → 49.
        assert_eq!(score_all(&cpu_only, &snap, &pod(0, 0, 0, 0)), vec![49]);
        for bad in [
            "{usageThresholds: {cpu: 101}}",
            "{resourceWeights: {cpu: 0, memory: 0}}",
            "{estimatedScalingFactors: {memory: -1}}",
            "{usageWindowSeconds: 0}",
            "{unknown: 1}",
        ] {
            assert!(
                LoadAwareScheduling::from_args(&serde_norway::from_str(bad).expect("yaml"))
                    .is_err(),
                "{bad} accepted"
            );
        }
    }
}
