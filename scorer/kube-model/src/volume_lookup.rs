//! The cluster's storage objects as the volume code reads them: the [`VolumeLookup`] that
//! claim resolution (`volumes`), attach counting (`attach`), the reservations and the volume
//! binder all read through, and the annotation names and reasons they share. Kept apart so
//! that those modules depend on it and not on each other.
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use loadstar_framework::snapshot::ClassCapacity;

/// Annotation marking a claim whose binding the controller completed.
pub const BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// Annotation on a volume the binding was made for by a controller (or the scheduler).
pub const BOUND_BY_CONTROLLER: &str = "pv.kubernetes.io/bound-by-controller";
/// Annotation on a claim naming the node the scheduler chose for its provisioning.
pub const SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// The beta annotation that named a claim's (or volume's) class before `storageClassName`.
pub const BETA_CLASS: &str = "volume.beta.kubernetes.io/storage-class";
/// Reason for unbound claims with immediate binding (upstream's).
pub const UNBOUND_IMMEDIATE: &str = "pod has unbound immediate PersistentVolumeClaims";
/// Reason for a bound claim whose volume does not exist (upstream's `ErrReasonPVNotExist`).
pub const PV_NOT_EXIST: &str = "pvc(s) bound to non-existent pv(s)";
/// The binding mode that leaves binding to the scheduler.
pub const WAIT_FOR_FIRST_CONSUMER: &str = "WaitForFirstConsumer";

/// The access mode that lets one pod only use a claim (`VolumeRestrictions` checks it
/// across the cluster; upstream reads it on `persistentVolumeClaim` volumes only).
pub const READ_WRITE_ONCE_POD: &str = "ReadWriteOncePod";

/// Whether `claim`'s controlling owner is the pod with UID `pod_uid` (upstream's
/// `metav1.IsControlledBy`, which `ephemeral.VolumeIsForPod` asks).
pub fn controlled_by(claim: &PersistentVolumeClaim, pod_uid: &str) -> bool {
    claim
        .metadata
        .owner_references
        .iter()
        .flatten()
        .find(|o| o.controller == Some(true))
        .is_some_and(|o| o.uid == pod_uid)
}

/// Whether `claim`, looked up for one of `pod_uid`'s volumes, is the pod's to use: always
/// for a `persistentVolumeClaim` volume, only while the pod controls it for an ephemeral one.
pub fn claim_is_for_pod(
    claim: &loadstar_framework::snapshot::PodClaim,
    pvc: &PersistentVolumeClaim,
    pod_uid: &str,
) -> bool {
    !claim.ephemeral || controlled_by(pvc, pod_uid)
}

/// The annotation `key` of an object.
pub fn annotation<'a>(
    meta: &'a k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta,
    key: &str,
) -> Option<&'a String> {
    meta.annotations.as_ref().and_then(|a| a.get(key))
}

/// `GetPersistentVolumeClaimClass`: the beta annotation first, then `storageClassName`.
pub fn claim_class(claim: &PersistentVolumeClaim) -> String {
    annotation(&claim.metadata, BETA_CLASS)
        .cloned()
        .or_else(|| {
            claim
                .spec
                .as_ref()
                .and_then(|s| s.storage_class_name.clone())
        })
        .unwrap_or_default()
}

/// `GetPersistentVolumeClass`: the beta annotation first, then `storageClassName`.
pub fn volume_class(pv: &PersistentVolume) -> String {
    annotation(&pv.metadata, BETA_CLASS)
        .cloned()
        .or_else(|| pv.spec.as_ref().and_then(|s| s.storage_class_name.clone()))
        .unwrap_or_default()
}

/// Whether the claim is fully bound (a volume named and the binding completed).
pub fn fully_bound(claim: &PersistentVolumeClaim) -> bool {
    claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .is_some_and(|v| !v.is_empty())
        && annotation(&claim.metadata, BIND_COMPLETED).is_some()
}

/// Where the claims, volumes and classes come from.
pub trait VolumeLookup {
    /// The claim `namespace/name`.
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>>;
    /// The volume `name`.
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>>;
    /// The storage class `name`.
    fn class(&self, name: &str) -> Option<Arc<StorageClass>>;
    /// Every volume.
    fn volumes(&self) -> Vec<Arc<PersistentVolume>>;
    /// The claim `(namespace, name, uid)` this scheduler reserved the volume for, while the
    /// pod is binding and before the volume's update shows in the watch.
    fn reserved(&self, _volume: &str) -> Option<(String, String, String)> {
        None
    }
    /// The node this scheduler chose for provisioning the claim, before the claim's update
    /// shows in the watch.
    fn selected(&self, _namespace: &str, _name: &str) -> Option<String> {
        None
    }
    /// Whether the CSI driver `name` opts into storage-capacity tracking (its `CSIDriver`
    /// says `storageCapacity: true`); the default, `false`, checks no capacity.
    fn tracks_capacity(&self, _driver: &str) -> bool {
        false
    }
    /// What the storage class `name`'s `CSIStorageCapacity` objects offer; `None` (the
    /// default) while the API server serves none, and capacity is not checked.
    fn class_capacity(&self, _class: &str) -> Option<Arc<ClassCapacity>> {
        None
    }
    /// Whether the two answers above are known yet (the CSIDrivers and the capacities
    /// listed, or none served); the default, `true`, is for lookups without them.
    fn capacity_known(&self) -> bool {
        true
    }
}

/// An in-memory [`VolumeLookup`] for tests (this crate's, and with the `test-support`
/// feature its users').
#[cfg(any(test, feature = "test-support"))]
pub mod fake {
    use std::collections::HashMap;
    use std::sync::Arc;

    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::StorageClass;

    use super::VolumeLookup;

    /// Claims, volumes, classes and reservations held in maps.
    #[derive(Debug, Default)]
    pub struct Fake {
        /// Claims by `namespace/name`.
        pub claims: HashMap<String, Arc<PersistentVolumeClaim>>,
        /// Volumes by name.
        pub volumes: HashMap<String, Arc<PersistentVolume>>,
        /// Storage classes by name.
        pub classes: HashMap<String, Arc<StorageClass>>,
        /// Reservations by volume name: the claim's (namespace, name, uid).
        pub reserved: HashMap<String, (String, String, String)>,
        /// CSI drivers that track capacity.
        pub tracking: std::collections::HashSet<String>,
        /// Capacities by class; `None`: not served.
        pub capacities: Option<HashMap<String, Arc<loadstar_framework::snapshot::ClassCapacity>>>,
        /// Whether the drivers and capacities are not listed yet.
        pub capacity_unknown: bool,
    }

    impl Fake {
        /// Adds a claim from its JSON (panics on invalid JSON: test input).
        pub fn add_claim(&mut self, v: serde_json::Value) {
            let c: PersistentVolumeClaim = serde_json::from_value(v).expect("pvc");
            let key = format!(
                "{}/{}",
                c.metadata.namespace.clone().unwrap_or_default(),
                c.metadata.name.clone().unwrap_or_default()
            );
            self.claims.insert(key, Arc::new(c));
        }
        /// Adds a volume from its JSON.
        pub fn add_volume(&mut self, v: serde_json::Value) {
            let pv: PersistentVolume = serde_json::from_value(v).expect("pv");
            self.volumes
                .insert(pv.metadata.name.clone().unwrap_or_default(), Arc::new(pv));
        }
        /// Adds a storage class from its JSON.
        pub fn add_class(&mut self, v: serde_json::Value) {
            let sc: StorageClass = serde_json::from_value(v).expect("sc");
            self.classes
                .insert(sc.metadata.name.clone().unwrap_or_default(), Arc::new(sc));
        }
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
        fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
            self.volumes.values().cloned().collect()
        }
        fn reserved(&self, volume: &str) -> Option<(String, String, String)> {
            self.reserved.get(volume).cloned()
        }
        fn tracks_capacity(&self, driver: &str) -> bool {
            self.tracking.contains(driver)
        }
        fn class_capacity(
            &self,
            class: &str,
        ) -> Option<Arc<loadstar_framework::snapshot::ClassCapacity>> {
            let served = self.capacities.as_ref()?;
            Some(served.get(class).cloned().unwrap_or_default())
        }
        fn capacity_known(&self) -> bool {
            !self.capacity_unknown
        }
    }
}
