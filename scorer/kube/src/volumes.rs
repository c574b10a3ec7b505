//! A pod's PersistentVolumeClaims resolved against the cluster's claims, volumes and
//! storage classes, as kube-scheduler 1.20's `VolumeBinding` (its PreFilter and the volume
//! binder's `GetPodVolumes`) and `VolumeZone` read them, into the [`VolumeNeeds`] the volume
//! filters check and the [`AttachableVolume`]s the attach-limit filters count. Resolution
//! is pure over a [`VolumeLookup`]; the live lookup is the reflector stores with this
//! scheduler's own reservations laid over them (the cache's).
//!
//! A claim is bound when it names a volume and carries `pv.kubernetes.io/bind-completed`
//! (upstream's "fully bound"); its volume's node affinity and zone labels constrain the
//! node. Unbound, with a class whose binding mode is `WaitForFirstConsumer` and no volume
//! named yet, it is a claim to bind: the volumes of its class are its candidates, and the
//! class says whether and where it provisions. Any other unbound claim (no class, a class
//! that does not exist or binds at once, a volume named but not bound yet) makes the pod
//! unschedulable: `pod has unbound immediate PersistentVolumeClaims`.
//!
//! A generic ephemeral volume's claim is read as any other once the ephemeral volume
//! controller has created it for the pod, as upstream's VolumeBinding reads it since 1.21:
//! until it exists the pod waits (`waiting for ephemeral volume controller to create the
//! persistentvolumeclaim "…"`), and a claim of that name that the pod does not control is
//! refused (`… was not created for pod … (pod is not owner)`). Its volume's zone labels are
//! not read: upstream's `VolumeZone` reads `persistentVolumeClaim` volumes only.
//!
//! Claims of `persistentVolumeClaim` volumes whose access modes include `ReadWriteOncePod`
//! are listed for `VolumeRestrictions`, which refuses the pod while another pod uses one.
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{CSIDriver, StorageClass};
use kube::runtime::reflector::{ObjectRef, Store};
use loadstar_framework::snapshot::{AttachableVolume, ClassCapacity, PodInfo, VolumeNeeds};
use loadstar_policy::volume_zone::ZONE_LABELS;

use crate::attach;
use crate::capacity::Capacities;

pub use crate::volume_lookup::{
    BETA_CLASS, BIND_COMPLETED, BOUND_BY_CONTROLLER, PV_NOT_EXIST, READ_WRITE_ONCE_POD,
    SELECTED_NODE, UNBOUND_IMMEDIATE, VolumeLookup, WAIT_FOR_FIRST_CONSUMER, claim_class,
    claim_is_for_pod, fully_bound,
};
pub use loadstar_kube_model::binding::{candidate, claim_to_bind, volume_affinity};

/// The live stores the volume reflectors fill.
#[derive(Clone)]
pub struct VolumeStores {
    /// Claims.
    pub claims: Store<PersistentVolumeClaim>,
    /// Volumes.
    pub volumes: Store<PersistentVolume>,
    /// Storage classes.
    pub classes: Store<StorageClass>,
    /// CSI drivers (whether they track storage capacity).
    pub drivers: Store<CSIDriver>,
    /// Storage capacities, per class.
    pub capacities: Arc<Capacities>,
}

impl std::fmt::Debug for VolumeStores {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("VolumeStores")
            .field("claims", &self.claims.state().len())
            .field("volumes", &self.volumes.state().len())
            .field("classes", &self.classes.state().len())
            .field("drivers", &self.drivers.state().len())
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
    fn tracks_capacity(&self, driver: &str) -> bool {
        self.drivers
            .get(&ObjectRef::new(driver))
            .is_some_and(|d| d.spec.storage_capacity == Some(true))
    }
    fn class_capacity(&self, class: &str) -> Option<Arc<ClassCapacity>> {
        self.capacities.class(class)
    }
    fn capacity_known(&self) -> bool {
        self.capacities.known()
    }
    fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.volumes.state()
    }
}

/// What resolving a pod's claims found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Resolution {
    /// What the volume filters check.
    pub needs: VolumeNeeds,
    /// The claims' volumes that take attachment slots.
    pub attachable: Vec<AttachableVolume>,
}

fn unschedulable(reason: String) -> Resolution {
    Resolution {
        needs: VolumeNeeds {
            unschedulable: Some(reason),
            ..Default::default()
        },
        attachable: Vec::new(),
    }
}

/// Resolves `pod`'s claims.
pub fn resolve(pod: &PodInfo, lookup: &impl VolumeLookup) -> Resolution {
    let namespace = pod.namespace.as_str();
    let mut out = Resolution::default();
    let mut unbound_immediate = false;
    for pod_claim in &pod.claims {
        let name = &pod_claim.name;
        let Some(claim) = lookup.claim(namespace, name) else {
            return unschedulable(if pod_claim.ephemeral {
                format!(
                    "waiting for ephemeral volume controller to create the \
                     persistentvolumeclaim \"{name}\""
                )
            } else {
                format!("persistentvolumeclaim \"{name}\" not found")
            });
        };
        if claim.metadata.deletion_timestamp.is_some() {
            return unschedulable(format!("persistentvolumeclaim \"{name}\" is being deleted"));
        }
        if !claim_is_for_pod(pod_claim, &claim, &pod.uid) {
            return unschedulable(format!(
                "PVC {namespace}/{name} was not created for pod {namespace}/{} (pod is not owner)",
                pod.name
            ));
        }
        let modes = claim.spec.as_ref().and_then(|s| s.access_modes.as_ref());
        if !pod_claim.ephemeral && modes.is_some_and(|m| m.iter().any(|m| m == READ_WRITE_ONCE_POD))
        {
            out.needs.read_write_once_pod.push(name.clone());
        }
        out.attachable
            .extend(attach::of_claim(namespace, name, lookup));
        if !fully_bound(&claim) {
            let class_name = claim_class(&claim);
            let class = (!class_name.is_empty())
                .then(|| lookup.class(&class_name))
                .flatten();
            let named = claim
                .spec
                .as_ref()
                .and_then(|s| s.volume_name.as_deref())
                .is_some_and(|v| !v.is_empty());
            match class {
                Some(sc)
                    if sc.volume_binding_mode.as_deref() == Some(WAIT_FOR_FIRST_CONSUMER)
                        && !named =>
                {
                    match claim_to_bind(namespace, name, &claim, &class_name, &sc, lookup) {
                        Ok(c) => out.needs.to_bind.push(c),
                        Err(reason) => return unschedulable(reason),
                    }
                }
                _ => unbound_immediate = true,
            }
            continue;
        }
        let volume_name = claim
            .spec
            .as_ref()
            .and_then(|s| s.volume_name.clone())
            .unwrap_or_default();
        let Some(pv) = lookup.volume(&volume_name) else {
            return unschedulable(PV_NOT_EXIST.to_string());
        };
        match volume_affinity(&pv) {
            Ok(Some(terms)) => out.needs.node_affinity.push(terms),
            Ok(None) => {}
            Err(e) => return unschedulable(e),
        }
        if !pod_claim.ephemeral {
            out.needs.zones.extend(volume_zones(&pv));
        }
    }
    if unbound_immediate {
        out.needs.unschedulable = Some(UNBOUND_IMMEDIATE.to_string());
    }
    out
}

/// A volume's zone and region labels, for `VolumeZone`.
fn volume_zones(pv: &PersistentVolume) -> Vec<(String, Vec<String>)> {
    let mut out = Vec::new();
    for (k, v) in pv.metadata.labels.iter().flatten() {
        if !ZONE_LABELS.contains(&k.as_str()) {
            continue;
        }
        // `LabelZonesToSet`: an empty element makes the label unreadable, and upstream then
        // ignores it.
        let zones: Vec<String> = v.split("__").map(|z| z.trim().to_string()).collect();
        if zones.iter().any(String::is_empty) {
            continue;
        }
        out.push((k.clone(), zones));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::capacity::CAPACITY_UNKNOWN;
    use crate::volume_lookup::fake::Fake;
    use loadstar_framework::snapshot::PodClaim;
    use serde_json::json;

    fn fake() -> Fake {
        let mut f = Fake::default();
        f.add_claim(json!({"metadata": {"name": "bound", "namespace": "ns",
            "annotations": {BIND_COMPLETED: "yes"}},
            "spec": {"volumeName": "pv-a"}}));
        f.add_claim(
            json!({"metadata": {"name": "waiting", "namespace": "ns", "uid": "u-w",
            "resourceVersion": "7"},
            "spec": {"storageClassName": "late", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}},
                     "selector": {"matchLabels": {"tier": "fast"}}}}),
        );
        f.add_claim(json!({"metadata": {"name": "pending", "namespace": "ns"}, "spec": {}}));
        f.add_claim(json!({"metadata": {"name": "no-class", "namespace": "ns"},
            "spec": {"storageClassName": "missing"}}));
        f.add_claim(json!({"metadata": {"name": "named", "namespace": "ns"},
            "spec": {"storageClassName": "late", "volumeName": "pv-a"}}));
        f.add_claim(json!({"metadata": {"name": "dangling", "namespace": "ns",
            "annotations": {BIND_COMPLETED: "yes"}},
            "spec": {"volumeName": "gone"}}));
        f.add_volume(json!({
            "metadata": {"name": "pv-a",
                "labels": {"topology.kubernetes.io/zone": "a__b", "other": "x",
                           "topology.kubernetes.io/region": "r1__"}},
            "spec": {"hostPath": {"path": "/d"}, "nodeAffinity": {"required": {
                "nodeSelectorTerms": [{"matchExpressions": [
                    {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}
                ]}]}}}
        }));
        f.add_volume(json!({
            "metadata": {"name": "local-2", "labels": {"tier": "fast"}, "resourceVersion": "3"},
            "spec": {"storageClassName": "late", "capacity": {"storage": "2Gi"},
                     "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt"},
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}},
            "status": {"phase": "Available"}
        }));
        f.add_volume(json!({
            "metadata": {"name": "local-1", "annotations": {BETA_CLASS: "late"}},
            "spec": {"capacity": {"storage": "1Gi"}, "hostPath": {"path": "/x"},
                     "claimRef": {"namespace": "ns", "name": "other", "uid": "u-o"}},
            "status": {"phase": "Bound"}
        }));
        f.add_volume(json!({
            "metadata": {"name": "elsewhere"},
            "spec": {"storageClassName": "other", "capacity": {"storage": "1Gi"}},
            "status": {"phase": "Available"}
        }));
        f.add_class(json!({"metadata": {"name": "late"},
            "provisioner": "kubernetes.io/no-provisioner",
            "volumeBindingMode": "WaitForFirstConsumer",
            "allowedTopologies": [{"matchLabelExpressions": [
                {"key": "zone", "values": ["a", "b"]}]}]}));
        f
    }

    /// Pod `ns/p` (UID `u-p`) mounting the claims `claims` as `persistentVolumeClaim`
    /// volumes.
    fn pod(claims: &[&str]) -> PodInfo {
        PodInfo {
            uid: "u-p".into(),
            namespace: "ns".into(),
            name: "p".into(),
            claims: claims.iter().map(|c| PodClaim::from(*c)).collect(),
            ..PodInfo::default()
        }
    }

    /// Pod `ns/p` with one generic ephemeral volume `v`, whose claim is `p-v`.
    fn with_ephemeral(mut p: PodInfo) -> PodInfo {
        p.claims.push(PodClaim {
            name: "p-v".into(),
            ephemeral: true,
        });
        p
    }

    #[test]
    fn ephemeral_volumes_claims_count_once_created_for_the_pod_and_their_zones_are_not_read() {
        let mut f = fake();
        let why = |f: &Fake| resolve(&with_ephemeral(pod(&[])), f).needs.unschedulable;
        assert_eq!(
            why(&f).as_deref(),
            Some(
                "waiting for ephemeral volume controller to create the persistentvolumeclaim \
                 \"p-v\""
            )
        );
        // A claim of that name that another pod controls, or nobody: not the pod's.
        let claim = |controller: serde_json::Value| {
            json!({"metadata": {"name": "p-v", "namespace": "ns",
                "annotations": {BIND_COMPLETED: "yes"},
                "ownerReferences": [
                    {"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-p"},
                    {"apiVersion": "v1", "kind": "Pod", "name": "q", "uid": "u-q",
                     "controller": controller}]},
                "spec": {"volumeName": "pv-a"}})
        };
        for controller in [json!(true), json!(false)] {
            f.add_claim(claim(controller));
            assert_eq!(
                why(&f).as_deref(),
                Some("PVC ns/p-v was not created for pod ns/p (pod is not owner)")
            );
        }
        let mut owned = claim(json!(false));
        owned["metadata"]["ownerReferences"][0]["controller"] = json!(true);
        f.add_claim(owned);
        let n = resolve(&with_ephemeral(pod(&[])), &f).needs;
        assert_eq!(n.unschedulable, None);
        // Its volume's node affinity binds the pod (VolumeBinding), its zone labels do not
        // (VolumeZone reads `persistentVolumeClaim` volumes only) ...
        assert_eq!(n.node_affinity.len(), 1);
        assert!(n.zones.is_empty());
        // ... where the same volume behind a `persistentVolumeClaim` volume brings both.
        let both = resolve(&with_ephemeral(pod(&["bound"])), &f).needs;
        assert_eq!(both.node_affinity.len(), 2);
        assert_eq!(both.zones, resolve(&pod(&["bound"]), &f).needs.zones);
        assert!(!both.zones.is_empty());
        // An ephemeral claim still unbound with a WaitForFirstConsumer class is bound with
        // the pod, as any claim.
        let mut late = serde_json::to_value(&*f.claims["ns/waiting"]).expect("json");
        late["metadata"]["name"] = json!("p-v");
        late["metadata"]["ownerReferences"] = json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-p", "controller": true}]);
        f.add_claim(late);
        let r = resolve(&with_ephemeral(pod(&[])), &f);
        assert_eq!(r.needs.unschedulable, None);
        assert_eq!(r.needs.to_bind.len(), 1);
        assert_eq!(r.needs.to_bind[0].name, "p-v");
    }

    #[test]
    fn capacity_is_checked_for_storage_requests_of_tracking_drivers_once_served() {
        let mut f = fake();
        f.add_class(
            json!({"metadata": {"name": "lvm"}, "provisioner": "lvm.csi.example.com",
            "volumeBindingMode": "WaitForFirstConsumer"}),
        );
        f.add_claim(json!({"metadata": {"name": "thin", "namespace": "ns"},
            "spec": {"storageClassName": "lvm",
                     "resources": {"requests": {"storage": "1Gi"}}}}));
        f.add_claim(json!({"metadata": {"name": "sizeless", "namespace": "ns"},
            "spec": {"storageClassName": "lvm"}}));
        let checked = |f: &Fake, claim: &str| {
            let r = resolve(&pod(&[claim]), f);
            let [c] = r.needs.to_bind.as_slice() else {
                panic!("one claim to bind: {r:?}");
            };
            c.provisioning.as_ref().expect("class").capacity.clone()
        };
        let mut table = ClassCapacity::default();
        table.add(Some(Default::default()), Some(1 << 40));
        f.capacities = Some([("lvm".to_string(), Arc::new(table))].into());
        // The driver does not opt in: not checked.
        assert_eq!(checked(&f, "thin"), None);
        f.tracking.insert("lvm.csi.example.com".into());
        let table = checked(&f, "thin").expect("checked");
        assert!(table.has_room(1 << 40, &Default::default()));
        // No storage request: nothing to check (upstream).
        assert_eq!(checked(&f, "sizeless"), None);
        // Until the drivers and capacities are listed, such a claim waits (a class that
        // does not provision has nothing to wait for).
        f.capacity_unknown = true;
        let waits = resolve(&pod(&["thin"]), &f).needs.unschedulable;
        assert_eq!(waits.as_deref(), Some(CAPACITY_UNKNOWN));
        assert_eq!(resolve(&pod(&["waiting"]), &f).needs.unschedulable, None);
        f.capacity_unknown = false;
        // Not served: not checked; served without a capacity for the class: an empty
        // table, which no node has room in.
        f.capacities = None;
        assert_eq!(checked(&f, "thin"), None);
        f.capacities = Some(Default::default());
        assert!(
            !checked(&f, "thin")
                .expect("served")
                .has_room(1, &Default::default())
        );
    }

    #[test]
    fn read_write_once_pod_claims_are_listed_for_volume_restrictions() {
        let mut f = fake();
        let rwop = |name: &str, modes: serde_json::Value, owner: serde_json::Value| {
            json!({"metadata": {"name": name, "namespace": "ns",
                "annotations": {BIND_COMPLETED: "yes"}, "ownerReferences": owner},
                "spec": {"volumeName": "pv-a", "accessModes": modes}})
        };
        let mine = json!([{"apiVersion": "v1", "kind": "Pod", "name": "p", "uid": "u-p",
                           "controller": true}]);
        f.add_claim(rwop("solo", json!(["ReadWriteOncePod"]), json!(null)));
        f.add_claim(rwop(
            "also",
            json!(["ReadWriteOnce", "ReadWriteOncePod"]),
            json!(null),
        ));
        f.add_claim(rwop("p-v", json!(["ReadWriteOncePod"]), mine));
        let n = resolve(&with_ephemeral(pod(&["bound", "solo", "also"])), &f).needs;
        assert_eq!(n.unschedulable, None);
        // Not `bound` (no such mode), nor the ephemeral volume's (upstream reads
        // `persistentVolumeClaim` volumes only).
        assert_eq!(n.read_write_once_pod, names(&["solo", "also"]));
    }

    fn names(n: &[&str]) -> Vec<String> {
        n.iter().map(|s| s.to_string()).collect()
    }

    #[test]
    fn bound_claims_bring_their_volumes_node_affinity_and_zones() {
        let n = resolve(&pod(&["bound"]), &fake()).needs;
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
    fn unbound_and_missing_claims_say_why_in_upstreams_words() {
        let f = fake();
        let why = |claims: &[&str]| resolve(&pod(claims), &f).needs.unschedulable;
        assert_eq!(why(&["pending"]).as_deref(), Some(UNBOUND_IMMEDIATE));
        // A class that does not exist binds "immediately" (`IsDelayBindingMode`).
        assert_eq!(why(&["no-class"]).as_deref(), Some(UNBOUND_IMMEDIATE));
        // A volume named but the binding not complete: not a claim to bind.
        assert_eq!(why(&["named"]).as_deref(), Some(UNBOUND_IMMEDIATE));
        assert_eq!(
            why(&["nope"]),
            Some("persistentvolumeclaim \"nope\" not found".into())
        );
        assert_eq!(why(&["dangling"]).as_deref(), Some(PV_NOT_EXIST));
    }

    #[test]
    fn wait_for_first_consumer_claims_carry_their_classs_volumes_and_provisioning() {
        let mut f = fake();
        let r = resolve(&pod(&["bound", "waiting"]), &f);
        assert_eq!(r.needs.unschedulable, None);
        let [c] = r.needs.to_bind.as_slice() else {
            panic!("one claim to bind: {:?}", r.needs.to_bind);
        };
        assert_eq!((c.uid.as_str(), c.resource_version.as_str()), ("u-w", "7"));
        assert_eq!(c.request_bytes, 1 << 30);
        assert_eq!(c.volume_mode, "Filesystem");
        assert!(c.selector.is_some());
        // Volumes of class `late` (one by its beta annotation), by name; not `elsewhere`.
        let vols: Vec<(&str, i64, bool)> = c
            .candidates
            .iter()
            .map(|v| (v.name.as_str(), v.capacity_bytes, v.available))
            .collect();
        assert_eq!(
            vols,
            vec![("local-1", 1 << 30, false), ("local-2", 2 << 30, true)]
        );
        assert_eq!(
            c.candidates[0].claim_ref,
            Some(("ns".into(), "other".into(), "u-o".into()))
        );
        assert!(c.candidates[1].node_affinity.is_some());
        let p = c.provisioning.clone().expect("class");
        assert_eq!(p.provisioner, "kubernetes.io/no-provisioner");
        assert_eq!(
            p.allowed_topologies,
            vec![vec![("zone".to_string(), names(&["a", "b"]))]]
        );
        // This scheduler's reservation shows as a claim reference.
        f.reserved.insert(
            "local-2".into(),
            ("ns".into(), "waiting".into(), "u-w".into()),
        );
        let r = resolve(&pod(&["waiting"]), &f);
        assert_eq!(
            r.needs.to_bind[0].candidates[1].claim_ref,
            Some(("ns".into(), "waiting".into(), "u-w".into()))
        );
    }
}
