//! One stream per scorer address: connect, send the latest report whenever it changes, read
//! the acks, and reconnect after a backoff until shutdown. A report the address already
//! acknowledged is not sent again after a reconnect; the backoff resets on every ack. The
//! bearer token is sent when a stream opens; when the kubelet rotates the token file, the
//! stream is reopened at once with the new token (the scorer ends streams whose token
//! expired). When the scorer's acks ask for a report interval (`desired_interval_seconds`,
//! raised by a loaded scorer), the stream sends its latest report that often (up to
//! [`MAX_PACED_INTERVAL`]), on a grid of the interval at its node's own phase so that agents
//! told together do not report together (`loadstar_common::pace`), and says so in
//! `report_interval_seconds`; sampling is untouched.
//! Each report lets the scorer's acks of accepted reports be up to the configured
//! `ack_interval` apart (`ack_interval_seconds`); an ack stands for every report up to its
//! sequence that no ack of its own rejected, and after a reconnect the latest report goes
//! again unless acked (the scorer accepts its stored report again without change).
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use tokio::sync::oneshot;
use tonic::metadata::{Ascii, MetadataValue};
use tonic::transport::{ClientTlsConfig, Endpoint, Uri};
use tracing::{debug, info};

use super::error::ReportError;
use super::shared::{ReportReceiver, Shared, closed};
use super::target::ScorerTarget;
use super::throttle::Throttle;
use loadstar_common::backoff::Backoff;
use loadstar_common::pace;

/// HTTP/2 keepalive ping interval: detects a scorer that vanished without closing.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive ping timeout.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// How often the token file is checked for rotation (the kubelet rotates at 80 % of the
/// token's lifetime, at least 10 minutes ahead of expiry).
pub const TOKEN_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The longest report interval a scorer can ask for: a scorer that asks for more still hears
/// from the agent this often.
pub const MAX_PACED_INTERVAL: Duration = Duration::from_secs(300);

/// The report interval this stream's scorer asks for, from its acks (`None`: no preference).
fn paced_interval(pace: &AtomicU64) -> Option<Duration> {
    let s = f64::from_bits(pace.load(Ordering::Relaxed));
    (s.is_finite() && s > 0.0).then(|| Duration::from_secs_f64(s).min(MAX_PACED_INTERVAL))
}

/// The reports to send on one stream: the latest one at once, then each new one — while
/// paced, at the next point of the node's grid of the interval (`pace::next_send_delay`,
/// the grid starting with the stream) — skipping those the scorer acknowledged already
/// (after a reconnect). Each report states the interval in force when it is sent; the next
/// one comes within the interval it stated, even if the scorer asked for a longer one
/// meanwhile (the scorer judges staleness by what the last report said). Only the first send
/// after the interval changes can come sooner than the interval, moving onto the new grid.
/// The stream ends as soon as the report channel closes, also while waiting out a pace.
fn outbound(
    reports: ReportReceiver,
    acked: Arc<AtomicU64>,
    pace: Arc<AtomicU64>,
    on_send: Arc<dyn Fn() + Send + Sync>,
) -> impl futures::Stream<Item = pb::NodeReport> + Send + 'static {
    /// The receiver, when the last report went and the interval it stated, and whether the
    /// current report is still to be sent at once.
    type State = (
        ReportReceiver,
        Option<(tokio::time::Instant, Duration)>,
        bool,
    );
    let init: State = (reports, None, true);
    let origin = tokio::time::Instant::now();
    futures::stream::unfold(init, move |(mut rx, last, first)| {
        let (acked, pace, sent) = (acked.clone(), pace.clone(), on_send.clone());
        async move {
            let mut first = first;
            loop {
                if !first {
                    // A new sample…
                    if rx.changed().await.is_err() {
                        return None;
                    }
                    // …sent at the node's grid point of the pace, no later than the last
                    // promise (sooner than the pace only when moving onto a new grid).
                    while let Some((at, stated)) = last {
                        let Some(every) = paced_interval(&pace) else {
                            break;
                        };
                        let phase = rx
                            .borrow()
                            .as_ref()
                            .map_or(0.0, |r| pace::phase_of(&r.node_name));
                        let wait = pace::next_send_delay(at - origin, stated, every, phase);
                        tokio::select! {
                            () = tokio::time::sleep_until(at + wait) => break,
                            r = rx.changed() => if r.is_err() { return None },
                        }
                    }
                }
                first = false;
                let latest = rx.borrow_and_update().clone();
                let Some(r) = latest.filter(|r| r.sequence > acked.load(Ordering::Relaxed)) else {
                    continue;
                };
                let mut report = pb::NodeReport::clone(&r);
                let every = paced_interval(&pace)
                    .filter(|d| d.as_secs_f64() > report.sample_interval_seconds);
                report.report_interval_seconds = every.map_or(0.0, |d| d.as_secs_f64());
                sent();
                let now = tokio::time::Instant::now();
                return Some((report, (rx, every.map(|d| (now, d)), false)));
            }
        }
    })
}

/// How a session ended without an error.
enum SessionEnd {
    /// The report channel closed: shutting down.
    Shutdown,
    /// The scorer ended the stream cleanly.
    ServerEnded,
    /// The token file changed: reopen with the new token.
    TokenRotated,
}

/// Streams to one scorer address, reconnecting until shutdown.
pub(super) async fn connection(
    target: Arc<ScorerTarget>,
    addr: SocketAddr,
    shared: Arc<Shared>,
    mut reports: ReportReceiver,
) {
    let label = addr.to_string();
    let mut backoff = Backoff::new(shared.backoff);
    let mut throttle = Throttle::default();
    // Highest sequence this address acknowledged: after a reconnect to the same scorer the
    // current report may be one it already stored (the store rejects a sequence that does
    // not increase), so such a report is skipped and the next one goes first.
    let last_acked = Arc::new(AtomicU64::new(0));
    loop {
        if reports.has_changed().is_err() {
            break;
        }
        let result = session(
            &target,
            addr,
            &shared,
            &reports,
            &mut backoff,
            &label,
            &last_acked,
        )
        .await;
        shared.metrics.set_connected(&label, false);
        if !matches!(result, Ok(SessionEnd::Shutdown)) {
            shared.metrics.stream_reconnect(&label);
        }
        match result {
            Ok(SessionEnd::Shutdown) => break,
            Ok(SessionEnd::ServerEnded) => {
                info!("scorer ended the stream; reconnecting");
            }
            Ok(SessionEnd::TokenRotated) => {
                info!("token rotated; reopening the stream with the new token");
                continue;
            }
            Err(e) => {
                shared.metrics.report_error(&label);
                throttle.log(&e.to_string());
            }
        }
        let delay = backoff.next_delay(rand::random());
        debug!(
            ?delay,
            attempt = backoff.attempts(),
            "reconnecting after delay"
        );
        tokio::select! {
            _ = tokio::time::sleep(delay) => {}
            _ = closed(&mut reports) => break,
        }
    }
    shared.metrics.set_connected(&label, false);
}

/// One connection and stream; returns how it ended.
async fn session(
    target: &ScorerTarget,
    addr: SocketAddr,
    shared: &Shared,
    reports: &ReportReceiver,
    backoff: &mut Backoff,
    label: &str,
    last_acked: &Arc<AtomicU64>,
) -> Result<SessionEnd, ReportError> {
    let endpoint = endpoint(target, addr, shared)?;
    let token = match &shared.token_file {
        Some(path) => Some(read_token(path)?),
        None => None,
    };
    let channel = endpoint
        .connect()
        .await
        .map_err(|source| ReportError::Connect {
            scorer: addr,
            source,
        })?;
    let mut client = IngestClient::new(channel);
    let metrics = shared.metrics.clone();
    let sent_label = label.to_string();
    let pace = Arc::new(AtomicU64::new(0f64.to_bits()));
    let outbound = outbound(
        reports.clone(),
        last_acked.clone(),
        pace.clone(),
        Arc::new(move || metrics.report_sent(&sent_label)),
    );
    // The request body is pumped by the HTTP/2 connection's own task: tie its end to this
    // session, so a session that ends (or is aborted) also ends its stream.
    let (_end_stream, end) = oneshot::channel::<()>();
    let ack_interval = shared.ack_interval.as_secs_f64();
    let outbound = futures::StreamExt::map(outbound, move |mut report| {
        report.ack_interval_seconds = ack_interval;
        report
    });
    let mut request = tonic::Request::new(futures::StreamExt::take_until(outbound, end));
    if let Some(token) = token.clone() {
        request.metadata_mut().insert("authorization", token);
    }
    let acks = client
        .report(request)
        .await
        .map_err(|source| ReportError::Stream {
            scorer: addr,
            source,
        })?
        .into_inner();
    shared.metrics.set_connected(label, true);
    info!("stream open");
    let rotated = token_rotated(shared.token_file.as_deref(), token);
    tokio::select! {
        r = read_acks(acks, addr, shared, reports, backoff, label, last_acked, &pace) => r,
        () = rotated => Ok(SessionEnd::TokenRotated),
    }
}

/// Resolves when the token file holds another valid token than `sent` (never without a
/// file). A file that cannot be read right now (mid-rotation) is checked again later.
async fn token_rotated(path: Option<&Path>, sent: Option<MetadataValue<Ascii>>) {
    let (Some(path), Some(sent)) = (path, sent) else {
        return std::future::pending().await;
    };
    loop {
        tokio::time::sleep(TOKEN_CHECK_INTERVAL).await;
        if read_token(path).is_ok_and(|now| now != sent) {
            return;
        }
    }
}

/// The endpoint of one scorer address: timeouts, keepalive, the target's origin, and TLS
/// (checked against the target's host name) for `https`.
fn endpoint(
    target: &ScorerTarget,
    addr: SocketAddr,
    shared: &Shared,
) -> Result<Endpoint, ReportError> {
    let scheme = if target.tls { "https" } else { "http" };
    let err = |source| ReportError::Endpoint {
        scorer: addr,
        source,
    };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(err)?
        .connect_timeout(shared.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    if let Ok(origin) = target.origin().parse::<Uri>() {
        endpoint = endpoint.origin(origin);
    }
    if target.tls {
        // --tls-ca (a cluster-internal CA) alone when given: a scorer certificate is then
        // trusted only from it. Otherwise the system's CAs (public or corporate).
        let mut tls = ClientTlsConfig::new().domain_name(target.host.clone());
        tls = match &shared.ca {
            Some(ca) => tls.ca_certificate(ca.clone()),
            None => tls.with_native_roots(),
        };
        endpoint = endpoint.tls_config(tls).map_err(err)?;
    }
    Ok(endpoint)
}

/// Reads acks until the stream ends: each resets the backoff, raises `last_acked` and sets
/// the stream's `pace`.
#[allow(clippy::too_many_arguments)]
async fn read_acks(
    mut acks: tonic::Streaming<pb::ReportAck>,
    addr: SocketAddr,
    shared: &Shared,
    reports: &ReportReceiver,
    backoff: &mut Backoff,
    label: &str,
    last_acked: &AtomicU64,
    pace: &AtomicU64,
) -> Result<SessionEnd, ReportError> {
    let opened = Instant::now();
    let mut rejected = Throttle::default();
    loop {
        match acks.message().await {
            Ok(Some(ack)) => {
                backoff.reset();
                last_acked.fetch_max(ack.sequence, Ordering::Relaxed);
                let desired = ack.desired_interval_seconds;
                let desired = if desired.is_finite() && desired > 0.0 {
                    desired
                } else {
                    0.0
                };
                if pace.swap(desired.to_bits(), Ordering::Relaxed) != desired.to_bits() {
                    info!(
                        interval_s = desired,
                        "scorer asks for reports at this interval (0: every sample)"
                    );
                }
                if !ack.accepted {
                    shared.metrics.report_rejected(label);
                    rejected.log(&format!("report rejected: {}", ack.reject_reason));
                }
            }
            Ok(None) => {
                debug!(open_for = ?opened.elapsed(), "ack stream ended");
                return Ok(if reports.has_changed().is_err() {
                    SessionEnd::Shutdown
                } else {
                    SessionEnd::ServerEnded
                });
            }
            Err(source) => {
                if reports.has_changed().is_err() {
                    return Ok(SessionEnd::Shutdown);
                }
                return Err(ReportError::Stream {
                    scorer: addr,
                    source,
                });
            }
        }
    }
}

/// `Bearer <token>` from a token file (trimmed).
fn read_token(path: &Path) -> Result<MetadataValue<Ascii>, ReportError> {
    let err = |reason: String| ReportError::Token {
        path: path.to_path_buf(),
        reason,
    };
    let token = std::fs::read_to_string(path).map_err(|e| err(e.to_string()))?;
    let token = token.trim();
    if token.is_empty() {
        return Err(err("file is empty".into()));
    }
    MetadataValue::try_from(format!("Bearer {token}"))
        .map_err(|_| err("token contains characters not allowed in a header".into()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn token_file() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("token");
        std::fs::write(&p, "abc.def\n").expect("write");
        assert_eq!(read_token(&p).expect("valid"), "Bearer abc.def");
        std::fs::write(&p, "\n").expect("write");
        assert!(read_token(&p).is_err());
        assert!(read_token(&dir.path().join("missing")).is_err());
    }

    /// What the sampler publishes: report `sequence`, sampled every second.
    fn report(sequence: u64) -> Option<Arc<pb::NodeReport>> {
        Some(Arc::new(pb::NodeReport {
            sequence,
            sample_interval_seconds: 1.0,
            ..Default::default()
        }))
    }

    #[tokio::test(start_paused = true)]
    async fn reports_follow_the_pace_the_scorer_asks_for() {
        use futures::StreamExt as _;
        let (tx, rx) = tokio::sync::watch::channel(report(1));
        let acked = Arc::new(AtomicU64::new(0));
        let pace = Arc::new(AtomicU64::new(0f64.to_bits()));
        let sends = Arc::new(AtomicU64::new(0));
        let counter = sends.clone();
        let stream = outbound(
            rx,
            acked.clone(),
            pace.clone(),
            Arc::new(move || {
                counter.fetch_add(1, Ordering::Relaxed);
            }),
        );
        // The sampler: one report a second for 40 s.
        let sampler = tokio::spawn(async move {
            for seq in 2..=41 {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tx.send_replace(report(seq));
            }
        });
        let start = tokio::time::Instant::now();
        let mut seen: Vec<(u64, f64, u64)> = Vec::new();
        tokio::pin!(stream);
        while let Some(r) = stream.next().await {
            let at = start.elapsed().as_secs();
            seen.push((r.sequence, r.report_interval_seconds, at));
            // No preference for the first 10 s, then the scorer asks for 5 s.
            if at >= 10 {
                pace.store(5.0f64.to_bits(), Ordering::Relaxed);
            }
            if at >= 40 {
                break;
            }
        }
        sampler.await.expect("sampler");
        let unpaced: Vec<_> = seen.iter().filter(|s| s.2 < 10).collect();
        assert_eq!(unpaced.len(), 10, "every sample while unpaced: {seen:?}");
        assert!(unpaced.iter().all(|s| s.1 == 0.0), "{seen:?}");
        let paced: Vec<_> = seen.iter().filter(|s| s.2 > 10).collect();
        // The first paced send moves onto the node's grid, within the 5 s; then every 5 s.
        for (i, w) in paced.windows(2).enumerate() {
            let gap = w[1].2 - w[0].2;
            assert!(gap <= 5, "promise broken: {seen:?}");
            assert!(i == 0 || gap == 5, "off the pace: {seen:?}");
        }
        assert!((5..=8).contains(&paced.len()), "{seen:?}");
        assert!(paced.iter().all(|s| s.1 == 5.0), "{seen:?}");
        // Each paced send carries the latest sample, not a stale one.
        assert!(paced.iter().all(|s| s.0 >= s.2), "{seen:?}");
        assert_eq!(sends.load(Ordering::Relaxed), seen.len() as u64);
        // A pace above the cap is held to it.
        pace.store(1e9f64.to_bits(), Ordering::Relaxed);
        assert_eq!(paced_interval(&pace), Some(MAX_PACED_INTERVAL));
        pace.store(f64::NAN.to_bits(), Ordering::Relaxed);
        assert_eq!(paced_interval(&pace), None);
    }

    #[tokio::test(start_paused = true)]
    async fn a_longer_pace_keeps_the_last_promise_and_shutdown_does_not_wait() {
        use futures::StreamExt as _;
        let (tx, rx) = tokio::sync::watch::channel(report(1));
        let pace = Arc::new(AtomicU64::new(5f64.to_bits()));
        let stream = outbound(
            rx,
            Arc::new(AtomicU64::new(0)),
            pace.clone(),
            Arc::new(|| {}),
        );
        tokio::pin!(stream);
        let sampler = tokio::spawn(async move {
            for seq in 2.. {
                tokio::time::sleep(Duration::from_secs(1)).await;
                tx.send_replace(report(seq));
                if seq == 100 {
                    break;
                }
            }
            // The sender drops: shutting down.
        });
        let start = tokio::time::Instant::now();
        let first = stream.next().await.expect("first");
        assert_eq!((first.sequence, first.report_interval_seconds), (1, 5.0));
        // The scorer now asks for 30 s: the next report still comes within the 5 s promised,
        // and states 30.
        pace.store(30f64.to_bits(), Ordering::Relaxed);
        let second = stream.next().await.expect("second");
        let t2 = start.elapsed().as_secs_f64();
        assert!(t2 <= 5.0 + 1e-6, "promise broken: {t2}");
        assert_eq!(second.report_interval_seconds, 30.0);
        // Then on the node's 30 s grid (its phase of its name; the grid starts with the
        // stream): within 30 s of the second.
        // (Tokio's timer rounds up to the millisecond.)
        let on_grid = |t: f64| {
            let off = (t - 30.0 * pace::phase_of("")).rem_euclid(30.0);
            !(2e-3..=30.0 - 2e-3).contains(&off)
        };
        let third = stream.next().await.expect("third");
        let t3 = start.elapsed().as_secs_f64();
        assert!(t3 > t2 && t3 - t2 <= 30.0 + 1e-6, "{t2} {t3}");
        assert!(
            on_grid(t3),
            "{t3} off the grid ({t2}, phase {})",
            pace::phase_of("")
        );
        assert!(third.sequence > second.sequence);
        // The sampler stops at 99 s, mid-wait: the stream ends then, after the sends on the
        // grid every 30 s before it.
        let mut sends = Vec::new();
        while stream.next().await.is_some() {
            sends.push(start.elapsed().as_secs_f64());
        }
        let t_end = start.elapsed().as_secs_f64();
        assert!((99.0..100.0).contains(&t_end), "ended at {t_end}");
        let expected: Vec<f64> = (1..)
            .map(|k| t3 + 30.0 * f64::from(k))
            .take_while(|t| *t < 99.0)
            .collect();
        assert_eq!(sends.len(), expected.len(), "{sends:?} {expected:?}");
        for (s, e) in sends.iter().zip(&expected) {
            assert!((s - e).abs() < 2e-3, "{sends:?} {expected:?}");
        }
        sampler.await.expect("sampler");
    }

    #[tokio::test(start_paused = true)]
    async fn a_rotated_token_file_ends_the_session() {
        let dir = tempfile::tempdir().expect("tempdir");
        let p = dir.path().join("token");
        std::fs::write(&p, "first\n").expect("write");
        let sent = read_token(&p).ok();
        let rotated = token_rotated(Some(&p), sent);
        tokio::pin!(rotated);
        // Unchanged (or briefly unreadable) files keep the stream.
        let wait = TOKEN_CHECK_INTERVAL * 3;
        assert!(tokio::time::timeout(wait, &mut rotated).await.is_err());
        std::fs::remove_file(&p).expect("remove");
        assert!(tokio::time::timeout(wait, &mut rotated).await.is_err());
        std::fs::write(&p, "second\n").expect("write");
        tokio::time::timeout(wait, &mut rotated)
            .await
            .expect("rotation noticed within one check interval");
        // Without a token file nothing ever rotates.
        let never = token_rotated(None, None);
        assert!(tokio::time::timeout(wait, never).await.is_err());
    }
}
