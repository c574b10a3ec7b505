//! The wire contract's size and value limits, in one place for both sides: the scorer refuses
//! what exceeds them, the agent trims what it sends to fit. Each is derived from what a real
//! node needs, with headroom; `docs/security.md` lists them with the reasoning.

/// Largest decoded gRPC message the scorer accepts on `Ingest` (and on every service): a
/// report at every per-field cap below encodes to ≈ 0.8 MiB (checked by a test), a real
/// one to 5–50 KiB.
pub const MAX_MESSAGE_BYTES: usize = 1 << 20;

/// Longest free-text field (collector and GPU error messages): a kernel or NVML error with
/// its path fits in a few hundred bytes. The agent truncates to this; the scorer refuses more.
pub const MAX_TEXT_BYTES: usize = 1024;

/// Longest short identifier (collector name, agent version, agent instance).
pub const MAX_ID_BYTES: usize = 128;

/// Longest name (node, NIC, disk, GPU UUID or model, pod UID): a DNS subdomain's 253.
pub const MAX_NAME_BYTES: usize = 253;

/// Most collector errors in one report (the agent has 7 collectors).
pub const MAX_COLLECTOR_ERRORS: usize = 32;

/// Most NICs per report (physical and bonded interfaces of the largest servers).
pub const MAX_NICS: usize = 64;

/// Most whole disks per report.
pub const MAX_DISKS: usize = 256;

/// Most GPUs per report.
pub const MAX_GPUS: usize = 64;

/// Most per-pod entries per report (kubelet's `--max-pods` is 110 by default, 250 at most
/// in managed offerings; room for 2 048).
pub const MAX_PODS: usize = 2048;

/// Most windows per resource (the agent sends 3).
pub const MAX_WINDOWS: usize = 16;

/// How far an agent's `sample_time` may be from the scorer's clock, seconds, either way:
/// NTP-synchronised nodes are within milliseconds; a minute covers a slow boot sync.
pub const MAX_CLOCK_SKEW_SECONDS: u64 = 300;

/// Longest `ack_interval_seconds` a report may ask for: an agent hears of its accepted
/// reports with its first report five minutes after the last ack at the latest (rejections
/// and new intervals come at once anyway).
pub const MAX_ACK_INTERVAL_SECONDS: u64 = 300;

/// The agent's default `ack_interval_seconds` (`--ack-interval`), which the load generators
/// use too: one ack in ten at 1 Hz.
pub const DEFAULT_ACK_INTERVAL_SECONDS: u64 = 10;

/// Plausible capacity bounds: a report beyond them is a lie or a bug, never a real node.
pub mod capacity {
    /// Logical CPUs (Linux's largest `NR_CPUS` build option is 8 192).
    pub const MAX_LOGICAL_CPUS: u32 = 16_384;
    /// Highest CPU frequency, Hz (no CPU clocks above 10 GHz).
    pub const MAX_CPU_FREQUENCY_HZ: f64 = 10e9;
    /// Memory, bytes (64 TiB is the largest single-system image shipped; 1 PiB).
    pub const MAX_MEMORY_BYTES: u64 = 1 << 50;
    /// NIC link speed, bits/s (800 Gb/s NICs exist; 10 Tb/s).
    pub const MAX_NIC_BITS_PER_SECOND: u64 = 10_000_000_000_000;
    /// Disk throughput, bytes/s (PCIe 6 x16 is ~128 GB/s; 1 TB/s).
    pub const MAX_DISK_BYTES_PER_SECOND: u64 = 1_000_000_000_000;
    /// GPU memory, bytes (4 TiB).
    pub const MAX_GPU_MEMORY_BYTES: u64 = 1 << 42;
}

/// Plausible per-device rates in NIC and disk details.
pub mod rates {
    /// Bytes per second through one NIC or disk (1 TB/s).
    pub const MAX_BYTES_PER_SECOND: f64 = 1e12;
    /// I/O operations per second on one disk.
    pub const MAX_IOPS: f64 = 1e9;
    /// GPU temperature range, °C.
    pub const GPU_TEMPERATURE_CELSIUS: (f64, f64) = (-50.0, 200.0);
    /// GPU power draw, watts.
    pub const MAX_GPU_POWER_WATTS: f64 = 10_000.0;
}
