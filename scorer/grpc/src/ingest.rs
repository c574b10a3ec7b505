//! The `loadstar.v1.Ingest` gRPC service: each agent stream's reports validated and stored,
//! and answered with acks (one per report, or sparse when the agent asks), read as tonic
//! sends the acks (no task per stream). A bad report
//! is rejected in its ack and the stream goes on; a broken stream (undecodable bytes) ends
//! only that stream.
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use loadstar_proto::codec::EncodedReport;
use loadstar_proto::{encoded, pb};
use std::pin::Pin;

use futures::Stream;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Span, debug, debug_span, info, warn};

use loadstar_auth::AgentGrant;
use loadstar_common::rate::{RateLimit, TokenBucket};
use loadstar_common::text::truncate;

use loadstar_store::metrics::{Metrics, ReasonLabel};
use loadstar_store::validate::ReportError;
use loadstar_store::{Applied, NodeStore, StreamId};

use crate::gate::{Gate, peer};
use crate::pacing::Pace;

/// Per-stream ingest limits; see [`IngestLimits::default`].
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct IngestLimits {
    /// Reports per second one stream may send before the scorer reads it more slowly (the
    /// stream is paced, not refused: HTTP/2 flow control pushes back on the sender).
    pub reports_per_second: f64,
    /// Reports a stream may send at once above the rate.
    pub burst: u32,
}

impl Default for IngestLimits {
    /// 20 reports/s, burst 40: twenty times the agent's default 1 Hz, and enough for its
    /// fastest sensible interval (0.1 s) with slack.
    fn default() -> Self {
        IngestLimits {
            reports_per_second: 20.0,
            burst: 40,
        }
    }
}

/// The ingest service. Each agent stream keeps a clone, so it is one shared pointer.
#[derive(Debug, Clone)]
pub struct IngestService {
    inner: Arc<IngestInner>,
}

/// What [`IngestService`] shares between its streams.
#[derive(Debug, Clone)]
struct IngestInner {
    store: Arc<NodeStore>,
    metrics: Arc<Metrics>,
    pace: Pace,
    /// The server's shutdown signal; each stream waits on it through its borrow of this
    /// service, so a stream holds no handle of its own.
    closing: CancellationToken,
    limits: IngestLimits,
    gate: Gate,
}

/// What handling one report decided.
#[derive(Debug)]
pub struct Handled {
    /// The ack for the report.
    pub ack: pb::ReportAck,
    /// End the stream with this status after the ack (another stream owns the node).
    pub end: Option<Status>,
}

impl IngestService {
    /// A service storing into `store`. `pace` is the report interval pushed back to agents in
    /// every ack (0: no preference; a [`crate::pacing::Pacer`] may move it).
    pub fn new(store: Arc<NodeStore>, metrics: Arc<Metrics>, pace: Pace) -> Self {
        IngestService {
            inner: Arc::new(IngestInner {
                store,
                metrics,
                pace,
                closing: CancellationToken::new(),
                limits: IngestLimits::default(),
                gate: Gate::open(),
            }),
        }
    }

    /// Checks agents at `gate`.
    pub fn with_gate(mut self, gate: Gate) -> Self {
        Arc::make_mut(&mut self.inner).gate = gate;
        self
    }

    /// Sets the per-stream limits.
    pub fn with_limits(mut self, limits: IngestLimits) -> Self {
        Arc::make_mut(&mut self.inner).limits = limits;
        self
    }

    /// Ends agent streams when `closing` is cancelled, so agents move to another replica and
    /// a graceful shutdown is not held open by them.
    pub fn with_closing(mut self, closing: CancellationToken) -> Self {
        Arc::make_mut(&mut self.inner).closing = closing;
        self
    }

    fn reject(&self, reason: &'static str) {
        self.inner
            .metrics
            .reports_rejected
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    fn refuse(&self, reason: &'static str) {
        self.inner
            .metrics
            .ingest_refused
            .get_or_create(&ReasonLabel {
                reason: reason.into(),
            })
            .inc();
    }

    /// Handles one report of stream `stream`, whose first accepted node was `stream_node`,
    /// authenticated as `grant` (none: authentication is off).
    /// `encoded`, if given, is the bytes `report` was decoded from (the store keeps them).
    pub fn handle(
        &self,
        stream: StreamId,
        stream_node: &mut Option<Box<str>>,
        report: pb::NodeReport,
        encoded: Option<prost::bytes::Bytes>,
        grant: Option<(&AgentGrant, Option<std::net::SocketAddr>)>,
    ) -> Handled {
        let sequence = report.sequence;
        let sample_nanos = report.sample_time_unix_nanos;
        if let Some((grant, peer)) = grant
            && let Err(status) = self.inner.gate.report(grant, &report.node_name, peer)
        {
            return Handled {
                ack: pb::ReportAck {
                    sequence,
                    accepted: false,
                    reject_reason: status.message().to_string(),
                    desired_interval_seconds: self.inner.pace.get(),
                },
                end: Some(status),
            };
        }
        let principal = grant.map(|(g, _)| g.pod.uid.as_str());
        let result = match stream_node.as_deref() {
            Some(n) if n != report.node_name => Err(ReportError::NodeChanged {
                expected: n.to_string(),
                got: truncate(&report.node_name, 64),
            }),
            _ => {
                let name = report.node_name.clone();
                let r = self.inner.store.apply_stream_report(
                    report,
                    encoded,
                    Instant::now(),
                    stream,
                    principal,
                );
                if r.is_ok() && stream_node.is_none() {
                    *stream_node = Some(name.into_boxed_str());
                }
                r
            }
        };
        let ack = |accepted: bool, reject_reason: String| pb::ReportAck {
            sequence,
            accepted,
            reject_reason,
            desired_interval_seconds: self.inner.pace.get(),
        };
        match result {
            Ok(applied) => {
                if applied == Applied::Unchanged {
                    // Acknowledged again, but neither a new report nor a new sample.
                    debug!("the stored report came again; acknowledged");
                } else {
                    self.inner.metrics.reports_accepted.inc();
                    if let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) {
                        let lag = now.as_nanos() as f64 - sample_nanos as f64;
                        if lag >= 0.0 && sample_nanos > 0 {
                            self.inner.metrics.report_lag.observe(lag / 1e9);
                        }
                    }
                }
                Handled {
                    ack: ack(true, String::new()),
                    end: None,
                }
            }
            Err(e) => {
                self.reject(e.kind());
                debug!(error = %e, "report rejected");
                let end = matches!(e, ReportError::Owned { .. }).then(|| {
                    self.refuse("owned");
                    Status::already_exists(e.to_string())
                });
                Handled {
                    ack: ack(false, e.to_string()),
                    end,
                }
            }
        }
    }

    /// Waits until `bucket`, found empty with its next token `wait` away, lets the stream's
    /// next report in; `false` if the server closes meanwhile. Its caller boxes it: only a
    /// throttled stream waits here, and this future (a `Sleep` and a wait on the shutdown
    /// signal) inside every stream's own would be ~0.2 KB per agent stream.
    async fn throttle(&self, bucket: &mut TokenBucket, mut wait: std::time::Duration) -> bool {
        loop {
            self.inner.metrics.ingest_throttled.inc();
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.inner.closing.cancelled() => return false,
            }
            match bucket.try_take(std::time::Instant::now()) {
                Ok(()) => return true,
                Err(next) => wait = next,
            }
        }
    }

    /// The next item of an agent stream: the ack of its next report, a final status, or
    /// `None` when it ends (it ran out, the server closes, or it was refused). When the agent
    /// set `ack_interval_seconds`, accepted reports are read on without an ack until one is
    /// due ([`StreamState::ack_due`]); the last one's ack is still sent when the stream ends.
    async fn next_ack(&self, s: &mut StreamState) -> Option<Result<pb::ReportAck, Status>> {
        if let Some(status) = s.end.take() {
            s.done = true;
            return Some(Err(status));
        }
        loop {
            if let Err(wait) = s.bucket.try_take(std::time::Instant::now())
                && !Box::pin(self.throttle(&mut s.bucket, wait)).await
            {
                return s.shutting_down();
            }
            let next = tokio::select! {
                m = s.inbound.message() => m,
                _ = self.inner.closing.cancelled() => return s.shutting_down(),
            };
            // A report is handled in its stream's span, entered here and left before the
            // next wait: the waits are not work, and no future of the stream then keeps a copy
            // of the span (40 bytes per stream, i.e. per node).
            let span = s.guard.span.clone();
            let _in_span = span.enter();
            match next {
                Ok(Some(EncodedReport { report, encoded })) => {
                    let first = s.guard.node.is_none();
                    let ack_every = report.ack_interval_seconds;
                    let grant = s.grant.as_deref().map(|g| (g, s.guard.peer));
                    let handled = self.handle(
                        s.guard.stream,
                        &mut s.guard.node,
                        report,
                        Some(encoded),
                        grant,
                    );
                    if first && let Some(n) = &s.guard.node {
                        // Recorded once per stream: the span's fields never grow.
                        s.guard.span.record("node", &**n);
                    }
                    if let Some(status) = handled.end {
                        warn!(peer = ?s.guard.peer, node = s.guard.node.as_deref(), pod = s.guard.pod.as_deref(),
                              reason = %status.message(), "agent stream refused");
                        s.end = Some(status);
                    } else if handled.ack.accepted && !s.ack_due(ack_every, &handled.ack) {
                        s.unsent = Some(handled.ack);
                        continue;
                    }
                    s.sent(&handled.ack);
                    return Some(Ok(handled.ack));
                }
                Ok(None) => return s.last_ack(),
                Err(status) => {
                    // Undecodable or oversized: the stream cannot go on, but the agent is told
                    // why (a status, never a silent OK).
                    let code = status.code();
                    let reason = if code == tonic::Code::OutOfRange {
                        "too_large"
                    } else {
                        "broken"
                    };
                    warn!(peer = ?s.guard.peer, node = s.guard.node.as_deref(), pod = s.guard.pod.as_deref(),
                          code = ?status.code(), message = %truncate(status.message(), 512), "agent stream broken");
                    self.reject("stream");
                    self.refuse(reason);
                    let message = format!(
                        "stream ended by the scorer: {}",
                        truncate(status.message(), 1024)
                    );
                    let status = Status::new(code, message);
                    // The reports stored before it still get their ack, then the status.
                    if let Some(ack) = s.unsent.take() {
                        s.sent(&ack);
                        s.end = Some(status);
                        return Some(Ok(ack));
                    }
                    s.done = true;
                    return Some(Err(status));
                }
            }
        }
    }
}

/// One agent stream's state between two acks. The stream is served by its own response: each
/// ack tonic asks for reads, handles and answers the next report, so a stream costs no task
/// or ack channel of its own (at one stream per node, that is memory per node).
struct StreamState {
    inbound: Streaming<EncodedReport>,
    /// Boxed: only with authentication on, and ~130 bytes a stream otherwise.
    grant: Option<Box<AgentGrant>>,
    bucket: TokenBucket,
    /// A status to end the stream with after the ack just sent.
    end: Option<Status>,
    /// The item just returned is the stream's last (a final status or ack).
    done: bool,
    /// When the stream's last ack went and the interval it asked for (its bits).
    acked: Option<(Instant, u64)>,
    /// The ack of the latest accepted report, not sent yet (sparse acks).
    unsent: Option<pb::ReportAck>,
    guard: StreamGuard,
}

// A stream's service and state, boxed together, fit the allocator's 512-byte size class
// (mimalloc's next is 640): growing them past it costs 128 bytes per agent stream, per node.
const _: () = assert!(std::mem::size_of::<(IngestService, StreamState)>() <= 512);

impl StreamState {
    /// Whether an accepted report's `ack` goes now, for a report that let acks be
    /// `ack_every` seconds apart: always with 0, else for the stream's first ack, a changed
    /// interval, or when the last ack is that old.
    fn ack_due(&self, ack_every: f64, ack: &pb::ReportAck) -> bool {
        if !(ack_every.is_finite() && ack_every > 0.0) {
            return true;
        }
        let every = std::time::Duration::from_secs_f64(
            ack_every.min(loadstar_proto::limits::MAX_ACK_INTERVAL_SECONDS as f64),
        );
        self.acked.is_none_or(|(at, pace)| {
            pace != ack.desired_interval_seconds.to_bits() || at.elapsed() >= every
        })
    }

    /// Notes that `ack` is sent: it stands for the ack not sent yet unless that one is of a
    /// later report (a client whose sequence went back).
    fn sent(&mut self, ack: &pb::ReportAck) {
        self.acked = Some((Instant::now(), ack.desired_interval_seconds.to_bits()));
        if self
            .unsent
            .as_ref()
            .is_some_and(|u| u.sequence <= ack.sequence)
        {
            self.unsent = None;
        }
    }

    /// The server closes: logged, then [`StreamState::last_ack`].
    fn shutting_down(&mut self) -> Option<Result<pb::ReportAck, Status>> {
        let g = &self.guard;
        g.span.in_scope(|| {
            info!(peer = ?g.peer, node = g.node.as_deref(), pod = g.pod.as_deref(),
                  "scorer shutting down; ending agent stream");
        });
        self.last_ack()
    }

    /// The stream's end: the ack not sent yet, if any, as its last item; else `None`.
    fn last_ack(&mut self) -> Option<Result<pb::ReportAck, Status>> {
        let ack = self.unsent.take()?;
        self.done = true;
        Some(Ok(ack))
    }
}

/// Gives the stream's node back to the store and counts the stream closed when the stream
/// is dropped: when it ends, and when the agent or the server goes away mid-report.
struct StreamGuard {
    store: Arc<NodeStore>,
    metrics: Arc<Metrics>,
    stream: StreamId,
    /// The node of the stream's first accepted report.
    node: Option<Box<str>>,
    /// Who is at the other end, for the stream's log lines (its span is at debug level).
    peer: Option<std::net::SocketAddr>,
    /// The authenticated agent pod (`namespace/name`), if authentication is on.
    pod: Option<Box<str>>,
    span: Span,
}

impl Drop for StreamGuard {
    fn drop(&mut self) {
        if let Some(n) = &self.node {
            self.store.release(n, self.stream);
        }
        self.metrics.ingest_streams.dec();
        self.span.in_scope(|| {
            info!(peer = ?self.peer, node = self.node.as_deref(), pod = self.pod.as_deref(),
                  "agent stream closed");
        });
    }
}

/// The acks of one agent stream (see [`StreamState`]).
pub type AckStream = Pin<Box<dyn Stream<Item = Result<pb::ReportAck, Status>> + Send>>;

#[tonic::async_trait]
impl encoded::ingest_server::Ingest for IngestService {
    type ReportStream = AckStream;

    async fn report(
        &self,
        request: Request<Streaming<EncodedReport>>,
    ) -> Result<Response<Self::ReportStream>, Status> {
        let peer = peer(&request);
        // Before any report is decoded: who is this?
        let grant = self.inner.gate.agent(&request).await?;
        let inbound = request.into_inner();
        // A debug span: at 10 000 agent streams an enabled span per stream is ~0.4 KB each in
        // the subscriber's registry and an enter, exit and clone per report (~3 % of ingest
        // CPU). The stream's own log lines name its peer, node and pod instead.
        let pod = grant.as_ref().map(|g| g.pod_key().into_boxed_str());
        let span = debug_span!("ingest_stream", peer = ?peer, node = tracing::field::Empty,
                               pod = pod.as_deref());
        self.inner.metrics.ingest_streams.inc();
        let state = StreamState {
            inbound,
            grant: grant.map(Box::new),
            bucket: TokenBucket::new(
                RateLimit {
                    qps: self.inner.limits.reports_per_second,
                    burst: self.inner.limits.burst,
                },
                std::time::Instant::now(),
            ),
            end: None,
            done: false,
            acked: None,
            unsent: None,
            guard: StreamGuard {
                store: self.inner.store.clone(),
                metrics: self.inner.metrics.clone(),
                stream: StreamId::next(),
                node: None,
                peer,
                pod,
                span,
            },
        };
        // The service and the stream's state in one box the ack future borrows from: moved
        // by value, `unfold` kept them twice in its future (once captured, once taken out),
        // ~1.8 KB per stream instead of ~1 KB with the box.
        let st = Box::new((self.clone(), state));
        let acks = futures::stream::unfold(Some(st), |st| async move {
            let mut st = st?;
            let (this, s) = &mut *st;
            let item = this.next_ack(s).await?;
            // A stream whose last item this is gives its node back now, not when hyper
            // drops the response (which waits for the agent to read the status).
            let last = s.done;
            Some((item, (!last).then_some(st)))
        });
        Ok(Response::new(Box::pin(acks)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_store::StoreConfig;
    use loadstar_testkit::agent::fixed_report as report;

    #[test]
    fn stream_may_not_change_node() {
        let svc = IngestService::new(
            Arc::new(NodeStore::new(StoreConfig::default())),
            Metrics::new(),
            Pace::fixed(1.0),
        );
        let mut node = None;
        let stream = StreamId::next();
        assert!(
            svc.handle(stream, &mut node, report("a", 1, 0.1, 0.1), None, None)
                .ack
                .accepted
        );
        let ack = svc
            .handle(stream, &mut node, report("b", 2, 0.1, 0.1), None, None)
            .ack;
        assert!(!ack.accepted);
        assert_eq!(
            ack.reject_reason,
            "stream for node a sent a report for node b"
        );
        let mut bad = report("a", 3, 0.1, 0.1);
        bad.capacity = None;
        let ack = svc.handle(stream, &mut node, bad, None, None).ack;
        assert_eq!(ack.reject_reason, "node a: capacity is missing");
        assert!(
            svc.handle(stream, &mut node, report("a", 4, 0.1, 0.1), None, None)
                .ack
                .accepted
        );
    }
}
