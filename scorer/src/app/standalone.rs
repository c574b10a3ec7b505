//! `loadstar-scorer standalone`: the scorer with an in-process agent sampling this machine —
//! no Kubernetes, no separate agent — serving real scores for this node. The README's first
//! command.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use clap::Args;
use loadstar_sampler::sampler::{Sampler, SamplerConfig};
use tracing::{info, warn};

use crate::app::{AppError, Shutdown, bind, build_profiles, build_store, load_config, run_servers};
use loadstar_grpc::server::ServerParts;
use loadstar_policy::profiles::Profiles;
use loadstar_store::decisions::{DecisionLimits, DecisionLog};
use loadstar_store::metrics::{Metrics, Readiness};

/// Flags of `standalone`.
#[derive(Debug, Args)]
pub struct StandaloneArgs {
    /// Limits of the gRPC port.
    #[command(flatten)]
    pub limits: crate::app::limits::LimitArgs,
    /// gRPC listen address (port 0 picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:50051")]
    pub listen: SocketAddr,
    /// HTTP listen address for /metrics, /healthz, /readyz and the live web view `/ui` (omit
    /// to disable).
    #[arg(long)]
    pub metrics_listen: Option<SocketAddr>,
    /// HTTP listen address of the kube-scheduler extender (`POST
    /// /extender/v1/{profile}/filter`, `/prioritize`); off when absent.
    #[arg(long)]
    pub extender_listen: Option<SocketAddr>,
    /// PEM certificate chain for the extender port: with `--extender-tls-key`, it serves
    /// HTTPS (kube-scheduler: `enableHTTPS: true`, `tlsConfig.caFile`).
    #[arg(long, requires = "extender_tls_key")]
    pub extender_tls_cert: Option<PathBuf>,
    /// PEM private key matching `--extender-tls-cert`.
    #[arg(long, requires = "extender_tls_cert")]
    pub extender_tls_key: Option<PathBuf>,
    /// PEM CA bundle: the extender port then requires a client certificate signed by it
    /// (kube-scheduler: `tlsConfig.certFile`/`keyFile`).
    #[arg(long, requires = "extender_tls_cert")]
    pub extender_tls_client_ca: Option<PathBuf>,
    /// TLS of the gRPC port.
    #[command(flatten)]
    pub tls: crate::app::security::TlsArgs,
    /// Profiles config (YAML); the embedded default when absent.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Sampling interval of the in-process agent, seconds.
    #[arg(long, default_value_t = 1.0)]
    pub interval_seconds: f64,
    /// Node name to report this machine as (default: NODE_NAME, else the hostname).
    #[arg(long)]
    pub node_name: Option<String>,
    /// Stop after this many seconds (default: run until Ctrl-C).
    #[arg(long)]
    pub exit_after_seconds: Option<f64>,
    /// Listen on a non-loopback address without authentication (standalone has no API
    /// server to check tokens with, so anyone who can reach the port may report, query and
    /// call every method).
    #[arg(long)]
    pub insecure_allow_unauthenticated: bool,
    /// Pods whose latest placement decision is kept for `kubectl loadstar explain`, the
    /// `ExplainPod` call and the web view, per source: this many of the scheduler's and as
    /// many of `Score` calls', so no number of calls pushes out the scheduler's (each with its
    /// best 10 nodes' per-plugin scores and every filter's rejections; 0 keeps none).
    #[arg(long, default_value_t = 2000)]
    pub decision_records: usize,
    /// Who may open the live web view `/ui` on the metrics port: `loopback` (this machine, or
    /// `kubectl port-forward`), `open` (anyone who reaches the port) or `off`.
    #[arg(long, value_enum, default_value = "loopback")]
    pub ui_access: crate::app::UiAccessArg,
}

/// Runs `standalone` until Ctrl-C (or `--exit-after-seconds`).
pub async fn run(
    args: StandaloneArgs,
    grpc_threads: crate::app::GrpcThreads,
) -> Result<(), AppError> {
    let config = load_config(args.config.as_deref())?;
    let store = build_store(&config);
    let profiles = build_profiles(&config, args.config.as_deref())?;
    let mut sampler_config = SamplerConfig {
        interval: Duration::from_secs_f64(args.interval_seconds.clamp(0.05, 3600.0)),
        ..SamplerConfig::default()
    };
    if let Some(n) = &args.node_name {
        sampler_config.node_name = n.clone();
    }
    let node_name = sampler_config.node_name.clone();
    let interval = sampler_config.interval;
    let mut sampler =
        Sampler::new(sampler_config).map_err(|e| AppError::Other(format!("agent: {e}")))?;
    if !args.listen.ip().is_loopback() && !args.insecure_allow_unauthenticated {
        return Err(AppError::Other(format!(
            "standalone has no authentication (no API server to check tokens with), so it \
             listens on loopback only; {} is not loopback: pass \
             --insecure-allow-unauthenticated to serve it to the network anyway",
            args.listen
        )));
    }
    let grpc = bind(args.listen).await?;
    let addr = grpc
        .local_addr()
        .map_err(|e| AppError::Other(format!("listener address: {e}")))?;
    let http = match args.metrics_listen {
        Some(a) => Some(bind(a).await?),
        None => None,
    };
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    // The in-process agent: sample, then store, exactly as a report over the wire would be.
    {
        let store = store.clone();
        let stop = shutdown.wait();
        tokio::spawn(async move {
            let sample_loop = async {
                let mut tick = tokio::time::interval(interval);
                tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tick.tick().await;
                    let report = sampler.sample();
                    for e in &report.collector_errors {
                        warn!(collector = %e.collector, error = %e.message, "collector failed");
                    }
                    if let Err(e) = store.apply_report(report, Instant::now()) {
                        warn!(error = %e, "in-process report rejected");
                    }
                }
            };
            tokio::select! {
                _ = sample_loop => {}
                _ = stop => {}
            }
        });
    }
    if let Some(secs) = args.exit_after_seconds {
        let s = shutdown.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs_f64(secs.max(0.0))).await;
            s.trigger();
        });
    }
    let http_addr = http.as_ref().and_then(|l| l.local_addr().ok());
    print_banner(&addr, http_addr.as_ref(), &node_name, &profiles);
    info!(%addr, node = %node_name, "standalone scorer started");
    warn!(%addr, "NO AUTHENTICATION: standalone mode lets every caller of the gRPC port \
                  report, query and score (use `serve` in a cluster)");
    let metrics = Metrics::new();
    let tls = args.tls.grpc(&metrics)?;
    let extender_tls = args.tls.extender(
        args.extender_tls_cert.as_deref(),
        args.extender_tls_key.as_deref(),
        args.extender_tls_client_ca.as_deref(),
        &metrics,
    )?;
    crate::app::start_extender(
        args.extender_listen,
        extender_tls,
        &config,
        store.clone(),
        Arc::new(loadstar_kube::convert::JsonPodDecoder),
        metrics.clone(),
        &shutdown,
    )
    .await?;
    let parts = ServerParts {
        store,
        profiles,
        metrics,
        resolver: None,
        binder: None,
        decoder: Some(Arc::new(loadstar_kube::convert::JsonPodDecoder)),
        budgets: None,
        limits: args.limits.limits().map_err(AppError::Other)?,
        pace: loadstar_grpc::pacing::Pace::default(),
        gate: loadstar_grpc::gate::Gate::open(),
        tls,
        bind_other_schedulers: false,
        decisions: Arc::new(DecisionLog::new(DecisionLimits {
            capacity: args.decision_records,
            ..DecisionLimits::default()
        })),
    };
    run_servers(
        grpc,
        http,
        parts,
        Arc::new(Readiness::default()),
        shutdown,
        None,
        crate::app::ServerOptions {
            ui_access: args.ui_access,
            grpc_threads,
        },
    )
    .await
}

fn print_banner(addr: &SocketAddr, http: Option<&SocketAddr>, node: &str, profiles: &Profiles) {
    let names: Vec<&str> = profiles.iter().map(|p| p.name.as_str()).collect();
    let view = match http {
        Some(h) => format!("live view: http://{h}/ui (metrics: http://{h}/metrics)\n  "),
        None => "(--metrics-listen 127.0.0.1:9090 also serves the live view at /ui)\n  ".into(),
    };
    println!(
        "loadstar-scorer {} standalone: serving gRPC on {addr}\n\
         in-process agent reports this machine as node {node:?}; profiles: {}\n\
         try (in another terminal):\n  \
         {view}\
         kubectl-loadstar --scorer {addr} top   (cargo run -p loadstar-cli -- --scorer {addr} top)\n  \
         grpcurl -plaintext {addr} list\n  \
         grpcurl -plaintext {addr} loadstar.v1.Scorer/ListNodes\n  \
         grpcurl -plaintext -d '{{\"node_name\":\"{node}\"}}' {addr} loadstar.v1.Scorer/GetNode\n  \
         grpcurl -plaintext -d '{{\"description\":{{\"name\":\"web\",\"requests\":{{\"cpu\":\"500m\",\"memory\":\"256Mi\"}}}}}}' {addr} loadstar.v1.Scorer/Score\n  \
         grpcurl -plaintext {addr} describe loadstar.v1.NodeReport\n\
         Ctrl-C stops it.",
        loadstar_common::VERSION,
        names.join(", ")
    );
}
