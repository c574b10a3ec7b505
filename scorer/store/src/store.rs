//! The live node store: every node's latest validated agent report, its Kubernetes facts and
//! the requests placed on it. Writers (one per agent stream, the Kubernetes reflector, the
//! scheduler) lock one of 16 shards briefly to swap an `Arc`; readers that score take a
//! published [`ClusterSnapshot`] (rebuilt by cloning `Arc`s when the store changed and the
//! cached one is older than `snapshot_max_age`, once for all the readers that ask together),
//! and the scheduler builds its own ([`NodeStore::snapshot_owned`]), so scoring never waits
//! on ingest.
use std::collections::HashMap;
use std::collections::hash_map::DefaultHasher;
use std::hash::{Hash, Hasher};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};

use loadstar_proto::pb;
use prost::Message;
use prost::bytes::Bytes;
use tokio::sync::broadcast;

use crate::images::ImageBook;
use crate::validate::{self, ReportError, ReportLimits};
use loadstar_framework::snapshot::{
    AgentNode, ClusterSnapshot, Inflight, KubeNode, NamespaceLabels, NodeAllocation, NodeInclusion,
    NodeView, retire_inflight,
};

const SHARDS: usize = 16;

/// Decides whether a node is under eviction pressure (the eviction policy's thresholds).
pub type PressureCheck = Arc<dyn Fn(&AgentNode) -> bool + Send + Sync>;

/// Store settings; see [`StoreConfig::default`] for the defaults.
#[derive(Clone)]
pub struct StoreConfig {
    /// A node is stale after this long without a report; `None`: 3 × its report interval.
    pub stale_after: Option<Duration>,
    /// Multiple of the report interval after which a node is stale (when `stale_after` is None).
    pub stale_intervals: f64,
    /// A cached snapshot is reused for reads while younger than this, even if the store
    /// changed (bounds snapshot rebuilds under thousands of 1 Hz streams).
    pub snapshot_max_age: Duration,
    /// In-flight estimates expire after this long even if the agent never measures the pod.
    pub inflight_ttl: Duration,
    /// A measured pod's in-flight usage is kept, fading, this long after its first
    /// measurement: the longest load window.
    pub inflight_fade: Duration,
    /// Agent-only nodes silent for this long are forgotten.
    pub forget_after: Duration,
    /// Report size limits.
    pub limits: ReportLimits,
    /// Eviction pressure check run on every accepted report.
    pub pressure: Option<PressureCheck>,
}

impl Default for StoreConfig {
    /// Stale after 3 intervals, snapshots reused for 50 ms, in-flight TTL 5 min, agent-only
    /// nodes forgotten after 10 min, default report limits, no pressure check.
    fn default() -> Self {
        StoreConfig {
            stale_after: None,
            stale_intervals: 3.0,
            snapshot_max_age: Duration::from_millis(50),
            inflight_ttl: Duration::from_secs(300),
            inflight_fade: Duration::from_secs(900),
            forget_after: Duration::from_secs(600),
            limits: ReportLimits::default(),
            pressure: None,
        }
    }
}

impl std::fmt::Debug for StoreConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StoreConfig")
            .field("stale_after", &self.stale_after)
            .field("snapshot_max_age", &self.snapshot_max_age)
            .field("inflight_ttl", &self.inflight_ttl)
            .finish_non_exhaustive()
    }
}

/// What changed about a node, for `WatchNodes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    /// First seen.
    Added,
    /// New report or other change.
    Updated,
    /// Became stale.
    Stale,
    /// Removed.
    Removed,
}

/// A change notification.
#[derive(Debug, Clone)]
pub struct NodeChange {
    /// What happened.
    pub kind: ChangeKind,
    /// Node name.
    pub node: Arc<str>,
}

#[derive(Debug, Default, Clone)]
/// One name's state. An entry with neither Kubernetes facts nor an agent is *hidden*: it only
/// keeps the requests of pods bound to a node that was deleted before them (pods are removed
/// after their node in a real cluster) or not seen yet, so the pods' later deletion does not
/// drive a fresh entry negative and a node re-registered under the name still carries them
/// (kube-scheduler's node-less `NodeInfo`). Hidden entries are in no snapshot, list or watch;
/// an empty one is dropped.
struct NodeEntry {
    agent: Option<Arc<AgentNode>>,
    /// The last accepted report, protobuf-encoded as it arrived (unknown fields from a newer
    /// agent included, within the 1 MiB message cap; decoding for a status drops them): only
    /// `GetNode`, `ListNodes` and watch events read it, and the encoding
    /// takes about a quarter of the decoded message's heap (one allocation instead of ~20),
    /// which at 10 000 nodes is ~13 MB.
    report: Option<Bytes>,
    kube: Option<Arc<KubeNode>>,
    alloc: Arc<NodeAllocation>,
    accepted: u64,
    rejected: u64,
    last_reject: String,
    /// The agent instance of the last accepted report (shared with its owner, if any).
    last_instance: Arc<str>,
    last_sequence: u64,
    last_sample_nanos: i64,
    owner: Option<Owner>,
    stale_notified: bool,
}

/// The stream that owns a node's reports.
#[derive(Debug, Clone)]
struct Owner {
    stream: StreamId,
    /// The agent instance it took the node with (usually the same allocation as the entry's
    /// `last_instance`).
    instance: Arc<str>,
    /// Who authenticated the stream (the agent pod's UID), if anyone did.
    principal: Option<Arc<str>>,
}

/// What an accepted report did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    /// It is the node's report now.
    Stored,
    /// It was the node's stored report already, sent again (after a reconnect): nothing
    /// changed.
    Unchanged,
}

/// Identifies one agent stream to the store (see [`NodeStore::apply_stream_report`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct StreamId(pub u64);

impl StreamId {
    /// A process-unique id for a new stream.
    pub fn next() -> StreamId {
        static NEXT: AtomicU64 = AtomicU64::new(1);
        StreamId(NEXT.fetch_add(1, Ordering::Relaxed))
    }
}

/// How many node changes the store buffers for a subscriber ([`NodeStore::subscribe`]); one
/// that falls further behind is told it lagged and must resync.
pub const CHANGES_BUFFERED: usize = 4096;

/// The live node store. Cheap to share: wrap in an `Arc`.
pub struct NodeStore {
    shards: Vec<RwLock<HashMap<Arc<str>, NodeEntry>>>,
    generation: AtomicU64,
    cache: Mutex<Option<(Instant, Arc<ClusterSnapshot>)>>,
    /// Held while [`NodeStore::snapshot`] builds: readers that find the published snapshot
    /// stale together wait for one build and share it, instead of each copying every
    /// node's view (single flight).
    building: Mutex<()>,
    events: broadcast::Sender<NodeChange>,
    config: StoreConfig,
    /// The cluster's namespaces and their labels, once a Namespace watch has listed them.
    namespaces: RwLock<Option<Arc<NamespaceLabels>>>,
    /// How spread constraints that state no node inclusion policy count (the cluster's
    /// release's way; current releases' until told otherwise).
    spread_default_inclusion: RwLock<Option<NodeInclusion>>,
    /// The one copy of each image name that nodes share. Also serialises Kubernetes facts'
    /// updates ([`NodeStore::set_kube_node`]), so its counts see one node's changes in order.
    images: Mutex<ImageBook>,
}

impl std::fmt::Debug for NodeStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeStore")
            .field("generation", &self.generation.load(Ordering::Relaxed))
            .finish_non_exhaustive()
    }
}

fn lock_read<T>(l: &RwLock<T>) -> std::sync::RwLockReadGuard<'_, T> {
    l.read().unwrap_or_else(|p| p.into_inner())
}

fn lock_write<T>(l: &RwLock<T>) -> std::sync::RwLockWriteGuard<'_, T> {
    l.write().unwrap_or_else(|p| p.into_inner())
}

/// A stored report, decoded again. It was decoded (or encoded by the store) from a valid
/// message, so this fails only on a bug; the node's status then says nothing of the report
/// rather than failing.
fn decode_report(node: &str, bytes: &[u8]) -> Option<pb::NodeReport> {
    match pb::NodeReport::decode(bytes) {
        Ok(report) => Some(report),
        Err(error) => {
            tracing::error!(node, %error, "stored report does not decode");
            None
        }
    }
}

/// Whether a reader may take the published snapshot `snap`, built `age` ago, with the store
/// at `generation`: when nothing changed since, when it is younger than `max_age`, or, for a
/// reader that found the cache stale (`stale`: what it held then, if anything) and waited
/// for the build in progress, when it is not the snapshot that reader found stale (another
/// reader's build, finished while it waited). Pure: the single-flight rule, tested apart.
fn reuse(
    snap: &Arc<ClusterSnapshot>,
    age: Duration,
    generation: u64,
    max_age: Duration,
    stale: Option<Option<&Arc<ClusterSnapshot>>>,
) -> bool {
    snap.generation == generation
        || age < max_age
        || stale.is_some_and(|found| found.is_none_or(|found| !Arc::ptr_eq(found, snap)))
}

impl NodeStore {
    /// An empty store.
    pub fn new(config: StoreConfig) -> NodeStore {
        NodeStore {
            shards: (0..SHARDS).map(|_| RwLock::new(HashMap::new())).collect(),
            generation: AtomicU64::new(1),
            cache: Mutex::new(None),
            building: Mutex::new(()),
            events: broadcast::channel(CHANGES_BUFFERED).0,
            config,
            namespaces: RwLock::new(None),
            images: Mutex::default(),
            spread_default_inclusion: RwLock::new(Some(NodeInclusion::CURRENT_DEFAULT)),
        }
    }

    /// Replaces the cluster's namespace labels (the Namespace watch, after its first list
    /// and on every change): snapshots built from now on carry them, for affinity terms'
    /// namespace selectors. Bumps the generation, so no reader keeps a snapshot without them.
    pub fn set_namespaces(&self, namespaces: Arc<NamespaceLabels>) {
        *lock_write(&self.namespaces) = Some(namespaces);
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Sets how spread constraints that state no node inclusion policy count
    /// (`ClusterSnapshot::spread_default_inclusion`): the Kubernetes side, once it knows the
    /// cluster's release. Bumps the generation when it changes.
    pub fn set_spread_default_inclusion(&self, inclusion: Option<NodeInclusion>) {
        let mut held = lock_write(&self.spread_default_inclusion);
        if *held != inclusion {
            *held = inclusion;
            self.generation.fetch_add(1, Ordering::Release);
        }
    }

    /// How snapshots count spread constraints that state no node inclusion policy.
    pub fn spread_default_inclusion(&self) -> Option<NodeInclusion> {
        *lock_read(&self.spread_default_inclusion)
    }

    /// The namespace labels snapshots carry (`None` until a watch sets them).
    pub fn namespaces(&self) -> Option<Arc<NamespaceLabels>> {
        lock_read(&self.namespaces).clone()
    }

    /// The store's settings.
    pub fn config(&self) -> &StoreConfig {
        &self.config
    }

    fn shard(&self, name: &str) -> &RwLock<HashMap<Arc<str>, NodeEntry>> {
        let mut h = DefaultHasher::new();
        name.hash(&mut h);
        &self.shards[(h.finish() as usize) % SHARDS]
    }

    /// Whether the entry is a node (Kubernetes or agent facts), not only left-over requests.
    fn visible(e: &NodeEntry) -> bool {
        e.kube.is_some() || e.agent.is_some()
    }

    /// Whether the entry holds nothing worth keeping.
    fn vacant(e: &NodeEntry) -> bool {
        !Self::visible(e) && e.alloc.pods.is_empty() && e.alloc.inflight.is_empty()
    }

    fn bump(&self, kind: ChangeKind, node: Arc<str>) {
        self.generation.fetch_add(1, Ordering::Release);
        // No receivers is fine: nobody is watching.
        let _ = self.events.send(NodeChange { kind, node });
    }

    /// Subscribes to node changes.
    pub fn subscribe(&self) -> broadcast::Receiver<NodeChange> {
        self.events.subscribe()
    }

    /// How many subscriptions to node changes are held now: each change wakes every one.
    pub fn subscribers(&self) -> usize {
        self.events.receiver_count()
    }

    /// Current generation (increases on every change).
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Acquire)
    }

    /// Validates and stores an agent report received at `now`, from no particular stream
    /// (the in-process agent, tests). A rejected report changes nothing but the node's
    /// rejection counters.
    pub fn apply_report(
        &self,
        report: pb::NodeReport,
        now: Instant,
    ) -> Result<Applied, ReportError> {
        self.apply(report, None, now, None)
    }

    /// Like [`NodeStore::apply_report`] for a report that arrived on agent stream `stream`,
    /// authenticated as `principal` (the agent pod's UID) if authentication is on: the first
    /// stream to report for a node owns it; another stream's reports are refused with
    /// [`ReportError::Owned`] until the owner calls [`NodeStore::release`] or the node goes
    /// stale (then the newcomer takes over) — unless both streams are authenticated as the
    /// same principal: then the newer stream takes over at once (the same agent pod
    /// reconnecting, e.g. with a rotated token, before the scorer saw its old stream end).
    /// `encoded`, the bytes `report` was decoded from, is kept as it is (else the store
    /// encodes the report itself).
    pub fn apply_stream_report(
        &self,
        report: pb::NodeReport,
        encoded: Option<Bytes>,
        now: Instant,
        stream: StreamId,
        principal: Option<&str>,
    ) -> Result<Applied, ReportError> {
        self.apply(report, encoded, now, Some((stream, principal)))
    }

    /// Ends `stream`'s ownership of `node` (its stream ended).
    pub fn release(&self, node: &str, stream: StreamId) {
        let mut shard = lock_write(self.shard(node));
        if let Some(entry) = shard.get_mut(node)
            && entry.owner.as_ref().is_some_and(|o| o.stream == stream)
        {
            entry.owner = None;
        }
    }

    fn apply(
        &self,
        report: pb::NodeReport,
        encoded: Option<Bytes>,
        now: Instant,
        stream: Option<(StreamId, Option<&str>)>,
    ) -> Result<Applied, ReportError> {
        let wall = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_nanos()).unwrap_or(i64::MAX));
        let validated = validate::validate(&report, &self.config.limits, wall);
        // Encoded (when it did not come encoded) before the shard's lock is taken (a report
        // the store then refuses, for its sequence or owner, wastes it; rare).
        let encoded = validated
            .is_ok()
            .then(|| encoded.unwrap_or_else(|| Bytes::from(report.encode_to_vec())));
        let name: Arc<str> = Arc::from(report.node_name.as_str());
        let mut shard = lock_write(self.shard(&name));
        let mut agent = match validated {
            Ok(a) => a,
            Err(e) => {
                // Count rejections only for nodes we already know, so garbage names cannot
                // grow the store.
                if let Some(entry) = shard.get_mut(&name) {
                    entry.rejected += 1;
                    entry.last_reject = e.to_string();
                }
                return Err(e);
            }
        };
        let added = !shard.get(&name).is_some_and(Self::visible);
        let stale = shard
            .get(&name)
            .is_none_or(|e| self.age_and_staleness(e, now).1);
        let entry = shard.entry(name.clone()).or_default();
        let resent = match self.check_order(entry, &report, stream, stale) {
            Ok(resent) => resent,
            Err(e) => {
                entry.rejected += 1;
                entry.last_reject = e.to_string();
                return Err(e);
            }
        };
        let instance = if *entry.last_instance == *report.agent_instance {
            entry.last_instance.clone()
        } else {
            Arc::from(report.agent_instance.as_str())
        };
        if let Some((stream, principal)) = stream
            && entry.owner.as_ref().is_none_or(|o| o.stream != stream)
        {
            entry.owner = Some(Owner {
                stream,
                instance: instance.clone(),
                principal: principal.map(Arc::from),
            });
        }
        if resent {
            // Already stored (the agent did not see its ack before reconnecting): accepted
            // again, changing nothing.
            return Ok(Applied::Unchanged);
        }
        agent.received_at = Some(now);
        agent.last_pressure_at = entry.agent.as_ref().and_then(|a| a.last_pressure_at);
        if let Some(check) = &self.config.pressure
            && check(&agent)
        {
            agent.last_pressure_at = Some(now);
        }
        // Measured pods start fading their in-flight estimates; stale estimates expire.
        retire_inflight(
            &mut entry.alloc,
            &agent.pods,
            now,
            self.config.inflight_ttl,
            self.config.inflight_fade,
        );
        entry.agent = Some(Arc::new(agent));
        entry.last_instance = instance;
        entry.last_sequence = report.sequence;
        entry.last_sample_nanos = report.sample_time_unix_nanos;
        entry.report = encoded;
        entry.accepted += 1;
        entry.stale_notified = false;
        drop(shard);
        self.bump(
            if added {
                ChangeKind::Added
            } else {
                ChangeKind::Updated
            },
            name,
        );
        Ok(Applied::Stored)
    }

    /// The ownership, sequence and sample-time rules between an accepted report and the
    /// next: another live stream's node is refused; within one agent instance, sequence
    /// numbers increase and sample times do not go backwards, except that the report stored
    /// last may come again (`Ok(true)`: an agent whose acks are sparse resends its latest
    /// report after a reconnect, not knowing it was stored). A resend is known by its agent
    /// instance, sequence and sample time alone (its `report_interval_seconds` may differ on
    /// the new stream); whatever else it says is not stored.
    fn check_order(
        &self,
        entry: &NodeEntry,
        report: &pb::NodeReport,
        stream: Option<(StreamId, Option<&str>)>,
        stale: bool,
    ) -> Result<bool, ReportError> {
        if let (Some((stream, principal)), Some(owner)) = (stream, &entry.owner)
            && owner.stream != stream
            && !stale
            && (principal.is_none() || owner.principal.as_deref() != principal)
        {
            return Err(ReportError::Owned {
                node: report.node_name.clone(),
                owner: loadstar_common::text::quote(&owner.instance),
            });
        }
        let same_instance =
            *entry.last_instance == *report.agent_instance && !report.agent_instance.is_empty();
        if same_instance
            && report.sequence == entry.last_sequence
            && report.sample_time_unix_nanos == entry.last_sample_nanos
            && entry.agent.is_some()
        {
            return Ok(true);
        }
        if same_instance && report.sequence <= entry.last_sequence {
            return Err(ReportError::Sequence {
                node: report.node_name.clone(),
                last: entry.last_sequence,
                got: report.sequence,
            });
        }
        if same_instance && report.sample_time_unix_nanos < entry.last_sample_nanos {
            return Err(ReportError::SampleTime {
                node: report.node_name.clone(),
                got: report.sample_time_unix_nanos,
                reason: format!(
                    "earlier than this agent's previous sample ({})",
                    entry.last_sample_nanos
                ),
            });
        }
        Ok(false)
    }

    /// Sets (or clears, with `None`) what Kubernetes says about a node.
    pub fn set_kube_node(&self, name: &str, mut kube: Option<KubeNode>) {
        let key: Arc<str> = Arc::from(name);
        let mut book = self.images.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(k) = kube.as_mut() {
            // An equal list stays the one held (snapshots' image indexes tell unchanged
            // images by pointer, `ImageIndex::after`); a new one shares the book's names.
            match self.kube_node(name) {
                Some(held) if held.images == k.images => k.images = held.images.clone(),
                _ => book.intern(k),
            }
        }
        let new = kube.map(Arc::new);
        let mut shard = lock_write(self.shard(name));
        let (kind, old) = match (shard.get_mut(&key), new.clone()) {
            (Some(entry), k) => {
                let was_visible = Self::visible(entry);
                let old = std::mem::replace(&mut entry.kube, k);
                let visible = Self::visible(entry);
                if Self::vacant(entry) {
                    shard.remove(&key);
                }
                let kind = match (was_visible, visible) {
                    (true, false) => ChangeKind::Removed,
                    (false, true) => ChangeKind::Added,
                    _ => ChangeKind::Updated,
                };
                (kind, old)
            }
            (None, Some(k)) => {
                shard.insert(
                    key.clone(),
                    NodeEntry {
                        kube: Some(k),
                        ..Default::default()
                    },
                );
                (ChangeKind::Added, None)
            }
            (None, None) => return,
        };
        drop(shard);
        book.replace(old.as_deref(), new.as_deref());
        drop(book);
        self.bump(kind, key);
    }

    /// Changes the requests placed on a node (creating a hidden entry for a node not known,
    /// and dropping one left empty).
    pub fn update_allocation(&self, name: &str, f: impl FnOnce(&mut NodeAllocation)) {
        self.update_allocation_shared(name, f);
    }

    /// [`NodeStore::update_allocation`], returning the node's new allocation (shared with
    /// the store: a scheduler patches its snapshot with it instead of copying it again).
    pub fn update_allocation_shared(
        &self,
        name: &str,
        f: impl FnOnce(&mut NodeAllocation),
    ) -> Arc<NodeAllocation> {
        let key: Arc<str> = Arc::from(name);
        let mut shard = lock_write(self.shard(name));
        let entry = shard.entry(key.clone()).or_default();
        f(Arc::make_mut(&mut entry.alloc));
        let alloc = entry.alloc.clone();
        let visible = Self::visible(entry);
        if Self::vacant(entry) {
            shard.remove(&key);
        }
        drop(shard);
        if visible {
            self.bump(ChangeKind::Updated, key);
        } else {
            // Nothing anyone can see changed; snapshots still rebuild on the generation.
            self.generation.fetch_add(1, Ordering::Release);
        }
        alloc
    }

    /// Adds an in-flight estimate to a node.
    pub fn add_inflight(&self, name: &str, inflight: Inflight) {
        self.update_allocation(name, |a| {
            a.inflight.retain(|e| e.uid != inflight.uid);
            a.inflight.push(inflight);
        });
    }

    fn stale_after(&self, agent: &AgentNode) -> Duration {
        self.config.stale_after.unwrap_or_else(|| {
            Duration::from_secs_f64(
                // Staleness follows how often reports arrive: the longer of the intervals.
                (agent.interval_seconds.max(agent.report_interval_seconds)
                    * self.config.stale_intervals)
                    .clamp(0.01, 86_400.0),
            )
        })
    }

    /// How long ago the entry's last report arrived, and whether that makes it stale (no
    /// report at all is stale).
    fn age_and_staleness(&self, e: &NodeEntry, now: Instant) -> (Option<Duration>, bool) {
        let age = e
            .agent
            .as_ref()
            .and_then(|a| a.received_at)
            .map(|t| now.saturating_duration_since(t));
        let stale = match (&e.agent, age) {
            (Some(a), Some(age)) => age > self.stale_after(a),
            _ => true,
        };
        (age, stale)
    }

    fn view(&self, name: &Arc<str>, e: &NodeEntry, now: Instant) -> NodeView {
        let (age, stale) = self.age_and_staleness(e, now);
        NodeView {
            name: name.clone(),
            agent: e.agent.clone(),
            kube: e.kube.clone(),
            alloc: e.alloc.clone(),
            stale,
            report_age_seconds: age.map(|d| d.as_secs_f64()),
        }
    }

    /// Every visible node's view at `now`, unsorted, and the generation they show at least.
    fn views(&self, now: Instant) -> (Vec<NodeView>, u64) {
        let generation = self.generation();
        let mut nodes = Vec::new();
        for shard in &self.shards {
            let shard = lock_read(shard);
            // The shard's entries, hidden ones included: an upper bound, under the same lock.
            nodes.reserve(shard.len());
            nodes.extend(
                shard
                    .iter()
                    .filter(|(_, e)| Self::visible(e))
                    .map(|(name, e)| self.view(name, e, now)),
            );
        }
        (nodes, generation)
    }

    /// A new snapshot for a reader that keeps its own and patches it (the scheduler, with
    /// each assumption): laid out after `previous` and seeded from its digest tables, as
    /// [`NodeStore::snapshot_now`] does from the published one (without one: sorted by
    /// name), but owned by the caller and never published. The caller need not clone it (a
    /// clone of every node's view) to patch it, and the store's cache never holds it: a
    /// published snapshot nobody else reads would keep its nodes' replaced reports alive.
    pub fn snapshot_owned(&self, previous: Option<&ClusterSnapshot>) -> ClusterSnapshot {
        let (nodes, generation) = self.views(Instant::now());
        // Read after the views: a change in between leaves the snapshot older than the
        // store's generation, so it is replaced, never kept as current.
        let namespaces = self.namespaces();
        let inclusion = self.spread_default_inclusion();
        let mut snap = match previous {
            Some(previous) => ClusterSnapshot::new_after(nodes, generation, previous),
            None => ClusterSnapshot::new(nodes, generation),
        };
        snap.namespaces = namespaces;
        snap.spread_default_inclusion = inclusion;
        snap
    }

    /// Builds a new snapshot now.
    pub fn snapshot_now(&self) -> Arc<ClusterSnapshot> {
        let now = Instant::now();
        let (nodes, generation) = self.views(now);
        // After the views, as in `snapshot_owned`.
        let namespaces = self.namespaces();
        let inclusion = self.spread_default_inclusion();
        let previous = self.cached().map(|(_, snap)| snap);
        // Most nodes are unchanged since the last snapshot: they keep their order and their
        // digest rows are copied, not computed.
        let mut snap = match &previous {
            Some(previous) => ClusterSnapshot::new_after(nodes, generation, previous),
            None => ClusterSnapshot::new(nodes, generation),
        };
        snap.namespaces = namespaces;
        snap.spread_default_inclusion = inclusion;
        let snap = Arc::new(snap);
        *self.cache.lock().unwrap_or_else(|p| p.into_inner()) = Some((now, snap.clone()));
        snap
    }

    fn cached(&self) -> Option<(Instant, Arc<ClusterSnapshot>)> {
        self.cache.lock().unwrap_or_else(|p| p.into_inner()).clone()
    }

    /// The published snapshot: the cached one if the store has not changed or it is younger
    /// than `snapshot_max_age`, else a new one, built once for all the readers that ask
    /// while it is built: a reader that waited for another's build takes it, however much
    /// changed meanwhile, so a snapshot read here is at most `snapshot_max_age` plus one
    /// build old.
    pub fn snapshot(&self) -> Arc<ClusterSnapshot> {
        let seen = self.cached();
        if let Some(snap) = self.reusable(seen.clone(), None) {
            return snap;
        }
        // Concurrent `Score` calls (one per evaluation permit), the web view and the
        // extender all land here when ingest has changed the store: the first builds, the
        // rest wait for it and take what it built.
        let _building = self.building.lock().unwrap_or_else(|p| p.into_inner());
        let stale = seen.map(|(_, snap)| snap);
        if let Some(snap) = self.reusable(self.cached(), Some(stale.as_ref())) {
            return snap;
        }
        self.snapshot_now()
    }

    /// What [`NodeStore::snapshot`] may answer with `cached` instead of building.
    fn reusable(
        &self,
        cached: Option<(Instant, Arc<ClusterSnapshot>)>,
        stale: Option<Option<&Arc<ClusterSnapshot>>>,
    ) -> Option<Arc<ClusterSnapshot>> {
        let (at, snap) = cached?;
        reuse(
            &snap,
            at.elapsed(),
            self.generation(),
            self.config.snapshot_max_age,
            stale,
        )
        .then_some(snap)
    }

    /// Status of one node for the gRPC API.
    pub fn node_status(&self, name: &str) -> Option<pb::NodeStatus> {
        let shard = lock_read(self.shard(name));
        let (k, e) = shard.get_key_value(name)?;
        Self::visible(e).then(|| self.status_of(k, e, Instant::now()))
    }

    /// Status of every node, sorted by name.
    pub fn list_status(&self) -> Vec<pb::NodeStatus> {
        let now = Instant::now();
        let mut out = Vec::new();
        for shard in &self.shards {
            let shard = lock_read(shard);
            out.extend(
                shard
                    .iter()
                    .filter(|(_, e)| Self::visible(e))
                    .map(|(k, e)| self.status_of(k, e, now)),
            );
        }
        out.sort_by(|a, b| a.node_name.cmp(&b.node_name));
        out
    }

    /// What `name`'s agent last reported (validated), if it reported.
    pub fn agent(&self, name: &str) -> Option<Arc<AgentNode>> {
        lock_read(self.shard(name))
            .get(name)
            .and_then(|e| e.agent.clone())
    }

    /// The pods and requests placed on `name`, if anything is.
    pub fn allocation(&self, name: &str) -> Option<Arc<NodeAllocation>> {
        lock_read(self.shard(name))
            .get(name)
            .map(|e| e.alloc.clone())
    }

    /// What Kubernetes says about `name` (labels, allocatable), if the node is known there.
    pub fn kube_node(&self, name: &str) -> Option<Arc<KubeNode>> {
        lock_read(self.shard(name))
            .get(name)
            .and_then(|e| e.kube.clone())
    }

    /// Every node's name, sorted.
    pub fn node_names(&self) -> Vec<Arc<str>> {
        let mut out = Vec::with_capacity(self.len());
        for shard in &self.shards {
            out.extend(
                lock_read(shard)
                    .iter()
                    .filter(|(_, e)| Self::visible(e))
                    .map(|(k, _)| k.clone()),
            );
        }
        out.sort();
        out
    }

    /// Number of nodes known.
    pub fn len(&self) -> usize {
        self.shards
            .iter()
            .map(|s| lock_read(s).values().filter(|e| Self::visible(e)).count())
            .sum()
    }

    /// True when no node is known.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    fn status_of(&self, name: &Arc<str>, e: &NodeEntry, now: Instant) -> pb::NodeStatus {
        let view = self.view(name, e, now);
        let source = match (&e.agent, &e.kube) {
            (Some(_), Some(_)) => pb::NodeSource::AgentAndKubernetes,
            (Some(_), None) => pb::NodeSource::Agent,
            (None, Some(_)) => pb::NodeSource::Kubernetes,
            (None, None) => pb::NodeSource::Unspecified,
        };
        pb::NodeStatus {
            node_name: name.to_string(),
            last_report: e
                .report
                .as_deref()
                .and_then(|bytes| decode_report(name, bytes)),
            report_age_seconds: view.report_age_seconds.unwrap_or(0.0),
            stale: view.stale,
            source: source as i32,
            inflight: e
                .alloc
                .inflight
                .iter()
                .map(|i| pb::InflightEstimate {
                    pod_uid: i.uid.clone(),
                    cpu_millicores: i.cpu_millis,
                    memory_bytes: i.memory_bytes,
                    age_seconds: now.saturating_duration_since(i.added_at).as_secs_f64(),
                })
                .collect(),
            reports_accepted: e.accepted,
            reports_rejected: e.rejected,
            last_reject_reason: e.last_reject.clone(),
            allocatable: view.allocatable().to_quantities().into_iter().collect(),
            requested: e.alloc.requested.to_quantities().into_iter().collect(),
        }
    }

    /// Emits `Stale` once for each node that went stale, forgets agent-only nodes silent for
    /// `forget_after`, and expires in-flight estimates. Call periodically. Returns how many
    /// nodes with an agent are stale now.
    pub fn sweep(&self, now: Instant) -> usize {
        let mut changes = Vec::new();
        let mut stale = 0usize;
        for shard in &self.shards {
            let mut shard = lock_write(shard);
            let mut forget = Vec::new();
            for (name, e) in shard.iter_mut() {
                let Some(agent) = &e.agent else { continue };
                let Some(at) = agent.received_at else {
                    continue;
                };
                let age = now.saturating_duration_since(at);
                if e.kube.is_none() && age > self.config.forget_after {
                    forget.push(name.clone());
                } else if age > self.stale_after(agent) {
                    stale += 1;
                    if !e.stale_notified {
                        e.stale_notified = true;
                        changes.push(NodeChange {
                            kind: ChangeKind::Stale,
                            node: name.clone(),
                        });
                    }
                }
                retire_inflight(
                    &mut e.alloc,
                    &agent.pods,
                    now,
                    self.config.inflight_ttl,
                    self.config.inflight_fade,
                );
            }
            for name in forget {
                // Forgetting the agent keeps any pods' requests (hidden).
                if let Some(e) = shard.get_mut(&name) {
                    e.agent = None;
                    e.report = None;
                    if Self::vacant(e) {
                        shard.remove(&name);
                    }
                }
                changes.push(NodeChange {
                    kind: ChangeKind::Removed,
                    node: name,
                });
            }
        }
        for c in changes {
            self.bump(c.kind, c.node);
        }
        stale
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_testkit::agent::fixed_report as report;

    /// The nodes (positions, ascending) an index says hold `name`, with its size on each.
    fn held(index: &loadstar_framework::snapshot::ImageIndex, name: &str) -> Vec<(u32, i64)> {
        let mut v: Vec<_> = index.holders(name).collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn stores_reports_and_rejects_replays() {
        let store = NodeStore::new(StoreConfig::default());
        let now = Instant::now();
        store
            .apply_report(report("a", 1, 0.5, 0.5), now)
            .expect("ok");
        let second = report("a", 2, 0.6, 0.5);
        store.apply_report(second.clone(), now).expect("ok");
        // Sequence 2 again, but another sample (the stored report itself may come again).
        let mut replay = second;
        replay.sample_time_unix_nanos += 1;
        let e = store.apply_report(replay, now).expect_err("replay");
        assert!(matches!(
            e,
            ReportError::Sequence {
                last: 2,
                got: 2,
                ..
            }
        ));
        // A restarted agent (new instance) may start again at 1.
        let mut r = report("a", 1, 0.1, 0.1);
        r.agent_instance = "i2".into();
        store.apply_report(r.clone(), now).expect("restart");
        let status = store.node_status("a").expect("known");
        assert_eq!((status.reports_accepted, status.reports_rejected), (3, 1));
        // The status carries the last accepted report as it came (stored encoded).
        assert_eq!(status.last_report, Some(r));
        assert!(
            status
                .last_reject_reason
                .contains("sequence 2 does not follow 2")
        );
    }

    #[test]
    fn the_stored_report_resent_is_accepted_and_changes_nothing() {
        let store = NodeStore::new(StoreConfig::default());
        let t0 = Instant::now()
            .checked_sub(Duration::from_secs(20))
            .expect("uptime over 20 s");
        let first = report("a", 1, 0.5, 0.5);
        let second = report("a", 2, 0.6, 0.5);
        store.apply_report(first.clone(), t0).expect("ok");
        store.apply_report(second.clone(), t0).expect("ok");
        let mut changes = store.subscribe();
        // An agent with sparse acks reconnects and resends its latest report.
        let applied = store
            .apply_report(second.clone(), Instant::now())
            .expect("the stored report again");
        assert_eq!(applied, Applied::Unchanged);
        let status = store.node_status("a").expect("known");
        assert_eq!((status.reports_accepted, status.reports_rejected), (2, 0));
        assert_eq!(status.last_report, Some(second));
        assert!(
            status.report_age_seconds >= 20.0,
            "the resend refreshed the node: {}",
            status.report_age_seconds
        );
        assert!(changes.try_recv().is_err(), "the resend announced a change");
        // Any other replay is still refused.
        let e = store.apply_report(first, t0).expect_err("older report");
        assert!(matches!(
            e,
            ReportError::Sequence {
                last: 2,
                got: 1,
                ..
            }
        ));
    }

    #[test]
    fn bad_report_does_not_touch_other_nodes_or_add_nodes() {
        let store = NodeStore::new(StoreConfig::default());
        let now = Instant::now();
        store
            .apply_report(report("good", 1, 0.5, 0.5), now)
            .expect("ok");
        let mut bad = report("bad", 1, 0.5, 0.5);
        bad.usage[0].latest_ratio = f64::NAN;
        assert!(store.apply_report(bad, now).is_err());
        assert_eq!(store.len(), 1);
        assert!(store.node_status("good").is_some_and(|s| !s.stale));
    }

    #[test]
    fn a_refusal_names_the_owners_instance_after_a_streamless_report() {
        let store = NodeStore::new(StoreConfig::default());
        let now = Instant::now();
        let first = report("n", 1, 0.5, 0.5);
        let owner_instance = first.agent_instance.clone();
        store
            .apply_stream_report(first, None, now, StreamId::next(), None)
            .expect("the first stream owns the node");
        // A report from no stream (the standalone scorer's in-process agent) changes the
        // node's last instance, not its owner.
        let mut local = report("n", 1, 0.4, 0.4);
        local.agent_instance = "in-process".into();
        store
            .apply_report(local, now)
            .expect("no stream, no owner check");
        let mut other = report("n", 1, 0.2, 0.2);
        other.agent_instance = "other".into();
        let e = store
            .apply_stream_report(other, None, now, StreamId::next(), None)
            .expect_err("a live owner keeps the node");
        let message = e.to_string();
        let named = format!(
            "(agent instance {})",
            loadstar_common::text::quote(&owner_instance)
        );
        assert!(
            matches!(e, ReportError::Owned { .. }) && message.contains(&named),
            "{message}"
        );
        assert!(!message.contains("in-process"), "{message}");
    }

    #[test]
    fn a_stale_owner_gives_way_to_a_new_stream() {
        let store = NodeStore::new(StoreConfig {
            stale_after: Some(Duration::from_secs(30)),
            ..StoreConfig::default()
        });
        let t0 = Instant::now();
        let (owner, newcomer) = (StreamId::next(), StreamId::next());
        store
            .apply_stream_report(report("n", 1, 0.5, 0.5), None, t0, owner, None)
            .expect("the first stream owns the node");
        let mut other = report("n", 1, 0.2, 0.2);
        other.agent_instance = "other".into();
        let e = store
            .apply_stream_report(
                other.clone(),
                None,
                t0 + Duration::from_secs(10),
                newcomer,
                None,
            )
            .expect_err("a live owner keeps the node");
        assert!(matches!(e, ReportError::Owned { .. }), "{e:?}");
        // The owner has been silent past stale_after: the newcomer takes over…
        store
            .apply_stream_report(other, None, t0 + Duration::from_secs(31), newcomer, None)
            .expect("a stale node is free");
        // …and owns it now: the old stream, back, is the one refused.
        let e = store
            .apply_stream_report(
                report("n", 2, 0.9, 0.9),
                None,
                t0 + Duration::from_secs(32),
                owner,
                None,
            )
            .expect_err("the old owner lost the node");
        assert!(matches!(e, ReportError::Owned { .. }), "{e:?}");
        let last = store
            .node_status("n")
            .and_then(|s| s.last_report)
            .expect("a report");
        assert_eq!(last.agent_instance, "other");
    }

    #[test]
    fn snapshots_carry_the_namespaces_set_last() {
        let store = NodeStore::new(StoreConfig::default());
        store
            .apply_report(report("a", 1, 0.2, 0.2), Instant::now())
            .expect("ok");
        assert!(store.snapshot().namespaces.is_none(), "no watch yet");
        let before = store.generation();
        let table = Arc::new(NamespaceLabels::new([(
            "team-a".to_string(),
            [("team".to_string(), "a".to_string())].into(),
        )]));
        store.set_namespaces(table.clone());
        assert!(store.generation() > before, "readers see a change");
        // The next snapshot built has them (a published one may be served for up to
        // `snapshot_max_age` first, as after any change), and so has an owned one.
        let published = store.snapshot_now();
        assert_eq!(published.namespaces.as_deref(), Some(&*table));
        let owned = store.snapshot_owned(Some(&published));
        assert_eq!(owned.namespaces.as_deref(), Some(&*table));
        assert_eq!(
            store
                .snapshot_owned(None)
                .namespaces
                .and_then(|n| n.get("team-a").cloned())
                .and_then(|l| l.get("team").cloned())
                .as_deref(),
            Some("a")
        );
    }

    #[test]
    fn owned_snapshots_follow_their_previous_one_and_are_never_published() {
        let store = NodeStore::new(StoreConfig::default());
        let t0 = Instant::now();
        for n in ["c", "a", "b"] {
            store.apply_report(report(n, 1, 0.2, 0.2), t0).expect("ok");
        }
        let first = store.snapshot_now();
        drop(first.digests(60));
        store
            .apply_report(report("b", 2, 0.7, 0.2), t0 + Duration::from_secs(1))
            .expect("ok");
        let after = store.snapshot_owned(Some(&first));
        let names = |s: &ClusterSnapshot| {
            s.nodes()
                .iter()
                .map(|n| n.name.to_string())
                .collect::<Vec<_>>()
        };
        assert_eq!(names(&after), ["a", "b", "c"]);
        assert!(
            Arc::ptr_eq(&after.index, &first.index),
            "same names: the index is shared"
        );
        assert_eq!(after.generation, store.generation());
        let cpu = |s: &ClusterSnapshot, n: &str| {
            s.get(n)
                .and_then(|v| v.agent.as_ref())
                .and_then(|a| a.load.get(loadstar_common::model::ResourceKind::Cpu))
                .map(|l| l.latest)
        };
        assert_eq!(cpu(&after, "b"), Some(0.7), "the new report");
        assert_eq!(
            cpu(&first, "b"),
            Some(0.2),
            "the previous snapshot is untouched"
        );
        let table = after.digests(60);
        assert!(
            (0..3).all(|i| table.row_matches(i, &after.nodes()[i])),
            "rows copied or computed for the new snapshot's nodes"
        );
        let published = store.cached().map(|(_, s)| s).expect("published");
        assert!(Arc::ptr_eq(&published, &first), "not published");
        // A new name: laid out afresh, by name.
        store
            .apply_report(report("0", 1, 0.1, 0.1), t0)
            .expect("ok");
        let grown = store.snapshot_owned(Some(&after));
        assert_eq!(names(&grown), ["0", "a", "b", "c"]);
        assert_eq!(grown.get("c").map(|n| n.name.as_ref()), Some("c"));
        // Without a previous one: sorted by name, and still not published.
        let fresh = store.snapshot_owned(None);
        assert_eq!(names(&fresh), ["0", "a", "b", "c"]);
        let published = store.cached().map(|(_, s)| s).expect("published");
        assert!(Arc::ptr_eq(&published, &first), "still not published");
    }

    #[test]
    fn staleness_follows_the_interval() {
        let store = NodeStore::new(StoreConfig::default());
        let past = Instant::now() - Duration::from_secs(10);
        store
            .apply_report(report("old", 1, 0.5, 0.5), past)
            .expect("ok");
        store
            .apply_report(report("new", 1, 0.5, 0.5), Instant::now())
            .expect("ok");
        let snap = store.snapshot_now();
        assert!(snap.get("old").expect("old").stale);
        assert!(!snap.get("new").expect("new").stale);
        let mut rx = store.subscribe();
        store.sweep(Instant::now());
        let c = rx.try_recv().expect("stale event");
        assert_eq!((c.kind, &*c.node), (ChangeKind::Stale, "old"));
        store.sweep(Instant::now());
        assert!(rx.try_recv().is_err(), "stale is announced once");
    }

    #[test]
    fn measured_pods_fade_their_inflight_estimates() {
        let store = NodeStore::new(StoreConfig::default());
        let t0 = Instant::now();
        store
            .apply_report(report("n", 1, 0.1, 0.1), t0)
            .expect("ok");
        store.add_inflight("n", Inflight::new("pod-1".into(), 1000, 1 << 30, t0));
        let snap = store.snapshot_now();
        assert_eq!(
            snap.get("n").expect("n").inflight_amounts(60.0),
            (1000.0, (1u64 << 30) as f64),
            "unmeasured: the estimate counts in full"
        );
        let measured = |seq| {
            let mut r = report("n", seq, 0.35, 0.2);
            r.pods.push(pb::PodUsage {
                pod_uid: "pod-1".into(),
                cpu_cores: 0.8,
                memory_working_set_bytes: 1 << 29,
            });
            r
        };
        store.apply_report(measured(2), t0).expect("ok");
        let snap = store.snapshot_now();
        let n = snap.get("n").expect("n");
        assert_eq!(n.alloc.inflight.len(), 1, "kept while the window fills");
        assert_eq!(n.inflight_amounts(60.0), (800.0, (1u64 << 29) as f64));
        // 30 s later a 60 s window holds half its samples with the pod: half still counts.
        store
            .apply_report(measured(3), t0 + Duration::from_secs(30))
            .expect("ok");
        let snap = store.snapshot_now();
        let (cpu, _) = snap.get("n").expect("n").inflight_amounts(60.0);
        assert!((cpu - 400.0).abs() < 1e-6, "{cpu}");
        // A 300 s window has covered only a tenth.
        let (cpu, _) = snap.get("n").expect("n").inflight_amounts(300.0);
        assert!((cpu - 720.0).abs() < 1e-6, "{cpu}");
        // Past the fade period (the longest window) the estimate is gone.
        store
            .apply_report(measured(4), t0 + Duration::from_secs(901))
            .expect("ok");
        assert!(
            store
                .snapshot_now()
                .get("n")
                .expect("n")
                .alloc
                .inflight
                .is_empty()
        );
    }

    #[test]
    fn unmeasured_estimates_expire_and_ended_pods_drop() {
        let store = NodeStore::new(StoreConfig::default());
        let t0 = Instant::now();
        store
            .apply_report(report("n", 1, 0.1, 0.1), t0)
            .expect("ok");
        store.add_inflight("n", Inflight::new("never".into(), 500, 1 << 20, t0));
        store.add_inflight("n", Inflight::new("short".into(), 500, 1 << 20, t0));
        let mut r = report("n", 2, 0.1, 0.1);
        r.pods.push(pb::PodUsage {
            pod_uid: "short".into(),
            cpu_cores: 0.5,
            memory_working_set_bytes: 1 << 20,
        });
        store
            .apply_report(r, t0 + Duration::from_secs(1))
            .expect("ok");
        // "short" ended (no longer reported); "never" was never measured past the TTL.
        store
            .apply_report(report("n", 3, 0.1, 0.1), t0 + Duration::from_secs(301))
            .expect("ok");
        assert!(
            store
                .snapshot_now()
                .get("n")
                .expect("n")
                .alloc
                .inflight
                .is_empty()
        );
    }

    #[test]
    fn snapshot_is_cached_until_changed() {
        let store = NodeStore::new(StoreConfig {
            snapshot_max_age: Duration::ZERO,
            ..Default::default()
        });
        store
            .apply_report(report("n", 1, 0.1, 0.1), Instant::now())
            .expect("ok");
        let a = store.snapshot();
        let b = store.snapshot();
        assert!(Arc::ptr_eq(&a, &b));
        store
            .apply_report(report("n", 2, 0.2, 0.1), Instant::now())
            .expect("ok");
        let c = store.snapshot();
        assert!(!Arc::ptr_eq(&a, &c));
        assert_eq!(c.nodes().len(), 1);
    }

    #[test]
    fn readers_that_find_the_snapshot_stale_together_share_one_build() {
        let store = Arc::new(NodeStore::new(StoreConfig {
            snapshot_max_age: Duration::ZERO,
            ..Default::default()
        }));
        let now = Instant::now();
        // Enough nodes that a build takes a while: readers arrive while it runs.
        for i in 0..5_000 {
            store
                .apply_report(report(&format!("n{i}"), 1, 0.1, 0.1), now)
                .expect("ok");
        }
        for round in 0..5 {
            store
                .apply_report(report("n0", 2 + round, 0.2, 0.1), now)
                .expect("ok");
            let start = Arc::new(std::sync::Barrier::new(8));
            let readers: Vec<_> = (0..8)
                .map(|_| {
                    let (store, start) = (store.clone(), start.clone());
                    std::thread::spawn(move || {
                        start.wait();
                        store.snapshot()
                    })
                })
                .collect();
            let snaps: Vec<_> = readers
                .into_iter()
                .map(|r| r.join().expect("reader"))
                .collect();
            // Nothing changed while they read: one build, one snapshot for all eight.
            assert!(
                snaps.iter().all(|s| Arc::ptr_eq(s, &snaps[0])),
                "round {round}: the readers built {} snapshots",
                snaps
                    .iter()
                    .map(|s| Arc::as_ptr(s) as usize)
                    .collect::<std::collections::HashSet<_>>()
                    .len()
            );
            assert_eq!(snaps[0].generation, store.generation());
        }
    }

    #[test]
    fn a_reader_that_waited_takes_the_build_it_waited_for() {
        let snap = |generation| Arc::new(ClusterSnapshot::new(Vec::new(), generation));
        let (old, built) = (snap(1), snap(2));
        let (young, aged, max_age) = (
            Duration::from_millis(1),
            Duration::from_secs(1),
            Duration::from_millis(50),
        );
        // First look: current when unchanged or young, else built.
        assert!(reuse(&built, aged, 2, max_age, None));
        assert!(reuse(&built, young, 9, max_age, None));
        assert!(!reuse(&built, aged, 9, max_age, None));
        // After waiting: another's build is taken, however old and whatever changed since
        // (ingest changes the store many times a build at scale)...
        assert!(reuse(&built, aged, 9, max_age, Some(Some(&old))));
        assert!(reuse(&built, aged, 9, Duration::ZERO, Some(None)));
        // ...but the snapshot this reader found stale is still stale: it builds.
        assert!(!reuse(&old, aged, 9, max_age, Some(Some(&old))));
        assert!(reuse(&old, young, 9, max_age, Some(Some(&old))));
    }

    #[test]
    fn snapshots_carry_which_nodes_hold_which_images_and_nodes_share_one_copy_of_a_name() {
        use loadstar_framework::snapshot::NodeImages;
        let store = NodeStore::new(StoreConfig::default());
        let node = |names: &[&str]| KubeNode {
            images: NodeImages::new(names.iter().map(|n| (Arc::<str>::from(*n), 1 << 20))),
            ..KubeNode::default()
        };
        store.set_kube_node("a", Some(node(&["pause:3.9", "app:v1"])));
        store.set_kube_node("b", Some(node(&["pause:3.9"])));
        // An agent-only node is no Kubernetes node: not one of the nodes shares are over.
        store
            .apply_report(report("c", 1, 0.1, 0.1), Instant::now())
            .expect("ok");
        let snap = store.snapshot_now();
        let index = snap.image_index();
        assert_eq!(index.nodes(), 2);
        assert_eq!(held(&index, "pause:3.9"), [(0, 1 << 20), (1, 1 << 20)]);
        assert_eq!(held(&index, "app:v1"), [(0, 1 << 20)]);
        let name = |n: &str| {
            snap.get(n)
                .expect("node")
                .kube
                .as_ref()
                .expect("kube")
                .images
                .clone()
        };
        let (a, b) = (name("a"), name("b"));
        let pause = |i: &NodeImages| {
            i.entries()
                .iter()
                .find(|e| &*e.0 == "pause:3.9")
                .expect("pause")
                .0
                .clone()
        };
        assert!(
            Arc::ptr_eq(&pause(&a), &pause(&b)),
            "one copy of a name every node lists"
        );
        // A node's images change, a node goes: the next snapshot's index (patched from
        // the last one) shows it, as one built afresh does.
        store.set_kube_node("a", Some(node(&["pause:3.9", "app:v2"])));
        store.set_kube_node("b", None);
        for snap in [store.snapshot_now(), Arc::new(store.snapshot_owned(None))] {
            let index = snap.image_index();
            assert_eq!(index.nodes(), 1);
            assert_eq!(held(&index, "pause:3.9"), [(0, 1 << 20)]);
            assert_eq!(held(&index, "app:v1"), []);
            assert_eq!(held(&index, "app:v2"), [(0, 1 << 20)]);
        }
    }

    #[test]
    fn image_indexes_carry_over_until_a_nodes_images_change() {
        use loadstar_framework::snapshot::NodeImages;
        let store = NodeStore::new(StoreConfig::default());
        let node = |names: &[&str], cpu_millis: i64| {
            let mut k = KubeNode {
                images: NodeImages::new(names.iter().map(|n| (Arc::<str>::from(*n), 7))),
                ..KubeNode::default()
            };
            k.allocatable.cpu_millis = cpu_millis;
            k
        };
        store.set_kube_node("a", Some(node(&["app:v1"], 1000)));
        store.set_kube_node("b", Some(node(&["app:v1"], 1000)));
        let first = store.snapshot_now();
        let index = first.image_index();
        assert_eq!(held(&index, "app:v1"), [(0, 7), (1, 7)]);
        // Another of a node's facts changes, its images stay equal: the index carries over,
        // through a snapshot nobody scored images with too.
        store.set_kube_node("a", Some(node(&["app:v1"], 2000)));
        let unscored = store.snapshot_now();
        store.set_kube_node("a", Some(node(&["app:v1"], 3000)));
        let second = store.snapshot_now();
        assert!(Arc::ptr_eq(&index, &second.image_index()));
        assert!(Arc::ptr_eq(&index, &unscored.image_index()));
        assert!(Arc::ptr_eq(
            &index,
            &store.snapshot_owned(Some(&second)).image_index()
        ));
        // A node's images change: the next snapshot's index is made anew (patched).
        store.set_kube_node("b", Some(node(&["app:v2"], 1000)));
        let third = store.snapshot_now();
        assert!(!Arc::ptr_eq(&index, &third.image_index()));
        assert_eq!(held(&third.image_index(), "app:v1"), [(0, 7)]);
        assert_eq!(held(&third.image_index(), "app:v2"), [(1, 7)]);
        // A node joins before the others: every position moves, and the index says so.
        store.set_kube_node("0", Some(node(&["app:v2"], 1000)));
        let fourth = store.snapshot_now();
        assert_eq!(held(&fourth.image_index(), "app:v1"), [(1, 7)]);
        assert_eq!(held(&fourth.image_index(), "app:v2"), [(0, 7), (2, 7)]);
        assert_eq!(fourth.image_index().nodes(), 3);
    }

    #[test]
    fn snapshots_count_spread_as_the_clusters_release_does() {
        let store = NodeStore::new(StoreConfig::default());
        let current = Some(NodeInclusion::CURRENT_DEFAULT);
        assert_eq!(store.snapshot_now().spread_default_inclusion, current);
        let before = store.generation();
        store.set_spread_default_inclusion(None);
        assert!(store.generation() > before, "a change is a new generation");
        assert_eq!(store.snapshot_now().spread_default_inclusion, None);
        assert_eq!(store.snapshot_owned(None).spread_default_inclusion, None);
        let before = store.generation();
        store.set_spread_default_inclusion(None);
        assert_eq!(store.generation(), before, "no change, no new generation");
    }

    #[test]
    fn kube_only_nodes_are_stale_and_removable() {
        let store = NodeStore::new(StoreConfig::default());
        store.set_kube_node("k", Some(KubeNode::default()));
        let snap = store.snapshot_now();
        assert!(snap.get("k").expect("k").stale);
        store.set_kube_node("k", None);
        assert!(store.is_empty());
    }

    #[test]
    fn pods_outliving_their_node_stay_hidden_and_never_go_negative() {
        use loadstar_framework::snapshot::PodOnNode;
        let store = NodeStore::new(StoreConfig::default());
        let mut node = KubeNode::default();
        node.allocatable.cpu_millis = 2000;
        store.set_kube_node("n", Some(node.clone()));
        let pod = |uid: &str| PodOnNode {
            uid: uid.into(),
            ..Default::default()
        };
        store.update_allocation("n", |a| {
            a.requested.cpu_millis += 1500;
            a.put_pod(pod("p"));
        });
        // The node goes first, as in a real cluster; its pod's requests stay, hidden.
        store.set_kube_node("n", None);
        assert!(store.is_empty());
        assert!(store.snapshot_now().nodes().is_empty());
        assert!(store.node_status("n").is_none());
        // Re-registered under the same name, the node still carries the pod.
        store.set_kube_node("n", Some(node.clone()));
        let snap = store.snapshot_now();
        assert_eq!(snap.nodes()[0].alloc.requested.cpu_millis, 1500);
        // Node deleted again, then the pod: nothing negative and nothing left behind.
        store.set_kube_node("n", None);
        store.update_allocation("n", |a| {
            a.requested.cpu_millis -= 1500;
            a.remove_pod("p");
        });
        store.set_kube_node("n", Some(node));
        let snap = store.snapshot_now();
        assert_eq!(snap.nodes()[0].alloc.requested.cpu_millis, 0);
        assert!(snap.nodes()[0].alloc.pods.is_empty());
        // A pod bound to a node never seen is hidden too.
        store.update_allocation("ghost", |a| a.put_pod(pod("q")));
        assert_eq!(store.len(), 1);
        assert!(store.node_names().iter().all(|n| &**n != "ghost"));
    }
}
