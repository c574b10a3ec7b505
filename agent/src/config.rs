//! The agent's command-line configuration: one typed struct (clap derive) whose defaults are
//! the named constants of the modules they configure, plus the small value parsers for
//! durations and rates. Every flag can also be set from the environment (`LOADSTAR_*`).
use std::net::SocketAddr;
use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use clap::{ArgAction, Parser};
use loadstar_sampler::sampler::{SamplerConfig, default_node_name};
use thiserror::Error;

use crate::report::{BackoffConfig, ReportConfig};

/// Default `/metrics` and `/healthz` listen address.
pub const DEFAULT_METRICS_ADDR: &str = "0.0.0.0:9910";
/// Default bound on graceful shutdown.
pub const DEFAULT_SHUTDOWN_TIMEOUT: Duration = Duration::from_secs(5);

/// Errors of value parsing and validation.
#[derive(Debug, Error, Clone, PartialEq, Eq)]
pub enum ConfigError {
    /// A duration that does not parse.
    #[error("invalid duration {value:?}: expected e.g. 500ms, 1s, 1.5m, 2h")]
    Duration {
        /// The value given.
        value: String,
    },
    /// A rate that does not parse.
    #[error("invalid rate {value:?}: expected an integer with optional k, M, G or T suffix")]
    Rate {
        /// The value given.
        value: String,
    },
    /// A window that is not a whole number of seconds.
    #[error("invalid window {value:?}: expected whole seconds, e.g. 60s or 5m")]
    Window {
        /// The value given.
        value: String,
    },
    /// A namespace choice that is neither a PID nor `self`.
    #[error("invalid network namespace {value:?}: expected a PID or `self`")]
    NetNamespace {
        /// The value given.
        value: String,
    },
    /// A listen address that does not parse.
    #[error("invalid listen address {value:?}: expected host:port or `off`")]
    ListenAddr {
        /// The value given.
        value: String,
    },
    /// An ack interval that is not a duration of at most 300 s.
    #[error("invalid ack interval {value:?}: expected a duration from 0s (every report) to 300s")]
    AckInterval {
        /// The value given.
        value: String,
    },
}

/// Parses `500ms`, `1s`, `1.5m`, `2h`, or a bare number of seconds.
///
/// Why not `humantime`: it takes whole numbers only and always wants a unit, so `1.5m` and a
/// bare `3`, which these flags (and their `LOADSTAR_*` variables) accept, would be rejected.
pub fn parse_duration(s: &str) -> Result<Duration, ConfigError> {
    let err = || ConfigError::Duration {
        value: s.to_string(),
    };
    let t = s.trim();
    let (num, scale) = if let Some(n) = t.strip_suffix("ms") {
        (n, 1e-3)
    } else if let Some(n) = t.strip_suffix('s') {
        (n, 1.0)
    } else if let Some(n) = t.strip_suffix('m') {
        (n, 60.0)
    } else if let Some(n) = t.strip_suffix('h') {
        (n, 3600.0)
    } else {
        (t, 1.0)
    };
    let v: f64 = num.trim().parse().map_err(|_| err())?;
    let secs = v * scale;
    if !secs.is_finite() || !(0.0..=1e9).contains(&secs) {
        return Err(err());
    }
    Ok(Duration::from_secs_f64(secs))
}

/// Parses an ack interval: a duration of at most 300 s (the scorer refuses longer).
pub fn parse_ack_interval(s: &str) -> Result<Duration, ConfigError> {
    parse_duration(s)
        .ok()
        .filter(|d| *d <= MAX_ACK_INTERVAL)
        .ok_or_else(|| ConfigError::AckInterval {
            value: s.to_string(),
        })
}

/// The longest `--ack-interval`: what the scorer accepts in `ack_interval_seconds`.
pub const MAX_ACK_INTERVAL: Duration =
    Duration::from_secs(loadstar_proto::limits::MAX_ACK_INTERVAL_SECONDS);

/// Parses a window length: a duration of whole seconds.
pub fn parse_window(s: &str) -> Result<u32, ConfigError> {
    let err = || ConfigError::Window {
        value: s.to_string(),
    };
    let d = parse_duration(s).map_err(|_| err())?;
    if d.subsec_nanos() != 0 || d.is_zero() {
        return Err(err());
    }
    u32::try_from(d.as_secs()).map_err(|_| err())
}

/// Parses a rate with an optional decimal (`k`, `M`, `G`, `T`) or binary (`Ki`, `Mi`, `Gi`,
/// `Ti`) suffix: `10G` = 10 000 000 000, `500Mi` = 524 288 000.
///
/// Why not `parse-size` or `bytesize`: they are byte sizes, accepting fractions (`1.5G`) and
/// `B`/`iB` unit letters that a rate in bits per second (`--default-nic-speed`) must not take;
/// integers and these eight suffixes are all the flags need.
pub fn parse_rate(s: &str) -> Result<u64, ConfigError> {
    let err = || ConfigError::Rate {
        value: s.to_string(),
    };
    let t = s.trim();
    let split = t.find(|c: char| !c.is_ascii_digit()).unwrap_or(t.len());
    let (num, suffix) = t.split_at(split);
    let n: u64 = num.parse().map_err(|_| err())?;
    let mult: u64 = match suffix {
        "" => 1,
        "k" | "K" => 1_000,
        "M" => 1_000_000,
        "G" => 1_000_000_000,
        "T" => 1_000_000_000_000,
        "Ki" => 1 << 10,
        "Mi" => 1 << 20,
        "Gi" => 1 << 30,
        "Ti" => 1 << 40,
        _ => return Err(err()),
    };
    n.checked_mul(mult).ok_or_else(err)
}

/// Whose network namespace the network collector reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NetNamespace(pub Option<u32>);

impl FromStr for NetNamespace {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        if s == "self" {
            return Ok(NetNamespace(None));
        }
        s.parse::<u32>()
            .map(|p| NetNamespace(Some(p)))
            .map_err(|_| ConfigError::NetNamespace {
                value: s.to_string(),
            })
    }
}

/// A listen address, or `off`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListenAddr(pub Option<SocketAddr>);

impl FromStr for ListenAddr {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, ConfigError> {
        if s.is_empty() || s == "off" {
            return Ok(ListenAddr(None));
        }
        s.parse()
            .map(|a| ListenAddr(Some(a)))
            .map_err(|_| ConfigError::ListenAddr {
                value: s.to_string(),
            })
    }
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured only when stderr is a terminal and `NO_COLOR` is unset.
    Text,
    /// One JSON object per line (for log collectors).
    Json,
}

/// Loadstar node agent: samples this node's load and streams windowed reports to the scorer.
#[derive(Debug, Clone, Parser, PartialEq)]
#[command(name = "loadstar-agent", version = loadstar_common::VERSION)]
pub struct AgentConfig {
    /// Log line format (level and targets: `RUST_LOG`, default `info`).
    #[arg(long, env = "LOADSTAR_LOG_FORMAT", value_enum, default_value = "text")]
    pub log_format: LogFormat,

    /// Scorer to stream to, `http(s)://host:port`; repeat or comma-separate. A name that
    /// resolves to several addresses gets one stream per address. None: sample only.
    #[arg(long = "scorer", env = "LOADSTAR_SCORER", value_delimiter = ',')]
    pub scorers: Vec<String>,

    /// Node name in reports [default: $NODE_NAME, else the hostname].
    #[arg(long, env = "NODE_NAME")]
    pub node_name: Option<String>,

    /// procfs root (the host's /proc, e.g. /host/proc in a pod).
    #[arg(long, env = "LOADSTAR_PROC_ROOT", default_value = "/proc")]
    pub proc_root: PathBuf,

    /// sysfs root (the host's /sys).
    #[arg(long, env = "LOADSTAR_SYS_ROOT", default_value = "/sys")]
    pub sys_root: PathBuf,

    /// Root filesystem for the nodefs eviction signals.
    #[arg(long, env = "LOADSTAR_ROOTFS", default_value = "/")]
    pub rootfs: PathBuf,

    /// cgroup filesystem root [default: <sys-root>/fs/cgroup].
    #[arg(long, env = "LOADSTAR_CGROUP_ROOT")]
    pub cgroup_root: Option<PathBuf>,

    /// Time between samples.
    #[arg(long, env = "LOADSTAR_INTERVAL", default_value = "1s", value_parser = parse_duration)]
    pub interval: Duration,

    /// Window lengths (whole seconds), comma-separated.
    #[arg(long, env = "LOADSTAR_WINDOWS", default_value = "60s,300s,900s", value_delimiter = ',', value_parser = parse_window)]
    pub windows: Vec<u32>,

    /// Interface patterns (`*`, `?`) to count even when virtual; comma-separated.
    #[arg(long, env = "LOADSTAR_NET_INCLUDE", value_delimiter = ',')]
    pub net_include: Vec<String>,

    /// Interface patterns never to count (wins over --net-include); comma-separated.
    #[arg(long, env = "LOADSTAR_NET_EXCLUDE", value_delimiter = ',')]
    pub net_exclude: Vec<String>,

    /// Measure the network namespace of this PID (<proc-root>/<pid>/net/dev), or `self` for
    /// the agent's own (<proc-root>/net/dev, for hostNetwork deployments).
    #[arg(long, env = "LOADSTAR_NET_NAMESPACE_PID", default_value = "1")]
    pub net_namespace_pid: NetNamespace,

    /// Link speed in bits/s assumed when the kernel reports none (suffixes k, M, G, T).
    #[arg(long, env = "LOADSTAR_DEFAULT_NIC_SPEED", default_value = "10G", value_parser = parse_rate)]
    pub default_nic_speed: u64,

    /// Maximum throughput of every disk in bytes/s (suffixes k, M, G, Ki, Mi, Gi)
    /// [default: the highest rate observed per disk].
    #[arg(long, env = "LOADSTAR_DISK_MAX_BPS", value_parser = parse_rate)]
    pub disk_max_bps: Option<u64>,

    /// Collect GPU metrics through NVML when the library is present.
    #[arg(long, env = "LOADSTAR_GPU", default_value_t = true, action = ArgAction::Set)]
    pub gpu: bool,

    /// NVML library to load [default: libnvidia-ml.so.1].
    #[arg(long, env = "LOADSTAR_NVML_LIB")]
    pub nvml_lib: Option<PathBuf>,

    /// Report per-pod usage from the kubepods cgroup.
    #[arg(long, env = "LOADSTAR_PODS", default_value_t = true, action = ArgAction::Set)]
    pub pods: bool,

    /// File with a bearer token sent to scorers (a projected service-account token; re-read
    /// at each connect, and the stream reopened when the kubelet rotates it).
    #[arg(long, env = "LOADSTAR_TOKEN_FILE")]
    pub token_file: Option<PathBuf>,

    /// PEM CA bundle to verify https scorers with [default: the system's CAs].
    #[arg(long, env = "LOADSTAR_TLS_CA")]
    pub tls_ca: Option<PathBuf>,

    /// Listen address of /metrics and /healthz, or `off`.
    #[arg(long, env = "LOADSTAR_METRICS_ADDR", default_value = DEFAULT_METRICS_ADDR)]
    pub metrics_addr: ListenAddr,

    /// Bound on graceful shutdown after SIGTERM/SIGINT.
    #[arg(long, env = "LOADSTAR_SHUTDOWN_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub shutdown_timeout: Duration,

    /// Timeout of one connection attempt to a scorer.
    #[arg(long, env = "LOADSTAR_CONNECT_TIMEOUT", default_value = "5s", value_parser = parse_duration)]
    pub connect_timeout: Duration,

    /// First reconnect delay.
    #[arg(long, env = "LOADSTAR_BACKOFF_INITIAL", default_value = "500ms", value_parser = parse_duration)]
    pub backoff_initial: Duration,

    /// Largest reconnect delay.
    #[arg(long, env = "LOADSTAR_BACKOFF_MAX", default_value = "30s", value_parser = parse_duration)]
    pub backoff_max: Duration,

    /// Time between DNS resolutions of scorer names.
    #[arg(long, env = "LOADSTAR_RESOLVE_INTERVAL", default_value = "30s", value_parser = parse_duration)]
    pub resolve_interval: Duration,

    /// How far apart the scorer's acks of accepted reports may be (`0s`: one per report).
    /// A rejected report or a new report interval is acked at once whatever this says; the
    /// default saves the scorer (and the agent) a write per report.
    #[arg(long, env = "LOADSTAR_ACK_INTERVAL", default_value = "10s", value_parser = parse_ack_interval)]
    pub ack_interval: Duration,
}

impl AgentConfig {
    /// The sampler's part of the configuration.
    pub fn sampler_config(&self) -> SamplerConfig {
        SamplerConfig {
            node_name: self
                .node_name
                .clone()
                .filter(|n| !n.trim().is_empty())
                .unwrap_or_else(default_node_name),
            proc_root: self.proc_root.clone(),
            sys_root: self.sys_root.clone(),
            rootfs: self.rootfs.clone(),
            cgroup_root: self
                .cgroup_root
                .clone()
                .unwrap_or_else(|| self.sys_root.join("fs/cgroup")),
            interval: self.interval,
            windows: self.windows.clone(),
            net_include: self.net_include.clone(),
            net_exclude: self.net_exclude.clone(),
            net_namespace_pid: self.net_namespace_pid.0,
            default_nic_speed_bits_per_second: self.default_nic_speed,
            disk_max_bytes_per_second: self.disk_max_bps,
            gpu: self.gpu,
            nvml_library: self.nvml_lib.clone(),
            pods: self.pods,
        }
    }

    /// The reporter's part of the configuration.
    pub fn report_config(&self) -> ReportConfig {
        ReportConfig {
            scorers: self.scorers.clone(),
            token_file: self.token_file.clone(),
            tls_ca: self.tls_ca.clone(),
            backoff: BackoffConfig {
                initial: self.backoff_initial,
                max: self.backoff_max.max(self.backoff_initial),
                ..BackoffConfig::default()
            },
            connect_timeout: self.connect_timeout,
            resolve_interval: self.resolve_interval,
            ack_interval: self.ack_interval,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("500ms"), Ok(Duration::from_millis(500)));
        assert_eq!(parse_duration("1s"), Ok(Duration::from_secs(1)));
        assert_eq!(parse_duration("1.5m"), Ok(Duration::from_secs(90)));
        assert_eq!(parse_duration("2h"), Ok(Duration::from_secs(7200)));
        assert_eq!(parse_duration("3"), Ok(Duration::from_secs(3)));
        for bad in ["", "s", "-1s", "1d", "NaNs", "infs"] {
            assert!(parse_duration(bad).is_err(), "{bad}");
        }
        assert_eq!(parse_ack_interval("0s"), Ok(Duration::ZERO));
        assert_eq!(parse_ack_interval("5m"), Ok(MAX_ACK_INTERVAL));
        for bad in ["301s", "1h", "-1s", "x"] {
            let e = parse_ack_interval(bad).expect_err(bad);
            assert!(e.to_string().contains("ack interval"), "{e}");
        }
        assert_eq!(parse_window("5m"), Ok(300));
        assert!(parse_window("1.5s").is_err());
        assert!(parse_window("0s").is_err());
    }

    #[test]
    fn rates() {
        assert_eq!(parse_rate("10G"), Ok(10_000_000_000));
        assert_eq!(parse_rate("500Mi"), Ok(524_288_000));
        assert_eq!(parse_rate("42"), Ok(42));
        for bad in ["", "G", "1.5G", "10X", "99999999999T"] {
            assert!(parse_rate(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn defaults_and_flags() {
        let c = AgentConfig::try_parse_from(["loadstar-agent"]).expect("defaults parse");
        let s = c.sampler_config();
        assert_eq!(s.windows, vec![60, 300, 900]);
        assert_eq!(s.interval, Duration::from_secs(1));
        assert_eq!(s.cgroup_root, PathBuf::from("/sys/fs/cgroup"));
        assert_eq!(s.net_namespace_pid, Some(1));
        assert_eq!(s.default_nic_speed_bits_per_second, 10_000_000_000);
        assert!(s.gpu && s.pods);
        assert_eq!(
            c.report_config().ack_interval,
            crate::report::DEFAULT_ACK_INTERVAL
        );
        assert_eq!(
            c.metrics_addr,
            ListenAddr(Some("0.0.0.0:9910".parse().expect("addr")))
        );
        let c = AgentConfig::try_parse_from([
            "loadstar-agent",
            "--scorer",
            "http://a:1,http://b:2",
            "--scorer=http://c:3",
            "--sys-root",
            "/host/sys",
            "--interval",
            "250ms",
            "--windows",
            "10s,1m",
            "--net-namespace-pid",
            "self",
            "--gpu=false",
            "--metrics-addr",
            "off",
            "--disk-max-bps",
            "2G",
        ])
        .expect("valid");
        assert_eq!(c.scorers, vec!["http://a:1", "http://b:2", "http://c:3"]);
        let s = c.sampler_config();
        assert_eq!(s.cgroup_root, PathBuf::from("/host/sys/fs/cgroup"));
        assert_eq!(s.windows, vec![10, 60]);
        assert_eq!(s.net_namespace_pid, None);
        assert!(!s.gpu);
        assert_eq!(s.disk_max_bytes_per_second, Some(2_000_000_000));
        assert_eq!(c.metrics_addr, ListenAddr(None));
        let err = AgentConfig::try_parse_from(["loadstar-agent", "--interval", "fast"])
            .expect_err("invalid");
        assert!(
            err.to_string().contains("invalid duration \"fast\""),
            "{err}"
        );
    }
}
