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
//! - The report fits the scorer's wire limits ([`wire`]): lists over them are cut and
//!   implausible readings sent as unknown, named under the `limits` collector, so one bad
//!   reading never costs the node its whole report.
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use loadstar_proto::convert::{capacity_to_proto, load_to_proto};
use loadstar_proto::pb;
use tracing::debug;

mod collectors;
mod config;
mod error_log;
mod wire;

use collectors::{CGROUP, CPU, Collectors, DISK, FILESYSTEM, GPU, MEMORY, NETWORK, NodeState};
pub use config::{
    DEFAULT_INTERVAL, DEFAULT_NET_NAMESPACE_PID, DEFAULT_NIC_SPEED_BITS_PER_SECOND,
    DEFAULT_WINDOWS, MAX_INTERVAL, SamplerConfig, SamplerError, default_node_name,
};
use error_log::ErrorLog;

/// Takes samples of every collector and keeps the windows. See the module docs.
pub struct Sampler {
    config: SamplerConfig,
    instance: String,
    sequence: u64,
    collectors: Collectors,
    node: NodeState,
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
        let node = NodeState::new(&windows, config.interval.as_secs_f64())?;
        Ok(Sampler {
            // A random 128-bit id: it tells a restarted agent from the one before.
            instance: format!("{:032x}", rand::random::<u128>()),
            sequence: 0,
            collectors: Collectors::new(&config),
            node,
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

        let Sampler {
            collectors: c,
            node,
            errors: log,
            ..
        } = self;
        let r = &mut report;
        let mut errors = Vec::new();
        log.note(CPU, c.cpu(node), &mut errors);
        log.note(MEMORY, c.memory(node, r), &mut errors);
        log.note(NETWORK, c.network(now, node, r), &mut errors);
        log.note(DISK, c.disk(now, node, r), &mut errors);
        log.note(FILESYSTEM, c.filesystem(r), &mut errors);
        log.note(GPU, c.gpu(node, r), &mut errors);
        log.note(CGROUP, c.pods(r), &mut errors);

        report.usage = load_to_proto(&node.load());
        report.capacity = Some(capacity_to_proto(node.capacity()));
        let fitted = wire::fit(&mut report);
        log.note(wire::LIMITS, fitted, &mut errors);
        report.collector_errors = errors;
        debug!(
            elapsed_us = now.elapsed().as_micros() as u64,
            errors = report.collector_errors.len(),
            "sample taken"
        );
        report
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::config::test_config as config;
    use super::*;

    #[test]
    fn instances_are_random_hex_ids() {
        let a = Sampler::new(config()).expect("valid");
        let b = Sampler::new(config()).expect("valid");
        assert_eq!(a.instance().len(), 32);
        assert!(
            a.instance()
                .bytes()
                .all(|c| matches!(c, b'0'..=b'9' | b'a'..=b'f'))
        );
        assert_ne!(a.instance(), b.instance());
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
        loadstar_proto::convert::load_from_proto(&second.usage).expect("valid usage");
        let windows: Vec<u32> = second.usage[0]
            .windows
            .iter()
            .map(|w| w.window_seconds)
            .collect();
        assert_eq!(windows, vec![60, 300, 900]);
    }
}
