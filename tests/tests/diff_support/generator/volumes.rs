//! The generator's draws for storage: PersistentVolumes (`hostPath` or `local`, with or
//! without required node affinity, zone and region labels), claims pre-bound to them as the
//! PV controller would leave them, a few claims that are not (unbound without a class,
//! pre-bound but not complete, bound to a volume that does not exist, being deleted), and the
//! pods that mount them. Drawn from their own random stream after everything else, so a scenario
//! without volumes is exactly what it was before volumes existed.
//!
//! Everything here is something kube-scheduler 1.20 answers with "Unschedulable" (never an
//! error) and Loadstar claims to implement: no storage classes, so neither
//! `WaitForFirstConsumer` (Loadstar refuses those pods on purpose: `e2e_diff`'s refusal test)
//! nor a class that does not exist (an error in kube-scheduler); no CSI or cloud-disk volumes
//! (refused on purpose too).
use rand::Rng;
use serde_json::{Map, Value, json};

use super::Gen;
use crate::diff_support::scenario::*;

/// Share of scenarios with volumes and claims.
const VOLUME_SHARE: f64 = 0.3;
/// The finalizer that keeps a deleted claim Terminating (the runner clears it).
pub const KEEP_FINALIZER: &str = "loadstar-diff/keep";
/// A zone no generated node is in.
const NOWHERE_ZONE: &str = "zone-x";

/// What a claim is, for the scenario's features.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClaimKind {
    /// Fully bound to an existing volume: (its volume has node affinity, zone labels).
    Bound { affinity: bool, zoned: bool },
    /// Unbound, pre-bound but not complete, bound to a missing volume, being deleted.
    NotBound,
}

/// The volumes and claims of one scenario, and the pods' mounts.
pub(super) struct Storage {
    pub volumes: Vec<Value>,
    pub claims: Vec<Value>,
}

fn claim(namespace: &str, name: &str) -> Value {
    json!({
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "resources": {"requests": {"storage": "1Gi"}}
        }
    })
}

/// Adds `claims` to the pod's `spec.volumes` (as `v0`, `v1`, …).
fn mount(pod: &mut Value, claims: &[String]) {
    if claims.is_empty() {
        return;
    }
    let volumes: Vec<Value> = claims
        .iter()
        .enumerate()
        .map(|(i, c)| json!({"name": format!("v{i}"), "persistentVolumeClaim": {"claimName": c}}))
        .collect();
    pod["spec"]["volumes"] = Value::Array(volumes);
}

impl Gen {
    /// Sometimes ([`VOLUME_SHARE`]) volumes and claims for the scenario named by `prefix`;
    /// mounts some on `incoming` and on the existing pods `pods` (named `e…`).
    pub(super) fn storage(
        &mut self,
        prefix: &str,
        pods: &mut [Value],
        incoming: &mut Value,
    ) -> Storage {
        let mut out = Storage {
            volumes: Vec::new(),
            claims: Vec::new(),
        };
        if !self.chance(VOLUME_SHARE) {
            return out;
        }
        self.features.insert(Feature::Volumes);
        let ns = self.namespaces[0].clone();
        let mut kinds: Vec<(String, ClaimKind)> = Vec::new();
        for i in 0..self.rng.random_range(1..=3) {
            let pv = format!("{prefix}-pv{i}");
            let name = format!("c{i}");
            let (volume, affinity, zoned) = self.persistent_volume(&pv, &ns, &name);
            out.volumes.push(volume);
            let mut c = claim(&ns, &name);
            c["metadata"]["annotations"] = json!({BIND_COMPLETED: "yes"});
            c["spec"]["volumeName"] = json!(pv);
            c["spec"]["storageClassName"] = json!("");
            out.claims.push(c);
            kinds.push((name, ClaimKind::Bound { affinity, zoned }));
        }
        if self.chance(0.08) {
            // A bound claim being deleted: its finalizer keeps it (Terminating) after the
            // runner deletes it (`AFTER_CREATE`), and kube-scheduler 1.20 turns the pod away
            // (`persistentvolumeclaim "c0" is being deleted`).
            let i = self.rng.random_range(0..out.claims.len());
            let meta = &mut out.claims[i]["metadata"];
            meta["annotations"][AFTER_CREATE] = json!(DELETE_GRACEFULLY);
            meta["finalizers"] = json!([KEEP_FINALIZER]);
            kinds[i].1 = ClaimKind::NotBound;
        }
        if self.chance(0.3) {
            // Unbound, no class: kube-scheduler's "unbound immediate" claim. Without
            // `storageClassName` the DefaultStorageClass admission would fill in a default
            // class; there is none.
            let mut c = claim(&ns, "unbound");
            if self.chance(0.5) {
                c["spec"]["storageClassName"] = json!("");
            }
            out.claims.push(c);
            kinds.push(("unbound".into(), ClaimKind::NotBound));
        }
        if self.chance(0.15) {
            // Names a volume but the binding is not complete: unbound immediate too.
            let mut c = claim(&ns, "prebound");
            c["spec"]["volumeName"] = json!(format!("{prefix}-pv0"));
            c["spec"]["storageClassName"] = json!("");
            out.claims.push(c);
            kinds.push(("prebound".into(), ClaimKind::NotBound));
        }
        if self.chance(0.1) {
            // Bound to a volume that does not exist: "pvc(s) bound to non-existent pv(s)".
            let mut c = claim(&ns, "dangling");
            c["metadata"]["annotations"] = json!({BIND_COMPLETED: "yes"});
            c["spec"]["volumeName"] = json!(format!("{prefix}-pv-gone"));
            c["spec"]["storageClassName"] = json!("");
            out.claims.push(c);
            kinds.push(("dangling".into(), ClaimKind::NotBound));
        }
        if self.chance(0.08) {
            // Mounted but never created: `persistentvolumeclaim "missing" not found`.
            kinds.push(("missing".into(), ClaimKind::NotBound));
        }
        let mounted = self.some(&kinds, 0, 2);
        for (_, kind) in &mounted {
            match *kind {
                ClaimKind::Bound { affinity, zoned } => {
                    if affinity {
                        self.features.insert(Feature::VolumeNodeAffinity);
                    }
                    if zoned {
                        self.features.insert(Feature::VolumeZones);
                    }
                }
                ClaimKind::NotBound => {
                    self.features.insert(Feature::UnboundClaims);
                }
            }
        }
        let mounted: Vec<String> = mounted.into_iter().map(|(n, _)| n).collect();
        mount(incoming, &mounted);
        // Existing pods' claims change no 1.20 filter for these volume kinds; they show that.
        let existing: Vec<String> = kinds
            .iter()
            .filter(|(n, _)| n != "missing")
            .map(|(n, _)| n.clone())
            .collect();
        for p in pods.iter_mut() {
            let own = str_at(p, "/metadata/namespace") == ns
                && str_at(p, "/metadata/name").starts_with('e');
            if own && self.chance(0.25) {
                let c = self.pick(&existing);
                mount(p, &[c]);
            }
        }
        out
    }

    /// A volume bound to the claim `namespace/claim`: `(object, has node affinity, has zone
    /// or region labels)`.
    fn persistent_volume(
        &mut self,
        name: &str,
        namespace: &str,
        claim: &str,
    ) -> (Value, bool, bool) {
        let local = self.chance(0.4);
        let source = if local {
            json!({"local": {"path": format!("/mnt/disks/{name}")}})
        } else {
            json!({"hostPath": {"path": format!("/tmp/loadstar-diff/{name}")}})
        };
        let mut spec = source.as_object().cloned().unwrap_or_default();
        spec.insert("capacity".into(), json!({"storage": "1Gi"}));
        spec.insert("accessModes".into(), json!(["ReadWriteOnce"]));
        spec.insert("persistentVolumeReclaimPolicy".into(), json!("Retain"));
        spec.insert(
            "claimRef".into(),
            json!({"apiVersion": "v1", "kind": "PersistentVolumeClaim",
                   "namespace": namespace, "name": claim}),
        );
        // API validation: a local volume must have node affinity.
        let affinity = local || self.chance(0.5);
        if affinity {
            let terms: Vec<Value> = (0..self.rng.random_range(1..=2))
                .map(|_| self.volume_term(name))
                .collect();
            spec.insert(
                "nodeAffinity".into(),
                json!({"required": {"nodeSelectorTerms": terms}}),
            );
        }
        let labels = self.volume_zone_labels();
        let zoned = !labels.is_empty();
        let mut metadata = json!({"name": name});
        if zoned {
            metadata["labels"] = Value::Object(labels);
        }
        (json!({"metadata": metadata, "spec": spec}), affinity, zoned)
    }

    /// One term of a volume's required node affinity: mostly a hostname or zone pin.
    fn volume_term(&mut self, volume: &str) -> Value {
        let names = self.node_names.clone();
        let zones = self.zones.clone();
        let expr = match self.rng.random_range(0..12) {
            0..=3 => {
                let mut hosts = self.some(&names, 1, 2);
                if self.chance(0.1) {
                    // A node that is not there.
                    hosts.push(format!("{volume}-gone"));
                }
                json!({"key": HOSTNAME, "operator": "In", "values": hosts})
            }
            4 => json!({"key": HOSTNAME, "operator": "NotIn", "values": self.some(&names, 1, 1)}),
            5..=7 => json!({"key": ZONE, "operator": "In", "values": self.some(&zones, 1, 2)}),
            8 => json!({"key": OLD_ZONE, "operator": "In", "values": self.some(&zones, 1, 1)}),
            9 => json!({"key": ZONE, "operator": self.pick(&["Exists", "DoesNotExist"])}),
            10 => json!({"key": DISK, "operator": "In", "values": [self.pick(&["ssd", "hdd"])]}),
            _ => {
                // A field term. kube-scheduler 1.20.2 matches volume node affinity against a
                // node object that has labels and no name, so its `metadata.name`
                // requirements are never checked (the term holds on every node).
                let node = self.pick_node();
                return json!({"matchFields": [
                    {"key": "metadata.name", "operator": "In", "values": [node]}
                ]});
            }
        };
        json!({"matchExpressions": [expr]})
    }

    /// Sometimes zone (and rarely region) labels, as cloud volumes carry them: one zone,
    /// several joined by `__`, a zone no node is in, or an empty value.
    fn volume_zone_labels(&mut self) -> Map<String, Value> {
        let mut labels = Map::new();
        if !self.chance(0.5) {
            return labels;
        }
        let key = if self.chance(0.7) { ZONE } else { OLD_ZONE };
        let zones = self.zones.clone();
        let value = match self.rng.random_range(0..20) {
            0..=9 => self.pick(&zones).to_string(),
            10..=14 => self.some(&zones, 2, 2).join("__"),
            15..=17 => NOWHERE_ZONE.to_string(),
            // kube-scheduler 1.20 ignores a zone label it cannot parse ("" or an empty
            // element between `__`).
            _ => String::new(),
        };
        labels.insert(key.into(), json!(value));
        if self.chance(0.1) {
            labels.insert(REGION.into(), json!("region-1"));
        }
        labels
    }
}
