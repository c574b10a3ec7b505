//! `WatchNodes` fan-out with bounded memory. One hub task turns each store change into one
//! shared event (`Arc`, sized once) and queues a reference to it for every interested
//! watcher. The task is subscribed from the first watcher until the first change after the
//! last one leaves, so with nobody watching a change (an agent report, a scheduling
//! assumption) wakes nothing. Each watcher's queue is bounded in bytes, and a watcher whose
//! client does not keep up past that bound is cut off at once: its queue is dropped, its
//! slot under the watcher cap is released (a client that never reads cannot hold slots),
//! and its stream ends with `RESOURCE_EXHAUSTED` (re-watch to resync) whenever the client
//! next reads it. Nothing is ever buffered per watcher without a limit, whether or not the
//! client reads.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use futures::Stream;
use loadstar_auth::logonce::LogOnce;
use loadstar_proto::pb;
use loadstar_store::metrics::{Metrics, ReasonLabel};
use loadstar_store::{ChangeKind, NodeStore};
use prost::Message;
use tokio::sync::Notify;
use tokio::sync::broadcast::error::RecvError;
use tonic::Status;
use tracing::{debug, warn};

/// Watcher limits; see [`WatchLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WatchLimits {
    /// Most concurrent watchers; more are refused with `RESOURCE_EXHAUSTED`.
    pub max_watchers: usize,
    /// Most concurrent watchers of one caller (an authenticated user, or without
    /// authentication one client address): a watcher that matches no node never lags and
    /// is never cut off, so without this one client could hold every slot for good.
    pub max_watchers_per_caller: usize,
    /// Most bytes of events queued for one watcher (counted at their encoded size, though
    /// shared); past it the watcher is dropped.
    pub max_queued_bytes: usize,
}

impl Default for WatchLimits {
    /// 256 watchers (operators' tools and other schedulers, not one per node), 32 of them
    /// per caller, 4 MiB queued each (about a thousand node updates: ~1 s of a 1 000-node
    /// cluster's changes).
    fn default() -> Self {
        WatchLimits {
            max_watchers: 256,
            max_watchers_per_caller: 32,
            max_queued_bytes: 4 << 20,
        }
    }
}

/// One change, built once and shared by every watcher's queue.
#[derive(Debug)]
struct SharedEvent {
    node: Arc<str>,
    event: pb::NodeEvent,
    bytes: usize,
}

/// One watcher's state: everything it holds, freed at once when it is cut off.
#[derive(Debug, Default)]
struct Queue {
    /// Nodes wanted (empty: all).
    filter: HashSet<String>,
    /// Names of the nodes still to send as `ADDED` (the initial snapshot, read lazily).
    initial: VecDeque<Arc<str>>,
    events: VecDeque<Arc<SharedEvent>>,
    bytes: usize,
    /// Cut off (lagging) or unregistered: takes no more events.
    overflowed: bool,
}

impl Queue {
    fn wants(&self, node: &str) -> bool {
        !self.overflowed && (self.filter.is_empty() || self.filter.contains(node))
    }
}

#[derive(Debug)]
struct Watcher {
    queue: Mutex<Queue>,
    wake: Notify,
    /// Who opened it (see [`WatchLimits::max_watchers_per_caller`]).
    caller: Arc<str>,
}

impl Watcher {
    fn wants(&self, node: &str) -> bool {
        self.lock().wants(node)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counters the tests and `/metrics` read: the server's own accounting of watcher memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchStats {
    /// Watchers holding a slot under the cap now (a watcher cut off for lagging holds none,
    /// even while its client keeps the stream open).
    pub watchers: usize,
    /// Bytes queued over all watchers now (shared events counted once per queue).
    pub queued_bytes: usize,
    /// The largest single watcher queue now, bytes.
    pub max_queued_bytes: usize,
    /// Watchers dropped for lagging since start.
    pub dropped_lagging: u64,
    /// Watches refused for the watcher cap since start.
    pub refused: u64,
    /// Whether the hub is subscribed to the store's changes now (only while someone
    /// watches, and until the first change after the last one leaves).
    pub reading: bool,
}

/// The registered watchers, and the task that reads the store's changes for them.
#[derive(Debug, Default)]
struct Watchers {
    by_id: HashMap<u64, Arc<Watcher>>,
    /// The task subscribed to the store's changes. The first watcher starts it; it clears
    /// this and ends when a change finds no watcher, both under the hub's lock, so a
    /// watcher registering meanwhile either finds it still reading or starts another. A
    /// task that ended otherwise (a panic) is finished, and the next watcher replaces it.
    reader: Option<tokio::task::JoinHandle<()>>,
}

impl Watchers {
    fn reading(&self) -> bool {
        self.reader.as_ref().is_some_and(|t| !t.is_finished())
    }
}

/// The hub: fans store changes out to watchers.
#[derive(Debug)]
pub struct WatchHub {
    store: Arc<NodeStore>,
    metrics: Arc<Metrics>,
    limits: WatchLimits,
    watchers: Mutex<Watchers>,
    /// Where the task that reads the store's changes runs, started with the first watcher.
    runtime: tokio::runtime::Handle,
    next_id: AtomicU64,
    dropped_lagging: AtomicU64,
    refused: AtomicU64,
    /// Refusals are logged once per caller and reason in a window (the metric counts every
    /// one): a client retrying in a loop would otherwise write a line per call.
    logged: LogOnce<(Arc<str>, &'static str)>,
}

impl WatchHub {
    /// A hub over `store`. Call within a tokio runtime: the task that reads the store's
    /// changes, while anyone watches, runs on it.
    pub fn start(store: Arc<NodeStore>, metrics: Arc<Metrics>, limits: WatchLimits) -> Arc<Self> {
        Arc::new(WatchHub {
            store,
            metrics,
            limits,
            watchers: Mutex::new(Watchers::default()),
            logged: LogOnce::default(),
            runtime: tokio::runtime::Handle::current(),
            next_id: AtomicU64::new(1),
            dropped_lagging: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        })
    }

    /// How many nodes the sweep after the hub fell behind the store publishes between
    /// yields to the runtime (about a millisecond's work).
    const SWEEP_SLICE: usize = 64;

    /// Starts the task that reads the store's changes, unless one is reading; `watchers`
    /// is the hub's locked state. Called when a watcher registers, before it reads its
    /// snapshot: the subscription comes first, so no change between the two is missed.
    fn start_reading(self: &Arc<Self>, watchers: &mut Watchers) {
        if watchers.reading() {
            return;
        }
        let mut changes = self.store.subscribe();
        let weak = Arc::downgrade(self);
        watchers.reader = Some(self.runtime.spawn(async move {
            loop {
                let change = changes.recv().await;
                let Some(hub) = weak.upgrade() else { return };
                // The watchers now; with none left, unsubscribe.
                let watchers: Vec<(u64, Arc<Watcher>)> = {
                    let mut watchers = hub.lock();
                    if watchers.by_id.is_empty() {
                        watchers.reader = None;
                        return;
                    }
                    watchers
                        .by_id
                        .iter()
                        .map(|(id, w)| (*id, w.clone()))
                        .collect()
                };
                match change {
                    Ok(change) => hub.publish(&watchers, change.kind, &change.node),
                    // The hub itself fell behind the store: every node may have changed.
                    // A slice at a time: over 20 000 nodes the sweep takes hundreds of
                    // milliseconds, which on the gRPC runtime's one thread (the default)
                    // would hold every report and call behind it.
                    Err(RecvError::Lagged(_)) => {
                        for (i, name) in hub.store.node_names().iter().enumerate() {
                            if i > 0 && i % Self::SWEEP_SLICE == 0 {
                                tokio::task::yield_now().await;
                            }
                            hub.publish(&watchers, ChangeKind::Updated, name);
                        }
                    }
                    // Not while the hub lives: it holds the store, the sender's owner.
                    Err(RecvError::Closed) => return,
                }
            }
        }));
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Watchers> {
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The accounting now.
    pub fn stats(&self) -> WatchStats {
        let watchers = self.lock();
        let mut stats = WatchStats {
            watchers: watchers.by_id.len(),
            dropped_lagging: self.dropped_lagging.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            reading: watchers.reading(),
            ..WatchStats::default()
        };
        for w in watchers.by_id.values() {
            let q = w.lock().bytes;
            stats.queued_bytes += q;
            stats.max_queued_bytes = stats.max_queued_bytes.max(q);
        }
        stats
    }

    /// Queues the change of `node` for each of `watchers` that wants it (one cut off
    /// meanwhile wants nothing).
    fn publish(&self, watchers: &[(u64, Arc<Watcher>)], kind: ChangeKind, node: &Arc<str>) {
        if !watchers.iter().any(|(_, w)| w.wants(node)) {
            return;
        }
        let kind = match kind {
            ChangeKind::Added => pb::node_event::Kind::Added,
            ChangeKind::Updated => pb::node_event::Kind::Updated,
            ChangeKind::Stale => pb::node_event::Kind::Stale,
            ChangeKind::Removed => pb::node_event::Kind::Removed,
        };
        let status = self.store.node_status(node).unwrap_or(pb::NodeStatus {
            node_name: node.to_string(),
            ..Default::default()
        });
        let event = pb::NodeEvent {
            kind: kind as i32,
            node: Some(status),
        };
        let shared = Arc::new(SharedEvent {
            node: node.clone(),
            bytes: event.encoded_len(),
            event,
        });
        for (id, w) in watchers {
            let mut q = w.lock();
            if !q.wants(&shared.node) {
                continue;
            }
            // An empty queue always takes the next event, however large: only a backlog
            // counts as lagging.
            let lagging =
                !q.events.is_empty() && q.bytes + shared.bytes > self.limits.max_queued_bytes;
            if !lagging {
                q.bytes += shared.bytes;
                self.metrics.watch_queued_bytes.inc_by(shared.bytes as i64);
                q.events.push_back(shared.clone());
                drop(q);
                w.wake.notify_one();
                continue;
            }
            drop(q);
            // Cut it off now (the client may never read again): its queue and its slot are
            // released here, once; its stream tells the client when next read.
            if self.release(*id) {
                self.dropped_lagging.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .watchers_dropped
                    .get_or_create(&ReasonLabel {
                        reason: "lagging".into(),
                    })
                    .inc();
                debug!(watcher = id, "watcher cut off: lagging");
            }
            w.wake.notify_one();
        }
    }

    /// A new watcher for `nodes` (empty: all) opened by `caller`, or `RESOURCE_EXHAUSTED` at
    /// the cap or the caller's share of it. The stream starts with every wanted node
    /// (`ADDED`), read lazily one node at a time, then carries changes.
    pub fn watch(
        self: &Arc<Self>,
        nodes: Vec<String>,
        caller: &str,
    ) -> Result<impl Stream<Item = Result<pb::NodeEvent, Status>> + Send + 'static + use<>, Status>
    {
        let caller: Arc<str> = Arc::from(caller);
        let watcher = Arc::new(Watcher {
            queue: Mutex::new(Queue {
                filter: nodes.into_iter().collect(),
                ..Queue::default()
            }),
            wake: Notify::new(),
            caller: caller.clone(),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut watchers = self.lock();
            // Counted over the registered watchers (at most `max_watchers`), not kept apart.
            let held = watchers
                .by_id
                .values()
                .filter(|w| w.caller == caller)
                .count();
            let refusal = if watchers.by_id.len() >= self.limits.max_watchers {
                Some((
                    "limit",
                    format!(
                        "this scorer already serves {} watchers, its limit; retry later",
                        self.limits.max_watchers
                    ),
                ))
            } else if held >= self.limits.max_watchers_per_caller {
                Some((
                    "caller_limit",
                    format!(
                        "this caller already holds {held} watchers, the limit per caller; \
                         close one first"
                    ),
                ))
            } else {
                None
            };
            if let Some((reason, message)) = refusal {
                drop(watchers);
                self.refused.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .watchers_dropped
                    .get_or_create(&ReasonLabel {
                        reason: reason.into(),
                    })
                    .inc();
                if self.logged.first((caller.clone(), reason), Instant::now()) {
                    warn!(
                        max = self.limits.max_watchers,
                        per_caller = self.limits.max_watchers_per_caller,
                        reason,
                        caller = &*caller,
                        "WatchNodes refused (logged once per caller and reason in 10 min; \
                         loadstar_scorer_watchers_dropped_total counts each)"
                    );
                }
                return Err(Status::resource_exhausted(message));
            }
            watchers.by_id.insert(id, watcher.clone());
            self.metrics.watchers.set(watchers.by_id.len() as i64);
            self.start_reading(&mut watchers);
        }
        // Registered before the snapshot is read, so no change between the two is missed.
        let names = self.store.node_names();
        {
            let mut q = watcher.lock();
            if !q.overflowed {
                let initial: VecDeque<Arc<str>> =
                    names.into_iter().filter(|n| q.wants(n)).collect();
                q.initial = initial;
            }
        }
        let state = WatchState {
            hub: self.clone(),
            id,
            watcher,
            done: false,
        };
        Ok(futures::stream::unfold(state, |mut s| async move {
            let item = s.next().await?;
            Some((item, s))
        }))
    }

    /// Unregisters watcher `id`, if still registered: frees its slot under the cap and its
    /// queued bytes, and closes its queue for good (a publish racing with this skips it, and
    /// its stream, if still read, ends with `RESOURCE_EXHAUSTED`). Whether this call did it:
    /// the overflow and the stream's drop both call this, and only the first one counts.
    fn release(&self, id: u64) -> bool {
        let mut watchers = self.lock();
        let Some(w) = watchers.by_id.remove(&id) else {
            return false;
        };
        self.metrics.watchers.set(watchers.by_id.len() as i64);
        let mut q = w.lock();
        self.metrics.watch_queued_bytes.dec_by(q.bytes as i64);
        // Freed now, not when the client lets go of the stream.
        *q = Queue {
            overflowed: true,
            ..Queue::default()
        };
        true
    }
}

/// One watcher's stream state; dropping it (the client went away) unregisters the watcher
/// if an overflow has not already.
struct WatchState {
    hub: Arc<WatchHub>,
    id: u64,
    watcher: Arc<Watcher>,
    done: bool,
}

impl WatchState {
    async fn next(&mut self) -> Option<Result<pb::NodeEvent, Status>> {
        if self.done {
            return None;
        }
        loop {
            {
                let mut q = self.watcher.lock();
                if q.overflowed {
                    drop(q);
                    return Some(Err(self.cut_off()));
                }
                // The initial nodes first (a watcher cut off meanwhile sends no more).
                if let Some(name) = q.initial.pop_front() {
                    drop(q);
                    if let Some(node) = self.hub.store.node_status(&name) {
                        return Some(Ok(pb::NodeEvent {
                            kind: pb::node_event::Kind::Added as i32,
                            node: Some(node),
                        }));
                    }
                    continue;
                }
                if let Some(ev) = q.events.pop_front() {
                    q.bytes -= ev.bytes;
                    self.hub.metrics.watch_queued_bytes.dec_by(ev.bytes as i64);
                    // The one per-watcher copy, made as tonic encodes it.
                    return Some(Ok(ev.event.clone()));
                }
            }
            self.watcher.wake.notified().await;
        }
    }

    /// The stream's last item once the watcher was cut off for lagging.
    fn cut_off(&mut self) -> Status {
        self.done = true;
        debug!(watcher = self.id, "lagging watcher told RESOURCE_EXHAUSTED");
        Status::resource_exhausted(format!(
            "this watcher fell more than {} bytes behind the node changes and was dropped; \
             watch again to resync",
            self.hub.limits.max_queued_bytes
        ))
    }
}

impl Drop for WatchState {
    fn drop(&mut self) {
        self.hub.release(self.id);
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use futures::StreamExt;
    use loadstar_store::StoreConfig;
    use loadstar_testkit::agent::{self as simagent, SyntheticLoad};

    use super::*;

    fn report(node: &str) -> pb::NodeReport {
        simagent::report(
            node,
            "i",
            1,
            &simagent::capacity(8, 32),
            SyntheticLoad::default(),
        )
    }

    /// Waits (bounded) until the hub's accounting shows `cond`.
    async fn until(hub: &WatchHub, what: &str, cond: impl Fn(&WatchStats) -> bool) -> WatchStats {
        for _ in 0..1_000 {
            let s = hub.stats();
            if cond(&s) {
                return s;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        panic!("{what}: last seen {:?}", hub.stats());
    }

    #[tokio::test]
    async fn one_caller_cannot_hold_every_slot() {
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        let metrics = Metrics::new();
        let limits = WatchLimits {
            max_watchers: 4,
            max_watchers_per_caller: 2,
            ..WatchLimits::default()
        };
        let hub = WatchHub::start(store, metrics.clone(), limits);
        // Watchers that match nothing never lag, so nothing would ever cut them off.
        let idle = |who: &str| hub.watch(vec!["matches-nothing".into()], who);
        let a1 = idle("user a").expect("a's first");
        let _a2 = idle("user a").expect("a's second");
        let status = idle("user a").map(|_| ()).expect_err("a's share is full");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted);
        assert!(status.message().contains("limit per caller"), "{status:?}");
        // A caller retrying in a loop is refused every time but logged once.
        for _ in 0..100 {
            assert!(idle("user a").is_err());
        }
        let now = Instant::now();
        assert!(!hub.logged.first((Arc::from("user a"), "caller_limit"), now));
        assert!(hub.logged.first((Arc::from("user c"), "caller_limit"), now));
        let _b = idle("user b").expect("others still get slots");
        assert_eq!(hub.stats().watchers, 3);
        // Closing one gives the caller its slot back.
        drop(a1);
        let _a3 = idle("user a").expect("a's slot is back");
        let text = metrics.encode();
        assert!(
            text.contains("loadstar_scorer_watchers_dropped_total{reason=\"caller_limit\"} 101"),
            "{text}"
        );
    }

    #[tokio::test]
    async fn an_overflowing_watcher_frees_its_slot_once_while_its_stream_is_held() {
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        let metrics = Metrics::new();
        let limits = WatchLimits {
            max_watchers: 2,
            max_queued_bytes: 8 * 1024,
            ..WatchLimits::default()
        };
        let hub = WatchHub::start(store.clone(), metrics.clone(), limits);
        // Two watchers fill the cap; neither stream is ever polled here.
        let lagging = hub.watch(Vec::new(), "t").expect("first watcher");
        let quiet = hub
            .watch(vec!["never-reports".into()], "t")
            .expect("second");
        assert!(hub.watch(Vec::new(), "t").is_err(), "the cap is full");
        // Far more than 8 KiB of changes the first one wants.
        for n in 0..100 {
            store
                .apply_report(report(&format!("node-{n:03}")), Instant::now())
                .expect("stored");
        }
        let stats = until(&hub, "the lagging watcher cut off", |s| {
            s.dropped_lagging == 1
        })
        .await;
        // Its slot and its bytes are back although its stream is still held, unread.
        assert_eq!(stats.watchers, 1, "{stats:?}");
        assert_eq!(stats.queued_bytes, 0, "{stats:?}");
        assert_eq!(metrics.watchers.get(), 1);
        assert_eq!(metrics.watch_queued_bytes.get(), 0);
        let third = hub
            .watch(vec!["x".into()], "t")
            .expect("the freed slot is usable");
        assert!(hub.watch(Vec::new(), "t").is_err(), "the cap is full again");
        // Read at last, the stream says why it ended, then ends.
        let mut lagging = Box::pin(lagging);
        let status = lagging
            .next()
            .await
            .expect("an item")
            .expect_err("a status, not the backlog");
        assert_eq!(status.code(), tonic::Code::ResourceExhausted, "{status:?}");
        assert!(lagging.next().await.is_none());
        // Dropping it releases nothing a second time.
        drop(lagging);
        let stats = hub.stats();
        assert_eq!((stats.watchers, stats.dropped_lagging), (2, 1), "{stats:?}");
        assert_eq!(metrics.watchers.get(), 2);
        assert_eq!(metrics.watch_queued_bytes.get(), 0);
        drop(quiet);
        drop(third);
        assert_eq!(hub.stats().watchers, 0);
        assert_eq!(metrics.watchers.get(), 0);
        assert_eq!(metrics.watch_queued_bytes.get(), 0);
    }

    #[tokio::test]
    async fn the_sweep_after_the_hub_fell_behind_yields_to_other_tasks() {
        const NODES: usize = 3_000;
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        for n in 0..NODES {
            store
                .apply_report(report(&format!("node-{n:04}")), Instant::now())
                .expect("stored");
        }
        let limits = WatchLimits {
            max_queued_bytes: 1 << 30,
            ..WatchLimits::default()
        };
        let hub = WatchHub::start(store.clone(), Metrics::new(), limits);
        let _watcher = hub.watch(Vec::new(), "t").expect("a watcher of every node");
        // More changes than the store's channel holds, before the hub's reader runs (this
        // runtime has one thread and the test has not yielded): its first read is `Lagged`.
        let changes = loadstar_store::CHANGES_BUFFERED + 1_000;
        for c in 0..changes {
            let r = simagent::report(
                &format!("node-{:04}", c % NODES),
                "i",
                2 + (c / NODES) as u64,
                &simagent::capacity(8, 32),
                SyntheticLoad::default(),
            );
            store.apply_report(r, Instant::now()).expect("stored");
        }
        let queued = {
            let hub = hub.clone();
            move || -> usize {
                hub.lock()
                    .by_id
                    .values()
                    .map(|w| w.lock().events.len())
                    .sum()
            }
        };
        assert_eq!(queued(), 0, "the reader has not run yet");
        // Another task on the same thread, watching the watcher's queue grow: it runs only
        // when the reader yields.
        let seen = tokio::spawn(async move {
            let mut seen = Vec::new();
            for _ in 0..100_000 {
                let n = queued();
                if seen.last() != Some(&n) {
                    seen.push(n);
                }
                // The sweep (every node) and the changes the store's channel kept.
                if n >= NODES + loadstar_store::CHANGES_BUFFERED {
                    break;
                }
                tokio::task::yield_now().await;
            }
            seen
        })
        .await
        .expect("observer");
        assert!(
            seen.last()
                .is_some_and(|&n| n >= NODES + loadstar_store::CHANGES_BUFFERED),
            "the reader caught up: {seen:?}"
        );
        let during_sweep = seen.iter().filter(|&&n| n > 0 && n < NODES).count();
        assert!(
            during_sweep >= NODES / WatchHub::SWEEP_SLICE / 2,
            "other tasks ran {during_sweep} times during the sweep: {seen:?}"
        );
    }

    /// The next event of `stream`, bounded in time.
    async fn next_event(
        stream: &mut (impl Stream<Item = Result<pb::NodeEvent, Status>> + Unpin),
    ) -> pb::NodeEvent {
        tokio::time::timeout(Duration::from_secs(5), stream.next())
            .await
            .expect("an event within 5 s")
            .expect("the stream goes on")
            .expect("an event, not a status")
    }

    #[tokio::test]
    async fn the_hub_reads_the_stores_changes_only_while_someone_watches() {
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        let hub = WatchHub::start(store.clone(), Metrics::new(), WatchLimits::default());
        store
            .apply_report(report("a"), Instant::now())
            .expect("stored");
        assert!(!hub.stats().reading, "no watcher: nothing subscribed");
        assert_eq!(store.subscribers(), 0);
        for round in 0..2 {
            // Two watchers at once share one subscription.
            let mut first = Box::pin(hub.watch(Vec::new(), "t").expect("a watcher"));
            let mut second = Box::pin(hub.watch(Vec::new(), "t").expect("another"));
            assert!(
                hub.stats().reading,
                "round {round}: reading for the watchers"
            );
            assert_eq!(store.subscribers(), 1, "round {round}");
            // Every node so far first: "a", then two per earlier round.
            for stream in [&mut first, &mut second] {
                for _ in 0..1 + 2 * round {
                    let added = next_event(stream).await;
                    assert_eq!(added.kind, pb::node_event::Kind::Added as i32);
                }
            }
            // A change after the watch started reaches each watcher once, in both rounds:
            // the second subscribes anew after the first round's task ended.
            let node = format!("new-{round}");
            store
                .apply_report(report(&node), Instant::now())
                .expect("stored");
            for stream in [&mut first, &mut second] {
                let ev = next_event(stream).await;
                assert_eq!(ev.node.expect("a node").node_name, node, "round {round}");
            }
            let more = tokio::time::timeout(Duration::from_millis(100), first.next()).await;
            assert!(
                more.is_err(),
                "round {round}: one change, one event: {more:?}"
            );
            drop((first, second));
            // The next change finds no watcher: the task unsubscribes.
            store
                .apply_report(report(&format!("unwatched-{round}")), Instant::now())
                .expect("stored");
            // (The flag clears under the lock; the subscription goes as the task ends.)
            until(&hub, "the hub unsubscribes", |s| {
                !s.reading && store.subscribers() == 0
            })
            .await;
        }
    }
}
