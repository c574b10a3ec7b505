//! The scorer's run modes (`serve`, `standalone`, …) and what they share: logging setup,
//! shutdown signals, and starting the gRPC and HTTP servers with a bounded drain.
pub mod autoscale;
pub mod http;
pub mod limits;
pub mod pacing;
pub mod security;
pub mod serve;
pub mod simulate;
pub mod standalone;

use std::future::Future;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio::sync::watch;
use tracing::{info, warn};

use loadstar_grpc::server::{self, ServerParts};
use loadstar_policy::config::ScorerConfig;
use loadstar_policy::profiles::Profiles;
use loadstar_store::metrics::{Metrics, Readiness};
use loadstar_store::{NodeStore, StoreConfig};

/// How long in-flight calls may drain after a shutdown signal.
pub const DRAIN_TIMEOUT: Duration = Duration::from_secs(10);

/// Errors of the run modes.
#[derive(Debug, thiserror::Error)]
pub enum AppError {
    /// A listen address could not be bound.
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// The config is invalid.
    #[error("config {path}: {message}")]
    Config {
        /// Where it came from.
        path: String,
        /// What is wrong.
        message: String,
    },
    /// The gRPC server failed.
    #[error(transparent)]
    Server(#[from] server::ServerError),
    /// The gRPC runtime or its thread could not start.
    #[error("starting the gRPC runtime: {source}")]
    GrpcRuntime {
        /// The error.
        #[source]
        source: std::io::Error,
    },
    /// Another failure, with context.
    #[error("{0}")]
    Other(String),
}

/// Reads the config file, or the embedded default.
pub fn load_config(path: Option<&Path>) -> Result<ScorerConfig, AppError> {
    match path {
        None => Ok(ScorerConfig::embedded_default()),
        Some(p) => {
            let text = std::fs::read_to_string(p).map_err(|e| AppError::Config {
                path: p.display().to_string(),
                message: e.to_string(),
            })?;
            ScorerConfig::from_yaml(&text).map_err(|e| AppError::Config {
                path: p.display().to_string(),
                message: e.to_string(),
            })
        }
    }
}

/// Builds the profiles of a config.
pub fn build_profiles(
    config: &ScorerConfig,
    path: Option<&Path>,
) -> Result<Arc<Profiles>, AppError> {
    let list = config.build_profiles().map_err(|e| AppError::Config {
        path: path.map_or("<embedded default>".into(), |p| p.display().to_string()),
        message: e.to_string(),
    })?;
    Ok(Arc::new(Profiles::new(list)))
}

/// Builds the node store with the config's staleness and eviction settings.
pub fn build_store(config: &ScorerConfig) -> Arc<NodeStore> {
    let thresholds = config.eviction_thresholds();
    Arc::new(NodeStore::new(StoreConfig {
        stale_after: config.stale_after(),
        inflight_ttl: Duration::from_secs_f64(config.inflight().max_age_seconds),
        pressure: Some(Arc::new(move |agent| {
            loadstar_policy::eviction::under_pressure(agent, &thresholds).is_some()
        })),
        ..StoreConfig::default()
    }))
}

/// How log lines are written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines, coloured only when stderr is a terminal and `NO_COLOR` is unset.
    Text,
    /// One JSON object per line (for log collectors: Loki, Elasticsearch, Cloud Logging).
    Json,
}

/// Installs the `tracing` subscriber (`RUST_LOG`, default `info`) writing to stderr.
pub fn init_logging(format: LogFormat) {
    use std::io::IsTerminal;
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = match format {
        LogFormat::Json => builder.json().with_current_span(true).try_init(),
        LogFormat::Text => builder
            .with_ansi(std::io::stderr().is_terminal() && std::env::var_os("NO_COLOR").is_none())
            .try_init(),
    };
}

/// A shutdown signal: resolves on SIGTERM or Ctrl-C, and can be triggered by hand.
#[derive(Debug, Clone)]
pub struct Shutdown {
    tx: watch::Sender<bool>,
}

impl Default for Shutdown {
    fn default() -> Self {
        Self::new()
    }
}

impl Shutdown {
    /// A new, untriggered signal.
    pub fn new() -> Shutdown {
        Shutdown {
            tx: watch::channel(false).0,
        }
    }

    /// Triggers it when the process receives SIGTERM or SIGINT.
    pub fn on_signals(&self) {
        let tx = self.tx.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            info!("shutdown signal received");
            // Kept even while nothing waits yet (`send` drops a value no receiver sees): a
            // signal during start-up is seen by every later `wait`.
            tx.send_replace(true);
        });
    }

    /// Triggers it (seen by every `wait`, including those that start later).
    pub fn trigger(&self) {
        self.tx.send_replace(true);
    }

    /// Resolves once triggered.
    pub fn wait(&self) -> impl Future<Output = ()> + Send + 'static {
        let mut rx = self.tx.subscribe();
        async move {
            let _ = rx.wait_for(|v| *v).await;
        }
    }
}

async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(e) => {
                warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the process");
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}

/// Binds a TCP listener with a clear error.
pub async fn bind(addr: SocketAddr) -> Result<TcpListener, AppError> {
    TcpListener::bind(addr)
        .await
        .map_err(|source| AppError::Bind { addr, source })
}

/// Starts the kube-scheduler extender on `addr` (when given; HTTPS with `tls`): the
/// configured profiles cut to their load-aware plugins, over `store`, reading pods with
/// `decoder`; it stops with `shutdown`. Returns the bound address.
pub async fn start_extender(
    addr: Option<SocketAddr>,
    tls: Option<Arc<loadstar_auth::tls::ServerTls>>,
    config: &ScorerConfig,
    store: Arc<NodeStore>,
    decoder: Arc<dyn loadstar_store::cluster::PodDecoder>,
    metrics: Arc<Metrics>,
    shutdown: &Shutdown,
) -> Result<Option<SocketAddr>, AppError> {
    let Some(addr) = addr else { return Ok(None) };
    let build = || {
        config.build_profiles().map_err(|e| AppError::Config {
            path: "<extender profiles>".into(),
            message: e.to_string(),
        })
    };
    let (profiles, filter_profiles) = (build()?, build()?);
    let listener = bind(addr).await?;
    let local = listener
        .local_addr()
        .map_err(|source| AppError::Bind { addr, source })?;
    let extender = Arc::new(loadstar_extender::Extender::new(
        store,
        profiles,
        filter_profiles,
        decoder,
        metrics,
        loadstar_extender::ExtenderLimits::default(),
    ));
    let wait = shutdown.wait();
    let scheme = match tls {
        Some(tls) => {
            let listener = loadstar_extender::tls::TlsListener::new(listener, tls)
                .map_err(|source| AppError::Bind { addr, source })?;
            tokio::spawn(async move {
                if let Err(e) = loadstar_extender::serve_tls(listener, extender, wait).await {
                    warn!(error = %e, "extender server failed");
                }
            });
            "https"
        }
        None => {
            tokio::spawn(async move {
                if let Err(e) = loadstar_extender::serve(listener, extender, wait).await {
                    warn!(error = %e, "extender server failed");
                }
            });
            "http"
        }
    };
    info!(extender = %format!("{scheme}://{local}/extender/v1/{{profile}}/{{filter,prioritize}}"),
          "kube-scheduler extender serving");
    Ok(Some(local))
}

/// Who may open the live web view `/ui` on the metrics port.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum UiAccessArg {
    /// Not served.
    Off,
    /// Callers on loopback only: this machine, or `kubectl port-forward` to the pod.
    Loopback,
    /// Anyone who reaches the metrics port (it lists every node and pods of every namespace).
    Open,
}

impl From<UiAccessArg> for loadstar_ui::UiAccess {
    fn from(a: UiAccessArg) -> Self {
        match a {
            UiAccessArg::Off => loadstar_ui::UiAccess::Off,
            UiAccessArg::Loopback => loadstar_ui::UiAccess::Loopback,
            UiAccessArg::Open => loadstar_ui::UiAccess::Open,
        }
    }
}

/// Runs the gRPC server on `grpc` and the metrics/health server on `http` (if any) until
/// `shutdown` triggers; in-flight gRPC calls then get [`DRAIN_TIMEOUT`] to finish.
/// `/readyz` turns ready when the servers start, unless `ready_when` is given: then when it
/// resolves (e.g. the Kubernetes caches have synced).
pub async fn run_servers(
    grpc: TcpListener,
    http: Option<TcpListener>,
    parts: ServerParts,
    ready: Arc<Readiness>,
    shutdown: Shutdown,
    ready_when: Option<std::pin::Pin<Box<dyn Future<Output = ()> + Send>>>,
    options: ServerOptions,
) -> Result<(), AppError> {
    let ServerOptions {
        ui_access,
        grpc_threads,
    } = options;
    let metrics: Arc<Metrics> = parts.metrics.clone();
    if let Some(http) = http {
        let wait = shutdown.wait();
        let ready = ready.clone();
        let ui = loadstar_ui::UiState::new(
            parts.store.clone(),
            parts.profiles.clone(),
            parts.decisions.clone(),
            loadstar_ui::UiConfig {
                access: ui_access.into(),
                ..loadstar_ui::UiConfig::default()
            },
        );
        tokio::spawn(async move {
            if let Err(e) = http::serve_http(http, metrics, ready, ui, wait).await {
                warn!(error = %e, "metrics server failed");
            }
        });
    }
    let sweeper = {
        let store = parts.store.clone();
        let metrics = parts.metrics.clone();
        tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_millis(500));
            loop {
                tick.tick().await;
                let stale = store.sweep(std::time::Instant::now());
                metrics.nodes.set(store.len() as i64);
                metrics.stale_nodes.set(stale as i64);
            }
        })
    };
    match ready_when {
        None => ready.set(true),
        Some(gate) => {
            let ready = ready.clone();
            tokio::spawn(async move {
                gate.await;
                info!("ready");
                ready.set(true);
            });
        }
    }
    // gRPC (agent ingest, scoring, binding for other schedulers) runs on its own runtime:
    // thousands of agent streams cannot take the scheduler's worker threads, and the CPU of
    // ingest is that of the threads named `GRPC_THREAD_NAME` (the throughput bench reads it).
    // The runtime is built last before use: one dropped inside this async function would
    // panic (it is let go with `GrpcRuntime::shutdown` below).
    let started = grpc
        .into_std()
        .map_err(|e| AppError::Other(format!("handing the gRPC listener over: {e}")))
        .and_then(|listener| Ok((listener, GrpcRuntime::start(grpc_threads)?)));
    let (listener, runtime) = match started {
        Ok(s) => s,
        Err(e) => {
            sweeper.abort();
            return Err(e);
        }
    };
    let wait = shutdown.wait();
    let server = runtime.handle().spawn(async move {
        let grpc = TcpListener::from_std(listener)
            .map_err(|e| AppError::Other(format!("taking the gRPC listener: {e}")))?;
        server::serve(grpc, parts, wait)
            .await
            .map_err(AppError::from)
    });
    tokio::pin!(server);
    let result = tokio::select! {
        r = &mut server => r.unwrap_or_else(|e| Err(AppError::Other(format!("gRPC server task: {e}")))),
        _ = async {
            shutdown.wait().await;
            tokio::time::sleep(DRAIN_TIMEOUT).await;
        } => {
            warn!(timeout = ?DRAIN_TIMEOUT, "gRPC drain timed out; exiting with calls in flight");
            Ok(())
        }
    };
    sweeper.abort();
    runtime.shutdown();
    result
}

/// The name of the main runtime's threads (`/proc/<pid>/task/*/comm`): Kubernetes, the
/// scheduling loop, the extender, metrics.
pub const MAIN_THREAD_NAME: &str = "loadstar-main";

/// The name of the gRPC runtime's threads (`/proc/<pid>/task/*/comm`).
pub const GRPC_THREAD_NAME: &str = "loadstar-grpc";
/// The name of the one-thread gRPC runtime's blocking threads, where `Score` evaluations run.
pub const POOL_THREAD_NAME: &str = "loadstar-pool";

/// The settings of [`run_servers`] that come from the command line.
#[derive(Debug, Clone, Copy)]
pub struct ServerOptions {
    /// Who may open the UI.
    pub ui_access: UiAccessArg,
    /// The gRPC runtime's threads.
    pub grpc_threads: GrpcThreads,
}

/// How many threads serve gRPC (`--grpc-threads`, whose default is 1): 0 is a
/// multi-thread runtime with one worker per CPU, as before that flag (a single worker on
/// one CPU), 1 the current-thread scheduler.
#[derive(Debug, Clone, Copy)]
pub struct GrpcThreads(pub u16);

/// The runtime gRPC is served on (the main runtime has `--main-threads`, default 1):
/// tokio's multi-thread scheduler with one worker per CPU or as many as asked, or, for one
/// thread, the current-thread scheduler driven on a thread of its own until shutdown.
enum GrpcRuntime {
    Multi(tokio::runtime::Runtime),
    Single {
        handle: tokio::runtime::Handle,
        stop: tokio::sync::oneshot::Sender<()>,
    },
}

impl GrpcRuntime {
    fn start(threads: GrpcThreads) -> Result<GrpcRuntime, AppError> {
        let workers = match threads.0 {
            1 => return GrpcRuntime::single(),
            0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
            n => usize::from(n),
        };
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(workers)
            .thread_name(GRPC_THREAD_NAME)
            .enable_all()
            .build()
            .map(GrpcRuntime::Multi)
            .map_err(|source| AppError::GrpcRuntime { source })
    }

    /// The current-thread runtime, built and driven on its thread (so that no failure
    /// leaves it to be dropped in the caller's async context), its handle sent back.
    fn single() -> Result<GrpcRuntime, AppError> {
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let (built, handle) = std::sync::mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name(GRPC_THREAD_NAME.to_string())
            .spawn(move || {
                // The runtime's own threads are its blocking pool's: `Score` evaluations
                // (`ScorerService::off_thread`), named apart so that `loadstar-grpc` stays
                // the serving and ingest alone.
                let runtime = match tokio::runtime::Builder::new_current_thread()
                    .thread_name(POOL_THREAD_NAME)
                    .enable_all()
                    .build()
                {
                    Ok(r) => r,
                    Err(e) => {
                        let _ = built.send(Err(e));
                        return;
                    }
                };
                let _ = built.send(Ok(runtime.handle().clone()));
                // Tasks spawned on the handle run while this drives the runtime; a dropped
                // sender (the server gone) stops it as a sent stop does.
                runtime.block_on(async move {
                    let _ = stopped.await;
                });
                runtime.shutdown_background();
            })
            .map_err(|source| AppError::GrpcRuntime { source })?;
        // The thread answers as soon as the runtime is built (a few microseconds, once).
        let handle = handle
            .recv()
            .map_err(|_| AppError::Other("the gRPC runtime's thread ended at start".into()))?
            .map_err(|source| AppError::GrpcRuntime { source })?;
        Ok(GrpcRuntime::Single { handle, stop })
    }

    fn handle(&self) -> &tokio::runtime::Handle {
        match self {
            GrpcRuntime::Multi(r) => r.handle(),
            GrpcRuntime::Single { handle, .. } => handle,
        }
    }

    /// Lets the runtime's threads go without waiting for them: dropping a runtime inside
    /// another one's task would panic.
    fn shutdown(self) {
        match self {
            GrpcRuntime::Multi(r) => r.shutdown_background(),
            GrpcRuntime::Single { stop, .. } => {
                let _ = stop.send(());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_shutdown_triggered_before_anyone_waits_is_still_seen() {
        let shutdown = Shutdown::new();
        shutdown.trigger();
        let waited = tokio::time::timeout(Duration::from_secs(5), shutdown.wait()).await;
        assert!(
            waited.is_ok(),
            "a wait that began after the trigger never resolved"
        );
        // And by a clone, as the servers hold one.
        let clone = shutdown.clone();
        let waited = tokio::time::timeout(Duration::from_secs(5), clone.wait()).await;
        assert!(waited.is_ok(), "a clone's wait never resolved");
    }
}
