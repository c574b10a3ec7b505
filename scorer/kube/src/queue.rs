//! The scheduling queue: pending pods ordered by priority (higher first), then creation time,
//! then arrival; pods that could not be placed back off (1 s doubling to 10 s, as upstream)
//! and are retried early when the cluster changes in a way that may help them (a node added
//! or changed, a pod deleted). A pod with `spec.schedulingGates` is held apart, never popped,
//! until an update shows its gates removed (kube-scheduler's SchedulingGates pre-enqueue
//! plugin). Pure and synchronous: the caller passes the time; the async wrapper
//! [`SchedulingQueue`] adds waiting.
use std::cmp::{Ordering, Reverse};
use std::collections::{BinaryHeap, HashMap};
use std::sync::Mutex;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// First backoff after a failed attempt (upstream `podInitialBackoffSeconds`).
pub const INITIAL_BACKOFF: Duration = Duration::from_secs(1);
/// Longest backoff (upstream `podMaxBackoffSeconds`).
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// Backoff after `attempts` failed attempts: 1 s doubling, at most 10 s.
pub fn backoff(attempts: u32) -> Duration {
    let shift = attempts.saturating_sub(1).min(16);
    INITIAL_BACKOFF.saturating_mul(1 << shift).min(MAX_BACKOFF)
}

/// A pod waiting to be scheduled.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct QueuedPod {
    /// `namespace/name`.
    pub key: String,
    /// spec.priority.
    pub priority: i32,
    /// Creation time, Unix seconds.
    pub created_unix: i64,
    /// Failed attempts so far.
    pub attempts: u32,
    /// When it first entered the queue, or its last scheduling gate was removed (for the
    /// scheduling latency metric, which as upstream's does not count time spent gated).
    pub enqueued_at: Instant,
}

#[derive(Debug, PartialEq, Eq)]
struct HeapEntry {
    priority: i32,
    created_unix: i64,
    seq: u64,
    key: String,
}

impl Ord for HeapEntry {
    fn cmp(&self, o: &Self) -> Ordering {
        // BinaryHeap is a max-heap: "greater" pops first.
        self.priority
            .cmp(&o.priority)
            .then(o.created_unix.cmp(&self.created_unix))
            .then(o.seq.cmp(&self.seq))
    }
}

impl PartialOrd for HeapEntry {
    fn partial_cmp(&self, o: &Self) -> Option<Ordering> {
        Some(self.cmp(o))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// In the active heap with this sequence number.
    Active(u64),
    /// Backing off until this time (entry in the backoff heap with this sequence number).
    Backoff(Instant, u64),
    /// Handed to the scheduler; not in any queue. Holds the queue's move count when it was
    /// handed out, so a failure that predates a later cluster change is recognised as stale.
    InFlight(u64),
    /// Held by `spec.schedulingGates`: never popped until [`Queue::add`] ungates it.
    Gated,
}

#[derive(Debug)]
struct Entry {
    pod: QueuedPod,
    state: State,
    /// The last failure was retried at once because the cluster changed while it was being
    /// decided; the next failure backs off whatever happens (no hot loop under busy events).
    retried_stale: bool,
}

/// Pods in each state of the queue.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct QueueDepths {
    /// Waiting to be popped.
    pub active: usize,
    /// Waiting out a backoff after a failure.
    pub backoff: usize,
    /// Handed to the scheduler, not yet done.
    pub in_flight: usize,
    /// Held by `spec.schedulingGates`.
    pub gated: usize,
}

/// The queue's state. All methods take the current time where it matters.
#[derive(Debug, Default)]
pub struct Queue {
    heap: BinaryHeap<HeapEntry>,
    backoff: BinaryHeap<Reverse<(Instant, u64, String)>>,
    pods: HashMap<String, Entry>,
    seq: u64,
    /// How many times `retry_all` ran: kube-scheduler's "move request cycle".
    moves: u64,
}

impl Queue {
    fn push_active(&mut self, key: &str) {
        self.seq += 1;
        let seq = self.seq;
        if let Some(e) = self.pods.get_mut(key) {
            e.state = State::Active(seq);
            self.heap.push(HeapEntry {
                priority: e.pod.priority,
                created_unix: e.pod.created_unix,
                seq,
                key: key.to_string(),
            });
        }
    }

    /// How many pods are in each state.
    pub fn depths(&self) -> QueueDepths {
        let mut d = QueueDepths::default();
        for e in self.pods.values() {
            match e.state {
                State::Active(_) => d.active += 1,
                State::Backoff(..) => d.backoff += 1,
                State::InFlight(_) => d.in_flight += 1,
                State::Gated => d.gated += 1,
            }
        }
        d
    }

    /// Adds a pending pod, or updates its priority if it is already known (a pod being
    /// scheduled or backing off keeps its state; a gated one, whose gates are now gone,
    /// becomes active). Returns true when it was new or ungated.
    pub fn add(&mut self, key: &str, priority: i32, created_unix: i64, now: Instant) -> bool {
        if let Some(e) = self.pods.get_mut(key) {
            let ungated = e.state == State::Gated;
            if ungated {
                e.pod.enqueued_at = now;
            }
            if e.pod.priority != priority || ungated {
                e.pod.priority = priority;
                if matches!(e.state, State::Active(_) | State::Gated) {
                    self.push_active(key);
                }
            }
            return ungated;
        }
        self.insert(key, priority, created_unix, now);
        self.push_active(key);
        true
    }

    /// Holds a pending pod that has scheduling gates: known (its depth counts) but never
    /// popped until [`Queue::add`] sees it again without them. A pod already known is held
    /// too, whatever its state (a stale in-flight attempt's requeue leaves it gated).
    pub fn gate(&mut self, key: &str, priority: i32, created_unix: i64, now: Instant) {
        match self.pods.get_mut(key) {
            Some(e) => {
                e.pod.priority = priority;
                e.state = State::Gated;
            }
            None => self.insert(key, priority, created_unix, now),
        }
    }

    fn insert(&mut self, key: &str, priority: i32, created_unix: i64, now: Instant) {
        self.pods.insert(
            key.to_string(),
            Entry {
                pod: QueuedPod {
                    key: key.to_string(),
                    priority,
                    created_unix,
                    attempts: 0,
                    enqueued_at: now,
                },
                state: State::Gated,
                retried_stale: false,
            },
        );
    }

    /// Forgets a pod (deleted, bound elsewhere, no longer ours).
    pub fn remove(&mut self, key: &str) -> bool {
        // Its heap entry, if any, is skipped when popped.
        self.pods.remove(key).is_some()
    }

    /// Whether the queue knows the pod (in any state).
    pub fn contains(&self, key: &str) -> bool {
        self.pods.contains_key(key)
    }

    /// Number of pods known.
    pub fn len(&self) -> usize {
        self.pods.len()
    }

    /// True when empty.
    pub fn is_empty(&self) -> bool {
        self.pods.is_empty()
    }

    /// Moves pods whose backoff expired to the active heap.
    fn promote(&mut self, now: Instant) -> Option<Instant> {
        while let Some(Reverse((at, seq, key))) = self.backoff.peek() {
            let current = self
                .pods
                .get(key)
                .is_some_and(|e| e.state == State::Backoff(*at, *seq));
            if current && *at > now {
                return Some(*at);
            }
            let Some(Reverse((_, _, key))) = self.backoff.pop() else {
                break;
            };
            if current {
                self.push_active(&key);
            }
        }
        None
    }

    /// The next pod to schedule, marking it in flight; `Err(Some(t))` when none is ready
    /// before `t`, `Err(None)` when nothing waits at all.
    pub fn pop(&mut self, now: Instant) -> Result<QueuedPod, Option<Instant>> {
        let next_backoff = self.promote(now);
        while let Some(top) = self.heap.pop() {
            if let Some(e) = self.pods.get_mut(&top.key)
                && e.state == State::Active(top.seq)
            {
                e.state = State::InFlight(self.moves);
                return Ok(e.pod.clone());
            }
        }
        Err(next_backoff)
    }

    /// The priority of the best pod waiting in the active heap, if any (stale heap entries
    /// met on the way are dropped, as `pop` would).
    pub fn best_active_priority(&mut self) -> Option<i32> {
        while let Some(top) = self.heap.peek() {
            if self
                .pods
                .get(&top.key)
                .is_some_and(|e| e.state == State::Active(top.seq))
            {
                return Some(top.priority);
            }
            self.heap.pop();
        }
        None
    }

    /// The pod could not be placed: back off. When the cluster changed while the pod was
    /// being decided (a node appeared or became ready, a pod was deleted), the failure may be
    /// stale. kube-scheduler's move-request cycle sends such a pod to its backoff queue, so a
    /// lower-priority pod the change made active can take the room first; Loadstar
    /// deliberately differs: the pod goes straight back to the active heap (ahead of lower
    /// priorities), once per failure streak, so a busy cluster cannot make it spin.
    pub fn requeue_backoff(&mut self, key: &str, now: Instant) {
        let moves = self.moves;
        if let Some(e) = self.pods.get_mut(key).filter(|e| e.state != State::Gated) {
            e.pod.attempts = e.pod.attempts.saturating_add(1);
            let stale = matches!(e.state, State::InFlight(at) if at < moves);
            if stale && !e.retried_stale {
                e.retried_stale = true;
                self.push_active(key);
                return;
            }
            e.retried_stale = false;
            self.seq += 1;
            let at = now + backoff(e.pod.attempts);
            e.state = State::Backoff(at, self.seq);
            self.backoff.push(Reverse((at, self.seq, key.to_string())));
        }
    }

    /// A pod handed out is put back without penalty (e.g. leadership was lost).
    pub fn requeue_now(&mut self, key: &str) {
        if self
            .pods
            .get(key)
            .is_some_and(|e| matches!(e.state, State::InFlight(_)))
        {
            self.push_active(key);
        }
    }

    /// The pod is done (bound): forget it.
    pub fn done(&mut self, key: &str) {
        self.pods.remove(key);
    }

    /// Something changed that may make waiting pods schedulable: retry them now.
    pub fn retry_all(&mut self) -> usize {
        self.moves += 1;
        let waiting: Vec<String> = self
            .pods
            .iter()
            .filter(|(_, e)| matches!(e.state, State::Backoff(..)))
            .map(|(k, _)| k.clone())
            .collect();
        for k in &waiting {
            self.push_active(k);
        }
        waiting.len()
    }
}

/// The queue shared by the cache (producer) and the scheduler loop (consumer).
#[derive(Debug, Default)]
pub struct SchedulingQueue {
    inner: Mutex<Queue>,
    notify: Notify,
}

impl SchedulingQueue {
    /// An empty queue.
    pub fn new() -> SchedulingQueue {
        SchedulingQueue::default()
    }

    /// Runs `f` on the queue state; wakes the consumer afterwards.
    pub fn with<T>(&self, f: impl FnOnce(&mut Queue) -> T) -> T {
        let out = f(&mut self.inner.lock().unwrap_or_else(|p| p.into_inner()));
        self.notify.notify_one();
        out
    }

    /// Waits for the next pod to schedule.
    pub async fn pop(&self) -> QueuedPod {
        loop {
            let notified = self.notify.notified();
            let next = self
                .inner
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .pop(Instant::now());
            match next {
                Ok(p) => return p,
                Err(Some(at)) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(at) => {}
                    }
                }
                Err(None) => notified.await,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_to_ten_seconds() {
        let secs: Vec<u64> = (1..=6).map(|a| backoff(a).as_secs()).collect();
        assert_eq!(secs, vec![1, 2, 4, 8, 10, 10]);
        assert_eq!(backoff(u32::MAX), MAX_BACKOFF);
    }

    #[test]
    fn pops_by_priority_then_creation_then_arrival() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add("ns/low-old", 0, 100, now);
        q.add("ns/high-new", 10, 300, now);
        q.add("ns/high-old", 10, 200, now);
        q.add("ns/low-new-a", 0, 400, now);
        q.add("ns/low-new-b", 0, 400, now);
        let order: Vec<String> = std::iter::from_fn(|| q.pop(now).ok().map(|p| p.key)).collect();
        assert_eq!(
            order,
            vec![
                "ns/high-old",
                "ns/high-new",
                "ns/low-old",
                "ns/low-new-a",
                "ns/low-new-b"
            ]
        );
        assert_eq!(q.pop(now), Err(None));
    }

    #[test]
    fn gated_pods_wait_apart_until_their_gates_are_removed() {
        let now = Instant::now();
        let later = now + Duration::from_secs(30);
        let mut q = Queue::default();
        q.gate("ns/gated", 100, 1, now);
        q.add("ns/open", 0, 2, now);
        let d = q.depths();
        assert_eq!((d.active, d.gated), (1, 1));
        // Neither priority nor a cluster change lets a gated pod out.
        assert_eq!(q.retry_all(), 0);
        assert_eq!(q.pop(now).expect("the open pod").key, "ns/open");
        assert_eq!(q.pop(now), Err(None));
        // A watch update that still has gates keeps it held.
        q.gate("ns/gated", 100, 1, now);
        assert_eq!(q.pop(now), Err(None));
        // The update without gates: it is queued, its latency counted from now.
        assert!(q.add("ns/gated", 100, 1, later));
        let p = q.pop(later).expect("ungated");
        assert_eq!((p.key.as_str(), p.enqueued_at), ("ns/gated", later));
        assert_eq!(q.depths().gated, 0);
        // Seen again while in flight, it is not queued twice.
        assert!(!q.add("ns/gated", 100, 1, later));
        assert_eq!(q.pop(later), Err(None));
    }

    #[test]
    fn a_stale_attempt_does_not_release_a_pod_gated_meanwhile() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add("ns/p", 0, 1, now);
        q.pop(now).expect("in flight");
        // The pod was replaced by a gated one while its attempt ran.
        q.gate("ns/p", 0, 1, now);
        q.requeue_backoff("ns/p", now);
        q.requeue_now("ns/p");
        assert_eq!(q.retry_all(), 0);
        assert_eq!(q.pop(now + MAX_BACKOFF), Err(None));
        assert_eq!(q.depths().gated, 1);
        assert!(q.remove("ns/p"));
        assert!(q.is_empty());
    }

    #[test]
    fn failed_pods_back_off_and_retry_early_on_events() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add("ns/p", 0, 1, now);
        let p = q.pop(now).expect("ready");
        assert_eq!(p.attempts, 0);
        // Re-adding a pod in flight (a watch update) does not queue it twice.
        assert!(!q.add("ns/p", 0, 1, now));
        assert_eq!(q.pop(now), Err(None));
        q.requeue_backoff("ns/p", now);
        assert_eq!(q.pop(now), Err(Some(now + Duration::from_secs(1))));
        let p = q.pop(now + Duration::from_secs(1)).expect("after backoff");
        assert_eq!(p.attempts, 1);
        q.requeue_backoff("ns/p", now);
        assert_eq!(q.pop(now), Err(Some(now + Duration::from_secs(2))));
        assert_eq!(q.retry_all(), 1);
        assert_eq!(q.pop(now).expect("early retry").attempts, 2);
        q.done("ns/p");
        assert!(q.is_empty());
    }

    #[test]
    fn a_failure_older_than_a_cluster_change_retries_at_once_but_only_once() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add("ns/high", 10, 2, now);
        q.add("ns/low", 0, 1, now);
        // `high` is being decided when a node appears; `low` was already waiting.
        let high = q.pop(now).expect("ready");
        assert_eq!(high.key, "ns/high");
        q.retry_all();
        // Its failure was decided on the old cluster: it goes back ahead of `low`, no backoff.
        q.requeue_backoff("ns/high", now);
        let again = q.pop(now).expect("retried at once");
        assert_eq!((again.key.as_str(), again.attempts), ("ns/high", 1));
        // A second stale failure in a row backs off: busy events never make a pod spin.
        q.retry_all();
        q.requeue_backoff("ns/high", now);
        assert_eq!(q.pop(now).expect("low is next").key, "ns/low");
        assert_eq!(q.pop(now), Err(Some(now + Duration::from_secs(2))));
        // Without a change during the attempt, a failure backs off as before.
        q.requeue_backoff("ns/low", now);
        assert_eq!(q.pop(now), Err(Some(now + Duration::from_secs(1))));
    }

    #[test]
    fn removed_pods_are_skipped_and_priority_updates_apply() {
        let now = Instant::now();
        let mut q = Queue::default();
        q.add("ns/a", 0, 1, now);
        q.add("ns/b", 0, 2, now);
        assert!(q.remove("ns/a"));
        q.add("ns/c", 0, 3, now);
        q.add("ns/c", 5, 3, now);
        assert_eq!(q.pop(now).expect("c").key, "ns/c");
        assert_eq!(q.pop(now).expect("b").key, "ns/b");
        assert_eq!(q.pop(now), Err(None));
    }

    #[tokio::test(start_paused = true)]
    async fn async_pop_waits_for_backoff_and_adds() {
        let q = std::sync::Arc::new(SchedulingQueue::new());
        q.with(|s| s.add("ns/a", 0, 1, Instant::now()));
        let a = q.pop().await;
        q.with(|s| s.requeue_backoff(&a.key, Instant::now()));
        let start = Instant::now();
        let again = q.pop().await;
        assert_eq!(again.key, "ns/a");
        assert!(start.elapsed() >= Duration::from_secs(1));
        let q2 = q.clone();
        let waiter = tokio::spawn(async move { q2.pop().await.key });
        tokio::task::yield_now().await;
        q.with(|s| s.add("ns/b", 0, 2, Instant::now()));
        assert_eq!(waiter.await.expect("join"), "ns/b");
    }

    #[test]
    fn best_active_priority_skips_stale_entries() {
        let now = Instant::now();
        let mut q = Queue::default();
        assert_eq!(q.best_active_priority(), None);
        q.add("low", 0, 1, now);
        q.add("high", 100, 2, now);
        assert_eq!(q.best_active_priority(), Some(100));
        let high = q.pop(now).expect("high first");
        assert_eq!(high.key, "high");
        assert_eq!(q.best_active_priority(), Some(0));
        q.remove("low");
        assert_eq!(q.best_active_priority(), None);
    }
}
