//! The Pod as the pod watch decodes it: every field but `metadata.managedFields`, which
//! nothing here reads and which is most of a pod's metadata on the wire (a `fieldsV1` tree per
//! writer, decoded by k8s-openapi into nested JSON maps: about two thirds of the metadata's
//! decoding cost, measured on the scheduler-throughput bench). serde skips it without
//! allocating.
use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ops::Deref;

use ::kube::Resource;
use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::core::v1::{Pod, PodSpec, PodStatus};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference, Time};
use serde::{Deserialize, Deserializer};

/// A Pod decoded without its managed fields (`metadata.managedFields` is always `None`).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WatchedPod(pub Pod);

impl Deref for WatchedPod {
    type Target = Pod;
    fn deref(&self) -> &Pod {
        &self.0
    }
}

/// `ObjectMeta` as it comes, less `managedFields` (and the deprecated `selfLink`).
#[derive(Deserialize, Default)]
#[serde(rename_all = "camelCase", default)]
struct WireMeta {
    annotations: Option<BTreeMap<String, String>>,
    creation_timestamp: Option<Time>,
    deletion_grace_period_seconds: Option<i64>,
    deletion_timestamp: Option<Time>,
    finalizers: Option<Vec<String>>,
    generate_name: Option<String>,
    generation: Option<i64>,
    labels: Option<BTreeMap<String, String>>,
    name: Option<String>,
    namespace: Option<String>,
    owner_references: Option<Vec<OwnerReference>>,
    resource_version: Option<String>,
    uid: Option<String>,
}

#[derive(Deserialize)]
struct WirePod {
    #[serde(default)]
    metadata: WireMeta,
    #[serde(default)]
    spec: Option<PodSpec>,
    #[serde(default)]
    status: Option<PodStatus>,
}

impl<'de> Deserialize<'de> for WatchedPod {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        let w = WirePod::deserialize(d)?;
        let m = w.metadata;
        Ok(WatchedPod(Pod {
            metadata: ObjectMeta {
                annotations: m.annotations,
                creation_timestamp: m.creation_timestamp,
                deletion_grace_period_seconds: m.deletion_grace_period_seconds,
                deletion_timestamp: m.deletion_timestamp,
                finalizers: m.finalizers,
                generate_name: m.generate_name,
                generation: m.generation,
                labels: m.labels,
                managed_fields: None,
                name: m.name,
                namespace: m.namespace,
                owner_references: m.owner_references,
                resource_version: m.resource_version,
                self_link: None,
                uid: m.uid,
            },
            spec: w.spec,
            status: w.status,
        }))
    }
}

impl Resource for WatchedPod {
    type DynamicType = ();
    type Scope = NamespaceResourceScope;

    fn kind(dt: &()) -> Cow<'_, str> {
        Pod::kind(dt)
    }
    fn group(dt: &()) -> Cow<'_, str> {
        Pod::group(dt)
    }
    fn version(dt: &()) -> Cow<'_, str> {
        Pod::version(dt)
    }
    fn plural(dt: &()) -> Cow<'_, str> {
        Pod::plural(dt)
    }
    fn meta(&self) -> &ObjectMeta {
        &self.0.metadata
    }
    fn meta_mut(&mut self) -> &mut ObjectMeta {
        &mut self.0.metadata
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::kube::ResourceExt;

    #[test]
    fn decodes_everything_but_managed_fields() {
        let json = serde_json::json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {
                "name": "web-1", "namespace": "ns", "uid": "u-1", "resourceVersion": "42",
                "labels": {"app": "web"}, "annotations": {"a": "b"},
                "ownerReferences": [{"apiVersion": "apps/v1", "kind": "ReplicaSet",
                                     "name": "web", "uid": "rs-1", "controller": true}],
                "deletionTimestamp": "2026-11-27T06:00:00Z",
                "creationTimestamp": "2026-11-27T05:00:00Z",
                "finalizers": ["f"], "generateName": "web-",
                "managedFields": [{"manager": "kubectl", "operation": "Update",
                                   "apiVersion": "v1", "fieldsType": "FieldsV1",
                                   "fieldsV1": {"f:spec": {"f:containers": {}}}}]
            },
            "spec": {"schedulerName": "loadstar", "nodeName": "n1",
                     "containers": [{"name": "c", "image": "i",
                                     "resources": {"requests": {"cpu": "100m"}}}]},
            "status": {"phase": "Pending", "nominatedNodeName": "n2"}
        });
        let full: Pod = serde_json::from_value(json.clone()).expect("pod");
        let watched: WatchedPod = serde_json::from_value(json).expect("watched pod");
        assert!(full.metadata.managed_fields.is_some());
        let mut expected = full;
        expected.metadata.managed_fields = None;
        assert_eq!(watched.0, expected);
        assert_eq!(watched.name_any(), "web-1");
        assert_eq!(
            WatchedPod::url_path(&(), Some("ns")),
            Pod::url_path(&(), Some("ns"))
        );
    }

    #[test]
    fn malformed_pods_are_errors_not_panics() {
        for bad in [
            serde_json::json!({"metadata": {"name": 3}}),
            serde_json::json!({"metadata": {"name": "x"}, "spec": {"containers": "no"}}),
            serde_json::json!([1, 2]),
        ] {
            assert!(serde_json::from_value::<WatchedPod>(bad).is_err());
        }
    }
}
