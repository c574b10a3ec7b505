//! What `LeastAllocated`, `MostAllocated` and `BalancedAllocation` share, as kube-scheduler's
//! `resourceAllocationScorer` (`pkg/scheduler/framework/plugins/noderesources/
//! resource_allocation.go`): the list of scored resources with weights, and the (allocatable,
//! requested-after-placement) pair per resource.
//!
//! Upstream's rules, reproduced: CPU and memory requested amounts are the node's *non-zero*
//! requests plus the pod's (100m / 200Mi per container without a request) for Least/Most,
//! and the plain requests for Balanced (`useRequested`); `ephemeral-storage` and extended
//! resources (`nvidia.com/gpu`, …) use plain requests; an extended resource the pod does not
//! request is left out (`(0, 0)`), and so is any resource whose allocatable is 0; `pods` and
//! unknown standard names are never scored. Weights must be 1–100 (upstream validation).
use serde::{Deserialize, Serialize};

use loadstar_common::model::GPU_RESOURCE;
use loadstar_framework::snapshot::{ColumnWords, NodeDigest, NodeView, PodInfo};

use std::fmt::Debug;
use std::marker::PhantomData;

use loadstar_framework::{CycleContext, ScorePlugin};

use crate::args::{PluginError, args_to_yaml, parse_args};

/// One scored resource and its weight.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ResourceSpec {
    /// Resource name: `cpu`, `memory`, `ephemeral-storage`, `nvidia.com/gpu`, or another
    /// extended resource.
    pub name: String,
    /// Weight, 1–100.
    #[serde(default = "one")]
    pub weight: i64,
}

fn one() -> i64 {
    1
}

/// Upstream's default: cpu and memory, weight 1 each.
pub fn default_resources() -> Vec<ResourceSpec> {
    vec![
        ResourceSpec {
            name: "cpu".into(),
            weight: 1,
        },
        ResourceSpec {
            name: "memory".into(),
            weight: 1,
        },
    ]
}

/// Arguments of the three allocation scores.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(default, deny_unknown_fields, rename_all = "camelCase")]
pub struct AllocationArgs {
    /// Scored resources with weights.
    pub resources: Vec<ResourceSpec>,
}

impl Default for AllocationArgs {
    fn default() -> Self {
        AllocationArgs {
            resources: default_resources(),
        }
    }
}

impl AllocationArgs {
    /// Checks names and weights (upstream: weight in 1..=100, no duplicates).
    pub fn validate(&self, plugin: &str) -> Result<(), PluginError> {
        if self.resources.is_empty() {
            return Err(PluginError::invalid(
                plugin,
                "resources",
                "at least one resource is required",
            ));
        }
        for (i, r) in self.resources.iter().enumerate() {
            if r.name.is_empty() || r.name == "pods" {
                return Err(PluginError::invalid(
                    plugin,
                    format!("resources[{i}].name"),
                    format!("{:?} cannot be scored", r.name),
                ));
            }
            if !(1..=100).contains(&r.weight) {
                return Err(PluginError::invalid(
                    plugin,
                    format!("resources[{i}].weight"),
                    format!("must be between 1 and 100, got {}", r.weight),
                ));
            }
            if self.resources[..i].iter().any(|o| o.name == r.name) {
                return Err(PluginError::invalid(
                    plugin,
                    format!("resources[{i}].name"),
                    format!("duplicate resource {:?}", r.name),
                ));
            }
        }
        Ok(())
    }
}

/// A scored resource name, resolved once at build time so hot loops do not compare strings.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResourceId {
    /// `cpu`.
    Cpu,
    /// `memory`.
    Memory,
    /// `ephemeral-storage`.
    EphemeralStorage,
    /// `pods` (never scored).
    Pods,
    /// `nvidia.com/gpu`.
    Gpu,
    /// Any other (extended) resource.
    Extended,
}

impl ResourceId {
    /// Resolves a resource name.
    pub fn of(name: &str) -> ResourceId {
        match name {
            "cpu" => ResourceId::Cpu,
            "memory" => ResourceId::Memory,
            "ephemeral-storage" => ResourceId::EphemeralStorage,
            "pods" => ResourceId::Pods,
            GPU_RESOURCE => ResourceId::Gpu,
            _ => ResourceId::Extended,
        }
    }

    /// Whether a pod that does not ask for it leaves it out of scoring (upstream's scalar
    /// resources: GPUs and extended ones).
    pub fn is_scalar(self) -> bool {
        matches!(self, ResourceId::Gpu | ResourceId::Extended)
    }
}

/// The resolved ids of `resources`, in a fixed buffer (see [`MAX_INLINE_RESOURCES`]).
pub fn resolve(resources: &[ResourceSpec]) -> [ResourceId; MAX_INLINE_RESOURCES] {
    let mut out = [ResourceId::Pods; MAX_INLINE_RESOURCES];
    for (o, r) in out.iter_mut().zip(resources) {
        *o = ResourceId::of(&r.name);
    }
    out
}

/// The pod's request for `name`: non-zero (defaulted) CPU/memory when `nonzero`.
pub fn pod_request(pod: &PodInfo, name: &str, nonzero: bool) -> i64 {
    match name {
        "cpu" if nonzero => pod.nonzero_cpu_millis,
        "memory" if nonzero => pod.nonzero_memory_bytes,
        _ => pod.requests.get(name),
    }
}

/// (allocatable, requested incl. the pod) of `name` on `node` (with its digest `d`),
/// `(0, 0)` when the resource is left out of scoring. `pod_req` comes from [`pod_request`]
/// with the same `nonzero`.
#[inline]
pub fn allocatable_requested(
    d: &NodeDigest,
    node: &NodeView,
    id: ResourceId,
    name: &str,
    pod_req: i64,
    nonzero: bool,
) -> (i64, i64) {
    if pod_req == 0 && id.is_scalar() {
        return (0, 0);
    }
    let (alloc, used) = match id {
        ResourceId::Extended => (
            node.allocatable_ref().get(name),
            node.alloc.requested.get(name),
        ),
        ResourceId::Pods => return (0, 0),
        _ => row_amounts(d, id, nonzero),
    };
    (alloc, used.saturating_add(pod_req))
}

/// (allocatable, requested) of a resource the row holds (not `Extended`: (0, 0)); `Pods`
/// is never scored: (0, 0).
#[inline]
pub fn row_amounts(d: &NodeDigest, id: ResourceId, nonzero: bool) -> (i64, i64) {
    match id {
        ResourceId::Cpu if nonzero => (d.allocatable_cpu_millis, d.nonzero_cpu_millis),
        ResourceId::Cpu => (d.allocatable_cpu_millis, d.requested_cpu_millis),
        ResourceId::Memory if nonzero => (d.allocatable_memory_bytes, d.nonzero_memory_bytes),
        ResourceId::Memory => (d.allocatable_memory_bytes, d.requested_memory_bytes),
        ResourceId::EphemeralStorage => {
            (d.allocatable_ephemeral_bytes, d.requested_ephemeral_bytes)
        }
        ResourceId::Gpu => (d.allocatable_gpus, d.requested_gpus),
        ResourceId::Pods | ResourceId::Extended => (0, 0),
    }
}

/// Scores every node with [`weighted_score`] on the pod's non-zero requests: the whole of
/// LeastAllocated and MostAllocated, which differ only in `per_resource`.
pub fn score_nodes(
    resources: &[ResourceSpec],
    ctx: &CycleContext<'_>,
    pod: &PodInfo,
    nodes: &[&NodeView],
    indices: Option<&[usize]>,
    out: &mut [i64],
    per_resource: fn(i64, i64) -> i64,
) {
    let reqs = pod_requests(resources, pod, true);
    let ids = resolve(resources);
    for (j, (o, n)) in out.iter_mut().zip(nodes).enumerate() {
        let d = row(ctx, n, indices, j);
        *o = weighted_score(resources, &ids, &reqs, &d, n, true, per_resource);
    }
}

/// The row of `nodes[j]`: by its index when the caller knows it (`indices[j]`).
#[inline(always)]
pub fn row<'n>(
    ctx: &'n CycleContext<'_>,
    node: &'n NodeView,
    indices: Option<&[usize]>,
    j: usize,
) -> std::borrow::Cow<'n, NodeDigest> {
    match indices.and_then(|ix| ix.get(j)) {
        Some(&i) => ctx.digest_at(i),
        None => ctx.digest(node),
    }
}

/// Upstream's weighted per-resource score: Σ score(requested, allocatable)·w / Σ w over the
/// resources with non-zero allocatable, integer division; 0 when none. `pod_reqs[i]` is the
/// pod's request for `resources[i]`.
pub fn weighted_score(
    resources: &[ResourceSpec],
    ids: &[ResourceId],
    pod_reqs: &[i64],
    d: &NodeDigest,
    node: &NodeView,
    nonzero: bool,
    per_resource: impl Fn(i64, i64) -> i64,
) -> i64 {
    let (mut sum, mut weights) = (0i64, 0i64);
    for ((r, &id), &pod_req) in resources.iter().zip(ids).zip(pod_reqs) {
        let (allocatable, requested) =
            allocatable_requested(d, node, id, &r.name, pod_req, nonzero);
        if allocatable == 0 {
            continue;
        }
        sum += per_resource(requested, allocatable) * r.weight;
        weights += r.weight;
    }
    if weights == 0 { 0 } else { sum / weights }
}

/// What distinguishes one allocation score from another: its name and how it scores the
/// nodes; the arguments and the plugin plumbing are [`AllocationScore`]'s.
pub trait AllocationStrategy: Debug + Clone + Default + Send + Sync + 'static {
    /// Plugin name.
    const NAME: &'static str;
    /// Whether it reads the pod's non-zero (defaulted) requests rather than its own.
    const NONZERO: bool;
    /// Scores `nodes` into `out` for `pod` over `resources`; `indices[j]`, when given, is
    /// `nodes[j]`'s index in the snapshot.
    fn score_nodes(
        resources: &[ResourceSpec],
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: Option<&[usize]>,
        out: &mut [i64],
    );
}

/// A strategy that scores each resource by `per_resource(requested, allocatable)` and takes
/// the weighted mean ([`weighted_score`] on the pod's non-zero requests): LeastAllocated and
/// MostAllocated.
pub trait WeightedStrategy: Debug + Clone + Default + Send + Sync + 'static {
    /// Plugin name.
    const NAME: &'static str;
    /// The score of one resource, 0–100.
    fn per_resource(requested: i64, allocatable: i64) -> i64;
}

impl<W: WeightedStrategy> AllocationStrategy for W {
    const NAME: &'static str = W::NAME;
    const NONZERO: bool = true;

    fn score_nodes(
        resources: &[ResourceSpec],
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: Option<&[usize]>,
        out: &mut [i64],
    ) {
        score_nodes(resources, ctx, pod, nodes, indices, out, W::per_resource);
    }
}

/// The shell LeastAllocated, MostAllocated and BalancedAllocation share: the `resources`
/// arguments, their validation and the [`ScorePlugin`] plumbing around a strategy.
#[derive(Debug, Clone, Default)]
pub struct AllocationScore<S> {
    args: AllocationArgs,
    strategy: PhantomData<S>,
}

impl<S: AllocationStrategy> AllocationScore<S> {
    /// Builds it from its arguments (`resources: [{name, weight}]`, default cpu and memory).
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        let args: AllocationArgs = parse_args(S::NAME, args)?;
        args.validate(S::NAME)?;
        check_count(S::NAME, &args)?;
        Ok(AllocationScore {
            args,
            strategy: PhantomData,
        })
    }
}

impl<S: AllocationStrategy> ScorePlugin for AllocationScore<S> {
    fn name(&self) -> &'static str {
        S::NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        S::score_nodes(&self.args.resources, ctx, pod, nodes, None, out);
    }

    /// By index over the table's rows.
    fn score_indexed(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: &[usize],
        out: &mut [i64],
    ) {
        S::score_nodes(&self.args.resources, ctx, pod, nodes, Some(indices), out);
    }

    /// Each node's score is a function of its own allocatable and requested amounts and of
    /// the pod's requests for (at most two, not extended) scored resources: the resources'
    /// ids and weights, and the pod's requests for them as the strategy reads them.
    fn column_key(&self, _ctx: &CycleContext<'_>, pod: &PodInfo) -> Option<ColumnWords> {
        let resources = &self.args.resources;
        if resources.len() > 2 {
            return None;
        }
        let ids = resolve(resources);
        let reqs = pod_requests(resources, pod, S::NONZERO);
        let mut words = ColumnWords::default();
        words[0] = resources.len() as u64;
        for (k, (r, id)) in resources.iter().zip(ids).enumerate() {
            if id == ResourceId::Extended {
                return None;
            }
            words[0] |= (id as u64) << (8 + 8 * k);
            // Weights are 1–100 (validated).
            words[1] |= (r.weight as u64 & 0xffff_ffff) << (32 * k);
            words[2 + k] = reqs[k] as u64;
        }
        Some(words)
    }

    fn args_yaml(&self) -> String {
        args_to_yaml(&self.args)
    }
}

/// Up to this many scored resources are handled without allocating.
pub const MAX_INLINE_RESOURCES: usize = 8;

/// The pod's requests for `resources`, in a fixed buffer (resources beyond
/// [`MAX_INLINE_RESOURCES`] are rejected at build time).
pub fn pod_requests(
    resources: &[ResourceSpec],
    pod: &PodInfo,
    nonzero: bool,
) -> [i64; MAX_INLINE_RESOURCES] {
    let mut out = [0i64; MAX_INLINE_RESOURCES];
    for (o, r) in out.iter_mut().zip(resources) {
        *o = pod_request(pod, &r.name, nonzero);
    }
    out
}

/// Rejects more resources than [`MAX_INLINE_RESOURCES`].
pub fn check_count(plugin: &str, args: &AllocationArgs) -> Result<(), PluginError> {
    if args.resources.len() > MAX_INLINE_RESOURCES {
        return Err(PluginError::invalid(
            plugin,
            "resources",
            format!("at most {MAX_INLINE_RESOURCES} resources can be scored"),
        ));
    }
    Ok(())
}
