//! Synthetic agent reports with controlled loads, for the load generator, the end-to-end
//! tests and benchmarks: the same `NodeReport` shape a real agent sends, with chosen values.
use std::time::{SystemTime, UNIX_EPOCH};

use loadstar_common::model::{LoadSummary, NodeCapacity, ResourceKind, ResourceLoad};
use loadstar_common::window::WindowSummary;
use loadstar_proto::convert;
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// The load a synthetic node reports, as utilisation ratios.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct SyntheticLoad {
    /// CPU utilisation.
    pub cpu: f64,
    /// Memory utilisation.
    pub memory: f64,
    /// Network utilisation.
    pub network: f64,
    /// Disk IO utilisation.
    pub disk_io: f64,
    /// Standard deviation reported for every window (same for all resources).
    pub stddev: f64,
}

impl Default for SyntheticLoad {
    fn default() -> Self {
        SyntheticLoad {
            cpu: 0.2,
            memory: 0.3,
            network: 0.05,
            disk_io: 0.05,
            stddev: 0.02,
        }
    }
}

/// Most simulated agent streams to put on one HTTP/2 connection: below the scorer's default
/// limit of 100 concurrent calls per connection (a real agent uses a connection of its own).
pub const STREAMS_PER_CONNECTION: usize = 60;

/// Connections needed for `agents` streams: at least `wanted`, and enough that none carries
/// more than [`STREAMS_PER_CONNECTION`].
pub fn connections_for(agents: usize, wanted: usize) -> usize {
    wanted.max(agents.div_ceil(STREAMS_PER_CONNECTION)).max(1)
}

/// Opens an Ingest stream on `channel` for the reports sent into the returned sender, as a
/// simulated agent's: a task of its own opens it and reads (and drops) its acks until the
/// stream ends. Dropping the sender ends the stream; aborting the task drops it at once.
pub fn open_stream(channel: Channel) -> (mpsc::Sender<pb::NodeReport>, JoinHandle<()>) {
    let (tx, rx) = mpsc::channel(4);
    let mut client = IngestClient::new(channel);
    let stream = tokio::spawn(async move {
        if let Ok(resp) = client.report(ReceiverStream::new(rx)).await {
            let mut acks = resp.into_inner();
            while let Ok(Some(_)) = acks.message().await {}
        }
    });
    (tx, stream)
}

/// The wall clock as Unix nanoseconds, as agents stamp their samples.
pub fn now_nanos() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX))
}

/// The capacity of a synthetic node: `cpus` logical CPUs at 2.5 GHz, `memory_gib` GiB,
/// one 10 Gb/s NIC and one 1 GB/s disk.
pub fn capacity(cpus: u32, memory_gib: u64) -> NodeCapacity {
    NodeCapacity {
        logical_cpus: cpus,
        cpu_max_frequency_hz: 2.5e9,
        memory_bytes: memory_gib << 30,
        nics: vec![convert::nic_capacity("eth0", 10_000_000_000, false)],
        disks: vec![convert::disk_capacity("nvme0n1", 1_000_000_000, true)],
        gpus: Vec::new(),
    }
}

/// Windows (60/300/900 s) that all show `value` with `stddev`.
pub fn flat_windows(value: f64, stddev: f64) -> ResourceLoad {
    let value = value.clamp(0.0, 1.0);
    let w = |s: u32| WindowSummary {
        window_seconds: s,
        mean: value,
        stddev: stddev.clamp(0.0, 1.0),
        min: (value - 2.0 * stddev).max(0.0),
        max: (value + 2.0 * stddev).min(1.0),
        p95: (value + 1.645 * stddev).min(1.0),
        count: s,
    };
    ResourceLoad {
        latest: value,
        windows: vec![w(60), w(300), w(900)],
    }
}

/// A complete report for `node` with sequence `sequence`, sampled now.
pub fn report(
    node: &str,
    instance: &str,
    sequence: u64,
    capacity: &NodeCapacity,
    load: SyntheticLoad,
) -> pb::NodeReport {
    let mut summary = LoadSummary::default();
    summary.set(ResourceKind::Cpu, flat_windows(load.cpu, load.stddev));
    summary.set(ResourceKind::Memory, flat_windows(load.memory, load.stddev));
    if !capacity.nics.is_empty() {
        summary.set(
            ResourceKind::Network,
            flat_windows(load.network, load.stddev),
        );
    }
    if !capacity.disks.is_empty() {
        summary.set(
            ResourceKind::DiskIo,
            flat_windows(load.disk_io, load.stddev),
        );
    }
    let now = now_nanos();
    let mem_avail = (capacity.memory_bytes as f64 * (1.0 - load.memory.clamp(0.0, 1.0))) as u64;
    pb::NodeReport {
        node_name: node.to_string(),
        agent_version: format!("synthetic-{}", loadstar_common::VERSION),
        sequence,
        sample_time_unix_nanos: now,
        sample_interval_seconds: 1.0,
        capacity: Some(convert::capacity_to_proto(capacity)),
        usage: convert::load_to_proto(&summary),
        nics: capacity
            .nics
            .iter()
            .map(|n| {
                let bps = load.network * n.speed_bits_per_second as f64 / 8.0;
                pb::NicUsage {
                    name: n.name.clone(),
                    rx_bytes_per_second: bps,
                    tx_bytes_per_second: bps * 0.5,
                    utilization_ratio: load.network.clamp(0.0, 1.0),
                }
            })
            .collect(),
        disks: capacity
            .disks
            .iter()
            .map(|d| pb::DiskUsage {
                name: d.name.clone(),
                read_bytes_per_second: load.disk_io * d.max_bytes_per_second as f64 * 0.5,
                write_bytes_per_second: load.disk_io * d.max_bytes_per_second as f64 * 0.5,
                read_iops: 100.0,
                write_iops: 100.0,
                utilization_ratio: load.disk_io.clamp(0.0, 1.0),
            })
            .collect(),
        gpus: Vec::new(),
        eviction: Some(pb::EvictionSignals {
            memory_available_bytes: mem_avail,
            nodefs_available_ratio: Some(0.6),
            nodefs_inodes_free_ratio: Some(0.9),
            nodefs_available_bytes: Some(100 << 30),
        }),
        pods: Vec::new(),
        collector_errors: Vec::new(),
        agent_instance: instance.to_string(),
        report_interval_seconds: 0.0,
        ack_interval_seconds: 0.0,
    }
}

/// A minimal valid report (instance `i1`, 4 CPUs, 8 GiB, sample time 0) for `node` with CPU at `cpu` and memory at `mem` (ratios).
pub fn fixed_report(node: &str, seq: u64, cpu: f64, mem: f64) -> pb::NodeReport {
    let mut load = LoadSummary::default();
    for (kind, v) in [(ResourceKind::Cpu, cpu), (ResourceKind::Memory, mem)] {
        load.set(
            kind,
            ResourceLoad {
                latest: v,
                windows: vec![WindowSummary {
                    window_seconds: 60,
                    mean: v,
                    stddev: 0.0,
                    min: v,
                    max: v,
                    p95: v,
                    count: 60,
                }],
            },
        );
    }
    pb::NodeReport {
        node_name: node.into(),
        agent_version: "test".into(),
        sequence: seq,
        sample_time_unix_nanos: now_nanos(),
        sample_interval_seconds: 1.0,
        capacity: Some(convert::capacity_to_proto(&NodeCapacity {
            logical_cpus: 4,
            cpu_max_frequency_hz: 2e9,
            memory_bytes: 8 << 30,
            ..Default::default()
        })),
        usage: convert::load_to_proto(&load),
        eviction: Some(pb::EvictionSignals {
            memory_available_bytes: 4 << 30,
            nodefs_available_ratio: Some(0.5),
            nodefs_inodes_free_ratio: Some(0.9),
            nodefs_available_bytes: Some(10 << 30),
        }),
        agent_instance: "i1".into(),
        ..Default::default()
    }
}

/// A report with every list and text field at the wire contract's caps
/// ([`loadstar_proto::limits`]): the largest report a scorer must accept, to check that the
/// message-size limit leaves room for it.
pub fn report_at_limits(node: &str, instance: &str, sequence: u64) -> pb::NodeReport {
    use loadstar_proto::limits as l;
    let name = |prefix: &str, i: usize| {
        let head = format!("{prefix}{i}-");
        format!("{head}{}", "x".repeat(l::MAX_NAME_BYTES - head.len()))
    };
    let text = "e".repeat(l::MAX_TEXT_BYTES);
    let mut capacity = capacity(64, 512);
    capacity.nics = (0..l::MAX_NICS)
        .map(|i| convert::nic_capacity(&name("nic", i), 25_000_000_000, false))
        .collect();
    capacity.disks = (0..l::MAX_DISKS)
        .map(|i| convert::disk_capacity(&name("disk", i), 2_000_000_000, true))
        .collect();
    capacity.gpus = (0..l::MAX_GPUS as u32)
        .map(|i| convert::gpu_capacity(i, &name("gpu", i as usize), &name("model", 0), 80 << 30))
        .collect();
    let mut r = report(
        node,
        instance,
        sequence,
        &capacity,
        SyntheticLoad::default(),
    );
    for u in &mut r.usage {
        let w = u.windows[0];
        u.windows = (1..=l::MAX_WINDOWS as u32)
            .map(|k| pb::WindowStats {
                window_seconds: 60 * k,
                ..w
            })
            .collect();
    }
    r.agent_version = "v".repeat(l::MAX_ID_BYTES);
    r.agent_instance = instance.to_string();
    r.nics = (0..l::MAX_NICS)
        .map(|i| pb::NicUsage {
            name: name("nic", i),
            ..Default::default()
        })
        .collect();
    r.disks = (0..l::MAX_DISKS)
        .map(|i| pb::DiskUsage {
            name: name("disk", i),
            ..Default::default()
        })
        .collect();
    r.gpus = (0..l::MAX_GPUS as u32)
        .map(|i| pb::GpuUsage {
            index: i,
            uuid: name("gpu", i as usize),
            memory_total_bytes: 80 << 30,
            error: text.clone(),
            ..Default::default()
        })
        .collect();
    r.pods = (0..l::MAX_PODS)
        .map(|i| pb::PodUsage {
            pod_uid: name("pod", i),
            cpu_cores: 0.01,
            memory_working_set_bytes: 1 << 20,
        })
        .collect();
    r.collector_errors = (0..l::MAX_COLLECTOR_ERRORS)
        .map(|i| pb::CollectorError {
            collector: format!("c{i}-{}", "c".repeat(l::MAX_ID_BYTES - 5)),
            message: text.clone(),
        })
        .collect();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_store::validate::{ReportLimits, validate};

    #[test]
    fn synthetic_reports_validate() {
        let cap = capacity(16, 64);
        for cpu in [0.0, 0.5, 1.0, 1.5] {
            let r = report(
                "node-1",
                "i",
                1,
                &cap,
                SyntheticLoad {
                    cpu,
                    ..Default::default()
                },
            );
            let a = validate(&r, &ReportLimits::default(), now_nanos()).expect("valid");
            let got = a
                .load
                .get(ResourceKind::Cpu)
                .and_then(|l| l.window(60))
                .map(|w| w.mean);
            assert_eq!(got, Some(cpu.min(1.0)));
        }
    }

    #[test]
    fn agent_streams_fit_the_per_connection_limit() {
        assert_eq!(connections_for(5000, 50), 84);
        assert_eq!(connections_for(100, 50), 50);
        assert_eq!(connections_for(0, 0), 1);
        for agents in [1, 59, 60, 61, 999, 10_000] {
            let c = connections_for(agents, 1);
            assert!(
                agents.div_ceil(c) <= STREAMS_PER_CONNECTION,
                "{agents} over {c}"
            );
        }
    }
}
