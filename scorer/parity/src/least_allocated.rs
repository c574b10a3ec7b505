//! `LeastAllocated`: prefer nodes with the most unrequested capacity — kube-scheduler's
//! `NodeResourcesFit` scoring strategy `LeastAllocated` (`pkg/scheduler/framework/plugins/
//! noderesources/least_allocated.go`), exactly: per resource
//! `(allocatable − requested)·100 / allocatable` in integer arithmetic (0 when requested
//! exceeds allocatable), then the weighted mean with integer division over the resources
//! with non-zero allocatable (see [`super::resource_allocation`] for which requests count;
//! CPU/memory use the non-zero defaults 100m / 200Mi). Requests only: load plays no part.
use loadstar_framework::MAX_NODE_SCORE;

use crate::resource_allocation::{AllocationScore, WeightedStrategy};

/// Plugin name.
pub const NAME: &str = "LeastAllocated";

/// Upstream's `leastRequestedScore`.
pub fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// The least-allocated strategy: [`least_requested_score`] per resource, weighted.
#[derive(Debug, Clone, Copy, Default)]
pub struct Least;

impl WeightedStrategy for Least {
    const NAME: &'static str = NAME;

    fn per_resource(requested: i64, allocatable: i64) -> i64 {
        least_requested_score(requested, allocatable)
    }
}

/// The least-allocated score.
pub type LeastAllocated = AllocationScore<Least>;

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_testkit::snapshot::*;
    use proptest::prelude::*;

    #[test]
    fn upstream_cases() {
        // least_allocated_test.go: "nothing scheduled, resources requested, differently sized
        // nodes": cpu 3000/4000 → 25, memory 5000/10000 → 50 → 37; and 3000/6000 → 50,
        // 5000/10000 → 50 → 50.
        let snap = snapshot(vec![
            kube_node("a", 4000, 10000),
            kube_node("b", 6000, 10000),
        ]);
        let p = pod(3000, 5000);
        let plugin = LeastAllocated::default();
        assert_eq!(score_all(&plugin, &snap, &p), vec![37, 50]);
        // Zero allocatable: no resource is scored.
        let snap = snapshot(vec![kube_node("z", 0, 0)]);
        assert_eq!(score_all(&plugin, &snap, &p), vec![0]);
    }

    #[test]
    fn extended_resources_count_only_when_requested() {
        let plugin = LeastAllocated::from_args(
            &serde_norway::from_str(
                "{resources: [{name: cpu, weight: 1}, {name: nvidia.com/gpu, weight: 3}]}",
            )
            .expect("yaml"),
        )
        .expect("valid");
        let node = edit_kube(kube_node("g", 4000, 16 * GIB), |k| k.allocatable.gpus = 4);
        let snap = snapshot(vec![node]);
        // No GPU request: only cpu (2000/4000 → 50).
        assert_eq!(score_all(&plugin, &snap, &pod(2000, GIB)), vec![50]);
        let mut p = pod(2000, GIB);
        p.requests.gpus = 1;
        // cpu 50·1 + gpu (3/4 → 75)·3 = 275 / 4 = 68.
        assert_eq!(score_all(&plugin, &snap, &p), vec![68]);
    }

    proptest! {
        #[test]
        fn within_range_and_decreasing_in_requests(
            alloc in 1i64..1_000_000, used in 0i64..2_000_000, extra in 0i64..1000, req in 0i64..100_000
        ) {
            let plugin = LeastAllocated::default();
            let a = with_requested(kube_node("a", alloc, alloc), used, used);
            let b = with_requested(kube_node("b", alloc, alloc), used + extra, used + extra);
            let snap = snapshot(vec![a, b]);
            let s = score_all(&plugin, &snap, &pod(req, req));
            prop_assert!((0..=100).contains(&s[0]) && (0..=100).contains(&s[1]));
            prop_assert!(s[1] <= s[0]);
        }
    }
}
