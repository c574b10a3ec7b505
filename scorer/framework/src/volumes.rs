//! What a pod's volumes ask of a node, in the shape kube-scheduler 1.20's volume plugins
//! read them: claims already bound (node affinity and zones of their volumes), claims still
//! to be bound with `WaitForFirstConsumer` (the volumes that could take them and whether
//! their class provisions), volumes that count against a node's attach limits, and inline
//! disks that two pods may not share. Pure data resolved by the Kubernetes layer from the
//! cluster's claims, volumes, storage classes and CSINodes; the filters that read them live
//! in `loadstar-policy`.
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use crate::constraints::{LabelSelector, NodeSelectorTerm};

/// A PersistentVolumeClaim one of a pod's volumes mounts, in the pod's namespace.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodClaim {
    /// The claim's name: a `persistentVolumeClaim` volume's `claimName`, or for a generic
    /// `ephemeral` volume `<pod>-<volume>`, the claim the ephemeral volume controller
    /// creates for it.
    pub name: String,
    /// A generic ephemeral volume's claim: it counts only while the pod controls it (its
    /// controlling owner reference names the pod's UID), as upstream's
    /// `ephemeral.VolumeIsForPod`.
    pub ephemeral: bool,
}

impl From<&str> for PodClaim {
    /// A `persistentVolumeClaim` volume's claim.
    fn from(name: &str) -> Self {
        Self {
            name: name.to_string(),
            ephemeral: false,
        }
    }
}

/// What a pod's PersistentVolumeClaims need of a node, resolved against the cluster's
/// claims, volumes and storage classes when the pod is scheduled.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VolumeNeeds {
    /// Each bound volume's required node affinity terms (ORed within one volume; every
    /// volume must match): `VolumeBinding`.
    pub node_affinity: Vec<Vec<NodeSelectorTerm>>,
    /// Bound volumes' zone and region labels: the node's label under the key must be one of
    /// the values (a label's `a__b` lists several): `VolumeZone`.
    pub zones: Vec<(String, Vec<String>)>,
    /// Why no node can take the pod, in kube-scheduler's words (an unbound claim with
    /// immediate binding, a missing claim or volume).
    pub unschedulable: Option<String>,
    /// Claims of a `WaitForFirstConsumer` class not bound yet: the scheduler picks a volume
    /// for each (or has its class provision one) on the node it chooses.
    pub to_bind: Vec<ClaimToBind>,
    /// Its `persistentVolumeClaim` volumes' claims whose access modes include
    /// `ReadWriteOncePod` (1.22+, GA in 1.29), by name: no other pod may use them
    /// (`VolumeRestrictions`).
    pub read_write_once_pod: Vec<String>,
}

/// An unbound claim whose class waits for the first consumer (`VolumeBinding`'s
/// `claimsToBind`), with what matching it on a node needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimToBind {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (a volume pre-bound to the claim may name it).
    pub uid: String,
    /// `resourceVersion`, for the update that binds it.
    pub resource_version: String,
    /// `spec.resources.requests.storage`, bytes (rounded up).
    pub request_bytes: i64,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// `spec.volumeMode` (`Filesystem` when unset).
    pub volume_mode: String,
    /// `spec.selector` over volumes' labels (`None`: any volume).
    pub selector: Option<LabelSelector>,
    /// The claim's class (the beta annotation first, then `storageClassName`).
    pub class: String,
    /// `volume.kubernetes.io/selected-node`: an earlier scheduling decision the provisioner
    /// is acting on; only that node may take the claim.
    pub selected_node: Option<String>,
    /// The volumes of the claim's class, in the cluster's order.
    pub candidates: Arc<Vec<CandidateVolume>>,
    /// How the class provisions (`Err`: why it cannot be checked, which fails every node).
    pub provisioning: Result<Provisioning, String>,
}

impl Default for ClaimToBind {
    /// An empty claim whose class provisions nothing.
    fn default() -> Self {
        ClaimToBind {
            namespace: String::new(),
            name: String::new(),
            uid: String::new(),
            resource_version: String::new(),
            request_bytes: 0,
            access_modes: Vec::new(),
            volume_mode: String::new(),
            selector: None,
            class: String::new(),
            selected_node: None,
            candidates: Arc::default(),
            provisioning: Ok(Provisioning::default()),
        }
    }
}

/// A PersistentVolume as `FindMatchingVolume` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CandidateVolume {
    /// Name.
    pub name: String,
    /// `spec.capacity.storage`, bytes (rounded up; 0 when absent).
    pub capacity_bytes: i64,
    /// `spec.volumeMode` (`Filesystem` when unset).
    pub volume_mode: String,
    /// `spec.accessModes`.
    pub access_modes: Vec<String>,
    /// Labels (a claim's selector reads them).
    pub labels: BTreeMap<String, String>,
    /// Required node affinity terms (`None`: any node).
    pub node_affinity: Option<Vec<NodeSelectorTerm>>,
    /// `status.phase` is `Available`.
    pub available: bool,
    /// Being deleted.
    pub deleting: bool,
    /// `spec.claimRef` as `(namespace, name, uid)`, also when only assumed by this
    /// scheduler for a pod still binding.
    pub claim_ref: Option<(String, String, String)>,
    /// `resourceVersion`, for the update that binds it.
    pub resource_version: String,
}

impl CandidateVolume {
    /// `IsVolumeBoundToClaim`: the volume's claim reference names the claim (its UID, when
    /// the reference has one).
    pub fn bound_to(&self, claim: &ClaimToBind) -> bool {
        self.claim_ref.as_ref().is_some_and(|(ns, name, uid)| {
            ns == &claim.namespace && name == &claim.name && (uid.is_empty() || uid == &claim.uid)
        })
    }

    /// `CheckNodeAffinity`: the volume's required node affinity admits a node with these
    /// labels (node fields are not consulted, as upstream matches against labels only).
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        volume_admits(self.node_affinity.as_deref(), labels)
    }
}

/// Upstream's `CheckNodeAffinity` for a volume's required terms: `None` admits every node; a
/// term admits when it has at least one requirement and every `matchExpressions` entry
/// holds (its `matchFields` are ignored).
pub fn volume_admits(
    terms: Option<&[NodeSelectorTerm]>,
    labels: &BTreeMap<String, String>,
) -> bool {
    let Some(terms) = terms else {
        return true;
    };
    terms.iter().any(|t| {
        (!t.expressions.is_empty() || !t.fields.is_empty())
            && t.expressions.iter().all(|r| r.matches(labels))
    })
}

/// A class's dynamic provisioning as `checkVolumeProvisions` reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Provisioning {
    /// The class's `provisioner` (empty or `kubernetes.io/no-provisioner`: none).
    pub provisioner: String,
    /// `allowedTopologies`: ORed terms of `(key, values)` requirements ANDed within a term;
    /// empty admits every node.
    pub allowed_topologies: Vec<Vec<(String, Vec<String>)>>,
    /// The storage its CSI driver reports left for the class (`CSIStorageCapacity`), when
    /// the driver opts into capacity tracking (`CSIDriver.spec.storageCapacity`), the API
    /// server serves the capacities and the claim requests storage; `None`: not checked.
    pub capacity: Option<Arc<ClassCapacity>>,
}

/// What a class's `CSIStorageCapacity` objects offer, indexed for the per-node check
/// (upstream's `hasEnoughCapacity`): a node has room for a volume when some capacity whose
/// `nodeTopology` selects the node can take it — its `maximumVolumeSize`, else its
/// `capacity`, at least the claim's request. A capacity without a topology or a size
/// offers nothing.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClassCapacity {
    /// Capacities whose topology is one `matchLabels` pair (a node's or a zone's pool, as
    /// CSI drivers publish them): label key → value → the largest volume offered there.
    /// Looked up by the node's labels, so a pool per node costs no scan per node.
    by_label: HashMap<String, HashMap<String, i64>>,
    /// The other capacities: their topology and the largest volume each offers.
    other: Vec<(LabelSelector, i64)>,
}

impl ClassCapacity {
    /// Adds a capacity: its `nodeTopology` and the largest volume it offers.
    pub fn add(&mut self, topology: Option<LabelSelector>, limit_bytes: Option<i64>) {
        let (Some(topology), Some(limit)) = (topology, limit_bytes) else {
            return;
        };
        let mut labels = topology.match_labels.iter();
        match (
            labels.next(),
            labels.next(),
            topology.match_expressions.is_empty(),
        ) {
            (Some((k, v)), None, true) => {
                let largest = self
                    .by_label
                    .entry(k.clone())
                    .or_default()
                    .entry(v.clone())
                    .or_insert(limit);
                *largest = (*largest).max(limit);
            }
            _ => self.other.push((topology, limit)),
        }
    }

    /// Whether a node with these labels reaches a capacity that can take `request_bytes`.
    pub fn has_room(&self, request_bytes: i64, labels: &BTreeMap<String, String>) -> bool {
        labels.iter().any(|(k, v)| {
            self.by_label
                .get(k)
                .and_then(|values| values.get(v))
                .is_some_and(|&limit| limit >= request_bytes)
        }) || self
            .other
            .iter()
            .any(|(topology, limit)| *limit >= request_bytes && topology.matches(labels))
    }
}

/// The provisioner name that means "no dynamic provisioning".
pub const NO_PROVISIONER: &str = "kubernetes.io/no-provisioner";

impl Provisioning {
    /// Whether the class can provision a volume reachable from a node with these labels
    /// (`MatchTopologySelectorTerms`: an empty term matches nothing).
    pub fn admits(&self, labels: &BTreeMap<String, String>) -> bool {
        if self.provisioner.is_empty() || self.provisioner == NO_PROVISIONER {
            return false;
        }
        self.allowed_topologies.is_empty()
            || self.allowed_topologies.iter().any(|term| {
                !term.is_empty()
                    && term
                        .iter()
                        .all(|(k, vs)| labels.get(k).is_some_and(|v| vs.contains(v)))
            })
    }
}

/// Which attach limit a volume counts against: a CSI driver's (`NodeVolumeLimits`) or one
/// of the in-tree cloud disks' (`EBSLimits`, `GCEPDLimits`, `AzureDiskLimits`,
/// `CinderLimits`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum AttachKind {
    /// A CSI driver's volume (the limit key names the driver).
    Csi,
    /// `awsElasticBlockStore`.
    AwsEbs,
    /// `gcePersistentDisk`.
    GcePd,
    /// `azureDisk`.
    AzureDisk,
    /// `cinder`.
    Cinder,
}

impl AttachKind {
    /// The node allocatable resource that overrides the default limit of an in-tree kind
    /// (`attachable-volumes-aws-ebs`, ...); CSI keys carry the driver and are built by the
    /// Kubernetes layer.
    pub fn in_tree_key(self) -> Option<&'static str> {
        match self {
            AttachKind::Csi => None,
            AttachKind::AwsEbs => Some("attachable-volumes-aws-ebs"),
            AttachKind::GcePd => Some("attachable-volumes-gce-pd"),
            AttachKind::AzureDisk => Some("attachable-volumes-azure-disk"),
            AttachKind::Cinder => Some("attachable-volumes-cinder"),
        }
    }
}

/// A volume a pod mounts that takes one of a node's attachment slots.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AttachableVolume {
    /// Which limit it counts against.
    pub kind: AttachKind,
    /// The limit's resource name (`attachable-volumes-csi-<driver>`, or the in-tree key).
    pub limit_key: String,
    /// What makes two mounts one attachment: the CSI volume handle or cloud disk ID, or the
    /// claim (`claim:<namespace>/<name>`) while it is not bound.
    pub id: String,
}

/// An inline disk of a pod that only one pod (or only readers) may use on a node: the
/// volume sources kube-scheduler 1.20's `VolumeRestrictions` compares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InlineDisk {
    /// `gcePersistentDisk`: conflicts on the same `pdName` unless both are read-only.
    GcePd {
        /// `pdName`.
        name: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// `awsElasticBlockStore`: conflicts on the same `volumeID`, read-only or not.
    AwsEbs {
        /// `volumeID`.
        volume_id: String,
    },
    /// `iscsi`: conflicts on the same `iqn` unless both are read-only.
    Iscsi {
        /// `iqn`.
        iqn: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// `rbd`: conflicts when the monitors overlap and pool and image are equal, unless both
    /// are read-only.
    Rbd {
        /// `monitors`.
        monitors: Vec<String>,
        /// `pool` (the API server's default `rbd` when empty).
        pool: String,
        /// `image`.
        image: String,
        /// `readOnly`.
        read_only: bool,
    },
}

impl InlineDisk {
    /// `isVolumeConflict` for one pair.
    pub fn conflicts(&self, other: &InlineDisk) -> bool {
        use InlineDisk::*;
        match (self, other) {
            (
                GcePd { name, read_only },
                GcePd {
                    name: n,
                    read_only: r,
                },
            ) => name == n && !(*read_only && *r),
            (AwsEbs { volume_id }, AwsEbs { volume_id: v }) => volume_id == v,
            (
                Iscsi { iqn, read_only },
                Iscsi {
                    iqn: i,
                    read_only: r,
                },
            ) => iqn == i && !(*read_only && *r),
            (
                Rbd {
                    monitors,
                    pool,
                    image,
                    read_only,
                },
                Rbd {
                    monitors: m,
                    pool: p,
                    image: i,
                    read_only: r,
                },
            ) => {
                monitors.iter().any(|x| m.contains(x))
                    && pool == p
                    && image == i
                    && !(*read_only && *r)
            }
            _ => false,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::constraints::{SelectorOp, SelectorRequirement};

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn provisioning_needs_a_provisioner_and_a_matching_topology_term() {
        let node = labels(&[("zone", "a")]);
        let any = Provisioning {
            provisioner: "csi.example.com".into(),
            allowed_topologies: vec![],
            capacity: None,
        };
        assert!(any.admits(&node));
        for none in ["", NO_PROVISIONER] {
            let p = Provisioning {
                provisioner: none.into(),
                ..any.clone()
            };
            assert!(!p.admits(&node), "{none:?}");
        }
        let zoned = |terms: Vec<Vec<(String, Vec<String>)>>| Provisioning {
            allowed_topologies: terms,
            ..any.clone()
        };
        let req =
            |k: &str, vs: &[&str]| (k.to_string(), vs.iter().map(|v| v.to_string()).collect());
        assert!(
            zoned(vec![
                vec![req("zone", &["b"])],
                vec![req("zone", &["a", "c"])]
            ])
            .admits(&node)
        );
        assert!(!zoned(vec![vec![req("zone", &["b"])]]).admits(&node));
        assert!(!zoned(vec![vec![req("zone", &["a"]), req("rack", &["1"])]]).admits(&node));
        // An empty term selects nothing (but the list is not empty).
        assert!(!zoned(vec![vec![]]).admits(&node));
    }

    #[test]
    fn a_node_has_room_where_a_capacity_it_reaches_can_take_the_volume() {
        use crate::constraints::{SelectorOp, SelectorRequirement};
        let pool = |k: &str, v: &str| LabelSelector {
            match_labels: labels(&[(k, v)]),
            ..Default::default()
        };
        let mut c = ClassCapacity::default();
        let gib = 1 << 30;
        // Per-node pools (indexed by label), the largest of two for the same node counts.
        c.add(Some(pool("kubernetes.io/hostname", "n1")), Some(2 * gib));
        c.add(Some(pool("kubernetes.io/hostname", "n1")), Some(5 * gib));
        c.add(Some(pool("kubernetes.io/hostname", "n2")), Some(gib));
        // A pool over a zone's racks (an expression: scanned), one without a size, one
        // without a topology: the last two offer nothing.
        let racks = LabelSelector {
            match_labels: labels(&[("zone", "b")]),
            match_expressions: vec![SelectorRequirement {
                key: "rack".into(),
                op: SelectorOp::In,
                values: vec!["r1".into()],
            }],
        };
        c.add(Some(racks), Some(10 * gib));
        c.add(Some(pool("zone", "c")), None);
        c.add(None, Some(100 * gib));
        let node = |name: &str, zone: &str, rack: &str| {
            labels(&[
                ("kubernetes.io/hostname", name),
                ("zone", zone),
                ("rack", rack),
            ])
        };
        assert!(c.has_room(5 * gib, &node("n1", "a", "r0")));
        assert!(!c.has_room(5 * gib + 1, &node("n1", "a", "r0")));
        assert!(!c.has_room(2 * gib, &node("n2", "a", "r0")));
        assert!(c.has_room(8 * gib, &node("n2", "b", "r1")));
        assert!(!c.has_room(8 * gib, &node("n2", "b", "r2")));
        assert!(!c.has_room(1, &node("n3", "c", "r1")));
    }

    #[test]
    fn a_volume_is_bound_to_a_claim_by_name_and_uid_when_it_names_one() {
        let claim = ClaimToBind {
            namespace: "ns".into(),
            name: "c".into(),
            uid: "u1".into(),
            ..Default::default()
        };
        let with = |r: Option<(&str, &str, &str)>| CandidateVolume {
            claim_ref: r.map(|(a, b, c)| (a.into(), b.into(), c.into())),
            ..Default::default()
        };
        assert!(with(Some(("ns", "c", ""))).bound_to(&claim));
        assert!(with(Some(("ns", "c", "u1"))).bound_to(&claim));
        assert!(!with(Some(("ns", "c", "u2"))).bound_to(&claim));
        assert!(!with(Some(("other", "c", ""))).bound_to(&claim));
        assert!(!with(None).bound_to(&claim));
    }

    #[test]
    fn volume_node_affinity_reads_labels_only_and_empty_terms_match_nothing() {
        let node = labels(&[("host", "n1")]);
        let term = |expressions: Vec<SelectorRequirement>, fields: Vec<SelectorRequirement>| {
            NodeSelectorTerm {
                expressions,
                fields,
            }
        };
        let host = |v: &str| SelectorRequirement {
            key: "host".into(),
            op: SelectorOp::In,
            values: vec![v.into()],
        };
        assert!(volume_admits(None, &node));
        assert!(volume_admits(
            Some(&[
                term(vec![host("n2")], vec![]),
                term(vec![host("n1")], vec![])
            ]),
            &node
        ));
        assert!(!volume_admits(
            Some(&[term(vec![host("n2")], vec![])]),
            &node
        ));
        assert!(!volume_admits(Some(&[term(vec![], vec![])]), &node));
        // A fields-only term holds whatever the fields say.
        assert!(volume_admits(
            Some(&[term(vec![], vec![host("elsewhere")])]),
            &node
        ));
    }
}
