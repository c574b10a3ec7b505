//! `NodePorts` filter: host-port conflicts, as kube-scheduler's `NodePorts` plugin
//! (`pkg/scheduler/framework/plugins/nodeports/node_ports.go`, conflict rule of
//! `HostPortInfo.CheckConflict` in `pkg/scheduler/framework/types.go`).
//!
//! A wanted port conflicts with a used one when protocol and port are equal and the host IPs
//! are equal or either is the wildcard (`0.0.0.0`, or empty). An empty protocol means `TCP`;
//! port 0 asks for nothing. Reason, as upstream:
//! `node(s) didn't have free ports for the requested pod ports`.
use loadstar_framework::snapshot::{HostPort, NodeView, PodInfo};
use loadstar_framework::{CycleContext, FilterPlugin, Reason};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "NodePorts";
/// Upstream's reason.
pub const REASON: &str = "node(s) didn't have free ports for the requested pod ports";

fn protocol(p: &HostPort) -> &str {
    if p.protocol.is_empty() {
        "TCP"
    } else {
        &p.protocol
    }
}

fn is_wildcard(ip: &str) -> bool {
    ip.is_empty() || ip == "0.0.0.0"
}

/// Whether two host ports conflict.
pub fn conflicts(a: &HostPort, b: &HostPort) -> bool {
    a.port != 0
        && a.port == b.port
        && protocol(a) == protocol(b)
        && (a.host_ip == b.host_ip || is_wildcard(&a.host_ip) || is_wildcard(&b.host_ip))
}

/// The host-port filter.
#[derive(Debug, Clone, Default)]
pub struct NodePorts;

impl NodePorts {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(NodePorts)
    }
}

impl FilterPlugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn skips(&self, _: Option<&loadstar_framework::PreFilterState>, pod: &PodInfo) -> bool {
        pod.host_ports.is_empty()
    }

    /// Evicting the pod holding the port frees it (upstream: `Unschedulable`).
    fn preemption_may_help(&self, _reason: &str) -> bool {
        true
    }

    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        if pod.host_ports.is_empty() || !ctx.digest(node).has_host_ports {
            return Ok(());
        }
        let used = node.alloc.pods.iter().flat_map(|p| &p.host_ports);
        for u in used {
            if pod.host_ports.iter().any(|w| conflicts(w, u)) {
                return Err(REASON.into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::PodOnNode;
    use loadstar_testkit::snapshot::*;

    fn hp(protocol: &str, ip: &str, port: u16) -> HostPort {
        HostPort {
            protocol: protocol.into(),
            host_ip: ip.into(),
            port,
        }
    }

    #[test]
    fn conflict_rules_follow_upstream() {
        assert!(conflicts(&hp("TCP", "", 80), &hp("", "10.0.0.1", 80)));
        assert!(conflicts(
            &hp("TCP", "10.0.0.1", 80),
            &hp("TCP", "0.0.0.0", 80)
        ));
        assert!(!conflicts(
            &hp("TCP", "10.0.0.1", 80),
            &hp("TCP", "10.0.0.2", 80)
        ));
        assert!(!conflicts(&hp("UDP", "", 53), &hp("TCP", "", 53)));
        assert!(!conflicts(&hp("TCP", "", 80), &hp("TCP", "", 81)));
        assert!(!conflicts(&hp("TCP", "", 0), &hp("TCP", "", 0)));
    }

    #[test]
    fn filter_rejects_nodes_with_used_ports() {
        let node = with_pod(
            kube_node("n", 1000, GIB),
            PodOnNode {
                uid: "a".into(),
                host_ports: vec![hp("TCP", "", 8080)],
                ..Default::default()
            },
        );
        let mut p = pod(100, MIB);
        assert_eq!(filter_one(&NodePorts, node.clone(), &p), Ok(()));
        p.host_ports = vec![hp("UDP", "", 8080), hp("TCP", "127.0.0.1", 8080)];
        assert_eq!(filter_one(&NodePorts, node.clone(), &p), Err(REASON.into()));
        p.host_ports = vec![hp("UDP", "", 8080)];
        assert_eq!(filter_one(&NodePorts, node, &p), Ok(()));
    }
}
