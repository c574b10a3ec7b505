//! `serve`'s autoscaling side: the per-pod usage book fed from the node store, the StepScaler
//! controller on its own Lease, its admission webhook, and the `metrics.k8s.io` aggregated
//! API; each only when its flag asks for it.
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use clap::Args;
use loadstar_autoscale::usage::{BookLimits, PodUsageBook};
use loadstar_autoscaler::controller::{self, ControllerConfig};
use loadstar_kube::leader::{self, LeaderConfig, LeaderElector};
use loadstar_metrics_api::admission::AdmissionConfig;
use loadstar_metrics_api::server::{self as metrics_api, MetricsApiConfig};
use loadstar_store::NodeStore;
use loadstar_store::metrics::Metrics;
use tracing::{info, warn};

use crate::app::{AppError, Shutdown};

/// Flags of the autoscaling side.
#[derive(Debug, Args)]
pub struct AutoscaleArgs {
    /// Run the StepScaler controller (`stepscalers.loadstar.io`; install the CRD from
    /// deploy/helm/loadstar/crds), leader-elected on its own Lease (`--step-scaler-lease`).
    #[arg(long)]
    pub step_scalers: bool,
    /// Name of the StepScaler controller's Lease (in the scorer's Lease namespace).
    #[arg(long, default_value = "loadstar-stepscaler")]
    pub step_scaler_lease: String,
    /// A pod whose newest usage sample is older than this counts as unmeasured, seconds
    /// (unmeasured pods add no load and block scale-in).
    #[arg(long, default_value_t = 10.0)]
    pub step_scaler_stale_seconds: f64,
    /// How long each pod's usage samples are kept, seconds: the longest StepScaler
    /// `pollPeriodSeconds` this scorer serves (memory: 16 bytes per pod per sample).
    #[arg(long, default_value_t = 120.0)]
    pub pod_usage_retain_seconds: f64,
    /// HTTPS address of `metrics.k8s.io/v1beta1` (for an APIService; `kubectl top`, the
    /// HPA); off when absent. Needs `--metrics-api-tls-cert` and `--metrics-api-tls-key`.
    #[arg(long, requires_all = ["metrics_api_tls_cert", "metrics_api_tls_key"])]
    pub metrics_api_listen: Option<SocketAddr>,
    /// PEM serving certificate of the metrics API (the APIService's `caBundle` signs it).
    #[arg(long)]
    pub metrics_api_tls_cert: Option<PathBuf>,
    /// PEM key of `--metrics-api-tls-cert`.
    #[arg(long)]
    pub metrics_api_tls_key: Option<PathBuf>,
    /// Writable directory where the front-proxy CA read from
    /// `kube-system/extension-apiserver-authentication` is kept for the TLS layer.
    #[arg(long, default_value = "/tmp/loadstar-metrics-api")]
    pub metrics_api_ca_dir: PathBuf,
    /// Pods' usage in `metrics.k8s.io` is the mean over this many seconds.
    #[arg(long, default_value_t = 15.0)]
    pub metrics_api_window_seconds: f64,
    /// HTTPS address of the StepScaler validating admission webhook (`POST
    /// /validate-stepscaler`); off when absent. Needs `--admission-tls-cert` and
    /// `--admission-tls-key`.
    #[arg(long, requires_all = ["admission_tls_cert", "admission_tls_key"])]
    pub admission_listen: Option<SocketAddr>,
    /// PEM serving certificate of the webhook (its configuration's `caBundle` signs it).
    #[arg(long)]
    pub admission_tls_cert: Option<PathBuf>,
    /// PEM key of `--admission-tls-cert`.
    #[arg(long)]
    pub admission_tls_key: Option<PathBuf>,
}

/// What the Kubernetes side of `serve` hands over.
pub struct KubeSide {
    /// The kubeconfig (`None`: in-cluster).
    pub kubeconfig: Option<PathBuf>,
    /// The Lease settings of the scheduler, `None` without leader election.
    pub leader: Option<LeaderConfig>,
    /// This replica's identity.
    pub identity: String,
}

impl AutoscaleArgs {
    fn wanted(&self) -> bool {
        self.step_scalers || self.metrics_api_listen.is_some()
    }

    fn check(&self) -> Result<(), AppError> {
        for (name, v, min) in [
            (
                "step-scaler-stale-seconds",
                self.step_scaler_stale_seconds,
                1.0,
            ),
            (
                "pod-usage-retain-seconds",
                self.pod_usage_retain_seconds,
                5.0,
            ),
            (
                "metrics-api-window-seconds",
                self.metrics_api_window_seconds,
                1.0,
            ),
        ] {
            if !(v.is_finite() && (min..=86_400.0).contains(&v)) {
                return Err(AppError::Other(format!(
                    "--{name} must be between {min} and 86400 seconds, got {v}"
                )));
            }
        }
        if self.metrics_api_window_seconds > self.pod_usage_retain_seconds {
            return Err(AppError::Other(format!(
                "--metrics-api-window-seconds {} is longer than --pod-usage-retain-seconds {}",
                self.metrics_api_window_seconds, self.pod_usage_retain_seconds
            )));
        }
        Ok(())
    }
}

/// How long the StepScaler controller's elector waits, once `shutdown` fires, for the
/// controller to end its pass before it releases the Lease (the controller stops before its
/// next StepScaler, and a poll under way writes no `/scale` decision once stopping; its
/// reads, Events and status writes may still be under way).
pub const CONTROLLER_STOP_WAIT: Duration = Duration::from_secs(2);

/// What [`start`] left running that the scorer waits for when it stops.
#[derive(Debug, Default)]
pub struct Started {
    /// The StepScaler controller's elector, which releases its Lease once `shutdown` fires and
    /// the controller has stopped (within [`CONTROLLER_STOP_WAIT`], then
    /// [`leader::STOP_WAIT`]): awaited, or the process could exit before the release lands
    /// and a standby would wait out the Lease's duration to take over.
    pub elector: Option<tokio::task::JoinHandle<()>>,
    /// The StepScaler controller itself when it runs without a Lease (`--leader-elect=false`):
    /// awaited for [`CONTROLLER_STOP_WAIT`] at most, so that a poll under way ends (it writes
    /// no `/scale` decision once stopping) before the process exits. With a Lease the
    /// elector waits for it instead.
    pub controller: Option<tokio::task::JoinHandle<()>>,
}

impl Started {
    /// Waits for what must end before the process does: [`CONTROLLER_STOP_WAIT`],
    /// [`leader::STOP_WAIT`] and a second at most (the elector bounds its own stop by
    /// `STOP_WAIT`).
    pub async fn join(self) {
        if let Some(task) = self.elector {
            let bound = CONTROLLER_STOP_WAIT + leader::STOP_WAIT + Duration::from_secs(1);
            if tokio::time::timeout(bound, task).await.is_err() {
                warn!("the StepScaler controller's elector did not stop within {bound:?}");
            }
        }
        if let Some(task) = self.controller
            && tokio::time::timeout(CONTROLLER_STOP_WAIT, task)
                .await
                .is_err()
        {
            warn!("the StepScaler controller did not stop within {CONTROLLER_STOP_WAIT:?}");
        }
    }
}

/// Starts what the flags ask for. Without a Kubernetes connection (`kube` is `None`) asking
/// for either is an error.
pub async fn start(
    args: &AutoscaleArgs,
    kube: Option<KubeSide>,
    store: Arc<NodeStore>,
    metrics: Arc<Metrics>,
    shutdown: &Shutdown,
) -> Result<Started, AppError> {
    let mut started = Started::default();
    if let (Some(listen), Some(cert), Some(key)) = (
        args.admission_listen,
        args.admission_tls_cert.clone(),
        args.admission_tls_key.clone(),
    ) {
        loadstar_metrics_api::admission::start(
            AdmissionConfig { listen, cert, key },
            metrics.clone(),
            shutdown.wait(),
        )
        .await
        .map_err(|e| AppError::Other(e.to_string()))?;
    }
    if !args.wanted() {
        return Ok(started);
    }
    args.check()?;
    let Some(kube) = kube else {
        return Err(AppError::Other(
            "--step-scalers and --metrics-api-listen need a Kubernetes connection \
             (--kubeconfig or in-cluster)"
                .into(),
        ));
    };
    let config = loadstar_kube::client::load_config(kube.kubeconfig.as_deref())
        .await
        .map_err(|e| AppError::Other(e.to_string()))?;
    let client =
        loadstar_kube::client::build(&config, None).map_err(|e| AppError::Other(e.to_string()))?;
    // Up to five readings a second per pod over the whole retention (agents sample at 1 Hz
    // by default), so a poll period as long as the retention is averaged in full.
    let book = Arc::new(Mutex::new(PodUsageBook::new(BookLimits {
        retain_s: args.pod_usage_retain_seconds,
        max_samples: (args.pod_usage_retain_seconds * 5.0).ceil() as usize,
        ..BookLimits::default()
    })));
    loadstar_autoscaler::feed::spawn(
        store.clone(),
        book.clone(),
        metrics.clone(),
        shutdown.wait(),
    );
    if args.step_scalers {
        let elector = kube.leader.as_ref().map(|l| {
            LeaderElector::new(
                client.clone(),
                LeaderConfig {
                    name: args.step_scaler_lease.clone(),
                    ..l.clone()
                },
            )
        });
        let leadership = match &elector {
            Some(e) => e.subscribe(),
            None => leader::always_leader(&kube.identity),
        };
        let config = ControllerConfig {
            stale_s: args.step_scaler_stale_seconds,
            ..ControllerConfig::new(&kube.identity)
        };
        let controller = controller::spawn(
            client.clone(),
            book.clone(),
            leadership,
            config,
            metrics.clone(),
            shutdown.wait(),
        );
        match elector {
            Some(elector) => {
                // The elector releases the Lease once the controller's task has ended (or
                // CONTROLLER_STOP_WAIT after the stop), so the next leader's first pass
                // starts after this replica's last one has ended.
                let stop = shutdown.wait();
                let released_after = async move {
                    stop.await;
                    let _ = tokio::time::timeout(CONTROLLER_STOP_WAIT, controller).await;
                };
                started.elector = Some(tokio::spawn(elector.run(released_after)));
            }
            None => started.controller = Some(controller),
        }
        info!(lease = %args.step_scaler_lease, "StepScaler controller enabled");
    }
    if let (Some(listen), Some(cert), Some(key)) = (
        args.metrics_api_listen,
        args.metrics_api_tls_cert.clone(),
        args.metrics_api_tls_key.clone(),
    ) {
        let config = MetricsApiConfig {
            listen,
            cert,
            key,
            ca_dir: args.metrics_api_ca_dir.clone(),
            window_s: args.metrics_api_window_seconds,
        };
        let stop = shutdown.clone();
        // A cluster not yet configured for aggregation, or an unreachable API server, must
        // not take the scorer down: retry, saying why.
        tokio::spawn(async move {
            loop {
                match metrics_api::start(
                    config.clone(),
                    client.clone(),
                    store.clone(),
                    book.clone(),
                    metrics.clone(),
                    stop.wait(),
                )
                .await
                {
                    Ok(_) => return,
                    Err(e) => warn!(error = %e, "metrics.k8s.io API not started; retrying in 30 s"),
                }
                tokio::select! {
                    () = stop.wait() => return,
                    () = tokio::time::sleep(Duration::from_secs(30)) => {}
                }
            }
        });
    }
    Ok(started)
}
