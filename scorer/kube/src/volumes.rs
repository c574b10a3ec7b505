//! A pod's PersistentVolumeClaims resolved against the cluster's claims, volumes and
//! storage classes, as kube-scheduler 1.20's `VolumeBinding` and `VolumeZone` read them,
//! into the [`VolumeNeeds`] the volume filters check. Resolution is pure over a
//! [`VolumeLookup`]; the live lookup is three `kube` reflector stores.
//!
//! A claim is bound when it names a volume and carries `pv.kubernetes.io/bind-completed`
//! (upstream's "fully bound"). Unbound: no storage class, or one with `Immediate` binding,
//! makes the pod unschedulable (`pod has unbound immediate PersistentVolumeClaims`);
//! `WaitForFirstConsumer` needs the scheduler to bind or provision, which Loadstar does not
//! do yet, so the pod is refused by name. A bound volume of a kind whose per-node attach
//! limits `NodeVolumeLimits` counts (CSI, cloud disks) is refused too; others contribute
//! their required node affinity and zone labels.
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use kube::runtime::reflector::{ObjectRef, Store};
use loadstar_framework::snapshot::VolumeNeeds;
use loadstar_policy::volume_zone::ZONE_LABELS;

use crate::constraints::node_term;

/// Annotation marking a claim whose binding the controller completed.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// The beta annotation that named a claim's class before `storageClassName`.
pub const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// Reason for unbound claims with immediate binding (upstream's).
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";

/// Volume kinds whose attach limits per node `NodeVolumeLimits` enforces (not implemented).
const LIMITED_KINDS: &[&str] = &[
    "csi",
    "gcePersistentDisk",
    "awsElasticBlockStore",
    "azureDisk",
    "cinder",
];

/// Where the claims, volumes and classes come from.
pub trait VolumeLookup {
    /// The claim `namespace/name`.
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    /// The volume `name`.
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    /// The storage class `name`.
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
}

/// The live stores the volume reflectors fill.
#[derive(Clone)]
pub struct VolumeStores {
    /// Claims.
    pub claims: Store<PersistentVolumeClaim>,
    /// Volumes.
    pub volumes: Store<PersistentVolume>,
    /// Storage classes.
    pub classes: Store<StorageClass>,
}

impl std::fmt::Debug for VolumeStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeStores")
            .field("claims", &self.claims.state().len())
            .field("volumes", &self.volumes.state().len())
            .field("classes", &self.classes.state().len())
            .finish()
    }
}

impl VolumeLookup for VolumeStores {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.claims.get(&ObjectRef::new(name).within(namespace))
    }
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.volumes.get(&ObjectRef::new(name))
    }
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.classes.get(&ObjectRef::new(name))
    }
}

/// What resolving a pod's claims found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The needs the volume filters check.
    Needs(VolumeNeeds),
    /// Claims Loadstar cannot honour yet, by field: the pod is refused.
    Unsupported(Vec<String>),
}

fn unschedulable(reason: String) -> Resolved {
    Resolved::Needs(VolumeNeeds {
        unschedulable: Some(reason),
        ..Default::default()
    })
}

/// Resolves the claims `claims` of a pod in `namespace`.
pub fn resolve(namespace: &str, claims: &[String], lookup: &impl VolumeLookup) -> Resolved {
    let mut needs = VolumeNeeds::default();
    let mut unsupported = Vec::new();
    let mut unbound_immediate = false;
    for name in claims {
        let Some(claim) = lookup.claim(namespace, name) else {
            return unschedulable(format!("persistentvolumeclaim \"{name}\" not found"));
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return unschedulable(format!("persistentvolumeclaim \"{name}\" is being deleted"));
        }
        let spec = claim.spec.as_ref();
        let volume_name = spec
            .and_then(|s| s.volume_name.as_deref())
            .filter(|v| !v.is_empty());
        let completed = claim
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(BIND_COMPLETED));
        let Some(volume_name) = volume_name.filter(|_| completed) else {
            let class = claim
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(BETA_CLASS).cloned())
                .or_else(|| spec.and_then(|s| s.storage_class_name.clone()))
                .unwrap_or_default();
            if class.is_empty() {
                unbound_immediate = true;
                continue;
            }
            let Some(sc) = lookup.class(&class) else {
                return unschedulable(format!("storageclass.storage.k8s.io \"{class}\" not found"));
            };
            if sc.volume_binding_mode.as_deref() == Some("WaitForFirstConsumer") {
                unsupported.push(format!(
                    "persistentVolumeClaim {name:?} (unbound, WaitForFirstConsumer: Loadstar \
                     does not bind or provision volumes yet)"
                ));
            } else {
                unbound_immediate = true;
            }
            continue;
        };
        let Some(pv) = lookup.volume(volume_name) else {
            return unschedulable(format!("persistentvolume \"{volume_name}\" not found"));
        };
        if let Ok(serde_json::Value::Object(spec)) = serde_json::to_value(&pv.spec) {
            for kind in LIMITED_KINDS {
                if spec.contains_key(*kind) {
                    unsupported.push(format!(
                        "persistentVolumeClaim {name:?} (volume {volume_name} is {kind}: \
                         NodeVolumeLimits is not implemented yet)"
                    ));
                }
            }
        }
        if let Some(required) = pv
            .spec
            .as_ref()
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
        {
            let mut terms = Vec::new();
            for (i, t) in required.node_selector_terms.iter().enumerate() {
                match node_term(
                    &format!("persistentvolume {volume_name} nodeAffinity term {i}"),
                    t,
                ) {
                    Ok(term) => terms.push(term),
                    Err(e) => return unschedulable(e.to_string()),
                }
            }
            needs.node_affinity.push(terms);
        }
        for (k, v) in pv.metadata.labels.iter().flatten() {
            if !ZONE_LABELS.contains(&k.as_str()) {
                continue;
            }
            // `LabelZonesToSet`: an empty element makes the label unreadable, and upstream
            // then ignores it.
            let zones: Vec<String> = v.split("__").map(|z| z.trim().to_string()).collect();
            if zones.iter().any(String::is_empty) {
                continue;
            }
            needs.zones.push((k.clone(), zones));
        }
    }
    if !unsupported.is_empty() {
        return Resolved::Unsupported(unsupported);
    }
    if unbound_immediate {
        needs.unschedulable = Some(UNBOUND_IMMEDIATE.to_string());
    }
    Resolved::Needs(needs)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::collections::HashMap;

    #[derive(Default)]
    struct Fake {
        claims: HashMap<String, Arc<PersistentVolumeClaim>>,
        volumes: HashMap<String, Arc<PersistentVolume>>,
        classes: HashMap<String, Arc<StorageClass>>,
    }

    impl VolumeLookup for Fake {
        fn claim(&self, ns: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
            self.claims.get(&format!("{ns}/{name}")).cloned()
        }
        fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
            self.volumes.get(name).cloned()
        }
        fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
            self.classes.get(name).cloned()
        }
    }

    fn fake() -> Fake {
        let mut f = Fake::default();
        let claim = |v: serde_json::Value| Arc::new(serde_json::from_value(v).expect("pvc"));
        f.claims.insert(
            "ns/bound".into(),
            claim(json!({"metadata": {"name": "bound", "namespace": "ns",
                "annotations": {BIND_COMPLETED: "yes"}},
                "spec": {"volumeName": "pv-a"}})),
        );
        f.claims.insert(
            "ns/waiting".into(),
            claim(json!({"metadata": {"name": "waiting", "namespace": "ns"},
                "spec": {"storageClassName": "late"}})),
        );
        f.claims.insert(
            "ns/pending".into(),
            claim(json!({"metadata": {"name": "pending", "namespace": "ns"}, "spec": {}})),
        );
        f.claims.insert(
            "ns/cloud".into(),
            claim(json!({"metadata": {"name": "cloud", "namespace": "ns",
                "annotations": {BIND_COMPLETED: "yes"}},
                "spec": {"volumeName": "pv-csi"}})),
        );
        f.volumes.insert(
            "pv-a".into(),
            Arc::new(
                serde_json::from_value(json!({
                    "metadata": {"name": "pv-a",
                        "labels": {"topology.kubernetes.io/zone": "a__b", "other": "x",
                                   "topology.kubernetes.io/region": "r1__"}},
                    "spec": {"hostPath": {"path": "/d"}, "nodeAffinity": {"required": {
                        "nodeSelectorTerms": [{"matchExpressions": [
                            {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
                        ]}]}}}
                }))
                .expect("pv"),
            ),
        );
        f.volumes.insert(
            "pv-csi".into(),
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "pv-csi"},
                    "spec": {"csi": {"driver": "d", "volumeHandle": "h"}}}))
                .expect("pv"),
            ),
        );
        f.classes.insert(
            "late".into(),
            Arc::new(
                serde_json::from_value(json!({"metadata": {"name": "late"},
                    "provisioner": "p", "volumeBindingMode": "WaitForFirstConsumer"}))
                .expect("sc"),
            ),
        );
        f
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn bound_claims_bring_their_volumes_node_affinity_and_zones() {
        let Resolved::Needs(n) = resolve("ns", &names(&["bound"]), &fake()) else {
            panic!("resolves");
        };
        assert_eq!(n.unschedulable, None);
        assert_eq!(n.node_affinity.len(), 1);
        assert!(n.node_affinity[0][0].matches(
            "",
            &[("kubernetes.io/hostname".to_string(), "n1".to_string())].into()
        ));
        assert_eq!(
            n.zones,
            vec![(
                "topology.kubernetes.io/zone".to_string(),
                names(&["a", "b"])
            )]
        );
    }

    #[test]
    fn unbound_missing_and_unsupported_claims_say_why() {
        let f = fake();
        assert_eq!(
            resolve("ns", &names(&["pending"]), &f),
            unschedulable(UNBOUND_IMMEDIATE.into())
        );
        assert_eq!(
            resolve("ns", &names(&["nope"]), &f),
            unschedulable("persistentvolumeclaim \"nope\" not found".into())
        );
        let Resolved::Unsupported(u) = resolve("ns", &names(&["bound", "waiting"]), &f) else {
            panic!("WaitForFirstConsumer is refused");
        };
        assert!(u[0].contains("WaitForFirstConsumer"), "{u:?}");
        let Resolved::Unsupported(u) = resolve("ns", &names(&["cloud"]), &f) else {
            panic!("CSI volumes are refused");
        };
        assert!(u[0].contains("NodeVolumeLimits"), "{u:?}");
    }
}
