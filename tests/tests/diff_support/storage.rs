//! Storage objects of the differential test on the API server: creating a scenario's
//! PersistentVolumes and claims (and the refusal test's StorageClasses), the probe's own
//! volume and claim, and deleting them all again.
//!
//! Deleting needs care without a kube-controller-manager: the StorageObjectInUseProtection
//! admission plugin gives every claim and volume a protection finalizer that only the
//! controller removes, so a plain delete would leave them Terminating forever (and in every
//! scheduler's cache). The finalizers are cleared first.
use std::fmt::Debug;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::scenario::{BIND_COMPLETED, DELETE_GRACEFULLY, Scenario, after_create, str_at};

async fn create<K>(api: Api<K>, object: &Value, kind: &str) -> Result<()>
where
    K: Resource + Clone + DeserializeOwned + Serialize + Debug,
{
    let name = str_at(object, "/metadata/name");
    let typed: K = serde_json::from_value(object.clone())
        .with_context(|| format!("{kind} {name} is not a {kind}"))?;
    api.create(&PostParams::default(), &typed)
        .await
        .with_context(|| format!("creating {kind} {name}"))?;
    Ok(())
}

/// Creates a PersistentVolume.
pub async fn create_volume(client: &Client, volume: &Value) -> Result<()> {
    create::<PersistentVolume>(Api::all(client.clone()), volume, "PersistentVolume").await
}

/// Creates a claim (in its `metadata.namespace`).
pub async fn create_claim(client: &Client, claim: &Value) -> Result<()> {
    let ns = str_at(claim, "/metadata/namespace");
    create::<PersistentVolumeClaim>(
        Api::namespaced(client.clone(), &ns),
        claim,
        "PersistentVolumeClaim",
    )
    .await
}

/// Creates a StorageClass.
pub async fn create_class(client: &Client, class: &Value) -> Result<()> {
    create::<StorageClass>(Api::all(client.clone()), class, "StorageClass").await
}

/// Clears the finalizers, then deletes; best effort (a leftover has a unique name and
/// disturbs nothing but the caches' size).
async fn delete_unprotected<K>(api: Api<K>, name: &str)
where
    K: Resource + Clone + DeserializeOwned + Debug,
{
    let clear = json!({"metadata": {"finalizers": null}});
    let _ = api
        .patch(name, &PatchParams::default(), &Patch::Merge(&clear))
        .await;
    let dp = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    let _ = api.delete(name, &dp).await;
}

/// Deletes claims (JSON objects with `metadata.namespace`) and volumes (by name).
pub async fn delete_storage(client: &Client, claims: &[Value], volumes: &[String]) {
    let claims = claims.iter().map(|c| {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(client.clone(), &str_at(c, "/metadata/namespace"));
        let name = str_at(c, "/metadata/name");
        async move { delete_unprotected(api, &name).await }
    });
    futures::future::join_all(claims).await;
    let volumes = volumes.iter().map(|v| {
        let api: Api<PersistentVolume> = Api::all(client.clone());
        async move { delete_unprotected(api, v).await }
    });
    futures::future::join_all(volumes).await;
}

/// Deletes a StorageClass (best effort).
pub async fn delete_class(client: &Client, name: &str) {
    let api: Api<StorageClass> = Api::all(client.clone());
    let _ = api.delete(name, &DeleteParams::default()).await;
}

/// A `hostPath` volume `volume` without node affinity or zone labels, and the claim
/// `namespace/claim` fully bound to it: mounting the claim changes no node's feasibility.
pub fn neutral_volume_and_claim(volume: &str, namespace: &str, claim: &str) -> (Value, Value) {
    let pv = json!({
        "metadata": {"name": volume},
        "spec": {
            "hostPath": {"path": format!("/tmp/loadstar-diff/{volume}")},
            "capacity": {"storage": "1Gi"},
            "accessModes": ["ReadWriteOnce"],
            "persistentVolumeReclaimPolicy": "Retain",
            "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                         "namespace": namespace, "name": claim}
        }
    });
    let pvc = json!({
        "metadata": {"name": claim, "namespace": namespace,
                     "annotations": {BIND_COMPLETED: "yes"}},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}},
            "storageClassName": "",
            "volumeName": volume
        }
    });
    (pv, pvc)
}

/// The probe's volume and claim (in the probes' namespace) for the scenario `tag`.
pub fn probe_storage_names(tag: &str) -> (String, String) {
    (format!("{tag}-probe-pv"), format!("{tag}-probe"))
}

/// Creates the scenario's volumes and claims, deletes the claims marked so (their finalizer
/// keeps them, Terminating), then creates the probe's volume and claim (see the runner's
/// module docs): after all that, so a cache that has the probe's has the scenario's.
pub async fn create_scenario_storage(
    client: &Client,
    sc: &Scenario,
    probe_ns: &str,
    tag: &str,
) -> Result<()> {
    if !sc.has_storage() {
        return Ok(());
    }
    let created: Vec<Result<()>> = futures::stream::iter(&sc.volumes)
        .map(|v| create_volume(client, v))
        .buffer_unordered(8)
        .collect()
        .await;
    created.into_iter().collect::<Result<Vec<()>>>()?;
    let created: Vec<Result<()>> = futures::stream::iter(&sc.claims)
        .map(|c| create_claim(client, c))
        .buffer_unordered(8)
        .collect()
        .await;
    created.into_iter().collect::<Result<Vec<()>>>()?;
    for c in sc
        .claims
        .iter()
        .filter(|c| after_create(c) == Some(DELETE_GRACEFULLY))
    {
        let api: Api<PersistentVolumeClaim> =
            Api::namespaced(client.clone(), &str_at(c, "/metadata/namespace"));
        let name = str_at(c, "/metadata/name");
        api.delete(&name, &DeleteParams::default())
            .await
            .with_context(|| format!("deleting claim {name} (it stays, Terminating)"))?;
    }
    let (volume, claim) = probe_storage_names(tag);
    let (volume, claim) = neutral_volume_and_claim(&volume, probe_ns, &claim);
    create_volume(client, &volume).await?;
    create_claim(client, &claim).await
}

/// Deletes what [`create_scenario_storage`] created (best effort).
pub async fn delete_scenario_storage(client: &Client, sc: &Scenario, probe_ns: &str, tag: &str) {
    if !sc.has_storage() {
        return;
    }
    let (volume, claim) = probe_storage_names(tag);
    let (_, probe_claim) = neutral_volume_and_claim(&volume, probe_ns, &claim);
    let claims: Vec<Value> = sc.claims.iter().cloned().chain([probe_claim]).collect();
    let volumes: Vec<String> = sc
        .volumes
        .iter()
        .map(|v| str_at(v, "/metadata/name"))
        .chain([volume])
        .collect();
    delete_storage(client, &claims, &volumes).await;
}
