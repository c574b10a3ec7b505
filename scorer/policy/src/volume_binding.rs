//! `VolumeBinding` filter for claims already bound: every bound PersistentVolume's required
//! node affinity must admit the node, as kube-scheduler 1.20's `volumebinding` plugin checks
//! bound claims (`checkBoundClaims`); reason `node(s) had volume node affinity conflict`.
//! A pod the claims make unschedulable everywhere (an unbound claim with immediate binding:
//! `pod has unbound immediate PersistentVolumeClaims`; a missing claim or volume) fails on
//! every node with that reason. Claims still to be bound with `WaitForFirstConsumer` are
//! not handled (Loadstar does not bind or provision volumes yet): the Kubernetes layer
//! refuses such pods by name. The claims are resolved by the Kubernetes layer into
//! [`VolumeNeeds`](loadstar_framework::snapshot::VolumeNeeds).
use loadstar_framework::snapshot::{NodeView, PodInfo};
use loadstar_framework::{CycleContext, FilterPlugin};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "VolumeBinding";
/// A bound volume's node affinity excludes the node.
pub const REASON_NODE_CONFLICT: &str = "node(s) had volume node affinity conflict";

/// The bound-volume filter.
#[derive(Debug, Clone, Default)]
pub struct VolumeBinding;

impl VolumeBinding {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(VolumeBinding)
    }
}

impl FilterPlugin for VolumeBinding {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, _: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), String> {
        let Some(v) = &pod.volumes else {
            return Ok(());
        };
        if let Some(reason) = &v.unschedulable {
            return Err(reason.clone());
        }
        let labels = node.labels_or_empty();
        // Upstream (`CheckNodeAffinity`) matches volume node affinity against labels only,
        // with no node fields: `matchFields` are skipped, and a term is an empty term only
        // when it has neither expressions nor fields.
        for terms in &v.node_affinity {
            let admits = terms.iter().any(|t| {
                (!t.expressions.is_empty() || !t.fields.is_empty())
                    && t.expressions.iter().all(|r| r.matches(labels))
            });
            if !admits {
                return Err(REASON_NODE_CONFLICT.into());
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{
        NodeSelectorTerm, SelectorOp, SelectorRequirement, VolumeNeeds,
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
}
