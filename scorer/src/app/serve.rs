//! `loadstar-scorer serve`: the production mode — agents stream to it, clients score with it,
//! and, with a Kubernetes connection (`--kubeconfig` or in-cluster), it schedules the pods
//! whose `schedulerName` names one of its profiles, as the Lease's leader.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use clap::{Args, ValueEnum};
use tracing::{info, warn};

use crate::app::{AppError, DRAIN_TIMEOUT, Shutdown, bind, run_servers};
use loadstar_grpc::gate::{Gate, GateParts};
use loadstar_grpc::pacing::{Pace, PacingConfig};
use loadstar_grpc::server::ServerParts;
use loadstar_kube::client::RateLimit;
use loadstar_kube::leader::LeaderConfig;
use loadstar_kube::runtime::{self, KubeOptions};
use loadstar_kube::scheduler::SchedulerConfig;
use loadstar_store::cluster::{Binder, BudgetSource, PodDecoder, PodResolver};
use loadstar_store::decisions::{DecisionLimits, DecisionLog};
use loadstar_store::metrics::{Metrics, Readiness};

/// Whether to connect to Kubernetes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum KubernetesMode {
    /// When `--kubeconfig` is given or the process runs in a cluster.
    Auto,
    /// Always (fails without a configuration).
    On,
    /// Never: scoring service only.
    Off,
}

/// Flags of `serve`.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// Limits of the gRPC port.
    #[command(flatten)]
    pub limits: crate::app::limits::LimitArgs,
    /// gRPC listen address (agents, clients, grpcurl).
    #[arg(long, default_value = "0.0.0.0:50051", env = "LOADSTAR_LISTEN")]
    pub listen: SocketAddr,
    /// HTTP listen address for /metrics, /healthz, /readyz and the live web view `/ui`.
    #[arg(long, default_value = "0.0.0.0:9090", env = "LOADSTAR_METRICS_LISTEN")]
    pub metrics_listen: SocketAddr,
    /// HTTP listen address of the kube-scheduler extender (`POST
    /// /extender/v1/{profile}/filter`, `/prioritize`); off when absent.
    #[arg(long, env = "LOADSTAR_EXTENDER_LISTEN")]
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
    #[arg(long, env = "LOADSTAR_CONFIG")]
    pub config: Option<PathBuf>,
    /// Report interval asked of agents in acks, seconds (0: no preference); with
    /// `--ingest-cpu-budget`, the interval asked for while the scorer is not loaded.
    #[arg(long, default_value_t = 0.0)]
    pub desired_interval_seconds: f64,
    /// Cores the scorer may use before it asks agents to report less often (backpressure:
    /// the interval in acks doubles every second its CPU use is above 90 % of this, and
    /// halves back after two intervals below 60 %); 0: off.
    #[arg(long, default_value_t = 0.0)]
    pub ingest_cpu_budget: f64,
    /// Longest report interval backpressure asks for, seconds.
    #[arg(long, default_value_t = 30.0)]
    pub max_desired_interval_seconds: f64,
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
    /// Connect to Kubernetes and schedule pods.
    #[arg(long, value_enum, default_value = "auto", env = "LOADSTAR_KUBERNETES")]
    pub kubernetes: KubernetesMode,
    /// Kubeconfig file (default: the in-cluster service account).
    #[arg(long, env = "LOADSTAR_KUBECONFIG")]
    pub kubeconfig: Option<PathBuf>,
    /// Client-side request rate to the API server (per client, as kube-scheduler).
    #[arg(long, default_value_t = 50.0)]
    pub kube_api_qps: f64,
    /// Client-side burst to the API server.
    #[arg(long, default_value_t = 100)]
    pub kube_api_burst: u32,
    /// Elect a leader on a Lease; only the leader binds.
    #[arg(long, default_value_t = true, action = clap::ArgAction::Set)]
    pub leader_elect: bool,
    /// Namespace of the Lease (default: POD_NAMESPACE, else `default`).
    #[arg(long, env = "POD_NAMESPACE", default_value = "default")]
    pub leader_elect_namespace: String,
    /// Name of the Lease.
    #[arg(long, default_value = "loadstar-scorer")]
    pub leader_elect_name: String,
    /// This replica's identity (default: POD_NAME, else hostname plus a random suffix).
    #[arg(long, env = "POD_NAME")]
    pub leader_elect_identity: Option<String>,
    /// Lease duration, seconds.
    #[arg(long, default_value_t = 15.0)]
    pub leader_elect_lease_duration: f64,
    /// Renew deadline, seconds.
    #[arg(long, default_value_t = 10.0)]
    pub leader_elect_renew_deadline: f64,
    /// Retry period, seconds.
    #[arg(long, default_value_t = 2.0)]
    pub leader_elect_retry_period: f64,
    /// Bindings in flight at most, and as many Events and status patches.
    #[arg(long, default_value_t = 64)]
    pub bind_concurrency: usize,
    /// How often, seconds, the scheduler's own snapshot takes in the agents' newer reports
    /// (a full rebuild over every node, so its cost grows with the cluster; the scheduler's
    /// own placements and Kubernetes' node changes apply at once). Agents report every
    /// second by default.
    #[arg(long, default_value_t = 0.5)]
    pub snapshot_refresh_seconds: f64,
    /// How long a pod's WaitForFirstConsumer claims may take to be bound (by the PV
    /// controller or a provisioner) before the pod is retried; kube-scheduler's
    /// `bindTimeoutSeconds`.
    #[arg(long, default_value_t = 600.0)]
    pub volume_bind_timeout_seconds: f64,
    /// Who may call what.
    #[command(flatten)]
    pub auth: crate::app::security::AuthArgs,
    /// The StepScaler controller and the metrics.k8s.io API.
    #[command(flatten)]
    pub autoscale: crate::app::autoscale::AutoscaleArgs,
}

fn secs(v: f64, what: &str) -> Result<Duration, AppError> {
    if v.is_finite() && v > 0.0 && v < 86_400.0 {
        Ok(Duration::from_secs_f64(v))
    } else {
        Err(AppError::Other(format!(
            "--{what} must be a positive number of seconds, got {v}"
        )))
    }
}

/// The scheduler's settings from the flags.
fn scheduler_config(args: &ServeArgs) -> Result<SchedulerConfig, AppError> {
    let in_flight = args.bind_concurrency.max(1);
    Ok(SchedulerConfig {
        bind_concurrency: in_flight,
        // Each bound pod gets its Event: as many Events in flight as bindings, so they keep
        // pace. With fewer, a raised --bind-concurrency left them queued behind the bindings
        // (up to a fifth still unsent at the last bind at 256 against 64, 2026-12-01), and
        // past the queue's 8 192 they could be dropped.
        write_concurrency: in_flight,
        drain_timeout: DRAIN_TIMEOUT,
        snapshot_refresh: secs(args.snapshot_refresh_seconds, "snapshot-refresh-seconds")?,
        volume_bind_timeout: secs(
            args.volume_bind_timeout_seconds,
            "volume-bind-timeout-seconds",
        )?,
        ..SchedulerConfig::default()
    })
}

fn default_identity() -> String {
    let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
        .map(|s| s.trim().to_string())
        .unwrap_or_else(|_| "loadstar".into());
    format!("{host}_{:08x}", rand::random::<u32>())
}

fn in_cluster() -> bool {
    std::env::var_os("KUBERNETES_SERVICE_HOST").is_some()
}

/// Runs `serve` until SIGTERM.
pub async fn run(args: ServeArgs, grpc_threads: crate::app::GrpcThreads) -> Result<(), AppError> {
    let config = crate::app::load_config(args.config.as_deref())?;
    let auth_config = args.auth.config()?;
    let authenticator_config = args.auth.authenticator()?;
    let store = crate::app::build_store(&config);
    let profiles = crate::app::build_profiles(&config, args.config.as_deref())?;
    let metrics = Metrics::new();
    let shutdown = Shutdown::new();
    shutdown.on_signals();
    let readiness = Arc::new(Readiness::default());
    let want_kube = match args.kubernetes {
        KubernetesMode::On => true,
        KubernetesMode::Off => false,
        KubernetesMode::Auto => args.kubeconfig.is_some() || in_cluster(),
    };
    let mut resolver: Option<Arc<dyn PodResolver>> = None;
    let mut budgets: Option<Arc<dyn BudgetSource>> = None;
    let mut decoder: Option<Arc<dyn PodDecoder>> =
        Some(Arc::new(loadstar_kube::convert::JsonPodDecoder));
    let mut binder: Option<Arc<dyn Binder>> = None;
    let mut kube = None;
    let mut kube_side = None;
    let decisions = Arc::new(DecisionLog::new(DecisionLimits {
        capacity: args.decision_records,
        ..DecisionLimits::default()
    }));
    if want_kube {
        let identity = args
            .leader_elect_identity
            .clone()
            .filter(|s| !s.is_empty())
            .unwrap_or_else(default_identity);
        let leader = if args.leader_elect {
            Some(LeaderConfig {
                lease_duration: secs(
                    args.leader_elect_lease_duration,
                    "leader-elect-lease-duration",
                )?,
                renew_deadline: secs(
                    args.leader_elect_renew_deadline,
                    "leader-elect-renew-deadline",
                )?,
                retry_period: secs(args.leader_elect_retry_period, "leader-elect-retry-period")?,
                ..LeaderConfig::new(
                    &args.leader_elect_namespace,
                    &args.leader_elect_name,
                    &identity,
                )
            })
        } else {
            None
        };
        kube_side = Some(crate::app::autoscale::KubeSide {
            kubeconfig: args.kubeconfig.clone(),
            leader: leader.clone(),
            identity: identity.clone(),
        });
        let inflight = config.inflight().clone();
        let options = KubeOptions {
            kubeconfig: args.kubeconfig.clone(),
            rate_limit: RateLimit {
                qps: args.kube_api_qps,
                burst: args.kube_api_burst,
            },
            leader,
            identity: identity.clone(),
            component: "loadstar-scorer".into(),
            scheduler: scheduler_config(&args)?,
            readiness: readiness.clone(),
            decisions: decisions.clone(),
        };
        let rt = runtime::start(
            options,
            store.clone(),
            profiles.clone(),
            metrics.clone(),
            Arc::new(move |pod| loadstar_policy::inflight::estimate(pod, &inflight)),
            shutdown.wait(),
        )
        .await
        .map_err(|e| AppError::Other(e.to_string()))?;
        info!(%identity, leader_elect = args.leader_elect, "Kubernetes scheduler started");
        resolver = Some(rt.cache.clone());
        // Whole pods sent over gRPC get their claims resolved against the cluster too.
        decoder = Some(rt.cache.clone());
        budgets = Some(rt.cache.clone());
        binder = Some(Arc::new(loadstar_kube::scheduler::SchedulerBinder::new(
            rt.scheduler.clone(),
        )));
        kube = Some(rt);
    }
    // Everything from here runs beside the Kubernetes side (started above), so however it
    // ends (a signal, a server's error, a bad flag) the stop below runs: a Lease taken is
    // released, not left to expire.
    let mut autoscale = crate::app::autoscale::Started::default();
    let result: Result<(), AppError> = async {
        let gate = match &kube {
            _ if args.auth.insecure_allow_unauthenticated => {
                warn!(
                    "AUTHENTICATION IS OFF (--insecure-allow-unauthenticated): anyone who can \
                     reach the gRPC port may report load for any node, query, and bind pods \
                     with this scorer's credentials"
                );
                Gate::open()
            }
            Some(rt) => {
                let agents: Vec<String> = auth_config
                    .agents
                    .service_accounts
                    .iter()
                    .map(ToString::to_string)
                    .collect();
                info!(?agents, audiences = ?auth_config.agents.audiences,
                      queries = ?auth_config.queries,
                      "authenticating callers with TokenReview and SubjectAccessReview");
                Gate::new(
                    GateParts {
                        config: auth_config,
                        authenticator: Arc::new(loadstar_auth::Authenticator::new(
                            rt.reviews.clone(),
                            authenticator_config,
                            metrics.clone(),
                        )),
                        access: rt.reviews.clone(),
                        pods: rt.cache.clone(),
                    },
                    metrics.clone(),
                )
            }
            None => {
                return Err(AppError::Other(
                    "serve without a Kubernetes connection cannot authenticate callers (agent \
                     tokens are checked with the API server's TokenReview): give --kubeconfig or \
                     run in a cluster, or pass --insecure-allow-unauthenticated to serve without \
                     authentication"
                        .into(),
                ));
            }
        };
        let tls = args.tls.grpc(&metrics)?;
        if let Some(d) = &decoder {
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
                d.clone(),
                metrics.clone(),
                &shutdown,
            )
            .await?;
        }
        autoscale = crate::app::autoscale::start(
            &args.autoscale,
            kube_side,
            store.clone(),
            metrics.clone(),
            &shutdown,
        )
        .await?;
        let pace = Pace::fixed(args.desired_interval_seconds);
        if args.ingest_cpu_budget > 0.0 {
            let config = PacingConfig::new(
                args.ingest_cpu_budget,
                args.desired_interval_seconds,
                args.max_desired_interval_seconds,
            )
            .map_err(|e| AppError::Other(e.to_string()))?;
            crate::app::pacing::spawn(config, pace.clone(), metrics.clone(), shutdown.wait());
        }
        let parts = ServerParts {
            store,
            profiles,
            metrics,
            resolver,
            binder,
            decoder,
            budgets,
            limits: args.limits.limits().map_err(AppError::Other)?,
            pace,
            gate,
            tls,
            bind_other_schedulers: args.auth.bind_other_schedulers,
            decisions,
        };
        let grpc = bind(args.listen).await?;
        let http = bind(args.metrics_listen).await?;
        info!(grpc = %grpc.local_addr().map(|a| a.to_string()).unwrap_or_default(),
              http = %http.local_addr().map(|a| a.to_string()).unwrap_or_default(),
              "loadstar-scorer serving");
        // Ready once the node, pod and namespace caches have synced and the API server's version
        // is read: a replica that has not seen the cluster yet must not receive Score-by-reference
        // or Bind calls.
        let ready_when = kube.as_ref().map(|rt| {
            let mut synced = rt.cache.synced();
            Box::pin(async move {
                let _ = synced.wait_for(|s| s.all()).await;
            }) as std::pin::Pin<Box<dyn std::future::Future<Output = ()> + Send>>
        });
        run_servers(
            grpc,
            Some(http),
            parts,
            readiness,
            shutdown.clone(),
            ready_when,
            crate::app::ServerOptions {
                ui_access: args.ui_access,
                grpc_threads,
            },
        )
        .await
    }
    .await;
    shutdown.trigger();
    // Stop taking pods, drain bindings, release the Lease (the elector's own bound, and a
    // second for each step to end); the StepScaler controller's Lease is released meanwhile.
    let scheduler = async {
        if let Some(rt) = kube {
            rt.join(DRAIN_TIMEOUT + loadstar_kube::leader::STOP_WAIT + Duration::from_secs(2))
                .await;
        }
    };
    tokio::join!(scheduler, autoscale.join());
    result
}

#[cfg(test)]
mod tests {
    use clap::Parser;

    use super::*;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        serve: ServeArgs,
    }

    fn config(flags: &[&str]) -> SchedulerConfig {
        let cli = Cli::try_parse_from(std::iter::once("serve").chain(flags.iter().copied()))
            .expect("flags");
        scheduler_config(&cli.serve).expect("config")
    }

    #[test]
    fn events_in_flight_follow_the_bindings_in_flight() {
        let default = config(&[]);
        assert_eq!(default.bind_concurrency, 64);
        assert_eq!(default.write_concurrency, 64);
        let raised = config(&["--bind-concurrency", "256"]);
        assert_eq!(raised.bind_concurrency, 256);
        assert_eq!(raised.write_concurrency, 256);
        // 0 means one at a time, not none.
        let zero = config(&["--bind-concurrency", "0"]);
        assert_eq!((zero.bind_concurrency, zero.write_concurrency), (1, 1));
    }

    #[test]
    fn a_bad_period_is_refused_by_name() {
        let cli = Cli::try_parse_from(["serve", "--snapshot-refresh-seconds=-1"]).expect("flags");
        let err = scheduler_config(&cli.serve).expect_err("refused");
        assert!(
            err.to_string().contains("--snapshot-refresh-seconds"),
            "{err}"
        );
    }
}
