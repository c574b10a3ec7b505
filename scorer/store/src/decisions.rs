//! The record of recent placement decisions — where each pod went and why — that
//! `kubectl loadstar explain`, the `ExplainPod`/`ListDecisions` calls and the web view read.
//!
//! The scheduler records every attempt (and later its binding's outcome); `Score` calls are
//! recorded too, under their own source, so a standalone scorer shows what it was asked.
//! The log is bounded twice: at most `capacity` pods per source (the least recently decided
//! leave first, so no number of `Score` calls pushes out the scheduler's records), and per
//! decision at most [`DecisionLimits::ranked`] ranked nodes with their
//! per-plugin scores and [`DecisionLimits::named_filtered`] rejected nodes by name (the rest
//! of each filter's rejections are counted, never dropped from the counts).
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use loadstar_common::text::{NAME_MAX, NAMESPACE_MAX, truncate};
use loadstar_framework::Evaluation;
use loadstar_framework::snapshot::{ClusterSnapshot, PodInfo};

/// Longest filter reason a record keeps, bytes (reasons can quote a pod's own fields).
const MAX_REASON_BYTES: usize = 512;
/// Longest summary a record keeps, bytes.
const MAX_SUMMARY_BYTES: usize = 4096;
/// Longest pod UID a record keeps, bytes (a described pod's is `described:namespace/name`).
const MAX_UID_BYTES: usize = 512;

/// Who made a decision.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Source {
    /// The scorer's own Kubernetes scheduler (or `Scheduler.Bind`).
    Scheduler,
    /// A `Score` call: nothing was bound.
    Score,
}

impl Source {
    const ALL: usize = 2;

    fn index(self) -> usize {
        match self {
            Source::Scheduler => 0,
            Source::Score => 1,
        }
    }

    /// `scheduler` or `score`.
    pub fn as_str(self) -> &'static str {
        match self {
            Source::Scheduler => "scheduler",
            Source::Score => "score",
        }
    }
}

/// What became of a decision.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Scored only (`Score` calls): the best node, if any.
    Scored {
        /// The best node.
        node: Option<String>,
    },
    /// Assumed onto `node`, its binding in flight.
    Assumed {
        /// Node.
        node: String,
    },
    /// Bound to `node`.
    Bound {
        /// Node.
        node: String,
    },
    /// The binding to `node` failed (the pod is retried).
    BindFailed {
        /// Node.
        node: String,
        /// Why.
        error: String,
    },
    /// No node fits.
    Unschedulable,
    /// No node fits; preemption nominated `node`.
    Nominated {
        /// Node.
        node: String,
    },
}

impl Outcome {
    /// A short name: `scored`, `assumed`, `bound`, `bind_failed`, `unschedulable`,
    /// `nominated`.
    pub fn kind(&self) -> &'static str {
        match self {
            Outcome::Scored { .. } => "scored",
            Outcome::Assumed { .. } => "assumed",
            Outcome::Bound { .. } => "bound",
            Outcome::BindFailed { .. } => "bind_failed",
            Outcome::Unschedulable => "unschedulable",
            Outcome::Nominated { .. } => "nominated",
        }
    }

    /// The node the outcome names, if any.
    pub fn node(&self) -> Option<&str> {
        match self {
            Outcome::Scored { node } => node.as_deref(),
            Outcome::Assumed { node }
            | Outcome::Bound { node }
            | Outcome::BindFailed { node, .. }
            | Outcome::Nominated { node } => Some(node),
            Outcome::Unschedulable => None,
        }
    }

    /// The error of a failed binding.
    pub fn error(&self) -> Option<&str> {
        match self {
            Outcome::BindFailed { error, .. } => Some(error),
            _ => None,
        }
    }
}

/// A feasible node as recorded: its total and each plugin's (name, score, weight).
#[derive(Debug, Clone, PartialEq)]
pub struct RankedRecord {
    /// Node name.
    pub node: Arc<str>,
    /// Weighted total, 0–100.
    pub total: f64,
    /// (plugin, score 0–100, weight).
    pub plugins: Vec<(&'static str, i64, i64)>,
    /// The node's load was stale.
    pub stale: bool,
}

/// The nodes one filter rejected for one reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilteredGroup {
    /// Filter plugin.
    pub plugin: &'static str,
    /// Reason, as kube-scheduler words it.
    pub reason: String,
    /// Nodes, by name (at most the log's `named_filtered` across a decision).
    pub nodes: Vec<Arc<str>>,
    /// How many nodes it rejected in all (≥ `nodes.len()`).
    pub count: usize,
}

/// One decision for one pod.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    /// Who decided.
    pub source: Source,
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// UID (synthetic for described pods).
    pub uid: String,
    /// Profile.
    pub profile: String,
    /// When, Unix milliseconds.
    pub decided_at_ms: i64,
    /// Which attempt of the scheduler's for this pod (1 = first; 0 for `Score` calls).
    pub attempt: u32,
    /// kube-scheduler's summary, e.g. `2/3 nodes are available: 1 Insufficient cpu.`.
    pub summary: String,
    /// Nodes evaluated.
    pub evaluated: usize,
    /// Nodes that passed every filter.
    pub feasible: usize,
    /// Best first, at most the log's `ranked` limit.
    pub ranked: Vec<RankedRecord>,
    /// Every rejection, grouped by filter and reason, largest group first.
    pub filtered: Vec<FilteredGroup>,
}

impl Decision {
    /// Records `ev`, made on `snap` for `pod` by `profile` (nodes named through `snap`).
    pub fn of(
        source: Source,
        pod: &PodInfo,
        profile: &str,
        attempt: u32,
        snap: &ClusterSnapshot,
        ev: &Evaluation,
        limits: DecisionLimits,
    ) -> Decision {
        let name_of = |i: usize| -> Arc<str> {
            snap.nodes()
                .get(i)
                .map(|n| n.name.clone())
                .unwrap_or_else(|| Arc::from("?"))
        };
        let ranked = ev
            .ranked
            .iter()
            .take(limits.ranked)
            .map(|r| RankedRecord {
                node: name_of(r.index),
                total: r.total,
                plugins: r.plugins.clone(),
                stale: r.stale,
            })
            .collect();
        let counted = ev.filtered_groups();
        // Names are reserved in the groups' order of first appearance, as many as each
        // group has while the limit lasts: no group grows its list node by node in the
        // common case (runs of one reason), and no more is reserved than is named.
        let mut unreserved = limits.named_filtered.min(ev.filtered.len());
        let mut filtered: Vec<FilteredGroup> = counted
            .iter()
            .map(|g| {
                let reserve = g.count.min(unreserved);
                unreserved -= reserve;
                FilteredGroup {
                    plugin: g.plugin,
                    reason: g.reason.to_string(),
                    nodes: Vec::with_capacity(reserve),
                    count: g.count,
                }
            })
            .collect();
        // The first `named_filtered` rejected nodes by name, each under its group.
        let at: HashMap<(&str, &str), usize> = counted
            .iter()
            .enumerate()
            .map(|(i, g)| ((g.plugin, g.reason), i))
            .collect();
        // Runs of one filter's rejections are common (filters append in node order): the
        // last group is checked before hashing.
        let mut last: Option<usize> = None;
        for f in ev.filtered.iter().take(limits.named_filtered) {
            let same =
                last.filter(|&i| counted[i].plugin == f.plugin && counted[i].reason == &*f.reason);
            last = same.or_else(|| at.get(&(f.plugin, &*f.reason)).copied());
            if let Some(i) = last {
                filtered[i].nodes.push(name_of(f.index));
            }
        }
        filtered.sort_by(|a, b| {
            b.count
                .cmp(&a.count)
                .then(a.plugin.cmp(b.plugin))
                .then_with(|| a.reason.cmp(&b.reason))
        });
        // Bounded whatever the pod: a pod a client sent whole (`Score`'s `pod_json`) was
        // never validated by an API server, and the log keeps thousands of records.
        for g in &mut filtered {
            if g.reason.len() > MAX_REASON_BYTES {
                g.reason = truncate(&g.reason, MAX_REASON_BYTES);
            }
        }
        Decision {
            source,
            namespace: truncate(&pod.namespace, NAMESPACE_MAX),
            name: truncate(&pod.name, NAME_MAX),
            uid: truncate(&pod.uid, MAX_UID_BYTES),
            profile: truncate(profile, NAME_MAX),
            decided_at_ms: now_ms(),
            attempt,
            summary: truncate(&ev.summary_of(&counted), MAX_SUMMARY_BYTES),
            evaluated: ev.evaluated,
            feasible: ev.feasible(),
            ranked,
            filtered,
        }
    }

    /// `namespace/name`.
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

fn now_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
        .unwrap_or(0)
}

/// A decision with its current outcome and its position in the log.
#[derive(Debug, Clone)]
pub struct Recorded {
    /// The decision.
    pub decision: Arc<Decision>,
    /// What became of it (updated after the binding).
    pub outcome: Outcome,
    /// Increases with every record and outcome change: the web view asks for what is newer.
    pub seq: u64,
}

/// How much the log keeps; see [`DecisionLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DecisionLimits {
    /// Pods kept (per source); the least recently decided leave first.
    pub capacity: usize,
    /// Ranked nodes kept per decision, with their per-plugin scores.
    pub ranked: usize,
    /// Rejected nodes kept by name per decision (all are counted).
    pub named_filtered: usize,
}

impl Default for DecisionLimits {
    /// 2 000 pods, the best 10 nodes (kube-scheduler logs its top 10 at high verbosity), 500
    /// rejected nodes by name: a few hundred bytes to ~10 KiB per pod, ≤ ~20 MiB in all.
    fn default() -> Self {
        DecisionLimits {
            capacity: 2_000,
            ranked: 10,
            named_filtered: 500,
        }
    }
}

/// One source's records.
#[derive(Debug, Default)]
struct Shelf {
    /// By `namespace/name`.
    entries: HashMap<String, Recorded>,
    /// (seq, key) in record order; stale pairs (superseded seq) are skipped on eviction.
    order: VecDeque<(u64, String)>,
}

#[derive(Debug, Default)]
struct Inner {
    /// Per source ([`Source::index`]), each bounded on its own.
    shelves: [Shelf; Source::ALL],
    seq: u64,
}

/// The bounded decision log. Share it in an `Arc`.
#[derive(Debug, Default)]
pub struct DecisionLog {
    limits: DecisionLimits,
    inner: Mutex<Inner>,
}

impl DecisionLog {
    /// An empty log keeping `limits`.
    pub fn new(limits: DecisionLimits) -> DecisionLog {
        DecisionLog {
            limits,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// What the log keeps.
    pub fn limits(&self) -> DecisionLimits {
        self.limits
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Records a decision (replacing the pod's earlier one from the same source).
    pub fn record(&self, decision: Decision, outcome: Outcome) {
        if self.limits.capacity == 0 {
            return;
        }
        let at = decision.source.index();
        let name = decision.key();
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        let shelf = &mut inner.shelves[at];
        shelf.entries.insert(
            name.clone(),
            Recorded {
                decision: Arc::new(decision),
                outcome,
                seq,
            },
        );
        shelf.order.push_back((seq, name));
        while shelf.entries.len() > self.limits.capacity {
            let Some((s, k)) = shelf.order.pop_front() else {
                break;
            };
            if shelf.entries.get(&k).is_some_and(|r| r.seq == s) {
                shelf.entries.remove(&k);
            }
        }
        // Superseded pairs are dropped once they dominate the queue.
        if shelf.order.len() > 2 * self.limits.capacity + 64 {
            let Shelf { entries, order } = shelf;
            order.retain(|(s, k)| entries.get(k).is_some_and(|r| r.seq == *s));
        }
    }

    /// Sets the outcome of the scheduler's decision for `namespace/name` if it is still the
    /// one for `uid` (a later decision or another pod of that name is left alone).
    pub fn set_outcome(&self, namespace: &str, name: &str, uid: &str, outcome: Outcome) {
        let key = format!("{namespace}/{name}");
        let mut inner = self.lock();
        inner.seq += 1;
        let seq = inner.seq;
        let shelf = &mut inner.shelves[Source::Scheduler.index()];
        if let Some(r) = shelf.entries.get_mut(&key)
            && r.decision.uid == uid
        {
            r.outcome = outcome;
            r.seq = seq;
            shelf.order.push_back((seq, key));
        }
    }

    /// The latest decision for `namespace/name`: the scheduler's if it made one, else the
    /// latest `Score` call's.
    pub fn get(&self, namespace: &str, name: &str) -> Option<Recorded> {
        let inner = self.lock();
        let key = format!("{namespace}/{name}");
        [Source::Scheduler, Source::Score]
            .iter()
            .find_map(|s| inner.shelves[s.index()].entries.get(&key))
            .cloned()
    }

    /// Up to `limit` decisions newer than `after` (by `seq`), newest first.
    pub fn latest(&self, limit: usize, after: u64) -> Vec<Recorded> {
        let inner = self.lock();
        let mut v: Vec<&Recorded> = inner
            .shelves
            .iter()
            .flat_map(|s| s.entries.values())
            .filter(|r| r.seq > after)
            .collect();
        v.sort_by_key(|r| std::cmp::Reverse(r.seq));
        v.into_iter().take(limit).cloned().collect()
    }

    /// Pods recorded.
    pub fn len(&self) -> usize {
        self.lock().shelves.iter().map(|s| s.entries.len()).sum()
    }

    /// Whether nothing is recorded.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_framework::profile::{FilteredNode, RankedNode};
    use loadstar_testkit::snapshot::{kube_node, snapshot};

    fn snapshot_of_names(names: &[String]) -> ClusterSnapshot {
        snapshot(names.iter().map(|n| kube_node(n, 1000, 1 << 30)).collect())
    }

    fn pod(ns: &str, name: &str, uid: &str) -> PodInfo {
        PodInfo {
            uid: uid.into(),
            namespace: ns.into(),
            name: name.into(),
            ..PodInfo::default()
        }
    }

    fn evaluation(n_filtered: usize) -> Evaluation {
        Evaluation {
            ranked: vec![
                RankedNode {
                    index: 0,
                    total: 80.0,
                    plugins: vec![("A", 80, 1)],
                    stale: false,
                },
                RankedNode {
                    index: 1,
                    total: 40.0,
                    plugins: vec![("A", 40, 1)],
                    stale: true,
                },
            ],
            filtered: (0..n_filtered)
                .map(|i| FilteredNode {
                    index: 2 + i,
                    plugin: if i % 3 == 0 { "Taints" } else { "Fit" },
                    reason: if i % 3 == 0 {
                        "node(s) had taints".into()
                    } else {
                        "Insufficient cpu".into()
                    },
                })
                .collect(),
            evaluated: 2 + n_filtered,
            ..Evaluation::default()
        }
    }

    #[test]
    fn groups_rejections_counts_all_and_names_at_most_the_limit() {
        let snap = snapshot_of_names(&(0..12).map(|i| format!("n{i}")).collect::<Vec<_>>());
        let limits = DecisionLimits {
            capacity: 10,
            ranked: 1,
            named_filtered: 4,
        };
        let d = Decision::of(
            Source::Scheduler,
            &pod("ns", "p", "u"),
            "default",
            1,
            &snap,
            &evaluation(9),
            limits,
        );
        assert_eq!(d.ranked.len(), 1);
        assert_eq!(&*d.ranked[0].node, "n0");
        assert_eq!((d.evaluated, d.feasible), (11, 2));
        assert_eq!(d.filtered.len(), 2);
        assert_eq!(
            (d.filtered[0].plugin, d.filtered[0].count),
            ("Fit", 6),
            "largest group first"
        );
        assert_eq!(d.filtered[1].count, 3);
        let named: usize = d.filtered.iter().map(|g| g.nodes.len()).sum();
        assert_eq!(named, 4);
        assert_eq!(
            d.summary,
            "2/11 nodes are available: 6 Insufficient cpu, 3 node(s) had taints."
        );
    }

    #[test]
    fn score_calls_never_push_out_the_schedulers_records() {
        let snap = snapshot_of_names(&(0..4).map(|i| format!("n{i}")).collect::<Vec<_>>());
        let log = DecisionLog::new(DecisionLimits {
            capacity: 3,
            ..DecisionLimits::default()
        });
        let rec = |source: Source, name: &str| {
            Decision::of(
                source,
                &pod("ns", name, name),
                "default",
                1,
                &snap,
                &evaluation(2),
                DecisionLimits::default(),
            )
        };
        for name in ["s0", "s1", "s2"] {
            log.record(rec(Source::Scheduler, name), Outcome::Unschedulable);
        }
        // A client scoring many pods fills only the Score share.
        for i in 0..50 {
            let name = format!("flood-{i}");
            log.record(rec(Source::Score, &name), Outcome::Scored { node: None });
        }
        assert_eq!(log.len(), 6);
        for name in ["s0", "s1", "s2"] {
            let r = log.get("ns", name).expect("the scheduler's record stays");
            assert_eq!(r.decision.source, Source::Scheduler);
        }
        assert!(log.get("ns", "flood-46").is_none());
        assert!(log.get("ns", "flood-47").is_some());
        // The scheduler's own share still evicts its oldest.
        log.record(rec(Source::Scheduler, "s3"), Outcome::Unschedulable);
        assert!(log.get("ns", "s0").is_none());
        assert_eq!(log.len(), 6);
    }

    #[test]
    fn a_record_stays_small_whatever_the_pod_says() {
        let snap = snapshot_of_names(&(0..3).map(|i| format!("n{i}")).collect::<Vec<_>>());
        let huge = "x".repeat(1 << 20);
        let mut ev = evaluation(1);
        ev.filtered[0].reason = format!("spec.containers[{huge}].resources.claims").into();
        let d = Decision::of(
            Source::Score,
            &pod(&huge, &huge, &huge),
            "default",
            0,
            &snap,
            &ev,
            DecisionLimits::default(),
        );
        assert!(d.namespace.len() <= NAMESPACE_MAX && d.name.len() <= NAME_MAX);
        assert!(d.uid.len() <= MAX_UID_BYTES);
        assert!(d.filtered[0].reason.len() <= MAX_REASON_BYTES);
        assert!(d.summary.len() <= MAX_SUMMARY_BYTES);
        assert!(d.filtered[0].reason.starts_with("spec.containers[xxx"));
    }

    #[test]
    fn keeps_the_latest_per_pod_evicts_the_oldest_and_tracks_outcomes() {
        let snap = snapshot_of_names(&(0..4).map(|i| format!("n{i}")).collect::<Vec<_>>());
        let log = DecisionLog::new(DecisionLimits {
            capacity: 2,
            ..DecisionLimits::default()
        });
        let rec = |name: &str, uid: &str, attempt: u32| {
            Decision::of(
                Source::Scheduler,
                &pod("ns", name, uid),
                "default",
                attempt,
                &snap,
                &evaluation(2),
                DecisionLimits::default(),
            )
        };
        log.record(rec("a", "ua", 1), Outcome::Unschedulable);
        log.record(rec("a", "ua", 2), Outcome::Assumed { node: "n0".into() });
        log.record(rec("b", "ub", 1), Outcome::Assumed { node: "n1".into() });
        assert_eq!(log.len(), 2);
        assert_eq!(log.get("ns", "a").map(|r| r.decision.attempt), Some(2));
        // Another pod with the same name does not take a's outcome.
        log.set_outcome("ns", "a", "other", Outcome::Bound { node: "x".into() });
        log.set_outcome("ns", "a", "ua", Outcome::Bound { node: "n0".into() });
        let a = log.get("ns", "a").expect("a kept");
        assert_eq!(a.outcome, Outcome::Bound { node: "n0".into() });
        // The newest first; `after` skips what the caller has seen.
        let latest = log.latest(10, 0);
        assert_eq!(latest[0].decision.name, "a");
        assert_eq!(log.latest(10, a.seq).len(), 0);
        // A third pod evicts the least recently touched (b).
        log.record(rec("c", "uc", 1), Outcome::Unschedulable);
        assert!(log.get("ns", "b").is_none());
        assert!(log.get("ns", "a").is_some());
        // A Score call is kept apart and only answers when the scheduler has no record.
        let mut s = rec("d", "ud", 0);
        s.source = Source::Score;
        log.record(s, Outcome::Scored { node: None });
        assert_eq!(
            log.get("ns", "d").map(|r| r.decision.source),
            Some(Source::Score)
        );
    }

    #[test]
    fn superseded_entries_do_not_grow_the_queue_without_bound() {
        let snap = snapshot_of_names(&["n0".to_string(), "n1".to_string()]);
        let log = DecisionLog::new(DecisionLimits {
            capacity: 3,
            ..DecisionLimits::default()
        });
        for i in 0..10_000u32 {
            let d = Decision::of(
                Source::Scheduler,
                &pod("ns", "same", "u"),
                "default",
                i,
                &snap,
                &evaluation(0),
                DecisionLimits::default(),
            );
            log.record(d, Outcome::Unschedulable);
        }
        assert_eq!(log.len(), 1);
        assert!(log.lock().shelves[Source::Scheduler.index()].order.len() <= 2 * 3 + 64 + 1);
    }
}
