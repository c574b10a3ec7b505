//! The scheduler's writes to the API server, each one small request whose reply is not
//! decoded beyond its status (or the `resourceVersion` it wrote): the `pods/{name}/binding`
//! subresource (the 1.20 API server answers with a `Status`, not a `Binding`), core/v1
//! Events, the `PodScheduled` condition as a strategic-merge patch of `pods/{name}/status`,
//! and the volume binding's writes — a PersistentVolume's `claimRef` and a claim's
//! `selected-node` annotation, as merge patches that carry the `resourceVersion` they were
//! decided on, so that a concurrent change makes them fail (409) instead of overwriting it.
use ::kube::Client;
use ::kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use ::kube::core::Request;
use k8s_openapi::jiff::Timestamp;
use serde::de::IgnoredAny;
use serde_json::json;
use thiserror::Error;

use crate::reservations::{Provision, StaticBinding};

/// Errors of API writes.
#[derive(Debug, Error)]
pub enum ApiError {
    /// 409: the pod is already bound (or was replaced).
    #[error("pod {pod}: conflict: {message}")]
    Conflict {
        /// namespace/name.
        pod: String,
        /// The server's message.
        message: String,
    },
    /// 404: the pod is gone.
    #[error("pod {pod}: not found")]
    NotFound {
        /// namespace/name.
        pod: String,
    },
    /// Another API error status.
    #[error("pod {pod}: {what}: API server answered {code}: {message}")]
    Status {
        /// namespace/name.
        pod: String,
        /// What was attempted.
        what: &'static str,
        /// HTTP code.
        code: u16,
        /// The server's message.
        message: String,
    },
    /// The request failed before an answer (connection, timeout, encoding).
    #[error("pod {pod}: {what}: {source}")]
    Request {
        /// namespace/name.
        pod: String,
        /// What was attempted.
        what: &'static str,
        /// The error.
        #[source]
        source: ::kube::Error,
    },
}

impl ApiError {
    fn from_kube(pod: String, what: &'static str, e: ::kube::Error) -> ApiError {
        match e {
            ::kube::Error::Api(s) if s.code == 409 => ApiError::Conflict {
                pod,
                message: s.message,
            },
            ::kube::Error::Api(s) if s.code == 404 => ApiError::NotFound { pod },
            ::kube::Error::Api(s) => ApiError::Status {
                pod,
                what,
                code: s.code,
                message: s.message,
            },
            other => ApiError::Request {
                pod,
                what,
                source: other,
            },
        }
    }
}

/// The merge patch that binds a volume to a claim (`GetBindVolumeToClaim`): its `claimRef`,
/// and `pv.kubernetes.io/bound-by-controller` unless the volume was pre-bound to the claim.
pub fn volume_binding_patch(b: &StaticBinding) -> serde_json::Value {
    let (namespace, name, uid) = &b.claim;
    let mut patch = json!({
        "metadata": {"resourceVersion": b.volume_version},
        "spec": {"claimRef": {
            "kind": "PersistentVolumeClaim", "apiVersion": "v1",
            "namespace": namespace, "name": name, "uid": uid,
            "resourceVersion": b.claim_version
        }}
    });
    if !b.pre_bound {
        patch["metadata"]["annotations"] = json!({crate::volumes::BOUND_BY_CONTROLLER: "yes"});
    }
    patch
}

/// The merge patch that hands a claim to its provisioner for `node`.
pub fn selected_node_patch(p: &Provision) -> serde_json::Value {
    json!({"metadata": {
        "resourceVersion": p.claim_version,
        "annotations": {crate::volumes::SELECTED_NODE: p.node}
    }})
}

/// The type of an Event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventType {
    /// `Normal`.
    Normal,
    /// `Warning`.
    Warning,
}

/// An Event about a pod.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodEvent {
    /// Namespace.
    pub namespace: String,
    /// Pod name.
    pub name: String,
    /// Pod UID.
    pub uid: String,
    /// Type.
    pub type_: EventType,
    /// Reason, e.g. `Scheduled`, `FailedScheduling`.
    pub reason: &'static str,
    /// Message.
    pub message: String,
}

/// The reason of a successful placement's Event (as kube-scheduler).
pub const REASON_SCHEDULED: &str = "Scheduled";
/// The reason of a failed placement's Event (as kube-scheduler).
pub const REASON_FAILED: &str = "FailedScheduling";
/// The reason of the Event on a pod evicted by preemption (as kube-scheduler).
pub const REASON_PREEMPTED: &str = "Preempted";

fn pods_path(namespace: &str) -> String {
    format!("/api/v1/namespaces/{namespace}/pods")
}

/// The body of a binding of `name` (UID `uid`, checked by the server) to `node`.
pub fn binding_body(namespace: &str, name: &str, uid: &str, node: &str) -> Vec<u8> {
    body(&wire::Binding {
        api_version: "v1",
        kind: "Binding",
        metadata: wire::Meta {
            name: Some(name),
            namespace,
            uid: (!uid.is_empty()).then_some(uid),
            generate_name: None,
        },
        target: wire::Object {
            api_version: "v1",
            kind: "Node",
            namespace: None,
            name: node,
            uid: None,
        },
    })
}

/// The body of a core/v1 Event reported by `component` (instance `instance`) at `now`.
pub fn event_body(ev: &PodEvent, component: &str, instance: &str, now: Timestamp) -> Vec<u8> {
    let ts = Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string();
    body(&wire::Event {
        api_version: "v1",
        kind: "Event",
        metadata: wire::Meta {
            name: None,
            namespace: &ev.namespace,
            uid: None,
            generate_name: Some(&format!("{}.", ev.name)),
        },
        involved_object: wire::Object {
            api_version: "v1",
            kind: "Pod",
            namespace: Some(&ev.namespace),
            name: &ev.name,
            uid: Some(&ev.uid),
        },
        reason: ev.reason,
        message: &ev.message,
        type_: match ev.type_ {
            EventType::Normal => "Normal",
            EventType::Warning => "Warning",
        },
        source: wire::Source { component },
        reporting_component: component,
        reporting_instance: instance,
        first_timestamp: &ts,
        last_timestamp: &ts,
        count: 1,
    })
}

/// A request body as JSON. Serialising plain structs of borrowed strings cannot fail (no map
/// with non-string keys, no failing `Serialize`); an empty body would make the API server
/// answer 400, which the caller reports.
fn body(value: &impl serde::Serialize) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// The scheduler's per-pod bodies as borrowed structs: one `to_vec` each, where a
/// `serde_json::Value` tree cost an allocation per key and value on every binding and Event.
mod wire {
    use serde::Serialize;

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Meta<'a> {
        #[serde(skip_serializing_if = "Option::is_none")]
        pub name: Option<&'a str>,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub generate_name: Option<&'a str>,
        pub namespace: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub uid: Option<&'a str>,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Binding<'a> {
        pub api_version: &'a str,
        pub kind: &'a str,
        pub metadata: Meta<'a>,
        pub target: Object<'a>,
    }

    /// A reference to an object: a binding's node (cluster-scoped, no UID) or an Event's pod.
    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Object<'a> {
        pub api_version: &'a str,
        pub kind: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub namespace: Option<&'a str>,
        pub name: &'a str,
        #[serde(skip_serializing_if = "Option::is_none")]
        pub uid: Option<&'a str>,
    }

    #[derive(Serialize)]
    pub(super) struct Source<'a> {
        pub component: &'a str,
    }

    #[derive(Serialize)]
    #[serde(rename_all = "camelCase")]
    pub(super) struct Event<'a> {
        pub api_version: &'a str,
        pub kind: &'a str,
        pub metadata: Meta<'a>,
        pub involved_object: Object<'a>,
        pub reason: &'a str,
        pub message: &'a str,
        #[serde(rename = "type")]
        pub type_: &'a str,
        pub source: Source<'a>,
        pub reporting_component: &'a str,
        pub reporting_instance: &'a str,
        pub first_timestamp: &'a str,
        pub last_timestamp: &'a str,
        pub count: u32,
    }
}

/// The strategic-merge patch that sets `PodScheduled=False, reason=Unschedulable`.
pub fn unschedulable_patch(message: &str, now: Timestamp) -> serde_json::Value {
    let ts = Timestamp::from_second(now.as_second())
        .unwrap_or(now)
        .to_string();
    json!({"status": {"conditions": [{
        "type": "PodScheduled",
        "status": "False",
        "reason": "Unschedulable",
        "message": message,
        "lastProbeTime": null,
        "lastTransitionTime": ts
    }]}})
}

/// The writes, over a main client (bindings, status) and an events client, each with its
/// own rate limit (as kube-scheduler).
#[derive(Clone)]
pub struct KubeApi {
    client: Client,
    events: Client,
    component: String,
    instance: String,
}

impl std::fmt::Debug for KubeApi {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeApi")
            .field("component", &self.component)
            .field("instance", &self.instance)
            .finish_non_exhaustive()
    }
}

impl KubeApi {
    /// Writes through `client`, Events through `events`, reporting as `component`/`instance`.
    pub fn new(client: Client, events: Client, component: &str, instance: &str) -> KubeApi {
        KubeApi {
            client,
            events,
            component: component.to_string(),
            instance: instance.to_string(),
        }
    }

    /// Sends one write about `pod` through `client`; `what` names it in errors. The one
    /// place where a request is built, sent, and its failure classified.
    async fn send(
        client: &Client,
        pod: String,
        what: &'static str,
        build: Result<http::Request<Vec<u8>>, ::kube::core::request::Error>,
    ) -> Result<(), ApiError> {
        let req = match build {
            Ok(req) => req,
            Err(e) => {
                return Err(ApiError::Request {
                    pod,
                    what,
                    source: ::kube::Error::BuildRequest(e),
                });
            }
        };
        client
            .request::<IgnoredAny>(req)
            .await
            .map(|_| ())
            .map_err(|e| ApiError::from_kube(pod, what, e))
    }

    /// Binds the pod to `node`.
    pub async fn bind(
        &self,
        namespace: &str,
        name: &str,
        uid: &str,
        node: &str,
    ) -> Result<(), ApiError> {
        let req = Request::new(pods_path(namespace)).create_subresource(
            "binding",
            name,
            &PostParams::default(),
            binding_body(namespace, name, uid, node),
        );
        Self::send(&self.client, format!("{namespace}/{name}"), "binding", req).await
    }

    /// Sends a merge patch of `path`/`name` about `pod`; returns the `resourceVersion` the
    /// server wrote.
    async fn patch_versioned(
        &self,
        pod: String,
        what: &'static str,
        path: String,
        name: &str,
        patch: &serde_json::Value,
    ) -> Result<String, ApiError> {
        #[derive(serde::Deserialize)]
        struct Written {
            #[serde(default)]
            metadata: ::kube::api::ObjectMeta,
        }
        let req = Request::new(path)
            .patch(name, &PatchParams::default(), &Patch::Merge(patch))
            .map_err(|e| ApiError::Request {
                pod: pod.clone(),
                what,
                source: ::kube::Error::BuildRequest(e),
            })?;
        let written: Written = self
            .client
            .request(req)
            .await
            .map_err(|e| ApiError::from_kube(pod, what, e))?;
        Ok(written.metadata.resource_version.unwrap_or_default())
    }

    /// Binds a volume to a claim for `pod` (`namespace/name`); returns the volume's new
    /// `resourceVersion`.
    pub async fn bind_volume(&self, pod: &str, b: &StaticBinding) -> Result<String, ApiError> {
        self.patch_versioned(
            pod.to_string(),
            "volume binding",
            "/api/v1/persistentvolumes".into(),
            &b.volume,
            &volume_binding_patch(b),
        )
        .await
    }

    /// Annotates a claim with the node chosen for its provisioning; returns the claim's new
    /// `resourceVersion`.
    pub async fn select_node(&self, pod: &str, p: &Provision) -> Result<String, ApiError> {
        let (namespace, name, _) = &p.claim;
        self.patch_versioned(
            pod.to_string(),
            "claim provisioning annotation",
            format!("/api/v1/namespaces/{namespace}/persistentvolumeclaims"),
            name,
            &selected_node_patch(p),
        )
        .await
    }

    /// Records an Event about a pod.
    pub async fn event(&self, ev: &PodEvent) -> Result<(), ApiError> {
        let req = Request::new(format!("/api/v1/namespaces/{}/events", ev.namespace)).create(
            &PostParams::default(),
            event_body(ev, &self.component, &self.instance, Timestamp::now()),
        );
        let pod = format!("{}/{}", ev.namespace, ev.name);
        Self::send(&self.events, pod, "event", req).await
    }

    /// Deletes a preemption victim gracefully (its own termination grace period), only if it
    /// is still the pod with `uid`.
    pub async fn delete_pod(&self, namespace: &str, name: &str, uid: &str) -> Result<(), ApiError> {
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: Some(uid.to_string()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        let req = Request::new(pods_path(namespace)).delete(name, &params);
        Self::send(&self.client, format!("{namespace}/{name}"), "delete", req).await
    }

    /// Sets (or, with `None`, clears) the pod's `status.nominatedNodeName`.
    pub async fn set_nominated_node(
        &self,
        namespace: &str,
        name: &str,
        node: Option<&str>,
    ) -> Result<(), ApiError> {
        let patch = json!({"status": {"nominatedNodeName": node}});
        let req = Request::new(pods_path(namespace)).patch_subresource(
            "status",
            name,
            &PatchParams::default(),
            &Patch::Merge(&patch),
        );
        let pod = format!("{namespace}/{name}");
        Self::send(&self.client, pod, "nomination patch", req).await
    }

    /// Sets the pod's `PodScheduled` condition to False/Unschedulable with `message`.
    pub async fn mark_unschedulable(
        &self,
        namespace: &str,
        name: &str,
        message: &str,
    ) -> Result<(), ApiError> {
        let patch = unschedulable_patch(message, Timestamp::now());
        let req = Request::new(pods_path(namespace)).patch_subresource(
            "status",
            name,
            &PatchParams::default(),
            &Patch::Strategic(&patch),
        );
        let pod = format!("{namespace}/{name}");
        Self::send(&self.client, pod, "status patch", req).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bodies_are_what_the_api_expects() {
        let b: serde_json::Value =
            serde_json::from_slice(&binding_body("ns", "p", "u1", "n1")).expect("json");
        assert_eq!(
            b,
            json!({"apiVersion": "v1", "kind": "Binding",
                   "metadata": {"name": "p", "namespace": "ns", "uid": "u1"},
                   "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}})
        );
        let no_uid: serde_json::Value =
            serde_json::from_slice(&binding_body("ns", "p", "", "n1")).expect("json");
        assert_eq!(no_uid["metadata"], json!({"name": "p", "namespace": "ns"}));
        let now = Timestamp::from_second(1_700_000_000).expect("ts");
        let ev = PodEvent {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
            type_: EventType::Warning,
            reason: REASON_FAILED,
            message: "0/3 nodes are available: 3 Insufficient cpu.".into(),
        };
        let e: serde_json::Value =
            serde_json::from_slice(&event_body(&ev, "loadstar", "i1", now)).expect("json");
        assert_eq!(
            e,
            json!({
                "apiVersion": "v1", "kind": "Event",
                "metadata": {"generateName": "p.", "namespace": "ns"},
                "involvedObject": {"apiVersion": "v1", "kind": "Pod", "namespace": "ns",
                                   "name": "p", "uid": "u1"},
                "reason": "FailedScheduling",
                "message": "0/3 nodes are available: 3 Insufficient cpu.",
                "type": "Warning",
                "source": {"component": "loadstar"},
                "reportingComponent": "loadstar",
                "reportingInstance": "i1",
                "firstTimestamp": "2023-11-14T22:13:20Z",
                "lastTimestamp": "2023-11-14T22:13:20Z",
                "count": 1
            })
        );
        assert_eq!(e["involvedObject"]["uid"], "u1");
        assert_eq!(e["type"], "Warning");
        assert_eq!(e["firstTimestamp"], "2023-11-14T22:13:20Z");
        // It parses as a k8s Event.
        let parsed: k8s_openapi::api::core::v1::Event = serde_json::from_value(e).expect("event");
        assert_eq!(parsed.reason.as_deref(), Some(REASON_FAILED));
        let p = unschedulable_patch("why", now);
        assert_eq!(p["status"]["conditions"][0]["reason"], "Unschedulable");
    }

    #[test]
    fn volume_writes_carry_the_version_they_were_decided_on() {
        let b = StaticBinding {
            volume: "pv1".into(),
            volume_version: "41".into(),
            claim: ("ns".into(), "data".into(), "u1".into()),
            claim_version: "7".into(),
            pre_bound: false,
        };
        let p = volume_binding_patch(&b);
        assert_eq!(p["metadata"]["resourceVersion"], "41");
        assert_eq!(p["spec"]["claimRef"]["uid"], "u1");
        assert_eq!(p["spec"]["claimRef"]["kind"], "PersistentVolumeClaim");
        assert_eq!(
            p["metadata"]["annotations"][crate::volumes::BOUND_BY_CONTROLLER],
            "yes"
        );
        let pre = volume_binding_patch(&StaticBinding {
            pre_bound: true,
            ..b
        });
        assert!(pre["metadata"].get("annotations").is_none());
        let s = selected_node_patch(&Provision {
            claim: ("ns".into(), "data".into(), "u1".into()),
            claim_version: "7".into(),
            node: "n1".into(),
        });
        assert_eq!(
            s["metadata"]["annotations"][crate::volumes::SELECTED_NODE],
            "n1"
        );
        assert_eq!(s["metadata"]["resourceVersion"], "7");
    }
}
