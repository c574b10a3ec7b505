//! The scheduler's writes to the API server, each one small request whose reply is not
//! decoded beyond its status (or the `resourceVersion` it wrote): the `pods/{name}/binding`
//! subresource (the 1.20 API server answers with a `Status`, not a `Binding`) and core/v1
//! Events, these two per pod with protobuf bodies ([`crate::protobuf`]); the `PodScheduled`
//! condition as a strategic-merge patch of `pods/{name}/status`; and the volume binding's
//! writes — a PersistentVolume's `claimRef` and a claim's `selected-node` annotation, as
//! merge patches that carry the `resourceVersion` they were decided on, so that a concurrent
//! change makes them fail (409) instead of overwriting it.
use ::kube::Client;
use ::kube::api::{DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use ::kube::core::Request;
use k8s_openapi::jiff::Timestamp;
use serde::de::IgnoredAny;
use serde_json::json;
use thiserror::Error;

use loadstar_common::text::truncate;

use crate::protobuf as pb;
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

/// The body of a binding of `name` (UID `uid`, checked by the server) to `node`, in
/// protobuf ([`crate::protobuf`]).
pub fn binding_body(namespace: &str, name: &str, uid: &str, node: &str) -> Vec<u8> {
    pb::body(
        "v1",
        "Binding",
        &pb::Binding {
            metadata: Some(pb::ObjectMeta {
                name: name.to_string(),
                namespace: namespace.to_string(),
                uid: uid.to_string(),
                ..pb::ObjectMeta::default()
            }),
            target: Some(pb::ObjectReference {
                kind: "Node".into(),
                name: node.to_string(),
                api_version: "v1".into(),
                ..pb::ObjectReference::default()
            }),
        },
    )
}

/// The body of a core/v1 Event reported by `component` (instance `instance`) at `now`, in
/// protobuf ([`crate::protobuf`]); its timestamps in whole seconds, as Kubernetes keeps them.
pub fn event_body(ev: &PodEvent, component: &str, instance: &str, now: Timestamp) -> Vec<u8> {
    let at = pb::Time {
        seconds: now.as_second(),
        nanos: 0,
    };
    pb::body(
        "v1",
        "Event",
        &pb::Event {
            metadata: Some(pb::ObjectMeta {
                generate_name: format!("{}.", ev.name),
                namespace: ev.namespace.clone(),
                ..pb::ObjectMeta::default()
            }),
            involved_object: Some(pb::ObjectReference {
                kind: "Pod".into(),
                namespace: ev.namespace.clone(),
                name: ev.name.clone(),
                uid: ev.uid.clone(),
                api_version: "v1".into(),
            }),
            reason: ev.reason.to_string(),
            message: ev.message.clone(),
            source: Some(pb::EventSource {
                component: component.to_string(),
            }),
            first_timestamp: Some(at.clone()),
            last_timestamp: Some(at),
            count: 1,
            type_: match ev.type_ {
                EventType::Normal => "Normal",
                EventType::Warning => "Warning",
            }
            .into(),
            reporting_component: component.to_string(),
            reporting_instance: instance.to_string(),
        },
    )
}

/// Marks a request built with a protobuf body as such, and asks for protobuf in reply.
fn as_protobuf(mut req: http::Request<Vec<u8>>) -> http::Request<Vec<u8>> {
    let headers = req.headers_mut();
    for name in [http::header::CONTENT_TYPE, http::header::ACCEPT] {
        headers.insert(name, http::HeaderValue::from_static(pb::CONTENT_TYPE));
    }
    req
}

/// A request as built, or the error of building it for `pod`'s `what`.
fn built(
    pod: &str,
    what: &'static str,
    build: Result<http::Request<Vec<u8>>, ::kube::core::request::Error>,
) -> Result<http::Request<Vec<u8>>, ApiError> {
    build.map_err(|e| ApiError::Request {
        pod: pod.to_string(),
        what,
        source: ::kube::Error::BuildRequest(e),
    })
}

/// The error an unsuccessful protobuf reply stands for: its [`pb::Status`]; or a JSON
/// `Status`, which the API server writes whatever was asked for when a request times out,
/// as a proxy in between may; or, from something that is not the API server (a proxy's
/// text or HTML), its text.
fn reply_error(code: http::StatusCode, body: &[u8]) -> ::kube::Error {
    let (message, reason) = match pb::status(body) {
        Ok(s) => (s.message, s.reason),
        Err(_) => match serde_json::from_slice::<::kube::core::Status>(body) {
            Ok(s) => (s.message, s.reason),
            Err(_) => (
                truncate(String::from_utf8_lossy(body).trim(), 512),
                "Failed to parse error data".to_string(),
            ),
        },
    };
    ::kube::Error::Api(
        ::kube::core::Status::failure(&message, &reason)
            .with_code(code.as_u16())
            .boxed(),
    )
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
        let req = built(&pod, what, build)?;
        client
            .request::<IgnoredAny>(req)
            .await
            .map(|_| ())
            .map_err(|e| ApiError::from_kube(pod, what, e))
    }

    /// [`Self::send`] for a write with a protobuf body that asks for a protobuf reply
    /// ([`as_protobuf`]): the reply is read to its end, as the stream must be, and decoded
    /// only when it is an error.
    async fn send_protobuf(
        client: &Client,
        pod: String,
        what: &'static str,
        build: Result<http::Request<Vec<u8>>, ::kube::core::request::Error>,
    ) -> Result<(), ApiError> {
        let req = as_protobuf(built(&pod, what, build)?);
        let replied = async {
            let res = client.send(req.map(::kube::client::Body::from)).await?;
            let code = res.status();
            let body = res.into_body().collect_bytes().await?;
            if code.is_client_error() || code.is_server_error() {
                return Err(reply_error(code, &body));
            }
            Ok(())
        };
        replied.await.map_err(|e| ApiError::from_kube(pod, what, e))
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
        Self::send_protobuf(&self.client, format!("{namespace}/{name}"), "binding", req).await
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
        let req = built(
            &pod,
            what,
            Request::new(path).patch(name, &PatchParams::default(), &Patch::Merge(patch)),
        )?;
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
        Self::send_protobuf(&self.events, pod, "event", req).await
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

    /// The bytes of the same Binding and Event as the API server's own protobuf serializer
    /// writes them (`tests/e2e/pbgold/main.go`, Kubernetes 1.20.2): it sets every
    /// field, empty ones too, so the bytes differ from ours, but read with our field numbers
    /// they must give the same objects. A wrong field number reads a value into the wrong
    /// field, or drops it, and fails here.
    const GO_BINDING: &str = "6b3873000a0d0a027631120742696e64696e6712310a170a017012001a026e7322002a0275313200380042007a0012160a044e6f646512001a026e3122002a02763132003a001a002200";
    const GO_EVENT: &str = "6b3873000a0b0a02763112054576656e7412b1010a160a001202702e1a026e7322002a003200380042007a0012180a03506f6412026e731a0170220275312a02763132003a001a104661696c65645363686564756c696e67222c302f33206e6f6465732061726520617661696c61626c653a203320496e73756666696369656e74206370752e2a0c0a086c6f616473746172120032080880e2cfaa0610003a080880e2cfaa06100040014a075761726e696e675200620072086c6f6164737461727a0269311a002200";

    const GO_STATUS: &str = "6b3873000a0c0a027631120653746174757312790a060a0012001a0012074661696c7572651a594f7065726174696f6e2063616e6e6f742062652066756c66696c6c6564206f6e20706f64732f62696e64696e67202270223a20706f64207020697320616c72656164792061737369676e656420746f206e6f646520226e31222208436f6e666c6963743099031a002200";

    fn unhex(s: &str) -> Vec<u8> {
        (0..s.len())
            .step_by(2)
            .map(|i| u8::from_str_radix(&s[i..i + 2], 16).expect("hex"))
            .collect()
    }

    fn opened<M: prost::Message + Default>(body: &[u8], kind: &str) -> M {
        let (tm, raw) = pb::open(body).expect("a protobuf body");
        assert_eq!((tm.api_version.as_str(), tm.kind.as_str()), ("v1", kind));
        M::decode(raw.as_slice()).expect("decodes")
    }

    #[test]
    fn bodies_read_as_the_api_servers_own_encoding_of_the_same_objects() {
        let ours: pb::Binding = opened(&binding_body("ns", "p", "u1", "n1"), "Binding");
        let go: pb::Binding = opened(&unhex(GO_BINDING), "Binding");
        assert_eq!(ours, go);
        let meta = ours.metadata.as_ref().expect("metadata");
        assert_eq!((meta.name.as_str(), meta.namespace.as_str()), ("p", "ns"));
        assert_eq!(meta.uid, "u1");
        assert_eq!(ours.target.as_ref().expect("target").name, "n1");
        // Without a UID the server checks none: the field is left out.
        let no_uid: pb::Binding = opened(&binding_body("ns", "p", "", "n1"), "Binding");
        assert_eq!(no_uid.metadata.expect("metadata").uid, "");

        let now = Timestamp::from_second(1_700_000_000).expect("ts");
        let ev = PodEvent {
            namespace: "ns".into(),
            name: "p".into(),
            uid: "u1".into(),
            type_: EventType::Warning,
            reason: REASON_FAILED,
            message: "0/3 nodes are available: 3 Insufficient cpu.".into(),
        };
        let ours: pb::Event = opened(&event_body(&ev, "loadstar", "i1", now), "Event");
        let go: pb::Event = opened(&unhex(GO_EVENT), "Event");
        assert_eq!(ours, go);
        assert_eq!(ours.reason, REASON_FAILED);
        assert_eq!(ours.type_, "Warning");
        assert_eq!(ours.involved_object.as_ref().expect("pod").uid, "u1");
        assert_eq!(
            ours.first_timestamp.as_ref().expect("first").seconds,
            1_700_000_000
        );
        // Sub-second parts are dropped, as Kubernetes keeps Event times.
        let later = Timestamp::from_second(1_700_000_000)
            .and_then(|t| t.checked_add(jiff_millis(750)))
            .expect("ts");
        let rounded: pb::Event = opened(&event_body(&ev, "loadstar", "i1", later), "Event");
        assert_eq!(rounded, go);
        let p = unschedulable_patch("why", now);
        assert_eq!(p["status"]["conditions"][0]["reason"], "Unschedulable");
    }

    fn jiff_millis(ms: i64) -> k8s_openapi::jiff::SignedDuration {
        k8s_openapi::jiff::SignedDuration::from_millis(ms)
    }

    #[test]
    fn writes_say_their_body_is_protobuf_and_ask_for_protobuf() {
        let req = Request::new(pods_path("ns"))
            .create_subresource(
                "binding",
                "p",
                &PostParams::default(),
                binding_body("ns", "p", "u1", "n1"),
            )
            .map(as_protobuf)
            .expect("request");
        assert_eq!(req.headers()[http::header::CONTENT_TYPE], pb::CONTENT_TYPE);
        assert_eq!(req.headers()[http::header::ACCEPT], pb::CONTENT_TYPE);
        assert_eq!(req.uri().path(), "/api/v1/namespaces/ns/pods/p/binding");
    }

    #[test]
    fn an_error_reply_in_protobuf_keeps_its_code_and_message() {
        // The API server's own 409 for a pod bound already: a conflict, with its message.
        let e = reply_error(http::StatusCode::CONFLICT, &unhex(GO_STATUS));
        match ApiError::from_kube("ns/p".into(), "binding", e) {
            ApiError::Conflict { pod, message } => {
                assert_eq!(pod, "ns/p");
                assert_eq!(
                    message,
                    r#"Operation cannot be fulfilled on pods/binding "p": pod p is already assigned to node "n1""#
                );
            }
            other => panic!("not a conflict: {other:?}"),
        }
        let status = pb::status(&unhex(GO_STATUS)).expect("status");
        assert_eq!((status.code, status.reason.as_str()), (409, "Conflict"));
        // The API server's own timeout answers in JSON whatever was asked for: its message
        // is kept.
        let e = reply_error(
            http::StatusCode::GATEWAY_TIMEOUT,
            br#"{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"Timeout: request did not complete within the allotted timeout","reason":"Timeout","code":504}"#,
        );
        match ApiError::from_kube("ns/p".into(), "binding", e) {
            ApiError::Status { code, message, .. } => assert_eq!(
                (code, message.as_str()),
                (
                    504,
                    "Timeout: request did not complete within the allotted timeout"
                )
            ),
            other => panic!("not a status: {other:?}"),
        }
        // Another kind of object than a Status is not read as one.
        assert!(matches!(
            pb::status(&unhex(GO_BINDING)),
            Err(pb::DecodeError::Kind {
                expected: "Status",
                ..
            })
        ));
        // A 503 page from something in between keeps its code and its text.
        let e = reply_error(
            http::StatusCode::SERVICE_UNAVAILABLE,
            b"<html>upstream unavailable</html>\n",
        );
        match ApiError::from_kube("ns/p".into(), "event", e) {
            ApiError::Status { code, message, .. } => {
                assert_eq!(
                    (code, message.as_str()),
                    (503, "<html>upstream unavailable</html>")
                );
            }
            other => panic!("not a status: {other:?}"),
        }
        assert!(matches!(
            ApiError::from_kube(
                "ns/p".into(),
                "binding",
                reply_error(http::StatusCode::NOT_FOUND, b"")
            ),
            ApiError::NotFound { .. }
        ));
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
