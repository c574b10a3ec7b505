//! The long-running agent: a sampling thread that publishes each report into a latest-value
//! channel, the reporter that streams it to the scorers, and the metrics server — and their
//! shutdown, in that order, bounded by `--shutdown-timeout`.
//!
//! Sampling runs on its own OS thread: collectors do blocking file I/O and NVML calls, and
//! nothing on the async side (network, HTTP) can delay a sample. Ticks are on a fixed
//! cadence; an overrun skips the missed ticks instead of bursting.
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::mpsc;
use std::time::{Duration, Instant};

use loadstar_sampler::sampler::{Sampler, SamplerError};
use thiserror::Error;
use tokio::sync::{oneshot, watch};
use tokio::task::JoinHandle;
use tracing::{info, warn};

use crate::config::AgentConfig;
use crate::metrics::AgentMetrics;
use crate::report::{self, ReportError, ReportSender, Resolve, SystemResolver};

/// Errors of starting and stopping the agent.
#[derive(Debug, Error)]
pub enum DaemonError {
    /// The sampler could not be built.
    #[error(transparent)]
    Sampler(#[from] SamplerError),
    /// The reporter could not be started.
    #[error(transparent)]
    Report(#[from] ReportError),
    /// The metrics listener could not be bound.
    #[error("binding metrics listener {addr}: {source}")]
    MetricsBind {
        /// The address.
        addr: SocketAddr,
        /// The OS error.
        #[source]
        source: std::io::Error,
    },
    /// The sampling thread could not be started.
    #[error("starting sampler thread: {0}")]
    Thread(#[source] std::io::Error),
    /// Shutdown did not finish within the timeout; the named parts were abandoned.
    #[error("shutdown exceeded {timeout:?}; abandoned: {abandoned}")]
    ShutdownTimeout {
        /// The bound.
        timeout: Duration,
        /// What was still running.
        abandoned: String,
    },
}

/// A running agent.
#[derive(Debug)]
pub struct Daemon {
    stop_sampler: Option<mpsc::Sender<()>>,
    sampler_thread: Option<std::thread::JoinHandle<()>>,
    reporter: JoinHandle<()>,
    metrics_server: Option<(oneshot::Sender<()>, JoinHandle<()>)>,
    metrics_addr: Option<SocketAddr>,
    metrics: AgentMetrics,
    shutdown_timeout: Duration,
}

impl Daemon {
    /// Builds the sampler, binds the metrics listener, and starts sampling and reporting.
    pub async fn start(
        config: &AgentConfig,
        resolver: Arc<dyn Resolve>,
    ) -> Result<Daemon, DaemonError> {
        let sampler_config = config.sampler_config();
        let interval = sampler_config.interval;
        let sampler = Sampler::new(sampler_config)?;
        info!(
            node = %sampler.config().node_name,
            instance = sampler.instance(),
            version = loadstar_common::VERSION,
            scorers = ?config.scorers,
            ?interval,
            "loadstar-agent starting"
        );
        let metrics = AgentMetrics::new();
        let (tx, rx) = watch::channel(None);
        let reporter = report::spawn(config.report_config(), rx, resolver, metrics.clone())?;

        let mut metrics_addr = None;
        let metrics_server = match config.metrics_addr.0 {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .map_err(|source| DaemonError::MetricsBind { addr, source })?;
                metrics_addr = listener.local_addr().ok();
                info!(addr = ?metrics_addr, "serving /metrics and /healthz");
                let (stop, stopped) = oneshot::channel::<()>();
                let max_age = (interval * 3).max(Duration::from_secs(5));
                let m = metrics.clone();
                let task = tokio::spawn(async move {
                    let shutdown = async {
                        let _ = stopped.await;
                    };
                    if let Err(e) = crate::metrics::serve(listener, m, max_age, shutdown).await {
                        warn!(error = %e, "metrics server failed");
                    }
                });
                Some((stop, task))
            }
            None => None,
        };

        let (stop_sampler, stop_rx) = mpsc::channel();
        let m = metrics.clone();
        let sampler_thread = std::thread::Builder::new()
            .name("sampler".into())
            .spawn(move || sampling_loop(sampler, tx, m, stop_rx, interval))
            .map_err(DaemonError::Thread)?;

        Ok(Daemon {
            stop_sampler: Some(stop_sampler),
            sampler_thread: Some(sampler_thread),
            reporter,
            metrics_server,
            metrics_addr,
            metrics,
            shutdown_timeout: config.shutdown_timeout,
        })
    }

    /// Where `/metrics` is served, when enabled.
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.metrics_addr
    }

    /// The agent's metrics.
    pub fn metrics(&self) -> &AgentMetrics {
        &self.metrics
    }

    /// Stops sampling, lets the streams end, stops the metrics server — all within the
    /// shutdown timeout; what is still running then is aborted and named in the error.
    pub async fn shutdown(mut self) -> Result<(), DaemonError> {
        let deadline = tokio::time::Instant::now() + self.shutdown_timeout;
        let mut abandoned = Vec::new();
        // 1. Stop sampling: the thread wakes at once, exits, and drops the report sender,
        //    which ends every outbound stream.
        drop(self.stop_sampler.take());
        if let Some(thread) = self.sampler_thread.take() {
            let join = tokio::task::spawn_blocking(move || thread.join());
            if tokio::time::timeout_at(deadline, join).await.is_err() {
                abandoned.push("sampler thread (a collector is blocked)");
            }
        }
        // 2. Streams end once scorers close their side.
        if tokio::time::timeout_at(deadline, &mut self.reporter)
            .await
            .is_err()
        {
            self.reporter.abort();
            abandoned.push("scorer streams");
        }
        // 3. The metrics server.
        if let Some((stop, mut task)) = self.metrics_server.take() {
            let _ = stop.send(());
            if tokio::time::timeout_at(deadline, &mut task).await.is_err() {
                task.abort();
                abandoned.push("metrics server");
            }
        }
        if abandoned.is_empty() {
            info!("shut down cleanly");
            Ok(())
        } else {
            Err(DaemonError::ShutdownTimeout {
                timeout: self.shutdown_timeout,
                abandoned: abandoned.join(", "),
            })
        }
    }
}

/// Runs the agent until `shutdown` completes, then shuts down within the configured bound.
pub async fn run(
    config: AgentConfig,
    shutdown: impl std::future::Future<Output = ()>,
) -> Result<(), DaemonError> {
    let daemon = Daemon::start(&config, Arc::new(SystemResolver)).await?;
    shutdown.await;
    info!(timeout = ?config.shutdown_timeout, "shutting down");
    daemon.shutdown().await
}

/// Samples on a fixed cadence until `stop` is dropped or signalled.
fn sampling_loop(
    mut sampler: Sampler,
    tx: ReportSender,
    metrics: AgentMetrics,
    stop: mpsc::Receiver<()>,
    interval: Duration,
) {
    let mut next = Instant::now();
    loop {
        let started = Instant::now();
        let report = sampler.sample();
        metrics.observe_sample(&report, started.elapsed());
        tx.send_replace(Some(Arc::new(report)));
        next += interval;
        let now = Instant::now();
        if next <= now {
            // Overran one or more ticks: skip them rather than burst.
            let behind = now.duration_since(next).as_nanos() / interval.as_nanos().max(1);
            next += interval * u32::try_from(behind + 1).unwrap_or(u32::MAX);
        }
        match stop.recv_timeout(next.saturating_duration_since(now)) {
            Err(mpsc::RecvTimeoutError::Timeout) => {}
            Ok(()) | Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
}
