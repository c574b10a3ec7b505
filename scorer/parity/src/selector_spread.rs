//! `SelectorSpread` (seed 003): spread the pods of one controller over nodes and zones, as
//! kube-scheduler's former `SelectorSpread` plugin (`pkg/scheduler/framework/plugins/
//! selectorspread/selector_spread.go`, removed upstream in v1.27 in favour of topology
//! spread constraints).
//!
//! Upstream matches pods by the selectors of the services/controllers selecting the pod;
//! Loadstar's snapshot knows each pod's controlling owner, so "same selector" is *same
//! namespace and same owner* (kind and name). Counts per node c, over the feasible nodes the
//! max count M and per zone (`topology.kubernetes.io/zone`, with `topology.kubernetes.io/
//! region` as upstream's zone key) the summed counts Z with max Zmax. Node score
//! `100·(M − c)/M` (100 when M = 0); on a node with a zone it is blended with the zone score
//! `100·(Zmax − Z)/Zmax` as `(1 − 2/3)·node + 2/3·zone`, then truncated — upstream's
//! floating-point arithmetic and zone weighting exactly. A pod without owner scores 100
//! everywhere (upstream: an empty selector matches nothing).
use std::collections::HashMap;

use loadstar_framework::snapshot::{NodeView, PodInfo};
use loadstar_framework::{CycleContext, MAX_NODE_SCORE, ScorePlugin};

use crate::args::{NoArgs, PluginError, parse_args};

/// Plugin name.
pub const NAME: &str = "SelectorSpread";
/// Zone label.
pub const ZONE_LABEL: &str = "topology.kubernetes.io/zone";
/// Region label (part of upstream's zone key).
pub const REGION_LABEL: &str = "topology.kubernetes.io/region";
/// Upstream's zone weighting.
pub const ZONE_WEIGHTING: f64 = 2.0 / 3.0;

/// The selector-spread score.
#[derive(Debug, Clone, Default)]
pub struct SelectorSpread;

impl SelectorSpread {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(SelectorSpread)
    }
}

/// Upstream's zone key: (region, zone), `None` when both are empty.
fn zone_key(node: &NodeView) -> Option<(&str, &str)> {
    let labels = node.labels()?;
    let region = labels.get(REGION_LABEL).map_or("", String::as_str);
    let zone = labels.get(ZONE_LABEL).map_or("", String::as_str);
    (!region.is_empty() || !zone.is_empty()).then_some((region, zone))
}

impl ScorePlugin for SelectorSpread {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, _: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        let Some(owner) = &pod.owner else {
            out.fill(MAX_NODE_SCORE);
            return;
        };
        let mut max_node = 0i64;
        let mut zones: HashMap<(&str, &str), i64> = HashMap::new();
        for (o, n) in out.iter_mut().zip(nodes) {
            *o = n
                .alloc
                .pods
                .iter()
                .filter(|p| p.namespace == pod.namespace && p.owner.as_ref() == Some(owner))
                .count() as i64;
            max_node = max_node.max(*o);
            if let Some(z) = zone_key(n) {
                *zones.entry(z).or_default() += *o;
            }
        }
        let max_zone = zones.values().copied().max().unwrap_or(0);
        let max = MAX_NODE_SCORE as f64;
        for (o, n) in out.iter_mut().zip(nodes) {
            let mut f = if max_node > 0 {
                max * ((max_node - *o) as f64 / max_node as f64)
            } else {
                max
            };
            if !zones.is_empty()
                && let Some(z) = zone_key(n)
            {
                let zone_score = if max_zone > 0 {
                    max * ((max_zone - zones[&z]) as f64 / max_zone as f64)
                } else {
                    max
                };
                f = f * (1.0 - ZONE_WEIGHTING) + ZONE_WEIGHTING * zone_score;
            }
            *o = f as i64;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::snapshot::{Owner, PodOnNode};
    use loadstar_testkit::snapshot::*;

    fn owner() -> Owner {
        Owner {
            kind: "ReplicaSet".into(),
            name: "web".into(),
        }
    }

    fn node(name: &str, zone: Option<&str>, same: usize, other: usize) -> NodeView {
        let mut n = edit_kube(kube_node(name, 4000, GIB), |k| {
            if let Some(z) = zone {
                k.labels.insert(ZONE_LABEL.into(), z.into());
            }
        });
        for i in 0..same {
            n = with_pod(
                n,
                PodOnNode {
                    uid: format!("{name}-s{i}"),
                    namespace: "default".into(),
                    owner: Some(owner()),
                    ..Default::default()
                },
            );
        }
        for i in 0..other {
            n = with_pod(
                n,
                PodOnNode {
                    uid: format!("{name}-o{i}"),
                    namespace: "other".into(),
                    owner: Some(owner()),
                    ..Default::default()
                },
            );
        }
        n
    }

    fn owned_pod() -> PodInfo {
        let mut p = pod(100, MIB);
        p.owner = Some(owner());
        p
    }

    #[test]
    fn spreads_over_nodes_without_zones() {
        let snap = snapshot(vec![
            node("a", None, 0, 3),
            node("b", None, 1, 0),
            node("c", None, 2, 0),
        ]);
        assert_eq!(
            score_all(&SelectorSpread, &snap, &owned_pod()),
            vec![100, 50, 0]
        );
        assert_eq!(
            score_all(&SelectorSpread, &snap, &pod(1, 1)),
            vec![100, 100, 100]
        );
    }

    #[test]
    fn zone_counts_weigh_two_thirds() {
        // Upstream selector_spread_test.go-style: zone1 {a: 1, b: 0}, zone2 {c: 2}, d no zone.
        let snap = snapshot(vec![
            node("a", Some("zone1"), 1, 0),
            node("b", Some("zone1"), 0, 0),
            node("c", Some("zone2"), 2, 0),
            node("d", None, 1, 0),
        ]);
        // M = 2, zones: zone1 = 1, zone2 = 2 → Zmax = 2.
        // a: node 50, zone 50 → 50; b: node 100, zone 50 → 66.67 → 66;
        // c: node 0, zone 0 → 0; d: no zone → node score 50.
        assert_eq!(
            score_all(&SelectorSpread, &snap, &owned_pod()),
            vec![50, 66, 0, 50]
        );
    }
}
