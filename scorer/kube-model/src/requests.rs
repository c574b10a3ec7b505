//! A pod's effective requests and limits, as kube-scheduler and the kubelet's admission
//! compute them (upstream's `resourcehelper.PodRequests` / `PodLimits`), apart from the rest
//! of the pod's conversion so the formula can be read and tested on its own. Pure.
//!
//! - Regular containers are summed.
//! - Native sidecars (init containers with `restartPolicy: Always`, KEP-753, on by default
//!   from 1.29 and GA in 1.33) run beside the containers: each is added to the sum, and to
//!   what every later init container needs while it runs.
//! - An ordinary init container needs itself plus the sidecars started before it; the pod
//!   needs the larger of the sum and each init container's need, per resource.
//! - Pod-level `spec.resources` (KEP-2837, beta from 1.34) replaces that for `cpu`, `memory`
//!   and `hugepages-*`, after the API server's defaulting from pod-level limits (repeated
//!   for pods sent as `pod_json` that have not been through it).
//! - The pod overhead is added last (to the limits only where the pod sets one).
//! - During an in-place resize (`InPlacePodVerticalScaling`, beta and on from 1.33) a
//!   container or sidecar whose status reports `resources` counts the larger of its spec's,
//!   its reported and its allocated requests, or only the reported and allocated ones when
//!   the resize is infeasible, as upstream's `UseStatusResources`. (Resizing pod-level
//!   resources in place, alpha in 1.35, is not read: the spec's pod-level values stand.)
//!
//! The non-zero requests the scores use (`DEFAULT_NONZERO_*` for a container that requests
//! no CPU or memory) follow the same formula, as upstream's `NonMissingContainerRequests`
//! do; with pod-level requests set, a resource the pod level or any container requests
//! gets no default (upstream's `getNonMissingContainerRequests`).
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{Container, ContainerStatus, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use loadstar_common::model::{ResourceList, ResourceListError};

use loadstar_framework::snapshot::{DEFAULT_NONZERO_CPU_MILLIS, DEFAULT_NONZERO_MEMORY_BYTES};
use thiserror::Error;

/// Why a pod's requests or limits cannot be read.
#[derive(Debug, Clone, Error, PartialEq)]
pub enum RequestsError {
    /// A resource quantity did not parse.
    #[error("pod {pod}: {field}: {source}")]
    Quantity {
        /// namespace/name.
        pod: String,
        /// Where, e.g. `spec.containers[web].resources.requests`.
        field: String,
        /// The parse error.
        #[source]
        source: ResourceListError,
    },
}

/// Parses a `name → quantity` map, with whether it names `cpu` and `memory`.
fn parse_list(
    pod: &str,
    field: impl FnOnce() -> String,
    map: Option<&BTreeMap<String, Quantity>>,
) -> Result<(ResourceList, bool, bool), RequestsError> {
    let Some(map) = map else {
        return Ok((ResourceList::default(), false, false));
    };
    let list = ResourceList::from_quantities(map.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))
        .map_err(|source| RequestsError::Quantity {
        pod: pod.to_string(),
        field: field(),
        source,
    })?;
    Ok((list, map.contains_key("cpu"), map.contains_key("memory")))
}

/// Requests and limits of one container, or of a pod as they add up.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Resources {
    /// Requests (a missing request defaulted to the limit, as the API server does).
    pub requests: ResourceList,
    /// Limits.
    pub limits: ResourceList,
    /// CPU request for scoring: `DEFAULT_NONZERO_CPU_MILLIS` for a container without one.
    pub nonzero_cpu: i64,
    /// Memory request for scoring: `DEFAULT_NONZERO_MEMORY_BYTES` for a container without one.
    pub nonzero_mem: i64,
}

impl Resources {
    fn add(&mut self, other: &Resources) {
        self.requests.add(&other.requests);
        self.limits.add(&other.limits);
        self.nonzero_cpu = self.nonzero_cpu.saturating_add(other.nonzero_cpu);
        self.nonzero_mem = self.nonzero_mem.saturating_add(other.nonzero_mem);
    }

    fn max_with(&mut self, other: &Resources) {
        self.requests.max_with(&other.requests);
        self.limits.max_with(&other.limits);
        self.nonzero_cpu = self.nonzero_cpu.max(other.nonzero_cpu);
        self.nonzero_mem = self.nonzero_mem.max(other.nonzero_mem);
    }
}

/// Resources pod level `spec.resources` may set (upstream's `IsSupportedPodLevelResource`).
fn pod_level_resource(name: &str) -> bool {
    name == "cpu" || name == "memory" || name.starts_with("hugepages-")
}

/// Whether an init container is a native sidecar (`restartPolicy: Always`). Any other
/// value (1.34's container restart rules allow `Never` and `OnFailure`) leaves it an
/// ordinary init container, as upstream's `PodRequests` reads it.
pub fn is_sidecar(c: &Container) -> bool {
    c.restart_policy.as_deref() == Some("Always")
}

/// What the kubelet reports of a container during an in-place resize.
struct Reported<'a> {
    status: &'a ContainerStatus,
    /// The pod's resize is infeasible: only what the kubelet reports counts.
    infeasible: bool,
}

/// One container's requests and limits: its spec's, or with a resize under way (the
/// container's status carries `resources`), upstream's `determineContainerReqs`: the larger
/// of the spec's, the status's and the allocated requests, or only the status's and the
/// allocated ones when the resize is infeasible (limits likewise, without an allocated part).
fn container(
    pod: &str,
    kind: &str,
    c: &Container,
    reported: Option<Reported<'_>>,
) -> Result<Resources, RequestsError> {
    let mut r = container_spec(pod, kind, c)?;
    let Some(Reported { status, infeasible }) = reported else {
        return Ok(r);
    };
    let Some(res) = status.resources.as_ref() else {
        return Ok(r);
    };
    let at = |what: &str| format!("status.{kind}Statuses[{}].{what}", c.name);
    let (mut requests, mut has_cpu, mut has_mem) =
        parse_list(pod, || at("resources.requests"), res.requests.as_ref())?;
    let (allocated, a_cpu, a_mem) = parse_list(
        pod,
        || at("allocatedResources"),
        status.allocated_resources.as_ref(),
    )?;
    let (mut limits, _, _) = parse_list(pod, || at("resources.limits"), res.limits.as_ref())?;
    requests.max_with(&allocated);
    has_cpu |= a_cpu;
    has_mem |= a_mem;
    if !infeasible {
        requests.max_with(&r.requests);
        limits.max_with(&r.limits);
        has_cpu |= spec_requests(c, "cpu");
        has_mem |= spec_requests(c, "memory");
    }
    r.nonzero_cpu = if has_cpu {
        requests.cpu_millis
    } else {
        DEFAULT_NONZERO_CPU_MILLIS
    };
    r.nonzero_mem = if has_mem {
        requests.memory_bytes
    } else {
        DEFAULT_NONZERO_MEMORY_BYTES
    };
    r.requests = requests;
    r.limits = limits;
    Ok(r)
}

/// Whether the container's spec requests `name` (or limits it, which defaults the request).
fn spec_requests(c: &Container, name: &str) -> bool {
    c.resources.as_ref().is_some_and(|r| {
        [r.requests.as_ref(), r.limits.as_ref()]
            .into_iter()
            .flatten()
            .any(|m| m.contains_key(name))
    })
}

/// One container's requests and limits as its spec states them.
fn container_spec(pod: &str, kind: &str, c: &Container) -> Result<Resources, RequestsError> {
    let res = c.resources.as_ref();
    let (mut requests, mut has_cpu, mut has_mem) = parse_list(
        pod,
        || format!("spec.{kind}[{}].resources.requests", c.name),
        res.and_then(|r| r.requests.as_ref()),
    )?;
    let (limits, _, _) = parse_list(
        pod,
        || format!("spec.{kind}[{}].resources.limits", c.name),
        res.and_then(|r| r.limits.as_ref()),
    )?;
    // Kubernetes defaults a missing request to the limit (the API server does it for
    // containers; repeated here for objects that bypassed defaulting).
    let requested = |k: &str| {
        res.and_then(|r| r.requests.as_ref())
            .is_some_and(|m| m.contains_key(k))
    };
    for name in res
        .and_then(|r| r.limits.as_ref())
        .into_iter()
        .flatten()
        .map(|(k, _)| k)
    {
        if requested(name) || name == "pods" {
            continue;
        }
        requests.set(name, limits.get(name));
        has_cpu |= name == "cpu";
        has_mem |= name == "memory";
    }
    Ok(Resources {
        nonzero_cpu: if has_cpu {
            requests.cpu_millis
        } else {
            DEFAULT_NONZERO_CPU_MILLIS
        },
        nonzero_mem: if has_mem {
            requests.memory_bytes
        } else {
            DEFAULT_NONZERO_MEMORY_BYTES
        },
        requests,
        limits,
    })
}

/// The status of the container `name` among `statuses`.
fn reported<'a>(
    statuses: Option<&'a Vec<ContainerStatus>>,
    name: &str,
) -> Option<&'a ContainerStatus> {
    statuses.into_iter().flatten().find(|s| s.name == name)
}

/// Whether the pod's in-place resize is infeasible: the `PodResizePending` condition with
/// reason `Infeasible` (1.33+), or 1.27–1.32's `status.resize: Infeasible`.
fn resize_infeasible(status: &PodStatus) -> bool {
    status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodResizePending")
        .map_or(status.resize.as_deref() == Some("Infeasible"), |c| {
            c.reason.as_deref() == Some("Infeasible")
        })
}

/// The pod's effective requests and limits (see the module doc). `status` is read for
/// in-place resizes (`InPlacePodVerticalScaling`, on by default from 1.33): a container's
/// reported resources count as upstream's `UseStatusResources` counts them.
pub fn pod_resources(
    pod: &str,
    spec: &PodSpec,
    status: Option<&PodStatus>,
) -> Result<Resources, RequestsError> {
    let infeasible = status.is_some_and(resize_infeasible);
    let mut total = Resources::default();
    for c in &spec.containers {
        let st = reported(status.and_then(|s| s.container_statuses.as_ref()), &c.name);
        let st = st.map(|status| Reported { status, infeasible });
        total.add(&container(pod, "containers", c, st)?);
    }
    let mut sidecars = Resources::default();
    let mut init_need = Resources::default();
    for c in spec.init_containers.iter().flatten() {
        let sidecar = is_sidecar(c);
        // Only sidecars are resized in place; an ordinary init container's spec stands.
        let st = reported(
            status.and_then(|s| s.init_container_statuses.as_ref()),
            &c.name,
        )
        .filter(|_| sidecar)
        .map(|status| Reported { status, infeasible });
        let r = container(pod, "initContainers", c, st)?;
        if sidecar {
            total.add(&r);
            sidecars.add(&r);
            init_need.max_with(&sidecars);
        } else {
            let mut need = r;
            need.add(&sidecars);
            init_need.max_with(&need);
        }
    }
    total.max_with(&init_need);

    pod_level(pod, spec, &mut total)?;

    let (overhead, _, _) = parse_list(pod, || "spec.overhead".into(), spec.overhead.as_ref())?;
    total.requests.add(&overhead);
    // Upstream's `PodLimits` adds the overhead only to the limits the pod sets.
    for name in spec.overhead.iter().flat_map(|m| m.keys()) {
        let limit = total.limits.get(name);
        if limit != 0 {
            total
                .limits
                .set(name, limit.saturating_add(overhead.get(name)));
        }
    }
    total.nonzero_cpu = total.nonzero_cpu.saturating_add(overhead.cpu_millis);
    total.nonzero_mem = total.nonzero_mem.saturating_add(overhead.memory_bytes);
    Ok(total)
}

/// Applies pod-level `spec.resources` to the containers' aggregate.
///
/// For a pod that has not been through the API server (`pod_json`), its defaulting is
/// repeated first (upstream's `defaultPodRequests`): when any pod-level limit is set, each
/// cpu or memory request the containers make and the pod level does not becomes the
/// containers' aggregate, and each limited resource still without a request, the limit.
///
/// The non-zero requests then follow upstream's `getNonMissingContainerRequests`: with
/// pod-level requests set, a resource the pod level or any container requests counts as
/// requested (no default added); one neither requests keeps the per-container defaults.
fn pod_level(pod: &str, spec: &PodSpec, total: &mut Resources) -> Result<(), RequestsError> {
    let Some(r) = spec.resources.as_ref() else {
        return Ok(());
    };
    let (requests, _, _) = parse_list(
        pod,
        || "spec.resources.requests".into(),
        r.requests.as_ref(),
    )?;
    let (limits, _, _) = parse_list(pod, || "spec.resources.limits".into(), r.limits.as_ref())?;
    let supported = |m: Option<&BTreeMap<String, Quantity>>| -> Vec<String> {
        m.into_iter()
            .flat_map(|m| m.keys())
            .filter(|n| pod_level_resource(n))
            .cloned()
            .collect()
    };
    let limited = supported(r.limits.as_ref());
    // What the containers request, after their own defaulting from their limits.
    let containers_request = |name: &str| {
        spec.containers
            .iter()
            .chain(spec.init_containers.iter().flatten())
            .any(|c| spec_requests(c, name))
    };
    let mut pod_requests: BTreeMap<String, i64> = supported(r.requests.as_ref())
        .into_iter()
        .map(|n| {
            let v = requests.get(&n);
            (n, v)
        })
        .collect();
    if !limited.is_empty() {
        for name in ["cpu", "memory"] {
            if containers_request(name) && !pod_requests.contains_key(name) {
                pod_requests.insert(name.to_string(), total.requests.get(name));
            }
        }
        for name in &limited {
            pod_requests
                .entry(name.clone())
                .or_insert_with(|| limits.get(name));
        }
    }
    for name in &limited {
        total.limits.set(name, limits.get(name));
    }
    if pod_requests.is_empty() {
        return Ok(());
    }
    for (name, value) in &pod_requests {
        total.requests.set(name, *value);
    }
    for (name, nonzero) in [
        ("cpu", &mut total.nonzero_cpu),
        ("memory", &mut total.nonzero_mem),
    ] {
        if pod_requests.contains_key(name) || containers_request(name) {
            *nonzero = total.requests.get(name);
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    const MI: i64 = 1 << 20;

    fn resources(spec: serde_json::Value) -> Result<Resources, RequestsError> {
        let spec: PodSpec = serde_json::from_value(spec).expect("valid spec json");
        pod_resources("ns/p", &spec, None)
    }

    fn cpu(v: &str) -> serde_json::Value {
        json!({"requests": {"cpu": v}})
    }

    #[test]
    fn ordinary_init_containers_take_the_max_as_in_1_20() {
        let r = resources(json!({
            "containers": [{"name": "a", "resources": cpu("1")}, {"name": "b", "resources": cpu("500m")}],
            "initContainers": [{"name": "i1", "resources": cpu("2")}, {"name": "i2", "resources": cpu("1")}]
        }))
        .expect("valid");
        assert_eq!(r.requests.cpu_millis, 2000);
        assert_eq!(r.nonzero_cpu, 2000);
    }

    /// KEP-753's example: a sidecar runs beside the containers and every later init
    /// container, so it is added to both.
    #[test]
    fn sidecars_add_to_the_containers_and_to_later_init_containers() {
        let r = resources(json!({
            "containers": [{"name": "app", "resources": cpu("1")}],
            "initContainers": [
                {"name": "before", "resources": cpu("1600m")},
                {"name": "mesh", "restartPolicy": "Always", "resources": cpu("500m")},
                {"name": "after", "resources": cpu("1")},
                {"name": "log", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "250m"}, "limits": {"memory": "64Mi"}}}
            ]
        }))
        .expect("valid");
        // Running: app 1 + mesh 0.5 + log 0.25 = 1.75, more than any init container needs
        // (before 1.6; after 1 + mesh 0.5); 1.20's formula said max(1, 1.6, ...) = 1.6.
        assert_eq!(r.requests.cpu_millis, 1750);
        let r = resources(json!({
            "containers": [{"name": "app", "resources": cpu("1")}],
            "initContainers": [
                {"name": "mesh", "restartPolicy": "Always", "resources": cpu("1500m")},
                {"name": "after", "resources": cpu("1")}
            ]
        }))
        .expect("valid");
        // Running: 1 + 1.5 = 2.5, as much as `after` needs beside the sidecar (1 + 1.5);
        // 1.20's formula said max(1, 1.5, 1) = 1.5.
        assert_eq!(r.requests.cpu_millis, 2500);
        // A sidecar without requests counts the non-zero defaults like a container.
        assert_eq!(r.nonzero_cpu, 2500);
        assert_eq!(r.nonzero_mem, 2 * DEFAULT_NONZERO_MEMORY_BYTES);
        let r = resources(json!({
            "containers": [{"name": "app", "resources": cpu("1")}],
            "initContainers": [
                {"name": "mesh", "restartPolicy": "Always", "resources": cpu("500m")},
                {"name": "migrate", "resources": cpu("3")}
            ]
        }))
        .expect("valid");
        // migrate runs beside mesh: 3.5 > 1.5 running.
        assert_eq!(r.requests.cpu_millis, 3500);
    }

    #[test]
    fn an_init_container_restarting_other_than_always_is_an_ordinary_one() {
        for policy in ["Never", "OnFailure", ""] {
            let r = resources(json!({
                "containers": [{"name": "app", "resources": cpu("1")}],
                "initContainers": [{"name": "x", "restartPolicy": policy, "resources": cpu("2")}]
            }))
            .expect("valid");
            assert_eq!(r.requests.cpu_millis, 2000, "{policy:?}");
        }
    }

    #[test]
    fn with_pod_level_requests_a_resource_some_container_requests_gets_no_default() {
        // Pod-level CPU; container a requests memory, b nothing: upstream adds the memory
        // default to neither (the pod requests memory through a).
        let r = resources(json!({
            "containers": [{"name": "a", "resources": {"requests": {"memory": "128Mi"}}},
                           {"name": "b"}],
            "resources": {"requests": {"cpu": "2"}}
        }))
        .expect("valid");
        assert_eq!((r.nonzero_cpu, r.nonzero_mem), (2000, 128 * MI));
        // Nobody requests memory: each container keeps its default.
        let r = resources(json!({
            "containers": [{"name": "a"}, {"name": "b"}],
            "resources": {"requests": {"cpu": "2"}}
        }))
        .expect("valid");
        assert_eq!(r.nonzero_mem, 2 * DEFAULT_NONZERO_MEMORY_BYTES);
        // Without pod-level requests a container lacking a request gets the default.
        let r = resources(json!({
            "containers": [{"name": "a", "resources": {"requests": {"memory": "128Mi"}}},
                           {"name": "b"}]
        }))
        .expect("valid");
        assert_eq!(r.nonzero_mem, 128 * MI + DEFAULT_NONZERO_MEMORY_BYTES);
    }

    #[test]
    fn a_pod_level_limit_defaults_every_request_the_containers_make() {
        // A memory limit alone at the pod level: the containers' CPU request becomes a
        // pod-level request too (the API server's defaulting), so no CPU default is added.
        let r = resources(json!({
            "containers": [{"name": "a", "resources": cpu("1")}, {"name": "b"}],
            "resources": {"limits": {"memory": "1Gi"}}
        }))
        .expect("valid");
        assert_eq!((r.requests.cpu_millis, r.nonzero_cpu), (1000, 1000));
        assert_eq!((r.requests.memory_bytes, r.nonzero_mem), (1 << 30, 1 << 30));
    }

    #[test]
    fn overhead_is_added_to_the_limits_the_pod_sets_only() {
        let r = resources(json!({
            "containers": [{"name": "a", "resources": {"limits": {"cpu": "1"}}}],
            "overhead": {"cpu": "100m", "memory": "10Mi"}
        }))
        .expect("valid");
        assert_eq!((r.limits.cpu_millis, r.limits.memory_bytes), (1100, 0));
        assert_eq!(
            (r.requests.cpu_millis, r.requests.memory_bytes),
            (1100, 10 * MI)
        );
    }

    #[test]
    fn pod_level_requests_replace_the_containers_for_cpu_memory_and_hugepages() {
        let r = resources(json!({
            "containers": [
                {"name": "a", "resources": {"requests": {"cpu": "1", "nvidia.com/gpu": "1"}}},
                {"name": "b"}
            ],
            "resources": {"requests": {"cpu": "3", "memory": "1Gi", "hugepages-2Mi": "4Mi",
                                       "ephemeral-storage": "9Gi"},
                          "limits": {"cpu": "4"}},
            "overhead": {"cpu": "100m"}
        }))
        .expect("valid");
        assert_eq!(r.requests.cpu_millis, 3100);
        assert_eq!(r.requests.memory_bytes, 1 << 30);
        assert_eq!(r.requests.get("hugepages-2Mi"), 4 * MI);
        // Not a pod-level resource: the containers' (none) stand.
        assert_eq!(r.requests.ephemeral_storage_bytes, 0);
        assert_eq!(r.requests.gpus, 1);
        // The pod-level request replaces the non-zero defaults of b too.
        assert_eq!(r.nonzero_cpu, 3100);
        assert_eq!(r.nonzero_mem, 1 << 30);
        assert_eq!(r.limits.cpu_millis, 4100);
    }

    #[test]
    fn a_pod_level_limit_alone_defaults_the_request_as_the_api_server_does() {
        // No container requests CPU: the request defaults to the pod-level limit.
        let r = resources(json!({
            "containers": [{"name": "a"}, {"name": "b", "resources": {"requests": {"memory": "128Mi"}}}],
            "resources": {"limits": {"cpu": "2", "memory": "1Gi"}}
        }))
        .expect("valid");
        assert_eq!(r.requests.cpu_millis, 2000);
        assert_eq!(r.nonzero_cpu, 2000);
        // A container requests memory: the request defaults to the containers' aggregate.
        assert_eq!(r.requests.memory_bytes, 128 * MI);
        assert_eq!(r.nonzero_mem, 128 * MI);
        assert_eq!(r.limits.memory_bytes, 1 << 30);
    }

    /// `app` requests `spec` CPU; its status reports `reported` with `allocated`.
    fn resizing(
        spec: &str,
        reported: &str,
        allocated: &str,
        status: serde_json::Value,
    ) -> Resources {
        let mut status = status;
        status["containerStatuses"] = json!([{"name": "app", "image": "i", "imageID": "",
            "ready": true, "restartCount": 0,
            "resources": cpu(reported), "allocatedResources": {"cpu": allocated}}]);
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "app", "resources": cpu(spec)}]
        }))
        .expect("spec");
        let status: PodStatus = serde_json::from_value(status).expect("status");
        pod_resources("ns/p", &spec, Some(&status)).expect("valid")
    }

    #[test]
    fn in_place_resizes_count_the_larger_of_spec_reported_and_allocated() {
        // Down from 2 to 1, not yet actuated: the node still holds 2.
        assert_eq!(resizing("1", "2", "2", json!({})).requests.cpu_millis, 2000);
        // Actuated.
        assert_eq!(resizing("1", "1", "1", json!({})).requests.cpu_millis, 1000);
        // Up from 1 to 3, pending: the spec's 3 counts.
        let r = resizing("3", "1", "1", json!({}));
        assert_eq!((r.requests.cpu_millis, r.nonzero_cpu), (3000, 3000));
        // Infeasible (1.33's condition, or 1.27-1.32's status.resize): what runs counts.
        let infeasible = json!({"conditions": [{"type": "PodResizePending", "status": "True",
                                                 "reason": "Infeasible"}]});
        assert_eq!(
            resizing("3", "1", "1", infeasible).requests.cpu_millis,
            1000
        );
        let legacy = json!({"resize": "Infeasible"});
        assert_eq!(resizing("3", "1", "1", legacy).requests.cpu_millis, 1000);
        let deferred = json!({"conditions": [{"type": "PodResizePending", "status": "True",
                                               "reason": "Deferred"}]});
        assert_eq!(resizing("3", "1", "1", deferred).requests.cpu_millis, 3000);
        // The allocation can lead the report: the larger counts.
        assert_eq!(resizing("1", "1", "2", json!({})).requests.cpu_millis, 2000);
    }

    #[test]
    fn only_sidecars_statuses_count_among_init_containers() {
        let spec: PodSpec = serde_json::from_value(json!({
            "containers": [{"name": "app", "resources": cpu("1")}],
            "initContainers": [
                {"name": "setup", "resources": cpu("500m")},
                {"name": "proxy", "restartPolicy": "Always", "resources": cpu("1")}
            ]
        }))
        .expect("spec");
        let status = |name: &str| -> PodStatus {
            serde_json::from_value(
                json!({"initContainerStatuses": [{"name": name, "image": "i",
                "imageID": "", "ready": true, "restartCount": 0,
                "resources": cpu("4"), "allocatedResources": {"cpu": "4"}}]}),
            )
            .expect("status")
        };
        let with = |name: &str| {
            pod_resources("ns/p", &spec, Some(&status(name)))
                .expect("valid")
                .requests
                .cpu_millis
        };
        assert_eq!(with("proxy"), 5000);
        assert_eq!(with("setup"), 2000);
        // A container whose status reports no resources keeps its spec's.
        let none: PodStatus = serde_json::from_value(json!({"containerStatuses": [{"name": "app",
            "image": "i", "imageID": "", "ready": true, "restartCount": 0}]}))
        .expect("status");
        let r = pod_resources("ns/p", &spec, Some(&none)).expect("valid");
        assert_eq!(r.requests.cpu_millis, 2000);
    }

    #[test]
    fn bad_pod_level_quantities_name_their_field() {
        let e = resources(json!({
            "containers": [{"name": "a"}],
            "resources": {"requests": {"cpu": "lots"}}
        }))
        .expect_err("bad quantity");
        assert!(
            e.to_string()
                .starts_with("pod ns/p: spec.resources.requests: resource \"cpu\""),
            "{e}"
        );
    }
}
