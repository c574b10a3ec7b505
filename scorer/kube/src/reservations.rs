//! Volumes and provisioning decisions this scheduler has made for pods still binding
//! (kube-scheduler's volume assume cache): between choosing a node for a pod with
//! `WaitForFirstConsumer` claims and seeing its writes come back through the watch, the
//! volumes it took must not look free to the next pod, and the claims it sent to
//! provisioning must look pinned to their node. [`Reservations`] holds them; [`Overlay`]
//! lays them over the reflector stores for resolution. [`VolumeWrites`] is what the
//! scheduler writes for one pod (from `loadstar_policy::volume_binding::plan`).
use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use loadstar_framework::snapshot::ClaimToBind;
use loadstar_policy::volume_binding::BindPlan;

use crate::volumes::VolumeLookup;

/// A claim as `(namespace, name, uid)`.
pub type ClaimRef = (String, String, String);

/// A volume to bind to a claim (the volume's `claimRef`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StaticBinding {
    /// The volume.
    pub volume: String,
    /// Its `resourceVersion` when chosen (the update is refused if it changed since).
    pub volume_version: String,
    /// The claim.
    pub claim: ClaimRef,
    /// The claim's `resourceVersion` (recorded in the reference).
    pub claim_version: String,
    /// The volume already named the claim (no `bound-by-controller` annotation then).
    pub pre_bound: bool,
}

/// A claim to annotate with the chosen node for its provisioner.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Provision {
    /// The claim.
    pub claim: ClaimRef,
    /// Its `resourceVersion` when chosen.
    pub claim_version: String,
    /// The chosen node.
    pub node: String,
}

/// What binding one pod's claims writes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeWrites {
    /// Volumes to bind.
    pub bindings: Vec<StaticBinding>,
    /// Claims to provision.
    pub provisions: Vec<Provision>,
}

impl VolumeWrites {
    /// The writes of `plan` for `to_bind` on `node`. A claim already annotated with the
    /// node needs no write, but is still waited for.
    pub fn of(plan: &BindPlan, to_bind: &[ClaimToBind], node: &str) -> VolumeWrites {
        let claim = |c: &ClaimToBind| (c.namespace.clone(), c.name.clone(), c.uid.clone());
        VolumeWrites {
            bindings: plan
                .static_bindings
                .iter()
                .filter_map(|&(ci, vi)| {
                    let c = to_bind.get(ci)?;
                    let v = c.candidates.get(vi)?;
                    Some(StaticBinding {
                        volume: v.name.clone(),
                        volume_version: v.resource_version.clone(),
                        claim: claim(c),
                        claim_version: c.resource_version.clone(),
                        pre_bound: v.bound_to(c),
                    })
                })
                .collect(),
            provisions: plan
                .provision
                .iter()
                .filter_map(|&ci| {
                    let c = to_bind.get(ci)?;
                    Some(Provision {
                        claim: claim(c),
                        claim_version: c.resource_version.clone(),
                        node: node.to_string(),
                    })
                })
                .collect(),
        }
    }

    /// Nothing to write or wait for.
    pub fn is_empty(&self) -> bool {
        self.bindings.is_empty() && self.provisions.is_empty()
    }
}

#[derive(Debug, Default, Clone)]
struct Held {
    /// Volume → the claim it is reserved for.
    volumes: HashMap<String, ClaimRef>,
    /// `namespace/claim` → the node chosen for its provisioning.
    selected: HashMap<String, String>,
}

/// The reservations of pods still binding.
#[derive(Debug, Default)]
pub struct Reservations {
    held: Mutex<Held>,
}

impl Reservations {
    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Reserves what `w` will write (`AssumePodVolumes`).
    pub fn reserve(&self, w: &VolumeWrites) {
        let mut h = self.lock();
        for b in &w.bindings {
            h.volumes.insert(b.volume.clone(), b.claim.clone());
        }
        for p in &w.provisions {
            let (ns, name, _) = &p.claim;
            h.selected.insert(format!("{ns}/{name}"), p.node.clone());
        }
    }

    /// Releases `w`'s reservations: its pod is bound (the watch shows the writes) or gave
    /// up (`RevertAssumedPodVolumes`).
    pub fn release(&self, w: &VolumeWrites) {
        let mut h = self.lock();
        for b in &w.bindings {
            if h.volumes.get(&b.volume) == Some(&b.claim) {
                h.volumes.remove(&b.volume);
            }
        }
        for p in &w.provisions {
            let (ns, name, _) = &p.claim;
            h.selected.remove(&format!("{ns}/{name}"));
        }
    }

    /// How many volumes are reserved.
    pub fn volumes_held(&self) -> usize {
        self.lock().volumes.len()
    }

    /// `base` with the current reservations over it.
    pub fn over<'a, L: VolumeLookup>(&self, base: &'a L) -> Overlay<'a, L> {
        Overlay {
            base,
            held: self.lock().clone(),
        }
    }
}

/// A lookup with this scheduler's reservations laid over it.
#[derive(Debug)]
pub struct Overlay<'a, L> {
    base: &'a L,
    held: Held,
}

impl<L: VolumeLookup> VolumeLookup for Overlay<'_, L> {
    fn claim(&self, namespace: &str, name: &str) -> Option<Arc<PersistentVolumeClaim>> {
        self.base.claim(namespace, name)
    }
    fn volume(&self, name: &str) -> Option<Arc<PersistentVolume>> {
        self.base.volume(name)
    }
    fn class(&self, name: &str) -> Option<Arc<StorageClass>> {
        self.base.class(name)
    }
    fn volumes(&self) -> Vec<Arc<PersistentVolume>> {
        self.base.volumes()
    }
    fn reserved(&self, volume: &str) -> Option<ClaimRef> {
        self.held
            .volumes
            .get(volume)
            .cloned()
            .or_else(|| self.base.reserved(volume))
    }
    fn selected(&self, namespace: &str, name: &str) -> Option<String> {
        self.held
            .selected
            .get(&format!("{namespace}/{name}"))
            .cloned()
            .or_else(|| self.base.selected(namespace, name))
    }
    fn tracks_capacity(&self, driver: &str) -> bool {
        self.base.tracks_capacity(driver)
    }
    fn class_capacity(
        &self,
        class: &str,
    ) -> Option<Arc<loadstar_framework::snapshot::ClassCapacity>> {
        self.base.class_capacity(class)
    }
    fn capacity_known(&self) -> bool {
        self.base.capacity_known()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume_lookup::fake::Fake;
    use loadstar_framework::snapshot::CandidateVolume;

    fn writes() -> VolumeWrites {
        let c = ClaimToBind {
            namespace: "ns".into(),
            name: "data".into(),
            uid: "u1".into(),
            resource_version: "5".into(),
            candidates: Arc::new(vec![CandidateVolume {
                name: "pv1".into(),
                resource_version: "9".into(),
                ..Default::default()
            }]),
            ..Default::default()
        };
        let d = ClaimToBind {
            name: "logs".into(),
            uid: "u2".into(),
            ..c.clone()
        };
        let plan = BindPlan {
            static_bindings: vec![(0, 0)],
            provision: vec![1],
        };
        VolumeWrites::of(&plan, &[c, d], "n1")
    }

    #[test]
    fn a_plan_becomes_the_writes_that_carry_it_out() {
        let w = writes();
        assert_eq!(
            w.bindings,
            vec![StaticBinding {
                volume: "pv1".into(),
                volume_version: "9".into(),
                claim: ("ns".into(), "data".into(), "u1".into()),
                claim_version: "5".into(),
                pre_bound: false,
            }]
        );
        assert_eq!(w.provisions[0].node, "n1");
        assert_eq!(w.provisions[0].claim.1, "logs");
    }

    #[test]
    fn reservations_show_through_the_overlay_until_released() {
        let r = Reservations::default();
        let base = Fake::default();
        let w = writes();
        r.reserve(&w);
        let o = r.over(&base);
        assert_eq!(
            o.reserved("pv1"),
            Some(("ns".into(), "data".into(), "u1".into()))
        );
        assert_eq!(o.selected("ns", "logs").as_deref(), Some("n1"));
        assert_eq!(r.volumes_held(), 1);
        r.release(&w);
        let o = r.over(&base);
        assert_eq!(o.reserved("pv1"), None);
        assert_eq!(o.selected("ns", "logs"), None);
    }
}
