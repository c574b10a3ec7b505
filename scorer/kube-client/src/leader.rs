//! Leader election on a `coordination.k8s.io/v1` Lease, as client-go's `leaderelection`:
//! candidates try every retry period; a lease is free when it names no holder or its record
//! has not changed for the lease duration (by this process's clock, so clock skew does not
//! matter); the leader renews every retry period and steps down at once if a renewal has not
//! succeeded within the renew deadline or the lease names someone else. On shutdown a
//! candidate releases the lease if it names it, after an acquisition under way has ended (a
//! standby's, or a leader's re-take of a deleted or cleared Lease: a write the server has
//! received lands either way); a renewal's write is not waited for, as the release changes
//! the `resourceVersion` it names. The stop takes [`STOP_WAIT`] at most. A standby takes over
//! without waiting: candidates also watch the Lease and try at once when it is released or
//! deleted, rather than at their next retry (client-go's elector only polls, so a standby
//! there waits up to a retry period, 2 s by default).
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::kube::Api;
use ::kube::api::{ObjectMeta, PostParams};
use ::kube::runtime::WatchStreamExt;
use ::kube::runtime::watcher;
use futures::StreamExt;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use thiserror::Error;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use loadstar_kube_model::lease::{holder_of, may_acquire};

/// Errors of one election attempt.
#[derive(Debug, Error)]
pub enum LeaderError {
    /// The Lease could not be read or written.
    #[error("lease {namespace}/{name}: {source}")]
    Api {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
        /// The error.
        #[source]
        source: ::kube::Error,
    },
    /// The attempt took longer than allowed.
    #[error("lease {namespace}/{name}: attempt timed out")]
    Timeout {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
}

/// Election settings; defaults as upstream (15 s lease, 10 s renew deadline, 2 s retry).
#[derive(Debug, Clone)]
pub struct LeaderConfig {
    /// Lease namespace.
    pub namespace: String,
    /// Lease name.
    pub name: String,
    /// This candidate's identity (unique per process).
    pub identity: String,
    /// How long a lease is valid without renewal.
    pub lease_duration: Duration,
    /// The leader steps down if it could not renew for this long.
    pub renew_deadline: Duration,
    /// Time between attempts.
    pub retry_period: Duration,
}

impl LeaderConfig {
    /// Upstream's timings for `namespace/name` and `identity`.
    pub fn new(namespace: &str, name: &str, identity: &str) -> LeaderConfig {
        LeaderConfig {
            namespace: namespace.to_string(),
            name: name.to_string(),
            identity: identity.to_string(),
            lease_duration: Duration::from_secs(15),
            renew_deadline: Duration::from_secs(10),
            retry_period: Duration::from_secs(2),
        }
    }
}

/// Who leads, as this process knows it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leadership {
    /// This process leads and may bind.
    pub is_leader: bool,
    /// The current holder's identity, if known.
    pub holder: Option<String>,
}

/// A leadership channel that always says "leader" (`--leader-elect=false`).
pub fn always_leader(identity: &str) -> watch::Receiver<Leadership> {
    let (tx, rx) = watch::channel(Leadership {
        is_leader: true,
        holder: Some(identity.to_string()),
    });
    // Keep the sender alive for the life of the process so the value never closes.
    std::mem::forget(tx);
    rx
}

/// What the elector observed of the lease record.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Observed {
    holder: String,
    resource_version: String,
    at: Instant,
}

/// Whether a watch event of the Lease says it is free to take now: deleted, or released (no
/// holder, as `may_acquire` reads it). Pure.
fn frees_lease(event: &watcher::Event<Lease>) -> bool {
    match event {
        watcher::Event::Delete(_) => true,
        watcher::Event::Apply(lease) | watcher::Event::InitApply(lease) => {
            holder_of(lease).is_empty()
        }
        watcher::Event::Init | watcher::Event::InitDone => false,
    }
}

/// The elector. Run it with [`LeaderElector::run`]; read the state from [`LeaderElector::subscribe`].
#[derive(Debug)]
pub struct LeaderElector {
    api: Api<Lease>,
    config: LeaderConfig,
    state: watch::Sender<Leadership>,
    observed: Option<Observed>,
    last_renew: Option<Instant>,
    /// Set when `run`'s shutdown comes: an attempt under way then writes nothing more.
    stopping: Arc<AtomicBool>,
    /// The attempt under way writes a renewal (the Lease read named this process).
    renewing: Arc<AtomicBool>,
}

impl LeaderElector {
    /// An elector over the Lease API of `client`.
    pub fn new(client: ::kube::Client, config: LeaderConfig) -> LeaderElector {
        LeaderElector {
            api: Api::namespaced(client, &config.namespace),
            config,
            state: watch::channel(Leadership::default()).0,
            observed: None,
            last_renew: None,
            stopping: Arc::default(),
            renewing: Arc::default(),
        }
    }

    /// The leadership channel.
    pub fn subscribe(&self) -> watch::Receiver<Leadership> {
        self.state.subscribe()
    }

    fn err(&self, source: ::kube::Error) -> LeaderError {
        LeaderError::Api {
            namespace: self.config.namespace.clone(),
            name: self.config.name.clone(),
            source,
        }
    }

    fn spec_for_me(&self, old: Option<&LeaseSpec>) -> LeaseSpec {
        let now = MicroTime(Timestamp::now());
        let was_mine =
            old.and_then(|s| s.holder_identity.as_deref()) == Some(&self.config.identity);
        let transitions = old.and_then(|s| s.lease_transitions).unwrap_or(0);
        LeaseSpec {
            holder_identity: Some(self.config.identity.clone()),
            lease_duration_seconds: Some(
                i32::try_from(self.config.lease_duration.as_secs()).unwrap_or(15),
            ),
            acquire_time: old
                .filter(|_| was_mine)
                .map_or(Some(now.clone()), |s| s.acquire_time.clone()),
            renew_time: Some(now),
            // A Lease taken by one that did not hold it (released too); not a new Lease.
            lease_transitions: Some(transitions + i32::from(!was_mine && old.is_some())),
            ..Default::default()
        }
    }

    /// The Lease as the API server has it now (`None`: it does not exist).
    async fn current_lease(&self) -> Result<Option<Lease>, LeaderError> {
        self.api
            .get_opt(&self.config.name)
            .await
            .map_err(|e| self.err(e))
    }

    /// One attempt to acquire or renew; returns whether this process holds the lease.
    async fn try_acquire_or_renew(&mut self) -> Result<bool, LeaderError> {
        let now = Instant::now();
        self.renewing.store(false, Ordering::SeqCst);
        let current = self.current_lease().await?;
        if self.stopping.load(Ordering::SeqCst) {
            return Ok(false); // Stopping: no write that was not sent before.
        }
        let Some(mut lease) = current else {
            let lease = Lease {
                metadata: ObjectMeta {
                    name: Some(self.config.name.clone()),
                    namespace: Some(self.config.namespace.clone()),
                    ..Default::default()
                },
                spec: Some(self.spec_for_me(None)),
            };
            return match self.api.create(&PostParams::default(), &lease).await {
                Ok(_) => Ok(true),
                Err(::kube::Error::Api(s)) if s.code == 409 => Ok(false),
                Err(e) => Err(self.err(e)),
            };
        };
        let holder = holder_of(&lease).to_string();
        let rv = lease.metadata.resource_version.clone().unwrap_or_default();
        let changed = self
            .observed
            .as_ref()
            .is_none_or(|o| o.holder != holder || o.resource_version != rv);
        if changed {
            self.observed = Some(Observed {
                holder: holder.clone(),
                resource_version: rv,
                at: now,
            });
        }
        let observed_at = self.observed.as_ref().map_or(now, |o| o.at);
        let _ = self.state.send_if_modified(|s| {
            let h = (!holder.is_empty()).then(|| holder.clone());
            let m = s.holder != h;
            s.holder = h;
            m
        });
        let unchanged_for = now.saturating_duration_since(observed_at);
        let (me, duration) = (&self.config.identity, self.config.lease_duration);
        if !may_acquire(me, &holder, unchanged_for, duration) {
            return Ok(false);
        }
        let renewing = holder == *self.config.identity;
        self.renewing.store(renewing, Ordering::SeqCst);
        lease.spec = Some(self.spec_for_me(lease.spec.as_ref()));
        match self
            .api
            .replace(&self.config.name, &PostParams::default(), &lease)
            .await
        {
            Ok(l) => {
                self.observed = Some(Observed {
                    holder: self.config.identity.clone(),
                    resource_version: l.metadata.resource_version.unwrap_or_default(),
                    at: Instant::now(),
                });
                Ok(true)
            }
            Err(::kube::Error::Api(s)) if s.code == 409 => Ok(false),
            Err(e) => Err(self.err(e)),
        }
    }

    fn set_leader(&self, leader: bool) {
        let identity = self.config.identity.clone();
        self.state.send_if_modified(|s| {
            let changed = s.is_leader != leader;
            s.is_leader = leader;
            if leader {
                s.holder = Some(identity);
            }
            changed
        });
    }

    /// The moments the Lease is seen free (released or deleted), from a watch of it alone. A
    /// failing watch (no RBAC for it, the API server down) is retried with backoff, logged
    /// once per failure streak and once when it works again; the periodic attempts go on.
    fn lease_frees(&self) -> impl futures::Stream<Item = ()> + use<> {
        let config =
            watcher::Config::default().fields(&format!("metadata.name={}", self.config.name));
        let mut failing = false;
        watcher::watcher(self.api.clone(), config)
            .backoff(crate::watch_health::watch_backoff())
            .filter_map(move |event| {
                let freed = match event {
                    Ok(event) => {
                        if failing {
                            info!("watching the lease again");
                        }
                        failing = false;
                        frees_lease(&event)
                    }
                    Err(e) => {
                        if !failing {
                            warn!(error = %crate::watch_health::describe_watch_error(&e),
                                  "watching the lease failed; a released lease is taken at the retry period only until the watch works");
                        }
                        failing = true;
                        false
                    }
                };
                std::future::ready(freed.then_some(()))
            })
            .fuse()
    }

    /// Campaigns until `shutdown` resolves, then releases the lease if held.
    pub async fn run(mut self, shutdown: impl std::future::Future<Output = ()>) {
        tokio::pin!(shutdown);
        let mut tick = tokio::time::interval(self.config.retry_period);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let frees = self.lease_frees();
        tokio::pin!(frees);
        // The attempt borrows the elector: the shutdown reads and sets these through handles.
        let (stopping, renewing) = (self.stopping.clone(), self.renewing.clone());
        loop {
            tokio::select! {
                _ = &mut shutdown => break,
                _ = tick.tick() => {}
                Some(()) = frees.next() => {
                    // Every candidate tries now, the leader too: a Lease deleted or cleared
                    // under it (by hand) is taken by whoever comes first, and a leader that
                    // loses steps down within a round trip rather than at its next renewal
                    // while a standby already binds. The next periodic attempt comes a full
                    // period later.
                    debug!(lease = %self.config.name, "the lease was released or deleted; trying to take it");
                    tick.reset();
                }
            }
            let leading = self.state.borrow().is_leader;
            // A renewal must finish before the renew deadline; an acquisition within a period.
            let budget = match (leading, self.last_renew) {
                (true, Some(at)) => self
                    .config
                    .renew_deadline
                    .saturating_sub(at.elapsed())
                    .max(Duration::from_millis(1)),
                _ => self.config.retry_period.max(Duration::from_secs(1)),
            };
            let attempt = {
                let attempt = tokio::time::timeout(budget, self.try_acquire_or_renew());
                tokio::pin!(attempt);
                tokio::select! {
                    _ = &mut shutdown => {
                        stopping.store(true, Ordering::SeqCst);
                        // An acquisition ends first (the module's doc), a renewal's write not.
                        if !renewing.load(Ordering::SeqCst) {
                            let outcome = tokio::time::timeout(STOP_WAIT / 2, attempt).await;
                            debug!(?outcome, "the attempt under way at shutdown ended");
                        }
                        break;
                    }
                    r = &mut attempt => r,
                }
            };
            let result = attempt.unwrap_or_else(|_| {
                Err(LeaderError::Timeout {
                    namespace: self.config.namespace.clone(),
                    name: self.config.name.clone(),
                })
            });
            match result {
                Ok(true) => {
                    self.last_renew = Some(Instant::now());
                    if !leading {
                        info!(identity = %self.config.identity, lease = %self.config.name,
                              "became the leader");
                    }
                    self.set_leader(true);
                }
                Ok(false) => {
                    if leading {
                        warn!(identity = %self.config.identity, "lease taken by another; stepping down");
                    }
                    self.set_leader(false);
                }
                Err(e) => {
                    let expired = self
                        .last_renew
                        .is_none_or(|at| at.elapsed() >= self.config.renew_deadline);
                    if leading && expired {
                        warn!(error = %e, "could not renew the lease in time; stepping down");
                        self.set_leader(false);
                    } else {
                        warn!(error = %e, "leader election attempt failed");
                    }
                }
            }
        }
        // Not only the leader (the module's doc). An acquisition's write applied after its
        // attempt was given up (2 s) and after this read still takes the Lease until it expires.
        self.set_leader(false);
        match tokio::time::timeout(STOP_WAIT / 2, self.release()).await {
            Ok(Ok(true)) => info!(lease = %self.config.name, "lease released"),
            Ok(Ok(false)) => debug!(lease = %self.config.name, "the lease was not held"),
            Ok(Err(e)) => warn!(error = %e, "could not release the lease"),
            Err(_) => warn!("releasing the lease timed out"),
        }
    }

    /// Gives the lease up (empty holder) if this process holds it; returns whether it did.
    /// A conflict (the Lease written since it was read, e.g. by an attempt of ours whose
    /// reply was dropped at shutdown) reads it again: [`RELEASE_ATTEMPTS`] reads and writes
    /// at most.
    async fn release(&self) -> Result<bool, LeaderError> {
        let mut attempts = 0;
        loop {
            attempts += 1;
            let Some(mut lease) = self.current_lease().await? else {
                return Ok(false);
            };
            let spec = lease.spec.get_or_insert_with(Default::default);
            if spec.holder_identity.as_deref() != Some(&self.config.identity) {
                return Ok(false);
            }
            spec.holder_identity = None;
            spec.lease_duration_seconds = Some(1);
            spec.renew_time = Some(MicroTime(Timestamp::now()));
            match self
                .api
                .replace(&self.config.name, &PostParams::default(), &lease)
                .await
            {
                Ok(_) => return Ok(true),
                Err(::kube::Error::Api(s)) if s.code == 409 && attempts < RELEASE_ATTEMPTS => {
                    debug!(lease = %self.config.name, "the lease changed while releasing it; reading it again");
                }
                Err(e) => return Err(self.err(e)),
            }
        }
    }
}

/// How many times at most a release reads and writes the Lease (its writes conflicting).
const RELEASE_ATTEMPTS: u32 = 3;

/// The most a stopping elector takes: half to let an acquisition end, half to release.
pub const STOP_WAIT: Duration = Duration::from_secs(4);

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::{Arc, Mutex};

    use super::*;

    fn lease(holder: Option<&str>) -> Lease {
        Lease {
            spec: Some(LeaseSpec {
                holder_identity: holder.map(str::to_string),
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn a_released_or_deleted_lease_is_free_and_a_held_one_is_not() {
        use watcher::Event;
        assert!(frees_lease(&Event::Delete(lease(Some("a")))));
        assert!(frees_lease(&Event::Apply(lease(None))));
        assert!(frees_lease(&Event::Apply(lease(Some("")))));
        assert!(frees_lease(&Event::InitApply(lease(None))));
        assert!(frees_lease(&Event::Apply(Lease::default())));
        assert!(!frees_lease(&Event::Apply(lease(Some("a")))));
        assert!(!frees_lease(&Event::InitApply(lease(Some("a")))));
        assert!(!frees_lease(&Event::Init));
        assert!(!frees_lease(&Event::InitDone));
    }

    /// A Lease API stand-in holding one Lease, with the API server's optimistic concurrency
    /// (a write naming an older `resourceVersion` gets 409). It can write the Lease behind
    /// the elector's back before the next write (`interfere`), and can apply the next write
    /// but never answer it (`swallow`), as a reply lost at shutdown, or hold the next read
    /// or write (`hold_read`, `hold_write`) until the test opens `gate`: a held write is
    /// applied then whether or not its client still waits. It counts the writes it receives.
    /// Lists and watches never answer.
    #[derive(Clone, Default)]
    struct FakeLeases {
        lease: Arc<Mutex<serde_json::Value>>,
        interfere: Arc<AtomicBool>,
        swallow: Arc<AtomicBool>,
        hold_read: Arc<AtomicBool>,
        hold_write: Arc<AtomicBool>,
        gate: Arc<tokio::sync::Notify>,
        /// A read has arrived.
        read: Arc<tokio::sync::Notify>,
        /// A write has arrived.
        written: Arc<tokio::sync::Notify>,
        /// A write has been applied.
        applied: Arc<tokio::sync::Notify>,
        /// A write has been refused (409).
        refused: Arc<tokio::sync::Notify>,
        writes: Arc<AtomicUsize>,
    }

    impl FakeLeases {
        fn holding(holder: &str) -> FakeLeases {
            let fake = FakeLeases::default();
            *fake.lease.lock().expect("lease") = serde_json::json!({
                "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                "metadata": {"name": "l", "namespace": "ns", "resourceVersion": "1"},
                "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15}
            });
            fake
        }

        /// Writes `written` if it names the current `resourceVersion` (after an
        /// interfering write, when one is due); returns the Lease as written.
        fn apply(&self, mut written: serde_json::Value) -> Option<serde_json::Value> {
            let mut lease = self.lease.lock().expect("lease");
            let rv = |l: &serde_json::Value| {
                l["metadata"]["resourceVersion"]
                    .as_str()
                    .and_then(|v| v.parse::<u64>().ok())
                    .expect("resourceVersion")
            };
            if self.interfere.swap(false, Ordering::SeqCst) {
                // Someone renews the Lease between the elector's read and write.
                let next = rv(&lease) + 1;
                lease["metadata"]["resourceVersion"] = next.to_string().into();
            }
            if rv(&written) != rv(&lease) {
                self.refused.notify_one();
                return None;
            }
            let next = rv(&lease) + 1;
            written["metadata"]["resourceVersion"] = next.to_string().into();
            *lease = written.clone();
            self.applied.notify_one();
            Some(written)
        }

        /// Holds the next write and waits (at most 10 s) for it to arrive.
        async fn hold_next_write(&self) {
            let writes = self.writes.load(Ordering::SeqCst);
            self.hold_write.store(true, Ordering::SeqCst);
            tokio::time::timeout(Duration::from_secs(10), async {
                while self.writes.load(Ordering::SeqCst) == writes {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            })
            .await
            .expect("the held write");
        }

        fn holder(&self) -> String {
            self.lease.lock().expect("lease")["spec"]["holderIdentity"]
                .as_str()
                .unwrap_or_default()
                .to_string()
        }

        fn elector(&self, identity: &str) -> LeaderElector {
            self.elector_every(identity, Duration::from_secs(1))
        }

        fn elector_every(&self, identity: &str, retry_period: Duration) -> LeaderElector {
            let mut config = LeaderConfig::new("ns", "l", identity);
            config.retry_period = retry_period;
            LeaderElector::new(::kube::Client::new(self.clone(), "ns"), config)
        }
    }

    /// An elector's `run` on its own task, until [`Running::stop`].
    struct Running {
        stop: tokio::sync::oneshot::Sender<()>,
        run: tokio::task::JoinHandle<()>,
    }

    impl Running {
        fn start(elector: LeaderElector) -> Running {
            let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
            let run = tokio::spawn(elector.run(async {
                let _ = stopped.await;
            }));
            Running { stop, run }
        }

        /// Sends the shutdown without waiting for the elector.
        fn signal(self) -> tokio::task::JoinHandle<()> {
            let _ = self.stop.send(());
            self.run
        }

        /// Shuts the elector down and waits for it to stop.
        async fn stop(self) {
            Running::finish(self.signal()).await;
        }

        /// Shuts the elector down while `fake` holds a request: the elector must wait for it
        /// (200 ms checked) and stop once the test lets it through.
        async fn stop_through_gate(self, fake: &FakeLeases, what: &str) {
            let mut run = self.signal();
            let waited = tokio::time::timeout(Duration::from_millis(200), &mut run).await;
            assert!(waited.is_err(), "the elector waits for {what}");
            fake.gate.notify_one();
            Running::finish(run).await;
        }

        /// An elector for `identity` on `fake`, started and leading.
        async fn leading(
            fake: &FakeLeases,
            identity: &str,
        ) -> (Running, watch::Receiver<Leadership>) {
            let elector = fake.elector(identity);
            let mut state = elector.subscribe();
            let running = Running::start(elector);
            tokio::time::timeout(Duration::from_secs(10), state.wait_for(|s| s.is_leader))
                .await
                .expect("leads")
                .expect("state");
            (running, state)
        }

        /// Waits (at most 10 s) for a signalled elector to stop.
        async fn finish(run: tokio::task::JoinHandle<()>) {
            tokio::time::timeout(Duration::from_secs(10), run)
                .await
                .expect("the elector stops")
                .expect("no panic");
        }
    }

    fn reply(code: u16, body: &serde_json::Value) -> http::Response<::kube::client::Body> {
        http::Response::builder()
            .status(code)
            .header("content-type", "application/json")
            .body(::kube::client::Body::from(body.to_string().into_bytes()))
            .expect("response")
    }

    impl tower::Service<http::Request<::kube::client::Body>> for FakeLeases {
        type Response = http::Response<::kube::client::Body>;
        type Error = std::convert::Infallible;
        type Future = std::pin::Pin<
            Box<dyn std::future::Future<Output = Result<Self::Response, Self::Error>> + Send>,
        >;

        fn poll_ready(
            &mut self,
            _: &mut std::task::Context<'_>,
        ) -> std::task::Poll<Result<(), Self::Error>> {
            std::task::Poll::Ready(Ok(()))
        }

        fn call(&mut self, req: http::Request<::kube::client::Body>) -> Self::Future {
            let fake = self.clone();
            Box::pin(async move {
                let one = req.uri().path().ends_with("/leases/l");
                let method = req.method().clone();
                if !one {
                    // The elector's watch of the Lease: no events.
                    return std::future::pending().await;
                }
                if method == http::Method::GET {
                    fake.read.notify_one();
                    if fake.hold_read.swap(false, Ordering::SeqCst) {
                        fake.gate.notified().await;
                    }
                    let lease = fake.lease.lock().expect("lease").clone();
                    return Ok(reply(200, &lease));
                }
                let body = req.into_body().collect_bytes().await.expect("body");
                let written: serde_json::Value = serde_json::from_slice(&body).expect("a Lease");
                fake.writes.fetch_add(1, Ordering::SeqCst);
                fake.written.notify_one();
                let applied = if fake.hold_write.swap(false, Ordering::SeqCst) {
                    // A server applies a write it has received whether or not its client
                    // still waits for the reply.
                    let server = fake.clone();
                    tokio::spawn(async move {
                        server.gate.notified().await;
                        server.apply(written)
                    })
                    .await
                    .expect("the write's task")
                } else {
                    fake.apply(written)
                };
                let Some(written) = applied else {
                    return Ok(reply(
                        409,
                        &serde_json::json!({"kind": "Status", "apiVersion": "v1",
                            "status": "Failure", "reason": "Conflict", "code": 409,
                            "message": "the object has been modified"}),
                    ));
                };
                if fake.swallow.swap(false, Ordering::SeqCst) {
                    return std::future::pending().await;
                }
                Ok(reply(200, &written))
            })
        }
    }

    #[tokio::test]
    async fn a_release_that_conflicts_reads_the_lease_again() {
        let fake = FakeLeases::holding("me");
        fake.interfere.store(true, Ordering::SeqCst);
        let elector = fake.elector("me");
        assert!(
            elector.release().await.expect("released"),
            "{}",
            fake.holder()
        );
        assert_eq!(fake.holder(), "");
        // Another holder's Lease is left alone.
        let theirs = FakeLeases::holding("them");
        assert!(!theirs.elector("me").release().await.expect("read"));
        assert_eq!(theirs.holder(), "them");
    }

    #[tokio::test]
    async fn a_shutdown_during_an_attempt_releases_what_the_attempt_took() {
        // The attempt's write takes the Lease on the server, but its reply never comes: the
        // shutdown comes meanwhile, the attempt times out (its budget, one retry period) and
        // the elector never learns it leads.
        let fake = FakeLeases::holding("");
        fake.swallow.store(true, Ordering::SeqCst);
        let elector = fake.elector("me");
        let state = elector.subscribe();
        let running = Running::start(elector);
        tokio::time::timeout(Duration::from_secs(10), fake.applied.notified())
            .await
            .expect("the attempt's write");
        assert_eq!(fake.holder(), "me");
        assert!(!state.borrow().is_leader);
        running.stop().await;
        assert_eq!(fake.holder(), "", "the Lease is released at shutdown");
    }

    #[tokio::test]
    async fn a_standby_stopped_during_its_write_lets_it_land_then_releases() {
        // The acquisition's write reaches the server, which applies it later: a release that
        // read the Lease before then would find it free, and the write would then leave it
        // to a stopped process until it expired.
        let fake = FakeLeases::holding("");
        fake.hold_write.store(true, Ordering::SeqCst);
        // A budget (3 s) longer than the stop's wait for it (2 s).
        let running = Running::start(fake.elector_every("me", Duration::from_secs(3)));
        tokio::time::timeout(Duration::from_secs(10), fake.written.notified())
            .await
            .expect("the attempt's write");
        assert_eq!(fake.holder(), "", "the write is held");
        running
            .stop_through_gate(&fake, "the attempt's write")
            .await;
        assert_eq!(fake.holder(), "", "released after the write landed");
        assert_eq!(
            fake.writes.load(Ordering::SeqCst),
            2,
            "the acquisition, the release"
        );
    }

    #[tokio::test]
    async fn a_standby_stopped_during_its_read_writes_nothing() {
        let fake = FakeLeases::holding("");
        fake.hold_read.store(true, Ordering::SeqCst);
        let running = Running::start(fake.elector("me"));
        tokio::time::timeout(Duration::from_secs(10), fake.read.notified())
            .await
            .expect("the attempt's read");
        // The elector takes the stop while the read is held; then the read finds it free.
        running.stop_through_gate(&fake, "the attempt's read").await;
        assert_eq!(
            fake.writes.load(Ordering::SeqCst),
            0,
            "no write after the stop"
        );
        assert_eq!(fake.holder(), "");
    }

    #[tokio::test]
    async fn a_leader_stopped_during_a_renewal_releases_at_once_and_the_renewal_is_refused() {
        let fake = FakeLeases::holding("me");
        let (running, state) = Running::leading(&fake, "me").await;
        fake.hold_next_write().await; // the next renewal's
        let run = running.signal();
        // No wait for the renewal: the elector releases and stops at once.
        tokio::time::timeout(STOP_WAIT / 2 - Duration::from_millis(500), run)
            .await
            .expect("stopped without waiting for the renewal")
            .expect("no panic");
        assert!(!state.borrow().is_leader);
        assert_eq!(fake.holder(), "", "released");
        // The renewal lands now, naming the resourceVersion the release replaced.
        fake.gate.notify_one();
        tokio::time::timeout(Duration::from_secs(10), fake.refused.notified())
            .await
            .expect("the renewal refused");
        assert_eq!(fake.holder(), "", "still released");
    }

    #[tokio::test]
    async fn a_new_holder_counts_a_transition_and_a_renewal_keeps_the_acquire_time() {
        let elector = FakeLeases::holding("").elector("me");
        let first = elector.spec_for_me(None);
        assert_eq!(first.lease_transitions, Some(0));
        assert_eq!(first.acquire_time, first.renew_time);
        let acquired = MicroTime(Timestamp::UNIX_EPOCH);
        let mine = LeaseSpec {
            holder_identity: Some("me".into()),
            acquire_time: Some(acquired.clone()),
            lease_transitions: Some(2),
            ..Default::default()
        };
        let renewed = elector.spec_for_me(Some(&mine));
        assert_eq!(renewed.lease_transitions, Some(2));
        assert_eq!(renewed.acquire_time, Some(acquired.clone()));
        let theirs = LeaseSpec {
            holder_identity: Some("them".into()),
            ..mine
        };
        let taken = elector.spec_for_me(Some(&theirs));
        assert_eq!(taken.lease_transitions, Some(3));
        assert_eq!(taken.acquire_time, taken.renew_time);
        assert_eq!(taken.holder_identity.as_deref(), Some("me"));
        // A released Lease taken again, even by its last holder, is a transition too.
        let released = LeaseSpec {
            holder_identity: None,
            ..theirs
        };
        let retaken = elector.spec_for_me(Some(&released));
        assert_eq!(retaken.lease_transitions, Some(3));
        assert_eq!(retaken.acquire_time, retaken.renew_time);
    }

    #[tokio::test]
    async fn a_leader_stopped_while_retaking_a_cleared_lease_lets_the_write_land_then_releases() {
        let fake = FakeLeases::holding("me");
        let (running, _state) = Running::leading(&fake, "me").await;
        // Someone clears the holder by hand; the leader's next attempt takes the Lease again
        // (a write with no holder of its own to refuse it) and that write is held.
        fake.lease.lock().expect("lease")["spec"]["holderIdentity"] = serde_json::Value::Null;
        fake.hold_next_write().await;
        running.stop_through_gate(&fake, "the re-take").await;
        assert_eq!(fake.holder(), "", "released after the re-take landed");
    }

    #[test]
    fn always_leader_says_so() {
        let rx = always_leader("me");
        assert!(rx.borrow().is_leader);
        assert_eq!(rx.borrow().holder.as_deref(), Some("me"));
    }
}
