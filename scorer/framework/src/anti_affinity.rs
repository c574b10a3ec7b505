//! Existing pods' required anti-affinity terms grouped by distinct term, once per digest
//! table: replicas of one workload carry the same terms, so the InterPodAffinity PreFilter of
//! a pod without required terms of its own matches each distinct term once instead of once
//! per pod (kube-scheduler keeps such pods per node; this groups them across nodes).
use std::collections::HashMap;

use crate::constraints::AffinityTerm;
use crate::snapshot::{NodeDigest, NodeView};

/// The index. It covers the nodes whose digest rows were current when it was built; a
/// reader takes a node's entries only while its row still matches it, and reads every other
/// node (not covered, or edited since) itself.
#[derive(Debug, Default)]
pub struct AntiAffinityIndex {
    /// Each distinct term with its holders: (node index in the snapshot, index of the pod in
    /// that node's [`NodeAllocation::pods`](crate::snapshot::NodeAllocation::pods)).
    pub terms: Vec<(AffinityTerm, Vec<(u32, u32)>)>,
    covered: Vec<bool>,
}

impl AntiAffinityIndex {
    /// Builds the index of `nodes` from their table `rows` (same order).
    pub fn build(rows: &[NodeDigest], nodes: &[NodeView]) -> AntiAffinityIndex {
        let mut at: HashMap<&AffinityTerm, usize> = HashMap::new();
        let mut terms: Vec<(AffinityTerm, Vec<(u32, u32)>)> = Vec::new();
        let mut covered = vec![false; nodes.len()];
        for (i, (row, node)) in rows.iter().zip(nodes).enumerate() {
            let Ok(index) = u32::try_from(i) else { break };
            if !row.matches(node) {
                continue;
            }
            let pods = node.alloc.affinity_pods();
            if row.pods_with_required_anti > 0 && u32::try_from(pods.len()).is_err() {
                continue; // too many to name: left uncovered, read directly
            }
            covered[i] = true;
            if row.pods_with_required_anti == 0 {
                continue;
            }
            for (p, pod) in (0u32..).zip(pods) {
                for term in &pod.pod_affinity.required_anti {
                    let k = *at.entry(term).or_insert_with(|| {
                        terms.push((term.clone(), Vec::new()));
                        terms.len() - 1
                    });
                    terms[k].1.push((index, p));
                }
            }
        }
        AntiAffinityIndex { terms, covered }
    }

    /// Whether the node at `index` was covered when the index was built (its entries, if
    /// any, are complete as of then).
    pub fn covers(&self, index: usize) -> bool {
        self.covered.get(index).copied().unwrap_or(false)
    }
}
