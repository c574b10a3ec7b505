//! DefaultPreemption, kube-scheduler 1.20's PostFilter, as pure logic: when no node fits a
//! pod, find the nodes where evicting lower-priority pods would let it fit, choose on each
//! the victims kube-scheduler would (every lower-priority pod removed, then as many reprieved
//! as still fit, pods whose eviction would break a PodDisruptionBudget first), and rank the
//! nodes as `pickOneNodeForPreemption` does. The scheduler (`scorer/kube`) deletes the
//! victims and sets `nominatedNodeName`; `Scorer.Score` reports the same proposal.
//!
//! As in kube-scheduler, the PreFilter states (InterPodAffinity's and PodTopologySpread's
//! cluster-wide counts) are computed once per pod, copied per candidate node and updated as
//! victims are removed and reprieved ([`crate::FilterPlugin::prefilter_update`]), so a dry
//! run costs a few filter calls per pod on the node, never a pass over the cluster.
use std::cmp::Reverse;
use std::collections::BTreeSet;
use std::sync::Arc;

use rand::Rng;

use crate::constraints::LabelSelector;
pub use crate::profile::PreemptionArgs;
use crate::profile::{
    CycleContext, Evaluation, FilteredNode, PreFilterState, Profile, StalePolicy,
};
use crate::snapshot::{ClusterSnapshot, NodeView, PodInfo, PodOnNode};

/// A PodDisruptionBudget as preemption reads it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DisruptionBudget {
    /// Its namespace (it covers pods there only).
    pub namespace: String,
    /// `spec.selector`; `None` (absent) and the empty selector cover no pod here, as in
    /// kube-scheduler's `filterPodsWithPDBViolation`.
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed` (0 when the disruption controller has not set it).
    pub disruptions_allowed: i32,
    /// `status.disruptedPods`: pods already counted as disrupted, by name.
    pub disrupted_pods: BTreeSet<String>,
}

impl DisruptionBudget {
    /// Whether evicting `pod` spends one of this budget's disruptions.
    fn covers(&self, pod: &PodOnNode) -> bool {
        pod.namespace == self.namespace
            && !pod.labels.is_empty()
            && self.selector.as_ref().is_some_and(|s| {
                !(s.match_labels.is_empty() && s.match_expressions.is_empty())
                    && s.matches(&pod.labels)
            })
            && !self.disrupted_pods.contains(&pod.name)
    }
}

/// A node where preemption would let the pod fit, with the pods it would evict.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// Index into the snapshot.
    pub index: usize,
    /// Pods to evict, in kube-scheduler's order (those breaking a budget first, then by
    /// importance: priority, then start time).
    pub victims: Vec<Arc<PodOnNode>>,
    /// How many victims break a PodDisruptionBudget.
    pub pdb_violations: usize,
    /// 0 for the best candidates; candidates with equal rank tie on every criterion of
    /// `pickOneNodeForPreemption` (kube-scheduler then picks any of them).
    pub rank: usize,
}

/// `pickOneNodeForPreemption`'s criteria in order, smaller is better: fewest budget
/// violations, lowest priority of the first victim, lowest sum of priorities, fewest victims,
/// latest start among the highest-priority victims (an unstarted pod counts as starting now,
/// i.e. latest).
type RankKey = (usize, i32, i64, usize, Reverse<i64>);

impl Candidate {
    fn key(&self) -> RankKey {
        let first = self.victims.first().map_or(i32::MIN, |v| v.priority);
        let sum: i64 = self
            .victims
            .iter()
            .map(|v| i64::from(v.priority) + i64::from(i32::MAX) + 1)
            .sum();
        let top = self.victims.iter().map(|v| v.priority).max();
        let earliest = self
            .victims
            .iter()
            .filter(|v| Some(v.priority) == top)
            .map(|v| v.start_time.unwrap_or(i64::MAX))
            .min()
            .unwrap_or(i64::MAX);
        (
            self.pdb_violations,
            first,
            sum,
            self.victims.len(),
            Reverse(earliest),
        )
    }
}

/// A preemption proposal.
#[derive(Debug, Clone)]
pub struct Preemption {
    /// Candidates, best first; the first is the one to act on.
    pub candidates: Vec<Candidate>,
    /// Nodes where eviction might help (their rejection was resolvable).
    pub potential: usize,
    /// Of those, how many were tried before enough candidates were found.
    pub examined: usize,
}

impl Preemption {
    /// The chosen candidate.
    pub fn chosen(&self) -> Option<&Candidate> {
        self.candidates.first()
    }
}

/// What preemption decided for a pod no node fits.
#[derive(Debug, Clone)]
pub enum PreemptionOutcome {
    /// The pod may not preempt; why.
    Ineligible(String),
    /// No node where evicting lower-priority pods would let the pod fit.
    NoCandidates {
        /// Nodes whose rejection eviction might have lifted (0: none; every rejection was
        /// unresolvable, e.g. taints or selectors).
        potential: usize,
    },
    /// Evict a candidate's victims and nominate its node.
    Proposal(Preemption),
}

/// `MoreImportantPod` as an ordering: higher priority first, then the earlier start
/// (unstarted last).
fn more_important_first(a: &PodOnNode, b: &PodOnNode) -> std::cmp::Ordering {
    b.priority.cmp(&a.priority).then(
        a.start_time
            .unwrap_or(i64::MAX)
            .cmp(&b.start_time.unwrap_or(i64::MAX)),
    )
}

/// `filterPodsWithPDBViolation`: walks the pods in order, spending each covering budget's
/// allowed disruptions; a pod that takes any budget below zero is violating.
fn split_by_budgets(
    pods: Vec<Arc<PodOnNode>>,
    budgets: &[DisruptionBudget],
) -> (Vec<Arc<PodOnNode>>, Vec<Arc<PodOnNode>>) {
    let mut allowed: Vec<i32> = budgets.iter().map(|b| b.disruptions_allowed).collect();
    let (mut violating, mut fine) = (Vec::new(), Vec::new());
    for pod in pods {
        let mut violated = false;
        for (b, left) in budgets.iter().zip(allowed.iter_mut()) {
            if b.covers(&pod) {
                *left = left.saturating_sub(1);
                violated |= *left < 0;
            }
        }
        if violated {
            violating.push(pod);
        } else {
            fine.push(pod);
        }
    }
    (violating, fine)
}

/// The dry runs of one preemption: the snapshot, the pod and the PreFilter states of the
/// whole cycle. Each node's run changes the states as it removes and reprieves pods, then
/// puts back what it removed: the updates are exact counts, so the states come back
/// unchanged (kube-scheduler copies them per node instead; a copy of InterPodAffinity's
/// counts costs more than the whole dry run of a node).
struct DryRun<'a> {
    profile: &'a Profile,
    ctx: &'a CycleContext<'a>,
    states: Vec<Option<PreFilterState>>,
    pod: &'a PodInfo,
}

impl DryRun<'_> {
    /// Whether the pod passes every filter on `node`.
    fn fits(&self, node: &NodeView) -> bool {
        let p = self.profile;
        if node.stale && p.stale_policy == StalePolicy::Filter {
            return false;
        }
        p.filters.iter().zip(&self.states).all(|(f, s)| {
            f.filter_prepared(self.ctx, s.as_ref(), self.pod, node)
                .is_ok()
        })
    }

    /// Takes `uid` off `node`, updating the states (`RemovePod`).
    fn remove(&mut self, node: &mut NodeView, uid: &str) -> Option<Arc<PodOnNode>> {
        let pod = Arc::make_mut(&mut node.alloc).evict(uid)?;
        self.update(node, &pod, -1);
        Some(pod)
    }

    /// Puts `pod` back on `node`, updating the states (`AddPod`).
    fn add(&mut self, node: &mut NodeView, pod: Arc<PodOnNode>) {
        self.update(node, &pod, 1);
        Arc::make_mut(&mut node.alloc).admit(pod);
    }

    fn update(&mut self, node: &NodeView, pod: &PodOnNode, delta: i64) {
        for (f, s) in self.profile.filters.iter().zip(self.states.iter_mut()) {
            if let Some(s) = s {
                f.prefilter_update(s, self.pod, pod, node, delta);
            }
        }
    }

    /// `selectVictimsOnNode`: `None` when evicting every lower-priority pod is not enough
    /// (or there is none); else the victims and how many of them break a budget.
    fn victims(
        &mut self,
        index: usize,
        budgets: &[DisruptionBudget],
    ) -> Option<(Vec<Arc<PodOnNode>>, usize)> {
        let base = &self.ctx.snapshot.nodes()[index];
        let lower: Vec<String> = base
            .alloc
            .pods
            .iter()
            .filter(|p| p.priority < self.pod.priority)
            .map(|p| p.uid.clone())
            .collect();
        if lower.is_empty() {
            return None;
        }
        let mut node = base.clone();
        let mut potential: Vec<Arc<PodOnNode>> = lower
            .iter()
            .filter_map(|uid| self.remove(&mut node, uid))
            .collect();
        if !self.fits(&node) {
            for p in potential {
                self.update(&node, &p, 1);
            }
            return None;
        }
        potential.sort_by(|a, b| more_important_first(a, b));
        let (violating, fine) = split_by_budgets(potential, budgets);
        let breaking = violating.len();
        let mut victims = Vec::new();
        let mut violations = 0;
        for (i, p) in violating.into_iter().chain(fine).enumerate() {
            let uid = p.uid.clone();
            self.add(&mut node, p);
            if !self.fits(&node) {
                if let Some(p) = self.remove(&mut node, &uid) {
                    victims.push(p);
                }
                if i < breaking {
                    violations += 1;
                }
            }
        }
        // Restore the cycle's states for the next node.
        for v in &victims {
            self.update(&node, v, 1);
        }
        Some((victims, violations))
    }
}

impl Profile {
    /// Whether evicting pods may lift this rejection (its filter says so).
    pub fn preemption_may_help(&self, f: &FilteredNode) -> bool {
        self.filters
            .iter()
            .find(|p| p.name() == f.plugin)
            .is_some_and(|p| p.preemption_may_help(&f.reason))
    }

    /// DefaultPreemption for `pod`, which `evaluation` (this profile's, on `snapshot`) found
    /// no node for: candidate nodes are tried from a random offset, as kube-scheduler does,
    /// until enough are found (see [`PreemptionArgs`]); `budgets` are the cluster's
    /// PodDisruptionBudgets.
    pub fn preempt(
        &self,
        snapshot: &ClusterSnapshot,
        pod: &PodInfo,
        evaluation: &Evaluation,
        budgets: &[DisruptionBudget],
        rng: &mut impl Rng,
    ) -> PreemptionOutcome {
        let Some(args) = self.preemption else {
            return PreemptionOutcome::Ineligible(format!(
                "profile {:?} does not preempt",
                self.name
            ));
        };
        if pod.preemption_never {
            return PreemptionOutcome::Ineligible("its preemptionPolicy is Never".to_string());
        }
        if let Some(nominated) = &pod.nominated_node {
            // Waiting for earlier victims to go, unless its node can no longer take it.
            let unresolvable = evaluation
                .filtered
                .iter()
                .find(|f| {
                    snapshot
                        .nodes()
                        .get(f.index)
                        .is_some_and(|n| &*n.name == nominated)
                })
                .is_some_and(|f| !self.preemption_may_help(f));
            if !unresolvable
                && snapshot.get(nominated).is_some_and(|n| {
                    n.alloc
                        .pods
                        .iter()
                        .any(|p| p.terminating && p.priority < pod.priority)
                })
            {
                return PreemptionOutcome::Ineligible(format!(
                    "lower-priority pods it preempted on node {nominated} are still terminating"
                ));
            }
        }
        let potential: Vec<usize> = evaluation
            .filtered
            .iter()
            .filter(|f| f.index < snapshot.nodes().len() && self.preemption_may_help(f))
            .map(|f| f.index)
            .collect();
        if potential.is_empty() {
            return PreemptionOutcome::NoCandidates { potential: 0 };
        }
        let want = args.num_candidates(potential.len());
        let offset = rng.random_range(0..potential.len());
        let ctx = CycleContext::new(snapshot, self.window_seconds, self.stale_policy);
        let states: Vec<Option<PreFilterState>> = self
            .filters
            .iter()
            .map(|f| f.prefilter(&ctx, pod))
            .collect();
        let mut run = DryRun {
            profile: self,
            ctx: &ctx,
            states,
            pod,
        };
        let (mut fine, mut violating) = (Vec::new(), Vec::new());
        let mut examined = 0;
        for k in 0..potential.len() {
            examined = k + 1;
            let index = potential[(offset + k) % potential.len()];
            if let Some((victims, pdb_violations)) = run.victims(index, budgets) {
                let c = Candidate {
                    index,
                    victims,
                    pdb_violations,
                    rank: 0,
                };
                let list = if pdb_violations == 0 {
                    &mut fine
                } else {
                    &mut violating
                };
                // kube-scheduler's candidate lists hold `want` entries each.
                if list.len() < want {
                    list.push(c);
                }
            }
            if !fine.is_empty() && fine.len() + violating.len() >= want {
                break;
            }
        }
        let mut candidates: Vec<(RankKey, Candidate)> = fine
            .into_iter()
            .chain(violating)
            .map(|c| (c.key(), c))
            .collect();
        if candidates.is_empty() {
            return PreemptionOutcome::NoCandidates {
                potential: potential.len(),
            };
        }
        candidates.sort_by_key(|a| a.0);
        let mut rank = 0;
        for i in 1..candidates.len() {
            if candidates[i].0 != candidates[i - 1].0 {
                rank += 1;
            }
            candidates[i].1.rank = rank;
        }
        PreemptionOutcome::Proposal(Preemption {
            candidates: candidates.into_iter().map(|(_, c)| c).collect(),
            potential: potential.len(),
            examined,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{FilterPlugin, Reason};
    use crate::snapshot::{KubeNode, NodeAllocation};
    use loadstar_common::model::ResourceList;
    use rand::SeedableRng;
    use std::collections::BTreeMap;

    /// Fits when the node's requested CPU plus the pod's is within allocatable; eviction
    /// helps. A stand-in for NodeResourcesFit, which lives a layer up.
    #[derive(Debug)]
    struct CpuFit;
    impl FilterPlugin for CpuFit {
        fn name(&self) -> &'static str {
            "CpuFit"
        }
        fn filter(
            &self,
            _: &CycleContext<'_>,
            pod: &PodInfo,
            node: &NodeView,
        ) -> Result<(), Reason> {
            let free = node.allocatable().cpu_millis - node.alloc.requested.cpu_millis;
            if pod.requests.cpu_millis <= free {
                Ok(())
            } else {
                Err("Insufficient cpu".into())
            }
        }
        fn preemption_may_help(&self, _: &str) -> bool {
            true
        }
    }

    /// Rejects nodes labelled `blocked`, unresolvably.
    #[derive(Debug)]
    struct Blocked;
    impl FilterPlugin for Blocked {
        fn name(&self) -> &'static str {
            "Blocked"
        }
        fn filter(&self, _: &CycleContext<'_>, _: &PodInfo, node: &NodeView) -> Result<(), Reason> {
            if node.labels_or_empty().contains_key("blocked") {
                Err("node(s) were blocked".into())
            } else {
                Ok(())
            }
        }
    }

    fn running(name: &str, cpu: i64, priority: i32, start: Option<i64>, app: &str) -> PodOnNode {
        PodOnNode {
            uid: format!("uid-{name}"),
            name: name.into(),
            namespace: "ns".into(),
            labels: BTreeMap::from([("app".to_string(), app.to_string())]),
            priority,
            start_time: start,
            requests: ResourceList {
                cpu_millis: cpu,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn node(name: &str, cpu: i64, pods: Vec<PodOnNode>, blocked: bool) -> NodeView {
        let mut alloc = NodeAllocation::default();
        for p in pods {
            alloc.admit(p);
        }
        let mut labels = BTreeMap::new();
        if blocked {
            labels.insert("blocked".to_string(), String::new());
        }
        NodeView {
            name: Arc::from(name),
            agent: None,
            kube: Some(Arc::new(KubeNode {
                allocatable: ResourceList {
                    cpu_millis: cpu,
                    pods: 110,
                    ..Default::default()
                },
                labels,
                ready: true,
                ..Default::default()
            })),
            alloc: Arc::new(alloc),
            stale: false,
            report_age_seconds: None,
        }
    }

    fn profile() -> Profile {
        Profile {
            name: "p".into(),
            filters: vec![Box::new(Blocked), Box::new(CpuFit)],
            scores: vec![],
            window_seconds: 60,
            stale_policy: StalePolicy::Fallback,
            stale_penalty: 0.5,
            preemption: Some(PreemptionArgs::default()),
            sampling: crate::NodeSampling::ALL,
        }
    }

    fn incoming(cpu: i64, priority: i32) -> PodInfo {
        PodInfo {
            uid: "uid-new".into(),
            name: "new".into(),
            namespace: "ns".into(),
            priority,
            requests: ResourceList {
                cpu_millis: cpu,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    fn run(
        snap: &ClusterSnapshot,
        pod: &PodInfo,
        budgets: &[DisruptionBudget],
    ) -> PreemptionOutcome {
        let p = profile();
        let mut rng = rand::rngs::SmallRng::seed_from_u64(7);
        let ev = p.evaluate(snap, pod, None, 0, &mut rng);
        assert_eq!(ev.feasible(), 0, "preemption only runs when nothing fits");
        p.preempt(snap, pod, &ev, budgets, &mut rng)
    }

    fn names(c: &Candidate) -> Vec<&str> {
        c.victims.iter().map(|v| v.name.as_str()).collect()
    }

    #[test]
    fn evicts_the_fewest_lowest_priority_pods_and_reprieves_the_rest() {
        // n1: evicting the 500m priority-1 pod is enough; the priority-5 pod is reprieved.
        // n2: needs both of its pods gone (sum of priorities higher).
        let snap = ClusterSnapshot::new(
            vec![
                node(
                    "n1",
                    2000,
                    vec![
                        running("a", 1000, 5, Some(10), "x"),
                        running("b", 500, 1, Some(20), "x"),
                        running("c", 500, 100, Some(30), "x"),
                    ],
                    false,
                ),
                node(
                    "n2",
                    2000,
                    vec![
                        running("d", 1000, 1, Some(10), "x"),
                        running("e", 1000, 1, Some(15), "x"),
                    ],
                    false,
                ),
            ],
            1,
        );
        let PreemptionOutcome::Proposal(p) = run(&snap, &incoming(500, 10), &[]) else {
            panic!("expected a proposal");
        };
        let best = p.chosen().expect("a candidate");
        assert_eq!(&*snap.nodes()[best.index].name, "n1");
        assert_eq!(names(best), vec!["b"]);
        assert_eq!(p.candidates.len(), 2);
        assert_eq!(
            names(&p.candidates[1]),
            vec!["e"],
            "n2: one priority-1 pod is enough"
        );
        // Same first-victim priority (1), sum and count: the later start wins (n1's b at 20
        // over n2's e at 15).
        assert_eq!(p.candidates[1].rank, 1);
    }

    #[test]
    fn never_evicts_equal_or_higher_priority_and_skips_unresolvable_nodes() {
        let snap = ClusterSnapshot::new(
            vec![
                node("n1", 1000, vec![running("a", 1000, 10, None, "x")], false),
                node("n2", 1000, vec![running("b", 1000, 1, None, "x")], true),
            ],
            1,
        );
        match run(&snap, &incoming(500, 10), &[]) {
            PreemptionOutcome::NoCandidates { potential } => assert_eq!(potential, 1),
            other => panic!("expected no candidates, got {other:?}"),
        }
        let never = PodInfo {
            preemption_never: true,
            ..incoming(500, 10)
        };
        assert!(matches!(
            run(&snap, &never, &[]),
            PreemptionOutcome::Ineligible(r) if r.contains("Never")
        ));
    }

    #[test]
    fn budgets_steer_victims_and_nodes() {
        // Both nodes need one 1000m pod gone. n1's is covered by a budget with no
        // disruptions left, n2's is not: n2 wins although its victim has higher priority.
        let snap = ClusterSnapshot::new(
            vec![
                node(
                    "n1",
                    1000,
                    vec![running("a", 1000, 1, Some(1), "db")],
                    false,
                ),
                node(
                    "n2",
                    1000,
                    vec![running("b", 1000, 5, Some(1), "web")],
                    false,
                ),
            ],
            1,
        );
        let budget = DisruptionBudget {
            namespace: "ns".into(),
            selector: Some(LabelSelector {
                match_labels: BTreeMap::from([("app".to_string(), "db".to_string())]),
                ..Default::default()
            }),
            disruptions_allowed: 0,
            disrupted_pods: BTreeSet::new(),
        };
        let PreemptionOutcome::Proposal(p) =
            run(&snap, &incoming(1000, 10), std::slice::from_ref(&budget))
        else {
            panic!("expected a proposal");
        };
        assert_eq!(&*snap.nodes()[p.candidates[0].index].name, "n2");
        assert_eq!(p.candidates[1].pdb_violations, 1);
        // With one disruption allowed, n1's lower-priority victim wins again.
        let allowed = DisruptionBudget {
            disruptions_allowed: 1,
            ..budget
        };
        let PreemptionOutcome::Proposal(p) = run(&snap, &incoming(1000, 10), &[allowed]) else {
            panic!("expected a proposal");
        };
        assert_eq!(&*snap.nodes()[p.candidates[0].index].name, "n1");
        assert_eq!(p.candidates[0].pdb_violations, 0);
    }

    #[test]
    fn a_nominated_pod_waits_for_its_victims() {
        let mut gone = running("a", 1000, 1, Some(1), "x");
        gone.terminating = true;
        let snap = ClusterSnapshot::new(vec![node("n1", 1000, vec![gone], false)], 1);
        let pod = PodInfo {
            nominated_node: Some("n1".into()),
            ..incoming(1000, 10)
        };
        assert!(matches!(
            run(&snap, &pod, &[]),
            PreemptionOutcome::Ineligible(r) if r.contains("still terminating")
        ));
    }

    #[test]
    fn candidate_counts_follow_the_arguments() {
        let a = PreemptionArgs::default();
        assert_eq!(a.num_candidates(50), 50);
        assert_eq!(a.num_candidates(5000), 500);
        assert!(
            PreemptionArgs {
                min_candidate_nodes_percentage: 0,
                min_candidate_nodes_absolute: 0
            }
            .validate()
            .is_err()
        );
    }
}
