//! `VolumeRestrictions` filter: inline disks that only one pod (or only readers) may use on a
//! node, as kube-scheduler 1.20's `volumerestrictions` plugin: a GCE persistent disk or an
//! iSCSI target used read-write, an EBS volume, or an RBD image (overlapping monitors, same
//! pool and image) used read-write by a pod already on the node. Reason, as upstream:
//! `node(s) had no available disk`. Evicting the other pod lifts it (preemption may help).
use loadstar_framework::snapshot::{NodeView, PodInfo};
use loadstar_framework::{CycleContext, FilterPlugin, Reason};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "VolumeRestrictions";
/// Upstream's reason (`ErrReasonDiskConflict`).
pub const REASON: &str = "node(s) had no available disk";

/// The inline-disk conflict filter.
#[derive(Debug, Clone, Default)]
pub struct VolumeRestrictions;

impl VolumeRestrictions {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(VolumeRestrictions)
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn skips(&self, _: Option<&loadstar_framework::PreFilterState>, pod: &PodInfo) -> bool {
        pod.disks.is_empty()
    }

    /// Evicting the pod that holds the disk frees it (upstream: `Unschedulable`).
    fn preemption_may_help(&self, _reason: &str) -> bool {
        true
    }

    fn filter(
        &self,
        _ctx: &CycleContext<'_>,
        pod: &PodInfo,
        node: &NodeView,
    ) -> Result<(), Reason> {
        if pod.disks.is_empty() {
            return Ok(());
        }
        let used = node.alloc.pods.iter().flat_map(|p| &p.disks);
        for u in used {
            if pod.disks.iter().any(|d| d.conflicts(u)) {
                return Err(REASON.into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{InlineDisk, PodOnNode};
    use loadstar_testkit::snapshot::*;

    fn rbd(monitors: &[&str], image: &str, read_only: bool) -> InlineDisk {
        InlineDisk::Rbd {
            monitors: monitors.iter().map(|m| m.to_string()).collect(),
            pool: "rbd".into(),
            image: image.into(),
            read_only,
        }
    }

    #[test]
    fn conflict_rules_follow_upstream() {
        let gce = |ro| InlineDisk::GcePd {
            name: "d".into(),
            read_only: ro,
        };
        assert!(gce(false).conflicts(&gce(true)));
        assert!(!gce(true).conflicts(&gce(true)), "readers share a disk");
        let ebs = InlineDisk::AwsEbs {
            volume_id: "vol-1".into(),
        };
        assert!(
            ebs.conflicts(&ebs.clone()),
            "EBS: even two readers conflict"
        );
        assert!(rbd(&["a", "b"], "img", false).conflicts(&rbd(&["b", "c"], "img", true)));
        assert!(!rbd(&["a"], "img", false).conflicts(&rbd(&["c"], "img", false)));
        assert!(!rbd(&["a"], "img", true).conflicts(&rbd(&["a"], "img", true)));
        let iscsi = |iqn: &str, ro| InlineDisk::Iscsi {
            iqn: iqn.into(),
            read_only: ro,
        };
        assert!(
            iscsi("iqn.2001-04.com.example:x", false)
                .conflicts(&iscsi("iqn.2001-04.com.example:x", false))
        );
        assert!(
            !iscsi("iqn.2001-04.com.example:x", false)
                .conflicts(&iscsi("iqn.2001-04.com.example:y", false))
        );
        assert!(
            !gce(false).conflicts(&ebs),
            "different kinds never conflict"
        );
    }

    #[test]
    fn filter_rejects_nodes_where_the_disk_is_in_use() {
        let node = with_pod(
            kube_node("n", 1000, GIB),
            PodOnNode {
                uid: "a".into(),
                disks: vec![rbd(&["m1"], "img", false)],
                ..Default::default()
            },
        );
        let mut p = pod(100, MIB);
        assert_eq!(filter_one(&VolumeRestrictions, node.clone(), &p), Ok(()));
        p.disks = vec![rbd(&["m1", "m2"], "img", true)];
        assert_eq!(
            filter_one(&VolumeRestrictions, node.clone(), &p),
            Err(REASON.into())
        );
        p.disks = vec![rbd(&["m1"], "other", false)];
        assert_eq!(filter_one(&VolumeRestrictions, node, &p), Ok(()));
    }
}
