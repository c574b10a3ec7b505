//! Filter and score plugins (one file per policy) and the registry that builds them by name
//! from a profile's config.
//!
//! Every plugin is a pure function of the [`CycleContext`](crate::framework::CycleContext)'s
//! snapshot and the pod: no I/O, no clocks except the eviction filter's transition period.
//! Plugins are built from their YAML `args` (a [`serde_norway::Value`]) into typed argument
//! structs that reject unknown fields; errors carry the path of the offending field inside
//! `args`, which the profile config prefixes with the plugin's own path.
//!
//! Load comes from [`CycleContext::usage`](crate::framework::CycleContext::usage) (the
//! profile's window plus in-flight estimates); when it is `None` (no agent, or stale under
//! the `fallback` policy) each load-aware plugin falls back to requests as documented on it.
use serde::de::DeserializeOwned;

use crate::framework::{FilterPlugin, ScorePlugin};

pub mod balanced_allocation;
pub mod eviction;
pub mod gpu_bin_pack;
pub mod inflight;
pub mod least_allocated;
pub mod load_ratio;
pub mod load_variation_risk_balancing;
pub mod min_variance;
pub mod most_allocated;
pub mod node_affinity;
pub mod node_ports;
pub mod node_ready;
pub mod node_resources_fit;
pub mod resource_allocation;
pub mod selector_spread;
pub mod taint_toleration;
pub mod target_load_packing;
pub mod usage_threshold;
pub mod util;

#[cfg(test)]
pub(crate) mod testutil;

/// Names of the filter plugins [`build_filter`] knows, in the order a profile usually runs
/// them (cheap Kubernetes checks first, load checks last).
pub const FILTER_NAMES: &[&str] = &[
    node_ready::NAME,
    taint_toleration::NAME,
    node_affinity::NAME,
    node_resources_fit::NAME,
    node_ports::NAME,
    eviction::NAME,
    usage_threshold::NAME,
];

/// Names of the score plugins [`build_score`] knows.
pub const SCORE_NAMES: &[&str] = &[
    load_ratio::NAME,
    least_allocated::NAME,
    balanced_allocation::NAME,
    most_allocated::NAME,
    target_load_packing::NAME,
    load_variation_risk_balancing::NAME,
    min_variance::NAME,
    gpu_bin_pack::NAME,
    selector_spread::NAME,
    taint_toleration::NAME,
];

/// Errors building a plugin from config.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PluginError {
    /// No plugin of this kind has this name.
    #[error("unknown {kind} plugin {name:?} (known: {known})")]
    Unknown {
        /// `filter` or `score`.
        kind: &'static str,
        /// The name.
        name: String,
        /// The known names, comma-separated.
        known: String,
    },
    /// The plugin's arguments are malformed or out of range.
    #[error("{plugin} args{}: {message}", if path.is_empty() { String::new() } else { format!(".{path}") })]
    InvalidArgs {
        /// The plugin.
        plugin: String,
        /// Path of the offending field inside `args` (`targetUtilization`,
        /// `resources[1].weight`); empty for the whole `args`.
        path: String,
        /// What is wrong.
        message: String,
    },
}

impl PluginError {
    /// An invalid-argument error for `plugin` at `path`.
    pub fn invalid(plugin: &str, path: impl Into<String>, message: impl Into<String>) -> Self {
        PluginError::InvalidArgs {
            plugin: plugin.to_string(),
            path: path.into(),
            message: message.into(),
        }
    }
}

/// Deserializes `args` (null = all defaults) into `T`, reporting the field path on error.
pub(crate) fn parse_args<T: DeserializeOwned>(
    plugin: &str,
    args: &serde_norway::Value,
) -> Result<T, PluginError> {
    let value = if args.is_null() {
        serde_norway::Value::Mapping(serde_norway::Mapping::new())
    } else {
        args.clone()
    };
    serde_path_to_error::deserialize(value).map_err(|e| {
        let path = e.path().to_string();
        let path = if path == "." { String::new() } else { path };
        PluginError::invalid(plugin, path, e.into_inner().to_string())
    })
}

/// Arguments of plugins that take none: any key is rejected.
#[derive(Debug, Clone, Default, serde::Deserialize, serde::Serialize)]
#[serde(deny_unknown_fields)]
pub struct NoArgs {}

/// Serializes a plugin's arguments for display (`ListProfiles`).
pub(crate) fn args_to_yaml<T: serde::Serialize>(args: &T) -> String {
    serde_norway::to_string(args).unwrap_or_default()
}

/// Builds the filter plugin `name` with `args` (null = defaults).
pub fn build_filter(
    name: &str,
    args: &serde_norway::Value,
) -> Result<Box<dyn FilterPlugin>, PluginError> {
    Ok(match name {
        node_ready::NAME => Box::new(node_ready::NodeReady::from_args(args)?),
        taint_toleration::NAME => Box::new(taint_toleration::TaintToleration::from_args(args)?),
        node_affinity::NAME => Box::new(node_affinity::NodeAffinity::from_args(args)?),
        node_resources_fit::NAME => {
            Box::new(node_resources_fit::NodeResourcesFit::from_args(args)?)
        }
        node_ports::NAME => Box::new(node_ports::NodePorts::from_args(args)?),
        eviction::NAME => Box::new(eviction::EvictionPressure::from_args(args)?),
        usage_threshold::NAME => Box::new(usage_threshold::UsageThreshold::from_args(args)?),
        _ => {
            return Err(PluginError::Unknown {
                kind: "filter",
                name: name.into(),
                known: FILTER_NAMES.join(", "),
            });
        }
    })
}

/// Builds the score plugin `name` with `args` (null = defaults).
pub fn build_score(
    name: &str,
    args: &serde_norway::Value,
) -> Result<Box<dyn ScorePlugin>, PluginError> {
    Ok(match name {
        load_ratio::NAME => Box::new(load_ratio::LoadRatio::from_args(args)?),
        least_allocated::NAME => Box::new(least_allocated::LeastAllocated::from_args(args)?),
        balanced_allocation::NAME => {
            Box::new(balanced_allocation::BalancedAllocation::from_args(args)?)
        }
        most_allocated::NAME => Box::new(most_allocated::MostAllocated::from_args(args)?),
        target_load_packing::NAME => {
            Box::new(target_load_packing::TargetLoadPacking::from_args(args)?)
        }
        load_variation_risk_balancing::NAME => {
            Box::new(load_variation_risk_balancing::LoadVariationRiskBalancing::from_args(args)?)
        }
        min_variance::NAME => Box::new(min_variance::MinVariance::from_args(args)?),
        gpu_bin_pack::NAME => Box::new(gpu_bin_pack::GpuBinPack::from_args(args)?),
        selector_spread::NAME => Box::new(selector_spread::SelectorSpread::from_args(args)?),
        taint_toleration::NAME => Box::new(taint_toleration::TaintToleration::from_args(args)?),
        _ => {
            return Err(PluginError::Unknown {
                kind: "score",
                name: name.into(),
                known: SCORE_NAMES.join(", "),
            });
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn yaml(s: &str) -> serde_norway::Value {
        serde_norway::from_str(s).expect("yaml")
    }

    #[test]
    fn every_name_builds_with_defaults() {
        for name in FILTER_NAMES {
            let f = build_filter(name, &serde_norway::Value::Null).expect(name);
            assert_eq!(f.name(), *name);
        }
        for name in SCORE_NAMES {
            let s = build_score(name, &serde_norway::Value::Null).expect(name);
            assert_eq!(s.name(), *name);
        }
    }

    #[test]
    fn digest_rows_give_the_same_verdicts_and_track_edits() {
        use std::borrow::Cow;

        use crate::framework::{CycleContext, StalePolicy};
        use crate::snapshot::raw_usage;
        use loadstar_common::model::ResourceKind;
        use testutil::*;

        let loaded = |name: &str, cpu: f64, mem: f64| {
            let n = with_capacity(kube_node(name, 8000, 32 * GIB), 8, 32 * GIB);
            with_load(
                with_load(n, ResourceKind::Cpu, cpu, 0.1),
                ResourceKind::Memory,
                mem,
                0.05,
            )
        };
        let mut stale = loaded("d", 0.3, 0.3);
        stale.stale = true;
        let mut snap = snapshot(vec![
            loaded("a", 0.2, 0.4),
            with_requested(loaded("b", 0.7, 0.2), 4000, 8 * GIB),
            kube_node("c", 4000, 16 * GIB),
            stale,
        ]);
        let table = snap.digests(60);
        let p = pod(1500, 2 * GIB);
        for policy in [StalePolicy::Fallback, StalePolicy::Penalize] {
            let plain = CycleContext::new(&snap, 60, policy);
            let fast = CycleContext {
                digests: Some(&table),
                ..plain
            };
            let nodes: Vec<&crate::snapshot::NodeView> = snap.nodes.iter().collect();
            for n in &nodes {
                assert!(matches!(fast.digest(n), Cow::Borrowed(_)));
                assert!(matches!(plain.digest(n), Cow::Owned(_)));
                for kind in ResourceKind::ALL {
                    assert_eq!(fast.usage(n, kind), plain.usage(n, kind));
                }
            }
            for name in SCORE_NAMES {
                let plugin = build_score(name, &serde_norway::Value::Null).expect(name);
                let (mut a, mut b) = (vec![0; nodes.len()], vec![0; nodes.len()]);
                plugin.score(&plain, &p, &nodes, &mut a);
                plugin.score(&fast, &p, &nodes, &mut b);
                assert_eq!(a, b, "{name}");
            }
            for name in FILTER_NAMES {
                let plugin = build_filter(name, &serde_norway::Value::Null).expect(name);
                for n in &nodes {
                    assert_eq!(
                        plugin.filter(&plain, &p, n),
                        plugin.filter(&fast, &p, n),
                        "{name}"
                    );
                }
            }
        }
        // A node edited after the table was built (its allocation `Arc` replaced) is read
        // from the view, not from its stale row.
        snap.nodes[0] = with_requested(snap.nodes[0].clone(), 7000, 0);
        let fast = CycleContext {
            digests: Some(&table),
            ..CycleContext::new(&snap, 60, StalePolicy::Fallback)
        };
        let d = fast.digest(&snap.nodes[0]);
        assert!(matches!(d, Cow::Owned(_)));
        assert_eq!(d.requested_cpu_millis, 7000);
        assert_eq!(
            fast.usage(&snap.nodes[0], ResourceKind::Cpu),
            raw_usage(&snap.nodes[0], ResourceKind::Cpu, 60)
        );
        // A new generation gets a new table; the same one is shared.
        assert!(std::sync::Arc::ptr_eq(&table, &snap.digests(60)));
        snap.generation += 1;
        assert_eq!(snap.digests(60).generation, snap.generation);
    }

    #[test]
    fn unknown_names_and_fields_are_rejected_with_paths() {
        let err = build_score("Nope", &serde_norway::Value::Null).expect_err("unknown");
        assert!(err.to_string().starts_with("unknown score plugin \"Nope\""));
        let err = build_filter("NodePorts", &yaml("{foo: 1}")).expect_err("no args");
        assert!(matches!(&err, PluginError::InvalidArgs { path, .. } if path == "foo"));
        assert!(err.to_string().contains("unknown field `foo`"), "{err}");
        let err =
            build_score("TargetLoadPacking", &yaml("{targetUtilization: 120}")).expect_err("range");
        assert_eq!(
            err,
            PluginError::invalid(
                "TargetLoadPacking",
                "targetUtilization",
                "must be between 1 and 99, got 120"
            )
        );
        let err = build_score(
            "LeastAllocated",
            &yaml("{resources: [{name: cpu, weight: 1}, {name: memory, weight: nope}]}"),
        )
        .expect_err("type");
        assert!(
            matches!(&err, PluginError::InvalidArgs { path, .. } if path == "resources[1].weight"),
            "{err:?}"
        );
    }
}
