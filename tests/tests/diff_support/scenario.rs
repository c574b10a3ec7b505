//! What the differential test asks both schedulers about: a [`Scenario`] — nodes, bound
//! pods, one incoming pod, sometimes a node's history or PersistentVolumes and their claims —
//! as Kubernetes objects (JSON), the [`Feature`]s it exercises, the vocabulary the generator
//! draws from, and the annotations that tell the runner what to do beyond creating objects.
//! Pure data and helpers.
use std::collections::{BTreeMap, BTreeSet};

use serde_json::{Map, Value, json};

/// The scheduler name of the incoming pod: the dedicated kube-scheduler's only profile.
/// Loadstar's scheduler never touches it.
pub const SCHEDULER_NAME: &str = "diff-kube";
/// The hostname label: every node carries its own name there.
pub const HOSTNAME: &str = "kubernetes.io/hostname";
/// The GA zone label.
pub const ZONE: &str = "topology.kubernetes.io/zone";
/// The deprecated zone label, on some nodes only.
pub const OLD_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// Free-form node labels (present on some nodes only).
pub const DISK: &str = "disk";
/// See [`DISK`].
pub const TIER: &str = "tier";
/// An integer label for `Gt`/`Lt` node-affinity requirements.
pub const GEN: &str = "gen";
/// Taint keys nodes may carry; [`probe_tolerations`] tolerates exactly these.
pub const TAINT_KEYS: &[&str] = &["dedicated", "maintenance", "gpu"];
/// The taint key that lets a pod onto a cordoned node.
pub const UNSCHEDULABLE_TAINT: &str = "node.kubernetes.io/unschedulable";
/// An extended resource some nodes offer.
pub const DONGLE: &str = "example.com/dongle";
/// Annotation of an existing pod saying what the runner does right after creating it:
/// [`DELETE_GRACEFULLY`] or [`MARK_SUCCEEDED`] (a replay with `kubectl` must do the same);
/// on a claim, only [`DELETE_GRACEFULLY`] (a finalizer keeps it, Terminating).
pub const AFTER_CREATE: &str = "loadstar-diff/after-create";
/// Delete with the pod's grace period: it stays Terminating (there is no kubelet).
pub const DELETE_GRACEFULLY: &str = "delete-gracefully";
/// Set `status.phase: Succeeded`.
pub const MARK_SUCCEEDED: &str = "mark-succeeded";
/// Zones nodes are spread over (a scenario uses the first two or three).
pub const ZONES: &[&str] = &["zone-a", "zone-b", "zone-c"];
/// Values of the pods' `app` label.
pub const APPS: &[&str] = &["web", "db", "cache"];
/// Values of the pods' `team` label.
pub const TEAMS: &[&str] = &["x", "y"];
/// Taint effects.
pub const EFFECTS: &[&str] = &["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// Annotation of a [`Scenario::history`] pod.
pub const HISTORY: &str = "loadstar-diff/history";
/// The GA region label (no generated node has one; some volumes do).
pub const REGION: &str = "topology.kubernetes.io/region";
/// Annotation of a claim whose binding is complete: with `spec.volumeName`, what
/// kube-scheduler 1.20 calls "fully bound" (the PV controller is not running: nothing else
/// ever sets it).
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";

/// What a scenario exercises; a disagreement is counted under each feature its scenario has.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Feature {
    /// The incoming pod has required `podAffinity` terms.
    PodAffinity,
    /// The incoming pod has required `podAntiAffinity` terms.
    PodAntiAffinity,
    /// Some existing pod has required `podAntiAffinity` terms (checked symmetrically).
    ExistingAntiAffinity,
    /// The incoming pod has `DoNotSchedule` topology spread constraints.
    SpreadDoNotSchedule,
    /// The incoming pod has `ScheduleAnyway` constraints only (must not filter).
    SpreadScheduleAnyway,
    /// The incoming pod has a `nodeSelector`.
    NodeSelector,
    /// The incoming pod has required node affinity.
    NodeAffinity,
    /// The incoming pod has tolerations.
    Tolerations,
    /// Some node has a taint.
    Taints,
    /// Some node is cordoned.
    Unschedulable,
    /// Host ports on the incoming pod.
    HostPorts,
    /// Extended resources or ephemeral storage requested by the incoming pod.
    ScalarResources,
    /// The incoming pod requests CPU or memory but not both.
    PartialRequests,
    /// Some node carries more cpu, memory or ephemeral-storage requests than it has.
    Overcommitted,
    /// Some existing pod is being deleted (graceful deletion never completes: no kubelet).
    TerminatingPods,
    /// Some existing pod has finished (`status.phase: Succeeded`): it no longer counts.
    FinishedPods,
    /// A node's name was used by a node that was deleted before its pods.
    RecycledNode,
    /// The incoming pod has init containers.
    InitContainers,
    /// Some node has room for only a few pods.
    PodCount,
    /// Soft (preferred) affinities, which must not change the feasible set.
    Preferred,
    /// The scenario has PersistentVolumes and claims (whether or not the incoming pod
    /// mounts any).
    Volumes,
    /// The incoming pod mounts a bound claim whose volume has required node affinity.
    VolumeNodeAffinity,
    /// The incoming pod mounts a bound claim whose volume has zone or region labels.
    VolumeZones,
    /// The incoming pod mounts a claim that is unbound, bound to a missing volume, being
    /// deleted, or missing itself.
    UnboundClaims,
    /// Inline iSCSI/RBD disks on the incoming pod (GCE/EBS/iSCSI/RBD on existing pods).
    InlineDisks,
    /// A preemption scenario: pods of several priorities fill the nodes; both schedulers'
    /// nominated node and victims are compared.
    Preemption,
    /// Some existing pods are covered by PodDisruptionBudgets.
    DisruptionBudgets,
    /// The incoming pod has `preemptionPolicy: Never`.
    PreemptionNever,
    /// CSI or in-tree volumes against per-node attach limits.
    AttachLimits,
    /// CSINodes override nodes' CSI attach limits.
    CsiNodes,
    /// The incoming pod mounts `WaitForFirstConsumer` claims the scheduler binds.
    ClaimsToBind,
    /// Services and controllers select the incoming pod, which has no spread constraints
    /// of its own: the profiles' default constraints apply.
    DefaultSpread,
}

impl Feature {
    /// Every feature, in display order.
    pub const ALL: &[Feature] = &[
        Feature::PodAffinity,
        Feature::PodAntiAffinity,
        Feature::ExistingAntiAffinity,
        Feature::SpreadDoNotSchedule,
        Feature::SpreadScheduleAnyway,
        Feature::NodeSelector,
        Feature::NodeAffinity,
        Feature::Tolerations,
        Feature::Taints,
        Feature::Unschedulable,
        Feature::HostPorts,
        Feature::ScalarResources,
        Feature::PartialRequests,
        Feature::Overcommitted,
        Feature::TerminatingPods,
        Feature::FinishedPods,
        Feature::RecycledNode,
        Feature::InitContainers,
        Feature::PodCount,
        Feature::Preferred,
        Feature::Volumes,
        Feature::VolumeNodeAffinity,
        Feature::VolumeZones,
        Feature::UnboundClaims,
        Feature::InlineDisks,
        Feature::Preemption,
        Feature::DisruptionBudgets,
        Feature::PreemptionNever,
        Feature::AttachLimits,
        Feature::CsiNodes,
        Feature::ClaimsToBind,
        Feature::DefaultSpread,
    ];

    /// A short name, with the kube-scheduler plugin it exercises.
    pub fn name(self) -> &'static str {
        match self {
            Feature::PodAffinity => "InterPodAffinity: incoming required podAffinity",
            Feature::PodAntiAffinity => "InterPodAffinity: incoming required podAntiAffinity",
            Feature::ExistingAntiAffinity => "InterPodAffinity: existing pods' podAntiAffinity",
            Feature::SpreadDoNotSchedule => "PodTopologySpread: DoNotSchedule",
            Feature::SpreadScheduleAnyway => "PodTopologySpread: ScheduleAnyway only",
            Feature::NodeSelector => "NodeAffinity: nodeSelector",
            Feature::NodeAffinity => "NodeAffinity: required terms",
            Feature::Tolerations => "TaintToleration: tolerations",
            Feature::Taints => "TaintToleration: tainted nodes",
            Feature::Unschedulable => "NodeUnschedulable: cordoned nodes",
            Feature::HostPorts => "NodePorts: host ports",
            Feature::ScalarResources => "NodeResourcesFit: extended/ephemeral",
            Feature::PartialRequests => "NodeResourcesFit: cpu or memory only",
            Feature::Overcommitted => "NodeResourcesFit: overcommitted node",
            Feature::TerminatingPods => "existing pods being deleted",
            Feature::FinishedPods => "existing pods finished (Succeeded)",
            Feature::RecycledNode => "node name reused after node-then-pods deletion",
            Feature::InitContainers => "NodeResourcesFit: init containers",
            Feature::PodCount => "NodeResourcesFit: pod count",
            Feature::Preferred => "preferred (soft) affinities",
            Feature::Volumes => "PersistentVolumes and claims in the scenario",
            Feature::VolumeNodeAffinity => "VolumeBinding: bound volume's node affinity",
            Feature::VolumeZones => "VolumeZone: zone/region-labelled bound volume",
            Feature::UnboundClaims => "VolumeBinding: unbound/deleted/missing claim or PV",
            Feature::InlineDisks => "VolumeRestrictions: inline disks",
            Feature::Preemption => "DefaultPreemption: nominated node and victims",
            Feature::DisruptionBudgets => "DefaultPreemption: PodDisruptionBudgets",
            Feature::PreemptionNever => "DefaultPreemption: preemptionPolicy Never",
            Feature::AttachLimits => "NodeVolumeLimits/EBSLimits/GCEPDLimits: attach limits",
            Feature::CsiNodes => "NodeVolumeLimits: CSINode limits",
            Feature::ClaimsToBind => "VolumeBinding: WaitForFirstConsumer claims to bind",
            Feature::DefaultSpread => "PodTopologySpread: defaultConstraints",
        }
    }

    /// Features of kube-scheduler filters Loadstar does not implement yet (issue #13).
    pub fn needs_inter_pod_filters(self) -> bool {
        matches!(
            self,
            Feature::PodAffinity
                | Feature::PodAntiAffinity
                | Feature::ExistingAntiAffinity
                | Feature::SpreadDoNotSchedule
        )
    }
}

/// One scheduling question.
#[derive(Debug, Clone, PartialEq)]
pub struct Scenario {
    /// The run's seed.
    pub seed: u64,
    /// The scenario's index under that seed.
    pub index: usize,
    /// Namespaces: the incoming pod's first, then a second one some pods live in.
    pub namespaces: Vec<String>,
    /// Node objects (status included: allocatable and a Ready condition).
    pub nodes: Vec<Value>,
    /// Pods bound at creation (`spec.nodeName`), each with `metadata.namespace`.
    pub pods: Vec<Value>,
    /// The pod both schedulers are asked about (namespace: `namespaces[0]`).
    pub incoming: Value,
    /// Pods of a previous incarnation of one node (same name, annotated [`HISTORY`]): the
    /// runner creates that node and these pods first, deletes the node, then the pods (the
    /// order of a real cluster, where the pod garbage collector removes the pods of a
    /// deleted node afterwards), and only then creates the scenario. Usually empty.
    pub history: Vec<Value>,
    /// PersistentVolumes (cluster-scoped; named after the prefix). Usually empty.
    pub volumes: Vec<Value>,
    /// PersistentVolumeClaims, each with `metadata.namespace`: most pre-bound to one of
    /// [`Scenario::volumes`] (as the PV controller would leave them), some not. Usually
    /// empty.
    pub claims: Vec<Value>,
    /// PodDisruptionBudgets (`policy/v1beta1`, each with `metadata.namespace`), created
    /// first, their `status` then written as the disruption controller would (it does not
    /// run here). Only in preemption scenarios.
    pub budgets: Vec<Value>,
    /// PriorityClass name → (value, `preemptionPolicy`), of the classes the scenario's pods
    /// name (the runner creates them once; admission copies both into each pod's spec).
    pub priority_classes: BTreeMap<String, (i32, String)>,
    /// StorageClasses (cluster-scoped; named after the prefix), created first. Usually
    /// empty.
    pub classes: Vec<Value>,
    /// CSINodes, one per node when there are any (see `generator::attach`). Usually empty.
    pub csinodes: Vec<Value>,
    /// Services and controllers (with `apiVersion` and `kind`) in the incoming pod's
    /// namespace whose selectors make its default spreading selector. Usually empty.
    pub selectors: Vec<Value>,
    /// What it exercises.
    pub features: BTreeSet<Feature>,
}

impl Scenario {
    /// The node names, in creation order.
    pub fn node_names(&self) -> Vec<String> {
        self.nodes
            .iter()
            .map(|n| str_at(n, "/metadata/name"))
            .collect()
    }

    /// Nodes with room for one more pod by count (allocatable `pods` > bound pods that have
    /// not finished): the feasible set of a probe pod that requests nothing and tolerates
    /// every generated taint.
    pub fn nodes_with_a_free_pod_slot(&self) -> BTreeSet<String> {
        let mut bound: BTreeMap<String, i64> = BTreeMap::new();
        for p in &self.pods {
            if after_create(p) != Some(MARK_SUCCEEDED) {
                *bound.entry(str_at(p, "/spec/nodeName")).or_default() += 1;
            }
        }
        self.nodes
            .iter()
            .filter_map(|n| {
                let name = str_at(n, "/metadata/name");
                let cap: i64 = str_at(n, "/status/allocatable/pods").parse().unwrap_or(0);
                (bound.get(&name).copied().unwrap_or(0) < cap).then_some(name)
            })
            .collect()
    }

    /// Whether both schedulers' preemption is compared.
    pub fn is_preemption(&self) -> bool {
        self.features.contains(&Feature::Preemption)
    }

    /// Whether the scenario has volumes or claims.
    pub fn has_storage(&self) -> bool {
        !self.volumes.is_empty() || !self.claims.is_empty()
    }

    /// Whether the probe must mount a volume of the probe's CSI driver (the scenario has
    /// CSINodes: see `generator::attach`).
    pub fn probe_needs_csi(&self) -> bool {
        !self.csinodes.is_empty()
    }

    /// Whether the scenario uses a filter Loadstar does not implement yet.
    pub fn needs_inter_pod_filters(&self) -> bool {
        self.features.iter().any(|f| f.needs_inter_pod_filters())
    }

    /// All objects as a multi-document YAML stream (`kubectl apply -f` can replay it).
    pub fn to_yaml(&self) -> String {
        let mut docs: Vec<Value> = self
            .namespaces
            .iter()
            .map(|n| json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": n}}))
            .collect();
        for p in &self.history {
            docs.push(with_kind(p, "Pod"));
        }
        for n in &self.nodes {
            docs.push(with_kind(n, "Node"));
        }
        for c in &self.classes {
            docs.push(with_api(c, "storage.k8s.io/v1", "StorageClass"));
        }
        for c in &self.csinodes {
            docs.push(with_api(c, "storage.k8s.io/v1", "CSINode"));
        }
        docs.extend(self.selectors.iter().cloned());
        for v in &self.volumes {
            docs.push(with_kind(v, "PersistentVolume"));
        }
        for c in &self.claims {
            docs.push(with_kind(c, "PersistentVolumeClaim"));
        }
        for (name, value) in &self.priority_classes {
            docs.push(
                json!({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                             "metadata": {"name": name}, "value": value}),
            );
        }
        for b in &self.budgets {
            docs.push(b.clone());
        }
        for p in self.pods.iter().chain(std::iter::once(&self.incoming)) {
            docs.push(with_kind(p, "Pod"));
        }
        docs.iter()
            .map(|d| {
                format!(
                    "---\n{}",
                    serde_norway::to_string(d).unwrap_or_else(|e| format!("# unprintable: {e}\n"))
                )
            })
            .collect()
    }
}

fn with_kind(v: &Value, kind: &str) -> Value {
    with_api(v, "v1", kind)
}

fn with_api(v: &Value, api_version: &str, kind: &str) -> Value {
    let mut out = Map::new();
    out.insert("apiVersion".into(), json!(api_version));
    out.insert("kind".into(), json!(kind));
    if let Some(m) = v.as_object() {
        out.extend(m.clone());
    }
    Value::Object(out)
}

/// The claims a pod mounts, in `spec.volumes` order.
pub fn claim_names(pod: &Value) -> Vec<String> {
    pod.pointer("/spec/volumes")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
        .map(|v| str_at(v, "/persistentVolumeClaim/claimName"))
        .filter(|c| !c.is_empty())
        .collect()
}

/// What the runner does to this existing pod or claim right after creating it
/// ([`AFTER_CREATE`]).
pub fn after_create(pod: &Value) -> Option<&str> {
    pod.pointer("/metadata/annotations")
        .and_then(|a| a.get(AFTER_CREATE))
        .and_then(Value::as_str)
}

/// The string at a JSON pointer, or "" when absent.
pub fn str_at(v: &Value, pointer: &str) -> String {
    v.pointer(pointer)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_string()
}

/// Tolerations for every taint the generator puts on nodes, and for cordoned nodes — but
/// not for `not-ready`, so a probe that passes Loadstar's `NodeReady` proves the scorer has
/// seen the node's Ready condition.
pub fn probe_tolerations() -> Value {
    let mut t: Vec<Value> = TAINT_KEYS
        .iter()
        .map(|k| json!({"key": k, "operator": "Exists"}))
        .collect();
    t.push(json!({"key": UNSCHEDULABLE_TAINT, "operator": "Exists"}));
    Value::Array(t)
}
