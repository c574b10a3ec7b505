//! The built-in comparisons (`paper`, `cluster100`, `gpu`) and how profiles are found: the
//! scorer's own config (embedded default or `--config`) parsed and built by
//! [`ScorerConfig`], plus the simulator's extra profiles (`scenarios/profiles.yaml`, same
//! format, same parser). The simulator never builds a plugin any other way.
use std::path::Path;

use thiserror::Error;

use super::cluster::{Cluster, ClusterError, NodeMix};
use super::engine::SimSettings;
use super::trace::{GPU_TRACE_MIX, Trace, TraceError, TraceMix};
use loadstar_framework::Profile;
use loadstar_policy::config::{ConfigError, ScorerConfig};

/// The simulator's extra profiles, in the scorer's config format.
pub const EXTRA_PROFILES_YAML: &str = include_str!("scenarios/profiles.yaml");
/// The paper scenario's cluster.
pub const PAPER_NODES_YAML: &str = include_str!("scenarios/paper-nodes.yaml");
/// The paper scenario's trace.
pub const PAPER_TRACE_CSV: &str = include_str!("scenarios/paper-trace.csv");
/// Names of the built-in scenarios.
pub const SCENARIOS: &[&str] = &["paper", "cluster100", "io", "diurnal", "herd", "gpu"];

/// Errors building a scenario or its profiles.
#[derive(Debug, Error)]
pub enum ScenarioError {
    /// No built-in scenario has this name.
    #[error("unknown scenario {name:?} (known: {})", SCENARIOS.join(", "))]
    Unknown {
        /// The name.
        name: String,
    },
    /// The scorer config could not be read.
    #[error("config {path}: {source}")]
    ReadConfig {
        /// The file.
        path: String,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The scorer config (or the extra profiles) is invalid.
    #[error("config {path}: {source}")]
    Config {
        /// The file (or `<embedded default>`, `<simulator profiles>`).
        path: String,
        /// The error, with the field path.
        #[source]
        source: ConfigError,
    },
    /// A requested profile exists in no config.
    #[error("no profile named {name:?} (known: {known})")]
    NoProfile {
        /// The name.
        name: String,
        /// The profiles known.
        known: String,
    },
    /// The cluster description is invalid.
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    /// The trace is invalid.
    #[error(transparent)]
    Trace(#[from] TraceError),
}

/// A comparison: a cluster, a trace, the profiles to run on it and the baseline.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Name.
    pub name: String,
    /// What it shows.
    pub description: String,
    /// The cluster.
    pub cluster: Cluster,
    /// The workload.
    pub trace: Trace,
    /// Profile names, in run order.
    pub profiles: Vec<String>,
    /// The profile the others are compared with.
    pub baseline: String,
    /// Simulation settings.
    pub settings: SimSettings,
}

/// The scorer config and the simulator's extra profiles.
#[derive(Debug)]
pub struct Profiles {
    /// The scorer config (in-flight and eviction settings come from it).
    pub config: ScorerConfig,
    /// Every profile built: the config's, then the extras whose names it does not use.
    pub profiles: Vec<Profile>,
}

impl Profiles {
    /// Builds the profiles of the config at `path` (embedded default when `None`) plus the
    /// simulator's extras.
    pub fn load(path: Option<&Path>) -> Result<Profiles, ScenarioError> {
        let (config, label) = match path {
            None => (
                ScorerConfig::embedded_default(),
                "<embedded default>".to_string(),
            ),
            Some(p) => {
                let label = p.display().to_string();
                let text =
                    std::fs::read_to_string(p).map_err(|source| ScenarioError::ReadConfig {
                        path: label.clone(),
                        source,
                    })?;
                let config =
                    ScorerConfig::from_yaml(&text).map_err(|source| ScenarioError::Config {
                        path: label.clone(),
                        source,
                    })?;
                (config, label)
            }
        };
        let mut profiles = config
            .build_profiles()
            .map_err(|source| ScenarioError::Config {
                path: label,
                source,
            })?;
        let extra_label = "<simulator profiles>".to_string();
        let extras = ScorerConfig::from_yaml(EXTRA_PROFILES_YAML)
            .and_then(|c| c.build_profiles())
            .map_err(|source| ScenarioError::Config {
                path: extra_label,
                source,
            })?;
        for p in extras {
            if !profiles.iter().any(|q| q.name == p.name) {
                profiles.push(p);
            }
        }
        Ok(Profiles { config, profiles })
    }

    /// The profile named `name`.
    pub fn get(&self, name: &str) -> Result<&Profile, ScenarioError> {
        self.profiles
            .iter()
            .find(|p| p.name == name)
            .ok_or_else(|| ScenarioError::NoProfile {
                name: name.to_string(),
                known: self
                    .profiles
                    .iter()
                    .map(|p| p.name.as_str())
                    .collect::<Vec<_>>()
                    .join(", "),
            })
    }

    /// Settings with the config's in-flight and eviction settings.
    pub fn apply(&self, settings: &mut SimSettings) {
        settings.inflight = self.config.inflight().clone();
        settings.eviction = self.config.eviction_thresholds();
    }
}

fn names(xs: &[&str]) -> Vec<String> {
    xs.iter().map(|s| s.to_string()).collect()
}

/// Number of pods of the `cluster100` scenario.
pub const CLUSTER100_PODS: usize = 5000;
/// Arrival window of the `cluster100` scenario, seconds.
pub const CLUSTER100_WINDOW_S: f64 = 8.0 * 3600.0;
/// Number of GPU pods of the `gpu` scenario.
pub const GPU_PODS: usize = 300;
/// GPU nodes of the `gpu` scenario.
pub const GPU_NODES: usize = 16;
/// Profiles of the `diurnal` and `herd` scenarios (requests-only first: the baseline).
const ARRIVAL_SHAPE_PROFILES: &[&str] = &[
    "loadstar-requests",
    "koordinator-load-aware",
    "loadstar-load-variation-risk-balancing",
    "loadstar",
];

/// Swing of the long-running classes' usage in the `diurnal` scenario.
pub const DIURNAL_AMPLITUDE: f64 = 0.5;
/// Herds of the `herd` scenario, and pods in each.
pub const HERD_BURSTS: usize = 10;
/// See [`HERD_BURSTS`].
pub const HERD_SIZE: usize = 50;

/// Trace mix of the `io` scenario: half network- and disk-bound pods.
pub const IO_TRACE_MIX: &str = "service=25,batch=15,cache=5,proxy=25,io=25,besteffort=5";

/// Arrival window of the `gpu` scenario, seconds.
pub const GPU_WINDOW_S: f64 = 12.0 * 3600.0;

/// The built-in scenario `name` for `seed`.
pub fn builtin(name: &str, seed: u64) -> Result<Scenario, ScenarioError> {
    let settings = SimSettings {
        seed,
        ..SimSettings::default()
    };
    Ok(match name {
        "paper" => Scenario {
            name: name.into(),
            description: "The seed paper's experiment in kind: 3 heterogeneous workers (4×2.0 GHz, 8×2.6 GHz, 16×3.4 GHz), 35 pods of five task kinds (CPU, memory, network, disk, over-requesting web) arriving every 20 s; kube-scheduler's default scoring vs Koordinator's LoadAware vs LoadRatio alone vs Loadstar's default profile.".into(),
            cluster: Cluster::from_yaml("paper-nodes.yaml", PAPER_NODES_YAML)?,
            trace: Trace::from_csv("paper-trace.csv", PAPER_TRACE_CSV, None, None)?,
            profiles: names(&[
                "loadstar-requests",
                "koordinator-load-aware",
                "loadstar-load-ratio",
                "loadstar",
            ]),
            baseline: "loadstar-requests".into(),
            settings: SimSettings {
                duration_s: Some(3600.0),
                ..settings
            },
        },
        "cluster100" => Scenario {
            name: name.into(),
            description: format!(
                "100 generated nodes (small/medium/large/highmem 30/40/20/10 %), {CLUSTER100_PODS} pods of the default mix ({}) arriving over {} h, real usage ≠ requests.",
                super::trace::DEFAULT_TRACE_MIX,
                CLUSTER100_WINDOW_S / 3600.0
            ),
            cluster: Cluster::generate(100, &NodeMix::default(), seed)?,
            trace: Trace::generate(CLUSTER100_PODS, &TraceMix::default(), CLUSTER100_WINDOW_S, seed),
            profiles: names(&[
                "loadstar-requests",
                "koordinator-load-aware",
                "loadstar-target-load-packing",
                "loadstar-load-variation-risk-balancing",
                "loadstar-min-variance",
                "loadstar-load-ratio",
                "loadstar",
                "loadstar-window60",
            ]),
            baseline: "loadstar-requests".into(),
            settings,
        },
        "io" => Scenario {
            name: name.into(),
            description: format!(
                "cluster100's 100 generated nodes with an I/O-heavy workload: {CLUSTER100_PODS} pods ({IO_TRACE_MIX}) arriving over {} h — half of them proxies (300–2000 Mbit/s) and disk-bound jobs (100–400 MB/s).",
                CLUSTER100_WINDOW_S / 3600.0
            ),
            cluster: Cluster::generate(100, &NodeMix::default(), seed)?,
            trace: Trace::generate(
                CLUSTER100_PODS,
                &TraceMix::parse(IO_TRACE_MIX)?,
                CLUSTER100_WINDOW_S,
                seed,
            ),
            profiles: names(&[
                "loadstar-requests",
                "koordinator-load-aware",
                "loadstar-load-ratio",
                "loadstar",
            ]),
            baseline: "loadstar-requests".into(),
            settings,
        },
        "diurnal" => Scenario {
            name: name.into(),
            description: format!(
                "cluster100's nodes and mix, {CLUSTER100_PODS} pods over one day compressed into {} h: arrivals peak at midday and fall to a ninth at night, services, caches and proxies swing ±{:.0} % with the same clock.",
                CLUSTER100_WINDOW_S / 3600.0,
                DIURNAL_AMPLITUDE * 100.0
            ),
            cluster: Cluster::generate(100, &NodeMix::default(), seed)?,
            trace: Trace::generate_diurnal(
                CLUSTER100_PODS,
                &TraceMix::default(),
                CLUSTER100_WINDOW_S,
                DIURNAL_AMPLITUDE,
                seed,
            ),
            profiles: names(ARRIVAL_SHAPE_PROFILES),
            baseline: "loadstar-requests".into(),
            settings,
        },
        "herd" => Scenario {
            name: name.into(),
            description: format!(
                "cluster100's nodes and mix, {CLUSTER100_PODS} pods over {} h of which {HERD_BURSTS} herds of {HERD_SIZE} identical batch pods arrive in the same second: they are placed before the first one's load shows in any window.",
                CLUSTER100_WINDOW_S / 3600.0
            ),
            cluster: Cluster::generate(100, &NodeMix::default(), seed)?,
            trace: Trace::generate_herd(
                CLUSTER100_PODS,
                &TraceMix::default(),
                CLUSTER100_WINDOW_S,
                HERD_BURSTS,
                HERD_SIZE,
                super::trace::TraceClass::Batch,
                seed,
            ),
            profiles: names(ARRIVAL_SHAPE_PROFILES),
            baseline: "loadstar-requests".into(),
            settings,
        },
        "gpu" => Scenario {
            name: name.into(),
            description: format!(
                "{GPU_NODES} nodes with 8 GPUs each, {GPU_PODS} training pods needing 1/2/4/8 GPUs ({GPU_TRACE_MIX}) arriving over {} h; spreading vs GpuBinPack.",
                GPU_WINDOW_S / 3600.0
            ),
            cluster: Cluster::generate(GPU_NODES, &NodeMix::parse("gpu8")?, seed)?,
            trace: Trace::generate(
                GPU_PODS,
                &TraceMix::parse(GPU_TRACE_MIX)?,
                GPU_WINDOW_S,
                seed,
            ),
            profiles: names(&[
                "gpu-spread",
                "loadstar-requests",
                "koordinator-load-aware",
                "loadstar-gpu-bin-pack",
                "loadstar",
                "loadstar-gpu-weighted",
            ]),
            baseline: "gpu-spread".into(),
            settings,
        },
        other => {
            return Err(ScenarioError::Unknown {
                name: other.to_string(),
            });
        }
    })
}
