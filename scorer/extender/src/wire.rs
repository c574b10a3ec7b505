//! The extender protocol's JSON, `k8s.io/kube-scheduler/extender/v1` as of Kubernetes 1.20.
//! The Go structs carry no JSON tags, so the field names are the Go names (`Pod`, `Nodes`,
//! `NodeNames`, `FailedNodes`, `Host`, `Score`, …). Pods and nodes stay raw JSON here: the pod
//! goes through the scheduler's own conversion, and nodes are echoed back as sent.
use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Highest score an extender gives (`MaxExtenderPriority`); kube-scheduler multiplies by the
/// extender's `weight` and by 10 (`MaxNodeScore / MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;

/// A `v1.NodeList` (only its items are read).
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
pub struct NodeList {
    /// The nodes, whole.
    #[serde(default)]
    pub items: Vec<Value>,
}

/// `ExtenderArgs`: the pod and the candidate nodes — `NodeNames` when the extender is
/// `nodeCacheCapable`, else whole `Nodes`.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod", default)]
    pub pod: Value,
    /// Whole nodes (`nodeCacheCapable: false`).
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    /// Node names (`nodeCacheCapable: true`).
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
}

impl ExtenderArgs {
    /// The candidate node names, in order (taken out of `NodeNames` when sent); `Err` when a
    /// node object has no name or neither list was sent.
    pub fn take_names(&mut self) -> Result<Vec<String>, String> {
        if let Some(names) = self.node_names.take() {
            return Ok(names);
        }
        let Some(list) = &self.nodes else {
            return Err("neither NodeNames nor Nodes was sent".into());
        };
        list.items
            .iter()
            .enumerate()
            .map(|(i, n)| {
                n.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .map(str::to_string)
                    .ok_or_else(|| format!("Nodes.items[{i}] has no metadata.name"))
            })
            .collect()
    }
}

/// `ExtenderFilterResult`.
#[derive(Debug, Clone, Default, Serialize)]
pub struct ExtenderFilterResult<'a> {
    /// The passing nodes, whole (when they were sent whole).
    #[serde(rename = "Nodes")]
    pub nodes: Option<NodeList>,
    /// The passing node names (when names were sent).
    #[serde(rename = "NodeNames")]
    pub node_names: Option<Vec<&'a str>>,
    /// Rejected nodes and why.
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    /// A whole-request failure (kube-scheduler fails the pod's cycle, or skips the extender
    /// when it is `ignorable`).
    #[serde(rename = "Error")]
    pub error: String,
}

/// One `HostPriority` of a `HostPriorityList`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPriority<'a> {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: &'a str,
    /// 0–[`MAX_EXTENDER_PRIORITY`].
    #[serde(rename = "Score")]
    pub score: i64,
}
