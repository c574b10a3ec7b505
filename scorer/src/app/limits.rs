//! The gRPC port's limits as flags, shared by `serve` and `standalone` (every mode enforces
//! them); defaults are [`ServerLimits::default`]'s, documented in `docs/security.md`.
use std::time::Duration;

use clap::Args;
use loadstar_grpc::server::ServerLimits;

/// Limit flags.
#[derive(Debug, Clone, Args)]
pub struct LimitArgs {
    /// Most open gRPC connections (agents hold one each per replica).
    #[arg(long, default_value_t = ServerLimits::default().connections.max_connections)]
    pub max_connections: usize,
    /// Seconds a new connection has to send the HTTP/2 preface before it is closed.
    #[arg(long, default_value_t = ServerLimits::default().connections.handshake_timeout.as_secs_f64())]
    pub handshake_timeout_seconds: f64,
    /// Most concurrent calls per HTTP/2 connection.
    #[arg(long, default_value_t = ServerLimits::default().max_streams_per_connection)]
    pub max_streams_per_connection: u32,
    /// Seconds of silence before an HTTP/2 keepalive ping; unanswered within
    /// --keepalive-timeout-seconds, the connection is closed.
    #[arg(long, default_value_t = ServerLimits::default().keepalive_interval.as_secs_f64())]
    pub keepalive_interval_seconds: f64,
    /// Seconds a keepalive ping may go unanswered.
    #[arg(long, default_value_t = ServerLimits::default().keepalive_timeout.as_secs_f64())]
    pub keepalive_timeout_seconds: f64,
    /// Reports per second one agent stream may send before it is read more slowly.
    #[arg(long, default_value_t = ServerLimits::default().ingest.reports_per_second)]
    pub max_reports_per_second: f64,
    /// Most concurrent WatchNodes streams.
    #[arg(long, default_value_t = ServerLimits::default().query.watch.max_watchers)]
    pub max_watchers: usize,
    /// Most concurrent WatchNodes streams of one caller (an authenticated user; without
    /// authentication, one client address).
    #[arg(long, default_value_t = ServerLimits::default().query.watch.max_watchers_per_caller)]
    pub max_watchers_per_caller: usize,
    /// Bytes of node events one watcher may fall behind before it is dropped.
    #[arg(long, default_value_t = ServerLimits::default().query.watch.max_queued_bytes)]
    pub watcher_queue_bytes: usize,
}

fn seconds(s: f64, name: &str) -> Result<Duration, String> {
    if s.is_finite() && s > 0.0 && s <= 86_400.0 {
        Ok(Duration::from_secs_f64(s))
    } else {
        Err(format!("--{name} must be in (0, 86400] seconds, got {s}"))
    }
}

impl LimitArgs {
    /// The limits, or what is wrong with a flag.
    pub fn limits(&self) -> Result<ServerLimits, String> {
        let mut l = ServerLimits::default();
        if self.max_connections == 0 || self.max_streams_per_connection == 0 {
            return Err("--max-connections and --max-streams-per-connection must be ≥ 1".into());
        }
        if !(self.max_reports_per_second.is_finite() && self.max_reports_per_second > 0.0) {
            return Err(format!(
                "--max-reports-per-second must be > 0, got {}",
                self.max_reports_per_second
            ));
        }
        l.connections.max_connections = self.max_connections;
        l.connections.handshake_timeout =
            seconds(self.handshake_timeout_seconds, "handshake-timeout-seconds")?;
        l.max_streams_per_connection = self.max_streams_per_connection;
        l.keepalive_interval = seconds(
            self.keepalive_interval_seconds,
            "keepalive-interval-seconds",
        )?;
        l.keepalive_timeout = seconds(self.keepalive_timeout_seconds, "keepalive-timeout-seconds")?;
        l.ingest.reports_per_second = self.max_reports_per_second;
        l.ingest.burst = (self.max_reports_per_second * 2.0).ceil().clamp(1.0, 1e6) as u32;
        l.query.watch.max_watchers = self.max_watchers;
        l.query.watch.max_watchers_per_caller = self.max_watchers_per_caller;
        l.query.watch.max_queued_bytes = self.watcher_queue_bytes;
        Ok(l)
    }
}
