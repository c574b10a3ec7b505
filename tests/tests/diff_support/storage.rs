//! Storage objects of the differential test on the API server: creating a scenario's
//! StorageClasses, PersistentVolumes (with the status the PV controller would write) and
//! claims, its CSINodes, the probe's own volume and claim, and deleting them all again.
//!
//! Deleting needs care without a kube-controller-manager: the StorageObjectInUseProtection
//! admission plugin gives every claim and volume a protection finalizer that only the
//! controller removes, so a plain delete would leave them Terminating forever (and in every
//! scheduler's cache). The finalizers are cleared first.
use std::fmt::Debug;

use anyhow::{Context, Result};
use futures::StreamExt;
use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::{Client, Resource};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::{Value, json};

use super::generator::attach::PROBE_DRIVER;
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

/// Creates a PersistentVolume, then writes its `status` if it has one (the PV controller
/// that would does not run here; without it a new volume stays `Pending`).
pub async fn create_volume(client: &Client, volume: &Value) -> Result<()> {
    let api: Api<PersistentVolume> = Api::all(client.clone());
    create::<PersistentVolume>(api.clone(), volume, "PersistentVolume").await?;
    if let Some(status) = volume.get("status") {
        let name = str_at(volume, "/metadata/name");
        api.patch_status(
            &name,
            &PatchParams::default(),
            &Patch::Merge(&json!({"status": status})),
        )
        .await
        .with_context(|| format!("writing the status of PersistentVolume {name}"))?;
    }
    Ok(())
}

/// Creates a CSINode.
pub async fn create_csinode(client: &Client, csinode: &Value) -> Result<()> {
    create::<CSINode>(Api::all(client.clone()), csinode, "CSINode").await
}

/// Deletes CSINodes by name (best effort).
pub async fn delete_csinodes(client: &Client, names: &[String]) {
    let api: Api<CSINode> = Api::all(client.clone());
    futures::future::join_all(names.iter().map(|n| {
        let api = api.clone();
        async move {
            let _ = api.delete(n, &DeleteParams::default()).await;
        }
    }))
    .await;
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

/// [`neutral_volume_and_claim`] as a CSI volume of `driver`: it counts against that
/// driver's attach limit and nothing else.
pub fn csi_volume_and_claim(
    volume: &str,
    namespace: &str,
    claim: &str,
    driver: &str,
) -> (Value, Value) {
    let (mut pv, pvc) = neutral_volume_and_claim(volume, namespace, claim);
    if let Some(spec) = pv["spec"].as_object_mut() {
        spec.remove("hostPath");
        spec.insert(
            "csi".into(),
            json!({"driver": driver, "volumeHandle": format!("{volume}-handle")}),
        );
    }
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
    for c in &sc.classes {
        create_class(client, c).await?;
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
    let (volume, claim) = probe_storage(sc, probe_ns, tag);
    create_volume(client, &volume).await?;
    create_claim(client, &claim).await
}

/// The probe's volume and claim: a CSI volume of the probe's driver when the scenario has
/// CSINodes (then the probe proves both schedulers have them), else a neutral one.
fn probe_storage(sc: &Scenario, probe_ns: &str, tag: &str) -> (Value, Value) {
    let (volume, claim) = probe_storage_names(tag);
    if sc.probe_needs_csi() {
        csi_volume_and_claim(&volume, probe_ns, &claim, PROBE_DRIVER)
    } else {
        neutral_volume_and_claim(&volume, probe_ns, &claim)
    }
}

/// Deletes what [`create_scenario_storage`] created (best effort).
pub async fn delete_scenario_storage(client: &Client, sc: &Scenario, probe_ns: &str, tag: &str) {
    if !sc.has_storage() {
        return;
    }
    let (probe_volume, probe_claim) = probe_storage(sc, probe_ns, tag);
    let claims: Vec<Value> = sc.claims.iter().cloned().chain([probe_claim]).collect();
    let volumes: Vec<String> = sc
        .volumes
        .iter()
        .chain([&probe_volume])
        .map(|v| str_at(v, "/metadata/name"))
        .collect();
    delete_storage(client, &claims, &volumes).await;
    for c in &sc.classes {
        delete_class(client, &str_at(c, "/metadata/name")).await;
    }
}
