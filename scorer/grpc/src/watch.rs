//! `WatchNodes` fan-out with bounded memory. One hub task turns each store change into one
//! shared event (`Arc`, sized once) and queues a reference to it for every interested
//! watcher; each watcher's queue is bounded in bytes, and a watcher whose client does not
//! keep up past that bound has its queue dropped at once and is told `RESOURCE_EXHAUSTED`
//! (re-watch to resync). The total number of watchers is capped. Nothing is ever buffered
//! per watcher without a limit, whether or not the client reads.
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use futures::Stream;
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
    /// Most bytes of events queued for one watcher (counted at their encoded size, though
    /// shared); past it the watcher is dropped.
    pub max_queued_bytes: usize,
}

impl Default for WatchLimits {
    /// 256 watchers (operators' tools and other schedulers, not one per node), 4 MiB queued
    /// each (about a thousand node updates: ~1 s of a 1 000-node cluster's changes).
    fn default() -> Self {
        WatchLimits {
            max_watchers: 256,
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

/// One watcher's queue.
#[derive(Debug, Default)]
struct Queue {
    events: VecDeque<Arc<SharedEvent>>,
    bytes: usize,
    overflowed: bool,
}

#[derive(Debug)]
struct Watcher {
    /// Nodes wanted (empty: all).
    filter: HashSet<String>,
    queue: Mutex<Queue>,
    wake: Notify,
}

impl Watcher {
    fn wants(&self, node: &str) -> bool {
        self.filter.is_empty() || self.filter.contains(node)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Queue> {
        self.queue.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Counters the tests and `/metrics` read: the server's own accounting of watcher memory.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WatchStats {
    /// Watchers now.
    pub watchers: usize,
    /// Bytes queued over all watchers now (shared events counted once per queue).
    pub queued_bytes: usize,
    /// The largest single watcher queue now, bytes.
    pub max_queued_bytes: usize,
    /// Watchers dropped for lagging since start.
    pub dropped_lagging: u64,
    /// Watches refused for the watcher cap since start.
    pub refused: u64,
}

/// The hub: fans store changes out to watchers.
#[derive(Debug)]
pub struct WatchHub {
    store: Arc<NodeStore>,
    metrics: Arc<Metrics>,
    limits: WatchLimits,
    watchers: Mutex<HashMap<u64, Arc<Watcher>>>,
    next_id: AtomicU64,
    dropped_lagging: AtomicU64,
    refused: AtomicU64,
}

impl WatchHub {
    /// A hub over `store`; its task runs until the store's change channel closes.
    pub fn start(store: Arc<NodeStore>, metrics: Arc<Metrics>, limits: WatchLimits) -> Arc<Self> {
        let hub = Arc::new(WatchHub {
            store: store.clone(),
            metrics,
            limits,
            watchers: Mutex::new(HashMap::new()),
            next_id: AtomicU64::new(1),
            dropped_lagging: AtomicU64::new(0),
            refused: AtomicU64::new(0),
        });
        let mut changes = store.subscribe();
        let weak = Arc::downgrade(&hub);
        tokio::spawn(async move {
            loop {
                let change = changes.recv().await;
                let Some(hub) = weak.upgrade() else { return };
                match change {
                    Ok(change) => hub.publish(change.kind, &change.node),
                    // The hub itself fell behind the store: every node may have changed.
                    Err(RecvError::Lagged(_)) => {
                        for name in hub.store.node_names() {
                            hub.publish(ChangeKind::Updated, &name);
                        }
                    }
                    Err(RecvError::Closed) => return,
                }
            }
        });
        hub
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<u64, Arc<Watcher>>> {
        self.watchers.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The accounting now.
    pub fn stats(&self) -> WatchStats {
        let watchers = self.lock();
        let mut stats = WatchStats {
            watchers: watchers.len(),
            dropped_lagging: self.dropped_lagging.load(Ordering::Relaxed),
            refused: self.refused.load(Ordering::Relaxed),
            ..WatchStats::default()
        };
        for w in watchers.values() {
            let q = w.lock().bytes;
            stats.queued_bytes += q;
            stats.max_queued_bytes = stats.max_queued_bytes.max(q);
        }
        stats
    }

    fn publish(&self, kind: ChangeKind, node: &Arc<str>) {
        let watchers: Vec<Arc<Watcher>> = self.lock().values().cloned().collect();
        if !watchers.iter().any(|w| w.wants(node)) {
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
        for w in watchers.iter().filter(|w| w.wants(&shared.node)) {
            let mut q = w.lock();
            if q.overflowed {
                continue;
            }
            // An empty queue always takes the next event, however large: only a backlog
            // counts as lagging.
            if !q.events.is_empty() && q.bytes + shared.bytes > self.limits.max_queued_bytes {
                // Drop the backlog now (the client may never read again) and tell it.
                q.events.clear();
                self.metrics.watch_queued_bytes.dec_by(q.bytes as i64);
                q.bytes = 0;
                q.overflowed = true;
                self.dropped_lagging.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .watchers_dropped
                    .get_or_create(&ReasonLabel {
                        reason: "lagging".into(),
                    })
                    .inc();
            } else {
                q.bytes += shared.bytes;
                self.metrics.watch_queued_bytes.inc_by(shared.bytes as i64);
                q.events.push_back(shared.clone());
            }
            drop(q);
            w.wake.notify_one();
        }
    }

    /// A new watcher for `nodes` (empty: all), or `RESOURCE_EXHAUSTED` at the cap. The
    /// stream starts with every wanted node (`ADDED`), read lazily one node at a time, then
    /// carries changes.
    pub fn watch(
        self: &Arc<Self>,
        nodes: Vec<String>,
    ) -> Result<impl Stream<Item = Result<pb::NodeEvent, Status>> + Send + 'static, Status> {
        let watcher = Arc::new(Watcher {
            filter: nodes.into_iter().collect(),
            queue: Mutex::new(Queue::default()),
            wake: Notify::new(),
        });
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        {
            let mut watchers = self.lock();
            if watchers.len() >= self.limits.max_watchers {
                drop(watchers);
                self.refused.fetch_add(1, Ordering::Relaxed);
                self.metrics
                    .watchers_dropped
                    .get_or_create(&ReasonLabel {
                        reason: "limit".into(),
                    })
                    .inc();
                warn!(
                    max = self.limits.max_watchers,
                    "WatchNodes refused: watcher limit reached"
                );
                return Err(Status::resource_exhausted(format!(
                    "this scorer already serves {} watchers, its limit; retry later",
                    self.limits.max_watchers
                )));
            }
            watchers.insert(id, watcher.clone());
            self.metrics.watchers.set(watchers.len() as i64);
        }
        // Registered before the snapshot is read, so no change between the two is missed.
        let initial: VecDeque<Arc<str>> = self
            .store
            .node_names()
            .into_iter()
            .filter(|n| watcher.wants(n))
            .collect();
        let state = WatchState {
            hub: self.clone(),
            id,
            watcher,
            initial,
            done: false,
        };
        Ok(futures::stream::unfold(state, |mut s| async move {
            let item = s.next().await?;
            Some((item, s))
        }))
    }

    fn remove(&self, id: u64) {
        let mut watchers = self.lock();
        if let Some(w) = watchers.remove(&id) {
            // Closed for good: a publish racing with this removal skips it.
            let mut q = w.lock();
            self.metrics.watch_queued_bytes.dec_by(q.bytes as i64);
            q.events.clear();
            q.bytes = 0;
            q.overflowed = true;
        }
        self.metrics.watchers.set(watchers.len() as i64);
    }
}

/// One watcher's stream state; dropping it (the client went away) unregisters the watcher.
struct WatchState {
    hub: Arc<WatchHub>,
    id: u64,
    watcher: Arc<Watcher>,
    initial: VecDeque<Arc<str>>,
    done: bool,
}

impl WatchState {
    async fn next(&mut self) -> Option<Result<pb::NodeEvent, Status>> {
        if self.done {
            return None;
        }
        while let Some(name) = self.initial.pop_front() {
            if let Some(node) = self.hub.store.node_status(&name) {
                return Some(Ok(pb::NodeEvent {
                    kind: pb::node_event::Kind::Added as i32,
                    node: Some(node),
                }));
            }
        }
        loop {
            {
                let mut q = self.watcher.lock();
                if q.overflowed {
                    self.done = true;
                    debug!(watcher = self.id, "watcher dropped: lagging");
                    return Some(Err(Status::resource_exhausted(format!(
                        "this watcher fell more than {} bytes behind the node changes and was \
                         dropped; watch again to resync",
                        self.hub.limits.max_queued_bytes
                    ))));
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
}

impl Drop for WatchState {
    fn drop(&mut self) {
        self.hub.remove(self.id);
    }
}
