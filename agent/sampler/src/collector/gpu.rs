//! GPU collector over NVML (`nvml-wrapper`): per device utilisation, memory, running compute
//! processes, temperature and power; capacity = count, model and memory of each device.
//!
//! NVML is loaded at run time. No library (or no driver) on the node → the collector is off
//! with one info log, which is the normal case on CPU-only nodes. A device whose queries
//! fail is reported with its error and left out of the node figures; the other devices and
//! collectors carry on. Node GPU utilisation = mean over healthy devices; GPU memory
//! utilisation = Σ used / Σ total over healthy devices.
//!
//! The default library name is `libnvidia-ml.so.1` (what the driver installs; the unversioned
//! `libnvidia-ml.so` nvml-wrapper looks for exists only with development packages).
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use nvml_wrapper::Nvml;
use nvml_wrapper::enum_wrappers::device::TemperatureSensor;
use nvml_wrapper::error::NvmlError;
use thiserror::Error;

/// The NVML library loaded when no path is configured.
pub const DEFAULT_NVML_LIBRARY: &str = "libnvidia-ml.so.1";

/// Errors of the GPU collector.
#[derive(Debug, Error)]
pub enum GpuError {
    /// NVML was found but could not be initialised (e.g. no permission on `/dev/nvidia*`).
    #[error("initialising NVML from {library}: {source}")]
    Init {
        /// The library path or name.
        library: PathBuf,
        /// NVML's error.
        #[source]
        source: NvmlError,
    },
    /// The device count could not be read.
    #[error("NVML device count: {source}")]
    DeviceCount {
        /// NVML's error.
        #[source]
        source: NvmlError,
    },
}

/// Whether an NVML initialisation error means "this node has no NVIDIA GPU stack".
pub fn means_absent(e: &NvmlError) -> bool {
    matches!(
        e,
        NvmlError::LibloadingError(_)
            | NvmlError::LibraryNotFound
            | NvmlError::DriverNotLoaded
            | NvmlError::FailedToLoadSymbol(_)
    )
}

/// One device's latest state.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuDevice {
    /// NVML index.
    pub index: u32,
    /// NVML UUID (empty when it could not be read).
    pub uuid: String,
    /// Product name.
    pub model: String,
    /// Total memory, bytes.
    pub memory_total_bytes: u64,
    /// Memory in use, bytes.
    pub memory_used_bytes: u64,
    /// Compute utilisation ratio over NVML's last sample period.
    pub utilization: f64,
    /// Running compute processes.
    pub process_count: u32,
    /// Core temperature, °C (0 when the device does not support it).
    pub temperature_celsius: f64,
    /// Power draw, watts (0 when the device does not support it).
    pub power_watts: f64,
    /// Set when the device failed; the figures above are then not meaningful.
    pub error: Option<String>,
}

/// One GPU sample.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuSample {
    /// Every device NVML reports, by index.
    pub devices: Vec<GpuDevice>,
    /// Mean utilisation of the healthy devices; `None` when there are none.
    pub utilization: Option<f64>,
    /// Σ used / Σ total memory of the healthy devices; `None` when there are none.
    pub memory_utilization: Option<f64>,
}

/// Node figures from per-device states: (mean utilisation, memory used ratio).
pub fn aggregate(devices: &[GpuDevice]) -> (Option<f64>, Option<f64>) {
    let healthy = || devices.iter().filter(|d| d.error.is_none());
    let n = healthy().count();
    if n == 0 {
        return (None, None);
    }
    let util = healthy().map(|d| d.utilization).sum::<f64>() / n as f64;
    // Summed as floats: device values come from a C library, and integer sums of
    // implausible ones would overflow (found by fuzzing: tests/fuzz/crashes/sampler_values).
    let total: f64 = healthy().map(|d| d.memory_total_bytes as f64).sum();
    let used: f64 = healthy()
        .map(|d| d.memory_used_bytes.min(d.memory_total_bytes) as f64)
        .sum();
    let mem = if total > 0.0 { used / total } else { 0.0 };
    (super::clamp_ratio(util), super::clamp_ratio(mem))
}

/// An initialised NVML and the static facts of its devices.
pub struct GpuCollector {
    nvml: Nvml,
    /// (uuid, model) per index, read once per device.
    names: Vec<Option<(String, String)>>,
}

impl std::fmt::Debug for GpuCollector {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GpuCollector")
            .field("devices", &self.names.len())
            .finish_non_exhaustive()
    }
}

impl GpuCollector {
    /// Loads and initialises NVML from `library` (default [`DEFAULT_NVML_LIBRARY`]).
    /// `Ok(None)` when the library or the driver is absent.
    pub fn open(library: Option<&Path>) -> Result<Option<GpuCollector>, GpuError> {
        let lib: &OsStr = library.map_or(OsStr::new(DEFAULT_NVML_LIBRARY), Path::as_os_str);
        match Nvml::builder().lib_path(lib).init() {
            Ok(nvml) => Ok(Some(GpuCollector {
                nvml,
                names: Vec::new(),
            })),
            Err(e) if means_absent(&e) => {
                tracing::debug!(library = ?lib, error = %e, "NVML not loadable");
                Ok(None)
            }
            Err(source) => Err(GpuError::Init {
                library: PathBuf::from(lib),
                source,
            }),
        }
    }

    /// Queries every device. Per-device failures are inside the sample; only a failing
    /// device count fails the whole collector.
    pub fn collect(&mut self) -> Result<GpuSample, GpuError> {
        let count = self
            .nvml
            .device_count()
            .map_err(|source| GpuError::DeviceCount { source })?;
        if self.names.len() != count as usize {
            // Devices came or went: indices may now name other boards, so read every
            // identity again rather than keep one under an index that moved.
            self.names.clear();
            self.names.resize(count as usize, None);
        }
        let mut devices = Vec::with_capacity(count as usize);
        for index in 0..count {
            let mut d = GpuDevice {
                index,
                ..GpuDevice::default()
            };
            if let Err(e) = self.query(index, &mut d) {
                d.error = Some(e);
            }
            devices.push(d);
        }
        let (utilization, memory_utilization) = aggregate(&devices);
        Ok(GpuSample {
            devices,
            utilization,
            memory_utilization,
        })
    }

    fn query(&mut self, index: u32, d: &mut GpuDevice) -> Result<(), String> {
        let ctx = |what: &'static str| move |e: NvmlError| format!("{what}: {e}");
        let dev = self
            .nvml
            .device_by_index(index)
            .map_err(ctx("device handle"))?;
        // The UUID every sample (one cheap call): a board replaced under the same index is
        // then named as itself; its model is read again only then.
        let uuid = dev.uuid().map_err(ctx("uuid"))?;
        let slot = &mut self.names[index as usize];
        if slot.as_ref().is_none_or(|(known, _)| *known != uuid) {
            let model = dev.name().map_err(ctx("name"))?;
            *slot = Some((uuid, model));
        }
        if let Some((uuid, model)) = slot {
            d.uuid.clone_from(uuid);
            d.model.clone_from(model);
        }
        let mem = dev.memory_info().map_err(ctx("memory info"))?;
        d.memory_total_bytes = mem.total;
        d.memory_used_bytes = mem.used;
        let util = dev.utilization_rates().map_err(ctx("utilization"))?;
        d.utilization = (f64::from(util.gpu) / 100.0).clamp(0.0, 1.0);
        // The remaining figures are optional on many boards.
        d.process_count = optional(dev.running_compute_processes_count())
            .map_err(ctx("compute processes"))?
            .unwrap_or(0);
        d.temperature_celsius = optional(dev.temperature(TemperatureSensor::Gpu))
            .map_err(ctx("temperature"))?
            .map_or(0.0, f64::from);
        d.power_watts = optional(dev.power_usage())
            .map_err(ctx("power"))?
            .map_or(0.0, |mw| f64::from(mw) / 1000.0);
        Ok(())
    }
}

/// `NotSupported` → `Ok(None)`.
fn optional<T>(r: Result<T, NvmlError>) -> Result<Option<T>, NvmlError> {
    match r {
        Ok(v) => Ok(Some(v)),
        Err(NvmlError::NotSupported) => Ok(None),
        Err(e) => Err(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn aggregate_skips_failed_devices() {
        let ok = |u, used, total| GpuDevice {
            utilization: u,
            memory_used_bytes: used,
            memory_total_bytes: total,
            ..GpuDevice::default()
        };
        let failed = GpuDevice {
            utilization: 1.0,
            memory_used_bytes: 100,
            memory_total_bytes: 100,
            error: Some("utilization: GPU lost".into()),
            ..GpuDevice::default()
        };
        let (u, m) = aggregate(&[ok(0.2, 10, 100), ok(0.6, 30, 100), failed.clone()]);
        assert!((u.expect("healthy") - 0.4).abs() < 1e-12);
        assert_eq!(m, Some(0.2));
        assert_eq!(aggregate(&[failed]), (None, None));
        assert_eq!(aggregate(&[]), (None, None));
        // Found by fuzzing: totals whose integer sum overflows u64.
        let (_, m) = aggregate(&[ok(0.1, u64::MAX, u64::MAX), ok(0.1, 0, u64::MAX)]);
        assert_eq!(m, Some(0.5));
    }

    #[test]
    fn missing_library_is_absent_not_error() {
        let r = GpuCollector::open(Some(Path::new("/nonexistent/libnvidia-ml.so.1")));
        assert!(matches!(r, Ok(None)), "{r:?}");
    }
}
