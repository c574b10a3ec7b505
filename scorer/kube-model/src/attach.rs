//! Which of a pod's volumes take a node's attachment slots, and how many slots a node has,
//! as kube-scheduler 1.20's `nodevolumelimits` plugins read them from pods, claims,
//! volumes, storage classes, node allocatable and CSINodes. Pure functions over the
//! [`VolumeLookup`]; the filters that count them are in `loadstar_policy::node_volume_limits`.
//!
//! - Inline `awsElasticBlockStore`, `gcePersistentDisk`, `azureDisk` and `cinder` volumes
//!   count against their in-tree kind by disk ID. Inline `csi` volumes do not count (1.20
//!   counts CSI volumes behind claims only).
//! - A claim bound to a CSI volume counts against its driver by volume handle; bound to an
//!   in-tree cloud disk, against that kind by disk ID. A claim not bound yet (or whose
//!   volume is missing) counts as itself: against its class's provisioner if that is a CSI
//!   driver (the class read from the beta annotation first), or against an in-tree kind if
//!   the class named by `storageClassName` provisions that kind. A missing claim or class
//!   counts nothing.
//! - In-tree volumes never count against a CSI driver: CSI migration is off, as its feature
//!   gates are by default in 1.20.
use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{PersistentVolumeClaim, PodSpec};
use k8s_openapi::api::storage::v1::{CSINode, StorageClass};
use loadstar_common::model::ResourceList;
use loadstar_framework::snapshot::{AttachKind, AttachableVolume};

use crate::volume_lookup::{BETA_CLASS, VolumeLookup};

/// Node allocatable resources that are attach limits start with this.
pub const ATTACHABLE_PREFIX: &str = "attachable-volumes-";
/// A CSI driver's attach limit: this prefix and the driver's name.
pub const CSI_PREFIX: &str = "attachable-volumes-csi-";
/// Longest resource name (`ResourceNameLengthLimit`): longer CSI keys are shortened.
const RESOURCE_NAME_LIMIT: usize = 63;

/// In-tree plugins CSI migration covers (`csi-translation-lib`'s list): their provisioners
/// never count against a CSI driver while migration is off.
const MIGRATABLE_PROVISIONERS: &[&str] = &[
    "kubernetes.io/gce-pd",
    "kubernetes.io/aws-ebs",
    "kubernetes.io/cinder",
    "kubernetes.io/azure-disk",
    "kubernetes.io/azure-file",
    "kubernetes.io/vsphere-volume",
];

/// The in-tree provisioner of each in-tree kind (`MatchProvisioner`).
fn in_tree_provisioner(kind: AttachKind) -> Option<&'static str> {
    match kind {
        AttachKind::Csi => None,
        AttachKind::AwsEbs => Some("kubernetes.io/aws-ebs"),
        AttachKind::GcePd => Some("kubernetes.io/gce-pd"),
        AttachKind::AzureDisk => Some("kubernetes.io/azure-disk"),
        AttachKind::Cinder => Some("kubernetes.io/cinder"),
    }
}

const IN_TREE: [AttachKind; 4] = [
    AttachKind::AwsEbs,
    AttachKind::GcePd,
    AttachKind::AzureDisk,
    AttachKind::Cinder,
];

/// `GetCSIAttachLimitKey`: the prefix and the driver's name; a name that would make the key
/// 63 characters or longer keeps its first 23 bytes followed by 16 hex digits of its SHA-1.
pub fn csi_limit_key(driver: &str) -> String {
    if CSI_PREFIX.len() + driver.len() < RESOURCE_NAME_LIMIT {
        return format!("{CSI_PREFIX}{driver}");
    }
    let digest = ring::digest::digest(&ring::digest::SHA1_FOR_LEGACY_USE_ONLY, driver.as_bytes());
    let hex: String = digest
        .as_ref()
        .iter()
        .take(8)
        .map(|b| format!("{b:02x}"))
        .collect();
    // Upstream slices bytes; a driver name is a DNS subdomain, so ASCII.
    let head: String = driver.chars().take(23).collect();
    format!("{CSI_PREFIX}{head}{hex}")
}

fn in_tree(kind: AttachKind, id: &str) -> AttachableVolume {
    AttachableVolume {
        kind,
        limit_key: kind.in_tree_key().unwrap_or_default().to_string(),
        id: id.to_string(),
    }
}

fn csi(driver: &str, id: &str) -> AttachableVolume {
    AttachableVolume {
        kind: AttachKind::Csi,
        limit_key: csi_limit_key(driver),
        id: id.to_string(),
    }
}

/// The pod's inline volumes that take attachment slots.
pub fn inline(spec: &PodSpec) -> Vec<AttachableVolume> {
    let mut out = Vec::new();
    for v in spec.volumes.iter().flatten() {
        if let Some(d) = &v.aws_elastic_block_store {
            out.push(in_tree(AttachKind::AwsEbs, &d.volume_id));
        }
        if let Some(d) = &v.gce_persistent_disk {
            out.push(in_tree(AttachKind::GcePd, &d.pd_name));
        }
        if let Some(d) = &v.azure_disk {
            out.push(in_tree(AttachKind::AzureDisk, &d.disk_name));
        }
        if let Some(d) = &v.cinder {
            out.push(in_tree(AttachKind::Cinder, &d.volume_id));
        }
    }
    out
}

/// What the claim `namespace/name` attaches (nothing, or one volume).
pub fn of_claim(namespace: &str, name: &str, lookup: &impl VolumeLookup) -> Vec<AttachableVolume> {
    let Some(claim) = lookup.claim(namespace, name) else {
        return Vec::new();
    };
    let volume = claim
        .spec
        .as_ref()
        .and_then(|s| s.volume_name.as_deref())
        .filter(|v| !v.is_empty())
        .and_then(|v| lookup.volume(v));
    let Some(pv) = volume else {
        return unbound(namespace, name, &claim, lookup);
    };
    let Some(spec) = pv.spec.as_ref() else {
        return Vec::new();
    };
    if let Some(c) = &spec.csi {
        return vec![csi(&c.driver, &c.volume_handle)];
    }
    let found = [
        spec.aws_elastic_block_store
            .as_ref()
            .map(|d| in_tree(AttachKind::AwsEbs, &d.volume_id)),
        spec.gce_persistent_disk
            .as_ref()
            .map(|d| in_tree(AttachKind::GcePd, &d.pd_name)),
        spec.azure_disk
            .as_ref()
            .map(|d| in_tree(AttachKind::AzureDisk, &d.disk_name)),
        spec.cinder
            .as_ref()
            .map(|d| in_tree(AttachKind::Cinder, &d.volume_id)),
    ];
    found.into_iter().flatten().collect()
}

/// A claim without its volume: counted as itself against its class's provisioner.
fn unbound(
    namespace: &str,
    name: &str,
    claim: &PersistentVolumeClaim,
    lookup: &impl VolumeLookup,
) -> Vec<AttachableVolume> {
    let id = format!("claim:{namespace}/{name}");
    let mut out = Vec::new();
    let class_of = |n: &str| -> Option<std::sync::Arc<StorageClass>> {
        (!n.is_empty()).then(|| lookup.class(n)).flatten()
    };
    // CSI: the class as `GetPersistentVolumeClaimClass` reads it (beta annotation first).
    let beta = claim
        .metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(BETA_CLASS).cloned());
    let spec_class = claim
        .spec
        .as_ref()
        .and_then(|s| s.storage_class_name.clone());
    let csi_class = beta.or_else(|| spec_class.clone()).unwrap_or_default();
    if let Some(sc) = class_of(&csi_class)
        && !MIGRATABLE_PROVISIONERS.contains(&sc.provisioner.as_str())
    {
        out.push(csi(&sc.provisioner, &id));
    }
    // In-tree: `storageClassName` only.
    if let Some(sc) = spec_class.as_deref().and_then(class_of) {
        for kind in IN_TREE {
            if in_tree_provisioner(kind) == Some(sc.provisioner.as_str()) {
                out.push(in_tree(kind, &id));
            }
        }
    }
    out
}

/// The node's attach limits from its allocatable (`attachable-volumes-*` entries).
pub fn allocatable_limits(allocatable: &ResourceList) -> BTreeMap<String, i64> {
    allocatable
        .extended
        .iter()
        .filter(|(k, _)| k.starts_with(ATTACHABLE_PREFIX))
        .map(|(k, v)| (k.clone(), *v))
        .collect()
}

/// A CSINode's per-driver limits (`allocatable.count`), keyed like the allocatable ones.
pub fn csinode_limits(csinode: &CSINode) -> BTreeMap<String, i64> {
    csinode
        .spec
        .drivers
        .iter()
        .filter_map(|d| {
            let count = d.allocatable.as_ref()?.count?;
            Some((csi_limit_key(&d.name), i64::from(count)))
        })
        .collect()
}

/// A node's limits: its allocatable entries, overridden by its CSINode's driver counts
/// (`getVolumeLimits`).
pub fn node_limits(
    allocatable: &ResourceList,
    csinode: Option<&BTreeMap<String, i64>>,
) -> BTreeMap<String, i64> {
    let mut out = allocatable_limits(allocatable);
    if let Some(c) = csinode {
        out.extend(c.iter().map(|(k, v)| (k.clone(), *v)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::volume_lookup::fake::Fake;
    use serde_json::json;

    #[test]
    fn long_csi_driver_names_are_shortened_as_upstream_does() {
        assert_eq!(
            csi_limit_key("ebs.csi.aws.com"),
            "attachable-volumes-csi-ebs.csi.aws.com"
        );
        // 23 + 40 = 63 characters: shortened to the first 23 bytes and 16 hex digits of
        // SHA-1 (sha1("a"×40) = a565…, by Python's hashlib).
        let long = "a".repeat(40);
        let key = csi_limit_key(&long);
        assert_eq!(key.len(), CSI_PREFIX.len() + 23 + 16);
        assert!(
            key.starts_with(&format!("{CSI_PREFIX}{}", "a".repeat(23))),
            "{key}"
        );
        assert_eq!(&key[key.len() - 16..], "a56559418dc7908c");
        assert_eq!(csi_limit_key(&"b".repeat(39)).len(), CSI_PREFIX.len() + 39);
    }

    fn spec(v: serde_json::Value) -> PodSpec {
        serde_json::from_value(json!({"containers": [], "volumes": v})).expect("spec")
    }

    #[test]
    fn inline_cloud_disks_count_and_inline_csi_does_not() {
        let s = spec(json!([
            {"name": "a", "awsElasticBlockStore": {"volumeID": "vol-1"}},
            {"name": "b", "gcePersistentDisk": {"pdName": "pd-1"}},
            {"name": "c", "azureDisk": {"diskName": "d1", "diskURI": "u"}},
            {"name": "d", "cinder": {"volumeID": "c1"}},
            {"name": "e", "csi": {"driver": "x"}},
            {"name": "f", "emptyDir": {}}
        ]));
        let kinds: Vec<(AttachKind, String)> =
            inline(&s).into_iter().map(|v| (v.kind, v.id)).collect();
        assert_eq!(
            kinds,
            vec![
                (AttachKind::AwsEbs, "vol-1".into()),
                (AttachKind::GcePd, "pd-1".into()),
                (AttachKind::AzureDisk, "d1".into()),
                (AttachKind::Cinder, "c1".into()),
            ]
        );
    }

    #[test]
    fn claims_count_by_their_volume_or_by_their_classs_provisioner() {
        let mut f = Fake::default();
        f.add_claim(json!({"metadata": {"name": "on-csi", "namespace": "ns"},
            "spec": {"volumeName": "pv-csi"}}));
        f.add_volume(json!({"metadata": {"name": "pv-csi"},
            "spec": {"csi": {"driver": "d.example.com", "volumeHandle": "h1"}}}));
        f.add_claim(json!({"metadata": {"name": "on-ebs", "namespace": "ns"},
            "spec": {"volumeName": "pv-ebs"}}));
        f.add_volume(json!({"metadata": {"name": "pv-ebs"},
            "spec": {"awsElasticBlockStore": {"volumeID": "vol-9"}}}));
        f.add_claim(json!({"metadata": {"name": "on-nfs", "namespace": "ns"},
            "spec": {"volumeName": "pv-nfs"}}));
        f.add_volume(json!({"metadata": {"name": "pv-nfs"},
            "spec": {"nfs": {"server": "s", "path": "/"}}}));
        f.add_class(json!({"metadata": {"name": "fast"}, "provisioner": "d.example.com"}));
        f.add_class(json!({"metadata": {"name": "gp2"}, "provisioner": "kubernetes.io/aws-ebs"}));
        f.add_claim(json!({"metadata": {"name": "new-csi", "namespace": "ns"},
            "spec": {"storageClassName": "fast"}}));
        f.add_claim(json!({"metadata": {"name": "new-ebs", "namespace": "ns"},
            "spec": {"storageClassName": "gp2"}}));
        // The beta annotation names the class for CSI, not for the in-tree filters.
        f.add_claim(json!({"metadata": {"name": "beta-ebs", "namespace": "ns",
            "annotations": {BETA_CLASS: "gp2"}}, "spec": {}}));
        f.add_claim(
            json!({"metadata": {"name": "missing-pv", "namespace": "ns"},
            "spec": {"volumeName": "gone", "storageClassName": "fast"}}),
        );
        let one = |name: &str| of_claim("ns", name, &f);
        assert_eq!(one("on-csi"), vec![csi("d.example.com", "h1")]);
        assert_eq!(one("on-ebs"), vec![in_tree(AttachKind::AwsEbs, "vol-9")]);
        assert_eq!(one("on-nfs"), vec![]);
        assert_eq!(
            one("new-csi"),
            vec![csi("d.example.com", "claim:ns/new-csi")]
        );
        assert_eq!(
            one("new-ebs"),
            vec![in_tree(AttachKind::AwsEbs, "claim:ns/new-ebs")]
        );
        assert_eq!(one("beta-ebs"), vec![]);
        assert_eq!(
            one("missing-pv"),
            vec![csi("d.example.com", "claim:ns/missing-pv")]
        );
        assert_eq!(one("no-such-claim"), vec![]);
    }

    #[test]
    fn csinode_counts_override_the_nodes_allocatable() {
        let alloc = ResourceList::from_quantities([
            ("cpu", "4"),
            ("attachable-volumes-aws-ebs", "25"),
            ("attachable-volumes-csi-d.example.com", "10"),
        ])
        .expect("list");
        let csinode: CSINode = serde_json::from_value(json!({
            "metadata": {"name": "n1"},
            "spec": {"drivers": [
                {"name": "d.example.com", "nodeID": "n1", "allocatable": {"count": 3}},
                {"name": "other.example.com", "nodeID": "n1"}
            ]}
        }))
        .expect("csinode");
        let limits = node_limits(&alloc, Some(&csinode_limits(&csinode)));
        assert_eq!(
            limits,
            BTreeMap::from([
                ("attachable-volumes-aws-ebs".to_string(), 25),
                ("attachable-volumes-csi-d.example.com".to_string(), 3),
            ])
        );
    }
}
