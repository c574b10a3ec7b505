//! `VolumeZone` filter: a bound PersistentVolume's zone and region labels must include the
//! node's, as kube-scheduler 1.20's `volumezone` plugin: a node with none of the four zone
//! and region labels passes; otherwise, for each of the volume's labels among those keys,
//! the node's value under that key (empty when absent) must be one of the volume's values
//! (`a__b` lists several). Reason `node(s) had no available volume zone`.
use loadstar_framework::snapshot::{NodeView, PodInfo};
use loadstar_framework::{CycleContext, FilterPlugin, Reason};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "VolumeZone";
/// The node is outside a bound volume's zone.
pub const REASON_CONFLICT: &str = "node(s) had no available volume zone";
/// The labels the filter reads, on nodes and on volumes.
pub const ZONE_LABELS: &[&str] = &[
    "failure-domain.beta.kubernetes.io/zone",
    "failure-domain.beta.kubernetes.io/region",
    "topology.kubernetes.io/zone",
    "topology.kubernetes.io/region",
];

/// The volume zone filter.
#[derive(Debug, Clone, Default)]
pub struct VolumeZone;

impl VolumeZone {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(VolumeZone)
    }
}

impl FilterPlugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }

    fn skips(&self, _: Option<&loadstar_framework::PreFilterState>, pod: &PodInfo) -> bool {
        pod.volumes.as_ref().is_none_or(|v| v.zones.is_empty())
    }

    fn filter(&self, _: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        let Some(v) = pod.volumes.as_ref().filter(|v| !v.zones.is_empty()) else {
            return Ok(());
        };
        let Some(labels) = node.labels() else {
            return Ok(());
        };
        if !ZONE_LABELS.iter().any(|k| labels.contains_key(*k)) {
            return Ok(());
        }
        for (key, allowed) in &v.zones {
            let have = labels.get(key).map(String::as_str).unwrap_or("");
            if !allowed.iter().any(|a| a == have) {
                return Err(REASON_CONFLICT.into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::VolumeNeeds;
    use loadstar_testkit::snapshot::*;
    use std::collections::BTreeMap;

    #[test]
    fn zoned_volumes_need_a_node_in_their_zone() {
        let node = |zone: Option<&str>| {
            edit_kube(kube_node("n", 1000, GIB), |k| {
                k.labels = zone
                    .map(|z| BTreeMap::from([("topology.kubernetes.io/zone".into(), z.into())]))
                    .unwrap_or_default();
            })
        };
        let mut p = pod(100, MIB);
        p.claims = vec!["data".into()];
        p.volumes = Some(VolumeNeeds {
            zones: vec![(
                "topology.kubernetes.io/zone".into(),
                vec!["a".into(), "b".into()],
            )],
            ..Default::default()
        });
        assert_eq!(filter_one(&VolumeZone, node(Some("b")), &p), Ok(()));
        assert_eq!(
            filter_one(&VolumeZone, node(Some("c")), &p),
            Err(REASON_CONFLICT.into())
        );
        // A node without any zone label takes any volume.
        assert_eq!(filter_one(&VolumeZone, node(None), &p), Ok(()));
    }
}
