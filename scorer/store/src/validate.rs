//! Validation of incoming `NodeReport`s: every number finite and in range, sizes bounded,
//! names sane. A report that fails is rejected with a reason naming the field; nothing of it
//! is stored. Pure: no I/O, no clock.
use std::collections::HashMap;

use loadstar_proto::convert::{self, ConvertError};
use loadstar_proto::pb;
use thiserror::Error;

use loadstar_framework::snapshot::{AgentNode, GpuState, MeasuredPod};

/// Size bounds for one report; generous for real nodes, tight enough to stop abuse.
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
}

impl Default for ReportLimits {
    fn default() -> Self {
        ReportLimits {
            max_nics: 64,
            max_disks: 256,
            max_gpus: 64,
            max_pods: 2048,
            max_windows: 16,
            max_name_len: 253,
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

/// Validates a report and converts it into the scorer's [`AgentNode`] (without timestamps,
/// which the store sets).
pub fn validate(report: &pb::NodeReport, limits: &ReportLimits) -> Result<AgentNode, ReportError> {
    check_node_name(&report.node_name, limits.max_name_len)?;
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
            max: f64::from(u32::MAX),
        }));
    }
    convert::bounded(
        || "sample_interval_seconds".into(),
        report.sample_interval_seconds,
        0.01,
        3600.0,
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
        received_at: None,
        last_pressure_at: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_common::model::ResourceKind;
    use loadstar_testkit::agent::fixed_report as report;

    #[test]
    fn valid_report_converts() {
        let a = validate(&report("node-1", 1, 0.5, 0.25), &ReportLimits::default()).expect("valid");
        assert_eq!(a.capacity.logical_cpus, 4);
        assert_eq!(a.load.get(ResourceKind::Cpu).map(|l| l.latest), Some(0.5));
        assert_eq!(a.nodefs_available_ratio, Some(0.5));
    }

    #[test]
    fn bad_reports_are_rejected_with_reasons() {
        let limits = ReportLimits::default();
        let mut r = report("Node_1", 1, 0.5, 0.5);
        assert!(matches!(
            validate(&r, &limits),
            Err(ReportError::NodeName { .. })
        ));
        r = report("n1", 1, 0.5, 0.5);
        r.usage[0].windows[0].stddev_ratio = f64::INFINITY;
        let e = validate(&r, &limits).expect_err("inf");
        assert_eq!(
            e.to_string(),
            "node n1: usage[0].windows[0].stddev_ratio: non-finite value inf"
        );
        r = report("n1", 1, 0.5, 0.5);
        r.capacity = None;
        assert_eq!(
            validate(&r, &limits).expect_err("missing").to_string(),
            "node n1: capacity is missing"
        );
        r = report("n1", 1, 0.5, 0.5);
        r.pods = vec![pb::PodUsage::default(); 3000];
        assert!(matches!(
            validate(&r, &limits),
            Err(ReportError::TooMany { .. })
        ));
        r = report("n1", 1, 0.5, 0.5);
        r.sample_interval_seconds = f64::NAN;
        assert!(validate(&r, &limits).is_err());
        r = report("n1", 1, 0.5, 0.5);
        r.eviction = Some(pb::EvictionSignals {
            nodefs_available_ratio: Some(-1.0),
            ..Default::default()
        });
        assert!(validate(&r, &limits).is_err());
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
