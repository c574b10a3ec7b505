//! A real in-process scorer gRPC server for the integration tests, and stream helpers.
#![allow(dead_code)]
pub mod raw;
use std::sync::Arc;
use std::time::Duration;

use loadstar_auth::tls::ServerTls;
use loadstar_grpc::gate::Gate;
use loadstar_grpc::server::{self, ServerParts};
use loadstar_policy::config::ScorerConfig;
use loadstar_policy::profiles::Profiles;
use loadstar_proto::pb;
use loadstar_proto::pb::ingest_client::IngestClient;
use loadstar_store::metrics::Metrics;
use loadstar_store::{NodeStore, StoreConfig};
use tokio::sync::{mpsc, oneshot};
use tokio_stream::wrappers::ReceiverStream;
use tonic::transport::Channel;

/// A real scorer gRPC server on 127.0.0.1:0 with the embedded profiles.
pub struct TestServer {
    /// `http://127.0.0.1:PORT`.
    pub addr: String,
    /// Its store.
    pub store: Arc<NodeStore>,
    /// Its metrics (the server's own accounting).
    pub metrics: Arc<Metrics>,
    stop: Option<oneshot::Sender<()>>,
    task: tokio::task::JoinHandle<()>,
}

impl TestServer {
    /// Starts one with `limits`, no authentication, plaintext.
    pub async fn start(limits: server::ServerLimits) -> TestServer {
        Self::start_with(limits, Metrics::new(), Gate::open(), None).await
    }

    /// Starts one with `limits`, counting into `metrics` (share them with the gate),
    /// checking callers at `gate`, with `tls` if given.
    pub async fn start_with(
        limits: server::ServerLimits,
        metrics: Arc<Metrics>,
        gate: Gate,
        tls: Option<Arc<ServerTls>>,
    ) -> TestServer {
        Self::start_custom(limits, metrics, gate, tls, |_| {}).await
    }

    /// Like [`TestServer::start_with`], with the server's parts changed by `customize`
    /// (a resolver, a binder) before it starts.
    pub async fn start_custom(
        limits: server::ServerLimits,
        metrics: Arc<Metrics>,
        gate: Gate,
        tls: Option<Arc<ServerTls>>,
        customize: impl FnOnce(&mut ServerParts),
    ) -> TestServer {
        let config = ScorerConfig::embedded_default();
        let profiles = Arc::new(Profiles::new(
            config.build_profiles().expect("embedded default builds"),
        ));
        let store = Arc::new(NodeStore::new(StoreConfig {
            snapshot_max_age: Duration::ZERO,
            ..StoreConfig::default()
        }));
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind loopback");
        let scheme = if tls.is_some() { "https" } else { "http" };
        let addr = format!("{scheme}://{}", listener.local_addr().expect("addr"));
        let mut parts = ServerParts {
            limits,
            pace: loadstar_grpc::pacing::Pace::fixed(1.0),
            gate,
            tls,
            ..ServerParts::new(store.clone(), profiles, metrics.clone())
        };
        customize(&mut parts);
        let (stop, rx) = oneshot::channel::<()>();
        let task = tokio::spawn(async move {
            server::serve(listener, parts, async {
                let _ = rx.await;
            })
            .await
            .expect("server runs");
        });
        TestServer {
            addr,
            store,
            metrics,
            stop: Some(stop),
            task,
        }
    }

    /// A client channel to it.
    pub async fn channel(&self) -> Channel {
        Channel::from_shared(self.addr.clone())
            .expect("uri")
            .connect()
            .await
            .expect("connect")
    }

    /// Stops it, waiting (bounded) for the drain.
    pub async fn stop(mut self) {
        if let Some(s) = self.stop.take() {
            let _ = s.send(());
        }
        tokio::time::timeout(Duration::from_secs(10), self.task)
            .await
            .expect("server stops within 10 s")
            .expect("server task");
    }
}

/// Sends `reports` on one Ingest stream and collects the acks.
pub async fn stream(channel: Channel, reports: Vec<pb::NodeReport>) -> Vec<pb::ReportAck> {
    let n = reports.len();
    let (tx, rx) = mpsc::channel(8);
    let mut client = IngestClient::new(channel);
    let mut acks = client
        .report(ReceiverStream::new(rx))
        .await
        .expect("stream opens")
        .into_inner();
    let mut out = Vec::new();
    for r in reports {
        tx.send(r).await.expect("send");
        out.push(acks.message().await.expect("ack").expect("ack present"));
    }
    assert_eq!(out.len(), n);
    out
}
