//! The scorer's configuration file: scheduling profiles (filters, weighted scores with their
//! arguments, load window, stale policy) and global knobs (in-flight estimation, eviction
//! thresholds, staleness), in the spirit of kube-scheduler's `KubeSchedulerConfiguration`.
//!
//! Parsing is strict: unknown keys and invalid values are rejected with the path of the
//! offending field (`profiles[0].scores[2].args.targetUtilization: must be between 1 and 99,
//! got 120`). A default configuration is embedded ([`ScorerConfig::embedded_default`]); its
//! first profile, `loadstar`, is the default profile. docs/policies.md documents every key.
//!
//! ```yaml
//! staleAfterSeconds: 15            # optional; unset = 3 × each node's report interval
//! percentageOfNodesToScore: 100    # default 100 (every node); 0 = kube-scheduler's adaptive
//! inflight: {cpuFactor: 1.0, memoryFactor: 1.0, cpuFallback: 250m, memoryFallback: 200Mi}
//! eviction: {hard: {memory.available: 100Mi}, pressureTransitionPeriod: 5m}
//! profiles:
//!   - schedulerName: loadstar
//!     windowSeconds: 300           # default 300
//!     stalePolicy: fallback        # fallback | filter | penalize
//!     stalePenalty: 0.5            # total × this for stale nodes under `penalize`
//!     percentageOfNodesToScore: 0  # optional; overrides the file's for this profile
//!     preemption: {enabled: true, minCandidateNodesPercentage: 10, minCandidateNodesAbsolute: 100}
//!     filters: [NodeReady, {name: UsageThreshold, args: {thresholds: {cpu: 75}}}]
//!     scores:
//!       - {name: LoadVariationRiskBalancing, weight: 3}
//! ```
use std::collections::HashSet;
use std::time::Duration;

use serde::Deserialize;
use serde_norway::Value;

use crate::eviction::{self, EvictionArgs, EvictionThresholds};
use crate::inflight::InflightArgs;
use loadstar_framework::preemption::PreemptionArgs;
use loadstar_framework::{FilterPlugin, NodeSampling, Profile, ScorePlugin, StalePolicy};
use loadstar_parity::args::PluginError;

/// The embedded default configuration.
pub const DEFAULT_CONFIG_YAML: &str = include_str!("default-config.yaml");
/// Default load window of a profile, seconds.
pub const DEFAULT_WINDOW_SECONDS: u32 = 300;
/// Default multiplier for stale nodes under [`StalePolicy::Penalize`].
pub const DEFAULT_STALE_PENALTY: f64 = 0.5;
/// Default score weight.
pub const DEFAULT_WEIGHT: i64 = 1;
/// Largest accepted score weight.
pub const MAX_WEIGHT: i64 = 1000;
/// Longest accepted load window, seconds (one day).
pub const MAX_WINDOW_SECONDS: u32 = 86_400;

/// A configuration error, with the path of the offending field.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
pub enum ConfigError {
    /// A field is malformed, unknown or out of range.
    #[error("{}{message}", if path.is_empty() { String::new() } else { format!("{path}: ") })]
    Invalid {
        /// Field path, e.g. `profiles[0].scores[2].args.targetUtilization` (empty: the whole
        /// document).
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl ConfigError {
    fn at(path: impl Into<String>, message: impl Into<String>) -> Self {
        ConfigError::Invalid {
            path: path.into(),
            message: message.into(),
        }
    }

    /// The offending field's path.
    pub fn path(&self) -> &str {
        match self {
            ConfigError::Invalid { path, .. } => path,
        }
    }
}

/// A filter enabled in a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct FilterConfig {
    /// Plugin name (see [`crate::FILTER_NAMES`]).
    pub name: String,
    /// Arguments (null = defaults).
    pub args: Value,
}

/// A score plugin enabled in a profile.
#[derive(Debug, Clone, PartialEq)]
pub struct ScoreConfig {
    /// Plugin name (see [`policy::SCORE_NAMES`]).
    pub name: String,
    /// Weight, 1–[`MAX_WEIGHT`].
    pub weight: i64,
    /// Arguments (null = defaults).
    pub args: Value,
}

/// One profile as configured.
#[derive(Debug, Clone, PartialEq)]
pub struct ProfileConfig {
    /// Profile name, matched against pods' `spec.schedulerName`.
    pub scheduler_name: String,
    /// Filters in order.
    pub filters: Vec<FilterConfig>,
    /// Score plugins.
    pub scores: Vec<ScoreConfig>,
    /// Load window, seconds.
    pub window_seconds: u32,
    /// Stale-node policy.
    pub stale_policy: StalePolicy,
    /// Multiplier for stale nodes under `penalize`, 0–1.
    pub stale_penalty: f64,
    /// DefaultPreemption's arguments; `None` when the profile does not preempt.
    pub preemption: Option<PreemptionArgs>,
    /// `percentageOfNodesToScore`: the profile's own, else the file's, else 100.
    pub sampling: NodeSampling,
}

/// The validated configuration.
#[derive(Debug, Clone, PartialEq)]
pub struct ScorerConfig {
    profiles: Vec<ProfileConfig>,
    stale_after_seconds: Option<f64>,
    inflight: InflightArgs,
    eviction: EvictionThresholds,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawConfig {
    #[serde(default)]
    stale_after_seconds: Option<f64>,
    #[serde(default)]
    percentage_of_nodes_to_score: Option<u32>,
    #[serde(default)]
    inflight: InflightArgs,
    #[serde(default)]
    eviction: EvictionArgs,
    profiles: Vec<RawProfile>,
}

fn default_window() -> u32 {
    DEFAULT_WINDOW_SECONDS
}
fn default_stale_policy() -> StalePolicy {
    StalePolicy::Fallback
}
fn default_penalty() -> f64 {
    DEFAULT_STALE_PENALTY
}
fn default_weight() -> i64 {
    DEFAULT_WEIGHT
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawProfile {
    scheduler_name: String,
    #[serde(default)]
    filters: Vec<Value>,
    #[serde(default)]
    scores: Vec<RawScore>,
    #[serde(default = "default_window")]
    window_seconds: u32,
    #[serde(default = "default_stale_policy")]
    stale_policy: StalePolicy,
    #[serde(default = "default_penalty")]
    stale_penalty: f64,
    #[serde(default)]
    preemption: RawPreemption,
    #[serde(default)]
    percentage_of_nodes_to_score: Option<u32>,
}

/// A profile's `preemption` block: kube-scheduler's DefaultPreemption PostFilter and its
/// `DefaultPreemptionArgs`. Enabled with upstream's defaults when absent.
#[derive(Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
struct RawPreemption {
    #[serde(default = "enabled")]
    enabled: bool,
    #[serde(default = "default_min_percentage")]
    min_candidate_nodes_percentage: u32,
    #[serde(default = "default_min_absolute")]
    min_candidate_nodes_absolute: u32,
}

fn enabled() -> bool {
    true
}
fn default_min_percentage() -> u32 {
    PreemptionArgs::default().min_candidate_nodes_percentage
}
fn default_min_absolute() -> u32 {
    PreemptionArgs::default().min_candidate_nodes_absolute
}

impl Default for RawPreemption {
    fn default() -> Self {
        RawPreemption {
            enabled: true,
            min_candidate_nodes_percentage: default_min_percentage(),
            min_candidate_nodes_absolute: default_min_absolute(),
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawFilter {
    name: String,
    #[serde(default)]
    args: Value,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawScore {
    name: String,
    #[serde(default = "default_weight")]
    weight: i64,
    #[serde(default)]
    args: Value,
}

/// Joins a prefix and a serde_path_to_error path (`.` = the root).
fn join(prefix: &str, path: &str) -> String {
    match (prefix.is_empty(), path.is_empty() || path == ".") {
        (_, true) => prefix.to_string(),
        (true, false) => path.to_string(),
        (false, false) if path.starts_with('[') => format!("{prefix}{path}"),
        (false, false) => format!("{prefix}.{path}"),
    }
}

/// A serde error at `path`, without the YAML parser's own copy of the path in front of its
/// message (`profiles[0]: unknown field ...` → `unknown field ...`).
fn serde_error(path: String, message: String) -> ConfigError {
    let message = match message.split_once(": ") {
        Some((head, rest)) if !head.is_empty() && !head.contains(' ') && path.starts_with(head) => {
            rest.to_string()
        }
        _ => message,
    };
    ConfigError::at(path, message)
}

fn plugin_error(prefix: &str, e: PluginError) -> ConfigError {
    match e {
        PluginError::Unknown { .. } => ConfigError::at(join(prefix, "name"), e.to_string()),
        PluginError::InvalidArgs { path, message, .. } => {
            ConfigError::at(join(&join(prefix, "args"), &path), message)
        }
    }
}

impl ScorerConfig {
    /// Parses and validates a YAML configuration.
    pub fn from_yaml(text: &str) -> Result<ScorerConfig, ConfigError> {
        let de = serde_norway::Deserializer::from_str(text);
        let raw: RawConfig = serde_path_to_error::deserialize(de)
            .map_err(|e| serde_error(join("", &e.path().to_string()), e.inner().to_string()))?;
        Self::validate(raw)
    }

    /// The embedded default configuration (`default-config.yaml`).
    pub fn embedded_default() -> ScorerConfig {
        // The embedded file is validated by a unit test; failing here is a build defect.
        #[allow(clippy::expect_used)]
        ScorerConfig::from_yaml(DEFAULT_CONFIG_YAML).expect("embedded default config is valid")
    }

    fn validate(raw: RawConfig) -> Result<ScorerConfig, ConfigError> {
        if let Some(s) = raw.stale_after_seconds
            && !(s.is_finite() && s > 0.0 && s <= 86_400.0)
        {
            return Err(ConfigError::at(
                "staleAfterSeconds",
                format!("must be a positive number of seconds up to 86400, got {s}"),
            ));
        }
        raw.inflight
            .validate()
            .map_err(|(p, m)| ConfigError::at(join("inflight", p), m))?;
        let eviction = raw
            .eviction
            .thresholds()
            .map_err(|(p, m)| ConfigError::at(join("eviction", &p), m))?;
        if raw.profiles.is_empty() {
            return Err(ConfigError::at(
                "profiles",
                "at least one profile is required",
            ));
        }
        let sampling_of = |path: &str, p: Option<u32>| {
            p.map_or(Ok(None), |p| {
                NodeSampling::new(p)
                    .map(Some)
                    .map_err(|e| ConfigError::at(path, e.to_string()))
            })
        };
        let file_sampling =
            sampling_of("percentageOfNodesToScore", raw.percentage_of_nodes_to_score)?;
        let mut names = HashSet::new();
        let mut profiles = Vec::with_capacity(raw.profiles.len());
        for (i, p) in raw.profiles.into_iter().enumerate() {
            let at = format!("profiles[{i}]");
            if p.scheduler_name.trim().is_empty() {
                return Err(ConfigError::at(
                    join(&at, "schedulerName"),
                    "must not be empty",
                ));
            }
            if !names.insert(p.scheduler_name.clone()) {
                return Err(ConfigError::at(
                    join(&at, "schedulerName"),
                    format!("duplicate profile {:?}", p.scheduler_name),
                ));
            }
            if !(1..=MAX_WINDOW_SECONDS).contains(&p.window_seconds) {
                return Err(ConfigError::at(
                    join(&at, "windowSeconds"),
                    format!(
                        "must be between 1 and {MAX_WINDOW_SECONDS}, got {}",
                        p.window_seconds
                    ),
                ));
            }
            if !(p.stale_penalty.is_finite() && (0.0..=1.0).contains(&p.stale_penalty)) {
                return Err(ConfigError::at(
                    join(&at, "stalePenalty"),
                    format!("must be between 0 and 1, got {}", p.stale_penalty),
                ));
            }
            let mut filters = Vec::with_capacity(p.filters.len());
            for (j, entry) in p.filters.into_iter().enumerate() {
                let fat = format!("{at}.filters[{j}]");
                let f = match entry {
                    Value::String(name) => FilterConfig {
                        name,
                        args: Value::Null,
                    },
                    other => {
                        let r: RawFilter =
                            serde_path_to_error::deserialize(other).map_err(|e| {
                                serde_error(
                                    join(&fat, &e.path().to_string()),
                                    e.inner().to_string(),
                                )
                            })?;
                        FilterConfig {
                            name: r.name,
                            args: r.args,
                        }
                    }
                };
                if filters.iter().any(|o: &FilterConfig| o.name == f.name) {
                    return Err(ConfigError::at(
                        join(&fat, "name"),
                        format!("duplicate filter {:?}", f.name),
                    ));
                }
                build_filter(&f, &eviction).map_err(|e| plugin_error(&fat, e))?;
                filters.push(f);
            }
            let mut scores = Vec::with_capacity(p.scores.len());
            for (j, s) in p.scores.into_iter().enumerate() {
                let sat = format!("{at}.scores[{j}]");
                if scores.iter().any(|o: &ScoreConfig| o.name == s.name) {
                    return Err(ConfigError::at(
                        join(&sat, "name"),
                        format!("duplicate score plugin {:?}", s.name),
                    ));
                }
                if !(1..=MAX_WEIGHT).contains(&s.weight) {
                    return Err(ConfigError::at(
                        join(&sat, "weight"),
                        format!("must be between 1 and {MAX_WEIGHT}, got {}", s.weight),
                    ));
                }
                crate::registry::build_score(&s.name, &s.args)
                    .map_err(|e| plugin_error(&sat, e))?;
                scores.push(ScoreConfig {
                    name: s.name,
                    weight: s.weight,
                    args: s.args,
                });
            }
            let preemption = if p.preemption.enabled {
                let args = PreemptionArgs {
                    min_candidate_nodes_percentage: p.preemption.min_candidate_nodes_percentage,
                    min_candidate_nodes_absolute: p.preemption.min_candidate_nodes_absolute,
                };
                args.validate().map_err(|(field, message)| {
                    ConfigError::at(join(&join(&at, "preemption"), field), message)
                })?;
                Some(args)
            } else {
                None
            };
            let sampling = sampling_of(
                &join(&at, "percentageOfNodesToScore"),
                p.percentage_of_nodes_to_score,
            )?
            .or(file_sampling)
            .unwrap_or_default();
            profiles.push(ProfileConfig {
                scheduler_name: p.scheduler_name,
                filters,
                scores,
                window_seconds: p.window_seconds,
                stale_policy: p.stale_policy,
                stale_penalty: p.stale_penalty,
                preemption,
                sampling,
            });
        }
        Ok(ScorerConfig {
            profiles,
            stale_after_seconds: raw.stale_after_seconds,
            inflight: raw.inflight,
            eviction,
        })
    }

    /// Builds the profiles' plugins; the first profile is the default.
    pub fn build_profiles(&self) -> Result<Vec<Profile>, ConfigError> {
        self.profiles
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let at = format!("profiles[{i}]");
                let filters = p
                    .filters
                    .iter()
                    .enumerate()
                    .map(|(j, f)| {
                        build_filter(f, &self.eviction)
                            .map_err(|e| plugin_error(&format!("{at}.filters[{j}]"), e))
                    })
                    .collect::<Result<Vec<_>, _>>()?;
                let scores = p
                    .scores
                    .iter()
                    .enumerate()
                    .map(|(j, s)| {
                        crate::registry::build_score(&s.name, &s.args)
                            .map(|plugin| (plugin, s.weight))
                            .map_err(|e| plugin_error(&format!("{at}.scores[{j}]"), e))
                    })
                    .collect::<Result<Vec<(Box<dyn ScorePlugin>, i64)>, _>>()?;
                Ok(Profile {
                    name: p.scheduler_name.clone(),
                    filters,
                    scores,
                    window_seconds: p.window_seconds,
                    stale_policy: p.stale_policy,
                    stale_penalty: p.stale_penalty,
                    preemption: p.preemption,
                    sampling: p.sampling,
                })
            })
            .collect()
    }

    /// The profiles as configured (first = default).
    pub fn profiles(&self) -> &[ProfileConfig] {
        &self.profiles
    }

    /// The stale threshold; `None` = 3 × each node's report interval.
    pub fn stale_after(&self) -> Option<Duration> {
        self.stale_after_seconds.map(Duration::from_secs_f64)
    }

    /// In-flight estimation arguments.
    pub fn inflight(&self) -> &InflightArgs {
        &self.inflight
    }

    /// Hard eviction thresholds, for the store's pressure tracking.
    pub fn eviction_thresholds(&self) -> EvictionThresholds {
        self.eviction
    }
}

/// Builds a filter; `EvictionPressure` without args takes the global thresholds.
fn build_filter(
    f: &FilterConfig,
    global: &EvictionThresholds,
) -> Result<Box<dyn FilterPlugin>, PluginError> {
    if f.name == eviction::NAME && f.args.is_null() {
        return Ok(Box::new(eviction::EvictionPressure::new(*global)));
    }
    crate::registry::build_filter(&f.name, &f.args)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(yaml: &str) -> ConfigError {
        ScorerConfig::from_yaml(yaml).expect_err("invalid")
    }

    #[test]
    fn embedded_default_is_valid_and_builds() {
        let c = ScorerConfig::embedded_default();
        let profiles = c.build_profiles().expect("builds");
        assert_eq!(profiles[0].name, "loadstar");
        assert!(profiles.iter().any(|p| p.name == "loadstar-requests"));
        assert_eq!(profiles[0].window_seconds, 300);
        assert_eq!(c.stale_after(), None);
        assert_eq!(c.inflight(), &InflightArgs::default());
        assert_eq!(c.eviction_thresholds(), EvictionThresholds::default());
        let names: Vec<&str> = profiles[0].filters.iter().map(|f| f.name()).collect();
        let own: Vec<&str> = crate::registry::FILTER_NAMES
            .iter()
            .copied()
            .filter(|n| !crate::registry::PEER_PLUGINS.contains(n))
            .collect();
        assert_eq!(names, own, "the default runs every filter but the peers'");
    }

    #[test]
    fn minimal_config_takes_defaults() {
        let c = ScorerConfig::from_yaml(
            "staleAfterSeconds: 10\nprofiles:\n  - schedulerName: x\n    scores: [{name: LeastAllocated}]\n",
        )
        .expect("valid");
        let p = &c.profiles()[0];
        assert_eq!(p.window_seconds, DEFAULT_WINDOW_SECONDS);
        assert_eq!(p.stale_policy, StalePolicy::Fallback);
        assert_eq!(p.scores[0].weight, 1);
        assert_eq!(c.stale_after(), Some(Duration::from_secs(10)));
    }

    #[test]
    fn percentage_of_nodes_to_score_per_file_and_per_profile() {
        let c = ScorerConfig::from_yaml(
            "percentageOfNodesToScore: 0\nprofiles:\n  - schedulerName: a\n  - schedulerName: b\n    percentageOfNodesToScore: 30\n",
        )
        .expect("valid");
        assert_eq!(c.profiles()[0].sampling, NodeSampling::ADAPTIVE);
        assert_eq!(c.profiles()[1].sampling.percentage(), 30);
        let built = c.build_profiles().expect("builds");
        assert_eq!(built[1].sampling.feasible_to_find(5_000), 1_500);
        // Unset: every node.
        let c = ScorerConfig::from_yaml("profiles:\n  - schedulerName: a\n").expect("valid");
        assert_eq!(c.profiles()[0].sampling, NodeSampling::ALL);
        assert_eq!(
            ScorerConfig::embedded_default().profiles()[0].sampling,
            NodeSampling::ALL
        );
        let e = err("percentageOfNodesToScore: 101\nprofiles:\n  - schedulerName: a\n");
        assert_eq!(
            e.to_string(),
            "percentageOfNodesToScore: must be between 0 (adaptive) and 100, got 101"
        );
        let e = err("profiles:\n  - schedulerName: a\n    percentageOfNodesToScore: 200\n");
        assert_eq!(e.path(), "profiles[0].percentageOfNodesToScore");
    }

    #[test]
    fn errors_carry_the_field_path() {
        let base = "profiles:\n  - schedulerName: x\n    scores:\n      - {name: LeastAllocated}\n      - {name: MinVariance}\n";
        let e = err(&format!(
            "{base}      - {{name: TargetLoadPacking, args: {{targetUtilization: 120}}}}\n"
        ));
        assert_eq!(
            e.to_string(),
            "profiles[0].scores[2].args.targetUtilization: must be between 1 and 99, got 120"
        );
        let e = err(&format!("{base}      - {{name: Bogus}}\n"));
        assert_eq!(e.path(), "profiles[0].scores[2].name");
        let e = err(&format!("{base}      - {{name: LoadRatio, wieght: 2}}\n"));
        assert_eq!(e.path(), "profiles[0].scores[2].wieght", "{e}");
        assert!(
            e.to_string()
                .starts_with("profiles[0].scores[2].wieght: unknown field `wieght`"),
            "{e}"
        );
        let e = err(&format!("{base}      - {{name: LoadRatio, weight: 0}}\n"));
        assert_eq!(e.path(), "profiles[0].scores[2].weight");
        let e = err(&format!("{base}    windowSeconds: lots\n"));
        assert_eq!(e.path(), "profiles[0].windowSeconds", "{e}");
        let e = err(&format!("{base}    stalePolicy: ignore\n"));
        assert_eq!(e.path(), "profiles[0].stalePolicy", "{e}");
        let e = err(&format!("{base}    stalePenalty: 2\n"));
        assert_eq!(e.path(), "profiles[0].stalePenalty");
        let e = err(&format!(
            "{base}    preemption: {{minCandidateNodesPercentage: 101}}\n"
        ));
        assert_eq!(
            e.path(),
            "profiles[0].preemption.minCandidateNodesPercentage",
            "{e}"
        );
        let e = err(&format!("{base}    preemption: {{victims: all}}\n"));
        assert_eq!(e.path(), "profiles[0].preemption.victims", "{e}");
        let off = ScorerConfig::from_yaml(&format!("{base}    preemption: {{enabled: false}}\n"))
            .expect("valid");
        assert_eq!(off.profiles()[0].preemption, None);
        let on = ScorerConfig::from_yaml(base).expect("valid");
        assert_eq!(on.profiles()[0].preemption, Some(PreemptionArgs::default()));
        let e = err(&format!(
            "{base}    filters: [NodeReady, {{name: UsageThreshold, args: {{thresholds: {{cpu: 0}}}}}}]\n"
        ));
        assert_eq!(
            e.path(),
            "profiles[0].filters[1].args.thresholds.cpu",
            "{e}"
        );
        let e = err(&format!("{base}    filters: [NodeReady, NodeReady]\n"));
        assert_eq!(e.path(), "profiles[0].filters[1].name");
        let e = err(&format!(
            "{base}    filters: [{{name: NodeReady, argz: {{}}}}]\n"
        ));
        assert!(e.path().starts_with("profiles[0].filters[0]"), "{e}");
        let e = err(&format!("{base}  - schedulerName: x\n"));
        assert_eq!(e.path(), "profiles[1].schedulerName");
        let e = err(&format!("{base}surprise: 1\n"));
        assert!(e.to_string().contains("unknown field `surprise`"), "{e}");
        let e = err(&format!("inflight: {{cpuFactor: -1}}\n{base}"));
        assert_eq!(e.path(), "inflight.cpuFactor");
        let e = err(&format!(
            "eviction: {{hard: {{memory.available: lots}}}}\n{base}"
        ));
        assert_eq!(e.path(), "eviction.hard.memory.available", "{e}");
        let e = err(&format!("staleAfterSeconds: -3\n{base}"));
        assert_eq!(e.path(), "staleAfterSeconds");
        assert_eq!(err("profiles: []").path(), "profiles");
        assert!(!err("{{{").to_string().is_empty());
    }

    #[test]
    fn eviction_filter_takes_the_global_thresholds() {
        let c = ScorerConfig::from_yaml(
            "eviction: {pressureTransitionPeriod: 30s}\nprofiles:\n  - schedulerName: x\n    filters: [EvictionPressure]\n",
        )
        .expect("valid");
        assert_eq!(
            c.eviction_thresholds().pressure_transition_period,
            Duration::from_secs(30)
        );
        let p = c.build_profiles().expect("builds");
        assert!(format!("{:?}", p[0].filters[0]).contains("30s"));
    }
}
