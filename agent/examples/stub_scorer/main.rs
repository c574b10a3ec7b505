//! A minimal `loadstar.v1.Ingest` server for trying the agent by hand and for the footprint
//! benchmark: acks every report (rejecting those whose usage or capacity does not validate)
//! and prints a one-line summary of each unless `--quiet`.
//!
//! `cargo run -p loadstar-agent --example stub_scorer -- 127.0.0.1:50051 [--quiet]`
use std::future::Future;

use loadstar_proto::convert::{capacity_from_proto, load_from_proto};
use loadstar_proto::pb;
use tokio_stream::StreamExt;
use tonic::{Request, Status, Streaming};

mod ingest;

use ingest::{Acks, Scorer};

/// Validates, prints and acks every report.
struct Printer {
    quiet: bool,
}

impl Scorer for Printer {
    fn accept(
        &self,
        request: Request<Streaming<pb::NodeReport>>,
        acks: Acks,
    ) -> Result<impl Future<Output = ()> + Send + 'static, Status> {
        let peer = request.remote_addr();
        let quiet = self.quiet;
        let mut inbound = request.into_inner();
        Ok(async move {
            while let Some(Ok(r)) = inbound.next().await {
                let verdict = load_from_proto(&r.usage).map(|_| ()).and_then(|_| {
                    capacity_from_proto(&r.capacity.clone().unwrap_or_default()).map(|_| ())
                });
                if !quiet {
                    println!("{peer:?} {}", summary(&r));
                }
                let ack = pb::ReportAck {
                    sequence: r.sequence,
                    accepted: verdict.is_ok(),
                    reject_reason: verdict.err().map(|e| e.to_string()).unwrap_or_default(),
                    desired_interval_seconds: 0.0,
                };
                if acks.send(Ok(ack)).await.is_err() {
                    break;
                }
            }
        })
    }
}

/// One line per report: node, sequence, each resource's latest ratio and sample count, and
/// the number of devices, pods and errors.
fn summary(r: &pb::NodeReport) -> String {
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
    format!(
        "node={} seq={} {} nics={} disks={} gpus={} pods={} errors={:?}",
        r.node_name,
        r.sequence,
        usage.join(" "),
        r.nics.len(),
        r.disks.len(),
        r.gpus.len(),
        r.pods.len(),
        r.collector_errors
    )
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
        .add_service(ingest::service(Printer { quiet }))
        .serve_with_incoming_shutdown(incoming, async move {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
        })
        .await?;
    Ok(())
}
