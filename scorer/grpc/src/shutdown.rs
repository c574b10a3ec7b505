//! The server-shutdown signal that long-lived streams (agent ingest, node watches) wait on,
//! so they end when the server stops taking work.
use tokio::sync::watch;

/// Resolves when `closing` turns true (never, without a signal).
pub async fn closed(mut closing: Option<watch::Receiver<bool>>) {
    closed_by(&mut closing).await;
}

/// Like [`closed`], borrowing the receiver: a stream that waits on the signal again and again
/// keeps only its receiver between waits, not a boxed future (~0.2 KB per agent stream).
pub async fn closed_by(closing: &mut Option<watch::Receiver<bool>>) {
    match closing {
        Some(rx) => {
            if rx.wait_for(|c| *c).await.is_err() {
                // The server is gone without signalling: treat as closed.
            }
        }
        None => std::future::pending::<()>().await,
    }
}
