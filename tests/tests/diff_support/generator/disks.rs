//! The generator's draws for inline disks (`VolumeRestrictions`): iSCSI targets and RBD
//! images on the incoming pod and on some existing pods, read-only or not, RBD monitors that
//! overlap or not, pools spelled out or left to the API server's default; existing pods also
//! hold GCE and EBS disks, which count against newcomers whatever they are (an incoming pod
//! with one is refused by Loadstar on purpose: attach limits). Drawn from their own random
//! stream after everything else, so a scenario without disks is exactly what it was before.
use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use rand::seq::IndexedRandom;
use serde_json::{Value, json};

use super::mix;
use crate::diff_support::scenario::*;

/// Salt of the disks' random stream.
pub const DISK_STREAM: u64 = 0x6469_736B_0000_0003;
/// Share of scenarios with inline disks.
const DISK_SHARE: f64 = 0.2;

const MONITORS: &[&str] = &["10.0.0.1:6789", "10.0.0.2:6789", "10.0.0.3:6789"];
const IMAGES: &[&str] = &["img-a", "img-a", "img-b"];
const IQNS: &[&str] = &[
    "iqn.2001-04.com.example:a",
    "iqn.2001-04.com.example:a",
    "iqn.2001-04.com.example:b",
];

fn pick<T: Clone>(rng: &mut StdRng, items: &[T]) -> T {
    items.choose(rng).expect("non-empty vocabulary").clone()
}

/// One disk a pod may carry (`cloud`: GCE and EBS too).
fn disk(rng: &mut StdRng, name: &str, cloud: bool) -> Value {
    let read_only = rng.random_bool(0.3);
    let kinds: &[&str] = if cloud {
        &["rbd", "iscsi", "gce", "ebs"]
    } else {
        &["rbd", "iscsi"]
    };
    match pick(rng, kinds) {
        "rbd" => {
            let n = rng.random_range(1..=2);
            let start = rng.random_range(0..MONITORS.len());
            let monitors: Vec<&str> = (0..n)
                .map(|k| MONITORS[(start + k) % MONITORS.len()])
                .collect();
            let mut rbd = json!({"monitors": monitors, "image": pick(rng, IMAGES),
                                 "readOnly": read_only});
            // Left out, the API server writes its default `rbd`.
            if let Some(pool) = pick(rng, &[None, Some("rbd"), None, Some("fast")]) {
                rbd["pool"] = json!(pool);
            }
            json!({"name": name, "rbd": rbd})
        }
        "iscsi" => json!({"name": name, "iscsi": {
            "targetPortal": "10.0.0.9:3260", "iqn": pick(rng, IQNS), "lun": 0,
            "readOnly": read_only}}),
        "gce" => json!({"name": name, "gcePersistentDisk": {
            "pdName": pick(rng, &["pd-a", "pd-b"]), "readOnly": read_only}}),
        _ => json!({"name": name, "awsElasticBlockStore": {
            "volumeID": pick(rng, &["vol-a", "vol-b"])}}),
    }
}

fn add(pod: &mut Value, disks: Vec<Value>) {
    let spec = &mut pod["spec"];
    match spec.get_mut("volumes").and_then(Value::as_array_mut) {
        Some(v) => v.extend(disks),
        None => spec["volumes"] = Value::Array(disks),
    }
}

/// Sometimes gives the incoming pod and some existing pods inline disks.
pub(super) fn draw(
    seed: u64,
    index: usize,
    pods: &mut [Value],
    incoming: &mut Value,
    features: &mut std::collections::BTreeSet<Feature>,
) {
    let mut rng = StdRng::seed_from_u64(mix(seed ^ mix(index as u64) ^ DISK_STREAM));
    if !rng.random_bool(DISK_SHARE) {
        return;
    }
    features.insert(Feature::InlineDisks);
    for pod in pods.iter_mut() {
        if rng.random_bool(0.5) {
            let n = rng.random_range(1..=2);
            let disks = (0..n)
                .map(|k| disk(&mut rng, &format!("d{k}"), true))
                .collect();
            add(pod, disks);
        }
    }
    let n = rng.random_range(1..=2);
    let disks = (0..n)
        .map(|k| disk(&mut rng, &format!("d{k}"), false))
        .collect();
    add(incoming, disks);
}
