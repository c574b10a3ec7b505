//! In-flight usage estimation (issue 4): a pod bound or assumed recently adds an estimate of
//! its usage to its node until the agent's per-pod usage shows it; then the measured value
//! replaces the estimate. This is what stops the herd effect every load-aware scheduler
//! suffers from — without it, every pod of a burst lands on the node that *looked* idlest in
//! the last report.
//!
//! The estimate is `max(limit, request) × factor` per resource, with fixed fallbacks (250m
//! CPU, 200 MiB memory) for pods that declare neither. Trimaran's TargetLoadPacking counts
//! recently placed pods the same way (its `ScheduledPodsCache`), with its own predictor; the
//! store and the scheduler call [`estimate`] and record the result as a
//! [`loadstar_framework::snapshot::Inflight`].
use serde::{Deserialize, Serialize};

use loadstar_framework::snapshot::PodInfo;

use super::util;

/// Default CPU estimate for a pod that declares no CPU request or limit, millicores.
pub const DEFAULT_CPU_FALLBACK_MILLIS: i64 = 250;
/// Default memory estimate for a pod that declares no memory request or limit, bytes.
pub const DEFAULT_MEMORY_FALLBACK_BYTES: i64 = 200 * 1024 * 1024;
/// Default multiplier on `max(limit, request)`.
pub const DEFAULT_FACTOR: f64 = 1.0;
/// Default age after which an estimate the agent never confirmed is dropped, seconds.
pub const DEFAULT_MAX_AGE_SECONDS: f64 = 300.0;

/// How in-flight pods are estimated (config key `inflight`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct InflightArgs {
    /// Multiplier on `max(limit, request)` for CPU.
    pub cpu_factor: f64,
    /// Multiplier on `max(limit, request)` for memory.
    pub memory_factor: f64,
    /// CPU estimate when the pod declares none (YAML: a quantity such as `250m`).
    #[serde(rename = "cpuFallback", with = "util::cpu_millis")]
    pub cpu_fallback_millis: i64,
    /// Memory estimate when the pod declares none (YAML: a quantity such as `200Mi`).
    #[serde(rename = "memoryFallback", with = "util::bytes")]
    pub memory_fallback_bytes: i64,
    /// An estimate the agent has not confirmed after this many seconds is dropped (the pod
    /// probably never started, or its usage is already inside the node's window).
    pub max_age_seconds: f64,
}

impl Default for InflightArgs {
    fn default() -> Self {
        InflightArgs {
            cpu_factor: DEFAULT_FACTOR,
            memory_factor: DEFAULT_FACTOR,
            cpu_fallback_millis: DEFAULT_CPU_FALLBACK_MILLIS,
            memory_fallback_bytes: DEFAULT_MEMORY_FALLBACK_BYTES,
            max_age_seconds: DEFAULT_MAX_AGE_SECONDS,
        }
    }
}

impl InflightArgs {
    /// Checks the ranges; on error returns (field path, message).
    pub fn validate(&self) -> Result<(), (&'static str, String)> {
        for (path, f) in [
            ("cpuFactor", self.cpu_factor),
            ("memoryFactor", self.memory_factor),
        ] {
            if !(f.is_finite() && (0.0..=100.0).contains(&f)) {
                return Err((path, format!("must be a number between 0 and 100, got {f}")));
            }
        }
        if !(self.max_age_seconds.is_finite() && self.max_age_seconds > 0.0) {
            return Err((
                "maxAgeSeconds",
                format!("must be a positive number, got {}", self.max_age_seconds),
            ));
        }
        Ok(())
    }
}

fn scaled(amount: i64, factor: f64) -> i64 {
    if factor == 1.0 {
        return amount;
    }
    // `as` saturates; the factor is validated finite and non-negative.
    (amount as f64 * factor).round() as i64
}

/// The estimated usage of `pod` right after it starts: (CPU millicores, memory bytes), each
/// `max(limit, request) × factor`, or the fallback when the pod declares neither.
pub fn estimate(pod: &PodInfo, args: &InflightArgs) -> (i64, i64) {
    let cpu = pod.limits.cpu_millis.max(pod.requests.cpu_millis);
    let mem = pod.limits.memory_bytes.max(pod.requests.memory_bytes);
    let cpu = if cpu > 0 {
        scaled(cpu, args.cpu_factor)
    } else {
        args.cpu_fallback_millis
    };
    let mem = if mem > 0 {
        scaled(mem, args.memory_factor)
    } else {
        args.memory_fallback_bytes
    };
    (cpu, mem)
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_testkit::snapshot::{MIB, pod};

    #[test]
    fn estimate_takes_the_larger_of_limit_and_request() {
        let args = InflightArgs::default();
        let mut p = pod(500, 256 * MIB);
        p.limits.cpu_millis = 2000;
        assert_eq!(estimate(&p, &args), (2000, 256 * MIB));
        let args = InflightArgs {
            cpu_factor: 0.5,
            memory_factor: 1.5,
            ..InflightArgs::default()
        };
        assert_eq!(estimate(&p, &args), (1000, 384 * MIB));
    }

    #[test]
    fn estimate_falls_back_for_pods_without_figures() {
        let p = pod(0, 0);
        assert_eq!(estimate(&p, &InflightArgs::default()), (250, 200 * MIB));
    }

    #[test]
    fn args_parse_quantities_and_reject_bad_values() {
        let a: InflightArgs =
            serde_norway::from_str("{cpuFallback: 100m, memoryFallback: 1Gi, cpuFactor: 1.2}")
                .expect("valid");
        assert_eq!(a.cpu_fallback_millis, 100);
        assert_eq!(a.memory_fallback_bytes, 1 << 30);
        assert!(a.validate().is_ok());
        let bad = InflightArgs {
            cpu_factor: f64::NAN,
            ..Default::default()
        };
        assert_eq!(bad.validate().map_err(|e| e.0), Err("cpuFactor"));
        assert!(serde_norway::from_str::<InflightArgs>("{cpuFallback: lots}").is_err());
        assert!(serde_norway::from_str::<InflightArgs>("{bogus: 1}").is_err());
    }
}
