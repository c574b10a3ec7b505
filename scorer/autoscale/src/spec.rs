//! The `StepScaler` custom resource's `spec` (`loadstar.io/v1alpha1`) as the controller reads
//! it, with its defaults and the checks the CRD's OpenAPI schema cannot express on every API
//! server (e.g. `minReplicas ≤ maxReplicas` needs CEL, 1.25+). Pure: serde only; the Kubernetes
//! side reads the object and reports a [`SpecError`] as a status condition.
use serde::{Deserialize, Serialize};
use thiserror::Error;

use crate::step::{StepConfig, Tolerance};

/// A spec the controller cannot act on; the message names the field as the user wrote it.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum SpecError {
    /// The object's `spec` is not a StepScaler spec (a missing field, a wrong type).
    #[error("spec: {0}")]
    Shape(String),
    /// A field is out of its range.
    #[error("spec.{field}: {message}")]
    Field {
        /// The field, as in the YAML (`minReplicas`).
        field: &'static str,
        /// What is wrong.
        message: String,
    },
}

fn field(field: &'static str, message: impl Into<String>) -> SpecError {
    SpecError::Field {
        field,
        message: message.into(),
    }
}

/// The workload scaled, through its `scale` subresource.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ScaleTargetRef {
    /// `apps/v1`, or any group/version whose kind has `/scale`.
    pub api_version: String,
    /// `Deployment`, `StatefulSet`, `ReplicaSet`, or a custom kind with `/scale`.
    pub kind: String,
    /// The object's name, in the StepScaler's namespace.
    pub name: String,
}

/// What utilisation is measured: usage over the pods' requests.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Metric {
    /// CPU cores used over CPU requested (the default).
    #[default]
    Cpu,
    /// Memory working set over memory requested.
    Memory,
}

impl Metric {
    /// The resource name in requests (`cpu`, `memory`).
    pub fn resource(self) -> &'static str {
        match self {
            Metric::Cpu => "cpu",
            Metric::Memory => "memory",
        }
    }
}

/// How the band around the target is measured.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
pub enum ToleranceMode {
    /// `mean / target` above `value` (or `target / mean` below it): `value` 1.15 (default).
    #[default]
    Ratio,
    /// More than `value` percentage points from the target: `value` 15.
    Points,
}

/// The band around the target.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToleranceSpec {
    /// Ratio (default) or Points.
    #[serde(default)]
    pub mode: ToleranceMode,
    /// 1.15 for a ratio, 15 for points.
    pub value: f64,
}

/// `spec` of a StepScaler. Optional fields take the paper's values (see [`StepScalerSpec::config`]).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StepScalerSpec {
    /// The workload.
    pub scale_target_ref: ScaleTargetRef,
    /// CPU (default) or memory.
    #[serde(default)]
    pub metric: Metric,
    /// Target utilisation of the requests, percent (60).
    pub target_utilization_percent: f64,
    /// The band (default ratio 1.15).
    #[serde(default)]
    pub tolerance: Option<ToleranceSpec>,
    /// Pods added on top of the need when scaling out, removed per scale-in (default 2).
    #[serde(default)]
    pub step: Option<u32>,
    /// Floor (default 2).
    #[serde(default)]
    pub min_replicas: Option<u32>,
    /// Ceiling.
    pub max_replicas: u32,
    /// No scale-out for this long after one (default 180 s).
    #[serde(default)]
    pub scale_out_cooldown_seconds: Option<f64>,
    /// No scale-in for this long after one (default 300 s).
    #[serde(default)]
    pub scale_in_cooldown_seconds: Option<f64>,
    /// Poll period, and the window each pod's usage is averaged over (default 30 s).
    #[serde(default)]
    pub poll_period_seconds: Option<f64>,
    /// Decide and report, never change the replica count.
    #[serde(default)]
    pub dry_run: bool,
    /// Remove fewer than `step` pods when the rest would run above the band (default off).
    #[serde(default)]
    pub scale_in_guard: bool,
}

/// The paper's poll period (T = 30 s).
pub const DEFAULT_POLL_PERIOD_S: f64 = 30.0;
/// The shortest poll period accepted: agents report about once a second, so a shorter
/// window would average a handful of samples.
pub const MIN_POLL_PERIOD_S: f64 = 5.0;

impl StepScalerSpec {
    /// Reads a spec from the object's `spec` JSON.
    pub fn from_json(spec: &serde_json::Value) -> Result<StepScalerSpec, SpecError> {
        serde_path_to_error::deserialize(spec).map_err(|e| {
            let path = e.path().to_string();
            SpecError::Shape(if path == "." {
                e.inner().to_string()
            } else {
                format!("{path}: {}", e.inner())
            })
        })
    }

    /// The poll period, seconds (checked by [`StepScalerSpec::config`]).
    pub fn poll_period_s(&self) -> f64 {
        self.poll_period_seconds.unwrap_or(DEFAULT_POLL_PERIOD_S)
    }

    /// The algorithm's settings, every field checked; errors name the spec's fields.
    pub fn config(&self) -> Result<StepConfig, SpecError> {
        let d = StepConfig::default();
        let r = &self.scale_target_ref;
        for (name, v) in [
            ("scaleTargetRef.apiVersion", &r.api_version),
            ("scaleTargetRef.kind", &r.kind),
            ("scaleTargetRef.name", &r.name),
        ] {
            if v.trim().is_empty() {
                return Err(field(name, "must not be empty"));
            }
        }
        let t = self.target_utilization_percent;
        if !(t.is_finite() && t > 0.0) {
            return Err(field(
                "targetUtilizationPercent",
                format!("must be above 0, got {t}"),
            ));
        }
        let tolerance = match self.tolerance {
            None => d.tolerance,
            Some(ToleranceSpec {
                mode: ToleranceMode::Ratio,
                value,
            }) => {
                if !(value.is_finite() && value >= 1.0) {
                    return Err(field(
                        "tolerance.value",
                        format!("a ratio must be ≥ 1 (1.15 is a 15 % band), got {value}"),
                    ));
                }
                Tolerance::Ratio(value)
            }
            Some(ToleranceSpec {
                mode: ToleranceMode::Points,
                value,
            }) => {
                if !(value.is_finite() && value >= 0.0 && value < t) {
                    return Err(field(
                        "tolerance.value",
                        format!(
                            "points must be in [0, targetUtilizationPercent = {t}), got {value}"
                        ),
                    ));
                }
                Tolerance::Points(value / 100.0)
            }
        };
        let step = self.step.unwrap_or(d.step);
        if step == 0 {
            return Err(field("step", "must be ≥ 1"));
        }
        let floor = self.min_replicas.unwrap_or(d.floor);
        if floor == 0 {
            return Err(field("minReplicas", "must be ≥ 1"));
        }
        if floor > self.max_replicas {
            let implied = if self.min_replicas.is_none() {
                " (the default minReplicas)"
            } else {
                ""
            };
            return Err(field(
                "minReplicas",
                format!(
                    "{floor}{implied} is above maxReplicas {}",
                    self.max_replicas
                ),
            ));
        }
        let mut cooldowns = [d.scale_out_cooldown_s, d.scale_in_cooldown_s];
        for (slot, (name, v)) in cooldowns.iter_mut().zip([
            ("scaleOutCooldownSeconds", self.scale_out_cooldown_seconds),
            ("scaleInCooldownSeconds", self.scale_in_cooldown_seconds),
        ]) {
            if let Some(v) = v {
                if !(v.is_finite() && v >= 0.0) {
                    return Err(field(name, format!("must be ≥ 0, got {v}")));
                }
                *slot = v;
            }
        }
        let p = self.poll_period_s();
        if !(p.is_finite() && p >= MIN_POLL_PERIOD_S) {
            return Err(field(
                "pollPeriodSeconds",
                format!("must be ≥ {MIN_POLL_PERIOD_S}, got {p}"),
            ));
        }
        let config = StepConfig {
            target: t / 100.0,
            tolerance,
            step,
            floor,
            ceiling: self.max_replicas,
            scale_out_cooldown_s: cooldowns[0],
            scale_in_cooldown_s: cooldowns[1],
            scale_in_guard: self.scale_in_guard,
        };
        // Everything above is checked; this guards the two from drifting apart.
        config
            .validate()
            .map_err(|e| SpecError::Shape(e.to_string()))?;
        Ok(config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn base() -> serde_json::Value {
        json!({
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "web"},
            "targetUtilizationPercent": 60,
            "maxReplicas": 10
        })
    }

    #[test]
    fn defaults_are_the_papers() {
        let spec = StepScalerSpec::from_json(&base()).expect("valid");
        let c = spec.config().expect("valid");
        assert_eq!(
            c,
            StepConfig {
                ceiling: 10,
                ..StepConfig::default()
            }
        );
        assert_eq!(spec.metric, Metric::Cpu);
        assert_eq!(spec.poll_period_s(), 30.0);
        assert!(!spec.dry_run);
    }

    #[test]
    fn every_field_maps() {
        let mut v = base();
        v["metric"] = json!("memory");
        v["tolerance"] = json!({"mode": "Points", "value": 15});
        v["step"] = json!(3);
        v["minReplicas"] = json!(1);
        v["scaleOutCooldownSeconds"] = json!(60);
        v["scaleInCooldownSeconds"] = json!(0);
        v["pollPeriodSeconds"] = json!(10);
        v["dryRun"] = json!(true);
        v["scaleInGuard"] = json!(true);
        let spec = StepScalerSpec::from_json(&v).expect("valid");
        let c = spec.config().expect("valid");
        assert_eq!(c.tolerance, Tolerance::Points(0.15));
        assert_eq!((c.step, c.floor, c.ceiling), (3, 1, 10));
        assert_eq!((c.scale_out_cooldown_s, c.scale_in_cooldown_s), (60.0, 0.0));
        assert!(c.scale_in_guard && spec.dry_run);
        assert_eq!(spec.metric.resource(), "memory");
        assert_eq!(spec.poll_period_s(), 10.0);
    }

    #[test]
    fn bad_specs_name_their_field() {
        let cases: Vec<(serde_json::Value, &str)> = vec![
            (
                json!({"targetUtilizationPercent": 0}),
                "spec.targetUtilizationPercent",
            ),
            (json!({"targetUtilizationPercent": -5}), "must be above 0"),
            (json!({"minReplicas": 11}), "11 is above maxReplicas 10"),
            (json!({"minReplicas": 0}), "spec.minReplicas: must be ≥ 1"),
            (
                json!({"maxReplicas": 1}),
                "2 (the default minReplicas) is above maxReplicas 1",
            ),
            (json!({"step": 0}), "spec.step"),
            (json!({"tolerance": {"value": 0.9}}), "a ratio must be ≥ 1"),
            (
                json!({"tolerance": {"mode": "Points", "value": 60}}),
                "points must be in [0, targetUtilizationPercent = 60)",
            ),
            (json!({"pollPeriodSeconds": 1}), "spec.pollPeriodSeconds"),
            (
                json!({"scaleInCooldownSeconds": -1}),
                "scaleInCooldownSeconds",
            ),
            (
                json!({"scaleTargetRef": {"apiVersion": "apps/v1", "kind": "", "name": "x"}}),
                "spec.scaleTargetRef.kind: must not be empty",
            ),
        ];
        for (patch, want) in cases {
            let mut v = base();
            for (k, val) in patch.as_object().expect("object") {
                v[k] = val.clone();
            }
            let err = StepScalerSpec::from_json(&v)
                .and_then(|s| s.config())
                .expect_err(&v.to_string());
            assert!(err.to_string().contains(want), "{err} ∌ {want}");
        }
    }

    #[test]
    fn shape_errors_name_the_path() {
        let mut v = base();
        v["maxReplicas"] = json!("ten");
        let err = StepScalerSpec::from_json(&v).expect_err("a string");
        assert!(err.to_string().contains("maxReplicas"), "{err}");
        let err = StepScalerSpec::from_json(&json!({"maxReplicas": 3})).expect_err("no target");
        assert!(err.to_string().contains("scaleTargetRef"), "{err}");
    }
}
