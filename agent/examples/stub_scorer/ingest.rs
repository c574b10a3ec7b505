//! The `loadstar.v1.Ingest` service of a stub scorer, written once: each `Report` stream is
//! handed to a [`Scorer`], which decides what to do with it. Shared by the `stub_scorer`
//! example (`main.rs` beside this file) and the agent's integration tests
//! (`tests/tests/agent_report.rs` includes this file as a module).
use std::future::Future;
use std::pin::Pin;

use loadstar_proto::pb;
use loadstar_proto::pb::ingest_server::{Ingest, IngestServer};
use tokio::sync::mpsc;
use tokio_stream::Stream;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{Request, Response, Status, Streaming};

/// Where a stream's acks go: the response stream ends once the sender is dropped.
pub type Acks = mpsc::Sender<Result<pb::ReportAck, Status>>;

/// What a stub scorer does with each `Report` stream.
pub trait Scorer: Send + Sync + 'static {
    /// Accepts a stream, or refuses it with a status. An accepted stream is served by the
    /// returned task, which reads the reports and answers into `acks`; it runs on its own.
    fn accept(
        &self,
        request: Request<Streaming<pb::NodeReport>>,
        acks: Acks,
    ) -> Result<impl Future<Output = ()> + Send + 'static, Status>;
}

/// `loadstar.v1.Ingest` served by `scorer`.
pub fn service<S: Scorer>(scorer: S) -> IngestServer<Stub<S>> {
    IngestServer::new(Stub(scorer))
}

/// The `Ingest` implementation around a [`Scorer`].
pub struct Stub<S>(S);

type AckStream = Pin<Box<dyn Stream<Item = Result<pb::ReportAck, Status>> + Send>>;

#[tonic::async_trait]
impl<S: Scorer> Ingest for Stub<S> {
    type ReportStream = AckStream;

    async fn report(
        &self,
        request: Request<Streaming<pb::NodeReport>>,
    ) -> Result<Response<AckStream>, Status> {
        let (acks, rx) = mpsc::channel(16);
        tokio::spawn(self.0.accept(request, acks)?);
        Ok(Response::new(Box::pin(ReceiverStream::new(rx))))
    }
}
