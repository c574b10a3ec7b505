//! `VolumeBinding` filter, as kube-scheduler 1.20's `volumebinding` plugin and the volume
//! binder behind it (`pkg/controller/volume/scheduling`) decide feasibility:
//!
//! - **Bound claims** (`checkBoundClaims`): every bound PersistentVolume's required node
//!   affinity must admit the node — reason `node(s) had volume node affinity conflict`.
//! - **Claims to bind** (`WaitForFirstConsumer`, not bound yet): a claim already annotated
//!   with a selected node fits only that node; the others, smallest request first, each take
//!   the smallest matching volume of their class not taken by an earlier claim of the pod
//!   (`FindMatchingVolume`: free or pre-bound to the claim, large enough, same volume mode,
//!   not being deleted, `Available`, matching the claim's selector, its node affinity
//!   admitting the node, offering the claim's access modes; a volume pre-bound to the claim
//!   wins at once, or fails the node if its affinity excludes it). A claim without a match
//!   needs its class to provision: a provisioner other than `kubernetes.io/no-provisioner`
//!   whose `allowedTopologies` admit the node. Otherwise: `node(s) didn't find available
//!   persistent volumes to bind`.
//! - A pod the claims make unschedulable everywhere (an unbound claim with immediate
//!   binding: `pod has unbound immediate PersistentVolumeClaims`; a missing claim or volume)
//!   fails on every node with that reason.
//!
//! [`plan`] is the same decision for the chosen node, naming the volume each claim takes and
//! the claims to provision: what the Kubernetes layer writes (the volume's `claimRef`, the
//! claim's `selected-node` annotation) before it binds the pod. The claims are resolved by
//! the Kubernetes layer into [`VolumeNeeds`](loadstar_framework::snapshot::VolumeNeeds).
//! - **Storage capacity** (`hasEnoughCapacity`; alpha in 1.19, GA in 1.24): a claim to
//!   provision whose class's CSI driver opts into capacity tracking needs a
//!   `CSIStorageCapacity` of its class that the node reaches with room for the request —
//!   otherwise `node(s) did not have enough free storage`.
use std::collections::{BTreeMap, HashSet};

use loadstar_framework::snapshot::{CandidateVolume, ClaimToBind, NodeView, PodInfo};
use loadstar_framework::volumes::volume_admits;
use loadstar_framework::{CycleContext, FilterPlugin, REASON_SEPARATOR, Reason};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "VolumeBinding";
/// A bound volume's node affinity excludes the node.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";
/// An unbound claim finds neither a volume nor a provisioner for the node.
pub const REASON_BIND_CONFLICT: &str = "node(s) didn't find available persistent volumes to bind";
/// A claim to provision finds no storage capacity for it that the node reaches.
pub const REASON_NOT_ENOUGH_SPACE: &str = "node(s) did not have enough free storage";

/// How a pod's unbound claims would be met on one node.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BindPlan {
    /// `(claim, volume)`: indices into the pod's `to_bind` and that claim's candidates.
    pub static_bindings: Vec<(usize, usize)>,
    /// Claims (indices into `to_bind`) whose class provisions a volume for the node.
    pub provision: Vec<usize>,
}

/// `FindMatchingVolume` for one claim on a node: the index of the volume it would take.
fn find_matching(
    claim: &ClaimToBind,
    labels: &BTreeMap<String, String>,
    taken: &HashSet<&str>,
) -> Option<usize> {
    let mut smallest: Option<(usize, i64)> = None;
    for (i, v) in claim.candidates.iter().enumerate() {
        if taken.contains(v.name.as_str()) {
            continue;
        }
        let pre_bound = v.bound_to(claim);
        if v.claim_ref.is_some() && !pre_bound {
            continue;
        }
        if v.capacity_bytes < claim.request_bytes || v.volume_mode != claim.volume_mode {
            continue;
        }
        if v.deleting {
            continue;
        }
        let admits = v.admits(labels);
        if pre_bound {
            return admits.then_some(i);
        }
        if !v.available
            || !claim.selector.as_ref().is_none_or(|s| s.matches(&v.labels))
            || !admits
            || !offers_modes(v, claim)
        {
            continue;
        }
        if smallest.is_none_or(|(_, cap)| cap > v.capacity_bytes) {
            smallest = Some((i, v.capacity_bytes));
        }
    }
    smallest.map(|(i, _)| i)
}

/// `CheckAccessModes`: the volume offers every mode the claim asks for.
fn offers_modes(v: &CandidateVolume, claim: &ClaimToBind) -> bool {
    claim
        .access_modes
        .iter()
        .all(|m| v.access_modes.contains(m))
}

/// The claims-to-bind half of `FindPodVolumes` for the node `name` with `labels`: the plan,
/// or the reason the node cannot take them.
pub fn plan(
    to_bind: &[ClaimToBind],
    name: &str,
    labels: &BTreeMap<String, String>,
) -> Result<BindPlan, String> {
    let mut out = BindPlan::default();
    let mut find = Vec::new();
    let mut provision = Vec::new();
    for (i, c) in to_bind.iter().enumerate() {
        match &c.selected_node {
            Some(selected) if selected != name => return Err(REASON_BIND_CONFLICT.into()),
            Some(_) => provision.push(i),
            None => find.push(i),
        }
    }
    // Smallest request first (upstream sorts by size; its sort keeps the order of equals
    // for the handful of claims a pod has).
    find.sort_by_key(|&i| to_bind[i].request_bytes);
    let mut taken: HashSet<&str> = HashSet::new();
    for i in find {
        let claim = &to_bind[i];
        match find_matching(claim, labels, &taken) {
            Some(v) => {
                taken.insert(claim.candidates[v].name.as_str());
                out.static_bindings.push((i, v));
            }
            None => provision.push(i),
        }
    }
    for i in provision {
        match &to_bind[i].provisioning {
            Err(e) => return Err(e.clone()),
            Ok(p) if !p.admits(labels) => return Err(REASON_BIND_CONFLICT.into()),
            Ok(p)
                if p.capacity
                    .as_ref()
                    .is_some_and(|c| !c.has_room(to_bind[i].request_bytes, labels)) =>
            {
                return Err(REASON_NOT_ENOUGH_SPACE.into());
            }
            Ok(_) => out.provision.push(i),
        }
    }
    Ok(out)
}

/// The volume binding filter.
#[derive(Debug, Clone, Default)]
pub struct VolumeBinding;

impl VolumeBinding {
    /// Builds it; it takes no arguments (how long binding may take is the scheduler's
    /// `--volume-bind-timeout-seconds`, upstream's `bindTimeoutSeconds`).
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(VolumeBinding)
    }
}

impl FilterPlugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn skips(&self, _: Option<&loadstar_framework::PreFilterState>, pod: &PodInfo) -> bool {
        pod.volumes.is_none()
    }

    fn filter(&self, _: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        let Some(v) = &pod.volumes else {
            return Ok(());
        };
        if let Some(reason) = &v.unschedulable {
            return Err(reason.clone().into());
        }
        let labels = node.labels_or_empty();
        let mut reasons: Vec<String> = Vec::new();
        if !v
            .node_affinity
            .iter()
            .all(|terms| volume_admits(Some(terms), labels))
        {
            reasons.push(REASON_NODE_CONFLICT.into());
        }
        if !v.to_bind.is_empty()
            && let Err(e) = plan(&v.to_bind, &node.name, labels)
        {
            reasons.push(e);
        }
        if reasons.is_empty() {
            Ok(())
        } else {
            Err(reasons.join(REASON_SEPARATOR).into())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{
        LabelSelector, NodeSelectorTerm, Provisioning, SelectorOp, SelectorRequirement, VolumeNeeds,
    };
    use loadstar_testkit::snapshot::*;
    use std::collections::BTreeMap;

    #[test]
    fn bound_volumes_pin_the_pod_to_their_nodes() {
        let node = |name: &str| {
            edit_kube(kube_node(name, 1000, GIB), |k| {
                k.labels = BTreeMap::from([("kubernetes.io/hostname".into(), name.into())]);
            })
        };
        let mut p = pod(100, MIB);
        p.claims = vec!["data".into()];
        p.volumes = Some(VolumeNeeds {
            node_affinity: vec![vec![NodeSelectorTerm {
                expressions: vec![SelectorRequirement {
                    key: "kubernetes.io/hostname".into(),
                    op: SelectorOp::In,
                    values: vec!["a".into()],
                }],
                fields: vec![],
            }]],
            ..Default::default()
        });
        assert_eq!(filter_one(&VolumeBinding, node("a"), &p), Ok(()));
        assert_eq!(
            filter_one(&VolumeBinding, node("b"), &p),
            Err(REASON_NODE_CONFLICT.into())
        );
        // matchFields in a volume's node affinity are not checked (upstream passes no node
        // fields), so a fields-only term admits every node.
        p.volumes = Some(VolumeNeeds {
            node_affinity: vec![vec![NodeSelectorTerm {
                expressions: vec![],
                fields: vec![SelectorRequirement {
                    key: "metadata.name".into(),
                    op: SelectorOp::In,
                    values: vec!["a".into()],
                }],
            }]],
            ..Default::default()
        });
        assert_eq!(filter_one(&VolumeBinding, node("b"), &p), Ok(()));
        p.volumes = Some(VolumeNeeds {
            unschedulable: Some("pod has unbound immediate PersistentVolumeClaims".into()),
            ..Default::default()
        });
        assert_eq!(
            filter_one(&VolumeBinding, node("a"), &p),
            Err("pod has unbound immediate PersistentVolumeClaims".into())
        );
    }

    fn host(name: &str) -> BTreeMap<String, String> {
        BTreeMap::from([("kubernetes.io/hostname".to_string(), name.to_string())])
    }

    fn on_host(name: &str) -> Vec<NodeSelectorTerm> {
        vec![NodeSelectorTerm {
            expressions: vec![SelectorRequirement {
                key: "kubernetes.io/hostname".into(),
                op: SelectorOp::In,
                values: vec![name.into()],
            }],
            fields: vec![],
        }]
    }

    fn pv(name: &str, gib: i64, host: Option<&str>) -> CandidateVolume {
        CandidateVolume {
            name: name.into(),
            capacity_bytes: gib * GIB,
            volume_mode: "Filesystem".into(),
            access_modes: vec!["ReadWriteOnce".into()],
            node_affinity: host.map(on_host),
            available: true,
            ..Default::default()
        }
    }

    fn claim(name: &str, gib: i64, candidates: Vec<CandidateVolume>) -> ClaimToBind {
        ClaimToBind {
            namespace: "ns".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
            request_bytes: gib * GIB,
            access_modes: vec!["ReadWriteOnce".into()],
            volume_mode: "Filesystem".into(),
            class: "local".into(),
            candidates: std::sync::Arc::new(candidates),
            provisioning: Ok(Provisioning {
                provisioner: loadstar_framework::volumes::NO_PROVISIONER.into(),
                allowed_topologies: vec![],
                capacity: None,
            }),
            ..Default::default()
        }
    }

    #[test]
    fn claims_take_the_smallest_matching_volume_on_the_node_each_once() {
        let vols = vec![
            pv("big-a", 10, Some("a")),
            pv("small-a", 2, Some("a")),
            pv("b", 5, Some("b")),
            pv("anywhere", 3, None),
        ];
        let c = claim("data", 1, vols.clone());
        let p = plan(std::slice::from_ref(&c), "a", &host("a")).expect("fits a");
        assert_eq!(
            p.static_bindings,
            vec![(0, 1)],
            "small-a, the smallest on a"
        );
        let p = plan(std::slice::from_ref(&c), "b", &host("b")).expect("fits b");
        assert_eq!(
            p.static_bindings,
            vec![(0, 3)],
            "anywhere (3 GiB) is smaller than b (5)"
        );
        // Two claims: the larger takes what the smaller left. Sorted by size: `small`
        // (1 GiB) first takes small-a, then `large` (4 GiB) takes big-a.
        let two = [
            claim("large", 4, vols.clone()),
            claim("small", 1, vols.clone()),
        ];
        let p = plan(&two, "a", &host("a")).expect("fits");
        assert_eq!(p.static_bindings, vec![(1, 1), (0, 0)]);
        // Four claims on a: only three volumes reach a, and the class does not provision.
        let four = [
            claim("x", 1, vols.clone()),
            claim("y", 1, vols.clone()),
            claim("z", 1, vols.clone()),
            claim("w", 1, vols.clone()),
        ];
        assert_eq!(
            plan(&four, "a", &host("a")),
            Err(REASON_BIND_CONFLICT.into())
        );
    }

    #[test]
    fn volume_checks_follow_find_matching_volume() {
        let base = pv("v", 5, None);
        let c = claim("data", 1, vec![]);
        let fits = |v: CandidateVolume, c: &ClaimToBind| {
            let c = ClaimToBind {
                candidates: std::sync::Arc::new(vec![v]),
                ..c.clone()
            };
            plan(&[c], "a", &host("a")).is_ok()
        };
        assert!(fits(base.clone(), &c));
        assert!(!fits(
            CandidateVolume {
                capacity_bytes: GIB / 2,
                ..base.clone()
            },
            &c
        ));
        assert!(!fits(
            CandidateVolume {
                volume_mode: "Block".into(),
                ..base.clone()
            },
            &c
        ));
        assert!(!fits(
            CandidateVolume {
                deleting: true,
                ..base.clone()
            },
            &c
        ));
        assert!(!fits(
            CandidateVolume {
                available: false,
                ..base.clone()
            },
            &c
        ));
        assert!(!fits(
            CandidateVolume {
                access_modes: vec!["ReadOnlyMany".into()],
                ..base.clone()
            },
            &c
        ));
        let other = Some(("ns".to_string(), "someone-else".to_string(), String::new()));
        assert!(!fits(
            CandidateVolume {
                claim_ref: other,
                ..base.clone()
            },
            &c
        ));
        // Pre-bound to this claim: taken even when not Available, unless its node
        // affinity excludes the node.
        let mine = Some(("ns".to_string(), "data".to_string(), "uid-data".to_string()));
        let pre = CandidateVolume {
            claim_ref: mine,
            available: false,
            ..base.clone()
        };
        assert!(fits(pre.clone(), &c));
        assert!(!fits(
            CandidateVolume {
                node_affinity: Some(on_host("b")),
                ..pre
            },
            &c
        ));
        // The claim's selector reads the volume's labels.
        let sel = ClaimToBind {
            selector: Some(LabelSelector {
                match_labels: BTreeMap::from([("tier".into(), "fast".into())]),
                ..Default::default()
            }),
            ..c.clone()
        };
        assert!(!fits(base.clone(), &sel));
        let labelled = CandidateVolume {
            labels: BTreeMap::from([("tier".into(), "fast".into())]),
            ..base
        };
        assert!(fits(labelled, &sel));
    }

    #[test]
    fn unmatched_claims_need_a_provisioner_for_the_node_and_selected_nodes_pin_them() {
        let zone = |z: &str| BTreeMap::from([("zone".to_string(), z.to_string())]);
        let provisioned = ClaimToBind {
            provisioning: Ok(Provisioning {
                provisioner: "csi.example.com".into(),
                allowed_topologies: vec![vec![("zone".into(), vec!["a".into()])]],
                capacity: None,
            }),
            ..claim("data", 1, vec![])
        };
        let p =
            plan(std::slice::from_ref(&provisioned), "n1", &zone("a")).expect("provisions in a");
        assert_eq!(p.provision, vec![0]);
        assert_eq!(
            plan(std::slice::from_ref(&provisioned), "n1", &zone("b")),
            Err(REASON_BIND_CONFLICT.into())
        );
        let selected = ClaimToBind {
            selected_node: Some("n1".into()),
            ..provisioned.clone()
        };
        assert!(plan(std::slice::from_ref(&selected), "n1", &zone("a")).is_ok());
        assert_eq!(
            plan(std::slice::from_ref(&selected), "n2", &zone("a")),
            Err(REASON_BIND_CONFLICT.into())
        );
        let broken = ClaimToBind {
            provisioning: Err("storageclass.storage.k8s.io \"gone\" not found".into()),
            ..provisioned
        };
        assert_eq!(
            plan(&[broken], "n1", &zone("a")),
            Err("storageclass.storage.k8s.io \"gone\" not found".into())
        );
    }

    #[test]
    fn a_driver_tracking_capacity_provisions_only_where_a_pool_has_room() {
        use loadstar_framework::snapshot::{ClassCapacity, LabelSelector};
        use std::sync::Arc;
        let host =
            |n: &str| BTreeMap::from([("kubernetes.io/hostname".to_string(), n.to_string())]);
        let mut pools = ClassCapacity::default();
        for (n, size) in [("n1", 10 * GIB), ("n2", GIB)] {
            let topology = LabelSelector {
                match_labels: host(n),
                ..Default::default()
            };
            pools.add(Some(topology), Some(size));
        }
        let claim_of = |gib: i64, capacity: Option<Arc<ClassCapacity>>| ClaimToBind {
            provisioning: Ok(Provisioning {
                provisioner: "lvm.csi.example.com".into(),
                allowed_topologies: vec![],
                capacity,
            }),
            ..claim("data", gib, vec![])
        };
        let pools = Arc::new(pools);
        let five = claim_of(5, Some(pools.clone()));
        let fits = |c: &ClaimToBind, n: &str| plan(std::slice::from_ref(c), n, &host(n));
        assert_eq!(fits(&five, "n1").map(|p| p.provision), Ok(vec![0]));
        assert_eq!(fits(&five, "n2"), Err(REASON_NOT_ENOUGH_SPACE.into()));
        assert_eq!(fits(&five, "n3"), Err(REASON_NOT_ENOUGH_SPACE.into()));
        // Untracked (the driver does not opt in): provisioned anywhere its class allows.
        assert!(fits(&claim_of(5, None), "n3").is_ok());
        // Already placed on n2 by an earlier attempt: checked there too, as upstream.
        let selected = ClaimToBind {
            selected_node: Some("n2".into()),
            ..five
        };
        assert_eq!(fits(&selected, "n2"), Err(REASON_NOT_ENOUGH_SPACE.into()));
    }

    #[test]
    fn bound_and_unbound_conflicts_are_both_reported() {
        let mut p = pod(100, MIB);
        p.claims = vec!["bound".into(), "data".into()];
        p.volumes = Some(VolumeNeeds {
            node_affinity: vec![on_host("a")],
            to_bind: vec![claim("data", 1, vec![pv("v", 1, Some("a"))])],
            ..Default::default()
        });
        let node = |name: &str| edit_kube(kube_node(name, 1000, GIB), |k| k.labels = host(name));
        assert_eq!(filter_one(&VolumeBinding, node("a"), &p), Ok(()));
        assert_eq!(
            filter_one(&VolumeBinding, node("b"), &p),
            Err(format!("{REASON_NODE_CONFLICT}, {REASON_BIND_CONFLICT}").into())
        );
    }
}
