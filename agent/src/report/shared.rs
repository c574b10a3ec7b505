//! What every task of the reporter shares: the latest-value channel the sampler publishes
//! reports into, and the settings and metrics of every stream ([`Shared`]).
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use loadstar_proto::pb;
use tokio::sync::watch;
use tonic::transport::Certificate;

use crate::metrics::AgentMetrics;
use loadstar_common::backoff::BackoffConfig;

/// The channel the sampler publishes into; `None` until the first sample.
pub type ReportSender = watch::Sender<Option<Arc<pb::NodeReport>>>;
/// A receiver of [`ReportSender`].
pub type ReportReceiver = watch::Receiver<Option<Arc<pb::NodeReport>>>;

/// What every task of the reporter shares.
pub(super) struct Shared {
    pub(super) token_file: Option<PathBuf>,
    pub(super) ca: Option<Certificate>,
    pub(super) backoff: BackoffConfig,
    pub(super) connect_timeout: Duration,
    pub(super) resolve_interval: Duration,
    pub(super) ack_interval: Duration,
    pub(super) metrics: AgentMetrics,
}

/// Waits until the sender of `rx` is dropped.
pub(super) async fn closed(rx: &mut ReportReceiver) {
    while rx.changed().await.is_ok() {}
}
