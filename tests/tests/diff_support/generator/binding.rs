//! The generator's draws for claims the scheduler binds (`VolumeBinding` with
//! `WaitForFirstConsumer`): a class without a provisioner and sometimes one that provisions
//! (with or without allowed topologies); volumes of those classes — pinned to a node or a
//! zone or not at all, of several sizes, access modes and volume modes, labelled for claim
//! selectors, most `Available` (the runner writes their status, as the PV controller
//! would), some already claimed by another claim or pre-bound to the incoming pod's; and
//! unbound claims of those classes, some with a selector or an earlier scheduling decision
//! (`volume.kubernetes.io/selected-node`), that the incoming pod mounts. Drawn from their own
//! random stream after everything else, so a scenario without them is exactly what it was
//! before.
use std::collections::BTreeSet;

use rand::Rng;
use rand::rngs::StdRng;
use rand::seq::{IndexedRandom, SliceRandom};
use serde_json::{Map, Value, json};

use super::DrawFor;
use super::attach::{DRIVER, add_volumes};
use crate::diff_support::scenario::*;

/// Salt of the binding's random stream (chosen so that no regression case of `e2e_diff`
/// draws from it).
pub const BINDING_STREAM: u64 = 0x6269_6E64_0000_0005;
/// Share of scenarios with claims to bind.
const BINDING_SHARE: f64 = 0.2;
/// The class annotation volumes carried before `storageClassName`.
const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// What the draw adds besides the incoming pod's mounts.
#[derive(Default)]
pub(super) struct Binding {
    pub volumes: Vec<Value>,
    pub claims: Vec<Value>,
    pub classes: Vec<Value>,
}

fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> T {
    items.choose(rng).expect("non-empty vocabulary").clone()
}

/// Sometimes gives the incoming pod claims to bind.
pub(super) fn draw(
    at: &DrawFor<'_>,
    nodes: &[Value],
    zones: &[&str],
    incoming: &mut Value,
    features: &mut BTreeSet<Feature>,
) -> Binding {
    let (prefix, namespace) = (at.prefix, at.namespace);
    let mut rng = at.rng(BINDING_STREAM);
    let mut out = Binding::default();
    if !rng.random_bool(BINDING_SHARE) {
        return out;
    }
    features.insert(Feature::ClaimsToBind);
    let node_names: Vec<String> = nodes.iter().map(|n| str_at(n, "/metadata/name")).collect();
    let local = format!("{prefix}-wffc");
    out.classes.push(json!({"metadata": {"name": local},
        "provisioner": "kubernetes.io/no-provisioner",
        "volumeBindingMode": "WaitForFirstConsumer"}));
    let mut classes = vec![local.clone()];
    if rng.random_bool(0.4) {
        let dynamic = format!("{prefix}-dyn");
        let mut class = json!({"metadata": {"name": dynamic}, "provisioner": DRIVER,
                               "volumeBindingMode": "WaitForFirstConsumer"});
        if rng.random_bool(0.6) {
            let mut some: Vec<&str> = zones.to_vec();
            some.shuffle(&mut rng);
            some.truncate(rng.random_range(1..=2));
            class["allowedTopologies"] =
                json!([{"matchLabelExpressions": [{"key": ZONE, "values": some}]}]);
        }
        out.classes.push(class);
        classes.push(dynamic);
    }
    let claims: Vec<String> = (0..rng.random_range(1..=2))
        .map(|i| format!("w{i}"))
        .collect();
    for (i, name) in claims.iter().enumerate() {
        let mut c = json!({
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": pick(&mut rng, &["1Gi", "2Gi"])}},
                     "storageClassName": pick(&mut rng, &classes)}
        });
        if rng.random_bool(0.2) {
            c["spec"]["selector"] = json!({"matchLabels": {"tier": "fast"}});
        }
        if rng.random_bool(0.1) {
            // An earlier decision the provisioner is acting on: only that node.
            c["metadata"]["annotations"] =
                json!({"volume.kubernetes.io/selected-node": pick(&mut rng, &node_names)});
        }
        if i == 0 && rng.random_bool(0.1) {
            c["spec"]["accessModes"] = json!(["ReadOnlyMany"]);
        }
        out.claims.push(c);
    }
    for i in 0..rng.random_range(1..=5) {
        out.volumes.push(volume(
            &mut rng,
            &format!("{prefix}-w{i}"),
            &local,
            namespace,
            &claims,
            &node_names,
            zones,
        ));
    }
    let mounts: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("w{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    add_volumes(incoming, mounts);
    out
}

/// A volume of the class `class` (sometimes named by the beta annotation).
fn volume(
    rng: &mut StdRng,
    name: &str,
    class: &str,
    namespace: &str,
    claims: &[String],
    nodes: &[String],
    zones: &[&str],
) -> Value {
    let mut metadata = json!({"name": name});
    let mut spec = Map::new();
    if rng.random_bool(0.2) {
        metadata["annotations"] = json!({BETA_CLASS: class});
    } else {
        spec.insert("storageClassName".into(), json!(class));
    }
    if rng.random_bool(0.4) {
        metadata["labels"] = json!({"tier": pick(rng, &["fast", "slow"])});
    }
    spec.insert(
        "capacity".into(),
        json!({"storage": pick(rng, &["1Gi", "2Gi", "5Gi", "512Mi"])}),
    );
    let modes = if rng.random_bool(0.85) {
        json!(["ReadWriteOnce"])
    } else {
        json!(["ReadOnlyMany"])
    };
    spec.insert("accessModes".into(), modes);
    spec.insert("persistentVolumeReclaimPolicy".into(), json!("Retain"));
    let pin = match rng.random_range(0..4) {
        0 | 1 => Some(json!({"key": HOSTNAME, "operator": "In", "values": [pick(rng, nodes)]})),
        2 => Some(json!({"key": ZONE, "operator": "In", "values": [pick(rng, zones)]})),
        _ => None,
    };
    match pin {
        Some(expr) => {
            if rng.random_bool(0.1) {
                // A raw block device: no claim here asks for one.
                spec.insert("volumeMode".into(), json!("Block"));
            }
            spec.insert(
                "local".into(),
                json!({"path": format!("/mnt/disks/{name}")}),
            );
            spec.insert(
                "nodeAffinity".into(),
                json!({"required": {"nodeSelectorTerms": [{"matchExpressions": [expr]}]}}),
            );
        }
        None => {
            spec.insert(
                "hostPath".into(),
                json!({"path": format!("/tmp/loadstar-diff/{name}")}),
            );
        }
    }
    // Mostly free; some claimed by another claim, some pre-bound to one of ours.
    let phase = match rng.random_range(0..10) {
        0 => {
            spec.insert(
                "claimRef".into(),
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "namespace": namespace, "name": "someone-else"}),
            );
            "Bound"
        }
        1 => {
            spec.insert(
                "claimRef".into(),
                json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                       "namespace": namespace, "name": pick(rng, claims)}),
            );
            "Available"
        }
        2 => "Released",
        _ => "Available",
    };
    json!({"metadata": metadata, "spec": spec, "status": {"phase": phase}})
}
