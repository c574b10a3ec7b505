//! A minimal `loadstar.v1.Ingest` server for trying the agent by hand and for the footprint
//! benchmark: acks every report (rejecting those whose usage or capacity does not validate)
//! and prints a one-line summary of each unless `--quiet`.
//!
//! `cargo run -p loadstar-agent --example stub_scorer -- 127.0.0.1:50051 [--quiet]`
use std::pin::Pin;

use loadstar_common::convert::{capacity_from_proto, load_from_proto};
use loadstar_common::pb;
use loadstar_common::pb::ingest_server::{Ingest, IngestServer};
use tokio_stream::{Stream, StreamExt};
use tonic::{Request, Response, Status, Streaming};

struct Stub {
    quiet: bool,
}

type AckStream = Pin<Box<dyn Stream<Item = Result<pb::ReportAck, Status>> + Send>>;

#[tonic::async_trait]
impl Ingest for Stub {
    type ReportStream = AckStream;

    async fn report(
        &self,
        request: Request<Streaming<pb::NodeReport>>,
    ) -> Result<Response<AckStream>, Status> {
        let peer = request.remote_addr();
        let quiet = self.quiet;
        let mut inbound = request.into_inner();
        let acks = async_stream(move |tx| async move {
            while let Some(Ok(r)) = inbound.next().await {
                let verdict = load_from_proto(&r.usage).map(|_| ()).and_then(|_| {
                    capacity_from_proto(&r.capacity.clone().unwrap_or_default()).map(|_| ())
                });
                if !quiet {
                    let usage: Vec<String> = r
                        .usage
                        .iter()
                        .map(|u| {
                            let name = pb::Resource::try_from(u.resource)
                                .map(|r| {
                                    r.as_str_name()
                                        .trim_start_matches("RESOURCE_")
                                        .to_lowercase()
                                })
                                .unwrap_or_default();
                            let n = u.windows.first().map_or(0, |w| w.sample_count);
                            format!("{name}={:.3}(n={n})", u.latest_ratio)
                        })
                        .collect();
                    println!(
                        "{peer:?} node={} seq={} {} nics={} disks={} gpus={} pods={} errors={:?}",
                        r.node_name,
                        r.sequence,
                        usage.join(" "),
                        r.nics.len(),
                        r.disks.len(),
                        r.gpus.len(),
                        r.pods.len(),
                        r.collector_errors
                    );
                }
                let ack = pb::ReportAck {
                    sequence: r.sequence,
                    accepted: verdict.is_ok(),
                    reject_reason: verdict.err().map(|e| e.to_string()).unwrap_or_default(),
                    desired_interval_seconds: 0.0,
                };
                if tx.send(Ok(ack)).await.is_err() {
                    break;
                }
            }
        });
        Ok(Response::new(Box::pin(acks)))
    }
}

/// A stream fed by a task through a bounded channel.
fn async_stream<F, Fut>(
    f: F,
) -> tokio_stream::wrappers::ReceiverStream<Result<pb::ReportAck, Status>>
where
    F: FnOnce(tokio::sync::mpsc::Sender<Result<pb::ReportAck, Status>>) -> Fut,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(16);
    tokio::spawn(f(tx));
    tokio_stream::wrappers::ReceiverStream::new(rx)
}

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let addr = args.next().unwrap_or_else(|| "127.0.0.1:50051".into());
    let quiet = args.any(|a| a == "--quiet");
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    eprintln!("stub scorer listening on {}", listener.local_addr()?);
    let incoming = tokio_stream::wrappers::TcpListenerStream::new(listener);
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    tonic::transport::Server::builder()
        .add_service(IngestServer::new(Stub { quiet }))
        .serve_with_incoming_shutdown(incoming, async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
        .await?;
    Ok(())
}
