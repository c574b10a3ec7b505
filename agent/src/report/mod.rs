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
//!
//! One file per concept: [`ScorerTarget`] parsing (`target.rs`), name resolution and one
//! task per address (`resolve.rs`), the backoff (`loadstar_common::backoff`), rate-limited failure logs
//! (`throttle.rs`), the connect–stream–reconnect loop of one address (`session.rs`), what
//! those tasks share (`shared.rs`) and the errors (`error.rs`). This file only starts them.
//! - Optional bearer token (re-read from its file at each connect, so rotation works) and
//!   TLS with a CA file.
//! - Shutdown: when the sampler drops the watch sender, every request stream ends, scorers
//!   end their ack streams, and the tasks finish. The daemon bounds that with a timeout.
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;
use tonic::transport::Certificate;
use tracing::{Instrument, info_span};

use crate::metrics::AgentMetrics;

mod error;
mod resolve;
mod session;
mod shared;
mod target;
mod throttle;

pub use error::ReportError;
pub use loadstar_common::backoff::{
    Backoff, BackoffConfig, DEFAULT_BACKOFF_INITIAL, DEFAULT_BACKOFF_MAX,
};
pub use resolve::{Resolve, SystemResolver};
pub use session::{KEEPALIVE_INTERVAL, KEEPALIVE_TIMEOUT};
use shared::Shared;
pub use shared::{ReportReceiver, ReportSender};
pub use target::ScorerTarget;

/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);
/// Default time between DNS resolutions of a scorer name.
pub const DEFAULT_RESOLVE_INTERVAL: Duration = Duration::from_secs(30);
/// Default longest time between the scorer's acks of accepted reports.
pub const DEFAULT_ACK_INTERVAL: Duration =
    Duration::from_secs(loadstar_proto::limits::DEFAULT_ACK_INTERVAL_SECONDS);

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
    /// Longest time between the scorer's acks of accepted reports (0: an ack per report);
    /// sent in every report as `ack_interval_seconds`.
    pub ack_interval: Duration,
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
            ack_interval: DEFAULT_ACK_INTERVAL,
        }
    }
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
        ack_interval: config.ack_interval,
        metrics,
    });
    let supervisors: Vec<JoinHandle<()>> = targets
        .into_iter()
        .map(|t| {
            let span = info_span!("scorer_target", target = %t.original);
            tokio::spawn(
                resolve::supervise(
                    Arc::new(t),
                    resolver.clone(),
                    shared.clone(),
                    reports.clone(),
                )
                .instrument(span),
            )
        })
        .collect();
    Ok(tokio::spawn(async move {
        for s in supervisors {
            let _ = s.await;
        }
    }))
}
