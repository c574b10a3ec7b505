//! `TaintToleration`: taints against tolerations, as kube-scheduler's plugin of the same name
//! (`pkg/scheduler/framework/plugins/tainttoleration/taint_toleration.go`, with the matching
//! rule of `k8s.io/api/core/v1` `Toleration.ToleratesTaint`).
//!
//! - **Filter**: the node fails on its first `NoSchedule` or `NoExecute` taint the pod does not
//!   tolerate, with upstream's reason `node(s) had untolerated taint {key: value}`.
//! - **Score**: counts the node's `PreferNoSchedule` taints the pod does not tolerate (only
//!   tolerations with no effect or `PreferNoSchedule` count, as upstream); normalised in
//!   reverse like upstream's `DefaultNormalizeScore(100, reverse=true)`: `100 − 100·c/max`
//!   with integer division, all 100 when no node has such a taint. Nodes without Kubernetes
//!   facts have no taints.
use loadstar_framework::snapshot::{NodeDigest, NodeView, PodInfo, Taint, TaintEffect, Toleration};
use loadstar_framework::{
    CycleContext, FilterPlugin, FilteredNode, MAX_NODE_SCORE, PreFilterState, Reason, ScorePlugin,
    retain_passing,
};

use crate::args::{NoArgs, PluginError, parse_args};
use crate::rows::{RowCode, RowCodes, code_at};

/// Plugin name.
pub const NAME: &str = "TaintToleration";

/// Whether toleration `t` tolerates a taint with this key, value and effect.
pub fn tolerates(t: &Toleration, key: &str, value: &str, effect: TaintEffect) -> bool {
    if t.effect.is_some_and(|e| e != effect) {
        return false;
    }
    if !t.key.is_empty() && t.key != key {
        return false;
    }
    t.exists || t.value == value
}

/// Whether any of `tolerations` tolerates `taint`.
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations
        .iter()
        .any(|t| tolerates(t, &taint.key, &taint.value, taint.effect))
}

/// The taint/toleration filter and score.
#[derive(Debug, Clone, Default)]
pub struct TaintToleration;

impl TaintToleration {
    /// Builds it; it takes no arguments.
    pub fn from_args(args: &serde_norway::Value) -> Result<Self, PluginError> {
        parse_args::<NoArgs>(NAME, args)?;
        Ok(TaintToleration)
    }

    fn intolerable_prefer_count(pod: &PodInfo, node: &NodeView) -> i64 {
        let Some(k) = &node.kube else { return 0 };
        k.taints
            .iter()
            .filter(|t| t.effect == TaintEffect::PreferNoSchedule)
            .filter(|t| {
                !pod.tolerations.iter().any(|tol| {
                    (tol.effect.is_none() || tol.effect == Some(TaintEffect::PreferNoSchedule))
                        && tolerates(tol, &t.key, &t.value, t.effect)
                })
            })
            .count() as i64
    }
}

impl FilterPlugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn filter(&self, ctx: &CycleContext<'_>, pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
        if !ctx.digest(node).has_taints {
            return Ok(());
        }
        untolerated(pod, node)
    }

    /// Over one byte per node ([`Tainted`]) memoised per digest table.
    fn filter_nodes(
        &self,
        ctx: &CycleContext<'_>,
        _state: Option<&PreFilterState>,
        pod: &PodInfo,
        nodes: &mut Vec<usize>,
        filtered: &mut Vec<FilteredNode>,
    ) {
        let codes = RowCodes::<Tainted>::of(ctx);
        // Nodes tainted alike (a dedicated pool) share one spelled-out reason.
        let mut last: Option<(&Taint, Reason)> = None;
        retain_passing(NAME, nodes, filtered, |i| {
            if code_at(codes.as_deref(), ctx, i) == 0 {
                return Ok(());
            }
            let Some(t) = first_untolerated(pod, &ctx.snapshot.nodes()[i]) else {
                return Ok(());
            };
            match &last {
                Some((seen, reason)) if seen.key == t.key && seen.value == t.value => {
                    Err(reason.clone())
                }
                _ => {
                    let reason = untolerated_reason(t);
                    last = Some((t, reason.clone()));
                    Err(reason)
                }
            }
        });
    }
}

/// Whether the pod tolerates a `NoSchedule` taint with this key and no value (the
/// node-condition taints: not-ready, unschedulable, memory and disk pressure).
pub fn tolerates_key(pod: &PodInfo, key: &str) -> bool {
    pod.tolerations
        .iter()
        .any(|t| tolerates(t, key, "", TaintEffect::NoSchedule))
}

/// Whether the node has taints (1) or not (0): only nodes with taints open their view.
#[derive(Debug)]
struct Tainted;

impl RowCode for Tainted {
    fn code(d: &NodeDigest, _: &NodeView) -> u8 {
        u8::from(d.has_taints)
    }
}

/// Whether the node has a `PreferNoSchedule` taint (1) or not (0): only those count for the
/// score.
#[derive(Debug)]
struct PreferTainted;

impl RowCode for PreferTainted {
    fn code(d: &NodeDigest, node: &NodeView) -> u8 {
        u8::from(
            d.has_taints
                && node.kube.as_ref().is_some_and(|k| {
                    k.taints
                        .iter()
                        .any(|t| t.effect == TaintEffect::PreferNoSchedule)
                }),
        )
    }
}

/// The filter's verdict from the node's taints.
fn untolerated(pod: &PodInfo, node: &NodeView) -> Result<(), Reason> {
    match first_untolerated(pod, node) {
        Some(t) => Err(untolerated_reason(t)),
        None => Ok(()),
    }
}

/// The node's first `NoSchedule` or `NoExecute` taint the pod does not tolerate.
pub(crate) fn first_untolerated<'n>(pod: &PodInfo, node: &'n NodeView) -> Option<&'n Taint> {
    node.kube.as_ref()?.taints.iter().find(|t| {
        matches!(t.effect, TaintEffect::NoSchedule | TaintEffect::NoExecute)
            && !tolerated(&pod.tolerations, t)
    })
}

/// Upstream's reason for an untolerated taint.
fn untolerated_reason(t: &Taint) -> Reason {
    format!("node(s) had untolerated taint {{{}: {}}}", t.key, t.value).into()
}

impl ScorePlugin for TaintToleration {
    fn name(&self) -> &'static str {
        NAME
    }

    fn score(&self, ctx: &CycleContext<'_>, pod: &PodInfo, nodes: &[&NodeView], out: &mut [i64]) {
        for (o, n) in out.iter_mut().zip(nodes) {
            *o = if ctx.digest(n).has_taints {
                Self::intolerable_prefer_count(pod, n)
            } else {
                0
            };
        }
        Self::normalize(out);
    }

    /// Over one byte per node ([`PreferTainted`]) memoised per digest table.
    fn score_indexed(
        &self,
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: &[usize],
        out: &mut [i64],
    ) {
        let codes = RowCodes::<PreferTainted>::of(ctx);
        if codes.as_deref().is_some_and(RowCodes::all_zero) {
            // No node has a PreferNoSchedule taint: every node scores the maximum.
            out.fill(MAX_NODE_SCORE);
            return;
        }
        for ((o, n), &i) in out.iter_mut().zip(nodes).zip(indices) {
            *o = if code_at(codes.as_deref(), ctx, i) != 0 {
                Self::intolerable_prefer_count(pod, n)
            } else {
                0
            };
        }
        Self::normalize(out);
    }
}

impl TaintToleration {
    /// Intolerable counts to scores: the most counted node gets 0, none counted 100.
    fn normalize(out: &mut [i64]) {
        let max = out.iter().copied().max().unwrap_or(0);
        for o in out.iter_mut() {
            *o = if max == 0 {
                MAX_NODE_SCORE
            } else {
                MAX_NODE_SCORE - MAX_NODE_SCORE * *o / max
            };
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::StalePolicy;
    use loadstar_testkit::snapshot::*;

    fn taint(key: &str, value: &str, effect: TaintEffect) -> Taint {
        Taint {
            key: key.into(),
            value: value.into(),
            effect,
        }
    }

    fn tol(key: &str, exists: bool, value: &str, effect: Option<TaintEffect>) -> Toleration {
        Toleration {
            key: key.into(),
            exists,
            value: value.into(),
            effect,
        }
    }

    #[test]
    fn toleration_matching_follows_upstream() {
        use TaintEffect::*;
        assert!(tolerates(&tol("k", false, "v", None), "k", "v", NoSchedule));
        assert!(!tolerates(
            &tol("k", false, "w", None),
            "k",
            "v",
            NoSchedule
        ));
        assert!(tolerates(
            &tol("k", true, "", Some(NoSchedule)),
            "k",
            "x",
            NoSchedule
        ));
        assert!(!tolerates(
            &tol("k", true, "", Some(NoExecute)),
            "k",
            "x",
            NoSchedule
        ));
        // Empty key with Exists tolerates everything.
        assert!(tolerates(
            &tol("", true, "", None),
            "any",
            "thing",
            NoExecute
        ));
    }

    #[test]
    fn filter_reports_the_first_untolerated_hard_taint() {
        let node = edit_kube(kube_node("n", 1000, GIB), |k| {
            k.taints = vec![
                taint("soft", "", TaintEffect::PreferNoSchedule),
                taint("dedicated", "gpu", TaintEffect::NoSchedule),
            ]
        });
        let mut p = pod(100, MIB);
        assert_eq!(
            filter_one(&TaintToleration, node.clone(), &p),
            Err("node(s) had untolerated taint {dedicated: gpu}".into())
        );
        p.tolerations = vec![tol(
            "dedicated",
            false,
            "gpu",
            Some(TaintEffect::NoSchedule),
        )];
        assert_eq!(filter_one(&TaintToleration, node, &p), Ok(()));
        // No Kubernetes facts: nothing to check.
        let mut bare = kube_node("b", 1000, GIB);
        bare.kube = None;
        assert_eq!(filter_one(&TaintToleration, bare, &pod(1, 1)), Ok(()));
    }

    #[test]
    fn batched_reasons_name_each_nodes_own_taint() {
        let tainted = |name: &str, value: &str| {
            edit_kube(kube_node(name, 1000, GIB), |k| {
                k.taints = vec![taint("dedicated", value, TaintEffect::NoSchedule)]
            })
        };
        let snap = snapshot(vec![
            tainted("a", "gpu"),
            tainted("b", "gpu"),
            tainted("c", "infra"),
            kube_node("d", 1000, GIB),
            tainted("e", "gpu"),
        ]);
        let mut p = pod(100, MIB);
        assert_batch_agrees(&TaintToleration, &snap, &p, StalePolicy::Fallback);
        p.tolerations = vec![tol("dedicated", false, "infra", None)];
        assert_batch_agrees(&TaintToleration, &snap, &p, StalePolicy::Fallback);
        assert_eq!(
            TaintToleration.filter(&ctx(&snap), &p, &snap.nodes()[4]),
            Err("node(s) had untolerated taint {dedicated: gpu}".into())
        );
    }

    #[test]
    fn score_counts_prefer_no_schedule_in_reverse() {
        let prefer = |n: usize| {
            edit_kube(kube_node(&format!("n{n}"), 1000, GIB), |k| {
                k.taints = (0..n)
                    .map(|i| taint(&format!("t{i}"), "", TaintEffect::PreferNoSchedule))
                    .collect()
            })
        };
        let snap = snapshot(vec![prefer(0), prefer(1), prefer(3)]);
        let mut p = pod(100, MIB);
        assert_eq!(score_all(&TaintToleration, &snap, &p), vec![100, 67, 0]);
        // A NoSchedule-only toleration does not count for PreferNoSchedule.
        p.tolerations = vec![tol("t0", true, "", Some(TaintEffect::NoSchedule))];
        assert_eq!(score_all(&TaintToleration, &snap, &p), vec![100, 67, 0]);
        p.tolerations = vec![tol("t0", true, "", None)];
        assert_eq!(score_all(&TaintToleration, &snap, &p), vec![100, 100, 0]);
        let none = snapshot(vec![prefer(0), prefer(0)]);
        assert_eq!(score_all(&TaintToleration, &none, &p), vec![100, 100]);
    }
}
