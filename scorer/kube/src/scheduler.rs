//! The scheduling loop: pop the next pending pod, evaluate its profile on a snapshot that
//! already counts every earlier assumption, assume the pod onto the best node (requests and
//! an in-flight usage estimate), and bind it asynchronously with bounded concurrency. A
//! failed bind forgets the assumption and requeues the pod; a 409 (bound elsewhere) is
//! dropped quietly. Successes get a `Scheduled` Event; pods that fit nowhere get a
//! `FailedScheduling` Event and a `PodScheduled=False, reason=Unschedulable` condition whose
//! message is the profile's summary. Only the leader binds.
//!
//! A pod with `WaitForFirstConsumer` claims has them bound first: the volumes chosen for it
//! are reserved with the assumption, written, and waited for (`volume_binder`) before the
//! pod is bound; a failure releases them and requeues the pod with a `FailedScheduling`
//! Event.
//!
//! Also the `Scheduler.Bind` gRPC path ([`Binder`]): place (or place on a named node) and
//! bind a pod by reference.
use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::{FutureExt, StreamExt};
use rand::SeedableRng;
use rand::rngs::SmallRng;
use tokio::sync::{Semaphore, mpsc, watch};
use tokio::time::Instant;
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::api::{
    ApiError, EventType, KubeApi, PodEvent, REASON_FAILED, REASON_PREEMPTED, REASON_SCHEDULED,
};
use super::cache::{ClusterCache, Nomination};
use super::convert::PodFacts;
use super::leader::Leadership;
use super::queue::{QueuedPod, SchedulingQueue};
use super::reservations::VolumeWrites;
use super::volume_binder::{self, VolumeBindError};
use loadstar_framework::preemption::PreemptionOutcome;
use loadstar_framework::snapshot::{ClusterSnapshot, NodeView, PodInfo};
use loadstar_framework::{Evaluation, Profile, SampleCursor};
use loadstar_policy::profiles::{ProfileError, Profiles};
use loadstar_store::NodeStore;
use loadstar_store::cluster::{BindOutcome, BindRequest, Binder, ClusterError};
use loadstar_store::decisions::{Decision, DecisionLog, Outcome as Recorded, Source};
use loadstar_store::metrics::{
    ExtensionPointLabel, Metrics, ProfileResultLabel, QueueLabel, ResultLabel,
};
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::histogram::Histogram;

/// Estimates a placed pod's usage (CPU millicores, memory bytes) until the agent measures it.
pub type Estimator = Arc<dyn Fn(&PodInfo) -> (i64, i64) + Send + Sync>;

/// Scheduler settings; see [`SchedulerConfig::default`].
#[derive(Debug, Clone)]
pub struct SchedulerConfig {
    /// Bindings in flight at most.
    pub bind_concurrency: usize,
    /// Events and status patches in flight at most; keep it at least `bind_concurrency`, or
    /// Events fall behind the bindings (`serve` sets the two equal).
    pub write_concurrency: usize,
    /// The loop's own snapshot is rebuilt from the store when older than this (and the store
    /// changed); its own assumptions are patched in immediately, and Kubernetes' node
    /// changes (or a retried pod) rebuild it at once. Each rebuild reads every node, so
    /// under thousands of reporting agents a shorter period costs CPU in proportion.
    pub snapshot_refresh: Duration,
    /// How long shutdown waits for bindings in flight.
    pub drain_timeout: Duration,
    /// A binding not answered within this is abandoned and the pod retried.
    pub bind_timeout: Duration,
    /// How long a pod's `WaitForFirstConsumer` claims may take to be bound before the pod
    /// is retried (kube-scheduler's `VolumeBindingArgs.bindTimeoutSeconds`).
    pub volume_bind_timeout: Duration,
}

impl Default for SchedulerConfig {
    /// 64 bindings and 64 writes in flight (Events keep pace with bindings, as
    /// kube-scheduler's do), snapshots refreshed every 500 ms (agents report every second),
    /// 10 s drain, 30 s per binding,
    /// 600 s for volumes to be bound (upstream's default).
    fn default() -> Self {
        SchedulerConfig {
            bind_concurrency: 64,
            write_concurrency: 64,
            snapshot_refresh: Duration::from_millis(500),
            drain_timeout: Duration::from_secs(10),
            bind_timeout: Duration::from_secs(30),
            volume_bind_timeout: Duration::from_secs(600),
        }
    }
}

/// A write that does not block scheduling.
#[derive(Debug)]
enum Write {
    Event(PodEvent),
    Unschedulable {
        namespace: String,
        name: String,
        message: String,
    },
}

/// How long the scheduling loop decides pods back to back before it lets the other tasks of
/// its runtime run.
const MAX_BUSY: Duration = Duration::from_millis(5);

/// The results of the binds metric (`result` label), in [`Handles::binds`]' order.
#[derive(Debug, Clone, Copy)]
enum BindResult {
    Bound,
    Conflict,
    Gone,
    Error,
}

impl BindResult {
    const ALL: [BindResult; 4] = [Self::Bound, Self::Conflict, Self::Gone, Self::Error];

    fn label(self) -> &'static str {
        match self {
            Self::Bound => "bound",
            Self::Conflict => "conflict",
            Self::Gone => "gone",
            Self::Error => "error",
        }
    }
}

/// The results of the scheduling-attempts metric (`result` label), in [`Handles::profiles`]'
/// order.
#[derive(Debug, Clone, Copy)]
enum AttemptResult {
    Scheduled,
    Unschedulable,
    Error,
}

impl AttemptResult {
    const ALL: [AttemptResult; 3] = [Self::Scheduled, Self::Unschedulable, Self::Error];

    fn label(self) -> &'static str {
        match self {
            Self::Scheduled => "scheduled",
            Self::Unschedulable => "unschedulable",
            Self::Error => "error",
        }
    }
}

/// The timed extension points, in [`Evaluation::timings`]' order.
const EXTENSION_POINTS: [&str; 3] = ["PreFilter", "Filter", "Score"];

/// The loop's metric handles, looked up in their families once when the scheduler is built:
/// a family lookup allocates its label's strings and hashes them under a lock, and the loop
/// made five per pod. Every series starts at zero, so a first error shows in `rate()`.
#[derive(Debug)]
struct Handles {
    /// Per profile: attempts by result ([`AttemptResult`]) and the extension points'
    /// durations ([`EXTENSION_POINTS`]).
    profiles: HashMap<String, ([Counter; 3], [Histogram; 3])>,
    /// Binds by result ([`BindResult`]).
    binds: [Counter; 4],
}

impl Handles {
    fn new(metrics: &Metrics, profiles: &Profiles) -> Handles {
        let attempts = |profile: &str| {
            AttemptResult::ALL.map(|result| {
                metrics
                    .schedule_attempts
                    .get_or_create(&ProfileResultLabel {
                        profile: profile.to_string(),
                        result: result.label().to_string(),
                    })
                    .clone()
            })
        };
        let phases = |profile: &str| {
            EXTENSION_POINTS.map(|point| {
                metrics
                    .extension_point_duration
                    .get_or_create(&ExtensionPointLabel {
                        extension_point: point.to_string(),
                        profile: profile.to_string(),
                    })
                    .clone()
            })
        };
        Handles {
            profiles: profiles
                .iter()
                .map(|p| (p.name.clone(), (attempts(&p.name), phases(&p.name))))
                .collect(),
            binds: BindResult::ALL.map(|result| {
                metrics
                    .binds
                    .get_or_create(&ResultLabel {
                        result: result.label().to_string(),
                    })
                    .clone()
            }),
        }
    }
}

/// The scheduler. Share it in an `Arc`.
#[derive(Debug)]
pub struct Scheduler {
    cache: Arc<ClusterCache>,
    queue: Arc<SchedulingQueue>,
    store: Arc<NodeStore>,
    profiles: Arc<Profiles>,
    metrics: Arc<Metrics>,
    api: KubeApi,
    leader: watch::Receiver<Leadership>,
    estimate: EstimatorBox,
    config: SchedulerConfig,
    binds: Arc<Semaphore>,
    writes: mpsc::Sender<Write>,
    write_rx: Mutex<Option<mpsc::Receiver<Write>>>,
    /// The last failure message reported per pod, so retries do not repeat Events.
    reported: Mutex<HashMap<String, String>>,
    /// Where each pod went and why, for `explain` and the web view.
    decisions: Arc<DecisionLog>,
    handles: Handles,
}

/// Debug-printable wrapper of the estimator.
struct EstimatorBox(Estimator);

impl std::fmt::Debug for EstimatorBox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Estimator")
    }
}

/// The loop's snapshot: rebuilt from the store now and then, patched with each assumption.
struct LocalSnapshot {
    snap: ClusterSnapshot,
    /// Indices of the nodes Kubernetes knows (agent-only entries and allocations left on
    /// deleted nodes are never candidates).
    candidates: Vec<usize>,
    built: Instant,
    epoch: u64,
    fresh: bool,
}

enum Outcome {
    Bound,
    Requeue,
}

/// What binding `info`'s claims on `node` writes (`None`: nothing to bind), or why the node
/// cannot take them after all.
fn volume_writes(info: &PodInfo, node: &NodeView) -> Result<Option<VolumeWrites>, String> {
    let Some(v) = info.volumes.as_ref().filter(|v| !v.to_bind.is_empty()) else {
        return Ok(None);
    };
    let plan =
        loadstar_policy::volume_binding::plan(&v.to_bind, &node.name, node.labels_or_empty())?;
    let w = VolumeWrites::of(&plan, &v.to_bind, &node.name);
    Ok((!w.is_empty()).then_some(w))
}

impl Scheduler {
    /// A scheduler over the cache, queue and store, binding through `api` while `leader`
    /// says so.
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        cache: Arc<ClusterCache>,
        queue: Arc<SchedulingQueue>,
        store: Arc<NodeStore>,
        profiles: Arc<Profiles>,
        metrics: Arc<Metrics>,
        api: KubeApi,
        leader: watch::Receiver<Leadership>,
        estimate: Estimator,
        config: SchedulerConfig,
    ) -> Scheduler {
        let (tx, rx) = mpsc::channel(8192);
        let handles = Handles::new(&metrics, &profiles);
        Scheduler {
            handles,
            binds: Arc::new(Semaphore::new(config.bind_concurrency.max(1))),
            cache,
            queue,
            store,
            profiles,
            metrics,
            api,
            leader,
            estimate: EstimatorBox(estimate),
            config,
            writes: tx,
            write_rx: Mutex::new(Some(rx)),
            reported: Mutex::new(HashMap::new()),
            decisions: Arc::new(DecisionLog::default()),
        }
    }

    /// Records decisions in `log` (by default in a log of its own with default limits).
    pub fn with_decisions(mut self, log: Arc<DecisionLog>) -> Scheduler {
        self.decisions = log;
        self
    }

    /// Counts a scheduling attempt of `profile` with `result`.
    fn attempt(&self, profile: &str, result: AttemptResult) {
        match self.handles.profiles.get(profile) {
            Some((attempts, _)) => {
                attempts[result as usize].inc();
            }
            // A pod of a profile this scheduler does not run (counted as an error).
            None => {
                self.metrics
                    .schedule_attempts
                    .get_or_create(&ProfileResultLabel {
                        profile: profile.to_string(),
                        result: result.label().to_string(),
                    })
                    .inc();
            }
        }
    }

    /// Observes where an evaluation spent its time.
    fn observe_phases(&self, profile: &str, ev: &Evaluation) {
        let t = ev.timings;
        let took = [t.prefilter, t.filter, t.score];
        match self.handles.profiles.get(profile) {
            Some((_, phases)) => {
                for (h, d) in phases.iter().zip(took) {
                    h.observe(d.as_secs_f64());
                }
            }
            None => {
                for (point, d) in EXTENSION_POINTS.iter().zip(took) {
                    self.metrics
                        .extension_point_duration
                        .get_or_create(&ExtensionPointLabel {
                            extension_point: (*point).to_string(),
                            profile: profile.to_string(),
                        })
                        .observe(d.as_secs_f64());
                }
            }
        }
    }

    /// Publishes the queue's depths and this replica's leadership every second while the
    /// scheduler lives.
    fn spawn_gauges(self: &Arc<Self>) {
        let weak = Arc::downgrade(self);
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            loop {
                tick.tick().await;
                let Some(this) = weak.upgrade() else { return };
                let d = this.queue.with(|q| q.depths());
                for (queue, n) in [
                    ("active", d.active),
                    ("backoff", d.backoff),
                    ("in_flight", d.in_flight),
                    ("gated", d.gated),
                ] {
                    this.metrics
                        .pending_pods
                        .get_or_create(&QueueLabel {
                            queue: queue.to_string(),
                        })
                        .set(i64::try_from(n).unwrap_or(i64::MAX));
                }
                this.metrics.leader.set(i64::from(this.is_leader()));
                this.metrics
                    .decisions
                    .set(i64::try_from(this.decisions.len()).unwrap_or(i64::MAX));
            }
        });
    }

    fn is_leader(&self) -> bool {
        self.leader.borrow().is_leader
    }

    /// Counts a bind with `result`.
    fn count(&self, result: BindResult) {
        self.handles.binds[result as usize].inc();
    }

    fn write(&self, w: Write) {
        match self.writes.try_send(w) {
            Ok(()) => {}
            Err(mpsc::error::TrySendError::Full(_)) => {
                debug!("event/status queue full; dropping a write");
            }
            Err(mpsc::error::TrySendError::Closed(_)) => {
                warn!("the event/status writer has stopped; dropping a write");
            }
        }
    }

    fn failed(&self, facts: &PodFacts, message: String) {
        let key = facts.key();
        {
            let mut reported = self.reported.lock().unwrap_or_else(|p| p.into_inner());
            if reported.get(&key) == Some(&message) {
                return;
            }
            if reported.len() > 50_000 {
                reported.clear();
            }
            reported.insert(key, message.clone());
        }
        info!(pod = %facts.key(), reason = %message, "pod is unschedulable");
        self.write(Write::Event(PodEvent {
            namespace: facts.namespace.clone(),
            name: facts.name.clone(),
            uid: facts.uid.clone(),
            type_: EventType::Warning,
            reason: REASON_FAILED,
            message: message.clone(),
        }));
        self.write(Write::Unschedulable {
            namespace: facts.namespace.clone(),
            name: facts.name.clone(),
            message,
        });
    }

    fn scheduled(&self, namespace: &str, name: &str, uid: &str, node: &str) {
        let key = format!("{namespace}/{name}");
        self.reported
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(&key);
        self.write(Write::Event(PodEvent {
            namespace: namespace.to_string(),
            name: name.to_string(),
            uid: uid.to_string(),
            type_: EventType::Normal,
            reason: REASON_SCHEDULED,
            message: format!("Successfully assigned {key} to {node}"),
        }));
    }

    /// Sends Events and status patches with bounded concurrency until the scheduler is dropped.
    fn spawn_writer(self: &Arc<Self>) {
        let Some(mut rx) = self
            .write_rx
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        else {
            return;
        };
        let api = self.api.clone();
        let limit = self.config.write_concurrency.max(1);
        // One task drives every write in flight: no task and client clone per Event.
        let writes = futures::stream::poll_fn(move |cx| rx.poll_recv(cx));
        tokio::spawn(async move {
            let api = &api;
            writes
                .for_each_concurrent(limit, |w| async move {
                    let write = async {
                        match &w {
                            Write::Event(ev) => api.event(ev).await,
                            Write::Unschedulable {
                                namespace,
                                name,
                                message,
                            } => api.mark_unschedulable(namespace, name, message).await,
                        }
                    };
                    // One write that panics must not end the task every write runs in.
                    match AssertUnwindSafe(write).catch_unwind().await {
                        Ok(Ok(()) | Err(ApiError::NotFound { .. })) => {}
                        Ok(Err(e)) => warn!(error = %e, "could not record scheduling outcome"),
                        Err(_) => error!("recording a scheduling outcome panicked; dropped"),
                    }
                })
                .await;
        });
    }

    fn refresh(&self, local: &mut Option<LocalSnapshot>, force: bool) {
        let epoch = self.cache.node_epoch();
        let stale = match local.as_ref() {
            None => true,
            Some(l) => {
                force && !l.fresh
                    || l.epoch != epoch
                    || (l.built.elapsed() >= self.config.snapshot_refresh
                        && self.store.generation() != l.snap.generation)
            }
        };
        if stale {
            let snap = self.store.snapshot_owned(local.as_ref().map(|l| &l.snap));
            *local = Some(LocalSnapshot {
                candidates: kube_nodes(&snap),
                snap,
                built: Instant::now(),
                epoch,
                fresh: true,
            });
        }
    }

    /// Runs the loop until `shutdown` resolves, then waits (bounded) for bindings in flight.
    pub async fn run(self: Arc<Self>, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        self.spawn_writer();
        self.spawn_gauges();
        let mut synced = self.cache.synced();
        tokio::select! {
            _ = &mut shutdown => return,
            _ = synced.wait_for(|s| s.all()) => {}
        }
        info!("caches synced; scheduler ready");
        let mut leader = self.leader.clone();
        let mut rng = SmallRng::from_rng(&mut rand::rng());
        let mut local: Option<LocalSnapshot> = None;
        // Where the next sampled cycle starts (kube-scheduler's `nextStartNodeIndex`).
        let mut cursor = SampleCursor::default();
        let mut busy_since = Instant::now();
        loop {
            // Deciding is synchronous, and with pods waiting the loop yields only when tokio's
            // budget runs out (~100 pods): on one runtime worker (the default) the watches,
            // lease renewals, probes and the writes of the bindings just decided would wait
            // that long behind a backlog of slow decisions (preemption, 5 000 nodes).
            if busy_since.elapsed() >= MAX_BUSY {
                tokio::task::yield_now().await;
                busy_since = Instant::now();
            }
            tokio::select! {
                _ = &mut shutdown => break,
                r = leader.wait_for(|l| l.is_leader) => if r.is_err() { break },
            }
            let pod = tokio::select! {
                _ = &mut shutdown => break,
                _ = leader.wait_for(|l| !l.is_leader) => continue,
                p = self.queue.pop() => p,
            };
            if !self.is_leader() {
                self.queue.with(|q| q.requeue_now(&pod.key));
                continue;
            }
            let Ok(permit) = self.binds.clone().acquire_owned().await else {
                break;
            };
            let span = info_span!(
                "schedule",
                pod = %pod.key,
                attempt = pod.attempts,
                node = tracing::field::Empty
            );
            {
                let _enter = span.enter();
                self.schedule_one(pod, permit, &mut local, &mut rng, &mut cursor, &span);
            }
        }
        info!("scheduler stopping: waiting for bindings in flight");
        let all = u32::try_from(self.config.bind_concurrency.max(1)).unwrap_or(u32::MAX);
        match tokio::time::timeout(self.config.drain_timeout, self.binds.acquire_many(all)).await {
            Ok(_) => info!("bindings drained"),
            Err(_) => {
                warn!(timeout = ?self.config.drain_timeout, "bindings still in flight at shutdown")
            }
        }
    }

    fn schedule_one(
        self: &Arc<Self>,
        pod: QueuedPod,
        permit: tokio::sync::OwnedSemaphorePermit,
        local: &mut Option<LocalSnapshot>,
        rng: &mut SmallRng,
        cursor: &mut SampleCursor,
        span: &tracing::Span,
    ) {
        let Some(facts) = self.cache.pod(&pod.key) else {
            self.queue.with(|q| q.done(&pod.key));
            return;
        };
        if facts.node_name.is_some() || facts.deleting {
            self.queue.with(|q| q.done(&pod.key));
            return;
        }
        // Replaced meanwhile by a gated pod of the same name: this attempt is stale. The
        // cache holds a gated pod of ours in the queue already; another scheduler's is not
        // ours to keep.
        if !facts.scheduling_gates.is_empty() {
            if !self.profiles.contains(&facts.scheduler_name) {
                self.queue.with(|q| q.done(&pod.key));
            }
            return;
        }
        // Already placed by this scheduler, its binding not yet seen in the watch: an older
        // update of the pod (e.g. an earlier Unschedulable condition) requeued it. Deciding
        // again would find its own requests in the way, report it unschedulable and could
        // even preempt for it. A failed binding forgets the placement before requeueing.
        if self.cache.placement(&facts.uid).is_some() {
            self.queue.with(|q| q.done(&pod.key));
            return;
        }
        let info = match &facts.info {
            Ok(i) => i,
            Err(e) => {
                self.attempt(&facts.scheduler_name, AttemptResult::Error);
                self.failed(&facts, e.to_string());
                self.queue
                    .with(|q| q.requeue_backoff(&pod.key, Instant::now()));
                return;
            }
        };
        let Ok(profile) = self.profiles.get(&facts.scheduler_name) else {
            self.queue.with(|q| q.done(&pod.key));
            return;
        };
        // A retried pod sees a snapshot at least as new as the event that woke it.
        self.refresh(local, pod.attempts > 0);
        // A cluster change while this pod was being popped (a node appeared) may have made
        // higher-priority pods active again: they go first, as the queue's order says.
        if self
            .queue
            .with(|q| q.best_active_priority())
            .is_some_and(|best| best > pod.priority)
        {
            debug!("a higher-priority pod became schedulable meanwhile; requeued");
            self.queue.with(|q| q.requeue_now(&pod.key));
            return;
        }
        let Some(l) = local.as_mut() else { return };
        l.fresh = false;
        // Pods nominated by earlier preemptions, at least as important as this one, hold
        // their nodes' room (kube-scheduler's first filter pass with nominated pods).
        let nominated: Vec<Nomination> = self
            .cache
            .nominations()
            .into_iter()
            .filter(|n| n.pod.priority >= info.priority && n.pod.uid != info.uid)
            .collect();
        let held = (!nominated.is_empty()).then(|| with_nominated(&l.snap, &nominated));
        let view = held.as_ref().unwrap_or(&l.snap);
        let limits = self.decisions.limits();
        // The best few nodes are sorted for the decision record; without one, only the best.
        let keep = if limits.capacity == 0 {
            1
        } else {
            limits.ranked.max(1)
        };
        let ev = profile.evaluate_sampled(view, info, Some(&l.candidates), keep, rng, cursor);
        self.observe_phases(&profile.name, &ev);
        let decision = |ev: &Evaluation| {
            Decision::of(
                Source::Scheduler,
                info,
                &profile.name,
                pod.attempts.saturating_add(1),
                view,
                ev,
                limits,
            )
        };
        let Some(best) = ev.best() else {
            self.attempt(&profile.name, AttemptResult::Unschedulable);
            self.failed(&facts, ev.summary());
            self.decisions
                .record(decision(&ev), Recorded::Unschedulable);
            if let Some(node) = self.preempt(&facts, info, profile, view, &ev, rng) {
                self.decisions.set_outcome(
                    &facts.namespace,
                    &facts.name,
                    &facts.uid,
                    Recorded::Nominated { node },
                );
            }
            self.queue
                .with(|q| q.requeue_backoff(&pod.key, Instant::now()));
            return;
        };
        let index = best.index;
        let total = best.total;
        let node = l.snap.nodes()[index].name.clone();
        let writes = match volume_writes(info, &l.snap.nodes()[index]) {
            Ok(w) => w,
            Err(reason) => {
                self.attempt(&profile.name, AttemptResult::Error);
                self.decisions.record(
                    decision(&ev),
                    Recorded::BindFailed {
                        node: node.to_string(),
                        error: reason.clone(),
                    },
                );
                self.failed(&facts, reason);
                self.queue
                    .with(|q| q.requeue_backoff(&pod.key, Instant::now()));
                return;
            }
        };
        let record = decision(&ev);
        let estimate = (self.estimate.0)(info);
        // The nominated view shares the snapshot's digest tables as seeds: let them go, so
        // the assumed node's row can be patched in place.
        drop(held);
        match self
            .cache
            .assume(info, Some(facts.clone()), &node, estimate)
        {
            Ok(alloc) => l.snap.set_alloc(index, alloc),
            Err(e) => {
                debug!(error = %e, "pod already placed; not binding it again");
                self.queue
                    .with(|q| q.requeue_backoff(&pod.key, Instant::now()));
                return;
            }
        }
        if let Some(w) = &writes {
            self.cache.reservations().reserve(w);
        }
        self.attempt(&profile.name, AttemptResult::Scheduled);
        self.decisions.record(
            record,
            Recorded::Assumed {
                node: node.to_string(),
            },
        );
        span.record("node", &*node);
        debug!(node = %node, score = total, "assumed");
        let this = self.clone();
        let bind_span = span.clone();
        tokio::spawn(
            async move {
                let outcome = this
                    .bind_assumed(&facts, &node, pod.enqueued_at, writes.as_ref())
                    .await;
                match outcome {
                    Outcome::Bound => this.queue.with(|q| q.done(&pod.key)),
                    Outcome::Requeue => this
                        .queue
                        .with(|q| q.requeue_backoff(&pod.key, Instant::now())),
                }
                drop(permit);
            }
            .instrument(bind_span),
        );
    }

    /// DefaultPreemption for a pod no node fits: nominate it to the chosen node at once
    /// (so lower-priority pods leave that room alone), then delete the victims gracefully
    /// with a `Preempted` Event each, set the pod's `nominatedNodeName` and clear the
    /// nominations of lower-priority pods on that node. The pod itself stays queued: it
    /// binds once the victims are gone.
    fn preempt(
        self: &Arc<Self>,
        facts: &Arc<PodFacts>,
        info: &PodInfo,
        profile: &Profile,
        snap: &ClusterSnapshot,
        ev: &Evaluation,
        rng: &mut SmallRng,
    ) -> Option<String> {
        let budgets = self.cache.budgets().all();
        let result = |r: &str| ResultLabel {
            result: r.to_string(),
        };
        let proposal = match profile.preempt(snap, info, ev, &budgets, rng) {
            PreemptionOutcome::Ineligible(why) => {
                self.metrics
                    .preemptions
                    .get_or_create(&result("ineligible"))
                    .inc();
                debug!(%why, "not preempting");
                return None;
            }
            PreemptionOutcome::NoCandidates { potential } => {
                self.metrics
                    .preemptions
                    .get_or_create(&result("no_candidates"))
                    .inc();
                debug!(potential, "preemption would not help");
                if potential == 0 && info.nominated_node.is_some() {
                    // Its nominated node can no longer take it either.
                    self.cache.clear_nomination(&facts.key());
                    let (api, ns, name) = (
                        self.api.clone(),
                        facts.namespace.clone(),
                        facts.name.clone(),
                    );
                    tokio::spawn(async move {
                        if let Err(e) = api.set_nominated_node(&ns, &name, None).await {
                            debug!(error = %e, "could not clear a nomination");
                        }
                    });
                }
                return None;
            }
            PreemptionOutcome::Proposal(p) => p,
        };
        let chosen = proposal.chosen()?;
        let node = snap.nodes()[chosen.index].name.to_string();
        self.metrics
            .preemptions
            .get_or_create(&result("preempted"))
            .inc();
        info!(
            node,
            victims = chosen.victims.len(),
            pdb_violations = chosen.pdb_violations,
            candidates = proposal.candidates.len(),
            "preempting"
        );
        let key = facts.key();
        let node_name = node.clone();
        self.cache.nominate(&key, &node, info);
        let displaced: Vec<Nomination> = self
            .cache
            .nominations()
            .into_iter()
            .filter(|n| n.node == node && n.pod.priority < info.priority)
            .collect();
        for n in &displaced {
            self.cache.clear_nomination(&n.key);
        }
        let victims = chosen.victims.clone();
        let this = self.clone();
        let facts = facts.clone();
        tokio::spawn(
            async move {
                for v in &victims {
                    match this.api.delete_pod(&v.namespace, &v.name, &v.uid).await {
                        Ok(()) => {
                            this.metrics.preemption_victims.inc();
                            this.write(Write::Event(PodEvent {
                                namespace: v.namespace.clone(),
                                name: v.name.clone(),
                                uid: v.uid.clone(),
                                type_: EventType::Normal,
                                reason: REASON_PREEMPTED,
                                message: format!("Preempted by {key} on node {node}"),
                            }));
                        }
                        Err(ApiError::NotFound { .. } | ApiError::Conflict { .. }) => {}
                        Err(e) => warn!(error = %e, "could not delete a preemption victim"),
                    }
                }
                if let Err(e) = this
                    .api
                    .set_nominated_node(&facts.namespace, &facts.name, Some(&node))
                    .await
                {
                    debug!(error = %e, "could not record the nominated node");
                }
                for n in displaced {
                    let (ns, name) = n.key.split_once('/').unwrap_or(("", &n.key));
                    if let Err(e) = this.api.set_nominated_node(ns, name, None).await {
                        debug!(error = %e, "could not clear a displaced nomination");
                    }
                }
            }
            .in_current_span(),
        );
        Some(node_name)
    }

    /// Binds the claims of a pod assumed on `node` (their volumes already reserved), then
    /// releases the reservations; on failure also forgets the assumption and reports it.
    async fn bind_pod_volumes(
        &self,
        facts: &PodFacts,
        node: &str,
        w: &VolumeWrites,
    ) -> Result<(), VolumeBindError> {
        let cache = self.cache.clone();
        let result = volume_binder::bind_volumes(
            &self.api,
            &facts.key(),
            node,
            w,
            self.config.volume_bind_timeout,
            move || cache.volume_stores().cloned(),
        )
        .await;
        self.cache.reservations().release(w);
        if let Err(e) = &result {
            self.count(BindResult::Error);
            warn!(error = %e, node, "binding volumes failed; will retry");
            self.cache.forget(&facts.uid);
            self.failed(facts, e.to_string());
        }
        result
    }

    /// Binds an assumed pod (its claims first); forgets the assumption unless bound.
    async fn bind_assumed(
        &self,
        facts: &PodFacts,
        node: &str,
        enqueued_at: Instant,
        writes: Option<&VolumeWrites>,
    ) -> Outcome {
        if !self.is_leader() {
            // Lost the lease between assuming and binding: leave it to the new leader.
            if let Some(w) = writes {
                self.cache.reservations().release(w);
            }
            self.cache.forget(&facts.uid);
            return Outcome::Requeue;
        }
        if let Some(w) = writes
            && let Err(e) = self.bind_pod_volumes(facts, node, w).await
        {
            self.decisions.set_outcome(
                &facts.namespace,
                &facts.name,
                &facts.uid,
                Recorded::BindFailed {
                    node: node.to_string(),
                    error: e.to_string(),
                },
            );
            return Outcome::Requeue;
        }
        let outcome = self.bind_api(facts, node, enqueued_at).await;
        let recorded = match &outcome {
            Ok(()) => Recorded::Bound {
                node: node.to_string(),
            },
            Err(error) => Recorded::BindFailed {
                node: node.to_string(),
                error: error.clone(),
            },
        };
        self.decisions
            .set_outcome(&facts.namespace, &facts.name, &facts.uid, recorded);
        match outcome {
            Ok(()) => Outcome::Bound,
            Err(_) => Outcome::Requeue,
        }
    }

    /// The binding call itself: `Ok` when bound (or the pod is gone), else why it failed.
    async fn bind_api(
        &self,
        facts: &PodFacts,
        node: &str,
        enqueued_at: Instant,
    ) -> Result<(), String> {
        let started = Instant::now();
        let bind = self
            .api
            .bind(&facts.namespace, &facts.name, &facts.uid, node);
        let result = tokio::time::timeout(self.config.bind_timeout, bind).await;
        self.metrics
            .bind_duration
            .observe(started.elapsed().as_secs_f64());
        let Ok(result) = result else {
            self.count(BindResult::Error);
            warn!(node, timeout = ?self.config.bind_timeout, "binding timed out; will retry");
            self.cache.forget(&facts.uid);
            return Err(format!(
                "binding timed out after {:?}",
                self.config.bind_timeout
            ));
        };
        match result {
            Ok(()) => {
                self.count(BindResult::Bound);
                self.metrics
                    .scheduling_latency
                    .observe(enqueued_at.elapsed().as_secs_f64());
                debug!(node, "bound");
                self.scheduled(&facts.namespace, &facts.name, &facts.uid, node);
                Ok(())
            }
            // A conflict usually means another scheduler bound the pod, but the API server
            // also answers 409 when etcd fails under the binding ("Operation cannot be
            // fulfilled on pods/binding …: rpc error: code = Unavailable", seen when etcd was
            // killed mid-burst): the pod may well be unbound. Retry with backoff, as
            // kube-scheduler does for every binding error; once the watch shows the pod
            // bound, the queue drops it and the retry never happens.
            Err(ApiError::Conflict { message, .. }) => {
                self.count(BindResult::Conflict);
                info!(node, %message, "binding conflict; will retry unless the pod is bound meanwhile");
                self.cache.forget(&facts.uid);
                Err(format!("conflict: {message}"))
            }
            Err(ApiError::NotFound { .. }) => {
                self.count(BindResult::Gone);
                self.cache.forget(&facts.uid);
                Ok(())
            }
            Err(e) => {
                self.count(BindResult::Error);
                warn!(error = %e, node, "binding failed; will retry");
                self.cache.forget(&facts.uid);
                Err(e.to_string())
            }
        }
    }
}

/// `snap` with each nominated pod counted on its node (unless already placed there).
fn with_nominated(snap: &ClusterSnapshot, nominated: &[Nomination]) -> ClusterSnapshot {
    let mut view = snap.clone();
    view.seed_digests_from(snap);
    for n in nominated {
        if let Some(&i) = view.index.get(n.node.as_str()) {
            let node = &mut view.nodes_mut()[i];
            if !node.alloc.pods.iter().any(|p| p.uid == n.pod.uid) {
                Arc::make_mut(&mut node.alloc).admit(n.pod.clone());
            }
        }
    }
    view
}

/// Indices of the snapshot's nodes that Kubernetes knows.
fn kube_nodes(snap: &ClusterSnapshot) -> Vec<usize> {
    snap.nodes()
        .iter()
        .enumerate()
        .filter(|(_, n)| n.kube.is_some())
        .map(|(i, _)| i)
        .collect()
}

fn profile_error(e: ProfileError) -> ClusterError {
    match e {
        ProfileError::NoneConfigured => ClusterError::FailedPrecondition(e.to_string()),
        ProfileError::Unknown { .. } => ClusterError::NotFound(e.to_string()),
    }
}

fn cluster_error(e: ApiError) -> ClusterError {
    match e {
        ApiError::Conflict { .. } => ClusterError::Conflict(e.to_string()),
        ApiError::NotFound { .. } => ClusterError::NotFound(e.to_string()),
        _ => ClusterError::Unavailable(e.to_string()),
    }
}

/// The [`Scheduler`] as the `Scheduler.Bind` service's binder: each call runs on the runtime
/// the scheduler was started on. The API connections a call opens (and the scheduler's own
/// bindings they carry afterwards) then belong to that runtime, not to the gRPC runtime that
/// serves the call, which stops first at shutdown while bindings still drain.
#[derive(Debug)]
pub struct SchedulerBinder {
    scheduler: Arc<Scheduler>,
    runtime: tokio::runtime::Handle,
}

impl SchedulerBinder {
    /// A binder for `scheduler`, on the runtime this is called on.
    pub fn new(scheduler: Arc<Scheduler>) -> SchedulerBinder {
        SchedulerBinder {
            scheduler,
            runtime: tokio::runtime::Handle::current(),
        }
    }
}

#[async_trait::async_trait]
impl Binder for SchedulerBinder {
    async fn bind(&self, request: BindRequest) -> Result<BindOutcome, ClusterError> {
        let scheduler = self.scheduler.clone();
        self.runtime
            .spawn(async move { Binder::bind(&*scheduler, request).await })
            .await
            .unwrap_or_else(|e| Err(ClusterError::Unavailable(format!("binding task: {e}"))))
    }
}

#[async_trait::async_trait]
impl Binder for Scheduler {
    async fn bind(&self, request: BindRequest) -> Result<BindOutcome, ClusterError> {
        let leadership = self.leader.borrow().clone();
        if !leadership.is_leader {
            return Err(ClusterError::Unavailable(match leadership.holder {
                Some(h) => format!("this scorer is not the leader; the leader is {h}"),
                None => "this scorer is not the leader and no leader is known yet".to_string(),
            }));
        }
        if !self.cache.synced().borrow().all() {
            return Err(ClusterError::Unavailable(
                "the cluster cache has not finished its first list yet; retry shortly".to_string(),
            ));
        }
        let ns = if request.namespace.is_empty() {
            "default".to_string()
        } else {
            request.namespace.clone()
        };
        let key = format!("{ns}/{}", request.name);
        // How messages (and the span) name the pod: the client's names, bounded.
        let shown = loadstar_common::text::pod_key(&ns, &request.name);
        let span = info_span!("bind_request", pod = %shown);
        async move {
            let facts = self.cache.pod(&key).ok_or_else(|| {
                ClusterError::NotFound(format!("pod {shown} is not in the cluster"))
            })?;
            if let Some(n) = &facts.node_name {
                return Err(ClusterError::FailedPrecondition(format!(
                    "pod {shown} is already bound to node {n}"
                )));
            }
            if !facts.scheduling_gates.is_empty() {
                return Err(ClusterError::FailedPrecondition(format!(
                    "pod {shown} is held by its scheduling gates ({}): it may be bound once \
                     they are removed",
                    loadstar_common::text::quote_list(
                        facts.scheduling_gates.iter().map(String::as_str)
                    )
                )));
            }
            let info = facts
                .info
                .as_ref()
                .map_err(|e| ClusterError::FailedPrecondition(e.to_string()))?;
            if !request.other_schedulers && !self.profiles.contains(&facts.scheduler_name) {
                return Err(ClusterError::PermissionDenied(format!(
                    "pod {shown} has schedulerName {}, which is not one of this scorer's \
                     profiles ({}): it is another scheduler's to place (start the scorer \
                     with --bind-other-schedulers to allow binding it)",
                    loadstar_common::text::quote(&facts.scheduler_name),
                    self.profiles
                        .iter()
                        .map(|p| p.name.as_str())
                        .collect::<Vec<_>>()
                        .join(", ")
                )));
            }
            let profile_name = if !request.profile.is_empty() {
                request.profile.as_str()
            } else if self.profiles.contains(&facts.scheduler_name) {
                facts.scheduler_name.as_str()
            } else {
                ""
            };
            let profile = self
                .profiles
                .get(profile_name)
                .map_err(profile_error)?
                .clone();
            let snap = self.store.snapshot_now();
            let candidates = if request.node_name.is_empty() {
                kube_nodes(&snap)
            } else {
                let i = snap
                    .index
                    .get(request.node_name.as_str())
                    .filter(|&&i| snap.nodes()[i].kube.is_some())
                    .ok_or_else(|| {
                        ClusterError::NotFound(format!(
                            "node {} is not a Kubernetes node known to this scorer",
                            loadstar_common::text::quote(&request.node_name)
                        ))
                    })?;
                vec![*i]
            };
            let mut rng = SmallRng::from_rng(&mut rand::rng());
            let ev = profile.evaluate(&snap, info, Some(&candidates), 0, &mut rng);
            self.observe_phases(&profile.name, &ev);
            let decision = Decision::of(
                Source::Scheduler,
                info,
                &profile.name,
                1,
                &snap,
                &ev,
                self.decisions.limits(),
            );
            let Some(best) = ev.best() else {
                self.attempt(&profile.name, AttemptResult::Unschedulable);
                self.decisions.record(decision, Recorded::Unschedulable);
                self.failed(&facts, ev.summary());
                return Err(ClusterError::FailedPrecondition(ev.summary()));
            };
            self.attempt(&profile.name, AttemptResult::Scheduled);
            let node = snap.nodes()[best.index].name.clone();
            self.decisions.record(
                decision,
                Recorded::Assumed {
                    node: node.to_string(),
                },
            );
            let writes = volume_writes(info, &snap.nodes()[best.index])
                .map_err(ClusterError::FailedPrecondition)?;
            self.cache
                .assume(info, Some(facts.clone()), &node, (self.estimate.0)(info))
                .map_err(|e| ClusterError::Aborted(e.to_string()))?;
            self.cache.bump_epoch();
            let started = Instant::now();
            if let Some(w) = &writes {
                self.cache.reservations().reserve(w);
                self.bind_pod_volumes(&facts, &node, w)
                    .await
                    .map_err(|e| ClusterError::Aborted(e.to_string()))?;
            }
            match self.api.bind(&ns, &facts.name, &facts.uid, &node).await {
                Ok(()) => {
                    self.count(BindResult::Bound);
                    self.metrics
                        .scheduling_latency
                        .observe(started.elapsed().as_secs_f64());
                    self.decisions.set_outcome(
                        &ns,
                        &facts.name,
                        &facts.uid,
                        Recorded::Bound {
                            node: node.to_string(),
                        },
                    );
                    self.scheduled(&ns, &facts.name, &facts.uid, &node);
                    self.queue.with(|q| q.done(&key));
                    Ok(BindOutcome {
                        node_name: node.to_string(),
                        profile,
                        snapshot: snap,
                        evaluation: ev,
                    })
                }
                Err(e) => {
                    self.count(BindResult::Error);
                    self.cache.forget(&facts.uid);
                    self.decisions.set_outcome(
                        &ns,
                        &facts.name,
                        &facts.uid,
                        Recorded::BindFailed {
                            node: node.to_string(),
                            error: e.to_string(),
                        },
                    );
                    Err(cluster_error(e))
                }
            }
        }
        .instrument(span)
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;
    use std::future::Future;
    use std::pin::Pin;
    use std::task::{Context, Poll};

    use ::kube::client::Body;
    use serde_json::json;

    use super::*;
    use crate::leader::always_leader;
    use loadstar_store::StoreConfig;

    type Log = Arc<Mutex<Vec<(String, String, String)>>>;

    /// A request body as the log shows it: JSON as sent, a protobuf Binding or Event as the
    /// JSON of the fields the tests look at.
    fn readable(content_type: &str, body: &[u8]) -> String {
        use crate::protobuf as pb;
        use prost::Message;
        if content_type != pb::CONTENT_TYPE {
            return String::from_utf8_lossy(body).to_string();
        }
        let (tm, raw) = pb::open(body).expect("a protobuf body");
        match tm.kind.as_str() {
            "Binding" => {
                let b = pb::Binding::decode(raw.as_slice()).expect("binding");
                let (meta, target) = (b.metadata.unwrap_or_default(), b.target.unwrap_or_default());
                json!({"metadata": {"name": meta.name, "uid": meta.uid},
                       "target": {"kind": target.kind, "name": target.name}})
                .to_string()
            }
            "Event" => {
                let e = pb::Event::decode(raw.as_slice()).expect("event");
                let about = e.involved_object.unwrap_or_default();
                json!({"involvedObject": {"name": about.name, "uid": about.uid},
                       "reason": e.reason, "message": e.message, "type": e.type_})
                .to_string()
            }
            other => panic!("unexpected protobuf kind {other}"),
        }
    }

    /// An API server stand-in: records every request and answers bindings of the pods in
    /// `conflict` with 409, everything else with success, in protobuf when asked for it.
    #[derive(Clone)]
    struct MockApi {
        log: Log,
        conflict: Arc<HashSet<String>>,
    }

    impl tower::Service<http::Request<Body>> for MockApi {
        type Response = http::Response<Body>;
        type Error = std::convert::Infallible;
        type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

        fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
            Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<Body>) -> Self::Future {
            let log = self.log.clone();
            let conflict = self.conflict.clone();
            let header = |name| {
                req.headers()
                    .get(name)
                    .and_then(|v| v.to_str().ok())
                    .unwrap_or_default()
                    .to_string()
            };
            let (content_type, accept) = (
                header(http::header::CONTENT_TYPE),
                header(http::header::ACCEPT),
            );
            Box::pin(async move {
                let method = req.method().to_string();
                let path = req.uri().path().to_string();
                let body = req
                    .into_body()
                    .collect_bytes()
                    .await
                    .map(|b| readable(&content_type, &b))
                    .unwrap_or_default();
                let pod = path.split('/').nth(6).unwrap_or_default().to_string();
                let (code, reply) =
                    if method == "PATCH" && path.starts_with("/api/v1/persistentvolumes/") {
                        // The written volume, as far as the scheduler reads it.
                        (200, json!({"metadata": {"resourceVersion": "11"}}))
                    } else if path.ends_with("/binding") && conflict.contains(&pod) {
                        (
                            409,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                               "message": "already assigned", "reason": "Conflict", "code": 409}),
                        )
                    } else {
                        (
                            201,
                            json!({"kind": "Status", "apiVersion": "v1", "status": "Success"}),
                        )
                    };
                log.lock().expect("log").push((method, path, body));
                let (reply_type, reply) = if accept == crate::protobuf::CONTENT_TYPE {
                    let status = crate::protobuf::Status {
                        status: reply["status"].as_str().unwrap_or_default().into(),
                        message: reply["message"].as_str().unwrap_or_default().into(),
                        reason: reply["reason"].as_str().unwrap_or_default().into(),
                        code,
                    };
                    (
                        crate::protobuf::CONTENT_TYPE,
                        crate::protobuf::body("v1", "Status", &status),
                    )
                } else {
                    ("application/json", reply.to_string().into_bytes())
                };
                Ok(http::Response::builder()
                    .status(u16::try_from(code).expect("an HTTP code"))
                    .header("content-type", reply_type)
                    .body(Body::from(reply))
                    .expect("response"))
            })
        }
    }

    fn node(name: &str, cpu: &str) -> k8s_openapi::api::core::v1::Node {
        serde_json::from_value(json!({
            "metadata": {"name": name},
            "status": {"allocatable": {"cpu": cpu, "memory": "16Gi", "pods": "110"},
                       "conditions": [{"type": "Ready", "status": "True"}]}
        }))
        .expect("node")
    }

    fn pod(name: &str, cpu: &str) -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(json!({
            "metadata": {"name": name, "namespace": "ns", "uid": format!("uid-{name}")},
            "spec": {"schedulerName": "loadstar",
                     "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
        }))
        .expect("pod")
    }

    fn setup(
        conflict: &[&str],
        leader: watch::Receiver<Leadership>,
    ) -> (Arc<Scheduler>, Arc<ClusterCache>, Log) {
        let store = Arc::new(NodeStore::new(StoreConfig::default()));
        let queue = Arc::new(SchedulingQueue::new());
        let profiles = Arc::new(Profiles::new(
            loadstar_policy::config::ScorerConfig::embedded_default()
                .build_profiles()
                .expect("default profiles"),
        ));
        let cache = Arc::new(ClusterCache::new(
            store.clone(),
            queue.clone(),
            profiles.clone(),
        ));
        let log: Log = Arc::default();
        let mock = MockApi {
            log: log.clone(),
            conflict: Arc::new(conflict.iter().map(|s| s.to_string()).collect()),
        };
        let client = ::kube::Client::new(mock, "default");
        let api = KubeApi::new(client.clone(), client, "loadstar-scorer", "test-1");
        let scheduler = Arc::new(Scheduler::new(
            cache.clone(),
            queue,
            store,
            profiles,
            Metrics::new(),
            api,
            leader,
            Arc::new(|_: &PodInfo| (250, 1 << 28)),
            SchedulerConfig::default(),
        ));
        (scheduler, cache, log)
    }

    /// A scheduler loop running in the background until [`Running::stop`].
    struct Running {
        stop: Arc<tokio::sync::Notify>,
        handle: tokio::task::JoinHandle<()>,
    }

    impl Running {
        fn start(scheduler: &Arc<Scheduler>) -> Running {
            let stop = Arc::new(tokio::sync::Notify::new());
            let handle = tokio::spawn(scheduler.clone().run({
                let stop = stop.clone();
                async move { stop.notified().await }
            }));
            Running { stop, handle }
        }

        async fn stop(self) {
            self.stop.notify_one();
            self.handle.await.expect("scheduler stops");
        }
    }

    async fn wait_for(log: &Log, what: &str, f: impl Fn(&[(String, String, String)]) -> bool) {
        for _ in 0..500 {
            if f(&log.lock().expect("log")) {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!(
            "timed out waiting for {what}: {:?}",
            log.lock().expect("log")
        );
    }

    /// A pod of `priority` bound to `node`.
    fn bound(name: &str, cpu: &str, priority: i32, node: &str) -> k8s_openapi::api::core::v1::Pod {
        let mut p = pod(name, cpu);
        let spec = p.spec.as_mut().expect("spec");
        spec.priority = Some(priority);
        spec.node_name = Some(node.to_string());
        spec.scheduler_name = Some("other".to_string());
        p
    }

    #[tokio::test]
    async fn preempts_the_lowest_priority_pod_nominates_and_holds_the_node() {
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        cache.nodes_relist_started();
        cache.apply_node(&node("n1", "4"));
        cache.nodes_relist_done();
        cache.pods_relist_started();
        cache.apply_pod(&bound("low", "2", 1, "n1"));
        cache.apply_pod(&bound("mid", "2", 5, "n1"));
        let mut high = pod("high", "2");
        high.spec.as_mut().expect("spec").priority = Some(10);
        cache.apply_pod(&high);
        cache.pods_relist_done();
        cache.namespaces_changed([]);
        cache.server_version("1", "20");
        let running = Running::start(&scheduler);
        wait_for(&log, "the victim's deletion and the nomination", |l| {
            l.iter().any(|e| e.0 == "DELETE") && l.iter().any(|e| e.2.contains("nominatedNodeName"))
        })
        .await;
        let entries = log.lock().expect("log").clone();
        let deletes: Vec<&(String, String, String)> =
            entries.iter().filter(|e| e.0 == "DELETE").collect();
        assert_eq!(deletes.len(), 1, "{entries:?}");
        assert_eq!(deletes[0].1, "/api/v1/namespaces/ns/pods/low");
        assert!(
            deletes[0].2.contains("uid-low"),
            "UID precondition: {:?}",
            deletes[0]
        );
        wait_for(&log, "the Preempted event", |l| {
            l.iter()
                .any(|e| e.2.contains("Preempted by ns/high on node n1"))
        })
        .await;
        let nomination = entries
            .iter()
            .find(|e| e.2.contains("nominatedNodeName"))
            .expect("nomination patch");
        assert_eq!(nomination.1, "/api/v1/namespaces/ns/pods/high/status");
        assert!(nomination.2.contains("\"n1\""), "{nomination:?}");
        // A lower-priority pod that would fit once `low` leaves does not take the room
        // (held by the nomination until `high` binds, then by `high`), and preempts nobody:
        // `mid` outranks it. `with_nominated` is checked on its own below.
        let mut small = pod("small", "2");
        small.spec.as_mut().expect("spec").priority = Some(3);
        cache.apply_pod(&bound("low", "2", 1, "n1"));
        cache.delete_pod(&bound("low", "2", 1, "n1"));
        cache.apply_pod(&small);
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            cache.placement("uid-small").is_none(),
            "the nominated pod's room was taken"
        );
        // The nominated pod binds there.
        wait_for(&log, "high bound", |l| {
            l.iter().any(|e| e.1.ends_with("/pods/high/binding"))
        })
        .await;
        assert_eq!(
            cache.placement("uid-high").map(|p| p.0),
            Some("n1".to_string())
        );
        let deletes = log
            .lock()
            .expect("log")
            .iter()
            .filter(|e| e.0 == "DELETE")
            .count();
        assert_eq!(deletes, 1, "nobody else was evicted");
        running.stop().await;
    }

    #[tokio::test]
    async fn a_pod_already_placed_here_is_not_decided_again() {
        // `p` is assumed on n1 (its binding in flight) when an older update of it requeues
        // it. Deciding again, it would find its own requests in the way, report itself
        // unschedulable and preempt `low` for nothing.
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        cache.nodes_relist_started();
        cache.apply_node(&node("n1", "4"));
        cache.nodes_relist_done();
        cache.pods_relist_started();
        cache.apply_pod(&bound("low", "2", 1, "n1"));
        let mut p = pod("p", "2");
        p.spec.as_mut().expect("spec").priority = Some(10);
        cache.pods_relist_done();
        cache.namespaces_changed([]);
        cache.server_version("1", "20");
        let facts = {
            cache.apply_pod(&p);
            cache.pod("ns/p").expect("cached")
        };
        let info = facts.info.as_ref().expect("convertible").clone();
        cache
            .assume(&info, None, &std::sync::Arc::from("n1"), (0, 0))
            .expect("assumed");
        let running = Running::start(&scheduler);
        tokio::time::sleep(Duration::from_millis(300)).await;
        let entries = log.lock().expect("log").clone();
        assert!(
            !entries
                .iter()
                .any(|e| e.0 == "DELETE" || e.2.contains("FailedScheduling")),
            "{entries:?}"
        );
        running.stop().await;
    }

    #[tokio::test]
    async fn nominated_pods_count_on_their_node_once() {
        let (scheduler, cache, _) = setup(&[], always_leader("test-1"));
        cache.apply_node(&node("n1", "4"));
        let mut high = pod("high", "2");
        high.spec.as_mut().expect("spec").priority = Some(10);
        cache.apply_pod(&high);
        let facts = cache.pod("ns/high").expect("cached");
        let info = facts.info.as_ref().expect("convertible");
        cache.nominate("ns/high", "n1", info);
        let snap = (*scheduler.store.snapshot_now()).clone();
        let n = cache.nominations();
        assert_eq!(n.len(), 1);
        let view = with_nominated(&snap, &n);
        let i = view.index["n1"];
        assert_eq!(view.nodes()[i].alloc.requested.cpu_millis, 2000);
        assert_eq!(
            snap.nodes()[i].alloc.requested.cpu_millis,
            0,
            "the original is untouched"
        );
        // Once placed there, it is not counted twice.
        let again = with_nominated(&view, &n);
        assert_eq!(again.nodes()[i].alloc.requested.cpu_millis, 2000);
        // Bound: the nomination goes.
        let mut bound_high = high.clone();
        bound_high.spec.as_mut().expect("spec").node_name = Some("n1".into());
        cache.apply_pod(&bound_high);
        assert!(cache.nominations().is_empty());
    }

    #[tokio::test]
    async fn binds_fitting_pods_reports_unschedulable_ones_and_retries_conflicts() {
        let (scheduler, cache, log) = setup(&["taken"], always_leader("test-1"));
        cache.nodes_relist_started();
        cache.apply_node(&node("n1", "4"));
        cache.apply_node(&node("n2", "4"));
        cache.nodes_relist_done();
        cache.pods_relist_started();
        for (name, cpu) in [("a", "3"), ("b", "3"), ("c", "3"), ("taken", "100m")] {
            cache.apply_pod(&pod(name, cpu));
        }
        cache.pods_relist_done();
        cache.namespaces_changed([]);
        cache.server_version("1", "20");
        let running = Running::start(&scheduler);
        wait_for(&log, "two Scheduled events and c's condition", |l| {
            l.iter().filter(|e| e.2.contains("\"Scheduled\"")).count() == 2
                && l.iter().any(|e| e.1.ends_with("/pods/c/status"))
                && l.iter().any(|e| e.1.ends_with("/pods/taken/binding"))
        })
        .await;
        let entries = log.lock().expect("log").clone();
        // a and b bound to different nodes (3 of 4 cores each).
        let (na, _) = cache.placement("uid-a").expect("a placed");
        let (nb, _) = cache.placement("uid-b").expect("b placed");
        assert_ne!(na, nb);
        for (pod, node) in [("a", &na), ("b", &nb)] {
            let binding = entries
                .iter()
                .find(|e| e.1 == format!("/api/v1/namespaces/ns/pods/{pod}/binding"))
                .expect("binding request");
            assert_eq!(binding.0, "POST");
            assert!(
                binding.2.contains(&format!("\"name\":\"{node}\"")),
                "{binding:?}"
            );
            assert!(entries.iter().any(|e| {
                e.2.contains(&format!("Successfully assigned ns/{pod} to {node}"))
            }));
        }
        // c: a FailedScheduling event and the condition, with the summary.
        let summary = "0/2 nodes are available: 2 Insufficient cpu.";
        assert!(entries.iter().any(|e| e.1 == "/api/v1/namespaces/ns/events"
            && e.2.contains("FailedScheduling")
            && e.2.contains(summary)));
        let patch = entries
            .iter()
            .find(|e| e.1.ends_with("/pods/c/status"))
            .expect("status patch");
        assert_eq!(patch.0, "PATCH");
        assert!(patch.2.contains("Unschedulable") && patch.2.contains(summary));
        // The decision log: a bound where it went (its outcome set once the binding
        // answered), c unschedulable with every node's rejection.
        let mut a = scheduler.decisions.get("ns", "a").expect("a recorded");
        for _ in 0..50 {
            if matches!(a.outcome, Recorded::Bound { .. }) {
                break;
            }
            tokio::time::sleep(Duration::from_millis(40)).await;
            a = scheduler.decisions.get("ns", "a").expect("a recorded");
        }
        assert_eq!(
            a.outcome,
            Recorded::Bound {
                node: na.to_string()
            }
        );
        assert_eq!(a.decision.source, Source::Scheduler);
        assert_eq!(a.decision.attempt, 1);
        assert_eq!(
            a.decision.ranked.first().map(|r| r.node.to_string()),
            Some(na.to_string())
        );
        assert!(!a.decision.ranked[0].plugins.is_empty());
        let c = scheduler.decisions.get("ns", "c").expect("c recorded");
        assert_eq!(c.outcome, Recorded::Unschedulable);
        assert_eq!(c.decision.summary, summary);
        assert_eq!(c.decision.filtered.len(), 1);
        assert_eq!(c.decision.filtered[0].count, 2);
        assert_eq!(c.decision.filtered[0].nodes.len(), 2);
        // The counts through the handles looked up at start (every series there from zero).
        let text = scheduler.metrics.encode();
        let value = |series: &str| -> f64 {
            text.lines()
                .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
                .unwrap_or_else(|| panic!("no {series} in\n{text}"))
        };
        let attempts = |result: &str| {
            value(&format!(
                "loadstar_scorer_schedule_attempts_total{{profile=\"loadstar\",result=\"{result}\"}}"
            ))
        };
        // a, b and taken scheduled (taken again after a conflict), c unschedulable.
        assert!(attempts("scheduled") >= 3.0, "{text}");
        assert!(attempts("unschedulable") >= 1.0, "{text}");
        assert_eq!(attempts("error"), 0.0);
        assert!(
            value(
                "loadstar_scorer_extension_point_duration_seconds_count{extension_point=\"Filter\",profile=\"loadstar\"}"
            ) >= 4.0,
            "{text}"
        );
        // a and b; taken's bindings all conflict.
        assert_eq!(value("loadstar_scorer_binds_total{result=\"bound\"}"), 2.0);
        assert_eq!(value("loadstar_scorer_binds_total{result=\"error\"}"), 0.0);
        assert!(text.contains("loadstar_scorer_bind_duration_seconds_count"));
        // The conflicting pod: no Scheduled event, assumption forgotten, and retried (a 409
        // may come from etcd failing under the binding) until the watch shows it bound.
        let attempts = |log: &Log| {
            log.lock()
                .expect("log")
                .iter()
                .filter(|e| e.1.ends_with("/pods/taken/binding"))
                .count()
        };
        wait_for(&log, "a second binding attempt after the conflict", |l| {
            l.iter()
                .filter(|e| e.1.ends_with("/pods/taken/binding"))
                .count()
                >= 2
        })
        .await;
        let mut bound: serde_json::Value =
            serde_json::to_value(pod("taken", "100m")).expect("json");
        bound["spec"]["nodeName"] = json!("elsewhere");
        cache.apply_pod(&serde_json::from_value(bound).expect("pod"));
        tokio::time::sleep(Duration::from_millis(300)).await;
        let settled = attempts(&log);
        tokio::time::sleep(Duration::from_secs(3)).await;
        assert_eq!(
            attempts(&log),
            settled,
            "retried after the watch showed it bound"
        );
        let entries = log.lock().expect("log").clone();
        assert!(
            !entries
                .iter()
                .any(|e| e.2.contains("Successfully assigned ns/taken"))
        );
        running.stop().await;
    }

    #[tokio::test]
    async fn only_the_leader_binds_and_others_name_it() {
        let (tx, rx) = watch::channel(Leadership {
            is_leader: false,
            holder: Some("replica-a".into()),
        });
        let (scheduler, cache, log) = setup(&[], rx);
        node_n1_and_pending_a(&cache);
        let err = Binder::bind(
            &*scheduler,
            BindRequest {
                namespace: "ns".into(),
                name: "a".into(),
                ..Default::default()
            },
        )
        .await
        .expect_err("not the leader");
        assert!(matches!(err, ClusterError::Unavailable(_)), "{err}");
        assert!(err.to_string().contains("replica-a"), "{err}");
        let running = Running::start(&scheduler);
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            log.lock().expect("log").is_empty(),
            "a standby never writes"
        );
        tx.send_replace(Leadership {
            is_leader: true,
            holder: Some("test-1".into()),
        });
        wait_for(&log, "binding after becoming leader", |l| {
            l.iter().any(|e| e.1.ends_with("/pods/a/binding"))
        })
        .await;
        running.stop().await;
    }

    /// A synced cache with node `n1` (4 CPUs) and pending pod `ns/a` (1 CPU).
    fn node_n1_and_pending_a(cache: &ClusterCache) {
        cache.nodes_relist_started();
        cache.apply_node(&node("n1", "4"));
        cache.nodes_relist_done();
        cache.pods_relist_started();
        cache.apply_pod(&pod("a", "1"));
        cache.pods_relist_done();
        cache.namespaces_changed([]);
        cache.server_version("1", "20");
    }

    /// The scheduler's runtime is a current-thread one, as the scorer's main runtime is by
    /// default: the call must not need a second thread of it.
    #[tokio::test]
    async fn the_grpc_binder_binds_on_the_schedulers_runtime_for_a_caller_on_another() {
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        node_n1_and_pending_a(&cache);
        let binder = SchedulerBinder::new(scheduler.clone());
        // The caller's runtime (as the gRPC runtime is) is another one, on its own thread;
        // this runtime awaits its answer instead of blocking on the thread.
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::spawn(move || {
            let other = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("runtime");
            let outcome = other.block_on(binder.bind(BindRequest {
                namespace: "ns".into(),
                name: "a".into(),
                ..Default::default()
            }));
            let _ = tx.send(outcome);
        });
        let outcome = tokio::time::timeout(Duration::from_secs(10), rx)
            .await
            .expect("answered in time")
            .expect("caller thread")
            .expect("bound");
        assert_eq!(outcome.node_name, "n1");
        assert!(
            log.lock()
                .expect("log")
                .iter()
                .any(|e| e.1.ends_with("/pods/a/binding")),
            "the binding was written"
        );
    }

    #[tokio::test]
    async fn a_gated_pod_waits_without_attempts_until_its_gates_are_removed() {
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        cache.nodes_relist_started();
        cache.apply_node(&node("n1", "4"));
        cache.nodes_relist_done();
        let mut gated = pod("g", "1");
        gated.spec.as_mut().expect("spec").scheduling_gates =
            Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
                name: "example.com/quota".into(),
            }]);
        cache.pods_relist_started();
        cache.apply_pod(&gated);
        cache.apply_pod(&pod("open", "1"));
        cache.pods_relist_done();
        cache.namespaces_changed([]);
        cache.server_version("1", "20");
        let running = Running::start(&scheduler);
        wait_for(&log, "the open pod's binding", |l| {
            l.iter().any(|e| e.1.ends_with("/pods/open/binding"))
        })
        .await;
        // Time for the loop to try the gated pod, if it wrongly would.
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            !log.lock()
                .expect("log")
                .iter()
                .any(|e| e.1.contains("/pods/g/") || e.2.contains("ns/g")),
            "a gated pod is neither attempted, reported nor bound"
        );
        assert_eq!(scheduler.queue.with(|q| q.depths()).gated, 1);
        assert!(scheduler.decisions.get("ns", "g").is_none());
        // Nor can a client bind it through the scorer.
        let e = Binder::bind(
            &*scheduler,
            BindRequest {
                namespace: "ns".into(),
                name: "g".into(),
                ..Default::default()
            },
        )
        .await
        .expect_err("gated");
        assert!(matches!(e, ClusterError::FailedPrecondition(_)), "{e:?}");
        assert!(e.to_string().contains("\"example.com/quota\""), "{e}");
        // Its gates removed (the only change the API server allows them), it is bound.
        cache.apply_pod(&pod("g", "1"));
        wait_for(&log, "the ungated pod's binding", |l| {
            l.iter().any(|e| e.1.ends_with("/pods/g/binding"))
        })
        .await;
        assert_eq!(scheduler.queue.with(|q| q.depths()).gated, 0);
        running.stop().await;
    }

    #[tokio::test]
    async fn bind_errors_name_huge_pods_and_nodes_briefly() {
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        node_n1_and_pending_a(&cache);
        let huge = "h".repeat(1_000_000);
        let bind = |namespace: &str, name: &str, node_name: &str| {
            Binder::bind(
                &*scheduler,
                BindRequest {
                    namespace: namespace.into(),
                    name: name.into(),
                    node_name: node_name.into(),
                    ..Default::default()
                },
            )
        };
        let cases = [
            bind(&huge, "a", "").await,
            bind("ns", &huge, "").await,
            bind("ns", "a", &huge).await,
        ];
        for result in cases {
            let e = result.expect_err("refused");
            assert!(matches!(e, ClusterError::NotFound(_)), "{e:?}");
            let message = e.to_string();
            assert!(message.len() < 1024, "{} bytes", message.len());
            assert!(message.contains("\"hhhhhhhhhhhhhhhh"), "{message}");
        }
        let e = bind("ns", "zz", "").await.expect_err("missing");
        assert_eq!(e.to_string(), "pod ns/zz is not in the cluster");
        assert!(log.lock().expect("log").is_empty(), "nothing was written");
    }

    #[tokio::test]
    async fn a_malformed_pod_gets_an_event_not_a_crash() {
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        cache.nodes_relist_started();
        cache.apply_node(&node("n1", "4"));
        cache.nodes_relist_done();
        cache.pods_relist_started();
        cache.apply_pod(&pod("bad", "lots"));
        cache.apply_pod(&pod("good", "1"));
        cache.pods_relist_done();
        cache.namespaces_changed([]);
        cache.server_version("1", "20");
        let running = Running::start(&scheduler);
        wait_for(
            &log,
            "the bad pod's event and the good pod's binding",
            |l| {
                l.iter().any(|e| {
                    e.2.contains("FailedScheduling")
                        && e.2.contains("invalid quantity \\\"lots\\\"")
                }) && l.iter().any(|e| e.1.ends_with("/pods/good/binding"))
            },
        )
        .await;
        assert!(cache.placement("uid-bad").is_none());
        running.stop().await;
    }

    /// Volume stores the test writes into, as the reflectors would.
    struct VolumeWatch {
        claims: ::kube::runtime::reflector::store::Writer<
            k8s_openapi::api::core::v1::PersistentVolumeClaim,
        >,
        volumes:
            ::kube::runtime::reflector::store::Writer<k8s_openapi::api::core::v1::PersistentVolume>,
    }

    impl VolumeWatch {
        fn claim(&mut self, v: serde_json::Value) {
            let ev =
                ::kube::runtime::watcher::Event::Apply(serde_json::from_value(v).expect("pvc"));
            self.claims.apply_watcher_event(&ev);
        }
        fn volume(&mut self, v: serde_json::Value) {
            let ev = ::kube::runtime::watcher::Event::Apply(serde_json::from_value(v).expect("pv"));
            self.volumes.apply_watcher_event(&ev);
        }
    }

    /// Two labelled nodes, a `WaitForFirstConsumer` class without a provisioner, a local
    /// volume on n2 and a pending pod `db` whose claim `data` waits for it.
    fn wffc_cluster(cache: &ClusterCache) -> VolumeWatch {
        use ::kube::runtime::watcher::Event;
        let (claims, claims_w) = ::kube::runtime::reflector::store();
        let (volumes, volumes_w) = ::kube::runtime::reflector::store();
        let (classes, mut classes_w) = ::kube::runtime::reflector::store();
        cache.set_volume_stores(crate::volumes::VolumeStores {
            claims,
            volumes,
            classes,
            drivers: ::kube::runtime::reflector::store().0,
            capacities: Default::default(),
        });
        classes_w.apply_watcher_event(&Event::Apply(
            serde_json::from_value(json!({"metadata": {"name": "local"},
                "provisioner": "kubernetes.io/no-provisioner",
                "volumeBindingMode": "WaitForFirstConsumer"}))
            .expect("sc"),
        ));
        let mut w = VolumeWatch {
            claims: claims_w,
            volumes: volumes_w,
        };
        w.claim(
            json!({"metadata": {"name": "data", "namespace": "ns", "uid": "c-1",
                                    "resourceVersion": "5"},
            "spec": {"storageClassName": "local", "accessModes": ["ReadWriteOnce"],
                     "resources": {"requests": {"storage": "1Gi"}}}}),
        );
        w.volume(local_volume("10", json!(null)));
        cache.nodes_relist_started();
        for n in ["n1", "n2"] {
            let mut v: serde_json::Value = serde_json::to_value(node(n, "4")).expect("json");
            v["metadata"]["labels"] = json!({"kubernetes.io/hostname": n});
            cache.apply_node(&serde_json::from_value(v).expect("node"));
        }
        cache.nodes_relist_done();
        cache.pods_relist_started();
        let mut p: serde_json::Value = serde_json::to_value(pod("db", "1")).expect("json");
        p["spec"]["volumes"] =
            json!([{"name": "d", "persistentVolumeClaim": {"claimName": "data"}}]);
        cache.apply_pod(&serde_json::from_value(p).expect("pod"));
        cache.pods_relist_done();
        cache.namespaces_changed([]);
        cache.server_version("1", "20");
        w
    }

    fn local_volume(rv: &str, claim_ref: serde_json::Value) -> serde_json::Value {
        json!({"metadata": {"name": "pv-n2", "resourceVersion": rv},
            "spec": {"storageClassName": "local", "capacity": {"storage": "2Gi"},
                     "accessModes": ["ReadWriteOnce"], "local": {"path": "/mnt/disk"},
                     "claimRef": claim_ref,
                     "nodeAffinity": {"required": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n2"]}]}]}}},
            "status": {"phase": "Available"}})
    }

    #[tokio::test]
    async fn wait_for_first_consumer_claims_are_bound_before_their_pod() {
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        let mut watch = wffc_cluster(&cache);
        let running = Running::start(&scheduler);
        wait_for(&log, "the volume's claimRef patch", |l| {
            l.iter()
                .any(|e| e.0 == "PATCH" && e.1 == "/api/v1/persistentvolumes/pv-n2")
        })
        .await;
        {
            let entries = log.lock().expect("log").clone();
            let patch = entries
                .iter()
                .find(|e| e.1 == "/api/v1/persistentvolumes/pv-n2")
                .expect("patch");
            let body: serde_json::Value = serde_json::from_str(&patch.2).expect("json");
            assert_eq!(body["spec"]["claimRef"]["name"], "data");
            assert_eq!(body["spec"]["claimRef"]["uid"], "c-1");
            assert_eq!(body["metadata"]["resourceVersion"], "10");
            // Not bound while the claim is not.
            assert!(!entries.iter().any(|e| e.1.ends_with("/pods/db/binding")));
        }
        assert_eq!(
            cache.reservations().volumes_held(),
            1,
            "reserved while binding"
        );
        // The PV controller completes the binding.
        let ours = json!({"namespace": "ns", "name": "data", "uid": "c-1"});
        watch.volume(local_volume("11", ours));
        watch.claim(
            json!({"metadata": {"name": "data", "namespace": "ns", "uid": "c-1",
            "resourceVersion": "12", "annotations": {crate::volumes::BIND_COMPLETED: "yes"}},
            "spec": {"storageClassName": "local", "volumeName": "pv-n2"}}),
        );
        wait_for(&log, "the pod's binding", |l| {
            l.iter().any(|e| e.1.ends_with("/pods/db/binding"))
        })
        .await;
        let entries = log.lock().expect("log").clone();
        let binding = entries
            .iter()
            .find(|e| e.1.ends_with("/pods/db/binding"))
            .expect("binding");
        assert!(
            binding.2.contains("\"name\":\"n2\""),
            "the volume's node: {binding:?}"
        );
        assert_eq!(
            cache.reservations().volumes_held(),
            0,
            "released once bound"
        );
        running.stop().await;
    }

    #[tokio::test]
    async fn a_volume_taken_meanwhile_fails_the_binding_and_requeues_the_pod() {
        let (scheduler, cache, log) = setup(&[], always_leader("test-1"));
        let mut watch = wffc_cluster(&cache);
        let running = Running::start(&scheduler);
        wait_for(&log, "the volume's claimRef patch", |l| {
            l.iter().any(|e| e.1 == "/api/v1/persistentvolumes/pv-n2")
        })
        .await;
        // Another claim got the volume (and the watch shows it past our write).
        watch.volume(local_volume(
            "11",
            json!({"namespace": "ns", "name": "other", "uid": "c-9"}),
        ));
        wait_for(&log, "a FailedScheduling event naming the volume", |l| {
            l.iter().any(|e| {
                e.2.contains("FailedScheduling")
                    && e.2.contains("binding volumes")
                    && e.2.contains("pv-n2")
            })
        })
        .await;
        assert!(
            !log.lock()
                .expect("log")
                .iter()
                .any(|e| e.1.ends_with("/pods/db/binding")),
            "never bound without its volume"
        );
        assert_eq!(cache.reservations().volumes_held(), 0);
        assert_eq!(
            cache.placement("uid-db"),
            None,
            "the assumption is forgotten"
        );
        running.stop().await;
    }
}
