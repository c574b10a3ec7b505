//! The sampler's collectors, by name, and one function per resource that runs its collector
//! and writes the outcome into the node's state (windows, capacity) and the report. Each
//! function returns the collector's errors; none of them stops the others.
use std::path::{Path, PathBuf};
use std::time::Instant;

use loadstar_common::model::{LoadSummary, NodeCapacity, ResourceKind, ResourceLoad};
use loadstar_common::window::{WindowError, WindowSet};
use loadstar_proto::convert::{disk_capacity, gpu_capacity, nic_capacity};
use loadstar_proto::pb;
use tracing::{debug, info};

use super::config::SamplerConfig;
use crate::collector::FileError;
use crate::collector::cgroup::{CgroupCollector, CgroupSample};
use crate::collector::clamp_ratio;
use crate::collector::cpu::CpuCollector;
use crate::collector::disk::{DiskCollector, DiskRate};
use crate::collector::filesystem::FilesystemCollector;
use crate::collector::gpu::{DEFAULT_NVML_LIBRARY, GpuCollector, GpuDevice, GpuSample};
use crate::collector::memory::MemoryCollector;
use crate::collector::network::{NetworkCollector, NicFilter, NicRate};

/// Collector names, as they appear in `collector_errors`, in logs and in the agent's
/// `collector` metric label.
pub(super) const CPU: &str = "cpu";
/// See [`CPU`].
pub(super) const MEMORY: &str = "memory";
/// See [`CPU`].
pub(super) const NETWORK: &str = "network";
/// See [`CPU`].
pub(super) const DISK: &str = "disk";
/// See [`CPU`].
pub(super) const FILESYSTEM: &str = "filesystem";
/// See [`CPU`].
pub(super) const GPU: &str = "gpu";
/// See [`CPU`]: the per-pod collector.
pub(super) const CGROUP: &str = "cgroup";

/// At most this many per-pod errors are listed in one report.
const MAX_POD_ERRORS: usize = 5;
/// A failing GPU initialisation is retried once every this many samples.
const GPU_RETRY_SAMPLES: u32 = 60;

/// What the sampler keeps of the node between samples.
#[derive(Debug)]
pub(super) struct NodeState {
    /// Per resource, by [`ResourceKind::index`].
    resources: Vec<ResourceState>,
    /// The latest capacity every collector reported.
    capacity: NodeCapacity,
    /// The last MemAvailable read (0 until memory was read once).
    memory_available_bytes: u64,
}

/// One resource's windows, its last good sample, and whether the node has it.
#[derive(Debug)]
struct ResourceState {
    windows: WindowSet,
    latest: Option<f64>,
    present: bool,
}

impl NodeState {
    /// Empty windows of `windows` seconds for every resource, sampled every `interval_seconds`.
    pub(super) fn new(windows: &[u32], interval_seconds: f64) -> Result<Self, WindowError> {
        let resources = ResourceKind::ALL
            .iter()
            .map(|_| {
                Ok(ResourceState {
                    windows: WindowSet::for_interval(windows, interval_seconds)?,
                    latest: None,
                    present: false,
                })
            })
            .collect::<Result<Vec<_>, WindowError>>()?;
        Ok(NodeState {
            resources,
            capacity: NodeCapacity::default(),
            memory_available_bytes: 0,
        })
    }

    /// Marks a resource present or not and records its sample, if any.
    fn record(&mut self, kind: ResourceKind, present: bool, value: Option<f64>) {
        let r = &mut self.resources[kind.index()];
        r.present = present;
        if !present {
            return;
        }
        if let Some(v) = value.and_then(clamp_ratio) {
            // `clamp_ratio` guarantees a finite value, which `push` accepts.
            if r.windows.push(v).is_ok() {
                r.latest = Some(v);
            }
        }
    }

    /// The node does not have this resource (any more).
    fn absent(&mut self, kind: ResourceKind) {
        self.resources[kind.index()].present = false;
    }

    /// Latest value and window summaries of every present resource.
    pub(super) fn load(&mut self) -> LoadSummary {
        let mut load = LoadSummary::default();
        for kind in ResourceKind::ALL {
            let r = &mut self.resources[kind.index()];
            if r.present {
                let latest = r.latest.unwrap_or(0.0);
                let windows = r.windows.summaries();
                load.set(kind, ResourceLoad { latest, windows });
            }
        }
        load
    }

    /// The latest capacity.
    pub(super) fn capacity(&self) -> &NodeCapacity {
        &self.capacity
    }
}

/// Whether NVML is usable.
enum GpuState {
    /// No library or driver, or switched off.
    Off,
    /// Initialisation failed; retried after `retry_in` more samples.
    Failed { error: String, retry_in: u32 },
    /// Initialised.
    Ready(Box<GpuCollector>),
}

/// Every collector the sampler runs, by name.
pub(super) struct Collectors {
    cpu: CpuCollector,
    memory: MemoryCollector,
    network: NetworkCollector,
    disk: DiskCollector,
    filesystem: FilesystemCollector,
    gpu: GpuState,
    nvml_library: Option<PathBuf>,
    /// `None` when per-pod usage is switched off.
    pods: Option<CgroupCollector>,
}

impl Collectors {
    /// Builds every collector for `config`; NVML is loaded now when the GPU is on.
    pub(super) fn new(config: &SamplerConfig) -> Self {
        let gpu = if config.gpu {
            open_gpu(config.nvml_library.as_deref())
        } else {
            debug!("GPU collector disabled by configuration");
            GpuState::Off
        };
        let filter = NicFilter {
            include: config.net_include.clone(),
            exclude: config.net_exclude.clone(),
        };
        Collectors {
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
            nvml_library: config.nvml_library.clone(),
            pods: config
                .pods
                .then(|| CgroupCollector::new(&config.cgroup_root)),
        }
    }

    /// CPU utilisation, logical CPUs and frequency. A frequency that could not be read is an
    /// error of the collector although utilisation is still recorded.
    pub(super) fn cpu(&mut self, node: &mut NodeState) -> Option<String> {
        match self.cpu.collect() {
            Ok(Some(s)) => {
                node.capacity.logical_cpus = s.logical_cpus;
                node.capacity.cpu_max_frequency_hz = s.max_frequency_hz;
                node.record(ResourceKind::Cpu, true, s.utilization);
                s.frequency_error
            }
            Ok(None) => {
                node.absent(ResourceKind::Cpu);
                None
            }
            Err(e) => Some(e.to_string()),
        }
    }

    /// Memory utilisation and capacity, and the `memory.available` eviction signal (the last
    /// value read, also when this read failed).
    pub(super) fn memory(
        &mut self,
        node: &mut NodeState,
        report: &mut pb::NodeReport,
    ) -> Option<String> {
        let error = match self.memory.collect() {
            Ok(Some(m)) => {
                node.capacity.memory_bytes = m.total_bytes;
                node.memory_available_bytes = m.available_bytes;
                node.record(ResourceKind::Memory, true, m.used_ratio());
                None
            }
            Ok(None) => {
                node.absent(ResourceKind::Memory);
                None
            }
            Err(e) => Some(e.to_string()),
        };
        eviction(report).memory_available_bytes = node.memory_available_bytes;
        error
    }

    /// Network utilisation, per-NIC usage and NIC capacity.
    pub(super) fn network(
        &mut self,
        now: Instant,
        node: &mut NodeState,
        report: &mut pb::NodeReport,
    ) -> Option<String> {
        match self.network.collect(now) {
            Ok(Some(s)) => {
                node.capacity.nics = s
                    .nics
                    .iter()
                    .map(|n| nic_capacity(&n.name, n.speed_bits_per_second, n.speed_assumed))
                    .collect();
                report.nics = s.nics.iter().map(nic_usage).collect();
                node.record(ResourceKind::Network, !s.nics.is_empty(), s.utilization);
                None
            }
            Ok(None) => {
                node.capacity.nics.clear();
                node.absent(ResourceKind::Network);
                None
            }
            Err(e) => Some(e.to_string()),
        }
    }

    /// Disk I/O utilisation, per-disk usage and disk capacity.
    pub(super) fn disk(
        &mut self,
        now: Instant,
        node: &mut NodeState,
        report: &mut pb::NodeReport,
    ) -> Option<String> {
        match self.disk.collect(now) {
            Ok(Some(s)) => {
                node.capacity.disks = s
                    .disks
                    .iter()
                    .map(|d| disk_capacity(&d.name, d.max_bytes_per_second, d.configured))
                    .collect();
                report.disks = s.disks.iter().map(disk_usage).collect();
                node.record(ResourceKind::DiskIo, !s.disks.is_empty(), s.utilization);
                None
            }
            Ok(None) => {
                node.capacity.disks.clear();
                node.absent(ResourceKind::DiskIo);
                None
            }
            Err(e) => Some(e.to_string()),
        }
    }

    /// The `nodefs` eviction signals of the root filesystem.
    pub(super) fn filesystem(&mut self, report: &mut pb::NodeReport) -> Option<String> {
        match self.filesystem.collect() {
            Ok(Some(fs)) => {
                let eviction = eviction(report);
                eviction.nodefs_available_ratio = fs.available_ratio.and_then(clamp_ratio);
                eviction.nodefs_inodes_free_ratio = fs.inodes_free_ratio.and_then(clamp_ratio);
                eviction.nodefs_available_bytes = Some(fs.available_bytes);
                None
            }
            Ok(None) => None,
            Err(e) => Some(e.to_string()),
        }
    }

    /// GPU and GPU memory utilisation, per-GPU usage and GPU capacity. A failed NVML
    /// initialisation is reported every sample and retried every [`GPU_RETRY_SAMPLES`].
    pub(super) fn gpu(
        &mut self,
        node: &mut NodeState,
        report: &mut pb::NodeReport,
    ) -> Option<String> {
        if let GpuState::Failed { error, retry_in } = &mut self.gpu {
            if *retry_in > 0 {
                *retry_in -= 1;
                return Some(error.clone());
            }
            self.gpu = open_gpu(self.nvml_library.as_deref());
        }
        match &mut self.gpu {
            GpuState::Off => {
                node.capacity.gpus.clear();
                node.absent(ResourceKind::Gpu);
                node.absent(ResourceKind::GpuMemory);
                None
            }
            GpuState::Failed { error, .. } => Some(error.clone()),
            GpuState::Ready(gpu) => match gpu.collect() {
                Ok(s) => {
                    apply_gpu(&s, node, report);
                    None
                }
                Err(e) => Some(e.to_string()),
            },
        }
    }

    /// Per-pod usage. Its errors: the collector's own, or those of single pods (at most
    /// [`MAX_POD_ERRORS`] and a count of the rest).
    pub(super) fn pods(&mut self, report: &mut pb::NodeReport) -> Vec<String> {
        let Some(cgroup) = self.pods.as_mut() else {
            return Vec::new();
        };
        match cgroup.collect() {
            Ok(Some(CgroupSample { pods, errors, .. })) => {
                report.pods = pods
                    .into_iter()
                    .filter(|p| p.cpu_cores.is_finite())
                    .map(|p| pb::PodUsage {
                        pod_uid: p.uid,
                        cpu_cores: p.cpu_cores,
                        memory_working_set_bytes: p.memory_working_set_bytes,
                    })
                    .collect();
                pod_errors(&errors)
            }
            Ok(None) => Vec::new(),
            Err(e) => vec![e.to_string()],
        }
    }
}

/// The report's eviction signals, created on first use.
fn eviction(report: &mut pb::NodeReport) -> &mut pb::EvictionSignals {
    report
        .eviction
        .get_or_insert_with(pb::EvictionSignals::default)
}

fn nic_usage(n: &NicRate) -> pb::NicUsage {
    pb::NicUsage {
        name: n.name.clone(),
        rx_bytes_per_second: n.rx_bytes_per_second.unwrap_or(0.0),
        tx_bytes_per_second: n.tx_bytes_per_second.unwrap_or(0.0),
        utilization_ratio: n.utilization(),
    }
}

fn disk_usage(d: &DiskRate) -> pb::DiskUsage {
    pb::DiskUsage {
        name: d.name.clone(),
        read_bytes_per_second: d.read_bytes_per_second.unwrap_or(0.0),
        write_bytes_per_second: d.write_bytes_per_second.unwrap_or(0.0),
        read_iops: d.read_iops.unwrap_or(0.0),
        write_iops: d.write_iops.unwrap_or(0.0),
        utilization_ratio: d.utilization.unwrap_or(0.0),
    }
}

fn gpu_usage(d: &GpuDevice) -> pb::GpuUsage {
    pb::GpuUsage {
        index: d.index,
        uuid: d.uuid.clone(),
        utilization_ratio: d.utilization,
        memory_used_bytes: d.memory_used_bytes,
        memory_total_bytes: d.memory_total_bytes,
        process_count: d.process_count,
        temperature_celsius: d.temperature_celsius,
        power_watts: d.power_watts,
        error: d.error.clone().unwrap_or_default(),
    }
}

fn apply_gpu(s: &GpuSample, node: &mut NodeState, report: &mut pb::NodeReport) {
    node.capacity.gpus = s
        .devices
        .iter()
        .map(|d| gpu_capacity(d.index, &d.uuid, &d.model, d.memory_total_bytes))
        .collect();
    report.gpus = s.devices.iter().map(gpu_usage).collect();
    let has = !s.devices.is_empty();
    node.record(ResourceKind::Gpu, has, s.utilization);
    node.record(ResourceKind::GpuMemory, has, s.memory_utilization);
}

/// The first [`MAX_POD_ERRORS`] pod errors and, past them, how many more there were.
fn pod_errors(errors: &[FileError]) -> Vec<String> {
    let mut out: Vec<String> = errors
        .iter()
        .take(MAX_POD_ERRORS)
        .map(|e| e.to_string())
        .collect();
    if errors.len() > MAX_POD_ERRORS {
        out.push(format!(
            "… and {} more pod errors",
            errors.len() - MAX_POD_ERRORS
        ));
    }
    out
}

fn open_gpu(library: Option<&Path>) -> GpuState {
    match GpuCollector::open(library) {
        Ok(Some(g)) => {
            info!("NVML loaded; GPU collector on");
            GpuState::Ready(Box::new(g))
        }
        Ok(None) => {
            info!(
                library = ?library.unwrap_or(Path::new(DEFAULT_NVML_LIBRARY)),
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
