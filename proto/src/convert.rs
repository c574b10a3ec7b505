//! Conversions between the wire types (`crate::pb`) and the domain types (`loadstar_common::model`),
//! in one place, validating what comes off the wire: a NaN, an out-of-range ratio or an
//! unknown resource is an error naming the field, never a silent zero.
use thiserror::Error;

use crate::pb;
use loadstar_common::model::{
    Disk, Gpu, LoadSummary, Nic, NodeCapacity, ResourceKind, ResourceLoad,
};
use loadstar_common::window::WindowSummary;

/// Ratios may exceed 1 by this much (counter skew between reads) before they are rejected;
/// values within it are clamped to 1.
pub const RATIO_SLACK: f64 = 0.05;

/// Errors of the conversion module; `field` is the path within the message.
#[derive(Debug, Error, PartialEq, Clone)]
pub enum ConvertError {
    /// A number is NaN or infinite.
    #[error("{field}: non-finite value {value}")]
    NonFinite {
        /// Field path, e.g. `usage[0].windows[1].mean_ratio`.
        field: String,
        /// The value.
        value: f64,
    },
    /// A number is outside its valid range.
    #[error("{field}: value {value} outside [{min}, {max}]")]
    OutOfRange {
        /// Field path.
        field: String,
        /// The value.
        value: f64,
        /// Lowest valid value.
        min: f64,
        /// Highest valid value.
        max: f64,
    },
    /// An enum value is unknown or unspecified.
    #[error("{field}: unknown or unspecified value {value}")]
    UnknownEnum {
        /// Field path.
        field: String,
        /// The raw value.
        value: i32,
    },
    /// Values that must be ordered are not (e.g. a window's `min > max`).
    #[error("{field}: {message}")]
    Inconsistent {
        /// Field path.
        field: String,
        /// What does not hold.
        message: String,
    },
    /// The same resource appears twice.
    #[error("{field}: resource {resource} appears more than once")]
    Duplicate {
        /// Field path.
        field: String,
        /// The resource.
        resource: &'static str,
    },
}

/// Checks that `value` is a finite ratio in [0, 1 + slack] and clamps it to [0, 1].
pub fn ratio(field: impl FnOnce() -> String, value: f64) -> Result<f64, ConvertError> {
    if !value.is_finite() {
        return Err(ConvertError::NonFinite {
            field: field(),
            value,
        });
    }
    if !(0.0..=1.0 + RATIO_SLACK).contains(&value) {
        return Err(ConvertError::OutOfRange {
            field: field(),
            value,
            min: 0.0,
            max: 1.0 + RATIO_SLACK,
        });
    }
    Ok(value.min(1.0))
}

/// Checks that `value` is finite and within `[min, max]`.
pub fn bounded(
    field: impl FnOnce() -> String,
    value: f64,
    min: f64,
    max: f64,
) -> Result<f64, ConvertError> {
    if !value.is_finite() {
        return Err(ConvertError::NonFinite {
            field: field(),
            value,
        });
    }
    if !(min..=max).contains(&value) {
        return Err(ConvertError::OutOfRange {
            field: field(),
            value,
            min,
            max,
        });
    }
    Ok(value)
}

impl From<ResourceKind> for pb::Resource {
    fn from(k: ResourceKind) -> Self {
        match k {
            ResourceKind::Cpu => pb::Resource::Cpu,
            ResourceKind::Memory => pb::Resource::Memory,
            ResourceKind::Network => pb::Resource::Network,
            ResourceKind::DiskIo => pb::Resource::DiskIo,
            ResourceKind::Gpu => pb::Resource::Gpu,
            ResourceKind::GpuMemory => pb::Resource::GpuMemory,
        }
    }
}

impl TryFrom<pb::Resource> for ResourceKind {
    type Error = ();
    fn try_from(r: pb::Resource) -> Result<Self, ()> {
        Ok(match r {
            pb::Resource::Unspecified => return Err(()),
            pb::Resource::Cpu => ResourceKind::Cpu,
            pb::Resource::Memory => ResourceKind::Memory,
            pb::Resource::Network => ResourceKind::Network,
            pb::Resource::DiskIo => ResourceKind::DiskIo,
            pb::Resource::Gpu => ResourceKind::Gpu,
            pb::Resource::GpuMemory => ResourceKind::GpuMemory,
        })
    }
}

/// Wire form of one window's statistics.
pub fn window_to_proto(w: &WindowSummary) -> pb::WindowStats {
    pb::WindowStats {
        window_seconds: w.window_seconds,
        mean_ratio: w.mean,
        stddev_ratio: w.stddev,
        min_ratio: w.min,
        max_ratio: w.max,
        p95_ratio: w.p95,
        sample_count: u64::from(w.count),
    }
}

/// Validated domain form of one window's statistics; `field` names it in error paths (only
/// called on an error: a valid report formats no path).
pub fn window_from_proto(
    field: impl Fn() -> String,
    w: &pb::WindowStats,
) -> Result<WindowSummary, ConvertError> {
    let f = |name: &str| format!("{}.{name}", field());
    let summary = WindowSummary {
        window_seconds: w.window_seconds,
        mean: ratio(|| f("mean_ratio"), w.mean_ratio)?,
        stddev: bounded(|| f("stddev_ratio"), w.stddev_ratio, 0.0, 1.0)?,
        min: ratio(|| f("min_ratio"), w.min_ratio)?,
        max: ratio(|| f("max_ratio"), w.max_ratio)?,
        p95: ratio(|| f("p95_ratio"), w.p95_ratio)?,
        count: u32::try_from(w.sample_count).map_err(|_| ConvertError::OutOfRange {
            field: f("sample_count"),
            value: w.sample_count as f64,
            min: 0.0,
            max: f64::from(u32::MAX),
        })?,
    };
    // Statistics of one set of samples are ordered; allow rounding in the last bits.
    const EPS: f64 = 1e-9;
    let (min, max) = (summary.min - EPS, summary.max + EPS);
    if !(min <= summary.mean && summary.mean <= max && min <= summary.p95 && summary.p95 <= max) {
        return Err(ConvertError::Inconsistent {
            field: field(),
            message: format!(
                "window statistics out of order: need min ≤ mean ≤ max and min ≤ p95 ≤ max, \
                 got min {}, mean {}, p95 {}, max {}",
                summary.min, summary.mean, summary.p95, summary.max
            ),
        });
    }
    Ok(summary)
}

/// Wire form of a node's load.
pub fn load_to_proto(load: &LoadSummary) -> Vec<pb::ResourceUsage> {
    load.iter()
        .map(|(k, l)| pb::ResourceUsage {
            resource: pb::Resource::from(k) as i32,
            latest_ratio: l.latest,
            windows: l.windows.iter().map(window_to_proto).collect(),
        })
        .collect()
}

/// Validated domain form of a node's load (`usage` field of a NodeReport).
pub fn load_from_proto(usage: &[pb::ResourceUsage]) -> Result<LoadSummary, ConvertError> {
    let mut load = LoadSummary::default();
    for (i, u) in usage.iter().enumerate() {
        // Paths are formatted only for an error: every report passes through here.
        let field = || format!("usage[{i}]");
        let kind = pb::Resource::try_from(u.resource)
            .ok()
            .and_then(|r| ResourceKind::try_from(r).ok())
            .ok_or_else(|| ConvertError::UnknownEnum {
                field: format!("{}.resource", field()),
                value: u.resource,
            })?;
        if load.get(kind).is_some() {
            return Err(ConvertError::Duplicate {
                field: field(),
                resource: kind.name(),
            });
        }
        let latest = ratio(|| format!("{}.latest_ratio", field()), u.latest_ratio)?;
        let mut windows = u
            .windows
            .iter()
            .enumerate()
            .map(|(j, w)| window_from_proto(|| format!("{}.windows[{j}]", field()), w))
            .collect::<Result<Vec<_>, _>>()?;
        windows.sort_by_key(|w| w.window_seconds);
        load.set(kind, ResourceLoad { latest, windows });
    }
    Ok(load)
}

/// Wire form of a node's capacity.
pub fn capacity_to_proto(c: &NodeCapacity) -> pb::NodeCapacity {
    pb::NodeCapacity {
        logical_cpus: c.logical_cpus,
        cpu_max_frequency_hz: c.cpu_max_frequency_hz,
        memory_bytes: c.memory_bytes,
        nics: c
            .nics
            .iter()
            .map(|n| pb::NicCapacity {
                name: n.name.clone(),
                speed_bits_per_second: n.speed_bits_per_second,
                speed_assumed: n.speed_assumed,
            })
            .collect(),
        disks: c
            .disks
            .iter()
            .map(|d| pb::DiskCapacity {
                name: d.name.clone(),
                max_bytes_per_second: d.max_bytes_per_second,
                rate_source: if d.configured {
                    pb::DiskRateSource::Configured
                } else {
                    pb::DiskRateSource::Observed
                } as i32,
            })
            .collect(),
        gpus: c
            .gpus
            .iter()
            .map(|g| pb::GpuCapacity {
                index: g.index,
                uuid: g.uuid.clone(),
                model: g.model.clone(),
                memory_bytes: g.memory_bytes,
            })
            .collect(),
    }
}

/// A NIC's capacity: the one place a [`Nic`] is put together, both off the wire
/// ([`capacity_from_proto`]) and by the agent's sampler from its network collector.
pub fn nic_capacity(name: &str, speed_bits_per_second: u64, speed_assumed: bool) -> Nic {
    Nic {
        name: name.to_string(),
        speed_bits_per_second,
        speed_assumed,
    }
}

/// A whole disk's capacity (`configured`: the rate is the operator's, not the highest
/// observed): the one place a [`Disk`] is put together, off the wire and by the sampler.
pub fn disk_capacity(name: &str, max_bytes_per_second: u64, configured: bool) -> Disk {
    Disk {
        name: name.to_string(),
        max_bytes_per_second,
        configured,
    }
}

/// A GPU's capacity: the one place a [`Gpu`] is put together, off the wire and by the sampler.
pub fn gpu_capacity(index: u32, uuid: &str, model: &str, memory_bytes: u64) -> Gpu {
    Gpu {
        index,
        uuid: uuid.to_string(),
        model: model.to_string(),
        memory_bytes,
    }
}

/// Validated domain form of a node's capacity.
pub fn capacity_from_proto(c: &pb::NodeCapacity) -> Result<NodeCapacity, ConvertError> {
    use crate::limits::capacity as cap;
    // Paths are formatted only for an error: every report passes through here.
    fn int(
        field: impl FnOnce() -> String,
        value: u64,
        min: u64,
        max: u64,
    ) -> Result<u64, ConvertError> {
        bounded(field, value as f64, min as f64, max as f64).map(|_| value)
    }
    // 0 is a valid wire value (the agent could not count CPUs); the scorer refuses it.
    int(
        || "capacity.logical_cpus".into(),
        c.logical_cpus.into(),
        0,
        cap::MAX_LOGICAL_CPUS.into(),
    )?;
    int(
        || "capacity.memory_bytes".into(),
        c.memory_bytes,
        0,
        cap::MAX_MEMORY_BYTES,
    )?;
    for (i, n) in c.nics.iter().enumerate() {
        int(
            || format!("capacity.nics[{i}].speed_bits_per_second"),
            n.speed_bits_per_second,
            0,
            cap::MAX_NIC_BITS_PER_SECOND,
        )?;
    }
    for (i, d) in c.disks.iter().enumerate() {
        int(
            || format!("capacity.disks[{i}].max_bytes_per_second"),
            d.max_bytes_per_second,
            0,
            cap::MAX_DISK_BYTES_PER_SECOND,
        )?;
    }
    for (i, g) in c.gpus.iter().enumerate() {
        int(
            || format!("capacity.gpus[{i}].memory_bytes"),
            g.memory_bytes,
            0,
            cap::MAX_GPU_MEMORY_BYTES,
        )?;
    }
    Ok(NodeCapacity {
        logical_cpus: c.logical_cpus,
        cpu_max_frequency_hz: bounded(
            || "capacity.cpu_max_frequency_hz".into(),
            c.cpu_max_frequency_hz,
            0.0,
            cap::MAX_CPU_FREQUENCY_HZ,
        )?,
        memory_bytes: c.memory_bytes,
        nics: c
            .nics
            .iter()
            .map(|n| nic_capacity(&n.name, n.speed_bits_per_second, n.speed_assumed))
            .collect(),
        disks: c
            .disks
            .iter()
            .map(|d| {
                let configured = d.rate_source == pb::DiskRateSource::Configured as i32;
                disk_capacity(&d.name, d.max_bytes_per_second, configured)
            })
            .collect(),
        gpus: c
            .gpus
            .iter()
            .map(|g| gpu_capacity(g.index, &g.uuid, &g.model, g.memory_bytes))
            .collect(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample_load() -> LoadSummary {
        let mut load = LoadSummary::default();
        load.set(
            ResourceKind::Cpu,
            ResourceLoad {
                latest: 0.5,
                windows: vec![WindowSummary {
                    window_seconds: 60,
                    mean: 0.4,
                    stddev: 0.1,
                    min: 0.2,
                    max: 0.7,
                    p95: 0.65,
                    count: 60,
                }],
            },
        );
        load
    }

    #[test]
    fn load_round_trips() {
        let load = sample_load();
        assert_eq!(load_from_proto(&load_to_proto(&load)), Ok(load));
    }

    #[test]
    fn capacity_round_trips() {
        let c = NodeCapacity {
            logical_cpus: 8,
            cpu_max_frequency_hz: 3.2e9,
            memory_bytes: 1 << 34,
            nics: vec![Nic {
                name: "eth0".into(),
                speed_bits_per_second: 10_000_000_000,
                speed_assumed: false,
            }],
            disks: vec![Disk {
                name: "nvme0n1".into(),
                max_bytes_per_second: 2_000_000_000,
                configured: true,
            }],
            gpus: vec![Gpu {
                index: 0,
                uuid: "GPU-1".into(),
                model: "A100".into(),
                memory_bytes: 40 << 30,
            }],
        };
        assert_eq!(capacity_from_proto(&capacity_to_proto(&c)), Ok(c));
    }

    #[test]
    fn bad_values_name_the_field() {
        let mut usage = load_to_proto(&sample_load());
        usage[0].windows[0].mean_ratio = f64::NAN;
        assert_eq!(
            load_from_proto(&usage).expect_err("NaN").to_string(),
            "usage[0].windows[0].mean_ratio: non-finite value NaN"
        );
        let mut usage = load_to_proto(&sample_load());
        usage[0].latest_ratio = 3.0;
        assert!(matches!(
            load_from_proto(&usage),
            Err(ConvertError::OutOfRange { .. })
        ));
        let mut usage = load_to_proto(&sample_load());
        usage[0].resource = 0;
        assert!(matches!(
            load_from_proto(&usage),
            Err(ConvertError::UnknownEnum { .. })
        ));
        let mut usage = load_to_proto(&sample_load());
        usage[0].windows[0].sample_count = u64::from(u32::MAX) + 1;
        assert_eq!(
            load_from_proto(&usage).expect_err("count").to_string(),
            "usage[0].windows[0].sample_count: value 4294967296 outside [0, 4294967295]"
        );
        usage[0].windows[0].sample_count = u64::from(u32::MAX);
        assert!(load_from_proto(&usage).is_ok());
        let mut usage = load_to_proto(&sample_load());
        usage.push(usage[0].clone());
        assert!(matches!(
            load_from_proto(&usage),
            Err(ConvertError::Duplicate { .. })
        ));
    }

    #[test]
    fn slack_is_clamped() {
        assert_eq!(ratio(|| "x".into(), 1.01), Ok(1.0));
        assert!(ratio(|| "x".into(), -0.01).is_err());
    }
}
