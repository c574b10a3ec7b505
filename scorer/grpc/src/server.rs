//! Assembles the scorer's gRPC server: Ingest, Scorer and Scheduler services, gRPC health,
//! and server reflection in both v1 and v1alpha (grpcurl 1.8.6 only speaks v1alpha).
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use loadstar_proto::pb;
use tokio::net::TcpListener;
use tonic::transport::Server;

use crate::gate::Gate;
use crate::ingest::IngestLimits;
use crate::ingest::IngestService;
use crate::listener::{self, ConnectionLimits};
use crate::pacing::Pace;
use crate::scheduler::SchedulerService;
use crate::scorer::{QueryLimits, ScorerService};
use loadstar_auth::tls::ServerTls;
use loadstar_policy::profiles::Profiles;
use loadstar_proto::limits;
use loadstar_store::NodeStore;
use loadstar_store::cluster::{Binder, BudgetSource, PodDecoder, PodResolver};
use loadstar_store::decisions::DecisionLog;
use loadstar_store::metrics::Metrics;

/// Every limit the gRPC port enforces, by layer; see [`ServerLimits::default`] and
/// `docs/security.md`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ServerLimits {
    /// Connections: count and handshake timeout.
    pub connections: ConnectionLimits,
    /// Most concurrent streams (calls) per HTTP/2 connection.
    pub max_streams_per_connection: u32,
    /// HTTP/2 keepalive: a ping after this much silence...
    pub keepalive_interval: Duration,
    /// ...must be acknowledged within this, or the connection is closed.
    pub keepalive_timeout: Duration,
    /// Largest decoded message on any service.
    pub max_message_bytes: usize,
    /// Per-stream ingest pacing.
    pub ingest: IngestLimits,
    /// Query limits (candidates, pages, watchers).
    pub query: QueryLimits,
}

impl Default for ServerLimits {
    /// The defaults of each part; 100 streams per connection (an agent uses one, grpcurl
    /// one, a scheduler a few dozen; 100 is what HTTP/2 clients assume before the server's
    /// SETTINGS arrive, so no client that starts many calls at once on a new connection is
    /// refused), keepalive ping every 20 s with 10 s to answer, messages up to
    /// [`limits::MAX_MESSAGE_BYTES`].
    fn default() -> Self {
        ServerLimits {
            connections: ConnectionLimits::default(),
            max_streams_per_connection: 100,
            keepalive_interval: Duration::from_secs(20),
            keepalive_timeout: Duration::from_secs(10),
            max_message_bytes: limits::MAX_MESSAGE_BYTES,
            ingest: IngestLimits::default(),
            query: QueryLimits::default(),
        }
    }
}

/// Errors of the server module.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// Reflection could not be built from the descriptor sets.
    #[error("building gRPC reflection: {0}")]
    Reflection(#[from] tonic_reflection::server::Error),
    /// The transport failed.
    #[error("gRPC server on {addr}: {source}")]
    Transport {
        /// Listen address.
        addr: String,
        /// The error.
        #[source]
        source: tonic::transport::Error,
    },
}

/// Everything the services share.
#[derive(Debug, Clone)]
pub struct ServerParts {
    /// The node store.
    pub store: Arc<NodeStore>,
    /// The profiles.
    pub profiles: Arc<Profiles>,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Pod reference resolver (Kubernetes), if any.
    pub resolver: Option<Arc<dyn PodResolver>>,
    /// Binder (Kubernetes scheduler), if any.
    pub binder: Option<Arc<dyn Binder>>,
    /// Reader of whole core/v1 Pods for `Score`'s `pod_json`, if any.
    pub decoder: Option<Arc<dyn PodDecoder>>,
    /// PodDisruptionBudgets for `Score`'s preemption answers, if any.
    pub budgets: Option<Arc<dyn BudgetSource>>,
    /// Report interval pushed back to agents in acks ([`Pace::fixed`]`(0.0)`: none; a
    /// [`crate::pacing::Pacer`] may move it).
    pub pace: Pace,
    /// What the port enforces.
    pub limits: ServerLimits,
    /// Who may call what ([`Gate::open`]: anyone, anything).
    pub gate: Gate,
    /// TLS for the port (none: plaintext HTTP/2).
    pub tls: Option<Arc<ServerTls>>,
    /// `Bind` takes pods of other schedulers too.
    pub bind_other_schedulers: bool,
    /// The decision log `Score` calls are recorded in and `ExplainPod` reads (share the
    /// scheduler's).
    pub decisions: Arc<DecisionLog>,
}

impl ServerParts {
    /// Parts with no Kubernetes integration, default limits, no caller checks and no TLS.
    pub fn new(store: Arc<NodeStore>, profiles: Arc<Profiles>, metrics: Arc<Metrics>) -> Self {
        ServerParts {
            store,
            profiles,
            metrics,
            resolver: None,
            binder: None,
            decoder: None,
            budgets: None,
            pace: Pace::default(),
            limits: ServerLimits::default(),
            gate: Gate::open(),
            tls: None,
            bind_other_schedulers: false,
            decisions: Arc::new(DecisionLog::default()),
        }
    }

    /// The Scorer service over these parts.
    pub fn scorer_service(&self) -> ScorerService {
        ScorerService::with_limits(
            self.store.clone(),
            self.profiles.clone(),
            self.metrics.clone(),
            self.resolver.clone(),
            self.limits.query,
        )
        .with_decoder(self.decoder.clone())
        .with_budgets(self.budgets.clone())
        .with_gate(self.gate.clone())
        .with_decisions(self.decisions.clone())
    }
}

/// Serves every service on `listener` until `shutdown` resolves, then drains in-flight calls.
pub async fn serve(
    listener: TcpListener,
    parts: ServerParts,
    shutdown: impl Future<Output = ()> + Send,
) -> Result<(), ServerError> {
    let addr = listener
        .local_addr()
        .map(|a| a.to_string())
        .unwrap_or_default();
    let (health, health_service) = tonic_health::server::health_reporter();
    health
        .set_serving::<loadstar_proto::encoded::ingest_server::IngestServer<IngestService>>()
        .await;
    health
        .set_serving::<pb::scorer_server::ScorerServer<ScorerService>>()
        .await;
    health
        .set_serving::<pb::scheduler_server::SchedulerServer<SchedulerService>>()
        .await;
    let reflection = || {
        tonic_reflection::server::Builder::configure()
            .register_encoded_file_descriptor_set(loadstar_proto::FILE_DESCRIPTOR_SET)
            .register_encoded_file_descriptor_set(tonic_health::pb::FILE_DESCRIPTOR_SET)
    };
    let reflection_v1 = reflection().build_v1()?;
    let reflection_v1alpha = reflection().build_v1alpha()?;
    // Long-lived streams end when shutdown starts, so the drain is not held open by them.
    let closing = tokio_util::sync::CancellationToken::new();
    // Cancelled when shutdown starts, and also if the server's future is dropped or ends
    // first (an error): no stream is left waiting on a signal that cannot come.
    let cancel_on_drop = closing.clone().drop_guard();
    let shutdown = async move {
        shutdown.await;
        drop(cancel_on_drop);
    };
    let ingest = IngestService::new(
        parts.store.clone(),
        parts.metrics.clone(),
        parts.pace.clone(),
    )
    .with_limits(parts.limits.ingest)
    .with_closing(closing.clone())
    .with_gate(parts.gate.clone());
    let l = parts.limits;
    let incoming = listener::incoming(
        listener,
        l.connections,
        parts.metrics.clone(),
        parts.tls.clone(),
    );
    Server::builder()
        .max_concurrent_streams(l.max_streams_per_connection)
        .http2_keepalive_interval(Some(l.keepalive_interval))
        .http2_keepalive_timeout(Some(l.keepalive_timeout))
        .add_service(health_service)
        .add_service(reflection_v1)
        .add_service(reflection_v1alpha)
        // Agent streams' bodies cut after each message header: tonic then does not double
        // its decode buffer (`aligned`), ~1 KiB less per stream, i.e. per node.
        .add_service(crate::aligned::AlignRequests(
            loadstar_proto::encoded::ingest_server::IngestServer::new(ingest)
                .max_decoding_message_size(l.max_message_bytes),
        ))
        .add_service(
            pb::scorer_server::ScorerServer::new(parts.scorer_service().with_closing(closing))
                .max_decoding_message_size(l.max_message_bytes),
        )
        .add_service(
            pb::scheduler_server::SchedulerServer::new(
                SchedulerService::new(parts.binder.clone())
                    .with_gate(parts.gate.clone())
                    .with_other_schedulers(parts.bind_other_schedulers),
            )
            .max_decoding_message_size(l.max_message_bytes),
        )
        .serve_with_incoming_shutdown(incoming, shutdown)
        .await
        .map_err(|source| ServerError::Transport { addr, source })
}
