//! The read-only view of the cluster that filters and scores run against: one [`NodeView`]
//! per node (agent load, Kubernetes node facts, pods and in-flight estimates) and the
//! [`PodInfo`] being placed. Heavy parts are behind `Arc`s so a snapshot of thousands of
//! nodes is built by cloning pointers, and the scheduler can change one node's allocation
//! without copying the others.
use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Instant;

use loadstar_common::model::{LoadSummary, NodeCapacity, ResourceKind, ResourceList};
use loadstar_common::window::WindowSummary;

/// Owner (controller) of a pod, for spreading.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Default)]
pub struct Owner {
    /// Kind, e.g. `ReplicaSet`.
    pub kind: String,
    /// Name.
    pub name: String,
}

/// A taint effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TaintEffect {
    /// Do not schedule pods that do not tolerate it.
    NoSchedule,
    /// Prefer not to schedule pods that do not tolerate it.
    PreferNoSchedule,
    /// Do not schedule, and evict running pods that do not tolerate it.
    NoExecute,
}

impl TaintEffect {
    /// Parses the Kubernetes spelling.
    pub fn parse(s: &str) -> Option<TaintEffect> {
        match s {
            "NoSchedule" => Some(TaintEffect::NoSchedule),
            "PreferNoSchedule" => Some(TaintEffect::PreferNoSchedule),
            "NoExecute" => Some(TaintEffect::NoExecute),
            _ => None,
        }
    }
}

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Key.
    pub key: String,
    /// Value (may be empty).
    pub value: String,
    /// Effect.
    pub effect: TaintEffect,
}

/// A pod toleration.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Toleration {
    /// Key; empty with `exists` tolerates every key.
    pub key: String,
    /// True for operator `Exists`, false for `Equal`.
    pub exists: bool,
    /// Value for `Equal`.
    pub value: String,
    /// Effect; `None` matches every effect.
    pub effect: Option<TaintEffect>,
}

pub use crate::constraints::{
    AffinityTerm, LabelSelector, NamespaceLabels, NodeInclusion, NodeSelectorTerm, PodAffinity,
    SelectorOp, SelectorRequirement, SharedAffinity, SpreadConstraint, WeightedAffinityTerm,
    WhenUnsatisfiable,
};
use crate::images::IndexCell;
pub use crate::images::{ImageIndex, NodeImages};
pub use crate::volumes::{
    AttachKind, AttachableVolume, CandidateVolume, ClaimToBind, ClassCapacity, InlineDisk,
    PodClaim, Provisioning, VolumeNeeds,
};

/// A node selector term (kept under its old name).
pub type SelectorTerm = NodeSelectorTerm;

/// A host port a container asks for.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct HostPort {
    /// `TCP`, `UDP` or `SCTP`.
    pub protocol: String,
    /// Host IP; empty or `0.0.0.0` means all.
    pub host_ip: String,
    /// Port number.
    pub port: u16,
}

/// The pod being placed.
#[derive(Debug, Clone, Default)]
pub struct PodInfo {
    /// metadata.uid (or a synthetic id for described pods).
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Controlling owner.
    pub owner: Option<Owner>,
    /// Effective requests as kube-scheduler computes them: sum of containers, max with each
    /// init container, plus overhead.
    pub requests: ResourceList,
    /// Effective limits, computed the same way.
    pub limits: ResourceList,
    /// Requests for scoring with upstream's non-zero defaults (100m CPU / 200 MiB memory per
    /// container that requests none), used by Least/Most/BalancedAllocation.
    pub nonzero_cpu_millis: i64,
    /// See [`PodInfo::nonzero_cpu_millis`].
    pub nonzero_memory_bytes: i64,
    /// spec.nodeSelector.
    pub node_selector: BTreeMap<String, String>,
    /// Required node affinity terms (ORed); empty means none.
    pub required_affinity: Vec<SelectorTerm>,
    /// Preferred node affinity terms with their weights.
    pub preferred_node_affinity: Vec<(i32, SelectorTerm)>,
    /// Inter-pod affinity and anti-affinity.
    pub pod_affinity: SharedAffinity,
    /// `topologySpreadConstraints`, hard and soft.
    pub spread_constraints: Vec<SpreadConstraint>,
    /// Fields that constrain placement and that Loadstar does not implement (paths such as
    /// `spec.volumes[0].persistentVolumeClaim`): the pod is refused on every node, naming
    /// them, rather than placed in violation of them.
    pub unsupported: Vec<String>,
    /// `spec.preemptionPolicy: Never`.
    pub preemption_never: bool,
    /// The PersistentVolumeClaims its volumes mount (in its namespace), in volume order:
    /// `persistentVolumeClaim` volumes' and generic `ephemeral` volumes'.
    pub claims: Vec<PodClaim>,
    /// What those claims need of a node; `None` until resolved against the cluster (a pod
    /// with claims that were never resolved is refused).
    pub volumes: Option<VolumeNeeds>,
    /// Tolerations.
    pub tolerations: Vec<Toleration>,
    /// Host ports of its containers.
    pub host_ports: Vec<HostPort>,
    /// spec.priority.
    pub priority: i32,
    /// status.nominatedNodeName: the node an earlier preemption cleared for it.
    pub nominated_node: Option<String>,
    /// Inline disks `VolumeRestrictions` compares (GCE PD, EBS, iSCSI, RBD).
    pub disks: Vec<InlineDisk>,
    /// Volumes that take a node's attachment slots (inline cloud disks at conversion; the
    /// claims' volumes once resolved against the cluster).
    pub attachable: Vec<AttachableVolume>,
    /// The selector `PodTopologySpread` gives a profile's default constraints for this pod:
    /// what the Services, ReplicationControllers, ReplicaSets and StatefulSets selecting it
    /// select (upstream's `DefaultSelector`). `None` when it selects nothing or was not
    /// computed (no cluster state): default constraints then do not apply.
    pub default_spread_selector: Option<LabelSelector>,
    /// The images it pulls, as written in the spec: its init containers' (sidecars
    /// included), then its containers', then its `image` volumes' references
    /// (`ImageLocality`).
    pub images: Vec<String>,
}

/// Default CPU request upstream assumes for scoring a container without one (millicores).
pub const DEFAULT_NONZERO_CPU_MILLIS: i64 = 100;
/// Default memory request upstream assumes for scoring a container without one (bytes).
pub const DEFAULT_NONZERO_MEMORY_BYTES: i64 = 200 * 1024 * 1024;

/// A GPU's live state from the agent.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct GpuState {
    /// NVML index.
    pub index: u32,
    /// Compute utilisation ratio.
    pub utilization: f64,
    /// Memory in use, bytes.
    pub memory_used_bytes: u64,
    /// Memory in total, bytes.
    pub memory_total_bytes: u64,
    /// Compute processes on it.
    pub process_count: u32,
    /// False when NVML reported an error for it.
    pub healthy: bool,
}

/// Measured usage of a pod.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct MeasuredPod {
    /// CPU, millicores.
    pub cpu_millis: f64,
    /// Working set, bytes.
    pub memory_bytes: f64,
}

/// What the node's agent last reported, validated.
#[derive(Debug, Clone, Default)]
pub struct AgentNode {
    /// Capacity (computeS).
    pub capacity: NodeCapacity,
    /// Windowed utilisation (computeL), ratios.
    pub load: LoadSummary,
    /// memory.available, bytes.
    pub memory_available_bytes: u64,
    /// nodefs.available ratio.
    pub nodefs_available_ratio: Option<f64>,
    /// nodefs.inodesFree ratio.
    pub nodefs_inodes_free_ratio: Option<f64>,
    /// GPUs.
    pub gpus: Vec<GpuState>,
    /// Measured usage per pod UID.
    pub pods: HashMap<String, MeasuredPod>,
    /// Sample interval, seconds: the span one window sample covers.
    pub interval_seconds: f64,
    /// Time between reports when the agent reports less often than it samples (following
    /// the scorer's backpressure), seconds; 0: every sample.
    pub report_interval_seconds: f64,
    /// When the report was received.
    pub received_at: Option<Instant>,
    /// Last time the node was seen under eviction pressure (by the store's thresholds).
    pub last_pressure_at: Option<Instant>,
}

/// What Kubernetes says about the node.
#[derive(Debug, Clone, Default)]
pub struct KubeNode {
    /// status.allocatable.
    pub allocatable: ResourceList,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Taints.
    pub taints: Vec<Taint>,
    /// spec.unschedulable.
    pub unschedulable: bool,
    /// Ready condition is True.
    pub ready: bool,
    /// Attach limits by resource name: the `attachable-volumes-*` allocatable entries,
    /// overridden per CSI driver by the node's CSINode `allocatable.count`.
    pub volume_limits: BTreeMap<String, i64>,
    /// The container images the node holds (`status.images`), for `ImageLocality`.
    pub images: NodeImages,
}

/// A pod bound or assumed on a node.
#[derive(Debug, Clone, Default)]
pub struct PodOnNode {
    /// UID.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Labels.
    pub labels: BTreeMap<String, String>,
    /// Owner.
    pub owner: Option<Owner>,
    /// Host ports.
    pub host_ports: Vec<HostPort>,
    /// Name.
    pub name: String,
    /// Its inter-pod affinity (existing pods' required anti-affinity constrains newcomers).
    pub pod_affinity: SharedAffinity,
    /// Being deleted (topology spread does not count it).
    pub terminating: bool,
    /// spec.priority.
    pub priority: i32,
    /// Effective requests (what evicting it frees).
    pub requests: ResourceList,
    /// Non-zero CPU request (upstream scoring convention), millicores.
    pub nonzero_cpu_millis: i64,
    /// Non-zero memory request, bytes.
    pub nonzero_memory_bytes: i64,
    /// status.startTime, Unix seconds (`None`: not started; preemption treats it as
    /// starting now, as kube-scheduler does).
    pub start_time: Option<i64>,
    /// Its inline disks (`VolumeRestrictions`).
    pub disks: Vec<InlineDisk>,
    /// Its volumes that take attachment slots (`NodeVolumeLimits` and the in-tree limits).
    pub attachable: Vec<AttachableVolume>,
    /// The claims its `persistentVolumeClaim` volumes mount, by name in its namespace
    /// (`VolumeRestrictions`: a `ReadWriteOncePod` claim one pod uses no other may).
    pub claims: Vec<String>,
}

impl PodOnNode {
    /// The placed form of a pod (not terminating, not started).
    pub fn of(info: &PodInfo) -> PodOnNode {
        PodOnNode {
            requests: info.requests.clone(),
            nonzero_cpu_millis: info.nonzero_cpu_millis,
            nonzero_memory_bytes: info.nonzero_memory_bytes,
            start_time: None,
            disks: info.disks.clone(),
            attachable: info.attachable.clone(),
            claims: info
                .claims
                .iter()
                .filter(|c| !c.ephemeral)
                .map(|c| c.name.clone())
                .collect(),
            uid: info.uid.clone(),
            namespace: info.namespace.clone(),
            name: info.name.clone(),
            labels: info.labels.clone(),
            owner: info.owner.clone(),
            host_ports: info.host_ports.clone(),
            pod_affinity: info.pod_affinity.clone(),
            terminating: false,
            priority: info.priority,
        }
    }
}

/// An estimate of a recently placed pod's usage. It counts in full until the agent measures
/// the pod; from then on the pod's *measured* usage counts, fading out as the load window
/// fills with samples that include the pod (see [`NodeView::inflight_amounts`]). Dropping the
/// estimate at the first measurement would make the node look empty for most of a long
/// window — the herd effect this accounting exists to stop.
#[derive(Debug, Clone)]
pub struct Inflight {
    /// Pod UID.
    pub uid: String,
    /// Estimated CPU, millicores.
    pub cpu_millis: i64,
    /// Estimated memory, bytes.
    pub memory_bytes: i64,
    /// When it was added.
    pub added_at: Instant,
    /// When a report first carried the pod's own measured usage (None: not yet).
    pub measured_since: Option<Instant>,
}

impl Inflight {
    /// A new, not yet measured estimate.
    pub fn new(uid: String, cpu_millis: i64, memory_bytes: i64, added_at: Instant) -> Inflight {
        Inflight {
            uid,
            cpu_millis,
            memory_bytes,
            added_at,
            measured_since: None,
        }
    }
}

/// Updates a node's in-flight estimates for a report received at `now` that measured the pods
/// in `measured`: a pod measured for the first time starts fading; an estimate goes when it
/// was never measured within `max_unmeasured_age`, when its measurement began more than
/// `fade` ago (the longest load window), or when a measured pod is no longer reported.
/// Returns whether anything changed; `alloc` is copied (when shared) only then, so a report
/// that changes nothing (most of them) costs one read of the estimates. The store and the
/// simulator both call this.
pub fn retire_inflight(
    alloc: &mut Arc<NodeAllocation>,
    measured: &HashMap<String, MeasuredPod>,
    now: Instant,
    max_unmeasured_age: std::time::Duration,
    fade: std::time::Duration,
) -> bool {
    let keeps = |e: &Inflight| match e.measured_since {
        None => now.saturating_duration_since(e.added_at) <= max_unmeasured_age,
        Some(t) => measured.contains_key(&e.uid) && now.saturating_duration_since(t) <= fade,
    };
    let first_measured = |e: &Inflight| e.measured_since.is_none() && measured.contains_key(&e.uid);
    // A pod measured for the first time is marked, else an estimate goes.
    if !alloc
        .inflight
        .iter()
        .any(|e| first_measured(e) || !keeps(e))
    {
        return false;
    }
    let inflight = &mut Arc::make_mut(alloc).inflight;
    for e in inflight.iter_mut() {
        if first_measured(e) {
            e.measured_since = Some(now);
        }
    }
    inflight.retain(keeps);
    true
}

/// Requests placed on a node: pods bound or assumed there, and in-flight estimates.
#[derive(Debug, Clone, Default)]
pub struct NodeAllocation {
    /// Sum of effective requests of the pods on the node (incl. `pods` = count).
    pub requested: ResourceList,
    /// Sum of non-zero CPU requests (upstream scoring convention), millicores.
    pub nonzero_cpu_millis: i64,
    /// Sum of non-zero memory requests, bytes.
    pub nonzero_memory_bytes: i64,
    /// The pods. Change them through [`NodeAllocation::put_pod`],
    /// [`NodeAllocation::remove_pod`] or [`NodeAllocation::set_pods`], which keep
    /// [`NodeAllocation::pods_with_affinity`] true. Shared: copying an allocation (each
    /// assumption copies its node's, which snapshots still hold) copies pointers, not pods.
    pub pods: Vec<Arc<PodOnNode>>,
    /// How many of `pods` carry inter-pod affinity or anti-affinity; they come first in
    /// `pods` ([`NodeAllocation::affinity_pods`]), so the affinity plugins read only them
    /// (kube-scheduler's `PodsWithAffinity`) and a cluster where few pods use affinity does
    /// not pay a scan of every pod per scheduling cycle.
    pub pods_with_affinity: usize,
    /// In-flight usage estimates.
    pub inflight: Vec<Inflight>,
}

impl NodeAllocation {
    /// The pods with inter-pod affinity or anti-affinity.
    #[inline]
    pub fn affinity_pods(&self) -> &[Arc<PodOnNode>] {
        &self.pods[..self.pods_with_affinity.min(self.pods.len())]
    }

    /// Adds the pod, replacing one with the same UID.
    pub fn put_pod(&mut self, pod: impl Into<Arc<PodOnNode>>) {
        let pod = pod.into();
        self.remove_pod(&pod.uid);
        let affinity = !pod.pod_affinity.is_empty();
        self.pods.push(pod);
        if affinity {
            // Keep pods with affinity first: swap it into the end of that prefix.
            let last = self.pods.len() - 1;
            self.pods.swap(self.pods_with_affinity, last);
            self.pods_with_affinity += 1;
        }
    }

    /// Removes the pod with this UID, if present.
    pub fn remove_pod(&mut self, uid: &str) -> Option<Arc<PodOnNode>> {
        let i = self.pods.iter().position(|p| p.uid == uid)?;
        if i < self.pods_with_affinity {
            // Close the prefix: move its last member into the hole, then the hole to the end.
            let end = self.pods_with_affinity - 1;
            self.pods.swap(i, end);
            self.pods_with_affinity = end;
            let last = self.pods.len() - 1;
            self.pods.swap(end, last);
            self.pods.pop()
        } else {
            Some(self.pods.swap_remove(i))
        }
    }

    /// Adds the pod and its requests (as binding it would).
    pub fn admit(&mut self, pod: impl Into<Arc<PodOnNode>>) {
        let pod = pod.into();
        self.requested.add(&pod.requests);
        self.requested.pods = self.requested.pods.saturating_add(1);
        self.nonzero_cpu_millis = self
            .nonzero_cpu_millis
            .saturating_add(pod.nonzero_cpu_millis);
        self.nonzero_memory_bytes = self
            .nonzero_memory_bytes
            .saturating_add(pod.nonzero_memory_bytes);
        self.put_pod(pod);
    }

    /// Removes the pod with this UID and its requests (as evicting it would).
    pub fn evict(&mut self, uid: &str) -> Option<Arc<PodOnNode>> {
        let pod = self.remove_pod(uid)?;
        self.requested.sub(&pod.requests);
        self.requested.pods = self.requested.pods.saturating_sub(1).max(0);
        self.nonzero_cpu_millis = self
            .nonzero_cpu_millis
            .saturating_sub(pod.nonzero_cpu_millis);
        self.nonzero_memory_bytes = self
            .nonzero_memory_bytes
            .saturating_sub(pod.nonzero_memory_bytes);
        self.inflight.retain(|i| i.uid != uid);
        Some(pod)
    }

    /// Replaces all pods.
    pub fn set_pods(&mut self, pods: Vec<PodOnNode>) {
        let mut pods: Vec<Arc<PodOnNode>> = pods.into_iter().map(Arc::new).collect();
        pods.sort_by_key(|p| p.pod_affinity.is_empty());
        self.pods_with_affinity = pods.iter().filter(|p| !p.pod_affinity.is_empty()).count();
        self.pods = pods;
    }
}

/// Everything known about one node at snapshot time.
#[derive(Debug, Clone)]
pub struct NodeView {
    /// Node name.
    pub name: Arc<str>,
    /// Latest agent report (None: no agent has reported).
    pub agent: Option<Arc<AgentNode>>,
    /// Kubernetes facts (None: not known to Kubernetes, e.g. standalone mode).
    pub kube: Option<Arc<KubeNode>>,
    /// Requests and estimates placed on it.
    pub alloc: Arc<NodeAllocation>,
    /// True when the agent report is older than the stale threshold, or absent.
    pub stale: bool,
    /// Seconds since the latest report (None: never).
    pub report_age_seconds: Option<f64>,
}

impl NodeView {
    /// Allocatable resources: Kubernetes' when known, else derived from the agent's capacity
    /// (CPUs × 1000 m, memory, 110 pods, GPU count), else zero.
    pub fn allocatable(&self) -> ResourceList {
        if let Some(k) = &self.kube {
            return k.allocatable.clone();
        }
        match &self.agent {
            Some(a) => ResourceList {
                cpu_millis: i64::from(a.capacity.logical_cpus) * 1000,
                memory_bytes: i64::try_from(a.capacity.memory_bytes).unwrap_or(i64::MAX),
                pods: 110,
                gpus: a.capacity.gpus.len() as i64,
                ..Default::default()
            },
            None => ResourceList::default(),
        }
    }

    /// [`NodeView::allocatable`] without copying Kubernetes' list, for hot paths: borrowed
    /// when Kubernetes knows the node, else derived as there (no heap allocation).
    #[inline]
    pub fn allocatable_ref(&self) -> Cow<'_, ResourceList> {
        match &self.kube {
            Some(k) => Cow::Borrowed(&k.allocatable),
            None => Cow::Owned(self.allocatable()),
        }
    }

    /// Node labels (empty without Kubernetes).
    #[inline]
    pub fn labels(&self) -> Option<&BTreeMap<String, String>> {
        self.kube.as_ref().map(|k| &k.labels)
    }

    /// The node's Kubernetes labels, empty without Kubernetes facts (what label matching
    /// sees on such a node).
    #[inline]
    pub fn labels_or_empty(&self) -> &BTreeMap<String, String> {
        static EMPTY: BTreeMap<String, String> = BTreeMap::new();
        self.labels().unwrap_or(&EMPTY)
    }

    /// In-flight usage not yet reflected in a load window spanning `window_span_seconds`:
    /// (CPU millicores, memory bytes). An unmeasured pod counts its estimate in full; a
    /// measured one counts its measured usage × (1 − covered), where covered is the share of
    /// the window that has elapsed since its first measurement (at the latest report).
    #[inline]
    pub fn inflight_amounts(&self, window_span_seconds: f64) -> (f64, f64) {
        let pods = self.agent.as_ref().map(|a| &a.pods);
        let reference = self.agent.as_ref().and_then(|a| a.received_at);
        self.alloc.inflight.iter().fold((0.0, 0.0), |(c, m), e| {
            let measured = pods.and_then(|p| p.get(&e.uid));
            match (e.measured_since, measured) {
                (None, None) => (c + e.cpu_millis as f64, m + e.memory_bytes as f64),
                (_, Some(u)) => {
                    let covered = match (e.measured_since, reference) {
                        (Some(t), Some(r)) if window_span_seconds > 0.0 => {
                            (r.saturating_duration_since(t).as_secs_f64() / window_span_seconds)
                                .clamp(0.0, 1.0)
                        }
                        _ => 0.0,
                    };
                    (
                        c + u.cpu_millis * (1.0 - covered),
                        m + u.memory_bytes * (1.0 - covered),
                    )
                }
                // Measured before, gone now: the pod ended.
                (Some(_), None) => (c, m),
            }
        })
    }
}

/// Utilisation of one resource as the scoring policies see it: the window's statistics plus
/// in-flight estimates (CPU and memory), as ratios of capacity.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct Usage {
    /// Window mean (+ in-flight).
    pub mean: f64,
    /// Window population standard deviation.
    pub stddev: f64,
    /// Window p95 (+ in-flight).
    pub p95: f64,
    /// Window max (+ in-flight).
    pub max: f64,
    /// Latest sample (+ in-flight).
    pub latest: f64,
    /// Samples behind the window.
    pub count: u64,
}

impl Usage {
    /// From a window summary, shifted by `extra` (a ratio of capacity).
    #[inline]
    pub fn from_window(w: &WindowSummary, latest: f64, extra: f64) -> Usage {
        Usage {
            mean: w.mean + extra,
            stddev: w.stddev,
            p95: w.p95 + extra,
            max: w.max + extra,
            latest: latest + extra,
            count: u64::from(w.count),
        }
    }
}

/// The figures of one node that filters and scores read for every node of every pod, in one
/// flat row: Kubernetes facts, allocation totals, agent pressure data and CPU/memory usage for
/// one load window. A [`DigestTable`] keeps the rows of a whole snapshot contiguous, so a
/// scoring pass reads a few cache lines per node from one array instead of chasing four
/// `Arc`s and two window vectors per node (memory traffic, not arithmetic, dominates at
/// 5 000 nodes). Fields are laid out in 64-byte lines by use, so a plugin touches only the
/// lines it needs: (0) flags, affinity counts and CPU/memory totals, which nearly every
/// plugin reads; (1) CPU usage; (2) memory usage; (3) the other totals, agent GPUs and
/// memory available; (4) filesystem and pressure data. What the row was computed from is kept
/// beside it, in the table's own compact column ([`DigestTable::row_matches`]).
#[derive(Debug, Clone, Default)]
#[repr(C, align(64))]
pub struct NodeDigest {
    // Line 0.
    /// Kubernetes knows the node.
    pub has_kube: bool,
    /// [`NodeView::stale`] when the row was computed (part of what
    /// [`DigestTable::row_matches`] compares, so hot loops read it here instead of opening the
    /// view).
    pub stale: bool,
    /// Ready condition (true without Kubernetes facts).
    pub ready: bool,
    /// Cordoned.
    pub unschedulable: bool,
    /// The node has taints (read them from the view).
    pub has_taints: bool,
    /// Allocatable or requested lists have extended resources (read them from the view).
    pub has_extended: bool,
    /// A pod on the node uses host ports (read them from the view).
    pub has_host_ports: bool,
    /// An agent has reported.
    pub has_agent: bool,
    /// The node has GPUs (allocatable `nvidia.com/gpu` or agent GPUs).
    pub has_gpus: bool,
    /// Pods on the node with required anti-affinity terms, saturating ([`AntiAffinityIndex`]
    /// covers only the nodes where this is not 0).
    pub pods_with_required_anti: u16,
    /// Pods on the node with terms that score other pods (required or preferred affinity,
    /// preferred anti-affinity), saturating: the affinity score reads only the nodes where
    /// this is not 0 (unless the pod has preferred terms itself).
    pub pods_with_scoring_affinity: u16,
    /// [`NodeView::allocatable`] CPU, millicores.
    pub allocatable_cpu_millis: i64,
    /// Allocatable memory, bytes.
    pub allocatable_memory_bytes: i64,
    /// Requested CPU, millicores.
    pub requested_cpu_millis: i64,
    /// Requested memory, bytes.
    pub requested_memory_bytes: i64,
    /// Non-zero CPU requests, millicores.
    pub nonzero_cpu_millis: i64,
    /// Non-zero memory requests, bytes.
    pub nonzero_memory_bytes: i64,
    // Line 1.
    /// CPU usage of the window plus in-flight estimates, ignoring staleness.
    pub cpu: Option<Usage>,
    /// Agent capacity: logical CPUs × 1000 (0 without agent).
    pub agent_cpu_millis: f64,
    // Line 2.
    /// Memory usage of the window plus in-flight estimates, ignoring staleness.
    pub memory: Option<Usage>,
    /// Agent capacity: memory bytes (0 without agent).
    pub agent_memory_bytes: u64,
    // Line 3.
    /// Allocatable ephemeral storage, bytes.
    pub allocatable_ephemeral_bytes: i64,
    /// Allocatable pod count.
    pub allocatable_pods: i64,
    /// Allocatable `nvidia.com/gpu`.
    pub allocatable_gpus: i64,
    /// Requested ephemeral storage, bytes.
    pub requested_ephemeral_bytes: i64,
    /// Requested `nvidia.com/gpu`.
    pub requested_gpus: i64,
    /// Pods bound or assumed on the node.
    pub pod_count: i64,
    /// Agent: GPUs with NVML state (read them from the view).
    pub agent_gpus: usize,
    /// Agent: memory.available, bytes.
    pub memory_available_bytes: u64,
    // Line 4.
    /// Agent: nodefs.available ratio.
    pub nodefs_available_ratio: Option<f64>,
    /// Agent: nodefs.inodesFree ratio.
    pub nodefs_inodes_free_ratio: Option<f64>,
    /// Agent: last time under eviction pressure.
    pub last_pressure_at: Option<Instant>,
}

/// What a [`NodeDigest`] was computed from, held weakly: the allocations stay reserved while
/// the row exists, so a replaced `Arc`'s address cannot be reused by a newer one that would
/// then pass for the data the row was computed from. Only kept (the table's `sources`); the
/// checks compare the addresses in [`RowKey`].
#[derive(Debug, Clone, Default)]
#[allow(dead_code, reason = "held to keep the addresses reserved, never read")]
struct RowSource {
    agent: Option<Weak<AgentNode>>,
    kube: Option<Weak<KubeNode>>,
    alloc: Weak<NodeAllocation>,
}

impl RowSource {
    fn of(node: &NodeView) -> RowSource {
        RowSource {
            agent: node.agent.as_ref().map(Arc::downgrade),
            kube: node.kube.as_ref().map(Arc::downgrade),
            alloc: Arc::downgrade(&node.alloc),
        }
    }
}

/// The addresses of a node's agent, Kubernetes and allocation data (0 when absent) and its
/// staleness (the allocation address's low bit, which an `Arc`'s alignment leaves 0), as a
/// row was computed from them: [`DigestTable::current_rows`] compares three words a node
/// against the node view. The table's [`RowSource`] keeps the addresses reserved.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct RowKey {
    alloc_stale: usize,
    agent: usize,
    kube: usize,
}

// The staleness bit lives in the allocation's address: its alignment must leave it free.
const _: () = assert!(std::mem::align_of::<NodeAllocation>() >= 2);

impl RowKey {
    #[inline(always)]
    fn of(node: &NodeView) -> RowKey {
        fn address<T>(a: Option<&Arc<T>>) -> usize {
            a.map_or(0, |a| Arc::as_ptr(a).addr())
        }
        RowKey {
            alloc_stale: Arc::as_ptr(&node.alloc).addr() | usize::from(node.stale),
            agent: address(node.agent.as_ref()),
            kube: address(node.kube.as_ref()),
        }
    }

    /// Whether `node`'s agent, Kubernetes and allocation data are still these (a replaced
    /// `Arc` means the node changed since) and its staleness too.
    #[inline(always)]
    fn matches(&self, node: &NodeView) -> bool {
        *self == RowKey::of(node)
    }
}

fn count_u16<T>(items: impl Iterator<Item = T>) -> u16 {
    u16::try_from(items.count()).unwrap_or(u16::MAX)
}

impl NodeDigest {
    /// Computes the row of `node` for load window `window_seconds`.
    pub fn of(node: &NodeView, window_seconds: u32) -> NodeDigest {
        let agent = node.agent.as_deref();
        let kube = node.kube.as_deref();
        let a = &*node.alloc;
        let allocatable = node.allocatable_ref();
        let agent_gpus = agent.map_or(0, |g| g.gpus.len());
        NodeDigest {
            has_kube: kube.is_some(),
            stale: node.stale,
            ready: kube.is_none_or(|k| k.ready),
            unschedulable: kube.is_some_and(|k| k.unschedulable),
            has_taints: kube.is_some_and(|k| !k.taints.is_empty()),
            has_extended: !allocatable.extended.is_empty() || !a.requested.extended.is_empty(),
            has_host_ports: a.pods.iter().any(|p| !p.host_ports.is_empty()),
            pods_with_required_anti: count_u16(
                a.affinity_pods()
                    .iter()
                    .filter(|p| !p.pod_affinity.required_anti.is_empty()),
            ),
            pods_with_scoring_affinity: count_u16(a.affinity_pods().iter().filter(|p| {
                let t = &p.pod_affinity;
                !(t.required.is_empty() && t.preferred.is_empty() && t.preferred_anti.is_empty())
            })),
            has_agent: agent.is_some(),
            has_gpus: allocatable.gpus > 0 || agent_gpus > 0,
            allocatable_cpu_millis: allocatable.cpu_millis,
            allocatable_memory_bytes: allocatable.memory_bytes,
            requested_cpu_millis: a.requested.cpu_millis,
            requested_memory_bytes: a.requested.memory_bytes,
            cpu: raw_usage(node, ResourceKind::Cpu, window_seconds),
            agent_cpu_millis: agent.map_or(0.0, |g| f64::from(g.capacity.logical_cpus) * 1000.0),
            memory: raw_usage(node, ResourceKind::Memory, window_seconds),
            agent_memory_bytes: agent.map_or(0, |g| g.capacity.memory_bytes),
            nonzero_cpu_millis: a.nonzero_cpu_millis,
            nonzero_memory_bytes: a.nonzero_memory_bytes,
            allocatable_ephemeral_bytes: allocatable.ephemeral_storage_bytes,
            allocatable_pods: allocatable.pods,
            allocatable_gpus: allocatable.gpus,
            requested_ephemeral_bytes: a.requested.ephemeral_storage_bytes,
            requested_gpus: a.requested.gpus,
            pod_count: a.pods.len() as i64,
            agent_gpus,
            memory_available_bytes: agent.map_or(0, |g| g.memory_available_bytes),
            nodefs_available_ratio: agent.and_then(|g| g.nodefs_available_ratio),
            nodefs_inodes_free_ratio: agent.and_then(|g| g.nodefs_inodes_free_ratio),
            last_pressure_at: agent.and_then(|g| g.last_pressure_at),
        }
    }

    /// Usage of CPU or memory (`None` for other kinds: read those from the view).
    #[inline]
    pub fn usage(&self, kind: ResourceKind) -> Option<Usage> {
        match kind {
            ResourceKind::Cpu => self.cpu,
            ResourceKind::Memory => self.memory,
            _ => None,
        }
    }
}

/// The node's usage of `kind` in window `window_seconds` plus in-flight estimates, whether or
/// not the node is stale (callers apply the stale policy).
#[inline]
pub fn raw_usage(node: &NodeView, kind: ResourceKind, window_seconds: u32) -> Option<Usage> {
    let agent = node.agent.as_ref()?;
    let load = agent.load.get(kind)?;
    let w = load.window(window_seconds)?;
    if w.count == 0 {
        return None;
    }
    Some(Usage::from_window(
        w,
        load.latest,
        inflight_extra(
            node,
            kind,
            f64::from(w.window_seconds).min(f64::from(w.count) * agent.interval_seconds),
        ),
    ))
}

/// The [`NodeDigest`] rows of a whole snapshot for one load window, in `nodes` order.
#[derive(Debug)]
pub struct DigestTable {
    /// Load window of the usage columns.
    pub window_seconds: u32,
    /// Snapshot generation the rows were built at.
    pub generation: u64,
    /// One row per node.
    pub rows: Vec<NodeDigest>,
    /// What each row was computed from, same order, held weakly.
    sources: Vec<RowSource>,
    /// Their addresses, same order: what the checks compare.
    keys: Vec<RowKey>,
    /// Every row was found current for the snapshot that built the table
    /// ([`ClusterSnapshot::current_rows`]), and its nodes have not been edited since except
    /// by [`ClusterSnapshot::set_alloc`], which patched this table's row.
    verified: AtomicBool,
    /// Built on first use by [`DigestTable::anti_affinity`].
    anti_affinity: std::sync::OnceLock<AntiAffinityIndex>,
    /// [`DigestTable::memo`]'s values.
    memo: Mutex<Vec<(MemoKey, Arc<dyn Memo>)>>,
    /// `DigestTable::column`'s columns, and the keys asked for once.
    columns: Mutex<ColumnCache>,
}

/// What a column of `DigestTable::column` holds: one plugin's verdicts (a filter's) or
/// scores (a score plugin's) for one pod shape. Pods with equal keys get equal verdicts or
/// scores from the plugin on every node ([`FilterPlugin::column_key`],
/// [`ScorePlugin::column_key`]).
///
/// [`FilterPlugin::column_key`]: crate::FilterPlugin::column_key
/// [`ScorePlugin::column_key`]: crate::ScorePlugin::column_key
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct ColumnKey {
    /// The plugin's name.
    pub plugin: &'static str,
    /// A filter's verdicts (`true`) or a score plugin's scores: some plugins are both.
    pub filter: bool,
    /// The profile's stale policy, as a number (it decides what load plugins see).
    pub stale_policy: u8,
    /// The plugin's words: its arguments and what it reads of the pod.
    pub words: ColumnWords,
}

/// What a plugin's [`ColumnKey`] says of its arguments and of the pod (unused words 0).
pub type ColumnWords = [u64; 8];

/// One plugin's entries for every node of a [`DigestTable`]'s snapshot for one pod shape
/// ([`ColumnKey`]), with the nodes edited since they were computed
/// ([`ClusterSnapshot::set_alloc`]): the evaluation that reads the column next computes
/// those again (it has the plugin and a pod of the shape; the table has neither).
#[derive(Debug, Default)]
pub(crate) struct NodeColumn {
    state: Mutex<ColumnState>,
}

/// [`NodeColumn`]'s contents.
#[derive(Debug, Default)]
pub(crate) struct ColumnState {
    /// One byte per node, in the snapshot's order: a score (0–100), or a filter's verdict
    /// (0 passes, `k` is refused for `reasons[k − 1]`). Empty: the column could not be
    /// built (a filter with more than 255 distinct reasons), and is not used.
    pub(crate) entries: Vec<u8>,
    /// A filter's distinct reasons.
    pub(crate) reasons: Vec<crate::Reason>,
    /// Nodes whose entry is out of date, in the order they were edited (possibly repeated).
    pub(crate) edited: Vec<usize>,
}

impl ColumnState {
    /// The code of a refusal for `reason`: the reason's position + 1 (the reason added when
    /// new; 0 is a pass); `None` past 255 distinct reasons.
    pub(crate) fn code(&mut self, reason: &crate::Reason) -> Option<u8> {
        let at = match self.reasons.iter().position(|r| r == reason) {
            Some(at) => at,
            None => {
                self.reasons.push(reason.clone());
                self.reasons.len() - 1
            }
        };
        u8::try_from(at + 1).ok()
    }
}

impl NodeColumn {
    /// A column of these contents.
    pub(crate) fn new(state: ColumnState) -> NodeColumn {
        NodeColumn {
            state: Mutex::new(state),
        }
    }

    /// Its contents, locked: a reader computes the edited nodes again and clears the list.
    pub(crate) fn lock(&self) -> std::sync::MutexGuard<'_, ColumnState> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// `DigestTable::column`'s cache.
#[derive(Debug, Default)]
struct ColumnCache {
    /// The columns, in the order built.
    built: Vec<(ColumnKey, Arc<NodeColumn>)>,
    /// Keys asked for once and not built yet, oldest first.
    seen: Vec<ColumnKey>,
}

/// A [`DigestTable::memo`] value's type and its caller's key.
type MemoKey = (TypeId, u64);

/// A value [`DigestTable::memo`] keeps: computed from the snapshot's nodes, and either
/// brought up to date when one node's row is recomputed in place, or dropped.
pub trait Memo: Any + Send + Sync + std::fmt::Debug {
    /// Node `index` of `snapshot` changed and its row is now `row` (the scheduler assumed a
    /// pod on it: [`ClusterSnapshot::set_alloc`]); every other node is as before. Returns
    /// `true` when the value now equals what building it afresh from `snapshot` would give
    /// — exactly, not approximately — and `false` to have it dropped (the default).
    fn patch(
        &mut self,
        _index: usize,
        _row: &NodeDigest,
        _node: &NodeView,
        _snapshot: &ClusterSnapshot,
    ) -> bool {
        false
    }
}

/// [`Memo::patch`] for a value that keeps one entry per node, in `nodes` order: entry
/// `index` becomes `entry()` when `entries` covers `snapshot`'s nodes, and `false` (drop the
/// value) otherwise.
pub fn patch_entry<T>(
    entries: &mut [T],
    index: usize,
    snapshot: &ClusterSnapshot,
    entry: impl FnOnce() -> T,
) -> bool {
    if entries.len() != snapshot.nodes.len() {
        return false;
    }
    match entries.get_mut(index) {
        Some(e) => {
            *e = entry();
            true
        }
        None => false,
    }
}

/// Which rows of a [`DigestTable`] are current for the snapshot being evaluated
/// ([`DigestTable::current_rows`], [`ClusterSnapshot::current_rows`]): checked at most once
/// per evaluation, so plugins read rows without opening the node views.
#[derive(Debug, Clone, Copy)]
pub struct CurrentRows<'a> {
    /// Each row's verdict; may be empty when `all` (then the first `len` rows are current).
    rows: &'a [bool],
    all: bool,
    len: usize,
}

impl CurrentRows<'_> {
    /// Whether the row at `index` is current (false past the table's end).
    #[inline]
    pub fn get(&self, index: usize) -> bool {
        if self.all {
            index < self.len
        } else {
            self.rows.get(index).copied().unwrap_or(false)
        }
    }

    /// Whether every row is current: then the nodes are exactly the data the rows were
    /// computed from, and a [`DigestTable::memo`] holds for the snapshot.
    #[inline]
    pub fn all(&self) -> bool {
        self.all
    }
}

impl DigestTable {
    /// The [`AntiAffinityIndex`] of `snapshot` (the snapshot this table was built for),
    /// built on first use.
    pub fn anti_affinity(&self, snapshot: &ClusterSnapshot) -> &AntiAffinityIndex {
        self.anti_affinity
            .get_or_init(|| AntiAffinityIndex::build(self, &snapshot.nodes))
    }

    /// Whether the row at `index` was computed from `node` as it is now (its agent,
    /// Kubernetes and allocation data and its staleness); false past the table's end.
    #[inline]
    pub fn row_matches(&self, index: usize, node: &NodeView) -> bool {
        self.keys.get(index).is_some_and(|k| k.matches(node))
    }

    /// Which rows still [match](DigestTable::row_matches) their node of `nodes` (the snapshot
    /// this table was built for, same order), kept in `buf`: one check per node for a whole
    /// evaluation ([`CycleContext::current`](crate::CycleContext::current)). Nodes past the
    /// table's end are not current.
    pub fn current_rows<'b>(&self, nodes: &[NodeView], buf: &'b mut Vec<bool>) -> CurrentRows<'b> {
        buf.clear();
        let checked = nodes.len().min(self.keys.len());
        // One pass, without a branch a node: three words compared, the verdicts counted.
        let mut current = 0;
        buf.extend(nodes[..checked].iter().zip(&self.keys).map(|(n, k)| {
            let c = k.matches(n);
            current += usize::from(c);
            c
        }));
        buf.resize(nodes.len(), false);
        let all = nodes.len() == self.rows.len() && current == nodes.len();
        CurrentRows {
            rows: buf,
            all,
            len: nodes.len(),
        }
    }

    /// Most values [`DigestTable::memo`] keeps; past it, callers take their path without
    /// memos. The embedded profiles use about a dozen per load window.
    pub const MAX_MEMOS: usize = 64;

    /// A value that depends on the snapshot's nodes and nothing else (a cluster-wide sum a
    /// score plugin needs for every pod, or scores that do not depend on the pod), built by
    /// `build` on first use for this `T` and `key` and then shared by every evaluation of the
    /// table. Only while every row is current ([`CurrentRows::all`];
    /// [`CycleContext::memo`](crate::CycleContext::memo) checks it) are the nodes exactly
    /// the data the rows were computed from, so such a value holds for them; patching a row
    /// ([`ClusterSnapshot::set_alloc`]) patches each value ([`Memo::patch`]) or forgets it.
    /// `T` should be a type private to its caller: the table is shared by every profile with
    /// its window. `None` when the table already holds [`DigestTable::MAX_MEMOS`] other
    /// values (without building this one): a value built and thrown away on every call would
    /// cost more than the caller's own path.
    pub fn memo<T: Memo>(&self, key: u64, build: impl FnOnce() -> T) -> Option<Arc<T>> {
        let id = (TypeId::of::<T>(), key);
        let found = |memo: &[(MemoKey, Arc<dyn Memo>)]| {
            memo.iter().find(|(k, _)| *k == id).and_then(|(_, v)| {
                let any: Arc<dyn Any + Send + Sync> = v.clone();
                any.downcast::<T>().ok()
            })
        };
        {
            let memo = self.lock_memo();
            if let Some(v) = found(&memo) {
                return Some(v);
            }
            if memo.len() >= Self::MAX_MEMOS {
                return None;
            }
        }
        // Built without the lock (it may take a pass over the table); the first value
        // stored wins.
        let built = Arc::new(build());
        let mut memo = self.lock_memo();
        if let Some(v) = found(&memo) {
            return Some(v);
        }
        if memo.len() >= Self::MAX_MEMOS {
            return None;
        }
        memo.push((id, built.clone()));
        Some(built)
    }

    /// How many values [`DigestTable::memo`] holds.
    pub fn memos(&self) -> usize {
        self.lock_memo().len()
    }

    fn lock_memo(&self) -> std::sync::MutexGuard<'_, Vec<(MemoKey, Arc<dyn Memo>)>> {
        self.memo
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Most columns `DigestTable::column` keeps, for all profiles of the table's window: a
    /// column is one byte per node (5 KB at 5 000 nodes) for one keyed plugin and shape; the
    /// default profile keys four plugins, so about eight shapes per table.
    pub const MAX_COLUMNS: usize = 32;

    /// How many keys asked for once a table remembers.
    const MAX_SEEN: usize = 64;

    /// The entries of every node of the snapshot for `key`, built by `build` — but only
    /// from the second time a key is asked for: the first time, and once the table holds
    /// [`DigestTable::MAX_COLUMNS`], `None`, and the caller computes what it needs itself.
    /// A pod shape seen once in a table's life would pay for every node, feasible or not,
    /// for nothing; the replicas of a workload, scheduled one after the other, come many
    /// times. Like [`DigestTable::memo`], a column holds only while every row is current.
    pub(crate) fn column(
        &self,
        key: &ColumnKey,
        build: impl FnOnce() -> ColumnState,
    ) -> Option<Arc<NodeColumn>> {
        let found = |cache: &ColumnCache| {
            cache
                .built
                .iter()
                .find(|(k, _)| k == key)
                .map(|(_, c)| c.clone())
        };
        {
            let mut cache = self.lock_columns();
            if let Some(c) = found(&cache) {
                return Some(c);
            }
            if cache.built.len() >= Self::MAX_COLUMNS {
                return None;
            }
            match cache.seen.iter().position(|k| k == key) {
                Some(at) => {
                    cache.seen.remove(at);
                }
                None => {
                    if cache.seen.len() >= Self::MAX_SEEN {
                        cache.seen.remove(0);
                    }
                    cache.seen.push(*key);
                    return None;
                }
            }
        }
        // Built without the lock (a pass over the table); the first column stored wins.
        let built = Arc::new(NodeColumn::new(build()));
        let mut cache = self.lock_columns();
        if let Some(c) = found(&cache) {
            return Some(c);
        }
        if cache.built.len() >= Self::MAX_COLUMNS {
            return None;
        }
        cache.built.push((*key, built.clone()));
        Some(built)
    }

    /// How many columns `DigestTable::column` holds.
    pub fn columns(&self) -> usize {
        self.lock_columns().built.len()
    }

    fn lock_columns(&self) -> std::sync::MutexGuard<'_, ColumnCache> {
        self.columns
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Existing pods' required anti-affinity terms grouped by distinct term, once per digest
/// table: replicas of one workload carry the same terms, so the InterPodAffinity PreFilter of
/// a pod without required terms of its own matches each distinct term once instead of once
/// per pod (kube-scheduler keeps such pods per node; this groups them across nodes).
///
/// The index covers the nodes whose digest rows were current when it was built; a
/// reader takes a node's entries only while its row still matches it, and reads every other
/// node (not covered, or edited since) itself.
#[derive(Debug, Default)]
pub struct AntiAffinityIndex {
    /// Each distinct term with its holders: (node index in the snapshot, index of the pod in
    /// that node's [`NodeAllocation::pods`](NodeAllocation::pods)).
    pub terms: Vec<(AffinityTerm, Vec<(u32, u32)>)>,
    covered: Vec<bool>,
    /// The nodes `covered` leaves out, in order (kept so that reading them does not scan
    /// `covered`: the scheduler uncovers a node with every pod it assumes).
    uncovered: Vec<usize>,
}

impl AntiAffinityIndex {
    /// Builds the index of `nodes` from their `table` (same order).
    pub fn build(table: &DigestTable, nodes: &[NodeView]) -> AntiAffinityIndex {
        let rows = &table.rows;
        let mut at: HashMap<&AffinityTerm, usize> = HashMap::new();
        let mut terms: Vec<(AffinityTerm, Vec<(u32, u32)>)> = Vec::new();
        let mut covered = vec![false; nodes.len()];
        for (i, (row, node)) in rows.iter().zip(nodes).enumerate() {
            let Ok(index) = u32::try_from(i) else { break };
            if !table.row_matches(i, node) {
                continue;
            }
            let pods = node.alloc.affinity_pods();
            if row.pods_with_required_anti > 0 && u32::try_from(pods.len()).is_err() {
                continue; // too many to name: left uncovered, read directly
            }
            covered[i] = true;
            if row.pods_with_required_anti == 0 {
                continue;
            }
            for (p, pod) in (0u32..).zip(pods) {
                for term in &pod.pod_affinity.required_anti {
                    let k = *at.entry(term).or_insert_with(|| {
                        terms.push((term.clone(), Vec::new()));
                        terms.len() - 1
                    });
                    terms[k].1.push((index, p));
                }
            }
        }
        let uncovered = (0..covered.len()).filter(|&i| !covered[i]).collect();
        AntiAffinityIndex {
            terms,
            covered,
            uncovered,
        }
    }

    /// Whether the index covers every node of the snapshot it was built for.
    pub fn covers_all(&self) -> bool {
        self.uncovered.is_empty()
    }

    /// How many nodes the index was built over.
    pub fn covered_len(&self) -> usize {
        self.covered.len()
    }

    /// The nodes it does not cover, in order.
    pub fn uncovered(&self) -> impl Iterator<Item = usize> + '_ {
        self.uncovered.iter().copied()
    }

    /// Whether the node at `index` was covered when the index was built (its entries, if
    /// any, are complete as of then).
    pub fn covers(&self, index: usize) -> bool {
        self.covered.get(index).copied().unwrap_or(false)
    }

    /// Stops covering the node at `index` (its pods changed after the index was built).
    pub fn uncover(&mut self, index: usize) {
        if let Some(c) = self.covered.get_mut(index)
            && *c
        {
            *c = false;
            // Sorted insert: a few hundred nodes at most between two snapshots.
            let at = self.uncovered.partition_point(|&u| u < index);
            self.uncovered.insert(at, index);
        }
    }
}

/// Digest tables built so far for a snapshot (at most [`DigestCache::MAX_TABLES`]), and the
/// tables of an older snapshot to build them from ([`ClusterSnapshot::seed_digests_from`]).
/// A clone starts empty, so a snapshot copied and then edited never reads its original's rows.
#[derive(Debug, Default)]
struct DigestCache(Mutex<DigestTables>);

#[derive(Debug, Default)]
struct DigestTables {
    built: Vec<Arc<DigestTable>>,
    /// Dropped once a table is built (they hold the older snapshot's rows).
    seeds: Vec<Arc<DigestTable>>,
}

impl DigestCache {
    const MAX_TABLES: usize = 4;

    fn lock(&self) -> std::sync::MutexGuard<'_, DigestTables> {
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Clone for DigestCache {
    fn clone(&self) -> Self {
        DigestCache::default()
    }
}

/// `nodes` in `previous`'s order, when they have exactly its names; else `nodes` back (in
/// some order).
fn in_order_of(
    nodes: Vec<NodeView>,
    previous: &ClusterSnapshot,
) -> Result<Vec<NodeView>, Vec<NodeView>> {
    if nodes.len() != previous.nodes.len() {
        return Err(nodes);
    }
    let mut slots: Vec<Option<NodeView>> = Vec::with_capacity(nodes.len());
    slots.resize_with(nodes.len(), || None);
    let mut rest = nodes.into_iter();
    while let Some(node) = rest.next() {
        match previous
            .index
            .get(&node.name)
            .and_then(|&i| slots.get_mut(i))
        {
            Some(slot @ None) => *slot = Some(node),
            _ => {
                // A new name (or a repeated one): give everything back.
                let mut back: Vec<NodeView> = slots.into_iter().flatten().collect();
                back.push(node);
                back.extend(rest);
                return Err(back);
            }
        }
    }
    // As many nodes as slots, each in a slot of its own: every slot is filled.
    Ok(slots.into_iter().flatten().collect())
}

/// The whole cluster at one moment.
///
/// Code that edits nodes in place ([`ClusterSnapshot::nodes_mut`]) must replace the edited
/// parts' `Arc`s (as `Arc::make_mut` does on a shared `Arc`) or bump `generation`: the
/// digest tables behind [`ClusterSnapshot::digests`] are keyed by both. It must not rename or
/// reorder nodes (`index` may be shared with other snapshots); the slice it gets rules out
/// adding and removing them.
#[derive(Debug, Clone, Default)]
pub struct ClusterSnapshot {
    /// Nodes sorted by name ([`ClusterSnapshot::nodes`]).
    nodes: Vec<NodeView>,
    /// Name → index into `nodes`; shared by the snapshots that have the same nodes (clones,
    /// and later snapshots built with [`ClusterSnapshot::new_after`]).
    pub index: Arc<HashMap<Arc<str>, usize>>,
    /// Store generation the snapshot reflects.
    pub generation: u64,
    /// The cluster's namespaces and their labels, for affinity terms' namespace selectors;
    /// `None` where no Namespace watch feeds the store (then a pod whose own terms select
    /// namespaces by label is refused, see `Profile::evaluate`).
    pub namespaces: Option<Arc<NamespaceLabels>>,
    /// The node inclusion policies a topology spread constraint that states none counts
    /// with: `None` for kube-scheduler 1.20–1.23 (every pod of an eligible domain counts),
    /// [`NodeInclusion::CURRENT_DEFAULT`] for 1.24+ (only pods on nodes the pod's node
    /// affinity admits, kubernetes#107009, then the 1.26+ policies' defaults).
    pub spread_default_inclusion: Option<NodeInclusion>,
    /// Which nodes hold each image, made on first use ([`ClusterSnapshot::image_index`]).
    image_index: IndexCell,
    digests: DigestCache,
}

impl ClusterSnapshot {
    /// The nodes, sorted by name.
    #[inline(always)]
    pub fn nodes(&self) -> &[NodeView] {
        &self.nodes
    }

    /// The nodes to edit in place (see [`ClusterSnapshot`] for how). The next evaluation
    /// checks every digest row against them again ([`ClusterSnapshot::current_rows`]).
    pub fn nodes_mut(&mut self) -> &mut [NodeView] {
        for table in &self
            .digests
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .built
        {
            table.verified.store(false, Ordering::Release);
        }
        &mut self.nodes
    }

    /// [`DigestTable::current_rows`] of `table` for this snapshot's nodes, checked node by
    /// node only until every row is found current once: after that, until the nodes are
    /// edited, every row is known current without reading them (a pass over every node,
    /// where a sampled cycle examines a tenth of them). [`ClusterSnapshot::nodes_mut`]
    /// forgets that for every table; [`ClusterSnapshot::set_alloc`] keeps it for the tables
    /// it patches and forgets it for those someone else holds. A table that is not one of
    /// this snapshot's own ([`ClusterSnapshot::digests`]) is checked node by node every time.
    pub fn current_rows<'b>(&self, table: &DigestTable, buf: &'b mut Vec<bool>) -> CurrentRows<'b> {
        let ours = table.generation == self.generation
            && self
                .digests
                .lock()
                .built
                .iter()
                .any(|t| std::ptr::eq(Arc::as_ptr(t), table));
        if ours && table.verified.load(Ordering::Acquire) {
            buf.clear();
            return CurrentRows {
                rows: buf,
                all: true,
                len: self.nodes.len(),
            };
        }
        let rows = table.current_rows(&self.nodes, buf);
        if ours && rows.all() {
            table.verified.store(true, Ordering::Release);
        }
        rows
    }

    /// Which nodes of this snapshot hold each image, and how many nodes have Kubernetes
    /// facts (`ImageLocality`): made on first use. A snapshot made with
    /// [`ClusterSnapshot::new_after`] patches the index its predecessor made (or would
    /// have patched from), see [`ImageIndex::after`]: the very same index where no node
    /// came, went or changed its images. Clones share it. Editing nodes in place
    /// ([`ClusterSnapshot::nodes_mut`]) must leave their images, and whether they have
    /// Kubernetes facts, alone.
    pub fn image_index(&self) -> Arc<ImageIndex> {
        self.image_index.get(
            self.nodes
                .iter()
                .map(|n| (&n.name, n.kube.as_ref().map(|k| &k.images))),
        )
    }

    /// Builds a snapshot from node views (sorted here).
    pub fn new(mut nodes: Vec<NodeView>, generation: u64) -> ClusterSnapshot {
        nodes.sort_by(|a, b| a.name.cmp(&b.name));
        let index = nodes
            .iter()
            .enumerate()
            .map(|(i, n)| (n.name.clone(), i))
            .collect();
        ClusterSnapshot {
            nodes,
            index: Arc::new(index),
            generation,
            namespaces: None,
            spread_default_inclusion: None,
            image_index: IndexCell::default(),
            digests: DigestCache::default(),
        }
    }

    /// [`ClusterSnapshot::new`] for a later snapshot of the cluster `previous` shows, with
    /// digest tables seeded from it ([`ClusterSnapshot::seed_digests_from`]) and its image
    /// index made from `previous`'s ([`ClusterSnapshot::image_index`]). Nodes come and
    /// go rarely: when `nodes` has exactly `previous`'s names, each node takes its previous
    /// position (one index lookup each, where sorting thousands of names costs a string
    /// compare and two cache misses per step) and the snapshot shares `previous`'s index.
    pub fn new_after(
        nodes: Vec<NodeView>,
        generation: u64,
        previous: &ClusterSnapshot,
    ) -> ClusterSnapshot {
        let mut snap = match in_order_of(nodes, previous) {
            Ok(nodes) => ClusterSnapshot {
                nodes,
                index: previous.index.clone(),
                generation,
                namespaces: None,
                spread_default_inclusion: None,
                image_index: IndexCell::default(),
                digests: DigestCache::default(),
            },
            Err(nodes) => ClusterSnapshot::new(nodes, generation),
        };
        snap.seed_digests_from(previous);
        snap.image_index = IndexCell::seeded(previous.image_index.seed());
        snap
    }

    /// The digest rows of every node for `window_seconds` at the current generation: built on
    /// first use (one pass over the nodes), then shared by every later evaluation of this
    /// snapshot, so scoring thousands of nodes reads one contiguous table.
    pub fn digests(&self, window_seconds: u32) -> Arc<DigestTable> {
        let mut tables = self.digests.lock();
        if let Some(t) = tables
            .built
            .iter()
            .find(|t| t.window_seconds == window_seconds && t.generation == self.generation)
        {
            return t.clone();
        }
        let seed = tables
            .seeds
            .iter()
            .find(|t| t.window_seconds == window_seconds)
            .cloned();
        // A seed row still current for the node at its index is copied (same data, so the
        // same row), every other row computed.
        let mut keys = Vec::with_capacity(self.nodes.len());
        let (rows, sources) = self
            .nodes
            .iter()
            .enumerate()
            .map(|(i, n)| {
                keys.push(RowKey::of(n));
                match seed.as_ref() {
                    Some(s) if s.row_matches(i, n) => (s.rows[i].clone(), s.sources[i].clone()),
                    _ => (NodeDigest::of(n, window_seconds), RowSource::of(n)),
                }
            })
            .unzip();
        let table = Arc::new(DigestTable {
            window_seconds,
            generation: self.generation,
            rows,
            sources,
            keys,
            verified: AtomicBool::new(false),
            anti_affinity: std::sync::OnceLock::new(),
            memo: Mutex::default(),
            columns: Mutex::default(),
        });
        tables.seeds.retain(|t| t.window_seconds != window_seconds);
        let generation = self.generation;
        tables.built.retain(|t| t.generation == generation);
        if tables.built.len() >= DigestCache::MAX_TABLES {
            tables.built.remove(0);
        }
        tables.built.push(table.clone());
        table
    }

    /// Lets this snapshot build its digest tables from those `previous` (an older snapshot of
    /// the same cluster, nodes in the same order) has built: rows whose node has not changed
    /// since are copied instead of computed. With agents reporting each second, the
    /// scheduler's snapshot, refreshed every 0.5 s, differs from the one before in about half
    /// its nodes; a snapshot taken for a `Score` call, in fewer the more often they come.
    pub fn seed_digests_from(&self, previous: &ClusterSnapshot) {
        if std::ptr::eq(self, previous) {
            return;
        }
        let theirs: Vec<Arc<DigestTable>> = previous.digests.lock().built.clone();
        if !theirs.is_empty() {
            self.digests.lock().seeds = theirs;
        }
    }

    /// Replaces node `index`'s allocation (as the scheduler does when it assumes a pod on
    /// it) and brings the node's row up to date in every digest table of this snapshot that
    /// nobody else holds (a held table keeps the old row, which no longer matches the node:
    /// readers compute the node's figures themselves, as for any edited node). An index
    /// outside the snapshot changes nothing.
    pub fn set_alloc(&mut self, index: usize, alloc: Arc<NodeAllocation>) {
        let Some(node) = self.nodes.get_mut(index) else {
            return;
        };
        node.alloc = alloc;
        // Out of the cache while they are patched: memos read the snapshot.
        let mut tables = std::mem::take(
            &mut self
                .digests
                .0
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .built,
        );
        let node = &self.nodes[index];
        for table in tables.iter_mut() {
            // A table whose row is not patched here (another generation's, or one someone
            // else holds) no longer matches the node: its rows are checked again by the next
            // evaluation.
            let Some(t) = Arc::get_mut(table)
                .filter(|t| t.generation == self.generation && index < t.rows.len())
            else {
                table.verified.store(false, Ordering::Release);
                continue;
            };
            // `sources` and `keys` are built beside `rows`, one entry a node.
            t.rows[index] = NodeDigest::of(node, t.window_seconds);
            t.sources[index] = RowSource::of(node);
            t.keys[index] = RowKey::of(node);
            let row = &t.rows[index];
            // The index's entries for the node are the old pods': read it directly.
            if let Some(ix) = t.anti_affinity.get_mut() {
                ix.uncover(index);
            }
            // A memo someone still holds, or one that cannot follow, is dropped.
            t.memo
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .retain_mut(|(_, value)| {
                    Arc::get_mut(value).is_some_and(|v| v.patch(index, row, node, self))
                });
            // A column notes the node for its next reader to score again; one held, or
            // with an eighth of its nodes to score again (building it afresh costs
            // about as much), is dropped.
            t.columns
                .get_mut()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .built
                .retain_mut(|(_, column)| {
                    Arc::get_mut(column).is_some_and(|c| {
                        let state = c
                            .state
                            .get_mut()
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                        state.edited.push(index);
                        state.edited.len().saturating_mul(8) <= state.entries.len()
                    })
                });
        }
        self.digests
            .0
            .get_mut()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .built = tables;
    }

    /// The node with this name.
    #[inline]
    pub fn get(&self, name: &str) -> Option<&NodeView> {
        self.index.get(name).map(|&i| &self.nodes[i])
    }

    /// The index of `node` in `nodes` when `node` is a reference into this snapshot (as the
    /// views handed to plugins are), in O(1); `None` for any other view.
    #[inline]
    pub fn position_of(&self, node: &NodeView) -> Option<usize> {
        let size = std::mem::size_of::<NodeView>();
        let base = self.nodes.as_ptr() as usize;
        let offset = (node as *const NodeView as usize).checked_sub(base)?;
        // A misaligned `node` gives an `i` whose element is not `node`: `ptr::eq` rejects it.
        let i = offset / size;
        (i < self.nodes.len() && std::ptr::eq(&self.nodes[i], node)).then_some(i)
    }
}

/// Converts a ratio delta of `amount` over `capacity` (0 when capacity is 0).
#[inline]
pub fn ratio_of(amount: f64, capacity: f64) -> f64 {
    if capacity > 0.0 {
        amount / capacity
    } else {
        0.0
    }
}

/// In-flight usage of CPU or memory not yet in a window spanning `window_span_seconds`, as a
/// ratio of the node's capacity (0 for other resources).
#[inline]
pub fn inflight_extra(node: &NodeView, kind: ResourceKind, window_span_seconds: f64) -> f64 {
    let Some(agent) = &node.agent else { return 0.0 };
    if node.alloc.inflight.is_empty() || !matches!(kind, ResourceKind::Cpu | ResourceKind::Memory) {
        return 0.0;
    }
    let (cpu, mem) = node.inflight_amounts(window_span_seconds);
    match kind {
        ResourceKind::Cpu => ratio_of(cpu, f64::from(agent.capacity.logical_cpus) * 1000.0),
        ResourceKind::Memory => ratio_of(mem, agent.capacity.memory_bytes as f64),
        _ => 0.0,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn in_flight_estimates_are_retired_and_copied_only_on_change() {
        use std::time::Duration;
        let t0 = Instant::now();
        let ttl = Duration::from_secs(300);
        let fade = Duration::from_secs(900);
        let measured = |uids: &[&str]| -> HashMap<String, MeasuredPod> {
            uids.iter()
                .map(|u| (u.to_string(), MeasuredPod::default()))
                .collect()
        };
        let mut alloc = Arc::new(NodeAllocation {
            inflight: vec![
                Inflight::new("a".into(), 100, 1, t0),
                Inflight::new("b".into(), 200, 2, t0),
            ],
            ..NodeAllocation::default()
        });
        let held = alloc.clone();
        // Nothing measured, nothing expired: no change, and no copy of the shared allocation.
        let later = t0 + Duration::from_secs(10);
        assert!(!retire_inflight(
            &mut alloc,
            &measured(&[]),
            later,
            ttl,
            fade
        ));
        assert!(Arc::ptr_eq(&alloc, &held));
        // `a` measured: it starts fading; the snapshot's copy keeps the old estimates.
        assert!(retire_inflight(
            &mut alloc,
            &measured(&["a"]),
            later,
            ttl,
            fade
        ));
        assert!(!Arc::ptr_eq(&alloc, &held));
        assert_eq!(alloc.inflight[0].measured_since, Some(later));
        assert_eq!(alloc.inflight[1].measured_since, None);
        assert_eq!(held.inflight[0].measured_since, None);
        // Still measured, within the fade: no change.
        let copy = alloc.clone();
        let again = t0 + Duration::from_secs(20);
        assert!(!retire_inflight(
            &mut alloc,
            &measured(&["a"]),
            again,
            ttl,
            fade
        ));
        assert!(Arc::ptr_eq(&alloc, &copy));
        // `a` no longer reported: it goes; `b` past the unmeasured age: it goes too.
        let expired = t0 + ttl + Duration::from_secs(1);
        assert!(retire_inflight(
            &mut alloc,
            &measured(&[]),
            expired,
            ttl,
            fade
        ));
        assert!(alloc.inflight.is_empty());
        // A measured estimate goes once its fade is over.
        let mut alloc = Arc::new(NodeAllocation {
            inflight: vec![Inflight {
                measured_since: Some(t0),
                ..Inflight::new("c".into(), 1, 1, t0)
            }],
            ..NodeAllocation::default()
        });
        assert!(!retire_inflight(
            &mut alloc,
            &measured(&["c"]),
            t0 + fade,
            ttl,
            fade
        ));
        assert!(retire_inflight(
            &mut alloc,
            &measured(&["c"]),
            t0 + fade + Duration::from_secs(1),
            ttl,
            fade
        ));
        assert!(alloc.inflight.is_empty());
    }

    fn pod(uid: &str, affinity: bool) -> PodOnNode {
        PodOnNode {
            uid: uid.into(),
            pod_affinity: if affinity {
                Arc::new(PodAffinity {
                    required_anti: vec![AffinityTerm::default()],
                    ..Default::default()
                })
            } else {
                Arc::default()
            },
            ..Default::default()
        }
    }

    fn check(a: &NodeAllocation) {
        let n = a.pods.iter().filter(|p| !p.pod_affinity.is_empty()).count();
        assert_eq!(a.pods_with_affinity, n);
        assert!(a.affinity_pods().iter().all(|p| !p.pod_affinity.is_empty()));
    }

    #[test]
    fn a_full_memo_list_refuses_new_values_without_building_them() {
        #[derive(Debug)]
        struct Count(u64);
        impl Memo for Count {}
        let snap = ClusterSnapshot::new(Vec::new(), 1);
        let table = snap.digests(60);
        let limit = DigestTable::MAX_MEMOS as u64;
        for key in 0..limit {
            assert_eq!(table.memo(key, || Count(key)).map(|c| c.0), Some(key));
        }
        // Kept values are still found; a new key is refused and not built.
        assert_eq!(table.memo(3, || Count(99)).map(|c| c.0), Some(3));
        let mut built = false;
        assert!(
            table
                .memo(limit, || {
                    built = true;
                    Count(limit)
                })
                .is_none()
        );
        assert!(!built, "a refused value is not built");
        assert_eq!(table.memos(), DigestTable::MAX_MEMOS);
    }

    #[test]
    fn digest_rows_keep_their_fields_on_the_lines_the_layout_names() {
        use std::mem::offset_of;
        assert_eq!(
            offset_of!(NodeDigest, nonzero_memory_bytes),
            56,
            "line 0 is full"
        );
        assert_eq!(offset_of!(NodeDigest, cpu), 64);
        assert_eq!(offset_of!(NodeDigest, agent_cpu_millis), 120);
        assert_eq!(offset_of!(NodeDigest, memory), 128);
        assert_eq!(offset_of!(NodeDigest, agent_memory_bytes), 184);
        assert_eq!(offset_of!(NodeDigest, allocatable_ephemeral_bytes), 192);
        assert_eq!(offset_of!(NodeDigest, memory_available_bytes), 248);
        assert_eq!(offset_of!(NodeDigest, nodefs_available_ratio), 256);
        assert_eq!(std::mem::size_of::<NodeDigest>(), 320, "five lines");
        assert_eq!(std::mem::size_of::<RowSource>(), 24);
        assert_eq!(std::mem::size_of::<RowKey>(), 24);
    }

    #[test]
    fn pods_with_affinity_stay_first_through_every_change() {
        let mut a = NodeAllocation::default();
        for (i, aff) in [false, true, false, true, true, false]
            .into_iter()
            .enumerate()
        {
            a.put_pod(pod(&i.to_string(), aff));
            check(&a);
        }
        for uid in ["3", "0", "1", "9", "5", "4", "2"] {
            a.remove_pod(uid);
            check(&a);
        }
        assert!(a.pods.is_empty());
        a.set_pods(vec![
            pod("a", false),
            pod("b", true),
            pod("c", false),
            pod("d", true),
        ]);
        check(&a);
        // Replacing a pod by UID changes its class.
        a.put_pod(pod("b", false));
        check(&a);
        assert_eq!(a.pods.len(), 4);
    }

    fn view(name: &str, pods: &[(&str, bool)]) -> NodeView {
        let mut alloc = NodeAllocation::default();
        for &(uid, affinity) in pods {
            alloc.put_pod(pod(uid, affinity));
        }
        NodeView {
            name: Arc::from(name),
            agent: None,
            kube: Some(Arc::new(KubeNode::default())),
            alloc: Arc::new(alloc),
            stale: false,
            report_age_seconds: None,
        }
    }

    /// The figures of a row that tell these tests' nodes apart.
    fn figures(row: &NodeDigest) -> (i64, u16) {
        (row.pod_count, row.pods_with_required_anti)
    }

    #[test]
    fn seeded_tables_copy_only_rows_that_still_match_and_let_the_seed_go() {
        let old = ClusterSnapshot::new(
            vec![view("a", &[("1", false)]), view("b", &[]), view("c", &[])],
            1,
        );
        let old_table = old.digests(60);
        // The next snapshot of the cluster: b gained a pod, the others are unchanged.
        let mut next = old.clone();
        next.generation = 2;
        let mut b = (*next.nodes[1].alloc).clone();
        b.put_pod(pod("2", true));
        next.nodes[1].alloc = Arc::new(b);
        next.seed_digests_from(&old);
        assert_eq!(Arc::strong_count(&old_table), 3, "held as a seed");
        let table = next.digests(60);
        for (i, (row, node)) in table.rows.iter().zip(&next.nodes).enumerate() {
            assert!(table.row_matches(i, node), "{}", node.name);
            assert_eq!(figures(row), figures(&NodeDigest::of(node, 60)));
        }
        assert_eq!(figures(&table.rows[1]), (1, 1));
        assert_eq!(
            Arc::strong_count(&old_table),
            2,
            "the seed is dropped once the table is built"
        );
    }

    #[test]
    fn set_alloc_patches_rows_nobody_else_holds() {
        let mut snap = ClusterSnapshot::new(vec![view("a", &[]), view("b", &[])], 1);
        drop(snap.digests(60));
        let mut a = (*snap.nodes[0].alloc).clone();
        a.put_pod(pod("1", true));
        snap.set_alloc(0, Arc::new(a));
        let table = snap.digests(60);
        assert!(table.row_matches(0, &snap.nodes[0]));
        assert_eq!(figures(&table.rows[0]), (1, 1));
        // Held: left as it was, and no longer matching the node.
        let mut b = (*snap.nodes[1].alloc).clone();
        b.put_pod(pod("2", false));
        snap.set_alloc(1, Arc::new(b));
        assert!(!table.row_matches(1, &snap.nodes[1]));
        assert_eq!(figures(&table.rows[1]), (0, 0));
        assert_eq!(snap.nodes[1].alloc.pods.len(), 1);
    }

    /// Rows found current once are known current until the nodes are edited: `set_alloc`
    /// keeps that for the tables it patches, `nodes_mut` and a held table's missed patch
    /// forget it, and another snapshot's table is always checked node by node.
    #[test]
    fn rows_found_current_stay_known_current_until_an_edit() {
        let mut snap =
            ClusterSnapshot::new(vec![view("a", &[]), view("b", &[]), view("c", &[])], 1);
        let mut buf = Vec::new();
        let table = snap.digests(60);
        assert!(snap.current_rows(&table, &mut buf).all());
        assert!(table.verified.load(Ordering::Acquire), "found current once");
        let known = snap.current_rows(&table, &mut buf);
        assert!(
            known.all() && known.get(2) && !known.get(3),
            "three rows, no more"
        );
        // Staleness flipped in place: the row of b no longer matches, and is read as such.
        snap.nodes_mut()[1].stale = true;
        assert!(!table.verified.load(Ordering::Acquire));
        let rows = snap.current_rows(&table, &mut buf);
        assert!(!rows.all() && rows.get(0) && !rows.get(1) && rows.get(2));
        drop(table);
        // A new generation: its table is checked, then a patched row keeps it known current.
        snap.generation = 2;
        let table = snap.digests(60);
        assert!(snap.current_rows(&table, &mut buf).all());
        drop(table);
        let mut a = (*snap.nodes()[0].alloc).clone();
        a.put_pod(pod("1", true));
        snap.set_alloc(0, Arc::new(a));
        let table = snap.digests(60);
        assert!(table.verified.load(Ordering::Acquire), "patched in place");
        assert!(snap.current_rows(&table, &mut buf).all());
        assert!(
            table.current_rows(snap.nodes(), &mut buf).all(),
            "as a full check finds"
        );
        // Held while another pod is assumed: its row is not patched, so not known current.
        let mut c = (*snap.nodes()[2].alloc).clone();
        c.put_pod(pod("2", false));
        snap.set_alloc(2, Arc::new(c));
        let rows = snap.current_rows(&table, &mut buf);
        assert!(!rows.all() && rows.get(0) && !rows.get(2));
        // A copy edited in place never takes its original's table for current.
        let original = ClusterSnapshot::new(vec![view("a", &[]), view("b", &[])], 1);
        let theirs = original.digests(60);
        assert!(original.current_rows(&theirs, &mut buf).all());
        let mut copy = original.clone();
        copy.nodes_mut()[0].stale = true;
        assert!(!copy.current_rows(&theirs, &mut buf).all());
        assert!(
            theirs.verified.load(Ordering::Acquire),
            "the copy's check leaves the original's table as it was"
        );
    }

    fn names(snap: &ClusterSnapshot) -> Vec<&str> {
        snap.nodes.iter().map(|n| &*n.name).collect()
    }

    /// A later snapshot with the same names keeps the order and shares the index without
    /// sorting; any other set of names (one added, one gone, one renamed, a name twice) is
    /// sorted and indexed afresh, exactly as `new` would.
    #[test]
    fn later_snapshots_keep_order_and_index_when_names_are_the_same() {
        let first = ClusterSnapshot::new(vec![view("c", &[]), view("a", &[]), view("b", &[])], 1);
        let first_table = first.digests(60);
        let same = ClusterSnapshot::new_after(
            vec![view("b", &[]), view("c", &[]), view("a", &[("1", false)])],
            2,
            &first,
        );
        assert_eq!(names(&same), ["a", "b", "c"]);
        assert!(Arc::ptr_eq(&same.index, &first.index), "index shared");
        assert_eq!(same.nodes[0].alloc.pods.len(), 1, "each node's own data");
        assert_eq!(
            Arc::strong_count(&first_table),
            3,
            "seeded from the earlier one"
        );
        for changed in [
            vec!["a", "b", "c", "d"],
            vec!["a", "b"],
            vec!["a", "b", "x"],
            vec!["a", "b", "b"],
        ] {
            let nodes = changed.iter().rev().map(|n| view(n, &[])).collect();
            let snap = ClusterSnapshot::new_after(nodes, 3, &first);
            let mut sorted = changed.clone();
            sorted.sort_unstable();
            assert_eq!(names(&snap), sorted);
            assert!(!Arc::ptr_eq(&snap.index, &first.index));
            for (i, node) in snap.nodes.iter().enumerate() {
                let at = snap.index.get(&node.name).copied();
                assert!(at == Some(i) || changed.len() == 3 && node.name.as_ref() == "b");
            }
            let table = snap.digests(60);
            for (i, node) in snap.nodes.iter().enumerate() {
                assert!(table.row_matches(i, node), "{}", node.name);
            }
        }
    }
}
