//! Streams the sampler's reports to every scorer replica over `loadstar.v1.Ingest/Report`.
//!
//! Design:
//! - The sampler publishes each report into a `watch` channel (latest value). Every scorer
//!   connection reads its own [`WatchStream`] of it, so sampling never waits for the network
//!   and a slow scorer simply skips to the newest report. Reports carry whole windows, so a
//!   skipped report loses nothing but time; the first report on a new stream is the current
//!   one, with full windows.
//! - Each `--scorer` target is resolved every `resolve_interval`; every address it resolves
//!   to gets its own stream (a DNS name of a headless Service reaches every replica, so a
//!   standby is warm). Addresses that disappear are dropped.
//! - A failed connect or stream is retried after a capped exponential backoff with jitter
//!   ([`Backoff`]); the backoff resets once the scorer acknowledges a report. A report the
//!   same address already acknowledged is not sent again after a reconnect.
//! - Optional bearer token (re-read from its file at each connect, so rotation works) and
//!   TLS with a CA file.
//! - Shutdown: when the sampler drops the watch sender, every request stream ends, scorers
//!   end their ack streams, and the tasks finish. The daemon bounds that with a timeout.
use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use loadstar_common::pb;
use loadstar_common::pb::ingest_client::IngestClient;
use thiserror::Error;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tokio_stream::wrappers::WatchStream;
use tokio_stream::{Stream, StreamExt};
use tonic::metadata::MetadataValue;
use tonic::transport::{Certificate, ClientTlsConfig, Endpoint, Uri};
use tracing::{Instrument, debug, info, info_span, warn};

use crate::metrics::AgentMetrics;

/// Default first retry delay.
pub const DEFAULT_BACKOFF_INITIAL: Duration = Duration::from_millis(500);
/// Default cap of the retry delay.
pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(30);
/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time between DNS resolutions of a scorer name.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(30);
/// HTTP/2 keepalive ping interval: detects a scorer that vanished without closing.
pub const KEEPALIVE_INTERVAL: Duration = Duration::from_secs(10);
/// HTTP/2 keepalive ping timeout.
pub const KEEPALIVE_TIMEOUT: Duration = Duration::from_secs(5);
/// A failure that repeats unchanged is logged at warn level again after this many attempts.
const RELOG_ATTEMPTS: u32 = 30;

/// Errors of the reporting module.
#[derive(Debug, Error)]
pub enum ReportError {
    /// A `--scorer` value is not a usable URI.
    #[error("scorer {target:?}: {reason}")]
    InvalidTarget {
        /// The value given.
        target: String,
        /// What is wrong.
        reason: String,
    },
    /// The CA file could not be read.
    #[error("reading TLS CA {path}: {source}")]
    TlsCa {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        #[source]
        source: io::Error,
    },
    /// The bearer token file could not be read or is not a valid header value.
    #[error("bearer token {path}: {reason}")]
    Token {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The endpoint could not be configured (e.g. TLS).
    #[error("configuring endpoint for {scorer}: {source}")]
    Endpoint {
        /// The scorer address.
        scorer: SocketAddr,
        /// tonic's error.
        #[source]
        source: tonic::transport::Error,
    },
    /// Connecting failed.
    #[error("connecting to {scorer}: {source}")]
    Connect {
        /// The scorer address.
        scorer: SocketAddr,
        /// tonic's error.
        #[source]
        source: tonic::transport::Error,
    },
    /// The stream failed.
    #[error("stream to {scorer}: {source}")]
    Stream {
        /// The scorer address.
        scorer: SocketAddr,
        /// The gRPC status.
        #[source]
        source: tonic::Status,
    },
    /// Resolving a scorer name failed.
    #[error("resolving {host}: {source}")]
    Resolve {
        /// The host name.
        host: String,
        /// The resolver's error.
        #[source]
        source: io::Error,
    },
}

/// Exponential backoff parameters.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct BackoffConfig {
    /// Delay before the first retry.
    pub initial: Duration,
    /// Largest delay.
    pub max: Duration,
    /// Growth factor per failed attempt (≥ 1).
    pub multiplier: f64,
    /// Fraction of each delay that is randomised away: the delay is uniform in
    /// [(1 − jitter)·d, d] ("equal jitter" at 0.5).
    pub jitter: f64,
}

impl Default for BackoffConfig {
    /// 0.5 s doubling to 30 s, jitter 0.5.
    fn default() -> Self {
        BackoffConfig {
            initial: DEFAULT_BACKOFF_INITIAL,
            max: DEFAULT_BACKOFF_MAX,
            multiplier: 2.0,
            jitter: 0.5,
        }
    }
}

/// Capped exponential backoff with jitter. Pure: the caller supplies the random number.
#[derive(Debug, Clone)]
pub struct Backoff {
    config: BackoffConfig,
    attempt: u32,
}

impl Backoff {
    /// A backoff at its first attempt.
    pub fn new(config: BackoffConfig) -> Self {
        Backoff { config, attempt: 0 }
    }

    /// The delay before the next attempt, given a uniform random `unit` in [0, 1).
    /// Never more than `max`; never less than `(1 − jitter)·min(initial, max)`.
    pub fn next_delay(&mut self, unit: f64) -> Duration {
        let c = &self.config;
        let max = c.max.as_secs_f64();
        let exp = c.multiplier.max(1.0).powi(self.attempt.min(1024) as i32);
        let base = (c.initial.as_secs_f64() * exp).min(max);
        let base = if base.is_finite() { base } else { max };
        self.attempt = self.attempt.saturating_add(1);
        let jitter = if c.jitter.is_finite() {
            c.jitter.clamp(0.0, 1.0)
        } else {
            0.0
        };
        let unit = if unit.is_finite() {
            unit.clamp(0.0, 1.0)
        } else {
            0.0
        };
        Duration::from_secs_f64((base * (1.0 - jitter * unit)).clamp(0.0, max))
    }

    /// Back to the first attempt (after a success).
    pub fn reset(&mut self) {
        self.attempt = 0;
    }

    /// Failed attempts since the last reset.
    pub fn attempts(&self) -> u32 {
        self.attempt
    }
}

/// One `--scorer` value: `http://host:port` or `https://host:port`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScorerTarget {
    /// As given.
    pub original: String,
    /// `https`.
    pub tls: bool,
    /// Host name or IP literal (without brackets).
    pub host: String,
    /// Port (default 80 for http, 443 for https).
    pub port: u16,
}

impl ScorerTarget {
    /// Parses and checks a `--scorer` value.
    pub fn parse(s: &str) -> Result<ScorerTarget, ReportError> {
        let invalid = |reason: &str| ReportError::InvalidTarget {
            target: s.to_string(),
            reason: reason.to_string(),
        };
        let uri: Uri = s.parse().map_err(|_| invalid("not a URI"))?;
        let tls = match uri.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(invalid("scheme must be http or https")),
        };
        if uri.path() != "/" && !uri.path().is_empty() {
            return Err(invalid("must not have a path"));
        }
        let host = uri
            .host()
            .filter(|h| !h.is_empty())
            .ok_or_else(|| invalid("no host"))?;
        let host = host
            .trim_start_matches('[')
            .trim_end_matches(']')
            .to_string();
        let port = uri.port_u16().unwrap_or(if tls { 443 } else { 80 });
        Ok(ScorerTarget {
            original: s.to_string(),
            tls,
            host,
            port,
        })
    }

    /// The IP address when the host is a literal.
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    fn origin(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        match self.ip() {
            Some(IpAddr::V6(ip)) => format!("{scheme}://[{ip}]:{}", self.port),
            _ => format!("{scheme}://{}:{}", self.host, self.port),
        }
    }
}

/// Resolves scorer host names to addresses (injectable for tests).
pub trait Resolve: Send + Sync + 'static {
    /// Every address `host:port` resolves to.
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>>;
}

/// The system resolver (`getaddrinfo` via tokio).
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemResolver;

impl Resolve for SystemResolver {
    fn resolve<'a>(
        &'a self,
        host: &'a str,
        port: u16,
    ) -> Pin<Box<dyn Future<Output = io::Result<Vec<SocketAddr>>> + Send + 'a>> {
        Box::pin(async move {
            let mut addrs: Vec<SocketAddr> = tokio::net::lookup_host((host, port)).await?.collect();
            addrs.sort();
            addrs.dedup();
            Ok(addrs)
        })
    }
}

/// How to reach the scorers.
#[derive(Debug, Clone, PartialEq)]
pub struct ReportConfig {
    /// `--scorer` values.
    pub scorers: Vec<String>,
    /// File holding a bearer token sent as `authorization: Bearer <token>`.
    pub token_file: Option<PathBuf>,
    /// PEM CA bundle for `https` scorers.
    pub tls_ca: Option<PathBuf>,
    /// Retry policy.
    pub backoff: BackoffConfig,
    /// Connect timeout.
    pub connect_timeout: Duration,
    /// Time between resolutions of scorer host names.
    pub resolve_interval: Duration,
}

impl Default for ReportConfig {
    fn default() -> Self {
        ReportConfig {
            scorers: Vec::new(),
            token_file: None,
            tls_ca: None,
            backoff: BackoffConfig::default(),
            connect_timeout: DEFAULT_CONNECT_TIMEOUT,
            resolve_interval: DEFAULT_RESOLVE_INTERVAL,
        }
    }
}

/// The channel the sampler publishes into; `None` until the first sample.
pub type ReportSender = watch::Sender<Option<Arc<pb::NodeReport>>>;
/// A receiver of [`ReportSender`].
pub type ReportReceiver = watch::Receiver<Option<Arc<pb::NodeReport>>>;

struct Shared {
    token_file: Option<PathBuf>,
    ca: Option<Certificate>,
    backoff: BackoffConfig,
    connect_timeout: Duration,
    resolve_interval: Duration,
    metrics: AgentMetrics,
    resolver: Arc<dyn Resolve>,
}

/// Starts streaming to every configured scorer. The returned task finishes once `reports`'
/// sender is dropped and every stream has ended. Fails fast on an invalid target or CA file.
pub fn spawn(
    config: ReportConfig,
    reports: ReportReceiver,
    resolver: Arc<dyn Resolve>,
    metrics: AgentMetrics,
) -> Result<JoinHandle<()>, ReportError> {
    let targets = config
        .scorers
        .iter()
        .map(|s| ScorerTarget::parse(s))
        .collect::<Result<Vec<_>, _>>()?;
    let ca = match &config.tls_ca {
        Some(path) => Some(Certificate::from_pem(std::fs::read(path).map_err(
            |source| ReportError::TlsCa {
                path: path.clone(),
                source,
            },
        )?)),
        None => None,
    };
    let shared = Arc::new(Shared {
        token_file: config.token_file,
        ca,
        backoff: config.backoff,
        connect_timeout: config.connect_timeout,
        resolve_interval: config.resolve_interval,
        metrics,
        resolver,
    });
    let supervisors: Vec<JoinHandle<()>> = targets
        .into_iter()
        .map(|t| {
            let span = info_span!("scorer_target", target = %t.original);
            tokio::spawn(supervise(Arc::new(t), shared.clone(), reports.clone()).instrument(span))
        })
        .collect();
    Ok(tokio::spawn(async move {
        for s in supervisors {
            let _ = s.await;
        }
    }))
}

/// Resolves without a resolver for IP literals.
async fn resolve(shared: &Shared, target: &ScorerTarget) -> Result<Vec<SocketAddr>, ReportError> {
    if let Some(ip) = target.ip() {
        return Ok(vec![SocketAddr::new(ip, target.port)]);
    }
    shared
        .resolver
        .resolve(&target.host, target.port)
        .await
        .map_err(|source| ReportError::Resolve {
            host: target.host.clone(),
            source,
        })
}

/// Waits until the sender of `rx` is dropped.
async fn closed(rx: &mut ReportReceiver) {
    while rx.changed().await.is_ok() {}
}

/// Keeps one connection task per address `target` resolves to.
async fn supervise(target: Arc<ScorerTarget>, shared: Arc<Shared>, mut reports: ReportReceiver) {
    let mut tasks: HashMap<SocketAddr, JoinHandle<()>> = HashMap::new();
    let mut backoff = Backoff::new(shared.backoff);
    let mut throttle = Throttle::default();
    loop {
        let wait = match resolve(&shared, &target).await {
            Ok(addrs) if !addrs.is_empty() => {
                throttle.clear();
                backoff.reset();
                for addr in &addrs {
                    tasks.entry(*addr).or_insert_with(|| {
                        info!(%addr, "scorer address added");
                        let span = info_span!("scorer", addr = %addr);
                        tokio::spawn(
                            connection(target.clone(), *addr, shared.clone(), reports.clone())
                                .instrument(span),
                        )
                    });
                }
                tasks.retain(|addr, task| {
                    let keep = addrs.contains(addr);
                    if !keep {
                        info!(%addr, "scorer address removed");
                        task.abort();
                        shared.metrics.forget_scorer(&addr.to_string());
                    }
                    keep
                });
                if target.ip().is_some() {
                    // Nothing to re-resolve: wait for shutdown.
                    closed(&mut reports).await;
                    break;
                }
                shared.resolve_interval
            }
            Ok(_) => {
                throttle.log("resolved to no addresses");
                backoff
                    .next_delay(crate::entropy::random_unit())
                    .min(shared.resolve_interval)
            }
            Err(e) => {
                throttle.log(&e.to_string());
                backoff
                    .next_delay(crate::entropy::random_unit())
                    .min(shared.resolve_interval)
            }
        };
        tokio::select! {
            _ = tokio::time::sleep(wait) => {}
            _ = closed(&mut reports) => break,
        }
    }
    for (_, task) in tasks {
        let _ = task.await;
    }
}

/// Logs a repeating failure at warn level when it starts, changes, or every
/// [`RELOG_ATTEMPTS`] repeats; at debug level otherwise.
#[derive(Default)]
struct Throttle {
    last: Option<String>,
    repeats: u32,
}

impl Throttle {
    fn log(&mut self, message: &str) {
        if self.last.as_deref() == Some(message) {
            self.repeats += 1;
            if self.repeats.is_multiple_of(RELOG_ATTEMPTS) {
                warn!(error = message, repeats = self.repeats, "still failing");
            } else {
                debug!(error = message, "failed again");
            }
        } else {
            warn!(error = message, "failed");
            self.last = Some(message.to_string());
            self.repeats = 0;
        }
    }

    fn clear(&mut self) {
        self.last = None;
        self.repeats = 0;
    }
}

enum SessionEnd {
    /// The report channel closed: shutting down.
    Shutdown,
    /// The scorer ended the stream cleanly.
    ServerEnded,
}

/// Streams to one scorer address, reconnecting until shutdown.
async fn connection(
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
        match result {
            Ok(SessionEnd::Shutdown) => break,
            Ok(SessionEnd::ServerEnded) => {
                info!("scorer ended the stream; reconnecting");
            }
            Err(e) => {
                shared.metrics.report_error(&label);
                throttle.log(&e.to_string());
            }
        }
        let delay = backoff.next_delay(crate::entropy::random_unit());
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
    let scheme = if target.tls { "https" } else { "http" };
    let mut endpoint = Endpoint::from_shared(format!("{scheme}://{addr}"))
        .map_err(|source| ReportError::Endpoint {
            scorer: addr,
            source,
        })?
        .connect_timeout(shared.connect_timeout)
        .tcp_nodelay(true)
        .http2_keep_alive_interval(KEEPALIVE_INTERVAL)
        .keep_alive_timeout(KEEPALIVE_TIMEOUT)
        .keep_alive_while_idle(true);
    if let Ok(origin) = target.origin().parse::<Uri>() {
        endpoint = endpoint.origin(origin);
    }
    if target.tls {
        let mut tls = ClientTlsConfig::new().domain_name(target.host.clone());
        if let Some(ca) = &shared.ca {
            tls = tls.ca_certificate(ca.clone());
        }
        endpoint = endpoint
            .tls_config(tls)
            .map_err(|source| ReportError::Endpoint {
                scorer: addr,
                source,
            })?;
    }
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
    let acked = last_acked.clone();
    let outbound = WatchStream::new(reports.clone()).filter_map(move |r| {
        r.filter(|r| r.sequence > acked.load(Ordering::Relaxed))
            .map(|r| {
                metrics.report_sent(&sent_label);
                pb::NodeReport::clone(&r)
            })
    });
    // The request body is pumped by the HTTP/2 connection's own task: tie its end to this
    // session, so a session that ends (or is aborted) also ends its stream.
    let (_end_stream, end) = oneshot::channel::<()>();
    let mut request = tonic::Request::new(EndOn {
        inner: outbound,
        end,
        ended: false,
    });
    if let Some(token) = token {
        request.metadata_mut().insert("authorization", token);
    }
    let mut acks = client
        .report(request)
        .await
        .map_err(|source| ReportError::Stream {
            scorer: addr,
            source,
        })?
        .into_inner();
    shared.metrics.set_connected(label, true);
    info!("stream open");
    let opened = Instant::now();
    let mut rejected = Throttle::default();
    loop {
        match acks.message().await {
            Ok(Some(ack)) => {
                backoff.reset();
                last_acked.fetch_max(ack.sequence, Ordering::Relaxed);
                if ack.desired_interval_seconds > 0.0 {
                    debug!(
                        desired = ack.desired_interval_seconds,
                        "scorer asks for another sample interval (not acted on yet)"
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

/// A stream that ends when `end` resolves (its sender sent or was dropped).
struct EndOn<S> {
    inner: S,
    end: oneshot::Receiver<()>,
    ended: bool,
}

impl<S: Stream + Unpin> Stream for EndOn<S> {
    type Item = S::Item;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<S::Item>> {
        let this = &mut *self;
        if this.ended || Pin::new(&mut this.end).poll(cx).is_ready() {
            this.ended = true;
            return Poll::Ready(None);
        }
        Pin::new(&mut this.inner).poll_next(cx)
    }
}

/// `Bearer <token>` from a token file (trimmed).
fn read_token(path: &PathBuf) -> Result<MetadataValue<tonic::metadata::Ascii>, ReportError> {
    let err = |reason: String| ReportError::Token {
        path: path.clone(),
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
    use proptest::prelude::*;

    #[test]
    fn targets() {
        let t = ScorerTarget::parse("http://scorer.loadstar-system:7443").expect("valid");
        assert_eq!(
            (t.tls, t.host.as_str(), t.port),
            (false, "scorer.loadstar-system", 7443)
        );
        assert_eq!(t.ip(), None);
        let t = ScorerTarget::parse("https://[::1]:50051").expect("valid");
        assert_eq!(t.ip(), Some("::1".parse().expect("ip")));
        assert_eq!(t.origin(), "https://[::1]:50051");
        assert_eq!(
            ScorerTarget::parse("http://10.0.0.1").expect("valid").port,
            80
        );
        for bad in ["10.0.0.1:80", "ftp://x:1", "http://x:1/path", "http://"] {
            assert!(ScorerTarget::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn backoff_grows_caps_and_resets() {
        let mut b = Backoff::new(BackoffConfig {
            initial: Duration::from_millis(100),
            max: Duration::from_secs(1),
            multiplier: 2.0,
            jitter: 0.5,
        });
        let d: Vec<u128> = (0..6).map(|_| b.next_delay(0.0).as_millis()).collect();
        assert_eq!(d, vec![100, 200, 400, 800, 1000, 1000]);
        assert_eq!(b.next_delay(0.999_999).as_millis(), 500);
        b.reset();
        assert_eq!(b.next_delay(0.0).as_millis(), 100);
    }

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

    proptest! {
        #[test]
        fn backoff_bounds(
            initial_ms in 1u64..10_000,
            max_ms in 1u64..120_000,
            multiplier in 1.0f64..10.0,
            jitter in 0.0f64..1.0,
            units in prop::collection::vec(0.0f64..1.0, 1..200),
        ) {
            let config = BackoffConfig {
                initial: Duration::from_millis(initial_ms),
                max: Duration::from_millis(max_ms),
                multiplier,
                jitter,
            };
            let mut b = Backoff::new(config);
            let floor = Duration::from_millis(initial_ms.min(max_ms)).as_secs_f64() * (1.0 - jitter);
            for u in units {
                let d = b.next_delay(u);
                prop_assert!(d <= config.max, "{d:?} > max");
                prop_assert!(d.as_secs_f64() >= floor - 1e-9, "{d:?} below floor {floor}");
            }
        }
    }
}
