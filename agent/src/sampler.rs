//! The sampler: runs every collector once per call and assembles a complete, self-contained
//! `NodeReport` — capacity, windowed utilisation per resource, per-device detail, eviction
//! signals, per-pod usage and the collectors that failed.
//!
//! This is the library entry point the scorer's standalone mode calls directly; the agent
//! binary calls it from its sampling thread. It does blocking file I/O (well under a
//! millisecond on a typical node) and never fails as a whole.
//!
//! Rules the report follows:
//! - Every ratio is finite and in [0, 1] (clamped; a NaN is never pushed or sent).
//! - A resource is in `usage` when the node has it: cpu and memory once their files have
//!   been read, network with at least one counted NIC, disk_io with at least one whole disk,
//!   gpu and gpu_memory with at least one GPU.
//! - **First sample**: rate-based resources (cpu, network, disk_io) have no delta yet; they
//!   are reported with `latest_ratio` 0 and windows with `sample_count` 0, and nothing is
//!   pushed into their windows. Memory and GPU are levels and are recorded from the first
//!   sample. A NIC or disk that appears later contributes from its second sample.
//! - A collector that fails is listed in `collector_errors`; its resources keep the windows
//!   they had and `latest_ratio` is the last good sample, and nothing is pushed.
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use loadstar_common::convert::{capacity_to_proto, load_to_proto};
use loadstar_common::model::{
    Disk, Gpu, LoadSummary, Nic, NodeCapacity, ResourceKind, ResourceLoad,
};
use loadstar_common::pb;
use loadstar_common::window::{WindowError, WindowSet};
use thiserror::Error;
use tracing::{debug, info, warn};

use crate::collector::cgroup::CgroupCollector;
use crate::collector::clamp_ratio;
use crate::collector::cpu::CpuCollector;
use crate::collector::disk::DiskCollector;
use crate::collector::filesystem::FilesystemCollector;
use crate::collector::gpu::{GpuCollector, GpuSample};
use crate::collector::memory::MemoryCollector;
use crate::collector::network::{NetworkCollector, NicFilter};

/// Default time between samples.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(1);
/// Default window lengths in seconds.
pub const DEFAULT_WINDOWS: [u32; 3] = [60, 300, 900];
/// Default link speed of a NIC whose speed the kernel does not know: 10 Gbit/s.
pub const DEFAULT_NIC_SPEED_BITS_PER_SECOND: u64 = 10_000_000_000;
/// Default PID whose network namespace is measured: the host's init.
pub const DEFAULT_NET_NAMESPACE_PID: u32 = 1;
/// Longest accepted sample interval.
pub const MAX_INTERVAL: Duration = Duration::from_secs(3600);
/// At most this many per-pod errors are listed in one report.
const MAX_POD_ERRORS: usize = 5;
/// A failing GPU initialisation is retried once every this many samples.
const GPU_RETRY_SAMPLES: u32 = 60;
/// A collector error that repeats unchanged is logged again after this many samples.
const ERROR_RELOG_SAMPLES: u32 = 300;

/// Errors of the sampler's construction.
#[derive(Debug, Error)]
pub enum SamplerError {
    /// The configuration is unusable.
    #[error("invalid sampler configuration: {reason}")]
    InvalidConfig {
        /// What is wrong.
        reason: String,
    },
    /// The windows could not be built.
    #[error("building windows: {0}")]
    Window(#[from] WindowError),
}

/// What to sample and how. Paths are roots so that the host's `/proc` and `/sys` can be
/// mounted elsewhere (`/host/proc`) and tests can point at fixture trees.
#[derive(Debug, Clone, PartialEq)]
pub struct SamplerConfig {
    /// Kubernetes node name put in every report.
    pub node_name: String,
    /// procfs root (default `/proc`).
    pub proc_root: PathBuf,
    /// sysfs root (default `/sys`).
    pub sys_root: PathBuf,
    /// Root filesystem whose free space and inodes are the nodefs signals (default `/`).
    pub rootfs: PathBuf,
    /// cgroup filesystem root (default `/sys/fs/cgroup`).
    pub cgroup_root: PathBuf,
    /// Time between samples; sizes the windows (default 1 s).
    pub interval: Duration,
    /// Window lengths in seconds (default 60, 300, 900); reported shortest first.
    pub windows: Vec<u32>,
    /// Interface patterns counted even when virtual.
    pub net_include: Vec<String>,
    /// Interface patterns never counted (wins over `net_include`).
    pub net_exclude: Vec<String>,
    /// Read `<proc_root>/<pid>/net/dev` (default PID 1: the host's namespace when the host's
    /// `/proc` is mounted); `None` reads `<proc_root>/net/dev`, the agent's own namespace.
    pub net_namespace_pid: Option<u32>,
    /// Link speed assumed when the kernel reports none, bits per second (default 10 Gbit/s).
    pub default_nic_speed_bits_per_second: u64,
    /// Maximum throughput of every disk, bytes per second; `None` = highest observed.
    pub disk_max_bytes_per_second: Option<u64>,
    /// Whether to try NVML at all (default true).
    pub gpu: bool,
    /// NVML library path (default `libnvidia-ml.so.1` from the loader's search path).
    pub nvml_library: Option<PathBuf>,
    /// Whether to read per-pod usage from cgroups (default true).
    pub pods: bool,
}

impl Default for SamplerConfig {
    /// Reads this machine: `/proc`, `/sys`, `/`, `/sys/fs/cgroup`, 1 s, windows 60/300/900 s,
    /// PID 1's network namespace, 10 Gbit/s default NIC speed, observed disk rates, GPU and
    /// pods on; the node name from `NODE_NAME`, else the hostname.
    fn default() -> Self {
        SamplerConfig {
            node_name: default_node_name(),
            proc_root: PathBuf::from("/proc"),
            sys_root: PathBuf::from("/sys"),
            rootfs: PathBuf::from("/"),
            cgroup_root: PathBuf::from("/sys/fs/cgroup"),
            interval: DEFAULT_INTERVAL,
            windows: DEFAULT_WINDOWS.to_vec(),
            net_include: Vec::new(),
            net_exclude: Vec::new(),
            net_namespace_pid: Some(DEFAULT_NET_NAMESPACE_PID),
            default_nic_speed_bits_per_second: DEFAULT_NIC_SPEED_BITS_PER_SECOND,
            disk_max_bytes_per_second: None,
            gpu: true,
            nvml_library: None,
            pods: true,
        }
    }
}

/// `NODE_NAME` when set and non-empty, else the kernel's hostname, else `unknown`.
pub fn default_node_name() -> String {
    std::env::var("NODE_NAME")
        .ok()
        .filter(|n| !n.trim().is_empty())
        .unwrap_or_else(|| {
            let uname = rustix::system::uname();
            let host = uname.nodename().to_string_lossy().into_owned();
            if host.is_empty() {
                "unknown".to_string()
            } else {
                host
            }
        })
}

impl SamplerConfig {
    /// The `net/dev` file the network collector reads.
    pub fn net_dev_path(&self) -> PathBuf {
        match self.net_namespace_pid {
            Some(pid) => self.proc_root.join(pid.to_string()).join("net/dev"),
            None => self.proc_root.join("net/dev"),
        }
    }

    /// Checks the configuration; the windows are returned sorted and deduplicated.
    pub fn validate(&self) -> Result<Vec<u32>, SamplerError> {
        let invalid = |reason: String| Err(SamplerError::InvalidConfig { reason });
        if self.node_name.trim().is_empty() {
            return invalid("node name is empty".into());
        }
        if self.interval.is_zero() || self.interval > MAX_INTERVAL {
            return invalid(format!(
                "interval {:?} must be in (0, {:?}]",
                self.interval, MAX_INTERVAL
            ));
        }
        let mut windows = self.windows.clone();
        windows.sort_unstable();
        windows.dedup();
        if windows.is_empty() {
            return invalid("at least one window is needed".into());
        }
        if let Some(w) = windows
            .iter()
            .find(|&&w| f64::from(w) < self.interval.as_secs_f64())
        {
            return invalid(format!(
                "window {w}s is shorter than the interval {:?}",
                self.interval
            ));
        }
        if self.default_nic_speed_bits_per_second == 0 {
            return invalid("default NIC speed must be positive".into());
        }
        if self.disk_max_bytes_per_second == Some(0) {
            return invalid("disk max rate must be positive".into());
        }
        Ok(windows)
    }
}

enum GpuState {
    Off,
    Failed { error: String, retry_in: u32 },
    Ready(Box<GpuCollector>),
}

/// Logs a collector's errors when they start, change, recur after a while, or stop.
#[derive(Default)]
struct ErrorLog {
    last: [Option<(String, u32)>; COLLECTORS.len()],
}

const COLLECTORS: [&str; 7] = [
    "cpu",
    "memory",
    "network",
    "disk",
    "filesystem",
    "gpu",
    "cgroup",
];

impl ErrorLog {
    fn record(&mut self, collector: usize, message: Option<&str>) {
        let name = COLLECTORS[collector];
        let slot = &mut self.last[collector];
        match (message, slot.as_mut()) {
            (None, None) => {}
            (None, Some(_)) => {
                info!(collector = name, "collector recovered");
                *slot = None;
            }
            (Some(m), Some((prev, n))) if prev == m => {
                *n += 1;
                if n.is_multiple_of(ERROR_RELOG_SAMPLES) {
                    warn!(
                        collector = name,
                        error = m,
                        repeats = *n,
                        "collector still failing"
                    );
                }
            }
            (Some(m), _) => {
                warn!(collector = name, error = m, "collector failed");
                *slot = Some((m.to_string(), 0));
            }
        }
    }
}

/// Takes samples of every collector and keeps the windows. See the module docs.
pub struct Sampler {
    config: SamplerConfig,
    instance: String,
    sequence: u64,
    cpu: CpuCollector,
    memory: MemoryCollector,
    network: NetworkCollector,
    disk: DiskCollector,
    filesystem: FilesystemCollector,
    gpu: GpuState,
    cgroup: Option<CgroupCollector>,
    windows: Vec<WindowSet>,
    latest: [Option<f64>; 6],
    present: [bool; 6],
    capacity: NodeCapacity,
    memory_available_bytes: u64,
    errors: ErrorLog,
}

impl std::fmt::Debug for Sampler {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sampler")
            .field("node_name", &self.config.node_name)
            .field("instance", &self.instance)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl Sampler {
    /// Builds the collectors and windows. Fails only on an invalid configuration; a missing
    /// NVML library switches the GPU collector off with one info log.
    pub fn new(config: SamplerConfig) -> Result<Sampler, SamplerError> {
        let windows = config.validate()?;
        let interval = config.interval.as_secs_f64();
        let sets = ResourceKind::ALL
            .iter()
            .map(|_| WindowSet::for_interval(&windows, interval))
            .collect::<Result<Vec<_>, _>>()?;
        let gpu = if config.gpu {
            open_gpu(&config)
        } else {
            debug!("GPU collector disabled by configuration");
            GpuState::Off
        };
        let filter = NicFilter {
            include: config.net_include.clone(),
            exclude: config.net_exclude.clone(),
        };
        Ok(Sampler {
            instance: crate::entropy::instance_id(),
            sequence: 0,
            cpu: CpuCollector::new(&config.proc_root, &config.sys_root),
            memory: MemoryCollector::new(&config.proc_root),
            network: NetworkCollector::new(
                config.net_dev_path(),
                &config.sys_root,
                filter,
                config.default_nic_speed_bits_per_second,
            ),
            disk: DiskCollector::new(
                &config.proc_root,
                &config.sys_root,
                config.disk_max_bytes_per_second,
            ),
            filesystem: FilesystemCollector::new(&config.rootfs),
            gpu,
            cgroup: config
                .pods
                .then(|| CgroupCollector::new(&config.cgroup_root)),
            windows: sets,
            latest: [None; 6],
            present: [false; 6],
            capacity: NodeCapacity::default(),
            memory_available_bytes: 0,
            errors: ErrorLog::default(),
            config: SamplerConfig { windows, ..config },
        })
    }

    /// The configuration in use (windows sorted and deduplicated).
    pub fn config(&self) -> &SamplerConfig {
        &self.config
    }

    /// The random id of this sampler, sent as `agent_instance`.
    pub fn instance(&self) -> &str {
        &self.instance
    }

    /// Takes one sample of every collector and returns a complete report (never fails as a
    /// whole; collector failures go into `collector_errors`). `sequence` increments per call,
    /// starting at 1.
    pub fn sample(&mut self) -> pb::NodeReport {
        let _span = tracing::debug_span!("sample", sequence = self.sequence + 1).entered();
        let now = Instant::now();
        let time = SystemTime::now();
        self.sequence += 1;
        let mut errors: Vec<pb::CollectorError> = Vec::new();
        let mut report = pb::NodeReport {
            node_name: self.config.node_name.clone(),
            agent_version: loadstar_common::VERSION.to_string(),
            sequence: self.sequence,
            sample_time_unix_nanos: time
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX)),
            sample_interval_seconds: self.config.interval.as_secs_f64(),
            agent_instance: self.instance.clone(),
            ..pb::NodeReport::default()
        };

        // CPU.
        let result = self.cpu.collect();
        let cpu_error = match &result {
            Err(e) => Some(e.to_string()),
            Ok(Some(s)) => s.frequency_error.clone(),
            Ok(None) => None,
        };
        self.note(0, cpu_error, &mut errors);
        match result {
            Ok(Some(s)) => {
                self.capacity.logical_cpus = s.logical_cpus;
                self.capacity.cpu_max_frequency_hz = s.max_frequency_hz;
                self.record(ResourceKind::Cpu, true, s.utilization);
            }
            Ok(None) => self.present[ResourceKind::Cpu.index()] = false,
            Err(_) => {}
        }

        // Memory.
        let result = self.memory.collect();
        self.note(1, result.as_ref().err().map(|e| e.to_string()), &mut errors);
        match result {
            Ok(Some(m)) => {
                self.capacity.memory_bytes = m.total_bytes;
                self.memory_available_bytes = m.available_bytes;
                self.record(ResourceKind::Memory, true, m.used_ratio());
            }
            Ok(None) => self.present[ResourceKind::Memory.index()] = false,
            Err(_) => {}
        }

        // Network.
        let result = self.network.collect(now);
        self.note(2, result.as_ref().err().map(|e| e.to_string()), &mut errors);
        match result {
            Ok(Some(s)) => {
                self.capacity.nics = s
                    .nics
                    .iter()
                    .map(|n| Nic {
                        name: n.name.clone(),
                        speed_bits_per_second: n.speed_bits_per_second,
                        speed_assumed: n.speed_assumed,
                    })
                    .collect();
                report.nics = s
                    .nics
                    .iter()
                    .map(|n| pb::NicUsage {
                        name: n.name.clone(),
                        rx_bytes_per_second: n.rx_bytes_per_second.unwrap_or(0.0),
                        tx_bytes_per_second: n.tx_bytes_per_second.unwrap_or(0.0),
                        utilization_ratio: n.utilization(),
                    })
                    .collect();
                self.record(ResourceKind::Network, !s.nics.is_empty(), s.utilization);
            }
            Ok(None) => {
                self.capacity.nics.clear();
                self.present[ResourceKind::Network.index()] = false;
            }
            Err(_) => {}
        }

        // Disk.
        let result = self.disk.collect(now);
        self.note(3, result.as_ref().err().map(|e| e.to_string()), &mut errors);
        match result {
            Ok(Some(s)) => {
                self.capacity.disks = s
                    .disks
                    .iter()
                    .map(|d| Disk {
                        name: d.name.clone(),
                        max_bytes_per_second: d.max_bytes_per_second,
                        configured: d.configured,
                    })
                    .collect();
                report.disks = s
                    .disks
                    .iter()
                    .map(|d| pb::DiskUsage {
                        name: d.name.clone(),
                        read_bytes_per_second: d.read_bytes_per_second.unwrap_or(0.0),
                        write_bytes_per_second: d.write_bytes_per_second.unwrap_or(0.0),
                        read_iops: d.read_iops.unwrap_or(0.0),
                        write_iops: d.write_iops.unwrap_or(0.0),
                        utilization_ratio: d.utilization.unwrap_or(0.0),
                    })
                    .collect();
                self.record(ResourceKind::DiskIo, !s.disks.is_empty(), s.utilization);
            }
            Ok(None) => {
                self.capacity.disks.clear();
                self.present[ResourceKind::DiskIo.index()] = false;
            }
            Err(_) => {}
        }

        // Filesystem and eviction signals.
        let mut eviction = pb::EvictionSignals::default();
        let result = self.filesystem.collect();
        self.note(4, result.as_ref().err().map(|e| e.to_string()), &mut errors);
        if let Ok(Some(fs)) = result {
            eviction.nodefs_available_ratio = fs.available_ratio.and_then(clamp_ratio);
            eviction.nodefs_inodes_free_ratio = fs.inodes_free_ratio.and_then(clamp_ratio);
            eviction.nodefs_available_bytes = Some(fs.available_bytes);
        }
        eviction.memory_available_bytes = self.memory_available_bytes;
        report.eviction = Some(eviction);

        // GPU.
        let gpu_error = self.sample_gpu(&mut report);
        self.note(5, gpu_error, &mut errors);

        // Pods.
        let mut pod_errors = Vec::new();
        let result = match self.cgroup.as_mut() {
            Some(c) => c.collect(now),
            None => Ok(None),
        };
        let mut cgroup_error = result.as_ref().err().map(|e| e.to_string());
        if let Ok(Some(s)) = result {
            report.pods = s
                .pods
                .into_iter()
                .filter(|p| p.cpu_cores.is_finite())
                .map(|p| pb::PodUsage {
                    pod_uid: p.uid,
                    cpu_cores: p.cpu_cores,
                    memory_working_set_bytes: p.memory_working_set_bytes,
                })
                .collect();
            let n = s.errors.len();
            pod_errors = s
                .errors
                .iter()
                .take(MAX_POD_ERRORS)
                .map(|e| e.to_string())
                .collect();
            if n > MAX_POD_ERRORS {
                pod_errors.push(format!("… and {} more pod errors", n - MAX_POD_ERRORS));
            }
            if let Some(first) = pod_errors.first() {
                cgroup_error = Some(first.clone());
            }
        }
        self.errors.record(6, cgroup_error.as_deref());
        match (cgroup_error, pod_errors.is_empty()) {
            (Some(e), true) => errors.push(collector_error("cgroup", e)),
            (_, false) => {
                errors.extend(pod_errors.into_iter().map(|e| collector_error("cgroup", e)))
            }
            _ => {}
        }

        // Assemble.
        let mut load = LoadSummary::default();
        for kind in ResourceKind::ALL {
            let i = kind.index();
            if self.present[i] {
                load.set(
                    kind,
                    ResourceLoad {
                        latest: self.latest[i].unwrap_or(0.0),
                        windows: self.windows[i].summaries(),
                    },
                );
            }
        }
        report.usage = load_to_proto(&load);
        report.capacity = Some(capacity_to_proto(&self.capacity));
        report.collector_errors = errors;
        debug!(
            elapsed_us = now.elapsed().as_micros() as u64,
            errors = report.collector_errors.len(),
            "sample taken"
        );
        report
    }

    /// Notes a collector's outcome: logs (rate-limited) and lists the error in the report.
    fn note(&mut self, collector: usize, error: Option<String>, out: &mut Vec<pb::CollectorError>) {
        self.errors.record(collector, error.as_deref());
        if let Some(e) = error {
            out.push(collector_error(COLLECTORS[collector], e));
        }
    }

    /// Marks a resource present or not and records its sample, if any.
    fn record(&mut self, kind: ResourceKind, present: bool, value: Option<f64>) {
        let i = kind.index();
        self.present[i] = present;
        if !present {
            return;
        }
        if let Some(v) = value.and_then(clamp_ratio) {
            // `clamp_ratio` guarantees a finite value, which `push` accepts.
            if self.windows[i].push(v).is_ok() {
                self.latest[i] = Some(v);
            }
        }
    }

    /// Samples the GPUs into the report; returns the collector error, if any.
    fn sample_gpu(&mut self, report: &mut pb::NodeReport) -> Option<String> {
        if let GpuState::Failed { error, retry_in } = &mut self.gpu {
            if *retry_in > 0 {
                *retry_in -= 1;
                return Some(error.clone());
            }
            self.gpu = open_gpu(&self.config);
        }
        let GpuState::Ready(gpu) = &mut self.gpu else {
            if let GpuState::Failed { error, .. } = &self.gpu {
                return Some(error.clone());
            }
            self.capacity.gpus.clear();
            self.present[ResourceKind::Gpu.index()] = false;
            self.present[ResourceKind::GpuMemory.index()] = false;
            return None;
        };
        match gpu.collect() {
            Ok(s) => {
                self.apply_gpu(&s, report);
                None
            }
            Err(e) => Some(e.to_string()),
        }
    }

    fn apply_gpu(&mut self, s: &GpuSample, report: &mut pb::NodeReport) {
        self.capacity.gpus = s
            .devices
            .iter()
            .map(|d| Gpu {
                index: d.index,
                uuid: d.uuid.clone(),
                model: d.model.clone(),
                memory_bytes: d.memory_total_bytes,
            })
            .collect();
        report.gpus = s
            .devices
            .iter()
            .map(|d| pb::GpuUsage {
                index: d.index,
                uuid: d.uuid.clone(),
                utilization_ratio: d.utilization,
                memory_used_bytes: d.memory_used_bytes,
                memory_total_bytes: d.memory_total_bytes,
                process_count: d.process_count,
                temperature_celsius: d.temperature_celsius,
                power_watts: d.power_watts,
                error: d.error.clone().unwrap_or_default(),
            })
            .collect();
        let has = !s.devices.is_empty();
        self.record(ResourceKind::Gpu, has, s.utilization);
        self.record(ResourceKind::GpuMemory, has, s.memory_utilization);
    }
}

fn collector_error(collector: &str, message: String) -> pb::CollectorError {
    pb::CollectorError {
        collector: collector.to_string(),
        message,
    }
}

fn open_gpu(config: &SamplerConfig) -> GpuState {
    match GpuCollector::open(config.nvml_library.as_deref()) {
        Ok(Some(g)) => {
            info!("NVML loaded; GPU collector on");
            GpuState::Ready(Box::new(g))
        }
        Ok(None) => {
            info!(
                library = ?config.nvml_library.as_deref().unwrap_or(
                    std::path::Path::new(crate::collector::gpu::DEFAULT_NVML_LIBRARY)
                ),
                "no NVML library or NVIDIA driver on this node; GPU collector off"
            );
            GpuState::Off
        }
        Err(e) => GpuState::Failed {
            error: e.to_string(),
            retry_in: GPU_RETRY_SAMPLES,
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config() -> SamplerConfig {
        SamplerConfig {
            node_name: "n1".into(),
            gpu: false,
            ..SamplerConfig::default()
        }
    }

    #[test]
    fn validation() {
        assert_eq!(config().validate().expect("valid"), vec![60, 300, 900]);
        let c = SamplerConfig {
            windows: vec![900, 60, 60],
            ..config()
        };
        assert_eq!(c.validate().expect("valid"), vec![60, 900]);
        for bad in [
            SamplerConfig {
                interval: Duration::ZERO,
                ..config()
            },
            SamplerConfig {
                windows: vec![],
                ..config()
            },
            SamplerConfig {
                interval: Duration::from_secs(10),
                windows: vec![5],
                ..config()
            },
            SamplerConfig {
                node_name: " ".into(),
                ..config()
            },
            SamplerConfig {
                default_nic_speed_bits_per_second: 0,
                ..config()
            },
        ] {
            assert!(
                matches!(bad.validate(), Err(SamplerError::InvalidConfig { .. })),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn net_dev_path_follows_namespace_choice() {
        let c = SamplerConfig {
            proc_root: "/host/proc".into(),
            ..config()
        };
        assert_eq!(c.net_dev_path(), PathBuf::from("/host/proc/1/net/dev"));
        let own = SamplerConfig {
            net_namespace_pid: None,
            ..c
        };
        assert_eq!(own.net_dev_path(), PathBuf::from("/host/proc/net/dev"));
    }

    /// This machine, twice: sane values, the first-sample rule, and sequence numbering.
    #[test]
    fn samples_this_machine() {
        let mut s = Sampler::new(config()).expect("valid");
        let first = s.sample();
        assert_eq!(first.sequence, 1);
        assert_eq!(first.node_name, "n1");
        assert_eq!(first.agent_instance.len(), 32);
        let cap = first.capacity.as_ref().expect("capacity");
        assert!(cap.logical_cpus >= 1);
        assert!(cap.memory_bytes > 0);
        let cpu = first
            .usage
            .iter()
            .find(|u| u.resource == pb::Resource::Cpu as i32)
            .expect("cpu present");
        assert_eq!(cpu.latest_ratio, 0.0);
        assert!(cpu.windows.iter().all(|w| w.sample_count == 0));
        let mem = first
            .usage
            .iter()
            .find(|u| u.resource == pb::Resource::Memory as i32)
            .expect("memory present");
        assert!(mem.latest_ratio > 0.0 && mem.latest_ratio <= 1.0);
        assert!(mem.windows.iter().all(|w| w.sample_count == 1));
        std::thread::sleep(Duration::from_millis(50));
        let second = s.sample();
        assert_eq!(second.sequence, 2);
        assert!(
            second.collector_errors.is_empty(),
            "{:?}",
            second.collector_errors
        );
        loadstar_common::convert::load_from_proto(&second.usage).expect("valid usage");
        let windows: Vec<u32> = second.usage[0]
            .windows
            .iter()
            .map(|w| w.window_seconds)
            .collect();
        assert_eq!(windows, vec![60, 300, 900]);
    }
}
