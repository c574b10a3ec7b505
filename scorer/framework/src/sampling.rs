//! How many nodes one scheduling cycle looks at: kube-scheduler's `percentageOfNodesToScore`
//! (filtering stops once that many feasible nodes are found, starting where the last cycle
//! stopped), so a profile can trade placement quality for speed in large clusters as
//! kube-scheduler, Trimaran and Koordinator do by default.

/// kube-scheduler's `minFeasibleNodesToFind`: a sampled cycle still finds this many.
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// kube-scheduler's `minFeasibleNodesPercentageToFind`: the adaptive percentage's floor.
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;
/// The adaptive percentage's base (kube-scheduler's `basePercentageOfNodesToScore`).
const BASE_PERCENTAGE: usize = 50;

/// A profile's `percentageOfNodesToScore`: 1–100 is the share of the cluster's nodes to find
/// feasible before scoring (at least [`MIN_FEASIBLE_NODES_TO_FIND`]); 0 is kube-scheduler's
/// adaptive default (50 % minus one point per 125 nodes, at least 5 %: 42 % of 1 000 nodes,
/// 10 % of 5 000). Loadstar's default is 100: every node, since a placement by real load is
/// only as good as the nodes it compares.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeSampling {
    percentage: u8,
}

impl Default for NodeSampling {
    /// Every node ([`NodeSampling::ALL`]).
    fn default() -> Self {
        NodeSampling::ALL
    }
}

/// A `percentageOfNodesToScore` above 100.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("must be between 0 (adaptive) and 100, got {0}")]
pub struct SamplingError(pub u32);

impl NodeSampling {
    /// Every node, every cycle.
    pub const ALL: NodeSampling = NodeSampling { percentage: 100 };
    /// kube-scheduler's adaptive default (`percentageOfNodesToScore: 0`).
    pub const ADAPTIVE: NodeSampling = NodeSampling { percentage: 0 };

    /// `percentageOfNodesToScore` as configured: 0 (adaptive) to 100.
    pub fn new(percentage: u32) -> Result<NodeSampling, SamplingError> {
        u8::try_from(percentage)
            .ok()
            .filter(|p| *p <= 100)
            .map(|percentage| NodeSampling { percentage })
            .ok_or(SamplingError(percentage))
    }

    /// The configured percentage (0: adaptive).
    pub fn percentage(self) -> u32 {
        u32::from(self.percentage)
    }

    /// How many feasible nodes a cycle over `all` nodes looks for before it stops filtering
    /// (kube-scheduler 1.20's `numFeasibleNodesToFind`; `all` when every node is wanted).
    pub fn feasible_to_find(self, all: usize) -> usize {
        if all < MIN_FEASIBLE_NODES_TO_FIND || self.percentage >= 100 {
            return all;
        }
        let percentage = if self.percentage == 0 {
            BASE_PERCENTAGE
                .saturating_sub(all / 125)
                .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
        } else {
            usize::from(self.percentage)
        };
        (all * percentage / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
    }
}

/// Where the next sampled cycle starts, carried from cycle to cycle by the caller (as
/// kube-scheduler's `nextStartNodeIndex`) so every node gets the same chance to be examined.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SampleCursor {
    /// Position in the candidate list (taken modulo its length).
    pub next: usize,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn feasible_to_find_follows_kube_scheduler() {
        let adaptive = NodeSampling::ADAPTIVE;
        // Below 100 nodes, every node.
        assert_eq!(adaptive.feasible_to_find(99), 99);
        // 50 % − 1 000/125 = 42 %.
        assert_eq!(adaptive.feasible_to_find(1_000), 420);
        // 50 % − 40 = 10 %.
        assert_eq!(adaptive.feasible_to_find(5_000), 500);
        // The floor: 5 % of 10 000.
        assert_eq!(adaptive.feasible_to_find(10_000), 500);
        // 42 % of 200 is 84: at least 100.
        assert_eq!(adaptive.feasible_to_find(200), 100);
        let ten = NodeSampling::new(10).expect("valid");
        assert_eq!(ten.feasible_to_find(5_000), 500);
        assert_eq!(ten.feasible_to_find(500), 100);
        assert_eq!(NodeSampling::ALL.feasible_to_find(5_000), 5_000);
        assert_eq!(NodeSampling::default(), NodeSampling::ALL);
    }

    #[test]
    fn percentages_above_100_are_refused() {
        assert_eq!(NodeSampling::new(101), Err(SamplingError(101)));
        assert_eq!(
            SamplingError(250).to_string(),
            "must be between 0 (adaptive) and 100, got 250"
        );
        assert_eq!(NodeSampling::new(0).expect("valid"), NodeSampling::ADAPTIVE);
        assert_eq!(NodeSampling::new(55).expect("valid").percentage(), 55);
    }
}
