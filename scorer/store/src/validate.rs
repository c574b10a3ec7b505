//! Validation of incoming `NodeReport`s: every number finite and in range, sizes bounded,
//! names sane. A report that fails is rejected with a reason naming the field; nothing of it
//! is stored. Pure: no I/O, no clock.
use std::collections::HashMap;

use loadstar_proto::convert::{self, ConvertError};
use loadstar_proto::limits::{self, rates};
use loadstar_proto::pb;
use thiserror::Error;

use loadstar_framework::snapshot::{AgentNode, GpuState, MeasuredPod};

/// Size bounds for one report; generous for real nodes, tight enough to stop abuse. The
/// defaults are the wire contract's ([`loadstar_proto::limits`]).
#[derive(Debug, Clone, Copy)]
pub struct ReportLimits {
    /// Max NICs.
    pub max_nics: usize,
    /// Max disks.
    pub max_disks: usize,
    /// Max GPUs.
    pub max_gpus: usize,
    /// Max per-pod entries.
    pub max_pods: usize,
    /// Max windows per resource.
    pub max_windows: usize,
    /// Max length of a name (node, device, pod uid).
    pub max_name_len: usize,
    /// Max length of a short identifier (agent version and instance, collector name).
    pub max_id_len: usize,
    /// Max length of free text (collector and GPU errors).
    pub max_text_len: usize,
    /// Max collector errors.
    pub max_collector_errors: usize,
    /// How far `sample_time` may be from the scorer's clock, either way.
    pub max_clock_skew: std::time::Duration,
}

impl Default for ReportLimits {
    fn default() -> Self {
        ReportLimits {
            max_nics: limits::MAX_NICS,
            max_disks: limits::MAX_DISKS,
            max_gpus: limits::MAX_GPUS,
            max_pods: limits::MAX_PODS,
            max_windows: limits::MAX_WINDOWS,
            max_name_len: limits::MAX_NAME_BYTES,
            max_id_len: limits::MAX_ID_BYTES,
            max_text_len: limits::MAX_TEXT_BYTES,
            max_collector_errors: limits::MAX_COLLECTOR_ERRORS,
            max_clock_skew: std::time::Duration::from_secs(limits::MAX_CLOCK_SKEW_SECONDS),
        }
    }
}

/// Why a report was rejected.
#[derive(Debug, Error, PartialEq, Clone)]
pub enum ReportError {
    /// The node name is empty, too long or not a DNS subdomain.
    #[error("invalid node name {name:?}: {reason}")]
    NodeName {
        /// The name.
        name: String,
        /// Why.
        reason: &'static str,
    },
    /// A field's value is invalid.
    #[error("node {node}: {source}")]
    Field {
        /// Node name.
        node: String,
        /// The field error.
        #[source]
        source: ConvertError,
    },
    /// A list is longer than allowed.
    #[error("node {node}: {field} has {len} entries, more than the limit {max}")]
    TooMany {
        /// Node name.
        node: String,
        /// Field.
        field: &'static str,
        /// Entries.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// A required part is missing.
    #[error("node {node}: {field} is missing")]
    Missing {
        /// Node name.
        node: String,
        /// Field.
        field: &'static str,
    },
    /// A text field is longer than allowed.
    #[error("node {node}: {field} is {len} bytes long, more than the limit {max}")]
    TooLong {
        /// Node name.
        node: String,
        /// Field path.
        field: String,
        /// Its length, bytes.
        len: usize,
        /// Limit.
        max: usize,
    },
    /// The sample time is unset, or too far from the scorer's clock, or went backwards.
    #[error("node {node}: sample_time_unix_nanos {got}: {reason}")]
    SampleTime {
        /// Node name.
        node: String,
        /// The report's sample time.
        got: i64,
        /// What is wrong with it.
        reason: String,
    },
    /// Another live stream owns the node.
    #[error(
        "node {node} is reported by another live stream (agent instance {owner}); a node has \
         one reporting stream until that stream ends or the node goes stale"
    )]
    Owned {
        /// Node name.
        node: String,
        /// The owning stream's agent instance (quoted).
        owner: String,
    },
    /// The stream changed node name.
    #[error("stream for node {expected} sent a report for node {got}")]
    NodeChanged {
        /// Node of the stream's first report.
        expected: String,
        /// Node of this report.
        got: String,
    },
    /// The sequence did not increase.
    #[error("node {node}: sequence {got} does not follow {last}")]
    Sequence {
        /// Node name.
        node: String,
        /// Last accepted sequence.
        last: u64,
        /// This report's sequence.
        got: u64,
    },
}

impl ReportError {
    /// Short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            ReportError::NodeName { .. } => "node_name",
            ReportError::Field { .. } => "field",
            ReportError::TooMany { .. } => "too_many",
            ReportError::Missing { .. } => "missing",
            ReportError::NodeChanged { .. } => "node_changed",
            ReportError::TooLong { .. } => "too_long",
            ReportError::SampleTime { .. } => "sample_time",
            ReportError::Owned { .. } => "owned",
            ReportError::Sequence { .. } => "sequence",
        }
    }
}

/// Checks a Kubernetes node name: a DNS subdomain (lower-case alphanumerics, `-`, `.`).
pub fn check_node_name(name: &str, max_len: usize) -> Result<(), ReportError> {
    let err = |reason| ReportError::NodeName {
        name: name.chars().take(80).collect(),
        reason,
    };
    if name.is_empty() {
        return Err(err("empty"));
    }
    if name.len() > max_len {
        return Err(err("too long"));
    }
    let ok_char = |c: char| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '-' || c == '.';
    if !name.chars().all(ok_char) {
        return Err(err(
            "not a DNS subdomain (lower-case letters, digits, '-', '.')",
        ));
    }
    let alnum = |c: Option<char>| c.is_some_and(|c| c.is_ascii_alphanumeric());
    if !alnum(name.chars().next()) || !alnum(name.chars().last()) {
        return Err(err("must start and end with a letter or digit"));
    }
    Ok(())
}

/// Every text field within its cap: names, identifiers and free text.
fn check_texts(report: &pb::NodeReport, limits: &ReportLimits) -> Result<(), ReportError> {
    let check = |field: &dyn Fn() -> String, text: &str, max: usize| {
        if text.len() > max {
            Err(ReportError::TooLong {
                node: report.node_name.clone(),
                field: field(),
                len: text.len(),
                max,
            })
        } else {
            Ok(())
        }
    };
    let (name, id, text) = (limits.max_name_len, limits.max_id_len, limits.max_text_len);
    check(&|| "agent_version".into(), &report.agent_version, id)?;
    check(&|| "agent_instance".into(), &report.agent_instance, id)?;
    if report.collector_errors.len() > limits.max_collector_errors {
        return Err(ReportError::TooMany {
            node: report.node_name.clone(),
            field: "collector_errors",
            len: report.collector_errors.len(),
            max: limits.max_collector_errors,
        });
    }
    for (i, e) in report.collector_errors.iter().enumerate() {
        check(
            &|| format!("collector_errors[{i}].collector"),
            &e.collector,
            id,
        )?;
        check(
            &|| format!("collector_errors[{i}].message"),
            &e.message,
            text,
        )?;
    }
    if let Some(c) = &report.capacity {
        for (i, n) in c.nics.iter().enumerate() {
            check(&|| format!("capacity.nics[{i}].name"), &n.name, name)?;
        }
        for (i, d) in c.disks.iter().enumerate() {
            check(&|| format!("capacity.disks[{i}].name"), &d.name, name)?;
        }
        for (i, g) in c.gpus.iter().enumerate() {
            check(&|| format!("capacity.gpus[{i}].uuid"), &g.uuid, name)?;
            check(&|| format!("capacity.gpus[{i}].model"), &g.model, name)?;
        }
    }
    for (i, n) in report.nics.iter().enumerate() {
        check(&|| format!("nics[{i}].name"), &n.name, name)?;
    }
    for (i, d) in report.disks.iter().enumerate() {
        check(&|| format!("disks[{i}].name"), &d.name, name)?;
    }
    for (i, g) in report.gpus.iter().enumerate() {
        check(&|| format!("gpus[{i}].uuid"), &g.uuid, name)?;
        check(&|| format!("gpus[{i}].error"), &g.error, text)?;
    }
    Ok(())
}

/// The sample time is set and within the allowed skew of the scorer's clock.
fn check_sample_time(
    report: &pb::NodeReport,
    limits: &ReportLimits,
    now_unix_nanos: i64,
) -> Result<(), ReportError> {
    let got = report.sample_time_unix_nanos;
    let err = |reason: String| ReportError::SampleTime {
        node: report.node_name.clone(),
        got,
        reason,
    };
    if got <= 0 {
        return Err(err("unset or before 1970".into()));
    }
    let skew = i128::from(got) - i128::from(now_unix_nanos);
    let max = limits.max_clock_skew.as_nanos() as i128;
    if skew.abs() > max {
        return Err(err(format!(
            "{:.0} s {} the scorer's clock, more than the allowed skew of {} s",
            (skew.abs() as f64) / 1e9,
            if skew > 0 { "ahead of" } else { "behind" },
            limits.max_clock_skew.as_secs()
        )));
    }
    Ok(())
}

/// NIC, disk and GPU detail values: finite, non-negative, within plausible bounds.
fn check_details(report: &pb::NodeReport) -> Result<(), ConvertError> {
    let rate =
        |f: &dyn Fn() -> String, v: f64| convert::bounded(f, v, 0.0, rates::MAX_BYTES_PER_SECOND);
    for (i, n) in report.nics.iter().enumerate() {
        rate(
            &|| format!("nics[{i}].rx_bytes_per_second"),
            n.rx_bytes_per_second,
        )?;
        rate(
            &|| format!("nics[{i}].tx_bytes_per_second"),
            n.tx_bytes_per_second,
        )?;
        convert::ratio(
            || format!("nics[{i}].utilization_ratio"),
            n.utilization_ratio,
        )?;
    }
    for (i, d) in report.disks.iter().enumerate() {
        rate(
            &|| format!("disks[{i}].read_bytes_per_second"),
            d.read_bytes_per_second,
        )?;
        rate(
            &|| format!("disks[{i}].write_bytes_per_second"),
            d.write_bytes_per_second,
        )?;
        let iops = |f: &dyn Fn() -> String, v| convert::bounded(f, v, 0.0, rates::MAX_IOPS);
        iops(&|| format!("disks[{i}].read_iops"), d.read_iops)?;
        iops(&|| format!("disks[{i}].write_iops"), d.write_iops)?;
        convert::ratio(
            || format!("disks[{i}].utilization_ratio"),
            d.utilization_ratio,
        )?;
    }
    for (i, g) in report.gpus.iter().enumerate() {
        let (lo, hi) = rates::GPU_TEMPERATURE_CELSIUS;
        convert::bounded(
            || format!("gpus[{i}].temperature_celsius"),
            g.temperature_celsius,
            lo,
            hi,
        )?;
        convert::bounded(
            || format!("gpus[{i}].power_watts"),
            g.power_watts,
            0.0,
            rates::MAX_GPU_POWER_WATTS,
        )?;
    }
    Ok(())
}

/// Validates a report and converts it into the scorer's [`AgentNode`] (without timestamps,
/// which the store sets). `now_unix_nanos` is the scorer's wall clock, for the sample-time
/// check.
pub fn validate(
    report: &pb::NodeReport,
    limits: &ReportLimits,
    now_unix_nanos: i64,
) -> Result<AgentNode, ReportError> {
    check_node_name(&report.node_name, limits.max_name_len)?;
    check_texts(report, limits)?;
    check_sample_time(report, limits, now_unix_nanos)?;
    let node = || report.node_name.clone();
    let field = |source| ReportError::Field {
        node: node(),
        source,
    };
    let too_many = |field: &'static str, len: usize, max: usize| {
        if len > max {
            Err(ReportError::TooMany {
                node: node(),
                field,
                len,
                max,
            })
        } else {
            Ok(())
        }
    };
    let capacity = report.capacity.as_ref().ok_or(ReportError::Missing {
        node: node(),
        field: "capacity",
    })?;
    too_many("capacity.nics", capacity.nics.len(), limits.max_nics)?;
    too_many("capacity.disks", capacity.disks.len(), limits.max_disks)?;
    too_many("capacity.gpus", capacity.gpus.len(), limits.max_gpus)?;
    too_many("nics", report.nics.len(), limits.max_nics)?;
    too_many("disks", report.disks.len(), limits.max_disks)?;
    too_many("gpus", report.gpus.len(), limits.max_gpus)?;
    too_many("pods", report.pods.len(), limits.max_pods)?;
    for u in &report.usage {
        too_many("usage.windows", u.windows.len(), limits.max_windows)?;
    }
    if capacity.logical_cpus == 0 {
        return Err(field(ConvertError::OutOfRange {
            field: "capacity.logical_cpus".into(),
            value: 0.0,
            min: 1.0,
            max: f64::from(limits::capacity::MAX_LOGICAL_CPUS),
        }));
    }
    convert::bounded(
        || "sample_interval_seconds".into(),
        report.sample_interval_seconds,
        0.01,
        3600.0,
    )
    .map_err(field)?;
    if report.report_interval_seconds != 0.0 {
        convert::bounded(
            || "report_interval_seconds".into(),
            report.report_interval_seconds,
            0.01,
            3600.0,
        )
        .map_err(field)?;
    }
    convert::bounded(
        || "ack_interval_seconds".into(),
        report.ack_interval_seconds,
        0.0,
        limits::MAX_ACK_INTERVAL_SECONDS as f64,
    )
    .map_err(field)?;
    let capacity = convert::capacity_from_proto(capacity).map_err(field)?;
    let load = convert::load_from_proto(&report.usage).map_err(field)?;
    let eviction = report.eviction.unwrap_or_default();
    let opt_ratio = |name: &'static str, v: Option<f64>| {
        v.map(|v| convert::ratio(|| format!("eviction.{name}"), v))
            .transpose()
    };
    let nodefs_available_ratio =
        opt_ratio("nodefs_available_ratio", eviction.nodefs_available_ratio).map_err(field)?;
    let nodefs_inodes_free_ratio = opt_ratio(
        "nodefs_inodes_free_ratio",
        eviction.nodefs_inodes_free_ratio,
    )
    .map_err(field)?;
    check_details(report).map_err(field)?;
    let mut gpus = Vec::with_capacity(report.gpus.len());
    for (i, g) in report.gpus.iter().enumerate() {
        let healthy = g.error.is_empty();
        let utilization = if healthy {
            convert::ratio(
                || format!("gpus[{i}].utilization_ratio"),
                g.utilization_ratio,
            )
            .map_err(field)?
        } else {
            0.0
        };
        gpus.push(GpuState {
            index: g.index,
            utilization,
            memory_used_bytes: g.memory_used_bytes,
            memory_total_bytes: g.memory_total_bytes,
            process_count: g.process_count,
            healthy,
        });
    }
    let mut pods = HashMap::with_capacity(report.pods.len());
    for (i, p) in report.pods.iter().enumerate() {
        if p.pod_uid.is_empty() || p.pod_uid.len() > limits.max_name_len {
            return Err(field(ConvertError::OutOfRange {
                field: format!("pods[{i}].pod_uid"),
                value: p.pod_uid.len() as f64,
                min: 1.0,
                max: limits.max_name_len as f64,
            }));
        }
        let cores = convert::bounded(
            || format!("pods[{i}].cpu_cores"),
            p.cpu_cores,
            0.0,
            f64::from(capacity.logical_cpus) * 1.05,
        )
        .map_err(field)?;
        pods.insert(
            p.pod_uid.clone(),
            MeasuredPod {
                cpu_millis: cores * 1000.0,
                memory_bytes: p.memory_working_set_bytes as f64,
            },
        );
    }
    Ok(AgentNode {
        capacity,
        load,
        memory_available_bytes: eviction.memory_available_bytes,
        nodefs_available_ratio,
        nodefs_inodes_free_ratio,
        gpus,
        pods,
        interval_seconds: report.sample_interval_seconds,
        report_interval_seconds: report.report_interval_seconds,
        received_at: None,
        last_pressure_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn now() -> i64 {
        loadstar_testkit::agent::now_nanos()
    }
    use loadstar_common::model::ResourceKind;
    use loadstar_testkit::agent::fixed_report as report;

    #[test]
    fn valid_report_converts() {
        let a = validate(
            &report("node-1", 1, 0.5, 0.25),
            &ReportLimits::default(),
            now(),
        )
        .expect("valid");
        assert_eq!(a.capacity.logical_cpus, 4);
        assert_eq!(a.load.get(ResourceKind::Cpu).map(|l| l.latest), Some(0.5));
        assert_eq!(a.nodefs_available_ratio, Some(0.5));
    }

    #[test]
    fn bad_reports_are_rejected_with_reasons() {
        let limits = ReportLimits::default();
        let mut r = report("Node_1", 1, 0.5, 0.5);
        assert!(matches!(
            validate(&r, &limits, now()),
            Err(ReportError::NodeName { .. })
        ));
        r = report("n1", 1, 0.5, 0.5);
        r.usage[0].windows[0].stddev_ratio = f64::INFINITY;
        let e = validate(&r, &limits, now()).expect_err("inf");
        assert_eq!(
            e.to_string(),
            "node n1: usage[0].windows[0].stddev_ratio: non-finite value inf"
        );
        r = report("n1", 1, 0.5, 0.5);
        r.capacity = None;
        assert_eq!(
            validate(&r, &limits, now())
                .expect_err("missing")
                .to_string(),
            "node n1: capacity is missing"
        );
        r = report("n1", 1, 0.5, 0.5);
        r.pods = vec![pb::PodUsage::default(); 3000];
        assert!(matches!(
            validate(&r, &limits, now()),
            Err(ReportError::TooMany { .. })
        ));
        r = report("n1", 1, 0.5, 0.5);
        r.sample_interval_seconds = f64::NAN;
        assert!(validate(&r, &limits, now()).is_err());
        for bad in [f64::NAN, -1.0, 1e9] {
            r = report("n1", 1, 0.5, 0.5);
            r.report_interval_seconds = bad;
            let e = validate(&r, &limits, now()).expect_err("bad report interval");
            assert!(e.to_string().contains("report_interval_seconds"), "{e}");
        }
        for bad in [f64::NAN, -1.0, 301.0, f64::INFINITY] {
            r = report("n1", 1, 0.5, 0.5);
            r.ack_interval_seconds = bad;
            let e = validate(&r, &limits, now()).expect_err("bad ack interval");
            assert!(e.to_string().contains("ack_interval_seconds"), "{e}");
        }
        r = report("n1", 1, 0.5, 0.5);
        r.ack_interval_seconds = 10.0;
        validate(&r, &limits, now()).expect("sparse acks");
        // A paced report: staleness follows the longer interval.
        r = report("n1", 1, 0.5, 0.5);
        r.report_interval_seconds = 8.0;
        let node = validate(&r, &limits, now()).expect("paced report");
        assert_eq!(node.report_interval_seconds, 8.0);
        assert_eq!(node.interval_seconds, r.sample_interval_seconds);
        r = report("n1", 1, 0.5, 0.5);
        r.eviction = Some(pb::EvictionSignals {
            nodefs_available_ratio: Some(-1.0),
            ..Default::default()
        });
        assert!(validate(&r, &limits, now()).is_err());
    }

    #[test]
    fn node_names() {
        assert!(check_node_name("ip-10-0-0-1.ec2.internal", 253).is_ok());
        assert!(check_node_name("", 253).is_err());
        assert!(check_node_name("-a", 253).is_err());
        assert!(check_node_name("a b", 253).is_err());
        assert!(check_node_name(&"a".repeat(300), 253).is_err());
    }
}
