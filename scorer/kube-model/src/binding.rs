//! What an unbound `WaitForFirstConsumer` claim could bind to, read from the API objects
//! as kube-scheduler 1.20's volume binder reads them: the claim with its candidate volumes
//! (their capacity, modes, labels, node affinity and who holds them) and how its class
//! provisions, pure over a [`VolumeLookup`] (the `loadstar-kube` volume resolution's).
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::StorageClass;
use loadstar_common::quantity::parse_units;
use loadstar_framework::snapshot::{CandidateVolume, ClaimToBind, NodeSelectorTerm, Provisioning};

use crate::capacity::claim_capacity;
use crate::constraints::{label_selector, node_term};
use crate::volume_lookup::{SELECTED_NODE, VolumeLookup, annotation, volume_class};

/// A volume's required node affinity terms (`None`: any node).
pub fn volume_affinity(pv: &PersistentVolume) -> Result<Option<Vec<NodeSelectorTerm>>, String> {
    let name = pv.metadata.name.as_deref().unwrap_or_default();
    let Some(required) = pv
        .spec
        .as_ref()
        .and_then(|s| s.node_affinity.as_ref())
        .and_then(|a| a.required.as_ref())
    else {
        return Ok(None);
    };
    let mut terms = Vec::new();
    for (i, t) in required.node_selector_terms.iter().enumerate() {
        let term = node_term(&format!("persistentvolume {name} nodeAffinity term {i}"), t)
            .map_err(|e| e.to_string())?;
        terms.push(term);
    }
    Ok(Some(terms))
}

/// An unbound `WaitForFirstConsumer` claim with its candidate volumes and provisioning.
pub fn claim_to_bind(
    namespace: &str,
    name: &str,
    claim: &PersistentVolumeClaim,
    class_name: &str,
    class: &StorageClass,
    lookup: &impl VolumeLookup,
) -> Result<ClaimToBind, String> {
    let spec = claim.spec.as_ref();
    let request_bytes = spec
        .and_then(|s| s.resources.as_ref())
        .and_then(|r| r.requests.as_ref())
        .and_then(|r| r.get("storage"))
        .map(|q| parse_units(&q.0))
        .transpose()
        .map_err(|e| format!("persistentvolumeclaim {name:?}: storage request: {e}"))?
        .unwrap_or(0);
    let selector = label_selector(
        &format!("persistentvolumeclaim {name:?} selector"),
        spec.and_then(|s| s.selector.as_ref()),
    )
    .map_err(|e| e.to_string())?;
    let mut candidates: Vec<CandidateVolume> = lookup
        .volumes()
        .iter()
        .filter(|pv| volume_class(pv) == class_name)
        .filter_map(|pv| candidate(pv, lookup))
        .collect();
    // Upstream walks its cache in no particular order; by name is at least repeatable.
    candidates.sort_by(|a, b| a.name.cmp(&b.name));
    let capacity = claim_capacity(claim, class_name, class, lookup)?;
    let provisioning = Ok(Provisioning {
        capacity,
        provisioner: class.provisioner.clone(),
        allowed_topologies: class
            .allowed_topologies
            .iter()
            .flatten()
            .map(|term| {
                term.match_label_expressions
                    .iter()
                    .flatten()
                    .map(|r| (r.key.clone(), r.values.clone()))
                    .collect()
            })
            .collect(),
    });
    Ok(ClaimToBind {
        namespace: namespace.to_string(),
        name: name.to_string(),
        uid: claim.metadata.uid.clone().unwrap_or_default(),
        resource_version: claim.metadata.resource_version.clone().unwrap_or_default(),
        request_bytes,
        access_modes: spec
            .and_then(|s| s.access_modes.clone())
            .unwrap_or_default(),
        volume_mode: spec
            .and_then(|s| s.volume_mode.clone())
            .unwrap_or_else(|| "Filesystem".into()),
        selector,
        class: class_name.to_string(),
        selected_node: annotation(&claim.metadata, SELECTED_NODE)
            .cloned()
            .or_else(|| lookup.selected(namespace, name)),
        candidates: Arc::new(candidates),
        provisioning,
    })
}

/// A volume as a candidate (`None` when its node affinity does not convert: such a volume
/// admits no node anyway).
pub fn candidate(pv: &PersistentVolume, lookup: &impl VolumeLookup) -> Option<CandidateVolume> {
    let name = pv.metadata.name.clone().unwrap_or_default();
    let spec = pv.spec.as_ref();
    let capacity_bytes = spec
        .and_then(|s| s.capacity.as_ref())
        .and_then(|c| c.get("storage"))
        .and_then(|q| parse_units(&q.0).ok())
        .unwrap_or(0);
    let claim_ref = spec
        .and_then(|s| s.claim_ref.as_ref())
        .map(|r| {
            (
                r.namespace.clone().unwrap_or_default(),
                r.name.clone().unwrap_or_default(),
                r.uid.clone().unwrap_or_default(),
            )
        })
        .or_else(|| lookup.reserved(&name));
    Some(CandidateVolume {
        capacity_bytes,
        volume_mode: spec
            .and_then(|s| s.volume_mode.clone())
            .unwrap_or_else(|| "Filesystem".into()),
        access_modes: spec
            .and_then(|s| s.access_modes.clone())
            .unwrap_or_default(),
        labels: pv.metadata.labels.clone().unwrap_or_default(),
        node_affinity: volume_affinity(pv).ok()?,
        available: pv.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Available"),
        deleting: pv.metadata.deletion_timestamp.is_some(),
        claim_ref,
        resource_version: pv.metadata.resource_version.clone().unwrap_or_default(),
        name,
    })
}
