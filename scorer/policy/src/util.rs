//! Helpers the plugins share: capacities and request-based fallbacks per resource kind, the
//! window statistic a plugin reads, and serde adapters for Kubernetes quantities,
//! percentages and Go-style durations in plugin arguments.
use std::time::Duration;

use loadstar_common::model::ResourceKind;
use loadstar_common::quantity;
use serde::{Deserialize, Deserializer, Serialize, Serializer};

use loadstar_framework::CycleContext;
use loadstar_framework::snapshot::{NodeDigest, NodeView, PodInfo, Usage};

/// Which statistic of a node's window a plugin reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Statistic {
    /// Window mean (+ in-flight estimates).
    #[default]
    Mean,
    /// Window 95th percentile (+ in-flight).
    P95,
    /// Window maximum (+ in-flight).
    Max,
    /// Latest sample (+ in-flight).
    Latest,
}

impl Statistic {
    /// The statistic's value in `u`.
    pub fn of(self, u: &Usage) -> f64 {
        match self {
            Statistic::Mean => u.mean,
            Statistic::P95 => u.p95,
            Statistic::Max => u.max,
            Statistic::Latest => u.latest,
        }
    }
}

/// The amount a utilisation ratio of `kind` is relative to: the agent's capacity when an
/// agent reported (the base of its ratios), else Kubernetes' allocatable. CPU in millicores,
/// memory in bytes, GPUs in devices; 0 for kinds without a request-side amount.
pub fn capacity(d: &NodeDigest, kind: ResourceKind) -> f64 {
    match kind {
        ResourceKind::Cpu if d.agent_cpu_millis > 0.0 => d.agent_cpu_millis,
        ResourceKind::Cpu => d.allocatable_cpu_millis as f64,
        ResourceKind::Memory if d.agent_memory_bytes > 0 => d.agent_memory_bytes as f64,
        ResourceKind::Memory => d.allocatable_memory_bytes as f64,
        ResourceKind::Gpu | ResourceKind::GpuMemory if d.agent_gpus > 0 => d.agent_gpus as f64,
        ResourceKind::Gpu | ResourceKind::GpuMemory => d.allocatable_gpus as f64,
        ResourceKind::Network | ResourceKind::DiskIo => 0.0,
    }
}

/// Requests on the node as a ratio of allocatable: the fallback utilisation for CPU, memory
/// and GPUs when a node has no (fresh) load. `None` for network and disk, which have no
/// requests, and when allocatable is zero.
pub fn requested_ratio(d: &NodeDigest, kind: ResourceKind) -> Option<f64> {
    let (r, a) = match kind {
        ResourceKind::Cpu => (d.requested_cpu_millis, d.allocatable_cpu_millis),
        ResourceKind::Memory => (d.requested_memory_bytes, d.allocatable_memory_bytes),
        ResourceKind::Gpu | ResourceKind::GpuMemory => (d.requested_gpus, d.allocatable_gpus),
        ResourceKind::Network | ResourceKind::DiskIo => return None,
    };
    (a > 0).then(|| r as f64 / a as f64)
}

/// The node's utilisation of `kind` by `stat`: measured when available, else the
/// [`requested_ratio`] fallback. `d` is the node's digest.
pub fn utilisation(
    ctx: &CycleContext<'_>,
    node: &NodeView,
    d: &NodeDigest,
    kind: ResourceKind,
    stat: Statistic,
) -> Option<f64> {
    match ctx.usage_of(node, d, kind) {
        Some(u) => Some(stat.of(&u)),
        None => requested_ratio(d, kind),
    }
}

/// What the pod asks of `kind`, in [`capacity`] units: CPU millicores and memory bytes of its
/// effective requests, GPUs; 0 for network and disk.
pub fn pod_request(pod: &PodInfo, kind: ResourceKind) -> f64 {
    match kind {
        ResourceKind::Cpu => pod.requests.cpu_millis as f64,
        ResourceKind::Memory => pod.requests.memory_bytes as f64,
        ResourceKind::Gpu | ResourceKind::GpuMemory => pod_gpus(pod) as f64,
        ResourceKind::Network | ResourceKind::DiskIo => 0.0,
    }
}

/// GPUs the pod asks for (`nvidia.com/gpu`: requests, or limits, which Kubernetes requires
/// to be equal for extended resources).
pub fn pod_gpus(pod: &PodInfo) -> i64 {
    pod.requests.gpus.max(pod.limits.gpus)
}

/// `x` if finite, else 0 (scores are never NaN).
pub fn finite_or_zero(x: f64) -> f64 {
    if x.is_finite() { x } else { 0.0 }
}

/// Rounds half away from zero, as Go's `math.Round` (which Trimaran uses), without a libm
/// call; non-finite values give 0. Exact: the fraction `x − trunc(x)` is computed without
/// rounding error for every |x| < 2⁶².
pub fn round_half_away(x: f64) -> i64 {
    if !x.is_finite() {
        return 0;
    }
    let t = x as i64; // truncates toward zero, saturating
    let frac = x - t as f64;
    // Branch-free: the fraction is data-dependent and would mispredict half the time.
    t.saturating_add(i64::from(frac >= 0.5) - i64::from(frac <= -0.5))
}

/// Truncates a 0–100 float score to an integer score, NaN-safe.
pub fn trunc_score(x: f64) -> i64 {
    (finite_or_zero(x) as i64).clamp(0, loadstar_framework::MAX_NODE_SCORE)
}

/// Parses a Go-style duration (`300ms`, `30s`, `5m`, `1h30m`; a bare number is seconds).
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let s = s.trim();
    if s.is_empty() {
        return Err("empty duration".into());
    }
    if let Ok(secs) = s.parse::<f64>() {
        return Duration::try_from_secs_f64(secs)
            .map_err(|e| format!("invalid duration {s:?}: {e}"));
    }
    let mut total = 0.0f64;
    let mut rest = s;
    while !rest.is_empty() {
        let num_len = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '.'))
            .ok_or_else(|| format!("invalid duration {s:?}: missing unit"))?;
        let (num, tail) = rest.split_at(num_len);
        let value: f64 = num
            .parse()
            .map_err(|_| format!("invalid duration {s:?}: expected a number before the unit"))?;
        let unit_len = tail
            .find(|c: char| c.is_ascii_digit() || c == '.')
            .unwrap_or(tail.len());
        let (unit, next) = tail.split_at(unit_len);
        let scale = match unit {
            "ms" => 0.001,
            "s" => 1.0,
            "m" => 60.0,
            "h" => 3600.0,
            other => return Err(format!("invalid duration {s:?}: unknown unit {other:?}")),
        };
        total += value * scale;
        rest = next;
    }
    Duration::try_from_secs_f64(total).map_err(|e| format!("invalid duration {s:?}: {e}"))
}

/// Formats a duration the way [`parse_duration`] reads it (`5m`, `90s`, `1500ms`).
pub fn format_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms.is_multiple_of(60_000) && ms > 0 {
        format!("{}m", ms / 60_000)
    } else if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Parses a percentage (`10%`, or a plain number of percent) into a ratio 0–1.
pub fn parse_percent(s: &str) -> Result<f64, String> {
    let t = s.trim();
    let num = t.strip_suffix('%').unwrap_or(t).trim();
    let v: f64 = num
        .parse()
        .map_err(|_| format!("invalid percentage {s:?}: expected e.g. \"10%\""))?;
    if !(0.0..=100.0).contains(&v) {
        return Err(format!("percentage {s:?} is outside 0–100%"));
    }
    Ok(v / 100.0)
}

/// A Kubernetes quantity in YAML: a string (`250m`, `200Mi`) or a plain number.
#[derive(Deserialize)]
#[serde(untagged)]
enum QuantityText {
    Int(i64),
    Float(f64),
    Text(String),
}

impl QuantityText {
    fn text(self) -> String {
        match self {
            QuantityText::Int(i) => i.to_string(),
            QuantityText::Float(f) => f.to_string(),
            QuantityText::Text(s) => s,
        }
    }
}

/// Serde adapter: a CPU quantity (`250m`, `0.5`, `2`) as millicores.
pub mod cpu_millis {
    use super::*;

    /// Reads a CPU quantity.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = QuantityText::deserialize(d)?.text();
        quantity::parse_nonneg_millis(&text).map_err(serde::de::Error::custom)
    }

    /// Writes millicores as a quantity.
    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&quantity::format_millis(*v))
    }
}

/// Serde adapter: a byte quantity (`200Mi`, `1G`, `1024`) as bytes.
pub mod bytes {
    use super::*;

    /// Reads a byte quantity.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<i64, D::Error> {
        let text = QuantityText::deserialize(d)?.text();
        quantity::parse_nonneg_units(&text).map_err(serde::de::Error::custom)
    }

    /// Writes bytes as a quantity.
    pub fn serialize<S: Serializer>(v: &i64, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&quantity::format_bytes(*v))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_parse_like_go() {
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h30m"), Ok(Duration::from_secs(5400)));
        assert_eq!(parse_duration("1.5s"), Ok(Duration::from_millis(1500)));
        assert_eq!(parse_duration("45"), Ok(Duration::from_secs(45)));
        assert!(parse_duration("5 minutes").is_err());
        assert!(parse_duration("-5s").is_err());
        assert!(parse_duration("").is_err());
        assert_eq!(format_duration(Duration::from_secs(300)), "5m");
        assert_eq!(format_duration(Duration::from_secs(90)), "90s");
    }

    #[test]
    fn rounding_matches_go_math_round() {
        for (x, want) in [
            (0.0, 0),
            (0.49999999999999994, 0),
            (0.5, 1),
            (1.5, 2),
            (2.5, 3),
            (77.5, 78),
            (-0.5, -1),
            (-1.4, -1),
            (99.999, 100),
            (f64::NAN, 0),
        ] {
            assert_eq!(round_half_away(x), want, "{x}");
            if x.is_finite() {
                assert_eq!(round_half_away(x), x.round() as i64, "{x}");
            }
        }
    }

    #[test]
    fn percentages_parse() {
        assert_eq!(parse_percent("10%"), Ok(0.1));
        assert_eq!(parse_percent("5"), Ok(0.05));
        assert!(parse_percent("110%").is_err());
        assert!(parse_percent("ten").is_err());
    }
}
