//! `NodeReady` filter: the node's `Ready` condition is true and it is not cordoned.
//!
//! Upstream splits this between the `NodeUnschedulable` plugin
//! (`pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go`: a cordoned node
//! passes only pods tolerating `node.kubernetes.io/unschedulable:NoSchedule`, reason
//! `node(s) were unschedulable`) and the node lifecycle controller's
//! `node.kubernetes.io/not-ready:NoSchedule` taint. Loadstar checks the condition directly
//! (its cache may see the condition before the taint) and honours the same toleration, with
//! the historical `CheckNodeCondition` reason `node(s) were not ready`. Nodes without
//! Kubernetes facts (standalone mode, agent-only nodes) pass.
use loadstar_framework::snapshot::{NodeDigest, NodeView, PodInfo};
use loadstar_framework::{
    CycleContext, FilterPlugin, FilteredNode, PreFilterState, Reason, retain_passing,
};

use crate::args::{NoArgs, PluginError, parse_args};
use crate::rows::{RowCode, RowCodes, code_at};
use crate::taint_toleration::tolerates_key;

/// Plugin name.
pub const NAME: &str = "NodeReady";
/// Reason for a node whose Ready condition is not true.
pub const REASON_NOT_READY: &str = "node(s) were not ready";
/// Reason for a cordoned node.
pub const REASON_UNSCHEDULABLE: &str = "node(s) were unschedulable";
/// Taint key the pod may tolerate to land on a not-ready node.
pub const NOT_READY_TAINT: &str = "node.kubernetes.io/not-ready";
/// Taint key the pod may tolerate to land on a cordoned node.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";

/// The readiness filter.
#[derive(Debug, Clone, Default)]
pub struct NodeReady;

impl NodeReady {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(NodeReady)
    }
}

impl FilterPlugin for NodeReady {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        Tolerated::of(pod).verdict(Readiness::code(&ctx.digest(node), node))
    }

    /// Over one byte per node ([`Readiness`]) memoised per digest table.
    fn filter_nodes(
        &self,
        ctx: &CycleContext<'_>,
        _state: Option<&PreFilterState>,
        pod: &PodInfo,
        nodes: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        let tolerated = Tolerated::of(pod);
        let codes = RowCodes::<Readiness>::of(ctx);
        retain_passing(NAME, nodes, filtered, |i| {
            tolerated.verdict(code_at(codes.as_deref(), ctx, i))
        });
    }
}

/// A node's readiness as one byte: bit 0 not ready, bit 1 cordoned (both 0 without
/// Kubernetes facts).
#[derive(Debug)]
struct Readiness;

const NOT_READY: u8 = 1;
const CORDONED: u8 = 2;

impl RowCode for Readiness {
    fn code(d: &NodeDigest, _: &NodeView) -> u8 {
        if !d.has_kube {
            return 0;
        }
        (u8::from(!d.ready) * NOT_READY) | (u8::from(d.unschedulable) * CORDONED)
    }
}

/// Which of the filter's two taints the pod tolerates, as the bits it ignores.
struct Tolerated {
    rejecting: u8,
}

impl Tolerated {
    fn of(pod: &PodInfo) -> Tolerated {
        Tolerated {
            rejecting: (u8::from(!tolerates_key(pod, NOT_READY_TAINT)) * NOT_READY)
                | (u8::from(!tolerates_key(pod, UNSCHEDULABLE_TAINT)) * CORDONED),
        }
    }

    /// The verdict on a node of readiness `code`: not ready first, as upstream checks.
    #[inline(always)]
    fn verdict(&self, code: u8) -> Result<(), Reason> {
        let failing = code & self.rejecting;
        if failing == 0 {
            Ok(())
        } else if failing & NOT_READY != 0 {
            Err(REASON_NOT_READY.into())
        } else {
            Err(REASON_UNSCHEDULABLE.into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::Toleration;
    use loadstar_testkit::snapshot::*;

    #[test]
    fn batched_codes_give_the_node_by_node_verdicts() {
        let not_ready = edit_kube(kube_node("b", 1000, GIB), |k| k.ready = false);
        let cordoned = edit_kube(kube_node("c", 1000, GIB), |k| k.unschedulable = true);
        let mut both = edit_kube(not_ready.clone(), |k| k.unschedulable = true);
        both.name = "d".into();
        let mut bare = both.clone();
        bare.name = "e".into();
        bare.kube = None;
        let snap = snapshot(vec![
            kube_node("a", 1000, GIB),
            not_ready,
            cordoned,
            both,
            bare,
        ]);
        for p in [
            pod_tolerating(&[]),
            pod_tolerating(&[NOT_READY_TAINT]),
            pod_tolerating(&[UNSCHEDULABLE_TAINT]),
            pod_tolerating(&[NOT_READY_TAINT, UNSCHEDULABLE_TAINT]),
        ] {
            assert_batch_agrees(
                &NodeReady,
                &snap,
                &p,
                loadstar_framework::StalePolicy::Fallback,
            );
        }
        let plain = ctx(&snap);
        assert_eq!(
            NodeReady.filter(
                &plain,
                &pod_tolerating(&[NOT_READY_TAINT]),
                &snap.nodes()[3]
            ),
            Err(REASON_UNSCHEDULABLE.into())
        );
        assert_eq!(
            NodeReady.filter(&plain, &pod_tolerating(&[]), &snap.nodes()[3]),
            Err(REASON_NOT_READY.into())
        );
    }

    #[test]
    fn ready_schedulable_and_unknown_nodes_pass() {
        let p = pod(100, MIB);
        assert_eq!(
            filter_one(&NodeReady, kube_node("a", 1000, GIB), &p),
            Ok(())
        );
        let mut bare = kube_node("b", 1000, GIB);
        bare.kube = None;
        assert_eq!(filter_one(&NodeReady, bare, &p), Ok(()));
    }

    #[test]
    fn not_ready_and_cordoned_nodes_fail_unless_tolerated() {
        let mut p = pod(100, MIB);
        let not_ready = edit_kube(kube_node("a", 1000, GIB), |k| k.ready = false);
        let cordoned = edit_kube(kube_node("b", 1000, GIB), |k| k.unschedulable = true);
        assert_eq!(
            filter_one(&NodeReady, not_ready.clone(), &p),
            Err(REASON_NOT_READY.into())
        );
        assert_eq!(
            filter_one(&NodeReady, cordoned.clone(), &p),
            Err(REASON_UNSCHEDULABLE.into())
        );
        p.tolerations = vec![Toleration {
            key: UNSCHEDULABLE_TAINT.into(),
            exists: true,
            ..Default::default()
        }];
        assert_eq!(filter_one(&NodeReady, cordoned, &p), Ok(()));
        assert!(filter_one(&NodeReady, not_ready, &p).is_err());
    }
}
