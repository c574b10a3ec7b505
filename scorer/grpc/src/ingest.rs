//! The `loadstar.v1.Ingest` gRPC service: one task per agent stream, each report validated
//! and stored, each answered with an ack. A bad report is rejected in its ack and the stream
//! goes on; a broken stream (undecodable bytes) ends only that stream.
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use loadstar_proto::pb;
use tokio::sync::{mpsc, watch};
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};
use tracing::{Instrument, debug, info, info_span, warn};

use loadstar_store::NodeStore;
use loadstar_store::metrics::{Metrics, ReasonLabel};
use loadstar_store::validate::ReportError;

/// The ingest service.
#[derive(Debug, Clone)]
pub struct IngestService {
    store: Arc<NodeStore>,
    metrics: Arc<Metrics>,
    desired_interval_seconds: f64,
    closing: Option<watch::Receiver<bool>>,
}

impl IngestService {
    /// A service storing into `store`. `desired_interval_seconds` is pushed back to agents
    /// in every ack (0: no preference).
    pub fn new(
        store: Arc<NodeStore>,
        metrics: Arc<Metrics>,
        desired_interval_seconds: f64,
    ) -> Self {
        IngestService {
            store,
            metrics,
            desired_interval_seconds,
            closing: None,
        }
    }

    /// Ends agent streams when `closing` turns true, so agents move to another replica and
    /// a graceful shutdown is not held open by them.
    pub fn with_closing(mut self, closing: watch::Receiver<bool>) -> Self {
        self.closing = Some(closing);
        self
    }

    /// Handles one report of a stream whose first node was `stream_node`.
    pub fn handle(
        &self,
        stream_node: &mut Option<String>,
        report: pb::NodeReport,
    ) -> pb::ReportAck {
        let sequence = report.sequence;
        let sample_nanos = report.sample_time_unix_nanos;
        let result = match stream_node.as_deref() {
            Some(n) if n != report.node_name => Err(ReportError::NodeChanged {
                expected: n.to_string(),
                got: report.node_name.clone(),
            }),
            _ => {
                let name = report.node_name.clone();
                let r = self.store.apply_report(report, Instant::now());
                if r.is_ok() && stream_node.is_none() {
                    *stream_node = Some(name);
                }
                r
            }
        };
        match result {
            Ok(()) => {
                self.metrics.reports_accepted.inc();
                if let Ok(now) = SystemTime::now().duration_since(UNIX_EPOCH) {
                    let lag = now.as_nanos() as f64 - sample_nanos as f64;
                    if lag >= 0.0 && sample_nanos > 0 {
                        self.metrics.report_lag.observe(lag / 1e9);
                    }
                }
                pb::ReportAck {
                    sequence,
                    accepted: true,
                    reject_reason: String::new(),
                    desired_interval_seconds: self.desired_interval_seconds,
                }
            }
            Err(e) => {
                self.metrics
                    .reports_rejected
                    .get_or_create(&ReasonLabel {
                        reason: e.kind().into(),
                    })
                    .inc();
                debug!(error = %e, "report rejected");
                pb::ReportAck {
                    sequence,
                    accepted: false,
                    reject_reason: e.to_string(),
                    desired_interval_seconds: self.desired_interval_seconds,
                }
            }
        }
    }
}

#[tonic::async_trait]
impl pb::ingest_server::Ingest for IngestService {
    type ReportStream = ReceiverStream<Result<pb::ReportAck, Status>>;

    async fn report(
        &self,
        request: Request<Streaming<pb::NodeReport>>,
    ) -> Result<Response<Self::ReportStream>, Status> {
        let peer = request.remote_addr();
        let mut inbound = request.into_inner();
        let (tx, rx) = mpsc::channel(32);
        let this = self.clone();
        let span = info_span!("ingest_stream", peer = ?peer, node = tracing::field::Empty);
        tokio::spawn(
            async move {
                this.metrics.ingest_streams.inc();
                let mut node: Option<String> = None;
                let closed = crate::shutdown::closed(this.closing.clone());
                tokio::pin!(closed);
                loop {
                    let next = tokio::select! {
                        m = inbound.message() => m,
                        _ = &mut closed => {
                            info!("scorer shutting down; ending agent stream");
                            break;
                        }
                    };
                    match next {
                        Ok(Some(report)) => {
                            let ack = this.handle(&mut node, report);
                            if let Some(n) = &node {
                                tracing::Span::current().record("node", n.as_str());
                            }
                            if tx.send(Ok(ack)).await.is_err() {
                                break; // The agent went away.
                            }
                        }
                        Ok(None) => break,
                        Err(status) => {
                            warn!(code = ?status.code(), message = %status.message(), "agent stream broken");
                            this.metrics
                                .reports_rejected
                                .get_or_create(&ReasonLabel {
                                    reason: "stream".into(),
                                })
                                .inc();
                            break;
                        }
                    }
                }
                this.metrics.ingest_streams.dec();
                info!("agent stream closed");
            }
            .instrument(span),
        );
        Ok(Response::new(ReceiverStream::new(rx)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use loadstar_store::StoreConfig;
    use loadstar_testkit::agent::fixed_report as report;

    #[test]
    fn stream_may_not_change_node() {
        let svc = IngestService::new(
            Arc::new(NodeStore::new(StoreConfig::default())),
            Metrics::new(),
            1.0,
        );
        let mut node = None;
        assert!(svc.handle(&mut node, report("a", 1, 0.1, 0.1)).accepted);
        let ack = svc.handle(&mut node, report("b", 2, 0.1, 0.1));
        assert!(!ack.accepted);
        assert_eq!(
            ack.reject_reason,
            "stream for node a sent a report for node b"
        );
        let mut bad = report("a", 3, 0.1, 0.1);
        bad.capacity = None;
        let ack = svc.handle(&mut node, bad);
        assert_eq!(ack.reject_reason, "node a: capacity is missing");
        assert!(svc.handle(&mut node, report("a", 4, 0.1, 0.1)).accepted);
    }
}
