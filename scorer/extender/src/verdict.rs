//! The extender's decisions, pure: a profile cut down to its load-aware plugins
//! ([`load_profile`]), a pod cut down to what those plugins read ([`load_view`]: kube-scheduler
//! already checked its constraints), and the filter and prioritize answers over the node
//! store's snapshot.
//!
//! Nodes the store does not know (no agent has reported, and in standalone mode no Node
//! object either) pass the filter — there is no evidence against them — and score 0.
use std::collections::BTreeMap;

use loadstar_framework::snapshot::{ClusterSnapshot, PodInfo};
use loadstar_framework::{MAX_NODE_SCORE, Profile};
use loadstar_policy::registry::{LOAD_AWARE_FILTERS, LOAD_AWARE_SCORES};
use rand::Rng;

use crate::wire::MAX_EXTENDER_PRIORITY;

/// `profile` with only the plugins that read real load: its other filters and scores are
/// kube-scheduler's own, which it has run already (running them again would count twice).
pub fn load_profile(mut profile: Profile) -> Profile {
    profile
        .filters
        .retain(|f| LOAD_AWARE_FILTERS.contains(&f.name()));
    profile
        .scores
        .retain(|(s, _)| LOAD_AWARE_SCORES.contains(&s.name()));
    // Preemption is kube-scheduler's business here.
    profile.preemption = None;
    profile
}

/// The pod as the load-aware plugins see it: requests, limits, labels and owner stay; the
/// placement constraints kube-scheduler has already enforced go (so the profile neither
/// checks them again nor refuses the pod for lacking their filters).
pub fn load_view(mut pod: PodInfo) -> PodInfo {
    pod.unsupported.clear();
    pod.node_selector.clear();
    pod.required_affinity.clear();
    pod.preferred_node_affinity.clear();
    pod.pod_affinity = Default::default();
    pod.spread_constraints.clear();
    pod.host_ports.clear();
    pod.claims.clear();
    pod.volumes = None;
    pod.disks.clear();
    pod
}

/// Each name's index into the snapshot (`None`: unknown there), and the known indices.
fn positions(snapshot: &ClusterSnapshot, names: &[String]) -> (Vec<Option<usize>>, Vec<usize>) {
    let at: Vec<Option<usize>> = names
        .iter()
        .map(|n| snapshot.index.get(n.as_str()).copied())
        .collect();
    let known = at.iter().flatten().copied().collect();
    (at, known)
}

/// The filter answer: which of `names` pass (positions into `names`, in order) and why the
/// others failed.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct FilterVerdict {
    /// Positions into the request's names of the passing nodes.
    pub passed: Vec<usize>,
    /// Rejected node → reason.
    pub failed: BTreeMap<String, String>,
}

/// Runs the load-aware filters of `profile` for `pod` on `names`.
pub fn filter(
    profile: &Profile,
    snapshot: &ClusterSnapshot,
    pod: &PodInfo,
    names: &[String],
    rng: &mut impl Rng,
) -> FilterVerdict {
    let (at, known) = positions(snapshot, names);
    let ev = profile.evaluate(snapshot, pod, Some(&known), usize::MAX, rng);
    // Lookups by snapshot index, not by name: thousands of names per call.
    let mut rejected = vec![false; snapshot.nodes().len()];
    let mut failed = BTreeMap::new();
    for f in &ev.filtered {
        rejected[f.index] = true;
        failed.insert(
            snapshot.nodes()[f.index].name.to_string(),
            f.reason.to_string(),
        );
    }
    let passed = at
        .iter()
        .enumerate()
        .filter(|(_, i)| !i.is_some_and(|i| rejected[i]))
        .map(|(k, _)| k)
        .collect();
    FilterVerdict { passed, failed }
}

/// Scales a weighted total (0–100) to the extender range, rounding to nearest.
pub fn scale(total: f64) -> i64 {
    let max = MAX_EXTENDER_PRIORITY as f64;
    let scaled = (total / MAX_NODE_SCORE as f64 * max).round();
    if scaled.is_nan() {
        0
    } else {
        (scaled as i64).clamp(0, MAX_EXTENDER_PRIORITY)
    }
}

/// Scores `names` for `pod` with the profile's scores: each node's weighted total (0–100)
/// scaled to 0–10 ([`scale`]); nodes the store does not know (or that `profile`'s filters,
/// if it has any, reject) score 0. Same order as `names`.
pub fn prioritize<'n>(
    profile: &Profile,
    snapshot: &ClusterSnapshot,
    pod: &PodInfo,
    names: &'n [String],
    rng: &mut impl Rng,
) -> Vec<(&'n str, i64)> {
    let (at, known) = positions(snapshot, names);
    let ev = profile.evaluate(snapshot, pod, Some(&known), 0, rng);
    let mut score = vec![0i64; snapshot.nodes().len()];
    for r in &ev.ranked {
        score[r.index] = scale(r.total);
    }
    names
        .iter()
        .zip(&at)
        .map(|(n, i)| (n.as_str(), i.map_or(0, |i| score[i])))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_common::model::ResourceKind;
    use loadstar_policy::config::ScorerConfig;
    use loadstar_testkit::snapshot::*;
    use rand::SeedableRng;

    fn default_load_profile() -> Profile {
        let p = ScorerConfig::embedded_default()
            .build_profiles()
            .expect("profiles")
            .into_iter()
            .next()
            .expect("default");
        load_profile(p)
    }

    #[test]
    fn scaling_rounds_into_the_extender_range() {
        assert_eq!(scale(0.0), 0);
        assert_eq!(scale(4.9), 0);
        assert_eq!(scale(5.0), 1);
        assert_eq!(scale(64.0), 6);
        assert_eq!(scale(100.0), 10);
        assert_eq!(scale(130.0), 10);
        assert_eq!(scale(f64::NAN), 0);
    }

    #[test]
    fn only_load_aware_plugins_remain() {
        let p = default_load_profile();
        let filters: Vec<&str> = p.filters.iter().map(|f| f.name()).collect();
        assert_eq!(filters, vec!["EvictionPressure", "UsageThreshold"]);
        for (s, _) in &p.scores {
            assert!(LOAD_AWARE_SCORES.contains(&s.name()), "{}", s.name());
        }
        assert!(!p.scores.is_empty());
        assert!(p.preemption.is_none());
    }

    #[test]
    fn hot_nodes_fail_unknown_nodes_pass_and_cool_nodes_score_higher() {
        let snap = snapshot(vec![
            with_load(
                with_capacity(kube_node("hot", 8000, 32 * GIB), 8, 32 * GIB),
                ResourceKind::Cpu,
                0.95,
                0.02,
            ),
            with_load(
                with_capacity(kube_node("warm", 8000, 32 * GIB), 8, 32 * GIB),
                ResourceKind::Cpu,
                0.6,
                0.05,
            ),
            with_load(
                with_capacity(kube_node("cool", 8000, 32 * GIB), 8, 32 * GIB),
                ResourceKind::Cpu,
                0.1,
                0.02,
            ),
        ]);
        let profile = default_load_profile();
        // Constraints kube-scheduler checked are stripped: a node selector does not refuse.
        let mut pod = pod(500, GIB);
        pod.node_selector.insert("disk".into(), "ssd".into());
        let pod = load_view(pod);
        let names: Vec<String> = ["hot", "warm", "cool", "stranger"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(1);
        let f = filter(&profile, &snap, &pod, &names, &mut rng);
        assert_eq!(f.passed, vec![1, 2, 3], "{f:?}");
        assert!(f.failed["hot"].contains("cpu"), "{f:?}");
        let scores = prioritize(&profile, &snap, &pod, &names, &mut rng);
        let s = |n: &str| {
            scores
                .iter()
                .find(|(h, _)| *h == n)
                .map(|(_, s)| *s)
                .expect("scored")
        };
        assert!(s("cool") > s("warm"), "{scores:?}");
        assert_eq!(s("stranger"), 0);
        assert!(scores.iter().all(|(_, v)| (0..=10).contains(v)));
    }
}
