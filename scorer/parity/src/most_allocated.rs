//! `MostAllocated`: prefer nodes with the most requested capacity (bin packing on requests) —
//! kube-scheduler's `NodeResourcesFit` scoring strategy `MostAllocated`
//! (`pkg/scheduler/framework/plugins/noderesources/most_allocated.go`), exactly: per resource
//! `requested·100 / allocatable` in integer arithmetic with requested capped at allocatable
//! (non-zero defaults can push it over), weighted mean with integer division, same resource
//! rules as [`super::resource_allocation`]. Requests only.
use loadstar_framework::MAX_NODE_SCORE;

use crate::resource_allocation::{AllocationScore, WeightedStrategy};

/// Plugin name.
pub const NAME: &str = "MostAllocated";

/// Upstream's `mostRequestedScore`.
pub fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    requested.min(capacity) * MAX_NODE_SCORE / capacity
}

/// The most-allocated strategy: [`most_requested_score`] per resource, weighted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Most;

impl WeightedStrategy for Most {
    const NAME: &'static str = NAME;

    fn per_resource(requested: i64, allocatable: i64) -> i64 {
        most_requested_score(requested, allocatable)
    }
}

/// The most-allocated score.
pub type MostAllocated = AllocationScore<Most>;

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    #[test]
    fn upstream_cases() {
        // most_allocated_test.go: "nothing scheduled, resources requested, differently sized
        // nodes": cpu 3000/4000 → 75, memory 5000/10000 → 50 → 62; 3000/6000 → 50, 50 → 50.
        let snap = snapshot(vec![
            kube_node("a", 4000, 10000),
            kube_node("b", 6000, 10000),
        ]);
        let plugin = MostAllocated::default();
        assert_eq!(score_all(&plugin, &snap, &pod(3000, 5000)), vec![62, 50]);
        // Over-requested (non-zero defaults) is capped: 100.
        let snap = snapshot(vec![with_requested(kube_node("c", 1000, 1000), 900, 900)]);
        assert_eq!(score_all(&plugin, &snap, &pod(500, 500)), vec![100]);
    }

    proptest! {
        #[test]
        fn within_range_and_increasing_in_requests(
            alloc in 1i64..1_000_000, used in 0i64..2_000_000, extra in 0i64..1000, req in 0i64..100_000
        ) {
            let plugin = MostAllocated::default();
            let a = with_requested(kube_node("a", alloc, alloc), used, used);
            let b = with_requested(kube_node("b", alloc, alloc), used + extra, used + extra);
            let snap = snapshot(vec![a, b]);
            let s = score_all(&plugin, &snap, &pod(req, req));
            prop_assert!((0..=100).contains(&s[0]) && (0..=100).contains(&s[1]));
            prop_assert!(s[1] >= s[0]);
        }
    }
}
