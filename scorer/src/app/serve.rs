//! `loadstar-scorer serve`: the production mode — agents stream to it, clients score with it.
//! (The Kubernetes scheduler plugs in here.)
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;

use clap::Args;
use tracing::info;

use crate::app::{AppError, Shutdown, bind, run_servers};
use crate::metrics::{Metrics, Readiness};
use crate::server::ServerParts;

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// gRPC listen address (agents, clients, grpcurl).
    #[arg(long, default_value = "0.0.0.0:50051", env = "LOADSTAR_LISTEN")]
    pub listen: SocketAddr,
    /// HTTP listen address for /metrics, /healthz and /readyz.
    #[arg(long, default_value = "0.0.0.0:9090", env = "LOADSTAR_METRICS_LISTEN")]
    pub metrics_listen: SocketAddr,
    /// Profiles config (YAML); the embedded default when absent.
    #[arg(long, env = "LOADSTAR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Interval asked of agents in acks, seconds (0: no preference).
    #[arg(long, default_value_t = 0.0)]
    pub desired_interval_seconds: f64,
}

/// Runs `serve` until SIGTERM.
pub async fn run(args: ServeArgs) -> Result<(), AppError> {
    let config = crate::app::standalone::load_config(args.config.as_deref())?;
    let store = crate::app::standalone::build_store(&config);
    let profiles = crate::app::standalone::build_profiles(&config, args.config.as_deref())?;
    let metrics = Metrics::new();
    let parts = ServerParts {
        store,
        profiles,
        metrics,
        resolver: None,
        binder: None,
        desired_interval_seconds: args.desired_interval_seconds,
    };
    let grpc = bind(args.listen).await?;
    let http = bind(args.metrics_listen).await?;
    info!(grpc = %grpc.local_addr().map(|a| a.to_string()).unwrap_or_default(),
          http = %http.local_addr().map(|a| a.to_string()).unwrap_or_default(),
          "loadstar-scorer serving");
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    run_servers(grpc, Some(http), parts, Arc::new(Readiness::default()), shutdown).await
}
