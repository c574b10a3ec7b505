//! Attach limits: how many volumes a node can have attached at once, as kube-scheduler
//! 1.20's `nodevolumelimits` plugins count them. `NodeVolumeLimits` counts CSI volumes per
//! driver against the node's `attachable-volumes-csi-<driver>` allocatable, overridden by
//! its CSINode's `allocatable.count`; a driver without a limit is unlimited. `EBSLimits`,
//! `GCEPDLimits`, `AzureDiskLimits` and `CinderLimits` count the in-tree cloud disks
//! (inline, or behind a claim) against the node's `attachable-volumes-<kind>` allocatable or
//! upstream's defaults: 39 EBS volumes (25 on Nitro instance types), 16 GCE PDs, 16 Azure
//! disks, 256 Cinder volumes.
//!
//! A volume mounted by several pods on the node is one attachment (same CSI handle or disk
//! ID; an unbound claim counts as itself until bound). Only the pod's volumes not already
//! attached are new. The two counts differ in one corner, as upstream's do: the CSI filter
//! passes a pod whose volumes are all attached already, while an in-tree filter compares
//! existing + new with the limit even then, so a node over its in-tree limit takes no pod
//! with such a volume. Upstream's `KUBE_MAX_PD_VOLS` environment override is not read (the
//! allocatable entries are the supported way), and CSI migration of in-tree disks is off,
//! as its feature gates are by default in 1.20. Reason: `node(s) exceed max volume count`;
//! evicting pods frees attachments, so preemption may help.
use std::collections::{BTreeMap, HashMap, HashSet};

use loadstar_framework::snapshot::{AttachKind, AttachableVolume, NodeView, PodInfo};
use loadstar_framework::{CycleContext, FilterPlugin, Reason};

use crate::args::{NoArgs, PluginError, parse_args};

/// The CSI plugin's name.
pub const CSI_NAME: &str = "NodeVolumeLimits";
/// The in-tree EBS plugin's name.
pub const EBS_NAME: &str = "EBSLimits";
/// The in-tree GCE PD plugin's name.
pub const GCE_PD_NAME: &str = "GCEPDLimits";
/// The in-tree Azure disk plugin's name.
pub const AZURE_DISK_NAME: &str = "AzureDiskLimits";
/// The in-tree Cinder plugin's name.
pub const CINDER_NAME: &str = "CinderLimits";
/// Upstream's reason (`ErrReasonMaxVolumeCountExceeded`).
pub const REASON: &str = "node(s) exceed max volume count";

/// EBS volumes per node unless the node says otherwise (`DefaultMaxEBSVolumes`).
pub const DEFAULT_MAX_EBS: i64 = 39;
/// EBS volumes per Nitro node (`DefaultMaxEBSNitroVolumeLimit`).
pub const DEFAULT_MAX_EBS_NITRO: i64 = 25;
/// GCE PDs per node.
pub const DEFAULT_MAX_GCE_PD: i64 = 16;
/// Azure disks per node.
pub const DEFAULT_MAX_AZURE_DISK: i64 = 16;
/// Cinder volumes per node.
pub const DEFAULT_MAX_CINDER: i64 = 256;

/// The instance-type labels, GA first.
const INSTANCE_TYPE_LABELS: &[&str] = &[
    "node.kubernetes.io/instance-type",
    "beta.kubernetes.io/instance-type",
];

/// Upstream's `EBSNitroLimitRegex`, `^[cmr]5.*|t3|z1d`: an alternation, so `t3` and `z1d`
/// match anywhere in the type.
fn is_nitro(instance_type: &str) -> bool {
    let b = instance_type.as_bytes();
    (b.len() >= 2 && matches!(b[0], b'c' | b'm' | b'r') && b[1] == b'5')
        || instance_type.contains("t3")
        || instance_type.contains("z1d")
}

/// The default limit of an in-tree kind on a node with these labels.
pub fn default_limit(kind: AttachKind, labels: &BTreeMap<String, String>) -> Option<i64> {
    match kind {
        AttachKind::Csi => None,
        AttachKind::AwsEbs => {
            let instance = INSTANCE_TYPE_LABELS
                .iter()
                .find_map(|k| labels.get(*k))
                .map(String::as_str)
                .unwrap_or("");
            Some(if is_nitro(instance) {
                DEFAULT_MAX_EBS_NITRO
            } else {
                DEFAULT_MAX_EBS
            })
        }
        AttachKind::GcePd => Some(DEFAULT_MAX_GCE_PD),
        AttachKind::AzureDisk => Some(DEFAULT_MAX_AZURE_DISK),
        AttachKind::Cinder => Some(DEFAULT_MAX_CINDER),
    }
}

/// The node's volumes of `kind`, attached for the pods already there.
fn attached(node: &NodeView, kind: AttachKind) -> impl Iterator<Item = &AttachableVolume> {
    node.alloc
        .pods
        .iter()
        .flat_map(|p| &p.attachable)
        .filter(move |v| v.kind == kind)
}

/// The CSI attach-limit filter.
#[derive(Debug, Clone, Default)]
pub struct NodeVolumeLimits;

impl NodeVolumeLimits {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(CSI_NAME, args)?;
        Ok(NodeVolumeLimits)
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        CSI_NAME
    }

    fn skips(&self, _: Option<&loadstar_framework::PreFilterState>, pod: &PodInfo) -> bool {
        !pod.attachable.iter().any(|v| v.kind == AttachKind::Csi)
    }

    /// Evicting pods detaches their volumes (upstream: `Unschedulable`).
    fn preemption_may_help(&self, _reason: &str) -> bool {
        true
    }

    fn filter(&self, _: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        let mut new: HashSet<(&str, &str)> = pod
            .attachable
            .iter()
            .filter(|v| v.kind == AttachKind::Csi)
            .map(|v| (v.limit_key.as_str(), v.id.as_str()))
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let Some(limits) = node.kube.as_ref().map(|k| &k.volume_limits) else {
            return Ok(());
        };
        if limits.is_empty() {
            return Ok(());
        }
        let on_node: HashSet<(&str, &str)> = attached(node, AttachKind::Csi)
            .map(|v| (v.limit_key.as_str(), v.id.as_str()))
            .collect();
        let mut attached_count: HashMap<&str, i64> = HashMap::new();
        for (key, id) in &on_node {
            new.remove(&(*key, *id));
            *attached_count.entry(key).or_default() += 1;
        }
        let mut new_count: HashMap<&str, i64> = HashMap::new();
        for (key, _) in &new {
            *new_count.entry(key).or_default() += 1;
        }
        for (key, n) in new_count {
            if let Some(limit) = limits.get(key) {
                let now = attached_count.get(key).copied().unwrap_or(0);
                if now.saturating_add(n) > *limit {
                    return Err(REASON.into());
                }
            }
        }
        Ok(())
    }
}

/// One in-tree attach-limit filter (EBS, GCE PD, Azure disk or Cinder).
#[derive(Debug, Clone)]
pub struct InTreeVolumeLimits {
    kind: AttachKind,
    name: &'static str,
}

impl InTreeVolumeLimits {
    /// Builds the filter called `name` (one of the four in-tree names); it takes no
    /// arguments.
    pub fn from_args(name: &'static str, args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(name, args)?;
        let kind = match name {
            EBS_NAME => AttachKind::AwsEbs,
            GCE_PD_NAME => AttachKind::GcePd,
            AZURE_DISK_NAME => AttachKind::AzureDisk,
            _ => AttachKind::Cinder,
        };
        Ok(InTreeVolumeLimits { kind, name })
    }

    /// The node's limit for this kind: its allocatable entry, else the default.
    fn limit(&self, node: &NodeView) -> i64 {
        let key = self.kind.in_tree_key().unwrap_or_default();
        if let Some(l) = node.kube.as_ref().and_then(|k| k.volume_limits.get(key)) {
            return *l;
        }
        default_limit(self.kind, node.labels_or_empty()).unwrap_or(i64::MAX)
    }
}

impl FilterPlugin for InTreeVolumeLimits {
    fn name(&self) -> &'static str {
        self.name
    }

    fn skips(&self, _: Option<&loadstar_framework::PreFilterState>, pod: &PodInfo) -> bool {
        !pod.attachable.iter().any(|v| v.kind == self.kind)
    }

    /// Evicting pods detaches their disks (upstream: `Unschedulable`).
    fn preemption_may_help(&self, _reason: &str) -> bool {
        true
    }

    fn filter(&self, _: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        let mut new: HashSet<&str> = pod
            .attachable
            .iter()
            .filter(|v| v.kind == self.kind)
            .map(|v| v.id.as_str())
            .collect();
        if new.is_empty() {
            return Ok(());
        }
        let existing: HashSet<&str> = attached(node, self.kind).map(|v| v.id.as_str()).collect();
        new.retain(|id| !existing.contains(id));
        let total = i64::try_from(existing.len().saturating_add(new.len())).unwrap_or(i64::MAX);
        if total > self.limit(node) {
            return Err(REASON.into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::PodOnNode;
    use loadstar_testkit::snapshot::*;

    fn vol(kind: AttachKind, key: &str, id: &str) -> AttachableVolume {
        AttachableVolume {
            kind,
            limit_key: key.into(),
            id: id.into(),
        }
    }

    fn csi(driver: &str, id: &str) -> AttachableVolume {
        vol(
            AttachKind::Csi,
            &format!("attachable-volumes-csi-{driver}"),
            id,
        )
    }

    fn ebs(id: &str) -> AttachableVolume {
        vol(AttachKind::AwsEbs, "attachable-volumes-aws-ebs", id)
    }

    fn node(
        limits: &[(&str, i64)],
        labels: &[(&str, &str)],
        pods: Vec<Vec<AttachableVolume>>,
    ) -> NodeView {
        let mut n = edit_kube(kube_node("n", 1000, GIB), |k| {
            k.volume_limits = limits.iter().map(|(k, v)| (k.to_string(), *v)).collect();
            k.labels = labels
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect();
        });
        for (i, attachable) in pods.into_iter().enumerate() {
            n = with_pod(
                n,
                PodOnNode {
                    uid: format!("u{i}"),
                    attachable,
                    ..Default::default()
                },
            );
        }
        n
    }

    fn with(attachable: Vec<AttachableVolume>) -> PodInfo {
        PodInfo {
            attachable,
            ..pod(100, MIB)
        }
    }

    fn csi_filter(p: &PodInfo, n: &NodeView) -> Result<(), Reason> {
        filter_one(&NodeVolumeLimits, n.clone(), p)
    }

    fn in_tree(name: &'static str, p: &PodInfo, n: &NodeView) -> Result<(), Reason> {
        let plugin =
            InTreeVolumeLimits::from_args(name, &serde_norway::Value::Null).expect("builds");
        filter_one(&plugin, n.clone(), p)
    }

    #[test]
    fn csi_volumes_count_per_driver_against_the_nodes_limit() {
        let key = "attachable-volumes-csi-d1";
        let n = node(
            &[(key, 2)],
            &[],
            vec![vec![csi("d1", "a")], vec![csi("d2", "x")]],
        );
        assert_eq!(csi_filter(&with(vec![csi("d1", "b")]), &n), Ok(()));
        assert_eq!(
            csi_filter(&with(vec![csi("d1", "b"), csi("d1", "c")]), &n),
            Err(REASON.into())
        );
        // Already attached: not new. Two mounts of one new handle: one attachment.
        assert_eq!(
            csi_filter(
                &with(vec![csi("d1", "a"), csi("d1", "b"), csi("d1", "b")]),
                &n
            ),
            Ok(())
        );
        // A driver without a limit is unlimited; a node without limits takes anything.
        assert_eq!(
            csi_filter(&with(vec![csi("d2", "y"), csi("d2", "z")]), &n),
            Ok(())
        );
        let free = node(&[], &[], vec![]);
        let three = vec![csi("d1", "b"), csi("d1", "c"), csi("d1", "d")];
        assert_eq!(csi_filter(&with(three), &free), Ok(()));
    }

    #[test]
    fn csi_passes_a_pod_whose_volumes_are_attached_even_on_a_node_over_its_limit() {
        let key = "attachable-volumes-csi-d1";
        let n = node(&[(key, 1)], &[], vec![vec![csi("d1", "a"), csi("d1", "b")]]);
        assert_eq!(csi_filter(&with(vec![csi("d1", "a")]), &n), Ok(()));
        assert_eq!(
            csi_filter(&with(vec![csi("d1", "c")]), &n),
            Err(REASON.into())
        );
    }

    #[test]
    fn in_tree_limits_default_by_kind_and_instance_type_and_follow_allocatable() {
        let many = |n: usize| (0..n).map(|i| ebs(&format!("vol-{i}"))).collect::<Vec<_>>();
        let plain = node(&[], &[], vec![many(38)]);
        assert_eq!(in_tree(EBS_NAME, &with(vec![ebs("new")]), &plain), Ok(()));
        let full = node(&[], &[], vec![many(39)]);
        assert_eq!(
            in_tree(EBS_NAME, &with(vec![ebs("new")]), &full),
            Err(REASON.into())
        );
        for nitro in ["m5.large", "c5d.xlarge", "t3.micro", "x1.z1d"] {
            let n = node(
                &[],
                &[("node.kubernetes.io/instance-type", nitro)],
                vec![many(25)],
            );
            assert_eq!(
                in_tree(EBS_NAME, &with(vec![ebs("new")]), &n),
                Err(REASON.into()),
                "{nitro}"
            );
        }
        let n = node(
            &[],
            &[("beta.kubernetes.io/instance-type", "m4.large")],
            vec![many(25)],
        );
        assert_eq!(in_tree(EBS_NAME, &with(vec![ebs("new")]), &n), Ok(()));
        let n = node(&[("attachable-volumes-aws-ebs", 2)], &[], vec![many(2)]);
        assert_eq!(
            in_tree(EBS_NAME, &with(vec![ebs("new")]), &n),
            Err(REASON.into())
        );
        // Another kind's filter does not count EBS volumes.
        assert_eq!(in_tree(GCE_PD_NAME, &with(vec![ebs("new")]), &n), Ok(()));
        let gce = |id: &str| vol(AttachKind::GcePd, "attachable-volumes-gce-pd", id);
        let n = node(
            &[],
            &[],
            vec![(0..16).map(|i| gce(&i.to_string())).collect()],
        );
        assert_eq!(
            in_tree(GCE_PD_NAME, &with(vec![gce("new")]), &n),
            Err(REASON.into())
        );
        assert_eq!(in_tree(GCE_PD_NAME, &with(vec![gce("3")]), &n), Ok(()));
    }

    #[test]
    fn in_tree_refuses_even_attached_volumes_on_a_node_over_its_limit() {
        let n = node(
            &[("attachable-volumes-aws-ebs", 1)],
            &[],
            vec![vec![ebs("a"), ebs("b")]],
        );
        assert_eq!(
            in_tree(EBS_NAME, &with(vec![ebs("a")]), &n),
            Err(REASON.into())
        );
        assert_eq!(in_tree(EBS_NAME, &with(vec![]), &n), Ok(()));
    }
}
