//! The simulator's run settings and per-pod outcome: shared by the engine that runs a
//! simulation and the measurements taken of it, so neither needs to import the other's
//! internals.
use loadstar_policy::eviction::EvictionThresholds;
use loadstar_policy::inflight::InflightArgs;

/// How the simulation runs; see [`SimSettings::default`].
#[derive(Debug, Clone)]
pub struct SimSettings {
    /// Length of a step, seconds (agents sample once per step).
    pub step_s: f64,
    /// Agents report every this many seconds (rounded to whole steps, at least one).
    pub report_interval_s: f64,
    /// Agents' window lengths, seconds.
    pub window_seconds: Vec<u32>,
    /// A pod's usage appears in its node's per-pod report (and its in-flight estimate is
    /// dropped) once it has run this long: metrics pipelines lag.
    pub measure_delay_s: f64,
    /// Simulated time; `None`: until the last arrival.
    pub duration_s: Option<f64>,
    /// Seed of the tie-break RNG.
    pub seed: u64,
    /// Utilisation above which a node counts as hot.
    pub hot_threshold: f64,
    /// A pending pod is retried after this long even if no pod finished.
    pub retry_interval_s: f64,
    /// In-flight estimation (from the scorer config).
    pub inflight: InflightArgs,
    /// Eviction thresholds (from the scorer config).
    pub eviction: EvictionThresholds,
    /// Time columns of the per-node heatmap.
    pub heatmap_columns: usize,
}

impl Default for SimSettings {
    /// 5 s steps, reports every 10 s, windows 60/300/900 s, usage measured after 20 s, hot
    /// above 80 %, retries every 30 s, the scorer's default in-flight and eviction settings,
    /// 240 heatmap columns.
    fn default() -> Self {
        SimSettings {
            step_s: 5.0,
            report_interval_s: 10.0,
            window_seconds: vec![60, 300, 900],
            measure_delay_s: 20.0,
            duration_s: None,
            seed: 1,
            hot_threshold: 0.8,
            retry_interval_s: 30.0,
            inflight: InflightArgs::default(),
            eviction: EvictionThresholds::default(),
            heatmap_columns: 240,
        }
    }
}

/// Where a pod ended up.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
#[serde(tag = "state", rename_all = "snake_case")]
pub enum PodOutcome {
    /// It had not arrived when the simulation ended.
    NotArrived,
    /// It arrived and was never placed.
    Pending,
    /// Placed on `node` (index) and still running at the end.
    Running {
        /// Node index.
        node: usize,
    },
    /// Placed on `node` and finished.
    Finished {
        /// Node index.
        node: usize,
    },
}
