//! Kubernetes' protobuf wire format for the scheduler's two writes per pod, its Binding and
//! its Event, as kube-scheduler sends them: the API server decodes a protobuf body with
//! generated code, where a JSON body costs it a reflective decode and a second parse to find
//! `apiVersion` and `kind` (about 7 % of its CPU while Loadstar schedules, by `pprof`).
//!
//! The messages are declared here with `prost` for the few fields the scheduler sets, each
//! with its field number from `k8s.io/api`'s and `k8s.io/apimachinery`'s `generated.proto`
//! (1.20; the numbers never change), rather than taken from a crate of every Kubernetes type
//! generated: nine small messages against thousands of types to compile. Their replies are
//! asked for in protobuf too (the API server encodes the created Event back; its replies to
//! creates took 1.8 % of its CPU in JSON): a success's reply is read to its end but not
//! decoded, an error's is a [`Status`].
use prost::Message;

/// The content type of a protobuf body.
pub const CONTENT_TYPE: &str = "application/vnd.kubernetes.protobuf";
/// The four bytes before every protobuf-encoded object (`k8s\0`).
pub const MAGIC: [u8; 4] = *b"k8s\0";

/// `runtime.Unknown`: the envelope of every protobuf-encoded object.
#[derive(Clone, PartialEq, Message)]
pub struct Unknown {
    /// The object's `apiVersion` and `kind`.
    #[prost(message, optional, tag = "1")]
    pub type_meta: Option<TypeMeta>,
    /// The object itself, encoded.
    #[prost(bytes = "vec", tag = "2")]
    pub raw: Vec<u8>,
    /// Empty: the object is not compressed.
    #[prost(string, tag = "3")]
    pub content_encoding: String,
    /// Empty: the object is protobuf.
    #[prost(string, tag = "4")]
    pub content_type: String,
}

/// `runtime.TypeMeta`.
#[derive(Clone, PartialEq, Message)]
pub struct TypeMeta {
    /// `apiVersion`.
    #[prost(string, tag = "1")]
    pub api_version: String,
    /// `kind`.
    #[prost(string, tag = "2")]
    pub kind: String,
}

/// `meta/v1.ObjectMeta`, the fields a Binding or an Event is created with.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectMeta {
    /// `name`.
    #[prost(string, tag = "1")]
    pub name: String,
    /// `generateName`.
    #[prost(string, tag = "2")]
    pub generate_name: String,
    /// `namespace`.
    #[prost(string, tag = "3")]
    pub namespace: String,
    /// `uid`: on a Binding, the pod's, checked by the server.
    #[prost(string, tag = "5")]
    pub uid: String,
}

/// `core/v1.ObjectReference`.
#[derive(Clone, PartialEq, Message)]
pub struct ObjectReference {
    /// `kind`.
    #[prost(string, tag = "1")]
    pub kind: String,
    /// `namespace`.
    #[prost(string, tag = "2")]
    pub namespace: String,
    /// `name`.
    #[prost(string, tag = "3")]
    pub name: String,
    /// `uid`.
    #[prost(string, tag = "4")]
    pub uid: String,
    /// `apiVersion`.
    #[prost(string, tag = "5")]
    pub api_version: String,
}

/// `core/v1.Binding`.
#[derive(Clone, PartialEq, Message)]
pub struct Binding {
    /// The pod's name, namespace and UID.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// The node.
    #[prost(message, optional, tag = "2")]
    pub target: Option<ObjectReference>,
}

/// `meta/v1.Time`: whole seconds (and nanoseconds) since the Unix epoch.
#[derive(Clone, PartialEq, Message)]
pub struct Time {
    /// Seconds.
    #[prost(int64, tag = "1")]
    pub seconds: i64,
    /// Nanoseconds.
    #[prost(int32, tag = "2")]
    pub nanos: i32,
}

/// `core/v1.EventSource`.
#[derive(Clone, PartialEq, Message)]
pub struct EventSource {
    /// `component`.
    #[prost(string, tag = "1")]
    pub component: String,
}

/// `core/v1.Event`, the fields the scheduler reports.
#[derive(Clone, PartialEq, Message)]
pub struct Event {
    /// `metadata`: `generateName` and `namespace`.
    #[prost(message, optional, tag = "1")]
    pub metadata: Option<ObjectMeta>,
    /// `involvedObject`: the pod.
    #[prost(message, optional, tag = "2")]
    pub involved_object: Option<ObjectReference>,
    /// `reason`.
    #[prost(string, tag = "3")]
    pub reason: String,
    /// `message`.
    #[prost(string, tag = "4")]
    pub message: String,
    /// `source`.
    #[prost(message, optional, tag = "5")]
    pub source: Option<EventSource>,
    /// `firstTimestamp`.
    #[prost(message, optional, tag = "6")]
    pub first_timestamp: Option<Time>,
    /// `lastTimestamp`.
    #[prost(message, optional, tag = "7")]
    pub last_timestamp: Option<Time>,
    /// `count`.
    #[prost(int32, tag = "8")]
    pub count: i32,
    /// `type`: `Normal` or `Warning`.
    #[prost(string, tag = "9")]
    pub type_: String,
    /// `reportingComponent` (Go's `ReportingController`).
    #[prost(string, tag = "14")]
    pub reporting_component: String,
    /// `reportingInstance`.
    #[prost(string, tag = "15")]
    pub reporting_instance: String,
}

/// `object` as a request body: the magic prefix, then the envelope naming its `apiVersion`
/// and `kind` around the object's own bytes.
pub fn body(api_version: &str, kind: &str, object: &impl Message) -> Vec<u8> {
    let unknown = Unknown {
        type_meta: Some(TypeMeta {
            api_version: api_version.to_string(),
            kind: kind.to_string(),
        }),
        raw: object.encode_to_vec(),
        content_encoding: String::new(),
        content_type: String::new(),
    };
    let encoded = unknown.encode_to_vec();
    let mut out = Vec::with_capacity(MAGIC.len() + encoded.len());
    out.extend_from_slice(&MAGIC);
    out.extend_from_slice(&encoded);
    out
}

/// `meta/v1.Status`: the API server's answer to a failed request.
#[derive(Clone, PartialEq, Message)]
pub struct Status {
    /// `Failure` (or `Success`).
    #[prost(string, tag = "2")]
    pub status: String,
    /// What went wrong, for people.
    #[prost(string, tag = "3")]
    pub message: String,
    /// What went wrong, for machines (`Conflict`, `NotFound`, …).
    #[prost(string, tag = "4")]
    pub reason: String,
    /// The HTTP status code.
    #[prost(int32, tag = "6")]
    pub code: i32,
}

/// Errors reading a protobuf body: an error reply, or a body in the tests.
#[derive(Debug, thiserror::Error)]
pub enum DecodeError {
    /// The body does not start with `k8s\0`.
    #[error("not a Kubernetes protobuf body: no k8s\\0 prefix")]
    NoMagic,
    /// The envelope or the object does not decode.
    #[error("malformed protobuf: {0}")]
    Malformed(#[from] prost::DecodeError),
    /// The body holds another kind of object than the one expected.
    #[error("a {found} where a {expected} was expected")]
    Kind {
        /// The kind expected.
        expected: &'static str,
        /// The kind found.
        found: String,
    },
}

/// Reads a body written by [`body`] (or by the API server's own encoder): its
/// `(apiVersion, kind)` and the object's bytes.
pub fn open(body: &[u8]) -> Result<(TypeMeta, Vec<u8>), DecodeError> {
    let rest = body.strip_prefix(&MAGIC).ok_or(DecodeError::NoMagic)?;
    let unknown = Unknown::decode(rest)?;
    Ok((unknown.type_meta.unwrap_or_default(), unknown.raw))
}

/// Reads an error reply in protobuf as its [`Status`].
pub fn status(body: &[u8]) -> Result<Status, DecodeError> {
    let (tm, raw) = open(body)?;
    if tm.kind != "Status" {
        return Err(DecodeError::Kind {
            expected: "Status",
            found: tm.kind,
        });
    }
    Ok(Status::decode(raw.as_slice())?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_opens_to_its_type_and_object() {
        let b = Binding {
            metadata: Some(ObjectMeta {
                name: "p".into(),
                namespace: "ns".into(),
                ..ObjectMeta::default()
            }),
            target: None,
        };
        let bytes = body("v1", "Binding", &b);
        assert_eq!(&bytes[..4], b"k8s\0");
        let (tm, raw) = open(&bytes).expect("opens");
        assert_eq!(
            (tm.api_version.as_str(), tm.kind.as_str()),
            ("v1", "Binding")
        );
        assert_eq!(Binding::decode(raw.as_slice()).expect("binding"), b);
        assert!(matches!(open(b"{\"kind\":1}"), Err(DecodeError::NoMagic)));
        assert!(matches!(
            open(b"k8s\0\x0a\xff"),
            Err(DecodeError::Malformed(_))
        ));
    }
}
