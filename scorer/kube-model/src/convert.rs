//! Pure conversions from Kubernetes objects to what the scorer schedules with: a `Pod` into
//! [`PodInfo`] (effective requests as kube-scheduler computes them) plus the facts the queue
//! needs, and a `Node` into [`KubeNode`]. Only these conversions are kept, never the watched
//! objects themselves. No I/O: everything here is unit-tested without a cluster.
use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{Node, Pod, PodSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use loadstar_common::model::{ResourceList, ResourceListError};
use thiserror::Error;

use crate::constraints::{self, ConstraintError};
use crate::requests::{self, RequestsError, Resources};
use loadstar_common::text::truncate;
use loadstar_store::cluster::{ClusterError, PodDecoder};

use loadstar_framework::snapshot::{
    HostPort, KubeNode, NodeImages, Owner, PodInfo, Taint, TaintEffect, Toleration,
};

/// The object's name, or its `generateName` when it has none (what kube's
/// `ResourceExt::name_any` returns; this crate does not depend on the client).
fn name_any(meta: &ObjectMeta) -> String {
    meta.name
        .clone()
        .or_else(|| meta.generate_name.clone())
        .unwrap_or_default()
}

/// The scheduler name of pods that do not name one.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";

pub use crate::constraints::FIELD_NODE_NAME;

/// Errors converting a Kubernetes object.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum ConvertError {
    /// The pod's requests or limits cannot be read (a malformed quantity).
    #[error(transparent)]
    Resources(#[from] RequestsError),
    /// A toleration is invalid.
    #[error("pod {pod}: spec.tolerations[{index}]: {reason}")]
    Toleration {
        /// namespace/name.
        pod: String,
        /// Index.
        index: usize,
        /// Why.
        reason: String,
    },
    /// A placement constraint (affinity, selector, spread) is invalid.
    #[error("pod {pod}: {source}")]
    Constraint {
        /// namespace/name.
        pod: String,
        /// Where and why.
        #[source]
        source: ConstraintError,
    },
    /// A node's allocatable did not parse.
    #[error("node {node}: status.allocatable: {source}")]
    NodeAllocatable {
        /// Node name.
        node: String,
        /// The parse error.
        #[source]
        source: ResourceListError,
    },
}

/// What the scheduler needs to know about a pod besides its [`PodInfo`].
#[derive(Debug, Clone)]
pub struct PodFacts {
    /// metadata.uid.
    pub uid: String,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// spec.schedulerName (upstream's default when empty).
    pub scheduler_name: String,
    /// spec.nodeName, when bound.
    pub node_name: Option<String>,
    /// Phase is Succeeded or Failed: the pod no longer uses its node.
    pub terminal: bool,
    /// metadata.deletionTimestamp is set.
    pub deleting: bool,
    /// status.phase is Running.
    pub running: bool,
    /// metadata.creationTimestamp, Unix seconds (0 when absent).
    pub created_unix: i64,
    /// spec.priority.
    pub priority: i32,
    /// status.startTime, Unix seconds (preemption prefers evicting the youngest).
    pub start_time: Option<i64>,
    /// status.nominatedNodeName.
    pub nominated_node: Option<String>,
    /// The names in spec.schedulingGates: while any is left the pod is not scheduled.
    pub scheduling_gates: Vec<String>,
    /// The scheduling view, or why the pod cannot be scheduled as written.
    pub info: Result<PodInfo, ConvertError>,
}

impl PodFacts {
    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

/// Converts a pod. Never fails as a whole: a pod whose spec cannot be scheduled as written
/// (a malformed quantity, an unknown operator) carries the error in [`PodFacts::info`].
pub fn pod_facts(pod: &Pod) -> PodFacts {
    let namespace = pod
        .metadata
        .namespace
        .clone()
        .unwrap_or_else(|| "default".to_string());
    let name = name_any(&pod.metadata);
    let spec = pod.spec.as_ref();
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    let priority = spec.and_then(|s| s.priority).unwrap_or(0);
    let facts = PodFacts {
        uid: pod.metadata.uid.clone().unwrap_or_default(),
        scheduler_name: spec
            .and_then(|s| s.scheduler_name.clone())
            .filter(|s| !s.is_empty())
            .unwrap_or_else(|| DEFAULT_SCHEDULER_NAME.to_string()),
        node_name: spec
            .and_then(|s| s.node_name.clone())
            .filter(|s| !s.is_empty()),
        terminal: matches!(phase, Some("Succeeded") | Some("Failed")),
        deleting: pod.metadata.deletion_timestamp.is_some(),
        running: phase == Some("Running"),
        created_unix: pod
            .metadata
            .creation_timestamp
            .as_ref()
            .map(|t| t.0.as_second())
            .unwrap_or(0),
        priority,
        start_time: pod
            .status
            .as_ref()
            .and_then(|s| s.start_time.as_ref())
            .map(|t| t.0.as_second()),
        nominated_node: pod
            .status
            .as_ref()
            .and_then(|s| s.nominated_node_name.clone())
            .filter(|n| !n.is_empty()),
        scheduling_gates: spec
            .and_then(|s| s.scheduling_gates.as_ref())
            .map(|g| g.iter().map(|g| g.name.clone()).collect())
            .unwrap_or_default(),
        info: Ok(PodInfo::default()),
        namespace,
        name,
    };
    let info = pod_info(pod, &facts);
    PodFacts { info, ..facts }
}

fn pod_info(pod: &Pod, facts: &PodFacts) -> Result<PodInfo, ConvertError> {
    let key = facts.key();
    let Some(spec) = pod.spec.as_ref() else {
        return Ok(PodInfo {
            uid: facts.uid.clone(),
            namespace: facts.namespace.clone(),
            name: facts.name.clone(),
            priority: facts.priority,
            nominated_node: facts.nominated_node.clone(),
            ..Default::default()
        });
    };
    let Resources {
        requests,
        limits,
        nonzero_cpu: nz_cpu,
        nonzero_mem: nz_mem,
    } = requests::pod_resources(&key, spec, pod.status.as_ref())?;

    let mut tolerations = Vec::new();
    for (index, t) in spec.tolerations.iter().flatten().enumerate() {
        let err = |reason: String| ConvertError::Toleration {
            pod: key.clone(),
            index,
            reason,
        };
        let exists = match t.operator.as_deref() {
            None | Some("") | Some("Equal") => false,
            Some("Exists") => true,
            Some(other) => return Err(err(format!("unknown operator {other:?}"))),
        };
        let effect = match t.effect.as_deref() {
            None | Some("") => None,
            Some(e) => {
                Some(TaintEffect::parse(e).ok_or_else(|| err(format!("unknown effect {e:?}")))?)
            }
        };
        let key_s = t.key.clone().unwrap_or_default();
        if key_s.is_empty() && !exists {
            return Err(err("an empty key needs operator Exists".into()));
        }
        tolerations.push(Toleration {
            key: key_s,
            exists,
            value: t.value.clone().unwrap_or_default(),
            effect,
        });
    }

    let constraint = |source: ConstraintError| ConvertError::Constraint {
        pod: key.clone(),
        source,
    };
    let (required_affinity, preferred_node_affinity) =
        constraints::node_affinity(spec).map_err(constraint)?;
    let unsupported = constraints::refused_fields(pod);
    let no_labels = BTreeMap::new();
    let labels = pod.metadata.labels.as_ref().unwrap_or(&no_labels);
    let incoming = constraints::IncomingPod {
        namespace: &facts.namespace,
        labels,
    };
    let pod_affinity = constraints::pod_affinity(spec, incoming).map_err(constraint)?;
    let spread_constraints = constraints::spread_constraints(spec, labels).map_err(constraint)?;

    let mut host_ports = Vec::new();
    // The API server defaults hostPort to containerPort under hostNetwork; a manifest sent
    // as `pod_json` has not been through it.
    let host_network = spec.host_network == Some(true);
    // Native sidecars' ports are held while the pod runs, and upstream's NodePorts counts
    // them (1.34, and 1.33's patch releases: kubernetes#132040); ordinary init containers'
    // ports are not.
    let sidecars = spec
        .init_containers
        .iter()
        .flatten()
        .filter(|c| requests::is_sidecar(c));
    for c in spec.containers.iter().chain(sidecars) {
        for p in c.ports.iter().flatten() {
            let hp = p
                .host_port
                .filter(|p| *p > 0)
                .or_else(|| host_network.then_some(p.container_port));
            if let Some(hp) = hp.filter(|p| *p > 0) {
                host_ports.push(HostPort {
                    protocol: p.protocol.clone().unwrap_or_else(|| "TCP".into()),
                    host_ip: p.host_ip.clone().unwrap_or_default(),
                    port: u16::try_from(hp).unwrap_or(0),
                });
            }
        }
    }

    let owner = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .map(|o| Owner {
            kind: o.kind.clone(),
            name: o.name.clone(),
        });

    Ok(PodInfo {
        uid: facts.uid.clone(),
        namespace: facts.namespace.clone(),
        name: facts.name.clone(),
        labels: pod.metadata.labels.clone().unwrap_or_default(),
        owner,
        requests,
        limits,
        nonzero_cpu_millis: nz_cpu,
        nonzero_memory_bytes: nz_mem,
        node_selector: spec.node_selector.clone().unwrap_or_default(),
        required_affinity,
        preferred_node_affinity,
        pod_affinity,
        spread_constraints,
        unsupported,
        preemption_never: spec.preemption_policy.as_deref() == Some("Never"),
        claims: constraints::claims(pod),
        volumes: None,
        tolerations,
        host_ports,
        priority: facts.priority,
        nominated_node: facts.nominated_node.clone(),
        disks: constraints::inline_disks(spec),
        attachable: crate::attach::inline(spec),
        default_spread_selector: None,
        images: pod_images(spec),
    })
}

/// The images a pod pulls, in the order `ImageLocality` reads them: init containers
/// (sidecars included), containers, then `image` volumes. A container without an image
/// (the API server rejects one; a `pod_json` may lack it) pulls nothing.
fn pod_images(spec: &PodSpec) -> Vec<String> {
    let containers = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers);
    let volumes = spec
        .volumes
        .iter()
        .flatten()
        .filter_map(|v| v.image.as_ref()?.reference.clone());
    containers
        .filter_map(|c| c.image.clone())
        .chain(volumes)
        .collect()
}

/// Reads whole core/v1 Pods (JSON) for the gRPC `Score` call's `pod_json`, through the
/// same conversion as cluster pods, so an outside scheduler's question is answered exactly
/// as ours would be.
#[derive(Debug, Clone, Copy, Default)]
pub struct JsonPodDecoder;

impl PodDecoder for JsonPodDecoder {
    fn decode(&self, json: &str) -> Result<PodInfo, ClusterError> {
        let pod: Pod = serde_json::from_str(json).map_err(|e| {
            ClusterError::Invalid(format!(
                "pod_json is not a core/v1 Pod: {}",
                truncate(&e.to_string(), 256)
            ))
        })?;
        pod_facts(&pod)
            .info
            .map_err(|e| ClusterError::Invalid(truncate(&e.to_string(), 1024)))
    }
}

/// Converts a node: allocatable (capacity when absent), labels, taints, cordon, and the
/// Ready condition.
pub fn kube_node(node: &Node) -> Result<KubeNode, ConvertError> {
    let name = name_any(&node.metadata);
    let status = node.status.as_ref();
    let alloc = status
        .and_then(|s| s.allocatable.as_ref())
        .or_else(|| status.and_then(|s| s.capacity.as_ref()));
    let allocatable = match alloc {
        Some(m) => ResourceList::from_quantities(m.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
            .map_err(|source| ConvertError::NodeAllocatable {
                node: name.clone(),
                source,
            })?,
        None => ResourceList::default(),
    };
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let spec = node.spec.as_ref();
    let taints = spec
        .and_then(|s| s.taints.as_ref())
        .into_iter()
        .flatten()
        .filter_map(|t| {
            Some(Taint {
                key: t.key.clone(),
                value: t.value.clone().unwrap_or_default(),
                // An unknown effect cannot be honoured; upstream's API validation rejects it.
                effect: TaintEffect::parse(&t.effect)?,
            })
        })
        .collect();
    let ready = status
        .and_then(|s| s.conditions.as_ref())
        .into_iter()
        .flatten()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    // Every name of every image, at the image's size (a negative size, which no kubelet
    // reports, counts as none).
    let images = NodeImages::new(
        status
            .and_then(|s| s.images.as_ref())
            .into_iter()
            .flatten()
            .flat_map(|i| {
                let size = i.size_bytes.unwrap_or(0).max(0);
                i.names
                    .iter()
                    .flatten()
                    .map(move |n| (Arc::<str>::from(n.as_str()), size))
            }),
    );
    Ok(KubeNode {
        volume_limits: crate::attach::allocatable_limits(&allocatable),
        allocatable,
        labels,
        taints,
        unschedulable: spec.and_then(|s| s.unschedulable).unwrap_or(false),
        ready,
        images,
    })
}

/// Whether two conversions of a node differ in anything the filters read (to retry
/// unschedulable pods only on relevant changes). Images are scored, never filtered on: see
/// [`images_changed`].
pub fn node_changed(a: &KubeNode, b: &KubeNode) -> bool {
    a.allocatable != b.allocatable
        || a.labels != b.labels
        || a.taints != b.taints
        || a.unschedulable != b.unschedulable
        || a.ready != b.ready
        || a.volume_limits != b.volume_limits
}

/// Whether two conversions of a node list different images.
pub fn images_changed(a: &KubeNode, b: &KubeNode) -> bool {
    a.images != b.images
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{DEFAULT_NONZERO_CPU_MILLIS, DEFAULT_NONZERO_MEMORY_BYTES};
    use serde_json::json;

    fn pod(v: serde_json::Value) -> Pod {
        serde_json::from_value(v).expect("valid pod json")
    }

    #[test]
    fn effective_requests_follow_upstream() {
        let p = pod(json!({
            "metadata": {"name": "web", "namespace": "ns", "uid": "u1",
                         "creationTimestamp": "2024-01-01T00:00:10Z",
                         "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                            "name": "web-1", "uid": "o", "controller": true}]},
            "spec": {
                "schedulerName": "loadstar",
                "priority": 7,
                "containers": [
                    {"name": "a", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}},
                     "ports": [{"containerPort": 80, "hostPort": 8080}]},
                    {"name": "b", "resources": {"limits": {"cpu": "1", "nvidia.com/gpu": "1"}}},
                    {"name": "c"}
                ],
                "initContainers": [
                    {"name": "init", "resources": {"requests": {"cpu": "2", "memory": "100Mi"}}}
                ],
                "overhead": {"cpu": "100m", "memory": "10Mi"}
            }
        }));
        let f = pod_facts(&p);
        assert_eq!(f.key(), "ns/web");
        assert_eq!(f.scheduler_name, "loadstar");
        assert_eq!(f.priority, 7);
        assert_eq!(f.created_unix, 1_704_067_210);
        let info = f.info.expect("valid");
        // containers: 500m + 1000m (limit defaults request) + 0 = 1500m; init 2000m wins.
        assert_eq!(info.requests.cpu_millis, 2000 + 100);
        assert_eq!(info.requests.memory_bytes, (1 << 30) + 10 * (1 << 20));
        assert_eq!(info.requests.gpus, 1);
        // non-zero: 500 + 1000 + 100 (default) = 1600 vs init 2000 → 2000, + overhead.
        assert_eq!(info.nonzero_cpu_millis, 2100);
        // memory: 1Gi + 200Mi (b) + 200Mi (c) vs 100Mi → sum, + overhead.
        assert_eq!(
            info.nonzero_memory_bytes,
            (1 << 30) + 2 * DEFAULT_NONZERO_MEMORY_BYTES + 10 * (1 << 20)
        );
        assert_eq!(info.host_ports.len(), 1);
        assert_eq!(info.host_ports[0].port, 8080);
        assert_eq!(info.host_ports[0].protocol, "TCP");
        assert_eq!(
            info.owner,
            Some(Owner {
                kind: "ReplicaSet".into(),
                name: "web-1".into()
            })
        );
    }

    #[test]
    fn sidecars_count_their_requests_and_host_ports_ordinary_init_containers_only_requests() {
        let f = pod_facts(&pod(json!({
            "metadata": {"name": "mesh", "namespace": "ns"},
            "spec": {
                "hostNetwork": true,
                "containers": [{"name": "app", "resources": {"requests": {"cpu": "1"}},
                                "ports": [{"containerPort": 8080}]}],
                "initContainers": [
                    {"name": "setup", "resources": {"requests": {"cpu": "1"}},
                     "ports": [{"containerPort": 9000}]},
                    {"name": "proxy", "restartPolicy": "Always",
                     "resources": {"requests": {"cpu": "2"}},
                     "ports": [{"containerPort": 15001, "protocol": "UDP"}]}
                ],
                "resources": {"requests": {"memory": "1Gi"}}
            }
        })));
        let info = f.info.expect("valid");
        // app 1 + proxy 2 running; setup ran alone before: 3 CPUs, not 1.20's max(1, 1, 2).
        assert_eq!(info.requests.cpu_millis, 3000);
        assert_eq!(info.requests.memory_bytes, 1 << 30);
        assert!(info.unsupported.is_empty(), "{:?}", info.unsupported);
        let ports: Vec<(u16, &str)> = info
            .host_ports
            .iter()
            .map(|p| (p.port, p.protocol.as_str()))
            .collect();
        assert_eq!(ports, [(8080, "TCP"), (15001, "UDP")]);
    }

    #[test]
    fn pods_without_requests_get_nonzero_defaults_and_default_scheduler() {
        let f = pod_facts(&pod(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "a"}, {"name": "b"}], "nodeName": "n1"},
            "status": {"phase": "Succeeded"}
        })));
        assert_eq!(f.scheduler_name, DEFAULT_SCHEDULER_NAME);
        assert_eq!(f.namespace, "default");
        assert_eq!(f.node_name.as_deref(), Some("n1"));
        assert!(f.terminal);
        assert!(f.scheduling_gates.is_empty());
        let info = f.info.expect("valid");
        assert_eq!(info.requests, ResourceList::default());
        assert_eq!(info.nonzero_cpu_millis, 2 * DEFAULT_NONZERO_CPU_MILLIS);
        assert_eq!(info.nonzero_memory_bytes, 2 * DEFAULT_NONZERO_MEMORY_BYTES);
    }

    #[test]
    fn tolerations_selectors_and_affinity_convert() {
        let f = pod_facts(&pod(json!({
            "metadata": {"name": "p", "namespace": "x"},
            "spec": {
                "containers": [{"name": "a"}],
                "schedulingGates": [{"name": "example.com/quota"}, {"name": "b"}],
                "nodeSelector": {"disk": "ssd"},
                "tolerations": [
                    {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
                    {"key": "team", "value": "a"},
                    {"operator": "Exists"}
                ],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [
                            {"key": "zone", "operator": "In", "values": ["a", "b"]},
                            {"key": "cores", "operator": "Gt", "values": ["8"]}
                        ]},
                        {"matchFields": [
                            {"key": "metadata.name", "operator": "In", "values": ["n1"]}
                        ]}
                    ]}}}
            }
        })));
        assert_eq!(f.scheduling_gates, ["example.com/quota", "b"]);
        let info = f.info.expect("valid");
        assert_eq!(info.node_selector["disk"], "ssd");
        assert_eq!(info.tolerations.len(), 3);
        assert!(info.tolerations[0].exists);
        assert_eq!(info.tolerations[0].effect, Some(TaintEffect::NoSchedule));
        assert_eq!(info.tolerations[1].value, "a");
        assert!(info.tolerations[2].key.is_empty() && info.tolerations[2].exists);
        assert_eq!(info.required_affinity.len(), 2);
        assert_eq!(
            info.required_affinity[0].expressions[1].op,
            loadstar_framework::snapshot::SelectorOp::Gt
        );
        assert!(info.required_affinity[1].expressions.is_empty());
        assert_eq!(info.required_affinity[1].fields[0].key, FIELD_NODE_NAME);
        assert!(info.required_affinity[1].matches("n1", &BTreeMap::new()));
        assert!(info.unsupported.is_empty());
    }

    #[test]
    fn bad_pods_carry_errors_with_their_path() {
        let f = pod_facts(&pod(json!({
            "metadata": {"name": "bad", "namespace": "ns"},
            "spec": {"containers": [{"name": "a", "resources": {"requests": {"memory": "1GB"}}}]}
        })));
        let e = f.info.expect_err("bad quantity");
        assert_eq!(
            e.to_string(),
            "pod ns/bad: spec.containers[a].resources.requests: resource \"memory\": invalid \
             quantity \"1GB\": unknown suffix"
        );
        let f = pod_facts(&pod(json!({
            "metadata": {"name": "bad", "namespace": "ns"},
            "spec": {"containers": [{"name": "a"}],
                "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "k", "operator": "Gt", "values": ["x"]}]}]}}}}
        })));
        let e = f.info.expect_err("Gt needs an integer");
        assert!(matches!(e, ConvertError::Constraint { .. }));
        assert!(
            e.to_string().starts_with(
                "pod ns/bad: spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring\
                 Execution.nodeSelectorTerms[0].matchExpressions[0]: operator Gt"
            ),
            "{e}"
        );
        // A pod without a spec does not panic.
        assert!(
            pod_facts(&pod(json!({"metadata": {"name": "empty"}})))
                .info
                .is_ok()
        );
    }

    #[test]
    fn nodes_convert_with_readiness_taints_and_their_own_labels() {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1", "labels": {"zone": "a"}},
            "spec": {"unschedulable": true, "taints": [
                {"key": "gpu", "value": "yes", "effect": "NoSchedule"},
                {"key": "odd", "effect": "Bogus"}
            ]},
            "status": {
                "capacity": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                "allocatable": {"cpu": "7500m", "memory": "30Gi", "pods": "110",
                                "nvidia.com/gpu": "2"},
                "conditions": [{"type": "Ready", "status": "True"}]
            }
        }))
        .expect("node json");
        let k = kube_node(&n).expect("valid");
        assert_eq!(k.allocatable.cpu_millis, 7500);
        assert_eq!(k.allocatable.pods, 110);
        assert_eq!(k.allocatable.gpus, 2);
        assert!(k.ready && k.unschedulable);
        assert_eq!(k.taints.len(), 1);
        assert_eq!(
            k.labels.len(),
            1,
            "no pseudo-label for the name: {:?}",
            k.labels
        );
        let mut other = k.clone();
        assert!(!node_changed(&k, &other));
        other.ready = false;
        assert!(node_changed(&k, &other));

        let bad: Node = serde_json::from_value(json!({
            "metadata": {"name": "n2"},
            "status": {"allocatable": {"cpu": "lots"}}
        }))
        .expect("node json");
        assert!(matches!(
            kube_node(&bad),
            Err(ConvertError::NodeAllocatable { .. })
        ));
    }

    #[test]
    fn nodes_list_every_name_of_their_images_and_pods_every_image_they_pull() {
        let n: Node = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "status": {"images": [
                {"names": ["registry.k8s.io/pause@sha256:ab", "registry.k8s.io/pause:3.9"],
                 "sizeBytes": 300000},
                {"names": ["app:v1"], "sizeBytes": 900000000},
                {"names": ["odd:v1"], "sizeBytes": -5},
                {"sizeBytes": 7}
            ]}
        }))
        .expect("node json");
        let k = kube_node(&n).expect("valid");
        assert_eq!(k.images.entries().len(), 4);
        assert_eq!(k.images.size("registry.k8s.io/pause:3.9"), Some(300_000));
        assert_eq!(
            k.images.size("registry.k8s.io/pause@sha256:ab"),
            Some(300_000)
        );
        assert_eq!(k.images.size("app:v1"), Some(900_000_000));
        assert_eq!(
            k.images.size("odd:v1"),
            Some(0),
            "a negative size counts as none"
        );
        // A change of images alone is not a change the filters read.
        let mut other = k.clone();
        other.images = NodeImages::default();
        assert!(!node_changed(&k, &other) && images_changed(&k, &other));

        let p = pod(json!({
            "metadata": {"name": "p", "namespace": "ns"},
            "spec": {
                "initContainers": [{"name": "sidecar", "image": "proxy:1", "restartPolicy": "Always"},
                                   {"name": "init", "image": "setup"}],
                "containers": [{"name": "a", "image": "app:v1"}, {"name": "b"}],
                "volumes": [{"name": "model", "image": {"reference": "weights:7"}},
                            {"name": "tmp", "emptyDir": {}}]
            }
        }));
        let info = pod_facts(&p).info.expect("valid");
        assert_eq!(info.images, ["proxy:1", "setup", "app:v1", "weights:7"]);
    }

    #[test]
    fn whole_pods_decode_like_cluster_pods_and_garbage_is_invalid() {
        let json = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "web-1", "namespace": "shop", "labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "resources": {"requests": {"cpu": "250m"}}}],
                "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [
                    {"topologyKey": "kubernetes.io/hostname",
                     "labelSelector": {"matchLabels": {"app": "web"}}}]}}}
        })
        .to_string();
        let info = JsonPodDecoder.decode(&json).expect("decodes");
        assert_eq!(info.requests.cpu_millis, 250);
        assert_eq!(
            info.pod_affinity.required_anti[0].namespaces,
            vec!["shop".to_string()]
        );
        for bad in ["", "{", "[1,2]", "{\"spec\": {\"containers\": 7}}"] {
            let e = JsonPodDecoder.decode(bad).expect_err(bad);
            assert!(matches!(e, ClusterError::Invalid(_)), "{bad}: {e:?}");
        }
        let e = JsonPodDecoder
            .decode(
                r#"{"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c",
                "resources": {"requests": {"cpu": "lots"}}}]}}"#,
            )
            .expect_err("bad quantity");
        assert!(e.to_string().contains("invalid quantity"), "{e}");
    }
}
