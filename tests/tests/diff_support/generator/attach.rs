//! The generator's draws for attach limits (`NodeVolumeLimits`, `EBSLimits`,
//! `GCEPDLimits`): CSI volumes of one driver bound to claims that existing pods on the nodes
//! and the incoming pod mount, per-node limits for that driver from allocatable or from a
//! CSINode (which overrides allocatable), an existing pod's claim still waiting for its
//! class to provision (it counts as itself); inline EBS and GCE disks with per-node limits
//! from allocatable. Drawn from their own random stream after everything else, so a
//! scenario without them is exactly what it was before.
//!
//! A scenario with CSINodes gives every node one, each admitting one volume of
//! [`PROBE_DRIVER`] that the node's allocatable (0 of them) does not: the barrier's probe
//! mounts such a volume, so a scheduler whose cache lacks a node's CSINode cannot let the
//! probe onto it (the runner's module docs).
use std::collections::BTreeSet;

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use serde_json::{Value, json};

use super::DrawFor;
use crate::diff_support::scenario::*;

/// Salt of the attach limits' random stream (chosen so that no regression case of
/// `e2e_diff` draws from it).
pub const ATTACH_STREAM: u64 = 0x6174_7461_6368_0006;
/// Share of scenarios with CSI attach limits.
const CSI_SHARE: f64 = 0.15;
/// Share of scenarios with in-tree disk limits.
const IN_TREE_SHARE: f64 = 0.12;
/// The scenarios' CSI driver.
pub const DRIVER: &str = "disk.csi.diff.example";
/// The probe's CSI driver (scenarios with CSINodes only).
pub const PROBE_DRIVER: &str = "probe.csi.diff.example";
/// The allocatable key of a CSI driver's limit.
pub fn csi_key(driver: &str) -> String {
    format!("attachable-volumes-csi-{driver}")
}

/// What the draw adds besides mounts and node limits.
#[derive(Default)]
pub(super) struct Attach {
    pub volumes: Vec<Value>,
    pub claims: Vec<Value>,
    pub classes: Vec<Value>,
    pub csinodes: Vec<Value>,
}

fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> T {
    items.choose(rng).expect("non-empty vocabulary").clone()
}

/// Appends volumes to a pod's `spec.volumes`.
pub(super) fn add_volumes(pod: &mut Value, more: Vec<Value>) {
    if more.is_empty() {
        return;
    }
    let spec = &mut pod["spec"];
    match spec.get_mut("volumes").and_then(Value::as_array_mut) {
        Some(v) => v.extend(more),
        None => spec["volumes"] = Value::Array(more),
    }
}

fn claim_volume(name: &str, claim: &str) -> Value {
    json!({"name": name, "persistentVolumeClaim": {"claimName": claim}})
}

/// Sometimes gives the scenario attach limits to meet.
pub(super) fn draw(
    at: &DrawFor<'_>,
    nodes: &mut [Value],
    pods: &mut [Value],
    incoming: &mut Value,
    features: &mut BTreeSet<Feature>,
) -> Attach {
    let mut rng = at.rng(ATTACH_STREAM);
    let mut out = Attach::default();
    if rng.random_bool(CSI_SHARE) {
        features.insert(Feature::AttachLimits);
        if rng.random_bool(0.5) {
            features.insert(Feature::CsiNodes);
        }
        let with_csinodes = features.contains(&Feature::CsiNodes);
        csi(&mut rng, at, with_csinodes, nodes, pods, incoming, &mut out);
    }
    if rng.random_bool(IN_TREE_SHARE) {
        features.insert(Feature::AttachLimits);
        in_tree(&mut rng, nodes, pods, incoming);
    }
    out
}

/// The pods of `namespace` bound to a node (mounting claims needs the claim's namespace).
fn own_pods<'a>(pods: &'a mut [Value], namespace: &'a str) -> impl Iterator<Item = &'a mut Value> {
    pods.iter_mut().filter(move |p| {
        str_at(p, "/metadata/namespace") == namespace
            && str_at(p, "/metadata/name").starts_with('e')
    })
}

fn csi(
    rng: &mut StdRng,
    at: &DrawFor<'_>,
    with_csinodes: bool,
    nodes: &mut [Value],
    pods: &mut [Value],
    incoming: &mut Value,
    out: &mut Attach,
) {
    let (prefix, namespace) = (at.prefix, at.namespace);
    for n in nodes.iter_mut() {
        let name = str_at(n, "/metadata/name");
        let alloc = &mut n["status"]["allocatable"];
        // Limits: none, from allocatable, from the CSINode, or both (the CSINode wins).
        let from_allocatable = rng.random_bool(0.5);
        if from_allocatable {
            alloc[csi_key(DRIVER)] = json!(pick(rng, &["1", "2", "3"]));
        }
        if !with_csinodes {
            continue;
        }
        alloc[csi_key(PROBE_DRIVER)] = json!("0");
        let mut drivers = vec![json!({"name": PROBE_DRIVER, "nodeID": name,
                                      "allocatable": {"count": 1}})];
        match rng.random_range(0..3) {
            0 => drivers.push(json!({"name": DRIVER, "nodeID": name,
                                     "allocatable": {"count": pick(rng, &[1, 2, 3])}})),
            // Registered without a limit: allocatable's stands.
            1 => drivers.push(json!({"name": DRIVER, "nodeID": name})),
            _ => {}
        }
        out.csinodes
            .push(json!({"metadata": {"name": name}, "spec": {"drivers": drivers}}));
    }
    // Volumes, each bound to a claim `k<i>`; two may share a handle (one attachment).
    let count = rng.random_range(2..=6);
    let mut claims = Vec::new();
    for i in 0..count {
        let pv = format!("{prefix}-csi{i}");
        let claim = format!("k{i}");
        let handle = if i > 0 && rng.random_bool(0.15) {
            format!("{prefix}-h{}", i - 1)
        } else {
            format!("{prefix}-h{i}")
        };
        out.volumes.push(json!({
            "metadata": {"name": pv},
            "spec": {
                "csi": {"driver": DRIVER, "volumeHandle": handle},
                "capacity": {"storage": "1Gi"},
                "accessModes": ["ReadWriteOnce"],
                "persistentVolumeReclaimPolicy": "Retain",
                "claimRef": {"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                             "namespace": namespace, "name": claim}
            }
        }));
        out.claims.push(json!({
            "metadata": {"name": claim, "namespace": namespace,
                         "annotations": {BIND_COMPLETED: "yes"}},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": "", "volumeName": pv}
        }));
        claims.push(claim);
    }
    // An unbound claim whose class provisions with the driver: it counts as itself.
    let mut unbound = None;
    if rng.random_bool(0.4) {
        let class = format!("{prefix}-csi");
        out.classes
            .push(json!({"metadata": {"name": class}, "provisioner": DRIVER,
                                "volumeBindingMode": "WaitForFirstConsumer"}));
        out.claims.push(json!({
            "metadata": {"name": "kw", "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}},
                     "storageClassName": class}
        }));
        unbound = Some("kw".to_string());
    }
    for p in own_pods(pods, namespace) {
        if rng.random_bool(0.6) {
            let n = rng.random_range(1..=2);
            let mut mounts: Vec<Value> = (0..n)
                .map(|k| claim_volume(&format!("a{k}"), &pick(rng, &claims)))
                .collect();
            if let Some(u) = unbound.as_ref().filter(|_| rng.random_bool(0.3)) {
                mounts.push(claim_volume("aw", u));
            }
            add_volumes(p, mounts);
        }
    }
    let n = rng.random_range(1..=2);
    let mounts = (0..n)
        .map(|k| claim_volume(&format!("a{k}"), &pick(rng, &claims)))
        .collect();
    add_volumes(incoming, mounts);
}

fn in_tree(rng: &mut StdRng, nodes: &mut [Value], pods: &mut [Value], incoming: &mut Value) {
    const EBS: &[&str] = &["vol-1", "vol-2", "vol-3", "vol-4"];
    const GCE: &[&str] = &["pd-1", "pd-2", "pd-3"];
    for n in nodes.iter_mut() {
        let alloc = &mut n["status"]["allocatable"];
        if rng.random_bool(0.5) {
            alloc["attachable-volumes-aws-ebs"] = json!(pick(rng, &["1", "2", "3"]));
        }
        if rng.random_bool(0.3) {
            alloc["attachable-volumes-gce-pd"] = json!(pick(rng, &["1", "2"]));
        }
    }
    let disk = |rng: &mut StdRng, k: usize| {
        if rng.random_bool(0.7) {
            json!({"name": format!("b{k}"), "awsElasticBlockStore": {"volumeID": pick(rng, EBS)}})
        } else {
            // Read-only GCE disks never conflict (VolumeRestrictions), so only the limit
            // can turn a node away.
            json!({"name": format!("b{k}"), "gcePersistentDisk": {"pdName": pick(rng, GCE),
                                                                  "readOnly": true}})
        }
    };
    for p in pods.iter_mut() {
        if rng.random_bool(0.5) {
            let n = rng.random_range(1..=2);
            let disks = (0..n).map(|k| disk(rng, k)).collect();
            add_volumes(p, disks);
        }
    }
    let n = rng.random_range(1..=2);
    let disks = (0..n).map(|k| disk(rng, k)).collect();
    add_volumes(incoming, disks);
}
