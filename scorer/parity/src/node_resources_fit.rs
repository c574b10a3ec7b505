//! `NodeResourcesFit` filter: the pod's requests fit in allocatable − requested, as
//! kube-scheduler's `NodeResourcesFit` plugin (`pkg/scheduler/framework/plugins/
//! noderesources/fit.go`, `fitsRequest`).
//!
//! Checked, in upstream's order, with upstream's reasons: the pod count (`Too many pods`,
//! always checked), then — unless the pod requests nothing at all (no CPU, memory or
//! ephemeral storage and no extended resource named) — `Insufficient cpu`, `Insufficient
//! memory` and `Insufficient ephemeral-storage` *whether or not the pod asks for them*
//! (kube-scheduler 1.20 rejects an overcommitted node even for a pod that requests none of
//! the overcommitted resource; the differential test found this), and `Insufficient <name>`
//! for `nvidia.com/gpu` when requested and every other extended resource the pod names,
//! even with a zero request (GPUs first, then the others by name). All failing reasons are reported, joined
//! with [`REASON_SEPARATOR`] like upstream's status message, and counted one by one in the
//! summary. Resources listed in `ignoredResources` are not checked (upstream's argument of
//! the same name, extended resources only).
//!
//! The pod's effective requests (sum of containers, max with init containers, plus overhead)
//! are computed by the pod builder; requested amounts come from the node's allocation.
use std::collections::BTreeSet;

use serde::{Deserialize, Serialize};

use loadstar_framework::snapshot::{
    ClusterSnapshot, ColumnWords, Memo, NodeDigest, NodeView, PodInfo, patch_entry,
};
use loadstar_framework::{
    CycleContext, FilterPlugin, FilteredNode, PreFilterState, REASON_SEPARATOR, Reason,
    retain_passing,
};

use crate::args::{PluginError, parse_args};
use loadstar_common::model::GPU_RESOURCE;

/// Plugin name.
pub const NAME: &str = "NodeResourcesFit";
/// Reason when the node runs its maximum number of pods.
pub const REASON_TOO_MANY_PODS: &str = "Too many pods";

/// Arguments.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct FitArgs {
    /// Extended resources not to check (e.g. ones a device plugin over-reports).
    pub ignored_resources: BTreeSet<String>,
}

/// The resource-fit filter.
#[derive(Debug, Clone, Default)]
pub struct NodeResourcesFit {
    args: FitArgs,
}

impl NodeResourcesFit {
    /// Builds it from its arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: FitArgs = parse_args(NAME, args)?;
        for (i, r) in args.ignored_resources.iter().enumerate() {
            if matches!(
                r.as_str(),
                "cpu" | "memory" | "ephemeral-storage" | "pods" | ""
            ) {
                return Err(PluginError::invalid(
                    NAME,
                    format!("ignoredResources[{i}]"),
                    format!("{r:?} is not an extended resource"),
                ));
            }
        }
        Ok(NodeResourcesFit { args })
    }
}

/// `Insufficient <resource>`, without an allocation for the resources every pod asks for.
fn insufficient(name: &str) -> Reason {
    match name {
        "cpu" => Reason::Borrowed("Insufficient cpu"),
        "memory" => Reason::Borrowed("Insufficient memory"),
        "ephemeral-storage" => Reason::Borrowed("Insufficient ephemeral-storage"),
        GPU_RESOURCE => Reason::Borrowed("Insufficient nvidia.com/gpu"),
        other => Reason::Owned(format!("Insufficient {other}")),
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    /// Evicting pods frees requests and pod slots (upstream: `Unschedulable`).
    fn preemption_may_help(&self, _reason: &str) -> bool {
        true
    }

    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        self.verdict(pod, node, &ctx.digest(node))
    }

    /// For a pod asking only for CPU, memory and ephemeral storage, the verdict is a
    /// function of the node's row and those three requests (the arguments only concern
    /// extended resources).
    fn column_key(
        &self,
        _ctx: &CycleContext<'_>,
        _state: Option<&PreFilterState>,
        pod: &PodInfo,
    ) -> Option<ColumnWords> {
        let req = &pod.requests;
        (req.gpus == 0 && req.extended.is_empty()).then(|| {
            let mut words = ColumnWords::default();
            words[0] = req.cpu_millis as u64;
            words[1] = req.memory_bytes as u64;
            words[2] = req.ephemeral_storage_bytes as u64;
            words
        })
    }

    /// Over the table's [`FitColumns`] (one 64-byte cell per node) when the pod asks only for
    /// CPU, memory and ephemeral storage: most nodes fit, and only the others have their
    /// reasons spelled out from their rows.
    fn filter_nodes(
        &self,
        ctx: &CycleContext<'_>,
        _state: Option<&PreFilterState>,
        pod: &PodInfo,
        nodes: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        let req = &pod.requests;
        let columns = (req.gpus == 0 && req.extended.is_empty())
            .then(|| {
                ctx.memo(0, || FitColumns {
                    cells: ctx
                        .snapshot
                        .nodes()
                        .iter()
                        .map(|n| FitCell::of(&ctx.digest(n)))
                        .collect(),
                })
            })
            .flatten();
        let slow = |i: usize| self.verdict(pod, &ctx.snapshot.nodes()[i], &ctx.digest_at(i));
        match columns {
            Some(c) => retain_passing(NAME, nodes, filtered, |i| match c.cells.get(i) {
                Some(cell) if cell.fits(req) => Ok(()),
                _ => slow(i),
            }),
            None => retain_passing(NAME, nodes, filtered, slow),
        }
    }
}

/// What the filter compares for a pod asking only for CPU, memory and ephemeral storage:
/// the node's pod slots and (allocatable, requested) of each.
#[derive(Debug, Clone, Copy)]
#[repr(align(64))]
struct FitCell {
    pod_count: i64,
    allocatable_pods: i64,
    cpu: (i64, i64),
    memory: (i64, i64),
    ephemeral: (i64, i64),
}

impl FitCell {
    fn of(d: &NodeDigest) -> FitCell {
        FitCell {
            pod_count: d.pod_count,
            allocatable_pods: d.allocatable_pods,
            cpu: (d.allocatable_cpu_millis, d.requested_cpu_millis),
            memory: (d.allocatable_memory_bytes, d.requested_memory_bytes),
            ephemeral: (d.allocatable_ephemeral_bytes, d.requested_ephemeral_bytes),
        }
    }

    /// Whether a pod of these requests (no GPUs, no extended resources) fits: the same
    /// comparisons as [`NodeResourcesFit::verdict`], without its reasons.
    #[inline(always)]
    fn fits(&self, req: &loadstar_common::model::ResourceList) -> bool {
        let short = |want: i64, (have, used): (i64, i64)| have < want.saturating_add(used);
        let nothing =
            req.cpu_millis == 0 && req.memory_bytes == 0 && req.ephemeral_storage_bytes == 0;
        self.pod_count < self.allocatable_pods
            && (nothing
                || !(short(req.cpu_millis, self.cpu)
                    || short(req.memory_bytes, self.memory)
                    || short(req.ephemeral_storage_bytes, self.ephemeral)))
    }
}

/// Every node's [`FitCell`], in `nodes` order, built once per digest table.
#[derive(Debug)]
struct FitColumns {
    cells: Vec<FitCell>,
}

impl Memo for FitColumns {
    /// The scheduler assumed a pod on one node: its cell is taken from its new row.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        _node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        patch_entry(&mut self.cells, index, snapshot, || FitCell::of(row))
    }
}

impl NodeResourcesFit {
    /// The verdict on `node`, whose row is `d`.
    fn verdict(&self, pod: &PodInfo, node: &NodeView, d: &NodeDigest) -> Result<(), Reason> {
        let req = &pod.requests;
        let mut reasons: Vec<Reason> = Vec::new();
        if d.pod_count + 1 > d.allocatable_pods {
            reasons.push(REASON_TOO_MANY_PODS.into());
        }
        let nothing = req.cpu_millis == 0
            && req.memory_bytes == 0
            && req.ephemeral_storage_bytes == 0
            && req.gpus == 0
            && req.extended.is_empty();
        if !nothing {
            // Upstream: `allocatable < request + requested`, also for a request of zero.
            let mut check = |name: &str, want: i64, have: i64, used: i64| {
                if have < want.saturating_add(used) {
                    reasons.push(insufficient(name));
                }
            };
            check(
                "cpu",
                req.cpu_millis,
                d.allocatable_cpu_millis,
                d.requested_cpu_millis,
            );
            check(
                "memory",
                req.memory_bytes,
                d.allocatable_memory_bytes,
                d.requested_memory_bytes,
            );
            check(
                "ephemeral-storage",
                req.ephemeral_storage_bytes,
                d.allocatable_ephemeral_bytes,
                d.requested_ephemeral_bytes,
            );
            // A GPU request of zero cannot be told from none here; upstream checks the
            // resource only when the pod names it.
            if req.gpus > 0 && !self.args.ignored_resources.contains(GPU_RESOURCE) {
                check(GPU_RESOURCE, req.gpus, d.allocatable_gpus, d.requested_gpus);
            }
            if !req.extended.is_empty() {
                // Rare: read the extended lists from the view itself.
                let alloc = node.allocatable_ref();
                let used = &node.alloc.requested;
                for (name, want) in &req.extended {
                    if self.args.ignored_resources.contains(name) {
                        continue;
                    }
                    check(
                        name,
                        *want,
                        alloc.extended.get(name).copied().unwrap_or(0),
                        used.extended.get(name).copied().unwrap_or(0),
                    );
                }
            }
        }
        match reasons.len() {
            0 => Ok(()),
            1 => Err(reasons.swap_remove(0)),
            _ => Err(reasons.join(REASON_SEPARATOR).into()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::PodOnNode;
    use loadstar_framework::{Evaluation, FilteredNode};
    use loadstar_testkit::snapshot::*;

    fn fit() -> NodeResourcesFit {
        NodeResourcesFit::from_args(&serde_norway::Value::Null).expect("defaults")
    }

    #[test]
    fn fits_and_reports_each_insufficient_resource() {
        let node = with_requested(kube_node("n", 4000, 8 * GIB), 3000, 6 * GIB);
        assert_eq!(
            filter_one(&fit(), node.clone(), &pod(1000, 2 * GIB)),
            Ok(())
        );
        assert_eq!(
            filter_one(&fit(), node.clone(), &pod(1001, 2 * GIB)),
            Err("Insufficient cpu".into())
        );
        assert_eq!(
            filter_one(&fit(), node, &pod(2000, 3 * GIB)),
            Err("Insufficient cpu, Insufficient memory".into())
        );
    }

    #[test]
    fn gpus_extended_and_pod_count() {
        let node = edit_kube(kube_node("n", 4000, 8 * GIB), |k| {
            k.allocatable.gpus = 2;
            k.allocatable.pods = 1;
            k.allocatable.extended.insert("example.com/fpga".into(), 1);
        });
        let node = with_pod(node, PodOnNode::default());
        let mut p = pod(0, 0);
        p.requests.gpus = 4;
        p.requests.extended.insert("example.com/fpga".into(), 2);
        assert_eq!(
            filter_one(&fit(), node.clone(), &p),
            Err("Too many pods, Insufficient nvidia.com/gpu, Insufficient example.com/fpga".into())
        );
        let ignoring = NodeResourcesFit::from_args(
            &serde_norway::from_str("{ignoredResources: [example.com/fpga]}").expect("yaml"),
        )
        .expect("valid");
        assert_eq!(
            filter_one(&ignoring, node, &p),
            Err("Too many pods, Insufficient nvidia.com/gpu".into())
        );
        assert!(
            NodeResourcesFit::from_args(
                &serde_norway::from_str("{ignoredResources: [cpu]}").expect("yaml")
            )
            .is_err()
        );
    }

    #[test]
    fn summary_counts_each_reason() {
        let e = Evaluation {
            ranked: vec![],
            filtered: vec![
                FilteredNode {
                    index: 0,
                    plugin: NAME,
                    reason: "Insufficient cpu, Insufficient memory".into(),
                },
                FilteredNode {
                    index: 1,
                    plugin: NAME,
                    reason: "Insufficient cpu".into(),
                },
            ],
            evaluated: 2,
            ..Evaluation::default()
        };
        assert_eq!(
            e.summary(),
            "0/2 nodes are available: 2 Insufficient cpu, 1 Insufficient memory."
        );
    }

    #[test]
    fn an_overcommitted_node_rejects_pods_that_do_not_ask_for_that_resource() {
        // 2 CPUs with 2.5 cores already requested (bound by nodeName, past any filter).
        let node = edit_alloc(kube_node("n", 2000, 8 * GIB), |a| {
            a.requested.cpu_millis = 2500;
        });
        let mut p = pod(0, 128 * MIB);
        assert_eq!(
            filter_one(&NodeResourcesFit::default(), node.clone(), &p),
            Err("Insufficient cpu".into())
        );
        // A pod that asks for nothing at all is only counted.
        p.requests.memory_bytes = 0;
        assert_eq!(
            filter_one(&NodeResourcesFit::default(), node.clone(), &p),
            Ok(())
        );
        // Naming an extended resource with a zero request is asking for something.
        p.requests.extended.insert("example.com/dongle".into(), 0);
        assert_eq!(
            filter_one(&NodeResourcesFit::default(), node, &p),
            Err("Insufficient cpu".into())
        );
    }
}
