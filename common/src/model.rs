//! Domain types shared by the agent, the scorer and the simulator: resource kinds, windowed
//! load, node capacity and resource lists. Conversions to and from the wire types live in
//! [`crate::convert`], in one place.
use std::collections::BTreeMap;

use crate::quantity::{self, QuantityError};
use crate::window::WindowSummary;

/// A resource dimension Loadstar measures on a node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ResourceKind {
    /// CPU time of all logical CPUs.
    Cpu,
    /// Memory in use (MemTotal − MemAvailable).
    Memory,
    /// Physical NIC throughput over link speed.
    Network,
    /// Disk busy time (iostat %util) of the busiest whole disk.
    DiskIo,
    /// GPU compute utilisation, mean over GPUs.
    Gpu,
    /// GPU memory in use over all GPUs.
    GpuMemory,
}

impl ResourceKind {
    /// Every kind, in wire order.
    pub const ALL: [ResourceKind; 6] = [
        ResourceKind::Cpu,
        ResourceKind::Memory,
        ResourceKind::Network,
        ResourceKind::DiskIo,
        ResourceKind::Gpu,
        ResourceKind::GpuMemory,
    ];

    /// Dense index, 0..6, for array-indexed tables.
    pub fn index(self) -> usize {
        self as usize
    }

    /// Lower-case name used in configs, metrics and messages (`cpu`, `disk_io`, …).
    pub fn name(self) -> &'static str {
        match self {
            ResourceKind::Cpu => "cpu",
            ResourceKind::Memory => "memory",
            ResourceKind::Network => "network",
            ResourceKind::DiskIo => "disk_io",
            ResourceKind::Gpu => "gpu",
            ResourceKind::GpuMemory => "gpu_memory",
        }
    }

    /// The kind with the given [`name`](Self::name).
    pub fn from_name(name: &str) -> Option<ResourceKind> {
        ResourceKind::ALL.into_iter().find(|k| k.name() == name)
    }
}

/// Utilisation of one resource: the latest sample and its windows (shortest first).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ResourceLoad {
    /// The latest sample, as a ratio of capacity.
    pub latest: f64,
    /// Window statistics, shortest window first.
    pub windows: Vec<WindowSummary>,
}

impl ResourceLoad {
    /// The window labelled `seconds`, else the shortest window at least that long, else the
    /// longest there is.
    pub fn window(&self, seconds: u32) -> Option<&WindowSummary> {
        self.windows
            .iter()
            .find(|w| w.window_seconds == seconds)
            .or_else(|| self.windows.iter().find(|w| w.window_seconds >= seconds))
            .or_else(|| self.windows.last())
    }
}

/// A node's measured load: one optional [`ResourceLoad`] per [`ResourceKind`].
#[derive(Debug, Clone, PartialEq, Default)]
pub struct LoadSummary {
    per_kind: [Option<ResourceLoad>; 6],
}

impl LoadSummary {
    /// The load of one resource, if the node reports it.
    pub fn get(&self, kind: ResourceKind) -> Option<&ResourceLoad> {
        self.per_kind[kind.index()].as_ref()
    }

    /// Sets the load of one resource.
    pub fn set(&mut self, kind: ResourceKind, load: ResourceLoad) {
        self.per_kind[kind.index()] = Some(load);
    }

    /// Iterates over the resources present.
    pub fn iter(&self) -> impl Iterator<Item = (ResourceKind, &ResourceLoad)> {
        ResourceKind::ALL
            .into_iter()
            .filter_map(|k| self.get(k).map(|l| (k, l)))
    }
}

/// A physical NIC's capacity.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Nic {
    /// Interface name.
    pub name: String,
    /// Link speed, bits per second.
    pub speed_bits_per_second: u64,
    /// True when the speed is the configured default, not the kernel's.
    pub speed_assumed: bool,
}

/// A whole disk's capacity.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Disk {
    /// Device name.
    pub name: String,
    /// Max throughput, bytes per second.
    pub max_bytes_per_second: u64,
    /// True when configured, false when the highest rate observed.
    pub configured: bool,
}

/// A GPU's capacity.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Gpu {
    /// NVML index.
    pub index: u32,
    /// NVML UUID.
    pub uuid: String,
    /// Product name.
    pub model: String,
    /// Device memory, bytes.
    pub memory_bytes: u64,
}

/// What a node can do: computeS.sh's performance figures.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct NodeCapacity {
    /// Logical CPUs.
    pub logical_cpus: u32,
    /// Highest CPU frequency, hertz.
    pub cpu_max_frequency_hz: f64,
    /// Memory, bytes.
    pub memory_bytes: u64,
    /// Physical NICs.
    pub nics: Vec<Nic>,
    /// Whole disks.
    pub disks: Vec<Disk>,
    /// GPUs.
    pub gpus: Vec<Gpu>,
}

impl NodeCapacity {
    /// S(c) of the seed paper: logical CPUs × max frequency in GHz.
    pub fn cpu_ghz_total(&self) -> f64 {
        self.logical_cpus as f64 * self.cpu_max_frequency_hz / 1e9
    }

    /// S(n): summed link speed of the physical NICs, bits per second.
    pub fn network_bits_per_second(&self) -> u64 {
        self.nics.iter().map(|n| n.speed_bits_per_second).sum()
    }

    /// S(d): summed max throughput of the disks, bytes per second.
    pub fn disk_bytes_per_second(&self) -> u64 {
        self.disks.iter().map(|d| d.max_bytes_per_second).sum()
    }
}

/// The GPU resource name Kubernetes device plugins advertise for NVIDIA GPUs.
pub const GPU_RESOURCE: &str = "nvidia.com/gpu";

/// Integer amounts of Kubernetes resources: requests, limits, allocatable.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ResourceList {
    /// CPU, millicores.
    pub cpu_millis: i64,
    /// Memory, bytes.
    pub memory_bytes: i64,
    /// Ephemeral storage, bytes.
    pub ephemeral_storage_bytes: i64,
    /// Pod count.
    pub pods: i64,
    /// `nvidia.com/gpu` count.
    pub gpus: i64,
    /// Other extended resources, in whole units.
    pub extended: BTreeMap<String, i64>,
}

/// A resource list entry that did not parse.
#[derive(Debug, thiserror::Error, PartialEq, Eq, Clone)]
#[error("resource {resource:?}: {source}")]
pub struct ResourceListError {
    /// The resource name.
    pub resource: String,
    /// Why its quantity is invalid.
    #[source]
    pub source: QuantityError,
}

impl ResourceList {
    /// Parses a `name → quantity` map (as in a pod spec). Rejects negative amounts.
    pub fn from_quantities<'a, I>(entries: I) -> Result<ResourceList, ResourceListError>
    where
        I: IntoIterator<Item = (&'a str, &'a str)>,
    {
        let mut list = ResourceList::default();
        for (name, value) in entries {
            let err = |source| ResourceListError {
                resource: crate::text::truncate(name, 64),
                source,
            };
            // A name given twice adds up, saturating: a hostile list cannot overflow.
            let add = |sum: &mut i64, v: i64| *sum = sum.saturating_add(v);
            match name {
                "cpu" => add(
                    &mut list.cpu_millis,
                    quantity::parse_nonneg_millis(value).map_err(err)?,
                ),
                "memory" => add(
                    &mut list.memory_bytes,
                    quantity::parse_nonneg_units(value).map_err(err)?,
                ),
                "ephemeral-storage" => add(
                    &mut list.ephemeral_storage_bytes,
                    quantity::parse_nonneg_units(value).map_err(err)?,
                ),
                "pods" => add(
                    &mut list.pods,
                    quantity::parse_nonneg_units(value).map_err(err)?,
                ),
                GPU_RESOURCE => add(
                    &mut list.gpus,
                    quantity::parse_nonneg_units(value).map_err(err)?,
                ),
                other => add(
                    list.extended.entry(other.to_string()).or_default(),
                    quantity::parse_nonneg_units(value).map_err(err)?,
                ),
            }
        }
        Ok(list)
    }

    /// Formats as a `name → quantity` map; zero entries are left out.
    pub fn to_quantities(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        if self.cpu_millis != 0 {
            out.insert("cpu".into(), quantity::format_millis(self.cpu_millis));
        }
        if self.memory_bytes != 0 {
            out.insert("memory".into(), quantity::format_bytes(self.memory_bytes));
        }
        if self.ephemeral_storage_bytes != 0 {
            out.insert(
                "ephemeral-storage".into(),
                quantity::format_bytes(self.ephemeral_storage_bytes),
            );
        }
        if self.pods != 0 {
            out.insert("pods".into(), self.pods.to_string());
        }
        if self.gpus != 0 {
            out.insert(GPU_RESOURCE.into(), self.gpus.to_string());
        }
        for (k, v) in &self.extended {
            if *v != 0 {
                out.insert(k.clone(), v.to_string());
            }
        }
        out
    }

    /// Adds `other` to `self`, saturating.
    pub fn add(&mut self, other: &ResourceList) {
        self.cpu_millis = self.cpu_millis.saturating_add(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_add(other.memory_bytes);
        self.ephemeral_storage_bytes = self
            .ephemeral_storage_bytes
            .saturating_add(other.ephemeral_storage_bytes);
        self.pods = self.pods.saturating_add(other.pods);
        self.gpus = self.gpus.saturating_add(other.gpus);
        for (k, v) in &other.extended {
            let e = self.extended.entry(k.clone()).or_default();
            *e = e.saturating_add(*v);
        }
    }

    /// Subtracts `other` from `self`, saturating.
    pub fn sub(&mut self, other: &ResourceList) {
        self.cpu_millis = self.cpu_millis.saturating_sub(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.saturating_sub(other.memory_bytes);
        self.ephemeral_storage_bytes = self
            .ephemeral_storage_bytes
            .saturating_sub(other.ephemeral_storage_bytes);
        self.pods = self.pods.saturating_sub(other.pods);
        self.gpus = self.gpus.saturating_sub(other.gpus);
        for (k, v) in &other.extended {
            let e = self.extended.entry(k.clone()).or_default();
            *e = e.saturating_sub(*v);
        }
    }

    /// Component-wise maximum (used for init containers).
    pub fn max_with(&mut self, other: &ResourceList) {
        self.cpu_millis = self.cpu_millis.max(other.cpu_millis);
        self.memory_bytes = self.memory_bytes.max(other.memory_bytes);
        self.ephemeral_storage_bytes = self
            .ephemeral_storage_bytes
            .max(other.ephemeral_storage_bytes);
        self.pods = self.pods.max(other.pods);
        self.gpus = self.gpus.max(other.gpus);
        for (k, v) in &other.extended {
            let e = self.extended.entry(k.clone()).or_default();
            *e = (*e).max(*v);
        }
    }

    /// Sets the amount of a named resource (`cpu` in millicores, others in units/bytes).
    pub fn set(&mut self, name: &str, value: i64) {
        match name {
            "cpu" => self.cpu_millis = value,
            "memory" => self.memory_bytes = value,
            "ephemeral-storage" => self.ephemeral_storage_bytes = value,
            "pods" => self.pods = value,
            GPU_RESOURCE => self.gpus = value,
            other => {
                self.extended.insert(other.to_string(), value);
            }
        }
    }

    /// The amount of a named resource (`cpu` in millicores, others in units/bytes).
    pub fn get(&self, name: &str) -> i64 {
        match name {
            "cpu" => self.cpu_millis,
            "memory" => self.memory_bytes,
            "ephemeral-storage" => self.ephemeral_storage_bytes,
            "pods" => self.pods,
            GPU_RESOURCE => self.gpus,
            other => self.extended.get(other).copied().unwrap_or(0),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_list_parses_and_formats() {
        let l = ResourceList::from_quantities([
            ("cpu", "1500m"),
            ("memory", "2Gi"),
            ("nvidia.com/gpu", "2"),
            ("example.com/foo", "3"),
        ])
        .expect("valid");
        assert_eq!(l.cpu_millis, 1500);
        assert_eq!(l.memory_bytes, 2 << 30);
        assert_eq!(l.gpus, 2);
        assert_eq!(l.get("example.com/foo"), 3);
        let mut m = l.clone();
        m.set("cpu", 7);
        m.set("hugepages-2Mi", 4 << 20);
        assert_eq!((m.cpu_millis, m.get("hugepages-2Mi")), (7, 4 << 20));
        assert_eq!(m.memory_bytes, l.memory_bytes);
        let q = l.to_quantities();
        assert_eq!(q["cpu"], "1500m");
        assert_eq!(q["memory"], "2Gi");
        let err = ResourceList::from_quantities([("cpu", "lots")]).expect_err("invalid");
        assert_eq!(
            err.to_string(),
            "resource \"cpu\": invalid quantity \"lots\": no digits"
        );
        assert!(ResourceList::from_quantities([("memory", "-1")]).is_err());
        // A name given twice adds up, saturating instead of overflowing.
        let huge = ResourceList::from_quantities([("memory", "8E"), ("memory", "8E")])
            .expect("valid quantities");
        assert_eq!(huge.memory_bytes, i64::MAX);
    }

    #[test]
    fn window_lookup_prefers_exact_then_longer() {
        let w = |s| WindowSummary {
            window_seconds: s,
            ..Default::default()
        };
        let load = ResourceLoad {
            latest: 0.0,
            windows: vec![w(60), w(300), w(900)],
        };
        assert_eq!(load.window(300).map(|w| w.window_seconds), Some(300));
        assert_eq!(load.window(120).map(|w| w.window_seconds), Some(300));
        assert_eq!(load.window(3600).map(|w| w.window_seconds), Some(900));
        assert!(ResourceLoad::default().window(60).is_none());
    }

    #[test]
    fn resource_kind_names_round_trip() {
        for k in ResourceKind::ALL {
            assert_eq!(ResourceKind::from_name(k.name()), Some(k));
        }
    }
}
