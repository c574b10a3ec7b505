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
//! threshold` (several joined with `, `). The comparison is multiplied out — the pod's amount
//! against the node's headroom, (threshold − utilisation) × capacity — so the headrooms are
//! computed once per digest table and a pod costs one comparison per node and resource.
//!
//! Nodes without load for a resource (no agent, or stale under `fallback`) pass for that
//! resource: requests are `NodeResourcesFit`'s job, and this filter must not reject a node
//! it knows nothing about.
use serde::{Deserialize, Serialize};

use loadstar_common::model::ResourceKind;
use loadstar_framework::snapshot::{
    ClusterSnapshot, ColumnWords, Memo, NodeDigest, NodeView, PodInfo,
};
use loadstar_framework::{
    CycleContext, FilterPlugin, FilteredNode, PreFilterState, REASON_SEPARATOR, Reason,
    StalePolicy, retain_passing,
};

use super::inflight::{InflightArgs, estimate};
use super::util::{self, Statistic};
use loadstar_parity::args::{PluginError, parse_args};

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

    /// The verdict is a function of the node's row, the statistic, the (up to three)
    /// configured resources and thresholds, and the pod's estimate.
    fn column_key(
        &self,
        _ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
    ) -> Option<ColumnWords> {
        if self.checks.len() > 3 {
            return None;
        }
        let estimate = PodEstimate::prepared(state, pod, &self.args);
        let mut words = ColumnWords::default();
        words[0] = self.args.statistic as u64 | (self.checks.len() as u64) << 8;
        for (k, (kind, limit, _)) in self.checks.iter().enumerate() {
            words[0] |= (*kind as u64 + 1) << (16 + 8 * k);
            words[1 + k] = limit.to_bits();
        }
        words[4] = estimate.cpu_millis.to_bits();
        words[5] = estimate.memory_bytes.to_bits();
        words[6] = estimate.gpus.to_bits();
        Some(words)
    }

    /// Over the table's columns when the cycle has them ([`UsageColumns`]): per node, one
    /// comparison per configured resource of the pod's amount with the node's headroom.
    fn filter_nodes(
        &self,
        ctx: &CycleContext<'_>,
        state: Option<&PreFilterState>,
        pod: &PodInfo,
        nodes: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        let estimate = PodEstimate::prepared(state, pod, &self.args);
        let columns = ctx
            .memo(self.columns_key(ctx), || self.columns(ctx))
            .filter(|c| c.built_by(self, ctx));
        let k = self.checks.len();
        let mut amounts = [0.0; 6];
        for (a, (kind, _, _)) in amounts.iter_mut().zip(&self.checks) {
            *a = estimate.amount(*kind);
        }
        retain_passing(NAME, nodes, filtered, |index| {
            match columns
                .as_deref()
                .and_then(|c| c.headroom.get(index * k..index * k + k))
            {
                // Most nodes pass: compare first, spell the reasons out only for the others.
                Some(room) if !room.iter().zip(amounts).any(|(r, a)| a > *r) => Ok(()),
                Some(room) => self.verdict(room.iter().copied().zip(amounts)),
                None => self.check(ctx, &estimate, &ctx.snapshot.nodes()[index]),
            }
        });
    }
}

/// How much of a resource a node takes before it is above `limit` (a ratio of capacity):
/// `(limit − utilisation) × capacity`, so that the pod is above the threshold exactly when
/// its amount exceeds it — the utilisation plus the amount over the capacity exceeds the
/// limit, multiplied out so no division is left per node and pod. Without capacity the
/// pod adds nothing: +∞ or −∞ as the utilisation alone is within the limit or not. No load
/// for the resource (utilisation −∞) gives +∞, and NaN compares false: the node passes.
#[inline]
fn headroom(current: f64, cap: f64, limit: f64) -> f64 {
    if cap > 0.0 {
        // A pod that brings the node exactly to the threshold passes (≤), whichever way
        // the multiplied-out form rounds: a relative 1e-9 of slack, far below any
        // measurement's precision.
        let room = (limit - current) * cap;
        room + room.abs() * 1e-9
    } else if current > limit {
        f64::NEG_INFINITY
    } else {
        f64::INFINITY
    }
}

/// What [`UsageThreshold`] compares for every node of a digest table, per configured
/// resource: the node's [`headroom`]. It depends on the nodes and the plugin's arguments
/// alone, so it is built once per table ([`CycleContext::memo`]) and the pod's estimate is
/// the only per-pod part.
#[derive(Debug)]
struct UsageColumns {
    /// `checks.len()` headrooms per node, in `nodes` order.
    headroom: Vec<f64>,
    /// The plugin's (resource, threshold ratio) pairs, in order.
    checks: Vec<(ResourceKind, f64)>,
    statistic: Statistic,
    window_seconds: u32,
    stale_policy: StalePolicy,
}

impl UsageColumns {
    /// Whether these columns are `plugin`'s for `ctx` (memo keys are hashes).
    fn built_by(&self, plugin: &UsageThreshold, ctx: &CycleContext<'_>) -> bool {
        self.statistic == plugin.args.statistic
            && self.stale_policy == ctx.stale_policy
            && self.window_seconds == ctx.window_seconds
            && self.checks.len() == plugin.checks.len()
            && self
                .checks
                .iter()
                .zip(&plugin.checks)
                .all(|(a, b)| a.0 == b.0 && a.1.to_bits() == b.1.to_bits())
    }
}

/// The headroom of `node` (whose row is `d`) for `kind` under `limit`.
fn node_headroom(
    ctx: &CycleContext<'_>,
    node: &NodeView,
    d: &NodeDigest,
    (kind, limit): (ResourceKind, f64),
    statistic: Statistic,
) -> f64 {
    let current = ctx
        .usage_of(node, d, kind)
        .map_or(f64::NEG_INFINITY, |u| statistic.of(&u));
    headroom(current, util::capacity(d, kind), limit)
}

impl Memo for UsageColumns {
    /// The scheduler assumed a pod on one node: that node's headrooms are computed again.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        let k = self.checks.len();
        if self.headroom.len() != snapshot.nodes().len() * k {
            return false;
        }
        let Some(room) = self.headroom.get_mut(index * k..index * k + k) else {
            return false;
        };
        let ctx = CycleContext::new(snapshot, self.window_seconds, self.stale_policy);
        for (r, check) in room.iter_mut().zip(&self.checks) {
            *r = node_headroom(&ctx, node, row, *check, self.statistic);
        }
        true
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

    /// The estimate the PreFilter kept in `state`, else computed for `pod`.
    fn prepared(state: Option<&PreFilterState>, pod: &PodInfo, args: &UsageThresholdArgs) -> Self {
        state
            .and_then(|s| s.downcast_ref::<PodEstimate>())
            .copied()
            .unwrap_or_else(|| PodEstimate::of(pod, args))
    }

    /// What the pod adds of `kind`, in the unit of [`util::capacity`].
    fn amount(&self, kind: ResourceKind) -> f64 {
        match kind {
            ResourceKind::Cpu => self.cpu_millis,
            ResourceKind::Memory => self.memory_bytes,
            ResourceKind::Gpu | ResourceKind::GpuMemory => self.gpus,
            ResourceKind::Network | ResourceKind::DiskIo => 0.0,
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
        let d = ctx.digest(node);
        self.verdict(self.checks.iter().map(|(kind, limit, _)| {
            (
                node_headroom(ctx, node, &d, (*kind, *limit), self.args.statistic),
                pod.amount(*kind),
            )
        }))
    }

    /// The verdict from each configured resource's [`headroom`] and the pod's amount, in
    /// [`UsageThreshold::checks`] order: above the threshold where the amount exceeds the
    /// headroom.
    #[inline]
    fn verdict(&self, rooms: impl Iterator<Item = (f64, f64)>) -> Result<(), Reason> {
        let mut failed: Option<Reason> = None;
        for ((room, amount), (_, _, reason)) in rooms.zip(&self.checks) {
            if amount > room {
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

    /// [`UsageColumns`]' memo key: the resources checked and their thresholds, the
    /// statistic and the stale policy, hashed ([`UsageColumns::built_by`] checks them).
    fn columns_key(&self, ctx: &CycleContext<'_>) -> u64 {
        self.checks.iter().fold(
            self.args.statistic as u64 * 4 + ctx.stale_policy as u64,
            |h, (kind, limit, _)| {
                (h ^ (*kind as u64) ^ limit.to_bits().rotate_left(17)).wrapping_mul(0x100_0000_01b3)
            },
        )
    }

    fn columns(&self, ctx: &CycleContext<'_>) -> UsageColumns {
        let checks: Vec<(ResourceKind, f64)> = self
            .checks
            .iter()
            .map(|(kind, limit, _)| (*kind, *limit))
            .collect();
        let mut headroom = Vec::with_capacity(ctx.snapshot.nodes().len() * checks.len());
        for node in ctx.snapshot.nodes() {
            let d = ctx.digest(node);
            headroom.extend(
                checks
                    .iter()
                    .map(|check| node_headroom(ctx, node, &d, *check, self.args.statistic)),
            );
        }
        UsageColumns {
            headroom,
            checks,
            statistic: self.args.statistic,
            window_seconds: ctx.window_seconds,
            stale_policy: ctx.stale_policy,
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

    #[test]
    fn instances_with_other_thresholds_keep_their_own_columns() {
        use loadstar_framework::StalePolicy;
        let snap = snapshot(vec![
            with_load(
                with_capacity(kube_node("a", 4000, 16 * GIB), 4, 16 * GIB),
                ResourceKind::Cpu,
                0.6,
                0.0,
            ),
            with_load(
                with_capacity(kube_node("b", 4000, 16 * GIB), 4, 16 * GIB),
                ResourceKind::Cpu,
                0.3,
                0.0,
            ),
        ]);
        let with = |yaml: &str| {
            UsageThreshold::from_args(&serde_norway::from_str(yaml).expect("yaml")).expect("valid")
        };
        let (high, low) = (
            with("{thresholds: {cpu: 80}}"),
            with("{thresholds: {cpu: 50}}"),
        );
        let p = pod(400, GIB);
        // Each against its per-node verdicts, on the one shared table, in turns.
        for f in [&high, &low, &high, &low] {
            assert_batch_agrees(f, &snap, &p, StalePolicy::Fallback);
        }
        assert_eq!(snap.digests(60).memos(), 2, "one set of columns each");
        let plain = ctx(&snap);
        assert!(high.filter(&plain, &p, &snap.nodes()[0]).is_ok());
        assert!(low.filter(&plain, &p, &snap.nodes()[0]).is_err());
    }

    #[test]
    fn a_pod_that_reaches_the_threshold_exactly_passes() {
        // 66.25 % of 8 CPUs + 300m = 70 %, exactly the threshold: at it, not above, though
        // (0.7 − 0.6625) × 8000 rounds below 300.
        let f = UsageThreshold::from_args(
            &serde_norway::from_str("{thresholds: {cpu: 70}, podEstimate: {cpuFactor: 1}}")
                .expect("yaml"),
        )
        .expect("valid");
        let (limit, used) = (std::hint::black_box(0.7), std::hint::black_box(0.6625));
        assert!((limit - used) * 8000.0 < 300.0, "the case rounds down");
        let n = with_capacity(kube_node("n", 8000, 32 * GIB), 8, 32 * GIB);
        let n = with_load(n, ResourceKind::Cpu, 0.6625, 0.0);
        assert_eq!(filter_one(&f, n.clone(), &pod(300, MIB)), Ok(()));
        assert!(filter_one(&f, n, &pod(301, MIB)).is_err());
    }

    #[test]
    fn columns_match_the_node_by_node_check_and_follow_assumptions() {
        use loadstar_framework::snapshot::Inflight;
        use loadstar_framework::{CycleContext, FilteredNode, StalePolicy};

        let loaded = |name: &str, cpu: f64| {
            let n = with_capacity(kube_node(name, 8000, 32 * GIB), 8, 32 * GIB);
            with_load(
                with_load(n, ResourceKind::Cpu, cpu, 0.0),
                ResourceKind::Memory,
                0.4,
                0.0,
            )
        };
        let mut snap = snapshot(vec![
            loaded("a", 0.2),
            loaded("b", 0.75),
            kube_node("c", 4000, GIB),
        ]);
        let f = UsageThreshold::default();
        let p = pod(1500, 2 * GIB);
        let mut buf = Vec::new();
        // (nodes kept, nodes rejected, memos on the table), with the per-node check's
        // verdicts asserted equal.
        let mut run = |snap: &ClusterSnapshot| {
            let table = snap.digests(60);
            let plain = CycleContext::new(snap, 60, StalePolicy::Fallback);
            let ctx = CycleContext {
                digests: Some(&table),
                current: Some(table.current_rows(snap.nodes(), &mut buf)),
                ..plain
            };
            assert!(ctx.current.is_some_and(|c| c.all()));
            let mut kept = vec![0, 1, 2];
            let mut rejected: Vec<FilteredNode> = Vec::new();
            let state = f.prefilter(&ctx, &p);
            f.filter_nodes(&ctx, state.as_ref(), &p, &mut kept, &mut rejected);
            for (i, n) in snap.nodes().iter().enumerate() {
                assert_eq!(
                    kept.contains(&i),
                    f.filter(&plain, &p, n).is_ok(),
                    "node {i}"
                );
            }
            (kept, rejected.len(), table.memos())
        };
        // b: 75 % + 1500m / 8 CPUs > 80 %; c has no agent and passes.
        assert_eq!(run(&snap), (vec![0, 2], 1, 1));
        // The scheduler assumes a 4.5-core pod on a: its cells are computed again (the memo
        // is patched, not built anew) and a is now too hot for the pod.
        let assumed = edit_alloc(snap.nodes()[0].clone(), |a| {
            a.inflight.push(Inflight::new(
                "x".into(),
                4500,
                0,
                std::time::Instant::now(),
            ));
        });
        snap.set_alloc(0, assumed.alloc.clone());
        assert_eq!(
            snap.digests(60).memos(),
            1,
            "the memo followed the assumption"
        );
        assert_eq!(run(&snap), (vec![2], 2, 1));
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
