//! The `metrics.k8s.io/v1beta1` wire format (what metrics-server serves and `kubectl top`
//! and the HPA read): `NodeMetrics`, `PodMetrics`, their lists, discovery documents and
//! `Status` errors, built from plain rows. Pure.
use std::collections::BTreeMap;

use serde_json::{Value, json};

/// The group/version served.
pub const GROUP_VERSION: &str = "metrics.k8s.io/v1beta1";

/// One node's usage.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeRow {
    /// Node name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// CPU in use, cores.
    pub cpu_cores: f64,
    /// Memory in use, bytes.
    pub memory_bytes: f64,
    /// End of the measurement window, RFC 3339.
    pub timestamp: String,
    /// The window's length, seconds.
    pub window_s: f64,
}

/// One pod's usage (the agents measure whole pods: one container entry carries it).
#[derive(Debug, Clone, PartialEq)]
pub struct PodRow {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Its labels.
    pub labels: BTreeMap<String, String>,
    /// The container entry's name.
    pub container: String,
    /// CPU, cores (mean over the window).
    pub cpu_cores: f64,
    /// Memory working set, bytes (mean over the window).
    pub memory_bytes: f64,
    /// End of the window, RFC 3339.
    pub timestamp: String,
    /// The window's length, seconds.
    pub window_s: f64,
}

/// CPU as metrics-server writes it: whole nanocores.
pub fn cpu_quantity(cores: f64) -> String {
    format!("{}n", (cores.max(0.0) * 1e9).round() as u64)
}

/// Memory as metrics-server writes it: whole KiB.
pub fn memory_quantity(bytes: f64) -> String {
    format!("{}Ki", (bytes.max(0.0) / 1024.0).round() as u64)
}

/// A window length as a Go duration (`15s`, `1.5s`).
pub fn duration(seconds: f64) -> String {
    let s = (seconds.max(0.0) * 1000.0).round() / 1000.0;
    if s.fract() == 0.0 {
        format!("{}s", s as u64)
    } else {
        format!("{s}s")
    }
}

fn usage(cpu: f64, mem: f64) -> Value {
    json!({"cpu": cpu_quantity(cpu), "memory": memory_quantity(mem)})
}

/// A `NodeMetrics`.
pub fn node_metrics(r: &NodeRow) -> Value {
    json!({
        "kind": "NodeMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": {"name": r.name, "labels": r.labels, "creationTimestamp": r.timestamp},
        "timestamp": r.timestamp,
        "window": duration(r.window_s),
        "usage": usage(r.cpu_cores, r.memory_bytes),
    })
}

/// A `PodMetrics`.
pub fn pod_metrics(r: &PodRow) -> Value {
    json!({
        "kind": "PodMetrics",
        "apiVersion": GROUP_VERSION,
        "metadata": {"name": r.name, "namespace": r.namespace, "labels": r.labels,
                     "creationTimestamp": r.timestamp},
        "timestamp": r.timestamp,
        "window": duration(r.window_s),
        "containers": [{"name": r.container, "usage": usage(r.cpu_cores, r.memory_bytes)}],
    })
}

/// A `NodeMetricsList` or `PodMetricsList` of `items`.
pub fn list(kind: &str, items: Vec<Value>) -> Value {
    json!({"kind": kind, "apiVersion": GROUP_VERSION, "metadata": {}, "items": items})
}

/// The `APIResourceList` of the group version.
pub fn resource_list() -> Value {
    json!({
        "kind": "APIResourceList",
        "apiVersion": "v1",
        "groupVersion": GROUP_VERSION,
        "resources": [
            {"name": "nodes", "singularName": "", "namespaced": false, "kind": "NodeMetrics",
             "verbs": ["get", "list"]},
            {"name": "pods", "singularName": "", "namespaced": true, "kind": "PodMetrics",
             "verbs": ["get", "list"]},
        ]
    })
}

/// The `APIGroup` document.
pub fn api_group() -> Value {
    let gv = json!({"groupVersion": GROUP_VERSION, "version": "v1beta1"});
    json!({"kind": "APIGroup", "apiVersion": "v1", "name": "metrics.k8s.io",
           "versions": [gv.clone()], "preferredVersion": gv})
}

/// A `Status` failure (what clients print for errors).
pub fn status(code: u16, reason: &str, message: &str) -> Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": message, "reason": reason, "code": code})
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities_as_metrics_server_writes_them() {
        assert_eq!(cpu_quantity(0.25), "250000000n");
        assert_eq!(cpu_quantity(-1.0), "0n");
        assert_eq!(memory_quantity(64.0 * 1024.0 * 1024.0), "65536Ki");
        assert_eq!(duration(15.0), "15s");
        assert_eq!(duration(1.5), "1.5s");
    }

    #[test]
    fn pod_metrics_carry_what_the_hpa_reads() {
        let r = PodRow {
            namespace: "ns".into(),
            name: "web-1".into(),
            labels: [("app".to_string(), "web".to_string())].into(),
            container: "web".into(),
            cpu_cores: 0.5,
            memory_bytes: 1048576.0,
            timestamp: "2026-11-26T10:00:00Z".into(),
            window_s: 15.0,
        };
        let v = pod_metrics(&r);
        assert_eq!(v["metadata"]["namespace"], "ns");
        assert_eq!(v["containers"][0]["usage"]["cpu"], "500000000n");
        assert_eq!(v["containers"][0]["usage"]["memory"], "1024Ki");
        assert_eq!(v["window"], "15s");
        let l = list("PodMetricsList", vec![v]);
        assert_eq!(l["items"][0]["metadata"]["labels"]["app"], "web");
        assert_eq!(status(404, "NotFound", "x")["code"], 404);
    }
}
