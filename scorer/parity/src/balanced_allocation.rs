//! `BalancedAllocation`: prefer nodes whose requested fractions of each resource are close
//! to one another — kube-scheduler's `NodeResourcesBalancedAllocation`
//! (`pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go`), exactly: per
//! resource with non-zero allocatable, fraction = requested / allocatable capped at 1 (plain
//! requests, not the non-zero defaults: upstream's `useRequested`); std = |f₁ − f₂| / 2 for
//! two resources, the population standard deviation for more, 0 for one; score =
//! `int64((1 − std) · 100)` (truncation). Like upstream since v1.32, a pod requesting none of
//! the scored resources (best effort) is not scored: every node gets 0 (upstream skips the
//! plugin, which adds 0 to every node). Weights in `resources` are accepted but, as upstream,
//! do not affect this score. Requests only.
use loadstar_framework::snapshot::{
    ClusterSnapshot, Memo, NodeDigest, NodeView, PodInfo, patch_entry,
};
use loadstar_framework::{CycleContext, MAX_NODE_SCORE};

use crate::resource_allocation::{
    self as ra, AllocationScore, AllocationStrategy, MAX_INLINE_RESOURCES, ResourceId, ResourceSpec,
};

/// Plugin name.
pub const NAME: &str = "BalancedAllocation";

/// Upstream's `balancedResourceScorer` over (requested, allocatable) pairs.
pub fn balanced_score(pairs: &[(i64, i64)]) -> i64 {
    let mut fractions = [0f64; MAX_INLINE_RESOURCES];
    let mut n = 0;
    let mut total = 0.0;
    for &(requested, allocatable) in pairs {
        if allocatable == 0 || n == MAX_INLINE_RESOURCES {
            continue;
        }
        let f = (requested as f64 / allocatable as f64).min(1.0);
        total += f;
        fractions[n] = f;
        n += 1;
    }
    let std = match n {
        0 | 1 => 0.0,
        2 => ((fractions[0] - fractions[1]) / 2.0).abs(),
        _ => {
            let mean = total / n as f64;
            let sum: f64 = fractions[..n].iter().map(|f| (f - mean) * (f - mean)).sum();
            (sum / n as f64).sqrt()
        }
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// [`balanced_score`] of two (requested, allocatable) pairs, without its buffer: a resource
/// with no allocatable is left out, and one resource alone is perfectly balanced.
#[inline(always)]
fn balanced_two((q0, a0): (i64, i64), (q1, a1): (i64, i64)) -> i64 {
    let std = if a0 == 0 || a1 == 0 {
        0.0
    } else {
        let f0 = (q0 as f64 / a0 as f64).min(1.0);
        let f1 = (q1 as f64 / a1 as f64).min(1.0);
        ((f0 - f1) / 2.0).abs()
    };
    ((1.0 - std) * MAX_NODE_SCORE as f64) as i64
}

/// Each node's (allocatable, requested) of two resources the row holds, in `nodes` order,
/// built once per digest table and patched with the row: the pod's requests are the only
/// per-pod part.
#[derive(Debug)]
struct AmountColumns {
    amounts: Vec<[(i64, i64); 2]>,
    ids: [ResourceId; 2],
}

impl AmountColumns {
    fn build(ctx: &CycleContext<'_>, ids: [ResourceId; 2]) -> AmountColumns {
        AmountColumns {
            amounts: ctx
                .snapshot
                .nodes()
                .iter()
                .map(|n| Self::of(&ctx.digest(n), ids))
                .collect(),
            ids,
        }
    }

    fn of(d: &NodeDigest, ids: [ResourceId; 2]) -> [(i64, i64); 2] {
        ids.map(|id| ra::row_amounts(d, id, false))
    }
}

impl Memo for AmountColumns {
    /// The scheduler assumed a pod on one node: its amounts are taken from its new row.
    fn patch(
        &mut self,
        index: usize,
        row: &NodeDigest,
        _node: &NodeView,
        snapshot: &ClusterSnapshot,
    ) -> bool {
        patch_entry(&mut self.amounts, index, snapshot, || {
            Self::of(row, self.ids)
        })
    }
}

/// The balanced-allocation strategy: [`balanced_score`] over the requested fractions.
#[derive(Debug, Clone, Copy, Default)]
pub struct Balanced;

impl AllocationStrategy for Balanced {
    const NAME: &'static str = NAME;
    const NONZERO: bool = false;

    fn score_nodes(
        resources: &[ResourceSpec],
        ctx: &CycleContext<'_>,
        pod: &PodInfo,
        nodes: &[&NodeView],
        indices: Option<&[usize]>,
        out: &mut [i64],
    ) {
        let reqs = ra::pod_requests(resources, pod, false);
        if reqs.iter().all(|r| *r == 0) {
            out.fill(0);
            return;
        }
        let ids = ra::resolve(resources);
        if let ([r0, r1], [id0, id1, ..], [q0, q1, ..]) = (resources, ids, reqs)
            && id0 != ResourceId::Extended
            && id1 != ResourceId::Extended
        {
            // Two resources the row holds (the default, CPU and memory): the same arithmetic
            // as `balanced_score`, unrolled, over the table's amounts when it has them.
            let columns = indices.and_then(|ix| {
                let key = id0 as u64 * 16 + id1 as u64;
                ctx.memo(key, || AmountColumns::build(ctx, [id0, id1]))
                    .filter(|c| c.ids == [id0, id1])
                    .map(|c| (c, ix))
            });
            if let Some((columns, ix)) = columns {
                let pair = |(a, u): (i64, i64), q: i64, id: ResourceId| {
                    if q == 0 && id.is_scalar() || id == ResourceId::Pods {
                        (0, 0)
                    } else {
                        (u.saturating_add(q), a)
                    }
                };
                for (o, &i) in out.iter_mut().zip(ix) {
                    *o = match columns.amounts.get(i) {
                        Some(&[c0, c1]) => balanced_two(pair(c0, q0, id0), pair(c1, q1, id1)),
                        None => {
                            let d = ctx.digest_at(i);
                            let n = &ctx.snapshot.nodes()[i];
                            let (a0, u0) =
                                ra::allocatable_requested(&d, n, id0, &r0.name, q0, false);
                            let (a1, u1) =
                                ra::allocatable_requested(&d, n, id1, &r1.name, q1, false);
                            balanced_two((u0, a0), (u1, a1))
                        }
                    };
                }
                return;
            }
            for (j, (o, n)) in out.iter_mut().zip(nodes).enumerate() {
                let d = ra::row(ctx, n, indices, j);
                let (a0, u0) = ra::allocatable_requested(&d, n, id0, &r0.name, q0, false);
                let (a1, u1) = ra::allocatable_requested(&d, n, id1, &r1.name, q1, false);
                *o = balanced_two((u0, a0), (u1, a1));
            }
            return;
        }
        let mut pairs = [(0i64, 0i64); MAX_INLINE_RESOURCES];
        for (j, (o, n)) in out.iter_mut().zip(nodes).enumerate() {
            let d = ra::row(ctx, n, indices, j);
            for (((pair, r), &id), &req) in pairs.iter_mut().zip(resources).zip(&ids).zip(&reqs) {
                let (a, q) = ra::allocatable_requested(&d, n, id, &r.name, req, false);
                *pair = (q, a);
            }
            *o = balanced_score(&pairs[..resources.len()]);
        }
    }
}

/// The balanced-allocation score.
pub type BalancedAllocation = AllocationScore<Balanced>;

#[cfg(test)]
mod tests {
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    use super::*;
    use crate::least_allocated::LeastAllocated;
    use loadstar_framework::{Profile, StalePolicy};
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    #[test]
    fn upstream_cases() {
        // balanced_allocation_test.go: "nothing scheduled, resources requested, differently
        // sized nodes": 3000/4000 and 5000/10000 → std .125 → 87; 3000/6000, 5000/10000 → 100.
        let snap = snapshot(vec![
            kube_node("a", 4000, 10000),
            kube_node("b", 6000, 10000),
        ]);
        let plugin = BalancedAllocation::default();
        assert_eq!(score_all(&plugin, &snap, &pod(3000, 5000)), vec![87, 100]);
        // Best-effort pods are not scored.
        assert_eq!(score_all(&plugin, &snap, &pod(0, 0)), vec![0, 0]);
        // Three resources: population std.
        assert_eq!(balanced_score(&[(1, 4), (2, 4), (3, 4)]), 79);
        assert_eq!(balanced_score(&[(5, 4), (0, 0)]), 100);
    }

    fn machine(name: &str, cores: i64, gib: i64) -> loadstar_framework::snapshot::NodeView {
        with_requested(kube_node(name, 64_000, 64 * GIB), cores * 1000, gib * GIB)
    }

    /// Issue 4's worked example: three 64-core/64 GiB machines with 50/30/10 cores and
    /// 10/30/50 GiB allocated; Least + Balanced at equal weights place 2 cores/10 GiB, then
    /// 5 cores/5 GiB, both on the second machine.
    #[test]
    fn worked_example_picks_the_second_machine_twice() {
        let profile = Profile {
            name: "requests".into(),
            filters: vec![],
            scores: vec![
                (Box::new(LeastAllocated::default()), 1),
                (Box::new(BalancedAllocation::default()), 1),
            ],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 1.0,
            preemption: None,
            sampling: loadstar_framework::NodeSampling::ALL,
        };
        let mut rng = StdRng::seed_from_u64(7);
        let snap = snapshot(vec![
            machine("m1", 50, 10),
            machine("m2", 30, 30),
            machine("m3", 10, 50),
        ]);
        let first = pod(2000, 10 * GIB);
        let e = profile.evaluate(&snap, &first, None, 0, &mut rng);
        let best = e.best().expect("feasible");
        assert_eq!(&*snap.nodes()[best.index].name, "m2");
        // Least: 43 everywhere; Balanced: 75 / 93 / 62.
        let by_name = |name: &str| {
            e.ranked
                .iter()
                .find(|r| &*snap.nodes()[r.index].name == name)
                .map(|r| r.plugins.iter().map(|p| p.1).collect::<Vec<_>>())
        };
        assert_eq!(by_name("m1"), Some(vec![43, 75]));
        assert_eq!(by_name("m2"), Some(vec![43, 93]));
        assert_eq!(by_name("m3"), Some(vec![43, 62]));

        // Second pod, after the first is placed on m2.
        let snap = snapshot(vec![
            machine("m1", 50, 10),
            machine("m2", 32, 40),
            machine("m3", 10, 50),
        ]);
        let second = pod(5000, 5 * GIB);
        let e = profile.evaluate(&snap, &second, None, 0, &mut rng);
        assert_eq!(&*snap.nodes()[e.best().expect("feasible").index].name, "m2");
        assert_eq!(e.ranked[0].plugins[0].1 + e.ranked[0].plugins[1].1, 35 + 93);
        // And on the original state too.
        let snap = snapshot(vec![
            machine("m1", 50, 10),
            machine("m2", 30, 30),
            machine("m3", 10, 50),
        ]);
        let e = profile.evaluate(&snap, &second, None, 0, &mut rng);
        assert_eq!(&*snap.nodes()[e.best().expect("feasible").index].name, "m2");
    }

    proptest! {
        #[test]
        fn two_resources_unrolled_equal_the_general_rule(
            q0 in 0i64..300_000, a0 in prop_oneof![Just(0i64), 1i64..200_000],
            q1 in 0i64..300_000, a1 in prop_oneof![Just(0i64), 1i64..200_000],
        ) {
            prop_assert_eq!(
                balanced_two((q0, a0), (q1, a1)),
                balanced_score(&[(q0, a0), (q1, a1)])
            );
        }

        #[test]
        fn within_range(
            cpu in 0i64..200_000, mem in 0i64..200_000, a in 0i64..100_000, b in 0i64..100_000
        ) {
            let plugin = BalancedAllocation::default();
            let snap = snapshot(vec![with_requested(kube_node("a", a, b), cpu, mem)]);
            let s = score_all(&plugin, &snap, &pod(cpu % 7, mem % 5));
            prop_assert!((0..=100).contains(&s[0]));
        }
    }
}
