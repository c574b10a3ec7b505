//! What the sampler reads and how often: [`SamplerConfig`] with its documented defaults, and
//! its validation. Kept apart from the sampling itself so that the agent's flags and the
//! scorer's standalone mode build the same typed configuration.
use std::path::PathBuf;
use std::time::Duration;

use loadstar_common::window::WindowError;
use loadstar_proto::limits;
use thiserror::Error;

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
/// Shortest accepted sample interval (the scorer refuses reports sampled more often).
pub const MIN_INTERVAL: Duration = Duration::from_millis(10);
/// Most samples one window may hold (900 s at 10 ms is 90 000): each is kept in memory.
pub const MAX_WINDOW_SAMPLES: u64 = 100_000;

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
        if self.interval < MIN_INTERVAL || self.interval > MAX_INTERVAL {
            return invalid(format!(
                "interval {:?} must be in [{MIN_INTERVAL:?}, {MAX_INTERVAL:?}]",
                self.interval
            ));
        }
        if self.node_name.len() > limits::MAX_NAME_BYTES {
            return invalid(format!(
                "node name is {} bytes, over Kubernetes' {}",
                self.node_name.len(),
                limits::MAX_NAME_BYTES
            ));
        }
        let mut windows = self.windows.clone();
        windows.sort_unstable();
        windows.dedup();
        if windows.is_empty() {
            return invalid("at least one window is needed".into());
        }
        if windows.len() > limits::MAX_WINDOWS {
            return invalid(format!(
                "{} windows, more than the {} a report may carry",
                windows.len(),
                limits::MAX_WINDOWS
            ));
        }
        let longest = windows.last().copied().unwrap_or(0);
        if u128::from(longest) * 1000 > u128::from(MAX_WINDOW_SAMPLES) * self.interval.as_millis() {
            return invalid(format!(
                "window {longest}s holds more than {MAX_WINDOW_SAMPLES} samples of {:?}",
                self.interval
            ));
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
        if !(1..=limits::capacity::MAX_NIC_BITS_PER_SECOND)
            .contains(&self.default_nic_speed_bits_per_second)
        {
            return invalid(format!(
                "default NIC speed must be in [1, {}] bit/s",
                limits::capacity::MAX_NIC_BITS_PER_SECOND
            ));
        }
        if self
            .disk_max_bytes_per_second
            .is_some_and(|m| !(1..=limits::capacity::MAX_DISK_BYTES_PER_SECOND).contains(&m))
        {
            return invalid(format!(
                "disk max rate must be in [1, {}] B/s",
                limits::capacity::MAX_DISK_BYTES_PER_SECOND
            ));
        }
        Ok(windows)
    }
}

/// What the unit tests sample: this machine, as node `n1`, without NVML.
#[cfg(test)]
pub(super) fn test_config() -> SamplerConfig {
    SamplerConfig {
        node_name: "n1".into(),
        gpu: false,
        ..SamplerConfig::default()
    }
}

#[cfg(test)]
mod tests {
    use super::test_config as config;
    use super::*;

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
            // What the scorer would refuse on every report, and a window too large to hold.
            SamplerConfig {
                interval: Duration::from_millis(5),
                windows: vec![1],
                ..config()
            },
            SamplerConfig {
                windows: (1..=17).map(|i| i * 60).collect(),
                ..config()
            },
            SamplerConfig {
                windows: vec![4_000_000_000],
                ..config()
            },
            SamplerConfig {
                default_nic_speed_bits_per_second: u64::MAX,
                ..config()
            },
            SamplerConfig {
                disk_max_bytes_per_second: Some(2_000_000_000_000),
                ..config()
            },
            SamplerConfig {
                node_name: "n".repeat(254),
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
}
