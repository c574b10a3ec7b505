//! `UsageThreshold` filter: reject nodes whose estimated utilisation after placing the pod
//! exceeds a per-resource threshold (defaults CPU 80 %, memory 90 %; network, disk IO, GPU and
//! GPU memory optional). The filter side of real-load scheduling: scores rank, this one
//! keeps pods off nodes that are already hot whatever their requests say (Koordinator's
//! `LoadAwareScheduling` filter and Trimaran's hot-node handling follow the same idea).
//!
//! Estimated utilisation = the window's `statistic` (default mean, which already includes
//! in-flight estimates of recently placed pods) + the pod's own estimate over the node's
//! capacity: for CPU and memory the in-flight estimator ([`super::inflight::estimate`], with
//! `podEstimate` args defaulting to the global in-flight defaults), for GPUs its GPU count
//! over the node's GPUs, for network and disk IO nothing. A node passes when, for every
//! configured resource, that is ≤ the threshold. Reason: `node(s) above <resource> usage
//! threshold` (several joined with `, `).
//!
//! Nodes without load for a resource (no agent, or stale under `fallback`) pass for that
//! resource: requests are `NodeResourcesFit`'s job, and this filter must not reject a node
//! it knows nothing about.
use serde::{Deserialize, Serialize};

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{NodeView, PodInfo};
use loadstar_framework::{CycleContext, FilterPlugin, PreFilterState, REASON_SEPARATOR, Reason};

use super::inflight::{InflightArgs, estimate};
use super::util::{self, Statistic};
use crate::args::{PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "UsageThreshold";

/// Thresholds in percent of capacity; absent = not checked.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct Thresholds {
    /// CPU, percent (default 80).
    pub cpu: Option<f64>,
    /// Memory, percent (default 90).
    pub memory: Option<f64>,
    /// Network, percent.
    pub network: Option<f64>,
    /// Disk IO (busy time), percent.
    pub disk_io: Option<f64>,
    /// GPU compute, percent.
    pub gpu: Option<f64>,
    /// GPU memory, percent.
    pub gpu_memory: Option<f64>,
}

impl Default for Thresholds {
    fn default() -> Self {
        Thresholds {
            cpu: Some(80.0),
            memory: Some(90.0),
            network: None,
            disk_io: None,
            gpu: None,
            gpu_memory: None,
        }
    }
}

impl Thresholds {
    fn entries(&self) -> [(&'static str, ResourceKind, Option<f64>); 6] {
        [
            ("cpu", ResourceKind::Cpu, self.cpu),
            ("memory", ResourceKind::Memory, self.memory),
            ("network", ResourceKind::Network, self.network),
            ("diskIo", ResourceKind::DiskIo, self.disk_io),
            ("gpu", ResourceKind::Gpu, self.gpu),
            ("gpuMemory", ResourceKind::GpuMemory, self.gpu_memory),
        ]
    }
}

/// Arguments.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct UsageThresholdArgs {
    /// Per-resource thresholds, percent.
    pub thresholds: Thresholds,
    /// Window statistic compared.
    pub statistic: Statistic,
    /// How the pod's own CPU/memory is estimated.
    pub pod_estimate: InflightArgs,
}

/// The usage-threshold filter.
#[derive(Debug, Clone)]
pub struct UsageThreshold {
    args: UsageThresholdArgs,
    /// (kind, threshold ratio, reason), only the configured ones.
    checks: Vec<(ResourceKind, f64, &'static str)>,
}

/// `node(s) above <kind> usage threshold`, spelled out once per kind: a hot cluster rejects
/// thousands of nodes per pod, and a borrowed reason costs no allocation per node.
fn above_threshold(kind: ResourceKind) -> &'static str {
    match kind {
        ResourceKind::Cpu => "node(s) above cpu usage threshold",
        ResourceKind::Memory => "node(s) above memory usage threshold",
        ResourceKind::Network => "node(s) above network usage threshold",
        ResourceKind::DiskIo => "node(s) above disk_io usage threshold",
        ResourceKind::Gpu => "node(s) above gpu usage threshold",
        ResourceKind::GpuMemory => "node(s) above gpu_memory usage threshold",
    }
}

impl Default for UsageThreshold {
    fn default() -> Self {
        UsageThreshold::new(UsageThresholdArgs::default())
    }
}

impl UsageThreshold {
    fn new(args: UsageThresholdArgs) -> Self {
        let checks = args
            .thresholds
            .entries()
            .into_iter()
            .filter_map(|(_, kind, t)| t.map(|t| (kind, t / 100.0, above_threshold(kind))))
            .collect();
        UsageThreshold { args, checks }
    }

    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: UsageThresholdArgs = parse_args(NAME, args)?;
        for (path, _, t) in args.thresholds.entries() {
            if let Some(t) = t
                && !(t.is_finite() && t > 0.0 && t <= 100.0)
            {
                return Err(PluginError::invalid(
                    NAME,
                    format!("thresholds.{path}"),
                    format!("must be a percentage in (0, 100], got {t}"),
                ));
            }
        }
        args.pod_estimate
            .validate()
            .map_err(|(p, m)| PluginError::invalid(NAME, format!("podEstimate.{p}"), m))?;
        Ok(UsageThreshold::new(args))
    }
}

impl FilterPlugin for UsageThreshold {
    fn name(&self) -> &'static str {
        NAME
    }

    /// The pod's own estimate, once per pod rather than once per node.
    fn prefilter(&self, _ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<PreFilterState> {
        Some(Box::new(PodEstimate::of(pod, &self.args)))
    }

    /// Nothing configured: every node passes.
    fn skips(&self, _state: Option<&PreFilterState>, _pod: &PodInfo) -> bool {
        self.checks.is_empty()
    }

    fn filter_prepared(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        node: &NodeView,
    ) -> Result<(), Reason> {
        match state.and_then(|s| s.downcast_ref::<PodEstimate>()) {
            Some(e) => self.check(ctx, e, node),
            None => self.filter(ctx, pod, node),
        }
    }

    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        self.check(ctx, &PodEstimate::of(pod, &self.args), node)
    }
}

/// What the pod adds: its CPU and memory estimate and its GPU count.
#[derive(Debug, Clone, Copy)]
struct PodEstimate {
    cpu_millis: f64,
    memory_bytes: f64,
    gpus: f64,
}

impl PodEstimate {
    fn of(pod: &PodInfo, args: &UsageThresholdArgs) -> Self {
        let (cpu, mem) = estimate(pod, &args.pod_estimate);
        PodEstimate {
            cpu_millis: cpu as f64,
            memory_bytes: mem as f64,
            gpus: util::pod_gpus(pod) as f64,
        }
    }
}

impl UsageThreshold {
    fn check(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodEstimate,
        node: &NodeView,
    ) -> Result<(), Reason> {
        let mut failed: Option<Reason> = None;
        let d = ctx.digest(node);
        for (kind, limit, reason) in &self.checks {
            let Some(u) = ctx.usage_of(node, &d, *kind) else {
                continue;
            };
            let current = self.args.statistic.of(&u);
            let amount = match kind {
                ResourceKind::Cpu => pod.cpu_millis,
                ResourceKind::Memory => pod.memory_bytes,
                ResourceKind::Gpu | ResourceKind::GpuMemory => pod.gpus,
                ResourceKind::Network | ResourceKind::DiskIo => 0.0,
            };
            let cap = util::capacity(&d, *kind);
            let add = if cap > 0.0 { amount / cap } else { 0.0 };
            if current + add > *limit {
                match &mut failed {
                    Some(s) => {
                        let s = s.to_mut();
                        s.push_str(REASON_SEPARATOR);
                        s.push_str(reason);
                    }
                    None => failed = Some(Reason::Borrowed(reason)),
                }
            }
        }
        match failed {
            Some(r) => Err(r),
            None => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    fn node(cpu: f64, mem: f64) -> NodeView {
        let n = with_capacity(kube_node("n", 4000, 16 * GIB), 4, 16 * GIB);
        with_load(
            with_load(n, ResourceKind::Cpu, cpu, 0.0),
            ResourceKind::Memory,
            mem,
            0.0,
        )
    }

    #[test]
    fn reasons_name_their_resource() {
        for kind in ResourceKind::ALL {
            assert_eq!(
                above_threshold(kind),
                format!("node(s) above {} usage threshold", kind.name())
            );
        }
    }

    #[test]
    fn defaults_reject_hot_nodes_after_placement() {
        let f = UsageThreshold::default();
        // 70 % + 400m/4000m = 80 % → passes (not above).
        assert_eq!(filter_one(&f, node(0.70, 0.5), &pod(400, GIB)), Ok(()));
        assert_eq!(
            filter_one(&f, node(0.71, 0.5), &pod(400, GIB)),
            Err("node(s) above cpu usage threshold".into())
        );
        assert_eq!(
            filter_one(&f, node(0.9, 0.95), &pod(100, MIB)),
            Err("node(s) above cpu usage threshold, node(s) above memory usage threshold".into())
        );
        // Pods without requests are estimated at 250m: 75 % + 6.25 % > 80 %.
        assert!(filter_one(&f, node(0.75, 0.5), &pod(0, 0)).is_err());
        // No load: passes.
        assert_eq!(filter_one(&f, kube_node("k", 1, 1), &pod(400, GIB)), Ok(()));
    }

    #[test]
    fn configurable_resources_and_errors() {
        let f = UsageThreshold::from_args(
            &serde_norway::from_str("{thresholds: {cpu: null, memory: null, network: 50}}")
                .expect("yaml"),
        )
        .expect("valid");
        let hot_net = with_load(node(0.99, 0.99), ResourceKind::Network, 0.6, 0.0);
        assert_eq!(
            filter_one(&f, hot_net, &pod(1, 1)),
            Err("node(s) above network usage threshold".into())
        );
        let err = UsageThreshold::from_args(
            &serde_norway::from_str("{thresholds: {cpu: 180}}").expect("yaml"),
        )
        .expect_err("range");
        assert!(
            matches!(err, PluginError::InvalidArgs { ref path, .. } if path == "thresholds.cpu")
        );
        let err = UsageThreshold::from_args(
            &serde_norway::from_str("{thresholds: {disk: 50}}").expect("yaml"),
        )
        .expect_err("unknown");
        assert!(
            matches!(err, PluginError::InvalidArgs { ref path, .. } if path == "thresholds.disk"),
            "{err:?}"
        );
    }

    proptest! {
        #[test]
        fn monotonic_in_load(cpu in 0.0f64..1.2, extra in 0.0f64..0.5, req in 0i64..4000) {
            let f = UsageThreshold::default();
            let low = filter_one(&f, node(cpu, 0.1), &pod(req, MIB)).is_ok();
            let high = filter_one(&f, node(cpu + extra, 0.1), &pod(req, MIB)).is_ok();
            prop_assert!(high <= low, "a hotter node passed where a cooler one failed");
        }
    }
}
