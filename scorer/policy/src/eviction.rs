//! `EvictionPressure` filter (seed 001): keep pods off nodes the kubelet is about to evict
//! from. A node fails when its agent's report is below the kubelet's hard eviction thresholds
//! (defaults as the kubelet's: `memory.available < 100Mi`, `nodefs.available < 10%`,
//! `nodefs.inodesFree < 5%`), or when it was under such pressure within the last
//! `pressureTransitionPeriod` (default 5m, the kubelet's `--eviction-pressure-transition-period`)
//! — the kubelet keeps its pressure condition that long, and a node that just recovered by
//! evicting pods would otherwise attract the next wave.
//!
//! The store tracks the last time a node was under pressure (`AgentNode::last_pressure_at`)
//! by calling [`under_pressure`] on every report with the config's [`EvictionThresholds`].
//! Like the kubelet's `memory-pressure`/`disk-pressure` taints, a pod tolerating
//! `node.kubernetes.io/memory-pressure` or `node.kubernetes.io/disk-pressure` (effect
//! `NoSchedule`) passes. Nodes without an agent, or stale under the `fallback` policy, pass:
//! there is nothing fresh to judge by.
use std::fmt;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use loadstar_framework::snapshot::{
    AgentNode, ClusterSnapshot, Memo, NodeDigest, NodeView, PodInfo, patch_entry,
};
use loadstar_framework::{
    CycleContext, FilterPlugin, FilteredNode, PreFilterState, Reason, StalePolicy, retain_passing,
};

use super::util;
use loadstar_common::quantity;
use loadstar_parity::args::{PluginError, parse_args};
use loadstar_parity::taint_toleration::tolerates_key;

/// Plugin name.
pub const NAME: &str = "EvictionPressure";
/// Reason for a node below the memory threshold.
pub const REASON_MEMORY: &str = "node(s) had memory pressure";
/// Reason for a node below a filesystem threshold.
pub const REASON_DISK: &str = "node(s) had disk pressure";
/// Reason for a node that was under pressure within the transition period.
pub const REASON_RECENT: &str = "node(s) had recent eviction pressure";
/// Taint key that lets a pod onto a node with memory pressure.
pub const MEMORY_PRESSURE_TAINT: &str = "node.kubernetes.io/memory-pressure";
/// Taint key that lets a pod onto a node with disk pressure.
pub const DISK_PRESSURE_TAINT: &str = "node.kubernetes.io/disk-pressure";

/// The kubelet's default `memory.available` hard threshold, bytes.
pub const DEFAULT_MEMORY_AVAILABLE_BYTES: u64 = 100 * 1024 * 1024;
/// The kubelet's default `nodefs.available` hard threshold, ratio.
pub const DEFAULT_NODEFS_AVAILABLE_RATIO: f64 = 0.10;
/// The kubelet's default `nodefs.inodesFree` hard threshold, ratio.
pub const DEFAULT_NODEFS_INODES_FREE_RATIO: f64 = 0.05;
/// The kubelet's default pressure transition period.
pub const DEFAULT_PRESSURE_TRANSITION_PERIOD: Duration = Duration::from_secs(300);

/// Hard eviction thresholds and the pressure transition period, parsed.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct EvictionThresholds {
    /// A node with less available memory is under memory pressure, bytes.
    pub memory_available_bytes: u64,
    /// A node with a smaller free fraction of its root filesystem is under disk pressure.
    pub nodefs_available_ratio: f64,
    /// A node with a smaller free fraction of inodes is under disk pressure.
    pub nodefs_inodes_free_ratio: f64,
    /// How long a node stays unschedulable after its last pressure.
    pub pressure_transition_period: Duration,
}

impl Default for EvictionThresholds {
    fn default() -> Self {
        EvictionThresholds {
            memory_available_bytes: DEFAULT_MEMORY_AVAILABLE_BYTES,
            nodefs_available_ratio: DEFAULT_NODEFS_AVAILABLE_RATIO,
            nodefs_inodes_free_ratio: DEFAULT_NODEFS_INODES_FREE_RATIO,
            pressure_transition_period: DEFAULT_PRESSURE_TRANSITION_PERIOD,
        }
    }
}

/// Hard thresholds in the kubelet's `evictionHard` spelling.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct HardThresholds {
    /// `memory.available`: a byte quantity (`100Mi`).
    #[serde(rename = "memory.available")]
    pub memory_available: String,
    /// `nodefs.available`: a percentage (`10%`).
    #[serde(rename = "nodefs.available")]
    pub nodefs_available: String,
    /// `nodefs.inodesFree`: a percentage (`5%`).
    #[serde(rename = "nodefs.inodesFree")]
    pub nodefs_inodes_free: String,
}

impl Default for HardThresholds {
    fn default() -> Self {
        HardThresholds {
            memory_available: "100Mi".into(),
            nodefs_available: "10%".into(),
            nodefs_inodes_free: "5%".into(),
        }
    }
}

/// The thresholds as written in config (top-level `eviction:` and this plugin's args):
/// `{hard: {memory.available: 100Mi, nodefs.available: "10%", nodefs.inodesFree: "5%"},
/// pressureTransitionPeriod: 5m}`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct EvictionArgs {
    /// Hard thresholds.
    pub hard: HardThresholds,
    /// Go-style duration (`5m`, `90s`).
    pub pressure_transition_period: String,
}

impl Default for EvictionArgs {
    fn default() -> Self {
        EvictionArgs {
            hard: HardThresholds::default(),
            pressure_transition_period: "5m".into(),
        }
    }
}

impl EvictionArgs {
    /// Parses and checks the values; on error returns (field path, message).
    pub fn thresholds(&self) -> Result<EvictionThresholds, (String, String)> {
        let memory = quantity::parse_nonneg_units(&self.hard.memory_available)
            .map_err(|e| ("hard.memory.available".to_string(), e.to_string()))?;
        let nodefs = util::parse_percent(&self.hard.nodefs_available)
            .map_err(|e| ("hard.nodefs.available".to_string(), e))?;
        let inodes = util::parse_percent(&self.hard.nodefs_inodes_free)
            .map_err(|e| ("hard.nodefs.inodesFree".to_string(), e))?;
        let period = util::parse_duration(&self.pressure_transition_period)
            .map_err(|e| ("pressureTransitionPeriod".to_string(), e))?;
        Ok(EvictionThresholds {
            memory_available_bytes: memory as u64,
            nodefs_available_ratio: nodefs,
            nodefs_inodes_free_ratio: inodes,
            pressure_transition_period: period,
        })
    }

    /// The config spelling of parsed thresholds.
    pub fn from_thresholds(t: &EvictionThresholds) -> EvictionArgs {
        EvictionArgs {
            hard: HardThresholds {
                memory_available: quantity::format_bytes(
                    i64::try_from(t.memory_available_bytes).unwrap_or(i64::MAX),
                ),
                nodefs_available: format!("{}%", t.nodefs_available_ratio * 100.0),
                nodefs_inodes_free: format!("{}%", t.nodefs_inodes_free_ratio * 100.0),
            },
            pressure_transition_period: util::format_duration(t.pressure_transition_period),
        }
    }
}

/// A crossed eviction threshold, with the figures.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Pressure {
    /// `memory.available` below its threshold.
    Memory {
        /// Available memory, bytes.
        available_bytes: u64,
        /// Threshold, bytes.
        threshold_bytes: u64,
    },
    /// `nodefs.available` below its threshold.
    DiskSpace {
        /// Free fraction.
        available_ratio: f64,
        /// Threshold.
        threshold_ratio: f64,
    },
    /// `nodefs.inodesFree` below its threshold.
    Inodes {
        /// Free fraction.
        free_ratio: f64,
        /// Threshold.
        threshold_ratio: f64,
    },
}

impl Pressure {
    /// The summary reason (`node(s) had memory pressure` / `node(s) had disk pressure`).
    pub fn reason(&self) -> &'static str {
        match self {
            Pressure::Memory { .. } => REASON_MEMORY,
            Pressure::DiskSpace { .. } | Pressure::Inodes { .. } => REASON_DISK,
        }
    }

    /// The taint key a pod tolerates to ignore this pressure.
    pub fn taint_key(&self) -> &'static str {
        match self {
            Pressure::Memory { .. } => MEMORY_PRESSURE_TAINT,
            Pressure::DiskSpace { .. } | Pressure::Inodes { .. } => DISK_PRESSURE_TAINT,
        }
    }
}

impl fmt::Display for Pressure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Pressure::Memory {
                available_bytes,
                threshold_bytes,
            } => write!(
                f,
                "memory.available {} < {}",
                quantity::format_bytes(*available_bytes as i64),
                quantity::format_bytes(*threshold_bytes as i64)
            ),
            Pressure::DiskSpace {
                available_ratio,
                threshold_ratio,
            } => write!(
                f,
                "nodefs.available {:.1}% < {:.1}%",
                available_ratio * 100.0,
                threshold_ratio * 100.0
            ),
            Pressure::Inodes {
                free_ratio,
                threshold_ratio,
            } => write!(
                f,
                "nodefs.inodesFree {:.1}% < {:.1}%",
                free_ratio * 100.0,
                threshold_ratio * 100.0
            ),
        }
    }
}

/// What the pressure check reads from an agent report.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct PressureInputs {
    /// Memory capacity, bytes (0: unknown, memory is not judged).
    pub memory_capacity_bytes: u64,
    /// memory.available, bytes.
    pub memory_available_bytes: u64,
    /// nodefs.available ratio, if reported.
    pub nodefs_available_ratio: Option<f64>,
    /// nodefs.inodesFree ratio, if reported.
    pub nodefs_inodes_free_ratio: Option<f64>,
}

impl From<&AgentNode> for PressureInputs {
    fn from(a: &AgentNode) -> Self {
        PressureInputs {
            memory_capacity_bytes: a.capacity.memory_bytes,
            memory_available_bytes: a.memory_available_bytes,
            nodefs_available_ratio: a.nodefs_available_ratio,
            nodefs_inodes_free_ratio: a.nodefs_inodes_free_ratio,
        }
    }
}

impl From<&NodeDigest> for PressureInputs {
    fn from(d: &NodeDigest) -> Self {
        PressureInputs {
            memory_capacity_bytes: d.agent_memory_bytes,
            memory_available_bytes: d.memory_available_bytes,
            nodefs_available_ratio: d.nodefs_available_ratio,
            nodefs_inodes_free_ratio: d.nodefs_inodes_free_ratio,
        }
    }
}

/// The first threshold the report crosses, if any (memory, then disk space, then inodes).
/// Memory is judged only when the report has a memory capacity; filesystem ratios only when
/// reported.
pub fn check(agent: &AgentNode, th: &EvictionThresholds) -> Option<Pressure> {
    check_inputs(&PressureInputs::from(agent), th)
}

/// [`check`] on the figures alone.
pub fn check_inputs(agent: &PressureInputs, th: &EvictionThresholds) -> Option<Pressure> {
    if agent.memory_capacity_bytes > 0 && agent.memory_available_bytes < th.memory_available_bytes {
        return Some(Pressure::Memory {
            available_bytes: agent.memory_available_bytes,
            threshold_bytes: th.memory_available_bytes,
        });
    }
    if let Some(r) = agent.nodefs_available_ratio
        && r < th.nodefs_available_ratio
    {
        return Some(Pressure::DiskSpace {
            available_ratio: r,
            threshold_ratio: th.nodefs_available_ratio,
        });
    }
    if let Some(r) = agent.nodefs_inodes_free_ratio
        && r < th.nodefs_inodes_free_ratio
    {
        return Some(Pressure::Inodes {
            free_ratio: r,
            threshold_ratio: th.nodefs_inodes_free_ratio,
        });
    }
    None
}

/// For the store: `Some(description)` (e.g. `memory.available 80Mi < 100Mi`) when the report
/// crosses a hard threshold, so it can set `AgentNode::last_pressure_at`.
pub fn under_pressure(agent: &AgentNode, th: &EvictionThresholds) -> Option<String> {
    check(agent, th).map(|p| p.to_string())
}

/// The eviction-pressure filter.
#[derive(Debug, Clone)]
pub struct EvictionPressure {
    thresholds: EvictionThresholds,
}

impl EvictionPressure {
    /// A filter with these thresholds (the config passes its top-level `eviction` thresholds
    /// when the plugin has no args of its own).
    pub fn new(thresholds: EvictionThresholds) -> Self {
        EvictionPressure { thresholds }
    }

    /// Builds it from its arguments ([`EvictionArgs`]; null = kubelet defaults).
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let a: EvictionArgs = parse_args(NAME, args)?;
        let thresholds = a
            .thresholds()
            .map_err(|(path, msg)| PluginError::invalid(NAME, path, msg))?;
        Ok(EvictionPressure { thresholds })
    }

    /// The thresholds in use.
    pub fn thresholds(&self) -> &EvictionThresholds {
        &self.thresholds
    }
}

impl FilterPlugin for EvictionPressure {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        Verdict::of(pod, &self.thresholds).on(self.state(ctx.stale_policy, &ctx.digest(node)))
    }

    /// By index over the table's columns ([`PressureColumns`]) when the cycle has them, else
    /// its rows; one clock reading and one look at the pod's tolerations for the whole pass.
    fn filter_nodes(
        &self,
        ctx: &CycleContext<'_>,
        _state: Option<&PreFilterState>,
        pod: &PodInfo,
        nodes: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        let verdict = Verdict::of(pod, &self.thresholds);
        let columns = ctx
            .memo(self.columns_key(ctx.stale_policy), || PressureColumns {
                states: ctx
                    .snapshot
                    .nodes()
                    .iter()
                    .map(|n| self.state(ctx.stale_policy, &ctx.digest(n)))
                    .collect(),
                thresholds: self.thresholds,
                stale_policy: ctx.stale_policy,
            })
            .filter(|c| c.thresholds == self.thresholds && c.stale_policy == ctx.stale_policy);
        match columns {
            Some(c) => retain_passing(NAME, nodes, filtered, |i| match c.states.get(i) {
                Some(state) => verdict.on(*state),
                None => verdict.on(self.state(ctx.stale_policy, &ctx.digest_at(i))),
            }),
            None => retain_passing(NAME, nodes, filtered, |i| {
                verdict.on(self.state(ctx.stale_policy, &ctx.digest_at(i)))
            }),
        }
    }
}

/// What the filter knows of a node without the pod.
#[derive(Debug, Clone, Copy, PartialEq)]
enum NodeState {
    /// Passes every pod (no agent, stale under `fallback`, or no pressure lately).
    Clear,
    /// Under a hard threshold now: memory, or disk space and inodes.
    Memory,
    Disk,
    /// Crossed one at this time (the report's `last_pressure_at`), none now.
    Since(Instant),
}

/// The filter's verdict on any node for one pod, at one time.
struct Verdict {
    memory_tolerated: bool,
    disk_tolerated: bool,
    now: Instant,
    period: Duration,
}

impl Verdict {
    fn of(pod: &PodInfo, thresholds: &EvictionThresholds) -> Verdict {
        Verdict {
            memory_tolerated: tolerates_key(pod, MEMORY_PRESSURE_TAINT),
            disk_tolerated: tolerates_key(pod, DISK_PRESSURE_TAINT),
            now: Instant::now(),
            period: thresholds.pressure_transition_period,
        }
    }

    #[inline(always)]
    fn on(&self, state: NodeState) -> Result<(), Reason> {
        match state {
            NodeState::Clear => Ok(()),
            NodeState::Memory if self.memory_tolerated => Ok(()),
            NodeState::Memory => Err(REASON_MEMORY.into()),
            NodeState::Disk if self.disk_tolerated => Ok(()),
            NodeState::Disk => Err(REASON_DISK.into()),
            NodeState::Since(at)
                if self.now.saturating_duration_since(at) < self.period
                    && !(self.memory_tolerated && self.disk_tolerated) =>
            {
                Err(REASON_RECENT.into())
            }
            NodeState::Since(_) => Ok(()),
        }
    }
}

/// Every node's [`NodeState`], in `nodes` order, built once per digest table.
#[derive(Debug)]
struct PressureColumns {
    states: Vec<NodeState>,
    thresholds: EvictionThresholds,
    stale_policy: StalePolicy,
}

impl Memo for PressureColumns {
    /// The scheduler assumed a pod on one node: its state is computed again.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        _node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        let plugin = EvictionPressure::new(self.thresholds);
        patch_entry(&mut self.states, index, snapshot, || {
            plugin.state(self.stale_policy, row)
        })
    }
}

impl EvictionPressure {
    /// [`PressureColumns`]' memo key: the thresholds the states depend on and the stale
    /// policy (the transition period is compared per pod; the columns' own thresholds are
    /// checked on use, so filters differing only in that period each build their own).
    fn columns_key(&self, stale_policy: StalePolicy) -> u64 {
        let th = &self.thresholds;
        th.memory_available_bytes.rotate_left(7)
            ^ th.nodefs_available_ratio.to_bits()
            ^ th.nodefs_inodes_free_ratio.to_bits().rotate_left(23)
            ^ stale_policy as u64
    }

    /// The state of the node whose row is `d`.
    fn state(&self, stale_policy: StalePolicy, d: &NodeDigest) -> NodeState {
        if (d.stale && stale_policy == StalePolicy::Fallback) || !d.has_agent {
            return NodeState::Clear;
        }
        match check_inputs(&PressureInputs::from(d), &self.thresholds) {
            Some(p) if p.taint_key() == MEMORY_PRESSURE_TAINT => NodeState::Memory,
            Some(_) => NodeState::Disk,
            None => d
                .last_pressure_at
                .map_or(NodeState::Clear, NodeState::Since),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Instant;

    use super::*;
    use loadstar_framework::snapshot::Toleration;
    use loadstar_testkit::snapshot::*;

    fn filter() -> EvictionPressure {
        EvictionPressure::from_args(&serde_norway::Value::Null).expect("defaults")
    }

    #[test]
    fn columns_give_the_node_by_node_verdicts() {
        use loadstar_framework::CycleContext;

        let healthy = || edit_agent(kube_node("n", 1000, GIB), |_| {});
        let mut stale = edit_agent(healthy(), |a| a.memory_available_bytes = 1);
        stale.stale = true;
        let snap = snapshot(vec![
            healthy(),
            edit_agent(healthy(), |a| a.memory_available_bytes = 80 << 20),
            edit_agent(healthy(), |a| a.nodefs_available_ratio = Some(0.05)),
            edit_agent(healthy(), |a| a.nodefs_inodes_free_ratio = Some(0.01)),
            edit_agent(healthy(), |a| a.last_pressure_at = Some(Instant::now())),
            edit_agent(healthy(), |a| {
                a.last_pressure_at = Instant::now().checked_sub(Duration::from_secs(600))
            }),
            stale,
            kube_node("no-agent", 1000, GIB),
        ]);
        let f = filter();
        for policy in [StalePolicy::Fallback, StalePolicy::Penalize] {
            for p in [
                pod(100, MIB),
                pod_tolerating(&[MEMORY_PRESSURE_TAINT]),
                pod_tolerating(&[DISK_PRESSURE_TAINT]),
                pod_tolerating(&[MEMORY_PRESSURE_TAINT, DISK_PRESSURE_TAINT]),
            ] {
                assert_batch_agrees(&f, &snap, &p, policy);
            }
        }
        // Under `fallback` the stale node passes; under `penalize` its pressure counts.
        let plain = CycleContext::new(&snap, 60, StalePolicy::Penalize);
        assert_eq!(
            f.filter(&plain, &pod(1, 1), &snap.nodes()[6]),
            Err(REASON_MEMORY.into())
        );
        assert_eq!(snap.digests(60).memos(), 2, "one memo per stale policy");
    }

    #[test]
    fn defaults_are_the_kubelets() {
        assert_eq!(filter().thresholds(), &EvictionThresholds::default());
        let a = EvictionArgs::from_thresholds(&EvictionThresholds::default());
        assert_eq!(a.thresholds(), Ok(EvictionThresholds::default()));
    }

    #[test]
    fn thresholds_are_checked_in_order() {
        let th = EvictionThresholds::default();
        let healthy = edit_agent(kube_node("n", 1000, GIB), |_| {});
        let agent = healthy.agent.as_deref().expect("agent");
        assert_eq!(check(agent, &th), None);
        let low_mem = edit_agent(healthy.clone(), |a| a.memory_available_bytes = 80 << 20);
        assert_eq!(
            under_pressure(low_mem.agent.as_deref().expect("agent"), &th),
            Some("memory.available 80Mi < 100Mi".into())
        );
        let low_disk = edit_agent(healthy.clone(), |a| a.nodefs_available_ratio = Some(0.05));
        assert_eq!(
            filter_one(&filter(), low_disk, &pod(1, 1)),
            Err(REASON_DISK.into())
        );
        let low_inodes = edit_agent(healthy, |a| a.nodefs_inodes_free_ratio = Some(0.01));
        assert_eq!(
            under_pressure(low_inodes.agent.as_deref().expect("agent"), &th),
            Some("nodefs.inodesFree 1.0% < 5.0%".into())
        );
    }

    #[test]
    fn filter_honours_transition_period_tolerations_and_staleness() {
        let p = pod(100, MIB);
        let recent = edit_agent(kube_node("n", 1000, GIB), |a| {
            a.last_pressure_at = Some(Instant::now())
        });
        assert_eq!(
            filter_one(&filter(), recent.clone(), &p),
            Err(REASON_RECENT.into())
        );
        let short = EvictionPressure::new(EvictionThresholds {
            pressure_transition_period: Duration::ZERO,
            ..Default::default()
        });
        assert_eq!(filter_one(&short, recent, &p), Ok(()));

        let low_mem = edit_agent(kube_node("n", 1000, GIB), |a| {
            a.memory_available_bytes = 1 << 20
        });
        assert_eq!(
            filter_one(&filter(), low_mem.clone(), &p),
            Err(REASON_MEMORY.into())
        );
        let mut tolerant = p.clone();
        tolerant.tolerations = vec![Toleration {
            key: MEMORY_PRESSURE_TAINT.into(),
            exists: true,
            ..Default::default()
        }];
        assert_eq!(filter_one(&filter(), low_mem.clone(), &tolerant), Ok(()));

        // Stale under fallback: nothing fresh to judge by.
        let mut stale = low_mem;
        stale.stale = true;
        assert_eq!(filter_one(&filter(), stale.clone(), &p), Ok(()));
        let snap = snapshot(vec![stale]);
        let c = ctx_with(&snap, StalePolicy::Penalize);
        assert!(filter().filter(&c, &p, &snap.nodes()[0]).is_err());
        // No agent at all.
        assert_eq!(filter_one(&filter(), kube_node("k", 1000, GIB), &p), Ok(()));
    }

    #[test]
    fn args_errors_name_the_field() {
        let err = EvictionPressure::from_args(
            &serde_norway::from_str("{hard: {nodefs.available: 120%}}").expect("yaml"),
        )
        .expect_err("range");
        assert!(
            matches!(&err, PluginError::InvalidArgs { path, .. } if path == "hard.nodefs.available"),
            "{err}"
        );
        assert!(
            EvictionPressure::from_args(
                &serde_norway::from_str("{pressureTransitionPeriod: soon}").expect("yaml")
            )
            .is_err()
        );
    }
}
